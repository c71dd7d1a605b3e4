//! Optional bearer token on every route but `/healthz` and `/readyz`.
//! The token is compared in constant time and never logged. Browsers may
//! carry it in the `overtime_token` cookie (set by `POST /ui/login`); `/`
//! without a valid token shows the sign-in page.

use crate::AppState;
use crate::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// On every answer to a request signed in by the browser's session cookie.
pub(crate) const SESSION_HEADER: &str = "x-overtime-session";

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) async fn require_token(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(token) = state.token.as_deref() else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    if path == "/healthz" || path == "/readyz" {
        return next.run(req).await;
    }
    let bearer = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(String::from);
    let by_cookie = bearer.is_none();
    // Browsers: the cookie set by POST /ui/login (see ui_routes).
    let given = bearer.or_else(|| crate::ui_routes::cookie_token(req.headers()));
    if path == "/"
        && !given
            .as_deref()
            .is_some_and(|g| constant_time_eq(g.trim().as_bytes(), token.as_bytes()))
    {
        let why = given
            .is_some()
            .then_some("the saved token is no longer valid; sign in again");
        return overtime_ui::login_response(StatusCode::UNAUTHORIZED, why);
    }
    match given {
        Some(g) if constant_time_eq(g.trim().as_bytes(), token.as_bytes()) => {
            let mut answer = next.run(req).await;
            if by_cookie {
                // A signed-in browser session: the UI shows "Sign out"
                // only then (without a token there is nothing to sign out of).
                answer
                    .headers_mut()
                    .insert(SESSION_HEADER, header::HeaderValue::from_static("cookie"));
            }
            answer
        }
        Some(_) => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "bad_token",
            "the bearer token is wrong",
        )
        .into_response(),
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "no_token",
            "this route needs Authorization: Bearer <token>",
        )
        .into_response(),
    }
}
