//! The report as text for a person.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::analysis::{BacktrackFinding, Finding, LoadReport, Report};

/// Unresolved calls listed in text output before "and N more".
const UNRESOLVED_SHOWN_MAX: usize = 20;

pub(crate) fn text(report: &Report) -> String {
    let mut out = String::new();
    if let Some(load) = &report.load {
        load_section(&mut out, load);
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
