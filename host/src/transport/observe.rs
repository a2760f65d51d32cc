//! The operator's side door: `/metrics` (Prometheus text, or OpenMetrics
//! when the scraper asks for it) on a listener of its own, apart from the
//! MCP port and its tokens, and the probes `/healthz` (the process serves)
//! and `/readyz` (the plugin folder is loaded), which the MCP port answers
//! too. None of them needs a token, and the probes carry no data.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use super::http::accept;
use crate::telemetry::metrics;

/// Connections the metrics listener keeps open at once.
const MAX_CONNECTIONS: usize = 64;

static READY: AtomicBool = AtomicBool::new(false);

/// The plugin folder is loaded: `/readyz` answers ready from now on.
pub fn mark_ready() {
    READY.store(true, Ordering::Release);
}

/// The probes, for any router.
pub fn probes() -> axum::Router {
    axum::Router::new()
        .route("/healthz", get(|| async { "live\n" }))
        .route("/readyz", get(ready))
}

async fn ready() -> Response {
    if READY.load(Ordering::Acquire) {
        "ready\n".into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "loading\n").into_response()
    }
}

/// Listens on `address` for scrapes and probes, for as long as the process
/// runs; returns once it listens.
pub async fn serve_metrics(address: SocketAddr) -> Result<SocketAddr> {
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen for metrics on {address}"))?;
    let bound = listener.local_addr()?;
    let router = probes().route("/metrics", get(scrape));
    tokio::spawn(accept(
        listener,
        router,
        MAX_CONNECTIONS,
        std::future::pending(),
    ));
    tracing::info!("serving metrics at http://{bound}/metrics, probes at /healthz and /readyz");
    Ok(bound)
}

async fn scrape(headers: axum::http::HeaderMap) -> Response {
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|accept| accept.contains("application/openmetrics-text"));
    let content_type = if openmetrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        prometheus_client::encoding::prometheus_text::CONTENT_TYPE
    };
    match tokio::task::spawn_blocking(move || metrics().encode(openmetrics)).await {
        Ok(body) => ([(header::CONTENT_TYPE, content_type)], body).into_response(),
        Err(failure) => {
            tracing::error!("cannot encode the metrics: {failure}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the metrics could not be encoded\n",
            )
                .into_response()
        }
    }
}
