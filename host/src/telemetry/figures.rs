//! Per-plugin figures between two samples of the metrics (what `resmux top`
//! and the console show): calls per second, p50 and p99 latency and faults
//! over the interval, CPU used per second, instances alive and idle, peak
//! memory, faults by kind since the start, and whether the plugin is
//! quarantined. A sample is Prometheus text, parsed: scraped from a server
//! (`top`), or encoded from this process's own registry (the console), so
//! both read the very families `/metrics` serves.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Result;
use prometheus_parse::{HistogramCount, Scrape, Value};

/// The metrics at one moment.
pub struct Sample {
    scrape: Scrape,
    pub at: Instant,
}

impl Sample {
    /// The sample `text` (Prometheus text) gives, taken now.
    pub fn parse(text: &str) -> Result<Self> {
        let scrape = Scrape::parse(text.lines().map(|line| Ok(line.to_owned())))?;
        Ok(Self {
            scrape,
            at: Instant::now(),
        })
    }

    /// This process's own metrics, now.
    pub fn own() -> Self {
        let text = super::metrics().encode(false);
        // The registry always encodes Prometheus text.
        Self::parse(&text).unwrap_or_else(|_| Self {
            scrape: Scrape {
                docs: Default::default(),
                samples: Vec::new(),
            },
            at: Instant::now(),
        })
    }
}

/// What one plugin did between two samples, and is now.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Row {
    pub calls_per_second: f64,
    /// The latency buckets the median and the 99th percentile fell in;
    /// none without calls.
    pub p50: Option<Latency>,
    pub p99: Option<Latency>,
    /// Faults over the interval.
    pub faults: f64,
    /// Faults since the start, by kind (`trap`, `timeout`, `cpu`, …).
    pub faults_by_kind: BTreeMap<String, f64>,
    /// CPU seconds the plugin's code used per second of the interval.
    pub cpu_per_second: f64,
    pub instances: f64,
    pub idle_instances: f64,
    /// The most linear memory one instance has held.
    pub peak_memory_bytes: f64,
    pub quarantined: bool,
}

/// A latency as histogram buckets tell it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Latency {
    /// At most this many seconds: a bucket's bound.
    AtMost(f64),
    /// More than the last bucket's bound, in seconds.
    Beyond(f64),
}

impl std::fmt::Display for Latency {
    /// `≤2.5ms`, `≤1s`, `>10s`: one word, for a column of `resmux top`.
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (sign, seconds) = match *self {
            Self::AtMost(seconds) => ("≤", seconds),
            Self::Beyond(seconds) => (">", seconds),
        };
        // Rounded to the microsecond, so that no bound shows a binary
        // fraction's tail.
        match seconds < 1.0 {
            true => write!(out, "{sign}{}ms", (seconds * 1e6).round() / 1e3),
            false => write!(out, "{sign}{}s", (seconds * 1e3).round() / 1e3),
        }
    }
}

/// Every plugin's row, by plugin.
pub struct Figures {
    pub rows: BTreeMap<String, Row>,
}

impl Figures {
    /// The figures from `before` to `now`.
    pub fn between(before: &Sample, now: &Sample) -> Self {
        let seconds = now.at.duration_since(before.at).as_secs_f64().max(1e-3);
        let mut rows: BTreeMap<String, Row> = BTreeMap::new();
        let rate = |metric: &str| {
            let earlier = per_plugin_sum(&before.scrape, metric);
            per_plugin_sum(&now.scrape, metric)
                .into_iter()
                .map(move |(plugin, value)| {
                    let grown = increase(earlier.get(&plugin).copied(), value);
                    (plugin, grown)
                })
        };
        for (plugin, calls) in rate("resmux_plugin_calls_total") {
            rows.entry(plugin).or_default().calls_per_second = calls / seconds;
        }
        for (plugin, faults) in rate("resmux_plugin_faults_total") {
            rows.entry(plugin).or_default().faults = faults;
        }
        for (plugin, cpu) in rate("resmux_plugin_cpu_seconds_total") {
            rows.entry(plugin).or_default().cpu_per_second = cpu / seconds;
        }
        let now_of = |metric: &str| per_plugin_sum(&now.scrape, metric);
        for (plugin, instances) in now_of("resmux_plugin_instances") {
            rows.entry(plugin).or_default().instances = instances;
        }
        for (plugin, idle) in now_of("resmux_plugin_idle_instances") {
            rows.entry(plugin).or_default().idle_instances = idle;
        }
        for (plugin, peak) in now_of("resmux_plugin_peak_memory_bytes") {
            rows.entry(plugin).or_default().peak_memory_bytes = peak;
        }
        for (plugin, quarantined) in now_of("resmux_plugin_quarantined") {
            rows.entry(plugin).or_default().quarantined = quarantined > 0.0;
        }
        for sample in now
            .scrape
            .samples
            .iter()
            .filter(|sample| sample.metric == "resmux_plugin_faults_total")
        {
            if let (Some(plugin), Some(kind), Some(value)) = (
                sample.labels.get("plugin"),
                sample.labels.get("kind"),
                scalar(&sample.value),
            ) {
                *rows
                    .entry(plugin.to_owned())
                    .or_default()
                    .faults_by_kind
                    .entry(kind.to_owned())
                    .or_default() += value;
            }
        }
        let latency_before = per_plugin_buckets(&before.scrape);
        for (plugin, buckets) in per_plugin_buckets(&now.scrape) {
            // Buckets that went back belong to a restarted server: count
            // all they hold.
            let earlier = latency_before
                .get(&plugin)
                .filter(|earlier| total(earlier) <= total(&buckets));
            let recent: Vec<HistogramCount> = buckets
                .iter()
                .map(|bucket| HistogramCount {
                    less_than: bucket.less_than,
                    count: bucket.count
                        - earlier.map_or(0.0, |earlier| bucket_count(earlier, bucket.less_than)),
                })
                .collect();
            let row = rows.entry(plugin).or_default();
            row.p50 = quantile(&recent, 0.5);
            row.p99 = quantile(&recent, 0.99);
        }
        Self { rows }
    }
}

/// How much a counter grew from `before` to `now`; all of `now` when it
/// went back (the server restarted).
fn increase(before: Option<f64>, now: f64) -> f64 {
    match before {
        Some(before) if before <= now => now - before,
        _ => now,
    }
}

fn scalar(value: &Value) -> Option<f64> {
    match value {
        Value::Counter(value) | Value::Gauge(value) | Value::Untyped(value) => Some(*value),
        _ => None,
    }
}

/// The observations cumulative `buckets` hold.
fn total(buckets: &[HistogramCount]) -> f64 {
    buckets.last().map_or(0.0, |bucket| bucket.count)
}

/// The sum of `metric` over each plugin's series.
fn per_plugin_sum(scrape: &Scrape, metric: &str) -> BTreeMap<String, f64> {
    let mut sums = BTreeMap::new();
    for sample in scrape
        .samples
        .iter()
        .filter(|sample| sample.metric == metric)
    {
        if let (Some(plugin), Some(value)) = (sample.labels.get("plugin"), scalar(&sample.value)) {
            *sums.entry(plugin.to_owned()).or_insert(0.0) += value;
        }
    }
    sums
}

/// Each plugin's latency buckets, summed over its operations.
fn per_plugin_buckets(scrape: &Scrape) -> BTreeMap<String, Vec<HistogramCount>> {
    let mut summed: BTreeMap<String, Vec<HistogramCount>> = BTreeMap::new();
    for sample in &scrape.samples {
        let (true, Value::Histogram(buckets), Some(plugin)) = (
            sample.metric == "resmux_plugin_call_duration_seconds",
            &sample.value,
            sample.labels.get("plugin"),
        ) else {
            continue;
        };
        let total = summed.entry(plugin.to_owned()).or_default();
        for bucket in buckets {
            match total
                .iter_mut()
                .find(|kept| kept.less_than == bucket.less_than)
            {
                Some(kept) => kept.count += bucket.count,
                None => total.push(bucket.clone()),
            }
        }
    }
    for buckets in summed.values_mut() {
        buckets.sort_by(|a, b| a.less_than.total_cmp(&b.less_than));
    }
    summed
}

fn bucket_count(buckets: &[HistogramCount], less_than: f64) -> f64 {
    buckets
        .iter()
        .find(|bucket| bucket.less_than == less_than)
        .map_or(0.0, |bucket| bucket.count)
}

/// The bucket the `q` quantile falls in (cumulative buckets, as Prometheus
/// keeps them); `None` without observations.
fn quantile(buckets: &[HistogramCount], q: f64) -> Option<Latency> {
    let total = total(buckets);
    if total <= 0.0 {
        return None;
    }
    let bound = buckets
        .iter()
        .find(|bucket| bucket.count >= q * total)?
        .less_than;
    if bound.is_finite() {
        return Some(Latency::AtMost(bound));
    }
    let last = buckets
        .iter()
        .map(|bucket| bucket.less_than)
        .filter(|bound| bound.is_finite())
        .fold(0.0, f64::max);
    Some(Latency::Beyond(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "\
resmux_plugin_calls_total{plugin=\"a\",operation=\"read\",outcome=\"ok\"} 10
resmux_plugin_faults_total{plugin=\"a\",kind=\"trap\"} 1
resmux_plugin_cpu_seconds_total{plugin=\"a\"} 1.0
";
    const NOW: &str = "\
resmux_plugin_calls_total{plugin=\"a\",operation=\"read\",outcome=\"ok\"} 30
resmux_plugin_faults_total{plugin=\"a\",kind=\"trap\"} 3
resmux_plugin_faults_total{plugin=\"a\",kind=\"timeout\"} 1
resmux_plugin_cpu_seconds_total{plugin=\"a\"} 1.5
resmux_plugin_peak_memory_bytes{plugin=\"a\"} 65536
resmux_plugin_quarantined{plugin=\"a\"} 1
";

    #[test]
    fn rates_are_over_the_interval_and_kinds_since_the_start() {
        let before = Sample::parse(BEFORE).unwrap();
        let mut now = Sample::parse(NOW).unwrap();
        now.at = before.at + std::time::Duration::from_secs(2);
        let figures = Figures::between(&before, &now);
        let row = &figures.rows["a"];
        assert_eq!(row.calls_per_second, 10.0);
        assert_eq!(row.faults, 3.0);
        assert_eq!(row.cpu_per_second, 0.25);
        assert_eq!(row.peak_memory_bytes, 65536.0);
        assert!(row.quarantined);
        assert_eq!(row.faults_by_kind["trap"], 3.0);
        assert_eq!(row.faults_by_kind["timeout"], 1.0);
    }

    #[test]
    fn latencies_read_as_bucket_bounds_and_past_the_last_one() {
        let buckets = |counts: [f64; 3]| {
            [0.0025, 10.0, f64::INFINITY]
                .into_iter()
                .zip(counts)
                .map(|(less_than, count)| HistogramCount { less_than, count })
                .collect::<Vec<_>>()
        };
        let fast = quantile(&buckets([90.0, 100.0, 100.0]), 0.5).unwrap();
        assert_eq!(fast.to_string(), "≤2.5ms");
        let stuck = quantile(&buckets([0.0, 0.0, 4.0]), 0.99).unwrap();
        assert_eq!(stuck, Latency::Beyond(10.0));
        assert_eq!(stuck.to_string(), ">10s");
        assert_eq!(quantile(&buckets([0.0; 3]), 0.5), None);
    }
}
