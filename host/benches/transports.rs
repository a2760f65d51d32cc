//! Throughput of reads over stdio and over Streamable HTTP, side by side in
//! one run: the real `resmux serve` binary serving the example plugins, with
//! the response cache off (every read reaches the `notes` plugin) and on.
//! Over stdio one client keeps `concurrency` requests in flight on its pipe;
//! over HTTP `concurrency` clients each send stateless 2026-07-28 requests on
//! their own keep-alive connection. Prints requests per second and latency
//! percentiles per case.
//!
//! Needs `scripts/build` first (it serves `target/plugins`). Run with
//! `cargo bench -p resmux --bench transports`.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

const URI: &str = "notes://notes/welcome";
const RUN_FOR: Duration = Duration::from_secs(3);

fn read_request(id: u64) -> Value {
    json!({
        "jsonrpc": "2.0", "id": id, "method": "resources/read",
        "params": { "uri": URI, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        }}
    })
}

fn serve(args: &[&str]) -> Child {
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    assert!(plugins.exists(), "run scripts/build first");
    Command::new(env!("CARGO_BIN_EXE_resmux"))
        .arg("serve")
        .arg("--plugins")
        .arg(&plugins)
        .args(args)
        .env("RUST_LOG", "warn,resmux::transport=info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("resmux starts")
}

/// Requests per second and latencies of one case.
struct Outcome {
    requests: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Outcome {
    fn print(mut self, case: &str) {
        self.latencies.sort();
        let at = |quantile: f64| {
            let index = ((self.latencies.len() as f64 - 1.0) * quantile).round() as usize;
            self.latencies[index].as_secs_f64() * 1e6
        };
        println!(
            "{case:<28} {:>9.0} req/s   p50 {:>7.0} us   p99 {:>7.0} us",
            self.requests as f64 / self.elapsed.as_secs_f64(),
            at(0.5),
            at(0.99)
        );
    }
}

/// One stdio session with `concurrency` requests kept in flight.
async fn stdio(concurrency: usize, cache_args: &[&str]) -> Outcome {
    let mut child = serve(cache_args);
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut sent: HashMap<u64, Instant> = HashMap::new();
    let mut next_id = 0;
    let mut latencies = Vec::new();
    let started = Instant::now();
    while started.elapsed() < RUN_FOR || !sent.is_empty() {
        while sent.len() < concurrency && started.elapsed() < RUN_FOR {
            next_id += 1;
            let mut line = read_request(next_id).to_string();
            line.push('\n');
            stdin.write_all(line.as_bytes()).await.unwrap();
            sent.insert(next_id, Instant::now());
        }
        let line = stdout.next_line().await.unwrap().expect("a response");
        let response: Value = serde_json::from_str(&line).unwrap();
        assert!(response["result"]["contents"].is_array(), "{response}");
        let id = response["id"].as_u64().unwrap();
        latencies.push(sent.remove(&id).unwrap().elapsed());
    }
    let elapsed = started.elapsed();
    drop(stdin);
    child.wait().await.unwrap();
    Outcome {
        requests: latencies.len(),
        elapsed,
        latencies,
    }
}

/// `concurrency` HTTP clients, each on its own connection.
async fn http(concurrency: usize, cache_args: &[&str]) -> Outcome {
    let mut args = vec!["--http", "127.0.0.1:0"];
    args.extend_from_slice(cache_args);
    let mut child = serve(&args);
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let address = loop {
        let line = stderr
            .next_line()
            .await
            .unwrap()
            .expect("resmux announces its address");
        if let Some(at) = line.find("http://") {
            let url = &line[at + 7..];
            break url.trim_end_matches("/mcp").to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    let started = Instant::now();
    let clients = (0..concurrency).map(|_| {
        let address = address.clone();
        tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(&address).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .unwrap();
            tokio::spawn(connection);
            let mut latencies = Vec::new();
            let mut id = 0;
            while started.elapsed() < RUN_FOR {
                id += 1;
                let request = hyper::Request::post("/mcp")
                    .header("host", &address)
                    .header("content-type", "application/json")
                    .header("accept", "application/json, text/event-stream")
                    .header("mcp-method", "resources/read")
                    .header("mcp-name", URI)
                    .header("mcp-protocol-version", "2026-07-28")
                    .body(Full::new(Bytes::from(read_request(id).to_string())))
                    .unwrap();
                let sent = Instant::now();
                let response = sender.send_request(request).await.unwrap();
                assert!(response.status().is_success(), "{}", response.status());
                let body = response.into_body().collect().await.unwrap().to_bytes();
                assert!(body.windows(8).any(|w| w == b"contents"));
                latencies.push(sent.elapsed());
            }
            latencies
        })
    });
    let mut latencies = Vec::new();
    for client in clients.collect::<Vec<_>>() {
        latencies.extend(client.await.unwrap());
    }
    let elapsed = started.elapsed();
    child.kill().await.unwrap();
    let mut rest = String::new();
    let _ = child.stdout.take().unwrap().read_to_string(&mut rest).await;
    Outcome {
        requests: latencies.len(),
        elapsed,
        latencies,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; anything else (like `cargo test`) skips.
    if !std::env::args().any(|arg| arg == "--bench") {
        return;
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        println!("reads of {URI}, {} s per case", RUN_FOR.as_secs());
        for (cache, args) in [
            ("no cache", &["--response-cache-mib", "0"][..]),
            ("cache", &[][..]),
        ] {
            for concurrency in [1, 8, 32] {
                stdio(concurrency, args)
                    .await
                    .print(&format!("stdio  c={concurrency:<3} {cache}"));
                http(concurrency, args)
                    .await
                    .print(&format!("http   c={concurrency:<3} {cache}"));
            }
        }
    });
}
