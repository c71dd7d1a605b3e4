//! A tokenizer for nginx configuration text, faithful to `ngx_conf_read_token`
//! where it matters for `log_format`: whitespace-separated words, `'…'` and
//! `"…"` quoting with backslash escapes, `#` comments, `;` `{` `}`, and
//! `${name}` inside unquoted words.
//!
//! ```text
//! log_format main '$remote_addr "$request"'   # a comment
//!                 ' $status';
//! ```
//! tokenizes as `log_format`, `main`, `$remote_addr "$request"` (quoted),
//! ` $status` (quoted), `;`.

use super::format_error::FormatError;

/// One token of nginx configuration text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    /// A word or quoted string, with nginx's escapes (`\"`, `\'`, `\\`,
    /// `\t`, `\r`, `\n`) already applied; `offset` is where its text starts
    /// (after the opening quote).
    Word {
        text: String,
        quoted: bool,
        offset: usize,
    },
    /// `;` at `offset`.
    Semi(usize),
    /// `{` at `offset`.
    Open(usize),
    /// `}` at `offset`.
    Close(usize),
}

/// 1-based line and column of byte `offset` in `text`, for error messages.
pub(crate) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let col = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, col)
}

/// Applies nginx's escapes to the raw bytes of one token.
fn unescape_conf(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.clone().next() {
            Some(n @ ('"' | '\'' | '\\')) => {
                out.push(n);
                chars.next();
            }
            Some('t') => {
                out.push('\t');
                chars.next();
            }
            Some('r') => {
                out.push('\r');
                chars.next();
            }
            Some('n') => {
                out.push('\n');
                chars.next();
            }
            _ => out.push('\\'),
        }
    }
    out
}

/// Splits nginx configuration text into tokens.
///
/// Fails only on a quote that is never closed (or a `${` never closed by `}`).
pub(crate) fn tokenize(text: &str) -> Result<Vec<Token>, FormatError> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            b'#' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b';' => {
                out.push(Token::Semi(i));
                i += 1;
            }
            b'{' => {
                out.push(Token::Open(i));
                i += 1;
            }
            b'}' => {
                out.push(Token::Close(i));
                i += 1;
            }
            b'"' | b'\'' => {
                let start = i;
                i += 1;
                let body = i;
                loop {
                    if i >= b.len() {
                        let (line, column) = line_col(text, start);
                        return Err(FormatError::UnterminatedQuote {
                            quote: c as char,
                            line,
                            column,
                        });
                    }
                    if b[i] == b'\\' {
                        i += 2;
                        continue;
                    }
                    if b[i] == c {
                        break;
                    }
                    i += 1;
                }
                out.push(Token::Word {
                    text: unescape_conf(&text[body..i]),
                    quoted: true,
                    offset: body,
                });
                i += 1;
            }
            _ => {
                let start = i;
                while i < b.len() {
                    match b[i] {
                        b' ' | b'\t' | b'\r' | b'\n' | b';' | b'{' | b'}' | b'"' | b'\'' => break,
                        b'\\' => i += 2,
                        b'$' if b.get(i + 1) == Some(&b'{') => {
                            let open = i;
                            while i < b.len() && b[i] != b'}' {
                                i += 1;
                            }
                            if i >= b.len() {
                                let (line, column) = line_col(text, open);
                                return Err(FormatError::BadVariable {
                                    text: text[open..].chars().take(40).collect(),
                                    line,
                                    column,
                                    why: "`${` without a closing `}`",
                                });
                            }
                            i += 1;
                        }
                        _ => i += 1,
                    }
                }
                let end = i.min(b.len());
                out.push(Token::Word {
                    text: unescape_conf(&text[start..end]),
                    quoted: false,
                    offset: start,
                });
            }
        }
    }
    Ok(out)
}

/// The arguments of a `log_format` directive found in a configuration.
#[derive(Debug)]
pub(crate) struct Directive {
    /// The format's name.
    pub name: String,
    /// Arguments after the name: optional `escape=…`, then the pieces.
    pub args: Vec<Token>,
}

/// Every `log_format` directive in `tokens`, in order. A directive that runs
/// to the end of the text without `;` is returned too (nginx would reject
/// the file; a user who pasted a truncated snippet still gets their format).
pub(crate) fn log_format_directives(tokens: &[Token]) -> Vec<Directive> {
    let mut out = Vec::new();
    let mut at_start = true;
    let mut i = 0;
    while i < tokens.len() {
        let t = &tokens[i];
        i += 1;
        match t {
            Token::Semi(_) | Token::Open(_) | Token::Close(_) => at_start = true,
            Token::Word { text, quoted, .. } => {
                let is_directive = at_start && !quoted && text == "log_format";
                at_start = false;
                if !is_directive {
                    continue;
                }
                let mut args = Vec::new();
                while i < tokens.len() {
                    match &tokens[i] {
                        Token::Semi(_) | Token::Open(_) | Token::Close(_) => break,
                        w => args.push(w.clone()),
                    }
                    i += 1;
                }
                if args.is_empty() {
                    continue;
                }
                if let Token::Word { text, .. } = args.remove(0) {
                    out.push(Directive { name: text, args });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ts: &[Token]) -> Vec<(String, bool)> {
        ts.iter()
            .filter_map(|t| match t {
                Token::Word { text, quoted, .. } => Some((text.clone(), *quoted)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn quotes_comments_and_escapes() {
        let t =
            tokenize("log_format x # note ' not a quote\n  '$a \\'b\\'' \"c\\\"d\\t\";").unwrap();
        assert_eq!(
            words(&t),
            vec![
                ("log_format".into(), false),
                ("x".into(), false),
                ("$a 'b'".into(), true),
                ("c\"d\t".into(), true),
            ]
        );
        assert!(matches!(t.last(), Some(Token::Semi(_))));
    }

    #[test]
    fn braces_in_variables_do_not_open_blocks() {
        let t = tokenize("log_format x ${host}abc;").unwrap();
        assert_eq!(words(&t)[2], ("${host}abc".to_string(), false));
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn unterminated_quote_says_where() {
        let e = tokenize("http {\n  log_format x '$a\n").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("line 2") && msg.contains("column 16"), "{msg}");
    }

    #[test]
    fn finds_directives_only_at_statement_start() {
        let t = tokenize(
            "http { log_format a '$a'; server { set $x log_format; } }\nlog_format b escape=json '$b'",
        )
        .unwrap();
        let d = log_format_directives(&t);
        let names: Vec<_> = d.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, vec!["a", "b"]);
        assert_eq!(d[1].args.len(), 2);
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
        assert_eq!(line_col("ab", 0), (1, 1));
    }
}
