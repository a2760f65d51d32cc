//! Work that no epoch tick interrupts, tried as an attacker would: a call
//! that draws 64 MiB of host randomness at once, one that draws it a
//! mebibyte at a time for as long as it may run, and one `memory.fill`
//! over 224 MiB of fresh memory, each as one more call at once than there
//! are cores. The large draw fails, naming the limit; the others run to
//! their end or their time limit; and meanwhile pings, another plugin's
//! reads and the probes are answered within 50 ms, since no plugin code
//! runs on the threads that serve them, and one plugin's calls run on at
//! most a plugins' thread a core, of one more. One answer of the thousands may come later, within 100 ms:
//! the machine's scheduler, not the attack (a host call on a serving thread
//! would hold back every answer asked while it runs). And over stdio, a
//! read of another plugin sent in the same write as fills is answered
//! before they end: the reads stdin gives in one go are run in place
//! in a batch for each plugin's scheme.

use std::time::{Duration, Instant};

use resmux_tests::{Folder, RawServer, error_message, free_address, http_get, until_calls_run};
use serde_json::json;

/// The longest any other client may wait for anything one plugin does.
const WORST: Duration = Duration::from_millis(50);
/// The longest the one answer allowed past [`WORST`] may take.
const ONE_LATE: Duration = Duration::from_millis(100);

/// The slowest answers seen while an attack ran.
#[derive(Debug, Default)]
struct Slowest {
    ping: Duration,
    other_plugin: Duration,
    probe: Duration,
    rounds: usize,
    /// Answers that took longer than [`WORST`].
    late: usize,
}

impl Slowest {
    /// Records one answer that took `waited`, in `slowest`.
    fn note(slowest: &mut Duration, late: &mut usize, waited: Duration) {
        *slowest = (*slowest).max(waited);
        *late += usize::from(waited >= WORST);
    }
}

/// Sends `attack` one more time at once than there are cores, then pings, reads `notes` and
/// probes `/healthz` in turn until every attacking read is answered (at
/// least five rounds); returns the slowest of each, and the attacking
/// reads' answers.
async fn measured_under(
    server: &mut RawServer,
    metrics: &str,
    attack: &str,
    running_before_measuring: bool,
) -> (Slowest, Vec<serde_json::Value>) {
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    // One more than a plugin's share of the plugins' threads, and no more
    // than the faults in a row that quarantine a path (3), on 2 cores.
    let attacks = cores + 1;
    let mut attacking = Vec::new();
    for _ in 0..attacks {
        attacking.push(server.send_read(attack).await.unwrap());
    }
    if running_before_measuring {
        until_calls_run(metrics, "liar", cores).await;
    }
    let mut slowest = Slowest::default();
    while slowest.rounds < 5 || !attacking.iter().all(|id| server.has_answered(*id)) {
        let started = Instant::now();
        let pong = server.request("ping", json!({})).await.unwrap();
        Slowest::note(&mut slowest.ping, &mut slowest.late, started.elapsed());
        assert_eq!(pong["result"], json!({}), "{pong}");
        let started = Instant::now();
        let read = server
            .request("resources/read", json!({ "uri": "notes://notes/welcome" }))
            .await
            .unwrap();
        Slowest::note(
            &mut slowest.other_plugin,
            &mut slowest.late,
            started.elapsed(),
        );
        assert!(
            read["result"]["contents"][0]["text"]
                .as_str()
                .is_some_and(|text| text.starts_with("# Welcome")),
            "{read}"
        );
        let started = Instant::now();
        let (status, body) = http_get(metrics, "/healthz", &[]).unwrap();
        Slowest::note(&mut slowest.probe, &mut slowest.late, started.elapsed());
        assert_eq!((status, body.as_str()), (200, "live\n"));
        slowest.rounds += 1;
    }
    let mut answers = Vec::new();
    for id in attacking {
        answers.push(server.response(id).await.unwrap());
    }
    (slowest, answers)
}

#[tokio::test]
async fn no_other_client_waits_50_ms_for_host_calls_or_instructions_no_tick_interrupts() {
    let folder = Folder::new();
    folder
        .plugin("notes", "notes")
        .plugin("liar", "liar")
        .manifest("liar", "[limits]\ntimeout_ms = 1000\ncpu_ms = 30000\n")
        // The fill runs to its end: how long it takes on a busy machine is
        // no part of what is tried here.
        .manifest(
            "filler",
            "component = \"liar.wasm\"\n[limits]\ntimeout_ms = 20000\ncpu_ms = 30000\n",
        );
    let metrics = free_address();
    let mut server = RawServer::start(folder.path(), &["--metrics", &metrics]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    // Warm: the first read of each plugin compiles nothing, but starts
    // instances, which is no attack.
    server.read_text("notes://notes/welcome").await;
    server.read_text("liar://honest").await;
    server.read_text("filler://honest").await;

    let (slowest, answers) =
        measured_under(&mut server, &metrics, "liar://random-bytes/67108864", false).await;
    for answer in &answers {
        assert!(
            error_message(answer).contains("requested len 67108864 exceeds limit 1048576"),
            "{answer}"
        );
    }
    let large_draw = slowest;

    let (slowest, answers) =
        measured_under(&mut server, &metrics, "liar://random-loop", true).await;
    for answer in &answers {
        assert!(
            error_message(answer)
                .contains("plugin liar exceeded its time limit of 1000 ms in read"),
            "{answer}"
        );
    }
    let many_draws = slowest;

    let (slowest, answers) = measured_under(&mut server, &metrics, "filler://fill", false).await;
    for answer in &answers {
        assert_eq!(
            answer["result"]["contents"][0]["text"],
            json!(format!("filled {}", 224 << 20)),
            "{answer}"
        );
    }
    let fill = slowest;

    for (attack, slowest) in [
        ("one draw of 64 MiB", &large_draw),
        ("draws for 1 s", &many_draws),
        ("memory.fill over 224 MiB", &fill),
    ] {
        eprintln!("under {attack}: {slowest:?}");
        let longest = slowest.ping.max(slowest.other_plugin).max(slowest.probe);
        assert!(
            slowest.late <= 1 && longest < ONE_LATE,
            "under {attack}, another client waited past {WORST:?} more than once, or past {ONE_LATE:?}: {slowest:?}"
        );
    }
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_read_sent_together_with_fills_of_another_plugin_is_answered_before_they_end() {
    let folder = Folder::new();
    folder
        .plugin("notes", "notes")
        .plugin("filler", "liar")
        .manifest("filler", "[limits]\ntimeout_ms = 20000\ncpu_ms = 30000\n");
    let mut server = RawServer::start(folder.path(), &[]).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    server.read_text("notes://notes/welcome").await;

    for round in 0..3 {
        // Warm, every round: an idle instance of each plugin, so that the
        // first fill starts at once, in place, where the read behind it
        // would wait for its thread.
        server.read_text("filler://honest").await;
        // Two fills: should the first still wait before it fills (for a
        // tick), the second may fill in place.
        let ids = server
            .send_reads_together(&["filler://fill", "filler://fill", "notes://notes/welcome"])
            .await
            .unwrap();
        let (fills, read) = (&ids[..2], ids[2]);
        let answer = server.response(read).await.unwrap();
        assert!(
            answer["result"]["contents"][0]["text"]
                .as_str()
                .is_some_and(|text| text.starts_with("# Welcome")),
            "{answer}"
        );
        assert!(
            !fills.iter().any(|fill| server.has_answered(*fill)),
            "round {round}: the read of notes sent with fills of another plugin waited for a fill's answer"
        );
        for fill in fills {
            let filled = server.response(*fill).await.unwrap();
            assert_eq!(
                filled["result"]["contents"][0]["text"],
                json!(format!("filled {}", 224 << 20)),
                "{filled}"
            );
        }
    }
    server.read_text("notes://notes/welcome").await;
    server.stop().await.unwrap();
}
