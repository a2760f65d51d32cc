//! The audit log: one JSON line per read (direct or through the tool
//! bridge), subscription and completion, appended to a file the operator
//! names: when, which client (its name, subject and client id), which
//! action on which URI, what the access policy decided and by which
//! policies, how it ended, how many bytes went out.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
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

/// An append-only JSON-lines file. A write that fails is counted
/// (`resmux_audit_write_failures`) and logged when the failures begin and
/// when they end; a log that is required (in locked mode) also fails the
/// request, which is then refused rather than served unaudited. A file
/// moved or removed (rotated) is opened anew at its path, and a line cut
/// short by a failed write is ended before the next one.
pub struct AuditLog {
    path: PathBuf,
    required: bool,
    writer: Mutex<Writer>,
}

struct Writer {
    file: File,
    /// The last write failed part way: the next line starts a line of its own.
    torn: bool,
    /// Writes are failing; logged once until one succeeds.
    failing: bool,
}

impl AuditLog {
    /// The audit log at `path`; with `required`, a request whose line
    /// cannot be written is refused.
    pub fn open(path: &Path, required: bool) -> Result<Self> {
        Ok(Self {
            path: path.to_owned(),
            required,
            writer: Mutex::new(Writer {
                file: open(path)?,
                torn: false,
                failing: false,
            }),
        })
    }

    /// Appends one line. Fails only when the log is required and the line
    /// could not be written, with the reason the request is refused.
    pub fn record(&self, record: &Record<'_>) -> Result<(), String> {
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
        let mut writer = self
            .writer
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        match writer.append(&self.path, text.as_bytes()) {
            Ok(()) => {
                if std::mem::take(&mut writer.failing) {
                    tracing::warn!("the audit log {} is written again", self.path.display());
                }
                Ok(())
            }
            Err(error) => {
                crate::telemetry::metrics().audit_write_failures.inc();
                if !std::mem::replace(&mut writer.failing, true) {
                    tracing::error!(
                        "cannot write the audit log {}: {error}; {}",
                        self.path.display(),
                        match self.required {
                            true => "requests are refused until it can be written (locked mode)",
                            false => "requests are served unaudited until it can be written",
                        }
                    );
                }
                match self.required {
                    true => Err(format!(
                        "refused: the audit log cannot be written, and locked mode serves nothing unaudited: {error}"
                    )),
                    false => Ok(()),
                }
            }
        }
    }
}

impl Record<'_> {
    /// The line in a few words, as the operator's console lists it.
    pub fn summary(&self) -> String {
        let by = match self.policies {
            [] => String::new(),
            policies => format!(" by {}", policies.join(", ")),
        };
        format!(
            "{} {} {} {}{by} via {}: {}, {} bytes",
            self.client,
            self.decision.unwrap_or("undecided"),
            self.action,
            self.uri,
            self.via,
            self.outcome,
            self.bytes
        )
    }
}

impl Writer {
    fn append(&mut self, path: &Path, line: &[u8]) -> io::Result<()> {
        if moved(path, &self.file) {
            self.file = open(path).map_err(io::Error::other)?;
            self.torn = false;
        }
        if self.torn {
            self.file.write_all(b"\n")?;
            self.torn = false;
        }
        self.file.write_all(line).inspect_err(|_| self.torn = true)
    }
}

fn open(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open audit log {}", path.display()))
}

/// Whether `path` no longer names `file`: it was moved or removed.
fn moved(path: &Path, file: &File) -> bool {
    let (Ok(named), Ok(open)) = (std::fs::metadata(path), file.metadata()) else {
        return true;
    };
    (named.dev(), named.ino()) != (open.dev(), open.ino())
}
