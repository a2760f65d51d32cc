//! The `resmux` command: serve a folder of plugins over MCP, or try its
//! namespace and inspect plugins from the shell.

mod cli;

use clap::Parser;
use resmux::telemetry::logs;

/// jemalloc: glibc's malloc serialised resmux's threads on its arena locks
/// (a read's allocations are freed on another thread), a fifth of resmux's
/// CPU per stdio read with 32 in flight.
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    let args = cli::Args::parse();
    // Every TLS client (the OTLP exporter's, the OAuth issuer's) uses ring.
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
    // Kept until the end, so that logs and spans are flushed on the way out.
    let default_level = args.command.default_log_level();
    let _telemetry = match logs::init(args.log_level.as_deref(), default_level, args.log_format) {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("resmux: {error:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(resmux::runtime::protocol_workers())
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("resmux: cannot start the async runtime: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let outcome = runtime.block_on(cli::run(args.command));
    // A plugin call stuck in a file operation (a FIFO, a hung mount) holds a
    // thread that cannot be stopped; exit without waiting for it.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("resmux: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
