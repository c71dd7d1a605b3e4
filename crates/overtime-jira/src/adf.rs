//! Atlassian Document Format (REST v3 rich-text fields) from the report's
//! Markdown: `doc` version 1 with paragraphs, headings, bullet and ordered
//! lists, tables (header row as `tableHeader` cells), code blocks and rules.
//!
//! What ADF demands and this module keeps: no empty `text` node; a text
//! node with the `code` mark carries no other mark but `link`; list items
//! start with a paragraph; every table cell holds a paragraph; table rows
//! are padded to the widest row; link marks only on http(s)/mailto URLs.

use crate::markup::{Block, Inlines, parse};
use crate::wiki::linkable;
use serde_json::{Value, json};

fn text_nodes(spans: &Inlines) -> Vec<Value> {
    spans
        .iter()
        .filter(|s| !s.text.is_empty())
        .map(|s| {
            let mut marks = Vec::new();
            if s.code {
                marks.push(json!({"type": "code"}));
            } else {
                if s.strong {
                    marks.push(json!({"type": "strong"}));
                }
                if s.em {
                    marks.push(json!({"type": "em"}));
                }
            }
            if let Some(url) = s.link.as_deref().filter(|u| linkable(u)) {
                marks.push(json!({"type": "link", "attrs": {"href": url}}));
            }
            let text = s.text.replace(['\n', '\r'], " ");
            if marks.is_empty() {
                json!({"type": "text", "text": text})
            } else {
                json!({"type": "text", "text": text, "marks": marks})
            }
        })
        .collect()
}

/// A paragraph of spans (an empty paragraph has no `content`).
pub(crate) fn paragraph(spans: &Inlines) -> Value {
    let content = text_nodes(spans);
    if content.is_empty() {
        json!({"type": "paragraph"})
    } else {
        json!({"type": "paragraph", "content": content})
    }
}

fn list(kind: &str, items: &[Inlines]) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|i| json!({"type": "listItem", "content": [paragraph(i)]}))
        .collect();
    json!({"type": kind, "content": items})
}

fn table(header: Option<Vec<Inlines>>, rows: Vec<Vec<Inlines>>) -> Value {
    let width = header
        .iter()
        .chain(rows.iter())
        .map(Vec::len)
        .max()
        .unwrap_or(1)
        .max(1);
    let row = |cells: &[Inlines], kind: &str| {
        let mut out: Vec<Value> = cells
            .iter()
            .map(|c| json!({"type": kind, "attrs": {}, "content": [paragraph(c)]}))
            .collect();
        while out.len() < width {
            out.push(json!({"type": kind, "attrs": {}, "content": [{"type": "paragraph"}]}));
        }
        json!({"type": "tableRow", "content": out})
    };
    let mut content = Vec::new();
    if let Some(h) = &header {
        content.push(row(h, "tableHeader"));
    }
    for r in &rows {
        content.push(row(r, "tableCell"));
    }
    json!({
        "type": "table",
        "attrs": {"isNumberColumnEnabled": false, "layout": "default"},
        "content": content
    })
}

/// Top-level block nodes of Markdown.
pub(crate) fn blocks(md: &str) -> Vec<Value> {
    parse(md)
        .into_iter()
        .filter_map(|b| match b {
            Block::Heading(level, s) => {
                let content = text_nodes(&s);
                Some(json!({"type": "heading", "attrs": {"level": level}, "content": content}))
            }
            Block::Paragraph(s) => Some(paragraph(&s)),
            Block::Bullets(items) => Some(list("bulletList", &items)),
            Block::Numbered(items) => Some(list("orderedList", &items)),
            Block::Table { header, rows } if header.is_some() || !rows.is_empty() => {
                Some(table(header, rows))
            }
            Block::Table { .. } => None,
            Block::Code { lang, text } => {
                let mut node = json!({"type": "codeBlock"});
                if let Some(l) = lang {
                    node["attrs"] = json!({ "language": l });
                }
                if !text.is_empty() {
                    node["content"] = json!([{"type": "text", "text": text}]);
                }
                Some(node)
            }
            Block::Rule => Some(json!({"type": "rule"})),
        })
        .collect()
}

/// A whole ADF document from block nodes.
pub(crate) fn doc(content: Vec<Value>) -> Value {
    json!({"type": "doc", "version": 1, "content": content})
}

/// Renders Markdown as an ADF document.
pub(crate) fn from_markdown(md: &str) -> Value {
    doc(blocks(md))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_becomes_an_adf_document() {
        let d = from_markdown("## Cause\n\n- `x` on **m**\n");
        assert_eq!(d["type"], "doc");
        assert_eq!(d["version"], 1);
        assert_eq!(d["content"][0]["type"], "heading");
        assert_eq!(d["content"][0]["attrs"]["level"], 2);
        assert_eq!(d["content"][1]["content"][0]["type"], "listItem");
    }

    #[test]
    fn table_header_cells_and_padding() {
        let d = from_markdown("| a | b |\n|---|---|\n| 1 |\n");
        let t = &d["content"][0];
        assert_eq!(t["type"], "table");
        assert_eq!(t["content"][0]["content"][1]["type"], "tableHeader");
        let row = t["content"][1]["content"].as_array().unwrap();
        assert_eq!(row.len(), 2);
        assert_eq!(row[1]["content"][0], json!({"type": "paragraph"}));
    }

    #[test]
    fn code_mark_stands_alone_and_bad_links_stay_text() {
        let d = from_markdown("**`x`** [y](javascript:alert) [z](https://z.example)");
        let p = d["content"][0]["content"].as_array().unwrap();
        assert_eq!(p[0]["marks"], json!([{"type": "code"}]));
        assert!(p.iter().all(|n| n["text"] != ""));
        let y = p.iter().find(|n| n["text"] == "y").unwrap();
        assert!(y.get("marks").is_none());
        let z = p.iter().find(|n| n["text"] == "z").unwrap();
        assert_eq!(z["marks"][0]["attrs"]["href"], "https://z.example");
    }

    #[test]
    fn code_blocks_keep_language_and_text() {
        let d = from_markdown("```sql\nselect 1\n```\n");
        assert_eq!(
            d["content"][0],
            json!({"type": "codeBlock", "attrs": {"language": "sql"}, "content": [{"type": "text", "text": "select 1"}]})
        );
    }
}
