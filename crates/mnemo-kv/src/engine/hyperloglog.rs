//! HyperLogLog (PFADD, PFCOUNT, PFMERGE, PFDEBUG, PFSELFTEST): Redis 7.0's `hyperloglog.c`
//! byte for byte, so that a key's string (GET, DUMP) is the one Redis would hold and the
//! estimates are Redis's.
//!
//! The value is a string: a 16-byte header (`HYLL`, encoding 0 dense / 1 sparse, 3 unused
//! bytes, the cached cardinality as 8 little-endian bytes whose top bit marks it stale),
//! then 16384 registers of 6 bits. Dense: 12288 bytes, registers packed from the least
//! significant bit. Sparse: run-length opcodes (`00xxxxxx` ZERO of 1-64 registers,
//! `01xxxxxx yyyyyyyy` XZERO of 1-16384, `1vvvvvxx` VAL of 1-4 registers of value 1-32),
//! turned dense when a register needs more than 32 or the string would pass
//! `hll-sparse-max-bytes` (Redis's default, 3000). An element sets register `h & 16383` of
//! its 64-bit MurmurHash64A (seed 0xadc83b19) to the position of the first set bit in the
//! remaining 50 bits; the count is Ertl's estimator over the registers' histogram.
//! Every string is checked before use (magic, encoding, length, opcodes covering exactly
//! 16384 registers): a damaged one gets Redis's INVALIDOBJ error, never a panic.

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::CommandSpec;
use mnemo_resp::{CommandId as Id, Reply};

use super::commands::{err, err_owned, wrongtype};
use super::dict::{tag, Found};
use super::keyspace::{typed, Ctx, WrongType};
use super::store::Result;

const P: u32 = 14;
const REGISTERS: usize = 1 << P;
const Q: u32 = 64 - P;
const BITS: usize = 6;
const REGISTER_MAX: u8 = 63;
const HEADER: usize = 16;
const DENSE_SIZE: usize = HEADER + (REGISTERS * BITS).div_ceil(8);
const SPARSE: u8 = 1;
const DENSE: u8 = 0;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;
/// Redis's `hll-sparse-max-bytes` default: a sparse string that would grow past it turns
/// dense. (CONFIG SET of it is accepted and reported, but this default is kept.)
const SPARSE_MAX_BYTES: usize = 3000;
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

/// Redis's MurmurHash64A, little-endian.
fn murmur64a(key: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for chunk in &mut chunks {
        let mut k = u64::from_le_bytes([
            chunk[0], chunk[1], chunk[2], chunk[3], chunk[4], chunk[5], chunk[6], chunk[7],
        ]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &byte) in tail.iter().enumerate() {
            h ^= u64::from(byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element sets and the value it proposes (`hllPatLen`).
fn pattern(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element, 0xadc8_3b19);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

fn dense_get(registers: &[u8], index: usize) -> u8 {
    let byte = index * BITS / 8;
    let shift = (index * BITS) & 7;
    let b0 = u16::from(registers.get(byte).copied().unwrap_or(0));
    let b1 = u16::from(registers.get(byte + 1).copied().unwrap_or(0));
    (((b0 | (b1 << 8)) >> shift) as u8) & REGISTER_MAX
}

fn dense_set(registers: &mut [u8], index: usize, value: u8) {
    let byte = index * BITS / 8;
    let shift = (index * BITS) & 7;
    let word = (u16::from(value & REGISTER_MAX)) << shift;
    let mask = u16::from(REGISTER_MAX) << shift;
    if let Some(b) = registers.get_mut(byte) {
        *b = (*b & !(mask as u8)) | word as u8;
    }
    if let Some(b) = registers.get_mut(byte + 1) {
        *b = (*b & !((mask >> 8) as u8)) | (word >> 8) as u8;
    }
}

/// One sparse opcode at the start of `ops`: (registers covered, value, bytes).
fn opcode(ops: &[u8]) -> Option<(usize, u8, usize)> {
    let first = *ops.first()?;
    Some(match first >> 6 {
        0 => (usize::from(first & 0x3f) + 1, 0, 1),
        1 => {
            let second = *ops.get(1)?;
            (
                (usize::from(first & 0x3f) << 8 | usize::from(second)) + 1,
                0,
                2,
            )
        }
        _ => (usize::from(first & 0x3) + 1, ((first >> 2) & 0x1f) + 1, 1),
    })
}

fn zero_op(out: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        let l = len - 1;
        out.push(0x40 | (l >> 8) as u8);
        out.push(l as u8);
    } else {
        out.push((len - 1) as u8);
    }
}

fn val_op(value: u8, len: usize) -> u8 {
    0x80 | ((value - 1) << 2) | (len - 1) as u8
}

/// A new, empty sparse HLL (XZERO opcodes over every register), as `createHLLObject`.
fn empty() -> Vec<u8> {
    let mut hll = b"HYLL".to_vec();
    hll.push(SPARSE);
    hll.resize(HEADER, 0);
    let mut left = REGISTERS;
    while left > 0 {
        let run = left.min(XZERO_MAX_LEN);
        zero_op(&mut hll, run);
        left -= run;
    }
    hll
}

fn is_hll(value: &[u8]) -> bool {
    value.len() >= HEADER
        && value.starts_with(b"HYLL")
        && value[4] <= SPARSE
        && (value[4] != DENSE || value.len() == DENSE_SIZE)
}

fn invalidate(hll: &mut [u8]) {
    hll[15] |= 0x80;
}

/// The registers of a sparse HLL as a dense array; `None` if the opcodes do not cover
/// exactly 16384 registers.
fn sparse_registers(ops: &[u8]) -> Option<Vec<u8>> {
    let mut registers = vec![0u8; REGISTERS];
    let mut index = 0;
    let mut at = 0;
    while at < ops.len() {
        let (run, value, size) = opcode(&ops[at..])?;
        if index + run > REGISTERS {
            return None;
        }
        registers[index..index + run].fill(value);
        index += run;
        at += size;
    }
    (index == REGISTERS).then_some(registers)
}

/// Every register's value, whatever the encoding.
fn registers(hll: &[u8]) -> Option<Vec<u8>> {
    if hll[4] == SPARSE {
        sparse_registers(&hll[HEADER..])
    } else {
        Some(
            (0..REGISTERS)
                .map(|i| dense_get(&hll[HEADER..], i))
                .collect(),
        )
    }
}

/// `hllSparseToDense`: the header kept (magic, cached cardinality), the registers packed.
fn to_dense(hll: &mut Vec<u8>) -> Option<()> {
    if hll[4] == DENSE {
        return Some(());
    }
    let values = sparse_registers(&hll[HEADER..])?;
    let mut dense = hll[..HEADER].to_vec();
    dense[4] = DENSE;
    dense.resize(DENSE_SIZE, 0);
    for (i, &v) in values.iter().enumerate() {
        if v != 0 {
            dense_set(&mut dense[HEADER..], i, v);
        }
    }
    *hll = dense;
    Some(())
}

/// Sets register `index` to `count` if that raises it (`hllDenseSet` / `hllSparseSet`):
/// `Some(true)` if it changed, `None` for a damaged sparse string.
fn set(hll: &mut Vec<u8>, index: usize, count: u8) -> Option<bool> {
    if hll[4] == DENSE {
        if dense_get(&hll[HEADER..], index) >= count {
            return Some(false);
        }
        dense_set(&mut hll[HEADER..], index, count);
        return Some(true);
    }
    if count > VAL_MAX_VALUE {
        return promote(hll, index, count);
    }
    // Step 1: the opcode covering `index`, and the one before it.
    let mut at = HEADER;
    let mut first = 0;
    let mut prev = None;
    let (span, value, size) = loop {
        let (span, value, size) = opcode(hll.get(at..)?)?;
        if index < first + span {
            break (span, value, size);
        }
        prev = Some(at);
        at += size;
        first += span;
    };
    // Step 2: the cases that change one byte in place.
    if value > 0 {
        if value >= count {
            return Some(false);
        }
        if span == 1 {
            hll[at] = val_op(count, 1);
            merge(hll, prev);
            return Some(true);
        }
    }
    if value == 0 && size == 1 && span == 1 {
        hll[at] = val_op(count, 1);
        merge(hll, prev);
        return Some(true);
    }
    // Step 3: split the opcode around the register.
    let last = first + span - 1;
    let mut seq = Vec::with_capacity(5);
    if value == 0 {
        if index != first {
            zero_op(&mut seq, index - first);
        }
        seq.push(val_op(count, 1));
        if index != last {
            zero_op(&mut seq, last - index);
        }
    } else {
        if index != first {
            seq.push(val_op(value, index - first));
        }
        seq.push(val_op(count, 1));
        if index != last {
            seq.push(val_op(value, last - index));
        }
    }
    if seq.len() > size && hll.len() + seq.len() - size > SPARSE_MAX_BYTES {
        return promote(hll, index, count);
    }
    hll.splice(at..at + size, seq);
    merge(hll, prev);
    Some(true)
}

/// Step 4 of `hllSparseSet`: merges adjacent VAL opcodes of one value, scanning at most
/// five opcodes from the one before the change; then marks the cached count stale.
fn merge(hll: &mut Vec<u8>, prev: Option<usize>) {
    let mut at = prev.unwrap_or(HEADER);
    let mut scan = 5;
    while at < hll.len() && scan > 0 {
        scan -= 1;
        let op = hll[at];
        if op >> 6 == 1 {
            at += 2;
            continue;
        }
        if op >> 6 == 0 {
            at += 1;
            continue;
        }
        if let Some(&next) = hll.get(at + 1) {
            if next & 0x80 != 0 {
                let (v1, v2) = ((op >> 2) & 0x1f, (next >> 2) & 0x1f);
                let len = usize::from(op & 3) + usize::from(next & 3) + 2;
                if v1 == v2 && len <= VAL_MAX_LEN {
                    hll[at + 1] = val_op(v1 + 1, len);
                    hll.remove(at);
                    continue;
                }
            }
        }
        at += 1;
    }
    invalidate(hll);
}

fn promote(hll: &mut Vec<u8>, index: usize, count: u8) -> Option<bool> {
    to_dense(hll)?;
    dense_set(&mut hll[HEADER..], index, count);
    Some(true)
}

/// Ertl's estimator over the registers' histogram (`hllCount`).
fn count(registers: &[u8]) -> u64 {
    let mut histogram = [0u32; 64];
    for &r in registers {
        histogram[usize::from(r & 63)] += 1;
    }
    let m = REGISTERS as f64;
    let mut z = m * tau((m - f64::from(histogram[Q as usize + 1])) / m);
    for j in (1..=Q as usize).rev() {
        z += f64::from(histogram[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histogram[0]) / m);
    (ALPHA_INF * m * m / z).round() as u64
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if previous == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if previous == z {
            return z / 3.0;
        }
    }
}

/// A key's entry and its HLL string; `None` when the key is missing; the error reply when
/// it holds something else.
type Loaded = std::result::Result<Option<(Found, Vec<u8>)>, Reply>;

/// The HLL string of `key` for a command: `Ok(None)` if the key is missing, the error
/// reply if it holds something else.
fn load(ctx: &mut Ctx<'_, '_>, key: &[u8], write: bool) -> Result<Loaded> {
    let found = if write {
        ctx.lookup_write(key)?
    } else {
        ctx.lookup(key)?
    };
    let found = match typed(found, tag::STRING) {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(Ok(None)),
        Err(WrongType) => return Ok(Err(wrongtype())),
    };
    let value = found.entry.string(ctx.tx)?;
    if !is_hll(&value) {
        return Ok(Err(err(NOT_HLL)));
    }
    Ok(Ok(Some((found, value))))
}

/// PFADD, PFCOUNT, PFMERGE, PFDEBUG, PFSELFTEST.
pub fn run(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    match spec.id {
        Id::Pfadd => pfadd(ctx, a),
        Id::Pfcount => pfcount(ctx, a),
        Id::Pfmerge => pfmerge(ctx, a),
        Id::Pfdebug => pfdebug(ctx, a),
        _ => Ok(selftest()),
    }
}

fn pfadd(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let (found, mut hll, mut updated) = match load(ctx, &a[1], true)? {
        Err(reply) => return Ok(reply),
        Ok(Some((found, hll))) => (Some(found), hll, false),
        Ok(None) => (None, empty(), true),
    };
    for element in &a[2..] {
        let (index, value) = pattern(element);
        match set(&mut hll, index, value) {
            None => return Ok(err(CORRUPT)),
            Some(changed) => updated |= changed,
        }
    }
    if updated {
        invalidate(&mut hll);
        ctx.put_string(&a[1], found.as_ref(), &hll, None)?;
    }
    Ok(Reply::Integer(i64::from(updated)))
}

fn pfcount(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    if a.len() > 2 {
        let mut max = vec![0u8; REGISTERS];
        for key in &a[1..] {
            let hll = match load(ctx, key, false)? {
                Err(reply) => return Ok(reply),
                Ok(None) => continue,
                Ok(Some((_, hll))) => hll,
            };
            let Some(values) = registers(&hll) else {
                return Ok(err(CORRUPT));
            };
            for (m, v) in max.iter_mut().zip(values) {
                *m = (*m).max(v);
            }
        }
        return Ok(Reply::Integer(count(&max) as i64));
    }
    let (found, mut hll) = match load(ctx, &a[1], true)? {
        Err(reply) => return Ok(reply),
        Ok(None) => return Ok(Reply::Integer(0)),
        Ok(Some(loaded)) => loaded,
    };
    if hll[15] & 0x80 == 0 {
        let mut cached = [0u8; 8];
        cached.copy_from_slice(&hll[8..16]);
        return Ok(Reply::Integer(u64::from_le_bytes(cached) as i64));
    }
    let Some(values) = registers(&hll) else {
        return Ok(err(CORRUPT));
    };
    let card = count(&values);
    // The count is cached in the string, as Redis does (so PFCOUNT writes).
    hll[8..16].copy_from_slice(&card.to_le_bytes());
    ctx.put_string(&a[1], Some(&found), &hll, None)?;
    Ok(Reply::Integer(card as i64))
}

fn pfmerge(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let mut max = vec![0u8; REGISTERS];
    let mut dense = false;
    for key in &a[1..] {
        let hll = match load(ctx, key, false)? {
            Err(reply) => return Ok(reply),
            Ok(None) => continue,
            Ok(Some((_, hll))) => hll,
        };
        dense |= hll[4] == DENSE;
        let Some(values) = registers(&hll) else {
            return Ok(err(CORRUPT));
        };
        for (m, v) in max.iter_mut().zip(values) {
            *m = (*m).max(v);
        }
    }
    let (found, mut hll) = match load(ctx, &a[1], true)? {
        Err(reply) => return Ok(reply),
        Ok(Some((found, hll))) => (Some(found), hll),
        Ok(None) => (None, empty()),
    };
    if dense && to_dense(&mut hll).is_none() {
        return Ok(err(CORRUPT));
    }
    for (index, &value) in max.iter().enumerate() {
        if value != 0 && set(&mut hll, index, value).is_none() {
            return Ok(err(CORRUPT));
        }
    }
    invalidate(&mut hll);
    ctx.put_string(&a[1], found.as_ref(), &hll, None)?;
    Ok(Reply::ok())
}

fn pfdebug(ctx: &mut Ctx<'_, '_>, a: &[Bytes]) -> Result<Reply> {
    let (found, mut hll) = match load(ctx, &a[2], true)? {
        Err(reply) => return Ok(reply),
        Ok(None) => return Ok(err("ERR The specified key does not exist")),
        Ok(Some(loaded)) => loaded,
    };
    let sub = &a[1];
    if sub.eq_ignore_ascii_case(b"getreg") {
        if hll[4] == SPARSE {
            if to_dense(&mut hll).is_none() {
                return Ok(err(CORRUPT));
            }
            ctx.put_string(&a[2], Some(&found), &hll, None)?;
        }
        let values = (0..REGISTERS)
            .map(|i| Reply::Integer(i64::from(dense_get(&hll[HEADER..], i))))
            .collect();
        Ok(Reply::Array(values))
    } else if sub.eq_ignore_ascii_case(b"decode") {
        if hll[4] != SPARSE {
            return Ok(err("ERR HLL encoding is not sparse"));
        }
        let mut text = Vec::new();
        let mut at = HEADER;
        while at < hll.len() {
            let Some((run, value, size)) = opcode(&hll[at..]) else {
                break;
            };
            let word = match (value, size) {
                (0, 1) => format!("z:{run} "),
                (0, _) => format!("Z:{run} "),
                _ => format!("v:{value},{run} "),
            };
            text.extend_from_slice(word.as_bytes());
            at += size;
        }
        text.pop();
        Ok(Reply::Bulk(Bytes::from(text)))
    } else if sub.eq_ignore_ascii_case(b"encoding") {
        let name: &'static [u8] = if hll[4] == SPARSE {
            b"sparse"
        } else {
            b"dense"
        };
        Ok(Reply::Simple(Bytes::from_static(name)))
    } else if sub.eq_ignore_ascii_case(b"todense") {
        let converted = hll[4] == SPARSE;
        if converted {
            if to_dense(&mut hll).is_none() {
                return Ok(err(CORRUPT));
            }
            ctx.put_string(&a[2], Some(&found), &hll, None)?;
        }
        Ok(Reply::Integer(i64::from(converted)))
    } else {
        Ok(err_owned(format!(
            "ERR Unknown PFDEBUG subcommand '{}'",
            String::from_utf8_lossy(sub)
        )))
    }
}

/// PFSELFTEST: checks this module's invariants on a fixed sequence of elements (the dense
/// registers read back what was set; a sparse and a dense HLL fed the same elements hold
/// the same registers and count; the estimate stays within Redis's error bound).
fn selftest() -> Reply {
    let mut packed = vec![0u8; DENSE_SIZE - HEADER];
    for i in 0..REGISTERS {
        dense_set(&mut packed, i, (i % 64) as u8);
    }
    if (0..REGISTERS).any(|i| dense_get(&packed, i) != (i % 64) as u8) {
        return err("ERR TESTFAILED Register error");
    }
    let (mut sparse, mut dense) = (empty(), empty());
    if to_dense(&mut dense).is_none() {
        return err("ERR TESTFAILED empty HLL");
    }
    for n in 1..=20_000u32 {
        let (index, value) = pattern(format!("element:{n}").as_bytes());
        if set(&mut sparse, index, value).is_none() || set(&mut dense, index, value).is_none() {
            return err("ERR TESTFAILED set failed");
        }
        if n % 1000 == 0 {
            let (s, d) = (registers(&sparse), registers(&dense));
            if s.is_none() || s != d {
                return err("ERR TESTFAILED sparse and dense differ");
            }
            let estimate = count(&d.unwrap_or_default()) as f64;
            if (estimate - f64::from(n)).abs() > f64::from(n) * 0.05 {
                return err_owned(format!(
                    "ERR TESTFAILED too large error. real card = {n} approx = {estimate}"
                ));
            }
        }
    }
    Reply::ok()
}

const _: () = assert!(DENSE_SIZE == HEADER + 12288);

#[cfg(test)]
mod tests {
    use super::*;

    /// From redis-server 7.0: PFADD h a b c leaves this string.
    #[test]
    fn three_elements_as_redis() {
        let mut hll = empty();
        for element in [&b"a"[..], b"b", b"c"] {
            let (index, value) = pattern(element);
            assert_eq!(set(&mut hll, index, value), Some(true));
        }
        invalidate(&mut hll);
        let expected =
            b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80`\xf3\x80P\xb1\x84K\xfb\x80BZ";
        assert_eq!(hll, expected);
        assert_eq!(count(&registers(&hll).unwrap_or_default()), 3);
    }

    /// Damaged sparse strings (random opcodes after a valid header) never make a read or a
    /// write panic.
    #[test]
    fn random_sparse_strings_never_panic() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..5_000 {
            let mut hll = empty();
            hll.truncate(HEADER);
            for _ in 0..next() % 12 {
                hll.push(next() as u8);
            }
            let _ = registers(&hll);
            for _ in 0..4 {
                let index = (next() % REGISTERS as u64) as usize;
                let value = (next() % 63) as u8 + 1;
                if set(&mut hll, index, value).is_none() {
                    break;
                }
            }
            let _ = registers(&hll).map(|r| count(&r));
            let _ = to_dense(&mut hll);
        }
    }

    #[test]
    fn selftest_passes() {
        assert_eq!(selftest(), Reply::ok());
    }

    #[test]
    fn damaged_sparse_strings_are_refused() {
        let mut hll = empty();
        hll.pop();
        assert!(registers(&hll).is_none());
        let mut hll = empty();
        hll.push(0x00);
        assert!(registers(&hll).is_none());
        assert!(set(&mut hll, 16383, 1).is_none() || registers(&hll).is_none());
    }
}
