//! Quarantine for a plugin that faults again and again: after a run of
//! consecutive faults its calls fail at once for a backoff period, which
//! doubles each time it faults again right after coming back, and resets as
//! soon as a call succeeds. A replaced plugin starts with a clean record.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Consecutive faults that put a plugin in quarantine.
pub const FAULTS_BEFORE_QUARANTINE: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The fault record of one plugin.
#[derive(Debug, Default)]
pub struct Health {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    consecutive_faults: u32,
    backoff: Option<Duration>,
    quarantined_until: Option<Instant>,
}

impl Health {
    /// How much longer the plugin stays in quarantine, if it is in it.
    pub fn quarantine_left(&self) -> Option<Duration> {
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
    pub fn record_success(&self) {
        *self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = State::default();
    }

    /// A call faulted; returns the quarantine it starts, if it starts one.
    pub fn record_fault(&self) -> Option<Duration> {
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
        let health = Health::default();
        assert_eq!(health.record_fault(), None);
        assert_eq!(health.record_fault(), None);
        assert_eq!(health.record_fault(), Some(FIRST_BACKOFF));
        assert!(health.quarantine_left().is_some());
        assert_eq!(health.record_fault(), Some(FIRST_BACKOFF * 2));
        health.record_success();
        assert_eq!(health.quarantine_left(), None);
        assert_eq!(health.record_fault(), None);
    }
}
