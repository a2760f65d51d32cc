//! One namespace of resources drawn from many providers.
//!
//! Each provider is mounted under a scheme. The namespace merges their listings
//! into one paginated stream with composite cursors, routes reads and
//! completions by scheme, validates every URI before a provider sees it, and
//! validates every answer before a client sees it. Mounts change while it
//! serves: each change of the listing, and each change a provider reports for
//! a subscribed resource ([`changes`]), is announced as an [`Event`]. A
//! provider's listing is walked into snapshots ([`snapshot`]); one whose
//! listing follows its granted files serves new walks from its last snapshot
//! while the live folder watches those files and reports no change there.
//! A scheme whose plugin is still loading is not listed yet, and a request in
//! it waits for the plugin ([`arrivals`]).
//! Listings are filtered entry by entry to a client's [`Scope`]; a read,
//! completion or subscription is decided by the caller (which audits the
//! decision) before it gets here. It knows nothing of JSON-RPC or of Wasm.

pub mod answers;
pub mod arrivals;
pub mod changes;
pub mod cursor;
pub mod promises;
mod scope;
pub mod snapshot;
#[cfg(test)]
mod tests;
pub mod uri;
pub mod validate;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::ops::Bound;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use thiserror::Error;

use crate::contract::{
    AnswerLimits, Body, CacheHint, Completion, CompletionRequest, Metadata, Provider,
    ProviderError, ResourceEntry, TemplateEntry,
};
pub use answers::{Admitted, DEFAULT_CACHE, Listable};
use arrivals::{Arrivals, Waited};
use changes::Subscriptions;
use cursor::{CursorSeal, Listing, Position};
use promises::Promises;
pub use scope::{Action, Guard, Outlook, Scope, Verdict};
use snapshot::{Resume, Snapshots, merge_cache};
use uri::{Canonical, SyntaxError, Uri, UriTemplate};
use validate::JsonObject;

/// Provider calls one page of a merged listing may make; a page may come back
/// short (with a cursor) rather than wait on more providers.
const MAX_CALLS_PER_PAGE: usize = 16;

/// How long a read, completion or subscription in a scheme whose plugin is
/// still loading waits for it.
pub const ARRIVAL_PATIENCE: Duration = Duration::from_secs(60);

/// Why a namespace request failed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum NamespaceError {
    #[error("invalid URI {uri:?}: it {reason}")]
    InvalidUri { uri: String, reason: SyntaxError },
    #[error("resource {uri} not found: {reason}")]
    NotFound { uri: String, reason: String },
    #[error("invalid cursor: {0}")]
    InvalidCursor(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("{uri}: {error}")]
    Provider { uri: String, error: ProviderError },
    #[error("the plugin for {uri} returned an invalid answer: {reason}")]
    InvalidAnswer { uri: String, reason: String },
}

/// Why a provider cannot be mounted.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum MountError {
    #[error("scheme {scheme:?} {reason}")]
    InvalidScheme { scheme: String, reason: SyntaxError },
    /// A scheme is never shared: the first provider stays.
    #[error("scheme {scheme:?} is already served")]
    Taken { scheme: String },
}

/// Why no provider serves a scheme a request names: the caller decides
/// what that makes of the request (a resource not found, an invalid
/// argument).
#[derive(Debug, Clone, PartialEq, Error)]
enum Unserved {
    #[error("the plugin for scheme {scheme:?} did not load: {reason}")]
    NotLoaded { scheme: String, reason: Arc<str> },
    #[error("the plugin for scheme {scheme:?} is still loading after {} s", ARRIVAL_PATIENCE.as_secs())]
    StillLoading { scheme: String },
    #[error("no plugin serves scheme {scheme:?}")]
    NoPlugin { scheme: String },
}

/// A listed resource, with its full URI.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    pub uri: Uri,
    pub size: Option<u64>,
    pub metadata: Metadata,
    pub meta: Option<JsonObject>,
}

/// A listed template, with its full URI template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub uri_template: UriTemplate,
    pub metadata: Metadata,
    pub meta: Option<JsonObject>,
}

impl snapshot::Weigh for Resource {
    fn weight(&self) -> usize {
        self.uri.as_str().len() + metadata_weight(&self.metadata, self.meta.as_ref())
    }
}

impl snapshot::Weigh for Template {
    fn weight(&self) -> usize {
        self.uri_template.as_str().len() + metadata_weight(&self.metadata, self.meta.as_ref())
    }
}

/// A rough count of the bytes of an entry's descriptive fields.
fn metadata_weight(metadata: &Metadata, meta: Option<&JsonObject>) -> usize {
    let text = |text: &Option<String>| text.as_ref().map_or(0, String::len);
    let icons: usize = metadata
        .icons
        .iter()
        .map(|icon| icon.src.len() + text(&icon.mime_type) + icon.sizes.concat().len())
        .sum();
    let annotations = metadata
        .annotations
        .as_ref()
        .map_or(0, |annotations| text(&annotations.last_modified) + 16);
    let meta = meta.map_or(0, |meta| {
        serde_json::to_vec(meta).map_or(0, |bytes| bytes.len())
    });
    std::mem::size_of::<Resource>()
        + metadata.name.len()
        + text(&metadata.title)
        + text(&metadata.description)
        + text(&metadata.mime_type)
        + text(&metadata.meta)
        + icons
        + annotations
        + meta
}

/// One content item of a read, with its full URI.
#[derive(Debug, Clone, PartialEq)]
pub struct Contents {
    pub uri: Uri,
    pub mime_type: Option<String>,
    pub body: Body,
    pub meta: Option<JsonObject>,
}

/// A validated read.
#[derive(Debug, Clone, PartialEq)]
pub struct Read {
    pub contents: Vec<Contents>,
    pub cache: CacheHint,
}

impl Read {
    /// Bytes of every content, before any encoding.
    pub fn byte_count(&self) -> u64 {
        self.contents
            .iter()
            .map(|content| content.body.byte_count() as u64)
            .sum()
    }
}

/// What changed in one provider since an earlier report.
#[derive(Debug, Clone, PartialEq)]
pub struct Changes {
    /// The token to pass next time.
    pub token: String,
    pub listing_changed: bool,
    pub changed_uris: Vec<Uri>,
}

/// One page of a merged listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
    pub cache: CacheHint,
}

/// How one provider is served.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MountSettings {
    pub limits: AnswerLimits,
    /// How often the provider's change report is asked for while a client is
    /// subscribed to one of its resources.
    pub change_interval: Duration,
    /// Whether the provider's listing changes only with its granted files:
    /// while they are all watched ([`Namespace::watching_grants`]), a new
    /// walk starts from the last snapshot taken since, until a change there
    /// ([`Namespace::grants_changed`]).
    pub listing_follows_files: bool,
}

impl Default for MountSettings {
    fn default() -> Self {
        Self {
            limits: AnswerLimits::default(),
            change_interval: Duration::from_secs(5),
            listing_follows_files: false,
        }
    }
}

struct Mount {
    provider: Arc<dyn Provider>,
    settings: MountSettings,
    promises: Promises,
    resources: Snapshots<Resource>,
    templates: Snapshots<Template>,
    /// Since when every path granted to the provider is watched, without a
    /// break; none while some are not.
    grants_watched_since: Mutex<Option<Instant>>,
}

impl Mount {
    /// No new walk starts from a snapshot of its listings taken so far.
    fn listing_changed(&self) {
        self.resources.invalidate();
        self.templates.invalidate();
    }
}

type Mounts = BTreeMap<String, Arc<Mount>>;

/// A change clients may want to hear of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The merged listing changed in `scheme`: its provider came, went or
    /// was replaced, or reported a change of its listing.
    ListChanged { scheme: String },
    /// A subscribed resource changed.
    Updated { uri: Uri },
}

/// Events kept for slow receivers before the oldest are dropped (a receiver
/// that falls behind learns that it lagged).
const EVENT_BACKLOG: usize = 1024;

/// Providers by scheme.
pub struct Namespace {
    mounts: RwLock<Arc<Mounts>>,
    seal: CursorSeal,
    page_size: usize,
    events: broadcast::Sender<Event>,
    subscriptions: Subscriptions,
    arrivals: Arrivals,
}

impl Namespace {
    /// An empty namespace whose listing pages hold at most `page_size` entries.
    pub fn new(page_size: usize) -> Self {
        Self {
            mounts: RwLock::default(),
            seal: CursorSeal::random(cursor::DEFAULT_ROTATION),
            page_size: page_size.max(1),
            events: broadcast::channel(EVENT_BACKLOG).0,
            subscriptions: Subscriptions::default(),
            arrivals: Arrivals::default(),
        }
    }

    /// The namespace, sealing and opening cursors with `seal` (one shared
    /// by replicas, so that a cursor of one opens on another).
    pub fn with_cursor_seal(self, seal: CursorSeal) -> Self {
        Self { seal, ..self }
    }

    /// A plugin for `scheme` is loading: until it is mounted, or fails to
    /// load, listings leave the scheme out and reads, completions and
    /// subscriptions in it wait for the plugin (at most
    /// [`ARRIVAL_PATIENCE`]).
    pub fn expect_plugin(&self, scheme: &str) {
        self.arrivals.expect(scheme);
    }

    /// The plugin expected under `scheme` did not load, for `reason`, which
    /// names its file: requests waiting for it, and later ones in `scheme`,
    /// are told so, until a plugin is mounted under `scheme`.
    pub fn plugin_not_loaded(&self, scheme: &str, reason: &str) {
        self.arrivals.failed(scheme, reason);
    }

    /// Serves `provider` under `scheme`. A scheme is never shared: mounting a
    /// taken one fails and leaves the first in place.
    pub fn mount(
        &self,
        scheme: &str,
        provider: Arc<dyn Provider>,
        settings: MountSettings,
    ) -> Result<(), MountError> {
        self.put(scheme, provider, settings, false)
    }

    /// Serves `provider` under `scheme` in place of whatever served it; calls
    /// in flight finish on the provider they started with.
    pub fn replace(
        &self,
        scheme: &str,
        provider: Arc<dyn Provider>,
        settings: MountSettings,
    ) -> Result<(), MountError> {
        self.put(scheme, provider, settings, true)
    }

    fn put(
        &self,
        scheme: &str,
        provider: Arc<dyn Provider>,
        settings: MountSettings,
        replacing: bool,
    ) -> Result<(), MountError> {
        uri::check_scheme(scheme).map_err(|reason| MountError::InvalidScheme {
            scheme: scheme.to_owned(),
            reason,
        })?;
        self.change_mounts(|mounts| {
            if !replacing && mounts.contains_key(scheme) {
                return Err(MountError::Taken {
                    scheme: scheme.to_owned(),
                });
            }
            mounts.insert(scheme.to_owned(), Mount::new(provider, settings));
            Ok(())
        })?;
        self.arrivals.mounted(scheme);
        self.announce_scheme_changed(scheme);
        Ok(())
    }

    /// Stops serving `scheme`; false if nothing served it.
    pub fn unmount(&self, scheme: &str) -> bool {
        let Ok(removed) =
            self.change_mounts(|mounts| Ok::<_, Infallible>(mounts.remove(scheme).is_some()));
        if removed {
            self.announce_scheme_changed(scheme);
        }
        removed
    }

    /// The mounted schemes, in order.
    pub fn schemes(&self) -> Vec<String> {
        self.current_mounts().keys().cloned().collect()
    }

    /// A receiver of every event from now on.
    pub fn events(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// Who is subscribed to which resource.
    pub fn subscriptions(&self) -> &Subscriptions {
        &self.subscriptions
    }

    fn publish(&self, event: Event) {
        // Nobody listening is not an error.
        let _ = self.events.send(event);
    }

    /// After a provider came, went or was replaced: the listing changed, and
    /// so may every subscribed resource of its scheme.
    fn announce_scheme_changed(&self, scheme: &str) {
        self.publish(Event::ListChanged {
            scheme: scheme.to_owned(),
        });
        for uri in self.subscriptions.uris_of(scheme) {
            self.publish(Event::Updated { uri });
        }
    }

    fn current_mounts(&self) -> Arc<Mounts> {
        self.mounts
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
            .clone()
    }

    /// Applies `change` to a copy of the mounts and puts the copy in place:
    /// requests under way keep the snapshot they started with.
    fn change_mounts<T, E>(
        &self,
        change: impl FnOnce(&mut Mounts) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut mounts = self
            .mounts
            .write()
            .unwrap_or_else(|poison| poison.into_inner());
        let mut changed = Mounts::clone(&mounts);
        let outcome = change(&mut changed)?;
        *mounts = Arc::new(changed);
        Ok(outcome)
    }

    /// One page of the resources of every provider in `scope`, merged.
    #[tracing::instrument(name = "namespace.list", level = "debug", skip_all)]
    pub async fn list(
        &self,
        cursor: Option<&str>,
        scope: &Scope,
    ) -> Result<Listed<Resource>, NamespaceError> {
        self.paginate::<ResourceEntry>(cursor, scope).await
    }

    /// One page of the templates of every provider in `scope`, merged.
    #[tracing::instrument(name = "namespace.templates", level = "debug", skip_all)]
    pub async fn templates(
        &self,
        cursor: Option<&str>,
        scope: &Scope,
    ) -> Result<Listed<Template>, NamespaceError> {
        self.paginate::<TemplateEntry>(cursor, scope).await
    }

    /// Reads `uri` from the provider of its scheme (once it has arrived, if
    /// it is still loading).
    #[tracing::instrument(name = "namespace.read", level = "debug", skip_all, fields(resmux.scheme = uri.scheme()))]
    pub async fn read(&self, uri: &Uri) -> Result<Read, NamespaceError> {
        let (text, scheme) = (uri.as_str(), uri.scheme());
        let mount = self.servable_mount(uri).await?;
        let result = mount
            .provider
            .read(uri.path())
            .await
            .map_err(|error| provider_error(text, error))?;
        answers::admit_read(scheme, result, &mount.settings.limits, &mount.promises).map_err(
            |reason| {
                tracing::warn!(uri = text, "refused a plugin's answer: {reason}");
                NamespaceError::InvalidAnswer {
                    uri: text.to_owned(),
                    reason,
                }
            },
        )
    }

    /// Completes `target`'s argument from `value` (once the plugin of its
    /// scheme has arrived, if it is still loading).
    #[tracing::instrument(name = "namespace.complete", level = "debug", skip_all)]
    pub async fn complete(
        &self,
        target: &Completing,
        value: &str,
        context: Vec<(String, String)>,
    ) -> Result<Completion, NamespaceError> {
        let template = &target.template;
        let mount = self
            .arrived_mount(template.scheme())
            .await
            .map_err(|unserved| NamespaceError::InvalidArgument(unserved.to_string()))?;
        let request = CompletionRequest {
            path_template: template.path().to_owned(),
            argument: target.argument.clone(),
            value: value.to_owned(),
            context,
        };
        let completion = mount
            .provider
            .complete(request)
            .await
            .map_err(|error| provider_error(template.as_str(), error))?;
        let admitted = answers::admit_completion(completion, &mount.settings.limits);
        if let Some(reason) = admitted.refused.first() {
            tracing::warn!(
                template = template.as_str(),
                refused = admitted.refused.len(),
                "refused part of a plugin's completion: {reason}"
            );
        }
        Ok(admitted.value)
    }

    /// What changed in the provider of `scheme` since the report that gave
    /// `since` (none for a first report), as admitted, with why any changed
    /// path was refused; the caller says how loudly.
    pub async fn changes(
        &self,
        scheme: &str,
        since: Option<String>,
    ) -> Result<Admitted<Changes>, NamespaceError> {
        let root = format!("{scheme}://");
        let mount = self.mount_of(scheme, &root)?;
        let report = mount
            .provider
            .changes(since)
            .await
            .map_err(|error| provider_error(&root, error))?;
        let admitted = answers::admit_changes(scheme, report, &mount.settings.limits)
            .map_err(|reason| NamespaceError::InvalidAnswer { uri: root, reason })?;
        if admitted.value.listing_changed {
            mount.listing_changed();
        }
        Ok(admitted)
    }

    /// Whether every path granted to the provider of `scheme` is watched
    /// now, so that each change there is reported through
    /// [`Self::grants_changed`]. A listing that follows its files serves new
    /// walks only from snapshots begun while they were watched.
    pub fn watching_grants(&self, scheme: &str, watched: bool) {
        if let Some(mount) = self.current_mounts().get(scheme) {
            let mut since = mount
                .grants_watched_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match (watched, *since) {
                (true, None) => *since = Some(Instant::now()),
                (false, _) => *since = None,
                (true, Some(_)) => {}
            }
        }
    }

    /// After something in the paths granted to the provider of `scheme`
    /// changed: no new walk starts from a snapshot of its listings taken so
    /// far.
    pub fn grants_changed(&self, scheme: &str) {
        if let Some(mount) = self.current_mounts().get(scheme) {
            mount.listing_changed();
        }
    }

    /// The mount serving `scheme`.
    fn mount_of(&self, scheme: &str, uri: &str) -> Result<Arc<Mount>, NamespaceError> {
        self.current_mounts()
            .get(scheme)
            .cloned()
            .ok_or_else(|| NamespaceError::NotFound {
                uri: uri.to_owned(),
                reason: Unserved::NoPlugin {
                    scheme: scheme.to_owned(),
                }
                .to_string(),
            })
    }

    /// The mount serving `scheme`, once its plugin has arrived if it is
    /// still loading (waiting at most [`ARRIVAL_PATIENCE`]); else why no
    /// plugin serves it.
    async fn arrived_mount(&self, scheme: &str) -> Result<Arc<Mount>, Unserved> {
        if let Some(mount) = self.current_mounts().get(scheme).cloned() {
            return Ok(mount);
        }
        let waited = self.arrivals.wait(scheme, ARRIVAL_PATIENCE).await;
        // Looked at again: a plugin mounted since the first look is no
        // longer expected.
        if let Some(mount) = self.current_mounts().get(scheme).cloned() {
            return Ok(mount);
        }
        let scheme = scheme.to_owned();
        Err(match waited {
            Waited::Failed(reason) => Unserved::NotLoaded { scheme, reason },
            Waited::StillLoading => Unserved::StillLoading { scheme },
            Waited::Unexpected | Waited::Mounted => Unserved::NoPlugin { scheme },
        })
    }

    /// Whether `uri` could be served: a plugin serves its scheme, or has
    /// arrived within [`ARRIVAL_PATIENCE`] if it was still loading.
    pub async fn check_servable(&self, uri: &Uri) -> Result<(), NamespaceError> {
        self.servable_mount(uri).await.map(drop)
    }

    /// The mount serving `uri`'s scheme, once it has arrived if it was
    /// still loading; not found if none will.
    async fn servable_mount(&self, uri: &Uri) -> Result<Arc<Mount>, NamespaceError> {
        self.arrived_mount(uri.scheme())
            .await
            .map_err(|unserved| NamespaceError::NotFound {
                uri: uri.as_str().to_owned(),
                reason: unserved.to_string(),
            })
    }

    /// Whether the plugin that serves `scheme` now runs its calls where
    /// they are made ([`Provider::calls_run_in_place`]); false if none does.
    pub fn calls_run_in_place(&self, scheme: &str) -> bool {
        self.current_mounts()
            .get(scheme)
            .is_some_and(|mount| mount.provider.calls_run_in_place())
    }

    /// Whether a plugin serves `uri`'s scheme or is loading for it, without
    /// waiting.
    pub fn may_serve(&self, uri: &Uri) -> bool {
        let scheme = uri.scheme();
        self.current_mounts().contains_key(scheme) || self.arrivals.is_loading(scheme)
    }

    /// Fills one page of a merged listing, provider after provider in scheme
    /// order, from each mount's listing snapshot. A provider that fails is
    /// logged and passed over, so one broken plugin never hides the others;
    /// entries that break the contract are logged and dropped.
    async fn paginate<T: Snapshotted>(
        &self,
        cursor: Option<&str>,
        scope: &Scope,
    ) -> Result<Listed<T::Admitted>, NamespaceError> {
        let listing = T::LISTING;
        let mounts = self.current_mounts();
        let after = |scheme: &str| next_scheme(&mounts, scope, listing, Bound::Excluded(scheme));
        let mut next = match cursor {
            None => next_scheme(&mounts, scope, listing, Bound::Unbounded),
            Some(cursor) => Some(
                self.seal
                    .open(cursor, listing)
                    .map_err(|reason| NamespaceError::InvalidCursor(reason.into()))?,
            ),
        };
        let mut items = Vec::new();
        let mut cache: Option<CacheHint> = None;
        let mut calls = MAX_CALLS_PER_PAGE;
        while let Some(position) = next.take() {
            if items.len() >= self.page_size || calls == 0 {
                next = Some(position);
                break;
            }
            let scheme = position.scheme.as_str();
            // A scheme gone since the cursor was made (clients were told the
            // listing changed) or outside this client's scope is skipped.
            let outlook = scope.outlook(Action::List, scheme);
            let Some(mount) = mounts.get(scheme).filter(|_| outlook != Outlook::Nothing) else {
                next = after(scheme);
                continue;
            };
            let snapshots = T::snapshots(mount);
            let snapshot = match position.snapshot {
                Some(id) => snapshots.resume(
                    id,
                    position.offset,
                    Resume {
                        cursor: position.inner.clone(),
                        skip: position.skip,
                    },
                ),
                None => snapshots.for_new_walk(mount.changes_reported_since()),
            };
            let room = self.page_size - items.len();
            let taken = snapshot
                .take(position.offset, room, &mut calls, |cursor| {
                    Box::pin(fetch_page::<T>(scheme, mount, cursor))
                })
                .await;
            if let Some(part) = taken.cache {
                cache = Some(cache.map_or(part, |merged| merge_cache(merged, part)));
            }
            let offset = position.offset + taken.items.len();
            match outlook {
                Outlook::EntryByEntry => items.extend(
                    taken
                        .items
                        .into_iter()
                        .filter(|item| scope.decide(Action::List, || T::canonical(item)).permitted),
                ),
                _ => items.extend(taken.items),
            }
            next = if taken.ended {
                after(scheme)
            } else {
                Some(Position {
                    snapshot: Some(snapshot.id()),
                    offset,
                    inner: taken.resume.cursor,
                    skip: taken.resume.skip,
                    ..position
                })
            };
        }
        let next_cursor = next.map(|position| self.seal.seal(&position));
        let mut cache = cache.unwrap_or(DEFAULT_CACHE);
        if next_cursor.is_some() {
            // A page kept (here or by the client) keeps its cursor: for at
            // most half the time the cursor surely opens.
            let half_life = self.seal.sure_life().as_millis() / 2;
            cache.ttl_ms = cache.ttl_ms.min(half_life.try_into().unwrap_or(u64::MAX));
        }
        Ok(Listed {
            items,
            next_cursor,
            cache,
        })
    }
}

/// One page of `mount`'s listing from its plugin, admitted; `None` (and the
/// reason in the log) if the plugin failed or the page broke the contract.
async fn fetch_page<T: Listable>(
    scheme: &str,
    mount: &Mount,
    cursor: Option<String>,
) -> Option<snapshot::Page<T::Admitted>> {
    let page = match T::fetch(mount.provider.as_ref(), cursor.clone()).await {
        Ok(page) => page,
        Err(error) => {
            tracing::warn!(scheme, "listing passed over a failing plugin: {error}");
            return None;
        }
    };
    let limits = &mount.settings.limits;
    match answers::admit_page(scheme, page, cursor.as_deref(), limits, &mount.promises) {
        Ok(admitted) => {
            for reason in admitted.refused {
                tracing::warn!(scheme, "listing dropped an invalid entry: {reason}");
            }
            if let Some(reason) = admitted.stopped {
                tracing::warn!(scheme, "listing stopped a plugin: {reason}");
            }
            Some(admitted.page)
        }
        Err(reason) => {
            tracing::warn!(
                scheme,
                "listing passed over a plugin whose page is refused: {reason}"
            );
            None
        }
    }
}

/// A listing whose snapshots a mount keeps.
trait Snapshotted: Listable {
    fn snapshots(mount: &Mount) -> &Snapshots<Self::Admitted>;

    /// An admitted entry's URI (or URI template) as access decisions see it.
    fn canonical(entry: &Self::Admitted) -> Canonical;
}

impl Snapshotted for ResourceEntry {
    fn snapshots(mount: &Mount) -> &Snapshots<Resource> {
        &mount.resources
    }

    fn canonical(entry: &Resource) -> Canonical {
        entry.uri.canonical()
    }
}

impl Snapshotted for TemplateEntry {
    fn snapshots(mount: &Mount) -> &Snapshots<Template> {
        &mount.templates
    }

    fn canonical(entry: &Template) -> Canonical {
        entry.uri_template.canonical()
    }
}

impl Mount {
    fn new(provider: Arc<dyn Provider>, settings: MountSettings) -> Arc<Self> {
        Arc::new(Self {
            provider,
            settings,
            promises: Promises::default(),
            resources: Snapshots::default(),
            templates: Snapshots::default(),
            grants_watched_since: Mutex::default(),
        })
    }

    /// Since when any change of the provider's listing is reported (through
    /// [`Namespace::grants_changed`]): since its grants are all watched, if
    /// its listing follows them.
    fn changes_reported_since(&self) -> Option<Instant> {
        if !self.settings.listing_follows_files {
            return None;
        }
        *self
            .grants_watched_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The start of the first scheme after `from` that `scope` allows.
fn next_scheme(
    mounts: &Mounts,
    scope: &Scope,
    listing: Listing,
    from: Bound<&str>,
) -> Option<Position> {
    mounts
        .range::<str, _>((from, Bound::Unbounded))
        .map(|(scheme, _)| scheme)
        .find(|scheme| scope.may_list_any_of(scheme))
        .map(|scheme| Position {
            listing,
            scheme: scheme.clone(),
            snapshot: None,
            offset: 0,
            inner: None,
            skip: 0,
        })
}

/// What a completion completes: a template, parsed once, and one of its
/// arguments. Made only by [`check_completion`].
#[derive(Debug)]
pub struct Completing {
    template: UriTemplate,
    argument: String,
}

impl Completing {
    pub fn template(&self) -> &UriTemplate {
        &self.template
    }
}

/// What a completion request for `argument` of `template_uri` completes, if
/// the template is well formed and has that argument.
pub fn check_completion(template_uri: &str, argument: &str) -> Result<Completing, NamespaceError> {
    let template = UriTemplate::parse(template_uri).map_err(|reason| {
        NamespaceError::InvalidArgument(format!("template {template_uri:?} {reason}"))
    })?;
    if !template.variables().iter().any(|name| name == argument) {
        return Err(NamespaceError::InvalidArgument(format!(
            "template {template} has no argument {argument:?}"
        )));
    }
    Ok(Completing {
        template,
        argument: argument.to_owned(),
    })
}

/// The answer to a completion in a scheme no plugin serves.
pub fn unserved_completion(scheme: &str) -> NamespaceError {
    NamespaceError::InvalidArgument(
        Unserved::NoPlugin {
            scheme: scheme.to_owned(),
        }
        .to_string(),
    )
}

fn provider_error(uri: &str, error: ProviderError) -> NamespaceError {
    match error {
        ProviderError::NotFound(reason) => NamespaceError::NotFound {
            uri: uri.to_owned(),
            reason,
        },
        error => NamespaceError::Provider {
            uri: uri.to_owned(),
            error,
        },
    }
}
