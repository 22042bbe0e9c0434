//! [`SimMedia`]: a simulated persistent medium that knows what a power failure may lose.
//!
//! See the crate documentation for the model. In short: the program's stores land in
//! ordinary memory (the *volatile* view, at a fixed address); the simulator keeps a second
//! copy, the *durable image*. [`Media::flush`] snapshots the covered cache lines,
//! [`Media::drain`] writes those snapshots into the durable image. A crash image is the
//! durable image plus any subset of the *pending units*: the 8-byte words (or, in
//! [`Granularity::Line`], the cache lines) where the volatile view differs from the durable
//! image.
//!
//! [`Medium::PageCache`] models a file in the page cache of an ordinary disk instead (the
//! POSIX crash model of ALICE and CrashMonkey): `flush` names pages, `drain` is `msync(2)`
//! of the pages named since the last one, units are 512-byte sectors or 4 KiB pages, and the
//! file's length is durable only once a sync follows the growth.
#![allow(unsafe_code)]

use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use mnemo_pmem::cpu::FlushKind;
use mnemo_pmem::limits::{CACHE_LINE, PAGE_SIZE};
use mnemo_pmem::reserve::Reservation;
use mnemo_pmem::{Durability, Media, MediaError, MediaInfo, MediaKind};

use crate::shadow::Shadow;

const LINE: usize = CACHE_LINE as usize;
const WORD: usize = 8;

/// The unit a crash may keep or lose independently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Granularity {
    /// Strict (the default): every pending 8-byte word independently old or new. The only
    /// guarantee x86 gives is 8-byte atomicity of aligned stores; ARM and CXL give no more.
    #[default]
    Word,
    /// Per cache line: all pending words of a line together, old or new. Models a line
    /// written back whole at one moment; weaker than x86 (which may persist any *prefix* of
    /// a line's stores, and a diffing model does not know their order). Fewer images.
    Line,
    /// Per 512-byte disk sector: all pending words of a sector together. With
    /// [`Medium::PageCache`], a page written back while power fails may be *torn* at sector
    /// boundaries, and sectors are the atomic unit of a disk write.
    Sector,
    /// Per 4 KiB page: a page written back whole or not at all. Fewer images than
    /// [`Granularity::Sector`]; it explores the order in which the kernel writes pages back.
    Page,
}

impl Granularity {
    /// Bytes of one unit (8 for [`Granularity::Word`]).
    pub const fn unit_bytes(self) -> u64 {
        match self {
            Granularity::Word => WORD as u64,
            Granularity::Line => LINE as u64,
            Granularity::Sector => SECTOR,
            Granularity::Page => PAGE_SIZE,
        }
    }
}

/// Bytes of a disk sector: the unit a disk writes atomically (and the unit a page torn by a
/// power failure is torn at).
pub const SECTOR: u64 = 512;

/// What kind of medium is simulated: what a flush and a fence do, what a crash may keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Medium {
    /// Persistent memory (the default): a flush snapshots cache lines, a fence makes the
    /// snapshots durable; any unflushed line may be written back early.
    #[default]
    Pmem,
    /// A file on an ordinary disk, mapped through the page cache (what `FileMedia` calls
    /// `MediaKind::PageCache`), with the POSIX crash model of ALICE and CrashMonkey:
    /// * a flush names the pages it touches, and a fence is `msync(MS_SYNC)` of the pages
    ///   named since the previous fence: their contents *at the fence* become durable (a
    ///   crash keeps every range synced before it). `FileMedia` syncs the whole mapping at
    ///   every drain, a superset of this;
    /// * any other dirty page may have been written back at any time, in any order, and a
    ///   page written back as power fails may be torn at 512-byte sectors: pending units are
    ///   sectors ([`Granularity::Sector`]) or pages ([`Granularity::Page`]), not words;
    /// * the file's length persists only through a sync: after a growth, until the next
    ///   fence, a crash may find the file at its old length (the new bytes gone).
    PageCache,
    /// The same file mapped copy-on-write, as `FileMedia` maps a pool under the write-ahead
    /// policy (`Media::private`): the kernel never writes a page back, so the file changes
    /// only when written to. A flush names a byte range and a fence writes the named ranges
    /// through and syncs the file; the policy's checkpoints write records into the file
    /// through [`Media::backing`] and sync it. A crash keeps the file as last synced plus
    /// any subset of the sectors written to it since (torn at sectors, or whole pages with
    /// [`Granularity::Page`]); memory never reaches it otherwise. The length persists only
    /// through a sync, as on [`Medium::PageCache`].
    PagePrivate,
}

impl Medium {
    /// A file in the page cache, shared or private: a fence syncs, the length lags.
    pub fn is_file(self) -> bool {
        matches!(self, Medium::PageCache | Medium::PagePrivate)
    }
}

/// Options of a simulated medium.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimOptions {
    /// What is simulated: persistent memory or a page-cache file.
    pub medium: Medium,
    /// What a crash may tear.
    pub granularity: Granularity,
    /// Record a [`CrashPoint`] at every fence, growth, acknowledgement and at the end.
    pub record: bool,
    /// Mutant "dropped flush": ignore the flush call with this index (0-based, counting
    /// every [`Media::flush`] and [`Media::copy_nodrain`]).
    pub drop_flush: Option<u64>,
    /// Mutant "dropped fence": the fence with this index (0-based) makes nothing durable.
    pub drop_fence: Option<u64>,
    /// Also record a crash point at every flush (with `record`). Such a point sees values
    /// that a later store overwrites before the fence, which fence points cannot see.
    pub points_at_flush: bool,
    /// Keep a shadow replica ([`crate::Shadow`], recording a point per sync point when
    /// `record` is set): pools that [`crate::pool`] creates or opens on this medium sync
    /// through its recording policy.
    pub shadow: bool,
    /// Bytes of a simulated write-ahead file beside the pool (0: none): pools that
    /// [`crate::pool`] creates or opens on this medium then sync through
    /// `mnemo_pmem::WalPolicy` on it ([`SimMedia::wal`]). The file has the page-cache
    /// crash model whatever the medium: a write is durable only after a sync, any unsynced
    /// sector may or may not have reached the disk. Created full length and durable.
    pub wal_bytes: u64,
}

/// Where in a run a crash point was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointKind {
    /// Just before fence number `n` (0-based) takes effect.
    Fence(u64),
    /// Just before flush number `n` (0-based) takes its snapshot
    /// ([`SimOptions::points_at_flush`]).
    Flush(u64),
    /// Just before growth number `n` (0-based).
    Grow(u64),
    /// Just before sync number `n` (0-based) of the write-ahead file takes effect.
    FileSync(u64),
    /// Just before sync number `n` (0-based) of a [`Medium::PagePrivate`] pool file
    /// through [`Media::backing`] (a checkpoint) takes effect.
    PoolSync(u64),
    /// Right after the harness was told that operation number `n` (1-based count) was
    /// acknowledged.
    Ack(usize),
    /// When the run (or the recovery) returned.
    End,
}

impl std::fmt::Display for PointKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PointKind::Fence(n) => write!(f, "fence #{n}"),
            PointKind::Flush(n) => write!(f, "flush #{n}"),
            PointKind::Grow(n) => write!(f, "grow #{n}"),
            PointKind::FileSync(n) => write!(f, "write-ahead file sync #{n}"),
            PointKind::PoolSync(n) => write!(f, "pool file sync #{n}"),
            PointKind::Ack(n) => write!(f, "ack of op #{n}"),
            PointKind::End => write!(f, "end of run"),
        }
    }
}

/// One pending 8-byte word: its offset and the value the program last stored there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Word {
    /// Offset of the word in the medium (a multiple of 8).
    pub offset: u64,
    /// Value in the volatile view (little-endian bytes as a `u64`).
    pub new: u64,
    /// Value in the durable image.
    pub old: u64,
}

/// A moment where the simulator may crash, with everything needed to build its images.
#[derive(Clone, Debug)]
pub struct CrashPoint {
    /// Where in the run.
    pub kind: PointKind,
    /// Operations acknowledged so far.
    pub acked: usize,
    /// The durable image at this moment.
    pub durable: Arc<Vec<u8>>,
    /// Every pending word, by offset.
    pub words: Vec<Word>,
    /// The independent units: ranges of `words` (one word each in [`Granularity::Word`]).
    pub units: Vec<Range<u32>>,
    /// [`Medium::PageCache`] after a growth not yet followed by a sync: the length the file
    /// may be found at (the durable length), shorter than `durable`. The file's length is
    /// then one more unit, the last ([`CrashPoint::short_unit`]), kept by cuts that keep
    /// the new length.
    pub short_len: Option<u64>,
    /// The write-ahead file ([`SimOptions::wal_bytes`]): its units come after the pool's.
    pub file: Option<FilePoint>,
}

/// The write-ahead file at a crash point: its durable image and its pending sectors.
#[derive(Clone, Debug)]
pub struct FilePoint {
    /// The durable image of the file.
    pub durable: Arc<Vec<u8>>,
    /// Every pending word (written, not yet synced), by offset in the file.
    pub words: Vec<Word>,
    /// The independent units (one per 512-byte sector): ranges of `words`.
    pub units: Vec<Range<u32>>,
}

impl CrashPoint {
    /// Units a cut chooses from: the pool's pending units, the write-ahead file's, and the
    /// pool file's length if it may be found short.
    pub fn unit_count(&self) -> usize {
        self.short_unit() as usize + usize::from(self.short_len.is_some())
    }

    /// Index of the pool file's length unit (meaningful when `short_len` is set): after
    /// the pool's and the write-ahead file's units.
    pub fn short_unit(&self) -> u32 {
        (self.units.len() + self.file.as_ref().map_or(0, |f| f.units.len())) as u32
    }
}

/// A simulated persistent medium. Cheap to clone: clones share the same memory, so a test
/// keeps a handle while the pool owns another.
#[derive(Clone, Debug)]
pub struct SimMedia {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Always `Some` until dropped (then handed to the spare list).
    reservation: Option<Reservation>,
    base: NonNull<u8>,
    capacity: u64,
    len: AtomicU64,
    state: Mutex<State>,
    shadow: Option<Shadow>,
}

// SAFETY: `base` points into `reservation`, which is Send + Sync; every access to the bytes
// behind it goes through the methods of `SimMedia`, whose callers are single-threaded
// workloads (crate docs) or hold the state lock.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

/// Most recycled reservations kept per thread.
const SPARES_MAX: usize = 8;

thread_local! {
    /// Reservations of dropped media with the bytes they had mapped: mapping fresh memory for
    /// every crash image costs a page fault per page, recycling costs a `memset`.
    static SPARES: std::cell::RefCell<Vec<(Reservation, u64)>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Drop for Inner {
    fn drop(&mut self) {
        let mapped = self
            .state
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .mapped;
        if let Some(reservation) = self.reservation.take() {
            SPARES.with(|s| {
                let mut spares = s.borrow_mut();
                if spares.len() < SPARES_MAX {
                    spares.push((reservation, mapped));
                }
            });
        }
    }
}

fn reservation(capacity: u64) -> (Reservation, u64) {
    let capacity = capacity.next_multiple_of(PAGE_SIZE);
    let spare = SPARES.with(|s| {
        let mut spares = s.borrow_mut();
        let found = spares.iter().position(|(r, _)| r.capacity() == capacity);
        found.map(|i| spares.swap_remove(i))
    });
    spare.unwrap_or_else(|| {
        (
            Reservation::new(capacity).expect("reserving address space for a simulated medium"),
            0,
        )
    })
}

/// A simulated write-ahead file: what the program wrote (the page cache) and what is durable.
#[derive(Debug)]
struct FileState {
    volatile: Vec<u8>,
    durable: Vec<u8>,
    /// Shared copy of `durable` handed to crash points; `None` after `durable` changed.
    shared: Option<Arc<Vec<u8>>>,
    syncs: u64,
}

impl FileState {
    fn new(image: Option<&[u8]>, len: u64) -> FileState {
        let mut durable = image.map(<[u8]>::to_vec).unwrap_or_default();
        durable.resize(len as usize, 0);
        FileState {
            volatile: durable.clone(),
            durable,
            shared: None,
            syncs: 0,
        }
    }

    /// The file's part of a crash point: pending words grouped by sector.
    fn point(&mut self) -> FilePoint {
        let durable = match &self.shared {
            Some(shared) => Arc::clone(shared),
            None => {
                let shared = Arc::new(self.durable.clone());
                self.shared = Some(Arc::clone(&shared));
                shared
            }
        };
        let mut words = Vec::new();
        let mut units: Vec<Range<u32>> = Vec::new();
        let mut last_sector = u64::MAX;
        let sectors = self.volatile.chunks_exact(SECTOR as usize);
        for (index, (now, then)) in sectors
            .zip(self.durable.chunks_exact(SECTOR as usize))
            .enumerate()
        {
            if now == then {
                continue;
            }
            for (w, (a, b)) in now
                .chunks_exact(WORD)
                .zip(then.chunks_exact(WORD))
                .enumerate()
            {
                if a != b {
                    words.push(Word {
                        offset: (index * SECTOR as usize + w * WORD) as u64,
                        new: le64(a),
                        old: le64(b),
                    });
                    let end = words.len() as u32;
                    match units.last_mut() {
                        Some(unit) if last_sector == index as u64 => unit.end = end,
                        _ => units.push(end - 1..end),
                    }
                    last_sector = index as u64;
                }
            }
        }
        FilePoint {
            durable,
            words,
            units,
        }
    }
}

#[derive(Debug)]
struct State {
    options: SimOptions,
    /// The durable image; always `len` bytes long.
    durable: Vec<u8>,
    /// Shared copy of `durable` handed to crash points; `None` after `durable` changed.
    durable_shared: Option<Arc<Vec<u8>>>,
    /// Bytes mapped read-write from the start of the reservation (may exceed the length
    /// when the reservation was recycled; those bytes are stale until grown into).
    mapped: u64,
    /// Snapshots taken by flushes and not yet fenced, in flush order (a later snapshot of
    /// the same line wins), each with the flushing thread ([`thread_key`]): a fence writes
    /// back only its own thread's (`sfence` orders the issuing CPU's flushes; another
    /// thread's stay pending, so a crash may keep or lose them like any other pending unit).
    flushed: Vec<(u64, u64, u64, [u8; LINE])>,
    /// Per line, the flush index of the snapshot last written into the durable image: a
    /// fence skips its own thread's older snapshot of a line that another thread's fence
    /// already made durable from a later one (the cache writes back the line's current
    /// contents, so durable bytes never go back in time). One thread's own snapshots are
    /// applied in flush order, so single-threaded runs never skip one.
    versions: std::collections::HashMap<u64, u64>,
    /// [`Medium::PageCache`]: pages named by flushes since the last fence (page offsets).
    msync: Vec<u64>,
    /// [`Medium::PageCache`]: the file length a crash keeps (the volatile length once a
    /// fence follows the growth).
    durable_len: u64,
    /// [`Medium::PagePrivate`]: the file as written (durable image plus writes not yet
    /// synced); a crash keeps any subset of its sectors that differ from `durable`.
    written: Vec<u8>,
    /// [`Medium::PagePrivate`]: byte ranges named by flushes since the last fence.
    through: Vec<(u64, u64)>,
    /// [`Medium::PagePrivate`]: syncs of the file through [`Media::backing`].
    pool_syncs: u64,
    /// The write-ahead file, if [`SimOptions::wal_bytes`] is set.
    file: Option<FileState>,
    flushes: u64,
    fences: u64,
    grows: u64,
    acked: usize,
    points: Vec<CrashPoint>,
}

impl SimMedia {
    /// An empty medium (length 0) that may grow to `capacity` bytes, strict mode, not
    /// recording. `Pool::create_on` grows it to the pool size.
    ///
    /// # Panics
    /// If `capacity` bytes of address space cannot be reserved (a test environment problem).
    pub fn new(capacity: u64) -> SimMedia {
        SimMedia::with_options(capacity, SimOptions::default())
    }

    /// An empty medium with `options`.
    ///
    /// # Panics
    /// As [`SimMedia::new`].
    pub fn with_options(capacity: u64, options: SimOptions) -> SimMedia {
        let (reservation, mapped) = reservation(capacity);
        let state = State {
            options,
            durable: Vec::new(),
            durable_shared: None,
            mapped,
            flushed: Vec::new(),
            versions: std::collections::HashMap::new(),
            msync: Vec::new(),
            durable_len: 0,
            written: Vec::new(),
            through: Vec::new(),
            pool_syncs: 0,
            file: (options.wal_bytes > 0).then(|| FileState::new(None, options.wal_bytes)),
            flushes: 0,
            fences: 0,
            grows: 0,
            acked: 0,
            points: Vec::new(),
        };
        let inner = Inner {
            base: reservation.base(),
            capacity: reservation.capacity(),
            reservation: Some(reservation),
            len: AtomicU64::new(0),
            state: Mutex::new(state),
            shadow: options.shadow.then(|| Shadow::new(options.record)),
        };
        SimMedia {
            inner: Arc::new(inner),
        }
    }

    /// A medium whose volatile view and durable image both hold `image` (as after a reboot):
    /// length `image.len()` rounded up to a page (zero-padded), capacity at least that.
    ///
    /// # Panics
    /// As [`SimMedia::new`].
    pub fn from_image(image: &[u8], capacity: u64, options: SimOptions) -> SimMedia {
        SimMedia::from_images(image, None, capacity, options)
    }

    /// Like [`SimMedia::from_image`], with a write-ahead file (if `options.wal_bytes` is
    /// set) holding `file` (zero-padded; zero if `None`) in both views.
    ///
    /// # Panics
    /// As [`SimMedia::new`].
    pub fn from_images(
        image: &[u8],
        file: Option<&[u8]>,
        capacity: u64,
        options: SimOptions,
    ) -> SimMedia {
        let len = (image.len() as u64).next_multiple_of(PAGE_SIZE);
        let media = SimMedia::with_options(capacity.max(len), options);
        {
            let mut st = media.state();
            if options.wal_bytes > 0 {
                st.file = Some(FileState::new(file, options.wal_bytes));
            }
            media
                .map(&mut st, 0, len)
                .expect("mapping simulated memory");
            st.durable = image.to_vec();
            st.durable.resize(len as usize, 0);
            st.durable_len = len;
            if options.medium == Medium::PagePrivate {
                st.written = st.durable.clone();
            }
            // SAFETY: `0..len` is mapped read-write (and zeroed) and nothing else refers to
            // it yet; `image` is a separate Rust slice of at most `len` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(image.as_ptr(), media.base().as_ptr(), image.len())
            };
        }
        media.inner.len.store(len, Ordering::Release);
        media
    }

    /// A new medium holding only this one's durable image: what a reboot after a crash that
    /// lost every pending unit would find. Not recording.
    pub fn crash(&self) -> SimMedia {
        let st = self.state();
        let len = (st.durable_len as usize).min(st.durable.len());
        SimMedia::from_images(
            &st.durable[..len],
            st.file.as_ref().map(|f| f.durable.as_slice()),
            self.capacity(),
            SimOptions {
                record: false,
                ..st.options
            },
        )
    }

    /// A copy of the durable image (on [`Medium::PageCache`], as long as the durable
    /// length of the file).
    pub fn durable_image(&self) -> Vec<u8> {
        let st = self.state();
        let len = (st.durable_len as usize).min(st.durable.len());
        st.durable[..len].to_vec()
    }

    /// A copy of the volatile view (what the program sees).
    pub fn volatile_image(&self) -> Vec<u8> {
        let _st = self.state();
        self.volatile().to_vec()
    }

    /// Flush calls so far (including [`Media::copy_nodrain`]).
    pub fn flushes(&self) -> u64 {
        self.state().flushes
    }

    /// Fence calls so far.
    pub fn fences(&self) -> u64 {
        self.state().fences
    }

    /// Pending 8-byte words right now (volatile differs from durable).
    pub fn pending_words(&self) -> usize {
        let st = self.state();
        self.pending(&st).0.len()
    }

    /// Start or stop recording crash points.
    pub fn set_recording(&self, record: bool) {
        self.state().options.record = record;
    }

    /// The write-ahead file beside this medium, if it has one ([`SimOptions::wal_bytes`]).
    pub fn wal(&self) -> Option<SimWal> {
        self.state().file.as_ref().map(|_| SimWal {
            media: self.clone(),
        })
    }

    /// The shadow replica of this medium, if it keeps one ([`SimOptions::shadow`]).
    pub fn shadow(&self) -> Option<&Shadow> {
        self.inner.shadow.as_ref()
    }

    /// Tell the simulator that an operation was acknowledged; records a crash point.
    pub fn mark_ack(&self) {
        if let Some(shadow) = &self.inner.shadow {
            shadow.mark_ack();
        }
        let mut st = self.state();
        st.acked += 1;
        let n = st.acked;
        self.record(&mut st, PointKind::Ack(n));
    }

    /// Record the final crash point of a run.
    pub fn mark_end(&self) {
        let mut st = self.state();
        self.record(&mut st, PointKind::End);
    }

    /// Take the crash points recorded so far.
    pub fn take_points(&self) -> Vec<CrashPoint> {
        std::mem::take(&mut self.state().points)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make `from..to` mapped and zero (`from` is the current length).
    fn map(&self, st: &mut State, from: u64, to: u64) -> Result<(), MediaError> {
        let stale_end = st.mapped.min(to);
        if from < stale_end {
            // SAFETY: `from..stale_end` lies in the mapped part of our reservation and beyond
            // the medium's length, so the program holds no reference into it.
            unsafe {
                std::ptr::write_bytes(
                    self.base().as_ptr().add(from as usize),
                    0,
                    (stale_end - from) as usize,
                )
            };
        }
        if to > st.mapped {
            let start = st.mapped.max(from);
            let reservation = self
                .inner
                .reservation
                .as_ref()
                .expect("reservation present while the medium lives");
            reservation
                .map_anonymous(start, to - start)
                .map_err(|e| MediaError::io("mmap", e))?;
            st.mapped = to;
        }
        Ok(())
    }

    /// The volatile view. Callers hold the state lock, so no simulator call changes the
    /// length meanwhile; workloads are single-threaded (see the crate docs), so the program
    /// does not store into it meanwhile either.
    fn volatile(&self) -> &[u8] {
        let len = self.inner.len.load(Ordering::Acquire) as usize;
        // SAFETY: `base..base+len` is mapped read-write for the life of `inner` (mappings are
        // only ever added); see above for why no store races with this read.
        unsafe { std::slice::from_raw_parts(self.base().as_ptr(), len) }
    }

    /// Every word where the volatile view differs from the durable image, and the units
    /// (the pending words of one unit of the granularity, together).
    fn pending(&self, st: &State) -> (Vec<Word>, Vec<Range<u32>>) {
        let volatile = if st.options.medium == Medium::PagePrivate {
            &st.written[..]
        } else {
            self.volatile()
        };
        let unit_bytes = st.options.granularity.unit_bytes();
        let mut words = Vec::new();
        let mut units: Vec<Range<u32>> = Vec::new();
        let mut unit_of_last = u64::MAX;
        let lines = volatile
            .chunks_exact(LINE)
            .zip(st.durable.chunks_exact(LINE));
        for (index, (now, then)) in lines.enumerate() {
            if now == then {
                continue;
            }
            for (w, (a, b)) in now
                .chunks_exact(WORD)
                .zip(then.chunks_exact(WORD))
                .enumerate()
            {
                if a != b {
                    let offset = (index * LINE + w * WORD) as u64;
                    words.push(Word {
                        offset,
                        new: le64(a),
                        old: le64(b),
                    });
                    let end = words.len() as u32;
                    let unit = offset / unit_bytes;
                    match units.last_mut() {
                        Some(last) if unit == unit_of_last => last.end = end,
                        _ => units.push(end - 1..end),
                    }
                    unit_of_last = unit;
                }
            }
        }
        (words, units)
    }

    fn record(&self, st: &mut State, kind: PointKind) {
        if !st.options.record {
            return;
        }
        let (words, units) = self.pending(st);
        let durable = match &st.durable_shared {
            Some(shared) => Arc::clone(shared),
            None => {
                let shared = Arc::new(st.durable.clone());
                st.durable_shared = Some(Arc::clone(&shared));
                shared
            }
        };
        let acked = st.acked;
        let short_len = (st.options.medium.is_file() && st.durable_len < durable.len() as u64)
            .then_some(st.durable_len);
        let file = st.file.as_mut().map(FileState::point);
        st.points.push(CrashPoint {
            kind,
            acked,
            durable,
            words,
            units,
            short_len,
            file,
        });
    }

    /// [`Medium::PageCache`]'s fence: the pages named since the previous one take their
    /// current contents in the durable image, and the file's length becomes durable.
    fn msync(&self, st: &mut State) {
        let mut pages = std::mem::take(&mut st.msync);
        pages.sort_unstable();
        pages.dedup();
        let len = self.len();
        let volatile = self.volatile();
        let mut changed = st.durable_len != len;
        for page in pages.iter().map(|&p| p as usize) {
            let end = (page + PAGE_SIZE as usize).min(volatile.len());
            if st.durable[page..end] != volatile[page..end] {
                st.durable[page..end].copy_from_slice(&volatile[page..end]);
                changed = true;
            }
        }
        st.durable_len = len;
        if changed {
            st.durable_shared = None;
        }
        pages.clear();
        st.msync = pages;
    }

    /// [`Medium::PagePrivate`]: the file synced: everything written to it is durable, and
    /// so is its length.
    fn sync_written(&self, st: &mut State) {
        if st.durable != st.written {
            let State {
                durable, written, ..
            } = st;
            durable.copy_from_slice(written);
            st.durable_shared = None;
        }
        st.durable_len = self.len();
    }

    fn assert_range(&self, offset: u64, len: u64) {
        let end = offset.checked_add(len);
        assert!(
            end.is_some_and(|end| end <= self.len()),
            "simulated media range {offset}+{len} outside the medium of {} bytes",
            self.len()
        );
    }
}

/// The thread a flush or fence comes from: the OS thread, or under `--cfg mnemo_shuttle`
/// the shuttle task (shuttle runs every task of a test on one OS thread).
fn thread_key() -> u64 {
    #[cfg(mnemo_shuttle)]
    if let Some(task) = shuttle::current::try_get_current_task() {
        return (1 << 63) | usize::from(task) as u64;
    }
    thread_local! {
        static KEY: u64 = {
            static NEXT: AtomicU64 = AtomicU64::new(1);
            NEXT.fetch_add(1, Ordering::Relaxed)
        };
    }
    KEY.with(|k| *k)
}

fn le64(bytes: &[u8]) -> u64 {
    let mut b = [0u8; WORD];
    b.copy_from_slice(bytes);
    u64::from_le_bytes(b)
}

impl Media for SimMedia {
    fn base(&self) -> NonNull<u8> {
        self.inner.base
    }

    fn len(&self) -> u64 {
        self.inner.len.load(Ordering::Acquire)
    }

    fn capacity(&self) -> u64 {
        self.inner.capacity
    }

    /// Growth is atomic: the new bytes are zero in both views. On [`Medium::Pmem`] it is
    /// immediately durable (a real file's new length needs the file system's own journal;
    /// that is below this model). On [`Medium::PageCache`] the new length is durable only at
    /// the next fence (`msync` persists the length the synced data needs): a crash before
    /// it may find the file at its old length.
    fn grow(&self, new_len: u64) -> Result<(), MediaError> {
        let mut st = self.state();
        let old_len = self.len();
        if new_len <= old_len {
            return Ok(());
        }
        if new_len > self.capacity() {
            return Err(MediaError::CapacityExceeded {
                requested: new_len,
                capacity: self.capacity(),
            });
        }
        let new_len = new_len.next_multiple_of(PAGE_SIZE);
        let n = st.grows;
        self.record(&mut st, PointKind::Grow(n));
        st.grows += 1;
        self.map(&mut st, old_len, new_len)?;
        st.durable.resize(new_len as usize, 0);
        if st.options.medium == Medium::PagePrivate {
            st.written.resize(new_len as usize, 0);
        }
        st.durable_shared = None;
        if st.options.medium == Medium::Pmem {
            st.durable_len = new_len;
        }
        self.inner.len.store(new_len, Ordering::Release);
        Ok(())
    }

    fn ensure_backed(&self, offset: u64, len: u64) -> Result<(), MediaError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.capacity() => Ok(()),
            _ => Err(MediaError::CapacityExceeded {
                requested: offset.saturating_add(len),
                capacity: self.capacity(),
            }),
        }
    }

    fn flush(&self, offset: u64, len: u64) {
        self.assert_range(offset, len);
        let mut st = self.state();
        let n = st.flushes;
        if st.options.points_at_flush {
            self.record(&mut st, PointKind::Flush(n));
        }
        st.flushes += 1;
        if st.options.drop_flush == Some(n) || len == 0 {
            return;
        }
        if st.options.medium == Medium::PagePrivate {
            st.through.push((offset, len));
            return;
        }
        if st.options.medium == Medium::PageCache {
            // msync works on whole pages: name every page the range touches.
            let first = offset - offset % PAGE_SIZE;
            let end = (offset + len).next_multiple_of(PAGE_SIZE).min(self.len());
            st.msync.extend((first..end).step_by(PAGE_SIZE as usize));
            return;
        }
        let first = offset - offset % CACHE_LINE;
        let end = (offset + len).next_multiple_of(CACHE_LINE).min(self.len());
        let volatile = self.volatile();
        let key = thread_key();
        for line in (first..end).step_by(LINE) {
            let mut snap = [0u8; LINE];
            snap.copy_from_slice(&volatile[line as usize..line as usize + LINE]);
            st.flushed.push((key, n, line, snap));
        }
    }

    fn drain(&self) -> Result<(), MediaError> {
        let mut st = self.state();
        let n = st.fences;
        self.record(&mut st, PointKind::Fence(n));
        st.fences += 1;
        if st.options.drop_fence == Some(n) {
            return Ok(());
        }
        if st.options.medium == Medium::PageCache {
            self.msync(&mut st);
            return Ok(());
        }
        if st.options.medium == Medium::PagePrivate {
            // The named ranges written through, then the file synced (its length too).
            let through = std::mem::take(&mut st.through);
            let volatile = self.volatile();
            for (offset, len) in through {
                let (a, b) = (offset as usize, (offset + len) as usize);
                st.written[a..b].copy_from_slice(&volatile[a..b]);
            }
            self.sync_written(&mut st);
            return Ok(());
        }
        let key = thread_key();
        let mut flushed = std::mem::take(&mut st.flushed);
        if flushed.iter().any(|&(k, _, _, _)| k == key) {
            st.durable_shared = None;
        }
        for &(_, index, line, ref snap) in flushed.iter().filter(|&&(k, _, _, _)| k == key) {
            let version = st.versions.entry(line).or_insert(0);
            if *version > index {
                continue;
            }
            *version = index;
            st.durable[line as usize..line as usize + LINE].copy_from_slice(snap);
        }
        flushed.retain(|&(k, _, _, _)| k != key);
        st.flushed = flushed;
        Ok(())
    }

    fn copy_nodrain(&self, offset: u64, src: &[u8]) {
        self.assert_range(offset, src.len() as u64);
        {
            let _st = self.state();
            // SAFETY: the destination lies within the mapped medium (asserted above); `src` is
            // a Rust slice and cannot alias the simulated memory mutably.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr(),
                    self.base().as_ptr().add(offset as usize),
                    src.len(),
                )
            };
        }
        self.flush(offset, src.len() as u64);
    }

    fn private(&self) -> bool {
        self.state().options.medium == Medium::PagePrivate
    }

    fn backing(&self) -> Option<Arc<dyn mnemo_pmem::LogFile>> {
        self.private().then(|| {
            Arc::new(SimBacking {
                media: self.clone(),
            }) as Arc<dyn mnemo_pmem::LogFile>
        })
    }

    fn write_back_all(&self) -> Result<(), MediaError> {
        let mut st = self.state();
        if st.options.medium != Medium::PagePrivate {
            drop(st);
            self.flush(0, self.len());
            return self.drain();
        }
        let n = st.fences;
        self.record(&mut st, PointKind::Fence(n));
        st.fences += 1;
        let volatile = self.volatile();
        let len = volatile.len();
        st.written[..len].copy_from_slice(volatile);
        st.through.clear();
        self.sync_written(&mut st);
        Ok(())
    }

    fn info(&self) -> MediaInfo {
        if self.state().options.medium == Medium::PagePrivate {
            return MediaInfo {
                kind: MediaKind::PageCache,
                durability: Durability::Msync,
                flush: FlushKind::Clwb,
                reason: "simulated page-cache file mapped copy-on-write (mnemo-testkit): \
                         the file changes only when written to; unsynced writes torn at \
                         sectors"
                    .into(),
            };
        }
        if self.state().options.medium == Medium::PageCache {
            return MediaInfo {
                kind: MediaKind::PageCache,
                durability: Durability::Msync,
                flush: FlushKind::Clwb,
                reason: "simulated page-cache file (mnemo-testkit): flush names pages, fence \
                         msyncs them; other dirty pages written back at any time, torn at sectors"
                    .into(),
            };
        }
        MediaInfo {
            kind: MediaKind::Simulated,
            durability: Durability::CpuFlush,
            flush: FlushKind::Clwb,
            reason:
                "simulated medium (mnemo-testkit): flush snapshots lines, fence makes them durable"
                    .into(),
        }
    }
}

/// The simulated write-ahead file of a [`SimMedia`] ([`SimOptions::wal_bytes`]), as
/// `mnemo_pmem::WalPolicy` uses it. Reads see every write; a sync makes every write durable
/// (a crash point is recorded just before it takes effect).
#[derive(Clone, Debug)]
pub struct SimWal {
    media: SimMedia,
}

impl SimWal {
    fn with<R>(&self, f: impl FnOnce(&mut FileState) -> R) -> R {
        let mut st = self.media.state();
        f(st.file.as_mut().expect("a medium with a write-ahead file"))
    }

    fn check(&self, offset: u64, len: usize) -> Result<(), MediaError> {
        let size = self.with(|f| f.volatile.len() as u64);
        match offset.checked_add(len as u64) {
            Some(end) if end <= size => Ok(()),
            _ => Err(MediaError::io(
                "write-ahead file access",
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("{offset}+{len} beyond the file's {size} bytes"),
                ),
            )),
        }
    }
}

impl mnemo_pmem::LogFile for SimWal {
    fn len(&self) -> u64 {
        self.with(|f| f.volatile.len() as u64)
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), MediaError> {
        self.check(offset, out.len())?;
        self.with(|f| {
            out.copy_from_slice(&f.volatile[offset as usize..offset as usize + out.len()])
        });
        Ok(())
    }

    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), MediaError> {
        self.check(offset, bytes.len())?;
        self.with(|f| {
            f.volatile[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes)
        });
        Ok(())
    }

    fn sync(&self) -> Result<(), MediaError> {
        let mut st = self.media.state();
        let n = st.file.as_ref().map_or(0, |f| f.syncs);
        self.media.record(&mut st, PointKind::FileSync(n));
        let file = st.file.as_mut().expect("a medium with a write-ahead file");
        file.syncs += 1;
        if file.durable != file.volatile {
            file.durable.copy_from_slice(&file.volatile);
            file.shared = None;
        }
        Ok(())
    }
}

/// The pool file behind a [`Medium::PagePrivate`] medium ([`Media::backing`]): writes go
/// to the file, not to memory; a sync makes them durable (a crash point is recorded just
/// before it takes effect).
#[derive(Clone, Debug)]
struct SimBacking {
    media: SimMedia,
}

impl mnemo_pmem::LogFile for SimBacking {
    fn len(&self) -> u64 {
        self.media.len()
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> Result<(), MediaError> {
        let st = self.media.state();
        let range = offset as usize..offset as usize + out.len();
        let bytes = st.written.get(range).ok_or_else(|| {
            MediaError::io(
                "pool file read",
                std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            )
        })?;
        out.copy_from_slice(bytes);
        Ok(())
    }

    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), MediaError> {
        let mut st = self.media.state();
        let range = offset as usize..offset as usize + bytes.len();
        let into = st.written.get_mut(range).ok_or_else(|| {
            MediaError::io(
                "pool file write",
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("{offset}+{} beyond the pool file", bytes.len()),
                ),
            )
        })?;
        into.copy_from_slice(bytes);
        Ok(())
    }

    fn sync(&self) -> Result<(), MediaError> {
        let mut st = self.media.state();
        let n = st.pool_syncs;
        self.media.record(&mut st, PointKind::PoolSync(n));
        st.pool_syncs += 1;
        self.media.sync_written(&mut st);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(m: &SimMedia, offset: u64, bytes: &[u8]) {
        assert!(offset + bytes.len() as u64 <= m.len());
        // SAFETY: in range (asserted), single-threaded test.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                m.base().as_ptr().add(offset as usize),
                bytes.len(),
            )
        };
    }

    #[test]
    fn a_fence_writes_back_only_its_own_threads_flushes_and_never_an_older_line() {
        let m = SimMedia::new(1 << 20);
        m.grow(PAGE_SIZE).unwrap();
        // This thread flushes word 0 of a line; another thread's fence does not persist it.
        store(&m, 0, &[1; 8]);
        m.flush(0, 8);
        std::thread::scope(|s| {
            s.spawn(|| m.drain().unwrap());
        });
        assert_eq!(m.durable_image()[0..8], [0; 8], "another thread's fence");
        // Another thread stores word 8 of the same line, flushes and fences it: its later
        // snapshot holds both words.
        std::thread::scope(|s| {
            s.spawn(|| {
                store(&m, 8, &[2; 8]);
                m.flush(8, 8);
                m.drain().unwrap();
            });
        });
        assert_eq!(m.durable_image()[0..16], [[1; 8], [2; 8]].concat());
        // This thread's fence now finds its own, older snapshot of the line (word 8 still 0
        // in it): the durable line must not go back.
        m.drain().unwrap();
        assert_eq!(m.durable_image()[0..16], [[1; 8], [2; 8]].concat());
        assert_eq!(m.pending_words(), 0);
    }

    #[test]
    fn flush_then_fence_makes_durable() {
        let m = SimMedia::new(1 << 20);
        m.grow(PAGE_SIZE).unwrap();
        store(&m, 8, &[1; 8]);
        assert_eq!(m.pending_words(), 1);
        m.drain().unwrap();
        assert_eq!(
            m.pending_words(),
            1,
            "a fence without a flush persists nothing"
        );
        m.flush(8, 8);
        store(&m, 16, &[2; 8]);
        m.drain().unwrap();
        assert_eq!(m.durable_image()[8..16], [1; 8]);
        assert_eq!(
            m.durable_image()[16..24],
            [0; 8],
            "stored after the flush snapshot"
        );
        assert_eq!(m.pending_words(), 1);
    }

    #[test]
    fn points_record_pending_words() {
        let m = SimMedia::with_options(
            1 << 20,
            SimOptions {
                record: true,
                ..SimOptions::default()
            },
        );
        m.grow(PAGE_SIZE).unwrap();
        store(&m, 0, &[9; 24]);
        m.flush(0, 24);
        m.drain().unwrap();
        let points = m.take_points();
        assert_eq!(points.len(), 2);
        assert_eq!(points[1].kind, PointKind::Fence(0));
        assert_eq!(points[1].words.len(), 3);
        assert_eq!(points[1].units.len(), 3);
    }

    #[test]
    fn flush_points_see_values_overwritten_before_the_fence() {
        let options = SimOptions {
            record: true,
            points_at_flush: true,
            ..SimOptions::default()
        };
        let m = SimMedia::with_options(1 << 20, options);
        m.grow(PAGE_SIZE).unwrap();
        store(&m, 0, &[1; 8]);
        m.flush(0, 8);
        store(&m, 0, &[2; 8]);
        m.flush(0, 8);
        m.drain().unwrap();
        let points = m.take_points();
        let news: Vec<u64> = points
            .iter()
            .flat_map(|p| p.words.iter().map(|w| w.new))
            .collect();
        assert_eq!(points[1].kind, PointKind::Flush(0));
        assert!(
            news.contains(&u64::from_le_bytes([1; 8])),
            "the overwritten value is seen"
        );
    }

    #[test]
    fn line_granularity_groups_words() {
        let options = SimOptions {
            record: true,
            granularity: Granularity::Line,
            ..SimOptions::default()
        };
        let m = SimMedia::with_options(1 << 20, options);
        m.grow(PAGE_SIZE).unwrap();
        store(&m, 0, &[9; 80]);
        m.mark_end();
        let p = &m.take_points()[1];
        assert_eq!(p.words.len(), 10);
        assert_eq!(p.units, vec![0..8, 8..10]);
    }

    #[test]
    fn dropped_flush_and_fence() {
        let m = SimMedia::with_options(
            1 << 20,
            SimOptions {
                drop_flush: Some(0),
                ..SimOptions::default()
            },
        );
        m.grow(PAGE_SIZE).unwrap();
        store(&m, 0, &[1; 8]);
        m.flush(0, 8);
        m.drain().unwrap();
        assert_eq!(m.pending_words(), 1);
        let m = SimMedia::with_options(
            1 << 20,
            SimOptions {
                drop_fence: Some(0),
                ..SimOptions::default()
            },
        );
        m.grow(PAGE_SIZE).unwrap();
        store(&m, 0, &[1; 8]);
        m.flush(0, 8);
        m.drain().unwrap();
        assert_eq!(m.pending_words(), 1);
        m.drain().unwrap();
        assert_eq!(
            m.pending_words(),
            0,
            "the next fence persists the earlier flush"
        );
    }

    fn page_cache(granularity: Granularity, wal_bytes: u64) -> SimMedia {
        SimMedia::with_options(
            1 << 20,
            SimOptions {
                medium: Medium::PageCache,
                granularity,
                record: true,
                wal_bytes,
                ..SimOptions::default()
            },
        )
    }

    #[test]
    fn page_cache_fence_syncs_the_named_pages_whole() {
        let m = page_cache(Granularity::Sector, 0);
        m.grow(4 * PAGE_SIZE).unwrap();
        assert_eq!(m.info().kind, MediaKind::PageCache);
        store(&m, 8, &[1; 8]);
        store(&m, PAGE_SIZE + 8, &[2; 8]);
        store(&m, 3 * PAGE_SIZE, &[3; 8]);
        // msync of 16 bytes of page 0 persists all of page 0, nothing else.
        m.flush(0, 16);
        store(&m, 100, &[4; 8]);
        m.drain().unwrap();
        let image = m.durable_image();
        assert_eq!(image[8..16], [1; 8]);
        assert_eq!(image[100..108], [4; 8], "the page's contents at the fence");
        assert_eq!(image[PAGE_SIZE as usize + 8..][..8], [0; 8]);
        assert_eq!(m.pending_words(), 2);
        // A fence persists only what was named since the previous one.
        m.drain().unwrap();
        assert_eq!(m.pending_words(), 2);
    }

    #[test]
    fn page_cache_units_are_sectors_or_pages() {
        for (granularity, units) in [(Granularity::Sector, 3), (Granularity::Page, 2)] {
            let m = page_cache(granularity, 0);
            m.grow(2 * PAGE_SIZE).unwrap();
            m.drain().unwrap(); // the length durable: no length unit
            store(&m, 0, &[1; 16]); // sector 0 of page 0
            store(&m, 600, &[2; 8]); // sector 1 of page 0
            store(&m, PAGE_SIZE, &[3; 8]); // page 1
            m.mark_end();
            let point = m.take_points().pop().unwrap();
            assert_eq!(point.words.len(), 4);
            assert_eq!(point.units.len(), units, "{granularity:?}");
            assert_eq!(point.unit_count(), units);
        }
    }

    #[test]
    fn page_cache_length_is_durable_only_through_a_sync() {
        let m = page_cache(Granularity::Sector, 0);
        m.grow(PAGE_SIZE).unwrap();
        m.drain().unwrap();
        m.grow(3 * PAGE_SIZE).unwrap();
        store(&m, 2 * PAGE_SIZE, &[7; 8]);
        m.mark_end();
        let point = m.take_points().pop().unwrap();
        assert_eq!(point.short_len, Some(PAGE_SIZE));
        assert_eq!(point.unit_count(), point.units.len() + 1);
        assert_eq!(
            m.crash().len(),
            PAGE_SIZE,
            "a crash now finds the old length"
        );
        m.drain().unwrap();
        assert_eq!(m.crash().len(), 3 * PAGE_SIZE);
        m.mark_end();
        assert_eq!(m.take_points().pop().unwrap().short_len, None);
    }

    #[test]
    fn the_write_ahead_file_is_durable_only_after_its_sync() {
        use mnemo_pmem::LogFile;
        let m = page_cache(Granularity::Sector, 8192);
        m.grow(PAGE_SIZE).unwrap();
        m.drain().unwrap();
        let wal = m.wal().expect("a write-ahead file");
        assert_eq!(wal.len(), 8192);
        wal.write_at(0, &[9; 600]).unwrap();
        let mut back = [0u8; 600];
        wal.read_at(0, &mut back).unwrap();
        assert_eq!(back, [9; 600], "reads see the page cache");
        m.mark_end();
        let point = m.take_points().pop().unwrap();
        let file = point.file.as_ref().expect("the file's part");
        assert_eq!(file.units.len(), 2, "600 bytes span two sectors");
        assert_eq!(point.unit_count(), point.units.len() + 2);
        let crashed = m.crash();
        let mut lost = [1u8; 600];
        crashed.wal().unwrap().read_at(0, &mut lost).unwrap();
        assert_eq!(lost, [0; 600], "unsynced writes are lost");
        wal.sync().unwrap();
        let points = m.take_points();
        assert_eq!(points.last().map(|p| p.kind), Some(PointKind::FileSync(0)));
        m.crash().wal().unwrap().read_at(0, &mut lost).unwrap();
        assert_eq!(lost, [9; 600]);
        assert!(wal.write_at(8000, &[0; 400]).is_err(), "beyond the file");
    }

    #[test]
    fn base_is_stable_across_growth_and_images_round_trip() {
        let m = SimMedia::new(1 << 20);
        m.grow(PAGE_SIZE).unwrap();
        let base = m.base();
        m.grow(8 * PAGE_SIZE).unwrap();
        assert_eq!(base, m.base());
        store(&m, 5000, b"hello");
        m.copy_nodrain(6000, b"world");
        m.drain().unwrap();
        let c = m.crash();
        assert_eq!(c.len(), 8 * PAGE_SIZE);
        assert_eq!(&c.volatile_image()[6000..6005], b"world");
        assert_eq!(&c.volatile_image()[5000..5005], &[0; 5]);
        assert!(m.grow(2 << 20).is_err());
    }
}
