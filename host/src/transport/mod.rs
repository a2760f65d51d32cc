//! The edge: how MCP messages reach the protocol handler. stdio for a client
//! that starts resmux itself, Streamable HTTP for a long-lived service. Checks
//! that belong to the wire (`Host`, `Origin`) live here, and so does the
//! accept loop both listeners share ([`listener`]: bounds on connections and
//! request bodies), and the operator's listener for metrics and probes
//! ([`observe`]).

mod challenge;
mod connections;
mod direct;
mod gate;
pub(crate) mod http;
mod http_reads;
mod in_flight;
mod listener;
mod observe;
mod pacing;
mod sessions;
pub(crate) mod stdio;

pub use connections::ConnectionLimits;
pub use http::{DEFAULT_SESSION_IDLE, HttpOptions, serve_http};
pub use http_reads::{allowed_authority, request_host};
pub use listener::HEADER_TIMEOUT;
pub use observe::{OperatorToken, behind_token, mark_ready, read_token_file, serve_metrics};

use std::sync::Arc;

use anyhow::{Context, Result};
use rmcp::ServiceExt;

use crate::protocol::Observed;

/// Serves one MCP session on stdin and stdout until the client closes it,
/// or SIGTERM or SIGINT stops it as if it had: stdin is read no more, and
/// the requests in flight are answered before stdout closes.
/// The handler is boxed (`into_dyn`): rmcp runs each request as a task of
/// its own, whose future otherwise holds the future of every request kind
/// the handler answers, and tokio copies it whole into each task. Boxed,
/// the task holds a pointer: stdio reads 1.45x (the median of seven runs of
/// `scripts/bench` side by side). The transport is resmux's own ([`stdio`]),
/// and it answers reads beside rmcp's loop ([`direct`]).
pub async fn serve_stdio(server: Observed) -> Result<()> {
    let (input, output) = rmcp::transport::stdio_pipes();
    let handler = server.for_session();
    let reads = direct::DirectReads::new(handler.clone());
    let stop = Arc::new(stdio::StopReading::default());
    let signalled = stop_signal()?;
    let stopping = stop.clone();
    tokio::spawn(async move {
        signalled.await;
        tracing::info!("stopping: stdin is read no more; answering the requests in flight");
        stopping.request();
    });
    let service = direct::PeerHandover::new(handler, reads.clone())
        .into_dyn()
        .serve(stdio::Stdio::new(input, output, reads, stop))
        .await
        .context("the MCP session did not start")?;
    service.waiting().await.context("the MCP session failed")?;
    Ok(())
}

/// Installs the SIGINT and SIGTERM handlers now, so a signal that arrives
/// as soon as the server is ready is already a graceful stop; the returned
/// future resolves on the first of them.
#[cfg(unix)]
fn stop_signal() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
    })
}

/// Windows' counterpart: Ctrl+C, Ctrl+Break, and the console being closed
/// (a shutdown reaches services only). A server started with no console at all
/// (as a desktop client starts it) may have none of these to watch: it
/// stops when stdin closes.
#[cfg(windows)]
fn stop_signal() -> Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::windows;
    let events = (
        windows::ctrl_c(),
        windows::ctrl_break(),
        windows::ctrl_close(),
    );
    let (Ok(mut interrupt), Ok(mut interrupt_break), Ok(mut closed)) = events else {
        tracing::info!("no console events to watch: the server stops when stdin closes");
        return Ok(futures::future::Either::Left(std::future::pending()));
    };
    Ok(futures::future::Either::Right(async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = interrupt_break.recv() => {}
            _ = closed.recv() => {}
        }
    }))
}
