//! One plugin's share of the plugins' runtime's workers: the most of them
//! its task-lane calls are run on at once. Nothing stops plugin code in the
//! middle of an instruction (one `memory.fill` over fresh pages takes a
//! core for about 100 ms), so a plugin whose calls held every worker would
//! hold back every other plugin's calls queued behind them for as long.
//! The runtime has a worker more than the cores (`executor::start`) and a
//! plugin's calls run on at most as many as there are cores, so one
//! plugin's running calls leave a worker to the others. What the share
//! does not count: a store dropped when its call is cut at its time limit
//! or given up on (after the share is given back), the calls of a second
//! plugin (each has a share of its own), and a read the stdio transport
//! runs in place (`transport::stdio::Batch`), which holds back the reads
//! behind it in its batch (of its own scheme), and a task it just made,
//! for as long as it runs.
//!
//! A call counts while its work is being run, not while it waits (for its
//! turn, a clock or an answer): past the share, it waits until one of its
//! plugin's calls gives its worker back.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use pin_project_lite::pin_project;

/// The workers one plugin's calls run on, and the calls waiting for one.
#[derive(Debug)]
pub struct WorkerShare {
    /// Its calls being run on a worker right now.
    running: AtomicUsize,
    /// The most of them at once.
    most: usize,
    /// The calls waiting for one of those to end, woken all at once.
    waiting: Mutex<Vec<Waker>>,
}

impl WorkerShare {
    /// A share of at most `most` workers at once (at least one).
    pub fn new(most: usize) -> Self {
        Self {
            running: AtomicUsize::new(0),
            most: most.max(1),
            waiting: Mutex::new(Vec::new()),
        }
    }

    /// `work`, run only while `share` has a worker free for it.
    pub fn within<F: Future>(share: &Arc<Self>, work: F) -> WithinShare<F> {
        WithinShare {
            share: share.clone(),
            work,
        }
    }

    /// Takes a worker of the share, or registers `waker` to try again once
    /// one is given back.
    fn take(&self, waker: &Waker) -> Option<Running<'_>> {
        loop {
            if self.take_free() {
                return Some(Running(self));
            }
            let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            if !waiting.iter().any(|waiter| waiter.will_wake(waker)) {
                waiting.push(waker.clone());
            }
            // A worker given back before the waker was registered woke
            // nobody: look again, under the lock its giver takes.
            if self.running.load(Ordering::SeqCst) >= self.most {
                return None;
            }
        }
    }

    /// Counts one more call running, if the share has a worker free.
    fn take_free(&self) -> bool {
        self.running
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |running| {
                (running < self.most).then_some(running + 1)
            })
            .is_ok()
    }

    /// Gives a worker back, waking every call waiting for one: those whose
    /// callers gave up leave wakers that wake nothing, so waking one could
    /// wake none that still waits.
    fn give_back(&self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
        let waiting =
            std::mem::take(&mut *self.waiting.lock().unwrap_or_else(PoisonError::into_inner));
        for waiter in waiting {
            waiter.wake();
        }
    }

    /// How many of its calls are being run right now.
    #[cfg(test)]
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// How many calls wait for one of them to end.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// A worker of a share, given back when dropped, however its poll ends.
struct Running<'a>(&'a WorkerShare);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.give_back();
    }
}

pin_project! {
    /// Work run only while its plugin's share has a worker free for it
    /// ([`WorkerShare::within`]).
    pub struct WithinShare<F> {
        share: Arc<WorkerShare>,
        #[pin]
        work: F,
    }
}

impl<F: Future> Future for WithinShare<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let Some(_running) = this.share.take(context.waker()) else {
            return Poll::Pending;
        };
        this.work.poll(context)
    }
}
