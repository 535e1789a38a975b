//! Errors as the OpenAI API shapes them: `{"error": {"message", "type", "param", "code"}}`
//! with the matching HTTP status, so OpenAI clients raise their usual exceptions.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// A request the endpoint refuses or could not serve.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// 400: the request is wrong; `param` names the field.
    #[error("{message}")]
    BadRequest {
        /// What is wrong and what to do.
        message: String,
        /// The field, e.g. `messages[2].role`.
        param: Option<String>,
        /// A machine-readable code (`context_length_exceeded`).
        code: Option<&'static str>,
    },
    /// 401: the API key is missing or wrong.
    #[error("{0}")]
    Unauthorized(String),
    /// 404: no such route or session.
    #[error("{0}")]
    NotFound(String),
    /// 409: the session has ended.
    #[error("{0}")]
    Conflict(String),
    /// 413: the request body is over the limit.
    #[error("{0}")]
    TooLarge(String),
    /// 429: too many sessions alive.
    #[error("{0}")]
    TooMany(String),
    /// 503: no generation slot freed within the queue wait.
    #[error("{0}")]
    Busy(String),
    /// 500: the policy failed.
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    /// A 400 naming `param`.
    pub fn bad(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::BadRequest {
            message: message.into(),
            param: Some(param.into()),
            code: None,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The error object of the body.
    pub fn body(&self) -> serde_json::Value {
        let (kind, param, code) = match self {
            Self::BadRequest { param, code, .. } => (
                "invalid_request_error",
                param.clone(),
                code.map(String::from),
            ),
            Self::Unauthorized(_) => ("authentication_error", None, None),
            Self::NotFound(_) => ("not_found_error", None, None),
            Self::Conflict(_) => ("conflict_error", None, None),
            Self::TooLarge(_) => (
                "invalid_request_error",
                None,
                Some("request_too_large".into()),
            ),
            Self::TooMany(_) => ("rate_limit_error", None, Some("too_many_sessions".into())),
            Self::Busy(_) => ("server_busy", None, None),
            Self::Internal(_) => ("server_error", None, None),
        };
        json!({"error": {"message": self.to_string(), "type": kind, "param": param, "code": code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body().to_string();
        (
            self.status(),
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response()
    }
}
