//! Parsing in worker processes (`--jobs N`) gives the same report as parsing in one.
//!
//! The workers are copies of the running program, so this test drives the `mnemo-analyze`
//! binary rather than the library.

use std::path::Path;
use std::process::Command;

/// Writes a program of `files` units: `load` in unit 0 calls `step1` in unit 1, which calls
/// `step2`, ...; each unit defines a struct its function writes, and unit 3 also defines the
/// `helper` that two other units define too, to check that duplicates resolve alike. Each
/// function ends in a long `else if` chain, whose facts nest deeply on their way back from a
/// worker (they once failed to cross, and the parent parsed the share itself).
fn write_program(dir: &Path, files: usize) {
    for i in 0..files {
        let next = if i + 1 < files {
            format!("void step{}(struct s{} *p);\n", i + 1, i + 1)
        } else {
            String::new()
        };
        let call = if i + 1 < files {
            format!("    step{}((struct s{} *)0);\n", i + 1, i + 1)
        } else {
            String::new()
        };
        let name = if i == 0 {
            "load".to_string()
        } else {
            format!("step{i}")
        };
        let helper = if i % 7 == 3 {
            format!("int helper(int *x) {{ return *x + {i}; }}\n")
        } else {
            String::new()
        };
        let chain: String = (0..80)
            .map(|k| format!("    if (p->v == {k} && step_ok(p->v)) p->v++;\n    else"))
            .collect();
        let text = format!(
            "int step_ok(int v);\nstruct s{i} {{ int v; }};\nstruct s{j};\n{next}{helper}\
             void {name}(struct s{i} *p)\n{{\n    p->v = {i};\n{call}{chain} p->v = 0;\n}}\n",
            j = i + 1
        );
        let path = dir.join(format!("unit{i:02}.c"));
        if let Err(e) = std::fs::write(&path, text) {
            panic!("cannot write {}: {e}", path.display());
        }
    }
}

fn report(dir: &Path, jobs: &str) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_mnemo-analyze"))
        .args([
            "--json",
            "--strategy",
            "both",
            "--load",
            "load",
            "--jobs",
            jobs,
        ])
        .arg(dir)
        .output()
        .expect("mnemo-analyze runs");
    assert!(
        output.status.success(),
        "jobs={jobs}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut json: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("the report is JSON");
    json["summary"]["seconds"] = serde_json::Value::Null;
    json
}

#[test]
fn workers_give_the_same_report_as_one_process() {
    let dir = tempfile::tempdir().expect("temporary directory");
    write_program(dir.path(), 24);
    let mut one = report(dir.path(), "1");
    let mut three = report(dir.path(), "3");
    // The two workers answered: nothing fell back to parsing in the parent.
    assert_eq!(one["summary"]["processes"], 1);
    assert_eq!(three["summary"]["processes"], 3);
    one["summary"]["processes"] = serde_json::Value::Null;
    three["summary"]["processes"] = serde_json::Value::Null;
    assert_eq!(one["summary"]["units"], 24);
    assert_eq!(one["summary"]["types_found"], 24);
    assert_eq!(one["summary"]["functions_visited"], 24);
    assert_eq!(one, three);
}
