//! The namespace's core driven in-process by scripted providers, no plugin
//! compiled: merged pagination across plugins, plugins that fail or vanish
//! in the middle of a walk, cursors into a plugin replaced since, what one
//! client's scope lets it see, and the bound on provider calls per page.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use async_trait::async_trait;

use super::uri::Canonical;
use super::{Action, Guard, MountSettings, Namespace, NamespaceError, Outlook, Scope, Verdict};
use crate::contract::{
    CacheHint, CacheScope, ChangeReport, Completion, CompletionRequest, Metadata, Page, Provider,
    ProviderError, ReadResult, ResourceEntry, TemplateEntry,
};

/// A listing of `count` entries named `{prefix}{index}`, `per_page` to a
/// page (none, for a plugin of empty pages), its cursor the index of the
/// next page; it fails while `failing`.
struct Scripted {
    prefix: &'static str,
    count: usize,
    per_page: usize,
    failing: AtomicBool,
    /// Pages asked for.
    calls: AtomicUsize,
    /// What it says of where its calls run.
    in_place: AtomicBool,
}

impl Scripted {
    fn new(prefix: &'static str, count: usize, per_page: usize) -> Arc<Self> {
        Arc::new(Self {
            prefix,
            count,
            per_page,
            failing: AtomicBool::new(false),
            calls: AtomicUsize::new(0),
            in_place: AtomicBool::new(false),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Provider for Scripted {
    async fn list(&self, cursor: Option<String>) -> Result<Page<ResourceEntry>, ProviderError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(ProviderError::Unavailable("scripted to fail".into()));
        }
        let start: usize = cursor.map_or(0, |cursor| cursor.parse().unwrap());
        // A plugin of empty pages still moves its cursor on.
        let end = (start + self.per_page.max(1)).min(self.count);
        let items = (start..(start + self.per_page).min(self.count))
            .map(|index| ResourceEntry {
                path: format!("{}{index}", self.prefix),
                size: None,
                metadata: Metadata {
                    name: format!("{}{index}", self.prefix),
                    ..Metadata::default()
                },
            })
            .collect();
        Ok(Page {
            items,
            next_cursor: (end < self.count).then(|| end.to_string()),
            // Fresh for a minute: walks share a snapshot.
            cache: Some(CacheHint {
                ttl_ms: 60_000,
                scope: CacheScope::Public,
            }),
        })
    }

    async fn templates(
        &self,
        _cursor: Option<String>,
    ) -> Result<Page<TemplateEntry>, ProviderError> {
        Ok(Page {
            items: Vec::new(),
            next_cursor: None,
            cache: None,
        })
    }

    async fn read(&self, path: &str) -> Result<ReadResult, ProviderError> {
        Err(ProviderError::NotFound(path.to_owned()))
    }

    async fn complete(&self, _request: CompletionRequest) -> Result<Completion, ProviderError> {
        Err(ProviderError::NotFound("no completion".into()))
    }

    async fn changes(&self, since: Option<String>) -> Result<ChangeReport, ProviderError> {
        Ok(ChangeReport {
            token: since.unwrap_or_default(),
            listing_changed: false,
            changed_paths: Vec::new(),
        })
    }

    fn calls_run_in_place(&self) -> bool {
        self.in_place.load(Ordering::SeqCst)
    }
}

fn mount(namespace: &Namespace, scheme: &str, provider: &Arc<Scripted>) {
    namespace
        .mount(scheme, provider.clone(), MountSettings::default())
        .unwrap();
}

/// One page's URIs, and its cursor.
async fn page(
    namespace: &Namespace,
    cursor: Option<&str>,
    scope: &Scope,
) -> (Vec<String>, Option<String>) {
    let listed = namespace.list(cursor, scope).await.unwrap();
    let uris = listed
        .items
        .iter()
        .map(|resource| resource.uri.as_str().to_owned())
        .collect();
    (uris, listed.next_cursor)
}

/// Every URI of a whole walk, page by page.
async fn walk(namespace: &Namespace, scope: &Scope) -> Vec<Vec<String>> {
    let (first, cursor) = page(namespace, None, scope).await;
    let mut pages = vec![first];
    pages.extend(rest_of_walk(namespace, cursor, scope).await);
    pages
}

/// Every page of a walk from `cursor` on.
async fn rest_of_walk(
    namespace: &Namespace,
    mut cursor: Option<String>,
    scope: &Scope,
) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    while let Some(at) = cursor {
        let (uris, next) = page(namespace, Some(&at), scope).await;
        pages.push(uris);
        cursor = next;
    }
    pages
}

fn uris(scheme: &str, prefix: &str, indices: impl IntoIterator<Item = usize>) -> Vec<String> {
    indices
        .into_iter()
        .map(|index| format!("{scheme}://{prefix}{index}"))
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_walk_merges_every_plugin_in_scheme_order_in_pages_of_its_size() {
    let namespace = Namespace::new(4);
    let (a, b, c) = (
        Scripted::new("a", 3, 1),
        Scripted::new("b", 5, 2),
        Scripted::new("c", 0, 1),
    );
    mount(&namespace, "beta", &b);
    mount(&namespace, "gamma", &c);
    mount(&namespace, "alpha", &a);
    runtime().block_on(async {
        let pages = walk(&namespace, &Scope::All).await;
        let mut expected = uris("alpha", "a", 0..3);
        expected.extend(uris("beta", "b", 0..5));
        assert_eq!(pages.concat(), expected);
        assert_eq!(
            pages.iter().map(Vec::len).collect::<Vec<_>>(),
            [4, 4, 0],
            "pages of 4, the last after the empty plugin"
        );
        // Each page of each plugin was asked for once.
        assert_eq!((a.calls(), b.calls(), c.calls()), (3, 3, 1));
        // A second walk within the cache hint is served from the snapshot.
        assert_eq!(walk(&namespace, &Scope::All).await.concat(), expected);
        assert_eq!((a.calls(), b.calls()), (3, 3));
    });
}

#[test]
fn a_failing_plugin_is_passed_over_and_the_others_list_whole() {
    let namespace = Namespace::new(10);
    let (a, b) = (Scripted::new("a", 2, 2), Scripted::new("b", 2, 2));
    a.failing.store(true, Ordering::SeqCst);
    mount(&namespace, "alpha", &a);
    mount(&namespace, "beta", &b);
    runtime().block_on(async {
        let pages = walk(&namespace, &Scope::All).await;
        assert_eq!(pages, [uris("beta", "b", 0..2)]);
        assert_eq!(a.calls(), 1, "the failing plugin was asked once");
    });
}

#[test]
fn a_plugin_that_fails_mid_walk_ends_its_part_and_the_walk_goes_on() {
    let namespace = Namespace::new(2);
    let (a, b) = (Scripted::new("a", 6, 2), Scripted::new("b", 1, 1));
    mount(&namespace, "alpha", &a);
    mount(&namespace, "beta", &b);
    runtime().block_on(async {
        let (first, cursor) = page(&namespace, None, &Scope::All).await;
        assert_eq!(first, uris("alpha", "a", 0..2));
        a.failing.store(true, Ordering::SeqCst);
        let rest = rest_of_walk(&namespace, cursor, &Scope::All).await.concat();
        assert_eq!(rest, uris("beta", "b", 0..1));
    });
}

#[test]
fn a_plugin_unmounted_mid_walk_is_skipped_and_the_walk_goes_on() {
    let namespace = Namespace::new(2);
    let (a, b) = (Scripted::new("a", 6, 2), Scripted::new("b", 3, 3));
    mount(&namespace, "alpha", &a);
    mount(&namespace, "beta", &b);
    runtime().block_on(async {
        let (first, cursor) = page(&namespace, None, &Scope::All).await;
        assert_eq!(first, uris("alpha", "a", 0..2));
        assert!(namespace.unmount("alpha"));
        let (second, cursor) = page(&namespace, cursor.as_deref(), &Scope::All).await;
        assert_eq!(second, uris("beta", "b", 0..2));
        let (third, cursor) = page(&namespace, cursor.as_deref(), &Scope::All).await;
        assert_eq!((third, cursor), (uris("beta", "b", 2..3), None));
    });
}

#[test]
fn a_cursor_into_a_replaced_plugin_resumes_on_the_new_one_where_the_walk_stood() {
    let namespace = Namespace::new(2);
    let old = Scripted::new("old", 6, 2);
    mount(&namespace, "alpha", &old);
    runtime().block_on(async {
        let (first, cursor) = page(&namespace, None, &Scope::All).await;
        assert_eq!(first, uris("alpha", "old", 0..2));
        let new = Scripted::new("new", 6, 2);
        namespace
            .replace("alpha", new.clone(), MountSettings::default())
            .unwrap();
        let rest = rest_of_walk(&namespace, cursor, &Scope::All).await.concat();
        // The new plugin is asked from the page the walk stood in (its
        // cursor "2"), never from the start: nothing is listed twice.
        assert_eq!(rest, uris("alpha", "new", 2..6));
        assert_eq!(new.calls(), 2);
    });
}

#[test]
fn a_cursor_that_was_not_sealed_here_is_refused_by_name() {
    let namespace = Namespace::new(2);
    mount(&namespace, "alpha", &Scripted::new("a", 6, 2));
    runtime().block_on(async {
        let refused = namespace.list(Some("not-a-cursor"), &Scope::All).await;
        assert!(
            matches!(&refused, Err(NamespaceError::InvalidCursor(_))),
            "{:?}",
            refused.map(|listed| listed.items.len())
        );
    });
}

/// A client that may list the even entries of `alpha` and nothing of
/// `beta`.
#[derive(Debug)]
struct EvenAlphaOnly;

impl Guard for EvenAlphaOnly {
    fn decide(&self, action: Action, resource: &Canonical) -> Verdict {
        let index: Option<usize> = resource
            .path()
            .trim_start_matches(char::is_alphabetic)
            .parse()
            .ok();
        Verdict {
            permitted: action == Action::List
                && resource.scheme() == "alpha"
                && index.is_some_and(|index| index % 2 == 0),
            by: Vec::new(),
        }
    }

    fn outlook(&self, _action: Action, scheme: &str) -> Outlook {
        match scheme {
            "alpha" => Outlook::EntryByEntry,
            _ => Outlook::Nothing,
        }
    }

    fn key(&self) -> Arc<str> {
        "even-alpha-only".into()
    }
}

#[test]
fn a_client_sees_only_what_its_scope_lets_it_and_others_see_everything() {
    let namespace = Namespace::new(3);
    let (a, b) = (Scripted::new("a", 6, 4), Scripted::new("b", 2, 2));
    mount(&namespace, "alpha", &a);
    mount(&namespace, "beta", &b);
    let scope = Scope::Guarded(Arc::new(EvenAlphaOnly));
    runtime().block_on(async {
        let pages = walk(&namespace, &scope).await;
        assert_eq!(pages.concat(), uris("alpha", "a", [0, 2, 4]));
        assert_eq!(
            b.calls(),
            0,
            "a scheme the client may not list is never asked"
        );
        let everything = walk(&namespace, &Scope::All).await.concat();
        let mut expected = uris("alpha", "a", 0..6);
        expected.extend(uris("beta", "b", 0..2));
        assert_eq!(everything, expected);
    });
}

/// A plugin whose pages are all empty, each with a cursor to the next.
#[test]
fn a_plugin_of_empty_pages_costs_one_page_at_most_sixteen_calls() {
    let namespace = Namespace::new(10);
    let empty = Scripted::new("e", 40, 0);
    mount(&namespace, "alpha", &empty);
    runtime().block_on(async {
        let (first, cursor) = page(&namespace, None, &Scope::All).await;
        assert!(first.is_empty());
        assert!(cursor.is_some(), "a short page says there is more");
        assert_eq!(empty.calls(), 16);
    });
}

#[test]
fn where_a_schemes_calls_run_is_what_the_plugin_serving_it_now_says() {
    let namespace = Namespace::new(2);
    let (in_place, apart) = (Scripted::new("a", 1, 1), Scripted::new("b", 1, 1));
    in_place.in_place.store(true, Ordering::SeqCst);
    mount(&namespace, "here", &in_place);
    mount(&namespace, "apart", &apart);
    assert!(namespace.calls_run_in_place("here"));
    assert!(!namespace.calls_run_in_place("apart"));
    assert!(
        !namespace.calls_run_in_place("missing"),
        "no plugin: in doubt"
    );
    namespace
        .replace("here", apart.clone(), MountSettings::default())
        .unwrap();
    assert!(
        !namespace.calls_run_in_place("here"),
        "its new plugin's say"
    );
    assert!(namespace.unmount("apart"));
    assert!(!namespace.calls_run_in_place("apart"));
}
