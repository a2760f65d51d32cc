//! What a plugin prints: its stdout and stderr become log lines tagged with the
//! plugin's name, never bytes on the host's own streams. Each of the two
//! streams logs at most [`MAX_LOGGED`] bytes per instance, whatever number of
//! stream handles the plugin asks for, so a plugin cannot flood the log; the
//! rest is counted, dropped and reported once when the instance ends.
//! The last line an instance wrote to stderr is kept (cut to
//! [`MAX_LAST_WORDS`] bytes), so that a fault can name what the plugin said
//! as it failed: an uncaught exception, a panic message.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// The longest line logged as one event; longer output is split.
const MAX_LINE: usize = 4096;
/// Bytes of one stream of one instance that reach the log.
pub const MAX_LOGGED: usize = 64 * 1024;
/// Bytes of the last stderr line kept for a fault's message.
pub const MAX_LAST_WORDS: usize = 300;

/// One of a plugin instance's output streams, and its budget.
#[derive(Clone)]
pub struct PluginOutput {
    budget: Arc<Budget>,
}

/// What one stream of one instance may still log, and what it dropped.
struct Budget {
    plugin: Arc<str>,
    stream: &'static str,
    logged: AtomicUsize,
    dropped: AtomicUsize,
    /// The last non-blank line logged, cut to [`MAX_LAST_WORDS`] bytes.
    last_line: Mutex<Option<String>>,
}

impl PluginOutput {
    pub fn stdout(plugin: Arc<str>) -> Self {
        Self::new(plugin, "stdout")
    }

    pub fn stderr(plugin: Arc<str>) -> Self {
        Self::new(plugin, "stderr")
    }

    fn new(plugin: Arc<str>, stream: &'static str) -> Self {
        Self {
            budget: Arc::new(Budget {
                plugin,
                stream,
                logged: AtomicUsize::new(0),
                dropped: AtomicUsize::new(0),
                last_line: Mutex::new(None),
            }),
        }
    }
}

impl PluginOutput {
    /// The last non-blank line this stream logged, if any.
    pub fn last_line(&self) -> Option<String> {
        self.budget
            .last_line
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl Budget {
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
}

impl Drop for Budget {
    fn drop(&mut self) {
        let dropped = *self.dropped.get_mut();
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
        // Rust's panic hook ends with a hint about backtraces; the panic
        // message is the line before it.
        let boilerplate = text.starts_with("note: run with `RUST_BACKTRACE=");
        if !text.trim().is_empty() && !boilerplate {
            let mut end = text.len().min(MAX_LAST_WORDS);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            *self
                .output
                .budget
                .last_line
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(text[..end].to_owned());
        }
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
