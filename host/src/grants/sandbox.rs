//! The sandbox of one plugin instance: the host state its store holds (the
//! WASI context, the resource table, the limiter, its output), built from
//! the plugin's limits and grants, and beside it each capability's own
//! per-instance state ([`InstanceState`]), which that capability's module
//! defines, puts in when it prepares an instance, and finds again by its
//! type. The sandbox knows none of them: a new capability with state is its
//! own module and its one registration.
//! Nothing in it is inherited from the host: no variable, argument or
//! standard input unless a grant adds it, and what the plugin prints goes
//! to resmux's log.
//!
//! Between two calls, an instance may keep only what cannot change meaning
//! while it waits ([`Sandbox::resources_between_calls`]): its standard
//! streams and pollables, and what a capability's state vouches for
//! ([`InstanceState::may_keep`]: its granted directories themselves, header
//! fields). Any other handle (an open file or subdirectory, a file
//! stream, a directory listing under way, a socket, an HTTP request,
//! response, body or trailers, a type resmux does not know) keeps the
//! instance from serving another call: a file moved out of its grant must
//! not stay reachable, and traffic must not go on between calls.

use std::any::Any;
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::ClosedInputStream;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::limits::{Limits, StoreLimiter};
use super::output::PluginOutput;
use super::standard::LiveStreams;

/// One capability's share of an instance, defined in that capability's
/// module.
pub trait InstanceState: Any + Send {
    /// Whether the instance may keep `resource`, one of its table's, between
    /// two calls: only what cannot change meaning while it waits.
    fn may_keep(&self, _resource: &dyn Any) -> bool {
        false
    }
}

/// The most random bytes one `get-random-bytes` (secure or not) may draw:
/// the host makes them in one go that nothing interrupts, so a larger
/// request traps, naming this limit, rather than holding a thread for the
/// hundreds of milliseconds 64 MiB take.
pub const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// The host state of one plugin instance.
pub struct Sandbox {
    wasi: WasiCtx,
    parts: Parts,
}

/// A sandbox being built: each grant adds its share.
pub struct SandboxBuilder {
    pub wasi: WasiCtxBuilder,
    parts: Parts,
}

/// What a sandbox holds besides its WASI context, the same while it is
/// built and once it runs.
struct Parts {
    plugin: Arc<str>,
    table: ResourceTable,
    states: Vec<Box<dyn InstanceState>>,
    limiter: StoreLimiter,
    stdout: PluginOutput,
    stderr: PluginOutput,
    streams: LiveStreams,
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
            .max_random_size(MAX_RANDOM_BYTES)
            .stdin(streams.counted(ClosedInputStream))
            .stdout(streams.counted(stdout.clone()))
            .stderr(streams.counted(stderr.clone()));
        let mut table = ResourceTable::new();
        table.set_max_capacity(limits.max_handles as usize);
        Self {
            wasi,
            parts: Parts {
                plugin,
                table,
                states: Vec::new(),
                limiter: limits.limiter(),
                stdout,
                stderr,
                streams,
            },
        }
    }

    /// The state of type `T` a capability keeps for this instance, made by
    /// `first` if it has none yet.
    pub fn state<T: InstanceState>(&mut self, first: impl FnOnce() -> T) -> &mut T {
        find_or_add(&mut self.parts.states, first)
    }

    pub fn build(mut self) -> Sandbox {
        Sandbox {
            wasi: self.wasi.build(),
            parts: self.parts,
        }
    }
}

/// The state of type `T` among `states`, added by `first` if it is not there.
fn find_or_add<T: InstanceState>(
    states: &mut Vec<Box<dyn InstanceState>>,
    first: impl FnOnce() -> T,
) -> &mut T {
    let index = match states
        .iter()
        .position(|state| (state.as_ref() as &dyn Any).is::<T>())
    {
        Some(index) => index,
        None => {
            states.push(Box::new(first()));
            states.len() - 1
        }
    };
    (states[index].as_mut() as &mut dyn Any)
        .downcast_mut()
        .expect("the state at this index is a T")
}

impl Sandbox {
    /// The limiter that counts the instance's memory, tables and CPU.
    pub fn limiter(&mut self) -> &mut StoreLimiter {
        &mut self.parts.limiter
    }

    /// The limiter, to read which limit stopped a call.
    pub fn limits_reached(&self) -> &StoreLimiter {
        &self.parts.limiter
    }

    /// The resource table, with the state of type `T` a capability keeps
    /// for this instance (made by `first`, given the plugin's name, if it
    /// has none): what that capability's host functions work on.
    pub fn table_and_state<T: InstanceState>(
        &mut self,
        first: impl FnOnce(&Arc<str>) -> T,
    ) -> (&mut ResourceTable, &mut T) {
        let Parts {
            plugin,
            table,
            states,
            ..
        } = &mut self.parts;
        (table, find_or_add(states, || first(plugin)))
    }

    /// The last line the call wrote to stderr, to name in a fault.
    pub fn last_stderr_line(&self) -> Option<String> {
        self.parts.stderr.last_line()
    }

    /// Ends a call that answered, so the next call on the instance starts
    /// with whole CPU and output budgets; returns the CPU time it was
    /// charged.
    pub fn end_call(&mut self) -> std::time::Duration {
        self.parts.stdout.end_call();
        self.parts.stderr.end_call();
        self.parts.limiter.end_call()
    }

    /// How many host resources the instance holds between two calls, or
    /// `None` if one of them may change meaning while it waits (see the
    /// module's comment).
    pub fn resources_between_calls(&mut self) -> Option<usize> {
        let mut count = 0;
        let mut streams = 0;
        let Parts {
            table,
            states,
            streams: live,
            ..
        } = &mut self.parts;
        for resource in table.iter_mut() {
            count += 1;
            if resource.is::<DynInputStream>() || resource.is::<DynOutputStream>() {
                streams += 1;
            } else if !resource.is::<DynPollable>() {
                let resource: &dyn Any = resource;
                if !states.iter().any(|state| state.may_keep(resource)) {
                    return None;
                }
            }
        }
        // Every stream is a standard one: none reads or writes a file.
        (streams == live.count()).then_some(count)
    }
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.parts.table,
        }
    }
}
