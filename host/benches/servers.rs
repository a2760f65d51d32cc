//! resmux side by side with other MCP servers, in one run, printed as
//! markdown tables:
//!
//! 1. **Reads**: one raw JSON-RPC driver keeps 32 reads of one static text
//!    resource in flight (over HTTP: 32 keep-alive connections, one request
//!    in flight each) for 3 s after a 0.5 s warm-up, against a trivial native
//!    echo server (this binary, re-executed with `RESMUX_BENCH_ECHO=stdio` or
//!    `=http`), the TypeScript reference server (`server-everything` under
//!    Node 22, from `tests/node`) and `resmux serve` with the response cache
//!    off, over stdio and over Streamable HTTP. Every case runs once per
//!    round, in turn, three rounds (the machine's speed swings); reports each
//!    server's median round (reads/s, p50 and p99) and every ratio per round
//!    with its median.
//! 2. **Listing walk**: 10 mounts of the `files` example share N small files
//!    (N = 10k, 50k, 100k); the time of a full `resources/list` walk, on a
//!    fresh server and again on the same server.
//! 3. **Idle memory**: VmRSS of a served folder after a walk and one read per
//!    mount, for one more mount of a loaded component and for a distinct small
//!    Rust plugin.
//! 4. **Restart**: spawn to the end of a first complete listing walk of every
//!    example plus 16 `files` mounts, with a warm compile cache.
//!
//! Run everything with `scripts/bench` (installs the Node peers, builds, runs
//! this). By hand, after `scripts/build` and `npm ci` in `tests/node`:
//! `cargo bench -p resmux --bench servers`.
//!
//! Environment: `RESMUX_BENCH_BIN` serves with another resmux binary;
//! `RESMUX_BENCH_BASELINE=/path/to/resmux` runs every resmux case again with
//! that binary (labelled `resmux baseline`) and the plugins of
//! `RESMUX_BENCH_BASELINE_PLUGINS` (default `target/plugins`);
//! `RESMUX_BENCH_READ_ROUNDS` sets the rounds of reads;
//! `RESMUX_BENCH_LIST_MAX` caps N of the listing walk;
//! `RESMUX_BENCH_ONLY=reads,listing,memory,restart` runs only those sections.

use std::collections::{HashMap, VecDeque};
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
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

const IN_FLIGHT: usize = 32;
const WARM_UP: Duration = Duration::from_millis(500);
const RUN_FOR: Duration = Duration::from_secs(3);
/// How long a server may take to start answering.
const START_WITHIN: Duration = Duration::from_secs(120);
const LIST_SIZES: [usize; 3] = [10_000, 50_000, 100_000];
const LIST_MOUNTS: usize = 10;
const FILES_PER_DIRECTORY: usize = 100;
const EXTRA_MOUNTS: usize = 16;
const RESTARTS: usize = 3;

/// What resmux and the echo server serve: the conformance plugin's fixture.
const RESMUX_URI: &str = "test://static-text";
const ECHO_TEXT: &str = "This is the content of the static text resource.";
/// The smallest static text document of `server-everything` (965 bytes).
const REFERENCE_URI: &str = "demo://resource/static/document/extension.md";
const STATELESS_VERSION: &str = "2026-07-28";
const SESSION_VERSION: &str = "2025-06-18";

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
        if run("listing") {
            listing(&setup).await;
        }
        if run("memory") {
            memory(&setup).await;
        }
        if run("restart") {
            restart(&setup).await;
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
        let mut resmuxes = vec![Resmux::new("resmux", binary, plugins.clone())];
        if let Some(baseline) = std::env::var_os("RESMUX_BENCH_BASELINE") {
            let baseline_plugins = std::env::var_os("RESMUX_BENCH_BASELINE_PLUGINS")
                .map(PathBuf::from)
                .unwrap_or(plugins);
            resmuxes.push(Resmux::new(
                "resmux baseline",
                baseline.into(),
                baseline_plugins,
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
}

impl Resmux {
    fn new(label: &'static str, binary: PathBuf, plugins: PathBuf) -> Self {
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

    fn plugin(&self, name: &str) -> PathBuf {
        self.plugins.join(name)
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

/// Mounts `component` (already in `folder`) as `m00`..: each a tiny directory
/// of its own holding `hello.txt`. Returns one URI per mount.
fn add_file_mounts(folder: &Path, component: &str, count: usize) -> Vec<String> {
    (0..count)
        .map(|index| {
            let scheme = format!("m{index:02}");
            let data = folder.join(format!("{scheme}-data"));
            std::fs::create_dir_all(&data).unwrap();
            std::fs::write(data.join("hello.txt"), "hello\n").unwrap();
            write_files_manifest(folder, &scheme, component, &data, 100);
            format!("{scheme}://hello.txt")
        })
        .collect()
}

/// `SCHEME.toml` mounting the `files` example `component` on `data`.
fn write_files_manifest(folder: &Path, scheme: &str, component: &str, data: &Path, page: usize) {
    let manifest = format!(
        "component = {component:?}\n\n\
         [[files]]\nhost = {:?}\nguest = \"/data\"\naccess = \"read-only\"\n\n\
         [config]\nroot = \"/data\"\npage_size = {page}\n",
        data.to_str().unwrap()
    );
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

    /// Resident memory in KiB.
    fn rss_kib(&self) -> u64 {
        let pid = self.child.id().expect("the server runs");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }

    /// CPU time used so far, by every thread, in user and kernel mode.
    fn cpu_time(&self) -> Duration {
        let pid = self.child.id().expect("the server runs");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        // After the command name in parentheses: state is field 3, utime
        // and stime are fields 14 and 15, in USER_HZ (100 on Linux) ticks.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        Duration::from_millis(ticks * 10)
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

    /// `method` in the 2026-07-28 dialect; its result, or a failure.
    async fn result(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let request = Dialect::Stateless("").request(self.next_id, method, params);
        let mut response = self.call(request).await;
        match response.get_mut("result") {
            Some(result) => result.take(),
            None => self.server.fail(format!("{method}: {response}")),
        }
    }

    /// Initializes a session if the dialect needs one, then waits until a
    /// read succeeds.
    async fn open(&mut self, dialect: Dialect) {
        if let Dialect::Session(_) = dialect {
            let response = self.call(initialize()).await;
            if response.get("result").is_none() {
                self.server.fail(format!("initialize: {response}"));
            }
            self.send(&initialized()).await;
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
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every page of `resources/list`; the number of resources.
    async fn walk(&mut self) -> usize {
        let mut cursor: Option<String> = None;
        let mut count = 0;
        loop {
            let params = match &cursor {
                Some(cursor) => json!({ "cursor": cursor }),
                None => json!({}),
            };
            let result = self.result("resources/list", params).await;
            count += result["resources"].as_array().map_or(0, Vec::len);
            match result["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return count,
            }
        }
    }
}

/// Reads with `IN_FLIGHT` requests in flight on one pipe.
async fn drive_pipe(pipe: &mut Pipe, dialect: Dialect) -> Outcome {
    let measure_from = Instant::now() + WARM_UP;
    let stop = measure_from + RUN_FOR;
    let mut sent: HashMap<u64, Instant> = HashMap::new();
    let mut latencies = Vec::new();
    let mut last = measure_from;
    let mut next_id = 0;
    let mut answered: u64 = 0;
    let cpu_before = pipe.server.cpu_time();
    loop {
        while sent.len() < IN_FLIGHT && Instant::now() < stop {
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

async fn bench_stdio(command: std::process::Command, dialect: Dialect) -> Outcome {
    let mut pipe = Pipe::start(command);
    pipe.open(dialect).await;
    let outcome = drive_pipe(&mut pipe, dialect).await;
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
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads from `IN_FLIGHT` connections, one request in flight on each.
async fn drive_http(server: &Server, address: &str, dialect: Dialect) -> Outcome {
    let mut clients = Vec::new();
    for _ in 0..IN_FLIGHT {
        match Client::open(address, dialect).await {
            Ok(client) => clients.push(client),
            Err(error) => server.fail(format!("connecting to {address}: {error}")),
        }
    }
    let measure_from = Instant::now() + WARM_UP;
    let stop = measure_from + RUN_FOR;
    let cpu_before = server.cpu_time();
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
    let cpu = server.cpu_time() - cpu_before;
    Outcome::new(latencies, last - measure_from, cpu, answered)
}

async fn bench_http(server: Server, address: &str, dialect: Dialect) -> Outcome {
    wait_http(&server, address, dialect).await;
    let outcome = drive_http(&server, address, dialect).await;
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
            self.cpu_per_read.as_secs_f64() * 1e6
        )
    }
}

/// One server's reads over both transports.
struct ReadRow {
    label: &'static str,
    stdio: Outcome,
    http: Outcome,
}

async fn echo_reads() -> ReadRow {
    let exe = std::env::current_exe().unwrap();
    let dialect = Dialect::Stateless(RESMUX_URI);
    progress("reads: echo (native), stdio");
    let mut command = server_command(&exe);
    command.env("RESMUX_BENCH_ECHO", "stdio");
    let stdio = bench_stdio(command, dialect).await;
    progress("reads: echo (native), HTTP");
    let mut command = server_command(&exe);
    command.env("RESMUX_BENCH_ECHO", "http");
    let mut server = Server::start(command, Stdio::piped());
    let mut stdout = BufReader::new(server.child.stdout.take().unwrap()).lines();
    let port = match stdout.next_line().await {
        Ok(Some(port)) => port,
        _ => server.fail("the echo server names no port"),
    };
    let http = bench_http(server, &format!("127.0.0.1:{port}"), dialect).await;
    ReadRow {
        label: "echo (native)",
        stdio,
        http,
    }
}

async fn reference_reads(setup: &Setup) -> Option<ReadRow> {
    let (node, script) = (setup.node(), setup.reference_server());
    if !node.exists() || !script.exists() {
        eprintln!(
            "no TypeScript reference server: run `npm ci` in tests/node (scripts/bench does)"
        );
        return None;
    }
    let dialect = Dialect::Session(REFERENCE_URI);
    progress("reads: TypeScript reference, stdio");
    let mut command = server_command(&node);
    command.arg(&script).arg("stdio");
    let stdio = bench_stdio(command, dialect).await;
    progress("reads: TypeScript reference, HTTP");
    let port = free_port();
    let mut command = server_command(&node);
    command
        .arg(&script)
        .arg("streamableHttp")
        .env("PORT", port.to_string());
    // It logs every request on stdout.
    let server = Server::start(command, Stdio::null());
    let http = bench_http(server, &format!("127.0.0.1:{port}"), dialect).await;
    Some(ReadRow {
        label: "TypeScript reference",
        stdio,
        http,
    })
}

async fn resmux_reads(resmux: &Resmux) -> ReadRow {
    // The conformance fixtures, served as `test` (the manifest's scheme).
    let folder = temp_dir();
    copy(
        &resmux.plugin("conformance.wasm"),
        &folder.path().join("test.wasm"),
    );
    copy(
        &resmux.plugin("conformance.toml"),
        &folder.path().join("test.toml"),
    );
    let dialect = Dialect::Stateless(RESMUX_URI);
    let cache = resmux.cache.path();
    progress(&format!("reads: {}, stdio", resmux.label));
    let stdio = bench_stdio(resmux.serve(folder.path(), cache, &[]), dialect).await;
    progress(&format!("reads: {}, HTTP", resmux.label));
    let address = format!("127.0.0.1:{}", free_port());
    let command = resmux.serve(folder.path(), cache, &["--http", &address]);
    let http = bench_http(Server::start(command, Stdio::null()), &address, dialect).await;
    ReadRow {
        label: resmux.label,
        stdio,
        http,
    }
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

/// Every read case, run once.
struct Round {
    echo: ReadRow,
    /// `None` when the reference server is not installed.
    reference: Option<ReadRow>,
    /// The resmux under test first, then the baseline if any.
    resmuxes: Vec<ReadRow>,
}

impl Round {
    async fn run(setup: &Setup) -> Self {
        let echo = echo_reads().await;
        let reference = reference_reads(setup).await;
        let mut resmuxes = Vec::new();
        for resmux in &setup.resmuxes {
            resmuxes.push(resmux_reads(resmux).await);
        }
        Self {
            echo,
            reference,
            resmuxes,
        }
    }

    fn rows(&self) -> impl Iterator<Item = &ReadRow> {
        std::iter::once(&self.echo)
            .chain(&self.reference)
            .chain(&self.resmuxes)
    }
}

/// One ratio of reads/s, where every round has both sides: its median over
/// the rounds, then each round's.
fn ratio_row(name: &str, rounds: &[Round], ratio: impl Fn(&Round) -> Option<f64>) {
    let Some(each) = rounds.iter().map(ratio).collect::<Option<Vec<f64>>>() else {
        return;
    };
    let shown: Vec<String> = each.iter().map(|ratio| format!("{ratio:.2}")).collect();
    let median = middle(each, |ratio| *ratio);
    println!("| {name} | {median:.2} | {} |", shown.join(", "));
}

async fn reads(setup: &Setup) {
    let count = read_rounds();
    let mut rounds = Vec::new();
    for round in 1..=count {
        progress(&format!("reads: round {round} of {count}"));
        rounds.push(Round::run(setup).await);
    }
    println!(
        "## Reads: {IN_FLIGHT} in flight, {} s per case after {} ms warm-up, {count} rounds\n",
        RUN_FOR.as_secs(),
        WARM_UP.as_millis()
    );
    println!(
        "resmux and echo read `{RESMUX_URI}` ({} bytes; resmux with the response cache off), \
         the TypeScript reference `{REFERENCE_URI}`. Over HTTP: {IN_FLIGHT} keep-alive \
         connections, one request in flight each. Every case runs once per round, in turn; \
         a server's row shows its median round on each transport. CPU µs/read is the \
         server's CPU time, all its threads, user and kernel, over every read it answered.\n",
        ECHO_TEXT.len()
    );
    println!(
        "| server | stdio reads/s | p50 µs | p99 µs | CPU µs/read | HTTP reads/s | p50 µs | p99 µs | CPU µs/read |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    let per_second = |outcome: &&Outcome| outcome.per_second();
    for (server, row) in rounds[0].rows().enumerate() {
        let each: Vec<&ReadRow> = rounds
            .iter()
            .map(|round| {
                round
                    .rows()
                    .nth(server)
                    .expect("every round has the same servers")
            })
            .collect();
        let stdio = each.iter().map(|row| &row.stdio).collect();
        let http = each.iter().map(|row| &row.http).collect();
        println!(
            "| {} | {} | {} |",
            row.label,
            middle(stdio, per_second).cells(),
            middle(http, per_second).cells()
        );
    }
    println!("\n| ratio of reads/s | median | each round |\n|---|--:|--:|");
    let ratio = |a: &Outcome, b: &Outcome| a.per_second() / b.per_second();
    ratio_row("resmux stdio / TypeScript stdio", &rounds, |round| {
        let reference = round.reference.as_ref()?;
        Some(ratio(&round.resmuxes[0].stdio, &reference.stdio))
    });
    ratio_row("resmux stdio / echo stdio", &rounds, |round| {
        Some(ratio(&round.resmuxes[0].stdio, &round.echo.stdio))
    });
    ratio_row("resmux HTTP / TypeScript HTTP", &rounds, |round| {
        let reference = round.reference.as_ref()?;
        Some(ratio(&round.resmuxes[0].http, &reference.http))
    });
    ratio_row("resmux stdio / baseline stdio", &rounds, |round| {
        let baseline = round.resmuxes.get(1)?;
        Some(ratio(&round.resmuxes[0].stdio, &baseline.stdio))
    });
    ratio_row("resmux HTTP / baseline HTTP", &rounds, |round| {
        let baseline = round.resmuxes.get(1)?;
        Some(ratio(&round.resmuxes[0].http, &baseline.http))
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
    if sizes.is_empty() { vec![max] } else { sizes }
}

/// `total` small files spread over `LIST_MOUNTS` directories `f0`.. below
/// `data`, `FILES_PER_DIRECTORY` per subdirectory.
fn make_trees(data: &Path, total: usize) {
    let per_mount = total / LIST_MOUNTS;
    for mount in 0..LIST_MOUNTS {
        for index in 0..per_mount {
            let directory = data.join(format!("f{mount}/d{:04}", index / FILES_PER_DIRECTORY));
            if index % FILES_PER_DIRECTORY == 0 {
                std::fs::create_dir_all(&directory).unwrap();
            }
            let file = directory.join(format!("f{:03}.txt", index % FILES_PER_DIRECTORY));
            std::fs::write(file, format!("file {index} of mount {mount}\n")).unwrap();
        }
    }
}

/// A folder mounting `files.wasm` as `f0`..`f9`, each on its tree in `data`.
fn listing_folder(resmux: &Resmux, data: &Path) -> TempDir {
    let folder = temp_dir();
    copy(&resmux.plugin("files.wasm"), &folder.path().join("f0.wasm"));
    for mount in 0..LIST_MOUNTS {
        let scheme = format!("f{mount}");
        let tree = data.join(&scheme);
        write_files_manifest(folder.path(), &scheme, "f0.wasm", &tree, 1000);
    }
    folder
}

/// Seconds of a fresh and of a warm walk of `total` resources.
struct Walks {
    total: usize,
    fresh: Duration,
    warm: Duration,
}

async fn walk_listing(resmux: &Resmux, data: &Path, total: usize) -> Walks {
    progress(&format!("listing: {}, {total} resources", resmux.label));
    let folder = listing_folder(resmux, data);
    let mut pipe = Pipe::start(resmux.serve(folder.path(), resmux.cache.path(), &[]));
    pipe.result("resources/list", json!({})).await;
    let mut timed = [Duration::ZERO; 2];
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
        total,
        fresh: timed[0],
        warm: timed[1],
    }
}

fn per_resource(time: Duration, total: usize) -> f64 {
    time.as_secs_f64() * 1e6 / total as f64
}

async fn listing(setup: &Setup) {
    let sizes = list_sizes();
    let trees = temp_dir();
    let mut results: Vec<(&str, Vec<Walks>)> = Vec::new();
    let mut datas = Vec::new();
    for &total in &sizes {
        progress(&format!("listing: creating {total} files"));
        let data = trees.path().join(total.to_string());
        make_trees(&data, total);
        datas.push(data);
    }
    for resmux in &setup.resmuxes {
        let mut walks = Vec::new();
        for (data, &total) in datas.iter().zip(&sizes) {
            walks.push(walk_listing(resmux, data, total).await);
        }
        results.push((resmux.label, walks));
    }
    println!(
        "## Listing walk: {LIST_MOUNTS} mounts of `files` (plugin pages of 1000), stdio, \
         every page of `resources/list`\n"
    );
    println!("First walk on a fresh server (after one first page), then a second on the same.\n");
    println!("| server | resources | first walk s | µs/resource | second walk s | µs/resource |");
    println!("|---|--:|--:|--:|--:|--:|");
    for (label, walks) in &results {
        for walk in walks {
            println!(
                "| {label} | {} | {:.2} | {:.1} | {:.2} | {:.1} |",
                walk.total,
                walk.fresh.as_secs_f64(),
                per_resource(walk.fresh, walk.total),
                walk.warm.as_secs_f64(),
                per_resource(walk.warm, walk.total),
            );
        }
    }
    if sizes.len() > 1 {
        let (small, large) = (sizes[0], sizes[sizes.len() - 1]);
        println!("\n| server | µs/resource {large} / {small}, first | second |\n|---|--:|--:|");
        for (label, walks) in &results {
            let (first, last) = (&walks[0], &walks[walks.len() - 1]);
            println!(
                "| {label} | {:.2} | {:.2} |",
                per_resource(last.fresh, large) / per_resource(first.fresh, small),
                per_resource(last.warm, large) / per_resource(first.warm, small),
            );
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
    let mut uris = vec!["notes://notes/welcome".to_owned()];
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

/// Spawn to the end of a first complete walk.
async fn time_start(resmux: &Resmux, folder: &Path, cache: &Path) -> Duration {
    let started = Instant::now();
    let mut pipe = Pipe::start(resmux.serve(folder, cache, &[]));
    pipe.walk().await;
    let elapsed = started.elapsed();
    pipe.server.stop().await;
    elapsed
}

async fn restart(setup: &Setup) {
    let mut rows = Vec::new();
    for resmux in &setup.resmuxes {
        progress(&format!("restart: {}", resmux.label));
        let folder = temp_dir();
        copy_tree(&resmux.plugins, folder.path());
        add_file_mounts(folder.path(), "files.wasm", EXTRA_MOUNTS);
        let cache = temp_dir();
        time_start(resmux, folder.path(), cache.path()).await;
        let mut times = Vec::new();
        for _ in 0..RESTARTS {
            times.push(time_start(resmux, folder.path(), cache.path()).await);
        }
        rows.push((resmux.label, times));
    }
    println!(
        "## Restart: spawn to the end of a first complete walk, every example + \
         {EXTRA_MOUNTS} `files` mounts, warm compile cache\n"
    );
    println!("| server | median ms | runs ms |\n|---|--:|---|");
    for (label, mut times) in rows {
        let runs: Vec<String> = times
            .iter()
            .map(|time| format!("{:.0}", time.as_secs_f64() * 1e3))
            .collect();
        times.sort();
        println!(
            "| {label} | {:.0} | {} |",
            times[times.len() / 2].as_secs_f64() * 1e3,
            runs.join(", ")
        );
    }
    println!();
}

fn progress(what: &str) {
    eprintln!("bench: {what}");
}

// ------------------------------------------------------------------ echo

/// The native echo server: answers `initialize` and any `resources/read`
/// with one small text, over stdio or over HTTP.
mod echo {
    use super::*;

    pub fn serve(mode: &str) {
        match mode {
            "stdio" => stdio(),
            "http" => tokio::runtime::Runtime::new().unwrap().block_on(http()),
            _ => panic!("RESMUX_BENCH_ECHO is stdio or http, not {mode:?}"),
        }
    }

    /// The answer to one JSON-RPC message, none for a notification.
    fn answer(message: &[u8]) -> Option<Value> {
        let request: Value = serde_json::from_slice(message).ok()?;
        let id = request.get("id")?.clone();
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
                return Some(json!({ "jsonrpc": "2.0", "id": id,
                    "error": { "code": -32601, "message": "method not found" } }));
            }
        };
        Some(json!({ "jsonrpc": "2.0", "id": id, "result": result }))
    }

    fn stdio() {
        let mut stdout = std::io::stdout().lock();
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { return };
            if let Some(answer) = answer(line.as_bytes())
                && writeln!(stdout, "{answer}").is_err()
            {
                return;
            }
        }
    }

    async fn http() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap().port());
        std::io::stdout().flush().unwrap();
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_nodelay(true).unwrap();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(respond);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }

    async fn respond(
        request: hyper::Request<hyper::body::Incoming>,
    ) -> Result<hyper::Response<Full<Bytes>>, hyper::Error> {
        let body = request.into_body().collect().await?.to_bytes();
        let response = match answer(&body) {
            Some(answer) => hyper::Response::builder()
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(answer.to_string()))),
            None => hyper::Response::builder()
                .status(202)
                .body(Full::new(Bytes::new())),
        };
        Ok(response.unwrap())
    }
}
