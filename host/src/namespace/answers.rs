//! The one home of the checks a plugin's answers pass before a client sees
//! them, each turning the plugin's answer into a typed value: a listing page
//! (its length, its cursor, each entry, and what each entry promises about
//! later reads), a read (its contents, their paths, sizes and MIME types,
//! and the promises still in force), a completion (each value's length, and
//! MCP's cap on their number) and a change report (its token and each path).
//! The namespace applies them to every answer it serves; `resmux check`
//! applies the same functions to a plugin on its own, so the two cannot
//! disagree. Field-level rules live in [`super::validate`].

use std::time::Duration;

use futures::future::BoxFuture;

use super::cursor::Listing;
use super::promises::Promises;
use super::snapshot;
use super::uri::{Uri, UriTemplate};
use super::validate;
use super::{Changes, Contents, Read, Resource, Template};
use crate::contract::{
    AnswerLimits, ChangeReport, Completion, Page, Provider, ProviderError, ReadResult,
    ResourceEntry, TemplateEntry,
};

/// The most completion values sent to a client (MCP's limit).
pub const MAX_COMPLETION_VALUES: usize = 100;

/// The cache hint of an answer whose provider gave none: stale at once.
pub const DEFAULT_CACHE: crate::contract::CacheHint = crate::contract::CacheHint {
    ttl_ms: 0,
    scope: crate::contract::CacheScope::Public,
};

/// An entry of a listing: how to fetch a page of it, and how to admit one.
pub trait Listable: Sized + Send {
    /// The entry once validated and given its scheme.
    type Admitted: Clone + snapshot::Weigh + Send + Sync + 'static;
    const LISTING: Listing;
    /// One page of this listing from `provider`.
    fn fetch(
        provider: &dyn Provider,
        cursor: Option<String>,
    ) -> BoxFuture<'_, Result<Page<Self>, ProviderError>>;
    /// Validates the entry under `limits` and puts it under `scheme`.
    fn admit(self, scheme: &str, limits: &AnswerLimits) -> Result<Self::Admitted, String>;
    /// Records what a listed entry promises about later reads, for `ttl`.
    fn promise(_item: &Self::Admitted, _promises: &Promises, _ttl: Duration) {}
}

/// A listing page as admitted: its valid entries, why each of the others
/// was refused, and why the listing ends here although the plugin gave a
/// cursor.
pub struct AdmittedPage<T> {
    pub page: snapshot::Page<T>,
    pub refused: Vec<String>,
    pub stopped: Option<&'static str>,
}

/// An answer admitted in part: what is served, and why each part left out
/// was refused. The server serves `value` and logs `refused`; `resmux check`
/// fails on any refusal.
#[derive(Debug)]
pub struct Admitted<T> {
    pub value: T,
    pub refused: Vec<String>,
}

/// Admits one page a plugin returned for `given` (its cursor), under
/// `scheme` and `limits`, recording its entries' promises. A page longer
/// than `max_page_entries` or with a cursor over `max_string_bytes` is
/// refused whole; a page handing back the cursor it was given is the last.
pub fn admit_page<T: Listable>(
    scheme: &str,
    page: Page<T>,
    given: Option<&str>,
    limits: &AnswerLimits,
    promises: &Promises,
) -> Result<AdmittedPage<T::Admitted>, String> {
    if let Some(cursor) = &page.next_cursor {
        validate::length("cursor", cursor, limits.max_string_bytes)?;
    }
    let repeated = page.next_cursor.is_some() && page.next_cursor.as_deref() == given;
    let max_entries = limits.max_page_entries as usize;
    if page.items.len() > max_entries {
        return Err(format!(
            "it returned {} entries on one page, over its limit of {max_entries}",
            page.items.len()
        ));
    }
    let cache = page.cache.unwrap_or(DEFAULT_CACHE);
    let promised_for = Duration::from_millis(cache.ttl_ms);
    let mut items = Vec::with_capacity(page.items.len());
    let mut refused = Vec::new();
    for entry in page.items {
        match entry.admit(scheme, limits) {
            Ok(item) => {
                T::promise(&item, promises, promised_for);
                items.push(item);
            }
            Err(reason) => refused.push(reason),
        }
    }
    Ok(AdmittedPage {
        page: snapshot::Page {
            items,
            next_cursor: page.next_cursor.filter(|_| !repeated),
            cache,
        },
        refused,
        stopped: repeated.then_some("it handed back the cursor it was given"),
    })
}

/// Checks a plugin's read under `scheme` and `limits`, against the promises
/// its listing made, and gives its contents their full URIs.
pub fn admit_read(
    scheme: &str,
    result: ReadResult,
    limits: &AnswerLimits,
    promises: &Promises,
) -> Result<Read, String> {
    if result.contents.is_empty() {
        return Err("it returned no contents".into());
    }
    let total: u64 = result
        .contents
        .iter()
        .map(|content| content.body.byte_count() as u64)
        .sum();
    if total > limits.max_read_bytes {
        return Err(format!(
            "it returned {total} bytes, over the limit of {}",
            limits.max_read_bytes
        ));
    }
    let max_string = limits.max_string_bytes;
    let contents = result
        .contents
        .into_iter()
        .map(|content| {
            validate::length("content path", &content.path, max_string)?;
            if let Some(meta) = &content.meta {
                validate::length("_meta", meta, max_string)?;
            }
            let content_uri = Uri::in_scheme(scheme, &content.path)
                .map_err(|reason| format!("content path {:?} {reason}", content.path))?;
            if let Some(mime) = &content.mime_type {
                validate::length("MIME type", mime, max_string)?;
                validate::mime_type(mime)?;
            }
            promises.check(
                content_uri.as_str(),
                content.body.byte_count() as u64,
                content.mime_type.as_deref(),
            )?;
            Ok(Contents {
                uri: content_uri,
                mime_type: content.mime_type,
                body: content.body,
                meta: content.meta.as_deref().map(validate::meta).transpose()?,
            })
        })
        .collect::<Result<_, String>>()?;
    Ok(Read {
        contents,
        cache: result.cache.unwrap_or(DEFAULT_CACHE),
    })
}

/// Admits a plugin's completion under `limits`: a value over
/// `max_string_bytes` is refused (and left out); past
/// [`MAX_COMPLETION_VALUES`] the list is cut, and says there is more.
pub fn admit_completion(mut completion: Completion, limits: &AnswerLimits) -> Admitted<Completion> {
    let max_string = limits.max_string_bytes;
    let mut refused = Vec::new();
    completion.values.retain(|value| {
        let fits = validate::length("completion value", value, max_string);
        fits.map_err(|reason| refused.push(reason)).is_ok()
    });
    if completion.values.len() > MAX_COMPLETION_VALUES {
        completion.values.truncate(MAX_COMPLETION_VALUES);
        completion.has_more = true;
    }
    Admitted {
        value: completion,
        refused,
    }
}

/// Admits a plugin's change report under `scheme` and `limits`: a token over
/// `max_string_bytes` refuses the whole report (it could not be handed back);
/// a path that is not a valid path of the scheme is refused and left out.
pub fn admit_changes(
    scheme: &str,
    report: ChangeReport,
    limits: &AnswerLimits,
) -> Result<Admitted<Changes>, String> {
    validate::length("change token", &report.token, limits.max_string_bytes)?;
    let mut refused = Vec::new();
    let mut changed_uris = Vec::with_capacity(report.changed_paths.len());
    for path in report.changed_paths {
        let admitted =
            validate::length("changed path", &path, limits.max_string_bytes).and_then(|()| {
                Uri::in_scheme(scheme, &path)
                    .map_err(|reason| format!("changed path {path:?} {reason}"))
            });
        match admitted {
            Ok(uri) => changed_uris.push(uri),
            Err(reason) => refused.push(reason),
        }
    }
    Ok(Admitted {
        value: Changes {
            token: report.token,
            listing_changed: report.listing_changed,
            changed_uris,
        },
        refused,
    })
}

impl Listable for ResourceEntry {
    type Admitted = Resource;
    const LISTING: Listing = Listing::Resources;

    fn fetch(
        provider: &dyn Provider,
        cursor: Option<String>,
    ) -> BoxFuture<'_, Result<Page<Self>, ProviderError>> {
        provider.list(cursor)
    }

    fn admit(mut self, scheme: &str, limits: &AnswerLimits) -> Result<Resource, String> {
        validate::length("path", &self.path, limits.max_string_bytes)?;
        let uri = Uri::in_scheme(scheme, &self.path)
            .map_err(|reason| format!("resource path {:?} {reason}", self.path))?;
        let meta = validate::metadata(&mut self.metadata, limits.max_string_bytes)?;
        Ok(Resource {
            uri,
            size: self.size,
            metadata: self.metadata,
            meta,
        })
    }

    fn promise(item: &Resource, promises: &Promises, ttl: Duration) {
        promises.record(
            item.uri.as_str(),
            item.size,
            item.metadata.mime_type.as_deref(),
            ttl,
        );
    }
}

impl Listable for TemplateEntry {
    type Admitted = Template;
    const LISTING: Listing = Listing::Templates;

    fn fetch(
        provider: &dyn Provider,
        cursor: Option<String>,
    ) -> BoxFuture<'_, Result<Page<Self>, ProviderError>> {
        provider.templates(cursor)
    }

    fn admit(mut self, scheme: &str, limits: &AnswerLimits) -> Result<Template, String> {
        validate::length(
            "path template",
            &self.path_template,
            limits.max_string_bytes,
        )?;
        let uri_template = UriTemplate::in_scheme(scheme, &self.path_template)
            .map_err(|reason| format!("path template {:?} {reason}", self.path_template))?;
        let meta = validate::metadata(&mut self.metadata, limits.max_string_bytes)?;
        Ok(Template {
            uri_template,
            metadata: self.metadata,
            meta,
        })
    }
}
