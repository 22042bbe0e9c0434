//! # mnemo-ffi: the C ABI (`libmnemo.so`, `libmnemo.a`, `include/mnemo.h`)
//!
//! The only `extern "C"` code of the project. `include/mnemo.h` is the manual: the model,
//! every function, the errors each returns. This crate is the thin layer between that
//! header and [`mnemo_heap`], [`mnemo_log`] and [`mnemo_pmem`]:
//!
//! * every exported function runs its body in [`error::guard`]: errors become a negative
//!   `enum mnemo_error` code plus a thread-local message (`mnemo_errormsg`), and a panic is
//!   caught and reported as `MNEMO_EPANIC` instead of unwinding into C;
//! * handles are table entries, not pointers ([`handle`]): a closed or bogus handle is an
//!   error, never a use after free; a NULL pointer argument is `MNEMO_EINVAL`;
//! * transactions are the heap's explicit [`mnemo_heap::Tx`], kept in the thread's state with
//!   one level per `mnemo_tx_begin` ([`tx`]); heap calls inside one join it explicitly;
//! * `mnemo_msync`/`mnemo_gmsync` are sync points of the pool; before flushing they retire
//!   a transaction's redo record that could otherwise replay older bytes over the synced
//!   ones; why gmsync is one fence and not a redo record is explained in [`sync::gmsync`].
//!
//! Exported symbols are listed in `exports.txt`; `tests/exports.rs` compares that list with
//! `nm -D` of the built library and with the header. The C programs under `examples/c` are
//! compiled and run by `scripts/c-tests.sh`.

/// Deliberately broken variants (`mnemo_pmem::mutant`, on only in test builds) that
/// `tests/crash.rs` must catch:
///
/// | name | what breaks |
/// |---|---|
/// | `ffi.msync_skip_retire` | msync does not retire a transaction's redo record: recovery replays it over the synced bytes |
///
/// (The gmsync journal is the pool's since issue 13: its mutants, `journal.skip_record` and
/// `journal.skip_release`, are mnemo-pmem's, and `tests/crash.rs` runs them here too.)
pub const MUTANTS: &[&str] = &["ffi.msync_skip_retire"];

pub mod error;
pub mod handle;
pub mod sync;
pub mod tx;

use std::ffi::{c_char, c_int, c_void, CStr, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use mnemo_heap::{Heap, HeapOptions};
use mnemo_log::{Log, Lsn};
use mnemo_pmem::ByteRange;

use crate::error::{code, guard, Failure, Result};
use crate::handle::{lock, HeapPool, Kind, LogEntry, PoolEntry};

/// `mnemo_pool`: an open pool (opaque; its pointer value is a handle).
#[repr(C)]
#[derive(Debug)]
pub struct MnemoPool {
    _opaque: [u8; 0],
}

/// `mnemo_tx`: one level of a transaction (opaque handle).
#[repr(C)]
#[derive(Debug)]
pub struct MnemoTx {
    _opaque: [u8; 0],
}

/// `mnemo_log`: an open log (opaque handle).
#[repr(C)]
#[derive(Debug)]
pub struct MnemoLog {
    _opaque: [u8; 0],
}

/// `struct mnemo_range`: one range of a `mnemo_gmsync`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MnemoRange {
    /// First byte (an address in the pool's mapping).
    pub addr: *const c_void,
    /// Number of bytes.
    pub len: usize,
}

/// `struct mnemo_log_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MnemoLogInfo {
    /// Live entries.
    pub entries: u64,
    /// LSN of the oldest live entry.
    pub head: u64,
    /// LSN the next append gets.
    pub tail: u64,
    /// Bytes of the log area held by live entries.
    pub used_bytes: u64,
    /// Bytes free.
    pub free_bytes: u64,
    /// Bytes of the log area.
    pub capacity_bytes: u64,
}

/// `mnemo_log_fn`: called once per entry by `mnemo_log_iterate`; nonzero stops the walk.
pub type MnemoLogFn = Option<
    unsafe extern "C" fn(ctx: *mut c_void, lsn: u64, data: *const c_void, len: usize) -> c_int,
>;

/// Smallest log region `mnemo_log_open` accepts.
pub const LOG_SIZE_MIN: u64 = 256;

/// `MNEMO_POOL_SIZE_MIN`: the smallest pool that holds a heap with the default options.
pub fn pool_size_min() -> u64 {
    use mnemo_heap::layout::{
        Geometry, LANE_COUNT_DEFAULT, LANE_LOG_SIZE_DEFAULT, TOC_ENTRIES_DEFAULT,
    };
    Geometry::new(
        mnemo_pmem::limits::DATA_OFFSET,
        LANE_COUNT_DEFAULT,
        LANE_LOG_SIZE_DEFAULT,
        TOC_ENTRIES_DEFAULT,
    )
    .size_for_chunks(1)
}

/// Address reserved for pools when the caller passes `size_max` 0.
const SIZE_MAX_DEFAULT: u64 = mnemo_pmem::limits::RESERVE_DEFAULT;

fn put<T>(out: *mut T, value: T, what: &str) -> Result<()> {
    if out.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null (checked); the caller promises it points to writable memory for a `T`
    // (every function's `# Safety` section), and `write` needs no initialised old value.
    unsafe { out.write(value) };
    Ok(())
}

fn check_out<T>(out: *mut T, what: &str) -> Result<()> {
    if out.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    Ok(())
}

/// # Safety
/// `s` is NULL or points to a NUL-terminated string that outlives the call.
unsafe fn c_str<'a>(s: *const c_char, what: &str) -> Result<&'a CStr> {
    if s.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null; NUL-terminated and alive for the call by the caller's promise.
    Ok(unsafe { CStr::from_ptr(s) })
}

/// # Safety
/// As [`c_str`].
unsafe fn name_str<'a>(s: *const c_char) -> Result<&'a str> {
    // SAFETY: forwarded from the caller.
    let c = unsafe { c_str(s, "name") }?;
    c.to_str()
        .map_err(|_| Failure::invalid("the name is not valid UTF-8"))
}

/// Names starting with "mnemo." belong to the library.
fn reserved(name: &str) -> Result<()> {
    if name.starts_with("mnemo.") {
        return Err(Failure::invalid(format!(
            "region name {name:?}: names starting with \"mnemo.\" are reserved for the library"
        )));
    }
    Ok(())
}

/// # Safety
/// `p` is NULL only if `len` is 0; otherwise it points to `len` readable bytes.
unsafe fn bytes<'a>(p: *const c_void, len: usize, what: &str) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null and `len` readable bytes by the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

fn register_pool(heap: Heap) -> Result<usize> {
    let handle = handle::new_handle(Kind::Pool);
    let entry = PoolEntry::open(handle, heap)?;
    handle::write().pools.insert(handle, Arc::new(entry));
    Ok(handle)
}

fn pool_of(pool: *mut MnemoPool) -> Result<Arc<PoolEntry>> {
    handle::pool(pool as usize)
}

// ---------------------------------------------------------------------------------------
// Errors

/// The message of the last failing call on this thread (never NULL; "no error" before any).
/// Valid until the next failing call on the same thread.
#[no_mangle]
pub extern "C" fn mnemo_errormsg() -> *const c_char {
    error::message_ptr()
}

/// A static description of an error code (never NULL).
#[no_mangle]
pub extern "C" fn mnemo_strerror(code: c_int) -> *const c_char {
    error::describe(code).as_ptr()
}

// ---------------------------------------------------------------------------------------
// Pools

/// Create a pool file holding an empty heap.
///
/// # Safety
/// `path` is a NUL-terminated string; `pool` points to writable storage for a handle.
#[no_mangle]
pub unsafe extern "C" fn mnemo_pool_create(
    path: *const c_char,
    size: u64,
    size_max: u64,
    pool: *mut *mut MnemoPool,
) -> c_int {
    guard("mnemo_pool_create", || {
        check_out(pool, "pool")?;
        // SAFETY: forwarded from this function's contract.
        let path = unsafe { c_str(path, "path") }?;
        let path = Path::new(OsStr::from_bytes(path.to_bytes()));
        let size_max = if size_max == 0 {
            SIZE_MAX_DEFAULT.max(size)
        } else {
            size_max
        };
        if size_max < size {
            return Err(Failure::invalid(format!(
                "size_max {size_max} is smaller than size {size}"
            )));
        }
        let needed = pool_size_min();
        if size_max < needed {
            return Err(Failure::new(
                code::ENOSPC,
                format!("size_max {size_max} cannot hold the heap's metadata: a pool needs at least {needed} bytes (MNEMO_POOL_SIZE_MIN)"),
            ));
        }
        let existed = path.exists();
        let heap = match Heap::create_file(path, size, size_max, &HeapOptions::default()) {
            Ok(heap) => heap,
            Err(e) => {
                // The pool file may exist without a heap: remove what this call created.
                if !existed && !matches!(e, mnemo_heap::Error::Pool(_)) {
                    let _ = std::fs::remove_file(path);
                }
                return Err(e.into());
            }
        };
        put(pool, register_pool(heap)? as *mut MnemoPool, "pool")
    })
}

/// Open a pool file (recovering it if the last process crashed).
///
/// # Safety
/// `path` is a NUL-terminated string; `pool` points to writable storage for a handle.
#[no_mangle]
pub unsafe extern "C" fn mnemo_pool_open(path: *const c_char, pool: *mut *mut MnemoPool) -> c_int {
    guard("mnemo_pool_open", || {
        check_out(pool, "pool")?;
        // SAFETY: forwarded from this function's contract.
        let path = unsafe { c_str(path, "path") }?;
        let path = Path::new(OsStr::from_bytes(path.to_bytes()));
        let heap = Heap::open_file(path)?;
        put(pool, register_pool(heap)? as *mut MnemoPool, "pool")
    })
}

/// Close a pool: its logs are closed, the handle becomes invalid, the file is released.
#[no_mangle]
pub extern "C" fn mnemo_pool_close(pool: *mut MnemoPool) -> c_int {
    guard("mnemo_pool_close", || {
        let h = pool as usize;
        let entry = {
            let mut reg = handle::write();
            let entry = reg
                .pools
                .get(&h)
                .cloned()
                .ok_or_else(|| handle::missing(h, Kind::Pool))?;
            let txs = entry.open_txs.load(std::sync::atomic::Ordering::Acquire);
            if txs > 0 {
                return Err(Failure::new(
                    code::EBUSY,
                    format!("{txs} transaction level(s) are open on the pool; commit or abort them first"),
                ));
            }
            reg.pools.remove(&h);
            reg.logs.retain(|_, l| l.pool != h);
            entry
        };
        // Raw stores made after a transaction wrote the same bytes must not be undone by
        // replaying that record at the next open.
        let pending = {
            let mut replayable = lock(&entry.replayable);
            replayable.forget(entry.heap.durable_horizon());
            !replayable.is_empty()
        };
        let retired = if pending {
            sync::retire(&entry)
        } else {
            Ok(())
        };
        entry.heap.close();
        retired
    })
}

// ---------------------------------------------------------------------------------------
// Named regions, roots, allocation

/// The region named `name`, created zeroed with `size` bytes if absent.
///
/// # Safety
/// `name` is a NUL-terminated string; `off` points to a writable `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn mnemo_nvalloc(
    pool: *mut MnemoPool,
    name: *const c_char,
    size: u64,
    off: *mut u64,
) -> c_int {
    guard("mnemo_nvalloc", || {
        check_out(off, "off")?;
        let entry = pool_of(pool)?;
        // SAFETY: forwarded from this function's contract.
        let name = unsafe { name_str(name) }?;
        reserved(name)?;
        let offset = tx::joined(entry.handle, |t| Ok(t.nvalloc(name, size)?))
            .unwrap_or_else(|| Ok(entry.heap.nvalloc(name, size)?))?;
        put(off, offset, "off")
    })
}

/// Free the region named `name` and remove the name.
///
/// # Safety
/// `name` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn mnemo_nvfree(pool: *mut MnemoPool, name: *const c_char) -> c_int {
    guard("mnemo_nvfree", || {
        let entry = pool_of(pool)?;
        // SAFETY: forwarded from this function's contract.
        let name = unsafe { name_str(name) }?;
        reserved(name)?;
        tx::joined(entry.handle, |t| Ok(t.nvfree(name)?))
            .unwrap_or_else(|| Ok(entry.heap.nvfree(name)?))
    })
}

/// Look a region up without creating it.
///
/// # Safety
/// `name` is a NUL-terminated string; `off` and `size` are NULL or point to writable
/// `uint64_t`s.
#[no_mangle]
pub unsafe extern "C" fn mnemo_region(
    pool: *mut MnemoPool,
    name: *const c_char,
    off: *mut u64,
    size: *mut u64,
) -> c_int {
    guard("mnemo_region", || {
        let entry = pool_of(pool)?;
        // SAFETY: forwarded from this function's contract.
        let name = unsafe { name_str(name) }?;
        if name.len() > mnemo_heap::layout::NAME_MAX {
            return Err(Failure::new(
                code::ENAMETOOLONG,
                format!(
                    "name is {} bytes long; at most {} fit",
                    name.len(),
                    mnemo_heap::layout::NAME_MAX
                ),
            ));
        }
        let (o, s) = entry
            .heap
            .region(name)?
            .ok_or_else(|| Failure::new(code::ENOENT, format!("no region named {name:?}")))?;
        if !off.is_null() {
            put(off, o, "off")?;
        }
        if !size.is_null() {
            put(size, s, "size")?;
        }
        Ok(())
    })
}

/// A persistent static: the root named `name` of `size` bytes, created zeroed on first use,
/// as an address.
///
/// # Safety
/// `name` is a NUL-terminated string; `ptr` points to a writable `void *`.
#[no_mangle]
pub unsafe extern "C" fn mnemo_root(
    pool: *mut MnemoPool,
    name: *const c_char,
    size: u64,
    ptr: *mut *mut c_void,
) -> c_int {
    guard("mnemo_root", || {
        check_out(ptr, "ptr")?;
        let entry = pool_of(pool)?;
        // SAFETY: forwarded from this function's contract.
        let name = unsafe { name_str(name) }?;
        reserved(name)?;
        let offset = tx::joined(entry.handle, |t| Ok(t.nvalloc(name, size)?))
            .unwrap_or_else(|| Ok(entry.heap.nvalloc(name, size)?))?;
        let address = entry.heap.pool().ptr(offset, size)?;
        put(ptr, address.as_ptr().cast::<c_void>(), "ptr")
    })
}

/// Allocate `size` bytes (contents unspecified).
///
/// # Safety
/// `off` points to a writable `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn mnemo_pmalloc(pool: *mut MnemoPool, size: u64, off: *mut u64) -> c_int {
    guard("mnemo_pmalloc", || {
        check_out(off, "off")?;
        let entry = pool_of(pool)?;
        if size == 0 {
            return Err(Failure::invalid("allocation of 0 bytes"));
        }
        let offset = tx::joined(entry.handle, |t| Ok(t.alloc_bytes(size)?))
            .unwrap_or_else(|| Ok(entry.heap.pmalloc(size)?))?;
        put(off, offset, "off")
    })
}

/// Free the allocation starting at `off`.
#[no_mangle]
pub extern "C" fn mnemo_pfree(pool: *mut MnemoPool, off: u64) -> c_int {
    guard("mnemo_pfree", || {
        let entry = pool_of(pool)?;
        refuse_region_free(&entry, off)?;
        tx::joined(entry.handle, |t| Ok(t.free_offset(off)?))
            .unwrap_or_else(|| Ok(entry.heap.pfree(off)?))
    })
}

/// Freeing a named region's object by offset would leave its name dangling.
fn refuse_region_free(entry: &PoolEntry, off: u64) -> Result<()> {
    let regions = entry.heap.regions()?;
    if let Some((name, _, _)) = regions.iter().find(|(_, o, _)| *o == off) {
        return Err(Failure::new(
            code::EBADFREE,
            format!("offset {off:#x} is the named region {name:?}; free it with mnemo_nvfree"),
        ));
    }
    Ok(())
}

/// The address of pool offset `off` (NULL on error).
#[no_mangle]
pub extern "C" fn mnemo_direct(pool: *mut MnemoPool, off: u64) -> *mut c_void {
    let mut out = std::ptr::null_mut();
    guard("mnemo_direct", || {
        let entry = pool_of(pool)?;
        sync::check_data(&entry, off, 1)?;
        out = entry.heap.pool().ptr(off, 1)?.as_ptr().cast::<c_void>();
        Ok(())
    });
    out
}

/// The pool offset of address `ptr` (0 on error).
#[no_mangle]
pub extern "C" fn mnemo_offset(pool: *mut MnemoPool, ptr: *const c_void) -> u64 {
    let mut out = 0;
    guard("mnemo_offset", || {
        let entry = pool_of(pool)?;
        out = sync::offset_of(&entry, ptr as usize, 1)?;
        Ok(())
    });
    out
}

// ---------------------------------------------------------------------------------------
// Sync points

/// Make `len` bytes at `addr` durable (one sync point).
#[no_mangle]
pub extern "C" fn mnemo_msync(pool: *mut MnemoPool, addr: *const c_void, len: usize) -> c_int {
    guard("mnemo_msync", || {
        let entry = pool_of(pool)?;
        if addr.is_null() {
            return Err(Failure::invalid("addr is NULL"));
        }
        if len == 0 {
            return Ok(());
        }
        let offset = sync::offset_of(&entry, addr as usize, len as u64)?;
        sync::msync(&entry, ByteRange::new(offset, len as u64))
    })
}

/// Make several ranges durable in one sync point (see the header for the exact guarantee).
///
/// # Safety
/// `ranges` points to `n` readable `struct mnemo_range` (or is NULL with `n` 0).
#[no_mangle]
pub unsafe extern "C" fn mnemo_gmsync(
    pool: *mut MnemoPool,
    ranges: *const MnemoRange,
    n: usize,
) -> c_int {
    guard("mnemo_gmsync", || {
        let entry = pool_of(pool)?;
        if n == 0 {
            return Ok(());
        }
        if ranges.is_null() {
            return Err(Failure::invalid("ranges is NULL"));
        }
        if n > mnemo_pmem::limits::GMSYNC_RANGES_MAX {
            return Err(Failure::invalid(format!(
                "{n} ranges; at most {} per call",
                mnemo_pmem::limits::GMSYNC_RANGES_MAX
            )));
        }
        // SAFETY: non-null; `n` readable elements by the caller's promise.
        let given = unsafe { std::slice::from_raw_parts(ranges, n) };
        let mut list = Vec::with_capacity(n);
        for (i, r) in given.iter().enumerate() {
            if r.len == 0 {
                continue;
            }
            if r.addr.is_null() {
                return Err(Failure::invalid(format!("ranges[{i}].addr is NULL")));
            }
            let offset = sync::offset_of(&entry, r.addr as usize, r.len as u64)
                .map_err(|f| Failure::new(f.code, format!("ranges[{i}]: {}", f.message)))?;
            list.push(ByteRange::new(offset, r.len as u64));
        }
        sync::gmsync(&entry, &list)
    })
}

// ---------------------------------------------------------------------------------------
// Transactions

fn tx_of(tx: *mut MnemoTx) -> usize {
    tx as usize
}

/// Begin a transaction on this thread (or a nested level of the open one).
///
/// # Safety
/// `tx` points to writable storage for a handle.
#[no_mangle]
pub unsafe extern "C" fn mnemo_tx_begin(pool: *mut MnemoPool, tx: *mut *mut MnemoTx) -> c_int {
    guard("mnemo_tx_begin", || {
        check_out(tx, "tx")?;
        let entry = pool_of(pool)?;
        let handle = tx::begin(entry)?;
        put(tx, handle as *mut MnemoTx, "tx")
    })
}

/// Store `len` bytes from `src` at `off` when the transaction commits.
///
/// # Safety
/// `src` points to `len` readable bytes (may be NULL if `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn mnemo_tx_write(
    tx: *mut MnemoTx,
    off: u64,
    src: *const c_void,
    len: usize,
) -> c_int {
    guard("mnemo_tx_write", || {
        let h = tx_of(tx);
        tx::pool_of(h)?;
        tx::with(h, |t| {
            // SAFETY: forwarded from this function's contract.
            let data = unsafe { bytes(src, len, "src") }?;
            t.write_bytes(off, data)?;
            Ok(())
        })?;
        tx::note_write(h, Some(ByteRange::new(off, len as u64)));
        Ok(())
    })
}

/// Read `len` bytes at `off` as the transaction sees them (its own writes included).
///
/// # Safety
/// `dst` points to `len` writable bytes (may be NULL if `len` is 0).
#[no_mangle]
pub unsafe extern "C" fn mnemo_tx_read(
    tx: *mut MnemoTx,
    off: u64,
    dst: *mut c_void,
    len: usize,
) -> c_int {
    guard("mnemo_tx_read", || {
        tx::with(tx_of(tx), |t| {
            if len == 0 {
                return Ok(());
            }
            if dst.is_null() {
                return Err(Failure::invalid("dst is NULL"));
            }
            // SAFETY: non-null; `len` writable bytes by the caller's promise.
            let out = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), len) };
            t.read_bytes(off, out)?;
            Ok(())
        })
    })
}

/// Allocate `size` zeroed bytes that exist only if the transaction commits.
///
/// # Safety
/// `off` points to a writable `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn mnemo_tx_alloc(tx: *mut MnemoTx, size: u64, off: *mut u64) -> c_int {
    guard("mnemo_tx_alloc", || {
        let h = tx_of(tx);
        let offset = tx::with(h, |t| {
            check_out(off, "off")?;
            if size == 0 {
                return Err(Failure::invalid("allocation of 0 bytes"));
            }
            Ok(t.zalloc_bytes(size)?)
        })?;
        tx::note_write(h, None);
        put(off, offset, "off")
    })
}

/// Free the allocation at `off` when the transaction commits.
#[no_mangle]
pub extern "C" fn mnemo_tx_free(tx: *mut MnemoTx, off: u64) -> c_int {
    guard("mnemo_tx_free", || {
        let h = tx_of(tx);
        let entry = tx::pool_of(h)?;
        tx::with(h, |t| {
            refuse_region_free(&entry, off)?;
            Ok(t.free_offset(off)?)
        })?;
        tx::note_write(h, None);
        Ok(())
    })
}

/// End this level; the outermost level commits (durable on return).
#[no_mangle]
pub extern "C" fn mnemo_tx_commit(tx: *mut MnemoTx) -> c_int {
    guard("mnemo_tx_commit", || tx::end(tx_of(tx), true))
}

/// Abort the whole transaction (every level) and end this level.
#[no_mangle]
pub extern "C" fn mnemo_tx_abort(tx: *mut MnemoTx) -> c_int {
    guard("mnemo_tx_abort", || tx::end(tx_of(tx), false))
}

// ---------------------------------------------------------------------------------------
// Logs

/// Open (creating on first use) the log kept in the region named `name` of `size` bytes.
///
/// # Safety
/// `name` is a NUL-terminated string; `log` points to writable storage for a handle.
#[no_mangle]
pub unsafe extern "C" fn mnemo_log_open(
    pool: *mut MnemoPool,
    name: *const c_char,
    size: u64,
    log: *mut *mut MnemoLog,
) -> c_int {
    guard("mnemo_log_open", || {
        check_out(log, "log")?;
        let entry = pool_of(pool)?;
        // SAFETY: forwarded from this function's contract.
        let name = unsafe { name_str(name) }?;
        reserved(name)?;
        if tx::open_on(entry.handle) {
            return Err(Failure::new(
                code::ETXSTATE,
                "a log cannot be opened inside a transaction (its region would vanish on abort)",
            ));
        }
        if size < LOG_SIZE_MIN {
            return Err(Failure::invalid(format!(
                "a log region needs at least {LOG_SIZE_MIN} bytes, {size} given"
            )));
        }
        let offset = entry.heap.nvalloc(name, size)?;
        if !lock(&entry.open_logs).insert(offset) {
            return Err(Failure::new(
                code::EBUSY,
                format!("the log {name:?} is already open in this process; use that handle"),
            ));
        }
        let range = offset.next_multiple_of(64)..offset + size;
        let holder = HeapPool(entry.heap.clone());
        let opened = match Log::open(holder.clone(), range.clone()) {
            Err(mnemo_log::Error::NotFormatted { .. }) => Log::create(holder, range),
            other => other.map(|(log, _)| log),
        };
        let opened = match opened {
            Ok(l) => l,
            Err(e) => {
                lock(&entry.open_logs).remove(&offset);
                return Err(e.into());
            }
        };
        let h = handle::new_handle(Kind::Log);
        let log_entry = LogEntry {
            pool: entry.handle,
            entry: entry.clone(),
            region: offset,
            log: Mutex::new(opened),
        };
        handle::write().logs.insert(h, Arc::new(log_entry));
        put(log, h as *mut MnemoLog, "log")
    })
}

/// Append one entry (durable on return: one fence).
///
/// # Safety
/// `data` points to `len` readable bytes; `lsn` is NULL or points to a writable `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn mnemo_log_append(
    log: *mut MnemoLog,
    data: *const c_void,
    len: usize,
    lsn: *mut u64,
) -> c_int {
    guard("mnemo_log_append", || {
        let entry = handle::log(log as usize)?;
        // SAFETY: forwarded from this function's contract.
        let data = unsafe { bytes(data, len, "data") }?;
        let at = lock(&entry.log).append(data)?;
        if !lsn.is_null() {
            put(lsn, at.get(), "lsn")?;
        }
        Ok(())
    })
}

/// Call `fn` for every live entry, oldest first, until it returns nonzero.
///
/// # Safety
/// `func` is NULL or a valid function. It may call any mnemo function, this log's included:
/// the walk reads the entries first and calls `func` after releasing the log.
#[no_mangle]
pub unsafe extern "C" fn mnemo_log_iterate(
    log: *mut MnemoLog,
    func: MnemoLogFn,
    ctx: *mut c_void,
) -> c_int {
    guard("mnemo_log_iterate", || {
        let entry = handle::log(log as usize)?;
        let Some(func) = func else {
            return Err(Failure::invalid("fn is NULL"));
        };
        let entries = {
            let log = lock(&entry.log);
            log.iter().collect::<std::result::Result<Vec<_>, _>>()?
        };
        for e in &entries {
            // SAFETY: `func` is a valid C function by the caller's promise; the data pointer
            // and length describe `e.data`, alive for the call.
            let stop = unsafe { func(ctx, e.lsn.get(), e.data.as_ptr().cast(), e.data.len()) };
            if stop != 0 {
                break;
            }
        }
        Ok(())
    })
}

/// Drop every entry before `lsn` (a live entry's LSN or the tail).
///
/// # Safety
/// `dropped` is NULL or points to a writable `uint64_t`.
#[no_mangle]
pub unsafe extern "C" fn mnemo_log_truncate(
    log: *mut MnemoLog,
    lsn: u64,
    dropped: *mut u64,
) -> c_int {
    guard("mnemo_log_truncate", || {
        let entry = handle::log(log as usize)?;
        let n = lock(&entry.log).truncate_front(Lsn::from_raw(lsn))?;
        if !dropped.is_null() {
            put(dropped, n, "dropped")?;
        }
        Ok(())
    })
}

/// Counters and positions of a log.
///
/// # Safety
/// `info` points to a writable `struct mnemo_log_info`.
#[no_mangle]
pub unsafe extern "C" fn mnemo_log_info(log: *mut MnemoLog, info: *mut MnemoLogInfo) -> c_int {
    guard("mnemo_log_info", || {
        check_out(info, "info")?;
        let entry = handle::log(log as usize)?;
        let l = lock(&entry.log);
        let value = MnemoLogInfo {
            entries: l.len(),
            head: l.head().get(),
            tail: l.tail().get(),
            used_bytes: l.used(),
            free_bytes: l.free(),
            capacity_bytes: l.capacity(),
        };
        put(info, value, "info")
    })
}

/// Close a log handle (appends are already durable; nothing is written).
#[no_mangle]
pub extern "C" fn mnemo_log_close(log: *mut MnemoLog) -> c_int {
    guard("mnemo_log_close", || {
        let h = log as usize;
        let removed = handle::write().logs.remove(&h);
        let entry = removed.ok_or_else(|| handle::missing(h, Kind::Log))?;
        lock(&entry.log).close();
        Ok(())
    })
}
