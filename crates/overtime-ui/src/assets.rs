//! The embedded files, their content types and their content hashes.

use axum::body::Bytes;
use std::sync::OnceLock;

const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const ADVICE_JS: &str = include_str!("../assets/advice.js");
const CHARTS_JS: &str = include_str!("../assets/charts.js");
const APP_CSS: &str = include_str!("../assets/app.css");
pub(crate) const LOGIN_HTML: &str = include_str!("../assets/login.html");

/// One embedded file.
#[derive(Debug, Clone)]
pub(crate) struct Asset {
    /// The file name under `/assets/` (`index.html` is served at `/`).
    pub(crate) name: &'static str,
    /// The `Content-Type` it is served with.
    pub(crate) content_type: &'static str,
    /// The content, as served.
    pub(crate) body: Bytes,
    hash: u64,
}

impl Asset {
    fn new(name: &'static str, content_type: &'static str, body: Bytes) -> Self {
        let hash = fnv1a(&body);
        Asset {
            name,
            content_type,
            body,
            hash,
        }
    }

    /// A short hash of the content (16 hex digits): the `?v=` the page
    /// links this file with.
    pub(crate) fn version(&self) -> String {
        format!("{:016x}", self.hash)
    }

    /// The strong `ETag` of the content (quoted).
    pub(crate) fn etag(&self) -> String {
        format!("\"{}\"", self.version())
    }
}

/// FNV-1a, 64 bits: stable across builds and platforms, enough to tell
/// two versions of a file apart (this is not a security boundary).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

struct Set {
    index: Asset,
    files: [Asset; 4],
}

fn set() -> &'static Set {
    static SET: OnceLock<Set> = OnceLock::new();
    SET.get_or_init(|| {
        let js = Asset::new(
            "app.js",
            "text/javascript; charset=utf-8",
            Bytes::from_static(APP_JS.as_bytes()),
        );
        let advice = Asset::new(
            "advice.js",
            "text/javascript; charset=utf-8",
            Bytes::from_static(ADVICE_JS.as_bytes()),
        );
        let charts = Asset::new(
            "charts.js",
            "text/javascript; charset=utf-8",
            Bytes::from_static(CHARTS_JS.as_bytes()),
        );
        let css = Asset::new(
            "app.css",
            "text/css; charset=utf-8",
            Bytes::from_static(APP_CSS.as_bytes()),
        );
        let page = INDEX_HTML
            .replace("__APP_JS__", &format!("/assets/app.js?v={}", js.version()))
            .replace(
                "__ADVICE_JS__",
                &format!("/assets/advice.js?v={}", advice.version()),
            )
            .replace(
                "__CHARTS_JS__",
                &format!("/assets/charts.js?v={}", charts.version()),
            )
            .replace(
                "__APP_CSS__",
                &format!("/assets/app.css?v={}", css.version()),
            );
        Set {
            index: Asset::new("index.html", "text/html; charset=utf-8", Bytes::from(page)),
            files: [js, advice, charts, css],
        }
    })
}

/// The page served at `/`, its asset links pinned to their versions.
pub(crate) fn index() -> &'static Asset {
    &set().index
}

/// The embedded file `name` under `/assets/`, if there is one.
pub(crate) fn asset(name: &str) -> Option<&'static Asset> {
    set().files.iter().find(|a| a.name == name)
}
