//! Whether a call may run, and when: refused at once while the plugin (or
//! the path the call is about) is quarantined, or while every call slot is
//! held and some by calls stuck past their time limit; otherwise it waits
//! for one of the plugin's call slots, and whatever else it must hold, at
//! most its time limit. A call that never got them is refused as busy,
//! which says nothing of the plugin's health. The call's own time starts
//! once it is admitted: waiting for what other calls held is not the
//! plugin's.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;

use super::{CallSlot, Failed};
use crate::contract::ProviderError;
use crate::grants::limits::Limits;
use crate::runtime::health::{FAULTS_BEFORE_QUARANTINE, Health};
use crate::runtime::stuck::Stuck;

/// What admits one plugin's calls.
pub(in crate::runtime) struct Admission<'a> {
    pub plugin: &'a str,
    pub limits: &'a Limits,
    pub slots: &'a Arc<Semaphore>,
    pub health: &'a Health,
    pub stuck: &'a Stuck,
}

impl Admission<'_> {
    /// Refuses a call (about `path`, if it is about one) that may not wait
    /// for a slot: its plugin or its path is quarantined, or the plugin is
    /// wedged.
    pub fn check(&self, path: Option<&str>) -> Result<(), Failed> {
        let records = std::iter::once(None).chain(path.map(Some));
        let quarantined = records
            .into_iter()
            .find_map(|record| Some((record, self.health.quarantine_left(record)?)));
        if let Some((record, left)) = quarantined {
            let what = match record {
                Some(path) => format!("path {path:?} of plugin {}", self.plugin),
                None => format!("plugin {}", self.plugin),
            };
            return Err(Failed::Quarantined(format!(
                "{what} is quarantined for another {} ms after {FAULTS_BEFORE_QUARANTINE} faults in a row",
                left.as_millis()
            )));
        }
        let stuck = self.stuck.now();
        if stuck > 0 && self.slots.available_permits() == 0 {
            return Err(Failed::Busy(self.wedged(stuck)));
        }
        Ok(())
    }

    /// A call slot, then what `more` holds for the call with it, within the
    /// time limit. The error, `more`'s or [`Self::busy`], refuses the call
    /// as busy: it says nothing of the plugin's health.
    pub async fn wait<H, M, F>(&self, more: M) -> Result<(CallSlot, H), ProviderError>
    where
        M: FnOnce() -> F,
        F: Future<Output = Result<H, ProviderError>>,
    {
        let held = async {
            let slot = self
                .slots
                .clone()
                .acquire_owned()
                .await
                .expect("the call semaphore is never closed");
            Ok((CallSlot { _permit: slot }, more().await?))
        };
        match tokio::time::timeout(self.limits.timeout(), held).await {
            Ok(held) => held,
            Err(_) => Err(self.busy()),
        }
    }

    /// The error of a call that never got a call slot (or its share of the
    /// host's descriptor budget) within the plugin's time limit.
    pub fn busy(&self) -> ProviderError {
        ProviderError::Unavailable(format!(
            "plugin {} is busy: its {} call slots (or the host's descriptor budget) stayed taken for {} ms",
            self.plugin, self.limits.concurrent_calls, self.limits.timeout_ms
        ))
    }

    /// Why a call is refused at once: its plugin's call slots are all held,
    /// `stuck` of them by calls stuck past their time limit.
    fn wedged(&self, stuck: usize) -> ProviderError {
        ProviderError::Unavailable(format!(
            "plugin {} is wedged: {stuck} of its {} call slots are held by calls stuck past their time limit of {} ms, each waiting on an operation that has not returned; refused at once until one ends",
            self.plugin, self.limits.concurrent_calls, self.limits.timeout_ms
        ))
    }
}
