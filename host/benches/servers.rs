//! resmux side by side with other MCP servers, in one run, printed as
//! markdown tables, each goal of issue 27 beside its figure:
//!
//! 1. **Reads** (`reads`): one raw JSON-RPC driver reads one static text
//!    resource for 3 s after a 0.5 s warm-up, with 32 reads in flight and
//!    again one at a time (over HTTP: that many keep-alive connections, one
//!    request in flight each), from a trivial native echo server (this
//!    binary, re-executed with `RESMUX_BENCH_ECHO=stdio` or `=http`), the
//!    same echo relayed (`=stdio-relayed`, `=http-relayed`: each request,
//!    once decoded, answered on a runtime of its own, as resmux answers a
//!    read on the plugins' threads: the ceiling of a read under that rule),
//!    the TypeScript reference server (`server-everything` under Node 22,
//!    from `tests/node`) and `resmux serve` with the response cache off: over
//!    stdio, over HTTP in a 2025-06-18 session and over HTTP 2026-07-28
//!    stateless (the reference has no stateless era). Every case runs once
//!    per round, in turn, three rounds (the machine's speed swings); reports
//!    each case's median round (reads/s, p50, p99, server CPU µs per read),
//!    and ratios per round with their median: reads/s against the others
//!    (goal: resmux's stdio ≥ 0.8 of echo's with 32 in flight), resmux's
//!    HTTP CPU per read against echo's HTTP (goal ≤ 1.5) and its own stdio,
//!    in both eras and at both loads, and its stateless read against its
//!    session read (goal ≤ 1).
//! 2. **Languages** (`languages`): every example plugin served alone, with
//!    its manifest and sample data, read over stdio with 32 in flight beside
//!    the TypeScript reference and a native Python MCP SDK server, and
//!    `notes` once more with a directory grant it does not use; goals:
//!    JavaScript ≥ the reference, a grant costs at most 1.5x, Python ≥ 2x
//!    the Python SDK.
//! 3. **Listing walk** (`listing`): 10 mounts of the `files` example, each
//!    on its own tree of N/10 small files, nested (100 files a directory)
//!    or flat (one directory), N = 10k and 100k; after one untimed first
//!    page, three whole `resources/list` walks on the same server: the
//!    first, and the faster of the two repeats (goals: a repeat costs at
//!    most half the first; per resource, 100k within 1.2x of 10k).
//! 4. **Idle memory** (`memory`): VmRSS of a served folder after a walk and
//!    one read per mount, for one more mount of a loaded component and for a
//!    distinct small Rust plugin.
//! 5. **Restart** (`restart`): spawn to the end of a first complete listing
//!    of every example plus 16 `files` mounts, with a warm compile cache.
//! 6. **Idle CPU** (`idle`): the examples served over stdio, once loaded and
//!    12 s quiet (idle instances expire after 10 s), then 30 s without a
//!    message: CPU time as % of one core (goal < 0.5%) and context switches;
//!    again with a copy of the largest component added under another name.
//! 7. **Cold start** (`cold`): spawn to the answer of `initialize` (goal
//!    < 1 s) and to the first listing that names every scheme of the
//!    examples, on an empty compile cache and on the warm one; and the wall
//!    time of `resmux compile` of the examples into an empty cache.
//! 8. **Tiers** (`tiers`, the resmux under test only): `resmux serve
//!    --tiers both` (Winch first, Cranelift in the background) beside
//!    `--tiers optimized` (Cranelift alone), each plugin's tier read from
//!    `resmux_plugin_tier` on the `--metrics` listener: spawn to a complete
//!    listing of the examples on an empty compile cache (goal < 2 s with
//!    both) and on to every plugin optimized, with each plugin's
//!    `resmux_plugin_compile_seconds`; `dataset` dropped into a live folder
//!    of `notes`, to its first answered read (goal < 2 s with both); reads
//!    of `dataset` and `conformance` over stdio, 32 in flight and one at a
//!    time, on Winch's code alone (`--tiers baseline`), with both tiers
//!    after the move and on Cranelift alone (goal: after the move ≥ 0.95 of
//!    Cranelift alone); and reads of `conformance` while `dataset`,
//!    `catalog` and `units` compile in the background, against the same
//!    once every plugin is optimized (goal ≥ 0.80). Median of 3 runs each;
//!    the reads on each tier run `RESMUX_BENCH_READ_ROUNDS` rounds.
//! 9. **Replicas** (`replicas`): 64 HTTP clients (2026-07-28 stateless,
//!    one read in flight each) read `notes` for 60 s
//!    (`RESMUX_BENCH_REPLICA_SECS`) from one replica, then from three
//!    behind haproxy with `deploy/haproxy.cfg`, while another plugin of
//!    each replica's folder is replaced every 100 ms; a failed read stops
//!    the bench.
//!
//! Run everything with `scripts/bench` (installs the Node peers, builds, runs
//! this). By hand, after `scripts/build` and `npm ci` in `tests/node`:
//! `cargo bench -p resmux --bench servers`. The Python SDK server runs on
//! `target/python/bin/python` (made by `scripts/test`, with `mcp`); without
//! it that row is left out, and said so.
//!
//! Environment: `RESMUX_BENCH_BIN` serves with another resmux binary;
//! `RESMUX_BENCH_BASELINE=/path/to/resmux` runs every resmux case again with
//! that binary (labelled `resmux baseline`) and the plugins of
//! `RESMUX_BENCH_BASELINE_PLUGINS` (default `target/plugins`; give its own
//! build, whose manifests it accepts). A baseline is taken to load every
//! plugin before it answers: its first listing counts as complete, its
//! compile cache fills as it serves (it may have no `resmux compile`), and
//! the manifests written for it leave out `listing_follows_files`.
//! `RESMUX_BENCH_READ_ROUNDS` sets the rounds of reads, languages and the
//! reads on each tier;
//! `RESMUX_BENCH_READ_SECS` measures every read case (of reads, languages
//! and tiers) for that many seconds (default 3);
//! `RESMUX_BENCH_READ_SERVERS=echo,relayed,reference,resmux,baseline`
//! and `RESMUX_BENCH_READ_WAYS=stdio,session,stateless` keep only those
//! servers and ways in the reads section (to profile one case with `perf`);
//! `RESMUX_BENCH_RELAY_WORKERS=ANSWERING,PROTOCOL` shapes the relayed
//! echo's two runtimes (default: as resmux's on the machine);
//! `RESMUX_BENCH_EXAMPLES=notes,kv,reference,python` keeps only those examples
//! (by name), the TypeScript reference and the Python SDK server in the
//! languages section;
//! `RESMUX_BENCH_LIST_MAX` caps N of the listing walk;
//! `RESMUX_BENCH_ONLY=reads,languages,listing,memory,restart,idle,cold,tiers,replicas`
//! runs only those sections.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

const IN_FLIGHT: usize = 32;
/// The loads of the read cases: [`IN_FLIGHT`] reads at once, and one at a
/// time.
const LOADS: [usize; 2] = [IN_FLIGHT, 1];
const WARM_UP: Duration = Duration::from_millis(500);
const RUN_FOR: Duration = Duration::from_secs(3);
/// How long a server may take to start answering, or to list every scheme.
const START_WITHIN: Duration = Duration::from_secs(120);
/// How often a listing that lacks a scheme is walked again.
const POLL_EVERY: Duration = Duration::from_millis(50);
const LIST_SIZES: [usize; 2] = [10_000, 100_000];
const LIST_MOUNTS: usize = 10;
const FILES_PER_DIRECTORY: usize = 100;
const EXTRA_MOUNTS: usize = 16;
const RESTARTS: usize = 3;
/// Quiet time before the idle window: idle instances expire after 10 s.
const IDLE_SETTLE: Duration = Duration::from_secs(12);
const IDLE_WINDOW: Duration = Duration::from_secs(30);
/// Reads made, [`IN_FLIGHT`] at a time, before the idle case's last row is
/// measured: how quiet a server falls after load.
const IDLE_AFTER_READS: u64 = 50_000;
/// Quiet time after those reads before the idle window.
const IDLE_SETTLE_AFTER_READS: Duration = Duration::from_secs(30);

/// What resmux and the echo server serve: the conformance plugin's fixture.
const RESMUX_URI: &str = "test://static-text";
const ECHO_TEXT: &str = "This is the content of the static text resource.";
/// The smallest static text document of `server-everything` (965 bytes).
const REFERENCE_URI: &str = "demo://resource/static/document/extension.md";
/// What the Python SDK server serves: [`ECHO_TEXT`].
const PYTHON_SDK_URI: &str = "bench://static-text";
const STATELESS_VERSION: &str = "2026-07-28";
const SESSION_VERSION: &str = "2025-06-18";

const ECHO: &str = "echo (native)";
const ECHO_RELAYED: &str = "echo relayed (native, answers on another runtime)";
const REFERENCE: &str = "TypeScript reference";
const PYTHON_SDK: &str = "Python SDK (native)";

/// A native Python MCP SDK server of one static text resource, over stdio.
const PYTHON_SDK_SERVER: &str = r#"try:
    from mcp.server.mcpserver import MCPServer
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as MCPServer

server = MCPServer("python-sdk-bench", log_level="WARNING")


@server.resource("bench://static-text", mime_type="text/plain")
def static_text() -> str:
    return "This is the content of the static text resource."


server.run()
"#;

fn main() {
    if let Ok(mode) = std::env::var("RESMUX_BENCH_ECHO") {
        return echo::serve(&mode);
    }
    // `cargo bench` passes `--bench`; anything else (like `cargo test`) skips.
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let setup = Setup::from_env();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let only = std::env::var("RESMUX_BENCH_ONLY").unwrap_or_default();
    let run = |section: &str| only.is_empty() || only.split(',').any(|name| name == section);
    runtime.block_on(async {
        if run("reads") {
            reads(&setup).await;
        }
        if run("languages") {
            languages(&setup).await;
        }
        if run("listing") {
            listing(&setup).await;
        }
        if run("memory") {
            memory(&setup).await;
        }
        if run("restart") {
            restart(&setup).await;
        }
        if run("idle") {
            idle(&setup).await;
        }
        if run("cold") {
            cold(&setup).await;
        }
        if run("tiers") {
            tiers(&setup).await;
        }
        if run("replicas") {
            replicas(&setup).await;
        }
    });
}

// ---------------------------------------------------------------- setup

/// The repository's paths and the resmux binaries under test.
struct Setup {
    root: PathBuf,
    resmuxes: Vec<Resmux>,
}

/// One resmux binary, the example plugins it serves, and its compile cache.
struct Resmux {
    label: &'static str,
    binary: PathBuf,
    plugins: PathBuf,
    cache: TempDir,
    /// The resmux under test rather than the baseline: it knows this
    /// branch's manifest keys (a baseline refuses keys it does not know)
    /// and `resmux compile`.
    current: bool,
}

impl Setup {
    fn from_env() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf();
        let plugins = root.join("target/plugins");
        let binary = std::env::var_os("RESMUX_BENCH_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_resmux").into());
        let mut resmuxes = vec![Resmux::new("resmux", binary, plugins.clone(), true)];
        if let Some(baseline) = std::env::var_os("RESMUX_BENCH_BASELINE") {
            let baseline_plugins = std::env::var_os("RESMUX_BENCH_BASELINE_PLUGINS")
                .map(PathBuf::from)
                .unwrap_or(plugins);
            resmuxes.push(Resmux::new(
                "resmux baseline",
                baseline.into(),
                baseline_plugins,
                false,
            ));
        }
        Self { root, resmuxes }
    }

    fn node(&self) -> PathBuf {
        self.root.join("tests/node/node_modules/.bin/node")
    }

    fn reference_server(&self) -> PathBuf {
        self.root
            .join("tests/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
    }

    /// The virtualenv of the Python tests, with the `mcp` SDK.
    fn python(&self) -> PathBuf {
        self.root.join("target/python/bin/python")
    }

    /// The resmux under test.
    fn resmux(&self) -> &Resmux {
        &self.resmuxes[0]
    }
}

impl Resmux {
    fn new(label: &'static str, binary: PathBuf, plugins: PathBuf, current: bool) -> Self {
        assert!(binary.exists(), "no resmux at {}", binary.display());
        for name in ["conformance", "files", "notes"] {
            let wasm = plugins.join(format!("{name}.wasm"));
            assert!(wasm.exists(), "no {}: run scripts/build", wasm.display());
        }
        Self {
            label,
            binary,
            plugins,
            cache: temp_dir(),
            current,
        }
    }

    /// `resmux serve` on `folder`, with the response cache off.
    fn serve(&self, folder: &Path, cache: &Path, extra: &[&str]) -> std::process::Command {
        let mut command = server_command(&self.binary);
        command
            .arg("serve")
            .arg("--plugins")
            .arg(folder)
            .args(["--response-cache-mib", "0"])
            .args(extra)
            .env("RESMUX_CACHE_DIR", cache);
        command
    }

    /// Runs `resmux compile` of `folder` into `cache`; how long it took.
    async fn compile(&self, folder: &Path, cache: &Path) -> Duration {
        let mut command = server_command(&self.binary);
        command
            .arg("compile")
            .arg(folder)
            .env("RESMUX_CACHE_DIR", cache);
        let started = Instant::now();
        let output = tokio::process::Command::from(command)
            .output()
            .await
            .unwrap_or_else(|error| panic!("{} compile starts: {error}", self.binary.display()));
        let elapsed = started.elapsed();
        assert!(
            output.status.success(),
            "{} compile {} failed: {}",
            self.binary.display(),
            folder.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        elapsed
    }

    /// Compiles the examples into its cache ahead of the cases that serve
    /// them, so that none waits for a plugin still compiling. Only the
    /// resmux under test has `resmux compile`; a baseline compiles as it
    /// starts, and the cases wait until it answers.
    async fn fill_cache(&self) {
        if self.current {
            progress(&format!("{}: compiling the examples", self.label));
            self.compile(&self.plugins, self.cache.path()).await;
        }
    }

    fn plugin(&self, name: &str) -> PathBuf {
        self.plugins.join(name)
    }

    /// The schemes a complete listing of `folder` names: all of the
    /// folder's for the resmux under test, which lists each plugin once it
    /// has compiled; none for a baseline, which loads every plugin it
    /// accepts before it answers (so its first walk is complete), and may
    /// refuse manifests of this branch.
    fn expected_schemes(&self, folder: &Path) -> BTreeSet<String> {
        if self.current {
            schemes_of(folder)
        } else {
            BTreeSet::new()
        }
    }
}

fn temp_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("resmux-bench-")
        .tempdir()
        .unwrap()
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to)
        .unwrap_or_else(|error| panic!("copy {} to {}: {error}", from.display(), to.display()));
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            copy(&entry.path(), &target);
        }
    }
}

/// The schemes `folder` serves: each manifest's `scheme`, else its name,
/// and the name of each component without a manifest.
fn schemes_of(folder: &Path) -> BTreeSet<String> {
    let mut schemes = BTreeSet::new();
    for entry in std::fs::read_dir(folder).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.file_stem().and_then(|stem| stem.to_str()) else {
            continue;
        };
        match path.extension().and_then(|extension| extension.to_str()) {
            Some("toml") => {
                let text = std::fs::read_to_string(&path).unwrap();
                let manifest: toml::Table = toml::from_str(&text)
                    .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
                let scheme = manifest.get("scheme").and_then(toml::Value::as_str);
                schemes.insert(scheme.unwrap_or(name).to_owned());
            }
            Some("wasm") if !path.with_extension("toml").exists() => {
                schemes.insert(name.to_owned());
            }
            _ => {}
        }
    }
    schemes
}

/// Mounts `component` (already in `folder`) as `m00`..: each a tiny directory
/// of its own holding `hello.txt`. Returns one URI per mount.
fn add_file_mounts(folder: &Path, component: &str, count: usize) -> Vec<String> {
    (0..count)
        .map(|index| {
            let scheme = format!("m{index:02}");
            let data = folder.join(format!("{scheme}-data"));
            std::fs::create_dir_all(&data).unwrap();
            std::fs::write(data.join("hello.txt"), "hello\n").unwrap();
            write_files_manifest(folder, &scheme, component, &data, 100, false);
            format!("{scheme}://hello.txt")
        })
        .collect()
}

/// `SCHEME.toml` mounting the `files` example `component` on `data`; with
/// `follows_files`, its listing follows the granted files (`[changes]
/// listing_follows_files`, as the shipped `files.toml` says).
fn write_files_manifest(
    folder: &Path,
    scheme: &str,
    component: &str,
    data: &Path,
    page: usize,
    follows_files: bool,
) {
    let mut manifest = format!(
        "component = {component:?}\n\n\
         [[files]]\nhost = {:?}\nguest = \"/data\"\naccess = \"read-only\"\n\n\
         [config]\nroot = \"/data\"\npage_size = {page}\n",
        data.to_str().unwrap()
    );
    if follows_files {
        manifest.push_str("\n[changes]\nlisting_follows_files = true\n");
    }
    std::fs::write(folder.join(format!("{scheme}.toml")), manifest).unwrap();
}

// -------------------------------------------------------------- servers

fn server_command(program: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(program);
    command.env("RUST_LOG", "warn");
    command
}

/// A spawned server; the last lines of its stderr are kept for failures.
struct Server {
    child: Child,
    logs: Arc<Mutex<VecDeque<String>>>,
}

impl Server {
    fn start(command: std::process::Command, stdout: Stdio) -> Self {
        let mut command = tokio::process::Command::from(command);
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(stdout)
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| panic!("{command:?} starts: {error}"));
        let logs = Arc::new(Mutex::new(VecDeque::new()));
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let kept = logs.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                let mut kept = kept.lock().unwrap();
                if kept.len() == 40 {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        Self { child, logs }
    }

    fn fail(&self, what: impl std::fmt::Display) -> ! {
        let logs = self.logs.lock().unwrap();
        let tail: Vec<&str> = logs.iter().map(String::as_str).collect();
        panic!("{what}\nserver stderr:\n{}", tail.join("\n"));
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("the server runs")
    }

    /// Resident memory in KiB.
    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }

    /// CPU time used so far, by every thread, in user and kernel mode.
    fn cpu_time(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // After the command name in parentheses: state is field 3, utime
        // and stime are fields 14 and 15, in USER_HZ (100 on Linux) ticks.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        Duration::from_millis(ticks * 10)
    }

    /// Context switches so far, voluntary or not, summed over the threads
    /// alive now.
    fn context_switches(&self) -> u64 {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid())).unwrap();
        tasks
            .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("status")).ok())
            .map(|status| {
                status
                    .lines()
                    .filter_map(|line| {
                        line.strip_prefix("voluntary_ctxt_switches:")
                            .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                    })
                    .filter_map(|count| count.trim().parse::<u64>().ok())
                    .sum::<u64>()
            })
            .sum()
    }

    async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// How a server expects its requests.
#[derive(Clone, Copy)]
enum Dialect {
    /// 2026-07-28: no initialize, the protocol version in every request.
    Stateless(&'static str),
    /// Up to 2025-11-25: initialize first; over HTTP, a session.
    Session(&'static str),
}

impl Dialect {
    fn uri(self) -> &'static str {
        match self {
            Self::Stateless(uri) | Self::Session(uri) => uri,
        }
    }

    fn request(self, id: u64, method: &str, mut params: Value) -> Value {
        if let Self::Stateless(_) = self {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
            });
        }
        json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
    }

    fn read(self, id: u64) -> Value {
        self.request(id, "resources/read", json!({ "uri": self.uri() }))
    }

    /// The headers of a read over HTTP, besides the session's.
    fn read_headers(self) -> Vec<(&'static str, String)> {
        match self {
            Self::Stateless(uri) => vec![
                ("mcp-method", "resources/read".into()),
                ("mcp-name", uri.into()),
                ("mcp-protocol-version", STATELESS_VERSION.into()),
            ],
            Self::Session(_) => vec![("mcp-protocol-version", SESSION_VERSION.into())],
        }
    }
}

fn initialize() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": SESSION_VERSION,
            "capabilities": {},
            "clientInfo": { "name": "resmux-bench", "version": "0" }
        }
    })
}

fn initialized() -> Value {
    json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })
}

/// Whether `response` is a read's answer with text.
fn is_read(response: &Value) -> bool {
    response["result"]["contents"][0]["text"].is_string()
}

/// A free port on loopback, for servers told where to listen.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

// ----------------------------------------------------------------- stdio

/// A server spoken to over its stdin and stdout, one JSON message a line.
struct Pipe {
    server: Server,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    /// Whether requests are in the 2026-07-28 dialect: until a session
    /// opens.
    stateless: bool,
}

impl Pipe {
    fn start(command: std::process::Command) -> Self {
        let mut server = Server::start(command, Stdio::piped());
        let stdin = server.child.stdin.take().unwrap();
        let stdout = BufReader::new(server.child.stdout.take().unwrap()).lines();
        Self {
            server,
            stdin,
            stdout,
            next_id: 1_000_000_000,
            stateless: true,
        }
    }

    async fn send(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        if let Err(error) = self.stdin.write_all(line.as_bytes()).await {
            self.server.fail(format!("writing to the server: {error}"));
        }
    }

    /// The next response (messages from the server with a method are skipped).
    async fn receive(&mut self) -> Value {
        loop {
            let line = match self.stdout.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => self.server.fail("the server closed its stdout"),
                Err(error) => self.server.fail(format!("reading the server: {error}")),
            };
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|error| self.server.fail(format!("{error}: {line}")));
            if message.get("id").is_some() && message.get("method").is_none() {
                return message;
            }
        }
    }

    /// Sends one request and waits for its response.
    async fn call(&mut self, request: Value) -> Value {
        let id = request["id"].clone();
        self.send(&request).await;
        loop {
            let response = self.receive().await;
            if response["id"] == id {
                return response;
            }
        }
    }

    /// `method` in the pipe's dialect; its result, or a failure.
    async fn result(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let dialect = if self.stateless {
            Dialect::Stateless("")
        } else {
            Dialect::Session("")
        };
        let mut response = self
            .call(dialect.request(self.next_id, method, params))
            .await;
        match response.get_mut("result") {
            Some(result) => result.take(),
            None => self.server.fail(format!("{method}: {response}")),
        }
    }

    /// `initialize`, answered, then `notifications/initialized`.
    async fn open_session(&mut self) {
        let response = self.call(initialize()).await;
        if response.get("result").is_none() {
            self.server.fail(format!("initialize: {response}"));
        }
        self.send(&initialized()).await;
        self.stateless = false;
    }

    /// Opens a session if the dialect needs one, then waits until a read
    /// succeeds.
    async fn open(&mut self, dialect: Dialect) {
        if let Dialect::Session(_) = dialect {
            self.open_session().await;
        }
        let deadline = Instant::now() + START_WITHIN;
        loop {
            self.next_id += 1;
            let response = self.call(dialect.read(self.next_id)).await;
            if is_read(&response) {
                return;
            }
            if Instant::now() > deadline {
                self.server.fail(format!("no read succeeded: {response}"));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// Every page of `resources/list`, each resource shown to `seen`; the
    /// number of resources.
    async fn walk_each(&mut self, mut seen: impl FnMut(&Value)) -> usize {
        let mut cursor: Option<String> = None;
        let mut count = 0;
        loop {
            let params = match &cursor {
                Some(cursor) => json!({ "cursor": cursor }),
                None => json!({}),
            };
            let result = self.result("resources/list", params).await;
            for resource in result["resources"].as_array().into_iter().flatten() {
                count += 1;
                seen(resource);
            }
            match result["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return count,
            }
        }
    }

    /// Every page of `resources/list`; the number of resources.
    async fn walk(&mut self) -> usize {
        self.walk_each(|_| {}).await
    }

    /// Walks the listing until it names every scheme of `schemes` (plugins
    /// still compiling are not listed yet); once, if there are none.
    async fn wait_listing(&mut self, schemes: &BTreeSet<String>) {
        let deadline = Instant::now() + START_WITHIN;
        loop {
            let mut listed = BTreeSet::new();
            self.walk_each(|resource| {
                if let Some((scheme, _)) = resource["uri"]
                    .as_str()
                    .and_then(|uri| uri.split_once("://"))
                {
                    listed.insert(scheme.to_owned());
                }
            })
            .await;
            if listed.is_superset(schemes) {
                return;
            }
            if Instant::now() > deadline {
                let missing: Vec<&String> = schemes.difference(&listed).collect();
                self.server.fail(format!(
                    "after {} s the listing still lacks {missing:?}",
                    START_WITHIN.as_secs()
                ));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }
}

/// Reads with `in_flight` requests in flight on one pipe.
async fn drive_pipe(pipe: &mut Pipe, dialect: Dialect, in_flight: usize) -> Outcome {
    let measure_from = Instant::now() + WARM_UP;
    let stop = measure_from + read_time();
    let mut sent: HashMap<u64, Instant> = HashMap::new();
    let mut latencies = Vec::new();
    let mut last = measure_from;
    let mut next_id = 0;
    let mut answered: u64 = 0;
    let cpu_before = pipe.server.cpu_time();
    loop {
        while sent.len() < in_flight && Instant::now() < stop {
            next_id += 1;
            pipe.send(&dialect.read(next_id)).await;
            sent.insert(next_id, Instant::now());
        }
        if sent.is_empty() {
            break;
        }
        let response = pipe.receive().await;
        let Some(at) = response["id"].as_u64().and_then(|id| sent.remove(&id)) else {
            continue;
        };
        if !is_read(&response) {
            pipe.server.fail(format!("a read failed: {response}"));
        }
        answered += 1;
        let done = Instant::now();
        if at >= measure_from {
            latencies.push(done - at);
            last = done;
        }
    }
    let cpu = pipe.server.cpu_time() - cpu_before;
    Outcome::new(latencies, last - measure_from, cpu, answered)
}

async fn bench_stdio(
    command: std::process::Command,
    dialect: Dialect,
    in_flight: usize,
) -> Outcome {
    let mut pipe = Pipe::start(command);
    pipe.open(dialect).await;
    let outcome = drive_pipe(&mut pipe, dialect, in_flight).await;
    pipe.server.stop().await;
    outcome
}

// ------------------------------------------------------------------ http

/// One keep-alive HTTP/1.1 connection to `/mcp`.
struct Client {
    sender: SendRequest<Full<Bytes>>,
    address: String,
    dialect: Dialect,
    headers: Vec<(&'static str, String)>,
}

impl Client {
    /// Connects, and opens a session if the dialect needs one.
    async fn open(address: &str, dialect: Dialect) -> std::io::Result<Self> {
        let stream = tokio::net::TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(connection);
        let mut client = Self {
            sender,
            address: address.into(),
            dialect,
            headers: dialect.read_headers(),
        };
        if let Dialect::Session(_) = dialect {
            let (session, response) = client.post(&initialize(), &[]).await?;
            let session = session
                .ok_or_else(|| std::io::Error::other(format!("no Mcp-Session-Id: {response:?}")))?;
            client.headers.push(("mcp-session-id", session));
            client.post(&initialized(), &[]).await?;
        }
        Ok(client)
    }

    /// POSTs `message`; the session id the server names and the JSON-RPC
    /// message it answers with (from JSON or from SSE `data:` lines), if any.
    async fn post(
        &mut self,
        message: &Value,
        headers: &[(&'static str, String)],
    ) -> std::io::Result<(Option<String>, Option<Value>)> {
        let mut request = hyper::Request::post("/mcp")
            .header("host", &self.address)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        for (name, value) in self.headers.iter().chain(headers) {
            request = request.header(*name, value);
        }
        let request = request
            .body(Full::new(Bytes::from(message.to_string())))
            .unwrap();
        let method = message["method"].as_str().unwrap_or_default();
        let failed = |error: hyper::Error| std::io::Error::other(format!("{method}: {error}"));
        // The connection takes the next request once it has finished the last.
        self.sender.ready().await.map_err(failed)?;
        let response = self.sender.send_request(request).await.map_err(failed)?;
        let status = response.status();
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(std::io::Error::other)?
            .to_bytes();
        if !status.is_success() {
            let body = String::from_utf8_lossy(&body);
            return Err(std::io::Error::other(format!("{status}: {body}")));
        }
        Ok((session, parse_answer(&body)))
    }

    async fn read(&mut self, id: u64) -> std::io::Result<Value> {
        let request = self.dialect.read(id);
        match self.post(&request, &[]).await? {
            (_, Some(response)) if is_read(&response) => Ok(response),
            (_, response) => Err(std::io::Error::other(format!("read: {response:?}"))),
        }
    }
}

/// The JSON-RPC response in a body of JSON or of server-sent events.
fn parse_answer(body: &[u8]) -> Option<Value> {
    if let Ok(message) = serde_json::from_slice::<Value>(body) {
        return Some(message);
    }
    std::str::from_utf8(body)
        .ok()?
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message.get("id").is_some())
}

/// Waits until a client can connect and read.
async fn wait_http(server: &Server, address: &str, dialect: Dialect) {
    let deadline = Instant::now() + START_WITHIN;
    loop {
        let error = match Client::open(address, dialect).await {
            Ok(mut client) => match client.read(1).await {
                Ok(_) => return,
                Err(error) => error,
            },
            Err(error) => error,
        };
        if Instant::now() > deadline {
            server.fail(format!("no read succeeded at {address}: {error}"));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Reads from `connections` connections, one request in flight on each,
/// for `run_for` after the warm-up; the CPU time is that of `servers`
/// together, and a failed read stops the bench with the first one's log.
async fn drive_http(
    servers: &[&Server],
    address: &str,
    dialect: Dialect,
    connections: usize,
    run_for: Duration,
) -> Outcome {
    let server = servers[0];
    let cpu_time = || {
        servers
            .iter()
            .map(|server| server.cpu_time())
            .sum::<Duration>()
    };
    let mut clients = Vec::new();
    for _ in 0..connections {
        match Client::open(address, dialect).await {
            Ok(client) => clients.push(client),
            Err(error) => server.fail(format!("connecting to {address}: {error}")),
        }
    }
    let measure_from = Instant::now() + WARM_UP;
    let stop = measure_from + run_for;
    let cpu_before = cpu_time();
    let tasks: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut last = measure_from;
                let mut id = 0;
                loop {
                    let sent = Instant::now();
                    if sent >= stop {
                        return Ok((latencies, last, id));
                    }
                    id += 1;
                    client.read(id).await?;
                    let done = Instant::now();
                    if sent >= measure_from {
                        latencies.push(done - sent);
                        last = done;
                    }
                }
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut last = measure_from;
    let mut answered = 0;
    for task in tasks {
        let result: std::io::Result<(Vec<Duration>, Instant, u64)> = task.await.unwrap();
        match result {
            Ok((some, at, reads)) => {
                latencies.extend(some);
                last = last.max(at);
                answered += reads;
            }
            Err(error) => server.fail(format!("a read failed: {error}")),
        }
    }
    let cpu = cpu_time() - cpu_before;
    Outcome::new(latencies, last - measure_from, cpu, answered)
}

async fn bench_http(
    server: Server,
    address: &str,
    dialect: Dialect,
    connections: usize,
) -> Outcome {
    wait_http(&server, address, dialect).await;
    let outcome = drive_http(&[&server], address, dialect, connections, read_time()).await;
    server.stop().await;
    outcome
}

// ----------------------------------------------------------------- reads

/// Reads per second, latencies and the server's CPU time per read, in
/// one case.
struct Outcome {
    reads: usize,
    window: Duration,
    latencies: Vec<Duration>,
    /// Over every read answered, warm-up included.
    cpu_per_read: Duration,
}

impl Outcome {
    /// `cpu` is the server's CPU time over `answered` reads.
    fn new(mut latencies: Vec<Duration>, window: Duration, cpu: Duration, answered: u64) -> Self {
        assert!(!latencies.is_empty(), "no read completed");
        latencies.sort();
        Self {
            reads: latencies.len(),
            window,
            latencies,
            cpu_per_read: cpu.div_f64(answered as f64),
        }
    }

    fn per_second(&self) -> f64 {
        self.reads as f64 / self.window.as_secs_f64()
    }

    fn cpu_micros(&self) -> f64 {
        self.cpu_per_read.as_secs_f64() * 1e6
    }

    fn micros_at(&self, quantile: f64) -> f64 {
        let index = ((self.latencies.len() as f64 - 1.0) * quantile).round() as usize;
        self.latencies[index].as_secs_f64() * 1e6
    }

    fn cells(&self) -> String {
        format!(
            "{:.0} | {:.0} | {:.0} | {:.1}",
            self.per_second(),
            self.micros_at(0.5),
            self.micros_at(0.99),
            self.cpu_micros()
        )
    }
}

/// How a read case reaches its server.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Stdio,
    /// Streamable HTTP in a 2025-06-18 session.
    HttpSession,
    /// Streamable HTTP, 2026-07-28, stateless.
    HttpStateless,
}

impl Way {
    const ALL: [Way; 3] = [Way::Stdio, Way::HttpSession, Way::HttpStateless];
    const HTTP: [Way; 2] = [Way::HttpSession, Way::HttpStateless];

    /// Its name in `RESMUX_BENCH_READ_WAYS`.
    fn key(self) -> &'static str {
        match self {
            Way::Stdio => "stdio",
            Way::HttpSession => "session",
            Way::HttpStateless => "stateless",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Way::Stdio => "stdio",
            Way::HttpSession => "HTTP 2025-06-18 session",
            Way::HttpStateless => "HTTP 2026-07-28 stateless",
        }
    }
}

/// What the rows of a load are called.
fn load_name(in_flight: usize) -> String {
    match in_flight {
        1 => "one at a time".into(),
        many => format!("{many} in flight"),
    }
}

/// A server whose reads are measured, started afresh for every case.
struct Subject<'a> {
    label: String,
    /// The static text resource it reads.
    uri: &'static str,
    kind: Kind<'a>,
}

enum Kind<'a> {
    /// The native echo server: this binary, re-executed; `relayed`, it
    /// answers on a runtime of its own, as resmux's plugins do.
    Echo { relayed: bool },
    /// `server-everything` under Node.
    Reference(&'a Setup),
    /// `resmux serve` on a folder of its own.
    Resmux { resmux: &'a Resmux, folder: TempDir },
    /// [`PYTHON_SDK_SERVER`], written into `folder`: over stdio only.
    PythonSdk { python: PathBuf, folder: TempDir },
}

impl<'a> Subject<'a> {
    fn echo(relayed: bool) -> Self {
        Self {
            label: if relayed { ECHO_RELAYED } else { ECHO }.into(),
            uri: RESMUX_URI,
            kind: Kind::Echo { relayed },
        }
    }

    /// The TypeScript reference, or why it is left out.
    fn reference(setup: &'a Setup) -> Result<Self, String> {
        if !setup.node().exists() || !setup.reference_server().exists() {
            return Err(format!(
                "{REFERENCE}: left out, not installed \
                 (run `npm ci` in tests/node; scripts/bench does)"
            ));
        }
        Ok(Self {
            label: REFERENCE.into(),
            uri: REFERENCE_URI,
            kind: Kind::Reference(setup),
        })
    }

    fn resmux(label: String, resmux: &'a Resmux, folder: TempDir, uri: &'static str) -> Self {
        Self {
            label,
            uri,
            kind: Kind::Resmux { resmux, folder },
        }
    }

    /// The native Python SDK server, or why it is left out.
    fn python_sdk(setup: &Setup) -> Result<Self, String> {
        let python = setup.python();
        let importable = std::process::Command::new(&python)
            .args(["-c", "import mcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if !importable {
            return Err(format!(
                "{PYTHON_SDK}: left out, no {} with `mcp` (scripts/test makes it)",
                python.display()
            ));
        }
        let folder = temp_dir();
        std::fs::write(folder.path().join("server.py"), PYTHON_SDK_SERVER).unwrap();
        Ok(Self {
            label: PYTHON_SDK.into(),
            uri: PYTHON_SDK_URI,
            kind: Kind::PythonSdk { python, folder },
        })
    }

    fn ways(&self) -> &'static [Way] {
        match self.kind {
            Kind::Echo { .. } | Kind::Resmux { .. } => &Way::ALL,
            Kind::Reference(_) => &[Way::Stdio, Way::HttpSession],
            Kind::PythonSdk { .. } => &[Way::Stdio],
        }
    }

    /// Over stdio: stateless where the server speaks 2026-07-28.
    fn dialect(&self, way: Way) -> Dialect {
        match (way, &self.kind) {
            (Way::HttpStateless, _) | (Way::Stdio, Kind::Echo { .. } | Kind::Resmux { .. }) => {
                Dialect::Stateless(self.uri)
            }
            (Way::HttpSession, _) | (Way::Stdio, Kind::Reference(_) | Kind::PythonSdk { .. }) => {
                Dialect::Session(self.uri)
            }
        }
    }

    fn stdio_command(&self) -> std::process::Command {
        match &self.kind {
            Kind::Echo { relayed } => {
                let mut command = server_command(&std::env::current_exe().unwrap());
                let mode = if *relayed { "stdio-relayed" } else { "stdio" };
                command.env("RESMUX_BENCH_ECHO", mode);
                command
            }
            Kind::Reference(setup) => {
                let mut command = server_command(&setup.node());
                command.arg(setup.reference_server()).arg("stdio");
                command
            }
            Kind::Resmux { resmux, folder } => {
                resmux.serve(folder.path(), resmux.cache.path(), &[])
            }
            Kind::PythonSdk { python, folder } => {
                let mut command = server_command(python);
                command.arg(folder.path().join("server.py"));
                command
            }
        }
    }

    /// The server listening for Streamable HTTP, and its address.
    async fn start_http(&self) -> (Server, String) {
        match &self.kind {
            Kind::Echo { relayed } => {
                let mut command = server_command(&std::env::current_exe().unwrap());
                let mode = if *relayed { "http-relayed" } else { "http" };
                command.env("RESMUX_BENCH_ECHO", mode);
                let mut server = Server::start(command, Stdio::piped());
                let mut stdout = BufReader::new(server.child.stdout.take().unwrap()).lines();
                match stdout.next_line().await {
                    Ok(Some(port)) => (server, format!("127.0.0.1:{port}")),
                    _ => server.fail("the echo server names no port"),
                }
            }
            Kind::Reference(setup) => {
                let port = free_port();
                let mut command = server_command(&setup.node());
                command
                    .arg(setup.reference_server())
                    .arg("streamableHttp")
                    .env("PORT", port.to_string());
                // It logs every request on stdout.
                let server = Server::start(command, Stdio::null());
                (server, format!("127.0.0.1:{port}"))
            }
            Kind::Resmux { resmux, folder } => {
                let address = format!("127.0.0.1:{}", free_port());
                let command =
                    resmux.serve(folder.path(), resmux.cache.path(), &["--http", &address]);
                (Server::start(command, Stdio::null()), address)
            }
            Kind::PythonSdk { .. } => panic!("{} is benched over stdio only", self.label),
        }
    }

    async fn bench(&self, way: Way, in_flight: usize) -> Outcome {
        progress(&format!(
            "{}, {}, {}",
            self.label,
            way.name(),
            load_name(in_flight)
        ));
        let dialect = self.dialect(way);
        if way == Way::Stdio {
            return bench_stdio(self.stdio_command(), dialect, in_flight).await;
        }
        let (server, address) = self.start_http().await;
        bench_http(server, &address, dialect, in_flight).await
    }
}

/// The conformance fixtures, served as `test` (the manifest's scheme).
fn conformance_folder(resmux: &Resmux) -> TempDir {
    folder_of(
        resmux,
        &[
            ("conformance.wasm", "test.wasm"),
            ("conformance.toml", "test.toml"),
        ],
    )
}

/// A new folder holding each built plugin file `from` as `to`.
fn folder_of(resmux: &Resmux, files: &[(&str, &str)]) -> TempDir {
    let folder = temp_dir();
    for (from, to) in files {
        copy(&resmux.plugin(from), &folder.path().join(to));
    }
    folder
}

/// How long each read case is measured: `RESMUX_BENCH_READ_SECS`, [`RUN_FOR`]
/// unless set.
fn read_time() -> Duration {
    std::env::var("RESMUX_BENCH_READ_SECS")
        .ok()
        .map(|secs| match secs.parse() {
            Ok(secs) if secs > 0 => Duration::from_secs(secs),
            _ => panic!("RESMUX_BENCH_READ_SECS={secs:?} is no count of seconds"),
        })
        .unwrap_or(RUN_FOR)
}

/// Whether `name` is among the comma-separated names of `variable`, or
/// `variable` is unset.
fn chosen(variable: &str, name: &str) -> bool {
    std::env::var(variable).map_or(true, |names| names.split(',').any(|given| given == name))
}

/// How many times every read case runs, one after the other in turn:
/// `RESMUX_BENCH_READ_ROUNDS`, 3 unless set.
fn read_rounds() -> usize {
    std::env::var("RESMUX_BENCH_READ_ROUNDS")
        .ok()
        .map(|rounds| match rounds.parse() {
            Ok(rounds) if rounds > 0 => rounds,
            _ => panic!("RESMUX_BENCH_READ_ROUNDS={rounds:?} is no count of rounds"),
        })
        .unwrap_or(3)
}

/// The middle value of `values` by `key` (the lower of the two middle ones
/// when their number is even).
fn middle<T>(mut values: Vec<T>, key: impl Fn(&T) -> f64) -> T {
    values.sort_by(|a, b| key(a).total_cmp(&key(b)));
    values.swap_remove((values.len() - 1) / 2)
}

/// One read case, run once.
struct Case {
    server: String,
    way: Way,
    in_flight: usize,
    outcome: Outcome,
}

/// Every read case of a section, run once each.
struct Round {
    cases: Vec<Case>,
}

/// A case of a round: its server's label, the way and the load.
type Key<'a> = (&'a str, Way, usize);

impl Round {
    fn get(&self, (server, way, in_flight): Key<'_>) -> Option<&Outcome> {
        self.cases
            .iter()
            .find(|case| case.server == server && case.way == way && case.in_flight == in_flight)
            .map(|case| &case.outcome)
    }

    /// `figure` of `over` ÷ `figure` of `under`, if the round has both.
    fn ratio(&self, figure: fn(&Outcome) -> f64, over: Key<'_>, under: Key<'_>) -> Option<f64> {
        Some(figure(self.get(over)?) / figure(self.get(under)?))
    }
}

/// The stdio case of `server` at [`IN_FLIGHT`].
fn stdio_case(server: &str) -> Key<'_> {
    (server, Way::Stdio, IN_FLIGHT)
}

/// Every one of `ways` of every subject, at every one of `loads`, each
/// round in turn.
async fn run_rounds(
    section: &str,
    subjects: &[Subject<'_>],
    ways: &[Way],
    loads: &[usize],
) -> Vec<Round> {
    let count = read_rounds();
    let mut rounds = Vec::new();
    for round in 1..=count {
        progress(&format!("{section}: round {round} of {count}"));
        let mut cases = Vec::new();
        for &in_flight in loads {
            for subject in subjects {
                for &way in subject.ways().iter().filter(|way| ways.contains(way)) {
                    cases.push(Case {
                        server: subject.label.clone(),
                        way,
                        in_flight,
                        outcome: subject.bench(way, in_flight).await,
                    });
                }
            }
        }
        rounds.push(Round { cases });
    }
    rounds
}

/// One row per case at `in_flight`: its median round by reads/s.
fn outcome_table(rounds: &[Round], in_flight: usize) {
    println!("| server | transport | reads/s | p50 µs | p99 µs | CPU µs/read |");
    println!("|---|---|--:|--:|--:|--:|");
    for case in rounds[0]
        .cases
        .iter()
        .filter(|case| case.in_flight == in_flight)
    {
        let key = (case.server.as_str(), case.way, in_flight);
        let each: Vec<&Outcome> = rounds.iter().filter_map(|round| round.get(key)).collect();
        let median = middle(each, |outcome| outcome.per_second());
        println!(
            "| {} | {} | {} |",
            case.server,
            case.way.name(),
            median.cells()
        );
    }
    println!();
}

fn ratio_header(what: &str) {
    println!("| {what} | goal | median | each round |\n|---|---|--:|--:|");
}

/// One ratio, where every round has both sides: its goal, its median over
/// the rounds, then each round's.
fn ratio_row(name: &str, goal: &str, rounds: &[Round], ratio: impl Fn(&Round) -> Option<f64>) {
    let Some(each) = rounds.iter().map(ratio).collect::<Option<Vec<f64>>>() else {
        return;
    };
    let shown: Vec<String> = each.iter().map(|ratio| format!("{ratio:.2}")).collect();
    let median = middle(each, |ratio| *ratio);
    println!("| {name} | {goal} | {median:.2} | {} |", shown.join(", "));
}

/// Why servers were left out, under the table they are missing from.
fn left_out(reasons: &[String]) {
    for reason in reasons {
        println!("_{reason}._\n");
    }
}

async fn reads(setup: &Setup) {
    let server = |name| chosen("RESMUX_BENCH_READ_SERVERS", name);
    let mut subjects = Vec::new();
    if server("echo") {
        subjects.push(Subject::echo(false));
    }
    if server("relayed") {
        subjects.push(Subject::echo(true));
    }
    let mut missing = Vec::new();
    if server("reference") {
        match Subject::reference(setup) {
            Ok(reference) => subjects.push(reference),
            Err(why) => missing.push(why),
        }
    }
    for resmux in &setup.resmuxes {
        if !server(if resmux.current { "resmux" } else { "baseline" }) {
            continue;
        }
        let folder = conformance_folder(resmux);
        subjects.push(Subject::resmux(
            resmux.label.into(),
            resmux,
            folder,
            RESMUX_URI,
        ));
    }
    let ways: Vec<Way> = Way::ALL
        .into_iter()
        .filter(|way| chosen("RESMUX_BENCH_READ_WAYS", way.key()))
        .collect();
    let rounds = run_rounds("reads", &subjects, &ways, &LOADS).await;
    let count = rounds.len();
    println!(
        "## Reads: {} s per case after {} ms warm-up, {count} rounds\n",
        read_time().as_secs(),
        WARM_UP.as_millis()
    );
    println!(
        "resmux and echo read `{RESMUX_URI}` ({} bytes; resmux with the response cache off), \
         the TypeScript reference `{REFERENCE_URI}` (it has no stateless era). Over HTTP: one \
         keep-alive connection per read in flight. Every case runs once per round, in turn; \
         a row shows the case's median round. CPU µs/read is the server's CPU time, all its \
         threads, user and kernel, over every read it answered.\n",
        ECHO_TEXT.len()
    );
    left_out(&missing);
    for in_flight in LOADS {
        println!("### {}\n", load_name(in_flight));
        outcome_table(&rounds, in_flight);
    }
    let resmux = setup.resmux().label;
    let per_second = Outcome::per_second;
    ratio_header("reads/s");
    ratio_row("resmux stdio ÷ TypeScript stdio", "—", &rounds, |round| {
        round.ratio(per_second, stdio_case(resmux), stdio_case(REFERENCE))
    });
    for in_flight in LOADS {
        let name = format!("resmux stdio ÷ echo stdio, {}", load_name(in_flight));
        let goal = if in_flight == IN_FLIGHT {
            "≥ 0.8"
        } else {
            "—"
        };
        ratio_row(&name, goal, &rounds, |round| {
            let stdio = |server| (server, Way::Stdio, in_flight);
            round.ratio(per_second, stdio(resmux), stdio(ECHO))
        });
        let load = load_name(in_flight);
        let relayed = |over, under, name: String| {
            ratio_row(&name, "—", &rounds, |round| {
                let stdio = |server| (server, Way::Stdio, in_flight);
                round.ratio(per_second, stdio(over), stdio(under))
            });
        };
        relayed(
            ECHO_RELAYED,
            ECHO,
            format!("echo relayed stdio ÷ echo stdio, {load}"),
        );
        relayed(
            resmux,
            ECHO_RELAYED,
            format!("resmux stdio ÷ echo relayed stdio, {load}"),
        );
    }
    ratio_row(
        "resmux HTTP session ÷ TypeScript HTTP session",
        "—",
        &rounds,
        |round| {
            let http = |server| (server, Way::HttpSession, IN_FLIGHT);
            round.ratio(per_second, http(resmux), http(REFERENCE))
        },
    );
    if let Some(baseline) = setup.resmuxes.get(1) {
        for in_flight in LOADS {
            for way in Way::ALL {
                let name = format!(
                    "resmux ÷ baseline, {}, {}",
                    way.name(),
                    load_name(in_flight)
                );
                ratio_row(&name, "—", &rounds, |round| {
                    let case = |server| (server, way, in_flight);
                    round.ratio(per_second, case(resmux), case(baseline.label))
                });
            }
        }
    }
    println!();
    ratio_header("CPU µs per read");
    for in_flight in LOADS {
        for era in Way::HTTP {
            let load = load_name(in_flight);
            let case = |server, way| (server, way, in_flight);
            let name = format!("resmux ÷ echo, {}, {load}", era.name());
            ratio_row(&name, "≤ 1.5", &rounds, |round| {
                round.ratio(Outcome::cpu_micros, case(resmux, era), case(ECHO, era))
            });
            let relayed = [
                ("echo relayed ÷ echo", ECHO_RELAYED, ECHO),
                ("resmux ÷ echo relayed", resmux, ECHO_RELAYED),
            ];
            for (name, over, under) in relayed {
                let name = format!("{name}, {}, {load}", era.name());
                ratio_row(&name, "—", &rounds, |round| {
                    round.ratio(Outcome::cpu_micros, case(over, era), case(under, era))
                });
            }
            let name = format!("resmux {} ÷ resmux stdio, {load}", era.name());
            ratio_row(&name, "—", &rounds, |round| {
                round.ratio(
                    Outcome::cpu_micros,
                    case(resmux, era),
                    case(resmux, Way::Stdio),
                )
            });
        }
        let name = format!(
            "resmux stateless ÷ resmux session, {}",
            load_name(in_flight)
        );
        ratio_row(&name, "≤ 1", &rounds, |round| {
            let http = |way| (resmux, way, in_flight);
            round.ratio(
                Outcome::cpu_micros,
                http(Way::HttpStateless),
                http(Way::HttpSession),
            )
        });
    }
    println!();
}

// ------------------------------------------------------------- languages

/// An example plugin as the languages section serves it: alone in a folder
/// with its manifest and sample data, read at a small static URI.
struct Example {
    name: &'static str,
    language: &'static str,
    uri: &'static str,
    /// With a directory grant it does not use added to its manifest: its
    /// calls then run as those of a plugin with files do.
    granted: bool,
}

const NOTES: Example = Example::new("notes", "Rust", "notes://notes/welcome");
const NOTES_GRANTED: Example = Example {
    language: "Rust, with a directory grant",
    granted: true,
    ..NOTES
};
const CATALOG: Example = Example::new("catalog", "JavaScript", "catalog://items/apples");
const DATASET: Example = Example::new("dataset", "Python", "dataset://datasets/rivers");
const EXAMPLES: [Example; 7] = [
    NOTES,
    NOTES_GRANTED,
    Example::new("units", "Go", "units://units/fahrenheit"),
    Example::new("files", "Rust, located reads", "files://README.md"),
    Example::new("kv", "C, a single-file grant", "kv://keys/motd"),
    CATALOG,
    DATASET,
];

impl Example {
    /// The example `name` in `language`, read at `uri`, as it ships.
    const fn new(name: &'static str, language: &'static str, uri: &'static str) -> Self {
        Self {
            name,
            language,
            uri,
            granted: false,
        }
    }

    /// Its row's label when `resmux` serves it.
    fn label(&self, resmux: &Resmux) -> String {
        let label = format!("{} ({})", self.name, self.language);
        if resmux.current {
            label
        } else {
            format!("{label}, {}", resmux.label)
        }
    }

    /// A folder of the example alone, as `resmux` ships it; none if its
    /// plugins lack it.
    fn folder(&self, resmux: &Resmux) -> Option<TempDir> {
        let name = self.name;
        let component = resmux.plugin(&format!("{name}.wasm"));
        if !component.exists() {
            return None;
        }
        let folder = temp_dir();
        copy(&component, &folder.path().join(format!("{name}.wasm")));
        let sample = resmux.plugin(&format!("{name}-sample"));
        if sample.is_dir() {
            copy_tree(&sample, &folder.path().join(format!("{name}-sample")));
        }
        let manifest = resmux.plugin(&format!("{name}.toml"));
        let mut manifest = std::fs::read_to_string(&manifest).unwrap_or_default();
        if self.granted {
            let granted = folder.path().join("granted");
            std::fs::create_dir(&granted).unwrap();
            manifest.push_str(&format!(
                "\n[[files]]\nhost = {:?}\nguest = \"/data\"\naccess = \"read-only\"\n",
                granted.to_str().unwrap()
            ));
        }
        std::fs::write(folder.path().join(format!("{name}.toml")), manifest).unwrap();
        Some(folder)
    }
}

async fn languages(setup: &Setup) {
    let mut subjects = Vec::new();
    let mut missing = Vec::new();
    for resmux in &setup.resmuxes {
        resmux.fill_cache().await;
        for example in EXAMPLES
            .iter()
            .filter(|example| chosen("RESMUX_BENCH_EXAMPLES", example.name))
        {
            match example.folder(resmux) {
                Some(folder) => subjects.push(Subject::resmux(
                    example.label(resmux),
                    resmux,
                    folder,
                    example.uri,
                )),
                None => missing.push(format!(
                    "{}: left out, no {}.wasm in {}",
                    example.label(resmux),
                    example.name,
                    resmux.plugins.display()
                )),
            }
        }
    }
    let mut others = Vec::new();
    if chosen("RESMUX_BENCH_EXAMPLES", "reference") {
        others.push(Subject::reference(setup));
    }
    if chosen("RESMUX_BENCH_EXAMPLES", "python") {
        others.push(Subject::python_sdk(setup));
    }
    for other in others {
        match other {
            Ok(subject) => subjects.push(subject),
            Err(why) => missing.push(why),
        }
    }
    let rounds = run_rounds("languages", &subjects, &[Way::Stdio], &[IN_FLIGHT]).await;
    println!(
        "## Languages: every example alone, stdio, {IN_FLIGHT} in flight, {} rounds\n",
        rounds.len()
    );
    println!(
        "Each example is served alone with its manifest and sample data and read at one small \
         static text resource; `notes` once more with a directory grant it does not use (so \
         that each call runs as a plugin with files' does). Beside them, the TypeScript \
         reference and a native Python SDK server (`mcp`, one static text resource). A row \
         shows the case's median round.\n"
    );
    left_out(&missing);
    outcome_table(&rounds, IN_FLIGHT);
    let resmux = setup.resmux();
    let (notes, notes_granted) = (NOTES.label(resmux), NOTES_GRANTED.label(resmux));
    let (catalog, dataset) = (CATALOG.label(resmux), DATASET.label(resmux));
    let per_second = Outcome::per_second;
    ratio_header("reads/s");
    ratio_row(
        "JavaScript catalog ÷ TypeScript reference",
        "≥ 1",
        &rounds,
        |round| round.ratio(per_second, stdio_case(&catalog), stdio_case(REFERENCE)),
    );
    ratio_row(
        "notes with a grant ÷ notes",
        "≥ 0.67 (1/1.5)",
        &rounds,
        |round| round.ratio(per_second, stdio_case(&notes_granted), stdio_case(&notes)),
    );
    ratio_row("Python dataset ÷ Python SDK", "≥ 2", &rounds, |round| {
        round.ratio(per_second, stdio_case(&dataset), stdio_case(PYTHON_SDK))
    });
    println!();
}

// --------------------------------------------------------------- listing

/// The listing sizes to walk, capped by `RESMUX_BENCH_LIST_MAX`.
fn list_sizes() -> Vec<usize> {
    let Some(max) = std::env::var("RESMUX_BENCH_LIST_MAX").ok() else {
        return LIST_SIZES.to_vec();
    };
    let max: usize = max.parse().expect("RESMUX_BENCH_LIST_MAX is a number");
    let sizes: Vec<usize> = LIST_SIZES.into_iter().filter(|&n| n <= max).collect();
    if sizes.is_empty() {
        // Every mount lists as many.
        vec![max - max % LIST_MOUNTS]
    } else {
        sizes
    }
}

/// How the files of each mount's tree lie.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// [`FILES_PER_DIRECTORY`] files to a subdirectory.
    Nested,
    /// Every file in the mount's directory itself.
    Flat,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Nested => "nested",
            Shape::Flat => "flat",
        }
    }
}

/// `total` small files spread over `LIST_MOUNTS` directories `f0`.. below
/// `data`, laid out in `shape`.
fn make_trees(data: &Path, total: usize, shape: Shape) {
    let per_mount = total / LIST_MOUNTS;
    for mount in 0..LIST_MOUNTS {
        let tree = data.join(format!("f{mount}"));
        std::fs::create_dir_all(&tree).unwrap();
        for index in 0..per_mount {
            let file = match shape {
                Shape::Nested => {
                    let directory = tree.join(format!("d{:04}", index / FILES_PER_DIRECTORY));
                    if index % FILES_PER_DIRECTORY == 0 {
                        std::fs::create_dir(&directory).unwrap();
                    }
                    directory.join(format!("f{:03}.txt", index % FILES_PER_DIRECTORY))
                }
                Shape::Flat => tree.join(format!("f{index:06}.txt")),
            };
            std::fs::write(file, format!("file {index} of mount {mount}\n")).unwrap();
        }
    }
}

/// A folder mounting `files.wasm` as `f0`..`f9`, each on its tree in `data`,
/// its listing following its files where `resmux` knows that key.
fn listing_folder(resmux: &Resmux, data: &Path) -> TempDir {
    let folder = temp_dir();
    copy(&resmux.plugin("files.wasm"), &folder.path().join("f0.wasm"));
    for mount in 0..LIST_MOUNTS {
        let scheme = format!("f{mount}");
        let tree = data.join(&scheme);
        write_files_manifest(
            folder.path(),
            &scheme,
            "f0.wasm",
            &tree,
            1000,
            resmux.current,
        );
    }
    folder
}

/// The walks of one listing: the first whole walk on a fresh server, and
/// the faster of two more on the same.
struct Walks {
    shape: Shape,
    total: usize,
    first: Duration,
    repeated: Duration,
}

async fn walk_listing(resmux: &Resmux, data: &Path, shape: Shape, total: usize) -> Walks {
    progress(&format!(
        "listing: {}, {} tree of {total} resources",
        resmux.label,
        shape.name()
    ));
    let folder = listing_folder(resmux, data);
    let mut pipe = Pipe::start(resmux.serve(folder.path(), resmux.cache.path(), &[]));
    pipe.result("resources/list", json!({})).await;
    let mut timed = [Duration::ZERO; 3];
    for time in &mut timed {
        let started = Instant::now();
        let count = pipe.walk().await;
        *time = started.elapsed();
        if count != total {
            pipe.server
                .fail(format!("the walk found {count} resources, not {total}"));
        }
    }
    pipe.server.stop().await;
    Walks {
        shape,
        total,
        first: timed[0],
        repeated: timed[1].min(timed[2]),
    }
}

fn per_resource(time: Duration, total: usize) -> f64 {
    time.as_secs_f64() * 1e6 / total as f64
}

async fn listing(setup: &Setup) {
    let sizes = list_sizes();
    let trees = temp_dir();
    let mut datas = Vec::new();
    for shape in [Shape::Nested, Shape::Flat] {
        for &total in &sizes {
            progress(&format!(
                "listing: creating {total} files, {}",
                shape.name()
            ));
            let data = trees.path().join(format!("{}-{total}", shape.name()));
            make_trees(&data, total, shape);
            datas.push((shape, total, data));
        }
    }
    let mut results: Vec<(&str, Vec<Walks>)> = Vec::new();
    for resmux in &setup.resmuxes {
        let mut walks = Vec::new();
        for (shape, total, data) in &datas {
            walks.push(walk_listing(resmux, data, *shape, *total).await);
        }
        results.push((resmux.label, walks));
    }
    println!(
        "## Listing walk: {LIST_MOUNTS} mounts of `files` (plugin pages of 1000), stdio, \
         every page of `resources/list`\n"
    );
    println!(
        "Each mount on its own tree of N/{LIST_MOUNTS} files: nested, {FILES_PER_DIRECTORY} \
         files to a directory, or flat, all in one. After one untimed first page, three \
         walks on the same server: the first, and the faster of the other two (repeated). \
         resmux's manifests say `listing_follows_files` (a baseline's do not).\n"
    );
    println!(
        "| server | shape | resources | first walk s | µs/resource | repeated walk s \
         | µs/resource | repeated ÷ first | goal |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|---|");
    for (label, walks) in &results {
        for walk in walks {
            println!(
                "| {label} | {} | {} | {:.2} | {:.1} | {:.2} | {:.1} | {:.2} | ≤ 0.5 |",
                walk.shape.name(),
                walk.total,
                walk.first.as_secs_f64(),
                per_resource(walk.first, walk.total),
                walk.repeated.as_secs_f64(),
                per_resource(walk.repeated, walk.total),
                walk.repeated.as_secs_f64() / walk.first.as_secs_f64(),
            );
        }
    }
    if let &[small, .., large] = sizes.as_slice() {
        println!(
            "\n| server | shape | first walk µs/resource, {large} ÷ {small} | goal |\n\
             |---|---|--:|---|"
        );
        for (label, walks) in &results {
            for shape in [Shape::Nested, Shape::Flat] {
                let first = |total: usize| {
                    walks
                        .iter()
                        .find(|walk| walk.shape == shape && walk.total == total)
                        .map(|walk| per_resource(walk.first, total))
                        .expect("every shape walked at every size")
                };
                println!(
                    "| {label} | {} | {:.2} | ≤ 1.2 |",
                    shape.name(),
                    first(large) / first(small)
                );
            }
        }
    }
    println!();
}

// ---------------------------------------------------------------- memory

/// A folder with `notes`, and optionally 16 mounts of `files` or the
/// conformance plugin; the URIs to read, one per mount.
fn memory_folder(resmux: &Resmux, files: bool, conformance: bool) -> (TempDir, Vec<String>) {
    let folder = temp_dir();
    let path = folder.path();
    let mut uris = vec![NOTES.uri.to_owned()];
    copy(&resmux.plugin("notes.wasm"), &path.join("notes.wasm"));
    copy(&resmux.plugin("notes.toml"), &path.join("notes.toml"));
    if files {
        copy(&resmux.plugin("files.wasm"), &path.join("m00.wasm"));
        uris.extend(add_file_mounts(path, "m00.wasm", EXTRA_MOUNTS));
    }
    if conformance {
        for name in ["conformance.wasm", "conformance.toml"] {
            copy(&resmux.plugin(name), &path.join(name));
        }
        uris.push(RESMUX_URI.to_owned());
    }
    (folder, uris)
}

/// VmRSS in KiB after a walk and one read per mount, settled for 1 s.
async fn settled_rss(resmux: &Resmux, folder: &Path, uris: &[String]) -> u64 {
    let mut pipe = Pipe::start(resmux.serve(folder, resmux.cache.path(), &[]));
    pipe.walk().await;
    for uri in uris {
        let result = pipe.result("resources/read", json!({ "uri": uri })).await;
        if !result["contents"].is_array() {
            pipe.server.fail(format!("reading {uri}: {result}"));
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss = pipe.server.rss_kib();
    pipe.server.stop().await;
    rss
}

async fn memory(setup: &Setup) {
    let mut rows = Vec::new();
    for resmux in &setup.resmuxes {
        progress(&format!("memory: {}", resmux.label));
        // Fill the compile cache first, so that no case compiles.
        let (all, uris) = memory_folder(resmux, true, true);
        settled_rss(resmux, all.path(), &uris).await;
        let mut rss = Vec::new();
        for (files, conformance) in [(false, false), (true, false), (false, true)] {
            let (folder, uris) = memory_folder(resmux, files, conformance);
            rss.push(settled_rss(resmux, folder.path(), &uris).await as f64 / 1024.0);
        }
        rows.push((resmux.label, rss));
    }
    println!("## Idle memory (VmRSS after a walk and one read per mount, settled 1 s)\n");
    println!(
        "| server | notes MiB | notes + {EXTRA_MOUNTS} `files` mounts MiB | notes + conformance MiB \
         | extra mount of a loaded component MiB | a distinct small Rust plugin MiB |"
    );
    println!("|---|--:|--:|--:|--:|--:|");
    for (label, rss) in rows {
        println!(
            "| {label} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} |",
            rss[0],
            rss[1],
            rss[2],
            (rss[1] - rss[0]) / EXTRA_MOUNTS as f64,
            rss[2] - rss[0]
        );
    }
    println!();
}

// --------------------------------------------------------------- restart

/// How long a start took: from spawn to the answer of `initialize`, and to
/// the end of the first walk that listed every scheme of its folder.
struct Start {
    initialize: Duration,
    listed: Duration,
}

async fn time_start(resmux: &Resmux, folder: &Path, cache: &Path) -> Start {
    let schemes = resmux.expected_schemes(folder);
    let started = Instant::now();
    let mut pipe = Pipe::start(resmux.serve(folder, cache, &[]));
    pipe.open_session().await;
    let initialize = started.elapsed();
    pipe.wait_listing(&schemes).await;
    let listed = started.elapsed();
    pipe.server.stop().await;
    Start { initialize, listed }
}

/// Milliseconds of the median of `times`.
fn median_ms(times: Vec<Duration>) -> f64 {
    middle(times, Duration::as_secs_f64).as_secs_f64() * 1e3
}

async fn restart(setup: &Setup) {
    let mut rows = Vec::new();
    for resmux in &setup.resmuxes {
        progress(&format!("restart: {}", resmux.label));
        resmux.fill_cache().await;
        let folder = temp_dir();
        copy_tree(&resmux.plugins, folder.path());
        add_file_mounts(folder.path(), "files.wasm", EXTRA_MOUNTS);
        let cache = resmux.cache.path();
        time_start(resmux, folder.path(), cache).await;
        let mut times = Vec::new();
        for _ in 0..RESTARTS {
            times.push(time_start(resmux, folder.path(), cache).await.listed);
        }
        rows.push((resmux.label, times));
    }
    println!(
        "## Restart: spawn to the end of a first complete listing, every example + \
         {EXTRA_MOUNTS} `files` mounts, warm compile cache\n"
    );
    println!("| server | median ms | runs ms |\n|---|--:|---|");
    for (label, times) in rows {
        let runs: Vec<String> = times
            .iter()
            .map(|time| format!("{:.0}", time.as_secs_f64() * 1e3))
            .collect();
        println!(
            "| {label} | {:.0} | {} |",
            median_ms(times),
            runs.join(", ")
        );
    }
    println!();
}

// ------------------------------------------------------------------ idle

/// What a served folder cost over [`IDLE_WINDOW`] with no client message.
struct IdleCost {
    window: Duration,
    cpu: Duration,
    switches: u64,
}

/// Serves `folder` over stdio to a session of 2025-06-18 (most clients'
/// era, whose session hears change notifications) until it lists every
/// scheme, lets it settle for [`IDLE_SETTLE`] (or, `after_reads`, reads
/// [`IDLE_AFTER_READS`] times and lets it settle for
/// [`IDLE_SETTLE_AFTER_READS`]), then measures [`IDLE_WINDOW`] without a
/// message.
async fn idle_cost(resmux: &Resmux, folder: &Path, after_reads: bool) -> IdleCost {
    let mut pipe = Pipe::start(resmux.serve(folder, resmux.cache.path(), &[]));
    pipe.open_session().await;
    pipe.wait_listing(&resmux.expected_schemes(folder)).await;
    if after_reads {
        read_times(&mut pipe, Dialect::Session(RESMUX_URI), IDLE_AFTER_READS).await;
        tokio::time::sleep(IDLE_SETTLE_AFTER_READS).await;
    } else {
        tokio::time::sleep(IDLE_SETTLE).await;
    }
    let (cpu, switches) = (pipe.server.cpu_time(), pipe.server.context_switches());
    let started = Instant::now();
    tokio::time::sleep(IDLE_WINDOW).await;
    let cost = IdleCost {
        window: started.elapsed(),
        cpu: pipe.server.cpu_time() - cpu,
        switches: pipe.server.context_switches().saturating_sub(switches),
    };
    pipe.server.stop().await;
    cost
}

/// Reads `count` times with [`IN_FLIGHT`] in flight; a failed read stops
/// the bench.
async fn read_times(pipe: &mut Pipe, dialect: Dialect, count: u64) {
    let (mut sent, mut answered) = (0, 0);
    while answered < count {
        while sent < count && sent - answered < IN_FLIGHT as u64 {
            sent += 1;
            pipe.next_id += 1;
            pipe.send(&dialect.read(pipe.next_id)).await;
        }
        let response = pipe.receive().await;
        if !is_read(&response) {
            pipe.server.fail(format!("a read failed: {response}"));
        }
        answered += 1;
    }
}

/// The components in `folder`, each with its size in bytes.
fn components(folder: &Path) -> Vec<(PathBuf, u64)> {
    std::fs::read_dir(folder)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "wasm")
        })
        .map(|path| {
            let size = std::fs::metadata(&path).unwrap().len();
            (path, size)
        })
        .collect()
}

/// Copies the largest component of `folder` (and its manifest) under the
/// name `NAME2`; what it added.
fn add_largest_again(folder: &Path) -> String {
    let (largest, _) = components(folder)
        .into_iter()
        .max_by_key(|&(_, size)| size)
        .expect("a component in the folder");
    let name = largest.file_stem().unwrap().to_str().unwrap().to_owned();
    copy(&largest, &folder.join(format!("{name}2.wasm")));
    let manifest = largest.with_extension("toml");
    if manifest.exists() {
        copy(&manifest, &folder.join(format!("{name}2.toml")));
    }
    format!("the examples + {name}.wasm again as {name}2")
}

/// The idle case's rows.
#[derive(Clone, Copy, PartialEq)]
enum Idle {
    Examples,
    /// The examples and a second copy of the largest.
    LargestTwice,
    /// The examples, measured after [`IDLE_AFTER_READS`] reads.
    AfterReads,
}

async fn idle(setup: &Setup) {
    let mut rows = Vec::new();
    for resmux in &setup.resmuxes {
        resmux.fill_cache().await;
        for case in [Idle::Examples, Idle::LargestTwice, Idle::AfterReads] {
            let folder = temp_dir();
            copy_tree(&resmux.plugins, folder.path());
            let what = match case {
                Idle::Examples => "the examples".to_owned(),
                Idle::LargestTwice => add_largest_again(folder.path()),
                Idle::AfterReads => format!(
                    "the examples, after {IDLE_AFTER_READS} reads of `{RESMUX_URI}` and {} s quiet",
                    IDLE_SETTLE_AFTER_READS.as_secs()
                ),
            };
            progress(&format!("idle: {}, {what}", resmux.label));
            let cost = idle_cost(resmux, folder.path(), case == Idle::AfterReads).await;
            let bytes: u64 = components(folder.path())
                .iter()
                .map(|&(_, size)| size)
                .sum();
            let megabytes = bytes as f64 / (1024.0 * 1024.0);
            rows.push((resmux.label, what, megabytes, cost));
        }
    }
    println!(
        "## Idle CPU: served over stdio to a 2025-06-18 session, loaded and listed, \
         {} s quiet (unless the row says otherwise), then {} s without a message\n",
        IDLE_SETTLE.as_secs(),
        IDLE_WINDOW.as_secs()
    );
    println!(
        "CPU time of all threads, user and kernel (10 ms ticks), as a share of one core; \
         context switches summed over the threads alive at each end.\n"
    );
    println!(
        "| server | folder | components MiB | CPU ms | % of one core | goal | context switches |"
    );
    println!("|---|---|--:|--:|--:|---|--:|");
    for (label, what, megabytes, cost) in rows {
        println!(
            "| {label} | {what} | {megabytes:.1} | {:.0} | {:.2} | < 0.5 | {} |",
            cost.cpu.as_secs_f64() * 1e3,
            cost.cpu.as_secs_f64() * 100.0 / cost.window.as_secs_f64(),
            cost.switches
        );
    }
    println!();
}

// ------------------------------------------------------------------ cold

async fn cold(setup: &Setup) {
    let mut rows = Vec::new();
    let mut compile = None;
    for resmux in &setup.resmuxes {
        let cache = temp_dir();
        progress(&format!("cold: {}, empty compile cache", resmux.label));
        let from_empty = time_start(resmux, &resmux.plugins, cache.path()).await;
        progress(&format!("cold: {}, warm compile cache", resmux.label));
        let mut warm = Vec::new();
        for _ in 0..RESTARTS {
            warm.push(time_start(resmux, &resmux.plugins, cache.path()).await);
        }
        rows.push((resmux.label, from_empty, warm));
        if resmux.current {
            progress(&format!("cold: {}, resmux compile", resmux.label));
            let empty = temp_dir();
            compile = Some(resmux.compile(&resmux.plugins, empty.path()).await);
        }
    }
    println!(
        "## Cold start: `resmux serve --plugins target/plugins` over stdio, spawn to the \
         answer of `initialize` and to the first listing that names every scheme\n"
    );
    println!(
        "| server | compile cache | to initialize ms | goal | to a complete listing ms |\n\
         |---|---|--:|---|--:|"
    );
    for (label, from_empty, warm) in rows {
        println!(
            "| {label} | empty | {:.0} | < 1000 | {:.0} |",
            from_empty.initialize.as_secs_f64() * 1e3,
            from_empty.listed.as_secs_f64() * 1e3
        );
        let (initialize, listed): (Vec<Duration>, Vec<Duration>) = warm
            .iter()
            .map(|start| (start.initialize, start.listed))
            .unzip();
        println!(
            "| {label} | warm (median of {RESTARTS}) | {:.0} | — | {:.0} |",
            median_ms(initialize),
            median_ms(listed)
        );
    }
    if let Some(compile) = compile {
        println!(
            "\n`resmux compile target/plugins` into an empty cache: {:.1} s",
            compile.as_secs_f64()
        );
    }
    println!();
}

// ----------------------------------------------------------------- tiers

/// Runs of each tiers case but the reads, in turn; a row shows their
/// median.
const TIER_RUNS: usize = 3;
/// The tier a plugin reports once it runs Cranelift's code.
const OPTIMIZED: &str = "optimized";
/// The tier a plugin reports while it runs Winch's code, no Cranelift
/// compile under way.
const BASELINE: &str = "baseline";
/// What the reads on each tier read: each example's label and URI.
const TIER_READS: [(&str, &str); 2] = [
    ("dataset (Python)", DATASET.uri),
    ("conformance (Rust)", RESMUX_URI),
];

/// Which compilers `resmux serve --tiers` uses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tiers {
    /// Winch first, served at once; Cranelift in the background at low
    /// priority, its code taken up between calls.
    Both,
    /// Cranelift alone: a plugin is served once it has compiled.
    Optimized,
    /// Winch alone, never moved up.
    Baseline,
}

impl Tiers {
    /// The value of `--tiers`.
    fn flag(self) -> &'static str {
        match self {
            Tiers::Both => "both",
            Tiers::Optimized => "optimized",
            Tiers::Baseline => "baseline",
        }
    }

    /// How a row names it.
    fn name(self) -> String {
        format!("`--tiers {}`", self.flag())
    }
}

/// `resmux serve --tiers …` over stdio, its metrics on a listener of their
/// own.
struct Tiered {
    pipe: Pipe,
    tiers: Tiers,
    /// Where its metrics listen.
    metrics: String,
}

impl Tiered {
    /// Serves `folder` with `tiers`, compiling into `cache`, its metrics on
    /// a free loopback port.
    fn start(resmux: &Resmux, folder: &Path, cache: &Path, tiers: Tiers) -> Self {
        let metrics = format!("127.0.0.1:{}", free_port());
        let flags = ["--tiers", tiers.flag(), "--metrics", metrics.as_str()];
        Self {
            pipe: Pipe::start(resmux.serve(folder, cache, &flags)),
            tiers,
            metrics,
        }
    }

    /// Its metrics' exposition, tried again every [`POLL_EVERY`] while the
    /// listener is not up yet.
    async fn scrape(&self) -> String {
        let deadline = Instant::now() + START_WITHIN;
        loop {
            let error =
                match tokio::time::timeout_at(deadline.into(), get_metrics(&self.metrics)).await {
                    Ok(Ok(exposition)) => return exposition,
                    Ok(Err(error)) => error.to_string(),
                    Err(_) => "no answer".to_owned(),
                };
            if Instant::now() > deadline {
                self.pipe.server.fail(format!(
                    "after {} s no metrics at {}: {error}",
                    START_WITHIN.as_secs(),
                    self.metrics
                ));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// The tier each plugin reports now, by scheme.
    async fn plugin_tiers(&self) -> BTreeMap<String, String> {
        tiers_in(&self.scrape().await)
    }

    /// Waits until every one of `schemes` reports `tier`, scraping every
    /// [`POLL_EVERY`].
    async fn wait_tier(&self, schemes: &BTreeSet<String>, tier: &str) {
        self.wait_every(schemes, tier, |now| now == tier).await;
    }

    /// Waits until every one of `schemes` is served, on whatever tier.
    async fn wait_served(&self, schemes: &BTreeSet<String>) {
        self.wait_every(schemes, "of any kind", |_| true).await;
    }

    /// Waits until every one of `schemes` reports a tier `wanted` accepts
    /// (`what` names it), scraping every [`POLL_EVERY`].
    async fn wait_every(
        &self,
        schemes: &BTreeSet<String>,
        what: &str,
        wanted: impl Fn(&str) -> bool,
    ) {
        let deadline = Instant::now() + START_WITHIN;
        loop {
            let tiers = self.plugin_tiers().await;
            let every = schemes
                .iter()
                .all(|scheme| tiers.get(scheme).is_some_and(|now| wanted(now)));
            if every {
                return;
            }
            if Instant::now() > deadline {
                self.pipe.server.fail(format!(
                    "after {} s with {}, not every plugin reports a tier {what}: {tiers:?}",
                    START_WITHIN.as_secs(),
                    self.tiers.name()
                ));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// Fails unless every one of `schemes` reports `tier` now.
    async fn expect_tier(&self, schemes: &BTreeSet<String>, tier: &str) {
        let tiers = self.plugin_tiers().await;
        if !all_in(&tiers, schemes, tier) {
            self.pipe.server.fail(format!(
                "with {}, not every plugin reports tier {tier}: {tiers:?}",
                self.tiers.name()
            ));
        }
    }

    /// Kills it.
    async fn stop(self) {
        self.pipe.server.stop().await;
    }
}

/// `GET /metrics` from `address` over HTTP/1.0: the exposition, or why not.
async fn get_metrics(address: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    match response.split_once("\r\n\r\n") {
        Some((head, body)) if head.split(' ').nth(1) == Some("200") => Ok(body.to_owned()),
        _ => Err(std::io::Error::other(format!("GET /metrics: {response}"))),
    }
}

/// Every sample of `metric` in `exposition`: its labels (`a="x",b="y"`)
/// and its value.
fn samples_of<'a>(exposition: &'a str, metric: &str) -> impl Iterator<Item = (&'a str, f64)> {
    let prefix = format!("{metric}{{");
    exposition.lines().filter_map(move |line| {
        let (series, value) = line.rsplit_once(' ')?;
        let labels = series.strip_prefix(&prefix)?.strip_suffix('}')?;
        Some((labels, value.parse().ok()?))
    })
}

/// The value of the label `name` in `labels` (`a="x",b="y"`).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        pair.strip_prefix(name)?
            .strip_prefix("=\"")?
            .strip_suffix('"')
    })
}

/// The tier each plugin is in, by scheme: the `tier` of its
/// `resmux_plugin_tier` sample at 1.
fn tiers_in(exposition: &str) -> BTreeMap<String, String> {
    samples_of(exposition, "resmux_plugin_tier")
        .filter(|&(_, value)| value > 0.0)
        .filter_map(|(labels, _)| {
            Some((
                label(labels, "plugin")?.to_owned(),
                label(labels, "tier")?.to_owned(),
            ))
        })
        .collect()
}

/// The seconds each plugin took to compile, by scheme and tier
/// (`baseline`, `optimized`).
fn compile_seconds_in(exposition: &str) -> BTreeMap<(String, String), f64> {
    samples_of(exposition, "resmux_plugin_compile_seconds")
        .filter_map(|(labels, seconds)| {
            let plugin = label(labels, "plugin")?.to_owned();
            Some(((plugin, label(labels, "tier")?.to_owned()), seconds))
        })
        .collect()
}

/// Whether every one of `schemes` is in `tier`.
fn all_in(tiers: &BTreeMap<String, String>, schemes: &BTreeSet<String>, tier: &str) -> bool {
    schemes
        .iter()
        .all(|scheme| tiers.get(scheme).is_some_and(|now| now == tier))
}

/// A new folder of the examples `names`, each with its sample data and
/// manifest as it ships.
fn examples_folder(resmux: &Resmux, names: &[&str]) -> TempDir {
    let folder = temp_dir();
    for name in names {
        let sample = resmux.plugin(&format!("{name}-sample"));
        if sample.is_dir() {
            copy_tree(&sample, &folder.path().join(format!("{name}-sample")));
        }
        let manifest = resmux.plugin(&format!("{name}.toml"));
        if manifest.exists() {
            copy(&manifest, &folder.path().join(format!("{name}.toml")));
        }
        let component = format!("{name}.wasm");
        copy(&resmux.plugin(&component), &folder.path().join(component));
    }
    folder
}

/// Milliseconds of each of `times`, in order.
fn each_ms(times: &[Duration]) -> String {
    let each: Vec<String> = times
        .iter()
        .map(|time| format!("{:.0}", time.as_secs_f64() * 1e3))
        .collect();
    each.join(", ")
}

/// The goal of a start, or of a plugin dropped in, to its first answer:
/// with both tiers only (Cranelift alone is today's behaviour, beside it).
fn first_answer_goal(tiers: Tiers) -> &'static str {
    match tiers {
        Tiers::Both => "< 2000",
        Tiers::Optimized | Tiers::Baseline => "—",
    }
}

/// One cold start of the examples on an empty compile cache.
struct TieredStart {
    tiers: Tiers,
    /// To the first listing that names every scheme.
    listed: Duration,
    /// To every plugin reporting tier `optimized`.
    optimized: Duration,
    /// Seconds each plugin took to compile, by scheme and tier.
    compile_seconds: BTreeMap<(String, String), f64>,
}

/// Serves the examples with `tiers` on an empty compile cache, from spawn
/// to a complete listing and on to every plugin optimized.
async fn tiered_cold_start(resmux: &Resmux, tiers: Tiers) -> TieredStart {
    let cache = temp_dir();
    let schemes = schemes_of(&resmux.plugins);
    let started = Instant::now();
    let mut server = Tiered::start(resmux, &resmux.plugins, cache.path(), tiers);
    server.pipe.wait_listing(&schemes).await;
    let listed = started.elapsed();
    server.wait_tier(&schemes, OPTIMIZED).await;
    let optimized = started.elapsed();
    let compile_seconds = compile_seconds_in(&server.scrape().await);
    server.stop().await;
    TieredStart {
        tiers,
        listed,
        optimized,
        compile_seconds,
    }
}

/// The median over `starts` of the seconds `plugin` took to compile to
/// `tier`, as a cell; a dash where a start did not report it.
fn compile_cell(starts: &[&TieredStart], plugin: &str, tier: &str) -> String {
    let key = (plugin.to_owned(), tier.to_owned());
    let each: Option<Vec<f64>> = starts
        .iter()
        .map(|start| start.compile_seconds.get(&key).copied())
        .collect();
    each.map_or("—".into(), |each| {
        format!("{:.2}", middle(each, |seconds| *seconds))
    })
}

/// Cold starts of the examples, both tiers and Cranelift alone in turn.
async fn tiered_cold_starts(resmux: &Resmux) {
    let mut starts = Vec::new();
    for run in 1..=TIER_RUNS {
        for tiers in [Tiers::Both, Tiers::Optimized] {
            progress(&format!(
                "tiers: cold start {run} of {TIER_RUNS}, {}",
                tiers.flag()
            ));
            starts.push(tiered_cold_start(resmux, tiers).await);
        }
    }
    println!(
        "### Cold start of the examples, empty compile cache, median of {TIER_RUNS}\n\n\
         `resmux serve --plugins target/plugins` over stdio: spawn to the first listing that \
         names every scheme, and to every plugin reporting tier `optimized` \
         (`resmux_plugin_tier`, scraped every {} ms). Runs in turn.\n",
        POLL_EVERY.as_millis()
    );
    println!(
        "| tiers | to a complete listing ms | goal | runs ms | to every plugin optimized ms \
         | runs ms |\n|---|--:|---|---|--:|---|"
    );
    let of = |tiers: Tiers| {
        starts
            .iter()
            .filter(|start| start.tiers == tiers)
            .collect::<Vec<&TieredStart>>()
    };
    for tiers in [Tiers::Both, Tiers::Optimized] {
        let runs = of(tiers);
        let listed: Vec<Duration> = runs.iter().map(|start| start.listed).collect();
        let optimized: Vec<Duration> = runs.iter().map(|start| start.optimized).collect();
        println!(
            "| {} | {:.0} | {} | {} | {:.0} | {} |",
            tiers.name(),
            median_ms(listed.clone()),
            first_answer_goal(tiers),
            each_ms(&listed),
            median_ms(optimized.clone()),
            each_ms(&optimized)
        );
    }
    println!(
        "\n`resmux_plugin_compile_seconds` of each plugin, median of {TIER_RUNS}:\n\n\
         | plugin | Winch s (`both`) | Cranelift s, in the background (`both`) \
         | Cranelift s (`optimized`) |\n|---|--:|--:|--:|"
    );
    let (both, optimized) = (of(Tiers::Both), of(Tiers::Optimized));
    for plugin in schemes_of(&resmux.plugins) {
        println!(
            "| {plugin} | {} | {} | {} |",
            compile_cell(&both, &plugin, BASELINE),
            compile_cell(&both, &plugin, OPTIMIZED),
            compile_cell(&optimized, &plugin, OPTIMIZED)
        );
    }
    println!();
}

/// A server on a folder of `notes` alone (empty compile cache, `notes`
/// optimized) gets `dataset` as a user's copy of a finished build appears:
/// its sample data, its manifest, then its component written aside and
/// renamed into place. From the rename to the first read of
/// [`DATASET`]'s URI that answers with contents.
async fn drop_in(resmux: &Resmux, tiers: Tiers) -> Duration {
    let folder = examples_folder(resmux, &["notes"]);
    let path = folder.path();
    let cache = temp_dir();
    let schemes = schemes_of(path);
    let mut server = Tiered::start(resmux, path, cache.path(), tiers);
    server.pipe.wait_listing(&schemes).await;
    server.wait_tier(&schemes, OPTIMIZED).await;
    copy_tree(
        &resmux.plugin("dataset-sample"),
        &path.join("dataset-sample"),
    );
    copy(&resmux.plugin("dataset.toml"), &path.join("dataset.toml"));
    let aside = path.join(".dataset.wasm.new");
    copy(&resmux.plugin("dataset.wasm"), &aside);
    let landed = Instant::now();
    std::fs::rename(&aside, path.join("dataset.wasm")).unwrap();
    server.pipe.open(Dialect::Stateless(DATASET.uri)).await;
    let answered = landed.elapsed();
    server.stop().await;
    answered
}

/// `dataset` dropped into a live folder, both tiers and Cranelift alone in
/// turn.
async fn drop_ins(resmux: &Resmux) {
    let mut times: Vec<(Tiers, Duration)> = Vec::new();
    for run in 1..=TIER_RUNS {
        for tiers in [Tiers::Both, Tiers::Optimized] {
            progress(&format!(
                "tiers: dataset dropped in {run} of {TIER_RUNS}, {}",
                tiers.flag()
            ));
            times.push((tiers, drop_in(resmux, tiers).await));
        }
    }
    let size = std::fs::metadata(resmux.plugin("dataset.wasm"))
        .unwrap()
        .len();
    println!(
        "### A Python plugin dropped into a live folder, to its first answered read, \
         median of {TIER_RUNS}\n\n\
         A server on a folder of `notes` alone (empty compile cache, `notes` optimized) gets \
         `dataset-sample/`, `dataset.toml`, then `dataset.wasm` ({:.1} MiB) written aside and \
         renamed into place; from the rename to the first read of `{}` that answers with \
         contents (tried every {} ms). Runs in turn.\n",
        size as f64 / (1024.0 * 1024.0),
        DATASET.uri,
        POLL_EVERY.as_millis()
    );
    println!("| tiers | to its first read ms | goal | runs ms |\n|---|--:|---|---|");
    for tiers in [Tiers::Both, Tiers::Optimized] {
        let runs: Vec<Duration> = times
            .iter()
            .filter(|(of, _)| *of == tiers)
            .map(|&(_, time)| time)
            .collect();
        println!(
            "| {} | {:.0} | {} | {} |",
            tiers.name(),
            median_ms(runs.clone()),
            first_answer_goal(tiers),
            each_ms(&runs)
        );
    }
    println!();
}

/// Reads of `dataset` and `conformance` on each tier: from three servers of
/// the same folder, all up at once and read in turn, each round; `--tiers
/// both` once every plugin moved to Cranelift's code.
async fn tier_reads(resmux: &Resmux) {
    let folder = examples_folder(resmux, &["conformance", "dataset"]);
    let path = folder.path();
    let schemes = schemes_of(path);
    // `optimized` starts on the cache `both` filled: it reads, it does not
    // time its start.
    let (baseline_cache, shared_cache) = (temp_dir(), temp_dir());
    progress("tiers: reads, starting baseline");
    let mut baseline = Tiered::start(resmux, path, baseline_cache.path(), Tiers::Baseline);
    baseline.pipe.wait_listing(&schemes).await;
    baseline.wait_tier(&schemes, BASELINE).await;
    progress("tiers: reads, starting both, until every plugin is optimized");
    let mut moved = Tiered::start(resmux, path, shared_cache.path(), Tiers::Both);
    moved.pipe.wait_listing(&schemes).await;
    moved.wait_tier(&schemes, OPTIMIZED).await;
    progress("tiers: reads, starting optimized");
    let mut optimized = Tiered::start(resmux, path, shared_cache.path(), Tiers::Optimized);
    optimized.pipe.wait_listing(&schemes).await;
    optimized.wait_tier(&schemes, OPTIMIZED).await;
    let baseline_name = Tiers::Baseline.name();
    let moved_name = format!("{}, after the move", Tiers::Both.name());
    let optimized_name = Tiers::Optimized.name();
    let mut servers = [
        (&baseline_name, baseline),
        (&moved_name, moved),
        (&optimized_name, optimized),
    ];
    let count = read_rounds();
    let mut rounds = Vec::new();
    for round in 1..=count {
        progress(&format!("tiers: reads, round {round} of {count}"));
        let mut cases = Vec::new();
        for (example, uri) in TIER_READS {
            for in_flight in LOADS {
                for (name, server) in &mut servers {
                    let dialect = Dialect::Stateless(uri);
                    cases.push(Case {
                        server: format!("{example}, {name}"),
                        way: Way::Stdio,
                        in_flight,
                        outcome: drive_pipe(&mut server.pipe, dialect, in_flight).await,
                    });
                }
            }
        }
        rounds.push(Round { cases });
    }
    let [(_, baseline), (_, moved), (_, optimized)] = servers;
    baseline.expect_tier(&schemes, BASELINE).await;
    for server in [baseline, moved, optimized] {
        server.stop().await;
    }
    println!(
        "### Reads on each tier: stdio, {} s per case after {} ms warm-up, {count} rounds\n\n\
         Three servers of `dataset` and `conformance`, up at once, read in turn: Winch's code \
         alone (checked still `baseline` after the last round), both tiers once every plugin \
         reports `optimized`, and Cranelift alone. A row shows the case's median round.\n",
        read_time().as_secs(),
        WARM_UP.as_millis()
    );
    for in_flight in LOADS {
        println!("#### {}\n", load_name(in_flight));
        outcome_table(&rounds, in_flight);
    }
    ratio_header("reads/s");
    for (example, _) in TIER_READS {
        for in_flight in LOADS {
            let load = load_name(in_flight);
            let key = |name| format!("{example}, {name}");
            let (baseline_row, moved_row, optimized_row) =
                (key(&baseline_name), key(&moved_name), key(&optimized_name));
            let case = |server| (server, Way::Stdio, in_flight);
            ratio_row(
                &format!("{example}, {load}: baseline ÷ optimized"),
                "—",
                &rounds,
                |round| {
                    round.ratio(
                        Outcome::per_second,
                        case(baseline_row.as_str()),
                        case(optimized_row.as_str()),
                    )
                },
            );
            ratio_row(
                &format!("{example}, {load}: both, after the move ÷ optimized"),
                "≥ 0.95",
                &rounds,
                |round| {
                    round.ratio(
                        Outcome::per_second,
                        case(moved_row.as_str()),
                        case(optimized_row.as_str()),
                    )
                },
            );
        }
    }
    println!();
}

/// What reads of `conformance` saw in one round: the ones made while Winch
/// compiled the other plugins, those made once all served while Cranelift
/// compiled them in the background, and those made once all were
/// optimized.
struct DuringCompile {
    round: Round,
    /// Whether some plugin was not yet optimized as the background window
    /// closed.
    compiling_at_end: bool,
}

/// The row of the reads while Winch compiles the other plugins.
const DURING_BASELINE: &str = "while Winch compiles the others";
/// The row of the reads while Cranelift compiles them in the background.
const DURING: &str = "while Cranelift compiles the others in the background";
/// The row of the reads once every plugin is optimized.
const WARM: &str = "every plugin optimized";

/// `conformance` (in the compile cache), `dataset`, `catalog` and `units`
/// (not in it) served with both tiers: [`RESMUX_URI`] read at
/// [`IN_FLIGHT`] from its first answer while another plugin is not yet
/// optimized, then once every one is.
async fn read_during_compile(resmux: &Resmux) -> DuringCompile {
    let folder = examples_folder(resmux, &["conformance", "dataset", "catalog", "units"]);
    let schemes = schemes_of(folder.path());
    let cache = temp_dir();
    let conformance = examples_folder(resmux, &["conformance"]);
    resmux.compile(conformance.path(), cache.path()).await;
    let dialect = Dialect::Stateless(RESMUX_URI);
    let mut server = Tiered::start(resmux, folder.path(), cache.path(), Tiers::Both);
    server.pipe.open(dialect).await;
    let tiers = server.plugin_tiers().await;
    if !all_in(&tiers, &schemes_of(conformance.path()), OPTIMIZED) {
        server.pipe.server.fail(format!(
            "conformance was not optimized at the first answer of {RESMUX_URI}, its code \
             compiled into the cache by `resmux compile`: {tiers:?}"
        ));
    }
    if all_in(&tiers, &schemes, OPTIMIZED) {
        server.pipe.server.fail(format!(
            "every plugin was optimized by the first answer of {RESMUX_URI}: \
             no compile to read beside"
        ));
    }
    let during_baseline = drive_pipe(&mut server.pipe, dialect, IN_FLIGHT).await;
    server.wait_served(&schemes).await;
    if all_in(&server.plugin_tiers().await, &schemes, OPTIMIZED) {
        server.pipe.server.fail(
            "every plugin was optimized once all served: no background compile to read beside",
        );
    }
    let during = drive_pipe(&mut server.pipe, dialect, IN_FLIGHT).await;
    let compiling_at_end = !all_in(&server.plugin_tiers().await, &schemes, OPTIMIZED);
    server.wait_tier(&schemes, OPTIMIZED).await;
    let warm = drive_pipe(&mut server.pipe, dialect, IN_FLIGHT).await;
    server.stop().await;
    let case = |name: &str, outcome| Case {
        server: name.into(),
        way: Way::Stdio,
        in_flight: IN_FLIGHT,
        outcome,
    };
    DuringCompile {
        round: Round {
            cases: vec![
                case(DURING_BASELINE, during_baseline),
                case(DURING, during),
                case(WARM, warm),
            ],
        },
        compiling_at_end,
    }
}

/// Reads of one plugin beside the background compile of others, rounds of
/// a fresh server each.
async fn reads_during_compile(resmux: &Resmux) {
    let mut rounds = Vec::new();
    let mut compiling_at_end = Vec::new();
    for run in 1..=TIER_RUNS {
        progress(&format!(
            "tiers: reads during a background compile, round {run} of {TIER_RUNS}"
        ));
        let measured = read_during_compile(resmux).await;
        rounds.push(measured.round);
        compiling_at_end.push(if measured.compiling_at_end {
            "yes"
        } else {
            "no"
        });
    }
    println!(
        "### Reads of one plugin during the background compile of others: stdio, \
         {IN_FLIGHT} in flight, {TIER_RUNS} rounds\n\n\
         `--tiers both` on `conformance` (its Cranelift code in the compile cache), `dataset`, \
         `catalog` and `units` (not in it): `{RESMUX_URI}` read from its first answer \
         ({} ms warm-up, then {} s) while Winch compiles the others, then once every \
         plugin serves while Cranelift compiles in the background (checked before), then \
         again once every plugin reports `optimized`. A row shows the case's median \
         round. Cranelift still compiling as the background window closed, each round: {}.\n",
        WARM_UP.as_millis(),
        read_time().as_secs(),
        compiling_at_end.join(", ")
    );
    outcome_table(&rounds, IN_FLIGHT);
    ratio_header("reads/s");
    ratio_row(
        &format!("{DURING} ÷ {WARM}"),
        "≥ 0.80",
        &rounds,
        |round| round.ratio(Outcome::per_second, stdio_case(DURING), stdio_case(WARM)),
    );
    ratio_row(
        &format!("{DURING_BASELINE} ÷ {WARM}"),
        "—",
        &rounds,
        |round| {
            round.ratio(
                Outcome::per_second,
                stdio_case(DURING_BASELINE),
                stdio_case(WARM),
            )
        },
    );
    println!();
}

/// Winch first and Cranelift in the background against Cranelift alone:
/// cold starts, a plugin dropped in, reads on each tier, and reads beside a
/// background compile.
async fn tiers(setup: &Setup) {
    let resmux = setup.resmux();
    println!(
        "## Tiers: Winch first, Cranelift in the background (`resmux serve --tiers`), \
         {}\n",
        resmux.label
    );
    tiered_cold_starts(resmux).await;
    drop_ins(resmux).await;
    tier_reads(resmux).await;
    reads_during_compile(resmux).await;
}

// -------------------------------------------------------------- replicas

/// Clients of the replicas case, one keep-alive connection and one read in
/// flight each.
const REPLICA_CLIENTS: usize = 64;
/// How long the replicas case reads, unless `RESMUX_BENCH_REPLICA_SECS`.
const REPLICA_RUN: Duration = Duration::from_secs(60);
/// How often a plugin is swapped in each replica's folder.
const SWAP_EVERY: Duration = Duration::from_millis(100);

/// A replica's folder: the examples' `notes`, read by the clients, and
/// `swapped`, replaced every [`SWAP_EVERY`] by the other of two components.
fn replica_folder(resmux: &Resmux) -> TempDir {
    folder_of(
        resmux,
        &[("notes.wasm", "notes.wasm"), ("notes.wasm", "swapped.wasm")],
    )
}

/// Replaces `swapped.wasm` in each folder every [`SWAP_EVERY`] (written
/// aside, then renamed over it, as an operator's deploy does) until `stop`;
/// how many swaps were made.
async fn swap_until(resmux: &Resmux, folders: &[PathBuf], stop: Instant) -> usize {
    let versions = [
        resmux.plugin("conformance.wasm"),
        resmux.plugin("notes.wasm"),
    ];
    let mut swaps = 0;
    let mut ticks = tokio::time::interval(SWAP_EVERY);
    while Instant::now() < stop {
        ticks.tick().await;
        for folder in folders {
            let aside = folder.join(".swapped.wasm.new");
            copy(&versions[swaps % 2], &aside);
            std::fs::rename(&aside, folder.join("swapped.wasm")).unwrap();
        }
        swaps += 1;
    }
    swaps
}

/// haproxy with `deploy/haproxy.cfg` at `listen`, in front of `replicas`.
fn haproxy(root: &Path, listen: &str, replicas: &[String]) -> Server {
    let mut command = std::process::Command::new("haproxy");
    command
        .args(["-db", "-f"])
        .arg(root.join("deploy/haproxy.cfg"))
        .env("RESMUX_LB_LISTEN", listen);
    for (n, replica) in replicas.iter().enumerate() {
        command.env(format!("RESMUX_REPLICA_{}", n + 1), replica);
    }
    Server::start(command, Stdio::null())
}

/// One case of the replicas section: `count` replicas, behind haproxy when
/// more than one, read from while plugins are swapped in each.
async fn replicas_case(setup: &Setup, count: usize, run_for: Duration) -> (Outcome, usize) {
    let resmux = setup.resmux();
    let folders: Vec<TempDir> = (0..count).map(|_| replica_folder(resmux)).collect();
    let addresses: Vec<String> = (0..count)
        .map(|_| format!("127.0.0.1:{}", free_port()))
        .collect();
    let servers: Vec<Server> = folders
        .iter()
        .zip(&addresses)
        .map(|(folder, address)| {
            let command = resmux.serve(folder.path(), resmux.cache.path(), &["--http", address]);
            Server::start(command, Stdio::null())
        })
        .collect();
    let dialect = Dialect::Stateless("notes://notes/welcome");
    for (server, address) in servers.iter().zip(&addresses) {
        wait_http(server, address, dialect).await;
    }
    let balancer = (count > 1).then(|| {
        let listen = format!("127.0.0.1:{}", free_port());
        (haproxy(&setup.root, &listen, &addresses), listen)
    });
    let address = match &balancer {
        Some((server, listen)) => {
            wait_http(server, listen, dialect).await;
            listen.clone()
        }
        None => addresses[0].clone(),
    };
    let paths: Vec<PathBuf> = folders.iter().map(|folder| folder.path().into()).collect();
    let stop = Instant::now() + WARM_UP + run_for;
    let swapping = swap_until(resmux, &paths, stop);
    let replicas: Vec<&Server> = servers.iter().collect();
    let reading = drive_http(&replicas, &address, dialect, REPLICA_CLIENTS, run_for);
    let (outcome, swaps) = tokio::join!(reading, swapping);
    if let Some((server, _)) = balancer {
        server.stop().await;
    }
    for server in servers {
        server.stop().await;
    }
    (outcome, swaps)
}

async fn replicas(setup: &Setup) {
    let run_for = std::env::var("RESMUX_BENCH_REPLICA_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .map_or(REPLICA_RUN, Duration::from_secs);
    setup.resmux().fill_cache().await;
    let mut rows = Vec::new();
    for count in [1, 3] {
        progress(&format!(
            "replicas: {count}, swapping a plugin every 100 ms"
        ));
        rows.push((count, replicas_case(setup, count, run_for).await));
    }
    println!(
        "## Replicas: {REPLICA_CLIENTS} HTTP clients reading `notes://notes/welcome` \
         (2026-07-28 stateless) for {} s while `swapped.wasm` is replaced every 100 ms \
         in each replica's folder; a failed read stops the bench\n",
        run_for.as_secs()
    );
    println!(
        "| replicas | reads/s | p50 µs | p99 µs | CPU µs/read (replicas) | swaps per replica |\n\
         |---|--:|--:|--:|--:|--:|"
    );
    for (count, (outcome, swaps)) in rows {
        let how = if count == 1 {
            "1, no balancer".to_owned()
        } else {
            format!("{count}, behind haproxy (deploy/haproxy.cfg)")
        };
        println!("| {how} | {} | {swaps} |", outcome.cells());
    }
    println!();
}

fn progress(what: &str) {
    eprintln!("bench: {what}");
}

// ------------------------------------------------------------------ echo

/// The native echo server: answers `initialize` (over HTTP with a session
/// id, for clients of the session era) and any `resources/read` with one
/// small text, over stdio or over HTTP; and the same server relayed
/// (`stdio-relayed`, `http-relayed`), which hands each request, once
/// decoded, to a runtime of its own that answers it, as resmux hands a read
/// to the plugins' threads (no plugin code runs on a thread that serves the
/// protocol): the ceiling of a read that crosses threads, with the
/// runtimes shaped as resmux's are.
mod echo {
    use super::*;

    pub fn serve(mode: &str) {
        match mode {
            "stdio" => stdio(),
            "http" => tokio::runtime::Runtime::new().unwrap().block_on(http(None)),
            "stdio-relayed" => stdio_relayed(runtime(relay_workers().0)),
            "http-relayed" => {
                let (answering, protocol) = relay_workers();
                let answering = runtime(answering);
                runtime(protocol).block_on(http(Some(answering.handle().clone())));
            }
            _ => panic!(
                "RESMUX_BENCH_ECHO is stdio, http, stdio-relayed or http-relayed, not {mode:?}"
            ),
        }
    }

    /// The workers of the relayed server's two runtimes: the one that
    /// answers and the one that serves HTTP. As resmux's plugins' and
    /// protocol's runtimes unless `RESMUX_BENCH_RELAY_WORKERS=ANSWERING,PROTOCOL`
    /// says otherwise.
    fn relay_workers() -> (usize, usize) {
        let Ok(given) = std::env::var("RESMUX_BENCH_RELAY_WORKERS") else {
            return (
                resmux::runtime::plugin_workers(),
                resmux::runtime::protocol_workers(),
            );
        };
        let counts: Option<Vec<usize>> = given.split(',').map(|n| n.parse().ok()).collect();
        match counts.as_deref() {
            Some(&[answering, protocol]) if answering > 0 && protocol > 0 => (answering, protocol),
            _ => panic!("RESMUX_BENCH_RELAY_WORKERS={given:?} is not two counts of workers, A,P"),
        }
    }

    fn runtime(workers: usize) -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .unwrap()
    }

    /// One JSON-RPC message, if it is a request (it has an id).
    fn decode(message: &[u8]) -> Option<Value> {
        let request: Value = serde_json::from_slice(message).ok()?;
        request.get("id")?;
        Some(request)
    }

    /// The answer to one decoded request.
    fn answer(request: &Value) -> Value {
        let id = request["id"].clone();
        let params = &request["params"];
        let result = match request["method"].as_str() {
            Some("initialize") => json!({
                "protocolVersion": params["protocolVersion"],
                "capabilities": { "resources": {} },
                "serverInfo": { "name": "echo", "version": "0" }
            }),
            Some("resources/read") => json!({ "contents": [{
                "uri": params["uri"], "mimeType": "text/plain", "text": ECHO_TEXT
            }]}),
            _ => {
                return json!({ "jsonrpc": "2.0", "id": id,
                    "error": { "code": -32601, "message": "method not found" } });
            }
        };
        json!({ "jsonrpc": "2.0", "id": id, "result": result })
    }

    fn stdio() {
        let mut stdout = std::io::stdout().lock();
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { return };
            if let Some(request) = decode(line.as_bytes())
                && writeln!(stdout, "{}", answer(&request)).is_err()
            {
                return;
            }
        }
    }

    /// stdin read and decoded on this thread; the requests of what it gave
    /// in one go answered together in one task of `answering`, which writes
    /// their answers in one write, as resmux's batches are.
    fn stdio_relayed(answering: tokio::runtime::Runtime) {
        use std::io::BufRead;
        let stdout = Arc::new(Mutex::new(std::io::stdout()));
        // Larger than the buffer `Stdin` keeps, which it then bypasses.
        let mut stdin = std::io::BufReader::with_capacity(1 << 16, std::io::stdin());
        let mut batch = Vec::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            match stdin.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => batch.extend(decode(&line)),
            }
            if batch.is_empty() || stdin.buffer().contains(&b'\n') {
                continue;
            }
            let requests = std::mem::take(&mut batch);
            let stdout = stdout.clone();
            answering.spawn(async move {
                let mut answers = Vec::new();
                for request in &requests {
                    serde_json::to_writer(&mut answers, &answer(request)).unwrap();
                    answers.push(b'\n');
                }
                let mut stdout = stdout.lock().unwrap();
                let _ = stdout.write_all(&answers).and_then(|()| stdout.flush());
            });
        }
    }

    /// Over HTTP; each request answered on `answering` if given.
    async fn http(answering: Option<tokio::runtime::Handle>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap().port());
        std::io::stdout().flush().unwrap();
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            let answering = answering.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(|request| respond(request, answering.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    async fn respond(
        request: hyper::Request<hyper::body::Incoming>,
        answering: Option<tokio::runtime::Handle>,
    ) -> Result<hyper::Response<Full<Bytes>>, hyper::Error> {
        let body = request.into_body().collect().await?.to_bytes();
        let answer = match (decode(&body), answering) {
            (Some(request), Some(answering)) => Some(
                answering
                    .spawn(async move { answer(&request) })
                    .await
                    .unwrap(),
            ),
            (Some(request), None) => Some(answer(&request)),
            (None, _) => None,
        };
        let response = match answer {
            Some(answer) => {
                let mut response =
                    hyper::Response::builder().header("content-type", "application/json");
                if answer["result"]["serverInfo"].is_object() {
                    response = response.header("mcp-session-id", "echo");
                }
                response.body(Full::new(Bytes::from(answer.to_string())))
            }
            None => hyper::Response::builder()
                .status(202)
                .body(Full::new(Bytes::new())),
        };
        Ok(response.unwrap())
    }
}
