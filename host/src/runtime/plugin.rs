//! One loaded plugin and the path of every call into it: a slot among the
//! plugin's concurrent calls and its share of the host's descriptor budget,
//! an instance (an idle one of the plugin's, or a fresh store and instance
//! under its grants, its resource table capped at `max_handles`, drawn from
//! the engine's pool), `init` with the operator's config once per instance,
//! the call itself, all within the time limit. An instance whose call
//! answered may be kept for the next ([`super::instance`]); one that trapped,
//! ran into a limit or was cancelled is dropped, so it leaves nothing behind.
//! Faults are counted ([`super::health`]), and a plugin (or one of its paths)
//! that keeps faulting is quarantined. Every call is a `plugin.call` span and
//! is counted in the metrics ([`super::meter`]). A plugin runs one
//! compiled code at a time; its move to the optimized tier
//! ([`super::tiers`]) swaps that code between calls, while its call slots,
//! health and stuck calls stay with it ([`Lasting`]).
//!
//! A plugin with file grants that exports `locate` is asked where a
//! resource's file is before it is asked to read it ([`super::locate`]).
//! `locate` runs in a lane of its own: instances without the plugin's file
//! grants, which can only compute, so the call runs on the caller's thread,
//! never waiting for a thread of its own and never blocking it. The host
//! then reads the file itself, under one of the plugin's call slots held
//! until the read returns.
//!
//! A plugin whose grants are directories on local filesystems runs each
//! operation's calls either inline or on threads of their own, whichever
//! its recent calls made cheaper, and all of them on its own blocking
//! threads ([`super::placement`]); any other plugin with file grants runs
//! them on threads of their own.
//!
//! A call's time limit runs from when it holds its slot; waiting for one is
//! bounded by the same limit, and a call that never got one is refused as
//! busy, which says nothing of the plugin's health. A call whose time is up
//! while a file operation holds it keeps its slot until the operation
//! returns, and its code stops at its next tick.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, ResourceTableError};
use wasmtime::{PoolConcurrencyLimitError, Store, Trap, UpdateDeadline, WasmBacktrace};

use super::bindings::{PluginIndices, PluginInfo};
use super::epoch::EpochClock;
use super::executor;
use super::handles::HandleBudget;
use super::health::{FAULTS_BEFORE_QUARANTINE, Health};
use super::instance::{Exports, Idle, Instance, drop_every_idle_instance};
use super::locate;
use super::meter::{Ended, FaultKind, Meter};
use super::placement::{Place, Placement};
use super::pool_share::PoolShare;
use super::stuck::{Ending, Stuck};
use super::tiers::ToOptimize;
use crate::contract::{
    ChangeReport, Completion, CompletionRequest, Page, Provider, ProviderError, ReadResult,
    ResourceEntry, TemplateEntry,
};
use crate::grants::limits::Exceeded;
use crate::grants::{Blocking, Grants, Sandbox};

/// A plugin ready to serve calls.
pub struct WasmPlugin {
    /// What its calls run on, replaced whole when the plugin moves to its
    /// optimized code ([`super::tiers`]): each call runs to its end on the
    /// code it started on.
    shared: ArcSwap<Shared>,
    /// What moving it to its optimized code takes, until the optimizer
    /// takes it: held here, the component's bytes go with the plugin.
    to_optimize: Mutex<Option<ToOptimize>>,
}

/// What a plugin keeps whichever compiled code runs its calls: one set of
/// call slots, one health record and one count of stuck calls, so that its
/// limits and its quarantine hold across a move to other code.
#[derive(Clone)]
struct Lasting {
    name: Arc<str>,
    id: u64,
    grants: Grants,
    config: Vec<(String, String)>,
    call_slots: Arc<Semaphore>,
    handles: HandleBudget,
    health: Arc<Health>,
    meter: Arc<Meter>,
    stuck: Arc<Stuck>,
    /// Its file threads, if its calls are placed.
    placement: Option<Arc<Placement>>,
    may_block: bool,
    preopened: u32,
}

/// What every call of a plugin needs, shared with the threads that run calls
/// of a plugin with file grants.
struct Shared {
    name: Arc<str>,
    /// Unique among the plugins this process loaded: tells a replaced
    /// plugin, still finishing its calls, from the one now serving its
    /// scheme.
    id: u64,
    /// The compiled component, shared with every other mount of it for as
    /// long as one of them is loaded.
    _component: Arc<Component>,
    /// Its share of the engine's instance pool, given back with the last of
    /// its calls on any of its code.
    pool_share: Option<Arc<PoolShare>>,
    /// The clock of its engine's time limits, which runs while a call does.
    epoch: EpochClock,
    /// The component linked under the plugin's grants, and where its
    /// exports are, found once.
    pre: InstancePre<Sandbox>,
    indices: PluginIndices,
    /// Its `locate` export and the idle instances made to run it, if it
    /// exports one and has files to locate.
    locating: Option<Locating>,
    /// Where its calls run and its idle instances made to run inline, if
    /// it has granted directories, all on local filesystems, and no
    /// granted file.
    inline: Option<InlineLane>,
    grants: Grants,
    config: Vec<(String, String)>,
    call_slots: Arc<Semaphore>,
    handles: HandleBudget,
    idle: Arc<Idle>,
    health: Arc<Health>,
    meter: Arc<Meter>,
    /// Its calls stuck past their time limit.
    stuck: Arc<Stuck>,
    /// Whether a call may block its thread in a file operation (the plugin
    /// has file grants): its calls then run on a thread of their own, or
    /// inline with their file operations on the plugin's file threads.
    may_block: bool,
    /// Directories each instance is given open, outside its resource table.
    preopened: u32,
}

/// A locating plugin's `locate` export, and its idle instances.
struct Locating {
    export: ComponentExportIndex,
    idle: Arc<Idle>,
    /// Set when `init` failed on an instance without file grants, as
    /// `locate`'s are, at start: the plugin's reads go to `read` alone.
    unable: AtomicBool,
}

/// The placement of a plugin's calls, and its idle instances made to run
/// them inline.
struct InlineLane {
    placement: Arc<Placement>,
    idle: Arc<Idle>,
}

/// Which instances a call runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lane {
    /// The plugin's own: file operations block the thread, which is one of
    /// the call's own if the plugin has file grants.
    Serving,
    /// The plugin's own, with file operations on its blocking threads; the
    /// call runs on the caller's thread ([`super::placement`]).
    Inline,
    /// `locate`'s: no file grants, and the call runs on the caller's thread.
    Locating,
}

impl Lane {
    /// Where its instances' file operations run.
    fn blocking(self) -> Blocking {
        match self {
            Self::Serving => Blocking::OnCallingThread,
            Self::Inline => Blocking::OnBlockingThreads,
            Self::Locating => Blocking::Denied,
        }
    }
}

type CallResult<T> = wasmtime::Result<Result<T, super::bindings::resmux::provider::types::Error>>;

/// A call of one export on an instance, as [`CallFn`] makes it.
type CallFuture<'a, T> = Pin<Box<dyn Future<Output = CallResult<T>> + Send + 'a>>;

/// What a call does on an instance, given its store and exports. It may run
/// twice (see [`InstanceFailure::BeforeRunning`]), and its future may be
/// left to finish on another task (see `Shared::run`).
trait CallFn<T>:
    for<'a> Fn(&'a mut Store<Sandbox>, &'a Exports) -> CallFuture<'a, T> + Send + Sync + 'static
{
}

impl<T, F> CallFn<T> for F where
    F: for<'a> Fn(&'a mut Store<Sandbox>, &'a Exports) -> CallFuture<'a, T> + Send + Sync + 'static
{
}

/// How a call failed: with an error the plugin (or the host, refusing it)
/// answered, or with a fault of the plugin.
enum Failed {
    Answered(ProviderError),
    /// Refused before an instance was made: every call slot (or the host's
    /// descriptor budget) stayed taken. Says nothing of the plugin's health.
    Busy(ProviderError),
    /// Refused at once: the plugin, or the path, is quarantined.
    Quarantined(String),
    Faulted(FaultKind, String),
}

/// How a call on one instance failed.
enum InstanceFailure {
    /// It trapped in the plugin's allocator, called by the host to copy
    /// the call's arguments in, before any of the plugin's own code ran:
    /// the call may run again on a fresh instance.
    BeforeRunning(Failed),
    Failed(Failed),
}

impl InstanceFailure {
    fn into_failed(self) -> Failed {
        match self {
            Self::BeforeRunning(failed) | Self::Failed(failed) => failed,
        }
    }
}

/// Whether `error` is a trap in the plugin's allocator (`cabi_realloc`)
/// called by the host itself, that is while the host copied a call's
/// arguments in, before any of the plugin's own code ran: the allocator
/// called the host, which the component model forbids there. Go's runtime
/// does so when a garbage collection starts or ends in that allocation (it
/// reads the wall clock and polls its timers; the preview1 adapter pauses
/// only the monotonic clock, wasmtime issue 14318).
fn trapped_in_allocator(error: &wasmtime::Error) -> bool {
    matches!(
        error.downcast_ref::<Trap>(),
        Some(Trap::CannotLeaveComponent)
    ) && error
        .downcast_ref::<WasmBacktrace>()
        .and_then(|trace| trace.frames().last())
        .is_some_and(|outermost| outermost.func_name() == Some("cabi_realloc"))
}

impl From<ProviderError> for Failed {
    fn from(error: ProviderError) -> Self {
        Self::Answered(error)
    }
}

/// Whether a call answered: a result, or an error of the contract.
fn answered<T>(outcome: &Result<T, Failed>) -> bool {
    matches!(outcome, Ok(_) | Err(Failed::Answered(_)))
}

/// The instance a call runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum On {
    /// A fresh one, without `init` (for `about`); never kept.
    Bare,
    /// A fresh one, after `init` (to prove the plugin can start).
    Started,
    /// An idle one the plugin kept, else a fresh one after `init`.
    Any,
}

/// A component linked for one plugin: what [`WasmPlugin::new`] runs.
pub(super) struct Linked {
    pub component: Arc<Component>,
    pub pre: InstancePre<Sandbox>,
    pub indices: PluginIndices,
    /// Its share of the engine's instance pool, which its code on
    /// another tier shares.
    pub pool_share: Option<Arc<PoolShare>>,
}

/// What a call holds: its call slot, the idle instance it reuses if any, and
/// its share of the descriptor budget (beyond what that instance holds).
type Held = (OwnedSemaphorePermit, Option<Instance>, OwnedSemaphorePermit);

impl Lasting {
    /// What a new plugin `name` keeps under `grants`: its call slots, a
    /// clean health record, its series in the metrics, and its file
    /// threads if its calls are placed.
    fn new(
        name: Arc<str>,
        grants: Grants,
        config: Vec<(String, String)>,
        handles: HandleBudget,
    ) -> Self {
        static LOADED: AtomicU64 = AtomicU64::new(0);
        let concurrent_calls = grants.limits.concurrent_calls as usize;
        let may_block = grants.may_block();
        let health = Arc::new(Health::default());
        let meter = Arc::new(Meter::new(&name, &health));
        let placement = (may_block && grants.may_run_inline())
            .then(|| Placement::new(&name, concurrent_calls))
            .and_then(|placement| {
                placement
                    .inspect_err(|error| {
                        tracing::warn!("{error:#}; its calls run on threads of their own");
                    })
                    .ok()
            })
            .map(Arc::new);
        Self {
            id: LOADED.fetch_add(1, Ordering::Relaxed),
            stuck: Stuck::new(name.clone(), meter.stuck()),
            call_slots: Arc::new(Semaphore::new(concurrent_calls)),
            preopened: grants.descriptors_per_instance(),
            name,
            grants,
            config,
            handles,
            health,
            meter,
            placement,
            may_block,
        }
    }

    /// A pool of idle instances for one lane of the plugin's code.
    fn new_idle(&self) -> Arc<Idle> {
        Idle::new(
            self.grants.limits.concurrent_calls as usize,
            self.preopened,
            self.may_block,
            self.meter.idle(),
        )
    }
}

impl WasmPlugin {
    /// A plugin of `linked`'s component, under `grants`, whose time
    /// limits `epoch` drives, sharing the host's descriptor budget.
    pub(super) fn new(
        name: Arc<str>,
        linked: Linked,
        grants: Grants,
        config: Vec<(String, String)>,
        epoch: EpochClock,
        handles: HandleBudget,
    ) -> Self {
        let lasting = Lasting::new(name, grants, config, handles);
        Self {
            shared: ArcSwap::from_pointee(Shared::new(lasting, linked, epoch)),
            to_optimize: Mutex::new(None),
        }
    }

    /// Keeps what moving the plugin to its optimized code takes, until
    /// [`Self::take_to_optimize`].
    pub(super) fn hold_to_optimize(&self, job: ToOptimize) {
        *self
            .to_optimize
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(job);
    }

    /// What moving the plugin to its optimized code takes, once.
    pub(super) fn take_to_optimize(&self) -> Option<ToOptimize> {
        self.to_optimize
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Moves the plugin's calls to `linked`, its component compiled by
    /// another tier, once `init` has run on an instance of it: calls in
    /// flight finish on the code they started on, and every later call
    /// runs on the new code. Its call slots, health and stuck calls go with
    /// it. On an error, the plugin stays on the code it runs now.
    pub(super) async fn move_to(
        &self,
        linked: Linked,
        epoch: EpochClock,
    ) -> Result<(), ProviderError> {
        let lasting = self.shared.load().lasting();
        let moved = Self {
            shared: ArcSwap::from_pointee(Shared::new(lasting, linked, epoch)),
            to_optimize: Mutex::new(None),
        };
        moved.start().await?;
        let left = self.shared.swap(moved.shared.load_full());
        // Its idle instances are closed off the runtime's threads: closing
        // a granted file may wait on its file system.
        tokio::task::spawn_blocking(move || drop(left));
        Ok(())
    }

    /// The share of the instance pool the plugin holds, which its code on
    /// another tier takes over.
    pub(super) fn pool_share(&self) -> Option<Arc<PoolShare>> {
        self.shared.load().pool_share.clone()
    }

    /// Unique among the plugins this process loaded.
    pub fn id(&self) -> u64 {
        self.shared.load().id
    }

    pub fn grants(&self) -> Grants {
        self.shared.load().grants.clone()
    }

    /// What the plugin says about itself.
    pub async fn about(&self) -> Result<PluginInfo, ProviderError> {
        self.run(Lane::Serving, "about", On::Bare, None, |store, exports| {
            Box::pin(async { exports.provider().call_about(store).await.map(Ok) })
        })
        .await
    }

    /// Starts a fresh instance and runs `init`, to prove the plugin can
    /// serve; a locating plugin also starts an instance of its `locate`
    /// lane, which proves its `locate` export has the contract's type, and
    /// is read through `read` alone if `init` fails there without files.
    pub async fn start(&self) -> Result<(), ProviderError> {
        let started = |lane| {
            self.run(lane, "init", On::Started, None, |_, _| {
                Box::pin(async { Ok(Ok(())) })
            })
        };
        started(Lane::Serving).await?;
        let shared = self.shared.load_full();
        if let Some(locating) = &shared.locating
            && let Err(error) = started(Lane::Locating).await
        {
            locating.unable.store(true, Ordering::Relaxed);
            tracing::warn!(
                plugin = %shared.name,
                "locate is not used: init failed on an instance without file grants, as locate's are ({error}); reads go through read"
            );
        }
        Ok(())
    }

    /// The answer of the file the plugin locates for `path`, read by the
    /// host; none if the plugin does not locate it, or the host cannot read
    /// it for the plugin.
    async fn read_located(&self, path: &str) -> Result<Option<ReadResult>, ProviderError> {
        let shared = self.shared.load_full();
        let Some(locating) = &shared.locating else {
            return Ok(None);
        };
        if locating.unable.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let owned = path.to_owned();
        let located = self
            .run(
                Lane::Locating,
                "locate",
                On::Any,
                Some(path),
                move |store, exports| {
                    let path = owned.clone();
                    Box::pin(async move {
                        let locate = exports.locate().ok_or_else(|| {
                            wasmtime::Error::msg("an instance of the locate lane lacks locate")
                        })?;
                        let (located,) = locate.call_async(store, (path,)).await?;
                        Ok(located)
                    })
                },
            )
            .await?;
        let Some(located) = located else {
            return Ok(None);
        };
        let answer = shared.read_located_file(path, located).await?;
        if answer.is_some() {
            // Only a whole answer says the path is healthy: `locate` alone
            // must not wipe out the faults of the path's `read`.
            shared.health.record_success(Some(path));
        }
        Ok(answer)
    }

    /// Runs one call on the instance of `lane` that `on` asks for:
    /// refused at once while the plugin (or, for a call about one `path`,
    /// that path) is quarantined, queued while all its call slots are taken
    /// or the host's descriptor budget is spent, and bounded by its time
    /// limit throughout. A file operation never runs on a runtime thread:
    /// the call runs on a thread of its own, or inline with its operations
    /// on the plugin's file threads ([`super::placement`]), so that a FIFO
    /// or a hung mount holds only such a thread (and the call's slot) while
    /// the call fails at its time limit; `locate`'s lane never blocks its
    /// thread (see [`Lane::Locating`]). The plugin's grants are renewed
    /// first, on the call's own thread (see `Shared::renew`).
    async fn run<T, F>(
        &self,
        lane: Lane,
        operation: &'static str,
        on: On,
        path: Option<&str>,
        call: F,
    ) -> Result<T, ProviderError>
    where
        T: Send + 'static,
        F: CallFn<T>,
    {
        let shared = &self.shared.load_full();
        let span = tracing::debug_span!(
            "plugin.call",
            otel.name = %format_args!("{operation} {}", shared.name),
            resmux.plugin = %shared.name,
            resmux.plugin.operation = operation,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let started = Instant::now();
        let outcome = shared
            .run(lane, operation, on, path, call)
            .instrument(span.clone())
            .await;
        let ended = match &outcome {
            Ok(_) => Ended::Answered,
            Err(Failed::Answered(error) | Failed::Busy(error)) => Ended::refused(error),
            Err(Failed::Quarantined(_)) => Ended::Quarantined,
            Err(Failed::Faulted(kind, message)) => {
                tracing::warn!(plugin = %shared.name, operation, "{message}");
                if let Some(backoff) = shared.health.record_fault(path) {
                    shared.meter.quarantine(path.is_some());
                    tracing::error!(
                        plugin = %shared.name,
                        path,
                        "quarantined for {} ms after {FAULTS_BEFORE_QUARANTINE} faults in a row",
                        backoff.as_millis()
                    );
                    crate::telemetry::board().quarantined(
                        shared.id,
                        &shared.name,
                        path,
                        backoff,
                        message,
                    );
                }
                Ended::Faulted(*kind)
            }
        };
        if answered(&outcome) && lane == Lane::Serving {
            shared.health.record_success(path);
        }
        shared.meter.call(operation, ended, started.elapsed());
        if ended != Ended::Answered {
            span.record("error.type", ended.outcome());
            span.record("otel.status_code", "ERROR");
        }
        outcome.map_err(|failed| match failed {
            Failed::Answered(error) | Failed::Busy(error) => error,
            Failed::Quarantined(message) => ProviderError::Unavailable(message),
            Failed::Faulted(_, message) => ProviderError::Fault(message),
        })
    }
}

/// The largest located file read on a runtime thread (about 0.1 ms from the
/// page cache); a larger one is read on tokio's blocking pool, so that a
/// read holds a thread that serves others for no longer than that.
const READ_IN_TASK_BYTES: u64 = 1024 * 1024;

/// How many more of its time limits an inline call that nobody waits for
/// any more (its time is up, or its client cancelled it) keeps its slot at
/// most, should a file operation hold it or should it wait for something
/// that never comes (a clock it polls for ever, an HTTP answer that never
/// arrives). Past that, an operation still stuck holds only its blocking
/// thread, one of at most `concurrent_calls`.
const STUCK_CALL_LIMITS: u32 = 10;

/// How long a call's own thread may overrun its time limit before the
/// caller gives up on it; the call's own timer normally ends it first.
const THREAD_GRACE: Duration = Duration::from_millis(100);

impl Shared {
    /// `lasting` running `linked`'s code, whose time limits `epoch`
    /// drives, with no idle instance yet.
    fn new(lasting: Lasting, linked: Linked, epoch: EpochClock) -> Self {
        let Linked {
            component,
            pre,
            indices,
            pool_share,
        } = linked;
        let inline = lasting.placement.clone().map(|placement| InlineLane {
            placement,
            idle: lasting.new_idle(),
        });
        // Only a plugin with files can locate one.
        let locating = locate::export_of(&component)
            .filter(|_| lasting.may_block)
            .map(|export| Locating {
                export,
                idle: lasting.new_idle(),
                unable: AtomicBool::new(false),
            });
        let idle = lasting.new_idle();
        let Lasting {
            name,
            id,
            grants,
            config,
            call_slots,
            handles,
            health,
            meter,
            stuck,
            placement: _,
            may_block,
            preopened,
        } = lasting;
        Self {
            name,
            id,
            _component: component,
            pool_share,
            epoch,
            pre,
            indices,
            locating,
            inline,
            grants,
            config,
            call_slots,
            handles,
            idle,
            health,
            meter,
            stuck,
            may_block,
            preopened,
        }
    }

    /// What the plugin keeps if it moves to other code.
    fn lasting(&self) -> Lasting {
        Lasting {
            name: self.name.clone(),
            id: self.id,
            grants: self.grants.clone(),
            config: self.config.clone(),
            call_slots: self.call_slots.clone(),
            handles: self.handles.clone(),
            health: self.health.clone(),
            meter: self.meter.clone(),
            stuck: self.stuck.clone(),
            placement: self.inline.as_ref().map(|inline| inline.placement.clone()),
            may_block: self.may_block,
            preopened: self.preopened,
        }
    }

    /// The call itself, for [`WasmPlugin::run`].
    async fn run<T, F>(
        self: &Arc<Self>,
        lane: Lane,
        operation: &'static str,
        on: On,
        path: Option<&str>,
        call: F,
    ) -> Result<T, Failed>
    where
        T: Send + 'static,
        F: CallFn<T>,
    {
        let records = std::iter::once(None).chain(path.map(Some));
        let quarantined = records.into_iter().find_map(|record| {
            let left = self.health.quarantine_left(record)?;
            Some((record, left))
        });
        if let Some((record, left)) = quarantined {
            let what = match record {
                Some(path) => format!("path {path:?} of plugin {}", self.name),
                None => format!("plugin {}", self.name),
            };
            return Err(Failed::Quarantined(format!(
                "{what} is quarantined for another {} ms after {FAULTS_BEFORE_QUARANTINE} faults in a row",
                left.as_millis()
            )));
        }
        let stuck = self.stuck.now();
        if stuck > 0 && self.call_slots.available_permits() == 0 {
            return Err(Failed::Busy(self.wedged(stuck)));
        }
        let lane = self.place(lane, operation, on);
        let timeout = self.grants.limits.timeout();
        let (slot, reused, handles) = match tokio::time::timeout(timeout, self.hold(lane, on)).await
        {
            Ok(held) => held.map_err(Failed::Busy)?,
            Err(_) => return Err(Failed::Busy(self.busy())),
        };
        // The call's own time starts now: time spent waiting for a slot
        // that other calls held is not the plugin's.
        let left = timeout;
        let deadline = Instant::now() + left;
        if self.may_block && lane == Lane::Serving {
            let runner = self.clone();
            let runtime = tokio::runtime::Handle::current();
            let span = tracing::Span::current();
            // The slot is the thread's once it starts; until then the
            // caller may take it back, should the plugin's threads all be
            // held (by calls stuck in file operations) past its time.
            let unstarted = Arc::new(std::sync::Mutex::new(Some(slot)));
            let claim = unstarted.clone();
            let followed = self.stuck.follow();
            let ending = Ending(followed.clone());
            let apart = move || {
                // The slot stays taken until the thread is done, even after
                // the caller gave up on it, and an instance is kept or
                // dropped here: dropping one may block too.
                let _ending = ending;
                let _slot = claim.lock().ok()?.take()?;
                let call = async {
                    // A thread may come late, once the plugin's blocking
                    // threads are all busy: nobody waits for the call then.
                    if Instant::now() >= deadline {
                        return Err(runner.timed_out(operation));
                    }
                    runner.renew(deadline)?;
                    runner
                        .call(lane, (reused, handles), operation, on, deadline, call)
                        .await
                };
                Some(runtime.block_on(tokio::time::timeout(left, call).instrument(span)))
            };
            // A placed plugin's threads are its own blocking threads, shared
            // with its inline calls' file operations; any other's are the
            // plugins' runtime's.
            let thread = match &self.inline {
                Some(inline) => inline.placement.spawn_blocking(apart),
                None => executor::handle().spawn_blocking(apart),
            };
            match tokio::time::timeout(left + THREAD_GRACE, thread).await {
                Ok(Ok(Some(Ok(outcome)))) => outcome,
                Ok(Ok(Some(Err(_)) | None)) => Err(self.timed_out(operation)),
                Ok(Err(failure)) => Err(self.thread_ended(operation, &failure)),
                Err(_) => {
                    let taken_back = unstarted
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .take();
                    if taken_back.is_none() {
                        followed.given_up(operation);
                    }
                    Err(self.timed_out(operation))
                }
            }
        } else if let (Lane::Inline, Some(inline)) = (lane, &self.inline) {
            // No grant to renew: a plugin with a granted file runs no call
            // inline (see `Grant::may_run_inline`).
            let runner = self.clone();
            let followed = self.stuck.follow();
            let ending = Ending(followed.clone());
            let call = async move {
                let _ending = ending;
                runner
                    .call(lane, (reused, handles), operation, on, deadline, call)
                    .await
            }
            .instrument(tracing::Span::current());
            let mut call = inline
                .placement
                .inline(call, slot, left * (STUCK_CALL_LIMITS + 1));
            match tokio::time::timeout_at(deadline.into(), &mut call.task).await {
                Ok(Ok(Some(outcome))) => {
                    inline.placement.settle(operation, call.waits());
                    outcome
                }
                Ok(Err(failure)) => Err(self.thread_ended(operation, &failure)),
                Ok(Ok(None)) | Err(_) => {
                    inline.placement.settle(operation, call.waits().max(1));
                    followed.given_up(operation);
                    Err(self.timed_out(operation))
                }
            }
        } else {
            // No grant to renew: a plugin without file grants has none, and
            // `locate`'s instances get none. The call is a task on the
            // plugins' runtime, ended there (its store dropped there) when
            // its time is up or its caller gives up on it.
            let runner = self.clone();
            let call = async move {
                let _slot = slot;
                runner
                    .call(lane, (reused, handles), operation, on, deadline, call)
                    .await
            }
            .instrument(tracing::Span::current());
            let task = AbortOnDropHandle::new(executor::handle().spawn(call));
            match tokio::time::timeout_at(deadline.into(), task).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(failure)) => Err(self.thread_ended(operation, &failure)),
                Err(_) => Err(self.timed_out(operation)),
            }
        }
    }

    /// The lane a call of `operation` on `lane` runs in: a call that may be
    /// kept on the plugin's own instances runs inline when its placement
    /// says so.
    fn place(&self, lane: Lane, operation: &str, on: On) -> Lane {
        match (lane, on, &self.inline) {
            (Lane::Serving, On::Any, Some(inline))
                if inline.placement.place(operation) == Place::Inline =>
            {
                Lane::Inline
            }
            _ => lane,
        }
    }

    /// Renews the grants (a single granted file's link or copy) before a
    /// call that must be over by `deadline`, on the thread that runs it.
    fn renew(&self, deadline: Instant) -> Result<(), Failed> {
        self.grants
            .renew(&self.name, deadline)
            .map_err(|error| Failed::Answered(self.unprepared(error)))
    }

    /// The fault of a call whose thread ended without an outcome.
    fn thread_ended(&self, operation: &str, failure: &tokio::task::JoinError) -> Failed {
        Failed::Faulted(
            FaultKind::Host,
            format!(
                "plugin {} failed in {operation}: its thread ended: {failure}",
                self.name
            ),
        )
    }

    /// Takes a call slot, an idle instance if the call may run on one and
    /// one is kept, and the rest of the instance's share of the descriptor
    /// budget.
    async fn hold(&self, lane: Lane, on: On) -> Result<Held, ProviderError> {
        let slot = self
            .call_slots
            .clone()
            .acquire_owned()
            .await
            .expect("the call semaphore is never closed");
        let reused = match on {
            On::Any => self.idle(lane).take(),
            On::Bare | On::Started => None,
        };
        let max_handles = self.grants.limits.max_handles;
        let whole = max_handles.saturating_add(self.preopened);
        let already = reused.as_ref().map_or(0, Instance::held_handles);
        let more = whole.saturating_sub(u32::try_from(already).unwrap_or(u32::MAX));
        let handles = match self.handles.try_reserve(more) {
            Some(handles) => Some(handles),
            None => {
                drop_every_idle_instance();
                self.handles.reserve(more).await
            }
        };
        let handles = handles.ok_or_else(|| {
            ProviderError::Unavailable(format!(
                "plugin {}: its max_handles of {max_handles} (and {} preopened directories) exceeds the host's descriptor budget of {}",
                self.name,
                self.preopened,
                self.handles.total()
            ))
        })?;
        Ok((slot, reused, handles))
    }

    /// Reads the file `located` names for `path`, under one of the plugin's
    /// call slots, in a task of its own (never in the loop that reads stdin,
    /// where a read runs until it first waits): a file of at most
    /// [`READ_IN_TASK_BYTES`] right there, a larger one on tokio's blocking
    /// pool, where the slot is held until the read returns, even after the
    /// caller gave up on it at the time limit.
    async fn read_located_file(
        self: &Arc<Self>,
        path: &str,
        located: locate::Located,
    ) -> Result<Option<ReadResult>, ProviderError> {
        let timeout = self.grants.limits.timeout();
        let slot =
            match tokio::time::timeout(timeout, self.call_slots.clone().acquire_owned()).await {
                Ok(slot) => slot.expect("the call semaphore is never closed"),
                Err(_) => return Err(self.busy()),
            };
        // The first wait: from here on the read runs in a task of its own.
        tokio::task::yield_now().await;
        let Some(opened) = locate::open(&self.name, &self.grants, path, &located)? else {
            return Ok(None);
        };
        if opened.size <= READ_IN_TASK_BYTES {
            let answer = locate::read(&self.grants, path, &opened, located);
            drop(slot);
            return Ok(answer);
        }
        let shared = self.clone();
        let owned = path.to_owned();
        let read = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            locate::read(&shared.grants, &owned, &opened, located)
        });
        match tokio::time::timeout(timeout, read).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(failure)) => Err(ProviderError::Fault(format!(
                "plugin {}: reading the file it located for {path:?} failed: {failure}",
                self.name
            ))),
            Err(_) => Err(ProviderError::Unavailable(format!(
                "plugin {}: reading the file it located for {path:?} took longer than its time limit of {} ms",
                self.name, self.grants.limits.timeout_ms
            ))),
        }
    }

    /// The error of a call that never got a call slot (or its share of the
    /// host's descriptor budget) within the plugin's time limit.
    fn busy(&self) -> ProviderError {
        ProviderError::Unavailable(format!(
            "plugin {} is busy: its {} call slots (or the host's descriptor budget) stayed taken for {} ms",
            self.name, self.grants.limits.concurrent_calls, self.grants.limits.timeout_ms
        ))
    }

    /// Why a call is refused at once: its plugin's call slots are all held,
    /// `stuck` of them by calls stuck past their time limit.
    fn wedged(&self, stuck: usize) -> ProviderError {
        ProviderError::Unavailable(format!(
            "plugin {} is wedged: {stuck} of its {} call slots are held by calls stuck past their time limit of {} ms, each waiting on an operation that has not returned; refused at once until one ends",
            self.name, self.grants.limits.concurrent_calls, self.grants.limits.timeout_ms
        ))
    }

    fn timed_out(&self, operation: &str) -> Failed {
        Failed::Faulted(FaultKind::Timeout, self.past_time_limit(operation))
    }

    fn past_time_limit(&self, operation: &str) -> String {
        format!(
            "plugin {} exceeded its time limit of {} ms in {operation}",
            self.name, self.grants.limits.timeout_ms
        )
    }

    /// The error of a call whose grants could not be given to its instance.
    fn unprepared(&self, error: anyhow::Error) -> ProviderError {
        ProviderError::Unavailable(format!("plugin {}: {error:#}", self.name))
    }

    /// The idle instances of `lane`.
    fn idle(&self, lane: Lane) -> &Arc<Idle> {
        match (lane, &self.locating, &self.inline) {
            (Lane::Locating, Some(locating), _) => &locating.idle,
            (Lane::Inline, _, Some(inline)) => &inline.idle,
            _ => &self.idle,
        }
    }

    /// A store for an instance of `lane`, for a call that must be over by
    /// `deadline`.
    fn new_store(&self, lane: Lane, deadline: Instant) -> Result<Store<Sandbox>, ProviderError> {
        let mut sandbox = self
            .grants
            .sandbox(&self.name, lane.blocking())
            .map_err(|error| self.unprepared(error))?;
        sandbox.limiter().begin_call(deadline);
        let mut store = Store::new(self.pre.engine(), sandbox);
        store.limiter(|sandbox| sandbox.limiter());
        // The deadline falls due only while the plugin's code runs: each tick
        // there is charged to its CPU budget, then the call yields so the
        // wall-clock limit can act and the runtime stays responsive. It
        // yields through tokio's `yield_now`, which lets the worker poll for
        // I/O before it runs the call again: a plain yield requeues the task
        // at once, and a worker whose every task spins polls I/O only every
        // 61 of them (another client's ping waited up to a second).
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut context| {
            if context.data_mut().limiter().tick() {
                Ok(UpdateDeadline::YieldCustom(
                    1,
                    Box::pin(tokio::task::yield_now()),
                ))
            } else {
                Err(wasmtime::Error::msg("CPU time limit reached"))
            }
        });
        Ok(store)
    }

    /// Runs the call on `reused`, or on a fresh instance holding `handles`,
    /// by `deadline`, and keeps the instance if the call answered. Keeping
    /// does not await, so a time limit cannot cut in between the answer and
    /// the keeping.
    /// The engine's epoch clock runs throughout: instantiation, `init` and
    /// the call may all run plugin code.
    async fn call<T>(
        &self,
        lane: Lane,
        (reused, handles): (Option<Instance>, OwnedSemaphorePermit),
        operation: &'static str,
        on: On,
        deadline: Instant,
        call: impl CallFn<T>,
    ) -> Result<T, Failed> {
        let _running = self.epoch.running();
        let mut instance = match reused {
            Some(mut instance) => {
                instance.begin_call(handles, deadline);
                instance
            }
            None => self.instantiate(lane, operation, deadline, handles).await?,
        };
        let mut outcome = self.call_on(&mut instance, operation, on, &call).await;
        if let Err(InstanceFailure::BeforeRunning(Failed::Faulted(_, fault))) = &outcome {
            tracing::debug!(
                plugin = %self.name,
                operation,
                "{fault}: none of its code ran, so the call runs once more, on a fresh instance"
            );
            instance = self
                .instantiate(lane, operation, deadline, instance.into_handles())
                .await?;
            outcome = self.call_on(&mut instance, operation, on, &call).await;
        }
        let outcome = outcome.map_err(InstanceFailure::into_failed);
        if answered(&outcome) {
            self.idle(lane).keep(instance, &self.handles);
        }
        outcome
    }

    /// A fresh instance of `lane` from the pool, in a new store, for a call
    /// that must be over by `deadline`.
    async fn instantiate(
        &self,
        lane: Lane,
        operation: &'static str,
        deadline: Instant,
        handles: OwnedSemaphorePermit,
    ) -> Result<Instance, Failed> {
        let mut metered = self.meter.store(self.new_store(lane, deadline)?);
        let mut instantiated = self.exports(lane, &mut metered.store).await;
        if instantiated
            .as_ref()
            .is_err_and(|error| error.is::<PoolConcurrencyLimitError>())
        {
            // Idle instances may hold the slots: give them back and try once
            // more, in a store that holds no half-made instance.
            drop_every_idle_instance();
            metered = self.meter.store(self.new_store(lane, deadline)?);
            instantiated = self.exports(lane, &mut metered.store).await;
        }
        match instantiated {
            Ok(exports) => Ok(Instance::new(metered, exports, handles)),
            Err(error) if error.is::<PoolConcurrencyLimitError>() => {
                Err(Failed::Answered(ProviderError::Unavailable(format!(
                    "plugin {} cannot start an instance for {operation}: {error}",
                    self.name
                ))))
            }
            Err(error) => Err(self.fault(operation, &metered.store, error)),
        }
    }

    /// Instantiates the component in `store`, with `locate` in its lane.
    async fn exports(&self, lane: Lane, store: &mut Store<Sandbox>) -> wasmtime::Result<Exports> {
        let instance = self.pre.instantiate_async(&mut *store).await?;
        let plugin = self.indices.load(&mut *store, &instance)?;
        let locate = match (lane, &self.locating) {
            (Lane::Locating, Some(locating)) => {
                Some(instance.get_typed_func(&mut *store, locating.export)?)
            }
            _ => None,
        };
        Ok(Exports::new(plugin, locate))
    }

    /// `init` unless the call is bare or the instance has run it, then the
    /// call.
    async fn call_on<T>(
        &self,
        instance: &mut Instance,
        operation: &'static str,
        on: On,
        call: &impl CallFn<T>,
    ) -> Result<T, InstanceFailure> {
        if on != On::Bare && !instance.initialised {
            let (store, exports) = instance.parts();
            match exports
                .provider()
                .call_init(&mut *store, &self.config)
                .await
            {
                Err(error) => return Err(self.failure("init", store, error)),
                Ok(Err(error)) => {
                    return Err(InstanceFailure::Failed(Failed::Answered(
                        ProviderError::Unavailable(format!(
                            "plugin {} failed to start: {}",
                            self.name,
                            ProviderError::from(error)
                        )),
                    )));
                }
                Ok(Ok(())) => instance.initialised = true,
            }
        }
        let (store, exports) = instance.parts();
        match call(&mut *store, exports).await {
            Ok(answer) => {
                answer.map_err(|error| InstanceFailure::Failed(Failed::Answered(error.into())))
            }
            Err(error) => Err(self.failure(operation, store, error)),
        }
    }

    /// A failed call: [`InstanceFailure::BeforeRunning`] if it trapped in the plugin's
    /// allocator before any of its own code ran, otherwise its fault.
    fn failure(
        &self,
        operation: &str,
        store: &Store<Sandbox>,
        error: wasmtime::Error,
    ) -> InstanceFailure {
        let allocating = trapped_in_allocator(&error);
        let fault = self.fault(operation, store, error);
        if allocating {
            InstanceFailure::BeforeRunning(fault)
        } else {
            InstanceFailure::Failed(fault)
        }
    }

    /// Describes a failed call, naming the limit it ran into if it ran into one.
    fn fault(&self, operation: &str, store: &Store<Sandbox>, error: wasmtime::Error) -> Failed {
        let limits = &self.grants.limits;
        let table_full = matches!(
            error.downcast_ref::<ResourceTableError>(),
            Some(ResourceTableError::Full)
        );
        let (kind, message) = match store.data().limits_reached().exceeded() {
            Some(Exceeded::Memory) => (
                FaultKind::Memory,
                format!(
                    "plugin {} exceeded its memory limit of {} MiB in {operation}",
                    self.name, limits.memory_mib
                ),
            ),
            Some(Exceeded::Table) => (
                FaultKind::Table,
                format!(
                    "plugin {} exceeded its table limit of {} elements in {operation}",
                    self.name, limits.table_elements
                ),
            ),
            Some(Exceeded::Cpu) => (
                FaultKind::Cpu,
                format!(
                    "plugin {} exceeded its CPU time limit of {} ms in {operation}",
                    self.name, limits.cpu_ms
                ),
            ),
            Some(Exceeded::Time) => (FaultKind::Timeout, self.past_time_limit(operation)),
            None if table_full => (
                FaultKind::Handles,
                format!(
                    "plugin {} exceeded its limit of {} handles (open files, sockets, streams, HTTP fields) in {operation}",
                    self.name, limits.max_handles
                ),
            ),
            None => match error.downcast_ref::<Trap>().inspect(|_| {
                tracing::debug!(plugin = %self.name, operation, "its trap: {error:?}");
            }) {
                Some(Trap::StackOverflow) => (
                    FaultKind::Stack,
                    format!(
                        "plugin {} exceeded its stack limit of {} KiB in {operation}",
                        self.name, limits.stack_kib
                    ),
                ),
                Some(trap) => (
                    FaultKind::Trap,
                    format!("plugin {} trapped in {operation}: {trap}", self.name),
                ),
                None => (
                    FaultKind::Trap,
                    format!("plugin {} failed in {operation}: {error:#}", self.name),
                ),
            },
        };
        let message = match store.data().last_stderr_line() {
            Some(line) => format!("{message}; its last line on stderr: {line:?}"),
            None => message,
        };
        Failed::Faulted(kind, message)
    }
}

#[async_trait]
impl Provider for WasmPlugin {
    async fn list(&self, cursor: Option<String>) -> Result<Page<ResourceEntry>, ProviderError> {
        self.run(
            Lane::Serving,
            "list",
            On::Any,
            None,
            move |store, exports| {
                let cursor = cursor.clone();
                Box::pin(
                    async move { exports.provider().call_list(store, cursor.as_deref()).await },
                )
            },
        )
        .await
        .map(Into::into)
    }

    async fn templates(
        &self,
        cursor: Option<String>,
    ) -> Result<Page<TemplateEntry>, ProviderError> {
        self.run(
            Lane::Serving,
            "templates",
            On::Any,
            None,
            move |store, exports| {
                let cursor = cursor.clone();
                Box::pin(async move {
                    exports
                        .provider()
                        .call_templates(store, cursor.as_deref())
                        .await
                })
            },
        )
        .await
        .map(Into::into)
    }

    async fn read(&self, path: &str) -> Result<ReadResult, ProviderError> {
        let read = match self.read_located(path).await? {
            Some(read) => read,
            None => {
                let owned = path.to_owned();
                self.run(
                    Lane::Serving,
                    "read",
                    On::Any,
                    Some(path),
                    move |store, exports| {
                        let path = owned.clone();
                        Box::pin(async move { exports.provider().call_read(store, &path).await })
                    },
                )
                .await?
                .into()
            }
        };
        let bytes = read
            .contents
            .iter()
            .map(|content| content.body.byte_count());
        self.shared.load().meter.read(bytes.sum::<usize>() as u64);
        Ok(read)
    }

    async fn complete(&self, request: CompletionRequest) -> Result<Completion, ProviderError> {
        let key = format!("{} {}", request.path_template, request.argument);
        let request: super::bindings::resmux::provider::types::CompletionRequest = request.into();
        self.run(
            Lane::Serving,
            "complete",
            On::Any,
            Some(&key),
            move |store, exports| {
                let request = request.clone();
                Box::pin(async move { exports.provider().call_complete(store, &request).await })
            },
        )
        .await
        .map(Into::into)
    }

    async fn changes(&self, since: Option<String>) -> Result<ChangeReport, ProviderError> {
        self.run(
            Lane::Serving,
            "changes",
            On::Any,
            None,
            move |store, exports| {
                let since = since.clone();
                Box::pin(async move {
                    exports
                        .provider()
                        .call_changes(store, since.as_deref())
                        .await
                })
            },
        )
        .await
        .map(Into::into)
    }
}
