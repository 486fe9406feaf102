//! The HTTP API (docs/API.md, docs/openapi.json): the one module that knows
//! axum, status codes and [`ApiError`]; the domain's errors (deploy's,
//! the pool's refusals, a function's failures) get their statuses here.
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::app::App;
use crate::deploy::{self, DeployRequest};
use crate::instances::{FnVersion, Mode, Refusal, StartType};
use crate::outcome;
use thaw_sandbox::agent::ErrorKind;
use thaw_sandbox::StartStrategy;

/// Every route, as (method, path): the OpenAPI test checks the file against it.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/functions"),
    ("get", "/v1/functions"),
    ("get", "/v1/functions/{name}"),
    ("delete", "/v1/functions/{name}"),
    ("post", "/v1/functions/{name}/invoke"),
    ("put", "/v1/functions/{name}/prewarm"),
    ("get", "/v1/functions/{name}/logs"),
    ("post", "/v1/roots"),
    ("get", "/v1/functions/{name}/stats"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/metrics"),
];

/// Serves `router` on `listener` until `drain` says to stop (in-flight
/// requests finish first).
pub async fn serve<L>(listener: L, router: Router, mut drain: tokio::sync::broadcast::Receiver<()>)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let _ = axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let _ = drain.recv().await;
        })
        .await;
}

/// Every route; with `token`, each request must carry it as a bearer token
/// (the TCP listener's check).
pub fn router(app: Arc<App>, token: Option<String>) -> Router {
    let r = routes(app.clone());
    match token {
        Some(t) => r.layer(axum::middleware::from_fn(move |req, next| {
            let (t, m) = (t.clone(), app.metrics.clone());
            async move { auth(t, m, req, next).await }
        })),
        None => r,
    }
}

fn routes(app: Arc<App>) -> Router {
    // the largest body any route takes (a deploy); routes check their own
    let l = &app.cfg.limits;
    let max_body =
        usize::try_from(l.code_bytes * 4 / 3 + (2 << 20) + l.event_bytes).unwrap_or(usize::MAX);
    Router::new()
        .route("/v1/functions", post(deploy_fn).get(list_fns))
        .route("/v1/functions/{name}", get(get_fn).delete(delete_fn))
        .route("/v1/functions/{name}/invoke", post(invoke))
        .route("/v1/functions/{name}/prewarm", put(prewarm))
        .route("/v1/functions/{name}/logs", get(logs))
        .route("/v1/roots", post(import_root))
        .route("/v1/functions/{name}/stats", get(stats))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(
            (app.clone(), max_body as u64),
            refuse_declared_oversize,
        ))
        .with_state(app)
}

/// The most of an over-limit body read and dropped so that the client, still
/// sending, reads the 413 instead of a reset; past it the connection closes.
const DRAIN_MAX_BYTES: u64 = 1 << 30;
const DRAIN_MAX_TIME: Duration = Duration::from_secs(10);

/// A request whose declared length is over every route's limit gets the 413
/// answer after its body is read and dropped: answering while the client is
/// still writing and then closing would make the kernel reset the connection,
/// and the reset discards the answer before the client reads it.
async fn refuse_declared_oversize(
    State((app, max)): State<(Arc<App>, u64)>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let Some(len) = declared.filter(|&l| l > max) else {
        return next.run(req).await;
    };
    drain(req.into_body(), len).await;
    too_large(
        &app,
        "a request body",
        usize::try_from(len).unwrap_or(usize::MAX),
        max,
    )
    .into_response()
}

/// Reads and drops the body of a request refused for its declared length
/// `len` (up to [`DRAIN_MAX_BYTES`] and [`DRAIN_MAX_TIME`]), so that the
/// client reads the refusal rather than a reset.
pub async fn drain(mut body: axum::body::Body, len: u64) {
    if len <= DRAIN_MAX_BYTES {
        use http_body_util::BodyExt;
        let _ = tokio::time::timeout(DRAIN_MAX_TIME, async {
            while let Some(Ok(_)) = body.frame().await {}
        })
        .await;
    }
}

/// Bearer-token check for the TCP listener (constant-time compare).
async fn auth(
    token: String,
    metrics: Arc<crate::metrics::Metrics>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let given = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    use sha2::Digest;
    // comparing digests: the time taken does not tell how much matched
    let a = sha2::Sha256::digest(given.as_bytes());
    let b = sha2::Sha256::digest(token.as_bytes());
    if a != b {
        metrics.reject("unauthorized");
        return ApiError::new(
            axum::http::StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        )
        .into_response();
    }
    next.run(req).await
}

/// An error answer: a status and `{"error": CODE, "message": TEXT, ...}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: Value,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: json!({"error": code, "message": message.into()}),
            retry_after: None,
        }
    }
    fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }
    pub fn retry(mut self, secs: u64) -> ApiError {
        self.retry_after = Some(secs);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(self.body)).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut().insert("retry-after", HeaderValue::from(s));
        }
        r
    }
}

fn body_error(app: &App, e: BytesRejection) -> ApiError {
    let status = e.status();
    let reason = if status == StatusCode::PAYLOAD_TOO_LARGE {
        "payload_too_large"
    } else {
        "bad_request"
    };
    app.metrics.reject(reason);
    ApiError::new(status, reason, e.body_text())
}

/// 413 for `what` of `len` bytes over `max`.
pub fn too_large(app: &App, what: &str, len: usize, max: u64) -> ApiError {
    app.metrics.reject("payload_too_large");
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("{what} of {len} bytes exceeds the limit of {max} bytes"),
    )
}

/// Reads a body of at most `max` bytes.
async fn limited(
    app: &App,
    body: Result<Bytes, BytesRejection>,
    max: u64,
    what: &str,
) -> Result<Bytes, ApiError> {
    let b = body.map_err(|e| body_error(app, e))?;
    if b.len() as u64 > max {
        return Err(too_large(app, what, b.len(), max));
    }
    Ok(b)
}

fn lookup(app: &App, name: &str) -> Result<Arc<FnVersion>, ApiError> {
    crate::registry::check_name(name).map_err(|e| ApiError::bad(format!("{e:#}")))?;
    app.functions
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(name)
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no function named {name:?}"),
            )
        })
}

/// A function as the API shows it (secret values never appear).
/// Its instances are counted and their memory summed as `pool` has them.
pub fn describe(v: &FnVersion, instances: &crate::instances::Instances) -> Value {
    let r = &v.rec;
    let (live, idle) = instances.counts(&r.name);
    let usage = instances.usage(&r.name);
    json!({
        "name": r.name,
        "version": r.version,
        "owner": r.owner,
        "runtime": r.runtime,
        "handler": r.handler,
        "init": r.init,
        "before_snapshot": r.before_snapshot,
        "after_restore": r.after_restore,
        // the image's root filesystem it runs on (none: the runtime root)
        "root": r.root.as_ref().map(|x| &x.key),
        // how a new instance starts: from the snapshot, or fresh
        "start_type": StartType::of_new(r.strategy).name(),
        "snapshot_refused": r.snapshot_refused,
        "env": r.env,
        "secret_env": r.secret_env,
        "memory_mb": r.memory_mb,
        "cpu_millis": r.cpu_millis,
        "cpu_weight": r.cpu_weight,
        "timeout_ms": r.timeout_ms,
        "max_instances": r.max_instances,
        "strategy": r.strategy,
        "tier": r.tier,
        "snapshot_tier": v.placed().map(|p| p.tier),
        "snapshot": r.snapshot,
        "shared": r.shared,
        "packages": r.packages,
        "placement": r.placement,
        "code_bytes": r.code_bytes,
        "code_files": r.code_files,
        "created_unix": r.created_unix,
        "instances": {"live": live, "idle": idle, "memory_bytes": usage.memory_bytes, "private_bytes": usage.private_bytes},
    })
}

async fn deploy_fn(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    if app.draining.load(Ordering::SeqCst) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the daemon is shutting down",
        ));
    }
    // base64 grows the code by 4/3; the rest of the request is small
    let max = app.cfg.limits.code_bytes * 4 / 3 + (1 << 20) + app.cfg.limits.event_bytes;
    let b = limited(&app, body, max, "deploy request").await?;
    let req: DeployRequest = serde_json::from_slice(&b).map_err(|e| {
        app.metrics.reject("bad_request");
        ApiError::bad(format!("deploy request: {e}"))
    })?;
    let (rec, replaced) = deploy::run(&app, req).await?;
    let code = match replaced {
        true => StatusCode::OK,
        false => StatusCode::CREATED,
    };
    let v = lookup(&app, &rec.name)?;
    let mut out = describe(&v, &app.instances);
    out["snapshot_id"] = json!(rec.snapshot.as_ref().map(|s| s.id.clone()));
    out["init_ms"] = json!(rec.snapshot.as_ref().map(|s| s.init_ms));
    out["size_bytes"] = json!(rec.snapshot.as_ref().map(|s| s.size_bytes));
    Ok((code, Json(out)).into_response())
}

/// `POST /v1/roots`: copies a container's root filesystem into the home
/// once per key (see [`crate::roots`]); 201 when this call copied it, 200
/// when the key was imported already.
async fn import_root(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let b = limited(&app, body, 64 << 10, "root import request").await?;
    let req: crate::roots::ImportRequest = serde_json::from_slice(&b).map_err(|e| {
        app.metrics.reject("bad_request");
        ApiError::bad(format!("root import request: {e}"))
    })?;
    // one import per key at a time: the second finds the first's copy, or,
    // if that copy takes over `limits.lock_wait_ms`, answers busy rather
    // than wait unbounded (a copy is bounded in size, not in time)
    let _guard = match &req.key {
        Some(k) => {
            let lock = app.deploy_lock(&format!("root {k}")).lock_owned();
            match app.within_lock_wait(lock).await {
                Some(guard) => Some(guard),
                None => {
                    app.metrics.reject("busy");
                    let message = format!(
                        "root {k} is being imported by another request, which has held it for over {} ms",
                        app.cfg.limits.lock_wait_ms
                    );
                    return Err(
                        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "busy", message).retry(1),
                    );
                }
            }
        }
        None => None,
    };
    let app2 = app.clone();
    let (info, copied) =
        tokio::task::spawn_blocking(move || crate::roots::import(&app2.cfg, &app2.root_pins, &req))
            .await
            .map_err(|e| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            })?
            .map_err(|e| {
                use crate::roots::RootError as E;
                let (status, code) = match &e {
                    E::Invalid(_) => (StatusCode::BAD_REQUEST, "bad_request"),
                    E::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
                    E::Unusable(_) => (StatusCode::UNPROCESSABLE_ENTITY, "unusable_root"),
                    E::Other(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
                };
                ApiError::new(status, code, thaw_error::chain(&e))
            })?;
    if copied {
        tracing::info!(key = %info.key, files = info.files, bytes = info.bytes, "imported a root filesystem");
    }
    let status = match copied {
        true => StatusCode::CREATED,
        false => StatusCode::OK,
    };
    Ok((status, Json(json!(info))).into_response())
}

async fn list_fns(State(app): State<Arc<App>>) -> Json<Value> {
    let fns: Vec<Arc<FnVersion>> = app
        .functions
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .cloned()
        .collect();
    let mut list: Vec<Value> = fns.iter().map(|v| describe(v, &app.instances)).collect();
    list.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Json(json!({ "functions": list }))
}

async fn get_fn(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let v = lookup(&app, &name)?;
    let mut out = describe(&v, &app.instances);
    out["calibration"] = json!(crate::deploy::calibration(&app, &v));
    Ok(Json(out))
}

async fn delete_fn(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    lookup(&app, &name)?;
    deploy::delete(&app, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InvokeQuery {
    force: Option<String>,
    /// `lambda`: a function's exception answers in Lambda's shape
    error_shape: Option<String>,
}

async fn invoke(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    query: Result<Query<InvokeQuery>, axum::extract::rejection::QueryRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let t0 = Instant::now();
    let Query(q) = query.map_err(|e| ApiError::bad(e.body_text()))?;
    let mode = match q.force.as_deref() {
        None => Mode::Normal,
        Some("cold") => Mode::Cold,
        Some(o) => {
            return Err(ApiError::bad(format!(
                "force={o:?}: only force=cold is known"
            )))
        }
    };
    let lambda_errors = match q.error_shape.as_deref() {
        None | Some("thaw") => false,
        Some("lambda") => true,
        Some(o) => {
            return Err(ApiError::bad(format!(
                "error_shape={o:?}: use thaw or lambda"
            )))
        }
    };
    let b = limited(&app, body, app.cfg.limits.event_bytes, "event").await?;
    let event: Value = if b.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(&b).map_err(|e| {
            app.metrics.reject("bad_request");
            ApiError::bad(format!("the event is not JSON: {e}"))
        })?
    };
    let called = crate::invoke::call(&app, &name, mode, event, crate::invoke::Caller::Client)
        .await
        .map_err(|e| call_error(&app, &name, e))?;
    crate::invoke::learn(&app, &name, &called);
    let total = t0.elapsed().as_secs_f64();
    let timing = called.server_timing(total * 1e3);
    let tier = called.tier();
    let (v, start, predicted) = (called.v, called.start, called.predicted);
    let (status, body, code) = match called.done.reply.map(|i| i.output) {
        Ok(Ok(output)) => (StatusCode::OK, output, "ok"),
        Ok(Err(e)) if lambda_errors && e.kind() == ErrorKind::FunctionError => (
            StatusCode::BAD_GATEWAY,
            outcome::lambda_error(&e),
            "function_error",
        ),
        Ok(Err(e)) => function_failure(&e, v.rec.timeout_ms),
        Err(e) => (
            StatusCode::BAD_GATEWAY,
            json!({"error": "instance_failed", "message": e}),
            "instance_failed",
        ),
    };
    crate::invoke::count(&app, &name, start, code, total);
    let mut h = HeaderMap::new();
    let hv = |s: &str| HeaderValue::from_str(s).unwrap_or(HeaderValue::from_static("-"));
    h.insert("thaw-invocation-id", hv(&called.invocation_id));
    h.insert("thaw-start-type", hv(start.name()));
    let strategy = match start {
        StartType::Boot => StartStrategy::Boot,
        _ => v.rec.strategy,
    };
    h.insert("thaw-strategy", hv(strategy.name()));
    h.insert("thaw-tier", hv(&tier));
    h.insert("thaw-predicted-start", hv(predicted.0.name()));
    h.insert("thaw-predicted-tier", hv(&predicted.1));
    h.insert("thaw-version", hv(&v.rec.version.to_string()));
    h.insert("server-timing", hv(&timing));
    Ok((status, h, Json(body)).into_response())
}

/// The status, body and outcome code for a function's failure the agent
/// reported.
fn function_failure(
    e: &thaw_sandbox::agent::AgentError,
    timeout_ms: u64,
) -> (StatusCode, Value, &'static str) {
    let (code, body) = outcome::function_failure(e, timeout_ms);
    let status = match code {
        "timeout" => StatusCode::GATEWAY_TIMEOUT,
        _ => StatusCode::BAD_GATEWAY,
    };
    (status, body, code)
}

fn call_error(app: &App, name: &str, e: crate::invoke::CallError) -> ApiError {
    use crate::invoke::CallError as E;
    match e {
        E::BadName(m) => ApiError::bad(m),
        E::NotFound(n) => ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no function named {n:?}"),
        ),
        E::Refused(r) => refusal(app, name, r),
        E::Timeout => ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout",
            "no instance before the deadline",
        ),
        E::Internal(m) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", m),
    }
}

fn refusal(app: &App, name: &str, r: Refusal) -> ApiError {
    let r = outcome::refused(name, r);
    let status = match r.code {
        "queue_full" => StatusCode::TOO_MANY_REQUESTS,
        "replaced" | "at_cap" => StatusCode::CONFLICT,
        "start_failed" => StatusCode::BAD_GATEWAY,
        // memory, node_full, shutting_down, queue_timeout
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    app.metrics.reject(r.code);
    let e = ApiError::new(status, r.code, r.message);
    match r.retry_after {
        Some(s) => e.retry(s),
        None => e,
    }
}

impl From<deploy::Error> for ApiError {
    fn from(e: deploy::Error) -> ApiError {
        use deploy::Error as E;
        use thaw_runtime::packages::Refused;
        let (status, code) = match &e {
            E::Invalid(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            E::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            E::NotCheckpointable(_) => (StatusCode::UNPROCESSABLE_ENTITY, "not_checkpointable"),
            E::Packages(Refused::BadName(_) | Refused::TooMany { .. }) => {
                (StatusCode::BAD_REQUEST, "bad_request")
            }
            E::Packages(Refused::Unknown(_)) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "unknown_package")
            }
            E::Packages(Refused::Unresolvable(_)) => {
                (StatusCode::UNPROCESSABLE_ENTITY, "unresolvable_packages")
            }
            E::Packages(Refused::TooLarge { .. }) => {
                (StatusCode::PAYLOAD_TOO_LARGE, "packages_too_large")
            }
            E::Memory(_) => (StatusCode::SERVICE_UNAVAILABLE, "memory"),
            E::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            E::Exists(_) => (StatusCode::CONFLICT, "exists"),
            E::Busy { .. } => (StatusCode::SERVICE_UNAVAILABLE, "busy"),
            E::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        };
        let mut out = ApiError::new(status, code, e.to_string());
        match e {
            E::NotCheckpointable(reasons) => out.body["reasons"] = json!(reasons),
            E::Memory(_) | E::Busy { .. } => out = out.retry(1),
            _ => {}
        }
        out
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PrewarmRequest {
    count: u32,
}

async fn prewarm(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let v = lookup(&app, &name)?;
    let b = limited(&app, body, 4096, "prewarm request").await?;
    let req: PrewarmRequest =
        serde_json::from_slice(&b).map_err(|e| ApiError::bad(format!("prewarm request: {e}")))?;
    if req.count > app.cfg.limits.prewarm_max {
        return Err(ApiError::bad(format!(
            "count {} exceeds the limit of {}",
            req.count, app.cfg.limits.prewarm_max
        )));
    }
    let (live, _) = app.instances.counts(&name);
    let want = req.count.min(v.rec.max_instances).saturating_sub(live);
    // concurrent restores, then every instance goes back idle
    let mut tasks = Vec::new();
    for _ in 0..want {
        let (instances, v) = (app.instances.clone(), v.clone());
        tasks.push(tokio::spawn(async move {
            match instances.acquire(&v, Mode::Prewarm).await {
                Ok(mut l) => {
                    instances.release(&mut l, true);
                    Ok(())
                }
                Err(e) => {
                    let r = outcome::refused(&v.rec.name, e);
                    Err(format!("{}: {}", r.code, r.message))
                }
            }
        }));
    }
    let mut started = 0;
    let mut errors = Vec::new();
    for t in tasks {
        match t.await {
            Ok(Ok(())) => started += 1,
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(e.to_string()),
        }
    }
    let (live, idle) = app.instances.counts(&name);
    Ok(Json(
        json!({"started": started, "errors": errors, "instances": {"live": live, "idle": idle}}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LogQuery {
    tail: Option<usize>,
    after: Option<u64>,
    instance: Option<String>,
    invocation_id: Option<String>,
}

async fn logs(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    query: Result<Query<LogQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad(e.body_text()))?;
    let v = lookup(&app, &name)?;
    let tail = q.tail.unwrap_or(100).min(10_000);
    let entries = v.ring.read(
        q.after.unwrap_or(0),
        tail,
        q.instance.as_deref(),
        q.invocation_id.as_deref(),
    );
    Ok(Json(
        json!({ "function": name, "instances": v.ring.instances(), "entries": entries }),
    ))
}

/// What the function's instances on this daemon use now (memory, and CPU
/// time since the daemon started): a container runtime's stats of the
/// function's containers.
async fn stats(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let v = lookup(&app, &name)?;
    let usage = app.instances.usage(&name);
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    Ok(Json(json!({
        "function": name,
        "timestamp_unix_ns": now_ns,
        "memory_limit_bytes": v.rec.memory_mb << 20,
        "usage": usage,
    })))
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(app): State<Arc<App>>) -> Response {
    if app.draining.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "draining"})),
        )
            .into_response();
    }
    Json(json!({"status": "ready"})).into_response()
}

async fn metrics(State(app): State<Arc<App>>) -> Response {
    app.instances.tick();
    let egress: Vec<_> = app
        .functions
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter_map(|v| Some((v.rec.name.clone(), v.func.egress.clone()?)))
        .collect();
    if !egress.is_empty() {
        let app2 = app.clone();
        // the rule table's counters: one nft run per function
        let _ = tokio::task::spawn_blocking(move || {
            for (name, e) in egress {
                match e.refused() {
                    Ok(n) => app2.metrics.egress_refused(&name, n),
                    Err(e) => {
                        tracing::warn!(function = %name, "reading the egress counters: {e:#}")
                    }
                }
            }
        })
        .await;
    }
    let mut tiers: HashMap<String, u64> = HashMap::new();
    for v in app
        .functions
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
    {
        if let (Some(s), Some(p)) = (&v.rec.snapshot, v.placed()) {
            *tiers.entry(p.tier).or_default() += s.size_bytes;
        }
    }
    for t in app.cfg.snapshot_tiers.names() {
        tiers.entry(t.to_string()).or_default();
    }
    for (tier, bytes) in tiers {
        app.metrics
            .memory
            .get_or_create(&crate::metrics::TierLabel { tier })
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
    let mut h = HeaderMap::new();
    h.insert(
        "content-type",
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    (h, app.metrics.encode()).into_response()
}
