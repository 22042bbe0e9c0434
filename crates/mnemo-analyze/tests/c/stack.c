/* Objects on the stack: loading machinery (a reader, a context) lives in local variables of
 * the load functions and ends with them; it is flagged stack-only. */
struct rio {
    int fd;
    long pos;
};

struct ctx {
    int dbid;
    long loaded;
};

struct entry {
    int key;
};

struct table {
    struct entry *slots;
    int n;
};

static void rio_init(struct rio *r, int fd)
{
    r->fd = fd;
    r->pos = 0;
}

static void rio_read(struct rio *r)
{
    r->pos++;
}

/* r is always a stack object here (forwarded from load's local); e never is. */
static void fill(struct rio *r, struct entry *e)
{
    rio_read(r);
    e->key = r->fd;
}

int load(struct table *t, int fd)
{
    struct rio r;
    struct ctx c = {.dbid = 0, .loaded = 0};
    struct entry first = {0};
    rio_init(&r, fd);
    for (int i = 0; i < t->n; i++) {
        fill(&r, &t->slots[i]);
        c.loaded++;
    }
    t->slots[0] = first;
    return (int)c.loaded;
}
