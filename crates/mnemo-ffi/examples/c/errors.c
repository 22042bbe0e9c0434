/*
 * Every error path of the C ABI, and the rules of mnemo.h that a program relies on:
 * closed pools, bad handles, freeing what was never allocated, a transaction too large,
 * names too long, out of space, misused transactions, full logs, and the redo rule.
 * After each error the pool must still work.
 *
 *   errors DIR     (DIR: an empty scratch directory, ideally on /dev/shm)
 */
#define _GNU_SOURCE
#include <mnemo.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int checks, failures;

#define EXPECT(call, code)                                                                    \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        checks++;                                                                             \
        if (rc_ != (code)) {                                                                  \
            failures++;                                                                       \
            fprintf(stderr, "%s:%d: %s returned %s (%d), expected %s: %s\n", __FILE__,        \
                    __LINE__, #call, mnemo_strerror(rc_), rc_, #code, mnemo_errormsg());      \
        }                                                                                     \
    } while (0)

#define OK(call) EXPECT(call, MNEMO_OK)

#define TRUE(cond)                                                                            \
    do {                                                                                      \
        checks++;                                                                             \
        if (!(cond)) {                                                                        \
            failures++;                                                                       \
            fprintf(stderr, "%s:%d: %s is false (%s)\n", __FILE__, __LINE__, #cond,           \
                    mnemo_errormsg());                                                        \
        }                                                                                     \
    } while (0)

static char dir[512];

static const char *path_of(const char *name)
{
    static char buf[4][600];
    static int i;
    i = (i + 1) % 4;
    snprintf(buf[i], sizeof buf[i], "%s/%s", dir, name);
    return buf[i];
}

static void pools_and_handles(void)
{
    mnemo_pool *p;
    EXPECT(mnemo_pool_open(path_of("absent.pool"), &p), MNEMO_ENOENT);
    TRUE(strstr(mnemo_errormsg(), "absent.pool") != NULL);
    EXPECT(mnemo_pool_create(NULL, 8 << 20, 0, &p), MNEMO_EINVAL);
    EXPECT(mnemo_pool_create(path_of("a.pool"), 8 << 20, 0, NULL), MNEMO_EINVAL);
    EXPECT(mnemo_pool_create(path_of("a.pool"), 1024, 0, &p), MNEMO_EINVAL);
    EXPECT(mnemo_pool_create(path_of("no/such/dir.pool"), 8 << 20, 0, &p), MNEMO_EINVAL);
    OK(mnemo_pool_create(path_of("a.pool"), 8 << 20, 0, &p));
    mnemo_pool *q;
    EXPECT(mnemo_pool_create(path_of("a.pool"), 8 << 20, 0, &q), MNEMO_EEXIST);
    OK(mnemo_pool_close(p));

    /* Not a pool. */
    FILE *f = fopen(path_of("junk"), "w");
    for (int i = 0; i < 1000; i++)
        fputs("this is not a pool\n", f);
    fclose(f);
    EXPECT(mnemo_pool_open(path_of("junk"), &q), MNEMO_ENOTPOOL);

    /* Closed pool: every call says so; addresses are refused, not handed out. */
    OK(mnemo_pool_open(path_of("a.pool"), &p));
    uint64_t off;
    OK(mnemo_nvalloc(p, "x", 64, &off));
    OK(mnemo_pool_close(p));
    EXPECT(mnemo_nvalloc(p, "x", 64, &off), MNEMO_ECLOSED);
    EXPECT(mnemo_pmalloc(p, 64, &off), MNEMO_ECLOSED);
    EXPECT(mnemo_pfree(p, off), MNEMO_ECLOSED);
    EXPECT(mnemo_pool_close(p), MNEMO_ECLOSED);
    mnemo_tx *tx;
    EXPECT(mnemo_tx_begin(p, &tx), MNEMO_ECLOSED);
    TRUE(mnemo_direct(p, off) == NULL);
    TRUE(strstr(mnemo_errormsg(), "closed") != NULL);
    TRUE(mnemo_offset(p, &off) == 0);

    /* Handles that never were. */
    EXPECT(mnemo_pool_close(NULL), MNEMO_EINVAL);
    EXPECT(mnemo_pool_close((mnemo_pool *)(uintptr_t)0x12345678), MNEMO_EBADHANDLE);
    EXPECT(mnemo_tx_commit((mnemo_tx *)(uintptr_t)0x40), MNEMO_EBADHANDLE);
    EXPECT(mnemo_log_close((mnemo_log *)p), MNEMO_EBADHANDLE); /* a pool is not a log */
    TRUE(strcmp(mnemo_strerror(-999), "unknown error code") == 0);
    TRUE(strcmp(mnemo_strerror(MNEMO_OK), "success") == 0);
}

static void *other_thread_message(void *arg)
{
    (void)arg;
    return (void *)(uintptr_t)(strcmp(mnemo_errormsg(), "no error") == 0);
}

static void names_and_frees(mnemo_pool *p)
{
    uint64_t off, size;
    char long_name[MNEMO_NAME_MAX + 2];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    EXPECT(mnemo_nvalloc(p, long_name, 64, &off), MNEMO_ENAMETOOLONG);
    TRUE(strstr(mnemo_errormsg(), "63") != NULL);
    pthread_t t;
    void *clean;
    pthread_create(&t, NULL, other_thread_message, NULL);
    pthread_join(t, &clean);
    TRUE(clean != NULL); /* the message is per thread */
    long_name[MNEMO_NAME_MAX] = 0; /* exactly the limit: fits */
    OK(mnemo_nvalloc(p, long_name, 64, &off));
    EXPECT(mnemo_nvalloc(p, "", 64, &off), MNEMO_EINVAL);
    EXPECT(mnemo_nvalloc(p, "mnemo.mine", 64, &off), MNEMO_EINVAL); /* reserved */
    EXPECT(mnemo_nvfree(p, "mnemo.ffi.gmsync"), MNEMO_EINVAL);
    EXPECT(mnemo_nvalloc(p, NULL, 64, &off), MNEMO_EINVAL);
    EXPECT(mnemo_nvalloc(p, "r", 0, &off), MNEMO_EINVAL);
    uint64_t r;
    OK(mnemo_nvalloc(p, "r", 100, &r));
    uint64_t again;
    OK(mnemo_nvalloc(p, "r", 100, &again));
    TRUE(again == r);
    EXPECT(mnemo_nvalloc(p, "r", 200, &again), MNEMO_EMISMATCH);
    OK(mnemo_region(p, "r", &off, &size));
    TRUE(off == r && size == 100);
    EXPECT(mnemo_region(p, "nope", &off, &size), MNEMO_ENOENT);
    EXPECT(mnemo_nvfree(p, "nope"), MNEMO_ENOENT);
    EXPECT(mnemo_pfree(p, r), MNEMO_EBADFREE); /* a region is freed by name */
    OK(mnemo_nvfree(p, "r"));
    EXPECT(mnemo_region(p, "r", &off, &size), MNEMO_ENOENT);

    /* Frees of offsets that are no live allocation. */
    uint64_t a;
    OK(mnemo_pmalloc(p, 100, &a));
    EXPECT(mnemo_pfree(p, a + 16), MNEMO_EBADFREE);
    EXPECT(mnemo_pfree(p, 8), MNEMO_EBADFREE);
    EXPECT(mnemo_pfree(p, UINT64_MAX - 7), MNEMO_EBADFREE);
    OK(mnemo_pfree(p, a));
    EXPECT(mnemo_pfree(p, a), MNEMO_EBADFREE); /* double free */
    EXPECT(mnemo_pmalloc(p, 0, &a), MNEMO_EINVAL);
    EXPECT(mnemo_pmalloc(p, 64, NULL), MNEMO_EINVAL);
    TRUE(mnemo_direct(p, 0) == NULL);
    TRUE(mnemo_offset(p, &a) == 0); /* a stack address */
}

static void transactions(mnemo_pool *p)
{
    uint64_t region;
    OK(mnemo_nvalloc(p, "big", 64 << 10, &region));
    unsigned char *bytes = mnemo_direct(p, region);
    TRUE(bytes != NULL);

    /* Too large: the write fails, the commit aborts, nothing changed. */
    static unsigned char buf[40000];
    memset(buf, 0xab, sizeof buf);
    mnemo_tx *tx;
    OK(mnemo_tx_begin(p, &tx));
    OK(mnemo_tx_write(tx, region, "hello", 5));
    EXPECT(mnemo_tx_write(tx, region + 8, buf, sizeof buf), MNEMO_ETXTOOBIG);
    EXPECT(mnemo_tx_commit(tx), MNEMO_EABORTED);
    TRUE(bytes[0] == 0 && bytes[8] == 0);
    EXPECT(mnemo_tx_commit(tx), MNEMO_ECLOSED); /* ended */

    /* The redo rule: loads see the old bytes until commit; tx_read sees the new. */
    OK(mnemo_tx_begin(p, &tx));
    OK(mnemo_tx_write(tx, region, "hello", 5));
    char seen[6] = { 0 };
    OK(mnemo_tx_read(tx, region, seen, 5));
    TRUE(strcmp(seen, "hello") == 0);
    TRUE(bytes[0] == 0);
    OK(mnemo_tx_commit(tx));
    TRUE(memcmp(bytes, "hello", 5) == 0);

    /* Outside the data area, NULL arguments. */
    OK(mnemo_tx_begin(p, &tx));
    EXPECT(mnemo_tx_write(tx, 8, "x", 1), MNEMO_EINVAL);
    EXPECT(mnemo_tx_write(tx, region, NULL, 4), MNEMO_EINVAL);
    OK(mnemo_tx_abort(tx));
    EXPECT(mnemo_tx_begin(p, NULL), MNEMO_EINVAL);

    /* A failed free dooms the transaction: its allocation and write do not happen. */
    uint64_t obj;
    OK(mnemo_tx_begin(p, &tx));
    OK(mnemo_tx_alloc(tx, 64, &obj));
    OK(mnemo_tx_write(tx, region, "HELLO", 5));
    EXPECT(mnemo_tx_free(tx, obj + 8), MNEMO_EBADFREE);
    EXPECT(mnemo_tx_commit(tx), MNEMO_EABORTED);
    TRUE(memcmp(bytes, "hello", 5) == 0);
    EXPECT(mnemo_pfree(p, obj), MNEMO_EBADFREE); /* the allocation never happened */

    /* Nesting: levels end innermost first; an inner abort dooms the outer level. */
    mnemo_tx *inner;
    OK(mnemo_tx_begin(p, &tx));
    OK(mnemo_tx_begin(p, &inner));
    EXPECT(mnemo_tx_commit(tx), MNEMO_ETXSTATE);
    EXPECT(mnemo_pool_close(p), MNEMO_EBUSY); /* transactions open */
    OK(mnemo_tx_write(inner, region, "j", 1));
    OK(mnemo_tx_abort(inner));
    EXPECT(mnemo_tx_commit(tx), MNEMO_EABORTED);
    TRUE(bytes[0] == 'h');
    OK(mnemo_tx_begin(p, &tx));
    OK(mnemo_tx_begin(p, &inner));
    OK(mnemo_tx_write(inner, region, "J", 1));
    OK(mnemo_tx_commit(inner));
    TRUE(bytes[0] == 'h'); /* flattened: nothing until the outermost commit */
    OK(mnemo_tx_commit(tx));
    TRUE(bytes[0] == 'J');

    /* nvalloc and pmalloc join the open transaction: an abort undoes them. */
    OK(mnemo_tx_begin(p, &tx));
    uint64_t joined;
    OK(mnemo_nvalloc(p, "joined", 32, &joined));
    OK(mnemo_tx_abort(tx));
    uint64_t off;
    EXPECT(mnemo_region(p, "joined", &off, NULL), MNEMO_ENOENT);

    /* gmsync inside a transaction commits on its own. */
    OK(mnemo_tx_begin(p, &tx));
    bytes[100] = 7;
    struct mnemo_range one = { bytes + 100, 1 };
    OK(mnemo_gmsync(p, &one, 1));
    OK(mnemo_tx_abort(tx));
    TRUE(bytes[100] == 7);

    /* gmsync larger than a record (32 bytes of header and 16 per range go with the data);
     * the largest one that fits; bad ranges. */
    struct mnemo_range huge = { bytes, MNEMO_GMSYNC_RECORD_MAX - 32 - 16 + 1 };
    EXPECT(mnemo_gmsync(p, &huge, 1), MNEMO_ETXTOOBIG);
    struct mnemo_range large = { bytes, MNEMO_GMSYNC_RECORD_MAX - 32 - 16 };
    OK(mnemo_gmsync(p, &large, 1));
    struct mnemo_range outside = { &off, 8 };
    EXPECT(mnemo_gmsync(p, &outside, 1), MNEMO_EINVAL);
    EXPECT(mnemo_gmsync(p, NULL, 1), MNEMO_EINVAL);
    OK(mnemo_gmsync(p, NULL, 0));
    EXPECT(mnemo_msync(p, &off, 8), MNEMO_EINVAL);
    EXPECT(mnemo_msync(p, NULL, 8), MNEMO_EINVAL);
    OK(mnemo_msync(p, bytes, 64));
}

static mnemo_tx *shared_tx;

static void *use_foreign_tx(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)mnemo_tx_write(shared_tx, 0, "x", 1);
}

static mnemo_pool *exiting_pool;
static uint64_t exiting_off;

static void *exit_inside_tx(void *arg)
{
    (void)arg;
    mnemo_tx *tx;
    uint64_t v = 77, obj;
    if (mnemo_tx_begin(exiting_pool, &tx) != MNEMO_OK ||
        mnemo_tx_write(tx, exiting_off, &v, 8) != MNEMO_OK ||
        mnemo_tx_alloc(tx, 64, &obj) != MNEMO_OK)
        return (void *)1;
    return NULL; /* the thread ends with the transaction open: it is aborted */
}

static void foreign_thread(mnemo_pool *p)
{
    uint64_t x;
    OK(mnemo_nvalloc(p, "exit", 8, &x));
    exiting_pool = p;
    exiting_off = x;
    pthread_t e;
    void *erc;
    pthread_create(&e, NULL, exit_inside_tx, NULL);
    pthread_join(e, &erc);
    TRUE(erc == NULL);
    TRUE(*(uint64_t *)mnemo_direct(p, x) == 0);

    OK(mnemo_tx_begin(p, &shared_tx));
    pthread_t t;
    void *rc;
    pthread_create(&t, NULL, use_foreign_tx, NULL);
    pthread_join(t, &rc);
    EXPECT((int)(intptr_t)rc, MNEMO_ETXSTATE);
    OK(mnemo_tx_commit(shared_tx));
}

static void out_of_space(void)
{
    mnemo_pool *p;
    /* size == size_max: the pool cannot grow. */
    OK(mnemo_pool_create(path_of("small.pool"), 8 << 20, 8 << 20, &p));
    uint64_t offs[64];
    int n = 0, rc = MNEMO_OK;
    while (n < 64 && (rc = mnemo_pmalloc(p, 200 << 10, &offs[n])) == MNEMO_OK)
        n++;
    EXPECT(rc, MNEMO_ENOSPC);
    TRUE(n > 0 && n < 64);
    uint64_t big;
    EXPECT(mnemo_pmalloc(p, (uint64_t)2 << 30, &big), MNEMO_ENOSPC);
    /* The pool still works: free one, allocate again. */
    OK(mnemo_pfree(p, offs[0]));
    OK(mnemo_pmalloc(p, 200 << 10, &offs[0]));
    OK(mnemo_pool_close(p));
    OK(mnemo_pool_open(path_of("small.pool"), &p));
    OK(mnemo_pfree(p, offs[0]));
    OK(mnemo_pool_close(p));
    /* A pool whose maximum cannot hold the heap at all; the smallest that can. */
    EXPECT(mnemo_pool_create(path_of("tiny.pool"), 1 << 20, 1 << 20, &p), MNEMO_ENOSPC);
    OK(mnemo_pool_create(path_of("tiny.pool"), 1 << 20, MNEMO_POOL_SIZE_MIN, &p));
    OK(mnemo_pool_close(p));
    EXPECT(mnemo_pool_create(path_of("tinier.pool"), 1 << 20, MNEMO_POOL_SIZE_MIN - 4096, &p),
           MNEMO_ENOSPC);
}

static int count_entries(void *ctx, uint64_t lsn, const void *data, size_t len)
{
    (void)lsn;
    (void)data;
    (void)len;
    (*(int *)ctx)++;
    return 0;
}

static int stop_at_first(void *ctx, uint64_t lsn, const void *data, size_t len)
{
    (void)lsn;
    (*(int *)ctx) = len == 5 && memcmp(data, "entry", 5) == 0;
    return 1;
}

static void logs(mnemo_pool *p)
{
    mnemo_log *log;
    EXPECT(mnemo_log_open(p, "log", 100, &log), MNEMO_EINVAL); /* too small */
    OK(mnemo_log_open(p, "log", 512, &log));
    mnemo_log *twice;
    EXPECT(mnemo_log_open(p, "log", 512, &twice), MNEMO_EBUSY);
    EXPECT(mnemo_log_open(p, "log", 1024, &twice), MNEMO_EMISMATCH);
    mnemo_tx *tx;
    OK(mnemo_tx_begin(p, &tx));
    EXPECT(mnemo_log_open(p, "log2", 512, &twice), MNEMO_ETXSTATE);
    OK(mnemo_tx_abort(tx));
    int appended = 0, rc;
    uint64_t lsn, first = 0;
    while ((rc = mnemo_log_append(log, "entry", 5, &lsn)) == MNEMO_OK) {
        if (appended++ == 0)
            first = lsn;
    }
    EXPECT(rc, MNEMO_ELOGFULL);
    TRUE(appended > 10);
    struct mnemo_log_info info;
    OK(mnemo_log_info(log, &info));
    TRUE(info.entries == (uint64_t)appended && info.head == first);
    int seen = 0;
    OK(mnemo_log_iterate(log, count_entries, &seen));
    TRUE(seen == appended);
    OK(mnemo_log_iterate(log, stop_at_first, &seen));
    TRUE(seen == 1);
    EXPECT(mnemo_log_iterate(log, NULL, NULL), MNEMO_EINVAL);
    EXPECT(mnemo_log_truncate(log, first + 1, NULL), MNEMO_EINVAL);
    uint64_t dropped;
    OK(mnemo_log_truncate(log, info.tail, &dropped));
    TRUE(dropped == (uint64_t)appended);
    OK(mnemo_log_append(log, "after", 5, NULL));
    static char big[4096];
    EXPECT(mnemo_log_append(log, big, sizeof big, NULL), MNEMO_EINVAL);
    EXPECT(mnemo_log_append(log, NULL, 5, NULL), MNEMO_EINVAL);
    OK(mnemo_log_close(log));
    EXPECT(mnemo_log_append(log, "x", 1, NULL), MNEMO_ECLOSED);
    EXPECT(mnemo_log_close(log), MNEMO_ECLOSED);
    /* Reopened: the entry survived; closing the pool closes its logs. */
    OK(mnemo_log_open(p, "log", 512, &log));
    OK(mnemo_log_info(log, &info));
    TRUE(info.entries == 1);
}

/* Bytes a transaction wrote, changed again by raw stores and synced, must not be replaced by
 * a replay of the transaction's record at the next open: not after a clean close, not after
 * a crash. */
static int raw_after_tx_run(const char *path, int crash)
{
    mnemo_pool *p;
    uint64_t x, one = 1;
    mnemo_tx *tx;
    if (mnemo_pool_create(path, 8 << 20, 0, &p) != MNEMO_OK ||
        mnemo_nvalloc(p, "x", 8, &x) != MNEMO_OK || mnemo_tx_begin(p, &tx) != MNEMO_OK ||
        mnemo_tx_write(tx, x, &one, 8) != MNEMO_OK || mnemo_tx_commit(tx) != MNEMO_OK)
        return 1;
    uint64_t *word = mnemo_direct(p, x);
    *word = 2;
    if (mnemo_msync(p, word, 8) != MNEMO_OK)
        return 1;
    if (crash)
        _exit(0); /* no close: the process dies */
    return mnemo_pool_close(p) != MNEMO_OK;
}

static void raw_after_tx(void)
{
    for (int crash = 0; crash < 2; crash++) {
        const char *path = path_of(crash ? "raw-crash.pool" : "raw-clean.pool");
        if (crash) {
            pid_t child = fork();
            if (child == 0)
                _exit(raw_after_tx_run(path, 1));
            int status;
            waitpid(child, &status, 0);
            TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        } else {
            TRUE(raw_after_tx_run(path, 0) == 0);
        }
        mnemo_pool *p;
        uint64_t x;
        OK(mnemo_pool_open(path, &p));
        OK(mnemo_region(p, "x", &x, NULL));
        uint64_t *word = mnemo_direct(p, x);
        TRUE(word != NULL && *word == 2);
        OK(mnemo_pool_close(p));
    }
}

/* Several threads at once: each its own transactions on its own region, allocations and
 * frees, and appends to one shared log. */
#define THREADS 4
#define ROUNDS 200

struct job {
    mnemo_pool *pool;
    mnemo_log *log;
    int index;
    int failures;
};

static void *thread_work(void *arg)
{
    struct job *j = arg;
    char name[16];
    snprintf(name, sizeof name, "thread-%d", j->index);
    uint64_t region;
    if (mnemo_nvalloc(j->pool, name, 64, &region) != MNEMO_OK)
        j->failures++;
    for (uint64_t k = 1; k <= ROUNDS; k++) {
        mnemo_tx *tx;
        uint64_t obj, scratch;
        int rc = mnemo_tx_begin(j->pool, &tx);
        rc = rc ? rc : mnemo_tx_alloc(tx, 48, &obj);
        rc = rc ? rc : mnemo_tx_write(tx, obj, &k, 8);
        rc = rc ? rc : mnemo_tx_write(tx, region, &k, 8);
        rc = rc ? rc : mnemo_tx_free(tx, obj);
        rc = rc ? rc : mnemo_tx_commit(tx);
        rc = rc ? rc : mnemo_pmalloc(j->pool, 16 + k, &scratch);
        rc = rc ? rc : mnemo_pfree(j->pool, scratch);
        if (k % 4 == 0)
            rc = rc ? rc : mnemo_log_append(j->log, &k, sizeof k, NULL);
        if (rc != MNEMO_OK) {
            fprintf(stderr, "thread %d round %llu: %s\n", j->index, (unsigned long long)k,
                    mnemo_errormsg());
            j->failures++;
            break;
        }
    }
    uint64_t *word = mnemo_direct(j->pool, region);
    if (word == NULL || *word != ROUNDS)
        j->failures++;
    return NULL;
}

static int count_all(void *ctx, uint64_t lsn, const void *data, size_t len)
{
    (void)lsn;
    (void)data;
    *(uint64_t *)ctx += len == 8;
    return 0;
}

static void threads(void)
{
    mnemo_pool *p;
    mnemo_log *log;
    OK(mnemo_pool_create(path_of("threads.pool"), 8 << 20, 0, &p));
    OK(mnemo_log_open(p, "shared-log", 64 << 10, &log));
    pthread_t t[THREADS];
    struct job jobs[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (struct job){ p, log, i, 0 };
        pthread_create(&t[i], NULL, thread_work, &jobs[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        TRUE(jobs[i].failures == 0);
    }
    OK(mnemo_pool_close(p));
    OK(mnemo_pool_open(path_of("threads.pool"), &p));
    OK(mnemo_log_open(p, "shared-log", 64 << 10, &log));
    uint64_t entries = 0;
    OK(mnemo_log_iterate(log, count_all, &entries));
    TRUE(entries == THREADS * ROUNDS / 4);
    for (int i = 0; i < THREADS; i++) {
        char name[16];
        uint64_t region;
        snprintf(name, sizeof name, "thread-%d", i);
        OK(mnemo_region(p, name, &region, NULL));
        uint64_t *word = mnemo_direct(p, region);
        TRUE(word != NULL && *word == ROUNDS);
    }
    OK(mnemo_pool_close(p));
}

/* The gmsync snapshot is applied at every open; what became durable later through a
 * transaction, an msync or a free must win over it. */
static void after_gmsync(void)
{
    mnemo_pool *p;
    uint64_t x, obj;
    OK(mnemo_pool_create(path_of("snap.pool"), 8 << 20, 0, &p));
    OK(mnemo_nvalloc(p, "x", 24, &x));
    uint64_t *w = mnemo_direct(p, x);
    OK(mnemo_pmalloc(p, 64, &obj));
    uint64_t *o = mnemo_direct(p, obj);
    w[0] = 1;
    w[1] = 1;
    w[2] = 1;
    *o = 7;
    struct mnemo_range r[2] = { { w, 24 }, { o, 8 } };
    OK(mnemo_gmsync(p, r, 2));
    w[2] = 9; /* raw store, never synced: the snapshot puts 1 back at the next open */
    OK(mnemo_pool_close(p));
    OK(mnemo_pool_open(path_of("snap.pool"), &p));
    w = mnemo_direct(p, x);
    TRUE(w[0] == 1 && w[2] == 1);
    /* A transaction writes w[0]: the snapshot must not undo it. */
    mnemo_tx *tx;
    uint64_t two = 2;
    OK(mnemo_tx_begin(p, &tx));
    OK(mnemo_tx_write(tx, x, &two, 8));
    OK(mnemo_tx_commit(tx));
    OK(mnemo_pool_close(p));
    OK(mnemo_pool_open(path_of("snap.pool"), &p));
    w = mnemo_direct(p, x);
    TRUE(w[0] == 2);
    /* gmsync again, then msync of a raw store: the msync'ed value wins. */
    w[1] = 3;
    struct mnemo_range r1 = { &w[1], 8 };
    OK(mnemo_gmsync(p, &r1, 1));
    w[1] = 4;
    OK(mnemo_msync(p, &w[1], 8));
    OK(mnemo_pool_close(p));
    OK(mnemo_pool_open(path_of("snap.pool"), &p));
    w = mnemo_direct(p, x);
    TRUE(w[1] == 4);
    /* gmsync of an object, then the object is freed and the memory reused. */
    o = mnemo_direct(p, obj);
    *o = 8;
    struct mnemo_range ro = { o, 8 };
    OK(mnemo_gmsync(p, &ro, 1));
    OK(mnemo_pfree(p, obj));
    uint64_t again;
    OK(mnemo_pmalloc(p, 64, &again));
    uint64_t *n = mnemo_direct(p, again);
    *n = 5;
    OK(mnemo_msync(p, n, 8));
    OK(mnemo_pool_close(p));
    OK(mnemo_pool_open(path_of("snap.pool"), &p));
    n = mnemo_direct(p, again);
    TRUE(*n == 5);
    OK(mnemo_pool_close(p));
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: errors DIR\n");
        return 64;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    pools_and_handles();
    mnemo_pool *p;
    OK(mnemo_pool_create(path_of("main.pool"), 8 << 20, 0, &p));
    names_and_frees(p);
    transactions(p);
    foreign_thread(p);
    logs(p);
    OK(mnemo_pool_close(p));
    out_of_space();
    raw_after_tx();
    after_gmsync();
    threads();
    /* Everything above left the pool consistent: it opens and works. */
    OK(mnemo_pool_open(path_of("main.pool"), &p));
    uint64_t off;
    OK(mnemo_region(p, "big", &off, NULL));
    OK(mnemo_pmalloc(p, 64, &off));
    OK(mnemo_pfree(p, off));
    OK(mnemo_pool_close(p));
    printf("errors: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
