/*
 * The log-append example of the Mojim paper, on mnemo: each access updates a counter and
 * makes it durable with mnemo_msync (one aligned 8-byte word: atomic), then appends an entry
 * to an application log and updates the log's size, making both durable together with
 * mnemo_gmsync.
 *
 *   mojim POOL append N      do N accesses (MOJIM_ACK=1: print the log size after each)
 *   mojim POOL check TOTAL   check that TOTAL accesses were made, all of them logged
 *   mojim POOL verify ACKED  after a crash: entries complete, counter and size consistent,
 *                            at least ACKED accesses logged
 *
 * Why this is crash-safe even against a power failure. The program stores the entry and
 * the new size with plain stores before calling gmsync, and the CPU may write either back
 * early: a crash just before the call could find the new size on media without its entry.
 * mnemo_gmsync keeps a snapshot of the ranges it synced last (here: the previous entry and
 * the size) and recovery puts it back when a later call did not reach its commit point; so
 * after any crash the size is that of the last completed gmsync, and every entry up to it is
 * complete. The slot being written is never inside the published window (the ring has one
 * spare slot), so a half-written entry is never visible. The program calls gmsync once on
 * the size at start, which (the first time) starts that protection. Entries carry a check word only
 * so that `check` can prove it.
 */
#include <mnemo.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXAMPLE "mojim"
#include "try.h"

#define ENTRIES 64          /* slots; the published window is the last ENTRIES - 1 */

struct entry {
    uint64_t seq;       /* 1, 2, ... */
    char text[48];
    uint64_t check;     /* of seq and text: a torn or missing entry fails it */
};

struct state {
    uint64_t access_count;
    uint64_t log_size;  /* entries appended; the last ENTRIES - 1 are kept */
    uint64_t reserved[6];
    struct entry log[ENTRIES];
};

static mnemo_pool *pool;

static uint64_t check_of(const struct entry *e)
{
    uint64_t h = 1469598103934665603ULL ^ e->seq;
    for (size_t i = 0; i < sizeof e->text; i++)
        h = (h ^ (unsigned char)e->text[i]) * 1099511628211ULL;
    return h | 1; /* never 0: a zeroed slot never checks out */
}

static int entry_ok(const struct entry *e, uint64_t seq)
{
    return e->seq == seq && e->check == check_of(e);
}

static void append_entry(struct state *s);

/* Every run starts with a gmsync of the size: the first one ever starts its all-or-nothing
 * protection (later ones cost one fence and change nothing). Then it logs an access whose
 * entry a crash lost (the counter is synced before the entry). */
static void start(struct state *s)
{
    struct mnemo_range size = { &s->log_size, sizeof s->log_size };
    TRY(mnemo_gmsync(pool, &size, 1));
    /* A crash between an access's counter and its entry: log the access now. */
    while (s->log_size < s->access_count)
        append_entry(s);
}

/* Append the entry of access number log_size + 1 and publish it. */
static void append_entry(struct state *s)
{
    /* The entry first, the size last... */
    uint64_t seq = s->log_size + 1;
    struct entry *e = &s->log[(seq - 1) % ENTRIES];
    e->seq = seq;
    memset(e->text, 0, sizeof e->text);
    snprintf(e->text, sizeof e->text, "access %llu", (unsigned long long)seq);
    e->check = check_of(e);
    s->log_size = seq;

    /* ...and both ranges durable together. */
    struct mnemo_range ranges[2] = {
        { e, sizeof *e },
        { &s->log_size, sizeof s->log_size },
    };
    TRY(mnemo_gmsync(pool, ranges, 2));
}

static void access_once(struct state *s)
{
    /* 1. The access counter: an aligned 8-byte store, durable with one msync. */
    s->access_count++;
    TRY(mnemo_msync(pool, &s->access_count, sizeof s->access_count));
    /* 2. Its log entry. */
    append_entry(s);
}

/* Every published entry complete; the counter ahead of the size by at most the access in
 * flight (its counter is synced before its entry). */
static int entries_ok(const struct state *s)
{
    int errors = 0;
    uint64_t first = s->log_size > ENTRIES - 1 ? s->log_size - (ENTRIES - 1) + 1 : 1;
    for (uint64_t seq = first; seq <= s->log_size; seq++) {
        const struct entry *e = &s->log[(seq - 1) % ENTRIES];
        char want[48];
        snprintf(want, sizeof want, "access %llu", (unsigned long long)seq);
        if (!entry_ok(e, seq) || strcmp(e->text, want) != 0) {
            fprintf(stderr, "check: entry %llu is wrong (%s)\n", (unsigned long long)seq,
                    e->text);
            errors++;
        }
    }
    return errors;
}

static int verify(struct state *s, uint64_t acked)
{
    int errors = entries_ok(s);
    if (s->access_count != s->log_size && s->access_count != s->log_size + 1) {
        fprintf(stderr, "verify: access count %llu, log size %llu\n",
                (unsigned long long)s->access_count, (unsigned long long)s->log_size);
        errors++;
    }
    if (s->log_size < acked) {
        fprintf(stderr, "verify: %llu accesses acknowledged, %llu logged\n",
                (unsigned long long)acked, (unsigned long long)s->log_size);
        errors++;
    }
    if (errors == 0)
        printf("verify: ok: %llu accesses, %llu logged\n",
               (unsigned long long)s->access_count, (unsigned long long)s->log_size);
    return errors ? 1 : 0;
}

static int check(struct state *s, uint64_t total)
{
    int errors = 0;
    if (s->access_count != total) {
        fprintf(stderr, "check: access count %llu, expected %llu\n",
                (unsigned long long)s->access_count, (unsigned long long)total);
        errors++;
    }
    if (s->log_size != total) {
        fprintf(stderr, "check: log size %llu, expected %llu\n",
                (unsigned long long)s->log_size, (unsigned long long)total);
        errors++;
    }
    errors += entries_ok(s);
    if (errors == 0)
        printf("check: ok: %llu accesses, %llu entries logged\n",
               (unsigned long long)s->access_count, (unsigned long long)s->log_size);
    return errors ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: mojim POOL append N | check TOTAL | verify ACKED\n");
        return 64;
    }
    int rc = mnemo_pool_open(argv[1], &pool);
    if (rc == MNEMO_ENOENT)
        rc = mnemo_pool_create(argv[1], 4 << 20, 0, &pool);
    if (rc != MNEMO_OK)
        fail("open or create the pool", rc);
    void *p;
    TRY(mnemo_root(pool, "mojim", sizeof(struct state), &p));
    struct state *s = p;
    start(s);
    uint64_t n = strtoull(argv[3], NULL, 10);
    int ack = getenv("MOJIM_ACK") != NULL;
    int status = 0;
    if (strcmp(argv[2], "append") == 0) {
        for (uint64_t i = 0; i < n; i++) {
            access_once(s);
            if (ack) {
                printf("%llu\n", (unsigned long long)s->log_size); /* acknowledged */
                fflush(stdout);
            }
        }
    } else if (strcmp(argv[2], "verify") == 0) {
        status = verify(s, n);
    } else if (strcmp(argv[2], "check") == 0) {
        status = check(s, n);
    } else {
        fprintf(stderr, "mojim: unknown command %s\n", argv[2]);
        status = 64;
    }
    TRY(mnemo_pool_close(pool));
    return status;
}
