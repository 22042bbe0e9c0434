/*
 * mnemo.h - durable memory for C programs: the C ABI of mnemo (libmnemo.so, libmnemo.a).
 *
 * THE MODEL
 *
 * A *pool* is a file mapped into memory. Programs allocate objects in it and update them in
 * place; after a restart or a crash they open the pool again and find their data by *name*.
 * Link with -lmnemo (static: also -lpthread -ldl -lm).
 *
 *   Offsets and addresses. Every object is identified by its *offset* from the start of the
 *   pool (uint64_t, never 0 for an object). Store offsets, never addresses, in the pool: the
 *   mapping's address changes from run to run. mnemo_direct() turns an offset into an address
 *   valid until the pool is closed; mnemo_offset() goes back. Addresses stay valid while the
 *   pool grows.
 *
 *   Named regions and roots. A table of contents maps names (1..MNEMO_NAME_MAX bytes, no NUL)
 *   to regions. mnemo_nvalloc() returns the region of that name, creating it zeroed the first
 *   time (Temporality's nvalloc); mnemo_root() does the same and returns an address: a
 *   persistent "static variable". Names starting with "mnemo." are reserved.
 *
 *   Allocation. mnemo_pmalloc()/mnemo_pfree() outside a transaction are each atomic on their
 *   own: an object allocated but not yet linked from anything leaks if the program crashes
 *   before linking it. Allocate and link in one transaction (mnemo_tx_alloc) to avoid that.
 *
 *   Four ways to make updates durable and consistent (Mnemosyne's):
 *   1. Single-word update: store an aligned 8-byte value through an address, then
 *      mnemo_msync() it. The store is atomic, msync makes it durable.
 *   2. Append-only log: mnemo_log_open/append/iterate/truncate. One fence per append; after a
 *      crash, exactly the complete appends are found.
 *   3. Transactions: mnemo_tx_begin, mnemo_tx_write..., mnemo_tx_commit. All writes,
 *      allocations and frees of a transaction take effect together, durably, at commit; or
 *      none does (abort, crash before the commit point, or an earlier failing call).
 *   4. Raw stores plus mnemo_msync()/mnemo_gmsync(): the program stores through addresses and
 *      then names the ranges it changed (Mojim's interface). mnemo_gmsync() makes ranges
 *      that it names again and again move all-or-nothing from one call's state to the
 *      next; read its comment for exactly what that means for stores made before the call.
 *
 *   THE REDO RULE. Transactions use redo logging: mnemo_tx_write() records the new bytes and
 *   the pool itself changes only at commit. Therefore, inside a transaction:
 *     - write through the transaction (mnemo_tx_write), never by storing through an address;
 *       stores through an address are not part of the transaction and are not undone;
 *     - plain loads through an address see the bytes *before* the transaction; use
 *       mnemo_tx_read() to see the transaction's own writes;
 *     - writing into memory that the same transaction allocated (mnemo_tx_alloc) costs no
 *       log space beyond a 32-byte check: use it to fill in new objects.
 *   After a transaction has written some bytes, change them again either in a transaction or
 *   with raw stores followed by mnemo_msync()/mnemo_gmsync() of those bytes. Raw stores left
 *   unsynced may be undone at the next open, which replays the latest committed records.
 *
 *   Transactions belong to the thread that began them. Beginning a transaction while the
 *   thread has one open on the same pool nests it: the levels are flattened into one, which
 *   commits when the outermost level commits; levels end innermost first. While a
 *   transaction is open on a thread, mnemo_nvalloc, mnemo_nvfree, mnemo_root, mnemo_pmalloc
 *   and mnemo_pfree on that thread and pool join it (they take effect at its commit).
 *   Transactions are atomic and durable, not isolated: two threads must not write the same
 *   bytes in concurrent transactions; use your own locks.
 *
 *   Failure inside a transaction. If any call that is part of a transaction fails, the
 *   transaction is doomed: the failing call returns its error, later calls still work, and
 *   mnemo_tx_commit() aborts it and returns MNEMO_EABORTED. The pool stays consistent.
 *
 *   Recovery is automatic: mnemo_pool_open() replays committed transactions that were not
 *   completely applied and applies the last gmsync journal record again; mnemo_log_open() finds
 *   exactly the complete appends. Only one process may have a pool open at a time.
 *
 *   In short:
 *
 *     mnemo_pool *pool;
 *     if (mnemo_pool_open("/dev/shm/app.pool", &pool) == MNEMO_ENOENT)
 *         mnemo_pool_create("/dev/shm/app.pool", 8 << 20, 0, &pool);
 *     uint64_t *hits;
 *     mnemo_root(pool, "hits", sizeof *hits, (void **)&hits);  // zeroed the first time
 *     *hits += 1;                                  // a raw 8-byte store...
 *     mnemo_msync(pool, hits, sizeof *hits);       // ...now durable
 *     mnemo_tx *tx;                                // or all-or-nothing, with redo:
 *     uint64_t next = *hits + 1;
 *     mnemo_tx_begin(pool, &tx);
 *     mnemo_tx_write(tx, mnemo_offset(pool, hits), &next, sizeof next);
 *     if (mnemo_tx_commit(tx) != MNEMO_OK)
 *         fprintf(stderr, "%s\n", mnemo_errormsg());
 *     mnemo_pool_close(pool);
 *
 * ERRORS
 *
 * Every function returning int returns MNEMO_OK (0) or a negative enum mnemo_error code;
 * mnemo_errormsg() then describes the failure in a sentence that usually says what to do.
 * Errors never abort the process and nothing unwinds into C: an internal panic is caught and
 * returned as MNEMO_EPANIC. NULL pointer arguments are MNEMO_EINVAL. Handles (mnemo_pool *,
 * mnemo_tx *, mnemo_log *) are opaque values checked at every call: a closed one gives
 * MNEMO_ECLOSED, a value that is no handle of that kind gives MNEMO_EBADHANDLE. Addresses
 * returned by mnemo_direct()/mnemo_root() must not be used after mnemo_pool_close().
 *
 * THREADS
 *
 * Every function may be called from any thread (transactions: see above). A pool handle may
 * be shared by threads; a log handle too (appends are serialised).
 */
#ifndef MNEMO_H
#define MNEMO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------
 * Limits
 */

/** Longest region name, in bytes (without the terminating NUL). */
#define MNEMO_NAME_MAX 63

/**
 * Bytes of one transaction's redo record (one of a lane log's 16 slots). A record holds a 32-byte header,
 * and per mnemo_tx_write 16 bytes plus the length rounded up to 8 (32 bytes only, when the
 * written memory was allocated by the same transaction), 24 bytes per allocation or free
 * (allocations from one bitmap word share one). A larger transaction fails with
 * MNEMO_ETXTOOBIG.
 */
#define MNEMO_TX_RECORD_MAX 16384

/** Most ranges one mnemo_gmsync() call may name. */
#define MNEMO_GMSYNC_RANGES_MAX 1024

/** Bytes of mnemo_gmsync()'s journal record: 32, plus per range 16 and its length rounded
 * up to 8. */
#define MNEMO_GMSYNC_RECORD_MAX 16384

/**
 * Metadata of the heap in a new pool (table of contents, 16 lane logs, the first chunk
 * table and chunk). mnemo_pool_create() grows a smaller pool to this size if size_max allows.
 */
#define MNEMO_POOL_SIZE_MIN (4567040)

/** Smallest region mnemo_log_open() accepts. */
#define MNEMO_LOG_SIZE_MIN 256

/* ---------------------------------------------------------------------------------------
 * Types
 */

/** An open pool. */
typedef struct mnemo_pool mnemo_pool;
/** One level of a thread's transaction on a pool. */
typedef struct mnemo_tx mnemo_tx;
/** An open append-only log. */
typedef struct mnemo_log mnemo_log;

/** Error codes. Every failing function returns one of these (all negative). */
enum mnemo_error {
    MNEMO_OK = 0,            /**< success */
    MNEMO_EINVAL = -1,       /**< invalid argument: NULL pointer, zero size, offset outside
                                  the data area, name not UTF-8 or empty, bad LSN */
    MNEMO_EBADHANDLE = -2,   /**< not a handle of the expected kind */
    MNEMO_ECLOSED = -3,      /**< the handle was closed (pool, log) or ended (transaction) */
    MNEMO_ENOENT = -4,       /**< no such pool file, or no region of that name */
    MNEMO_EEXIST = -5,       /**< the pool file already exists */
    MNEMO_EBUSY = -6,        /**< in use: pool open in another process, transactions still
                                  open, a name being changed by another thread, log already
                                  open */
    MNEMO_ENOSPC = -7,       /**< out of space: the pool is full and cannot grow (size_max
                                  reached or medium full), or the table of names is full */
    MNEMO_ETXTOOBIG = -8,    /**< a transaction exceeds MNEMO_TX_RECORD_MAX, or a gmsync
                                  MNEMO_GMSYNC_RECORD_MAX */
    MNEMO_ENAMETOOLONG = -9, /**< a name longer than MNEMO_NAME_MAX bytes */
    MNEMO_EBADFREE = -10,    /**< free of an offset that is not the start of a live
                                  allocation (never allocated, or already freed) */
    MNEMO_EMISMATCH = -11,   /**< the region exists with another size */
    MNEMO_EABORTED = -12,    /**< the transaction was doomed by a failed call; it aborted */
    MNEMO_ETXSTATE = -13,    /**< transaction misuse: handle of another thread, levels ended
                                  out of order, log opened inside a transaction */
    MNEMO_ECORRUPT = -14,    /**< pool, heap or log metadata on media is damaged */
    MNEMO_ENOTPOOL = -15,    /**< the file is not a mnemo pool with a heap, or its format
                                  version is not supported */
    MNEMO_EPERM = -16,       /**< permission denied on the pool file */
    MNEMO_EIO = -17,         /**< an operating-system call failed */
    MNEMO_ELOGFULL = -18,    /**< the log has no room for the entry now: truncate it */
    MNEMO_EPANIC = -19       /**< internal error in mnemo (please report mnemo_errormsg()) */
};

/** One range of a mnemo_gmsync(): an address in the pool and a length. */
struct mnemo_range {
    const void *addr;
    size_t len;
};

/** Positions and counters of a log (see mnemo_log_info()). LSNs are byte positions in the
 * log's unbounded stream: they grow with every append and are never reused. */
struct mnemo_log_info {
    uint64_t entries;        /**< live entries */
    uint64_t head;           /**< LSN of the oldest live entry (== tail when empty) */
    uint64_t tail;           /**< LSN the next append gets */
    uint64_t used_bytes;     /**< bytes of the log area held by live entries */
    uint64_t free_bytes;     /**< bytes of the log area free */
    uint64_t capacity_bytes; /**< bytes of the log area */
};

/** Called by mnemo_log_iterate() for each entry; return nonzero to stop. */
typedef int (*mnemo_log_fn)(void *ctx, uint64_t lsn, const void *data, size_t len);

/* ---------------------------------------------------------------------------------------
 * Errors
 */

/**
 * Describe the last failure on the calling thread (like PMDK's pmemobj_errormsg).
 * @return a NUL-terminated message, never NULL ("no error" before any failure). It stays
 *         valid until the next failing mnemo call on the same thread; successful calls leave
 *         it unchanged.
 */
const char *mnemo_errormsg(void);

/**
 * A static description of an error code.
 * @param code a value of enum mnemo_error
 * @return a NUL-terminated string, never NULL ("unknown error code" for other values).
 */
const char *mnemo_strerror(int code);

/* ---------------------------------------------------------------------------------------
 * Pools
 */

/**
 * Create a pool file (mode 0600) holding an empty heap, and open it. The file appears at
 * @p path only when complete.
 * @param path     file to create; must not exist
 * @param size     initial size in bytes (at least 65536; grown to MNEMO_POOL_SIZE_MIN)
 * @param size_max largest size the pool may grow to, or 0 for 64 GiB; allocation grows the
 *                 pool on demand up to this size
 * @param pool     receives the handle
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_EINVAL (NULL argument, size out of range, size_max < size, no such
 * directory), MNEMO_EEXIST, MNEMO_ENOSPC (file system full, or size_max below
 * MNEMO_POOL_SIZE_MIN), MNEMO_EPERM, MNEMO_EIO.
 */
int mnemo_pool_create(const char *path, uint64_t size, uint64_t size_max, mnemo_pool **pool);

/**
 * Open a pool file, recovering it if the last process using it crashed.
 * @param path the pool file
 * @param pool receives the handle
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_EINVAL (NULL argument), MNEMO_ENOENT (no such file), MNEMO_EBUSY (open in
 * another process), MNEMO_ENOTPOOL, MNEMO_ECORRUPT, MNEMO_EPERM, MNEMO_EIO.
 */
int mnemo_pool_open(const char *path, mnemo_pool **pool);

/**
 * Close a pool: its logs are closed, every address obtained from it becomes invalid, and
 * the file is released (marked cleanly closed). Raw stores not yet synced are not made
 * durable: call mnemo_msync() first.
 * @param pool the pool
 * @return MNEMO_OK or an error; on MNEMO_EBUSY the pool stays open, on any other error
 *         (from the last writes) it is closed all the same.
 * Errors: MNEMO_EINVAL (NULL), MNEMO_EBADHANDLE, MNEMO_ECLOSED (already closed), MNEMO_EBUSY
 * (transactions are open on it, in any thread), MNEMO_ENOSPC, MNEMO_EIO.
 */
int mnemo_pool_close(mnemo_pool *pool);

/* ---------------------------------------------------------------------------------------
 * Named regions and roots
 */

/**
 * The region named @p name: created zeroed with @p size bytes if it does not exist (atomic:
 * after a crash it either exists, zeroed and named, or not at all).
 * @param pool the pool
 * @param name 1..MNEMO_NAME_MAX bytes of UTF-8
 * @param size size in bytes (> 0); must equal the size of an existing region
 * @param off  receives the region's offset
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_EINVAL (NULL argument, empty name, a name starting with "mnemo.", size 0),
 * MNEMO_ENAMETOOLONG,
 * MNEMO_EMISMATCH (exists with another size), MNEMO_ENOSPC (pool or table of names full),
 * MNEMO_EBUSY (another thread is creating or freeing the name), MNEMO_ETXTOOBIG (in a
 * transaction that becomes too large), MNEMO_EBADHANDLE, MNEMO_ECLOSED, MNEMO_EIO.
 */
int mnemo_nvalloc(mnemo_pool *pool, const char *name, uint64_t size, uint64_t *off);

/**
 * Free the region named @p name and remove the name (atomic).
 * @param pool the pool
 * @param name the region's name
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_EINVAL (NULL, empty or reserved name), MNEMO_ENAMETOOLONG, MNEMO_ENOENT (no
 * such region), MNEMO_EBUSY,
 * MNEMO_ETXTOOBIG, MNEMO_EBADHANDLE, MNEMO_ECLOSED, MNEMO_EIO.
 */
int mnemo_nvfree(mnemo_pool *pool, const char *name);

/**
 * Look up the region named @p name without creating it.
 * @param pool the pool
 * @param name the region's name
 * @param off  receives its offset (may be NULL)
 * @param size receives its size (may be NULL)
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_EINVAL (NULL pool or name), MNEMO_ENAMETOOLONG, MNEMO_ENOENT,
 * MNEMO_EBADHANDLE, MNEMO_ECLOSED.
 */
int mnemo_region(mnemo_pool *pool, const char *name, uint64_t *off, uint64_t *size);

/**
 * A persistent "static variable": the region named @p name of @p size bytes, created zeroed
 * on first use, as an address. The same as mnemo_nvalloc() followed by mnemo_direct().
 * @param pool the pool
 * @param name 1..MNEMO_NAME_MAX bytes of UTF-8
 * @param size size in bytes (> 0)
 * @param ptr  receives the address (valid until mnemo_pool_close())
 * @return MNEMO_OK or an error.
 * Errors: as mnemo_nvalloc().
 */
int mnemo_root(mnemo_pool *pool, const char *name, uint64_t size, void **ptr);

/* ---------------------------------------------------------------------------------------
 * Allocation
 */

/**
 * Allocate @p size bytes (contents unspecified; 16-byte aligned; objects above 64 KiB are
 * aligned to 256 KiB). Durable on return; joins the thread's transaction on the pool, if one
 * is open. See "Allocation" above about leaks.
 * @param pool the pool
 * @param size bytes (> 0, at most 1 GiB)
 * @param off  receives the offset
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_EINVAL (NULL, size 0), MNEMO_ENOSPC (pool full and cannot grow, or size
 * above 1 GiB), MNEMO_ETXTOOBIG, MNEMO_EBADHANDLE, MNEMO_ECLOSED, MNEMO_EIO.
 */
int mnemo_pmalloc(mnemo_pool *pool, uint64_t size, uint64_t *off);

/**
 * Free the allocation starting at @p off. Durable on return; joins the thread's open
 * transaction on the pool, if any.
 * @param pool the pool
 * @param off  an offset returned by mnemo_pmalloc() or mnemo_tx_alloc()
 * @return MNEMO_OK or an error; after MNEMO_EBADFREE the pool is unchanged.
 * Errors: MNEMO_EBADFREE (not the start of a live allocation: never allocated, already
 * freed, inside an object; or the offset of a named region: use mnemo_nvfree()),
 * MNEMO_ETXTOOBIG, MNEMO_EINVAL, MNEMO_EBADHANDLE, MNEMO_ECLOSED, MNEMO_EIO.
 */
int mnemo_pfree(mnemo_pool *pool, uint64_t off);

/**
 * The address of pool offset @p off in this process (like pmemobj_direct).
 * @param pool the pool
 * @param off  an offset in the pool's data area
 * @return the address, valid until mnemo_pool_close(); NULL on error (then mnemo_errormsg()
 *         says why).
 * Errors: MNEMO_EINVAL (offset outside the data area), MNEMO_EBADHANDLE, MNEMO_ECLOSED.
 */
void *mnemo_direct(mnemo_pool *pool, uint64_t off);

/**
 * The pool offset of an address in the pool's data area (the inverse of mnemo_direct()).
 * @param pool the pool
 * @param ptr  an address in the pool's mapping
 * @return the offset; 0 on error (0 is never the offset of data).
 * Errors: MNEMO_EINVAL (not in the data area), MNEMO_EBADHANDLE, MNEMO_ECLOSED.
 */
uint64_t mnemo_offset(mnemo_pool *pool, const void *ptr);

/* ---------------------------------------------------------------------------------------
 * Sync points (raw stores)
 */

/**
 * Make the @p len bytes at @p addr durable: every store made to them before the call is on
 * media when it returns (flush, one fence). Not atomic beyond single aligned 8-byte words:
 * a crash during the call may leave some cache lines of the range new and others old.
 * Recovery never puts older bytes back over the synced ones: if a committed transaction
 * wrote some of these bytes and its redo record could still be replayed, that record is
 * first retired (the heap raises its durable horizon past it: up to two extra fences); if
 * the last mnemo_gmsync() named some of them, its journal record is released (one extra
 * fence).
 * @param pool the pool
 * @param addr first byte, in the pool's data area
 * @param len  bytes (0: nothing to do)
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_EINVAL (NULL addr, range outside the data area), MNEMO_EBADHANDLE,
 * MNEMO_ECLOSED, MNEMO_ENOSPC, MNEMO_EIO.
 */
int mnemo_msync(mnemo_pool *pool, const void *addr, size_t len);

/**
 * Make several ranges durable together (Mojim's gmsync), all-or-nothing for ranges that
 * the previous gmsync on the pool also named.
 *
 * What "atomic" can mean here. The bytes being synced were changed *before* the call by
 * plain stores, and the CPU may write any of their cache lines back to media at any moment,
 * before anyone asks. Nothing done inside the call can take such an early write-back back;
 * only a copy taken *earlier* can. So each mnemo_gmsync keeps one:
 *   1. it copies the current contents of all ranges into a journal record (in one of the
 *      pool's two journal slots, before its data area), then flushes the record and the
 *      ranges and issues one fence: the commit point; on return all ranges are durable;
 *   2. mnemo_pool_open applies the newest complete journal record again (before the
 *      heap replays newer transactions).
 * After a crash:
 *   - if the call reached its commit point, every range holds exactly its contents at the
 *     call;
 *   - if not, every byte that the *previous* mnemo_gmsync on this pool named holds what that
 *     call made durable: stores made to it since are rolled back, even those the CPU had
 *     already written back. Bytes the previous call did not name hold, per aligned 8-byte
 *     word, their old or their new value (as after any crash before a sync).
 * So a set of ranges that a program updates with raw stores and publishes with repeated
 * gmsync calls naming the same ranges (a log's size, a record rewritten in place) moves from
 * one gmsync'ed state to the next, all or nothing; call mnemo_gmsync once on them (e.g. right
 * after creating them) to start. New data written next to them (a log entry beyond the
 * published size) is not rolled back but stays unpublished. The tests explore every crash
 * image of this under a simulator (crates/mnemo-ffi/tests/crash.rs).
 *
 * The record stops applying to bytes that become durable otherwise, so it never puts old
 * bytes back over newer durable ones: any other sync point naming some of them (mnemo_msync(),
 * the commit of a transaction that wrote them, a later write into memory freed and allocated
 * again) releases it first (one extra fence; the rollback protection of the whole record
 * ends until the next gmsync, whose crash images may then mix old and new words).
 * Raw stores to journalled bytes that are never synced are undone at the next open.
 *
 * Rules: the ranges must lie in allocated objects or regions; other threads must not store
 * to them during the call; concurrent gmsync calls on one pool are serialised. The record
 * holds 32 bytes plus, per range, 16 bytes and the length rounded up to 8: at most
 * MNEMO_GMSYNC_RECORD_MAX. Cost: copying the ranges and one fence; up to two fences when a
 * transaction's redo record covering the ranges must be retired first. Called while the thread has a
 * transaction open, it does not join it.
 * @param pool   the pool
 * @param ranges @p n ranges in the pool's data area (zero-length ones are ignored)
 * @param n      number of ranges, at most MNEMO_GMSYNC_RANGES_MAX (0: nothing to do)
 * @return MNEMO_OK or an error (after an I/O error the ranges may or may not be durable).
 * Errors: MNEMO_EINVAL (NULL ranges with n > 0, NULL addr, range outside the data area, too
 * many ranges), MNEMO_ETXTOOBIG (the ranges do not fit the record), MNEMO_ENOSPC (no room
 * for the record's region), MNEMO_EBADHANDLE, MNEMO_ECLOSED, MNEMO_EIO.
 */
int mnemo_gmsync(mnemo_pool *pool, const struct mnemo_range *ranges, size_t n);

/* ---------------------------------------------------------------------------------------
 * Transactions (read THE REDO RULE above)
 */

/**
 * Begin a transaction on the calling thread, or a nested level of the one it has open on
 * this pool (flattened: the outermost level's commit commits everything).
 * @param pool the pool
 * @param tx   receives the handle of the new level; end it with mnemo_tx_commit() or
 *             mnemo_tx_abort() on this thread. A thread that exits with a level open aborts
 *             it.
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_EINVAL (NULL tx), MNEMO_EBADHANDLE, MNEMO_ECLOSED.
 */
int mnemo_tx_begin(mnemo_pool *pool, mnemo_tx **tx);

/**
 * Store @p len bytes from @p src at offset @p off when the transaction commits. The bytes
 * are copied now (src may be reused at once). Plain loads see them only after the commit;
 * mnemo_tx_read() sees them now. Bytes covered by the last mnemo_gmsync() record release
 * it when the commit's application is made durable (see there).
 * @param tx  an open level of this thread's transaction
 * @param off offset in the data area (an object, a region)
 * @param src the bytes (may be NULL if len is 0)
 * @param len number of bytes
 * @return MNEMO_OK or an error; on error the transaction is doomed.
 * Errors: MNEMO_EINVAL (NULL src, range outside the data area), MNEMO_ETXTOOBIG (the record
 * would exceed MNEMO_TX_RECORD_MAX), MNEMO_ETXSTATE (another thread's transaction),
 * MNEMO_EBADHANDLE, MNEMO_ECLOSED (ended transaction, or its pool was closed).
 */
int mnemo_tx_write(mnemo_tx *tx, uint64_t off, const void *src, size_t len);

/**
 * Read @p len bytes at @p off as the transaction sees them (its own writes included).
 * @param tx  an open level of this thread's transaction
 * @param off offset in the pool
 * @param dst receives the bytes (may be NULL if len is 0)
 * @param len number of bytes
 * @return MNEMO_OK or an error; on error the transaction is doomed.
 * Errors: MNEMO_EINVAL (NULL dst, range outside the pool), MNEMO_ETXSTATE, MNEMO_EBADHANDLE,
 * MNEMO_ECLOSED.
 */
int mnemo_tx_read(mnemo_tx *tx, uint64_t off, void *dst, size_t len);

/**
 * Allocate @p size zeroed bytes that exist only if the transaction commits. Fill the new
 * object with mnemo_tx_write() (cheap: not logged, only checked).
 * @param tx   an open level of this thread's transaction
 * @param size bytes (> 0, at most 1 GiB)
 * @param off  receives the offset
 * @return MNEMO_OK or an error; on error the transaction is doomed.
 * Errors: MNEMO_EINVAL (NULL off, size 0), MNEMO_ENOSPC (also: size above 1 GiB),
 * MNEMO_ETXTOOBIG,
 * MNEMO_ETXSTATE, MNEMO_EBADHANDLE, MNEMO_ECLOSED, MNEMO_EIO.
 */
int mnemo_tx_alloc(mnemo_tx *tx, uint64_t size, uint64_t *off);

/**
 * Free the allocation at @p off when the transaction commits.
 * @param tx  an open level of this thread's transaction
 * @param off the start of a live allocation
 * @return MNEMO_OK or an error; on error the transaction is doomed.
 * Errors: MNEMO_EBADFREE (not the start of a live allocation, or already freed in this
 * transaction), MNEMO_ETXTOOBIG, MNEMO_ETXSTATE, MNEMO_EBADHANDLE, MNEMO_ECLOSED.
 */
int mnemo_tx_free(mnemo_tx *tx, uint64_t off);

/**
 * End this level. Ending the outermost level commits the transaction: on MNEMO_OK every
 * write, allocation and free is applied and durable. The handle is invalid afterwards,
 * whatever the result.
 * @param tx the innermost open level of its pool on this thread
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_EABORTED (an earlier call in the transaction failed, or an inner level
 * aborted: nothing was applied), MNEMO_ETXSTATE (another thread's handle, or an inner level
 * is still open: the handle stays valid), MNEMO_ECLOSED (already ended, or the pool was
 * closed: the transaction aborted), MNEMO_ETXTOOBIG (nothing applied), MNEMO_EBADHANDLE,
 * MNEMO_EIO (the commit may or may not have taken effect; reopen the pool to know).
 */
int mnemo_tx_commit(mnemo_tx *tx);

/**
 * Abort the whole transaction (an inner level dooms the outer ones: their commit returns
 * MNEMO_EABORTED) and end this level. Nothing of the transaction takes effect.
 * @param tx the innermost open level of its pool on this thread
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_ETXSTATE (another thread's handle, or an inner level is still open),
 * MNEMO_ECLOSED (already ended), MNEMO_EBADHANDLE, MNEMO_EINVAL (NULL).
 */
int mnemo_tx_abort(mnemo_tx *tx);

/* ---------------------------------------------------------------------------------------
 * Append-only logs (torn-bit: one fence per append, exact recovery)
 */

/**
 * Open the log kept in the region named @p name (created on first use with @p size bytes;
 * an existing region must have that size). Opening recovers the log: exactly the complete
 * appends are found. Each log may have one handle per process.
 * @param pool the pool
 * @param name the region's name
 * @param size region size in bytes, at least MNEMO_LOG_SIZE_MIN; entries take their length
 *             plus 8 bytes per 63 bytes (or part) plus 8
 * @param log  receives the handle
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_EINVAL (NULL argument, reserved name, size too small), MNEMO_ENAMETOOLONG,
 * MNEMO_EMISMATCH (the region has another size), MNEMO_EBUSY (already open in this
 * process), MNEMO_ETXSTATE (called inside a transaction on the pool), MNEMO_ECORRUPT,
 * MNEMO_ENOSPC, MNEMO_EBADHANDLE, MNEMO_ECLOSED, MNEMO_EIO.
 */
int mnemo_log_open(mnemo_pool *pool, const char *name, uint64_t size, mnemo_log **log);

/**
 * Append one entry; durable on return (one fence). A crash during the call leaves the
 * entry either complete or absent.
 * @param log  the log
 * @param data the bytes (may be NULL if len is 0)
 * @param len  number of bytes
 * @param lsn  receives the entry's LSN (may be NULL)
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_ELOGFULL (no room now: mnemo_log_truncate()), MNEMO_EINVAL (NULL data, entry
 * larger than the log could ever hold), MNEMO_EBADHANDLE, MNEMO_ECLOSED, MNEMO_EIO.
 */
int mnemo_log_append(mnemo_log *log, const void *data, size_t len, uint64_t *lsn);

/**
 * Call @p fn(ctx, lsn, data, len) for every live entry, oldest first, until it returns
 * nonzero. The entries are read before the first call, so @p fn may call any mnemo
 * function, on this log too; @p data is valid during the call only.
 * @param log the log
 * @param fn  the callback
 * @param ctx passed to @p fn
 * @return MNEMO_OK (also when @p fn stopped the walk) or an error.
 * Errors: MNEMO_EINVAL (NULL fn), MNEMO_ECORRUPT (a live entry fails its checksum: media
 * damage), MNEMO_EBADHANDLE, MNEMO_ECLOSED.
 */
int mnemo_log_iterate(mnemo_log *log, mnemo_log_fn fn, void *ctx);

/**
 * Drop every entry before @p lsn; durable on return (one fence).
 * @param log     the log
 * @param lsn     the LSN of a live entry, or the tail (drops everything)
 * @param dropped receives the number of entries dropped (may be NULL)
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_EINVAL (not the LSN of a live entry), MNEMO_EBADHANDLE, MNEMO_ECLOSED,
 * MNEMO_EIO.
 */
int mnemo_log_truncate(mnemo_log *log, uint64_t lsn, uint64_t *dropped);

/**
 * Positions and counters of a log.
 * @param log  the log
 * @param info receives them
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_EINVAL (NULL info), MNEMO_EBADHANDLE, MNEMO_ECLOSED.
 */
int mnemo_log_info(mnemo_log *log, struct mnemo_log_info *info);

/**
 * Close a log handle. Appends are already durable: nothing is written.
 * @param log the log
 * @return MNEMO_OK or an error.
 * Errors: MNEMO_EINVAL (NULL), MNEMO_EBADHANDLE, MNEMO_ECLOSED (already closed, or its pool
 * was closed).
 */
int mnemo_log_close(mnemo_log *log);

#ifdef __cplusplus
}
#endif

#endif /* MNEMO_H */
