//! A count of work under way, each piece counted until its guard is
//! dropped, and a wait until none is left: the HTTP requests a graceful
//! stop waits for, the compiles a client may be waiting for, which the
//! optimizer lets finish first.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

#[derive(Default)]
pub struct UnderWay {
    count: AtomicUsize,
    none_left: Notify,
}

/// One piece of work, counted until it is dropped.
pub struct Counted(Arc<UnderWay>);

impl UnderWay {
    /// Counts one more piece of work, until the guard returned is dropped.
    pub fn start(self: &Arc<Self>) -> Counted {
        self.count.fetch_add(1, Ordering::AcqRel);
        Counted(self.clone())
    }

    /// Resolves once nothing counted is left.
    pub async fn until_none(&self) {
        loop {
            let none_left = self.none_left.notified();
            let mut none_left = std::pin::pin!(none_left);
            none_left.as_mut().enable();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            none_left.await;
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.none_left.notify_waiters();
        }
    }
}
