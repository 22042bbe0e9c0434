//! The second tier: primary -> mirror -> backup over loopback. The backup's image, opened as
//! a pool, holds what the primary wrote once it has caught up; a backup that is away while
//! records pile up past the lag limit catches up in bulk with a full copy instead of an
//! unbounded queue; a backup learns of the primary's full copies.

mod support;
use support::{scratch, SECRET};

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mnemo_heap::{Heap, HeapOptions, PPtr};
use mnemo_pmem::{CreateOptions, OpenOptions, Pool};
use mnemo_repl::backup::Forwarder;
use mnemo_repl::{Mirror, MirrorConfig, MirrorOptions, MirrorPolicy, MirrorStore, Mode, Secret};

fn serve(mirror: Mirror, listener: TcpListener) -> Arc<Mutex<MirrorStore>> {
    let store = mirror.store();
    std::thread::spawn(move || mirror.serve(listener));
    store
}

fn store(dir: &Path) -> MirrorStore {
    MirrorStore::open(dir, MirrorOptions::default()).expect("store")
}

fn secret() -> Secret {
    Secret::new(SECRET).unwrap()
}

/// Until the backup holds every record the mirror holds.
fn caught_up(mirror: &Mutex<MirrorStore>, backup: &Mutex<MirrorStore>, forwarder: &Forwarder) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let want = mirror.lock().unwrap().last_id();
        let have = backup.lock().unwrap().last_id();
        if have == want && backup.lock().unwrap().state().complete && forwarder.stats().connected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "backup at {have}, mirror at {want}: {:?}",
            forwarder.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn check_image(store: &Mutex<MirrorStore>, dir: &Path, written: &[(u64, u64)]) {
    let copy = dir.join("copy.pool");
    {
        // Copied under the store's lock: a full copy beginning meanwhile (a relink on a
        // loaded machine) would otherwise be read half way, its image zeroed.
        let mut s = store.lock().unwrap();
        s.checkpoint().unwrap();
        std::fs::copy(s.image_path(), &copy).unwrap();
    }
    let pool = Pool::open(&copy, &OpenOptions::default()).expect("the backup's image is a pool");
    let heap = Heap::open(pool).expect("its heap recovers");
    for &(obj, value) in written {
        let got: u64 = heap.get(PPtr::<u64>::from_offset(obj)).unwrap();
        assert_eq!(got, value, "object at {obj:#x}");
    }
    heap.close();
    std::fs::remove_file(&copy).unwrap();
}

fn write(heap: &Heap, written: &mut Vec<(u64, u64)>, n: u64) {
    for _ in 0..n {
        let value = written.len() as u64 * 3 + 1;
        let obj = heap.tx(|tx| tx.alloc_bytes(64)).unwrap();
        heap.tx(|tx| tx.write(PPtr::<u64>::from_offset(obj), &value))
            .unwrap();
        written.push((obj, value));
    }
}

fn primary(dir: &Path, mirror: SocketAddr) -> Heap {
    let mut c = MirrorConfig::new(mirror, secret(), Mode::Sync);
    c.timeout = Duration::from_millis(500);
    let mut options = CreateOptions::new(16 << 20, "repl-test");
    options.policy = Some(Arc::new(MirrorPolicy::new(c)));
    let pool = Pool::create(&dir.join("primary.pool"), &options).unwrap();
    Heap::create(pool, &HeapOptions::default()).unwrap()
}

#[test]
fn a_backup_follows_the_mirror() {
    let dir = scratch();
    let b_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let b_addr = b_listener.local_addr().unwrap();
    let backup = serve(
        Mirror::new(store(&dir.path().join("backup")), secret()),
        b_listener,
    );
    let mut mirror = Mirror::new(store(&dir.path().join("mirror")), secret());
    mirror.add_backup(b_addr, 64 << 20).unwrap();
    let forwarder = Arc::clone(&mirror.backups()[0]);
    let m_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let m_addr = m_listener.local_addr().unwrap();
    let mirror = serve(mirror, m_listener);

    let heap = primary(dir.path(), m_addr);
    let mut written = Vec::new();
    write(&heap, &mut written, 40);
    caught_up(&mirror, &backup, &forwarder);
    check_image(&backup, dir.path(), &written);
    // Now connected: later records are forwarded one by one, no new copy.
    write(&heap, &mut written, 10);
    heap.close();
    caught_up(&mirror, &backup, &forwarder);
    let stats = forwarder.stats();
    assert!(
        stats.forwarded >= 20,
        "records went on after the copy: {stats:?}"
    );
    assert_eq!(stats.copies, 1, "{stats:?}");
    assert_eq!(stats.overflows, 0);
    check_image(&backup, dir.path(), &written);
}

#[test]
fn a_lagging_backup_catches_up_in_bulk() {
    let dir = scratch();
    // The backup's port, closed at first: records pile up past the 4 KiB limit.
    let b_addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut mirror = Mirror::new(store(&dir.path().join("mirror")), secret());
    mirror.add_backup(b_addr, 4 << 10).unwrap();
    let forwarder = Arc::clone(&mirror.backups()[0]);
    let m_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let m_addr = m_listener.local_addr().unwrap();
    let mirror = serve(mirror, m_listener);
    let heap = primary(dir.path(), m_addr);
    let mut written = Vec::new();
    write(&heap, &mut written, 40);
    let stats = forwarder.stats();
    assert!(stats.overflows >= 1, "{stats:?}");
    assert!(
        stats.lag_bytes <= 4 << 10,
        "the queue stays bounded: {stats:?}"
    );
    assert!(!stats.connected);
    // The backup comes up: a full copy brings it to the mirror's state.
    let backup = serve(
        Mirror::new(store(&dir.path().join("backup")), secret()),
        TcpListener::bind(b_addr).unwrap(),
    );
    write(&heap, &mut written, 5);
    caught_up(&mirror, &backup, &forwarder);
    heap.close();
    caught_up(&mirror, &backup, &forwarder);
    assert!(forwarder.stats().copies >= 1);
    check_image(&backup, dir.path(), &written);
}

/// The story: the primary lost its link (a backup's first copy held the mirror's store past
/// the primary's timeout, under load), made sync points locally, relinked with a full copy to
/// the mirror, and went on. The backup, streaming records, never saw the local-only sync
/// points nor the copy that brought them to the mirror: it applied later records to an image
/// that lacked them, and its keyspace was corrupt. A full copy to the mirror now makes each
/// backup catch up with a full copy too.
#[test]
fn a_backup_catches_up_with_what_the_primary_made_without_its_mirror() {
    let dir = scratch();
    let b_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let b_addr = b_listener.local_addr().unwrap();
    let backup = serve(
        Mirror::new(store(&dir.path().join("backup")), secret()),
        b_listener,
    );
    let mut mirror = Mirror::new(store(&dir.path().join("mirror")), secret());
    mirror.add_backup(b_addr, 64 << 20).unwrap();
    let forwarder = Arc::clone(&mirror.backups()[0]);
    let m_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let m_addr = m_listener.local_addr().unwrap();
    let mirror = serve(mirror, m_listener);
    let frozen = Arc::new(AtomicBool::new(false));
    let proxy = support::start_proxy(m_addr, Arc::clone(&frozen));

    let mut c = MirrorConfig::new(proxy, secret(), Mode::SyncFlush);
    c.timeout = Duration::from_millis(300);
    c.retry = Duration::from_millis(50);
    let policy = Arc::new(MirrorPolicy::new(c));
    let mut options = CreateOptions::new(16 << 20, "repl-test");
    options.policy = Some(Arc::clone(&policy) as _);
    let pool = Pool::create(&dir.path().join("primary.pool"), &options).unwrap();
    let heap = Heap::create(pool, &HeapOptions::default()).unwrap();
    let mut written = Vec::new();
    write(&heap, &mut written, 20);
    caught_up(&mirror, &backup, &forwarder);
    assert_eq!(forwarder.stats().copies, 1);

    // The link is cut: these writes are durable on the primary alone.
    frozen.store(true, Ordering::Relaxed);
    write(&heap, &mut written, 20);
    let s = policy.stats();
    assert!(!s.in_sync && s.local_only >= 20, "{s:?}");
    frozen.store(false, Ordering::Relaxed);
    // Back with a full copy, then records again.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !policy.stats().in_sync {
        assert!(Instant::now() < deadline, "{:?}", policy.stats());
        write(&heap, &mut written, 1);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(policy.stats().copies, 2);
    write(&heap, &mut written, 20);
    heap.close();
    caught_up(&mirror, &backup, &forwarder);
    assert_eq!(forwarder.stats().copies, 2, "{:?}", forwarder.stats());
    check_image(&mirror, dir.path(), &written);
    check_image(&backup, dir.path(), &written);
}

/// syncsec: a backup more than the threshold behind holds the mirror's acknowledgements (so
/// the primary tier waits for it, and the backup never lags further), and a backup stuck
/// past the longest stall is dropped to a bulk catch-up instead of holding the tier longer.
/// The threshold is the primary's, told at its handshake: the mirror runs without one of
/// its own (before protocol version 2 this primary behaved as `sync`).
#[test]
fn a_lagging_backup_holds_the_primary_tier_back_then_is_dropped() {
    const THRESHOLD: u64 = 4 << 10;
    let dir = scratch();
    let b_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let b_addr = b_listener.local_addr().unwrap();
    let backup = serve(
        Mirror::new(store(&dir.path().join("backup")), secret()),
        b_listener,
    );
    let frozen = Arc::new(AtomicBool::new(false));
    let b_proxy = support::start_proxy(b_addr, Arc::clone(&frozen));
    let mut mirror = Mirror::new(store(&dir.path().join("mirror")), secret());
    // The mirror's own threshold: none.
    mirror
        .add_backup_with(b_proxy, mnemo_repl::BackupOptions::new(64 << 20))
        .unwrap();
    let forwarder = Arc::clone(&mirror.backups()[0]);
    assert_eq!(forwarder.stall_threshold().0, 0);
    let m_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let m_addr = m_listener.local_addr().unwrap();
    let mirror = serve(mirror, m_listener);
    let mut c = MirrorConfig::new(m_addr, secret(), Mode::SyncSec);
    // Shorter than the longest hold: the mirror's heartbeats during a hold keep the primary
    // waiting instead of declaring its mirror lost.
    c.timeout = Duration::from_millis(500);
    c.backup_stall = THRESHOLD;
    c.backup_stall_max = Duration::from_millis(1500);
    let policy = Arc::new(MirrorPolicy::new(c));
    let mut create = CreateOptions::new(16 << 20, "repl-test");
    create.policy = Some(Arc::clone(&policy) as _);
    let pool = Pool::create(&dir.path().join("primary.pool"), &create).unwrap();
    let heap = Heap::create(pool, &HeapOptions::default()).unwrap();
    let mut written = Vec::new();
    write(&heap, &mut written, 20);
    caught_up(&mirror, &backup, &forwarder);
    assert_eq!(
        forwarder.stall_threshold(),
        (THRESHOLD, Duration::from_millis(1500)),
        "the primary's threshold is the mirror's"
    );

    // Slow but alive: the backup's link stalls for 100 ms. Writes wait for it rather than
    // let it fall more than the threshold behind.
    frozen.store(true, Ordering::Relaxed);
    let thaw = {
        let frozen = Arc::clone(&frozen);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            frozen.store(false, Ordering::Relaxed);
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while forwarder.stats().stalls == 0 {
        assert!(Instant::now() < deadline, "{:?}", forwarder.stats());
        write(&heap, &mut written, 1);
        let s = forwarder.stats();
        assert!(
            s.unacked_bytes <= THRESHOLD,
            "acknowledged with the backup further behind than the threshold: {s:?}"
        );
    }
    thaw.join().unwrap();
    write(&heap, &mut written, 20);
    let s = forwarder.stats();
    assert_eq!((s.overflows, s.copies), (0, 1), "{s:?}");
    assert!(s.unacked_bytes <= THRESHOLD, "{s:?}");
    // The primary sees it too: the mirror's Status frames (at most one per 100 ms, after an
    // acknowledgement) say where the backup stands.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        std::thread::sleep(Duration::from_millis(120));
        write(&heap, &mut written, 1);
        let view = policy.backups();
        if let Some(b) = view
            .backups
            .first()
            .filter(|b| b.stalls >= 1 && b.connected)
        {
            assert_eq!(view.backups.len(), 1);
            assert_eq!(b.addr, b_proxy.to_string());
            assert!(b.lag_bytes <= THRESHOLD, "{view:?}");
            assert!(b.copies == 1 && b.overflows == 0, "{view:?}");
            assert!(view.mirror_last_id >= b.acked, "{view:?}");
            break;
        }
        assert!(Instant::now() < deadline, "no Status: {view:?}");
    }

    // Stuck: past the longest stall the backup is dropped, and the primary goes on, still
    // in sync with its mirror.
    frozen.store(true, Ordering::Relaxed);
    let stalls = forwarder.stats().stalls;
    // Twice the threshold's worth of records (about 137 bytes each): records still in
    // flight when the link froze may be acknowledged meanwhile, and must not bring the
    // backup back under the threshold before it has been held for the longest stall.
    write(&heap, &mut written, 60);
    let s = forwarder.stats();
    assert_eq!(s.overflows, 1, "{s:?}");
    assert!(s.stalls > stalls, "{s:?}");
    let p = policy.stats();
    assert!(p.in_sync && p.link_losses == 0, "{p:?}");
    frozen.store(false, Ordering::Relaxed);
    write(&heap, &mut written, 5);
    heap.close();
    caught_up(&mirror, &backup, &forwarder);
    assert_eq!(forwarder.stats().copies, 2);
    check_image(&backup, dir.path(), &written);
}

/// syncseceth: a backup whose link stops for a while (shorter than the link's timeout) holds
/// the primary for the longest hold only; then, instead of being dropped to a full copy, it
/// catches up in bulk: the records not yet sent are dropped, the ranges they and the later
/// records write are gathered (merged), and once the link has drained they go as one record
/// of the mirror's bytes at its last id. The backup's image then holds every value, with one
/// full copy in all. The same writes over and over coalesce: the bulk record is smaller than
/// the records it replaces.
#[test]
fn a_lagging_backup_behind_a_slow_link_catches_up_in_bulk() {
    const THRESHOLD: u64 = 4 << 10;
    let dir = scratch();
    let b_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let b_addr = b_listener.local_addr().unwrap();
    let backup = serve(
        Mirror::new(store(&dir.path().join("backup")), secret()),
        b_listener,
    );
    let frozen = Arc::new(AtomicBool::new(false));
    let b_proxy = support::start_proxy(b_addr, Arc::clone(&frozen));
    let mut mirror = Mirror::new(store(&dir.path().join("mirror")), secret());
    mirror
        .add_backup_with(b_proxy, mnemo_repl::BackupOptions::new(64 << 20))
        .unwrap();
    let forwarder = Arc::clone(&mirror.backups()[0]);
    let m_listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let m_addr = m_listener.local_addr().unwrap();
    let mirror = serve(mirror, m_listener);
    let mut c = MirrorConfig::new(m_addr, secret(), Mode::SyncSecEth);
    c.timeout = Duration::from_secs(2);
    c.backup_stall = THRESHOLD;
    c.backup_stall_max = Duration::from_millis(200);
    let policy = Arc::new(MirrorPolicy::new(c));
    let mut create = CreateOptions::new(16 << 20, "repl-test");
    create.policy = Some(Arc::clone(&policy) as _);
    let pool = Pool::create(&dir.path().join("primary.pool"), &create).unwrap();
    let heap = Heap::create(pool, &HeapOptions::default()).unwrap();
    let mut written = Vec::new();
    write(&heap, &mut written, 20);
    caught_up(&mirror, &backup, &forwarder);

    // The link stops for 1 s: one hold of 200 ms, then the backup goes to bulk and the
    // primary is no longer held. The same 8 objects are rewritten again and again.
    let objects: Vec<u64> = written[..8].iter().map(|&(obj, _)| obj).collect();
    frozen.store(true, Ordering::Relaxed);
    let t = Instant::now();
    let mut rewrites = 0u64;
    while t.elapsed() < Duration::from_millis(1000) {
        let obj = objects[rewrites as usize % objects.len()];
        let value = 1_000_000 + rewrites;
        heap.tx(|tx| tx.write(PPtr::<u64>::from_offset(obj), &value))
            .unwrap();
        if let Some(w) = written.iter_mut().find(|w| w.0 == obj) {
            w.1 = value;
        }
        rewrites += 1;
    }
    let s = forwarder.stats();
    assert!(s.stalls >= 1, "{s:?}");
    assert_eq!(s.overflows, 0, "{s:?}");
    assert!(
        rewrites > 50,
        "the primary was held: {rewrites} writes in 1 s"
    );
    frozen.store(false, Ordering::Relaxed);
    write(&heap, &mut written, 5);
    caught_up(&mirror, &backup, &forwarder);
    let s = forwarder.stats();
    assert_eq!(s.copies, 1, "caught up in bulk, not by a full copy: {s:?}");
    assert_eq!(s.overflows, 0, "{s:?}");
    assert!(s.bulk_catchups >= 1, "{s:?}");
    assert!(
        s.forwarded < rewrites,
        "the rewrites coalesced: {} records forwarded for {rewrites} rewrites: {s:?}",
        s.forwarded
    );
    let p = policy.stats();
    assert!(p.in_sync && p.link_losses == 0, "{p:?}");
    heap.close();
    caught_up(&mirror, &backup, &forwarder);
    check_image(&backup, dir.path(), &written);
}
