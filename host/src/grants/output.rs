//! What a plugin prints: its stdout and stderr become log lines tagged with the
//! plugin's name, never bytes on the host's own streams. Each of the two
//! streams logs at most [`MAX_LOGGED`] bytes per call, whatever number of
//! stream handles the plugin asks for, so a plugin cannot flood the log; the
//! rest is counted, dropped and reported once when the call ends.
//! The last line a call wrote to stderr is kept (cut to [`MAX_LAST_WORDS`]
//! bytes), so that a fault can name what the plugin said as it failed: an
//! uncaught exception, a panic message.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// The longest line logged as one event; longer output is split.
const MAX_LINE: usize = 4096;
/// Bytes of one stream of one call that reach the log.
pub const MAX_LOGGED: usize = 64 * 1024;
/// Bytes of the last stderr line kept for a fault's message.
pub const MAX_LAST_WORDS: usize = 300;

/// One of a plugin instance's output streams, and its budget.
#[derive(Clone)]
pub struct PluginOutput {
    budget: Arc<Budget>,
}

/// What one stream may still log in the call under way, and what it
/// dropped.
struct Budget {
    plugin: Arc<str>,
    stream: &'static str,
    logged: AtomicUsize,
    dropped: AtomicUsize,
    /// The last non-blank line logged, cut to [`MAX_LAST_WORDS`] bytes;
    /// kept for stderr only.
    last_line: Option<Mutex<Option<String>>>,
}

impl PluginOutput {
    pub fn stdout(plugin: Arc<str>) -> Self {
        Self::new(plugin, "stdout", None)
    }

    pub fn stderr(plugin: Arc<str>) -> Self {
        Self::new(plugin, "stderr", Some(Mutex::new(None)))
    }

    fn new(
        plugin: Arc<str>,
        stream: &'static str,
        last_line: Option<Mutex<Option<String>>>,
    ) -> Self {
        Self {
            budget: Arc::new(Budget {
                plugin,
                stream,
                logged: AtomicUsize::new(0),
                dropped: AtomicUsize::new(0),
                last_line,
            }),
        }
    }

    /// The last non-blank line this stream logged, if it keeps one.
    pub fn last_line(&self) -> Option<String> {
        let kept = self.budget.last_line.as_ref()?;
        kept.lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Ends a call that answered: reports what it dropped and gives the next
    /// call on the instance a whole budget and no last line.
    pub fn end_call(&self) {
        self.budget
            .report_dropped(self.budget.dropped.swap(0, Ordering::Relaxed));
        self.budget.logged.store(0, Ordering::Relaxed);
        if let Some(kept) = &self.budget.last_line {
            *kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        }
    }
}

impl Budget {
    /// Keeps `line` as the last one, if this stream keeps one and the line
    /// says something. Rust's panic hook ends with a hint about backtraces;
    /// the panic message is the line before it.
    fn remember(&self, line: &str) {
        let Some(kept) = &self.last_line else {
            return;
        };
        if line.trim().is_empty() || line.starts_with("note: run with `RUST_BACKTRACE=") {
            return;
        }
        let end = line.floor_char_boundary(MAX_LAST_WORDS);
        *kept.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) =
            Some(line[..end].to_owned());
    }

    /// Takes up to `wanted` bytes from the budget; returns how many it got.
    fn take(&self, wanted: usize) -> usize {
        let mut granted = 0;
        let _ = self
            .logged
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |logged| {
                granted = wanted.min(MAX_LOGGED.saturating_sub(logged));
                Some(logged + granted)
            });
        self.dropped.fetch_add(wanted - granted, Ordering::Relaxed);
        granted
    }

    fn report_dropped(&self, dropped: usize) {
        if dropped > 0 {
            tracing::warn!(
                target: "resmux::plugin",
                plugin = %self.plugin,
                stream = self.stream,
                "dropped {dropped} bytes of output past the {MAX_LOGGED}-byte limit of one call"
            );
        }
    }
}

/// The instance ended in a call (a fault, a cancelled call): that call's
/// drops are reported now.
impl Drop for Budget {
    fn drop(&mut self) {
        let dropped = *self.dropped.get_mut();
        self.report_dropped(dropped);
    }
}

impl IsTerminal for PluginOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for PluginOutput {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(LineLogger {
            output: self.clone(),
            pending: Vec::new(),
        })
    }
}

/// Collects bytes into lines and logs each complete one, up to the cap.
struct LineLogger {
    output: PluginOutput,
    pending: Vec<u8>,
}

impl LineLogger {
    fn emit(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches(['\r', '\n']);
        self.output.budget.remember(text);
        tracing::info!(
            target: "resmux::plugin",
            plugin = %self.output.budget.plugin,
            stream = self.output.budget.stream,
            "{text}"
        );
    }

    fn emit_complete_lines(&mut self) {
        while let Some(end) = self.pending.iter().position(|&byte| byte == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            self.emit(&line);
        }
        while self.pending.len() >= MAX_LINE {
            let chunk: Vec<u8> = self.pending.drain(..MAX_LINE).collect();
            self.emit(&chunk);
        }
    }
}

impl AsyncWrite for LineLogger {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let kept = self.output.budget.take(buf.len());
        self.pending.extend_from_slice(&buf[..kept]);
        self.emit_complete_lines();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Drop for LineLogger {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.emit(&rest);
        }
    }
}
