//! The command line (docs/interfaces.md). Exit codes: 0 ok, 1 failure, 2 usage.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "overtime",
    version,
    about = "Where the time budget of every 504 went, and why."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Diagnose offline: nginx logs and span files in, verdicts and incident reports out.
    Diagnose(Box<DiagnoseArgs>),
    /// Timeout advice from the same inputs as `diagnose`: latency per LLM
    /// model and input-token bucket, per tool, per gateway layer (cut calls
    /// censored), a latency law per model, recommended timeouts and the
    /// alignment rule checked top-down.
    #[command(
        mut_arg("json", |a| a.help("Print the advice as one JSON document.")),
        mut_arg("markdown", |a| a.help("Print the advice as Markdown (default: aligned text).")),
        mut_arg("all", |a| a.hide(true)),
        mut_arg("incident_quiet", |a| a.hide(true)),
        mut_arg("threshold_tokens", |a| a.hide(true)),
    )]
    Advise(Box<AdviseArgs>),
    /// Replay every trace of the inputs (as `diagnose` reads them) under
    /// proposed timeouts, budgets and retries: which 504s would finish,
    /// fail fast or fall back, which successes would fail.
    #[command(
        mut_arg("json", |a| a.help("Print the report as one JSON document.")),
        mut_arg("markdown", |a| a.help("Print the report as Markdown (default: aligned text).")),
        mut_arg("all", |a| a.hide(true)),
        mut_arg("incident_quiet", |a| a.hide(true)),
        mut_arg("threshold_tokens", |a| a.hide(true)),
    )]
    Whatif(Box<WhatIfArgs>),
    /// Print the recommended nginx `log_format overtime` directive, another
    /// built-in format by name, or (--list) every built-in format.
    NginxFormat(NginxFormatArgs),
    /// Run the collector: sources, store, live diagnosis and the API.
    ///
    /// A listen address in the config may name port 0 (`127.0.0.1:0`): the
    /// system picks a free port, and the address bound is logged and, with
    /// --ready-file, written for the program that started the collector.
    Serve {
        /// The TOML config (default: the embedded default, see `overtime config`).
        #[arg(long, value_name = "FILE")]
        config: Option<std::path::PathBuf>,
        /// Once every listener is bound and the collector is ready, write
        /// one JSON object to FILE naming each bound address, e.g.
        /// {"api":"127.0.0.1:41234","otlp_http":"127.0.0.1:41235","otlp_grpc":null,"pid":4242}
        /// (null: that listener is off). Written whole (FILE.tmp, then
        /// renamed); an old FILE is removed at start, and FILE again at a
        /// graceful stop.
        #[arg(long = "ready-file", value_name = "FILE")]
        ready_file: Option<std::path::PathBuf>,
    },
    /// Print the embedded default configuration, every option documented.
    Config,
    /// Run read-only SQL over gateway_requests, spans, verdicts, incidents
    /// and rejected — against a data dir or a running server.
    Query(QueryArgs),
    /// Drive a simulated agent platform (agent API, model server, tools,
    /// behind real nginx or a built-in gateway) for demos and tests.
    Simulate(Box<overtime_simulate::SimulateArgs>),
}

#[derive(Debug, Args)]
pub struct NginxFormatArgs {
    /// The built-in format to print (`overtime nginx-format --list` names them).
    #[arg(value_name = "NAME", default_value = "overtime")]
    pub name: String,
    /// List the built-in formats: name, who writes it, and the directive.
    #[arg(long)]
    pub list: bool,
}

/// How `overtime query` prints rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum QueryOutput {
    /// An aligned table for a terminal.
    Table,
    /// One JSON object per row.
    Json,
    /// CSV with a header line.
    Csv,
}

#[derive(Debug, Args)]
pub struct QueryArgs {
    /// The SQL; `-` reads it from stdin.
    #[arg(value_name = "SQL", allow_hyphen_values = true)]
    pub sql: Option<String>,
    /// Read the SQL from a file (e.g. one of queries/*.sql).
    #[arg(long, short = 'f', value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Ask a running collector (e.g. http://127.0.0.1:8080) instead of
    /// opening a data dir.
    #[arg(long, value_name = "URL", conflicts_with = "data_dir")]
    pub server: Option<String>,
    /// The data dir to open (default: the config's store.data_dir).
    #[arg(long = "data-dir", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The TOML config (limits, data dir, token variable, gateway layers).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Environment variable holding the server's bearer token (default:
    /// the config's server.token_env).
    #[arg(long = "token-env", value_name = "VAR")]
    pub token_env: Option<String>,
    /// Output format.
    #[arg(long = "output", short = 'o', value_enum, default_value_t = QueryOutput::Table)]
    pub output: QueryOutput,
}

#[derive(Debug, Args)]
pub struct DiagnoseArgs {
    /// An nginx access log (plain, .gz or .zst), a glob (`'access.log*'`)
    /// or a directory: several files are read in rotation order as one log.
    /// Repeat for several gateway layers, outermost layer first.
    #[arg(long = "nginx-log", value_name = "FILE")]
    pub nginx_log: Vec<PathBuf>,
    /// The log_format of the matching --nginx-log: a built-in name
    /// (`overtime`, `combined`) or the format body as written in nginx.conf.
    /// One format given for several logs applies to all of them.
    #[arg(long = "log-format", value_name = "FORMAT", allow_hyphen_values = true)]
    pub log_format: Vec<String>,
    /// nginx.conf to read the log_format (by --format-name) and the
    /// proxy_read_timeout from.
    #[arg(long = "nginx-conf", value_name = "FILE")]
    pub nginx_conf: Vec<PathBuf>,
    /// Name of the log_format in --nginx-conf, paired with --nginx-log.
    #[arg(long = "format-name", value_name = "NAME")]
    pub format_name: Vec<String>,
    /// Name of the gateway layer of the matching --nginx-log (default: the
    /// file name without `.log`, rotation and `.gz` suffixes).
    #[arg(long = "layer-name", value_name = "NAME")]
    pub layer_name: Vec<String>,
    /// Read timeout of each gateway layer in order (`60s`, `10000ms`);
    /// without it, it is read from --nginx-conf or inferred from the 504s.
    #[arg(long = "gateway-timeout", value_name = "DURATION")]
    pub gateway_timeout: Vec<String>,
    /// JSONL span log (one span per line, docs/inputs.md#spans); a file,
    /// glob or directory, plain, .gz or .zst, like --nginx-log.
    #[arg(long = "spans", value_name = "FILE")]
    pub spans: Vec<PathBuf>,
    /// OTLP JSON lines (one ExportTraceServiceRequest per line).
    #[arg(long = "otlp-json", value_name = "FILE")]
    pub otlp_json: Vec<PathBuf>,
    /// OTLP protobuf: length-delimited ExportTraceServiceRequest messages,
    /// or a single message.
    #[arg(long = "otlp-proto", value_name = "FILE")]
    pub otlp_proto: Vec<PathBuf>,
    /// Model-server metrics (vLLM, SGLang, TGI) over the same time: the
    /// Prometheus API's query_range answer, `promtool tsdb dump`, or the
    /// text format with timestamps (docs/inputs.md, "Model-server
    /// metrics"). Queue depth and KV-cache use go into the incident
    /// reports; vLLM's phase histograms help infer the phase of cut calls.
    #[arg(long = "metrics", value_name = "FILE")]
    pub metrics: Vec<PathBuf>,
    /// Print one JSON document {"verdicts": [...], "incidents": [...]}.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// Print the report for humans (the default).
    #[arg(long)]
    pub markdown: bool,
    /// Input-token threshold for prefill (docs/diagnosis.md#incidents-and-their-reports).
    #[arg(long = "threshold-tokens", value_name = "N", default_value_t = 300)]
    pub threshold_tokens: u32,
    /// Give a verdict for every trace, not only the failed ones.
    #[arg(long)]
    pub all: bool,
    /// An incident closes after this long without a failure.
    #[arg(long = "incident-quiet", value_name = "DURATION", default_value = "5m")]
    pub incident_quiet: String,
    /// The request budget when no header or span gives one.
    #[arg(long = "budget", value_name = "DURATION")]
    pub budget: Option<String>,
    /// Worker threads for parsing, assembly and verdicts (default: all
    /// cores). The output is the same whatever the number.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Memory the run keeps its records in at most (`512M`, `2G`); beyond
    /// it they are spilled to a temp dir. Default: a quarter of the
    /// machine's memory, at most 512M. The output is the same whatever the
    /// limit.
    #[arg(long = "memory-limit", value_name = "SIZE")]
    pub memory_limit: Option<String>,
    /// Where the temp dir for spilled records goes (default: $TMPDIR).
    #[arg(long = "temp-dir", value_name = "DIR")]
    pub temp_dir: Option<PathBuf>,
    /// No progress bar (it is drawn only on a terminal anyway).
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// Read and parse the inputs, count, and stop (the raw parse speed a
    /// diagnosis is measured against; see scripts/bench/diagnose_at_scale.py).
    #[arg(long = "parse-only", hide = true)]
    pub parse_only: bool,
    /// Diagnose even when most lines of a gateway log do not match its
    /// format, the format gives neither $status nor $request_time, or most
    /// records of a span file are rejected (otherwise an error: the format
    /// or the flag is likely wrong).
    #[arg(long = "allow-rejects")]
    pub allow_rejects: bool,
}

#[derive(Debug, Args)]
pub struct AdviseArgs {
    #[command(flatten)]
    pub inputs: DiagnoseArgs,
    /// The share of calls a recommended timeout must cover (0.5–0.9999).
    #[arg(long, value_name = "SHARE", default_value_t = 0.99)]
    pub target: f64,
}

#[derive(Debug, Args)]
pub struct WhatIfArgs {
    #[command(flatten)]
    pub inputs: DiagnoseArgs,
    /// One proposed value, e.g. `llm.deepseek-v4-pro.timeout=45s`,
    /// `llm.deepseek-v4-pro.bucket.gt500.timeout=90s`,
    /// `tool.search_api.timeout=15s`, `service.budget=90s`,
    /// `gateway.edge.read_timeout=120s`, `retries=off`. Repeatable; applied
    /// after --proposal.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// A TOML file of proposed values (the same keys as tables).
    #[arg(long, value_name = "FILE")]
    pub proposal: Option<PathBuf>,
    /// Seeds the draws for calls that were cut (same seed, same report).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Replays with fresh draws; the counts are their mean.
    #[arg(long, value_name = "N", default_value_t = 25)]
    pub draws: usize,
}
