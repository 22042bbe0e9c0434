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
        let chain = Chain::current()?;
        Chain::replace(handler, block_all)?;
        Ok(chain)
    }

    /// The SIGSEGV action in force now.
    fn current() -> Result<Chain, String> {
        // SAFETY: a zeroed sigaction struct is valid; sigaction only reads the action here.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGSEGV, null_mut(), &mut old) != 0 {
                return Err(format!("sigaction: {}", std::io::Error::last_os_error()));
            }
            Ok(Chain(old))
        }
    }

    /// Installs `handler` for SIGSEGV, on the alternate signal stack (a stack overflow's
    /// fault must still find a stack to run on: Rust gives every thread it starts one).
    fn replace(handler: Handler, block_all: bool) -> Result<(), String> {
        // SAFETY: a zeroed sigaction struct is valid; the handler is an `extern "C"` function
        // of the SA_SIGINFO signature.
        unsafe {
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
        }
        Ok(())
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
///
/// The action it replaces is kept *before* the handler is installed: a fault the handler
/// does not own may arrive the moment `sigaction` returns, on any thread (another thread's
/// stack overflow; with both users of this module, a fault of the first one's while the
/// second installs), and must find the previous handler then. (Kept in the same `OnceLock`
/// as the outcome, it was published only after the installation returned: a fault in
/// between found nothing, restored the default action over our handler and the one before
/// it, and the next fault of either killed the process with a bare SIGSEGV.)
#[derive(Debug)]
pub struct Installed {
    chain: OnceLock<Chain>,
    outcome: OnceLock<Result<(), String>>,
}

impl Installed {
    /// Nothing installed yet.
    pub const fn new() -> Installed {
        Installed {
            chain: OnceLock::new(),
            outcome: OnceLock::new(),
        }
    }

    /// Installs `handler` the first time (see [`Chain::install`]); the outcome of that first
    /// installation every time.
    pub fn install(&self, handler: Handler, block_all: bool) -> Result<(), String> {
        self.install_observed(handler, block_all, &|| {})
    }

    /// [`Installed::install`], calling `installed` right after `sigaction` installed the
    /// handler and before the installation returns (tests: a fault in that window).
    fn install_observed(
        &self,
        handler: Handler,
        block_all: bool,
        installed: &dyn Fn(),
    ) -> Result<(), String> {
        self.outcome
            .get_or_init(|| {
                let chain = Chain::current()?;
                // Published before the handler can run: see the type's documentation.
                let _ = self.chain.set(chain);
                Chain::replace(handler, block_all)?;
                installed();
                Ok(())
            })
            .clone()
    }

    /// Hands a fault that is not ours to the handler that was there before, or restores the
    /// default action if nothing was installed (async-signal-safe: no allocation, no lock).
    pub fn forward(&self, sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
        match self.chain.get() {
            Some(chain) => chain.forward(sig, info, ctx),
            None => restore_default(sig),
        }
    }
}

impl Default for Installed {
    fn default() -> Self {
        Installed::new()
    }
}

/// Each case runs in a child process (this test binary again, one `#[ignore]`d test alone,
/// `MNEMO_SIGCHAIN_CHILD=1`): it installs handlers process-wide and ends in a fault.
#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Output};

    const CHILD: &str = "MNEMO_SIGCHAIN_CHILD";

    fn in_child() -> bool {
        std::env::var_os(CHILD).is_some()
    }

    /// Runs the ignored test `name` alone in a child process.
    fn child(name: &str) -> Output {
        let exe = std::env::current_exe().expect("the test binary");
        Command::new(exe)
            .args(["--exact", &format!("sigchain::tests::{name}")])
            .args(["--ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .output()
            .expect("running the child")
    }

    fn say(text: &str) {
        // SAFETY: write(2) of a valid buffer; async-signal-safe.
        unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
    }

    /// A page of anonymous memory with protection `prot`.
    fn page(prot: libc::c_int) -> *mut u8 {
        // SAFETY: a fresh anonymous private mapping; nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                null_mut(),
                4096,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap");
        p.cast()
    }

    /// A page tracked by the dirty tracking's mprotect fallback (this crate's handler
    /// installed), written once through the handler.
    fn tracked_page() -> crate::segv::Region {
        let at = page(libc::PROT_READ | libc::PROT_WRITE);
        let region = crate::segv::Region::new(at as usize, 4096).expect("tracking a page");
        // SAFETY: the page is ours and mapped; the store faults once and the handler makes
        // the page writable again.
        unsafe { std::ptr::write_volatile(at, 7) };
        say("tracked store ok\n");
        region
    }

    #[allow(unconditional_recursion)]
    fn recurse(n: u64) -> u64 {
        let frame = [n; 32];
        std::hint::black_box(&frame);
        recurse(n + 1).wrapping_add(frame[3])
    }

    extern "C" fn previous_siginfo(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
        say("previous handler (siginfo)\n");
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(42) };
    }

    extern "C" fn previous_plain(_: libc::c_int) {
        say("previous handler (plain)\n");
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(43) };
    }

    /// Installs a previous handler of either kind, as a program or library might have.
    fn install_previous(siginfo: bool) {
        // SAFETY: a zeroed sigaction is valid; both handlers have the signature their flags
        // announce.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            if siginfo {
                action.sa_sigaction = previous_siginfo as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            } else {
                action.sa_sigaction = previous_plain as *const () as usize;
                action.sa_flags = libc::SA_ONSTACK;
            }
            assert_eq!(libc::sigaction(libc::SIGSEGV, &action, null_mut()), 0);
        }
    }

    /// A second user of the chain (as mnemo-vpm's fault path is): owns no fault.
    static SECOND: Installed = Installed::new();

    extern "C" fn second_handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
        SECOND.forward(sig, info, ctx);
    }

    /// A stack overflow with our handlers installed (the dirty tracking's, then a second one
    /// chained to it) still reaches Rust's handler, which names it and aborts: not a bare
    /// SIGSEGV.
    #[test]
    fn a_stack_overflow_is_still_reported_as_one() {
        let out = child("child_overflow");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("tracked store ok"), "{stderr}");
        assert!(
            stderr.contains("has overflowed its stack"),
            "Rust's report missing: {:?}\n{stderr}",
            out.status
        );
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stderr}");
    }

    #[test]
    #[ignore = "run by a_stack_overflow_is_still_reported_as_one in a child process"]
    fn child_overflow() {
        if !in_child() {
            return;
        }
        let _region = tracked_page();
        SECOND
            .install(second_handler, false)
            .expect("second handler");
        let deep = std::thread::Builder::new()
            .name("deep".into())
            .stack_size(256 << 10)
            .spawn(|| recurse(0))
            .expect("thread");
        let _ = deep.join();
        say("the overflow was survived?\n");
    }

    /// A fault outside every tracked range goes to the handler that was there before ours,
    /// whichever kind it is (`SA_SIGINFO` or plain); a tracked page's fault does not.
    #[test]
    fn a_fault_outside_every_range_reaches_the_previous_handler() {
        for (name, code, text) in [
            ("child_previous_siginfo", 42, "previous handler (siginfo)"),
            ("child_previous_plain", 43, "previous handler (plain)"),
        ] {
            let out = child(name);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains("tracked store ok"), "{name}: {stderr}");
            assert!(stderr.contains(text), "{name}: {stderr}");
            assert_eq!(out.status.code(), Some(code), "{name}: {stderr}");
        }
        // With no handler before ours but Rust's, the process dies of the fault (signal 11),
        // as it would without us.
        let out = child("child_no_previous");
        let stderr = String::from_utf8_lossy(&out.stderr);
        use std::os::unix::process::ExitStatusExt;
        assert!(stderr.contains("tracked store ok"), "{stderr}");
        assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{stderr}");
    }

    fn fault_outside() {
        let none = page(libc::PROT_NONE);
        // SAFETY: deliberately faults: the page is mapped PROT_NONE and tracked by nobody.
        unsafe { std::ptr::write_volatile(none, 1) };
        say("the fault was lost\n");
        // SAFETY: _exit is always safe to call.
        unsafe { libc::_exit(7) };
    }

    #[test]
    #[ignore = "run by a_fault_outside_every_range_reaches_the_previous_handler"]
    fn child_previous_siginfo() {
        if in_child() {
            install_previous(true);
            let _region = tracked_page();
            fault_outside();
        }
    }

    #[test]
    #[ignore = "run by a_fault_outside_every_range_reaches_the_previous_handler"]
    fn child_previous_plain() {
        if in_child() {
            install_previous(false);
            let _region = tracked_page();
            fault_outside();
        }
    }

    #[test]
    #[ignore = "run by a_fault_outside_every_range_reaches_the_previous_handler"]
    fn child_no_previous() {
        if in_child() {
            let _region = tracked_page();
            fault_outside();
        }
    }

    static RACING: Installed = Installed::new();

    extern "C" fn racing_handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
        RACING.forward(sig, info, ctx);
    }

    /// A fault that is not ours arriving after `sigaction` installed the handler but before
    /// the installation returned still reaches the previous handler (it found none before:
    /// the default action was restored over both, and the signal lost).
    #[test]
    fn a_fault_during_installation_reaches_the_previous_handler() {
        let out = child("child_fault_while_installing");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("previous handler (siginfo)"), "{stderr}");
        assert_eq!(out.status.code(), Some(42), "{stderr}");
    }

    #[test]
    #[ignore = "run by a_fault_during_installation_reaches_the_previous_handler"]
    fn child_fault_while_installing() {
        if !in_child() {
            return;
        }
        install_previous(true);
        RACING
            .install_observed(racing_handler, false, &|| {
                // SAFETY: raises SIGSEGV on this thread; the handler just installed runs.
                unsafe { libc::raise(libc::SIGSEGV) };
            })
            .expect("installing");
        say("the fault was lost\n");
        // SAFETY: _exit is always safe to call.
        unsafe { libc::_exit(7) };
    }
}
