//! `$request` read as nginx's own request-line parser reads it.

use super::bytes::trim_spaces;

/// `$request` → (method, uri, protocol), filled as nginx's own request-line
/// parser fills `$request_method`, `$request_uri` and `$server_protocol`:
/// a method of `A`–`Z`, `_` and `-`; spaces; a URI starting with `/` or a
/// scheme (`http://…`, a proxy request); then spaces and `HTTP/<digits>.<digits>`,
/// or nothing at all for an HTTP/0.9 `GET`. A request line nginx itself
/// refused (`PATCHp /x HTTP/1.1`, `geti /`, a TLS hello sent to a
/// plain-HTTP port, a scanner's garbage) gives three `None`s, and the
/// caller keeps the raw value.
pub(crate) fn split_request(r: &str) -> (Option<&str>, Option<&str>, Option<&str>) {
    const NONE: (Option<&str>, Option<&str>, Option<&str>) = (None, None, None);
    let Some(sp) = r.find(' ') else {
        return NONE;
    };
    let method = &r[..sp];
    let good = !method.is_empty()
        && method.len() <= 32
        && method
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b == b'-' || b == b'_');
    let rest = trim_spaces(&r[sp + 1..]);
    let uri_ok = |u: &str| {
        let b = u.as_bytes();
        match b.first() {
            Some(b'/') => true,
            Some(c) if c.is_ascii_alphabetic() => {
                let n = b
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'))
                    .count();
                u[n..].starts_with("://")
            }
            _ => false,
        }
    };
    if !good || !uri_ok(rest) {
        return NONE;
    }
    match rest.rfind(' ') {
        Some(k) if is_http_version(&rest[k + 1..]) => (
            Some(method),
            Some(rest[..k].trim_end_matches(' ')),
            Some(&rest[k + 1..]),
        ),
        None if method == "GET" => (Some(method), Some(rest), None),
        _ => NONE,
    }
}

/// `HTTP/<digits>.<digits>` (nginx's grammar; `HTTP/2` without a minor is
/// not a request line nginx accepts).
fn is_http_version(p: &str) -> bool {
    let Some(v) = p.strip_prefix("HTTP/") else {
        return false;
    };
    match v.split_once('.') {
        Some((a, b)) => {
            !a.is_empty()
                && !b.is_empty()
                && a.bytes().all(|c| c.is_ascii_digit())
                && b.bytes().all(|c| c.is_ascii_digit())
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_line_and_garbage() {
        assert_eq!(
            split_request("GET /v1/chat?q=a b HTTP/1.1"),
            (Some("GET"), Some("/v1/chat?q=a b"), Some("HTTP/1.1"))
        );
        assert_eq!(split_request("GET /"), (Some("GET"), Some("/"), None));
        assert_eq!(
            split_request("CONNECT http://x.io:443/ HTTP/1.1"),
            (Some("CONNECT"), Some("http://x.io:443/"), Some("HTTP/1.1"))
        );
        // nginx refuses these request lines: no method, URI or protocol.
        for bad in [
            "PATCHp /products/42 HTTP/1.1",
            "geti /products/42 HTTP/1.1",
            "hello",
            "POST /x",
            "GET / FOO",
            "GET x HTTP/1.1",
            "GET / HTTP/2",
        ] {
            assert_eq!(split_request(bad), (None, None, None), "{bad}");
        }
        assert_eq!(
            split_request("\u{16}\u{3}\u{1}\u{0} \u{fffd}"),
            (None, None, None)
        );
        assert_eq!(split_request(""), (None, None, None));
        assert_eq!(split_request("GET "), (None, None, None));
    }
}
