//! One loaded plugin and the path of every call into it: a fresh store and
//! instance under the plugin's policy, `init` with the operator's config, the
//! call itself, all within the time limit. A store is never reused, so a trap
//! or a cancelled call leaves nothing behind.

use std::sync::Arc;

use async_trait::async_trait;
use wasmtime::component::ResourceTable;
use wasmtime::{Store, StoreLimits, StoreLimitsBuilder, Trap};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::{Guest, PluginInfo, PluginPre};
use super::output::PluginOutput;
use crate::contract::{
    ChangeReport, Completion, CompletionRequest, Page, Provider, ProviderError, ReadResult,
    ResourceEntry, TemplateEntry,
};
use crate::policy::Policy;
use crate::policy::network::HttpPolicy;

/// The host state of one plugin instance.
pub struct PluginState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    http_policy: HttpPolicy,
    table: ResourceTable,
    limits: StoreLimits,
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
}

type CallResult<T> = wasmtime::Result<Result<T, super::bindings::resmux::provider::types::Error>>;

impl WasmPlugin {
    pub(super) fn new(
        name: Arc<str>,
        pre: PluginPre<PluginState>,
        policy: Policy,
        config: Vec<(String, String)>,
    ) -> Self {
        Self {
            name,
            pre,
            policy,
            config,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
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
        self.policy.configure(&mut wasi).map_err(|error| {
            ProviderError::Unavailable(format!("plugin {}: {error:#}", self.name))
        })?;
        let limits = StoreLimitsBuilder::new()
            .memory_size(self.policy.limits.memory_bytes())
            .build();
        let mut store = Store::new(
            self.pre.engine(),
            PluginState {
                wasi: wasi.build(),
                http: WasiHttpCtx::new(),
                http_policy: HttpPolicy,
                table: ResourceTable::new(),
                limits,
            },
        );
        store.limiter(|state| &mut state.limits);
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        Ok(store)
    }

    /// Runs one call on a fresh instance, `init` first when `init` is set.
    async fn run<T>(
        &self,
        operation: &'static str,
        init: bool,
        call: impl AsyncFnOnce(&mut Store<PluginState>, &Guest) -> CallResult<T>,
    ) -> Result<T, ProviderError> {
        let work = async {
            let mut store = self.new_store()?;
            let plugin = self
                .pre
                .instantiate_async(&mut store)
                .await
                .map_err(|error| self.fault(operation, error))?;
            let guest = plugin.resmux_provider_provider();
            if init {
                guest
                    .call_init(&mut store, &self.config)
                    .await
                    .map_err(|error| self.fault("init", error))?
                    .map_err(|error| {
                        ProviderError::Unavailable(format!(
                            "plugin {} failed to start: {}",
                            self.name,
                            ProviderError::from(error)
                        ))
                    })?;
            }
            call(&mut store, guest)
                .await
                .map_err(|error| self.fault(operation, error))?
                .map_err(ProviderError::from)
        };
        let timeout = self.policy.limits.timeout();
        tokio::time::timeout(timeout, work)
            .await
            .unwrap_or_else(|_| {
                let message = format!(
                    "plugin {} exceeded its time limit of {} ms in {operation}",
                    self.name,
                    timeout.as_millis()
                );
                tracing::warn!(plugin = %self.name, operation, "{message}");
                Err(ProviderError::Fault(message))
            })
    }

    fn fault(&self, operation: &str, error: wasmtime::Error) -> ProviderError {
        let message = match error.downcast_ref::<Trap>() {
            Some(trap) => format!("plugin {} trapped in {operation}: {trap}", self.name),
            None => format!("plugin {} failed in {operation}: {error:#}", self.name),
        };
        tracing::warn!(plugin = %self.name, operation, "{message}");
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
