//! `files`: serves a directory the operator grants, read-only.
//!
//! Every file below the granted directory is a resource whose path is its
//! relative path, percent-encoded (`docs/read%20me.md`). Reading a file returns
//! its text or bytes with a MIME type guessed from its name and contents;
//! reading a directory returns one JSON item per entry. The template `{+path}`
//! addresses any path, and completion suggests the names below a prefix.
//!
//! Manifest: grant a directory under `[[files]]` and, if its guest path is not
//! `/data`, name it with `root` under `[config]`. `page_size` sets the size of
//! the plugin's listing pages.

wit_bindgen::generate!({
    path: "../../wit",
    world: "resmux:provider/plugin",
});

mod encoding;
mod mime;
mod tree;

use std::sync::OnceLock;

use exports::resmux::provider::provider::Guest;
use resmux::provider::types::{
    Body, ChangeReport, Completion, CompletionRequest, Content, Error, PluginInfo, ReadResult,
    Resource, ResourcePage, Template, TemplatePage,
};

/// The settings `init` reads from the manifest's `[config]`.
struct Settings {
    root: String,
    page_size: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            root: "/data".into(),
            page_size: 100,
        }
    }
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// The root as WASI opened it, by `init`.
static ROOT: OnceLock<tree::Root> = OnceLock::new();

fn root() -> Result<&'static tree::Root, Error> {
    ROOT.get()
        .ok_or_else(|| Error::Internal("called before init".into()))
}

fn settings() -> &'static Settings {
    SETTINGS.get_or_init(Settings::default)
}

/// The most completion values worth computing; the host sends at most 100.
const MAX_COMPLETIONS: usize = 100;

struct Files;

impl Guest for Files {
    fn about() -> PluginInfo {
        PluginInfo {
            name: "files".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Files of a directory the operator grants, read-only".into(),
        }
    }

    fn init(config: Vec<(String, String)>) -> Result<(), Error> {
        let mut settings = Settings::default();
        for (key, value) in config {
            match key.as_str() {
                "root" => settings.root = value,
                "page_size" => {
                    settings.page_size = value.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        Error::InvalidInput(format!("page_size {value:?} is not a positive number"))
                    })?
                }
                _ => return Err(Error::InvalidInput(format!("unknown config key {key:?}"))),
            }
        }
        std::fs::metadata(&settings.root).map_err(|error| {
            Error::Unavailable(format!(
                "root {:?} cannot be read ({error}); grant it under [[files]]",
                settings.root
            ))
        })?;
        let _ = ROOT.set(tree::Root::open(&settings.root)?);
        let _ = SETTINGS.set(settings);
        Ok(())
    }

    fn list(cursor: Option<String>) -> Result<ResourcePage, Error> {
        let settings = settings();
        // The cursor is the last path sent: stable even if files come and go.
        let (files, more) = tree::page(root()?, cursor.as_deref(), settings.page_size)?;
        Ok(ResourcePage {
            next_cursor: files.last().filter(|_| more).map(|file| file.path.clone()),
            resources: files.iter().map(resource).collect(),
            cache: None,
        })
    }

    fn templates(cursor: Option<String>) -> Result<TemplatePage, Error> {
        if let Some(cursor) = cursor {
            return Err(Error::InvalidInput(format!("unknown cursor {cursor:?}")));
        }
        Ok(TemplatePage {
            templates: vec![Template {
                path_template: "{+path}".into(),
                name: "file".into(),
                title: Some("Any file or directory".into()),
                description: Some(
                    "A file's contents, or a directory's entries as JSON items".into(),
                ),
                mime_type: None,
                annotations: None,
                icons: Vec::new(),
                meta: None,
            }],
            next_cursor: None,
            cache: None,
        })
    }

    fn read(path: String) -> Result<ReadResult, Error> {
        let decoded = encoding::decode(&path)?;
        // `dir/` names `dir`, and `a.txt/` names `a.txt`.
        let relative = decoded.trim_end_matches('/');
        let host_path = tree::resolve(&settings().root, relative)?;
        let contents = match tree::read(root()?, relative)? {
            tree::Found::Directory => tree::entries(&host_path, relative)?
                .into_iter()
                .map(|entry| Content {
                    path: entry.path.clone(),
                    mime_type: Some("application/json".into()),
                    body: Body::Text(entry.to_json()),
                    meta: None,
                })
                .collect(),
            tree::Found::File(bytes) => {
                let mime_type = mime::guess(relative, &bytes);
                let body = if mime::is_text(mime_type) {
                    match String::from_utf8(bytes) {
                        Ok(text) => Body::Text(text),
                        Err(error) => Body::Blob(error.into_bytes()),
                    }
                } else {
                    Body::Blob(bytes)
                };
                vec![Content {
                    path,
                    mime_type: Some(mime_type.into()),
                    body,
                    meta: None,
                }]
            }
        };
        if contents.is_empty() {
            return Err(Error::NotFound(format!("directory {relative:?} is empty")));
        }
        Ok(ReadResult {
            contents,
            cache: None,
        })
    }

    fn complete(request: CompletionRequest) -> Result<Completion, Error> {
        if request.path_template != "{+path}" || request.argument != "path" {
            return Err(Error::InvalidInput(format!(
                "template {:?} has no argument {:?} to complete",
                request.path_template, request.argument
            )));
        }
        let typed = encoding::decode(&request.value)?;
        let (directory, prefix) = typed.rsplit_once('/').unwrap_or(("", &typed));
        let host_path = tree::resolve(&settings().root, directory)?;
        let mut values: Vec<String> = tree::entries(&host_path, directory)?
            .into_iter()
            .filter(|entry| entry.name.starts_with(prefix))
            .map(|entry| {
                let suffix = if entry.is_dir { "/" } else { "" };
                format!("{}{suffix}", entry.path)
            })
            .collect();
        let total = values.len();
        values.truncate(MAX_COMPLETIONS);
        Ok(Completion {
            has_more: total > values.len(),
            total: Some(total as u32),
            values,
        })
    }

    fn changes(since: Option<String>) -> Result<ChangeReport, Error> {
        tree::changes(&settings().root, since.as_deref())
    }
}

fn resource(file: &tree::File) -> Resource {
    let name = file.path.rsplit('/').next().unwrap_or(&file.path);
    Resource {
        path: file.path.clone(),
        name: encoding::decode(name).unwrap_or_else(|_| name.into()),
        title: None,
        description: None,
        mime_type: mime::by_name(&file.relative).map(Into::into),
        size: Some(file.size),
        annotations: file
            .modified
            .clone()
            .map(|stamp| resmux::provider::types::Annotations {
                audience: Vec::new(),
                priority: None,
                last_modified: Some(stamp),
            }),
        icons: Vec::new(),
        meta: None,
    }
}

export!(Files);
