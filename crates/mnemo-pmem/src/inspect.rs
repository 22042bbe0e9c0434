//! Read-only inspection of a pool file for `mnemo pool info` and `mnemo pool check`: reads
//! with `pread` (works on read-only files and never maps a possibly short file), takes no
//! lock, changes nothing.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::header::{CopyProblem, Header, Pair};
use crate::limits::HEADER_COPY_SIZE;

/// State of one header copy.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CopyReport {
    /// 0 or 1.
    pub index: usize,
    /// Byte offset in the file.
    pub offset: u64,
    /// Whether the copy is valid.
    pub valid: bool,
    /// Its generation, if valid.
    pub generation: Option<u64>,
    /// Why it is not valid.
    pub problem: Option<CopyProblem>,
    /// Human-readable state.
    pub state: String,
}

/// Severity of a finding of `check`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The pool opens; something should be known or repaired.
    Warning,
    /// The pool cannot be opened safely.
    Error,
}

/// One finding of `check`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Finding {
    /// How bad.
    pub severity: Severity,
    /// What is wrong and what to do.
    pub message: String,
}

/// Everything `info` and `check` report about a pool file.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Inspection {
    /// The file.
    pub path: PathBuf,
    /// Its length in bytes.
    pub file_len: u64,
    /// Both header copies.
    pub copies: Vec<CopyReport>,
    /// The copy in force, if any.
    pub chosen: Option<usize>,
    /// The header in force.
    pub header: Option<Header>,
    /// Whether another process holds the pool open (`None`: could not tell).
    pub in_use: Option<bool>,
    /// What `check` found (empty: healthy).
    pub findings: Vec<Finding>,
}

impl Inspection {
    /// Whether the pool can be opened (no error-level finding).
    pub fn healthy(&self) -> bool {
        self.findings.iter().all(|f| f.severity != Severity::Error)
    }
}

/// Inspect the pool file at `path`.
pub fn inspect(path: &Path) -> Result<Inspection, Error> {
    let file = File::open(path).map_err(|e| Error::from_io(path, "open", e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::from_io(path, "stat", e))?;
    if !meta.is_file() {
        return Err(Error::NotAPool {
            path: path.to_path_buf(),
            detail: "not a regular file".into(),
        });
    }
    let file_len = meta.len();
    let want = (HEADER_COPY_SIZE * 2).min(file_len) as usize;
    let mut bytes = vec![0u8; want];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut bytes, 0)
        .map_err(|e| Error::from_io(path, "read", e))?;
    let pair = Pair::decode(&bytes);
    let in_use = match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            let _ = rustix::fs::flock(&file, rustix::fs::FlockOperation::Unlock);
            Some(false)
        }
        Err(rustix::io::Errno::WOULDBLOCK) => Some(true),
        Err(_) => None,
    };
    let copies: Vec<CopyReport> = pair
        .copies
        .iter()
        .enumerate()
        .map(|(index, copy)| CopyReport {
            index,
            offset: index as u64 * HEADER_COPY_SIZE,
            valid: copy.is_ok(),
            generation: copy.as_ref().ok().map(|h| h.generation),
            problem: copy.as_ref().err().cloned(),
            state: match copy {
                Ok(h) => format!("valid, generation {}", h.generation),
                Err(p) => format!("INVALID: {p}"),
            },
        })
        .collect();
    let chosen = pair.chosen();
    let header = pair.header().cloned();
    let findings = findings(path, file_len, &pair, header.as_ref(), chosen);
    Ok(Inspection {
        path: path.to_path_buf(),
        file_len,
        copies,
        chosen,
        header,
        in_use,
        findings,
    })
}

fn findings(
    path: &Path,
    file_len: u64,
    pair: &Pair,
    header: Option<&Header>,
    chosen: Option<usize>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let error = |message: String| Finding {
        severity: Severity::Error,
        message,
    };
    let warning = |message: String| Finding {
        severity: Severity::Warning,
        message,
    };
    if file_len < HEADER_COPY_SIZE * 2 {
        out.push(error(format!(
            "file is {file_len} bytes, shorter than the two {HEADER_COPY_SIZE}-byte header copies: truncated or not a pool"
        )));
    }
    match (header, chosen) {
        (Some(h), Some(i)) => {
            let other = 1 - i;
            if let Err(problem) = &pair.copies[other] {
                out.push(warning(format!(
                    "header copy {other} is damaged ({problem}); the pool opens from copy {i} (generation {}), and the next header write (any open) rewrites copy {other}",
                    h.generation
                )));
            }
            if file_len < h.pool_size {
                out.push(error(format!(
                    "file is {file_len} bytes but its header records {} bytes: the pool was truncated; restore it from a copy or a replica",
                    h.pool_size
                )));
            } else if file_len > h.pool_size {
                out.push(warning(format!(
                    "file is {} bytes longer than the pool ({} bytes): an interrupted grow; the extra bytes are unused",
                    file_len - h.pool_size,
                    h.pool_size
                )));
            }
            if !h.clean_shutdown {
                out.push(warning(
                    "the pool was not closed cleanly (or is open now): recovery runs at the next open".to_string(),
                ));
            }
        }
        _ => {
            let reasons: Vec<String> = pair
                .copies
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.as_ref().err().map(|p| format!("copy {i}: {p}")))
                .collect();
            out.push(error(format!(
                "no valid header copy ({}); {} cannot be opened",
                reasons.join("; "),
                path.display()
            )));
        }
    }
    out
}
