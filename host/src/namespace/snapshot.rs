//! Listing snapshots: one mount's listing (of resources or of templates) as
//! the host walked it from the plugin.
//!
//! A plugin keeps no state between calls, so asking it for each page a
//! client wants would make it redo its work for every page. Instead, clients
//! walk a snapshot, which is filled from the plugin's own pages, in order,
//! as the first client to get that far needs them; every page of the plugin
//! is asked for once per snapshot, and clients that walk together share the
//! calls. A full walk then costs the plugin O(n), not O(n²).
//!
//! A new walk starts from the newest snapshot while that snapshot's cache
//! hint says it is fresh (a plugin that gives no hint is asked afresh for
//! every new walk) and until the plugin reports a change of its listing; a
//! walk under way keeps its snapshot to its end, so pages never shift under
//! it. The last [`KEPT`] snapshots of a mount are kept; a cursor into one
//! dropped since resumes at the same offset in a new one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use crate::contract::CacheHint;

/// Snapshots kept per mount and listing, for the walks still under way.
const KEPT: usize = 4;

/// Entries one snapshot holds at most; a listing longer than this ends there
/// (and says so in the log), so that no plugin can make the host hoard
/// memory.
pub const MAX_SNAPSHOT_ENTRIES: usize = 1_000_000;

/// The snapshots of one listing of one mount.
pub struct Snapshots<T> {
    kept: Mutex<VecDeque<Arc<Snapshot<T>>>>,
    last_id: AtomicU64,
}

/// One walk of a plugin's listing, filled as far as clients have needed.
pub struct Snapshot<T> {
    id: u64,
    started: Instant,
    /// No new walk may start here: the plugin reported a change, or the walk
    /// failed part-way.
    stale: AtomicBool,
    /// The shortest lifetime of the pages fetched so far, in milliseconds.
    ttl_ms: AtomicU64,
    filled: tokio::sync::Mutex<Filled<T>>,
}

struct Filled<T> {
    items: Vec<T>,
    pages: Vec<Fetch>,
    /// The plugin's cursor for its next page (none for its first), or
    /// `None` once the listing has ended.
    next: Option<Option<String>>,
}

/// Where one page of the plugin ended in the snapshot, and what it said of
/// its own lifetime.
struct Fetch {
    end: usize,
    cache: CacheHint,
    at: Instant,
}

/// One page of a plugin's listing, its entries admitted.
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
    pub cache: CacheHint,
}

/// Entries taken from a snapshot for one client page.
pub struct Taken<T> {
    pub items: Vec<T>,
    /// The hint of the plugin pages they came from, aged since they came.
    pub cache: Option<CacheHint>,
    /// Whether the listing ends after them.
    pub ended: bool,
}

impl<T> Default for Snapshots<T> {
    fn default() -> Self {
        Self {
            kept: Mutex::default(),
            last_id: AtomicU64::new(0),
        }
    }
}

impl<T: Clone> Snapshots<T> {
    /// The snapshot a new walk starts from: the newest, while it is fresh,
    /// or else a new one.
    pub fn for_new_walk(&self) -> Arc<Snapshot<T>> {
        let mut kept = self.lock();
        match kept.back() {
            Some(newest) if newest.fresh() => newest.clone(),
            _ => self.start(&mut kept),
        }
    }

    /// The snapshot `id` of a walk under way, or a new one if it was dropped.
    pub fn resume(&self, id: u64) -> Arc<Snapshot<T>> {
        let mut kept = self.lock();
        match kept.iter().find(|snapshot| snapshot.id == id) {
            Some(snapshot) => snapshot.clone(),
            None => self.start(&mut kept),
        }
    }

    /// After the plugin reported a change of its listing: no new walk starts
    /// from any snapshot taken so far.
    pub fn invalidate(&self) {
        for snapshot in self.lock().iter() {
            snapshot.stale.store(true, Ordering::Relaxed);
        }
    }

    fn start(&self, kept: &mut VecDeque<Arc<Snapshot<T>>>) -> Arc<Snapshot<T>> {
        let id = self.last_id.fetch_add(1, Ordering::Relaxed) + 1;
        let snapshot = Arc::new(Snapshot {
            id,
            started: Instant::now(),
            stale: AtomicBool::new(false),
            ttl_ms: AtomicU64::new(u64::MAX),
            filled: tokio::sync::Mutex::new(Filled {
                items: Vec::new(),
                pages: Vec::new(),
                next: Some(None),
            }),
        });
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back(snapshot.clone());
        snapshot
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Snapshot<T>>>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: Clone> Snapshot<T> {
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether a new walk may start here: not stale, and younger than the
    /// shortest lifetime its pages gave (a snapshot with no page yet is
    /// being filled right now).
    fn fresh(&self) -> bool {
        let ttl = Duration::from_millis(self.ttl_ms.load(Ordering::Relaxed));
        !self.stale.load(Ordering::Relaxed) && self.started.elapsed() < ttl
    }

    /// Up to `room` entries from `offset` on, asking the plugin (through
    /// `fetch`, given the plugin's cursor) for the pages not yet fetched,
    /// at most `calls` of them. `fetch` answers `None` for a page that
    /// failed or broke the contract (it says why in the log): the listing
    /// ends there, and no new walk starts from this snapshot.
    pub async fn take<'a>(
        &self,
        offset: usize,
        room: usize,
        calls: &mut usize,
        mut fetch: impl FnMut(Option<String>) -> BoxFuture<'a, Option<Page<T>>>,
    ) -> Taken<T> {
        let mut filled = self.filled.lock().await;
        let wanted = offset.saturating_add(room);
        while filled.items.len() < wanted && *calls > 0 {
            let Some(cursor) = filled.next.take() else {
                break;
            };
            *calls -= 1;
            let Some(page) = fetch(cursor).await else {
                self.stale.store(true, Ordering::Relaxed);
                break;
            };
            let fits = MAX_SNAPSHOT_ENTRIES - filled.items.len();
            let cut = page.items.len() > fits;
            if cut {
                tracing::warn!(
                    "a listing was cut at {MAX_SNAPSHOT_ENTRIES} entries, the most one walk holds"
                );
            }
            filled.items.extend(page.items.into_iter().take(fits));
            let end = filled.items.len();
            filled.pages.push(Fetch {
                end,
                cache: page.cache,
                at: Instant::now(),
            });
            self.ttl_ms.fetch_min(page.cache.ttl_ms, Ordering::Relaxed);
            filled.next = if cut {
                None
            } else {
                page.next_cursor.map(Some)
            };
        }
        let start = offset.min(filled.items.len());
        let end = wanted.min(filled.items.len());
        let cache = (end > start).then(|| {
            let first_page = filled.pages.partition_point(|page| page.end <= start);
            let last_page = filled.pages.partition_point(|page| page.end < end);
            filled.pages[first_page..=last_page]
                .iter()
                .map(|page| CacheHint {
                    ttl_ms: page
                        .cache
                        .ttl_ms
                        .saturating_sub(page.at.elapsed().as_millis() as u64),
                    scope: page.cache.scope,
                })
                .reduce(merge_cache)
                .expect("entries come from at least one page")
        });
        Taken {
            items: filled.items[start..end].to_vec(),
            cache,
            ended: filled.next.is_none() && end == filled.items.len(),
        }
    }
}

/// The hint of an answer built from several pages: the shortest lifetime,
/// private if any part is private.
pub fn merge_cache(merged: CacheHint, part: CacheHint) -> CacheHint {
    CacheHint {
        ttl_ms: merged.ttl_ms.min(part.ttl_ms),
        scope: if merged.scope == crate::contract::CacheScope::Private {
            merged.scope
        } else {
            part.scope
        },
    }
}
