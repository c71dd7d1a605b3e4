//! `overtime simulate`: a simulated LLM-agent platform for demos and
//! tests. In one process: an agent API whose orchestrator makes LLM, tool
//! and memory calls under per-call timeouts, a budget and retries; a model
//! server that queues on GPU slots, reports `X-LLM-Reason` and streams; a
//! legacy model server; a tool gateway in front of third-party APIs with
//! slow DNS; a memory store; an LLM-as-judge — all instrumented with the
//! OpenTelemetry SDK (OTLP/HTTP to `--otlp-endpoint`, and/or OTLP JSON
//! lines to `--spans-out`), W3C trace context over real HTTP, behind a
//! real nginx (or the built-in gateway) writing the `overtime` access-log
//! format. Each scenario injects one fault and writes, with `--truth`, the
//! root cause (docs/diagnosis.md#root-cause-kinds) its failures must be given.
//!
//! ```no_run
//! use overtime_simulate::{simulate, SimulateArgs};
//! use std::sync::{atomic::AtomicBool, Arc};
//! let args = SimulateArgs::from_flags([
//!     "--scenario", "tool_no_timeout", "--time-scale", "100", "--requests", "12",
//!     "--no-nginx", "--no-otlp", "--spans-out", "spans.jsonl",
//!     "--access-log", "access.log", "--truth", "truth.jsonl",
//! ]).unwrap();
//! let summary = simulate(&args, Arc::new(AtomicBool::new(false))).unwrap();
//! println!("{summary}");
//! ```

#![warn(missing_docs)]

mod agent;
mod args;
mod clock;
mod error;
mod gateway;
mod http;
mod load;
mod model;
mod model_metrics;
mod orchestrator;
mod overrides;
mod platform;
pub mod scenarios;
mod service;
mod steps;
mod telemetry;
mod tools;
mod traced;

pub use args::SimulateArgs;
pub use clock::TimeScale;
pub use error::SimulateError;
pub use gateway::nginx::find_nginx;
pub use load::LoadReport;

use args::scenario_list;

use args::Settings;
use gateway::access::AccessLog;
use gateway::{Gateway, GatewaySpec};
use load::{LoadConfig, Truth};
use model_metrics::ModelMetricsFile;
use platform::Platform;
use scenarios::PlanCtx;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;
use telemetry::{Telemetry, TelemetryConfig};

/// The gateway's connect timeout (nominal ms).
const CONNECT_TIMEOUT_MS: f64 = 20_000.0;

/// What a simulation did.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The `--scenario` that ran.
    pub scenario: String,
    /// `nginx` or `built-in`.
    pub gateway: &'static str,
    /// Where the gateway listened (`http://127.0.0.1:<port>`): the
    /// platform's entry point.
    pub gateway_url: String,
    /// The gateway's read timeout in real milliseconds (what
    /// `overtime diagnose --gateway-timeout` should be told).
    pub read_timeout_ms: f64,
    /// How many times faster than real time the platform ran
    /// (`--time-scale`).
    pub time_scale: f64,
    /// The gateway's access log (the `overtime` format).
    pub access_log: PathBuf,
    /// Lines the built-in gateway wrote (nginx: not counted).
    pub access_lines: Option<u64>,
    /// The OTLP JSON lines file (`--spans-out`); `None`: not written.
    pub spans_out: Option<PathBuf>,
    /// The OTLP/HTTP traces URL spans were exported to; `None` with
    /// `--no-otlp`.
    pub otlp_url: Option<String>,
    /// The ground-truth file (`--truth`); `None`: not written.
    pub truth: Option<PathBuf>,
    /// Where the model server's metrics were served
    /// (`http://127.0.0.1:<port>/metrics`).
    pub model_metrics_url: String,
    /// The model server's metrics file (`--model-metrics`); `None`: not
    /// written.
    pub model_metrics: Option<PathBuf>,
    /// What the load generator sent and what came back.
    pub load: LoadReport,
    /// Spans the services ended.
    pub spans_ended: u64,
    /// Of them, written to `spans_out`.
    pub spans_written: u64,
    /// Of them, accepted by the OTLP endpoint.
    pub spans_exported: u64,
    /// Spans that could not be written or exported.
    pub spans_lost: u64,
    /// The last span write or export error; `None`: there was none.
    pub last_error: Option<String>,
    /// Notes for the operator (nginx missing, requests still running).
    pub notes: Vec<String>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let outcomes: Vec<String> = self
            .load
            .outcomes
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        writeln!(
            f,
            "overtime simulate: {} requests of `{}` in {:.1} s: {}",
            self.load.sent,
            self.scenario,
            self.load.elapsed.as_secs_f64(),
            if outcomes.is_empty() {
                "none".into()
            } else {
                outcomes.join(", ")
            }
        )?;
        writeln!(
            f,
            "  gateway: {} on {} (read timeout {:.0} ms = 60 s / time scale {}), access log {}",
            self.gateway,
            self.gateway_url,
            self.read_timeout_ms,
            self.time_scale,
            self.access_log.display()
        )?;
        let mut spans = format!("  spans: {} ended", self.spans_ended);
        if let Some(p) = &self.spans_out {
            spans += &format!(", {} written to {}", self.spans_written, p.display());
        }
        if let Some(u) = &self.otlp_url {
            spans += &format!(", {} exported to {u}", self.spans_exported);
        }
        if self.spans_lost > 0 {
            spans += &format!(", {} LOST", self.spans_lost);
        }
        writeln!(f, "{spans}")?;
        if let Some(e) = &self.last_error {
            writeln!(f, "  last export error: {e}")?;
        }
        if let Some(t) = &self.truth {
            writeln!(f, "  ground truth: {}", t.display())?;
        }
        write!(f, "  model server metrics: {}", self.model_metrics_url)?;
        match &self.model_metrics {
            Some(p) => writeln!(f, ", every 15 simulated s in {}", p.display())?,
            None => writeln!(f)?,
        }
        if self.load.unresolved > 0 {
            writeln!(
                f,
                "  {} requests reached the agent but their trace id is unknown",
                self.load.unresolved
            )?;
        }
        for n in &self.notes {
            writeln!(f, "  note: {n}")?;
        }
        Ok(())
    }
}

/// The CLI entry: `--list-scenarios`, or a simulation with a banner, a
/// summary on stderr, and Ctrl-C to stop early.
pub fn run(args: SimulateArgs) -> Result<(), SimulateError> {
    if args.list_scenarios {
        print!("{}", scenario_list());
        return Ok(());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let summary = simulate_inner(&args, stop, true)?;
    if !args.quiet {
        eprint!("{summary}");
    }
    Ok(())
}

/// Runs a simulation to its end (`--duration`, `--requests`, or `stop`
/// set), stops every server and flushes every span.
pub fn simulate(args: &SimulateArgs, stop: Arc<AtomicBool>) -> Result<Summary, SimulateError> {
    simulate_inner(args, stop, false)
}

/// A simulation on a background thread (for `overtime serve`'s demo).
#[derive(Debug)]
pub struct Simulation {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Result<Summary, SimulateError>>,
}

impl Simulation {
    /// Starts `args` in the background; errors come back from
    /// [`Simulation::join`].
    pub fn start(args: SimulateArgs) -> Simulation {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("overtime-simulate".into())
            .spawn(move || simulate(&args, s))
            .expect("spawning the simulation thread");
        Simulation { stop, thread }
    }

    /// Asks it to stop sending; requests in flight finish.
    pub fn stop(&self) {
        self.stop.store(true, SeqCst);
    }

    /// True once it has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits for the end.
    pub fn join(self) -> Result<Summary, SimulateError> {
        self.thread.join().unwrap_or_else(|_| {
            Err(SimulateError::Telemetry(
                "the simulation thread panicked".into(),
            ))
        })
    }
}

fn simulate_inner(
    args: &SimulateArgs,
    stop: Arc<AtomicBool>,
    cli: bool,
) -> Result<Summary, SimulateError> {
    let s = Settings::from_args(args)?;
    let scale = s.scale;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .thread_name("overtime-simulate")
        .build()
        .map_err(|e| SimulateError::io("starting the runtime", e))?;
    let tel = Telemetry::new(
        TelemetryConfig {
            otlp_endpoint: s.otlp.clone(),
            spans_out: args.spans_out.clone(),
            seed: args.seed,
        },
        rt.handle().clone(),
    )?;
    // nginx resolves a relative path against its prefix (a temp dir).
    let access_path = std::path::absolute(&args.access_log)
        .map_err(|e| SimulateError::io(format!("resolving {}", args.access_log.display()), e))?;
    let access = Arc::new(AccessLog::create(&access_path)?);
    let truth = match &args.truth {
        Some(p) => Some(Arc::new(Truth::create(p)?)),
        None => None,
    };
    let platform = rt.block_on(Platform::start(&tel, scale, &s.overrides))?;
    let gateway_ms = s
        .overrides
        .gateway_ms
        .unwrap_or(s.scenario.gateway_timeout_ms);
    let read_timeout = scale.real(gateway_ms);
    let spec = GatewaySpec {
        listen_port: args.gateway_port,
        upstream_port: platform.agent_port,
        read_timeout,
        connect_timeout: scale.real(CONNECT_TIMEOUT_MS),
        seed: args.seed,
    };
    let mut notes = Vec::new();
    if s.nginx_missing {
        notes.push(
            "nginx is not installed (apt-get install nginx): the built-in gateway wrote the access log"
                .into(),
        );
    }
    let mut gw = match &s.nginx {
        Some(bin) => Gateway::start_nginx(bin, &spec, &access)?,
        None => rt.block_on(Gateway::start_builtin(&spec, access.clone()))?,
    };
    let scenario_name = match s.mix {
        Some(m) => format!(
            "mix (healthy, then {} after {:?})",
            m.incident.name, m.after
        ),
        None => s.scenario.name.to_string(),
    };
    let gateway_url = format!("http://127.0.0.1:{}", gw.port());
    if cli && !args.quiet {
        tracing::info!(
            "overtime simulate: `{scenario_name}` at {} req/s, time scale {} (gateway read timeout {:.0} ms), {} gateway on {gateway_url}",
            s.rate,
            scale.factor(),
            read_timeout.as_secs_f64() * 1000.0,
            gw.kind(),
        );
        tracing::info!(
            "  access log {}{}{}{}",
            args.access_log.display(),
            tel.otlp_url()
                .map(|u| format!(", spans to {u}"))
                .unwrap_or_default(),
            args.spans_out
                .as_ref()
                .map(|p| format!(", spans file {}", p.display()))
                .unwrap_or_default(),
            match s.duration {
                Some(d) => format!(", for {d:?} (Ctrl-C stops)"),
                None => ", until Ctrl-C".into(),
            }
        );
    }
    if cli {
        let stop = stop.clone();
        rt.spawn(async move {
            // SIGINT (Ctrl-C) or SIGTERM (`kill`, a supervisor, the demo's
            // cleanup): stop gracefully — nginx is stopped and the spans of
            // requests in flight are exported; a second signal quits now
            // (nginx still dies with us: `die_with_parent`).
            let Ok(mut term) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            else {
                return;
            };
            let first = tokio::select! {
                r = tokio::signal::ctrl_c() => r.is_ok(),
                r = term.recv() => r.is_some(),
            };
            if first {
                tracing::info!("overtime simulate: stopping (requests in flight finish; a second Ctrl-C quits now)");
                stop.store(true, SeqCst);
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => std::process::exit(130),
                    _ = term.recv() => std::process::exit(143),
                }
            }
        });
    }
    let load_cfg = LoadConfig {
        scenario: s.scenario,
        mix: s.mix,
        rate: s.rate,
        duration: s.duration,
        max_requests: s.max_requests,
        concurrency: s.concurrency,
        seed: args.seed,
        ctx: PlanCtx { scale },
        gateway_port: gw.port(),
        client_timeout: scale.real(3.0 * gateway_ms) + Duration::from_secs(2),
        idle_wait: scale.real(5.0 * gateway_ms) + Duration::from_secs(2),
        timeline: s.timeline,
    };
    let idle_wait = load_cfg.idle_wait;
    let model_metrics_url = format!("http://127.0.0.1:{}/metrics", platform.model_metrics_port);
    if cli && !args.quiet {
        tracing::info!("  model server metrics (vLLM's names) on {model_metrics_url}");
    }
    let sampler = match &args.model_metrics {
        Some(p) => Some(rt.spawn(model_metrics::write_every(
            ModelMetricsFile::create(p)?,
            platform.model_server.clone(),
            scale,
        ))),
        None => None,
    };
    let (report, idle) = rt.block_on(async {
        let r = load::run(load_cfg, &platform, truth, stop).await;
        // Work the gateway cut goes on; its spans belong in the output.
        let idle = platform.wait_idle(idle_wait).await;
        (r, idle)
    });
    if !idle {
        notes.push(format!(
            "{} requests were still running after {idle_wait:?}; their spans are missing",
            platform.busy()
        ));
    }
    if let Some(t) = sampler {
        t.abort();
    }
    let stopped = gw.stop();
    platform.stop();
    tel.shutdown();
    rt.shutdown_timeout(Duration::from_secs(2));
    stopped?;
    let st = &tel.stats;
    let lost = st.file_failed_spans.load(SeqCst) + st.otlp_failed_spans.load(SeqCst);
    if access.failed.load(SeqCst) > 0 {
        notes.push(format!(
            "{} access-log lines could not be written",
            access.failed.load(SeqCst)
        ));
    }
    if report.truth_failed > 0 {
        notes.push(format!(
            "{} truth lines could not be written",
            report.truth_failed
        ));
    }
    Ok(Summary {
        scenario: scenario_name,
        gateway: gw.kind(),
        gateway_url,
        read_timeout_ms: read_timeout.as_secs_f64() * 1000.0,
        time_scale: scale.factor(),
        access_log: access_path.clone(),
        access_lines: matches!(gw, Gateway::BuiltIn(_)).then(|| access.lines.load(SeqCst)),
        spans_out: args.spans_out.clone(),
        otlp_url: tel.otlp_url().map(str::to_string),
        truth: args.truth.clone(),
        model_metrics_url,
        model_metrics: args.model_metrics.clone(),
        load: report,
        spans_ended: st.spans_ended.load(SeqCst),
        spans_written: st.file_spans.load(SeqCst),
        spans_exported: st.otlp_spans.load(SeqCst),
        spans_lost: lost,
        last_error: st.last_error(),
        notes,
    })
}
