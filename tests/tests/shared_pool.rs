//! Attacks on the instance pool every plugin of an engine draws from: a
//! component that declares hundreds of memories, thousands of tables or
//! core instances (each instance of it would take slots the other plugins'
//! instances need), and plugins whose shares together are more than the
//! pool holds. The hog fails itself, naming the limit; every other plugin
//! keeps starting instances; a plugin refused for want of room is tried
//! again by itself, and `/readyz` says so meanwhile.

use std::time::Duration;

use resmux_tests::{
    Folder, RawServer, a_plugin_added_later_serves, free_address, http_get, notes_still_answer,
};

const PATIENCE: Duration = Duration::from_secs(60);

/// A core module: the preamble, then `sections`.
fn core_module(sections: &[u8]) -> Vec<u8> {
    [b"\0asm\x01\0\0\0".as_slice(), sections].concat()
}

/// `value` as an unsigned LEB128.
fn leb(mut value: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            bytes.push(byte);
            return bytes;
        }
        bytes.push(byte | 0x80);
    }
}

/// A component that instantiates `module` `count` times (wasmparser takes
/// up to 1,000), as an attacker packs many memories or tables into one
/// plugin: each instance of it would hold `count` of them.
fn component_instantiating(module: &[u8], count: usize) -> Vec<u8> {
    let mut component = b"\0asm\x0d\x00\x01\x00".to_vec();
    component.push(1);
    component.extend(leb(module.len()));
    component.extend(module);
    let mut instances = leb(count);
    for _ in 0..count {
        // `(instantiate 0)` with no arguments.
        instances.extend([0x00, 0x00, 0x00]);
    }
    component.push(2);
    component.extend(leb(instances.len()));
    component.extend(instances);
    component
}

/// One memory of one page: `(module (memory 1))`.
const ONE_MEMORY: &[u8] = &[5, 3, 1, 0x00, 1];
/// Four memories of one page, as many as a module may define.
const FOUR_MEMORIES: &[u8] = &[5, 9, 4, 0x00, 1, 0x00, 1, 0x00, 1, 0x00, 1];
/// Four empty `funcref` tables, as many as a module may define.
const FOUR_TABLES: &[u8] = &[
    4, 13, 4, 0x70, 0x00, 0, 0x70, 0x00, 0, 0x70, 0x00, 0, 0x70, 0x00, 0,
];

#[tokio::test]
async fn a_component_that_would_take_the_pool_is_refused_naming_the_limit_and_the_others_serve() {
    let hogs = [
        (
            "pages",
            component_instantiating(&core_module(ONE_MEMORY), 999),
            "contains 999 core module instances, which exceeds the configured maximum of 64",
        ),
        (
            "memories",
            component_instantiating(&core_module(FOUR_MEMORIES), 10),
            "contains 40 Wasm linear memories, which exceeds the configured maximum of 8",
        ),
        (
            "tables",
            component_instantiating(&core_module(FOUR_TABLES), 10),
            "contains 40 tables, which exceeds the configured maximum of 16",
        ),
        (
            "instances",
            component_instantiating(&core_module(&[]), 1000),
            "contains 1000 core module instances, which exceeds the configured maximum of 64",
        ),
    ];
    let folder = Folder::new();
    folder.plugin("notes", "notes");
    for (name, bytes, _) in &hogs {
        folder.file(&format!("{name}.wasm"), bytes);
    }
    let mut server = RawServer::start(folder.path(), &[]).unwrap();
    server.initialize("2025-06-18").await.unwrap();
    for (name, _, limit) in &hogs {
        let log = server
            .wait_for_log(&format!("{name}.wasm"), 1, PATIENCE)
            .await;
        let refusal = log
            .lines()
            .find(|line| {
                line.contains("plugin not loaded") && line.contains(&format!("{name}.wasm"))
            })
            .unwrap_or_else(|| panic!("{name}.wasm was not refused: {log}"));
        assert!(refusal.contains(limit), "{name}: {refusal}");
        let checked = resmux_tests::resmux(&[
            "check",
            folder.path().join(format!("{name}.wasm")).to_str().unwrap(),
        ]);
        assert!(!checked.status.success(), "check passed {name}.wasm");
        let said = String::from_utf8_lossy(&checked.stderr);
        assert!(said.contains(limit), "check of {name}: {said}");
    }
    notes_still_answer(&mut server).await;
    // A plugin added now starts its instances: the pool is whole.
    a_plugin_added_later_serves(&mut server, &folder).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_plugin_whose_share_does_not_fit_yet_is_retried_and_readyz_says_so() {
    // Each liar reserves 501 instances' worth of the pool (one memory
    // each): the 1,000 memory slots hold one such share, not two.
    let folder = Folder::new();
    folder
        .plugin("notes", "notes")
        .plugin("first", "liar")
        .manifest("first", "[limits]\nconcurrent_calls = 501\n")
        .plugin("second", "liar")
        .manifest("second", "[limits]\nconcurrent_calls = 501\n");
    let metrics = free_address();
    let mut server = RawServer::start(folder.path(), &["--metrics", &metrics]).unwrap();
    server.initialize("2025-06-18").await.unwrap();
    let log = server
        .wait_for_log("yet (tried again in 1 s)", 1, PATIENCE)
        .await;
    let refusal = log
        .lines()
        .find(|line| line.contains("yet (tried again in 1 s)"))
        .unwrap()
        .to_owned();
    assert!(
        refusal.contains(
            "its share of the instance pool (501 concurrent_calls × 1 instances (with their stacks), 1 memories"
        ) && refusal.contains("memories") && refusal.contains("the pool has unreserved of its 1000 instances"),
        "{refusal}"
    );
    let (refused, serving) = if refusal.contains("second.wasm") {
        ("second", "first")
    } else {
        ("first", "second")
    };
    // Tried again by itself, with nothing changed in the folder, and
    // refused again while the other holds its share.
    server
        .wait_for_log("yet (tried again in 2 s)", 1, PATIENCE)
        .await;
    let (status, ready) = http_get(&metrics, "/readyz", &[]).unwrap();
    assert_eq!(status, 200, "{ready}");
    assert!(
        ready.starts_with("ready\n")
            && ready.contains(&format!(
                "retrying {}",
                folder.path().join(format!("{refused}.wasm")).display()
            )),
        "{ready}"
    );
    assert!(ready.contains("is more than the"), "{ready}");
    notes_still_answer(&mut server).await;
    assert_eq!(
        server.read_text(&format!("{serving}://honest")).await,
        "a lie",
        "the plugin holding its share serves"
    );
    // The other gives its share back: the refused one loads at its next
    // try, and /readyz no longer names it.
    std::fs::remove_file(folder.path().join(format!("{serving}.wasm"))).unwrap();
    std::fs::remove_file(folder.path().join(format!("{serving}.toml"))).unwrap();
    server
        .wait_for_log(&format!("plugin added scheme=\"{refused}\""), 1, PATIENCE)
        .await;
    assert_eq!(
        server.read_text(&format!("{refused}://honest")).await,
        "a lie"
    );
    let (_, ready) = http_get(&metrics, "/readyz", &[]).unwrap();
    assert_eq!(ready, "ready\n");
    server.stop().await.unwrap();
}
