struct kept {
    int v;
};

void load_kept(struct kept *k)
{
    k->v = 1;
}
