//! Splitting of inline requests (`SET "a b" c\r\n`), with Redis's quoting rules
//! (`sdssplitargs`).
//!
//! The rules, in the order Redis applies them:
//! - Arguments are separated by runs of C white space (space, \t, \n, \v, \f, \r).
//! - A NUL byte ends the line: Redis splits a C string, so whatever follows is ignored.
//! - Inside double quotes: `\xHH` (two hex digits) is that byte; `\n \r \t \b \a` are the
//!   control characters; a backslash before any other byte yields that byte.
//! - Inside single quotes: only `\'` is an escape; everything else is literal.
//! - A quote may open in the middle of an argument (`a"b c"` is one argument, `ab c`); a
//!   closing quote must be followed by white space or the end of the line.
//! - A missing closing quote, or a closing quote followed by anything else, makes the whole
//!   request invalid ("unbalanced quotes").

/// The line could not be split because its quotes are unbalanced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unbalanced;

/// C's `isspace` in the "C" locale. Unlike `u8::is_ascii_whitespace` it includes \v (0x0b).
fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// The state of the argument being read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Quote {
    None,
    Double,
    Single,
}

/// Splits one inline request line (without its line ending) into arguments.
pub(crate) fn split(line: &[u8]) -> Result<Vec<Vec<u8>>, Unbalanced> {
    let end = memchr::memchr(0, line).unwrap_or(line.len());
    let line = line.get(..end).unwrap_or_default();
    let at = |index: usize| line.get(index).copied();

    let mut args = Vec::new();
    let mut position = 0;
    loop {
        while at(position).is_some_and(is_c_space) {
            position += 1;
        }
        if position >= line.len() {
            return Ok(args);
        }
        let mut current = Vec::new();
        let mut quote = Quote::None;
        let mut done = false;
        while !done {
            let byte = at(position);
            match quote {
                Quote::Double => match byte {
                    None => return Err(Unbalanced),
                    Some(b'\\') if at(position + 1) == Some(b'x') => {
                        let high = at(position + 2).and_then(hex_value);
                        let low = at(position + 3).and_then(hex_value);
                        if let (Some(high), Some(low)) = (high, low) {
                            current.push(high * 16 + low);
                            position += 3;
                        } else {
                            // Not a hex escape: "\x" is an ordinary escape yielding 'x'.
                            current.push(b'x');
                            position += 1;
                        }
                    }
                    Some(b'\\') if at(position + 1).is_some() => {
                        position += 1;
                        current.push(match at(position) {
                            Some(b'n') => b'\n',
                            Some(b'r') => b'\r',
                            Some(b't') => b'\t',
                            Some(b'b') => b'\x08',
                            Some(b'a') => b'\x07',
                            other => other.unwrap_or_default(),
                        });
                    }
                    Some(b'"') => {
                        if at(position + 1).is_some_and(|next| !is_c_space(next)) {
                            return Err(Unbalanced);
                        }
                        done = true;
                    }
                    Some(other) => current.push(other),
                },
                Quote::Single => match byte {
                    None => return Err(Unbalanced),
                    Some(b'\\') if at(position + 1) == Some(b'\'') => {
                        position += 1;
                        current.push(b'\'');
                    }
                    Some(b'\'') => {
                        if at(position + 1).is_some_and(|next| !is_c_space(next)) {
                            return Err(Unbalanced);
                        }
                        done = true;
                    }
                    Some(other) => current.push(other),
                },
                Quote::None => match byte {
                    None | Some(b' ' | b'\n' | b'\r' | b'\t') => done = true,
                    Some(b'"') => quote = Quote::Double,
                    Some(b'\'') => quote = Quote::Single,
                    Some(other) => current.push(other),
                },
            }
            if position < line.len() {
                position += 1;
            }
        }
        args.push(current);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &[u8]) -> Vec<Vec<u8>> {
        split(line).expect("balanced")
    }

    fn strings(args: &[&str]) -> Vec<Vec<u8>> {
        args.iter().map(|arg| arg.as_bytes().to_vec()).collect()
    }

    #[test]
    fn plain_words_and_white_space() {
        assert_eq!(ok(b"PING"), strings(&["PING"]));
        assert_eq!(ok(b"  set  k \t v  "), strings(&["set", "k", "v"]));
        assert_eq!(ok(b""), Vec::<Vec<u8>>::new());
        assert_eq!(ok(b" \x0b\x0c "), Vec::<Vec<u8>>::new());
        // \v separates arguments only when leading: inside a word it is a byte like any other.
        assert_eq!(ok(b"a\x0bb"), strings(&["a\x0bb"]));
    }

    #[test]
    fn double_quotes_and_escapes() {
        assert_eq!(ok(br#"set "a b" c"#), strings(&["set", "a b", "c"]));
        assert_eq!(ok(br#""\x41\x6a""#), strings(&["Aj"]));
        assert_eq!(
            ok(br#""\n\r\t\b\a\"\\\q""#),
            strings(&["\n\r\t\x08\x07\"\\q"])
        );
        assert_eq!(ok(br#""\xZZ""#), strings(&["xZZ"]));
        assert_eq!(ok(br#""""#), strings(&[""]));
        assert_eq!(ok(br#"a"b c" d"#), strings(&["ab c", "d"]));
    }

    #[test]
    fn single_quotes() {
        assert_eq!(ok(br"'it\'s'"), strings(&["it's"]));
        assert_eq!(ok(br"'a\nb'"), strings(&["a\\nb"]));
        assert_eq!(ok(br#"'say "hi"'"#), strings(&["say \"hi\""]));
    }

    #[test]
    fn unbalanced_quotes() {
        for line in [
            &br#""abc"#[..],
            br"'abc",
            br#""abc"def"#,
            br"'abc'd",
            br#""abc\"#,
            br#"x "a"#,
        ] {
            assert_eq!(
                split(line),
                Err(Unbalanced),
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn nul_ends_the_line() {
        assert_eq!(ok(b"GET a\0b c"), strings(&["GET", "a"]));
        assert_eq!(split(b"GET \"a\0\""), Err(Unbalanced));
    }
}
