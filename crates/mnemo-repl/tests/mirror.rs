//! A primary pool replicating to a mirror over loopback TCP: the mirror's image, opened as a
//! pool, holds what the primary acknowledged; wrong secrets and stale epochs are refused;
//! a mirror that comes back gets a full copy; a mirror restart replays its log.

mod support;
use support::{scratch, start_mirror, SECRET};

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mnemo_heap::{Heap, HeapOptions};
use mnemo_pmem::{CreateOptions, OpenOptions, Pool};
use mnemo_repl::proto::Range;
use mnemo_repl::{Mirror, MirrorConfig, MirrorOptions, MirrorPolicy, MirrorStore, Mode, Secret};

fn config(addr: SocketAddr, mode: Mode, secret: &[u8]) -> MirrorConfig {
    let mut c = MirrorConfig::new(addr, Secret::new(secret).unwrap(), mode);
    c.timeout = Duration::from_millis(500);
    c.retry = Duration::from_millis(50);
    c
}

/// Create a pool with a heap through `policy`, write `n` counters in transactions, and return
/// what they must read.
fn run_heap(path: &Path, policy: Arc<MirrorPolicy>, n: u64) -> Vec<(u64, u64)> {
    let mut options = CreateOptions::new(16 << 20, "repl-test");
    options.policy = Some(policy);
    let pool = Pool::create(path, &options).expect("primary pool");
    let heap = Heap::create(pool, &HeapOptions::default()).expect("heap");
    let mut written = Vec::new();
    for i in 0..n {
        let obj = heap.tx(|tx| tx.alloc_bytes(64)).expect("alloc");
        heap.tx(|tx| tx.write(mnemo_heap::PPtr::<u64>::from_offset(obj), &(i * 7 + 1)))
            .expect("write");
        written.push((obj, i * 7 + 1));
    }
    heap.close();
    written
}

fn read_heap(path: &Path, written: &[(u64, u64)]) {
    if let Err(e) = check_heap(path, written) {
        panic!("{e}");
    }
}

/// Whether the pool at `path` holds every written value.
fn check_heap(path: &Path, written: &[(u64, u64)]) -> Result<(), String> {
    let pool = Pool::open(path, &OpenOptions::default())
        .map_err(|e| format!("the image does not open as a pool: {e}"))?;
    let heap = Heap::open(pool).map_err(|e| format!("the image's heap does not recover: {e}"))?;
    for &(obj, value) in written {
        let got: u64 = heap
            .get(mnemo_heap::PPtr::<u64>::from_offset(obj))
            .map_err(|e| format!("object at {obj:#x}: {e}"))?;
        if got != value {
            return Err(format!("object at {obj:#x}: {got}, expected {value}"));
        }
    }
    Ok(())
}

/// One run in `mode`; the mirror's image checked against what the primary wrote.
fn replicate_and_check(mode: Mode) -> Result<(), String> {
    let dir = scratch();
    let (addr, store) = start_mirror(&dir.path().join("mirror"));
    let policy = Arc::new(MirrorPolicy::new(config(addr, mode, SECRET)));
    let written = run_heap(&dir.path().join("primary.pool"), Arc::clone(&policy), 20);
    let image = {
        let mut s = store.lock().unwrap();
        s.checkpoint().unwrap();
        s.image_path()
    };
    let copy = dir.path().join("copy.pool");
    std::fs::copy(&image, &copy).unwrap();
    check_heap(&copy, &written)
}

/// The mirror joins late: a pool written while it was away, then more writes once it is up.
fn late_mirror_and_check() -> Result<(), String> {
    let dir = scratch();
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let policy = Arc::new(MirrorPolicy::new(config(addr, Mode::Sync, SECRET)));
    let mut options = CreateOptions::new(16 << 20, "repl-test");
    options.policy = Some(Arc::clone(&policy) as _);
    let pool = Pool::create(&dir.path().join("primary.pool"), &options).unwrap();
    let heap = Heap::create(pool, &HeapOptions::default()).unwrap();
    let mut written = Vec::new();
    let mut write = |heap: &Heap, value: u64| {
        let obj = heap.tx(|tx| tx.alloc_bytes(64)).unwrap();
        heap.tx(|tx| tx.write(mnemo_heap::PPtr::<u64>::from_offset(obj), &value))
            .unwrap();
        written.push((obj, value));
    };
    write(&heap, 11);
    let (_, store) = {
        let store =
            MirrorStore::open(&dir.path().join("mirror"), MirrorOptions::default()).unwrap();
        let mirror = Mirror::new(store, Secret::new(SECRET).unwrap());
        let store = mirror.store();
        let listener = TcpListener::bind(addr).unwrap();
        std::thread::spawn(move || mirror.serve(listener));
        ((), store)
    };
    until_in_sync(&heap, &policy);
    write(&heap, 22);
    heap.close();
    let image = {
        let mut s = store.lock().unwrap();
        s.checkpoint().unwrap();
        s.image_path()
    };
    let copy = dir.path().join("copy.pool");
    std::fs::copy(&image, &copy).map_err(|e| format!("no image: {e}"))?;
    check_heap(&copy, &written)
}

#[test]
fn every_mutant_is_caught() {
    replicate_and_check(Mode::Sync).expect("the unbroken policy passes");
    late_mirror_and_check().expect("the unbroken policy passes with a late mirror");
    for &name in mnemo_repl::policy::MUTANTS {
        let results = mnemo_pmem::mutant::with(name, || {
            [replicate_and_check(Mode::Sync), late_mirror_and_check()]
        });
        let caught: Vec<String> = results.into_iter().filter_map(Result::err).collect();
        assert!(!caught.is_empty(), "mutant {name} not caught");
        eprintln!("{name}: caught ({})", caught.join("; "));
    }
}

/// Sync points (writes of a scratch word) until the policy is back in sync with its mirror:
/// a returning mirror is reached by a background attempt, finished at a later sync point.
fn until_in_sync(heap: &Heap, policy: &MirrorPolicy) {
    let scratch = heap.tx(|tx| tx.alloc_bytes(64)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut i = 0u64;
    while !policy.stats().in_sync {
        assert!(
            std::time::Instant::now() < deadline,
            "not back in sync: {:?}",
            policy.stats()
        );
        i += 1;
        heap.tx(|tx| tx.write(mnemo_heap::PPtr::<u64>::from_offset(scratch), &i))
            .unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn every_mode_leaves_the_mirror_with_the_primary_s_data() {
    for mode in [Mode::Sync, Mode::SyncFlush, Mode::Async] {
        let dir = scratch();
        let (addr, store) = start_mirror(&dir.path().join("mirror"));
        let policy = Arc::new(MirrorPolicy::new(config(addr, mode, SECRET)));
        let written = run_heap(&dir.path().join("primary.pool"), Arc::clone(&policy), 50);
        let stats = policy.stats();
        assert!(stats.in_sync, "{mode:?}: {stats:?}");
        assert_eq!(stats.copies, 1);
        assert!(
            stats.shipped >= 100,
            "{mode:?}: every commit is a record: {stats:?}"
        );
        assert_eq!(stats.local_only, 0);
        if mode != Mode::Async {
            assert_eq!(
                stats.acked, stats.last_id,
                "{mode:?}: every record acknowledged"
            );
        }
        // Let an async mirror catch up, then take the image as the mirror has it.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let image = loop {
            let mut s = store.lock().unwrap();
            if s.last_id() >= stats.last_id || std::time::Instant::now() > deadline {
                assert_eq!(
                    s.last_id(),
                    stats.last_id,
                    "{mode:?}: the mirror got every record"
                );
                s.checkpoint().unwrap();
                break s.image_path();
            }
            drop(s);
            std::thread::sleep(Duration::from_millis(10));
        };
        // The image is a copy, opened without the mirror's lock (the mirror is idle).
        let copy = dir.path().join("copy.pool");
        std::fs::copy(&image, &copy).unwrap();
        read_heap(&copy, &written);
    }
}

#[test]
fn a_wrong_secret_is_refused_both_ways() {
    let dir = scratch();
    let (addr, store) = start_mirror(&dir.path().join("mirror"));
    let policy = Arc::new(MirrorPolicy::new(config(
        addr,
        Mode::Sync,
        b"another secret, long enough",
    )));
    let written = run_heap(&dir.path().join("primary.pool"), Arc::clone(&policy), 5);
    let stats = policy.stats();
    assert!(!stats.in_sync);
    assert_eq!(stats.shipped, 0, "nothing reaches a mirror that refused us");
    assert!(
        stats.local_only > 0,
        "sync points fell back to local durability"
    );
    assert!(
        !store.lock().unwrap().state().complete,
        "the mirror holds no copy"
    );
    // The primary's own pool holds everything (made durable locally).
    read_heap(&dir.path().join("primary.pool"), &written);

    // A listener that is not a mirror (does not know the secret) is not accepted either.
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_addr = fake.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        if let Ok((mut s, _)) = fake.accept() {
            let mut b = [0u8; 256];
            let _ = s.read(&mut b);
            // A challenge with a made-up proof.
            let mut out = Vec::new();
            mnemo_repl::proto::encode(
                &mnemo_repl::proto::Frame::Challenge {
                    version: mnemo_repl::proto::VERSION,
                    proof: [9; 32],
                    nonce: [8; 32],
                },
                &mut out,
            );
            let _ = s.write_all(&out);
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let policy = Arc::new(MirrorPolicy::new(config(fake_addr, Mode::Sync, SECRET)));
    run_heap(&dir.path().join("primary2.pool"), Arc::clone(&policy), 2);
    assert!(!policy.stats().in_sync);
    assert_eq!(policy.stats().shipped, 0);
}

#[test]
fn a_mirror_that_comes_back_gets_a_full_copy() {
    let dir = scratch();
    // Reserve a port, then leave it closed: the mirror is away at first.
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let policy = Arc::new(MirrorPolicy::new(config(addr, Mode::SyncFlush, SECRET)));
    let mut options = CreateOptions::new(16 << 20, "repl-test");
    options.policy = Some(Arc::clone(&policy) as _);
    let path = dir.path().join("primary.pool");
    let pool = Pool::create(&path, &options).unwrap();
    let heap = Heap::create(pool, &HeapOptions::default()).unwrap();
    let first = heap.tx(|tx| tx.alloc_bytes(64)).unwrap();
    heap.tx(|tx| tx.write(mnemo_heap::PPtr::<u64>::from_offset(first), &11))
        .unwrap();
    assert!(!policy.stats().in_sync);
    assert!(policy.stats().local_only > 0);
    // The mirror starts on that port; the next sync point after the retry interval connects.
    let store = MirrorStore::open(&dir.path().join("mirror"), MirrorOptions::default()).unwrap();
    let mirror = Mirror::new(store, Secret::new(SECRET).unwrap());
    let store = mirror.store();
    let listener = TcpListener::bind(addr).unwrap();
    std::thread::spawn(move || mirror.serve(listener));
    until_in_sync(&heap, &policy);
    let second = heap.tx(|tx| tx.alloc_bytes(64)).unwrap();
    heap.tx(|tx| tx.write(mnemo_heap::PPtr::<u64>::from_offset(second), &22))
        .unwrap();
    let stats = policy.stats();
    assert!(stats.in_sync, "{stats:?}");
    assert_eq!(stats.copies, 1);
    heap.close();
    let image = {
        let mut s = store.lock().unwrap();
        s.checkpoint().unwrap();
        s.image_path()
    };
    let copy = dir.path().join("copy.pool");
    std::fs::copy(&image, &copy).unwrap();
    // The value written while the mirror was away came with the copy.
    read_heap(&copy, &[(first, 11), (second, 22)]);
}

#[test]
fn a_stale_primary_is_refused_after_a_promotion() {
    let dir = scratch();
    let (addr, store) = start_mirror(&dir.path().join("mirror"));
    let policy = Arc::new(MirrorPolicy::new(config(addr, Mode::Sync, SECRET)));
    run_heap(&dir.path().join("primary.pool"), Arc::clone(&policy), 3);
    assert!(policy.stats().in_sync);
    let epoch = {
        let mut s = store.lock().unwrap();
        s.promote().unwrap();
        s.state().epoch
    };
    assert_eq!(epoch, 2, "promotion raises the epoch");
    // The old primary (epoch 1) comes back: refused, so it acknowledges only locally.
    let policy = Arc::new(MirrorPolicy::new(config(addr, Mode::Sync, SECRET)));
    run_heap(&dir.path().join("primary2.pool"), Arc::clone(&policy), 2);
    assert!(!policy.stats().in_sync);
    assert_eq!(policy.stats().shipped, 0);
}

#[test]
fn a_restarted_mirror_replays_its_log() {
    let dir = scratch();
    let path = dir.path().join("mirror");
    {
        let mut s = MirrorStore::open(&path, MirrorOptions::default()).unwrap();
        s.begin_copy(1, 1 << 20).unwrap();
        s.finish_copy(1, 1 << 20).unwrap();
        for id in 2..5u64 {
            let ranges = [Range {
                offset: id * 4096,
                data: vec![id as u8; 100],
            }];
            s.log_record(1, id, &ranges, None).unwrap();
            // Logged and acknowledged, never applied: as if the mirror died right after.
        }
        assert_eq!(s.last_id(), 4);
    }
    let s = MirrorStore::open(&path, MirrorOptions::default()).unwrap();
    assert_eq!(s.stats().replayed, 3);
    assert_eq!(s.state().last_id, 4, "replay ends in a checkpoint");
    let image = std::fs::read(s.image_path()).unwrap();
    for id in 2..5usize {
        assert!(image[id * 4096..id * 4096 + 100]
            .iter()
            .all(|&b| b == id as u8));
    }
    // A second mirror process on the same directory is refused.
    let err = MirrorStore::open(&path, MirrorOptions::default()).unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
    // Records must follow the ones held.
    drop(s);
    let mut s = MirrorStore::open(&path, MirrorOptions::default()).unwrap();
    assert!(s.log_record(1, 3, &[], None).is_err());
}

/// The story: the failover benchmark's primary grew its pool from 64 MiB while replicating;
/// the header's new size reached the mirror as a record, but the zeros the file grew by were
/// never shipped, and the promoted image, shorter than its header's size, was refused at
/// open. Promotion now extends the image to the size its pool records.
#[test]
fn a_pool_that_grew_is_promoted_whole() {
    let dir = scratch();
    let (addr, store) = start_mirror(&dir.path().join("mirror"));
    let policy = Arc::new(MirrorPolicy::new(config(addr, Mode::Sync, SECRET)));
    let mut options = CreateOptions::new(4 << 20, "repl-test");
    options.size_max = 64 << 20;
    options.policy = Some(Arc::clone(&policy) as _);
    let pool = Pool::create(&dir.path().join("primary.pool"), &options).unwrap();
    let at = pool.data_offset();
    pool.write(at, b"before growth").unwrap();
    pool.msync(at, 13).unwrap();
    pool.grow(16 << 20).unwrap();
    // Something written near the start only: the grown tail is all zeros.
    pool.write(at, b"after growth!").unwrap();
    pool.msync(at, 13).unwrap();
    assert!(policy.stats().in_sync);
    drop(pool);
    let image = {
        let mut s = store.lock().unwrap();
        s.promote().unwrap()
    };
    let copy = dir.path().join("promoted.pool");
    std::fs::copy(&image, &copy).unwrap();
    let promoted = Pool::open(&copy, &OpenOptions::default()).expect("the promoted image opens");
    assert_eq!(promoted.size(), 16 << 20);
    let mut got = [0u8; 13];
    promoted.read(at, &mut got).unwrap();
    assert_eq!(&got, b"after growth!");
}

/// A primary's side of the handshake, by hand: the link and the mirror's last id.
fn open_link(addr: SocketAddr, epoch: u64) -> (mnemo_repl::link::Link, u64) {
    open_link_as(addr, epoch, mnemo_repl::proto::VERSION)
}

/// [`open_link`] as a primary of protocol `version` (telling no parameters).
fn open_link_as(addr: SocketAddr, epoch: u64, version: u16) -> (mnemo_repl::link::Link, u64) {
    use mnemo_repl::proto::{Frame, Role};
    let secret = Secret::new(SECRET).unwrap();
    let mut link = mnemo_repl::link::Link::connect(addr, Duration::from_secs(2)).unwrap();
    link.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let ours = mnemo_repl::auth::nonce().unwrap();
    link.send(&Frame::Hello {
        version,
        role: Role::Primary,
        nonce: ours,
    })
    .unwrap();
    let Frame::Challenge {
        nonce: theirs,
        version: answered,
        ..
    } = link.recv().unwrap()
    else {
        panic!("no challenge")
    };
    assert_eq!(
        answered, version,
        "the mirror answers in the primary's version"
    );
    link.send(&Frame::Auth {
        proof: secret.primary_proof(&theirs, &ours),
        epoch,
        pool_size: 4096,
        params: None,
        session: None,
    })
    .unwrap();
    match link.recv().unwrap() {
        Frame::Welcome { last_id, .. } => (link, last_id),
        other => panic!("expected Welcome, got {other:?}"),
    }
}

/// The frames of a full copy of one page whose first 8 bytes are `byte`, completed at
/// record `id`.
fn copy_frames(epoch: u64, id: u64, byte: u8) -> [mnemo_repl::proto::Frame; 3] {
    use mnemo_repl::proto::Frame;
    [
        Frame::CopyBegin {
            epoch,
            pool_size: 4096,
        },
        Frame::Record {
            epoch,
            id,
            copy: true,
            ranges: vec![Range {
                offset: 0,
                data: vec![byte; 8],
            }],
        },
        Frame::CopyDone {
            epoch,
            id,
            pool_size: 4096,
        },
    ]
}

/// The next frame that is not a heartbeat (the mirror sends them while a copy arrives).
fn recv_past_heartbeats(
    link: &mut mnemo_repl::link::Link,
) -> mnemo_repl::Result<mnemo_repl::proto::Frame> {
    loop {
        match link.recv()? {
            mnemo_repl::proto::Frame::Heartbeat { .. } => continue,
            other => return Ok(other),
        }
    }
}

/// Send a full copy ([`copy_frames`]).
fn send_copy(link: &mut mnemo_repl::link::Link, epoch: u64, id: u64, byte: u8) {
    for frame in &copy_frames(epoch, id, byte) {
        link.send(frame).unwrap();
    }
}

/// Send a full copy the mirror is expected to refuse, and its answer: the refusal's reason,
/// or `None` if the link was gone first. The mirror closes a link after refusing it, so the
/// frames after the first may meet a closed socket (broken pipe, reset) and its refusal may
/// be lost to the reset: both are expected; what matters is the image (checked by the
/// callers).
fn send_refused_copy(
    link: &mut mnemo_repl::link::Link,
    epoch: u64,
    id: u64,
    byte: u8,
) -> Option<String> {
    use mnemo_repl::proto::Frame;
    for frame in &copy_frames(epoch, id, byte) {
        if link.send(frame).is_err() {
            break;
        }
    }
    match recv_past_heartbeats(link) {
        Ok(Frame::Refused { reason }) => Some(reason),
        Ok(other) => panic!("the refused copy was taken: {other:?}"),
        Err(_) => None,
    }
}

/// Only the newest link may change the image: a full copy (or a record) still arriving on an
/// older link (a primary's process that died with it in flight, while its restarted process
/// linked again and sent its own copy) is refused instead of replacing the newer copy. Found
/// by the deterministic simulation (`tests/sim.rs`, mutant `repl.any_link`).
#[test]
fn an_older_link_cannot_change_the_image() {
    use mnemo_repl::proto::Frame;
    let dir = scratch();
    let (addr, store) = start_mirror(dir.path());
    let (mut old, _) = open_link(addr, 1);
    let (mut new, _) = open_link(addr, 1);
    send_copy(&mut new, 1, 1, 0xbb);
    assert_eq!(
        recv_past_heartbeats(&mut new).unwrap(),
        Frame::Ack { epoch: 1, id: 1 }
    );
    // The old link's copy, then a record of it: refused, the link closed.
    if let Some(reason) = send_refused_copy(&mut old, 1, 1, 0xaa) {
        assert!(reason.contains("superseded"), "{reason}");
    }
    let image = std::fs::read(store.lock().unwrap().image_path()).unwrap();
    assert_eq!(&image[..8], &[0xbb; 8], "the newer copy stays");
    // The newest link goes on.
    new.send(&Frame::Record {
        epoch: 1,
        id: 2,
        copy: false,
        ranges: vec![Range {
            offset: 8,
            data: vec![0xcc; 8],
        }],
    })
    .unwrap();
    assert_eq!(new.recv().unwrap(), Frame::Ack { epoch: 1, id: 2 });
}

/// A full copy is fenced by the epoch as records are: a primary whose link was accepted
/// before the mirror saw a newer epoch (its takeover, between the swap and the exec) cannot
/// replace the image with a copy of its own. Found by the deterministic simulation: a
/// deposed primary blocking for its mirror (`WithoutMirror::Block`) completed a copy there.
#[test]
fn a_full_copy_of_an_older_epoch_is_refused() {
    use mnemo_repl::proto::Frame;
    let dir = scratch();
    let (addr, store) = start_mirror(dir.path());
    let (mut link, _) = open_link(addr, 1);
    send_copy(&mut link, 1, 1, 0xbb);
    assert_eq!(
        recv_past_heartbeats(&mut link).unwrap(),
        Frame::Ack { epoch: 1, id: 1 }
    );
    // The mirror takes over (epoch 2) while the old primary's link is still open.
    store.lock().unwrap().observe_epoch(2).unwrap();
    if let Some(reason) = send_refused_copy(&mut link, 1, 2, 0xaa) {
        assert!(reason.contains("stale epoch"), "{reason}");
    }
    let image = std::fs::read(store.lock().unwrap().image_path()).unwrap();
    assert_eq!(&image[..8], &[0xbb; 8], "the image stays");
}

/// A scratch directory on an ordinary disk (not tmpfs): the target directory's file system.
fn disk_scratch() -> tempfile::TempDir {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tempfile::Builder::new()
        .prefix("mnemo-repl-disk-")
        .tempdir_in(base)
        .expect("scratch dir on disk");
    assert!(
        !mnemo_repl::mirror::on_memory_fs(dir.path()).unwrap(),
        "{} is on tmpfs: the syncdisk test needs a disk",
        dir.path().display()
    );
    dir
}

/// syncdisk: the primary tells its mode; a mirror whose image is in memory refuses it (the
/// primary carries on durably alone), and a mirror with its image in a disk file takes it,
/// records the mode, and its image (the disk file, `DIR/image` linking to it) holds every
/// value while its log stays in the pool on tmpfs.
#[test]
fn syncdisk_needs_the_mirror_image_on_a_disk() {
    let dir = scratch();
    // Image in memory: refused, nothing shipped.
    let (addr, store) = start_mirror(&dir.path().join("memory-mirror"));
    let policy = Arc::new(MirrorPolicy::new(config(addr, Mode::SyncDisk, SECRET)));
    let written = run_heap(&dir.path().join("refused.pool"), Arc::clone(&policy), 5);
    let s = policy.stats();
    assert!(!s.in_sync && s.copies == 0 && s.local_only >= 5, "{s:?}");
    assert_eq!(store.lock().unwrap().state().mode, None);
    read_heap(&dir.path().join("refused.pool"), &written);

    // Image on a disk: in sync.
    let disk = disk_scratch();
    let disk_image = disk.path().join("mirror.image");
    let mirror_dir = dir.path().join("disk-mirror");
    let options = MirrorOptions {
        disk_image: Some(disk_image.clone()),
        ..MirrorOptions::default()
    };
    let store = MirrorStore::open(&mirror_dir, options.clone()).unwrap();
    let mirror = Mirror::new(store, Secret::new(SECRET).unwrap());
    let store = mirror.store();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || mirror.serve(listener));
    let policy = Arc::new(MirrorPolicy::new(config(addr, Mode::SyncDisk, SECRET)));
    let written = run_heap(&dir.path().join("primary.pool"), Arc::clone(&policy), 20);
    let s = policy.stats();
    assert!(s.copies == 1 && s.local_only == 0 && s.acked > 0, "{s:?}");
    {
        let mut s = store.lock().unwrap();
        assert_eq!(s.state().mode, Some(Mode::SyncDisk));
        assert!(s.image_on_disk().unwrap());
        s.checkpoint().unwrap();
    }
    assert_eq!(
        std::fs::read_link(mirror_dir.join("image")).unwrap(),
        disk_image
    );
    assert!(mnemo_repl::mirror::on_memory_fs(&mirror_dir.join("log.pool")).unwrap());
    let copy = dir.path().join("copy.pool");
    std::fs::copy(&disk_image, &copy).unwrap();
    read_heap(&copy, &written);
    // The mode is in the state file, for `mnemo mirror status`.
    let (state, _) = mnemo_repl::mirror::peek_state(&mirror_dir).unwrap();
    assert_eq!(state.mode, Some(Mode::SyncDisk));

    // A directory whose image is a file of its own is not silently moved to a disk.
    let err = MirrorStore::open(&dir.path().join("memory-mirror2"), MirrorOptions::default())
        .and_then(|s| {
            drop(s);
            std::fs::write(dir.path().join("memory-mirror2").join("image"), b"x").unwrap();
            MirrorStore::open(&dir.path().join("memory-mirror2"), options)
        })
        .unwrap_err();
    assert!(err.to_string().contains("is a file"), "{err}");
    // An image asked on tmpfs is refused at open.
    let err = MirrorStore::open(
        &dir.path().join("memory-mirror3"),
        MirrorOptions {
            disk_image: Some(dir.path().join("on-tmpfs.image")),
            ..MirrorOptions::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("memory file system"), "{err}");
}

/// Protocol versions: a version 1 primary (no parameters in Auth) is still served, with the
/// mirror's own settings and no mode recorded (a version 2 primary, whose Auth carries no
/// session, is served in `tests/queues.rs`); a version 4 primary is refused, saying which
/// versions this mirror speaks.
#[test]
fn a_version_1_primary_is_served_and_an_unknown_version_refused() {
    use mnemo_repl::proto::{Frame, Role};
    let dir = scratch();
    let (addr, store) = start_mirror(dir.path());
    let (mut link, _) = open_link_as(addr, 1, 1);
    send_copy(&mut link, 1, 1, 0xbb);
    assert_eq!(
        recv_past_heartbeats(&mut link).unwrap(),
        Frame::Ack { epoch: 1, id: 1 }
    );
    link.send(&Frame::Record {
        epoch: 1,
        id: 2,
        copy: false,
        ranges: vec![Range {
            offset: 8,
            data: vec![0xcc; 8],
        }],
    })
    .unwrap();
    assert_eq!(
        recv_past_heartbeats(&mut link).unwrap(),
        Frame::Ack { epoch: 1, id: 2 }
    );
    assert_eq!(store.lock().unwrap().state().mode, None);

    let mut link = mnemo_repl::link::Link::connect(addr, Duration::from_secs(2)).unwrap();
    link.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    link.send(&Frame::Hello {
        version: 4,
        role: Role::Primary,
        nonce: [1; 32],
    })
    .unwrap();
    match link.recv().unwrap() {
        Frame::Refused { reason } => assert!(reason.contains("versions 1 to 3"), "{reason}"),
        other => panic!("a version 4 primary was answered: {other:?}"),
    }
}

/// A store crashed at each durable step of a checkpoint, the machine losing every line of the
/// image written since its last drain, recovers every logged record at open (the simulation's
/// crash points and power loss, `MirrorStore::sim_*`, on one store). Under the mutant
/// `repl.checkpoint_skip_drain` a checkpoint that completes loses them.
#[test]
fn a_store_crashed_inside_a_checkpoint_keeps_its_records() {
    const LEN: u64 = 8192;
    let records = |s: &mut MirrorStore| {
        for id in 2..5u64 {
            let ranges = [Range {
                offset: id * 1000,
                data: vec![id as u8; 100],
            }];
            s.log_record(1, id, &ranges, None).unwrap();
            s.apply(&ranges).unwrap();
        }
    };
    let holds = |path: &Path| {
        let s = MirrorStore::open(path, MirrorOptions::default()).unwrap();
        let image = std::fs::read(s.image_path()).unwrap();
        s.state().last_id == 4
            && (2..5usize).all(|id| {
                image[id * 1000..id * 1000 + 100]
                    .iter()
                    .all(|&b| b == id as u8)
            })
    };
    let dir = scratch();
    // Steps of a checkpoint: before the drain, the state's new file, its rename, emptying the
    // log; then one that is never reached (the checkpoint completes).
    for step in 0..5u64 {
        let path = dir.path().join(format!("mirror-{step}"));
        let mut s = MirrorStore::open(&path, MirrorOptions::default()).unwrap();
        s.sim_track_durable_image();
        s.begin_copy(1, LEN).unwrap();
        s.finish_copy(1, LEN).unwrap();
        records(&mut s);
        s.sim_crash_after(Some(step));
        let done = s.checkpoint();
        assert_eq!(done.is_err(), step < 4, "step {step}: {done:?}");
        assert_eq!(s.sim_crashed().is_some(), step < 4);
        s.sim_crash(true, || true).unwrap();
        assert!(holds(&path), "step {step}: records lost");
    }
    let path = dir.path().join("mirror-mutant");
    mnemo_pmem::mutant::with("repl.checkpoint_skip_drain", || {
        let mut s = MirrorStore::open(&path, MirrorOptions::default()).unwrap();
        s.sim_track_durable_image();
        s.begin_copy(1, LEN).unwrap();
        s.finish_copy(1, LEN).unwrap();
        records(&mut s);
        s.checkpoint().unwrap();
        s.sim_crash(true, || true).unwrap();
    });
    assert!(!holds(&path), "the mutant's lost records went unnoticed");
}
