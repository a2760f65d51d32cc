//! `liar`: a test plugin that breaks the contract on purpose. It lists some
//! entries that are fine and some that are not, and answers reads with URIs in
//! another plugin's scheme, malformed MIME types or no contents at all, and
//! prints to stdout and stderr, tries outgoing HTTP, files and environment
//! variables it was not granted, floods its output, spins, sleeps, hoards
//! memory, recurses without end and panics. The host must pass on only what is valid, and
//! keep what it prints out of the protocol stream and its requests off the
//! network.

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

/// Where `liar://fetch` sends its request: config key `fetch`.
static FETCH_AUTHORITY: std::sync::OnceLock<String> = std::sync::OnceLock::new();

impl Guest for Liar {
    fn about() -> PluginInfo {
        PluginInfo {
            name: "liar".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "Breaks the contract on purpose, for tests".into(),
        }
    }

    fn init(config: Vec<(String, String)>) -> Result<(), Error> {
        for (key, value) in config {
            if key == "fetch" {
                let _ = FETCH_AUTHORITY.set(value);
            }
        }
        Ok(())
    }

    fn list(cursor: Option<String>) -> Result<ResourcePage, Error> {
        // After the first page, every page is the same and hands back the
        // cursor it was given: a listing that never ends.
        if cursor.is_some() {
            return Ok(ResourcePage {
                resources: vec![resource("again", None)],
                next_cursor: cursor,
                cache: None,
            });
        }
        Ok(ResourcePage {
            resources: vec![
                resource("honest", None),
                resource("test://static-text", None),
                resource("bad-mime", Some("not a mime type")),
                resource("with space", None),
            ],
            next_cursor: Some("forever".into()),
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
        if let Some(outcome) = probe(&path) {
            let mut answer = content(&path, "text/plain");
            answer.body = Body::Text(outcome);
            return Ok(ReadResult {
                contents: vec![answer],
                cache: None,
            });
        }
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
            "spin" => loop {
                std::hint::black_box(());
            },
            "panic" => panic!("the liar panics"),
            "hog" => {
                let hoard = vec![1u8; 1 << 30];
                vec![content(&format!("hog {}", hoard.len()), "text/plain")]
            }
            "recurse" => vec![content(&format!("depth {}", recurse(0)), "text/plain")],
            "flood" => {
                let line = "x".repeat(1023);
                for _ in 0..10 * 1024 {
                    println!("{line}");
                    eprintln!("{line}");
                }
                vec![content("flood", "text/plain")]
            }
            "sleep" => {
                std::thread::sleep(std::time::Duration::from_millis(300));
                vec![content("sleep", "text/plain")]
            }
            "fetch" => {
                let mut answer = content("fetch", "text/plain");
                answer.body = Body::Text(fetch_loopback());
                vec![answer]
            }
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

/// Recurses until the stack runs out, long before `depth` could reach its end.
fn recurse(depth: u64) -> u64 {
    if depth == u64::MAX {
        return depth;
    }
    std::hint::black_box(recurse(std::hint::black_box(depth + 1))) + 1
}

/// Tries to reach outside the sandbox, for `open/PATH`, `write/PATH` and
/// `env/NAME`, and describes what happened.
fn probe(path: &str) -> Option<String> {
    if let Some(target) = path.strip_prefix("open/") {
        return Some(match std::fs::read(target) {
            Ok(bytes) => format!("ok: {} bytes", bytes.len()),
            Err(error) => format!("error: {:?}", error.kind()),
        });
    }
    if let Some(target) = path.strip_prefix("write/") {
        return Some(match std::fs::write(target, "written by liar") {
            Ok(()) => "ok".into(),
            Err(error) => format!("error: {:?}", error.kind()),
        });
    }
    let name = path.strip_prefix("env/")?;
    Some(std::env::var(name).unwrap_or_else(|_| "unset".into()))
}

/// Tries an outgoing HTTP request and describes what happened.
fn fetch_loopback() -> String {
    use wasi::http::outgoing_handler;
    use wasi::http::types::{Fields, OutgoingRequest, Scheme};

    let request = OutgoingRequest::new(Fields::new());
    let _ = request.set_scheme(Some(&Scheme::Http));
    let authority = FETCH_AUTHORITY.get().map_or("127.0.0.1:9", String::as_str);
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some("/"));
    match outgoing_handler::handle(request, None) {
        Err(code) => format!("refused: {code:?}"),
        Ok(response) => {
            response.subscribe().block();
            match response.get() {
                Some(Ok(Ok(_))) => "got a response".into(),
                Some(Ok(Err(code))) => format!("failed: {code:?}"),
                other => format!("unexpected: {other:?}"),
            }
        }
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
