//! The plain facts extracted from the translation units: what the analyses run on.
//!
//! Nothing here refers to libclang. Functions and records are identified by their clang USR,
//! which is unique per program (static functions carry their file in it), so facts from
//! different translation units merge by key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A place in a source file.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Site {
    /// Path of the file, as given to or found by the analysis.
    pub file: String,
    /// 1-based line.
    pub line: u32,
}

impl std::fmt::Display for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// A struct or union defined in the program's own sources.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// `struct name`, `union name`, or the typedef name of an anonymous record.
    pub name: String,
    /// Where it is defined.
    pub site: Site,
    /// Field names and canonical field types, in order.
    pub fields: Vec<(String, String)>,
    /// Carries `__attribute__((packed))`.
    pub packed: bool,
    /// Carries `__attribute__((aligned(..)))` (on the record or a field).
    pub aligned: bool,
}

/// What an expression's value may come from, for the backtracking strategy.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Val {
    /// An object (or a pointer to one) of this record type (key into [`Program::records`]).
    Record(String),
    /// A field of this record type.
    Field(String),
    /// The function's parameter with this index.
    Param(usize),
    /// A local variable (its USR).
    Local(String),
}

/// Where a pointer value comes from, as far as the reach rule needs it: the object it points
/// to lives behind a parameter, or the pointer was read from a field of a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Root {
    /// The pointee of the function's parameter with this index.
    Param(usize),
    /// A pointer read from a field (`db->dict`, `server.db + i`).
    Field {
        /// The record holding the field (key into [`Program::records`]).
        owner: String,
        /// The field's name.
        field: String,
        /// Where it is read.
        site: Site,
        /// When the record read is itself the pointee of a parameter: that parameter's index.
        base: Option<usize>,
    },
    /// The pointee of a local pointer variable (its USR) whose value is not followed further:
    /// the result of a call (`c = createClient(NULL); c->flags = 0;`), or unknown.
    Local(String),
}

impl Root {
    /// The parameter whose pointee this leads back to, if any.
    pub fn param(&self) -> Option<usize> {
        match self {
            Root::Param(i) => Some(*i),
            Root::Field { base, .. } => *base,
            Root::Local(_) => None,
        }
    }
}

/// How control leaves a piece of code, as far as ending the process goes: what is needed to
/// find the functions that cannot return and the statements after which the process ends.
/// `Seq(vec![])` is code that simply falls through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Shape {
    /// Ends the process: a call to `exit`, `abort`, a `noreturn` function,
    /// `__builtin_unreachable`.
    Stop,
    /// Leaves the statements around it another way: `return`, `break`, `continue`, `goto`.
    Leave,
    /// A direct call to this function (USR): ends the process when it cannot return.
    Call(String),
    /// The statements of block number `n` of the function ([`Function::blocks`]).
    Block(usize),
    /// One after the other.
    Seq(Vec<Shape>),
    /// One of these (branches).
    Alt(Vec<Shape>),
}

impl Shape {
    /// Code that falls through.
    pub fn falls() -> Shape {
        Shape::Seq(Vec::new())
    }

    /// `parts` one after the other, simplified: nested sequences flattened, code that falls
    /// through dropped, nothing kept after a [`Shape::Stop`] or [`Shape::Leave`].
    pub fn seq(parts: Vec<Shape>) -> Shape {
        let mut out = Vec::new();
        for part in parts {
            let ends = matches!(part, Shape::Stop | Shape::Leave);
            match part {
                Shape::Seq(inner) => out.extend(inner),
                other => out.push(other),
            }
            if ends {
                break;
            }
        }
        if out.len() == 1 {
            out.pop().unwrap_or_else(Shape::falls)
        } else {
            Shape::Seq(out)
        }
    }

    /// One of `branches`, simplified: when every branch falls through, so does this.
    /// Nested alternatives are flattened (an `else if` chain stays one level deep).
    pub fn alt(branches: Vec<Shape>) -> Shape {
        if branches.iter().all(|b| *b == Shape::falls()) {
            return Shape::falls();
        }
        let mut out = Vec::new();
        for branch in branches {
            match branch {
                Shape::Alt(inner) => out.extend(inner),
                other => {
                    if !out.contains(&other) {
                        out.push(other);
                    }
                }
            }
        }
        Shape::Alt(out)
    }
}

/// A `{ ... }` block of a function: its statements' shapes, and where the block sits (the
/// block and index of the statement holding it), unless it is a function or loop body.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Block {
    /// The shape of each statement.
    pub items: Vec<Shape>,
    /// The statement holding this block: (block, index). `None` for a function's body and
    /// inside loops (after a loop body comes the loop again, not the statements after it).
    pub parent: Option<(usize, usize)>,
}

/// One write performed by a function.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Write {
    /// Record types written (keys into [`Program::records`]), each with why: the first is the
    /// type of the object written, then the records that contain it through embedded members.
    pub records: Vec<(String, String)>,
    /// Where the write is.
    pub site: Site,
    /// `=`, `+=`, `++`, `memcpy`, ...
    pub how: String,
    /// The write is in the header of a `for` loop (init or increment).
    pub loop_header: bool,
    /// Where the object written lives, when it is reached through a pointer.
    pub root: Option<Root>,
    /// The object written is a local variable of the function (on the stack), or a part of
    /// one.
    pub stack: bool,
    /// The statement holding it: (block, index) in [`Function::blocks`].
    pub at: Option<(usize, usize)>,
    /// The object written is a `static` variable declared inside the writing function (or a
    /// part of one held by value): state no other function can name.
    #[serde(default)]
    pub private_static: bool,
}

/// One call made by a function.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Call {
    /// USR of the callee when the call is direct.
    pub callee: Option<String>,
    /// Spelling of the callee (the name, or the expression for a call through a pointer).
    pub callee_text: String,
    /// Where the call is.
    pub site: Site,
    /// For each argument, what its value may come from.
    pub args: Vec<Vec<Val>>,
    /// For calls to stream- or descriptor-writing library functions: the source text of the
    /// stream or descriptor argument (`stderr`, `fd`, ...), to tell logging from files.
    pub stream: Option<String>,
    /// For a call through a pointer: the canonical function type called.
    pub signature: Option<String>,
    /// For each argument of pointer type: where the object it points to lives.
    pub roots: Vec<Option<Root>>,
    /// For each argument: it is the address of a local variable (or part of one), or a local
    /// array.
    pub stack_args: Vec<bool>,
    /// For each argument: it is a null pointer constant (`NULL`, `0`), through which nothing
    /// is written.
    #[serde(default)]
    pub null_args: Vec<bool>,
    /// It may not run when its statement does: it is in a branch of an `if`, `?:` or
    /// `switch`, or in the right operand of `&&` or `||` (null checks aside, see `guards`).
    #[serde(default)]
    pub conditional: bool,
    /// The local pointers (USRs) that `if`s around it check for null (`if (p) free(p);`).
    #[serde(default)]
    pub guards: Vec<String>,
    /// The statement holding it: (block, index) in [`Function::blocks`].
    pub at: Option<(usize, usize)>,
}

/// A flow of data into a local variable (assignment, `memcpy`, `sprintf`, ...).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Flow {
    /// What is written: a [`Val::Local`] or a [`Val::Param`] (an out-parameter).
    pub target: Val,
    /// What the data comes from.
    pub from: Vec<Val>,
    /// Where.
    pub site: Site,
}

/// Where a local pointer variable's value comes from, at one of its assignments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LocalFrom {
    /// The result of a direct call to this function (USR).
    Call(String),
    /// A null pointer.
    Null,
    /// Anything else (a parameter, a field, another local, arithmetic, a call through a
    /// pointer).
    Other,
}

/// One assignment (or initialization) of a local pointer variable.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LocalAssign {
    /// The variable (its USR).
    pub var: String,
    /// Its name.
    pub name: String,
    /// What it gets.
    pub from: LocalFrom,
    /// Where.
    pub site: Site,
    /// The statement holding it: (block, index) in [`Function::blocks`].
    pub at: Option<(usize, usize)>,
}

/// A store into a pointer field of a record (`c->reply = listCreate();`), or a use of the
/// field's address (`&c->reply`), after which it may get any value.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FieldStore {
    /// The record holding the field (key into [`Program::records`]).
    pub owner: String,
    /// The field's name.
    pub field: String,
    /// What it gets ([`LocalFrom::Other`] for an address taken).
    pub from: LocalFrom,
    /// The field belongs to a local variable and gets the address of a local of the same
    /// function (`_ms.commands = &mc;`): what it points to ends with the object holding it.
    #[serde(default)]
    pub same_frame: bool,
    /// Where.
    pub site: Site,
}

/// A call that allocates memory for objects of program records: the call to change when
/// those records move to persistent memory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Alloc {
    /// Records the memory is for (keys into [`Program::records`]): the pointee type of what
    /// the result is assigned or cast to, and every `sizeof(T)` in the size.
    pub records: Vec<String>,
    /// The allocating function called (`malloc`, `zmalloc`, ...).
    pub callee: String,
    /// Where.
    pub site: Site,
    /// Set when the callee is not an allocator by its name but a function of the program
    /// (its USR): the site counts when that function turns out to hand out untyped memory
    /// from an allocator (memcached's `do_item_alloc_pull`).
    pub through: Option<String>,
}

/// A function defined in the program's sources.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Function {
    /// Its name.
    pub name: String,
    /// Its canonical function type, to match calls through pointers.
    pub signature: String,
    /// Where its definition starts.
    pub site: Site,
    /// False when every parameter is a non-pointer scalar (or there are none): such a function
    /// cannot reach persistent state through its arguments, and the load strategy skips it.
    pub takes_pointers: bool,
    /// Writes performed in its body.
    pub writes: Vec<Write>,
    /// Calls made in its body.
    pub calls: Vec<Call>,
    /// Data flows into its local variables.
    pub flows: Vec<Flow>,
    /// Allocations of program records in its body.
    pub allocs: Vec<Alloc>,
    /// The functions whose results it returns (`return g(...)`, or a local assigned from
    /// `g(...)` and returned): (USR, name), to find allocator wrappers.
    pub returns_from: Vec<(String, String)>,
    /// Declared `noreturn` (`__attribute__((noreturn))`, `_Noreturn`).
    pub noreturn: bool,
    /// How its body ends (see [`Shape`]).
    pub body: Option<Shape>,
    /// Its blocks, for [`Shape::Block`] and the `at` of writes and calls.
    pub blocks: Vec<Block>,
    /// Assignments and initializations of its local pointer variables.
    #[serde(default)]
    pub local_assigns: Vec<LocalAssign>,
    /// The local variables it returns (`return c;`), by USR.
    #[serde(default)]
    pub returned_locals: Vec<String>,
    /// Where its `return` statements are: (block, index) in [`Function::blocks`].
    #[serde(default)]
    pub returns_at: Vec<Option<(usize, usize)>>,
    /// Where its labels (`cleanup:`) are: (block, index) in [`Function::blocks`].
    #[serde(default)]
    pub labels_at: Vec<Option<(usize, usize)>>,
    /// Stores into pointer fields of records, and uses of their addresses.
    #[serde(default)]
    pub field_stores: Vec<FieldStore>,
}

impl Function {
    /// The index, in the function's body, of the top-level statement holding the statement at
    /// `at`; `None` inside loops (their blocks are not placed) or when unknown.
    pub fn top_level(&self, at: Option<(usize, usize)>) -> Option<usize> {
        let (mut block, mut index) = at?;
        for _ in 0..=self.blocks.len() {
            if block == 0 {
                return Some(index);
            }
            (block, index) = self.blocks.get(block)?.parent?;
        }
        None
    }
}

/// A function declared but not defined in the sources (the C library, other libraries).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct External {
    /// Its name.
    pub name: String,
    /// Declared in a system header.
    pub system: bool,
}

/// A source file that did not parse cleanly.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Problem {
    /// The file.
    pub file: String,
    /// Why: the first error, or the parse failure.
    pub reason: String,
    /// True when nothing of it could be used.
    pub skipped: bool,
}

/// Everything extracted from all translation units.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Program {
    /// Records by USR.
    pub records: BTreeMap<String, Record>,
    /// Function definitions by USR.
    pub functions: BTreeMap<String, Function>,
    /// Functions declared but not defined, by USR.
    pub externals: BTreeMap<String, External>,
    /// Translation units parsed.
    pub units: usize,
    /// Processes whose parsing contributed (this one and the workers that answered).
    pub processes: usize,
    /// Lines in the files parsed (the sources and project headers they include).
    pub lines: usize,
    /// Files that did not parse cleanly.
    pub problems: Vec<Problem>,
    /// Functions whose address is taken (USRs): the possible targets of calls through
    /// pointers.
    pub address_taken: std::collections::BTreeSet<String>,
    /// The file behind each name shown in a [`Site`].
    pub paths: BTreeMap<String, std::path::PathBuf>,
    /// The files whose lines are counted in `lines`: the units and the project headers that
    /// define something.
    pub files: std::collections::BTreeSet<std::path::PathBuf>,
}

impl Program {
    /// Adds the facts of another part of the same program (parsed by another worker). What
    /// both define is kept from the definition that comes first in source order, as when one
    /// process parses everything.
    pub fn merge(&mut self, other: Program) {
        for (key, record) in other.records {
            match self.records.get(&key) {
                Some(mine) if mine.site <= record.site => {}
                _ => {
                    self.records.insert(key, record);
                }
            }
        }
        for (key, function) in other.functions {
            match self.functions.get(&key) {
                Some(mine) if mine.site <= function.site => {}
                _ => {
                    self.functions.insert(key, function);
                }
            }
        }
        for (key, external) in other.externals {
            self.externals.entry(key).or_insert(external);
        }
        self.units += other.units;
        self.address_taken.extend(other.address_taken);
        self.problems.extend(other.problems);
        self.paths.extend(other.paths);
        self.files.extend(other.files);
    }

    /// Counts the lines and drops the "externals" that some unit defines.
    pub(crate) fn finish(&mut self) {
        self.lines = self
            .files
            .iter()
            .map(|f| {
                std::fs::read(f)
                    .map(|b| b.iter().filter(|&&c| c == b'\n').count())
                    .unwrap_or(0)
            })
            .sum();
        let functions = &self.functions;
        self.externals.retain(|usr, _| !functions.contains_key(usr));
        self.problems.sort_by(|a, b| a.file.cmp(&b.file));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(name: &str) -> Function {
        Function {
            name: name.into(),
            ..Function::default()
        }
    }

    #[test]
    fn merge_keeps_the_first_definition_and_sums_units() {
        let mut a = Program {
            units: 2,
            ..Program::default()
        };
        a.functions.insert("c:@F@f".into(), function("f"));
        a.externals.insert(
            "c:@F@g".into(),
            External {
                name: "g".into(),
                system: false,
            },
        );
        let mut b = Program {
            units: 3,
            ..Program::default()
        };
        let mut later = function("f-again");
        later.site.line = 9;
        b.functions.insert("c:@F@f".into(), later);
        b.functions.insert("c:@F@g".into(), function("g"));
        a.merge(b);
        a.finish();
        assert_eq!(a.units, 5);
        assert_eq!(a.functions["c:@F@f"].name, "f");
        // g is defined by the other part: no longer external.
        assert!(a.externals.is_empty());
    }

    #[test]
    fn top_level_follows_blocks_out_to_the_body_and_stops_at_loops() {
        let mut f = function("f");
        f.blocks = vec![
            // 0: the body.
            Block::default(),
            // 1: `if (x) { ... }` at statement 3 of the body.
            Block {
                items: Vec::new(),
                parent: Some((0, 3)),
            },
            // 2: a block inside block 1, at its statement 0.
            Block {
                items: Vec::new(),
                parent: Some((1, 0)),
            },
            // 3: a loop body: not placed.
            Block::default(),
        ];
        assert_eq!(f.top_level(Some((0, 5))), Some(5));
        assert_eq!(f.top_level(Some((1, 2))), Some(3));
        assert_eq!(f.top_level(Some((2, 7))), Some(3));
        assert_eq!(f.top_level(Some((3, 0))), None);
        assert_eq!(f.top_level(Some((9, 0))), None);
        assert_eq!(f.top_level(None), None);
    }
}
