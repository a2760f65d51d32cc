//! The two tiers of compiled code, tried from outside: a plugin with no
//! compiled code serves on Winch's at once, moves to Cranelift's under
//! load without a failed read, and starts on Cranelift's from the cache
//! next time; a component Winch refuses serves on Cranelift's, said once.

use resmux_tests::{
    EXCHANGE_TIMEOUT, Folder, RawServer, component, free_address, sample, sample_in, scrape,
    wait_for_sample,
};

const UNITS_URI: &str = "units://convert/100/celsius/fahrenheit";
const NOTES_URI: &str = "notes://notes/welcome";

/// The sample of `plugin`'s tier `tier`: 1 while it runs on that code.
fn tier(plugin: &str, tier: &str) -> String {
    format!("resmux_plugin_tier{{plugin=\"{plugin}\",tier=\"{tier}\"}}")
}

/// How long `plugin`'s code of `tier` took to compile.
fn compile_seconds(plugin: &str, tier: &str) -> String {
    format!("resmux_plugin_compile_seconds{{plugin=\"{plugin}\",tier=\"{tier}\"}}")
}

/// The log of `server`, stopped: after its last answer, only the news of a
/// plugin mounted meanwhile may come.
async fn stopped(server: RawServer) -> String {
    let (last, log) = server.finish().await.unwrap();
    assert!(
        last.iter()
            .all(|message| message["method"] == "notifications/resources/list_changed"),
        "{last:?}"
    );
    log
}

/// A server of `folder` whose compile cache is `cache` (empty at first),
/// with its metrics at `metrics`.
fn start(folder: &Folder, cache: &std::path::Path, metrics: &str, more: &[&str]) -> RawServer {
    let mut args = vec!["--metrics", metrics];
    args.extend_from_slice(more);
    RawServer::start_with_env(
        folder.path(),
        &args,
        &[("RESMUX_CACHE_DIR", cache.to_str().unwrap())],
    )
    .unwrap()
}

#[tokio::test]
async fn a_plugin_serves_on_baseline_code_at_once_and_moves_up_under_load_without_a_failed_read() {
    let folder = Folder::new();
    folder.plugin("units", "units");
    let cache = tempfile::tempdir().unwrap();
    let metrics = free_address();
    let mut server = start(&folder, cache.path(), &metrics, &[]);
    server.initialize("2025-11-25").await.unwrap();

    // The first read waits for the plugin, then runs on Winch's code:
    // Cranelift's takes longer to compile than the read to answer.
    let first = server.read_text(UNITS_URI).await;
    assert!(first.contains("212"), "{first}");
    wait_for_sample(
        &metrics,
        &tier("units", "optimized"),
        "units on Winch's code",
        |value| value == 0.0,
    )
    .await;
    let exposition = scrape(&metrics);
    let on_baseline = sample_in(&exposition, &tier("units", "baseline")).unwrap()
        + sample_in(&exposition, &tier("units", "optimizing")).unwrap();
    assert_eq!(on_baseline, 1.0, "{exposition}");
    assert!(sample_in(&exposition, &compile_seconds("units", "baseline")).unwrap() > 0.0);

    // Two reads in flight at all times, until the plugin has moved, and
    // as many again after: every one answers, with the same text.
    let deadline = tokio::time::Instant::now() + EXCHANGE_TIMEOUT * 4;
    let (mut before, mut after) = (0, 0);
    while after < 200 {
        let ids = [
            server.send_read(UNITS_URI).await.unwrap(),
            server.send_read(UNITS_URI).await.unwrap(),
        ];
        for id in ids {
            let answer = server.response(id).await.unwrap();
            let text = answer["result"]["contents"][0]["text"].as_str();
            assert_eq!(text, Some(first.as_str()), "a read failed: {answer}");
        }
        if after > 0 || sample(&metrics, &tier("units", "optimized")) == Some(1.0) {
            after += 2;
        } else {
            before += 2;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "units did not move to optimized code under load: {}",
            scrape(&metrics)
        );
    }
    assert!(before > 0, "no read ran on the baseline code");
    let log = server
        .wait_for_log("plugin moved to optimized code", 1, EXCHANGE_TIMEOUT)
        .await;
    assert!(log.contains("tier=\"baseline\""), "{log}");
    assert!(sample(&metrics, &compile_seconds("units", "optimized")).unwrap() > 0.0);
    assert_eq!(sample(&metrics, &tier("units", "baseline")), Some(0.0));
    server.stop().await.unwrap();

    // Both tiers are cached: the next start loads the optimized code.
    let metrics = free_address();
    let mut again = start(&folder, cache.path(), &metrics, &[]);
    again.initialize("2025-11-25").await.unwrap();
    assert_eq!(again.read_text(UNITS_URI).await, first);
    assert_eq!(sample(&metrics, &tier("units", "optimized")), Some(1.0));
    let log = again.stop().await.unwrap();
    let loaded = log
        .lines()
        .find(|line| line.contains("plugin loaded"))
        .unwrap();
    assert!(
        loaded.contains("origin=Cached") && loaded.contains("tier=\"optimized\""),
        "{loaded}"
    );
    assert!(!log.contains("moved to optimized"), "{log}");
}

#[tokio::test]
async fn a_server_held_on_the_baseline_tier_answers_as_the_optimized_one_does() {
    let folder = Folder::new();
    folder.plugin("units", "units").plugin("notes", "notes");
    let cache = tempfile::tempdir().unwrap();
    let mut answers = Vec::new();
    for tiers in ["baseline", "optimized"] {
        let metrics = free_address();
        let mut server = start(&folder, cache.path(), &metrics, &["--tiers", tiers]);
        server.initialize("2025-11-25").await.unwrap();
        let read = [
            server.read_text(UNITS_URI).await,
            server.read_text(NOTES_URI).await,
            server.read_error("units://convert/1/mile/kilogram").await,
        ];
        for plugin in ["units", "notes"] {
            wait_for_sample(&metrics, &tier(plugin, tiers), tiers, |value| value == 1.0).await;
        }
        let log = stopped(server).await;
        assert!(!log.contains("moved to optimized"), "{log}");
        answers.push(read);
    }
    assert_eq!(answers[0], answers[1]);
}

/// `(module (func (return_call 0)))`: a function of the tail-call
/// proposal, which Cranelift compiles and Winch does not.
const TAIL_CALL_MODULE: &[u8] = &[
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // preamble
    0x01, 0x04, 0x01, 0x60, 0x00, 0x00, // type 0: [] -> []
    0x03, 0x02, 0x01, 0x00, // func 0 of type 0
    0x0a, 0x06, 0x01, 0x04, 0x00, 0x12, 0x00, 0x0b, // return_call 0
];

/// The `notes` component with one more core module, never instantiated,
/// that only Cranelift compiles: as a toolchain that emits tail calls
/// would make it.
fn notes_with_a_tail_call() -> Vec<u8> {
    let mut bytes = std::fs::read(component("notes")).unwrap();
    bytes.push(0x01); // a core module section
    assert!(TAIL_CALL_MODULE.len() < 0x80);
    bytes.push(TAIL_CALL_MODULE.len() as u8);
    bytes.extend_from_slice(TAIL_CALL_MODULE);
    bytes
}

#[tokio::test]
async fn a_component_the_baseline_compiler_refuses_serves_on_cranelift_code_said_once() {
    let folder = Folder::new();
    folder
        .file("tail.wasm", &notes_with_a_tail_call())
        .manifest("again", "component = \"tail.wasm\"\n");
    let cache = tempfile::tempdir().unwrap();
    let metrics = free_address();
    let mut server = start(&folder, cache.path(), &metrics, &[]);
    server.initialize("2025-11-25").await.unwrap();
    for scheme in ["tail", "again"] {
        let text = server
            .read_text(&NOTES_URI.replace("notes://", &format!("{scheme}://")))
            .await;
        assert!(text.contains("Welcome"), "{text}");
        assert_eq!(sample(&metrics, &tier(scheme, "optimized")), Some(1.0));
    }
    let log = stopped(server).await;
    let refusals: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("the baseline compiler cannot compile this component"))
        .collect();
    assert_eq!(refusals.len(), 1, "{log}");
    assert!(refusals[0].contains("tail call"), "{}", refusals[0]);
    assert_eq!(log.matches("tier=\"optimized\"").count(), 2, "{log}");
    assert!(!log.contains("moved to optimized"), "{log}");
}
