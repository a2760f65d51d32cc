//! The `resmux` command: serve a folder of plugins over MCP, or try its
//! namespace and inspect plugins from the shell.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = cli::Args::parse();
    cli::init_logging(args.log_level.as_deref());
    let runtime = match tokio::runtime::Builder::new_multi_thread()
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
