//! A provider whose answers the input decides, mounted in a real namespace
//! and served by resmux's real MCP server: one request in over a stream, and
//! the message a client reads back.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use resmux::contract::{
    AnswerLimits, ChangeReport, Completion, CompletionRequest, Page, Provider, ProviderError,
    ReadResult, ResourceEntry, TemplateEntry,
};
use resmux::namespace::{MountSettings, Namespace};
use resmux::protocol::{Observed, Options, ResmuxServer};
use rmcp::model::{ClientCapabilities, Implementation, InitializeRequestParams, ProtocolVersion};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::runtime::Runtime;

/// The scheme the provider is mounted under.
pub const SCHEME: &str = "fz";

/// Entries on one page of a merged listing.
pub const PAGE_SIZE: usize = 4;

/// Limits small enough for short inputs to reach each of them.
pub const LIMITS: AnswerLimits = AnswerLimits {
    max_read_bytes: 256,
    max_page_entries: 8,
    max_string_bytes: 64,
};

/// How long an answer may take before the target calls it a hang.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// Answers as the input says.
pub struct Scripted {
    pub list: Result<Page<ResourceEntry>, ProviderError>,
    pub templates: Result<Page<TemplateEntry>, ProviderError>,
    pub read: Result<ReadResult, ProviderError>,
    pub complete: Result<Completion, ProviderError>,
}

impl Default for Scripted {
    fn default() -> Self {
        let nothing = || ProviderError::NotFound("nothing here".into());
        Self {
            list: Err(nothing()),
            templates: Err(nothing()),
            read: Err(nothing()),
            complete: Err(nothing()),
        }
    }
}

#[async_trait]
impl Provider for Scripted {
    async fn list(&self, _cursor: Option<String>) -> Result<Page<ResourceEntry>, ProviderError> {
        self.list.clone()
    }

    async fn templates(
        &self,
        _cursor: Option<String>,
    ) -> Result<Page<TemplateEntry>, ProviderError> {
        self.templates.clone()
    }

    async fn read(&self, _path: &str) -> Result<ReadResult, ProviderError> {
        self.read.clone()
    }

    async fn complete(&self, _request: CompletionRequest) -> Result<Completion, ProviderError> {
        self.complete.clone()
    }

    async fn changes(&self, since: Option<String>) -> Result<ChangeReport, ProviderError> {
        Ok(ChangeReport {
            token: since.unwrap_or_default(),
            listing_changed: false,
            changed_paths: Vec::new(),
        })
    }
}

/// A read of the one text `text` at `path`.
pub fn text_read(path: &str, text: &str) -> ReadResult {
    ReadResult {
        contents: vec![resmux::contract::Content {
            path: path.into(),
            mime_type: None,
            body: resmux::contract::Body::Text(text.into()),
            meta: None,
        }],
        cache: None,
    }
}

/// `namespace` with `provider` mounted under [`SCHEME`] with [`LIMITS`].
pub fn mounted(namespace: Namespace, provider: Scripted) -> Arc<Namespace> {
    let settings = MountSettings {
        limits: LIMITS,
        ..MountSettings::default()
    };
    namespace
        .mount(SCHEME, Arc::new(provider), settings)
        .expect("the scheme is free");
    Arc::new(namespace)
}

/// The runtime every asynchronous target runs on.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    });
    &RUNTIME
}

/// The protocol revisions a client may speak, newest last.
pub fn versions() -> &'static [ProtocolVersion] {
    ProtocolVersion::KNOWN_VERSIONS
}

/// Sends `request` (which has `"id": 1`) to a resmux server of `namespace`
/// whose client speaks `version`, and returns the answer a client reads.
pub async fn exchange(
    namespace: Arc<Namespace>,
    version: &ProtocolVersion,
    request: &Value,
) -> Value {
    let server = Observed::new(ResmuxServer::new(namespace, Options::default()), false);
    let (client, served) = tokio::io::duplex(1 << 16);
    let info =
        InitializeRequestParams::new(ClientCapabilities::default(), Implementation::default())
            .with_protocol_version(version.clone());
    let running = rmcp::service::serve_directly(server, served, Some(info));
    let (reading, mut writing) = tokio::io::split(client);
    let mut line = serde_json::to_vec(request).expect("a request serializes");
    line.push(b'\n');
    writing.write_all(&line).await.expect("the server reads");
    let mut lines = BufReader::new(reading).lines();
    let answer = tokio::time::timeout(ANSWER_WITHIN, async {
        loop {
            let line = lines
                .next_line()
                .await
                .expect("the stream stays open")
                .expect("the server answers before it closes");
            let message: Value = serde_json::from_str(&line).unwrap_or_else(|error| {
                panic!("the server wrote a line that is not JSON ({error}): {line}")
            });
            if message.get("id").is_some() {
                return message;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no answer within {ANSWER_WITHIN:?} to {request}"));
    drop(running);
    answer
}
