//! Change notifications, in both eras. A legacy session subscribes with
//! `resources/subscribe` and hears `list_changed` and `updated` on its own
//! stream for as long as it lives; a 2026-07-28 client opens a
//! `subscriptions/listen` stream that carries only the kinds it asked for.
//! Either way a client hears only of schemes in its scope, and every
//! subscription is counted in the namespace, which polls change reports only
//! while someone listens. A legacy subscription in a scheme whose plugin is
//! still loading waits for it; a listen stream follows such a resource at
//! once, and hears it updated when the plugin arrives. A session follows at
//! most [`MAX_SUBSCRIPTIONS_PER_SESSION`] resources, and a client keeps at
//! most [`MAX_LISTEN_STREAMS_PER_CLIENT`] listen streams open.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};

use rmcp::RoleServer;
use rmcp::model::{
    ResourceListChangedNotification, ResourceUpdatedNotification, ResourceUpdatedNotificationParam,
    ServerNotification,
};
use rmcp::service::{Peer, SubscriptionContext};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::namespace::uri::Uri;
use crate::namespace::{Action, Event, Namespace, Scope};

/// Resources one legacy session, or one listen stream, may follow.
pub const MAX_SUBSCRIPTIONS_PER_SESSION: usize = 256;
/// Listen streams one client may keep open at once.
pub const MAX_LISTEN_STREAMS_PER_CLIENT: usize = 16;

/// The subscriptions of one legacy session; dropping it (the session ended)
/// withdraws them.
pub struct Session {
    namespace: Arc<Namespace>,
    subscribed: Mutex<BTreeSet<Uri>>,
    /// Cancelled when the session ends (its handler is dropped): its
    /// forwarder stops then, rather than looking every so often.
    ended: CancellationToken,
}

impl Session {
    pub fn new(namespace: Arc<Namespace>) -> Arc<Self> {
        Arc::new(Self {
            namespace,
            subscribed: Mutex::default(),
            ended: CancellationToken::new(),
        })
    }

    /// Follows `uri`; refused when the session follows its most already.
    pub fn subscribe(&self, uri: &Uri) -> Result<(), String> {
        let mut subscribed = self.lock();
        if subscribed.contains(uri) {
            return Ok(());
        }
        if subscribed.len() >= MAX_SUBSCRIPTIONS_PER_SESSION {
            return Err(format!(
                "this session follows {MAX_SUBSCRIPTIONS_PER_SESSION} resources, the most allowed; unsubscribe from one first"
            ));
        }
        subscribed.insert(uri.clone());
        self.namespace.subscriptions().add(uri);
        Ok(())
    }

    pub fn unsubscribe(&self, uri: &Uri) {
        if self.lock().remove(uri) {
            self.namespace.subscriptions().remove(uri);
        }
    }

    fn is_subscribed(&self, uri: &Uri) -> bool {
        self.lock().contains(uri)
    }

    fn subscribed(&self) -> Vec<Uri> {
        self.lock().iter().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<Uri>> {
        self.subscribed
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.ended.cancel();
        for uri in self.lock().iter() {
            self.namespace.subscriptions().remove(uri);
        }
    }
}

/// Sends a legacy session what concerns it until the session ends (or its
/// transport closes, found out at the next event); it wakes only for
/// events, so an idle session costs nothing.
pub fn forward_to_session(session: &Arc<Session>, peer: Peer<RoleServer>, scope: Scope) {
    let mut events = session.namespace.events();
    let ended = session.ended.clone().cancelled_owned();
    let session: Weak<Session> = Arc::downgrade(session);
    tokio::spawn(async move {
        tokio::pin!(ended);
        loop {
            let event = tokio::select! {
                event = events.recv() => event,
                () = &mut ended => return,
            };
            if peer.is_transport_closed() {
                return;
            }
            let Some(live) = session.upgrade() else {
                return;
            };
            let notifications = match event {
                Ok(Event::ListChanged { scheme }) if scope.may_list_any_of(&scheme) => {
                    vec![list_changed()]
                }
                Ok(Event::Updated { uri }) if live.is_subscribed(&uri) => vec![updated(uri)],
                Ok(_) => Vec::new(),
                // Fell behind: anything may have changed.
                Err(RecvError::Lagged(_)) => std::iter::once(list_changed())
                    .chain(live.subscribed().into_iter().map(updated))
                    .collect(),
                Err(RecvError::Closed) => return,
            };
            drop(live);
            for notification in notifications {
                if peer.send_notification(notification).await.is_err() {
                    return;
                }
            }
        }
    });
}

/// Serves one `subscriptions/listen` stream until the client cancels it.
pub async fn listen(namespace: &Namespace, context: SubscriptionContext, scope: Scope) {
    let accepted = context.accepted().clone();
    let list_changes = accepted.resources_list_changed == Some(true);
    let uris: BTreeSet<Uri> = accepted
        .resource_subscriptions
        .unwrap_or_default()
        .iter()
        .filter_map(|uri| Uri::parse(uri).ok())
        .filter(|uri| {
            namespace.may_serve(uri)
                && scope
                    .decide(Action::Subscribe, || uri.canonical())
                    .permitted
        })
        .collect();
    let _subscribed = Counted::new(namespace, &uris);
    let mut events = namespace.events();
    let sink = context.sink().clone();
    loop {
        let event = tokio::select! {
            () = context.cancelled() => return,
            event = events.recv() => event,
        };
        let notifications = match event {
            Ok(Event::ListChanged { scheme }) if list_changes && scope.may_list_any_of(&scheme) => {
                vec![list_changed()]
            }
            Ok(Event::Updated { uri }) if uris.contains(&uri) => vec![updated(uri)],
            Ok(_) => Vec::new(),
            Err(RecvError::Lagged(_)) => list_changes
                .then(list_changed)
                .into_iter()
                .chain(uris.iter().cloned().map(updated))
                .collect(),
            Err(RecvError::Closed) => return,
        };
        for notification in notifications {
            if sink.send(notification).await.is_err() {
                return;
            }
        }
    }
}

/// The listen streams each client has open.
#[derive(Default)]
pub struct ListenStreams {
    open: Mutex<HashMap<Arc<str>, usize>>,
}

/// One open listen stream, counted until dropped.
pub struct OpenStream {
    streams: Arc<ListenStreams>,
    client: Arc<str>,
}

impl ListenStreams {
    /// Counts a new stream of `client`, unless it has its most open.
    pub fn open(self: &Arc<Self>, client: &Arc<str>) -> Result<OpenStream, String> {
        let mut open = self.lock();
        let count = open.entry(client.clone()).or_default();
        if *count >= MAX_LISTEN_STREAMS_PER_CLIENT {
            return Err(format!(
                "client {client} has {MAX_LISTEN_STREAMS_PER_CLIENT} listen streams open, the most allowed"
            ));
        }
        *count += 1;
        crate::telemetry::metrics().listen_streams.inc();
        Ok(OpenStream {
            streams: self.clone(),
            client: client.clone(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, usize>> {
        self.open
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        crate::telemetry::metrics().listen_streams.dec();
        let mut open = self.streams.lock();
        if let Some(count) = open.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.client);
            }
        }
    }
}

/// Subscriptions counted in the namespace for as long as this lives.
struct Counted<'a> {
    namespace: &'a Namespace,
    uris: &'a BTreeSet<Uri>,
}

impl<'a> Counted<'a> {
    fn new(namespace: &'a Namespace, uris: &'a BTreeSet<Uri>) -> Self {
        for uri in uris {
            namespace.subscriptions().add(uri);
        }
        Self { namespace, uris }
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        for uri in self.uris {
            self.namespace.subscriptions().remove(uri);
        }
    }
}

fn list_changed() -> ServerNotification {
    ServerNotification::ResourceListChangedNotification(ResourceListChangedNotification::default())
}

fn updated(uri: Uri) -> ServerNotification {
    ServerNotification::ResourceUpdatedNotification(ResourceUpdatedNotification::new(
        ResourceUpdatedNotificationParam::new(uri.into_string()),
    ))
}
