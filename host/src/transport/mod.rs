//! The edge: how MCP messages reach the protocol handler. stdio for a client
//! that starts resmux itself, Streamable HTTP for a long-lived service. Checks
//! that belong to the wire (`Host`, `Origin`) live here, and so does the
//! accept loop both listeners share ([`listener`]: bounds on connections and
//! request bodies), and the operator's listener for metrics and probes
//! ([`observe`]).

mod challenge;
mod connections;
mod direct;
mod http;
mod http_reads;
mod listener;
mod observe;
mod pacing;
mod sessions;
mod stdio;

pub use connections::ConnectionLimits;
pub use http::{HttpOptions, serve_http};
pub use listener::HEADER_TIMEOUT;
pub use observe::{mark_ready, read_metrics_token, serve_metrics};

use anyhow::{Context, Result};
use rmcp::ServiceExt;

use crate::protocol::Observed;

/// Serves one MCP session on stdin and stdout until the client closes it.
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
    let service = direct::PeerHandover::new(handler, reads.clone())
        .into_dyn()
        .serve(stdio::Stdio::new(input, output, reads))
        .await
        .context("the MCP session did not start")?;
    service.waiting().await.context("the MCP session failed")?;
    Ok(())
}
