//! The latency monitor (LATENCY LATEST, HISTORY, RESET, DOCTOR, GRAPH), as Redis 7.0's
//! `latency.c` keeps it for commands: with `latency-monitor-threshold` N > 0 (CONFIG), a
//! command that took N ms or more is a sample of the event `command` (`fast-command` for a
//! command flagged fast); each event keeps its worst latency and a ring of 160 samples, one
//! per second (the worst of that second). With the threshold 0 (Redis's default) nothing
//! is sampled and every report is empty, as in Redis. Volatile, as in Redis.
//!
//! Not as in Redis: DOCTOR lists the events without Redis's advice paragraphs, GRAPH of an
//! event with samples is refused (no ASCII graph), and mnemo samples only commands (Redis
//! also samples its own fork, AOF and expiry cycles, which mnemo does not have).

use mnemo_resp::bytes::Bytes;
use mnemo_resp::{CommandId as Id, Reply};

use super::commands::{err, err_owned};

/// Samples kept per event (Redis's `LATENCY_TS_LEN`).
const SAMPLES: usize = 160;

#[derive(Debug)]
struct Series {
    event: &'static str,
    /// (Unix seconds, milliseconds); time 0 is an empty slot.
    samples: [(i64, i64); SAMPLES],
    next: usize,
    max: i64,
}

/// The monitor's events, in the order they first occurred.
#[derive(Debug, Default)]
pub struct Monitor {
    /// `latency-monitor-threshold` in ms; 0 turns the monitor off.
    pub threshold_ms: i64,
    events: Vec<Series>,
}

impl Monitor {
    /// Whether commands must be timed for the monitor.
    pub fn on(&self) -> bool {
        self.threshold_ms > 0
    }

    /// A command took `took_ms` at `unix_s` (`latencyAddSampleIfNeeded`).
    pub fn record(&mut self, fast: bool, took_ms: i64, unix_s: i64) {
        if !self.on() || took_ms < self.threshold_ms {
            return;
        }
        let event = if fast { "fast-command" } else { "command" };
        let at = match self.events.iter().position(|s| s.event == event) {
            Some(at) => at,
            None => {
                self.events.push(Series {
                    event,
                    samples: [(0, 0); SAMPLES],
                    next: 0,
                    max: 0,
                });
                self.events.len() - 1
            }
        };
        let series = &mut self.events[at];
        series.max = series.max.max(took_ms);
        let previous = &mut series.samples[(series.next + SAMPLES - 1) % SAMPLES];
        if previous.0 == unix_s {
            previous.1 = previous.1.max(took_ms);
            return;
        }
        series.samples[series.next] = (unix_s, took_ms);
        series.next = (series.next + 1) % SAMPLES;
    }

    fn find(&self, event: &[u8]) -> Option<&Series> {
        self.events.iter().find(|s| s.event.as_bytes() == event)
    }

    /// LATENCY LATEST, HISTORY, RESET, DOCTOR, GRAPH.
    pub fn run(&mut self, id: Id, args: &[Bytes]) -> Reply {
        match id {
            Id::LatencyLatest => Reply::Array(
                self.events
                    .iter()
                    .map(|s| {
                        let (time, ms) = s.samples[(s.next + SAMPLES - 1) % SAMPLES];
                        Reply::Array(vec![
                            Reply::Bulk(Bytes::from_static(s.event.as_bytes())),
                            Reply::Integer(time),
                            Reply::Integer(ms),
                            Reply::Integer(s.max),
                        ])
                    })
                    .collect(),
            ),
            Id::LatencyHistory => Reply::Array(match self.find(&args[2]) {
                None => Vec::new(),
                Some(s) => (0..SAMPLES)
                    .map(|i| s.samples[(s.next + i) % SAMPLES])
                    .filter(|&(time, _)| time != 0)
                    .map(|(time, ms)| Reply::Array(vec![Reply::Integer(time), Reply::Integer(ms)]))
                    .collect(),
            }),
            Id::LatencyReset => {
                let before = self.events.len();
                if args.len() == 2 {
                    self.events.clear();
                } else {
                    self.events
                        .retain(|s| !args[2..].iter().any(|a| a[..] == *s.event.as_bytes()));
                }
                Reply::Integer((before - self.events.len()) as i64)
            }
            Id::LatencyGraph => match self.find(&args[2]) {
                None => err_owned(format!(
                    "ERR No samples available for event '{}'",
                    String::from_utf8_lossy(&args[2])
                )),
                Some(_) => err("ERR LATENCY GRAPH is not supported by mnemo"),
            },
            _ => self.doctor(),
        }
    }

    fn doctor(&self) -> Reply {
        let text = if !self.on() {
            LATENCY_DISABLED.to_string()
        } else if self.events.is_empty() {
            "Dave, no latency spike was observed during the lifetime of this Redis instance, \
             not in the slightest bit. I honestly think you ought to sit down calmly, take a \
             stress pill, and think things over.\n"
                .to_string()
        } else {
            let mut text = "Dave, I have observed latency spikes in this Redis instance. You \
                            don't mind talking about it, do you Dave?\n\n"
                .to_string();
            for (n, s) in self.events.iter().enumerate() {
                let samples: Vec<i64> = s
                    .samples
                    .iter()
                    .filter(|(time, _)| *time != 0)
                    .map(|&(_, ms)| ms)
                    .collect();
                let count = samples.len().max(1) as i64;
                let average = samples.iter().sum::<i64>() / count;
                text.push_str(&format!(
                    "{}. {}: {} latency spikes (average {}ms). Worst all time event {}ms.\n",
                    n + 1,
                    s.event,
                    samples.len(),
                    average,
                    s.max
                ));
            }
            text
        };
        Reply::Verbatim {
            format: *b"txt",
            text: Bytes::from(text),
        }
    }
}

const LATENCY_DISABLED: &str = "I'm sorry, Dave, I can't do that. Latency monitoring is disabled \
    in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" \
    in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at \
    https://redis.io/topics/latency-monitor.\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_sample_per_second_the_worst() {
        let mut monitor = Monitor {
            threshold_ms: 5,
            ..Monitor::default()
        };
        monitor.record(false, 4, 100);
        assert!(monitor.events.is_empty());
        monitor.record(false, 7, 100);
        monitor.record(false, 9, 100);
        monitor.record(false, 6, 100);
        monitor.record(true, 5, 101);
        monitor.record(false, 20, 102);
        let history = monitor.run(
            Id::LatencyHistory,
            &[Bytes::new(), Bytes::new(), "command".into()],
        );
        let pair = |t, ms| Reply::Array(vec![Reply::Integer(t), Reply::Integer(ms)]);
        assert_eq!(history, Reply::Array(vec![pair(100, 9), pair(102, 20)]));
        for t in 0..200 {
            monitor.record(false, 5, 1000 + t);
        }
        let Reply::Array(kept) = monitor.run(
            Id::LatencyHistory,
            &[Bytes::new(), Bytes::new(), "command".into()],
        ) else {
            panic!("an array");
        };
        assert_eq!(kept.len(), SAMPLES);
        assert_eq!(kept.first(), Some(&pair(1040, 5)));
        let reset = monitor.run(Id::LatencyReset, &[Bytes::new(), Bytes::new()]);
        assert_eq!(reset, Reply::Integer(2));
    }
}
