//! The sandbox of one plugin instance: the host state its store holds (the
//! WASI context, the HTTP context and its hooks, the resource table, the
//! names it may look up, the limiter), built from the plugin's limits and
//! grants.
//! Nothing in it is inherited from the host: no variable, argument or
//! standard input unless a grant adds it, and what the plugin prints goes
//! to resmux's log.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::sockets::{TcpSocket, UdpSocket};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::body::{HostIncomingBody, HostOutgoingBody};
use wasmtime_wasi_http::p2::types::{
    HostFutureIncomingResponse, HostIncomingResponse, HostOutgoingRequest,
};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::limits::{Limits, StoreLimiter};
use super::network::{GrantedNames, HttpPolicy, LookupView, NetworkGrant};
use super::output::PluginOutput;

/// The host state of one plugin instance.
pub struct Sandbox {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    http_policy: HttpPolicy,
    table: ResourceTable,
    names: GrantedNames,
    limiter: StoreLimiter,
    stdout: PluginOutput,
    stderr: PluginOutput,
}

/// A sandbox being built: each grant adds its share.
pub struct SandboxBuilder {
    pub wasi: WasiCtxBuilder,
    pub http: WasiHttpCtx,
    pub http_policy: HttpPolicy,
    table: ResourceTable,
    pub names: GrantedNames,
    limiter: StoreLimiter,
    stdout: PluginOutput,
    stderr: PluginOutput,
}

impl SandboxBuilder {
    /// A sandbox that grants `plugin` nothing yet, under its `limits`; what
    /// it prints goes to the log. With `blocking`, file operations run on
    /// the calling thread instead of tokio's blocking pool: a 1 KiB read
    /// through the files plugin drops from about 370 us to about 50 us
    /// (benches/read_path.rs), and a plugin with file grants runs each such
    /// call on a thread of its own (see `runtime::plugin`), so an operation
    /// that blocks holds only that thread. Without it, each file operation
    /// goes to the blocking pool, so the call may run on the runtime's own
    /// threads (`locate`).
    pub fn new(plugin: Arc<str>, limits: &Limits, blocking: bool) -> Self {
        let mut wasi = WasiCtxBuilder::new();
        let stdout = PluginOutput::stdout(plugin.clone());
        let stderr = PluginOutput::stderr(plugin.clone());
        wasi.allow_blocking_current_thread(blocking)
            .stdout(stdout.clone())
            .stderr(stderr.clone());
        let mut table = ResourceTable::new();
        table.set_max_capacity(limits.max_handles as usize);
        Self {
            wasi,
            http: WasiHttpCtx::new(),
            http_policy: HttpPolicy::new(plugin, NetworkGrant::default()),
            table,
            names: GrantedNames::default(),
            limiter: limits.limiter(),
            stdout,
            stderr,
        }
    }

    pub fn build(mut self) -> Sandbox {
        Sandbox {
            wasi: self.wasi.build(),
            http: self.http,
            http_policy: self.http_policy,
            table: self.table,
            names: self.names,
            limiter: self.limiter,
            stdout: self.stdout,
            stderr: self.stderr,
        }
    }
}

impl Sandbox {
    /// The limiter that counts the instance's memory, tables and CPU.
    pub fn limiter(&mut self) -> &mut StoreLimiter {
        &mut self.limiter
    }

    /// The limiter, to read which limit stopped a call.
    pub fn limits_reached(&self) -> &StoreLimiter {
        &self.limiter
    }

    /// The last line the call wrote to stderr, to name in a fault.
    pub fn last_stderr_line(&self) -> Option<String> {
        self.stderr.last_line()
    }

    /// Ends a call that answered, so the next call on the instance starts
    /// with whole CPU and output budgets; returns the CPU time it was
    /// charged.
    pub fn end_call(&mut self) -> std::time::Duration {
        self.stdout.end_call();
        self.stderr.end_call();
        self.limiter.end_call()
    }

    /// How many host resources (descriptors, streams, HTTP fields) the
    /// instance holds between two calls, or `None` if one of them is
    /// network traffic (a socket, an HTTP request, response or body), which
    /// could go on working while no call runs.
    pub fn resources_between_calls(&mut self) -> Option<usize> {
        let mut count = 0;
        for resource in self.table.iter_mut() {
            let traffic = resource.is::<TcpSocket>()
                || resource.is::<UdpSocket>()
                || resource.is::<HostOutgoingRequest>()
                || resource.is::<HostFutureIncomingResponse>()
                || resource.is::<HostIncomingResponse>()
                || resource.is::<HostOutgoingBody>()
                || resource.is::<HostIncomingBody>();
            if traffic {
                return None;
            }
            count += 1;
        }
        Some(count)
    }
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for Sandbox {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.http_policy,
        }
    }
}

impl LookupView for Sandbox {
    fn lookup_parts(&mut self) -> (&mut ResourceTable, &GrantedNames) {
        (&mut self.table, &self.names)
    }
}
