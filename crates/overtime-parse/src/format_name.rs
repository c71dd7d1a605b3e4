//! The name of a record format as users write it — in the config's
//! `[[file]] kind`, `[[kafka.topics]] format`, and anywhere else a format
//! is named: [`FormatName`].
//!
//! Design rules:
//! - One alias set, here ([`FormatName::aliases`]). Every reader (the
//!   file tail, the Kafka source, the CLI through the config) deserializes
//!   a `FormatName`; none matches format strings itself.
//! - Names are read case-insensitively, trimmed, `_` and `-` alike; they
//!   are written back (`Display`, serde) by their canonical name.
//! - A reader that cannot take a format (a tailed file holds lines, so no
//!   OTLP protobuf) refuses it by variant, not by spelling.
//! - A new span format is one variant here and one in
//!   [`SpanFormat`]; [`FormatName::span_format`] is what the readers use,
//!   so they need no change.
//!
//! ```
//! use overtime_parse::record::FormatName;
//! use overtime_parse::spans::SpanFormat;
//! let f: FormatName = "OTLP_Proto".parse().unwrap();
//! assert_eq!((f, f.to_string()), (FormatName::OtlpProto, "otlp-proto".to_string()));
//! assert_eq!(f.span_format(), Some(SpanFormat::OtlpProto));
//! assert_eq!("nginx_line".parse::<FormatName>().unwrap().span_format(), None);
//! let e = "csv".parse::<FormatName>().unwrap_err().to_string();
//! assert_eq!(e, "unknown format `csv`: expected nginx, jsonl, otlp-json or otlp-proto");
//! ```

use crate::spans::SpanFormat;
use std::fmt;
use std::str::FromStr;

/// What a source's records are, by name: nginx access-log lines or one of
/// the span encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FormatName {
    /// nginx access-log lines (`gateway_requests`).
    Nginx,
    /// JSONL span logs, one span per line.
    Jsonl,
    /// OTLP JSON, one `ExportTraceServiceRequest` per line (or message).
    OtlpJson,
    /// OTLP protobuf `ExportTraceServiceRequest`s.
    OtlpProto,
}

impl FormatName {
    /// Every format, in the order errors and docs list them.
    pub const ALL: [FormatName; 4] = [
        FormatName::Nginx,
        FormatName::Jsonl,
        FormatName::OtlpJson,
        FormatName::OtlpProto,
    ];

    /// The canonical name, as written back.
    pub fn as_str(self) -> &'static str {
        self.aliases()[0]
    }

    /// Every spelling read as this format (lower case, with `-`; an `_`
    /// in the input reads as `-`), the canonical name first.
    pub fn aliases(self) -> &'static [&'static str] {
        match self {
            FormatName::Nginx => &["nginx", "nginx-line"],
            FormatName::Jsonl => &["jsonl", "json-lines", "ndjson", "jsonl-span"],
            FormatName::OtlpJson => &["otlp-json", "otlpjson"],
            FormatName::OtlpProto => &["otlp-proto", "otlp", "proto", "protobuf", "otlp-protobuf"],
        }
    }

    /// The span encoding, or `None` for nginx.
    pub fn span_format(self) -> Option<SpanFormat> {
        match self {
            FormatName::Nginx => None,
            FormatName::Jsonl => Some(SpanFormat::Jsonl),
            FormatName::OtlpJson => Some(SpanFormat::OtlpJson),
            FormatName::OtlpProto => Some(SpanFormat::OtlpProto),
        }
    }

    /// One record per line (everything but OTLP protobuf).
    pub fn is_line_based(self) -> bool {
        self != FormatName::OtlpProto
    }

    /// `a, b or c`: the canonical names of `formats`, for an error that
    /// says what a reader takes.
    ///
    /// ```
    /// use overtime_parse::record::FormatName;
    /// assert_eq!(FormatName::list(&[FormatName::Nginx, FormatName::Jsonl]), "nginx or jsonl");
    /// ```
    pub fn list(formats: &[FormatName]) -> String {
        match formats {
            [] => String::new(),
            [one] => one.as_str().to_string(),
            [rest @ .., last] => format!(
                "{} or {}",
                rest.iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                last.as_str()
            ),
        }
    }
}

impl From<SpanFormat> for FormatName {
    fn from(f: SpanFormat) -> Self {
        match f {
            SpanFormat::Jsonl => FormatName::Jsonl,
            SpanFormat::OtlpJson => FormatName::OtlpJson,
            SpanFormat::OtlpProto => FormatName::OtlpProto,
        }
    }
}

/// A format name none of [`FormatName::aliases`] matches.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown format `{0}`: expected {list}", list = FormatName::list(&FormatName::ALL))]
pub struct UnknownFormat(pub String);

impl FromStr for FormatName {
    type Err = UnknownFormat;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let name = s.trim().to_ascii_lowercase().replace('_', "-");
        FormatName::ALL
            .into_iter()
            .find(|f| f.aliases().contains(&name.as_str()))
            .ok_or_else(|| UnknownFormat(s.to_string()))
    }
}

impl fmt::Display for FormatName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for FormatName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for FormatName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alias_in_any_case_and_with_underscores_reads_as_its_format() {
        for f in FormatName::ALL {
            for a in f.aliases() {
                for spelling in [
                    a.to_string(),
                    a.to_ascii_uppercase(),
                    a.replace('-', "_"),
                    format!(" {a} "),
                ] {
                    assert_eq!(spelling.parse::<FormatName>(), Ok(f), "{spelling:?}");
                }
            }
            assert_eq!(f.to_string().parse::<FormatName>(), Ok(f));
        }
    }

    #[test]
    fn no_alias_names_two_formats() {
        let mut all: Vec<&str> = FormatName::ALL
            .iter()
            .flat_map(|f| f.aliases().iter().copied())
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn a_format_is_written_back_by_its_canonical_name() {
        #[derive(serde::Serialize, serde::Deserialize)]
        struct Block {
            format: FormatName,
        }
        let b: Block = serde_json::from_str(r#"{"format": "OTLP"}"#).unwrap();
        assert_eq!(b.format, FormatName::OtlpProto);
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            r#"{"format":"otlp-proto"}"#
        );
        let e = serde_json::from_str::<Block>(r#"{"format": "xml"}"#)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("unknown format `xml`: expected nginx, jsonl"),
            "{e}"
        );
    }

    #[test]
    fn span_formats_and_names_agree() {
        for f in FormatName::ALL {
            if let Some(s) = f.span_format() {
                assert_eq!((FormatName::from(s), s.as_str()), (f, f.as_str()));
            }
            assert_eq!(f.is_line_based(), f != FormatName::OtlpProto);
        }
    }
}
