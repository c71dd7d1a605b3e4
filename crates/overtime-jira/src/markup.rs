//! The Markdown that overtime's reports are written in, read into a small
//! document tree that [`crate::wiki`] and [`crate::adf`] render.
//!
//! Supported (what `overtime-diagnose`'s Markdown uses, and a little
//! more): ATX headings, paragraphs, `-`/`*`/`+` bullet lists, `1.` ordered
//! lists, pipe tables (header row when followed by a `|---|` row), fenced
//! code blocks, `---` rules; inline `code`, `**strong**`, `*emphasis*` and
//! `[text](url)` links. Anything else stays literal text — nothing is
//! dropped.

/// A run of text with its marks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Span {
    pub(crate) text: String,
    pub(crate) strong: bool,
    pub(crate) em: bool,
    pub(crate) code: bool,
    pub(crate) link: Option<String>,
}

/// A table cell, list item or heading: inline content.
pub(crate) type Inlines = Vec<Span>;

/// A block of the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Block {
    Heading(u8, Inlines),
    Paragraph(Inlines),
    Bullets(Vec<Inlines>),
    Numbered(Vec<Inlines>),
    Table {
        header: Option<Vec<Inlines>>,
        rows: Vec<Vec<Inlines>>,
    },
    Code {
        lang: Option<String>,
        text: String,
    },
    Rule,
}

fn heading(line: &str) -> Option<(u8, &str)> {
    let t = line.trim_start();
    let hashes = t.chars().take_while(|&c| c == '#').count();
    let rest = &t[hashes..];
    if (1..=6).contains(&hashes) && (rest.is_empty() || rest.starts_with(' ')) {
        Some((hashes as u8, rest.trim().trim_end_matches('#').trim_end()))
    } else {
        None
    }
}

fn bullet(line: &str) -> Option<&str> {
    let t = line.trim_start();
    ["- ", "* ", "+ "]
        .iter()
        .find_map(|p| t.strip_prefix(p))
        .filter(|_| !is_rule(line))
}

fn numbered(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let digits = t.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 || digits > 9 {
        return None;
    }
    t[digits..]
        .strip_prefix(". ")
        .or_else(|| t[digits..].strip_prefix(") "))
}

fn is_rule(line: &str) -> bool {
    let t: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    t.len() >= 3
        && (t.chars().all(|c| c == '-')
            || t.chars().all(|c| c == '*')
            || t.chars().all(|c| c == '_'))
}

fn is_table_row(line: &str) -> bool {
    line.trim_start().starts_with('|')
}

fn cells(line: &str) -> Vec<String> {
    let t = line.trim();
    let t = t.strip_prefix('|').unwrap_or(t);
    let t = t
        .strip_suffix('|')
        .filter(|s| !s.ends_with('\\'))
        .unwrap_or(t);
    let mut out = vec![String::new()];
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            _ => out.last_mut().unwrap().push(c),
        }
    }
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

fn is_separator(line: &str) -> bool {
    let cs = cells(line);
    !cs.is_empty()
        && cs.iter().all(|c| {
            let c = c.trim_matches(':');
            !c.is_empty() && c.chars().all(|x| x == '-')
        })
}

/// Reads Markdown into blocks.
pub(crate) fn parse(md: &str) -> Vec<Block> {
    let lines: Vec<&str> = md.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim();
        if trimmed.is_empty() {
            i += 1;
        } else if let Some(fence) = ["```", "~~~"].iter().find(|f| trimmed.starts_with(**f)) {
            let lang = trimmed[fence.len()..].trim();
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].trim().starts_with(fence) {
                body.push(lines[i]);
                i += 1;
            }
            i += 1; // the closing fence (or the end)
            out.push(Block::Code {
                lang: (!lang.is_empty()).then(|| lang.to_string()),
                text: body.join("\n"),
            });
        } else if let Some((level, text)) = heading(line) {
            out.push(Block::Heading(level, inline(text)));
            i += 1;
        } else if is_rule(line) {
            out.push(Block::Rule);
            i += 1;
        } else if is_table_row(line) {
            let mut header = None;
            let mut rows = Vec::new();
            if i + 1 < lines.len() && is_separator(lines[i + 1]) {
                header = Some(cells(line).iter().map(|c| inline(c)).collect());
                i += 2;
            }
            while i < lines.len() && is_table_row(lines[i]) {
                rows.push(cells(lines[i]).iter().map(|c| inline(c)).collect());
                i += 1;
            }
            out.push(Block::Table { header, rows });
        } else if bullet(line).is_some() {
            let mut items = Vec::new();
            while let Some(item) = lines.get(i).and_then(|l| bullet(l)) {
                items.push(inline(item.trim()));
                i += 1;
            }
            out.push(Block::Bullets(items));
        } else if numbered(line).is_some() {
            let mut items = Vec::new();
            while let Some(item) = lines.get(i).and_then(|l| numbered(l)) {
                items.push(inline(item.trim()));
                i += 1;
            }
            out.push(Block::Numbered(items));
        } else {
            let mut para = vec![trimmed];
            i += 1;
            while let Some(l) = lines.get(i) {
                let t = l.trim();
                if t.is_empty()
                    || heading(l).is_some()
                    || bullet(l).is_some()
                    || numbered(l).is_some()
                    || is_table_row(l)
                    || is_rule(l)
                    || t.starts_with("```")
                    || t.starts_with("~~~")
                {
                    break;
                }
                para.push(t);
                i += 1;
            }
            out.push(Block::Paragraph(inline(&para.join(" "))));
        }
    }
    out
}

fn push(out: &mut Vec<Span>, text: &str, strong: bool, em: bool, code: bool, link: Option<&str>) {
    if text.is_empty() {
        return;
    }
    if let Some(last) = out.last_mut()
        && last.strong == strong
        && last.em == em
        && last.code == code
        && last.link.as_deref() == link
    {
        last.text.push_str(text);
        return;
    }
    out.push(Span {
        text: text.to_string(),
        strong,
        em,
        code,
        link: link.map(str::to_string),
    });
}

/// Reads one line of inline Markdown into spans (adjacent spans with the
/// same marks are merged; no span is empty).
pub(crate) fn inline(s: &str) -> Inlines {
    let mut out = Vec::new();
    let (mut strong, mut em) = (false, false);
    let mut rest = s;
    let mut text = String::new();
    let flush = |out: &mut Vec<Span>, text: &mut String, strong, em| {
        push(out, text, strong, em, false, None);
        text.clear();
    };
    while let Some(c) = rest.chars().next() {
        let after = &rest[c.len_utf8()..];
        if c == '\\' && after.starts_with(|x: char| "\\`*_[]()|#".contains(x)) {
            let x = after.chars().next().unwrap();
            text.push(x);
            rest = &after[x.len_utf8()..];
        } else if c == '`' {
            match after.find('`') {
                Some(end) if end > 0 => {
                    flush(&mut out, &mut text, strong, em);
                    push(&mut out, &after[..end], strong, em, true, None);
                    rest = &after[end + 1..];
                }
                _ => {
                    text.push(c);
                    rest = after;
                }
            }
        } else if rest.starts_with("**") && (strong || rest[2..].contains("**")) {
            flush(&mut out, &mut text, strong, em);
            strong = !strong;
            rest = &rest[2..];
        } else if rest.starts_with("**") {
            text.push_str("**");
            rest = &rest[2..];
        } else if c == '*'
            && (em || (after.contains('*') && !after.starts_with(char::is_whitespace)))
        {
            flush(&mut out, &mut text, strong, em);
            em = !em;
            rest = after;
        } else if c == '[' {
            let link = after.find("](").and_then(|close| {
                let url_part = &after[close + 2..];
                url_part
                    .find(')')
                    .map(|end| (&after[..close], &url_part[..end], &url_part[end + 1..]))
            });
            match link {
                Some((label, url, tail)) if !url.is_empty() && !url.contains(' ') => {
                    flush(&mut out, &mut text, strong, em);
                    let label = if label.is_empty() { url } else { label };
                    push(&mut out, label, strong, em, false, Some(url));
                    rest = tail;
                }
                _ => {
                    text.push(c);
                    rest = after;
                }
            }
        } else {
            text.push(c);
            rest = after;
        }
    }
    flush(&mut out, &mut text, strong, em);
    out
}

/// The plain text of spans (what the tests compare cells by).
#[cfg(test)]
fn plain(spans: &[Span]) -> String {
    spans.iter().map(|s| s.text.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_marks_and_links() {
        let s = inline("a **b** `c` [d](http://e)");
        assert_eq!(s.len(), 6);
        assert!(s[1].strong && s[3].code);
        assert_eq!(s[5].link.as_deref(), Some("http://e"));
    }

    #[test]
    fn headings_and_bullets_parse() {
        let doc = parse("## Title\n\n- one\n- two\n");
        assert!(matches!(&doc[0], Block::Heading(2, _)));
        assert!(matches!(&doc[1], Block::Bullets(items) if items.len() == 2));
    }

    #[test]
    fn the_diagnosis_report_shape_parses() {
        let md = "## 73 % of 504s came from llm_prefill_slow on m\n\n- incident `a:b@t` (open), 3 failing traces\n- window s → e\n\n### Causes\n\n| cause | component | traces | share |\n|---|---|---:|---:|\n| llm_prefill_slow | m | 3 | 75 % |\n| tool_timeout | search | 1 | 25 % |\n\n### Findings\n\n- **no_timeout** (2 traces): x\n";
        let doc = parse(md);
        assert_eq!(doc.len(), 6, "{doc:#?}");
        match &doc[3] {
            Block::Table { header, rows } => {
                assert_eq!(header.as_ref().unwrap().len(), 4);
                assert_eq!(rows.len(), 2);
                assert_eq!(plain(&rows[1][3]), "25 %");
            }
            other => panic!("{other:?}"),
        }
        match &doc[5] {
            Block::Bullets(items) => assert!(items[0][0].strong),
            other => panic!("{other:?}"),
        }
        // snake_case is not emphasis
        match &doc[0] {
            Block::Heading(2, s) => assert_eq!(s.len(), 1),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn code_fences_rules_and_unclosed_marks_stay_literal() {
        let doc = parse("```json\n{\"a\": 1}\n```\n---\n2 * 3 and **open\n");
        assert_eq!(
            doc[0],
            Block::Code {
                lang: Some("json".into()),
                text: "{\"a\": 1}".into()
            }
        );
        assert_eq!(doc[1], Block::Rule);
        assert_eq!(
            doc[2],
            Block::Paragraph(vec![Span {
                text: "2 * 3 and **open".into(),
                ..Default::default()
            }])
        );
    }

    #[test]
    fn table_without_separator_has_no_header_and_escaped_pipes_stay() {
        let doc = parse("| a \\| b | c |\n| d | e |\n");
        match &doc[0] {
            Block::Table { header: None, rows } => {
                assert_eq!(plain(&rows[0][0]), "a | b");
                assert_eq!(rows.len(), 2);
            }
            other => panic!("{other:?}"),
        }
    }
}
