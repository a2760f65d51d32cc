//! The sandbox's second round, tried as an attacker would: a grant redirected
//! on disk after load, a plugin hoarding host descriptors, endless error
//! text, a FIFO that stalls file operations, and a poisoned compile cache.
//! Each test checks the host-side state, that another plugin keeps
//! answering, and the error that names the limit.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use resmux_tests::{
    Folder, RawServer, component, error_message, liar_granted_data, mkfifo, resmux,
};
use serde_json::json;

fn open_descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[tokio::test]
async fn a_grant_swapped_for_a_symlink_after_load_still_shows_the_granted_directory() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest(
            "liar",
            "[[files]]\nhost = \"data\"\nguest = \"/data\"\naccess = \"read-write\"\n[[files]]\nhost = \"data/config\"\nguest = \"/config\"\n",
        )
        .file("data/config/app.toml", b"port = 1");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    assert_eq!(
        server.read_text("liar://open//config/app.toml").await,
        "ok: 8 bytes"
    );
    // What the plugin could do through its read-write grant: move the
    // read-only directory away and put a link to /etc in its place.
    let data = folder.path().join("data");
    std::fs::rename(data.join("config"), data.join("moved")).unwrap();
    std::os::unix::fs::symlink("../../../../../../../../etc", data.join("config")).unwrap();
    assert!(data.join("config/passwd").exists(), "the link reaches /etc");

    for escape in ["liar://open//config/passwd", "liar://open//config/shadow"] {
        let outcome = server.read_text(escape).await;
        assert_eq!(outcome, "error: NotFound", "{escape} escaped");
    }
    assert_eq!(
        server.read_text("liar://open//config/app.toml").await,
        "ok: 8 bytes",
        "the grant still shows the directory it was resolved to"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_single_file_swapped_for_a_symlink_keeps_showing_the_granted_file() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest(
            "liar",
            "[[files]]\nhost = \"etc/app.toml\"\nguest = \"/config/app.toml\"\n",
        )
        .file("etc/app.toml", b"port = 1");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let app = folder.path().join("etc/app.toml");
    std::fs::remove_file(&app).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &app).unwrap();
    assert_eq!(
        server.read_text("liar://open//config/app.toml").await,
        "ok: 8 bytes",
        "the last good version, not /etc/passwd"
    );
    let stderr = server.stop().await.unwrap();
    assert!(
        stderr.contains("still showing the last good version")
            && stderr.contains("without following links"),
        "{stderr}"
    );
}

#[tokio::test]
async fn an_instance_holding_files_between_calls_is_not_kept_and_its_descriptors_go() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest("liar", "[[files]]\nhost = \"data\"\nguest = \"/data\"\n")
        .file("data/x.txt", b"x");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    // An instance that holds only its grant and its standard streams (it
    // printed) is kept: the next call finds it.
    assert_eq!(server.read_text("liar://honest").await, "a lie");
    assert_eq!(
        server.read_text("liar://count").await,
        "read 2 of this instance"
    );
    let before = open_descriptors(server.pid());
    // One that keeps files open is dropped with them.
    assert_eq!(
        server.read_text("liar://keep-open/20//data/x.txt").await,
        "20 files kept open"
    );
    assert_eq!(
        server.read_text("liar://count").await,
        "read 1 of this instance"
    );
    let after = open_descriptors(server.pid());
    assert!(
        after <= before + 4,
        "the host holds {after} descriptors after the calls, {before} before"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_plugin_hoarding_files_hits_its_handle_limit_and_the_host_keeps_its_descriptors() {
    let folder = liar_granted_data("");
    folder.file("data/x.txt", b"x");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let before = open_descriptors(server.pid());

    let message = server.read_error("liar://hoard/20000//data/x.txt").await;
    assert!(
        message.contains(
            "plugin liar exceeded its limit of 256 handles (open files, sockets, streams, HTTP fields) in read"
        ),
        "{message}"
    );
    let notes = server.read("notes://notes/welcome").await.unwrap();
    assert!(
        notes["result"]["contents"][0]["text"].is_string(),
        "{notes}"
    );
    let after = open_descriptors(server.pid());
    assert!(
        after <= before + 4,
        "the host holds {after} descriptors after the call, {before} before"
    );
    server.stop().await.unwrap();
}

#[tokio::test]
async fn endless_error_text_is_cut_with_a_marker() {
    let folder = Folder::new();
    folder.plugin("liar", "liar").plugin("notes", "notes");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let message = server.read_error("liar://long-error/67108864").await;
    assert!(message.len() < 4096 + 200, "{} bytes", message.len());
    assert!(
        message.ends_with("... [67104768 more bytes cut by resmux]"),
        "{}",
        &message[message.len() - 100..]
    );
    let notes = server.read("notes://notes/welcome").await.unwrap();
    assert!(
        notes["result"]["contents"][0]["text"].is_string(),
        "{notes}"
    );
    let stderr = server.stop().await.unwrap();
    assert!(
        stderr.len() < 1024 * 1024,
        "the log grew by {} bytes",
        stderr.len()
    );
}

#[tokio::test]
async fn calls_stuck_on_a_fifo_fail_at_their_timeout_and_block_nothing_else() {
    let folder = liar_granted_data("[limits]\ntimeout_ms = 1000\n");
    folder.file("data/.keep", b"");
    let fifo = folder.path().join("data/pipe");
    mkfifo(&fifo);
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let mut stuck = Vec::new();
    for _ in 0..8 {
        let id = server
            .send("resources/read", json!({ "uri": "liar://open//data/pipe" }))
            .await
            .unwrap();
        stuck.push(id);
    }
    for _ in 0..3 {
        let notes = server.read("notes://notes/welcome").await.unwrap();
        assert!(
            notes["result"]["contents"][0]["text"].is_string(),
            "{notes}"
        );
    }
    for id in stuck {
        let response = server.response(id).await.unwrap();
        let message = error_message(&response);
        assert!(
            message.contains("plugin liar exceeded its time limit of 1000 ms in read"),
            "{message}"
        );
    }
    // Its 8 call slots stay with the 8 stuck threads, and the plugin's
    // calls are refused at once, saying so.
    let wedged = server.read("liar://honest").await.unwrap();
    assert!(
        error_message(&wedged).contains(
            "plugin liar is wedged: 8 of its 8 call slots are held by calls stuck past their time limit of 1000 ms"
        ),
        "{wedged}"
    );
    // A writer frees the stuck threads, and with them the plugin's slots:
    // opening the other end is what their opens wait for (writing would
    // race with readers that are done already, and fail with EPIPE).
    let writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    drop(writer);
    let mut honest = server.read("liar://honest").await.unwrap();
    for _ in 0..50 {
        if honest["result"].is_object() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        honest = server.read("liar://honest").await.unwrap();
    }
    assert_eq!(honest["result"]["contents"][0]["text"], "a lie", "{honest}");
    server.stop().await.unwrap();
}

fn inspect(component: &Path, cache: &Path, key: &Path) -> std::process::Output {
    resmux(&[
        "inspect",
        component.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
        "--cache-key",
        key.to_str().unwrap(),
    ])
}

#[test]
fn a_poisoned_compile_cache_entry_is_recompiled_never_run() {
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("cache");
    let key = scratch.path().join("state/cache-key");
    let notes = component("notes");
    let first = inspect(&notes, &cache, &key);
    assert!(first.status.success(), "{first:?}");
    assert!(String::from_utf8_lossy(&first.stdout).contains("compiled   Compiled"));
    let second = inspect(&notes, &cache, &key);
    assert!(String::from_utf8_lossy(&second.stdout).contains("compiled   Cached"));
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // Overwrite the machine code with int3 (0xCC) after the tag and header.
    let entry = std::fs::read_dir(&cache)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|ext| ext == "cwasm"))
        .unwrap();
    let mut bytes = std::fs::read(&entry).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle..middle + 4096].fill(0xCC);
    std::fs::write(&entry, &bytes).unwrap();
    let poisoned = inspect(&notes, &cache, &key);
    assert!(poisoned.status.success(), "{poisoned:?}");
    assert!(String::from_utf8_lossy(&poisoned.stdout).contains("compiled   Compiled"));
    let stderr = String::from_utf8_lossy(&poisoned.stderr);
    assert!(
        stderr.contains("its tag does not match: it was not written by resmux"),
        "{stderr}"
    );

    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let open = inspect(&notes, &cache, &key);
    assert!(!open.status.success());
    let stderr = String::from_utf8_lossy(&open.stderr);
    assert!(
        stderr.contains("refusing compile cache directory")
            && stderr.contains("its mode 777 lets others change it"),
        "{stderr}"
    );
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let shared_key = inspect(&notes, &cache, &key);
    assert!(!shared_key.status.success());
    assert!(
        String::from_utf8_lossy(&shared_key.stderr)
            .contains("must belong to resmux's user with mode 600"),
        "{shared_key:?}"
    );
}

/// The process's peak resident memory so far, in bytes.
fn peak_resident(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().strip_suffix("kB"))
        .and_then(|value| value.trim().parse().ok())
        .expect("VmHWM in /proc/PID/status");
    kib * 1024
}

#[tokio::test]
async fn one_call_costs_the_host_no_more_memory_than_its_limits_allow() {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest("liar", "[limits]\nmemory_mib = 64\n")
        .plugin("notes", "notes");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let before = peak_resident(server.pid());
    // An answer of 40 MiB (over the 16 MiB read limit, within the memory
    // limit), then one of 1 GiB (over the memory limit).
    let huge = server.read("liar://huge/40").await.unwrap();
    assert!(
        error_message(&huge).contains("over the limit of 16777216"),
        "{huge}"
    );
    let hog = server.read("liar://hog").await.unwrap();
    assert!(
        error_message(&hog).contains("exceeded its memory limit of 64 MiB"),
        "{hog}"
    );
    let grown = peak_resident(server.pid()).saturating_sub(before);
    // docs/security.md: 2 x memory_mib + max_handles x 64 KiB + 128 KiB + 3 x max_read_bytes.
    let bound = (2 * 64 + 256 / 16 + 3 * 16) * 1024 * 1024 + 128 * 1024;
    assert!(
        grown <= bound,
        "the host's peak memory grew by {grown} bytes, over the documented {bound}"
    );
    let notes = server.read("notes://notes/welcome").await.unwrap();
    assert!(
        notes["result"]["contents"][0]["text"].is_string(),
        "{notes}"
    );
    server.stop().await.unwrap();
}
