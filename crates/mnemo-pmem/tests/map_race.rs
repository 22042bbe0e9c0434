//! Mapping a pool file must never leave a moment in which part of its address-space
//! reservation is unmapped: another thread's `mmap` could be placed there, and the pool's
//! own `MAP_FIXED` mapping would then silently replace it (two owners of one address range:
//! one pool reading another's bytes, or a later `munmap` pulling a live mapping away).
//!
//! `FileMedia::map` used to ask for `MAP_SYNC` with `MAP_FIXED` over the start of its
//! reservation to find out whether the file system is DAX. On ext4 or xfs without DAX the
//! kernel unmaps the target range *before* the file system refuses `MAP_SYNC`, so the refused
//! attempt left a hole of the pool's length at the reservation's start until the plain
//! mapping filled it. This test maps pool files on the ordinary disk over and over while
//! another thread maps anonymous memory as fast as it can, and checks that none of the other
//! thread's mappings ever lands inside a pool's reservation.

use std::fs::OpenOptions;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mnemo_pmem::{FileMedia, Media, MediaKind};

const LEN: u64 = 4 << 20;
const CAPACITY: u64 = 64 << 20;
const ROUNDS: u64 = 600;

/// The other thread's mappings: address and length, freed by the test.
struct Anon(usize, usize);

fn map_anon(len: usize) -> usize {
    // SAFETY: a fresh PROT_NONE anonymous mapping at an address of the kernel's choosing.
    let ptr = unsafe {
        rustix::mm::mmap_anonymous(
            std::ptr::null_mut(),
            len,
            rustix::mm::ProtFlags::empty(),
            rustix::mm::MapFlags::PRIVATE | rustix::mm::MapFlags::NORESERVE,
        )
    }
    .expect("anonymous mmap");
    ptr as usize
}

fn unmap_anon(a: &Anon) {
    // SAFETY: the test made this mapping and nothing else owns its range (checked by the
    // caller: it does not overlap a live reservation).
    unsafe { rustix::mm::munmap(a.0 as *mut _, a.1) }.expect("munmap");
}

#[test]
fn mapping_a_pool_file_leaves_no_hole_another_thread_can_take() {
    let dir = tempfile::Builder::new()
        .prefix("mnemo-map-race")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("tempdir");
    let path = dir.path().join("race.pool");
    let open = || {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .expect("open pool file");
        file.set_len(LEN).expect("set_len");
        file
    };
    let first = FileMedia::map(&path, open(), LEN, CAPACITY).expect("map");
    if first.info().kind != MediaKind::PageCache {
        // scripts/test.sh (MNEMO_REQUIRE_TOOLS=1) runs where the target directory is on an
        // ordinary disk: there, a skip would hide that the test no longer tests anything.
        assert!(
            std::env::var("MNEMO_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "{} is on {:?}, not an ordinary disk file system, and MNEMO_REQUIRE_TOOLS=1",
            dir.path().display(),
            first.info().kind
        );
        eprintln!(
            "skipped: {} is on {:?}, not an ordinary disk file system (the case that broke)",
            dir.path().display(),
            first.info().kind
        );
        return;
    }
    drop(first);

    // Odd: a pool is being mapped (the other thread maps memory); even: it is not.
    let phase = Arc::new(AtomicU64::new(0));
    // The last phase the other thread saw when it finished a step.
    let seen = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let taken: Arc<Mutex<Vec<Anon>>> = Arc::default();
    let other = {
        let (phase, seen, stop, taken) = (phase.clone(), seen.clone(), stop.clone(), taken.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let now = phase.load(Ordering::Acquire);
                if now % 2 == 1 {
                    let addr = map_anon(LEN as usize);
                    taken.lock().unwrap().push(Anon(addr, LEN as usize));
                } else {
                    std::hint::spin_loop();
                }
                seen.store(now, Ordering::Release);
            }
        })
    };

    let mut clobbered = Vec::new();
    for round in 0..ROUNDS {
        phase.fetch_add(1, Ordering::AcqRel);
        let media = FileMedia::map(&path, open(), LEN, CAPACITY).expect("map");
        let now = phase.fetch_add(1, Ordering::AcqRel) + 1;
        // Wait until the other thread has finished every mmap it started while mapping.
        while seen.load(Ordering::Acquire) != now {
            std::thread::yield_now();
        }
        let base = media.base().as_ptr() as usize;
        let end = base + media.capacity() as usize;
        for anon in taken.lock().unwrap().drain(..) {
            if anon.0 < end && base < anon.0 + anon.1 {
                // Its range now belongs to the pool's mapping: leave it to the pool's unmap.
                clobbered.push((round, anon.0, base));
            } else {
                unmap_anon(&anon);
            }
        }
        drop(media);
    }
    stop.store(true, Ordering::Release);
    other.join().expect("other thread");
    assert!(
        clobbered.is_empty(),
        "another thread's mmap landed inside a pool's reservation while the pool was being \
         mapped, and the pool's MAP_FIXED mapping replaced it, in {} of {ROUNDS} rounds \
         (round, other mapping, pool base): {:x?}",
        clobbered.len(),
        &clobbered[..clobbered.len().min(5)]
    );
}
