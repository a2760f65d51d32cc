//! Every MCP request seen from outside: one span per request, named and
//! described after the OpenTelemetry MCP semantic conventions (status
//! Development) and continuing the client's trace when it sends W3C trace
//! context (in `_meta` or in HTTP headers), and the request counted in
//! `mcp_server_operation_duration_seconds` and per client. The URI a request
//! is about goes into its span only when the operator asks for it; what a
//! client chose (a string request id, the URI) goes in quoted and cut short,
//! so that it cannot forge a log line. The session id stays out: it is the
//! key to a session.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult, CustomRequest,
    CustomResult, Extensions, InitializeRequestParams, InitializeResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, NumberOrString,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, RequestId,
    ServerConfig, SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use tracing::Instrument;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::{ResmuxServer, client_in};
use crate::access::Client;
use crate::telemetry::metrics::{ClientMethod, McpOperation};
use crate::telemetry::{metrics, traces};

/// A server whose requests are traced and counted.
#[derive(Clone)]
pub struct Observed {
    server: ResmuxServer,
    uris_in_spans: bool,
    /// Set once the session is initialized, and counted among the open
    /// sessions until its handler is dropped. Stateless requests never set
    /// it: they are no sessions.
    open: Arc<OnceLock<OpenSession>>,
}

/// One session counted as open until dropped.
struct OpenSession;

impl OpenSession {
    fn open() -> Self {
        metrics().sessions.inc();
        Self
    }
}

impl Drop for OpenSession {
    fn drop(&mut self) {
        metrics().sessions.dec();
    }
}

impl Observed {
    /// Observes `server`; spans name the resource URI when `uris_in_spans`.
    pub fn new(server: ResmuxServer, uris_in_spans: bool) -> Self {
        Self {
            server,
            uris_in_spans,
            open: Arc::default(),
        }
    }

    /// [`ResmuxServer::in_place_scheme`].
    pub fn in_place_scheme<'uri>(&self, uri: &'uri str) -> Option<&'uri str> {
        self.server.in_place_scheme(uri)
    }

    /// The handler of one new session.
    pub fn for_session(&self) -> Self {
        Self {
            server: self.server.for_session(),
            uris_in_spans: self.uris_in_spans,
            open: Arc::default(),
        }
    }

    /// Runs `answer`, the answer to one `method` request about `uri` (if it
    /// names one and the operator wants it in spans), in the request's span,
    /// and counts it.
    async fn observe<T, F>(
        &self,
        method: &'static str,
        uri: Option<&str>,
        context: RequestContext<RoleServer>,
        answer: impl FnOnce(RequestContext<RoleServer>) -> F,
    ) -> Result<T, ErrorData>
    where
        F: Future<Output = Result<T, ErrorData>>,
    {
        let client = client_label(&context.extensions);
        let span = self.span(method, uri, &context);
        let started = Instant::now();
        // Boxed: rmcp runs each request as a task of its own, and tokio
        // copies a task's future as it moves it; a box keeps that copy small.
        let result = Box::pin(answer(context).instrument(span.clone())).await;
        let error_type = result.as_ref().err().map(|error| error.code.0.to_string());
        if let Some(code) = &error_type {
            span.record("error.type", code.as_str());
            span.record("rpc.response.status_code", code.as_str());
            span.record("otel.status_code", "ERROR");
        }
        let metrics = metrics();
        metrics
            .mcp_duration
            .get_or_create(&McpOperation {
                mcp_method_name: method,
                error_type,
            })
            .observe(started.elapsed().as_secs_f64());
        metrics
            .client_requests
            .get_or_create(&ClientMethod {
                client,
                mcp_method_name: method,
            })
            .inc();
        result
    }

    fn span(
        &self,
        method: &'static str,
        uri: Option<&str>,
        context: &RequestContext<RoleServer>,
    ) -> tracing::Span {
        let parts = context.extensions.get::<http::request::Parts>();
        let span = tracing::debug_span!(
            "mcp.request",
            otel.name = method,
            otel.kind = "server",
            otel.status_code = Empty,
            mcp.method.name = method,
            mcp.protocol.version = Empty,
            mcp.resource.uri = Empty,
            jsonrpc.request.id = %request_id(&context.id),
            network.transport = if parts.is_some() { "tcp" } else { "pipe" },
            error.type = Empty,
            rpc.response.status_code = Empty,
        );
        // What follows only fills the span in: a span no subscriber takes
        // (tracing at `info`, no OpenTelemetry) costs no more than its making.
        if span.is_disabled() {
            return span;
        }
        if let Some(version) = context.protocol_version() {
            span.record("mcp.protocol.version", version.as_str());
        }
        if let Some(uri) = uri {
            span.record("mcp.resource.uri", quoted(uri));
        }
        if let Some(parent) =
            traces::client_context(&context.meta, parts.map(|parts| &parts.headers))
        {
            // A span exported nowhere has no parent to set; nothing is lost.
            let _ = span.set_parent(parent);
        }
        span
    }
}

/// The client a request comes from, as metrics label it
/// ([`Client::metrics_label`]).
fn client_label(extensions: &Extensions) -> String {
    client_in(extensions).map_or_else(
        || Client::local().metrics_label().to_owned(),
        |client| client.metrics_label().to_owned(),
    )
}

/// The longest text a client chose that a span shows.
const MAX_SHOWN: usize = 256;

/// A JSON-RPC request id as a span shows it: a number as is, a string
/// quoted.
fn request_id(id: &RequestId) -> String {
    match id {
        NumberOrString::Number(number) => number.to_string(),
        NumberOrString::String(text) => quoted(text),
    }
}

/// `text` quoted as a JSON string (newlines and controls escaped), its first
/// [`MAX_SHOWN`] characters only.
fn quoted(text: &str) -> String {
    let shown: String = text.chars().take(MAX_SHOWN).collect();
    serde_json::Value::String(shown).to_string()
}

impl ServerHandler for Observed {
    fn get_info(&self) -> ServerConfig {
        self.server.get_info()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.observe("initialize", None, context, |context| {
            self.server.initialize(request, context)
        })
        .await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.observe("resources/list", None, context, |context| {
            self.server.list_resources(request, context)
        })
        .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.observe("resources/templates/list", None, context, |context| {
            self.server.list_resource_templates(request, context)
        })
        .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = self.uris_in_spans.then(|| request.uri.clone());
        self.observe("resources/read", uri.as_deref(), context, |context| {
            self.server.read_resource(request, context)
        })
        .await
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.observe("completion/complete", None, context, |context| {
            self.server.complete(request, context)
        })
        .await
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.observe("tools/list", None, context, |context| {
            self.server.list_tools(request, context)
        })
        .await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.observe("tools/call", None, context, |context| {
            self.server.call_tool(request, context)
        })
        .await
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let _ = self.open.set(OpenSession::open());
        self.server.on_initialized(context).await;
    }

    #[allow(deprecated, reason = "the only route for clients before 2026-07-28")]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = self.uris_in_spans.then(|| request.uri.clone());
        self.observe("resources/subscribe", uri.as_deref(), context, |context| {
            self.server.subscribe(request, context)
        })
        .await
    }

    #[allow(deprecated, reason = "the only route for clients before 2026-07-28")]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = self.uris_in_spans.then(|| request.uri.clone());
        self.observe(
            "resources/unsubscribe",
            uri.as_deref(),
            context,
            |context| self.server.unsubscribe(request, context),
        )
        .await
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.server.accepted_subscription_filter(requested)
    }

    /// A listen stream lasts as long as the client keeps it: counted per
    /// client, but not timed.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let client = client_label(&context.request_context().extensions);
        metrics()
            .client_requests
            .get_or_create(&ClientMethod {
                client,
                mcp_method_name: "subscriptions/listen",
            })
            .inc();
        self.server.listen(context).await
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        self.observe("other", None, context, |context| {
            self.server.on_custom_request(request, context)
        })
        .await
    }
}
