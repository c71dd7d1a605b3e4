//! The load generator: sends a scenario's requests through the gateway at
//! `--rate`, at most `--concurrency` in flight (with `mix`, the incident's
//! requests have their own cap), bursts when the scenario
//! needs a crowd; records what each client saw and the root cause its
//! failure must get (`--truth`).

use crate::http;
use crate::platform::Platform;
use crate::scenarios::timeline::TimelineSpec;
use crate::scenarios::{self, PlanCtx, Planned, Scenario, Traceparent};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio::time::Instant;

/// User agents the clients rotate through.
const UAS: [&str; 4] = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36",
    "agent-sdk-python/2.3.0",
    "curl/8.5.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_2) Safari/605.1.15",
];

/// `--scenario mix`: healthy traffic, then one request in three from the
/// incident scenario.
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    pub incident: &'static Scenario,
    pub after: Duration,
}

/// What to send.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub scenario: &'static Scenario,
    pub mix: Option<Mix>,
    pub rate: f64,
    pub duration: Option<Duration>,
    pub max_requests: Option<u64>,
    pub concurrency: usize,
    pub seed: u64,
    pub ctx: PlanCtx,
    pub gateway_port: u16,
    /// A client gives up after this long (well past the gateway's timeout).
    pub client_timeout: Duration,
    /// After a burst, how long to wait for the platform to be idle.
    pub idle_wait: Duration,
    /// A scenario over simulated time: its phases and start rate.
    pub timeline: Option<TimelineSpec>,
}

/// One request as the client saw it, and what its failure must be
/// diagnosed as: a `--truth` line.
#[derive(Debug, Clone, Serialize)]
pub struct TruthRecord {
    /// From the client's `traceparent`, else the trace the agent API
    /// started for the request's `X-Request-ID`; `null` if it never
    /// reached the agent.
    pub trace_id: Option<String>,
    /// The gateway's `$request_id` (its `X-Request-ID` answer header).
    pub request_id: Option<String>,
    /// The scenario the request belongs to.
    pub scenario: &'static str,
    /// The agent API route it was sent to.
    pub route: &'static str,
    /// Whether it asked for a streamed answer.
    pub stream: bool,
    /// `sampled`, `none` (joined by request id) or `unsampled` (flags 00).
    pub traceparent: &'static str,
    /// Root-cause kind this request must get if it failed; `null`: healthy.
    pub expected_kind: Option<&'static str>,
    /// The component that verdict must name; `null`: healthy.
    pub expected_component: Option<&'static str>,
    /// Healthy traffic sent alongside a fault.
    pub noise: bool,
    /// `ok`, `gateway_timeout` (504, or a stream the gateway cut),
    /// `service_timeout` (503), `error` (other 5xx), `not_answered`.
    pub outcome: &'static str,
    /// The HTTP status the client got; `null`: no answer.
    pub status: Option<u16>,
    /// When the client sent it (RFC 3339, local time with its offset).
    pub started_at: String,
    /// When it was sent on the simulated clock: nominal ms from the run's
    /// start. A timeline scenario's schedule — the time its request was
    /// planned for, however late a busy machine sent it — else real time
    /// since the start × the time scale.
    pub sim_ms: f64,
    /// What the client waited (real ms).
    pub elapsed_ms: f64,
    /// Why the client got no answer; `null` otherwise.
    pub error: Option<String>,
}

/// The `--truth` file.
#[derive(Debug)]
pub struct Truth {
    w: Mutex<BufWriter<File>>,
}

impl Truth {
    /// Creates (truncates) the file.
    pub fn create(path: &Path) -> Result<Self, crate::SimulateError> {
        let f = File::create(path).map_err(|source| crate::SimulateError::File {
            what: "cannot create the truth file",
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Truth {
            w: Mutex::new(BufWriter::new(f)),
        })
    }

    fn write(&self, r: &TruthRecord) -> std::io::Result<()> {
        let mut w = self.w.lock().unwrap_or_else(|p| p.into_inner());
        serde_json::to_writer(&mut *w, r)?;
        w.write_all(b"\n")?;
        w.flush()
    }
}

/// Totals of a run.
#[derive(Debug, Clone, Default)]
pub struct LoadReport {
    /// Requests sent.
    pub sent: u64,
    /// Outcome → count.
    pub outcomes: BTreeMap<&'static str, u64>,
    /// (scenario, outcome) → count.
    pub by_scenario: BTreeMap<(&'static str, &'static str), u64>,
    /// Requests whose trace id could not be learnt.
    pub unresolved: u64,
    /// Truth lines that could not be written.
    pub truth_failed: u64,
    /// How long the run took (real time).
    pub elapsed: Duration,
}

/// The client's view of one exchange.
struct Seen {
    status: Option<u16>,
    request_id: Option<String>,
    complete: bool,
    error: Option<String>,
}

/// `--seed`-driven ids for `traceparent`.
fn traceparent(
    mode: Traceparent,
    idx: u64,
    rng: &mut fastrand::Rng,
) -> (Option<String>, Option<String>, &'static str) {
    let sampled = match mode {
        Traceparent::Auto if matches!(idx % 5, 0 | 2 | 3) => true,
        Traceparent::Auto => return (None, None, "none"),
        Traceparent::Unsampled => false,
    };
    let tid = format!("{:032x}", rng.u128(1..));
    let sid = format!("{:016x}", rng.u64(1..));
    let flags = if sampled { "01" } else { "00" };
    (
        Some(format!("00-{tid}-{sid}-{flags}")),
        Some(tid),
        if sampled { "sampled" } else { "unsampled" },
    )
}

/// What the client saw, as an outcome (docs/diagnosis.md's words).
pub fn outcome(status: Option<u16>, stream: bool, complete: bool) -> &'static str {
    match status {
        None => "not_answered",
        Some(504) => "gateway_timeout",
        Some(503) => "service_timeout",
        Some(s) if s >= 500 => "error",
        Some(200) if stream && !complete => "gateway_timeout",
        Some(_) => "ok",
    }
}

async fn exchange(port: u16, p: &Planned, tp: Option<&str>, ua: &str) -> Seen {
    let mut seen = Seen {
        status: None,
        request_id: None,
        complete: false,
        error: None,
    };
    let stream = match TcpStream::connect(("127.0.0.1", port)).await {
        Ok(s) => s,
        Err(e) => {
            seen.error = Some(format!("connect to the gateway: {e}"));
            return seen;
        }
    };
    let mut sender = match http::handshake(stream).await {
        Ok(s) => s,
        Err(e) => {
            seen.error = Some(e.to_string());
            return seen;
        }
    };
    let accept = if p.stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    let mut req = Request::builder()
        .method(p.method)
        .uri(p.route)
        .header("host", format!("127.0.0.1:{port}"))
        .header("user-agent", ua)
        .header("accept", accept);
    if let Some(tp) = tp {
        req = req.header("traceparent", tp);
    }
    let body = match &p.body {
        Some(b) => {
            req = req.header("content-type", "application/json");
            Bytes::from(b.to_string())
        }
        None => Bytes::new(),
    };
    let req = match req.body(Full::new(body)) {
        Ok(r) => r,
        Err(e) => {
            seen.error = Some(e.to_string());
            return seen;
        }
    };
    let resp = match sender.send_request(req).await {
        Ok(r) => r,
        Err(e) => {
            seen.error = Some(e.to_string());
            return seen;
        }
    };
    seen.status = Some(resp.status().as_u16());
    seen.request_id = crate::service::header(resp.headers(), "x-request-id");
    let mut body = resp.into_body();
    let mut data = Vec::new();
    let mut cut = false;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Ok(d) = f.into_data()
                    && data.len() < (1 << 20)
                {
                    data.extend_from_slice(&d);
                }
            }
            Err(e) => {
                // A cut stream ends like this.
                seen.error = Some(format!("response cut: {e}"));
                cut = true;
                break;
            }
        }
    }
    seen.complete = if p.stream {
        data.windows(12).any(|w| w == b"data: [DONE]")
    } else {
        !cut
    };
    seen
}

async fn acquire(
    sem: &Arc<Semaphore>,
    stopped: &(impl Fn() -> bool + Sync),
) -> Option<OwnedSemaphorePermit> {
    loop {
        match tokio::time::timeout(Duration::from_millis(50), sem.clone().acquire_owned()).await {
            Ok(Ok(p)) => return Some(p),
            Ok(Err(_)) => return None,
            Err(_) if stopped() => return None,
            Err(_) => {}
        }
    }
}

/// Sends one planned request in the background; its truth line goes to `tx`.
#[allow(clippy::too_many_arguments)]
fn spawn_request(
    cfg: &LoadConfig,
    platform: &Platform,
    tx: &mpsc::UnboundedSender<TruthRecord>,
    sc: &'static Scenario,
    p: Planned,
    idx: u64,
    sim_ms: f64,
    rng: &mut fastrand::Rng,
    permit: OwnedSemaphorePermit,
) -> tokio::task::JoinHandle<()> {
    let (tp, tid, tp_mode) = traceparent(p.traceparent, idx, rng);
    let ua = p.user_agent.unwrap_or(UAS[(idx % 4) as usize]);
    let (tx, registry, port, limit) = (
        tx.clone(),
        platform.registry.clone(),
        cfg.gateway_port,
        cfg.client_timeout,
    );
    tokio::spawn(async move {
        let started = chrono::Local::now();
        let t0 = Instant::now();
        let seen = match tokio::time::timeout(limit, exchange(port, &p, tp.as_deref(), ua)).await {
            Ok(s) => s,
            Err(_) => Seen {
                status: None,
                request_id: None,
                complete: false,
                error: Some(format!("no answer within {limit:?}")),
            },
        };
        // Always take the agent's entry, so the registry stays small.
        let seen_by_agent = seen.request_id.as_deref().and_then(|r| registry.take(r));
        let trace_id = tid.or(seen_by_agent);
        let _ = tx.send(TruthRecord {
            trace_id,
            request_id: seen.request_id,
            scenario: sc.name,
            route: p.route,
            stream: p.stream,
            traceparent: tp_mode,
            expected_kind: p.expect.map(|e| e.0),
            expected_component: p.expect.map(|e| e.1),
            noise: p.noise,
            outcome: outcome(seen.status, p.stream, seen.complete),
            status: seen.status,
            started_at: started.to_rfc3339(),
            sim_ms,
            elapsed_ms: crate::traced::ms(t0.elapsed()),
            error: seen.error,
        });
        drop(permit);
    })
}

/// A scenario over simulated time: each request sent at its scheduled
/// (nominal) time, planned from the seed and its index.
async fn run_timeline(
    cfg: &LoadConfig,
    spec: TimelineSpec,
    platform: &Platform,
    tx: &mpsc::UnboundedSender<TruthRecord>,
    stopped: &(impl Fn() -> bool + Sync),
) -> Vec<tokio::task::JoinHandle<()>> {
    let sc = cfg.scenario;
    let Some(tl) = sc.timeline else {
        return Vec::new();
    };
    let times = tl.schedule(&spec, cfg.seed);
    let sem = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
    let mut rng = fastrand::Rng::with_seed(cfg.seed);
    let start = Instant::now();
    let mut inflight = Vec::new();
    for (i, t) in times.iter().enumerate() {
        if stopped() || cfg.max_requests.is_some_and(|m| i as u64 >= m) {
            break;
        }
        tokio::time::sleep_until(start + cfg.ctx.scale.real(*t)).await;
        if stopped() {
            break;
        }
        let p = tl.plan_at(i, *t, &spec, cfg.seed);
        let Some(permit) = acquire(&sem, stopped).await else {
            break;
        };
        inflight.push(spawn_request(
            cfg, platform, tx, sc, p, i as u64, *t, &mut rng, permit,
        ));
        inflight.retain(|h| !h.is_finished());
    }
    inflight
}

/// Sends until `--duration`, `--requests` or `stop`; then waits for the
/// requests in flight. Truth lines are written as answers come.
pub async fn run(
    cfg: LoadConfig,
    platform: &Platform,
    truth: Option<Arc<Truth>>,
    stop: Arc<AtomicBool>,
) -> LoadReport {
    let start = Instant::now();
    let stopped = || stop.load(SeqCst) || cfg.duration.is_some_and(|d| start.elapsed() >= d);
    let healthy = scenarios::find("healthy").expect("the healthy scenario exists");
    let sem = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
    // `mix`: the incident's requests have their own cap, so healthy
    // traffic neither starves them nor is crowded out.
    let incident_sem = Arc::new(Semaphore::new(
        cfg.mix.map_or(1, |m| m.incident.concurrency.max(1)),
    ));
    let (tx, mut rx) = mpsc::unbounded_channel::<TruthRecord>();
    let writer = tokio::spawn(async move {
        let mut rep = LoadReport::default();
        while let Some(r) = rx.recv().await {
            rep.sent += 1;
            *rep.outcomes.entry(r.outcome).or_default() += 1;
            *rep.by_scenario.entry((r.scenario, r.outcome)).or_default() += 1;
            if r.trace_id.is_none() && r.status.is_some() && r.route.starts_with("/v") {
                rep.unresolved += 1;
            }
            if let Some(t) = &truth
                && t.write(&r).is_err()
            {
                rep.truth_failed += 1;
            }
        }
        rep
    });
    if let (Some(spec), None) = (cfg.timeline, cfg.mix) {
        let inflight = run_timeline(&cfg, spec, platform, &tx, &stopped).await;
        for h in inflight {
            let _ = h.await;
        }
        drop(tx);
        let mut rep = writer.await.unwrap_or_default();
        rep.elapsed = start.elapsed();
        return rep;
    }
    let mut rng = fastrand::Rng::with_seed(cfg.seed);
    let interval = Duration::from_secs_f64(1.0 / cfg.rate);
    let mut next = start;
    let (mut i_main, mut i_healthy, mut wave_no, mut sent) = (0usize, 0usize, 0u64, 0u64);
    let mut inflight = Vec::new();
    'outer: loop {
        if stopped() || cfg.max_requests.is_some_and(|m| sent >= m) {
            break;
        }
        tokio::time::sleep_until(next).await;
        if stopped() {
            break;
        }
        let incident_now = cfg.mix.filter(|m| start.elapsed() >= m.after);
        let (sc, plans): (&'static Scenario, Vec<Planned>) = match (cfg.mix, incident_now) {
            (Some(_), Some(m)) if wave_no % 3 == 0 => (
                m.incident,
                (0..m.incident.burst)
                    .map(|_| {
                        i_main += 1;
                        m.incident.plan(i_main - 1, &cfg.ctx)
                    })
                    .collect(),
            ),
            (Some(_), _) => {
                i_healthy += 1;
                (healthy, vec![healthy.plan(i_healthy - 1, &cfg.ctx)])
            }
            (None, _) => (
                cfg.scenario,
                (0..cfg.scenario.burst)
                    .map(|_| {
                        i_main += 1;
                        cfg.scenario.plan(i_main - 1, &cfg.ctx)
                    })
                    .collect(),
            ),
        };
        wave_no += 1;
        let burst = plans.len() > 1;
        let mut wave = Vec::new();
        for p in plans {
            if cfg.max_requests.is_some_and(|m| sent >= m) {
                break;
            }
            let class = if cfg.mix.is_some() && sc.kind.is_some() {
                &incident_sem
            } else {
                &sem
            };
            let Some(permit) = acquire(class, &stopped).await else {
                break 'outer;
            };
            let idx = sent;
            sent += 1;
            let sim_ms = cfg.ctx.scale.nominal_ms(start.elapsed());
            wave.push(spawn_request(
                &cfg, platform, &tx, sc, p, idx, sim_ms, &mut rng, permit,
            ));
        }
        let n = wave.len() as u32;
        if burst {
            for h in wave {
                let _ = h.await;
            }
            platform.wait_idle(cfg.idle_wait).await;
        } else {
            inflight.extend(wave);
        }
        inflight.retain(|h: &tokio::task::JoinHandle<()>| !h.is_finished());
        next = (next + interval * n.max(1)).max(Instant::now() - interval);
    }
    for h in inflight {
        let _ = h.await;
    }
    drop(tx);
    let mut rep = writer.await.unwrap_or_default();
    rep.elapsed = start.elapsed();
    rep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_what_the_client_saw() {
        assert_eq!(outcome(Some(504), false, false), "gateway_timeout");
        assert_eq!(outcome(Some(503), false, true), "service_timeout");
        assert_eq!(outcome(Some(502), false, true), "error");
        assert_eq!(outcome(Some(200), true, false), "gateway_timeout");
        assert_eq!(outcome(Some(200), true, true), "ok");
        assert_eq!(outcome(Some(404), false, true), "ok");
        assert_eq!(outcome(None, false, false), "not_answered");
    }

    #[test]
    fn three_requests_in_five_carry_a_sampled_traceparent() {
        let mut rng = fastrand::Rng::with_seed(7);
        let modes: Vec<_> = (0..5)
            .map(|i| traceparent(Traceparent::Auto, i, &mut rng).2)
            .collect();
        assert_eq!(modes, ["sampled", "none", "sampled", "sampled", "none"]);
        let (tp, tid, m) = traceparent(Traceparent::Unsampled, 1, &mut rng);
        assert_eq!(m, "unsampled");
        let tp = tp.unwrap();
        assert!(tp.ends_with("-00") && tp.contains(&tid.unwrap()), "{tp}");
    }
}
