//! Link authentication with a shared secret: a mutual challenge-response.
//!
//! Both nodes derive a 32-byte key from the secret (BLAKE3 `derive_key` with this protocol's
//! context string). The primary sends a random nonce; the mirror answers with
//! `keyed_hash(key, "mirror" | primary nonce | mirror nonce)` and a nonce of its own; the
//! primary checks that proof and answers `keyed_hash(key, "primary" | mirror nonce | primary
//! nonce)`. A peer without the secret cannot produce either proof, and a recorded
//! conversation does not replay (fresh nonces each time). Proofs are compared in constant
//! time. The secret itself never crosses the link and is never logged.

use std::fmt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::proto::NONCE_LEN;

const CONTEXT: &str = "mnemo replication link v1 (shared-secret handshake)";

/// Fewest bytes a secret may have.
pub const SECRET_MIN: usize = 16;

/// The key both ends of a link derive from the shared secret. Debug output hides it.
#[derive(Clone)]
pub struct Secret {
    key: [u8; 32],
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    /// A secret from its bytes (at least [`SECRET_MIN`]).
    pub fn new(secret: &[u8]) -> Result<Secret> {
        if secret.len() < SECRET_MIN {
            return Err(Error::Secret(format!(
                "the shared secret has {} bytes; use at least {SECRET_MIN} (e.g. `head -c 32 /dev/urandom | base64 > FILE`)",
                secret.len()
            )));
        }
        Ok(Secret {
            key: blake3::derive_key(CONTEXT, secret),
        })
    }

    /// Read the secret from `path`: the file's bytes without a trailing newline. The file
    /// must not be readable by group or others (as ssh demands of its keys).
    pub fn from_file(path: &Path) -> Result<Secret> {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path)
            .map_err(|e| Error::Secret(format!("{}: {e}", path.display())))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(Error::Secret(format!(
                "{} is readable by other users (mode {:o}); run `chmod 600 {}`",
                path.display(),
                meta.permissions().mode() & 0o777,
                path.display()
            )));
        }
        let mut bytes =
            std::fs::read(path).map_err(|e| Error::Secret(format!("{}: {e}", path.display())))?;
        while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            bytes.pop();
        }
        Secret::new(&bytes)
    }

    fn proof(&self, who: &[u8], first: &[u8; NONCE_LEN], second: &[u8; NONCE_LEN]) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(who);
        h.update(first);
        h.update(second);
        h.finalize()
    }

    /// The mirror's proof for this pair of nonces.
    pub fn mirror_proof(&self, primary: &[u8; NONCE_LEN], mirror: &[u8; NONCE_LEN]) -> [u8; 32] {
        *self.proof(b"mirror", primary, mirror).as_bytes()
    }

    /// The primary's proof for this pair of nonces.
    pub fn primary_proof(&self, mirror: &[u8; NONCE_LEN], primary: &[u8; NONCE_LEN]) -> [u8; 32] {
        *self.proof(b"primary", mirror, primary).as_bytes()
    }

    /// Whether `proof` is the mirror's proof (constant time).
    pub fn check_mirror(
        &self,
        proof: &[u8; 32],
        primary: &[u8; NONCE_LEN],
        mirror: &[u8; NONCE_LEN],
    ) -> bool {
        self.proof(b"mirror", primary, mirror) == blake3::Hash::from_bytes(*proof)
    }

    /// Whether `proof` is the primary's proof (constant time).
    pub fn check_primary(
        &self,
        proof: &[u8; 32],
        mirror: &[u8; NONCE_LEN],
        primary: &[u8; NONCE_LEN],
    ) -> bool {
        self.proof(b"primary", mirror, primary) == blake3::Hash::from_bytes(*proof)
    }
}

/// A fresh random nonce.
pub fn nonce() -> Result<[u8; NONCE_LEN]> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n)
        .map_err(|e| Error::io("random nonce", std::io::Error::other(e.to_string())))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_the_secret_the_role_and_both_nonces() {
        let a = Secret::new(b"0123456789abcdef-one").unwrap();
        let b = Secret::new(b"0123456789abcdef-two").unwrap();
        let (p, m) = ([1u8; 32], [2u8; 32]);
        let proof = a.mirror_proof(&p, &m);
        assert!(a.check_mirror(&proof, &p, &m));
        assert!(!b.check_mirror(&proof, &p, &m), "another secret");
        assert!(!a.check_mirror(&proof, &m, &p), "nonces swapped");
        assert!(!a.check_primary(&proof, &m, &p), "the other role's proof");
        assert!(!a.check_mirror(&proof, &[3; 32], &m), "another nonce");
        assert!(Secret::new(b"short").is_err());
        assert_eq!(format!("{a:?}"), "Secret(..)");
    }

    #[test]
    fn secret_files_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, b"a-long-enough-shared-secret\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = Secret::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("chmod 600"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let from_file = Secret::from_file(&path).unwrap();
        let direct = Secret::new(b"a-long-enough-shared-secret").unwrap();
        assert_eq!(
            from_file.key, direct.key,
            "the trailing newline is not part of it"
        );
    }
}
