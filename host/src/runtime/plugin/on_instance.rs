//! One call on one instance of a plugin's code: a store under the plugin's
//! grants, its time limit and CPU budget charged tick by tick; an instance
//! kept idle or a fresh one from the engine's pool (once more after idle
//! instances are given back, should the pool be full); `init` with the
//! operator's config once per instance; the call; and the instance kept for
//! the next call if the call answered. A call that trapped in the plugin's
//! allocator before any of its own code ran runs once more, on a fresh
//! instance ([`InstanceFailure::BeforeRunning`]).

use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;
use wasmtime::{PoolConcurrencyLimitError, Store, UpdateDeadline};

use super::{CallFn, Instances, On, Shared};
use crate::contract::ProviderError;
use crate::grants::Sandbox;
use crate::runtime::call::{Failed, answered};
use crate::runtime::fault;
use crate::runtime::instance::{Exports, Instance, drop_every_idle_instance};

/// How a call on one instance failed.
pub(super) enum InstanceFailure {
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

impl Shared {
    /// A store for one of `instances`, for a call that must be over by
    /// `deadline`.
    fn new_store(
        &self,
        instances: Instances,
        deadline: Instant,
    ) -> Result<Store<Sandbox>, ProviderError> {
        let mut sandbox = self
            .lasting
            .grants
            .sandbox(&self.lasting.name, instances.blocking())
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
    pub(super) async fn call<T>(
        &self,
        instances: Instances,
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
            None => {
                self.instantiate(instances, operation, deadline, handles)
                    .await?
            }
        };
        let mut outcome = self.call_on(&mut instance, operation, on, &call).await;
        if let Err(InstanceFailure::BeforeRunning(Failed::Faulted(_, fault))) = &outcome {
            tracing::debug!(
                plugin = %self.lasting.name,
                operation,
                "{fault}: none of its code ran, so the call runs once more, on a fresh instance"
            );
            instance = self
                .instantiate(instances, operation, deadline, instance.into_handles())
                .await?;
            outcome = self.call_on(&mut instance, operation, on, &call).await;
        }
        let outcome = outcome.map_err(InstanceFailure::into_failed);
        if answered(&outcome) {
            self.idle(instances).keep(instance, &self.lasting.handles);
        }
        outcome
    }

    /// A fresh one of `instances` from the pool, in a new store, for a call
    /// that must be over by `deadline`.
    async fn instantiate(
        &self,
        instances: Instances,
        operation: &'static str,
        deadline: Instant,
        handles: OwnedSemaphorePermit,
    ) -> Result<Instance, Failed> {
        let mut metered = self
            .lasting
            .meter
            .store(self.new_store(instances, deadline)?);
        let mut instantiated = self.exports(instances, &mut metered.store).await;
        if instantiated
            .as_ref()
            .is_err_and(|error| error.is::<PoolConcurrencyLimitError>())
        {
            // Idle instances may hold the slots: give them back and try once
            // more, in a store that holds no half-made instance.
            drop_every_idle_instance();
            metered = self
                .lasting
                .meter
                .store(self.new_store(instances, deadline)?);
            instantiated = self.exports(instances, &mut metered.store).await;
        }
        match instantiated {
            Ok(exports) => Ok(Instance::new(metered, exports, handles)),
            Err(error) if error.is::<PoolConcurrencyLimitError>() => {
                Err(Failed::Answered(ProviderError::Unavailable(format!(
                    "plugin {} cannot start an instance for {operation}: {error}",
                    self.lasting.name
                ))))
            }
            Err(error) => Err(self.fault(operation, &metered.store, error)),
        }
    }

    /// Instantiates the component in `store`, with `locate` in its lane.
    async fn exports(
        &self,
        instances: Instances,
        store: &mut Store<Sandbox>,
    ) -> wasmtime::Result<Exports> {
        let instance = self.pre.instantiate_async(&mut *store).await?;
        let plugin = self.indices.load(&mut *store, &instance)?;
        let locate = match (instances, &self.locating) {
            (Instances::Locating, Some(locating)) => {
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
                .call_init(&mut *store, &self.lasting.config)
                .await
            {
                Err(error) => return Err(self.failure("init", store, error)),
                Ok(Err(error)) => {
                    return Err(InstanceFailure::Failed(Failed::Answered(
                        ProviderError::Unavailable(format!(
                            "plugin {} failed to start: {}",
                            self.lasting.name,
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
        let allocating = fault::trapped_in_allocator(&error);
        let fault = self.fault(operation, store, error);
        if allocating {
            InstanceFailure::BeforeRunning(fault)
        } else {
            InstanceFailure::Failed(fault)
        }
    }

    /// Describes a failed call, naming the limit it ran into if it ran into one.
    fn fault(&self, operation: &str, store: &Store<Sandbox>, error: wasmtime::Error) -> Failed {
        let (kind, message) = fault::describe(
            &self.lasting.name,
            &self.lasting.grants.limits,
            operation,
            store,
            &error,
        );
        Failed::Faulted(kind, message)
    }
}
