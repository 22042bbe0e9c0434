//! The report as text for a person, and as SARIF 2.1.0 for editors and code scanning (the
//! JSON form is the report's own serialization).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::analysis::{BacktrackFinding, Finding, LoadReport, PortItem, Report};
use crate::facts::Site;

/// Mutation sites listed per type in text output before "and N more" (JSON and SARIF list
/// them all).
const MUTATIONS_SHOWN_MAX: usize = 8;

/// The SARIF version written, and the schema that describes it.
const SARIF_VERSION: &str = "2.1.0";
const SARIF_SCHEMA: &str =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

/// Unresolved calls listed in text output before "and N more".
const UNRESOLVED_SHOWN_MAX: usize = 20;

/// The report as text for a person.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    if let Some(load) = &report.load {
        load_section(&mut out, load);
    }
    if let Some(checklist) = &report.checklist {
        checklist_section(&mut out, checklist);
    }
    if let Some(backtrack) = &report.backtrack {
        backtrack_section(&mut out, backtrack);
    }
    if let (Some(load), Some(backtrack)) = (&report.load, &report.backtrack) {
        side_by_side(&mut out, &load.findings, backtrack);
    }
    problems(&mut out, report);
    summary(&mut out, report);
    out
}

fn load_section(out: &mut String, load: &LoadReport) {
    let (likely, suspicious): (Vec<&Finding>, Vec<&Finding>) =
        load.findings.iter().partition(|f| f.suspicion.is_none());
    let _ = writeln!(out, "Persistent types (load strategy): {}", likely.len());
    for finding in &likely {
        finding_text(out, finding);
    }
    if !suspicious.is_empty() {
        let _ = writeln!(out, "\nLikely false positives: {}", suspicious.len());
        for finding in &suspicious {
            finding_text(out, finding);
        }
    }
    if !load.unresolved.is_empty() {
        let _ = writeln!(
            out,
            "\nUnresolved calls through function pointers: {}",
            load.unresolved.len()
        );
        for u in load.unresolved.iter().take(UNRESOLVED_SHOWN_MAX) {
            let _ = write!(out, "  {}  {}() in {}", u.site, u.callee, u.function);
            if !u.candidates.is_empty() {
                let more = u.candidate_count - u.candidates.len();
                let more = if more > 0 {
                    format!(", and {more} more")
                } else {
                    String::new()
                };
                let _ = write!(out, "; may call {}{more}", u.candidates.join(", "));
            }
            out.push('\n');
        }
        if load.unresolved.len() > UNRESOLVED_SHOWN_MAX {
            let _ = writeln!(
                out,
                "  ... and {} more (see --json)",
                load.unresolved.len() - UNRESOLVED_SHOWN_MAX
            );
        }
    }
    if !load.skipped.is_empty() {
        let _ = writeln!(
            out,
            "\nSkipped (no pointer arguments): {}",
            load.skipped.join(", ")
        );
    }
    out.push('\n');
}

fn finding_text(out: &mut String, finding: &Finding) {
    let _ = writeln!(
        out,
        "\n  {}  (defined at {})",
        finding.name, finding.definition
    );
    if let Some(s) = &finding.suspicion {
        let _ = writeln!(out, "    likely false positive ({}): {}", s.kind, s.reason);
    }
    let chain: Vec<String> = finding
        .chain
        .iter()
        .map(|step| format!("{} [{}]", step.function, step.site))
        .collect();
    let _ = writeln!(out, "    via   {}", chain.join(" -> "));
    if let Some(first) = finding.writes.first() {
        let _ = writeln!(
            out,
            "    write {}: {}   ({}, {})",
            first.site, first.text, first.how, first.why
        );
    }
    if let Some(reach) = &finding.reach {
        let _ = writeln!(
            out,
            "    reach {}: {}   (field `{}` read in {})",
            reach.site, reach.text, reach.field, reach.function
        );
        let w = &reach.leads_to;
        let _ = writeln!(
            out,
            "          leads to {} in {}: {}   ({}, {})",
            w.site, w.function, w.text, w.how, w.why
        );
    }
    if let Some(kept) = &finding.kept {
        let _ = writeln!(out, "    lasts {kept}");
    }
    if finding.write_count > 1 {
        let _ = writeln!(
            out,
            "    and {} more write site(s)",
            finding.write_count - 1
        );
    }
}

fn backtrack_section(out: &mut String, findings: &[BacktrackFinding]) {
    let _ = writeln!(
        out,
        "Serialized types (backtrack strategy): {}",
        findings.len()
    );
    for f in findings {
        let _ = writeln!(out, "\n  {}  (defined at {})", f.name, f.definition);
        if let Some(s) = &f.suspicion {
            let _ = writeln!(out, "    likely false positive ({}): {}", s.kind, s.reason);
        }
        let path: Vec<String> = f
            .path
            .iter()
            .map(|step| format!("{} [{}]", step.function, step.site))
            .collect();
        let _ = writeln!(out, "    path  {}", path.join(" -> "));
        let _ = writeln!(
            out,
            "    sink  {}: {}   ({}; {} sink(s) in all)",
            f.sink.site, f.sink.text, f.sink.how, f.sink_count
        );
    }
    out.push('\n');
}

fn side_by_side(out: &mut String, load: &[Finding], backtrack: &[BacktrackFinding]) {
    // Per type: (load, backtrack), each "-" (not found), "yes", or "yes?" (likely false
    // positive).
    let mark = |suspicious: bool| if suspicious { "yes?" } else { "yes" };
    let mut rows: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    for f in load {
        rows.entry(&f.name).or_insert(("-", "-")).0 = mark(f.suspicion.is_some());
    }
    for f in backtrack {
        rows.entry(&f.name).or_insert(("-", "-")).1 = mark(f.suspicion.is_some());
    }
    let width = rows.keys().map(|k| k.len()).max().unwrap_or(4).max(4);
    let _ = writeln!(out, "Side by side (yes? = likely false positive):");
    let _ = writeln!(out, "  {:width$}  load  backtrack", "type");
    for (name, (l, b)) in rows {
        let _ = writeln!(out, "  {name:width$}  {l:4}  {b}");
    }
    out.push('\n');
}

fn problems(out: &mut String, report: &Report) {
    if report.problems.is_empty() {
        return;
    }
    let _ = writeln!(out, "Sources with problems: {}", report.problems.len());
    for p in &report.problems {
        let what = if p.skipped {
            "skipped"
        } else {
            "parsed with errors"
        };
        let _ = writeln!(out, "  {} ({what}): {}", p.file, p.reason);
    }
    out.push('\n');
}

fn summary(out: &mut String, report: &Report) {
    let s = &report.summary;
    let _ = writeln!(
        out,
        "Summary: {} types in the program, {} found persistent ({} likely false positives), \
         {} serialized (backtrack); {} of {} functions visited; {} units ({} skipped) \
         parsed by {} process(es), {} lines; {:.2} s",
        s.types_in_program,
        s.types_found,
        s.types_suspicious,
        s.types_found_backtrack,
        s.functions_visited,
        s.functions_in_program,
        s.units,
        s.units_skipped,
        s.processes,
        s.lines,
        s.seconds
    );
}

fn checklist_section(out: &mut String, checklist: &[PortItem]) {
    let items: Vec<&PortItem> = checklist.iter().filter(|i| i.suspicion.is_none()).collect();
    let _ = writeln!(
        out,
        "Port checklist (persistent types, likely false positives left out): {}",
        items.len()
    );
    for item in items {
        let after = item.mutations.iter().filter(|m| !m.during_load).count();
        let _ = writeln!(
            out,
            "\n  {}  (defined at {}): {} allocation site(s), {} store(s) ({} only after loading)",
            item.name,
            item.definition,
            item.allocations.len(),
            item.mutations.len(),
            after
        );
        for a in &item.allocations {
            let _ = writeln!(
                out,
                "    allocate {} in {}: {}   ({} -> mnemo_pmalloc)",
                a.site, a.function, a.text, a.allocator
            );
        }
        // Stores that run only after loading first: those are the ones a port must wrap.
        let mut stores: Vec<_> = item.mutations.iter().collect();
        stores.sort_by_key(|m| m.during_load);
        for m in stores.iter().take(MUTATIONS_SHOWN_MAX) {
            let when = if m.during_load {
                "also while loading"
            } else {
                "after loading"
            };
            let _ = writeln!(
                out,
                "    store    {} in {}: {}   ({}, {when})",
                m.site, m.function, m.text, m.how
            );
        }
        if stores.len() > MUTATIONS_SHOWN_MAX {
            let _ = writeln!(
                out,
                "    ... and {} more store(s) (see --format json or sarif)",
                stores.len() - MUTATIONS_SHOWN_MAX
            );
        }
    }
    out.push('\n');
}

/// The rules of the SARIF output: (id, name, short description, full description).
const SARIF_RULES: &[(&str, &str, &str, &str)] = &[
    (
        "persistent-type",
        "PersistentType",
        "A type that holds persistent state",
        "The program creates or modifies objects of this type while it restores its state at \
         start-up (or reaches the objects loading writes through it): its objects belong in \
         persistent memory.",
    ),
    (
        "allocate-persistent",
        "AllocatePersistent",
        "Allocation of a persistent type",
        "This call allocates objects of a persistent type: allocate them in persistent memory \
         (mnemo_pmalloc) instead.",
    ),
    (
        "persistent-store",
        "PersistentStore",
        "Store into a persistent type",
        "This statement changes an object of a persistent type: once the object lives in \
         persistent memory, the store needs a transaction or a sync point.",
    ),
];

/// The report as a SARIF 2.1.0 log: one result per persistent type (at its definition, with
/// the evidence chain as related locations), per allocation site and per store. Likely false
/// positives get the level `none`, the rest `note` (types) or `warning` (sites to change).
pub fn sarif(report: &Report) -> Value {
    let mut results = Vec::new();
    let location = |site: &Site| sarif_location(report, site);
    if let Some(load) = &report.load {
        for finding in &load.findings {
            results.push(type_result(finding, &location));
        }
    }
    for item in report.checklist.iter().flatten() {
        let level = if item.suspicion.is_some() {
            "none"
        } else {
            "warning"
        };
        for a in &item.allocations {
            results.push(json!({
                "ruleId": "allocate-persistent",
                "ruleIndex": 1,
                "level": level,
                "message": {"text": format!(
                    "{} allocates {} (persistent): allocate it with mnemo_pmalloc",
                    a.allocator, item.name
                )},
                "locations": [location(&a.site)],
            }));
        }
        for m in &item.mutations {
            let when = if m.during_load {
                "also runs while loading"
            } else {
                "runs after loading"
            };
            results.push(json!({
                "ruleId": "persistent-store",
                "ruleIndex": 2,
                "level": level,
                "message": {"text": format!(
                    "store ({}) into {} (persistent) in {}, which {when}: needs a \
                     transaction or a sync point",
                    m.how, item.name, m.function
                )},
                "locations": [location(&m.site)],
                "properties": {"duringLoad": m.during_load},
            }));
        }
    }
    let rules: Vec<Value> = SARIF_RULES
        .iter()
        .map(|(id, name, short, full)| {
            json!({
                "id": id,
                "name": name,
                "shortDescription": {"text": short},
                "fullDescription": {"text": full},
            })
        })
        .collect();
    json!({
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [{
            "tool": {"driver": {
                "name": "mnemo analyze",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "results": results,
        }],
    })
}

fn type_result(finding: &Finding, location: &dyn Fn(&Site) -> Value) -> Value {
    let mut related: Vec<Value> = Vec::new();
    let mut add = |site: &Site, text: String| {
        let mut l = location(site);
        if let Some(map) = l.as_object_mut() {
            map.insert("id".into(), json!(related.len()));
            map.insert("message".into(), json!({ "text": text }));
        }
        related.push(l);
    };
    for step in &finding.chain {
        add(&step.site, format!("enters {}", step.function));
    }
    if let Some(w) = finding.writes.first() {
        add(&w.site, format!("writes it ({}, {})", w.how, w.why));
    }
    if let Some(r) = &finding.reach {
        add(&r.site, format!("reads its field `{}`", r.field));
        add(&r.leads_to.site, "which leads to this write".to_string());
    }
    let (level, why) = match &finding.suspicion {
        Some(s) => (
            "none",
            format!(" Likely a false positive ({}): {}.", s.kind, s.reason),
        ),
        None => ("note", String::new()),
    };
    let how = if finding.reach.is_some() {
        "reaches objects that loading writes"
    } else {
        "is written while loading"
    };
    json!({
        "ruleId": "persistent-type",
        "ruleIndex": 0,
        "level": level,
        "message": {"text": format!("{} {how}: it holds persistent state.{why}", finding.name)},
        "locations": [location(&finding.definition)],
        "relatedLocations": related,
    })
}

/// A SARIF location: the file as an absolute `file:` URI when the analysis knows it, else
/// as shown (a relative reference).
fn sarif_location(report: &Report, site: &Site) -> Value {
    let uri = match report.paths.get(&site.file) {
        Some(path) if path.is_absolute() => format!("file://{}", uri_path(&path.to_string_lossy())),
        _ => uri_path(&site.file),
    };
    json!({
        "physicalLocation": {
            "artifactLocation": {"uri": uri},
            "region": {"startLine": site.line.max(1)},
        }
    })
}

/// Percent-encodes what a URI path cannot hold as it is.
fn uri_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::uri_path;

    #[test]
    fn uri_paths_are_percent_encoded() {
        assert_eq!(uri_path("/tmp/a b/c#d.c"), "/tmp/a%20b/c%23d.c");
        assert_eq!(uri_path("src/rdb.c"), "src/rdb.c");
    }
}
