//! `wharf`: a Kubernetes edge gateway.

mod args;
mod control;
mod controller;
mod gateway;
mod logging;
mod migrate;
mod run;

use clap::Parser;

/// The system allocator, counting the bytes in use for admission by memory
/// (`--memory-watermark`).
#[global_allocator]
static ALLOCATOR: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);

/// Bytes allocated and not freed.
fn memory_in_use() -> Option<u64> {
    u64::try_from(ALLOCATOR.allocated()).ok()
}

fn main() -> std::process::ExitCode {
    let cli = args::Cli::parse();
    if let Err(e) = logging::init(cli.log_format) {
        eprintln!("wharf: cannot set up logging: {e}");
        return std::process::ExitCode::FAILURE;
    }
    // One crypto provider for the whole process.
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    // Relayed buffers reuse the heap's top instead of faulting it in again each time.
    let _ = wharf_sys::keep_heap_top();
    // One worker (TOKIO_WORKER_THREADS=1, or one CPU): a single-threaded scheduler does the
    // same work without cross-thread synchronisation.
    let single = match std::env::var("TOKIO_WORKER_THREADS") {
        Ok(n) => n.trim() == "1",
        Err(_) => std::thread::available_parallelism().map(|n| n.get() == 1).unwrap_or(false),
    };
    let mut builder = if single {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            args::Command::Run(a) => run::standalone(*a).await,
            args::Command::Controller(a) => controller::run(*a).await,
            args::Command::Echo(a) => run::echo(a).await,
            args::Command::Migrate(a) => migrate::run(a).await,
        }
    });
    // What is left once the command returned (a bcrypt check whose client has gone, on a
    // blocking thread) is not waited for.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
