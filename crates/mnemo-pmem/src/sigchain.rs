//! A SIGSEGV handler that passes on the faults it does not own: shared by the dirty tracking
//! of this crate (`segv`) and the fault path of virtual persistent memory (`mnemo-vpm`).
//! Each keeps an [`Installed`] of its own (a [`Chain`] installed once); its handler resolves
//! its own faults and gives every other one to [`Installed::forward`], which calls the handler
//! that was there before (the other user, Rust's stack-overflow report) or restores the
//! default action, so the access repeats and the process dies of it as without us.

#![allow(unsafe_code)]

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::OnceLock;

/// The signature of an `SA_SIGINFO` handler.
pub type Handler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void);

/// The SIGSEGV action that was in force before ours.
pub struct Chain(libc::sigaction);

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("handler", &self.0.sa_sigaction)
            .field("flags", &self.0.sa_flags)
            .finish()
    }
}

// SAFETY: a sigaction is plain data (a handler address, flags, a mask); it is written once,
// before our handler is installed, and only read afterwards.
unsafe impl Sync for Chain {}
// SAFETY: as above.
unsafe impl Send for Chain {}

impl Chain {
    /// Installs `handler` for SIGSEGV (`SA_SIGINFO | SA_ONSTACK | SA_RESTART`), keeping the
    /// action it replaces. `block_all`: every signal blocked while the handler runs (for a
    /// handler that takes a lock no other signal handler must interrupt).
    pub fn install(handler: Handler, block_all: bool) -> Result<Chain, String> {
        // SAFETY: zeroed sigaction structs are valid; the current action is read and kept
        // before ours is installed, so the handler can always chain.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGSEGV, null_mut(), &mut old) != 0 {
                return Err(format!("sigaction: {}", std::io::Error::last_os_error()));
            }
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = handler as *const () as usize;
            new.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            if block_all {
                libc::sigfillset(&mut new.sa_mask);
            } else {
                libc::sigemptyset(&mut new.sa_mask);
            }
            if libc::sigaction(libc::SIGSEGV, &new, null_mut()) != 0 {
                return Err(format!("sigaction: {}", std::io::Error::last_os_error()));
            }
            Ok(Chain(old))
        }
    }

    /// Hands a fault that is not ours to the handler that was there before; without one,
    /// restores the default action and returns (async-signal-safe).
    pub fn forward(&self, sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
        let action = self.0.sa_sigaction;
        if action != libc::SIG_DFL && action != libc::SIG_IGN {
            if self.0.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed with SA_SIGINFO, so it has
                // this signature.
                let f: Handler = unsafe { std::mem::transmute(action) };
                f(sig, info, ctx);
            } else {
                // SAFETY: a handler installed without SA_SIGINFO takes the signal number.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(action) };
                f(sig);
            }
            return;
        }
        restore_default(sig);
    }
}

/// Puts back the default action of `sig`: the faulting access repeats and the process dies
/// of it as it would have without any handler (async-signal-safe).
pub fn restore_default(sig: libc::c_int) {
    // SAFETY: an all-zero sigaction with SIG_DFL is a valid argument; sigaction is
    // async-signal-safe.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &dfl, null_mut());
    }
}

/// A handler installed at most once per process (the first [`Installed::install`] installs,
/// later ones return its outcome), and the chain it keeps.
#[derive(Debug)]
pub struct Installed(OnceLock<Result<Chain, String>>);

impl Installed {
    /// Nothing installed yet.
    pub const fn new() -> Installed {
        Installed(OnceLock::new())
    }

    /// Installs `handler` the first time (see [`Chain::install`]); the outcome of that first
    /// installation every time.
    pub fn install(&self, handler: Handler, block_all: bool) -> Result<(), String> {
        self.0
            .get_or_init(|| Chain::install(handler, block_all))
            .as_ref()
            .map(|_| ())
            .map_err(Clone::clone)
    }

    /// Hands a fault that is not ours to the handler that was there before, or restores the
    /// default action if nothing was installed (async-signal-safe: no allocation, no lock).
    pub fn forward(&self, sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
        match self.0.get() {
            Some(Ok(chain)) => chain.forward(sig, info, ctx),
            _ => restore_default(sig),
        }
    }
}

impl Default for Installed {
    fn default() -> Self {
        Installed::new()
    }
}
