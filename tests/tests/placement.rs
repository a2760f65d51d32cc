//! Where the calls of a plugin with granted directories run (inline, or on
//! a thread of their own; `runtime/placement.rs`), tried as an attacker
//! would: reads stuck in the open of a FIFO under either placement, a read
//! that waits for ever, and a stuck read its client cancels. Each test checks
//! which threads are stuck (their names and what they wait in), that the
//! plugin's call slots stay taken, that another plugin keeps answering, and
//! the error that names the limit.

use std::time::{Duration, Instant};

use resmux_tests::{
    RawServer, error_message, liar_with, mkfifo, notes_still_answer, stuck_on_a_fifo,
    until_stuck_on_a_fifo,
};
use serde_json::json;

/// Sends `count` reads of `uri` at once and asserts that each fails at the
/// plugin's time limit of 1000 ms.
async fn reads_time_out(server: &mut RawServer, uri: &str, count: usize) {
    let mut ids = Vec::new();
    for _ in 0..count {
        ids.push(server.send_read(uri).await.unwrap());
    }
    for id in ids {
        let response = server.response(id).await.unwrap();
        let message = error_message(&response);
        assert!(
            message.contains("plugin liar exceeded its time limit of 1000 ms in read"),
            "{response}"
        );
    }
}

/// Four reads that open the FIFO at `fifo` in the liar's data fail at its
/// time limit; their opens stay stuck, each on one of the plugin's own
/// threads, and keep the plugin's 4 call slots; `notes` still answers.
async fn four_reads_stick_holding_the_plugins_slots_and_threads(
    server: &mut RawServer,
    fifo: &str,
) {
    reads_time_out(server, &format!("liar://open//{fifo}"), 4).await;
    assert_eq!(
        stuck_on_a_fifo(server.pid()),
        vec!["files:liar"; 4],
        "the plugin's own threads, none of the host's"
    );
    let wedged = server.read("liar://honest").await.unwrap();
    assert!(
        error_message(&wedged).contains(
            "plugin liar is wedged: 4 of its 4 call slots are held by calls stuck past their time limit of 1000 ms"
        ),
        "the stuck operations keep their calls' slots, and say so: {wedged}"
    );
    notes_still_answer(server).await;
}

/// Opens the FIFO's other end, which frees every open waiting for it, and
/// waits until the liar's call slots are free again.
async fn free_the_fifo(server: &mut RawServer, fifo: &std::path::Path) {
    drop(std::fs::OpenOptions::new().write(true).open(fifo).unwrap());
    let mut honest = server.read("liar://honest").await.unwrap();
    for _ in 0..50 {
        if honest["result"].is_object() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        honest = server.read("liar://honest").await.unwrap();
    }
    assert_eq!(honest["result"]["contents"][0]["text"], "a lie", "{honest}");
    assert_eq!(stuck_on_a_fifo(server.pid()), Vec::<String>::new());
}

#[tokio::test]
async fn file_operations_stuck_inline_or_on_a_calls_own_thread_hold_the_plugins_slots_and_threads_only()
 {
    let folder = liar_with("concurrent_calls = 4\ntimeout_ms = 1000");
    // Two FIFOs: the first one's path stays quarantined for a while after
    // its reads time out.
    let (first, second) = (
        folder.path().join("data/fifo"),
        folder.path().join("data/fifo2"),
    );
    mkfifo(&first);
    mkfifo(&second);
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    // The plugin's reads have made no file operation yet, so they run
    // inline, each operation on one of the plugin's own file threads.
    four_reads_stick_holding_the_plugins_slots_and_threads(&mut server, "data/fifo").await;
    free_the_fifo(&mut server, &first).await;
    // Reads that each open eight files: from here on the plugin's reads run
    // on threads of their own (from the same pool), where their file
    // operations block.
    for _ in 0..20 {
        assert_eq!(
            server.read_text("liar://hoard/8//data/x.txt").await,
            "held 8 files"
        );
    }
    four_reads_stick_holding_the_plugins_slots_and_threads(&mut server, "data/fifo2").await;
    free_the_fifo(&mut server, &second).await;
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_call_that_waits_for_ever_gives_its_slot_back_within_ten_time_limits() {
    let folder = liar_with("concurrent_calls = 2\ntimeout_ms = 200");
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    // Two reads that sleep for 100 s, inline (no file operation yet): each
    // fails at its time limit and keeps its slot while it still waits.
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(server.send_read("liar://sleep/100000").await.unwrap());
    }
    for id in ids {
        let response = server.response(id).await.unwrap();
        assert!(
            error_message(&response)
                .contains("plugin liar exceeded its time limit of 200 ms in read"),
            "{response}"
        );
    }
    let started = Instant::now();
    let wedged = server.read("liar://honest").await.unwrap();
    assert!(
        error_message(&wedged).contains(
            "plugin liar is wedged: 2 of its 2 call slots are held by calls stuck past their time limit of 200 ms"
        ),
        "{wedged}"
    );
    notes_still_answer(&mut server).await;
    // Within ten more time limits (2 s) of their own, the slots come back.
    let mut honest = server.read("liar://honest").await.unwrap();
    while honest["result"].is_null() && started.elapsed() < Duration::from_secs(10) {
        honest = server.read("liar://honest").await.unwrap();
    }
    assert_eq!(honest["result"]["contents"][0]["text"], "a lie", "{honest}");
    assert!(started.elapsed() < Duration::from_secs(10));
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_read_stuck_in_a_file_operation_keeps_its_slot() {
    let folder = liar_with("concurrent_calls = 1\ntimeout_ms = 1000");
    let fifo = folder.path().join("data/fifo");
    mkfifo(&fifo);
    let mut server = RawServer::legacy(folder.path()).await.unwrap();
    // The attack: a read that opens the FIFO, inline, then its cancellation,
    // which drops the call once its open is stuck.
    let stuck = server.send_read("liar://open//data/fifo").await.unwrap();
    until_stuck_on_a_fifo(server.pid(), 1).await;
    let cancel = json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": { "requestId": stuck }
    });
    server.send_line(&cancel.to_string()).await.unwrap();
    let busy = server.read("liar://honest").await.unwrap();
    assert!(
        error_message(&busy).contains("plugin liar is busy: its 1 call slots"),
        "the cancelled call keeps its slot while its open is stuck: {busy}"
    );
    assert_eq!(stuck_on_a_fifo(server.pid()), vec!["files:liar"]);
    notes_still_answer(&mut server).await;
    free_the_fifo(&mut server, &fifo).await;
    server.stop().await.unwrap();
}
