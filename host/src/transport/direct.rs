//! Reads over stdio answered beside rmcp's service loop.
//!
//! rmcp's loop spends more on a request than resmux spends reading it: a
//! task for the handler, a channel back to the loop, a second task to send
//! the answer, and cancellation tokens in a tree (13% of resmux's CPU per
//! stdio read, by `scripts/bench`). `resources/read`, the request a client
//! repeats, skips that once the session is open, that is once rmcp has
//! handed the handler `initialize` or the request that opens a session
//! without it ([`PeerHandover`]; `server/discover` opens none). From then
//! on the transport hands each read to the session's handler through rmcp's
//! own `Service::handle_request`, which keeps every per-request rule
//! (protocol versions, required `_meta`, dispatch), as one future that ends
//! in the answer; the transport runs it (see `stdio::Batch`). Every
//! other message, and every read before the session is open, goes through
//! rmcp's loop as before.
//!
//! Of what rmcp's loop keeps per request, a read needs only its
//! cancellation: a `notifications/cancelled` naming a read in flight here
//! ends it and drops its answer, as rmcp does, and is then handed on to
//! rmcp as well. The task-locals rmcp sets around a handler
//! (`ORIGINATING_REQUEST`, `ORIGINATING_PROTOCOL_VERSION`) only serve
//! requests the server sends the client from a handler, which a read never
//! does.
//!
//! Every request of the session is counted while it runs, except
//! `subscriptions/listen`, whose stream lasts the session: a read here from
//! when it starts until it ends (a cancelled one ends at once); a request
//! handed to rmcp's loop from when it is handed on until its handler ends or
//! its answer leaves, whichever comes first (rmcp answers some requests
//! without a handler, and starts a handler some time after it took the
//! request). The transport reads no more of stdin while
//! [`DirectReads::until_fewer_than`] says too many run.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use futures::future::BoxFuture;
use rmcp::ErrorData;
use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, GetExtensions, GetMeta,
    JsonRpcMessage, JsonRpcNotification, JsonRpcRequest, ProtocolVersion, RequestId, ServerConfig,
    ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{MaybeSendFuture, NotificationContext, Peer, RequestContext, Service};
use tokio_util::sync::CancellationToken;

use crate::protocol::Observed;

/// One session's reads answered here.
pub struct DirectReads {
    handler: Observed,
    /// Set by [`PeerHandover`] once the session is open.
    peer: OnceLock<Peer<RoleServer>>,
    /// Each read in flight here by its own number: a client may reuse a
    /// request id, and each of its reads is still answered.
    in_flight: Mutex<HashMap<u64, (RequestId, CancellationToken)>>,
    next_read: AtomicU64,
    /// Requests that run now, here and in rmcp's loop.
    running: AtomicUsize,
    /// The requests handed to rmcp's loop that run now, by id.
    passed: Mutex<HashMap<RequestId, usize>>,
    /// Woken whenever a request stops running.
    ended: tokio::sync::Notify,
}

/// The session's handler as rmcp sees it. The request that opens the
/// session (`initialize`, or the first request of a session without it)
/// hands [`DirectReads`] rmcp's peer before it is answered, so every read
/// after that answer is answered beside the loop. `server/discover` opens
/// no session: rmcp answers it during its handshake, with a peer that
/// cannot reach the client.
pub struct PeerHandover {
    handler: Observed,
    reads: Arc<DirectReads>,
}

impl PeerHandover {
    pub fn new(handler: Observed, reads: Arc<DirectReads>) -> Self {
        Self { handler, reads }
    }
}

impl Service<RoleServer> for PeerHandover {
    fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ServerResult, ErrorData>> + MaybeSendFuture + '_ {
        if !matches!(request, ClientRequest::DiscoverRequest(_)) {
            self.reads.start(&context.peer);
        }
        let handled = Handled {
            reads: self.reads.clone(),
            id: context.id.clone(),
        };
        let answer = self.handler.handle_request(request, context);
        async move {
            let _handled = handled;
            answer.await
        }
    }

    fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + MaybeSendFuture + '_ {
        self.handler.handle_notification(notification, context)
    }

    fn get_info(&self) -> ServerConfig {
        Service::get_info(&self.handler)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Service::supported_protocol_versions(&self.handler)
    }
}

/// Where one incoming message goes.
#[expect(
    clippy::large_enum_variant,
    reason = "made once per message and handed on by value, as rmcp takes it"
)]
pub enum Routed {
    /// A read, answered by `answer` (`None` if it was cancelled), whose
    /// plugin runs its calls where they are made if it has an
    /// `in_place_scheme` ([`Observed::in_place_scheme`]).
    Read {
        answer: BoxFuture<'static, Option<Answered>>,
        in_place_scheme: Option<String>,
    },
    /// Anything else, to rmcp's loop.
    Passed(ClientJsonRpcMessage),
}

/// A read's answer. The read counts as running until this (or the
/// [`Running`] taken from it) is dropped: its
/// answer's bytes are to be queued for stdout first, so that stdin is never
/// read in the moment when neither the read nor its answer is counted.
pub struct Answered {
    pub message: ServerJsonRpcMessage,
    running: Running,
}

impl Answered {
    /// The answer, apart from what keeps its read counted as running.
    pub fn into_parts(self) -> (ServerJsonRpcMessage, Running) {
        (self.message, self.running)
    }
}

impl DirectReads {
    /// Reads of the session that `handler` serves.
    pub fn new(handler: Observed) -> Arc<Self> {
        Arc::new(Self {
            handler,
            peer: OnceLock::new(),
            in_flight: Mutex::default(),
            next_read: AtomicU64::new(0),
            running: AtomicUsize::new(0),
            passed: Mutex::default(),
            ended: tokio::sync::Notify::new(),
        })
    }

    /// Counts `message`, about to be handed to rmcp's loop, as running if it
    /// is a request (but `subscriptions/listen`).
    pub fn pass(&self, message: &ClientJsonRpcMessage) {
        if let JsonRpcMessage::Request(JsonRpcRequest { id, request, .. }) = message
            && !matches!(request, ClientRequest::SubscriptionsListenRequest(_))
        {
            *lock(&self.passed).entry(id.clone()).or_default() += 1;
            self.running.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A request handed to rmcp's loop with `id` runs no more: its handler
    /// ended or its answer is leaving (the first of the two counts).
    pub fn release(&self, id: &RequestId) {
        let mut passed = lock(&self.passed);
        let Some(running) = passed.get_mut(id) else {
            return;
        };
        *running -= 1;
        if *running == 0 {
            passed.remove(id);
        }
        drop(passed);
        self.end_one();
    }

    fn end_one(&self) {
        self.running.fetch_sub(1, Ordering::AcqRel);
        self.ended.notify_waiters();
    }

    /// Whether fewer than `most` of the session's requests run now.
    pub fn fewer_than(&self, most: usize) -> bool {
        self.running.load(Ordering::Acquire) < most
    }

    /// Waits until fewer than `most` of the session's requests run.
    pub async fn until_fewer_than(&self, most: usize) {
        loop {
            let ended = self.ended.notified();
            let mut ended = std::pin::pin!(ended);
            // Registered before the count is read, so no end goes unheard.
            ended.as_mut().enable();
            if self.fewer_than(most) {
                return;
            }
            ended.await;
        }
    }

    /// From now on, reads are answered here; `peer` is rmcp's, for this
    /// session.
    fn start(&self, peer: &Peer<RoleServer>) {
        self.peer.get_or_init(|| peer.clone());
    }

    /// Answers `message` here if it is a read and the session is open;
    /// passes anything else on to rmcp's loop, cancelling first the read
    /// in flight here that it cancels, if any.
    pub fn route(self: &Arc<Self>, message: ClientJsonRpcMessage) -> Routed {
        let Some(peer) = self.peer.get() else {
            return Routed::Passed(message);
        };
        match message {
            JsonRpcMessage::Request(JsonRpcRequest {
                id,
                request: ClientRequest::ReadResourceRequest(read),
                ..
            }) => Routed::Read {
                in_place_scheme: self
                    .handler
                    .in_place_scheme(&read.params.uri)
                    .map(str::to_owned),
                answer: self.begin_read(id, ClientRequest::ReadResourceRequest(read), peer.clone()),
            },
            other => {
                self.cancel_if_named(&other);
                Routed::Passed(other)
            }
        }
    }

    /// Cancels the reads in flight that `message` cancels, if it names
    /// any of these.
    fn cancel_if_named(&self, message: &ClientJsonRpcMessage) {
        if let JsonRpcMessage::Notification(JsonRpcNotification {
            notification: ClientNotification::CancelledNotification(cancelled),
            ..
        }) = message
            && let Some(id) = &cancelled.params.request_id
        {
            self.in_flight().retain(|_, (read, cancel)| {
                let named = read == id;
                if named {
                    cancel.cancel();
                }
                !named
            });
        }
    }

    /// Registers the read `id` as in flight, and returns its answer.
    fn begin_read(
        self: &Arc<Self>,
        id: RequestId,
        mut request: ClientRequest,
        peer: Peer<RoleServer>,
    ) -> BoxFuture<'static, Option<Answered>> {
        let mut context = RequestContext::new(id.clone(), peer);
        let ct = context.ct.clone();
        let running = Running::new(self.clone());
        let in_flight = InFlight::new(self.clone(), id.clone(), ct.clone());
        context.meta = std::mem::take(request.get_meta_mut());
        context.extensions = std::mem::take(request.extensions_mut());
        let reads = self.clone();
        Box::pin(async move {
            // A cancelled read ends at once, its handler dropped, so that it
            // stops counting only once nothing of it runs.
            let result = tokio::select! {
                biased;
                () = ct.cancelled() => return None,
                result = reads.handler.handle_request(request, context) => result,
            };
            // Cancelled meanwhile: nothing is sent.
            if !in_flight.finish() {
                return None;
            }
            let message = match result {
                Ok(answer) => ServerJsonRpcMessage::response(answer, id),
                Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
            };
            Some(Answered { message, running })
        })
    }

    fn in_flight(&self) -> MutexGuard<'_, HashMap<u64, (RequestId, CancellationToken)>> {
        lock(&self.in_flight)
    }
}

/// One read's entry among those in flight, removed however the read ends:
/// answered, cancelled, dropped unfinished, or panicking.
struct InFlight {
    reads: Arc<DirectReads>,
    number: u64,
    finished: bool,
}

impl InFlight {
    fn new(reads: Arc<DirectReads>, id: RequestId, cancel: CancellationToken) -> Self {
        let number = reads.next_read.fetch_add(1, Ordering::Relaxed);
        reads.in_flight().insert(number, (id, cancel));
        Self {
            reads,
            number,
            finished: false,
        }
    }

    /// Whether the read is still wanted, that is not cancelled meanwhile.
    fn finish(mut self) -> bool {
        self.finished = true;
        self.end()
    }

    /// Takes the read off those in flight; whether it was still there.
    fn end(&self) -> bool {
        self.reads.in_flight().remove(&self.number).is_some()
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.finished {
            self.end();
        }
    }
}

/// A read here, counted while it runs: until this is dropped.
pub struct Running(Arc<DirectReads>);

impl Running {
    fn new(reads: Arc<DirectReads>) -> Self {
        reads.running.fetch_add(1, Ordering::AcqRel);
        Self(reads)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.end_one();
    }
}

/// A request rmcp's loop handles: released when its handler ends.
struct Handled {
    reads: Arc<DirectReads>,
    id: RequestId,
}

impl Drop for Handled {
    fn drop(&mut self) {
        self.reads.release(&self.id);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
