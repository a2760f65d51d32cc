//! The audit log: one JSON line per read (direct or through the tool
//! bridge), subscription and completion, appended to a file the operator
//! names: when, which client (its name, subject and client id), which
//! action on which URI, what the access policy decided and by which
//! policies, how it ended, how many bytes went out.
//!
//! Lines go through a bounded queue (`QUEUED_LINES`) to a thread of their
//! own (`resmux-audit`), which appends whatever has queued in one write: no
//! runtime thread ever writes the file. When the log is not required,
//! nothing waits on it: a line the queue has no room for (the file stalls:
//! a FIFO nobody reads, a hung mount) is dropped and counted
//! (`resmux_audit_lines_dropped_total`) rather than delaying the answer.
//! When it is required (locked mode), the request waits for its line to be
//! written, as a future that holds no thread, for at most
//! [`REQUIRED_WITHIN`], and is refused otherwise. Lines still queued when
//! serving ends are written before the process exits ([`Flushed`]), if the
//! file takes them within `FLUSH_WITHIN`.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::file_identity;

/// Lines queued for the writer thread before new ones are dropped (or, when
/// the log is required, before requests wait for room).
const QUEUED_LINES: usize = 16_384;
/// Lines the writer thread appends in one write, at most.
const BATCH_LINES: usize = 512;
/// How long a request waits for its line when the log is required, before
/// it is refused.
pub const REQUIRED_WITHIN: Duration = Duration::from_secs(2);
/// How long the way out waits for the lines still queued to be written.
const FLUSH_WITHIN: Duration = Duration::from_secs(2);

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

/// An append-only JSON-lines file, written by a thread of its own. A write
/// that fails is counted (`resmux_audit_write_failures`) and logged when
/// the failures begin and when they end; a log that is required (in locked
/// mode) also fails the request, which is then refused rather than served
/// unaudited, as it is when its line is not written within
/// [`REQUIRED_WITHIN`]. A log that is not required drops the lines its
/// queue has no room for, counted (`resmux_audit_lines_dropped`) and logged
/// when the dropping begins and when it ends. A file moved or removed
/// (rotated) is opened anew at its path, and a line cut short by a failed
/// write is ended before the next one.
pub struct AuditLog {
    path: PathBuf,
    required: bool,
    queue: mpsc::Sender<Queued>,
    /// Lines are being dropped (not required), or not written in time
    /// (required); logged once until a line is queued (with room to spare)
    /// or written in time again.
    behind: AtomicBool,
}

/// Where a required line's writer says whether it was written.
type Waiter = Option<oneshot::Sender<Result<(), String>>>;

/// What the writer thread is handed.
enum Queued {
    /// One line, newline included; with where to say whether it was
    /// written, when the log is required.
    Line { text: Vec<u8>, written: Waiter },
    /// Answered once every line queued before it is written (or failed).
    Flush(std::sync::mpsc::SyncSender<()>),
}

/// Held while serving: when dropped, waits (for at most `FLUSH_WITHIN`)
/// until the lines queued so far are written.
pub struct Flushed {
    path: PathBuf,
    queue: mpsc::Sender<Queued>,
}

/// The file, as the writer thread holds it.
struct Writer {
    path: PathBuf,
    required: bool,
    file: File,
    /// Which file `file` is, worked out once it is open; `None` if it could
    /// not be (the next append opens the path again).
    identity: Option<file_identity::Identity>,
    /// The last write failed part way: the next line starts a line of its own.
    torn: bool,
    /// Writes are failing; logged once until one succeeds.
    failing: bool,
}

impl AuditLog {
    /// The audit log at `path`, and its writer thread; with `required`, a
    /// request whose line cannot be written is refused.
    pub fn open(path: &Path, required: bool) -> Result<Self> {
        let file = open(path)?;
        let writer = Writer {
            path: path.to_owned(),
            required,
            identity: file_identity::of(&file).ok(),
            file,
            torn: false,
            failing: false,
        };
        let (queue, queued) = mpsc::channel(QUEUED_LINES);
        std::thread::Builder::new()
            .name("resmux-audit".into())
            .spawn(move || writer.write_queued(queued))
            .context("cannot start the audit log's writer thread")?;
        Ok(Self {
            path: path.to_owned(),
            required,
            queue,
            behind: AtomicBool::new(false),
        })
    }

    /// What writes the lines still queued on the way out, once dropped;
    /// kept where the log is opened, until serving ends.
    pub fn flushed_on_drop(&self) -> Flushed {
        Flushed {
            path: self.path.clone(),
            queue: self.queue.clone(),
        }
    }

    /// Queues one line. When the log is not required, returns at once,
    /// without waiting for anything (the line dropped if the queue is
    /// full). When it is required, returns once the line is written; fails,
    /// with the reason the request is refused, when it could not be, or
    /// not within [`REQUIRED_WITHIN`].
    pub async fn record(&self, record: &Record<'_>) -> Result<(), String> {
        let text = record.line();
        if !self.required {
            self.queue_or_drop(text);
            return Ok(());
        }
        let (written, was_written) = oneshot::channel();
        let queued = Queued::Line {
            text,
            written: Some(written),
        };
        let waited = tokio::time::timeout(REQUIRED_WITHIN, async {
            self.queue
                .send(queued)
                .await
                .map_err(|_| "its writer has stopped".to_owned())?;
            was_written
                .await
                .map_err(|_| "its writer has stopped".to_owned())?
        })
        .await;
        match waited {
            Ok(Ok(())) => {
                if self.behind.load(Ordering::Relaxed) && self.behind.swap(false, Ordering::Relaxed)
                {
                    tracing::warn!(
                        "the audit log {} is written in time again",
                        self.path.display()
                    );
                }
                Ok(())
            }
            Ok(Err(error)) => Err(format!(
                "refused: the audit log cannot be written, and locked mode serves nothing unaudited: {error}"
            )),
            Err(_) => {
                // Not written: the writer skips the line of a request that
                // stopped waiting for it.
                crate::telemetry::metrics().audit_write_failures.inc();
                if !self.behind.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        "the audit log {} was not written within {} ms; requests are refused until it is (locked mode)",
                        self.path.display(),
                        REQUIRED_WITHIN.as_millis()
                    );
                }
                Err(format!(
                    "refused: the audit log was not written within {} ms, and locked mode serves nothing unaudited",
                    REQUIRED_WITHIN.as_millis()
                ))
            }
        }
    }

    /// Queues `text` if there is room, and drops it, counted, if not.
    fn queue_or_drop(&self, text: Vec<u8>) {
        let queued = Queued::Line {
            text,
            written: None,
        };
        match self.queue.try_send(queued) {
            // Caught up once half the queue is free again, so that a writer
            // that just keeps up is not logged for every batch it takes.
            Ok(()) => {
                if self.behind.load(Ordering::Relaxed)
                    && self.queue.capacity() >= QUEUED_LINES / 2
                    && self.behind.swap(false, Ordering::Relaxed)
                {
                    tracing::warn!(
                        "the audit log {} keeps up again; its lines are no longer dropped",
                        self.path.display()
                    );
                }
            }
            Err(_) => {
                crate::telemetry::metrics().audit_lines_dropped.inc();
                if !self.behind.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        "the audit log {} does not keep up ({QUEUED_LINES} lines wait for it); \
                         requests are served and their lines dropped until it does \
                         (counted in resmux_audit_lines_dropped_total)",
                        self.path.display()
                    );
                }
            }
        }
    }
}

impl Drop for Flushed {
    /// Runs once, on the way out, on the thread that ran `serve`: waits
    /// there, for at most `FLUSH_WITHIN`, for the writer thread.
    fn drop(&mut self) {
        let deadline = Instant::now() + FLUSH_WITHIN;
        let (done, flushed) = std::sync::mpsc::sync_channel(1);
        let mut flush = Queued::Flush(done);
        loop {
            match self.queue.try_send(flush) {
                Ok(()) => break,
                Err(mpsc::error::TrySendError::Closed(_)) => return,
                Err(mpsc::error::TrySendError::Full(again)) if Instant::now() < deadline => {
                    flush = again;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(mpsc::error::TrySendError::Full(_)) => return self.not_flushed(),
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if flushed.recv_timeout(left).is_err() {
            self.not_flushed();
        }
    }
}

impl Flushed {
    fn not_flushed(&self) {
        tracing::error!(
            "the audit log {} was not written within {} ms of stopping; the lines still queued are lost",
            self.path.display(),
            FLUSH_WITHIN.as_millis()
        );
    }
}

impl Record<'_> {
    /// The line of the log, stamped now, newline included.
    fn line(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Line<'a> {
            time: String,
            #[serde(flatten)]
            record: &'a Record<'a>,
        }
        let line = Line {
            time: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            record: self,
        };
        let mut text = serde_json::to_vec(&line).expect("an audit line serialises");
        text.push(b'\n');
        text
    }

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
    /// The writer thread: appends what is queued, in batches, until every
    /// sender is gone.
    fn write_queued(mut self, mut queued: mpsc::Receiver<Queued>) {
        let mut batch = Vec::with_capacity(BATCH_LINES);
        while queued.blocking_recv_many(&mut batch, BATCH_LINES) > 0 {
            self.write_batch(&mut batch);
        }
    }

    /// Appends the lines of `batch` in one write, tells each waiting
    /// request whether its line was written, and answers the flushes.
    fn write_batch(&mut self, batch: &mut Vec<Queued>) {
        let mut text = Vec::new();
        // Each line's end in `text`, and who waits for it.
        let mut lines = Vec::new();
        let mut flushes = Vec::new();
        for queued in batch.drain(..) {
            match queued {
                // A request that stopped waiting was refused: its line is
                // not written.
                Queued::Line {
                    written: Some(waiting),
                    ..
                } if waiting.is_closed() => {}
                Queued::Line {
                    text: line,
                    written,
                } => {
                    text.extend_from_slice(&line);
                    lines.push((text.len(), written));
                }
                Queued::Flush(done) => flushes.push(done),
            }
        }
        if !lines.is_empty() {
            let (reached, outcome) = self.append(&text);
            self.report(reached, outcome, lines);
        }
        for done in flushes {
            let _ = done.send(());
        }
    }

    /// Tells each line's waiter whether it was written: those that ended
    /// within the `reached` bytes that reached the file were.
    fn report(&mut self, reached: usize, outcome: io::Result<()>, lines: Vec<(usize, Waiter)>) {
        let error = match outcome {
            Ok(()) => {
                if std::mem::take(&mut self.failing) {
                    tracing::warn!("the audit log {} is written again", self.path.display());
                }
                None
            }
            Err(error) => Some(error),
        };
        let mut failed = 0;
        for (end, written) in lines {
            let result = match &error {
                Some(error) if end > reached => {
                    failed += 1;
                    Err(error.to_string())
                }
                _ => Ok(()),
            };
            if let Some(written) = written {
                let _ = written.send(result);
            }
        }
        if let Some(error) = error {
            crate::telemetry::metrics()
                .audit_write_failures
                .inc_by(failed);
            if !std::mem::replace(&mut self.failing, true) {
                tracing::error!(
                    "cannot write the audit log {}: {error}; {}",
                    self.path.display(),
                    match self.required {
                        true => "requests are refused until it can be written (locked mode)",
                        false => "requests are served unaudited until it can be written",
                    }
                );
            }
        }
    }

    /// Appends `lines` (whole lines) to the file at the log's path, opened
    /// anew if it was moved: how many of their bytes reached it, and
    /// whether all did.
    fn append(&mut self, lines: &[u8]) -> (usize, io::Result<()>) {
        if moved(&self.path, self.identity) {
            match open(&self.path) {
                Ok(file) => {
                    self.identity = file_identity::of(&file).ok();
                    self.file = file;
                }
                Err(error) => return (0, Err(io::Error::other(error))),
            }
            self.torn = false;
        }
        if self.torn {
            if let Err(error) = self.file.write_all(b"\n") {
                return (0, Err(error));
            }
            self.torn = false;
        }
        let (reached, outcome) = write_all_counted(&mut self.file, lines);
        self.torn = reached > 0 && lines[reached - 1] != b'\n';
        (reached, outcome)
    }
}

/// `write_all`, which also says how many bytes reached the file when it
/// fails.
fn write_all_counted(file: &mut File, bytes: &[u8]) -> (usize, io::Result<()>) {
    let mut reached = 0;
    while reached < bytes.len() {
        match file.write(&bytes[reached..]) {
            Ok(0) => return (reached, Err(io::ErrorKind::WriteZero.into())),
            Ok(written) => reached += written,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return (reached, Err(error)),
        }
    }
    (reached, Ok(()))
}

fn open(path: &Path) -> Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("cannot open audit log {}", path.display()))
}

/// Whether `path` no longer names the open file whose identity is
/// `open`: it was moved or removed.
fn moved(path: &Path, open: Option<file_identity::Identity>) -> bool {
    let (Ok(named), Some(open)) = (file_identity::of_path(path), open) else {
        return true;
    };
    named != open
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_of(uri: &str) -> Record<'_> {
        Record {
            client: "local",
            subject: "",
            client_id: "",
            action: "read",
            via: "resources/read",
            uri,
            decision: None,
            policies: &[],
            outcome: "ok",
            bytes: 0,
        }
    }

    /// The URIs of the lines of the audit log at `path`, in order.
    fn uris(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|line| {
                let line: serde_json::Value = serde_json::from_str(line).unwrap();
                line["uri"].as_str().unwrap().to_owned()
            })
            .collect()
    }

    #[tokio::test]
    async fn a_required_line_is_written_before_it_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, true).unwrap();
        for uri in ["notes://notes/a", "notes://notes/b"] {
            log.record(&read_of(uri)).await.unwrap();
            assert_eq!(uris(&path).last().map(String::as_str), Some(uri));
        }
    }

    #[tokio::test]
    async fn the_lines_queued_are_written_once_serving_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(&path, false).unwrap();
        let flushed = log.flushed_on_drop();
        let sent: Vec<String> = (0..2 * BATCH_LINES)
            .map(|n| format!("notes://notes/{n}"))
            .collect();
        for uri in &sent {
            log.record(&read_of(uri)).await.unwrap();
        }
        drop(flushed);
        assert_eq!(uris(&path), sent);
    }
}
