//! The write commands of the open batch, kept for a replay after a command fails inside the
//! heap (`PersistentEngine::rollback_and_replay`).
//!
//! Replays are rare; keeping a command is not: every write command of every batch is kept
//! until the commit. Arguments up to [`COPY_BYTES_MAX`] are copied into one buffer reused
//! from batch to batch (no allocation and no reference-count update per argument: an MSET of
//! ten keys has 21 arguments); longer ones are kept as a shared reference to the request's
//! bytes, so a large value is never copied.

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::CommandSpec;

/// Longest argument copied into the buffer.
pub const COPY_BYTES_MAX: usize = 256;

/// The buffer is kept between batches up to this size (a batch of huge commands does not
/// pin its memory).
const KEEP_BYTES_MAX: usize = 1 << 20;

#[derive(Debug)]
enum Arg {
    /// `bytes[start..end]`.
    Copied(usize, usize),
    Shared(Bytes),
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct ReplayLog {
    bytes: Vec<u8>,
    args: Vec<Arg>,
    /// Each command's table entry and end (in `args`).
    commands: Vec<(&'static CommandSpec, usize)>,
}

impl ReplayLog {
    /// Keeps one command: its table entry and its arguments (the name first).
    pub fn push(&mut self, spec: &'static CommandSpec, args: &[Bytes]) {
        for a in args {
            if a.len() <= COPY_BYTES_MAX {
                let start = self.bytes.len();
                self.bytes.extend_from_slice(a);
                self.args.push(Arg::Copied(start, self.bytes.len()));
            } else {
                self.args.push(Arg::Shared(a.clone()));
            }
        }
        self.commands.push((spec, self.args.len()));
    }

    /// Forgets every command (the batch committed or was abandoned).
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.bytes.shrink_to(KEEP_BYTES_MAX);
        self.args.clear();
        self.commands.clear();
    }

    /// Whether no command is kept.
    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// The kept commands, in order, as table entries and argument lists.
    pub fn commands(&self) -> Vec<(&'static CommandSpec, Vec<Bytes>)> {
        let mut out = Vec::with_capacity(self.commands.len());
        let mut first = 0;
        for &(spec, end) in &self.commands {
            out.push((
                spec,
                self.args[first..end]
                    .iter()
                    .map(|a| match a {
                        Arg::Copied(start, end) => {
                            Bytes::copy_from_slice(&self.bytes[*start..*end])
                        }
                        Arg::Shared(bytes) => bytes.clone(),
                    })
                    .collect(),
            ));
            first = end;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use mnemo_resp::CommandId;

    use super::*;

    #[test]
    fn commands_come_back_as_pushed_and_clear_forgets_them() {
        let mut log = ReplayLog::default();
        assert!(log.is_empty());
        let big = Bytes::from(vec![7u8; COPY_BYTES_MAX + 1]);
        let first = vec![
            Bytes::from_static(b"SET"),
            Bytes::from_static(b"k"),
            big.clone(),
        ];
        let second = vec![
            Bytes::from_static(b"MSET"),
            Bytes::from_static(b""),
            Bytes::from(vec![1u8; COPY_BYTES_MAX]),
        ];
        let third = vec![Bytes::from_static(b"FLUSHALL")];
        let spec = |args: &[Bytes]| mnemo_resp::command::resolve(args).expect("in the table");
        for args in [&first, &second, &third] {
            log.push(spec(args), args);
        }
        assert!(!log.is_empty());
        let got = log.commands();
        let ids: Vec<_> = got.iter().map(|(spec, _)| spec.id).collect();
        assert_eq!(ids, [CommandId::Set, CommandId::Mset, CommandId::Flushall]);
        let args: Vec<_> = got.iter().map(|(_, args)| args.clone()).collect();
        assert_eq!(args, vec![first, second, third]);
        // The long argument is shared, not copied.
        assert_eq!(got[0].1[2].as_ptr(), big.as_ptr());
        log.clear();
        assert!(log.is_empty());
        assert!(log.commands().is_empty());
    }
}
