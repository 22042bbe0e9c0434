/* Likely false positives: iterators and alignment variants. */
struct entry {
    int key;
    int val;
};

struct entry_iter {
    struct entry *cur;
    int pos;
};

struct walker {
    int i;
};

struct entry_aligned {
    int key;
    int val;
} __attribute__((aligned(64)));

struct slot {
    int key;
    int val;
    char pad[4];
};

int load(struct entry *e, struct entry_iter *it, struct walker *w, struct entry_aligned *a,
         struct slot *s)
{
    for (w->i = 0; w->i < 4; w->i++) {
        e[w->i].key = 1;
    }
    it->pos = 0;
    a->key = 1;
    s->val = 2;
    return 0;
}

/* Written while loading only by a function that releases it: clean-up, not state. */
struct handle {
    int open;
};

void free(void *p);

void handle_release(struct handle *h)
{
    h->open = 0;
    free(h);
}

int load_handles(struct entry *e, struct handle *h)
{
    e->key = 1;
    handle_release(h);
    return 0;
}

/* Written while loading only beneath a function that releases memory: `session_free` unlinks
 * the session from a registry of watchers (`registry_unlink` does not release anything itself,
 * but loading reaches it only through `session_free`). A `counter` is written there too, and
 * also while building (`note_loaded`), so it stays. */
struct registry {
    int watchers;
};

struct counter {
    long n;
};

struct session {
    struct registry *reg;
    struct counter *c;
};

void registry_unlink(struct registry *r, struct counter *c)
{
    r->watchers--;
    c->n--;
}

void session_free(struct session *s)
{
    registry_unlink(s->reg, s->c);
    free(s);
}

/* Named like clean-up, but frees nothing: what it writes is state loading builds. */
struct clock {
    long ticks;
};

void freeze_clock(struct clock *k)
{
    k->ticks = 0;
}

void note_loaded(struct counter *c)
{
    c->n++;
}

/* A lookup cache private to one function (a `static` declared inside it), and a constant
 * table whose initializer the compiler places in the image: neither is state that loading
 * builds. The cache's type is flagged; the table's type is not written at run time at all. */
struct cache_slot {
    int id;
    int value;
};

struct ops {
    int (*get)(int);
};

int ops_get(int k)
{
    return k;
}

int lookup(const int *key)
{
    int id = *key;
    static struct cache_slot cache[4];
    static struct ops table = {ops_get};
    cache[id & 3].id = id;
    return table.get(id);
}

int load_sessions(struct entry *e, struct session *s, struct clock *k)
{
    freeze_clock(k);
    e->key = lookup(&e->key);
    note_loaded(s->c);
    session_free(s);
    return 0;
}
