//! The public surface is exactly what `exports.txt` lists: the symbols `libmnemo.so` exports
//! (`nm -D --defined-only`), the functions `mnemo.h` declares, and every declaration
//! documents its result and its errors. The error codes of the header equal the library's.
//! (The C programs themselves run in `scripts/c-tests.sh`, not here, so the suite runs them once.)

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn checked_in() -> BTreeSet<String> {
    std::fs::read_to_string(crate_dir().join("exports.txt"))
        .expect("exports.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

fn header() -> String {
    std::fs::read_to_string(crate_dir().join("include/mnemo.h")).expect("include/mnemo.h")
}

/// `target/<profile>/libmnemo.so`: the test binary lives in `target/<profile>/deps`.
fn shared_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    // Every build of the library writes `deps/libmnemo.so` (a cdylib carries no hash in its
    // name); only `cargo build` copies it up to the profile directory, so that copy may be
    // stale under `cargo test`.
    let fresh = profile_dir.join("deps").join("libmnemo.so");
    if fresh.exists() {
        fresh
    } else {
        profile_dir.join("libmnemo.so")
    }
}

/// (name, comment block before it) of every function the header declares.
fn declarations(text: &str) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    let mut comment = String::new();
    let mut in_comment = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("/*") {
            in_comment = true;
            comment.clear();
        }
        if in_comment {
            comment.push_str(t);
            comment.push('\n');
            if t.contains("*/") {
                in_comment = false;
            }
            continue;
        }
        if t.starts_with("typedef") || t.starts_with('#') || t.starts_with("MNEMO_") {
            continue;
        }
        if let Some(paren) = t.find("mnemo_").and_then(|at| {
            t[at..]
                .find('(')
                .map(|p| (at, at + p))
                .filter(|&(a, p)| t[a..p].chars().all(|c| c.is_alphanumeric() || c == '_'))
        }) {
            let (at, p) = paren;
            let returns_int = t.starts_with("int ");
            out.push((t[at..p].to_string(), comment.clone(), returns_int));
        }
    }
    out
}

#[test]
fn exported_symbols_match_exports_txt() {
    let lib = shared_library();
    assert!(
        lib.exists(),
        "{} not built (cargo builds the cdylib with the test)",
        lib.display()
    );
    let output = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("run nm (binutils)");
    assert!(output.status.success(), "nm failed: {output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    let mut exported = BTreeSet::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (kind, name) = match fields.as_slice() {
            [_, kind, name] => (*kind, *name),
            [kind, name] => (*kind, *name),
            _ => continue,
        };
        assert_eq!(
            kind, "T",
            "{name} is exported as {kind}: only functions belong to the ABI"
        );
        exported.insert(name.to_string());
    }
    let listed = checked_in();
    let extra: Vec<_> = exported.difference(&listed).collect();
    let missing: Vec<_> = listed.difference(&exported).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "exported but not in exports.txt: {extra:?}; listed but not exported: {missing:?}"
    );
}

#[test]
fn header_declares_every_export_and_documents_its_errors() {
    let text = header();
    let declared = declarations(&text);
    let names: BTreeSet<String> = declared.iter().map(|(n, _, _)| n.clone()).collect();
    assert_eq!(names, checked_in(), "mnemo.h and exports.txt differ");
    for (name, doc, returns_int) in &declared {
        assert!(doc.contains("@return"), "{name}: no @return in its comment");
        if *returns_int {
            assert!(doc.contains("Errors:"), "{name}: no \"Errors:\" list");
        }
        if doc.contains("Errors:") {
            let errors = &doc[doc.find("Errors:").unwrap_or(0)..];
            assert!(
                errors.contains("MNEMO_E") || errors.contains("as mnemo_"),
                "{name}: its Errors list names no code"
            );
        }
    }
    assert!(
        (25..=50).contains(&names.len()),
        "{} functions: keep the surface small",
        names.len()
    );
}

#[test]
fn header_error_codes_equal_the_library() {
    let text = header();
    for (value, name, description) in mnemo::error::code::ALL {
        let needle = format!("{name} = {value}");
        assert!(text.contains(&needle), "mnemo.h lacks `{needle}`");
        // SAFETY: mnemo_strerror returns a static NUL-terminated string.
        let got = unsafe { std::ffi::CStr::from_ptr(mnemo::mnemo_strerror(*value)) };
        assert_eq!(got, *description);
    }
    let declared = text.matches(" = -").count();
    assert_eq!(
        declared,
        mnemo::error::code::ALL.len() - 1,
        "mnemo.h declares codes the library does not know"
    );
}

/// `#define NAME VALUE` of the header, as a number.
fn define(text: &str, name: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("#define {name} ")))
        .unwrap_or_else(|| panic!("mnemo.h lacks #define {name}"));
    let value: String = line[format!("#define {name} ").len()..]
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    value.parse().expect("a number")
}

#[test]
fn header_limits_equal_the_library() {
    let text = header();
    assert_eq!(define(&text, "MNEMO_POOL_SIZE_MIN"), mnemo::pool_size_min());
    assert_eq!(
        define(&text, "MNEMO_NAME_MAX"),
        mnemo_heap::layout::NAME_MAX as u64
    );
    assert_eq!(
        define(&text, "MNEMO_TX_RECORD_MAX"),
        mnemo_heap::layout::LANE_LOG_SIZE_DEFAULT / mnemo_heap::layout::LANE_SLOTS_DEFAULT as u64
    );
    assert_eq!(
        define(&text, "MNEMO_GMSYNC_RANGES_MAX"),
        mnemo_pmem::limits::GMSYNC_RANGES_MAX as u64
    );
    assert_eq!(
        define(&text, "MNEMO_GMSYNC_RECORD_MAX"),
        mnemo_pmem::limits::JOURNAL_SLOT_SIZE
    );
    assert_eq!(define(&text, "MNEMO_LOG_SIZE_MIN"), mnemo::LOG_SIZE_MIN);
}
