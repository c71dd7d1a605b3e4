//! Arrow builders and the row reader of the `spans` table (columns are
//! documented on [`crate::SpanRecord`]'s module).

use crate::arrow_util::*;
use crate::span_links::{append_links, links_builder, read_links};
use crate::{LlmPhases, ModelError, SpanEvent, SpanRecord, SpanStatus, Stage};
use arrow::array::{
    Array, ArrayBuilder, ArrayRef, AsArray, BooleanBuilder, Float64Builder, Int64Builder,
    ListBuilder, MapBuilder, StringBuilder, StructBuilder, TimestampMicrosecondBuilder,
    UInt16Builder, UInt32Builder, UInt64Builder,
};
use arrow::datatypes::{DataType, Field, Fields, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;
use std::sync::{Arc, OnceLock};

/// Arrow builders of `spans`.
pub struct SpanColumns {
    trace_id: StringBuilder,
    span_id: StringBuilder,
    parent_span_id: StringBuilder,
    service: StringBuilder,
    name: StringBuilder,
    stage: StringBuilder,
    kind: StringBuilder,
    start_time: TimestampMicrosecondBuilder,
    end_time: TimestampMicrosecondBuilder,
    duration_ms: Float64Builder,
    status: StringBuilder,
    status_message: StringBuilder,
    http_status: UInt16Builder,
    error_type: StringBuilder,
    timeout_ms: Float64Builder,
    budget_ms: Float64Builder,
    remaining_budget_ms: Float64Builder,
    attempt: UInt32Builder,
    request_id: StringBuilder,
    max_wait_ms: Float64Builder,
    model: StringBuilder,
    input_tokens: Int64Builder,
    output_tokens: Int64Builder,
    max_tokens: Int64Builder,
    temperature: Float64Builder,
    ttft_ms: Float64Builder,
    gpu_load: Float64Builder,
    llm_reason: StringBuilder,
    llm_duration_ms: Float64Builder,
    queue_ms: Float64Builder,
    prefill_ms: Float64Builder,
    decode_ms: Float64Builder,
    io_ms: Float64Builder,
    other_phases: MapBuilder<StringBuilder, Float64Builder>,
    llm_reason_malformed: BooleanBuilder,
    tool: StringBuilder,
    peer: StringBuilder,
    judge_score: Float64Builder,
    fallback: StringBuilder,
    fallback_accepted: BooleanBuilder,
    dns_ms: Float64Builder,
    connect_ms: Float64Builder,
    events: ListBuilder<StructBuilder>,
    source: StringBuilder,
    line: UInt64Builder,
    attributes: MapBuilder<StringBuilder, StringBuilder>,
    scope_name: StringBuilder,
    scope_version: StringBuilder,
    links: ListBuilder<StructBuilder>,
}

fn event_fields() -> Fields {
    Fields::from(vec![
        Field::new("name", DataType::Utf8, true),
        Field::new(
            "time",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("duration_ms", DataType::Float64, true),
    ])
}

impl Default for SpanColumns {
    fn default() -> Self {
        Self::new()
    }
}

impl SpanColumns {
    /// Empty builders, ready for rows.
    pub fn new() -> Self {
        let ts = || TimestampMicrosecondBuilder::new().with_timezone("UTC");
        let s = StringBuilder::new;
        let f = Float64Builder::new;
        let ev = StructBuilder::new(
            event_fields(),
            vec![
                Box::new(StringBuilder::new()),
                Box::new(ts()),
                Box::new(Float64Builder::new()),
            ],
        );
        SpanColumns {
            trace_id: s(),
            span_id: s(),
            parent_span_id: s(),
            service: s(),
            name: s(),
            stage: s(),
            kind: s(),
            start_time: ts(),
            end_time: ts(),
            duration_ms: f(),
            status: s(),
            status_message: s(),
            http_status: UInt16Builder::new(),
            error_type: s(),
            timeout_ms: f(),
            budget_ms: f(),
            remaining_budget_ms: f(),
            attempt: UInt32Builder::new(),
            request_id: s(),
            max_wait_ms: f(),
            model: s(),
            input_tokens: Int64Builder::new(),
            output_tokens: Int64Builder::new(),
            max_tokens: Int64Builder::new(),
            temperature: f(),
            ttft_ms: f(),
            gpu_load: f(),
            llm_reason: s(),
            llm_duration_ms: f(),
            queue_ms: f(),
            prefill_ms: f(),
            decode_ms: f(),
            io_ms: f(),
            other_phases: MapBuilder::new(None, s(), f()),
            llm_reason_malformed: BooleanBuilder::new(),
            tool: s(),
            peer: s(),
            judge_score: f(),
            fallback: s(),
            fallback_accepted: BooleanBuilder::new(),
            dns_ms: f(),
            connect_ms: f(),
            events: ListBuilder::new(ev).with_field(Arc::new(Field::new(
                "item",
                DataType::Struct(event_fields()),
                true,
            ))),
            source: s(),
            line: UInt64Builder::new(),
            attributes: MapBuilder::new(None, s(), s()),
            scope_name: s(),
            scope_version: s(),
            links: links_builder(),
        }
    }

    /// Rows appended so far.
    pub fn len(&self) -> usize {
        self.line.len()
    }

    /// No row appended yet?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends one span as a row.
    pub fn append(&mut self, r: &SpanRecord) {
        self.trace_id.append_value(&r.trace_id);
        self.span_id.append_value(&r.span_id);
        self.parent_span_id
            .append_option(r.parent_span_id.as_deref());
        self.service.append_value(&r.service);
        self.name.append_value(&r.name);
        self.stage.append_value(r.stage.as_str());
        self.kind.append_option(r.kind.as_deref());
        self.start_time.append_value(r.start_us);
        self.end_time.append_value(r.end_us);
        self.duration_ms.append_value(r.duration_ms());
        self.status.append_value(r.status.as_str());
        self.status_message
            .append_option(r.status_message.as_deref());
        self.http_status.append_option(r.http_status);
        self.error_type.append_option(r.error_type.as_deref());
        self.timeout_ms.append_option(r.timeout_ms);
        self.budget_ms.append_option(r.budget_ms);
        self.remaining_budget_ms
            .append_option(r.remaining_budget_ms);
        self.attempt.append_option(r.attempt);
        self.request_id.append_option(r.request_id.as_deref());
        self.max_wait_ms.append_option(r.max_wait_ms);
        self.model.append_option(r.model.as_deref());
        self.input_tokens.append_option(r.input_tokens);
        self.output_tokens.append_option(r.output_tokens);
        self.max_tokens.append_option(r.max_tokens);
        self.temperature.append_option(r.temperature);
        self.ttft_ms.append_option(r.ttft_ms);
        self.gpu_load.append_option(r.gpu_load);
        self.llm_reason.append_option(r.llm_reason.as_deref());
        self.llm_duration_ms.append_option(r.llm_duration_ms);
        self.queue_ms.append_option(r.phases.queue_ms);
        self.prefill_ms.append_option(r.phases.prefill_ms);
        self.decode_ms.append_option(r.phases.decode_ms);
        self.io_ms.append_option(r.phases.io_ms);
        for (k, v) in &r.phases.other {
            self.other_phases.keys().append_value(k);
            self.other_phases.values().append_value(*v);
        }
        self.other_phases.append(true).expect("pairs");
        self.llm_reason_malformed.append_value(r.phases.malformed);
        self.tool.append_option(r.tool.as_deref());
        self.peer.append_option(r.peer.as_deref());
        self.judge_score.append_option(r.judge_score);
        self.fallback.append_option(r.fallback.as_deref());
        self.fallback_accepted.append_option(r.fallback_accepted);
        self.dns_ms.append_option(r.dns_ms);
        self.connect_ms.append_option(r.connect_ms);
        let evs = self.events.values();
        for e in &r.events {
            evs.field_builder::<StringBuilder>(0)
                .expect("name")
                .append_value(&e.name);
            evs.field_builder::<TimestampMicrosecondBuilder>(1)
                .expect("time")
                .append_value(e.time_us);
            evs.field_builder::<Float64Builder>(2)
                .expect("duration")
                .append_option(e.duration_ms);
            evs.append(true);
        }
        self.events.append(true);
        self.source.append_value(&r.source);
        self.line.append_value(r.line);
        for (k, v) in &r.attributes {
            self.attributes.keys().append_value(k);
            self.attributes.values().append_value(v);
        }
        self.attributes.append(true).expect("pairs");
        self.scope_name.append_option(r.scope_name.as_deref());
        self.scope_version.append_option(r.scope_version.as_deref());
        append_links(&mut self.links, &r.links);
    }

    /// The rows appended so far as a `spans` batch; the builders start empty again.
    pub fn finish(&mut self) -> RecordBatch {
        let cols: Vec<(&str, ArrayRef)> = vec![
            ("trace_id", Arc::new(self.trace_id.finish())),
            ("span_id", Arc::new(self.span_id.finish())),
            ("parent_span_id", Arc::new(self.parent_span_id.finish())),
            ("service", Arc::new(self.service.finish())),
            ("name", Arc::new(self.name.finish())),
            ("stage", Arc::new(self.stage.finish())),
            ("kind", Arc::new(self.kind.finish())),
            ("start_time", Arc::new(self.start_time.finish())),
            ("end_time", Arc::new(self.end_time.finish())),
            ("duration_ms", Arc::new(self.duration_ms.finish())),
            ("status", Arc::new(self.status.finish())),
            ("status_message", Arc::new(self.status_message.finish())),
            ("http_status", Arc::new(self.http_status.finish())),
            ("error_type", Arc::new(self.error_type.finish())),
            ("timeout_ms", Arc::new(self.timeout_ms.finish())),
            ("budget_ms", Arc::new(self.budget_ms.finish())),
            (
                "remaining_budget_ms",
                Arc::new(self.remaining_budget_ms.finish()),
            ),
            ("attempt", Arc::new(self.attempt.finish())),
            ("request_id", Arc::new(self.request_id.finish())),
            ("max_wait_ms", Arc::new(self.max_wait_ms.finish())),
            ("model", Arc::new(self.model.finish())),
            ("input_tokens", Arc::new(self.input_tokens.finish())),
            ("output_tokens", Arc::new(self.output_tokens.finish())),
            ("max_tokens", Arc::new(self.max_tokens.finish())),
            ("temperature", Arc::new(self.temperature.finish())),
            ("ttft_ms", Arc::new(self.ttft_ms.finish())),
            ("gpu_load", Arc::new(self.gpu_load.finish())),
            ("llm_reason", Arc::new(self.llm_reason.finish())),
            ("llm_duration_ms", Arc::new(self.llm_duration_ms.finish())),
            ("queue_ms", Arc::new(self.queue_ms.finish())),
            ("prefill_ms", Arc::new(self.prefill_ms.finish())),
            ("decode_ms", Arc::new(self.decode_ms.finish())),
            ("io_ms", Arc::new(self.io_ms.finish())),
            ("other_phases", Arc::new(self.other_phases.finish())),
            (
                "llm_reason_malformed",
                Arc::new(self.llm_reason_malformed.finish()),
            ),
            ("tool", Arc::new(self.tool.finish())),
            ("peer", Arc::new(self.peer.finish())),
            ("judge_score", Arc::new(self.judge_score.finish())),
            ("fallback", Arc::new(self.fallback.finish())),
            (
                "fallback_accepted",
                Arc::new(self.fallback_accepted.finish()),
            ),
            ("dns_ms", Arc::new(self.dns_ms.finish())),
            ("connect_ms", Arc::new(self.connect_ms.finish())),
            ("events", Arc::new(self.events.finish())),
            ("source", Arc::new(self.source.finish())),
            ("line", Arc::new(self.line.finish())),
            ("attributes", Arc::new(self.attributes.finish())),
            ("scope_name", Arc::new(self.scope_name.finish())),
            ("scope_version", Arc::new(self.scope_version.finish())),
            ("links", Arc::new(self.links.finish())),
        ];
        batch(cols)
    }
}

/// The schema of `spans`.
pub fn span_schema() -> SchemaRef {
    static S: OnceLock<SchemaRef> = OnceLock::new();
    S.get_or_init(|| SpanColumns::new().finish().schema())
        .clone()
}

/// Reads the rows of a `spans` batch. The columns added last
/// (`scope_name`, `scope_version`, `links`) may be absent (a batch written
/// before they existed): they read as null / empty.
pub fn span_records(b: &RecordBatch) -> Result<Vec<SpanRecord>, ModelError> {
    let c = |n| col(b, n);
    let (scope_name, scope_version, links) = (
        b.column_by_name("scope_name"),
        b.column_by_name("scope_version"),
        b.column_by_name("links"),
    );
    let names = [
        "trace_id",
        "span_id",
        "parent_span_id",
        "service",
        "name",
        "stage",
        "kind",
        "start_time",
        "end_time",
        "status",
        "status_message",
        "http_status",
        "error_type",
        "timeout_ms",
        "budget_ms",
        "remaining_budget_ms",
        "attempt",
        "request_id",
        "max_wait_ms",
        "model",
        "input_tokens",
        "output_tokens",
        "max_tokens",
        "temperature",
        "ttft_ms",
        "gpu_load",
        "llm_reason",
        "llm_duration_ms",
        "queue_ms",
        "prefill_ms",
        "decode_ms",
        "io_ms",
        "other_phases",
        "llm_reason_malformed",
        "tool",
        "peer",
        "judge_score",
        "fallback",
        "fallback_accepted",
        "dns_ms",
        "connect_ms",
        "events",
        "source",
        "line",
        "attributes",
    ];
    let cols: Vec<&ArrayRef> = names.iter().map(|n| c(n)).collect::<Result<_, _>>()?;
    let [
        tid,
        sid,
        pid,
        svc,
        name,
        stage,
        kind,
        st,
        et,
        status,
        smsg,
        hs,
        et2,
        to,
        bud,
        rem,
        att,
        rid,
        mw,
        model,
        it,
        ot,
        mt,
        temp,
        ttft,
        gpu,
        lr,
        ld,
        q,
        p,
        d,
        io,
        oth,
        mal,
        tool,
        peer,
        js,
        fb,
        fba,
        dns,
        conn,
        evs,
        src,
        line,
        attrs,
    ] = cols[..]
    else {
        unreachable!("names and bindings have the same length")
    };
    let mut out = Vec::with_capacity(b.num_rows());
    for i in 0..b.num_rows() {
        let other = if oth.is_null(i) {
            Vec::new()
        } else {
            let e = oth.as_map().value(i);
            let (k, v) = (e.column(0).clone(), e.column(1).clone());
            (0..e.len())
                .filter_map(|j| Some((opt_str(&k, j)?, opt_f64(&v, j)?)))
                .collect()
        };
        let events = list_struct(evs, i)
            .map(|s| {
                let (n, t, dur) = (
                    s.column(0).clone(),
                    s.column(1).clone(),
                    s.column(2).clone(),
                );
                (0..s.len())
                    .map(|j| SpanEvent {
                        name: opt_str(&n, j).unwrap_or_default(),
                        time_us: opt_i64(&t, j).unwrap_or(0),
                        duration_ms: opt_f64(&dur, j),
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(SpanRecord {
            trace_id: opt_str(tid, i).unwrap_or_default(),
            span_id: opt_str(sid, i).unwrap_or_default(),
            parent_span_id: opt_str(pid, i),
            service: opt_str(svc, i).unwrap_or_default(),
            name: opt_str(name, i).unwrap_or_default(),
            stage: opt_str(stage, i)
                .and_then(|s| Stage::parse(&s))
                .unwrap_or(Stage::Other),
            kind: opt_str(kind, i),
            start_us: opt_i64(st, i).unwrap_or(0),
            end_us: opt_i64(et, i).unwrap_or(0),
            status: opt_str(status, i)
                .and_then(|s| SpanStatus::parse(&s))
                .unwrap_or(SpanStatus::Unset),
            status_message: opt_str(smsg, i),
            http_status: opt_u16(hs, i),
            error_type: opt_str(et2, i),
            timeout_ms: opt_f64(to, i),
            budget_ms: opt_f64(bud, i),
            remaining_budget_ms: opt_f64(rem, i),
            attempt: opt_u32(att, i),
            request_id: opt_str(rid, i),
            max_wait_ms: opt_f64(mw, i),
            model: opt_str(model, i),
            input_tokens: opt_i64(it, i),
            output_tokens: opt_i64(ot, i),
            max_tokens: opt_i64(mt, i),
            temperature: opt_f64(temp, i),
            ttft_ms: opt_f64(ttft, i),
            gpu_load: opt_f64(gpu, i),
            llm_reason: opt_str(lr, i),
            llm_duration_ms: opt_f64(ld, i),
            phases: LlmPhases {
                queue_ms: opt_f64(q, i),
                prefill_ms: opt_f64(p, i),
                decode_ms: opt_f64(d, i),
                io_ms: opt_f64(io, i),
                other,
                malformed: opt_bool(mal, i).unwrap_or(false),
            },
            tool: opt_str(tool, i),
            peer: opt_str(peer, i),
            judge_score: opt_f64(js, i),
            fallback: opt_str(fb, i),
            fallback_accepted: opt_bool(fba, i),
            dns_ms: opt_f64(dns, i),
            connect_ms: opt_f64(conn, i),
            events,
            source: opt_str(src, i).unwrap_or_default(),
            line: opt_u64(line, i).unwrap_or(0),
            attributes: map_pairs(attrs, i),
            scope_name: scope_name.and_then(|a| opt_str(a, i)),
            scope_version: scope_version.and_then(|a| opt_str(a, i)),
            links: read_links(links, i),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SpanEvent, SpanRecord, SpanStatus, Stage};

    #[test]
    fn spans_round_trip_through_arrow() {
        let mut s = SpanRecord::new(
            "0af7651916cd43dd8448eb211c80319c",
            "b7ad6b7169203331",
            "agent",
            "chat",
            1_000,
            31_001_000,
        );
        s.stage = Stage::Llm;
        s.status = SpanStatus::Timeout;
        s.timeout_ms = Some(30000.0);
        s.input_tokens = Some(412);
        s.phases.prefill_ms = Some(3200.0);
        s.phases.other.push(("tokenize".into(), 12.0));
        s.events.push(SpanEvent {
            name: "chunk".into(),
            time_us: 2_000,
            duration_ms: None,
        });
        s.attributes.push(("k".into(), "v".into()));
        s.scope_name = Some("opentelemetry.instrumentation.httpx".into());
        s.scope_version = Some("0.48b0".into());
        s.links.push(crate::SpanLink {
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
            span_id: "00f067aa0ba902b7".into(),
            trace_state: Some("k=v".into()),
            attributes: vec![("retry.of".into(), "1".into())],
        });
        let plain = SpanRecord::new(
            "0af7651916cd43dd8448eb211c80319c",
            "00f067aa0ba902b7",
            "agent",
            "root",
            0,
            40_000_000,
        );
        let mut cols = SpanColumns::new();
        cols.append(&s);
        cols.append(&plain);
        let b = cols.finish();
        assert_eq!(b.schema(), span_schema());
        let back = span_records(&b).unwrap();
        assert_eq!(back, vec![s.clone(), plain.clone()]);
        // A batch from before scope and links were kept still reads.
        let old = b
            .project(&(0..b.num_columns() - 3).collect::<Vec<_>>())
            .unwrap();
        let back = span_records(&old).unwrap();
        assert_eq!(
            (back[0].scope_name.as_deref(), back[0].links.len()),
            (None, 0)
        );
        assert_eq!(back[1], plain);
    }
}
