//! MCP on top of the namespace: an rmcp `ServerHandler` that turns requests
//! into namespace calls and namespace answers into results for the client's
//! protocol revision, plus the [`tools`] bridge for tool-only clients and
//! change notifications ([`notify`]). Every request is answered for the
//! [`Client`] the transport authenticated (the local client on stdio), within
//! its scope: listings are filtered entry by entry below, and a read,
//! subscription or completion is decided here first, so that the decision
//! reaches the audit log. For a guarded client a refused URI and one that
//! does not exist get the same answer. Every read passes its rate limit.
//! Era-specific details live here and nowhere below: the not-found code
//! (rmcp sends -32002 up to 2025-11-25 and -32602 from 2026-07-28), and
//! `ttlMs`/`cacheScope`, sent only to 2026-07-28 clients.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rmcp::model::{
    self, CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
    CompletionInfo, CustomRequest, CustomResult, ErrorCode, ErrorData, Extensions, Implementation,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, MetaObject,
    PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ResourceContents, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    SubscriptionFilter, ToolsCapability, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{RoleServer, ServerHandler};
use serde_json::json;

use crate::access::Client;
use crate::access::audit::{AuditLog, Record};
use crate::contract::{self, Body, CacheHint, Metadata, ProviderError};
use crate::namespace::uri::Uri;
use crate::namespace::{self, Action, Namespace, NamespaceError, Read, Verdict};
use crate::telemetry::metrics::ClientLabel;

mod cache;
mod guarded;
mod notify;
mod observed;
mod operator;
mod tools;

use cache::Paged;
pub use cache::ResponseCache;
use guarded::{hide, readable_part, unseen};
pub use observed::Observed;

use notify::{ListenStreams, MAX_SUBSCRIPTIONS_PER_SESSION, Session};

/// The MCP face of a namespace. Each legacy session gets its own clone
/// ([`ResmuxServer::for_session`]), which holds that session's subscriptions.
#[derive(Clone)]
pub struct ResmuxServer {
    namespace: Arc<Namespace>,
    tool_bridge: bool,
    audit: Option<Arc<AuditLog>>,
    cache: Option<Arc<ResponseCache>>,
    session: Arc<Session>,
    streams: Arc<ListenStreams>,
}

/// What a server adds around the namespace.
#[derive(Default)]
pub struct Options {
    /// Offer the namespace as tools too.
    pub tool_bridge: bool,
    /// Record every read here.
    pub audit: Option<AuditLog>,
    /// Keep answers within their ttl here.
    pub cache: Option<Arc<ResponseCache>>,
}

/// Why a read was refused before or after it reached the namespace.
enum ReadRefusal {
    RateLimited(String),
    Namespace(NamespaceError),
    /// Its audit line could not be written, and the log is required.
    Unaudited(String),
}

impl ReadRefusal {
    /// The error an MCP client is answered with.
    fn into_error(self) -> ErrorData {
        match self {
            Self::RateLimited(message) => rate_limited(message),
            Self::Namespace(error) => error_data(error),
            Self::Unaudited(reason) => ErrorData::internal_error(reason, None),
        }
    }
}

/// What an MCP client is answered with for `read`, but for its cache
/// fields.
fn read_result(read: Read) -> ReadResourceResult {
    ReadResourceResult::new(read.contents.into_iter().map(contents).collect())
}

impl ResmuxServer {
    /// The scheme of `uri` (as the client spelt it), if a read of it would
    /// call a plugin that runs its calls where they are made: a hint of
    /// where the read is best started, none when in doubt (a scheme spelt
    /// in capitals, no plugin).
    pub fn in_place_scheme<'uri>(&self, uri: &'uri str) -> Option<&'uri str> {
        uri.split_once(':')
            .map(|(scheme, _)| scheme)
            .filter(|scheme| self.namespace.calls_run_in_place(scheme))
    }

    /// Serves `namespace` with `options`.
    pub fn new(namespace: Arc<Namespace>, options: Options) -> Self {
        Self {
            session: Session::new(namespace.clone()),
            namespace,
            tool_bridge: options.tool_bridge,
            audit: options.audit.map(Arc::new),
            cache: options.cache,
            streams: Arc::default(),
        }
    }

    /// The handler of one new session: everything shared but its subscriptions.
    pub fn for_session(&self) -> Self {
        Self {
            session: Session::new(self.namespace.clone()),
            ..self.clone()
        }
    }

    /// One read for `client`: its rate limit first, then the URI parsed, then
    /// the client's scope decides, then the namespace; recorded in the audit
    /// log either way, under the URI as parsed when it parses.
    async fn read(&self, client: &Client, uri: &str, via: &str) -> Result<Read, ReadRefusal> {
        self.read_decided(client, uri, via).await.1
    }

    /// [`Self::read`], with the access decision, when one was made.
    async fn read_decided(
        &self,
        client: &Client,
        uri: &str,
        via: &str,
    ) -> (Option<Verdict>, Result<Read, ReadRefusal>) {
        let mut verdict = None;
        let parsed_uri = parse_uri(uri);
        let outcome = match client.admit_read().await {
            Err(refusal) => {
                crate::telemetry::metrics()
                    .rate_limited
                    .get_or_create(&ClientLabel {
                        client: client.metrics_label().to_owned(),
                    })
                    .inc();
                Err(ReadRefusal::RateLimited(refusal))
            }
            Ok(()) => match &parsed_uri {
                Ok(parsed) => {
                    let decided = client.scope.decide(Action::Read, || parsed.canonical());
                    let permitted = decided.permitted;
                    verdict = Some(decided);
                    let read = match permitted {
                        true => self
                            .read_through_cache(client, parsed)
                            .await
                            .and_then(|read| readable_part(&client.scope, parsed, read)),
                        false => Err(unseen(parsed.as_str())),
                    };
                    read.map_err(|error| ReadRefusal::Namespace(hide(&client.scope, parsed, error)))
                }
                Err(error) => Err(ReadRefusal::Namespace(error.clone())),
            },
        };
        let (outcome_name, bytes) = match &outcome {
            Ok(read) => ("ok", read.byte_count()),
            Err(ReadRefusal::RateLimited(_)) => ("rate-limited", 0),
            Err(ReadRefusal::Namespace(NamespaceError::NotFound { .. })) => ("not-found", 0),
            Err(ReadRefusal::Namespace(NamespaceError::InvalidUri { .. })) => ("invalid", 0),
            Err(ReadRefusal::Namespace(_) | ReadRefusal::Unaudited(_)) => ("failed", 0),
        };
        let audited = self
            .audit(
                client,
                Action::Read,
                via,
                parsed_uri.as_ref().map_or(uri, Uri::as_str),
                verdict.as_ref(),
                outcome_name,
                bytes,
            )
            .await;
        let outcome = match audited {
            Ok(()) => outcome,
            Err(reason) => Err(ReadRefusal::Unaudited(reason)),
        };
        (verdict, outcome)
    }

    /// One line of the audit log, if there is one, and its decision shown on
    /// the operator's board. Waits for nothing unless the log is required
    /// (locked mode): then until the line is written, and fails, with the
    /// reason to refuse the request, when it is not written in time.
    #[allow(
        clippy::too_many_arguments,
        reason = "one line of the audit log has that many fields"
    )]
    async fn audit(
        &self,
        client: &Client,
        action: Action,
        via: &str,
        uri: &str,
        verdict: Option<&Verdict>,
        outcome: &str,
        bytes: u64,
    ) -> Result<(), String> {
        let Some(audit) = &self.audit else {
            return Ok(());
        };
        let record = Record {
            client: &client.name,
            subject: &client.principal.subject,
            client_id: &client.principal.client_id,
            action: action.name(),
            via,
            uri,
            decision: verdict.map(|verdict| match verdict.permitted {
                true => "allow",
                false => "deny",
            }),
            policies: verdict.map_or(&[], |verdict| &verdict.by),
            outcome,
            bytes,
        };
        audit.record(&record).await?;
        // Recorded (queued, or written when the log is required), so it
        // stands: shown on the operator's board too.
        if let Some(verdict) = verdict {
            let scheme = uri.split_once("://").map(|(scheme, _)| scheme);
            crate::telemetry::board().audited(verdict.permitted, scheme, || record.summary());
        }
        Ok(())
    }

    /// A read the client's scope permits, from the cache if it is kept there.
    /// A public answer is shared by every client, as each is decided before
    /// the cache is asked.
    async fn read_through_cache(&self, client: &Client, uri: &Uri) -> Result<Read, NamespaceError> {
        if let Some(kept) = self
            .cache
            .as_ref()
            .and_then(|cache| cache.read(uri, &client.name))
        {
            return Ok(kept);
        }
        let read = self.namespace.read(uri).await?;
        if let Some(cache) = &self.cache {
            cache.keep_read(uri, &client.name, &read);
        }
        Ok(read)
    }

    /// One page of listing `T` for `client`: kept, or fetched by `fetch`
    /// (which runs only when nothing is kept) and kept. Only first pages
    /// are kept: every later page is named by a cursor sealed afresh for
    /// its walk, which no other request names again (kept, such pages
    /// filled the cache with one entry per page of every walk, by the soak).
    async fn page<T: Paged>(
        &self,
        client: &Client,
        cursor: Option<&str>,
        fetch: impl Future<Output = Result<namespace::Listed<T>, NamespaceError>>,
    ) -> Result<namespace::Listed<T>, NamespaceError> {
        let scope = &client.scope;
        let cache = self.cache.as_ref().filter(|_| cursor.is_none());
        if let Some(kept) = cache.and_then(|cache| cache.page(&client.name, scope)) {
            return Ok(kept);
        }
        let page = fetch.await?;
        if let Some(cache) = cache {
            cache.keep_page(&client.name, scope, &page);
        }
        Ok(page)
    }

    /// One page of resources as `client` lists them, with the page's cache
    /// hint.
    pub async fn resources_for(
        &self,
        client: &Client,
        cursor: Option<&str>,
    ) -> Result<(ListResourcesResult, CacheHint), ErrorData> {
        let page = self
            .page(client, cursor, self.namespace.list(cursor, &client.scope))
            .await
            .map_err(error_data)?;
        let mut result =
            ListResourcesResult::with_all_items(page.items.into_iter().map(resource).collect());
        result.next_cursor = page.next_cursor;
        Ok((result, page.cache))
    }

    /// One page of templates as `client` lists them, with the page's cache
    /// hint.
    pub async fn templates_for(
        &self,
        client: &Client,
        cursor: Option<&str>,
    ) -> Result<(ListResourceTemplatesResult, CacheHint), ErrorData> {
        let page = self
            .page(
                client,
                cursor,
                self.namespace.templates(cursor, &client.scope),
            )
            .await
            .map_err(error_data)?;
        let mut result = ListResourceTemplatesResult::with_all_items(
            page.items.into_iter().map(template).collect(),
        );
        result.next_cursor = page.next_cursor;
        Ok((result, page.cache))
    }

    /// Completes `argument` of `template_uri` for `client`, if its scope
    /// permits; the decision is audited.
    async fn complete_for(
        &self,
        client: &Client,
        template_uri: &str,
        argument: &str,
        value: &str,
        chosen: Vec<(String, String)>,
    ) -> Result<contract::Completion, ErrorData> {
        let target = namespace::check_completion(template_uri, argument).map_err(error_data)?;
        let template = target.template();
        let verdict = client
            .scope
            .decide(Action::Complete, || template.canonical());
        let completion = match verdict.permitted {
            true => self
                .namespace
                .complete(&target, value, chosen.clone())
                .await
                .map(|completion| {
                    let expansion = guarded::Expansion {
                        template,
                        argument,
                        chosen: &chosen,
                    };
                    guarded::listable_values(&client.scope, &expansion, completion)
                }),
            false => Err(namespace::unserved_completion(template.scheme())),
        };
        let completion = completion.map_err(|error| match error {
            NamespaceError::NotFound { .. } if client.scope.is_guarded() => {
                namespace::unserved_completion(template.scheme())
            }
            error => error,
        });
        let outcome = match &completion {
            Ok(_) => "ok",
            Err(NamespaceError::InvalidArgument(_) | NamespaceError::NotFound { .. }) => {
                "not-found"
            }
            Err(_) => "failed",
        };
        self.audit(
            client,
            Action::Complete,
            "completion/complete",
            template.as_str(),
            Some(&verdict),
            outcome,
            0,
        )
        .await
        .map_err(|reason| ErrorData::internal_error(reason, None))?;
        completion.map_err(error_data)
    }
}

/// The client a request comes from: put there by the HTTP transport's
/// authentication, or the local client (stdio, or HTTP without tokens).
fn client_of(extensions: &Extensions) -> Client {
    client_in(extensions).cloned().unwrap_or_else(Client::local)
}

/// The client the HTTP transport authenticated, if it did.
fn client_in(extensions: &Extensions) -> Option<&Client> {
    extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Client>())
}

impl ServerHandler for ResmuxServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_resources_list_changed()
            .enable_completions()
            .enable_prompts()
            .build();
        if self.tool_bridge {
            capabilities.tools = Some(ToolsCapability::default());
        }
        ServerConfig::new(capabilities)
            .with_server_info(
                Implementation::new("resmux", env!("CARGO_PKG_VERSION"))
                    .with_title("resmux")
                    .with_description("Resources served by sandboxed WebAssembly plugins"),
            )
            .with_instructions(
                "Resources come from plugins, one URI scheme each. List resources and templates \
                 to discover them; complete template arguments with completion/complete.",
            )
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let cursor = request.and_then(|request| request.cursor);
        let client = client_of(&context.extensions);
        let (mut result, cache) = self.resources_for(&client, cursor.as_deref()).await?;
        if let Some((ttl_ms, scope)) = cache_fields(&context, cache) {
            result = result.with_ttl_ms(ttl_ms).with_cache_scope(scope);
        }
        Ok(result)
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let cursor = request.and_then(|request| request.cursor);
        let client = client_of(&context.extensions);
        let (mut result, cache) = self.templates_for(&client, cursor.as_deref()).await?;
        if let Some((ttl_ms, scope)) = cache_fields(&context, cache) {
            result = result.with_ttl_ms(ttl_ms).with_cache_scope(scope);
        }
        Ok(result)
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let client = client_of(&context.extensions);
        let read = self
            .read(&client, &request.uri, "resources/read")
            .await
            .map_err(ReadRefusal::into_error)?;
        let cache = read.cache;
        let mut result = read_result(read);
        if let Some((ttl_ms, scope)) = cache_fields(&context, cache) {
            result = result.with_ttl_ms(ttl_ms).with_cache_scope(scope);
        }
        Ok(result.into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let Some(template_uri) = request.r#ref.as_resource_uri() else {
            return Err(ErrorData::invalid_params(
                "resmux serves no prompts; only ref/resource can be completed",
                None,
            ));
        };
        let mut chosen: Vec<(String, String)> = request
            .context
            .and_then(|context| context.arguments)
            .unwrap_or_default()
            .into_iter()
            .collect();
        chosen.sort();
        let client = client_of(&context.extensions);
        let completion = self
            .complete_for(
                &client,
                template_uri,
                &request.argument.name,
                &request.argument.value,
                chosen,
            )
            .await?;
        let mut info = CompletionInfo::default();
        info.values = completion.values;
        info.total = completion.total;
        info.has_more = Some(completion.has_more);
        Ok(CompleteResult::new(info))
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = if self.tool_bridge {
            tools::tools()
        } else {
            Vec::new()
        };
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        let client = client_of(&context.extensions);
        let result = match self.tool_bridge {
            true => tools::call(self, &client, &request.name, &arguments).await,
            false => None,
        };
        result
            .map(CallToolResponse::Complete)
            .ok_or_else(|| ErrorData::invalid_params(format!("no tool {:?}", request.name), None))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let scope = client_of(&context.extensions).scope;
        notify::forward_to_session(&self.session, context.peer, scope);
    }

    #[allow(deprecated, reason = "the only route for clients before 2026-07-28")]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let client = client_of(&context.extensions);
        let uri = parse_uri(&request.uri).map_err(error_data)?;
        let verdict = client.scope.decide(Action::Subscribe, || uri.canonical());
        let decided = match verdict.permitted {
            true => self.namespace.check_servable(&uri).await,
            false => Err(unseen(uri.as_str())),
        }
        .map_err(|error| hide(&client.scope, &uri, error));
        let outcome = if decided.is_ok() { "ok" } else { "not-found" };
        self.audit(
            &client,
            Action::Subscribe,
            "resources/subscribe",
            uri.as_str(),
            Some(&verdict),
            outcome,
            0,
        )
        .await
        .map_err(|reason| ErrorData::internal_error(reason, None))?;
        decided.map_err(error_data)?;
        self.session
            .subscribe(&uri)
            .map_err(|reason| ErrorData::invalid_params(reason, None))
    }

    #[allow(deprecated, reason = "the only route for clients before 2026-07-28")]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        // Nothing is ever subscribed under a URI that does not parse.
        if let Ok(uri) = Uri::parse(&request.uri) {
            self.session.unsubscribe(&uri);
        }
        Ok(())
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::default();
        accepted.resources_list_changed = requested.resources_list_changed;
        accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
            uris.iter()
                .filter_map(|uri| Uri::parse(uri).ok())
                .take(MAX_SUBSCRIPTIONS_PER_SESSION)
                .map(|uri| uri.as_str().to_owned())
                .collect()
        });
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let client = client_of(&context.request_context().extensions);
        let _open = self
            .streams
            .open(&client.name)
            .map_err(|reason| ErrorData::invalid_request(reason, None))?;
        notify::listen(&self.namespace, context, client.scope).await;
        Ok(())
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        if SERVED_METHODS.contains(&request.method.as_str()) {
            return Err(ErrorData::invalid_params(
                format!("the params of {} are missing or malformed", request.method),
                None,
            ));
        }
        Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("resmux does not serve {}", request.method),
            None,
        ))
    }
}

/// The methods resmux serves. rmcp hands a request for one of them whose
/// params do not parse to `on_custom_request`; it gets -32602, not -32601.
const SERVED_METHODS: [&str; 6] = [
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "completion/complete",
    "tools/call",
    "tools/list",
];

/// `ttlMs` and `cacheScope` for clients of 2026-07-28 or later; none for
/// older clients, whose schema has no such fields.
fn cache_fields(
    context: &RequestContext<RoleServer>,
    hint: CacheHint,
) -> Option<(u64, model::CacheScope)> {
    let modern = context
        .protocol_version()
        .is_some_and(|version| version.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    modern.then(|| {
        let scope = match hint.scope {
            contract::CacheScope::Public => model::CacheScope::Public,
            contract::CacheScope::Private => model::CacheScope::Private,
        };
        (hint.ttl_ms, scope)
    })
}

/// The error for a read over a client's rate limit.
fn rate_limited(message: String) -> ErrorData {
    ErrorData::new(ErrorCode(RATE_LIMITED), message, None)
}

/// JSON-RPC code of a read refused by the client's rate limit (in the range
/// JSON-RPC leaves to servers).
const RATE_LIMITED: i32 = -32029;

/// Parses a client's URI at the edge, into the one spelling the host keys on.
fn parse_uri(uri: &str) -> Result<Uri, NamespaceError> {
    Uri::parse(uri).map_err(|reason| NamespaceError::InvalidUri {
        uri: uri.to_owned(),
        reason,
    })
}

fn error_data(error: NamespaceError) -> ErrorData {
    let message = error.to_string();
    match error {
        NamespaceError::NotFound { uri, .. } => {
            ErrorData::resource_not_found(message, Some(json!({ "uri": uri })))
        }
        NamespaceError::InvalidUri { uri, .. } => {
            ErrorData::invalid_params(message, Some(json!({ "uri": uri })))
        }
        NamespaceError::InvalidCursor(_) | NamespaceError::InvalidArgument(_) => {
            ErrorData::invalid_params(message, None)
        }
        NamespaceError::InvalidAnswer { uri, .. } => {
            ErrorData::internal_error(message, Some(json!({ "uri": uri })))
        }
        NamespaceError::Provider { uri, error } => {
            let data = Some(json!({ "uri": uri }));
            match error {
                ProviderError::InvalidInput(_) => ErrorData::invalid_params(message, data),
                ProviderError::Denied(_) => ErrorData::invalid_request(message, data),
                _ => ErrorData::internal_error(message, data),
            }
        }
    }
}

fn annotations(annotations: contract::Annotations) -> model::Annotations {
    let mut converted = model::Annotations::default();
    if !annotations.audience.is_empty() {
        converted.audience = Some(
            annotations
                .audience
                .into_iter()
                .map(|role| match role {
                    contract::Role::User => model::Role::User,
                    contract::Role::Assistant => model::Role::Assistant,
                })
                .collect(),
        );
    }
    converted.priority = annotations.priority;
    converted.last_modified = annotations.last_modified;
    converted
}

fn icons(icons: Vec<contract::Icon>) -> Option<Vec<model::Icon>> {
    (!icons.is_empty()).then(|| {
        icons
            .into_iter()
            .map(|icon| {
                let mut converted = model::Icon::new(icon.src);
                converted.mime_type = icon.mime_type;
                converted.sizes = (!icon.sizes.is_empty()).then_some(icon.sizes);
                converted.theme = icon.theme.map(|theme| match theme {
                    contract::IconTheme::Light => model::IconTheme::Light,
                    contract::IconTheme::Dark => model::IconTheme::Dark,
                });
                converted
            })
            .collect()
    })
}

/// Copies the descriptive fields every rmcp resource and template share.
macro_rules! describe {
    ($converted:ident, $metadata:expr, $meta:expr) => {{
        let Metadata {
            title,
            description,
            mime_type,
            annotations: notes,
            icons: pictures,
            ..
        } = $metadata;
        $converted.title = title;
        $converted.description = description;
        $converted.mime_type = mime_type;
        $converted.annotations = notes.map(annotations);
        $converted.icons = icons(pictures);
        $converted.meta = $meta.map(MetaObject);
    }};
}

fn resource(mut entry: namespace::Resource) -> model::Resource {
    let name = std::mem::take(&mut entry.metadata.name);
    let mut converted = model::Resource::new(entry.uri.into_string(), name);
    converted.size = entry.size;
    describe!(converted, entry.metadata, entry.meta);
    converted
}

fn template(mut entry: namespace::Template) -> model::ResourceTemplate {
    let name = std::mem::take(&mut entry.metadata.name);
    let mut converted = model::ResourceTemplate::new(entry.uri_template.into_string(), name);
    describe!(converted, entry.metadata, entry.meta);
    converted
}

fn contents(item: namespace::Contents) -> ResourceContents {
    let meta = item.meta.map(MetaObject);
    match item.body {
        Body::Text(text) => ResourceContents::TextResourceContents {
            uri: item.uri.into_string(),
            mime_type: item.mime_type,
            text,
            meta,
        },
        Body::Blob(bytes) => ResourceContents::BlobResourceContents {
            uri: item.uri.into_string(),
            mime_type: item.mime_type,
            blob: STANDARD.encode(bytes),
            meta,
        },
    }
}
