//! `liar`: a test plugin that breaks the contract on purpose. It lists some
//! entries that are fine and some that are not, and answers reads with URIs in
//! another plugin's scheme, malformed MIME types or no contents at all, and
//! prints to stdout and stderr. The host must pass on only what is valid, and
//! keep what it prints out of the protocol stream.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "resmux:provider/plugin",
});

use exports::resmux::provider::provider::Guest;
use resmux::provider::types::{
    Body, ChangeReport, Completion, CompletionRequest, Content, Error, PluginInfo, ReadResult,
    Resource, ResourcePage, Template, TemplatePage,
};

struct Liar;

impl Guest for Liar {
    fn about() -> PluginInfo {
        PluginInfo {
            name: "liar".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Breaks the contract on purpose, for tests".into(),
        }
    }

    fn init(_config: Vec<(String, String)>) -> Result<(), Error> {
        Ok(())
    }

    fn list(_cursor: Option<String>) -> Result<ResourcePage, Error> {
        Ok(ResourcePage {
            resources: vec![
                resource("honest", None),
                resource("test://static-text", None),
                resource("bad-mime", Some("not a mime type")),
                resource("with space", None),
            ],
            next_cursor: None,
            cache: None,
        })
    }

    fn templates(_cursor: Option<String>) -> Result<TemplatePage, Error> {
        Ok(TemplatePage {
            templates: vec![
                template("item/{id}"),
                template("broken/{id"),
                template("x/{a b}"),
            ],
            next_cursor: None,
            cache: None,
        })
    }

    fn read(path: String) -> Result<ReadResult, Error> {
        let content = |path: &str, mime_type: &str| Content {
            path: path.into(),
            mime_type: Some(mime_type.into()),
            body: Body::Text("a lie".into()),
            meta: None,
        };
        let contents = match path.as_str() {
            "honest" => {
                // Output a plugin prints must end up in the host's log only.
                println!("liar says hello on stdout");
                eprintln!("liar says hello on stderr");
                vec![content("honest", "text/plain")]
            }
            "other-scheme" => vec![content("test://static-text", "text/plain")],
            "bad-mime" => vec![content("bad-mime", "not a mime type")],
            "bad-meta" => vec![Content {
                meta: Some("[1, 2]".into()),
                ..content("bad-meta", "text/plain")
            }],
            "empty" => Vec::new(),
            _ => return Err(Error::NotFound(format!("no lie at {path:?}"))),
        };
        Ok(ReadResult {
            contents,
            cache: None,
        })
    }

    fn complete(_request: CompletionRequest) -> Result<Completion, Error> {
        Ok(Completion {
            values: (0..150).map(|n| n.to_string()).collect(),
            total: Some(150),
            has_more: false,
        })
    }

    fn changes(_since: Option<String>) -> Result<ChangeReport, Error> {
        Err(Error::Unavailable("the liar never reports changes".into()))
    }
}

fn resource(path: &str, mime_type: Option<&str>) -> Resource {
    Resource {
        path: path.into(),
        name: "lie".into(),
        title: None,
        description: None,
        mime_type: mime_type.map(Into::into),
        size: None,
        annotations: None,
        icons: Vec::new(),
        meta: None,
    }
}

fn template(path_template: &str) -> Template {
    Template {
        path_template: path_template.into(),
        name: "lie".into(),
        title: None,
        description: None,
        mime_type: None,
        annotations: None,
        icons: Vec::new(),
        meta: None,
    }
}

export!(Liar);
