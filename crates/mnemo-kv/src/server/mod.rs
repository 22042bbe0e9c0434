//! The server's connection layer: sessions (one per client connection), the group-commit
//! batch runner, and the threads that drive them over TCP. `docs/design/kv-server.md`
//! describes the design.

pub mod acks;
mod batch;
mod gather;
pub mod limits;
pub mod mutant;
mod net;
pub mod pubsub;
mod session;

pub use acks::{Ack, AckQueue};
pub use batch::{
    run_batch, run_batch_hosted, Busy, Completion, Effect, Engine, Host, NoHost, Prefetch,
    PREFETCH_DISTANCE,
};
pub use net::{EventLoop, LoopStats, Server, Stopper};
pub use session::{Request, Session, SessionConfig, Transaction};
