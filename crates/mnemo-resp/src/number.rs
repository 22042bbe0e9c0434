//! Numbers as Redis reads and writes them.
//!
//! Redis is strict when it reads an integer (`string2ll`: no '+', no spaces, no leading
//! zeros, no "-0") and writes doubles with C's `%.17g`. Clients compare these texts byte for
//! byte (a ZSCORE of 1.1 is "1.1000000000000001" in Redis 7.0), so we reproduce both exactly.

use crate::limits::I64_TEXT_BYTES_MAX;

/// Parses `text` as a signed 64-bit integer with the rules of Redis's `string2ll`.
///
/// Accepted: an optional '-', then either the single digit "0" or a digit 1-9 followed by
/// digits, the value within `i64`. Rejected: empty text, '+', spaces anywhere, leading zeros
/// ("007"), "-0", text of 21 bytes or more, and anything out of range.
pub fn parse_i64(text: &[u8]) -> Option<i64> {
    if text.is_empty() || text.len() > I64_TEXT_BYTES_MAX {
        return None;
    }
    if text == b"0" {
        return Some(0);
    }
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut magnitude: u64 = 0;
    for &byte in digits {
        if !byte.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(byte - b'0'))?;
    }
    if negative {
        // i64::MIN has no positive counterpart: compare magnitudes in u64.
        if magnitude > i64::MIN.unsigned_abs() {
            return None;
        }
        Some(0i64.wrapping_sub_unsigned(magnitude))
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// Parses `text` as a double the way Redis 7.0 does for scores and increments
/// (`getDoubleFromObject`: `strtod` over the whole string).
///
/// Accepted: decimal notation with optional sign, fraction and exponent ("1", "-.5", "1e3",
/// "+2.5E-3"), and "inf" / "infinity" in any case with an optional sign. Rejected: empty
/// text, leading or trailing spaces, NaN, values that overflow to infinity or underflow to
/// zero from non-zero digits. One known divergence: C's hexadecimal floats ("0x1p3") are
/// rejected here.
pub fn parse_f64(text: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(text).ok()?;
    let first = text.as_bytes().first()?;
    if first.is_ascii_whitespace() {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    if value.is_nan() {
        return None;
    }
    let letters = text.trim_start_matches(['+', '-']);
    let literal_infinity =
        letters.eq_ignore_ascii_case("inf") || letters.eq_ignore_ascii_case("infinity");
    if value.is_infinite() && !literal_infinity {
        return None; // strtod reports ERANGE with HUGE_VAL: Redis rejects it.
    }
    if value == 0.0 && mantissa_has_nonzero_digit(letters) {
        return None; // strtod reports ERANGE with a zero result: Redis rejects it.
    }
    Some(value)
}

/// Parses a score bound as Redis 7.0's `zslParseRange` does (ZRANGEBYSCORE, ZRANGE ...
/// BYSCORE, after any `(`): C `strtod` that must consume the whole text, with no range
/// check, so it is laxer than [`parse_f64`]: the empty text is 0, leading white space is
/// skipped, `1e999` is infinity, and hexadecimal floats ("0x1p3") are read. NaN is refused.
pub fn parse_strtod(text: &[u8]) -> Option<f64> {
    if text.is_empty() {
        // strtod converts nothing and leaves the end pointer at the terminating NUL.
        return Some(0.0);
    }
    let text = std::str::from_utf8(text).ok()?;
    let body = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, unsigned) = match body.as_bytes().first()? {
        b'-' => (true, body.get(1..)?),
        b'+' => (false, body.get(1..)?),
        _ => (false, body),
    };
    let hex = unsigned
        .strip_prefix("0x")
        .or_else(|| unsigned.strip_prefix("0X"));
    let magnitude = match hex {
        Some(digits) => parse_hex_float(digits)?,
        None if unsigned.starts_with(['+', '-']) => return None,
        None => unsigned.parse::<f64>().ok()?,
    };
    if magnitude.is_nan() {
        return None;
    }
    Some(if negative { -magnitude } else { magnitude })
}

/// The digits of a C hexadecimal float after "0x": `h[.h][p[+-]d]`, at least one hex digit.
fn parse_hex_float(text: &str) -> Option<f64> {
    let (mantissa, exponent) = match text.find(['p', 'P']) {
        Some(at) => (text.get(..at)?, Some(text.get(at + 1..)?)),
        None => (text, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let mut value = 0.0f64;
    for c in whole.chars() {
        value = value * 16.0 + f64::from(c.to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for c in fraction.chars() {
        value += f64::from(c.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    let exponent: i32 = match exponent {
        None => 0,
        Some(digits) => {
            let unsigned = digits.strip_prefix(['+', '-']).unwrap_or(digits);
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Exponents past any double's range saturate, as strtod's result does.
            digits
                .parse::<i64>()
                .unwrap_or(if digits.starts_with('-') {
                    i64::MIN
                } else {
                    i64::MAX
                })
                .clamp(-4000, 4000) as i32
        }
    };
    Some(value * 2f64.powi(exponent))
}

fn mantissa_has_nonzero_digit(text: &str) -> bool {
    text.bytes()
        .take_while(|byte| *byte != b'e' && *byte != b'E')
        .any(|byte| (b'1'..=b'9').contains(&byte))
}

/// Writes `value` in decimal, as Redis's `ll2string` does.
pub fn write_i64(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(I64Text::new(value).as_bytes());
}

/// The decimal text of an `i64`, built on the stack (reply headers are written per reply).
pub(crate) struct I64Text {
    digits: [u8; I64_TEXT_BYTES_MAX],
    start: usize,
}

impl I64Text {
    pub(crate) fn new(value: i64) -> Self {
        let mut digits = [0u8; I64_TEXT_BYTES_MAX];
        let mut start = digits.len();
        let mut magnitude = value.unsigned_abs();
        loop {
            start -= 1;
            // `magnitude % 10` < 10, so the cast cannot truncate.
            let digit = (magnitude % 10) as u8;
            if let Some(slot) = digits.get_mut(start) {
                *slot = b'0' + digit;
            }
            magnitude /= 10;
            if magnitude == 0 {
                break;
            }
        }
        if value < 0 {
            start -= 1;
            if let Some(slot) = digits.get_mut(start) {
                *slot = b'-';
            }
        }
        I64Text { digits, start }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.digits.get(self.start..).unwrap_or_default()
    }
}

/// Formats `value` exactly like C's `printf("%.17g")`, which Redis 7.0 uses for every double
/// it replies with; infinities are "inf" / "-inf" (Redis special-cases them) and NaN is "nan".
///
/// -0.0 is "-0", as printf writes it. Redis's sorted sets never hold -0 (ZADD z -0 m, then
/// ZSCORE, answers "0"), so the sorted-set layer must store `score + 0.0`.
pub fn format_f64(value: f64) -> String {
    if value.is_nan() {
        return "nan".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    // `{:.16e}` rounds correctly to 17 significant digits, like printf: "d.dddddddddddddddde<X>".
    let scientific = format!("{:.16e}", value.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();

    let mut text = String::with_capacity(24);
    if value.is_sign_negative() {
        text.push('-');
    }
    // %g: style e when X < -4 or X >= precision (17), else style f; then trailing zeros go.
    if !(-4..17).contains(&exponent) {
        let (lead, rest) = digits.split_at(1.min(digits.len()));
        text.push_str(lead);
        push_fraction(&mut text, rest);
        text.push('e');
        text.push(if exponent < 0 { '-' } else { '+' });
        let magnitude = exponent.unsigned_abs();
        if magnitude < 10 {
            text.push('0');
        }
        text.push_str(&magnitude.to_string());
    } else if exponent >= 0 {
        let split = usize::try_from(exponent)
            .unwrap_or(0)
            .saturating_add(1)
            .min(digits.len());
        let (whole, fraction) = digits.split_at(split);
        text.push_str(whole);
        push_fraction(&mut text, fraction);
    } else {
        text.push('0');
        let zeros = usize::try_from(-exponent - 1).unwrap_or(0);
        let fraction = format!("{}{}", "0".repeat(zeros), digits);
        push_fraction(&mut text, &fraction);
    }
    text
}

/// Appends `.<fraction>` without trailing zeros, or nothing if the fraction is all zeros.
fn push_fraction(text: &mut String, fraction: &str) {
    let kept = fraction.trim_end_matches('0');
    if !kept.is_empty() {
        text.push('.');
        text.push_str(kept);
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn strtod_bounds() {
        let cases: &[(&[u8], Option<f64>)] = &[
            (b"", Some(0.0)),
            (b"1.5", Some(1.5)),
            (b" \t1", Some(1.0)),
            (b"1 ", None),
            (b"  ", None),
            (b"x", None),
            (b"-inf", Some(f64::NEG_INFINITY)),
            (b"+Infinity", Some(f64::INFINITY)),
            (b"nan", None),
            (b"1e999", Some(f64::INFINITY)),
            (b"-1e-999", Some(-0.0)),
            (b"0x10", Some(16.0)),
            (b"-0x1p3", Some(-8.0)),
            (b"0x.8", Some(0.5)),
            (b"0x", None),
            (b"0x1p", None),
            (b"+-1", None),
            (b".", None),
            (b".5", Some(0.5)),
            (b"5.", Some(5.0)),
        ];
        for (text, expected) in cases {
            assert_eq!(
                parse_strtod(text).map(f64::to_bits),
                expected.map(f64::to_bits),
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
    }
    use super::*;

    #[test]
    fn parse_i64_follows_string2ll() {
        let accepted: &[(&[u8], i64)] = &[
            (b"0", 0),
            (b"1", 1),
            (b"-1", -1),
            (b"9223372036854775807", i64::MAX),
            (b"-9223372036854775808", i64::MIN),
            (b"1234567890", 1_234_567_890),
        ];
        for (text, value) in accepted {
            assert_eq!(
                parse_i64(text),
                Some(*value),
                "{:?}",
                String::from_utf8_lossy(text)
            );
        }
        let rejected: &[&[u8]] = &[
            b"",
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"00",
            b"-0",
            b"-01",
            b"1.0",
            b"1e3",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"18446744073709551616",
            b"000000000000000000001",
            b"0x10",
            b"\xff",
        ];
        for text in rejected {
            assert_eq!(parse_i64(text), None, "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn write_i64_round_trips_extremes() {
        for value in [0, 1, -1, 10, -10, 99, i64::MAX, i64::MIN, 1_000_000] {
            let mut out = Vec::new();
            write_i64(&mut out, value);
            assert_eq!(out, value.to_string().as_bytes());
            assert_eq!(parse_i64(&out), Some(value));
        }
    }

    #[test]
    fn parse_f64_follows_strtod_as_redis_uses_it() {
        let accepted: &[(&str, f64)] = &[
            ("1", 1.0),
            ("-1.5", -1.5),
            ("+2", 2.0),
            (".5", 0.5),
            ("5.", 5.0),
            ("1e3", 1000.0),
            ("1E-2", 0.01),
            ("inf", f64::INFINITY),
            ("-inf", f64::NEG_INFINITY),
            ("+Infinity", f64::INFINITY),
            ("0", 0.0),
            ("0e999", 0.0),
            ("4.9e-324", 5e-324),
        ];
        for (text, value) in accepted {
            assert_eq!(parse_f64(text.as_bytes()), Some(*value), "{text}");
        }
        let rejected = [
            "", " 1", "1 ", "nan", "NaN", "1e", "e1", ".", "abc", "1e400", "-1e400", "1e-400",
            "1,5",
        ];
        for text in rejected {
            assert_eq!(parse_f64(text.as_bytes()), None, "{text}");
        }
    }

    /// Expected texts are glibc `printf("%.17g")` outputs, i.e. what Redis 7.0 sends for ZSCORE.
    #[test]
    fn format_f64_matches_printf_17g() {
        let cases: &[(f64, &str)] = &[
            (1.1, "1.1000000000000001"),
            (0.1, "0.10000000000000001"),
            (1.5, "1.5"),
            (3.0, "3"),
            (0.0, "0"),
            (-0.0, "-0"),
            (-2.5, "-2.5"),
            (1e20, "1e+20"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (123456789.123, "123456789.123"),
            (5e-324, "4.9406564584124654e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (-1e-5, "-1.0000000000000001e-05"),
            (1e100, "1e+100"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (value, text) in cases {
            assert_eq!(format_f64(*value), *text, "{value:e}");
        }
    }
}
