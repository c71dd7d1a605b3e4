//! A small builder of traces for the rule tests: times in ms from the
//! request's start, one gateway layer called `edge`.
#![allow(dead_code)]

use overtime_diagnose::{DiagnoseConfig, Diagnosis, LayerConfig, diagnose};
use overtime_model::{GatewayRecord, SpanEvent, SpanRecord, SpanStatus, Stage, Verdict};

pub const T0_MS: i64 = 1_764_410_400_000; // 2025-11-29T10:00:00Z

pub struct Builder {
    pub trace: String,
    pub gateway: Vec<GatewayRecord>,
    pub spans: Vec<SpanRecord>,
    offset_ms: i64,
}

pub fn trace_id(n: u32) -> String {
    format!(
        "{:032x}",
        0x4bf9_2f35_77b3_4da6_a3ce_0000_0000_0000u128 + n as u128
    )
}

impl Builder {
    pub fn new(n: u32) -> Self {
        Builder {
            trace: trace_id(n),
            gateway: vec![],
            spans: vec![],
            offset_ms: n as i64 * 1000,
        }
    }
    /// A request that started `offset_ms` after T0 (for incident windows).
    pub fn at(mut self, offset_ms: i64) -> Self {
        self.offset_ms = offset_ms;
        self
    }
    fn us(&self, ms: f64) -> i64 {
        ((T0_MS + self.offset_ms) as f64 * 1000.0 + ms * 1000.0).round() as i64
    }
    /// The gateway line: status and request time, written at start + rt.
    pub fn gateway(&mut self, status: u16, rt_ms: f64) -> &mut GatewayRecord {
        let g = GatewayRecord {
            source: "edge".into(),
            layer: 0,
            line: self.gateway.len() as u64 + 1,
            time_us: self.us(rt_ms),
            time_precision_us: 1000,
            status: Some(status),
            request_time_ms: Some(rt_ms),
            upstream_connect_ms: vec![Some(1.0)],
            upstream_response_ms: vec![Some(rt_ms)],
            upstream_status: vec![Some(status)],
            upstream_status_raw: Some(status.to_string()),
            upstream_addr: vec![Some("10.0.0.7:8080".into())],
            trace_id: Some(self.trace.clone()),
            request_id: Some(format!("req-{}", &self.trace[24..])),
            ..Default::default()
        };
        self.gateway.push(g);
        self.gateway.last_mut().unwrap()
    }
    pub fn span(
        &mut self,
        id: &str,
        parent: Option<&str>,
        service: &str,
        stage: Stage,
        start_ms: f64,
        end_ms: f64,
    ) -> &mut SpanRecord {
        let mut s = SpanRecord::new(
            &self.trace,
            &format!("{:0>16}", id),
            service,
            id,
            self.us(start_ms),
            self.us(end_ms),
        );
        s.parent_span_id = parent.map(|p| format!("{:0>16}", p));
        s.stage = stage;
        s.status = SpanStatus::Ok;
        self.spans.push(s);
        self.spans.last_mut().unwrap()
    }
    /// The root span `1`, of stage service.
    pub fn root(&mut self, service: &str, start_ms: f64, end_ms: f64) -> &mut SpanRecord {
        self.span("1", None, service, Stage::Service, start_ms, end_ms)
    }
    /// A span `id` under the root span `1`.
    pub fn child(
        &mut self,
        id: &str,
        service: &str,
        stage: Stage,
        start_ms: f64,
        end_ms: f64,
    ) -> &mut SpanRecord {
        self.span(id, Some("1"), service, stage, start_ms, end_ms)
    }
    /// A call `id` of tool `tool` from `service`, under the root span.
    pub fn tool(
        &mut self,
        id: &str,
        service: &str,
        tool: &str,
        start_ms: f64,
        end_ms: f64,
    ) -> &mut SpanRecord {
        let s = self.child(id, service, Stage::Tool, start_ms, end_ms);
        s.tool = Some(tool.into());
        s
    }
    pub fn event(&mut self, span: &str, name: &str, at_ms: f64) {
        let id = format!("{:0>16}", span);
        let t = self.us(at_ms);
        let s = self.spans.iter_mut().find(|s| s.span_id == id).unwrap();
        s.events.push(SpanEvent {
            name: name.into(),
            time_us: t,
            duration_ms: None,
        });
    }
}

/// A 504 whose LLM call (deepseek-v4-pro, 412 input tokens) hit its 30 s
/// timeout under a 30 s budget; `reason` is its X-LLM-Reason, if any.
pub fn llm_timeout_trace(n: u32, reason: Option<&str>) -> Builder {
    let mut b = Builder::new(n);
    b.gateway(504, 60_000.0);
    b.span("1", None, "agent-api", Stage::Service, 1.0, 61_000.0)
        .budget_ms = Some(30_000.0);
    let l = b.span("2", Some("1"), "agent-api", Stage::Llm, 100.0, 30_100.0);
    l.model = Some("deepseek-v4-pro".into());
    l.timeout_ms = Some(30_000.0);
    l.status = SpanStatus::Timeout;
    l.input_tokens = Some(412);
    if let Some(r) = reason {
        l.llm_reason = Some(r.into());
        l.phases = overtime_parse::llm_reason::parse_llm_reason(r);
    }
    b
}

/// A 504 at 10 s: three sequential calls of `search_api` under
/// `orchestrator`, 3.25 s each against a 3 s timeout, ending in `status`;
/// `numbered` gives them `attempt` attributes 0, 1, 2.
pub fn three_attempts(n: u32, status: SpanStatus, numbered: bool) -> Builder {
    let mut b = Builder::new(n);
    b.gateway(504, 10_000.0);
    b.root("orchestrator", 1.0, 12_000.0);
    for a in 0..3u32 {
        let (id, start) = ((a + 2).to_string(), 10.0 + a as f64 * 3_300.0);
        let s = b.tool(&id, "orchestrator", "search_api", start, start + 3_250.0);
        s.attempt = numbered.then_some(a);
        s.timeout_ms = Some(3_000.0);
        s.status = status;
    }
    b
}

pub fn run(builders: Vec<Builder>, cfg: &DiagnoseConfig) -> Diagnosis {
    let mut g = vec![];
    let mut s = vec![];
    for b in builders {
        g.extend(b.gateway);
        s.extend(b.spans);
    }
    diagnose(g, s, cfg)
}

pub fn cfg_with_timeout(ms: f64) -> DiagnoseConfig {
    DiagnoseConfig {
        layers: vec![LayerConfig {
            name: "edge".into(),
            read_timeout_ms: Some(ms),
        }],
        ..Default::default()
    }
}

/// The one verdict of `b` behind a gateway timeout of `timeout_ms`.
pub fn verdict(b: Builder, timeout_ms: f64) -> Verdict {
    only(&run(vec![b], &cfg_with_timeout(timeout_ms))).clone()
}

pub fn only(d: &Diagnosis) -> &Verdict {
    assert_eq!(d.verdicts.len(), 1, "verdicts: {:#?}", d.verdicts);
    &d.verdicts[0]
}

pub fn evidence(v: &Verdict) -> String {
    v.root_cause.evidence.join(" | ")
}

/// Asserts that the evidence of `v` mentions `needle`, showing all of it
/// when not.
#[track_caller]
pub fn assert_evidence(v: &Verdict, needle: &str) {
    let e = evidence(v);
    assert!(e.contains(needle), "{e}");
}
