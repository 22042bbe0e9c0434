//! The primary's switchable policy without etcd: sync points go to the current mirror's
//! policy, a replacement takes over at the next sync point with a full copy, and without a
//! mirror the fence decides whether a sync point may be acknowledged.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mnemo_pmem::{CreateOptions, Pool};
use mnemo_repl::{
    Membership, Mirror, MirrorConfig, MirrorOptions, MirrorPolicy, MirrorStore, Mode, Secret,
};
use mnemo_repl_etcd::SwitchPolicy;

const SECRET: &[u8] = b"a secret for the switch tests";

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mnemo-switch-")
        .tempdir_in("/dev/shm")
        .expect("scratch dir on /dev/shm")
}

fn start_mirror(dir: &Path) -> (SocketAddr, Arc<Mutex<MirrorStore>>) {
    let store = MirrorStore::open(dir, MirrorOptions::default()).expect("mirror store");
    let mirror = Mirror::new(store, Secret::new(SECRET).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let store = mirror.store();
    std::thread::spawn(move || mirror.serve(listener));
    (addr, store)
}

fn policy(addr: SocketAddr, epoch: u64) -> Arc<MirrorPolicy> {
    let mut c = MirrorConfig::new(addr, Secret::new(SECRET).unwrap(), Mode::Sync);
    c.epoch = epoch;
    c.timeout = Duration::from_millis(500);
    Arc::new(MirrorPolicy::new(c))
}

/// The bytes of a mirror's image at `offset` (checkpointed first).
fn image_bytes(store: &Mutex<MirrorStore>, offset: u64, len: usize) -> Vec<u8> {
    let path = {
        let mut s = store.lock().unwrap();
        s.checkpoint().unwrap();
        s.image_path()
    };
    let image = std::fs::read(path).unwrap();
    image[offset as usize..offset as usize + len].to_vec()
}

/// A fence that may be closed.
#[derive(Debug, Default)]
struct Fence(AtomicBool);

impl Membership for Fence {
    fn mirror_in_sync(&self) {}
    fn mirror_lost(&self) -> Result<(), String> {
        Ok(())
    }
    fn may_acknowledge(&self) -> Result<(), String> {
        if self.0.load(Ordering::SeqCst) {
            Err("fenced".into())
        } else {
            Ok(())
        }
    }
}

#[test]
fn a_replaced_mirror_gets_a_full_copy_at_the_next_sync_point() {
    let dir = scratch();
    let fence = Arc::new(Fence::default());
    let switch = Arc::new(SwitchPolicy::new(None).with_fence(Arc::clone(&fence) as _));
    let mut options = CreateOptions::new(4 << 20, "switch-test");
    options.policy = Some(Arc::clone(&switch) as _);
    let pool = Pool::create(&dir.path().join("p.pool"), &options).unwrap();
    let at = pool.data_offset() + 4096;
    let (first, second, third) = (
        b"alone, durable here",
        b"with mirror one",
        b"with mirror two",
    );

    // No mirror: durable here alone, after the fence.
    pool.write(at, first).unwrap();
    pool.msync(at, first.len() as u64).unwrap();
    assert!(switch.current().is_none() && !switch.wants_sync_point());

    // A first mirror: installed at the next sync point, with a full copy before the record.
    let (a, store_a) = start_mirror(&dir.path().join("a"));
    switch.replace(policy(a, 2));
    assert!(switch.wants_sync_point(), "a policy waits to be installed");
    pool.write(at + 64, second).unwrap();
    pool.msync(at + 64, second.len() as u64).unwrap();
    assert!(!switch.wants_sync_point());
    assert_eq!(switch.current().unwrap().stats().copies, 1);
    assert_eq!(image_bytes(&store_a, at, first.len()), first);
    assert_eq!(image_bytes(&store_a, at + 64, second.len()), second);

    // A second mirror replaces it (an empty sync point suffices, as an idle server makes):
    // it holds everything, the first gets nothing more.
    let (b, store_b) = start_mirror(&dir.path().join("b"));
    switch.replace(policy(b, 3));
    pool.sync(&mnemo_pmem::SyncPoint::new(mnemo_pmem::SyncKind::Data, &[]))
        .unwrap();
    assert_eq!(switch.current().unwrap().config().addr, b);
    pool.write(at + 128, third).unwrap();
    pool.msync(at + 128, third.len() as u64).unwrap();
    assert_eq!(image_bytes(&store_b, at, first.len()), first);
    assert_eq!(image_bytes(&store_b, at + 64, second.len()), second);
    assert_eq!(image_bytes(&store_b, at + 128, third.len()), third);
    assert_eq!(
        image_bytes(&store_a, at + 128, third.len()),
        vec![0; third.len()]
    );
    drop(pool);
}

#[test]
fn without_a_mirror_a_closed_fence_fails_the_sync_point() {
    let dir = scratch();
    let fence = Arc::new(Fence::default());
    let switch = Arc::new(SwitchPolicy::new(None).with_fence(Arc::clone(&fence) as _));
    let mut options = CreateOptions::new(4 << 20, "switch-test");
    options.policy = Some(Arc::clone(&switch) as _);
    let pool = Pool::create(&dir.path().join("p.pool"), &options).unwrap();
    let at = pool.data_offset();
    pool.write(at, b"acknowledged").unwrap();
    pool.msync(at, 12).unwrap();
    fence.0.store(true, Ordering::SeqCst);
    pool.write(at, b"not any more").unwrap();
    let err = pool.msync(at, 12).unwrap_err();
    assert!(err.to_string().contains("fenced"), "{err}");
}
