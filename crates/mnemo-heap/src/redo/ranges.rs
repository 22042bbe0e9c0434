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

/// Reduce `ranges` to at most `max` by merging neighbours (sorted first); a sync point names
/// at most `GMSYNC_RANGES_MAX` ranges.
pub fn cap_ranges(ranges: &mut Vec<ByteRange>, max: usize) {
    if ranges.len() <= max {
        return;
    }
    ranges.sort_by_key(|r| r.offset);
    while ranges.len() > max {
        let merged: Vec<ByteRange> = ranges
            .chunks(2)
            .map(|pair| {
                let start = pair[0].offset;
                let end = pair.iter().map(ByteRange::end).max().unwrap_or(start);
                ByteRange::new(start, end - start)
            })
            .collect();
        *ranges = merged;
    }
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
}
