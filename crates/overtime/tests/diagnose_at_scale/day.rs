//! A synthetic platform day for the at-scale tests: two gateway layers
//! (the edge logs only `$request_id`, the internal layer the traceparent
//! too), spans in JSONL with the request id on the root span, shuffled
//! across the whole file, some sent twice; a tool that hangs for a stretch
//! of the day (504s at the edge's 10 s timeout) and slow prefills on big
//! prompts; requests the gateway saw with no spans at all.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// xorshift64*: deterministic, no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545f4914f6cdd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    pub fn hex(&mut self, digits: usize) -> String {
        let mut s = String::new();
        while s.len() < digits {
            let _ = write!(s, "{:016x}", self.next());
        }
        s.truncate(digits);
        s
    }
}

pub struct Day {
    pub edge: PathBuf,
    pub internal: PathBuf,
    pub spans: PathBuf,
}

fn iso(epoch_s: f64) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp(epoch_s.floor() as i64, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S+00:00")
        .to_string()
}

fn line(out: &mut String, end_s: f64, status: u16, rt: f64, rid: &str, tp: Option<(&str, &str)>) {
    let tp = tp
        .map(|(t, s)| format!("00-{t}-{s}-01"))
        .unwrap_or_else(|| "-".into());
    let _ = writeln!(
        out,
        "10.1.2.3 [{}] \"POST /v1/agent/chat HTTP/1.1\" {status} 512 rt={rt:.3} uct=\"0.001\" \
         uht=\"{rt:.3}\" urt=\"{rt:.3}\" us=\"{status}\" ua=\"10.0.0.7:8080\" rid={rid} tp=\"{tp}\" \
         mw=\"-\" llm=\"-\" llmd=\"-\"",
        iso(end_s)
    );
}

/// Writes `requests` requests into `dir`.
pub fn write_day(dir: &Path, requests: usize, seed: u64) -> Day {
    let mut rng = Rng::new(seed);
    let mut edge = String::new();
    let mut internal = String::new();
    let mut spans: Vec<String> = Vec::new();
    let t0 = 1_764_410_400.0;
    for i in 0..requests {
        let start = t0 + i as f64 * 0.05;
        let trace = rng.hex(32);
        let rid = if rng.chance(0.5) {
            rng.hex(32)
        } else {
            format!("req-{i}")
        };
        // A tool hangs through the middle fifth of the day.
        let hang = (requests * 2 / 5..requests * 3 / 5).contains(&i) && rng.chance(0.3);
        let big_prompt = rng.chance(0.02);
        let no_spans = rng.chance(0.05);
        let llm_ms = if big_prompt {
            11_000.0
        } else {
            300.0 + rng.below(900) as f64
        };
        let tool_ms = if hang {
            30_000.0
        } else {
            50.0 + rng.below(400) as f64
        };
        let total_ms = 20.0 + llm_ms + tool_ms;
        let failed = total_ms > 10_000.0;
        let rt = if failed { 10.002 } else { total_ms / 1000.0 };
        let end = start + rt;
        line(
            &mut edge,
            end,
            if failed { 504 } else { 200 },
            rt,
            &rid,
            None,
        );
        let root = rng.hex(16);
        line(
            &mut internal,
            end,
            if failed { 499 } else { 200 },
            rt - 0.001,
            &rid,
            Some((&trace, &root)),
        );
        if no_spans {
            continue;
        }
        let ms = |t: f64| (t * 1000.0).round() as i64;
        let s0 = ms(start) + 1;
        let mut put = |s: String| spans.push(s);
        put(format!(
            r#"{{"trace_id":"{trace}","span_id":"{root}","service":"agent-api","name":"POST /v1/agent/chat","stage":"service","start_time":{s0},"end_time":{},"status":"{}","request_id":"{rid}"}}"#,
            s0 + total_ms as i64,
            if failed { "cancelled" } else { "ok" }
        ));
        let tokens = if big_prompt {
            4000 + rng.below(2000)
        } else {
            20 + rng.below(400)
        };
        put(format!(
            r#"{{"trace_id":"{trace}","span_id":"{}","parent_span_id":"{root}","service":"agent-api","name":"chat","stage":"llm","start_time":{},"duration_ms":{llm_ms},"model":"qwen-72b","input_tokens":{tokens},"output_tokens":80,"timeout_ms":30000,"status":"ok","llm_reason":"kv_cache_build={:.1}s,decode_loop=0.2s"}}"#,
            rng.hex(16),
            s0 + 5,
            (llm_ms - 200.0).max(50.0) / 1000.0
        ));
        let timeout = if hang {
            "null".to_string()
        } else {
            "15000".into()
        };
        put(format!(
            r#"{{"trace_id":"{trace}","span_id":"{}","parent_span_id":"{root}","service":"agent-api","name":"execute_tool","stage":"tool","tool":"search_api","start_time":{},"duration_ms":{tool_ms},"timeout_ms":{timeout},"status":"ok"}}"#,
            rng.hex(16),
            s0 + 10 + llm_ms as i64
        ));
        put(format!(
            r#"{{"trace_id":"{trace}","span_id":"{}","parent_span_id":"{root}","service":"agent-api","name":"memory","stage":"memory","tool":"redis","start_time":{},"duration_ms":2,"timeout_ms":500,"status":"ok"}}"#,
            rng.hex(16),
            s0 + 2
        ));
    }
    // Exporter retries: some spans twice; then everything out of order.
    let n = spans.len();
    for _ in 0..n / 30 {
        let k = rng.below(n as u64) as usize;
        spans.push(spans[k].clone());
    }
    for i in (1..spans.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        spans.swap(i, j);
    }
    let day = Day {
        edge: dir.join("edge.log"),
        internal: dir.join("internal.log"),
        spans: dir.join("spans.jsonl"),
    };
    std::fs::write(&day.edge, edge).unwrap();
    std::fs::write(&day.internal, internal).unwrap();
    std::fs::write(&day.spans, spans.join("\n") + "\n").unwrap();
    day
}
