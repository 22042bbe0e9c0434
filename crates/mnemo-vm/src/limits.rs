//! Every limit of the persistent-VM layer, named once, with its reason.

use std::time::Duration;

/// Longest wait for QEMU's QMP socket after its start. QEMU is ready in ~50 ms here; a loaded
/// 2-core machine with tests in parallel has been seen to take seconds.
pub const QMP_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest wait for one QMP reply. Every command used here answers at once (`migrate` and
/// `migrate-incoming` return before the transfer, which is polled).
pub const QMP_REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest QMP line accepted (replies here are a few hundred bytes; `query-migrate` is the
/// largest, ~1 KiB). A longer line is a broken or hostile peer.
pub const QMP_LINE_BYTES_MAX: usize = 1 << 20;

/// Longest wait for the migration stream of a fixation, or its loading at recovery. The
/// stream is ~300 KiB and takes ~15 ms; a fixation that cannot finish in this time would not
/// finish within any power supply's hold-up time either.
pub const MIGRATION_TIMEOUT: Duration = Duration::from_secs(60);

/// Interval of the `query-migrate` / `query-status` polls (a fixation takes ~15 ms).
pub const MIGRATION_POLL: Duration = Duration::from_millis(1);

/// Longest wait for QEMU to exit after `quit`.
pub const QEMU_EXIT_TIMEOUT: Duration = Duration::from_secs(20);

/// Largest saved state accepted. The state holds CPU and device state and the small ROM
/// blocks (~282 KiB for q35); RAM never goes into it. A state this large means RAM went into
/// the stream (a `share=off` backend) or the file is not a state.
pub const STATE_BYTES_MAX: u64 = 64 << 20;

/// Pages of guest RAM sampled into a state's RAM check (4 KiB each: 1 MiB read at fixation and
/// again at recovery, well under a millisecond on persistent memory or tmpfs).
pub const RAM_SAMPLE_PAGES: u32 = 256;

/// Size of a sampled page.
pub const RAM_PAGE_BYTES: u64 = 4096;

/// Smallest and largest guest RAM: below 16 MiB no Linux boots; the upper bound only keeps a
/// typo (`--mem 256G`) from creating a file larger than any machine here.
pub const RAM_BYTES_MIN: u64 = 16 << 20;
pub const RAM_BYTES_MAX: u64 = 1 << 40;

/// Longest VM name: it is a directory name, part of QEMU's `-name`, and the name of the VM's
/// record in the registry pool (a heap region name holds at most 63 bytes).
pub const NAME_BYTES_MAX: usize = 63;

/// Longest path of a Unix socket (`sun_path` is 108 bytes with its terminating NUL).
pub const SOCKET_PATH_BYTES_MAX: usize = 107;

/// Largest configuration or status file read (they are a few hundred bytes).
pub const JSON_FILE_BYTES_MAX: u64 = 1 << 20;

/// Attempts at a VM's lock, 5 ms apart, before it is reported as running: `mnemo vm list`
/// probes it with a shared lock for an instant.
pub const LOCK_TRIES: u32 = 4;

/// Largest configuration kept in a registry record (JSON; a few hundred bytes, more only with
/// long paths). It must fit one redo record of the registry's heap (16 KiB) with the rest of
/// a creation.
pub const CONFIG_BYTES_MAX: u64 = 12 << 10;

/// Longest wait for the registry's lock. Each holder holds it for one registry operation
/// (open the pool, one transaction, close: about a millisecond); a longer wait means a
/// holder is stuck.
pub const REGISTRY_LOCK_WAIT: Duration = Duration::from_secs(10);

/// Size of a new registry pool, and the most it may grow to (a record is 192 bytes plus its
/// configuration: a pool of 1 MiB holds its heap's metadata and hundreds of VMs).
pub const REGISTRY_POOL_BYTES: u64 = 1 << 20;
pub const REGISTRY_POOL_BYTES_MAX: u64 = 64 << 20;

/// Most VMs in one registry (entries of the heap's table of contents, one more for the
/// header).
pub const REGISTRY_VMS_MAX: u64 = 1023;
