//! Lists of byte ranges for sync points: merged as they grow, capped to what one may name.

use mnemo_pmem::ByteRange;

/// Append a range, merging it with the previous one when they touch the same cache lines.
pub fn push_range(ranges: &mut Vec<ByteRange>, offset: u64, len: u64) {
    if let Some(last) = ranges.last_mut() {
        let line = |x: u64| x / 64;
        let (last_first, last_end) = (line(last.offset), line(last.end().saturating_sub(1)));
        let (first, end) = (line(offset), line((offset + len).saturating_sub(1)));
        if first <= last_end + 1 && last_first <= end + 1 {
            let start = last.offset.min(offset);
            let end = last.end().max(offset + len);
            *last = ByteRange::new(start, end - start);
            return;
        }
    }
    ranges.push(ByteRange::new(offset, len));
}

/// Reduce `ranges` to at most `max` (a sync point names at most `GMSYNC_RANGES_MAX`
/// ranges): sorted, overlapping ones merged, then the neighbours with the *smallest gaps*
/// joined until `max` remain, so the bytes named beyond the ranges (the gaps now covered)
/// are as few as they can be. (Joining neighbours pairwise, the first version, covered
/// whatever lay between two of them: a batch of 800 SETs over random keys named 60 MB, the
/// gap between the pool's two areas, which the write-ahead policy then had to make durable
/// in place.)
pub fn cap_ranges(ranges: &mut Vec<ByteRange>, max: usize) {
    if ranges.len() <= max {
        return;
    }
    let max = max.max(1);
    ranges.sort_by_key(|r| r.offset);
    let mut merged: Vec<ByteRange> = Vec::with_capacity(ranges.len());
    for r in ranges.drain(..) {
        match merged.last_mut() {
            Some(last) if r.offset <= last.end() => {
                let end = last.end().max(r.end());
                *last = ByteRange::new(last.offset, end - last.offset);
            }
            _ => merged.push(r),
        }
    }
    if merged.len() > max {
        // Gap `i` lies between `merged[i]` and `merged[i + 1]`; join the smallest ones.
        let mut gaps: Vec<usize> = (0..merged.len() - 1).collect();
        gaps.sort_by_key(|&i| (merged[i + 1].offset - merged[i].end(), i));
        let mut join = vec![false; merged.len() - 1];
        for &i in &gaps[..merged.len() - max] {
            join[i] = true;
        }
        let mut out = Vec::with_capacity(max);
        let mut current = merged[0];
        for (i, next) in merged.iter().enumerate().skip(1) {
            if join[i - 1] {
                let end = current.end().max(next.end());
                current = ByteRange::new(current.offset, end - current.offset);
            } else {
                out.push(current);
                current = *next;
            }
        }
        out.push(current);
        merged = out;
    }
    *ranges = merged;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_cap() {
        let mut r = Vec::new();
        push_range(&mut r, 0, 8);
        push_range(&mut r, 8, 8);
        push_range(&mut r, 4096, 8);
        assert_eq!(r, vec![ByteRange::new(0, 16), ByteRange::new(4096, 8)]);
        let mut many: Vec<_> = (0..3000).map(|i| ByteRange::new(i * 1000, 8)).collect();
        cap_ranges(&mut many, 1024);
        assert!(many.len() <= 1024);
        assert_eq!(many[0].offset, 0);
        assert!(many.last().unwrap().end() >= 2999 * 1000 + 8);
    }

    /// Capping joins the closest neighbours and never the far ones: two clusters 60 MB apart
    /// stay two areas, and every byte named before is still named.
    #[test]
    fn capping_joins_the_smallest_gaps() {
        let far = 60 << 20;
        let mut ranges: Vec<ByteRange> = (0..600)
            .map(|i| ByteRange::new(4096 + i * 128, 16))
            .chain((0..600).map(|i| ByteRange::new(far + i * 128, 16)))
            .rev()
            .collect();
        let before = ranges.clone();
        cap_ranges(&mut ranges, 1024);
        assert_eq!(ranges.len(), 1024);
        let named: u64 = ranges.iter().map(|r| r.len).sum();
        assert!(named < 1 << 20, "{named} bytes named for 1200 x 16");
        assert!(
            ranges.windows(2).all(|w| w[0].end() < w[1].offset),
            "sorted, apart"
        );
        for r in &before {
            assert!(
                ranges
                    .iter()
                    .any(|c| c.offset <= r.offset && r.end() <= c.end()),
                "{r:?} no longer named"
            );
        }
        let mut one = before.clone();
        cap_ranges(&mut one, 1);
        assert_eq!(one, vec![ByteRange::new(4096, far + 599 * 128 + 16 - 4096)]);
    }
}
