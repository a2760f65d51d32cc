//! Small constructors for the contract's records, and pagination over a
//! slice with numeric cursors.

use crate::{
    Body, CacheHint, Content, Error, PluginInfo, ReadResult, Resource, ResourcePage, Template,
    TemplatePage,
};

impl PluginInfo {
    pub fn new(name: &str, version: &str, description: &str) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            description: description.into(),
        }
    }
}

impl Resource {
    /// A resource at `path` with a name and nothing else; set more fields
    /// with struct update syntax.
    pub fn new(path: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            name: name.into(),
            title: None,
            description: None,
            mime_type: None,
            size: None,
            annotations: None,
            icons: Vec::new(),
            meta: None,
        }
    }
}

impl Template {
    /// A template such as `notes/{id}` with a name and nothing else.
    pub fn new(path_template: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            path_template: path_template.into(),
            name: name.into(),
            title: None,
            description: None,
            mime_type: None,
            annotations: None,
            icons: Vec::new(),
            meta: None,
        }
    }
}

impl Content {
    /// Text contents at `path`.
    pub fn text(path: impl Into<String>, mime_type: &str, text: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            mime_type: Some(mime_type.into()),
            body: Body::Text(text.into()),
            meta: None,
        }
    }

    /// Binary contents at `path`.
    pub fn blob(path: impl Into<String>, mime_type: &str, bytes: Vec<u8>) -> Self {
        Self {
            path: path.into(),
            mime_type: Some(mime_type.into()),
            body: Body::Blob(bytes),
            meta: None,
        }
    }
}

impl ReadResult {
    /// A read of one content item, without a cache hint.
    pub fn one(content: Content) -> Self {
        Self {
            contents: vec![content],
            cache: None,
        }
    }

    /// The same read, fresh for as long as `cache` says.
    pub fn cached(self, cache: CacheHint) -> Self {
        Self {
            cache: Some(cache),
            ..self
        }
    }
}

impl ResourcePage {
    /// The last (or only) page.
    pub fn last(resources: Vec<Resource>) -> Self {
        Self {
            resources,
            next_cursor: None,
            cache: None,
        }
    }
}

impl TemplatePage {
    /// The last (or only) page.
    pub fn last(templates: Vec<Template>) -> Self {
        Self {
            templates,
            next_cursor: None,
            cache: None,
        }
    }
}

/// Refuses a cursor where a listing has only one page.
pub fn no_cursor(cursor: Option<String>) -> Result<(), Error> {
    match cursor {
        None => Ok(()),
        Some(cursor) => Err(Error::InvalidInput(format!("unknown cursor {cursor:?}"))),
    }
}

/// The page of `items` that `cursor` (an offset this function handed out)
/// points at, `page_size` long, and the cursor of the next page.
pub fn paginate<T>(
    items: &[T],
    cursor: Option<String>,
    page_size: usize,
) -> Result<(&[T], Option<String>), Error> {
    let start = match cursor {
        None => 0,
        Some(cursor) => cursor
            .parse::<usize>()
            .ok()
            .filter(|&start| start <= items.len())
            .ok_or_else(|| Error::InvalidInput(format!("unknown cursor {cursor:?}")))?,
    };
    let end = start.saturating_add(page_size.max(1)).min(items.len());
    Ok((
        &items[start..end],
        (end < items.len()).then(|| end.to_string()),
    ))
}
