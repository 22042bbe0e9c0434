//! [`WalPolicy`]: durable on an ordinary disk at the speed of a log.
//!
//! On a page-cache file, [`crate::LocalPolicy`] makes a sync point durable with `msync(2)`
//! of the whole mapping: every commit waits for every page written since the previous one,
//! and the cost grows with the pool. This policy makes a sync point durable the way
//! databases do (SQLite's WAL, PostgreSQL, Redis's AOF): it appends the *bytes* of every
//! range the sync point names, as one record, to a write-ahead file beside the pool and
//! calls `fdatasync(2)` on that file, once for every commit waiting at that moment (group
//! commit). The pool's pages are left to the kernel to write back whenever it likes.
//!
//! ```text
//!  sync point (Data, Metadata)        record { epoch, seq, (offset, len, words)* } appended
//!                                     to the epoch's half of the file, one pwrite +
//!                                     fdatasync for every waiting record
//!  sync point (Header)                in place: msync of the header page (never in a record)
//!  the epoch's half full              the next epoch begins in the other half; the next
//!                                     sync point checkpoints the old one (appends go on):
//!                                     the whole pool msync'ed, then the header names the
//!                                     new epoch first (synced): older records are dead
//!  a sync point too large, or close   the same, waited for
//!  open                               replay the header's epoch, then the next one, each in
//!                                     order up to the first record that does not check;
//!                                     checkpoint
//! ```
//!
//! The layers above are unchanged: a sync point's ranges are durable when it returns (a
//! crash replays them), which is all the heap's durable horizon, the log's torn bits and
//! the gmsync journal rely on; a lane slot or log space that a layer reuses is reused in the
//! pool, whose pages are all covered by records until a checkpoint makes them durable in
//! place. Design, format and proof: `docs/design/disk-durability.md`.
//!
//! The record space is two halves; an epoch's records fill one. An epoch begins only once
//! every record of the previous one is durable and the header names the previous one (its
//! half free), so the live records are those of at most two epochs, the older one first.
//!
//! Why replay is safe over whatever the kernel wrote back: a record holds the bytes its
//! ranges had at their sync point, and replay applies records in the order they were made
//! durable, so every named byte ends at the value of its last durable sync point; a byte
//! written back later, but never synced again, goes back to that value, which a crash was
//! allowed to leave. Records of an epoch whose checkpoint completed (the pool msync'ed, the
//! header moved on) are never replayed; if a crash comes before the header, the old epoch
//! is replayed, then the new one: each byte ends at its last acknowledged value or a newer
//! one, and nothing waiting on that checkpoint was acknowledged yet.
#![allow(unsafe_code)]

use std::fmt::Debug;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::awake::Awake;
use crate::conc::{Builder, Condvar, JoinHandle, Mutex, MutexGuard};
use crate::error::MediaError;
use crate::media::Media;
use crate::sync::{ByteRange, SyncKind, SyncPoint, SyncPolicy};

/// Offset of the first record: two header copies of a page each come first.
pub const WAL_RECORDS_OFFSET: u64 = 2 * WAL_HEADER_COPY_SIZE;
/// Bytes of one header copy's page (the copy itself is [`WAL_HEADER_LEN`] bytes).
pub const WAL_HEADER_COPY_SIZE: u64 = 4096;
/// Bytes of a header copy.
pub const WAL_HEADER_LEN: usize = 64;
/// Bytes of a record's header.
pub const WAL_RECORD_HEADER: usize = 32;
/// Smallest write-ahead file: the headers and 56 KiB of records.
pub const WAL_BYTES_MIN: u64 = 64 << 10;
/// Default size of a write-ahead file: a checkpoint (one msync of the pool) per this many
/// bytes of sync points, and what replay reads at most at open.
pub const WAL_BYTES_DEFAULT: u64 = 64 << 20;

const WAL_MAGIC: [u8; 8] = *b"MNEMOWAL";
const WAL_VERSION: u32 = 1;
const RECORD_MAGIC: [u8; 4] = *b"WALR";

/// The write-ahead file, as the policy sees it: a file of fixed length, written at offsets
/// and made durable by [`LogFile::sync`]. [`FileLog`] is a real file; the testkit's
/// simulated file knows what a power cut may lose (any write not synced, torn at sectors).
pub trait LogFile: Send + Sync + Debug {
    /// Bytes of the file (fixed: created full length, never grown).
    fn len(&self) -> u64;

    /// Whether the file has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Read `out.len()` bytes at `offset` (within `len()`).
    fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), MediaError>;

    /// Write `bytes` at `offset` (within `len()`); durable only after [`LogFile::sync`].
    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), MediaError>;

    /// Make every earlier write durable (`fdatasync(2)`).
    fn sync(&self) -> Result<(), MediaError>;
}

/// A write-ahead file on disk: created at its full length, filled with zeros and synced
/// (with its directory) once, so that later writes change no file metadata and
/// `fdatasync` writes data only.
///
/// Where the file system takes `O_DIRECT` (ext4, xfs; not tmpfs), every write goes to the
/// disk at once, through a second descriptor, as whole 4 KiB blocks with `pwritev2(2)`'s
/// `RWF_DSYNC`: durable when the call returns, so [`LogFile::sync`] has nothing left to do.
/// One system call and no page-cache copy instead of `pwrite` and `fdatasync`; on this
/// machine's ext4 a 4 KiB record becomes durable in 133-174 us instead of 193-233 us
/// (`bench/probes/wal_direct.c`; `docs/design/disk-durability.md`, "Direct writes").
/// `MNEMO_WAL_DIRECT=0` keeps the page cache.
///
/// While a write or `fdatasync` waits for the disk, a thread at idle priority keeps the
/// waiting thread's CPU from idling ([`crate::awake`]): on a virtual machine a halted vCPU
/// adds its wake-up to every sync. `MNEMO_WAL_SPIN=0` turns it off.
///
/// A direct write covers whole blocks, so it also writes the bytes around the record that
/// share its first and last block:
/// * before it, in the first block, are the records written just before (or a header copy's
///   page): they are written again with the bytes they have, kept from the last write or
///   read back. A power cut during the write leaves each sector old or new, and both hold
///   those bytes.
/// * after it, in the last block, nothing is live: records are appended in order within an
///   epoch's half, what follows the last one there is left from older epochs (dead, and
///   replay stops at the first record that does not check), and a header copy's page holds
///   nothing after the copy. So those bytes are written as zeros. This needs the two halves
///   to meet at a block boundary, which holds when the file's length is a multiple of 8 KiB
///   (so files are created so); a file of another length keeps the page cache.
#[derive(Debug)]
pub struct FileLog {
    file: File,
    direct: Option<Direct>,
    len: u64,
    path: PathBuf,
    /// Started at the first wait for the disk (none if turned off or refused).
    awake: std::sync::OnceLock<Option<Awake>>,
}

/// Bytes of a block of a direct write: its offset and length are multiples of this, and so
/// is the address of its buffer (`O_DIRECT` needs the device's logical block size, at most
/// 4 KiB).
const DIRECT_BLOCK: usize = 4096;

/// One block of a direct write's buffer, aligned as `O_DIRECT` needs.
#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Block([u8; DIRECT_BLOCK]);

/// The `O_DIRECT` side of a [`FileLog`].
#[derive(Debug)]
struct Direct {
    file: File,
    /// Cleared for good when the file system refuses a direct write (`EINVAL`): the
    /// page cache from then on.
    on: std::sync::atomic::AtomicBool,
    scratch: std::sync::Mutex<Scratch>,
}

/// The buffer of direct writes and the last block written.
struct Scratch {
    blocks: Vec<Block>,
    /// File offset and bytes of the last block of the last direct write: the next append
    /// begins in it.
    last: Option<(u64, Block)>,
}

impl Debug for Scratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch")
            .field("blocks", &self.blocks.len())
            .field("last", &self.last.as_ref().map(|(at, _)| at))
            .finish()
    }
}

impl Direct {
    /// The direct side of the file at `path` of `len` bytes, if its file system takes
    /// `O_DIRECT` and its halves meet at a block boundary.
    fn open(path: &Path, len: u64) -> Option<Direct> {
        // `MNEMO_WAL_DIRECT=0` keeps the page cache.
        if crate::file::env_off("MNEMO_WAL_DIRECT") || len % (2 * DIRECT_BLOCK as u64) != 0 {
            return None;
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .ok()?;
        Some(Direct {
            file,
            on: std::sync::atomic::AtomicBool::new(true),
            scratch: std::sync::Mutex::new(Scratch {
                blocks: Vec::new(),
                last: None,
            }),
        })
    }

    fn on(&self) -> bool {
        self.on.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Write `bytes` at `offset` as whole blocks, durable on return (see [`FileLog`]);
    /// `Ok(false)` if the file system refused (nothing written: the caller writes through
    /// the page cache instead). `buffered` reads the bytes before `offset` in its first
    /// block when they are not those of the last write.
    fn write(
        &self,
        buffered: &File,
        offset: u64,
        bytes: &[u8],
        awake: Option<&Awake>,
    ) -> Result<bool, MediaError> {
        const B: u64 = DIRECT_BLOCK as u64;
        let start = offset - offset % B;
        let end = (offset + bytes.len() as u64).next_multiple_of(B);
        let count = ((end - start) / B) as usize;
        let mut scratch = self
            .scratch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Scratch { blocks, last } = &mut *scratch;
        blocks.clear();
        blocks.resize(count, Block([0; DIRECT_BLOCK]));
        // SAFETY: `blocks` holds `count` initialised blocks of plain bytes, contiguous
        // (a `Vec`), borrowed mutably here and by nothing else.
        let raw = unsafe {
            std::slice::from_raw_parts_mut(blocks.as_mut_ptr().cast::<u8>(), count * DIRECT_BLOCK)
        };
        let head = (offset - start) as usize;
        if head > 0 {
            match last {
                Some((at, block)) if *at == start => raw[..head].copy_from_slice(&block.0[..head]),
                _ => buffered
                    .read_exact_at(&mut raw[..head], start)
                    .map_err(|e| MediaError::io("reading the write-ahead file", e))?,
            }
        }
        raw[head..head + bytes.len()].copy_from_slice(bytes);
        let _awake = awake.map(Awake::hold);
        let mut done = 0;
        while done < raw.len() {
            match rustix::io::pwritev2(
                &self.file,
                &[std::io::IoSlice::new(&raw[done..])],
                start + done as u64,
                rustix::io::ReadWriteFlags::DSYNC,
            ) {
                Ok(0) => {
                    return Err(MediaError::io(
                        "writing the write-ahead file",
                        std::io::ErrorKind::WriteZero.into(),
                    ))
                }
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) if done == 0 => {
                    self.on.store(false, std::sync::atomic::Ordering::Release);
                    tracing::info!(
                        "the file system refused a direct write to the write-ahead file; \
                         it keeps the page cache"
                    );
                    return Ok(false);
                }
                Err(e) => return Err(MediaError::io("writing the write-ahead file", e.into())),
            }
        }
        *last = blocks.last().map(|block| (end - B, *block));
        Ok(true)
    }
}

impl FileLog {
    /// Open the write-ahead file at `path`, creating it with `len` bytes (rounded up to
    /// 8 KiB) if it does not exist. An existing file keeps its length (at least
    /// [`WAL_BYTES_MIN`]).
    pub fn open_or_create(path: &Path, len: u64) -> Result<FileLog, MediaError> {
        let len = len
            .max(WAL_BYTES_MIN)
            .next_multiple_of(2 * WAL_HEADER_COPY_SIZE);
        let existing = path.exists();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|e| MediaError::io("opening the write-ahead file", e))?;
        let found = file
            .metadata()
            .map_err(|e| MediaError::io("stat of the write-ahead file", e))?
            .len();
        if existing && found >= WAL_BYTES_MIN {
            let len = found - found % WAL_HEADER_COPY_SIZE;
            return Ok(FileLog {
                file,
                direct: Direct::open(path, len),
                len,
                path: path.to_path_buf(),
                awake: std::sync::OnceLock::new(),
            });
        }
        // Written, not only sized: writes into holes or unwritten extents would change
        // file-system metadata, which every fdatasync would then have to journal.
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(zeros.len() as u64) as usize;
            file.write_all_at(&zeros[..n], at)
                .map_err(|e| MediaError::io("writing the write-ahead file", e))?;
            at += n as u64;
        }
        file.sync_all()
            .map_err(|e| MediaError::io("fsync of the write-ahead file", e))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(FileLog {
            file,
            direct: Direct::open(path, len),
            len,
            path: path.to_path_buf(),
            awake: std::sync::OnceLock::new(),
        })
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether writes go to the disk directly, durable on return (see [`FileLog`]).
    pub fn direct(&self) -> bool {
        self.direct.as_ref().is_some_and(Direct::on)
    }

    /// The thread that keeps a CPU awake while this file's writes wait for the disk,
    /// started at the first such wait; `None` when turned off (`MNEMO_WAL_SPIN=0`) or
    /// refused ([`Awake::start`]).
    fn awake(&self) -> Option<&Awake> {
        self.awake.get_or_init(Awake::start).as_ref()
    }
}

impl LogFile for FileLog {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), MediaError> {
        self.file
            .read_exact_at(out, offset)
            .map_err(|e| MediaError::io("reading the write-ahead file", e))
    }

    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), MediaError> {
        if let Some(direct) = self.direct.as_ref().filter(|d| d.on()) {
            if direct.write(&self.file, offset, bytes, self.awake())? {
                return Ok(());
            }
        }
        self.file
            .write_all_at(bytes, offset)
            .map_err(|e| MediaError::io("writing the write-ahead file", e))
    }

    fn sync(&self) -> Result<(), MediaError> {
        if self.direct() {
            // Every write was durable when it returned.
            return Ok(());
        }
        let _awake = self.awake().map(Awake::hold);
        rustix::fs::fdatasync(&self.file)
            .map_err(|e| MediaError::io("fdatasync of the write-ahead file", e.into()))
    }
}

/// Figures of a [`WalPolicy`], for `INFO persistence` and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WalStats {
    /// Records appended (one per sync point).
    pub records: u64,
    /// Bytes of records appended.
    pub bytes: u64,
    /// Group commits of records: each one `fdatasync` of the write-ahead file, or one direct
    /// write durable on return ([`FileLog`]).
    pub fdatasyncs: u64,
    /// Checkpoints completed (the pool synced in place, the file's space reused).
    pub checkpoints: u64,
    /// Bytes of records since the last checkpoint (what a crash now would replay).
    pub pending_bytes: u64,
    /// Records replayed when the pool was opened.
    pub replayed: u64,
    /// Duration of the last group commit's write and `fdatasync` (or direct write), in
    /// nanoseconds.
    pub last_fdatasync_ns: u64,
    /// Duration of the last checkpoint, in nanoseconds.
    pub last_checkpoint_ns: u64,
    /// Sync points too large for a record, made durable in place (each with a checkpoint).
    pub in_place: u64,
    /// The pool is mapped copy-on-write: its file changes only at checkpoints.
    pub private_mapping: bool,
    /// Sync points are acknowledged once appended, durable later
    /// ([`WalPolicy::defer_acks`]).
    pub deferred_acks: bool,
}

struct State {
    /// The pool this file belongs to, once attached.
    uuid: Option<uuid::Uuid>,
    /// Epoch of the records being appended; they go to half `epoch % 2`.
    epoch: u64,
    /// The header's epoch: replay reads the records of `first`, then of `first + 1`. Equal
    /// to `epoch` except while the checkpoint of `epoch - 1` runs.
    first: u64,
    /// Sequence number of the next record in this epoch.
    seq: u64,
    /// File offset of the next record.
    pos: u64,
    /// Records appended and not yet written to the file; they start at `buf_pos`.
    buf: Vec<u8>,
    buf_pos: u64,
    /// Bytes appended in the life of the policy, and the part of them durable.
    appended: u64,
    durable: u64,
    /// A thread is writing and syncing records (the group-commit leader).
    writing: bool,
    /// A checkpoint of the epochs before `epoch` runs (outside the lock: appends go on) or
    /// is owed: no switch may begin until it ends.
    checkpointing: bool,
    /// The checkpoint a switch owes and nobody has begun: the next sync point runs it
    /// before its own record (so the one that filled the half was not kept waiting).
    owed: Option<u64>,
    /// A write or sync of the file failed: its contents are unknown, nothing more is
    /// acknowledged (as PostgreSQL after a failed fsync).
    failed: Option<String>,
    stats: WalStats,
    /// The pool file behind a private mapping ([`Media::private`]), from attach on:
    /// checkpoints write the records' bytes into it instead of syncing the mapping.
    backing: Option<Arc<dyn LogFile>>,
    /// Sync points return once their record is appended, before it is durable
    /// ([`WalPolicy::defer_acks`]); the syncer thread writes and syncs, then calls `notify`.
    deferred: bool,
    notify: Option<Notify>,
    /// The syncer thread must end.
    stop: bool,
}

impl Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("epoch", &self.epoch)
            .field("first", &self.first)
            .field("appended", &self.appended)
            .field("durable", &self.durable)
            .field("deferred", &self.deferred)
            .finish_non_exhaustive()
    }
}

/// Where [`Shared::apply_epoch`] hands each entry of a record: its pool offset and bytes.
type EntrySink<'a> = dyn FnMut(u64, &[u8]) -> Result<(), MediaError> + 'a;

/// What the syncer thread calls after each group of records becomes durable (or fails).
type Notify = Arc<dyn Fn() + Send + Sync>;

/// The sync policy for page-cache pools: see the module documentation.
pub struct WalPolicy {
    shared: Arc<Shared>,
    /// The syncer thread of deferred acknowledgements, once started.
    syncer: Mutex<Option<JoinHandle<()>>>,
    /// Ask for the pool mapped copy-on-write ([`WalPolicy::private`]); `None`: as
    /// `MNEMO_WAL_PRIVATE` says (default no).
    private: Option<bool>,
}

impl Debug for WalPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalPolicy")
            .field("file", &self.shared.file)
            .field("half", &self.shared.half)
            .finish_non_exhaustive()
    }
}

impl std::ops::Deref for WalPolicy {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl Drop for WalPolicy {
    fn drop(&mut self) {
        self.lock().stop = true;
        self.wake.notify_all();
        let handle = self.syncer.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(handle) = handle {
            let _ = handle.join();
        }
    }
}

/// What the policy and its syncer thread share.
pub struct Shared {
    file: Arc<dyn LogFile>,
    state: Mutex<State>,
    wake: Condvar,
    /// Bytes of each half of the record space: the records of an epoch fill one half.
    half: u64,
    /// Bytes of the largest record that is appended (larger sync points go in place).
    record_max: u64,
}

impl Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl WalPolicy {
    /// A policy writing its records to `file`. Nothing is read or written before the pool
    /// attaches it ([`SyncPolicy::open`]).
    pub fn new(file: Arc<dyn LogFile>) -> WalPolicy {
        let half = file.len().saturating_sub(WAL_RECORDS_OFFSET) / 2 / 8 * 8;
        let shared = Shared {
            file,
            state: Mutex::new(State {
                uuid: None,
                epoch: 0,
                first: 0,
                seq: 0,
                pos: WAL_RECORDS_OFFSET,
                buf: Vec::new(),
                buf_pos: WAL_RECORDS_OFFSET,
                appended: 0,
                durable: 0,
                writing: false,
                checkpointing: false,
                owed: None,
                failed: None,
                stats: WalStats::default(),
                backing: None,
                deferred: false,
                notify: None,
                stop: false,
            }),
            wake: Condvar::new(),
            half,
            record_max: half / 4,
        };
        WalPolicy {
            shared: Arc::new(shared),
            syncer: Mutex::new(None),
            private: None,
        }
    }

    /// The policy for the pool file at `pool`: its write-ahead file is `pool` with `.wal`
    /// appended, created with `len` bytes if missing.
    pub fn beside(pool: &Path, len: u64) -> Result<WalPolicy, MediaError> {
        let mut name = pool.as_os_str().to_os_string();
        name.push(".wal");
        let file = FileLog::open_or_create(Path::new(&name), len)?;
        Ok(WalPolicy::new(Arc::new(file)))
    }

    /// This policy, asking for the pool mapped copy-on-write (`true`) or shared (`false`)
    /// whatever `MNEMO_WAL_PRIVATE` says (see `docs/design/disk-durability.md`: the shared
    /// mapping is the default, measured faster here; copy-on-write makes
    /// [`WalPolicy::defer_acks`] possible).
    #[must_use]
    pub fn private(mut self, on: bool) -> WalPolicy {
        self.private = Some(on);
        self
    }

    /// Acknowledge sync points before they are durable: from now on a sync point returns
    /// once its record is appended, and a thread of the policy's own writes and syncs the
    /// records (one `fdatasync` per group, the owed checkpoints too), calling `notify`
    /// after each group becomes durable or a write fails. The caller holds back whatever
    /// depends on durability until [`Shared::marks`] says its mark is durable. Sound only on
    /// a private mapping ([`Media::private`]): there the pool file changes only through
    /// checkpoints of durable records, so a crash finds the pool as it was after some
    /// prefix of the sync points, whatever ran after them in memory. `false` (nothing
    /// changes) elsewhere, or before the pool is open.
    ///
    /// `notify` `None`: no thread; the owner makes records durable with
    /// [`Shared::pump`] when it chooses (deterministic runs: the crash simulator's).
    pub fn defer_acks(&self, notify: Option<Arc<dyn Fn() + Send + Sync>>) -> bool {
        let mut syncer = self.syncer.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = self.lock();
        if st.backing.is_none() || st.uuid.is_none() {
            return false;
        }
        st.deferred = true;
        let Some(notify) = notify else {
            return true;
        };
        st.notify = Some(notify);
        if syncer.is_none() {
            let shared = Arc::clone(&self.shared);
            let spawned = Builder::new()
                .name("mnemo-wal-sync".into())
                .spawn(move || shared.sync_loop());
            match spawned {
                Ok(handle) => *syncer = Some(handle),
                Err(e) => {
                    tracing::warn!("cannot start the write-ahead syncer thread ({e}): acknowledgements stay synchronous");
                    st.deferred = false;
                    st.notify = None;
                    return false;
                }
            }
        }
        true
    }
}

impl Shared {
    /// Figures so far.
    pub fn stats(&self) -> WalStats {
        let st = self.lock();
        WalStats {
            private_mapping: st.backing.is_some(),
            deferred_acks: st.deferred,
            ..st.stats
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.wake.wait(guard).unwrap_or_else(|p| p.into_inner())
    }

    /// First byte of the half that holds the records of `epoch`.
    fn half_start(&self, epoch: u64) -> u64 {
        WAL_RECORDS_OFFSET + (epoch % 2) * self.half
    }

    /// Make everything stored so far durable in place and every record written so far
    /// dead: pending records written, the next epoch begun, the whole pool synced, the
    /// header moved to the next epoch and synced.
    pub fn checkpoint(&self, media: &dyn Media) -> Result<(), MediaError> {
        let mut st = self.lock();
        // A checkpoint owed or running may have begun (or begin) before the caller's
        // stores: finish it, then one of our own.
        loop {
            if let Some(first) = st.owed.take() {
                drop(st);
                self.finish_checkpoint(Some(media), first)?;
                st = self.lock();
            } else if st.checkpointing {
                st = self.wait(st);
            } else {
                break;
            }
        }
        let (st, owed) = self.switch(st, media)?;
        drop(st);
        match owed {
            Some(first) => self.finish_checkpoint(Some(media), first),
            None => Ok(()),
        }
    }

    /// Begin the next epoch in the other half: wait for that half to be free (no
    /// checkpoint running) and for the current epoch's records to be durable (leading
    /// their write if needed), then switch. The caller owes the checkpoint of the old
    /// epoch ([`WalPolicy::finish_checkpoint`] of the returned epoch); appends go on into
    /// the new one meanwhile. `None`: not attached, nothing to do.
    fn switch<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        media: &dyn Media,
    ) -> Result<(MutexGuard<'a, State>, Option<u64>), MediaError> {
        loop {
            failed(&st)?;
            if st.uuid.is_none() {
                return Ok((st, None));
            }
            if let Some(first) = st.owed.take() {
                // The other half is not free until the checkpoint a switch owes ends.
                drop(st);
                self.finish_checkpoint(Some(media), first)?;
                st = self.lock();
            } else if st.checkpointing || st.writing {
                st = self.wait(st);
            } else if !st.buf.is_empty() {
                st = self.write_pending(st)?;
            } else {
                break;
            }
        }
        debug_assert_eq!(st.first, st.epoch, "the other half is free");
        let next = st.epoch + 1;
        st.epoch = next;
        st.seq = 0;
        st.pos = self.half_start(next);
        st.buf_pos = st.pos;
        st.checkpointing = true;
        st.stats.pending_bytes = 0;
        Ok((st, Some(next)))
    }

    /// The checkpoint a switch to epoch `first` owes, without the lock: the pool synced,
    /// then the header naming `first`. Until it ends no other switch can begin.
    fn finish_checkpoint(&self, media: Option<&dyn Media>, first: u64) -> Result<(), MediaError> {
        let uuid = self.lock().uuid.unwrap_or_default();
        let started = Instant::now();
        let result = self.checkpoint_io(media, first, first.checked_sub(1), uuid);
        let mut st = self.lock();
        st.checkpointing = false;
        self.wake.notify_all();
        if let Err(e) = result {
            st.failed = Some(e.to_string());
            return Err(e);
        }
        st.first = first;
        st.stats.checkpoints += 1;
        st.stats.last_checkpoint_ns = started.elapsed().as_nanos() as u64;
        Ok(())
    }

    /// The checkpoint's I/O: the whole pool synced in place (every record before `first`
    /// holds bytes the pool now has, or newer ones), then the header naming `first`. On a
    /// private mapping the records of epoch `apply` (the one before `first`, whose records
    /// are durable and the only live ones older than `first`) are written into the pool file
    /// instead, which is then synced: the file never holds what memory has beyond them.
    fn checkpoint_io(
        &self,
        media: Option<&dyn Media>,
        first: u64,
        apply: Option<u64>,
        uuid: uuid::Uuid,
    ) -> Result<(), MediaError> {
        let backing = self.lock().backing.clone();
        if !crate::mutant::active("wal.checkpoint_skip_pool") {
            match (&backing, media) {
                (Some(backing), _) => {
                    if let Some(epoch) = apply {
                        self.apply_epoch(epoch, uuid, &mut |offset, bytes| {
                            backing.write_at(offset, bytes)
                        })?;
                    }
                    crate::conc::blocking_io();
                    crate::durable_site!("wal.checkpoint_pool_file", backing.sync())?;
                }
                (None, Some(media)) => {
                    media.flush(0, media.len());
                    crate::durable_site!("wal.checkpoint_pool", media.drain())?;
                }
                (None, None) => {
                    return Err(corrupt(
                        "a checkpoint of a shared mapping needs the medium (internal)".into(),
                    ))
                }
            }
        }
        self.write_header(first, uuid)
    }

    /// Write header copy `first % 2` and sync it. The sync is what kills the older epochs'
    /// records before the checkpoint returns: a sync point made durable in place (too large
    /// for a record) is acknowledged after it, and an older record replayed over its bytes
    /// would put older values back (the heap's `Mix::ChunkReuse` on a small write-ahead
    /// file catches a missing sync: a horizon word zeroed in place, its garbage back); and
    /// the half it frees is written again only after it.
    fn write_header(&self, first: u64, uuid: uuid::Uuid) -> Result<(), MediaError> {
        let bytes = encode_header(first, uuid, self.file.len());
        crate::conc::blocking_io();
        self.file
            .write_at((first % 2) * WAL_HEADER_COPY_SIZE, &bytes)?;
        crate::durable_site!("wal.header", self.file.sync())
    }

    /// Append one record for `point` and wait until it is durable (leading a group commit
    /// if no other thread is writing).
    fn append(&self, media: &dyn Media, point: &SyncPoint<'_>) -> Result<(), MediaError> {
        let len = record_len(point);
        let mut st = self.lock();
        if st.deferred {
            // The syncer thread runs owed checkpoints.
        } else if let Some(first) = st.owed.take() {
            // A checkpoint the previous switch owes: this sync point runs it.
            drop(st);
            self.finish_checkpoint(Some(media), first)?;
            st = self.lock();
        }
        loop {
            failed(&st)?;
            if st.uuid.is_none() {
                // Not attached yet: nothing to append to, and nothing to replay over it.
                drop(st);
                for range in point.all() {
                    media.flush(range.offset, range.len);
                }
                return media.drain();
            }
            if len > self.record_max {
                // Too large for a record: in place, with a checkpoint begun after the
                // stores, so that no older record can put older bytes back over these.
                let private = st.backing.is_some();
                st.stats.in_place += 1;
                drop(st);
                tracing::debug!(
                    bytes = len,
                    record_max = self.record_max,
                    ranges = point.all().count(),
                    largest = ?point.all().max_by_key(|r| r.len),
                    kind = ?point.kind,
                    "sync point too large for a record: in place, with a checkpoint"
                );
                self.checkpoint(media)?;
                if private {
                    // The checkpoint wrote records, not memory: these ranges go through
                    // now (no older record is live to be replayed over them).
                    for range in point.all() {
                        media.flush(range.offset, range.len);
                    }
                    return crate::durable_site!("wal.large_in_place", media.drain());
                }
                return Ok(());
            }
            if st.pos + len > self.half_start(st.epoch) + self.half {
                // This epoch's half is full: the next one begins, and the next sync point
                // checkpoints the old one (a crash before that replays both epochs).
                let (guard, next) = self.switch(st, media)?;
                st = guard;
                st.owed = next;
                continue;
            }
            break;
        }
        let (epoch, seq, uuid) = (st.epoch, st.seq, st.uuid.unwrap_or_default());
        encode_record(&mut st.buf, (epoch, seq, uuid), point, media);
        st.pos += len;
        st.seq += 1;
        st.appended += len;
        st.stats.records += 1;
        st.stats.bytes += len;
        st.stats.pending_bytes += len;
        let mine = st.appended;
        if st.deferred {
            self.wake.notify_all();
            return Ok(());
        }
        if crate::mutant::active("wal.ack_before_sync") {
            return Ok(());
        }
        self.wait_durable(st, mine)
    }

    /// Bytes of records appended in the life of the policy, and the part of them durable
    /// (marks to compare: whatever a sync point acknowledged under
    /// [`WalPolicy::defer_acks`] is durable once the second reaches the first as it was
    /// then). An error once a write or sync failed: nothing more will become durable.
    pub fn marks(&self) -> Result<(u64, u64), MediaError> {
        let st = self.lock();
        failed(&st)?;
        if crate::mutant::active("wal.deferred_durable_early") {
            return Ok((st.appended, st.appended));
        }
        Ok((st.appended, st.durable))
    }

    /// Return once every record appended so far is durable (leading the write if no
    /// other thread is writing).
    pub fn flush_records(&self) -> Result<(), MediaError> {
        let st = self.lock();
        let mine = st.appended;
        self.wait_durable(st, mine)
    }

    /// What the syncer thread does, once, on the caller's thread: the owed checkpoint, then
    /// every record appended so far written and synced (deferred acknowledgements without a
    /// thread, [`WalPolicy::defer_acks`] with no notifier).
    pub fn pump(&self) -> Result<(), MediaError> {
        let owed = self.lock().owed.take();
        if let Some(first) = owed {
            self.finish_checkpoint(None, first)?;
        }
        self.flush_records()
    }

    /// The syncer thread of [`WalPolicy::defer_acks`]: write and sync what is appended,
    /// run owed checkpoints, tell the owner; until the policy is dropped.
    fn sync_loop(self: &Arc<Self>) {
        let mut st = self.lock();
        loop {
            if st.stop {
                return;
            }
            let notify = st.notify.clone();
            if st.failed.is_none() {
                // A switch owes it (and set `checkpointing`, which stays set until it ends:
                // no other switch begins before).
                if let Some(first) = st.owed.take() {
                    // On a thread of its own, so records go on being synced meanwhile (the
                    // checkpoint reads and writes a whole half of the file).
                    drop(st);
                    let shared = Arc::clone(self);
                    let spawned = Builder::new().name("mnemo-wal-ckpt".into()).spawn(move || {
                        if shared.finish_checkpoint(None, first).is_err() {
                            if let Some(notify) = &notify {
                                notify();
                            }
                        }
                    });
                    st = self.lock();
                    if let Err(e) = spawned {
                        st.checkpointing = false;
                        st.failed = Some(format!("cannot start the checkpoint thread: {e}"));
                        self.wake.notify_all();
                    }
                    continue;
                }
            }
            if st.failed.is_none() && !st.writing && !st.buf.is_empty() {
                let written = self.write_pending(st);
                if let Some(notify) = &notify {
                    notify();
                }
                st = written.unwrap_or_else(|_| self.lock());
                continue;
            }
            st = self.wait(st);
        }
    }

    /// Return once the first `mine` bytes ever appended are durable: lead a group commit
    /// (write every record appended so far, one sync) unless another thread does.
    fn wait_durable<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        mine: u64,
    ) -> Result<(), MediaError> {
        loop {
            failed(&st)?;
            if st.durable >= mine {
                return Ok(());
            }
            if st.writing {
                st = self.wait(st);
                continue;
            }
            st = self.write_pending(st)?;
        }
    }

    /// Lead one group commit: write the records appended so far, one sync, wake waiters.
    fn write_pending<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
    ) -> Result<MutexGuard<'a, State>, MediaError> {
        st.writing = true;
        let buf = std::mem::take(&mut st.buf);
        let (at, end) = (st.buf_pos, st.appended);
        st.buf_pos = st.pos;
        if crate::mutant::active("wal.durable_before_sync") {
            // Broken: the group's records count as durable before they are written and
            // synced; whoever reads the marks meanwhile (the server holding replies under
            // deferred acknowledgements) releases what a crash can still lose.
            st.durable = st.durable.max(end);
        }
        drop(st);
        let started = Instant::now();
        crate::conc::blocking_io();
        let result = self.file.write_at(at, &buf).and_then(|()| {
            crate::conc::blocking_io();
            crate::durable_site!("wal.append", self.file.sync())
        });
        let ns = started.elapsed().as_nanos() as u64;
        let mut st = self.lock();
        st.writing = false;
        self.wake.notify_all();
        if let Err(e) = result {
            st.failed = Some(e.to_string());
            return Err(e);
        }
        st.durable = st.durable.max(end);
        st.stats.fdatasyncs += 1;
        st.stats.last_fdatasync_ns = ns;
        if st.buf.is_empty() && st.buf.capacity() < buf.capacity() {
            st.buf = buf;
            st.buf.clear();
        }
        Ok(st)
    }

    /// At open: the header in force, the records of its two epochs replayed into the pool,
    /// then a checkpoint. `created`: a new pool, whatever the file holds is not its own.
    fn attach(&self, media: &dyn Media, uuid: uuid::Uuid, created: bool) -> Result<(), MediaError> {
        let backing = media.backing();
        self.lock().backing = backing.clone();
        let mut copies = [[0u8; WAL_HEADER_LEN]; 2];
        for (k, copy) in copies.iter_mut().enumerate() {
            self.file.read_at(k as u64 * WAL_HEADER_COPY_SIZE, copy)?;
        }
        let decoded: Vec<Header> = copies.iter().filter_map(decode_header).collect();
        let newest = decoded.iter().max_by_key(|h| h.epoch).copied();
        let first = match newest {
            _ if created => newest.map_or(0, |h| h.epoch),
            Some(h) if h.uuid != uuid => {
                return Err(corrupt(format!(
                    "it belongs to pool {}, not to this pool ({uuid}); move it away if the \
                     pool was replaced",
                    h.uuid
                )))
            }
            Some(h) => {
                let replayed = if crate::mutant::active("wal.skip_replay") {
                    0
                } else {
                    self.replay(media, h.epoch, uuid)?
                };
                self.lock().stats.replayed = replayed;
                h.epoch
            }
            None if copies.iter().all(|c| c.iter().all(|&b| b == 0)) => 0,
            None => {
                return Err(corrupt(
                    "no header copy is valid (neither decodes with its checksum)".into(),
                ))
            }
        };
        // Records of `first` and `first + 1` may lie in the file: the epoch in force
        // becomes `first + 2`, whose header makes them all dead once the replayed bytes are
        // durable in place (nothing appends before the pool is open).
        let next = first + 2;
        {
            let mut st = self.lock();
            st.uuid = Some(uuid);
            st.first = first;
            st.epoch = next;
            st.seq = 0;
            st.pos = self.half_start(next);
            st.buf_pos = st.pos;
        }
        // On a private mapping replay wrote the records into the file as well: sync it.
        let result = crate::durable_site!(
            "wal.attach_checkpoint",
            self.checkpoint_io(Some(media), next, None, uuid)
        );
        let mut st = self.lock();
        if let Err(e) = result {
            st.failed = Some(e.to_string());
            return Err(e);
        }
        st.first = next;
        st.stats.checkpoints += 1;
        Ok(())
    }

    /// Apply the records of `first`, then those of `first + 1`, in order; the count. The
    /// second epoch's records, if any, were all written after every record of the first
    /// was durable (an epoch begins only once the previous one's records are synced), so
    /// they come after all of them, wherever the first epoch's chain ends.
    fn replay(&self, media: &dyn Media, first: u64, uuid: uuid::Uuid) -> Result<u64, MediaError> {
        let older = self.replay_epoch(media, first, uuid)?;
        if crate::mutant::active("wal.replay_one_epoch") {
            return Ok(older);
        }
        Ok(older + self.replay_epoch(media, first + 1, uuid)?)
    }

    /// Apply the chain of records of `epoch` in its half to the pool, up to the first that
    /// does not check (another epoch's, torn, never written); the count. On a private
    /// mapping the bytes go into the pool file as well.
    fn replay_epoch(
        &self,
        media: &dyn Media,
        epoch: u64,
        uuid: uuid::Uuid,
    ) -> Result<u64, MediaError> {
        let backing = self.lock().backing.clone();
        self.apply_epoch(epoch, uuid, &mut |offset, bytes| {
            let end = offset.checked_add(bytes.len() as u64);
            if end.is_none_or(|e| e > media.len()) {
                return Err(corrupt(format!(
                    "a record of epoch {epoch} names {offset:#x}+{}, outside the pool's \
                     data ({} bytes)",
                    bytes.len(),
                    media.len()
                )));
            }
            // SAFETY: `offset..end` lies within the medium's live mapping (checked just
            // above); `bytes` is a separate buffer; no other thread uses the pool yet (it is
            // being opened).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    media.base().as_ptr().add(offset as usize),
                    bytes.len(),
                );
            }
            match &backing {
                Some(file) => file.write_at(offset, bytes),
                None => Ok(()),
            }
        })
    }

    /// Hand every entry of the chain of records of `epoch` to `sink`, record by record,
    /// up to the first record that does not check; the count of records.
    fn apply_epoch(
        &self,
        epoch: u64,
        uuid: uuid::Uuid,
        sink: &mut EntrySink<'_>,
    ) -> Result<u64, MediaError> {
        let start = self.half_start(epoch);
        let end = start + self.half;
        let mut pos = start;
        let mut seq = 0u64;
        let mut head = [0u8; WAL_RECORD_HEADER];
        let mut body = Vec::new();
        while pos + WAL_RECORD_HEADER as u64 <= end {
            self.file.read_at(pos, &mut head)?;
            let Some(len) = record_head(&head, epoch, seq, end - pos) else {
                break;
            };
            body.resize(len as usize, 0);
            self.file.read_at(pos, &mut body)?;
            let Some(entries) = decode_record(&body, uuid) else {
                break;
            };
            for (offset, bytes) in entries {
                if offset < crate::limits::JOURNAL_OFFSET {
                    return Err(corrupt(format!(
                        "record {seq} of epoch {epoch} names {offset:#x}+{}, inside the \
                         pool's header",
                        bytes.len(),
                    )));
                }
                sink(offset, bytes)?;
            }
            pos += len;
            seq += 1;
        }
        Ok(seq)
    }
}

fn failed(st: &State) -> Result<(), MediaError> {
    match &st.failed {
        None => Ok(()),
        Some(why) => Err(corrupt(format!(
            "an earlier write or fdatasync failed ({why}); nothing more is acknowledged \
             (restart: recovery replays what is durable)"
        ))),
    }
}

fn corrupt(detail: String) -> MediaError {
    MediaError::WriteAhead { detail }
}

impl SyncPolicy for WalPolicy {
    fn name(&self) -> &'static str {
        "write-ahead"
    }

    fn sync(&self, media: &dyn Media, point: &SyncPoint<'_>) -> Result<(), MediaError> {
        if point.kind == SyncKind::Header {
            let deferred = self.lock().deferred;
            if deferred {
                // Nothing acknowledged later may be durable before what came earlier.
                self.flush_records()?;
            }
            // In place: header copies are never in a record (open reads the header before
            // any replay), and msync persists a grown file's length too.
            for range in point.ranges {
                media.flush(range.offset, range.len);
            }
            return crate::durable_site!("wal.header_in_place", media.drain());
        }
        self.append(media, point)
    }

    fn open(&self, media: &dyn Media, pool: uuid::Uuid, created: bool) -> Result<(), MediaError> {
        self.attach(media, pool, created)
    }

    fn close(&self, media: &dyn Media) -> Result<(), MediaError> {
        self.checkpoint(media)?;
        if media.private() {
            // Stores no sync point named are in memory only: a clean close writes them to
            // the file, as the shared mapping's page cache kept them past the process (no
            // record is live, so none is replayed over them). Not a durability site: no
            // layer relies on an unnamed store surviving a crash (on persistent memory it
            // may not either); `tests/wal.rs` checks the clean close keeps them.
            media.write_back_all()?;
        }
        self.lock().backing = None;
        Ok(())
    }

    fn checkpoint_all(&self, media: &dyn Media) -> Result<(), MediaError> {
        self.shared.checkpoint(media)
    }

    fn private_mapping(&self) -> bool {
        self.private
            .unwrap_or_else(|| std::env::var("MNEMO_WAL_PRIVATE").is_ok_and(|v| v.trim() == "1"))
    }

    fn defer_acks(&self, notify: Option<Arc<dyn Fn() + Send + Sync>>) -> bool {
        WalPolicy::defer_acks(self, notify)
    }

    fn pump(&self) -> Result<(), MediaError> {
        self.shared.pump()
    }

    fn ack_marks(&self) -> Option<Result<(u64, u64), MediaError>> {
        let deferred = self.lock().deferred;
        deferred.then(|| self.marks())
    }

    fn write_ahead(&self) -> Option<WalStats> {
        Some(self.stats())
    }
}

#[derive(Clone, Copy, Debug)]
struct Header {
    epoch: u64,
    uuid: uuid::Uuid,
}

/// Header copy: magic (8), version (4), zero (4), epoch (8), pool uuid (16), file length
/// (8), zero (12), CRC-32C of bytes 0..60 (4).
fn encode_header(epoch: u64, uuid: uuid::Uuid, len: u64) -> [u8; WAL_HEADER_LEN] {
    let mut b = [0u8; WAL_HEADER_LEN];
    b[0..8].copy_from_slice(&WAL_MAGIC);
    b[8..12].copy_from_slice(&WAL_VERSION.to_le_bytes());
    b[16..24].copy_from_slice(&epoch.to_le_bytes());
    b[24..40].copy_from_slice(uuid.as_bytes());
    b[40..48].copy_from_slice(&len.to_le_bytes());
    let crc = crc32c::crc32c(&b[..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    b
}

fn decode_header(b: &[u8; WAL_HEADER_LEN]) -> Option<Header> {
    let word = |r: std::ops::Range<usize>| -> u64 {
        let mut w = [0u8; 8];
        w[..r.len()].copy_from_slice(&b[r]);
        u64::from_le_bytes(w)
    };
    if b[0..8] != WAL_MAGIC
        || word(8..12) != u64::from(WAL_VERSION)
        || word(60..64) != u64::from(crc32c::crc32c(&b[..60]))
    {
        return None;
    }
    let uuid = uuid::Uuid::from_slice(&b[24..40]).ok()?;
    Some(Header {
        epoch: word(16..24),
        uuid,
    })
}

/// A range rounded out to aligned 8-byte words: what a record holds of it. Replay writes
/// whole words, so an aligned word is never found half from a record and half from a page
/// the kernel wrote back later (x86's 8-byte atomicity, which the layers above rely on,
/// holds on disk too). The pool's size is a page multiple, so the rounded range stays in it.
fn words_of(range: &ByteRange) -> (u64, u64) {
    let start = range.offset - range.offset % 8;
    let end = range.end().next_multiple_of(8);
    (start, end - start)
}

/// Bytes of the record for `point`: header, then per range 16 bytes and its words.
fn record_len(point: &SyncPoint<'_>) -> u64 {
    WAL_RECORD_HEADER as u64 + point.all().map(|r| 16 + words_of(r).1).sum::<u64>()
}

/// Record: magic "WALR" (4), CRC-32C of the pool's uuid then bytes 8..len (4), epoch (8),
/// seq (8), len (4), count (4), then `count` entries: offset (8), len (8), the bytes padded
/// to 8. The uuid in the checksum keeps another pool's records (an old file reused) out.
fn encode_record(
    out: &mut Vec<u8>,
    (epoch, seq, uuid): (u64, u64, uuid::Uuid),
    point: &SyncPoint<'_>,
    media: &dyn Media,
) {
    let start = out.len();
    let len = record_len(point);
    out.extend_from_slice(&RECORD_MAGIC);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&epoch.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&(point.all().count() as u32).to_le_bytes());
    for range in point.all() {
        let (offset, len) = words_of(range);
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        // SAFETY: the pool checked every range against its size (a page multiple) before
        // the policy, so the rounded range lies in the mapping too; the named bytes are not
        // changed by the sync point's caller meanwhile (other bytes of the edge words may
        // be: any value they held is one a crash may keep).
        let bytes = unsafe {
            std::slice::from_raw_parts(
                media.base().as_ptr().add(offset as usize).cast_const(),
                len as usize,
            )
        };
        out.extend_from_slice(bytes);
    }
    debug_assert_eq!(out.len() - start, len as usize);
    let crc = record_crc(uuid, &out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
}

/// The length of the record whose header is `head`, if it is the record `seq` of `epoch`
/// and fits in `room` bytes.
fn record_head(head: &[u8; WAL_RECORD_HEADER], epoch: u64, seq: u64, room: u64) -> Option<u64> {
    let u64_at = |at: usize| u64::from_le_bytes(head[at..at + 8].try_into().unwrap_or([0; 8]));
    let len = u64::from(u32::from_le_bytes(
        head[24..28].try_into().unwrap_or([0; 4]),
    ));
    (head[0..4] == RECORD_MAGIC
        && u64_at(8) == epoch
        && u64_at(16) == seq
        && len >= WAL_RECORD_HEADER as u64
        && len % 8 == 0
        && len <= room)
        .then_some(len)
}

fn record_crc(uuid: uuid::Uuid, rest: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(uuid.as_bytes()), rest)
}

/// The entries of a whole record of the pool `uuid`, if its checksum and framing hold.
fn decode_record(body: &[u8], uuid: uuid::Uuid) -> Option<Vec<(u64, &[u8])>> {
    let crc = u32::from_le_bytes(body.get(4..8)?.try_into().ok()?);
    if record_crc(uuid, body.get(8..)?) != crc {
        return None;
    }
    let count = u32::from_le_bytes(body.get(28..32)?.try_into().ok()?);
    let mut at = WAL_RECORD_HEADER;
    let mut entries = Vec::new();
    for _ in 0..count {
        let offset = u64::from_le_bytes(body.get(at..at + 8)?.try_into().ok()?);
        let len = u64::from_le_bytes(body.get(at + 8..at + 16)?.try_into().ok()?);
        let data_end = (at + 16).checked_add(usize::try_from(len).ok()?)?;
        entries.push((offset, body.get(at + 16..data_end)?));
        at = data_end.next_multiple_of(8);
    }
    (at == body.len()).then_some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_refuses_damage() {
        let uuid = uuid::Uuid::from_u128(7);
        let mut b = encode_header(5, uuid, 1 << 20);
        let h = decode_header(&b).expect("valid");
        assert_eq!((h.epoch, h.uuid), (5, uuid));
        for byte in 0..WAL_HEADER_LEN {
            b[byte] ^= 1;
            assert!(decode_header(&b).is_none(), "a flipped bit in byte {byte}");
            b[byte] ^= 1;
        }
    }

    #[test]
    fn record_framing_refuses_damage() {
        let head = [0u8; WAL_RECORD_HEADER];
        assert!(record_head(&head, 0, 0, 1 << 20).is_none());
        // A record of one 3-byte entry: header 32 + 16 + 8.
        let mut body = Vec::new();
        body.extend_from_slice(&RECORD_MAGIC);
        body.extend_from_slice(&[0; 4]);
        body.extend_from_slice(&2u64.to_le_bytes());
        body.extend_from_slice(&9u64.to_le_bytes());
        body.extend_from_slice(&56u32.to_le_bytes());
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(&40960u64.to_le_bytes());
        body.extend_from_slice(&3u64.to_le_bytes());
        body.extend_from_slice(&[1, 2, 3, 0, 0, 0, 0, 0]);
        let uuid = uuid::Uuid::from_u128(3);
        let crc = record_crc(uuid, &body[8..]);
        body[4..8].copy_from_slice(&crc.to_le_bytes());
        let head: [u8; WAL_RECORD_HEADER] = body[..32].try_into().unwrap();
        assert_eq!(record_head(&head, 2, 9, 1 << 20), Some(56));
        assert_eq!(record_head(&head, 3, 9, 1 << 20), None, "another epoch");
        assert_eq!(record_head(&head, 2, 8, 1 << 20), None, "another seq");
        assert_eq!(record_head(&head, 2, 9, 48), None, "past the file");
        assert_eq!(
            decode_record(&body, uuid),
            Some(vec![(40960, &[1u8, 2, 3][..])])
        );
        assert!(
            decode_record(&body, uuid::Uuid::from_u128(4)).is_none(),
            "another pool's record"
        );
        for byte in 8..body.len() {
            body[byte] ^= 0x10;
            assert!(
                decode_record(&body, uuid).is_none(),
                "a flipped bit in byte {byte}"
            );
            body[byte] ^= 0x10;
        }
    }
}
