//! One plugin or one client holding up the others, over stdio, tried as an
//! attacker would: a client that never reads its answers, reused request
//! ids, a plugin that locates a huge file, spins, or fills its call slots.
//! Each test checks the host-side state (memory, threads), that other
//! requests keep being answered, and the error that names the limit.

use std::time::{Duration, Instant};

use resmux_tests::{
    EXCHANGE_TIMEOUT, Folder, RawServer, error_message, free_address, liar_with, mkfifo,
    notes_still_answer, release_fifo, sample, stuck_on_a_fifo, until_calls_run, wait_for_sample,
};
use serde_json::json;

/// A figure of `/proc/PID/status`, in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

/// How far resmux went while a client read none of its answers.
struct Stalled {
    /// Reads of `liar` that ran, of the 250 the client asked for.
    reads: f64,
    /// How much resmux's memory grew, in KiB.
    grown_kib: u64,
}

impl Stalled {
    /// stdin waits while 16 requests run or 16 MiB of answers wait for
    /// stdout: three answers of 5.6 MB fill that, so at most 16 reads run
    /// after the third, and a fourth answer may be on its way when stdin
    /// stops. Memory follows from that (20 answers, the plugin's eight
    /// instances, and what the allocator keeps of freed copies for a few
    /// seconds: 150 to 460 MiB measured); unbounded, the answers alone
    /// would take 1.4 GiB.
    fn assert_held_back(&self) {
        eprintln!(
            "while stalled: {} reads ran, RSS grew by {} KiB",
            self.reads, self.grown_kib
        );
        assert!(
            self.reads <= 20.0,
            "{} reads ran while the client read nothing",
            self.reads
        );
        assert!(
            self.grown_kib < 1024 * 1024,
            "RSS grew by {} KiB while the client read nothing",
            self.grown_kib
        );
    }
}

/// Sends 250 requests for 4 MiB (5.6 MiB as base64 in JSON: 1.4 GiB of
/// answers if they all queued), reads none of the answers for a while, then
/// all of them, each whole.
async fn stalled_by_a_client_that_reads_late(
    method: &str,
    params: serde_json::Value,
    blob: impl Fn(&serde_json::Value) -> Option<&str>,
) -> Stalled {
    let folder = Folder::new();
    folder.plugin("liar", "liar");
    let metrics = free_address();
    let mut server = RawServer::start(folder.path(), &["--metrics", &metrics]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let before = status_kib(server.pid(), "VmRSS");
    let mut ids = Vec::new();
    for _ in 0..250 {
        ids.push(server.send(method, params.clone()).await.unwrap());
    }
    // The attack: the client reads nothing for a while.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stalled = Stalled {
        reads: sample(&metrics, LIAR_READS).unwrap_or(0.0),
        grown_kib: status_kib(server.pid(), "VmRSS").saturating_sub(before),
    };
    for id in ids {
        let response = server.response(id).await.unwrap();
        assert_eq!(
            blob(&response).map(str::len),
            Some(5_592_408),
            "request {id} is answered whole: {response:.200}"
        );
    }
    assert_eq!(sample(&metrics, LIAR_READS), Some(250.0));
    server.stop().await.unwrap();
    stalled
}

/// The series counting `liar`'s reads that ended well.
const LIAR_READS: &str =
    r#"resmux_plugin_calls_total{plugin="liar",operation="read",outcome="ok"}"#;

#[tokio::test]
async fn a_client_that_never_reads_its_answers_is_held_back() {
    stalled_by_a_client_that_reads_late(
        "resources/read",
        json!({ "uri": "liar://huge/4" }),
        |response| response["result"]["contents"][0]["blob"].as_str(),
    )
    .await
    .assert_held_back();
}

#[tokio::test]
async fn a_client_that_never_reads_its_tool_answers_is_held_back() {
    stalled_by_a_client_that_reads_late(
        "tools/call",
        json!({ "name": "read_resource", "arguments": { "uri": "liar://huge/4" } }),
        |response| response["result"]["content"][0]["resource"]["blob"].as_str(),
    )
    .await
    .assert_held_back();
}

#[tokio::test]
async fn reads_that_reuse_a_request_id_are_each_answered() {
    let folder = Folder::new();
    folder.plugin("liar", "liar");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    // Reads that wait, so that both are in flight at once under one id.
    let read = json!({
        "jsonrpc": "2.0", "id": 7, "method": "resources/read",
        "params": { "uri": "liar://sleep/300" }
    });
    server.send_line(&read.to_string()).await.unwrap();
    server.send_line(&read.to_string()).await.unwrap();
    for _ in 0..2 {
        let answer = server.next_message().await.unwrap();
        assert_eq!(answer["id"], 7, "{answer}");
        assert!(answer["result"]["contents"].is_array(), "{answer}");
        assert_eq!(answer["result"]["contents"][0]["text"], "a lie", "{answer}");
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_located_file_over_the_answer_limit_is_refused_before_it_is_read() {
    let folder = liar_with("");
    // 255 MiB, sparse: below the plugin's memory limit, far above its
    // answer limit.
    let big = std::fs::File::create(folder.path().join("data/big.bin")).unwrap();
    big.set_len(255 << 20).unwrap();
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let before = status_kib(server.pid(), "VmRSS");
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(
            server
                .send_read("liar://located/data/big.bin")
                .await
                .unwrap(),
        );
    }
    for id in ids {
        let response = server.response(id).await.unwrap();
        assert!(
            error_message(&response).contains(
                "plugin liar: the file \"/data/big.bin\" it located for \"located/data/big.bin\" holds 267386880 bytes, over its max_read_bytes of 16777216"
            ),
            "{response}"
        );
    }
    let peak = status_kib(server.pid(), "VmHWM");
    assert!(
        peak < before + 64 * 1024,
        "peak RSS {peak} KiB, from {before} KiB: the file was read"
    );
    assert_eq!(server.read_text("liar://located/data/x.txt").await, "x");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_locate_that_runs_out_of_time_leaves_locate_on_for_other_paths() {
    let folder = liar_with("timeout_ms = 500");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let spun = server.read_error("liar://locate-spin").await;
    assert!(
        spun.contains("plugin liar exceeded its time limit of 500 ms in locate"),
        "{spun}"
    );
    // Other paths are still located, and read by the host.
    assert_eq!(server.read_text("liar://located/data/x.txt").await, "x");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn time_spent_waiting_for_a_call_slot_is_not_counted_against_the_plugin() {
    let folder = Folder::new();
    folder.plugin("liar", "liar").manifest(
        "liar",
        "[limits]\ntimeout_ms = 10000\nconcurrent_calls = 1\n",
    );
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    // The first read holds the one slot for 7 s; the second waits for it,
    // then needs 6 s of its own: 3 s more than its limit all told, 4 s
    // within it from when it runs.
    let first = server.send_read("liar://sleep/7000").await.unwrap();
    let second = server.send_read("liar://sleep/6000").await.unwrap();
    for id in [first, second] {
        let response = server.response(id).await.unwrap();
        assert!(response["result"]["contents"].is_array(), "{response}");
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn threads_stuck_in_a_plugins_files_stay_within_its_call_slots() {
    let folder = liar_with("concurrent_calls = 4\ntimeout_ms = 1000");
    mkfifo(&folder.path().join("data/fifo"));
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    let mut ids = Vec::new();
    for _ in 0..16 {
        ids.push(
            server
                .send_read("liar://locate-open/data/fifo")
                .await
                .unwrap(),
        );
    }
    for id in ids {
        let response = server.response(id).await.unwrap();
        assert!(
            error_message(&response).contains("opened: false"),
            "locate has no files to open: {response}"
        );
    }
    // Reads that open the FIFO through `read` block: each holds a call
    // slot and its thread, so at most `concurrent_calls` threads are stuck.
    let mut ids = Vec::new();
    for _ in 0..16 {
        ids.push(server.send_read("liar://open//data/fifo").await.unwrap());
    }
    for id in ids {
        let response = server.response(id).await.unwrap();
        let message = error_message(&response);
        assert!(
            message.contains("exceeded its time limit of 1000 ms in read")
                || message.contains("is busy: its 4 call slots")
                || message.contains("is wedged: 4 of its 4 call slots")
                || message.contains("is quarantined"),
            "{response}"
        );
    }
    let stuck = stuck_on_a_fifo(server.pid());
    assert!(
        stuck.len() <= 4,
        "{} threads stuck on the FIFO, over concurrent_calls (4): {stuck:?}",
        stuck.len()
    );
    notes_still_answer(&mut server).await;
    // Frees the stuck threads.
    let _ = release_fifo(&folder.path().join("data/fifo"));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_plugin_wedged_by_calls_stuck_in_its_files_says_so_and_refuses_at_once() {
    let folder = liar_with("concurrent_calls = 2\ntimeout_ms = 500");
    let fifo = folder.path().join("data/fifo");
    mkfifo(&fifo);
    let metrics = free_address();
    let mut server = RawServer::start(folder.path(), &["--metrics", &metrics]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    // The attack: two reads open a FIFO nobody writes to, each past its
    // time limit, and their file operations hold both call slots.
    for _ in 0..2 {
        let error = server.read_error("liar://open//data/fifo").await;
        assert!(
            error.contains("plugin liar exceeded its time limit of 500 ms in read"),
            "{error}"
        );
    }
    let stuck = "resmux_plugin_stuck_calls{plugin=\"liar\"}";
    wait_for_sample(&metrics, stuck, "both calls stuck", |value| value == 2.0).await;
    let said = "a call of read is stuck past its time limit";
    server.wait_for_log(said, 1, EXCHANGE_TIMEOUT).await;
    // A read that needs no file is refused at once, saying why, instead of
    // waiting a time limit for a slot.
    let refused = server.read_error("liar://honest").await;
    assert!(
        refused.contains(
            "plugin liar is wedged: 2 of its 2 call slots are held by calls stuck past their time limit of 500 ms"
        ),
        "{refused}"
    );
    notes_still_answer(&mut server).await;
    // The FIFO opens: the stuck calls end, the plugin serves again, and
    // the first stuck call was told once.
    let _writer = release_fifo(&fifo).unwrap();
    wait_for_sample(&metrics, stuck, "no call stuck", |value| value == 0.0).await;
    let log_after = server
        .wait_for_log("no call is stuck any more", 1, EXCHANGE_TIMEOUT)
        .await;
    assert_eq!(log_after.matches(said).count(), 1, "{log_after}");
    assert_eq!(server.read_text("liar://honest").await, "a lie");
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_ping_is_answered_while_every_core_runs_a_spinning_plugin() {
    let folder = Folder::new();
    // The CPU limit ends the spins: their wall-clock limit lies ten times
    // beyond it, which no load short of a stalled machine reaches first.
    folder
        .plugin("liar", "liar")
        .manifest("liar", "[limits]\ncpu_ms = 3000\ntimeout_ms = 30000\n");
    let metrics = free_address();
    let mut server = RawServer::start(folder.path(), &["--metrics", &metrics]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    let mut spinning = Vec::new();
    for _ in 0..cores {
        spinning.push(server.send_read("liar://spin").await.unwrap());
    }
    // The attack: the spinning reads take the runtime's threads first (as
    // many as run at once: 8 calls of a plugin, by default).
    until_calls_run(&metrics, "liar", cores.min(8)).await;
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        let started = Instant::now();
        let pong = server.request("ping", json!({})).await.unwrap();
        assert_eq!(pong["result"], json!({}), "{pong}");
        slowest = slowest.max(started.elapsed());
    }
    assert!(
        slowest < Duration::from_millis(250),
        "a ping waited {slowest:?} behind {cores} spinning reads"
    );
    for id in spinning {
        let response = server.response(id).await.unwrap();
        assert!(
            error_message(&response).contains("exceeded its CPU time limit of 3000 ms"),
            "{response}"
        );
    }
    server.stop().await.unwrap();
}
