//! Watches what each plugin was granted, where Linux's inotify is not: on
//! Windows and macOS, through `notify`'s native backend
//! (`ReadDirectoryChangesW`, FSEvents), so that the live folder can poke a
//! plugin's change report when something there changes.
//!
//! Both backends watch a tree whole from one watch, by path: a granted
//! directory is watched as the path it had when the plugin loaded (its
//! canonical path), recursively; a granted file through its folder, alone,
//! where only events that name the file count. Neither backend follows a
//! symlink out of the tree. A grant renamed after it loaded is no longer
//! where its watch looks: its changes are then found when its change
//! report is polled, as for any plugin not wholly watched (docs/security.md
//! says so in its table). One watch serves every plugin granted the same
//! path, recursively if any grant of it is a directory (each plugin's own
//! grants filter what counts for it).
//!
//! The bounds are Linux's: at most [`MAX_WATCHES_PER_PLUGIN`] grants
//! watched for one plugin (beyond them, its changes are found when its
//! change report is polled), and at most [`MOST_NOTED`] changed paths kept
//! between two settles; beyond them, or when the backend says it lost
//! events, every watched plugin counts as changed.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::{Context, Result};
use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::Notify;

use crate::grants::WatchedGrant;

/// The most grants watched for one plugin.
const MAX_WATCHES_PER_PLUGIN: usize = 1024;

/// The most changed paths kept between two settles.
const MOST_NOTED: usize = 16 * 1024;

/// The watches of every plugin, in one watcher.
#[derive(Clone)]
pub struct GrantWatch(Arc<Shared>);

struct Shared {
    reported: Arc<Reported>,
    state: Mutex<State>,
}

struct State {
    watcher: RecommendedWatcher,
    plugins: BTreeMap<String, Plugin>,
    /// The plugins (by scheme) holding a watch on each path, and whether
    /// the backend watches it recursively: the backend keeps one watch a
    /// path, so a path is watched once (recursively if any grant of it is a
    /// directory), and unwatched when its last holder goes.
    holders: BTreeMap<PathBuf, (BTreeSet<String>, bool)>,
}

/// What is watched for one plugin.
#[derive(Default)]
struct Plugin {
    granted: Vec<PathBuf>,
    watched: Vec<Watched>,
    /// Whether every grant has its watch.
    whole: bool,
}

/// One watch: a granted directory, or a granted file's folder with the
/// file's name.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Watched {
    path: PathBuf,
    file: Option<OsString>,
}

impl Watched {
    fn of(grant: &WatchedGrant) -> Self {
        match &grant.file {
            // The label of a granted file is its path; its folder is watched.
            Some(name) => Self {
                path: grant.label.parent().unwrap_or(&grant.label).to_owned(),
                file: Some(name.clone()),
            },
            None => Self {
                path: grant.label.clone(),
                file: None,
            },
        }
    }

    /// Whether a change at `changed` is a change of what this watch grants.
    fn covers(&self, changed: &Path) -> bool {
        match &self.file {
            Some(name) => {
                changed.parent() == Some(self.path.as_path())
                    && changed.file_name() == Some(name.as_os_str())
            }
            None => changed.starts_with(&self.path),
        }
    }
}

/// What the backend reported and nobody has looked at yet.
struct Reported {
    pending: Mutex<Pending>,
    arrived: Notify,
}

#[derive(Default)]
struct Pending {
    changed: BTreeSet<PathBuf>,
    /// The backend lost events, or more paths changed than are kept.
    overflowed: bool,
}

impl Reported {
    fn note(&self, event: notify::Result<Event>) {
        {
            let mut pending = lock(&self.pending);
            match event {
                Ok(event) if event.kind.is_access() => return,
                Ok(event) if event.need_rescan() => pending.overflowed = true,
                Ok(event) => {
                    for path in event.paths {
                        if pending.changed.len() >= MOST_NOTED {
                            pending.overflowed = true;
                            break;
                        }
                        pending.changed.insert(path);
                    }
                }
                Err(error) => {
                    tracing::warn!(
                        "watching granted paths: {error}; every plugin's changes are looked for"
                    );
                    pending.overflowed = true;
                }
            }
        }
        self.arrived.notify_one();
    }
}

impl GrantWatch {
    /// A watcher with nothing watched yet.
    pub fn start() -> Result<Self> {
        let reported = Arc::new(Reported {
            pending: Mutex::default(),
            arrived: Notify::new(),
        });
        let noting = reported.clone();
        let watcher = notify::recommended_watcher(move |event| noting.note(event))
            .context("cannot start watching granted paths")?;
        Ok(Self(Arc::new(Shared {
            reported,
            state: Mutex::new(State {
                watcher,
                plugins: BTreeMap::new(),
                holders: BTreeMap::new(),
            }),
        })))
    }

    /// Returns once the backend has reported something since the last
    /// [`Self::settle`].
    pub async fn arrival(&self) {
        self.0.reported.arrived.notified().await;
    }

    /// Watches each plugin's grants (by scheme), and nothing else: a plugin
    /// no longer listed loses its watches, a plugin whose grants are other
    /// paths than before is watched anew.
    pub fn follow(&self, granted: BTreeMap<String, Vec<WatchedGrant>>) {
        let mut state = lock(&self.0.state);
        let gone: Vec<String> = state
            .plugins
            .iter()
            .filter(|(scheme, plugin)| {
                granted.get(*scheme).is_none_or(|grants| {
                    !grants
                        .iter()
                        .map(|grant| &grant.label)
                        .eq(plugin.granted.iter())
                })
            })
            .map(|(scheme, _)| scheme.clone())
            .collect();
        let mut changed = !gone.is_empty();
        for scheme in gone {
            state.unwatch(&scheme);
        }
        for (scheme, grants) in granted {
            if grants.is_empty() || state.plugins.contains_key(&scheme) {
                continue;
            }
            state.watch(&scheme, &grants);
            changed = true;
        }
        // A watch made or dropped may restart the backend's stream (FSEvents
        // does), losing what happened meanwhile: that counts as lost events.
        if changed {
            lock(&self.0.reported.pending).overflowed = true;
            self.0.reported.arrived.notify_one();
        }
    }

    /// Takes what the backend reported since the last call and returns the
    /// plugins whose change report to poke: those with a grant that covers
    /// a changed path (every plugin watched, if events were lost).
    pub fn settle(&self) -> BTreeSet<String> {
        let pending = std::mem::take(&mut *lock(&self.0.reported.pending));
        let state = lock(&self.0.state);
        if pending.overflowed {
            return state.plugins.keys().cloned().collect();
        }
        state
            .plugins
            .iter()
            .filter(|(_, plugin)| {
                plugin.watched.iter().any(|watched| {
                    pending
                        .changed
                        .iter()
                        .any(|changed| watched.covers(changed))
                })
            })
            .map(|(scheme, _)| scheme.clone())
            .collect()
    }

    /// The plugins whose every grant is watched: every change of their
    /// files is reported by [`Self::settle`] (as lost events count as
    /// changes of every plugin).
    pub fn wholly_watched(&self) -> BTreeSet<String> {
        lock(&self.0.state)
            .plugins
            .iter()
            .filter(|(_, plugin)| plugin.whole)
            .map(|(scheme, _)| scheme.clone())
            .collect()
    }
}

impl State {
    /// Watches the grants of `scheme`, up to [`MAX_WATCHES_PER_PLUGIN`].
    fn watch(&mut self, scheme: &str, grants: &[WatchedGrant]) {
        let mut plugin = Plugin {
            granted: grants.iter().map(|grant| grant.label.clone()).collect(),
            watched: Vec::new(),
            whole: grants.len() <= MAX_WATCHES_PER_PLUGIN,
        };
        if !plugin.whole {
            tracing::warn!(
                "plugin {scheme}: only {MAX_WATCHES_PER_PLUGIN} of its {} grants are watched; its other changes are found when its change report is polled",
                grants.len()
            );
        }
        for grant in grants.iter().take(MAX_WATCHES_PER_PLUGIN) {
            let watched = Watched::of(grant);
            let recursive = watched.file.is_none();
            let (held, watched_recursively) =
                self.holders.get(&watched.path).cloned().unwrap_or_default();
            let rewatch = held.is_empty() || (recursive && !watched_recursively);
            if rewatch {
                if !held.is_empty() {
                    let _ = self.watcher.unwatch(&watched.path);
                }
                let mode = if recursive || watched_recursively {
                    RecursiveMode::Recursive
                } else {
                    RecursiveMode::NonRecursive
                };
                if let Err(error) = self.watcher.watch(&watched.path, mode) {
                    tracing::warn!(
                        "plugin {scheme}: cannot watch granted path {}: {error}; its changes are found when its change report is polled",
                        grant.label.display()
                    );
                    plugin.whole = false;
                    // The path's other holders lost the watch it replaced,
                    // unless it can be made again as it was.
                    let restored = held.is_empty()
                        || self
                            .watcher
                            .watch(&watched.path, RecursiveMode::NonRecursive)
                            .is_ok();
                    if !restored {
                        self.holders.remove(&watched.path);
                        for holder in &held {
                            if let Some(other) = self.plugins.get_mut(holder) {
                                other.whole = false;
                            }
                        }
                    }
                    continue;
                }
            }
            let entry = self.holders.entry(watched.path.clone()).or_default();
            entry.0.insert(scheme.to_owned());
            entry.1 |= recursive;
            plugin.watched.push(watched);
        }
        self.plugins.insert(scheme.to_owned(), plugin);
    }

    /// Drops the watches of `scheme` that no other plugin holds.
    fn unwatch(&mut self, scheme: &str) {
        let Some(plugin) = self.plugins.remove(scheme) else {
            return;
        };
        for watched in plugin.watched {
            let Some((held, _)) = self.holders.get_mut(&watched.path) else {
                continue;
            };
            held.remove(scheme);
            if held.is_empty() {
                self.holders.remove(&watched.path);
                // A path gone already has no watch left to drop.
                let _ = self.watcher.unwatch(&watched.path);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
