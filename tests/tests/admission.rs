//! One verdict on a plugin's answer, whoever asks: `resmux check` and the
//! server admit a listing page (of resources or of templates), a read, a
//! completion and a change report through the same functions. For each kind, the liar breaks that answer
//! alone, and the reason `check` fails it with is the reason the server
//! refuses it with, word for word.

use std::time::Duration;

use resmux_tests::{Folder, RawServer, notes_still_answer, resmux};
use serde_json::json;

/// The schemes the liar serves, each breaking one kind of answer.
const KINDS: [&str; 4] = ["page", "read", "completion", "changes"];

fn hostile_liars() -> Folder {
    let folder = Folder::new();
    for kind in KINDS {
        folder
            .plugin(kind, "liar")
            .manifest(kind, &format!("[config]\nlist = \"hostile/{kind}\"\n"));
    }
    folder
}

/// The reason `resmux check` gives on its first failing line, after
/// `prefix`; every other line passes, but for a completion, asked twice.
fn check_verdict(folder: &Folder, kind: &str, prefix: &str) -> String {
    let component = folder.path().join(format!("{kind}.wasm"));
    let output = resmux(&["check", component.to_str().unwrap()]);
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(!output.status.success(), "{kind}: {report}");
    let failures: Vec<&str> = report
        .lines()
        .filter_map(|line| line.strip_prefix("FAIL  "))
        .collect();
    let asked = if kind == "completion" { 2 } else { 1 };
    assert_eq!(failures.len(), asked, "{kind}: {report}");
    failures[0]
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{kind}: {:?} does not start {prefix:?}", failures[0]))
        .to_owned()
}

#[tokio::test]
async fn check_and_the_server_refuse_the_same_answer_for_the_same_reason() {
    let folder = hostile_liars();
    let page = check_verdict(&folder, "page", "resource page 1: ");
    assert_eq!(
        page,
        "resource path \"with space\" contains ' ', which is not allowed in a URI"
    );
    let read = check_verdict(&folder, "read", "read read://honest: ");
    assert_eq!(
        read,
        "content path \"other://x\" names a scheme of its own ('://'); paths are relative to \
         the plugin's scheme"
    );
    let completion = check_verdict(
        &folder,
        "completion",
        "complete completion://item/{id} id from \"\": ",
    );
    assert_eq!(
        completion,
        "its completion value is 70000 bytes long, over the limit of 65536"
    );
    let changes = check_verdict(&folder, "changes", "changes: ");
    assert_eq!(
        changes,
        "its change token is 70000 bytes long, over the limit of 65536"
    );

    let mut server = RawServer::start(folder.path(), &[]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let patience = Duration::from_secs(30);

    // The page: its valid entry served, the other dropped for that reason.
    let uris = server.resource_uris().await.unwrap();
    assert!(uris.contains(&"page://honest".to_owned()), "{uris:?}");
    assert!(!uris.iter().any(|uri| uri.contains("with")), "{uris:?}");
    server
        .wait_for_log(
            &format!("listing dropped an invalid entry: {page}"),
            1,
            patience,
        )
        .await;

    // The read: refused whole, for that reason.
    assert_eq!(
        server.read_error("read://honest").await,
        format!("the plugin for read://honest returned an invalid answer: {read}")
    );

    // The completion: the long value refused and left out, for that reason.
    let response = server
        .request(
            "completion/complete",
            json!({
                "ref": { "type": "ref/resource", "uri": "completion://item/{id}" },
                "argument": { "name": "id", "value": "" },
            }),
        )
        .await
        .unwrap();
    assert_eq!(
        response["result"]["completion"]["values"],
        json!(["ok"]),
        "{response}"
    );
    server
        .wait_for_log(
            &format!("refused part of a plugin's completion: {completion}"),
            1,
            patience,
        )
        .await;

    // The change report: asked for once someone subscribes, refused whole.
    let subscribed = server
        .request("resources/subscribe", json!({ "uri": "changes://honest" }))
        .await
        .unwrap();
    assert_eq!(subscribed["result"], json!({}), "{subscribed}");
    server
        .wait_for_log(
            &format!("refused a plugin's change report: {changes}"),
            1,
            patience,
        )
        .await;

    // Every liar still serves what it answers honestly.
    for kind in ["page", "completion", "changes"] {
        assert_eq!(server.read_text(&format!("{kind}://honest")).await, "a lie");
    }
    server.stop().await.unwrap();
}

/// Templates that are no RFC 6570 template, or whose expansions are no URI
/// a client can send, each listed by a liar beside an honest one: with the
/// reason `resmux check` fails it with, word for word.
const UNUSABLE_TEMPLATES: [(&str, &str, &str); 8] = [
    (
        "fragments",
        "section{#a}/x{#b}",
        "has \"{#b}\" after a fragment expression, so an expansion would have a second fragment ('#')",
    ),
    (
        "query",
        "doc{#part}{?q}",
        "has \"{?q}\" after a fragment expression, so an expansion would have a query inside its fragment",
    ),
    (
        "literal",
        "doc{#part}/more?q=1",
        "has \"/more?q=1\" after a fragment expression, so an expansion would have a query inside its fragment",
    ),
    (
        "escape",
        "d]aft{#e%}",
        "has an invalid template expression {#e%}: a variable name is letters, digits, '_' and %XX escapes, with single dots between them",
    ),
    (
        "dots",
        "{a..b}",
        "has an invalid template expression {a..b}: a variable name is letters, digits, '_' and %XX escapes, with single dots between them",
    ),
    (
        "prefix",
        "{a:0}",
        "has an invalid template expression {a:0}: a prefix length is 1 to 9999, in digits",
    ),
    (
        "reserved",
        "{!a}",
        "has an invalid template expression {!a}: RFC 6570 reserves its operator for future extensions",
    ),
    (
        "operators",
        "{/+a}",
        "has an invalid template expression {/+a}: a variable name is letters, digits, '_' and %XX escapes, with single dots between them",
    ),
];

#[tokio::test]
async fn templates_no_client_can_expand_are_refused_alike_by_check_and_the_server() {
    let folder = Folder::new();
    folder.plugin("notes", "notes");
    for (scheme, template, _) in UNUSABLE_TEMPLATES {
        folder.plugin(scheme, "liar").manifest(
            scheme,
            &format!("[config]\nlist = \"hostile/template\"\ntemplate = \"{template}\"\n"),
        );
    }
    for (scheme, template, reason) in UNUSABLE_TEMPLATES {
        let verdict = check_verdict(&folder, scheme, "template page 1: ");
        assert_eq!(verdict, format!("path template {template:?} {reason}"));
    }

    let mut server = RawServer::start(folder.path(), &[]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let listed = server
        .request("resources/templates/list", json!({}))
        .await
        .unwrap();
    let mut templates: Vec<&str> = listed["result"]["resourceTemplates"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .map(|template| template["uriTemplate"].as_str().unwrap())
        .collect();
    templates.sort_unstable();
    let mut honest: Vec<String> = UNUSABLE_TEMPLATES
        .iter()
        .map(|(scheme, _, _)| format!("{scheme}://item/{{id}}"))
        .chain(["notes://notes/{id}".into(), "notes://tags/{tag}".into()])
        .collect();
    honest.sort_unstable();
    assert_eq!(templates, honest, "only the honest templates are listed");
    for (_, template, reason) in UNUSABLE_TEMPLATES {
        server
            .wait_for_log(
                &format!("listing dropped an invalid entry: path template {template:?} {reason}"),
                1,
                Duration::from_secs(30),
            )
            .await;
    }
    notes_still_answer(&mut server).await;
}
