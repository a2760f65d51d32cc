//! One listener's accept loop, shared by the MCP port ([`super::http`]) and
//! the operator's listener ([`super::observe`]): connections bounded in all
//! and per source ([`super::connections`]), request headers due within
//! [`HEADER_TIMEOUT`], bodies paced ([`super::pacing`]), and a graceful
//! stop; and the bearer token a request carries.

use std::time::Duration;

use axum::http::{HeaderMap, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

use super::connections::{ConnectionLimits, Connections};
use super::pacing;

/// How long a client may take to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves connections from `listener` until `stop`, each request's body
/// paced; returns the connections still open.
pub(super) async fn accept(
    listener: TcpListener,
    router: axum::Router,
    limits: ConnectionLimits,
    stop: impl std::future::Future<Output = ()>,
) -> GracefulShutdown {
    let router = router.layer(axum::middleware::from_fn(pacing::pace_body));
    let service = TowerToHyperService::new(router);
    let connections = Connections::new(limits);
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!("cannot accept a connection: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let Some(admitted) = connections.admit(peer) else {
            continue;
        };
        // Answers are small and go out at once: without this, Nagle's
        // algorithm meets the client's delayed acknowledgement and adds 40 ms
        // to a reply.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {error}");
        }
        let connection = http.serve_connection(TokioIo::new(stream), service.clone());
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, "connection ended: {error}");
            }
            drop(admitted);
        });
    }
    graceful
}

/// The token of the request's `Authorization: Bearer` header, if it has one.
pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let (scheme, token) = headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    Some(token.trim())
}
