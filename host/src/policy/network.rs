//! The network capability. No grant exists yet, so a plugin gets no sockets
//! and no name lookup: every address is refused by WASI's address check.

use wasmtime_wasi::WasiCtxBuilder;

/// Denies TCP, UDP and name lookup on a new instance's WASI context.
pub fn configure(wasi: &mut WasiCtxBuilder) {
    wasi.allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
}
