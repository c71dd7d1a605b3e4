//! Loopback networking for tests: bounded waits and a plain HTTP/1.1
//! client written on `std` alone. (No "free port" here: a port found free
//! and let go can be taken before another process binds it — see
//! [`crate::ports`].)
//!
//! Rules:
//! - Everything talks to 127.0.0.1.
//! - Every wait has a deadline and panics with what it waited for (and,
//!   for [`wait_until`] and [`wait_port`], the state last seen).
//! - The client sends exactly what the test asks for plus `Host`,
//!   `Content-Length` and `Connection: close`, so tests control every other
//!   header; it returns `None` rather than panicking when the server is not
//!   there or the answer is cut, so it can poll a server that is starting.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Whether something accepts connections on `addr` (`host:port`) now.
pub fn listening(addr: &str) -> bool {
    TcpStream::connect(addr).is_ok()
}

/// Polls `f` until it holds; panics after `secs` seconds. The first polls
/// are 10 ms apart (a condition that holds soon is seen soon), later ones
/// 100 ms (a long wait does not busy the machine).
pub fn wait_for(secs: u64, what: &str, f: impl FnMut() -> bool) {
    wait_until(secs, what, f, String::new);
}

/// [`wait_for`], and on timeout the panic message ends with `show()`: the
/// state last seen.
pub fn wait_until(
    secs: u64,
    what: &str,
    mut done: impl FnMut() -> bool,
    show: impl Fn() -> String,
) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut pause = Duration::from_millis(10);
    while !done() {
        if Instant::now() >= deadline {
            let state = show();
            if state.is_empty() {
                panic!("timed out after {secs} s waiting for {what}");
            }
            panic!("timed out after {secs} s waiting for {what}; {state}");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// Waits up to `secs` seconds for `addr` to accept connections; on timeout
/// panics with `what` and the contents of `log`.
pub fn wait_port(addr: &str, secs: u64, what: &str, log: &Path) {
    wait_until(
        secs,
        &format!("{what} to listen on {addr}"),
        || listening(addr),
        || {
            format!(
                "log {}:\n{}",
                log.display(),
                std::fs::read_to_string(log).unwrap_or_default()
            )
        },
    );
}

/// A whole HTTP answer: status, headers (names lower-cased) and body
/// (de-chunked).
#[derive(Debug, Clone)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// The headers in the order sent, names lower-cased, values trimmed.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked when it was sent chunked.
    pub body: Vec<u8>,
}

impl Answer {
    /// The first header called `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// One HTTP/1.1 request to 127.0.0.1:`port` with `headers` besides `Host`,
/// `Content-Length` and `Connection: close`. `None` when the server is not
/// there or the answer is cut. A server may answer (a 413, say) before it
/// read the whole body: the answer is read all the same.
pub fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Option<Answer> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).ok()?;
    let _ = s.write_all(body);
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    parse_answer(&buf)
}

/// Status line, headers and body of a whole HTTP/1.x answer.
fn parse_answer(buf: &[u8]) -> Option<Answer> {
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let raw = &buf[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked { dechunk(raw) } else { raw.to_vec() };
    Some(Answer {
        status,
        headers,
        body,
    })
}

/// The body of a `Transfer-Encoding: chunked` answer; a cut one ends where
/// the data does.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = std::str::from_utf8(&raw[..eol])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
            .unwrap_or(0);
        raw = &raw[eol + 2..];
        if size == 0 || raw.len() < size {
            out.extend_from_slice(&raw[..size.min(raw.len())]);
            return out;
        }
        out.extend_from_slice(&raw[..size]);
        raw = raw.get(size + 2..).unwrap_or(&[]);
    }
}

/// [`request`] with a `Content-Type`: (status, body as text).
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> Option<(u16, String)> {
    request(port, method, path, &[("Content-Type", content_type)], body)
        .map(|a| (a.status, a.text()))
}

/// `GET path`: (status, body as text).
pub fn get(port: u16, path: &str) -> Option<(u16, String)> {
    request(port, "GET", path, &[], b"").map(|a| (a.status, a.text()))
}

/// `GET path`, which must answer 200 with JSON; the JSON.
pub fn get_json(port: u16, path: &str) -> serde_json::Value {
    let (status, body) = get(port, path).unwrap_or_else(|| panic!("GET {path}: no answer"));
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// `POST path` with `headers`; panics when nothing answers.
pub fn post(port: u16, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    request(port, "POST", path, headers, body)
        .unwrap_or_else(|| panic!("POST {path} on port {port}: no answer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_split_and_dechunked() {
        let a = parse_answer(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: b \r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(a.status, 200);
        assert_eq!(a.header("x-a"), Some("b"));
        assert_eq!(a.text(), "abcde");
        let cut =
            parse_answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab").unwrap();
        assert_eq!(cut.body, b"ab");
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\n").is_none());
    }

    #[test]
    fn waits_end_when_the_condition_holds() {
        let mut n = 0;
        wait_for(5, "three polls", || {
            n += 1;
            n == 3
        });
        assert_eq!(n, 3);
    }

    #[test]
    #[should_panic(expected = "timed out after 0 s waiting for nothing; seen: 0")]
    fn a_timeout_says_what_it_waited_for() {
        wait_until(0, "nothing", || false, || "seen: 0".into());
    }
}
