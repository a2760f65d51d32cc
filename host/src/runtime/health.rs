//! Quarantine for a plugin that faults again and again: after a run of
//! consecutive faults its calls fail at once for a backoff period, which
//! doubles each time it faults again right after coming back, and resets as
//! soon as a call succeeds. A replaced plugin starts with a clean record.
//!
//! Which faults count where: a fault (trap, time, CPU, memory, stack or
//! handle limit) in a call whose input a client chooses (`read` of a path,
//! `complete` of a template argument) counts towards the record of that path
//! or argument only, so a client asking again and again for what breaks the
//! plugin, or for a read too big for its limits, quarantines that path and
//! nothing else: every other path keeps serving every other client. Faults
//! in `init`, `about`, listings and change reports count towards the plugin.
//! Errors a plugin returns (not found, unavailable, ...) are no faults.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Consecutive faults that put a plugin (or one of its paths) in quarantine.
pub const FAULTS_BEFORE_QUARANTINE: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Paths whose fault records are kept at most; the least used go first.
const PATHS_TRACKED: u64 = 4096;

/// The fault records of one plugin: its own, and one per faulting path.
pub struct Health {
    plugin: Arc<Record>,
    paths: moka::sync::Cache<String, Arc<Record>>,
    /// Whether any path has ever faulted: until one has, a call looks up
    /// no path's record (two cache lookups a read, 1.8% of a stdio read's CPU
    /// by `perf`, for a plugin that never faults).
    any_path_faulted: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        Self {
            plugin: Arc::default(),
            paths: moka::sync::Cache::new(PATHS_TRACKED),
            any_path_faulted: AtomicBool::new(false),
        }
    }
}

impl Health {
    /// How much longer calls about `path` (or, without one, every call of
    /// the plugin) stay refused.
    pub fn quarantine_left(&self, path: Option<&str>) -> Option<Duration> {
        match path {
            Some(path) if self.any_path_faulted() => self.paths.get(path)?.quarantine_left(),
            Some(_) => None,
            None => self.plugin.quarantine_left(),
        }
    }

    /// A call about `path` (or the plugin) ended without a fault.
    pub fn record_success(&self, path: Option<&str>) {
        match path {
            Some(path) if self.any_path_faulted() => self.paths.invalidate(path),
            Some(_) => {}
            None => self.plugin.record_success(),
        }
    }

    /// A call about `path` (or the plugin) faulted; returns the quarantine
    /// it starts, if it starts one.
    pub fn record_fault(&self, path: Option<&str>) -> Option<Duration> {
        match path {
            Some(path) => {
                self.any_path_faulted.store(true, Ordering::Release);
                self.paths
                    .get_with_by_ref(path, Arc::default)
                    .record_fault()
            }
            None => self.plugin.record_fault(),
        }
    }

    fn any_path_faulted(&self) -> bool {
        self.any_path_faulted.load(Ordering::Acquire)
    }
}

/// One fault record.
#[derive(Debug, Default)]
struct Record {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    consecutive_faults: u32,
    backoff: Option<Duration>,
    quarantined_until: Option<Instant>,
}

impl Record {
    /// How much longer the plugin stays in quarantine, if it is in it.
    fn quarantine_left(&self) -> Option<Duration> {
        let state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state
            .quarantined_until
            .and_then(|until| until.checked_duration_since(Instant::now()))
            .filter(|left| !left.is_zero())
    }

    /// A call ended without a fault.
    fn record_success(&self) {
        *self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = State::default();
    }

    /// A call faulted; returns the quarantine it starts, if it starts one.
    fn record_fault(&self) -> Option<Duration> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        state.consecutive_faults += 1;
        if state.consecutive_faults < FAULTS_BEFORE_QUARANTINE {
            return None;
        }
        let backoff = state
            .backoff
            .map_or(FIRST_BACKOFF, |last| (last * 2).min(MAX_BACKOFF));
        state.backoff = Some(backoff);
        state.quarantined_until = Some(Instant::now() + backoff);
        Some(backoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarantines_after_repeated_faults_and_doubles_the_backoff() {
        let health = Record::default();
        assert_eq!(health.record_fault(), None);
        assert_eq!(health.record_fault(), None);
        assert_eq!(health.record_fault(), Some(FIRST_BACKOFF));
        assert!(health.quarantine_left().is_some());
        assert_eq!(health.record_fault(), Some(FIRST_BACKOFF * 2));
        health.record_success();
        assert_eq!(health.quarantine_left(), None);
        assert_eq!(health.record_fault(), None);
    }

    #[test]
    fn a_path_keeps_its_own_record() {
        let health = Health::default();
        for _ in 0..FAULTS_BEFORE_QUARANTINE {
            health.record_fault(Some("broken"));
        }
        assert!(health.quarantine_left(Some("broken")).is_some());
        assert!(health.quarantine_left(Some("fine")).is_none());
        assert!(health.quarantine_left(None).is_none());
        health.record_success(Some("broken"));
        assert!(health.quarantine_left(Some("broken")).is_none());
    }
}
