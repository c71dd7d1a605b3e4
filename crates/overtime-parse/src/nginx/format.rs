//! The `log_format` compiler: nginx.conf text → a list of literal and
//! variable segments, compiled once per source.

use super::builtins::BUILTIN_FORMATS;
use super::conf::{Token, line_col, log_format_directives, tokenize};
use super::format_error::FormatError;
use std::fmt;

/// How nginx escapes variable values in the log (`log_format … escape=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Escape {
    /// `"`, `\`, bytes below 0x20 and from 0x7f are written as `\xHH`.
    #[default]
    Default,
    /// JSON string escapes (`\"`, `\\`, `\n`, `\u0001`…); other bytes raw.
    Json,
    /// Values are written as they are.
    None,
}

impl Escape {
    /// The name used after `escape=` in nginx.conf.
    pub fn as_str(self) -> &'static str {
        match self {
            Escape::Default => "default",
            Escape::Json => "json",
            Escape::None => "none",
        }
    }
}

/// One piece of a compiled format.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// Text nginx writes as is.
    Literal(String),
    /// A variable, lowercased, without `$` or braces.
    Variable(String),
}

/// A compiled nginx `log_format`: literal and variable segments plus the
/// escape mode. Adjacent literals are merged.
///
/// ```
/// use overtime_parse::nginx::{Escape, LogFormat};
/// let f = LogFormat::compile(
///     "escape=json '{\"addr\":\"$remote_addr\",'\n    '\"t\":$msec}'",
/// ).unwrap();
/// assert_eq!(f.escape(), Escape::Json);
/// assert_eq!(f.variables().collect::<Vec<_>>(), vec!["remote_addr", "msec"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LogFormat {
    segments: Vec<Segment>,
    escape: Escape,
}

impl LogFormat {
    /// Compiles a format body as written in nginx.conf: quoted pieces
    /// (`'…'` or `"…"`) concatenated across lines and whitespace, optionally
    /// preceded by `escape=default|json|none`. Also accepted: a whole
    /// `log_format NAME [escape=…] '…' '…';` directive, or an unquoted raw
    /// body as typed on a command line (anything that is not only quoted
    /// pieces is taken literally, so `"$request" $status` keeps its quotes).
    ///
    /// ```
    /// use overtime_parse::nginx::{LogFormat, Segment};
    /// let a = LogFormat::compile("'$status '\n  \"$request_time\"").unwrap();
    /// let b = LogFormat::compile("log_format x '$status ' '$request_time';").unwrap();
    /// let c = LogFormat::compile("$status $request_time").unwrap();
    /// assert_eq!(a, b);
    /// assert_eq!(a, c);
    /// assert_eq!(a.segments()[1], Segment::Literal(" ".into()));
    /// assert!(LogFormat::compile("'$status").is_err());
    /// ```
    pub fn compile(text: &str) -> Result<LogFormat, FormatError> {
        let trimmed = text.trim_start();
        let lead = text.len() - trimmed.len();
        if let Some(rest) = trimmed.strip_prefix("log_format")
            && rest.starts_with([' ', '\t', '\r', '\n'])
        {
            let tokens = tokenize(text)?;
            let d = log_format_directives(&tokens)
                .into_iter()
                .next()
                .ok_or_else(|| FormatError::Empty {
                    name: String::new(),
                })?;
            return from_args(text, &d.name, &d.args);
        }
        // Optional `escape=` word, then either only quoted pieces or a raw body.
        let (escape_word, body_off) = match trimmed.strip_prefix("escape=") {
            Some(after) => {
                let end = after.find([' ', '\t', '\r', '\n']).unwrap_or(after.len());
                (Some(&after[..end]), lead + "escape=".len() + end)
            }
            None => (None, lead),
        };
        let escape = match escape_word {
            Some(w) => parse_escape(w, text, lead)?,
            None => Escape::Default,
        };
        let body = &text[body_off..];
        let body_trim = body.trim_start();
        if body_trim.starts_with(['\'', '"']) {
            let tokens = tokenize(body)?;
            let mut pieces = Vec::new();
            let mut all_quoted = true;
            for (i, t) in tokens.iter().enumerate() {
                match t {
                    Token::Word {
                        text: w,
                        quoted: true,
                        offset,
                    } => pieces.push((w.as_str(), body_off + offset)),
                    Token::Semi(_) if i + 1 == tokens.len() => {}
                    _ => all_quoted = false,
                }
            }
            if all_quoted {
                return build(text, "", escape, &pieces);
            }
        }
        let raw = body_trim.trim_end_matches(['\r', '\n']);
        build(text, "", escape, &[(raw, text.len() - body_trim.len())])
    }

    /// A built-in format ([`BUILTIN_FORMATS`]): `overtime` (the recommended
    /// one), `ingress-nginx` (alias `upstreaminfo`) or `combined`.
    ///
    /// ```
    /// use overtime_parse::nginx::LogFormat;
    /// assert!(LogFormat::builtin("combined").unwrap().variables().any(|v| v == "http_user_agent"));
    /// assert!(LogFormat::builtin("overtime").unwrap().variables().any(|v| v == "upstream_addr"));
    /// assert!(LogFormat::builtin("ingress-nginx").unwrap().variables().any(|v| v == "req_id"));
    /// assert_eq!(LogFormat::builtin("upstreaminfo"), LogFormat::builtin("ingress-nginx"));
    /// assert!(LogFormat::builtin("main").is_none());
    /// ```
    pub fn builtin(name: &str) -> Option<LogFormat> {
        let b = BUILTIN_FORMATS
            .iter()
            .find(|b| b.name == name || b.aliases.contains(&name))?;
        Some(LogFormat::compile(b.directive).expect("built-in formats compile"))
    }

    /// A format as a user names it (`--log-format`, a `[[file]]`'s
    /// `format`, a Kafka topic's `log_format`): a built-in name (surrounding
    /// blanks ignored), else a `log_format` body ([`LogFormat::compile`]),
    /// which must hold at least one `$variable`.
    ///
    /// ```
    /// use overtime_parse::nginx::LogFormat;
    /// assert_eq!(LogFormat::named_or_body(" overtime"), Ok(LogFormat::builtin("overtime").unwrap()));
    /// assert_eq!(LogFormat::named_or_body("$status").unwrap().variables().count(), 1);
    /// assert!(LogFormat::named_or_body("overtme").unwrap_err().to_string().contains("neither a built-in"));
    /// ```
    pub fn named_or_body(text: &str) -> Result<LogFormat, FormatError> {
        if let Some(f) = LogFormat::builtin(text.trim()) {
            return Ok(f);
        }
        let f = LogFormat::compile(text)?;
        if f.variables().next().is_none() {
            return Err(FormatError::NoVariables {
                text: text.to_string(),
            });
        }
        Ok(f)
    }

    /// Where an nginx log's format is resolved, for every source: `format`
    /// ([`LogFormat::named_or_body`]) wins; else `log_format NAME` of the
    /// nginx.conf text `conf` ([`LogFormat::from_nginx_conf`]). `Ok(None)`
    /// when neither is given.
    ///
    /// ```
    /// use overtime_parse::nginx::LogFormat;
    /// let conf = "http { log_format llm '$status $request_time'; }";
    /// let f = LogFormat::resolve(None, Some(conf), Some("llm")).unwrap().unwrap();
    /// assert_eq!(f.variables().count(), 2);
    /// assert_eq!(LogFormat::resolve(Some("combined"), Some(conf), Some("llm")).unwrap(), LogFormat::builtin("combined"));
    /// assert_eq!(LogFormat::resolve(None, Some(conf), None).unwrap(), None);
    /// ```
    pub fn resolve(
        format: Option<&str>,
        conf: Option<&str>,
        format_name: Option<&str>,
    ) -> Result<Option<LogFormat>, FormatError> {
        match (format, conf, format_name) {
            (Some(f), _, _) => LogFormat::named_or_body(f).map(Some),
            (None, Some(text), Some(name)) => LogFormat::from_nginx_conf(text, name).map(Some),
            _ => Ok(None),
        }
    }

    /// Finds `log_format NAME …;` in nginx.conf text (comments, quotes and
    /// multi-line directives understood; `include` is not followed) and
    /// compiles it. A built-in name is accepted when the conf does not
    /// define it.
    ///
    /// ```
    /// use overtime_parse::nginx::LogFormat;
    /// let conf = "http {\n  # log_format main 'old';\n  log_format main '$remote_addr'\n     ' $status';\n}";
    /// let f = LogFormat::from_nginx_conf(conf, "main").unwrap();
    /// assert_eq!(f.variables().collect::<Vec<_>>(), vec!["remote_addr", "status"]);
    /// assert!(LogFormat::from_nginx_conf(conf, "combined").is_ok());
    /// assert!(LogFormat::from_nginx_conf(conf, "nope").unwrap_err().to_string().contains("main"));
    /// ```
    pub fn from_nginx_conf(conf_text: &str, name: &str) -> Result<LogFormat, FormatError> {
        let tokens = tokenize(conf_text)?;
        let dirs = log_format_directives(&tokens);
        if let Some(d) = dirs.iter().find(|d| d.name == name) {
            return from_args(conf_text, &d.name, &d.args);
        }
        if let Some(f) = LogFormat::builtin(name) {
            return Ok(f);
        }
        Err(FormatError::NotFound {
            name: name.to_string(),
            defined: dirs.into_iter().map(|d| d.name).collect(),
        })
    }

    /// The variables in order of appearance (repeats included), without `$`,
    /// lowercased (nginx variable names are case-insensitive).
    ///
    /// ```
    /// use overtime_parse::nginx::LogFormat;
    /// let f = LogFormat::compile("'$Status ${request_time}s $status'").unwrap();
    /// assert_eq!(f.variables().collect::<Vec<_>>(), vec!["status", "request_time", "status"]);
    /// ```
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Variable(v) => Some(v.as_str()),
            Segment::Literal(_) => None,
        })
    }

    /// The escape mode nginx applies to values (`escape=`; default when absent).
    ///
    /// ```
    /// use overtime_parse::nginx::{Escape, LogFormat};
    /// assert_eq!(LogFormat::builtin("combined").unwrap().escape(), Escape::Default);
    /// assert_eq!(LogFormat::compile("escape=none '$uri'").unwrap().escape(), Escape::None);
    /// ```
    pub fn escape(&self) -> Escape {
        self.escape
    }

    /// The compiled segments, adjacent literals merged.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }
}

impl fmt::Display for LogFormat {
    /// Writes the format back as a one-piece nginx.conf body.
    ///
    /// ```
    /// use overtime_parse::nginx::LogFormat;
    /// let f = LogFormat::compile("escape=json '{\"s\":$status}'").unwrap();
    /// assert_eq!(f.to_string(), "escape=json '{\"s\":${status}}'");
    /// assert_eq!(LogFormat::compile(&f.to_string()).unwrap(), f);
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.escape != Escape::Default {
            write!(f, "escape={} ", self.escape.as_str())?;
        }
        f.write_str("'")?;
        for s in &self.segments {
            match s {
                Segment::Variable(v) => write!(f, "${{{v}}}")?,
                Segment::Literal(l) => {
                    for c in l.chars() {
                        match c {
                            '\'' => f.write_str("\\'")?,
                            '\\' => f.write_str("\\\\")?,
                            '\t' => f.write_str("\\t")?,
                            '\r' => f.write_str("\\r")?,
                            '\n' => f.write_str("\\n")?,
                            c => write!(f, "{c}")?,
                        }
                    }
                }
            }
        }
        f.write_str("'")
    }
}

fn parse_escape(word: &str, text: &str, offset: usize) -> Result<Escape, FormatError> {
    match word {
        "default" => Ok(Escape::Default),
        "json" => Ok(Escape::Json),
        "none" => Ok(Escape::None),
        other => {
            let (line, column) = line_col(text, offset);
            Err(FormatError::BadEscape {
                value: other.to_string(),
                line,
                column,
            })
        }
    }
}

/// Compiles the arguments of a `log_format` directive after its name.
fn from_args(text: &str, name: &str, args: &[Token]) -> Result<LogFormat, FormatError> {
    let mut escape = Escape::Default;
    let mut pieces = Vec::new();
    for (i, t) in args.iter().enumerate() {
        let Token::Word {
            text: w, offset, ..
        } = t
        else {
            continue;
        };
        match w.strip_prefix("escape=") {
            Some(e) if i == 0 => escape = parse_escape(e, text, *offset)?,
            _ => pieces.push((w.as_str(), *offset)),
        }
    }
    build(text, name, escape, &pieces)
}

/// Compiles pieces (each with its offset in `text`, for errors) into segments,
/// following `ngx_http_log_compile`: `$name` or `${name}`, name of
/// `[A-Za-z0-9_]`, case-insensitive.
fn build(
    text: &str,
    name: &str,
    escape: Escape,
    pieces: &[(&str, usize)],
) -> Result<LogFormat, FormatError> {
    let mut segments: Vec<Segment> = Vec::new();
    let push_lit = |segments: &mut Vec<Segment>, s: &str| {
        if s.is_empty() {
            return;
        }
        if let Some(Segment::Literal(l)) = segments.last_mut() {
            l.push_str(s);
        } else {
            segments.push(Segment::Literal(s.to_string()));
        }
    };
    for &(piece, offset) in pieces {
        let b = piece.as_bytes();
        let mut lit_start = 0;
        let mut i = 0;
        while i < b.len() {
            if b[i] != b'$' {
                i += 1;
                continue;
            }
            push_lit(&mut segments, &piece[lit_start..i]);
            let dollar = i;
            i += 1;
            let bracket = b.get(i) == Some(&b'{');
            if bracket {
                i += 1;
            }
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let var = &piece[start..i];
            let bad = |why| {
                let (line, column) = line_col(text, offset.saturating_add(dollar));
                FormatError::BadVariable {
                    text: piece[dollar..].chars().take(40).collect(),
                    line,
                    column,
                    why,
                }
            };
            if bracket {
                if b.get(i) != Some(&b'}') {
                    return Err(bad("`${` without a closing `}`"));
                }
                i += 1;
            }
            if var.is_empty() {
                return Err(bad("`$` must be followed by a variable name"));
            }
            segments.push(Segment::Variable(var.to_ascii_lowercase()));
            lit_start = i;
        }
        push_lit(&mut segments, &piece[lit_start..]);
    }
    if segments.is_empty() {
        return Err(FormatError::Empty {
            name: name.to_string(),
        });
    }
    Ok(LogFormat { segments, escape })
}

#[cfg(test)]
mod tests {
    use super::super::builtins::*;
    use super::*;

    fn lit(s: &str) -> Segment {
        Segment::Literal(s.into())
    }
    fn var(s: &str) -> Segment {
        Segment::Variable(s.into())
    }

    #[test]
    fn pieces_concatenate_across_lines_without_added_spaces() {
        let f = LogFormat::compile("'$remote_addr ['\n\t\"$time_local]\" '$Status'").unwrap();
        assert_eq!(
            f.segments(),
            &[
                var("remote_addr"),
                lit(" ["),
                var("time_local"),
                lit("]"),
                var("status")
            ]
        );
        assert_eq!(f.escape(), Escape::Default);
    }

    #[test]
    fn escape_prefix_and_directive_form_agree() {
        let body = LogFormat::compile("escape=json '{\"u\":\"$uri\"}'").unwrap();
        let dir = LogFormat::compile("log_format j escape=json\n   '{\"u\":\"$uri\"}';").unwrap();
        assert_eq!(body, dir);
        assert_eq!(dir.escape(), Escape::Json);
        assert_eq!(dir.segments()[0], lit("{\"u\":\""));
        let none = LogFormat::compile("escape=none $uri").unwrap();
        assert_eq!(none.escape(), Escape::None);
        assert_eq!(none.segments(), &[var("uri")]);
    }

    #[test]
    fn raw_body_keeps_its_quotes_and_braced_variables_work() {
        let f = LogFormat::compile("$remote_addr \"$request\" ${status}ms\n").unwrap();
        assert_eq!(
            f.segments(),
            &[
                var("remote_addr"),
                lit(" \""),
                var("request"),
                lit("\" "),
                var("status"),
                lit("ms")
            ]
        );
    }

    #[test]
    fn unknown_variables_are_kept_by_name() {
        let f = LogFormat::compile("'$http_x_tenant $upstream_cache_status $status'").unwrap();
        let v: Vec<_> = f.variables().collect();
        assert_eq!(v, vec!["http_x_tenant", "upstream_cache_status", "status"]);
    }

    #[test]
    fn errors_say_what_and_where() {
        let e = LogFormat::compile("'$status '\n  '$request").unwrap_err();
        assert_eq!(
            e,
            FormatError::UnterminatedQuote {
                quote: '\'',
                line: 2,
                column: 3
            }
        );
        let e = LogFormat::compile("escape=xml '$status'").unwrap_err();
        assert!(e.to_string().contains("escape=xml"), "{e}");
        let e = LogFormat::compile("'a $ b'").unwrap_err();
        assert!(
            matches!(e, FormatError::BadVariable { column: 4, .. }),
            "{e:?}"
        );
        let e = LogFormat::compile("'${status'").unwrap_err();
        assert!(e.to_string().contains("closing"), "{e}");
        assert!(matches!(
            LogFormat::compile("  ").unwrap_err(),
            FormatError::Empty { .. }
        ));
    }

    #[test]
    fn conf_lookup_skips_comments_and_picks_the_named_directive() {
        let conf = r#"
# log_format main 'commented out $nothing';
http {
    log_format  main  '$remote_addr - $remote_user [$time_local] "$request" '
                      '$status $body_bytes_sent';   # trailing comment
    log_format edge escape=json
        '{"t":"$msec","s":$status,'
        '"ua":"$http_user_agent"}';
    access_log /var/log/nginx/access.log main;
}
"#;
        let main = LogFormat::from_nginx_conf(conf, "main").unwrap();
        assert!(!main.variables().any(|v| v == "nothing"));
        assert_eq!(main.variables().count(), 6);
        let edge = LogFormat::from_nginx_conf(conf, "edge").unwrap();
        assert_eq!(edge.escape(), Escape::Json);
        assert_eq!(
            edge.variables().collect::<Vec<_>>(),
            vec!["msec", "status", "http_user_agent"]
        );
        assert_eq!(
            LogFormat::from_nginx_conf(conf, "overtime").unwrap(),
            LogFormat::builtin("overtime").unwrap()
        );
        match LogFormat::from_nginx_conf(conf, "missing").unwrap_err() {
            FormatError::NotFound { name, defined } => {
                assert_eq!(name, "missing");
                assert_eq!(defined, vec!["main", "edge"]);
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn conf_definition_wins_over_builtin() {
        let conf = "log_format overtime '$status';";
        let f = LogFormat::from_nginx_conf(conf, "overtime").unwrap();
        assert_eq!(f.segments(), &[var("status")]);
    }

    #[test]
    fn builtins_match_nginx_and_the_spec() {
        let c = LogFormat::builtin("combined").unwrap();
        assert_eq!(c.segments().len(), 16);
        assert_eq!(c.segments()[1], lit(" - "));
        let o = LogFormat::builtin("overtime").unwrap();
        assert_eq!(o.variables().count(), 16);
        assert!(o.segments().contains(&lit("\" rid=")));
        assert_eq!(o.segments().last(), Some(&lit("\"")));
        assert!(
            OVERTIME_LOG_FORMAT.starts_with("log_format overtime '$remote_addr [$time_iso8601]")
        );
        assert!(OVERTIME_LOG_FORMAT.ends_with("llmd=\"$upstream_http_x_llm_duration\"';"));
        assert_eq!(
            LogFormat::compile(COMBINED_LOG_FORMAT).unwrap(),
            LogFormat::compile(COMBINED_BODY).unwrap()
        );
        let i = LogFormat::builtin("ingress-nginx").unwrap();
        assert_eq!(i.variables().count(), 17);
        assert_eq!(i.variables().last(), Some("req_id"));
        assert!(i.segments().contains(&lit("] [")));
    }
}
