//! A plugin's calls stuck past their time limit: calls whose caller gave up
//! on them while their work goes on, because a file operation (a FIFO, a
//! hung mount) holds its thread and nothing can stop it. Each keeps its
//! call slot (and its instance) until the operation returns, since the
//! instance's share of the pool is still taken. So the plugin reports them:
//! the gauge `resmux_plugin_stuck_calls`, a console event and one log line
//! when the first sticks, another when the last ends; and once they hold
//! every call slot, its calls are refused at once, naming them, rather than
//! each waiting a whole time limit for a slot that will not come.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::metrics::gauge::Gauge;

/// The stuck calls of one plugin.
pub struct Stuck {
    plugin: Arc<str>,
    count: AtomicUsize,
    gauge: Gauge,
}

impl Stuck {
    pub fn new(plugin: Arc<str>, gauge: Gauge) -> Arc<Self> {
        Arc::new(Self {
            plugin,
            count: AtomicUsize::new(0),
            gauge,
        })
    }

    /// How many of its calls are stuck now.
    pub fn now(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// One call to follow: its caller says when it gives up on it, its
    /// work when it ends ([`Ending`]).
    pub fn follow(self: &Arc<Self>) -> Arc<StuckCall> {
        Arc::new(StuckCall {
            stuck: self.clone(),
            state: Mutex::new(State::default()),
        })
    }

    fn enter(&self, operation: &str) {
        self.gauge.inc();
        if self.count.fetch_add(1, Ordering::AcqRel) == 0 {
            let text = format!(
                "a call of {operation} is stuck past its time limit: its slot and instance stay taken until the operation it waits on returns"
            );
            tracing::error!(plugin = %self.plugin, "{text}");
            crate::telemetry::board().stuck(&self.plugin, &text);
        }
    }

    fn leave(&self) {
        self.gauge.dec();
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            tracing::warn!(plugin = %self.plugin, "no call is stuck any more");
        }
    }
}

#[derive(Default)]
struct State {
    ended: bool,
    given_up: bool,
}

/// One call, between its caller and its work.
pub struct StuckCall {
    stuck: Arc<Stuck>,
    state: Mutex<State>,
}

impl StuckCall {
    /// Its caller gave up on it (its time is up): stuck, unless it ended.
    pub fn given_up(&self, operation: &str) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !state.ended && !state.given_up {
            state.given_up = true;
            self.stuck.enter(operation);
        }
    }

    fn ended(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !state.ended {
            state.ended = true;
            if state.given_up {
                self.stuck.leave();
            }
        }
    }
}

/// Held by a call's work: it ends when this is dropped, however the work
/// ends (answered, trapped, or dropped unfinished).
pub struct Ending(pub Arc<StuckCall>);

impl Drop for Ending {
    fn drop(&mut self) {
        self.0.ended();
    }
}
