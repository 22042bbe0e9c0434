/* The port checklist: where persistent objects are allocated and where they are changed,
 * while loading and after. */
#include <stdlib.h>
#include <string.h>

struct kv {
    char key[16];
    long value;
    struct kv *next;
};

struct table {
    struct kv *head;
    long count;
};

/* Allocated and freed, never written while loading: not persistent, not on the list. */
struct scratch {
    int tmp;
};

/* Hands out untyped memory from the allocator: its callers decide the type. */
static void *pool_get(size_t size)
{
    void *p = malloc(size);
    return p;
}

static struct kv *kv_new(const char *key, long value)
{
    struct kv *e = calloc(1, sizeof(struct kv));
    strncpy(e->key, key, sizeof e->key - 1);
    e->value = value;
    return e;
}

static void table_put(struct table *t, const char *key, long value)
{
    struct kv *e = kv_new(key, value);
    e->next = t->head;
    t->head = e;
    t->count++;
}

int load(struct table *t, const char **keys, const long *values, int n)
{
    for (int i = 0; i < n; i++)
        table_put(t, keys[i], values[i]);
    return 0;
}

/* After loading: a command that changes the data. */
void cmd_incr(struct table *t, const char *key)
{
    for (struct kv *e = t->head; e; e = e->next)
        if (strcmp(e->key, key) == 0)
            e->value++;
}

/* Typed through the wrapper: an allocation site of kv. Not kv_new's callers (table_put):
 * kv_new returns calloc's memory too, but types it as a kv itself. */
struct kv *kv_spare(void)
{
    struct kv *spare = (struct kv *)pool_get(sizeof(struct kv));
    return spare;
}

struct table *table_new(void)
{
    struct table *t = (struct table *)malloc(sizeof *t);
    struct scratch *s = malloc(sizeof *s);
    /* An array of pointers to kv: not an allocation of kv. */
    struct kv **index = malloc(sizeof(struct kv *) * 8);
    free(index);
    t->head = NULL;
    t->count = 0;
    free(s);
    return t;
}

/* Allocates a kv and hands the memory out (memcached's do_item_alloc_pull): a caller that
 * casts it to another type allocates that type there. */
static struct kv *kv_pull(void)
{
    struct kv *k = malloc(sizeof(struct kv));
    return k;
}

struct table *table_from_pull(void)
{
    struct table *t = (struct table *)kv_pull();
    return t;
}
