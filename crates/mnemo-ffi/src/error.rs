//! Error codes of the C ABI, the thread-local message behind `mnemo_errormsg`, and the
//! guard every exported function runs its body in (panics become [`code::EPANIC`]).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The values of `enum mnemo_error` in `mnemo.h` (kept equal; a test compares them).
pub mod code {
    use std::ffi::c_int;
    /// Success.
    pub const OK: c_int = 0;
    /// An argument is invalid: a null pointer, a zero or absurd size, an offset outside the
    /// data area, bytes that are not UTF-8.
    pub const EINVAL: c_int = -1;
    /// The value passed is not a handle of the expected kind.
    pub const EBADHANDLE: c_int = -2;
    /// The handle was closed (pool, log) or ended (transaction).
    pub const ECLOSED: c_int = -3;
    /// No such pool file or named region.
    pub const ENOENT: c_int = -4;
    /// The pool file already exists.
    pub const EEXIST: c_int = -5;
    /// In use: the pool by another process, a pool with open transactions, a name or a log
    /// by another caller.
    pub const EBUSY: c_int = -6;
    /// Out of space: the pool is full and cannot grow, the medium is full, or the table of
    /// names is full.
    pub const ENOSPC: c_int = -7;
    /// A transaction (or a gmsync) does not fit one redo record.
    pub const ETXTOOBIG: c_int = -8;
    /// A region name is longer than `MNEMO_NAME_MAX` bytes.
    pub const ENAMETOOLONG: c_int = -9;
    /// Free of an offset that is not the start of a live allocation.
    pub const EBADFREE: c_int = -10;
    /// A region (or log) exists with another size than the one asked for.
    pub const EMISMATCH: c_int = -11;
    /// The transaction was doomed by an earlier failing call and has been aborted.
    pub const EABORTED: c_int = -12;
    /// A transaction was used wrongly: from another thread, ended out of order.
    pub const ETXSTATE: c_int = -13;
    /// Pool, heap or log metadata on media is damaged.
    pub const ECORRUPT: c_int = -14;
    /// The file is no mnemo pool (or of an unsupported version).
    pub const ENOTPOOL: c_int = -15;
    /// Permission denied on the pool file.
    pub const EPERM: c_int = -16;
    /// An operating-system call failed.
    pub const EIO: c_int = -17;
    /// The log has no room for the entry now (truncate it).
    pub const ELOGFULL: c_int = -18;
    /// Internal error: mnemo panicked; the call was stopped at the ABI boundary.
    pub const EPANIC: c_int = -19;

    /// Every code with its name, for `mnemo_strerror` and the header check.
    pub const ALL: &[(c_int, &str, &std::ffi::CStr)] = &[
        (OK, "MNEMO_OK", c"success"),
        (EINVAL, "MNEMO_EINVAL", c"invalid argument"),
        (
            EBADHANDLE,
            "MNEMO_EBADHANDLE",
            c"not a handle of the expected kind",
        ),
        (ECLOSED, "MNEMO_ECLOSED", c"handle was closed or ended"),
        (ENOENT, "MNEMO_ENOENT", c"no such pool file or region"),
        (EEXIST, "MNEMO_EEXIST", c"pool file already exists"),
        (EBUSY, "MNEMO_EBUSY", c"in use"),
        (ENOSPC, "MNEMO_ENOSPC", c"out of space"),
        (ETXTOOBIG, "MNEMO_ETXTOOBIG", c"transaction too large"),
        (ENAMETOOLONG, "MNEMO_ENAMETOOLONG", c"name too long"),
        (
            EBADFREE,
            "MNEMO_EBADFREE",
            c"free of an offset that is not a live allocation",
        ),
        (EMISMATCH, "MNEMO_EMISMATCH", c"exists with another size"),
        (EABORTED, "MNEMO_EABORTED", c"transaction aborted"),
        (ETXSTATE, "MNEMO_ETXSTATE", c"transaction used wrongly"),
        (ECORRUPT, "MNEMO_ECORRUPT", c"metadata on media is corrupt"),
        (ENOTPOOL, "MNEMO_ENOTPOOL", c"not a mnemo pool"),
        (EPERM, "MNEMO_EPERM", c"permission denied"),
        (EIO, "MNEMO_EIO", c"input/output error"),
        (ELOGFULL, "MNEMO_ELOGFULL", c"log full"),
        (EPANIC, "MNEMO_EPANIC", c"internal error"),
    ];
}

/// A failed call: the code returned to C and the message `mnemo_errormsg` shows.
#[derive(Debug)]
pub struct Failure {
    /// One of [`code`].
    pub code: c_int,
    /// What happened and, where known, what to do.
    pub message: String,
}

impl Failure {
    /// A failure with `code` and `message`.
    pub fn new(code: c_int, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// [`code::EINVAL`] with `message`.
    pub fn invalid(message: impl Into<String>) -> Failure {
        Failure::new(code::EINVAL, message)
    }
}

/// Result of the bodies of exported functions.
pub type Result<T, E = Failure> = std::result::Result<T, E>;

fn pmem_code(e: &mnemo_pmem::Error) -> c_int {
    use mnemo_pmem::{Error as E, MediaError as M};
    match e {
        E::NotFound { .. } => code::ENOENT,
        E::AlreadyExists { .. } => code::EEXIST,
        E::PermissionDenied { .. } => code::EPERM,
        E::Busy { .. } => code::EBUSY,
        E::Truncated { .. } | E::Corrupt { .. } => code::ECORRUPT,
        E::NotAPool { .. }
        | E::NewerVersion { .. }
        | E::OlderVersion { .. }
        | E::LayoutMismatch { .. } => code::ENOTPOOL,
        E::NoSpace { .. } => code::ENOSPC,
        E::InvalidArgument(_) | E::OutOfBounds { .. } => code::EINVAL,
        E::Media {
            source: M::NoSpace { .. } | M::CapacityExceeded { .. },
            ..
        } => code::ENOSPC,
        _ => code::EIO,
    }
}

impl From<mnemo_pmem::Error> for Failure {
    fn from(e: mnemo_pmem::Error) -> Failure {
        Failure::new(pmem_code(&e), e.to_string())
    }
}

impl From<mnemo_heap::Error> for Failure {
    fn from(e: mnemo_heap::Error) -> Failure {
        use mnemo_heap::Error as E;
        let code = match &e {
            E::Pool(p) => pmem_code(p),
            E::Closed => code::ECLOSED,
            E::NotAHeap(_) => code::ENOTPOOL,
            E::Corrupt(_) => code::ECORRUPT,
            E::OutOfSpace { .. } | E::TocFull(_) => code::ENOSPC,
            E::TransactionTooLarge { .. } => code::ETXTOOBIG,
            E::InvalidFree { .. } => code::EBADFREE,
            E::NameTooLong { .. } => code::ENAMETOOLONG,
            E::SizeMismatch { .. } => code::EMISMATCH,
            E::NoSuchRegion(_) => code::ENOENT,
            E::NameBusy(_) => code::EBUSY,
            E::Aborted(_) => code::EABORTED,
            E::InvalidName(_) | E::InvalidArgument(_) => code::EINVAL,
            _ => code::EIO,
        };
        Failure::new(code, e.to_string())
    }
}

impl From<mnemo_log::Error> for Failure {
    fn from(e: mnemo_log::Error) -> Failure {
        use mnemo_log::Error as E;
        let code = match &e {
            E::InvalidRegion { .. } | E::TooLarge { .. } | E::InvalidLsn { .. } => code::EINVAL,
            E::NotFormatted { .. } | E::Corrupt { .. } => code::ECORRUPT,
            E::RegionMismatch { .. } => code::EMISMATCH,
            E::Full { .. } => code::ELOGFULL,
            E::Closed => code::ECLOSED,
            E::Pool(p) => pmem_code(p),
            _ => code::EIO,
        };
        Failure::new(code, e.to_string())
    }
}

thread_local! {
    static MESSAGE: RefCell<CString> = RefCell::new(CString::from(c"no error"));
}

/// Record `message` as this thread's last error.
pub fn set_message(message: &str) {
    let clean: Vec<u8> = message.bytes().filter(|&b| b != 0).collect();
    let text = CString::new(clean).unwrap_or_default();
    // The thread-local may be gone while the thread exits; then there is nobody to tell.
    let _ = MESSAGE.try_with(|m| *m.borrow_mut() = text);
}

/// Pointer to this thread's last error message; valid until the next failing call on the
/// thread (the `CString` is replaced, never mutated in place).
pub fn message_ptr() -> *const c_char {
    MESSAGE
        .try_with(|m| m.borrow().as_ptr())
        .unwrap_or(c"no error".as_ptr())
}

/// The static description of `code`.
pub fn describe(value: c_int) -> &'static CStr {
    code::ALL
        .iter()
        .find(|(c, _, _)| *c == value)
        .map_or(c"unknown error code", |(_, _, text)| text)
}

/// Run the body of an exported function: its error becomes a code plus the thread's
/// message, and a panic is caught here instead of unwinding into C.
pub fn guard(name: &str, body: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => code::OK,
        Ok(Err(failure)) => {
            set_message(&format!("{name}: {}", failure.message));
            failure.code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            set_message(&format!(
                "{name}: internal error (mnemo panicked: {what}); please report it"
            ));
            code::EPANIC
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_turns_errors_and_panics_into_codes_and_messages() {
        assert_eq!(guard("f", || Ok(())), code::OK);
        let rc = guard("f", || Err(Failure::invalid("bad thing")));
        assert_eq!(rc, code::EINVAL);
        // SAFETY: message_ptr returns a NUL-terminated string owned by this thread.
        let msg = unsafe { CStr::from_ptr(message_ptr()) }
            .to_string_lossy()
            .into_owned();
        assert_eq!(msg, "f: bad thing");
        let rc = guard("g", || panic!("boom"));
        assert_eq!(rc, code::EPANIC);
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(message_ptr()) }
            .to_string_lossy()
            .into_owned();
        assert!(
            msg.contains("boom") && msg.starts_with("g: internal error"),
            "{msg}"
        );
        // A successful call leaves the message alone.
        assert_eq!(guard("h", || Ok(())), code::OK);
        // SAFETY: as above.
        let again = unsafe { CStr::from_ptr(message_ptr()) }
            .to_string_lossy()
            .into_owned();
        assert_eq!(again, msg);
    }

    #[test]
    fn codes_are_distinct_and_described() {
        let mut seen = std::collections::HashSet::new();
        for (value, name, _) in code::ALL {
            assert!(seen.insert(*value), "{name} reuses {value}");
            assert!(*value <= 0);
        }
        assert_eq!(describe(-12345), c"unknown error code");
    }
}
