//! Log output: human-readable lines on stderr by default, JSON lines on request, or a file when
//! containerd launched us as a pre-installed plugin (its stdout and stderr go to /dev/null).
//! The level comes from `TOPOLET_LOG` (tracing-subscriber `EnvFilter` syntax), default `info`.

use std::path::Path;

use tracing_subscriber::EnvFilter;

/// Output format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber. `file`: append to this file instead of stderr.
pub fn init(format: LogFormat, file: Option<&Path>) -> std::io::Result<()> {
    let filter = EnvFilter::try_from_env("TOPOLET_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    let result = match (format, file) {
        (LogFormat::Text, None) => {
            use std::io::IsTerminal;
            builder
                .with_ansi(std::io::stderr().is_terminal())
                .with_writer(std::io::stderr)
                .try_init()
        }
        (LogFormat::Json, None) => builder.json().with_writer(std::io::stderr).try_init(),
        (format, Some(path)) => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?;
            let writer = std::sync::Mutex::new(f);
            match format {
                LogFormat::Text => builder.with_ansi(false).with_writer(writer).try_init(),
                LogFormat::Json => builder.json().with_writer(writer).try_init(),
            }
        }
    };
    // A second init (tests) keeps the first subscriber.
    let _ = result;
    Ok(())
}
