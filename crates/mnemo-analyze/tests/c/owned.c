/* Memory that only a released object's own field holds ends with that object. The replayed
 * client queues commands in an array that its field `st.commands` alone points to (every store
 * into the field, anywhere in the program, is an allocator's result or a null pointer, or, in a
 * local object, the address of a local of the same function): `struct cmd` is flagged
 * `released` with the client. Its field `note` also gets the address of a global, so what it
 * points to may be shared: `struct note` stays. So does `struct tag`: its field `tag` gets only
 * fresh memory, but its address is taken (`&c->tag`), through which it may get anything. */
#include <stddef.h>

void *malloc(size_t n);
void *realloc(void *p, size_t n);
void free(void *p);

struct cmd {
    int argc;
};

struct state {
    struct cmd *commands;
    int count;
};

struct note {
    int seen;
};

struct note board;

struct tag {
    int id;
};

struct client {
    struct state st;
    struct note *note;
    struct tag *tag;
};

/* Not on the load path: hands out the field's address. */
void swap_tag(struct tag **slot, struct tag *other)
{
    *slot = other;
}

void retag(struct client *c, struct tag *other)
{
    swap_tag(&c->tag, other);
}

struct client *create_client(void)
{
    struct client *c = malloc(sizeof(*c));
    c->st.commands = NULL;
    c->st.count = 0;
    c->note = NULL;
    c->tag = malloc(sizeof(struct tag));
    return c;
}

void free_client(struct client *c)
{
    free(c->st.commands);
    free(c);
}

void queue(struct client *c, int argc)
{
    c->st.commands = realloc(c->st.commands, sizeof(struct cmd) * (c->st.count + 1));
    struct cmd *mc = c->st.commands + c->st.count;
    mc->argc = argc;
    c->st.count++;
}

void remember(struct client *c)
{
    c->note = &board;
}

void mark(struct client *c)
{
    c->note->seen = 1;
    c->tag->id = 7;
}

/* Not on the load path: a state on the stack pointing at a command on the same stack. */
int peek(const int *argv)
{
    struct state s;
    struct cmd one;
    s.commands = &one;
    s.count = 1;
    return s.count + argv[0];
}

int replay(const int *argv, int n)
{
    struct client *c = create_client();
    queue(c, argv[0] + n);
    remember(c);
    mark(c);
    free_client(c);
    return 0;
}
