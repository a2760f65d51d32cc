//! The plugin contract in host terms: the data a provider returns and the
//! [`Provider`] trait every source of resources implements.
//!
//! These types mirror `wit/provider.wit` without depending on Wasm, so the
//! namespace can merge Wasm plugins and native providers alike (the benchmark
//! baseline is a native provider). Everything here speaks in scheme-relative
//! paths; schemes belong to the namespace.

use async_trait::async_trait;
use serde::Deserialize;

/// A failure reported by a provider, or by the host while running one.
/// The limits on what one provider answers, which the namespace applies to
/// every answer before it reaches a client: the answer half of a manifest's
/// `[limits]` (the sandbox half is the grants').
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnswerLimits {
    /// Total bytes of all contents of one read.
    pub max_read_bytes: u64,
    /// Entries on one page of a listing.
    pub max_page_entries: u32,
    /// Bytes of any one string of an answer other than a read's contents: a
    /// path, name, title, description, MIME type, `_meta`, icon source,
    /// cursor, change token or completion value.
    pub max_string_bytes: u32,
}

impl AnswerLimits {
    /// What `resmux inspect` and the console say of them.
    pub fn describe(&self) -> String {
        format!(
            "{} bytes per read, {} entries per page, {} bytes per string",
            self.max_read_bytes, self.max_page_entries, self.max_string_bytes
        )
    }
}

impl Default for AnswerLimits {
    fn default() -> Self {
        Self {
            max_read_bytes: 16 * 1024 * 1024,
            max_page_entries: 1_000,
            max_string_bytes: 64 * 1024,
        }
    }
}

impl AnswerLimits {
    /// Every limit by its manifest key.
    pub fn by_key(&self) -> [(&'static str, u64); 3] {
        [
            ("max_read_bytes", self.max_read_bytes),
            ("max_page_entries", self.max_page_entries.into()),
            ("max_string_bytes", self.max_string_bytes.into()),
        ]
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    /// The path names nothing the provider serves.
    #[error("not found: {0}")]
    NotFound(String),
    /// The request was malformed (bad cursor, argument or path).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The provider refused the request.
    #[error("denied: {0}")]
    Denied(String),
    /// Something the provider needs is unavailable now.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The provider reported an internal error.
    #[error("internal error: {0}")]
    Internal(String),
    /// The provider misbehaved: it trapped, exceeded a limit, or returned an
    /// answer that breaks the contract. The message says which.
    #[error("plugin fault: {0}")]
    Fault(String),
}

/// Who may reuse a cached answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheScope {
    #[default]
    Public,
    Private,
}

/// How long an answer stays fresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheHint {
    pub ttl_ms: u64,
    pub scope: CacheScope,
}

/// The intended reader of a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// Client hints attached to resources and templates.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Annotations {
    pub audience: Vec<Role>,
    pub priority: Option<f32>,
    pub last_modified: Option<String>,
}

/// The colour scheme an icon is drawn for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IconTheme {
    Light,
    Dark,
}

/// An icon for a resource or template.
#[derive(Debug, Clone, PartialEq)]
pub struct Icon {
    pub src: String,
    pub mime_type: Option<String>,
    pub sizes: Vec<String>,
    pub theme: Option<IconTheme>,
}

/// Descriptive fields shared by resources and templates.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metadata {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub mime_type: Option<String>,
    pub annotations: Option<Annotations>,
    pub icons: Vec<Icon>,
    /// The text of a JSON object, sent as MCP `_meta`.
    pub meta: Option<String>,
}

/// One concrete resource of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceEntry {
    pub path: String,
    pub size: Option<u64>,
    pub metadata: Metadata,
}

/// A family of resources addressed by an RFC 6570 path template.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateEntry {
    pub path_template: String,
    pub metadata: Metadata,
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
    pub cache: Option<CacheHint>,
}

/// The bytes of one content item.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    Text(String),
    Blob(Vec<u8>),
}

impl Body {
    /// The number of bytes the body holds before any encoding.
    pub fn byte_count(&self) -> usize {
        match self {
            Body::Text(text) => text.len(),
            Body::Blob(bytes) => bytes.len(),
        }
    }
}

/// One content item of a read.
#[derive(Debug, Clone, PartialEq)]
pub struct Content {
    pub path: String,
    pub mime_type: Option<String>,
    pub body: Body,
    pub meta: Option<String>,
}

/// The answer to a read.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadResult {
    pub contents: Vec<Content>,
    pub cache: Option<CacheHint>,
}

/// A request to complete one argument of a template.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionRequest {
    pub path_template: String,
    pub argument: String,
    pub value: String,
    pub context: Vec<(String, String)>,
}

/// Suggestions for a template argument.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Completion {
    pub values: Vec<String>,
    pub total: Option<u32>,
    pub has_more: bool,
}

/// What changed since an earlier report.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangeReport {
    pub token: String,
    pub listing_changed: bool,
    pub changed_paths: Vec<String>,
}

/// A source of resources, addressed by scheme-relative paths.
#[async_trait]
pub trait Provider: Send + Sync {
    /// One page of concrete resources.
    async fn list(&self, cursor: Option<String>) -> Result<Page<ResourceEntry>, ProviderError>;
    /// One page of templates.
    async fn templates(&self, cursor: Option<String>)
    -> Result<Page<TemplateEntry>, ProviderError>;
    /// The contents at `path`.
    async fn read(&self, path: &str) -> Result<ReadResult, ProviderError>;
    /// Suggestions for one template argument.
    async fn complete(&self, request: CompletionRequest) -> Result<Completion, ProviderError>;
    /// What changed since `since`.
    async fn changes(&self, since: Option<String>) -> Result<ChangeReport, ProviderError>;
    /// Whether its calls run on the caller's own thread when that is one
    /// of the plugins' runtime's (none of them may block a thread in a file
    /// operation), rather than on a thread of their own: where its reads
    /// are best started. Where they run is the provider's to decide.
    fn calls_run_in_place(&self) -> bool {
        false
    }
}
