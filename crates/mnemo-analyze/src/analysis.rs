//! The strategies, run on the extracted [`facts`](crate::facts).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::time::Instant;

use serde::Serialize;

use crate::exits::Exits;
use crate::facts::{Function, Problem, Program, Record, Root, Site, Val, Write};
use crate::{Error, Options};

/// Calls that write a buffer to a file (or a socket): name, buffer arguments, and the index
/// from which every further (variadic) argument is written too.
const FILE_WRITERS: &[(&str, &[usize], Option<usize>)] = &[
    ("write", &[1], None),
    ("pwrite", &[1], None),
    ("pwrite64", &[1], None),
    ("fwrite", &[0], None),
    ("fwrite_unlocked", &[0], None),
    ("fputs", &[0], None),
    ("fprintf", &[], Some(2)),
    ("dprintf", &[], Some(2)),
    ("send", &[1], None),
    ("sendto", &[1], None),
];

/// How far the backtracking strategy follows values up through callers and local copies.
const BACKTRACK_DEPTH_MAX: usize = 8;

/// Work items the backtracking strategy may process, a bound for huge call graphs.
const BACKTRACK_STEPS_MAX: usize = 1_000_000;

/// Write sites kept per type in the report (the count is always exact).
const SITES_PER_TYPE_MAX: usize = 20;

/// Candidate targets listed per unresolved call.
const CANDIDATES_MAX: usize = 10;

/// Close names suggested for a load function that does not exist.
const SUGGESTIONS_MAX: usize = 5;

/// Which strategies to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    /// Types written by the load functions and everything they call (NVMOVE's).
    Load,
    /// Types whose contents reach file-writing calls.
    Backtrack,
    /// Both, side by side.
    Both,
}

impl Strategy {
    /// Whether the load strategy runs.
    pub fn runs_load(self) -> bool {
        matches!(self, Strategy::Load | Strategy::Both)
    }

    /// Whether the backtracking strategy runs.
    pub fn runs_backtrack(self) -> bool {
        matches!(self, Strategy::Backtrack | Strategy::Both)
    }
}

/// The result of an analysis.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The numbers.
    pub summary: Summary,
    /// The load strategy's result, when it ran.
    pub load: Option<LoadReport>,
    /// The backtracking strategy's findings, when it ran.
    pub backtrack: Option<Vec<BacktrackFinding>>,
    /// Sources that did not parse cleanly (`skipped` ones contributed nothing).
    pub problems: Vec<Problem>,
    /// What a port to persistent memory changes, per persistent type (when the load strategy
    /// ran), in the order of `load.findings`.
    pub checklist: Option<Vec<PortItem>>,
    /// The file behind each name shown in a [`Site`] (for output formats that need absolute
    /// locations, such as SARIF).
    #[serde(skip)]
    pub paths: BTreeMap<String, std::path::PathBuf>,
}

/// The port checklist of one persistent type: where its objects are allocated (the calls to
/// change to `mnemo_pmalloc`) and where they are changed (the stores that need a transaction
/// or a sync point once the objects live in persistent memory).
#[derive(Debug, Clone, Serialize)]
pub struct PortItem {
    /// The type.
    pub name: String,
    /// Where it is defined.
    pub definition: Site,
    /// Carried from the finding: a likely false positive may need no change at all.
    pub suspicion: Option<Suspicion>,
    /// Every call in the program that allocates objects of the type.
    pub allocations: Vec<AllocationSite>,
    /// Every statement in the program that stores into objects of the type.
    pub mutations: Vec<MutationSite>,
}

/// A call that allocates objects of a persistent type.
#[derive(Debug, Clone, Serialize)]
pub struct AllocationSite {
    /// The function making the call.
    pub function: String,
    /// Where.
    pub site: Site,
    /// The allocator called (`malloc`, `zmalloc`, ...).
    pub allocator: String,
    /// The source line.
    pub text: String,
}

/// A statement that stores into an object of a persistent type.
#[derive(Debug, Clone, Serialize)]
pub struct MutationSite {
    /// The function it is in.
    pub function: String,
    /// Where.
    pub site: Site,
    /// `=`, `++`, `memcpy`, ...
    pub how: String,
    /// The source line.
    pub text: String,
    /// The function also runs while loading (it is reached from the load functions); the
    /// others run only after loading.
    pub during_load: bool,
}

/// The numbers of an analysis.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Translation units parsed.
    pub units: usize,
    /// Processes that parsed them (see `--jobs`).
    pub processes: usize,
    /// Source files that could not be parsed at all.
    pub units_skipped: usize,
    /// Lines of the sources and project headers parsed.
    pub lines: usize,
    /// Structs and unions defined in the program's sources.
    pub types_in_program: usize,
    /// Types the load strategy found persistent.
    pub types_found: usize,
    /// Of those, flagged as likely false positives.
    pub types_suspicious: usize,
    /// Types the backtracking strategy found serialized.
    pub types_found_backtrack: usize,
    /// Functions whose bodies the load strategy analyzed.
    pub functions_visited: usize,
    /// Functions defined in the program.
    pub functions_in_program: usize,
    /// Wall-clock seconds for the whole analysis, parsing included.
    pub seconds: f64,
}

/// What the load strategy found.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// The persistent types, sorted by name; likely false positives carry a [`Suspicion`].
    pub findings: Vec<Finding>,
    /// Functions analyzed, in breadth-first order.
    pub visited: Vec<String>,
    /// Functions reached but skipped: no arguments, or only non-pointer scalars.
    pub skipped: Vec<String>,
    /// Functions called without a body in the sources (the C library, other libraries),
    /// not descended into.
    pub external: Vec<String>,
    /// Calls through function pointers, which the analysis cannot follow.
    pub unresolved: Vec<Unresolved>,
}

/// A persistent type.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// `struct name`, `union name`, or a typedef name.
    pub name: String,
    /// Where it is defined.
    pub definition: Site,
    /// How the first write was reached: the load function first, each step the function
    /// entered and the call site that entered it.
    pub chain: Vec<ChainStep>,
    /// Write sites (the first is the end of `chain`), at most 20 (`write_count` is exact).
    pub writes: Vec<WriteSite>,
    /// How many write sites there are in all.
    pub write_count: usize,
    /// Why this may be a false positive.
    pub suspicion: Option<Suspicion>,
    /// For a type that loading does not write but reaches: a pointer field of it read during
    /// loading and the write that the pointer leads to (the type is then persistent as the
    /// container that keeps the written objects reachable).
    pub reach: Option<Reach>,
    /// For a written type not flagged: its first write while loading into an object that
    /// outlasts loading as far as the `released` rule can tell, and why (the object is not
    /// freed by the function holding it, or comes from a global, a pointer field, or a caller
    /// that keeps it).
    pub kept: Option<String>,
}

/// Why a type counts as a reached container: the read of one of its pointer fields during
/// loading, and a write into the object that pointer leads to.
#[derive(Debug, Clone, Serialize)]
pub struct Reach {
    /// The function reading the field.
    pub function: String,
    /// The field read.
    pub field: String,
    /// Where it is read.
    pub site: Site,
    /// The source line of the read.
    pub text: String,
    /// A write that the pointer read leads to (in this function, or in the callee it is
    /// passed to, or deeper).
    pub leads_to: WriteSite,
}

/// One step of an evidence chain.
#[derive(Debug, Clone, Serialize)]
pub struct ChainStep {
    /// The function entered.
    pub function: String,
    /// The call that entered it (the definition, for the first step).
    pub site: Site,
}

/// A statement that writes a persistent type.
#[derive(Debug, Clone, Serialize)]
pub struct WriteSite {
    /// The function it is in.
    pub function: String,
    /// Where.
    pub site: Site,
    /// The kind of write: `=`, `+=`, `++`, `memcpy`, `initializer`, ...
    pub how: String,
    /// Why the type counts as written.
    pub why: String,
    /// The source line.
    pub text: String,
}

/// Why a finding is likely a false positive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Suspicion {
    /// `iterator`, `alignment-variant`, or (backtracking only) `logging`.
    pub kind: String,
    /// The evidence.
    pub reason: String,
}

/// A call the analysis could not follow.
#[derive(Debug, Clone, Serialize)]
pub struct Unresolved {
    /// The function making the call.
    pub function: String,
    /// The callee expression.
    pub callee: String,
    /// Where.
    pub site: Site,
    /// Functions of the program whose address is taken and whose type matches the call: the
    /// places to look, and candidates for another `--load` (at most 10, sorted).
    pub candidates: Vec<String>,
    /// How many candidates there are in all.
    pub candidate_count: usize,
}

/// A type whose contents reach a file-writing call.
#[derive(Debug, Clone, Serialize)]
pub struct BacktrackFinding {
    /// `struct name`, `union name`, or a typedef name.
    pub name: String,
    /// Where it is defined.
    pub definition: Site,
    /// The file-writing call the data reaches.
    pub sink: WriteSite,
    /// From the function holding the type back to the sink: each function and the site
    /// where the value moves on (a call, or a copy).
    pub path: Vec<ChainStep>,
    /// How many sinks it reaches.
    pub sink_count: usize,
    /// Why this may be a false positive.
    pub suspicion: Option<Suspicion>,
}

pub(crate) fn run(program: &Program, options: &Options, started: Instant) -> Result<Report, Error> {
    let mut lines = SourceLines {
        program,
        files: HashMap::new(),
    };
    let load = if options.strategy.runs_load() {
        Some(load_strategy(program, &options.load_functions, &mut lines)?)
    } else {
        None
    };
    let backtrack = options
        .strategy
        .runs_backtrack()
        .then(|| backtrack_strategy(program, &mut lines));
    let load_findings = load.as_ref().map(|l| l.findings.as_slice()).unwrap_or(&[]);
    let summary = Summary {
        units: program.units,
        processes: program.processes,
        units_skipped: program.problems.iter().filter(|p| p.skipped).count(),
        lines: program.lines,
        types_in_program: program.records.len(),
        types_found: load_findings.len(),
        types_suspicious: load_findings
            .iter()
            .filter(|f| f.suspicion.is_some())
            .count(),
        types_found_backtrack: backtrack.as_ref().map(Vec::len).unwrap_or(0),
        functions_visited: load.as_ref().map(|l| l.visited.len()).unwrap_or(0),
        functions_in_program: program.functions.len(),
        seconds: started.elapsed().as_secs_f64(),
    };
    let checklist = load
        .as_ref()
        .map(|l| port_checklist(program, l, &mut lines));
    Ok(Report {
        summary,
        load,
        backtrack,
        problems: program.problems.clone(),
        checklist,
        paths: program.paths.clone(),
    })
}

/// The port checklist: for each persistent type, its allocation and mutation sites in the
/// whole program.
fn port_checklist(program: &Program, load: &LoadReport, lines: &mut SourceLines) -> Vec<PortItem> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut items: Vec<PortItem> = Vec::new();
    // Findings are keyed by name and definition; records by USR.
    let by_place: HashMap<(&str, &Site), usize> = load
        .findings
        .iter()
        .enumerate()
        .map(|(i, f)| ((f.name.as_str(), &f.definition), i))
        .collect();
    for (key, record) in &program.records {
        if let Some(&i) = by_place.get(&(record.name.as_str(), &record.site)) {
            index.insert(key.as_str(), i);
        }
    }
    for finding in &load.findings {
        items.push(PortItem {
            name: finding.name.clone(),
            definition: finding.definition.clone(),
            suspicion: finding.suspicion.clone(),
            allocations: Vec::new(),
            mutations: Vec::new(),
        });
    }
    let during_load: HashSet<&str> = load.visited.iter().map(String::as_str).collect();
    let wrappers = allocator_wrappers(program);
    for function in program.functions.values() {
        for alloc in &function.allocs {
            let inside = match alloc.through.as_deref() {
                None => None,
                Some(usr) => match wrappers.get(usr) {
                    Some(typed) => Some(typed),
                    None => continue,
                },
            };
            for key in &alloc.records {
                if inside.is_some_and(|typed| typed.contains(key.as_str())) {
                    continue;
                }
                if let Some(item) = index.get(key.as_str()).and_then(|&i| items.get_mut(i)) {
                    item.allocations.push(AllocationSite {
                        function: function.name.clone(),
                        site: alloc.site.clone(),
                        allocator: alloc.callee.clone(),
                        text: lines.line(&alloc.site),
                    });
                }
            }
        }
        for write in &function.writes {
            for (key, _) in &write.records {
                if let Some(item) = index.get(key.as_str()).and_then(|&i| items.get_mut(i)) {
                    item.mutations.push(MutationSite {
                        function: function.name.clone(),
                        site: write.site.clone(),
                        how: write.how.clone(),
                        text: lines.line(&write.site),
                        during_load: during_load.contains(function.name.as_str()),
                    });
                }
            }
        }
    }
    for item in &mut items {
        item.allocations.sort_by(|a, b| a.site.cmp(&b.site));
        item.allocations.dedup_by(|a, b| a.site == b.site);
        item.mutations.sort_by(|a, b| a.site.cmp(&b.site));
        item.mutations.dedup_by(|a, b| a.site == b.site);
    }
    items
}

/// Lines of source files, read once each, for quoting write sites.
struct SourceLines<'p> {
    program: &'p Program,
    files: HashMap<String, Vec<String>>,
}

impl SourceLines<'_> {
    fn line(&mut self, site: &Site) -> String {
        let program = self.program;
        let lines = self.files.entry(site.file.clone()).or_insert_with(|| {
            let path = program
                .paths
                .get(&site.file)
                .cloned()
                .unwrap_or_else(|| site.file.clone().into());
            std::fs::read(path)
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .lines()
                        .map(|l| l.trim().to_string())
                        .collect()
                })
                .unwrap_or_default()
        });
        let index = (site.line as usize).saturating_sub(1);
        lines.get(index).cloned().unwrap_or_default()
    }
}

fn load_strategy(
    program: &Program,
    load_functions: &[String],
    lines: &mut SourceLines,
) -> Result<LoadReport, Error> {
    let by_name = crate::extract::function_names(program);
    let mut queue = VecDeque::new();
    // For each function reached: the function that called it first and the call site.
    let mut parent: HashMap<&str, Option<(&str, &Site)>> = HashMap::new();
    for name in load_functions {
        let Some(usrs) = by_name.get(name) else {
            return Err(Error::LoadFunctionNotFound {
                name: name.clone(),
                suggestions: suggestions(name, by_name.keys()),
            });
        };
        for usr in usrs {
            if parent.insert(usr.as_str(), None).is_none() {
                queue.push_back(usr.as_str());
            }
        }
    }
    let mut report = LoadReport {
        findings: Vec::new(),
        visited: Vec::new(),
        skipped: Vec::new(),
        external: Vec::new(),
        unresolved: Vec::new(),
    };
    let targets = pointer_targets(program);
    let mut external = BTreeSet::new();
    let mut found: BTreeMap<&str, Finding> = BTreeMap::new();
    // The functions analyzed, in breadth-first order.
    let mut order: Vec<&str> = Vec::new();
    while let Some(usr) = queue.pop_front() {
        let Some(function) = program.functions.get(usr) else {
            continue;
        };
        let is_root = matches!(parent.get(usr), Some(None));
        // A function without pointer arguments that allocates program records is a
        // constructor (`createZsetObject(void)`): what it builds is what loading keeps.
        if !is_root && !function.takes_pointers && function.allocs.is_empty() {
            report.skipped.push(function.name.clone());
            continue;
        }
        report.visited.push(function.name.clone());
        order.push(usr);
        for write in &function.writes {
            for (key, why) in &write.records {
                let Some(record) = program.records.get(key) else {
                    continue;
                };
                let site = WriteSite {
                    function: function.name.clone(),
                    site: write.site.clone(),
                    how: write.how.clone(),
                    why: why.clone(),
                    text: lines.line(&write.site),
                };
                let finding = found.entry(key.as_str()).or_insert_with(|| Finding {
                    name: record.name.clone(),
                    definition: record.site.clone(),
                    chain: chain(program, &parent, usr),
                    writes: Vec::new(),
                    write_count: 0,
                    suspicion: None,
                    reach: None,
                    kept: None,
                });
                finding.write_count += 1;
                if finding.writes.len() < SITES_PER_TYPE_MAX {
                    finding.writes.push(site);
                }
            }
        }
        for call in &function.calls {
            match &call.callee {
                None => {
                    let all = call
                        .signature
                        .as_ref()
                        .and_then(|s| targets.get(s.as_str()))
                        .cloned()
                        .unwrap_or_default();
                    report.unresolved.push(Unresolved {
                        function: function.name.clone(),
                        callee: call.callee_text.clone(),
                        site: call.site.clone(),
                        candidate_count: all.len(),
                        candidates: all.into_iter().take(CANDIDATES_MAX).collect(),
                    });
                }
                Some(callee) if program.functions.contains_key(callee) => {
                    if !parent.contains_key(callee.as_str()) {
                        parent.insert(callee.as_str(), Some((usr, &call.site)));
                        queue.push_back(callee.as_str());
                    }
                }
                Some(_) => {
                    external.insert(call.callee_text.clone());
                }
            }
        }
    }
    let reaches = param_reaches(program, lines);
    for usr in &order {
        let Some(function) = program.functions.get(*usr) else {
            continue;
        };
        for (key, reach) in reached_containers(function, &reaches, lines) {
            if found.contains_key(key) {
                continue;
            }
            let Some(record) = program.records.get(key) else {
                continue;
            };
            found.insert(
                key,
                Finding {
                    name: record.name.clone(),
                    definition: record.site.clone(),
                    chain: chain(program, &parent, usr),
                    writes: Vec::new(),
                    write_count: 0,
                    suspicion: None,
                    reach: Some(reach),
                    kept: None,
                },
            );
        }
    }
    let exits = Exits::new(program);
    let live = live_functions(program, &exits, &order, &parent);
    let dead = exit_only(program, &exits, &order, &parent, &live, &found);
    let stack = stack_only(program, &order, &parent, &live, &found);
    // Clean-up and notifiers cut out of the live path: what is left builds what is loaded.
    let cuts = Cuts::new(program, &parent, &live);
    let teardown = teardown_only(program, &order, &parent, &live, &cuts, &found);
    let private = private_static_only(program, &order, &live, &found);
    // Objects are followed on the building part only: what clean-up and notifiers write is
    // theirs (a client that a notifier's context keeps in a pool does not make the load's own
    // client, released before loading ends, last).
    let mut released =
        crate::released::released_only(program, &order, &parent, &cuts.untold, &found);
    let cut_writes = cuts.written_beneath(program, &order, &live);
    for (key, flag) in released.flags.iter_mut() {
        if cut_writes.contains(key) {
            flag.reason.push_str(
                "; its other writes while loading are beneath functions that release memory, \
                 tell others about a change or record measurements",
            );
        }
    }
    for (key, mut finding) in found {
        finding.suspicion = suspicion(program, key, writes_loop_only(program, key))
            .or_else(|| stack.get(key).cloned())
            .or_else(|| private.get(key).cloned())
            .or_else(|| dead.get(key).cloned())
            .or_else(|| released.flags.get(key).cloned())
            .or_else(|| teardown.get(key).cloned());
        if finding.suspicion.is_none() {
            finding.kept = released.kept.get(key).cloned();
        }
        report.findings.push(finding);
    }
    report
        .findings
        .sort_by(|a, b| (&a.name, &a.definition).cmp(&(&b.name, &b.definition)));
    report.external = external.into_iter().collect();
    Ok(report)
}

/// The findings whose every write (or read, for a reached container) is on a path that ends
/// the process: in a function reached only through functions that cannot return or calls
/// after which the process ends, or followed by such a call. Each with the reason.
fn exit_only<'p>(
    program: &'p Program,
    exits: &Exits,
    order: &[&'p str],
    parent: &HashMap<&'p str, Option<(&'p str, &'p Site)>>,
    live: &HashSet<&'p str>,
    found: &BTreeMap<&'p str, Finding>,
) -> HashMap<&'p str, Suspicion> {
    // Per record: reached on a live path; else the first dead place (function, doomed
    // write).
    let mut alive: HashSet<&str> = HashSet::new();
    let mut first_dead: HashMap<&str, (&str, Option<&Site>)> = HashMap::new();
    for &usr in order {
        let Some(f) = program.functions.get(usr) else {
            continue;
        };
        let in_live = live.contains(usr);
        for write in &f.writes {
            let doomed = in_live && exits.ends_after(f, write.at);
            for (key, _) in &write.records {
                if in_live && !doomed {
                    alive.insert(key);
                } else {
                    first_dead
                        .entry(key)
                        .or_insert((usr, doomed.then_some(&write.site)));
                }
            }
        }
    }
    let mut out = HashMap::new();
    for (&key, finding) in found {
        let reach_alive = finding.reach.as_ref().is_some_and(|r| {
            order.iter().any(|&usr| {
                live.contains(usr)
                    && program
                        .functions
                        .get(usr)
                        .is_some_and(|f| f.name == r.function)
            })
        });
        if alive.contains(key) || reach_alive {
            continue;
        }
        let reason = match first_dead.get(key) {
            Some((_, Some(site))) => format!(
                "written only where the process ends next: {site} is followed by a call \
                 that cannot return"
            ),
            Some((usr, None)) => dead_entry(program, exits, parent, live, usr),
            None => match order.iter().find(|&&usr| {
                finding.reach.as_ref().is_some_and(|r| {
                    program
                        .functions
                        .get(usr)
                        .is_some_and(|f| f.name == r.function)
                })
            }) {
                Some(usr) => dead_entry(program, exits, parent, live, usr),
                None => continue,
            },
        };
        out.insert(
            key,
            Suspicion {
                kind: "exit-path".into(),
                reason,
            },
        );
    }
    out
}

/// The functions reached from the load functions without going through the end of the
/// process (a function that cannot return, or a call after which the process ends).
fn live_functions<'p>(
    program: &'p Program,
    exits: &Exits,
    order: &[&'p str],
    parent: &HashMap<&'p str, Option<(&'p str, &'p Site)>>,
) -> HashSet<&'p str> {
    let visited: HashSet<&str> = order.iter().copied().collect();
    let mut live: HashSet<&str> = HashSet::new();
    let mut queue: VecDeque<&str> = VecDeque::new();
    for (usr, from) in parent {
        if from.is_none() {
            live.insert(usr);
            queue.push_back(usr);
        }
    }
    while let Some(usr) = queue.pop_front() {
        let Some(f) = program.functions.get(usr) else {
            continue;
        };
        for call in &f.calls {
            let Some(callee) = call.callee.as_deref() else {
                continue;
            };
            if visited.contains(callee) && !exits.call_ends(f, call) && live.insert(callee) {
                queue.push_back(callee);
            }
        }
    }
    live
}

/// The written findings whose every write while loading is into an object on the stack: a
/// local variable of the writing function, or one whose address every caller on the load
/// path passes down (`rio r; rioInitWithFile(&r, fp);`). Such objects end with the call that
/// holds them, so they cannot be the state that survives loading.
fn stack_only<'p>(
    program: &'p Program,
    order: &[&'p str],
    parent: &HashMap<&'p str, Option<(&'p str, &'p Site)>>,
    live: &HashSet<&str>,
    found: &BTreeMap<&'p str, Finding>,
) -> HashMap<&'p str, Suspicion> {
    // Only the live load path counts: calls on paths that end the process are left out.
    let path: Vec<&str> = order.iter().copied().filter(|u| live.contains(u)).collect();
    let visited: HashSet<&str> = path.iter().copied().collect();
    // Parameters that receive only addresses of stack objects from the load path: the
    // greatest fixed point, starting from every parameter passed to on the load path
    // (the load functions' own parameters come from outside).
    let mut stack_params: HashSet<(&str, usize)> = HashSet::new();
    for &usr in &path {
        let Some(f) = program.functions.get(usr) else {
            continue;
        };
        for call in &f.calls {
            if let Some(callee) = call.callee.as_deref().filter(|c| visited.contains(c)) {
                if matches!(parent.get(callee), Some(Some(_))) {
                    stack_params.extend((0..call.stack_args.len()).map(|k| (callee, k)));
                }
            }
        }
    }
    for _ in 0..REACH_PASSES_MAX {
        let before = stack_params.len();
        for &usr in &path {
            let Some(f) = program.functions.get(usr) else {
                continue;
            };
            for call in &f.calls {
                let Some(callee) = call.callee.as_deref() else {
                    continue;
                };
                for (k, &on_stack) in call.stack_args.iter().enumerate() {
                    let forwarded = matches!(call.roots.get(k), Some(Some(Root::Param(j)))
                        if stack_params.contains(&(usr, *j)));
                    if !on_stack && !forwarded {
                        stack_params.remove(&(callee, k));
                    }
                }
            }
        }
        if stack_params.len() == before {
            break;
        }
    }
    let mut on_heap: HashSet<&str> = HashSet::new();
    let mut first: HashMap<&str, &Site> = HashMap::new();
    // Writes on paths that end the process do not count (they are flagged as such).
    for &usr in order.iter().filter(|u| live.contains(*u)) {
        let Some(f) = program.functions.get(usr) else {
            continue;
        };
        for write in &f.writes {
            let stack = write.stack
                || matches!(write.root, Some(Root::Param(i)) if stack_params.contains(&(usr, i)));
            for (key, _) in &write.records {
                if stack {
                    first.entry(key).or_insert(&write.site);
                } else {
                    on_heap.insert(key);
                }
            }
        }
    }
    let mut out = HashMap::new();
    for &key in found.keys() {
        if on_heap.contains(key) {
            continue;
        }
        if let Some(site) = first.get(key) {
            out.insert(
                key,
                Suspicion {
                    kind: "stack-only".into(),
                    reason: format!(
                        "written while loading only in objects on the stack (local variables, \
                         e.g. at {site}), which end with their function"
                    ),
                },
            );
        }
    }
    out
}

/// The written findings whose every write while loading is into a `static` variable declared
/// inside the writing function (`static struct {...} cache[N]; cache[j].id = id;`): state that
/// one function keeps for itself, a cache or a memo, which no other part of the program names.
fn private_static_only<'p>(
    program: &'p Program,
    order: &[&'p str],
    live: &HashSet<&str>,
    found: &BTreeMap<&'p str, Finding>,
) -> HashMap<&'p str, Suspicion> {
    let mut elsewhere: HashSet<&str> = HashSet::new();
    let mut first: HashMap<&str, (&str, &Site)> = HashMap::new();
    for &usr in order.iter().filter(|u| live.contains(*u)) {
        let Some(f) = program.functions.get(usr) else {
            continue;
        };
        for write in &f.writes {
            for (key, _) in &write.records {
                if write.private_static {
                    first.entry(key).or_insert((f.name.as_str(), &write.site));
                } else {
                    elsewhere.insert(key);
                }
            }
        }
    }
    let mut out = HashMap::new();
    for (&key, finding) in found {
        if finding.reach.is_some() || elsewhere.contains(key) {
            continue;
        }
        if let Some((function, site)) = first.get(key) {
            out.insert(
                key,
                Suspicion {
                    kind: "private-static".into(),
                    reason: format!(
                        "written while loading only in `static` variables declared inside \
                         the function that writes them (`{function}`, at {site}): state that \
                         function keeps to itself, such as a cache"
                    ),
                },
            );
        }
    }
    out
}

/// Words that name a function releasing memory (`freeClient`, `listRelease`,
/// `RM_FreeDict`, `dictDestroy`), lower case.
const TEARDOWN_WORDS: &[&str] = &["free", "release", "destroy"];

/// Whether a function's name says it releases memory.
fn releases(name: &str) -> bool {
    let lower = name.to_lowercase();
    TEARDOWN_WORDS.iter().any(|w| lower.contains(w))
}

/// The live functions that loading reaches without entering a function that releases memory:
/// the part of the load path that builds state rather than cleans it up.
fn building_functions<'p>(
    program: &'p Program,
    parent: &HashMap<&'p str, Option<(&'p str, &'p Site)>>,
    live: &HashSet<&'p str>,
    cleanup: &dyn Fn(&str) -> bool,
) -> HashSet<&'p str> {
    let mut building: HashSet<&str> = HashSet::new();
    let mut queue: VecDeque<&str> = VecDeque::new();
    for (usr, from) in parent {
        if from.is_none() && live.contains(usr) {
            building.insert(usr);
            queue.push_back(usr);
        }
    }
    while let Some(usr) = queue.pop_front() {
        let Some(f) = program.functions.get(usr) else {
            continue;
        };
        for call in &f.calls {
            let Some(callee) = call.callee.as_deref() else {
                continue;
            };
            let Some((callee, _)) = program.functions.get_key_value(callee) else {
                continue;
            };
            if live.contains(callee.as_str())
                && !cleanup(callee.as_str())
                && building.insert(callee.as_str())
            {
                queue.push_back(callee.as_str());
            }
        }
    }
    building
}

/// The functions that may call the C library's `free`, directly or through the program's
/// functions (a least fixed point over the whole program), by USR.
fn calls_free(program: &Program) -> HashSet<&str> {
    let mut out: HashSet<&str> = HashSet::new();
    for _ in 0..REACH_PASSES_MAX {
        let before = out.len();
        for (usr, f) in &program.functions {
            if out.contains(usr.as_str()) {
                continue;
            }
            let frees = f.calls.iter().any(|call| match call.callee.as_deref() {
                Some(callee) if program.functions.contains_key(callee) => out.contains(callee),
                _ => DEALLOCATORS.contains(&call.callee_text.as_str()),
            });
            if frees {
                out.insert(usr.as_str());
            }
        }
        if out.len() == before {
            break;
        }
    }
    out
}

/// The C library's functions that give memory back.
const DEALLOCATORS: &[&str] = &["free", "cfree"];

/// Words that name a function telling others about a change (`notifyKeyspaceEvent`,
/// `signalKeyAsReady`, `pubsubPublishMessage`, `replicationFeedSlaves`), lower case.
const NOTIFY_WORDS: &[&str] = &[
    "notify",
    "signal",
    "publish",
    "broadcast",
    "propagate",
    "replicat",
];

/// Words that name a function recording measurements of the program's own running
/// (`latencyAddSample`), lower case.
const MEASURE_WORDS: &[&str] = &["latency", "metric", "histogram"];

/// Whether a function's name says it tells others about a change.
fn notifies(name: &str) -> bool {
    let lower = name.to_lowercase();
    NOTIFY_WORDS.iter().any(|w| lower.contains(w))
}

/// Whether a canonical function type returns nothing (`void (int, char *)`).
fn returns_nothing(signature: &str) -> bool {
    signature.starts_with("void (")
}

/// The findings written while loading (or, for a reached container, read) only in functions
/// whose names say they release memory, or in functions that loading reaches only through
/// such a function (`freeClient` -> `unlinkClient` -> `listDelNode`): clean-up that loading
/// runs, not state it builds (`teardown`). Then, the findings written only beneath such
/// functions and functions that tell others about a change and return nothing
/// (`moduleNotifyKeyspaceEvent` -> `moduleCreateContext` -> `createClient`): the state of
/// the observers told, not what is loaded (`notification`).
fn teardown_only<'p>(
    program: &'p Program,
    order: &[&'p str],
    parent: &HashMap<&'p str, Option<(&'p str, &'p Site)>>,
    live: &HashSet<&'p str>,
    cuts: &Cuts<'p>,
    found: &BTreeMap<&'p str, Finding>,
) -> HashMap<&'p str, Suspicion> {
    // Per record: the live functions writing it, and whether one of them builds (with clean-up
    // cut out; with notifiers cut out too).
    let mut writers: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    let mut built: HashSet<&str> = HashSet::new();
    let mut built_told: HashSet<&str> = HashSet::new();
    for &usr in order.iter().filter(|u| live.contains(*u)) {
        let Some(f) = program.functions.get(usr) else {
            continue;
        };
        for write in &f.writes {
            for (key, _) in &write.records {
                writers.entry(key).or_default().insert(usr);
                if cuts.building.contains(usr) {
                    built.insert(key);
                }
                if cuts.untold.contains(usr) {
                    built_told.insert(key);
                }
            }
        }
    }
    let name = |usr: &str| {
        program
            .functions
            .get(usr)
            .map_or(usr.to_string(), |f| f.name.clone())
    };
    // The last function on `usr`'s chain from the load functions that `cut` picks, and the
    // call entering it.
    let via = |usr: &'p str, cut: &dyn Fn(&str) -> bool| {
        let mut at = usr;
        let mut via = None;
        for _ in 0..=parent.len() {
            if cut(at) {
                via = parent
                    .get(at)
                    .copied()
                    .flatten()
                    .map(|(_, site)| (at, site));
            }
            match parent.get(at).copied().flatten() {
                Some((caller, _)) => at = caller,
                None => break,
            }
        }
        via
    };
    let mut out = HashMap::new();
    for (&key, finding) in found {
        let usrs: Vec<&str> = match (&finding.reach, writers.get(key)) {
            (Some(reach), _) => order
                .iter()
                .copied()
                .filter(|u| live.contains(u) && name(u) == reach.function)
                .collect(),
            (None, Some(usrs)) => usrs.iter().copied().collect(),
            (None, None) => continue,
        };
        if usrs.is_empty() {
            continue;
        }
        // Written only by functions named to release memory (the rule by names alone), or only
        // beneath such functions that do free.
        let named = usrs.iter().all(|u| cuts.cleanup(u));
        let beneath = !usrs.iter().any(|u| cuts.building.contains(u)) && !built.contains(key);
        let told = !usrs.iter().any(|u| cuts.untold.contains(u)) && !built_told.contains(key);
        let suspicion = if named {
            let names: BTreeSet<String> = usrs.iter().map(|u| name(u)).collect();
            Suspicion {
                kind: "teardown".into(),
                reason: format!(
                    "written while loading only in functions that release memory (named so, \
                     and calling `free`): {}",
                    names.into_iter().collect::<Vec<_>>().join(", ")
                ),
            }
        } else if beneath {
            // The first writer, and the function releasing memory on its chain.
            let first = usrs[0];
            let reason = match via(first, &|u| cuts.cleanup(u)) {
                Some((usr, site)) => format!(
                    "written while loading only beneath functions that release memory (named \
                     so, and calling `free`): e.g. in `{}`, reached through `{}`, called at \
                     {site}",
                    name(first),
                    name(usr)
                ),
                None => format!(
                    "written while loading only beneath functions that release memory (named \
                     so, and calling `free`): e.g. in `{}`",
                    name(first)
                ),
            };
            Suspicion {
                kind: "teardown".into(),
                reason,
            }
        } else if told {
            // A writer whose chain passes a notifier (else a measurer), and that function.
            let shown = |cut: &dyn Fn(&str) -> bool| {
                usrs.iter()
                    .find_map(|&u| via(u, cut).map(|(usr, site)| (u, usr, site)))
            };
            let beneath = "written while loading only beneath functions that tell others about \
                           a change (named to notify, signal, publish, broadcast, propagate or \
                           replicate), record measurements (named for latency, metrics or \
                           histograms), both returning nothing, or release memory: e.g. in";
            match (shown(&|x| cuts.notifier(x)), shown(&|x| cuts.measurer(x))) {
                (Some((first, usr, site)), _) => Suspicion {
                    kind: "notification".into(),
                    reason: format!(
                        "{beneath} `{}`, reached through `{}`, called at {site}; what they \
                         write is the state of the observers told (subscribers, the clients \
                         and contexts callbacks run with, replication buffers, queues of keys \
                         to signal), which a restart does not keep",
                        name(first),
                        name(usr)
                    ),
                },
                (None, Some((first, usr, site))) => Suspicion {
                    kind: "measurement".into(),
                    reason: format!(
                        "{beneath} `{}`, reached through `{}`, called at {site}; what they \
                         write are samples of how the program ran, which a restart starts \
                         afresh",
                        name(first),
                        name(usr)
                    ),
                },
                (None, None) => Suspicion {
                    kind: "notification".into(),
                    reason: format!("{beneath} `{}`", name(usrs[0])),
                },
            }
        } else {
            continue;
        };
        out.insert(key, suspicion);
    }
    out
}

/// The parts of the live load path left when functions that do not build what is loaded are
/// cut out: clean-up functions (named to release memory, and calling `free`), notifiers
/// (named to tell others about a change) and measurers (named to record measurements), both
/// returning nothing.
pub(crate) struct Cuts<'p> {
    program: &'p Program,
    /// Functions that may call `free`.
    frees: HashSet<&'p str>,
    /// Reached without entering a clean-up function.
    pub(crate) building: HashSet<&'p str>,
    /// Reached without entering a clean-up function, a notifier or a measurer.
    pub(crate) untold: HashSet<&'p str>,
}

impl<'p> Cuts<'p> {
    pub(crate) fn new(
        program: &'p Program,
        parent: &HashMap<&'p str, Option<(&'p str, &'p Site)>>,
        live: &HashSet<&'p str>,
    ) -> Cuts<'p> {
        let mut cuts = Cuts {
            program,
            frees: calls_free(program),
            building: HashSet::new(),
            untold: HashSet::new(),
        };
        cuts.building = building_functions(program, parent, live, &|u| cuts.cleanup(u));
        cuts.untold = building_functions(program, parent, live, &|u| {
            cuts.cleanup(u) || cuts.notifier(u) || cuts.measurer(u)
        });
        cuts
    }

    /// Clean-up: a function named to release memory that may call `free`, itself or through
    /// its callees (a name alone, `freeze_clock`, does not make clean-up).
    pub(crate) fn cleanup(&self, usr: &str) -> bool {
        self.frees.contains(usr)
            && self
                .program
                .functions
                .get(usr)
                .is_some_and(|f| releases(&f.name))
    }

    /// The records written by live functions that only clean-up, notifiers or measurers lead
    /// to.
    pub(crate) fn written_beneath(
        &self,
        program: &'p Program,
        order: &[&'p str],
        live: &HashSet<&'p str>,
    ) -> HashSet<&'p str> {
        let mut out = HashSet::new();
        for &usr in order {
            if !live.contains(usr) || self.untold.contains(usr) {
                continue;
            }
            if let Some(f) = program.functions.get(usr) {
                out.extend(
                    f.writes
                        .iter()
                        .flat_map(|w| w.records.iter().map(|(k, _)| k.as_str())),
                );
            }
        }
        out
    }

    /// A measurer: a function named to record measurements of the program's own running
    /// (`latencyAddSample`) that returns nothing.
    pub(crate) fn measurer(&self, usr: &str) -> bool {
        self.program.functions.get(usr).is_some_and(|f| {
            let lower = f.name.to_lowercase();
            MEASURE_WORDS.iter().any(|w| lower.contains(w)) && returns_nothing(&f.signature)
        })
    }

    /// A notifier: a function named to tell others about a change that returns nothing, so
    /// the load cannot use anything it makes.
    pub(crate) fn notifier(&self, usr: &str) -> bool {
        self.program
            .functions
            .get(usr)
            .is_some_and(|f| notifies(&f.name) && returns_nothing(&f.signature))
    }
}

/// Why the function `usr` is only on paths that end the process: the first function on its
/// chain from the load functions that is not live, and how it was entered.
fn dead_entry(
    program: &Program,
    exits: &Exits,
    parent: &HashMap<&str, Option<(&str, &Site)>>,
    live: &HashSet<&str>,
    usr: &str,
) -> String {
    let name = |u: &str| {
        program
            .functions
            .get(u)
            .map(|f| f.name.clone())
            .unwrap_or_default()
    };
    let mut at = usr;
    for _ in 0..=parent.len() {
        match parent.get(at).copied().flatten() {
            Some((caller, _)) if !live.contains(caller) => at = caller,
            Some((_, site)) => {
                return if exits.cannot_return(at) {
                    format!(
                        "reached only through `{}` (called at {site}), which cannot return",
                        name(at)
                    )
                } else {
                    format!(
                        "reached only through `{}`, called at {site}, after which the \
                         process ends",
                        name(at)
                    )
                };
            }
            None => break,
        }
    }
    format!(
        "reached only on paths that end the process (in `{}`)",
        name(usr)
    )
}

/// Functions of the program that hand out memory from an allocator (they return the result of
/// an allocator by name, or of another such function), with the records they type it as
/// themselves. A call to one whose result is assigned or cast to another record is an
/// allocation of that record too (memcached's `do_item_alloc_pull` allocates an item, and
/// `do_item_alloc_chunk` casts its memory to a chunk); one that names the same record adds
/// nothing (Redis's `createObject` callers: `zmalloc(sizeof(*o))` inside is the site).
pub(crate) fn allocator_wrappers(program: &Program) -> HashMap<&str, HashSet<&str>> {
    let mut wrappers: HashMap<&str, HashSet<&str>> = HashMap::new();
    for _ in 0..REACH_PASSES_MAX {
        let mut changed = false;
        for (usr, f) in &program.functions {
            if wrappers.contains_key(usr.as_str()) {
                continue;
            }
            let wraps = f.returns_from.iter().any(|(callee, name)| {
                crate::extract::is_allocator(name) || wrappers.contains_key(callee.as_str())
            });
            if wraps {
                // Every record it types memory as (by an allocator or another wrapper).
                let typed = f
                    .allocs
                    .iter()
                    .flat_map(|a| a.records.iter().map(String::as_str))
                    .collect();
                wrappers.insert(usr.as_str(), typed);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // A wrapper of a wrapper types what the inner one types (`createStringObject` returns
    // `createEmbeddedStringObject`'s object, typed there).
    for _ in 0..REACH_PASSES_MAX {
        let mut changed = false;
        for (usr, f) in &program.functions {
            let inherited: Vec<&str> = f
                .returns_from
                .iter()
                .filter_map(|(callee, _)| wrappers.get(callee.as_str()))
                .flat_map(|typed| typed.iter().copied())
                .collect();
            if let Some(typed) = wrappers.get_mut(usr.as_str()) {
                for record in inherited {
                    changed |= typed.insert(record);
                }
            }
        }
        if !changed {
            break;
        }
    }
    wrappers
}

/// Passes over the call graph to settle which parameters lead to writes; a bound for
/// pathological graphs (each pass that changes something adds at least one entry).
pub(crate) const REACH_PASSES_MAX: usize = 64;

/// For each function (by key) and parameter index: a write into the object the parameter
/// points to, or into an object reached from it through pointer fields, in this function or a
/// callee it passes the pointer to.
type ParamReaches<'p> = HashMap<(&'p str, usize), WriteSite>;

fn write_site(function: &Function, write: &Write, lines: &mut SourceLines) -> WriteSite {
    let why = write
        .records
        .first()
        .map(|(_, why)| why.clone())
        .unwrap_or_default();
    WriteSite {
        function: function.name.clone(),
        site: write.site.clone(),
        how: write.how.clone(),
        why,
        text: lines.line(&write.site),
    }
}

/// Settles [`ParamReaches`] for the whole program: a fixed point over the call graph.
fn param_reaches<'p>(program: &'p Program, lines: &mut SourceLines) -> ParamReaches<'p> {
    let mut reaches: ParamReaches = HashMap::new();
    for (usr, function) in &program.functions {
        for write in &function.writes {
            if let Some(i) = write.root.as_ref().and_then(Root::param) {
                reaches
                    .entry((usr.as_str(), i))
                    .or_insert_with(|| write_site(function, write, lines));
            }
        }
    }
    for _ in 0..REACH_PASSES_MAX {
        let mut changed = false;
        for (usr, function) in &program.functions {
            for call in &function.calls {
                let Some(callee) = call.callee.as_deref() else {
                    continue;
                };
                for (k, root) in call.roots.iter().enumerate() {
                    let Some(i) = root.as_ref().and_then(Root::param) else {
                        continue;
                    };
                    if reaches.contains_key(&(usr.as_str(), i)) {
                        continue;
                    }
                    if let Some(site) = reaches.get(&(callee, k)).cloned() {
                        reaches.insert((usr.as_str(), i), site);
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    reaches
}

/// The records whose pointer fields `function` reads and follows to a write: directly (the
/// base of a write) or by passing the pointer to a callee whose parameter leads to one.
fn reached_containers<'p>(
    function: &'p Function,
    reaches: &ParamReaches,
    lines: &mut SourceLines,
) -> Vec<(&'p str, Reach)> {
    let mut out: Vec<(&str, Reach)> = Vec::new();
    let mut add = |root: &'p Root, leads_to: WriteSite, lines: &mut SourceLines| {
        if let Root::Field {
            owner, field, site, ..
        } = root
        {
            if !out.iter().any(|(k, _)| *k == owner.as_str()) {
                out.push((
                    owner.as_str(),
                    Reach {
                        function: function.name.clone(),
                        field: field.clone(),
                        site: site.clone(),
                        text: lines.line(site),
                        leads_to,
                    },
                ));
            }
        }
    };
    for write in &function.writes {
        if let Some(root) = &write.root {
            add(root, write_site(function, write, lines), lines);
        }
    }
    for call in &function.calls {
        let Some(callee) = call.callee.as_deref() else {
            continue;
        };
        for (k, root) in call.roots.iter().enumerate() {
            if let (Some(root), Some(site)) = (root, reaches.get(&(callee, k))) {
                add(root, site.clone(), lines);
            }
        }
    }
    out
}

/// Address-taken functions by canonical type, names sorted and unique.
fn pointer_targets(program: &Program) -> HashMap<&str, Vec<String>> {
    let mut targets: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for usr in &program.address_taken {
        if let Some(f) = program.functions.get(usr) {
            targets
                .entry(f.signature.as_str())
                .or_default()
                .insert(f.name.as_str());
        }
    }
    targets
        .into_iter()
        .map(|(sig, names)| (sig, names.into_iter().map(String::from).collect()))
        .collect()
}

/// True when every write of the record `key` sits in the header of a `for` loop.
fn writes_loop_only(program: &Program, key: &str) -> bool {
    let mut any = false;
    for function in program.functions.values() {
        for write in &function.writes {
            if write.records.iter().any(|(k, _)| k == key) {
                if !write.loop_header {
                    return false;
                }
                any = true;
            }
        }
    }
    any
}

fn chain(
    program: &Program,
    parent: &HashMap<&str, Option<(&str, &Site)>>,
    usr: &str,
) -> Vec<ChainStep> {
    let mut steps = Vec::new();
    let mut at = usr;
    // Parent links form a tree rooted at the load functions; the bound guards the loop anyway.
    for _ in 0..=parent.len() {
        let name = program
            .functions
            .get(at)
            .map(|f| f.name.clone())
            .unwrap_or_default();
        match parent.get(at).copied().flatten() {
            Some((caller, site)) => {
                steps.push(ChainStep {
                    function: name,
                    site: site.clone(),
                });
                at = caller;
            }
            None => {
                let site = program
                    .functions
                    .get(at)
                    .map(|f| f.site.clone())
                    .unwrap_or_default();
                steps.push(ChainStep {
                    function: name,
                    site,
                });
                break;
            }
        }
    }
    steps.reverse();
    steps
}

fn suggestions<'a>(name: &str, names: impl Iterator<Item = &'a String>) -> Vec<String> {
    let lower = name.to_lowercase();
    let mut scored: Vec<(f64, &String)> = names
        .filter_map(|candidate| {
            let other = candidate.to_lowercase();
            let score = strsim::jaro_winkler(&lower, &other);
            let related = other.contains(&lower) || lower.contains(&other);
            (score >= 0.85 || related).then_some((if related { 1.0 } else { score }, candidate))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored
        .into_iter()
        .take(SUGGESTIONS_MAX)
        .map(|(_, n)| n.clone())
        .collect()
}

/// Padding fields do not count when comparing layouts.
fn is_padding(field: &str) -> bool {
    let f = field.to_lowercase();
    f.is_empty()
        || f.starts_with("pad")
        || f.starts_with("_pad")
        || f.starts_with("__pad")
        || f.starts_with("reserved")
        || f.starts_with("unused")
}

fn layout(record: &Record) -> Vec<&(String, String)> {
    record
        .fields
        .iter()
        .filter(|(n, _)| !is_padding(n))
        .collect()
}

/// Name stripped of the words that mark an alignment variant.
fn base_name(name: &str) -> Option<String> {
    let bare = name.rsplit(' ').next().unwrap_or(name).to_lowercase();
    for marker in [
        "_aligned", "_packed", "_padded", "aligned_", "packed_", "padded_",
    ] {
        if bare.contains(marker) {
            return Some(bare.replacen(marker, "", 1));
        }
    }
    None
}

/// Why the record `key` is likely a false positive, if it is: an iterator (by name, or
/// written only as a loop cursor) or an alignment variant of another record.
fn suspicion(program: &Program, key: &str, loop_only: bool) -> Option<Suspicion> {
    let record = program.records.get(key)?;
    let bare = record
        .name
        .rsplit(' ')
        .next()
        .unwrap_or(&record.name)
        .to_lowercase();
    for word in ["iter", "cursor"] {
        if bare.contains(word) {
            return Some(Suspicion {
                kind: "iterator".into(),
                reason: format!("the name contains `{word}`"),
            });
        }
    }
    if loop_only {
        return Some(Suspicion {
            kind: "iterator".into(),
            reason: "only written in the header of `for` loops (a loop cursor)".into(),
        });
    }
    let mine = layout(record);
    for (other_key, other) in &program.records {
        if other_key == key || mine.is_empty() || layout(other) != mine {
            continue;
        }
        let other_bare = other
            .name
            .rsplit(' ')
            .next()
            .unwrap_or(&other.name)
            .to_lowercase();
        let named = base_name(&record.name).is_some_and(|b| b == other_bare);
        let attributed = (record.packed || record.aligned) && !(other.packed || other.aligned);
        let padded = record.fields.len() > other.fields.len();
        if named || attributed || padded {
            let mut what = Vec::new();
            if named {
                what.push("its name marks a variant");
            }
            if attributed {
                what.push("it carries a packed/aligned attribute");
            }
            if padded {
                what.push("it only adds padding fields");
            }
            return Some(Suspicion {
                kind: "alignment-variant".into(),
                reason: format!(
                    "same fields as {} ({}): {}",
                    other.name,
                    other.site,
                    what.join(", ")
                ),
            });
        }
    }
    if let Some(base) = base_name(&record.name) {
        return Some(Suspicion {
            kind: "alignment-variant".into(),
            reason: format!("the name marks an alignment variant of `{base}`"),
        });
    }
    None
}

/// A call: the calling function's key and the index of the call in its body.
type CallSite<'p> = (&'p str, usize);

/// One pending step of the backtracking: a value in a function, and how it got to the sink.
struct Pending<'p> {
    function: &'p str,
    val: Val,
    path: Vec<ChainStep>,
    /// Set when the backtracking went down into a callee through an out-parameter: the caller
    /// and the index of the call, so the callee's parameters map back to that call's
    /// arguments only (not to every caller of a utility like `sdscatlen`).
    entered_from: Option<CallSite<'p>>,
}

fn backtrack_strategy(program: &Program, lines: &mut SourceLines) -> Vec<BacktrackFinding> {
    // Callers of each function: (caller, call index).
    let mut callers: HashMap<&str, Vec<(&str, usize)>> = HashMap::new();
    for (usr, function) in &program.functions {
        for (i, call) in function.calls.iter().enumerate() {
            if let Some(callee) = &call.callee {
                callers.entry(callee.as_str()).or_default().push((usr, i));
            }
        }
    }
    let mut found: BTreeMap<String, (BacktrackFinding, bool)> = BTreeMap::new();
    let mut steps = 0usize;
    for (usr, function) in &program.functions {
        for call in &function.calls {
            let Some(callee) = &call.callee else {
                continue;
            };
            if program.functions.contains_key(callee) {
                continue;
            }
            let Some((_, buffers, from)) =
                FILE_WRITERS.iter().find(|(n, _, _)| *n == call.callee_text)
            else {
                continue;
            };
            let logging = call.stream.as_deref().is_some_and(is_console);
            let sink = WriteSite {
                function: function.name.clone(),
                site: call.site.clone(),
                how: call.callee_text.clone(),
                why: "file-writing call".into(),
                text: lines.line(&call.site),
            };
            let mut queue = VecDeque::new();
            for (i, vals) in call.args.iter().enumerate() {
                if buffers.contains(&i) || from.is_some_and(|f| i >= f) {
                    for val in vals {
                        queue.push_back(Pending {
                            function: usr,
                            val: val.clone(),
                            path: vec![ChainStep {
                                function: function.name.clone(),
                                site: call.site.clone(),
                            }],
                            entered_from: None,
                        });
                    }
                }
            }
            let mut seen: BTreeSet<(&str, Val, Option<CallSite>)> = BTreeSet::new();
            let mut reached: BTreeSet<String> = BTreeSet::new();
            while let Some(item) = queue.pop_front() {
                steps += 1;
                if steps > BACKTRACK_STEPS_MAX {
                    break;
                }
                if !seen.insert((item.function, item.val.clone(), item.entered_from)) {
                    continue;
                }
                match &item.val {
                    Val::Record(key) | Val::Field(key) => {
                        if reached.insert(key.clone()) {
                            record_backtrack(
                                program,
                                &mut found,
                                key,
                                (&sink, logging),
                                &item.path,
                            );
                        }
                    }
                    Val::Local(_) => backtrack_local(program, &item, &mut queue),
                    Val::Param(index) => {
                        backtrack_param(program, &callers, &item, *index, &mut queue)
                    }
                }
            }
        }
    }
    let mut findings: Vec<BacktrackFinding> = found
        .into_values()
        .map(|(mut finding, logging_only)| {
            if logging_only && finding.suspicion.is_none() {
                finding.suspicion = Some(Suspicion {
                    kind: "logging".into(),
                    reason: "reaches only writes to stderr/stdout".into(),
                });
            }
            finding
        })
        .collect();
    findings.sort_by(|a, b| (&a.name, &a.definition).cmp(&(&b.name, &b.definition)));
    findings
}

/// A local variable: what was copied into it, here or by callees through out-parameters.
fn backtrack_local<'p>(
    program: &'p Program,
    item: &Pending<'p>,
    queue: &mut VecDeque<Pending<'p>>,
) {
    let Some((usr, f)) = program.functions.get_key_value(item.function) else {
        return;
    };
    for flow in f.flows.iter().filter(|fl| fl.target == item.val) {
        for val in &flow.from {
            let step = (usr.as_str(), f.name.as_str(), &flow.site);
            push_pending(queue, item, step, val, item.entered_from);
        }
    }
    // Out-parameters: `fill(buf, rec)` where `fill` copies into its first parameter.
    for (call_index, call) in f.calls.iter().enumerate() {
        let Some((callee_usr, callee)) = call
            .callee
            .as_deref()
            .and_then(|c| program.functions.get_key_value(c))
        else {
            continue;
        };
        for (i, vals) in call.args.iter().enumerate() {
            if !vals.contains(&item.val) {
                continue;
            }
            for flow in callee.flows.iter().filter(|fl| fl.target == Val::Param(i)) {
                for val in &flow.from {
                    let step = (callee_usr.as_str(), callee.name.as_str(), &flow.site);
                    push_pending(queue, item, step, val, Some((usr.as_str(), call_index)));
                }
            }
        }
    }
}

/// A parameter: the matching argument at the call that entered this function, or else at
/// every call site.
fn backtrack_param<'p>(
    program: &'p Program,
    callers: &HashMap<&'p str, Vec<(&'p str, usize)>>,
    item: &Pending<'p>,
    index: usize,
    queue: &mut VecDeque<Pending<'p>>,
) {
    let sites: Vec<(&str, usize)> = match item.entered_from {
        Some(site) => vec![site],
        None => callers.get(item.function).cloned().unwrap_or_default(),
    };
    for (caller, call_index) in sites {
        let Some((caller_usr, f)) = program.functions.get_key_value(caller) else {
            continue;
        };
        let Some(call) = f.calls.get(call_index) else {
            continue;
        };
        for val in call.args.get(index).into_iter().flatten() {
            let step = (caller_usr.as_str(), f.name.as_str(), &call.site);
            push_pending(queue, item, step, val, None);
        }
    }
}

fn push_pending<'p>(
    queue: &mut VecDeque<Pending<'p>>,
    from: &Pending<'p>,
    (function, name, site): (&'p str, &str, &Site),
    val: &Val,
    entered_from: Option<(&'p str, usize)>,
) {
    if from.path.len() > BACKTRACK_DEPTH_MAX {
        return;
    }
    let mut path = Vec::with_capacity(from.path.len() + 1);
    path.push(ChainStep {
        function: name.to_string(),
        site: site.clone(),
    });
    path.extend(from.path.iter().cloned());
    queue.push_back(Pending {
        function,
        val: val.clone(),
        path,
        entered_from,
    });
}

/// Streams and descriptors of the console: what reaches only these is logging.
fn is_console(stream: &str) -> bool {
    matches!(
        stream,
        "stderr" | "stdout" | "STDERR_FILENO" | "STDOUT_FILENO" | "1" | "2"
    )
}

fn record_backtrack(
    program: &Program,
    found: &mut BTreeMap<String, (BacktrackFinding, bool)>,
    key: &str,
    (sink, logging): (&WriteSite, bool),
    path: &[ChainStep],
) {
    let Some(record) = program.records.get(key) else {
        return;
    };
    let fresh = || BacktrackFinding {
        name: record.name.clone(),
        definition: record.site.clone(),
        sink: sink.clone(),
        path: path.to_vec(),
        sink_count: 0,
        suspicion: suspicion(program, key, false),
    };
    // The bool: every sink reached so far writes to the console.
    let (finding, logging_only) = found
        .entry(key.to_string())
        .or_insert_with(|| (fresh(), logging));
    finding.sink_count += 1;
    if *logging_only && !logging {
        // Show a sink that is not logging as the evidence.
        finding.sink = sink.clone();
        finding.path = path.to_vec();
        *logging_only = false;
    }
}

#[cfg(test)]
mod tests {
    use super::{notifies, releases, returns_nothing};

    #[test]
    fn notifiers_are_named_so_and_return_nothing() {
        for name in [
            "moduleNotifyKeyspaceEvent",
            "signalKeyAsReady",
            "pubsubPublishMessage",
            "trackingRememberKeyToBroadcast",
            "propagateDeletion",
            "replicationFeedSlaves",
        ] {
            assert!(notifies(name), "{name}");
        }
        for name in [
            "rdbLoadObject",
            "dictAdd",
            "createClient",
            "lease_set_hwaddr",
        ] {
            assert!(!notifies(name), "{name}");
        }
        assert!(returns_nothing("void (int, char *)"));
        assert!(returns_nothing("void (void)"));
        // A pointer to `void` is a result.
        assert!(!returns_nothing("void *(unsigned long)"));
        assert!(!returns_nothing(
            "int (struct redisObject *, struct redisObject *, int)"
        ));
        // The clean-up words are another list.
        assert!(releases("freeClient") && !notifies("freeClient"));
    }
}
