/* Parsed with the flags of compile_commands.json: WITH_STATE must be defined. */
#ifdef WITH_STATE
struct state {
    int v;
};

void load(struct state *s)
{
    s->v = 1;
}
#endif
