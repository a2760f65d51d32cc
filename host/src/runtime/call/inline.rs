//! The lane of a call run inline: a task on the plugin's own runtime,
//! whose file operations run on the plugin's blocking threads
//! ([`super::Placement`]), with its waits counted to decide where the
//! plugin's next calls of the operation run. The caller waits for it within
//! the call's time limit; a call given up on keeps its slot for at most
//! [`STUCK_CALL_LIMITS`] more of its time limits, should a file operation
//! hold it, and counts as stuck while it does.

use std::future::Future;

use tracing::Instrument;

use super::{CallSlot, Cut, Work};
use crate::runtime::placement::Placement;
use crate::runtime::stuck::Ending;

/// How many more of its time limits an inline call that nobody waits for
/// any more (its time is up, or its client cancelled it) keeps its slot at
/// most, should a file operation hold it or should it wait for something
/// that never comes (a clock it polls for ever, an HTTP answer that never
/// arrives). Past that, an operation still stuck holds only its blocking
/// thread, one of at most `concurrent_calls`.
const STUCK_CALL_LIMITS: u32 = 10;

/// Runs `work` inline on `placement`'s runtime.
pub(super) async fn run<R, W, F>(
    placement: &Placement,
    slot: CallSlot,
    work: Work<'_, W>,
) -> Result<R, Cut>
where
    W: FnOnce() -> F + Send + 'static,
    F: Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    let followed = work.stuck.follow();
    let ending = Ending(followed.clone());
    let make = work.make;
    let running = async move {
        // Dropped with the call, however it ends: when it answers, fails,
        // or lingers too long.
        let _held = (ending, slot);
        make().await
    }
    .instrument(tracing::Span::current());
    let linger = work.limit * (STUCK_CALL_LIMITS + 1);
    let mut call = placement.inline(running, linger);
    let operation = work.operation;
    match tokio::time::timeout_at(work.deadline.into(), &mut call.task).await {
        Ok(Ok(Some(outcome))) => {
            placement.settle(operation, call.waits());
            Ok(outcome)
        }
        Ok(Err(failure)) => Err(Cut::Ended(failure.to_string())),
        Ok(Ok(None)) | Err(_) => {
            placement.settle(operation, call.waits().max(1));
            followed.given_up(operation);
            Err(Cut::TimedOut)
        }
    }
}
