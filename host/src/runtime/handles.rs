//! The host's descriptor budget: how many host resources all running plugin
//! instances may hold together.
//!
//! Every instance may hold at most its `max_handles` resources (its resource
//! table is capped there), and each resource holds at most one host
//! descriptor. Before an instance starts, its whole cap is reserved from this
//! budget and returned when the instance ends, so plugins together can never
//! hold more descriptors than the budget, whatever they do. The budget is the
//! process's descriptor limit (raised to its hard limit at start) less a
//! reserve kept for the host itself: listeners, connections, logs, the
//! compile cache and held grants.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Descriptors always kept for the host, at the least.
const MIN_HOST_RESERVE: u64 = 256;

/// The descriptors plugin instances may hold together.
#[derive(Debug, Clone)]
pub struct HandleBudget {
    available: Arc<Semaphore>,
    total: u32,
}

impl HandleBudget {
    /// Raises the process's descriptor limit as far as allowed and keeps a
    /// quarter of it (at least [`MIN_HOST_RESERVE`]) for the host.
    pub fn from_process_limit() -> Self {
        let limit = raise_descriptor_limit();
        let reserve = (limit / 4).max(MIN_HOST_RESERVE);
        Self::new(u32::try_from(limit.saturating_sub(reserve)).unwrap_or(u32::MAX))
    }

    /// A budget of `total` descriptors.
    pub fn new(total: u32) -> Self {
        let permits = (total as usize).min(Semaphore::MAX_PERMITS);
        Self {
            available: Arc::new(Semaphore::new(permits)),
            total,
        }
    }

    pub fn total(&self) -> u32 {
        self.total
    }

    /// The descriptors no instance holds now.
    pub fn free(&self) -> u32 {
        u32::try_from(self.available.available_permits()).unwrap_or(u32::MAX)
    }

    /// Reserves `count` descriptors for one instance if they are free now.
    pub fn try_reserve(&self, count: u32) -> Option<OwnedSemaphorePermit> {
        self.available.clone().try_acquire_many_owned(count).ok()
    }

    /// Reserves `count` descriptors for one instance, waiting until they are
    /// free; `None` if the instance could never fit.
    pub async fn reserve(&self, count: u32) -> Option<OwnedSemaphorePermit> {
        if count > self.total {
            return None;
        }
        self.available.clone().acquire_many_owned(count).await.ok()
    }
}

/// Sets the soft descriptor limit to the hard one and returns the soft limit
/// now in force.
#[cfg(unix)]
fn raise_descriptor_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.maximum.is_some() && limit.current != limit.maximum {
        limit.current = limit.maximum;
        if let Err(error) = setrlimit(Resource::Nofile, limit) {
            tracing::debug!("cannot raise the descriptor limit: {error}");
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// Windows has no descriptor limit to raise: a process may hold up to 2^24
/// handles.
#[cfg(windows)]
fn raise_descriptor_limit() -> u64 {
    1 << 24
}
