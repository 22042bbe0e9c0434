//! Pub/sub: which connection listens to which channel or pattern, and the messages PUBLISH
//! sends them. Nothing here is durable (Redis's pub/sub is not either).
//!
//! Every session of a loop holds the same registry (`SessionConfig::pubsub`); the session
//! answers SUBSCRIBE, PUBLISH and PUBSUB itself from it, PUBLISH puts one message per
//! receiver in the registry's outbox, and the loop hands each message to its session after
//! the sessions have been served (`EventLoop::run`), which writes it in the connection's
//! protocol (an array in RESP2, a push in RESP3).

use std::collections::HashMap;

use mnemo_resp::bytes::Bytes;

use crate::engine::glob;

/// A message for one subscriber.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The channel it was published to.
    pub channel: Bytes,
    /// The pattern that matched, for a pattern subscription.
    pub pattern: Option<Bytes>,
    /// What was published.
    pub payload: Bytes,
    /// Published with SPUBLISH to a shard channel (delivered as "smessage").
    pub shard: bool,
}

/// The subscriptions of every connection of a loop, and the messages to deliver.
#[derive(Debug, Default)]
pub struct Registry {
    channels: HashMap<Bytes, Vec<u64>>,
    patterns: HashMap<Bytes, Vec<u64>>,
    /// Shard channels (SSUBSCRIBE): a namespace of their own, as in a Redis without cluster.
    shard_channels: HashMap<Bytes, Vec<u64>>,
    outbox: Vec<(u64, Message)>,
}

fn add(map: &mut HashMap<Bytes, Vec<u64>>, name: &Bytes, session: u64) {
    let sessions = map.entry(name.clone()).or_default();
    if !sessions.contains(&session) {
        sessions.push(session);
    }
}

fn remove(map: &mut HashMap<Bytes, Vec<u64>>, name: &[u8], session: u64) {
    if let Some(sessions) = map.get_mut(name) {
        sessions.retain(|&s| s != session);
        if sessions.is_empty() {
            map.remove(name);
        }
    }
}

impl Registry {
    /// `session` listens to `channel` (or, with `pattern`, to channels matching it).
    pub fn subscribe(&mut self, session: u64, name: &Bytes, pattern: bool) {
        let map = if pattern {
            &mut self.patterns
        } else {
            &mut self.channels
        };
        add(map, name, session);
    }

    /// `session` stops listening to `name`.
    pub fn unsubscribe(&mut self, session: u64, name: &[u8], pattern: bool) {
        let map = if pattern {
            &mut self.patterns
        } else {
            &mut self.channels
        };
        remove(map, name, session);
    }

    /// PUBLISH: a message for every subscriber of `channel` and every pattern subscription
    /// matching it; returns how many.
    pub fn publish(&mut self, channel: &Bytes, payload: &Bytes) -> usize {
        let before = self.outbox.len();
        for &session in self.channels.get(channel).into_iter().flatten() {
            self.outbox.push((
                session,
                Message {
                    channel: channel.clone(),
                    pattern: None,
                    payload: payload.clone(),
                    shard: false,
                },
            ));
        }
        for (pattern, sessions) in &self.patterns {
            if glob::matches(pattern, channel) {
                for &session in sessions {
                    self.outbox.push((
                        session,
                        Message {
                            channel: channel.clone(),
                            pattern: Some(pattern.clone()),
                            payload: payload.clone(),
                            shard: false,
                        },
                    ));
                }
            }
        }
        self.outbox.len() - before
    }

    /// `session` listens to the shard channel `name` (SSUBSCRIBE).
    pub fn subscribe_shard(&mut self, session: u64, name: &Bytes) {
        add(&mut self.shard_channels, name, session);
    }

    /// `session` stops listening to the shard channel `name`.
    pub fn unsubscribe_shard(&mut self, session: u64, name: &[u8]) {
        remove(&mut self.shard_channels, name, session);
    }

    /// SPUBLISH: a message for every subscriber of the shard channel; returns how many.
    /// Patterns and ordinary channels do not see it.
    pub fn publish_shard(&mut self, channel: &Bytes, payload: &Bytes) -> usize {
        let before = self.outbox.len();
        for &session in self.shard_channels.get(channel).into_iter().flatten() {
            self.outbox.push((
                session,
                Message {
                    channel: channel.clone(),
                    pattern: None,
                    payload: payload.clone(),
                    shard: true,
                },
            ));
        }
        self.outbox.len() - before
    }

    /// PUBSUB SHARDCHANNELS: the shard channels with a subscriber, matching `pattern`.
    pub fn shard_channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        self.shard_channels
            .keys()
            .filter(|name| pattern.is_none_or(|p| glob::matches(p, name)))
            .cloned()
            .collect()
    }

    /// PUBSUB SHARDNUMSUB: subscribers of the shard channel.
    pub fn shard_numsub(&self, channel: &[u8]) -> usize {
        self.shard_channels.get(channel).map_or(0, Vec::len)
    }

    /// The messages published since the last call, in order.
    pub fn take_outbox(&mut self) -> Vec<(u64, Message)> {
        std::mem::take(&mut self.outbox)
    }

    /// PUBSUB CHANNELS: the channels with a subscriber, matching `pattern` if given.
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        self.channels
            .keys()
            .filter(|name| pattern.is_none_or(|p| glob::matches(p, name)))
            .cloned()
            .collect()
    }

    /// PUBSUB NUMSUB: subscribers of `channel`.
    pub fn numsub(&self, channel: &[u8]) -> usize {
        self.channels.get(channel).map_or(0, Vec::len)
    }

    /// PUBSUB NUMPAT: patterns with a subscriber.
    pub fn numpat(&self) -> usize {
        self.patterns.len()
    }
}
