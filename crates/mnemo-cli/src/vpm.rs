//! `mnemo serve --pm-budget`: the key-value server's pool on a virtual region
//! (`mnemo_vpm`): the persistent-memory file at `--pool` holds at most the budget of the
//! pool's pages, the swap file the rest.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mnemo_heap::Heap;
use mnemo_kv::engine::heap_options;
use mnemo_pmem::{CreateOptions, OpenOptions, Pool};
use mnemo_vpm::limits::{DATA_OFFSET, PAGE_SIZE};
use mnemo_vpm::{format, Space, Stats, StatsHandle};

use crate::serve::{ServeArgs, Start, LAYOUT};
use crate::size;

/// The region's owner name in the space: the server's one region is its sequence 0.
const OWNER: &str = "mnemo-serve";

fn swap_path(args: &ServeArgs) -> PathBuf {
    args.swap.clone().unwrap_or_else(|| {
        let mut p = args.pool.as_os_str().to_os_string();
        p.push(".swap");
        PathBuf::from(p)
    })
}

/// Create (first start) or open the space, its region and the heap on it.
pub(crate) fn open_heap(
    args: &ServeArgs,
    budget: u64,
    policy: Option<Arc<dyn mnemo_pmem::SyncPolicy>>,
) -> Result<(Heap, Start, StatsHandle), String> {
    let pm = &args.pool;
    let swap = swap_path(args);
    let capacity = args
        .size_max
        .unwrap_or(args.size)
        .max(args.size)
        .next_multiple_of(PAGE_SIZE);
    let created = !pm.exists();
    let space = if created {
        create_space(pm, &swap, capacity, budget)?
    } else {
        Space::open(pm, &swap).map_err(|e| e.to_string())?
    };
    if space
        .regions()
        .map_err(|e| e.to_string())?
        .iter()
        .all(|r| r.owner != OWNER)
    {
        // A first start stopped after creating the files: nothing was ever stored.
        space
            .allocate(OWNER, capacity, budget)
            .map_err(|e| format!("{}: {e}", pm.display()))?;
    }
    let region = space
        .open_region(OWNER, 0)
        .map_err(|e| format!("{}: {e}", pm.display()))?;
    let stats = region.stats_handle();
    let s = stats.stats();
    if !created && s.budget_pages != budget.min(capacity) / PAGE_SIZE {
        tracing::warn!(
            pm_budget = %size::human(s.budget_pages * PAGE_SIZE),
            "--pm-budget differs from the budget the pool was created with, which stays"
        );
    }
    tracing::info!(
        pool = %pm.display(),
        swap = %swap.display(),
        capacity = %size::human(s.capacity_pages * PAGE_SIZE),
        pm_budget = %size::human(s.budget_pages * PAGE_SIZE),
        resident_pages = s.resident_pages,
        swapped_pages = s.swapped_pages,
        "virtual persistent memory"
    );
    // A region whose pool header was never written (a first start stopped early) reads as
    // zeros: format it.
    let mut head = [0u8; 8];
    region.read(0, &mut head).map_err(|e| e.to_string())?;
    let fresh = head.iter().all(|&b| b == 0);
    let media = Box::new(region);
    if fresh {
        let mut options = CreateOptions::new(args.size.min(capacity), LAYOUT);
        options.size_max = capacity;
        options.policy = policy;
        let pool = Pool::create_on(media, pm, &options).map_err(|e| e.to_string())?;
        let heap = Heap::create(pool, &heap_options())
            .map_err(|e| format!("{}: formatting the heap failed: {e}", pm.display()))?;
        return Ok((heap, Start::Created, stats));
    }
    let options = OpenOptions {
        layout: Some(LAYOUT.to_string()),
        size_max: None,
        policy,
    };
    let pool = Pool::open_on(media, pm, &options).map_err(|e| e.to_string())?;
    let start = if pool.was_clean() {
        Start::Clean
    } else {
        Start::Recovered
    };
    let heap = Heap::open_with(pool, &heap_options()).map_err(|e| {
        format!(
            "{}: {e}; restore the pool from a copy, or start with another --pool",
            pm.display()
        )
    })?;
    Ok((heap, start, stats))
}

fn create_space(pm: &Path, swap: &Path, capacity: u64, budget: u64) -> Result<Space, String> {
    if let Some(dir) = pm.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create directory {}: {e}", dir.display()))?;
    }
    let budget = budget.min(capacity) / PAGE_SIZE * PAGE_SIZE;
    let pm_bytes = DATA_OFFSET + format::table_bytes(capacity / PAGE_SIZE) + budget;
    let space = Space::create(pm, swap, pm_bytes).map_err(|e| e.to_string())?;
    tracing::info!(pool = %pm.display(), swap = %swap.display(), "created the virtual persistent memory files");
    Ok(space)
}

/// INFO lines of the `persistence` section: how much of the pool is in persistent memory
/// (MRR) and the paging traffic since start.
pub(crate) fn info(s: &Stats, out: &mut String) {
    use std::fmt::Write as _;
    let _ = write!(
        out,
        "mnemo_vpm:1\r\nmnemo_vpm_capacity_pages:{}\r\nmnemo_vpm_budget_pages:{}\r\nmnemo_vpm_resident_pages:{}\r\nmnemo_vpm_swapped_pages:{}\r\nmnemo_vpm_mrr:{:.4}\r\nmnemo_vpm_faults:{}\r\nmnemo_vpm_zero_fills:{}\r\nmnemo_vpm_swap_outs:{}\r\nmnemo_vpm_evictions:{}\r\nmnemo_vpm_clean_evictions:{}\r\nmnemo_vpm_swap_ins:{}\r\nmnemo_vpm_sync_evictions:{}\r\nmnemo_vpm_fault_waits:{}\r\n",
        s.capacity_pages,
        s.budget_pages,
        s.resident_pages,
        s.swapped_pages,
        s.mrr(),
        s.faults,
        s.zero_fills,
        s.swap_outs,
        s.evictions,
        s.clean_evictions,
        s.swap_ins,
        s.sync_evictions,
        s.fault_waits,
    );
}
