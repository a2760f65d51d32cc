//! What a plugin is asked: what the namespace asks of every provider
//! (listings, reads, completions, change reports), what the catalog asks
//! to prove it can serve (`about`, `start`), and a locating plugin's reads,
//! `locate` first and the file then read by the host.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;

use super::{Instances, On, Shared, WasmPlugin};
use crate::contract::{
    ChangeReport, Completion, CompletionRequest, Page, Provider, ProviderError, ReadResult,
    ResourceEntry, TemplateEntry,
};
use crate::runtime::bindings::PluginInfo;
use crate::runtime::locate;

impl WasmPlugin {
    /// What the plugin says about itself.
    pub async fn about(&self) -> Result<PluginInfo, ProviderError> {
        self.run(
            Instances::Serving,
            "about",
            On::Bare,
            None,
            |store, exports| Box::pin(async { exports.provider().call_about(store).await.map(Ok) }),
        )
        .await
    }

    /// Starts a fresh instance and runs `init`, to prove the plugin can
    /// serve; a locating plugin also starts an instance of its `locate`
    /// lane, which proves its `locate` export has the contract's type, and
    /// is read through `read` alone if `init` fails there without files.
    pub async fn start(&self) -> Result<(), ProviderError> {
        let started = |instances| {
            self.run(instances, "init", On::Started, None, |_, _| {
                Box::pin(async { Ok(Ok(())) })
            })
        };
        started(Instances::Serving).await?;
        let shared = self.shared.load_full();
        if let Some(locating) = &shared.locating
            && let Err(error) = started(Instances::Locating).await
        {
            locating.unable.store(true, Ordering::Relaxed);
            tracing::warn!(
                plugin = %shared.lasting.name,
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
                Instances::Locating,
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
            shared.lasting.health.record_success(Some(path));
        }
        Ok(answer)
    }
}

/// The largest located file read on a runtime thread (about 0.1 ms from the
/// page cache); a larger one is read on tokio's blocking pool, so that a
/// read holds a thread that serves others for no longer than that.
const READ_IN_TASK_BYTES: u64 = 1024 * 1024;

impl Shared {
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
        let timeout = self.lasting.grants.limits.timeout();
        let (slot, ()) = self.lasting.admission().wait(|| async { Ok(()) }).await?;
        // The first wait: from here on the read runs in a task of its own.
        tokio::task::yield_now().await;
        let Some(opened) = locate::open(&self.lasting.name, &self.lasting.grants, path, &located)?
        else {
            return Ok(None);
        };
        if opened.size <= READ_IN_TASK_BYTES {
            let answer = locate::read(&self.lasting.grants, path, &opened, located);
            drop(slot);
            return Ok(answer);
        }
        let shared = self.clone();
        let owned = path.to_owned();
        let read = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            locate::read(&shared.lasting.grants, &owned, &opened, located)
        });
        match tokio::time::timeout(timeout, read).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(failure)) => Err(ProviderError::Fault(format!(
                "plugin {}: reading the file it located for {path:?} failed: {failure}",
                self.lasting.name
            ))),
            Err(_) => Err(ProviderError::Unavailable(format!(
                "plugin {}: reading the file it located for {path:?} took longer than its time limit of {} ms",
                self.lasting.name, self.lasting.grants.limits.timeout_ms
            ))),
        }
    }
}

#[async_trait]
impl Provider for WasmPlugin {
    async fn list(&self, cursor: Option<String>) -> Result<Page<ResourceEntry>, ProviderError> {
        self.run(
            Instances::Serving,
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
            Instances::Serving,
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
                    Instances::Serving,
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
        self.shared
            .load()
            .lasting
            .meter
            .read(bytes.sum::<usize>() as u64);
        Ok(read)
    }

    async fn complete(&self, request: CompletionRequest) -> Result<Completion, ProviderError> {
        let key = format!("{} {}", request.path_template, request.argument);
        let request: crate::runtime::bindings::resmux::provider::types::CompletionRequest =
            request.into();
        self.run(
            Instances::Serving,
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

    /// Its calls (but `locate`'s) run in the task lane unless they may
    /// block a thread in a file operation (`Shared::run`).
    fn calls_run_in_place(&self) -> bool {
        !self.shared.load().lasting.may_block
    }

    async fn changes(&self, since: Option<String>) -> Result<ChangeReport, ProviderError> {
        self.run(
            Instances::Serving,
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
