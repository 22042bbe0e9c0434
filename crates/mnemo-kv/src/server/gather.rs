//! Commit gathering: a writing batch waits a moment for the clients its loop has just
//! answered, so that one sync point covers them too.
//!
//! Closed-loop clients fall into cohorts behind a slow sync point. Fifty clients writing to
//! a pool on a disk: the first batch takes the requests that have arrived, and while its
//! `fdatasync` runs the other clients' requests queue up. When it returns, the loop answers
//! the first cohort and at once commits the second, which arrived during that sync; the
//! first cohort's next requests arrive a few microseconds later and wait for the second's
//! sync. Each sync point then covers half the clients, and each client waits for two syncs
//! per request. PostgreSQL's `commit_delay` answers this with a fixed wait; here the wait
//! follows what the loop measures of its commits: how long each waited for its storage
//! (its time less the loop thread's CPU time in it: an `fdatasync`, a mirror's
//! acknowledgement), and of its clients: which come back quickly.
//!
//! A writing batch waits only for connections answered by the last delivery that have not
//! sent since, and of those only for quick ones: a connection is quick when its last
//! request came back before the next commit after its answer, or after that one commit if
//! it was not being waited for (a client that came back while the loop sat in a commit).
//! The wait ends when they have all sent, and never later than half a commit's storage wait
//! after they were answered (nor [`GATHER_WAIT_MAX`](super::limits::GATHER_WAIT_MAX)): a
//! straggler costs at most half the wait the others save. A connection still silent when a
//! wait runs out is slow until it is quick again. So a client that thinks between requests
//! is waited for at most once; a single client is itself in the batch and waits for
//! nobody; on persistent memory a commit is the loop's own work (flushes, no wait), there
//! is nothing to save, and nobody waits.

use std::time::{Duration, Instant};

use super::limits::GATHER_WAIT_MAX;

/// A moving average of durations, in nanoseconds: each sample moves it by 1/8 of the
/// difference (no sample yet: `None`).
#[derive(Clone, Copy, Debug, Default)]
struct Average(Option<u64>);

impl Average {
    fn add(&mut self, sample: Duration, weight_shift: u32) {
        let sample = u64::try_from(sample.as_nanos()).unwrap_or(u64::MAX);
        self.0 = Some(match self.0 {
            None => sample,
            Some(old) if sample >= old => old + ((sample - old) >> weight_shift),
            Some(old) => old - ((old - sample) >> weight_shift),
        });
    }

    fn get(self) -> Option<Duration> {
        self.0.map(Duration::from_nanos)
    }
}

/// The measurements behind the wait, and whether waiting is on at all (off by default).
#[derive(Clone, Debug, Default)]
pub(crate) struct Gather {
    enabled: bool,
    commit: Average,
    turnaround: Average,
    /// Commits so far (a connection's turnaround is counted in commits).
    commits: u64,
    /// Until when the connections the last delivery answered are waited for.
    until: Option<Instant>,
}

/// What the loop knows of one connection's pace.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Pace {
    /// When its replies were last written with nothing of it left unread, and the commit
    /// count then; until its next request is read.
    answered: Option<(Instant, u64)>,
    /// Its last request came back quickly (see the module's doc).
    quick: bool,
    /// A wait for it ran out since its last answer.
    missed: bool,
}

impl Gather {
    /// Turns waiting on or off (measurements go on either way).
    pub(crate) fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// Whether waiting is on (off: the loop measures nothing for it).
    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    /// A commit waited `waited` for its storage.
    pub(crate) fn committed(&mut self, waited: Duration) {
        self.commit.add(waited, 3);
        self.commits += 1;
    }

    /// A connection's replies were written at `at`, nothing of it left unread: returns
    /// whether its next request is worth waiting for.
    pub(crate) fn answered(&self, pace: &mut Pace, at: Instant) -> bool {
        pace.answered = Some((at, self.commits));
        pace.missed = false;
        self.enabled && pace.quick
    }

    /// A connection's next request was read at `now`; `waiting`: during a wait for it.
    pub(crate) fn arrived(&mut self, pace: &mut Pace, now: Instant, waiting: bool) {
        if let Some((at, commits)) = pace.answered.take() {
            let between = self.commits - commits;
            pace.quick = between == 0 || (between == 1 && !pace.missed);
            if waiting {
                // The loop was polling: the time is the client's own (the figures).
                self.turnaround.add(now.saturating_duration_since(at), 3);
            }
        }
    }

    /// A wait ran out with this connection still silent.
    pub(crate) fn missed(pace: &mut Pace) {
        pace.missed = true;
        pace.quick = false;
    }

    /// The last delivery's replies were written at `at`, and `any` of its connections is
    /// waited for: sets the wait's end.
    pub(crate) fn delivered(&mut self, at: Instant, any: bool) {
        self.until = match (any, self.commit.get()) {
            (true, Some(commit)) => Some(at + (commit / 2).min(GATHER_WAIT_MAX)),
            _ => None,
        };
    }

    /// Until when a writing batch read at `now` should wait for the connections the last
    /// delivery answered, if it should wait at all.
    pub(crate) fn deadline(&self, now: Instant) -> Option<Instant> {
        self.until.filter(|&until| self.enabled && until > now)
    }

    /// The current estimates (for INFO): a commit's storage wait, and the time a waited-for
    /// client took to send its next request.
    pub(crate) fn estimates(&self) -> (Option<Duration>, Option<Duration>) {
        (self.commit.get(), self.turnaround.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// A gather that has seen commits wait `commit` for their storage.
    fn settled(commit: Duration) -> Gather {
        let mut g = Gather::default();
        g.set_enabled(true);
        for _ in 0..64 {
            g.committed(commit);
        }
        g
    }

    #[test]
    fn the_wait_is_half_a_commit_at_most_from_the_answer() {
        let at = Instant::now();
        let mut g = settled(us(300));
        g.delivered(at, true);
        assert_eq!(g.deadline(at), Some(at + us(150)));
        // Read late in the window: still until the same moment; past it: no wait.
        assert_eq!(g.deadline(at + us(100)), Some(at + us(150)));
        assert_eq!(g.deadline(at + us(150)), None);
        let mut slow = settled(GATHER_WAIT_MAX * 10);
        slow.delivered(at, true);
        assert_eq!(slow.deadline(at), Some(at + GATHER_WAIT_MAX));
        // Nobody waited for, nothing measured, or off: no wait.
        g.delivered(at, false);
        assert_eq!(g.deadline(at), None);
        let mut fresh = Gather::default();
        fresh.set_enabled(true);
        fresh.delivered(at, true);
        assert_eq!(fresh.deadline(at), None);
        let mut off = settled(us(300));
        off.set_enabled(false);
        off.delivered(at, true);
        assert_eq!(off.deadline(at), None);
    }

    #[test]
    fn a_client_is_quick_when_it_comes_back_within_a_commit() {
        let at = Instant::now();
        let mut g = settled(us(300));
        let mut pace = Pace::default();
        // Never measured: not waited for.
        assert!(!g.answered(&mut pace, at));
        // Back before the next commit.
        g.arrived(&mut pace, at + us(40), false);
        assert!(g.answered(&mut pace, at + us(400)));
        // Back after one commit it was not waited for (it sent while the loop committed).
        g.committed(us(300));
        g.arrived(&mut pace, at + us(700), false);
        assert!(g.answered(&mut pace, at + us(800)));
        // Back after two commits: it thinks.
        g.committed(us(300));
        g.committed(us(300));
        g.arrived(&mut pace, at + us(1500), false);
        assert!(!g.answered(&mut pace, at + us(1600)));
    }

    #[test]
    fn a_wait_that_runs_out_makes_the_client_slow_until_it_is_quick_again() {
        let at = Instant::now();
        let mut g = settled(us(300));
        let mut pace = Pace::default();
        g.answered(&mut pace, at);
        g.arrived(&mut pace, at + us(40), true);
        assert!(g.answered(&mut pace, at + us(400)));
        // Waited for, did not come: slow, and one commit later is not quick enough.
        Gather::missed(&mut pace);
        g.committed(us(300));
        g.arrived(&mut pace, at + us(800), false);
        assert!(!g.answered(&mut pace, at + us(900)));
        // Quick again: waited for again.
        g.arrived(&mut pace, at + us(950), false);
        assert!(g.answered(&mut pace, at + us(1000)));
        // The figure: only the arrival during a wait was timed.
        assert_eq!(g.estimates().1, Some(us(40)));
        // Off: measured, never waited for.
        g.set_enabled(false);
        assert!(!g.answered(&mut pace, at + us(1100)));
    }
}
