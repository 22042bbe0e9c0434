//! Heartbeats on an idle link, and the primary's membership hooks.
//!
//! A proxy between the primary and the mirror can be frozen (it stops moving bytes either
//! way, as a SIGSTOPped mirror or a cut link would): the primary sees the loss from its
//! heartbeats alone, with no sync point, and records it in its membership before anything
//! more is acknowledged. A membership that refuses (a deposed primary) fails sync points.

mod support;
use support::{scratch, start_mirror, SECRET};

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mnemo_pmem::{CreateOptions, Pool};
use mnemo_repl::{Membership, MirrorConfig, MirrorPolicy, Mode, Secret, WithoutMirror};

/// A membership that records what the policy tells it, and can refuse.
#[derive(Debug, Default)]
struct Recorder {
    in_sync: AtomicU64,
    lost: AtomicU64,
    refuse_loss: AtomicBool,
    deposed: AtomicBool,
}

impl Membership for Recorder {
    fn mirror_in_sync(&self) {
        self.in_sync.fetch_add(1, Ordering::SeqCst);
    }

    fn mirror_lost(&self) -> Result<(), String> {
        if self.refuse_loss.load(Ordering::SeqCst) {
            return Err("the configuration store cannot be reached".into());
        }
        self.lost.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    fn may_acknowledge(&self) -> Result<(), String> {
        if self.deposed.load(Ordering::SeqCst) {
            return Err("deposed at epoch 2".into());
        }
        Ok(())
    }
}

fn config(addr: SocketAddr, mode: Mode) -> MirrorConfig {
    let mut c = MirrorConfig::new(addr, Secret::new(SECRET).unwrap(), mode);
    c.timeout = Duration::from_millis(500);
    c.retry = Duration::from_millis(50);
    c.heartbeat = Duration::from_millis(100);
    c.heartbeat_timeout = Duration::from_millis(300);
    c
}

fn pool_with(path: &Path, policy: &Arc<MirrorPolicy>) -> Pool {
    let mut options = CreateOptions::new(4 << 20, "repl-hb");
    options.policy = Some(Arc::clone(policy) as _);
    Pool::create(path, &options).expect("primary pool")
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    start.elapsed()
}

#[test]
fn an_idle_link_sees_a_silent_mirror_through_heartbeats() {
    let dir = scratch();
    let (mirror, store) = start_mirror(&dir.path().join("mirror"));
    let frozen = Arc::new(AtomicBool::new(false));
    let addr = support::start_proxy(mirror, Arc::clone(&frozen));
    let recorder = Arc::new(Recorder::default());
    let policy = Arc::new(
        MirrorPolicy::new(config(addr, Mode::Sync))
            .with_membership(Arc::clone(&recorder) as Arc<dyn Membership>),
    );
    policy.start_heartbeats().unwrap();
    let pool = pool_with(&dir.path().join("primary.pool"), &policy);
    let at = pool.data_offset();
    pool.write(at, b"before").unwrap();
    pool.msync(at, 6).unwrap();
    assert!(policy.stats().in_sync);
    assert_eq!(recorder.in_sync.load(Ordering::SeqCst), 1);

    // Idle: heartbeats flow and are answered, and the mirror counts them.
    wait_for("three heartbeats", Duration::from_secs(5), || {
        policy.stats().heartbeats >= 3
    });
    let s = policy.stats();
    assert!(s.in_sync && s.link_losses == 0, "{s:?}");
    assert!(s.heartbeat_age_ms.is_some_and(|ms| ms < 1000), "{s:?}");
    assert!(store.lock().unwrap().stats().heartbeats >= 3);
    let shipped = s.shipped;

    // The mirror goes silent; no sync point is made, yet the loss is seen and recorded.
    frozen.store(true, Ordering::Relaxed);
    let seen = wait_for(
        "the loss seen by heartbeats",
        Duration::from_secs(3),
        || !policy.stats().in_sync,
    );
    println!("silent mirror seen after {seen:?} (heartbeat 100 ms, timeout 300 ms)");
    let s = policy.stats();
    assert_eq!((s.link_losses, s.shipped), (1, shipped), "{s:?}");
    assert_eq!(recorder.lost.load(Ordering::SeqCst), 1);

    // The next sync point is acknowledged locally, without a second record of the loss.
    pool.write(at, b"during").unwrap();
    pool.msync(at, 6).unwrap();
    let s = policy.stats();
    assert_eq!(s.local_only, 1, "{s:?}");
    assert_eq!(recorder.lost.load(Ordering::SeqCst), 1);
    frozen.store(false, Ordering::Relaxed);
}

#[test]
fn a_loss_that_cannot_be_recorded_fails_the_sync_point() {
    let dir = scratch();
    let (mirror, _store) = start_mirror(&dir.path().join("mirror"));
    let frozen = Arc::new(AtomicBool::new(false));
    let addr = support::start_proxy(mirror, Arc::clone(&frozen));
    let recorder = Arc::new(Recorder::default());
    let policy = Arc::new(
        MirrorPolicy::new(config(addr, Mode::SyncFlush))
            .with_membership(Arc::clone(&recorder) as Arc<dyn Membership>),
    );
    let pool = pool_with(&dir.path().join("primary.pool"), &policy);
    let at = pool.data_offset();
    pool.write(at, b"one").unwrap();
    pool.msync(at, 3).unwrap();
    assert!(policy.stats().in_sync);

    // No heartbeats here: the sync point itself finds the mirror gone, and the membership
    // cannot record it, so the sync point is not acknowledged.
    recorder.refuse_loss.store(true, Ordering::SeqCst);
    frozen.store(true, Ordering::Relaxed);
    pool.write(at, b"two").unwrap();
    let err = pool
        .msync(at, 3)
        .expect_err("acknowledged without a recorded loss");
    assert!(err.to_string().contains("cannot be reached"), "{err}");
    // Once the loss is recorded, sync points are acknowledged locally again.
    recorder.refuse_loss.store(false, Ordering::SeqCst);
    pool.msync(at, 3).unwrap();
    assert_eq!(recorder.lost.load(Ordering::SeqCst), 1);

    // A deposed primary acknowledges nothing, with or without a mirror.
    recorder.deposed.store(true, Ordering::SeqCst);
    let err = pool
        .msync(at, 3)
        .expect_err("a deposed primary acknowledged");
    assert!(err.to_string().contains("deposed"), "{err}");
    frozen.store(false, Ordering::Relaxed);
}

#[test]
fn a_blocking_primary_waits_for_its_mirror() {
    let dir = scratch();
    let (mirror, store) = start_mirror(&dir.path().join("mirror"));
    let frozen = Arc::new(AtomicBool::new(false));
    let addr = support::start_proxy(mirror, Arc::clone(&frozen));
    let recorder = Arc::new(Recorder::default());
    let mut c = config(addr, Mode::Sync);
    c.without_mirror = WithoutMirror::Block;
    let policy = Arc::new(
        MirrorPolicy::new(c).with_membership(Arc::clone(&recorder) as Arc<dyn Membership>),
    );
    let pool = Arc::new(pool_with(&dir.path().join("primary.pool"), &policy));
    let at = pool.data_offset();
    pool.write(at, b"one").unwrap();
    pool.msync(at, 3).unwrap();

    frozen.store(true, Ordering::Relaxed);
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (pool, done) = (Arc::clone(&pool), Arc::clone(&done));
        std::thread::spawn(move || {
            pool.write(at, b"two").unwrap();
            pool.msync(at, 3).unwrap();
            done.store(true, Ordering::SeqCst);
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        !done.load(Ordering::SeqCst),
        "acknowledged while the mirror was away"
    );
    assert_eq!(
        recorder.lost.load(Ordering::SeqCst),
        0,
        "block mode records nothing"
    );
    frozen.store(false, Ordering::Relaxed);
    writer.join().unwrap();
    // Back with a second full copy, which holds the blocked sync point's bytes.
    let s = policy.stats();
    assert!(s.in_sync && s.copies == 2, "{s:?}");
    let store = store.lock().unwrap();
    let image = std::fs::read(store.image_path()).unwrap();
    assert_eq!(&image[at as usize..at as usize + 3], b"two");
}
