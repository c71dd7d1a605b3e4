//! The query parameters of the Jaeger API, read as Jaeger's query parser
//! reads them: times in µs since the epoch, durations as Go durations
//! (`1.5s`, `300ms`, `2h45m`, units `ns`, `us`/`µs`, `ms`, `s`, `m`,
//! `h`), `tags` a JSON object of strings and `tag` `key:value`, the
//! errors in its words.
//!
//! ```
//! # use overtime_server::jaeger_go_duration_us as d;
//! assert_eq!(d("1.5s"), Ok(1_500_000));
//! assert_eq!(d("2h45m"), Ok(9_900_000_000));
//! assert!(d("5 seconds").is_err());
//! ```

use super::JaegerError;
use datafusion::prelude::{Expr, col, lit};
use datafusion::scalar::ScalarValue;
use std::collections::BTreeMap;

/// Jaeger's default search range: the last 2 days.
const DEFAULT_LOOKBACK_US: i64 = 2 * 24 * 3600 * 1_000_000;
/// How long before the range a trace searched by its verdict may start
/// and still have a span in the range.
pub(crate) const VERDICT_SLACK_US: i64 = 3600 * 1_000_000;
/// The tags a search can start from the verdicts with.
const VERDICT_TAGS: [&str; 3] = [
    "overtime.root_cause",
    "overtime.component",
    "overtime.outcome",
];

/// The decoded `key=value` pairs of a query string, in order.
pub(crate) fn pairs(raw: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(raw.unwrap_or("").as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// The first value of `name`.
pub(crate) fn first<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn parse_error(name: &str, e: impl std::fmt::Display) -> JaegerError {
    JaegerError::bad(format!("unable to parse param '{name}': {e}"))
}

/// An integer time parameter in µs, if given.
pub(crate) fn micros(q: &[(String, String)], name: &str) -> Result<Option<i64>, JaegerError> {
    match first(q, name).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v.parse::<i64>().map(Some).map_err(|e| parse_error(name, e)),
    }
}

/// A boolean parameter as Go's `strconv.ParseBool` reads it.
pub(crate) fn boolean(q: &[(String, String)], name: &str) -> Result<bool, JaegerError> {
    match first(q, name).filter(|v| !v.is_empty()) {
        None => Ok(false),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some(v) => Err(parse_error(name, format!("invalid boolean {v:?}"))),
    }
}

/// A trace id in hex (up to 32 digits, as Jaeger reads it) as overtime's
/// 32 lowercase digits.
pub(crate) fn trace_id(raw: &str) -> Result<String, JaegerError> {
    let t = raw.trim();
    if t.is_empty() || t.len() > 32 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(JaegerError::bad(format!(
            "cannot parse traceID param: {raw:?} is not a trace id of up to 32 hex digits"
        )));
    }
    Ok(format!("{:0>32}", t.to_ascii_lowercase()))
}

/// A Go duration (`time.ParseDuration`) in µs, rounded down.
pub fn go_duration_us(s: &str) -> Result<i64, String> {
    let bad = || format!("time: invalid duration {s:?}");
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut ns = 0f64;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (num, tail) = rest.split_at(n);
        if num.is_empty() || num == "." {
            return Err(bad());
        }
        let v: f64 = num.parse().map_err(|_| bad())?;
        let u = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(u);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(format!("time: unknown unit {unit:?} in duration {s:?}")),
        };
        ns += v * scale;
        rest = tail;
    }
    let us = (ns / 1e3).floor() as i64;
    Ok(if neg { -us } else { us })
}

/// A search, as Jaeger's `parseTraceQueryParams` reads it.
#[derive(Debug, Clone)]
pub(crate) struct SearchQuery {
    pub service: Option<String>,
    pub operation: Option<String>,
    pub start_us: i64,
    pub end_us: i64,
    pub min_duration_us: Option<i64>,
    pub max_duration_us: Option<i64>,
    pub tags: BTreeMap<String, String>,
    pub limit: usize,
    pub trace_ids: Vec<String>,
}

impl SearchQuery {
    pub(crate) fn parse(raw: Option<&str>, now_us: i64) -> Result<SearchQuery, JaegerError> {
        let q = pairs(raw);
        let text = |name: &str| first(&q, name).filter(|v| !v.is_empty()).map(String::from);
        let end_us = micros(&q, "end")?.unwrap_or(now_us);
        let start_us = micros(&q, "start")?.unwrap_or(now_us - DEFAULT_LOOKBACK_US);
        let mut tags = BTreeMap::new();
        for (_, v) in q.iter().filter(|(k, _)| k == "tag") {
            let Some((key, value)) = v.split_once(':') else {
                return Err(JaegerError::bad(format!(
                    "malformed 'tag' parameter, expecting key:value, received: {v}"
                )));
            };
            tags.insert(key.to_string(), value.to_string());
        }
        for (_, v) in q.iter().filter(|(k, _)| k == "tags") {
            let m: BTreeMap<String, String> = serde_json::from_str(v).map_err(|e| {
                JaegerError::bad(format!(
                    "malformed 'tags' parameter, cannot unmarshal JSON: {e}"
                ))
            })?;
            tags.extend(m);
        }
        let limit = match first(&q, "limit").filter(|v| !v.is_empty()) {
            None => 100,
            Some(v) => v
                .parse::<i32>()
                .map_err(|e| parse_error("limit", e))?
                .max(0) as usize,
        };
        let duration = |name: &str| -> Result<Option<i64>, JaegerError> {
            match first(&q, name).filter(|v| !v.is_empty()) {
                None => Ok(None),
                Some(v) => go_duration_us(v)
                    .map(Some)
                    .map_err(|e| parse_error(name, e)),
            }
        };
        let (min_duration_us, max_duration_us) =
            (duration("minDuration")?, duration("maxDuration")?);
        if let (Some(lo), Some(hi)) = (min_duration_us, max_duration_us)
            && lo != 0
            && hi != 0
            && hi < lo
        {
            return Err(JaegerError::bad(
                "'maxDuration' should be greater than 'minDuration'",
            ));
        }
        let mut trace_ids = Vec::new();
        for (_, v) in q.iter().filter(|(k, _)| k == "traceID") {
            trace_ids.push(
                trace_id(v).map_err(|e| {
                    JaegerError::bad(format!("cannot parse traceID param: {}", e.msg))
                })?,
            );
        }
        boolean(&q, "raw")?;
        Ok(SearchQuery {
            service: text("service"),
            operation: text("operation"),
            start_us,
            end_us,
            min_duration_us: min_duration_us.filter(|d| *d != 0),
            max_duration_us: max_duration_us.filter(|d| *d != 0),
            tags,
            limit: if limit == 0 {
                100
            } else {
                limit.min(super::MAX_LIMIT)
            },
            trace_ids,
        })
    }

    /// The tags that name a verdict's field, with their values.
    pub(crate) fn verdict_tags(&self) -> Vec<(&'static str, &str)> {
        VERDICT_TAGS
            .iter()
            .filter_map(|k| self.tags.get(*k).map(|v| (*k, v.as_str())))
            .collect()
    }

    /// The condition a span must meet, as a filter on `spans`.
    pub(crate) fn span_filter(&self) -> Expr {
        let ts = |us: i64| {
            lit(ScalarValue::TimestampMicrosecond(
                Some(us),
                Some("UTC".into()),
            ))
        };
        let mut f = col("start_time")
            .gt_eq(ts(self.start_us))
            .and(col("start_time").lt_eq(ts(self.end_us)));
        if let Some(s) = &self.service {
            f = f.and(col("service").eq(lit(s.clone())));
        }
        if let Some(o) = &self.operation {
            f = f.and(col("name").eq(lit(o.clone())));
        }
        if let Some(d) = self.min_duration_us {
            f = f.and(col("duration_ms").gt_eq(lit(d as f64 / 1000.0)));
        }
        if let Some(d) = self.max_duration_us {
            f = f.and(col("duration_ms").lt_eq(lit(d as f64 / 1000.0)));
        }
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_reads_as_jaegers_parser_reads_it() {
        let q = SearchQuery::parse(
            Some("service=agent&start=10&end=20&minDuration=1.5s&limit=20&tags=%7B%22error%22%3A%22true%22%7D&tag=a:b:c"),
            1_000,
        )
        .unwrap();
        assert_eq!(q.service.as_deref(), Some("agent"));
        assert_eq!((q.start_us, q.end_us, q.limit), (10, 20, 20));
        assert_eq!(q.min_duration_us, Some(1_500_000));
        assert_eq!(q.tags["error"], "true");
        assert_eq!(q.tags["a"], "b:c", "a tag's value keeps its colons");
        let d = SearchQuery::parse(None, 1_000_000_000_000).unwrap();
        assert_eq!(d.end_us - d.start_us, DEFAULT_LOOKBACK_US);
        assert_eq!(d.limit, 100);
        for (raw, why) in [
            ("start=yesterday", "unable to parse param 'start'"),
            ("minDuration=5", "unable to parse param 'minDuration'"),
            (
                "minDuration=2s&maxDuration=1s",
                "'maxDuration' should be greater",
            ),
            ("tags=%7Bnot", "malformed 'tags' parameter"),
            ("tag=novalue", "malformed 'tag' parameter"),
            ("traceID=zz", "cannot parse traceID param"),
        ] {
            let e = SearchQuery::parse(Some(raw), 0).unwrap_err();
            assert!(e.msg.contains(why), "{raw}: {}", e.msg);
        }
    }

    #[test]
    fn short_hex_trace_ids_are_padded_as_jaeger_reads_them() {
        assert_eq!(trace_id("ABCD").unwrap(), format!("{}abcd", "0".repeat(28)));
        assert!(trace_id(&"1".repeat(33)).is_err());
        assert_eq!(go_duration_us("-300us"), Ok(-300));
        assert_eq!(go_duration_us("1h"), Ok(3_600_000_000));
    }
}
