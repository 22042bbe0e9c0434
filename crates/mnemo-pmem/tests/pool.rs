//! Pool file behaviour: create/open/close, growth, and every kind of bad input the issue
//! names (truncated, zeroed, bit-flipped, wrong magic, newer version, short file, missing
//! file, read-only file, full disk, second opener). Pools live on /dev/shm (tmpfs), the
//! NVMM stand-in, and on the ordinary disk where durability needs msync.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use mnemo_pmem::header::{Header, Pair};
use mnemo_pmem::limits::{DATA_OFFSET, HEADER_COPY_SIZE};
use mnemo_pmem::{CreateOptions, Durability, Error, MediaKind, OpenOptions, Pool};

fn shm_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mnemo-pool-test")
        .tempdir_in("/dev/shm")
        .expect("tempdir on /dev/shm")
}

fn make(path: &Path, size: u64) -> Pool {
    Pool::create(path, &CreateOptions::new(size, "test")).expect("create")
}

fn open(path: &Path) -> Result<Pool, Error> {
    Pool::open(path, &OpenOptions::default())
}

#[test]
fn create_write_close_reopen_at_another_address() {
    let dir = shm_dir();
    let path = dir.path().join("a.pool");
    let pool = make(&path, 1 << 20);
    assert_eq!(pool.media_info().kind, MediaKind::Tmpfs);
    assert_eq!(pool.size(), 1 << 20);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "pool files are private to their owner");
    pool.write(DATA_OFFSET, b"hello, durable world").unwrap();
    pool.msync(DATA_OFFSET, 20).unwrap();
    let first_base = pool.base();
    let uuid = pool.header().pool_uuid;
    // Keep the first mapping's addresses occupied so the second lands elsewhere.
    let keep = mnemo_pmem::reserve::Reservation::new(1 << 30).unwrap();
    pool.close().unwrap();
    let pool = open(&path).unwrap();
    assert!(pool.was_clean());
    assert_eq!(pool.header().pool_uuid, uuid);
    let mut out = [0u8; 20];
    pool.read(DATA_OFFSET, &mut out).unwrap();
    assert_eq!(&out, b"hello, durable world");
    let _ = (first_base, keep);
}

#[test]
fn unclean_shutdown_is_reported() {
    let dir = shm_dir();
    let path = dir.path().join("a.pool");
    let pool = make(&path, 1 << 20);
    // Simulate a crash: leak the pool without running its close.
    std::mem::forget(pool);
    // The leaked pool still holds the lock in this process: flock locks belong to the open
    // file description, so open a fresh one after releasing it via a copy of the file.
    let copy = dir.path().join("b.pool");
    std::fs::copy(&path, &copy).unwrap();
    let pool = open(&copy).unwrap();
    assert!(!pool.was_clean());
}

#[test]
fn second_opener_is_refused() {
    let dir = shm_dir();
    let path = dir.path().join("a.pool");
    let _pool = make(&path, 1 << 20);
    match open(&path) {
        Err(e @ Error::Busy { .. }) => assert!(e.to_string().contains("in use by another process")),
        other => panic!("expected Busy, got {other:?}"),
    }
}

#[test]
fn create_refuses_existing_and_missing_dir_and_bad_sizes() {
    let dir = shm_dir();
    let path = dir.path().join("a.pool");
    std::fs::write(&path, b"precious").unwrap();
    assert!(matches!(
        Pool::create(&path, &CreateOptions::new(1 << 20, "x")),
        Err(Error::AlreadyExists { .. })
    ));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"precious",
        "an existing file is never damaged"
    );
    let nowhere = dir.path().join("no/such/dir/a.pool");
    let err = Pool::create(&nowhere, &CreateOptions::new(1 << 20, "x")).unwrap_err();
    assert!(err.to_string().contains("directory"), "{err}");
    assert!(matches!(
        Pool::create(&dir.path().join("s"), &CreateOptions::new(4096, "x")),
        Err(Error::InvalidArgument(_))
    ));
    let long = "x".repeat(65);
    assert!(matches!(
        Pool::create(&dir.path().join("l"), &CreateOptions::new(1 << 20, &long)),
        Err(Error::InvalidArgument(_))
    ));
    // No temporary files are left behind by failed creates.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn missing_file_and_read_only_file() {
    let dir = shm_dir();
    let missing = dir.path().join("nope.pool");
    let err = open(&missing).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }));
    assert!(
        err.to_string().contains("mnemo pool create"),
        "says what to do: {err}"
    );
    let path = dir.path().join("ro.pool");
    make(&path, 1 << 20).close().unwrap();
    let before = std::fs::read(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
    let err = open(&path).unwrap_err();
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    assert!(err.to_string().contains("read-only"), "{err}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "a refused open changes nothing"
    );
}

fn corrupt(path: &Path, offset: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let pool = make(&path, 256 << 10);
    pool.write(DATA_OFFSET, b"payload").unwrap();
    pool.msync(DATA_OFFSET, 7).unwrap();
    pool.close().unwrap();
    path
}

#[test]
fn truncated_and_short_files() {
    let dir = shm_dir();
    let path = fresh(dir.path(), "t.pool");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(128 << 10)
        .unwrap();
    let err = open(&path).unwrap_err();
    assert!(
        matches!(err, Error::Truncated { expected, .. } if expected == 256 << 10),
        "{err:?}"
    );
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(5000)
        .unwrap();
    assert!(matches!(open(&path).unwrap_err(), Error::Truncated { .. }));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(0)
        .unwrap();
    assert!(matches!(open(&path).unwrap_err(), Error::NotAPool { .. }));
}

#[test]
fn zeroed_header_wrong_magic_newer_version() {
    let dir = shm_dir();
    let path = fresh(dir.path(), "z.pool");
    corrupt(&path, 0, &vec![0u8; 2 * HEADER_COPY_SIZE as usize]);
    let err = open(&path).unwrap_err();
    assert!(matches!(err, Error::NotAPool { .. }), "{err:?}");
    assert!(err.to_string().contains("all zeros"), "{err}");

    let path = fresh(dir.path(), "m.pool");
    corrupt(&path, 0, b"NOTMNEMO");
    corrupt(&path, HEADER_COPY_SIZE, b"NOTMNEMO");
    assert!(matches!(open(&path).unwrap_err(), Error::NotAPool { .. }));

    let path = fresh(dir.path(), "v.pool");
    corrupt(&path, 8, &9u32.to_le_bytes());
    corrupt(&path, HEADER_COPY_SIZE + 8, &9u32.to_le_bytes());
    let err = open(&path).unwrap_err();
    assert!(
        matches!(err, Error::NewerVersion { found: 9, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("upgrade mnemo"), "{err}");
}

#[test]
fn one_bad_copy_opens_from_the_other_and_is_repaired() {
    let dir = shm_dir();
    let path = fresh(dir.path(), "c.pool");
    let bytes = std::fs::read(&path).unwrap();
    let pair = Pair::decode(&bytes);
    let chosen = pair.chosen().unwrap();
    corrupt(&path, chosen as u64 * HEADER_COPY_SIZE + 200, &[0xAB]);
    let report = mnemo_pmem::inspect::inspect(&path).unwrap();
    assert!(report.healthy());
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.message.contains("damaged")),
        "{:?}",
        report.findings
    );
    let pool = open(&path).unwrap();
    let mut out = [0u8; 7];
    pool.read(DATA_OFFSET, &mut out).unwrap();
    assert_eq!(&out, b"payload");
    pool.close().unwrap();
    let after = Pair::decode(&std::fs::read(&path).unwrap());
    assert!(
        after.copies.iter().all(Result::is_ok),
        "open + close rewrote the damaged copy"
    );
}

/// Flip one bit in every byte of both header copies, one at a time, on a real pool file:
/// each flip must be either detected (the pool opens from the other copy) or refused
/// cleanly — never misread, never a panic — and the data must survive.
#[test]
fn bit_flip_sweep_over_both_header_copies() {
    let dir = shm_dir();
    let path = fresh(dir.path(), "f.pool");
    let pristine = std::fs::read(&path).unwrap();
    let expected = Pair::decode(&pristine).header().unwrap().clone();
    let mut survived = 0;
    for byte in 0..(2 * HEADER_COPY_SIZE) as usize {
        let mut image = pristine.clone();
        image[byte] ^= 1 << (byte % 8);
        // Header level: the damaged copy is rejected, the other one rules.
        let pair = Pair::decode(&image);
        let copy = byte / HEADER_COPY_SIZE as usize;
        assert!(
            pair.copies[copy].is_err(),
            "flip at byte {byte} went unnoticed"
        );
        let ruling = pair.header().expect("the other copy is intact");
        assert_eq!(ruling.pool_uuid, expected.pool_uuid);
        assert_eq!(ruling.pool_size, expected.pool_size);
        // File level, on a sample (every 61st byte) to keep the test quick: open succeeds.
        if byte % 61 == 0 {
            std::fs::write(&path, &image).unwrap();
            let pool = open(&path).unwrap_or_else(|e| panic!("flip at {byte}: {e}"));
            let mut out = [0u8; 7];
            pool.read(DATA_OFFSET, &mut out).unwrap();
            assert_eq!(&out, b"payload");
            pool.close().unwrap();
            survived += 1;
        }
    }
    assert!(survived > 100);
    // Both copies flipped at the same field: refused cleanly as corrupt.
    let mut image = pristine.clone();
    image[50] ^= 1;
    image[HEADER_COPY_SIZE as usize + 50] ^= 1;
    std::fs::write(&path, &image).unwrap();
    let err = open(&path).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("mnemo pool check"));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        image,
        "a refused pool is not modified"
    );
}

#[test]
fn growth_keeps_offsets_and_addresses() {
    let dir = shm_dir();
    let path = dir.path().join("g.pool");
    let pool = make(&path, 128 << 10);
    let base = pool.base();
    pool.write(DATA_OFFSET, b"before growth").unwrap();
    pool.msync(DATA_OFFSET, 13).unwrap();
    for size in [256 << 10, 1 << 20, 8 << 20] {
        pool.grow(size).unwrap();
        assert_eq!(pool.size(), size);
        assert_eq!(pool.base(), base, "the base address never moves");
        let tail = size - 64;
        let mut zero = [1u8; 64];
        pool.read(tail, &mut zero).unwrap();
        assert!(zero.iter().all(|&b| b == 0), "new bytes read as zero");
        pool.write(tail, b"tail").unwrap();
        pool.msync(tail, 4).unwrap();
    }
    pool.close().unwrap();
    let pool = open(&path).unwrap();
    assert_eq!(pool.size(), 8 << 20);
    let mut out = [0u8; 13];
    pool.read(DATA_OFFSET, &mut out).unwrap();
    assert_eq!(&out, b"before growth");
    let mut tail = [0u8; 4];
    pool.read((8 << 20) - 64, &mut tail).unwrap();
    assert_eq!(&tail, b"tail");
    assert!(matches!(
        pool.read(8 << 20, &mut tail),
        Err(Error::OutOfBounds { .. })
    ));
}

#[test]
fn growth_beyond_the_reservation_is_refused() {
    let dir = shm_dir();
    let path = dir.path().join("g.pool");
    let mut options = CreateOptions::new(128 << 10, "x");
    options.size_max = 256 << 10;
    let pool = Pool::create(&path, &options).unwrap();
    pool.grow(256 << 10).unwrap();
    let err = pool.grow(512 << 10).unwrap_err();
    assert!(err.to_string().contains("larger maximum size"), "{err}");
    assert_eq!(pool.size(), 256 << 10);
}

#[test]
fn layout_is_checked() {
    let dir = shm_dir();
    let path = dir.path().join("l.pool");
    make(&path, 1 << 20).close().unwrap();
    let err = Pool::open(
        &path,
        &OpenOptions {
            layout: Some("other".into()),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(matches!(err, Error::LayoutMismatch { .. }), "{err:?}");
}

#[test]
fn disk_file_uses_msync() {
    let dir = tempfile::Builder::new()
        .prefix("mnemo-disk")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let path = dir.path().join("d.pool");
    let pool = make(&path, 1 << 20);
    let info = pool.media_info();
    if info.kind == MediaKind::PageCache {
        assert_eq!(info.durability, Durability::Msync);
    }
    pool.write(DATA_OFFSET, b"on disk").unwrap();
    pool.msync(DATA_OFFSET, 7).unwrap();
    pool.grow(2 << 20).unwrap();
    pool.close().unwrap();
    let pool = open(&path).unwrap();
    assert_eq!(pool.size(), 2 << 20);
}

/// A full file system: a 1 MiB tmpfs mounted for the test (needs root, as CI runs).
#[test]
fn full_disk_at_create_and_grow() {
    let mount = tempfile::Builder::new()
        .prefix("mnemo-full")
        .tempdir()
        .unwrap();
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(mount.path())
        .status();
    if !status.is_ok_and(|s| s.success()) {
        panic!("this test mounts a 1 MiB tmpfs and needs root (CI runs as root); run the suite as root");
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mount.path().to_path_buf());
    let big = mount.path().join("big.pool");
    let err = Pool::create(&big, &CreateOptions::new(4 << 20, "x")).unwrap_err();
    assert!(matches!(err, Error::NoSpace { .. }), "{err:?}");
    assert!(err.to_string().contains("not enough space"), "{err}");
    assert!(!big.exists(), "no partial pool is left behind");
    let small = mount.path().join("small.pool");
    let pool = Pool::create(&small, &CreateOptions::new(512 << 10, "x")).unwrap();
    pool.write(DATA_OFFSET, b"keep me").unwrap();
    pool.msync(DATA_OFFSET, 7).unwrap();
    let err = pool.grow(4 << 20).unwrap_err();
    assert!(err.to_string().contains("no space"), "{err}");
    assert_eq!(
        pool.size(),
        512 << 10,
        "a failed grow leaves the pool as it was"
    );
    pool.close().unwrap();
    let pool = open(&small).unwrap();
    let mut out = [0u8; 7];
    pool.read(DATA_OFFSET, &mut out).unwrap();
    assert_eq!(&out, b"keep me");
    drop(pool);
    let header = Header::decode(&std::fs::read(&small).unwrap()[..4096]);
    assert!(header.is_ok() || Header::decode(&std::fs::read(&small).unwrap()[4096..8192]).is_ok());
}

#[test]
fn gmsync_checks_every_range_and_counts() {
    let dir = shm_dir();
    let path = dir.path().join("s.pool");
    let pool = make(&path, 1 << 20);
    use mnemo_pmem::ByteRange;
    pool.gmsync(&[
        ByteRange::new(DATA_OFFSET, 64),
        ByteRange::new(DATA_OFFSET + 4096, 8),
    ])
    .unwrap();
    assert!(matches!(
        pool.gmsync(&[ByteRange::new(1 << 20, 1)]),
        Err(Error::OutOfBounds { .. })
    ));
    let stats = pool.stats();
    assert_eq!(
        stats.sync_points.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // The ranges and the journal record the gmsync staged with them (one sync point).
    let record = mnemo_pmem::journal::record_len(&[
        ByteRange::new(DATA_OFFSET, 64),
        ByteRange::new(DATA_OFFSET + 4096, 8),
    ]);
    assert_eq!(
        stats.sync_bytes.load(std::sync::atomic::Ordering::Relaxed),
        72 + record
    );
}

/// Sync-point counters are kept per thread; the snapshot adds up every thread's, including
/// threads that have exited and pools used alternately on one thread.
#[test]
fn sync_point_counters_sum_over_threads() {
    use mnemo_pmem::ByteRange;
    use std::sync::atomic::Ordering::Relaxed;
    let dir = shm_dir();
    let pool = make(&dir.path().join("a.pool"), 1 << 20);
    let other = make(&dir.path().join("b.pool"), 1 << 20);
    let (threads, per_thread) = (6u64, 500u64);
    for round in 0..2 {
        std::thread::scope(|s| {
            for t in 0..threads {
                let (pool, other) = (&pool, &other);
                s.spawn(move || {
                    for i in 0..per_thread {
                        let at = DATA_OFFSET + 64 * ((t * per_thread + i) % 1000);
                        pool.gmsync(&[ByteRange::new(at, 64), ByteRange::new(at, 8)])
                            .unwrap();
                        if i % 2 == 0 {
                            other.msync(at, 16).unwrap();
                        }
                    }
                });
            }
        });
        let rounds = round + 1;
        let stats = pool.stats();
        assert_eq!(
            stats.sync_points.load(Relaxed),
            rounds * threads * per_thread
        );
        // Each gmsync names its two ranges and the journal record it stages.
        let record = mnemo_pmem::journal::record_len(&[
            ByteRange::new(DATA_OFFSET, 64),
            ByteRange::new(DATA_OFFSET, 8),
        ]);
        assert_eq!(
            stats.sync_ranges.load(Relaxed),
            rounds * threads * per_thread * 3
        );
        assert_eq!(
            stats.sync_bytes.load(Relaxed),
            rounds * threads * per_thread * (72 + record)
        );
        let stats = other.stats();
        assert_eq!(
            stats.sync_points.load(Relaxed),
            rounds * threads * per_thread / 2
        );
        assert_eq!(
            stats.sync_bytes.load(Relaxed),
            rounds * threads * per_thread * 8
        );
    }
    // This thread too, and a pool created later starts from zero.
    pool.msync(DATA_OFFSET, 1).unwrap();
    assert_eq!(
        pool.stats().sync_points.load(Relaxed),
        2 * threads * per_thread + 1
    );
    drop(other);
    let third = make(&dir.path().join("c.pool"), 1 << 20);
    assert_eq!(third.stats().sync_points.load(Relaxed), 0);
    third.msync(DATA_OFFSET, 1).unwrap();
    assert_eq!(third.stats().sync_points.load(Relaxed), 1);
}
