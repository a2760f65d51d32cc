//! What an operator relies on, tried against the real binary: Prometheus
//! (Debian's, started here) scraping `--metrics` after known traffic and
//! `promtool` linting the exposition, the probes with and without tokens and
//! while a cold start compiles, scrapes that need the metrics token,
//! stderr that stalls without stalling reads, JSON logs that carry no
//! answer of a plugin, `resmux top`, and the console's data for a stdio
//! server.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use resmux_tests::{
    EXCHANGE_TIMEOUT, Folder, RawServer, audit_lines, free_address, http_get, http_post,
    resmux_bin, sample, wait_until_ready,
};
use serde_json::Value;

/// How long Prometheus may take to show a value after the traffic.
const SCRAPED_WITHIN: Duration = Duration::from_secs(60);

fn notes_and_liar() -> Folder {
    let folder = Folder::new();
    folder.plugin("notes", "notes").plugin("liar", "liar");
    folder
}

/// A server on `folder` started by `start` with `args`, serving metrics at
/// the address returned, past its handshake.
async fn metered(
    folder: &Folder,
    start: fn(&Path, &[&str]) -> anyhow::Result<RawServer>,
    args: &[&str],
) -> (RawServer, String) {
    let metrics = free_address();
    let mut args = args.to_vec();
    args.extend(["--metrics", &metrics]);
    let mut server = start(folder.path(), &args).unwrap();
    server.initialize("2025-11-25").await.unwrap();
    (server, metrics)
}

/// Prometheus on loopback, scraping `target` every second; stopped on drop.
struct Prometheus {
    child: std::process::Child,
    address: String,
    _data: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: &str) -> Self {
        let data = tempfile::tempdir().unwrap();
        let config = data.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: resmux\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let address = free_address();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                data.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Debian's prometheus is installed (scripts/test installs it)");
        Self {
            child,
            address,
            _data: data,
        }
    }

    /// Waits until `query` evaluates to `expected` in Prometheus, as
    /// `promtool query instant` prints it.
    async fn expect(&self, query: &str, expected: f64) {
        let deadline = tokio::time::Instant::now() + SCRAPED_WITHIN;
        let mut last = String::new();
        while tokio::time::Instant::now() < deadline {
            let output = self.promtool_query(query);
            last = String::from_utf8_lossy(&output.stdout).into_owned()
                + &String::from_utf8_lossy(&output.stderr);
            let values: Vec<f64> = last
                .lines()
                .filter_map(|line| line.split_once(" => ")?.1.split(' ').next()?.parse().ok())
                .collect();
            if values == [expected] {
                return;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        panic!("{query} never became {expected} in Prometheus; last answer: {last}");
    }

    /// `promtool query instant` of `query` against this Prometheus.
    fn promtool_query(&self, query: &str) -> std::process::Output {
        Command::new("promtool")
            .args([
                "query",
                "instant",
                &format!("http://{}", self.address),
                query,
            ])
            .output()
            .expect("promtool runs")
    }

    /// Asserts that Prometheus evaluates `query` without an error.
    fn query_ok(&self, query: &str) {
        let output = self.promtool_query(query);
        assert!(
            output.status.success(),
            "{query}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn prometheus_scrapes_per_plugin_figures_of_known_traffic() {
    let folder = notes_and_liar();
    let (mut server, metrics) =
        metered(&folder, RawServer::start, &["--response-cache-mib", "0"]).await;
    for _ in 0..5 {
        server.read_text("notes://notes/welcome").await;
    }
    for _ in 0..2 {
        let missing = server.read("notes://notes/nope").await.unwrap();
        assert!(missing["error"].is_object(), "{missing}");
    }
    let trap = "plugin liar trapped in read";
    for _ in 0..3 {
        let trapped = server.read("liar://panic").await.unwrap();
        assert!(
            resmux_tests::error_message(&trapped).contains(trap),
            "{trapped}"
        );
    }
    // Each read that came after a quarantine had ended faulted once more
    // (and started the next quarantine): the figures below count it too.
    let (refused, faulted_again) = server.read_until_quarantined("liar://panic", trap).await;
    assert!(
        refused.contains("path \"panic\" of plugin liar is quarantined"),
        "{refused}"
    );
    let faulted_again = faulted_again as f64;
    let honest = server.read("liar://honest").await.unwrap();
    assert!(honest["result"]["contents"].is_array(), "{honest}");

    let (status, exposition) = http_get(&metrics, "/metrics", &[]).unwrap();
    assert_eq!(status, 200);
    let mut lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    std::io::Write::write_all(&mut lint.stdin.take().unwrap(), exposition.as_bytes()).unwrap();
    let linted = lint.wait_with_output().unwrap();
    assert!(
        linted.status.success() && linted.stdout.is_empty() && linted.stderr.is_empty(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&linted.stdout),
        String::from_utf8_lossy(&linted.stderr)
    );
    // The instance that answered the reads of notes is kept, until the
    // expiry seen through Prometheus below.
    let idle_notes = exposition
        .lines()
        .find_map(|line| line.strip_prefix("resmux_plugin_idle_instances{plugin=\"notes\"} "));
    assert_eq!(idle_notes, Some("1"), "{exposition}");
    // Bounded labels: no URI or path of a read is a label value.
    for leaked in ["welcome", "nope", "\"panic\"", "honest"] {
        assert!(!exposition.contains(leaked), "{leaked} in {exposition}");
    }

    let prometheus = Prometheus::start(&metrics);
    let calls = |outcome: &str, plugin: &str| {
        format!(
            "resmux_plugin_calls_total{{plugin=\"{plugin}\",operation=\"read\",outcome=\"{outcome}\"}}"
        )
    };
    prometheus.expect(&calls("ok", "notes"), 5.0).await;
    prometheus.expect(&calls("not-found", "notes"), 2.0).await;
    prometheus
        .expect(&calls("fault", "liar"), 3.0 + faulted_again)
        .await;
    prometheus.expect(&calls("quarantined", "liar"), 1.0).await;
    prometheus.expect(&calls("ok", "liar"), 1.0).await;
    prometheus
        .expect(
            "resmux_plugin_faults_total{plugin=\"liar\",kind=\"trap\"}",
            3.0 + faulted_again,
        )
        .await;
    prometheus
        .expect(
            "resmux_plugin_quarantines_total{plugin=\"liar\",scope=\"path\"}",
            1.0 + faulted_again,
        )
        .await;
    prometheus
        .expect("resmux_plugin_quarantined{plugin=\"liar\"}", 0.0)
        .await;
    prometheus
        .expect(
            "resmux_plugin_read_bytes_total{plugin=\"notes\"}",
            5.0 * 74.0,
        )
        .await;
    prometheus
        .expect(
            "resmux_plugin_call_duration_seconds_count{plugin=\"notes\",operation=\"read\"}",
            7.0,
        )
        .await;
    prometheus
        .expect(
            "sum(mcp_server_operation_duration_seconds_count{mcp_method_name=\"resources/read\"})",
            12.0 + faulted_again,
        )
        .await;
    prometheus
        .expect(
            "mcp_server_operation_duration_seconds_count{mcp_method_name=\"resources/read\",error_type=\"\"}",
            6.0,
        )
        .await;
    prometheus
        .expect(
            "resmux_client_requests_total{client=\"local\",mcp_method_name=\"resources/read\"}",
            12.0 + faulted_again,
        )
        .await;
    prometheus.expect("resmux_sessions", 1.0).await;
    // Every query of the shipped Grafana dashboard is valid PromQL over
    // these metrics.
    let dashboard: Value = serde_json::from_slice(
        &std::fs::read(resmux_tests::workspace().join("ops/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let query = target["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "1m");
            prometheus.query_ok(&query);
        }
    }
    // Instances left idle after the reads are dropped once unused for a
    // while.
    prometheus
        .expect("resmux_plugin_instances{plugin=\"notes\"}", 0.0)
        .await;
    prometheus
        .expect("resmux_plugin_idle_instances{plugin=\"notes\"}", 0.0)
        .await;
    prometheus
        .expect(
            "resmux_plugin_peak_memory_bytes{plugin=\"notes\"} > bool 0",
            1.0,
        )
        .await;
    server.stop().await.unwrap();
}

/// The token scrapes of `/metrics` carry in these tests.
const METRICS_TOKEN: &str = "the-metrics-token-0123456789";

#[tokio::test]
async fn probes_answer_without_a_token_while_mcp_and_metrics_need_theirs() {
    let folder = notes_and_liar();
    folder.file(
        "tokens.toml",
        b"[clients.alice]\ntoken = { from_env = \"ALICE_TOKEN\" }\nschemes = [\"*\"]\n",
    );
    folder.file("metrics.token", format!("{METRICS_TOKEN}\n").as_bytes());
    let (mcp, metrics) = (free_address(), free_address());
    let tokens = folder.path().join("tokens.toml");
    let metrics_token = folder.path().join("metrics.token");
    let mut server = tokio::process::Command::new(resmux_bin())
        .args(["serve", "--plugins"])
        .arg(folder.path())
        .args(["--http", &mcp, "--metrics", &metrics, "--tokens"])
        .arg(&tokens)
        .arg("--metrics-token-file")
        .arg(&metrics_token)
        .env("ALICE_TOKEN", "the-secret-of-alice-0123456789")
        .env("RESMUX_CACHE_DIR", resmux_tests::cache_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    wait_until_ready(&metrics).await.unwrap();
    for address in [&metrics, &mcp] {
        let deadline = tokio::time::Instant::now() + EXCHANGE_TIMEOUT;
        while http_get(address, "/healthz", &[]).is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{address} never listened"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            http_get(address, "/healthz", &[]).unwrap(),
            (200, "live\n".to_owned())
        );
        assert_eq!(
            http_get(address, "/readyz", &[]).unwrap(),
            (200, "ready\n".to_owned())
        );
    }
    let (status, _) = http_get(&mcp, "/mcp", &[("Accept", "text/event-stream")]).unwrap();
    assert_eq!(status, 401, "the MCP endpoint still needs a token");
    let (status, _) = http_get(&mcp, "/metrics", &[]).unwrap();
    assert_ne!(status, 200, "metrics are not served on the MCP port");
    assert_eq!(
        http_get(&metrics, "/metrics", &[]).unwrap(),
        (
            401,
            "/metrics needs the metrics token as a bearer token: no bearer token\n".to_owned()
        )
    );
    for wrong in [
        "Bearer the-metrics-token-0123456788",
        "Bearer the-metrics-token-012345678",
        "Basic dGhlLW1ldHJpY3MtdG9rZW4tMDEyMzQ1Njc4OQ==",
    ] {
        let (status, body) = http_get(&metrics, "/metrics", &[("Authorization", wrong)]).unwrap();
        assert_eq!(status, 401, "{wrong}: {body}");
        assert!(!body.contains("resmux_"), "{wrong}: {body}");
    }
    let bearer = format!("Bearer {METRICS_TOKEN}");
    let (status, body) = http_get(
        &metrics,
        "/metrics",
        &[
            ("Accept", "application/openmetrics-text"),
            ("Authorization", bearer.as_str()),
        ],
    )
    .unwrap();
    assert_eq!(status, 200);
    assert!(
        body.ends_with("# EOF\n"),
        "OpenMetrics when asked for: {body}"
    );

    // `resmux top` scrapes with the token it is given, and says what is
    // missing without it.
    let top = |token: Option<&Path>| {
        let mut command = Command::new(resmux_bin());
        command.args(["top", &metrics, "--once", "--interval", "0.1"]);
        if let Some(token) = token {
            command.arg("--token-file").arg(token);
        }
        command.output().unwrap()
    };
    let refused = top(None);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("answered 401 Unauthorized: give the metrics token with --token-file"),
        "{stderr}"
    );
    let shown = top(Some(&metrics_token));
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(String::from_utf8_lossy(&shown.stdout).contains("PLUGIN"));
    server.kill().await.unwrap();
}

/// A 2025-11-25 `initialize` request, as an HTTP client posts it.
const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

#[tokio::test]
async fn initialize_is_answered_at_once_and_readiness_waits_for_the_folder() {
    // The JavaScript component takes seconds to compile afresh: the MCP port
    // and the probes listen from the start, `initialize` is answered while
    // it compiles, and /readyz says loading until it has arrived.
    let folder = Folder::new();
    folder.plugin("catalog", "catalog");
    let (mcp, metrics) = (free_address(), free_address());
    let empty_cache = tempfile::tempdir().unwrap();
    let server = RawServer::start_with_env(
        folder.path(),
        &["--http", &mcp, "--metrics", &metrics],
        &[("RESMUX_CACHE_DIR", empty_cache.path().to_str().unwrap())],
    )
    .unwrap();
    let deadline = tokio::time::Instant::now() + EXCHANGE_TIMEOUT;
    let first = loop {
        if let Ok(answer) = http_get(&mcp, "/readyz", &[]) {
            break answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{mcp} never listened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(first, (503, "loading\n".to_owned()));
    let (status, answer) = http_post(
        &mcp,
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        INITIALIZE,
    )
    .unwrap();
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("\"serverInfo\""), "{answer}");
    for address in [&mcp, &metrics] {
        assert_eq!(
            http_get(address, "/readyz", &[]).unwrap(),
            (503, "loading\n".to_owned()),
            "{address}: the component was still compiling when initialize was answered"
        );
        assert_eq!(
            http_get(address, "/healthz", &[]).unwrap(),
            (200, "live\n".to_owned())
        );
    }
    for address in [&mcp, &metrics] {
        wait_until_ready(address).await.unwrap();
        assert_eq!(
            http_get(address, "/readyz", &[]).unwrap(),
            (200, "ready\n".to_owned())
        );
    }
    server.kill().await.unwrap();
}

#[tokio::test]
async fn a_plugin_faulting_in_its_listing_shows_quarantined_and_cached_reads_show_as_hits() {
    let folder = notes_and_liar();
    folder.manifest(
        "liar",
        "[config]\nlist = \"spin\"\n[limits]\ncpu_ms = 20\ntimeout_ms = 2000\n",
    );
    // Without the response cache, each listing asks the plugin.
    let (mut server, metrics) =
        metered(&folder, RawServer::start, &["--response-cache-mib", "0"]).await;
    let quarantined = "resmux_plugin_quarantined{plugin=\"liar\"}";
    assert_eq!(sample(&metrics, quarantined), Some(0.0));
    // The third listing's fault starts the first quarantine, of one second,
    // between the moment the listing is sent and its answer.
    let mut third_listing = None;
    for _ in 0..3 {
        let sent = std::time::Instant::now();
        let listed = server
            .request("resources/list", serde_json::json!({}))
            .await
            .unwrap();
        assert!(listed["result"]["resources"].is_array(), "{listed}");
        third_listing = Some((sent, std::time::Instant::now()));
    }
    let (sent, answered) = third_listing.unwrap();
    let scrape_began = std::time::Instant::now();
    let seen = sample(&metrics, quarantined);
    let scrape_ended = std::time::Instant::now();
    // The gauge says 1 in a scrape surely within the quarantine, 0 in one
    // surely after it, and either in one that a loaded machine let
    // straddle its end.
    let quarantine = Duration::from_secs(1);
    if scrape_ended < sent + quarantine {
        assert_eq!(seen, Some(1.0), "scraped within the quarantine");
    } else if scrape_began >= answered + quarantine {
        assert_eq!(seen, Some(0.0), "scraped after the quarantine");
    } else {
        assert!(
            seen == Some(1.0) || seen == Some(0.0),
            "scraped around the end of the quarantine: {seen:?}"
        );
    }
    assert_eq!(
        sample(
            &metrics,
            "resmux_plugin_quarantines_total{plugin=\"liar\",scope=\"plugin\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &metrics,
            "resmux_plugin_faults_total{plugin=\"liar\",kind=\"cpu\"}"
        ),
        Some(3.0)
    );

    server.stop().await.unwrap();

    // Two reads of a resource cacheable for a minute: one miss, one hit.
    let (mut server, metrics) = metered(&folder, RawServer::start, &[]).await;
    let first = server.read_text("notes://notes/welcome").await;
    assert_eq!(server.read_text("notes://notes/welcome").await, first);
    let read_lookups = |outcome: &str| {
        sample(
            &metrics,
            &format!("resmux_response_cache_{outcome}_total{{kind=\"read\"}}"),
        )
    };
    assert_eq!(read_lookups("misses"), Some(1.0));
    assert_eq!(read_lookups("hits"), Some(1.0));
    assert_eq!(
        sample(
            &metrics,
            "resmux_plugin_calls_total{plugin=\"notes\",operation=\"read\",outcome=\"ok\"}"
        ),
        Some(1.0)
    );
    assert!(sample(&metrics, "resmux_response_cache_bytes").unwrap() > 0.0);
    server.stop().await.unwrap();
}

#[tokio::test]
async fn a_stalled_log_reader_does_not_stall_reads() {
    let folder = notes_and_liar();
    let (mut server, metrics) = metered(
        &folder,
        RawServer::start_stalling_stderr,
        &["--response-cache-mib", "0"],
    )
    .await;
    // A flood logs 64 KiB of each of the plugin's two streams (the cap of
    // one call): past the 64 KiB pipe nobody drains. Chatter logs thousands
    // of short lines: past the log writer's buffer of 16,384 lines.
    let chatter = std::iter::repeat_n("liar://chatter", 6);
    for uri in ["liar://flood", "liar://flood"].into_iter().chain(chatter) {
        let answered = tokio::time::timeout(EXCHANGE_TIMEOUT, server.read(uri))
            .await
            .expect("a read while stderr is stalled")
            .unwrap();
        assert_eq!(answered["result"]["contents"][0]["uri"], uri, "{answered}");
    }
    let welcome = tokio::time::timeout(EXCHANGE_TIMEOUT, server.read_text("notes://notes/welcome"))
        .await
        .expect("a read of another plugin while stderr is stalled");
    assert!(welcome.starts_with("# Welcome"), "{welcome}");
    let dropped =
        sample(&metrics, "resmux_log_lines_dropped_total").expect("the dropped-lines counter");
    assert!(dropped > 1000.0, "{dropped} log lines dropped");
}

#[tokio::test]
async fn json_logs_are_objects_and_carry_no_answer_even_at_debug() {
    let folder = notes_and_liar();
    let mut server = RawServer::start(
        folder.path(),
        &["--log-format", "json", "--log-level", "debug"],
    )
    .unwrap();
    server.initialize("2025-11-25").await.unwrap();
    let welcome = server.read_text("notes://notes/welcome").await;
    let honest = server.read("liar://honest").await.unwrap();
    assert!(honest["result"]["contents"].is_array(), "{honest}");
    let log = server.stop().await.unwrap();
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .collect();
    for line in &lines {
        for field in ["timestamp", "level", "target"] {
            assert!(line[field].is_string(), "{field} missing: {line}");
        }
    }
    assert!(
        lines.iter().any(|line| line["target"] == "resmux::plugin"
            && line["stream"] == "stderr"
            && line["message"]
                .as_str()
                .unwrap_or("")
                .contains("liar says hello on stderr")),
        "the plugin's own output is logged: {log}"
    );
    let first_line = welcome.lines().next().unwrap();
    assert!(
        !log.contains(first_line),
        "an answer reached the log: {log}"
    );
    assert!(
        lines.iter().any(|line| line["level"] == "DEBUG"),
        "debug lines are written: {log}"
    );
}

#[tokio::test]
async fn top_shows_each_plugins_figures() {
    let folder = notes_and_liar();
    let (mut server, metrics) =
        metered(&folder, RawServer::start, &["--response-cache-mib", "0"]).await;
    server.read_text("notes://notes/welcome").await;
    // Reads go on for as long as top runs, so its interval sees them.
    let mut top = tokio::process::Command::new(resmux_bin())
        .args(["top", &metrics, "--once", "--interval", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reads = 0;
    while top.try_wait().unwrap().is_none() {
        server.read_text("notes://notes/welcome").await;
        reads += 1;
    }
    let output = top.wait_with_output().await.unwrap();
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(reads > 0);
    let notes = table
        .lines()
        .find(|line| line.starts_with("notes "))
        .unwrap_or_else(|| panic!("no row for notes: {table}"));
    let columns: Vec<&str> = notes.split_whitespace().collect();
    let calls_per_second: f64 = columns[1].parse().unwrap();
    assert!(calls_per_second > 0.0, "{table}");
    assert!(
        columns[2].starts_with('≤') && columns[3].starts_with('≤'),
        "{table}"
    );
    assert_eq!(columns[4], "0", "{table}");
    assert_eq!(columns.last(), Some(&"serving"), "{table}");
    server.stop().await.unwrap();

    let unreachable = Command::new(resmux_bin())
        .args(["top", &free_address(), "--once"])
        .output()
        .unwrap();
    assert!(!unreachable.status.success());
    assert!(
        String::from_utf8_lossy(&unreachable.stderr).contains("is resmux serving with --metrics?"),
        "{}",
        String::from_utf8_lossy(&unreachable.stderr)
    );
}

#[test]
fn the_shipped_catalog_passes_check_and_an_unreachable_api_is_a_warning() {
    let built = resmux_tests::workspace().join("target/plugins");
    let shipped = resmux_tests::resmux(&["check", built.join("catalog.wasm").to_str().unwrap()]);
    let report = String::from_utf8_lossy(&shipped.stdout);
    assert!(shipped.status.success(), "{report}");
    assert!(
        report.contains("ok    list: 3 valid resources on 1 page(s)"),
        "{report}"
    );
    assert!(
        report.contains("ok    read catalog://items/apples: "),
        "{report}"
    );
    assert!(
        report.ends_with(" passed, 0 warnings, 0 failed\n"),
        "{report}"
    );

    let folder = Folder::new();
    folder.plugin("catalog", "catalog");
    let closed = free_address();
    folder.manifest(
        "catalog",
        &format!("[config]\napi = \"http://{closed}\"\n[network]\nallow = [\"http://{closed}\"]\n"),
    );
    let down = resmux_tests::resmux(&[
        "check",
        folder.path().join("catalog.wasm").to_str().unwrap(),
    ]);
    let report = String::from_utf8_lossy(&down.stdout);
    assert!(down.status.success(), "{report}");
    assert!(
        report.contains(&format!(
            "WARN  resource page 1: unavailable: cannot reach http://{closed}/items"
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!(
            "WARN  complete catalog://items/{{id}} id from \"\": unavailable: cannot reach http://{closed}/items"
        )),
        "{report}"
    );
    assert!(
        report.ends_with("5 passed, 2 warnings, 0 failed\n"),
        "{report}"
    );
}

#[tokio::test]
async fn the_console_shows_a_stdio_server_its_plugins_and_its_audited_reads() {
    let folder = notes_and_liar();
    // Over stdio only the process that started resmux may read: without
    // the console token the console shows nothing.
    let (open, metrics) = metered(&folder, RawServer::start, &[]).await;
    let (status, body) = http_get(&metrics, "/console/api/state", &[]).unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(
            "over stdio only the process that started resmux may, so it needs --console-token-file"
        ),
        "{body}"
    );
    open.stop().await.unwrap();

    folder
        .file("console-token", b"console-token-0123456789\n")
        .file("metrics-token", format!("{METRICS_TOKEN}\n").as_bytes());
    let audit = folder.path().join("audit.log");
    let argument = |name: &str| folder.path().join(name).display().to_string();
    let (audit_arg, token_arg, metrics_token_arg) = (
        argument("audit.log"),
        argument("console-token"),
        argument("metrics-token"),
    );
    let (mut server, metrics) = metered(
        &folder,
        RawServer::start,
        &[
            "--audit-log",
            &audit_arg,
            "--response-cache-mib",
            "0",
            "--console-token-file",
            &token_arg,
            "--metrics-token-file",
            &metrics_token_arg,
        ],
    )
    .await;
    let bearer = [("Authorization", "Bearer console-token-0123456789")];
    // A scraper's token reads nothing through the console, and the
    // console's opens no scrape.
    let scraper = format!("Bearer {METRICS_TOKEN}");
    let (status, body) = http_get(
        &metrics,
        "/console/api/state",
        &[("Authorization", &scraper)],
    )
    .unwrap();
    assert_eq!(
        (status, body.as_str()),
        (
            401,
            "/console/api/state needs the console token as a bearer token: the bearer token is not the console token\n"
        )
    );
    let (status, body) = http_get(&metrics, "/metrics", &bearer).unwrap();
    assert_eq!(
        (status, body.as_str()),
        (
            401,
            "/metrics needs the metrics token as a bearer token: the bearer token is not the metrics token\n"
        )
    );
    let text = server.read_text("notes://notes/welcome").await;
    assert!(text.starts_with("# Welcome"), "{text}");

    let (status, body) = http_get(&metrics, "/console/api/state", &bearer).unwrap();
    assert_eq!(status, 200, "{body}");
    let state: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(state["server"]["transport"], "stdio", "{state}");
    assert_eq!(state["server"]["audited"], true, "{state}");
    let states: Vec<(&str, &str)> = state["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|plugin| {
            (
                plugin["scheme"].as_str().unwrap(),
                plugin["state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(states, [("liar", "serving"), ("notes", "serving")]);
    let allowed = format!(
        "local allow read notes://notes/welcome via resources/read: ok, {} bytes",
        text.len()
    );
    let events = state["events"].as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|event| event["kind"] == "allowed" && event["text"] == allowed.as_str()),
        "{state}"
    );

    // A read from the console answers as MCP does, and is audited as the
    // console's.
    let (status, body) = http_get(
        &metrics,
        "/console/api/read?uri=notes://notes/welcome",
        &bearer,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let read: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(read["decision"]["guarded"], false, "{read}");
    assert_eq!(read["result"]["contents"][0]["text"], text, "{read}");
    let lines = audit_lines(&audit, 2).await;
    let vias: Vec<&str> = lines
        .iter()
        .map(|line| line["via"].as_str().unwrap())
        .collect();
    assert_eq!(vias, ["resources/read", "console"], "{lines:?}");

    // A client's name on a server without tokens names nobody.
    let (status, body) = http_get(&metrics, "/console/api/resources?as=alice", &bearer).unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no client can be named"), "{body}");
    // stdout still carries the protocol only.
    let text = server.read_text("notes://notes/welcome").await;
    assert!(text.starts_with("# Welcome"), "{text}");
    server.stop().await.unwrap();
}
