//! API errors: a status and a JSON body `{"error": "...", "reason": "..."}`
//! where `reason` is a short stable code a client can match on.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub reason: &'static str,
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(
        status: StatusCode,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            reason,
            message: message.into(),
        }
    }
    pub(crate) fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", what)
    }
    pub(crate) fn bad_request(reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, reason, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message, "reason": self.reason });
        (self.status, Json(body)).into_response()
    }
}
