//! Every limit of virtual persistent memory, named in one place, each with its reason.

/// The unit of mapping, eviction and swap: one page.
pub const PAGE_SIZE: u64 = mnemo_pmem::limits::PAGE_SIZE;

/// Bytes of the configuration section at the start of the persistent-memory file: one page,
/// so a torn write of it never reaches the table of contents.
pub const CONFIG_SIZE: u64 = PAGE_SIZE;

/// Bytes of one table-of-contents entry: a power of two, so entries never straddle a page
/// (a torn page write tears at most the entries it holds, each checked by its CRC).
pub const TOC_ENTRY_SIZE: u64 = 128;

/// Regions one persistent-memory file can hold: 64 entries fill two pages.
pub const TOC_ENTRIES: u64 = 64;

/// Offset of the first region's page table in the persistent-memory file.
pub const DATA_OFFSET: u64 = CONFIG_SIZE + TOC_ENTRIES * TOC_ENTRY_SIZE;

/// Longest owner name, in bytes (UTF-8): what fits the entry's fixed field.
pub const OWNER_NAME_MAX: usize = 55;

/// Regions open at once in one process: the fault handler's table is a fixed array, so that
/// the handler never allocates or takes a lock to find the faulting region.
pub const OPEN_REGIONS_MAX: usize = 16;

/// Most pages one region may have resident in persistent memory. Every resident page is
/// mapped on its own, and the kernel allows a process `vm.max_map_count` (65530 by default)
/// mappings: pages scattered in the worst case take two each (the page and the reserved
/// gap after it), so 16384 (64 MiB) leaves room for several regions and the rest of the
/// process.
pub const BUDGET_PAGES_MAX: u64 = 16384;

/// Fewest resident pages of a region: eviction needs one page to evict while another is
/// being filled, and a pool's first pages (its header and journal) are touched together.
pub const BUDGET_PAGES_MIN: u64 = 4;

/// Largest virtual region: page numbers are kept in 32 bits in the fault handler's
/// preallocated arrays (16 TiB; a pool is at most 1 TiB anyway).
pub const CAPACITY_PAGES_MAX: u64 = 1 << 32;

/// Largest persistent-memory file (the `mnemo-pmem` reservation limit).
pub const PM_BYTES_MAX: u64 = mnemo_pmem::limits::POOL_SIZE_MAX;

/// Exit code of a process stopped by a crash point ([`crate::Region::crash_at`]), so
/// that a crash test tells a simulated death from a real failure.
pub const CRASH_EXIT_CODE: i32 = 86;

/// Most pages one eviction takes: the swap file is synced once per eviction (a disk flush:
/// 0.2-2.5 ms on this machine's shared virtio disk) and the page table fenced once, so a
/// batch divides both by its size; 64 pages (256 KiB) per sync.
pub const EVICT_BATCH_PAGES: u64 = 64;

/// Most pages one first touch maps (fault-around): when the faulting page and the pages after
/// it are untouched and the free slots on top of the free stack are contiguous, up to this
/// many are zero-filled, recorded and mapped with one fence each and one `mmap`, so a linear
/// workload takes a fault per 64 KiB instead of per page, and neighbouring pages in
/// neighbouring slots make one mapping (the kernel merges them). At most a quarter of a
/// region's budget, so that the pages one fault maps are not the next eviction's victims
/// (the oldest quarter at most) unless every older page was touched again.
pub const FAULT_AROUND_PAGES: u64 = 16;
