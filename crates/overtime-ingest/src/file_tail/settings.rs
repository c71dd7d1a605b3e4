//! The `[[file]]` block of overtime's TOML config:
//! [`FileSourceSettings`], read by serde as it is written, and
//! [`FileSourceSettings::build`], which makes the [`FileSourceConfig`] the
//! tail runs with.
//!
//! Design rules:
//! - One TOML type, owned here: `overtime-config` embeds it as it is, so
//!   every key and its documentation are written once, in this file.
//!   Unknown keys are refused (`deny_unknown_fields`).
//! - `kind` is a [`FormatName`] (every spelling it reads, one alias set);
//!   a tailed file holds lines, so OTLP protobuf is refused.
//! - [`FileSourceSettings::validate`] is what is checked when the config
//!   is read (the kind, and that an nginx log names its format); `build`
//!   does the rest at start: it reads `nginx_conf`, compiles the format,
//!   and names the gateway layer.
//! - An nginx log is a gateway layer. Its name defaults to the file's
//!   ([`layer_name_of`]), its read timeout to nginx.conf's
//!   ([`read_timeout_ms`]), exactly as `overtime diagnose` does for
//!   `--nginx-log`; its depth comes from the caller's `layer_index`,
//!   which numbers layers across all sources in config order.

use super::FileSourceConfig;
use overtime_parse::nginx::{FormatError, LogFormat, layer_name_of, read_timeout_ms};
use overtime_parse::record::{FormatName, RecordFormat};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One `[[file]]` block: a file to tail.
///
/// ```toml
/// [[file]]
/// path = "/var/log/nginx/overtime.log"
/// kind = "nginx"              # nginx | jsonl | otlp-json
/// format = "overtime"         # built-in name or the log_format body
/// # nginx_conf = "/etc/nginx/nginx.conf"   # or: the format by name from the conf
/// # format_name = "overtime"
/// layer = "edge"
/// # read_timeout_ms = 60000
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSourceSettings {
    /// The file to tail (it may not exist yet).
    pub path: PathBuf,
    /// `nginx`, `jsonl` or `otlp-json` (or another spelling of them,
    /// [`FormatName::aliases`]).
    pub kind: FormatName,
    /// nginx: a built-in format name or the body.
    #[serde(default)]
    pub format: Option<String>,
    /// nginx: the nginx.conf holding `format_name` (and the read timeout).
    #[serde(default)]
    pub nginx_conf: Option<PathBuf>,
    /// nginx: the `log_format` to take from `nginx_conf`.
    #[serde(default)]
    pub format_name: Option<String>,
    /// nginx: the gateway layer (default: the file name).
    #[serde(default)]
    pub layer: Option<String>,
    /// nginx: this layer's read timeout (default: from nginx_conf, else inferred).
    #[serde(default)]
    pub read_timeout_ms: Option<f64>,
}

/// A `[[file]]` block that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum FileSettingsError {
    /// A `kind` a tailed file cannot hold (OTLP protobuf is not lines).
    #[error(
        "file {}: kind must be {}, not {kind} (a tailed file is read line by line)",
        path.display(),
        FormatName::list(&FileSourceSettings::KINDS)
    )]
    Kind {
        /// The block's `path`.
        path: PathBuf,
        /// The `kind` given.
        kind: FormatName,
    },
    /// An nginx log with neither `format` nor `nginx_conf` + `format_name`.
    #[error(
        "file {}: an nginx log needs `format` (built-in name or body) or `nginx_conf` + `format_name`",
        path.display()
    )]
    NoFormat {
        /// The block's `path`.
        path: PathBuf,
    },
    /// The `nginx_conf` could not be read.
    #[error("reading {}", path.display())]
    ReadConf {
        /// The `nginx_conf` path.
        path: PathBuf,
        /// The read's error.
        #[source]
        source: std::io::Error,
    },
    /// The format given (or found in `nginx_conf`) does not compile.
    #[error(transparent)]
    Format(#[from] FormatError),
}

impl FileSourceSettings {
    /// The kinds a tailed file may hold: the line-based formats.
    pub const KINDS: [FormatName; 3] = [FormatName::Nginx, FormatName::Jsonl, FormatName::OtlpJson];

    /// What is checked when the config is read: the kind, and that an
    /// nginx log says where its format comes from.
    pub fn validate(&self) -> Result<(), FileSettingsError> {
        if !self.kind.is_line_based() {
            return Err(FileSettingsError::Kind {
                path: self.path.clone(),
                kind: self.kind,
            });
        }
        if self.kind == FormatName::Nginx && self.format.is_none() && self.format_name.is_none() {
            return Err(FileSettingsError::NoFormat {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// What the tail runs with. For an nginx log, reads `nginx_conf` (if
    /// any), compiles the format (`format`, a built-in name or a body,
    /// wins over `nginx_conf` + `format_name`), and asks `layer_index` for
    /// the depth of its layer, given the layer's name and read timeout
    /// (`read_timeout_ms`, else nginx.conf's).
    ///
    /// ```
    /// use overtime_ingest::file_tail::FileSourceSettings;
    /// use overtime_parse::record::RecordFormat;
    /// let s: FileSourceSettings = toml::from_str(r#"
    ///     path = "/var/log/nginx/edge.log"
    ///     kind = "nginx"
    ///     format = "overtime"
    ///     read_timeout_ms = 30000
    /// "#).unwrap();
    /// let mut layers = Vec::new();
    /// let cfg = s
    ///     .build(&mut |name, timeout| {
    ///         layers.push((name.to_string(), timeout));
    ///         0
    ///     })
    ///     .unwrap();
    /// assert!(matches!(cfg.format, RecordFormat::Nginx(ref n) if n.layer == "edge" && n.layer_index == 0));
    /// assert_eq!(layers, [("edge".to_string(), Some(30_000.0))]);
    /// assert_eq!(cfg.batch_lines, 8192);
    /// ```
    pub fn build(
        self,
        layer_index: &mut dyn FnMut(&str, Option<f64>) -> u32,
    ) -> Result<FileSourceConfig, FileSettingsError> {
        self.validate()?;
        let format = match self.kind.span_format() {
            Some(spans) => RecordFormat::Spans(spans),
            None => {
                let conf = match &self.nginx_conf {
                    Some(p) => Some(std::fs::read_to_string(p).map_err(|source| {
                        FileSettingsError::ReadConf {
                            path: p.clone(),
                            source,
                        }
                    })?),
                    None => None,
                };
                let Some(format) = LogFormat::resolve(
                    self.format.as_deref(),
                    conf.as_deref(),
                    self.format_name.as_deref(),
                )?
                else {
                    return Err(FileSettingsError::NoFormat {
                        path: self.path.clone(),
                    });
                };
                let layer = self
                    .layer
                    .clone()
                    .unwrap_or_else(|| layer_name_of(&self.path));
                let timeout = self
                    .read_timeout_ms
                    .or_else(|| conf.as_deref().and_then(read_timeout_ms));
                let index = layer_index(&layer, timeout);
                RecordFormat::nginx(format, &layer, index)
            }
        };
        Ok(FileSourceConfig::new(self.path, format))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str) -> FileSourceSettings {
        toml::from_str(text).unwrap()
    }

    fn never(_: &str, _: Option<f64>) -> u32 {
        panic!("not a gateway layer")
    }

    #[test]
    fn defaults() {
        let s = settings("path = \"spans.jsonl\"\nkind = \"jsonl\"\n");
        assert_eq!(
            (
                s.format,
                s.nginx_conf,
                s.format_name,
                s.layer,
                s.read_timeout_ms
            ),
            (None, None, None, None, None)
        );
        let s = settings(
            "path = \"/var/log/nginx/edge.log.1\"\nkind = \"nginx\"\nformat = \"combined\"\n",
        );
        let mut seen = Vec::new();
        let cfg = s
            .build(&mut |l, t| {
                seen.push((l.to_string(), t));
                3
            })
            .unwrap();
        // The layer is named after the file and its timeout left to inference.
        assert_eq!(seen, [("edge".to_string(), None)]);
        assert!(matches!(cfg.format, RecordFormat::Nginx(ref n) if n.layer_index == 3));
        assert_eq!(cfg.path, PathBuf::from("/var/log/nginx/edge.log.1"));
        assert_eq!(
            (cfg.batch_lines, cfg.poll_interval_ms, cfg.rotate_wait_ms),
            (8192, 200, 1000)
        );
        let cfg = settings("path = \"x.otlp\"\nkind = \"otlp-json\"\n")
            .build(&mut never)
            .unwrap();
        assert_eq!(
            cfg.format,
            RecordFormat::Spans(overtime_parse::spans::SpanFormat::OtlpJson)
        );
    }

    #[test]
    fn a_full_block_with_nginx_conf() {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("nginx.conf");
        std::fs::write(
            &conf,
            "http {\n  log_format llm '$msec $status $request_time';\n  proxy_read_timeout 45s;\n}\n",
        )
        .unwrap();
        let text = format!(
            r#"
            path = "/var/log/nginx/ingress.log"
            kind = "nginx"
            nginx_conf = {conf:?}
            format_name = "llm"
            layer = "ingress"
            "#
        );
        let s = settings(&text);
        s.validate().unwrap();
        let mut seen = Vec::new();
        let cfg = s
            .clone()
            .build(&mut |l, t| {
                seen.push((l.to_string(), t));
                1
            })
            .unwrap();
        assert_eq!(seen, [("ingress".to_string(), Some(45_000.0))]);
        match &cfg.format {
            RecordFormat::Nginx(n) => {
                assert_eq!((n.layer.as_str(), n.layer_index), ("ingress", 1));
                assert_eq!(n.format.variables().count(), 3);
            }
            other => panic!("{other:?}"),
        }
        // An explicit timeout wins over nginx.conf's.
        let mut s = s;
        s.read_timeout_ms = Some(10_000.0);
        let mut seen = Vec::new();
        s.build(&mut |l, t| {
            seen.push((l.to_string(), t));
            0
        })
        .unwrap();
        assert_eq!(seen[0].1, Some(10_000.0));
    }

    #[test]
    fn errors_name_the_file() {
        let e = settings("path = \"a.log\"\nkind = \"nginx\"\n")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs `format`") && e.contains("a.log"), "{e}");
        let e = toml::from_str::<FileSourceSettings>("path = \"a.log\"\nkind = \"csv\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown format `csv`") && e.contains("kind"),
            "{e}"
        );
        let e = settings("path = \"a.bin\"\nkind = \"otlp-proto\"\n")
            .build(&mut never)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "file a.bin: kind must be nginx, jsonl or otlp-json, not otlp-proto \
             (a tailed file is read line by line)"
        );
        let e = settings(
            "path = \"a.log\"\nkind = \"nginx\"\nnginx_conf = \"/nonexistent/nginx.conf\"\nformat_name = \"x\"\n",
        )
        .build(&mut never)
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/nginx.conf"), "{e}");
    }

    #[test]
    fn every_spelling_of_a_line_based_format_is_a_kind() {
        for kind in FileSourceSettings::KINDS {
            for alias in kind.aliases() {
                let s = settings(&format!(
                    "path = \"a.log\"\nkind = \"{}\"\nformat = \"overtime\"\n",
                    alias.to_ascii_uppercase()
                ));
                assert_eq!(s.kind, kind, "{alias}");
                let cfg = s.build(&mut |_, _| 0).unwrap();
                assert_eq!(cfg.format.format_name(), kind, "{alias}");
            }
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        let e = toml::from_str::<FileSourceSettings>(
            "path = \"a.log\"\nkind = \"nginx\"\nformat = \"overtime\"\nlog_format = \"overtime\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("log_format"), "{e}");
        let e = toml::from_str::<FileSourceSettings>("kind = \"jsonl\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("path"), "{e}");
    }
}
