//! Reads over stdio answered beside rmcp's service loop.
//!
//! rmcp's loop spends more on a request than resmux spends reading it: a
//! task for the handler, a channel back to the loop, a second task to send
//! the answer, and cancellation tokens in a tree (13% of resmux's CPU per
//! stdio read, by `scripts/bench`). `resources/read`, the request a client
//! repeats, skips that: once rmcp has handed on the session's first message
//! ([`Opening`]), the transport hands each read to the session's handler
//! through rmcp's own `Service::handle_request`, which keeps every
//! per-request rule (protocol versions, required `_meta`, dispatch), in one
//! task that then queues the answer. Every other message, and every read
//! before that first one, goes through rmcp's loop as before.
//!
//! A read never sends a request to the client, so it needs nothing that
//! rmcp's loop keeps per request beyond its cancellation: a
//! `notifications/cancelled` naming a read in flight here cancels it and
//! drops its answer, as rmcp does, and is then handed on to rmcp as well.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

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
    /// Set by [`Opening`] from the first message rmcp hands on.
    peer: OnceLock<Peer<RoleServer>>,
    in_flight: Mutex<HashMap<RequestId, CancellationToken>>,
}

/// The session's handler as rmcp's loop sees it. The first message rmcp
/// hands on (`initialize`, or the first request of a session without one)
/// gives [`DirectReads`] rmcp's peer before it is answered, so every read
/// that follows that answer is answered beside the loop.
pub struct Opening {
    handler: Observed,
    reads: Arc<DirectReads>,
}

impl Opening {
    pub fn new(handler: Observed, reads: Arc<DirectReads>) -> Self {
        Self { handler, reads }
    }
}

impl Service<RoleServer> for Opening {
    fn handle_request(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> impl Future<Output = Result<ServerResult, ErrorData>> + MaybeSendFuture + '_ {
        self.reads.start(&context.peer);
        self.handler.handle_request(request, context)
    }

    fn handle_notification(
        &self,
        notification: ClientNotification,
        context: NotificationContext<RoleServer>,
    ) -> impl Future<Output = Result<(), ErrorData>> + MaybeSendFuture + '_ {
        self.reads.start(&context.peer);
        self.handler.handle_notification(notification, context)
    }

    fn get_info(&self) -> ServerConfig {
        Service::get_info(&self.handler)
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Service::supported_protocol_versions(&self.handler)
    }
}

/// What became of one incoming message.
#[expect(
    clippy::large_enum_variant,
    reason = "made once per message and handed on by value, as rmcp takes it"
)]
pub enum Taken {
    /// A read, answered by this future: `None` if it was cancelled.
    Read(BoxFuture<'static, Option<ServerJsonRpcMessage>>),
    /// Anything else, for rmcp's loop.
    Passed(ClientJsonRpcMessage),
}

impl DirectReads {
    /// Reads of the session that `handler` serves.
    pub fn new(handler: Observed) -> Arc<Self> {
        Arc::new(Self {
            handler,
            peer: OnceLock::new(),
            in_flight: Mutex::default(),
        })
    }

    /// From now on, reads are answered here; `peer` is rmcp's, for this
    /// session.
    fn start(&self, peer: &Peer<RoleServer>) {
        self.peer.get_or_init(|| peer.clone());
    }

    /// Takes `message` if it is a read and the session is open; cancels a
    /// read in flight here if `message` cancels it.
    pub fn take(self: &Arc<Self>, message: ClientJsonRpcMessage) -> Taken {
        match message {
            JsonRpcMessage::Request(JsonRpcRequest {
                id,
                request: request @ ClientRequest::ReadResourceRequest(_),
                jsonrpc,
            }) => match self.peer.get() {
                Some(peer) => Taken::Read(self.answer(id, request, peer.clone())),
                None => Taken::Passed(JsonRpcMessage::Request(JsonRpcRequest {
                    id,
                    request,
                    jsonrpc,
                })),
            },
            JsonRpcMessage::Notification(JsonRpcNotification {
                notification: ClientNotification::CancelledNotification(cancelled),
                jsonrpc,
            }) => {
                if let Some(id) = &cancelled.params.request_id
                    && let Some(read) = self.in_flight().remove(id)
                {
                    read.cancel();
                }
                Taken::Passed(JsonRpcMessage::Notification(JsonRpcNotification {
                    notification: ClientNotification::CancelledNotification(cancelled),
                    jsonrpc,
                }))
            }
            other => Taken::Passed(other),
        }
    }

    /// Registers the read `id` as in flight and returns its answer.
    fn answer(
        self: &Arc<Self>,
        id: RequestId,
        mut request: ClientRequest,
        peer: Peer<RoleServer>,
    ) -> BoxFuture<'static, Option<ServerJsonRpcMessage>> {
        let ct = CancellationToken::new();
        self.in_flight().insert(id.clone(), ct.clone());
        let mut context = RequestContext::new(id.clone(), peer);
        context.ct = ct;
        context.meta = std::mem::take(request.get_meta_mut());
        context.extensions = std::mem::take(request.extensions_mut());
        let reads = self.clone();
        Box::pin(async move {
            let result = reads.handler.handle_request(request, context).await;
            // Gone if cancelled meanwhile: nothing is sent.
            reads.in_flight().remove(&id)?;
            Some(match result {
                Ok(answer) => ServerJsonRpcMessage::response(answer, id),
                Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
            })
        })
    }

    fn in_flight(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, CancellationToken>> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
