//! A plugin instance's standard streams as WASI hands them out: stdin
//! closed, stdout and stderr to the log ([`super::output`]), and every
//! handle to one of them counted while it lives. Between calls, the stream
//! handles an instance holds must all be these ([`super::Sandbox`]): any
//! other stream reads or writes a file, whose meaning can change while the
//! instance waits, and WASI gives no other way to tell the two apart.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::bytes::Bytes;
use wasmtime_wasi::async_trait;
use wasmtime_wasi::cli::{IsTerminal, StdinStream, StdoutStream};
use wasmtime_wasi::p2::{InputStream, OutputStream, Pollable, StreamResult};

/// How many handles to one instance's standard streams are alive.
#[derive(Clone, Default)]
pub struct LiveStreams(Arc<AtomicUsize>);

impl LiveStreams {
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    /// `stream`, with each handle WASI makes of it counted here.
    pub fn counted<S>(&self, stream: S) -> Counted<S> {
        Counted {
            stream,
            live: self.clone(),
        }
    }

    fn opened(&self) -> Self {
        self.0.fetch_add(1, Ordering::AcqRel);
        self.clone()
    }
}

/// A standard stream whose handles are counted.
pub struct Counted<S> {
    stream: S,
    live: LiveStreams,
}

impl<S: IsTerminal> IsTerminal for Counted<S> {
    fn is_terminal(&self) -> bool {
        self.stream.is_terminal()
    }
}

impl<S: StdoutStream> StdoutStream for Counted<S> {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        self.stream.async_stream()
    }

    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(Handle {
            stream: self.stream.p2_stream(),
            _live: Live(self.live.opened()),
        })
    }
}

impl<S: StdinStream> StdinStream for Counted<S> {
    fn async_stream(&self) -> Box<dyn AsyncRead + Send + Sync> {
        self.stream.async_stream()
    }

    fn p2_stream(&self) -> Box<dyn InputStream> {
        Box::new(Handle {
            stream: self.stream.p2_stream(),
            _live: Live(self.live.opened()),
        })
    }
}

/// One counted handle: the stream WASI would have made, and its count.
struct Handle<T> {
    stream: T,
    _live: Live,
}

/// One live handle of [`LiveStreams`], uncounted when dropped.
struct Live(LiveStreams);

impl Drop for Live {
    fn drop(&mut self) {
        (self.0).0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[async_trait]
impl Pollable for Handle<Box<dyn OutputStream>> {
    async fn ready(&mut self) {
        self.stream.ready().await
    }
}

#[async_trait]
impl OutputStream for Handle<Box<dyn OutputStream>> {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.stream.write(bytes)
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.stream.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.stream.check_write()
    }

    async fn cancel(&mut self) {
        self.stream.cancel().await
    }
}

#[async_trait]
impl Pollable for Handle<Box<dyn InputStream>> {
    async fn ready(&mut self) {
        self.stream.ready().await
    }
}

#[async_trait]
impl InputStream for Handle<Box<dyn InputStream>> {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        self.stream.read(size)
    }

    async fn cancel(&mut self) {
        self.stream.cancel().await
    }
}
