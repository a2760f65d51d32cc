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
//! `info` and above whatever the filter says. rmcp's `info` events are of
//! one session's life (its start and end) or one notification, which over
//! stateless HTTP is every request: they count as `debug`, logged only when
//! the filter lets rmcp's `debug` through (`--log-level debug`,
//! `RUST_LOG=rmcp=debug`). At the default level, no line is logged per
//! request.

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
    let (filter, directives) = match level {
        Some(level) => (
            EnvFilter::try_new(level)
                .with_context(|| format!("--log-level {level:?} is not a log filter"))?,
            level.to_owned(),
        ),
        None => from_env().unwrap_or_else(|| (EnvFilter::new(default), default.to_owned())),
    };
    let targets = targets_of(&directives);
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
            FilterFn::new(move |metadata| {
                let target = metadata.target();
                !target.starts_with("rmcp")
                    || rmcp_may_log(*metadata.level(), target, targets.as_ref())
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

/// The filter RUST_LOG gives, with its text, if it is set and valid.
fn from_env() -> Option<(EnvFilter, String)> {
    let directives = std::env::var(EnvFilter::DEFAULT_ENV).ok()?;
    let filter = EnvFilter::try_new(&directives).ok()?;
    Some((filter, directives))
}

/// Which targets the filter `directives` logs at which level, as far as
/// [`Targets`] can say (targets and levels, no spans or fields); none if it
/// cannot say.
fn targets_of(directives: &str) -> Option<Targets> {
    let directives: Vec<&str> = directives
        .split(',')
        .map(str::trim)
        .filter(|directive| !directive.is_empty())
        .collect();
    if directives.is_empty() {
        return None;
    }
    directives.join(",").parse().ok()
}

/// Whether an event of rmcp's at `level` and `target` may be logged: a warning or an error always;
/// one at `info` (a session's start or end, a notification received) only
/// where `targets` let rmcp's `debug` through; one at `debug` or beyond
/// (whole messages) never.
fn rmcp_may_log(level: Level, target: &str, targets: Option<&Targets>) -> bool {
    let debug_asked = targets.is_some_and(|targets| targets.would_enable(target, &Level::DEBUG));
    level <= Level::WARN || (level == Level::INFO && debug_asked)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The target of rmcp's events of a session's life.
    const SERVICE: &str = "rmcp::service";

    /// Whether rmcp's `info` event of a session's end is logged under the
    /// filter `directives`.
    fn session_end_logged(directives: &str) -> bool {
        rmcp_may_log(Level::INFO, SERVICE, targets_of(directives).as_ref())
    }

    #[test]
    fn rmcp_logs_a_session_only_when_its_debug_is_asked_for() {
        for quiet in ["info", "warn", "info,resmux=debug", "rmcp=info", "", " , "] {
            assert!(!session_end_logged(quiet), "{quiet:?}");
        }
        for asked in [
            "debug",
            "info,rmcp=debug",
            "rmcp::service=trace",
            "INFO, rmcp=DEBUG",
        ] {
            assert!(session_end_logged(asked), "{asked:?}");
        }
    }

    #[test]
    fn rmcp_warnings_always_and_messages_never_reach_the_log() {
        for directives in ["off", "info", "trace"] {
            let targets = targets_of(directives);
            assert!(rmcp_may_log(Level::WARN, SERVICE, targets.as_ref()));
            assert!(!rmcp_may_log(Level::DEBUG, SERVICE, targets.as_ref()));
            assert!(!rmcp_may_log(Level::TRACE, SERVICE, targets.as_ref()));
        }
    }
}
