/* Objects released before loading ends. A replay client exists only while a log is replayed:
 * it is created through two constructors, held in a local and in a global while commands run
 * through it, and freed before the load function returns (the global is restored). Its type
 * and the state embedded in it are flagged `released`, and so is a type written only through
 * null pointers (no object at all). The look-alikes below survive loading one way or another
 * and must stay persistent. */
#include <stdlib.h>

struct multi_state {
    int count;
    long flags;
};

struct client {
    int argc;
    char **argv;
    struct multi_state mstate;
};

/* The data set, written through the replay client's commands: persistent. */
struct store {
    long keys;
    long dirty;
};

/* Kept in a global list. */
struct session {
    int id;
    struct session *next;
};

/* "Released" to a pool that keeps it: the releasing function never frees it. */
struct pooled {
    int uses;
};

/* One constructor, two callers: one frees its object, the other keeps it. */
struct worker {
    int jobs;
};

/* Freed, unless a goto jumps over the free to a label that keeps it. */
struct blob {
    int len;
};

/* Freed, unless an early return keeps it first. */
struct temp {
    int n;
};

/* Written only through a null pointer: `conn_set(NULL, ...)`. */
struct conn {
    int fd;
};

/* Written through a null pointer and through a global: persistent. */
struct link {
    int peer;
};

/* Freed on one branch of an `if`, kept on the other. */
struct draft {
    int lines;
};

/* Looked up in a global table and "released" by a reference count: the last reference may be
 * freed, but this one is not the last. */
struct account {
    int refs;
    long balance;
};

struct store db;
struct account accounts[16];
struct link links[4];
struct client *current_client;
struct session *sessions;
struct pooled *pool[8];
int pool_len;
struct worker *workers;
struct blob *last_blob;
struct temp *kept_temp;
struct draft *kept_draft;

static struct client *create_client(void)
{
    struct client *c = malloc(sizeof(*c));
    c->argc = 0;
    c->argv = NULL;
    c->mstate.count = 0;
    c->mstate.flags = 0;
    return c;
}

static struct client *create_replay_client(void)
{
    struct client *c = create_client();
    c->argc = -1;
    return c;
}

static void free_client(struct client *c)
{
    free(c->argv);
    free(c);
}

static void queue_command(struct client *c, long flags)
{
    c->mstate.count++;
    c->mstate.flags |= flags;
}

static void conn_set(struct conn *cn, int fd)
{
    if (cn)
        cn->fd = fd;
}

static void link_set(struct link *l, int peer)
{
    if (l)
        l->peer = peer;
}

static void apply(struct client *c, struct store *s)
{
    s->keys += c->argc;
    s->dirty++;
}

int replay(int n)
{
    struct client *fake;
    struct client *old = current_client;
    fake = current_client = create_replay_client();
    conn_set(NULL, -1);
    link_set(NULL, -1);
    link_set(&links[0], 1);
    for (int i = 0; i < n; i++) {
        fake->argc = i;
        queue_command(fake, 1);
        apply(fake, &db);
    }
    if (n < 0)
        goto cleanup;
    fake->argc = 0;
cleanup:
    if (fake)
        free_client(fake);
    current_client = old;
    return 0;
}

static struct session *new_session(int id)
{
    struct session *s = malloc(sizeof(*s));
    s->id = id;
    s->next = NULL;
    return s;
}

static void register_session(struct session *s)
{
    s->next = sessions;
    sessions = s;
}

static struct pooled *pool_get(void)
{
    struct pooled *p = malloc(sizeof(*p));
    p->uses = 0;
    return p;
}

static void pool_release(struct pooled *p)
{
    p->uses++;
    pool[pool_len++] = p;
}

static struct worker *new_worker(void)
{
    struct worker *w = malloc(sizeof(*w));
    w->jobs = 0;
    return w;
}

static void free_worker(struct worker *w)
{
    free(w);
}

int load_sessions(int n)
{
    for (int i = 0; i < n; i++) {
        struct session *s = new_session(i);
        register_session(s);
    }
    struct pooled *p = pool_get();
    p->uses = 1;
    pool_release(p);
    struct worker *w = new_worker();
    w->jobs = 1;
    free_worker(w);
    struct worker *k = new_worker();
    workers = k;
    return n;
}

static struct blob *new_blob(void)
{
    struct blob *b = malloc(sizeof(*b));
    b->len = 0;
    return b;
}

static void free_blob(struct blob *b)
{
    free(b);
}

int load_blob(int n)
{
    struct blob *b = new_blob();
    b->len = n;
    if (n > 3)
        goto keep;
    free_blob(b);
    return 0;
keep:
    last_blob = b;
    return 1;
}

static struct temp *new_temp(void)
{
    struct temp *t = malloc(sizeof(*t));
    t->n = 0;
    return t;
}

static void free_temp(struct temp *t)
{
    free(t);
}

int load_temp(int n)
{
    struct temp *t = new_temp();
    t->n = n;
    if (n > 3) {
        kept_temp = t;
        return 1;
    }
    free_temp(t);
    return 0;
}

static struct draft *new_draft(void)
{
    struct draft *d = malloc(sizeof(*d));
    d->lines = 0;
    return d;
}

static void free_draft(struct draft *d)
{
    free(d);
}

int load_draft(int n)
{
    struct draft *d = new_draft();
    d->lines = n;
    if (n > 3)
        free_draft(d);
    else
        kept_draft = d;
    return 0;
}

static struct account *find_account(int id)
{
    return &accounts[id & 15];
}

static void account_release(struct account *a)
{
    if (--a->refs == 0)
        free(a);
}

int load_account(int id)
{
    struct account *a = find_account(id);
    a->balance += 1;
    account_release(a);
    return 0;
}
