//! Crash exploration: run a workload once on a recording [`SimMedia`], then build crash
//! images at every recorded crash point and check each one ([`explore`]); replay one failing
//! image exactly ([`replay`]).

use std::collections::HashSet;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::rng::{mix64, SimRng};
use mnemo_pmem::SyncKind;

use crate::shadow::{Shadow, ShadowPoint};
use crate::sim::{CrashPoint, Granularity, Medium, PointKind, SimMedia, SimOptions};
use crate::workload::{Run, Workload};

/// How many images to test at one crash point.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    /// Enumerate every subset of the pending units when there are at most this many
    /// (2^12 = 4,096 images).
    pub exhaustive_max: u32,
    /// Above `exhaustive_max`: test every pair of units when there are at most this many
    /// units, else `pairs_sampled` seeded pairs.
    pub pairs_all_max: u32,
    /// Seeded pairs when there are too many units for all pairs.
    pub pairs_sampled: u32,
    /// Seeded random subsets (densities 1/8..7/8) on top of the fixed bundle.
    pub random: u32,
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling {
            exhaustive_max: 12,
            pairs_all_max: 64,
            pairs_sampled: 256,
            random: 256,
        }
    }
}

/// How to explore a workload.
#[derive(Clone, Debug)]
pub struct Config {
    /// Seed of the run (workload data) and of every sampled choice.
    pub seed: u64,
    /// The simulated medium: persistent memory, or a page-cache file (then use
    /// [`Granularity::Sector`] or [`Granularity::Page`]; [`Config::page_cache`]).
    pub medium: Medium,
    /// What a crash may tear.
    pub granularity: Granularity,
    /// Bytes of a simulated write-ahead file beside the pool (0: none); pools then sync
    /// through `mnemo_pmem::WalPolicy` ([`Config::write_ahead`]).
    pub wal_bytes: u64,
    /// Images per crash point.
    pub sampling: Sampling,
    /// One in this many images also gets crashes *during* its recovery (0: never).
    pub depth2_every: u32,
    /// Second-crash images tested per such recovery, at most.
    pub depth2_images: u32,
    /// One in this many images gets the follow-on workload after recovery (0: never).
    pub follow_on_every: u32,
    /// Worker threads checking images.
    pub threads: usize,
    /// A named mutant of `mnemo_pmem::mutant` (or of a later layer) switched on for the
    /// run and every recovery.
    pub mutant: Option<&'static str>,
    /// Simulator mutant: ignore the flush with this index during the run.
    pub drop_flush: Option<u64>,
    /// Simulator mutant: the fence with this index makes nothing durable during the run.
    pub drop_fence: Option<u64>,
    /// Also take crash points at every flush of the run (see
    /// [`SimOptions::points_at_flush`]). The workload's [`Workload::accept`] must then also
    /// accept the values an operation stores and overwrites before it is acknowledged.
    pub points_at_flush: bool,
    /// Stop at the first failure (mutant tests).
    pub stop_at_first_failure: bool,
    /// Keep at most this many failures in the report (all are counted).
    pub failures_kept: usize,
    /// Keep a shadow replica fed only by the run's sync points ([`crate::shadow`]) and
    /// check it after every sync point and at the end.
    pub shadow: bool,
}

impl Config {
    /// The defaults of a normal test run, with `seed`.
    pub fn new(seed: u64) -> Config {
        Config {
            seed,
            medium: Medium::Pmem,
            granularity: Granularity::Word,
            wal_bytes: 0,
            sampling: Sampling::default(),
            depth2_every: 16,
            depth2_images: 8,
            follow_on_every: 8,
            threads: 1,
            mutant: None,
            drop_flush: None,
            drop_fence: None,
            points_at_flush: false,
            stop_at_first_failure: false,
            failures_kept: 8,
            shadow: true,
        }
    }

    /// This configuration on a page-cache file ([`Medium::PageCache`]) whose pages a crash
    /// may tear at `granularity` ([`Granularity::Sector`]: the POSIX model; or
    /// [`Granularity::Page`]: whole pages, which explores their order with fewer images).
    #[must_use]
    pub fn page_cache(mut self, granularity: Granularity) -> Config {
        self.medium = Medium::PageCache;
        self.granularity = granularity;
        self
    }

    /// This configuration on a page-cache file at `granularity` ([`Config::page_cache`]),
    /// its pools syncing through the write-ahead policy (`mnemo_pmem::WalPolicy`) on a
    /// simulated write-ahead file of `wal_bytes` (small files make checkpoints frequent).
    #[must_use]
    pub fn write_ahead(self, granularity: Granularity, wal_bytes: u64) -> Config {
        let mut config = self.page_cache(granularity);
        config.wal_bytes = wal_bytes;
        config
    }

    /// [`Config::write_ahead`] with the pool mapped copy-on-write ([`Medium::PagePrivate`],
    /// as `FileMedia` maps a write-ahead pool with `MNEMO_WAL_PRIVATE=1`): the pool file
    /// changes only through writes (checkpoints, write-through).
    #[must_use]
    pub fn write_ahead_private(self, granularity: Granularity, wal_bytes: u64) -> Config {
        let mut config = self.write_ahead(granularity, wal_bytes);
        config.medium = Medium::PagePrivate;
        config
    }

    /// Like [`Config::new`], widened when `MNEMO_SOAK=1`: exhaustive up to 16 units, all
    /// pairs up to 256 units, 4,096 random cuts, depth-2 and follow-on on every image, crash
    /// points at every flush too.
    pub fn from_env(seed: u64) -> Config {
        let mut config = Config::new(seed);
        if soak() {
            config.sampling = Sampling {
                exhaustive_max: 16,
                pairs_all_max: 256,
                pairs_sampled: 4096,
                random: 4096,
            };
            config.depth2_every = 1;
            config.depth2_images = 32;
            config.follow_on_every = 1;
            config.points_at_flush = true;
        }
        config
    }
}

/// Whether the long soak mode is on (`MNEMO_SOAK=1`).
pub fn soak() -> bool {
    std::env::var("MNEMO_SOAK").is_ok_and(|v| v.trim() == "1")
}

/// Which pending units reach media in one crash image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Units whose bit is set (exhaustive enumeration; at most 64 units).
    Mask(u64),
    /// No pending unit survives.
    None,
    /// Every pending unit survives.
    All,
    /// Every unit but this one.
    AllBut(u32),
    /// Only this unit.
    Only(u32),
    /// Only these two units.
    Pair(u32, u32),
    /// Exactly these units (sorted).
    Set(Vec<u32>),
}

impl Cut {
    /// Whether unit `i` survives.
    pub fn keeps(&self, i: u32) -> bool {
        match self {
            Cut::Mask(m) => i < 64 && m & (1 << i) != 0,
            Cut::None => false,
            Cut::All => true,
            Cut::AllBut(j) => i != *j,
            Cut::Only(j) => i == *j,
            Cut::Pair(a, b) => i == *a || i == *b,
            Cut::Set(set) => set.binary_search(&i).is_ok(),
        }
    }
}

impl fmt::Display for Cut {
    /// Rust syntax, so a failure message can be pasted into [`replay`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cut::Mask(m) => write!(f, "Cut::Mask({m:#b})"),
            Cut::None => write!(f, "Cut::None"),
            Cut::All => write!(f, "Cut::All"),
            Cut::AllBut(j) => write!(f, "Cut::AllBut({j})"),
            Cut::Only(j) => write!(f, "Cut::Only({j})"),
            Cut::Pair(a, b) => write!(f, "Cut::Pair({a}, {b})"),
            Cut::Set(set) => write!(f, "Cut::Set(vec!{set:?})"),
        }
    }
}

/// The cuts tested at a point with `n` units, and whether they are every possible cut.
pub fn cuts(n: usize, sampling: &Sampling, rng: &mut SimRng) -> (Vec<Cut>, bool) {
    if n <= sampling.exhaustive_max.min(63) as usize {
        return ((0..1u64 << n).map(Cut::Mask).collect(), true);
    }
    let n32 = n as u32;
    let mut out = vec![Cut::None, Cut::All];
    out.extend((0..n32).map(Cut::AllBut));
    out.extend((0..n32).map(Cut::Only));
    if n <= sampling.pairs_all_max as usize {
        out.extend((0..n32).flat_map(|a| (a + 1..n32).map(move |b| Cut::Pair(a, b))));
    } else {
        for _ in 0..sampling.pairs_sampled {
            let a = rng.below(n as u64) as u32;
            let b = rng.below(n as u64 - 1) as u32;
            let b = if b >= a { b + 1 } else { b };
            out.push(Cut::Pair(a.min(b), a.max(b)));
        }
    }
    for k in 0..sampling.random {
        let density = f64::from(k % 7 + 1) / 8.0;
        out.push(Cut::Set((0..n32).filter(|_| rng.chance(density)).collect()));
    }
    (out, false)
}

/// One check that did not hold, with what is needed to replay it.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The workload's name.
    pub workload: String,
    /// The run's seed.
    pub seed: u64,
    /// Index of the crash point among the run's points (`None`: the run itself failed, or
    /// the failure is the shadow replica's).
    pub point: Option<usize>,
    /// The shadow replica failed after this sync point (its index and kind; index
    /// `u64::MAX`: the final check against the last acknowledged state).
    pub shadow: Option<(u64, SyncKind)>,
    /// Where the crash point was taken.
    pub kind: Option<PointKind>,
    /// Pending units at the point.
    pub units: usize,
    /// The cut.
    pub cut: Option<Cut>,
    /// The mutant in force, if any.
    pub mutant: Option<String>,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mutant = self
            .mutant
            .as_deref()
            .map(|m| format!(" mutant {m}"))
            .unwrap_or_default();
        if let Some((index, kind)) = self.shadow {
            let at = if index == u64::MAX {
                "at the end of the run".to_string()
            } else {
                format!("after sync point {index} ({kind:?})")
            };
            return write!(
                f,
                "shadow replica check failed: workload {} seed {:#x}{mutant}, the shadow {at}: {}\n  \
                 (a durable change that no sync point named, or a sync point that leaves a replica unrecoverable)",
                self.workload, self.seed, self.message
            );
        }
        match (self.point, self.kind, &self.cut) {
            (Some(point), Some(kind), Some(cut)) => write!(
                f,
                "crash check failed: workload {} seed {:#x}{mutant} point {point} ({kind}) with {} pending units, cut {cut}: {}\n  \
                 replay: mnemo_testkit::replay(&workload, &Config::new({:#x}), {point}, &{cut})",
                self.workload, self.seed, self.units, self.message, self.seed
            ),
            _ => write!(f, "workload {} seed {:#x}{mutant} failed: {}", self.workload, self.seed, self.message),
        }
    }
}

/// Figures of one exploration (or, merged, of many).
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Workloads explored (1 unless merged).
    pub runs: u64,
    /// Flush calls of the workload runs (not of recoveries).
    pub flushes: u64,
    /// Fences of the workload runs (not of recoveries).
    pub fences: u64,
    /// Acknowledged operations of the workload runs.
    pub acks: u64,
    /// Crash points recorded.
    pub crash_points: u64,
    /// Points whose every cut was tested.
    pub intervals_exhaustive: u64,
    /// Points where cuts were sampled.
    pub intervals_sampled: u64,
    /// Most pending units at one point.
    pub units_max: u64,
    /// Pending units at each crash point of the runs (for percentiles: large intervals are
    /// design smells).
    pub units: Vec<u32>,
    /// Distinct crash images recovered and checked.
    pub images_checked: u64,
    /// Images skipped because an identical one (same bytes, same model position) was checked.
    pub images_duplicate: u64,
    /// Images taken during a recovery and recovered again (depth 2).
    pub depth2_images: u64,
    /// Follow-on workloads run after recovery.
    pub follow_ons: u64,
    /// Sync points of the runs whose shadow replica was recovered and checked (plus one
    /// final check per run).
    pub shadow_checks: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Failures counted.
    pub failure_count: u64,
    /// The first failures, in full.
    pub failures: Vec<Failure>,
}

impl Report {
    /// Whether every check held.
    pub fn is_ok(&self) -> bool {
        self.failure_count == 0
    }

    /// Every crash image recovered: depth 1 plus depth 2.
    pub fn images_total(&self) -> u64 {
        self.images_checked + self.depth2_images
    }

    /// Crash images recovered per second of wall time.
    pub fn images_per_second(&self) -> f64 {
        self.images_total() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Add another report's figures to this one.
    pub fn merge(&mut self, other: &Report) {
        self.runs += other.runs;
        self.flushes += other.flushes;
        self.fences += other.fences;
        self.acks += other.acks;
        self.crash_points += other.crash_points;
        self.intervals_exhaustive += other.intervals_exhaustive;
        self.intervals_sampled += other.intervals_sampled;
        self.units_max = self.units_max.max(other.units_max);
        self.units.extend_from_slice(&other.units);
        self.images_checked += other.images_checked;
        self.images_duplicate += other.images_duplicate;
        self.depth2_images += other.depth2_images;
        self.follow_ons += other.follow_ons;
        self.shadow_checks += other.shadow_checks;
        self.elapsed += other.elapsed;
        self.failure_count += other.failure_count;
        let room = 8usize.saturating_sub(self.failures.len());
        self.failures
            .extend(other.failures.iter().take(room).cloned());
    }

    /// The `q`-quantile (0..=1) of pending units per crash point.
    pub fn units_quantile(&self, q: f64) -> u32 {
        let mut sorted = self.units.clone();
        sorted.sort_unstable();
        let at = ((sorted.len() as f64 - 1.0) * q.clamp(0.0, 1.0)).round() as usize;
        sorted.get(at).copied().unwrap_or(0)
    }

    /// One line of figures.
    pub fn summary(&self, label: &str) -> String {
        format!(
            "testkit {label}: {} runs, {} crash points ({} exhaustive, {} sampled; pending units p50 {} p99 {} max {}), \
             {} images checked (+{} depth-2 = {} total, {} duplicates skipped), {} follow-ons, {} shadow replicas checked, \
             {:.0} images/s, {:.2}s, {} failures",
            self.runs,
            self.crash_points,
            self.intervals_exhaustive,
            self.intervals_sampled,
            self.units_quantile(0.5),
            self.units_quantile(0.99),
            self.units_max,
            self.images_checked,
            self.depth2_images,
            self.images_total(),
            self.images_duplicate,
            self.follow_ons,
            self.shadow_checks,
            self.images_per_second(),
            self.elapsed.as_secs_f64(),
            self.failure_count
        )
    }

    /// Panic with every kept failure unless the report is clean (for tests).
    pub fn assert_ok(&self) {
        if !self.is_ok() {
            let list: Vec<String> = self.failures.iter().map(ToString::to_string).collect();
            panic!(
                "{} crash-check failures; first ones:\n{}",
                self.failure_count,
                list.join("\n")
            );
        }
    }
}

struct Recording<S> {
    points: Vec<CrashPoint>,
    shadow: Vec<ShadowPoint>,
    states: Vec<S>,
    error: Option<String>,
    flushes: u64,
    fences: u64,
}

/// Run `f` with `mutant` switched on (on this thread).
fn with_mutant<R>(mutant: Option<&'static str>, f: impl FnOnce() -> R) -> R {
    match mutant {
        Some(name) => mnemo_pmem::mutant::with(name, f),
        None => f(),
    }
}

/// Run `f`, turning a panic into an error message.
fn guard<R>(what: &str, f: impl FnOnce() -> Result<R, String>) -> Result<R, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result.map_err(|e| format!("{what}: {e}")),
        Err(panic) => {
            let text = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic".into());
            Err(format!("{what} panicked: {text}"))
        }
    }
}

fn record<W: Workload>(workload: &W, config: &Config) -> Recording<W::State> {
    let options = SimOptions {
        medium: config.medium,
        granularity: config.granularity,
        wal_bytes: config.wal_bytes,
        record: true,
        drop_flush: config.drop_flush,
        drop_fence: config.drop_fence,
        points_at_flush: config.points_at_flush,
        shadow: config.shadow,
    };
    let media = SimMedia::with_options(workload.capacity(), options);
    let mut run = Run::new(media.clone(), config.seed, workload.initial());
    let result = with_mutant(config.mutant, || {
        guard("workload run", || workload.run(&mut run))
    });
    media.mark_end();
    let (flushes, fences) = (media.flushes(), media.fences());
    Recording {
        points: media.take_points(),
        shadow: media.shadow().map(Shadow::take_points).unwrap_or_default(),
        states: run.into_states(),
        error: result.err(),
        flushes,
        fences,
    }
}

/// Hash of one word's contribution to an image hash (0 for a zero word, so sparse images
/// hash fast and the hash is a sum over words, updatable per changed word).
fn word_hash(offset: u64, value: u64) -> u64 {
    if value == 0 {
        0
    } else {
        mix64(value ^ mix64(offset.wrapping_add(1)))
    }
}

fn image_hash(bytes: &[u8]) -> u64 {
    let mut sum = mix64(bytes.len() as u64);
    for (i, w) in bytes.chunks_exact(8).enumerate() {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        sum = sum.wrapping_add(word_hash(i as u64 * 8, u64::from_le_bytes(b)));
    }
    sum
}

/// Overwrite the cut's words in `image` (and the write-ahead file's in `file`) with `new`
/// values (`apply`) or restore `old` ones.
pub(crate) fn set_cut(
    image: &mut [u8],
    file: Option<&mut [u8]>,
    point: &CrashPoint,
    cut: &Cut,
    apply: bool,
) {
    let set = |bytes: &mut [u8],
               words: &[crate::sim::Word],
               units: &[std::ops::Range<u32>],
               first: usize| {
        for (i, unit) in units.iter().enumerate() {
            if !cut.keeps((first + i) as u32) {
                continue;
            }
            for word in &words[unit.start as usize..unit.end as usize] {
                let value = if apply { word.new } else { word.old };
                let at = word.offset as usize;
                bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
            }
        }
    };
    set(image, &point.words, &point.units, 0);
    if let (Some(bytes), Some(f)) = (file, &point.file) {
        set(bytes, &f.words, &f.units, point.units.len());
    }
}

/// Bytes of the image a cut keeps: all of it, unless the file may be found short
/// ([`CrashPoint::short_len`]) and the cut drops its length unit.
pub(crate) fn cut_len(point: &CrashPoint, cut: &Cut) -> usize {
    match point.short_len {
        Some(short) if !cut.keeps(point.short_unit()) => short as usize,
        _ => point.durable.len(),
    }
}

fn cut_hash(point: &CrashPoint, cut: &Cut) -> u64 {
    let mut delta = mix64(cut_len(point, cut) as u64 ^ 0x5151_7e4e);
    for (i, unit) in point.units.iter().enumerate() {
        if cut.keeps(i as u32) {
            for w in &point.words[unit.start as usize..unit.end as usize] {
                delta = delta
                    .wrapping_add(word_hash(w.offset, w.new))
                    .wrapping_sub(word_hash(w.offset, w.old));
            }
        }
    }
    if let Some(f) = &point.file {
        // File words hash at offsets no pool word has.
        let first = point.units.len();
        for (i, unit) in f.units.iter().enumerate() {
            if cut.keeps((first + i) as u32) {
                for w in &f.words[unit.start as usize..unit.end as usize] {
                    let at = w.offset | 1 << 62;
                    delta = delta
                        .wrapping_add(word_hash(at, w.new))
                        .wrapping_sub(word_hash(at, w.old));
                }
            }
        }
    }
    delta
}

struct Shared<'a, W: Workload> {
    workload: &'a W,
    config: &'a Config,
    states: &'a [W::State],
    seen: Mutex<HashSet<u64>>,
    stop: AtomicBool,
    images: AtomicU64,
    duplicates: AtomicU64,
    depth2: AtomicU64,
    follow_ons: AtomicU64,
    shadow_checks: AtomicU64,
    exhaustive: AtomicU64,
    sampled: AtomicU64,
    failures: Mutex<(u64, Vec<Failure>)>,
}

impl<'a, W: Workload> Shared<'a, W> {
    /// Nothing checked yet: every counter at zero, no failure, not stopped.
    fn new(workload: &'a W, config: &'a Config, states: &'a [W::State]) -> Shared<'a, W> {
        Shared {
            workload,
            config,
            states,
            seen: Mutex::new(HashSet::new()),
            stop: AtomicBool::new(false),
            images: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            depth2: AtomicU64::new(0),
            follow_ons: AtomicU64::new(0),
            shadow_checks: AtomicU64::new(0),
            exhaustive: AtomicU64::new(0),
            sampled: AtomicU64::new(0),
            failures: Mutex::new((0, Vec::new())),
        }
    }

    fn fail(&self, failure: Failure) {
        let mut f = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        f.0 += 1;
        if f.1.len() < self.config.failures_kept {
            f.1.push(failure);
        }
        if self.config.stop_at_first_failure {
            self.stop.store(true, Ordering::Release);
        }
    }

    fn failure(
        &self,
        point: Option<(usize, &CrashPoint)>,
        cut: Option<Cut>,
        message: String,
    ) -> Failure {
        Failure {
            workload: self.workload.name(),
            seed: self.config.seed,
            point: point.map(|p| p.0),
            shadow: None,
            kind: point.map(|p| p.1.kind),
            units: point.map_or(0, |p| p.1.unit_count()),
            cut,
            mutant: self.config.mutant.map(str::to_string),
            message,
        }
    }

    fn model(&self, point: &CrashPoint) -> (&W::State, Option<&W::State>) {
        let acked = point.acked.min(self.states.len() - 1);
        (&self.states[acked], self.states.get(acked + 1))
    }

    /// Check the images of one point: in the quick pass only "nothing survives" and
    /// "everything survives" (most bugs show there, so a failure is found early), in the full
    /// pass every cut of [`cuts`] (those already checked are skipped as duplicates).
    fn explore_point(&self, index: usize, point: &CrashPoint, quick: bool) {
        let mut rng = SimRng::derive(self.config.seed, index as u64);
        let cuts = if quick {
            vec![Cut::None, Cut::All]
        } else {
            let (cuts, exhaustive) = cuts(point.unit_count(), &self.config.sampling, &mut rng);
            let counter = if exhaustive {
                &self.exhaustive
            } else {
                &self.sampled
            };
            counter.fetch_add(1, Ordering::Relaxed);
            cuts
        };
        let (acked, in_flight) = self.model(point);
        let file_hash = point.file.as_ref().map_or(0, |f| image_hash(&f.durable));
        let base = image_hash(&point.durable) ^ mix64(point.acked as u64 + 1) ^ mix64(file_hash);
        let mut image = point.durable.as_ref().clone();
        let mut file = point.file.as_ref().map(|f| f.durable.as_ref().clone());
        for (k, cut) in cuts.into_iter().enumerate() {
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let key = base.wrapping_add(cut_hash(point, &cut));
            if !self
                .seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key)
            {
                if !quick && !matches!(cut, Cut::None | Cut::All) {
                    self.duplicates.fetch_add(1, Ordering::Relaxed);
                }
                continue;
            }
            set_cut(&mut image, file.as_deref_mut(), point, &cut, true);
            let stream = if quick { u64::MAX - k as u64 } else { k as u64 };
            let mut image_rng = SimRng::derive(self.config.seed ^ mix64(index as u64), stream);
            let kept = &image[..cut_len(point, &cut)];
            let result = self.check_image(kept, file.as_deref(), acked, in_flight, &mut image_rng);
            set_cut(&mut image, file.as_deref_mut(), point, &cut, false);
            self.images.fetch_add(1, Ordering::Relaxed);
            if let Err(message) = result {
                self.fail(self.failure(Some((index, point)), Some(cut), message));
            }
        }
    }

    /// Recover the shadow replica after one sync point like a crash image (no depth 2, no
    /// follow-on): it must hold the acknowledged state or the one in flight. `last`: the
    /// image at the end of the run, which must hold exactly the last acknowledged state.
    fn check_shadow(&self, point: &ShadowPoint, last: bool) {
        let (acked, in_flight, index) = if last {
            (
                self.states.last().unwrap_or(&self.states[0]),
                None,
                u64::MAX,
            )
        } else {
            let acked = point.acked.min(self.states.len() - 1);
            (&self.states[acked], self.states.get(acked + 1), point.index)
        };
        let w = self.workload;
        let media = SimMedia::from_image(&point.image, w.capacity(), self.options(false));
        let result = guard("recovery of the shadow replica", || w.recover(media))
            .and_then(|r| guard("observation of the shadow replica", || w.observe(&r)))
            .and_then(|observed| w.accept(&observed, acked, in_flight));
        self.shadow_checks.fetch_add(1, Ordering::Relaxed);
        if let Err(message) = result {
            let mut failure = self.failure(None, None, message);
            failure.shadow = Some((index, point.kind));
            self.fail(failure);
        }
    }

    fn options(&self, record: bool) -> SimOptions {
        SimOptions {
            medium: self.config.medium,
            granularity: self.config.granularity,
            wal_bytes: self.config.wal_bytes,
            record,
            ..SimOptions::default()
        }
    }

    /// Recover one crash image and check it: (a) invariants, (b)+(c) against the model, (d)
    /// crashes during the recovery (sampled), (e) the follow-on workload (sampled).
    fn check_image(
        &self,
        image: &[u8],
        file: Option<&[u8]>,
        acked: &W::State,
        in_flight: Option<&W::State>,
        rng: &mut SimRng,
    ) -> Result<(), String> {
        let w = self.workload;
        let every = |n: u32, rng: &mut SimRng| n != 0 && rng.below(u64::from(n)) == 0;
        let depth2 = every(self.config.depth2_every, rng);
        let follow_on = every(self.config.follow_on_every, rng);
        let media = SimMedia::from_images(image, file, w.capacity(), self.options(depth2));
        let recovered = guard("recovery", || w.recover(media.clone()))?;
        media.mark_end();
        media.set_recording(false);
        let observed = guard("observation after recovery", || w.observe(&recovered))?;
        w.accept(&observed, acked, in_flight)?;
        if depth2 {
            self.check_depth2(&media.take_points(), &observed, acked, in_flight, rng)?;
        }
        if follow_on {
            self.follow_ons.fetch_add(1, Ordering::Relaxed);
            guard("follow-on workload", || w.follow_on(recovered, &media))?;
        }
        Ok(())
    }

    fn check_depth2(
        &self,
        points: &[CrashPoint],
        first: &W::State,
        acked: &W::State,
        in_flight: Option<&W::State>,
        rng: &mut SimRng,
    ) -> Result<(), String> {
        let w = self.workload;
        let mut candidates = Vec::new();
        for (p, point) in points.iter().enumerate() {
            candidates.push((p, Cut::None));
            candidates.push((p, Cut::All));
            if point.unit_count() > 0 {
                let n = point.unit_count() as u64;
                candidates.push((p, Cut::Only(rng.below(n) as u32)));
                if point.short_len.is_some() {
                    candidates.push((p, Cut::AllBut(point.short_unit())));
                }
                candidates.push((p, Cut::AllBut(rng.below(n) as u32)));
                candidates.push((
                    p,
                    Cut::Set((0..n as u32).filter(|_| rng.chance(0.5)).collect()),
                ));
            }
        }
        let budget = self.config.depth2_images as usize;
        while candidates.len() > budget {
            candidates.swap_remove(rng.below(candidates.len() as u64) as usize);
        }
        for (p, cut) in candidates {
            let point = &points[p];
            let mut image = point.durable.as_ref().clone();
            let mut file = point.file.as_ref().map(|f| f.durable.as_ref().clone());
            set_cut(&mut image, file.as_deref_mut(), point, &cut, true);
            let image = &image[..cut_len(point, &cut)];
            let media =
                SimMedia::from_images(image, file.as_deref(), w.capacity(), self.options(false));
            self.depth2.fetch_add(1, Ordering::Relaxed);
            let second = guard("recovery after a crash during recovery", || {
                w.recover(media)
            })
            .and_then(|r| guard("observation after the second recovery", || w.observe(&r)))
            .map_err(|e| {
                format!(
                    "{e} (second crash at recovery point {p} ({}), {cut})",
                    point.kind
                )
            })?;
            w.same_recovery(first, &second, acked, in_flight)
                .map_err(|e| {
                    format!(
                        "{e} (second crash at recovery point {p} ({}), {cut})",
                        point.kind
                    )
                })?;
        }
        Ok(())
    }
}

/// Explore `workload`: run it once on a recording simulated medium, then check the crash
/// images of every crash point (see [`cuts`]). Never panics on a failed check: failures are
/// counted and kept in the [`Report`] (call [`Report::assert_ok`] in a test).
pub fn explore<W: Workload>(workload: &W, config: &Config) -> Report {
    let start = Instant::now();
    let recording = record(workload, config);
    let shared = Shared::new(workload, config, &recording.states);
    if let Some(error) = &recording.error {
        shared.fail(shared.failure(None, None, error.clone()));
    }
    let next = AtomicUsize::new(0);
    let points = &recording.points;
    let shadow = &recording.shadow;
    // Tasks 0..n are the quick pass over every point, n..2n the full pass, then one per
    // shadow point and the final shadow check (a run that failed has no final state).
    let shadow_tasks = match shadow.len() {
        0 => 0,
        m if recording.error.is_none() => m + 1,
        m => m,
    };
    let work = || {
        with_mutant(config.mutant, || loop {
            let task = next.fetch_add(1, Ordering::AcqRel);
            if task >= 2 * points.len() + shadow_tasks || shared.stop.load(Ordering::Acquire) {
                break;
            }
            if task >= 2 * points.len() {
                let k = task - 2 * points.len();
                match shadow.get(k) {
                    Some(point) => shared.check_shadow(point, false),
                    None => shared.check_shadow(&shadow[shadow.len() - 1], true),
                }
                continue;
            }
            let quick = task < points.len();
            let i = if quick { task } else { task - points.len() };
            shared.explore_point(i, &points[i], quick);
        })
    };
    if config.threads <= 1 {
        work();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..config.threads {
                scope.spawn(work);
            }
        });
    }
    let (failure_count, failures) = shared
        .failures
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    Report {
        runs: 1,
        flushes: recording.flushes,
        fences: recording.fences,
        acks: recording.states.len() as u64 - 1,
        crash_points: points.len() as u64,
        intervals_exhaustive: shared.exhaustive.into_inner(),
        intervals_sampled: shared.sampled.into_inner(),
        units_max: points
            .iter()
            .map(|p| p.unit_count() as u64)
            .max()
            .unwrap_or(0),
        units: points.iter().map(|p| p.unit_count() as u32).collect(),
        images_checked: shared.images.into_inner(),
        images_duplicate: shared.duplicates.into_inner(),
        depth2_images: shared.depth2.into_inner(),
        follow_ons: shared.follow_ons.into_inner(),
        shadow_checks: shared.shadow_checks.into_inner(),
        elapsed: start.elapsed(),
        failure_count,
        failures,
    }
}

/// Run `workload` once on a recording medium without checking any image: the counts of
/// flushes, fences, acknowledgements and crash points (and a failure if the run failed).
pub fn measure<W: Workload>(workload: &W, config: &Config) -> Report {
    let start = Instant::now();
    let recording = record(workload, config);
    let failures: Vec<Failure> = recording
        .error
        .iter()
        .map(|message| Failure {
            workload: workload.name(),
            seed: config.seed,
            point: None,
            shadow: None,
            kind: None,
            units: 0,
            cut: None,
            mutant: config.mutant.map(str::to_string),
            message: message.clone(),
        })
        .collect();
    Report {
        runs: 1,
        flushes: recording.flushes,
        fences: recording.fences,
        acks: recording.states.len() as u64 - 1,
        crash_points: recording.points.len() as u64,
        units_max: recording
            .points
            .iter()
            .map(|p| p.unit_count() as u64)
            .max()
            .unwrap_or(0),
        units: recording
            .points
            .iter()
            .map(|p| p.unit_count() as u32)
            .collect(),
        elapsed: start.elapsed(),
        failure_count: failures.len() as u64,
        failures,
        ..Report::default()
    }
}

/// Replay one crash image of a failure exactly: run the workload again with `config`'s seed,
/// take crash point `point`, apply `cut` and check the image, with depth-2 crashes and the
/// follow-on workload always on. Returns the check's error, if any.
pub fn replay<W: Workload>(
    workload: &W,
    config: &Config,
    point: usize,
    cut: &Cut,
) -> Result<(), String> {
    let recording = record(workload, config);
    let Some(crash) = recording.points.get(point) else {
        return Err(format!(
            "the run recorded only {} crash points",
            recording.points.len()
        ));
    };
    let mut forced = config.clone();
    forced.depth2_every = 1;
    forced.follow_on_every = 1;
    let shared = Shared::new(workload, &forced, &recording.states);
    let mut image = crash.durable.as_ref().clone();
    let mut file = crash.file.as_ref().map(|f| f.durable.as_ref().clone());
    set_cut(&mut image, file.as_deref_mut(), crash, cut, true);
    let (acked, in_flight) = shared.model(crash);
    let mut rng = SimRng::derive(config.seed ^ mix64(point as u64), u64::MAX);
    let kept = &image[..cut_len(crash, cut)];
    with_mutant(config.mutant, || {
        shared.check_image(kept, file.as_deref(), acked, in_flight, &mut rng)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_intervals_are_exhaustive() {
        let mut rng = SimRng::new(1);
        let (c, all) = cuts(3, &Sampling::default(), &mut rng);
        assert!(all);
        assert_eq!(c.len(), 8);
        let (c, all) = cuts(20, &Sampling::default(), &mut rng);
        assert!(!all);
        assert_eq!(c.len(), 2 + 20 + 20 + 190 + 256);
    }

    #[test]
    fn cut_membership() {
        assert!(Cut::Mask(0b101).keeps(2));
        assert!(!Cut::Mask(0b101).keeps(1));
        assert!(Cut::AllBut(3).keeps(2) && !Cut::AllBut(3).keeps(3));
        assert!(Cut::Set(vec![1, 4]).keeps(4) && !Cut::Set(vec![1, 4]).keeps(2));
        assert_eq!(Cut::Set(vec![1, 4]).to_string(), "Cut::Set(vec![1, 4])");
    }

    #[test]
    fn image_hash_is_incremental() {
        let mut image = vec![0u8; 256];
        image[8] = 1;
        let before = image_hash(&image);
        image[16] = 7;
        let after = image_hash(&image);
        let delta = word_hash(16, 7).wrapping_sub(word_hash(16, 0));
        assert_eq!(before.wrapping_add(delta), after);
    }
}
