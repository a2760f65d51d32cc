//! The MCP requests an HTTP listener is answering, counted until their
//! answers are whole (a streamed body until its last frame is sent), so
//! that a graceful stop can wait for them before it ends the sessions they
//! run in. A stream that only ends
//! when the client or the server ends it (a session's `GET` stream, a
//! 2026-07-28 `subscriptions/listen`) is not counted: it is ended by the stop.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use http_body_util::BodyExt;
use tokio::sync::Notify;

/// The header a 2026-07-28 request names its method in.
const METHOD_HEADER: &str = "mcp-method";
const LISTEN: &str = "subscriptions/listen";

#[derive(Default)]
pub struct InFlight {
    count: AtomicUsize,
    none_left: Notify,
}

/// One request counted until it is dropped.
struct Counted(Arc<InFlight>);

impl Drop for Counted {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.none_left.notify_waiters();
        }
    }
}

impl InFlight {
    /// Resolves once no counted request is left.
    pub async fn until_none(&self) {
        loop {
            let none_left = self.none_left.notified();
            let mut none_left = std::pin::pin!(none_left);
            none_left.as_mut().enable();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            none_left.await;
        }
    }
}

/// Counts `request` until its response's body has been sent or dropped.
pub async fn count(
    State(in_flight): State<Arc<InFlight>>,
    request: Request,
    next: Next,
) -> Response {
    let streams = request.method() == Method::GET
        || request
            .headers()
            .get(METHOD_HEADER)
            .is_some_and(|method| method == LISTEN);
    if streams {
        return next.run(request).await;
    }
    in_flight.count.fetch_add(1, Ordering::AcqRel);
    let counted = Counted(in_flight);
    let response = next.run(request).await;
    // A body whole already (a read's JSON) is sent by the connection's own
    // graceful end; only a body still to come is followed, and a wrapped
    // body loses its length (hyper would send it chunked).
    if response.body().size_hint().exact().is_some() {
        return response;
    }
    response.map(|body| {
        Body::new(body.map_frame(move |frame| {
            let _until_sent = &counted;
            frame
        }))
    })
}
