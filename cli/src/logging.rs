//! Logs and spans through tracing; `RUST_LOG` filters, `--log-format json` for machines.

use tracing_subscriber::EnvFilter;

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber, writing to stderr. Colours only on a terminal (and
/// without `NO_COLOR`): in a pod, stderr is a pipe whose lines `kubectl logs` shows as sent.
pub fn init(format: LogFormat) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use std::io::IsTerminal;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colour);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).try_init(),
    }
}
