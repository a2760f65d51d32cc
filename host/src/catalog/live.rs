//! Keeps a namespace in step with its plugin folder while resmux serves.
//!
//! The folder is watched for changes, never for reads: opening or reading a
//! file in it (as reading the folder does) is no change, so an idle server
//! leaves it alone. Its path is watched too ([`FolderWatch`]): a folder
//! removed keeps its plugins serving, and a folder put back, or another
//! put in its place, is read and watched from then on. A burst of changes is acted on once the folder has been
//! quiet for [`DEBOUNCE`]; then the folder is read again: a new plugin is
//! mounted, a plugin whose component or manifest bytes changed is loaded
//! anew and put in place of the old one (calls in flight finish on the old
//! one), and a plugin whose files are gone is unmounted. A component is read
//! and hashed again only when its file is not the one last hashed
//! ([`Fingerprint::now`]). A replacement that fails to load, such
//! as a half-copied component or a broken manifest, leaves the old version
//! serving and says why; the next change tries again. The directories and
//! files granted to each plugin are watched too, from the directories resmux
//! holds for them rather than their paths ([`GrantWatch`], which never leaves
//! a grant, and looks again only at what changed): a change there (not a
//! mere read, such as the plugin's own) pokes the plugin's change report, so
//! subscribers hear of it without waiting for the next poll, and ends the
//! use of the plugin's listing snapshots for new walks. The namespace knows
//! which plugins have every grant watched, so that a listing that follows
//! its files is walked again only after such a change. A component pulled
//! by a tag has its tag looked up every `[pull] poll_interval_s`; a new
//! digest is pulled, verified and put in place exactly as a replaced file
//! is. A pinned digest is never looked up again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use anyhow::Result;
use tokio::sync::Notify;

use super::folder_watch::FolderWatch;
use super::grant_watch::GrantWatch;
use super::registry::{Remote, current_digest};
use super::{Entry, Failure, Fingerprint, Loaded, Loading, Rules, Source, load, scan};
use crate::grants::WatchedGrant;
use crate::namespace::Namespace;
use crate::runtime::PoolShareFull;
use crate::runtime::Runtime;
use crate::telemetry::{board, retrying};

/// Quiet time after the last write before a change is acted on.
const DEBOUNCE: Duration = Duration::from_millis(300);

/// The longest a stream of changes that never falls quiet holds back the
/// reading of the folder.
const MOST_SETTLING: Duration = Duration::from_secs(3);

/// The first wait before a plugin refused for a reason that passes is
/// tried again; each refusal after doubles it, up to [`MOST_RETRY_WAIT`].
pub(super) const FIRST_RETRY_WAIT: Duration = Duration::from_secs(1);
const MOST_RETRY_WAIT: Duration = Duration::from_secs(60);

/// A plugin refused for a reason that passes, and when it is tried again.
struct Retry {
    wait: Duration,
    next: Instant,
}

/// What serves one scheme.
struct Serving {
    declared_by: PathBuf,
    fingerprint: Fingerprint,
    /// The directories held for the plugin's grants, as it loaded.
    granted: Vec<WatchedGrant>,
    /// How often, and when next, its tag is looked up, if it was pulled
    /// by a tag.
    poll: Option<(Duration, Instant)>,
}

/// The folder, its rules, and what it serves.
struct LiveFolder {
    folder: PathBuf,
    /// The folder's watch, moved to whatever its path names after a change.
    watch: FolderWatch,
    runtime: Runtime,
    rules: Rules,
    namespace: Arc<Namespace>,
    serving: BTreeMap<String, Serving>,
    /// Plugins refused for a reason that passes, by the file that declares
    /// them: the folder is read again when the first is due.
    retrying: BTreeMap<PathBuf, Retry>,
    grants: GrantWatch,
}

/// Watches `folder` and applies every change to `namespace`, which serves
/// what `loading` loaded now; what it refused for a reason that passes is
/// tried again; runs until the process ends.
pub fn spawn(
    folder: &Path,
    runtime: Runtime,
    rules: Rules,
    namespace: Arc<Namespace>,
    loading: &Loading,
) -> Result<()> {
    let changed = Arc::new(Notify::new());
    let mut live = LiveFolder {
        watch: FolderWatch::start(folder, changed.clone())?,
        folder: folder.to_owned(),
        runtime,
        rules,
        namespace,
        serving: loading.loaded.iter().map(serving).collect(),
        retrying: BTreeMap::new(),
        grants: GrantWatch::start()?,
    };
    for failure in &loading.failures {
        if passes(&failure.error) {
            live.retry_later(failure);
        }
    }
    if live.arrived_unwatched(loading) {
        changed.notify_one();
    }
    tokio::spawn(async move {
        live.watch_grants().await;
        loop {
            tokio::select! {
                () = changed.notified() => {
                    settle(&changed).await;
                    live.sync(Polling::No).await;
                    live.watch_grants().await;
                }
                () = until(live.next_poll()) => live.sync(Polling::Due).await,
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

/// Returns once no change has come for [`DEBOUNCE`], or after
/// [`MOST_SETTLING`] of changes that never stopped.
async fn settle(changed: &Notify) {
    let most = tokio::time::Instant::now() + MOST_SETTLING;
    loop {
        let quiet = tokio::time::timeout(DEBOUNCE, changed.notified())
            .await
            .is_err();
        if quiet || tokio::time::Instant::now() >= most {
            return;
        }
    }
}

/// Runs `work`, which opens and reads directories, on tokio's blocking
/// pool rather than on a thread that serves requests.
async fn off_runtime<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(work)
        .await
        .inspect_err(|error| tracing::error!("watching granted paths: {error}"))
        .ok()
}

/// Returns at `instant`, or never.
async fn until(instant: Option<Instant>) {
    match instant {
        Some(instant) => tokio::time::sleep_until(instant).await,
        None => std::future::pending().await,
    }
}

/// Whether a reading of the folder looks up the tags whose time has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Polling {
    No,
    Due,
}

/// How often the tag of `entry`'s component is looked up, and when next,
/// if it is pulled by a tag.
fn poll(entry: &Entry) -> Option<(Duration, Instant)> {
    match &entry.component {
        Source::Registry(remote) if remote.moves() => {
            let every = Duration::from_secs(entry.manifest.pull.poll_interval_s.max(1));
            Some((every, Instant::now() + every))
        }
        Source::Registry(_) | Source::File(_) => None,
    }
}

/// Whether a plugin was refused for a reason that passes by itself: the
/// engine's instance pool has no room for its share until another plugin
/// gives its own back.
pub(super) fn passes(error: &anyhow::Error) -> bool {
    no_room_yet(error).is_some()
}

/// The want of room in the instance pool `error` says, if it does.
fn no_room_yet(error: &anyhow::Error) -> Option<&PoolShareFull> {
    error.chain().find_map(|cause| cause.downcast_ref())
}

/// `error`, of a plugin to be tried again after `wait`, saying so.
pub(super) fn retried(error: anyhow::Error, wait: Duration) -> anyhow::Error {
    error.context(format!(
        "no room for it in the instance pool yet (tried again in {} s)",
        wait.as_secs()
    ))
}

fn serving(loaded: &Loaded) -> (String, Serving) {
    (
        loaded.entry.scheme.clone(),
        Serving {
            declared_by: loaded.entry.declared_by.clone(),
            fingerprint: loaded.fingerprint.clone(),
            granted: loaded.plugin.grants().watched_dirs(),
            poll: poll(&loaded.entry),
        },
    )
}

impl LiveFolder {
    /// The soonest time a tag is to be looked up, or a refused plugin tried
    /// again.
    fn next_poll(&self) -> Option<Instant> {
        let tags = self
            .serving
            .values()
            .filter_map(|serving| serving.poll.map(|(_, next)| next));
        let retries = self.retrying.values().map(|retry| retry.next);
        tags.chain(retries).min()
    }

    /// Notes that the plugin `failure` names is to be tried again, after
    /// twice the wait of its last refusal, and says so in `/readyz`.
    fn retry_later(&mut self, failure: &Failure) -> Duration {
        let wait = match self.retrying.get(&failure.declared_by) {
            Some(retry) => (retry.wait * 2).min(MOST_RETRY_WAIT),
            None => FIRST_RETRY_WAIT,
        };
        self.retrying.insert(
            failure.declared_by.clone(),
            Retry {
                wait,
                next: Instant::now() + wait,
            },
        );
        let why = no_room_yet(&failure.error)
            .map_or_else(|| format!("{:#}", failure.error), ToString::to_string);
        retrying::retrying(
            &failure.declared_by,
            format!("{why}; tried again in {} s", wait.as_secs()),
        );
        wait
    }

    /// Whether the folder declares a plugin `loading` did not see: one that
    /// arrived after the folder was first read, before it was watched.
    /// Only names and manifests are read, no component.
    fn arrived_unwatched(&self, loading: &Loading) -> bool {
        let Ok((entries, failures)) = scan(&self.folder) else {
            return false;
        };
        let seen: BTreeSet<&Path> = loading
            .loaded
            .iter()
            .map(|loaded| loaded.entry.declared_by.as_path())
            .chain(
                loading
                    .failures
                    .iter()
                    .map(|failure| failure.declared_by.as_path()),
            )
            .collect();
        let declared = entries
            .iter()
            .map(|entry| entry.declared_by.as_path())
            .chain(failures.iter().map(|failure| failure.declared_by.as_path()));
        declared.into_iter().any(|file| !seen.contains(file))
    }

    /// The plugin declared by `file` loaded, or is gone: no more retries.
    fn settled(&mut self, file: &Path) {
        if self.retrying.remove(file).is_some() {
            retrying::settled(file);
        }
    }

    /// The schemes whose tags are due to be looked up; each is next due a
    /// whole interval from now, whatever the look-up (or the folder) says.
    fn take_due(&mut self) -> BTreeSet<String> {
        let now = Instant::now();
        let mut due = BTreeSet::new();
        for (scheme, serving) in &mut self.serving {
            if let Some((every, next)) = &mut serving.poll
                && *next <= now
            {
                *next = now + *every;
                due.insert(scheme.clone());
            }
        }
        due
    }

    /// The schemes among `due` whose tag names another digest than the one
    /// they serve, all looked up at once, so that a registry that does not
    /// answer holds the folder back for one look-up's patience, however
    /// many tags it serves.
    async fn moved_tags(&self, due: &BTreeSet<String>, entries: &[Entry]) -> BTreeSet<String> {
        let lookups = entries
            .iter()
            .filter(|entry| due.contains(&entry.scheme))
            .filter_map(
                |entry| match (&entry.component, self.serving.get(&entry.scheme)) {
                    (Source::Registry(remote), Some(serving)) => {
                        Some(self.tag_moved(&entry.scheme, remote, serving))
                    }
                    _ => None,
                },
            );
        futures::future::join_all(lookups)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// `scheme`, if the tag `remote` names another digest than the one
    /// `serving` was pulled at. A registry that cannot be asked leaves the
    /// plugin serving.
    async fn tag_moved(&self, scheme: &str, remote: &Remote, serving: &Serving) -> Option<String> {
        match current_digest(remote, &self.rules.registries).await {
            Ok(digest) => {
                (Some(digest) != serving.fingerprint.remote_digest).then(|| scheme.to_owned())
            }
            Err(error) => {
                tracing::warn!(scheme, "{error:#}; the version pulled before keeps serving");
                None
            }
        }
    }

    /// Reads the folder again and brings the namespace in line with it;
    /// with [`Polling::Due`], looks up the tags whose time has come too.
    async fn sync(&mut self, polling: Polling) {
        let due = match polling {
            Polling::Due => self.take_due(),
            Polling::No => BTreeSet::new(),
        };
        self.watch.rearm();
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
            // Its files fail for another reason now: no more retries.
            self.settled(&failure.declared_by);
            match self.scheme_served_by(&failure.declared_by) {
                Some(scheme) => failure.report_not_replaced(scheme),
                None => failure.report(None),
            }
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
        // A card stays while its file is in the folder, or while what it
        // loaded still serves (a plugin moved to a file that fails).
        let declared: Vec<&Path> = entries
            .iter()
            .map(|entry| entry.declared_by.as_path())
            .chain(failed.iter().copied())
            .chain(
                self.serving
                    .values()
                    .map(|serving| serving.declared_by.as_path()),
            )
            .collect();
        board().keep_only(&declared);
        // A plugin whose files are gone is tried no more.
        self.retrying.retain(|file, _| {
            let still_declared = declared.contains(&file.as_path());
            if !still_declared {
                retrying::settled(file);
            }
            still_declared
        });
        let moved_tags = self.moved_tags(&due, &entries).await;
        for entry in entries {
            let scheme = entry.scheme.clone();
            let moved = moved_tags.contains(&scheme);
            if !moved
                && let Some(serving) = self.serving.get_mut(&scheme)
                && serving.declared_by == entry.declared_by
                && let Ok(now) = Fingerprint::now(&entry, &serving.fingerprint)
                && now.same_bytes(&serving.fingerprint)
            {
                // A touched component is not hashed again next time.
                serving.fingerprint = now;
                // A refused change is undone, unless it was a tag's move,
                // which only a lookup of the tag (due now) tells undone.
                if due.contains(&scheme) || !matches!(entry.component, Source::Registry(_)) {
                    board().unchanged(&serving.declared_by);
                }
                // Nothing waits to be retried for it.
                self.settled(&entry.declared_by);
                continue;
            }
            let declared_by = entry.declared_by.clone();
            let replacing = self.serving.contains_key(&scheme);
            if !replacing {
                board().loading(entry.origin());
            }
            match load(&self.runtime, entry, &self.rules).await {
                Ok(mut loaded) => {
                    let settings = loaded.settings();
                    let swap = self
                        .namespace
                        .replace(&scheme, loaded.plugin.clone(), settings);
                    match swap {
                        Ok(()) => {
                            self.settled(&declared_by);
                            loaded.post();
                            let (_, serving) = serving(&loaded);
                            self.serving.insert(scheme.clone(), serving);
                            let what = if replacing { "replaced" } else { "added" };
                            tracing::info!(scheme, "plugin {what}");
                        }
                        Err(error) => {
                            self.settled(&declared_by);
                            Failure {
                                declared_by,
                                error: anyhow::anyhow!("cannot mount it: {error}"),
                            }
                            .report(Some(&scheme));
                        }
                    }
                }
                Err(error) => {
                    let mut failure = Failure { declared_by, error };
                    if passes(&failure.error) {
                        let wait = self.retry_later(&failure);
                        failure.error = retried(failure.error, wait);
                    } else {
                        // Refused for a reason that does not pass: tried
                        // again on its next change, not on a timer.
                        self.settled(&failure.declared_by);
                    }
                    match replacing {
                        true => failure.report_not_replaced(&scheme),
                        false => failure.report(Some(&scheme)),
                    }
                }
            }
        }
    }

    /// The scheme a plugin declared by `file` serves now, if one does.
    fn scheme_served_by(&self, file: &Path) -> Option<&str> {
        self.serving
            .iter()
            .find(|(_, serving)| serving.declared_by == file)
            .map(|(scheme, _)| scheme.as_str())
    }

    /// Watches the directories held for the grants of the plugins now
    /// served, and stops watching those no longer granted.
    async fn watch_grants(&self) {
        let grants = self.grants.clone();
        let granted: BTreeMap<String, Vec<WatchedGrant>> = self
            .serving
            .iter()
            .map(|(scheme, serving)| (scheme.clone(), serving.granted.clone()))
            .collect();
        let watched = off_runtime(move || {
            grants.follow(granted);
            grants.wholly_watched()
        })
        .await;
        self.tell_watched(watched.unwrap_or_default());
    }

    /// Pokes the change report of every plugin whose granted paths changed,
    /// and has new walks of its listings ask it afresh.
    async fn poke_changed(&self) {
        let grants = self.grants.clone();
        let settled = off_runtime(move || (grants.settle(), grants.wholly_watched())).await;
        let (poked, watched) = settled.unwrap_or_default();
        for scheme in poked {
            self.namespace.grants_changed(&scheme);
            self.namespace.subscriptions().poke(&scheme);
        }
        self.tell_watched(watched);
    }

    /// Tells the namespace which served plugins have every grant watched.
    fn tell_watched(&self, watched: BTreeSet<String>) {
        for scheme in self.serving.keys() {
            self.namespace
                .watching_grants(scheme, watched.contains(scheme));
        }
    }
}
