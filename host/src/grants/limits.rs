//! The limits capability: the `[limits]` section of a manifest. Its sandbox
//! half ([`Limits`]: memory, tables, host handles, stack, time and
//! concurrency) is the runtime's; its answer half ([`AnswerLimits`]: sizes of
//! what a plugin returns) is the namespace's.
//!
//! The runtime applies memory (all of an instance's memories and tables
//! together, a table element counted as [`TABLE_ELEMENT_BYTES`]), tables
//! (the elements of each; both through [`StoreLimiter`]), host handles (the
//! instance's resource table: open files, directories, sockets, streams,
//! HTTP fields and bodies), stack (by running the plugin on an engine with
//! that stack size), time and concurrency to every call; the namespace
//! applies the answer limits to every answer before it reaches a client.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use wasmtime::ResourceLimiter;

use super::{Capability, Ceiling, Grant};
use crate::contract::AnswerLimits;

/// The sandbox half of a manifest's `[limits]`; every field has a default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Linear memory and tables a plugin instance may grow to together, in
    /// MiB.
    pub memory_mib: u64,
    /// Elements one table of an instance may grow to.
    pub table_elements: u64,
    /// Host resources one instance may hold at once: open files and
    /// directories, sockets, streams, pollables, HTTP fields, requests and
    /// bodies. Each holds at most one host descriptor.
    pub max_handles: u32,
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
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_mib: 256,
            table_elements: 200_000,
            max_handles: 256,
            stack_kib: DEFAULT_STACK_KIB,
            cpu_ms: 5_000,
            timeout_ms: 10_000,
            concurrent_calls: 8,
        }
    }
}

/// A manifest's `[limits]`: both halves, read key by key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LimitsSection {
    pub sandbox: Limits,
    pub answers: AnswerLimits,
}

impl<'de> Deserialize<'de> for LimitsSection {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let table = toml::Table::deserialize(deserializer)?;
        let answer_keys = AnswerLimits::default().by_key().map(|(key, _)| key);
        let (answers, sandbox): (toml::Table, toml::Table) = table
            .into_iter()
            .partition(|(key, _)| answer_keys.contains(&key.as_str()));
        Ok(Self {
            sandbox: sandbox.try_into().map_err(D::Error::custom)?,
            answers: answers.try_into().map_err(D::Error::custom)?,
        })
    }
}

impl LimitsSection {
    /// Every limit by its manifest key.
    pub fn by_key(&self) -> Vec<(&'static str, u64)> {
        let sandbox = &self.sandbox;
        let mut keyed = vec![
            ("memory_mib", sandbox.memory_mib),
            ("table_elements", sandbox.table_elements),
            ("max_handles", sandbox.max_handles.into()),
            ("stack_kib", sandbox.stack_kib.into()),
            ("cpu_ms", sandbox.cpu_ms),
            ("timeout_ms", sandbox.timeout_ms),
            ("concurrent_calls", sandbox.concurrent_calls.into()),
        ];
        keyed.extend(self.answers.by_key());
        keyed
    }

    /// Rejects limits that could never let a call succeed, or that no
    /// instance slot of the runtime's pool could hold.
    pub fn validate(&self) -> Result<()> {
        let sandbox = &self.sandbox;
        if sandbox.memory_mib > MAX_MEMORY_MIB {
            bail!(
                "memory_mib must be at most {MAX_MEMORY_MIB} (4 GiB, all a 32-bit memory can address), not {}",
                sandbox.memory_mib
            );
        }
        if sandbox.table_elements > MAX_TABLE_ELEMENTS {
            bail!(
                "table_elements must be at most {MAX_TABLE_ELEMENTS}, not {}",
                sandbox.table_elements
            );
        }
        if !STACK_KIB_RANGE.contains(&self.sandbox.stack_kib) {
            bail!(
                "stack_kib must lie between {} and {}, not {}",
                STACK_KIB_RANGE.start(),
                STACK_KIB_RANGE.end(),
                self.sandbox.stack_kib
            );
        }
        let zero = self
            .by_key()
            .into_iter()
            .find(|&(key, value)| value == 0 && key != "max_read_bytes");
        if let Some((key, _)) = zero {
            bail!("{key} must be above zero");
        }
        Ok(())
    }
}

impl Capability for LimitsSection {
    fn section(&self) -> &'static str {
        "limits"
    }

    fn check(&self, ceiling: &Ceiling, _: &Path) -> Result<()> {
        for (key, value) in self.by_key() {
            if let Some(most) = ceiling.most_for(key)
                && value > most
            {
                bail!("the ceiling allows {key} of at most {most}, not {value}");
            }
        }
        Ok(())
    }

    fn resolve(&self, _: &Path) -> Result<Arc<dyn Grant>> {
        self.validate().context("invalid limits")?;
        Ok(Arc::new(self.sandbox))
    }
}

impl Grant for Limits {
    fn describe(&self) -> (&'static str, Vec<String>) {
        (
            "limits",
            vec![format!(
                "memory {} MiB, tables {} elements, {} handles, stack {} KiB, CPU {} ms and wall clock {} ms per call, {} calls at once",
                self.memory_mib,
                self.table_elements,
                self.max_handles,
                self.stack_kib,
                self.cpu_ms,
                self.timeout_ms,
                self.concurrent_calls
            )],
        )
    }
}

/// How often the engine's epoch advances while a call runs; the granularity
/// of time limits.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The default stack limit, wasmtime's own default.
pub const DEFAULT_STACK_KIB: u32 = 512;

/// The largest `memory_mib` a plugin may be given: every slot of the
/// runtime's instance pool can hold a memory this large.
pub const MAX_MEMORY_MIB: u64 = 4096;

/// The largest `table_elements` a plugin may be given, for the same reason.
pub const MAX_TABLE_ELEMENTS: u64 = 1_000_000;

/// Core module instances one instance of a plugin may hold: a component
/// built by componentize-py holds 14, one by cargo-component or
/// componentize-js a handful. The engine refuses a component that declares
/// more when it is loaded, and the store's limiter counts them too.
pub const MAX_CORE_INSTANCES: u32 = 64;

/// Linear memories one instance of a plugin may hold (every toolchain
/// resmux knows makes one).
pub const MAX_MEMORIES: u32 = 8;

/// Tables one instance of a plugin may hold (toolchains make one or two).
pub const MAX_TABLES: u32 = 16;

/// Host memory one table element is counted as: wasmtime 48 stores a
/// `funcref` element as one pointer (`FuncTableElem`), and its instance pool
/// gives every table slot 8 bytes an element (`NOMINAL_MAX_TABLE_ELEM_SIZE`
/// on a 64-bit host). The other kinds need features resmux does not enable:
/// `externref` (4 bytes) the `gc` feature, continuations (16) the
/// `stack-switching` one.
pub const TABLE_ELEMENT_BYTES: usize = 8;

/// The range a stack limit must lie in.
const STACK_KIB_RANGE: std::ops::RangeInclusive<u32> = 64..=16_384;

impl Limits {
    pub fn memory_bytes(&self) -> usize {
        usize::try_from(self.memory_mib.saturating_mul(1024 * 1024)).unwrap_or(usize::MAX)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// A limiter for one new store, whose running code is sampled every
    /// [`EPOCH_TICK`].
    pub fn limiter(&self) -> StoreLimiter {
        let tick_ms = u64::try_from(EPOCH_TICK.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        StoreLimiter {
            memory_bytes: self.memory_bytes(),
            memory_in_use: 0,
            tables_in_use: 0,
            table_elements: usize::try_from(self.table_elements).unwrap_or(usize::MAX),
            cpu_ticks_budget: self.cpu_ms.div_ceil(tick_ms),
            cpu_ticks_used: 0,
            deadline: None,
            exceeded: None,
        }
    }
}

/// Refuses memory and table growth past the limits, counts the ticks a call
/// spends in the plugin's code, stops it at its first tick past its time
/// limit, and remembers which limit stopped a call so its error can name
/// it. Memory and tables are the instance's, and share one budget of
/// `memory_bytes`; the CPU budget and the deadline are each call's, renewed
/// by [`StoreLimiter::end_call`] and [`StoreLimiter::begin_call`].
#[derive(Debug)]
pub struct StoreLimiter {
    memory_bytes: usize,
    /// Bytes of all the instance's linear memories together.
    memory_in_use: usize,
    /// Bytes of all the instance's tables together, at
    /// [`TABLE_ELEMENT_BYTES`] an element.
    tables_in_use: usize,
    table_elements: usize,
    /// The ticks each call may spend.
    cpu_ticks_budget: u64,
    /// The ticks the current call has spent.
    cpu_ticks_used: u64,
    /// When the current call's time is up.
    deadline: Option<Instant>,
    exceeded: Option<Exceeded>,
}

/// A limit a call ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    Memory,
    Table,
    Cpu,
    Time,
}

impl StoreLimiter {
    /// The limit the call ran into, if any.
    pub fn exceeded(&self) -> Option<Exceeded> {
        self.exceeded
    }

    /// The CPU time the call's code was charged, in whole ticks.
    pub fn cpu_used(&self) -> Duration {
        EPOCH_TICK.saturating_mul(u32::try_from(self.cpu_ticks_used).unwrap_or(u32::MAX))
    }

    /// The linear memory the instance holds: all it ever grew to, since a
    /// memory never shrinks.
    pub fn memory_in_use(&self) -> usize {
        self.memory_in_use
    }

    /// Ends a call that answered: returns the CPU time it was charged and
    /// gives the next call on the instance a whole budget.
    pub fn end_call(&mut self) -> Duration {
        let used = self.cpu_used();
        self.cpu_ticks_used = 0;
        self.deadline = None;
        self.exceeded = None;
        used
    }

    /// Starts a call that must be over by `deadline`.
    pub fn begin_call(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
    }

    /// Counts one tick of the plugin's code running; false once the CPU
    /// budget is spent or the call's time is up. The caller's own timer
    /// normally ends a call at its time limit; this ends one that nobody
    /// waits for any more, which a file operation held past it.
    pub fn tick(&mut self) -> bool {
        self.cpu_ticks_used += 1;
        let exceeded = if self.cpu_ticks_used > self.cpu_ticks_budget {
            Exceeded::Cpu
        } else if self
            .deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
        {
            Exceeded::Time
        } else {
            return true;
        };
        self.exceeded = Some(exceeded);
        false
    }
}

impl ResourceLimiter for StoreLimiter {
    fn instances(&self) -> usize {
        MAX_CORE_INSTANCES as usize
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES as usize
    }

    fn tables(&self) -> usize {
        MAX_TABLES as usize
    }

    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let memory = self
            .memory_in_use
            .saturating_sub(current)
            .saturating_add(desired);
        let allowed = memory.saturating_add(self.tables_in_use) <= self.memory_bytes;
        if allowed {
            self.memory_in_use = memory;
        } else {
            self.exceeded = Some(Exceeded::Memory);
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            self.exceeded = Some(Exceeded::Table);
            return Ok(false);
        }
        let tables = self
            .tables_in_use
            .saturating_sub(current.saturating_mul(TABLE_ELEMENT_BYTES))
            .saturating_add(desired.saturating_mul(TABLE_ELEMENT_BYTES));
        let allowed = tables.saturating_add(self.memory_in_use) <= self.memory_bytes;
        if allowed {
            self.tables_in_use = tables;
        } else {
            self.exceeded = Some(Exceeded::Memory);
        }
        Ok(allowed)
    }
}

#[cfg(test)]
mod tests {
    use wasmtime::{Engine, Instance, Module, Store};

    use super::*;

    /// A core module with one page of memory, an empty `funcref` table, and
    /// `grow(n)`, which grows the table by `n` elements (`table.grow`) and
    /// returns its old size, or -1 if the growth was refused:
    /// `(module (memory 1) (table 0 funcref) (func (export "grow") (param
    /// i32) (result i32) ref.null func local.get 0 table.grow 0))`.
    #[rustfmt::skip]
    const TABLE_GROWER: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
        0x01, 0x06, 0x01, 0x60, 0x01, 0x7f, 0x01, 0x7f, // types: (i32) -> i32
        0x03, 0x02, 0x01, 0x00, // functions: one, of type 0
        0x04, 0x04, 0x01, 0x70, 0x00, 0x00, // tables: funcref, at least 0
        0x05, 0x03, 0x01, 0x00, 0x01, // memories: at least 1 page
        0x07, 0x08, 0x01, 0x04, b'g', b'r', b'o', b'w', 0x00, 0x00, // export "grow"
        0x0a, 0x0b, 0x01, 0x09, 0x00, // code: one body of 9 bytes, no locals
        // ref.null func, local.get 0, table.grow 0, end
        0xd0, 0x70, 0x20, 0x00, 0xfc, 0x0f, 0x00, 0x0b,
    ];

    /// An instance of [`TABLE_GROWER`] under `limits`, and its `grow`.
    fn table_grower(limits: Limits) -> (Store<StoreLimiter>, wasmtime::TypedFunc<i32, i32>) {
        let engine = Engine::default();
        let module = Module::new(&engine, TABLE_GROWER).unwrap();
        let mut store = Store::new(&engine, limits.limiter());
        store.limiter(|limiter| limiter);
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let grow = instance.get_typed_func(&mut store, "grow").unwrap();
        (store, grow)
    }

    #[test]
    fn tables_and_memories_share_the_memory_limit() {
        let limits = Limits {
            memory_mib: 1,
            table_elements: MAX_TABLE_ELEMENTS,
            ..Limits::default()
        };
        let (mut store, grow) = table_grower(limits);
        // 64 KiB of memory and 100,000 elements of 8 bytes: within 1 MiB.
        assert_eq!(grow.call(&mut store, 100_000).unwrap(), 0);
        assert_eq!(store.data().exceeded(), None);
        // 30,000 more would take the tables past what the memory leaves.
        assert_eq!(grow.call(&mut store, 30_000).unwrap(), -1);
        assert_eq!(store.data().exceeded(), Some(Exceeded::Memory));
        // Within what is left, the table still grows.
        assert_eq!(grow.call(&mut store, 10_000).unwrap(), 100_000);
    }

    #[test]
    fn one_table_is_held_to_its_elements() {
        let limits = Limits {
            table_elements: 1_000,
            ..Limits::default()
        };
        let (mut store, grow) = table_grower(limits);
        assert_eq!(grow.call(&mut store, 1_000).unwrap(), 0);
        assert_eq!(grow.call(&mut store, 1).unwrap(), -1);
        assert_eq!(store.data().exceeded(), Some(Exceeded::Table));
    }

    #[test]
    fn memory_growth_counts_the_tables_already_held() {
        let mut limiter = Limits {
            memory_mib: 1,
            ..Limits::default()
        }
        .limiter();
        assert!(limiter.table_growing(0, 65_536, None).unwrap());
        // Half a MiB of table: half a MiB of memory still fits, no more.
        assert!(limiter.memory_growing(0, 512 * 1024, None).unwrap());
        assert!(
            !limiter
                .memory_growing(512 * 1024, 576 * 1024, None)
                .unwrap()
        );
        assert_eq!(limiter.exceeded(), Some(Exceeded::Memory));
        assert_eq!(limiter.memory_in_use(), 512 * 1024);
    }
}
