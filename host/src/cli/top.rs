//! `resmux top`: live per-plugin figures from a running server's `/metrics`:
//! calls per second, p50 and p99 latency and faults over the last interval,
//! instances alive and whether the plugin is quarantined. It refreshes the
//! screen on a terminal, prints one table per interval otherwise, and prints
//! one table and exits with `--once`. A server whose `/metrics` needs a
//! token is scraped with the token as a bearer token.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use prometheus_parse::{HistogramCount, Scrape, Value};
use tokio::net::TcpStream;

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

/// One scrape and when it was taken.
struct Taken {
    scrape: Scrape,
    at: Instant,
}

async fn scrape(address: &str, token: Option<&str>) -> Result<Taken> {
    let text = tokio::time::timeout(SCRAPE_TIMEOUT, fetch(address, token))
        .await
        .with_context(|| format!("http://{address}/metrics did not answer within 5 s"))??;
    let scrape = Scrape::parse(text.lines().map(|line| Ok(line.to_owned())))
        .with_context(|| format!("http://{address}/metrics is not Prometheus text"))?;
    Ok(Taken {
        scrape,
        at: Instant::now(),
    })
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

/// What one plugin did between two scrapes.
#[derive(Default)]
struct Row {
    calls_per_second: f64,
    p50: Option<f64>,
    p99: Option<f64>,
    faults: f64,
    instances: f64,
    quarantined: bool,
}

struct Figures {
    rows: BTreeMap<String, Row>,
}

impl Figures {
    fn between(before: &Taken, now: &Taken) -> Self {
        let seconds = now.at.duration_since(before.at).as_secs_f64().max(1e-3);
        let mut rows: BTreeMap<String, Row> = BTreeMap::new();
        let calls_before = per_plugin_sum(&before.scrape, "resmux_plugin_calls_total");
        for (plugin, calls) in per_plugin_sum(&now.scrape, "resmux_plugin_calls_total") {
            let calls = increase(calls_before.get(&plugin).copied(), calls);
            rows.entry(plugin).or_default().calls_per_second = calls / seconds;
        }
        let faults_before = per_plugin_sum(&before.scrape, "resmux_plugin_faults_total");
        for (plugin, faults) in per_plugin_sum(&now.scrape, "resmux_plugin_faults_total") {
            rows.entry(plugin).or_default().faults =
                increase(faults_before.get(&plugin).copied(), faults);
        }
        for (plugin, instances) in per_plugin_sum(&now.scrape, "resmux_plugin_instances") {
            rows.entry(plugin).or_default().instances = instances;
        }
        for (plugin, quarantined) in per_plugin_sum(&now.scrape, "resmux_plugin_quarantined") {
            rows.entry(plugin).or_default().quarantined = quarantined > 0.0;
        }
        let latency_before = per_plugin_buckets(&before.scrape);
        for (plugin, buckets) in per_plugin_buckets(&now.scrape) {
            // Buckets that went back belong to a restarted server: count
            // all they hold.
            let earlier = latency_before
                .get(&plugin)
                .filter(|earlier| total(earlier) <= total(&buckets));
            let recent: Vec<HistogramCount> = buckets
                .iter()
                .map(|bucket| HistogramCount {
                    less_than: bucket.less_than,
                    count: bucket.count
                        - earlier.map_or(0.0, |earlier| bucket_count(earlier, bucket.less_than)),
                })
                .collect();
            let row = rows.entry(plugin).or_default();
            row.p50 = quantile(&recent, 0.5);
            row.p99 = quantile(&recent, 0.99);
        }
        Self { rows }
    }
}

/// How much a counter grew from `before` to `now`; all of `now` when it
/// went back (the server restarted).
fn increase(before: Option<f64>, now: f64) -> f64 {
    match before {
        Some(before) if before <= now => now - before,
        _ => now,
    }
}

/// The observations cumulative `buckets` hold.
fn total(buckets: &[HistogramCount]) -> f64 {
    buckets.last().map_or(0.0, |bucket| bucket.count)
}

/// The sum of `metric` over each plugin's series.
fn per_plugin_sum(scrape: &Scrape, metric: &str) -> BTreeMap<String, f64> {
    let mut sums = BTreeMap::new();
    for sample in scrape
        .samples
        .iter()
        .filter(|sample| sample.metric == metric)
    {
        let value = match sample.value {
            Value::Counter(value) | Value::Gauge(value) | Value::Untyped(value) => value,
            _ => continue,
        };
        if let Some(plugin) = sample.labels.get("plugin") {
            *sums.entry(plugin.to_owned()).or_insert(0.0) += value;
        }
    }
    sums
}

/// Each plugin's latency buckets, summed over its operations.
fn per_plugin_buckets(scrape: &Scrape) -> BTreeMap<String, Vec<HistogramCount>> {
    let mut summed: BTreeMap<String, Vec<HistogramCount>> = BTreeMap::new();
    for sample in &scrape.samples {
        let (true, Value::Histogram(buckets), Some(plugin)) = (
            sample.metric == "resmux_plugin_call_duration_seconds",
            &sample.value,
            sample.labels.get("plugin"),
        ) else {
            continue;
        };
        let total = summed.entry(plugin.to_owned()).or_default();
        for bucket in buckets {
            match total
                .iter_mut()
                .find(|kept| kept.less_than == bucket.less_than)
            {
                Some(kept) => kept.count += bucket.count,
                None => total.push(bucket.clone()),
            }
        }
    }
    for buckets in summed.values_mut() {
        buckets.sort_by(|a, b| a.less_than.total_cmp(&b.less_than));
    }
    summed
}

fn bucket_count(buckets: &[HistogramCount], less_than: f64) -> f64 {
    buckets
        .iter()
        .find(|bucket| bucket.less_than == less_than)
        .map_or(0.0, |bucket| bucket.count)
}

/// The upper bound of the bucket the `q` quantile falls in (cumulative
/// buckets, as Prometheus keeps them); `None` without observations.
fn quantile(buckets: &[HistogramCount], q: f64) -> Option<f64> {
    let total = total(buckets);
    if total <= 0.0 {
        return None;
    }
    buckets
        .iter()
        .find(|bucket| bucket.count >= q * total)
        .map(|bucket| bucket.less_than)
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

/// A bucket bound as a latency: `≤ 2.5ms`, `> 10s` past the last bucket.
fn latency(bound: Option<f64>) -> String {
    match bound {
        None => "-".to_owned(),
        Some(bound) if bound.is_infinite() => "> 10s".to_owned(),
        Some(bound) if bound < 1.0 => format!("≤{}ms", bound * 1000.0),
        Some(bound) => format!("≤{bound}s"),
    }
}
