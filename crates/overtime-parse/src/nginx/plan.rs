//! What the line parser does with a compiled [`LogFormat`]: which column
//! each variable feeds, and how a line is cut into one value per variable.
//!
//! A value ends where the literal that follows its variable in the format
//! starts: at its first occurrence after the value's start whenever the
//! value cannot hold the literal's first byte (`"` after a value nginx
//! escapes, a space after a number); for the last variable of a format
//! that ends with a literal, the line must end with that literal. Where a
//! value *can* hold its literal — an unquoted `$upstream_*` list before a
//! space, `|` or `]`, free text before a space — or two variables touch
//! (`$a$b`), the line is cut every way nginx could have written it
//! (`search.rs`): one way is the line, several are rejected, never
//! guessed. What a value may hold is then checked (`checks.rs`).

use super::bytes::{Lit, eq_at};
use super::checks::{Check, check_for};
use super::domain::Domain;
use super::format::{Escape, LogFormat, Segment};
use super::search::{self, Found, Scratch};

/// The `gateway_requests` column (or time source) a variable feeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Col {
    RemoteAddr,
    Request,
    Method,
    Uri,
    Protocol,
    Status,
    Bytes,
    RequestTime,
    UpConnect,
    UpHeader,
    UpResponse,
    UpStatus,
    UpAddr,
    RequestId,
    Traceparent,
    MaxWait,
    LlmReason,
    LlmDuration,
    Msec,
    TimeIso,
    TimeLocal,
}

/// What to do with one variable occurrence of the format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Feeds a column.
    Col(Col),
    /// Kept in `extra` under `Plan::extra_names[i]`.
    Extra(usize),
    /// A repeat of a variable already used: only delimits.
    Skip,
}

/// Character classes of variables whose values have a known shape; used to
/// split adjacent variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Status,
    Digits,
    Decimal,
    List,
    Alpha,
    Hex,
    Addr,
    Host,
    Iso,
}

impl Shape {
    pub(crate) fn of(var: &str) -> Option<Shape> {
        Some(match var {
            "status" => Shape::Status,
            "body_bytes_sent"
            | "bytes_sent"
            | "connection"
            | "connection_requests"
            | "request_length"
            | "pid"
            | "server_port"
            | "remote_port"
            | "content_length" => Shape::Digits,
            "request_time" | "msec" => Shape::Decimal,
            "upstream_connect_time"
            | "upstream_header_time"
            | "upstream_response_time"
            | "upstream_status"
            | "upstream_bytes_received"
            | "upstream_bytes_sent"
            | "upstream_response_length" => Shape::List,
            "request_method" | "scheme" => Shape::Alpha,
            "request_id" => Shape::Hex,
            "remote_addr" | "server_addr" | "realip_remote_addr" | "binary_remote_addr" => {
                Shape::Addr
            }
            "host" | "hostname" | "server_name" | "http_host" => Shape::Host,
            "time_iso8601" => Shape::Iso,
            _ => return None,
        })
    }

    pub(crate) fn accepts(self, b: u8) -> bool {
        match self {
            Shape::Status | Shape::Digits => b.is_ascii_digit(),
            Shape::Decimal => b.is_ascii_digit() || b == b'.',
            Shape::List => b.is_ascii_digit() || matches!(b, b'.' | b',' | b' ' | b':' | b'-'),
            Shape::Alpha => b.is_ascii_alphabetic(),
            Shape::Hex => b.is_ascii_hexdigit(),
            Shape::Addr => b.is_ascii_hexdigit() || matches!(b, b'.' | b':'),
            Shape::Host => {
                b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']')
            }
            Shape::Iso => b.is_ascii_digit() || matches!(b, b'-' | b'T' | b':' | b'+' | b'Z'),
        }
    }

    /// Length of the value of this shape at the start of `s` (a lone `-`
    /// counts as the null value).
    fn take_fwd(self, s: &[u8]) -> usize {
        let mut n = s.iter().take_while(|&&b| self.accepts(b)).count();
        if self == Shape::Status {
            n = n.min(3);
        }
        if n == 0 && s.first() == Some(&b'-') {
            1
        } else {
            n
        }
    }

    /// Length of the value of this shape at the end of `s`.
    fn take_back(self, s: &[u8]) -> usize {
        let mut n = s.iter().rev().take_while(|&&b| self.accepts(b)).count();
        if self == Shape::Status {
            n = n.min(3);
        }
        if n == 0 && s.last() == Some(&b'-') {
            1
        } else {
            n
        }
    }
}

/// A run of one or more adjacent variables and the literal after it.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    /// Occurrence indices `first..first + len`.
    pub first: usize,
    pub len: usize,
    /// The literal after the run (`None`: the run ends the line).
    pub after: Option<Lit>,
    /// This is the last group of the format.
    pub last: bool,
}

/// One variable occurrence, as the line cutter (`search.rs`) sees it.
#[derive(Debug, Clone)]
pub(crate) struct Occ {
    /// What nginx can write for it.
    pub domain: Domain,
    /// The literal right after it (`None`: another variable follows at
    /// once, or the line ends).
    pub after: Option<Lit>,
    /// The value can hold the first byte of `after`, so the value does not
    /// simply end at the literal's first occurrence.
    pub open: bool,
    /// The first occurrence of the same variable (itself if none before).
    pub same_as: usize,
}

/// The compiled cutting and mapping plan of a format.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Literal the line starts with (may be empty).
    pub prefix: String,
    pub groups: Vec<Group>,
    /// One per variable occurrence.
    pub roles: Vec<Role>,
    pub shapes: Vec<Option<Shape>>,
    /// Variable names (occurrence order), for error details.
    pub names: Vec<String>,
    /// Keys of `extra`.
    pub extra_names: Vec<String>,
    /// `escape=json`: a `"` preceded by an odd number of backslashes is
    /// inside a value, never the start of a literal.
    pub json: bool,
    /// What some values must look like (`checks.rs`): (occurrence, check).
    pub checks: Vec<(usize, Check)>,
    pub escape: Escape,
    /// One per variable occurrence.
    pub occs: Vec<Occ>,
    /// The first occurrences of `$upstream_*` lists.
    pub list_occs: Vec<usize>,
    /// Some value can hold its literal or two variables touch: lines are
    /// cut by [`search::cut`].
    pub search: bool,
}

/// Column of a variable by name, ignoring precedence.
fn col_of(var: &str) -> Option<Col> {
    Some(match var {
        "remote_addr" => Col::RemoteAddr,
        "request" => Col::Request,
        "request_method" => Col::Method,
        "request_uri" | "uri" => Col::Uri,
        "server_protocol" => Col::Protocol,
        "status" => Col::Status,
        "body_bytes_sent" | "bytes_sent" => Col::Bytes,
        "request_time" => Col::RequestTime,
        "upstream_connect_time" => Col::UpConnect,
        "upstream_header_time" => Col::UpHeader,
        "upstream_response_time" => Col::UpResponse,
        "upstream_status" => Col::UpStatus,
        "upstream_addr" => Col::UpAddr,
        "request_id" | "req_id" | "http_x_request_id" => Col::RequestId,
        "http_traceparent" => Col::Traceparent,
        "http_x_max_wait" => Col::MaxWait,
        "upstream_http_x_llm_reason" => Col::LlmReason,
        "upstream_http_x_llm_duration" => Col::LlmDuration,
        "msec" => Col::Msec,
        "time_iso8601" => Col::TimeIso,
        "time_local" => Col::TimeLocal,
        _ => return None,
    })
}

/// Variables that feed a column only when no better one is in the format;
/// otherwise they are kept in `extra` so no value is lost.
fn outranked(var: &str, present: &dyn Fn(&str) -> bool) -> bool {
    match var {
        "bytes_sent" => present("body_bytes_sent"),
        "req_id" => present("request_id"),
        "http_x_request_id" => present("request_id") || present("req_id"),
        "uri" => present("request_uri") || present("request"),
        "time_iso8601" => present("msec"),
        "time_local" => present("msec") || present("time_iso8601"),
        _ => false,
    }
}

impl Plan {
    pub(crate) fn new(format: &LogFormat) -> Plan {
        let vars: Vec<&str> = format.variables().collect();
        let present = |v: &str| vars.contains(&v);
        let mut roles = Vec::with_capacity(vars.len());
        let mut extra_names: Vec<String> = Vec::new();
        for (i, &v) in vars.iter().enumerate() {
            if vars[..i].contains(&v) {
                roles.push(Role::Skip);
                continue;
            }
            let role = match col_of(v) {
                Some(c) if !outranked(v, &present) => Role::Col(c),
                _ => {
                    extra_names.push(v.to_string());
                    Role::Extra(extra_names.len() - 1)
                }
            };
            roles.push(role);
        }
        let mut prefix = String::new();
        let mut groups: Vec<Group> = Vec::new();
        let mut occ = 0;
        for seg in format.segments() {
            match seg {
                Segment::Literal(l) => match groups.last_mut() {
                    Some(g) if g.after.is_none() => g.after = Some(Lit::new(l.clone())),
                    _ => prefix = l.clone(),
                },
                Segment::Variable(_) => {
                    match groups.last_mut() {
                        Some(g) if g.after.is_none() => g.len += 1,
                        _ => groups.push(Group {
                            first: occ,
                            len: 1,
                            after: None,
                            last: false,
                        }),
                    }
                    occ += 1;
                }
            }
        }
        if let Some(g) = groups.last_mut() {
            g.last = true;
        }
        let escape = format.escape();
        let mut occs = Vec::with_capacity(vars.len());
        for g in &groups {
            for k in 0..g.len {
                let i = g.first + k;
                let domain = Domain::of(vars[i]);
                let after = if k + 1 < g.len { None } else { g.after.clone() };
                let open = after
                    .as_ref()
                    .and_then(|l| l.text.as_bytes().first())
                    .is_some_and(|&c| domain.byte(c, escape));
                let same_as = vars[..i].iter().position(|&v| v == vars[i]).unwrap_or(i);
                occs.push(Occ {
                    domain,
                    after,
                    open,
                    same_as,
                });
            }
        }
        let list_occs = (0..occs.len())
            .filter(|&i| matches!(occs[i].domain, Domain::List(_)) && occs[i].same_as == i)
            .collect();
        let search = occs
            .iter()
            .take(occs.len().saturating_sub(1))
            .any(|o| o.after.is_none() || o.open);
        let shapes: Vec<Option<Shape>> = vars.iter().map(|v| Shape::of(v)).collect();
        let mut checks = Vec::new();
        for (occ, &v) in vars.iter().enumerate() {
            if roles[occ] == Role::Skip {
                continue;
            }
            let edge = occ == 0 || occ + 1 == vars.len();
            let typed = matches!(
                roles[occ],
                Role::Col(
                    Col::Status
                        | Col::Bytes
                        | Col::RequestTime
                        | Col::UpConnect
                        | Col::UpHeader
                        | Col::UpResponse
                        | Col::UpStatus
                        | Col::Msec
                        | Col::TimeIso
                        | Col::TimeLocal
                )
            );
            if let Some(c) = check_for(v, shapes[occ], edge, typed, escape != Escape::None) {
                checks.push((occ, c));
            }
        }
        Plan {
            prefix,
            groups,
            roles,
            shapes,
            names: vars.iter().map(|v| v.to_string()).collect(),
            extra_names,
            json: escape == Escape::Json,
            checks,
            escape,
            occs,
            list_occs,
            search,
        }
    }

    /// Cuts `line` into one `(start, end)` byte range per variable occurrence.
    /// On mismatch returns what was expected, for the rejection detail.
    pub(crate) fn split(
        &self,
        line: &str,
        spans: &mut Vec<(usize, usize)>,
        scratch: &mut Scratch,
    ) -> Result<(), String> {
        spans.clear();
        let b = line.as_bytes();
        if !eq_at(b, 0, self.prefix.as_bytes()) {
            return Err(format!("line does not start with {:?}", self.prefix));
        }
        if self.search {
            match search::cut(self, line, self.escape, spans, scratch) {
                Found::One => return Ok(()),
                Found::Several(why) => return Err(why),
                // Cut at the first literals to say what is wrong.
                Found::None => {}
            }
        }
        let mut pos = self.prefix.len();
        for g in &self.groups {
            let end = match (&g.after, g.last) {
                (None, _) => line.len(),
                (Some(lit), true) => {
                    if line.len() < pos + lit.len() || !lit.is_at(b, line.len() - lit.len()) {
                        return Err(format!(
                            "line does not end with {:?} after ${}",
                            lit.text,
                            self.names[g.first + g.len - 1]
                        ));
                    }
                    line.len() - lit.len()
                }
                (Some(lit), false) => match self.find_literal(b, pos, lit) {
                    Some(k) => k,
                    None => {
                        return Err(format!(
                            "expected {:?} after ${} (byte {pos})",
                            lit.text,
                            self.names[g.first + g.len - 1]
                        ));
                    }
                },
            };
            self.cut_group(b, g, pos, end, spans);
            pos = end + g.after.as_ref().map_or(0, |l| l.len());
        }
        if self.groups.is_empty() && line.len() != self.prefix.len() {
            return Err(format!(
                "line is longer than the constant format {:?}",
                self.prefix
            ));
        }
        Ok(())
    }

    /// Where `lit` starts in `b` at or after `pos`, skipping JSON-escaped
    /// quotes (`\"`) in `escape=json`.
    #[inline]
    pub(crate) fn find_literal(&self, b: &[u8], pos: usize, lit: &Lit) -> Option<usize> {
        let mut from = pos;
        loop {
            let at = lit.find(b, from)?;
            let escaped = self.json
                && lit.text.starts_with('"')
                && b[pos..at].iter().rev().take_while(|&&c| c == b'\\').count() % 2 == 1;
            if !escaped {
                return Some(at);
            }
            from = at + 1;
        }
    }

    /// Distributes `[start, end)` among the adjacent variables of `g`.
    fn cut_group(
        &self,
        b: &[u8],
        g: &Group,
        start: usize,
        end: usize,
        spans: &mut Vec<(usize, usize)>,
    ) {
        let mut pos = start;
        for k in 0..g.len {
            let occ = g.first + k;
            if k + 1 == g.len {
                spans.push((pos, end));
                break;
            }
            let n = match self.shapes[occ] {
                Some(s) => s.take_fwd(&b[pos..end]),
                None => {
                    // Take all but what the following variables take from the end.
                    let mut stop = end;
                    for later in (occ + 1..g.first + g.len).rev() {
                        match self.shapes[later] {
                            Some(s) => stop -= s.take_back(&b[pos..stop]),
                            None => break,
                        }
                    }
                    stop - pos
                }
            };
            spans.push((pos, pos + n));
            pos += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(fmt: &str, line: &str) -> Result<Vec<String>, String> {
        let p = Plan::new(&LogFormat::compile(fmt).unwrap());
        let mut spans = Vec::new();
        p.split(line, &mut spans, &mut Scratch::default())?;
        Ok(spans.iter().map(|&(a, b)| line[a..b].to_string()).collect())
    }

    #[test]
    fn values_end_at_the_next_literal() {
        assert_eq!(
            cut(
                "'[$time_local] \"$request\" $status'",
                "[29/Nov/2026:10:00:00 +0000] \"GET / HTTP/1.1\" 200"
            )
            .unwrap(),
            vec!["29/Nov/2026:10:00:00 +0000", "GET / HTTP/1.1", "200"]
        );
        assert!(cut("'[$time_local] $status'", "29/Nov/2026 200").is_err());
        assert!(cut("'$status \"$request\"'", "200 \"GET /").is_err());
    }

    #[test]
    fn last_value_may_contain_the_closing_literal() {
        assert_eq!(
            cut(
                "'$status \"$http_user_agent\"'",
                "200 \"a \"quoted\" agent\""
            )
            .unwrap(),
            vec!["200", "a \"quoted\" agent"]
        );
    }

    #[test]
    fn json_escaped_quotes_do_not_end_a_value() {
        assert_eq!(
            cut(
                "escape=json '{\"ua\":\"$http_user_agent\",\"s\":$status}'",
                r#"{"ua":"a \",\" b \\","s":200}"#
            )
            .unwrap(),
            vec![r#"a \",\" b \\"#, "200"]
        );
        // Without escape=json the first match wins.
        assert_eq!(
            cut("'\"$a\",$b'", r#""x\",y",z"#).unwrap(),
            vec!["x\\", "y\",z"]
        );
    }

    #[test]
    fn adjacent_variables_split_by_shape() {
        assert_eq!(
            cut("'$status$request_time'", "5040.123").unwrap(),
            vec!["504", "0.123"]
        );
        assert_eq!(
            cut("'$status$request_time'", "200-").unwrap(),
            vec!["200", "-"]
        );
        assert_eq!(
            cut(
                "'$scheme://$host$request_uri x'",
                "https://api.example.com:8443/v1/chat?q=1 x"
            )
            .unwrap(),
            vec!["https", "api.example.com:8443", "/v1/chat?q=1"]
        );
        // Unknown then known: the known one is taken from the end.
        assert_eq!(
            cut("'$tenant$status'", "acme200").unwrap(),
            vec!["acme", "200"]
        );
        // Neither known: "xy" may be "x" then "y", "xy" then "", ...: a
        // line nginx could have written several ways is refused, not guessed.
        let err = cut("'$a$b'", "xy").unwrap_err();
        assert!(err.contains("several ways") && err.contains("$a"), "{err}");
        assert_eq!(cut("'$a$b'", "").unwrap(), vec!["", ""]);
    }

    #[test]
    fn roles_follow_precedence_and_keep_the_rest_in_extra() {
        let p = Plan::new(&LogFormat::compile("'$msec $time_local $bytes_sent $body_bytes_sent $request_id $http_x_request_id $x $x'").unwrap());
        assert_eq!(p.roles[0], Role::Col(Col::Msec));
        assert_eq!(
            p.extra_names,
            vec!["time_local", "bytes_sent", "http_x_request_id", "x"]
        );
        assert_eq!(p.roles[3], Role::Col(Col::Bytes));
        assert_eq!(p.roles[7], Role::Skip);
        let q =
            Plan::new(&LogFormat::compile("'$time_local $bytes_sent $http_x_request_id'").unwrap());
        assert_eq!(
            q.roles,
            vec![
                Role::Col(Col::TimeLocal),
                Role::Col(Col::Bytes),
                Role::Col(Col::RequestId)
            ]
        );
    }
}
