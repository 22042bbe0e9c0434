//! INFO: Redis 7.0's sections that apply to mnemo, in Redis's order and with its field names,
//! plus mnemo's own `pool` section and a few `mnemo_`/pool fields where Redis has no word for
//! what mnemo does (sync points).
//!
//! `INFO` and `INFO default` give server, clients, memory, persistence, stats, replication,
//! cpu, modules, errorstats, cluster, keyspace, then pool; `INFO all` and `INFO everything`
//! the same (mnemo keeps no per-command or latency statistics: Redis's commandstats and
//! latencystats sections are not there); `INFO name...` the sections named, in any letter
//! case; a name that is no section gives nothing, as in Redis.

use std::fmt::Write as _;

use mnemo_resp::bytes::Bytes;
use mnemo_resp::Reply;

use super::PersistentEngine;
use crate::server::limits::REDIS_VERSION;

/// Section names (as INFO takes them) and titles (as it prints them), in Redis's order.
const SECTIONS: &[(&str, &str)] = &[
    ("server", "Server"),
    ("clients", "Clients"),
    ("memory", "Memory"),
    ("persistence", "Persistence"),
    ("stats", "Stats"),
    ("replication", "Replication"),
    ("cpu", "CPU"),
    ("modules", "Modules"),
    ("errorstats", "Errorstats"),
    ("cluster", "Cluster"),
    ("keyspace", "Keyspace"),
    ("pool", "Pool"),
];

/// Linux reports process times in /proc in ticks of 1/100 s (USER_HZ) on every
/// architecture Rust targets.
const TICKS_PER_SECOND: f64 = 100.0;

impl PersistentEngine<'_> {
    pub(super) fn info(&self, args: &[Bytes]) -> Reply {
        let wanted: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
            .collect();
        let every = wanted.is_empty()
            || wanted
                .iter()
                .any(|w| w == "all" || w == "everything" || w == "default");
        let mut out = String::new();
        for &(section, title) in SECTIONS {
            if !every && !wanted.iter().any(|w| w == section) {
                continue;
            }
            if !out.is_empty() {
                out.push_str("\r\n");
            }
            let _ = write!(out, "# {title}\r\n");
            self.info_section(section, &mut out);
            if let Some(hook) = &self.info_hook {
                hook(section, &mut out);
            }
        }
        Reply::Verbatim {
            format: *b"txt",
            text: Bytes::from(out),
        }
    }

    fn info_section(&self, section: &str, out: &mut String) {
        let heap_stats = self.heap.stats();
        let pool = self.heap.pool();
        let mut line = |k: &str, v: &dyn std::fmt::Display| {
            let _ = write!(out, "{k}:{v}\r\n");
        };
        match section {
            "server" => {
                let uptime = self.opened.elapsed().as_secs();
                line("redis_version", &REDIS_VERSION);
                line("redis_git_sha1", &"00000000");
                line("redis_git_dirty", &0);
                line("redis_mode", &"standalone");
                line("mnemo_version", &env!("CARGO_PKG_VERSION"));
                line("os", &os_name());
                line("arch_bits", &(usize::BITS));
                line("multiplexing_api", &"epoll");
                line("process_id", &std::process::id());
                line("process_supervised", &"no");
                line("run_id", &self.run_id);
                line("server_time_usec", &(super::unix_ms().max(0) * 1000));
                line("uptime_in_seconds", &uptime);
                line("uptime_in_days", &(uptime / 86_400));
                line("hz", &self.config_value("hz"));
                line("configured_hz", &self.config_value("hz"));
                line("config_file", &"");
                line("io_threads_active", &0);
            }
            "memory" => {
                line("used_memory", &heap_stats.used_bytes);
                line("used_memory_human", &human(heap_stats.used_bytes));
                line("maxmemory", &pool.size());
                line("maxmemory_human", &human(pool.size()));
                line("maxmemory_policy", &"noeviction");
                line(
                    "mem_fragmentation_ratio",
                    &format!("{:.2}", 1.0 + heap_stats.fragmentation()),
                );
                line("lazyfree_pending_objects", &0);
                // The script interpreter (EVAL): its memory and its cache, as Redis reports
                // them (no functions: FUNCTION LOAD is not there).
                let (lua_bytes, cached, bodies) = self.scripts.memory();
                line("used_memory_lua", &lua_bytes);
                line("used_memory_lua_human", &human(lua_bytes as u64));
                line("used_memory_vm_eval", &lua_bytes);
                line("used_memory_scripts_eval", &bodies);
                line("number_of_cached_scripts", &cached);
                line("number_of_functions", &0);
                line("number_of_libraries", &0);
            }
            "persistence" => {
                let s = pool.stats();
                let load =
                    |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
                line("loading", &0);
                line("async_loading", &0);
                // Every acknowledged write is already durable: nothing waits for a save.
                line("rdb_changes_since_last_save", &0);
                line("rdb_bgsave_in_progress", &0);
                line("rdb_last_save_time", &self.stats.last_commit_unix);
                line("rdb_last_bgsave_status", &"ok");
                line("aof_enabled", &0);
                line("aof_rewrite_in_progress", &0);
                line("aof_last_write_status", &"ok");
                line("durability", &"every write, at its batch's sync point");
                line("sync_points", &load(&s.sync_points));
                line("sync_ranges", &load(&s.sync_ranges));
                line("bytes_synced", &load(&s.sync_bytes));
                line("batches_committed", &self.stats.commits);
                line("last_commit_time", &self.stats.last_commit_unix);
            }
            "stats" => {
                let errors: u64 = self.error_counts.values().sum();
                line("total_commands_processed", &self.stats.commands);
                line("total_error_replies", &errors);
                line("expired_keys", &0);
                line("evicted_keys", &0);
                line("read_only_batches", &self.stats.read_only_batches);
                line("command_rollbacks", &self.stats.rollbacks);
                line("split_commits", &self.stats.split_commits);
                line("exec_alone", &self.stats.exec_alone);
                line("housekeeping_errors", &self.stats.housekeeping_errors);
                line("flush_reclaim_commits", &self.stats.reclaim_commits);
            }
            "replication" => {
                line("role", &self.role);
                line("connected_slaves", &0);
                line("master_failover_state", &"no-failover");
                line("master_replid", &self.run_id);
                line("master_replid2", &"0".repeat(40));
                line("master_repl_offset", &0);
                line("second_repl_offset", &-1);
                line("repl_backlog_active", &0);
                line("repl_backlog_size", &1_048_576);
                line("repl_backlog_first_byte_offset", &0);
                line("repl_backlog_histlen", &0);
            }
            "cpu" => {
                let (process_user, process_sys) = cpu_seconds("/proc/self/stat");
                let (thread_user, thread_sys) = cpu_seconds("/proc/thread-self/stat");
                line("used_cpu_sys", &format!("{process_sys:.6}"));
                line("used_cpu_user", &format!("{process_user:.6}"));
                line("used_cpu_sys_children", &"0.000000");
                line("used_cpu_user_children", &"0.000000");
                line("used_cpu_sys_main_thread", &format!("{thread_sys:.6}"));
                line("used_cpu_user_main_thread", &format!("{thread_user:.6}"));
            }
            "errorstats" => {
                for (code, count) in &self.error_counts {
                    line(&format!("errorstat_{code}"), &format!("count={count}"));
                }
            }
            "cluster" => line("cluster_enabled", &0),
            "keyspace" => {
                for db in 0..self.slots.len() {
                    if let Some((keys, expires)) = self.key_counts(db) {
                        if keys > 0 {
                            line(
                                &format!("db{db}"),
                                &format!("keys={keys},expires={expires},avg_ttl=0"),
                            );
                        }
                    }
                }
            }
            "pool" => {
                line("pool_path", &pool.name().display());
                line("pool_size", &pool.size());
                line("pool_used", &heap_stats.used_bytes);
                line("pool_free", &heap_stats.free_bytes);
                line("pool_chunks", &heap_stats.chunks);
                line("pool_chunks_free", &heap_stats.chunks_free);
                line(
                    "pool_fragmentation",
                    &format!("{:.4}", heap_stats.fragmentation()),
                );
            }
            // modules: none.
            _ => {}
        }
    }

    fn config_value(&self, name: &str) -> String {
        match self.config.get(&[Bytes::copy_from_slice(name.as_bytes())]) {
            Reply::Map(pairs) => match pairs.first() {
                Some((_, Reply::Bulk(value))) => String::from_utf8_lossy(value).into_owned(),
                _ => String::new(),
            },
            _ => String::new(),
        }
    }
}

pub(super) fn human(bytes: u64) -> String {
    let units = ["B", "K", "M", "G", "T"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2}{}", units[u])
}

/// "Linux 6.1.0 x86_64", as Redis prints `uname`.
fn os_name() -> String {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "{} {} {}",
        read("/proc/sys/kernel/ostype"),
        read("/proc/sys/kernel/osrelease"),
        std::env::consts::ARCH
    )
}

/// User and system CPU seconds from a /proc `stat` file (fields 14 and 15, after the
/// parenthesised command name); zeros if it cannot be read.
fn cpu_seconds(path: &str) -> (f64, f64) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return (0.0, 0.0);
    };
    let after_name = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .map_or(0.0, |t| t as f64 / TICKS_PER_SECOND)
    };
    // After the name: state is field 3 (index 0), utime field 14 (index 11), stime 15.
    (ticks(11), ticks(12))
}
