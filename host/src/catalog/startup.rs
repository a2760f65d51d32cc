//! A plugin folder at start, brought in so that resmux answers clients at
//! once, however long its components take to compile.
//!
//! The namespace is told first to expect a plugin under every scheme the
//! folder declares. Then each component is hashed and looked up: the
//! plugins whose code is compiled already (in the compile cache) are loaded
//! before serving begins, so a warm start lists every plugin in its first
//! answer. The others are compiled and loaded while resmux serves, as many
//! at once as there are cores, the smallest component first; each is
//! mounted as soon as it is ready, which announces it to clients with
//! `notifications/resources/list_changed`. Until then, a request in its
//! scheme waits for it, and if it fails to load, is told why.

use std::path::Path;

use anyhow::Result;
use futures::StreamExt;

use super::{Entry, Failure, Loaded, Loading, Rules, at_once, live, load_each, scan};
use crate::grants::files;
use crate::namespace::Namespace;
use crate::operator_file::{self, MOST_COMPONENT_BYTES};
use crate::runtime::Runtime;
use crate::telemetry::board;

/// A folder's plugins, expected by a namespace, that are still to load.
pub struct Expected {
    entries: Vec<Entry>,
    /// What has loaded, or failed to, so far.
    loading: Loading,
}

/// Reads `folder` and tells `namespace` to expect a plugin under each scheme
/// it declares. Entries that cannot be read are reported and skipped; the
/// private folders of single-file grants that a killed resmux left behind
/// are removed first.
pub fn expect_folder(folder: &Path, namespace: &Namespace) -> Result<Expected> {
    files::remove_stale_folders();
    let (entries, failures) = scan(folder)?;
    for failure in &failures {
        failure.report(None);
    }
    for entry in &entries {
        namespace.expect_plugin(&entry.scheme);
        board().loading(entry.origin());
    }
    Ok(Expected {
        entries,
        loading: Loading {
            loaded: Vec::new(),
            failures,
        },
    })
}

/// An entry, with what its component was found to be.
struct Probed {
    entry: Entry,
    compiled: bool,
    size: u64,
}

impl Expected {
    /// Loads and mounts the plugins whose code is compiled already; the
    /// others wait for [`Self::load_the_rest`], smallest component first.
    pub async fn load_compiled(&mut self, runtime: &Runtime, rules: &Rules, namespace: &Namespace) {
        let probed = probe(runtime, std::mem::take(&mut self.entries)).await;
        let (compiled, mut uncompiled): (Vec<Probed>, Vec<Probed>) =
            probed.into_iter().partition(|probed| probed.compiled);
        uncompiled.sort_by_key(|probed| probed.size);
        self.entries = uncompiled.into_iter().map(|probed| probed.entry).collect();
        let compiled = compiled.into_iter().map(|probed| probed.entry).collect();
        self.load(runtime, compiled, rules, namespace).await;
    }

    /// How many plugins are left for [`Self::load_the_rest`].
    pub fn left_to_compile(&self) -> usize {
        self.entries.len()
    }

    /// Compiles, loads and mounts the plugins still expected, each as soon
    /// as it is ready; returns what the whole folder came to.
    pub async fn load_the_rest(
        mut self,
        runtime: &Runtime,
        rules: &Rules,
        namespace: &Namespace,
    ) -> Loading {
        let entries = std::mem::take(&mut self.entries);
        self.load(runtime, entries, rules, namespace).await;
        self.loading
    }

    async fn load(
        &mut self,
        runtime: &Runtime,
        entries: Vec<Entry>,
        rules: &Rules,
        namespace: &Namespace,
    ) {
        let loading = &mut self.loading;
        load_each(runtime, entries, rules, |scheme, outcome| {
            arrive(namespace, loading, scheme, outcome);
        })
        .await;
    }
}

/// Finds which entries' components are compiled already, reading and
/// hashing each on tokio's blocking pool, as many at once as there are
/// cores.
async fn probe(runtime: &Runtime, entries: Vec<Entry>) -> Vec<Probed> {
    futures::stream::iter(entries)
        .map(|entry| async move {
            let (runtime, probing) = (runtime.clone(), entry.clone());
            let (compiled, size) =
                tokio::task::spawn_blocking(move || compiled_already(&runtime, &probing))
                    .await
                    .unwrap_or((false, u64::MAX));
            Probed {
                entry,
                compiled,
                size,
            }
        })
        .buffer_unordered(at_once())
        .collect()
        .await
}

/// Whether `entry`'s component is compiled already for the engine its
/// stack limit selects, and its size in bytes. A component that cannot be
/// read, or limits that are invalid, count as not compiled: loading the
/// plugin says what is wrong. A component in a registry counts as not
/// compiled: its signature is checked before anything else.
fn compiled_already(runtime: &Runtime, entry: &Entry) -> (bool, u64) {
    let read = |path| operator_file::read_bytes(path, MOST_COMPONENT_BYTES, "component");
    let Some(Ok((bytes, _))) = entry.file().map(read) else {
        return (false, 0);
    };
    let limits = &entry.manifest.limits;
    let compiled = limits.validate().is_ok()
        && runtime
            .with_stack(limits.sandbox.stack_kib)
            .is_ok_and(|runtime| runtime.has_compiled(&bytes));
    (compiled, bytes.len() as u64)
}

/// Mounts a plugin that loaded under `scheme`, or tells the namespace why
/// none will serve it.
fn arrive(
    namespace: &Namespace,
    loading: &mut Loading,
    scheme: &str,
    outcome: Result<Loaded, Failure>,
) {
    let mut failure = match outcome {
        Ok(mut loaded) => match namespace.mount(scheme, loaded.plugin.clone(), loaded.settings()) {
            Ok(()) => {
                loaded.post();
                loading.loaded.push(loaded);
                return;
            }
            Err(reason) => Failure {
                declared_by: loaded.entry.declared_by,
                error: anyhow::anyhow!("cannot mount it: {reason}"),
            },
        },
        Err(failure) => failure,
    };
    if live::passes(&failure.error) {
        failure.error = live::retried(failure.error, live::FIRST_RETRY_WAIT);
    }
    failure.report(Some(scheme));
    let reason = format!("{}: {:#}", failure.declared_by.display(), failure.error);
    namespace.plugin_not_loaded(scheme, &reason);
    loading.failures.push(failure);
}
