//! What the runtime reports about each plugin to the metrics: its calls by
//! operation and outcome, their latency, faults by kind, quarantines, the
//! CPU time and peak memory of its instances, bytes read, instances alive
//! and idle, and, at each scrape, whether it is quarantined now.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use wasmtime::Store;

use super::health::Health;
use crate::contract::ProviderError;
use crate::grants::Sandbox;
use crate::telemetry::metrics;
use crate::telemetry::metrics::{
    Plugin, PluginCall, PluginFault, PluginOperation, PluginQuarantine,
};

/// Why a call faulted, as the metrics count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    Trap,
    Timeout,
    Cpu,
    Memory,
    Table,
    Stack,
    Handles,
    /// The host could not finish the call: the thread it ran on ended.
    Host,
}

impl FaultKind {
    fn label(self) -> &'static str {
        match self {
            Self::Trap => "trap",
            Self::Timeout => "timeout",
            Self::Cpu => "cpu",
            Self::Memory => "memory",
            Self::Table => "table",
            Self::Stack => "stack",
            Self::Handles => "handles",
            Self::Host => "host",
        }
    }

    /// The outcome of a call that ended in this fault.
    fn outcome_of(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Cpu | Self::Memory | Self::Table | Self::Stack | Self::Handles => "limit",
            Self::Trap | Self::Host => "fault",
        }
    }
}

/// How one call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Answered,
    /// With an error the plugin, or the host refusing it, answered; the
    /// outcome label.
    Refused(&'static str),
    Faulted(FaultKind),
    Quarantined,
}

impl Ended {
    /// The outcome label: `ok`, how the call was refused, the kind of
    /// fault, or `quarantined`.
    pub fn outcome(self) -> &'static str {
        match self {
            Self::Answered => "ok",
            Self::Refused(outcome) => outcome,
            Self::Faulted(kind) => kind.outcome_of(),
            Self::Quarantined => "quarantined",
        }
    }

    /// A call that ended with `error`, no fault.
    pub fn refused(error: &ProviderError) -> Self {
        Self::Refused(match error {
            ProviderError::NotFound(_) => "not-found",
            ProviderError::InvalidInput(_) => "invalid",
            ProviderError::Denied(_) => "denied",
            ProviderError::Unavailable(_) => "unavailable",
            ProviderError::Internal(_) => "internal",
            ProviderError::Fault(_) => "fault",
        })
    }
}

/// The operations a plugin is called for, in the order of
/// [`Meter::answered`].
const OPERATIONS: [&str; 7] = [
    "about",
    "init",
    "list",
    "templates",
    "read",
    "complete",
    "changes",
];

/// One plugin's figures. It holds the handles of the plugin's series, so a
/// call clones no label: those of its instances from the start, those of
/// the calls that answered (by far the most) per operation from the first
/// such call.
pub struct Meter {
    plugin: Plugin,
    instance: InstanceFigures,
    read_bytes: Counter,
    idle: Gauge,
    stuck: Gauge,
    answered: [OnceLock<(Counter, Histogram)>; OPERATIONS.len()],
}

/// The series every instance of a plugin adds to.
#[derive(Clone)]
struct InstanceFigures {
    alive: Gauge,
    cpu: Counter<f64>,
    peak_memory: Gauge,
}

impl InstanceFigures {
    fn add(&self, cpu: Duration, memory: usize) {
        if !cpu.is_zero() {
            self.cpu.inc_by(cpu.as_secs_f64());
        }
        let memory = i64::try_from(memory).unwrap_or(i64::MAX);
        self.peak_memory
            .inner()
            .fetch_max(memory, Ordering::Relaxed);
    }
}

impl Meter {
    /// The figures of `name`, whose quarantine is reported while `health`
    /// lives.
    pub fn new(name: &str, health: &Arc<Health>) -> Self {
        QUARANTINED.watch(name, health);
        let plugin = Plugin {
            plugin: name.to_owned(),
        };
        let metrics = metrics();
        Self {
            instance: InstanceFigures {
                alive: metrics.plugin_instances.get_or_create(&plugin).clone(),
                cpu: metrics.plugin_cpu.get_or_create(&plugin).clone(),
                peak_memory: metrics.plugin_peak_memory.get_or_create(&plugin).clone(),
            },
            read_bytes: metrics.plugin_read_bytes.get_or_create(&plugin).clone(),
            idle: metrics.plugin_idle_instances.get_or_create(&plugin).clone(),
            stuck: metrics.plugin_stuck_calls.get_or_create(&plugin).clone(),
            answered: Default::default(),
            plugin,
        }
    }

    /// Counts one call of `operation`.
    pub fn call(&self, operation: &'static str, ended: Ended, took: Duration) {
        if ended == Ended::Answered
            && let Some(index) = OPERATIONS.iter().position(|known| *known == operation)
        {
            let (calls, duration) = self.answered[index].get_or_init(|| {
                (
                    self.calls(operation, ended.outcome()),
                    self.durations(operation),
                )
            });
            calls.inc();
            duration.observe(took.as_secs_f64());
            return;
        }
        if let Ended::Faulted(kind) = ended {
            metrics()
                .plugin_faults
                .get_or_create(&PluginFault {
                    plugin: self.plugin.plugin.clone(),
                    kind: kind.label(),
                })
                .inc();
        }
        self.calls(operation, ended.outcome()).inc();
        if ended != Ended::Quarantined {
            self.durations(operation).observe(took.as_secs_f64());
        }
    }

    /// The counter of the plugin's calls of `operation` that ended in
    /// `outcome`.
    fn calls(&self, operation: &'static str, outcome: &'static str) -> Counter {
        metrics()
            .plugin_calls
            .get_or_create(&PluginCall {
                plugin: self.plugin.plugin.clone(),
                operation,
                outcome,
            })
            .clone()
    }

    /// The histogram of how long the plugin's calls of `operation` took.
    fn durations(&self, operation: &'static str) -> Histogram {
        metrics()
            .plugin_call_duration
            .get_or_create(&PluginOperation {
                plugin: self.plugin.plugin.clone(),
                operation,
            })
            .clone()
    }

    /// Counts a quarantine that just started, of a path or of the plugin.
    pub fn quarantine(&self, of_path: bool) {
        metrics()
            .plugin_quarantines
            .get_or_create(&PluginQuarantine {
                plugin: self.plugin.plugin.clone(),
                scope: if of_path { "path" } else { "plugin" },
            })
            .inc();
    }

    /// Counts the bytes a read returned.
    pub fn read(&self, bytes: u64) {
        self.read_bytes.inc_by(bytes);
    }

    /// The gauge of the plugin's idle instances.
    pub fn idle(&self) -> Gauge {
        self.idle.clone()
    }

    /// The gauge of the plugin's calls stuck past their time limit.
    pub fn stuck(&self) -> Gauge {
        self.stuck.clone()
    }

    /// A store counted among the plugin's instances until dropped. The CPU
    /// time and memory of each call on it are added to the plugin's figures
    /// when the call ends, or when the store is dropped in the middle of one.
    pub fn store(&self, store: Store<Sandbox>) -> MeteredStore {
        self.instance.alive.inc();
        MeteredStore {
            store,
            figures: self.instance.clone(),
        }
    }
}

/// A store whose figures reach the metrics at the end of each call on it and
/// when it is dropped, however its last call ended.
pub struct MeteredStore {
    pub store: Store<Sandbox>,
    figures: InstanceFigures,
}

impl MeteredStore {
    /// Ends a call that answered: adds its figures and renews the budgets
    /// for the next call on the instance.
    pub fn end_call(&mut self) {
        let cpu = self.store.data_mut().end_call();
        let memory = self.store.data().limits_reached().memory_in_use();
        self.figures.add(cpu, memory);
    }
}

impl Drop for MeteredStore {
    fn drop(&mut self) {
        let limiter = self.store.data().limits_reached();
        self.figures
            .add(limiter.cpu_used(), limiter.memory_in_use());
        self.figures.alive.dec();
    }
}

/// The plugins loaded now, whose quarantine each scrape reports.
static QUARANTINED: LazyLock<Arc<Quarantined>> = LazyLock::new(|| {
    let quarantined = Arc::<Quarantined>::default();
    metrics().register_collector(quarantined.clone());
    quarantined
});

#[derive(Default)]
struct Quarantined {
    plugins: Mutex<Vec<(Plugin, Weak<Health>)>>,
}

impl Quarantined {
    /// Reports `health` while it lives; plugins gone are forgotten here too,
    /// so a server that is never scraped keeps no more than it runs.
    fn watch(&self, name: &str, health: &Arc<Health>) {
        let plugin = Plugin {
            plugin: name.to_owned(),
        };
        let mut plugins = self.lock();
        plugins.retain(|(_, health)| health.strong_count() > 0);
        plugins.push((plugin, Arc::downgrade(health)));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Plugin, Weak<Health>)>> {
        self.plugins.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Quarantined {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "Quarantined({} plugins)", self.lock().len())
    }
}

impl Collector for Quarantined {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let mut plugins = self.lock();
        plugins.retain(|(_, health)| health.strong_count() > 0);
        // A plugin replaced live is reported once, as its newest load.
        let mut seen = std::collections::HashMap::new();
        for (plugin, health) in plugins.iter() {
            if let Some(health) = health.upgrade() {
                seen.insert(plugin.clone(), health.quarantine_left(None).is_some());
            }
        }
        let mut family = encoder.encode_descriptor(
            "resmux_plugin_quarantined",
            "Whether the plugin as a whole is quarantined now (1) or serving (0)",
            None,
            MetricType::Gauge,
        )?;
        for (plugin, quarantined) in seen {
            ConstGauge::new(i64::from(quarantined)).encode(family.encode_family(&plugin)?)?;
        }
        Ok(())
    }
}
