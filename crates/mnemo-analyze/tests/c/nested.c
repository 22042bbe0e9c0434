/* Struct members of struct members: which records does a nested member write modify? */
struct inner {
    int count;
    char tag[8];
};

struct middle {
    struct inner in;
    int flags;
};

struct outer {
    struct middle mid;
    struct inner *ext;
};

struct holder {
    struct inner items[4];
};

/* inner (field count), middle and outer (they embed it by value). */
void nested_chain(struct outer *o)
{
    o->mid.in.count = 1;
}

/* inner is written; outer holds a pointer to it, so outer's bytes do not change, but outer is
 * the container that reaches it (a reached container). */
void through_pointer(struct outer *o)
{
    o->ext->count = 2;
}

/* inner, and holder through its embedded array. */
void embedded_array(struct holder *h)
{
    h->items[2].count++;
}

/* Whole-struct assignment: the object written is a struct inner inside middle. */
void whole_member(struct middle *m, struct inner value)
{
    m->in = value;
}
