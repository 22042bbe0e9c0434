/* Writes spelled inside macro bodies, where libclang does not show the operator. */
struct lst {
    void (*free)(void *);
    int n;
    int *p;
};

#define setFree(l, m) ((l)->free = (m))
#define bump(l) ((l)->n++)
#define addr(l) (&(l)->n)
#define cmp(l) ((l)->n == 3)
#define add(l) ((l)->n + 3)
#define deref(l) (*(l)->p)

/* Reads through macros: nothing written. */
int reads(struct lst *l)
{
    int *q = addr(l);
    return *q + cmp(l) + add(l) + deref(l);
}

/* An assignment inside a macro body. */
void assigns(struct lst *l)
{
    setFree(l, 0);
}

/* An increment inside a macro body. */
void increments(struct lst *l)
{
    bump(l);
}
