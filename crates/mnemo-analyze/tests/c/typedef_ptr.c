/* Writes through typedef'd pointers, and an anonymous struct known only by its typedef. */
typedef struct node {
    int key;
    struct node *next;
} node_t;
typedef node_t *node_ptr;
typedef node_ptr *node_pp;

typedef struct {
    int x;
} anon_t;
typedef anon_t *anon_ptr;

struct untouched {
    int z;
};

static void set_key(node_ptr n, int k)
{
    n->key = k;
}

static void set_anon(anon_ptr a)
{
    a->x = 1;
}

static void via_pp(node_pp pp)
{
    (*pp)->next = 0;
}

static int read_only(const struct untouched *u)
{
    int z = u->z;
    return z;
}

int load(node_ptr n, anon_ptr a, node_pp pp, struct untouched *u)
{
    set_key(n, 3);
    set_anon(a);
    via_pp(pp);
    return read_only(u);
}
