//! The MCP requests an HTTP listener is answering, counted until their
//! response bodies are sent whole (or dropped with their connection), so
//! that a graceful stop can wait for them before it ends the sessions they
//! run in. A stream that only ends when the client or the server ends it (a
//! session's `GET` stream, a 2026-07-28 `subscriptions/listen`) is not
//! counted: it is ended by the stop.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{HeaderName, Method};
use axum::response::Response;
use hyper::body::{Frame, SizeHint};

/// The header a 2026-07-28 request names its method in.
static METHOD_HEADER: HeaderName = HeaderName::from_static("mcp-method");
const LISTEN: &str = "subscriptions/listen";

/// The requests a listener is answering.
pub use crate::under_way::UnderWay as InFlight;

/// Serves `request` with `serve`, counted until its response's body has
/// been sent or dropped.
pub async fn counted<Answer>(
    in_flight: &Arc<InFlight>,
    request: Request,
    serve: impl FnOnce(Request) -> Answer,
) -> Response
where
    Answer: Future<Output = Response>,
{
    let streams = request.method() == Method::GET
        || request
            .headers()
            .get(&METHOD_HEADER)
            .is_some_and(|method| method == LISTEN);
    if streams {
        return serve(request).await;
    }
    let counted = in_flight.start();
    serve(request).await.map(|body| until_sent(body, counted))
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
