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
//!
//! Reads of files go through `locate`: the plugin names the granted file and
//! resmux reads it, so the bytes never cross into the plugin. Directories,
//! and anything resmux cannot read for the plugin, go through `read`.

mod encoding;
mod listing;
mod mime;
mod tree;

use resmux_sdk::{
    Annotations, Body, ChangeReport, Completion, CompletionRequest, Config, Content, Error,
    Located, Plugin, PluginInfo, ReadResult, Resource, ResourcePage, Template, TemplatePage,
};

/// The most completion values worth computing; the host sends at most 100.
const MAX_COMPLETIONS: usize = 100;

/// The plugin, as `init` made it from the manifest's `[config]`.
struct Files {
    /// The granted directory's guest path.
    root: String,
    /// The root as WASI opened it; none on the instances resmux asks
    /// `locate` on, which have no files and only compute names.
    tree: Option<tree::Root>,
    page_size: usize,
    /// What listing pages of this instance read, for the pages after them.
    listings: listing::Listings,
}

impl Plugin for Files {
    fn about() -> PluginInfo {
        PluginInfo::new(
            "files",
            env!("CARGO_PKG_VERSION"),
            "Files of a directory the operator grants, read-only",
        )
    }

    fn init(mut config: Config) -> Result<Self, Error> {
        let root = config.text("root").unwrap_or_else(|| "/data".into());
        let page_size = match config.text("page_size") {
            None => 100,
            Some(value) => value.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                Error::InvalidInput(format!("page_size {value:?} is not a positive number"))
            })?,
        };
        config.finish()?;
        if !tree::has_files() {
            return Ok(Files {
                tree: None,
                root,
                page_size,
                listings: listing::Listings::default(),
            });
        }
        std::fs::metadata(&root).map_err(|error| {
            Error::Unavailable(format!(
                "root {root:?} cannot be read ({error}); grant it under [[files]]"
            ))
        })?;
        Ok(Files {
            tree: Some(tree::Root::open(&root)?),
            root,
            page_size,
            listings: listing::Listings::default(),
        })
    }

    fn list(&self, cursor: Option<String>) -> Result<ResourcePage, Error> {
        let tree = self.tree()?;
        let cursor = listing::Cursor::parse(cursor.as_deref())?;
        let page = self.listings.page(tree, &cursor, self.page_size)?;
        Ok(ResourcePage {
            next_cursor: page.last.map(|path| cursor.after(&path)),
            resources: page.files.iter().map(resource).collect(),
            cache: None,
        })
    }

    fn templates(&self, cursor: Option<String>) -> Result<TemplatePage, Error> {
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

    fn read(&self, path: String) -> Result<ReadResult, Error> {
        let decoded = encoding::decode(&path)?;
        // `dir/` names `dir`, and `a.txt/` names `a.txt`.
        let relative = decoded.trim_end_matches('/');
        let host_path = tree::resolve(&self.root, relative)?;
        let contents = match tree::read(self.tree()?, relative)? {
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

    fn complete(&self, request: CompletionRequest) -> Result<Completion, Error> {
        if request.path_template != "{+path}" || request.argument != "path" {
            return Err(Error::InvalidInput(format!(
                "template {:?} has no argument {:?} to complete",
                request.path_template, request.argument
            )));
        }
        let typed = encoding::decode(&request.value)?;
        let (directory, prefix) = typed.rsplit_once('/').unwrap_or(("", &typed));
        let host_path = tree::resolve(&self.root, directory)?;
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

    fn changes(&self, since: Option<String>) -> Result<ChangeReport, Error> {
        tree::changes(&self.root, since.as_deref())
    }

    fn locate(&self, path: String) -> Result<Option<Located>, Error> {
        let decoded = encoding::decode(&path)?;
        let relative = decoded.trim_end_matches('/');
        if relative.is_empty() {
            // The root, a directory: `read` lists it.
            return Ok(None);
        }
        let mime_type = mime::by_name(relative);
        Ok(Some(Located {
            file: tree::resolve(&self.root, relative)?,
            mime_type: mime_type.map(Into::into),
            text: mime_type.is_some_and(mime::is_text),
            cache: None,
        }))
    }
}

impl Files {
    fn tree(&self) -> Result<&tree::Root, Error> {
        self.tree
            .as_ref()
            .ok_or_else(|| Error::Internal("this instance has no files".into()))
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
        annotations: file.modified.clone().map(|stamp| Annotations {
            audience: Vec::new(),
            priority: None,
            last_modified: Some(stamp),
        }),
        icons: Vec::new(),
        meta: None,
    }
}

resmux_sdk::export!(Files);
