//! The lane of a call on a thread of its own, for a plugin whose calls may
//! block their thread in a file operation (a FIFO, a hung mount): the
//! caller waits for the thread within the call's time limit, and gives up
//! on it a little after, while the thread keeps the call's slot until its
//! work has ended. Nothing can stop a blocked file operation, so a call
//! given up on while its thread runs is stuck ([`super::Stuck`]).
//!
//! The slot passes to the thread once it starts ([`Unstarted`]); until
//! then the caller may take it back, should the plugin's threads all be
//! held past the call's time by calls stuck in file operations. Exactly one
//! of them gets it.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::Instrument;

use super::{CallSlot, Cut, Work};
use crate::runtime::executor;
use crate::runtime::placement::Placement;
use crate::runtime::stuck::Ending;

/// How long a call's own thread may overrun its time limit before the
/// caller gives up on it; the call's own timer normally ends it first.
const THREAD_GRACE: Duration = Duration::from_millis(100);

/// A call's slot until its thread starts: claimed by the thread, or taken
/// back by the caller that gave up waiting for it, never both.
struct Unstarted(Mutex<Option<CallSlot>>);

impl Unstarted {
    /// The slot, for the one that asks first.
    fn take(&self) -> Option<CallSlot> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

/// Runs `work` on a thread of its own: one of `placement`'s, or one of
/// the plugins' runtime's blocking threads.
pub(super) async fn run<R, W, F>(
    placement: Option<&Placement>,
    slot: CallSlot,
    work: Work<'_, W>,
) -> Result<R, Cut>
where
    W: FnOnce() -> F + Send + 'static,
    F: Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    let runtime = tokio::runtime::Handle::current();
    let span = tracing::Span::current();
    let unstarted = Arc::new(Unstarted(Mutex::new(Some(slot))));
    let claim = unstarted.clone();
    let (deadline, limit, make) = (work.deadline, work.limit, work.make);
    let followed = work.stuck.follow();
    let ending = Ending(followed.clone());
    let apart = move || {
        // Dropped when the thread is done, however it ends: the slot stays
        // taken until then, even after the caller gave up on the call, and
        // the work (an instance it holds) is dropped before it, since
        // dropping one may block too.
        let _ending = ending;
        let _slot = claim.take()?;
        let work = async move {
            // A thread may come late, once the plugin's blocking threads
            // are all busy: nobody waits for the call then.
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::timeout(limit, make()).await.ok()
        };
        runtime.block_on(work.instrument(span))
    };
    let thread = match placement {
        Some(placement) => placement.spawn_blocking(apart),
        None => executor::handle().spawn_blocking(apart),
    };
    match tokio::time::timeout(limit + THREAD_GRACE, thread).await {
        Ok(Ok(Some(outcome))) => Ok(outcome),
        Ok(Ok(None)) => Err(Cut::TimedOut),
        Ok(Err(failure)) => Err(Cut::Ended(failure.to_string())),
        Err(_) => {
            if unstarted.take().is_none() {
                followed.given_up(work.operation);
            }
            Err(Cut::TimedOut)
        }
    }
}
