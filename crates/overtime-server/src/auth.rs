//! Optional bearer token on every route but `/healthz` and `/readyz`.
//! The token is compared in constant time and never logged. Browsers may
//! carry it in the `overtime_token` cookie (set by `POST /ui/login`); `/`
//! without a valid token shows the sign-in page.

use crate::error::ApiError;
use crate::AppState;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub async fn require_token(
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
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(String::from)
        // Browsers: the cookie set by POST /ui/login (see ui_routes).
        .or_else(|| crate::ui_routes::cookie_token(req.headers()));
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
        Some(g) if constant_time_eq(g.trim().as_bytes(), token.as_bytes()) => next.run(req).await,
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
