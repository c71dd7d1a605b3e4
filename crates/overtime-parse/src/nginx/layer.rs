//! What a gateway layer is called and how long it waits, read from what
//! the operator already has: the access log's file name and nginx.conf.
//! Shared by `overtime diagnose` (files named on the command line) and the
//! file tail of `overtime serve` (`[[file]]` blocks), so both name a layer
//! and find its read timeout the same way.

use crate::duration::parse_duration_ms;
use std::path::Path;

/// nginx's default `proxy_read_timeout`.
pub const NGINX_DEFAULT_READ_TIMEOUT_MS: f64 = 60_000.0;

/// `edge.log`, `edge.log.1`, `edge.log.2.gz`, `edge-access.log` → the
/// layer name: the file name without its rotation and compression
/// suffixes.
///
/// ```
/// use overtime_parse::nginx::layer_name_of;
/// use std::path::Path;
/// assert_eq!(layer_name_of(Path::new("/var/log/nginx/edge.log.2.gz")), "edge");
/// ```
pub fn layer_name_of(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut parts: Vec<&str> = name.split('.').collect();
    while parts.len() > 1 {
        let last = parts[parts.len() - 1];
        if matches!(last, "gz" | "zst" | "log") || last.chars().all(|c| c.is_ascii_digit()) {
            parts.pop();
        } else {
            break;
        }
    }
    parts.join(".")
}

/// The one read timeout of an nginx.conf: the value of
/// `proxy_read_timeout` (or grpc/fastcgi/uwsgi_read_timeout) when every
/// occurrence agrees, nginx's default 60 s when there is none, `None` when
/// locations differ (then it is inferred from the 504s). Bare numbers are
/// seconds.
///
/// ```
/// use overtime_parse::nginx::read_timeout_ms;
/// assert_eq!(read_timeout_ms("location / { proxy_read_timeout 10s; }"), Some(10_000.0));
/// ```
pub fn read_timeout_ms(conf: &str) -> Option<f64> {
    let mut values: Vec<f64> = Vec::new();
    for line in conf.lines() {
        let line = line.split('#').next().unwrap_or("");
        for stmt in line.split(';') {
            let mut words = stmt.split_whitespace();
            while let Some(w) = words.next() {
                if matches!(
                    w.trim_start_matches('{'),
                    "proxy_read_timeout"
                        | "grpc_read_timeout"
                        | "fastcgi_read_timeout"
                        | "uwsgi_read_timeout"
                ) && let Some(v) = words.next().and_then(|v| parse_duration_ms(v, 1000.0))
                {
                    values.push(v);
                }
            }
        }
    }
    values.dedup();
    match values.as_slice() {
        [] => Some(NGINX_DEFAULT_READ_TIMEOUT_MS),
        [v] => Some(*v),
        _ if values.iter().all(|v| *v == values[0]) => Some(values[0]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_names() {
        assert_eq!(layer_name_of(Path::new("/var/log/nginx/edge.log")), "edge");
        assert_eq!(layer_name_of(Path::new("edge.log.1")), "edge");
        assert_eq!(layer_name_of(Path::new("edge.log.2.gz")), "edge");
        assert_eq!(layer_name_of(Path::new("access")), "access");
        assert_eq!(
            layer_name_of(Path::new("internal.access.log")),
            "internal.access"
        );
    }

    #[test]
    fn conf_timeouts() {
        assert_eq!(
            read_timeout_ms("http { server { location / { proxy_read_timeout 10s; } } }"),
            Some(10_000.0)
        );
        assert_eq!(
            read_timeout_ms("proxy_read_timeout 75;\n# proxy_read_timeout 5s;"),
            Some(75_000.0)
        );
        assert_eq!(read_timeout_ms("server {}"), Some(60_000.0));
        assert_eq!(
            read_timeout_ms("proxy_read_timeout 10s; proxy_read_timeout 30s;"),
            None
        );
    }
}
