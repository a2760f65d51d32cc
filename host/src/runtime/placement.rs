//! Where the calls of a plugin with granted directories run.
//!
//! A file operation may block its thread for as long as a FIFO stays
//! unopened or a mount hangs, so the plugin's file operations never run on
//! one of the runtime's workers. Two ways keep them off, and each costs what
//! the other saves:
//! - **On a thread of the call's own**: the operations block that thread,
//!   and the call pays one hop there and back (two thread wake-ups, about
//!   30 µs of CPU on a 2-core machine), whatever it does.
//! - **Inline**, a task on the plugin's runtime: each file operation runs
//!   on one of the plugin's blocking threads and pays that hop itself, so a
//!   call that makes none pays only the hop to the task.
//!
//! Each operation (`read`, `list`, …) runs inline while its recent inline
//! calls waited less than once each on average, and on a thread of its own
//! otherwise, with one call in [`SAMPLE_EVERY`] inline to notice when that
//! changes. A wait is any time the call's future was pending: a file
//! operation, a timer or a socket it waits for, instantiation and `init`
//! on a fresh instance, or a yield of plugin code past its time slice. Any
//! of them only sends calls to threads of their own, which is what every
//! call did before this placement.
//!
//! Both kinds of thread come from one tokio runtime of the plugin's own,
//! with at most `concurrent_calls` blocking threads (named `files:NAME`,
//! cut to 15 bytes by Linux, as are its worker threads, a core each at
//! most, which run its inline calls), all at the plugins' lower priority
//! (`super::executor`): no plugin code runs on the host's threads. However its calls are
//! placed, the plugin's stuck file operations hold at most that many
//! threads, none of the host's. Only a plugin whose granted directories are
//! all on local filesystems is placed (`Grant::may_run_inline`): an inline
//! call's instance is checked, kept or closed on a worker, where a `stat`
//! or `close` must not wait on a remote or user-space file system.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::{Context as _, Result};
use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

use super::executor;

/// Of the calls an operation runs on threads of their own, one in this many
/// runs inline, to measure its waits again.
const SAMPLE_EVERY: u32 = 64;

/// The operations whose calls are placed; any other runs on a thread of
/// its own.
const PLACED: [&str; 5] = ["list", "templates", "read", "complete", "changes"];

/// Waits are averaged in sixteenths.
const ONE_WAIT: u32 = 16;

/// A call's waits past this many count as this many, so that one long call
/// moves the average as far as a few would.
const MOST_WAITS_COUNTED: u32 = 8;

/// Where one call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    Inline,
    OwnThread,
}

/// What the plugin's recent calls of one operation waited for.
#[derive(Default)]
struct Record {
    /// The running average of waits per inline call, in sixteenths: each
    /// call's count weighs an eighth.
    waits: AtomicU32,
    /// Calls placed on threads of their own, to sample every
    /// [`SAMPLE_EVERY`]th.
    apart: AtomicU32,
}

/// The placement of one plugin's calls, and its blocking threads.
pub struct Placement {
    /// Always some until dropped, when it is shut down without waiting for
    /// operations still stuck.
    runtime: Option<Runtime>,
    records: [Record; PLACED.len()],
}

impl Placement {
    /// The placement of `plugin`'s calls, with at most `blocking_threads`
    /// threads for their file operations.
    pub fn new(plugin: &str, blocking_threads: usize) -> Result<Self> {
        let runtime = executor::lowered(tokio::runtime::Builder::new_multi_thread())
            .worker_threads(executor::cores().min(blocking_threads.max(1)))
            .max_blocking_threads(blocking_threads.max(1))
            .thread_name(format!("files:{plugin}"))
            .enable_all()
            .build()
            .with_context(|| format!("plugin {plugin}: cannot start its file threads"))?;
        Ok(Self {
            runtime: Some(runtime),
            records: Default::default(),
        })
    }

    /// Where the next call of `operation` runs.
    pub fn place(&self, operation: &str) -> Place {
        let Some(record) = self.record(operation) else {
            return Place::OwnThread;
        };
        if record.waits.load(Ordering::Relaxed) < ONE_WAIT {
            return Place::Inline;
        }
        let apart = record.apart.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        if apart.is_multiple_of(SAMPLE_EVERY) {
            Place::Inline
        } else {
            Place::OwnThread
        }
    }

    /// Counts the waits of one inline call of `operation`.
    pub fn settle(&self, operation: &str, waits: u32) {
        let Some(record) = self.record(operation) else {
            return;
        };
        let sample = waits.min(MOST_WAITS_COUNTED) * ONE_WAIT;
        // A call that raced with this one may be lost: an average of
        // eighths does not need every one.
        let average = record.waits.load(Ordering::Relaxed);
        record
            .waits
            .store(average - average / 8 + sample / 8, Ordering::Relaxed);
    }

    /// Starts `call`, to run inline: a task on the plugin's runtime, so
    /// that its file operations run on the plugin's blocking threads, with
    /// its waits counted. It runs (and keeps what it holds, its call slot)
    /// until it ends, or for at most `linger` once its caller gave up on it
    /// (its time is up, or its client cancelled it), since a file
    /// operation may hold it: its code stops at its next tick once the
    /// operation returns.
    pub fn inline<F>(&self, call: F, linger: Duration) -> Inline<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send,
    {
        let waits = Arc::new(AtomicU32::new(0));
        let counted = Counted {
            call: Box::pin(call),
            waits: waits.clone(),
        };
        let task = self
            .handle()
            .spawn(async move { tokio::time::timeout(linger, counted).await.ok() });
        Inline { task, waits }
    }

    /// Runs `apart` on one of the plugin's blocking threads: a call placed
    /// on a thread of its own.
    pub fn spawn_blocking<R: Send + 'static>(
        &self,
        apart: impl FnOnce() -> R + Send + 'static,
    ) -> JoinHandle<R> {
        self.handle().spawn_blocking(apart)
    }

    fn handle(&self) -> &Handle {
        self.runtime
            .as_ref()
            .expect("the runtime is there until the placement is dropped")
            .handle()
    }

    fn record(&self, operation: &str) -> Option<&Record> {
        let index = PLACED.iter().position(|placed| *placed == operation)?;
        Some(&self.records[index])
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A call running inline (see [`Placement::inline`]): its task, which
/// ends with the call's outcome, or with none once it lingered too long.
pub struct Inline<T> {
    pub task: JoinHandle<Option<T>>,
    waits: Arc<AtomicU32>,
}

impl<T> Inline<T> {
    /// How often the call has waited so far.
    pub fn waits(&self) -> u32 {
        self.waits.load(Ordering::Relaxed)
    }
}

/// A call's future, counting how often it waits. Boxed: the call's future
/// (a store, an instance, wasmtime's own futures) is large.
struct Counted<F: Future> {
    call: Pin<Box<F>>,
    waits: Arc<AtomicU32>,
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<F::Output> {
        let polled = self.call.as_mut().poll(context);
        if polled.is_pending() {
            self.waits.fetch_add(1, Ordering::Relaxed);
        }
        polled
    }
}
