//! The server side of the UI: the pages and assets of `overtime-ui`
//! (behind the token like the API), the sign-in that turns the bearer
//! token into an `HttpOnly` cookie for browsers (which cannot send a
//! header on navigation), and `GET /api/traces/{id}/events`: per span,
//! the stream chunk/heartbeat and DNS/connect events the verdict leaves
//! out, so the waterfall can draw the gaps between chunks.

use crate::AppState;
use crate::error::ApiError;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use overtime_model::{SpanRecord, span_records};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The cookie that carries the token.
pub(crate) const TOKEN_COOKIE: &str = "overtime_token";

static FAILED_SIGN_INS: AtomicU64 = AtomicU64::new(0);

/// Routes that need the token (mount before the auth layer): the UI's
/// page and assets, and the events extension of the traces API.
pub(crate) fn protected() -> Router<Arc<AppState>> {
    overtime_ui::router().route("/api/traces/{id}/events", get(trace_events))
}

/// Routes open to everyone (mount after the auth layer): sign in and out.
pub(crate) fn open() -> Router<Arc<AppState>> {
    Router::new()
        .route("/ui/login", post(login))
        .route("/ui/logout", post(logout))
}

/// The value of `name` in an `application/x-www-form-urlencoded` body.
pub(crate) fn form_value(body: &str, name: &str) -> Option<String> {
    form_urlencoded::parse(body.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// Decodes `%XX` escapes; a malformed escape is kept as written.
pub(crate) fn percent_decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// Percent-encodes everything but unreserved characters, so any token
/// fits in a cookie value.
pub(crate) fn percent_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED_ONLY).to_string()
}

/// What [`percent_encode`] escapes: all but RFC 3986's unreserved characters.
const UNRESERVED_ONLY: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The token in the request's `overtime_token` cookie, decoded.
pub(crate) fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| {
            let (k, v) = c.trim().split_once('=')?;
            (k == TOKEN_COOKIE).then(|| percent_decode(v))
        })
}

fn cookie(value: &str, secure: bool, max_age: Option<u32>) -> HeaderValue {
    let mut c = format!("{TOKEN_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict");
    if secure {
        c.push_str("; Secure");
    }
    if let Some(s) = max_age {
        c.push_str(&format!("; Max-Age={s}"));
    }
    HeaderValue::from_str(&c).expect("a percent-encoded cookie is a valid header")
}

/// Behind a TLS-terminating proxy the cookie is marked `Secure`.
fn via_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

fn see_other(to: &'static str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to)]).into_response()
}

/// `POST /ui/login` with the form field `token`: the cookie and back to
/// `/` when it is right; the sign-in page again, 401, when not.
async fn login(State(s): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(want) = s.token.as_deref() else {
        return see_other("/"); // no token configured: nothing to sign in to
    };
    let given = std::str::from_utf8(&body)
        .ok()
        .and_then(|b| form_value(b, "token"))
        .unwrap_or_default();
    if given.is_empty() {
        return overtime_ui::login_response(
            StatusCode::BAD_REQUEST,
            Some("enter the API token (the value of the server's token variable)"),
        );
    }
    if !crate::auth::constant_time_eq(given.trim().as_bytes(), want.as_bytes()) {
        let n = FAILED_SIGN_INS.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!("overtime: UI sign-in refused: wrong token ({n} refused since start)");
        return overtime_ui::login_response(StatusCode::UNAUTHORIZED, Some("that token is wrong"));
    }
    let mut resp = see_other("/");
    resp.headers_mut().insert(
        header::SET_COOKIE,
        cookie(&percent_encode(given.trim()), via_https(&headers), None),
    );
    resp
}

/// `POST /ui/logout`: the cookie expires.
async fn logout(headers: HeaderMap) -> Response {
    let mut resp = see_other("/");
    resp.headers_mut()
        .insert(header::SET_COOKIE, cookie("", via_https(&headers), Some(0)));
    resp
}

/// The events of one span, offsets from the span's own start.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct SpanEvents {
    pub events: Vec<EventAt>,
    pub dns_ms: Option<f64>,
    pub connect_ms: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct EventAt {
    pub name: String,
    /// From the span's start, ms (may be negative with a skewed clock).
    pub offset_ms: f64,
    pub duration_ms: Option<f64>,
}

/// Per span id (each span counted once however often it arrived), the
/// events in time order and the DNS/connect fields; spans with neither
/// are left out.
pub(crate) fn span_events(spans: &[SpanRecord]) -> BTreeMap<String, SpanEvents> {
    let mut seen = HashSet::new();
    let mut out = BTreeMap::new();
    for s in spans {
        if !seen.insert(s.span_id.as_str()) {
            continue;
        }
        if s.events.is_empty() && s.dns_ms.is_none() && s.connect_ms.is_none() {
            continue;
        }
        let mut events: Vec<EventAt> = s
            .events
            .iter()
            .map(|e| EventAt {
                name: e.name.clone(),
                offset_ms: (e.time_us - s.start_us) as f64 / 1000.0,
                duration_ms: e.duration_ms,
            })
            .collect();
        events.sort_by(|a, b| a.offset_ms.total_cmp(&b.offset_ms));
        out.insert(
            s.span_id.clone(),
            SpanEvents {
                events,
                dns_ms: s.dns_ms,
                connect_ms: s.connect_ms,
            },
        );
    }
    out
}

/// `GET /api/traces/{id}/events`: `{"trace_id", "spans": {span_id:
/// {"events": [{"name", "offset_ms", "duration_ms"}], "dns_ms",
/// "connect_ms"}}, "event_count"}` from the store.
async fn trace_events(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = id.to_ascii_lowercase();
    if id.is_empty() || id.len() > 64 || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(ApiError::bad_request(
            "bad_trace_id",
            format!("{id:?} is not a trace id (32 hex)"),
        ));
    }
    // The spans a peer has not flushed yet too (docs/deploy.md).
    let from_peers = match crate::api::peer_query(&s, &None) {
        Some(pq) => {
            use overtime_store::PeerSource;
            pq.unflushed(overtime_model::Table::Spans, None, None, Some(&id))
                .await
        }
        None => Vec::new(),
    };
    let store = s.store.clone();
    let lookup = id.clone();
    let (rows, bad) = tokio::task::spawn_blocking(move || -> Result<_, String> {
        let (_, batches) = store
            .trace_with(&lookup, &[], &from_peers)
            .map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        let mut bad = 0usize;
        for b in &batches {
            match span_records(b) {
                Ok(r) => rows.extend(r),
                Err(_) => bad += b.num_rows(),
            }
        }
        Ok((rows, bad))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "store", e))?;
    if rows.is_empty() && bad == 0 {
        return Err(ApiError::not_found(format!(
            "no spans for trace {id} in the store"
        )));
    }
    let spans = span_events(&rows);
    let count: usize = spans.values().map(|e| e.events.len()).sum();
    Ok(Json(serde_json::json!({
        "trace_id": id, "spans": spans, "event_count": count, "unreadable_rows": bad,
    }))
    .into_response())
}

#[cfg(test)]
mod encoding {
    //! The form, percent-encoding and cookie helpers of the sign-in.
    use super::{cookie_token, form_value, percent_decode, percent_encode};
    use axum::http::{HeaderMap, header};

    #[test]
    fn form_value_decodes_the_named_field() {
        assert_eq!(
            form_value("a=1&token=s%3Dx+y", "token").as_deref(),
            Some("s=x y")
        );
        assert_eq!(form_value("a=1", "token"), None);
    }

    #[test]
    fn percent_decode_keeps_a_malformed_escape() {
        assert_eq!(percent_decode("a%20b%zz%e2%9c%93"), "a b%zz✓");
    }

    #[test]
    fn percent_encode_escapes_all_but_unreserved_and_round_trips() {
        assert_eq!(percent_encode("a b;c=d"), "a%20b%3Bc%3Dd");
        assert_eq!(percent_decode(&percent_encode("t;k=✓")), "t;k=✓");
    }

    #[test]
    fn cookie_token_reads_the_token_cookie_decoded() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            "a=1; overtime_token=s%3Bx; b=2".parse().unwrap(),
        );
        assert_eq!(cookie_token(&h).as_deref(), Some("s;x"));
    }
}

#[cfg(test)]
mod tests {
    //! Sign-in and the events endpoint through the real router, over a
    //! store fed with incident C through the pipeline's sink.
    use super::*;
    use crate::pipeline::DiagnosingSink;

    /// Sign-ins refused for a wrong token since the process started.
    fn failed_sign_ins() -> u64 {
        FAILED_SIGN_INS.load(Ordering::Relaxed)
    }
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use overtime_model::{RecordSink, SpanEvent, Table};
    use overtime_parse::nginx::{GatewayParser, LogFormat};
    use overtime_parse::spans::{SpanFormat, parse_span_bytes};
    use overtime_store::{Store, StoreConfig};
    use std::path::PathBuf;
    use tower::ServiceExt;

    const TOKEN: &str = "s3cret; with=odd chars";
    /// Incident C: the weather call's attempts carry `dns` and `connect`
    /// events (the first 2 777 ms and 2 816 ms after it began), the final
    /// LLM call three `chunk`s.
    const TRACE: &str = "fea3fee5ae62810f06634febe1cb424d";

    fn fixture(f: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/incidents/c_dns_retry")
            .join(f)
    }

    fn state(dir: &std::path::Path, token: Option<&str>) -> Arc<AppState> {
        let store = Store::open(StoreConfig {
            data_dir: dir.to_path_buf(),
            // The fixtures are older than the default retention.
            retention_age_hours: None,
            ..Default::default()
        })
        .unwrap();
        let s = Arc::new(AppState {
            token: token.map(String::from),
            ..AppState::with_defaults(store)
        });
        let sink = DiagnosingSink { state: s.clone() };
        let body = std::fs::read_to_string(fixture("log_format.txt")).unwrap();
        let mut p = GatewayParser::new(LogFormat::compile(&body).unwrap(), "access", 0);
        p.push_bytes(&std::fs::read(fixture("access.log")).unwrap(), 1);
        sink.write(Table::GatewayRequests, p.finish().0, None)
            .unwrap();
        let spans = parse_span_bytes(
            SpanFormat::Jsonl,
            &std::fs::read(fixture("spans.jsonl")).unwrap(),
            "spans.jsonl",
        );
        sink.write(Table::Spans, spans.to_batches().0, None)
            .unwrap();
        crate::pipeline::tick(&s);
        s
    }

    struct Answer {
        status: StatusCode,
        headers: HeaderMap,
        body: String,
    }

    async fn call(s: &Arc<AppState>, req: Request<Body>) -> Answer {
        let resp = crate::router(s.clone()).oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        Answer {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    fn get(uri: &str, cookie: Option<&str>) -> Request<Body> {
        let mut r = Request::builder().uri(uri);
        if let Some(c) = cookie {
            r = r.header(header::COOKIE, c);
        }
        r.body(Body::empty()).unwrap()
    }

    fn login_req(token: &str) -> Request<Body> {
        Request::builder()
            .method("POST")
            .uri("/ui/login")
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(format!("token={}", percent_encode(token))))
            .unwrap()
    }

    #[tokio::test]
    async fn a_browser_signs_in_with_the_token_and_then_rides_on_the_cookie() {
        let dir = tempfile::tempdir().unwrap();
        let s = state(dir.path(), Some(TOKEN));

        // Not signed in: the page is the sign-in form, the API says why.
        let page = call(&s, get("/", None)).await;
        assert_eq!(page.status, StatusCode::UNAUTHORIZED);
        assert!(page.body.contains("action=\"/ui/login\""), "{}", page.body);
        assert_eq!(
            call(&s, get("/assets/app.js", None)).await.status,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            call(&s, get("/api/traces", None)).await.status,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(call(&s, get("/healthz", None)).await.status, StatusCode::OK);

        // A wrong token: the form again, with the reason, and no cookie.
        let before = failed_sign_ins();
        let wrong = call(&s, login_req("guess")).await;
        assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
        assert!(wrong.body.contains("that token is wrong"));
        assert!(wrong.headers.get(header::SET_COOKIE).is_none());
        assert!(failed_sign_ins() > before);
        let empty = call(&s, login_req("")).await;
        assert_eq!(empty.status, StatusCode::BAD_REQUEST);

        // The right one: an HttpOnly, SameSite=Strict cookie and back to /.
        let ok = call(&s, login_req(TOKEN)).await;
        assert_eq!(ok.status, StatusCode::SEE_OTHER);
        assert_eq!(ok.headers[header::LOCATION], "/");
        let set = ok.headers[header::SET_COOKIE].to_str().unwrap().to_string();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/"),
            "{set}"
        );
        assert!(!set.contains("Secure"), "plain http on localhost: {set}");
        let cookie = set.split(';').next().unwrap().to_string();
        assert!(
            !cookie.contains(' '),
            "the token is encoded in the cookie: {cookie}"
        );

        let page = call(&s, get("/", Some(&cookie))).await;
        assert_eq!(page.status, StatusCode::OK);
        assert!(page.body.contains("/assets/app.js?v="));
        let list = call(
            &s,
            get("/api/traces?kind=upstream_connect_slow", Some(&cookie)),
        )
        .await;
        assert_eq!(list.status, StatusCode::OK);
        let v: serde_json::Value = serde_json::from_str(&list.body).unwrap();
        assert_eq!(v["total"], 23);

        // A stale cookie: sign in again, with a reason.
        let stale = call(&s, get("/", Some("overtime_token=old"))).await;
        assert_eq!(stale.status, StatusCode::UNAUTHORIZED);
        assert!(stale.body.contains("no longer valid"));

        // Behind TLS the cookie is Secure; signing out expires it.
        let mut tls = login_req(TOKEN);
        tls.headers_mut()
            .insert("x-forwarded-proto", HeaderValue::from_static("https"));
        let set = call(&s, tls).await.headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .to_string();
        assert!(set.contains("; Secure"), "{set}");
        let out = call(
            &s,
            Request::builder()
                .method("POST")
                .uri("/ui/logout")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(out.status, StatusCode::SEE_OTHER);
        assert!(
            out.headers[header::SET_COOKIE]
                .to_str()
                .unwrap()
                .contains("Max-Age=0")
        );
    }

    #[tokio::test]
    async fn without_a_token_the_ui_is_served_at_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let s = state(dir.path(), None);
        let page = call(&s, get("/", None)).await;
        assert_eq!(page.status, StatusCode::OK);
        assert_eq!(
            page.headers[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        let css = call(&s, get("/assets/app.css", None)).await;
        assert_eq!(css.headers[header::CONTENT_TYPE], "text/css; charset=utf-8");
        assert!(css.headers.contains_key(header::ETAG));
        // Signing in is a no-op, not an error.
        assert_eq!(call(&s, login_req("x")).await.status, StatusCode::SEE_OTHER);
    }

    #[tokio::test]
    async fn the_events_of_a_trace_come_from_the_store_per_span() {
        let dir = tempfile::tempdir().unwrap();
        let s = state(dir.path(), None);
        let a = call(
            &s,
            get(
                &format!("/api/traces/{}/events", TRACE.to_uppercase()),
                None,
            ),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.body);
        let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
        assert_eq!(v["trace_id"], TRACE);
        let first = &v["spans"]["32ec5a74180213e0"]["events"];
        assert_eq!(first[0]["name"], "dns");
        assert_eq!(first[0]["offset_ms"], 2777.0);
        assert_eq!(first[1]["name"], "connect");
        assert_eq!(first[1]["offset_ms"], 2816.0);
        // Spans with no events and no DNS/connect fields are left out.
        assert!(v["spans"].get("d963829fde20b307").is_none());
        // The final LLM call streamed three chunks.
        let chunks = &v["spans"]["e7095ea309f399a0"]["events"];
        assert_eq!(chunks.as_array().unwrap().len(), 3);
        assert!(
            chunks
                .as_array()
                .unwrap()
                .iter()
                .all(|e| e["name"] == "chunk")
        );
        assert_eq!(v["event_count"], 2 + 2 + 3);

        let none = call(
            &s,
            get(&format!("/api/traces/{}/events", "0".repeat(32)), None),
        )
        .await;
        assert_eq!(none.status, StatusCode::NOT_FOUND);
        assert!(none.body.contains("no spans"));
        let bad = call(&s, get("/api/traces/%3Cscript%3E/events", None)).await;
        assert_eq!(bad.status, StatusCode::BAD_REQUEST);
        assert!(bad.body.contains("bad_trace_id"));
    }

    #[tokio::test]
    async fn traces_are_found_by_trace_id_or_request_id_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let s = state(dir.path(), None);
        let find = |q: String| {
            let s = s.clone();
            async move {
                let a = call(&s, get(&format!("/api/traces?{q}"), None)).await;
                assert_eq!(a.status, StatusCode::OK, "{}", a.body);
                serde_json::from_str::<serde_json::Value>(&a.body).unwrap()
            }
        };
        let by_id = find(format!("trace_id={}", &TRACE[..10].to_uppercase())).await;
        assert_eq!(by_id["total"], 1);
        assert_eq!(by_id["traces"][0]["trace_id"], TRACE);
        let rid = by_id["traces"][0]["request_id"]
            .as_str()
            .unwrap()
            .to_string();
        let by_rid = find(format!("request_id={}", &rid[..12])).await;
        assert_eq!(by_rid["total"], 1);
        assert_eq!(by_rid["traces"][0]["trace_id"], TRACE);
        // Empty filters are no filters; filters combine.
        assert_eq!(
            find("trace_id=&request_id=&kind=".into()).await["total"],
            23
        );
        assert_eq!(
            find(format!("trace_id={TRACE}&kind=tool_slow")).await["total"],
            0
        );
    }

    #[test]
    fn each_span_counts_once_and_its_events_are_in_time_order() {
        let mut a = SpanRecord::new(TRACE, "a", "svc", "stream", 1_000_000, 9_000_000);
        for (name, t) in [
            ("chunk", 3_000_000),
            ("chunk", 1_500_000),
            ("heartbeat", 2_000_000),
        ] {
            a.events.push(SpanEvent {
                name: name.into(),
                time_us: t,
                duration_ms: None,
            });
        }
        let mut b = SpanRecord::new(TRACE, "b", "svc", "fetch", 1_000_000, 2_000_000);
        b.dns_ms = Some(12.5);
        let c = SpanRecord::new(TRACE, "c", "svc", "plain", 1_000_000, 2_000_000);
        let out = span_events(&[a.clone(), b, c, a]);
        assert_eq!(out.len(), 2);
        let offsets: Vec<f64> = out["a"].events.iter().map(|e| e.offset_ms).collect();
        assert_eq!(offsets, vec![500.0, 1000.0, 2000.0]);
        assert_eq!(out["b"].dns_ms, Some(12.5));
        assert!(out["b"].events.is_empty());
    }
}
