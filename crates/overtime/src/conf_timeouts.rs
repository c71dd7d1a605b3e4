//! The read timeout an nginx.conf gives its proxied locations.

use overtime_parse::duration::parse_duration_ms;

/// nginx's default `proxy_read_timeout`.
pub const NGINX_DEFAULT_READ_TIMEOUT_MS: f64 = 60_000.0;

/// The one read timeout of the conf: the value of `proxy_read_timeout`
/// (or grpc/fastcgi/uwsgi_read_timeout) when every occurrence agrees,
/// nginx's default 60 s when there is none, `None` when locations differ
/// (then it is inferred from the 504s). Bare numbers are seconds.
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
