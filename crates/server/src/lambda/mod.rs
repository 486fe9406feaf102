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
use crate::pool::FnVersion;

pub mod errors;
mod functions;
mod invoke;
pub mod sigv4;
mod store;
mod versions;

use errors::LambdaError;

/// What the Lambda routes share.
pub struct Lambda {
    pub app: Arc<App>,
    pub creds: sigv4::Credentials,
    /// asynchronous invocations accepted and not yet finished
    pub queued: AtomicUsize,
}

type Shared = State<Arc<Lambda>>;

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
        lambda.app.metrics.reject("payload_too_large");
        return LambdaError::too_large(format!(
            "Request must be smaller than {max} bytes (this one declares {len})"
        ))
        .into_response();
    }
    let bytes: Bytes = match axum::body::to_bytes(body, max as usize).await {
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

/// A function as a request names it: its name and the qualifier given in
/// the name (`NAME:QUALIFIER`, or an ARN, full or partial).
fn split_name(given: &str) -> Result<(String, Option<String>), LambdaError> {
    let parts: Vec<&str> = given.split(':').collect();
    let (name, qualifier) = match parts[..] {
        [n] => (n, None),
        [n, q] => (n, Some(q)),
        ["arn", _, "lambda", _, _, "function", n] | [_, "function", n] => (n, None),
        ["arn", _, "lambda", _, _, "function", n, q] | [_, "function", n, q] => (n, Some(q)),
        _ => {
            return Err(LambdaError::invalid(format!(
                "{given:?} is neither a function name nor a function ARN"
            )))
        }
    };
    check_lambda_name(name)?;
    Ok((name.to_string(), qualifier.map(String::from)))
}

/// Lambda's names, within what the daemon's names allow.
fn check_lambda_name(name: &str) -> Result<(), LambdaError> {
    crate::registry::check_name(name).map_err(|_| {
        LambdaError::invalid(format!(
            "function name {name:?}: thaw takes Lambda names of lowercase letters, digits, - and _ \
             (at most 63, starting with a letter or digit)"
        ))
    })?;
    if name.contains("--") {
        return Err(LambdaError::invalid(format!(
            "function name {name:?}: \"--\" is kept for published versions (NAME--N)"
        )));
    }
    Ok(())
}

/// What a name and qualifier resolve to.
pub(crate) struct Target {
    /// the function's name
    pub name: String,
    /// `$LATEST` or the published version's number
    pub version: String,
    /// the deployed function that serves it
    pub v: Arc<FnVersion>,
    /// the function's Lambda side
    pub meta: store::Meta,
}

/// Resolves a function name (maybe qualified) and a `Qualifier` parameter.
fn resolve(l: &Lambda, given: &str, qualifier: Option<&str>) -> Result<Target, LambdaError> {
    let app = &*l.app;
    let (name, in_name) = split_name(given)?;
    let q = match (in_name.as_deref(), qualifier) {
        (Some(a), Some(b)) if a != b => {
            return Err(LambdaError::invalid(format!(
                "the qualifier in the name ({a}) and the Qualifier parameter ({b}) differ"
            )))
        }
        (Some(a), _) => Some(a.to_string()),
        (None, b) => b.map(String::from),
    };
    let latest = app
        .function(&name)
        .ok_or_else(|| LambdaError::not_found(format!("Function not found: {}", arn(l, &name))))?;
    let meta = store::load(app, &latest.rec);
    let version = match q.as_deref() {
        None | Some("$LATEST") => "$LATEST".to_string(),
        Some(n) if n.bytes().all(|b| b.is_ascii_digit()) => n.to_string(),
        Some(alias) => match meta.aliases.get(alias) {
            Some(a) => a.version.clone(),
            None => {
                return Err(LambdaError::not_found(format!(
                    "Function not found: {}:{alias}",
                    arn(l, &name)
                )))
            }
        },
    };
    let v = match version.as_str() {
        "$LATEST" => latest,
        n => {
            let num: u64 = n.parse().unwrap_or(0);
            let missing = || {
                LambdaError::not_found(format!("Function not found: {}:{n}", arn(l, &name)))
            };
            if !meta.versions.contains_key(&num) {
                return Err(missing());
            }
            app.function(&store::version_name(&name, num))
                .ok_or_else(missing)?
        }
    };
    Ok(Target {
        name,
        version,
        v,
        meta,
    })
}

/// The account id every ARN carries (one daemon is one account).
const ACCOUNT: &str = "000000000000";

/// A function's ARN (in the region clients sign for).
fn arn(l: &Lambda, name: &str) -> String {
    format!(
        "arn:aws:lambda:{}:{ACCOUNT}:function:{name}",
        l.creds.region
    )
}

/// One function-level lock per Lambda function (its versions and aliases
/// change under it), apart from the deploy lock of the daemon's function.
async fn lock(l: &Lambda, name: &str) -> Result<tokio::sync::OwnedMutexGuard<()>, LambdaError> {
    let taking = l.app.deploy_lock(&format!("lambda {name}")).lock_owned();
    l.app.within_lock_wait(taking).await.ok_or_else(|| {
        LambdaError::conflict(format!(
            "The operation cannot be performed at this time. An update is in progress for resource: {}",
            arn(l, name)
        ))
    })
}

/// A request body as JSON of `T` (an empty body as `T`'s default).
fn parse<T: serde::de::DeserializeOwned + Default>(body: &[u8]) -> Result<T, LambdaError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body).map_err(|e| LambdaError::invalid(format!("request body: {e}")))
}
