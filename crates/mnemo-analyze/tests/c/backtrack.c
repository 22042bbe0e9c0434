/* The backtracking strategy: from file-writing calls back to the types serialized. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct config {
    int port;
    char name[32];
};

struct metrics {
    long hits;
};

struct secret {
    int key;
};

struct raw {
    int a;
    int b;
};

/* config reaches write() through snprintf into a local buffer. */
static void save_config(int fd, struct config *c)
{
    char buf[128];
    int n = snprintf(buf, sizeof buf, "%d %s\n", c->port, c->name);
    write(fd, buf, (size_t)n);
}

/* The buffer is a parameter: backtracking goes up to the callers. */
static void emit(FILE *f, const char *line)
{
    fputs(line, f);
}

static void save_metrics(FILE *f, struct metrics *m)
{
    char line[64];
    sprintf(line, "%ld\n", m->hits);
    emit(f, line);
}

/* A struct written raw. */
static void save_raw(FILE *f, const struct raw *r)
{
    fwrite(r, sizeof *r, 1, f);
}

/* Logging: the backtracking strategy over-reports it. */
static void log_secret(const struct secret *s)
{
    fprintf(stderr, "key %d\n", s->key);
}

int save_all(int fd, FILE *f, struct config *c, struct metrics *m, struct raw *r,
             struct secret *s)
{
    save_config(fd, c);
    save_metrics(f, m);
    save_raw(f, r);
    log_secret(s);
    return 0;
}

int load_all(struct config *c, struct metrics *m, struct raw *r)
{
    c->port = 1;
    m->hits = 0;
    r->a = 0;
    return 0;
}

/* An out-parameter: fill() copies its second argument into its first. */
struct header {
    int magic;
};

struct unrelated {
    char tag[8];
};

static void fill(char *dst, const char *src, unsigned long n)
{
    memcpy(dst, src, n);
}

static void save_header(int fd, const struct header *h)
{
    char buf[16];
    fill(buf, (const char *)h, sizeof *h);
    write(fd, buf, sizeof buf);
}

/* Also calls fill(), but nothing of it is written: must not be reported. */
void keep_tag(struct unrelated *u)
{
    char tmp[8];
    fill(tmp, u->tag, sizeof tmp);
}

int save_more(int fd, struct header *h)
{
    save_header(fd, h);
    return 0;
}
