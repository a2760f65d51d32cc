//! The network capability. No grant exists yet, so a plugin gets no sockets,
//! no name lookup and no outgoing HTTP: WASI's address check refuses every
//! address, and [`HttpPolicy`] refuses every `wasi:http` request before any
//! connection is made.

use std::future::Future;

use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi_http::{Error, RequestOptions, Result, WasiBody, WasiHttpHooks};

/// Denies TCP, UDP and name lookup on a new instance's WASI context.
pub fn configure(wasi: &mut WasiCtxBuilder) {
    wasi.allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
}

/// What a plugin's outgoing `wasi:http` requests may reach: nothing.
#[derive(Debug, Default)]
pub struct HttpPolicy;

type SendResult = Result<(
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<()>> + Send>,
)>;

impl WasiHttpHooks for HttpPolicy {
    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _: Option<RequestOptions>,
        _: Box<dyn Future<Output = Result<()>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        tracing::warn!(uri = %request.uri(), "denied an outgoing HTTP request: no network grant");
        Box::new(async { Err(Error::HttpRequestDenied) })
    }
}
