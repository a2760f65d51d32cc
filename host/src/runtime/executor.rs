//! The threads plugin code runs on, apart from those that serve the
//! protocol: one runtime of its own for every call of a plugin without
//! granted files (and `locate`'s), and for the calls placed on threads of
//! their own by plugins whose grants are not placed (`super::placement`
//! runs the rest on each plugin's own threads, lowered alike). The reads
//! the stdio transport gathers are answered here too, each batch (the
//! reads of one scheme) in one task (`transport::stdio::Batch`), their
//! calls on the same thread
//! ([`on_plugin_thread`]). It also says how many of its workers one
//! plugin's calls may hold at once ([`one_plugins_workers`]), and how many
//! workers the runtime that serves the protocol gets ([`protocol_workers`]),
//! so that the two share the cores.
//!
//! Nothing a plugin does can be interrupted mid-instruction: one
//! `memory.fill` over fresh pages, or one host call, may take a core for
//! hundreds of milliseconds. So plugin code never runs on a thread that
//! reads stdin, accepts connections or answers a ping, and its threads run
//! at a lower priority ([`lower_to_plugins`]), so that when every core runs plugin
//! code, the kernel still hands a core to a waking protocol thread at once.
//! A call's store is dropped here too (its memory handed back to the
//! kernel, which may take as long).

use std::cell::Cell;
use std::sync::OnceLock;

use anyhow::{Context, Result};
use tokio::runtime::{Builder, Handle, Runtime};

/// How much lower than the host's threads plugin threads run: nice 10
/// weighs a tenth of nice 0 in Linux's scheduler.
#[cfg(target_os = "linux")]
const NICENESS: i32 = 10;

static PLUGINS: OnceLock<Runtime> = OnceLock::new();

thread_local! {
    /// Set on the plugins' runtime's threads, workers and blocking ones.
    static ON_PLUGIN_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Starts the plugins' runtime, once: a worker a core and one more, which
/// one plugin's running calls cannot take ([`one_plugins_workers`]).
pub fn start() -> Result<()> {
    if PLUGINS.get().is_some() {
        return Ok(());
    }
    let runtime = Builder::new_multi_thread()
        .on_thread_start(|| {
            lower_to_plugins();
            ON_PLUGIN_THREAD.set(true);
        })
        .worker_threads(plugin_workers())
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

/// Whether the calling thread is one of the plugins' runtime's: plugin
/// code may run on it as it is.
pub fn on_plugin_thread() -> bool {
    ON_PLUGIN_THREAD.get()
}

/// Counts the calling thread as one of the plugins' runtime's until the
/// guard is dropped: the lanes' tests call from one.
#[cfg(test)]
pub fn as_plugin_thread() -> PluginThread {
    ON_PLUGIN_THREAD.set(true);
    PluginThread
}

#[cfg(test)]
pub struct PluginThread;

#[cfg(test)]
impl Drop for PluginThread {
    fn drop(&mut self) {
        ON_PLUGIN_THREAD.set(false);
    }
}

/// `builder`, whose threads run at the plugins' lower priority.
pub fn lowered(builder: Builder) -> Builder {
    let mut builder = builder;
    builder.on_thread_start(lower_to_plugins);
    builder
}

/// How many workers the plugins' runtime has: those one plugin's calls may
/// hold ([`one_plugins_workers`]) and one more.
pub fn plugin_workers() -> usize {
    one_plugins_workers() + 1
}

/// The most of the plugins' runtime's workers one plugin's calls run on at
/// once: one a core, so that however long its code holds them, the last
/// worker is left to the other plugins' calls (`call::WorkerShare`).
pub fn one_plugins_workers() -> usize {
    cores()
}

/// How many workers the runtime that serves the protocol gets: half the
/// cores, at least one. Plugin code runs on threads of its own, a worker a
/// core and one more, so the protocol's work is the smaller share; a
/// worker a core there too kept them waking one another to steal what they
/// had queued (the figures are in docs/performance.md).
pub fn protocol_workers() -> usize {
    (cores() / 2).max(1)
}

/// The cores this process may use.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// A priority below the host's threads.
#[derive(Clone, Copy)]
enum Priority {
    /// The plugins' priority: niceness [`NICENESS`] on Linux (which sets
    /// the priority of one thread by its id), `THREAD_PRIORITY_BELOW_NORMAL`
    /// on Windows, the utility QoS class on macOS.
    Plugins,
    /// Below every other priority: Linux's `SCHED_IDLE` (it runs only on a
    /// core nothing else wants; if that is refused, the lowest niceness),
    /// Windows' `THREAD_PRIORITY_IDLE`, macOS's background QoS class.
    Idle,
}

/// Puts the calling thread below every other priority ([`Priority::Idle`]).
pub fn idle_this_thread() {
    lower(Priority::Idle);
}

/// Lowers the calling thread's priority to the plugins' ([`Priority::Plugins`]).
pub fn lower_to_plugins() {
    lower(Priority::Plugins);
}

fn lower(priority: Priority) {
    #[cfg(target_os = "linux")]
    {
        if let Priority::Idle = priority {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: `param` is a valid `sched_param`, read during the
            // call; pid 0 is the calling thread.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
                return;
            }
        }
        lower_this_thread(match priority {
            Priority::Plugins => NICENESS,
            Priority::Idle => LOWEST_NICENESS,
        });
    }
    #[cfg(windows)]
    {
        use windows_sys::Win32::System::Threading::{
            THREAD_PRIORITY_BELOW_NORMAL, THREAD_PRIORITY_IDLE,
        };
        set_windows_priority(match priority {
            Priority::Plugins => THREAD_PRIORITY_BELOW_NORMAL,
            Priority::Idle => THREAD_PRIORITY_IDLE,
        });
    }
    #[cfg(target_os = "macos")]
    set_quality_of_service(match priority {
        Priority::Plugins => libc::qos_class_t::QOS_CLASS_UTILITY,
        Priority::Idle => libc::qos_class_t::QOS_CLASS_BACKGROUND,
    });
}

/// The lowest priority `setpriority` gives.
#[cfg(target_os = "linux")]
const LOWEST_NICENESS: i32 = 19;

/// Lowers the calling thread's priority to `niceness`.
#[cfg(target_os = "linux")]
fn lower_this_thread(niceness: i32) {
    if let Err(error) =
        rustix::process::setpriority_process(Some(rustix::thread::gettid()), niceness)
    {
        tracing::debug!("a thread keeps the host's priority: {error}");
    }
}

/// Sets the calling thread's Windows priority.
#[cfg(windows)]
fn set_windows_priority(priority: windows_sys::Win32::System::Threading::THREAD_PRIORITY) {
    use windows_sys::Win32::System::Threading::{GetCurrentThread, SetThreadPriority};
    // SAFETY: the pseudo handle of the calling thread is always valid.
    if unsafe { SetThreadPriority(GetCurrentThread(), priority) } == 0 {
        tracing::debug!(
            "a thread keeps the host's priority: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// Sets the calling thread's macOS quality-of-service class.
#[cfg(target_os = "macos")]
fn set_quality_of_service(class: libc::qos_class_t) {
    // SAFETY: a plain call on the calling thread, with a valid class.
    if unsafe { libc::pthread_set_qos_class_self_np(class, 0) } != 0 {
        tracing::debug!("a thread keeps the host's priority");
    }
}
