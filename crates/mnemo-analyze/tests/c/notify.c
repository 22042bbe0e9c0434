/* Notification: after storing each record it reads, the load tells others about it. Module
 * subscribers get a callback, run with a context and a client made for the call (Redis's
 * `moduleNotifyKeyspaceEvent`), and the change is queued for replicas
 * (`replicationFeedSlaves`). What those calls write is the observers' state, not what is
 * loaded: `subscriber`, `client`, `repl_block` and `reply_block` are flagged `notification`
 * (the context is a local variable: `stack-only`), and the load's timing, recorded by
 * `latency_add_sample`, is flagged `measurement`. The record type and the table holding the records stay persistent, and so
 * do the look-alikes below. */
#include <stddef.h>

void *malloc(size_t n);
void free(void *p);

struct item {
    int key;
    int val;
};

struct table {
    struct item *slots[64];
    int count;
};

struct table db;

struct reply_block {
    int used;
};

struct client {
    int flags;
    struct reply_block *reply;
};

struct context {
    struct client *client;
    int depth;
};

struct subscriber {
    int active;
    void (*callback)(struct context *ctx, int key);
    struct subscriber *next;
};

struct subscriber *subscribers;

struct repl_block {
    int used;
    char buf[64];
};

struct repl_block *backlog;

/* A queue written both by the load itself and beneath a notifier: it stays. */
struct queue {
    int pending;
};

struct queue ready;

/* A counter named like a notifier's but returning a value the load uses: no notifier. */
struct gate {
    int open;
};

struct gate gate;

/* Built by the load to replay each record and freed before it returns (released), and built
 * by the notifier too, which keeps its objects in a pool: what the notifier keeps does not make
 * the load's own object last, so the type is flagged `released`. */
struct replay {
    int argc;
};

struct replay *pool[4];
int pooled;

struct replay *create_replay(void)
{
    struct replay *r = malloc(sizeof(*r));
    r->argc = 0;
    return r;
}

void free_replay(struct replay *r)
{
    free(r);
}

void replay_one(const struct item *it)
{
    struct replay *r = create_replay();
    r->argc = it->key;
    free_replay(r);
}

/* The load times itself: a measurement of how the program ran, flagged `measurement`. */
struct latency_series {
    long max;
    int idx;
    long samples[16];
};

struct latency_series load_latency;

void latency_add_sample(const char *event, long took)
{
    if (event != NULL && took > load_latency.max)
        load_latency.max = took;
    load_latency.samples[load_latency.idx++ & 15] = took;
}

struct client *create_client(void)
{
    struct client *c = malloc(sizeof(*c));
    c->flags = 0;
    c->reply = malloc(sizeof(struct reply_block));
    c->reply->used = 0;
    return c;
}

void free_client(struct client *c)
{
    free(c->reply);
    free(c);
}

void context_init(struct context *ctx)
{
    ctx->client = create_client();
    ctx->depth = 1;
}

void context_free(struct context *ctx)
{
    ctx->client->flags |= 1;
    free_client(ctx->client);
}

void notify_loaded(const struct item *it)
{
    struct subscriber *sub;
    for (sub = subscribers; sub != NULL; sub = sub->next) {
        struct context ctx;
        context_init(&ctx);
        struct replay *r = create_replay();
        r->argc = 1;
        pool[pooled++ & 3] = r;
        sub->active = 1;
        sub->callback(&ctx, it->key);
        sub->active = 0;
        context_free(&ctx);
        ready.pending++;
    }
}

void replicate_change(const struct item *it)
{
    if (backlog == NULL) {
        backlog = malloc(sizeof(struct repl_block));
        backlog->used = 0;
    }
    backlog->buf[backlog->used++] = (char)it->key;
}

int signal_gate(struct gate *g)
{
    g->open = 1;
    return g->open;
}

int load_items(const int *keys, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        struct item *it = malloc(sizeof(*it));
        it->key = keys[i];
        it->val = 0;
        db.slots[db.count++] = it;
        ready.pending--;
        replay_one(it);
        notify_loaded(it);
        replicate_change(it);
    }
    latency_add_sample("load", n);
    return signal_gate(&gate);
}
