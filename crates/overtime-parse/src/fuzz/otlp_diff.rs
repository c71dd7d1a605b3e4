//! OTLP JSON against OTLP protobuf: a decoded protobuf request, written as
//! OTLP JSON (the protobuf JSON mapping: hex ids, int64 and nanoseconds as
//! strings, bytes as base64, enums as numbers), must map to the same spans
//! and the same rejections (reason and position) as the protobuf bytes.

use crate::spans::{ExportTraceServiceRequest, ParsedSpans, SpanFormat, parse_span_bytes};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value::Value as V};
use serde_json::{Value, json};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `None` when the value has no JSON form (a non-finite double).
fn any(v: &AnyValue) -> Option<Value> {
    Some(match &v.value {
        None => json!({}),
        Some(V::StringValue(s)) => json!({ "stringValue": s }),
        Some(V::BoolValue(b)) => json!({ "boolValue": b }),
        Some(V::IntValue(i)) => json!({ "intValue": i.to_string() }),
        Some(V::DoubleValue(d)) if d.is_finite() => json!({ "doubleValue": d }),
        // Non-finite doubles and profile string-table indexes have no JSON form here.
        Some(V::DoubleValue(_) | V::StringValueStrindex(_)) => return None,
        Some(V::BytesValue(b)) => json!({ "bytesValue": base64(b) }),
        Some(V::ArrayValue(a)) => {
            let values: Option<Vec<Value>> = a.values.iter().map(any).collect();
            json!({ "arrayValue": { "values": values? } })
        }
        Some(V::KvlistValue(kv)) => json!({ "kvlistValue": { "values": attrs(&kv.values)? } }),
    })
}

fn attrs(kvs: &[KeyValue]) -> Option<Vec<Value>> {
    kvs.iter()
        .map(|kv| {
            Some(match &kv.value {
                Some(v) => json!({ "key": kv.key, "value": any(v)? }),
                None => json!({ "key": kv.key }),
            })
        })
        .collect()
}

/// The request as one OTLP JSON line, or `None` when it has no JSON form.
fn to_json(req: &ExportTraceServiceRequest) -> Option<String> {
    let mut rss = Vec::new();
    for rs in &req.resource_spans {
        let mut scopes = Vec::new();
        for ss in &rs.scope_spans {
            let mut spans = Vec::new();
            for s in &ss.spans {
                let events: Option<Vec<Value>> = s
                    .events
                    .iter()
                    .map(|e| {
                        Some(json!({
                            "timeUnixNano": e.time_unix_nano.to_string(),
                            "name": e.name,
                            "attributes": attrs(&e.attributes)?,
                        }))
                    })
                    .collect();
                let mut o = json!({
                    "traceId": hex(&s.trace_id),
                    "spanId": hex(&s.span_id),
                    "parentSpanId": hex(&s.parent_span_id),
                    "name": s.name,
                    "kind": s.kind,
                    "startTimeUnixNano": s.start_time_unix_nano.to_string(),
                    "endTimeUnixNano": s.end_time_unix_nano.to_string(),
                    "attributes": attrs(&s.attributes)?,
                    "events": events?,
                });
                if let Some(st) = &s.status {
                    o["status"] = json!({ "code": st.code, "message": st.message });
                }
                let links: Option<Vec<Value>> = s
                    .links
                    .iter()
                    .map(|l| {
                        Some(json!({
                            "traceId": hex(&l.trace_id),
                            "spanId": hex(&l.span_id),
                            "traceState": l.trace_state,
                            "attributes": attrs(&l.attributes)?,
                        }))
                    })
                    .collect();
                o["links"] = Value::Array(links?);
                spans.push(o);
            }
            let mut scope = json!({ "spans": spans });
            if let Some(sc) = &ss.scope {
                scope["scope"] = json!({ "name": sc.name, "version": sc.version });
            }
            scopes.push(scope);
        }
        let resource = match &rs.resource {
            Some(r) => json!({ "attributes": attrs(&r.attributes)? }),
            None => json!({}),
        };
        rss.push(json!({ "resource": resource, "scopeSpans": scopes }));
    }
    Some(json!({ "resourceSpans": rss }).to_string())
}

/// Asserts the JSON form of `req` maps like its protobuf form did (`proto`,
/// parsed at position 1).
pub(crate) fn check_json_matches_proto(req: &ExportTraceServiceRequest, proto: &ParsedSpans) {
    let Some(line) = to_json(req) else { return };
    let from_json = parse_span_bytes(SpanFormat::OtlpJson, line.as_bytes(), "fuzz");
    let (a, b) = (
        serde_json::to_value(&from_json.spans).expect("spans serialize"),
        serde_json::to_value(&proto.spans).expect("spans serialize"),
    );
    assert!(
        close(&a, &b),
        "OTLP JSON {line}\nmaps to {:?}\nprotobuf to {:?}",
        from_json.spans,
        proto.spans
    );
    let key = |p: &ParsedSpans| -> Vec<(String, String)> {
        let r = p.rejected.iter();
        r.map(|r| (r.reason.clone(), r.position.replace("message", "line")))
            .collect()
    };
    assert_eq!(key(&from_json), key(proto), "OTLP JSON {line}");
}

/// Equal, but numbers (also inside strings, as attributes keep them) may
/// differ in the last bits: serde_json, built without `float_roundtrip`,
/// reads some doubles one ULP off.
fn close(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
            _ => x == y,
        },
        (Value::String(x), Value::String(y)) => {
            x == y
                || match (
                    serde_json::from_str::<Value>(x),
                    serde_json::from_str::<Value>(y),
                ) {
                    (Ok(p), Ok(q)) => close(&p, &q),
                    _ => false,
                }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| close(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, p)| y.get(k).is_some_and(|q| close(p, q)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64_pads() {
        assert_eq!(super::base64(b"\xde\xad\xbe\xef"), "3q2+7w==");
        assert_eq!(super::base64(b"abc"), "YWJj");
        assert_eq!(super::base64(b"ab"), "YWI=");
    }
}
