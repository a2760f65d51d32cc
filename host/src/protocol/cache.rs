//! The response cache: list pages and reads kept for as long as their
//! provider's cache hint (`ttl-ms`) allows, so repeated requests spare the
//! plugin. A `private` answer is kept for the client that got it alone. A
//! `public` read is shared by every client: each read is decided by the
//! client's scope before the cache is asked. A list page, filtered to one
//! client's scope, is shared (if `public`) only by clients without a guard;
//! for a guarded client it is kept under its guard's key, which names
//! everything the guard decides by, so no other principal gets it. A change
//! announced
//! by the namespace drops what it may have made stale: an updated resource
//! its reads, a changed scheme every page and its reads. Answers served from
//! the cache carry the ttl they have left. Reads served from here still pass
//! the client's rate limit and reach the audit log. Hits, misses, evictions
//! and the bytes held are in the metrics.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use moka::Expiry;
use moka::sync::Cache;
use tokio::sync::broadcast::error::RecvError;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::contract::{CacheHint, CacheScope};
use crate::namespace::uri::Uri;
use crate::namespace::{Event, Listed, Namespace, Read, Resource, Scope, Template};
use crate::telemetry::metrics;
use crate::telemetry::metrics::CacheKind;

/// One cached answer and when it goes stale.
struct Cached<T> {
    value: Arc<T>,
    stored: Instant,
    ttl: Duration,
    bytes: u32,
}

impl<T> Clone for Cached<T> {
    fn clone(&self) -> Self {
        Self {
            value: self.value.clone(),
            ..*self
        }
    }
}

/// An answer that carries a cache hint.
trait Hinted: Clone {
    fn hint(&mut self) -> &mut CacheHint;
}

impl Hinted for Read {
    fn hint(&mut self) -> &mut CacheHint {
        &mut self.cache
    }
}

impl<T: Clone> Hinted for Listed<T> {
    fn hint(&mut self) -> &mut CacheHint {
        &mut self.cache
    }
}

impl<T: Hinted> Cached<T> {
    /// A copy of the answer, carrying the ttl it has left.
    fn fresh(&self) -> T {
        let mut answer = T::clone(&self.value);
        let left = self.ttl.saturating_sub(self.stored.elapsed());
        answer.hint().ttl_ms = left.as_millis() as u64;
        answer
    }
}

/// Whose an entry is: a client's own, or everyone's.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Owner {
    Client(Arc<str>),
    Everyone,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct ReadKey {
    uri: Uri,
    owner: Owner,
}

struct UntilStale;

impl<K, T> Expiry<K, Cached<T>> for UntilStale {
    fn expire_after_create(&self, _: &K, value: &Cached<T>, _: Instant) -> Option<Duration> {
        Some(value.ttl)
    }
}

/// Cached reads and list pages, bounded in bytes.
pub struct ResponseCache {
    reads: Cache<ReadKey, Cached<Read>>,
    resources: Pages<Resource>,
    templates: Pages<Template>,
}

/// The kept first pages of one listing, one per owner.
pub(super) struct Pages<T>(Cache<Owner, Cached<Listed<T>>>);

/// A listing whose pages the cache keeps: resources or templates.
pub(super) trait Paged: Clone + Send + Sync + 'static {
    fn pages(cache: &ResponseCache) -> &Pages<Self>;
}

impl Paged for Resource {
    fn pages(cache: &ResponseCache) -> &Pages<Self> {
        &cache.resources
    }
}

impl Paged for Template {
    fn pages(cache: &ResponseCache) -> &Pages<Self> {
        &cache.templates
    }
}

/// Reads and pages share the budget: half for reads, a quarter per listing.
fn cache<K, T>(budget: u64) -> Cache<K, Cached<T>>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
    T: Send + Sync + 'static,
{
    Cache::builder()
        .max_capacity(budget)
        .weigher(|_, value: &Cached<T>| value.bytes)
        .expire_after(UntilStale)
        .support_invalidation_closures()
        .eviction_listener(|_, _, cause| {
            if cause.was_evicted() {
                metrics().cache_evictions.inc();
            }
        })
        .build()
}

impl ResponseCache {
    /// A cache of at most `budget` bytes that forgets what `namespace`
    /// announces as changed.
    pub fn new(budget: u64, namespace: &Arc<Namespace>) -> Arc<Self> {
        let cache = Arc::new(Self {
            reads: cache(budget / 2),
            resources: Pages(cache(budget / 4)),
            templates: Pages(cache(budget / 4)),
        });
        forget_changes(Arc::downgrade(&cache), namespace);
        metrics().register_collector(HeldBytes(Arc::downgrade(&cache)));
        cache
    }

    /// A kept read of `uri` that `client` may have, with the ttl it has left.
    pub fn read(&self, uri: &Uri, client: &Arc<str>) -> Option<Read> {
        let kept = [Owner::Client(client.clone()), Owner::Everyone]
            .into_iter()
            .find_map(|owner| {
                self.reads.get(&ReadKey {
                    uri: uri.clone(),
                    owner,
                })
            })
            .map(|cached| cached.fresh());
        count_lookup("read", kept)
    }

    pub fn keep_read(&self, uri: &Uri, client: &Arc<str>, read: &Read) {
        let bytes = read.byte_count();
        let owners = (Owner::Client(client.clone()), Owner::Everyone);
        if let Some((owner, cached)) = entry(read.cache, owners, read.clone(), bytes) {
            let key = ReadKey {
                uri: uri.clone(),
                owner,
            };
            self.reads.insert(key, cached);
        }
    }

    /// A kept first page of listing `T` that `client` may have within
    /// `scope`, with the ttl it has left.
    pub(super) fn page<T: Paged>(&self, client: &Arc<str>, scope: &Scope) -> Option<Listed<T>> {
        let (private, public) = page_owners(client, scope);
        let find = |owner| T::pages(self).0.get(&owner);
        let kept = match public == private {
            true => find(private),
            false => find(private).or_else(|| find(public)),
        }
        .map(|cached| cached.fresh());
        count_lookup("page", kept)
    }

    /// Keeps `page`, the first of listing `T` for `client` within `scope`.
    pub(super) fn keep_page<T: Paged>(&self, client: &Arc<str>, scope: &Scope, page: &Listed<T>) {
        // A rough size: listings are small next to reads.
        let bytes = (page.items.len() as u64).saturating_mul(512);
        let owners = page_owners(client, scope);
        if let Some((owner, cached)) = entry(page.cache, owners, page.clone(), bytes) {
            T::pages(self).0.insert(owner, cached);
        }
    }

    fn forget(&self, event: &Event) {
        // Invalidation closures are only refused when the cache was built
        // without them, which `cache` never does.
        match event {
            Event::Updated { uri } => {
                let uri = uri.clone();
                let _ = self
                    .reads
                    .invalidate_entries_if(move |key, _| key.uri == uri);
            }
            Event::ListChanged { scheme } => {
                let scheme = scheme.clone();
                let _ = self
                    .reads
                    .invalidate_entries_if(move |key, _| key.uri.scheme() == scheme);
                self.resources.0.invalidate_all();
                self.templates.0.invalidate_all();
            }
        }
    }

    fn forget_everything(&self) {
        self.reads.invalidate_all();
        self.resources.0.invalidate_all();
        self.templates.0.invalidate_all();
    }
}

/// Whose a private and a public page kept for `client` within `scope` is.
/// Unguarded pages are the client's and everyone's. A guarded page is
/// filtered for its principal, so both are kept under the guard's key, which
/// names everything the guard decides by: no other principal gets them.
fn page_owners(client: &Arc<str>, scope: &Scope) -> (Owner, Owner) {
    match scope {
        Scope::All => (Owner::Client(client.clone()), Owner::Everyone),
        Scope::Guarded(guard) => (Owner::Client(guard.key()), Owner::Client(guard.key())),
    }
}

/// The entry for an answer with `hint`, or none if it may not be kept: a
/// private answer goes to the first of `owners`, a public one to the second.
fn entry<T>(
    hint: CacheHint,
    (private, public): (Owner, Owner),
    value: T,
    bytes: u64,
) -> Option<(Owner, Cached<T>)> {
    if hint.ttl_ms == 0 {
        return None;
    }
    let owner = match hint.scope {
        CacheScope::Private => private,
        CacheScope::Public => public,
    };
    let cached = Cached {
        value: Arc::new(value),
        stored: Instant::now(),
        ttl: Duration::from_millis(hint.ttl_ms),
        bytes: u32::try_from(bytes).unwrap_or(u32::MAX).max(1),
    };
    Some((owner, cached))
}

/// Drops what each announced change may have made stale, for as long as the
/// cache lives.
fn forget_changes(cache: Weak<ResponseCache>, namespace: &Namespace) {
    let mut events = namespace.events();
    tokio::spawn(async move {
        loop {
            let event = events.recv().await;
            let Some(cache) = cache.upgrade() else { return };
            match event {
                Ok(event) => cache.forget(&event),
                Err(RecvError::Lagged(_)) => cache.forget_everything(),
                Err(RecvError::Closed) => return,
            }
        }
    });
}

/// Counts a lookup of `kind` as a hit or a miss.
fn count_lookup<T>(kind: &'static str, kept: Option<T>) -> Option<T> {
    let counted = if kept.is_some() {
        &metrics().cache_hits
    } else {
        &metrics().cache_misses
    };
    counted.get_or_create(&CacheKind { kind }).inc();
    kept
}

/// The bytes the cache holds, read at each scrape.
#[derive(Debug)]
struct HeldBytes(Weak<ResponseCache>);

impl Collector for HeldBytes {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(cache) = self.0.upgrade() else {
            return Ok(());
        };
        cache.reads.run_pending_tasks();
        cache.resources.0.run_pending_tasks();
        cache.templates.0.run_pending_tasks();
        let held = cache.reads.weighted_size()
            + cache.resources.0.weighted_size()
            + cache.templates.0.weighted_size();
        let metric = encoder.encode_descriptor(
            "resmux_response_cache_bytes",
            "What the response cache holds",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(i64::try_from(held).unwrap_or(i64::MAX)).encode(metric)
    }
}
