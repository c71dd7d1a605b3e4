//! `overtime`: the thin binary. Parses the command line and hands off to
//! the library crates; exit codes 0 ok, 1 failure, 2 usage (docs/interfaces.md).

mod advise_cmd;
mod allocator;
mod cli;
mod diagnose_cmd;
mod inputs;
mod query_cmd;
mod serve_cmd;

use clap::Parser;
use std::process::ExitCode;

/// An argument problem: reported on one line, exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    /// One line: a multi-line message (a TOML parse error with its source
    /// snippet) keeps its text lines, joined, and drops the snippet.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lines: Vec<&str> = self
            .0
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !is_snippet(l))
            .collect();
        f.write_str(&lines.join("; "))
    }
}

impl std::error::Error for UsageError {}

/// A source-snippet line of a parse error: `|`, `2 | listen =`, `|     ^`.
fn is_snippet(line: &str) -> bool {
    line.trim_start_matches(|c: char| c.is_ascii_digit())
        .trim_start()
        .starts_with('|')
}

/// The libraries' `tracing` events (a source that stopped, a file cut
/// short, the address served on) on stderr, one plain line each — the
/// message as written, nothing added — as the collector and the CLI have
/// always printed them. Only overtime's own crates: a dependency's events
/// stay off.
fn log_to_stderr() {
    use tracing_subscriber::layer::{Layer, SubscriberExt};
    use tracing_subscriber::util::SubscriberInitExt;
    let ours =
        tracing_subscriber::filter::Targets::new().with_target("overtime", tracing::Level::INFO);
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .without_time()
        .with_level(false)
        .with_target(false);
    tracing_subscriber::registry()
        .with(lines.with_filter(ours))
        .init();
}

fn main() -> ExitCode {
    log_to_stderr();
    let cli = match cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) if !e.use_stderr() => {
            // --help, --version: clap's own output, exit 0.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line that says what is wrong, then where to look.
            let text = e.to_string();
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("bad arguments");
            let first = first.trim_start_matches("error: ");
            eprintln!("overtime: {first} (see overtime --help)");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        cli::Command::Diagnose(a) => {
            allocator::for_offline();
            diagnose_cmd::run(*a)
        }
        cli::Command::Advise(a) => {
            allocator::for_offline();
            advise_cmd::run_advise(*a)
        }
        cli::Command::Whatif(a) => {
            allocator::for_offline();
            advise_cmd::run_whatif(*a)
        }
        cli::Command::Serve { config, ready_file } => {
            allocator::for_serve();
            serve_cmd::run(config, ready_file)
        }
        cli::Command::Query(a) => query_cmd::run(a),
        cli::Command::Simulate(a) => overtime_simulate::run(*a).map_err(|e| {
            if e.is_usage() {
                anyhow::Error::new(UsageError(e.to_string()))
            } else {
                e.into()
            }
        }),
        cli::Command::Config => {
            print!("{}", overtime_config::DEFAULT_TOML);
            Ok(())
        }
        cli::Command::NginxFormat(a) => nginx_format(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<UsageError>() {
            Some(u) => {
                eprintln!("overtime: {u}");
                ExitCode::from(2)
            }
            None => {
                eprintln!("overtime: error: {e:#}");
                ExitCode::from(1)
            }
        },
    }
}

/// `overtime nginx-format [NAME] [--list]`.
fn nginx_format(a: &cli::NginxFormatArgs) -> anyhow::Result<()> {
    use overtime_parse::nginx::BUILTIN_FORMATS;
    if a.list {
        for b in BUILTIN_FORMATS {
            let aka = if b.aliases.is_empty() {
                String::new()
            } else {
                format!(" (also: {})", b.aliases.join(", "))
            };
            println!("{}{aka}: {}", b.name, b.about);
            println!("    {}", b.directive.replace('\n', "\n    "));
        }
        println!("# use one with --log-format NAME, or print it with: overtime nginx-format NAME");
        return Ok(());
    }
    let Some(b) = BUILTIN_FORMATS
        .iter()
        .find(|b| b.name == a.name || b.aliases.contains(&a.name.as_str()))
    else {
        let names: Vec<&str> = BUILTIN_FORMATS.iter().map(|b| b.name).collect();
        return Err(anyhow::Error::new(UsageError(format!(
            "no built-in log format `{}` (built in: {})",
            a.name,
            names.join(", ")
        ))));
    };
    println!("{}", b.directive);
    if b.name == "overtime" {
        println!("# then, in the server or location that proxies the agent API:");
        println!("#   access_log /var/log/nginx/overtime.log overtime;");
    }
    Ok(())
}
