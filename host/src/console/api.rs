//! The console's data, as JSON: `state` (the server, every plugin's card
//! with its live figures, the events after the one the page has), and the
//! namespace as a client sees it: `resources` and `templates` (as MCP lists
//! them), and `read` (as MCP answers it, with the access decision behind
//! it). A client is named `as` a tokens-file client, or `oauth:SUBJECT`
//! with its `groups` (comma-separated), exactly as `resmux policy check`
//! names it; no name is the operator's own view, where nothing is hidden
//! (audited as the client `console:operator`). A listing answer gathers
//! pages until it holds [`MOST_LISTED`] entries or [`MOST_LISTED_BYTES`],
//! has asked for [`MOST_PAGES`] pages or [`LISTING_BUDGET`] has passed, and
//! hands back the cursor to go on from, so that no listing (endless, empty
//! page after empty page, all hidden from the client, or of huge entries)
//! holds a request for long. A read is a preview: the first [`TEXT_SHOWN`]
//! bytes of its texts, its binary contents while they fit in
//! [`BINARY_SHOWN`] bytes in all, and how much was left out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::model::{ErrorData, ResourceContents};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::Console;
use crate::access::Client;
use crate::telemetry::board::{self, Card, State as CardState, board};
use crate::telemetry::figures::Row;

/// The most entries one `resources` or `templates` answer gathers, page
/// after page, before it hands the page a cursor to go on from.
const MOST_LISTED: usize = 500;
/// Once a listing answer has gathered this many bytes of entries (as
/// JSON), it asks for no other page and hands the page a cursor.
const MOST_LISTED_BYTES: usize = 1024 * 1024;
/// The most namespace pages one listing answer asks for.
const MOST_PAGES: usize = 64;
/// How long one listing answer goes on asking for pages.
const LISTING_BUDGET: Duration = Duration::from_secs(2);
/// The most of a read's texts sent to the page: their beginning.
const TEXT_SHOWN: usize = 256 * 1024;
/// The most of a read's binary contents sent to the page, for images to be
/// shown; of the contents that do not fit, the page is told the size.
const BINARY_SHOWN: usize = 4 * 1024 * 1024;

pub fn routes(console: Arc<Console>) -> axum::Router {
    axum::Router::new()
        .route("/console/api/state", get(state))
        .route("/console/api/resources", get(resources))
        .route("/console/api/templates", get(templates))
        .route("/console/api/read", get(read))
        .with_state(console)
}

#[derive(Deserialize)]
struct Since {
    #[serde(default)]
    after: u64,
}

#[derive(Serialize)]
struct StateView {
    server: ServerView,
    plugins: Vec<PluginView>,
    events: Vec<EventView>,
    /// The tokens file's clients, and whether an issuer's clients may
    /// connect too: whom the namespace may be viewed as.
    clients: Vec<String>,
    oauth: bool,
}

#[derive(Serialize)]
struct ServerView {
    version: &'static str,
    transport: &'static str,
    folder: String,
    audited: bool,
    started_ms: u64,
    now_ms: u64,
    /// How many seconds the figures span.
    window_s: f64,
}

#[derive(Serialize)]
struct PluginView {
    scheme: String,
    file: String,
    manifest: Option<String>,
    component: String,
    /// `loading`, `serving`, `quarantined` or `failed`.
    state: &'static str,
    since_ms: u64,
    error: Option<String>,
    not_replaced: Option<String>,
    quarantine: Option<QuarantineView>,
    path_quarantine: Option<QuarantineView>,
    sha256: Option<String>,
    /// The tier of compiled code it runs on, and what each tier took to
    /// compile: `optimized (baseline 812 ms, optimized 2331 ms)`.
    code: Option<String>,
    pulled: Option<String>,
    signed_by: Option<String>,
    logged: Option<bool>,
    about: Option<AboutView>,
    grants: Vec<GrantView>,
    figures: Option<FiguresView>,
}

#[derive(Serialize)]
struct QuarantineView {
    path: Option<String>,
    until_ms: u64,
    reason: String,
    in_force: bool,
}

#[derive(Serialize)]
struct AboutView {
    name: String,
    version: String,
    description: String,
}

#[derive(Serialize)]
struct GrantView {
    section: String,
    lines: Vec<String>,
}

#[derive(Serialize)]
struct FiguresView {
    calls_per_second: f64,
    /// `≤2.5ms`, `>10s`: the latency buckets the median and the 99th
    /// percentile fell in; none without calls.
    p50: Option<String>,
    p99: Option<String>,
    faults: f64,
    faults_by_kind: BTreeMap<String, f64>,
    cpu_per_second: f64,
    instances: f64,
    idle_instances: f64,
    peak_memory_bytes: f64,
}

#[derive(Serialize)]
struct EventView {
    id: u64,
    at_ms: u64,
    kind: &'static str,
    scheme: Option<String>,
    text: String,
}

async fn state(State(console): State<Arc<Console>>, Query(since): Query<Since>) -> Response {
    let (figures, window) = console.figures().await;
    let mut rows = figures.rows;
    let plugins = board()
        .cards()
        .into_iter()
        .map(|card| {
            // Figures go by scheme: only to the card of what serves it.
            let row = card
                .loaded
                .is_some()
                .then(|| rows.remove(&card.origin.scheme))
                .flatten();
            plugin_view(card, row)
        })
        .collect();
    let events = board()
        .events()
        .into_iter()
        .filter(|event| event.id > since.after)
        .map(|event| EventView {
            id: event.id,
            at_ms: millis(event.at),
            kind: event.kind.name(),
            scheme: event.scheme,
            text: event.text,
        })
        .collect();
    let admission = console.admission.as_deref();
    Json(StateView {
        server: ServerView {
            version: env!("CARGO_PKG_VERSION"),
            transport: console.transport,
            folder: console.folder.display().to_string(),
            audited: console.audited,
            started_ms: millis(console.started),
            now_ms: millis(SystemTime::now()),
            window_s: window.as_secs_f64(),
        },
        plugins,
        events,
        clients: admission.map_or_else(Vec::new, |admission| admission.client_names()),
        oauth: admission.is_some_and(|admission| admission.oauth.is_some()),
    })
    .into_response()
}

fn plugin_view(card: Card, row: Option<Row>) -> PluginView {
    let state = match &card.state {
        CardState::Loading => "loading",
        CardState::Serving if card.quarantined_now().is_some() => "quarantined",
        CardState::Serving => "serving",
        CardState::Failed(_) => "failed",
    };
    let error = match &card.state {
        CardState::Failed(reason) => Some(reason.clone()),
        _ => None,
    };
    let loaded = card.loaded.unwrap_or_default();
    let pulled = loaded.pulled;
    PluginView {
        scheme: card.origin.scheme,
        file: card.origin.file.display().to_string(),
        manifest: card
            .origin
            .manifest
            .map(|manifest| manifest.display().to_string()),
        component: card.origin.component,
        state,
        since_ms: millis(card.since),
        error,
        not_replaced: card.not_replaced,
        quarantine: card.quarantine.map(quarantine_view),
        path_quarantine: card.path_quarantine.map(quarantine_view),
        sha256: (!loaded.sha256.is_empty()).then_some(loaded.sha256),
        code: code_view(&loaded.code),
        pulled: pulled.as_ref().map(|pulled| pulled.manifest_digest.clone()),
        signed_by: pulled.as_ref().map(|pulled| pulled.signed_by.clone()),
        logged: pulled.as_ref().map(|pulled| pulled.logged),
        about: loaded.about.map(|(name, version, description)| AboutView {
            name,
            version,
            description,
        }),
        grants: loaded
            .grants
            .into_iter()
            .map(|(section, lines)| GrantView { section, lines })
            .collect(),
        figures: row.map(|row| FiguresView {
            calls_per_second: row.calls_per_second,
            p50: row.p50.map(|latency| latency.to_string()),
            p99: row.p99.map(|latency| latency.to_string()),
            faults: row.faults,
            faults_by_kind: row.faults_by_kind,
            cpu_per_second: row.cpu_per_second,
            instances: row.instances,
            idle_instances: row.idle_instances,
            peak_memory_bytes: row.peak_memory_bytes,
        }),
    }
}

fn quarantine_view(quarantine: board::Quarantine) -> QuarantineView {
    QuarantineView {
        path: quarantine.path,
        until_ms: millis(quarantine.until),
        in_force: quarantine.until > SystemTime::now(),
        reason: quarantine.reason,
    }
}

fn millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis() as u64
}

/// Whom the namespace is viewed as.
#[derive(Deserialize)]
struct Viewer {
    /// A tokens-file client, or `oauth:SUBJECT`; none for the operator.
    #[serde(default, rename = "as")]
    name: String,
    /// An issuer's client's groups, comma-separated.
    #[serde(default)]
    groups: String,
}

impl Viewer {
    fn client(&self, console: &Console) -> Result<Client, String> {
        if self.name.is_empty() {
            return Ok(Client::console_operator());
        }
        let Some(admission) = &console.admission else {
            return Err(
                "no client can be named: the server has no tokens file (--tokens) and no auth file (--auth)"
                    .to_owned(),
            );
        };
        let groups: BTreeSet<String> = self
            .groups
            .split(',')
            .map(str::trim)
            .filter(|group| !group.is_empty())
            .map(str::to_owned)
            .collect();
        admission
            .client_named(&self.name, groups, BTreeSet::new(), None)
            .map_err(|error| format!("{error:#}"))
    }
}

fn bad_viewer(reason: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(serde_json::json!({ "error": reason })),
    )
        .into_response()
}

#[derive(Deserialize)]
struct Listing {
    #[serde(flatten)]
    viewer: Viewer,
    cursor: Option<String>,
}

/// The error an MCP client would get, as the page shows it.
fn mcp_error(error: ErrorData) -> Response {
    (
        StatusCode::OK,
        Json(serde_json::json!({ "mcp_error": error })),
    )
        .into_response()
}

/// What a listing answer lists.
#[derive(Clone, Copy)]
enum Listed {
    Resources,
    Templates,
}

/// A listing answer: the entries, in the field of MCP's result that holds
/// them, and the cursor to go on from.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ListingView {
    #[serde(skip_serializing_if = "Option::is_none")]
    resources: Option<Vec<Box<RawValue>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resource_templates: Option<Vec<Box<RawValue>>>,
    next_cursor: Option<String>,
}

impl Listed {
    fn answer(self, entries: Vec<Box<RawValue>>, next_cursor: Option<String>) -> ListingView {
        let (resources, resource_templates) = match self {
            Self::Resources => (Some(entries), None),
            Self::Templates => (None, Some(entries)),
        };
        ListingView {
            resources,
            resource_templates,
            next_cursor,
        }
    }

    /// One page as `client` lists it: its entries, each as the JSON MCP
    /// sends, and its next cursor.
    async fn page(
        self,
        console: &Console,
        client: &Client,
        cursor: Option<&str>,
    ) -> Result<(Vec<Box<RawValue>>, Option<String>), ErrorData> {
        let (entries, next) = match self {
            Self::Resources => {
                let (page, _) = console.server.resources_for(client, cursor).await?;
                (json_each(&page.resources), page.next_cursor)
            }
            Self::Templates => {
                let (page, _) = console.server.templates_for(client, cursor).await?;
                (json_each(&page.resource_templates), page.next_cursor)
            }
        };
        let entries = entries.map_err(|error| {
            ErrorData::internal_error(format!("the listing does not serialise: {error}"), None)
        })?;
        Ok((entries, next))
    }
}

/// Each of `entries` as JSON.
fn json_each<T: Serialize>(entries: &[T]) -> serde_json::Result<Vec<Box<RawValue>>> {
    entries
        .iter()
        .map(serde_json::value::to_raw_value)
        .collect()
}

async fn resources(
    State(console): State<Arc<Console>>,
    Query(listing): Query<Listing>,
) -> Response {
    list(&console, listing, Listed::Resources).await
}

async fn templates(
    State(console): State<Arc<Console>>,
    Query(listing): Query<Listing>,
) -> Response {
    list(&console, listing, Listed::Templates).await
}

/// The entries `listed` as the viewer lists them, page after page from
/// the listing's cursor, within the bounds of one answer, with the cursor
/// to go on from.
async fn list(console: &Console, listing: Listing, listed: Listed) -> Response {
    let client = match listing.viewer.client(console) {
        Ok(client) => client,
        Err(reason) => return bad_viewer(&reason),
    };
    let deadline = Instant::now() + LISTING_BUDGET;
    let mut cursor = listing.cursor;
    let mut entries = Vec::new();
    let mut listed_bytes = 0;
    for _ in 0..MOST_PAGES {
        match listed.page(console, &client, cursor.as_deref()).await {
            Ok((page, next)) => {
                listed_bytes += page.iter().map(|entry| entry.get().len()).sum::<usize>();
                entries.extend(page);
                cursor = next;
            }
            Err(error) => return mcp_error(error),
        }
        if cursor.is_none()
            || entries.len() >= MOST_LISTED
            || listed_bytes >= MOST_LISTED_BYTES
            || Instant::now() >= deadline
        {
            break;
        }
    }
    Json(listed.answer(entries, cursor)).into_response()
}

#[derive(Deserialize)]
struct Reading {
    #[serde(flatten)]
    viewer: Viewer,
    uri: String,
}

async fn read(State(console): State<Arc<Console>>, Query(reading): Query<Reading>) -> Response {
    let client = match reading.viewer.client(&console) {
        Ok(client) => client,
        Err(reason) => return bad_viewer(&reason),
    };
    let (verdict, read) = console.server.read_seen_by(&client, &reading.uri).await;
    let decision = verdict.map(|verdict| DecisionView {
        permitted: verdict.permitted,
        by: verdict.by,
        guarded: client.scope.is_guarded(),
    });
    let (result, mcp_error) = match read {
        Ok(result) => {
            let mut budget = Budget::of_one_read();
            let contents = result
                .contents
                .into_iter()
                .filter_map(|contents| budget.preview(contents))
                .collect();
            (Some(PreviewView { contents }), None)
        }
        Err(error) => (None, Some(error)),
    };
    Json(ReadView {
        decision,
        result,
        mcp_error,
    })
    .into_response()
}

#[derive(Serialize)]
struct ReadView {
    /// The access decision, unless the URI does not parse.
    decision: Option<DecisionView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<PreviewView>,
    /// The error an MCP client would get.
    #[serde(skip_serializing_if = "Option::is_none")]
    mcp_error: Option<ErrorData>,
}

#[derive(Serialize)]
struct DecisionView {
    permitted: bool,
    /// The policies that decided.
    by: Vec<String>,
    /// Whether the viewer is guarded by the access policy at all.
    guarded: bool,
}

#[derive(Serialize)]
struct PreviewView {
    contents: Vec<ContentView>,
}

/// One content of a read, as the page shows it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ContentView {
    uri: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    mime_type: Option<String>,
    /// A text's first [`TEXT_SHOWN`] bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    /// Binary content as base64, up to [`BINARY_SHOWN`] bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    blob: Option<String>,
    /// Its size: of the text, or of the binary content decoded.
    bytes: usize,
    /// How many of those bytes were not sent.
    left_out_bytes: usize,
}

/// What the page may still be sent of one read: bytes of text, and of
/// binary content.
struct Budget {
    text: usize,
    binary: usize,
}

impl Budget {
    fn of_one_read() -> Self {
        Self {
            text: TEXT_SHOWN,
            binary: BINARY_SHOWN,
        }
    }

    /// What the page is sent of `contents`, out of what is left; none for
    /// a kind of content the server never makes.
    fn preview(&mut self, contents: ResourceContents) -> Option<ContentView> {
        match contents {
            ResourceContents::TextResourceContents {
                uri,
                mime_type,
                mut text,
                ..
            } => {
                let bytes = text.len();
                text.truncate(text.floor_char_boundary(self.text));
                self.text -= text.len();
                Some(ContentView {
                    uri,
                    mime_type,
                    left_out_bytes: bytes - text.len(),
                    text: Some(text),
                    blob: None,
                    bytes,
                })
            }
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => {
                let padding = blob.bytes().rev().take_while(|byte| *byte == b'=').count();
                let bytes = (blob.len() / 4 * 3).saturating_sub(padding);
                let shown = bytes <= self.binary;
                if shown {
                    self.binary -= bytes;
                }
                Some(ContentView {
                    uri,
                    mime_type,
                    text: None,
                    blob: shown.then_some(blob),
                    bytes,
                    left_out_bytes: if shown { 0 } else { bytes },
                })
            }
            _ => None,
        }
    }
}

/// What a card says of the plugin's compiled code.
fn code_view(code: &board::Code) -> Option<String> {
    if code.tier.is_empty() {
        return None;
    }
    let compiled: Vec<String> = code
        .compiled
        .iter()
        .map(|(tier, elapsed)| format!("{tier} {} ms", elapsed.as_millis()))
        .collect();
    Some(format!("{} ({})", code.tier, compiled.join(", ")))
}
