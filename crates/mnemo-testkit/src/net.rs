//! A simulated clock and network for the replication layer: sans-IO, deterministic from a
//! seed (TigerBeetle's VOPR, FoundationDB's simulation).
//!
//! Nodes exchange messages as bytes. The network delays each message by a seeded amount
//! within `delay_min_ns..=delay_max_ns`, and with configured probabilities drops it,
//! duplicates it, or holds it back long enough to reorder it behind later ones. Partitions
//! cut links in both directions; a message in flight over a link that is cut when it would
//! arrive is lost. The protocol under test calls [`SimNet::send`] and feeds what
//! [`SimNet::advance`] delivers to its nodes; no socket, no thread, no wall clock.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use crate::rng::SimRng;

/// A node's index.
pub type NodeId = usize;

/// Simulated time: nanoseconds since the simulation started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct SimClock {
    now_ns: u64,
}

impl SimClock {
    /// A clock at time zero.
    pub fn new() -> SimClock {
        SimClock::default()
    }

    /// Current time.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Move forward by `ns`.
    pub fn advance(&mut self, ns: u64) {
        self.now_ns = self.now_ns.saturating_add(ns);
    }

    /// Move forward to `ns` (never backwards).
    pub fn advance_to(&mut self, ns: u64) {
        self.now_ns = self.now_ns.max(ns);
    }
}

/// Fault probabilities and delays of a simulated network.
#[derive(Clone, Copy, Debug)]
pub struct NetConfig {
    /// Probability that a message is lost.
    pub drop: f64,
    /// Probability that a message is delivered twice (with independent delays).
    pub duplicate: f64,
    /// Probability that a message is held back by up to 10x the longest delay.
    pub reorder: f64,
    /// Shortest delay.
    pub delay_min_ns: u64,
    /// Longest ordinary delay.
    pub delay_max_ns: u64,
}

impl Default for NetConfig {
    /// A perfect network with 10-100 us delays.
    fn default() -> NetConfig {
        NetConfig {
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            delay_min_ns: 10_000,
            delay_max_ns: 100_000,
        }
    }
}

/// A message as delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Sender.
    pub from: NodeId,
    /// Receiver.
    pub to: NodeId,
    /// Payload.
    pub bytes: Vec<u8>,
    /// When it was sent.
    pub sent_ns: u64,
    /// When it arrives.
    pub deliver_ns: u64,
}

/// What the network did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Messages handed to [`SimNet::send`].
    pub sent: u64,
    /// Messages delivered.
    pub delivered: u64,
    /// Lost by the drop probability.
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Held back to reorder.
    pub reordered: u64,
    /// Lost to a partition.
    pub partitioned: u64,
}

/// A seeded, simulated network between `nodes` nodes.
#[derive(Debug)]
pub struct SimNet {
    rng: SimRng,
    config: NetConfig,
    nodes: usize,
    clock: SimClock,
    /// In flight, by (arrival time, send sequence): ties break by send order.
    queue: BinaryHeap<Reverse<(u64, u64, usize)>>,
    slots: Vec<Option<Message>>,
    sequence: u64,
    cut: BTreeSet<(NodeId, NodeId)>,
    stats: NetStats,
}

impl SimNet {
    /// A network of `nodes` nodes whose every choice comes from `seed`.
    pub fn new(nodes: usize, seed: u64, config: NetConfig) -> SimNet {
        SimNet {
            rng: SimRng::new(seed),
            config,
            nodes,
            clock: SimClock::new(),
            queue: BinaryHeap::new(),
            slots: Vec::new(),
            sequence: 0,
            cut: BTreeSet::new(),
            stats: NetStats::default(),
        }
    }

    /// Current simulated time.
    pub fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Change fault probabilities and delays from now on.
    pub fn set_config(&mut self, config: NetConfig) {
        self.config = config;
    }

    /// Counters.
    pub fn stats(&self) -> NetStats {
        self.stats
    }

    /// Messages in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Cut the link between `a` and `b`, both directions.
    pub fn partition(&mut self, a: NodeId, b: NodeId) {
        self.cut.insert((a.min(b), a.max(b)));
    }

    /// Cut `node` off from every other node.
    pub fn isolate(&mut self, node: NodeId) {
        for other in (0..self.nodes).filter(|&o| o != node) {
            self.partition(node, other);
        }
    }

    /// Restore every link.
    pub fn heal(&mut self) {
        self.cut.clear();
    }

    /// Whether `a` and `b` can talk.
    pub fn connected(&self, a: NodeId, b: NodeId) -> bool {
        !self.cut.contains(&(a.min(b), a.max(b)))
    }

    /// Send `bytes` from `from` to `to` now.
    ///
    /// # Panics
    /// If either node does not exist (a bug in the test, not an input).
    pub fn send(&mut self, from: NodeId, to: NodeId, bytes: Vec<u8>) {
        assert!(
            from < self.nodes && to < self.nodes,
            "node {from} or {to} is not among {} nodes",
            self.nodes
        );
        self.stats.sent += 1;
        if !self.connected(from, to) {
            self.stats.partitioned += 1;
            return;
        }
        if self.rng.chance(self.config.drop) {
            self.stats.dropped += 1;
            return;
        }
        let copies = if self.rng.chance(self.config.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut delay = self
                .rng
                .range(self.config.delay_min_ns, self.config.delay_max_ns);
            if self.rng.chance(self.config.reorder) {
                self.stats.reordered += 1;
                delay += self.rng.range(
                    self.config.delay_max_ns,
                    self.config.delay_max_ns.saturating_mul(10),
                );
            }
            let now = self.clock.now_ns();
            let message = Message {
                from,
                to,
                bytes: bytes.clone(),
                sent_ns: now,
                deliver_ns: now.saturating_add(delay),
            };
            self.sequence += 1;
            self.queue.push(Reverse((
                message.deliver_ns,
                self.sequence,
                self.slots.len(),
            )));
            self.slots.push(Some(message));
        }
    }

    /// When the next message arrives, if any is in flight.
    pub fn next_arrival_ns(&self) -> Option<u64> {
        self.queue.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Advance the clock by `ns` and return every message arriving by then, in arrival order.
    pub fn advance(&mut self, ns: u64) -> Vec<Message> {
        let until = self.clock.now_ns().saturating_add(ns);
        let mut out = Vec::new();
        while let Some(&Reverse((at, _, slot))) = self.queue.peek() {
            if at > until {
                break;
            }
            self.queue.pop();
            self.clock.advance_to(at);
            let Some(message) = self.slots.get_mut(slot).and_then(Option::take) else {
                continue;
            };
            if self.connected(message.from, message.to) {
                self.stats.delivered += 1;
                out.push(message);
            } else {
                self.stats.partitioned += 1;
            }
        }
        self.clock.advance_to(until);
        if self.queue.is_empty() {
            self.slots.clear();
        }
        out
    }

    /// Advance to the next arrival and return what arrives then (empty when idle).
    pub fn step(&mut self) -> Vec<Message> {
        match self.next_arrival_ns() {
            Some(at) => self.advance(at - self.clock.now_ns()),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lossy() -> NetConfig {
        NetConfig {
            drop: 0.1,
            duplicate: 0.1,
            reorder: 0.2,
            ..NetConfig::default()
        }
    }

    /// A trace of who got what when, for 3 nodes chatting for a while with a partition.
    type Trace = Vec<(u64, NodeId, NodeId, Vec<u8>)>;

    fn trace(seed: u64) -> (Trace, NetStats) {
        let mut net = SimNet::new(3, seed, lossy());
        let mut out = Vec::new();
        for round in 0u32..200 {
            let from = (round % 3) as usize;
            net.send(from, (from + 1) % 3, round.to_le_bytes().to_vec());
            if round == 80 {
                net.partition(0, 1);
            }
            if round == 120 {
                net.heal();
            }
            for m in net.advance(20_000) {
                out.push((m.deliver_ns, m.from, m.to, m.bytes));
            }
        }
        while net.in_flight() > 0 {
            for m in net.step() {
                out.push((m.deliver_ns, m.from, m.to, m.bytes));
            }
        }
        (out, net.stats())
    }

    #[test]
    fn same_seed_same_trace() {
        let (a, sa) = trace(0xfeed);
        let (b, sb) = trace(0xfeed);
        assert_eq!(a, b);
        assert_eq!(sa, sb);
        let (c, _) = trace(0xbeef);
        assert_ne!(a, c, "another seed should give another trace");
        assert!(
            sa.dropped > 0 && sa.duplicated > 0 && sa.reordered > 0 && sa.partitioned > 0,
            "{sa:?}"
        );
        assert_eq!(sa.delivered as usize, a.len());
    }

    #[test]
    fn reordering_happens_and_arrival_order_is_time_order() {
        let (a, _) = trace(7);
        assert!(a.windows(2).all(|w| w[0].0 <= w[1].0));
        let sent_order: Vec<u32> = a
            .iter()
            .filter(|m| m.1 == 0)
            .map(|m| u32::from_le_bytes(m.3.clone().try_into().unwrap_or_default()))
            .collect();
        assert!(
            sent_order.windows(2).any(|w| w[0] > w[1]),
            "some message should overtake another"
        );
    }

    #[test]
    fn partition_blocks_and_heal_restores() {
        let mut net = SimNet::new(2, 1, NetConfig::default());
        net.isolate(1);
        net.send(0, 1, b"lost".to_vec());
        assert!(net.advance(1_000_000).is_empty());
        net.heal();
        net.send(0, 1, b"kept".to_vec());
        net.send(1, 0, b"back".to_vec());
        let got = net.advance(1_000_000);
        assert_eq!(got.len(), 2);
        // In flight when the link is cut: lost at arrival.
        net.send(0, 1, b"cut".to_vec());
        net.partition(0, 1);
        assert!(net.advance(1_000_000).is_empty());
        assert_eq!(net.stats().partitioned, 2);
    }

    #[test]
    fn drop_everything_and_duplicate_everything() {
        let mut net = SimNet::new(
            2,
            3,
            NetConfig {
                drop: 1.0,
                ..NetConfig::default()
            },
        );
        net.send(0, 1, vec![1]);
        assert!(net.advance(u64::MAX / 2).is_empty());
        let mut net = SimNet::new(
            2,
            3,
            NetConfig {
                duplicate: 1.0,
                ..NetConfig::default()
            },
        );
        net.send(0, 1, vec![1]);
        assert_eq!(net.advance(1_000_000).len(), 2);
    }

    #[test]
    fn clock_moves_forward_only() {
        let mut c = SimClock::new();
        c.advance(5);
        c.advance_to(3);
        assert_eq!(c.now_ns(), 5);
        c.advance_to(9);
        assert_eq!(c.now_ns(), 9);
    }
}
