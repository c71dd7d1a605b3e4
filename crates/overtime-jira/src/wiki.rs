//! Jira wiki markup (REST v2 text fields) from the report's Markdown.
//!
//! Text is escaped so that a headline such as `llm_prefill_slow` or a
//! trace id in braces renders as written: the markup characters
//! `* _ { } [ ] | ^ ~ + ! ?` get a backslash, a backslash becomes the
//! entity `&#92;` (a doubled backslash is a line break in wiki markup), and
//! a block that would start with `#` or `-` (a list) has it escaped.

use crate::markup::{Block, Inlines, Span, parse};

fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("&#92;"),
            '*' | '_' | '{' | '}' | '[' | ']' | '|' | '^' | '~' | '+' | '!' | '?' => {
                out.push('\\');
                out.push(c);
            }
            '\n' | '\r' => out.push(' '),
            _ => out.push(c),
        }
    }
}

/// Whether a link target is safe to emit as a link (else it stays text).
pub(crate) fn linkable(url: &str) -> bool {
    (url.starts_with("https://") || url.starts_with("http://") || url.starts_with("mailto:"))
        && !url.chars().any(char::is_whitespace)
}

fn span(s: &Span, out: &mut String) {
    let mut inner = String::new();
    if s.code {
        inner.push_str("{{");
        escape(&s.text, &mut inner);
        inner.push_str("}}");
    } else {
        escape(&s.text, &mut inner);
    }
    if s.em {
        inner = format!("_{inner}_");
    }
    if s.strong {
        inner = format!("*{inner}*");
    }
    match s.link.as_deref().filter(|u| linkable(u)) {
        Some(url) => {
            let url = url.replace('|', "%7C").replace(']', "%5D");
            out.push_str(&format!("[{inner}|{url}]"));
        }
        None => out.push_str(&inner),
    }
}

fn inlines(spans: &Inlines) -> String {
    let mut out = String::new();
    for s in spans {
        span(s, &mut out);
    }
    if out.starts_with('#') || out.starts_with('-') {
        out.insert(0, '\\');
    }
    out
}

fn cell(spans: &Inlines) -> String {
    let s = inlines(spans);
    if s.is_empty() { " ".into() } else { s }
}

/// Renders Markdown as Jira wiki markup.
pub(crate) fn from_markdown(md: &str) -> String {
    let mut blocks = Vec::new();
    for b in parse(md) {
        blocks.push(match b {
            Block::Heading(level, s) => format!("h{level}. {}", inlines(&s)),
            Block::Paragraph(s) => inlines(&s),
            Block::Bullets(items) => items
                .iter()
                .map(|i| format!("* {}", inlines(i)))
                .collect::<Vec<_>>()
                .join("\n"),
            Block::Numbered(items) => items
                .iter()
                .map(|i| format!("# {}", inlines(i)))
                .collect::<Vec<_>>()
                .join("\n"),
            Block::Table { header, rows } => {
                let mut t = Vec::new();
                if let Some(h) = header {
                    t.push(format!(
                        "||{}||",
                        h.iter().map(cell).collect::<Vec<_>>().join("||")
                    ));
                }
                for r in rows {
                    t.push(format!(
                        "|{}|",
                        r.iter().map(cell).collect::<Vec<_>>().join("|")
                    ));
                }
                t.join("\n")
            }
            Block::Code { lang, text } => {
                if text.contains("{code") || text.contains("{noformat}") {
                    format!(
                        "{{noformat}}\n{}\n{{noformat}}",
                        text.replace("{noformat}", "{ noformat}")
                    )
                } else {
                    match lang.filter(|l| l.chars().all(|c| c.is_ascii_alphanumeric())) {
                        Some(l) => format!("{{code:{l}}}\n{text}\n{{code}}"),
                        None => format!("{{code}}\n{text}\n{{code}}"),
                    }
                }
            }
            Block::Rule => "----".into(),
        });
    }
    let mut out = blocks.join("\n\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_becomes_wiki_markup() {
        let w = from_markdown("## Cause\n\n| a | b |\n|---|---|\n| `x_y` | **2** |\n");
        assert_eq!(w, "h2. Cause\n\n||a||b||\n|{{x\\_y}}|*2*|\n");
    }

    #[test]
    fn markup_characters_in_text_are_escaped() {
        let w =
            from_markdown("llm_prefill_slow on {model} [x] a|b 2^3 ~1 +1 !img! who? back\\slash");
        assert_eq!(
            w,
            "llm\\_prefill\\_slow on \\{model\\} \\[x\\] a\\|b 2\\^3 \\~1 \\+1 \\!img\\! who\\? back&#92;slash\n"
        );
    }

    #[test]
    fn lists_links_rules_and_code() {
        let w = from_markdown(
            "- one\n- [report](https://o.example/r?a=1|2)\n\n1. first\n\n---\n\n```json\n{\"a\":1}\n```\n\n# 1 cause",
        );
        assert_eq!(
            w,
            "* one\n* [report|https://o.example/r?a=1%7C2]\n\n# first\n\n----\n\n{code:json}\n{\"a\":1}\n{code}\n\nh1. 1 cause\n"
        );
        // a paragraph starting with '#' or '-' is not a list
        assert_eq!(from_markdown("#1 of 3"), "\\#1 of 3\n");
    }

    #[test]
    fn empty_cells_do_not_turn_into_header_separators() {
        assert_eq!(from_markdown("| a |  |\n"), "|a| |\n");
    }
}
