//! The stand-in's check of Atlassian Document Format bodies: the nodes and
//! marks Jira Cloud accepts, with their required attributes and content
//! rules (doc version 1; no empty text; code mark only with link; list
//! items start with a paragraph or code block; tables hold rows of
//! header/cell nodes that hold blocks; code blocks hold unmarked text).

use serde_json::{Map, Value};

type R = Result<(), String>;

fn obj<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>, String> {
    v.as_object()
        .ok_or_else(|| format!("{at}: a node must be a JSON object"))
}

fn only_keys(o: &Map<String, Value>, allowed: &[&str], at: &str) -> R {
    match o.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!("{at}: unexpected property {k:?}")),
        None => Ok(()),
    }
}

fn content<'a>(o: &'a Map<String, Value>, at: &str, min: usize) -> Result<&'a [Value], String> {
    let c = match o.get("content") {
        None if min == 0 => return Ok(&[]),
        None => return Err(format!("{at}: `content` is required")),
        Some(c) => c
            .as_array()
            .ok_or_else(|| format!("{at}: `content` must be an array"))?,
    };
    if c.len() < min {
        return Err(format!("{at}: needs at least {min} child node(s)"));
    }
    Ok(c)
}

fn ty<'a>(o: &'a Map<String, Value>, at: &str) -> Result<&'a str, String> {
    o.get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{at}: `type` is required"))
}

/// Checks a whole document.
pub fn check_doc(v: &Value) -> R {
    let o = obj(v, "doc")?;
    only_keys(o, &["type", "version", "content"], "doc")?;
    if ty(o, "doc")? != "doc" {
        return Err("the root node must have type \"doc\"".into());
    }
    if o.get("version") != Some(&Value::from(1)) {
        return Err("doc: `version` must be 1".into());
    }
    for (i, n) in content(o, "doc", 0)?.iter().enumerate() {
        block(n, &format!("doc.content[{i}]"))?;
    }
    Ok(())
}

fn block(v: &Value, at: &str) -> R {
    let o = obj(v, at)?;
    let t = ty(o, at)?;
    let at = &format!("{at}({t})");
    match t {
        "paragraph" => {
            only_keys(o, &["type", "content", "marks", "attrs"], at)?;
            inlines(content(o, at, 0)?, at)
        }
        "heading" => {
            only_keys(o, &["type", "content", "marks", "attrs"], at)?;
            let level = o
                .get("attrs")
                .and_then(|a| a.get("level"))
                .and_then(Value::as_u64);
            if !matches!(level, Some(1..=6)) {
                return Err(format!("{at}: attrs.level must be an integer 1-6"));
            }
            inlines(content(o, at, 0)?, at)
        }
        "bulletList" | "orderedList" => {
            only_keys(o, &["type", "content", "attrs"], at)?;
            for (i, item) in content(o, at, 1)?.iter().enumerate() {
                list_item(item, &format!("{at}.content[{i}]"))?;
            }
            Ok(())
        }
        "codeBlock" => {
            only_keys(o, &["type", "content", "attrs", "marks"], at)?;
            if let Some(a) = o.get("attrs") {
                let a = obj(a, at)?;
                only_keys(a, &["language", "uniqueId"], at)?;
                if a.get("language").is_some_and(|l| !l.is_string()) {
                    return Err(format!("{at}: attrs.language must be a string"));
                }
            }
            for (i, n) in content(o, at, 0)?.iter().enumerate() {
                let no = obj(n, at)?;
                if ty(no, at)? != "text" || no.contains_key("marks") {
                    return Err(format!(
                        "{at}.content[{i}]: only unmarked text is allowed in a codeBlock"
                    ));
                }
                text(no, at)?;
            }
            Ok(())
        }
        "table" => {
            only_keys(o, &["type", "content", "attrs", "marks"], at)?;
            if let Some(a) = o.get("attrs") {
                let a = obj(a, at)?;
                only_keys(
                    a,
                    &[
                        "isNumberColumnEnabled",
                        "layout",
                        "localId",
                        "width",
                        "displayMode",
                    ],
                    at,
                )?;
                if a.get("isNumberColumnEnabled")
                    .is_some_and(|b| !b.is_boolean())
                {
                    return Err(format!(
                        "{at}: attrs.isNumberColumnEnabled must be a boolean"
                    ));
                }
            }
            for (i, row) in content(o, at, 1)?.iter().enumerate() {
                let at = &format!("{at}.content[{i}]");
                let ro = obj(row, at)?;
                if ty(ro, at)? != "tableRow" {
                    return Err(format!("{at}: a table holds tableRow nodes"));
                }
                for (j, cell) in content(ro, at, 1)?.iter().enumerate() {
                    let at = &format!("{at}.content[{j}]");
                    let co = obj(cell, at)?;
                    if !matches!(ty(co, at)?, "tableHeader" | "tableCell") {
                        return Err(format!(
                            "{at}: a tableRow holds tableHeader or tableCell nodes"
                        ));
                    }
                    only_keys(co, &["type", "content", "attrs"], at)?;
                    for (k, b) in content(co, at, 1)?.iter().enumerate() {
                        block(b, &format!("{at}.content[{k}]"))?;
                    }
                }
            }
            Ok(())
        }
        "rule" => only_keys(o, &["type"], at),
        "blockquote" => {
            for (i, b) in content(o, at, 1)?.iter().enumerate() {
                block(b, &format!("{at}.content[{i}]"))?;
            }
            Ok(())
        }
        other => Err(format!(
            "{at}: {other:?} is not a block node Jira accepts here"
        )),
    }
}

fn list_item(v: &Value, at: &str) -> R {
    let o = obj(v, at)?;
    if ty(o, at)? != "listItem" {
        return Err(format!("{at}: a list holds listItem nodes"));
    }
    only_keys(o, &["type", "content", "attrs"], at)?;
    let c = content(o, at, 1)?;
    let first = ty(obj(&c[0], at)?, at)?;
    if !matches!(first, "paragraph" | "codeBlock") {
        return Err(format!(
            "{at}: a listItem must start with a paragraph or codeBlock, not {first}"
        ));
    }
    for (i, b) in c.iter().enumerate() {
        let at = &format!("{at}.content[{i}]");
        let bt = ty(obj(b, at)?, at)?;
        if !matches!(bt, "paragraph" | "codeBlock" | "bulletList" | "orderedList") {
            return Err(format!("{at}: {bt} is not allowed in a listItem"));
        }
        block(b, at)?;
    }
    Ok(())
}

fn text(o: &Map<String, Value>, at: &str) -> R {
    match o.get("text").and_then(Value::as_str) {
        Some(t) if !t.is_empty() => Ok(()),
        _ => Err(format!("{at}: a text node needs a non-empty `text`")),
    }
}

fn inlines(nodes: &[Value], at: &str) -> R {
    for (i, n) in nodes.iter().enumerate() {
        let at = &format!("{at}.content[{i}]");
        let o = obj(n, at)?;
        match ty(o, at)? {
            "text" => {
                only_keys(o, &["type", "text", "marks"], at)?;
                text(o, at)?;
                marks(o.get("marks"), at)?;
            }
            "hardBreak" => only_keys(o, &["type", "attrs"], at)?,
            other => {
                return Err(format!(
                    "{at}: {other:?} is not an inline node Jira accepts here"
                ));
            }
        }
    }
    Ok(())
}

fn marks(v: Option<&Value>, at: &str) -> R {
    let Some(v) = v else { return Ok(()) };
    let ms = v
        .as_array()
        .ok_or_else(|| format!("{at}: `marks` must be an array"))?;
    let mut seen = Vec::new();
    for m in ms {
        let mo = obj(m, at)?;
        let t = ty(mo, at)?;
        if seen.contains(&t) {
            return Err(format!("{at}: mark {t} appears twice"));
        }
        seen.push(t);
        match t {
            "strong" | "em" | "code" | "strike" | "underline" => only_keys(mo, &["type"], at)?,
            "link" => {
                if !mo
                    .get("attrs")
                    .and_then(|a| a.get("href"))
                    .is_some_and(Value::is_string)
                {
                    return Err(format!("{at}: a link mark needs attrs.href"));
                }
            }
            "textColor" | "subsup" => {}
            other => return Err(format!("{at}: unknown mark {other:?}")),
        }
    }
    if seen.contains(&"code") && seen.iter().any(|m| *m != "code" && *m != "link") {
        return Err(format!(
            "{at}: the code mark can only be combined with link"
        ));
    }
    Ok(())
}
