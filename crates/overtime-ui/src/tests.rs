//! The UI routes as a browser meets them: content types, revalidation,
//! versioned links, caching, and the sign-in page.

use super::*;
use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use tower::ServiceExt;

async fn get(uri: &str, if_none_match: Option<&str>) -> (StatusCode, HeaderMap, String) {
    let mut req = Request::builder().uri(uri);
    if let Some(tag) = if_none_match {
        req = req.header(header::IF_NONE_MATCH, tag);
    }
    let resp = router::<()>()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8(body.to_vec()).unwrap())
}

fn h(headers: &HeaderMap, name: header::HeaderName) -> &str {
    headers
        .get(&name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

#[tokio::test]
async fn the_page_links_its_assets_by_content_version() {
    let (status, headers, body) = get("/", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        h(&headers, header::CONTENT_TYPE),
        "text/html; charset=utf-8"
    );
    assert_eq!(h(&headers, header::CACHE_CONTROL), "no-cache");
    assert!(h(&headers, header::CONTENT_SECURITY_POLICY).contains("script-src 'self'"));
    let js = asset("app.js").unwrap();
    let css = asset("app.css").unwrap();
    assert!(
        body.contains(&format!("src=\"/assets/app.js?v={}\"", js.version())),
        "{body}"
    );
    assert!(body.contains(&format!("href=\"/assets/app.css?v={}\"", css.version())));
    let advice = asset("advice.js").unwrap();
    assert!(
        body.contains(&format!("src=\"/assets/advice.js?v={}\"", advice.version())),
        "{body}"
    );
    assert!(
        body.contains("href=\"#/advice\""),
        "the Advice page is in the nav"
    );
    let charts = asset("charts.js").unwrap();
    assert!(
        body.contains(&format!("src=\"/assets/charts.js?v={}\"", charts.version())),
        "{body}"
    );
    assert!(
        body.contains("href=\"#/overview\""),
        "the Overview page is in the nav"
    );
    assert!(
        !body.contains("__APP_") && !body.contains("__ADVICE_") && !body.contains("__CHARTS_"),
        "a placeholder was left in the page"
    );
    // No third-party origin anywhere: the UI must work offline.
    for text in [
        body.as_str(),
        APP_JS_TEXT,
        APP_CSS_TEXT,
        ADVICE_JS_TEXT,
        CHARTS_JS_TEXT,
    ] {
        assert!(
            !text.contains("http://") && !text.contains("https://"),
            "an absolute URL in an asset"
        );
    }
}

const APP_JS_TEXT: &str = include_str!("../assets/app.js");
const ADVICE_JS_TEXT: &str = include_str!("../assets/advice.js");
const APP_CSS_TEXT: &str = include_str!("../assets/app.css");
const CHARTS_JS_TEXT: &str = include_str!("../assets/charts.js");

#[tokio::test]
async fn assets_have_their_content_types_and_the_embedded_bytes() {
    let (status, headers, body) = get("/assets/app.js", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        h(&headers, header::CONTENT_TYPE),
        "text/javascript; charset=utf-8"
    );
    assert_eq!(body, APP_JS_TEXT);
    let (status, headers, body) = get("/assets/app.css", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(h(&headers, header::CONTENT_TYPE), "text/css; charset=utf-8");
    assert_eq!(body, APP_CSS_TEXT);
    assert_eq!(h(&headers, header::X_CONTENT_TYPE_OPTIONS), "nosniff");
    let (status, headers, body) = get("/assets/advice.js", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        h(&headers, header::CONTENT_TYPE),
        "text/javascript; charset=utf-8"
    );
    assert_eq!(body, ADVICE_JS_TEXT);
    let (_, _, body) = get("/assets/charts.js", None).await;
    assert_eq!(body, CHARTS_JS_TEXT);
}

#[tokio::test]
async fn a_pinned_link_is_cached_for_good_an_unpinned_one_revalidates() {
    let js = asset("app.js").unwrap();
    let (_, pinned, _) = get(&format!("/assets/app.js?v={}", js.version()), None).await;
    assert_eq!(
        h(&pinned, header::CACHE_CONTROL),
        "public, max-age=31536000, immutable"
    );
    let (_, stale, _) = get("/assets/app.js?v=0000000000000000", None).await;
    assert_eq!(h(&stale, header::CACHE_CONTROL), "no-cache");
    let (_, bare, _) = get("/assets/app.js", None).await;
    assert_eq!(h(&bare, header::CACHE_CONTROL), "no-cache");
}

#[tokio::test]
async fn a_known_etag_gets_304_without_a_body() {
    let (_, headers, _) = get("/assets/app.css", None).await;
    let tag = h(&headers, header::ETAG).to_string();
    assert!(tag.starts_with('"') && tag.ends_with('"'), "{tag}");
    let (status, again, body) = get("/assets/app.css", Some(&tag)).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());
    assert_eq!(h(&again, header::ETAG), tag);
    let (status, _, body) = get("/assets/app.css", Some("\"something-else\"")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.is_empty());
    // The page too.
    let (_, headers, _) = get("/", None).await;
    let tag = h(&headers, header::ETAG).to_string();
    assert_eq!(get("/", Some(&tag)).await.0, StatusCode::NOT_MODIFIED);
}

#[tokio::test]
async fn an_unknown_asset_is_a_404_that_names_what_exists() {
    let (status, _, body) = get("/assets/nope.js", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("app.js"), "{body}");
    // No way out of the embedded set.
    assert_eq!(
        get("/assets/..%2FCargo.toml", None).await.0,
        StatusCode::NOT_FOUND
    );
}

#[test]
fn the_login_page_escapes_its_message_and_posts_the_token() {
    let html = login_page(Some("<script>alert(1)</script>"));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(!html.contains("<script>alert"));
    assert!(html.contains("name=\"token\""));
    assert!(html.contains("method=\"post\" action=\"/ui/login\""));
    assert!(!login_page(None).contains("id=\"login-error\""));
    let resp = login_response(StatusCode::UNAUTHORIZED, None);
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(h(resp.headers(), header::CACHE_CONTROL), "no-store");
}

#[test]
fn versions_differ_when_content_differs() {
    let js = asset("app.js").unwrap();
    let css = asset("app.css").unwrap();
    assert_ne!(js.version(), css.version());
    assert_eq!(js.etag(), format!("\"{}\"", js.version()));
}

#[test]
fn if_none_match_lists_weak_tags_and_star() {
    assert!(etag_matches("\"abc\"", "\"abc\""));
    assert!(etag_matches("W/\"abc\", \"x\"", "\"abc\""));
    assert!(etag_matches("*", "\"abc\""));
    assert!(!etag_matches("\"abd\"", "\"abc\""));
}

#[test]
fn html_escaping_and_asset_lookup() {
    assert_eq!(
        escape_html("<a href=\"x\">&'"),
        "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
    );
    assert_eq!(asset("app.js").unwrap().version().len(), 16);
    assert_eq!(
        asset("app.css").unwrap().content_type,
        "text/css; charset=utf-8"
    );
    assert!(asset("../Cargo.toml").is_none());
}
