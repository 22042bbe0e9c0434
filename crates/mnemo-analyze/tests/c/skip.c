/* Functions without pointer arguments are skipped; the C library is not entered. */
#include <string.h>

struct counter {
    int n;
};

struct by_value {
    int m;
};

struct counter global_counter;

static void bump_global(void)
{
    global_counter.n++;
}

static void bump_scalar(int by)
{
    global_counter.n += by;
}

static void bump_ptr(struct counter *c)
{
    c->n++;
}

static int by_value_copy(struct by_value v)
{
    v.m = 1;
    return v.m;
}

int load(struct counter *c, const char *name)
{
    struct by_value v = {0};
    bump_global();
    bump_scalar(2);
    bump_ptr(c);
    return by_value_copy(v) + (int)strlen(name);
}

/* A load function is analyzed even without arguments: the user named it. */
void load_noargs(void)
{
    global_counter.n = 0;
}

/* A constructor without arguments is visited all the same: it allocates a record, and what it
 * builds is what loading keeps (Redis's createZsetObject(void)). */
struct made {
    int ready;
};

struct made *made_new(void)
{
    struct made *m = __builtin_malloc(sizeof *m);
    m->ready = 1;
    return m;
}

void load_made(void)
{
    made_new();
}
