//! The limits one plugin runs under: memory, tables, stack, time, concurrency
//! and answer size.
//!
//! The runtime applies memory, tables (through [`StoreLimiter`]), stack (by
//! running the plugin on an engine with that stack size), time and
//! concurrency to every call; the namespace applies the size limits to every
//! answer before it reaches a client.

use std::time::Duration;

use anyhow::{Result, bail};
use serde::Deserialize;
use wasmtime::ResourceLimiter;

/// The `[limits]` section of a manifest; every field has a default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Linear memory a plugin instance may grow to, in MiB.
    pub memory_mib: u64,
    /// Elements one table of an instance may grow to.
    pub table_elements: u64,
    /// Stack the plugin's code may use, in KiB; deep recursion past it traps.
    pub stack_kib: u32,
    /// Time one call may spend running the plugin's own code, in
    /// milliseconds (waiting on the host does not count).
    pub cpu_ms: u64,
    /// Wall-clock time one call may take, in milliseconds.
    pub timeout_ms: u64,
    /// Calls to the plugin that may run at once; more wait, within their
    /// time limit.
    pub concurrent_calls: u32,
    /// Total bytes of all contents of one read.
    pub max_read_bytes: u64,
    /// Entries on one page of a listing.
    pub max_page_entries: u32,
    /// Bytes of any one string of an answer other than a read's contents: a
    /// path, name, title, description, MIME type, `_meta`, icon source or
    /// completion value.
    pub max_string_bytes: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mib: 256,
            table_elements: 200_000,
            stack_kib: DEFAULT_STACK_KIB,
            cpu_ms: 5_000,
            timeout_ms: 10_000,
            concurrent_calls: 8,
            max_read_bytes: 16 * 1024 * 1024,
            max_page_entries: 1_000,
            max_string_bytes: 64 * 1024,
        }
    }
}

/// The default stack limit, wasmtime's own default.
pub const DEFAULT_STACK_KIB: u32 = 512;

/// The range a stack limit must lie in.
const STACK_KIB_RANGE: std::ops::RangeInclusive<u32> = 64..=16_384;

impl Limits {
    /// Rejects limits that could never let a call succeed.
    pub fn validate(&self) -> Result<()> {
        if !STACK_KIB_RANGE.contains(&self.stack_kib) {
            bail!(
                "stack_kib must lie between {} and {}, not {}",
                STACK_KIB_RANGE.start(),
                STACK_KIB_RANGE.end(),
                self.stack_kib
            );
        }
        if self.memory_mib == 0
            || self.table_elements == 0
            || self.cpu_ms == 0
            || self.timeout_ms == 0
            || self.concurrent_calls == 0
            || self.max_page_entries == 0
            || self.max_string_bytes == 0
        {
            bail!("every limit must be above zero");
        }
        Ok(())
    }

    pub fn memory_bytes(&self) -> usize {
        usize::try_from(self.memory_mib.saturating_mul(1024 * 1024)).unwrap_or(usize::MAX)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// A limiter for one new store whose running code is sampled every `tick`.
    pub fn limiter(&self, tick: Duration) -> StoreLimiter {
        let tick_ms = u64::try_from(tick.as_millis()).unwrap_or(u64::MAX).max(1);
        StoreLimiter {
            memory_bytes: self.memory_bytes(),
            table_elements: usize::try_from(self.table_elements).unwrap_or(usize::MAX),
            cpu_ticks_left: self.cpu_ms.div_ceil(tick_ms),
            exceeded: None,
        }
    }
}

/// Refuses memory and table growth past the limits, counts the ticks a call
/// spends in the plugin's code, and remembers which limit stopped a call so
/// its error can name it.
#[derive(Debug)]
pub struct StoreLimiter {
    memory_bytes: usize,
    table_elements: usize,
    cpu_ticks_left: u64,
    exceeded: Option<Exceeded>,
}

/// A limit a call ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    Memory,
    Table,
    Cpu,
}

impl StoreLimiter {
    /// The limit the call ran into, if any.
    pub fn exceeded(&self) -> Option<Exceeded> {
        self.exceeded
    }

    /// Counts one tick of the plugin's code running; false once the CPU
    /// budget is spent.
    pub fn tick(&mut self) -> bool {
        match self.cpu_ticks_left.checked_sub(1) {
            Some(left) => {
                self.cpu_ticks_left = left;
                true
            }
            None => {
                self.exceeded = Some(Exceeded::Cpu);
                false
            }
        }
    }
}

impl ResourceLimiter for StoreLimiter {
    fn memory_growing(
        &mut self,
        _: usize,
        desired: usize,
        _: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= self.memory_bytes;
        if !allowed {
            self.exceeded = Some(Exceeded::Memory);
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        _: usize,
        desired: usize,
        _: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = desired <= self.table_elements;
        if !allowed {
            self.exceeded = Some(Exceeded::Table);
        }
        Ok(allowed)
    }
}
