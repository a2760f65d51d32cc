//! `notes`: a small collection of Markdown notes with tags. The example a new
//! plugin author copies first: a paginated listing, two templates, argument
//! completion, typed errors and configuration, in one short file.
//!
//! Mounted as `notes`, it serves `notes://notes/{id}` (one note) and
//! `notes://tags/{tag}` (the notes with that tag).

wit_bindgen::generate!({
    path: "../../wit",
    world: "resmux:provider/plugin",
});

use std::sync::OnceLock;

use exports::resmux::provider::provider::Guest;
use resmux::provider::types::{
    Annotations, CacheHint, CacheScope, ChangeReport, Completion, CompletionRequest, Content,
    Error, PluginInfo, ReadResult, Resource, ResourcePage, Role, Template, TemplatePage,
};

struct Note {
    id: &'static str,
    title: &'static str,
    tags: &'static [&'static str],
    modified: &'static str,
    body: &'static str,
}

const NOTES: &[Note] = &[
    Note {
        id: "welcome",
        title: "Welcome",
        tags: &["guide"],
        modified: "2026-11-01T09:00:00Z",
        body: "These notes are served by a WebAssembly plugin through resmux.",
    },
    Note {
        id: "paths",
        title: "Paths, not URIs",
        tags: &["guide", "contract"],
        modified: "2026-11-02T09:00:00Z",
        body: "A plugin speaks in paths such as `notes/welcome`; resmux adds the scheme.",
    },
    Note {
        id: "errors",
        title: "Typed errors",
        tags: &["contract"],
        modified: "2026-11-03T09:00:00Z",
        body: "Return `not-found` for a path you do not serve; never an empty read.",
    },
    Note {
        id: "pagination",
        title: "Pagination",
        tags: &["contract"],
        modified: "2026-11-04T09:00:00Z",
        body: "Hand out any cursor you like; resmux wraps it and gives it back unchanged.",
    },
    Note {
        id: "groceries",
        title: "Groceries",
        tags: &["home"],
        modified: "2026-11-05T09:00:00Z",
        body: "- bread\n- cheese\n- apples",
    },
];

/// Resources per page unless the manifest's `page_size` says otherwise.
const DEFAULT_PAGE_SIZE: usize = 50;
/// How long answers stay fresh: the notes never change while the plugin runs.
const CACHE: CacheHint = CacheHint {
    ttl_ms: 60_000,
    scope: CacheScope::Public,
};

static PAGE_SIZE: OnceLock<usize> = OnceLock::new();

struct Notes;

impl Guest for Notes {
    fn about() -> PluginInfo {
        PluginInfo {
            name: "notes".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "A small collection of Markdown notes with tags".into(),
        }
    }

    fn init(config: Vec<(String, String)>) -> Result<(), Error> {
        let mut page_size = DEFAULT_PAGE_SIZE;
        for (key, value) in config {
            match key.as_str() {
                "page_size" => {
                    page_size = value.parse().ok().filter(|&size| size > 0).ok_or_else(|| {
                        Error::InvalidInput(format!("page_size {value:?} is not a positive number"))
                    })?;
                }
                _ => return Err(Error::InvalidInput(format!("unknown config key {key:?}"))),
            }
        }
        // `init` runs once per instance, so the cell is always empty here.
        let _ = PAGE_SIZE.set(page_size);
        Ok(())
    }

    fn list(cursor: Option<String>) -> Result<ResourcePage, Error> {
        let start = match cursor {
            None => 0,
            Some(cursor) => cursor
                .parse::<usize>()
                .ok()
                .filter(|&start| start <= NOTES.len())
                .ok_or_else(|| Error::InvalidInput(format!("unknown cursor {cursor:?}")))?,
        };
        let end = (start + *PAGE_SIZE.get().unwrap_or(&DEFAULT_PAGE_SIZE)).min(NOTES.len());
        Ok(ResourcePage {
            resources: NOTES[start..end].iter().map(resource).collect(),
            next_cursor: (end < NOTES.len()).then(|| end.to_string()),
            cache: Some(CACHE),
        })
    }

    fn templates(cursor: Option<String>) -> Result<TemplatePage, Error> {
        if let Some(cursor) = cursor {
            return Err(Error::InvalidInput(format!("unknown cursor {cursor:?}")));
        }
        Ok(TemplatePage {
            templates: vec![
                template("notes/{id}", "note", "One note, as Markdown"),
                template(
                    "tags/{tag}",
                    "tag",
                    "The notes that carry a tag, as Markdown links",
                ),
            ],
            next_cursor: None,
            cache: Some(CACHE),
        })
    }

    fn read(path: String) -> Result<ReadResult, Error> {
        let text = if let Some(id) = path.strip_prefix("notes/") {
            let note = NOTES
                .iter()
                .find(|note| note.id == id)
                .ok_or_else(|| Error::NotFound(format!("there is no note {id:?}")))?;
            format!("# {}\n\n{}\n", note.title, note.body)
        } else if let Some(tag) = path.strip_prefix("tags/") {
            let tagged: Vec<String> = NOTES
                .iter()
                .filter(|note| note.tags.contains(&tag))
                .map(|note| format!("- [{}](notes/{})", note.title, note.id))
                .collect();
            if tagged.is_empty() {
                return Err(Error::NotFound(format!("no note has the tag {tag:?}")));
            }
            format!("# Tag: {tag}\n\n{}\n", tagged.join("\n"))
        } else {
            return Err(Error::NotFound(format!(
                "{path:?} is neither notes/ID nor tags/TAG"
            )));
        };
        Ok(ReadResult {
            contents: vec![Content {
                path,
                mime_type: Some("text/markdown".into()),
                body: resmux::provider::types::Body::Text(text),
                meta: None,
            }],
            cache: Some(CACHE),
        })
    }

    fn complete(request: CompletionRequest) -> Result<Completion, Error> {
        let mut values: Vec<&str> =
            match (request.path_template.as_str(), request.argument.as_str()) {
                ("notes/{id}", "id") => NOTES.iter().map(|note| note.id).collect(),
                ("tags/{tag}", "tag") => NOTES
                    .iter()
                    .flat_map(|note| note.tags.iter().copied())
                    .collect(),
                (template, argument) => {
                    return Err(Error::InvalidInput(format!(
                        "template {template:?} has no argument {argument:?} to complete"
                    )));
                }
            };
        values.retain(|value| value.starts_with(&request.value));
        values.sort_unstable();
        values.dedup();
        Ok(Completion {
            total: Some(values.len() as u32),
            values: values.into_iter().map(String::from).collect(),
            has_more: false,
        })
    }

    fn changes(_since: Option<String>) -> Result<ChangeReport, Error> {
        // The notes are compiled in: nothing ever changes.
        Ok(ChangeReport {
            token: "static".into(),
            listing_changed: false,
            changed_paths: Vec::new(),
        })
    }
}

fn resource(note: &Note) -> Resource {
    Resource {
        path: format!("notes/{}", note.id),
        name: note.id.into(),
        title: Some(note.title.into()),
        description: Some(format!("Tags: {}", note.tags.join(", "))),
        mime_type: Some("text/markdown".into()),
        size: None,
        annotations: Some(Annotations {
            audience: vec![Role::User, Role::Assistant],
            priority: Some(0.5),
            last_modified: Some(note.modified.into()),
        }),
        icons: Vec::new(),
        meta: None,
    }
}

fn template(path_template: &str, name: &str, description: &str) -> Template {
    Template {
        path_template: path_template.into(),
        name: name.into(),
        title: None,
        description: Some(description.into()),
        mime_type: Some("text/markdown".into()),
        annotations: None,
        icons: Vec::new(),
        meta: None,
    }
}

export!(Notes);
