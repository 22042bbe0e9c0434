//! Finding the translation units to parse and the flags to parse them with.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::Error;

/// Directories holding headers added as `-I` when there is no `compile_commands.json`: enough
/// for a source tree's own include directories, bounded so a huge tree does not make every
/// include search slow.
const HEADER_DIRS_MAX: usize = 64;

/// Files visited when walking directories, a bound against walking a whole disk by mistake.
const WALK_FILES_MAX: usize = 200_000;

/// One translation unit: a source file and the flags to parse it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// The `.c` file.
    pub file: PathBuf,
    /// Compiler flags (no compiler name, no `-c`, `-o`, or source file).
    pub flags: Vec<String>,
}

/// Finds the translation units under `paths`.
///
/// A directory with a `compile_commands.json` (in it or in its `build/`) contributes the
/// entries of that database whose files lie under it. Any other directory contributes every
/// `.c` file under it, parsed with `-I` for each directory holding headers (up to
/// 64). A file contributes itself. `extra` flags are appended to every unit.
///
/// # Errors
/// A path that does not exist, an unreadable `compile_commands.json`, or no sources at all.
pub fn discover(paths: &[PathBuf], extra: &[String]) -> Result<Vec<Unit>, Error> {
    let mut units = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        if meta.is_file() {
            units.push(Unit {
                file: path.clone(),
                flags: extra.to_vec(),
            });
            continue;
        }
        let database = [
            path.join("compile_commands.json"),
            path.join("build/compile_commands.json"),
        ]
        .into_iter()
        .find(|p| p.is_file());
        match database {
            Some(db) => units.extend(from_database(&db, path, extra)?),
            None => units.extend(from_walk(path, extra)),
        }
    }
    let mut seen = BTreeSet::new();
    units.retain(|u| seen.insert(u.file.clone()));
    if units.is_empty() {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(Error::NoSources(shown.join(", ")));
    }
    Ok(units)
}

fn from_walk(root: &Path, extra: &[String]) -> Vec<Unit> {
    let mut sources = Vec::new();
    let mut header_dirs = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    let mut visited = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            visited += 1;
            if visited > WALK_FILES_MAX {
                break;
            }
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') {
                continue;
            }
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if name.ends_with(".c") {
                sources.push(path);
            } else if name.ends_with(".h") {
                header_dirs.insert(dir.clone());
            }
        }
    }
    sources.sort();
    let mut flags: Vec<String> = header_dirs
        .iter()
        .take(HEADER_DIRS_MAX)
        .map(|d| format!("-I{}", d.display()))
        .collect();
    flags.extend(extra.iter().cloned());
    sources
        .into_iter()
        .map(|file| Unit {
            file,
            flags: flags.clone(),
        })
        .collect()
}

fn from_database(db: &Path, root: &Path, extra: &[String]) -> Result<Vec<Unit>, Error> {
    let bad = |detail: String| Error::CompileCommands {
        path: db.to_path_buf(),
        detail,
    };
    let text = std::fs::read_to_string(db).map_err(|source| Error::Io {
        path: db.to_path_buf(),
        source,
    })?;
    let entries: Vec<serde_json::Value> =
        serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mut units = Vec::new();
    for entry in entries {
        // A relative directory is taken relative to the database itself.
        let base = db.parent().unwrap_or(Path::new("."));
        let dir = base.join(entry["directory"].as_str().unwrap_or("."));
        let Some(file) = entry["file"].as_str() else {
            return Err(bad("an entry has no \"file\"".into()));
        };
        let file = dir.join(file);
        let file = std::fs::canonicalize(&file).unwrap_or(file);
        if !file.to_string_lossy().ends_with(".c") || !file.starts_with(&root) {
            continue;
        }
        let argv: Vec<String> = match (&entry["arguments"], entry["command"].as_str()) {
            (serde_json::Value::Array(a), _) => a
                .iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect(),
            (_, Some(command)) => split_command(command),
            _ => {
                return Err(bad(
                    "an entry has neither \"arguments\" nor \"command\"".into()
                ))
            }
        };
        let mut flags = clean_flags(&argv, &file, &dir);
        flags.extend(extra.iter().cloned());
        units.push(Unit { file, flags });
    }
    Ok(units)
}

/// Drops the compiler, `-c`, `-o FILE` and the source file; makes `-I` paths absolute.
fn clean_flags(argv: &[String], file: &Path, dir: &Path) -> Vec<String> {
    let mut flags = Vec::new();
    let mut args = argv.iter().skip(1);
    while let Some(arg) = args.next() {
        if arg == "-c" {
            continue;
        }
        if arg == "-o" {
            args.next();
            continue;
        }
        let candidate = dir.join(arg);
        if candidate == file || std::fs::canonicalize(&candidate).is_ok_and(|c| c == file) {
            continue;
        }
        if let Some(include) = arg.strip_prefix("-I") {
            if !include.is_empty() && Path::new(include).is_relative() {
                flags.push(format!("-I{}", dir.join(include).display()));
                continue;
            }
        }
        flags.push(arg.clone());
    }
    flags
}

/// Splits a shell command line on whitespace, honouring simple quotes and backslashes.
fn split_command(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), '\\') | (None, '\\') => {
                if let Some(next) = chars.next() {
                    word.push(next);
                    in_word = true;
                }
            }
            (Some(_), c) => word.push(c),
            (None, '"') | (None, '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_command_honours_quotes() {
        assert_eq!(
            split_command(r#"cc -DX="a b" -I inc 'x y.c'"#),
            vec!["cc", "-DX=a b", "-I", "inc", "x y.c"]
        );
    }

    #[test]
    fn clean_flags_drops_output_and_source() {
        let argv: Vec<String> = ["cc", "-c", "-o", "a.o", "-Iinc", "-DN=1", "a.c"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let flags = clean_flags(&argv, Path::new("/p/a.c"), Path::new("/p"));
        assert_eq!(flags, vec!["-I/p/inc", "-DN=1"]);
    }
}
