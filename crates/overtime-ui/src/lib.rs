//! # overtime-ui
//!
//! The trace timeline UI of `overtime serve` (docs/interfaces.md, "the UI at `/`"):
//! trace search, the waterfall of one trace against its budget, the
//! incident reports with their charts over time, the overview and the
//! advice. One page, a few scripts and one stylesheet, vanilla JS
//! with no framework and no CDN, compiled into the binary with
//! `include_str!` so the UI works offline and always matches the API it
//! was built with.
//!
//! [`router`] serves `/` and `/assets/…` with their content types, an
//! `ETag` (a `304` on `If-None-Match`) and `Cache-Control`: the page is
//! revalidated on every load, and it links the assets with a `?v=<hash>`
//! of their content, so a versioned asset can be cached for a year.
//! [`login_response`] is the sign-in form the server shows at `/` when it
//! wants a token and the browser has none.
//!
//! These two are the whole public surface: the embedded files, their
//! hashes and the header values are the crate's own business.
//!
//! ```
//! let app: axum::Router = overtime_ui::router();
//! # let _ = app;
//! ```

#![warn(missing_docs)]

mod assets;

use assets::{Asset, asset};

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The `Content-Security-Policy` of every UI page: scripts and styles only
/// from this server (inline `style` attributes allowed for bar geometry),
/// no frames, no third-party requests.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The UI's routes: `GET /` (the page) and `GET /assets/{file}`.
///
/// Generic over the state so it merges into any router; it reads none.
///
/// ```
/// use std::sync::Arc;
/// let api: axum::Router<Arc<()>> = axum::Router::new();
/// let app: axum::Router = api.merge(overtime_ui::router()).with_state(Arc::new(()));
/// # let _ = app;
/// ```
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/assets/{file}", get(asset_route))
}

async fn index(headers: HeaderMap) -> Response {
    serve(assets::index(), &headers, false)
}

async fn asset_route(
    axum::extract::Path(file): axum::extract::Path<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
) -> Response {
    let Some(a) = asset(&file) else {
        return (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!(
                "no UI asset {file:?}; the UI has index.html, app.js, advice.js, charts.js, app.css"
            ),
        )
            .into_response();
    };
    // Only a link that names this very content may be cached for good.
    let pinned = query
        .as_deref()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("v=")))
        .is_some_and(|v| v == a.version());
    serve(a, &headers, pinned)
}

/// Whether an `If-None-Match` header value matches `etag` (a list, weak
/// tags and `*` included).
fn etag_matches(if_none_match: &str, etag: &str) -> bool {
    if_none_match
        .split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t) == etag)
}

fn serve(a: &Asset, headers: &HeaderMap, pinned: bool) -> Response {
    let cache = if pinned {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let etag = a.etag();
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| etag_matches(v, &etag));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, a.content_type)], a.body.clone()).into_response()
    };
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    security_headers(h);
    resp
}

fn security_headers(h: &mut HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

/// Escapes text for HTML element content and attribute values.
fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The sign-in page: a form that posts the token to `POST /ui/login`
/// (which sets the `overtime_token` cookie), with `message` (escaped)
/// above it when the last attempt failed. Self-contained: the assets
/// themselves need the token.
fn login_page(message: Option<&str>) -> String {
    let msg = message
        .map(|m| {
            format!(
                "<p id=\"login-error\" role=\"alert\">{}</p>",
                escape_html(m)
            )
        })
        .unwrap_or_default();
    assets::LOGIN_HTML.replace("<!--MESSAGE-->", &msg)
}

/// The sign-in page as a response with `status` (401 when a token is
/// needed): a form that posts the token to `POST /ui/login` (which sets
/// the `overtime_token` cookie), with `message` (HTML-escaped) above it
/// when the last attempt failed (`None`: no message). Never cached, with
/// the UI's security headers; self-contained, since the assets themselves
/// need the token.
///
/// ```
/// use axum::http::StatusCode;
/// let resp = overtime_ui::login_response(StatusCode::UNAUTHORIZED, Some("the token is wrong"));
/// assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
/// assert_eq!(resp.headers()["cache-control"], "no-store");
/// ```
pub fn login_response(status: StatusCode, message: Option<&str>) -> Response {
    let mut resp = (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        login_page(message),
    )
        .into_response();
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    security_headers(h);
    resp
}

#[cfg(test)]
mod tests;
