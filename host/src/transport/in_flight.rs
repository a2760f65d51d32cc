//! The MCP requests an HTTP listener is answering, counted until their
//! response bodies are sent whole (or dropped with their connection), so
//! that a graceful stop can wait for them before it ends the sessions they
//! run in. A stream that only ends when the client or the server ends it (a
//! session's `GET` stream, a 2026-07-28 `subscriptions/listen`) is not
//! counted: it is ended by the stop.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use hyper::body::{Frame, SizeHint};
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
    next.run(request)
        .await
        .map(|body| until_sent(body, counted))
}

/// `body`, holding `guard` until it is dropped: once hyper has sent it
/// whole, or its connection is gone (this listener's count of requests,
/// the connection table's turn of a connection). It passes on the body's
/// length, so that a whole answer keeps its `Content-Length`.
pub(super) fn until_sent<G: Unpin + Send + 'static>(body: Body, guard: G) -> Body {
    Body::new(UntilSent {
        body,
        _guard: guard,
    })
}

struct UntilSent<G> {
    body: Body,
    _guard: G,
}

impl<G: Unpin> HttpBody for UntilSent<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(context)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
