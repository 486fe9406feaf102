//! AWS Lambda's API (`/2015-03-31/functions...`, the operations in
//! docs/LAMBDA.md) over the daemon's one function model: a Lambda function
//! is a deployed function of the same name (`$LATEST`), its published
//! version N the deployed function `NAME--N` with its own snapshot, and
//! what only Lambda has (runtime name, description, versions, aliases) is
//! kept beside its record ([`store`]). Every request is signed with SigV4
//! ([`sigv4`]) by the daemon's access key.
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post, put};
use axum::Router;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use crate::app::App;

pub mod errors;
mod functions;
mod invoke;
mod model;
pub mod sigv4;
mod store;
mod versions;

use errors::LambdaError;
use model::Lambda;

/// The Lambda routes, each behind the SigV4 check (the key file is made
/// when missing).
pub fn router(app: Arc<App>) -> std::io::Result<Router> {
    let creds = sigv4::load_or_create(&app.cfg.state_dir())?;
    let l = &app.cfg.limits;
    // a CreateFunction's base64 package or an Invoke's payload, whichever
    // is larger; the handlers check their own limits
    let max_body = (l.code_bytes * 4 / 3 + (1 << 20)).max(l.event_bytes + (1 << 20));
    let state = Arc::new(Lambda {
        app,
        creds,
        queued: AtomicUsize::new(0),
    });
    const F: &str = "/2015-03-31/functions/{function}";
    Ok(Router::new()
        .route(
            "/2015-03-31/functions",
            post(functions::create).get(functions::list),
        )
        .route(F, get(functions::get).delete(functions::delete))
        .route(
            &format!("{F}/configuration"),
            get(functions::get_configuration).put(functions::update_configuration),
        )
        .route(&format!("{F}/code"), put(functions::update_code))
        .route(&format!("{F}/invocations"), post(invoke::invoke))
        .route(
            &format!("{F}/versions"),
            post(versions::publish).get(versions::list_versions),
        )
        .route(
            &format!("{F}/aliases"),
            post(versions::create_alias).get(versions::list_aliases),
        )
        .route(
            &format!("{F}/aliases/{{alias}}"),
            get(versions::get_alias)
                .put(versions::update_alias)
                .delete(versions::delete_alias),
        )
        .route("/2015-03-31/{*rest}", any(unknown_operation))
        .layer(axum::middleware::from_fn_with_state(
            (state.clone(), max_body),
            authenticate,
        ))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state))
}

/// Where `scripts/setup.sh --tests` installs boto3 and the AWS CLI (a
/// virtual environment with `bin/python` and `bin/aws`), for the tests and
/// `thaw bench lambda`; None when it is not there.
pub fn client_venv() -> Option<std::path::PathBuf> {
    let mut cands = Vec::new();
    if let Some(h) = std::env::var_os("HOME") {
        cands.push(std::path::PathBuf::from(h).join(".cache/thaw/lambda-clients"));
    }
    cands.push("/root/.cache/thaw/lambda-clients".into());
    cands
        .into_iter()
        .find(|p| p.join("bin/python").is_file() && p.join("bin/aws").is_file())
}

async fn unknown_operation() -> LambdaError {
    LambdaError::new(
        StatusCode::NOT_FOUND,
        "UnknownOperationException",
        "this Lambda operation is not implemented by thaw (see docs/LAMBDA.md)",
    )
}

/// Reads the body (at most `max` bytes) and checks the signature over it
/// before any handler runs.
async fn authenticate(
    State((lambda, max)): State<(Arc<Lambda>, u64)>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let (parts, body) = req.into_parts();
    let declared = parts
        .headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = declared.filter(|&l| l > max) {
        crate::http::drain(body, len).await;
        lambda.app.metrics.reject("payload_too_large");
        return LambdaError::too_large(format!(
            "Request must be smaller than {max} bytes (this one declares {len})"
        ))
        .into_response();
    }
    let bytes: Bytes =
        match axum::body::to_bytes(body, usize::try_from(max).unwrap_or(usize::MAX)).await {
            Ok(b) => b,
            Err(_) => {
                return LambdaError::too_large(format!("Request must be smaller than {max} bytes"))
                    .into_response()
            }
        };
    let signed = sigv4::Signed {
        method: parts.method.as_str(),
        path: parts.uri.path(),
        query: parts.uri.query().unwrap_or(""),
        headers: &parts.headers,
        body: &bytes,
    };
    if let Err(e) = sigv4::verify(&lambda.creds, &signed, std::time::SystemTime::now()) {
        lambda.app.metrics.reject("unauthorized");
        return e.into_response();
    }
    let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
    next.run(req).await
}
