//! Lambda's error answers: a status, the error's name in `x-amzn-ErrorType`
//! (where AWS's SDKs read it) and `{"Type": "User", "Message": ...}`.
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug)]
pub struct LambdaError {
    pub status: StatusCode,
    /// the exception's name (`ResourceNotFoundException`, ...)
    pub kind: String,
    pub message: String,
}

impl LambdaError {
    pub fn new(status: StatusCode, kind: &str, message: impl Into<String>) -> LambdaError {
        LambdaError {
            status,
            kind: kind.to_string(),
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> LambdaError {
        LambdaError::new(StatusCode::NOT_FOUND, "ResourceNotFoundException", message)
    }

    pub fn conflict(message: impl Into<String>) -> LambdaError {
        LambdaError::new(StatusCode::CONFLICT, "ResourceConflictException", message)
    }

    pub fn invalid(message: impl Into<String>) -> LambdaError {
        LambdaError::new(
            StatusCode::BAD_REQUEST,
            "InvalidParameterValueException",
            message,
        )
    }

    pub fn too_large(message: impl Into<String>) -> LambdaError {
        LambdaError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLargeException",
            message,
        )
    }

    pub fn too_many(message: impl Into<String>) -> LambdaError {
        LambdaError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequestsException",
            message,
        )
    }

    pub fn service(message: impl Into<String>) -> LambdaError {
        LambdaError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "ServiceException",
            message,
        )
    }
}

impl IntoResponse for LambdaError {
    fn into_response(self) -> Response {
        let kind = match self.status.is_server_error() {
            true => "Service",
            false => "User",
        };
        let body = json!({"Type": kind, "Message": self.message, "message": self.message});
        let mut r = (self.status, axum::Json(body)).into_response();
        if let Ok(v) = HeaderValue::from_str(&self.kind) {
            r.headers_mut().insert("x-amzn-errortype", v);
        }
        r
    }
}

impl From<crate::deploy::Error> for LambdaError {
    fn from(e: crate::deploy::Error) -> LambdaError {
        use crate::deploy::Error as E;
        use thaw_runtime::packages::Refused;
        let message = e.to_string();
        match e {
            E::Invalid(_) | E::Packages(Refused::BadName(_) | Refused::TooMany { .. }) => {
                LambdaError::invalid(message)
            }
            E::NotCheckpointable(_) => LambdaError::invalid(message),
            E::Packages(_) => LambdaError::invalid(message),
            E::TooLarge { .. } => LambdaError::too_large(message),
            E::NotFound(_) => LambdaError::not_found(message),
            E::Exists(_) => LambdaError::conflict(message),
            E::Busy { .. } => LambdaError::conflict(message),
            E::Memory(_) => LambdaError::too_many(message),
            E::Internal(_) => LambdaError::service(message),
        }
    }
}
