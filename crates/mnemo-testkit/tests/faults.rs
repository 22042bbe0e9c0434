//! I/O errors and ENOSPC injected at the Nth call of `drain`, `grow` and `ensure_backed`,
//! failing once or forever, during a workload and during recovery (open): every fault must
//! surface as a clean `Err` (no panic), and afterwards the pool must open with everything
//! that was acknowledged.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use mnemo_pmem::limits::{DATA_OFFSET, PAGE_SIZE, POOL_SIZE_MIN};
use mnemo_pmem::{Error, Media, OpenOptions, Pool};
use mnemo_testkit::pool::{create_options, LAYOUT, NAME};
use mnemo_testkit::{FaultKind, FaultOp, FaultPlan, FaultyMedia, SimMedia, SimRng};

const CAPACITY: u64 = 256 << 10;

/// What the workload got acknowledged.
#[derive(Debug, Default)]
struct Acked {
    uuid: Option<uuid::Uuid>,
    size: u64,
    writes: Vec<(u64, Vec<u8>)>,
    errors: u32,
}

/// Retry once: a transient fault must not leave the pool unusable.
fn retry<T>(acked: &mut Acked, mut op: impl FnMut() -> Result<T, Error>) -> Result<T, Error> {
    match op() {
        Ok(v) => Ok(v),
        Err(_) => {
            acked.errors += 1;
            op()
        }
    }
}

/// Create, then writes synced with msync, space reserved and growth, then close. Stops at
/// the first error that a retry does not clear.
fn workload(media: Box<dyn Media>, acked: &mut Acked) -> Result<(), Error> {
    let pool = Pool::create_on(
        media,
        Path::new(NAME),
        &create_options(POOL_SIZE_MIN, CAPACITY),
    )?;
    acked.uuid = Some(pool.header().pool_uuid);
    acked.size = pool.size();
    let mut rng = SimRng::new(11);
    for i in 0..6u64 {
        let offset = DATA_OFFSET + i * 1000 + rng.below(500);
        let mut bytes = vec![0u8; 1 + rng.below(100) as usize];
        rng.fill(&mut bytes);
        pool.write(offset, &bytes)?;
        retry(acked, || pool.msync(offset, bytes.len() as u64))?;
        acked.writes.push((offset, bytes));
        if i % 2 == 1 {
            let size = pool.size();
            retry(acked, || pool.ensure_backed(size, PAGE_SIZE))?;
            retry(acked, || pool.grow(size + PAGE_SIZE))?;
            acked.size = pool.size();
        }
    }
    // An empty sync point: one fence, which may fail like any other.
    retry(acked, || pool.gmsync(&[]))?;
    pool.close()
}

fn open(media: Box<dyn Media>) -> Result<Pool, Error> {
    Pool::open_on(
        media,
        Path::new(NAME),
        &OpenOptions {
            layout: Some(LAYOUT.into()),
            size_max: None,
            policy: None,
        },
    )
}

/// The pool on `media` holds everything in `acked`.
fn verify(media: SimMedia, acked: &Acked, context: &str) {
    let Some(uuid) = acked.uuid else { return };
    let pool =
        open(Box::new(media)).unwrap_or_else(|e| panic!("{context}: pool does not open: {e}"));
    assert_eq!(pool.header().pool_uuid, uuid, "{context}: identity changed");
    assert!(
        pool.size() >= acked.size && pool.size() <= CAPACITY,
        "{context}: size {} < {}",
        pool.size(),
        acked.size
    );
    for (offset, bytes) in &acked.writes {
        let mut back = vec![0u8; bytes.len()];
        pool.read(*offset, &mut back)
            .unwrap_or_else(|e| panic!("{context}: {e}"));
        assert_eq!(
            &back, bytes,
            "{context}: acknowledged write at {offset} lost"
        );
    }
    pool.close()
        .unwrap_or_else(|e| panic!("{context}: close: {e}"));
}

fn plans(op: FaultOp, calls: u64) -> Vec<FaultPlan> {
    let mut out = Vec::new();
    for nth in 0..=calls {
        for forever in [false, true] {
            for kind in [FaultKind::Io, FaultKind::NoSpace] {
                out.push(FaultPlan {
                    op,
                    nth,
                    forever,
                    kind,
                });
            }
        }
    }
    out
}

fn calls_of_clean_run() -> [u64; 3] {
    let probe = FaultyMedia::new(Box::new(SimMedia::new(CAPACITY)), None);
    let mut acked = Acked::default();
    workload(Box::new(probe.clone()), &mut acked).expect("the workload runs without faults");
    [
        probe.calls(FaultOp::Drain),
        probe.calls(FaultOp::Grow),
        probe.calls(FaultOp::EnsureBacked),
    ]
}

#[test]
fn injected_faults_give_clean_errors_and_lose_nothing_acknowledged() {
    let [drains, grows, backs] = calls_of_clean_run();
    assert!(
        drains > 5 && grows > 1 && backs > 1,
        "{drains} {grows} {backs}"
    );
    let mut runs = 0;
    let mut failed_runs = 0;
    let mut injected = 0;
    for (op, calls) in [
        (FaultOp::Drain, drains),
        (FaultOp::Grow, grows),
        (FaultOp::EnsureBacked, backs),
    ] {
        for plan in plans(op, calls) {
            let sim = SimMedia::new(CAPACITY);
            let probe = FaultyMedia::new(Box::new(sim.clone()), Some(plan));
            let mut acked = Acked::default();
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                workload(Box::new(probe.clone()), &mut acked)
            }));
            let result = outcome.unwrap_or_else(|_| {
                panic!("{plan:?}: the workload panicked instead of failing cleanly")
            });
            runs += 1;
            injected += probe.injected();
            if result.is_err() {
                failed_runs += 1;
            }
            if plan.nth < calls {
                assert!(probe.injected() > 0, "{plan:?}: the fault never fired");
            }
            // A crash now: only what is durable survives. Then a clean restart.
            verify(sim.crash(), &acked, &format!("{plan:?}: after a crash"));
        }
    }
    eprintln!("testkit faults: {runs} runs, {injected} faults injected, {failed_runs} runs stopped by an error, 0 panics, all acknowledged data kept");
}

#[test]
fn faults_during_recovery_are_clean_and_recovery_retries() {
    // A crashed pool with acknowledged data and an unclean header.
    let sim = SimMedia::new(CAPACITY);
    let mut acked = Acked::default();
    let pool = Pool::create_on(
        Box::new(sim.clone()),
        Path::new(NAME),
        &create_options(POOL_SIZE_MIN, CAPACITY),
    )
    .expect("create");
    acked.uuid = Some(pool.header().pool_uuid);
    acked.size = pool.size();
    pool.write(DATA_OFFSET, b"acknowledged").expect("write");
    pool.msync(DATA_OFFSET, 12).expect("msync");
    acked.writes.push((DATA_OFFSET, b"acknowledged".to_vec()));
    // A crash now (the pool was never closed): only the durable image survives.
    let crashed = sim.crash();
    drop(pool);
    let mut errors = 0;
    for plan in plans(FaultOp::Drain, 3)
        .into_iter()
        .chain(plans(FaultOp::EnsureBacked, 1))
    {
        let image = crashed.crash();
        let faulty = FaultyMedia::new(Box::new(image.clone()), Some(plan));
        let result = catch_unwind(AssertUnwindSafe(|| open(Box::new(faulty))));
        let result = result.unwrap_or_else(|_| panic!("{plan:?}: open panicked"));
        if result.is_err() {
            errors += 1;
        }
        drop(result);
        // The interrupted recovery may have left anything durable; a crash, then open again.
        verify(
            image.crash(),
            &acked,
            &format!("{plan:?}: recovery after a failed recovery"),
        );
        // And without a crash: retry on the same medium.
        verify(
            image,
            &acked,
            &format!("{plan:?}: retry on the same medium"),
        );
    }
    assert!(errors > 0, "some injected faults must fail the open");
    eprintln!("testkit recovery faults: {errors} opens failed cleanly, every retry recovered");
}
