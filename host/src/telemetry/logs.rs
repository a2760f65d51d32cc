//! Where logs and spans go. Log lines go to stderr, as text or as one JSON
//! object per line, through a writer thread with a bounded buffer: when
//! stderr stalls, lines beyond the buffer are dropped and counted
//! (`resmux_log_lines_dropped_total`) rather than stalling the server.
//! Spans (at `debug`, so that they cost nothing unless traces are exported
//! or the log asks for them) also go to OTLP when the environment asks
//! ([`super::traces`]).
//!
//! No answer a plugin returned reaches the log at any level: rmcp logs
//! whole requests and responses at `debug`, so its events are kept to
//! `info` and above whatever the filter says.

use std::io::IsTerminal;

use anyhow::{Context, Result};
use opentelemetry_sdk::trace::SdkTracerProvider;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use tracing::Level;
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::filter::{EnvFilter, FilterFn, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

use super::metrics::metrics;
use super::traces;

/// Log lines held for a stalled stderr before new ones are dropped.
const BUFFERED_LINES: usize = 16_384;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, coloured on a terminal.
    #[default]
    Text,
    /// One JSON object per line: time, level, target, fields and spans.
    Json,
}

/// Keeps the log writer and the trace exporter running; dropping it
/// flushes both.
pub struct Telemetry {
    _writer: WorkerGuard,
    traces: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.traces.take()
            && let Err(error) = provider.shutdown()
        {
            eprintln!("resmux: traces not all exported: {error}");
        }
    }
}

/// Sends logs to stderr, filtered by `level`, else RUST_LOG, else
/// `default`, and spans to OTLP when the environment asks.
pub fn init(level: Option<&str>, default: &str, format: LogFormat) -> Result<Telemetry> {
    let filter = match level {
        Some(level) => EnvFilter::try_new(level)
            .with_context(|| format!("--log-level {level:?} is not a log filter"))?,
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default)),
    };
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(BUFFERED_LINES)
        .thread_name("resmux-log")
        .finish(std::io::stderr());
    metrics().register_collector(DroppedLines(writer.error_counter()));
    let lines = match format {
        LogFormat::Text => fmt::layer()
            .with_writer(writer)
            .with_ansi(std::io::stderr().is_terminal())
            .boxed(),
        LogFormat::Json => fmt::layer()
            .json()
            .with_writer(writer)
            .flatten_event(true)
            .boxed(),
    };
    // A trace setting resmux cannot follow leaves traces off, with a
    // warning, rather than stopping the server.
    let (exporting, not_exported) = match traces::exporter_from_env() {
        Ok(exporting) => (exporting, None),
        Err(error) => (None, Some(error)),
    };
    // Every filter states the most verbose level it lets through, so that
    // callsites (and `log` records) beyond it are skipped at once.
    let mut most_verbose = filter.max_level_hint().unwrap_or(LevelFilter::TRACE);
    if exporting.is_some() {
        most_verbose = most_verbose.max(LevelFilter::DEBUG);
    }
    let spans = exporting.as_ref().map(|(_, tracer)| {
        // Spans carry the semantic conventions' attributes alone: no
        // source locations, threads or busy/idle times.
        tracing_opentelemetry::layer()
            .with_tracer(tracer.clone())
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_target(false)
            .with_level(false)
            .with_filter(Targets::new().with_target("resmux", Level::DEBUG))
            .with_filter(
                FilterFn::new(|metadata| metadata.is_span())
                    .with_max_level_hint(LevelFilter::DEBUG),
            )
    });
    tracing_subscriber::registry()
        .with(
            FilterFn::new(|metadata| {
                !metadata.target().starts_with("rmcp") || *metadata.level() <= Level::INFO
            })
            .with_max_level_hint(most_verbose),
        )
        .with(lines.with_filter(filter))
        .with(spans)
        .try_init()
        .context("cannot set up logging")?;
    if let Some(error) = not_exported {
        tracing::warn!("traces are not exported: {error:#}");
    }
    Ok(Telemetry {
        _writer: guard,
        traces: exporting.map(|(provider, _)| provider),
    })
}

/// Counts the log lines dropped while stderr could not keep up.
#[derive(Debug)]
struct DroppedLines(ErrorCounter);

impl Collector for DroppedLines {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let dropped = ConstCounter::new(self.0.dropped_lines() as u64);
        let metric = encoder.encode_descriptor(
            "resmux_log_lines_dropped",
            "Log lines dropped because stderr did not keep up",
            None,
            MetricType::Counter,
        )?;
        dropped.encode(metric)
    }
}
