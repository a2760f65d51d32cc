//! stdio: one JSON-RPC message per line on stdin, one per line on stdout.
//!
//! rmcp's line transport, without its two costs under load (19% and 12% of
//! resmux's CPU with 32 reads in flight, by `perf`):
//! - Decoding. rmcp tries each message shape, then each of some twenty
//!   request kinds in turn, buffering the message for every try. The requests
//!   a client repeats ([`decode_repeated_request`]) are decoded here in one
//!   pass, straight into their kind, with rmcp's own types. Any other line, and any line that
//!   way refuses, goes to rmcp's decoder, which keeps its rules: what is
//!   ignored, and what gets an Invalid Request answer.
//! - Writing. rmcp writes and flushes each answer on its own, under a lock.
//!   Here answers queue, and whoever takes stdout next sends all that is
//!   queued in one write ([`Outbox`]).
//!
//! Reads, once the session is open, do not go to rmcp's loop at all: the
//! transport hands them to [`DirectReads`], and each runs until it first
//! waits where it costs the fewest wakes ([`start_read`]):
//! - a read of a plugin whose calls run where they are made (one without
//!   file grants) is gathered with the others of its scheme that stdin
//!   gives in one go, and they go to a plugin thread together ([`Batch`]),
//!   which runs them there and writes their answers itself: one read costs
//!   no thread a wake of its own, and a plugin whose call holds its thread
//!   (one instruction no epoch tick interrupts) holds back no read of
//!   another scheme;
//! - any other read starts right here, in the loop that reads stdin, since
//!   its plugin call goes to a thread of its own anyway: handed to a
//!   plugin thread first, it would cost one more wake (a C plugin with a
//!   granted file read 1.27x as fast this way, by `scripts/bench`).
//!
//! The loop that reads stdin never runs plugin code: where a call runs is
//! the call's lane's to decide (`runtime::call`), and where a read starts
//! is only a guess of it.
//!
//! A client that sends faster than it reads its answers is held back: stdin
//! is not read while [`MAX_REQUESTS_RUNNING`] of its requests run (reads,
//! tool calls, listings: any but a `subscriptions/listen` stream; a
//! cancelled one until its handler ends) or [`MAX_WAITING_BYTES`] of answers
//! wait for stdout, so such a client costs resmux at most those answers,
//! however many requests it sends.

use std::borrow::Cow;
use std::io::{self, IoSlice};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use rmcp::model::{
    ClientJsonRpcMessage, ClientRequest, ErrorData, JsonRpcError, JsonRpcMessage, JsonRpcRequest,
    JsonRpcResponse, JsonRpcVersion2_0, ListResourceTemplatesRequest, ListResourcesRequest,
    PingRequest, ReadResourceRequest, ReadResourceRequestParams, RequestId, ServerJsonRpcMessage,
};
use rmcp::service::RoleServer;
use rmcp::transport::Transport;
use rmcp::transport::async_rw::{
    DEFAULT_MAX_LINE_LENGTH, JsonRpcMessageCodec, JsonRpcMessageCodecError,
};
use serde::de::IgnoredAny;
use serde::de::value::MapDeserializer;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::bytes::{Bytes, BytesMut};
use tokio_util::codec::{AnyDelimiterCodec, AnyDelimiterCodecError, Decoder, FramedRead};
use tokio_util::task::TaskTracker;

use super::direct::{Answered, DirectReads, Routed, Running};
use crate::runtime;

/// The longest line read, as rmcp's own transport allows. A longer line is
/// dropped and logged, and the session goes on.
pub(crate) const MAX_LINE_BYTES: usize = DEFAULT_MAX_LINE_LENGTH;

/// How long a [`Batch`] may spend running its reads in turn, and the loop
/// that reads stdin starting reads between two times stdin runs dry; reads
/// after that go straight to tasks of their own.
const INLINE_BUDGET: Duration = Duration::from_millis(1);

/// Answers of reads started on the loop that reads stdin that may queue
/// before a writer is sent for them, should stdin not run dry first.
const WRITE_AFTER_ANSWERS: usize = 64;

/// Requests of the session that may run at once; stdin waits while this
/// many do.
const MAX_REQUESTS_RUNNING: usize = 16;

/// Bytes of answers queued or being written to stdout before stdin waits
/// for the client to read them.
const MAX_WAITING_BYTES: usize = 16 * 1024 * 1024;

/// How long the answers of reads in flight may take once stdin has
/// closed: as long as rmcp gives its own handlers.
const DRAIN_WITHIN: Duration = Duration::from_secs(5);

/// One MCP session's stdio: stdin split into messages, answers on their
/// way to stdout.
pub struct Stdio<R, W> {
    lines: FramedRead<R, Lines>,
    outbox: Arc<Outbox<W>>,
    reads: Arc<DirectReads>,
    /// The reads `reads` is answering in tasks, and the tasks writing
    /// queued answers: waited for before stdout closes.
    answering: TaskTracker,
    /// The reads decoded since stdin last ran dry, not yet handed over: a
    /// batch for each scheme.
    batches: Vec<(String, Vec<Answer>)>,
    /// What is left of [`INLINE_BUDGET`] for starting reads here since
    /// stdin last ran dry.
    here_left: Duration,
    /// Once requested, stdin counts as ended.
    stop: Arc<StopReading>,
}

/// A request to read stdin no more (SIGTERM, SIGINT): stdin then counts as
/// ended, so the requests in flight are answered and stdout closes after
/// whole lines, as when the client closes stdin.
#[derive(Default)]
pub struct StopReading {
    requested: AtomicBool,
    /// The loop that reads stdin, while it waits for a line.
    reader: futures::task::AtomicWaker,
}

impl StopReading {
    pub fn request(&self) {
        self.requested.store(true, Ordering::Release);
        self.reader.wake();
    }

    fn requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    /// Has the reader woken on a request from now on; whether one came.
    fn wake_on_request(&self, reader: &Waker) -> bool {
        self.reader.register(reader);
        self.requested()
    }
}

impl<R, W> Stdio<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// The session's stdio; `reads` answers the reads rmcp's loop skips.
    pub fn new(input: R, output: W, reads: Arc<DirectReads>, stop: Arc<StopReading>) -> Self {
        Self {
            reads,
            stop,
            answering: TaskTracker::new(),
            batches: Vec::new(),
            here_left: INLINE_BUDGET,
            lines: FramedRead::new(input, Lines::default()),
            outbox: Arc::new(Outbox {
                queued: Mutex::new(Vec::new()),
                waiting_bytes: AtomicUsize::new(0),
                written: tokio::sync::Notify::new(),
                writer_on_its_way: AtomicBool::new(false),
                output: tokio::sync::Mutex::new(Some(output)),
            }),
        }
    }

    /// Adds `answer`, a read of a plugin mounted at `scheme` that runs its
    /// calls where they are made, to that scheme's batch.
    fn gather(&mut self, scheme: String, answer: Answer) {
        match self.batches.iter_mut().find(|(of, _)| *of == scheme) {
            Some((_, reads)) => reads.push(answer),
            None => self.batches.push((scheme, vec![answer])),
        }
    }

    /// Hands the reads decoded so far to the plugins' threads, a
    /// [`Batch`] for each scheme. Called whenever stdin has nothing more to
    /// give for now, and before the loop waits or hands a message to
    /// rmcp's loop.
    fn hand_over_reads(&mut self) {
        for (_, reads) in self.batches.drain(..) {
            let batch = Batch {
                reads,
                outbox: self.outbox.clone(),
                answering: self.answering.clone(),
            };
            self.answering
                .spawn_on(batch.answer(), &runtime::plugin_threads());
        }
    }

    /// Makes sure a task is on its way to write what is queued, if anything
    /// is. Called whenever stdin has nothing more to give for now, at its
    /// end, and before a message goes to rmcp's loop. (A [`Batch`] writes its
    /// own answers; a client that never stops sending still gets them, as a
    /// batch is handed over at the latest once
    /// [`MAX_REQUESTS_RUNNING`] requests run.)
    fn write_queued_soon(&self) {
        if !self.outbox.claim_write() {
            return;
        }
        let outbox = self.outbox.clone();
        self.answering.spawn(async move {
            // A failed write is logged, and closes stdout.
            let _ = outbox.write_queued().await;
        });
    }

    /// Waits until fewer than [`MAX_WAITING_BYTES`] of answers wait for
    /// stdout, with a writer on its way while they do.
    async fn until_answers_leave(&mut self) {
        loop {
            let written = self.outbox.written.notified();
            let mut written = std::pin::pin!(written);
            // Registered before the count is read, so no write goes unheard.
            written.as_mut().enable();
            if self.outbox.fewer_bytes_than(MAX_WAITING_BYTES) {
                return;
            }
            self.write_queued_soon();
            written.await;
        }
    }
}

impl<R, W> Transport<RoleServer> for Stdio<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        message: ServerJsonRpcMessage,
    ) -> impl Future<Output = io::Result<()>> + Send + 'static {
        if let JsonRpcMessage::Response(JsonRpcResponse { id, .. })
        | JsonRpcMessage::Error(JsonRpcError { id: Some(id), .. }) = &message
        {
            self.reads.release(id);
        }
        // Queued here, not in the future rmcp spawns: the answer's bytes
        // count against [`MAX_WAITING_BYTES`] from the moment its request
        // stops counting as running, before `receive` looks at either.
        let queued = encode(&message).map(|line| self.outbox.queue(line));
        let outbox = self.outbox.clone();
        async move {
            queued?;
            outbox.write_soon().await
        }
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            // Reads held here count as running: hand them over before waiting.
            if !self.reads.fewer_than(MAX_REQUESTS_RUNNING)
                || !self.outbox.fewer_bytes_than(MAX_WAITING_BYTES)
            {
                self.hand_over_reads();
            }
            self.reads.until_fewer_than(MAX_REQUESTS_RUNNING).await;
            self.until_answers_leave().await;
            let next_line = std::future::poll_fn(|context| {
                let mut next_line = match self.stop.requested() {
                    true => Poll::Ready(None),
                    false => self.lines.poll_next_unpin(context),
                };
                if next_line.is_pending() && self.stop.wake_on_request(context.waker()) {
                    next_line = Poll::Ready(None);
                }
                // Nothing more for now, the end of stdin (or a stop), or an error.
                if !matches!(next_line, Poll::Ready(Some(Ok(_)))) {
                    self.hand_over_reads();
                    self.write_queued_soon();
                    self.here_left = INLINE_BUDGET;
                }
                next_line
            });
            let line = match next_line.await? {
                Ok(Frame::Line(line)) => line,
                Ok(Frame::Overlong) => {
                    tracing::warn!(
                        "a line on stdin was longer than {MAX_LINE_BYTES} bytes and was dropped"
                    );
                    continue;
                }
                Err(error) => {
                    tracing::error!("cannot read stdin: {error}");
                    return None;
                }
            };
            match decode(&line) {
                Incoming::Message(message) => match self.reads.route(message) {
                    Routed::Passed(message) => {
                        self.hand_over_reads();
                        self.write_queued_soon();
                        self.reads.pass(&message);
                        return Some(message);
                    }
                    Routed::Read {
                        answer,
                        in_place_scheme: Some(scheme),
                    } => self.gather(scheme, answer),
                    Routed::Read {
                        answer,
                        in_place_scheme: None,
                    } => {
                        let started =
                            start_read(answer, &mut self.here_left, &self.outbox, &self.answering);
                        if started.is_some_and(|queued| queued.answers >= WRITE_AFTER_ANSWERS) {
                            self.write_queued_soon();
                        }
                    }
                },
                Incoming::Ignored => {}
                Incoming::WrongShape => {
                    self.hand_over_reads();
                    let answer = ServerJsonRpcMessage::error(
                        ErrorData::invalid_request("Invalid request", None),
                        None,
                    );
                    // Queued as soon as this runs: should `receive` be
                    // dropped while it waits for stdout, the next answer
                    // takes it along.
                    self.outbox.send(encode(&answer).ok()?).await.ok()?;
                }
            }
        }
    }

    /// Waits up to [`DRAIN_WITHIN`] for the reads answered beside rmcp's
    /// loop (rmcp calls this after waiting as long for its own handlers),
    /// writes what is still queued (an answer whose sender went away after
    /// queueing it), then lets go of stdout.
    async fn close(&mut self) -> io::Result<()> {
        self.answering.close();
        if tokio::time::timeout(DRAIN_WITHIN, self.answering.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                "reads still in flight after {} s were not answered",
                DRAIN_WITHIN.as_secs()
            );
        }
        let mut output = self.outbox.output.lock().await;
        let Some(mut output) = output.take() else {
            return Ok(());
        };
        write_all_vectored(&mut output, &self.outbox.take_queued()).await?;
        output.flush().await
    }
}

/// A read's answer, `None` if it was cancelled.
type Answer = BoxFuture<'static, Option<Answered>>;

/// The reads of one scheme in what stdin gave in one go, whose plugin runs
/// its calls where they are made, answered together on a plugin thread:
/// one task, and one thread woken, for all of them. Each read runs
/// there until it first waits (most are answered by then: their plugin
/// calls run on this same thread, with no task of their own); a read that
/// waits (for an instance, a thread of its own, a file operation, or the
/// next epoch tick, at most `EPOCH_TICK` into the plugin's code) goes on in
/// a task of its own. Once [`INLINE_BUDGET`] is spent, the rest go straight
/// to tasks, which the plugins' other threads may take, so that reads of
/// a slow plugin hold up those behind them by at most the budget and the
/// one read that overran it; a read that overran it (one instruction no
/// tick interrupts runs to its end) holds up only reads of its own scheme,
/// as every scheme has a batch of its own. The reads answered here stop
/// counting as running together, once the last is queued: the loop that
/// reads stdin, when it waits for fewer to run, then wakes once for the
/// batch and lets as many new reads in, where woken as each read ended it
/// let them in one at a time, a batch each, at two thread wakes a read.
/// The answers ready at the end leave in one write.
struct Batch<W> {
    reads: Vec<Answer>,
    outbox: Arc<Outbox<W>>,
    /// The tasks of the session's reads, waited for before stdout closes.
    answering: TaskTracker,
}

impl<W: AsyncWrite + Send + Unpin + 'static> Batch<W> {
    async fn answer(self) {
        let mut budget = INLINE_BUDGET;
        let mut queued = Vec::with_capacity(self.reads.len());
        for answer in self.reads {
            queued.extend(start_read(
                answer,
                &mut budget,
                &self.outbox,
                &self.answering,
            ));
        }
        drop(queued);
        if self.outbox.claim_write() {
            // A failed write is logged, and closes stdout.
            let _ = self.outbox.write_queued().await;
        }
    }
}

/// Runs `answer` until it first waits, its time taken from `budget`: its
/// answer is queued in `outbox` if it is ready ([`Queued`]), or it goes on
/// in a task of `answering`'s on this thread's runtime if it waits. Once
/// the budget is spent, reads go straight to tasks.
fn start_read<W: AsyncWrite + Send + Unpin + 'static>(
    mut answer: Answer,
    budget: &mut Duration,
    outbox: &Arc<Outbox<W>>,
    answering: &TaskTracker,
) -> Option<Queued> {
    if budget.is_zero() {
        answering.spawn(send_when_ready(answer, outbox.clone()));
        return None;
    }
    // The task that takes a waiting read over polls it again, which
    // registers the task's own waker wherever the read waits.
    let mut nowhere = Context::from_waker(Waker::noop());
    let started = Instant::now();
    let first_poll = panic::catch_unwind(AssertUnwindSafe(|| answer.as_mut().poll(&mut nowhere)));
    *budget = budget.saturating_sub(started.elapsed());
    match first_poll {
        Ok(Poll::Ready(answered)) => answered.and_then(|answered| queue(answered, outbox)),
        Ok(Poll::Pending) => {
            answering.spawn(send_when_ready(answer, outbox.clone()));
            None
        }
        // As when a task panics: the read goes unanswered, the session
        // goes on.
        Err(_) => {
            tracing::error!("a read panicked, and is not answered");
            None
        }
    }
}

/// Writes `answer` once it is ready, unless it comes to nothing (a
/// cancelled read).
async fn send_when_ready<W: AsyncWrite + Unpin>(answer: Answer, outbox: Arc<Outbox<W>>) {
    if let Some(answered) = answer.await
        && queue(answered, &outbox).is_some()
    {
        // Its read stopped counting as running as the answer was queued.
        // A failed write is logged, and closes stdout.
        let _ = outbox.write_soon().await;
    }
}

/// A read whose answer is queued for stdout: it counts as running until
/// this is dropped.
struct Queued {
    /// How many answers were queued, this one included.
    answers: usize,
    _running: Running,
}

/// Queues `answered`'s line in `outbox`; none if it cannot be encoded (its
/// read then stops counting as running at once).
fn queue<W: AsyncWrite + Unpin>(answered: Answered, outbox: &Outbox<W>) -> Option<Queued> {
    let (message, running) = answered.into_parts();
    let line = answer_line(&message)?;
    Some(Queued {
        answers: outbox.queue(line),
        _running: running,
    })
}

/// Answers on their way to stdout. Each answer is queued; whoever writes
/// next takes stdout and writes whatever is queued by then in one `writev`,
/// so that under load one write carries many answers: each write wakes the
/// client, and the writes were a fifth of resmux's CPU per stdio read (by
/// `perf`) when most carried one answer.
struct Outbox<W> {
    queued: Mutex<Vec<Vec<u8>>>,
    /// Bytes queued or being written.
    waiting_bytes: AtomicUsize,
    /// Woken whenever a write ends.
    written: tokio::sync::Notify,
    /// Set from when a task is spawned to write what is queued until a
    /// writer holds stdout and is about to take the queue.
    writer_on_its_way: AtomicBool,
    /// `None` once closed, or once a write failed.
    output: tokio::sync::Mutex<Option<W>>,
}

impl<W: AsyncWrite + Unpin> Outbox<W> {
    /// Queues `line`, then writes it with whatever else is queued by then.
    async fn send(&self, line: Vec<u8>) -> io::Result<()> {
        self.queue(line);
        self.write_soon().await
    }

    /// Lets the tasks ready to run queue their answers, then writes what is
    /// queued (unless another sender already took it along).
    async fn write_soon(&self) -> io::Result<()> {
        tokio::task::yield_now().await;
        self.write_queued().await
    }

    /// Queues `line`; how many answers are queued now.
    fn queue(&self, line: Vec<u8>) -> usize {
        self.waiting_bytes.fetch_add(line.len(), Ordering::AcqRel);
        let mut queued = self.queued.lock().unwrap_or_else(PoisonError::into_inner);
        queued.push(line);
        queued.len()
    }

    /// Whether fewer than `most` bytes of answers wait for stdout.
    fn fewer_bytes_than(&self, most: usize) -> bool {
        self.waiting_bytes.load(Ordering::Acquire) < most
    }

    /// Whether answers are queued and no writer is on its way to them:
    /// the caller is that writer from now on.
    fn claim_write(&self) -> bool {
        self.has_queued() && !self.writer_on_its_way.swap(true, Ordering::AcqRel)
    }

    fn has_queued(&self) -> bool {
        !self
            .queued
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// Writes what is queued; drops it if stdout is gone.
    async fn write_queued(&self) -> io::Result<()> {
        let mut output = self.output.lock().await;
        // From here on, whatever is queued next needs a writer of its own.
        self.writer_on_its_way.store(false, Ordering::Release);
        let ready = Taken::new(self);
        let writer = output.as_mut().ok_or_else(stdout_closed)?;
        if ready.lines.is_empty() {
            // An earlier sender took this answer along.
            return Ok(());
        }
        let written = match write_all_vectored(writer, &ready.lines).await {
            Ok(()) => writer.flush().await,
            Err(error) => Err(error),
        };
        if let Err(error) = &written {
            tracing::error!("cannot write to stdout: {error}");
            *output = None;
        }
        written
    }

    fn take_queued(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.queued.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// Answers taken off the queue to be written: they count as waiting until
/// they are written, or dropped with stdout.
struct Taken<'outbox, W> {
    outbox: &'outbox Outbox<W>,
    lines: Vec<Vec<u8>>,
}

impl<'outbox, W: AsyncWrite + Unpin> Taken<'outbox, W> {
    fn new(outbox: &'outbox Outbox<W>) -> Self {
        Self {
            lines: outbox.take_queued(),
            outbox,
        }
    }
}

impl<W> Drop for Taken<'_, W> {
    fn drop(&mut self) {
        let bytes = self.lines.iter().map(Vec::len).sum();
        self.outbox.waiting_bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.outbox.written.notify_waiters();
    }
}

fn stdout_closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "stdout is closed")
}

/// A read's answer as a line for stdout; none, logged, if it cannot be
/// encoded.
fn answer_line(answer: &ServerJsonRpcMessage) -> Option<Vec<u8>> {
    encode(answer)
        .inspect_err(|error| tracing::error!("cannot encode an answer: {error}"))
        .ok()
}

fn encode(message: &ServerJsonRpcMessage) -> io::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(message)?;
    line.push(b'\n');
    Ok(line)
}

async fn write_all_vectored<W: AsyncWrite + Unpin>(
    output: &mut W,
    lines: &[Vec<u8>],
) -> io::Result<()> {
    let mut slices: Vec<IoSlice> = lines.iter().map(|line| IoSlice::new(line)).collect();
    let mut unwritten = &mut slices[..];
    while !unwritten.is_empty() {
        let written = output.write_vectored(unwritten).await?;
        if written == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut unwritten, written);
    }
    Ok(())
}

/// What one line of stdin comes to.
#[expect(
    clippy::large_enum_variant,
    reason = "made once per line and handed on by value, as rmcp takes it"
)]
pub(crate) enum Incoming {
    Message(ClientJsonRpcMessage),
    /// Not JSON (nothing to answer: there is no id), an empty line, or a
    /// notification rmcp ignores.
    Ignored,
    /// JSON, but not a JSON-RPC message: answered with Invalid Request.
    WrongShape,
}

pub(crate) fn decode(line: &[u8]) -> Incoming {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return Incoming::Ignored;
    }
    if let Some(request) = decode_repeated_request(line) {
        return Incoming::Message(JsonRpcMessage::Request(request));
    }
    let mut message = BytesMut::from(line);
    match JsonRpcMessageCodec::<ClientJsonRpcMessage>::default().decode_eof(&mut message) {
        Ok(Some(message)) => Incoming::Message(message),
        Ok(None) => Incoming::Ignored,
        Err(JsonRpcMessageCodecError::Serde(error))
            if matches!(
                error.classify(),
                serde_json::error::Category::Data | serde_json::error::Category::Io
            ) =>
        {
            tracing::debug!("a message on stdin has the wrong shape: {error}");
            Incoming::WrongShape
        }
        Err(error) => {
            tracing::debug!("ignoring a line on stdin that is not JSON: {error}");
            Incoming::Ignored
        }
    }
}

/// A message with its parts left undecoded: what tells a request from the
/// other messages, and which request it is.
#[derive(Deserialize)]
struct Envelope<'line> {
    jsonrpc: JsonRpcVersion2_0,
    id: Option<RequestId>,
    #[serde(borrow)]
    method: Option<&'line RawValue>,
    #[serde(borrow)]
    params: Option<&'line RawValue>,
    #[serde(default, deserialize_with = "present")]
    result: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

/// A field that is there, whatever its value (`null` included).
fn present<'de, D: Deserializer<'de>>(field: D) -> Result<bool, D::Error> {
    IgnoredAny::deserialize(field).map(|_| true)
}

/// The requests a client sends over and over, decoded as rmcp's decoder
/// would decode them, in one pass and without its tries. `None` leaves the
/// line to rmcp.
pub(crate) fn decode_repeated_request(line: &[u8]) -> Option<JsonRpcRequest<ClientRequest>> {
    // serde_json skips the fields it ignores without checking their UTF-8;
    // rmcp takes no line that is not UTF-8 throughout (found by fuzzing).
    let line = std::str::from_utf8(line).ok()?;
    let envelope: Envelope = serde_json::from_str(line).ok()?;
    if envelope.result || envelope.error {
        return None;
    }
    let (id, method) = (envelope.id?, envelope.method?);
    let request = match serde_json::from_str::<Cow<str>>(method.get())
        .ok()?
        .as_ref()
    {
        "resources/read" => read_request(envelope.params?),
        "resources/list" => request_of_kind::<ListResourcesRequest>(method, envelope.params),
        "resources/templates/list" => {
            request_of_kind::<ListResourceTemplatesRequest>(method, envelope.params)
        }
        "ping" => request_of_kind::<PingRequest>(method, envelope.params),
        _ => None,
    }?;
    Some(JsonRpcRequest {
        jsonrpc: envelope.jsonrpc,
        id,
        request,
    })
}

/// A read, decoded as rmcp decodes it but without its costliest step: to
/// move `params._meta` into the request's extensions, rmcp's decoder
/// buffers every field of `params` (serde's `flatten`, 6% of resmux's CPU
/// per stdio read, by `perf`). Here `params` decodes straight into rmcp's
/// type, and `_meta` moves after.
fn read_request(params: &RawValue) -> Option<ClientRequest> {
    // serde would also take a struct from an array, which rmcp refuses.
    if !params.get().trim_start().starts_with('{') {
        return None;
    }
    let params: ReadResourceRequestParams = serde_json::from_str(params.get()).ok()?;
    let mut request = ReadResourceRequest::new(params);
    if let Some(meta) = request.params.meta.take() {
        request.extensions.insert(meta);
    }
    Some(request.into())
}

/// The request of one kind, by rmcp's own decoding of its `method` and
/// `params` (which moves `params._meta` where rmcp's handlers look for it).
fn request_of_kind<'line, Kind>(
    method: &'line RawValue,
    params: Option<&'line RawValue>,
) -> Option<ClientRequest>
where
    Kind: Deserialize<'line> + Into<ClientRequest>,
{
    let fields = std::iter::once(("method", method)).chain(params.map(|params| ("params", params)));
    Kind::deserialize(MapDeserializer::<_, serde_json::Error>::new(fields))
        .ok()
        .map(Into::into)
}

/// stdin split at newlines by tokio-util's codec, into lines of at most
/// [`MAX_LINE_BYTES`]. An overlong line comes as a frame of its own, not as
/// the codec's error: `FramedRead` reads nothing more after an error.
pub(crate) struct Lines(AnyDelimiterCodec);

impl Default for Lines {
    fn default() -> Self {
        Self(AnyDelimiterCodec::new_with_max_length(
            b"\n".to_vec(),
            Vec::new(),
            MAX_LINE_BYTES,
        ))
    }
}

pub(crate) enum Frame {
    Line(Bytes),
    /// The line was dropped; the codec skips the rest of it.
    Overlong,
}

impl Decoder for Lines {
    type Item = Frame;
    type Error = io::Error;

    fn decode(&mut self, buffer: &mut BytesMut) -> io::Result<Option<Frame>> {
        match self.0.decode(buffer) {
            Ok(line) => Ok(line.map(Frame::Line)),
            Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => Ok(Some(Frame::Overlong)),
            Err(AnyDelimiterCodecError::Io(error)) => Err(error),
        }
    }

    /// A last line without its newline was cut off: there is nothing whole
    /// to deliver, as with rmcp's transport.
    fn decode_eof(&mut self, buffer: &mut BytesMut) -> io::Result<Option<Frame>> {
        let frame = self.decode(buffer)?;
        if frame.is_none() {
            buffer.clear();
        }
        Ok(frame)
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::RequestMetaObject;

    use super::*;

    /// What rmcp's own decoder makes of a line.
    fn rmcp_decode(line: &str) -> ClientJsonRpcMessage {
        let mut message = BytesMut::from(line.as_bytes());
        JsonRpcMessageCodec::<ClientJsonRpcMessage>::default()
            .decode_eof(&mut message)
            .unwrap()
            .unwrap()
    }

    /// What rmcp's own decoder makes of a line, as JSON.
    fn as_rmcp_decodes(line: &str) -> serde_json::Value {
        serde_json::to_value(rmcp_decode(line)).unwrap()
    }

    /// A read's `_meta` and its parameters' own, which rmcp's handlers
    /// read apart (JSON does not tell them apart: both go out as `_meta`).
    fn read_meta(
        request: &ClientRequest,
    ) -> (Option<RequestMetaObject>, Option<RequestMetaObject>) {
        let ClientRequest::ReadResourceRequest(read) = request else {
            panic!("not a read: {request:?}");
        };
        (
            read.extensions.get::<RequestMetaObject>().cloned(),
            read.params.meta.clone(),
        )
    }

    #[test]
    fn a_read_carries_its_meta_where_rmcp_puts_it() {
        for line in [
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"a://b","_meta":{"progressToken":"p","io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"_meta":null,"uri":"a://b"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"a://b"}}"#,
        ] {
            let fast = decode_repeated_request(line.as_bytes()).unwrap();
            let JsonRpcMessage::Request(slow) = rmcp_decode(line) else {
                panic!("rmcp does not decode a request: {line}");
            };
            assert_eq!(read_meta(&fast.request), read_meta(&slow.request), "{line}");
        }
        let with_meta = decode_repeated_request(
            br#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"a://b","_meta":{"progressToken":"p"}}}"#,
        )
        .unwrap();
        assert!(read_meta(&with_meta.request).0.is_some());
    }

    #[test]
    fn repeated_requests_decode_as_rmcp_decodes_them() {
        for line in [
            r#"{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"notes://a"}}"#,
            r#"{"method":"resources/read","params":{"uri":"x://\u00e9","_meta":{"progressToken":"p"}},"id":"s","jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/list","params":{"cursor":"c"}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"resources/templates/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"resources\/read","params":{"uri":"a://b"},"extra":1}"#,
        ] {
            let fast = decode_repeated_request(line.as_bytes())
                .unwrap_or_else(|| panic!("not decoded straight: {line}"));
            let fast = serde_json::to_value(JsonRpcMessage::<_, (), ()>::Request(fast)).unwrap();
            assert_eq!(fast, as_rmcp_decodes(line), "{line}");
        }
    }

    #[test]
    fn other_lines_are_left_to_rmcp() {
        for line in [
            // Another kind of request, a notification, an answer.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            // The wrong shape: a request that also carries an answer.
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","result":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","error":{"code":1,"message":"m"}}"#,
            // Wrong version, no id, a null id, params a read cannot take.
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","method":"resources/read","params":{"uri":"a://b"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":[null,"a://b",null,null]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"a://b","_meta":"m"}}"#,
            // A byte-order mark, which rmcp skips.
            "\u{feff}{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}",
        ] {
            assert!(
                decode_repeated_request(line.as_bytes()).is_none(),
                "decoded straight: {line}"
            );
        }
    }

    #[test]
    fn lines_of_the_wrong_shape_are_answered_and_not_json_is_ignored() {
        assert!(matches!(
            decode(br#"{"jsonrpc":"2.0","id":{"no":"ids"},"method":7}"#),
            Incoming::WrongShape
        ));
        assert!(matches!(decode(b"{this is not json"), Incoming::Ignored));
        assert!(matches!(decode(b"\r"), Incoming::Ignored));
        assert!(matches!(
            decode(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r"),
            Incoming::Message(JsonRpcMessage::Request(_))
        ));
    }

    fn frames(input: &[u8]) -> Vec<Option<usize>> {
        let mut lines = Lines::default();
        let mut buffer = BytesMut::new();
        let mut seen = Vec::new();
        // Fed in small pieces, as a pipe may deliver them.
        for piece in input.chunks(4096) {
            buffer.extend_from_slice(piece);
            while let Some(frame) = lines.decode(&mut buffer).unwrap() {
                seen.push(match frame {
                    Frame::Line(line) => Some(line.len()),
                    Frame::Overlong => None,
                });
            }
        }
        if let Some(Frame::Line(line)) = lines.decode_eof(&mut buffer).unwrap() {
            seen.push(Some(line.len()));
        }
        seen
    }

    #[test]
    fn lines_split_at_newlines_and_overlong_lines_are_dropped_whole() {
        assert_eq!(frames(b"ab\n\ncde\n"), [Some(2), Some(0), Some(3)]);
        assert_eq!(frames(b"ab\ncut off"), [Some(2)]);

        let mut input = vec![b'x'; MAX_LINE_BYTES + 10];
        input.extend_from_slice(b"\nafter\n");
        assert_eq!(frames(&input), [None, Some(5)]);

        let mut exact = vec![b'x'; MAX_LINE_BYTES];
        exact.extend_from_slice(b"\n");
        assert_eq!(frames(&exact), [Some(MAX_LINE_BYTES)]);
    }
}
