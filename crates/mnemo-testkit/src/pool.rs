//! Workloads of the media layer: pool creation, open/close cycles (the clean-shutdown flag),
//! growth while data is written and synced, dirty tracking turned on after stores.
//!
//! All four share one model, [`PoolState`]: whether a pool is there, its identity, size,
//! clean flag and the whole data area. Invariants checked on every recovered pool:
//! * the pool opens (or, only while its creation is in flight, holds no valid header);
//! * the header in force agrees with the medium: size a page multiple within the medium,
//!   `size_max >= size`, the data offset and layout as created;
//! * the uuid never changes after creation;
//! * size and clean flag are those of the acknowledged state or of the one in flight, as a
//!   pair (a header copy is all-or-nothing);
//! * every 8-byte word of the data area is the acknowledged value or the in-flight one, and
//!   beyond the old size zero or the written data (a raw write is *not* atomic, only each
//!   word is).

use std::fmt;
use std::path::Path;

use mnemo_pmem::header::Pair;
use mnemo_pmem::limits::{DATA_OFFSET, HEADER_COPY_SIZE, PAGE_SIZE, POOL_SIZE_MIN};
use mnemo_pmem::{
    CreateOptions, Error, LocalPolicy, Media, OpenOptions, Pool, SyncPolicy, WalPolicy,
};
use std::sync::Arc;

use crate::sim::SimMedia;
use crate::workload::{Run, Workload};

/// Layout name of every testkit pool.
pub const LAYOUT: &str = "mnemo-testkit";

/// Name the pools are opened under (messages only).
pub const NAME: &str = "sim-pool";

/// The model of a pool.
#[derive(Clone, PartialEq, Eq)]
pub enum PoolState {
    /// No valid header (before creation completed): open says "not a pool" or "corrupt".
    Absent,
    /// A pool.
    Present(PoolImage),
}

/// What the model knows of a present pool.
#[derive(Clone, PartialEq, Eq)]
pub struct PoolImage {
    /// Identity.
    pub uuid: uuid::Uuid,
    /// Size in bytes, headers included.
    pub size: u64,
    /// The clean-shutdown flag of the header in force (what the next open reports).
    pub clean: bool,
    /// The data area, `DATA_OFFSET..size`.
    pub data: Vec<u8>,
}

impl fmt::Debug for PoolImage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nonzero = self.data.iter().filter(|&&b| b != 0).count();
        write!(
            f,
            "Pool {{ uuid {}, size {}, clean {}, data {} nonzero bytes }}",
            self.uuid, self.size, self.clean, nonzero
        )
    }
}

impl fmt::Debug for PoolState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolState::Absent => write!(f, "Absent"),
            PoolState::Present(p) => p.fmt(f),
        }
    }
}

impl PoolState {
    fn image(&self) -> Option<&PoolImage> {
        match self {
            PoolState::Absent => None,
            PoolState::Present(p) => Some(p),
        }
    }
}

/// Options every testkit pool is created with: `size` bytes, growable to `size_max`.
pub fn create_options(size: u64, size_max: u64) -> CreateOptions {
    CreateOptions {
        size,
        size_max,
        layout: LAYOUT.to_string(),
        policy: None,
    }
}

/// Create a pool named `name` on `media` with [`create_options`]`(size, size_max)`; the error
/// as text, as workloads return it.
/// A medium that keeps a shadow replica gives the pool its recording policy.
pub fn create(media: SimMedia, name: &str, size: u64, size_max: u64) -> Result<Pool, String> {
    create_with(media, name, &create_options(size, size_max))
}

/// Create a pool on `media` with `options`, the shadow replica's recording policy in force
/// if the medium keeps one; the error as text.
pub fn create_with(media: SimMedia, name: &str, options: &CreateOptions) -> Result<Pool, String> {
    let mut options = options.clone();
    if let Some(policy) = policy_for(&media) {
        options.policy = Some(policy);
    }
    Pool::create_on(Box::new(media), Path::new(name), &options).map_err(|e| e.to_string())
}

/// The policy pools on `media` sync through: the write-ahead policy on the medium's
/// write-ahead file if it has one, recorded into its shadow replica if it keeps one; `None`:
/// the pool's default.
pub fn policy_for(media: &SimMedia) -> Option<Arc<dyn SyncPolicy>> {
    let wal = media
        .wal()
        .map(|file| Arc::new(WalPolicy::new(Arc::new(file))) as Arc<dyn SyncPolicy>);
    match (media.shadow(), wal) {
        (Some(shadow), wal) => {
            Some(shadow.policy_over(wal.unwrap_or_else(|| Arc::new(LocalPolicy))))
        }
        (None, wal) => wal,
    }
}

/// Open a pool on `media` with the testkit layout. `Ok(None)`: no valid header at all.
///
/// An empty medium (a crash before creation grew it) holds no pool either.
/// "No valid header" includes `OlderVersion { found: 0 }`: a header copy torn while it was
/// first written (magic persisted, version word not yet) is reported by mnemo-pmem as
/// format version 0 rather than as corrupt, because the version is checked before the
/// checksum. Harmless (the pool was never acknowledged) but a misleading message.
pub fn open(media: SimMedia) -> Result<Option<Pool>, String> {
    let options = OpenOptions {
        layout: Some(LAYOUT.to_string()),
        size_max: None,
        policy: policy_for(&media),
    };
    match Pool::open_on(Box::new(media), Path::new(NAME), &options) {
        Ok(pool) => Ok(Some(pool)),
        Err(
            Error::NotAPool { .. }
            | Error::Corrupt { .. }
            | Error::OlderVersion { found: 0, .. }
            | Error::Truncated { file_len: 0, .. },
        ) => Ok(None),
        Err(e) => Err(format!("open failed: {e}")),
    }
}

/// Read the model state of an open pool, checking its structural invariants.
pub fn observe(pool: &Pool) -> Result<PoolState, String> {
    let header = pool.header();
    let size = pool.size();
    if header.pool_size != size {
        return Err(format!(
            "header size {} differs from the pool's size {size}",
            header.pool_size
        ));
    }
    if size % PAGE_SIZE != 0 || size < POOL_SIZE_MIN || size > pool.capacity() {
        return Err(format!(
            "size {size} is not a page multiple within {POOL_SIZE_MIN}..={}",
            pool.capacity()
        ));
    }
    if header.size_max < size || header.data_offset != DATA_OFFSET || header.layout != LAYOUT {
        return Err(format!("header fields inconsistent: {header:?}"));
    }
    // The copy just written at open must be the one in force, and decode.
    let mut both = vec![0u8; (HEADER_COPY_SIZE * 2) as usize];
    pool.read(0, &mut both).map_err(|e| e.to_string())?;
    let pair = Pair::decode(&both);
    match pair.header() {
        Some(h) if h.generation == header.generation && h.pool_uuid == header.pool_uuid => {}
        other => {
            return Err(format!(
                "header in force on media {other:?} is not the open pool's {header:?}"
            ))
        }
    }
    let mut data = vec![0u8; (size - DATA_OFFSET) as usize];
    pool.read(DATA_OFFSET, &mut data)
        .map_err(|e| e.to_string())?;
    Ok(PoolState::Present(PoolImage {
        uuid: header.pool_uuid,
        size,
        clean: pool.was_clean(),
        data,
    }))
}

/// The model state of a pool the workload holds open: like [`observe`] but with the clean
/// flag the header on media carries.
fn state_of(pool: &Pool) -> Result<PoolState, String> {
    let PoolState::Present(mut image) = observe(pool)? else {
        unreachable!("observe returns a present pool")
    };
    image.clean = pool.header().clean_shutdown;
    Ok(PoolState::Present(image))
}

fn word(data: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    if let Some(src) = data.get(at..at + 8) {
        b.copy_from_slice(src);
    }
    u64::from_le_bytes(b)
}

/// Acceptance shared by the pool workloads; see the module documentation.
pub fn accept(
    observed: &PoolState,
    acked: &PoolState,
    in_flight: Option<&PoolState>,
) -> Result<(), String> {
    let candidates: Vec<&PoolState> = std::iter::once(acked).chain(in_flight).collect();
    let Some(o) = observed.image() else {
        if candidates.iter().any(|c| c.image().is_none()) {
            return Ok(());
        }
        return Err(format!(
            "no valid pool header, but the pool {acked:?} was acknowledged"
        ));
    };
    let images: Vec<&PoolImage> = candidates.iter().filter_map(|c| c.image()).collect();
    if images.is_empty() {
        return Err(format!("a pool {o:?} exists although none was created"));
    }
    if !images
        .iter()
        .any(|c| c.uuid == o.uuid && c.size == o.size && c.clean == o.clean)
    {
        return Err(format!(
            "pool header {o:?}; acceptable: {acked:?} (acknowledged) or {in_flight:?} (in flight)"
        ));
    }
    // Whole lines first (fast), words only inside lines that match no candidate as a whole.
    let line_ok = |at: usize, line: &[u8]| {
        images
            .iter()
            .any(|c| c.data.get(at..at + line.len()) == Some(line))
    };
    let suspect = o
        .data
        .chunks(64)
        .enumerate()
        .filter(|(i, line)| !line_ok(i * 64, line))
        .map(|(i, _)| i * 64);
    for at in suspect.flat_map(|line| (line..(line + 64).min(o.data.len())).step_by(8)) {
        let value = word(&o.data, at);
        if !images.iter().any(|c| word(&c.data, at) == value) {
            let allowed: Vec<String> = images
                .iter()
                .map(|c| format!("{:#018x}", word(&c.data, at)))
                .collect();
            return Err(format!(
                "data word at offset {:#x} holds {value:#018x}; acceptable: {} (acknowledged first)",
                DATA_OFFSET + at as u64,
                allowed.join(" or ")
            ));
        }
    }
    Ok(())
}

/// What a recovery interrupted by a second crash must agree on with the uninterrupted one:
/// the pool's presence, identity and data; and the state must still be acceptable for the
/// first crash, clean flag aside (the interrupted open may already have cleared it).
///
/// Size may differ within that: open writes the next header generation into the copy an
/// in-flight update may have torn, so a crash during that write can complete the torn copy
/// instead (found by this harness: grow's header torn, open's rewrite of the same generation
/// interrupted after its first word, and the grown header is whole again). Nobody saw the
/// first decision (open had not returned), so both outcomes are correct.
pub fn same_recovery(
    first: &PoolState,
    second: &PoolState,
    acked: &PoolState,
    in_flight: Option<&PoolState>,
) -> Result<(), String> {
    let unclean = |s: &PoolState| match s {
        PoolState::Absent => PoolState::Absent,
        PoolState::Present(p) => PoolState::Present(PoolImage {
            clean: false,
            ..p.clone()
        }),
    };
    accept(
        &unclean(second),
        &unclean(acked),
        in_flight.map(unclean).as_ref(),
    )?;
    let same = match (first, second) {
        (PoolState::Absent, PoolState::Absent) => true,
        (PoolState::Present(a), PoolState::Present(b)) => {
            let common = a.data.len().min(b.data.len());
            a.uuid == b.uuid && a.data[..common] == b.data[..common]
        }
        _ => false,
    };
    if same {
        return Ok(());
    }
    Err(format!(
        "second recovery saw {second:?}, the first {first:?}"
    ))
}

/// Follow-on shared by the pool workloads: write and sync a marker, grow by a page if
/// there is room, close, reopen from the durable image only, and check all of it is there.
pub fn follow_on(recovered: Option<Pool>, media: &SimMedia) -> Result<(), String> {
    let pool = match recovered {
        Some(pool) => pool,
        None => create_with(media.clone(), NAME, &create_options(POOL_SIZE_MIN, 1 << 20))
            .map_err(|e| format!("create over a never-created pool: {e}"))?,
    };
    let uuid = pool.header().pool_uuid;
    let mut marker = [0u8; 64];
    let text = b"follow-on marker, synced after recovery";
    marker[..text.len()].copy_from_slice(text);
    pool.write(DATA_OFFSET, &marker)
        .map_err(|e| e.to_string())?;
    pool.msync(DATA_OFFSET, marker.len() as u64)
        .map_err(|e| e.to_string())?;
    let size = pool.size() + PAGE_SIZE;
    let size = if size <= pool.header().size_max && size <= media.capacity() {
        pool.grow(size).map_err(|e| e.to_string())?;
        size
    } else {
        pool.size()
    };
    pool.close().map_err(|e| e.to_string())?;
    let reopened = open(media.crash())?.ok_or("no pool after a clean close")?;
    let mut back = [0u8; 64];
    reopened
        .read(DATA_OFFSET, &mut back)
        .map_err(|e| e.to_string())?;
    let header = reopened.header();
    if back != marker
        || !reopened.was_clean()
        || header.pool_uuid != uuid
        || header.pool_size != size
    {
        return Err(format!(
            "after the follow-on and a clean close, reopening found {header:?}, was_clean {}",
            reopened.was_clean()
        ));
    }
    reopened.close().map_err(|e| e.to_string())
}

fn fail(e: Error) -> String {
    e.to_string()
}

/// Close `pool` cleanly and acknowledge its state with the clean flag set.
fn close_acked(pool: Pool, run: &mut Run<PoolState>) -> Result<(), String> {
    let mut closed = state_of(&pool)?;
    pool.close().map_err(fail)?;
    if let PoolState::Present(p) = &mut closed {
        p.clean = true;
    }
    run.ack(closed);
    Ok(())
}

/// The recovery and checks every pool workload shares: [`open`], [`observe`] (no pool is
/// [`PoolState::Absent`]), [`accept`], [`same_recovery`] and [`follow_on`].
macro_rules! pool_checks {
    () => {
        fn recover(&self, media: SimMedia) -> Result<Option<Pool>, String> {
            open(media)
        }

        fn observe(&self, recovered: &Option<Pool>) -> Result<PoolState, String> {
            recovered.as_ref().map_or(Ok(PoolState::Absent), observe)
        }

        fn accept(
            &self,
            observed: &PoolState,
            acked: &PoolState,
            in_flight: Option<&PoolState>,
        ) -> Result<(), String> {
            accept(observed, acked, in_flight)
        }

        fn same_recovery(
            &self,
            first: &PoolState,
            second: &PoolState,
            acked: &PoolState,
            in_flight: Option<&PoolState>,
        ) -> Result<(), String> {
            same_recovery(first, second, acked, in_flight)
        }

        fn follow_on(&self, recovered: Option<Pool>, media: &SimMedia) -> Result<(), String> {
            follow_on(recovered, media)
        }
    };
}

/// Workload "create": format a pool, then close it.
#[derive(Clone, Copy, Debug)]
pub struct CreateWorkload {
    /// Pool size.
    pub size: u64,
}

impl Default for CreateWorkload {
    fn default() -> CreateWorkload {
        CreateWorkload {
            size: POOL_SIZE_MIN,
        }
    }
}

impl Workload for CreateWorkload {
    type State = PoolState;
    type Recovered = Option<Pool>;

    fn name(&self) -> String {
        format!("pool-create({} bytes)", self.size)
    }

    fn capacity(&self) -> u64 {
        self.size.max(1 << 20)
    }

    fn initial(&self) -> PoolState {
        PoolState::Absent
    }

    fn run(&self, run: &mut Run<PoolState>) -> Result<(), String> {
        let pool = create(run.media(), NAME, self.size, self.capacity())?;
        run.ack(state_of(&pool)?);
        close_acked(pool, run)?;
        Ok(())
    }

    pool_checks!();
}

/// Workload "open/close cycles": create, then `cycles` times: write and sync a few bytes,
/// close (clean flag set), reopen (clean flag cleared).
#[derive(Clone, Copy, Debug)]
pub struct CyclesWorkload {
    /// Close/reopen cycles.
    pub cycles: u32,
}

impl Workload for CyclesWorkload {
    type State = PoolState;
    type Recovered = Option<Pool>;

    fn name(&self) -> String {
        format!("pool-open-close({} cycles)", self.cycles)
    }

    fn capacity(&self) -> u64 {
        1 << 20
    }

    fn initial(&self) -> PoolState {
        PoolState::Absent
    }

    fn run(&self, run: &mut Run<PoolState>) -> Result<(), String> {
        let mut pool = create(run.media(), NAME, POOL_SIZE_MIN, 1 << 20)?;
        run.ack(state_of(&pool)?);
        for cycle in 0..self.cycles {
            let offset = DATA_OFFSET + run.rng().below(POOL_SIZE_MIN - DATA_OFFSET - 64);
            let mut bytes = vec![0u8; 1 + run.rng().below(40) as usize];
            run.rng().fill(&mut bytes);
            pool.write(offset, &bytes).map_err(fail)?;
            pool.msync(offset, bytes.len() as u64).map_err(fail)?;
            run.ack(state_of(&pool)?);
            close_acked(pool, run)?;
            pool = open(run.media())?
                .ok_or_else(|| format!("cycle {cycle}: the pool vanished after close"))?;
            if !pool.was_clean() {
                return Err(format!(
                    "cycle {cycle}: reopened pool does not report the clean close"
                ));
            }
            run.ack(state_of(&pool)?);
        }
        close_acked(pool, run)?;
        Ok(())
    }

    pool_checks!();
}

/// Workload "grow": create a 64 KiB pool, then `grows` times: `writes` seeded writes of
/// 1..=`write_max` bytes anywhere in the data area, each synced with `msync`, then grow by
/// 1-3 pages; the writes after a growth may land in the new pages. Ends with a close.
#[derive(Clone, Copy, Debug)]
pub struct GrowWorkload {
    /// Growths.
    pub grows: u32,
    /// Synced writes before each growth.
    pub writes: u32,
    /// Longest write in bytes.
    pub write_max: u64,
}

impl Default for GrowWorkload {
    fn default() -> GrowWorkload {
        GrowWorkload {
            grows: 4,
            writes: 3,
            write_max: 96,
        }
    }
}

impl GrowWorkload {
    const SIZE_MAX: u64 = 256 << 10;
}

impl Workload for GrowWorkload {
    type State = PoolState;
    type Recovered = Option<Pool>;

    fn name(&self) -> String {
        format!(
            "pool-grow({} grows x {} writes of <= {} bytes)",
            self.grows, self.writes, self.write_max
        )
    }

    fn capacity(&self) -> u64 {
        Self::SIZE_MAX
    }

    fn initial(&self) -> PoolState {
        PoolState::Absent
    }

    fn run(&self, run: &mut Run<PoolState>) -> Result<(), String> {
        let pool = create(run.media(), NAME, POOL_SIZE_MIN, Self::SIZE_MAX)?;
        let mut model = state_of(&pool)?;
        run.ack(model.clone());
        for _ in 0..self.grows {
            for _ in 0..self.writes {
                let len = run.rng().range(1, self.write_max);
                // Bias towards the most recently grown pages, where growth and data meet.
                let low = if run.rng().chance(0.5) {
                    pool.size().saturating_sub(3 * PAGE_SIZE)
                } else {
                    DATA_OFFSET
                };
                let offset = run.rng().range(low.max(DATA_OFFSET), pool.size() - len);
                let mut bytes = vec![0u8; len as usize];
                run.rng().fill(&mut bytes);
                pool.write(offset, &bytes).map_err(fail)?;
                pool.msync(offset, len).map_err(fail)?;
                if let PoolState::Present(p) = &mut model {
                    let at = (offset - DATA_OFFSET) as usize;
                    p.data[at..at + len as usize].copy_from_slice(&bytes);
                }
                run.ack(model.clone());
            }
            let new_size = (pool.size() + run.rng().range(1, 3) * PAGE_SIZE).min(Self::SIZE_MAX);
            pool.grow(new_size).map_err(fail)?;
            if let PoolState::Present(p) = &mut model {
                p.size = new_size;
                p.data.resize((new_size - DATA_OFFSET) as usize, 0);
            }
            run.ack(model.clone());
        }
        pool.close().map_err(fail)?;
        if let PoolState::Present(p) = &mut model {
            p.clean = true;
        }
        run.ack(model);
        Ok(())
    }

    pool_checks!();
}

/// Workload "gmsync": three ranges of 24 bytes (three words each, on different lines)
/// published by repeated `Pool::gmsync` of all three: every crash image must hold one
/// published state whole, the acknowledged one or the one in flight, never a mix, although
/// the stores reach media in any order before the call (the journal rolls them back). Every
/// third operation instead stores one aligned word of a range and `msync`s it: that must
/// survive (the journal's record is released, not applied over it); the gmsync after such a
/// release has no earlier copy to roll back to, so its crash images may mix old and new
/// words (as `Pool::gmsync` documents), and the one after it is all-or-nothing again.
#[derive(Clone, Copy, Debug)]
pub struct GmsyncWorkload {
    /// Operations after the first, publishing gmsync.
    pub ops: u32,
}

impl GmsyncWorkload {
    /// The three ranges.
    pub fn ranges() -> [mnemo_pmem::ByteRange; 3] {
        [0u64, 3, 7].map(|line| mnemo_pmem::ByteRange::new(DATA_OFFSET + line * 64 + 8, 24))
    }

    fn read(pool: &Pool) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        for r in Self::ranges() {
            let mut bytes = vec![0u8; r.len as usize];
            pool.read(r.offset, &mut bytes).map_err(fail)?;
            out.extend_from_slice(&bytes);
        }
        Ok(out)
    }
}

/// The model of [`GmsyncWorkload`]: the ranges' bytes, and whether a journal record covers
/// them (the next gmsync is all-or-nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// The bytes of the three ranges.
    pub bytes: Vec<u8>,
    /// Whether the newest journal record covers them.
    pub covered: bool,
}

impl Workload for GmsyncWorkload {
    /// `None`: no pool yet.
    type State = Option<Published>;
    type Recovered = Option<Pool>;

    fn name(&self) -> String {
        format!("pool-gmsync({} ops)", self.ops)
    }

    fn capacity(&self) -> u64 {
        1 << 20
    }

    fn initial(&self) -> Option<Published> {
        None
    }

    fn run(&self, run: &mut Run<Option<Published>>) -> Result<(), String> {
        let pool = create(run.media(), NAME, POOL_SIZE_MIN, 1 << 20)?;
        let state = |pool: &Pool, covered| -> Result<Option<Published>, String> {
            Ok(Some(Published {
                bytes: Self::read(pool)?,
                covered,
            }))
        };
        run.ack(state(&pool, false)?);
        // The first gmsync publishes the (zero) ranges: from now on each has an earlier copy.
        pool.gmsync(&Self::ranges()).map_err(fail)?;
        run.ack(state(&pool, true)?);
        for op in 0..self.ops {
            if op % 3 == 2 {
                let r = Self::ranges()[run.rng().below(3) as usize];
                let word = r.offset + 8 * run.rng().below(3);
                let value = run.rng().next_u64().to_le_bytes();
                pool.write(word, &value).map_err(fail)?;
                pool.msync(word, 8).map_err(fail)?;
                run.ack(state(&pool, false)?);
            } else {
                for r in Self::ranges() {
                    let mut bytes = vec![0u8; r.len as usize];
                    run.rng().fill(&mut bytes);
                    pool.write(r.offset, &bytes).map_err(fail)?;
                }
                pool.gmsync(&Self::ranges()).map_err(fail)?;
                run.ack(state(&pool, true)?);
            }
        }
        Ok(())
    }

    fn recover(&self, media: SimMedia) -> Result<Option<Pool>, String> {
        open(media)
    }

    fn observe(&self, recovered: &Option<Pool>) -> Result<Option<Published>, String> {
        recovered
            .as_ref()
            .map(|pool| {
                Ok(Published {
                    bytes: Self::read(pool)?,
                    covered: false,
                })
            })
            .transpose()
    }

    /// The bytes of the acknowledged state or of the one in flight, whole; per aligned word
    /// either, when no journal record covered the ranges as the operation began (an msync
    /// is one word, so that is all-or-nothing too).
    fn accept(
        &self,
        observed: &Option<Published>,
        acked: &Option<Published>,
        in_flight: Option<&Option<Published>>,
    ) -> Result<(), String> {
        let bytes = |s: &Option<Published>| s.as_ref().map(|p| p.bytes.clone());
        let (seen, old) = (bytes(observed), bytes(acked));
        let new = in_flight.map(bytes);
        if seen == old || new.as_ref() == Some(&seen) {
            return Ok(());
        }
        let uncovered = acked.as_ref().is_some_and(|p| !p.covered);
        if let (true, Some(seen), Some(old), Some(Some(new))) = (uncovered, &seen, &old, &new) {
            let per_word = seen
                .chunks(8)
                .zip(old.chunks(8).zip(new.chunks(8)))
                .all(|(s, (o, n))| s == o || s == n);
            if per_word {
                return Ok(());
            }
        }
        Err(format!(
            "observed {seen:?}; acceptable: {old:?} (acknowledged) or {new:?} (in flight){}",
            if uncovered { ", per word" } else { ", whole" }
        ))
    }

    fn same_recovery(
        &self,
        first: &Option<Published>,
        second: &Option<Published>,
        _acked: &Option<Published>,
        _in_flight: Option<&Option<Published>>,
    ) -> Result<(), String> {
        if first == second {
            return Ok(());
        }
        Err(format!("recovery after a crash during recovery gave {second:?}, uninterrupted recovery gave {first:?}"))
    }

    fn follow_on(&self, recovered: Option<Pool>, media: &SimMedia) -> Result<(), String> {
        let Some(pool) = recovered else {
            return Ok(());
        };
        // An msync right after recovery releases the record recovery applied: the bytes it
        // put back in the other ranges must have been made durable by recovery itself.
        let r = Self::ranges();
        pool.write(r[0].offset, &[0xa5; 8]).map_err(fail)?;
        pool.msync(r[0].offset, 8).map_err(fail)?;
        let want = Self::read(&pool)?;
        drop(pool);
        let media = media.crash();
        let pool = open(media.clone())?.ok_or("the pool vanished after an msync")?;
        let got = Self::read(&pool)?;
        if got != want {
            return Err(format!(
                "after recovery, msync and a crash {got:?}, expected {want:?}"
            ));
        }
        // One more publication survives a close and a reopen from the durable image.
        pool.write(r[1].offset, &[0x5a; 24]).map_err(fail)?;
        pool.gmsync(&r).map_err(fail)?;
        let want = Self::read(&pool)?;
        pool.close().map_err(fail)?;
        let again = open(media.crash())?.ok_or("the pool vanished after close")?;
        let got = Self::read(&again)?;
        if got != want {
            return Err(format!("after reopen {got:?}, published {want:?}"));
        }
        Ok(())
    }
}

/// Workload "tracking": create a pool, store `writes` seeded writes into it without a sync
/// point, turn dirty tracking on ([`mnemo_pmem::track::Tracking::Api`]: sync points flush
/// only what the tracker saw written), `msync` each of those writes, acknowledge them all;
/// then as many more writes under tracking, synced and acknowledged the same way; close. The
/// tracker never saw the stores made before it began: turning it on must make them durable,
/// or the narrowed `msync`s after it flush nothing for them (caught: `pool.tracking_start`).
///
/// Each batch is acknowledged once, after its last `msync`: a store not synced yet may reach
/// the medium at any time, so until then every word of the batch is old or new.
#[derive(Clone, Copy, Debug)]
pub struct TrackingWorkload {
    /// Writes per batch.
    pub writes: u32,
}

impl Default for TrackingWorkload {
    fn default() -> TrackingWorkload {
        TrackingWorkload { writes: 3 }
    }
}

impl TrackingWorkload {
    const SIZE: u64 = 4 * POOL_SIZE_MIN;

    /// Store `writes` seeded writes (no sync point), apply them to `model`, return the ranges.
    fn store(
        &self,
        pool: &Pool,
        run: &mut Run<PoolState>,
        model: &mut PoolState,
    ) -> Result<Vec<(u64, u64)>, String> {
        let mut ranges = Vec::new();
        for _ in 0..self.writes {
            let len = run.rng().range(1, 200);
            let offset = run.rng().range(DATA_OFFSET, Self::SIZE - len);
            let mut bytes = vec![0u8; len as usize];
            run.rng().fill(&mut bytes);
            pool.write(offset, &bytes).map_err(fail)?;
            if let PoolState::Present(p) = model {
                let at = (offset - DATA_OFFSET) as usize;
                p.data[at..at + bytes.len()].copy_from_slice(&bytes);
            }
            ranges.push((offset, len));
        }
        Ok(ranges)
    }
}

impl Workload for TrackingWorkload {
    type State = PoolState;
    type Recovered = Option<Pool>;

    fn name(&self) -> String {
        format!("pool-tracking({} writes a batch)", self.writes)
    }

    fn capacity(&self) -> u64 {
        1 << 20
    }

    fn initial(&self) -> PoolState {
        PoolState::Absent
    }

    fn run(&self, run: &mut Run<PoolState>) -> Result<(), String> {
        let pool = create(run.media(), NAME, Self::SIZE, self.capacity())?;
        let mut model = state_of(&pool)?;
        run.ack(model.clone());
        for tracked in [false, true] {
            let ranges = self.store(&pool, run, &mut model)?;
            if !tracked {
                pool.enable_tracking(mnemo_pmem::track::Tracking::Api)
                    .map_err(fail)?;
            }
            for (offset, len) in ranges {
                pool.msync(offset, len).map_err(fail)?;
            }
            run.ack(model.clone());
        }
        pool.close().map_err(fail)?;
        if let PoolState::Present(p) = &mut model {
            p.clean = true;
        }
        run.ack(model);
        Ok(())
    }

    pool_checks!();
}

/// Workload "deferred acknowledgements": a write-ahead pool mapped copy-on-write
/// ([`crate::Medium::PagePrivate`]) acknowledges its sync points before they are durable
/// (`Pool::defer_acks_pumped`, no thread: deterministic), as `mnemo serve` does on a disk.
/// Operation `i` stores `i + 1` into slot `i` (a word of its own) and syncs it; every one to
/// four operations the records are made durable (`Pool::pump_acks`), and an operation is
/// acknowledged only once the durable mark reaches the mark it was appended at. After a crash
/// the slots must hold a *prefix* of the operations (never a later one without an earlier:
/// the pool file changes only through checkpoints of durable records) that covers every
/// acknowledged one and goes no further than what was appended. Ends with a clean close.
#[derive(Clone, Copy, Debug)]
pub struct DeferredWorkload {
    /// Operations (slots).
    pub ops: u32,
}

/// The model of [`DeferredWorkload`]: how many operations a state holds (a prefix) and, for
/// an acknowledged state, how many had been appended by then (what a crash before the next
/// acknowledgement may show at most).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    /// Operations durable (acknowledged) or found (observed).
    pub done: usize,
    /// Operations appended when acknowledged (`done` when observed).
    pub appended: usize,
}

impl DeferredWorkload {
    fn slot(i: u64) -> u64 {
        DATA_OFFSET + i * 64
    }

    /// Operations done in the pool, if they form a prefix (slot `i` holds `i + 1` for the
    /// first `k`, zero after).
    fn prefix(&self, pool: &Pool) -> Result<usize, String> {
        let slots: Vec<u64> = (0..u64::from(self.ops))
            .map(|i| {
                let mut word = [0u8; 8];
                pool.read(Self::slot(i), &mut word).map_err(fail)?;
                Ok(u64::from_le_bytes(word))
            })
            .collect::<Result<_, String>>()?;
        let k = slots
            .iter()
            .enumerate()
            .take_while(|&(i, &v)| v == i as u64 + 1)
            .count();
        match slots[k..].iter().position(|&v| v != 0) {
            None => Ok(k),
            Some(j) => Err(format!(
                "slot {} holds {} after the first {k} operations: not a prefix of the history",
                k + j,
                slots[k + j]
            )),
        }
    }
}

impl Workload for DeferredWorkload {
    /// `None`: no pool yet.
    type State = Option<Prefix>;
    type Recovered = Option<Pool>;

    fn name(&self) -> String {
        format!("pool-deferred-acks({} ops)", self.ops)
    }

    fn capacity(&self) -> u64 {
        1 << 20
    }

    fn initial(&self) -> Option<Prefix> {
        None
    }

    fn run(&self, run: &mut Run<Option<Prefix>>) -> Result<(), String> {
        let pool = create(run.media(), NAME, POOL_SIZE_MIN, 1 << 20)?;
        run.ack(Some(Prefix {
            done: 0,
            appended: 0,
        }));
        if !pool.defer_acks_pumped() {
            return Err(
                "deferred acknowledgements refused: the medium must be a private \
                        page-cache file with a write-ahead file"
                    .into(),
            );
        }
        let marks = |pool: &Pool| -> Result<(u64, u64), String> {
            pool.ack_marks()
                .ok_or("no marks under deferred acknowledgements")?
                .map_err(fail)
        };
        let mut pending: Vec<(u64, usize)> = Vec::new();
        let mut until_pump = 1 + run.rng().below(4);
        for i in 0..u64::from(self.ops) {
            pool.write(Self::slot(i), &(i + 1).to_le_bytes())
                .map_err(fail)?;
            pool.msync(Self::slot(i), 8).map_err(fail)?;
            let appended = i as usize + 1;
            pending.push((marks(&pool)?.0, appended));
            until_pump -= 1;
            if until_pump == 0 {
                pool.pump_acks().map_err(fail)?;
                until_pump = 1 + run.rng().below(4);
            }
            let durable = marks(&pool)?.1;
            // Acknowledge every operation whose record the durable mark covers.
            if let Some(pos) = pending.iter().rposition(|&(mark, _)| mark <= durable) {
                let done = pending[pos].1;
                pending.drain(..=pos);
                run.ack(Some(Prefix { done, appended }));
            }
        }
        pool.close().map_err(fail)?;
        let all = self.ops as usize;
        run.ack(Some(Prefix {
            done: all,
            appended: all,
        }));
        Ok(())
    }

    fn recover(&self, media: SimMedia) -> Result<Option<Pool>, String> {
        open(media)
    }

    fn observe(&self, recovered: &Option<Pool>) -> Result<Option<Prefix>, String> {
        let Some(pool) = recovered else {
            return Ok(None);
        };
        let done = self.prefix(pool)?;
        Ok(Some(Prefix {
            done,
            appended: done,
        }))
    }

    /// A prefix of the history, at least what was acknowledged, at most what had been
    /// appended by the next acknowledgement (several operations may be in flight at once).
    fn accept(
        &self,
        observed: &Option<Prefix>,
        acked: &Option<Prefix>,
        in_flight: Option<&Option<Prefix>>,
    ) -> Result<(), String> {
        let high = match in_flight {
            Some(next) => next.map(|p| p.appended),
            None => acked.map(|p| p.appended),
        };
        let ok = match (observed, acked) {
            // No pool: only while its creation had not been acknowledged.
            (None, acked) => acked.is_none(),
            (Some(seen), acked) => {
                seen.done >= acked.map_or(0, |p| p.done) && high.is_some_and(|h| seen.done <= h)
            }
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "observed {observed:?}; acknowledged {acked:?}, at most {high:?} appended"
            ))
        }
    }

    fn same_recovery(
        &self,
        first: &Option<Prefix>,
        second: &Option<Prefix>,
        _acked: &Option<Prefix>,
        _in_flight: Option<&Option<Prefix>>,
    ) -> Result<(), String> {
        if first == second {
            return Ok(());
        }
        Err(format!(
            "recovery after a crash during recovery gave {second:?}, uninterrupted recovery gave {first:?}"
        ))
    }

    fn follow_on(&self, recovered: Option<Pool>, media: &SimMedia) -> Result<(), String> {
        follow_on(recovered, media)
    }
}
