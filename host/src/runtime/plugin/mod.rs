//! One loaded plugin and what every call into it runs on: the instances of
//! its compiled code (an idle one of the plugin's, or a fresh store and
//! instance under its grants, its resource table capped at `max_handles`,
//! drawn from the engine's pool), `init` with the operator's config once per
//! instance, then the call itself. Each call takes the call path
//! ([`super::call`]): admitted (quarantine, a call slot, its share of the
//! host's descriptor budget), run in the lane its instances need, and
//! accounted for. An instance whose call answered may be kept for the next
//! ([`super::instance`]); one that trapped, ran into a limit or was
//! cancelled is dropped, so it leaves nothing behind; its fault is named
//! ([`super::fault`]). A plugin runs one compiled code at a time; its move
//! to the optimized tier ([`super::tiers`]) swaps that code between calls,
//! while its call slots, health and stuck calls stay with it ([`Lasting`]).
//! What a plugin is asked lives in [`operations`]; one call on one instance
//! in [`on_instance`].
//!
//! A plugin with file grants that exports `locate` is asked where a
//! resource's file is before it is asked to read it ([`super::locate`]).
//! `locate` runs on instances of its own, without the plugin's file grants,
//! which can only compute, so the call is a task that never waits for a
//! thread of its own and never blocks one. The host then reads the file
//! itself, under one of the plugin's call slots held until the read
//! returns.
//!
//! A plugin whose grants are directories on local filesystems runs each
//! operation's calls either inline or on threads of their own, whichever
//! its recent calls made cheaper, and all of them on its own blocking
//! threads ([`super::placement`]); any other plugin with file grants runs
//! them on threads of their own.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

mod on_instance;
mod operations;

use arc_swap::ArcSwap;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::Store;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre};

use super::bindings::PluginIndices;
use super::call::{self, Account, Admission, Cut, Failed, Lane, Work, WorkerShare};
use super::epoch::EpochClock;
use super::executor;
use super::fault;
use super::handles::HandleBudget;
use super::health::Health;
use super::instance::{Exports, Idle, Instance, drop_every_idle_instance};
use super::locate;
use super::meter::{FaultKind, Meter};
use super::placement::{Place, Placement};
use super::pool_share::PoolShare;
use super::stuck::Stuck;
use super::tiers::ToOptimize;
use crate::contract::ProviderError;
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
    /// Unique among the plugins this process loaded: tells a replaced
    /// plugin, still finishing its calls, from the one now serving its
    /// scheme.
    id: u64,
    grants: Grants,
    config: Vec<(String, String)>,
    call_slots: Arc<Semaphore>,
    /// The most of the plugins' runtime's workers its calls run on at once.
    workers: Arc<WorkerShare>,
    handles: HandleBudget,
    health: Arc<Health>,
    meter: Arc<Meter>,
    /// Its calls stuck past their time limit.
    stuck: Arc<Stuck>,
    /// Its file threads, if its calls are placed.
    placement: Option<Arc<Placement>>,
    /// Whether a call may block its thread in a file operation (the plugin
    /// has file grants): its calls then run on a thread of their own, or
    /// inline with their file operations on the plugin's file threads.
    may_block: bool,
    /// Directories each instance is given open, outside its resource table.
    preopened: u32,
}

/// What every call of a plugin needs, shared with the threads that run calls
/// of a plugin with file grants.
struct Shared {
    /// What stays with the plugin whichever code runs its calls.
    lasting: Lasting,
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
    /// Its idle instances made to run inline, if its calls are placed
    /// (`Lasting::placement`).
    inline_idle: Option<Arc<Idle>>,
    idle: Arc<Idle>,
}

/// A locating plugin's `locate` export, and its idle instances.
struct Locating {
    export: ComponentExportIndex,
    idle: Arc<Idle>,
    /// Set when `init` failed on an instance without file grants, as
    /// `locate`'s are, at start: the plugin's reads go to `read` alone.
    unable: AtomicBool,
}

/// Which instances a call runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Instances {
    /// The plugin's own: file operations block the thread, which is one of
    /// the call's own if the plugin has file grants.
    Serving,
    /// The plugin's own, with file operations on its blocking threads; the
    /// call is a task on the plugin's own runtime ([`super::placement`]).
    Inline,
    /// `locate`'s: no file grants, so the call is a task that never blocks
    /// its thread.
    Locating,
}

impl Instances {
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
            workers: Arc::new(WorkerShare::new(executor::one_plugins_workers())),
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

    /// Where this plugin's calls are admitted.
    fn admission(&self) -> Admission<'_> {
        Admission {
            plugin: &self.name,
            limits: &self.grants.limits,
            slots: &self.call_slots,
            health: &self.health,
            stuck: &self.stuck,
        }
    }

    /// Where this plugin's calls are accounted.
    fn account(&self) -> Account<'_> {
        Account {
            plugin: &self.name,
            id: self.id,
            health: &self.health,
            meter: &self.meter,
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
        let lasting = self.shared.load().lasting.clone();
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
        self.shared.load().lasting.id
    }

    pub fn grants(&self) -> Grants {
        self.shared.load().lasting.grants.clone()
    }

    /// Runs one call on one of `instances` that `on` asks for, on the
    /// call path ([`super::call`]): admitted, run in its lane within its
    /// time limit, and accounted for, a call about one `path` under that
    /// path's health record too.
    async fn run<T, F>(
        &self,
        instances: Instances,
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
        let call = shared.run(instances, operation, on, path, call);
        call::accounted(
            &shared.lasting.account(),
            operation,
            path,
            instances == Instances::Serving,
            call,
        )
        .await
    }
}

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
        let inline_idle = lasting.placement.as_ref().map(|_| lasting.new_idle());
        // Only a plugin with files can locate one.
        let locating = locate::export_of(&component)
            .filter(|_| lasting.may_block)
            .map(|export| Locating {
                export,
                idle: lasting.new_idle(),
                unable: AtomicBool::new(false),
            });
        let idle = lasting.new_idle();
        Self {
            lasting,
            _component: component,
            pool_share,
            epoch,
            pre,
            indices,
            locating,
            inline_idle,
            idle,
        }
    }

    /// The call itself, for [`WasmPlugin::run`]: admitted, then run in the
    /// lane its instances need. A call that may block its thread in a file
    /// operation runs on a thread of its own, or inline with its file
    /// operations on the plugin's file threads ([`super::placement`]), so
    /// that a FIFO or a hung mount holds only such a thread (and the call's
    /// slot) while the call fails at its time limit; any other is a task on
    /// the plugins' runtime. A call on a thread of its own renews the
    /// plugin's grants first, there (see `Shared::renew`).
    async fn run<T, F>(
        self: &Arc<Self>,
        instances: Instances,
        operation: &'static str,
        on: On,
        path: Option<&str>,
        call: F,
    ) -> Result<T, Failed>
    where
        T: Send + 'static,
        F: CallFn<T>,
    {
        let admission = self.lasting.admission();
        admission.check(path)?;
        let instances = self.place(instances, operation, on);
        let (slot, held) = admission
            .wait(|| self.hold(instances, on))
            .await
            .map_err(Failed::Busy)?;
        let limit = self.lasting.grants.limits.timeout();
        let deadline = Instant::now() + limit;
        let placement = self.lasting.placement.as_deref();
        let lane = match (instances, placement) {
            (Instances::Serving, placement) if self.lasting.may_block => Lane::OwnThread(placement),
            (Instances::Inline, Some(placement)) => Lane::Inline(placement),
            _ => Lane::Task(&self.lasting.workers),
        };
        // No grant to renew inline: a plugin with a granted file runs no
        // call inline (see `Grant::may_run_inline`); a plugin without file
        // grants has none, and `locate`'s instances get none.
        let renews = matches!(lane, Lane::OwnThread(_));
        let runner = self.clone();
        // The call's future is boxed where it runs, so that the lane, this
        // future and the read's above it each hold a pointer to it: a
        // future awaited inside another takes a slot of its own beside
        // the variables it was made of, so each layer would double it.
        let make = move || {
            Box::pin(async move {
                if renews {
                    runner.renew(deadline)?;
                }
                runner
                    .call(instances, held, operation, on, deadline, call)
                    .await
            })
        };
        let work = Work {
            operation,
            deadline,
            limit,
            stuck: &self.lasting.stuck,
            make,
        };
        match lane.run(slot, work).await {
            Ok(outcome) => outcome,
            Err(Cut::TimedOut) => Err(self.timed_out(operation)),
            Err(Cut::Ended(failure)) => Err(self.thread_ended(operation, &failure)),
        }
    }

    /// The instances a call of `operation` on `instances` runs on: a call
    /// that may be kept on the plugin's own instances runs inline when its
    /// placement says so.
    fn place(&self, instances: Instances, operation: &str, on: On) -> Instances {
        match (instances, on, &self.lasting.placement) {
            (Instances::Serving, On::Any, Some(placement))
                if placement.place(operation) == Place::Inline =>
            {
                Instances::Inline
            }
            _ => instances,
        }
    }

    /// Renews the grants (a single granted file's link or copy) before a
    /// call that must be over by `deadline`, on the thread that runs it.
    fn renew(&self, deadline: Instant) -> Result<(), Failed> {
        self.lasting
            .grants
            .renew(&self.lasting.name, deadline)
            .map_err(|error| Failed::Answered(self.unprepared(error)))
    }

    /// The fault of a call whose thread ended without an outcome.
    fn thread_ended(&self, operation: &str, failure: &str) -> Failed {
        Failed::Faulted(
            FaultKind::Host,
            format!(
                "plugin {} failed in {operation}: its thread ended: {failure}",
                self.lasting.name
            ),
        )
    }

    /// What a call holds beside its slot: an idle instance if the call may
    /// run on one and one is kept, and the rest of the instance's share of
    /// the descriptor budget.
    async fn hold(
        &self,
        instances: Instances,
        on: On,
    ) -> Result<(Option<Instance>, OwnedSemaphorePermit), ProviderError> {
        let reused = match on {
            On::Any => self.idle(instances).take(),
            On::Bare | On::Started => None,
        };
        let max_handles = self.lasting.grants.limits.max_handles;
        let whole = max_handles.saturating_add(self.lasting.preopened);
        let already = reused.as_ref().map_or(0, Instance::held_handles);
        let more = whole.saturating_sub(u32::try_from(already).unwrap_or(u32::MAX));
        let handles = match self.lasting.handles.try_reserve(more) {
            Some(handles) => Some(handles),
            None => {
                drop_every_idle_instance();
                self.lasting.handles.reserve(more).await
            }
        };
        let handles = handles.ok_or_else(|| {
            ProviderError::Unavailable(format!(
                "plugin {}: its max_handles of {max_handles} (and {} preopened directories) exceeds the host's descriptor budget of {}",
                self.lasting.name,
                self.lasting.preopened,
                self.lasting.handles.total()
            ))
        })?;
        Ok((reused, handles))
    }

    fn timed_out(&self, operation: &str) -> Failed {
        Failed::Faulted(
            FaultKind::Timeout,
            fault::past_time_limit(&self.lasting.name, &self.lasting.grants.limits, operation),
        )
    }

    /// The error of a call whose grants could not be given to its instance.
    fn unprepared(&self, error: anyhow::Error) -> ProviderError {
        ProviderError::Unavailable(format!("plugin {}: {error:#}", self.lasting.name))
    }

    /// The idle ones of `instances`.
    fn idle(&self, instances: Instances) -> &Arc<Idle> {
        match (instances, &self.locating, &self.inline_idle) {
            (Instances::Locating, Some(locating), _) => &locating.idle,
            (Instances::Inline, _, Some(inline_idle)) => inline_idle,
            _ => &self.idle,
        }
    }
}
