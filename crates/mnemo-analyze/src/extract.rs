//! Parsing with libclang and boiling each translation unit down to [`facts`](crate::facts).
//!
//! This is the only module that touches libclang. clang-rs allows one `Clang` instance per
//! process at a time and its handles are not `Send`, so all parsing happens on the calling
//! thread under [`CLANG_LOCK`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use clang::token::TokenKind;
use clang::{Clang, Entity, EntityKind, Index, Type, TypeKind};

use crate::facts::{
    Alloc, Block, Call, External, FieldStore, Flow, Function, LocalAssign, LocalFrom, Problem,
    Program, Record, Root, Shape, Site, Val, Write,
};
use crate::sources::Unit;
use crate::Error;

/// Serializes every use of libclang in the process (clang-rs refuses a second live instance).
static CLANG_LOCK: Mutex<()> = Mutex::new(());

/// Library functions that write through pointer arguments: name, indices of the written
/// arguments, and the index from which every further (variadic) argument is written too.
const LIBRARY_WRITERS: &[(&str, &[usize], Option<usize>)] = &[
    ("memcpy", &[0], None),
    ("memmove", &[0], None),
    ("memccpy", &[0], None),
    ("memset", &[0], None),
    ("bzero", &[0], None),
    ("explicit_bzero", &[0], None),
    ("strcpy", &[0], None),
    ("strncpy", &[0], None),
    ("stpcpy", &[0], None),
    ("stpncpy", &[0], None),
    ("strcat", &[0], None),
    ("strncat", &[0], None),
    ("strlcpy", &[0], None),
    ("strlcat", &[0], None),
    ("sprintf", &[0], None),
    ("snprintf", &[0], None),
    ("vsprintf", &[0], None),
    ("vsnprintf", &[0], None),
    ("read", &[1], None),
    ("pread", &[1], None),
    ("pread64", &[1], None),
    ("recv", &[1], None),
    ("recvfrom", &[1], None),
    ("fread", &[0], None),
    ("fread_unlocked", &[0], None),
    ("fgets", &[0], None),
    ("getline", &[0], None),
    ("sscanf", &[], Some(2)),
    ("fscanf", &[], Some(2)),
    ("scanf", &[], Some(1)),
];

/// Functions that never return, whatever their declarations say.
const NORETURN_FUNCTIONS: &[&str] = &[
    "exit",
    "_exit",
    "_Exit",
    "quick_exit",
    "abort",
    "__builtin_unreachable",
    "__builtin_trap",
    "__builtin_abort",
    "__builtin_exit",
    "longjmp",
    "_longjmp",
    "siglongjmp",
    "pthread_exit",
    "__assert_fail",
    "__assert_perror_fail",
    "__stack_chk_fail",
    "err",
    "errx",
    "verr",
    "verrx",
];

/// Output functions and the index of their stream or descriptor argument.
const STREAM_ARGUMENTS: &[(&str, usize)] = &[
    ("write", 0),
    ("pwrite", 0),
    ("pwrite64", 0),
    ("dprintf", 0),
    ("fwrite", 3),
    ("fwrite_unlocked", 3),
    ("fputs", 1),
    ("fprintf", 0),
];

/// Library functions that move data from some arguments into another, for the backtracking
/// strategy: name, target argument, source arguments, first variadic source argument.
const LIBRARY_FLOWS: &[(&str, usize, &[usize], Option<usize>)] = &[
    ("memcpy", 0, &[1], None),
    ("memmove", 0, &[1], None),
    ("memccpy", 0, &[1], None),
    ("strcpy", 0, &[1], None),
    ("strncpy", 0, &[1], None),
    ("stpcpy", 0, &[1], None),
    ("strcat", 0, &[1], None),
    ("strncat", 0, &[1], None),
    ("strlcpy", 0, &[1], None),
    ("strlcat", 0, &[1], None),
    ("sprintf", 0, &[], Some(2)),
    ("vsprintf", 0, &[], Some(2)),
    ("snprintf", 0, &[], Some(3)),
    ("vsnprintf", 0, &[], Some(3)),
];

/// Parses the units of `all` listed in `share` (indices), on the calling thread.
///
/// File names are shown relative to the directories of all the units, so that every share
/// of one analysis names files alike. `progress_step` is how many units one parsed unit stands
/// for on the progress bar (the other shares are parsed by other processes meanwhile). `flows`
/// records the data flows that only the backtracking strategy needs.
///
/// # Errors
/// libclang cannot be loaded.
pub(crate) fn extract_share(
    all: &[Unit],
    share: &[usize],
    bar: &indicatif::ProgressBar,
    progress_step: u64,
    flows: bool,
) -> Result<Program, Error> {
    let _guard = CLANG_LOCK
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let clang = Clang::new().map_err(|detail| Error::LibclangMissing { detail })?;
    let index = Index::new(&clang, false, false);
    let mut builder = Builder {
        program: Program::default(),
        roots: roots(all),
        flows,
        shown: BTreeMap::new(),
        texts: BTreeMap::new(),
        returned_sizes: BTreeMap::new(),
    };
    for unit in share.iter().filter_map(|&i| all.get(i)) {
        bar.set_message(display_name(&unit.file));
        if builder.unit(&index, unit) {
            builder.program.units += 1;
        }
        // Shares differ in size by one unit: never count past the total.
        let total = bar.length().unwrap_or(u64::MAX);
        bar.set_position((bar.position() + progress_step).min(total));
    }
    Ok(builder.program)
}

/// Fails when nothing parsed, else counts lines and tidies up.
pub(crate) fn finish(mut program: Program, tried: usize) -> Result<Program, Error> {
    if program.units == 0 {
        let first = program
            .problems
            .first()
            .map(|p| format!("{}: {}", p.file, p.reason))
            .unwrap_or_default();
        return Err(Error::NothingParsed {
            count: tried,
            first,
        });
    }
    program.finish();
    Ok(program)
}

pub(crate) fn progress_bar(len: usize, enabled: bool) -> indicatif::ProgressBar {
    if !enabled {
        return indicatif::ProgressBar::hidden();
    }
    // indicatif draws nothing when standard error is not a terminal.
    let bar = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("parsing {bar:30} {pos}/{len} {wide_msg}")
    {
        bar.set_style(style);
    }
    bar
}

fn display_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The directories that file names are shown relative to: those holding the units.
fn roots(units: &[Unit]) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = units
        .iter()
        .filter_map(|u| u.file.parent())
        // `skip.c` has the parent `` : the current directory.
        .map(|p| {
            if p.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                p.to_path_buf()
            }
        })
        .collect();
    roots.sort();
    roots.dedup();
    // Keep the shortest prefixes: a root under another root adds nothing.
    let mut kept: Vec<PathBuf> = Vec::new();
    for root in roots {
        if !kept.iter().any(|k| root.starts_with(k)) {
            kept.push(root);
        }
    }
    kept.into_iter()
        .map(|r| std::fs::canonicalize(&r).unwrap_or(r))
        .collect()
}

struct Builder {
    program: Program,
    roots: Vec<PathBuf>,
    /// Record what values flow where (call arguments, copies): only the backtracking strategy
    /// needs it, and it costs a tenth of the extraction.
    flows: bool,
    /// Names shown for paths, memoized (canonicalizing costs a system call).
    shown: BTreeMap<PathBuf, String>,
    /// Source files read to find operators, by path.
    texts: BTreeMap<PathBuf, Vec<u8>>,
    /// For helper functions (by USR) that return `sizeof(T)` (Redis's `sdsHdrSize` switch):
    /// the records named, with where.
    returned_sizes: BTreeMap<String, Vec<(String, Site)>>,
}

impl Builder {
    /// Parses one unit; false when nothing of it could be used.
    fn unit(&mut self, index: &Index, unit: &Unit) -> bool {
        let shown = self.show(&unit.file);
        let tu = match index
            .parser(&unit.file)
            .arguments(&unit.flags)
            .keep_going(true)
            .parse()
        {
            Ok(tu) => tu,
            Err(e) => {
                self.program.problems.push(Problem {
                    file: shown,
                    reason: format!("libclang could not parse it: {e}"),
                    skipped: true,
                });
                return false;
            }
        };
        let mut errors = Vec::new();
        for d in tu.get_diagnostics() {
            if d.get_severity() < clang::diagnostic::Severity::Error {
                continue;
            }
            let loc = d.get_location().get_file_location();
            let file = loc
                .file
                .map(|f| self.show(&f.get_path()))
                .unwrap_or_default();
            errors.push(format!("{file}:{}: {}", loc.line, d.get_text()));
        }
        if let Some(first) = errors.first() {
            self.program.problems.push(Problem {
                file: shown,
                reason: format!("{} error(s), first: {first}", errors.len()),
                skipped: false,
            });
        }
        self.program.files.insert(unit.file.clone());
        let root = tu.get_entity();
        for entity in root.get_children() {
            if entity.is_in_system_header() {
                continue;
            }
            self.top_level(entity);
        }
        true
    }

    fn top_level(&mut self, entity: Entity) {
        match entity.get_kind() {
            EntityKind::FunctionDecl => {
                let Some(usr) = entity.get_usr().map(|u| u.0) else {
                    return;
                };
                if entity.is_definition() {
                    // One tree may hold several programs defining the same external name
                    // (Redis's server, cli and benchmark each define `_serverAssert`): keep
                    // the definition that comes first in the source order, whatever order the
                    // units are parsed in.
                    let site = self.site(&entity);
                    let earlier = self
                        .program
                        .functions
                        .get(&usr)
                        .is_none_or(|existing| site < existing.site);
                    if earlier {
                        let function = self.function(entity);
                        self.program.functions.insert(usr, function);
                    }
                } else {
                    self.program
                        .externals
                        .entry(usr)
                        .or_insert_with(|| External {
                            name: entity.get_name().unwrap_or_default(),
                            system: false,
                        });
                }
            }
            EntityKind::StructDecl | EntityKind::UnionDecl => {
                self.record_key(entity);
            }
            EntityKind::VarDecl => {
                // Tables of function pointers (`static const rio rioFileIO = {rioFileRead,
                // ...}`) take the functions' addresses.
                let mut stack = entity.get_children();
                while let Some(e) = stack.pop() {
                    if e.get_kind() == EntityKind::DeclRefExpr {
                        self.function_reference(&e);
                    }
                    stack.extend(e.get_children());
                }
            }
            EntityKind::TypedefDecl => {
                if let Some(record) = entity
                    .get_typedef_underlying_type()
                    .and_then(|t| t.get_canonical_type().get_declaration())
                {
                    self.record_key(record);
                }
            }
            _ => {}
        }
    }

    /// A reference to a function other than as the callee of a direct call: its address is
    /// taken, so it may be called through a pointer.
    fn function_reference(&mut self, e: &Entity) {
        let Some(f) = e.get_reference() else {
            return;
        };
        if f.get_kind() != EntityKind::FunctionDecl {
            return;
        }
        if let Some(usr) = f.get_usr() {
            self.program.address_taken.insert(usr.0);
        }
    }

    /// A file name as shown in reports: relative to the analysis roots when under one.
    fn show(&mut self, path: &Path) -> String {
        if let Some(shown) = self.shown.get(path) {
            return shown.clone();
        }
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let shown = self
            .roots
            .iter()
            .find_map(|root| canonical.strip_prefix(root).ok())
            .map(|rest| rest.display().to_string())
            .unwrap_or_else(|| path.display().to_string());
        self.shown.insert(path.to_path_buf(), shown.clone());
        self.program.paths.insert(shown.clone(), canonical);
        shown
    }

    fn site(&mut self, entity: &Entity) -> Site {
        let Some(location) = entity.get_location() else {
            return Site::default();
        };
        let location = location.get_expansion_location();
        Site {
            file: location
                .file
                .map(|f| self.show(&f.get_path()))
                .unwrap_or_default(),
            line: location.line,
        }
    }

    /// The key of the record declared by `decl`, registering it on first sight; `None` for
    /// records of system headers and for records without a definition.
    fn record_key(&mut self, decl: Entity) -> Option<String> {
        if !matches!(
            decl.get_kind(),
            EntityKind::StructDecl | EntityKind::UnionDecl
        ) {
            return None;
        }
        let def = decl.get_definition()?;
        if def.is_in_system_header() {
            return None;
        }
        let usr = def.get_usr()?.0;
        if self.program.records.contains_key(&usr) {
            return Some(usr);
        }
        let site = self.site(&def);
        if site.file.is_empty() {
            // A compiler builtin such as `__va_list_tag`: not the program's own.
            return None;
        }
        if let Some(file) = def
            .get_location()
            .and_then(|l| l.get_expansion_location().file)
        {
            self.program.files.insert(file.get_path());
        }
        let mut name = record_name(&def, &site);
        if name.contains("<anonymous at ") {
            if let Some(member) = self.member_name(&def) {
                name = member;
            }
            // Naming it may have registered it, through its parent's nested records.
            if self.program.records.contains_key(&usr) {
                return Some(usr);
            }
        }
        let mut record = Record {
            name,
            site,
            fields: Vec::new(),
            packed: false,
            aligned: false,
        };
        // Register first: nested records may refer back to this one.
        self.program.records.insert(usr.clone(), record.clone());
        let mut nested = Vec::new();
        for child in def.get_children() {
            match child.get_kind() {
                EntityKind::FieldDecl => {
                    let ty = child
                        .get_type()
                        .map(|t| t.get_canonical_type().get_display_name())
                        .unwrap_or_default();
                    if child
                        .get_children()
                        .iter()
                        .any(|c| c.get_kind() == EntityKind::AlignedAttr)
                    {
                        record.aligned = true;
                    }
                    record
                        .fields
                        .push((child.get_name().unwrap_or_default(), ty));
                }
                EntityKind::PackedAttr => record.packed = true,
                EntityKind::AlignedAttr => record.aligned = true,
                EntityKind::StructDecl | EntityKind::UnionDecl => nested.push(child),
                _ => {}
            }
        }
        self.program.records.insert(usr.clone(), record);
        for child in nested {
            self.record_key(child);
        }
        Some(usr)
    }

    /// A name for an anonymous record that is the type of a member of another record:
    /// `union <struct _rio.io>` for `struct _rio { union { ... } io; }`.
    fn member_name(&mut self, def: &Entity) -> Option<String> {
        let parent = def.get_semantic_parent()?;
        let parent_key = self.record_key(parent)?;
        let usr = def.get_usr()?;
        let field = parent.get_children().into_iter().find(|c| {
            c.get_kind() == EntityKind::FieldDecl
                && c.get_type()
                    .and_then(|t| array_or_self(t.get_canonical_type()).get_declaration())
                    .and_then(|d| d.get_usr())
                    .is_some_and(|u| u == usr)
        })?;
        let field = field.get_name().filter(|n| !n.is_empty())?;
        let parent_name = &self.program.records.get(&parent_key)?.name;
        // `union <struct _rio.io>` nests as `struct <struct _rio.io.file>`.
        let path = match (parent_name.find('<'), parent_name.ends_with('>')) {
            (Some(open), true) => parent_name[open + 1..parent_name.len() - 1].to_string(),
            _ => parent_name.clone(),
        };
        let keyword = if def.get_kind() == EntityKind::UnionDecl {
            "union"
        } else {
            "struct"
        };
        Some(format!("{keyword} <{path}.{field}>"))
    }

    /// The record whose size the `sizeof` (or `alignof`) expression `e` takes, if any:
    /// `sizeof(struct T)`, `sizeof(T)`, `sizeof *p`, `sizeof(*p)`; not `sizeof(T *)`, the size
    /// of a pointer.
    fn sizeof_operand(&mut self, e: &Entity) -> Vec<String> {
        let mut out = Vec::new();
        for child in e.get_children() {
            let ty = if child.get_kind() == EntityKind::TypeRef {
                // libclang shows the type operand only as a reference to its named type:
                // look for a `*` among the tokens to tell `T *` from `T`.
                let pointer = e.get_range().is_some_and(|r| {
                    tokens_within(r, SPELLED_BYTES_MAX)
                        .unwrap_or_default()
                        .iter()
                        .any(|t| t.get_spelling() == "*")
                });
                if pointer {
                    continue;
                }
                child
                    .get_reference()
                    .and_then(|d| d.get_type())
                    .or_else(|| child.get_type())
            } else {
                child.get_type()
            };
            if let Some(key) = self.record_of_type(ty) {
                if !out.contains(&key) {
                    out.push(key);
                }
            }
        }
        out
    }

    /// The records named by `sizeof` in the return statements of the function `f` (a helper
    /// like `sdsHdrSize`), when its definition is in this unit.
    fn returned_sizes(&mut self, f: Entity) -> Vec<(String, Site)> {
        let Some(usr) = f.get_usr().map(|u| u.0) else {
            return Vec::new();
        };
        if let Some(known) = self.returned_sizes.get(&usr) {
            return known.clone();
        }
        // Registered first: a recursive helper finds itself empty.
        self.returned_sizes.insert(usr.clone(), Vec::new());
        let mut out = Vec::new();
        if let Some(def) = f.get_definition() {
            let mut stack = def.get_children();
            while let Some(e) = stack.pop() {
                if e.get_kind() != EntityKind::ReturnStmt {
                    stack.extend(e.get_children());
                    continue;
                }
                let mut inner = e.get_children();
                while let Some(x) = inner.pop() {
                    if x.get_kind() == EntityKind::UnaryExpr {
                        let site = self.site(&x);
                        for key in self.sizeof_operand(&x) {
                            push_sized(&mut out, key, &site);
                        }
                    } else {
                        inner.extend(x.get_children());
                    }
                }
            }
        }
        self.returned_sizes.insert(usr, out.clone());
        out
    }

    /// The record written when an object of type `ty` is written (arrays count as their
    /// elements).
    fn record_of_type(&mut self, ty: Option<Type>) -> Option<String> {
        let mut ty = ty?.get_canonical_type();
        while let Some(element) = array_element(&ty) {
            ty = element.get_canonical_type();
        }
        if ty.get_kind() != TypeKind::Record {
            return None;
        }
        self.record_key(ty.get_declaration()?)
    }

    /// The record pointed to by a value of type `ty`, if it is a pointer to one.
    fn record_of_pointee(&mut self, ty: Option<Type>) -> Option<String> {
        let ty = ty?.get_canonical_type();
        if ty.get_kind() != TypeKind::Pointer {
            return None;
        }
        self.record_of_type(ty.get_pointee_type())
    }

    fn function(&mut self, entity: Entity) -> Function {
        let params: Vec<String> = entity
            .get_arguments()
            .unwrap_or_default()
            .iter()
            .map(|p| p.get_usr().map(|u| u.0).unwrap_or_default())
            .collect();
        let takes_pointers = entity.is_variadic()
            || entity
                .get_arguments()
                .unwrap_or_default()
                .iter()
                .any(|p| !is_scalar(p.get_type()));
        if let Some(file) = entity
            .get_location()
            .and_then(|l| l.get_expansion_location().file)
        {
            self.program.files.insert(file.get_path());
        }
        let signature = entity
            .get_type()
            .map(|t| function_signature(t.get_canonical_type()))
            .unwrap_or_default();
        let mut walker = BodyWalker {
            builder: self,
            params,
            local_roots: BTreeMap::new(),
            local_memory: BTreeMap::new(),
            alloc_target: None,
            call_locals: BTreeMap::new(),
            position: None,
            conditional: 0,
            guards: Vec::new(),
            depth: 0,
            function: Function {
                name: entity.get_name().unwrap_or_default(),
                signature,
                site: Site::default(),
                takes_pointers,
                ..Function::default()
            },
        };
        walker.function.site = walker.builder.site(&entity);
        walker.function.noreturn = is_noreturn(&entity);
        for child in entity.get_children() {
            if child.get_kind() == EntityKind::CompoundStmt {
                walker.function.body = Some(walker.walk(child, false));
            }
        }
        walker.function
    }
}

fn record_name(def: &Entity, site: &Site) -> String {
    let keyword = if def.get_kind() == EntityKind::UnionDecl {
        "union"
    } else {
        "struct"
    };
    if let Some(name) = def.get_name().filter(|n| !n.is_empty() && !n.contains(' ')) {
        return format!("{keyword} {name}");
    }
    // An anonymous record: clang names its type after the typedef that names it, if any.
    if let Some(ty) = def.get_type() {
        let shown = ty.get_display_name();
        if !shown.is_empty() && !shown.contains(' ') {
            return shown;
        }
    }
    format!("{keyword} <anonymous at {site}>")
}

/// The canonical spelling of a function type, through a pointer to one: what an indirect
/// call and its possible targets have in common.
fn function_signature(ty: Type) -> String {
    let ty = if ty.get_kind() == TypeKind::Pointer {
        ty.get_pointee_type()
            .map(|p| p.get_canonical_type())
            .unwrap_or(ty)
    } else {
        ty
    };
    ty.get_display_name()
}

/// The element type of (possibly nested) arrays, or the type itself.
fn array_or_self(mut ty: Type) -> Type {
    while let Some(element) = array_element(&ty) {
        ty = element.get_canonical_type();
    }
    ty
}

fn array_element<'tu>(ty: &Type<'tu>) -> Option<Type<'tu>> {
    match ty.get_kind() {
        TypeKind::ConstantArray
        | TypeKind::IncompleteArray
        | TypeKind::VariableArray
        | TypeKind::DependentSizedArray => ty.get_element_type(),
        _ => None,
    }
}

/// Deepest nesting of statements and expressions whose [`Shape`] is kept; below it, code
/// counts as falling through (the safe side). It bounds the nesting of the facts that cross
/// between processes as JSON (at most four JSON levels per level of code), and the recursion
/// that reads them.
const SHAPE_DEPTH_MAX: usize = 48;

/// Longest declaration prefix (before the name) searched for `_Noreturn`.
const DECLARATION_PREFIX_BYTES_MAX: usize = 512;

/// A function declared `noreturn`: the attribute shows in its type; C11's `_Noreturn` and
/// C23's `[[noreturn]]` only in the tokens before its name.
fn is_noreturn(f: &Entity) -> bool {
    if f.get_type()
        .is_some_and(|t| t.get_display_name().contains("noreturn"))
    {
        return true;
    }
    let (Some(range), Some(name_at)) = (f.get_range(), f.get_location()) else {
        return false;
    };
    let prefix = clang::source::SourceRange::new(range.get_start(), name_at);
    tokens_within(prefix, DECLARATION_PREFIX_BYTES_MAX)
        .unwrap_or_default()
        .iter()
        .any(|t| matches!(t.get_spelling().as_str(), "_Noreturn" | "noreturn"))
}

/// A pointer (arrays decay to pointers too).
fn is_pointer(ty: Option<Type>) -> bool {
    ty.is_some_and(|t| {
        let t = t.get_canonical_type();
        t.get_kind() == TypeKind::Pointer || array_element(&t).is_some()
    })
}

/// A non-pointer scalar: integers, floating point, enums. Pointers, arrays (decayed to
/// pointers) and records passed by value are not.
fn is_scalar(ty: Option<Type>) -> bool {
    let Some(ty) = ty else {
        return false;
    };
    let ty = ty.get_canonical_type();
    !matches!(
        ty.get_kind(),
        TypeKind::Pointer
            | TypeKind::BlockPointer
            | TypeKind::ConstantArray
            | TypeKind::IncompleteArray
            | TypeKind::VariableArray
            | TypeKind::DependentSizedArray
            | TypeKind::Record
            | TypeKind::Unexposed
    )
}

/// Skips what does not change which object an expression denotes: parentheses and implicit
/// casts (shown by libclang as unexposed expressions).
fn strip_parens<'tu>(mut e: Entity<'tu>) -> Entity<'tu> {
    while matches!(
        e.get_kind(),
        EntityKind::ParenExpr | EntityKind::UnexposedExpr
    ) {
        match e.get_children().into_iter().next() {
            Some(child) => e = child,
            None => break,
        }
    }
    e
}

/// Like [`strip_parens`], and explicit casts too (for pointer arguments: `(void *)&r`).
fn strip_casts<'tu>(mut e: Entity<'tu>) -> Entity<'tu> {
    loop {
        e = strip_parens(e);
        if e.get_kind() != EntityKind::CStyleCastExpr {
            return e;
        }
        // The cast's children may start with the type reference; the operand is last.
        match e.get_children().into_iter().last() {
            Some(child) => e = child,
            None => return e,
        }
    }
}

/// Longest stretch of source read between two operands to find their operator.
const OPERATOR_GAP_MAX: usize = 64;

/// Longest source range tokenized to find an operator or an initializer: a range that maps
/// from a macro definition to its expansion can span a whole header, and tokenizing it costs
/// more than the rest of the unit.
const TOKENIZED_BYTES_MAX: usize = 16 * 1024;

/// Longest source range spelled out to name an indirect callee.
const SPELLED_BYTES_MAX: usize = 256;

/// Most tokens spelled out to name an indirect callee (`a->b.c[i]->f` is 9).
const SPELLED_TOKENS_MAX: usize = 32;

/// The tokens of `range` when it lies in one file and spans at most `max` bytes.
fn tokens_within<'tu>(
    range: clang::source::SourceRange<'tu>,
    max: usize,
) -> Option<Vec<clang::token::Token<'tu>>> {
    // Checked both ways: tokenizing follows spelling locations, which inside a macro can lie
    // far from where the macro is used.
    let within = |(start_file, start): (Option<PathBuf>, usize),
                  (end_file, end): (Option<PathBuf>, usize)| {
        start_file.is_some() && start_file == end_file && start <= end && end - start <= max
    };
    let as_usize = |(file, at): (Option<PathBuf>, u32)| (file, at as usize);
    let by_file = within(
        as_usize(offset_of(range.get_start())),
        as_usize(offset_of(range.get_end())),
    );
    let by_spelling = within(spelling_of(range.get_start()), spelling_of(range.get_end()));
    (by_file && by_spelling).then(|| range.tokenize())
}

fn offset_of(location: clang::source::SourceLocation) -> (Option<PathBuf>, u32) {
    let loc = location.get_file_location();
    (loc.file.map(|f| f.get_path()), loc.offset)
}

fn spelling_of(location: clang::source::SourceLocation) -> (Option<PathBuf>, usize) {
    let loc = location.get_spelling_location();
    (loc.file.map(|f| f.get_path()), loc.offset as usize)
}

/// The operator characters between two source locations (by spelling, so this works inside
/// macro bodies too), when the text between holds nothing but an operator, blanks and
/// parentheses.
fn operator_between(
    texts: &mut BTreeMap<PathBuf, Vec<u8>>,
    from: clang::source::SourceLocation,
    to: clang::source::SourceLocation,
) -> Option<String> {
    let (from_file, start) = spelling_of(from);
    let (to_file, end) = spelling_of(to);
    let file = from_file?;
    if Some(&file) != to_file.as_ref() || end < start || end - start > OPERATOR_GAP_MAX {
        return None;
    }
    if !texts.contains_key(&file) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        texts.insert(file.clone(), bytes);
    }
    let between = texts.get(&file)?.get(start..end)?;
    let mut op = String::new();
    for &b in between {
        match b {
            b' ' | b'\t' | b'\n' | b'\r' | b'\\' | b'(' | b')' => {}
            b'=' | b'+' | b'-' | b'*' | b'/' | b'%' | b'<' | b'>' | b'&' | b'|' | b'^' | b'!'
            | b'~' => op.push(b as char),
            _ => return None,
        }
    }
    (!op.is_empty()).then_some(op)
}

/// The operator of a binary expression: the text between its operands, else the first
/// punctuation token between them.
fn binary_operator(texts: &mut BTreeMap<PathBuf, Vec<u8>>, e: &Entity) -> Option<String> {
    let children = e.get_children();
    let (lhs, rhs) = (children.first()?, children.get(1)?);
    let (lr, rr) = (lhs.get_range()?, rhs.get_range()?);
    if let Some(op) = operator_between(texts, lr.get_end(), rr.get_start()) {
        return Some(op);
    }
    let (lhs_file, lhs_end) = offset_of(lr.get_end());
    let (rhs_file, rhs_start) = offset_of(rr.get_start());
    if lhs_file.is_none() || lhs_file != rhs_file || lhs_end >= rhs_start {
        // Both operands come from one macro expansion, whose body libclang does not show.
        // Only an assignment leaves its left operand an lvalue: every other operator reads
        // it, through an implicit conversion (an unexposed expression).
        return is_plain_lvalue(lhs).then(|| "=".to_string());
    }
    for token in tokens_within(e.get_range()?, TOKENIZED_BYTES_MAX)? {
        let (_, at) = offset_of(token.get_range().get_start());
        if token.get_kind() == TokenKind::Punctuation && at >= lhs_end && at < rhs_start {
            return Some(token.get_spelling());
        }
    }
    None
}

/// The operator of a unary expression: `++`, `--`, `*`, `&`, `-`, ...
fn unary_operator(texts: &mut BTreeMap<PathBuf, Vec<u8>>, e: &Entity) -> Option<String> {
    let operand = e.get_children().into_iter().next()?;
    let (whole, inner) = (e.get_range()?, operand.get_range()?);
    if let Some(op) = operator_between(texts, whole.get_start(), inner.get_start()) {
        return Some(op);
    }
    if let Some(op) = operator_between(texts, inner.get_end(), whole.get_end()) {
        return Some(op);
    }
    let (wf, ws) = offset_of(whole.get_start());
    let (inf, is) = offset_of(inner.get_start());
    let (_, we) = offset_of(whole.get_end());
    let (_, ie) = offset_of(inner.get_end());
    if wf.is_none() || wf != inf || (ws, we) == (is, ie) {
        // Inside one macro expansion. An lvalue operand left as it is belongs to `++`, `--`
        // or `&`; of those, only `++` and `--` keep the operand's type.
        let same_type = match (e.get_type(), operand.get_type()) {
            (Some(a), Some(b)) => a.get_canonical_type() == b.get_canonical_type(),
            _ => false,
        };
        return (is_plain_lvalue(&operand) && same_type).then(|| "++".to_string());
    }
    let tokens = tokens_within(whole, TOKENIZED_BYTES_MAX)?;
    let token = if ws < is {
        tokens.first()
    } else {
        tokens.last()
    };
    token.map(|t| t.get_spelling())
}

/// How to show the callee of an indirect call: its source text, or, when that is hidden in a
/// macro expansion, the member or variable it loads the pointer from.
fn callee_text(callee: &Entity) -> String {
    let text = spelled(callee);
    if text.chars().any(|c| c.is_alphanumeric()) {
        return text;
    }
    let mut stack = vec![*callee];
    while let Some(e) = stack.pop() {
        match e.get_kind() {
            EntityKind::MemberRefExpr => {
                let name = e.get_name().unwrap_or_default();
                return format!("->{name} (in a macro)");
            }
            EntityKind::DeclRefExpr => {
                let name = e.get_name().unwrap_or_default();
                return format!("{name} (in a macro)");
            }
            _ => stack.extend(e.get_children()),
        }
    }
    "(in a macro)".into()
}

/// An lvalue expression not wrapped in an implicit conversion: a variable, a member, an
/// array element (inside parentheses or not).
fn is_plain_lvalue(e: &Entity) -> bool {
    let mut e = *e;
    while e.get_kind() == EntityKind::ParenExpr {
        match e.get_children().into_iter().next() {
            Some(inner) => e = inner,
            None => return false,
        }
    }
    matches!(
        e.get_kind(),
        EntityKind::DeclRefExpr | EntityKind::MemberRefExpr | EntityKind::ArraySubscriptExpr
    )
}

/// Source text of an expression, from its tokens.
fn spelled(e: &Entity) -> String {
    let Some(range) = e.get_range() else {
        return String::new();
    };
    let mut tokens = tokens_within(range, SPELLED_BYTES_MAX).unwrap_or_default();
    if tokens.len() > SPELLED_TOKENS_MAX {
        // A range stretching from a macro's definition to its use: not a callee's spelling.
        tokens.clear();
    }
    let mut text = String::new();
    let mut last_word = false;
    for token in tokens {
        let word = matches!(
            token.get_kind(),
            TokenKind::Identifier | TokenKind::Keyword | TokenKind::Literal
        );
        if word && last_word {
            text.push(' ');
        }
        text.push_str(&token.get_spelling());
        last_word = word;
    }
    if text.is_empty() {
        // Hidden in a macro of a system header (`stderr`): name what it refers to.
        e.get_name().unwrap_or_default()
    } else {
        text
    }
}

/// Where an expression is, to recognize it again: its file and spelling offsets.
type EntityAt = ((Option<PathBuf>, u32), (Option<PathBuf>, usize));

fn entity_at(e: &Entity) -> Option<EntityAt> {
    let start = e.get_range()?.get_start();
    Some((offset_of(start), spelling_of(start)))
}

/// The callee of a direct call: (USR, name).
fn direct_callee(call: &Entity) -> Option<(String, String)> {
    let f = call
        .get_reference()
        .filter(|r| r.get_kind() == EntityKind::FunctionDecl)?;
    Some((f.get_usr()?.0, f.get_name().unwrap_or_default()))
}

/// An allocating function, by name: `malloc`, `calloc`, `realloc`, `zmalloc`,
/// `s_malloc_usable`, `je_calloc`, `slabs_alloc`, ... (the result must be a pointer too).
/// Not `address6_allocate` (it allocates an address, not memory) nor `zmalloc_size`.
pub(crate) fn is_allocator(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let allocates = ["malloc", "calloc", "realloc"]
        .iter()
        .any(|a| lower.contains(a))
        || lower.ends_with("alloc");
    allocates && !lower.contains("free") && !lower.contains("size")
}

#[cfg(test)]
mod allocator_tests {
    use super::is_allocator;

    #[test]
    fn allocators_are_known_by_name() {
        for name in [
            "malloc",
            "zcalloc",
            "s_malloc_usable",
            "ztrymalloc_usable",
            "slabs_alloc",
        ] {
            assert!(is_allocator(name), "{name}");
        }
        for name in [
            "address6_allocate",
            "zmalloc_size",
            "zfree",
            "lease_allocate",
        ] {
            assert!(!is_allocator(name), "{name}");
        }
    }
}

struct BodyWalker<'b> {
    builder: &'b mut Builder,
    /// USRs of the parameters, in order.
    params: Vec<String>,
    /// Local pointer variables (by USR) and where what they point to lives, from their
    /// initializers and assignments (flow-insensitive: the last one seen wins).
    local_roots: BTreeMap<String, Root>,
    /// Local variables (by USR) typed by a `sizeof(T)`: pointers to memory allocated with a
    /// size naming T, and sizes computed from `sizeof(T)`; with where T is named.
    local_memory: BTreeMap<String, Vec<(String, Site)>>,
    /// An allocating call whose result is assigned or cast to a pointer to a record: the call
    /// and the record.
    alloc_target: Option<(EntityAt, String)>,
    /// Local pointers (by USR) assigned the result of a direct call: (callee USR, name).
    call_locals: BTreeMap<String, (String, String)>,
    /// The statement being walked: (block, index) in [`Function::blocks`].
    position: Option<(usize, usize)>,
    /// How many conditions (other than null checks) the walk is under: branches of `if`,
    /// `?:` and `switch`, right operands of `&&` and `||`.
    conditional: usize,
    /// The locals (USRs) null-checked by the `if`s the walk is under: `if (p) ...`.
    guards: Vec<String>,
    /// How deep in the body the walk is.
    depth: usize,
    function: Function,
}

impl BodyWalker<'_> {
    /// Walks a statement or expression, recording its writes, calls and flows; returns how it
    /// ends (see [`Shape`]).
    fn walk(&mut self, e: Entity, loop_header: bool) -> Shape {
        self.depth += 1;
        let shape = self.walk_inner(e, loop_header);
        self.depth -= 1;
        if self.depth > SHAPE_DEPTH_MAX {
            // Beyond the bound (long `else if` chains), code counts as falling through.
            Shape::falls()
        } else {
            shape
        }
    }

    fn walk_inner(&mut self, e: Entity, loop_header: bool) -> Shape {
        let mut operator = None;
        match e.get_kind() {
            EntityKind::BinaryOperator => {
                operator = binary_operator(&mut self.builder.texts, &e);
                let children = e.get_children();
                if let (Some("="), Some(lhs), Some(rhs)) =
                    (operator.as_deref(), children.first(), children.get(1))
                {
                    self.write_lvalue(*lhs, &e, "=", loop_header);
                    self.field_store(*lhs, Some(*rhs));
                    self.flow_into(*lhs, *rhs, &e);
                    self.note_alloc_target(lhs.get_type(), *rhs);
                    let target = strip_parens(*lhs);
                    if target.get_kind() == EntityKind::DeclRefExpr {
                        if let Some(var) = target.get_reference() {
                            self.local_assign(var, *rhs);
                        }
                    }
                }
            }
            EntityKind::CompoundAssignOperator => {
                if let Some(lhs) = e.get_children().into_iter().next() {
                    let how = binary_operator(&mut self.builder.texts, &e)
                        .unwrap_or_else(|| "op=".into());
                    self.write_lvalue(lhs, &e, &how, loop_header);
                }
            }
            EntityKind::UnaryOperator => {
                let op = unary_operator(&mut self.builder.texts, &e);
                if let Some(op) = op.as_deref().filter(|op| *op == "++" || *op == "--") {
                    if let Some(operand) = e.get_children().into_iter().next() {
                        self.write_lvalue(operand, &e, op, loop_header);
                    }
                } else if op.as_deref() == Some("&") {
                    // `&c->reply`: the field may get any value through the address.
                    if let Some(operand) = e.get_children().into_iter().next() {
                        self.field_store(operand, None);
                    }
                }
            }
            EntityKind::VarDecl => self.local_init(e, loop_header),
            EntityKind::CallExpr => {
                let direct = self.call(e, loop_header);
                // A direct callee is a call, not a use of the function's address.
                let mut parts: Vec<Shape> = e
                    .get_children()
                    .into_iter()
                    .skip(usize::from(direct))
                    .map(|child| self.walk(child, loop_header))
                    .collect();
                parts.push(self.call_shape(&e));
                return Shape::seq(parts);
            }
            EntityKind::DeclRefExpr => self.builder.function_reference(&e),
            EntityKind::CompoundStmt => return self.block(e, loop_header),
            EntityKind::ForStmt | EntityKind::WhileStmt | EntityKind::DoStmt => {
                // After a loop body comes the loop again: blocks inside start a new chain.
                let outside = self.position.take();
                let children = e.get_children();
                let last = children.len().saturating_sub(1);
                let is_for = e.get_kind() == EntityKind::ForStmt;
                for (i, child) in children.into_iter().enumerate() {
                    // libclang lists only the parts of a `for` present; the body is last.
                    self.walk(child, loop_header || (is_for && i < last));
                }
                self.position = outside;
                return Shape::falls();
            }
            EntityKind::SwitchStmt => {
                for (i, child) in e.get_children().into_iter().enumerate() {
                    // The cases may not run.
                    self.conditional += usize::from(i > 0);
                    self.walk(child, loop_header);
                    self.conditional -= usize::from(i > 0);
                }
                return Shape::falls();
            }
            EntityKind::IfStmt | EntityKind::ConditionalOperator => {
                let children = e.get_children();
                // `if (p) f(p);` runs `f(p)` whenever `p` holds an object: a null-check guard,
                // not a condition, for what is done to `p`.
                let guard = (e.get_kind() == EntityKind::IfStmt && children.len() == 2)
                    .then(|| children.first().and_then(|c| self.null_checked(*c)))
                    .flatten();
                let mut parts = Vec::new();
                for (i, child) in children.into_iter().enumerate() {
                    if i == 0 {
                        parts.push(self.walk(child, loop_header));
                        continue;
                    }
                    match &guard {
                        Some(var) => self.guards.push(var.clone()),
                        None => self.conditional += 1,
                    }
                    parts.push(self.walk(child, loop_header));
                    match &guard {
                        Some(_) => {
                            self.guards.pop();
                        }
                        None => self.conditional -= 1,
                    }
                }
                if parts.len() < 2 {
                    return Shape::seq(parts);
                }
                let branches = parts.split_off(1);
                let branches = if branches.len() == 1 {
                    vec![branches[0].clone(), Shape::falls()]
                } else {
                    branches
                };
                parts.push(Shape::alt(branches));
                return Shape::seq(parts);
            }
            EntityKind::ReturnStmt => {
                self.function.returns_at.push(self.position);
                if let Some(value) = e.get_children().into_iter().next() {
                    self.note_returned(value);
                    let value = strip_casts(value);
                    if value.get_kind() == EntityKind::DeclRefExpr {
                        if let Some(usr) = value.get_reference().and_then(|v| v.get_usr()) {
                            if !self.function.returned_locals.contains(&usr.0) {
                                self.function.returned_locals.push(usr.0);
                            }
                        }
                    }
                }
                let mut parts: Vec<Shape> = e
                    .get_children()
                    .into_iter()
                    .map(|child| self.walk(child, loop_header))
                    .collect();
                parts.push(Shape::Leave);
                return Shape::seq(parts);
            }
            EntityKind::BreakStmt
            | EntityKind::ContinueStmt
            | EntityKind::GotoStmt
            | EntityKind::IndirectGotoStmt => return Shape::Leave,
            EntityKind::UnaryExpr => return Shape::falls(), // sizeof: nothing is evaluated
            EntityKind::LabelStmt => self.function.labels_at.push(self.position),
            _ => {}
        }
        let short_circuit = matches!(operator.as_deref(), Some("&&" | "||"));
        let mut parts: Vec<Shape> = Vec::new();
        for (i, child) in e.get_children().into_iter().enumerate() {
            // The right operand of `&&` and `||` may not run.
            let maybe = short_circuit && i > 0;
            self.conditional += usize::from(maybe);
            parts.push(self.walk(child, loop_header));
            self.conditional -= usize::from(maybe);
        }
        if short_circuit && parts.len() == 2 {
            // The right operand may not be evaluated.
            let right = parts.pop().unwrap_or_else(Shape::falls);
            parts.push(Shape::alt(vec![right, Shape::falls()]));
        }
        Shape::seq(parts)
    }

    /// A `{ ... }` block: a new entry of [`Function::blocks`], its statements walked with
    /// their positions.
    fn block(&mut self, e: Entity, loop_header: bool) -> Shape {
        let id = self.function.blocks.len();
        self.function.blocks.push(Block {
            items: Vec::new(),
            parent: self.position,
        });
        let outside = self.position;
        let mut items = Vec::new();
        for (i, child) in e.get_children().into_iter().enumerate() {
            self.position = Some((id, i));
            items.push(self.walk(child, loop_header));
        }
        self.position = outside;
        if let Some(block) = self.function.blocks.get_mut(id) {
            block.items = items;
        }
        Shape::Block(id)
    }

    /// How a call ends: the process, for `exit`, `abort` and functions declared `noreturn`;
    /// for other direct calls it depends on the callee, settled by the analysis.
    fn call_shape(&mut self, e: &Entity) -> Shape {
        let Some(f) = e
            .get_reference()
            .filter(|r| r.get_kind() == EntityKind::FunctionDecl)
        else {
            return Shape::falls();
        };
        let name = f.get_name().unwrap_or_default();
        if NORETURN_FUNCTIONS.contains(&name.as_str()) || is_noreturn(&f) {
            return Shape::Stop;
        }
        match f.get_usr() {
            Some(usr) => Shape::Call(usr.0),
            None => Shape::falls(),
        }
    }

    fn local_init(&mut self, var: Entity, loop_header: bool) {
        // `char buf[N];` has an expression child too (the size): only `=` makes an initializer.
        let has_init = var.get_range().is_some_and(|r| {
            tokens_within(r, TOKENIZED_BYTES_MAX)
                .unwrap_or_default()
                .iter()
                .any(|t| t.get_kind() == TokenKind::Punctuation && t.get_spelling() == "=")
        });
        let init = var
            .get_children()
            .into_iter()
            .rfind(|c| is_expression(c.get_kind()));
        let Some(init) = init.filter(|_| has_init) else {
            return;
        };
        self.note_alloc_target(var.get_type(), init);
        let site = self.builder.site(&var);
        // A `static` variable's initializer is a constant the compiler places in the image:
        // nothing runs when the function does.
        let runs = var.get_storage_class() != Some(clang::StorageClass::Static);
        if let Some(key) = self.builder.record_of_type(var.get_type()).filter(|_| runs) {
            self.function.writes.push(Write {
                records: vec![(key, "object initialized".into())],
                site: site.clone(),
                how: "initializer".into(),
                loop_header,
                root: None,
                stack: is_local(&var),
                at: self.position,
                private_static: false,
            });
        }
        self.local_assign(var, init);
        if let Some(usr) = var.get_usr().map(|u| u.0) {
            let mut from = Vec::new();
            self.vals(init, &mut from);
            if !from.is_empty() {
                self.function.flows.push(Flow {
                    target: Val::Local(usr),
                    from,
                    site,
                });
            }
        }
    }

    /// Records what writing the lvalue `lv` modifies.
    fn write_lvalue(&mut self, lv: Entity, statement: &Entity, how: &str, loop_header: bool) {
        let mut records = Vec::new();
        self.lvalue_records(lv, &mut records);
        if !records.is_empty() {
            let root = self.object_root(lv);
            self.function.writes.push(Write {
                records,
                site: self.builder.site(statement),
                how: how.to_string(),
                loop_header,
                root,
                stack: on_stack(lv),
                at: self.position,
                private_static: private_static(lv),
            });
        }
    }

    /// `lv = value` (or `&lv` without a value): when `lv` is a pointer field of a record,
    /// remember what it gets.
    fn field_store(&mut self, lv: Entity, value: Option<Entity>) {
        let lv = strip_parens(lv);
        if lv.get_kind() != EntityKind::MemberRefExpr {
            return;
        }
        let Some(field) = lv.get_reference() else {
            return;
        };
        let is_pointer_field = field
            .get_type()
            .is_some_and(|t| t.get_canonical_type().get_kind() == TypeKind::Pointer);
        if !is_pointer_field {
            return;
        }
        let Some(owner) = field
            .get_semantic_parent()
            .and_then(|p| self.builder.record_key(p))
        else {
            return;
        };
        // `_ms.commands = &mc;` with both local: the pointee ends with the same frame.
        let same_frame =
            on_stack(lv) && value.is_some_and(|v| address_on_stack(&mut self.builder.texts, v));
        let from = match value {
            None => LocalFrom::Other,
            Some(value) => {
                let value = strip_casts(self.assigned_value(value));
                match value.get_kind() {
                    EntityKind::CallExpr => direct_callee(&value)
                        .map(|(usr, _)| LocalFrom::Call(usr))
                        .unwrap_or(LocalFrom::Other),
                    EntityKind::IntegerLiteral | EntityKind::GNUNullExpr => LocalFrom::Null,
                    _ => LocalFrom::Other,
                }
            }
        };
        let site = self.builder.site(&lv);
        self.function.field_stores.push(FieldStore {
            owner,
            field: field.get_name().unwrap_or_default(),
            from,
            same_frame,
            site,
        });
    }

    /// A local pointer variable gets a value: remember where what it points to lives.
    fn local_assign(&mut self, var: Entity, value: Entity) {
        if var.get_kind() != EntityKind::VarDecl {
            return;
        }
        let Some(usr) = var.get_usr().map(|u| u.0) else {
            return;
        };
        if !is_pointer(var.get_type()) {
            // A size: `int hdrlen = sdsHdrSize(type);`.
            let sizes = self.sizeof_records(value);
            if !sizes.is_empty() {
                self.local_memory.insert(usr, sizes);
            }
            return;
        }
        let memory = self.memory_records(value);
        if !memory.is_empty() {
            self.local_memory.insert(usr.clone(), memory);
        }
        let value = self.assigned_value(value);
        if is_local(&var) {
            let call = strip_casts(value);
            let from = match call.get_kind() {
                EntityKind::CallExpr => direct_callee(&call)
                    .map(|(usr, _)| LocalFrom::Call(usr))
                    .unwrap_or(LocalFrom::Other),
                EntityKind::IntegerLiteral | EntityKind::GNUNullExpr => LocalFrom::Null,
                _ => LocalFrom::Other,
            };
            self.function.local_assigns.push(LocalAssign {
                var: usr.clone(),
                name: var.get_name().unwrap_or_default(),
                from,
                site: self.builder.site(&value),
                at: self.position,
            });
        }
        let call = strip_casts(value);
        if call.get_kind() == EntityKind::CallExpr {
            if let Some(from) = direct_callee(&call) {
                self.call_locals.insert(usr.clone(), from);
            }
        }
        if let Some(root) = self.pointer_root(value) {
            self.local_roots.insert(usr, root);
        }
    }

    /// The local pointer (USR) that the condition `cond` checks for null, when that is all it
    /// does: `p`, `p != NULL`, `NULL != p`.
    fn null_checked(&mut self, cond: Entity) -> Option<String> {
        let cond = strip_casts(cond);
        let var_of = |e: Entity| {
            let e = strip_casts(e);
            (e.get_kind() == EntityKind::DeclRefExpr)
                .then(|| e.get_reference())
                .flatten()
                .filter(|v| v.get_kind() == EntityKind::VarDecl && is_local(v))
                .filter(|v| is_pointer(v.get_type()))
                .and_then(|v| v.get_usr())
                .map(|u| u.0)
        };
        match cond.get_kind() {
            EntityKind::DeclRefExpr => var_of(cond),
            EntityKind::BinaryOperator
                if binary_operator(&mut self.builder.texts, &cond).as_deref() == Some("!=") =>
            {
                let children = cond.get_children();
                let is_null = |e: &Entity| {
                    matches!(
                        strip_casts(*e).get_kind(),
                        EntityKind::IntegerLiteral | EntityKind::GNUNullExpr
                    )
                };
                match (children.first(), children.get(1)) {
                    (Some(a), Some(b)) if is_null(b) => var_of(*a),
                    (Some(a), Some(b)) if is_null(a) => var_of(*b),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The value an assignment's right side stores: through chained assignments
    /// (`c = server.current_client = f()` gives `f()`).
    fn assigned_value<'tu>(&mut self, mut value: Entity<'tu>) -> Entity<'tu> {
        for _ in 0..SHAPE_DEPTH_MAX {
            let inner = strip_casts(value);
            if inner.get_kind() != EntityKind::BinaryOperator
                || binary_operator(&mut self.builder.texts, &inner).as_deref() != Some("=")
            {
                break;
            }
            match inner.get_children().into_iter().nth(1) {
                Some(right) => value = right,
                None => break,
            }
        }
        value
    }

    /// `return value;`: when the value is the result of a direct call (or a local assigned
    /// one), the callee is recorded in [`Function::returns_from`].
    fn note_returned(&mut self, value: Entity) {
        let value = strip_casts(value);
        let from = match value.get_kind() {
            EntityKind::CallExpr => direct_callee(&value),
            EntityKind::DeclRefExpr => value
                .get_reference()
                .and_then(|v| v.get_usr())
                .and_then(|u| self.call_locals.get(&u.0).cloned()),
            _ => None,
        };
        if let Some(from) = from {
            if !self.function.returns_from.contains(&from) {
                self.function.returns_from.push(from);
            }
        }
    }

    /// Before walking `value` assigned to something of type `target`: when `value` is an
    /// allocating call, the pointee record of the target (or of a cast around the call) is
    /// what the call allocates.
    fn note_alloc_target(&mut self, target: Option<Type>, value: Entity) {
        let call = strip_casts(value);
        if call.get_kind() != EntityKind::CallExpr {
            return;
        }
        let record = self
            .builder
            .record_of_pointee(value.get_type())
            .or_else(|| self.builder.record_of_pointee(target));
        if let (Some(at), Some(record)) = (entity_at(&call), record) {
            self.alloc_target = Some((at, record));
        }
    }

    /// The records named by `sizeof` in the expression `e` (a size): directly, through local
    /// sizes computed from `sizeof`, and through helpers that return `sizeof(T)`.
    fn sizeof_records(&mut self, e: Entity) -> Vec<(String, Site)> {
        let mut out: Vec<(String, Site)> = Vec::new();
        let mut stack = vec![e];
        while let Some(e) = stack.pop() {
            match e.get_kind() {
                EntityKind::UnaryExpr => {
                    // sizeof(struct T), sizeof(T), sizeof *p, sizeof(*p).
                    let site = self.builder.site(&e);
                    for key in self.builder.sizeof_operand(&e) {
                        push_sized(&mut out, key, &site);
                    }
                }
                EntityKind::DeclRefExpr => {
                    let usr = e.get_reference().and_then(|v| v.get_usr()).map(|u| u.0);
                    if let Some(known) = usr.and_then(|u| self.local_memory.get(&u)) {
                        for (key, site) in known.clone() {
                            push_sized(&mut out, key, &site);
                        }
                    }
                }
                EntityKind::CallExpr => {
                    if let Some(f) = e.get_reference() {
                        for (key, site) in self.builder.returned_sizes(f) {
                            push_sized(&mut out, key, &site);
                        }
                    }
                    stack.extend(e.get_children());
                }
                _ => stack.extend(e.get_children()),
            }
        }
        out
    }

    /// The records the memory that the pointer expression `e` points into was allocated for:
    /// an allocating call whose size names `sizeof(T)`, or a local pointer derived from one by
    /// a cast or pointer arithmetic (`s = (char *)sh + hdrlen`).
    fn memory_records(&mut self, e: Entity) -> Vec<(String, Site)> {
        let e = strip_casts(e);
        match e.get_kind() {
            EntityKind::CallExpr => {
                let name = e
                    .get_reference()
                    .and_then(|f| f.get_name())
                    .unwrap_or_default();
                if !is_allocator(&name) || !is_pointer(e.get_type()) {
                    return Vec::new();
                }
                let mut out = Vec::new();
                for arg in e.get_arguments().unwrap_or_default() {
                    for (key, site) in self.sizeof_records(arg) {
                        push_sized(&mut out, key, &site);
                    }
                }
                out
            }
            EntityKind::BinaryOperator => e
                .get_children()
                .into_iter()
                .find(|c| is_pointer(c.get_type()))
                .map(|p| self.memory_records(p))
                .unwrap_or_default(),
            EntityKind::ConditionalOperator => {
                let mut out = Vec::new();
                for branch in e.get_children().into_iter().skip(1) {
                    for (key, site) in self.memory_records(branch) {
                        push_sized(&mut out, key, &site);
                    }
                }
                out
            }
            EntityKind::DeclRefExpr => e
                .get_reference()
                .and_then(|v| v.get_usr())
                .and_then(|u| self.local_memory.get(&u.0).cloned())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// The records whose bytes a write through the pointer expression `e` changes, when `e`
    /// is no pointer to a record: a cast or arithmetic away from a pointer to a record
    /// (`((char *)obj)[3]`), or memory allocated with `sizeof(T)` (`*fp = type` where
    /// `fp = (unsigned char *)s - 1`).
    fn byte_records(&mut self, e: Entity, out: &mut Vec<(String, String)>) {
        let mut at = strip_parens(e);
        loop {
            match at.get_kind() {
                EntityKind::CStyleCastExpr => {
                    let Some(inner) = at.get_children().into_iter().last() else {
                        return;
                    };
                    let inner = strip_parens(inner);
                    if let Some(key) = self.builder.record_of_pointee(inner.get_type()) {
                        let why = format!(
                            "bytes written through a cast of a pointer to it at {}",
                            self.builder.site(&at)
                        );
                        push_unique(out, key, why);
                        return;
                    }
                    at = inner;
                }
                EntityKind::BinaryOperator => {
                    let Some(pointer) = at
                        .get_children()
                        .into_iter()
                        .find(|c| is_pointer(c.get_type()))
                    else {
                        return;
                    };
                    at = strip_parens(pointer);
                }
                _ => break,
            }
        }
        for (key, site) in self.memory_records(at) {
            push_unique(
                out,
                key,
                format!("bytes written in memory allocated with its sizeof at {site}"),
            );
        }
    }

    /// Where the object that the pointer expression `e` points to lives: behind a parameter,
    /// or behind a pointer read from a field. Casts and pointer arithmetic keep the object.
    fn pointer_root(&mut self, e: Entity) -> Option<Root> {
        let e = strip_casts(e);
        match e.get_kind() {
            EntityKind::DeclRefExpr => {
                let var = e.get_reference()?;
                let usr = var.get_usr()?.0;
                match var.get_kind() {
                    EntityKind::ParmDecl => {
                        self.params.iter().position(|p| *p == usr).map(Root::Param)
                    }
                    EntityKind::VarDecl => self.local_roots.get(&usr).cloned().or_else(|| {
                        (is_local(&var) && is_pointer(var.get_type())).then_some(Root::Local(usr))
                    }),
                    _ => None,
                }
            }
            EntityKind::MemberRefExpr => {
                let field = e.get_reference()?;
                let ty = field.get_type()?.get_canonical_type();
                if array_element(&ty).is_some() {
                    // An embedded array decays to a pointer into the object holding it.
                    return self.object_root(e);
                }
                if ty.get_kind() != TypeKind::Pointer {
                    return None;
                }
                let owner = self.builder.record_key(field.get_semantic_parent()?)?;
                let base = self.object_root(e).and_then(|r| r.param());
                Some(Root::Field {
                    owner,
                    field: field.get_name().unwrap_or_default(),
                    site: self.builder.site(&e),
                    base,
                })
            }
            EntityKind::BinaryOperator => {
                if binary_operator(&mut self.builder.texts, &e).as_deref() == Some("=") {
                    // A chained assignment: `c = server.current_client = f()` is `f()`.
                    return self.pointer_root(e.get_children().into_iter().nth(1)?);
                }
                // Pointer arithmetic: `server.db + i`.
                let pointer = e
                    .get_children()
                    .into_iter()
                    .find(|c| is_pointer(c.get_type()))?;
                self.pointer_root(pointer)
            }
            EntityKind::UnaryOperator => {
                let operand = e.get_children().into_iter().next()?;
                if unary_operator(&mut self.builder.texts, &e).as_deref() == Some("&") {
                    self.object_root(operand)
                } else {
                    None
                }
            }
            _ => None,
        }
    }

    /// Where the object denoted by the lvalue `lv` lives, when it is reached through a
    /// pointer: `p->a.b` lives behind `p`, `db->dict->used` behind the field `dict`.
    fn object_root(&mut self, lv: Entity) -> Option<Root> {
        let mut e = strip_parens(lv);
        loop {
            match e.get_kind() {
                EntityKind::MemberRefExpr => {
                    let base = e.get_children().into_iter().next()?;
                    if is_pointer(base.get_type()) {
                        return self.pointer_root(base);
                    }
                    e = strip_parens(base);
                }
                EntityKind::ArraySubscriptExpr => {
                    let base = e.get_children().into_iter().next()?;
                    let inner = strip_parens(base);
                    let embedded = inner
                        .get_type()
                        .is_some_and(|t| array_element(&t.get_canonical_type()).is_some());
                    if !embedded {
                        return self.pointer_root(base);
                    }
                    e = inner;
                }
                EntityKind::UnaryOperator => {
                    let operand = e.get_children().into_iter().next()?;
                    return if unary_operator(&mut self.builder.texts, &e).as_deref() == Some("*") {
                        self.pointer_root(operand)
                    } else {
                        None
                    };
                }
                _ => return None,
            }
        }
    }

    /// The records modified by writing `lv`: the type of the object itself, then, walking out
    /// through member accesses, the record owning each member, for as long as the containment
    /// is by value (`a.b.c`: `c`'s owner and `b`'s owner; `a->b.c`: stops at the pointer).
    fn lvalue_records(&mut self, lv: Entity, out: &mut Vec<(String, String)>) {
        let mut e = strip_parens(lv);
        if let Some(key) = self.builder.record_of_type(e.get_type()) {
            push_unique(out, key, "object written".into());
        } else if let Some(pointer) = dereferenced(&mut self.builder.texts, &e) {
            // `*fp = v`, `s[-1] = v`: bytes of whatever the pointer points into.
            self.byte_records(pointer, out);
        }
        let mut depth = 0usize;
        loop {
            match e.get_kind() {
                EntityKind::MemberRefExpr => {
                    let field = e.get_reference();
                    let field_name = field.and_then(|f| f.get_name()).unwrap_or_default();
                    if let Some(owner) = field.and_then(|f| f.get_semantic_parent()) {
                        if let Some(key) = self.builder.record_key(owner) {
                            let why = if depth == 0 {
                                format!("field `{field_name}` written")
                            } else {
                                format!("embeds the written object in field `{field_name}`")
                            };
                            push_unique(out, key, why);
                        }
                    }
                    let Some(base) = e.get_children().into_iter().next() else {
                        return;
                    };
                    let through_pointer = base
                        .get_type()
                        .map(|t| t.get_canonical_type().get_kind() == TypeKind::Pointer)
                        .unwrap_or(true);
                    if through_pointer {
                        return;
                    }
                    e = strip_parens(base);
                }
                EntityKind::ArraySubscriptExpr => {
                    let Some(base) = e.get_children().into_iter().next() else {
                        return;
                    };
                    // An embedded array decays to a pointer: look beneath the implicit cast.
                    let inner = strip_parens(base);
                    let embedded = inner
                        .get_type()
                        .map(|t| array_element(&t.get_canonical_type()).is_some())
                        .unwrap_or(false);
                    if !embedded {
                        return;
                    }
                    e = inner;
                }
                _ => return,
            }
            depth += 1;
        }
    }

    /// Records written through a pointer argument of a library call.
    fn pointer_target_records(&mut self, arg: Entity, out: &mut Vec<(String, String)>) {
        let e = strip_casts(arg);
        if e.get_kind() == EntityKind::UnaryOperator
            && unary_operator(&mut self.builder.texts, &e).as_deref() == Some("&")
        {
            if let Some(operand) = e.get_children().into_iter().next() {
                self.lvalue_records(operand, out);
            }
            return;
        }
        let is_array = e
            .get_type()
            .map(|t| array_element(&t.get_canonical_type()).is_some())
            .unwrap_or(false);
        if is_array {
            self.lvalue_records(e, out);
        } else if let Some(key) = self.builder.record_of_pointee(e.get_type()) {
            push_unique(out, key, "pointed to by the argument".into());
        } else {
            self.byte_records(arg, out);
        }
    }

    /// Records a call; true when it is a direct call to a named function.
    fn call(&mut self, e: Entity, loop_header: bool) -> bool {
        let site = self.builder.site(&e);
        let args = e.get_arguments().unwrap_or_default();
        let referenced = e
            .get_reference()
            .filter(|r| r.get_kind() == EntityKind::FunctionDecl);
        let callee_text = match referenced {
            Some(f) => f.get_name().unwrap_or_default(),
            None => e
                .get_children()
                .into_iter()
                .next()
                .map(|c| callee_text(&c))
                .unwrap_or_default(),
        };
        let callee = referenced.and_then(|f| f.get_usr()).map(|u| u.0);
        let null_args: Vec<bool> = args
            .iter()
            .map(|a| {
                is_pointer(a.get_type())
                    && matches!(
                        strip_casts(*a).get_kind(),
                        EntityKind::IntegerLiteral | EntityKind::GNUNullExpr
                    )
            })
            .collect();
        let mut arg_vals = Vec::new();
        let mut roots = Vec::new();
        let stack_args: Vec<bool> = args
            .iter()
            .map(|a| address_on_stack(&mut self.builder.texts, *a))
            .collect();
        for arg in &args {
            let mut vals = Vec::new();
            self.vals(*arg, &mut vals);
            arg_vals.push(vals);
            let root = if is_pointer(arg.get_type()) {
                self.pointer_root(*arg)
            } else {
                None
            };
            roots.push(root);
        }
        if let Some(f) = referenced {
            if !f.is_definition() && f.get_definition().is_none() {
                let system = f.is_in_system_header();
                if let Some(usr) = &callee {
                    self.builder
                        .program
                        .externals
                        .entry(usr.clone())
                        .or_insert_with(|| External {
                            name: callee_text.clone(),
                            system,
                        });
                }
                self.library_call(&callee_text, &args, &arg_vals, &site, loop_header);
            }
        }
        let stream = STREAM_ARGUMENTS
            .iter()
            .find(|(name, _)| *name == callee_text)
            .and_then(|(_, i)| args.get(*i))
            .map(|a| spelled(&strip_casts(*a)));
        if is_pointer(e.get_type()) {
            if is_allocator(&callee_text) {
                self.allocation(&e, &args, &callee_text, &site, None);
            } else if let Some(usr) = &callee {
                self.allocation(&e, &[], &callee_text, &site, Some(usr.clone()));
            }
        }
        let direct = callee.is_some();
        let signature = if direct {
            None
        } else {
            e.get_children()
                .into_iter()
                .next()
                .and_then(|c| c.get_type())
                .map(|t| function_signature(t.get_canonical_type()))
        };
        self.function.calls.push(Call {
            callee,
            callee_text,
            site,
            args: arg_vals,
            stream,
            signature,
            roots,
            stack_args,
            null_args,
            conditional: self.conditional > 0,
            guards: self.guards.clone(),
            at: self.position,
        });
        direct
    }

    /// An allocating call: the records it allocates (the assignment's or cast's pointee, and
    /// the `sizeof`s in its size), if any.
    /// `through` names a function of the program that may wrap an allocator: only the
    /// record its result is assigned or cast to counts then.
    fn allocation(
        &mut self,
        e: &Entity,
        args: &[Entity],
        callee: &str,
        site: &Site,
        through: Option<String>,
    ) {
        let mut records: Vec<String> = Vec::new();
        let target = self
            .alloc_target
            .as_ref()
            .filter(|(at, _)| entity_at(e).as_ref() == Some(at))
            .map(|(_, record)| record.clone());
        if let Some(record) = target {
            self.alloc_target = None;
            records.push(record);
        }
        for arg in args {
            for (key, _) in self.sizeof_records(*arg) {
                if !records.contains(&key) {
                    records.push(key);
                }
            }
        }
        if !records.is_empty() {
            self.function.allocs.push(Alloc {
                records,
                callee: callee.to_string(),
                site: site.clone(),
                through,
            });
        }
    }

    fn library_call(
        &mut self,
        name: &str,
        args: &[Entity],
        arg_vals: &[Vec<Val>],
        site: &Site,
        loop_header: bool,
    ) {
        if let Some((_, written, from)) = LIBRARY_WRITERS.iter().find(|(n, _, _)| *n == name) {
            let mut records = Vec::new();
            let mut root = None;
            let mut stack = true;
            for (i, arg) in args.iter().enumerate() {
                if written.contains(&i) || from.is_some_and(|f| i >= f) {
                    self.pointer_target_records(*arg, &mut records);
                    root = root.or_else(|| self.pointer_root(*arg));
                    stack &= address_on_stack(&mut self.builder.texts, *arg);
                }
            }
            if !records.is_empty() {
                self.function.writes.push(Write {
                    records,
                    site: site.clone(),
                    how: name.to_string(),
                    loop_header,
                    root,
                    stack,
                    at: self.position,
                    private_static: false,
                });
            }
        }
        if let Some((_, target, sources, from)) =
            LIBRARY_FLOWS.iter().find(|(n, _, _, _)| *n == name)
        {
            let Some(target_vals) = arg_vals.get(*target) else {
                return;
            };
            let mut from_vals = Vec::new();
            for (i, vals) in arg_vals.iter().enumerate() {
                if sources.contains(&i) || from.is_some_and(|f| i >= f) {
                    from_vals.extend(vals.iter().cloned());
                }
            }
            for target in target_vals {
                if matches!(target, Val::Local(_) | Val::Param(_)) && !from_vals.is_empty() {
                    self.function.flows.push(Flow {
                        target: target.clone(),
                        from: from_vals.clone(),
                        site: site.clone(),
                    });
                }
            }
        }
    }

    /// `x = value` where `x` is a local variable or a parameter: a flow for backtracking.
    fn flow_into(&mut self, lhs: Entity, rhs: Entity, statement: &Entity) {
        let lhs = strip_parens(lhs);
        if lhs.get_kind() != EntityKind::DeclRefExpr {
            return;
        }
        let mut targets = Vec::new();
        self.vals(lhs, &mut targets);
        let mut from = Vec::new();
        self.vals(rhs, &mut from);
        if from.is_empty() {
            return;
        }
        let site = self.builder.site(statement);
        for target in targets {
            if matches!(target, Val::Local(_) | Val::Param(_)) {
                self.function.flows.push(Flow {
                    target,
                    from: from.clone(),
                    site: site.clone(),
                });
            }
        }
    }

    /// What the value of `e` may come from (over-approximated: every variable and member it
    /// mentions, outside `sizeof`).
    fn vals(&mut self, e: Entity, out: &mut Vec<Val>) {
        if !self.builder.flows {
            return;
        }
        match e.get_kind() {
            EntityKind::UnaryExpr => {}
            EntityKind::DeclRefExpr => {
                let Some(var) = e.get_reference() else {
                    return;
                };
                let by_type = self
                    .builder
                    .record_of_type(var.get_type())
                    .or_else(|| self.builder.record_of_pointee(var.get_type()));
                if let Some(key) = by_type {
                    push_val(out, Val::Record(key));
                    return;
                }
                let usr = var.get_usr().map(|u| u.0).unwrap_or_default();
                match var.get_kind() {
                    EntityKind::ParmDecl => {
                        if let Some(i) = self.params.iter().position(|p| *p == usr) {
                            push_val(out, Val::Param(i));
                        }
                    }
                    EntityKind::VarDecl if is_local(&var) => push_val(out, Val::Local(usr)),
                    _ => {}
                }
            }
            EntityKind::MemberRefExpr => {
                let field = e.get_reference();
                if let Some(key) = self.builder.record_of_type(e.get_type()) {
                    push_val(out, Val::Record(key));
                } else if let Some(key) = self.builder.record_of_pointee(e.get_type()) {
                    push_val(out, Val::Record(key));
                }
                if let Some(owner) = field.and_then(|f| f.get_semantic_parent()) {
                    if let Some(key) = self.builder.record_key(owner) {
                        push_val(out, Val::Field(key));
                    }
                }
            }
            _ => {
                for child in e.get_children() {
                    self.vals(child, out);
                }
            }
        }
    }
}

/// The lvalue `lv` is a local variable or a part of one held by value (a member, an element
/// of an embedded array): an object on the stack.
fn on_stack(lv: Entity) -> bool {
    // A local variable, or a parameter: a struct passed by value is a copy.
    by_value_base(lv).is_some_and(|v| {
        v.get_kind() == EntityKind::ParmDecl
            || (v.get_kind() == EntityKind::VarDecl && is_local(&v))
    })
}

/// The lvalue `lv` is a `static` variable declared inside a function, or a part of one held
/// by value (`cache[j].id` of a `static struct {...} cache[N]`).
fn private_static(lv: Entity) -> bool {
    by_value_base(lv).is_some_and(|v| {
        v.get_kind() == EntityKind::VarDecl
            && v.get_storage_class() == Some(clang::StorageClass::Static)
            && v.get_semantic_parent()
                .is_some_and(|p| p.get_kind() == EntityKind::FunctionDecl)
    })
}

/// The variable (or parameter) that the lvalue `lv` is, or is a part of held by value.
fn by_value_base(lv: Entity) -> Option<Entity> {
    let mut e = strip_parens(lv);
    loop {
        match e.get_kind() {
            EntityKind::MemberRefExpr | EntityKind::ArraySubscriptExpr => {
                let inner = strip_parens(e.get_children().into_iter().next()?);
                let by_value = inner.get_type().is_some_and(|t| {
                    let t = t.get_canonical_type();
                    t.get_kind() == TypeKind::Record || array_element(&t).is_some()
                });
                if !by_value {
                    return None;
                }
                e = inner;
            }
            EntityKind::DeclRefExpr => return e.get_reference(),
            _ => return None,
        }
    }
}

/// The pointer expression `e` is the address of an object on the stack: `&local`,
/// `&local.member`, or a local array.
fn address_on_stack(texts: &mut BTreeMap<PathBuf, Vec<u8>>, e: Entity) -> bool {
    let e = strip_casts(e);
    match e.get_kind() {
        EntityKind::UnaryOperator if unary_operator(texts, &e).as_deref() == Some("&") => {
            e.get_children().into_iter().next().is_some_and(on_stack)
        }
        EntityKind::DeclRefExpr | EntityKind::MemberRefExpr => {
            e.get_type()
                .is_some_and(|t| array_element(&t.get_canonical_type()).is_some())
                && on_stack(e)
        }
        _ => false,
    }
}

fn is_local(var: &Entity) -> bool {
    var.get_semantic_parent()
        .map(|p| p.get_kind() == EntityKind::FunctionDecl)
        .unwrap_or(false)
        && var.get_storage_class() != Some(clang::StorageClass::Static)
}

fn is_expression(kind: EntityKind) -> bool {
    !matches!(
        kind,
        EntityKind::TypeRef
            | EntityKind::StructDecl
            | EntityKind::UnionDecl
            | EntityKind::EnumDecl
            | EntityKind::VisibilityAttr
            | EntityKind::AlignedAttr
            | EntityKind::PackedAttr
            | EntityKind::UnexposedAttr
    )
}

fn push_unique(out: &mut Vec<(String, String)>, key: String, why: String) {
    if !out.iter().any(|(k, _)| *k == key) {
        out.push((key, why));
    }
}

fn push_sized(out: &mut Vec<(String, Site)>, key: String, site: &Site) {
    if !out.iter().any(|(k, _)| *k == key) {
        out.push((key, site.clone()));
    }
}

/// The pointer that the lvalue `e` dereferences, for `*p` and `p[i]` (not for an embedded
/// array, which is part of its object).
fn dereferenced<'tu>(
    texts: &mut BTreeMap<PathBuf, Vec<u8>>,
    e: &Entity<'tu>,
) -> Option<Entity<'tu>> {
    match e.get_kind() {
        EntityKind::UnaryOperator if unary_operator(texts, e).as_deref() == Some("*") => {
            e.get_children().into_iter().next()
        }
        EntityKind::ArraySubscriptExpr => {
            let base = e.get_children().into_iter().next()?;
            let embedded = strip_parens(base)
                .get_type()
                .is_some_and(|t| array_element(&t.get_canonical_type()).is_some());
            (!embedded).then_some(base)
        }
        _ => None,
    }
}

fn push_val(out: &mut Vec<Val>, val: Val) {
    if !out.contains(&val) {
        out.push(val);
    }
}

/// Names of all defined functions, for suggestions.
pub(crate) fn function_names(program: &Program) -> BTreeMap<String, Vec<String>> {
    let mut names: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (usr, f) in &program.functions {
        names.entry(f.name.clone()).or_default().push(usr.clone());
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_file_name_is_shown_relative_to_the_current_directory() {
        let unit = Unit {
            file: PathBuf::from("x.c"),
            flags: Vec::new(),
        };
        let here = std::fs::canonicalize(".").expect("current directory");
        assert_eq!(roots(&[unit]), vec![here]);
    }
}
