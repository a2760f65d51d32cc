//! `notes`: a small collection of Markdown notes with tags. The example a new
//! plugin author copies first: a paginated listing, two templates, argument
//! completion, typed errors and configuration, in one short file, written
//! with the Rust SDK (`resmux-sdk`).
//!
//! Mounted as `notes`, it serves `notes://notes/{id}` (one note) and
//! `notes://tags/{tag}` (the notes with that tag).

use resmux_sdk::{
    Annotations, CacheHint, CacheScope, ChangeReport, Completion, CompletionRequest, Config,
    Content, Error, Plugin, PluginInfo, ReadResult, Resource, ResourcePage, Role, Template,
    TemplatePage,
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

struct Notes {
    page_size: usize,
}

impl Plugin for Notes {
    fn about() -> PluginInfo {
        PluginInfo::new(
            "notes",
            env!("CARGO_PKG_VERSION"),
            "A small collection of Markdown notes with tags",
        )
    }

    fn init(mut config: Config) -> Result<Self, Error> {
        let page_size = config.parse_or("page_size", DEFAULT_PAGE_SIZE)?;
        config.finish()?;
        if page_size == 0 {
            return Err(Error::InvalidInput("page_size must be above 0".into()));
        }
        Ok(Notes { page_size })
    }

    fn list(&self, cursor: Option<String>) -> Result<ResourcePage, Error> {
        let (page, next_cursor) = resmux_sdk::paginate(NOTES, cursor, self.page_size)?;
        Ok(ResourcePage {
            resources: page.iter().map(resource).collect(),
            next_cursor,
            cache: Some(CACHE),
        })
    }

    fn templates(&self, cursor: Option<String>) -> Result<TemplatePage, Error> {
        resmux_sdk::no_cursor(cursor)?;
        Ok(TemplatePage {
            cache: Some(CACHE),
            ..TemplatePage::last(vec![
                template("notes/{id}", "note", "One note, as Markdown"),
                template(
                    "tags/{tag}",
                    "tag",
                    "The notes that carry a tag, as Markdown links",
                ),
            ])
        })
    }

    fn read(&self, path: String) -> Result<ReadResult, Error> {
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
        Ok(ReadResult::one(Content::text(path, "text/markdown", text)).cached(CACHE))
    }

    fn complete(&self, request: CompletionRequest) -> Result<Completion, Error> {
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

    fn changes(&self, _since: Option<String>) -> Result<ChangeReport, Error> {
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
        title: Some(note.title.into()),
        description: Some(format!("Tags: {}", note.tags.join(", "))),
        mime_type: Some("text/markdown".into()),
        annotations: Some(Annotations {
            audience: vec![Role::User, Role::Assistant],
            priority: Some(0.5),
            last_modified: Some(note.modified.into()),
        }),
        ..Resource::new(format!("notes/{}", note.id), note.id)
    }
}

fn template(path_template: &str, name: &str, description: &str) -> Template {
    Template {
        description: Some(description.into()),
        mime_type: Some("text/markdown".into()),
        ..Template::new(path_template, name)
    }
}

resmux_sdk::export!(Notes);
