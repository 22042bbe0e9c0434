#include "missing.h"

struct partial {
    int w;
};

void also_load(struct partial *p)
{
    p->w = 2;
    this is not C;
}
