//! CreateFunction, GetFunction, GetFunctionConfiguration, ListFunctions,
//! UpdateFunctionCode, UpdateFunctionConfiguration and DeleteFunction: each
//! a deploy, lookup or delete of the daemon's function of that name.
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::Digest;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::errors::LambdaError;
use super::model::{
    check_revision, configuration, lock, locked, plain_request, redeploy_request, resolve,
    split_name, Body, Lambda, QualifierQuery, Shared, Target,
};
use super::store;
use crate::deploy::{self, Code, DeployRequest};

/// Lambda runtimes thaw runs, and how: the root's CPython, Node.js or JVM, or
/// the function's own bootstrap.
pub const RUNTIMES: &str = "python3.11, python3.12, python3.13 (the runtime root's CPython 3.11), \
                            nodejs18.x, nodejs20.x (its Node.js 18), \
                            java17, java11, java8.al2 (its OpenJDK 17), \
                            provided.al2023, provided.al2 (a bootstrap through the Runtime API)";

/// The daemon's runtime for a Lambda runtime name.
pub fn native_runtime(lambda: &str) -> Result<&'static str, LambdaError> {
    let minor = lambda
        .strip_prefix("python3.")
        .and_then(|m| m.parse::<u32>().ok());
    match (lambda, minor) {
        (_, Some(m)) if m >= 11 => Ok("python"),
        ("nodejs18.x" | "nodejs20.x", _) => Ok("nodejs"),
        ("java17" | "java11" | "java8.al2", _) => Ok("java"),
        ("provided.al2023" | "provided.al2" | "provided", _) => Ok("provided"),
        _ => Err(LambdaError::invalid(format!(
            "Value {lambda} at 'runtime' failed to satisfy constraint: supported runtimes are {RUNTIMES}"
        ))),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(super) struct CodeIn {
    zip_file: Option<String>,
    s3_bucket: Option<String>,
    s3_key: Option<String>,
    image_uri: Option<String>,
}

impl CodeIn {
    /// The package as the daemon takes it, and its size and Lambda hash.
    fn package(&self) -> Result<(Code, u64, String), LambdaError> {
        if self.s3_bucket.is_some() || self.s3_key.is_some() {
            return Err(LambdaError::invalid(
                "S3 code locations are not implemented by thaw: send the package as ZipFile",
            ));
        }
        if self.image_uri.is_some() {
            return Err(LambdaError::invalid(
                "container images (ImageUri) are not implemented by thaw's Lambda API: send a ZipFile",
            ));
        }
        let Some(b64) = &self.zip_file else {
            return Err(LambdaError::invalid("Code.ZipFile is required"));
        };
        let data = base64::engine::general_purpose::STANDARD
            .decode(b64.as_bytes())
            .map_err(|e| LambdaError::invalid(format!("ZipFile is not base64: {e}")))?;
        let sha = base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(&data));
        let code = Code {
            format: "zip".into(),
            data_base64: b64.clone(),
            filename: None,
        };
        Ok((code, data.len() as u64, sha))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(super) struct EnvIn {
    variables: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(super) struct CreateRequest {
    function_name: String,
    runtime: Option<String>,
    role: Option<String>,
    handler: Option<String>,
    code: CodeIn,
    description: Option<String>,
    timeout: Option<u64>,
    memory_size: Option<u64>,
    publish: bool,
    environment: Option<EnvIn>,
    package_type: Option<String>,
    layers: Vec<String>,
    architectures: Vec<String>,
}

/// What thaw refuses by name rather than ignore.
fn refuse_unsupported(
    package_type: Option<&str>,
    layers: &[String],
    architectures: &[String],
) -> Result<(), LambdaError> {
    if package_type.is_some_and(|p| p != "Zip") {
        return Err(LambdaError::invalid(
            "PackageType Image is not implemented by thaw's Lambda API: use Zip",
        ));
    }
    if !layers.is_empty() {
        return Err(LambdaError::invalid("layers are not implemented by thaw"));
    }
    if architectures.iter().any(|a| a != "x86_64") {
        return Err(LambdaError::invalid(
            "thaw runs functions on this machine's architecture: x86_64",
        ));
    }
    Ok(())
}

/// Lambda's defaults: 128 MB, 3 s.
const DEFAULT_MEMORY_MB: u64 = 128;
const DEFAULT_TIMEOUT_S: u64 = 3;

/// CreateFunction: a deploy of the package that only succeeds if no
/// function of that name exists.
pub async fn create(
    State(l): Shared,
    Body(req): Body<CreateRequest>,
) -> Result<Response, LambdaError> {
    let (name, qualifier) = split_name(&req.function_name)?;
    if qualifier.is_some() {
        return Err(LambdaError::invalid(
            "CreateFunction takes an unqualified function name",
        ));
    }
    refuse_unsupported(req.package_type.as_deref(), &req.layers, &req.architectures)?;
    let runtime = req
        .runtime
        .clone()
        .ok_or_else(|| LambdaError::invalid("Runtime is required for a .zip package"))?;
    let native = native_runtime(&runtime)?;
    let handler = req
        .handler
        .clone()
        .ok_or_else(|| LambdaError::invalid("Handler is required for a .zip package"))?;
    let (code, size, sha) = req.code.package()?;
    let _guard = lock(&l, &name).await?;
    let d = DeployRequest {
        runtime: Some(native.into()),
        handler,
        memory_mb: Some(req.memory_size.unwrap_or(DEFAULT_MEMORY_MB)),
        timeout_ms: Some(
            req.timeout
                .unwrap_or(DEFAULT_TIMEOUT_S)
                .saturating_mul(1000),
        ),
        env: req.environment.map(|e| e.variables).unwrap_or_default(),
        only_if_absent: true,
        ..plain_request(&name, code)
    };
    deploy::run(&l.app, d).await.map_err(|e| match e {
        deploy::Error::Exists(_) => {
            LambdaError::conflict(format!("Function already exist: {name}"))
        }
        e => e.into(),
    })?;
    let meta = store::Meta {
        latest: store::Described {
            runtime,
            description: req.description.unwrap_or_default(),
            code_sha256: sha,
            code_size: size,
            revision_id: store::new_revision(),
            last_modified: store::now_iso(),
        },
        role: req.role.unwrap_or_default(),
        next_version: 1,
        ..Default::default()
    };
    store::save(&l.app, &name, &meta)?;
    let t = resolve(&l, &name, None)?;
    let out = match req.publish {
        true => super::versions::publish_locked(&l, t, None).await?,
        false => configuration(&l, &t),
    };
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

pub async fn get(l: Shared, f: Path<String>, q: Query<QualifierQuery>) -> Reply {
    let Json(configuration) = get_configuration(l, f, q).await?;
    let code = json!({"RepositoryType": "thaw", "Location": ""});
    Ok(Json(json!({"Configuration": configuration, "Code": code})))
}

pub async fn get_configuration(
    State(l): Shared,
    Path(function): Path<String>,
    Query(q): Query<QualifierQuery>,
) -> Reply {
    Ok(Json(configuration(
        &l,
        &resolve(&l, &function, q.qualifier.as_deref())?,
    )))
}

/// An answer of JSON, or Lambda's error.
type Reply = Result<Json<Value>, LambdaError>;

/// Lambda's page size limit for ListFunctions.
const MAX_ITEMS: usize = 50;

pub async fn list(
    State(l): Shared,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<Value>, LambdaError> {
    let max = match q.get("MaxItems") {
        None => MAX_ITEMS,
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=10_000).contains(&n) => n.min(MAX_ITEMS),
            _ => {
                return Err(LambdaError::invalid(format!(
                    "MaxItems {s:?}: use 1..10000"
                )))
            }
        },
    };
    let all_versions = match q.get("FunctionVersion").map(String::as_str) {
        None => false,
        Some("ALL") => true,
        Some(o) => {
            return Err(LambdaError::invalid(format!(
                "FunctionVersion {o:?}: use ALL"
            )))
        }
    };
    let mut names: Vec<String> = l
        .app
        .functions
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .filter(|n| !n.contains("--"))
        .cloned()
        .collect();
    names.sort();
    // every entry's key: NAME, or NAME:N for a published version
    let mut keys = Vec::new();
    for n in &names {
        keys.push(n.clone());
        if all_versions {
            if let Some(v) = l.app.function(n) {
                for k in store::load(&l.app, &v.rec).versions.keys() {
                    keys.push(format!("{n}:{k}"));
                }
            }
        }
    }
    let from = match q.get("Marker") {
        None => 0,
        Some(m) => keys.iter().position(|k| k == m).ok_or_else(|| {
            LambdaError::invalid(format!("Marker {m:?} is not one this endpoint gave"))
        })?,
    };
    let mut out = Vec::new();
    for k in keys.iter().skip(from).take(max) {
        // a function deleted since the list was read is left out
        if let Ok(t) = resolve(&l, k, None) {
            out.push(configuration(&l, &t));
        }
    }
    let mut body = json!({ "Functions": out });
    if let Some(next) = keys.get(from + max) {
        body["NextMarker"] = json!(next);
    }
    Ok(Json(body))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(super) struct UpdateCodeRequest {
    #[serde(flatten)]
    code: CodeIn,
    publish: bool,
    revision_id: Option<String>,
    architectures: Vec<String>,
}

fn latest_only(t: &Target) -> Result<(), LambdaError> {
    if t.version != "$LATEST" {
        return Err(LambdaError::invalid(
            "a published version cannot change: update the unqualified function",
        ));
    }
    Ok(())
}

/// UpdateFunctionCode: `$LATEST` redeployed with the new package.
pub async fn update_code(
    State(l): Shared,
    Path(function): Path<String>,
    Body(req): Body<UpdateCodeRequest>,
) -> Result<Json<Value>, LambdaError> {
    refuse_unsupported(None, &[], &req.architectures)?;
    let (code, size, sha) = req.code.package()?;
    let (_guard, t) = locked(&l, &function, None).await?;
    latest_only(&t)?;
    check_revision(req.revision_id.as_deref(), &t.meta.latest.revision_id)?;
    let d = redeploy_request(&l, &t.name, &t.v.rec, Some(code)).await?;
    deploy::run(&l.app, d).await?;
    let mut meta = t.meta;
    meta.latest.code_sha256 = sha;
    meta.latest.code_size = size;
    changed(&l, &t.name, meta, req.publish).await
}

/// Saves a changed `$LATEST`'s Lambda side (new revision, now) and answers
/// its configuration, or publishes it first when asked.
async fn changed(
    l: &Arc<Lambda>,
    name: &str,
    mut meta: store::Meta,
    publish: bool,
) -> Result<Json<Value>, LambdaError> {
    meta.latest.revision_id = store::new_revision();
    meta.latest.last_modified = store::now_iso();
    store::save(&l.app, name, &meta)?;
    let t = resolve(l, name, None)?;
    Ok(Json(match publish {
        true => super::versions::publish_locked(l, t, None).await?,
        false => configuration(l, &t),
    }))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(super) struct UpdateConfigRequest {
    runtime: Option<String>,
    role: Option<String>,
    handler: Option<String>,
    description: Option<String>,
    timeout: Option<u64>,
    memory_size: Option<u64>,
    environment: Option<EnvIn>,
    revision_id: Option<String>,
    layers: Vec<String>,
}

/// UpdateFunctionConfiguration: `$LATEST` redeployed from its own code
/// with the settings given changed.
pub async fn update_configuration(
    State(l): Shared,
    Path(function): Path<String>,
    Body(req): Body<UpdateConfigRequest>,
) -> Result<Json<Value>, LambdaError> {
    refuse_unsupported(None, &req.layers, &[])?;
    let (_guard, t) = locked(&l, &function, None).await?;
    latest_only(&t)?;
    check_revision(req.revision_id.as_deref(), &t.meta.latest.revision_id)?;
    let mut d = redeploy_request(&l, &t.name, &t.v.rec, None).await?;
    let mut meta = t.meta;
    if let Some(r) = req.runtime {
        d.runtime = Some(native_runtime(&r)?.into());
        meta.latest.runtime = r;
    }
    if let Some(h) = req.handler {
        d.handler = h;
    }
    if let Some(m) = req.memory_size {
        d.memory_mb = Some(m);
    }
    if let Some(s) = req.timeout {
        d.timeout_ms = Some(s.saturating_mul(1000));
    }
    if let Some(e) = req.environment {
        d.env = e.variables;
    }
    if let Some(desc) = req.description {
        meta.latest.description = desc;
    }
    if let Some(role) = req.role {
        meta.role = role;
    }
    deploy::run(&l.app, d).await?;
    changed(&l, &t.name, meta, false).await
}

/// DeleteFunction: the function with every published version, or (with a
/// version as qualifier) that version.
pub async fn delete(
    State(l): Shared,
    Path(function): Path<String>,
    Query(q): Query<QualifierQuery>,
) -> Result<StatusCode, LambdaError> {
    let (_guard, t) = locked(&l, &function, q.qualifier.as_deref()).await?;
    if t.version != "$LATEST" {
        super::versions::delete_version(&l, t).await?;
        return Ok(StatusCode::NO_CONTENT);
    }
    if q.qualifier.as_deref() == Some("$LATEST") {
        return Err(LambdaError::invalid(
            "$LATEST cannot be deleted on its own: delete the unqualified function",
        ));
    }
    // the published versions first: the function's own directory, which
    // lists them, goes last
    for n in t.meta.versions.keys() {
        match deploy::delete(&l.app, &store::version_name(&t.name, *n)).await {
            Ok(()) | Err(deploy::Error::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    deploy::delete(&l.app, &t.name).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lambda_runtimes_map_onto_the_roots() {
        for (lambda, native) in [
            ("python3.11", "python"),
            ("python3.13", "python"),
            ("nodejs18.x", "nodejs"),
            ("nodejs20.x", "nodejs"),
            ("java17", "java"),
            ("java11", "java"),
            ("provided.al2023", "provided"),
            ("provided.al2", "provided"),
        ] {
            assert_eq!(native_runtime(lambda).unwrap(), native);
        }
        for refused in [
            "python3.9",
            "python3",
            "java21",
            "provided.al2024",
            "nodejs22.x",
            "",
        ] {
            let e = native_runtime(refused).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{refused}");
            assert!(e.message.contains("python3.12"), "{}", e.message);
        }
    }
}
