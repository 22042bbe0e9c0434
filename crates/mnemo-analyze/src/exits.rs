//! Paths that end the process: the functions that cannot return, and the statements after
//! which the process ends (the [`Shape`]s extracted from each body).
//!
//! A function cannot return when it is declared `noreturn`, or when every path through its
//! body ends in a call that cannot return (`exit`, `abort`, another such function); settled
//! as a fixed point over the call graph. A statement is *doomed* when every way on from it,
//! through the statements after it in its block and in the blocks around it, ends the
//! process before leaving the function (a `return`, `break`, `continue` or `goto` counts as
//! leaving). Loops cut the walk outwards: after a loop body comes the loop again.

use std::collections::HashSet;

use crate::facts::{Call, Function, Program, Shape};

/// Outcomes of running a piece of code, as a bit set.
type Outcomes = u8;
/// Falls through to what comes next.
const FALLS: Outcomes = 1;
/// Ends the process.
const STOPS: Outcomes = 2;
/// Leaves the statements around it (`return`, `break`, ...).
const LEAVES: Outcomes = 4;

/// Passes of the fixed point; a bound for pathological call graphs.
const PASSES_MAX: usize = 64;

/// Nesting of shapes evaluated at most (deeper counts as falling through, the safe side).
const DEPTH_MAX: usize = 256;

pub(crate) struct Exits<'p> {
    /// Functions (by key) that cannot return.
    noreturn: HashSet<&'p str>,
}

impl<'p> Exits<'p> {
    /// Finds every function of `program` that cannot return.
    pub(crate) fn new(program: &'p Program) -> Exits<'p> {
        let mut exits = Exits {
            noreturn: program
                .functions
                .iter()
                .filter(|(_, f)| f.noreturn)
                .map(|(usr, _)| usr.as_str())
                .collect(),
        };
        for _ in 0..PASSES_MAX {
            let mut changed = false;
            for (usr, f) in &program.functions {
                if exits.noreturn.contains(usr.as_str()) {
                    continue;
                }
                let Some(body) = &f.body else {
                    continue;
                };
                if exits.outcomes(f, body, 0) == STOPS {
                    exits.noreturn.insert(usr.as_str());
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        exits
    }

    /// Whether the function `usr` cannot return.
    pub(crate) fn cannot_return(&self, usr: &str) -> bool {
        self.noreturn.contains(usr)
    }

    /// Whether the process ends after the statement at `at` of `f`, whatever happens.
    pub(crate) fn ends_after(&self, f: &Function, at: Option<(usize, usize)>) -> bool {
        let mut at = at;
        let mut levels = 0;
        while let Some((block, index)) = at {
            levels += 1;
            let Some(b) = f.blocks.get(block).filter(|_| levels <= DEPTH_MAX) else {
                return false;
            };
            let rest = b.items.get(index + 1..).unwrap_or_default();
            let outcomes = self.sequence(f, rest, 0);
            if outcomes & FALLS == 0 {
                return outcomes == STOPS;
            }
            at = b.parent;
        }
        false
    }

    /// Whether a call of `f` leads to the end of the process: its callee cannot return, or
    /// the process ends after it.
    pub(crate) fn call_ends(&self, f: &Function, call: &Call) -> bool {
        call.callee
            .as_deref()
            .is_some_and(|c| self.cannot_return(c))
            || self.ends_after(f, call.at)
    }

    fn outcomes(&self, f: &Function, shape: &Shape, depth: usize) -> Outcomes {
        if depth > DEPTH_MAX {
            return FALLS;
        }
        match shape {
            Shape::Stop => STOPS,
            Shape::Leave => LEAVES,
            Shape::Call(usr) => {
                if self.noreturn.contains(usr.as_str()) {
                    STOPS
                } else {
                    FALLS
                }
            }
            Shape::Block(id) => match f.blocks.get(*id) {
                Some(block) => self.sequence(f, &block.items, depth + 1),
                None => FALLS,
            },
            Shape::Seq(parts) => self.sequence(f, parts, depth + 1),
            Shape::Alt(branches) => {
                if branches.is_empty() {
                    return FALLS;
                }
                branches
                    .iter()
                    .fold(0, |acc, b| acc | self.outcomes(f, b, depth + 1))
            }
        }
    }

    fn sequence(&self, f: &Function, parts: &[Shape], depth: usize) -> Outcomes {
        let mut ended = 0;
        for part in parts {
            let outcomes = self.outcomes(f, part, depth);
            ended |= outcomes & (STOPS | LEAVES);
            if outcomes & FALLS == 0 {
                return ended;
            }
        }
        ended | FALLS
    }
}
