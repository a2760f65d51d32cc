//! The lane of a call that never blocks its thread (a plugin without file
//! grants, and `locate`'s instances): a task on the plugins' runtime,
//! stopped there, its store dropped there, when its time is up or its
//! caller gives up on it. Its slot goes with the task.

use std::future::Future;

use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;

use super::{CallSlot, Cut, Work};
use crate::runtime::executor;

/// Runs `work` as a task on the plugins' runtime.
pub(super) async fn run<R, W, F>(slot: CallSlot, work: Work<'_, W>) -> Result<R, Cut>
where
    W: FnOnce() -> F + Send + 'static,
    F: Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    let make = work.make;
    let task = async move {
        let _slot = slot;
        make().await
    }
    .instrument(tracing::Span::current());
    let task = AbortOnDropHandle::new(executor::handle().spawn(task));
    match tokio::time::timeout_at(work.deadline.into(), task).await {
        Ok(Ok(outcome)) => Ok(outcome),
        Ok(Err(failure)) => Err(Cut::Ended(failure)),
        Err(_) => Err(Cut::TimedOut),
    }
}
