//! The audit log: one JSON line per read (direct or through the tool
//! bridge), subscription and completion, appended to a file the operator
//! names: when, which client (its name, subject and client id), which
//! action on which URI, what the access policy decided and by which
//! policies, how it ended, how many bytes went out.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, Result};
use serde::Serialize;

/// One audited request.
#[derive(Debug, Serialize)]
pub struct Record<'a> {
    pub client: &'a str,
    pub subject: &'a str,
    pub client_id: &'a str,
    /// `read`, `subscribe` or `complete`.
    pub action: &'a str,
    /// The MCP method: `resources/read`, `tools/call`,
    /// `resources/subscribe` or `completion/complete`.
    pub via: &'a str,
    /// The resource's URI (the template's, for completions) in the one
    /// spelling the host keys on, its scheme lowercased; as the client sent
    /// it when it does not parse.
    pub uri: &'a str,
    /// `allow` or `deny`; absent when the request was refused before a
    /// decision (a rate limit, a URI that does not parse).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<&'a str>,
    /// The policies that made the decision: those that permitted it, or
    /// those that forbade it (none when nothing permitted it, or when no
    /// access policy guards the client).
    pub policies: &'a [String],
    /// `ok`, `not-found`, `invalid`, `rate-limited` or `failed`.
    pub outcome: &'a str,
    /// Bytes of content returned (before base64).
    pub bytes: u64,
}

/// An append-only JSON-lines file.
pub struct AuditLog {
    file: Mutex<File>,
}

impl AuditLog {
    pub fn open(path: &Path) -> Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot open audit log {}", path.display()))?;
        Ok(Self {
            file: Mutex::new(file),
        })
    }

    /// Appends one line. A write that fails is logged, never fatal to the read.
    pub fn record(&self, record: &Record<'_>) {
        #[derive(Serialize)]
        struct Line<'a> {
            time: String,
            #[serde(flatten)]
            record: &'a Record<'a>,
        }
        let line = Line {
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            record,
        };
        let mut text = serde_json::to_string(&line).expect("an audit line serialises");
        text.push('\n');
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Err(error) = file.write_all(text.as_bytes()) {
            crate::telemetry::metrics().audit_write_failures.inc();
            tracing::error!("cannot write the audit log: {error}");
        }
    }
}
