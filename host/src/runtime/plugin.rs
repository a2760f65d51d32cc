//! One loaded plugin and the path of every call into it: a slot among the
//! plugin's concurrent calls, a fresh store and instance under its policy,
//! `init` with the operator's config, the call itself, all within the time
//! limit. A store is never reused, so a trap or a cancelled call leaves
//! nothing behind. Faults are counted, and a plugin that keeps faulting is
//! quarantined.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use tokio::sync::Semaphore;
use wasmtime::component::ResourceTable;
use wasmtime::{Store, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::EPOCH_TICK;
use super::bindings::{Guest, PluginInfo, PluginPre};
use super::health::{FAULTS_BEFORE_QUARANTINE, Health};
use super::output::PluginOutput;
use crate::contract::{
    ChangeReport, Completion, CompletionRequest, Page, Provider, ProviderError, ReadResult,
    ResourceEntry, TemplateEntry,
};
use crate::policy::Policy;
use crate::policy::limits::{Exceeded, StoreLimiter};
use crate::policy::network::HttpPolicy;

/// The host state of one plugin instance.
pub struct PluginState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    http_policy: HttpPolicy,
    table: ResourceTable,
    limiter: StoreLimiter,
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for PluginState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_policy,
        }
    }
}

/// A plugin ready to serve calls.
pub struct WasmPlugin {
    name: Arc<str>,
    pre: PluginPre<PluginState>,
    policy: Policy,
    config: Vec<(String, String)>,
    call_slots: Semaphore,
    health: Health,
}

type CallResult<T> = wasmtime::Result<Result<T, super::bindings::resmux::provider::types::Error>>;

impl WasmPlugin {
    pub(super) fn new(
        name: Arc<str>,
        pre: PluginPre<PluginState>,
        policy: Policy,
        config: Vec<(String, String)>,
    ) -> Self {
        let call_slots = Semaphore::new(policy.limits.concurrent_calls as usize);
        Self {
            name,
            pre,
            policy,
            config,
            call_slots,
            health: Health::default(),
        }
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// What the plugin says about itself.
    pub async fn about(&self) -> Result<PluginInfo, ProviderError> {
        self.run("about", false, async |store, guest| {
            guest.call_about(store).await.map(Ok)
        })
        .await
    }

    /// Starts an instance and runs `init`, to prove the plugin can serve.
    pub async fn start(&self) -> Result<(), ProviderError> {
        self.run("init", true, async |_, _| Ok(Ok(()))).await
    }

    fn new_store(&self) -> Result<Store<PluginState>, ProviderError> {
        let mut wasi = WasiCtxBuilder::new();
        // File operations run on the calling thread instead of tokio's blocking
        // pool: a 1 KiB read through the files plugin drops from about 370 us
        // to about 50 us (benches/read_path.rs). Each is one short syscall on
        // a granted local path, and the call's time limit still applies.
        wasi.allow_blocking_current_thread(true)
            .stdout(PluginOutput::stdout(self.name.clone()))
            .stderr(PluginOutput::stderr(self.name.clone()));
        self.policy
            .configure(&self.name, &mut wasi)
            .map_err(|error| {
                ProviderError::Unavailable(format!("plugin {}: {error:#}", self.name))
            })?;
        let mut store = Store::new(
            self.pre.engine(),
            PluginState {
                wasi: wasi.build(),
                http: WasiHttpCtx::new(),
                http_policy: HttpPolicy::new(self.name.clone(), self.policy.network.clone()),
                table: ResourceTable::new(),
                limiter: self.policy.limits.limiter(EPOCH_TICK),
            },
        );
        store.limiter(|state| &mut state.limiter);
        // The deadline falls due only while the plugin's code runs: each tick
        // there is charged to its CPU budget, then the call yields so the
        // runtime stays responsive and the wall-clock limit can act.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut context| {
            if context.data_mut().limiter.tick() {
                Ok(UpdateDeadline::Yield(1))
            } else {
                Err(wasmtime::Error::msg("CPU time limit reached"))
            }
        });
        Ok(store)
    }

    /// Runs one call on a fresh instance, `init` first when `init` is set:
    /// refused at once while the plugin is quarantined, queued while all its
    /// call slots are taken, and bounded by its time limit throughout.
    async fn run<T>(
        &self,
        operation: &'static str,
        init: bool,
        call: impl AsyncFnOnce(&mut Store<PluginState>, &Guest) -> CallResult<T>,
    ) -> Result<T, ProviderError> {
        if let Some(left) = self.health.quarantine_left() {
            return Err(ProviderError::Unavailable(format!(
                "plugin {} is quarantined for another {} ms after {FAULTS_BEFORE_QUARANTINE} faults in a row",
                self.name,
                left.as_millis()
            )));
        }
        let timeout = self.policy.limits.timeout();
        let started = Instant::now();
        let Ok(slot) = tokio::time::timeout(timeout, self.call_slots.acquire()).await else {
            return Err(ProviderError::Unavailable(format!(
                "plugin {} is busy: its {} call slots stayed taken for {} ms",
                self.name,
                self.policy.limits.concurrent_calls,
                timeout.as_millis()
            )));
        };
        let _slot = slot.expect("the call semaphore is never closed");
        let left = timeout.saturating_sub(started.elapsed());
        let outcome = tokio::time::timeout(left, self.call_fresh(operation, init, call))
            .await
            .unwrap_or_else(|_| {
                Err(ProviderError::Fault(format!(
                    "plugin {} exceeded its time limit of {} ms in {operation}",
                    self.name,
                    timeout.as_millis()
                )))
            });
        match &outcome {
            Err(ProviderError::Fault(message)) => {
                tracing::warn!(plugin = %self.name, operation, "{message}");
                if let Some(backoff) = self.health.record_fault() {
                    tracing::error!(
                        plugin = %self.name,
                        "plugin quarantined for {} ms after {FAULTS_BEFORE_QUARANTINE} faults in a row",
                        backoff.as_millis()
                    );
                }
            }
            _ => self.health.record_success(),
        }
        outcome
    }

    async fn call_fresh<T>(
        &self,
        operation: &'static str,
        init: bool,
        call: impl AsyncFnOnce(&mut Store<PluginState>, &Guest) -> CallResult<T>,
    ) -> Result<T, ProviderError> {
        let mut store = self.new_store()?;
        let plugin = match self.pre.instantiate_async(&mut store).await {
            Ok(plugin) => plugin,
            Err(error) => return Err(self.fault(operation, &store, error)),
        };
        let guest = plugin.resmux_provider_provider();
        if init {
            match guest.call_init(&mut store, &self.config).await {
                Err(error) => return Err(self.fault("init", &store, error)),
                Ok(Err(error)) => {
                    return Err(ProviderError::Unavailable(format!(
                        "plugin {} failed to start: {}",
                        self.name,
                        ProviderError::from(error)
                    )));
                }
                Ok(Ok(())) => {}
            }
        }
        match call(&mut store, guest).await {
            Ok(answer) => answer.map_err(ProviderError::from),
            Err(error) => Err(self.fault(operation, &store, error)),
        }
    }

    /// Describes a failed call, naming the limit it ran into if it ran into one.
    fn fault(
        &self,
        operation: &str,
        store: &Store<PluginState>,
        error: wasmtime::Error,
    ) -> ProviderError {
        let limits = &self.policy.limits;
        let message = match store.data().limiter.exceeded() {
            Some(Exceeded::Memory) => format!(
                "plugin {} exceeded its memory limit of {} MiB in {operation}",
                self.name, limits.memory_mib
            ),
            Some(Exceeded::Table) => format!(
                "plugin {} exceeded its table limit of {} elements in {operation}",
                self.name, limits.table_elements
            ),
            Some(Exceeded::Cpu) => format!(
                "plugin {} exceeded its CPU time limit of {} ms in {operation}",
                self.name, limits.cpu_ms
            ),
            None => match error.downcast_ref::<Trap>() {
                Some(Trap::StackOverflow) => format!(
                    "plugin {} exceeded its stack limit of {} KiB in {operation}",
                    self.name, limits.stack_kib
                ),
                Some(trap) => format!("plugin {} trapped in {operation}: {trap}", self.name),
                None => format!("plugin {} failed in {operation}: {error:#}", self.name),
            },
        };
        ProviderError::Fault(message)
    }
}

#[async_trait]
impl Provider for WasmPlugin {
    async fn list(&self, cursor: Option<String>) -> Result<Page<ResourceEntry>, ProviderError> {
        self.run("list", true, async |store, guest| {
            guest.call_list(store, cursor.as_deref()).await
        })
        .await
        .map(Into::into)
    }

    async fn templates(
        &self,
        cursor: Option<String>,
    ) -> Result<Page<TemplateEntry>, ProviderError> {
        self.run("templates", true, async |store, guest| {
            guest.call_templates(store, cursor.as_deref()).await
        })
        .await
        .map(Into::into)
    }

    async fn read(&self, path: &str) -> Result<ReadResult, ProviderError> {
        self.run("read", true, async |store, guest| {
            guest.call_read(store, path).await
        })
        .await
        .map(Into::into)
    }

    async fn complete(&self, request: CompletionRequest) -> Result<Completion, ProviderError> {
        let request = request.into();
        self.run("complete", true, async |store, guest| {
            guest.call_complete(store, &request).await
        })
        .await
        .map(Into::into)
    }

    async fn changes(&self, since: Option<String>) -> Result<ChangeReport, ProviderError> {
        self.run("changes", true, async |store, guest| {
            guest.call_changes(store, since.as_deref()).await
        })
        .await
        .map(Into::into)
    }
}
