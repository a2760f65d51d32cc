//! `resmux top`: live per-plugin figures from a running server's `/metrics`:
//! calls per second, p50 and p99 latency and faults over the last interval,
//! instances alive and whether the plugin is quarantined. It refreshes the
//! screen on a terminal, prints one table per interval otherwise, and prints
//! one table and exits with `--once`. A server whose `/metrics` needs a
//! token is scraped with the token as a bearer token.

use std::io::Write;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use resmux::telemetry::figures::{Figures, Latency, Sample};

/// How long one scrape may take.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// Shows the figures of the server whose metrics listen at `address`,
/// scraped with `token` as the bearer token if given.
pub async fn top(address: &str, token: Option<&str>, interval: Duration, once: bool) -> Result<()> {
    let mut before = scrape(address, token).await?;
    let mut stdout = std::io::stdout();
    let refresh = !once && std::io::IsTerminal::is_terminal(&stdout);
    loop {
        tokio::time::sleep(interval).await;
        let now = scrape(address, token).await?;
        let table = render(&Figures::between(&before, &now));
        if refresh {
            // Clear the screen and go home, then draw.
            write!(stdout, "\x1b[2J\x1b[H")?;
        }
        writeln!(
            stdout,
            "{address}: per plugin over the last {:.1} s",
            now.at.duration_since(before.at).as_secs_f64()
        )?;
        write!(stdout, "{table}")?;
        stdout.flush()?;
        if once {
            return Ok(());
        }
        if !refresh {
            writeln!(stdout)?;
        }
        before = now;
    }
}

async fn scrape(address: &str, token: Option<&str>) -> Result<Sample> {
    let text = tokio::time::timeout(SCRAPE_TIMEOUT, fetch(address, token))
        .await
        .with_context(|| format!("http://{address}/metrics did not answer within 5 s"))??;
    Sample::parse(&text).with_context(|| format!("http://{address}/metrics is not Prometheus text"))
}

async fn fetch(address: &str, token: Option<&str>) -> Result<String> {
    let stream = TcpStream::connect(address)
        .await
        .with_context(|| format!("cannot reach {address} (is resmux serving with --metrics?)"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .with_context(|| format!("cannot speak HTTP to {address}"))?;
    tokio::spawn(connection);
    let mut request = http::Request::get("/metrics").header(http::header::HOST, address);
    if let Some(token) = token {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let request = request.body(Empty::<Bytes>::new())?;
    let response = sender
        .send_request(request)
        .await
        .with_context(|| format!("http://{address}/metrics failed"))?;
    if response.status() == http::StatusCode::UNAUTHORIZED {
        bail!(
            "http://{address}/metrics answered {}: give the metrics token with --token-file",
            response.status()
        );
    }
    if !response.status().is_success() {
        bail!("http://{address}/metrics answered {}", response.status());
    }
    let body = response.into_body().collect().await?.to_bytes();
    String::from_utf8(body.to_vec())
        .with_context(|| format!("http://{address}/metrics is not UTF-8"))
}

fn render(figures: &Figures) -> String {
    let mut table = format!(
        "{:<16} {:>10} {:>10} {:>10} {:>8} {:>9}  {}\n",
        "PLUGIN", "CALLS/S", "P50", "P99", "FAULTS", "INSTANCES", "STATE"
    );
    if figures.rows.is_empty() {
        table.push_str("(no plugin has been called yet)\n");
    }
    for (plugin, row) in &figures.rows {
        table.push_str(&format!(
            "{:<16} {:>10.1} {:>10} {:>10} {:>8} {:>9}  {}\n",
            plugin,
            row.calls_per_second,
            latency(row.p50),
            latency(row.p99),
            row.faults,
            row.instances,
            if row.quarantined {
                "quarantined"
            } else {
                "serving"
            }
        ));
    }
    table
}

/// A latency, or `-` without calls.
fn latency(latency: Option<Latency>) -> String {
    latency.map_or_else(|| "-".to_owned(), |latency| latency.to_string())
}
