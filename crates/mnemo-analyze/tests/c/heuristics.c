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

void handle_release(struct handle *h)
{
    h->open = 0;
}

int load_handles(struct entry *e, struct handle *h)
{
    e->key = 1;
    handle_release(h);
    return 0;
}
