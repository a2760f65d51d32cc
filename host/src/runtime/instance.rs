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
//! - it holds at most [`MAX_IDLE_HANDLES`] host resources, and the host's
//!   descriptor budget is more than half free;
//! - its plugin keeps fewer idle instances than its `concurrent_calls`, and
//!   the process fewer than [`MAX_IDLE`].
//!
//! An idle instance keeps one descriptor of the budget per resource it holds,
//! and is dropped after [`IDLE_FOR`] unused, so an idle plugin soon costs
//! nothing. The next call on it starts with whole CPU and output budgets
//! ([`MeteredStore::end_call`]) and a new deadline.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::OwnedSemaphorePermit;

use super::bindings::{Guest, Plugin};
use super::handles::HandleBudget;
use super::meter::MeteredStore;

/// How long an idle instance is kept unused.
pub const IDLE_FOR: Duration = Duration::from_secs(10);

/// The most host resources an instance may hold and still be kept idle.
pub const MAX_IDLE_HANDLES: usize = 16;

/// The most idle instances the process keeps, over every plugin: a quarter
/// of an engine's instance pool.
pub const MAX_IDLE: usize = 256;

/// Idle instances kept now, over every plugin.
static IDLE_IN_PROCESS: AtomicUsize = AtomicUsize::new(0);

/// One instance of a plugin.
pub struct Instance {
    pub metered: MeteredStore,
    exports: Plugin,
    /// Its share of the host's descriptor budget: the plugin's whole
    /// `max_handles` during a call, one per resource it holds while idle.
    handles: OwnedSemaphorePermit,
    /// Whether `init` ran on it.
    pub initialised: bool,
}

impl Instance {
    pub fn new(metered: MeteredStore, exports: Plugin, handles: OwnedSemaphorePermit) -> Self {
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

    /// Readies it for a call: `more` descriptors of the budget join those it
    /// holds, and the plugin's code may run one epoch tick before it is
    /// charged (see `Shared::new_store`).
    pub fn begin_call(&mut self, more: OwnedSemaphorePermit) {
        self.handles.merge(more);
        self.metered.store.set_epoch_deadline(1);
    }

    /// Its store and its exports, for one call.
    pub fn parts(&mut self) -> (&mut wasmtime::Store<crate::policy::Sandbox>, &Guest) {
        (
            &mut self.metered.store,
            self.exports.resmux_provider_provider(),
        )
    }
}

/// The idle instances of one plugin, newest last.
pub struct Idle {
    kept: Mutex<Vec<(Instance, Instant)>>,
    /// The most it keeps: the plugin's `concurrent_calls`.
    most: usize,
    /// Whether a task is dropping the instances left unused too long.
    expiring: AtomicBool,
    gauge: Gauge,
}

impl Idle {
    pub fn new(most: usize, gauge: Gauge) -> Self {
        Self {
            kept: Mutex::new(Vec::new()),
            most,
            expiring: AtomicBool::new(false),
            gauge,
        }
    }

    /// The idle instance used last, if one is kept.
    pub fn take(&self) -> Option<Instance> {
        let (instance, _) = self.lock().pop()?;
        self.gauge.dec();
        IDLE_IN_PROCESS.fetch_sub(1, Ordering::Relaxed);
        Some(instance)
    }

    /// Keeps `instance`, whose call answered, for a later call if it
    /// qualifies (see the module's comment); drops it otherwise.
    pub fn keep(self: &Arc<Self>, mut instance: Instance, budget: &HandleBudget) {
        if !instance.initialised {
            return;
        }
        instance.metered.end_call();
        let held = instance.metered.store.data_mut().held_resources().max(1);
        if held > MAX_IDLE_HANDLES {
            return;
        }
        let spare = instance.handles.num_permits().saturating_sub(held);
        drop(instance.handles.split(spare));
        if budget.free() <= budget.total() / 2 {
            return;
        }
        if IDLE_IN_PROCESS.fetch_add(1, Ordering::Relaxed) >= MAX_IDLE {
            IDLE_IN_PROCESS.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let mut kept = self.lock();
        if kept.len() >= self.most {
            drop(kept);
            IDLE_IN_PROCESS.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        kept.push((instance, Instant::now()));
        drop(kept);
        self.gauge.inc();
        if !self.expiring.swap(true, Ordering::AcqRel) {
            tokio::spawn(expire(Arc::downgrade(self)));
        }
    }

    /// Drops the instances unused for [`IDLE_FOR`]; true once none is left
    /// (and no task expires them any more).
    fn expire_unused(&self) -> bool {
        let mut kept = self.lock();
        let before = kept.len();
        kept.retain(|(_, since)| since.elapsed() < IDLE_FOR);
        let dropped = before - kept.len();
        let none_left = kept.is_empty();
        if none_left {
            self.expiring.store(false, Ordering::Release);
        }
        drop(kept);
        self.forget(dropped);
        none_left
    }

    /// Takes `count` dropped instances off the idle figures.
    fn forget(&self, count: usize) {
        self.gauge.dec_by(i64::try_from(count).unwrap_or(i64::MAX));
        IDLE_IN_PROCESS.fetch_sub(count, Ordering::Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Vec<(Instance, Instant)>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The plugin is gone: its idle instances go with it.
impl Drop for Idle {
    fn drop(&mut self) {
        let count = self.lock().len();
        self.forget(count);
    }
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
