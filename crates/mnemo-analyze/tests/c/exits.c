/* Paths that end the process. Types written only where the process ends next, or only in
 * functions reached through functions that cannot return, are flagged as likely false
 * positives (a checker that runs on a corrupt file and quits). */
#include <stdio.h>
#include <stdlib.h>

struct state {
    int loaded;
};

/* Written by the checker, which the loader calls only right before exit(1). */
struct report {
    int errors;
};

/* Written only right before exit(1). */
struct note {
    int code;
};

/* Written on a path that exits and on one that does not: persistent. */
struct both {
    int n;
};

/* Written only under a function whose every path ends in abort(). */
struct logged {
    int lines;
};

/* Written only under a function declared _Noreturn. */
struct crash {
    int sig;
};

/* Written only under a function declared __attribute__((noreturn)). */
struct last_words {
    int said;
};

/* Like redis-check-rdb's main: returns when it has a file to report to, else exits. */
static int check_main(struct report *r, FILE *fp)
{
    r->errors++;
    if (fp)
        return 0;
    exit(1);
}

/* Like rdbReportError: one path returns, the others end in exit(1). */
static void report_error(struct report *r, struct note *n, struct both *b, int mode)
{
    if (mode == 0) {
        return;
    } else if (mode == 1) {
        check_main(r, NULL);
    } else {
        n->code = 1;
        b->n = 2;
    }
    exit(1);
}

static void log_line(struct logged *l)
{
    l->lines++;
}

/* Cannot return: the loop falls through to abort(). */
static void fatal(struct logged *l)
{
    for (int i = 0; i < 2; i++) {
        log_line(l);
    }
    abort();
}

static void fill_crash(struct crash *c)
{
    c->sig = 11;
}

_Noreturn static void crash_exit(struct crash *c)
{
    fill_crash(c);
    for (;;) {
    }
}

static void say(struct last_words *w)
{
    w->said = 1;
}

__attribute__((noreturn)) void goodbye(struct last_words *w);

void goodbye(struct last_words *w)
{
    say(w);
    for (;;) {
    }
}

int load(struct state *s, struct report *r, struct note *n, struct both *b, struct logged *l,
         struct crash *c, struct last_words *w, int fd)
{
    if (fd < 0)
        report_error(r, n, b, fd);
    if (fd == 1)
        fatal(l);
    if (fd == 2)
        crash_exit(c);
    if (fd == 3)
        goodbye(w);
    b->n = 1;
    s->loaded = 1;
    return 0;
}
