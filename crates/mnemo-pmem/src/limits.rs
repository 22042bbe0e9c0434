//! Every limit of the media layer, named in one place, each with the reason for its value.

/// Size of one header copy. A whole page, so that a torn write of one copy (the unit the
/// kernel and the device write is at most a page) never touches the other.
pub const HEADER_COPY_SIZE: u64 = 4096;

/// Number of header copies; written alternately (LMDB's meta pages).
pub const HEADER_COPIES: u64 = 2;

/// Offset of the gmsync journal's two slots: right after both header copies.
pub const JOURNAL_OFFSET: u64 = HEADER_COPY_SIZE * HEADER_COPIES;

/// Bytes of one gmsync journal slot: the largest record, so the most one gmsync may name
/// (32 bytes, plus per range 16 and its length rounded up to 8). 16 KiB keeps the journal
/// within the smallest pool with room for data.
pub const JOURNAL_SLOT_SIZE: u64 = 16 * 1024;

/// Offset of the first byte that belongs to the layers above (heap, logs): after both
/// header copies and the two journal slots.
pub const DATA_OFFSET: u64 = JOURNAL_OFFSET + 2 * JOURNAL_SLOT_SIZE;

/// Smallest pool: the headers and the journal plus 24 KiB of data.
pub const POOL_SIZE_MIN: u64 = 64 * 1024;

/// Largest pool, and the largest address-space reservation: 1 TiB leaves room for dozens of
/// open pools in a 128 TiB user address space.
pub const POOL_SIZE_MAX: u64 = 1 << 40;

/// Default address space reserved for growth when the caller names no maximum: 64 GiB. The
/// reservation is `PROT_NONE` and costs no memory, only address space.
pub const RESERVE_DEFAULT: u64 = 64 << 30;

/// Pools grow in whole pages: the unit of mapping.
pub const PAGE_SIZE: u64 = 4096;

/// Cache line: the unit of flushing and of the crash model.
pub const CACHE_LINE: u64 = 64;

/// Longest layout name, in bytes (UTF-8). Fits the header's fixed field.
pub const LAYOUT_NAME_MAX: usize = 64;

/// Copies at least this long use non-temporal stores by default (PMDK uses the same
/// threshold; measured here NT+sfence is 1.4-2x faster than store+clwb from 256 B up).
pub const MOVNT_THRESHOLD_DEFAULT: usize = 256;

/// Most ranges one `gmsync` may name; bounds the work a sync point does and the size of a
/// replication record built from it.
pub const GMSYNC_RANGES_MAX: usize = 1024;

/// Most ranges one sync point hands a policy: a gmsync's ranges, plus the journal record it
/// stages, plus the header of a record another sync point releases.
pub const SYNC_RANGES_MAX: usize = GMSYNC_RANGES_MAX + 2;

/// How long open waits for a pool lock that is held, before reporting the pool in use: long
/// enough to outlast a forked child's moment between fork and exec, short enough for a person.
pub const LOCK_WAIT_MS: u64 = 200;

/// What one run of consecutive dirty lines costs a narrowed flush, in lines of a linear
/// sweep. A sync point flushes a range whole when `dirty lines + runs * this` exceeds the
/// range's lines. Measured here (`mnemo-bench` `spf`, break-even sweep over 64 MiB): a
/// linear sweep costs ~2.5 ns per line, scattered short runs 30-160 ns each, long runs ~4
/// ns per line; bitmap narrowing stopped paying between 2 % and 5 % of lines dirty at
/// random, page narrowing only near 50 % of pages. 30 puts both crossovers there.
pub const SPF_RUN_COST_LINES: u64 = 30;

/// Page regions fetched per `PAGEMAP_SCAN` call (24 bytes each, on the stack); a scan with
/// more dirty runs continues where the kernel stopped.
pub const SPF_SCAN_REGIONS: usize = 512;

/// Largest region the mprotect + SIGSEGV fallback tracks. Every boundary between protected
/// and unprotected pages splits a kernel VMA and a process may have 65530; 4096 pages leave
/// room. Faults cost 9-15 us each here, so larger regions are better flushed whole.
pub const SPF_MPROTECT_BYTES_MAX: u64 = 16 << 20;

/// Unit of the optional chunk hints over userfaultfd tracking (`TrackerOptions::chunk_hints`):
/// a chunk is write-protected with mprotect, its first store per epoch takes a SIGSEGV and
/// sets the chunk's bit, and sync points scan only the chunks so marked. mprotect of a chunk
/// walks its page-table entries (about 80 us per first store and sync point at 2 MiB here),
/// so smaller chunks fault cheaper but need more VMAs.
pub const SPF_CHUNK_BYTES: u64 = 256 << 10;

/// Largest pool that gets chunk hints: alternating protected and writable chunks split the
/// mapping into one VMA per chunk at worst, and a process may have 65530; 16384 chunks leave
/// room for everything else.
pub const SPF_CHUNK_POOL_MAX: u64 = SPF_CHUNK_BYTES * 16384;

/// What one chunk of the chunk hints costs per epoch (a SIGSEGV and two mprotects, ≈20 us
/// here), in pages the scan walks in the same time (≈1.8 ns each): a sync point whose range
/// had more dirty chunks than `range pages / this` switches the hints off (the plain scan is
/// cheaper), and a later one that finds at most that many dirty pages switches them back on.
pub const SPF_CHUNK_COST_PAGES: u64 = 11_000;
