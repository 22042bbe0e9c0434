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
