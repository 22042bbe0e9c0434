//! SORT and SORT_RO: the elements of a list, set or sorted set, sorted as numbers or (ALPHA)
//! as strings, by themselves or by the values of other keys (BY pattern), cut by LIMIT, with
//! other keys' values fetched per element (GET pattern), returned or stored as a list
//! (STORE). Redis 7.0's `sort.c`: same option parsing, same patterns (`*` replaced by the
//! element, `->field` for a hash field, `#` for the element itself), same order for equal
//! weights (the elements compared as bytes), same errors.

use mnemo_resp::bytes::Bytes;
use mnemo_resp::command::CommandSpec;
use mnemo_resp::{errors, parse_f64, parse_i64, CommandId as Id, Reply};

use super::commands::{err, int, wrongtype};
use super::dict::{self, tag};
use super::keyspace::{Ctx, SEED};
use super::list;
use super::store::Result;

/// The options of one SORT.
struct Options<'a> {
    by: Option<&'a [u8]>,
    /// BY a pattern without `*`: no sorting at all.
    dont_sort: bool,
    limit: Option<(i64, i64)>,
    get: Vec<&'a [u8]>,
    desc: bool,
    alpha: bool,
    store: Option<&'a Bytes>,
}

/// Parses the options as Redis does, left to right; an unknown word, or STORE in SORT_RO,
/// is a syntax error.
fn parse<'a>(a: &'a [Bytes], read_only: bool) -> std::result::Result<Options<'a>, Reply> {
    let mut o = Options {
        by: None,
        dont_sort: false,
        limit: None,
        get: Vec::new(),
        desc: false,
        alpha: false,
        store: None,
    };
    let mut j = 2;
    while j < a.len() {
        let left = a.len() - j - 1;
        let word = &a[j];
        if word.eq_ignore_ascii_case(b"asc") {
            o.desc = false;
        } else if word.eq_ignore_ascii_case(b"desc") {
            o.desc = true;
        } else if word.eq_ignore_ascii_case(b"alpha") {
            o.alpha = true;
        } else if word.eq_ignore_ascii_case(b"limit") && left >= 2 {
            let (Some(offset), Some(count)) = (parse_i64(&a[j + 1]), parse_i64(&a[j + 2])) else {
                return Err(err(errors::NOT_INTEGER));
            };
            o.limit = Some((offset, count));
            j += 2;
        } else if word.eq_ignore_ascii_case(b"store") && left >= 1 && !read_only {
            o.store = Some(&a[j + 1]);
            j += 1;
        } else if word.eq_ignore_ascii_case(b"by") && left >= 1 {
            let pattern = &a[j + 1][..];
            // Once a BY without '*' has said "no sorting", a later BY does not undo it.
            o.dont_sort |= !pattern.contains(&b'*');
            o.by = Some(pattern);
            j += 1;
        } else if word.eq_ignore_ascii_case(b"get") && left >= 1 {
            o.get.push(&a[j + 1][..]);
            j += 1;
        } else {
            return Err(err(errors::SYNTAX));
        }
        j += 1;
    }
    Ok(o)
}

/// SORT / SORT_RO.
pub fn run(ctx: &mut Ctx<'_, '_>, spec: &'static CommandSpec, a: &[Bytes]) -> Result<Reply> {
    let mut o = match parse(a, spec.id == Id::SortRo) {
        Ok(options) => options,
        Err(reply) => return Ok(reply),
    };
    let found = ctx.lookup(&a[1])?;
    let kind = found.as_ref().map_or(0, |f| f.entry.tag);
    if !matches!(kind, 0 | tag::LIST | tag::SET | tag::ZSET) {
        return Ok(wrongtype());
    }
    // A set has no order of its own: stored unsorted, the result would depend on its hash
    // order, so Redis sorts it by the elements (ALPHA) then.
    if o.dont_sort && kind == tag::SET && o.store.is_some() {
        o.dont_sort = false;
        o.alpha = true;
        o.by = None;
    }
    let mut elements = match &found {
        None => Vec::new(),
        Some(f) => load(ctx, f.entry.tag, f.entry.val)?,
    };
    let len = i64::try_from(elements.len()).unwrap_or(i64::MAX);
    let (start, end) = window(o.limit, len);
    if matches!(kind, tag::LIST | tag::ZSET) && o.dont_sort && o.desc {
        // A list or sorted set taken in its own order follows ASC / DESC.
        elements.reverse();
    }
    if !o.dont_sort {
        match weigh(ctx, &o, elements)? {
            Ok(sorted) => elements = sorted,
            Err(reply) => return Ok(reply),
        }
    }
    let window: Vec<Vec<u8>> = if start <= end && end >= 0 {
        let (s, e) = (start as usize, end as usize);
        elements.into_iter().skip(s).take(e - s + 1).collect()
    } else {
        Vec::new()
    };
    let mut out: Vec<Option<Vec<u8>>> = Vec::new();
    for element in &window {
        if o.get.is_empty() {
            out.push(Some(element.clone()));
        }
        for pattern in &o.get {
            out.push(by_pattern(ctx, pattern, element)?);
        }
    }
    match o.store {
        None => Ok(Reply::Array(
            out.into_iter()
                .map(|v| v.map_or(Reply::NullBulk, |v| Reply::Bulk(Bytes::from(v))))
                .collect(),
        )),
        Some(target) => {
            if let Some(old) = ctx.lookup_write(target)? {
                ctx.delete(&old)?;
            }
            if !out.is_empty() {
                let l = ctx.create_container(target, tag::LIST)?;
                for value in &out {
                    list::push(ctx.tx, l, false, value.as_deref().unwrap_or_default())?;
                }
            }
            Ok(int(out.len() as u64))
        }
    }
}

/// The elements of a list (in order), set (in table order) or sorted set (by score).
fn load(ctx: &mut Ctx<'_, '_>, kind: u8, d: u64) -> Result<Vec<Vec<u8>>> {
    match kind {
        tag::LIST => list::elements(ctx.tx, d)?
            .into_iter()
            .map(|e| list::value(ctx.tx, e))
            .collect(),
        tag::ZSET => Ok(ctx
            .zindex(d)?
            .iter()
            .map(|(_, member)| member.clone())
            .collect()),
        _ => {
            let mut members = Vec::new();
            dict::for_each(ctx.tx, d, |e| {
                members.push(e.key(ctx.tx)?);
                Ok(true)
            })?;
            Ok(members)
        }
    }
}

/// Redis's LIMIT window over `len` elements: a negative offset is 0, a negative count is
/// "to the end"; an offset past the end gives nothing.
fn window(limit: Option<(i64, i64)>, len: i64) -> (i64, i64) {
    let (offset, count) = limit.unwrap_or((0, -1));
    let mut start = offset.max(0);
    let mut end = if count < 0 {
        len - 1
    } else {
        start.saturating_add(count) - 1
    };
    if start >= len {
        start = len - 1;
        end = len - 2;
    }
    if end >= len {
        end = len - 1;
    }
    (start, end)
}

/// How an element sorts: by a number, or (ALPHA) by bytes, absent when BY found nothing.
enum Weight {
    Number(f64),
    Text(Option<Vec<u8>>),
}

/// Sorts the elements by their weights; the error reply when a weight is not a number.
fn weigh(
    ctx: &mut Ctx<'_, '_>,
    o: &Options<'_>,
    elements: Vec<Vec<u8>>,
) -> Result<std::result::Result<Vec<Vec<u8>>, Reply>> {
    let mut weighted = Vec::with_capacity(elements.len());
    for element in elements {
        let by = match o.by {
            Some(pattern) => by_pattern(ctx, pattern, &element)?,
            None => Some(element.clone()),
        };
        let weight = if o.alpha {
            Weight::Text(if o.by.is_some() { by } else { None })
        } else {
            match by.as_deref().map(number) {
                None => Weight::Number(0.0),
                Some(Some(score)) => Weight::Number(score),
                Some(None) => {
                    return Ok(Err(err(
                        "ERR One or more scores can't be converted into double",
                    )))
                }
            }
        };
        weighted.push((weight, element));
    }
    let by_pattern = o.by.is_some();
    weighted.sort_by(|(wa, ea), (wb, eb)| {
        let order = match (wa, wb) {
            (Weight::Number(x), Weight::Number(y)) => x
                .partial_cmp(y)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| ea.cmp(eb)),
            (Weight::Text(x), Weight::Text(y)) if by_pattern => x.cmp(y),
            _ => ea.cmp(eb),
        };
        if o.desc {
            order.reverse()
        } else {
            order
        }
    });
    Ok(Ok(weighted.into_iter().map(|(_, e)| e).collect()))
}

/// A weight as `strtod` reads it whole: an empty string is 0, NaN is refused.
fn number(text: &[u8]) -> Option<f64> {
    if text.is_empty() {
        return Some(0.0);
    }
    parse_f64(text).filter(|v| !v.is_nan())
}

/// The value a BY or GET pattern names for `element`: `#` is the element; otherwise the
/// first `*` is replaced by it and the key read (a string, or with `key->field` a hash's
/// field). `None` when the pattern has no `*`, the key is missing or of another type.
fn by_pattern(ctx: &mut Ctx<'_, '_>, pattern: &[u8], element: &[u8]) -> Result<Option<Vec<u8>>> {
    if pattern == b"#" {
        return Ok(Some(element.to_vec()));
    }
    let Some(star) = pattern.iter().position(|&b| b == b'*') else {
        return Ok(None);
    };
    let after = &pattern[star + 1..];
    let arrow = after
        .windows(2)
        .position(|w| w == b"->")
        .filter(|&at| at + 2 < after.len());
    let (suffix, field) = match arrow {
        Some(at) => (&after[..at], Some(&after[at + 2..])),
        None => (after, None),
    };
    let mut key = pattern[..star].to_vec();
    key.extend_from_slice(element);
    key.extend_from_slice(suffix);
    let Some(found) = ctx.lookup(&key)? else {
        return Ok(None);
    };
    match (field, found.entry.tag) {
        (None, tag::STRING) => Ok(Some(found.entry.string(ctx.tx)?)),
        (Some(field), tag::HASH) => match dict::find(ctx.tx, found.entry.val, SEED, field)? {
            Some(f) => Ok(Some(f.entry.string(ctx.tx)?)),
            None => Ok(None),
        },
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_windows_as_redis() {
        assert_eq!(window(None, 5), (0, 4));
        assert_eq!(window(Some((1, 2)), 5), (1, 2));
        assert_eq!(window(Some((-3, 2)), 5), (0, 1));
        assert_eq!(window(Some((3, 10)), 5), (3, 4));
        assert_eq!(window(Some((5, 1)), 5), (4, 3));
        assert_eq!(window(Some((0, 0)), 5), (0, -1));
        assert_eq!(window(None, 0), (-1, -2));
    }

    #[test]
    fn weights_parse_as_strtod_whole() {
        assert_eq!(number(b""), Some(0.0));
        assert_eq!(number(b"1.5"), Some(1.5));
        assert_eq!(number(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(number(b"1x"), None);
        assert_eq!(number(b"nan"), None);
    }
}
