//! Plugin answers built from fuzz input: every field a plugin controls, with
//! strings drawn near the limits of [`crate::provider::LIMITS`] and from
//! spellings that have fooled URI and path code before. An input that runs
//! out yields the shortest answers.

use arbitrary::Unstructured;
use resmux::contract::{
    Annotations, Body, CacheHint, CacheScope, ChangeReport, Completion, Content, Icon, IconTheme,
    Metadata, Page, ProviderError, ReadResult, ResourceEntry, Role, TemplateEntry,
};

use crate::provider::LIMITS;

/// Paths and names whose spelling matters.
const SPELLINGS: [&str; 16] = [
    "",
    "/",
    "a/../../etc/passwd",
    "%2e%2e/%2E%2E/x",
    "a//b",
    "./a",
    "{x}",
    "{x}/{y}",
    "a{",
    "a%",
    "a%zz",
    "\u{0}",
    "a\nb",
    "ä/日本",
    "a b",
    "fz:nested",
];

/// A string a plugin might send.
pub fn text(input: &mut Unstructured) -> String {
    let limit = LIMITS.max_string_bytes as usize;
    match input.int_in_range(0u8..=9).unwrap_or(0) {
        0 => String::new(),
        1 => "a".repeat(input.int_in_range(limit - 2..=limit + 2).unwrap_or(limit)),
        2 | 3 => SPELLINGS[input.choose_index(SPELLINGS.len()).unwrap_or(0)].to_owned(),
        _ => input.arbitrary().unwrap_or_default(),
    }
}

fn maybe<T>(input: &mut Unstructured, make: impl FnOnce(&mut Unstructured) -> T) -> Option<T> {
    input
        .arbitrary::<bool>()
        .unwrap_or(false)
        .then(|| make(input))
}

fn some<T>(input: &mut Unstructured, most: usize, make: impl Fn(&mut Unstructured) -> T) -> Vec<T> {
    let count = input.int_in_range(0..=most).unwrap_or(0);
    (0..count).map(|_| make(input)).collect()
}

/// A `_meta` as a plugin writes it: JSON text, an object or not.
fn meta(input: &mut Unstructured) -> String {
    match input.int_in_range(0u8..=3).unwrap_or(0) {
        0 => r#"{"k":1}"#.to_owned(),
        1 => r#"{"io.modelcontextprotocol/x":[1,{"y":null}]}"#.to_owned(),
        2 => "[1]".to_owned(),
        _ => text(input),
    }
}

fn annotations(input: &mut Unstructured) -> Annotations {
    Annotations {
        audience: some(input, 3, |input| {
            if input.arbitrary().unwrap_or(false) {
                Role::User
            } else {
                Role::Assistant
            }
        }),
        priority: maybe(input, |input| input.arbitrary::<f32>().unwrap_or(0.5)),
        last_modified: maybe(input, text),
    }
}

fn icon(input: &mut Unstructured) -> Icon {
    Icon {
        src: text(input),
        mime_type: maybe(input, text),
        sizes: some(input, 3, text),
        theme: maybe(input, |input| {
            if input.arbitrary().unwrap_or(false) {
                IconTheme::Light
            } else {
                IconTheme::Dark
            }
        }),
    }
}

fn metadata(input: &mut Unstructured) -> Metadata {
    Metadata {
        name: text(input),
        title: maybe(input, text),
        description: maybe(input, text),
        mime_type: maybe(input, text),
        annotations: maybe(input, annotations),
        icons: some(input, 2, icon),
        meta: maybe(input, meta),
    }
}

fn cache(input: &mut Unstructured) -> Option<CacheHint> {
    maybe(input, |input| CacheHint {
        ttl_ms: input.arbitrary().unwrap_or(0),
        scope: if input.arbitrary().unwrap_or(false) {
            CacheScope::Private
        } else {
            CacheScope::Public
        },
    })
}

fn page<T>(input: &mut Unstructured, item: impl Fn(&mut Unstructured) -> T) -> Page<T> {
    Page {
        items: some(input, LIMITS.max_page_entries as usize + 2, item),
        next_cursor: maybe(input, text),
        cache: cache(input),
    }
}

/// A page of resources.
pub fn resources(input: &mut Unstructured) -> Page<ResourceEntry> {
    page(input, |input| ResourceEntry {
        path: text(input),
        size: maybe(input, |input| input.arbitrary().unwrap_or(0)),
        metadata: metadata(input),
    })
}

/// A page of templates.
pub fn templates(input: &mut Unstructured) -> Page<TemplateEntry> {
    page(input, |input| TemplateEntry {
        path_template: text(input),
        metadata: metadata(input),
    })
}

/// Bytes a plugin sends, up to a little over the read limit.
pub fn bytes(input: &mut Unstructured) -> Vec<u8> {
    let most = LIMITS.max_read_bytes as usize + 16;
    let count = input.int_in_range(0..=most).unwrap_or(0);
    input.bytes(count).map(<[u8]>::to_vec).unwrap_or_default()
}

/// A read's answer.
pub fn read(input: &mut Unstructured) -> ReadResult {
    ReadResult {
        contents: some(input, 3, |input| Content {
            path: text(input),
            mime_type: maybe(input, text),
            body: if input.arbitrary().unwrap_or(false) {
                Body::Blob(bytes(input))
            } else {
                Body::Text(text(input))
            },
            meta: maybe(input, meta),
        }),
        cache: cache(input),
    }
}

/// A completion's answer.
pub fn completion(input: &mut Unstructured) -> Completion {
    Completion {
        values: some(input, 110, text),
        total: maybe(input, |input| input.arbitrary().unwrap_or(0)),
        has_more: input.arbitrary().unwrap_or(false),
    }
}

/// A change report.
pub fn change_report(input: &mut Unstructured) -> ChangeReport {
    ChangeReport {
        token: text(input),
        listing_changed: input.arbitrary().unwrap_or(false),
        changed_paths: some(input, 5, text),
    }
}

/// An error a plugin answers with.
pub fn error(input: &mut Unstructured) -> ProviderError {
    let message = text(input);
    match input.int_in_range(0u8..=5).unwrap_or(0) {
        0 => ProviderError::NotFound(message),
        1 => ProviderError::InvalidInput(message),
        2 => ProviderError::Denied(message),
        3 => ProviderError::Unavailable(message),
        4 => ProviderError::Internal(message),
        _ => ProviderError::Fault(message),
    }
}

/// `make`'s answer, or an error, as the input says.
pub fn or_error<T>(
    input: &mut Unstructured,
    make: impl FnOnce(&mut Unstructured) -> T,
) -> Result<T, ProviderError> {
    if input.ratio(1u8, 8u8).unwrap_or(false) {
        Err(error(input))
    } else {
        Ok(make(input))
    }
}
