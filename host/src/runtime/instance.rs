//! A plugin's instances: one instance (its metered store, its exports, its
//! share of the host's descriptor budget, whether it ran `init`), and the
//! idle instances a plugin keeps for its next calls.
//!
//! The contract lets the host reuse an idle instance (`wit/provider.wit`: "or
//! reuses an idle one"; a plugin must not rely on state surviving between
//! calls), and reuse saves the instantiation, `init` and teardown that are
//! most of the cost of a small call. An instance is kept only when:
//! - its call answered: an instance whose call trapped, ran into a limit,
//!   timed out or was cancelled is dropped with its store;
//! - it ran `init` (one made for `about` did not);
//! - it holds at most [`MAX_IDLE_HANDLES`] host resources, each of a kind
//!   that cannot change meaning while it waits (its granted directories
//!   themselves, its standard streams, header fields, pollables: see
//!   `grants::Sandbox::resources_between_calls`; no open file, no file
//!   stream, no socket, no HTTP traffic), and the host's descriptor budget
//!   is more than half free;
//! - its plugin keeps fewer idle instances than its `concurrent_calls`, and
//!   the process fewer than [`MAX_IDLE`], holding at most
//!   [`MAX_IDLE_MEMORY`] of linear memory together.
//!
//! An idle instance keeps one descriptor of the budget per resource it holds
//! and per preopened directory, and is dropped after [`IDLE_FOR`] unused, so
//! an idle plugin soon costs nothing; all of them are dropped at once when a
//! call finds the descriptor budget or the instance pool short
//! ([`drop_every_idle_instance`]). The next call on one starts with whole CPU
//! and output budgets ([`MeteredStore::end_call`]) and a new deadline.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use tokio::runtime::Handle;
use tokio::sync::OwnedSemaphorePermit;

use super::bindings::{Guest, Plugin};
use super::handles::HandleBudget;
use super::locate::LocateFunc;
use super::meter::MeteredStore;

/// How long an idle instance is kept unused.
const IDLE_FOR: Duration = Duration::from_secs(10);

/// The most host resources an instance may hold and still be kept idle.
const MAX_IDLE_HANDLES: usize = 16;

/// The most idle instances the process keeps, over every plugin: a quarter
/// of an engine's instance pool.
const MAX_IDLE: usize = 256;

/// The most linear memory idle instances hold together, over every plugin.
const MAX_IDLE_MEMORY: usize = 1 << 30;

/// Idle instances kept now, over every plugin.
static IDLE_IN_PROCESS: AtomicUsize = AtomicUsize::new(0);

/// The linear memory idle instances hold now, over every plugin.
static IDLE_MEMORY: AtomicUsize = AtomicUsize::new(0);

/// What a call may call on an instance: the contract's functions, and
/// `locate` on an instance made to run it.
pub struct Exports {
    plugin: Plugin,
    locate: Option<LocateFunc>,
}

impl Exports {
    /// The exports of an instance; `locate` only on one made to run it.
    pub fn new(plugin: Plugin, locate: Option<LocateFunc>) -> Self {
        Self { plugin, locate }
    }

    /// The contract's functions.
    pub fn provider(&self) -> &Guest {
        self.plugin.resmux_provider_provider()
    }

    /// `locate`, on an instance made to run it.
    pub fn locate(&self) -> Option<&LocateFunc> {
        self.locate.as_ref()
    }
}

/// One instance of a plugin.
pub struct Instance {
    pub metered: MeteredStore,
    exports: Exports,
    /// Its share of the host's descriptor budget: the plugin's `max_handles`
    /// and its preopened directories during a call; while idle, one per
    /// resource it holds and per preopened directory.
    handles: OwnedSemaphorePermit,
    /// Whether `init` ran on it.
    pub initialised: bool,
}

impl Instance {
    pub fn new(metered: MeteredStore, exports: Exports, handles: OwnedSemaphorePermit) -> Self {
        Self {
            metered,
            exports,
            handles,
            initialised: false,
        }
    }

    /// The descriptors of the budget it holds.
    pub fn held_handles(&self) -> usize {
        self.handles.num_permits()
    }

    /// Readies it for a call that must be over by `deadline`: `more`
    /// descriptors of the budget join those it holds, and the plugin's code
    /// may run one epoch tick before it is charged (see `Shared::new_store`).
    pub fn begin_call(&mut self, more: OwnedSemaphorePermit, deadline: Instant) {
        self.handles.merge(more);
        self.metered.store.set_epoch_deadline(1);
        self.metered.store.data_mut().limiter().begin_call(deadline);
    }

    /// Drops it, store and all, and hands back its share of the descriptor
    /// budget, for a fresh instance in its place.
    pub fn into_handles(self) -> OwnedSemaphorePermit {
        self.handles
    }

    /// Its store and its exports, for one call.
    pub fn parts(&mut self) -> (&mut wasmtime::Store<crate::grants::Sandbox>, &Exports) {
        (&mut self.metered.store, &self.exports)
    }
}

/// An idle instance, since when, and the linear memory it holds.
struct Kept {
    instance: Instance,
    since: Instant,
    memory: usize,
}

/// The idle instances of one plugin, newest last.
pub struct Idle {
    kept: Mutex<Vec<Kept>>,
    /// The most it keeps: the plugin's `concurrent_calls`.
    most: usize,
    /// Host descriptors each instance holds outside its resource table.
    preopens: usize,
    /// Whether dropping an instance may block (it holds granted files), so
    /// it is dropped on a thread of its own rather than a runtime worker.
    may_block: bool,
    /// The runtime it was made in (the host's), whose blocking threads drop
    /// its instances, whichever runtime a call that lets them go runs in (a
    /// plugin's own, `super::placement`).
    runtime: Option<Handle>,
    /// Whether a task is dropping the instances left unused too long.
    expiring: AtomicBool,
    gauge: Gauge,
}

/// Every plugin's idle instances, to drop them all when the host runs
/// short of descriptors or of instance slots.
static EVERY_IDLE: Mutex<Vec<Weak<Idle>>> = Mutex::new(Vec::new());

/// Drops every idle instance of every plugin: a call needs what they hold.
pub fn drop_every_idle_instance() {
    let every: Vec<Arc<Idle>> = lock(&EVERY_IDLE).iter().filter_map(Weak::upgrade).collect();
    for idle in every {
        let all = std::mem::take(&mut *lock(&idle.kept));
        idle.release(all);
    }
}

impl Idle {
    pub fn new(most: usize, preopens: u32, may_block: bool, gauge: Gauge) -> Arc<Self> {
        let idle = Arc::new(Self {
            kept: Mutex::new(Vec::new()),
            most,
            preopens: preopens as usize,
            may_block,
            runtime: Handle::try_current().ok(),
            expiring: AtomicBool::new(false),
            gauge,
        });
        let mut every = lock(&EVERY_IDLE);
        every.retain(|idle| idle.strong_count() > 0);
        every.push(Arc::downgrade(&idle));
        idle
    }

    /// The idle instance used last, if one is kept.
    pub fn take(&self) -> Option<Instance> {
        let taken = lock(&self.kept).pop()?;
        self.forget(std::slice::from_ref(&taken));
        Some(taken.instance)
    }

    /// Keeps `instance`, whose call answered, for a later call if it
    /// qualifies (see the module's comment); drops it otherwise.
    pub fn keep(self: &Arc<Self>, mut instance: Instance, budget: &HandleBudget) {
        if !instance.initialised {
            return;
        }
        instance.metered.end_call();
        let data = instance.metered.store.data_mut();
        let Some(resources) = data.resources_between_calls() else {
            return;
        };
        let memory = data.limits_reached().memory_in_use();
        if resources > MAX_IDLE_HANDLES {
            return;
        }
        let held = (resources + self.preopens).max(1);
        let spare = instance.handles.num_permits().saturating_sub(held);
        drop(instance.handles.split(spare));
        if budget.free() <= budget.total() / 2 {
            return;
        }
        let mut kept = lock(&self.kept);
        if kept.len() >= self.most || !reserve(&IDLE_IN_PROCESS, 1, MAX_IDLE) {
            return;
        }
        if !reserve(&IDLE_MEMORY, memory, MAX_IDLE_MEMORY) {
            IDLE_IN_PROCESS.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        kept.push(Kept {
            instance,
            since: Instant::now(),
            memory,
        });
        self.gauge.inc();
        drop(kept);
        if !self.expiring.swap(true, Ordering::AcqRel) {
            tokio::spawn(expire(Arc::downgrade(self)));
        }
    }

    /// Drops the instances unused for [`IDLE_FOR`]; true once none is left
    /// (and no task expires them any more).
    fn expire_unused(&self) -> bool {
        let mut kept = lock(&self.kept);
        let (expired, fresh): (Vec<Kept>, Vec<Kept>) = std::mem::take(&mut *kept)
            .into_iter()
            .partition(|kept| kept.since.elapsed() >= IDLE_FOR);
        *kept = fresh;
        let none_left = kept.is_empty();
        if none_left {
            self.expiring.store(false, Ordering::Release);
        }
        drop(kept);
        self.release(expired);
        none_left
    }

    /// Drops instances no longer kept, on a thread of their own if dropping
    /// them may block.
    fn release(&self, gone: Vec<Kept>) {
        if gone.is_empty() {
            return;
        }
        self.forget(&gone);
        if self.may_block {
            let drop_apart = move || drop(gone);
            match &self.runtime {
                Some(runtime) => drop(runtime.spawn_blocking(drop_apart)),
                None => drop(tokio::task::spawn_blocking(drop_apart)),
            }
        }
    }

    /// Takes instances no longer kept off the idle figures.
    fn forget(&self, gone: &[Kept]) {
        let memory: usize = gone.iter().map(|kept| kept.memory).sum();
        self.gauge
            .dec_by(i64::try_from(gone.len()).unwrap_or(i64::MAX));
        IDLE_IN_PROCESS.fetch_sub(gone.len(), Ordering::Relaxed);
        IDLE_MEMORY.fetch_sub(memory, Ordering::Relaxed);
    }
}

/// The plugin is gone: its idle instances go with it.
impl Drop for Idle {
    fn drop(&mut self) {
        let all = std::mem::take(&mut *lock(&self.kept));
        self.forget(&all);
    }
}

/// Adds `amount` to `total` unless that would pass `most`.
fn reserve(total: &AtomicUsize, amount: usize, most: usize) -> bool {
    total
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
            now.checked_add(amount).filter(|after| *after <= most)
        })
        .is_ok()
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drops `idle`'s unused instances every half [`IDLE_FOR`] until none is
/// left or the plugin is gone.
async fn expire(idle: Weak<Idle>) {
    loop {
        tokio::time::sleep(IDLE_FOR / 2).await;
        let Some(idle) = idle.upgrade() else {
            return;
        };
        if idle.expire_unused() {
            return;
        }
    }
}
