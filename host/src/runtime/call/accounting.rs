//! What every call of a plugin leaves behind, whichever lane ran it: a
//! `plugin.call` span (its error type and status set on a failure), its
//! outcome and duration in the metrics, a fault counted in the health
//! record, which quarantines the plugin (or the path) after too many in a
//! row and tells the console so, and the error its caller sees.

use std::future::Future;
use std::time::Instant;

use tracing::Instrument;

use super::Failed;
use crate::contract::ProviderError;
use crate::runtime::health::{FAULTS_BEFORE_QUARANTINE, Health};
use crate::runtime::meter::{Ended, Meter};

/// Where one plugin's calls are accounted.
pub(in crate::runtime) struct Account<'a> {
    pub plugin: &'a str,
    /// Tells the plugin from a replaced one of the same name, on the console.
    pub id: u64,
    pub health: &'a Health,
    pub meter: &'a Meter,
}

/// Runs `call`, an `operation` about `path` if it is about one, and
/// accounts for its outcome; an answer records a success only where
/// `success_counts` (a call that proves nothing of the plugin's health, as
/// `locate`'s alone, must not wipe out the faults of the path's reads).
pub(in crate::runtime) async fn accounted<T>(
    account: &Account<'_>,
    operation: &'static str,
    path: Option<&str>,
    success_counts: bool,
    call: impl Future<Output = Result<T, Failed>>,
) -> Result<T, ProviderError> {
    let plugin = account.plugin;
    let span = tracing::debug_span!(
        "plugin.call",
        otel.name = %format_args!("{operation} {plugin}"),
        resmux.plugin = %plugin,
        resmux.plugin.operation = operation,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let started = Instant::now();
    let outcome = call.instrument(span.clone()).await;
    let ended = match &outcome {
        Ok(_) => Ended::Answered,
        Err(Failed::Answered(error) | Failed::Busy(error)) => Ended::refused(error),
        Err(Failed::Quarantined(_)) => Ended::Quarantined,
        Err(Failed::Faulted(kind, message)) => {
            tracing::warn!(plugin, operation, "{message}");
            if let Some(backoff) = account.health.record_fault(path) {
                account.meter.quarantine(path.is_some());
                tracing::error!(
                    plugin,
                    path,
                    "quarantined for {} ms after {FAULTS_BEFORE_QUARANTINE} faults in a row",
                    backoff.as_millis()
                );
                crate::telemetry::board().quarantined(account.id, plugin, path, backoff, message);
            }
            Ended::Faulted(*kind)
        }
    };
    if success_counts && super::answered(&outcome) {
        account.health.record_success(path);
    }
    account.meter.call(operation, ended, started.elapsed());
    if ended != Ended::Answered {
        span.record("error.type", ended.outcome());
        span.record("otel.status_code", "ERROR");
    }
    outcome.map_err(|failed| match failed {
        Failed::Answered(error) | Failed::Busy(error) => error,
        Failed::Quarantined(message) => ProviderError::Unavailable(message),
        Failed::Faulted(_, message) => ProviderError::Fault(message),
    })
}
