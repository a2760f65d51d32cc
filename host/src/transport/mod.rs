//! The edge: how MCP messages reach the protocol handler. stdio for a client
//! that starts resmux itself, Streamable HTTP for a long-lived service. Checks
//! that belong to the wire (`Host`, `Origin`) live here.

mod http;
mod sessions;

pub use http::{HEADER_TIMEOUT, HttpOptions, serve_http};

use anyhow::{Context, Result};
use rmcp::ServiceExt;

use crate::protocol::ResmuxServer;

/// Serves one MCP session on stdin and stdout until the client closes it.
pub async fn serve_stdio(server: ResmuxServer) -> Result<()> {
    let service = server
        .serve(rmcp::transport::stdio_pipes())
        .await
        .context("the MCP session did not start")?;
    service.waiting().await.context("the MCP session failed")?;
    Ok(())
}
