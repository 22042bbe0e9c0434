//! Deferred acknowledgements, without the network: which committed batches' replies may
//! leave, and when.
//!
//! Under [`Engine::defer_acks`] a batch's commit returns once its record is appended, before
//! it is durable; the event loop then holds the batch's replies until the storage's durable
//! mark reaches the mark the batch ended at ([`Engine::ack_marks`]), releasing held batches
//! in commit order (a later batch's writes may depend on an earlier one's). This is that
//! rule, apart from the sockets, so that the event loop (`net.rs`) and the concurrency test
//! of the group commit under a controlled scheduler (`tests/group_commit.rs`, with the
//! write-ahead policy's real syncer thread) run the same code.
//!
//! [`Engine::defer_acks`]: super::Engine::defer_acks
//! [`Engine::ack_marks`]: super::Engine::ack_marks

use std::collections::VecDeque;

/// What becomes of a committed batch.
#[derive(Debug, PartialEq, Eq)]
pub enum Ack<T> {
    /// Durable: its replies go to their clients.
    Release(T),
    /// The storage failed before it became durable: no reply may leave (the clients cannot
    /// know whether their writes landed); the server closes their connections.
    Lost(T),
}

/// The committed batches whose replies wait for durability, oldest first, each with the
/// append mark it waits for.
#[derive(Debug)]
pub struct AckQueue<T> {
    holding: bool,
    unacked: VecDeque<(u64, T)>,
}

impl<T> AckQueue<T> {
    /// `holding`: the engine granted deferred acknowledgements (its commits return before
    /// they are durable). Otherwise every committed batch is released at once.
    pub fn new(holding: bool) -> AckQueue<T> {
        AckQueue {
            holding,
            unacked: VecDeque::new(),
        }
    }

    /// Whether replies are held for the storage's marks: ask the engine for them
    /// ([`super::Engine::ack_marks`]) only then.
    pub fn holding(&self) -> bool {
        self.holding
    }

    /// No batch is held.
    pub fn is_empty(&self) -> bool {
        self.unacked.is_empty()
    }

    /// Batches held.
    pub fn len(&self) -> usize {
        self.unacked.len()
    }

    /// A batch whose commit returned Ok, with the engine's marks read right after it
    /// (`None`: not holding, or the commit was durable when it returned): released now if
    /// it is durable and nothing older is held, held otherwise; lost if the storage failed.
    pub fn committed(
        &mut self,
        marks: Option<Result<(u64, u64), String>>,
        batch: T,
    ) -> Option<Ack<T>> {
        if !self.holding {
            return Some(Ack::Release(batch));
        }
        match marks {
            Some(Ok((appended, durable))) if appended > durable || !self.unacked.is_empty() => {
                // Not durable yet (or an earlier batch is not): held, in order.
                self.unacked.push_back((appended, batch));
                None
            }
            Some(Err(_)) => Some(Ack::Lost(batch)),
            _ => Some(Ack::Release(batch)),
        }
    }

    /// Every held batch that the marks now show durable, oldest first, into `out`; every
    /// held batch as lost if the storage failed.
    pub fn release(&mut self, marks: Option<Result<(u64, u64), String>>, out: &mut Vec<Ack<T>>) {
        if !self.holding || self.unacked.is_empty() {
            return;
        }
        match marks {
            None => {}
            Some(Ok((_, durable))) => {
                while self
                    .unacked
                    .front()
                    .is_some_and(|&(mark, _)| mark <= durable)
                {
                    if let Some((_, batch)) = self.unacked.pop_front() {
                        out.push(Ack::Release(batch));
                    }
                }
            }
            Some(Err(_)) => out.extend(self.unacked.drain(..).map(|(_, b)| Ack::Lost(b))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_holding_releases_at_once() {
        let mut q = AckQueue::new(false);
        assert_eq!(q.committed(Some(Ok((10, 0))), 'a'), Some(Ack::Release('a')));
        assert!(q.is_empty());
    }

    #[test]
    fn held_until_durable_in_commit_order() {
        let mut q = AckQueue::new(true);
        assert_eq!(q.committed(Some(Ok((10, 0))), 'a'), None);
        // Durable when it returned, but an older batch is held: held behind it.
        assert_eq!(q.committed(Some(Ok((20, 20))), 'b'), None);
        assert_eq!(q.committed(Some(Ok((30, 20))), 'c'), None);
        let mut out = Vec::new();
        q.release(Some(Ok((30, 9))), &mut out);
        assert!(out.is_empty());
        q.release(Some(Ok((30, 20))), &mut out);
        assert_eq!(out, [Ack::Release('a'), Ack::Release('b')]);
        assert_eq!(q.len(), 1);
        out.clear();
        q.release(Some(Ok((30, 30))), &mut out);
        assert_eq!(out, [Ack::Release('c')]);
        assert!(q.is_empty());
        // Nothing held and durable on return: released at once.
        assert_eq!(
            q.committed(Some(Ok((40, 40))), 'd'),
            Some(Ack::Release('d'))
        );
    }

    #[test]
    fn a_failed_storage_loses_every_held_batch() {
        let mut q = AckQueue::new(true);
        assert_eq!(q.committed(Some(Ok((10, 0))), 'a'), None);
        assert_eq!(q.committed(Some(Ok((20, 0))), 'b'), None);
        assert_eq!(
            q.committed(Some(Err("eio".into())), 'c'),
            Some(Ack::Lost('c'))
        );
        let mut out = Vec::new();
        q.release(Some(Err("eio".into())), &mut out);
        assert_eq!(out, [Ack::Lost('a'), Ack::Lost('b')]);
        assert!(q.is_empty());
    }
}
