//! Every rule of the analysis, on small C programs written for it (`tests/c/`), with exact
//! expected results. These tests need libclang (`apt-get install libclang-14-dev`); without it
//! they fail with the analysis's own error, which says how to install it.

use std::path::PathBuf;

use mnemo_analyze::{analyze, Error, Finding, Options, Report, Strategy};

fn c(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(path)
}

fn options(path: &str, loads: &[&str], strategy: Strategy) -> Options {
    Options {
        paths: vec![c(path)],
        load_functions: loads.iter().map(|s| s.to_string()).collect(),
        extra_flags: Vec::new(),
        strategy,
        progress: false,
        jobs: 1,
    }
}

fn run(path: &str, loads: &[&str]) -> Report {
    run_with(options(path, loads, Strategy::Load))
}

fn run_with(options: Options) -> Report {
    match analyze(&options) {
        Ok(report) => report,
        Err(e) => panic!("analysis of {:?} failed: {e}", options.paths),
    }
}

fn findings(report: &Report) -> &[Finding] {
    &report.load.as_ref().expect("load strategy ran").findings
}

/// (type, suspicion kind) for every finding, in report order.
fn names(report: &Report) -> Vec<(String, Option<String>)> {
    findings(report)
        .iter()
        .map(|f| (f.name.clone(), f.suspicion.as_ref().map(|s| s.kind.clone())))
        .collect()
}

fn plain(names: &[&str]) -> Vec<(String, Option<String>)> {
    names.iter().map(|n| (n.to_string(), None)).collect()
}

fn finding<'r>(report: &'r Report, name: &str) -> &'r Finding {
    findings(report)
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("{name} not found"))
}

fn write_lines(f: &Finding) -> Vec<u32> {
    f.writes.iter().map(|w| w.site.line).collect()
}

fn chain(f: &Finding) -> Vec<&str> {
    f.chain.iter().map(|s| s.function.as_str()).collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn figure_1_record_restored_from_a_file() {
    let report = run("fig1.c", &["load_records"]);
    assert_eq!(names(&report), plain(&["struct record", "struct stats"]));
    let record = finding(&report, "struct record");
    assert_eq!(record.definition.file, "fig1.c");
    assert_eq!(record.definition.line, 6);
    // r->next = head in the load function, then id, name (strncpy) and next in parse_record.
    assert_eq!(write_lines(record), vec![44, 28, 29, 30]);
    assert_eq!(record.writes[2].how, "strncpy");
    assert_eq!(chain(record), vec!["load_records"]);
    let stats = finding(&report, "struct stats");
    assert_eq!(chain(stats), vec!["load_records", "note_loaded"]);
    assert_eq!(stats.chain[1].site.line, 46);
    assert_eq!(stats.writes[0].how, "++");
    assert_eq!(stats.writes[0].text, "s->loaded++;");
    let load = report.load.as_ref().expect("load ran");
    assert_eq!(
        load.visited,
        strings(&["load_records", "parse_record", "note_loaded"])
    );
    assert_eq!(
        load.external,
        strings(&["atoi", "fclose", "fgets", "fopen", "malloc", "strncpy"])
    );
    assert!(load.unresolved.is_empty());
    assert_eq!(report.summary.types_in_program, 2);
    assert_eq!(report.summary.types_found, 2);
    assert_eq!(report.summary.functions_visited, 3);
    assert_eq!(report.summary.functions_in_program, 4);
}

#[test]
fn writes_through_typedefd_pointers() {
    let report = run("typedef_ptr.c", &["load"]);
    // struct untouched is only read.
    assert_eq!(names(&report), plain(&["anon_t", "struct node"]));
    assert_eq!(write_lines(finding(&report, "struct node")), vec![20, 30]);
    assert_eq!(write_lines(finding(&report, "anon_t")), vec![25]);
    assert_eq!(finding(&report, "anon_t").definition.line, 9);
}

fn whys(f: &Finding) -> Vec<&str> {
    f.writes.iter().map(|w| w.why.as_str()).collect()
}

#[test]
fn struct_members_of_struct_members() {
    let report = run("nested.c", &["nested_chain"]);
    assert_eq!(
        names(&report),
        plain(&["struct inner", "struct middle", "struct outer"])
    );
    assert_eq!(
        whys(finding(&report, "struct inner")),
        vec!["field `count` written"]
    );
    assert_eq!(
        whys(finding(&report, "struct middle")),
        vec!["embeds the written object in field `in`"]
    );
    assert_eq!(
        whys(finding(&report, "struct outer")),
        vec!["embeds the written object in field `mid`"]
    );

    // outer's bytes do not change, but its pointer field leads to the write: a reached
    // container.
    let report = run("nested.c", &["through_pointer"]);
    assert_eq!(names(&report), plain(&["struct inner", "struct outer"]));
    let outer = finding(&report, "struct outer");
    assert_eq!(outer.write_count, 0);
    let reach = outer.reach.as_ref().expect("outer is reached");
    assert_eq!(
        (reach.field.as_str(), reach.leads_to.site.line),
        ("ext", 31)
    );

    let report = run("nested.c", &["embedded_array"]);
    assert_eq!(names(&report), plain(&["struct holder", "struct inner"]));
    assert_eq!(finding(&report, "struct holder").writes[0].how, "++");

    let report = run("nested.c", &["whole_member"]);
    assert_eq!(names(&report), plain(&["struct inner", "struct middle"]));
    assert_eq!(
        whys(finding(&report, "struct inner")),
        vec!["object written"]
    );
}

#[test]
fn library_calls_writing_through_pointers() {
    let report = run("memcpy_field.c", &["load_magic"]);
    assert_eq!(names(&report), plain(&["struct blob", "struct header"]));
    assert_eq!(finding(&report, "struct header").writes[0].how, "memcpy");

    let report = run("memcpy_field.c", &["load_len"]);
    assert_eq!(names(&report), plain(&["struct blob"]));

    // Bytes written on the heap through a pointer field do not modify the blob.
    let report = run("memcpy_field.c", &["load_heap"]);
    assert_eq!(names(&report), plain(&[]));

    let report = run("memcpy_field.c", &["load_plain"]);
    assert_eq!(names(&report), plain(&["struct plain"]));
    assert_eq!(finding(&report, "struct plain").writes[0].how, "read");

    let report = run("memcpy_field.c", &["load_line"]);
    assert_eq!(names(&report), plain(&["struct line"]));
    let line = finding(&report, "struct line");
    let hows: Vec<&str> = line.writes.iter().map(|w| w.how.as_str()).collect();
    assert_eq!(hows, vec!["fgets", "sscanf"]);
}

#[test]
fn function_pointers_are_reported_unresolved() {
    let report = run("fnptr.c", &["load"]);
    assert_eq!(names(&report), plain(&[]));
    let load = report.load.as_ref().expect("load ran");
    // restore_impl is only reachable through the pointers: not visited.
    assert_eq!(load.visited, strings(&["load"]));
    let callees: Vec<(&str, u32)> = load
        .unresolved
        .iter()
        .map(|u| (u.callee.as_str(), u.site.line))
        .collect();
    assert_eq!(
        callees,
        vec![("ops->restore", 19), ("fn", 20), ("(*fn)", 21)]
    );
    // restore_impl's address is taken in a table; restore_other has the same type but is
    // never referenced, so it cannot be the target.
    for u in &load.unresolved {
        assert_eq!(u.candidates, strings(&["restore_impl"]), "{}", u.callee);
        assert_eq!(u.candidate_count, 1);
    }
}

#[test]
fn functions_without_pointer_arguments_are_skipped() {
    let report = run("skip.c", &["load", "load_noargs"]);
    let load = report.load.as_ref().expect("load ran");
    assert_eq!(
        load.visited,
        strings(&["load", "load_noargs", "bump_ptr", "by_value_copy"])
    );
    assert_eq!(load.skipped, strings(&["bump_global", "bump_scalar"]));
    // The C library is not entered.
    assert_eq!(load.external, strings(&["strlen"]));
    // by_value is only ever a local and a parameter passed by value: on the stack.
    assert_eq!(
        names(&report),
        vec![
            (
                "struct by_value".to_string(),
                Some("stack-only".to_string())
            ),
            ("struct counter".to_string(), None)
        ]
    );
    // Not lines 16 and 21: those are in the skipped functions.
    assert_eq!(
        write_lines(finding(&report, "struct counter")),
        vec![47, 26]
    );
    assert_eq!(
        chain(finding(&report, "struct counter")),
        vec!["load_noargs"]
    );
    assert_eq!(
        write_lines(finding(&report, "struct by_value")),
        vec![37, 31]
    );
}

#[test]
fn constructors_without_arguments_are_not_skipped() {
    let report = run("skip.c", &["load_made"]);
    let load = report.load.as_ref().expect("load ran");
    assert_eq!(load.visited, strings(&["load_made", "made_new"]));
    assert!(load.skipped.is_empty());
    assert_eq!(names(&report), plain(&["struct made"]));
}

#[test]
fn system_header_types_are_not_reported() {
    let report = run("system_types.c", &["load"]);
    // struct stat and struct tm are written too, but belong to the C library.
    assert_eq!(names(&report), plain(&["struct mine"]));
    assert_eq!(report.summary.types_in_program, 1);
}

#[test]
fn iterators_and_alignment_variants_are_flagged() {
    let report = run("heuristics.c", &["load"]);
    let kinds: Vec<(String, Option<String>)> = names(&report);
    let expected = vec![
        ("struct entry".to_string(), None),
        (
            "struct entry_aligned".to_string(),
            Some("alignment-variant".to_string()),
        ),
        (
            "struct entry_iter".to_string(),
            Some("iterator".to_string()),
        ),
        (
            "struct slot".to_string(),
            Some("alignment-variant".to_string()),
        ),
        ("struct walker".to_string(), Some("iterator".to_string())),
    ];
    assert_eq!(kinds, expected);
    let reason = |name: &str| {
        finding(&report, name)
            .suspicion
            .as_ref()
            .map(|s| s.reason.clone())
            .unwrap_or_default()
    };
    assert_eq!(reason("struct entry_iter"), "the name contains `iter`");
    assert_eq!(
        reason("struct walker"),
        "only written in the header of `for` loops (a loop cursor)"
    );
    assert_eq!(
        reason("struct entry_aligned"),
        "same fields as struct entry (heuristics.c:2): its name marks a variant, \
         it carries a packed/aligned attribute"
    );
    assert_eq!(
        reason("struct slot"),
        "same fields as struct entry (heuristics.c:2): it only adds padding fields"
    );
    assert_eq!(report.summary.types_suspicious, 4);
}

#[test]
fn backtracking_from_file_writes() {
    let report = run_with(options("backtrack.c", &["load_all"], Strategy::Both));
    assert_eq!(
        names(&report),
        plain(&["struct config", "struct metrics", "struct raw"])
    );
    let backtrack = report.backtrack.as_ref().expect("backtrack ran");
    let found: Vec<(&str, &str)> = backtrack
        .iter()
        .map(|f| (f.name.as_str(), f.sink.how.as_str()))
        .collect();
    // struct secret is only logged: the over-report the load strategy avoids. struct
    // unrelated goes through the same copying helper as struct header, but to no sink.
    assert_eq!(
        found,
        vec![
            ("struct config", "write"),
            ("struct header", "write"),
            ("struct metrics", "fputs"),
            ("struct raw", "fwrite"),
            ("struct secret", "fprintf"),
        ]
    );
    let suspicions: Vec<Option<&str>> = backtrack
        .iter()
        .map(|f| f.suspicion.as_ref().map(|s| s.kind.as_str()))
        .collect();
    assert_eq!(suspicions, vec![None, None, None, None, Some("logging")]);
    let header = &backtrack[1];
    let path: Vec<(&str, u32)> = header
        .path
        .iter()
        .map(|s| (s.function.as_str(), s.site.line))
        .collect();
    assert_eq!(
        path,
        vec![("save_header", 92), ("fill", 86), ("save_header", 93)]
    );
    let metrics = &backtrack[2];
    let path: Vec<(&str, u32)> = metrics
        .path
        .iter()
        .map(|s| (s.function.as_str(), s.site.line))
        .collect();
    assert_eq!(
        path,
        vec![("save_metrics", 41), ("save_metrics", 42), ("emit", 35)]
    );
    assert_eq!(report.summary.types_found_backtrack, 5);

    let only = run_with(options("backtrack.c", &[], Strategy::Backtrack));
    assert!(only.load.is_none());
    assert_eq!(only.backtrack.as_ref().map(Vec::len), Some(5));
}

#[test]
fn sources_that_fail_to_parse_are_listed_and_the_rest_analyzed() {
    let report = run("broken", &["load_kept"]);
    assert_eq!(names(&report), plain(&["struct kept"]));
    assert_eq!(report.problems.len(), 1);
    let problem = &report.problems[0];
    assert_eq!(problem.file, "bad.c");
    assert!(!problem.skipped);
    assert_eq!(
        problem.reason,
        "2 error(s), first: bad.c:1: 'missing.h' file not found"
    );
    // What clang recovered of the broken file is still used.
    let report = run("broken", &["also_load"]);
    assert_eq!(names(&report), plain(&["struct partial"]));
}

#[test]
fn missing_load_function_suggests_close_names() {
    match analyze(&options("fig1.c", &["load_record"], Strategy::Load)) {
        Err(Error::LoadFunctionNotFound { name, suggestions }) => {
            assert_eq!(name, "load_record");
            assert_eq!(suggestions, strings(&["load_records"]));
        }
        other => panic!("expected LoadFunctionNotFound, got {other:?}"),
    }
    let message = analyze(&options("fig1.c", &["load_record"], Strategy::Load))
        .map(|_| ())
        .err()
        .map(|e| e.to_string());
    assert_eq!(
        message.as_deref(),
        Some(
            "load function `load_record` is not defined in the analyzed sources \
             (did you mean load_records?)"
        )
    );
}

#[test]
fn flags_come_from_compile_commands_or_after_the_double_dash() {
    let report = run("cdb", &["load"]);
    assert_eq!(names(&report), plain(&["struct state"]));

    // The same file alone needs the flag given by hand.
    let mut opts = options("cdb/main.c", &["load"], Strategy::Load);
    assert!(matches!(
        analyze(&opts),
        Err(Error::LoadFunctionNotFound { .. })
    ));
    opts.extra_flags = strings(&["-DWITH_STATE"]);
    let report = run_with(opts);
    assert_eq!(names(&report), plain(&["struct state"]));
}

#[test]
fn the_load_strategy_needs_a_load_function() {
    assert!(matches!(
        analyze(&options("fig1.c", &[], Strategy::Both)),
        Err(Error::NoLoadFunction)
    ));
}

#[test]
fn report_serializes_to_json() {
    let report = run("fig1.c", &["load_records"]);
    let json = serde_json::to_value(&report).expect("report encodes");
    assert_eq!(json["summary"]["types_found"], 2);
    assert_eq!(json["load"]["findings"][0]["name"], "struct record");
    assert_eq!(json["load"]["findings"][0]["definition"]["line"], 6);
}

#[test]
fn anonymous_members_are_named_by_their_path() {
    let report = run("anonymous.c", &["open_file"]);
    assert_eq!(
        names(&report),
        plain(&[
            "struct <struct stream.io.file>",
            "struct stream",
            "union <struct stream.io>"
        ])
    );
    assert_eq!(
        whys(finding(&report, "union <struct stream.io>")),
        vec!["embeds the written object in field `file`"]
    );
    // The four records: stream, its union, and the union's two structs.
    assert_eq!(report.summary.types_in_program, 4);
}

#[test]
fn writes_inside_macro_bodies() {
    let report = run("macros.c", &["reads"]);
    assert_eq!(names(&report), plain(&[]));

    let report = run("macros.c", &["assigns"]);
    assert_eq!(names(&report), plain(&["struct lst"]));
    let lst = finding(&report, "struct lst");
    assert_eq!(
        (lst.writes[0].how.as_str(), lst.writes[0].site.line),
        ("=", 25)
    );

    let report = run("macros.c", &["increments"]);
    let lst = finding(&report, "struct lst");
    assert_eq!(
        (lst.writes[0].how.as_str(), lst.writes[0].site.line),
        ("++", 31)
    );
}

#[test]
fn containers_reached_through_pointer_fields_are_persistent() {
    let report = run("reach.c", &["load"]);
    assert_eq!(
        names(&report),
        plain(&["struct db", "struct dict", "struct entry", "struct server"])
    );
    // Written: dict (d->used++; `d->table[0] = e` writes the table, not the dict) and entry.
    assert!(finding(&report, "struct dict").reach.is_none());
    assert_eq!(finding(&report, "struct dict").write_count, 1);
    // struct db: `db->dict` read in db_add, passed to dict_add, which writes the dict.
    let db = finding(&report, "struct db");
    assert_eq!(db.write_count, 0);
    assert_eq!(chain(db), vec!["load", "db_add"]);
    let reach = db.reach.as_ref().expect("db is a reached container");
    assert_eq!(
        (
            reach.function.as_str(),
            reach.field.as_str(),
            reach.site.line
        ),
        ("db_add", "dict", 46)
    );
    assert_eq!(reach.text, "return dict_add(db->dict, key);");
    assert_eq!(
        (reach.leads_to.function.as_str(), reach.leads_to.site.line),
        ("dict_add", 40)
    );
    // struct server: `server.db + i` read in load, passed to db_add, which reaches the dict.
    let server = finding(&report, "struct server");
    let reach = server
        .reach
        .as_ref()
        .expect("server is a reached container");
    assert_eq!(
        (
            reach.function.as_str(),
            reach.field.as_str(),
            reach.site.line
        ),
        ("load", "db", 58)
    );
    assert_eq!(reach.leads_to.function.as_str(), "dict_add");
    // struct config's pointer is only read through: not persistent.
    assert!(findings(&report).iter().all(|f| f.name != "struct config"));
}

#[test]
fn byte_writes_count_for_the_struct_the_memory_was_allocated_for() {
    let report = run("bytes.c", &["load"]);
    // struct other is only named in the size of a memset of a local buffer.
    assert_eq!(
        names(&report),
        plain(&["struct hdr5", "struct hdr8", "struct item"])
    );
    // `*fp = type | (len << 3)` where fp = (unsigned char *)s - 1, s = (char *)sh + hdrlen,
    // sh = malloc(hdrlen + ...), hdrlen = hdr_size(type), which returns sizeof(struct hdr5)
    // or sizeof(struct hdr8).
    for name in ["struct hdr5", "struct hdr8"] {
        let hdr = finding(&report, name);
        let hows: Vec<(&str, u32)> = hdr
            .writes
            .iter()
            .map(|w| (w.how.as_str(), w.site.line))
            .collect();
        assert_eq!(hows, vec![("=", 48), ("memcpy", 49)], "{name}");
        assert!(
            hdr.writes[0]
                .why
                .starts_with("bytes written in memory allocated with its sizeof at bytes.c:"),
            "{}",
            hdr.writes[0].why
        );
        assert_eq!(chain(hdr), vec!["load", "str_new"]);
    }
    let item = finding(&report, "struct item");
    assert_eq!(write_lines(item), vec![55]);
    assert_eq!(
        item.writes[0].why,
        "bytes written through a cast of a pointer to it at bytes.c:55"
    );
}

#[test]
fn types_written_only_on_paths_that_end_the_process_are_flagged() {
    let report = run("exits.c", &["load"]);
    let exit_path = Some("exit-path".to_string());
    assert_eq!(
        names(&report),
        vec![
            ("struct both".to_string(), None),
            ("struct crash".to_string(), exit_path.clone()),
            ("struct last_words".to_string(), exit_path.clone()),
            ("struct logged".to_string(), exit_path.clone()),
            ("struct note".to_string(), exit_path.clone()),
            ("struct report".to_string(), exit_path.clone()),
            ("struct state".to_string(), None),
        ]
    );
    let reason = |name: &str| {
        finding(&report, name)
            .suspicion
            .as_ref()
            .map(|s| s.reason.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        reason("struct report"),
        "reached only through `check_main`, called at exits.c:56, after which the process ends"
    );
    assert_eq!(
        reason("struct note"),
        "written only where the process ends next: exits.c:58 is followed by a call that \
         cannot return"
    );
    assert_eq!(
        reason("struct logged"),
        "reached only through `fatal` (called at exits.c:110), which cannot return"
    );
    assert_eq!(
        reason("struct crash"),
        "reached only through `crash_exit` (called at exits.c:112), which cannot return"
    );
    assert_eq!(
        reason("struct last_words"),
        "reached only through `goodbye` (called at exits.c:114), which cannot return"
    );
    assert_eq!(report.summary.types_suspicious, 5);
}

#[test]
fn types_written_only_on_the_stack_are_flagged() {
    let report = run("stack.c", &["load"]);
    let stack_only = Some("stack-only".to_string());
    assert_eq!(
        names(&report),
        vec![
            ("struct ctx".to_string(), stack_only.clone()),
            // Written on the stack (`first`) and in the table's slots: persistent.
            ("struct entry".to_string(), None),
            // rio_init(&r, ...) in load, rio_read(r) forwarded by fill(&r, ...).
            ("struct rio".to_string(), stack_only),
            ("struct table".to_string(), None),
        ]
    );
    assert_eq!(
        finding(&report, "struct ctx")
            .suspicion
            .as_ref()
            .map(|s| s.reason.as_str()),
        Some(
            "written while loading only in objects on the stack (local variables, e.g. at \
             stack.c:43), which end with their function"
        )
    );
}

#[test]
fn types_written_only_by_functions_that_release_memory_are_flagged() {
    let report = run("heuristics.c", &["load_handles"]);
    assert_eq!(
        names(&report),
        vec![
            ("struct entry".to_string(), None),
            ("struct handle".to_string(), Some("teardown".to_string())),
        ]
    );
    assert_eq!(
        finding(&report, "struct handle")
            .suspicion
            .as_ref()
            .map(|s| s.reason.as_str()),
        Some(
            "written while loading only in functions that release memory (named so, and \
             calling `free`): handle_release"
        )
    );
}

#[test]
fn types_written_only_beneath_functions_that_release_memory_are_flagged() {
    let report = run("heuristics.c", &["load_sessions"]);
    assert_eq!(
        names(&report),
        vec![
            // Written by `lookup`'s own static cache only.
            (
                "struct cache_slot".to_string(),
                Some("private-static".to_string())
            ),
            // `freeze_clock` frees nothing: its name is not enough.
            ("struct clock".to_string(), None),
            // Written beneath `session_free` and by `note_loaded`: state that loading builds.
            ("struct counter".to_string(), None),
            ("struct entry".to_string(), None),
            // Only beneath `session_free`, in a function whose name says nothing.
            ("struct registry".to_string(), Some("teardown".to_string())),
            // A reached container: `s->c` leads to `note_loaded`'s write.
            ("struct session".to_string(), None),
            // `struct ops` is missing: a static initializer runs at no time during loading.
        ]
    );
    let reason = |name: &str| {
        finding(&report, name)
            .suspicion
            .as_ref()
            .map(|s| s.reason.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        reason("struct registry"),
        "written while loading only beneath functions that release memory (named so, and \
         calling `free`): e.g. in `registry_unlink`, reached through `session_free`, called at \
         heuristics.c:134"
    );
    assert_eq!(
        reason("struct cache_slot"),
        "written while loading only in `static` variables declared inside the function that \
         writes them (`lookup`, at heuristics.c:125): state that function keeps to itself, \
         such as a cache"
    );
}

#[test]
fn memory_held_only_by_a_released_objects_own_field_ends_with_it() {
    let report = run("owned.c", &["replay"]);
    let released = || Some("released".to_string());
    assert_eq!(
        names(&report),
        vec![
            ("struct client".to_string(), released()),
            // Only the client's own field `st.commands` points to the commands.
            ("struct cmd".to_string(), released()),
            // `note` also gets the address of a global: what it points to may be shared.
            ("struct note".to_string(), None),
            ("struct state".to_string(), released()),
            // `tag` gets only fresh memory, but its address is taken.
            ("struct tag".to_string(), None),
        ]
    );
    assert_eq!(
        finding(&report, "struct cmd")
            .suspicion
            .as_ref()
            .map(|s| s.reason.as_str()),
        Some(
            "written while loading only in objects that end before loading does (on the stack, \
             released before their function returns, or none: a null pointer), e.g. at \
             owned.c:70 in `queue`: the object held by `c` in `replay` (assigned at owned.c:97), \
             released at owned.c:101 by `free_client` (which gives it to `free`) before that \
             function returns, through its field `commands` of `struct state`, which only ever \
             holds memory allocated for it (or a null pointer)"
        )
    );
    assert_eq!(
        finding(&report, "struct note").kept.as_deref(),
        Some(
            "owned.c:81 in `mark`, through the pointer field `note` of `struct client` (what a \
             field points to may be shared)"
        )
    );
}

#[test]
fn types_written_only_beneath_notifications_are_flagged() {
    let report = run("notify.c", &["load_items"]);
    let notification = || Some("notification".to_string());
    assert_eq!(
        names(&report),
        vec![
            // Made for the subscribers' callback (and released by `context_free`).
            ("struct client".to_string(), notification()),
            ("struct context".to_string(), Some("stack-only".to_string())),
            // `signal_gate` returns what the load uses: not a notifier.
            ("struct gate".to_string(), None),
            ("struct item".to_string(), None),
            (
                "struct latency_series".to_string(),
                Some("measurement".to_string())
            ),
            // Written beneath `notify_loaded` and by the load itself.
            ("struct queue".to_string(), None),
            ("struct repl_block".to_string(), notification()),
            // The load's own objects are released; the notifier's pool is its own.
            ("struct replay".to_string(), Some("released".to_string())),
            ("struct reply_block".to_string(), notification()),
            ("struct subscriber".to_string(), notification()),
            ("struct table".to_string(), None),
        ]
    );
    let reason = |name: &str| {
        finding(&report, name)
            .suspicion
            .as_ref()
            .map(|s| s.reason.clone())
            .unwrap_or_default()
    };
    let told = "written while loading only beneath functions that tell others about a change \
                (named to notify, signal, publish, broadcast, propagate or replicate), record \
                measurements (named for latency, metrics or histograms), both returning \
                nothing, or release memory: e.g. in ";
    let observers = "; what they write is the state of the observers told (subscribers, the \
                     clients and contexts callbacks run with, replication buffers, queues of \
                     keys to signal), which a restart does not keep";
    assert_eq!(
        reason("struct subscriber"),
        format!(
            "{told}`notify_loaded`, reached through `notify_loaded`, called at notify.c:183\
             {observers}"
        )
    );
    assert_eq!(
        reason("struct repl_block"),
        format!(
            "{told}`replicate_change`, reached through `replicate_change`, called at \
             notify.c:184{observers}"
        )
    );
    assert_eq!(
        reason("struct latency_series"),
        format!(
            "{told}`latency_add_sample`, reached through `latency_add_sample`, called at \
             notify.c:186; what they write are samples of how the program ran, which a \
             restart starts afresh"
        )
    );
    assert!(
        reason("struct client").contains("reached through `notify_loaded`"),
        "{}",
        reason("struct client")
    );
    assert_eq!(
        reason("struct replay"),
        "written while loading only in objects that end before loading does (on the stack, \
         released before their function returns, or none: a null pointer), e.g. at notify.c:94 \
         in `replay_one`: the object held by `r` in `replay_one` (assigned at notify.c:93), \
         released at notify.c:95 by `free_replay` (which gives it to `free`) before that \
         function returns; its other writes while loading are beneath functions that release \
         memory, tell others about a change or record measurements"
    );
}

#[test]
fn types_written_only_in_objects_released_before_loading_ends_are_flagged() {
    let report = run(
        "released.c",
        &[
            "replay",
            "load_sessions",
            "load_blob",
            "load_temp",
            "load_draft",
        ],
    );
    let released = Some("released".to_string());
    assert_eq!(
        names(&report),
        vec![
            // Freed before `load_blob` returns, unless `goto keep` jumps over the free.
            ("struct blob".to_string(), None),
            // Through `create_client` -> `create_replay_client` -> `fake`, freed at the end.
            ("struct client".to_string(), released.clone()),
            // Only `conn_set(NULL, -1)`: no object.
            ("struct conn".to_string(), released.clone()),
            // Freed on one branch only: `else kept_draft = d;`.
            ("struct draft".to_string(), None),
            // `link_set(&links[0], 1)` writes a global as well.
            ("struct link".to_string(), None),
            // Embedded in the replay client, written by `queue_command(fake, ...)`.
            ("struct multi_state".to_string(), released),
            // `pool_release` keeps it in a global pool and never frees it.
            ("struct pooled".to_string(), None),
            // Kept in a global list.
            ("struct session".to_string(), None),
            // Written by the replay client's commands through `&db`: the data set.
            ("struct store".to_string(), None),
            // An early return keeps it in a global before the free.
            ("struct temp".to_string(), None),
            // `new_worker`'s other caller keeps its object in a global.
            ("struct worker".to_string(), None),
        ]
    );
    let reason = |name: &str| {
        finding(&report, name)
            .suspicion
            .as_ref()
            .map(|s| s.reason.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        reason("struct client"),
        "written while loading only in objects that end before loading does (on the stack, \
         released before their function returns, or none: a null pointer), e.g. at \
         released.c:142 in `replay`: the object held by `fake` in `replay` (assigned at \
         released.c:137), released at released.c:151 by `free_client` (which gives it to \
         `free`) before that function returns"
    );
    assert!(reason("struct multi_state").contains("in `queue_command`: the object held by `fake`"));
    assert_eq!(
        reason("struct conn"),
        "written while loading only in objects that end before loading does (on the stack, \
         released before their function returns, or none: a null pointer), e.g. at \
         released.c:118 in `conn_set`: a null pointer passed by `replay` at released.c:138 \
         (nothing is written through it)"
    );
    assert_eq!(report.summary.types_suspicious, 3);
    // Each look-alike says which write outlasts loading, and why.
    let kept = |name: &str| finding(&report, name).kept.clone().unwrap_or_default();
    assert_eq!(
        kept("struct pooled"),
        "released.c:202 in `load_sessions`, through `p` in `load_sessions`, which is not \
         freed there"
    );
    assert_eq!(
        kept("struct worker"),
        "released.c:186 in `new_worker`, through `w`, returned by `new_worker` to \
         `load_sessions`, which keeps it"
    );
    assert_eq!(
        kept("struct store"),
        "released.c:129 in `apply`, passed by `replay` at released.c:144: into an object \
         `replay` gets from a global, an expression or an argument the analysis does not follow"
    );
    assert_eq!(
        kept("struct blob"),
        "released.c:227 in `load_blob`, through `b` in `load_blob`, which is not freed there"
    );
    assert!(finding(&report, "struct client").kept.is_none());
}
