//! Attribute values: OTLP's `AnyValue`, read tolerantly from OTLP JSON
//! (camelCase or snake_case keys, 64-bit integers as strings or numbers)
//! or from plain JSON (JSONL fields), and read back as the types the
//! `spans` columns need.

use super::ids::{decode_base64, encode_hex};
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, KeyValue, KeyValueList, any_value::Value as V,
};
use serde_json::{Map, Value};

/// The first of `names` present (and not null) in a JSON object.
pub fn get<'a>(obj: &'a Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names
        .iter()
        .find_map(|n| obj.get(*n).filter(|v| !v.is_null()))
}

/// Plain JSON → `AnyValue`: strings, booleans, integers (as `intValue` when
/// they fit an `i64`), other numbers, arrays and objects (as `kvlistValue`).
pub fn plain_json_to_any(v: &Value) -> AnyValue {
    let value = match v {
        Value::Null => None,
        Value::Bool(b) => Some(V::BoolValue(*b)),
        Value::Number(n) => Some(match n.as_i64() {
            Some(i) => V::IntValue(i),
            None => V::DoubleValue(n.as_f64().unwrap_or(f64::NAN)),
        }),
        Value::String(s) => Some(V::StringValue(s.clone())),
        Value::Array(a) => Some(V::ArrayValue(ArrayValue {
            values: a.iter().map(plain_json_to_any).collect(),
        })),
        Value::Object(o) => Some(V::KvlistValue(KeyValueList {
            values: o
                .iter()
                .map(|(k, v)| KeyValue {
                    key: k.clone(),
                    value: Some(plain_json_to_any(v)),
                    ..Default::default()
                })
                .collect(),
        })),
    };
    AnyValue { value }
}

/// OTLP JSON `AnyValue` (`{"stringValue": …}`, `{"intValue": "3"}`,
/// `{"arrayValue": {"values": […]}}`, `{"kvlistValue": …}`,
/// `{"bytesValue": base64}`, snake_case too) → `AnyValue`. A value not in
/// that shape is read as plain JSON.
pub fn otlp_json_to_any(v: &Value) -> AnyValue {
    let Value::Object(o) = v else {
        return plain_json_to_any(v);
    };
    let value = if let Some(s) = get(o, &["stringValue", "string_value"]) {
        match s {
            Value::String(s) => V::StringValue(s.clone()),
            other => V::StringValue(other.to_string()),
        }
    } else if let Some(b) = get(o, &["boolValue", "bool_value"]) {
        match b {
            Value::Bool(b) => V::BoolValue(*b),
            Value::String(s) if s.eq_ignore_ascii_case("true") => V::BoolValue(true),
            Value::String(s) if s.eq_ignore_ascii_case("false") => V::BoolValue(false),
            other => V::StringValue(other.to_string()),
        }
    } else if let Some(i) = get(o, &["intValue", "int_value"]) {
        match i {
            Value::Number(n) if n.as_i64().is_some() => V::IntValue(n.as_i64().unwrap_or(0)),
            Value::String(s) => match s.trim().parse::<i64>() {
                Ok(i) => V::IntValue(i),
                Err(_) => V::StringValue(s.clone()),
            },
            other => return plain_json_to_any(other),
        }
    } else if let Some(d) = get(o, &["doubleValue", "double_value"]) {
        match d {
            Value::Number(n) => V::DoubleValue(n.as_f64().unwrap_or(f64::NAN)),
            // OTLP JSON writes NaN/Infinity as strings.
            Value::String(s) => match s.trim().parse::<f64>() {
                Ok(f) => V::DoubleValue(f),
                Err(_) => V::StringValue(s.clone()),
            },
            other => return plain_json_to_any(other),
        }
    } else if let Some(a) = get(o, &["arrayValue", "array_value"]) {
        V::ArrayValue(ArrayValue {
            values: values_of(a).iter().map(otlp_json_to_any).collect(),
        })
    } else if let Some(kv) = get(o, &["kvlistValue", "kvlist_value"]) {
        V::KvlistValue(KeyValueList {
            values: otlp_json_attributes(Some(kv.get("values").unwrap_or(kv))),
        })
    } else if let Some(b) = get(o, &["bytesValue", "bytes_value"]) {
        let s = b.as_str().unwrap_or_default();
        match decode_base64(s) {
            Some(bytes) => V::BytesValue(bytes),
            None => V::StringValue(s.to_string()),
        }
    } else if o.is_empty() {
        return AnyValue { value: None };
    } else {
        return plain_json_to_any(v);
    };
    AnyValue { value: Some(value) }
}

/// `{"values": [...]}` or a bare array.
fn values_of(v: &Value) -> &[Value] {
    match v {
        Value::Array(a) => a,
        Value::Object(o) => o.get("values").and_then(Value::as_array).map_or(&[], |a| a),
        _ => &[],
    }
}

/// OTLP JSON attributes: `[{"key": k, "value": AnyValue}]` (entries without
/// a string key are skipped), or tolerated as a plain `{k: v}` object.
pub fn otlp_json_attributes(v: Option<&Value>) -> Vec<KeyValue> {
    match v {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|kv| {
                let o = kv.as_object()?;
                let key = o.get("key")?.as_str()?.to_string();
                let value = o.get("value").map(otlp_json_to_any);
                Some(KeyValue {
                    key,
                    value,
                    ..Default::default()
                })
            })
            .collect(),
        Some(Value::Object(o)) => o
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.clone(),
                value: Some(otlp_json_to_any(v)),
                ..Default::default()
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// A string value, or the first element of a string array (HTTP header
/// attributes are arrays).
pub fn any_str(v: &AnyValue) -> Option<&str> {
    match v.value.as_ref()? {
        V::StringValue(s) => Some(s),
        V::ArrayValue(a) => a.values.first().and_then(any_str),
        _ => None,
    }
}

/// A string value, or every string element of an array joined by `,`:
/// a captured header may be written as one element per comma-separated
/// item (`["queue_wait=0.01s", "kv_cache_build=3.7s"]`).
pub fn any_joined(v: &AnyValue) -> Option<String> {
    match v.value.as_ref()? {
        V::StringValue(s) => Some(s.clone()),
        V::ArrayValue(a) => {
            let parts: Vec<&str> = a
                .values
                .iter()
                .filter_map(any_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            (!parts.is_empty()).then(|| parts.join(","))
        }
        _ => None,
    }
}

/// A number: int, double, or a numeric string.
pub fn any_f64(v: &AnyValue) -> Option<f64> {
    let f = match v.value.as_ref()? {
        V::IntValue(i) => *i as f64,
        V::DoubleValue(d) => *d,
        V::StringValue(s) => s.trim().parse().ok()?,
        V::ArrayValue(a) if a.values.len() == 1 => any_f64(&a.values[0])?,
        _ => return None,
    };
    f.is_finite().then_some(f)
}

/// An integer: int, an integral double, or an integer string.
pub fn any_i64(v: &AnyValue) -> Option<i64> {
    match v.value.as_ref()? {
        V::IntValue(i) => Some(*i),
        V::StringValue(s) => s.trim().parse().ok(),
        _ => {
            let f = any_f64(v)?;
            (f.fract() == 0.0 && f.abs() < 9.0e15).then_some(f as i64)
        }
    }
}

/// A boolean: bool, `true`/`false`/`yes`/`no`/`1`/`0` strings, 0/1 ints.
pub fn any_bool(v: &AnyValue) -> Option<bool> {
    match v.value.as_ref()? {
        V::BoolValue(b) => Some(*b),
        V::IntValue(0) => Some(false),
        V::IntValue(1) => Some(true),
        V::StringValue(s) => match s.trim().to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" => Some(true),
            "false" | "no" | "0" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// Renders any value as the string kept in the `attributes` map: strings
/// as-is, numbers and booleans as written, arrays and kvlists as JSON,
/// bytes as lowercase hex, an empty value as `""`.
pub fn any_to_string(v: &AnyValue) -> String {
    match &v.value {
        Some(V::StringValue(s)) => s.clone(),
        Some(V::BytesValue(b)) => encode_hex(b),
        None => String::new(),
        Some(_) => match any_to_json(v) {
            Value::String(s) => s,
            other => other.to_string(),
        },
    }
}

/// `AnyValue` → plain JSON (bytes as hex strings).
pub fn any_to_json(v: &AnyValue) -> Value {
    match &v.value {
        None => Value::Null,
        Some(V::StringValue(s)) => Value::String(s.clone()),
        Some(V::BoolValue(b)) => Value::Bool(*b),
        Some(V::IntValue(i)) => Value::from(*i),
        Some(V::DoubleValue(d)) => serde_json::Number::from_f64(*d)
            .map(Value::Number)
            .unwrap_or_else(|| Value::String(d.to_string())),
        Some(V::ArrayValue(a)) => Value::Array(a.values.iter().map(any_to_json).collect()),
        Some(V::KvlistValue(kv)) => Value::Object(
            kv.values
                .iter()
                .map(|e| {
                    let v = e.value.as_ref().map_or(Value::Null, any_to_json);
                    (e.key.clone(), v)
                })
                .collect(),
        ),
        Some(V::BytesValue(b)) => Value::String(encode_hex(b)),
        Some(V::StringValueStrindex(i)) => Value::from(*i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn otlp_json_value_shapes() {
        let arr = otlp_json_to_any(&json!({"arrayValue": {"values": [{"stringValue": "r-1"}]}}));
        assert_eq!(any_str(&arr), Some("r-1"));
        let big = otlp_json_to_any(&json!({"intValue": "9007199254740993"}));
        assert_eq!(any_i64(&big), Some(9_007_199_254_740_993));
        let nan = otlp_json_to_any(&json!({"doubleValue": "NaN"}));
        assert_eq!(any_f64(&nan), None);
        let bytes = otlp_json_to_any(&json!({"bytesValue": "3q2+7w=="}));
        assert_eq!(any_to_string(&bytes), "deadbeef");
        let kv = otlp_json_to_any(&json!({"kvlistValue": {"values": [
            {"key": "a", "value": {"intValue": 1}}, {"key": "b", "value": {"boolValue": true}}
        ]}}));
        assert_eq!(any_to_string(&kv), r#"{"a":1,"b":true}"#);
        assert_eq!(otlp_json_to_any(&json!({})).value, None);
        // Not in OTLP shape: plain JSON.
        assert_eq!(any_str(&otlp_json_to_any(&json!("plain"))), Some("plain"));
        let weird = otlp_json_to_any(&json!({"color": "red"}));
        assert_eq!(any_to_string(&weird), r#"{"color":"red"}"#);
    }

    #[test]
    fn readers_are_tolerant() {
        assert_eq!(any_f64(&plain_json_to_any(&json!("1.5"))), Some(1.5));
        assert_eq!(any_i64(&plain_json_to_any(&json!(3.0))), Some(3));
        assert_eq!(any_i64(&plain_json_to_any(&json!(3.5))), None);
        assert_eq!(any_bool(&plain_json_to_any(&json!("TRUE"))), Some(true));
        assert_eq!(any_bool(&plain_json_to_any(&json!("maybe"))), None);
        assert_eq!(any_str(&plain_json_to_any(&json!(5))), None);
        let attrs = otlp_json_attributes(Some(&json!([
            {"key": "k", "value": {"stringValue": "v"}},
            {"value": {"stringValue": "no key"}},
            "junk"
        ])));
        assert_eq!(attrs.len(), 1);
        assert_eq!(otlp_json_attributes(Some(&json!({"x": 1}))).len(), 1);
    }
}

#[cfg(test)]
mod doc_examples {
    //! What were doc examples before the module became internal.

    #[test]
    fn plain_json_to_any_example() {
        use crate::spans::value::{any_i64, plain_json_to_any};
        assert_eq!(
            any_i64(&plain_json_to_any(&serde_json::json!(412))),
            Some(412)
        );
    }

    #[test]
    fn otlp_json_to_any_example() {
        use crate::spans::value::{any_f64, any_i64, otlp_json_to_any};
        use serde_json::json;
        assert_eq!(
            any_i64(&otlp_json_to_any(&json!({"intValue": "412"}))),
            Some(412)
        );
        assert_eq!(
            any_f64(&otlp_json_to_any(&json!({"double_value": 0.25}))),
            Some(0.25)
        );
    }

    #[test]
    fn any_joined_example() {
        use crate::spans::value::{any_joined, plain_json_to_any};
        let v = plain_json_to_any(&serde_json::json!([
            "queue_wait=0.01s",
            "kv_cache_build=3.7s"
        ]));
        assert_eq!(
            any_joined(&v).as_deref(),
            Some("queue_wait=0.01s,kv_cache_build=3.7s")
        );
    }

    #[test]
    fn any_to_string_example() {
        use crate::spans::value::{any_to_string, plain_json_to_any};
        use serde_json::json;
        assert_eq!(
            any_to_string(&plain_json_to_any(&json!(["a", 1]))),
            r#"["a",1]"#
        );
        assert_eq!(any_to_string(&plain_json_to_any(&json!(0.5))), "0.5");
    }
}
