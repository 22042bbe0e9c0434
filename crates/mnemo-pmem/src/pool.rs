//! [`Pool`]: a medium plus its header; create, open, grow, close, and the sync points.

use std::fs::{File, OpenOptions as FsOpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, MediaError};
use crate::file::FileMedia;
use crate::header::{self, Header, Pair, FORMAT_VERSION};
use crate::journal::{self, Journal};
use crate::limits::{
    DATA_OFFSET, GMSYNC_RANGES_MAX, HEADER_COPY_SIZE, JOURNAL_OFFSET, JOURNAL_SLOT_SIZE,
    LAYOUT_NAME_MAX, PAGE_SIZE, POOL_SIZE_MAX, POOL_SIZE_MIN, RESERVE_DEFAULT, SYNC_RANGES_MAX,
};
use crate::media::{Media, MediaInfo, MediaKind};
use crate::sync::{ByteRange, LocalPolicy, SyncKind, SyncPoint, SyncPolicy};
use crate::track::{TrackStats, Tracker, TrackerOptions, Tracking, TrackingInfo};

/// How to create a pool.
#[derive(Clone, Debug)]
pub struct CreateOptions {
    /// Initial size in bytes (rounded up to a page).
    pub size: u64,
    /// Largest size the pool may grow to while open (address space reserved at open).
    pub size_max: u64,
    /// The program's name for what it keeps in the pool; checked at open.
    pub layout: String,
    /// The durability policy from the first sync point on (None: [`LocalPolicy`]). Given
    /// here, not set later, when a policy must see every sync point, the header's first.
    pub policy: Option<Arc<dyn SyncPolicy>>,
}

impl CreateOptions {
    /// A pool of `size` bytes with `layout`, growable to 64 GiB (or `size`, if larger).
    pub fn new(size: u64, layout: &str) -> CreateOptions {
        CreateOptions {
            size,
            size_max: RESERVE_DEFAULT.max(size),
            layout: layout.to_string(),
            policy: None,
        }
    }

    fn validate(&self) -> Result<(u64, u64), Error> {
        if self.size < POOL_SIZE_MIN || self.size > POOL_SIZE_MAX {
            return Err(Error::InvalidArgument(format!(
                "pool size {} is outside {POOL_SIZE_MIN}..={POOL_SIZE_MAX} bytes",
                self.size
            )));
        }
        if self.layout.len() > LAYOUT_NAME_MAX {
            return Err(Error::InvalidArgument(format!(
                "layout name is {} bytes long; at most {LAYOUT_NAME_MAX} fit",
                self.layout.len()
            )));
        }
        let size = self.size.next_multiple_of(PAGE_SIZE);
        let size_max = self
            .size_max
            .max(size)
            .min(POOL_SIZE_MAX)
            .next_multiple_of(PAGE_SIZE);
        Ok((size, size_max))
    }
}

/// How to open a pool.
#[derive(Clone, Debug, Default)]
pub struct OpenOptions {
    /// Refuse a pool whose layout differs (None: accept any).
    pub layout: Option<String>,
    /// Reserve address space for growth up to this many bytes (None: the header's size_max).
    pub size_max: Option<u64>,
    /// The durability policy from the first sync point on (None: [`LocalPolicy`]).
    pub policy: Option<Arc<dyn SyncPolicy>>,
}

/// Counters of the sync-point pipeline: a snapshot taken by [`Pool::stats`]. (The fields
/// are atomics so that code reading them with `.load(Ordering::Relaxed)` keeps working; the
/// live counters are per thread, summed when this snapshot is taken.)
#[derive(Debug, Default)]
pub struct PoolStats {
    /// Sync points completed.
    pub sync_points: AtomicU64,
    /// Ranges named by sync points.
    pub sync_ranges: AtomicU64,
    /// Bytes named by sync points.
    pub sync_bytes: AtomicU64,
    /// Sync points of metadata and of the pool header ([`SyncKind::Metadata`],
    /// [`SyncKind::Header`]), not counted above.
    pub internal_sync_points: AtomicU64,
}

/// One thread's sync-point counters for one pool, on a cache line of its own: only that
/// thread writes them (a plain load and store each, no locked instruction), readers sum.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Shard {
    /// Data sync points, their ranges, their bytes; internal sync points.
    counts: [AtomicU64; COUNTERS],
}

impl Shard {
    #[inline]
    fn add(&self, values: [u64; COUNTERS]) {
        for (count, value) in self.counts.iter().zip(values) {
            // Single writer (the owning thread), so load + store loses nothing.
            count.store(count.load(Ordering::Relaxed) + value, Ordering::Relaxed);
        }
    }
}

/// A pool's sync-point counters, sharded per thread so that sync points on different threads
/// (transaction commits, log appends) never contend for a cache line and never issue a
/// locked instruction. [`SyncCounters::sum`] adds the shards up (under a lock; stats are
/// read rarely). Shards of threads that have exited are folded into `retired` when a new
/// thread registers, so their number stays bounded by the live threads.
#[derive(Debug)]
struct SyncCounters {
    /// Unique per pool in this process: the key of the calling thread's shard.
    id: u64,
    shards: Mutex<Vec<Arc<Shard>>>,
    retired: Shard,
}

/// Whether a sync point is narrowed to what dirty tracking saw change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Narrow {
    Yes,
    No,
}

/// Whether a sync point releases a gmsync journal record that covers some of its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Release {
    Yes,
    No,
}

/// Counters per shard: see [`Shard::counts`].
const COUNTERS: usize = 4;

/// The tracked sync point keeps its buffer of narrowed ranges up to this many (16 KiB).
const SCRATCH_RANGES_KEPT: usize = 1024;

static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's shards, by pool id; the most recently used first.
    static SHARDS: std::cell::RefCell<Vec<(u64, Arc<Shard>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl SyncCounters {
    fn new() -> SyncCounters {
        SyncCounters {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            shards: Mutex::new(Vec::new()),
            retired: Shard::default(),
        }
    }

    #[inline]
    fn add(&self, values: [u64; COUNTERS]) {
        let fast = SHARDS.try_with(|mine| {
            let mine = mine.try_borrow().ok()?;
            let (id, shard) = mine.first()?;
            (*id == self.id).then(|| shard.add(values))
        });
        if !matches!(fast, Ok(Some(()))) {
            self.add_slow(values);
        }
    }

    #[cold]
    fn add_slow(&self, values: [u64; COUNTERS]) {
        let registered = SHARDS.try_with(|mine| {
            let Ok(mut mine) = mine.try_borrow_mut() else {
                return false;
            };
            if let Some(i) = mine.iter().position(|(id, _)| *id == self.id) {
                let entry = mine.remove(i);
                mine.insert(0, entry);
            } else {
                // Forget shards of pools that are gone (the pool held the other reference).
                mine.retain(|(_, shard)| Arc::strong_count(shard) > 1);
                let shard = Arc::new(Shard::default());
                let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
                // Fold the shards of exited threads (only the pool holds them) into `retired`.
                shards.retain(|old| {
                    let gone = Arc::strong_count(old) == 1;
                    if gone {
                        let counts = old.counts.each_ref().map(|c| c.load(Ordering::Relaxed));
                        for (total, value) in self.retired.counts.iter().zip(counts) {
                            total.fetch_add(value, Ordering::Relaxed);
                        }
                    }
                    !gone
                });
                shards.push(Arc::clone(&shard));
                mine.insert(0, (self.id, shard));
            }
            mine[0].1.add(values);
            true
        });
        if registered != Ok(true) {
            // Thread-local storage is being torn down: count in the shared shard instead.
            for (total, value) in self.retired.counts.iter().zip(values) {
                total.fetch_add(value, Ordering::Relaxed);
            }
        }
    }

    fn sum(&self) -> [u64; COUNTERS] {
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        let mut total = self
            .retired
            .counts
            .each_ref()
            .map(|c| c.load(Ordering::Relaxed));
        for shard in shards.iter() {
            for (t, c) in total.iter_mut().zip(&shard.counts) {
                *t += c.load(Ordering::Relaxed);
            }
        }
        total
    }
}

/// An open pool: a [`Media`] whose first 8 KiB hold the two header copies and the next
/// 32 KiB the gmsync journal ([`crate::journal`]).
#[derive(Debug)]
pub struct Pool {
    /// Dirty tracking (SPF), once enabled. Declared first: dropped before the medium is
    /// unmapped (the mprotect fallback restores the mapping's protection on drop).
    tracker: OnceLock<Tracker>,
    media: Box<dyn Media>,
    name: PathBuf,
    header: Mutex<Header>,
    size: AtomicU64,
    policy: Arc<dyn SyncPolicy>,
    journal: Journal,
    stats: SyncCounters,
    was_clean: bool,
    closed: AtomicBool,
    /// The file handle holding the advisory lock (file-backed pools).
    _lock: Option<File>,
}

fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Take the pool's exclusive advisory lock. A lock can outlive its holder by a moment (a
/// child forked between our fork and its exec holds a copy of the descriptor), so a busy
/// lock is retried for up to `limits::LOCK_WAIT_MS` before the pool is reported in use.
fn lock_exclusive(path: &Path, file: &File) -> Result<(), Error> {
    let deadline =
        std::time::Instant::now() + std::time::Duration::from_millis(crate::limits::LOCK_WAIT_MS);
    loop {
        match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(Error::Busy {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(Error::from_io(path, "flock", e.into())),
        }
    }
}

fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

impl Pool {
    /// Create a new pool file at `path` (mode 0600). Fails if the file exists. The pool
    /// appears at `path` only once complete: it is built under a temporary name and renamed.
    pub fn create(path: &Path, options: &CreateOptions) -> Result<Pool, Error> {
        let (size, size_max) = options.validate()?;
        if path.exists() {
            return Err(Error::AlreadyExists {
                path: path.to_path_buf(),
            });
        }
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !dir.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "cannot create {}: directory {} does not exist (create it first)",
                path.display(),
                dir.display()
            )));
        }
        let stat =
            rustix::fs::statvfs(&dir).map_err(|e| Error::from_io(&dir, "statvfs", e.into()))?;
        let available = stat.f_bavail.saturating_mul(stat.f_frsize);
        if available < size {
            return Err(Error::NoSpace {
                path: path.to_path_buf(),
                needed: size,
                available,
            });
        }
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = dir.join(format!(".{file_name}.creating.{}", std::process::id()));
        let result = Self::create_at(
            path,
            &temp,
            (size, size_max),
            &options.layout,
            options.policy.clone(),
        );
        if result.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        result
    }

    fn create_at(
        path: &Path,
        temp: &Path,
        (size, size_max): (u64, u64),
        layout: &str,
        policy: Option<Arc<dyn SyncPolicy>>,
    ) -> Result<Pool, Error> {
        let file = FsOpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(temp)
            .map_err(|e| Error::from_io(path, "create", e))?;
        lock_exclusive(path, &file)?;
        file.set_len(size)
            .map_err(|e| Error::from_io(path, "ftruncate", e))?;
        let lock = file
            .try_clone()
            .map_err(|e| Error::from_io(path, "dup", e))?;
        let media = FileMedia::map(path, file, size, size_max)?;
        // On disk file systems reserve every block now (cheap: unwritten extents) so a full
        // disk is an error here, not a SIGBUS later. On tmpfs fallocate would zero every page
        // (20 ms for 64 MiB); the free-space check above covers creation, and the heap
        // reserves pages as it first hands them out (`Media::ensure_backed`).
        let backed = if media.info().kind == MediaKind::Tmpfs {
            DATA_OFFSET
        } else {
            size
        };
        media
            .ensure_backed(0, backed)
            .map_err(|e| media_error(path, e))?;
        let header = Header {
            format_version: FORMAT_VERSION,
            generation: 1,
            pool_uuid: uuid::Uuid::new_v4(),
            pool_size: size,
            size_max,
            created_unix_ns: now_unix_ns(),
            data_offset: DATA_OFFSET,
            page_size: PAGE_SIZE as u32,
            flags: 0,
            clean_shutdown: false,
            layout: layout.to_string(),
            creator: format!("mnemo {}", env!("CARGO_PKG_VERSION")),
        };
        let policy = match policy {
            Some(policy) => Some(policy),
            None => default_policy(path, &media, true)?,
        };
        map_for(path, &media, policy.as_deref())?;
        let pool = Pool::init(
            crate::emu::wrap_from_env(media),
            path,
            header,
            Some(lock),
            policy,
        )?;
        pool.track_from_env()?;
        if pool.media.info().durability == crate::Durability::Msync {
            // The file's size and blocks are metadata: make them durable before the name.
            pool._lock
                .as_ref()
                .map(File::sync_all)
                .transpose()
                .map_err(|e| Error::from_io(path, "fsync", e))?;
        }
        rustix::fs::renameat_with(
            rustix::fs::CWD,
            temp,
            rustix::fs::CWD,
            path,
            rustix::fs::RenameFlags::NOREPLACE,
        )
        .map_err(|e| Error::from_io(path, "rename", e.into()))?;
        sync_dir(path);
        Ok(pool)
    }

    /// Format a fresh medium as a pool (both header copies written and persisted). Used by
    /// [`Pool::create`] and by simulated media in tests.
    pub fn create_on(
        media: Box<dyn Media>,
        name: &Path,
        options: &CreateOptions,
    ) -> Result<Pool, Error> {
        let (size, size_max) = options.validate()?;
        if media.len() < size {
            media.grow(size).map_err(|e| media_error(name, e))?;
        }
        let header = Header {
            format_version: FORMAT_VERSION,
            generation: 1,
            pool_uuid: uuid::Uuid::new_v4(),
            pool_size: size,
            size_max: size_max.min(media.capacity()),
            created_unix_ns: now_unix_ns(),
            data_offset: DATA_OFFSET,
            page_size: PAGE_SIZE as u32,
            flags: 0,
            clean_shutdown: false,
            layout: options.layout.clone(),
            creator: format!("mnemo {}", env!("CARGO_PKG_VERSION")),
        };
        Pool::init(media, name, header, None, options.policy.clone())
    }

    /// Write both header copies of a new pool: generation 1 into copy 1, then generation 2
    /// (the one in force, marked open) into copy 0.
    fn init(
        media: Box<dyn Media>,
        name: &Path,
        first: Header,
        lock: Option<File>,
        policy: Option<Arc<dyn SyncPolicy>>,
    ) -> Result<Pool, Error> {
        let pool = Pool {
            size: AtomicU64::new(first.pool_size),
            header: Mutex::new(first.clone()),
            media,
            name: name.to_path_buf(),
            policy: policy.unwrap_or_else(|| Arc::new(LocalPolicy)),
            journal: Journal::default(),
            stats: SyncCounters::new(),
            was_clean: true,
            closed: AtomicBool::new(false),
            tracker: OnceLock::new(),
            _lock: lock,
        };
        pool.policy
            .open(pool.media.as_ref(), first.pool_uuid, true)
            .map_err(|e| media_error(&pool.name, e))?;
        pool.write_copy(&first)?;
        pool.update_header(|_| {})?;
        Ok(pool)
    }

    /// Open an existing pool file.
    pub fn open(path: &Path, options: &OpenOptions) -> Result<Pool, Error> {
        let meta = std::fs::metadata(path).map_err(|e| Error::from_io(path, "stat", e))?;
        if !meta.is_file() {
            return Err(Error::NotAPool {
                path: path.to_path_buf(),
                detail: "not a regular file".into(),
            });
        }
        if meta.permissions().mode() & 0o200 == 0 {
            return Err(Error::PermissionDenied {
                path: path.to_path_buf(),
                detail: format!(
                    "the file is read-only (mode {:o})",
                    meta.permissions().mode() & 0o777
                ),
            });
        }
        let file = FsOpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::from_io(path, "open", e))?;
        lock_exclusive(path, &file)?;
        let file_len = file
            .metadata()
            .map_err(|e| Error::from_io(path, "stat", e))?
            .len();
        let header = read_header(path, &file, file_len)?;
        if let Some(expected) = &options.layout {
            if *expected != header.layout {
                return Err(Error::LayoutMismatch {
                    path: path.to_path_buf(),
                    expected: expected.clone(),
                    found: header.layout,
                });
            }
        }
        let size_max = options
            .size_max
            .unwrap_or(header.size_max)
            .max(header.pool_size);
        let lock = file
            .try_clone()
            .map_err(|e| Error::from_io(path, "dup", e))?;
        let media = FileMedia::map(path, file, header.pool_size, size_max)?;
        media
            .ensure_backed(0, DATA_OFFSET)
            .map_err(|e| media_error(path, e))?;
        let policy = match &options.policy {
            Some(policy) => {
                let mut wal = path.as_os_str().to_os_string();
                wal.push(".wal");
                // A crash may have left records there that only the write-ahead policy
                // replays: another policy would serve the pool without them (acknowledged
                // writes lost). After a clean close every record is in the pool file.
                if policy.name() != "write-ahead"
                    && Path::new(&wal).exists()
                    && !header.clean_shutdown
                {
                    return Err(Error::WriteAheadLeft {
                        path: path.to_path_buf(),
                        wal: PathBuf::from(wal),
                        policy: policy.name().to_string(),
                    });
                }
                Some(Arc::clone(policy))
            }
            None => default_policy(path, &media, false)?,
        };
        map_for(path, &media, policy.as_deref())?;
        let pool = Pool::attach(
            crate::emu::wrap_from_env(media),
            path,
            header,
            Some(lock),
            policy,
        )?;
        pool.track_from_env()?;
        Ok(pool)
    }

    /// Open a pool on a medium that already holds one (simulated media in tests).
    pub fn open_on(
        media: Box<dyn Media>,
        name: &Path,
        options: &OpenOptions,
    ) -> Result<Pool, Error> {
        let len = media.len();
        if len < HEADER_COPY_SIZE * 2 {
            return Err(Error::Truncated {
                path: name.to_path_buf(),
                file_len: len,
                expected: HEADER_COPY_SIZE * 2,
                detail: "two header copies",
            });
        }
        let bytes = media_bytes(media.as_ref(), 0, HEADER_COPY_SIZE * 2);
        let header = choose(name, &Pair::decode(&bytes), len)?;
        if let Some(expected) = &options.layout {
            if *expected != header.layout {
                return Err(Error::LayoutMismatch {
                    path: name.to_path_buf(),
                    expected: expected.clone(),
                    found: header.layout,
                });
            }
        }
        Pool::attach(media, name, header, None, options.policy.clone())
    }

    fn attach(
        media: Box<dyn Media>,
        name: &Path,
        header: Header,
        lock: Option<File>,
        policy: Option<Arc<dyn SyncPolicy>>,
    ) -> Result<Pool, Error> {
        let was_clean = header.clean_shutdown;
        let pool = Pool {
            size: AtomicU64::new(header.pool_size),
            header: Mutex::new(header),
            media,
            name: name.to_path_buf(),
            policy: policy.unwrap_or_else(|| Arc::new(LocalPolicy)),
            journal: Journal::default(),
            stats: SyncCounters::new(),
            was_clean,
            closed: AtomicBool::new(false),
            tracker: OnceLock::new(),
            _lock: lock,
        };
        let uuid = pool.header().pool_uuid;
        pool.policy
            .open(pool.media.as_ref(), uuid, false)
            .map_err(|e| media_error(&pool.name, e))?;
        pool.update_header(|h| h.clean_shutdown = false)?;
        pool.recover_journal()?;
        if !was_clean {
            tracing::info!(pool = %name.display(), "pool was not closed cleanly; layers above run recovery");
        }
        Ok(pool)
    }

    /// Replace the durability policy (replication installs its own at start-up).
    pub fn set_sync_policy(&mut self, policy: Arc<dyn SyncPolicy>) {
        self.policy = policy;
    }

    /// The policy in force.
    pub fn sync_policy(&self) -> &dyn SyncPolicy {
        self.policy.as_ref()
    }

    /// The file (or medium name) of this pool, for messages.
    pub fn name(&self) -> &Path {
        &self.name
    }

    /// The header in force.
    pub fn header(&self) -> Header {
        self.header
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether the previous process closed the pool cleanly (read at open).
    pub fn was_clean(&self) -> bool {
        self.was_clean
    }

    /// Pool size in bytes, headers included.
    #[inline]
    pub fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }

    /// Asks the CPU to bring the cache line holding `offset` into its caches, so that a read
    /// of it a little later does not wait for memory (the key-value server does this for the
    /// next requests of a batch). Only a hint: nothing happens outside the pool, and nothing
    /// is read, so a wrong offset costs nothing but the hint.
    pub fn prefetch(&self, offset: u64) {
        if offset < self.media.len() {
            let line = self.media.base().as_ptr().wrapping_add(offset as usize);
            #[cfg(target_arch = "x86_64")]
            // SAFETY: a prefetch reads nothing architecturally and never faults; the address
            // is inside the mapping anyway.
            #[allow(unsafe_code, unused_unsafe)]
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                    line.cast::<i8>(),
                );
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = line;
        }
    }

    /// The name of the sync policy in use (`local`, `write-ahead`, `mirror-sync`, ...).
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// Figures of the policy's write-ahead file, if it keeps one (the write-ahead policy of
    /// page-cache pools: records, fdatasyncs, checkpoints, bytes pending replay).
    pub fn write_ahead(&self) -> Option<crate::wal::WalStats> {
        self.policy.write_ahead()
    }

    /// First offset available to the layers above.
    pub fn data_offset(&self) -> u64 {
        DATA_OFFSET
    }

    /// Address of the pool's first byte in this process; never moves while the pool is open.
    pub fn base(&self) -> NonNull<u8> {
        self.media.base()
    }

    /// Most bytes the pool may grow to while open (its address-space reservation).
    pub fn capacity(&self) -> u64 {
        self.media.capacity()
    }

    /// Make sure `offset..offset+len` is backed by storage, so that stores there cannot fail
    /// for lack of space (on a file: `fallocate`). The range may lie beyond the pool's size
    /// (space reserved before a growth), within its capacity.
    pub fn ensure_backed(&self, offset: u64, len: u64) -> Result<(), Error> {
        let capacity = self.capacity();
        if offset.checked_add(len).is_none_or(|end| end > capacity) {
            return Err(Error::OutOfBounds {
                offset,
                len,
                size: capacity,
            });
        }
        self.media
            .ensure_backed(offset, len)
            .map_err(|e| media_error(&self.name, e))
    }

    /// What the medium is and how it makes data durable.
    pub fn media_info(&self) -> MediaInfo {
        self.media.info()
    }

    /// Sync-point counters: a snapshot summed over the threads that made sync points.
    pub fn stats(&self) -> PoolStats {
        let [points, ranges, bytes, internal] = self.stats.sum();
        PoolStats {
            sync_points: AtomicU64::new(points),
            sync_ranges: AtomicU64::new(ranges),
            sync_bytes: AtomicU64::new(bytes),
            internal_sync_points: AtomicU64::new(internal),
        }
    }

    /// Turn on dirty tracking (Selective Persistence Flushing, see [`crate::track`]) with
    /// `mode`: from now on sync points flush only what changed. Raw tracking that the kernel
    /// refuses falls back to flushing whole ranges (reported in the result, not an error).
    /// Everything stored before the call is flushed once. Call it before other threads
    /// store into the pool. Fails if tracking is already on.
    pub fn enable_tracking(&self, mode: Tracking) -> Result<TrackingInfo, Error> {
        self.enable_tracking_with(TrackerOptions {
            mode,
            fallback: None,
            chunk_hints: false,
        })
    }

    /// [`Pool::enable_tracking`] with every option (tests force the fallback here).
    pub fn enable_tracking_with(&self, options: TrackerOptions) -> Result<TrackingInfo, Error> {
        if options.mode == Tracking::Off {
            return Ok(self.tracking());
        }
        if self.tracker.get().is_some() {
            return Err(Error::InvalidArgument(
                "dirty tracking is already enabled on this pool".into(),
            ));
        }
        let tracker = Tracker::new(
            self.media.base().as_ptr(),
            self.size(),
            self.media.capacity(),
            options,
        )
        .map_err(|e| Error::from_io(&self.name, "allocating the dirty bitmap", e))?;
        let info = tracker.info().clone();
        if self.tracker.set(tracker).is_err() {
            return Err(Error::InvalidArgument(
                "dirty tracking is already enabled on this pool".into(),
            ));
        }
        // Stores made before tracking began were not seen: make them durable now (a sync
        // point the tracker does not narrow).
        crate::durable_site!(
            "pool.tracking_start",
            self.sync_point(
                &SyncPoint::new(SyncKind::Metadata, &[ByteRange::new(0, self.size())]),
                Narrow::No,
                Release::No,
            )
        )?;
        Ok(info)
    }

    fn track_from_env(&self) -> Result<(), Error> {
        if let Some(mode) = Tracking::from_env() {
            self.enable_tracking(mode)?;
        }
        Ok(())
    }

    /// What the sync points of this pool use to narrow their flushes.
    pub fn tracking(&self) -> TrackingInfo {
        self.tracker
            .get()
            .map(|t| t.info().clone())
            .unwrap_or_else(TrackingInfo::off)
    }

    /// Counters of dirty tracking, when on.
    pub fn tracking_stats(&self) -> Option<&TrackStats> {
        self.tracker.get().map(Tracker::stats)
    }

    /// Counters of the NVMM emulator, when the medium is emulated (`MNEMO_EMULATE`).
    pub fn emulation(&self) -> Option<crate::emu::EmuReport> {
        self.media.emulation()
    }

    /// Check that `offset..offset+len` lies in the pool.
    pub fn check_range(&self, offset: u64, len: u64) -> Result<(), Error> {
        let size = self.size();
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(()),
            _ => Err(Error::OutOfBounds { offset, len, size }),
        }
    }

    /// Address of `offset` in this process. Stable while the pool is open, across growth.
    /// Dereferencing it is the caller's (unsafe) business.
    pub fn ptr(&self, offset: u64, len: u64) -> Result<NonNull<u8>, Error> {
        self.check_range(offset, len)?;
        NonNull::new(self.media.base().as_ptr().wrapping_add(offset as usize))
            .ok_or_else(|| Error::InvalidArgument("null pool address".into()))
    }

    /// Copy `bytes` into the pool at `offset` (not yet durable).
    pub fn write(&self, offset: u64, bytes: &[u8]) -> Result<(), Error> {
        let dst = self.ptr(offset, bytes.len() as u64)?;
        // SAFETY: the range is inside the live mapping (checked by `ptr`); `bytes` is a Rust
        // slice, so it does not alias pool memory mutably.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst.as_ptr(), bytes.len())
        };
        if let Some(tracker) = self.tracker.get() {
            tracker.mark(offset, bytes.len() as u64);
        }
        Ok(())
    }

    /// Tell dirty tracking that `offset..offset+len` was stored to through [`Pool::ptr`]
    /// (call after the stores). A no-op while tracking is off.
    #[inline]
    pub fn mark_dirty(&self, offset: u64, len: u64) -> Result<(), Error> {
        if let Some(tracker) = self.tracker.get() {
            self.check_range(offset, len)?;
            tracker.mark(offset, len);
        }
        Ok(())
    }

    /// Copy pool bytes at `offset` into `out`.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), Error> {
        let src = self.ptr(offset, out.len() as u64)?;
        self.media.charge_read(offset, out.len() as u64);
        // SAFETY: as in `write`; the source range is inside the mapping.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    /// Copy `bytes` into the pool and stage them (non-temporal stores for large copies):
    /// written back early, durable only once a sync point names the range in
    /// [`SyncPoint::staged`].
    pub fn copy_nodrain(&self, offset: u64, bytes: &[u8]) -> Result<(), Error> {
        self.check_range(offset, bytes.len() as u64)?;
        self.media.copy_nodrain(offset, bytes);
        if let Some(tracker) = self.tracker.get() {
            tracker.mark(offset, bytes.len() as u64);
        }
        Ok(())
    }

    /// Copy `bytes` into the pool with non-temporal stores whatever their length, for data
    /// written once and not read back soon (log records), and stage them like
    /// [`Pool::copy_nodrain`].
    pub fn stream_nodrain(&self, offset: u64, bytes: &[u8]) -> Result<(), Error> {
        self.check_range(offset, bytes.len() as u64)?;
        self.media.stream_nodrain(offset, bytes);
        if let Some(tracker) = self.tracker.get() {
            tracker.mark(offset, bytes.len() as u64);
        }
        Ok(())
    }

    /// Stage a range: start writing it back now (a flush, no fence), so that the sync point
    /// that names it in [`SyncPoint::staged`] need only fence. Nothing is durable before that
    /// sync point, and a staged range that no sync point names is a change a replica never
    /// receives (the testkit's shadow replica catches it).
    pub fn stage(&self, offset: u64, len: u64) -> Result<(), Error> {
        self.check_range(offset, len)?;
        self.media.flush(offset, len);
        Ok(())
    }

    /// Whether the pool is mapped copy-on-write ([`Media::private`]: a write-ahead pool on
    /// a disk), so the pool file changes only at checkpoints and at a clean close.
    pub fn is_private(&self) -> bool {
        self.media.private()
    }

    /// Make everything durable in place now: under the write-ahead policy, a checkpoint
    /// (the records written into the pool, the file's space free again); elsewhere nothing
    /// to do.
    pub fn checkpoint(&self) -> Result<(), Error> {
        self.policy
            .checkpoint_all(self.media.as_ref())
            .map_err(|e| media_error(&self.name, e))
    }

    /// Acknowledge sync points before they are durable, where the policy can
    /// ([`crate::WalPolicy::defer_acks`]: a write-ahead pool mapped privately): a sync point
    /// then returns once its record is appended, and `notify` is called from another thread
    /// whenever more records became durable. Whoever answers a client must then hold the
    /// answer until [`Pool::ack_marks`] shows it durable. `false`: sync points stay durable on
    /// return.
    pub fn defer_acks(&self, notify: Arc<dyn Fn() + Send + Sync>) -> bool {
        self.policy.defer_acks(Some(notify))
    }

    /// [`Pool::defer_acks`] without a thread: records become durable only when the caller
    /// calls [`Pool::pump_acks`] (runs that must be deterministic: the crash simulator's).
    pub fn defer_acks_pumped(&self) -> bool {
        self.policy.defer_acks(None)
    }

    /// Under [`Pool::defer_acks_pumped`]: make every sync point so far durable now, on this
    /// thread (and run a checkpoint the write-ahead file owes).
    pub fn pump_acks(&self) -> Result<(), Error> {
        self.policy.pump().map_err(|e| media_error(&self.name, e))
    }

    /// Under [`Pool::defer_acks`], `(appended, durable)`: a sync point that returned when
    /// `appended` was `a` is durable once `durable >= a`. `None` otherwise (every sync point
    /// was durable when it returned); an error once the write-ahead file failed (nothing more
    /// becomes durable).
    pub fn ack_marks(&self) -> Option<Result<(u64, u64), Error>> {
        self.policy
            .ack_marks()
            .map(|r| r.map_err(|e| media_error(&self.name, e)))
    }

    /// Sync point for one range: every store made to it before the call is durable (and,
    /// with replication, replicated) on return. Not atomic beyond aligned 8-byte words: a
    /// crash during the call may leave some lines of the range new and others old. If the
    /// last [`Pool::gmsync`] named some of these bytes, its journal record is released first
    /// (in the same sync point), so recovery never puts older bytes back over them.
    pub fn msync(&self, offset: u64, len: u64) -> Result<(), Error> {
        self.sync(&SyncPoint::new(
            SyncKind::Data,
            &[ByteRange::new(offset, len)],
        ))
    }

    /// Make several ranges of the data area durable together, all-or-nothing for ranges that
    /// the previous gmsync on the pool also named (Mojim's gmsync; the C ABI's
    /// `mnemo_gmsync` is this call).
    ///
    /// The call copies the ranges' current contents into a journal record ([`crate::journal`])
    /// and makes the record and the ranges durable with one sync point; open applies the
    /// newest complete record again. After a crash: past the sync point, every range holds
    /// exactly its contents at the call; before it, every byte the *previous* gmsync named
    /// holds what that call made durable (stores since are rolled back, even those the CPU
    /// wrote back early), and bytes it did not name hold, per aligned 8-byte word, their old
    /// or new value. So ranges a program updates with plain stores and publishes by repeated
    /// gmsyncs of the same ranges move from one published state to the next, all or nothing.
    /// Any other sync point naming bytes of the newest record releases it first.
    ///
    /// Empty ranges are skipped. Errors: [`Error::OutOfBounds`] (a range outside the data
    /// area), [`Error::InvalidArgument`] (more than `GMSYNC_RANGES_MAX` ranges, or a record
    /// larger than a journal slot: 32 bytes plus, per range, 16 and its length rounded up to
    /// 8, at most `JOURNAL_SLOT_SIZE`), and the medium's errors. Concurrent gmsyncs on one
    /// pool are serialised; other threads must not store to the ranges during the call.
    pub fn gmsync(&self, ranges: &[ByteRange]) -> Result<(), Error> {
        let ranges: Vec<ByteRange> = ranges.iter().copied().filter(|r| r.len > 0).collect();
        if ranges.is_empty() {
            return self.sync(&SyncPoint::new(SyncKind::Data, &[]));
        }
        let size = self.size();
        for r in &ranges {
            if r.offset < DATA_OFFSET || r.end() > size || r.offset.checked_add(r.len).is_none() {
                return Err(Error::OutOfBounds {
                    offset: r.offset,
                    len: r.len,
                    size,
                });
            }
        }
        let needed = journal::record_len(&ranges);
        if needed > JOURNAL_SLOT_SIZE || ranges.len() > GMSYNC_RANGES_MAX {
            return Err(Error::InvalidArgument(format!(
                "gmsync of {} ranges needs a journal record of {needed} bytes; at most \
                 {JOURNAL_SLOT_SIZE} bytes and {GMSYNC_RANGES_MAX} ranges fit (split the call)",
                ranges.len(),
            )));
        }
        let mut state = self.journal.lock();
        let mut bytes = Vec::with_capacity(ranges.len());
        for r in &ranges {
            let mut copy = vec![0u8; r.len as usize];
            self.read(r.offset, &mut copy)?;
            bytes.push(copy);
        }
        let entries: Vec<(ByteRange, &[u8])> = ranges
            .iter()
            .zip(&bytes)
            .map(|(r, b)| (*r, b.as_slice()))
            .collect();
        let record = journal::encode(state.seq + 1, &entries);
        let slot = journal::slot_offset(state.next_slot);
        let staged = [ByteRange::new(slot, record.len() as u64)];
        let staged: &[ByteRange] = if crate::mutant::active("journal.skip_record") {
            &[]
        } else {
            crate::durable_site!(
                "pool.journal_record",
                self.copy_nodrain(slot, &record),
                self.write(slot, &record)
            )?;
            &staged
        };
        // One sync point: the ranges flushed, the record staged; the newest record is
        // superseded, not released.
        crate::durable_site!(
            "pool.gmsync",
            self.sync_point(
                &SyncPoint {
                    kind: SyncKind::Data,
                    ranges: &ranges,
                    staged,
                },
                Narrow::Yes,
                Release::No,
            )
        )?;
        state.seq += 1;
        state.next_slot ^= 1;
        state.live = ranges;
        self.journal.publish(&state);
        Ok(())
    }

    /// At open: apply the newest valid journal record again, and load the journal's state.
    fn recover_journal(&self) -> Result<(), Error> {
        let both = media_bytes(self.media.as_ref(), JOURNAL_OFFSET, 2 * JOURNAL_SLOT_SIZE);
        let mut state = self.journal.lock();
        let Some((slot, (seq, entries))) = journal::newest(&both) else {
            return Ok(());
        };
        let size = self.size();
        let mut ranges = Vec::with_capacity(entries.len());
        for (range, data) in &entries {
            if range.offset < DATA_OFFSET || range.end() > size || range.end() < range.offset {
                return Err(Error::Corrupt {
                    path: self.name.clone(),
                    detail: format!(
                        "gmsync journal record {seq} names {:#x}+{}, outside the data area",
                        range.offset, range.len
                    ),
                });
            }
            self.write(range.offset, data)?;
            ranges.push(*range);
        }
        for part in ranges.chunks(GMSYNC_RANGES_MAX) {
            crate::durable_site!(
                "pool.journal_recover",
                self.sync_point(
                    &SyncPoint::new(SyncKind::Data, part),
                    Narrow::No,
                    Release::No
                )
            )?;
        }
        state.seq = seq;
        state.next_slot = slot ^ 1;
        state.live = ranges;
        self.journal.publish(&state);
        Ok(())
    }

    /// The sync point: make every range of `point` durable through the pool's policy, as one
    /// unit (a replica applies it whole). The one way to durability above this crate.
    #[inline]
    pub fn sync(&self, point: &SyncPoint<'_>) -> Result<(), Error> {
        self.sync_point(point, Narrow::Yes, Release::Yes)
    }

    /// [`Pool::sync`], with or without narrowing by dirty tracking and the release of a
    /// gmsync record that covers some of its bytes.
    #[inline]
    fn sync_point(
        &self,
        point: &SyncPoint<'_>,
        narrow: Narrow,
        release: Release,
    ) -> Result<(), Error> {
        let bytes = self.check_sync_ranges(point)?;
        if release == Release::Yes && !crate::mutant::active("journal.skip_release") {
            if let Some((older, newer)) = self.journal.releases(point.all()) {
                // The records must not put these bytes back: zero the older one's header
                // (durable first), then the newer one's with this sync point's fence. Whole
                // headers, not only the magic: a later record torn while it is written could
                // otherwise bring back just its magic over an old, valid header.
                self.write(older.offset, &[0u8; journal::HEADER])?;
                crate::durable_site!(
                    "pool.journal_release_older",
                    self.dispatch(&SyncPoint::new(SyncKind::Metadata, &[older]), Narrow::No, 0)
                )?;
                self.write(newer.offset, &[0u8; journal::HEADER])?;
                let mut ranges = point.ranges.to_vec();
                ranges.push(newer);
                let point = SyncPoint {
                    ranges: &ranges,
                    ..*point
                };
                return self.dispatch(&point, narrow, bytes);
            }
        }
        self.dispatch(point, narrow, bytes)
    }

    /// Hand `point` to the policy (narrowed by dirty tracking if asked) and count it.
    #[inline]
    fn dispatch(&self, point: &SyncPoint<'_>, narrow: Narrow, bytes: u64) -> Result<(), Error> {
        let hidden;
        let point = if crate::mutant::active("sync.staged_unnamed") {
            // Broken: the policy's fence covers the staged ranges, but it is not told of them.
            hidden = SyncPoint {
                staged: &[],
                ..*point
            };
            &hidden
        } else {
            point
        };
        match self.tracker.get().filter(|_| narrow == Narrow::Yes) {
            None => self.policy.sync(self.media.as_ref(), point),
            Some(tracker) => {
                // Dirty tracking works per page: stores in the pages of a staged range may be
                // unflushed, so staged ranges are narrowed and flushed like the others.
                // The lock serialises sync points and guards a buffer reused by each.
                let mut narrowed = tracker.sync_lock.lock().unwrap_or_else(|p| p.into_inner());
                narrowed.clear();
                for range in point.all() {
                    tracker.narrow(*range, &mut |r| narrowed.push(r));
                }
                let result = self
                    .policy
                    .sync(self.media.as_ref(), &SyncPoint::new(point.kind, &narrowed));
                if narrowed.capacity() > SCRATCH_RANGES_KEPT {
                    *narrowed = Vec::new();
                }
                result
            }
        }
        .map_err(|e| media_error(&self.name, e))?;
        let count = point.ranges.len() + point.staged.len();
        self.stats.add(match point.kind {
            SyncKind::Data => [1, count as u64, bytes, 0],
            SyncKind::Metadata | SyncKind::Header => [0, 0, 0, 1],
        });
        Ok(())
    }

    #[inline]
    fn check_sync_ranges(&self, point: &SyncPoint<'_>) -> Result<u64, Error> {
        let count = point.ranges.len() + point.staged.len();
        if count > SYNC_RANGES_MAX {
            return Err(Error::InvalidArgument(format!(
                "a sync point of {count} ranges; at most {SYNC_RANGES_MAX} per sync point"
            )));
        }
        let size = self.size();
        let mut bytes = 0u64;
        for range in point.all() {
            match range.offset.checked_add(range.len) {
                Some(end) if end <= size => bytes += range.len,
                _ => {
                    return Err(Error::OutOfBounds {
                        offset: range.offset,
                        len: range.len,
                        size,
                    })
                }
            }
        }
        Ok(bytes)
    }

    /// Grow the pool to `new_size` bytes (page-rounded) while it is open. Offsets and
    /// addresses stay valid; new bytes read as zero. Crash-safe: the header records the new
    /// size only after the file has grown.
    pub fn grow(&self, new_size: u64) -> Result<(), Error> {
        let new_size = new_size.next_multiple_of(PAGE_SIZE);
        let mut header = self.header.lock().unwrap_or_else(|p| p.into_inner());
        if new_size <= header.pool_size {
            return Ok(());
        }
        if new_size
            > header
                .size_max
                .max(self.media.capacity())
                .min(POOL_SIZE_MAX)
            || new_size > self.media.capacity()
        {
            return Err(Error::Media {
                path: self.name.clone(),
                source: MediaError::CapacityExceeded {
                    requested: new_size,
                    capacity: self.media.capacity(),
                },
            });
        }
        let mut next = header.clone();
        next.pool_size = new_size;
        next.size_max = next.size_max.max(new_size);
        if crate::mutant::active("grow.header_first") {
            self.write_next(&mut header, next)?;
            self.media
                .grow(new_size)
                .map_err(|e| media_error(&self.name, e))?;
        } else {
            self.media
                .grow(new_size)
                .map_err(|e| media_error(&self.name, e))?;
            // On a page-cache file the new length is durable only through a sync (msync and
            // fdatasync persist it), and the kernel may write the header page back at any
            // time: without this sync point, a power cut could keep a header recording the
            // new size in a file of the old length, which open refuses as truncated.
            crate::durable_site!(
                "pool.grow_length",
                self.sync_point(
                    &SyncPoint::new(SyncKind::Header, &[]),
                    Narrow::No,
                    Release::No
                )
            )?;
            self.write_next(&mut header, next)?;
        }
        if let Some(tracker) = self.tracker.get() {
            let old = self.size.load(Ordering::Acquire);
            if let Err(e) = tracker.grew(old, new_size) {
                // The new part is not write-protected: raw stores there would go unseen.
                tracing::error!("tracking the grown part failed: {e}");
                return Err(Error::from_io(&self.name, "UFFDIO_REGISTER", e));
            }
        }
        self.size.store(new_size, Ordering::Release);
        Ok(())
    }

    /// Mark the pool cleanly closed and release it. Dropping a pool does the same; `close`
    /// reports errors.
    pub fn close(self) -> Result<(), Error> {
        self.close_inner()
    }

    fn close_inner(&self) -> Result<(), Error> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.policy
            .close(self.media.as_ref())
            .map_err(|e| media_error(&self.name, e))?;
        self.update_header(|h| h.clean_shutdown = true)
    }

    /// Apply `change` to the header and write it as the next generation into the other copy.
    fn update_header(&self, change: impl FnOnce(&mut Header)) -> Result<(), Error> {
        let mut header = self.header.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = header.clone();
        change(&mut next);
        self.write_next(&mut header, next)
    }

    fn write_next(&self, current: &mut Header, mut next: Header) -> Result<(), Error> {
        next.generation = current.generation + 1;
        self.write_copy(&next)?;
        *current = next;
        Ok(())
    }

    fn write_copy(&self, header: &Header) -> Result<(), Error> {
        let bytes = header.encode();
        let offset = header.copy_index() as u64 * HEADER_COPY_SIZE;
        self.write(offset, &bytes)?;
        let range = [ByteRange::new(offset, HEADER_COPY_SIZE)];
        if crate::mutant::active("header.outside_policy") {
            // Broken: durable here, but no policy (no replica) ever sees it.
            self.media.flush(offset, HEADER_COPY_SIZE);
            self.media.drain().map_err(|e| media_error(&self.name, e))?;
        } else if crate::mutant::active("header.skip_flush") {
            // Broken: the copy is claimed staged, so nothing flushes it.
            self.sync_point(
                &SyncPoint::staged(SyncKind::Header, &range),
                Narrow::No,
                Release::No,
            )?;
        } else {
            // Not narrowed: `write` marked the copy, but the header must not depend on it.
            crate::durable_site!(
                "pool.header",
                self.sync_point(
                    &SyncPoint::new(SyncKind::Header, &range),
                    Narrow::No,
                    Release::No
                )
            )?;
        }
        // Pair assertion: read back what is now on media and decode it.
        let back = media_bytes(self.media.as_ref(), offset, HEADER_COPY_SIZE);
        assert_eq!(
            Header::decode(&back).as_ref(),
            Ok(header),
            "header copy did not read back"
        );
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if let Err(err) = self.close_inner() {
            tracing::error!(pool = %self.name.display(), "closing the pool failed: {err}");
        }
    }
}

/// The policy of a pool file opened or created without one. On a page-cache file (an
/// ordinary disk) it is the write-ahead policy ([`crate::wal`], file `<pool>.wal`): a sync
/// point appends its bytes to that file and `fdatasync`s it, instead of an `msync` of the
/// pool. `MNEMO_WAL=0` keeps the local policy (msync) for pools that have no write-ahead file
/// yet. A pool whose `.wal` exists always opens with it, on any medium and whatever
/// `MNEMO_WAL` says: it may hold records a crash left, which must be replayed. Elsewhere
/// (tmpfs, DAX) `None`: the local policy.
fn default_policy(
    path: &Path,
    media: &FileMedia,
    created: bool,
) -> Result<Option<Arc<dyn SyncPolicy>>, Error> {
    let mut wal = path.as_os_str().to_os_string();
    wal.push(".wal");
    let wal = Path::new(&wal);
    if created && wal.exists() {
        // The pool file is new, so a write-ahead file beside it belongs to a pool that was
        // removed (its uuid would refuse this one): its records can never apply again.
        tracing::warn!(pool = %path.display(), "removing {}: left by an earlier pool of this name", wal.display());
        std::fs::remove_file(wal).map_err(|e| Error::from_io(wal, "remove", e))?;
    }
    let exists = wal.exists();
    let opted_out = crate::file::env_off("MNEMO_WAL");
    let page_cache = media.info().kind == crate::MediaKind::PageCache;
    if !exists && (opted_out || !page_cache) {
        return Ok(None);
    }
    let policy = match crate::wal::WalPolicy::beside(path, wal_bytes_for(media.len())) {
        Ok(policy) => policy,
        Err(e) if !exists && matches!(e, MediaError::Io { .. }) => {
            // The directory refuses a new file (read-only, full): the local policy is as
            // durable, only slower.
            let _ = std::fs::remove_file(wal);
            tracing::warn!(pool = %path.display(), "cannot create the write-ahead file {} ({e}): every sync point msyncs the pool instead", wal.display());
            return Ok(None);
        }
        Err(e) => return Err(media_error(path, e)),
    };
    tracing::debug!(pool = %path.display(), "sync points go to the write-ahead file {}", wal.display());
    Ok(Some(Arc::new(policy)))
}

/// Map the pool copy-on-write if its policy asks for it ([`SyncPolicy::private_mapping`]:
/// the write-ahead policy with `MNEMO_WAL_PRIVATE=1` or [`crate::WalPolicy::private`]),
/// before anything uses the mapping.
fn map_for(path: &Path, media: &FileMedia, policy: Option<&dyn SyncPolicy>) -> Result<(), Error> {
    if policy.is_some_and(|p| p.private_mapping()) {
        media.make_private().map_err(|e| media_error(path, e))?;
    }
    Ok(())
}

/// Size of a new write-ahead file for a pool of `pool_len` bytes: a quarter of the pool,
/// between 1 MiB and [`crate::wal::WAL_BYTES_DEFAULT`] (it is written full of zeros when
/// created, and a checkpoint runs each time half of it fills).
fn wal_bytes_for(pool_len: u64) -> u64 {
    (pool_len / 4).clamp(1 << 20, crate::wal::WAL_BYTES_DEFAULT) & !0xFFFF
}

fn media_error(path: &Path, source: MediaError) -> Error {
    Error::Media {
        path: path.to_path_buf(),
        source,
    }
}

fn media_bytes(media: &dyn Media, offset: u64, len: u64) -> Vec<u8> {
    let mut out = vec![0u8; len as usize];
    assert!(offset + len <= media.len());
    // SAFETY: the range is inside the medium's mapping (asserted above).
    #[allow(unsafe_code)]
    unsafe {
        std::ptr::copy_nonoverlapping(
            media.base().as_ptr().add(offset as usize),
            out.as_mut_ptr(),
            out.len(),
        )
    };
    out
}

fn sync_dir(path: &Path) {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Read both header copies with `pread` (no mapping, so a short file cannot SIGBUS) and pick
/// the one in force.
pub(crate) fn read_header(path: &Path, file: &File, file_len: u64) -> Result<Header, Error> {
    let need = HEADER_COPY_SIZE * 2;
    if file_len < need {
        if file_len == 0 {
            return Err(Error::NotAPool {
                path: path.to_path_buf(),
                detail: "the file is empty".into(),
            });
        }
        return Err(Error::Truncated {
            path: path.to_path_buf(),
            file_len,
            expected: need,
            detail: "two header copies",
        });
    }
    let mut bytes = vec![0u8; need as usize];
    read_exact_at(file, &mut bytes, 0).map_err(|e| Error::from_io(path, "read", e))?;
    choose(path, &Pair::decode(&bytes), file_len)
}

/// Pick the header in force, or explain why none is.
fn choose(path: &Path, pair: &Pair, file_len: u64) -> Result<Header, Error> {
    let Some(header) = pair.header() else {
        return Err(no_valid_copy(path, pair));
    };
    if file_len < header.pool_size {
        return Err(Error::Truncated {
            path: path.to_path_buf(),
            file_len,
            expected: header.pool_size,
            detail: "the size its header records",
        });
    }
    Ok(header.clone())
}

fn no_valid_copy(path: &Path, pair: &Pair) -> Error {
    use header::CopyProblem;
    let path = path.to_path_buf();
    for copy in &pair.copies {
        if let Err(CopyProblem::UnsupportedVersion { found }) = copy {
            if *found > FORMAT_VERSION {
                return Error::NewerVersion {
                    path,
                    found: *found,
                    supported: FORMAT_VERSION,
                };
            }
            return Error::OlderVersion {
                path,
                found: *found,
                supported: header::FORMAT_VERSION_MIN,
            };
        }
    }
    let foreign = |c: &Result<Header, CopyProblem>| {
        matches!(
            c,
            Err(CopyProblem::BadMagic { .. } | CopyProblem::Zeroed | CopyProblem::Short { .. })
        )
    };
    let detail = format!(
        "copy 0: {}; copy 1: {}",
        pair.copies[0]
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default(),
        pair.copies[1]
            .as_ref()
            .err()
            .map(ToString::to_string)
            .unwrap_or_default()
    );
    if pair.copies.iter().all(foreign) {
        Error::NotAPool { path, detail }
    } else {
        Error::Corrupt { path, detail }
    }
}
