//! Exact decimal addition for INCRBYFLOAT.
//!
//! Redis adds in `long double` (64-bit mantissa on x86-64) and prints with `%.17Lf`, trailing
//! zeros removed: for the plain decimals clients send (`10.5`, `0.1`, `-3.25`) that is their
//! exact decimal sum, where a `f64` sum would print `0.30000000000000004` for `0.1 + 0.2`.
//! So plain decimals whose sum fits are added exactly here, in a scaled `i128`, and rounded to
//! 17 decimals as `%.17Lf` would; anything else (exponents, `inf`, more digits) falls back to
//! `f64` in the caller.

/// Digits after the point that INCRBYFLOAT prints at most.
const FRACTION_DIGITS_MAX: u32 = 17;
/// Digits (both sides of the point) believed exact: a `long double` holds about 19.
const DIGITS_MAX: usize = 19;

/// A plain decimal as (value scaled by 10^scale, scale), or `None`.
fn parse(text: &[u8]) -> Option<(i128, u32)> {
    let (negative, digits) = match text.first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let (whole, fraction) = match digits.iter().position(|&b| b == b'.') {
        Some(dot) => (&digits[..dot], &digits[dot + 1..]),
        None => (digits, &digits[..0]),
    };
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let all = whole.iter().chain(fraction);
    if !all.clone().all(u8::is_ascii_digit) {
        return None;
    }
    let significant = whole.iter().skip_while(|&&b| b == b'0').count() + fraction.len();
    if significant > DIGITS_MAX || fraction.len() > FRACTION_DIGITS_MAX as usize {
        return None;
    }
    let mut value: i128 = 0;
    for &b in all {
        value = value.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
    }
    Some((if negative { -value } else { value }, fraction.len() as u32))
}

/// `a + b` printed as INCRBYFLOAT prints it, if both are plain decimals whose sum is exact
/// within [`DIGITS_MAX`] digits.
pub fn add(a: &[u8], b: &[u8]) -> Option<String> {
    let (x, sx) = parse(a)?;
    let (y, sy) = parse(b)?;
    let scale = sx.max(sy);
    let x = x.checked_mul(10i128.checked_pow(scale - sx)?)?;
    let y = y.checked_mul(10i128.checked_pow(scale - sy)?)?;
    let sum = x.checked_add(y)?;
    if sum.unsigned_abs().to_string().len() > DIGITS_MAX {
        return None;
    }
    Some(format(sum, scale))
}

fn format(value: i128, scale: u32) -> String {
    let digits = value.unsigned_abs().to_string();
    let scale = scale as usize;
    let (whole, fraction) = if digits.len() > scale {
        let (w, f) = digits.split_at(digits.len() - scale);
        (w.to_string(), f.to_string())
    } else {
        ("0".to_string(), format!("{digits:0>scale$}"))
    };
    let fraction = fraction.trim_end_matches('0');
    let sign = if value < 0 { "-" } else { "" };
    if fraction.is_empty() {
        format!("{sign}{whole}")
    } else {
        format!("{sign}{whole}.{fraction}")
    }
}

#[cfg(test)]
mod tests {
    use super::add;

    #[test]
    fn sums_like_redis() {
        assert_eq!(add(b"0.1", b"0.2").as_deref(), Some("0.3"));
        assert_eq!(add(b"10.50", b"0.1").as_deref(), Some("10.6"));
        assert_eq!(add(b"5", b"-5").as_deref(), Some("0"));
        assert_eq!(add(b"-1.5", b"0.25").as_deref(), Some("-1.25"));
        assert_eq!(add(b"3", b"1.0e3"), None);
        assert_eq!(add(b"inf", b"1"), None);
        assert_eq!(add(b".5", b"1.").as_deref(), Some("1.5"));
        assert_eq!(add(b".", b"1"), None);
        assert_eq!(add(b"0.05", b"-0.1").as_deref(), Some("-0.05"));
    }
}
