//! PublishVersion, ListVersionsByFunction and the aliases. A published
//! version N of NAME is the daemon's function `NAME--N`: deployed once from
//! `$LATEST`'s code and settings (its own init and snapshot), never
//! redeployed by this API, so it cannot change.
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::errors::LambdaError;
use super::model::{
    arn, check_revision, configuration, locked, redeploy_request, resolve, Body, Lambda, Shared,
    Target,
};
use super::store;
use crate::deploy;

/// PublishVersion (`CodeSha256` and `RevisionId` checked against `$LATEST`).
pub async fn publish(
    State(l): Shared,
    Path(function): Path<String>,
    Body(req): Body<PublishRequest>,
) -> Result<Response, LambdaError> {
    let (_guard, t) = locked(&l, &function, None).await?;
    if let Some(s) = &req.code_sha256 {
        if *s != t.meta.latest.code_sha256 {
            return Err(LambdaError::invalid(format!(
                "CodeSha256 ({s}) is different from current CodeSha256 in $LATEST ({}). Please try again with the CodeSha256 in $LATEST.",
                t.meta.latest.code_sha256
            )));
        }
    }
    check_revision(req.revision_id.as_deref(), &t.meta.latest.revision_id)?;
    let out = publish_locked(&l, t, req.description).await?;
    Ok((StatusCode::CREATED, Json(out)).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(super) struct PublishRequest {
    code_sha256: Option<String>,
    description: Option<String>,
    revision_id: Option<String>,
}

/// Publishes `$LATEST` (its Lambda lock held) and answers the version's
/// configuration; `$LATEST` unchanged since the last version gives that
/// version back, as Lambda does.
pub(super) async fn publish_locked(
    l: &Lambda,
    t: Target,
    description: Option<String>,
) -> Result<Value, LambdaError> {
    let mut meta = t.meta.clone();
    if let Some((n, _)) = meta
        .versions
        .iter()
        .next_back()
        .filter(|(_, p)| p.from_revision == meta.latest.revision_id)
    {
        let n = n.to_string();
        return Ok(configuration(l, &resolve(l, &t.name, Some(&n))?));
    }
    let n = meta.next_version;
    let native = store::version_name(&t.name, n);
    if crate::registry::check_name(&native).is_err() {
        return Err(LambdaError::invalid(format!(
            "the function's name is too long to publish version {n} ({native:?} is over 63 characters)"
        )));
    }
    let d = redeploy_request(l, &native, &t.v.rec, None).await?;
    deploy::run(&l.app, d).await?;
    meta.next_version = n + 1;
    meta.versions.insert(
        n,
        store::Published {
            described: store::Described {
                description: description.unwrap_or_else(|| meta.latest.description.clone()),
                revision_id: store::new_revision(),
                last_modified: store::now_iso(),
                ..meta.latest.clone()
            },
            from_revision: meta.latest.revision_id.clone(),
        },
    );
    store::save(&l.app, &t.name, &meta)?;
    Ok(configuration(
        l,
        &resolve(l, &t.name, Some(&n.to_string()))?,
    ))
}

pub async fn list_versions(
    State(l): Shared,
    Path(function): Path<String>,
) -> Result<Json<Value>, LambdaError> {
    let t = resolve(&l, &function, None)?;
    let mut out = vec![configuration(&l, &t)];
    for n in t.meta.versions.keys() {
        if let Ok(v) = resolve(&l, &t.name, Some(&n.to_string())) {
            out.push(configuration(&l, &v));
        }
    }
    Ok(Json(json!({ "Versions": out })))
}

/// Removes published version `t` (no alias may point at it).
pub(super) async fn delete_version(l: &Lambda, t: Target) -> Result<(), LambdaError> {
    if let Some((a, _)) = t.meta.aliases.iter().find(|(_, a)| a.version == t.version) {
        return Err(LambdaError::conflict(format!(
            "Unable to delete version because the following aliases reference it: [{a}]"
        )));
    }
    let n: u64 = t.version.parse().unwrap_or(0);
    match deploy::delete(&l.app, &store::version_name(&t.name, n)).await {
        Ok(()) | Err(deploy::Error::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let mut meta = t.meta;
    meta.versions.remove(&n);
    store::save(&l.app, &t.name, &meta)
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(super) struct AliasRequest {
    name: Option<String>,
    function_version: Option<String>,
    description: Option<String>,
    revision_id: Option<String>,
    routing_config: Option<Value>,
}

/// Alias names: Lambda's grammar (not all digits: those are versions).
fn check_alias(a: &str) -> Result<(), LambdaError> {
    let ok = !a.is_empty()
        && a.len() <= 128
        && !a.bytes().all(|b| b.is_ascii_digit())
        && a.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    match ok && a != "$LATEST" {
        true => Ok(()),
        false => Err(LambdaError::invalid(format!(
            "alias name {a:?}: use letters, digits, - and _ (not only digits)"
        ))),
    }
}

/// `$LATEST` or a version the function has.
fn check_target(meta: &store::Meta, version: &str) -> Result<(), LambdaError> {
    let known = version == "$LATEST"
        || version
            .parse::<u64>()
            .is_ok_and(|n| meta.versions.contains_key(&n));
    match known {
        true => Ok(()),
        false => Err(LambdaError::not_found(format!(
            "Function version {version} does not exist"
        ))),
    }
}

fn no_routing(r: &Option<Value>) -> Result<(), LambdaError> {
    let weighted = r
        .as_ref()
        .and_then(|v| v.get("AdditionalVersionWeights"))
        .and_then(Value::as_object)
        .is_some_and(|m| !m.is_empty());
    match weighted {
        true => Err(LambdaError::invalid(
            "weighted aliases (RoutingConfig) are not implemented by thaw",
        )),
        false => Ok(()),
    }
}

fn alias_json(l: &Lambda, name: &str, alias: &str, a: &store::Alias) -> Value {
    json!({
        "AliasArn": format!("{}:{alias}", arn(l, name)),
        "Name": alias,
        "FunctionVersion": a.version,
        "Description": a.description,
        "RevisionId": a.revision_id,
    })
}

pub async fn create_alias(
    State(l): Shared,
    Path(function): Path<String>,
    Body(req): Body<AliasRequest>,
) -> Result<Response, LambdaError> {
    no_routing(&req.routing_config)?;
    let alias = req
        .name
        .ok_or_else(|| LambdaError::invalid("Name is required"))?;
    check_alias(&alias)?;
    let version = req
        .function_version
        .ok_or_else(|| LambdaError::invalid("FunctionVersion is required"))?;
    let (_guard, mut t) = locked(&l, &function, None).await?;
    check_target(&t.meta, &version)?;
    if t.meta.aliases.contains_key(&alias) {
        return Err(LambdaError::conflict(format!(
            "Alias already exists: {}:{alias}",
            arn(&l, &t.name)
        )));
    }
    let a = store::Alias {
        version,
        description: req.description.unwrap_or_default(),
        revision_id: store::new_revision(),
    };
    t.meta.aliases.insert(alias.clone(), a.clone());
    store::save(&l.app, &t.name, &t.meta)?;
    Ok((
        StatusCode::CREATED,
        Json(alias_json(&l, &t.name, &alias, &a)),
    )
        .into_response())
}

fn alias_of<'a>(l: &Lambda, t: &'a Target, alias: &str) -> Result<&'a store::Alias, LambdaError> {
    t.meta.aliases.get(alias).ok_or_else(|| {
        LambdaError::not_found(format!("Alias not found: {}:{alias}", arn(l, &t.name)))
    })
}

pub async fn get_alias(
    State(l): Shared,
    Path((function, alias)): Path<(String, String)>,
) -> Result<Json<Value>, LambdaError> {
    let t = resolve(&l, &function, None)?;
    let a = alias_of(&l, &t, &alias)?;
    Ok(Json(alias_json(&l, &t.name, &alias, a)))
}

pub async fn update_alias(
    State(l): Shared,
    Path((function, alias)): Path<(String, String)>,
    Body(req): Body<AliasRequest>,
) -> Result<Json<Value>, LambdaError> {
    no_routing(&req.routing_config)?;
    let (_guard, mut t) = locked(&l, &function, None).await?;
    let mut a = alias_of(&l, &t, &alias)?.clone();
    check_revision(req.revision_id.as_deref(), &a.revision_id)?;
    if let Some(v) = req.function_version {
        check_target(&t.meta, &v)?;
        a.version = v;
    }
    if let Some(d) = req.description {
        a.description = d;
    }
    a.revision_id = store::new_revision();
    t.meta.aliases.insert(alias.clone(), a.clone());
    store::save(&l.app, &t.name, &t.meta)?;
    Ok(Json(alias_json(&l, &t.name, &alias, &a)))
}

pub async fn delete_alias(
    State(l): Shared,
    Path((function, alias)): Path<(String, String)>,
) -> Result<StatusCode, LambdaError> {
    let (_guard, mut t) = locked(&l, &function, None).await?;
    alias_of(&l, &t, &alias)?;
    t.meta.aliases.remove(&alias);
    store::save(&l.app, &t.name, &t.meta)?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn list_aliases(
    State(l): Shared,
    Path(function): Path<String>,
) -> Result<Json<Value>, LambdaError> {
    let t = resolve(&l, &function, None)?;
    let out: Vec<Value> = t
        .meta
        .aliases
        .iter()
        .map(|(n, a)| alias_json(&l, &t.name, n, a))
        .collect();
    Ok(Json(json!({ "Aliases": out })))
}
