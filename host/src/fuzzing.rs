//! What the fuzz targets in `fuzz/` reach that resmux otherwise keeps to
//! itself: how the stdio loop cuts stdin into lines and decodes each line,
//! how a located file's bytes become an answer, and the HTTP endpoint with
//! and without the reads answered beside rmcp. The targets fuzz these
//! very functions, not copies of them; nothing in resmux calls this module.

use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage};
use rmcp::transport::async_rw::JsonRpcMessageCodec;
use serde_json::Value;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder;

use crate::contract::Body;
use crate::transport::stdio::{self, Frame, Incoming, Lines};

/// How the stdio loop takes one line.
#[derive(Debug, PartialEq)]
pub enum StdioLine {
    /// A message to handle, as JSON once more.
    Message(Value),
    /// Nothing to answer.
    Ignored,
    /// Answered with Invalid Request.
    WrongShape,
}

/// What the stdio loop makes of `line` (without its newline).
pub fn stdio_line(line: &[u8]) -> StdioLine {
    match stdio::decode(line) {
        Incoming::Message(message) => StdioLine::Message(json_of(&message)),
        Incoming::Ignored => StdioLine::Ignored,
        Incoming::WrongShape => StdioLine::WrongShape,
    }
}

/// The request the stdio loop's own decoder makes of `line`, if it takes
/// the line at all (it leaves the rest to rmcp).
pub fn stdio_fast_path(line: &[u8]) -> Option<Value> {
    stdio::decode_repeated_request(line)
        .map(|request| json_of(&ClientJsonRpcMessage::Request(request)))
}

/// The message rmcp's own decoder makes of `line`, if any.
pub fn rmcp_decoding(line: &[u8]) -> Option<Value> {
    let mut buffer = BytesMut::from(line);
    JsonRpcMessageCodec::<ClientJsonRpcMessage>::default()
        .decode_eof(&mut buffer)
        .ok()
        .flatten()
        .map(|message| json_of(&message))
}

/// The frames the stdio loop cuts stdin into when its bytes arrive in
/// `chunks`: each line, or none for a line over the limit.
pub fn stdio_frames<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> Vec<Option<Vec<u8>>> {
    let mut lines = Lines::default();
    let mut buffer = BytesMut::new();
    let mut frames = Vec::new();
    let take = |frame: Frame| match frame {
        Frame::Line(line) => Some(line.to_vec()),
        Frame::Overlong => None,
    };
    for chunk in chunks {
        buffer.extend_from_slice(chunk);
        while let Ok(Some(frame)) = lines.decode(&mut buffer) {
            frames.push(take(frame));
        }
    }
    while let Ok(Some(frame)) = lines.decode_eof(&mut buffer) {
        frames.push(take(frame));
    }
    frames
}

/// The longest line the stdio loop takes.
pub const STDIO_MAX_LINE_BYTES: usize = stdio::MAX_LINE_BYTES;

/// The MIME type and body the host serves for a located file's `bytes`.
pub fn located_answer(mime_type: Option<String>, text: bool, bytes: Vec<u8>) -> (String, Body) {
    crate::runtime::locate::answer(mime_type, text, bytes)
}

fn json_of<Request, Response, Notification>(
    message: &JsonRpcMessage<Request, Response, Notification>,
) -> Value
where
    JsonRpcMessage<Request, Response, Notification>: serde::Serialize,
{
    serde_json::to_value(message).expect("a decoded message serializes again")
}

/// One MCP endpoint serving `server` twice, both paths sharing its
/// sessions: `beside` answers the reads rmcp would accept beside it, as
/// `resmux serve --http` does; `rmcp` leaves every request to rmcp.
pub struct HttpEndpoints {
    pub beside: HttpPath,
    pub rmcp: HttpPath,
}

/// The MCP endpoint's steps, as `resmux serve --http` runs a request to
/// `/mcp` through them (without its clients' tokens).
pub struct HttpPath(crate::transport::http::McpPath);

impl HttpPath {
    /// The answer to `request`.
    pub async fn serve(
        &self,
        request: axum::http::Request<axum::body::Body>,
    ) -> axum::http::Response<axum::body::Body> {
        self.0.serve(request).await
    }
}

/// [`HttpEndpoints`] for `server`, allowing loopback hosts and origins.
pub fn http_endpoints(server: crate::protocol::Observed) -> HttpEndpoints {
    use crate::transport::http::{Endpoint, ReadsBeside};
    // Sessions that outlast any fuzzing run: the one a target opens stays.
    let endpoint = Endpoint::new(
        Vec::new(),
        Vec::new(),
        std::time::Duration::from_secs(7 * 24 * 3600),
        &tokio_util::sync::CancellationToken::new(),
    );
    let path = |reads| HttpPath(endpoint.path(server.clone(), reads, None, Default::default()));
    HttpEndpoints {
        beside: path(ReadsBeside::Answered),
        rmcp: path(ReadsBeside::LeftToRmcp),
    }
}
