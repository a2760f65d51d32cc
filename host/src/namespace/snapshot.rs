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
//! every new walk), or, for a plugin whose every change of its listing is
//! reported (one whose listing follows its watched files), while nothing
//! was reported since the snapshot began; and never after the plugin or its
//! files reported a change of its listing. A walk under way keeps its
//! snapshot to its end, so pages never shift under it. The [`KEPT`]
//! snapshots of a mount used last are kept; a cursor into one dropped since
//! carries the plugin's cursor of the page it stands in, and resumes from
//! that page in a new one.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use crate::contract::CacheHint;

/// Snapshots kept per mount and listing, for the walks still under way; the
/// one used longest ago goes first.
const KEPT: usize = 8;

/// Entries one snapshot holds at most, and their bytes (a rough count of
/// their text); a listing longer than either ends there (and says so in the
/// log), so that no plugin can make the host hoard memory.
pub const MAX_SNAPSHOT_ENTRIES: usize = 1_000_000;
pub const MAX_SNAPSHOT_BYTES: usize = 64 << 20;

/// Snapshot ids, unique in the process, so that a cursor never lands in a
/// snapshot of another plugin or version; counted from a random start, so
/// that a cursor from another replica sharing the cursor secret names no
/// snapshot here (and resumes from the plugin's cursor it carries).
static LAST_ID: LazyLock<AtomicU64> = LazyLock::new(|| AtomicU64::new(rand::random()));

/// What an entry of a snapshot weighs against [`MAX_SNAPSHOT_BYTES`].
pub trait Weigh {
    fn weight(&self) -> usize;
}

/// The snapshots of one listing of one mount.
pub struct Snapshots<T> {
    kept: Mutex<VecDeque<Arc<Snapshot<T>>>>,
}

/// One walk of a plugin's listing, filled as far as clients have needed.
pub struct Snapshot<T> {
    id: u64,
    started: Instant,
    /// No new walk may start here: the plugin reported a change, a page
    /// failed, or the snapshot does not start at the listing's beginning.
    stale: AtomicBool,
    /// The shortest lifetime of the pages fetched so far, in milliseconds.
    ttl_ms: AtomicU64,
    /// The offset in the walk of this snapshot's first entry.
    base: usize,
    filled: tokio::sync::Mutex<Filled<T>>,
}

struct Filled<T> {
    items: Vec<T>,
    bytes: usize,
    pages: Vec<Fetch>,
    /// The plugin's cursor for its next page (none for its first), or
    /// `None` once the listing has ended.
    next: Option<Option<String>>,
    /// Every cursor the plugin gave, so that a listing going round in
    /// circles ends.
    seen: HashSet<String>,
}

/// One page of the plugin in the snapshot: the cursor that fetched it,
/// where it ended, and what it said of its own lifetime.
struct Fetch {
    cursor: Option<String>,
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

/// Where a walk stands in the plugin's own pages: the cursor of the page
/// it is in, and how many entries of that page it has had. A cursor whose
/// snapshot was dropped resumes from here, at the cost of one page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resume {
    pub cursor: Option<String>,
    pub skip: usize,
}

/// Entries taken from a snapshot for one client page.
pub struct Taken<T> {
    pub items: Vec<T>,
    /// The hint of the plugin pages they came from, aged since they came.
    pub cache: Option<CacheHint>,
    /// Whether the walk ends after them in this listing: it ended, or a
    /// page failed (the walk passes over the rest, and a later walk asks
    /// again).
    pub ended: bool,
    /// Where the walk then stands in the plugin's pages.
    pub resume: Resume,
}

impl<T> Default for Snapshots<T> {
    fn default() -> Self {
        Self {
            kept: Mutex::default(),
        }
    }
}

impl<T: Clone + Weigh> Snapshots<T> {
    /// The snapshot a new walk starts from: the newest, while it is fresh,
    /// or else a new one. With `reported_since`, every change of the
    /// listing since then is reported ([`Self::invalidate`]), so a snapshot
    /// begun since stays fresh until one is.
    pub fn for_new_walk(&self, reported_since: Option<Instant>) -> Arc<Snapshot<T>> {
        let mut kept = self.lock();
        match kept.back() {
            Some(newest) if newest.fresh(reported_since) => newest.clone(),
            _ => keep(&mut kept, Snapshot::new(0, None, false)),
        }
    }

    /// The snapshot `id` of a walk under way, at `offset`; if it was
    /// dropped, a new one from the plugin page the walk stands in, which
    /// `at` names.
    pub fn resume(&self, id: u64, offset: usize, at: Resume) -> Arc<Snapshot<T>> {
        let mut kept = self.lock();
        match kept.iter().position(|snapshot| snapshot.id == id) {
            Some(index) => {
                let snapshot = kept.remove(index).expect("the index was just found");
                keep(&mut kept, snapshot)
            }
            None => {
                let base = offset.saturating_sub(at.skip);
                keep(&mut kept, Snapshot::new(base, at.cursor, true))
            }
        }
    }

    /// After the plugin, or its files, reported a change of its listing: no
    /// new walk starts from any snapshot taken so far.
    pub fn invalidate(&self) {
        for snapshot in self.lock().iter() {
            snapshot.stale.store(true, Ordering::Relaxed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Snapshot<T>>>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Puts `snapshot` last among the kept (the most recently used), dropping
/// the one used longest ago if there are too many.
fn keep<T>(kept: &mut VecDeque<Arc<Snapshot<T>>>, snapshot: Arc<Snapshot<T>>) -> Arc<Snapshot<T>> {
    if kept.len() == KEPT {
        kept.pop_front();
    }
    kept.push_back(snapshot.clone());
    snapshot
}

impl<T: Clone + Weigh> Snapshot<T> {
    /// A snapshot whose first entry is at `base` in the walk, filled from
    /// the plugin page `cursor` names.
    fn new(base: usize, cursor: Option<String>, stale: bool) -> Arc<Self> {
        Arc::new(Self {
            id: LAST_ID.fetch_add(1, Ordering::Relaxed).wrapping_add(1),
            started: Instant::now(),
            stale: AtomicBool::new(stale),
            ttl_ms: AtomicU64::new(u64::MAX),
            base,
            filled: tokio::sync::Mutex::new(Filled {
                items: Vec::new(),
                bytes: 0,
                pages: Vec::new(),
                next: Some(cursor),
                seen: HashSet::new(),
            }),
        })
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether a new walk may start here: not stale, and younger than the
    /// shortest lifetime its pages gave (a snapshot with no page yet is
    /// being filled right now) or begun since `reported_since`.
    fn fresh(&self, reported_since: Option<Instant>) -> bool {
        let ttl = Duration::from_millis(self.ttl_ms.load(Ordering::Relaxed));
        !self.stale.load(Ordering::Relaxed)
            && (self.started.elapsed() < ttl
                || reported_since.is_some_and(|since| since <= self.started))
    }

    /// Up to `room` entries from `offset` (in the walk) on, asking the
    /// plugin (through `fetch`, given the plugin's cursor) for the pages not
    /// yet fetched, at most `calls` of them. `fetch` answers `None` for a
    /// page that failed or broke the contract (it says why in the log):
    /// this walk passes over the rest, no new walk starts from this
    /// snapshot, and a walk that resumes it asks for that page again. A
    /// call cancelled part-way leaves the snapshot as it was.
    pub async fn take<'a>(
        &self,
        offset: usize,
        room: usize,
        calls: &mut usize,
        mut fetch: impl FnMut(Option<String>) -> BoxFuture<'a, Option<Page<T>>>,
    ) -> Taken<T> {
        let mut filled = self.filled.lock().await;
        let start = offset.saturating_sub(self.base);
        let wanted = start.saturating_add(room);
        let mut failed = false;
        while filled.items.len() < wanted && *calls > 0 {
            let Some(cursor) = filled.next.clone() else {
                break;
            };
            *calls -= 1;
            let Some(page) = fetch(cursor.clone()).await else {
                self.stale.store(true, Ordering::Relaxed);
                failed = true;
                break;
            };
            filled.add(cursor, page);
            self.ttl_ms.fetch_min(
                filled.pages.last().map_or(0, |page| page.cache.ttl_ms),
                Ordering::Relaxed,
            );
        }
        let start = start.min(filled.items.len());
        let end = wanted.min(filled.items.len());
        Taken {
            items: filled.items[start..end].to_vec(),
            cache: filled.cache(start, end),
            ended: failed || filled.next.is_none() && end == filled.items.len(),
            resume: filled.resume_at(end),
        }
    }
}

impl<T: Weigh> Filled<T> {
    /// Adds the page `cursor` fetched, up to the snapshot's limits.
    fn add(&mut self, cursor: Option<String>, page: Page<T>) {
        let mut next = page.next_cursor;
        if let Some(given) = &next
            && !self.seen.insert(given.clone())
        {
            tracing::warn!("a listing ended where its plugin gave a cursor it had given before");
            next = None;
        }
        for item in page.items {
            let weight = item.weight();
            if self.items.len() == MAX_SNAPSHOT_ENTRIES || self.bytes + weight > MAX_SNAPSHOT_BYTES
            {
                tracing::warn!(
                    "a listing was cut at {} entries ({} bytes), the most one walk holds",
                    self.items.len(),
                    self.bytes
                );
                next = None;
                break;
            }
            self.bytes += weight;
            self.items.push(item);
        }
        self.pages.push(Fetch {
            cursor,
            end: self.items.len(),
            cache: page.cache,
            at: Instant::now(),
        });
        self.next = next.map(Some);
    }

    /// The hint of the plugin pages entries `start..end` came from.
    fn cache(&self, start: usize, end: usize) -> Option<CacheHint> {
        if end <= start {
            return None;
        }
        let first_page = self.pages.partition_point(|page| page.end <= start);
        let last_page = self.pages.partition_point(|page| page.end < end);
        self.pages[first_page..=last_page]
            .iter()
            .map(|page| CacheHint {
                ttl_ms: page
                    .cache
                    .ttl_ms
                    .saturating_sub(page.at.elapsed().as_millis() as u64),
                scope: page.cache.scope,
            })
            .reduce(merge_cache)
    }

    /// Where a walk that has had the entries before `end` stands in the
    /// plugin's pages.
    fn resume_at(&self, end: usize) -> Resume {
        let page = self.pages.partition_point(|page| page.end <= end);
        match self.pages.get(page) {
            Some(fetch) => {
                let page_start = page
                    .checked_sub(1)
                    .map_or(0, |before| self.pages[before].end);
                Resume {
                    cursor: fetch.cursor.clone(),
                    skip: end - page_start,
                }
            }
            None => Resume {
                cursor: self.next.clone().flatten(),
                skip: 0,
            },
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namespace::DEFAULT_CACHE;

    impl Weigh for u32 {
        fn weight(&self) -> usize {
            4
        }
    }

    /// Walks a listing of two entries on one page with no cache hint, as a
    /// new walk would; returns the snapshot it read.
    async fn walk(snapshots: &Snapshots<u32>, reported_since: Option<Instant>) -> u64 {
        let snapshot = snapshots.for_new_walk(reported_since);
        let mut calls = 1;
        let taken = snapshot
            .take(0, 10, &mut calls, |_| {
                Box::pin(async {
                    Some(Page {
                        items: vec![1, 2],
                        next_cursor: None,
                        cache: DEFAULT_CACHE,
                    })
                })
            })
            .await;
        assert_eq!(taken.items, [1, 2]);
        assert!(taken.ended);
        snapshot.id()
    }

    #[tokio::test]
    async fn a_listing_whose_changes_are_reported_is_walked_again_only_after_one() {
        let snapshots = Snapshots::default();
        // No hint and no reports: each walk asks the plugin afresh.
        let first = walk(&snapshots, None).await;
        let second = walk(&snapshots, None).await;
        assert_ne!(first, second);
        // Reports only from a time after the newest snapshot began: it is
        // not reused.
        let later = Instant::now() + Duration::from_secs(60);
        assert_ne!(walk(&snapshots, Some(later)).await, second);
        // Reports from before: the newest is reused until a change.
        let since = Instant::now();
        let reported = walk(&snapshots, Some(since)).await;
        assert_eq!(walk(&snapshots, Some(since)).await, reported);
        assert_eq!(walk(&snapshots, Some(since)).await, reported);
        snapshots.invalidate();
        let after_change = walk(&snapshots, Some(since)).await;
        assert_ne!(after_change, reported);
        assert_eq!(walk(&snapshots, Some(since)).await, after_change);
        // Without reports, a fresh snapshot with no hint is not reused.
        assert_ne!(walk(&snapshots, None).await, after_change);
    }
}
