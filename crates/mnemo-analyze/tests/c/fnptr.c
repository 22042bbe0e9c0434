/* Calls through function pointers cannot be followed: they are reported as unresolved. */
struct state {
    int v;
};

struct ops {
    void (*restore)(struct state *);
};

typedef void (*restore_fn)(struct state *);

void restore_impl(struct state *s)
{
    s->v = 1;
}

int load(struct ops *ops, struct state *s, restore_fn fn)
{
    ops->restore(s);
    fn(s);
    (*fn)(s);
    return 0;
}

/* restore_impl's address is taken here: it is the candidate target of the calls above. */
struct ops default_ops = {restore_impl};

/* Another function of the same type whose address is never taken: not a candidate. */
void restore_other(struct state *s)
{
    s->v = 2;
}
