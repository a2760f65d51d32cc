//! The threads plugin code runs on, apart from those that serve the
//! protocol: one runtime of its own for every call of a plugin without
//! granted files (and `locate`'s), and for the calls placed on threads of
//! their own by plugins whose grants are not placed (`super::placement`
//! runs the rest on each plugin's own threads, lowered alike).
//!
//! Nothing a plugin does can be interrupted mid-instruction: one
//! `memory.fill` over fresh pages, or one host call, may take a core for
//! hundreds of milliseconds. So plugin code never runs on a thread that
//! reads stdin, accepts connections or answers a ping, and its threads run
//! at a lower priority ([`NICENESS`]), so that when every core runs plugin
//! code, the kernel still hands a core to a waking protocol thread at once.
//! A call's store is dropped here too (its memory handed back to the
//! kernel, which may take as long).

use std::sync::OnceLock;

use anyhow::{Context, Result};
use tokio::runtime::{Builder, Handle, Runtime};

/// How much lower than the host's threads plugin threads run: nice 10
/// weighs a tenth of nice 0 in Linux's scheduler.
const NICENESS: i32 = 10;

static PLUGINS: OnceLock<Runtime> = OnceLock::new();

/// Starts the plugins' runtime, once: a worker a core.
pub fn start() -> Result<()> {
    if PLUGINS.get().is_some() {
        return Ok(());
    }
    let runtime = lowered(Builder::new_multi_thread())
        .worker_threads(cores())
        .thread_name("plugins")
        .enable_all()
        .build()
        .context("cannot start the threads plugins run on")?;
    // A second start racing this one keeps the first runtime.
    if let Err(spare) = PLUGINS.set(runtime) {
        spare.shutdown_background();
    }
    Ok(())
}

/// The runtime plugin code runs on; the caller's own where none was
/// started (a unit test's).
pub fn handle() -> Handle {
    PLUGINS
        .get()
        .map_or_else(Handle::current, |runtime| runtime.handle().clone())
}

/// `builder`, whose threads run at the plugins' lower priority.
pub fn lowered(builder: Builder) -> Builder {
    let mut builder = builder;
    builder.on_thread_start(lower_to_plugins);
    builder
}

/// The cores this process may use.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Puts the calling thread below every other priority (Linux's
/// `SCHED_IDLE`: it runs only on a core nothing else wants); elsewhere,
/// or if that is refused, it gets the lowest niceness.
pub fn idle_this_thread() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid `sched_param`, read during the call;
        // pid 0 is the calling thread.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
            return;
        }
    }
    lower_this_thread(LOWEST_NICENESS);
}

/// The lowest priority `setpriority` gives.
const LOWEST_NICENESS: i32 = 19;

/// Lowers the calling thread's priority to the plugins'.
pub fn lower_to_plugins() {
    lower_this_thread(NICENESS);
}

/// Lowers the calling thread's priority to `niceness` (Linux sets the
/// priority of one thread by its id); elsewhere it stays as it is.
fn lower_this_thread(niceness: i32) {
    #[cfg(target_os = "linux")]
    if let Err(error) =
        rustix::process::setpriority_process(Some(rustix::thread::gettid()), niceness)
    {
        tracing::debug!("a thread keeps the host's priority: {error}");
    }
}
