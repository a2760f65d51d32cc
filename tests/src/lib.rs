//! Helpers shared by the integration tests: where the built binary and
//! plugins are, plugin folders made for one test, and two ways of talking to a
//! real `resmux serve` over stdio: the rmcp client, and raw JSON-RPC lines for
//! checks on the wire itself; and a loopback HTTP server for plugins to reach.
//!
//! Build first with `scripts/build`: the tests use `target/release/resmux`
//! (or `$RESMUX_BIN`) and the components in `target/plugins/` and
//! `target/test-plugins/`.

mod http_stub;

pub use http_stub::{HttpStub, Reply};

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use rmcp::RoleClient;
use rmcp::model::{ClientCapabilities, ClientConfig, ErrorData, Implementation, ProtocolVersion};
use rmcp::service::{
    ClientCacheConfig, ClientLifecycleMode, ClientServiceExt, RunningService, ServiceError,
};
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

/// How long any single exchange with the server may take before a test fails.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf()
}

/// The `resmux` binary under test.
pub fn resmux_bin() -> PathBuf {
    std::env::var_os("RESMUX_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/release/resmux"))
}

/// A component built by `scripts/build`: an example or a test plugin.
pub fn component(name: &str) -> PathBuf {
    let target = workspace().join("target");
    [target.join("plugins"), target.join("test-plugins")]
        .into_iter()
        .map(|dir| dir.join(format!("{name}.wasm")))
        .find(|path| path.exists())
        .unwrap_or_else(|| panic!("component {name}.wasm is not built: run scripts/build first"))
}

/// Makes a FIFO at `path`, which nobody writes unless the test does.
pub fn mkfifo(path: &Path) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", path.display());
}

/// The names of the threads of process `pid` that wait in the open of a
/// FIFO for its other end.
pub fn stuck_on_a_fifo(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|task| {
            let task = task.ok()?.path();
            let waiting = std::fs::read_to_string(task.join("wchan")).ok()?;
            let name = std::fs::read_to_string(task.join("comm")).ok()?;
            (waiting == "wait_for_partner").then(|| name.trim_end().to_owned())
        })
        .collect()
}

/// Waits until `count` of the threads of process `pid` wait in the open of
/// a FIFO, for at most [`EXCHANGE_TIMEOUT`].
pub async fn until_stuck_on_a_fifo(pid: u32, count: usize) {
    let deadline = tokio::time::Instant::now() + EXCHANGE_TIMEOUT;
    loop {
        let stuck = stuck_on_a_fifo(pid);
        if stuck.len() >= count {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {count} threads got stuck on the FIFO: {stuck:?}",
            stuck.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Opens the FIFO at `path` for writing without waiting for a reader,
/// which ends every open of it that waits for a writer (or fails at once,
/// with none waiting).
pub fn release_fifo(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
}

/// Opens the FIFO at `path` for reading without waiting for a writer, so
/// that a writer's open of it does not wait either: held and never read,
/// it leaves every write past the pipe's buffer blocked.
pub fn hold_fifo_unread(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)
}

/// The lines of the audit log at `path`, parsed, once it holds at least
/// `count` whole ones, waiting for at most [`EXCHANGE_TIMEOUT`]: resmux
/// appends them from a thread of its own, so a line may reach the file
/// just after its answer reached the client.
pub async fn audit_lines(path: &Path, count: usize) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + EXCHANGE_TIMEOUT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let whole = text.rfind('\n').map_or("", |end| &text[..=end]);
        if whole.lines().count() >= count {
            return whole
                .lines()
                .map(|line| {
                    serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}"))
                })
                .collect();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} audit lines were not written within {EXCHANGE_TIMEOUT:?}: {text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The compile cache the tests share, so each component compiles once.
pub fn cache_dir() -> PathBuf {
    workspace().join("target/test-cache")
}

/// A plugin folder that lives as long as the test.
pub struct Folder {
    dir: tempfile::TempDir,
}

impl Folder {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temporary folder"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Adds the built component `component` as `NAME.wasm`.
    pub fn plugin(&self, name: &str, component_name: &str) -> &Self {
        std::fs::copy(
            component(component_name),
            self.path().join(format!("{name}.wasm")),
        )
        .expect("the component copies");
        self
    }

    /// Writes `NAME.toml`.
    pub fn manifest(&self, name: &str, toml: &str) -> &Self {
        self.file(&format!("{name}.toml"), toml.as_bytes())
    }

    /// Writes any file below the folder, creating its parents.
    pub fn file(&self, relative: &str, bytes: &[u8]) -> &Self {
        let path = self.path().join(relative);
        std::fs::create_dir_all(path.parent().expect("a file has a parent")).unwrap();
        std::fs::write(path, bytes).expect("the file writes");
        self
    }
}

/// A folder with the `notes` example and the conformance fixtures as `test`.
pub fn notes_and_fixtures() -> Folder {
    let folder = Folder::new();
    folder
        .plugin("notes", "notes")
        .plugin("conformance", "conformance")
        .manifest("conformance", "scheme = \"test\"\n");
    folder
}

/// What a read of `liar://spin` fails with in [`liar_and_notes`].
pub const SPIN_LIMIT: &str = "plugin liar exceeded its time limit of 300 ms in read";

/// How many more faults [`RawServer::read_until_quarantined`] lets pass: the
/// quarantine each starts is twice as long as the one before, 16 s after
/// the fourth, which the read after it surely meets.
pub const MOST_FAULTS_PAST_A_QUARANTINE: usize = 4;

/// A folder with `notes` and the hostile `liar` test plugin, granted `data`
/// at `/data` (`more` of its manifest follows the grant).
pub fn liar_granted_data(more: &str) -> Folder {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .plugin("notes", "notes")
        .manifest(
            "liar",
            &format!("[[files]]\nhost = \"data\"\nguest = \"/data\"\n{more}"),
        );
    folder
}

/// The liar with `data` granted at `/data`, a file `x.txt` in it, and the
/// limits in `limits` (lines of its `[limits]` section).
pub fn liar_with(limits: &str) -> Folder {
    let folder = liar_granted_data(&format!("[limits]\n{limits}\n"));
    folder.file("data/x.txt", b"x");
    folder
}

/// Adds the `notes` example to `folder` as `later`, and asserts that the
/// server mounts it and that it answers: the folder is still watched, and
/// new plugins still start.
pub async fn a_plugin_added_later_serves(server: &mut RawServer, folder: &Folder) {
    folder.plugin("later", "notes");
    server
        .wait_for_log("plugin added scheme=\"later\"", 1, EXCHANGE_TIMEOUT)
        .await;
    assert!(
        server
            .read_text("later://notes/welcome")
            .await
            .starts_with("# Welcome")
    );
}

/// Asserts that the `notes` example still answers.
pub async fn notes_still_answer(server: &mut RawServer) {
    assert_eq!(
        server.read_text("notes://notes/welcome").await,
        "# Welcome\n\nThese notes are served by a WebAssembly plugin through resmux.\n",
        "another plugin keeps serving"
    );
}

/// A folder with the hostile `liar` test plugin, held to 300 ms a call,
/// beside the `notes` example.
pub fn liar_and_notes() -> Folder {
    let folder = Folder::new();
    folder
        .plugin("liar", "liar")
        .manifest("liar", "[limits]\ntimeout_ms = 300\n")
        .plugin("notes", "notes");
    folder
}

/// The message of a JSON-RPC error response.
pub fn error_message(response: &Value) -> &str {
    response["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error response: {response}"))
}

impl Default for Folder {
    fn default() -> Self {
        Self::new()
    }
}

/// The protocol era a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// `initialize`, up to 2025-11-25.
    Legacy,
    /// `server/discover` and per-request `_meta`, 2026-07-28.
    Modern,
}

impl Era {
    pub const ALL: [Era; 2] = [Era::Legacy, Era::Modern];

    /// The JSON-RPC code of "resource not found" in this era.
    pub fn not_found_code(self) -> i32 {
        match self {
            Era::Legacy => -32002,
            Era::Modern => -32602,
        }
    }
}

/// Runs a `resmux` subcommand to completion.
pub fn resmux(args: &[&str]) -> std::process::Output {
    std::process::Command::new(resmux_bin())
        .args(args)
        .env("RESMUX_CACHE_DIR", cache_dir())
        .env("RUST_LOG", "warn")
        .output()
        .expect("resmux runs")
}

/// The sha256 pin of `component`, as `resmux inspect` prints it.
pub fn digest_of(component: &Path) -> String {
    let report = resmux(&["inspect", component.to_str().unwrap()]);
    String::from_utf8(report.stdout)
        .unwrap()
        .lines()
        .find_map(|line| line.strip_prefix("sha256     "))
        .expect("inspect prints the digest")
        .to_owned()
}

/// `resmux` with the tests' compile cache, logging at `info`, killed with
/// the test.
fn resmux_command() -> Command {
    let mut command = Command::new(resmux_bin());
    command
        .env("RESMUX_CACHE_DIR", cache_dir())
        .env("RUST_LOG", "info")
        .kill_on_drop(true);
    command
}

fn serve_command(folder: &Path, args: &[&str]) -> Command {
    let mut command = resmux_command();
    command.arg("serve").arg("--plugins").arg(folder).args(args);
    command
}

/// An rmcp client session with a server.
pub type McpClient = RunningService<RoleClient, ClientConfig>;

/// An rmcp client connected to `resmux serve` on `folder`.
pub async fn client(folder: &Path, args: &[&str], era: Era) -> Result<McpClient> {
    let (transport, _) = TokioChildProcess::builder(serve_command(folder, args))
        .stderr(Stdio::null())
        .spawn()?;
    let lifecycle = match era {
        Era::Legacy => ClientLifecycleMode::Initialize,
        Era::Modern => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    };
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("resmux-tests", "0"),
    );
    let client = tokio::time::timeout(
        EXCHANGE_TIMEOUT,
        info.serve_with_lifecycle(transport, lifecycle),
    )
    .await
    .context("the server did not answer the handshake in time")??;
    // Every call of a test must reach the server, whatever ttlMs says.
    client
        .set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    Ok(client)
}

/// The JSON-RPC error inside a failed client call.
pub fn mcp_error<T: std::fmt::Debug>(result: Result<T, ServiceError>) -> ErrorData {
    match result {
        Err(ServiceError::McpError(error)) => error,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

/// `params` with the `_meta` every 2026-07-28 request carries.
fn modern(mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    });
    params
}

/// `resmux serve` driven with raw JSON-RPC lines, for checks on the wire.
pub struct RawServer {
    child: Child,
    /// Drains stderr as it comes, so the server never blocks on a full pipe
    /// (unless started with [`RawServer::start_stalling_stderr`]).
    stderr: tokio::task::JoinHandle<std::io::Result<()>>,
    /// What the server wrote to stderr so far, as bytes (a read may end
    /// inside a character).
    log: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    /// The stderr pipe nobody reads, for a server whose log reader stalls.
    _stalled: Option<ChildStderr>,
    /// None once closed.
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    next_id: u64,
    /// Notifications received while waiting for responses.
    pub notifications: Vec<Value>,
    /// Responses that arrived before they were waited for.
    early: Vec<Value>,
}

impl RawServer {
    pub fn start(folder: &Path, args: &[&str]) -> Result<Self> {
        Self::start_with_env(folder, args, &[])
    }

    /// Starts the server with extra variables in its environment.
    pub fn start_with_env(folder: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<Self> {
        let mut command = serve_command(folder, args);
        command.envs(env.iter().copied());
        Self::spawn(command, true)
    }

    /// Starts `resmux dev` on a plugin project, serving stdio, with extra
    /// variables in its environment.
    pub fn dev(project: &Path, env: &[(&str, &str)]) -> Result<Self> {
        let mut command = resmux_command();
        command.arg("dev").arg(project).envs(env.iter().copied());
        Self::spawn(command, true)
    }

    /// Starts the server with a stderr pipe that is never read: once the
    /// pipe's buffer is full, every write to it blocks.
    pub fn start_stalling_stderr(folder: &Path, args: &[&str]) -> Result<Self> {
        Self::spawn(serve_command(folder, args), false)
    }

    fn spawn(mut command: Command, drain: bool) -> Result<Self> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {}", resmux_bin().display()))?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
        let mut pipe = child.stderr.take().expect("stderr is piped");
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (stderr, stalled) = if drain {
            let log = log.clone();
            let drained = tokio::spawn(async move {
                let mut chunk = vec![0; 8192];
                loop {
                    let read = pipe.read(&mut chunk).await?;
                    if read == 0 {
                        return Ok(());
                    }
                    log.lock().unwrap().extend_from_slice(&chunk[..read]);
                }
            });
            (drained, None)
        } else {
            (tokio::spawn(async { Ok(()) }), Some(pipe))
        };
        Ok(Self {
            child,
            stderr,
            log,
            _stalled: stalled,
            stdin: Some(stdin),
            stdout,
            next_id: 1,
            notifications: Vec::new(),
            early: Vec::new(),
        })
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the server is running")
    }

    /// Kills the server with SIGKILL, as the OOM killer or an impatient
    /// operator would, and waits until it is gone.
    pub async fn kill(mut self) -> Result<()> {
        self.child.kill().await?;
        Ok(())
    }

    /// Starts the server and completes the 2025-11-25 handshake.
    pub async fn legacy(folder: &Path) -> Result<Self> {
        let mut server = Self::start(folder, &[])?;
        server.initialize("2025-11-25").await?;
        Ok(server)
    }

    /// `resources/read` of `uri`; the whole response.
    pub async fn read(&mut self, uri: &str) -> Result<Value> {
        self.request("resources/read", json!({ "uri": uri })).await
    }

    /// The text of the first content of reading `uri`; panics naming the
    /// response when there is none.
    pub async fn read_text(&mut self, uri: &str) -> String {
        let response = self.read(uri).await.unwrap();
        response["result"]["contents"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("{uri}: {response}"))
            .to_owned()
    }

    /// The message of the error reading `uri` answers; panics naming the
    /// response when it is no error.
    pub async fn read_error(&mut self, uri: &str) -> String {
        let response = self.read(uri).await.unwrap();
        error_message(&response).to_owned()
    }

    /// Reads `uri`, whose reads fault with a message containing `fault`,
    /// until the answer is the refusal of a quarantine (of the path or of
    /// the whole plugin); returns its message, and how many reads faulted
    /// before it. A test calls this once the faults that start the first
    /// quarantine are behind it, which the log must already tell: that
    /// quarantine lasts one second, so a read that comes later on a loaded
    /// machine runs and faults again, and must start the next quarantine,
    /// twice as long, as the log must tell too.
    pub async fn read_until_quarantined(&mut self, uri: &str, fault: &str) -> (String, usize) {
        self.quarantine_logged(0).await;
        for faulted in 0..MOST_FAULTS_PAST_A_QUARANTINE {
            let message = self.read_error(uri).await;
            if message.contains("is quarantined") {
                return (message, faulted);
            }
            assert!(
                message.contains(fault),
                "{uri} was neither refused as quarantined nor faulted: {message}"
            );
            self.quarantine_logged(faulted + 1).await;
        }
        let message = self.read_error(uri).await;
        assert!(
            message.contains("is quarantined"),
            "{uri} faulted {MOST_FAULTS_PAST_A_QUARANTINE} more times and is still not quarantined: {message}"
        );
        (message, MOST_FAULTS_PAST_A_QUARANTINE)
    }

    /// Waits until the log tells of the quarantine that follows `earlier`
    /// quarantines in a row (the first lasts one second, and each next one
    /// twice as long), started by the third fault in a row.
    pub async fn quarantine_logged(&self, earlier: usize) {
        let needle = format!(
            "quarantined for {} ms after 3 faults in a row",
            1000u64 << earlier
        );
        self.wait_for_log(&needle, 1, EXCHANGE_TIMEOUT).await;
    }

    /// Writes one line as is.
    pub async fn send_line(&mut self, line: &str) -> Result<()> {
        let stdin = self.stdin.as_mut().context("stdin is closed")?;
        stdin.write_all(line.as_bytes()).await?;
        stdin.write_all(b"\n").await?;
        stdin.flush().await?;
        Ok(())
    }

    /// Reads the next line of stdout, which must be one JSON-RPC message.
    pub async fn next_message(&mut self) -> Result<Value> {
        let line = tokio::time::timeout(EXCHANGE_TIMEOUT, self.stdout.next_line())
            .await
            .context("no message from the server in time")??
            .ok_or_else(|| anyhow!("the server closed stdout"))?;
        let message: Value = serde_json::from_str(&line)
            .with_context(|| format!("stdout carried a line that is not JSON: {line:?}"))?;
        if message.get("jsonrpc") != Some(&json!("2.0")) {
            bail!("stdout carried a line that is not JSON-RPC 2.0: {line:?}");
        }
        Ok(message)
    }

    /// The next request, with its id.
    fn next_request(&mut self, method: &str, params: Value) -> (u64, Value) {
        let id = self.next_id;
        self.next_id += 1;
        let request = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        (id, request)
    }

    /// Sends a request without waiting; returns its id.
    pub async fn send(&mut self, method: &str, params: Value) -> Result<u64> {
        let (id, request) = self.next_request(method, params);
        self.send_line(&request.to_string()).await?;
        Ok(id)
    }

    /// Sends a read of each of `uris` without waiting, in one write, so
    /// that the server reads them in one go; returns their ids.
    pub async fn send_reads_together(&mut self, uris: &[&str]) -> Result<Vec<u64>> {
        let mut ids = Vec::new();
        let mut lines = String::new();
        for uri in uris {
            let (id, request) = self.next_request("resources/read", json!({ "uri": uri }));
            ids.push(id);
            lines.push_str(&format!("{request}\n"));
        }
        let stdin = self.stdin.as_mut().context("stdin is closed")?;
        stdin.write_all(lines.as_bytes()).await?;
        stdin.flush().await?;
        Ok(ids)
    }

    /// Sends a read of `uri` without waiting; returns its id.
    pub async fn send_read(&mut self, uri: &str) -> Result<u64> {
        self.send("resources/read", json!({ "uri": uri })).await
    }

    /// Sends a request and returns the response with its id.
    pub async fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        let id = self.send(method, params).await?;
        self.response(id).await
    }

    /// Whether the response with `id` came while waiting for another.
    pub fn has_answered(&self, id: u64) -> bool {
        self.early.iter().any(|m| m.get("id") == Some(&json!(id)))
    }

    /// Waits for the response with `id`, keeping notifications, and
    /// responses to other requests sent with [`Self::send`], aside.
    pub async fn response(&mut self, id: u64) -> Result<Value> {
        if let Some(index) = self
            .early
            .iter()
            .position(|m| m.get("id") == Some(&json!(id)))
        {
            return Ok(self.early.remove(index));
        }
        loop {
            let message = self.next_message().await?;
            match message.get("id") {
                Some(found) if found == &json!(id) => return Ok(message),
                Some(found) if found.as_u64().is_some_and(|found| found < self.next_id) => {
                    self.early.push(message);
                }
                Some(_) => bail!("unexpected message while waiting for response {id}: {message}"),
                None => self.notifications.push(message),
            }
        }
    }

    /// Waits for the first notification with `method` that `matches`,
    /// looking first at those kept aside; others keep waiting in
    /// [`Self::notifications`].
    pub async fn notification(
        &mut self,
        method: &str,
        matches: impl Fn(&Value) -> bool,
    ) -> Result<Value> {
        let wanted = |message: &Value| message["method"] == method && matches(message);
        if let Some(index) = self.notifications.iter().position(wanted) {
            return Ok(self.notifications.remove(index));
        }
        loop {
            let message = self
                .next_message()
                .await
                .with_context(|| format!("waiting for {method}"))?;
            if message.get("id").is_some() && message.get("method").is_none() {
                self.early.push(message);
            } else if wanted(&message) {
                return Ok(message);
            } else {
                self.notifications.push(message);
            }
        }
    }

    /// The legacy handshake at `version`; returns the initialize result.
    pub async fn initialize(&mut self, version: &str) -> Result<Value> {
        let response = self
            .request(
                "initialize",
                json!({
                    "protocolVersion": version,
                    "capabilities": {},
                    "clientInfo": { "name": "raw", "version": "0" }
                }),
            )
            .await?;
        self.send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
            .await?;
        response
            .get("result")
            .cloned()
            .ok_or_else(|| anyhow!("initialize failed: {response}"))
    }

    /// The URIs of every page of the resource listing, walked from the start.
    pub async fn resource_uris(&mut self) -> Result<Vec<String>> {
        let mut uris = Vec::new();
        let mut params = json!({});
        loop {
            let page = self.request("resources/list", params).await?;
            let resources = page["result"]["resources"]
                .as_array()
                .with_context(|| format!("not a listing: {page}"))?;
            uris.extend(
                resources
                    .iter()
                    .filter_map(|resource| resource["uri"].as_str().map(str::to_owned)),
            );
            match page["result"]["nextCursor"].as_str() {
                Some(cursor) => params = json!({ "cursor": cursor }),
                None => return Ok(uris),
            }
        }
    }

    /// A 2026-07-28 request: `params` plus the required `_meta`.
    pub async fn modern_request(&mut self, method: &str, params: Value) -> Result<Value> {
        self.request(method, modern(params)).await
    }

    /// Sends a 2026-07-28 request without waiting; returns its id.
    pub async fn modern_send(&mut self, method: &str, params: Value) -> Result<u64> {
        self.send(method, modern(params)).await
    }

    /// Waits until the server has written `needle` to stderr `count` times,
    /// for at most `patience`; returns what it wrote so far.
    pub async fn wait_for_log(&self, needle: &str, count: usize, patience: Duration) -> String {
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let log = decoded(&self.log);
            if log.matches(needle).count() >= count {
                return log;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{needle:?} did not appear {count} times in the log: {log}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Closes stdin, waits for the server to exit, and returns its stderr;
    /// it must have written nothing more on stdout.
    pub async fn stop(self) -> Result<String> {
        let (last, stderr) = self.finish().await?;
        if !last.is_empty() {
            bail!("stdout carried trailing output: {last:?}");
        }
        Ok(stderr)
    }

    /// Closes stdin, waits for the server to exit, and returns the messages
    /// it wrote on stdout meanwhile, and its stderr.
    pub async fn finish(mut self) -> Result<(Vec<Value>, String)> {
        drop(self.stdin.take());
        self.exit("after stdin closed").await
    }

    /// Sends SIGTERM with stdin still open, waits for the server to exit,
    /// and returns the messages it wrote on stdout meanwhile, and its stderr.
    pub async fn terminate(self) -> Result<(Vec<Value>, String)> {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()?;
        if !sent.success() {
            bail!("cannot send SIGTERM to the server");
        }
        self.exit("after SIGTERM").await
    }

    async fn exit(mut self, when: &str) -> Result<(Vec<Value>, String)> {
        let status = tokio::time::timeout(EXCHANGE_TIMEOUT, self.child.wait())
            .await
            .with_context(|| format!("the server did not exit {when}"))??;
        let mut last = Vec::new();
        while let Some(line) = self.stdout.next_line().await? {
            if line.trim().is_empty() {
                continue;
            }
            let message: Value = serde_json::from_str(&line)
                .with_context(|| format!("stdout carried a line that is not JSON: {line:?}"))?;
            last.push(message);
        }
        self.stderr.await??;
        let stderr = decoded(&self.log);
        if !status.success() {
            bail!("the server exited with {status}: {stderr}");
        }
        Ok((last, stderr))
    }
}

/// The text of a server's stderr so far.
fn decoded(log: &std::sync::Mutex<Vec<u8>>) -> String {
    String::from_utf8_lossy(&log.lock().unwrap()).into_owned()
}

/// A loopback address with a port free a moment ago, for a server a test
/// starts.
pub fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port is free");
    listener.local_addr().expect("a bound address").to_string()
}

/// The value of the sample `series` (name and labels, as exposed) in the
/// exposition of a server's `--metrics` listener at `metrics`, if it is there.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    sample_in(&scrape(metrics), series)
}

/// The exposition of a server's `--metrics` listener at `metrics`.
pub fn scrape(metrics: &str) -> String {
    http_get(metrics, "/metrics", &[]).unwrap().1
}

/// The value of the sample `series` in `exposition`, if it is there.
pub fn sample_in(exposition: &str, series: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Waits until the sample `series` of the server whose metrics listen at
/// `metrics` is there and `wanted` accepts it, for at most
/// [`EXCHANGE_TIMEOUT`]; fails saying `what` did not happen otherwise.
pub async fn wait_for_sample(
    metrics: &str,
    series: &str,
    what: &str,
    wanted: impl Fn(f64) -> bool,
) {
    let deadline = tokio::time::Instant::now() + EXCHANGE_TIMEOUT;
    loop {
        let value = sample(metrics, series);
        if value.is_some_and(&wanted) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} within {EXCHANGE_TIMEOUT:?}: {series} is {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the server whose metrics listen at `metrics` has taken a
/// change report of `plugin`. The first report after a subscription only
/// sets what the next ones are compared with, so a change made before it
/// may be missed; a change made once it is taken is news to the
/// subscription.
pub async fn first_change_report(metrics: &str, plugin: &str) {
    let series = format!(
        r#"resmux_plugin_calls_total{{plugin="{plugin}",operation="changes",outcome="ok"}}"#
    );
    let what = format!("{plugin} was not asked for its change report");
    wait_for_sample(metrics, &series, &what, |reports| reports >= 1.0).await;
}

/// `GET path` from `address` over HTTP/1.0 with `headers`: the status and
/// the body.
pub fn http_get(address: &str, path: &str, headers: &[(&str, &str)]) -> Result<(u16, String)> {
    http_request(address, "GET", path, headers, "")
}

/// `POST path` to `address` over HTTP/1.0 with `headers` and `body`: the
/// status and the response's body, read until the server closes it.
pub fn http_post(
    address: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<(u16, String)> {
    http_request(address, "POST", path, headers, body)
}

fn http_request(
    address: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address)
        .with_context(|| format!("cannot connect to {address}"))?;
    stream.set_read_timeout(Some(EXCHANGE_TIMEOUT))?;
    let mut request = format!("{method} {path} HTTP/1.0\r\nHost: {address}\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .with_context(|| format!("no HTTP response: {response:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("no HTTP status: {head:?}"))?;
    Ok((status, body.to_owned()))
}

/// Polls `http://address/readyz` until it answers 200.
pub async fn wait_until_ready(address: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + EXCHANGE_TIMEOUT;
    loop {
        if let Ok((200, _)) = http_get(address, "/readyz", &[]) {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("http://{address}/readyz did not answer ready within {EXCHANGE_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `count` calls of `plugin` run at once, as the metrics at
/// `metrics` show them: its instances alive, less those idle, are each in
/// a call.
pub async fn until_calls_run(metrics: &str, plugin: &str, count: usize) {
    let alive = format!("resmux_plugin_instances{{plugin=\"{plugin}\"}}");
    let idle = format!("resmux_plugin_idle_instances{{plugin=\"{plugin}\"}}");
    let deadline = tokio::time::Instant::now() + EXCHANGE_TIMEOUT;
    loop {
        // One scrape for both figures, so that they are of one moment.
        let exposition = scrape(metrics);
        let figure = |series: &str| sample_in(&exposition, series).unwrap_or(0.0);
        let running = figure(&alive) - figure(&idle);
        if running >= count as f64 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{running} calls of {plugin} ran at once, not {count}: {exposition}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
