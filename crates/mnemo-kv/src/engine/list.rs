//! The persistent list: a deque of fixed-size segments, so a push or pop at either end is
//! O(1) (one element allocation, two or three logged words) however long the list is.
//!
//! ```text
//! header (80 B):   kind | len | head segment | tail segment | segments | 0 | 0
//!                  | reclaim_next | 0 | 0
//! segment (544 B): prev | next | lo | hi | 64 slots (element offsets; lo..hi are used)
//! element:         len | bytes
//! ```
//!
//! A segment pushed on the left fills from its end downwards, one pushed on the right from
//! its start upwards; the first segment of a list starts in the middle.

use super::store::Mem;

use super::dict::{Kind, HEADER_BYTES};
use super::limits::LIST_SEGMENT_SLOTS;
use super::store::{self, corrupt, Result};

const SEGMENT_BYTES: u64 = 32 + LIST_SEGMENT_SLOTS * 8;
const LEN: u64 = 8;
const HEAD: u64 = 16;
const TAIL: u64 = 24;
const SEGS: u64 = 32;
/// Offset of the reclaim link in a list header (the same as in a table header).
pub const RECLAIM_NEXT: u64 = 56;

/// A list header, decoded.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    /// Elements.
    pub len: u64,
    /// First segment (0 when empty).
    pub head: u64,
    /// Last segment.
    pub tail: u64,
    /// Segments.
    pub segs: u64,
}

impl Header {
    /// Reads and validates the list header at `l`.
    pub fn read(tx: &Mem<'_, '_>, l: u64) -> Result<Header> {
        let w = store::words::<5>(tx, l)?;
        if Kind::decode(w[0])? != Kind::List {
            return corrupt(format!("{l:#x}: not a list header"));
        }
        let h = Header {
            len: w[1],
            head: w[2],
            tail: w[3],
            segs: w[4],
        };
        if (h.head == 0) != (h.tail == 0)
            || h.len > h.segs.saturating_mul(LIST_SEGMENT_SLOTS)
            || h.head > store::OFFSET_MAX
            || h.tail > store::OFFSET_MAX
        {
            return corrupt(format!("{l:#x}: list header {h:?}"));
        }
        Ok(h)
    }
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    off: u64,
    prev: u64,
    next: u64,
    lo: u64,
    hi: u64,
}

impl Segment {
    fn read(tx: &Mem<'_, '_>, off: u64) -> Result<Segment> {
        let [prev, next, lo, hi] = store::words::<4>(tx, off)?;
        if lo > hi
            || hi > LIST_SEGMENT_SLOTS
            || prev > store::OFFSET_MAX
            || next > store::OFFSET_MAX
        {
            return corrupt(format!("list segment {off:#x}: slots {lo}..{hi}"));
        }
        Ok(Segment {
            off,
            prev,
            next,
            lo,
            hi,
        })
    }

    fn slot(&self, i: u64) -> u64 {
        self.off + 32 + i * 8
    }

    fn used(&self) -> u64 {
        self.hi - self.lo
    }
}

/// Creates an empty list.
pub fn create(tx: &Mem<'_, '_>) -> Result<u64> {
    let l = store::alloc(tx, HEADER_BYTES)?;
    store::set_words(tx, l, &[Kind::List.word(), 0, 0, 0, 0, 0, 0, 0, 0, 0])?;
    Ok(l)
}

fn new_segment(tx: &Mem<'_, '_>, prev: u64, next: u64, at: u64) -> Result<u64> {
    let s = store::alloc(tx, SEGMENT_BYTES)?;
    store::set_words(tx, s, &[prev, next, at, at])?;
    Ok(s)
}

fn new_element(tx: &Mem<'_, '_>, value: &[u8]) -> Result<u64> {
    let e = store::alloc(tx, 8 + value.len() as u64)?;
    let mut image = Vec::with_capacity(8 + value.len());
    image.extend_from_slice(&(value.len() as u64).to_le_bytes());
    image.extend_from_slice(value);
    store::set_bytes(tx, e, &image)?;
    Ok(e)
}

fn element(tx: &Mem<'_, '_>, e: u64) -> Result<Vec<u8>> {
    let len = store::word(tx, e)?;
    store::bytes(tx, e + 8, len)
}

/// Pushes `value` at the left (head) or right (tail) end; returns the new length.
pub fn push(tx: &Mem<'_, '_>, l: u64, left: bool, value: &[u8]) -> Result<u64> {
    let mut h = Header::read(tx, l)?;
    let e = new_element(tx, value)?;
    if h.head == 0 {
        let s = new_segment(tx, 0, 0, LIST_SEGMENT_SLOTS / 2)?;
        h.head = s;
        h.tail = s;
        h.segs = 1;
        store::set_words(tx, l + HEAD, &[s, s, 1])?;
    }
    if left {
        let mut s = Segment::read(tx, h.head)?;
        if s.lo == 0 {
            let n = new_segment(tx, 0, s.off, LIST_SEGMENT_SLOTS)?;
            store::set_word(tx, s.off, n)?;
            store::set_words(tx, l + HEAD, &[n])?;
            if h.tail == s.off && h.segs == 0 {
                return corrupt("list with a segment but a segment count of 0");
            }
            store::set_word(tx, l + SEGS, h.segs.saturating_add(1))?;
            s = Segment::read(tx, n)?;
        }
        store::set_word(tx, s.slot(s.lo - 1), e)?;
        store::set_word(tx, s.off + 16, s.lo - 1)?;
    } else {
        let mut s = Segment::read(tx, h.tail)?;
        if s.hi == LIST_SEGMENT_SLOTS {
            let n = new_segment(tx, s.off, 0, 0)?;
            store::set_word(tx, s.off + 8, n)?;
            store::set_word(tx, l + TAIL, n)?;
            store::set_word(tx, l + SEGS, h.segs.saturating_add(1))?;
            s = Segment::read(tx, n)?;
        }
        store::set_word(tx, s.slot(s.hi), e)?;
        store::set_word(tx, s.off + 24, s.hi + 1)?;
    }
    store::set_word(tx, l + LEN, h.len.saturating_add(1))?;
    Ok(h.len.saturating_add(1))
}

/// Pops from the left or right end; None when empty. An emptied segment is freed; the last
/// segment stays (the caller deletes an emptied list).
pub fn pop(tx: &Mem<'_, '_>, l: u64, left: bool) -> Result<Option<Vec<u8>>> {
    let h = Header::read(tx, l)?;
    if h.len == 0 || h.head == 0 {
        return Ok(None);
    }
    let s = Segment::read(tx, if left { h.head } else { h.tail })?;
    if s.used() == 0 {
        return corrupt(format!("list {l:#x}: an empty end segment"));
    }
    let i = if left { s.lo } else { s.hi - 1 };
    let e = store::word(tx, s.slot(i))?;
    let value = element(tx, e)?;
    store::free(tx, e)?;
    if s.used() == 1 && h.segs > 1 {
        store::free(tx, s.off)?;
        if left {
            store::set_word(tx, s.next, 0)?;
            store::set_word(tx, l + HEAD, s.next)?;
        } else {
            store::set_word(tx, s.prev + 8, 0)?;
            store::set_word(tx, l + TAIL, s.prev)?;
        }
        store::set_word(tx, l + SEGS, h.segs - 1)?;
    } else if left {
        store::set_word(tx, s.off + 16, s.lo + 1)?;
    } else {
        store::set_word(tx, s.off + 24, s.hi - 1)?;
    }
    store::set_word(tx, l + LEN, h.len - 1)?;
    Ok(Some(value))
}

/// Elements `start..=stop` (already clamped to `0..len`).
pub fn range(tx: &Mem<'_, '_>, l: u64, start: u64, stop: u64) -> Result<Vec<Vec<u8>>> {
    let h = Header::read(tx, l)?;
    let mut out = Vec::new();
    if start > stop || stop >= h.len {
        return Ok(out);
    }
    let mut index = 0u64;
    let mut at = h.head;
    let mut segs = 0;
    while at != 0 && index <= stop {
        let s = Segment::read(tx, at)?;
        let end = index + s.used();
        if end > start {
            for i in s.lo..s.hi {
                let k = index + (i - s.lo);
                if k >= start && k <= stop {
                    out.push(element(tx, store::word(tx, s.slot(i))?)?);
                }
            }
        }
        index = end;
        at = s.next;
        segs += 1;
        if segs > h.segs.min(tx.objects_max(SEGMENT_BYTES)) {
            return corrupt(format!("list {l:#x}: more segments than counted"));
        }
    }
    Ok(out)
}

/// Frees up to `budget` allocations of the list, from its head; true once all is freed
/// (header included).
pub fn destroy_step(tx: &Mem<'_, '_>, l: u64, budget: &mut u64) -> Result<bool> {
    let h = Header::read(tx, l)?;
    let mut at = h.head;
    let mut segs = h.segs;
    let mut walked = 0u64;
    while at != 0 {
        walked += 1;
        if walked > tx.objects_max(SEGMENT_BYTES) {
            return corrupt(format!("list {l:#x}: a cycle in its segments"));
        }
        let s = Segment::read(tx, at)?;
        if *budget < s.used() + 1 {
            // The header now describes the rest (its length is no longer counted).
            store::set_words(tx, l + LEN, &[0, at, h.tail, segs])?;
            return Ok(false);
        }
        for i in s.lo..s.hi {
            store::free(tx, store::word(tx, s.slot(i))?)?;
        }
        store::free(tx, at)?;
        *budget -= s.used() + 1;
        at = s.next;
        segs = segs.saturating_sub(1);
    }
    store::free(tx, l)?;
    *budget = budget.saturating_sub(1);
    Ok(true)
}

/// Checks the segment chain against the header; returns the length.
pub fn check(tx: &Mem<'_, '_>, l: u64) -> Result<u64> {
    let h = Header::read(tx, l)?;
    let (mut n, mut segs, mut at, mut prev) = (0, 0, h.head, 0);
    while at != 0 {
        let s = Segment::read(tx, at)?;
        if s.prev != prev || (s.used() == 0 && h.segs > 1) {
            return corrupt(format!(
                "list {l:#x}: segment {at:#x} badly linked or empty"
            ));
        }
        n += s.used();
        segs += 1;
        if segs > h.segs.min(tx.objects_max(SEGMENT_BYTES)) {
            return corrupt(format!("list {l:#x}: more segments than counted"));
        }
        prev = at;
        at = s.next;
    }
    if n != h.len || segs != h.segs || prev != h.tail {
        return corrupt(format!("list {l:#x}: header {h:?}, found {n} elements"));
    }
    Ok(n)
}

/// The element offsets of the list, head to tail.
pub fn elements(tx: &Mem<'_, '_>, l: u64) -> Result<Vec<u64>> {
    let h = Header::read(tx, l)?;
    let mut out = Vec::with_capacity(h.len.min(1 << 20) as usize);
    let (mut at, mut segs) = (h.head, 0u64);
    while at != 0 {
        let s = Segment::read(tx, at)?;
        for i in s.lo..s.hi {
            out.push(store::word(tx, s.slot(i))?);
        }
        at = s.next;
        segs += 1;
        if segs > h.segs.min(tx.objects_max(SEGMENT_BYTES)) {
            return corrupt(format!("list {l:#x}: more segments than counted"));
        }
    }
    Ok(out)
}

/// The value of the element at offset `e`.
pub fn value(tx: &Mem<'_, '_>, e: u64) -> Result<Vec<u8>> {
    element(tx, e)
}

/// A new element holding `value`, for [`relayout`] or [`replace`].
pub fn new_value(tx: &Mem<'_, '_>, value: &[u8]) -> Result<u64> {
    new_element(tx, value)
}

/// Replaces the element at `index` (in `0..len`) with the element `e`; returns the old
/// element's offset (the caller frees it). One logged word.
pub fn replace(tx: &Mem<'_, '_>, l: u64, index: u64, e: u64) -> Result<u64> {
    let h = Header::read(tx, l)?;
    let (mut at, mut first, mut segs) = (h.head, 0u64, 0u64);
    while at != 0 {
        let s = Segment::read(tx, at)?;
        if index < first + s.used() {
            let slot = s.slot(s.lo + (index - first));
            let old = store::word(tx, slot)?;
            store::set_word(tx, slot, e)?;
            return Ok(old);
        }
        first += s.used();
        at = s.next;
        segs += 1;
        if segs > h.segs.min(tx.objects_max(SEGMENT_BYTES)) {
            return corrupt(format!("list {l:#x}: more segments than counted"));
        }
    }
    corrupt(format!(
        "list {l:#x}: index {index} past its {first} elements"
    ))
}

/// Makes the list hold exactly the elements `order` (offsets of existing or new elements,
/// head to tail): the old segments are freed and new, full ones written (fresh allocations:
/// unlogged). Elements dropped from the list are the caller's to free. LREM and LINSERT
/// use it: O(n) like theirs in Redis, with one logged free per old segment.
pub fn relayout(tx: &Mem<'_, '_>, l: u64, order: &[u64]) -> Result<()> {
    let h = Header::read(tx, l)?;
    let (mut at, mut segs) = (h.head, 0u64);
    while at != 0 {
        let s = Segment::read(tx, at)?;
        store::free(tx, at)?;
        at = s.next;
        segs += 1;
        if segs > h.segs.min(tx.objects_max(SEGMENT_BYTES)) {
            return corrupt(format!("list {l:#x}: more segments than counted"));
        }
    }
    let chunks: Vec<&[u64]> = order.chunks(LIST_SEGMENT_SLOTS as usize).collect();
    let mut offsets = Vec::with_capacity(chunks.len());
    for _ in &chunks {
        offsets.push(store::alloc(tx, SEGMENT_BYTES)?);
    }
    for (i, (chunk, &s)) in chunks.iter().zip(&offsets).enumerate() {
        let prev = if i == 0 { 0 } else { offsets[i - 1] };
        let next = offsets.get(i + 1).copied().unwrap_or(0);
        let mut image = vec![prev, next, 0, chunk.len() as u64];
        image.extend_from_slice(chunk);
        let mut bytes = Vec::with_capacity(image.len() * 8);
        store::words_to_bytes(&image, &mut bytes);
        store::set_bytes(tx, s, &bytes)?;
    }
    let head = offsets.first().copied().unwrap_or(0);
    let tail = offsets.last().copied().unwrap_or(0);
    store::set_words(
        tx,
        l + LEN,
        &[order.len() as u64, head, tail, offsets.len() as u64],
    )
}
