//! The port checklist and its SARIF 2.1.0 form, validated against the SARIF schema
//! (`tests/data/sarif-schema-2.1.0.json`).

use std::path::PathBuf;

use mnemo_analyze::{analyze, sarif, text, Options, PortItem, Report, Strategy};

fn run(path: &str, loads: &[&str]) -> Report {
    let options = Options {
        paths: vec![PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/c")
            .join(path)],
        load_functions: loads.iter().map(|s| s.to_string()).collect(),
        extra_flags: Vec::new(),
        strategy: Strategy::Load,
        progress: false,
        jobs: 1,
    };
    match analyze(&options) {
        Ok(report) => report,
        Err(e) => panic!("analysis of {path} failed: {e}"),
    }
}

fn item<'r>(report: &'r Report, name: &str) -> &'r PortItem {
    report
        .checklist
        .as_ref()
        .expect("the load strategy ran")
        .iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("{name} not on the checklist"))
}

fn schema() -> jsonschema::Validator {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/sarif-schema-2.1.0.json");
    let text = std::fs::read_to_string(&path).expect("the SARIF schema is in tests/data");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("the schema is JSON");
    jsonschema::validator_for(&schema).expect("the SARIF schema compiles")
}

fn errors(validator: &jsonschema::Validator, log: &serde_json::Value) -> Vec<String> {
    validator
        .iter_errors(log)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

#[test]
fn checklist_lists_allocations_and_stores_of_each_persistent_type() {
    let report = run("port.c", &["load"]);
    let names: Vec<&str> = report
        .checklist
        .as_ref()
        .expect("checklist")
        .iter()
        .map(|i| i.name.as_str())
        .collect();
    // struct scratch is allocated too, but not persistent.
    assert_eq!(names, vec!["struct kv", "struct table"]);

    let kv = item(&report, "struct kv");
    let allocs: Vec<(&str, &str, u32)> = kv
        .allocations
        .iter()
        .map(|a| (a.function.as_str(), a.allocator.as_str(), a.site.line))
        .collect();
    assert_eq!(
        allocs,
        vec![
            ("kv_new", "calloc", 31),
            ("kv_spare", "pool_get", 64),
            ("kv_pull", "malloc", 85)
        ]
    );
    let stores: Vec<(&str, u32, bool)> = kv
        .mutations
        .iter()
        .map(|m| (m.function.as_str(), m.site.line, m.during_load))
        .collect();
    assert_eq!(
        stores,
        vec![
            ("kv_new", 32, true),
            ("kv_new", 33, true),
            ("table_put", 40, true),
            ("cmd_incr", 57, false),
        ]
    );
    assert_eq!(kv.mutations[3].text, "e->value++;");

    // Allocated through a cast, written while loading and, after, by its constructor.
    let table = item(&report, "struct table");
    let allocs: Vec<(&str, u32)> = table
        .allocations
        .iter()
        .map(|a| (a.allocator.as_str(), a.site.line))
        .collect();
    assert_eq!(allocs, vec![("malloc", 70), ("kv_pull", 91)]);
    let after: Vec<u32> = table
        .mutations
        .iter()
        .filter(|m| !m.during_load)
        .map(|m| m.site.line)
        .collect();
    assert_eq!(after, vec![75, 76]);

    let shown = text(&report);
    assert!(
        shown
            .contains("allocate port.c:31 in kv_new: struct kv *e = calloc(1, sizeof(struct kv));"),
        "{shown}"
    );
    assert!(
        shown.contains("store    port.c:57 in cmd_incr: e->value++;   (++, after loading)"),
        "{shown}"
    );
}

#[test]
fn sarif_output_follows_the_sarif_2_1_0_schema() {
    let validator = schema();
    for (file, load) in [
        ("port.c", "load"),
        ("reach.c", "load"),
        ("exits.c", "load"),
        ("heuristics.c", "load"),
        ("bytes.c", "load"),
    ] {
        let report = run(file, &[load]);
        let log = sarif(&report);
        let problems = errors(&validator, &log);
        assert!(problems.is_empty(), "{file}: {problems:#?}");
        assert_eq!(log["version"], "2.1.0");
    }

    let report = run("port.c", &["load"]);
    let log = sarif(&report);
    let results = log["runs"][0]["results"].as_array().expect("results");
    let rule_count = |rule: &str| results.iter().filter(|r| r["ruleId"] == rule).count();
    assert_eq!(rule_count("persistent-type"), 2);
    // kv: 3 allocations (calloc, pool_get, which hands out malloc's memory, and malloc);
    // table: 2 (malloc, and kv_pull's memory cast to a table).
    assert_eq!(rule_count("allocate-persistent"), 5);
    let table = item(&report, "struct table");
    let kv = item(&report, "struct kv");
    assert_eq!(
        rule_count("persistent-store"),
        kv.mutations.len() + table.mutations.len()
    );
    let first = &results[0];
    let uri = first["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        .as_str()
        .expect("uri");
    assert!(
        uri.starts_with("file:///") && uri.ends_with("/tests/c/port.c"),
        "{uri}"
    );
    assert_eq!(
        first["locations"][0]["physicalLocation"]["region"]["startLine"],
        6
    );

    // The validator is not blind: a log without its version, or with a result whose level
    // is not one of SARIF's, is refused.
    let mut broken = log.clone();
    if let Some(map) = broken.as_object_mut() {
        map.remove("version");
    }
    assert!(!errors(&validator, &broken).is_empty());
    let mut broken = log;
    broken["runs"][0]["results"][0]["level"] = serde_json::json!("fatal");
    assert!(!errors(&validator, &broken).is_empty());
}

#[test]
fn likely_false_positives_are_results_of_level_none() {
    let report = run("exits.c", &["load"]);
    let log = sarif(&report);
    let results = log["runs"][0]["results"].as_array().expect("results");
    let level = |name: &str| {
        results
            .iter()
            .find(|r| {
                r["ruleId"] == "persistent-type"
                    && r["message"]["text"]
                        .as_str()
                        .is_some_and(|t| t.starts_with(&format!("{name} ")))
            })
            .map(|r| r["level"].clone())
    };
    assert_eq!(level("struct state"), Some(serde_json::json!("note")));
    assert_eq!(level("struct report"), Some(serde_json::json!("none")));
}
