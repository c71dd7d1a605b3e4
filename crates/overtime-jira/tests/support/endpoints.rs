//! The stand-in's endpoints: search (Cloud `search/jql`, Data Center
//! `search`), create issue, comments and transitions, each checking its
//! request against Atlassian's documented shape.

use super::{Answer, Comment, Ctx, Flavor, Issue, PROJECT, State, adf_check, err, jira_time};
use chrono::Utc;
use serde_json::{Map, Value, json};
use std::collections::HashMap;

pub(super) fn url_pairs(q: &str) -> HashMap<String, String> {
    fn dec(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len() => {
                    let h = u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap_or(b'?');
                    out.push(h);
                    i += 2;
                }
                x => out.push(x),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (dec(k), dec(v))
        })
        .collect()
}

/// `project = KEY AND labels = "label" ORDER BY updated DESC`, keywords in
/// any case, project quoted or not. Returns the label.
pub(super) fn parse_jql(jql: &str) -> Result<(String, String), String> {
    let mut toks = Vec::new();
    let mut chars = jql.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
        } else if c == '"' {
            chars.next();
            let mut t = String::new();
            loop {
                match chars.next() {
                    Some('"') => break,
                    Some(x) => t.push(x),
                    None => return Err("unterminated string".into()),
                }
            }
            toks.push((t, true));
        } else if c == '=' {
            chars.next();
            toks.push(("=".into(), false));
        } else {
            let mut t = String::new();
            while let Some(&x) = chars.peek() {
                if x.is_whitespace() || x == '=' || x == '"' {
                    break;
                }
                t.push(x);
                chars.next();
            }
            toks.push((t, false));
        }
    }
    let kw = |i: usize, w: &str| {
        toks.get(i)
            .is_some_and(|(t, q)| !q && t.eq_ignore_ascii_case(w))
    };
    if toks.len() != 11
        || !kw(0, "project")
        || !kw(1, "=")
        || !kw(3, "and")
        || !kw(4, "labels")
        || !kw(5, "=")
        || !kw(7, "order")
        || !kw(8, "by")
        || !kw(9, "updated")
        || !kw(10, "desc")
    {
        return Err(format!(
            "Error in the JQL Query: expected `project = KEY AND labels = \"label\" ORDER BY updated DESC`, got {jql:?}"
        ));
    }
    let label = &toks[6];
    if !label.1 && label.0.contains('-') {
        return Err("Error in the JQL Query: a label with '-' must be quoted".into());
    }
    Ok((toks[2].0.clone(), label.0.clone()))
}

pub(super) const ISSUE_FIELDS: [&str; 6] = [
    "summary",
    "status",
    "resolutiondate",
    "updated",
    "labels",
    "issuetype",
];

pub(super) fn search(
    s: &State,
    ctx: &Ctx,
    jql: &str,
    fields: &[String],
    max: Option<i64>,
) -> Answer {
    let (project, label) = match parse_jql(jql) {
        Ok(x) => x,
        Err(e) => return err(400, &[&e], json!({})),
    };
    if project != PROJECT {
        return err(
            400,
            &[&format!(
                "The value '{project}' does not exist for the field 'project'."
            )],
            json!({}),
        );
    }
    if let Some(f) = fields
        .iter()
        .find(|f| !ISSUE_FIELDS.contains(&f.as_str()) && f.as_str() != "*all")
    {
        return err(400, &[&format!("unknown field {f:?}")], json!({}));
    }
    let max = match max {
        None => 50,
        Some(m) if (1..=5000).contains(&m) => m as usize,
        Some(m) => {
            return err(
                400,
                &[&format!("maxResults {m} is out of range")],
                json!({}),
            );
        }
    };
    let mut hits: Vec<&Issue> = s
        .issues
        .iter()
        .filter(|i| i.labels.contains(&label))
        .collect();
    hits.sort_by_key(|i| std::cmp::Reverse(i.updated));
    let issues: Vec<Value> = hits
        .iter()
        .take(max)
        .map(|i| issue_json(ctx, i, fields))
        .collect();
    match ctx.flavor {
        Flavor::Cloud => (200, json!({"issues": issues, "isLast": true})),
        Flavor::DataCenter => (
            200,
            json!({"startAt": 0, "maxResults": max, "total": hits.len(), "issues": issues}),
        ),
    }
}

pub(super) fn issue_json(ctx: &Ctx, i: &Issue, fields: &[String]) -> Value {
    let all = fields.iter().any(|f| f == "*all");
    let want = |f: &str| all || fields.iter().any(|x| x == f);
    let mut out = Map::new();
    if want("summary") {
        out.insert("summary".into(), json!(i.summary));
    }
    if want("status") {
        let (name, cat) = if i.done {
            ("Done", "done")
        } else {
            ("Open", "new")
        };
        out.insert(
            "status".into(),
            json!({"name": name, "statusCategory": {"key": cat, "name": name}}),
        );
    }
    if want("resolutiondate") {
        out.insert(
            "resolutiondate".into(),
            i.resolved.map(jira_time).map_or(Value::Null, Value::from),
        );
    }
    if want("updated") {
        out.insert("updated".into(), json!(jira_time(i.updated)));
    }
    if want("labels") {
        out.insert("labels".into(), json!(i.labels));
    }
    if want("issuetype") {
        out.insert("issuetype".into(), json!({"name": i.issue_type}));
    }
    json!({"id": i.id.to_string(), "key": i.key, "self": format!("{}/rest/api/{}/issue/{}", ctx.base, ctx.version, i.id), "fields": out})
}

pub(super) fn search_post(s: &State, ctx: &Ctx, body: Value) -> Answer {
    let Some(o) = body.as_object() else {
        return err(400, &["The request body must be a JSON object."], json!({}));
    };
    let allowed: &[&str] = match ctx.flavor {
        Flavor::Cloud => &[
            "jql",
            "fields",
            "maxResults",
            "nextPageToken",
            "expand",
            "properties",
            "fieldsByKeys",
            "failFast",
            "reconcileIssues",
        ],
        Flavor::DataCenter => &[
            "jql",
            "fields",
            "maxResults",
            "startAt",
            "expand",
            "properties",
            "fieldsByKeys",
            "validateQuery",
        ],
    };
    if let Some(k) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
        return err(400, &[&format!("Unrecognized field \"{k}\"")], json!({}));
    }
    let Some(jql) = o.get("jql").and_then(Value::as_str) else {
        return err(400, &["jql is required and must be a string"], json!({}));
    };
    let fields: Vec<String> = match o.get("fields") {
        None => vec![],
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {
            a.iter().map(|f| f.as_str().unwrap().to_string()).collect()
        }
        Some(_) => return err(400, &["fields must be an array of strings"], json!({})),
    };
    let max = match o.get("maxResults") {
        None => None,
        Some(m) => match m.as_i64() {
            Some(m) => Some(m),
            None => return err(400, &["maxResults must be an integer"], json!({})),
        },
    };
    search(s, ctx, jql, &fields, max)
}

pub(super) fn search_get(s: &State, ctx: &Ctx, q: &HashMap<String, String>) -> Answer {
    let Some(jql) = q.get("jql") else {
        return err(400, &["jql is required"], json!({}));
    };
    let fields: Vec<String> = q
        .get("fields")
        .map(|f| {
            f.split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let max = match q.get("maxResults").map(|m| m.parse::<i64>()) {
        None => None,
        Some(Ok(m)) => Some(m),
        Some(Err(_)) => return err(400, &["maxResults must be an integer"], json!({})),
    };
    search(s, ctx, jql, &fields, max)
}

pub(super) fn check_text(ctx: &Ctx, v: &Value, what: &str) -> Result<(), String> {
    if ctx.version == 2 {
        if v.is_string() {
            Ok(())
        } else {
            Err(format!("{what}: REST v2 takes a string (wiki markup)"))
        }
    } else {
        adf_check::check_doc(v).map_err(|e| format!("{what}: Operation value must be an Atlassian Document (see the Atlassian Document Format): {e}"))
    }
}

pub(super) fn create(s: &mut State, ctx: &Ctx, body: Value) -> Answer {
    let Some(o) = body.as_object() else {
        return err(400, &["The request body must be a JSON object."], json!({}));
    };
    if let Some(k) = o.keys().find(|k| {
        ![
            "fields",
            "update",
            "properties",
            "transition",
            "historyMetadata",
        ]
        .contains(&k.as_str())
    }) {
        return err(400, &[&format!("Unrecognized field \"{k}\"")], json!({}));
    }
    let Some(f) = o.get("fields").and_then(Value::as_object) else {
        return err(400, &[], json!({"fields": "fields is required"}));
    };
    let mut errors = Map::new();
    for k in f.keys() {
        if ![
            "project",
            "summary",
            "issuetype",
            "description",
            "labels",
            "priority",
            "components",
        ]
        .contains(&k.as_str())
        {
            errors.insert(
                k.clone(),
                json!(format!(
                    "Field '{k}' cannot be set. It is not on the appropriate screen, or unknown."
                )),
            );
        }
    }
    let project = f
        .get("project")
        .and_then(|p| p.get("key").or_else(|| p.get("id")))
        .and_then(Value::as_str);
    if project != Some(PROJECT) {
        errors.insert("project".into(), json!("Specify a valid project ID or key"));
    }
    let summary = f.get("summary").and_then(Value::as_str).unwrap_or("");
    if summary.trim().is_empty() {
        errors.insert(
            "summary".into(),
            json!("You must specify a summary of the issue."),
        );
    } else if summary.chars().count() > 255 {
        errors.insert(
            "summary".into(),
            json!("Summary must be less than 255 characters."),
        );
    } else if summary.contains('\n') || summary.contains('\r') {
        errors.insert(
            "summary".into(),
            json!("The summary is invalid because it contains newline characters."),
        );
    }
    let issue_type = f
        .get("issuetype")
        .and_then(|t| t.get("name").or_else(|| t.get("id")))
        .and_then(Value::as_str)
        .unwrap_or("");
    if !["Bug", "Task", "Incident", "10001"].contains(&issue_type) {
        errors.insert("issuetype".into(), json!("Specify an issue type"));
    }
    if let Some(d) = f.get("description")
        && let Err(e) = check_text(ctx, d, "description")
    {
        errors.insert("description".into(), json!(e));
    }
    let labels: Vec<String> = match f.get("labels") {
        None => vec![],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|l| l.as_str().map(str::to_string))
            .collect(),
        Some(_) => {
            errors.insert("labels".into(), json!("labels must be an array of strings"));
            vec![]
        }
    };
    if let Some(bad) = labels
        .iter()
        .find(|l| l.contains(' ') || l.is_empty() || l.len() > 255)
    {
        errors.insert(
            "labels".into(),
            json!(format!(
                "The label '{bad}' contains spaces which is invalid."
            )),
        );
    }
    if !errors.is_empty() {
        return err(400, &[], Value::Object(errors));
    }
    s.next_id += 1;
    let id = s.next_id;
    let key = format!("{PROJECT}-{}", s.issues.len() + 1);
    s.issues.push(Issue {
        id,
        key: key.clone(),
        summary: summary.to_string(),
        issue_type: issue_type.to_string(),
        description: f.get("description").cloned().unwrap_or(Value::Null),
        labels,
        done: false,
        resolved: None,
        updated: Utc::now(),
        comments: vec![],
    });
    (
        201,
        json!({"id": id.to_string(), "key": key, "self": format!("{}/rest/api/{}/issue/{id}", ctx.base, ctx.version)}),
    )
}

pub(super) fn no_issue() -> Answer {
    err(
        404,
        &["Issue does not exist or you do not have permission to see it."],
        json!({}),
    )
}

pub(super) fn add_comment(s: &mut State, ctx: &Ctx, key: &str, body: Value) -> Answer {
    let Some(o) = body.as_object() else {
        return err(400, &["The request body must be a JSON object."], json!({}));
    };
    if let Some(k) = o
        .keys()
        .find(|k| !["body", "visibility", "properties"].contains(&k.as_str()))
    {
        return err(400, &[&format!("Unrecognized field \"{k}\"")], json!({}));
    }
    let Some(b) = o.get("body") else {
        return err(
            400,
            &[],
            json!({"comment": "Comment body can not be empty!"}),
        );
    };
    if let Err(e) = check_text(ctx, b, "body") {
        return err(400, &[], json!({"comment": e}));
    }
    if b.as_str().is_some_and(|t| t.trim().is_empty()) {
        return err(
            400,
            &[],
            json!({"comment": "Comment body can not be empty!"}),
        );
    }
    let Some(i) = s.issues.iter_mut().find(|i| i.key == key) else {
        return no_issue();
    };
    let id = 20_000 + i.comments.len() as u64;
    let now = Utc::now();
    i.comments.push(Comment {
        id,
        body: b.clone(),
        created: now,
    });
    i.updated = now;
    (
        201,
        json!({"id": id.to_string(), "body": b, "created": jira_time(now)}),
    )
}

pub(super) fn list_comments(s: &State, key: &str, q: &HashMap<String, String>) -> Answer {
    let Some(i) = s.issues.iter().find(|i| i.key == key) else {
        return no_issue();
    };
    let mut cs: Vec<&Comment> = i.comments.iter().collect();
    match q.get("orderBy").map(String::as_str) {
        None | Some("created") | Some("+created") => {}
        Some("-created") => cs.reverse(),
        Some(o) => {
            return err(
                400,
                &[&format!("orderBy {o:?} is not supported")],
                json!({}),
            );
        }
    }
    let max = q
        .get("maxResults")
        .and_then(|m| m.parse::<usize>().ok())
        .unwrap_or(50);
    let page: Vec<Value> = cs
        .iter()
        .take(max)
        .map(|c| json!({"id": c.id.to_string(), "body": c.body, "created": jira_time(c.created)}))
        .collect();
    (
        200,
        json!({"startAt": 0, "maxResults": max, "total": cs.len(), "comments": page}),
    )
}

pub(super) fn available(s: &State, i: &Issue) -> Vec<(&'static str, &'static str)> {
    if i.done {
        if s.reopen_available {
            vec![("3", "Reopen")]
        } else {
            vec![("5", "Archive")]
        }
    } else {
        vec![("31", "Done")]
    }
}

pub(super) fn transitions(s: &State, key: &str) -> Answer {
    let Some(i) = s.issues.iter().find(|i| i.key == key) else {
        return no_issue();
    };
    let ts: Vec<Value> = available(s, i)
        .into_iter()
        .map(|(id, name)| {
            let to = if id == "31" {
                ("Done", "done")
            } else {
                ("Open", "new")
            };
            json!({"id": id, "name": name, "to": {"name": to.0, "statusCategory": {"key": to.1}}})
        })
        .collect();
    (200, json!({"expand": "transitions", "transitions": ts}))
}

pub(super) fn transition(s: &mut State, key: &str, body: Value) -> Answer {
    let Some(o) = body.as_object() else {
        return err(400, &["The request body must be a JSON object."], json!({}));
    };
    if let Some(k) = o.keys().find(|k| {
        ![
            "transition",
            "fields",
            "update",
            "historyMetadata",
            "properties",
        ]
        .contains(&k.as_str())
    }) {
        return err(400, &[&format!("Unrecognized field \"{k}\"")], json!({}));
    }
    let Some(id) = o
        .get("transition")
        .and_then(|t| t.get("id"))
        .and_then(Value::as_str)
    else {
        return err(400, &["Missing 'transition' identifier"], json!({}));
    };
    let Some(pos) = s.issues.iter().position(|i| i.key == key) else {
        return no_issue();
    };
    let ok = available(s, &s.issues[pos])
        .iter()
        .any(|(tid, _)| *tid == id);
    if !ok {
        return err(
            400,
            &[&format!(
                "Transition id '{id}' is not valid for this issue."
            )],
            json!({}),
        );
    }
    let i = &mut s.issues[pos];
    let now = Utc::now();
    match id {
        "3" => {
            i.done = false;
            i.resolved = None;
        }
        "31" => {
            i.done = true;
            i.resolved = Some(now);
        }
        _ => {}
    }
    i.updated = now;
    (204, Value::Null)
}
