//! The metrics every layer records into: one process-wide registry of
//! Prometheus families ([`metrics`]), encoded on demand for `/metrics` in
//! the Prometheus text format or OpenMetrics.
//!
//! Label sets stay bounded: plugins and clients are named by the operator
//! (a tokens file's clients by name, every client of an OAuth issuer as
//! `oauth`, the client of stdio or of open HTTP as `local`), and operations,
//! outcomes and MCP methods come from fixed lists (a method resmux does not
//! serve is `other`). No label ever carries a URI, a path, a token or an
//! OAuth subject.

use std::sync::atomic::AtomicU64;
use std::sync::{LazyLock, Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry, Unit};

/// Every family resmux records, and the registry that encodes them.
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Calls into plugins by operation and outcome.
    pub plugin_calls: Family<PluginCall, Counter>,
    /// How long plugin calls took, by operation.
    pub plugin_call_duration: Family<PluginOperation, Histogram, fn() -> Histogram>,
    /// Faults by kind.
    pub plugin_faults: Family<PluginFault, Counter>,
    /// Quarantines started, of the whole plugin or of one path.
    pub plugin_quarantines: Family<PluginQuarantine, Counter>,
    /// CPU time the plugin's code used, counted in epoch ticks.
    pub plugin_cpu: Family<Plugin, Counter<f64>>,
    /// The most linear memory one instance of the plugin has held.
    pub plugin_peak_memory: Family<Plugin, Gauge>,
    /// Bytes of content the plugin's reads returned.
    pub plugin_read_bytes: Family<Plugin, Counter>,
    /// Instances of the plugin alive now, in a call or idle.
    pub plugin_instances: Family<Plugin, Gauge>,
    /// Instances of the plugin kept idle for its next calls.
    pub plugin_idle_instances: Family<Plugin, Gauge>,
    /// Calls of the plugin stuck past their time limit, whose work goes on.
    pub plugin_stuck_calls: Family<Plugin, Gauge>,
    /// 1 for the tier of compiled code the plugin runs on now, 0 for the
    /// others.
    pub plugin_tier: Family<PluginTier, Gauge>,
    /// How long each tier of the plugin's code took to compile, or to load
    /// from the compile cache.
    pub plugin_compile_seconds: Family<PluginTier, Gauge<f64, AtomicU64>>,
    /// Instance slots the runtime's pools hold (0 with on-demand allocation).
    pub instance_pool_capacity: Gauge,
    /// MCP requests and how long they took (OpenTelemetry MCP semantic
    /// conventions, `mcp.server.operation.duration`).
    pub mcp_duration: Family<McpOperation, Histogram, fn() -> Histogram>,
    /// MCP requests by client (`oauth` for every client of an issuer).
    pub client_requests: Family<ClientMethod, Counter>,
    /// Response cache lookups answered from the cache, by kind.
    pub cache_hits: Family<CacheKind, Counter>,
    /// Response cache lookups that went on to the namespace, by kind.
    pub cache_misses: Family<CacheKind, Counter>,
    /// Cached answers dropped to make room or gone stale.
    pub cache_evictions: Counter,
    /// MCP sessions open: initialized over stdio or legacy HTTP.
    pub sessions: Gauge,
    /// `subscriptions/listen` streams open.
    pub listen_streams: Gauge,
    /// Resources followed, summed over every session and stream.
    pub subscriptions: Gauge,
    /// Reads refused by a client's rate limit (`oauth` for every client of
    /// an issuer).
    pub rate_limited: Family<ClientLabel, Counter>,
    /// Audit lines that could not be written.
    pub audit_write_failures: Counter,
    /// Audit lines dropped because the audit log did not keep up (outside
    /// locked mode, where the request waits and is refused instead).
    pub audit_lines_dropped: Counter,
    /// Times the shared rate limit store did not answer a read.
    pub rate_limit_store_errors: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Plugin {
    pub plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginOperation {
    pub plugin: String,
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginCall {
    pub plugin: String,
    pub operation: &'static str,
    /// `ok`, `not-found`, `invalid`, `denied`, `unavailable`, `internal`,
    /// `fault`, `timeout`, `limit` or `quarantined`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginFault {
    pub plugin: String,
    /// `trap`, `timeout`, `cpu`, `memory`, `table`, `stack`, `handles` or
    /// `host`.
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginTier {
    pub plugin: String,
    /// `baseline`, `optimizing` or `optimized`.
    pub tier: &'static str,
}

impl PluginTier {
    pub fn new(plugin: &str, tier: &'static str) -> Self {
        Self {
            plugin: plugin.to_owned(),
            tier,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginQuarantine {
    pub plugin: String,
    /// `plugin` or `path`.
    pub scope: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct McpOperation {
    pub mcp_method_name: &'static str,
    /// The JSON-RPC error code of a failed request; empty when it succeeded.
    pub error_type: Option<String>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientMethod {
    pub client: String,
    pub mcp_method_name: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClientLabel {
    pub client: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheKind {
    /// `read` or `page`.
    pub kind: &'static str,
}

/// Latency buckets, in seconds: 100 µs to 10 s.
const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Registers metrics as they are made.
struct Registering<'a>(&'a mut Registry);

impl Registering<'_> {
    /// `metric`, registered under `name` (the text format adds `_total` to
    /// a counter and the unit's suffix).
    fn metric<M: Metric + Clone>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        metric: M,
    ) -> M {
        match unit {
            Some(unit) => self.0.register_with_unit(name, help, unit, metric.clone()),
            None => self.0.register(name, help, metric.clone()),
        }
        metric
    }
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::register);
    &METRICS
}

impl Metrics {
    /// Every family, each made and registered under its name in one step.
    fn register() -> Self {
        let mut registry = Registry::default();
        let mut add = Registering(&mut registry);
        let metrics = Self {
            plugin_calls: add.metric(
                "resmux_plugin_calls",
                "Calls into a plugin, by operation and outcome",
                None,
                Family::default(),
            ),
            plugin_call_duration: add.metric(
                "resmux_plugin_call_duration",
                "How long calls into a plugin took, queueing included",
                Some(Unit::Seconds),
                Family::new_with_constructor(latency_histogram),
            ),
            plugin_faults: add.metric(
                "resmux_plugin_faults",
                "Faults of a plugin, by kind",
                None,
                Family::default(),
            ),
            plugin_quarantines: add.metric(
                "resmux_plugin_quarantines",
                "Quarantines started, of the whole plugin or of one path or argument",
                None,
                Family::default(),
            ),
            plugin_cpu: add.metric(
                "resmux_plugin_cpu",
                "CPU time the plugin's code used, as counted against its cpu_ms budget (10 ms ticks)",
                Some(Unit::Seconds),
                Family::default(),
            ),
            plugin_peak_memory: add.metric(
                "resmux_plugin_peak_memory",
                "The most linear memory one instance of the plugin has held",
                Some(Unit::Bytes),
                Family::default(),
            ),
            plugin_read_bytes: add.metric(
                "resmux_plugin_read",
                "Content the plugin's reads returned",
                Some(Unit::Bytes),
                Family::default(),
            ),
            plugin_instances: add.metric(
                "resmux_plugin_instances",
                "Instances of the plugin alive now, in a call or idle",
                None,
                Family::default(),
            ),
            plugin_idle_instances: add.metric(
                "resmux_plugin_idle_instances",
                "Instances of the plugin kept idle for its next calls",
                None,
                Family::default(),
            ),
            plugin_stuck_calls: add.metric(
                "resmux_plugin_stuck_calls",
                "Calls of the plugin stuck past their time limit, their work still running (a file operation holds it)",
                None,
                Family::default(),
            ),
            plugin_tier: add.metric(
                "resmux_plugin_tier",
                "1 for the tier of compiled code the plugin runs on now (baseline, optimizing: baseline while Cranelift compiles, optimized), 0 for the others",
                None,
                Family::default(),
            ),
            plugin_compile_seconds: add.metric(
                "resmux_plugin_compile",
                "How long each tier of the plugin's code (baseline: Winch, optimized: Cranelift) took to compile or to load from the compile cache",
                Some(Unit::Seconds),
                Family::default(),
            ),
            instance_pool_capacity: add.metric(
                "resmux_instance_pool_capacity",
                "Instance slots the runtime's pools hold (0: instances are allocated on demand)",
                None,
                Gauge::default(),
            ),
            mcp_duration: add.metric(
                "mcp_server_operation_duration",
                "MCP requests and how long they took (OpenTelemetry MCP semantic conventions, status Development)",
                Some(Unit::Seconds),
                Family::new_with_constructor(latency_histogram),
            ),
            client_requests: add.metric(
                "resmux_client_requests",
                "MCP requests by client and method",
                None,
                Family::default(),
            ),
            cache_hits: add.metric(
                "resmux_response_cache_hits",
                "Response cache lookups answered from the cache",
                None,
                Family::default(),
            ),
            cache_misses: add.metric(
                "resmux_response_cache_misses",
                "Response cache lookups that went on to the plugins",
                None,
                Family::default(),
            ),
            cache_evictions: add.metric(
                "resmux_response_cache_evictions",
                "Cached answers dropped to make room or gone stale",
                None,
                Counter::default(),
            ),
            sessions: add.metric("resmux_sessions", "MCP sessions open", None, Gauge::default()),
            listen_streams: add.metric(
                "resmux_listen_streams",
                "subscriptions/listen streams open",
                None,
                Gauge::default(),
            ),
            subscriptions: add.metric(
                "resmux_subscriptions",
                "Resources followed, over every session and listen stream",
                None,
                Gauge::default(),
            ),
            rate_limited: add.metric(
                "resmux_rate_limited",
                "Reads refused by a client's rate limit",
                None,
                Family::default(),
            ),
            audit_write_failures: add.metric(
                "resmux_audit_write_failures",
                "Audit log lines that could not be written",
                None,
                Counter::default(),
            ),
            audit_lines_dropped: add.metric(
                "resmux_audit_lines_dropped",
                "Audit log lines dropped because the audit log did not keep up (never in locked mode, where the request is refused instead)",
                None,
                Counter::default(),
            ),
            rate_limit_store_errors: add.metric(
                "resmux_rate_limit_store_errors",
                "Times the rate limit store shared by replicas did not answer a read (the replica then decides alone for a second)",
                None,
                Counter::default(),
            ),
            registry: Mutex::default(),
        };
        *metrics
            .registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = registry;
        metrics
    }

    /// Adds figures read at each scrape.
    pub fn register_collector(&self, collector: impl Collector) {
        self.registry().register_collector(Box::new(collector));
    }

    /// Everything, in the Prometheus text format (0.0.4), or in OpenMetrics
    /// when `openmetrics` is set.
    pub fn encode(&self, openmetrics: bool) -> String {
        let registry = self.registry();
        let mut text = String::new();
        let encoded = if openmetrics {
            prometheus_client::encoding::text::encode(&mut text, &registry)
        } else {
            prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
        };
        encoded.expect("writing to a String never fails");
        text
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
