//! Errors of the control plane.

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// etcd did not answer, or answered with an error.
    #[error("etcd: {0}")]
    Etcd(String),
    /// A configuration value (or a cluster name) that is not valid.
    #[error("cluster configuration: {0}")]
    Config(String),
    /// This node may not take the role it asked for.
    #[error("{0}")]
    Role(String),
    /// The control plane's thread is gone.
    #[error("the etcd client thread stopped")]
    Stopped,
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl From<etcd_client::Error> for Error {
    fn from(e: etcd_client::Error) -> Error {
        Error::Etcd(e.to_string())
    }
}
