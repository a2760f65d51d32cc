//! Keeps a namespace in step with its plugin folder while resmux serves.
//!
//! The folder is watched (debounced, so a burst of writes is one change).
//! After each change the folder is read again: a new plugin is mounted, a
//! plugin whose component or manifest bytes changed is loaded anew and put in
//! place of the old one (calls in flight finish on the old one), and a plugin
//! whose files are gone is unmounted. A replacement that fails to load, such
//! as a half-copied component or a broken manifest, leaves the old version
//! serving and says why; the next change tries again. The directories and
//! files granted to each plugin are watched too: a change there (not a mere
//! read, such as the plugin's own) pokes the plugin's change report, so
//! subscribers hear of it without waiting for the next poll.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer};
use tokio::sync::mpsc;

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
    let (grant_events, mut grant_changes) = mpsc::unbounded_channel();
    let mut grant_watch = grant_watcher(grant_events)?;
    let mut live = LiveFolder {
        folder: folder.to_owned(),
        runtime,
        rules,
        namespace,
        serving: loaded.iter().map(serving).collect(),
    };
    let mut watched_grants = live.watch_grants(&mut grant_watch, &BTreeSet::new());
    tokio::spawn(async move {
        let _folder_watch = folder_watch;
        loop {
            tokio::select! {
                Some(events) = folder_changes.recv() => {
                    if let Err(error) = events {
                        tracing::warn!("watching the plugin folder: {error}");
                    }
                    live.sync().await;
                    watched_grants = live.watch_grants(&mut grant_watch, &watched_grants);
                }
                Some(mut paths) = grant_changes.recv() => {
                    // One poke for a burst of writes.
                    tokio::time::sleep(DEBOUNCE).await;
                    while let Ok(more) = grant_changes.try_recv() {
                        paths.extend(more);
                    }
                    live.poke_owners(paths.iter().map(PathBuf::as_path));
                }
                else => return,
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

/// Watches granted paths, passing on the paths of every change but reads
/// (an open, or a close after reading, is no change; the plugin's own reads
/// would otherwise poke its change report without end).
fn grant_watcher(paths: mpsc::UnboundedSender<Vec<PathBuf>>) -> Result<RecommendedWatcher> {
    notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
        Ok(event) if matches!(event.kind, EventKind::Access(_)) => {}
        // The receiver only goes away when the process ends.
        Ok(event) => drop(paths.send(event.paths)),
        Err(error) => tracing::warn!("watching granted paths: {error}"),
    })
    .context("cannot start watching granted paths")
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

    /// Watches every granted path now served, and stops watching those no
    /// longer granted; returns what is watched.
    fn watch_grants(
        &self,
        watcher: &mut dyn Watcher,
        watched: &BTreeSet<PathBuf>,
    ) -> BTreeSet<PathBuf> {
        let granted: BTreeSet<PathBuf> = self
            .serving
            .values()
            .flat_map(|serving| serving.granted.iter().cloned())
            .collect();
        for path in watched.difference(&granted) {
            let _ = watcher.unwatch(path);
        }
        let mut now_watched = BTreeSet::new();
        for path in granted {
            let already = watched.contains(&path);
            if already || watcher.watch(&path, RecursiveMode::Recursive).is_ok() {
                now_watched.insert(path);
            } else {
                tracing::warn!(path = %path.display(), "cannot watch a granted path; its changes are found by polling only");
            }
        }
        now_watched
    }

    /// Pokes the change report of every plugin granted one of `paths`.
    fn poke_owners<'a>(&self, paths: impl Iterator<Item = &'a Path>) {
        let mut owners = BTreeSet::new();
        for path in paths {
            for (scheme, serving) in &self.serving {
                if serving
                    .granted
                    .iter()
                    .any(|granted| path.starts_with(granted))
                {
                    owners.insert(scheme.as_str());
                }
            }
        }
        for scheme in owners {
            self.namespace.subscriptions().poke(scheme);
        }
    }
}
