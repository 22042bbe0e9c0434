//! The [`Workload`] trait: what a layer supplies to be crash-tested, and [`Run`], the handle
//! its operations report to.

use std::fmt::Debug;

use crate::rng::SimRng;
use crate::sim::SimMedia;

/// A crash-testable workload: operations on a pool on a [`SimMedia`], a model of the state
/// after each acknowledged operation, a recovery procedure and an observer.
///
/// The harness ([`crate::explore()`]) runs [`Workload::run`] once on a recording medium, then for
/// every crash image: [`Workload::recover`] on a medium built from the image,
/// [`Workload::observe`] (structural invariants, and the state the recovered pool holds),
/// [`Workload::accept`] against the model (every acknowledged operation present, the
/// operation in flight all-or-nothing), recovery again from crash images taken *during* that
/// recovery ([`Workload::same_recovery`]), and [`Workload::follow_on`].
///
/// Workloads must be single-threaded and deterministic given [`Run::rng`]: a failure is
/// replayed by running the workload again with the same seed.
pub trait Workload: Sync {
    /// The model's view of a pool: what observation yields and what acceptance compares.
    type State: Clone + Debug + PartialEq + Send + Sync;
    /// What recovery yields (an open pool, a heap on a pool, ...).
    type Recovered;

    /// Name for reports and replay instructions.
    fn name(&self) -> String;

    /// Capacity (address space) of the simulated medium.
    fn capacity(&self) -> u64 {
        4 << 20
    }

    /// The state before the first operation (e.g. "no pool" for a workload that creates it).
    fn initial(&self) -> Self::State;

    /// Run the operations on `run.media()`, calling [`Run::ack`] with the model state after
    /// each operation returns. An error means the workload itself failed (no crash involved).
    fn run(&self, run: &mut Run<Self::State>) -> Result<(), String>;

    /// Recover from a crash image: open the pool on `media` and run the layer's recovery.
    /// An error is a failure (unless the workload maps "nothing there yet" to a state).
    fn recover(&self, media: SimMedia) -> Result<Self::Recovered, String>;

    /// Check structural invariants of what recovery produced and return its state.
    fn observe(&self, recovered: &Self::Recovered) -> Result<Self::State, String>;

    /// Whether `observed` is acceptable when the crash came after the operations that lead to
    /// `acked` were acknowledged, while the next operation (leading to `in_flight`, if any)
    /// was running. Default: all-or-nothing, `observed` equals one of the two.
    fn accept(
        &self,
        observed: &Self::State,
        acked: &Self::State,
        in_flight: Option<&Self::State>,
    ) -> Result<(), String> {
        if observed == acked || in_flight == Some(observed) {
            return Ok(());
        }
        Err(format!("observed {observed:?}; acceptable: {acked:?} (acknowledged) or {in_flight:?} (in flight)"))
    }

    /// Whether a recovery interrupted by a second crash (giving `second`) reached the same
    /// state as the uninterrupted one (`first`). `acked` and `in_flight` are the model of the
    /// first crash, for workloads whose recovery may legitimately settle the in-flight
    /// operation either way until it returns. Default: equality.
    fn same_recovery(
        &self,
        first: &Self::State,
        second: &Self::State,
        acked: &Self::State,
        in_flight: Option<&Self::State>,
    ) -> Result<(), String> {
        let _ = (acked, in_flight);
        if first == second {
            return Ok(());
        }
        Err(format!("recovery after a crash during recovery gave {second:?}, uninterrupted recovery gave {first:?}"))
    }

    /// Continue after recovery: e.g. one more operation, close, reopen from the durable image
    /// (`media.crash()`) and check it. `media` is the medium `recovered` lives on.
    fn follow_on(&self, recovered: Self::Recovered, media: &SimMedia) -> Result<(), String>;
}

/// The handle a workload's run reports to.
#[derive(Debug)]
pub struct Run<S> {
    media: SimMedia,
    rng: SimRng,
    states: Vec<S>,
}

impl<S: Clone> Run<S> {
    pub(crate) fn new(media: SimMedia, seed: u64, initial: S) -> Run<S> {
        Run {
            media,
            rng: SimRng::derive(seed, u64::MAX),
            states: vec![initial],
        }
    }

    /// The medium to build the pool on: a new handle on the run's one medium, to pass to
    /// [`crate::pool::create`] or `Pool::create_on`.
    pub fn media(&self) -> SimMedia {
        self.media.clone()
    }

    /// The run's seeded generator: draw all workload data from it.
    pub fn rng(&mut self) -> &mut SimRng {
        &mut self.rng
    }

    /// The model state after the last acknowledged operation.
    pub fn state(&self) -> &S {
        self.states
            .last()
            .unwrap_or_else(|| unreachable!("a run starts with its initial state"))
    }

    /// The operation that just returned is acknowledged: from now on a crash must preserve
    /// `state` (the model state after it).
    pub fn ack(&mut self, state: S) {
        self.states.push(state);
        self.media.mark_ack();
    }

    pub(crate) fn into_states(self) -> Vec<S> {
        self.states
    }
}
