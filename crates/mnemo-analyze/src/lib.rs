//! `mnemo analyze`: find the C types a program persists.
//!
//! Moving a program from "serialize to files" to "keep it in persistent memory" starts with one
//! question: which of its data types hold persistent state? NVMOVE answered it by static analysis,
//! and so does this crate: any struct or union that the program creates or modifies while it
//! restores its state at start-up (in its *load functions* and everything they call) is
//! persistent.
//!
//! The pipeline has three layers, one direction:
//!
//! 1. [`sources`] finds the translation units and their compiler flags
//!    (`compile_commands.json`, or a directory walk plus flags given by the user).
//! 2. `extract` parses each unit with libclang and boils it down to plain [`facts`]: functions,
//!    their calls, the writes they perform, the records the program defines. Nothing after this
//!    layer touches libclang.
//! 3. `analysis` runs the strategies on the facts: *load* (breadth-first from the load functions
//!    through the call graph) and *backtrack* (from file-writing calls back to the serialized
//!    types), then flags the likely false positives.
//!
//! The `mnemo` binary calls [`run_cli`] with [`AnalyzeArgs`]; tools and tests call [`analyze`].
//!
//! # The rules (each has a test program in `tests/c/`)
//!
//! - **Writes**: `=`, compound assignment, `++`/`--`, the written arguments of library calls
//!   (`memcpy`, `memset`, `strcpy`, `sprintf`, `read`, `fread`, `fgets`, the outputs of
//!   `sscanf`, ...), and local struct variables with an initializer (they create an object).
//! - **The type written** is that of the object written (arrays by element; typedefs and
//!   pointers resolved through canonical types). Walking out through member accesses, the record
//!   owning each member counts too, *as long as containment is by value*: `o->mid.in.count = 1`
//!   writes `struct inner` (field `count`), and `struct middle` and `struct outer`, which embed
//!   it; `o->ext->count = 2` writes only `struct inner`, because `outer` holds a pointer to it
//!   and its own bytes do not change. Embedded arrays (`h->items[2].count`) are containment by
//!   value too.
//! - **Only the program's records** count: not those of system headers, not compiler builtins.
//! - **Breadth-first** from the load functions, each function once, so the evidence chain of
//!   each type is a shortest one. Functions whose parameters are all non-pointer scalars (or
//!   none) are skipped, except the load functions themselves and constructors (functions
//!   that allocate program records); functions without a body in the
//!   sources (the C library) are not entered; calls through function pointers are listed as
//!   unresolved.
//! - **Reached containers**: a type whose pointer field is read while loading and followed to
//!   a write (in the same function, or in a callee the pointer is passed to, settled over the
//!   call graph) is persistent too, with the read and the write as evidence: Redis's
//!   `dictAdd(db->dict, ...)` makes `redisDb` persistent though loading never writes it.
//! - **Byte-level writes**: `*p = v`, `p[i] = v` and library writes through a pointer count
//!   for the struct that the pointer was cast from (`((char *)obj)[0]`), or that the memory was
//!   allocated for: an allocation whose size names `sizeof(T)` (directly, through a size
//!   variable, or through a helper returning `sizeof(T)` like `sdsHdrSize`) types its memory
//!   as T, through casts and pointer arithmetic (`fp = (unsigned char *)s - 1; *fp = type`).
//! - **Likely false positives** are flagged, not dropped: iterators (by name, or written only
//!   in `for` headers), alignment variants (the same fields as another type, plus a variant name,
//!   a `packed`/`aligned` attribute, or padding fields), *stack-only* types (written while
//!   loading only in local variables or in objects every caller passes as `&local`),
//!   *exit-path* types (written only where the process ends next, or only in functions reached
//!   through functions that cannot return: `noreturn`, or every path ending in `exit`/`abort`),
//!   *released* types (written while loading, on its building part, only in objects that end
//!   before loading does: held by a local that its function frees before it returns, with no
//!   `return` before the free and no label after it, and passed down or built by constructors
//!   for such locals only, or in memory that only such an object's own pointer field holds;
//!   or no object, a null pointer), *private-static* types (written only in `static`
//!   variables declared inside the writing function: a cache), *teardown* types (written only
//!   by functions named to release memory that call `free`, or only in functions that loading
//!   reaches through one), *notification* and *measurement* types (written only beneath such
//!   functions and functions named to tell others about a change, `notify`, `signal`,
//!   `publish`, `broadcast`, `propagate`, `replicate`, or to record measurements, `latency`,
//!   `metric`, `histogram`, that return nothing: the observers' state and samples of how the
//!   program ran) and, for backtracking, types that reach only `stderr`/`stdout`. A written
//!   type left unflagged says why it outlasts loading (`kept`: its first write into an object
//!   that is not freed, comes from a global or a pointer field, or from a caller that keeps
//!   it).
//! - **Port checklist**: for each persistent type, every allocation site in the program (the
//!   call to change to `mnemo_pmalloc`) and every store (marked when its function also runs
//!   while loading), as text, JSON, or SARIF 2.1.0 ([`sarif`]).
#![forbid(unsafe_code)]

mod analysis;
mod cli;
mod exits;
mod extract;
pub mod facts;
mod released;
mod render;
pub mod sources;
mod workers;

use std::path::PathBuf;

pub use analysis::{
    AllocationSite, BacktrackFinding, ChainStep, Finding, LoadReport, MutationSite, PortItem,
    Reach, Report, Strategy, Summary, Suspicion, Unresolved, WriteSite,
};
pub use cli::{run_cli, AnalyzeArgs, Format};
pub use render::{sarif, text};

/// What to analyze and how.
#[derive(Debug, Clone)]
pub struct Options {
    /// Files or directories holding the C sources (directories are searched recursively for
    /// `.c` files, and for a `compile_commands.json`).
    pub paths: Vec<PathBuf>,
    /// Names of the functions that restore the program's state at start-up.
    pub load_functions: Vec<String>,
    /// Extra compiler flags, appended to every translation unit's flags.
    pub extra_flags: Vec<String>,
    /// Which strategies to run.
    pub strategy: Strategy,
    /// Draw a progress bar on standard error (only when it is a terminal).
    pub progress: bool,
    /// Processes that parse in parallel, this one included. Above 1, the current program is
    /// re-executed with the same arguments as a worker, so only programs whose arguments lead
    /// to [`run_cli`] may set it (the `mnemo` binary does); libraries and tests keep 1.
    pub jobs: usize,
}

/// Everything that can stop an analysis.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// libclang could not be loaded at run time.
    #[error(
        "libclang could not be loaded ({detail}).\n  Install it with `apt-get install libclang-14-dev`, \
         or set LIBCLANG_PATH to the directory that holds libclang.so"
    )]
    LibclangMissing {
        /// What clang-sys reported.
        detail: String,
    },
    /// No C source file was found under the given paths.
    #[error("no C sources found under {0}")]
    NoSources(String),
    /// A path given on the command line does not exist.
    #[error("{path}: {source}")]
    Io {
        /// The path that failed.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A `compile_commands.json` that cannot be understood.
    #[error("{path}: not a valid compile_commands.json: {detail}")]
    CompileCommands {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// Every translation unit failed to parse.
    #[error("none of the {count} source files could be parsed (first: {first})")]
    NothingParsed {
        /// Source files tried.
        count: usize,
        /// Why the first one failed.
        first: String,
    },
    /// A load function named by the user is not defined in the sources.
    #[error("load function `{name}` is not defined in the analyzed sources{}", suggest(.suggestions))]
    LoadFunctionNotFound {
        /// The name given.
        name: String,
        /// Defined functions with close names.
        suggestions: Vec<String>,
    },
    /// No load function was given, but the strategy needs one.
    #[error("the load strategy needs at least one --load FUNCTION")]
    NoLoadFunction,
}

fn suggest(names: &[String]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!(" (did you mean {}?)", names.join(", "))
    }
}

/// Runs the analysis described by `options`.
///
/// # Errors
/// See [`Error`]: libclang missing, no sources, a load function that does not exist, or no
/// source parsed at all. Sources that fail to parse individually are listed in
/// [`Report::problems`] and do not stop the analysis.
pub fn analyze(options: &Options) -> Result<Report, Error> {
    let started = std::time::Instant::now();
    if options.strategy.runs_load() && options.load_functions.is_empty() {
        return Err(Error::NoLoadFunction);
    }
    let units = sources::discover(&options.paths, &options.extra_flags)?;
    let flows = options.strategy.runs_backtrack();
    let program = workers::extract(&units, options.progress, options.jobs, flows)?;
    analysis::run(&program, options, started)
}

#[cfg(test)]
mod tests {
    use super::Error;

    #[test]
    fn missing_libclang_says_how_to_install_it() {
        let e = Error::LibclangMissing {
            detail: "couldn't find any valid shared libraries".into(),
        };
        let text = e.to_string();
        assert!(text.contains("apt-get install libclang-14-dev"), "{text}");
        assert!(text.contains("LIBCLANG_PATH"), "{text}");
    }
}
