//! Errors of the control plane.

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// etcd did not answer, or answered with an error.
    #[error("etcd: {0}")]
    Etcd(String),
    /// The member asked is down or has no leader: another member may answer.
    #[error("etcd unavailable: {0}")]
    Unavailable(String),
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
        let unavailable = match &e {
            etcd_client::Error::TransportError(_) => true,
            etcd_client::Error::GRpcStatus(status) => matches!(
                status.code(),
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
            ),
            _ => false,
        };
        if unavailable {
            Error::Unavailable(e.to_string())
        } else {
            Error::Etcd(e.to_string())
        }
    }
}
