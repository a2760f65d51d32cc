//! One listener's accept loop, shared by the MCP port ([`super::http`]) and
//! the operator's listener ([`super::observe`]): connections bounded in all
//! and per source, the one that has waited longest for its request closed
//! to make room for a newcomer ([`super::connections`]), request headers
//! due within [`HEADER_TIMEOUT`], bodies paced ([`super::pacing`]), and a
//! graceful stop; and the bearer token a request carries. Each request
//! carries its connection's [`Admitted`] among its extensions, through
//! which the steps that serve it tell when the connection waits and whose
//! it is.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Request, header};
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::io::InspectReader;
use tower::ServiceExt;

use super::connections::{Admitted, ConnectionLimits, Connections};
use super::pacing;

/// How long a client may take to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest the accept loop waits for a new connection to be read once
/// before it accepts the next.
const FIRST_READ_WAIT: Duration = Duration::from_millis(10);

/// Serves connections from `listener` until `stop`, each request's body
/// paced; returns the connections still open.
pub(super) async fn accept(
    listener: TcpListener,
    service: impl Serve,
    limits: ConnectionLimits,
    stop: impl Future<Output = ()>,
) -> GracefulShutdown {
    let service = Arc::new(service);
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
        let Some(place) = connections.admit(peer) else {
            continue;
        };
        // Answers are small and go out at once: without this, Nagle's
        // algorithm meets the client's delayed acknowledgement and adds 40 ms
        // to a reply.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!("cannot set TCP_NODELAY: {error}");
        }
        let eviction = place.admitted().eviction();
        let tagged = Tagged {
            inner: service.clone(),
            admitted: place.admitted().clone(),
        };
        // Tells the connection's place whenever bytes arrive.
        let admitted = place.admitted().clone();
        let stream = InspectReader::new(stream, move |read: &[u8]| {
            if !read.is_empty() {
                admitted.bytes_arrived();
            }
        });
        let connection = http.serve_connection(TokioIo::new(stream), tagged);
        let connection = graceful.watch(connection);
        let (read, first_read) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let mut read = Some(read);
            let mut connection = std::pin::pin!(connection);
            // Tells the accept loop once hyper has read what the client sent
            // so far (a prompt client's whole headers).
            let connection = std::future::poll_fn(|context| {
                let polled = connection.as_mut().poll(context);
                if let Some(read) = read.take() {
                    let _ = read.send(());
                }
                polled
            });
            // Closed to make room, the connection is dropped, and its
            // socket with it.
            tokio::select! {
                biased;
                ended = connection => {
                    if let Err(error) = ended {
                        tracing::debug!(%peer, "connection ended: {error}");
                    }
                }
                () = eviction.cancelled() => {
                    tracing::debug!(%peer, "connection closed to make room");
                }
            }
            drop(place);
        });
        // The new connection is read once before the next one is accepted
        // (for at most FIRST_READ_WAIT, should the runtime be busy): a
        // client that sent its request with its connection has its headers
        // in, and so goes after every stalled connection, before a flood of
        // newcomers can make its connection the one that has waited longest.
        let _ = tokio::time::timeout(FIRST_READ_WAIT, first_read).await;
    }
    graceful
}

/// What a listener serves: a request, whose body [`accept`] paces, to its
/// answer.
pub(super) trait Serve: Send + Sync + 'static {
    fn serve(&self, request: Request<Body>) -> impl Future<Output = Response> + Send;
}

impl Serve for axum::Router {
    async fn serve(&self, request: Request<Body>) -> Response {
        match self.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

/// A connection's service: each request carries the connection's
/// [`Admitted`] among its extensions, and its body is paced.
struct Tagged<S> {
    inner: Arc<S>,
    admitted: Arc<Admitted>,
}

impl<S: Serve> hyper::service::Service<Request<Incoming>> for Tagged<S> {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.admitted.headers_arrived();
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(self.admitted.clone());
        let inner = self.inner.clone();
        Box::pin(async move { Ok(pacing::paced(request, |request| inner.serve(request)).await) })
    }
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
