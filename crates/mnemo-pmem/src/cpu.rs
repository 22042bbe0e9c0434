//! Persistence primitives: flush a range of cache lines, fence, copy with non-temporal stores;
//! and the other instructions the layers above reach for on their hot paths (CRC-32C of a few
//! words, `prefetchw`), so that every intrinsic and its detection live in one place.
//!
//! The flush instruction is chosen once per process ([`choice`]) from CPUID, best first:
//! `clwb` (writes the line back and keeps it cached: on this machine a reload costs 9 ns
//! instead of 80-100 ns after `clflushopt`), `clflushopt`, then `clflush`. `clwb` and
//! `clflushopt` are weakly ordered and need an `sfence` before the data may be relied upon;
//! `clflush` is ordered with respect to stores, but mnemo fences anyway so one code path fits
//! all three.
//!
//! Environment overrides, read once at the first use (PMDK has the same knobs):
//!
//! | variable | effect |
//! |---|---|
//! | `MNEMO_FLUSH=auto\|clwb\|clflushopt\|clflush\|none` | force a flush instruction (`none`: caches are persistent, eADR) |
//! | `MNEMO_NO_FLUSH=1` | same as `MNEMO_FLUSH=none` |
//! | `MNEMO_NO_MOVNT=1` | never use non-temporal stores for copies |
//! | `MNEMO_MOVNT_THRESHOLD=N` | copies of at least N bytes use non-temporal stores (default 256) |
//!
//! A forced instruction the CPU lacks is refused with a warning (executing it would kill the
//! process with SIGILL) and the best available one is used.
#![allow(unsafe_code)]

use std::sync::OnceLock;

use crate::limits::{CACHE_LINE, MOVNT_THRESHOLD_DEFAULT};

/// A cache-line flush instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushKind {
    /// `clwb`: write back, keep the line cached.
    Clwb,
    /// `clflushopt`: write back and evict, weakly ordered.
    Clflushopt,
    /// `clflush`: write back and evict, ordered.
    Clflush,
    /// No flush: the platform's caches are in the persistence domain (eADR), or the caller
    /// asked for none.
    None,
}

impl FlushKind {
    /// The instruction's name as users write it.
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::Clflushopt => "clflushopt",
            FlushKind::Clflush => "clflush",
            FlushKind::None => "none",
        }
    }

    fn parse(text: &str) -> Option<Option<FlushKind>> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Some(None),
            "clwb" => Some(Some(FlushKind::Clwb)),
            "clflushopt" => Some(Some(FlushKind::Clflushopt)),
            "clflush" => Some(Some(FlushKind::Clflush)),
            "none" | "off" => Some(Some(FlushKind::None)),
            _ => None,
        }
    }
}

/// What the CPU offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CpuFeatures {
    /// `clwb` is available.
    pub clwb: bool,
    /// `clflushopt` is available.
    pub clflushopt: bool,
    /// `clflush` is available.
    pub clflush: bool,
}

/// The persistence choices in force for this process.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Choice {
    /// Flush instruction in use.
    pub flush: FlushKind,
    /// Copies of at least this many bytes use non-temporal stores; `None`: never.
    pub movnt_threshold: Option<usize>,
    /// What the CPU offers.
    pub features: CpuFeatures,
    /// Why this choice was made (CPUID or which environment variable).
    pub reason: String,
}

/// Detect what the CPU offers (CPUID leaf 1 EDX bit 19, leaf 7 EBX bits 23 and 24).
pub fn detect() -> CpuFeatures {
    #[cfg(target_arch = "x86_64")]
    {
        // CPUID exists on every x86_64 processor; leaf 7 is queried only when the maximum
        // standard leaf reported by leaf 0 covers it.
        let leaf0 = std::arch::x86_64::__cpuid(0);
        let leaf1 = std::arch::x86_64::__cpuid(1);
        let leaf7_ebx = if leaf0.eax >= 7 {
            std::arch::x86_64::__cpuid_count(7, 0).ebx
        } else {
            0
        };
        CpuFeatures {
            clwb: leaf7_ebx & (1 << 24) != 0,
            clflushopt: leaf7_ebx & (1 << 23) != 0,
            clflush: leaf1.edx & (1 << 19) != 0,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        CpuFeatures {
            clwb: false,
            clflushopt: false,
            clflush: false,
        }
    }
}

fn best(features: CpuFeatures) -> FlushKind {
    if features.clwb {
        FlushKind::Clwb
    } else if features.clflushopt {
        FlushKind::Clflushopt
    } else if features.clflush {
        FlushKind::Clflush
    } else {
        FlushKind::None
    }
}

fn supported(features: CpuFeatures, kind: FlushKind) -> bool {
    match kind {
        FlushKind::Clwb => features.clwb,
        FlushKind::Clflushopt => features.clflushopt,
        FlushKind::Clflush => features.clflush,
        FlushKind::None => true,
    }
}

/// Decide from the CPU's features and the environment (a pure function, for tests).
pub fn decide(features: CpuFeatures, env: &dyn Fn(&str) -> Option<String>) -> Choice {
    let mut reason = String::from("CPUID");
    let mut flush = best(features);
    let truthy =
        |v: Option<String>| v.is_some_and(|v| v.trim() == "1" || v.eq_ignore_ascii_case("true"));
    if truthy(env("MNEMO_NO_FLUSH")) {
        flush = FlushKind::None;
        reason = "MNEMO_NO_FLUSH=1".into();
    } else if let Some(text) = env("MNEMO_FLUSH") {
        match FlushKind::parse(&text) {
            Some(None) => {}
            Some(Some(kind)) if supported(features, kind) => {
                flush = kind;
                reason = format!("MNEMO_FLUSH={text}");
            }
            Some(Some(kind)) => {
                tracing::warn!(
                    "MNEMO_FLUSH={text}: this CPU has no {} instruction; using {} instead",
                    kind.name(),
                    flush.name()
                );
                reason = format!("CPUID (MNEMO_FLUSH={text} unsupported by this CPU)");
            }
            None => {
                tracing::warn!(
                    "MNEMO_FLUSH={text:?} is not one of auto, clwb, clflushopt, clflush, none; using {}",
                    flush.name()
                );
                reason = format!("CPUID (MNEMO_FLUSH={text:?} not understood)");
            }
        }
    }
    let mut movnt_threshold = Some(MOVNT_THRESHOLD_DEFAULT);
    if truthy(env("MNEMO_NO_MOVNT")) {
        movnt_threshold = None;
    } else if let Some(text) = env("MNEMO_MOVNT_THRESHOLD") {
        match text.trim().parse::<usize>() {
            Ok(n) => movnt_threshold = Some(n),
            Err(_) => tracing::warn!(
                "MNEMO_MOVNT_THRESHOLD={text:?} is not a byte count; using {MOVNT_THRESHOLD_DEFAULT}"
            ),
        }
    }
    Choice {
        flush,
        movnt_threshold,
        features,
        reason,
    }
}

static CHOICE: OnceLock<Choice> = OnceLock::new();

/// The persistence choices of this process, decided at the first call.
pub fn choice() -> &'static Choice {
    CHOICE.get_or_init(|| decide(detect(), &|name| std::env::var(name).ok()))
}

/// Write back every cache line that overlaps `[addr, addr + len)` with `kind`. Does not fence.
///
/// # Safety
/// The range must lie within memory mapped in this process (flush instructions fault on
/// unmapped addresses like a load would), and `kind` must be supported by the CPU.
#[inline]
pub unsafe fn flush_with(kind: FlushKind, addr: *const u8, len: usize) {
    if len == 0 || kind == FlushKind::None {
        return;
    }
    let line = CACHE_LINE as usize;
    let start = (addr as usize) & !(line - 1);
    let end = addr as usize + len;
    let mut p = start;
    while p < end {
        // SAFETY: the caller guarantees the range is mapped and the instruction supported.
        unsafe { flush_line(kind, p as *const u8) };
        p += line;
    }
}

#[inline(always)]
unsafe fn flush_line(kind: FlushKind, p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: forwarded from `flush_with`: `p` is mapped and the instruction exists.
    unsafe {
        match kind {
            FlushKind::Clwb => {
                std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
            FlushKind::Clflushopt => {
                std::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags))
            }
            FlushKind::Clflush => std::arch::x86_64::_mm_clflush(p),
            FlushKind::None => {}
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kind, p);
    }
}

/// Flush with the process's chosen instruction.
///
/// # Safety
/// As [`flush_with`]: the range must be mapped.
#[inline]
pub unsafe fn flush(addr: *const u8, len: usize) {
    // SAFETY: the chosen kind is always supported; the caller guarantees the mapping.
    unsafe { flush_with(choice().flush, addr, len) }
}

/// Store fence: orders all earlier flushes and non-temporal stores before later stores.
#[inline]
pub fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no operands and no preconditions on x86_64 (SSE is baseline).
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Copy `len` bytes to pool memory and leave them on their way to media: non-temporal
/// stores for the aligned middle (they bypass the cache, so need no flush), ordinary stores
/// plus a flush for the unaligned edges. The caller must [`fence`] before relying on it.
///
/// # Safety
/// `dst..dst+len` must be mapped writable memory and `src..src+len` readable; they must not
/// overlap.
pub unsafe fn copy_nodrain(dst: *mut u8, src: *const u8, len: usize) {
    let choice = choice();
    let use_nt = choice.movnt_threshold.is_some_and(|t| len >= t) && cfg!(target_arch = "x86_64");
    if !use_nt {
        // SAFETY: caller guarantees both ranges and that they do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, len);
            flush_with(choice.flush, dst, len);
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as above; the NT loop touches only dst..dst+len in 16-byte aligned chunks.
    unsafe {
        copy_nt(dst, src, len, choice.flush)
    };
}

/// Copy with non-temporal stores whatever the length (edges with ordinary stores flushed
/// with `kind`). The caller must [`fence`] before relying on it. Benchmarks compare it with
/// store + flush; the library picks between them in [`copy_nodrain`].
///
/// # Safety
/// As [`copy_nodrain`]; `kind` must be supported by the CPU.
#[cfg(target_arch = "x86_64")]
pub unsafe fn copy_nt(dst: *mut u8, src: *const u8, len: usize, kind: FlushKind) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128, _mm_stream_si64};
    // Every aligned 8-byte word of the destination is written by one store (movnti or one
    // half of a 16-byte movntdq), so 8-byte atomicity holds for it, as torn-bit logs need.
    // Only bytes outside aligned words (an unaligned head or tail) use ordinary stores,
    // which are then flushed.
    let head = dst.align_offset(8).min(len);
    // SAFETY: all pointer arithmetic stays within the caller's ranges; the stream stores
    // write aligned destinations (8 or 16 bytes as their alignment requires).
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, head);
        flush_with(kind, dst, head);
        let mut off = head;
        while off + 8 <= len && (dst as usize + off) % 16 != 0 {
            let word = (src.add(off) as *const i64).read_unaligned();
            _mm_stream_si64(dst.add(off) as *mut i64, word);
            off += 8;
        }
        while off + 16 <= len {
            let v = _mm_loadu_si128(src.add(off) as *const __m128i);
            _mm_stream_si128(dst.add(off) as *mut __m128i, v);
            off += 16;
        }
        while off + 8 <= len {
            let word = (src.add(off) as *const i64).read_unaligned();
            _mm_stream_si64(dst.add(off) as *mut i64, word);
            off += 8;
        }
        let tail = len - off;
        std::ptr::copy_nonoverlapping(src.add(off), dst.add(off), tail);
        flush_with(kind, dst.add(off), tail);
    }
}

/// Longest input [`crc32c_words`] checksums one CRC-32C instruction per word (512 B): beyond
/// it the `crc32c` crate's three-way split pays off.
pub const CRC_WORDS_MAX: usize = 512;

/// CRC-32C of `bytes`, the value of `crc32c::crc32c`. Most redo records are a few words long,
/// where that crate's three-way split and tail handling cost several times the checksum
/// itself (~150 instructions for a 56-byte record against ~25): a whole number of words up to
/// [`CRC_WORDS_MAX`] bytes is checksummed with one CRC-32C instruction per word.
#[inline]
pub fn crc32c_words(bytes: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if bytes.len() % 8 == 0 && bytes.len() <= CRC_WORDS_MAX && has_sse42() {
        // SAFETY: the CPU has SSE4.2 (checked just above).
        return unsafe { crc32c_words_sse42(bytes) };
    }
    crc32c::crc32c(bytes)
}

/// Whether the CPU has the CRC-32C instruction (std caches the answer).
#[cfg(target_arch = "x86_64")]
#[inline]
fn has_sse42() -> bool {
    std::is_x86_feature_detected!("sse4.2")
}

/// [`crc32c_words`] with the CRC-32C instruction, `bytes` a whole number of words.
///
/// # Safety
/// The CPU must support SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn crc32c_words_sse42(bytes: &[u8]) -> u32 {
    use std::arch::x86_64::_mm_crc32_u64;
    // CRC-32C of bytes = !(the instruction's chain from !0), each word taken little-endian.
    let mut crc = u64::from(u32::MAX);
    for chunk in bytes.chunks_exact(8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(w));
    }
    !(crc as u32)
}

/// Whether the CPU has `prefetchw` (CPUID 0x8000_0001, ECX bit 8: AMD's 3DNowPrefetch,
/// Intel's PRFCHW); std has no detection for it. Callers ask once and keep the answer for
/// [`prefetch_for_write`].
pub fn cpu_has_prefetchw() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // SAFETY: CPUID exists on every x86_64 CPU (the intrinsic is `unsafe` on older
        // toolchains only).
        #[allow(unused_unsafe)]
        let (max, ecx) = unsafe { (__cpuid(0x8000_0000).eax, __cpuid(0x8000_0001).ecx) };
        max >= 0x8000_0001 && ecx & (1 << 8) != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Ask for `word`'s cache line in exclusive state without waiting for it (`prefetchw`), on a
/// CPU that has the instruction (`has`, from [`cpu_has_prefetchw`]): a later locked
/// instruction on the word then finds the line here instead of stalling for its transfer.
#[inline]
pub fn prefetch_for_write(has: bool, word: &std::sync::atomic::AtomicU64) {
    #[cfg(target_arch = "x86_64")]
    if has {
        // SAFETY: a prefetch hint never faults and changes no memory; the CPU has it.
        unsafe {
            std::arch::asm!(
                "prefetchw [{0}]",
                in(reg) word.as_ptr(),
                options(nostack, preserves_flags, readonly)
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (has, word);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    const ALL: CpuFeatures = CpuFeatures {
        clwb: true,
        clflushopt: true,
        clflush: true,
    };
    const OLD: CpuFeatures = CpuFeatures {
        clwb: false,
        clflushopt: false,
        clflush: true,
    };

    #[test]
    fn best_instruction_first() {
        assert_eq!(decide(ALL, &env_of(&[])).flush, FlushKind::Clwb);
        assert_eq!(decide(OLD, &env_of(&[])).flush, FlushKind::Clflush);
        let none = CpuFeatures {
            clwb: false,
            clflushopt: true,
            clflush: true,
        };
        assert_eq!(decide(none, &env_of(&[])).flush, FlushKind::Clflushopt);
    }

    #[test]
    fn overrides() {
        assert_eq!(
            decide(ALL, &env_of(&[("MNEMO_FLUSH", "clflush")])).flush,
            FlushKind::Clflush
        );
        assert_eq!(
            decide(ALL, &env_of(&[("MNEMO_NO_FLUSH", "1")])).flush,
            FlushKind::None
        );
        assert_eq!(
            decide(ALL, &env_of(&[("MNEMO_FLUSH", "none")])).flush,
            FlushKind::None
        );
        // An instruction the CPU lacks is refused, not executed.
        assert_eq!(
            decide(OLD, &env_of(&[("MNEMO_FLUSH", "clwb")])).flush,
            FlushKind::Clflush
        );
        assert_eq!(
            decide(ALL, &env_of(&[("MNEMO_FLUSH", "bogus")])).flush,
            FlushKind::Clwb
        );
        assert_eq!(
            decide(ALL, &env_of(&[("MNEMO_NO_MOVNT", "1")])).movnt_threshold,
            None
        );
        assert_eq!(
            decide(ALL, &env_of(&[("MNEMO_MOVNT_THRESHOLD", "4096")])).movnt_threshold,
            Some(4096)
        );
    }

    #[test]
    fn every_supported_instruction_runs() {
        let features = detect();
        let mut buf = vec![7u8; 4096 + 3];
        for kind in [
            FlushKind::Clwb,
            FlushKind::Clflushopt,
            FlushKind::Clflush,
            FlushKind::None,
        ] {
            if supported(features, kind) {
                buf[5] = 9;
                // SAFETY: buf is a live allocation and the kind is supported.
                unsafe { flush_with(kind, buf.as_ptr().add(1), buf.len() - 1) };
                fence();
                assert_eq!(buf[5], 9);
            }
        }
    }

    #[test]
    fn copies_are_exact_at_every_alignment() {
        let src: Vec<u8> = (0..2048u32).map(|i| (i * 7 + 3) as u8).collect();
        for shift in 0..17 {
            for len in [0, 1, 15, 16, 17, 255, 256, 257, 1000, 2000] {
                let mut dst = vec![0u8; 2100];
                // SAFETY: dst has room for shift + len bytes; src has len bytes; distinct.
                unsafe { copy_nodrain(dst.as_mut_ptr().add(shift), src.as_ptr(), len) };
                fence();
                assert_eq!(
                    &dst[shift..shift + len],
                    &src[..len],
                    "shift {shift} len {len}"
                );
                assert!(dst[..shift].iter().all(|&b| b == 0));
                assert!(dst[shift + len..].iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn word_crc_matches_the_crate() {
        let mut bytes = Vec::new();
        for i in 0..CRC_WORDS_MAX + 24 {
            assert_eq!(crc32c_words(&bytes), crc32c::crc32c(&bytes), "{i} bytes");
            bytes.push((i as u8).wrapping_mul(151).wrapping_add(7));
        }
    }

    #[test]
    fn prefetch_for_write_changes_nothing() {
        let word = std::sync::atomic::AtomicU64::new(42);
        prefetch_for_write(cpu_has_prefetchw(), &word);
        prefetch_for_write(false, &word);
        assert_eq!(word.load(std::sync::atomic::Ordering::Relaxed), 42);
    }
}
