//! `overtime simulate`'s flags, and their validation into settings.

use crate::clock::{TimeScale, parse_duration};
use crate::error::SimulateError;
use crate::gateway::nginx::find_nginx;
use crate::load::Mix;
use crate::scenarios::timeline::TimelineSpec;
use crate::scenarios::{self, Scenario};
use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;

/// Drive a simulated agent platform (agent API, model server with
/// X-LLM-Reason and streaming, tool gateway, memory store, judge) behind
/// nginx, instrumented with OpenTelemetry, with one scenario per root-cause
/// kind.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// The traffic: `mix` (healthy, then an incident), `healthy`, or a
    /// root-cause kind (see --list-scenarios).
    #[arg(long, default_value = "mix", value_name = "NAME")]
    pub scenario: String,
    /// The incident `mix` injects (a root-cause kind).
    #[arg(long, default_value = "llm_prefill_slow", value_name = "KIND")]
    pub incident: String,
    /// When `mix` injects its incident (real time: 20s, 1m).
    #[arg(
        long = "incident-after",
        default_value = "20s",
        value_name = "DURATION"
    )]
    pub incident_after: String,
    /// Requests per second (real time); a burst counts each request.
    #[arg(long, default_value_t = 4.0, value_name = "N")]
    pub rate: f64,
    /// How long to send requests (real time; default 60s, a ramp or
    /// `healthy_noisy`: its whole simulated length); `0`: until Ctrl-C.
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Stop after this many requests (0: no limit).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub requests: u64,
    /// Requests in flight at most (default: what the scenario needs; with
    /// `mix`, the healthy traffic's cap: the incident keeps its own).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Divide every delay, timeout and budget by this (100: the 60 s
    /// gateway timeout takes 0.6 s); ratios, and so diagnoses, are kept.
    #[arg(long = "time-scale", default_value_t = 10.0, value_name = "F")]
    pub time_scale: f64,
    /// OTLP/HTTP endpoint the services export their spans to.
    #[arg(
        long = "otlp-endpoint",
        default_value = "http://127.0.0.1:4318",
        value_name = "URL"
    )]
    pub otlp_endpoint: String,
    /// Do not export spans over OTLP.
    #[arg(long = "no-otlp")]
    pub no_otlp: bool,
    /// Also write the spans as OTLP JSON lines (the Collector file
    /// exporter's format; `overtime diagnose --otlp-json`).
    #[arg(long = "spans-out", value_name = "FILE")]
    pub spans_out: Option<PathBuf>,
    /// The gateway's access log, in the `overtime` log_format.
    #[arg(
        long = "access-log",
        default_value = "overtime-simulate.access.log",
        value_name = "FILE"
    )]
    pub access_log: PathBuf,
    /// Use the built-in gateway even if nginx is installed.
    #[arg(long = "no-nginx")]
    pub no_nginx: bool,
    /// The nginx binary (default: `nginx` on PATH, else /usr/sbin/nginx).
    #[arg(long, value_name = "FILE")]
    pub nginx: Option<PathBuf>,
    /// The gateway's port on 127.0.0.1 (0: any free port).
    #[arg(long = "gateway-port", default_value_t = 0, value_name = "PORT")]
    pub gateway_port: u16,
    /// Seeds the request mix, trace ids and request ids (and a ramp's
    /// arrival times and knobs: a seeded run asks for the same requests).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seed: u64,
    /// Ramps and `healthy_noisy`: requests per simulated minute at the
    /// start (default 30; the ramp grows it 1.6x). Replaces --rate.
    #[arg(long = "sim-rate", value_name = "N")]
    pub sim_rate: Option<f64>,
    /// Ramps: healthy simulated time before the ramp (default 10m).
    #[arg(long, value_name = "DURATION")]
    pub warmup: Option<String>,
    /// Ramps: simulated time from healthy to full severity (default 30m).
    #[arg(long, value_name = "DURATION")]
    pub ramp: Option<String>,
    /// Ramps: simulated time at full severity after the ramp (default 5m).
    #[arg(long, value_name = "DURATION")]
    pub hold: Option<String>,
    /// Write the ground truth: one JSON line per request (trace id,
    /// expected root cause and component, the outcome the client saw).
    #[arg(long, value_name = "FILE")]
    pub truth: Option<PathBuf>,
    /// Write the model server's metrics as Prometheus scrapes one after
    /// another, each sample with its time (what `overtime diagnose
    /// --metrics` reads), every 15 simulated seconds: vLLM's
    /// `num_requests_waiting` and `num_requests_running` per model. The
    /// same answer is served live on the model server's metrics port.
    #[arg(long = "model-metrics", value_name = "FILE")]
    pub model_metrics: Option<PathBuf>,
    /// Run under other timeouts than the routes' (nominal, like every
    /// delay): `llm.<model>.timeout=30s`, `tool.<name>.timeout=20s` (or
    /// `none`), `service.budget=90s`, `gateway.read_timeout=130s`,
    /// `retries=off` — the keys of `overtime whatif`. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Print the scenarios and what each does, and exit.
    #[arg(long = "list-scenarios")]
    pub list_scenarios: bool,
    /// No start banner, no summary.
    #[arg(long, short)]
    pub quiet: bool,
}

#[derive(Debug, Parser)]
#[command(name = "simulate")]
struct Wrapper {
    #[command(flatten)]
    args: SimulateArgs,
}

impl SimulateArgs {
    /// Parses flags as the command line would (no program name).
    ///
    /// ```
    /// use overtime_simulate::SimulateArgs;
    /// let a = SimulateArgs::from_flags(["--scenario", "healthy", "--no-nginx"]).unwrap();
    /// assert_eq!(a.scenario, "healthy");
    /// assert!(a.no_nginx);
    /// assert_eq!(a.time_scale, 10.0);
    /// ```
    pub fn from_flags<I, T>(flags: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let argv = std::iter::once(std::ffi::OsString::from("simulate"))
            .chain(flags.into_iter().map(Into::into));
        Wrapper::try_parse_from(argv).map(|w| w.args)
    }
}

impl Default for SimulateArgs {
    fn default() -> Self {
        SimulateArgs::from_flags(std::iter::empty::<&str>()).expect("the defaults parse")
    }
}

/// The flags, checked.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub scenario: &'static Scenario,
    pub mix: Option<Mix>,
    pub scale: TimeScale,
    pub rate: f64,
    pub duration: Option<Duration>,
    pub max_requests: Option<u64>,
    pub concurrency: usize,
    pub otlp: Option<String>,
    /// The nginx binary to run; `None`: the built-in gateway.
    pub nginx: Option<PathBuf>,
    /// nginx was wanted but is not installed.
    pub nginx_missing: bool,
    /// `--set` timeouts.
    pub overrides: crate::overrides::Overrides,
    /// A scenario over simulated time: its phases and start rate.
    pub timeline: Option<TimelineSpec>,
}

fn usage(msg: String) -> SimulateError {
    SimulateError::Usage(msg)
}

fn names() -> String {
    let mut n: Vec<&str> = scenarios::all()
        .iter()
        .chain(scenarios::timelines())
        .map(|s| s.name)
        .collect();
    n.insert(0, "mix");
    n.join(", ")
}

impl Settings {
    pub fn from_args(a: &SimulateArgs) -> Result<Settings, SimulateError> {
        let scale = TimeScale::new(a.time_scale).map_err(usage)?;
        if !(a.rate.is_finite() && a.rate > 0.0 && a.rate <= 10_000.0) {
            return Err(usage(format!(
                "--rate must be > 0 and <= 10000, got {}",
                a.rate
            )));
        }
        let duration = match &a.duration {
            Some(d) => Some(parse_duration(d).map_err(|e| usage(format!("--duration: {e}")))?),
            None => None,
        };
        let (scenario, mix) = if a.scenario == "mix" {
            let incident = scenarios::find(&a.incident)
                .filter(|s| s.kind.is_some())
                .ok_or_else(|| {
                    usage(format!(
                        "--incident {:?}: not a root-cause kind (one of: {})",
                        a.incident,
                        names().trim_start_matches("mix, healthy, ")
                    ))
                })?;
            let after = parse_duration(&a.incident_after)
                .map_err(|e| usage(format!("--incident-after: {e}")))?;
            (incident, Some(Mix { incident, after }))
        } else {
            let s = scenarios::find(&a.scenario).ok_or_else(|| {
                usage(format!(
                    "--scenario {:?}: unknown (one of: {})",
                    a.scenario,
                    names()
                ))
            })?;
            (s, None)
        };
        let timeline = match scenario.timeline.filter(|_| mix.is_none()) {
            Some(t) => Some(timeline_spec(a, t.spec())?),
            None => {
                for (flag, v) in [
                    ("--warmup", &a.warmup),
                    ("--ramp", &a.ramp),
                    ("--hold", &a.hold),
                ] {
                    if v.is_some() {
                        return Err(usage(format!(
                            "{flag} is for a ramp or healthy_noisy, not --scenario {}",
                            a.scenario
                        )));
                    }
                }
                None
            }
        };
        // A timeline runs its whole simulated length unless told otherwise.
        let duration = match (duration, timeline) {
            (Some(d), _) => (!d.is_zero()).then_some(d),
            (None, Some(t)) => Some(scale.real(t.warmup_ms + t.ramp_ms + t.hold_ms)),
            (None, None) => Some(Duration::from_secs(60)),
        };
        let rate = match (a.sim_rate, timeline) {
            (Some(r), _) if !(r.is_finite() && r > 0.0) => {
                return Err(usage(format!("--sim-rate must be > 0, got {r}")));
            }
            (_, Some(t)) => t.rate_per_min / 60.0 * scale.factor(),
            (Some(r), None) => r / 60.0 * scale.factor(),
            (None, None) => a.rate,
        };
        let concurrency = match a.concurrency {
            Some(0) => return Err(usage("--concurrency must be at least 1".into())),
            Some(c) => c,
            None => match mix {
                Some(_) => scenarios::find("healthy").map_or(6, |h| h.concurrency),
                None => scenario.concurrency,
            },
        };
        let otlp = if a.no_otlp {
            None
        } else {
            crate::telemetry::traces_url(&a.otlp_endpoint).map_err(usage)?;
            Some(a.otlp_endpoint.clone())
        };
        let (nginx, nginx_missing) = if a.no_nginx {
            (None, false)
        } else {
            match find_nginx(a.nginx.as_deref()) {
                Some(p) => (Some(p), false),
                None if a.nginx.is_some() => {
                    return Err(usage(format!(
                        "--nginx {}: no such file",
                        a.nginx
                            .as_ref()
                            .map(|p| p.display().to_string())
                            .unwrap_or_default()
                    )));
                }
                None => (None, true),
            }
        };
        let overrides = crate::overrides::Overrides::parse(&a.set).map_err(usage)?;
        Ok(Settings {
            overrides,
            scenario,
            mix,
            scale,
            rate,
            duration,
            max_requests: (a.requests > 0).then_some(a.requests),
            concurrency,
            otlp,
            nginx,
            nginx_missing,
            timeline,
        })
    }
}

/// The phases of a timeline run: its defaults, changed by the flags.
fn timeline_spec(a: &SimulateArgs, mut spec: TimelineSpec) -> Result<TimelineSpec, SimulateError> {
    for (flag, v, slot) in [
        ("--warmup", &a.warmup, &mut spec.warmup_ms),
        ("--ramp", &a.ramp, &mut spec.ramp_ms),
        ("--hold", &a.hold, &mut spec.hold_ms),
    ] {
        if let Some(v) = v {
            let d = parse_duration(v).map_err(|e| usage(format!("{flag}: {e}")))?;
            *slot = d.as_secs_f64() * 1000.0;
        }
    }
    if let Some(r) = a.sim_rate {
        spec.rate_per_min = r;
    }
    if spec.warmup_ms + spec.ramp_ms + spec.hold_ms <= 0.0 {
        return Err(usage(
            "--warmup, --ramp and --hold add up to nothing".into(),
        ));
    }
    Ok(spec)
}

/// `--list-scenarios`: each scenario, the cause its failures get and how.
pub fn scenario_list() -> String {
    let mut out = String::from(
        "mix\n    Healthy traffic, then (after --incident-after) one request in three from --incident.\n",
    );
    for s in scenarios::all().iter().chain(scenarios::timelines()) {
        let cause = match s.kind {
            Some(k) => format!(" -> {k} ({})", s.component),
            None => " -> no failing verdict".into(),
        };
        out.push_str(&format!("{}{cause}\n    {}\n", s.name, s.how));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(flags: &[&str]) -> Result<Settings, SimulateError> {
        let mut f = vec!["--no-nginx"];
        f.extend_from_slice(flags);
        Settings::from_args(&SimulateArgs::from_flags(f).unwrap())
    }

    #[test]
    fn defaults_are_the_demo() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.scenario.name, "llm_prefill_slow");
        let m = s.mix.unwrap();
        assert_eq!(m.after, Duration::from_secs(20));
        assert_eq!(s.concurrency, 6, "healthy's; the incident keeps its own");
        assert_eq!(s.duration, Some(Duration::from_secs(60)));
        assert_eq!(s.otlp.as_deref(), Some("http://127.0.0.1:4318"));
        assert!(s.nginx.is_none());
    }

    #[test]
    fn bad_flags_are_usage_errors_that_say_what_is_wrong() {
        for (flags, says) in [
            (&["--scenario", "chaos"][..], "unknown"),
            (&["--incident", "healthy"][..], "not a root-cause kind"),
            (&["--rate", "0"][..], "--rate"),
            (&["--time-scale", "0"][..], "--time-scale"),
            (&["--duration", "soon"][..], "--duration"),
            (&["--concurrency", "0"][..], "--concurrency"),
            (&["--otlp-endpoint", "grpc://x:4317"][..], "only http"),
            (&["--nginx", "/nonexistent/nginx"][..], ""),
        ] {
            let r = settings(flags);
            if says.is_empty() {
                assert!(r.is_ok(), "--no-nginx wins: {flags:?}");
                continue;
            }
            let e = r.expect_err(&format!("{flags:?}"));
            assert!(e.is_usage(), "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
        let e = Settings::from_args(
            &SimulateArgs::from_flags(["--nginx", "/nonexistent/nginx"]).unwrap(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("no such file"), "{e}");
    }

    #[test]
    fn a_ramp_runs_its_simulated_length_at_its_simulated_rate() {
        let s = settings(&["--scenario", "ramp_dns_retry", "--time-scale", "20"]).unwrap();
        let t = s.timeline.unwrap();
        assert_eq!(
            (t.warmup_ms, t.ramp_ms, t.hold_ms),
            (600_000.0, 1_800_000.0, 300_000.0)
        );
        // 45 simulated minutes at 20x: 135 s; 30 requests a simulated minute: 10 a second.
        assert_eq!(s.duration, Some(Duration::from_secs(135)));
        assert_eq!(s.rate, 10.0);
        let s = settings(&[
            "--scenario",
            "ramp_prefill",
            "--ramp",
            "20m",
            "--warmup",
            "5m",
            "--sim-rate",
            "60",
            "--time-scale",
            "50",
            "--duration",
            "10s",
        ])
        .unwrap();
        let t = s.timeline.unwrap();
        assert_eq!(
            (t.warmup_ms, t.ramp_ms, t.rate_per_min),
            (300_000.0, 1_200_000.0, 60.0)
        );
        assert_eq!(s.duration, Some(Duration::from_secs(10)));
        for (flags, says) in [
            (
                &["--scenario", "healthy", "--ramp", "5m"][..],
                "--ramp is for a ramp",
            ),
            (
                &["--scenario", "ramp_prefill", "--warmup", "soon"][..],
                "--warmup",
            ),
            (
                &["--scenario", "ramp_prefill", "--sim-rate", "0"][..],
                "--sim-rate",
            ),
        ] {
            let e = settings(flags).expect_err(&format!("{flags:?}"));
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn the_list_names_every_scenario() {
        let l = scenario_list();
        for s in scenarios::all().iter().chain(scenarios::timelines()) {
            assert!(l.contains(s.name), "{}", s.name);
        }
        assert!(l.starts_with("mix"));
    }
}
