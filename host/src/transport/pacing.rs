//! Request bodies arrive at a decent pace or not at all. A body may take
//! [`BODY_TIMEOUT`] from the moment resmux first waits for it, and one second
//! more for each [`MIN_BODY_RATE`] bytes that have arrived, up to
//! [`MAX_BODY_TIME`] in all (the scheme of Apache's `mod_reqtimeout`): a
//! client that trickles a body in (a byte every few seconds) is answered 408
//! and its connection closed, while a large body on a slow but steady link
//! arrives whole.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// How long any request body may take to arrive.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes per second a body must average past [`BODY_TIMEOUT`]: each of
/// them that arrives gives the body that much more time.
pub const MIN_BODY_RATE: u64 = 4096;
/// The longest any body may take, however much of it arrived early.
pub const MAX_BODY_TIME: Duration = Duration::from_secs(60);

/// Serves the request with its body paced; answers 408, closing the
/// connection, when the body fell behind.
pub async fn pace_body(request: Request, next: Next) -> Response {
    let late = Arc::new(AtomicBool::new(false));
    let request = request.map(|body| Body::new(Paced::new(body, late.clone())));
    let response = next.run(request).await;
    if !late.load(Ordering::Acquire) {
        return response;
    }
    tracing::warn!("cut off a request whose body arrived too slowly");
    (
        StatusCode::REQUEST_TIMEOUT,
        [(header::CONNECTION, "close")],
        format!(
            "the request body arrived too slowly: a body may take {} s, and 1 s more for each {MIN_BODY_RATE} bytes that arrive\n",
            BODY_TIMEOUT.as_secs()
        ),
    )
        .into_response()
}

/// A request body that fails once it falls behind its pace.
struct Paced {
    body: Body,
    /// When resmux first waited for the body, and the deadline it has now.
    clock: Option<(Instant, Pin<Box<Sleep>>)>,
    received: u64,
    /// Set when the body fell behind.
    late: Arc<AtomicBool>,
}

#[derive(Debug, thiserror::Error)]
#[error("the request body arrived too slowly")]
struct TooSlow;

impl Paced {
    fn new(body: Body, late: Arc<AtomicBool>) -> Self {
        Self {
            body,
            clock: None,
            received: 0,
            late,
        }
    }
}

/// The time a body that has delivered `received` bytes may take.
fn allowed(received: u64) -> Duration {
    let credit = Duration::from_millis(received.saturating_mul(1000) / MIN_BODY_RATE);
    (BODY_TIMEOUT + credit).min(MAX_BODY_TIME)
}

impl HttpBody for Paced {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        let (started, deadline) = this.clock.get_or_insert_with(|| {
            let now = Instant::now();
            (now, Box::pin(tokio::time::sleep_until(now + BODY_TIMEOUT)))
        });
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received = this.received.saturating_add(data.len() as u64);
                    deadline.as_mut().reset(*started + allowed(this.received));
                }
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(ended) => return Poll::Ready(ended),
            Poll::Pending => {}
        }
        ready!(deadline.as_mut().poll(cx));
        this.late.store(true, Ordering::Release);
        Poll::Ready(Some(Err(axum::Error::new(TooSlow))))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
