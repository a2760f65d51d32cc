//! Target `answers`: arbitrary plugin answers (a resource page, a template
//! page, a read, a completion, a change report, a located file) through the
//! whole admission path. The first four go to resmux's real MCP server over
//! a stream, in the revision the input picks, and what a client reads back
//! must fit MCP's schema; a change report goes through the admission the
//! change poller uses, and each URI it yields must be one a client could
//! subscribe to.

use arbitrary::Unstructured;
use resmux::contract::{Content, ReadResult};
use resmux::fuzzing::located_answer;
use resmux::namespace::Namespace;
use resmux::namespace::answers::admit_changes;
use resmux::namespace::uri::Uri;
use serde_json::{Value, json};

use crate::arbitrary_answers::{self as answer, or_error};
use crate::mcp_schema;
use crate::provider::{self, LIMITS, PAGE_SIZE, SCHEME, Scripted};

/// The check of a result's schema, given the client's revision.
type SchemaCheck = fn(&serde_json::Map<String, Value>, &str) -> Result<(), String>;

pub fn run(data: &[u8]) {
    let mut input = Unstructured::new(data);
    let kind = input.int_in_range(0u8..=5).unwrap_or(0);
    let versions = provider::versions();
    let version = &versions[input.choose_index(versions.len()).unwrap_or(0)];
    let mut scripted = Scripted::default();
    let (request, check): (Value, SchemaCheck) = match kind {
        0 => {
            scripted.list = or_error(&mut input, answer::resources);
            (json!({"method": "resources/list"}), mcp_schema::resources)
        }
        1 => {
            scripted.templates = or_error(&mut input, answer::templates);
            (
                json!({"method": "resources/templates/list"}),
                mcp_schema::templates,
            )
        }
        2 => {
            scripted.read = or_error(&mut input, answer::read);
            (read_request(&mut input), mcp_schema::read)
        }
        3 => {
            scripted.read = Ok(located(&mut input));
            (read_request(&mut input), mcp_schema::read)
        }
        4 => {
            scripted.complete = or_error(&mut input, answer::completion);
            let template = format!("{SCHEME}:{}", answer::text(&mut input));
            let request = json!({
                "method": "completion/complete",
                "params": {
                    "ref": {"type": "ref/resource", "uri": template},
                    "argument": {"name": answer::text(&mut input), "value": answer::text(&mut input)},
                },
            });
            (request, |result, _| mcp_schema::completion(result))
        }
        _ => return changes(&mut input),
    };
    let mut request = request;
    request["jsonrpc"] = json!("2.0");
    request["id"] = json!(1);
    let namespace = provider::mounted(Namespace::new(PAGE_SIZE), scripted);
    let answer = provider::runtime().block_on(provider::exchange(namespace, version, &request));
    let outcome = mcp_schema::response(&answer, &json!(1))
        .and_then(|result| result.map_or(Ok(()), |result| check(result, version.as_str())));
    if let Err(why) = outcome {
        panic!(
            "an answer outside MCP's {version} schema reached the client: {why}\nrequest: {request}\nanswer: {answer}"
        );
    }
}

/// A read of a URI of the plugin's scheme, or of any URI.
fn read_request(input: &mut Unstructured) -> Value {
    let path = answer::text(input);
    let uri = if input.ratio(1u8, 4u8).unwrap_or(false) {
        path
    } else {
        format!("{SCHEME}:{path}")
    };
    json!({"method": "resources/read", "params": {"uri": uri}})
}

/// The answer the host builds from a file a plugin located: its MIME type
/// and text flag as the plugin said, its bytes as the file holds them.
fn located(input: &mut Unstructured) -> ReadResult {
    let mime_type = input
        .arbitrary::<bool>()
        .unwrap_or(false)
        .then(|| answer::text(input));
    let text = input.arbitrary().unwrap_or(false);
    let path = answer::text(input);
    let (mime_type, body) = located_answer(mime_type, text, answer::bytes(input));
    ReadResult {
        contents: vec![Content {
            path,
            mime_type: Some(mime_type),
            body,
            meta: None,
        }],
        cache: None,
    }
}

/// A change report through the poller's admission: every URI served is one
/// a client can read and subscribe to, within the limits.
fn changes(input: &mut Unstructured) {
    let report = answer::change_report(input);
    let Ok(admitted) = admit_changes(SCHEME, report, &LIMITS) else {
        return;
    };
    assert!(
        admitted.value.token.len() <= LIMITS.max_string_bytes as usize,
        "a token over the string limit was admitted"
    );
    for uri in &admitted.value.changed_uris {
        assert_eq!(
            Uri::parse(uri.as_str()).as_ref(),
            Ok(uri),
            "a changed URI a client could not send back"
        );
        if let Err(why) = mcp_schema::rfc3986(uri.as_str()) {
            panic!("a change notification would name {:?}: {why}", uri.as_str());
        }
    }
}
