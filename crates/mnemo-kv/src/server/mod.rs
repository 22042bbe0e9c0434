//! The server's connection layer: sessions (one per client connection) and the group-commit
//! batch runner. No sockets here yet: the network threads that will drive these are described
//! in `docs/design/kv-server.md`.

mod batch;
pub mod limits;
mod session;

pub use batch::{collect_batch, run_batch, Completion, Effect, Engine};
pub use session::{Request, Session, SessionConfig};
