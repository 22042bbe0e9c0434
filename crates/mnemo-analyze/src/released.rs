//! The `released` flag: types whose objects written while loading are released before
//! loading ends, so that no root reaches them when it does.
//!
//! The objects are followed one function at a time, flow-sensitively inside each function:
//!
//! - A local pointer of a function on the live load path is *released* when every value it
//!   gets is fresh memory (the result of an allocator, or of a function returning one's, like
//!   `createClient`; a lookup may hand out an object that lasts) or a null pointer, it is not
//!   returned, and a call
//!   that releases it (a call that may pass it on to the C library's `free`, found over the
//!   whole call graph) runs, after its last assignment, whenever the function's body reaches
//!   the statement holding it (no condition around it but a null check of the local itself,
//!   `if (c) freeClient(c);`), and every way out of the function passes that statement: no
//!   `return` between the first assignment and the release, no label after the release (a
//!   `goto` could jump over it), nothing of the kind inside a loop. A call that *may* free is
//!   trusted to end the object (`freeClient` may instead hand a protected client to
//!   `freeClientAsync`, `decrRefCount` frees only the last reference): the flag says likely.
//!   Stores of the pointer elsewhere in the meantime (`server.current_client = fakeClient`)
//!   do not keep the object: once released, a pointer left behind would dangle.
//! - A parameter is *transient* when every live call passes it such an object: a released
//!   local, the address of a local (as for the stack flag), another transient parameter, a
//!   local holding what a *transient constructor* returned (a greatest fixed point), or no
//!   object at all (a null pointer constant: nothing is written through it).
//! - A function is a transient constructor when it returns a local holding fresh memory, and
//!   every live call of it assigns the result to a local that is released
//!   or returned by a transient constructor in turn (`createClient` -> `createAOFClient` ->
//!   `fakeClient`).
//!
//! - A pointer field is *owned* when every store into it in the whole program is fresh memory
//!   or a null pointer (or, in a local object, the address of a local of the same function)
//!   and its address is never taken (`c->mstate.commands = zrealloc(...)`): what it points to
//!   belongs to the object holding it, and ends with it (freed with it, or unreachable).
//!
//! A type is flagged when every write of it on the building part of the live load path (the
//! functions loading reaches without entering clean-up, notifiers or measurers, whose writes
//! the `teardown`, `notification` and `measurement` flags explain) writes such an object
//! (through the pointer itself, embedded members, or an owned field; never through another
//! pointer field: what it points to may be shared) and one at least is not on the stack
//! (those are the stack flag's). Each flag names a write and the local whose release ends the
//! object.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::analysis::{Finding, Suspicion, REACH_PASSES_MAX};
use crate::extract::is_allocator;
use crate::facts::{Call, Function, LocalFrom, Program, Root, Site};

/// Where a transient object comes from: what makes others transient.
#[derive(Debug, Clone, Copy)]
enum Origin<'p> {
    /// A local released in its function.
    Released {
        /// The function holding the local (its name).
        function: &'p str,
        /// The local's name.
        local: &'p str,
        /// Where it gets its (last) value.
        assigned: &'p Site,
        /// The releasing call.
        release: &'p Site,
        /// The releasing function.
        releaser: &'p str,
    },
    /// A null pointer passed as an argument: no object at all.
    Null {
        /// The calling function (its name).
        caller: &'p str,
        /// The call.
        site: &'p Site,
    },
}

impl std::fmt::Display for Origin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Released {
                function,
                local,
                assigned,
                release,
                releaser,
            } => write!(
                f,
                "the object held by `{local}` in `{function}` (assigned at {assigned}), \
                 released at {release} by `{releaser}` (which gives it to `free`) before that \
                 function returns"
            ),
            Origin::Null { caller, site } => write!(
                f,
                "a null pointer passed by `{caller}` at {site} (nothing is written through it)"
            ),
        }
    }
}

/// The C library's functions that give memory back.
const DEALLOCATORS: &[&str] = &["free", "cfree"];

/// The parameters that a function may pass on to the C library's `free`, directly or through
/// other functions (`freeClient(c)` -> `zfree(c)` -> `free(ptr)`): (function USR, index). A
/// least fixed point over the whole program.
fn freeing_params(program: &Program) -> HashSet<(&str, usize)> {
    let mut out: HashSet<(&str, usize)> = HashSet::new();
    for _ in 0..REACH_PASSES_MAX {
        let before = out.len();
        for (usr, f) in &program.functions {
            for call in &f.calls {
                let frees_arg = |k: usize| match call.callee.as_deref() {
                    Some(callee) if program.functions.contains_key(callee) => {
                        out.contains(&(callee, k))
                    }
                    _ => DEALLOCATORS.contains(&call.callee_text.as_str()),
                };
                let freed: Vec<usize> = call
                    .roots
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| frees_arg(*k))
                    .filter_map(|(_, root)| match root {
                        Some(Root::Param(i)) => Some(*i),
                        _ => None,
                    })
                    .collect();
                for i in freed {
                    out.insert((usr.as_str(), i));
                }
            }
        }
        if out.len() == before {
            break;
        }
    }
    out
}

/// Argument `k` of `call` may be given back to `free`.
fn frees(program: &Program, freeing: &HashSet<(&str, usize)>, call: &Call, k: usize) -> bool {
    match call.callee.as_deref() {
        Some(callee) if program.functions.contains_key(callee) => freeing.contains(&(callee, k)),
        _ => DEALLOCATORS.contains(&call.callee_text.as_str()),
    }
}

/// The functions whose results are fresh memory: allocators by name (`malloc`, `zmalloc`)
/// and the program's functions that return what one gives (`createClient`,
/// `createAOFClient`), by USR. A lookup (`dictFetchValue`) may hand out an object that lasts.
fn fresh_sources(program: &Program) -> HashSet<&str> {
    let mut out: HashSet<&str> = crate::analysis::allocator_wrappers(program)
        .into_keys()
        .collect();
    for (usr, f) in &program.functions {
        if is_allocator(&f.name) {
            out.insert(usr);
        }
    }
    for (usr, e) in &program.externals {
        if is_allocator(&e.name) {
            out.insert(usr);
        }
    }
    out
}

/// Every value the local `var` of `f` gets is fresh memory or a null pointer, and one is
/// fresh memory.
fn fresh_only(f: &Function, fresh: &HashSet<&str>, var: &str) -> bool {
    let mut any = false;
    for a in f.local_assigns.iter().filter(|a| a.var == var) {
        match &a.from {
            LocalFrom::Call(callee) if fresh.contains(callee.as_str()) => any = true,
            LocalFrom::Null => {}
            _ => return false,
        }
    }
    any
}

/// The locals of `f` released in `f`, by USR.
fn released_locals<'p>(
    program: &Program,
    freeing: &HashSet<(&str, usize)>,
    fresh: &HashSet<&str>,
    f: &'p Function,
) -> HashMap<&'p str, Origin<'p>> {
    let mut by_var: BTreeMap<&str, Vec<&crate::facts::LocalAssign>> = BTreeMap::new();
    for assign in &f.local_assigns {
        by_var.entry(assign.var.as_str()).or_default().push(assign);
    }
    let mut out = HashMap::new();
    'vars: for (var, assigns) in by_var {
        if !fresh_only(f, fresh, var) || f.returned_locals.iter().any(|r| r == var) {
            continue;
        }
        let mut first = usize::MAX;
        let mut last = 0;
        let mut assigned = &assigns[0].site;
        for a in &assigns {
            let Some(i) = f.top_level(a.at) else {
                continue 'vars;
            };
            first = first.min(i);
            if i >= last {
                last = i;
                assigned = &a.site;
            }
        }
        // The first release after the last assignment that runs whenever its statement of
        // the body does (a null check of the local itself aside).
        let release = f
            .calls
            .iter()
            .filter(|c| !c.conditional && c.guards.iter().all(|g| g == var))
            .filter_map(|c| match f.top_level(c.at) {
                Some(r) if r > last => Some((r, c)),
                _ => None,
            })
            .filter(|(_, c)| {
                c.roots.iter().enumerate().any(|(k, root)| {
                    matches!(root, Some(Root::Local(v)) if v == var)
                        && frees(program, freeing, c, k)
                })
            })
            .min_by_key(|(r, _)| *r);
        let Some((r, call)) = release else {
            continue;
        };
        let leaves_early = f.returns_at.iter().any(|&at| match f.top_level(at) {
            None => true,
            Some(i) => i >= first && i <= r,
        });
        let jumps_over = f.labels_at.iter().any(|&at| match f.top_level(at) {
            None => true,
            Some(i) => i > r,
        });
        if leaves_early || jumps_over {
            continue;
        }
        out.insert(
            var,
            Origin::Released {
                function: &f.name,
                local: &assigns[0].name,
                assigned,
                release: &call.site,
                releaser: &call.callee_text,
            },
        );
    }
    out
}

/// The state of the fixed point: what is transient so far.
struct Transient<'p> {
    fresh: HashSet<&'p str>,
    released: HashMap<(&'p str, &'p str), Origin<'p>>,
    params: HashSet<(&'p str, usize)>,
    constructors: HashSet<&'p str>,
}

impl<'p> Transient<'p> {
    /// The local `var` of `usr` holds a transient object.
    fn local(&self, usr: &'p str, f: &'p Function, var: &str) -> bool {
        if self.released.contains_key(&(usr, var)) {
            return true;
        }
        self.constructors.contains(usr)
            && f.returned_locals.iter().any(|r| r == var)
            && fresh_only(f, &self.fresh, var)
    }

    /// Argument `k` of `call` in `usr` is a transient object.
    fn arg(&self, usr: &'p str, f: &'p Function, call: &Call, k: usize) -> bool {
        if call.stack_args.get(k).copied().unwrap_or(false)
            || call.null_args.get(k).copied().unwrap_or(false)
        {
            return true;
        }
        match call.roots.get(k) {
            Some(Some(Root::Param(j))) => self.params.contains(&(usr, *j)),
            Some(Some(Root::Local(v))) => self.local(usr, f, v),
            _ => false,
        }
    }
}

/// What the rule finds: the flags, and for the other findings why they last.
pub(crate) struct Released<'p> {
    /// The findings whose every write on the live load path is into objects released before
    /// loading ends (see the module's documentation), each with the reason.
    pub(crate) flags: HashMap<&'p str, Suspicion>,
    /// For each other written finding: its first write into an object that lasts, and why it
    /// lasts.
    pub(crate) kept: HashMap<&'p str, String>,
}

/// Runs the rule over the findings of the load strategy (see the module's documentation).
pub(crate) fn released_only<'p>(
    program: &'p Program,
    order: &[&'p str],
    parent: &HashMap<&'p str, Option<(&'p str, &'p Site)>>,
    live: &HashSet<&str>,
    found: &BTreeMap<&'p str, Finding>,
) -> Released<'p> {
    let path: Vec<(&str, &Function)> = order
        .iter()
        .filter(|u| live.contains(**u))
        .filter_map(|&u| program.functions.get(u).map(|f| (u, f)))
        .collect();
    let on_path: HashSet<&str> = path.iter().map(|(u, _)| *u).collect();
    let entered =
        |callee: &str| on_path.contains(callee) && matches!(parent.get(callee), Some(Some(_)));
    let mut state = Transient {
        fresh: fresh_sources(program),
        released: HashMap::new(),
        params: HashSet::new(),
        constructors: HashSet::new(),
    };
    let freeing = freeing_params(program);
    for &(usr, f) in &path {
        for (var, origin) in released_locals(program, &freeing, &state.fresh, f) {
            state.released.insert((usr, var), origin);
        }
        if !f.returned_locals.is_empty() && entered(usr) {
            state.constructors.insert(usr);
        }
        for call in &f.calls {
            if let Some(callee) = call.callee.as_deref().filter(|c| entered(c)) {
                let args = call.roots.len().max(call.stack_args.len());
                state.params.extend((0..args).map(|k| (callee, k)));
            }
        }
    }
    // Greatest fixed point: drop what some live call contradicts, remembering the call (for
    // a parameter) or the caller (for a constructor) that did.
    let mut lasts_param: HashMap<(&str, usize), (&str, &Call)> = HashMap::new();
    let mut lasts_constructor: HashMap<&str, &str> = HashMap::new();
    for _ in 0..REACH_PASSES_MAX {
        let before = state.params.len() + state.constructors.len();
        let mut calls_to: HashMap<(&str, &str), usize> = HashMap::new();
        let mut kept_by: HashMap<(&str, &str), usize> = HashMap::new();
        // The (caller, callee) pairs in the order of the load path, for stable reasons.
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        for &(usr, f) in &path {
            let mut dropped = Vec::new();
            for call in &f.calls {
                let Some(callee) = call.callee.as_deref().filter(|c| on_path.contains(c)) else {
                    continue;
                };
                let count = calls_to.entry((usr, callee)).or_default();
                if *count == 0 {
                    pairs.push((usr, callee));
                }
                *count += 1;
                let args = call.roots.len().max(call.stack_args.len());
                for k in 0..args {
                    if !state.arg(usr, f, call, k) {
                        dropped.push((callee, k, call));
                    }
                }
            }
            for assign in &f.local_assigns {
                if let LocalFrom::Call(callee) = &assign.from {
                    if state.local(usr, f, &assign.var) {
                        *kept_by.entry((usr, callee.as_str())).or_default() += 1;
                    }
                }
            }
            for (callee, k, call) in dropped {
                if state.params.remove(&(callee, k)) {
                    lasts_param.insert((callee, k), (usr, call));
                }
            }
        }
        let mut callers: HashMap<&str, Vec<(&str, usize)>> = HashMap::new();
        for &(caller, callee) in &pairs {
            let n = calls_to.get(&(caller, callee)).copied().unwrap_or(0);
            callers.entry(callee).or_default().push((caller, n));
        }
        state.constructors.retain(|c| {
            let Some(calls) = callers.get(c) else {
                return false;
            };
            match calls
                .iter()
                .find(|&&(caller, n)| kept_by.get(&(caller, *c)).copied().unwrap_or(0) < n)
            {
                Some(&(caller, _)) => {
                    lasts_constructor.insert(c, caller);
                    false
                }
                None => true,
            }
        });
        if state.params.len() + state.constructors.len() == before {
            break;
        }
    }
    // Where each transient object comes from, for the reasons: propagated from the released
    // locals along the calls and returns that kept them transient.
    let mut param_origin: HashMap<(&str, usize), Origin> = HashMap::new();
    let mut constructor_origin: HashMap<&str, Origin> = HashMap::new();
    let local_origin = |usr: &'p str,
                        var: &str,
                        constructor_origin: &HashMap<&str, Origin<'p>>|
     -> Option<Origin<'p>> {
        state
            .released
            .get(&(usr, var))
            .copied()
            .or_else(|| constructor_origin.get(usr).copied())
    };
    for _ in 0..REACH_PASSES_MAX {
        let before = param_origin.len() + constructor_origin.len();
        for &(usr, f) in &path {
            for call in &f.calls {
                let Some(callee) = call.callee.as_deref() else {
                    continue;
                };
                for (k, root) in call.roots.iter().enumerate() {
                    if !state.params.contains(&(callee, k))
                        || param_origin.contains_key(&(callee, k))
                    {
                        continue;
                    }
                    let origin = match root {
                        _ if call.null_args.get(k).copied().unwrap_or(false) => {
                            Some(Origin::Null {
                                caller: &f.name,
                                site: &call.site,
                            })
                        }
                        Some(Root::Param(j)) => param_origin.get(&(usr, *j)).copied(),
                        Some(Root::Local(v)) if state.local(usr, f, v) => {
                            local_origin(usr, v, &constructor_origin)
                        }
                        _ => None,
                    };
                    if let Some(origin) = origin {
                        param_origin.insert((callee, k), origin);
                    }
                }
            }
            for assign in &f.local_assigns {
                if let LocalFrom::Call(callee) = &assign.from {
                    if state.constructors.contains(callee.as_str())
                        && !constructor_origin.contains_key(callee.as_str())
                        && state.local(usr, f, &assign.var)
                    {
                        if let Some(origin) = local_origin(usr, &assign.var, &constructor_origin) {
                            constructor_origin.insert(callee.as_str(), origin);
                        }
                    }
                }
            }
        }
        if param_origin.len() + constructor_origin.len() == before {
            break;
        }
    }
    // Per record: written into a lasting object somewhere; else the first released write.
    let owned = owned_fields(program, &state.fresh);
    let mut lasting: HashSet<&str> = HashSet::new();
    let mut kept: HashMap<&str, String> = HashMap::new();
    let mut first: HashMap<&str, FirstWrite> = HashMap::new();
    for &(usr, f) in &path {
        for write in &f.writes {
            let mut through = None;
            let origin = if write.stack {
                None
            } else {
                match &write.root {
                    Some(Root::Param(i)) if state.params.contains(&(usr, *i)) => {
                        param_origin.get(&(usr, *i)).copied()
                    }
                    // Memory that only the transient object's own field holds ends with it.
                    Some(Root::Field {
                        owner,
                        field,
                        base: Some(i),
                        ..
                    }) if state.params.contains(&(usr, *i))
                        && owned.contains(&(owner.as_str(), field.as_str())) =>
                    {
                        through = Some((owner.as_str(), field.as_str()));
                        param_origin.get(&(usr, *i)).copied()
                    }
                    Some(Root::Local(v)) if state.local(usr, f, v) => {
                        local_origin(usr, v, &constructor_origin)
                    }
                    root => {
                        for (key, _) in &write.records {
                            if lasting.insert(key) {
                                let why = Lasting {
                                    program,
                                    parent,
                                    state: &state,
                                    lasts_param: &lasts_param,
                                    lasts_constructor: &lasts_constructor,
                                }
                                .describe(usr, f, root.as_ref());
                                kept.insert(key, format!("{} in `{}`, {why}", write.site, f.name));
                            }
                        }
                        continue;
                    }
                }
            };
            for (key, _) in &write.records {
                if let Some(origin) = origin {
                    // A released object explains more than a null pointer: it is preferred.
                    match first.get(key.as_str()) {
                        Some((_, _, Origin::Released { .. }, _)) => {}
                        Some(_) if matches!(origin, Origin::Null { .. }) => {}
                        _ => {
                            first.insert(key, (f, &write.site, origin, through));
                        }
                    }
                }
            }
        }
    }
    let mut out = HashMap::new();
    for (&key, finding) in found {
        if finding.reach.is_some() || lasting.contains(key) {
            continue;
        }
        let Some((f, site, origin, through)) = first.get(key) else {
            continue;
        };
        let through = match through {
            Some((owner, field)) => format!(
                ", through its field `{field}` of `{}`, which only ever holds memory allocated \
                 for it (or a null pointer)",
                program
                    .records
                    .get(*owner)
                    .map(|r| r.name.as_str())
                    .unwrap_or("?")
            ),
            None => String::new(),
        };
        out.insert(
            key,
            Suspicion {
                kind: "released".into(),
                reason: format!(
                    "written while loading only in objects that end before loading does (on \
                     the stack, released before their function returns, or none: a null \
                     pointer), e.g. at {site} in `{}`: {origin}{through}",
                    f.name
                ),
            },
        );
    }
    Released { flags: out, kept }
}

/// The pointer fields that only ever hold memory allocated for them: every store into them in
/// the whole program is fresh memory or a null pointer (`c->mstate.commands = zrealloc(...)`),
/// or, in a local object, the address of a local of the same function (Redis's
/// `_ms.commands = &mc`), and their address is never taken. What such a field points to belongs to the object holding
/// it: once that object is released, the memory is freed with it or unreachable (a copy of the
/// pointer kept elsewhere would dangle, as for the released locals), as (owner, field).
fn owned_fields<'p>(program: &'p Program, fresh: &HashSet<&str>) -> HashSet<(&'p str, &'p str)> {
    let mut stored: HashSet<(&str, &str)> = HashSet::new();
    let mut other: HashSet<(&str, &str)> = HashSet::new();
    for f in program.functions.values() {
        for store in f.field_stores.iter().filter(|s| !s.same_frame) {
            let key = (store.owner.as_str(), store.field.as_str());
            match &store.from {
                LocalFrom::Call(callee) if fresh.contains(callee.as_str()) => {
                    stored.insert(key);
                }
                LocalFrom::Null => {}
                _ => {
                    other.insert(key);
                }
            }
        }
    }
    stored.retain(|key| !other.contains(key));
    stored
}

/// A type's first write into a transient object: the function, the write, where the object
/// comes from, and the owned field (record key, field) it is reached through, if any.
type FirstWrite<'p> = (
    &'p Function,
    &'p Site,
    Origin<'p>,
    Option<(&'p str, &'p str)>,
);

/// Steps followed back from a parameter to what its caller passed, at most.
const LASTING_STEPS_MAX: usize = 6;

/// Explains why an object written lasts, for the findings the rule keeps.
struct Lasting<'a, 'p> {
    program: &'p Program,
    parent: &'a HashMap<&'p str, Option<(&'p str, &'p Site)>>,
    state: &'a Transient<'p>,
    lasts_param: &'a HashMap<(&'p str, usize), (&'p str, &'p Call)>,
    lasts_constructor: &'a HashMap<&'p str, &'p str>,
}

impl<'p> Lasting<'_, 'p> {
    fn name(&self, usr: &str) -> &'p str {
        self.program
            .functions
            .get(usr)
            .map(|f| f.name.as_str())
            .unwrap_or("?")
    }

    /// Why the object behind `root`, in the function `usr`, lasts.
    fn describe(&self, usr: &'p str, f: &'p Function, root: Option<&Root>) -> String {
        let mut at = (usr, f);
        let mut root = root.cloned();
        let mut steps = Vec::new();
        for _ in 0..LASTING_STEPS_MAX {
            let Some(Root::Param(i)) = root else {
                break;
            };
            if matches!(self.parent.get(at.0), Some(None)) {
                return format!(
                    "{}through a parameter of the load function `{}`",
                    passed(&steps),
                    at.1.name
                );
            }
            let Some(&(caller, call)) = self.lasts_param.get(&(at.0, i)) else {
                return format!(
                    "{}through parameter {} of `{}`",
                    passed(&steps),
                    i + 1,
                    at.1.name
                );
            };
            let Some(g) = self.program.functions.get(caller) else {
                break;
            };
            steps.push(format!("passed by `{}` at {}", g.name, call.site));
            root = call.roots.get(i).cloned().flatten();
            at = (caller, g);
        }
        let (usr, f) = at;
        let what = match &root {
            Some(Root::Param(_)) => "through a parameter passed on further".to_string(),
            Some(Root::Field { owner, field, .. }) => format!(
                "through the pointer field `{field}` of `{}` (what a field points to may be \
                 shared)",
                self.program
                    .records
                    .get(owner)
                    .map(|r| r.name.as_str())
                    .unwrap_or("?")
            ),
            Some(Root::Local(v)) => {
                let name = f
                    .local_assigns
                    .iter()
                    .find(|a| a.var == *v)
                    .map(|a| a.name.as_str())
                    .unwrap_or("?");
                match self.lasts_constructor.get(usr) {
                    Some(caller) if f.returned_locals.iter().any(|r| r == v) => format!(
                        "through `{name}`, returned by `{}` to `{}`, which keeps it",
                        f.name,
                        self.name(caller)
                    ),
                    _ if self.state.local(usr, f, v) => {
                        format!("through `{name}` in `{}`", f.name)
                    }
                    _ => format!("through `{name}` in `{}`, which is not freed there", f.name),
                }
            }
            None => format!(
                "into an object `{}` gets from a global, an expression or an argument the \
                 analysis does not follow",
                f.name
            ),
        };
        format!("{}{what}", passed(&steps))
    }
}

/// `steps` as a prefix: "passed by `g` at x.c:1, passed by `h` at x.c:9: ".
fn passed(steps: &[String]) -> String {
    if steps.is_empty() {
        String::new()
    } else {
        format!("{}: ", steps.join(", "))
    }
}
