//! Small constructors for the contract's records, and pagination: over a
//! slice with numeric cursors, or over entries in key order with the last
//! key sent as the cursor.

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

/// The page of `entries` (given in ascending order of `key`) that comes after
/// `cursor` (a key this function handed out), `page_size` long, and the
/// cursor of the next page. It takes from `entries` only up to the end of the
/// page, so a plugin that produces its entries in order (a sorted walk, a
/// query) does a page's worth of work per page: resmux asks for each page of
/// a listing once per walk, and the whole walk stays linear. The cursor is
/// the last key sent, so pages stay right when entries come and go.
pub fn page_after<T>(
    entries: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> &str,
    cursor: Option<&str>,
    page_size: usize,
) -> (Vec<T>, Option<String>) {
    let mut page: Vec<T> = Vec::new();
    let mut more = false;
    let after = entries
        .into_iter()
        .filter(|entry| cursor.is_none_or(|cursor| key(entry) > cursor));
    for entry in after {
        if page.len() == page_size.max(1) {
            more = true;
            break;
        }
        page.push(entry);
    }
    let next = page
        .last()
        .filter(|_| more)
        .map(|last| key(last).to_owned());
    (page, next)
}

#[cfg(test)]
mod tests {
    use super::page_after;

    #[test]
    fn pages_follow_the_last_key_and_take_no_more_than_a_page() {
        let keys = ["a", "b", "c", "d", "e"];
        let mut taken = 0;
        let counted = keys.iter().inspect(|_| taken += 1);
        let (first, next) = page_after(counted, |key| key, None, 2);
        assert_eq!((first, next.as_deref()), (vec![&"a", &"b"], Some("b")));
        assert_eq!(taken, 3, "one entry past the page, to know more follow");

        // "b" is gone and "bb" came since: the next page starts after "b".
        let changed = ["a", "bb", "c", "d", "e"];
        let (second, next) = page_after(changed.iter(), |key| key, next.as_deref(), 2);
        assert_eq!((second, next.as_deref()), (vec![&"bb", &"c"], Some("c")));
        let (last, next) = page_after(changed.iter(), |key| key, Some("c"), 2);
        assert_eq!((last, next), (vec![&"d", &"e"], None));
    }
}
