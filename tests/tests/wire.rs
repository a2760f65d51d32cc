//! The protocol on the wire: raw JSON-RPC lines to `resmux serve` over stdio,
//! for every revision from 2024-11-05 to 2026-07-28, and for input that is
//! malformed. Every line the server writes must be a JSON-RPC message.

use resmux_tests::{
    Folder, RawServer, SPIN_LIMIT, error_message, liar_and_notes, notes_and_fixtures,
};
use serde_json::{Value, json};
use std::time::Duration;

const LEGACY_REVISIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

#[tokio::test]
async fn every_legacy_revision_negotiates_and_reads_without_caching_fields() {
    let folder = notes_and_fixtures();
    for revision in LEGACY_REVISIONS {
        let mut server = RawServer::start(folder.path(), &[]).unwrap();
        let info = server.initialize(revision).await.unwrap();
        assert_eq!(info["protocolVersion"], revision);
        assert!(info["capabilities"]["resources"].is_object(), "{info}");
        assert!(info["capabilities"]["completions"].is_object(), "{info}");
        assert_eq!(info["serverInfo"]["name"], "resmux");

        let listed = server.request("resources/list", json!({})).await.unwrap();
        let result = &listed["result"];
        assert_eq!(result["resources"].as_array().unwrap().len(), 8, "{listed}");
        for field in ["ttlMs", "cacheScope", "resultType"] {
            assert!(
                result.get(field).is_none(),
                "{revision}: {field} in {result}"
            );
        }
        let read = server.read("test://static-text").await.unwrap();
        assert!(read["result"].get("ttlMs").is_none(), "{read}");
        assert_eq!(read["result"]["contents"][0]["mimeType"], "text/plain");

        let missing = server.read("test://missing").await.unwrap();
        assert_eq!(missing["error"]["code"], -32002, "{revision}: {missing}");
        assert_eq!(missing["error"]["data"]["uri"], "test://missing");
        server.stop().await.unwrap();
    }
}

fn modern_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

#[tokio::test]
async fn the_2026_era_discovers_and_gets_caching_fields() {
    let folder = notes_and_fixtures();
    let mut server = RawServer::start(folder.path(), &[]).unwrap();
    let discovered = server
        .request("server/discover", json!({ "_meta": modern_meta() }))
        .await
        .unwrap();
    let versions = discovered["result"]["supportedVersions"]
        .as_array()
        .unwrap();
    for revision in LEGACY_REVISIONS.iter().chain(&["2026-07-28"]) {
        assert!(
            versions.contains(&json!(revision)),
            "{revision} in {discovered}"
        );
    }
    assert!(discovered["result"]["capabilities"]["resources"].is_object());

    let listed = server
        .modern_request("resources/list", json!({}))
        .await
        .unwrap();
    assert_eq!(
        listed["result"]["ttlMs"], 0,
        "notes' 60 s and the fixtures' missing hint merge to 0"
    );
    assert_eq!(listed["result"]["cacheScope"], "public");
    let notes = server
        .modern_request("resources/read", json!({ "uri": "notes://notes/welcome" }))
        .await
        .unwrap();
    assert_eq!(notes["result"]["ttlMs"], 60_000, "{notes}");
    assert_eq!(notes["result"]["cacheScope"], "public");
    let templates = server
        .modern_request("resources/templates/list", json!({}))
        .await
        .unwrap();
    assert_eq!(templates["result"]["ttlMs"], 0);
    let missing = server
        .modern_request(
            "resources/read",
            json!({ "uri": "test://nonexistent-resource-for-conformance-testing" }),
        )
        .await
        .unwrap();
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
    assert_eq!(
        missing["error"]["data"]["uri"],
        "test://nonexistent-resource-for-conformance-testing"
    );
    let completion = server
        .modern_request(
            "completion/complete",
            json!({
                "ref": { "type": "ref/resource", "uri": "test://template/{id}/data" },
                "argument": { "name": "id", "value": "1" }
            }),
        )
        .await
        .unwrap();
    assert_eq!(
        completion["result"]["completion"]["values"],
        json!(["1", "123"])
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_page_with_a_cursor_is_kept_for_at_most_half_the_time_its_cursor_surely_opens() {
    let folder = Folder::new();
    folder.plugin("notes", "notes");
    let args = ["--page-size", "2", "--cursor-rotation", "60"];
    let mut server = RawServer::start(folder.path(), &args).unwrap();
    let mut cursor = None;
    let mut ttls = Vec::new();
    loop {
        let params = cursor.map_or(json!({}), |cursor| json!({ "cursor": cursor }));
        let page = server
            .modern_request("resources/list", params)
            .await
            .unwrap();
        let next = page["result"]["nextCursor"].as_str().map(str::to_owned);
        ttls.push((next.is_some(), page["result"]["ttlMs"].clone()));
        let Some(next) = next else { break };
        cursor = Some(next);
    }
    // notes says 60 s; a cursor sealed now opens for at least one rotation
    // (60 s), and a page keeps it for half of that.
    let (with_cursor, last) = ttls.split_at(ttls.len() - 1);
    assert!(!with_cursor.is_empty(), "{ttls:?}");
    assert!(
        with_cursor
            .iter()
            .all(|page| *page == (true, json!(30_000))),
        "{ttls:?}"
    );
    // The last page keeps notes' own 60 s, less the moments since the
    // listing was walked.
    let [(false, last)] = last else {
        panic!("the last page has no cursor: {ttls:?}");
    };
    let last = last.as_u64().unwrap_or_default();
    assert!(30_000 < last && last <= 60_000, "{ttls:?}");
}

#[tokio::test]
async fn malformed_requests_get_errors_and_the_server_carries_on() {
    let folder = notes_and_fixtures();
    let mut server = RawServer::legacy(folder.path()).await.unwrap();

    for uri in [
        "no-scheme",
        "notes://a b",
        "notes://a#fragment",
        "notes://%zz",
        "1notes://x",
    ] {
        let response = server.read(uri).await.unwrap();
        assert_eq!(response["error"]["code"], -32602, "{uri}: {response}");
        assert!(
            response["error"]["message"]
                .as_str()
                .unwrap()
                .contains("invalid URI"),
            "{uri}: {response}"
        );
    }
    let no_uri = server.request("resources/read", json!({})).await.unwrap();
    assert_eq!(no_uri["error"]["code"], -32602, "{no_uri}");
    let unknown = server.request("tools/frobnicate", json!({})).await.unwrap();
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    let prompt = server
        .request(
            "completion/complete",
            json!({ "ref": { "type": "ref/prompt", "name": "x" }, "argument": { "name": "a", "value": "" } }),
        )
        .await
        .unwrap();
    assert_eq!(prompt["error"]["code"], -32602, "{prompt}");

    // JSON of the wrong shape is an invalid request; a line that is not JSON
    // at all is ignored, as in the other official SDKs (no id to answer to).
    server
        .send_line(r#"{"jsonrpc":"2.0","id":{"no":"ids"},"method":7}"#)
        .await
        .unwrap();
    let invalid = server.next_message().await.unwrap();
    assert_eq!(invalid["error"]["code"], -32600, "{invalid}");
    server.send_line("{this is not json").await.unwrap();

    let still = server.read("notes://notes/errors").await.unwrap();
    assert!(
        still["result"]["contents"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("# Typed errors")
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn an_overlong_line_is_dropped_whole_and_reads_sent_together_all_come_back() {
    let folder = notes_and_fixtures();
    let mut server = RawServer::legacy(folder.path()).await.unwrap();

    // One line over stdin's 16 MiB limit: dropped whole, logged, never
    // answered, and the session goes on.
    let overlong = format!(
        r#"{{"jsonrpc":"2.0","id":99,"method":"resources/read","params":{{"uri":"notes://{}"}}}}"#,
        "a".repeat(16 * 1024 * 1024)
    );
    server.send_line(&overlong).await.unwrap();
    server
        .wait_for_log(
            "a line on stdin was longer than 16777216 bytes and was dropped",
            1,
            Duration::from_secs(60),
        )
        .await;
    let ping = server.send("ping", json!({})).await.unwrap();
    let next = server.next_message().await.unwrap();
    assert_eq!(next["id"], ping, "{next}");

    // Reads sent together, whose answers leave stdout together: each id
    // comes back once, with its own resource.
    let mut sent = Vec::new();
    for round in 0..40 {
        let uri = if round % 2 == 0 {
            "test://static-text"
        } else {
            "notes://notes/errors"
        };
        let id = server.send_read(uri).await.unwrap();
        sent.push((id, uri));
    }
    for (id, uri) in sent {
        let response = server.response(id).await.unwrap();
        assert_eq!(response["result"]["contents"][0]["uri"], uri, "{response}");
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_read_is_never_answered_and_the_reads_around_it_are() {
    let folder = liar_and_notes();
    // The liar again, as `endless`, with limits no read reaches while the
    // test runs: only its cancellation ends a read of it, however late the
    // cancellation is handled.
    folder.manifest(
        "endless",
        "component = \"liar.wasm\"\n[limits]\ncpu_ms = 600000\ntimeout_ms = 600000\n",
    );
    let mut server = RawServer::legacy(folder.path()).await.unwrap();

    let cancelled = server.send_read("endless://spin").await.unwrap();
    let cancel = json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": { "requestId": cancelled, "reason": "the user moved on" }
    });
    server.send_line(&cancel.to_string()).await.unwrap();
    let notes = server.send_read("notes://notes/welcome").await.unwrap();

    // The cancelled read ends at once: it runs on to no time limit (were
    // it left spinning, it would still be in flight when stdin closes),
    // and holds no place among the session's requests. A spinning read of
    // the liar does run to its limit; every message up to its answer is
    // looked at, and none answers the cancelled read.
    let mut spun = None;
    loop {
        let message = server.next_message().await.unwrap();
        assert_ne!(message["id"], cancelled, "a cancelled read was answered");
        if message["id"] == notes {
            assert!(
                message["result"]["contents"][0]["text"].is_string(),
                "{message}"
            );
            spun = Some(server.send_read("liar://spin").await.unwrap());
        } else if spun.is_some_and(|spun| message["id"] == spun) {
            assert_eq!(message["error"]["code"], -32603, "{message}");
            assert!(error_message(&message).contains(SPIN_LIMIT), "{message}");
            break;
        }
    }
    let ping = server.request("ping", json!({})).await.unwrap();
    assert!(ping["result"].is_object(), "{ping}");
    let log = server.stop().await.unwrap();
    assert_eq!(
        log.matches(SPIN_LIMIT).count(),
        1,
        "only the read that was not cancelled ran to its limit: {log}"
    );
    assert!(
        !log.contains("reads still in flight"),
        "the cancelled read still ran when stdin closed: {log}"
    );
}

#[tokio::test]
async fn a_read_in_flight_when_stdin_closes_is_answered_before_the_server_exits() {
    let folder = liar_and_notes();
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let spin = server.send_read("liar://spin").await.unwrap();
    let (last, _) = server.finish().await.unwrap();
    assert_eq!(last.len(), 1, "{last:?}");
    assert_eq!(last[0]["id"], spin, "{last:?}");
    assert!(error_message(&last[0]).contains(SPIN_LIMIT), "{last:?}");
}

#[tokio::test]
async fn after_discover_the_first_read_still_opens_the_session() {
    let folder = notes_and_fixtures();
    let mut server = RawServer::start(folder.path(), &[]).unwrap();
    let discovered = server
        .request("server/discover", json!({ "_meta": modern_meta() }))
        .await
        .unwrap();
    assert!(discovered["result"].is_object(), "{discovered}");

    // Without the 2026-07-28 `_meta`, a read cannot open the session.
    let bare = server.read("notes://notes/welcome").await.unwrap();
    assert_eq!(bare["error"]["code"], -32602, "{bare}");
    let read = server
        .modern_request("resources/read", json!({ "uri": "notes://notes/welcome" }))
        .await
        .unwrap();
    assert!(read["result"]["contents"][0]["text"].is_string(), "{read}");

    // The session is open: a notification is taken as one, and the session
    // goes on to the end of stdin.
    let cancel = json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": { "requestId": 12345 }
    });
    server.send_line(&cancel.to_string()).await.unwrap();
    let listed = server
        .modern_request("resources/list", json!({}))
        .await
        .unwrap();
    assert!(listed["result"]["resources"].is_array(), "{listed}");
    server.stop().await.unwrap();
}
