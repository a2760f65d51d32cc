//! The lane of a call that never blocks its thread (a plugin without file
//! grants, and `locate`'s instances): run on a plugins' thread, stopped
//! there, its store dropped there, when its time is up or its caller gives
//! up on it. A caller on a protocol thread hands it to a task on the
//! plugins' runtime; a caller already on one of its threads (a read the
//! stdio transport handed over, `transport::stdio::Batch`) runs it as it
//! is, with no task and no other thread woken. Its slot goes with the work,
//! which runs only while its plugin's share of the workers has one free
//! for it ([`WorkerShare`]).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use super::{CallSlot, Cut, Work, WorkerShare, panic_message};
use crate::runtime::executor;

/// Runs `work` on a plugins' thread, within `share`.
pub(super) async fn run<R, W, F>(
    share: &Arc<WorkerShare>,
    slot: CallSlot,
    work: Work<'_, W>,
) -> Result<R, Cut>
where
    W: FnOnce() -> F + Send + 'static,
    F: Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    let make = work.make;
    let task = WorkerShare::within(share, async move {
        let _slot = slot;
        make().await
    })
    .instrument(tracing::Span::current());
    let deadline = work.deadline.into();
    if executor::on_plugin_thread() {
        // A panic ends the work as it would end a task: the slot is dropped
        // with it, and the call reports it.
        return match tokio::time::timeout_at(deadline, AssertUnwindSafe(task).catch_unwind()).await
        {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(panic)) => Err(Cut::Ended(panic_message(panic.as_ref()))),
            Err(_) => Err(Cut::TimedOut),
        };
    }
    let task = AbortOnDropHandle::new(executor::handle().spawn(task));
    match tokio::time::timeout_at(deadline, task).await {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(failure)) => Err(Cut::Ended(failure.to_string())),
        Err(_) => Err(Cut::TimedOut),
    }
}
