//! `conformance`: the fixtures the official MCP conformance suite
//! (`@modelcontextprotocol/conformance`) reads, served under scheme `test`:
//! `test://static-text`, `test://static-binary`, `test://watched-resource` and
//! the template `test://template/{id}/data`. Every other path is not found,
//! which is what the suite's not-found scenario expects.

wit_bindgen::generate!({
    path: "../../wit",
    world: "resmux:provider/plugin",
});

use exports::resmux::provider::provider::Guest;
use resmux::provider::types::{
    Body, ChangeReport, Completion, CompletionRequest, Content, Error, PluginInfo, ReadResult,
    Resource, ResourcePage, Template, TemplatePage,
};

/// A 1x1 PNG image.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

const STATIC_TEXT: &str = "This is the content of the static text resource.";
const WATCHED_TEXT: &str = "This resource is watched for changes.";

struct Conformance;

impl Guest for Conformance {
    fn about() -> PluginInfo {
        PluginInfo {
            name: "conformance".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Fixtures of the official MCP conformance suite".into(),
        }
    }

    fn init(_config: Vec<(String, String)>) -> Result<(), Error> {
        Ok(())
    }

    fn list(cursor: Option<String>) -> Result<ResourcePage, Error> {
        if let Some(cursor) = cursor {
            return Err(Error::InvalidInput(format!("unknown cursor {cursor:?}")));
        }
        Ok(ResourcePage {
            resources: vec![
                resource("static-text", "A static text resource", "text/plain"),
                resource(
                    "static-binary",
                    "A static binary resource (a PNG image)",
                    "image/png",
                ),
                resource(
                    "watched-resource",
                    "A resource clients may subscribe to",
                    "text/plain",
                ),
            ],
            next_cursor: None,
            cache: None,
        })
    }

    fn templates(cursor: Option<String>) -> Result<TemplatePage, Error> {
        if let Some(cursor) = cursor {
            return Err(Error::InvalidInput(format!("unknown cursor {cursor:?}")));
        }
        Ok(TemplatePage {
            templates: vec![Template {
                path_template: "template/{id}/data".into(),
                name: "template".into(),
                title: None,
                description: Some("Data for any ID, as JSON".into()),
                mime_type: Some("application/json".into()),
                annotations: None,
                icons: Vec::new(),
                meta: None,
            }],
            next_cursor: None,
            cache: None,
        })
    }

    fn read(path: String) -> Result<ReadResult, Error> {
        let (mime_type, body) = match path.as_str() {
            "static-text" => ("text/plain", Body::Text(STATIC_TEXT.into())),
            "static-binary" => ("image/png", Body::Blob(PNG.to_vec())),
            "watched-resource" => ("text/plain", Body::Text(WATCHED_TEXT.into())),
            _ => match path
                .strip_prefix("template/")
                .and_then(|rest| rest.strip_suffix("/data"))
                .filter(|id| !id.is_empty() && !id.contains('/'))
            {
                Some(id) => (
                    "application/json",
                    Body::Text(format!(
                        "{{\"id\":\"{id}\",\"templateTest\":true,\"data\":\"Data for ID: {id}\"}}"
                    )),
                ),
                None => return Err(Error::NotFound(format!("no fixture at {path:?}"))),
            },
        };
        Ok(ReadResult {
            contents: vec![Content {
                path,
                mime_type: Some(mime_type.into()),
                body,
                meta: None,
            }],
            cache: None,
        })
    }

    fn complete(request: CompletionRequest) -> Result<Completion, Error> {
        if request.path_template != "template/{id}/data" || request.argument != "id" {
            return Err(Error::InvalidInput(format!(
                "template {:?} has no argument {:?} to complete",
                request.path_template, request.argument
            )));
        }
        let values: Vec<String> = ["1", "123", "42"]
            .into_iter()
            .filter(|id| id.starts_with(&request.value))
            .map(String::from)
            .collect();
        Ok(Completion {
            total: Some(values.len() as u32),
            values,
            has_more: false,
        })
    }

    fn changes(_since: Option<String>) -> Result<ChangeReport, Error> {
        Ok(ChangeReport {
            token: "static".into(),
            listing_changed: false,
            changed_paths: Vec::new(),
        })
    }
}

fn resource(path: &str, description: &str, mime_type: &str) -> Resource {
    Resource {
        path: path.into(),
        name: path.into(),
        title: None,
        description: Some(description.into()),
        mime_type: Some(mime_type.into()),
        size: None,
        annotations: None,
        icons: Vec::new(),
        meta: None,
    }
}

export!(Conformance);
