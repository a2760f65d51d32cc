//! What a plugin's failed call was: the limit it ran into, named with its
//! value (memory, table, CPU time, wall-clock time, handles, stack), or its
//! trap, with the last line it wrote to stderr; and whether it trapped
//! before any of its own code ran, so that it may run again.

use wasmtime::component::ResourceTableError;
use wasmtime::{Store, Trap, WasmBacktrace};

use super::meter::FaultKind;
use crate::grants::Sandbox;
use crate::grants::limits::{Exceeded, Limits};

/// The fault of `plugin`'s call of `operation` that failed with `error` in
/// `store`, under `limits`.
pub(super) fn describe(
    plugin: &str,
    limits: &Limits,
    operation: &str,
    store: &Store<Sandbox>,
    error: &wasmtime::Error,
) -> (FaultKind, String) {
    let table_full = matches!(
        error.downcast_ref::<ResourceTableError>(),
        Some(ResourceTableError::Full)
    );
    let (kind, message) = match store.data().limits_reached().exceeded() {
        Some(Exceeded::Memory) => (
            FaultKind::Memory,
            format!(
                "plugin {} exceeded its memory limit of {} MiB in {operation}",
                plugin, limits.memory_mib
            ),
        ),
        Some(Exceeded::Table) => (
            FaultKind::Table,
            format!(
                "plugin {} exceeded its table limit of {} elements in {operation}",
                plugin, limits.table_elements
            ),
        ),
        Some(Exceeded::Cpu) => (
            FaultKind::Cpu,
            format!(
                "plugin {} exceeded its CPU time limit of {} ms in {operation}",
                plugin, limits.cpu_ms
            ),
        ),
        Some(Exceeded::Time) => (
            FaultKind::Timeout,
            past_time_limit(plugin, limits, operation),
        ),
        None if table_full => (
            FaultKind::Handles,
            format!(
                "plugin {} exceeded its limit of {} handles (open files, sockets, streams, HTTP fields) in {operation}",
                plugin, limits.max_handles
            ),
        ),
        None => match error.downcast_ref::<Trap>().inspect(|_| {
            tracing::debug!(plugin = %plugin, operation, "its trap: {error:?}");
        }) {
            Some(Trap::StackOverflow) => (
                FaultKind::Stack,
                format!(
                    "plugin {} exceeded its stack limit of {} KiB in {operation}",
                    plugin, limits.stack_kib
                ),
            ),
            Some(trap) => (
                FaultKind::Trap,
                format!("plugin {} trapped in {operation}: {trap}", plugin),
            ),
            None => (
                FaultKind::Trap,
                format!("plugin {} failed in {operation}: {error:#}", plugin),
            ),
        },
    };
    let message = match store.data().last_stderr_line() {
        Some(line) => format!("{message}; its last line on stderr: {line:?}"),
        None => message,
    };
    (kind, message)
}

/// Why `plugin`'s call of `operation` ended at its time limit.
pub(super) fn past_time_limit(plugin: &str, limits: &Limits, operation: &str) -> String {
    format!(
        "plugin {plugin} exceeded its time limit of {} ms in {operation}",
        limits.timeout_ms
    )
}

/// Whether `error` is a trap in the plugin's allocator (`cabi_realloc`)
/// called by the host itself, that is while the host copied a call's
/// arguments in, before any of the plugin's own code ran: the allocator
/// called the host, which the component model forbids there. Go's runtime
/// does so when a garbage collection starts or ends in that allocation (it
/// reads the wall clock and polls its timers; the preview1 adapter pauses
/// only the monotonic clock, wasmtime issue 14318).
pub(super) fn trapped_in_allocator(error: &wasmtime::Error) -> bool {
    matches!(
        error.downcast_ref::<Trap>(),
        Some(Trap::CannotLeaveComponent)
    ) && error
        .downcast_ref::<WasmBacktrace>()
        .and_then(|trace| trace.frames().last())
        .is_some_and(|outermost| outermost.func_name() == Some("cabi_realloc"))
}
