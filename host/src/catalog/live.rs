//! Keeps a namespace in step with its plugin folder while resmux serves.
//!
//! The folder is watched (debounced, so a burst of writes is one change).
//! After each change the folder is read again: a new plugin is mounted, a
//! plugin whose component or manifest bytes changed is loaded anew and put in
//! place of the old one (calls in flight finish on the old one), and a plugin
//! whose files are gone is unmounted. A replacement that fails to load, such
//! as a half-copied component or a broken manifest, leaves the old version
//! serving and says why; the next change tries again. The directories and
//! files granted to each plugin are watched too ([`GrantWatch`], which never
//! leaves a grant): a change there (not a mere read, such as the plugin's
//! own) pokes the plugin's change report, so subscribers hear of it without
//! waiting for the next poll.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use notify::RecursiveMode;
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer};
use tokio::sync::mpsc;

use super::grant_watch::GrantWatch;
use super::{Fingerprint, Loaded, Rules, load, scan};
use crate::namespace::Namespace;
use crate::runtime::Runtime;

/// Quiet time after the last write before a change is acted on.
const DEBOUNCE: Duration = Duration::from_millis(300);

/// What serves one scheme.
struct Serving {
    declared_by: PathBuf,
    fingerprint: Fingerprint,
    /// Host paths granted to the plugin.
    granted: Vec<PathBuf>,
}

/// The folder, its rules, and what it serves.
struct LiveFolder {
    folder: PathBuf,
    runtime: Runtime,
    rules: Rules,
    namespace: Arc<Namespace>,
    serving: BTreeMap<String, Serving>,
    grants: GrantWatch,
}

/// Watches `folder` and applies every change to `namespace`, which serves
/// `loaded` now; runs until the process ends.
pub fn spawn(
    folder: &Path,
    runtime: Runtime,
    rules: Rules,
    namespace: Arc<Namespace>,
    loaded: &[Loaded],
) -> Result<()> {
    let (folder_events, mut folder_changes) = mpsc::unbounded_channel();
    let mut folder_watch = debouncer(folder_events)?;
    folder_watch
        .watcher()
        .watch(folder, RecursiveMode::NonRecursive)
        .with_context(|| format!("cannot watch plugin folder {}", folder.display()))?;
    let mut live = LiveFolder {
        folder: folder.to_owned(),
        runtime,
        rules,
        namespace,
        serving: loaded.iter().map(serving).collect(),
        grants: GrantWatch::start()?,
    };
    tokio::spawn(async move {
        let _folder_watch = folder_watch;
        live.watch_grants().await;
        loop {
            tokio::select! {
                events = folder_changes.recv() => {
                    let Some(events) = events else {
                        return;
                    };
                    if let Err(error) = events {
                        tracing::warn!("watching the plugin folder: {error}");
                    }
                    live.sync().await;
                    live.watch_grants().await;
                }
                () = live.grants.arrival() => {
                    // One poke for a burst of writes.
                    tokio::time::sleep(DEBOUNCE).await;
                    live.poke_changed().await;
                }
            }
        }
    });
    Ok(())
}

fn debouncer(
    events: mpsc::UnboundedSender<DebounceEventResult>,
) -> Result<Debouncer<notify::RecommendedWatcher>> {
    new_debouncer(DEBOUNCE, move |result| {
        // The receiver only goes away when the process ends.
        let _ = events.send(result);
    })
    .context("cannot start watching files")
}

/// Runs `work`, which opens and reads directories, on tokio's blocking
/// pool rather than on a thread that serves requests.
async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(work)
        .await
        .inspect_err(|error| tracing::error!("watching granted paths: {error}"))
        .ok()
}

fn serving(loaded: &Loaded) -> (String, Serving) {
    (
        loaded.entry.scheme.clone(),
        Serving {
            declared_by: loaded.entry.declared_by.clone(),
            fingerprint: loaded.fingerprint.clone(),
            granted: loaded.plugin.policy().watched_paths(),
        },
    )
}

impl LiveFolder {
    /// Reads the folder again and brings the namespace in line with it.
    async fn sync(&mut self) {
        let (entries, failures) = match scan(&self.folder) {
            Ok(scanned) => scanned,
            Err(error) => {
                tracing::error!("cannot read the plugin folder: {error:#}");
                return;
            }
        };
        let failed: BTreeSet<&Path> = failures
            .iter()
            .map(|failure| failure.declared_by.as_path())
            .collect();
        for failure in &failures {
            tracing::error!(
                plugin = %failure.declared_by.display(),
                "plugin not loaded: {:#}",
                failure.error
            );
        }
        let wanted: BTreeSet<String> = entries.iter().map(|entry| entry.scheme.clone()).collect();
        let gone: Vec<String> = self
            .serving
            .iter()
            .filter(|(scheme, serving)| {
                !wanted.contains(*scheme) && !failed.contains(serving.declared_by.as_path())
            })
            .map(|(scheme, _)| scheme.clone())
            .collect();
        for scheme in gone {
            self.serving.remove(&scheme);
            self.namespace.unmount(&scheme);
            tracing::info!(scheme, "plugin removed");
        }
        for entry in entries {
            let scheme = entry.scheme.clone();
            let unchanged = self.serving.get(&scheme).is_some_and(|serving| {
                serving.declared_by == entry.declared_by
                    && Fingerprint::of(&entry).is_ok_and(|now| now == serving.fingerprint)
            });
            if unchanged {
                continue;
            }
            let declared_by = entry.declared_by.clone();
            let replacing = self.serving.contains_key(&scheme);
            match load(&self.runtime, entry, &self.rules).await {
                Ok(loaded) => {
                    let settings = loaded.settings();
                    let swap = self
                        .namespace
                        .replace(&scheme, loaded.plugin.clone(), settings);
                    match swap {
                        Ok(()) => {
                            let (_, serving) = serving(&loaded);
                            self.serving.insert(scheme.clone(), serving);
                            let what = if replacing { "replaced" } else { "added" };
                            tracing::info!(scheme, "plugin {what}");
                        }
                        Err(error) => tracing::error!(scheme, "plugin not mounted: {error}"),
                    }
                }
                Err(error) if replacing => tracing::error!(
                    plugin = %declared_by.display(),
                    "plugin not replaced, the previous version keeps serving: {error:#}"
                ),
                Err(error) => tracing::error!(
                    plugin = %declared_by.display(),
                    "plugin not loaded: {error:#}"
                ),
            }
        }
    }

    /// Watches the paths granted to the plugins now served, and stops
    /// watching those no longer granted.
    async fn watch_grants(&self) {
        let grants = self.grants.clone();
        let granted: BTreeMap<String, Vec<PathBuf>> = self
            .serving
            .iter()
            .map(|(scheme, serving)| (scheme.clone(), serving.granted.clone()))
            .collect();
        off_runtime(move || grants.follow(granted)).await;
    }

    /// Pokes the change report of every plugin whose granted paths changed.
    async fn poke_changed(&self) {
        let grants = self.grants.clone();
        let poked = off_runtime(move || grants.settle()).await;
        for scheme in poked.unwrap_or_default() {
            self.namespace.subscriptions().poke(&scheme);
        }
    }
}
