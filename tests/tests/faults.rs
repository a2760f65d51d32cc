//! Faults around a serving resmux: an audit log that cannot be written, is
//! moved away or is never read (a FIFO); a compile cache that cannot be
//! made, on a full or read-only disk, or left behind by a resmux killed
//! while compiling; a plugin folder removed, put back and replaced by a
//! symlink while serving; SIGTERM with requests in flight and a plugin
//! stuck on a FIFO.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use resmux_tests::{
    Folder, RawServer, digest_of, error_message, free_address, hold_fifo_unread, liar_granted_data,
    mkfifo, resmux_bin, sample, wait_for_sample,
};
use serde_json::json;

const NOTE: &str = "notes://notes/welcome";
const PATIENCE: Duration = Duration::from_secs(30);

/// `notes`, pinned, so that it may be served locked.
fn pinned_notes() -> Folder {
    let folder = Folder::new();
    folder.plugin("notes", "notes");
    let digest = digest_of(&folder.path().join("notes.wasm"));
    folder.manifest("notes", &format!("sha256 = \"{digest}\"\n"));
    folder
}

/// `/dev/full` fails every write with ENOSPC, as a full disk does, even
/// for root: an audit log there can be opened and never written.
#[tokio::test]
async fn an_audit_log_that_cannot_be_written_is_seen_and_refuses_requests_when_locked() {
    let folder = pinned_notes();

    let mut open = RawServer::start(folder.path(), &["--audit-log", "/dev/full"]).unwrap();
    open.initialize("2025-11-25").await.unwrap();
    note_served(&mut open).await;
    note_served(&mut open).await;
    let failure = "cannot write the audit log /dev/full: No space left on device (os error 28); \
                   requests are served unaudited until it can be written";
    let log = open.wait_for_log(failure, 1, PATIENCE).await;
    let stderr = open.stop().await.unwrap();
    assert_eq!(
        stderr.matches("cannot write the audit log").count(),
        1,
        "{log}"
    );

    let mut locked =
        RawServer::start(folder.path(), &["--audit-log", "/dev/full", "--locked"]).unwrap();
    locked.initialize("2025-11-25").await.unwrap();
    let refusal = "refused: the audit log cannot be written, and locked mode serves nothing \
                   unaudited: No space left on device (os error 28)";
    let read = locked.read(NOTE).await.unwrap();
    assert_eq!(error_message(&read), refusal, "{read}");
    assert!(read.get("result").is_none(), "{read}");
    let subscribed = locked
        .request("resources/subscribe", json!({ "uri": NOTE }))
        .await
        .unwrap();
    assert_eq!(error_message(&subscribed), refusal, "{subscribed}");
    let called = locked
        .request(
            "tools/call",
            json!({ "name": "read_resource", "arguments": { "uri": NOTE } }),
        )
        .await
        .unwrap();
    assert_eq!(called["result"]["isError"], json!(true), "{called}");
    assert_eq!(
        called["result"]["content"][0]["text"],
        json!(refusal),
        "{called}"
    );
    // What needs no audit line still answers.
    let listed = locked.request("resources/list", json!({})).await.unwrap();
    assert!(
        listed["result"]["resources"]
            .as_array()
            .is_some_and(|list| !list.is_empty()),
        "{listed}"
    );
    locked
        .wait_for_log(
            "requests are refused until it can be written (locked mode)",
            1,
            PATIENCE,
        )
        .await;
    locked.stop().await.unwrap();
}

/// An audit log rotated away (moved, then removed) while serving: the next
/// line goes to a new file at its path, and nothing is lost.
#[tokio::test]
async fn an_audit_log_moved_away_is_written_anew_at_its_path() {
    let folder = pinned_notes();
    let path = folder.path().join("audit.jsonl");
    let rotated = folder.path().join("audit.jsonl.1");
    let mut server = RawServer::start(
        folder.path(),
        &["--audit-log", path.to_str().unwrap(), "--locked"],
    )
    .unwrap();
    server.initialize("2025-11-25").await.unwrap();
    note_served(&mut server).await;
    std::fs::rename(&path, &rotated).unwrap();
    note_served(&mut server).await;
    std::fs::remove_file(&rotated).unwrap();
    assert!(
        server
            .read_text("notes://notes/groceries")
            .await
            .contains("cheese")
    );
    server.stop().await.unwrap();

    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let uris: Vec<&str> = lines
        .iter()
        .map(|line| line["uri"].as_str().unwrap())
        .collect();
    assert_eq!(uris, [NOTE, "notes://notes/groceries"], "{lines:?}");
}

/// Reads sent at once, then answered, while an audit log that is never
/// read fills up.
const BURST: usize = 256;
/// Reads enough to fill a pipe's 64 KiB and the audit queue's 16,384 lines
/// past any doubt.
const MOST_READS: usize = 24_576;
/// How long a read may take while the audit log is stalled.
const PROMPTLY: Duration = Duration::from_secs(5);

/// An audit log whose path is a FIFO, its read end held by someone who
/// never reads, as anyone who can put a FIFO at that path (or a log
/// shipper that hangs) would: the pipe fills, the writer thread blocks,
/// then its queue fills. Reads go on being answered at once, and every line
/// past the queue is dropped, counted and logged once; stopping waits for
/// the stalled log only so long.
#[tokio::test]
async fn an_audit_log_nobody_reads_delays_no_answer() {
    let folder = pinned_notes();
    let beside = tempfile::tempdir().unwrap();
    let fifo = beside.path().join("audit.fifo");
    mkfifo(&fifo);
    // Held, so that resmux's open of the write end finds a reader, and
    // never read.
    let _unread = hold_fifo_unread(&fifo).unwrap();
    let metrics = free_address();
    let mut server = RawServer::start(
        folder.path(),
        &["--audit-log", fifo.to_str().unwrap(), "--metrics", &metrics],
    )
    .unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let dropped_lines = "resmux_audit_lines_dropped_total";
    assert_eq!(sample(&metrics, dropped_lines), Some(0.0));
    let mut reads = 0;
    // Every burst answered: the audit log holds no read up.
    while sample(&metrics, dropped_lines).is_none_or(|dropped| dropped < 1.0) {
        assert!(
            reads < MOST_READS,
            "{reads} reads and no audit line dropped"
        );
        let mut sent = Vec::with_capacity(BURST);
        for _ in 0..BURST {
            sent.push(server.send_read(NOTE).await.unwrap());
        }
        for id in sent {
            let answered = server.response(id).await.unwrap();
            assert!(
                answered["result"]["contents"][0]["text"].is_string(),
                "{answered}"
            );
        }
        reads += BURST;
    }
    let dropped = sample(&metrics, dropped_lines).unwrap();
    // Once lines are dropped, a read is answered as soon as ever.
    let text = tokio::time::timeout(PROMPTLY, server.read_text(NOTE))
        .await
        .expect("a read answered promptly while the audit log is stalled");
    assert!(text.contains("served by a WebAssembly plugin"), "{text}");
    wait_for_sample(
        &metrics,
        dropped_lines,
        "the line of the last read was not dropped",
        |now| now > dropped,
    )
    .await;
    let behind = "does not keep up (16384 lines wait for it); requests are served and their \
                  lines dropped until it does";
    server.wait_for_log(behind, 1, PATIENCE).await;
    let stderr = server.stop().await.unwrap();
    assert_eq!(stderr.matches("does not keep up").count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the audit log {} was not written within 2000 ms of stopping; the lines still \
             queued are lost",
            fifo.display()
        )),
        "{stderr}"
    );
}

/// The same FIFO in locked mode, where nothing is served unaudited: once
/// the pipe is full, a read waits for its line at most 2 s and is refused,
/// naming the bound, and the wait holds no thread: a listing sent behind a
/// waiting read is answered first.
#[tokio::test]
async fn a_locked_audit_log_nobody_reads_refuses_reads_within_its_bound() {
    let folder = pinned_notes();
    let beside = tempfile::tempdir().unwrap();
    let fifo = beside.path().join("audit.fifo");
    mkfifo(&fifo);
    let _unread = hold_fifo_unread(&fifo).unwrap();
    let mut server = RawServer::start(
        folder.path(),
        &["--audit-log", fifo.to_str().unwrap(), "--locked"],
    )
    .unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let refusal = "refused: the audit log was not written within 2000 ms, and locked mode serves \
                   nothing unaudited";
    // Reads are answered while the pipe takes their lines, then refused.
    let mut reads = 0;
    loop {
        assert!(reads < 4096, "{reads} reads and none refused");
        let mut sent = Vec::with_capacity(64);
        for _ in 0..64 {
            sent.push(server.send_read(NOTE).await.unwrap());
        }
        let mut refused = 0;
        for id in sent {
            let answered = server.response(id).await.unwrap();
            match answered.get("error") {
                Some(_) => {
                    assert_eq!(error_message(&answered), refusal, "{answered}");
                    refused += 1;
                }
                None => assert!(
                    answered["result"]["contents"][0]["text"].is_string(),
                    "{answered}"
                ),
            }
        }
        reads += 64;
        if refused > 0 {
            break;
        }
    }
    let waiting = server.send_read(NOTE).await.unwrap();
    let listing = server.send("resources/list", json!({})).await.unwrap();
    let first = loop {
        let message = server.next_message().await.unwrap();
        if message.get("id").is_some() {
            break message;
        }
    };
    assert_eq!(first["id"], json!(listing), "{first}");
    let read = server.response(waiting).await.unwrap();
    assert_eq!(error_message(&read), refusal, "{read}");
    let stalled = format!(
        "the audit log {} was not written within 2000 ms; requests are refused until it is \
         (locked mode)",
        fifo.display()
    );
    server.wait_for_log(&stalled, 1, PATIENCE).await;
    let stderr = server.stop().await.unwrap();
    assert_eq!(stderr.matches(&stalled).count(), 1, "{stderr}");
}

/// A folder with `notes` and the conformance fixtures.
fn notes_and_conformance() -> Folder {
    let folder = Folder::new();
    folder
        .plugin("notes", "notes")
        .plugin("conformance", "conformance");
    folder
}

/// `notes` answers a read.
async fn note_served(server: &mut RawServer) {
    assert!(
        server
            .read_text(NOTE)
            .await
            .contains("served by a WebAssembly plugin")
    );
}

/// Both plugins of [`notes_and_conformance`] answer a read.
async fn both_serve(server: &mut RawServer) {
    note_served(server).await;
    fixture_served(server, "conformance").await;
}

/// The conformance fixtures, mounted as `scheme`, answer a read.
async fn fixture_served(server: &mut RawServer, scheme: &str) {
    let fixture = server
        .read(&format!("{scheme}://static-text"))
        .await
        .unwrap();
    assert!(
        fixture["result"]["contents"][0]["text"].is_string(),
        "{fixture}"
    );
}

/// The server's log once it has stopped; on stdout it may have said only
/// that the listing changed, as plugins compiled while serving arrived.
async fn log_once_stopped(server: RawServer) -> String {
    let (messages, stderr) = server.finish().await.unwrap();
    for message in messages {
        assert_eq!(
            message["method"], "notifications/resources/list_changed",
            "{message}"
        );
    }
    stderr
}

/// The names in `dir` that are a writer's temporary files.
fn temporary_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".tmp"))
        .collect()
}

#[tokio::test]
async fn a_compile_cache_that_cannot_be_made_leaves_resmux_compiling_in_memory() {
    let folder = notes_and_conformance();
    let mut server =
        RawServer::start(folder.path(), &["--cache-dir", "/dev/null/resmux-cache"]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    both_serve(&mut server).await;
    let stderr = log_once_stopped(server).await;
    let warning = "the compile cache is unavailable (cannot create cache directory \
                   /dev/null/resmux-cache: Not a directory (os error 20)): compiling in memory";
    assert_eq!(stderr.matches(warning).count(), 1, "{stderr}");
}

/// A tmpfs mounted for the test, unmounted when it ends.
struct Mounted(tempfile::TempDir);

impl Mounted {
    /// A tmpfs of `size` (as `mount -o size=` takes it); the test needs
    /// root, as CI is.
    fn tmpfs(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(mounted.success(), "this test mounts a tmpfs, as root");
        Self(dir)
    }

    fn remount_read_only(&self) {
        let remounted = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(self.0.path())
            .status()
            .unwrap();
        assert!(remounted.success());
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// A cache directory on a disk too small for any compiled component, then
/// made read-only: resmux serves, compiling in memory, says so once per
/// start, and leaves no part of a component behind.
#[tokio::test]
async fn a_full_or_read_only_cache_disk_costs_compiles_and_one_warning() {
    let disk = Mounted::tmpfs("64k");
    let cache = disk.0.path().join("cache");
    let key_dir = tempfile::tempdir().unwrap();
    let key = key_dir.path().join("cache-key");
    let folder = notes_and_conformance();
    let args = [
        "--cache-dir",
        cache.to_str().unwrap(),
        "--cache-key",
        key.to_str().unwrap(),
    ];
    for failure in [
        "No space left on device (os error 28)",
        "Read-only file system (os error 30)",
    ] {
        let mut server = RawServer::start(folder.path(), &args).unwrap();
        server.initialize("2025-11-25").await.unwrap();
        both_serve(&mut server).await;
        let stderr = log_once_stopped(server).await;
        let warning = format!(
            "cannot store compiled components in {}: {failure}; compiling in memory, logged once",
            cache.display()
        );
        assert_eq!(stderr.matches(&warning).count(), 1, "{stderr}");
        assert_eq!(temporary_files(&cache), Vec::<String>::new());
        disk.remount_read_only();
    }
}

/// `resmux compile` killed with SIGKILL while it stores components, an
/// entry later cut short on disk, and a temporary file of a writer that
/// died: the next start serves every plugin, loads no torn entry, and
/// removes what the dead left.
#[tokio::test]
async fn a_compile_killed_midway_leaves_no_torn_entry() {
    let cache = tempfile::tempdir().unwrap();
    let key = cache.path().join("key");
    let entries = cache.path().join("entries");
    let folder = notes_and_conformance();
    folder.plugin("units", "units").plugin("catalog", "catalog");
    let mut compiling = Command::new(resmux_bin())
        .args([
            "compile",
            "--cache-dir",
            entries.to_str().unwrap(),
            "--cache-key",
        ])
        .arg(&key)
        .arg(folder.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stored = |entries: &Path| {
        std::fs::read_dir(entries).map_or(0, |listing| {
            listing
                .filter(|entry| {
                    let name = entry.as_ref().unwrap().file_name();
                    name.to_str().unwrap().ends_with(".b3.cwasm")
                })
                .count()
        })
    };
    let deadline = std::time::Instant::now() + PATIENCE;
    while stored(&entries) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "resmux compile stored nothing"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    compiling.kill().unwrap();
    compiling.wait().unwrap();

    let first = std::fs::read_dir(&entries)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.to_str().unwrap().ends_with(".b3.cwasm"))
        .unwrap();
    let whole = std::fs::read(&first).unwrap();
    std::fs::write(&first, &whole[..whole.len() / 2]).unwrap();
    let left = entries.join(".notes.b3.cwasm.4194303.00000000000000aa.tmp");
    std::fs::write(&left, b"half of a component").unwrap();

    let args = [
        "--cache-dir",
        entries.to_str().unwrap(),
        "--cache-key",
        key.to_str().unwrap(),
    ];
    let mut server = RawServer::start(folder.path(), &args).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    both_serve(&mut server).await;
    server.wait_for_log("plugin loaded", 4, PATIENCE).await;
    let stderr = log_once_stopped(server).await;
    assert!(
        stderr.contains(&format!(
            "removed {}, left by a resmux that died writing it",
            left.display()
        )),
        "{stderr}"
    );
    assert_eq!(
        stderr
            .matches("its tag does not match: it was not written by resmux; compiling afresh")
            .count(),
        1,
        "{stderr}"
    );
    assert_eq!(temporary_files(&entries), Vec::<String>::new());
    // The torn entry was replaced whole.
    assert_eq!(std::fs::read(&first).unwrap().len(), whole.len());
}

/// SIGTERM to a stdio server with reads in flight, one of them stuck in a
/// plugin that opens a FIFO nobody writes: every request it has read is
/// answered, in whole lines, the stuck one with the error of its time limit,
/// and the server exits by itself, stdin still open. Lines still in the pipe
/// when the signal comes were never read, so never in flight.
#[tokio::test]
async fn sigterm_over_stdio_answers_what_is_in_flight_and_exits() {
    let folder = liar_granted_data("[limits]\ntimeout_ms = 2000\n");
    folder.file("data/.keep", b"");
    mkfifo(&folder.path().join("data/pipe"));
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let stuck = server
        .send("resources/read", json!({ "uri": "liar://open//data/pipe" }))
        .await
        .unwrap();
    // Lines are read in order: once a read sent after it is answered, the
    // stuck one is in flight.
    let text = server.read_text(NOTE).await;
    assert!(text.starts_with("# Welcome"), "{text}");
    let mut reads = Vec::new();
    for _ in 0..64 {
        reads.push(server.send_read(NOTE).await.unwrap());
    }
    let (messages, stderr) = server.terminate().await.unwrap();
    assert!(
        stderr.contains("stopping: stdin is read no more; answering the requests in flight"),
        "{stderr}"
    );
    let answer = |id: u64| {
        messages
            .iter()
            .find(|message| message["id"] == json!(id))
            .unwrap_or_else(|| panic!("request {id} was not answered: {messages:?}"))
    };
    // What was read is answered; what was not read yet is what was sent
    // last, and gets nothing.
    let read = reads
        .iter()
        .take_while(|&&id| messages.iter().any(|message| message["id"] == json!(id)))
        .count();
    for &id in &reads[..read] {
        let answered = answer(id);
        assert!(
            answered["result"]["contents"][0]["text"].is_string(),
            "{answered}"
        );
    }
    for &id in &reads[read..] {
        assert!(
            messages.iter().all(|message| message["id"] != json!(id)),
            "request {id} was answered though an earlier one was not: {messages:?}"
        );
    }
    assert!(
        error_message(answer(stuck))
            .contains("plugin liar exceeded its time limit of 2000 ms in read"),
        "{}",
        answer(stuck)
    );
}

/// The plugin folder moved away, replaced by a symlink to another folder,
/// and that symlink flipped to a third, while serving: what is loaded keeps
/// serving while the path names no folder, and each folder the path names
/// next is read and watched.
#[tokio::test]
async fn a_plugin_folder_moved_and_replaced_by_symlinks_is_followed() {
    let base = tempfile::tempdir().unwrap();
    let plugins = base.path().join("plugins");
    let folder = |name: &str, components: &[&str]| {
        let path = base.path().join(name);
        std::fs::create_dir(&path).unwrap();
        for component in components {
            std::fs::copy(
                resmux_tests::component(component),
                path.join(format!("{component}.wasm")),
            )
            .unwrap();
        }
        path
    };
    folder("plugins", &["notes"]);
    let mut server = RawServer::start(&plugins, &[]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    note_served(&mut server).await;

    std::fs::rename(&plugins, base.path().join("away")).unwrap();
    let gone = format!(
        "the plugin folder {} is gone; the plugins loaded keep serving",
        plugins.display()
    );
    server.wait_for_log(&gone, 1, PATIENCE).await;
    note_served(&mut server).await;

    let second = folder("second", &["notes", "conformance"]);
    std::os::unix::fs::symlink(&second, &plugins).unwrap();
    server
        .wait_for_log("plugin added scheme=\"conformance\"", 1, PATIENCE)
        .await;
    fixture_served(&mut server, "conformance").await;

    // `ln -sfn third plugins`: a new link renamed over the old one.
    let third = folder("third", &["notes"]);
    let link = base.path().join("plugins.new");
    std::os::unix::fs::symlink(&third, &link).unwrap();
    std::fs::rename(&link, &plugins).unwrap();
    server
        .wait_for_log("plugin removed scheme=\"conformance\"", 1, PATIENCE)
        .await;
    // The watch is on the third folder now.
    std::fs::copy(
        resmux_tests::component("conformance"),
        third.join("extra.wasm"),
    )
    .unwrap();
    server
        .wait_for_log("plugin added scheme=\"extra\"", 1, PATIENCE)
        .await;
    fixture_served(&mut server, "extra").await;
    note_served(&mut server).await;
    log_once_stopped(server).await;
}
