//! A start on a cold compile cache, against the real binary over stdio:
//! `initialize` is answered while a component still compiles, the plugin
//! arrives later with `list_changed`, and a read sent meanwhile waits for
//! it; `resmux compile` fills a cache ahead of time so that a start compiles
//! nothing, and names the component that does not compile.

use std::time::Duration;

use resmux_tests::{Folder, RawServer, notes_and_fixtures, resmux};

/// Runs `resmux compile` into the compile cache `cache`: whether it
/// succeeded, and what it printed on stdout and on stderr.
fn compile(cache: &str, paths: &[&str]) -> (bool, String, String) {
    let args: Vec<&str> = ["compile", "--cache-dir", cache]
        .into_iter()
        .chain(paths.iter().copied())
        .collect();
    let output = resmux(&args);
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_cold_start_answers_at_once_and_a_compiling_plugin_arrives_later() {
    // The JavaScript component takes seconds to compile afresh; notes is
    // compiled ahead of time.
    let folder = Folder::new();
    folder.plugin("notes", "notes").plugin("catalog", "catalog");
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path().to_str().unwrap();
    let notes = folder.path().join("notes.wasm");
    let (compiled, _, errors) = compile(cache, &[notes.to_str().unwrap()]);
    assert!(compiled, "{errors}");
    let mut server =
        RawServer::start_with_env(folder.path(), &[], &[("RESMUX_CACHE_DIR", cache)]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let apples = server.send_read("catalog://items/apples").await.unwrap();

    let first = server.resource_uris().await.unwrap();
    assert!(
        first.iter().any(|uri| uri.starts_with("notes://")),
        "{first:?}"
    );
    assert!(
        !first.iter().any(|uri| uri.starts_with("catalog://")),
        "the JavaScript component was still compiling: {first:?}"
    );

    server
        .notification("notifications/resources/list_changed", |_| true)
        .await
        .unwrap();
    let later = server.resource_uris().await.unwrap();
    assert!(
        later.contains(&"catalog://items/apples".to_owned()),
        "{later:?}"
    );
    // The read sent before the plugin arrived waited for it.
    let read = server.response(apples).await.unwrap();
    let text = read["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{read}"));
    assert!(text.contains("\"title\":\"Apples\""), "{text}");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_read_waiting_for_a_plugin_that_fails_to_load_is_told_why() {
    let folder = Folder::new();
    folder
        .plugin("notes", "notes")
        .file("broken.wasm", b"\0asm, but not a component");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let message = server.read_error("broken://anything").await;
    let file = folder.path().join("broken.wasm").display().to_string();
    assert!(
        message.contains("the plugin for scheme \"broken\" did not load")
            && message.contains(&file),
        "{message}"
    );
    assert!(!server.read_text("notes://notes/welcome").await.is_empty());
    server.stop().await.unwrap();
}

#[tokio::test]
async fn compile_fills_a_cache_so_that_a_start_lists_every_plugin_at_once() {
    let folder = notes_and_fixtures();
    folder.plugin("units", "units");
    let plugins = folder.path().to_str().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let cache = cache.path().to_str().unwrap();

    let (compiled, out, errors) = compile(cache, &[plugins]);
    assert!(compiled, "{errors}");
    for name in ["conformance.wasm", "notes.wasm", "units.wasm"] {
        let line = out
            .lines()
            .find(|line| line.ends_with(name))
            .unwrap_or_else(|| panic!("{name} not in {out}"));
        assert!(line.starts_with("compiled in "), "{out}");
    }
    let (compiled, again, errors) = compile(cache, &[plugins]);
    assert!(compiled, "{errors}");
    assert_eq!(
        again
            .lines()
            .filter(|line| line.starts_with("already in the cache"))
            .count(),
        3,
        "{again}"
    );

    let mut server =
        RawServer::start_with_env(folder.path(), &[], &[("RESMUX_CACHE_DIR", cache)]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let first = server.resource_uris().await.unwrap();
    for scheme in ["notes://", "test://", "units://"] {
        assert!(
            first.iter().any(|uri| uri.starts_with(scheme)),
            "{scheme} not in {first:?}"
        );
    }
    let log = server
        .wait_for_log("plugin loaded", 3, Duration::from_secs(5))
        .await;
    assert_eq!(log.matches("origin=Cached").count(), 3, "{log}");
    server.stop().await.unwrap();

    folder.file("broken.wasm", b"\0asm, but not a component");
    let (compiled, out, errors) = compile(cache, &[plugins]);
    assert!(!compiled, "{out}");
    let broken = folder.path().join("broken.wasm");
    let broken = broken.to_str().unwrap();
    assert!(
        errors.contains(&format!("resmux: {broken} not ready: cannot load {broken}")),
        "{errors}"
    );
    assert!(
        errors.contains(&format!("1 of 4 plugin(s) not ready: {broken}")),
        "{errors}"
    );
    assert_eq!(
        out.lines()
            .filter(|line| line.starts_with("already in the cache"))
            .count(),
        3,
        "{out}"
    );
}
