/* Byte-level writes: string headers written through `unsigned char *` (Redis's sds), and a
 * struct's bytes written through a `char *` cast of its address. The header structs are only
 * named in `sizeof`, through a helper that returns the size of the header for a type. */
#include <stdlib.h>
#include <string.h>

struct hdr5 {
    unsigned char flags;
    char buf[];
};

struct hdr8 {
    unsigned char len;
    unsigned char alloc;
    unsigned char flags;
    char buf[];
};

struct item {
    int refcount;
    long value;
};

/* Only named in the size of a memset of a local buffer: not written. */
struct other {
    int x;
    int y;
};

static int hdr_size(char type)
{
    switch (type) {
    case 0:
        return sizeof(struct hdr5);
    case 1:
        return sizeof(struct hdr8);
    }
    return 0;
}

char *str_new(const char *init, size_t len)
{
    char type = len < 32 ? 0 : 1;
    int hdrlen = hdr_size(type);
    void *sh = malloc(hdrlen + len + 1);
    char *s = (char *)sh + hdrlen;
    unsigned char *fp = ((unsigned char *)s) - 1;
    *fp = type | (len << 3);
    memcpy(s, init, len);
    return s;
}

static void item_mark(struct item *it)
{
    ((char *)it)[0] = 1;
}

struct item *item_new(void)
{
    struct item *it = malloc(sizeof *it);
    return it;
}

int load(const char *data, size_t len, struct item *it)
{
    char scratch[16];
    char *s = str_new(data, len);
    item_mark(it);
    memset(scratch, 0, sizeof(struct other));
    return s[0] + scratch[0];
}
