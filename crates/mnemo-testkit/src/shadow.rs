//! The shadow replica: a [`SyncPolicy`] that records every sync point into a second image,
//! as a mirror applying sync points would, so that tests can prove the pipeline complete.
//!
//! [`RecordingPolicy`] makes each sync point durable locally (it wraps [`LocalPolicy`]), then
//! copies the bytes of every range it was handed, in order, into the shadow image. Nothing
//! else writes the shadow: a change some layer made durable without naming it in a sync
//! point never reaches it. The crash harness ([`crate::explore()`]) records the shadow after
//! every sync point and recovers each one like a crash image: it must hold a state the
//! workload's checker accepts, and at the end the same live data as the primary.
//!
//! A recorded point is taken *after* the local sync, at the moment a synchronous mirror
//! would acknowledge it; `acked` counts the operations acknowledged before it, so the
//! operation in flight may or may not be visible in it (all-or-nothing), like a crash image.

use std::sync::{Arc, Mutex, MutexGuard};

use mnemo_pmem::{ByteRange, LocalPolicy, Media, MediaError, SyncKind, SyncPoint, SyncPolicy};

/// The shadow image after one sync point.
#[derive(Clone, Debug)]
pub struct ShadowPoint {
    /// Sync points before this one (0-based index).
    pub index: u64,
    /// The kind of the sync point.
    pub kind: SyncKind,
    /// Operations acknowledged before it.
    pub acked: usize,
    /// The shadow image after it was applied.
    pub image: Arc<Vec<u8>>,
}

#[derive(Debug, Default)]
struct State {
    image: Vec<u8>,
    syncs: u64,
    acked: usize,
    record: bool,
    points: Vec<ShadowPoint>,
}

/// A shadow replica, shared between the policy that feeds it and the test that reads it.
/// Clones share the same image.
#[derive(Clone, Debug, Default)]
pub struct Shadow {
    state: Arc<Mutex<State>>,
}

impl Shadow {
    /// An empty shadow (no bytes) that records a [`ShadowPoint`] per sync point when
    /// `record` is set.
    pub fn new(record: bool) -> Shadow {
        let shadow = Shadow::default();
        shadow.state().record = record;
        shadow
    }

    /// The policy that feeds this shadow, over [`LocalPolicy`].
    pub fn policy(&self) -> Arc<dyn SyncPolicy> {
        self.policy_over(Arc::new(LocalPolicy))
    }

    /// The policy that feeds this shadow after `inner` made each sync point durable.
    pub fn policy_over(&self, inner: Arc<dyn SyncPolicy>) -> Arc<dyn SyncPolicy> {
        Arc::new(RecordingPolicy {
            inner,
            shadow: self.clone(),
        })
    }

    /// A copy of the shadow image now.
    pub fn image(&self) -> Vec<u8> {
        self.state().image.clone()
    }

    /// Sync points applied so far.
    pub fn syncs(&self) -> u64 {
        self.state().syncs
    }

    /// An operation was acknowledged (points recorded from now on count it).
    pub fn mark_ack(&self) {
        self.state().acked += 1;
    }

    /// Take the points recorded so far.
    pub fn take_points(&self) -> Vec<ShadowPoint> {
        std::mem::take(&mut self.state().points)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Apply one sync point: copy its ranges from `media` (whose `len()` bytes the shadow
    /// mirrors in size: growth reaches a replica as zero bytes) into the image.
    fn apply(&self, media: &dyn Media, point: &SyncPoint<'_>) {
        let mut st = self.state();
        let len = media.len() as usize;
        if st.image.len() < len {
            st.image.resize(len, 0);
        }
        for range in point.all() {
            copy_range(media, *range, &mut st.image);
        }
        st.syncs += 1;
        if st.record {
            let point = ShadowPoint {
                index: st.syncs - 1,
                kind: point.kind,
                acked: st.acked,
                image: Arc::new(st.image.clone()),
            };
            st.points.push(point);
        }
    }
}

fn copy_range(media: &dyn Media, range: ByteRange, image: &mut [u8]) {
    let (start, end) = (range.offset as usize, range.end() as usize);
    assert!(
        end <= image.len() && end as u64 <= media.len(),
        "sync point range {range:?} beyond the medium ({} bytes)",
        media.len()
    );
    // SAFETY: `start..end` lies inside the medium's mapping (asserted above); the medium's
    // bytes are plain memory that the workload (single-threaded during a sync point) does
    // not change while the policy runs.
    #[allow(unsafe_code)]
    let bytes = unsafe {
        std::slice::from_raw_parts(media.base().as_ptr().add(start).cast_const(), end - start)
    };
    image[start..end].copy_from_slice(bytes);
}

/// The recording policy: a policy that makes the sync point durable ([`LocalPolicy`], or
/// the write-ahead policy on a page-cache medium), then a copy of every range into a
/// [`Shadow`].
#[derive(Debug)]
pub struct RecordingPolicy {
    inner: Arc<dyn SyncPolicy>,
    shadow: Shadow,
}

impl SyncPolicy for RecordingPolicy {
    fn name(&self) -> &'static str {
        "recording"
    }

    fn sync(&self, media: &dyn Media, point: &SyncPoint<'_>) -> Result<(), MediaError> {
        self.inner.sync(media, point)?;
        self.shadow.apply(media, point);
        Ok(())
    }

    fn open(&self, media: &dyn Media, pool: uuid::Uuid, created: bool) -> Result<(), MediaError> {
        self.inner.open(media, pool, created)
    }

    fn close(&self, media: &dyn Media) -> Result<(), MediaError> {
        self.inner.close(media)
    }

    fn write_ahead(&self) -> Option<mnemo_pmem::WalStats> {
        self.inner.write_ahead()
    }

    fn checkpoint_all(&self, media: &dyn Media) -> Result<(), MediaError> {
        self.inner.checkpoint_all(media)
    }

    fn private_mapping(&self) -> bool {
        self.inner.private_mapping()
    }

    fn defer_acks(&self, notify: Option<Arc<dyn Fn() + Send + Sync>>) -> bool {
        self.inner.defer_acks(notify)
    }

    fn pump(&self) -> Result<(), MediaError> {
        self.inner.pump()
    }

    fn ack_marks(&self) -> Option<Result<(u64, u64), MediaError>> {
        self.inner.ack_marks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimMedia;
    use mnemo_pmem::{limits::DATA_OFFSET, CreateOptions, Pool};
    use std::path::Path;

    #[test]
    fn the_shadow_holds_what_sync_points_name_and_nothing_else() {
        let shadow = Shadow::new(true);
        let mut options = CreateOptions::new(64 << 10, "shadow");
        options.policy = Some(shadow.policy());
        let pool = Pool::create_on(Box::new(SimMedia::new(1 << 20)), Path::new("s"), &options)
            .expect("create");
        pool.write(DATA_OFFSET, &7u64.to_le_bytes()).unwrap();
        pool.write(DATA_OFFSET + 64, &9u64.to_le_bytes()).unwrap();
        pool.msync(DATA_OFFSET, 8).unwrap();
        let image = shadow.image();
        let word = |at: u64| u64::from_le_bytes(image[at as usize..][..8].try_into().unwrap());
        assert_eq!(word(DATA_OFFSET), 7, "a named range reaches the shadow");
        assert_eq!(word(DATA_OFFSET + 64), 0, "an unnamed store does not");
        let points = shadow.take_points();
        assert_eq!(points.last().map(|p| p.kind), Some(SyncKind::Data));
        assert!(points.iter().any(|p| p.kind == SyncKind::Header));
        // The header copies came through sync points: the shadow opens as a pool.
        let reopened = Pool::open_on(
            Box::new(SimMedia::from_image(&image, 1 << 20, Default::default())),
            Path::new("s"),
            &Default::default(),
        );
        assert!(reopened.is_ok(), "{reopened:?}");
    }
}
