//! The path of one call into a plugin, in three parts that each keep their
//! own rules, whatever the call does once it runs:
//! - **admission** ([`Admission`]): refused at once while the plugin (or
//!   the path) is quarantined or its slots are all held by stuck calls;
//!   otherwise one of its call slots ([`CallSlot`]), and whatever else the
//!   call holds, within its time limit, or refused as busy;
//! - **the lane** that runs the admitted call ([`Lane`]): a thread of its
//!   own ([`own_thread`]), inline on the plugin's file threads
//!   ([`inline`]), or on a plugins' thread ([`task`]) within the plugin's
//!   share of them ([`WorkerShare`]), each ending it at
//!   its time limit and keeping its slot for as long as its work may still
//!   run;
//! - **accounting** ([`accounted`]): the `plugin.call` span, the metrics,
//!   the health record (and the quarantine it decides) and the console.
//!
//! [`super::plugin`] gives each part what it runs: the work on an
//! instance, the instances a call holds, the plugin's names for its limits.
//! Nothing here knows of wasmtime, so each part is tested with a fake call
//! (`tests`).

mod accounting;
mod admission;
mod inline;
mod own_thread;
mod task;
#[cfg(test)]
mod tests;
mod workers;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::OwnedSemaphorePermit;

pub(super) use accounting::{Account, accounted};
pub(super) use admission::Admission;
pub(super) use workers::WorkerShare;

use super::meter::FaultKind;
use super::placement::Placement;
use super::stuck::Stuck;
use crate::contract::ProviderError;

/// How a call failed: with an error the plugin (or the host, refusing it)
/// answered, or with a fault of the plugin.
#[derive(Debug)]
pub(super) enum Failed {
    Answered(ProviderError),
    /// Refused before an instance was made: every call slot (or the host's
    /// descriptor budget) stayed taken. Says nothing of the plugin's health.
    Busy(ProviderError),
    /// Refused at once: the plugin, or the path, is quarantined.
    Quarantined(String),
    Faulted(FaultKind, String),
}

impl From<ProviderError> for Failed {
    fn from(error: ProviderError) -> Self {
        Self::Answered(error)
    }
}

/// Whether a call answered: a result, or an error of the contract.
pub(super) fn answered<T>(outcome: &Result<T, Failed>) -> bool {
    matches!(outcome, Ok(_) | Err(Failed::Answered(_)))
}

/// One of a plugin's call slots, held by one call from its admission until
/// its work can no longer run: given back when dropped, so exactly once,
/// on every path out (an answer, a trap, the time limit, a cancelled
/// caller, a panic).
#[derive(Debug)]
pub(super) struct CallSlot {
    _permit: OwnedSemaphorePermit,
}

/// Why a lane ended a call without its work's outcome.
#[derive(Debug)]
pub(super) enum Cut {
    /// The call's time was up: its work was stopped, or is left to end on
    /// its own while it keeps its slot.
    TimedOut,
    /// The thread or task that ran the work ended without an outcome: it
    /// panicked, as this says.
    Ended(String),
}

/// What a caught panic says, as tokio says it of a task's.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let message = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str));
    match message {
        Some(message) => format!("panicked with message {message:?}"),
        None => "panicked".into(),
    }
}

/// Where an admitted call's work runs. A lane never runs plugin code on a
/// thread that serves the protocol.
pub(super) enum Lane<'a> {
    /// A thread of the call's own, for work that may block it in a file
    /// operation: one of the plugin's own file threads if its calls are
    /// placed, else one of the plugins' runtime's blocking threads.
    OwnThread(Option<&'a Placement>),
    /// A task on the plugin's own runtime, whose file operations go to the
    /// plugin's blocking threads ([`super::placement`]).
    Inline(&'a Placement),
    /// On a thread of the plugins' runtime, for work that never blocks its
    /// thread: a task there, or the caller's own thread if it is one;
    /// stopped (its store dropped there) when its time is up or its caller
    /// gives up on it; run only while the plugin's share of those threads
    /// has one free for it.
    Task(&'a Arc<WorkerShare>),
}

/// What a lane is given to run: the work, made on the thread that runs it,
/// and the time it has.
pub(super) struct Work<'a, W> {
    /// The operation, for the placement's records and the stuck calls'
    /// reports.
    pub operation: &'a str,
    /// When the call's time is up, and how long it had from admission.
    pub deadline: Instant,
    pub limit: Duration,
    /// The plugin's calls stuck past their time limit, which a call whose
    /// work cannot be stopped joins when its caller gives up on it.
    pub stuck: &'a Arc<Stuck>,
    pub make: W,
}

impl Lane<'_> {
    /// Runs `work` under `slot`: its outcome, or why it has none.
    pub(super) async fn run<R, W, F>(self, slot: CallSlot, work: Work<'_, W>) -> Result<R, Cut>
    where
        W: FnOnce() -> F + Send + 'static,
        F: Future<Output = R> + Send + 'static,
        R: Send + 'static,
    {
        match self {
            Self::OwnThread(placement) => own_thread::run(placement, slot, work).await,
            Self::Inline(placement) => inline::run(placement, slot, work).await,
            Self::Task(share) => task::run(share, slot, work).await,
        }
    }
}
