//! Resource subscriptions, and the change reports that serve them. While a
//! client is subscribed to a resource, the provider of its scheme is asked
//! for its change report at the mount's interval, or at once when the scheme
//! is poked (say, because a directory granted to the plugin changed). What it
//! reports becomes [`Event`]s: `Updated` for subscribed resources it names,
//! `ListChanged` when its listing changed. Nobody subscribed, no polling.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::uri::Uri;
use super::{Admitted, Event, Namespace, NamespaceError};

/// How long the poller sleeps when nothing is due.
const IDLE: Duration = Duration::from_secs(3600);

/// Subscribers per resource URI, counted across every client.
#[derive(Debug, Default)]
pub struct Subscriptions {
    state: Mutex<State>,
    wake: Arc<Notify>,
}

#[derive(Debug, Default)]
struct State {
    by_uri: BTreeMap<Uri, usize>,
    poked: BTreeSet<String>,
}

impl Subscriptions {
    /// One more subscriber of `uri`.
    pub fn add(&self, uri: &Uri) {
        *self.lock().by_uri.entry(uri.clone()).or_default() += 1;
        crate::telemetry::metrics().subscriptions.inc();
        self.wake.notify_one();
    }

    /// One subscriber of `uri` fewer.
    pub fn remove(&self, uri: &Uri) {
        let mut state = self.lock();
        if let Some(count) = state.by_uri.get_mut(uri) {
            crate::telemetry::metrics().subscriptions.dec();
            *count -= 1;
            if *count == 0 {
                state.by_uri.remove(uri);
            }
        }
    }

    /// Whether anyone is subscribed to `uri`.
    pub fn contains(&self, uri: &Uri) -> bool {
        self.lock().by_uri.contains_key(uri)
    }

    /// The subscribed URIs of `scheme`.
    pub fn uris_of(&self, scheme: &str) -> Vec<Uri> {
        self.lock()
            .by_uri
            .keys()
            .filter(|uri| uri.scheme() == scheme)
            .cloned()
            .collect()
    }

    /// Asks for the change report of `scheme` now rather than at its interval.
    pub fn poke(&self, scheme: &str) {
        self.lock().poked.insert(scheme.to_owned());
        self.wake.notify_one();
    }

    fn schemes(&self) -> BTreeSet<String> {
        self.lock()
            .by_uri
            .keys()
            .map(|uri| uri.scheme().to_owned())
            .collect()
    }

    fn take_poked(&self) -> BTreeSet<String> {
        std::mem::take(&mut self.lock().poked)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

/// Where the poller stands with one scheme.
struct Watched {
    /// The token of the last report; none until a first report was taken.
    token: Option<String>,
    due: Instant,
    /// Whether a report was refused, whole or in part, since the last one
    /// admitted whole: a plugin that keeps breaking the contract is logged
    /// once, not at every poll.
    refused: bool,
}

/// Polls change reports for as long as `namespace` lives.
pub fn spawn_poller(namespace: &Arc<Namespace>) {
    let wake = namespace.subscriptions.wake.clone();
    let namespace = Arc::downgrade(namespace);
    tokio::spawn(async move {
        let mut watched: HashMap<String, Watched> = HashMap::new();
        loop {
            let Some(live) = namespace.upgrade() else {
                return;
            };
            // A wake-up while polling is kept as a permit, so none is lost.
            let wake = wake.notified();
            poll_due(&live, &mut watched).await;
            let next_due = watched.values().map(|watched| watched.due).min();
            drop(live);
            tokio::select! {
                () = wake => {}
                () = tokio::time::sleep_until(next_due.unwrap_or_else(|| Instant::now() + IDLE)) => {}
            }
        }
    });
}

/// Asks every subscribed scheme that is due (or poked) for its report.
async fn poll_due(namespace: &Namespace, watched: &mut HashMap<String, Watched>) {
    let subscriptions = &namespace.subscriptions;
    let schemes = subscriptions.schemes();
    watched.retain(|scheme, _| schemes.contains(scheme));
    let poked = subscriptions.take_poked();
    for scheme in schemes {
        let Some(interval) = namespace.change_interval(&scheme) else {
            watched.remove(&scheme);
            continue;
        };
        let now = Instant::now();
        let state = watched.entry(scheme.clone()).or_insert(Watched {
            token: None,
            due: now,
            refused: false,
        });
        if state.token.is_some() && state.due > now && !poked.contains(&scheme) {
            continue;
        }
        state.due = now + interval;
        match namespace.changes(&scheme, state.token.clone()).await {
            Ok(Admitted {
                value: changes,
                refused,
            }) => {
                if let Some(reason) = refused.first().filter(|_| !state.refused) {
                    tracing::warn!(
                        scheme,
                        refused = refused.len(),
                        "refused part of a plugin's change report: {reason}"
                    );
                }
                state.refused = !refused.is_empty();
                if state.token.is_some() {
                    if changes.listing_changed {
                        namespace.publish(Event::ListChanged {
                            scheme: scheme.clone(),
                        });
                    }
                    for uri in changes.changed_uris {
                        if subscriptions.contains(&uri) {
                            namespace.publish(Event::Updated { uri });
                        }
                    }
                }
                state.token = Some(changes.token);
            }
            Err(NamespaceError::InvalidAnswer { reason, .. }) => {
                if !state.refused {
                    tracing::warn!(scheme, "refused a plugin's change report: {reason}");
                }
                state.refused = true;
                state.token = None;
            }
            Err(error) => {
                tracing::debug!(scheme, "no change report: {error}");
                state.token = None;
            }
        }
    }
}

impl Namespace {
    /// How often the provider of `scheme` is polled; none if nothing serves it.
    fn change_interval(&self, scheme: &str) -> Option<Duration> {
        self.current_mounts()
            .get(scheme)
            .map(|mount| mount.settings.change_interval)
    }
}
