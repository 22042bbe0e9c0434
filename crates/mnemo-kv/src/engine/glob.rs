//! Glob patterns as Redis's KEYS, SCAN MATCH and CONFIG GET read them: `*`, `?`, `[set]`
//! (ranges `a-z`, negation `[^..]`, escapes), `\x` for a literal `x`. An unterminated `[`
//! ends the set at the end of the pattern, as Redis does.
//!
//! Matching is the classic star-backtracking walk: O(pattern * text) at worst, never
//! exponential.

/// Whether `text` matches `pattern`.
pub fn matches(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p < pattern.len() && pattern[p] == b'*' {
            while p < pattern.len() && pattern[p] == b'*' {
                p += 1;
            }
            if p == pattern.len() {
                return true;
            }
            star = Some((p, t));
            continue;
        }
        if t == text.len() && p == pattern.len() {
            return true;
        }
        if t < text.len() && p < pattern.len() {
            let (ok, next) = token(pattern, p, text[t]);
            if ok {
                p = next;
                t += 1;
                continue;
            }
        }
        match star {
            Some((sp, st)) if st < text.len() => {
                star = Some((sp, st + 1));
                p = sp;
                t = st + 1;
            }
            _ => return false,
        }
    }
}

/// Matches one pattern token at `p` against byte `c`: (matched, index after the token).
fn token(pattern: &[u8], p: usize, c: u8) -> (bool, usize) {
    match pattern[p] {
        b'?' => (true, p + 1),
        b'\\' if p + 1 < pattern.len() => (pattern[p + 1] == c, p + 2),
        b'[' => set(pattern, p + 1, c),
        literal => (literal == c, p + 1),
    }
}

fn set(pattern: &[u8], mut p: usize, c: u8) -> (bool, usize) {
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let mut matched = false;
    while p < pattern.len() && pattern[p] != b']' {
        if pattern[p] == b'\\' && p + 1 < pattern.len() {
            matched |= pattern[p + 1] == c;
            p += 2;
        } else if p + 2 < pattern.len() && pattern[p + 1] == b'-' {
            let (mut lo, mut hi) = (pattern[p], pattern[p + 2]);
            if lo > hi {
                std::mem::swap(&mut lo, &mut hi);
            }
            matched |= (lo..=hi).contains(&c);
            p += 3;
        } else {
            matched |= pattern[p] == c;
            p += 1;
        }
    }
    // Skip the closing bracket if there is one.
    let next = if p < pattern.len() { p + 1 } else { p };
    (matched != negate, next)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_rules() {
        assert!(matches(b"*", b""));
        assert!(matches(b"*", b"anything"));
        assert!(matches(b"h?llo", b"hello"));
        assert!(!matches(b"h?llo", b"hllo"));
        assert!(matches(b"h*llo", b"heeeello"));
        assert!(matches(b"h[ae]llo", b"hallo"));
        assert!(!matches(b"h[ae]llo", b"hillo"));
        assert!(matches(b"h[^e]llo", b"hallo"));
        assert!(!matches(b"h[^e]llo", b"hello"));
        assert!(matches(b"h[a-b]llo", b"hbllo"));
        assert!(matches(b"h[b-a]llo", b"hallo"));
        assert!(matches(b"h\\*llo", b"h*llo"));
        assert!(!matches(b"h\\*llo", b"hello"));
        assert!(matches(b"key:*:x", b"key:1:2:x"));
        assert!(!matches(b"key:*:x", b"key:1:2:y"));
        assert!(matches(b"[abc", b"b"));
        assert!(matches(b"a*b*c*d", b"aXbYcZd"));
        assert!(!matches(b"a*b*c*d*e", &[b'a'; 60]));
        assert!(matches(b"", b""));
        assert!(!matches(b"", b"a"));
    }
}
