//! Deterministic concurrency over the simulated medium (`--cfg mnemo_shuttle` only:
//! `scripts/test-shuttle.sh`).
//!
//! A multi-thread workload runs as one execution of the shuttle crate's controlled
//! scheduler: every thread is a shuttle task, and the layers' locks, atomics and
//! thread-locals are shuttle's (mnemo-heap's `src/sync.rs`), so the scheduler decides every
//! interleaving, from a seed. The [`crate::SimMedia`] records a crash point at every fence of every
//! task (a fence writes back only its own task's flushes), and [`images`] builds the crash
//! images of a point as the single-threaded explorer does ([`crate::cuts`]).
//!
//! A [`Schedule`] is a scheduler and a seed: [`run`] replays it exactly, and its text form
//! (`random:SEED`, `pct3:SEED`) is what a failure prints and what `MNEMO_CONC_REPLAY`
//! takes ([`replay_target`]). Everything else a schedule does (the workload's choices, the
//! cuts) must come from the same seed.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

use shuttle::scheduler::{PctScheduler, RandomScheduler};
use shuttle::{Config, FailurePersistence, MaxSteps, Runner};

use crate::explore::{cuts, Cut, Sampling};
use crate::rng::{mix64, SimRng};
use crate::sim::CrashPoint;

/// Which of shuttle's schedulers decides the interleaving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheduler {
    /// A random runnable task at every switch.
    Random,
    /// Probabilistic concurrency testing (Burckhardt et al., ASPLOS 2010) with this bug depth:
    /// random task priorities and `depth - 1` random priority-change points. Its first
    /// execution (oldest task first) only measures the step count; the schedule is the
    /// second.
    Pct(usize),
}

/// One schedule: a scheduler and its seed. Display and `FromStr`: `random:SEED`, `pctD:SEED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The scheduler.
    pub scheduler: Scheduler,
    /// Its seed (also the seed of the workload's own choices and of the cuts).
    pub seed: u64,
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.scheduler {
            Scheduler::Random => write!(f, "random:{}", self.seed),
            Scheduler::Pct(depth) => write!(f, "pct{depth}:{}", self.seed),
        }
    }
}

impl FromStr for Schedule {
    type Err = String;

    fn from_str(s: &str) -> Result<Schedule, String> {
        let bad = || format!("a schedule is random:SEED or pctDEPTH:SEED, not {s:?}");
        let (kind, seed) = s.trim().split_once(':').ok_or_else(bad)?;
        let seed = seed.parse::<u64>().map_err(|_| bad())?;
        let scheduler = if kind == "random" {
            Scheduler::Random
        } else {
            let depth = kind.strip_prefix("pct").ok_or_else(bad)?;
            Scheduler::Pct(
                depth
                    .parse::<usize>()
                    .ok()
                    .filter(|&d| d > 0)
                    .ok_or_else(bad)?,
            )
        };
        Ok(Schedule { scheduler, seed })
    }
}

/// `count` schedules derived from `base`: random and PCT (depths 2 and 3) in turn.
pub fn schedules(base: u64, count: u64) -> Vec<Schedule> {
    (0..count)
        .map(|i| Schedule {
            scheduler: match i % 3 {
                0 => Scheduler::Random,
                1 => Scheduler::Pct(2),
                _ => Scheduler::Pct(3),
            },
            seed: mix64(base ^ mix64(i + 1)),
        })
        .collect()
}

/// The schedule `MNEMO_CONC_REPLAY` names, if set: a test runs that one alone.
///
/// # Panics
/// If the variable is set but is not a schedule.
pub fn replay_target() -> Option<Schedule> {
    let text = std::env::var("MNEMO_CONC_REPLAY").ok()?;
    if text.trim().starts_with("bounded") {
        // A systematic schedule ([`Bounded`]): the test that enumerates them replays it.
        return None;
    }
    Some(
        text.parse()
            .unwrap_or_else(|e| panic!("MNEMO_CONC_REPLAY: {e}")),
    )
}

/// How many schedules a test runs: `default`, or `MNEMO_CONC_SCHEDULES` if set.
pub fn schedule_count(default: u64) -> u64 {
    std::env::var("MNEMO_CONC_SCHEDULES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Run `f` as the main task of one shuttle execution scheduled by `schedule` (twice for
/// PCT: the first execution measures, the second is the schedule; `f` receives whether its
/// execution is the schedule, and should check only then). A panic in any task is returned
/// as `Err` with its message.
pub fn run(schedule: Schedule, f: impl Fn(bool) + Send + Sync + 'static) -> Result<(), String> {
    let mut config = Config::new();
    // Recovery and the checks run in the main task: deeper stacks than shuttle's 60 KiB.
    config.stack_size = 4 << 20;
    config.failure_persistence = FailurePersistence::None;
    config.max_steps = MaxSteps::None;
    config.silence_warnings = true;
    let executions = Arc::new(Mutex::new(0usize));
    let counted = Arc::clone(&executions);
    let body = move || {
        let n = {
            let mut n = counted.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            *n
        };
        let real = match schedule.scheduler {
            Scheduler::Random => true,
            Scheduler::Pct(_) => n == 2,
        };
        f(real);
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| match schedule.scheduler {
        Scheduler::Random => {
            Runner::new(RandomScheduler::new_from_seed(schedule.seed, 1), config).run(body);
        }
        Scheduler::Pct(depth) => {
            Runner::new(PctScheduler::new_from_seed(schedule.seed, depth, 2), config).run(body);
        }
    }));
    outcome.map_err(|panic| {
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

/// At most `k` cuts of a point with `n` pending units: every subset when there are at most
/// `k`, else no unit, every unit, and `k - 2` seeded ones (a single unit, all but one, or a
/// random subset of density 1/8 to 7/8, in turn); `k = 1`: one seeded cut of any of these
/// kinds.
pub fn sample_cuts(n: usize, k: usize, rng: &mut SimRng) -> Vec<Cut> {
    if n < 63 && (1u64 << n) <= k as u64 {
        return (0..1u64 << n).map(Cut::Mask).collect();
    }
    if k == 1 {
        let unit = rng.below(n as u64) as u32;
        let density = f64::from(rng.below(7) as u32 + 1) / 8.0;
        return vec![match rng.below(5) {
            0 => Cut::None,
            1 => Cut::All,
            2 => Cut::Only(unit),
            3 => Cut::AllBut(unit),
            _ => Cut::Set((0..n as u32).filter(|_| rng.chance(density)).collect()),
        }];
    }
    let mut out = vec![Cut::None, Cut::All];
    for i in 0..k.saturating_sub(2) {
        let unit = rng.below(n as u64) as u32;
        out.push(match i % 3 {
            0 => Cut::Only(unit),
            1 => Cut::AllBut(unit),
            _ => {
                let density = f64::from(rng.below(7) as u32 + 1) / 8.0;
                Cut::Set((0..n as u32).filter(|_| rng.chance(density)).collect())
            }
        });
    }
    out
}

/// The image of `point` that `cut` gives: its durable image with the kept units' words.
pub fn image(point: &CrashPoint, cut: &Cut) -> Vec<u8> {
    let mut image = point.durable.to_vec();
    for (i, unit) in point.units.iter().enumerate() {
        if cut.keeps(i as u32) {
            for word in &point.words[unit.start as usize..unit.end as usize] {
                let at = word.offset as usize;
                image[at..at + 8].copy_from_slice(&word.new.to_le_bytes());
            }
        }
    }
    image
}

/// The image of `point` that `cut` gives on a page-cache medium with a write-ahead file
/// ([`crate::SimOptions::wal_bytes`]): the pool file (as short as the cut leaves its
/// length) and the write-ahead file, each its durable image with the kept units' words
/// (cuts count the pool's units, then the file's, then the pool's length:
/// [`CrashPoint::unit_count`]).
pub fn images_with_file(point: &CrashPoint, cut: &Cut) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut image = point.durable.to_vec();
    let mut file = point.file.as_ref().map(|f| f.durable.to_vec());
    crate::explore::set_cut(&mut image, file.as_deref_mut(), point, cut, true);
    image.truncate(crate::explore::cut_len(point, cut));
    (image, file)
}

/// The crash images of `point` under `sampling` (every subset of its pending units when
/// there are few, else the explorer's bundle: none, all, all but one, only one, pairs,
/// seeded random subsets), each with its cut.
pub fn images(point: &CrashPoint, sampling: &Sampling, rng: &mut SimRng) -> Vec<(Cut, Vec<u8>)> {
    let (cuts, _) = cuts(point.units.len(), sampling, rng);
    cuts.into_iter()
        .map(|cut| {
            let image = image(point, &cut);
            (cut, image)
        })
        .collect()
}

/// A systematic scheduler: every schedule with at most `bound` preemptions (a switch away
/// from a task that could go on), in depth-first order, as CHESS does (Musuvathi and Qadeer,
/// PLDI 2007): few preemptions find most concurrency bugs, and bounding them makes the
/// enumeration finite and small. A yielding task (a spin loop's `yield_now`) is switched away
/// from for free and is not chosen again while another task can run (else a spin loop would
/// make the search infinite). Schedules are numbered from 0 in the order they run: with the
/// same workload, schedule `i` of one enumeration is schedule `i` of any other.
#[derive(Debug)]
pub struct Bounded {
    bound: usize,
    max: Option<usize>,
    levels: Vec<Level>,
    step: usize,
    executions: usize,
}

#[derive(Debug)]
struct Level {
    /// The task chosen at this switch, and the preemptions up to and including it.
    choice: shuttle::scheduler::TaskId,
    preemptions: usize,
    /// Choices not tried yet, with the preemptions each would make the total.
    untried: Vec<(shuttle::scheduler::TaskId, usize)>,
}

impl Bounded {
    /// Every schedule with at most `bound` preemptions, or the first `max` of them.
    pub fn new(bound: usize, max: Option<usize>) -> Bounded {
        Bounded {
            bound,
            max,
            levels: Vec::new(),
            step: 0,
            executions: 0,
        }
    }
}

impl shuttle::scheduler::Scheduler for Bounded {
    fn new_execution(&mut self) -> Option<shuttle::scheduler::Schedule> {
        if self.max.is_some_and(|max| self.executions >= max) {
            return None;
        }
        if self.executions > 0 {
            // Backtrack to the deepest switch with a choice left, and take it.
            loop {
                let last = self.levels.last_mut()?;
                if let Some((choice, preemptions)) = last.untried.pop() {
                    last.choice = choice;
                    last.preemptions = preemptions;
                    break;
                }
                self.levels.pop();
            }
        }
        self.executions += 1;
        self.step = 0;
        Some(shuttle::scheduler::Schedule::new(0))
    }

    fn next_task(
        &mut self,
        runnable: &[&shuttle::scheduler::Task],
        current: Option<shuttle::scheduler::TaskId>,
        yielding: bool,
    ) -> Option<shuttle::scheduler::TaskId> {
        let step = self.step;
        self.step += 1;
        if let Some(level) = self.levels.get(step) {
            return Some(level.choice);
        }
        let before = step
            .checked_sub(1)
            .and_then(|s| self.levels.get(s))
            .map_or(0, |l| l.preemptions);
        let ids: Vec<_> = runnable.iter().map(|t| t.id()).collect();
        let goes_on = current.filter(|c| ids.contains(c) && !yielding);
        let mut options: Vec<(shuttle::scheduler::TaskId, usize)> = Vec::new();
        match goes_on {
            Some(c) => {
                options.push((c, before));
                if before < self.bound {
                    options.extend(ids.iter().filter(|&&t| t != c).map(|&t| (t, before + 1)));
                }
            }
            None => {
                let others: Vec<_> = ids
                    .iter()
                    .copied()
                    .filter(|&t| !(yielding && Some(t) == current) || ids.len() == 1)
                    .collect();
                options.extend(others.into_iter().map(|t| (t, before)));
            }
        }
        let (choice, preemptions) = options.remove(0);
        options.reverse();
        self.levels.push(Level {
            choice,
            preemptions,
            untried: options,
        });
        Some(choice)
    }

    fn next_u64(&mut self) -> u64 {
        0
    }
}

/// Run `f` under every schedule [`Bounded`] by `bound` preemptions enumerates (at most
/// `max`), each as one execution; `f` receives the schedule's number. Returns how many ran,
/// or the first panic with the number of its schedule.
pub fn run_bounded(
    bound: usize,
    max: Option<usize>,
    f: impl Fn(usize) + Send + Sync + 'static,
) -> Result<usize, String> {
    let mut config = Config::new();
    config.stack_size = 4 << 20;
    config.failure_persistence = FailurePersistence::None;
    config.max_steps = MaxSteps::None;
    config.silence_warnings = true;
    let counter = Arc::new(Mutex::new(0usize));
    let seen = Arc::clone(&counter);
    let body = move || {
        let n = {
            let mut n = seen.lock().unwrap_or_else(|p| p.into_inner());
            *n += 1;
            *n - 1
        };
        f(n);
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        Runner::new(Bounded::new(bound, max), config).run(body)
    }));
    outcome.map_err(|panic| {
        let n = *counter.lock().unwrap_or_else(|p| p.into_inner());
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_else(|| "a panic without a message".into());
        format!("bounded schedule {}: {message}", n.saturating_sub(1))
    })
}
