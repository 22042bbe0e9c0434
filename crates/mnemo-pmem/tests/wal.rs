//! The write-ahead policy on real files (`mnemo_pmem::wal`): replay at open, group commit,
//! checkpoints when the file fills, a file of another pool refused. Pools live on the
//! ordinary disk (the target dir's file system), where the policy is meant to run. Crash
//! images (power loss, pages never written back) are the testkit's business: every crash
//! workload runs with this policy on the simulated page-cache medium.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use mnemo_pmem::limits::DATA_OFFSET;
use mnemo_pmem::wal::{FileLog, WAL_BYTES_MIN};
use mnemo_pmem::{CreateOptions, Error, MediaError, OpenOptions, Pool, SyncPolicy, WalPolicy};

fn disk_dir() -> tempfile::TempDir {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    std::fs::create_dir_all(&target).expect("target dir");
    tempfile::Builder::new()
        .prefix("mnemo-wal-test")
        .tempdir_in(target)
        .expect("tempdir on the disk")
}

fn wal_of(pool: &Path) -> PathBuf {
    let mut name = pool.as_os_str().to_os_string();
    name.push(".wal");
    PathBuf::from(name)
}

fn policy(pool: &Path, bytes: u64) -> Arc<WalPolicy> {
    Arc::new(WalPolicy::beside(pool, bytes).expect("write-ahead file"))
}

/// The policy with the pool mapped copy-on-write.
fn private_policy(pool: &Path, bytes: u64) -> Arc<WalPolicy> {
    Arc::new(
        WalPolicy::beside(pool, bytes)
            .expect("write-ahead file")
            .private(true),
    )
}

fn create(path: &Path, policy: Arc<WalPolicy>) -> Pool {
    let mut options = CreateOptions::new(1 << 20, "wal");
    options.policy = Some(policy);
    Pool::create(path, &options).expect("create")
}

fn open(path: &Path, policy: Option<Arc<WalPolicy>>) -> Result<Pool, Error> {
    let options = OpenOptions {
        policy: policy.map(|p| p as Arc<dyn SyncPolicy>),
        ..OpenOptions::default()
    };
    Pool::open(path, &options)
}

fn read(pool: &Pool, offset: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    pool.read(offset, &mut out).expect("read");
    out
}

/// A power cut after a sync point of `text` at `DATA_OFFSET + 100` whose pool page was never
/// written back: the pool `NAME.pool` in `dir` and its write-ahead file are copied while the
/// pool is open, and the copy's page is zeroed. Returns the copy's path.
fn synced_then_lost(dir: &Path, name: &str, text: &[u8]) -> PathBuf {
    let path = dir.join(format!("{name}.pool"));
    let pool = create(&path, policy(&path, WAL_BYTES_MIN));
    pool.write(DATA_OFFSET + 100, text).unwrap();
    pool.msync(DATA_OFFSET + 100, text.len() as u64).unwrap();
    let copy = dir.join(format!("{name}-copy.pool"));
    std::fs::copy(&path, &copy).unwrap();
    std::fs::copy(wal_of(&path), wal_of(&copy)).unwrap();
    drop(pool);
    let file = std::fs::OpenOptions::new().write(true).open(&copy).unwrap();
    file.write_all_at(&[0u8; 4096], DATA_OFFSET).unwrap();
    copy
}

/// A crash after a sync point whose pool pages were never written back: the bytes come back
/// from the write-ahead file. (The pool and its file are copied while the pool is open, as a
/// power cut would leave them, and the copy's pool bytes are zeroed: "not written back".)
#[test]
fn a_synced_range_lost_from_the_pool_file_is_replayed_at_open() {
    let dir = disk_dir();
    let text = b"acknowledged, then the power went";
    let copy = synced_then_lost(dir.path(), "a", text);
    // No policy given: the pool's .wal exists, so open replays it whatever MNEMO_WAL says.
    let reopened = open(&copy, None).expect("open replays");
    assert_eq!(read(&reopened, DATA_OFFSET + 100, text.len()), text);
    assert!(!reopened.was_clean());
    assert_eq!(reopened.sync_policy().name(), "write-ahead");
    let stats = reopened
        .sync_policy()
        .write_ahead()
        .expect("write-ahead figures");
    assert!(stats.replayed >= 1, "{stats:?}");
    assert_eq!(
        stats.checkpoints, 1,
        "the checkpoint after replay: {stats:?}"
    );
}

/// A pool left by a crash with a write-ahead file is refused when opened with another
/// policy (a replicating one, the local one), which would not replay its records: the
/// acknowledged write would be gone. The refusal changes nothing; opening without a policy
/// replays, and after that clean close any policy may open it.
#[test]
fn a_crashed_pool_is_refused_by_a_policy_that_would_not_replay_its_write_ahead_file() {
    let dir = disk_dir();
    let text = b"acknowledged before the crash";
    let copy = synced_then_lost(dir.path(), "r", text);
    let before = std::fs::read(&copy).unwrap();
    let local = OpenOptions {
        policy: Some(Arc::new(mnemo_pmem::LocalPolicy) as Arc<dyn SyncPolicy>),
        ..OpenOptions::default()
    };
    match Pool::open(&copy, &local) {
        Err(Error::WriteAheadLeft { policy, .. }) => assert_eq!(policy, "local"),
        Err(other) => panic!("expected WriteAheadLeft, got {other}"),
        Ok(_) => panic!("a local policy opened a pool whose write-ahead records it skips"),
    }
    assert_eq!(
        std::fs::read(&copy).unwrap(),
        before,
        "the refusal writes nothing"
    );
    drop(open(&copy, None).expect("open without a policy replays"));
    let reopened = Pool::open(&copy, &local).expect("after a clean close, any policy");
    assert_eq!(read(&reopened, DATA_OFFSET + 100, text.len()), text);
}

/// Sync points from several threads share fdatasyncs (group commit), and a small file fills
/// and is checkpointed many times; every byte is there after a reopen.
#[test]
fn threads_share_fdatasyncs_and_a_full_file_is_checkpointed() {
    let dir = disk_dir();
    let path = dir.path().join("b.pool");
    let wal = policy(&path, WAL_BYTES_MIN);
    let pool = create(&path, Arc::clone(&wal));
    let threads = 4u64;
    let per_thread = 200u64;
    std::thread::scope(|s| {
        for t in 0..threads {
            let pool = &pool;
            s.spawn(move || {
                for i in 0..per_thread {
                    let at = DATA_OFFSET + (t * per_thread + i) * 64;
                    let value = [(t * per_thread + i) as u8 | 1; 48];
                    pool.write(at, &value).unwrap();
                    pool.msync(at, 48).unwrap();
                }
            });
        }
    });
    let stats = wal.stats();
    eprintln!("write-ahead stats: {stats:?}");
    assert_eq!(stats.records, threads * per_thread);
    assert!(stats.fdatasyncs <= stats.records);
    assert!(
        stats.checkpoints >= 2,
        "800 records of 104 bytes fill a 56 KiB file: {stats:?}"
    );
    pool.close().unwrap();
    let reopened = open(&path, None).unwrap();
    for k in 0..threads * per_thread {
        let got = read(&reopened, DATA_OFFSET + k * 64, 48);
        assert_eq!(got, vec![k as u8 | 1; 48], "record {k}");
    }
}

/// A sync point larger than a quarter of the file's record space is made durable in place,
/// with a checkpoint, and reopens like any other.
#[test]
fn a_sync_point_too_large_for_a_record_goes_in_place() {
    let dir = disk_dir();
    let path = dir.path().join("c.pool");
    let wal = policy(&path, WAL_BYTES_MIN);
    let pool = create(&path, Arc::clone(&wal));
    let big = vec![0x5au8; 40 << 10];
    pool.write(DATA_OFFSET, &big).unwrap();
    let before = wal.stats().checkpoints;
    pool.msync(DATA_OFFSET, big.len() as u64).unwrap();
    assert_eq!(wal.stats().checkpoints, before + 1);
    drop(pool);
    let reopened = open(&path, None).unwrap();
    assert_eq!(read(&reopened, DATA_OFFSET, big.len()), big);
}

/// The write-ahead file of another pool is refused with a message that says so, and the
/// pool file is not touched.
#[test]
fn another_pools_write_ahead_file_is_refused() {
    let dir = disk_dir();
    let (a, b) = (dir.path().join("a.pool"), dir.path().join("b.pool"));
    create(&a, policy(&a, WAL_BYTES_MIN)).close().unwrap();
    create(&b, policy(&b, WAL_BYTES_MIN)).close().unwrap();
    std::fs::copy(wal_of(&a), wal_of(&b)).unwrap();
    let err = open(&b, None).expect_err("a foreign write-ahead file");
    let text = err.to_string();
    assert!(text.contains("belongs to pool"), "{text}");
    assert!(matches!(
        err,
        Error::Media {
            source: MediaError::WriteAhead { .. },
            ..
        }
    ));
}

/// Damaged header copies: one is enough; none valid (and not all zero) is refused.
#[test]
fn damaged_write_ahead_headers() {
    let dir = disk_dir();
    let path = dir.path().join("d.pool");
    create(&path, policy(&path, WAL_BYTES_MIN)).close().unwrap();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(wal_of(&path))
        .unwrap();
    // Epochs alternate between the copies; one copy damaged leaves the other.
    file.write_all_at(&[0xff; 8], 16).unwrap();
    open(&path, None).expect("one valid copy").close().unwrap();
    file.write_all_at(&[0xff; 8], 16).unwrap();
    file.write_all_at(&[0xff; 8], 4096 + 16).unwrap();
    let err = open(&path, None).expect_err("no valid copy");
    assert!(err.to_string().contains("no header copy is valid"), "{err}");
    let log = FileLog::open_or_create(&wal_of(&path), WAL_BYTES_MIN).unwrap();
    assert_eq!(mnemo_pmem::LogFile::len(&log), WAL_BYTES_MIN);
}

/// A pool created on an ordinary disk without a policy gets the write-ahead policy and its
/// file (a quarter of the pool, at least 1 MiB); `MNEMO_WAL=0` in the environment keeps the
/// local policy. A write-ahead file left by a removed pool of the same name is replaced at
/// create, not refused as another pool's.
#[test]
fn disk_pools_get_a_write_ahead_file_by_default() {
    let opted_out = std::env::var("MNEMO_WAL").is_ok_and(|v| v.trim() == "0");
    let dir = disk_dir();
    let path = dir.path().join("default.pool");
    let pool = Pool::create(&path, &CreateOptions::new(8 << 20, "wal")).expect("create");
    if opted_out {
        assert!(
            pool.write_ahead().is_none(),
            "MNEMO_WAL=0 keeps the local policy"
        );
        assert!(!wal_of(&path).exists());
        return;
    }
    assert!(
        pool.write_ahead().is_some(),
        "a disk pool syncs through its write-ahead file"
    );
    assert_eq!(pool.policy_name(), "write-ahead");
    assert_eq!(
        std::fs::metadata(wal_of(&path)).expect("the .wal").len(),
        2 << 20
    );
    pool.write(DATA_OFFSET, b"first pool").expect("write");
    pool.msync(DATA_OFFSET, 10).expect("msync");
    drop(pool);

    // The pool file removed, its write-ahead file left behind: a new pool of that name.
    std::fs::remove_file(&path).expect("remove the pool");
    let pool = Pool::create(&path, &CreateOptions::new(8 << 20, "wal")).expect("create again");
    assert_eq!(
        read(&pool, DATA_OFFSET, 10),
        vec![0u8; 10],
        "nothing of the old pool"
    );
    pool.write(DATA_OFFSET, b"second one").expect("write");
    pool.msync(DATA_OFFSET, 10).expect("msync");
    drop(pool);
    let pool = open(&path, None).expect("reopen with the new write-ahead file");
    assert_eq!(read(&pool, DATA_OFFSET, 10), b"second one");
    assert!(pool.write_ahead().is_some());
}

/// The pool file as a second reader sees it (not through the pool's mapping).
fn file_bytes(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    std::fs::File::open(path)
        .unwrap()
        .read_exact_at(&mut out, offset)
        .unwrap();
    out
}

/// Under the write-ahead policy the pool is mapped copy-on-write: a sync point's bytes are
/// durable in the write-ahead file, the pool file does not change until a checkpoint (the
/// kernel can never write a page back ahead of its record), and a clean close writes
/// everything through, named or not.
#[test]
fn the_pool_file_changes_only_at_checkpoints_and_close() {
    let dir = disk_dir();
    let path = dir.path().join("p.pool");
    let wal = private_policy(&path, 256 << 10);
    let pool = create(&path, Arc::clone(&wal));
    assert!(pool.is_private(), "{:?}", pool.media_info());
    let named = b"named by a sync point";
    let unnamed = b"stored, never synced";
    pool.write(DATA_OFFSET + 64, named).unwrap();
    pool.msync(DATA_OFFSET + 64, named.len() as u64).unwrap();
    pool.write(DATA_OFFSET + 8192, unnamed).unwrap();
    assert_eq!(
        file_bytes(&path, DATA_OFFSET + 64, named.len()),
        vec![0u8; named.len()],
        "the pool file holds nothing before a checkpoint"
    );
    pool.checkpoint().unwrap();
    assert_eq!(file_bytes(&path, DATA_OFFSET + 64, named.len()), named);
    assert_eq!(
        file_bytes(&path, DATA_OFFSET + 8192, unnamed.len()),
        vec![0u8; unnamed.len()],
        "a checkpoint writes the records, not memory"
    );
    pool.close().unwrap();
    assert_eq!(
        file_bytes(&path, DATA_OFFSET + 8192, unnamed.len()),
        unnamed
    );
    let reopened = open(&path, None).unwrap();
    assert!(reopened.was_clean());
    assert_eq!(read(&reopened, DATA_OFFSET + 64, named.len()), named);
    assert_eq!(read(&reopened, DATA_OFFSET + 8192, unnamed.len()), unnamed);
}

/// Growth maps the new part copy-on-write too, and a crash after it finds the grown size
/// and the synced bytes.
#[test]
fn a_pool_grown_under_a_private_mapping_keeps_every_byte() {
    let dir = disk_dir();
    let path = dir.path().join("g.pool");
    let wal = private_policy(&path, 256 << 10);
    let pool = create(&path, Arc::clone(&wal));
    let end = pool.size();
    pool.grow(end * 2).unwrap();
    let text = b"in the grown part";
    pool.write(end + 4096, text).unwrap();
    pool.msync(end + 4096, text.len() as u64).unwrap();
    // A crash now: copy both files as they are on disk (the copy reads the files, not the
    // private mapping).
    let copy = dir.path().join("g-copy.pool");
    std::fs::copy(&path, &copy).unwrap();
    std::fs::copy(wal_of(&path), wal_of(&copy)).unwrap();
    drop(pool);
    let crashed = open(&copy, None).expect("open after the crash");
    assert_eq!(crashed.size(), end * 2);
    assert_eq!(read(&crashed, end + 4096, text.len()), text);
}

/// Deferred acknowledgements: sync points return once appended; the marks say when they
/// are durable; a copy of the files taken once a mark is durable (a crash then) has every
/// byte acknowledged up to it.
#[test]
fn deferred_acks_become_durable_in_order() {
    let dir = disk_dir();
    let path = dir.path().join("d.pool");
    let wal = private_policy(&path, 1 << 20);
    let pool = create(&path, Arc::clone(&wal));
    let woken = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = Arc::clone(&woken);
    assert!(pool.defer_acks(Arc::new(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    })));
    let mut marks = Vec::new();
    for k in 0..200u64 {
        let at = DATA_OFFSET + k * 64;
        pool.write(at, &k.to_le_bytes()).unwrap();
        pool.msync(at, 8).unwrap();
        let (appended, _) = pool.ack_marks().expect("deferred").unwrap();
        marks.push(appended);
    }
    assert!(marks.windows(2).all(|w| w[0] < w[1]), "marks grow");
    let last = *marks.last().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while pool.ack_marks().unwrap().unwrap().1 < last {
        assert!(std::time::Instant::now() < deadline, "never durable");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(woken.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    let copy = dir.path().join("d-copy.pool");
    std::fs::copy(&path, &copy).unwrap();
    std::fs::copy(wal_of(&path), wal_of(&copy)).unwrap();
    pool.close().unwrap();
    let crashed = open(&copy, None).expect("open after the crash");
    for k in 0..200u64 {
        let got = read(&crashed, DATA_OFFSET + k * 64, 8);
        assert_eq!(got, k.to_le_bytes(), "sync point {k}");
    }
}

/// Deferred acknowledgements are refused where they would be unsound or pointless: a
/// pool on tmpfs (local policy, persistent-memory stand-in) keeps durable-on-return.
#[test]
fn deferred_acks_need_a_private_write_ahead_pool() {
    let dir = disk_dir();
    let path = dir.path().join("s.pool");
    let pool = create(&path, private_policy(&path, 256 << 10));
    assert!(pool.defer_acks(Arc::new(|| {})));
    // The default, shared mapping cannot defer.
    let shared_path = dir.path().join("s2.pool");
    let shared = create(&shared_path, policy(&shared_path, 256 << 10));
    assert!(!shared.is_private());
    assert!(!shared.defer_acks(Arc::new(|| {})));
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let local = Pool::create(
        &shm.path().join("t.pool"),
        &CreateOptions::new(1 << 20, "t"),
    )
    .unwrap();
    assert!(!local.is_private());
    assert!(!local.defer_acks(Arc::new(|| {})));
    assert!(local.ack_marks().is_none());
}

/// Whether the file system of `dir` is one that takes `O_DIRECT` writes (ext4, xfs).
fn takes_direct_writes(dir: &Path) -> bool {
    const EXT4: u64 = 0xEF53;
    const XFS: u64 = 0x5846_5342;
    let Ok(file) = std::fs::File::open(dir) else {
        return false;
    };
    rustix::fs::fstatfs(&file).is_ok_and(|s| [EXT4, XFS].contains(&(s.f_type as u64)))
}

/// A direct write covers whole 4 KiB blocks, so it writes again the bytes before the
/// record in its first block (from the last write, or read back when that is not the same
/// block): appends of every length, across blocks, after a header write and from a new
/// handle (nothing cached) leave the file holding exactly what was written.
#[test]
fn direct_writes_keep_the_records_before_them_in_their_block() {
    use mnemo_pmem::LogFile;
    let dir = disk_dir();
    let path = dir.path().join("direct.wal");
    let len = 256u64 << 10;
    let mut model = vec![0u8; len as usize];
    let put = |log: &FileLog, model: &mut [u8], at: u64, bytes: &[u8]| {
        log.write_at(at, bytes).expect("write");
        log.sync().expect("sync");
        model[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
    };
    let mut at = 8192u64;
    let lengths = [100usize, 3000, 5000, 1, 4095, 8192, 777, 4096, 33, 12_000];
    {
        let log = FileLog::open_or_create(&path, len).expect("create");
        assert_eq!(log.len(), len);
        if takes_direct_writes(dir.path()) {
            assert!(log.direct(), "ext4 and xfs take direct writes");
        }
        for (k, &n) in lengths.iter().enumerate() {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 7 + k * 13 + 1) as u8).collect();
            put(&log, &mut model, at, &bytes);
            at += n as u64;
            if k == 4 {
                // A header copy between two appends: the next append's block is not cached.
                put(&log, &mut model, 4096, &[0xa5; 64]);
            }
        }
    }
    // A new handle knows no block: the first append reads back the one it begins in.
    let log = FileLog::open_or_create(&path, len).expect("open");
    for (k, &n) in lengths.iter().rev().enumerate() {
        let bytes: Vec<u8> = (0..n).map(|i| (i * 3 + k * 29 + 5) as u8).collect();
        put(&log, &mut model, at, &bytes);
        at += n as u64;
    }
    let mut read = vec![0u8; len as usize];
    log.read_at(0, &mut read).expect("read back");
    let first_bad = read.iter().zip(&model).position(|(a, b)| a != b);
    assert_eq!(first_bad, None, "the file differs from what was written");
    let on_disk = std::fs::read(&path).expect("read the file");
    assert!(
        on_disk == model,
        "the file read anew differs from what was written"
    );
}

/// A file whose length is not a multiple of 8 KiB (its halves would share a block) keeps
/// the page cache.
#[test]
fn a_file_of_odd_length_keeps_the_page_cache() {
    let dir = disk_dir();
    let path = dir.path().join("odd.wal");
    let file = std::fs::File::create(&path).expect("create");
    file.set_len(WAL_BYTES_MIN + 4096).expect("length");
    drop(file);
    let log = FileLog::open_or_create(&path, WAL_BYTES_MIN).expect("open");
    assert_eq!(mnemo_pmem::LogFile::len(&log), WAL_BYTES_MIN + 4096);
    assert!(!log.direct());
}
