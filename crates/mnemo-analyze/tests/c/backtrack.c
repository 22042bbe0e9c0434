/* The backtracking strategy: from file-writing calls back to the types serialized. */
#include <stdio.h>
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
