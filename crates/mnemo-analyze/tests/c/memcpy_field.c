/* Library calls that write through a pointer argument. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct header {
    char magic[4];
    int version;
};

struct blob {
    struct header hdr;
    char data[64];
    long len;
    char *heap;
};

struct plain {
    int a;
};

struct line {
    char text[80];
    int number;
};

/* memcpy into a field of a field: header (magic), blob (embeds hdr). */
void load_magic(struct blob *b, const char *src)
{
    memcpy(b->hdr.magic, src, 4);
}

/* memcpy into a scalar field through its address: blob. */
void load_len(struct blob *b, const char *src)
{
    memcpy(&b->len, src + 4, sizeof b->len);
}

/* memcpy through a pointer field: the bytes written are chars on the heap, not the blob. */
void load_heap(struct blob *b, const char *src)
{
    memcpy(b->heap, src, 8);
}

/* read() into a whole struct through a pointer: plain. */
int load_plain(int fd, struct plain *p)
{
    return (int)read(fd, p, sizeof *p);
}

/* fgets into an array field, sscanf into a field's address: line. */
int load_line(FILE *f, struct line *l)
{
    if (fgets(l->text, sizeof l->text, f) == NULL)
        return -1;
    return sscanf(l->text, "%d", &l->number);
}
