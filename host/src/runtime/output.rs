//! What a plugin prints: its stdout and stderr become log lines tagged with the
//! plugin's name, never bytes on the host's own streams. Each stream of each
//! call logs at most [`MAX_LOGGED`] bytes, so a plugin cannot flood the log;
//! the rest is counted and dropped.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// The longest line logged as one event; longer output is split.
const MAX_LINE: usize = 4096;
/// Bytes of one stream of one call that reach the log.
pub const MAX_LOGGED: usize = 64 * 1024;

/// One of a plugin's output streams.
#[derive(Clone)]
pub struct PluginOutput {
    plugin: Arc<str>,
    stream: &'static str,
}

impl PluginOutput {
    pub fn stdout(plugin: Arc<str>) -> Self {
        Self {
            plugin,
            stream: "stdout",
        }
    }

    pub fn stderr(plugin: Arc<str>) -> Self {
        Self {
            plugin,
            stream: "stderr",
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
            logged: 0,
            dropped: 0,
        })
    }
}

/// Collects bytes into lines and logs each complete one, up to the cap.
struct LineLogger {
    output: PluginOutput,
    pending: Vec<u8>,
    logged: usize,
    dropped: usize,
}

impl LineLogger {
    fn emit(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches(['\r', '\n']);
        tracing::info!(
            target: "resmux::plugin",
            plugin = %self.output.plugin,
            stream = self.output.stream,
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
        let room = MAX_LOGGED - self.logged;
        let kept = buf.len().min(room);
        self.logged += kept;
        self.dropped += buf.len() - kept;
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
        if self.dropped > 0 {
            tracing::warn!(
                target: "resmux::plugin",
                plugin = %self.output.plugin,
                stream = self.output.stream,
                "dropped {} bytes of output past the {MAX_LOGGED}-byte limit of one call",
                self.dropped
            );
        }
    }
}
