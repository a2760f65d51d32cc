//! Request bodies arrive at a decent pace or not at all. A body may take
//! [`BODY_TIMEOUT`] from the moment resmux first waits for it, and one second
//! more for each [`MIN_BODY_RATE`] bytes that have arrived, up to
//! [`MAX_BODY_TIME`] in all (the scheme of Apache's `mod_reqtimeout`): a
//! client that trickles a body in (a byte every few seconds) is answered 408
//! and its connection closed, while a large body on a slow but steady link
//! arrives whole.
//!
//! Pacing also tells the connection's table ([`super::connections`])
//! when the connection has progressed: once the request's body has
//! arrived whole (at once for a request without one), or its response is
//! ready, the connection is active; once the response is sent or dropped,
//! it waits again for its next request. A connection let in past the total
//! only to answer the probes gets `503` for anything but `/healthz` and
//! `/readyz`, and each answer on it closes it.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::connections::Admitted;
use super::in_flight::until_sent;
use super::observe::is_probe;

/// How long any request body may take to arrive.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes per second a body must average past [`BODY_TIMEOUT`]: each of
/// them that arrives gives the body that much more time.
pub const MIN_BODY_RATE: u64 = 4096;
/// The longest any body may take, however much of it arrived early.
pub const MAX_BODY_TIME: Duration = Duration::from_secs(60);

/// Serves the request with `serve`, its body paced; answers 408, closing
/// the connection, when the body fell behind. Tells the connection's table
/// when the connection progressed and when it waits again; answers a
/// connection let in for the probes alone only for them.
pub async fn paced<Answer>(request: Request, serve: impl FnOnce(Request) -> Answer) -> Response
where
    Answer: Future<Output = Response>,
{
    let admitted = request.extensions().get::<Arc<Admitted>>().cloned();
    let probe_only = admitted
        .as_ref()
        .is_some_and(|admitted| admitted.probe_only());
    if probe_only && !is_probe(request.uri().path()) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONNECTION, "close")],
            "every connection the server holds is busy; this one answers only /healthz and /readyz\n",
        )
            .into_response();
    }
    let late = Arc::new(AtomicBool::new(false));
    let request = request.map(|body| {
        let mut progress = admitted.clone();
        if body.is_end_stream() {
            arrived(&mut progress);
        }
        Body::new(Paced::new(body, late.clone(), progress))
    });
    let mut response = serve(request).await;
    if late.load(Ordering::Acquire) {
        tracing::warn!("cut off a request whose body arrived too slowly");
        response = (
            StatusCode::REQUEST_TIMEOUT,
            [(header::CONNECTION, "close")],
            format!(
                "the request body arrived too slowly: a body may take {} s, and 1 s more for each {MIN_BODY_RATE} bytes that arrive\n",
                BODY_TIMEOUT.as_secs()
            ),
        )
            .into_response();
    }
    let Some(admitted) = admitted else {
        return response;
    };
    if probe_only {
        // The reserve is given back as soon as the probe is answered.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    admitted.progressed();
    response.map(|body| until_sent(body, WaitsAgain(admitted)))
}

/// A request body that fails once it falls behind its pace.
struct Paced {
    body: Body,
    /// When resmux first waited for the body, and the deadline it has now.
    clock: Option<(Instant, Pin<Box<Sleep>>)>,
    received: u64,
    /// Set when the body fell behind.
    late: Arc<AtomicBool>,
    /// The connection, until the body has arrived whole and it is told so.
    progress: Option<Arc<Admitted>>,
}

#[derive(Debug, thiserror::Error)]
#[error("the request body arrived too slowly")]
struct TooSlow;

impl Paced {
    fn new(body: Body, late: Arc<AtomicBool>, progress: Option<Arc<Admitted>>) -> Self {
        Self {
            body,
            clock: None,
            received: 0,
            late,
            progress,
        }
    }
}

/// The body has arrived whole: its connection, if not told yet, is told
/// that it is active.
fn arrived(progress: &mut Option<Arc<Admitted>>) {
    if let Some(admitted) = progress.take() {
        admitted.progressed();
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
                if this.body.is_end_stream() {
                    arrived(&mut this.progress);
                }
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(None) => {
                arrived(&mut this.progress);
                return Poll::Ready(None);
            }
            Poll::Ready(failed) => return Poll::Ready(failed),
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

/// Held by a response body until it is sent whole or dropped (its
/// connection gone): then the connection waits for its next request.
struct WaitsAgain(Arc<Admitted>);

impl Drop for WaitsAgain {
    fn drop(&mut self) {
        self.0.idle();
    }
}
