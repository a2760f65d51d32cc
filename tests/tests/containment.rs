//! Plugins that cannot load, collide, or lie: each is refused with a clear
//! reason while every other plugin keeps serving.

use resmux_tests::{
    EXCHANGE_TIMEOUT, Era, Folder, MOST_FAULTS_PAST_A_QUARANTINE, RawServer, SPIN_LIMIT, client,
    error_message, liar_and_notes, mcp_error,
};
use rmcp::model::{ReadResourceRequestParams, ResourceContents};
use serde_json::json;

#[tokio::test]
async fn a_plugin_that_fails_to_load_is_reported_and_the_others_serve() {
    let folder = Folder::new();
    folder
        .plugin("notes", "notes")
        .file("garbage.wasm", b"this is not WebAssembly")
        .plugin("unconfigured", "notes")
        .manifest("unconfigured", "[config]\npage_size = \"many\"\n")
        .manifest("typo", "component = \"notes.wasm\"\nschem = \"x\"\n")
        .file("bare.toml", b"scheme = \"bare\"\n");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let listed = server.request("resources/list", json!({})).await.unwrap();
    let uris: Vec<&str> = listed["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|resource| resource["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris.len(), 5, "{listed}");
    assert!(
        uris.iter().all(|uri| uri.starts_with("notes://")),
        "{uris:?}"
    );
    // What is not compiled yet is loaded while resmux serves, and reported
    // then.
    server
        .wait_for_log("not a loadable component", 1, EXCHANGE_TIMEOUT)
        .await;
    let stderr = server.stop().await.unwrap();
    for expected in [
        "garbage.wasm",
        "not a loadable component",
        "unconfigured.wasm",
        r#"config key "page_size" has the value "many", which is not a valid usize"#,
        "typo.toml",
        "unknown field `schem`",
        "bare.toml",
        "it has no bare.wasm beside it",
    ] {
        assert!(
            stderr.contains(expected),
            "stderr lacks {expected:?}:\n{stderr}"
        );
    }
}

#[tokio::test]
async fn two_plugins_on_one_scheme_are_both_refused() {
    let folder = Folder::new();
    folder
        .plugin("notes", "notes")
        .plugin("other", "conformance")
        .manifest("other", "scheme = \"notes\"\n")
        .plugin("conformance", "conformance")
        .manifest("conformance", "scheme = \"test\"\n");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let read = server.read("notes://notes/welcome").await.unwrap();
    assert_eq!(read["error"]["code"], -32002, "{read}");
    let fixture = server.read("test://static-text").await.unwrap();
    assert_eq!(
        fixture["result"]["contents"][0]["text"],
        "This is the content of the static text resource."
    );
    let stderr = server.stop().await.unwrap();
    assert!(
        stderr.contains(r#"scheme "notes" is claimed by"#)
            && stderr.contains("notes.wasm")
            && stderr.contains("other.wasm"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_read_is_held_to_what_a_fresh_listing_promised() {
    let folder = Folder::new();
    folder.plugin("liar", "liar");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    assert_eq!(
        server.read_text("liar://grows").await,
        "a lie that grew",
        "nothing was promised before a listing"
    );
    let listed = server.request("resources/list", json!({})).await.unwrap();
    let grows = &listed["result"]["resources"][1];
    assert_eq!(
        (&grows["uri"], &grows["size"]),
        (&json!("liar://grows"), &json!(5)),
        "{listed}"
    );
    for (uri, lie) in [
        (
            "liar://grows",
            "its listing said liar://grows has 5 bytes, but the read returned 15",
        ),
        (
            "liar://retyped",
            "its listing said liar://retyped is text/plain, but the read returned image/png",
        ),
    ] {
        let read = server.read(uri).await.unwrap();
        assert_eq!(read["error"]["code"], -32603, "{read}");
        assert!(error_message(&read).contains(lie), "{read}");
    }
    let stderr = server.stop().await.unwrap();
    assert!(stderr.contains("refused a plugin's answer"), "{stderr}");
    assert!(
        stderr.contains(
            "listing dropped an invalid entry: its description is 100000 bytes long, over the limit of 65536"
        ),
        "{stderr}"
    );
}

#[tokio::test]
async fn answers_that_break_the_contract_never_reach_the_client() {
    let folder = Folder::new();
    folder.plugin("liar", "liar").plugin("notes", "notes");
    for era in Era::ALL {
        let client = client(folder.path(), &[], era).await.unwrap();
        let resources = client.list_all_resources().await.unwrap();
        let liar_uris: Vec<&str> = resources
            .iter()
            .map(|resource| resource.uri.as_str())
            .filter(|uri| uri.starts_with("liar://"))
            .collect();
        // The repeated page is listed once, then the plugin is passed over.
        assert_eq!(
            liar_uris,
            [
                "liar://honest",
                "liar://grows",
                "liar://retyped",
                "liar://again"
            ],
            "{era:?}"
        );
        assert_eq!(resources.len(), 9, "{era:?}: the notes are all listed");

        let templates = client.list_all_resource_templates().await.unwrap();
        let liar_templates: Vec<&str> = templates
            .iter()
            .map(|template| template.uri_template.as_str())
            .filter(|uri| uri.starts_with("liar://"))
            .collect();
        assert_eq!(liar_templates, ["liar://item/{id}"], "{era:?}");

        for path in [
            "other-scheme",
            "bad-mime",
            "bad-meta",
            "empty",
            "grows",
            "retyped",
        ] {
            let uri = format!("liar://{path}");
            let error = mcp_error(
                client
                    .read_resource(ReadResourceRequestParams::new(&uri))
                    .await,
            );
            assert_eq!(error.code.0, -32603, "{era:?} {uri}: {error:?}");
            assert!(
                error.message.contains("invalid answer"),
                "{}",
                error.message
            );
        }
        let honest = client
            .read_resource(ReadResourceRequestParams::new("liar://honest"))
            .await
            .unwrap();
        assert!(matches!(&honest.contents[..],
            [ResourceContents::TextResourceContents { uri, .. }] if uri == "liar://honest"));

        let flood = client
            .complete_resource_argument("liar://item/{id}", "id", "", None)
            .await
            .unwrap();
        assert_eq!(flood.values.len(), 100, "{era:?}");
        assert_eq!(flood.has_more, Some(true));

        let note = client
            .read_resource(ReadResourceRequestParams::new("notes://notes/paths"))
            .await
            .unwrap();
        assert_eq!(note.contents.len(), 1);
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn what_a_plugin_prints_goes_to_the_log_not_the_protocol() {
    let folder = Folder::new();
    folder.plugin("liar", "liar");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    for _ in 0..3 {
        let read = server.read("liar://honest").await.unwrap();
        assert_eq!(read["result"]["contents"][0]["text"], "a lie", "{read}");
    }
    let stderr = server.stop().await.unwrap();
    let stdout_lines = stderr
        .lines()
        .filter(|line| line.contains("liar says hello on stdout") && line.contains("plugin=liar"))
        .count();
    let stderr_lines = stderr
        .lines()
        .filter(|line| {
            line.contains("liar says hello on stderr") && line.contains("stream=\"stderr\"")
        })
        .count();
    assert_eq!((stdout_lines, stderr_lines), (3, 3), "{stderr}");
}

#[tokio::test]
async fn a_call_that_spins_or_traps_fails_and_the_plugin_keeps_serving() {
    let folder = liar_and_notes();
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let started = std::time::Instant::now();
    let spin = server.read("liar://spin").await.unwrap();
    assert_eq!(spin["error"]["code"], -32603, "{spin}");
    let message = error_message(&spin);
    assert!(message.contains(SPIN_LIMIT), "{message}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the limit did not stop the call"
    );

    let panic = server.read("liar://panic").await.unwrap();
    assert_eq!(panic["error"]["code"], -32603, "{panic}");
    let message = error_message(&panic);
    assert!(message.contains("plugin liar trapped in read"), "{message}");

    for uri in ["liar://honest", "notes://notes/welcome"] {
        let read = server.read(uri).await.unwrap();
        assert!(
            read["result"]["contents"][0]["text"].is_string(),
            "{uri}: {read}"
        );
    }
    let stderr = server.stop().await.unwrap();
    assert!(
        stderr.contains("the liar panics"),
        "the panic message is logged: {stderr}"
    );
}

#[tokio::test]
async fn an_instance_serves_again_only_after_a_call_that_answered() {
    let folder = liar_and_notes();
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    // One read at a time: each is served by the instance the one before
    // left idle, and an answered error leaves it idle too.
    assert_eq!(
        server.read_text("liar://count").await,
        "read 1 of this instance"
    );
    assert_eq!(
        server.read_text("liar://count").await,
        "read 2 of this instance"
    );
    let missing = server.read("liar://nothing-here").await.unwrap();
    assert_eq!(missing["error"]["code"], -32002, "{missing}");
    assert_eq!(
        server.read_text("liar://count").await,
        "read 4 of this instance"
    );

    // The instance that trapped is gone with what it did to itself.
    let poison = server.read("liar://poison").await.unwrap();
    assert_eq!(poison["error"]["code"], -32603, "{poison}");
    let message = error_message(&poison);
    assert!(
        message.contains("plugin liar trapped in read")
            && message.contains("the liar poisons its instance"),
        "{message}"
    );
    assert_eq!(
        server.read_text("liar://count").await,
        "read 1 of this instance"
    );

    // So is one whose call was cut off at its time limit.
    let message = server.read_error("liar://spin").await;
    assert!(message.contains(SPIN_LIMIT), "{message}");
    assert_eq!(
        server.read_text("liar://count").await,
        "read 1 of this instance"
    );
    assert!(!server.read_text("notes://notes/welcome").await.is_empty());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn memory_and_stack_limits_stop_a_call_and_are_named() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest("liar", "[limits]\nmemory_mib = 64\n")
        .manifest(
            "shallow",
            "component = \"liar.wasm\"\n[limits]\nstack_kib = 64\n",
        )
        .manifest(
            "deep",
            "component = \"liar.wasm\"\n[limits]\nstack_kib = 4096\n",
        );
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let hog = server.read("liar://hog").await.unwrap();
    assert_eq!(hog["error"]["code"], -32603, "{hog}");
    let message = error_message(&hog);
    assert!(
        message.contains("plugin liar exceeded its memory limit of 64 MiB in read"),
        "{message}"
    );
    let message = server.read_error("liar://huge/1024").await;
    assert!(
        message.contains("plugin liar exceeded its memory limit of 64 MiB in read"),
        "{message}"
    );
    let message = server.read_error("liar://huge/20").await;
    assert!(
        message.contains("it returned 20971520 bytes, over the limit of 16777216"),
        "{message}"
    );
    let message = server.read_error("liar://recurse").await;
    assert!(
        message.contains("plugin liar exceeded its stack limit of 512 KiB in read"),
        "{message}"
    );
    assert_eq!(
        server.read_text("deep://recurse/10000").await,
        "depth 10000"
    );
    let message = server.read_error("shallow://recurse/10000").await;
    assert!(
        message.contains("plugin shallow exceeded its stack limit of 64 KiB in read"),
        "{message}"
    );
    let honest = server.read("liar://honest").await.unwrap();
    assert_eq!(honest["result"]["contents"][0]["text"], "a lie", "{honest}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_path_that_keeps_faulting_is_quarantined_alone() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest("liar", "[limits]\ntimeout_ms = 100\n")
        .plugin("notes", "notes");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let limit = "plugin liar exceeded its time limit of 100 ms in read";
    for _ in 0..3 {
        let spin = server.read("liar://spin").await.unwrap();
        assert!(error_message(&spin).contains(limit), "{spin}");
    }
    let (message, _) = server.read_until_quarantined("liar://spin", limit).await;
    assert!(
        message.contains("path \"spin\" of plugin liar is quarantined for another"),
        "{message}"
    );
    let honest = server.read("liar://honest").await.unwrap();
    assert_eq!(honest["result"]["contents"][0]["text"], "a lie", "{honest}");
    let stderr = server.stop().await.unwrap();
    assert!(
        stderr.contains("quarantined for 1000 ms after 3 faults in a row"),
        "{stderr}"
    );
}

/// A listing, in which the `lister` faults (unless quarantined) while the
/// others answer.
async fn list_faulting_lister(server: &mut RawServer) {
    let listing = server.request("resources/list", json!({})).await.unwrap();
    assert!(listing["result"]["resources"].is_array(), "{listing}");
}

/// Reads `lister://honest` until the answer is the refusal of the lister's
/// quarantine, and returns its message. The first quarantine, which the
/// lister's third fault started (as the log must tell), lasts one second:
/// should a read come after it on a loaded machine, and be answered, one
/// more listing faults again and must start the next quarantine, twice as
/// long.
async fn lister_refused(server: &mut RawServer) -> String {
    server.quarantine_logged(0).await;
    for faulted in 0..MOST_FAULTS_PAST_A_QUARANTINE {
        let read = server.read("lister://honest").await.unwrap();
        if read["error"].is_object() {
            return error_message(&read).to_owned();
        }
        assert_eq!(read["result"]["contents"][0]["text"], "a lie", "{read}");
        list_faulting_lister(server).await;
        server.quarantine_logged(faulted + 1).await;
    }
    server.read_error("lister://honest").await
}

#[tokio::test]
async fn a_plugin_whose_listing_keeps_faulting_is_quarantined_then_comes_back() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest(
            "lister",
            "component = \"liar.wasm\"\n[config]\nlist = \"spin\"\n[limits]\ntimeout_ms = 100\n",
        )
        .plugin("notes", "notes");
    let mut server = RawServer::start(folder.path(), &["--response-cache-mib", "0"]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    for _ in 0..3 {
        list_faulting_lister(&mut server).await;
    }
    let message = lister_refused(&mut server).await;
    assert!(
        message.contains("plugin lister is quarantined for another"),
        "{message}"
    );
    let notes = server.read("notes://notes/welcome").await.unwrap();
    assert!(
        notes["result"]["contents"][0]["text"].is_string(),
        "{notes}"
    );
    let liar = server.read("liar://honest").await.unwrap();
    assert_eq!(liar["result"]["contents"][0]["text"], "a lie", "{liar}");

    // Its quarantine ends: after a second, or later if the lister faulted
    // again above.
    let deadline = tokio::time::Instant::now() + EXCHANGE_TIMEOUT;
    let back = loop {
        let read = server.read("lister://honest").await.unwrap();
        if read["error"].is_null() {
            break read;
        }
        assert!(
            error_message(&read).contains("plugin lister is quarantined for another"),
            "{read}"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lister is still quarantined: {read}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(back["result"]["contents"][0]["text"], "a lie", "{back}");
    let stderr = server.stop().await.unwrap();
    assert!(
        stderr.contains("plugin lister exceeded its time limit of 100 ms in list"),
        "{stderr}"
    );
}

#[tokio::test]
async fn calls_beyond_the_concurrency_limit_wait_their_turn() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest("liar", "[limits]\nconcurrent_calls = 1\n");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let started = std::time::Instant::now();
    let first = server
        .send("resources/read", json!({ "uri": "liar://sleep" }))
        .await
        .unwrap();
    let second = server
        .send("resources/read", json!({ "uri": "liar://sleep" }))
        .await
        .unwrap();
    for id in [first, second] {
        let response = server.response(id).await.unwrap();
        assert_eq!(
            response["result"]["contents"][0]["uri"], "liar://sleep",
            "{response}"
        );
    }
    // Two 300 ms calls through one slot cannot finish sooner than one after
    // the other.
    assert!(started.elapsed() >= std::time::Duration::from_millis(600));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn cpu_time_counts_only_the_plugins_own_running_code() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest("liar", "[limits]\ncpu_ms = 200\ntimeout_ms = 5000\n")
        .plugin("sleeper", "liar")
        .manifest("sleeper", "[limits]\ncpu_ms = 50\n");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let message = server.read_error("liar://spin").await;
    assert!(
        message.contains("plugin liar exceeded its CPU time limit of 200 ms in read"),
        "{message}"
    );
    let slept = server.read("sleeper://sleep").await.unwrap();
    assert_eq!(
        slept["result"]["contents"][0]["uri"], "sleeper://sleep",
        "{slept}"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_flood_of_output_is_capped_and_never_touches_the_protocol() {
    let folder = Folder::new();
    folder.plugin("liar", "liar");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    // 10 MiB on each stream; every line of stdout must still be JSON-RPC.
    let flood = server.read("liar://flood").await.unwrap();
    assert_eq!(
        flood["result"]["contents"][0]["uri"], "liar://flood",
        "{flood}"
    );
    let honest = server.read("liar://honest").await.unwrap();
    assert_eq!(honest["result"]["contents"][0]["text"], "a lie");
    let stderr = server.stop().await.unwrap();
    let logged = stderr
        .lines()
        .filter(|line| line.contains("xxxxxxxx"))
        .count();
    assert!(logged <= 2 * 65, "{logged} flood lines reached the log");
    assert!(
        stderr.contains("dropped 10420224 bytes of output past the 65536-byte limit of one call"),
        "{}",
        &stderr[stderr.len().saturating_sub(2000)..]
    );
}

#[tokio::test]
async fn a_fresh_output_stream_per_write_buys_no_fresh_budget() {
    let folder = Folder::new();
    folder.plugin("liar", "liar");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    // 10 MiB on each stream, each 1 KiB line through a stream handle of
    // its own.
    let flood = server.read("liar://flood-streams").await.unwrap();
    assert_eq!(
        flood["result"]["contents"][0]["uri"], "liar://flood-streams",
        "{flood}"
    );
    let stderr = server.stop().await.unwrap();
    let logged = stderr
        .lines()
        .filter(|line| line.contains("yyyyyyyy"))
        .count();
    assert!(logged <= 2 * 65, "{logged} flood lines reached the log");
    assert_eq!(
        stderr
            .matches("dropped 10420224 bytes of output past the 65536-byte limit of one call")
            .count(),
        2,
        "{}",
        &stderr[stderr.len().saturating_sub(2000)..]
    );
}

#[tokio::test]
async fn a_page_with_an_endless_cursor_is_passed_over() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest("liar", "[config]\nlist = \"long-cursor\"\n")
        .plugin("notes", "notes");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let mut uris = Vec::new();
    let mut params = json!({});
    loop {
        let page = server.request("resources/list", params).await.unwrap();
        for resource in page["result"]["resources"].as_array().unwrap() {
            uris.push(resource["uri"].as_str().unwrap().to_owned());
        }
        match page["result"]["nextCursor"].as_str() {
            Some(cursor) => {
                assert!(cursor.len() < 4096, "{} bytes", cursor.len());
                params = json!({ "cursor": cursor });
            }
            None => break,
        }
    }
    assert!(
        uris.iter().all(|uri| uri.starts_with("notes://")) && !uris.is_empty(),
        "{uris:?}"
    );
    let stderr = server.stop().await.unwrap();
    assert!(
        stderr.contains(
            "listing passed over a plugin whose page is refused: its cursor is 100000 bytes long, over the limit of 65536"
        ),
        "{stderr}"
    );
}
