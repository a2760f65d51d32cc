//! The sandbox of one plugin instance: the host state its store holds (the
//! WASI context, the HTTP context and its hooks, the resource table, the
//! names it may look up, the limiter), built from the plugin's limits and
//! grants.
//! Nothing in it is inherited from the host: no variable, argument or
//! standard input unless a grant adds it, and what the plugin prints goes
//! to resmux's log.
//!
//! Between two calls, an instance may keep only what cannot change meaning
//! while it waits ([`Sandbox::resources_between_calls`]): its granted
//! directories themselves, its standard streams, header fields and
//! pollables. Any other handle (an open file or subdirectory, a file
//! stream, a directory listing under way, a socket, an HTTP request,
//! response, body or trailers, a type resmux does not know) keeps the
//! instance from serving another call: a file moved out of its grant must
//! not stay reachable, and traffic must not go on between calls.

use std::os::fd::AsFd;
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::filesystem::Descriptor;
use wasmtime_wasi::p2::pipe::ClosedInputStream;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{FieldMap, WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::limits::{Limits, StoreLimiter};
use super::network::{GrantedNames, HttpPolicy, LookupView, NetworkGrant};
use super::output::PluginOutput;
use super::standard::LiveStreams;

/// A granted directory as the file system knows it (its device and inode),
/// and whether the grant lets the plugin write there.
pub type GrantedDirectory = (u64, u64, bool);

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
    streams: LiveStreams,
    granted_directories: Vec<GrantedDirectory>,
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
    streams: LiveStreams,
    /// The directories granted to the instance, preopened: the only
    /// descriptors it may keep between calls.
    pub granted_directories: Vec<GrantedDirectory>,
}

impl SandboxBuilder {
    /// A sandbox that grants `plugin` nothing yet, under its `limits`; what
    /// it prints goes to the log. File operations run on the calling thread
    /// unless [`super::Blocking`] says otherwise: a call that makes one or
    /// more on average runs on a thread of its own (see `runtime::placement`), so an
    /// operation that blocks holds only that thread, and each operation
    /// saves the hop to a blocking thread and back.
    pub fn new(plugin: Arc<str>, limits: &Limits) -> Self {
        let mut wasi = WasiCtxBuilder::new();
        let stdout = PluginOutput::stdout(plugin.clone());
        let stderr = PluginOutput::stderr(plugin.clone());
        let streams = LiveStreams::default();
        wasi.allow_blocking_current_thread(true)
            .stdin(streams.counted(ClosedInputStream))
            .stdout(streams.counted(stdout.clone()))
            .stderr(streams.counted(stderr.clone()));
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
            streams,
            granted_directories: Vec::new(),
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
            streams: self.streams,
            granted_directories: self.granted_directories,
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

    /// How many host resources the instance holds between two calls, or
    /// `None` if one of them may change meaning while it waits (see the
    /// module's comment).
    pub fn resources_between_calls(&mut self) -> Option<usize> {
        let mut count = 0;
        let mut streams = 0;
        for resource in self.table.iter_mut() {
            count += 1;
            if resource.is::<DynInputStream>() || resource.is::<DynOutputStream>() {
                streams += 1;
            } else if let Some(descriptor) = resource.downcast_ref::<Descriptor>() {
                if !is_one_of(descriptor, &self.granted_directories) {
                    return None;
                }
            } else if !(resource.is::<FieldMap>() || resource.is::<DynPollable>()) {
                return None;
            }
        }
        // Every stream is a standard one: none reads or writes a file.
        (streams == self.streams.count()).then_some(count)
    }
}

/// Whether `descriptor` is one of `directories` itself (a granted directory,
/// preopened or opened again), with no more access than a grant of it
/// gives: not a file, not a directory below one, and not a read-only grant
/// reached through a read-write one above it.
fn is_one_of(descriptor: &Descriptor, directories: &[GrantedDirectory]) -> bool {
    let Descriptor::Dir(dir) = descriptor else {
        return false;
    };
    let writes = !dir.perms.write_not_permitted();
    rustix::fs::fstat(dir.dir.as_fd()).is_ok_and(|stat| {
        directories.iter().any(|&(device, inode, writable)| {
            (device, inode) == (stat.st_dev, stat.st_ino) && (writable || !writes)
        })
    })
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
