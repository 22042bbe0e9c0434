//! The cluster's configuration: one JSON value in etcd, changed only by compare-and-swap.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Longest cluster name (it is part of every key).
pub const CLUSTER_NAME_MAX: usize = 64;

/// Largest configuration value read (a few addresses: anything larger is not ours).
pub const CONFIG_BYTES_MAX: usize = 64 << 10;

/// Who serves what, at which epoch. The epoch is the fencing token: it rises by one each time
/// the roles change (a new primary, a new mirror), and every node refuses records of an epoch
/// older than the highest it has seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The configuration's generation (1 for the first).
    pub epoch: u64,
    /// The primary's client address (`mnemo serve`'s HOST:PORT).
    pub primary: String,
    /// The mirror's replication address (`mnemo mirror serve`'s HOST:PORT, as the primary's
    /// `--mirror` spells it), if the primary has one.
    pub mirror: Option<String>,
    /// Whether the mirror holds every sync point the primary acknowledged: only then may it
    /// be promoted. The primary sets it once a full copy was acknowledged, and clears it
    /// before it acknowledges anything without the mirror.
    pub mirror_in_sync: bool,
    /// The backups behind the mirror (informational).
    #[serde(default)]
    pub backups: Vec<String>,
    /// The replication mode's name (`sync`, `syncflush`, `async`, `local`).
    pub mode: String,
}

impl ClusterConfig {
    /// Decode a value read from etcd: a clear error for anything that is not one.
    pub fn decode(bytes: &[u8]) -> Result<ClusterConfig> {
        if bytes.len() > CONFIG_BYTES_MAX {
            return Err(Error::Config(format!(
                "{} bytes, more than a configuration holds ({CONFIG_BYTES_MAX})",
                bytes.len()
            )));
        }
        let config: ClusterConfig =
            serde_json::from_slice(bytes).map_err(|e| Error::Config(e.to_string()))?;
        if config.epoch == 0 {
            return Err(Error::Config("epoch 0 (epochs start at 1)".into()));
        }
        if config.primary.is_empty() {
            return Err(Error::Config("no primary".into()));
        }
        Ok(config)
    }

    /// The value stored in etcd.
    pub fn encode(&self) -> String {
        // Serializing plain strings, numbers and booleans cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A cluster's keys in etcd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    /// `/mnemo/<cluster>/config`: the [`ClusterConfig`].
    pub config: String,
    /// `/mnemo/<cluster>/alive`: the primary's liveness key, attached to its lease.
    pub alive: String,
    /// `/mnemo/<cluster>/nodes/`: the prefix of the keys mirrors and backups register under
    /// (one per node, by its replication address, each under the node's own lease).
    pub nodes: String,
}

impl Keys {
    /// The keys of cluster `name` (letters, digits, `-`, `_`, `.`; at most 64 bytes).
    pub fn new(name: &str) -> Result<Keys> {
        let ok = !name.is_empty()
            && name.len() <= CLUSTER_NAME_MAX
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !ok {
            return Err(Error::Config(format!(
                "cluster name {name:?}: use 1 to {CLUSTER_NAME_MAX} letters, digits, '-', '_' or '.'"
            )));
        }
        Ok(Keys {
            config: format!("/mnemo/{name}/config"),
            alive: format!("/mnemo/{name}/alive"),
            nodes: format!("/mnemo/{name}/nodes/"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ClusterConfig {
        ClusterConfig {
            epoch: 3,
            primary: "127.0.0.1:7379".into(),
            mirror: Some("127.0.0.1:7380".into()),
            mirror_in_sync: true,
            backups: vec!["127.0.0.1:7381".into()],
            mode: "sync".into(),
        }
    }

    #[test]
    fn configs_round_trip_and_bad_ones_are_errors() {
        let c = sample();
        assert_eq!(ClusterConfig::decode(c.encode().as_bytes()).unwrap(), c);
        for bad in [
            &b""[..],
            b"{}",
            b"not json",
            b"{\"epoch\":0,\"primary\":\"a\",\"mirror\":null,\"mirror_in_sync\":false,\"mode\":\"sync\"}",
            b"{\"epoch\":1,\"primary\":\"\",\"mirror\":null,\"mirror_in_sync\":false,\"mode\":\"sync\"}",
            b"{\"epoch\":-1,\"primary\":\"a\",\"mirror\":null,\"mirror_in_sync\":false,\"mode\":\"sync\"}",
            b"{\"epoch\":1,\"primary\":\"a\",\"mirror\":null,\"mirror_in_sync\":false,\"mode\":\"sync\",\"x\":1}",
            &[0xff; 8],
        ] {
            assert!(ClusterConfig::decode(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let huge = vec![b' '; CONFIG_BYTES_MAX + 1];
        assert!(ClusterConfig::decode(&huge).is_err());
    }

    #[test]
    fn cluster_names_are_checked() {
        assert_eq!(Keys::new("kv-1").unwrap().config, "/mnemo/kv-1/config");
        for bad in ["", "a/b", "a b", &"x".repeat(65)] {
            assert!(Keys::new(bad).is_err(), "{bad:?}");
        }
    }
}
