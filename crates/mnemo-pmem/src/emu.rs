//! The NVMM emulator: run on DRAM (or tmpfs) as if the pool were on a slower persistent
//! memory, by charging modelled delays at the points where the device would make the
//! program wait: flushes and fences. Plain stores are never hooked.
//!
//! [`EmulatedMedia`] wraps any [`Media`]. Each flush (and each non-temporal copy) adds to
//! the calling thread's *epoch*: the time of its first flush since the last fence, the
//! 64 B lines flushed and the bytes charged to the device (rounded out to the media's write
//! granularity: 64 B, or 256 B for Optane's XPLine). At the fence ([`Media::drain`]) the
//! thread spins on the time-stamp counter until
//!
//! ```text
//! done = max(epoch_start + wbarrier + (ordered ? lines * line : line),   // latency
//!            tat' - burst)                                              // bandwidth
//! tat' = max(tat, epoch_start) + charged_bytes / write_bandwidth
//! ```
//!
//! `tat` is one device timeline shared by every thread (a token bucket in its "theoretical
//! arrival time" form: up to `burst` bytes, the device's write buffer, are absorbed at once,
//! after which writers wait for the bandwidth). In `ordered` (clflush) mode each line's
//! latency is paid in turn; in weakly ordered mode (clwb/clflushopt) the lines overlap and
//! one latency is paid. The real time the flushes took counts toward `done`, so the model
//! is not paid twice; the spin's own fixed overshoot is measured at start-up and taken off.
//! A fence with no flush since the previous one costs nothing.
//!
//! Reads through [`crate::Pool::read`] may be charged `read_ns` plus `len / read_bandwidth`:
//! **approximate**, since loads through raw pointers are not seen. Transparent read-latency
//! emulation (Quartz-style) needs hardware performance counters, which this virtual machine
//! does not expose.
//!
//! Presets ([`EmuConfig::preset`]) and the environment variables that choose and override
//! them are listed in `docs/design/spf-and-emulation.md`; `MNEMO_EMULATE=<preset>` turns the
//! emulator on for pools opened by [`crate::Pool::open`] and [`crate::Pool::create`]. With
//! it unset the pool's medium is not wrapped at all, so emulation off costs nothing.
//!
//! All threads of a process share one epoch per thread (a fence orders every earlier flush
//! of the thread, whichever pool it touched).
#![allow(unsafe_code)]

use std::cell::Cell;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::MediaError;
use crate::file::FileMedia;
use crate::limits::CACHE_LINE;
use crate::media::{ForwardMedia, Media, MediaInfo};

/// How flushed lines wait for the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FlushMode {
    /// clflush: each line's latency is paid in turn.
    Ordered,
    /// clwb/clflushopt: lines overlap; one latency per fence.
    Weak,
}

/// The device model. Times in nanoseconds, bandwidths in GB/s (10^9 bytes per second);
/// 0 bandwidth means unlimited.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct EmuConfig {
    /// Preset the values came from.
    pub preset: String,
    /// Latency of writing back one line.
    pub line_ns: f64,
    /// Write-barrier latency paid at a fence that follows flushes.
    pub wbarrier_ns: f64,
    /// Media write bandwidth shared by all threads (0: unlimited).
    pub write_gbps: f64,
    /// Bytes absorbed at once before bandwidth limits (the device's write buffer).
    pub burst_bytes: u64,
    /// Unit the media writes: 64, or 256 for Optane.
    pub media_gran: u64,
    /// Ordered (clflush) or weakly ordered flushes.
    pub flush_mode: FlushMode,
    /// Read latency charged per read through the API (0: off). Approximate.
    pub read_ns: f64,
    /// Read bandwidth for reads through the API (0: unlimited).
    pub read_gbps: f64,
}

/// Preset names, for messages.
pub const PRESETS: &[&str] = &[
    "native",
    "pcm",
    "stt-ram",
    "optane-1dimm",
    "optane-6dimm",
    "cxl-dram",
    "mnemosyne-pcm",
];

/// DRAM write bandwidth of this host for one thread (NT stores, measured in the flush
/// survey): the base that "1/8 of DRAM" presets divide.
const DRAM_WRITE_GBPS: f64 = 18.5;

impl EmuConfig {
    /// A named preset (sources in `docs/design/spf-and-emulation.md`).
    pub fn preset(name: &str) -> Option<EmuConfig> {
        let base = EmuConfig {
            preset: name.to_string(),
            line_ns: 0.0,
            wbarrier_ns: 0.0,
            write_gbps: 0.0,
            burst_bytes: 16 * 1024,
            media_gran: 64,
            flush_mode: FlushMode::Weak,
            read_ns: 0.0,
            read_gbps: 0.0,
        };
        let c = match name {
            "native" => base,
            // The NVMM study: 300 ns PCM, 1/8 of DRAM bandwidth, 1 us write barrier.
            "pcm" => EmuConfig {
                line_ns: 300.0,
                wbarrier_ns: 1000.0,
                write_gbps: DRAM_WRITE_GBPS / 8.0,
                read_ns: 300.0,
                ..base
            },
            // PMEP-era STT-RAM: 100 ns read, 40 ns line, 200 ns barrier, DRAM bandwidth.
            "stt-ram" => EmuConfig {
                line_ns: 40.0,
                wbarrier_ns: 200.0,
                write_gbps: DRAM_WRITE_GBPS,
                read_ns: 100.0,
                ..base
            },
            // Optane DCPMM gen 1 (Izraelevitz 2019, Yang FAST'20): ADR, so a flushed line is
            // durable in the iMC queue (~100 ns, approximate); 256 B XPLine; 2.3 GB/s write
            // for one DIMM, 13.9 GB/s for six; 16 KB XPBuffer.
            "optane-1dimm" => EmuConfig {
                line_ns: 100.0,
                write_gbps: 2.3,
                media_gran: 256,
                read_ns: 305.0,
                read_gbps: 6.6,
                ..base
            },
            "optane-6dimm" => EmuConfig {
                line_ns: 100.0,
                write_gbps: 13.9,
                burst_bytes: 6 * 16 * 1024,
                media_gran: 256,
                read_ns: 305.0,
                read_gbps: 39.4,
                ..base
            },
            // CXL type-3 DRAM (Pond, ASPLOS'23: +70-90 ns): a fence is about one link round
            // trip (assumption), link-bound ~25 GB/s (x8 Gen5, assumption).
            "cxl-dram" => EmuConfig {
                line_ns: 80.0,
                wbarrier_ns: 80.0,
                write_gbps: 25.0,
                read_ns: 200.0,
                ..base
            },
            // Mnemosyne (ASPLOS'11): +150 ns per flushed line, each flush ordered; memcpy
            // charged at 1.2 GB/s.
            "mnemosyne-pcm" => EmuConfig {
                line_ns: 150.0,
                write_gbps: 1.2,
                flush_mode: FlushMode::Ordered,
                ..base
            },
            _ => return None,
        };
        Some(c)
    }

    /// Apply `MNEMO_EMU_*` overrides read through `env` (a pure function for tests).
    /// Values that do not parse are reported and ignored.
    pub fn apply_overrides(&mut self, env: &dyn Fn(&str) -> Option<String>) {
        fn num<T: std::str::FromStr>(env: &dyn Fn(&str) -> Option<String>, k: &str) -> Option<T> {
            let v = env(k)?;
            match v.trim().parse() {
                Ok(n) => Some(n),
                Err(_) => {
                    tracing::warn!("{k}={v:?} is not a number; ignored");
                    None
                }
            }
        }
        if let Some(v) = num(env, "MNEMO_EMU_LINE_NS") {
            self.line_ns = v;
        }
        if let Some(v) = num(env, "MNEMO_EMU_WBARRIER_NS") {
            self.wbarrier_ns = v;
        }
        if let Some(v) = num(env, "MNEMO_EMU_WRITE_GBPS") {
            self.write_gbps = v;
        }
        if let Some(v) = num(env, "MNEMO_EMU_BURST_BYTES") {
            self.burst_bytes = v;
        }
        if let Some(v) = num::<u64>(env, "MNEMO_EMU_MEDIA_GRAN") {
            if v.is_power_of_two() && v >= CACHE_LINE {
                self.media_gran = v;
            } else {
                tracing::warn!("MNEMO_EMU_MEDIA_GRAN={v}: not a power of two >= 64; ignored");
            }
        }
        if let Some(v) = num(env, "MNEMO_EMU_READ_NS") {
            self.read_ns = v;
        }
        if let Some(v) = num(env, "MNEMO_EMU_READ_GBPS") {
            self.read_gbps = v;
        }
        if let Some(v) = env("MNEMO_EMU_FLUSH_MODE") {
            match v.trim() {
                "clflush" | "ordered" => self.flush_mode = FlushMode::Ordered,
                "weak" | "clwb" | "clflushopt" => self.flush_mode = FlushMode::Weak,
                _ => tracing::warn!("MNEMO_EMU_FLUSH_MODE={v:?}: not clflush or weak; ignored"),
            }
        }
        for v in [
            &mut self.line_ns,
            &mut self.wbarrier_ns,
            &mut self.write_gbps,
            &mut self.read_ns,
            &mut self.read_gbps,
        ] {
            if !v.is_finite() || *v < 0.0 {
                *v = 0.0;
            }
        }
    }

    /// The configuration `MNEMO_EMULATE` names, with overrides; `None` when unset, `off`,
    /// or not a preset (reported).
    pub fn from_env() -> Option<EmuConfig> {
        Self::from(&|k| std::env::var(k).ok())
    }

    /// As [`EmuConfig::from_env`] with another source of variables.
    pub fn from(env: &dyn Fn(&str) -> Option<String>) -> Option<EmuConfig> {
        let name = env("MNEMO_EMULATE")?;
        let name = name.trim();
        if name.is_empty() || name == "off" || name == "0" {
            return None;
        }
        let Some(mut c) = EmuConfig::preset(name) else {
            tracing::warn!(
                "MNEMO_EMULATE={name:?} is not a preset ({}); emulation off",
                PRESETS.join(", ")
            );
            return None;
        };
        c.apply_overrides(env);
        Some(c)
    }
}

/// The model in integer picoseconds, so tests can check its arithmetic exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Model {
    /// Per-line latency.
    pub line_ps: u64,
    /// Write-barrier latency.
    pub wbarrier_ps: u64,
    /// Picoseconds per 1000 bytes on the device (0: unlimited).
    pub ps_per_kb: u64,
    /// The device's write buffer, as time: `burst_bytes / bandwidth`.
    pub burst_ps: u64,
    /// Write granularity in bytes.
    pub gran: u64,
    /// Ordered (clflush) mode.
    pub ordered: bool,
}

/// Flushes of one thread since its last fence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Epoch {
    /// Time of the first flush (ps on the emulator's clock); meaningful when `lines > 0`.
    pub start_ps: u64,
    /// 64 B lines flushed.
    pub lines: u64,
    /// Bytes charged to the device (whole media units).
    pub charged: u64,
}

fn ns_to_ps(ns: f64) -> u64 {
    (ns * 1000.0).round() as u64
}

impl Model {
    /// The integer model of a configuration.
    pub fn new(c: &EmuConfig) -> Model {
        let ps_per_kb = if c.write_gbps > 0.0 {
            // 1000 bytes at G GB/s take 1000/G ns = 10^6/G ps.
            (1e6 / c.write_gbps).round() as u64
        } else {
            0
        };
        Model {
            line_ps: ns_to_ps(c.line_ns),
            wbarrier_ps: ns_to_ps(c.wbarrier_ns),
            ps_per_kb,
            burst_ps: c.burst_bytes.saturating_mul(ps_per_kb) / 1000,
            gran: c.media_gran.max(CACHE_LINE),
            ordered: c.flush_mode == FlushMode::Ordered,
        }
    }

    /// Add a flush of `offset..offset+len` at time `now_ps` to `epoch`.
    pub fn flush(&self, epoch: &mut Epoch, offset: u64, len: u64, now_ps: u64) {
        if len == 0 {
            return;
        }
        let end = offset.saturating_add(len);
        let lines = end.div_ceil(CACHE_LINE) - offset / CACHE_LINE;
        let units = end.div_ceil(self.gran) - offset / self.gran;
        if epoch.lines == 0 {
            epoch.start_ps = now_ps;
        }
        epoch.lines = epoch.lines.saturating_add(lines);
        epoch.charged = epoch
            .charged
            .saturating_add(units.saturating_mul(self.gran));
    }

    /// Time the device needs `bytes` for.
    pub fn transfer_ps(&self, bytes: u64) -> u64 {
        bytes.saturating_mul(self.ps_per_kb) / 1000
    }

    /// The fence ending `epoch`: given the device timeline `tat`, return (done, new tat).
    /// An empty epoch is done at once and leaves the timeline alone.
    pub fn fence(&self, epoch: &Epoch, tat: u64) -> (u64, u64) {
        if epoch.lines == 0 {
            return (0, tat);
        }
        let flush_ps = if self.ordered {
            epoch.lines.saturating_mul(self.line_ps)
        } else {
            self.line_ps
        };
        let latency_done = epoch
            .start_ps
            .saturating_add(self.wbarrier_ps)
            .saturating_add(flush_ps);
        if self.ps_per_kb == 0 {
            return (latency_done, tat);
        }
        let new_tat = tat
            .max(epoch.start_ps)
            .saturating_add(self.transfer_ps(epoch.charged));
        let bandwidth_done = new_tat.saturating_sub(self.burst_ps);
        (latency_done.max(bandwidth_done), new_tat)
    }
}

/// The time-stamp counter and the spin that waits on it.
#[derive(Debug)]
struct Clock {
    origin: u64,
    ps_per_tick: f64,
    ticks_per_ps: f64,
    /// Fixed overshoot of one spin, in ticks, taken off every deadline.
    overhead_ticks: u64,
}

#[inline(always)]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86_64.
        unsafe { std::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: OnceLock<std::time::Instant> = OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos() as u64
    }
}

impl Clock {
    fn get() -> &'static Clock {
        static CLOCK: OnceLock<Clock> = OnceLock::new();
        CLOCK.get_or_init(Clock::calibrate)
    }

    fn calibrate() -> Clock {
        // Frequency: ticks against the monotonic clock over 20 ms.
        let t0 = std::time::Instant::now();
        let c0 = ticks();
        while t0.elapsed() < std::time::Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let c1 = ticks();
        let ns = t0.elapsed().as_nanos() as f64;
        let ticks_per_ns = (c1.saturating_sub(c0) as f64 / ns.max(1.0)).max(1e-3);
        let mut clock = Clock {
            origin: c0,
            ps_per_tick: 1000.0 / ticks_per_ns,
            ticks_per_ps: ticks_per_ns / 1000.0,
            overhead_ticks: 0,
        };
        // Overshoot: spin to a deadline 1 us out, many times; keep the median excess.
        let target = (1000.0 * ticks_per_ns) as u64;
        let mut excess: Vec<u64> = (0..201)
            .map(|_| {
                let start = ticks();
                clock.spin_until_tick(start + target);
                ticks().saturating_sub(start + target)
            })
            .collect();
        excess.sort_unstable();
        clock.overhead_ticks = excess[excess.len() / 2];
        tracing::debug!(
            ticks_per_ns,
            overhead_ticks = clock.overhead_ticks,
            "emulator clock"
        );
        clock
    }

    #[inline]
    fn now_ps(&self) -> u64 {
        (ticks().saturating_sub(self.origin) as f64 * self.ps_per_tick) as u64
    }

    #[inline]
    fn spin_until_tick(&self, deadline: u64) {
        let deadline = deadline.saturating_sub(self.overhead_ticks);
        while ticks() < deadline {
            std::hint::spin_loop();
        }
    }

    /// Spin until `ps` on this clock; returns the picoseconds waited.
    fn spin_until_ps(&self, ps: u64) -> u64 {
        let start = self.now_ps();
        if ps <= start {
            return 0;
        }
        let deadline = self
            .origin
            .saturating_add((ps as f64 * self.ticks_per_ps) as u64);
        self.spin_until_tick(deadline);
        ps - start
    }
}

thread_local! {
    static EPOCH: Cell<Epoch> = const { Cell::new(Epoch { start_ps: 0, lines: 0, charged: 0 }) };
}

/// Counters of one emulated medium.
#[derive(Debug, Default)]
struct Counters {
    fences: AtomicU64,
    flushed_lines: AtomicU64,
    charged_bytes: AtomicU64,
    modelled_ps: AtomicU64,
    delay_ps: AtomicU64,
    reads: AtomicU64,
    read_delay_ps: AtomicU64,
}

/// A snapshot of the emulator's configuration and counters (`Pool::emulation`, INFO).
#[derive(Clone, Debug, serde::Serialize)]
pub struct EmuReport {
    /// The model in force.
    pub config: EmuConfig,
    /// Fences that ended an epoch with flushes.
    pub fences: u64,
    /// 64 B lines flushed (and copied non-temporally).
    pub flushed_lines: u64,
    /// Bytes charged to the device (whole media units).
    pub charged_bytes: u64,
    /// Sum of modelled persist times (first flush to done), ns.
    pub modelled_ns: u64,
    /// Time spent spinning to match the model, ns.
    pub delay_ns: u64,
    /// Reads charged (approximate).
    pub reads: u64,
    /// Read delay charged, ns (approximate).
    pub read_delay_ns: u64,
}

#[derive(Debug)]
struct Device {
    config: EmuConfig,
    model: Model,
    tat_ps: AtomicU64,
    counters: Counters,
}

/// A medium that behaves like `M` delayed by an NVMM model. See the module documentation.
#[derive(Debug)]
pub struct EmulatedMedia<M: Media> {
    inner: M,
    device: Arc<Device>,
}

impl<M: Media> EmulatedMedia<M> {
    /// Emulate `config` on top of `inner`. Calibrates the clock at the first use in the
    /// process (about 20 ms).
    pub fn new(inner: M, config: EmuConfig) -> EmulatedMedia<M> {
        let _ = Clock::get();
        tracing::info!(preset = %config.preset, ?config, "NVMM emulation on");
        EmulatedMedia {
            inner,
            device: Arc::new(Device {
                model: Model::new(&config),
                config,
                tat_ps: AtomicU64::new(0),
                counters: Counters::default(),
            }),
        }
    }

    /// The wrapped medium.
    pub fn inner(&self) -> &M {
        &self.inner
    }

    /// Add a flush that began at `now` (taken before the real flush, so its time counts
    /// toward the model instead of on top of it).
    fn record_flush(&self, offset: u64, len: u64, now: u64) {
        EPOCH.with(|e| {
            let mut epoch = e.get();
            self.device.model.flush(&mut epoch, offset, len, now);
            e.set(epoch);
        });
    }

    fn pay_fence(&self) {
        let epoch = EPOCH.with(|e| e.replace(Epoch::default()));
        if epoch.lines == 0 {
            return;
        }
        let d = &self.device;
        let mut tat = d.tat_ps.load(Ordering::Relaxed);
        let done = loop {
            let (done, new_tat) = d.model.fence(&epoch, tat);
            if new_tat == tat {
                break done;
            }
            match d
                .tat_ps
                .compare_exchange_weak(tat, new_tat, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break done,
                Err(seen) => tat = seen,
            }
        };
        let waited = Clock::get().spin_until_ps(done);
        let c = &d.counters;
        c.fences.fetch_add(1, Ordering::Relaxed);
        c.flushed_lines.fetch_add(epoch.lines, Ordering::Relaxed);
        c.charged_bytes.fetch_add(epoch.charged, Ordering::Relaxed);
        c.modelled_ps
            .fetch_add(done.saturating_sub(epoch.start_ps), Ordering::Relaxed);
        c.delay_ps.fetch_add(waited, Ordering::Relaxed);
    }

    /// A snapshot of the counters.
    pub fn report(&self) -> EmuReport {
        let c = &self.device.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        EmuReport {
            config: self.device.config.clone(),
            fences: get(&c.fences),
            flushed_lines: get(&c.flushed_lines),
            charged_bytes: get(&c.charged_bytes),
            modelled_ns: get(&c.modelled_ps) / 1000,
            delay_ns: get(&c.delay_ps) / 1000,
            reads: get(&c.reads),
            read_delay_ns: get(&c.read_delay_ps) / 1000,
        }
    }
}

impl<M: Media> ForwardMedia for EmulatedMedia<M> {
    type Inner = M;

    #[inline]
    fn inner(&self) -> &M {
        &self.inner
    }

    fn flush(&self, offset: u64, len: u64) {
        let now = Clock::get().now_ps();
        self.inner.flush(offset, len);
        self.record_flush(offset, len, now);
    }

    fn drain(&self) -> Result<(), MediaError> {
        self.inner.drain()?;
        self.pay_fence();
        Ok(())
    }

    fn copy_nodrain(&self, offset: u64, src: &[u8]) {
        let now = Clock::get().now_ps();
        self.inner.copy_nodrain(offset, src);
        self.record_flush(offset, src.len() as u64, now);
    }

    fn stream_nodrain(&self, offset: u64, src: &[u8]) {
        let now = Clock::get().now_ps();
        self.inner.stream_nodrain(offset, src);
        self.record_flush(offset, src.len() as u64, now);
    }

    fn info(&self) -> MediaInfo {
        let mut info = self.inner.info();
        info.reason = format!(
            "{}; NVMM emulation: {}",
            info.reason, self.device.config.preset
        );
        info
    }

    fn charge_read(&self, offset: u64, len: u64) {
        self.inner.charge_read(offset, len);
        let c = &self.device.config;
        if c.read_ns <= 0.0 || len == 0 {
            return;
        }
        let mut ps = ns_to_ps(c.read_ns);
        if c.read_gbps > 0.0 {
            ps = ps.saturating_add((len as f64 * 1000.0 / c.read_gbps) as u64);
        }
        let clock = Clock::get();
        let waited = clock.spin_until_ps(clock.now_ps().saturating_add(ps));
        let counters = &self.device.counters;
        counters.reads.fetch_add(1, Ordering::Relaxed);
        counters.read_delay_ps.fetch_add(waited, Ordering::Relaxed);
    }

    fn emulation(&self) -> Option<EmuReport> {
        Some(self.report())
    }
}

/// Wrap a pool file's medium in the emulator when `MNEMO_EMULATE` names a preset.
pub fn wrap_from_env(media: FileMedia) -> Box<dyn Media> {
    match EmuConfig::from_env() {
        Some(config) => Box::new(EmulatedMedia::new(media, config)),
        None => Box::new(media),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(name: &str) -> Model {
        Model::new(&EmuConfig::preset(name).unwrap())
    }

    #[test]
    fn every_preset_exists() {
        for name in PRESETS {
            assert!(EmuConfig::preset(name).is_some(), "{name}");
        }
        assert!(EmuConfig::preset("dram9000").is_none());
    }

    #[test]
    fn pcm_one_page_weak() {
        // pcm: 300 ns line, 1 us barrier, 18.5/8 GB/s = 2.3125 GB/s, 16 KiB burst.
        let m = model("pcm");
        assert_eq!(m.ps_per_kb, 432_432); // 10^6 / 2.3125
        let mut e = Epoch::default();
        m.flush(&mut e, 4096, 4096, 1_000_000);
        assert_eq!(
            e,
            Epoch {
                start_ps: 1_000_000,
                lines: 64,
                charged: 4096
            }
        );
        // Idle device: 4 KiB fits the burst, so latency decides: 1 us + 300 ns.
        let (done, tat) = m.fence(&e, 0);
        assert_eq!(done, 1_000_000 + 1_000_000 + 300_000);
        assert_eq!(tat, 1_000_000 + 4096 * 432_432 / 1000);
    }

    #[test]
    fn bandwidth_beyond_the_burst() {
        let m = model("optane-1dimm"); // 2.3 GB/s, 256 B units, 16 KiB burst, 100 ns line
        let mut e = Epoch::default();
        // 100 bytes straddling a 256 B boundary: three lines, two media units.
        m.flush(&mut e, 250, 100, 5);
        assert_eq!((e.lines, e.charged), (3, 512));
        let mut big = Epoch::default();
        m.flush(&mut big, 0, 1 << 20, 0);
        assert_eq!((big.lines, big.charged), (16384, 1 << 20));
        let (done, tat) = m.fence(&big, 0);
        let transfer = (1u64 << 20) * m.ps_per_kb / 1000;
        assert_eq!(tat, transfer);
        assert_eq!(done, transfer - m.burst_ps);
        // A second megabyte right behind the first queues behind it.
        let (done2, tat2) = m.fence(&big, tat);
        assert_eq!(tat2, 2 * transfer);
        assert_eq!(done2, 2 * transfer - m.burst_ps);
    }

    #[test]
    fn ordered_mode_pays_every_line() {
        let m = model("mnemosyne-pcm"); // 150 ns per line, ordered, 1.2 GB/s
        let mut e = Epoch::default();
        m.flush(&mut e, 0, 640, 0);
        let (done, _) = m.fence(&e, 0);
        // 10 lines * 150 ns = 1500 ns; 640 B at 1.2 GB/s = 533 ns, inside the burst.
        assert_eq!(done, 1_500_000);
    }

    #[test]
    fn empty_fence_is_free() {
        let m = model("pcm");
        assert_eq!(m.fence(&Epoch::default(), 77), (0, 77));
    }

    #[test]
    fn overrides_apply() {
        let env = |k: &str| match k {
            "MNEMO_EMULATE" => Some("stt-ram".to_string()),
            "MNEMO_EMU_LINE_NS" => Some("55".to_string()),
            "MNEMO_EMU_FLUSH_MODE" => Some("clflush".to_string()),
            "MNEMO_EMU_MEDIA_GRAN" => Some("100".to_string()),
            "MNEMO_EMU_WRITE_GBPS" => Some("nope".to_string()),
            _ => None,
        };
        let c = EmuConfig::from(&env).unwrap();
        assert_eq!(c.line_ns, 55.0);
        assert_eq!(c.flush_mode, FlushMode::Ordered);
        assert_eq!(c.media_gran, 64, "not a power of two: ignored");
        assert_eq!(c.write_gbps, DRAM_WRITE_GBPS, "not a number: ignored");
        assert!(EmuConfig::from(&|_| None).is_none());
        assert!(EmuConfig::from(&|k| (k == "MNEMO_EMULATE").then(|| "bogus".into())).is_none());
    }
}
