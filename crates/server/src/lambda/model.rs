//! How a Lambda function maps onto the daemon's: names and qualifiers
//! resolved to the deployed function that serves them, a version's
//! `FunctionConfiguration` from its record and Lambda side, the deploy
//! request that rebuilds a function with its settings, and what every
//! handler shares (state, lock, body parsing).
use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::StatusCode;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use super::errors::LambdaError;
use super::{sigv4, store};
use crate::app::App;
use crate::deploy::{Code, DeployRequest};
use crate::instances::FnVersion;
use crate::registry::Record;

/// What the Lambda routes share.
pub struct Lambda {
    pub app: Arc<App>,
    pub creds: sigv4::Credentials,
    /// asynchronous invocations accepted and not yet finished
    pub queued: AtomicUsize,
}

pub(super) type Shared = State<Arc<Lambda>>;

/// A function as a request names it: its name and the qualifier given in
/// the name (`NAME:QUALIFIER`, or an ARN, full or partial).
pub(super) fn split_name(given: &str) -> Result<(String, Option<String>), LambdaError> {
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
    if let Some(q) = qualifier {
        check_qualifier(q)?;
    }
    Ok((name.to_string(), qualifier.map(String::from)))
}

/// A version (`$LATEST` or digits) or an alias name, as Lambda's grammar has them.
fn check_qualifier(q: &str) -> Result<(), LambdaError> {
    let ok = q == "$LATEST"
        || (!q.is_empty()
            && q.len() <= 128
            && q.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
    match ok {
        true => Ok(()),
        false => Err(LambdaError::invalid(format!(
            "qualifier {q:?}: use $LATEST, a version number or an alias name"
        ))),
    }
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
pub(super) struct Target {
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
pub(super) fn resolve(
    l: &Lambda,
    given: &str,
    qualifier: Option<&str>,
) -> Result<Target, LambdaError> {
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
    if let Some(q) = &q {
        check_qualifier(q)?;
    }
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
            let missing =
                || LambdaError::not_found(format!("Function not found: {}:{n}", arn(l, &name)));
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
pub(super) const ACCOUNT: &str = "000000000000";

/// A function's ARN (in the region clients sign for).
pub(super) fn arn(l: &Lambda, name: &str) -> String {
    format!(
        "arn:aws:lambda:{}:{ACCOUNT}:function:{name}",
        l.creds.region
    )
}

/// One function-level lock per Lambda function (its versions and aliases
/// change under it), apart from the deploy lock of the daemon's function.
pub(super) async fn lock(
    l: &Lambda,
    name: &str,
) -> Result<tokio::sync::OwnedMutexGuard<()>, LambdaError> {
    let taking = l.app.deploy_lock(&format!("lambda {name}")).lock_owned();
    l.app.within_lock_wait(taking).await.ok_or_else(|| {
        LambdaError::conflict(format!(
            "The operation cannot be performed at this time. An update is in progress for resource: {}",
            arn(l, name)
        ))
    })
}

/// Takes the function's lock, then resolves `given` with `qualifier`.
pub(super) async fn locked(
    l: &Lambda,
    given: &str,
    qualifier: Option<&str>,
) -> Result<(tokio::sync::OwnedMutexGuard<()>, Target), LambdaError> {
    let guard = lock(l, &split_name(given)?.0).await?;
    Ok((guard, resolve(l, given, qualifier)?))
}

/// A request body as JSON of `T` (an empty body as `T`'s default).
pub(super) struct Body<T>(pub T);

impl<T: serde::de::DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = LambdaError;

    async fn from_request(req: Request, state: &S) -> Result<Self, LambdaError> {
        let body = Bytes::from_request(req, state)
            .await
            .map_err(|e| LambdaError::invalid(e.body_text()))?;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Body(T::default()));
        }
        serde_json::from_slice(&body)
            .map(Body)
            .map_err(|e| LambdaError::invalid(format!("request body: {e}")))
    }
}

/// A deploy request of `code` with nothing else set.
pub(super) fn plain_request(name: &str, code: Code) -> DeployRequest {
    DeployRequest {
        name: name.to_string(),
        runtime: None,
        handler: String::new(),
        code,
        init: None,
        before_snapshot: None,
        after_restore: None,
        snapshot: None,
        packages: Vec::new(),
        memory_mb: None,
        cpu_millis: None,
        cpu_weight: None,
        timeout_ms: None,
        max_instances: None,
        env: BTreeMap::new(),
        secret_env: BTreeMap::new(),
        strategy: None,
        tier: None,
        sample_event: None,
        owner: None,
        network: None,
        root: None,
        only_if_absent: false,
    }
}

/// A deploy of `name` with `rec`'s settings (secrets and hooks included)
/// and `code` (none: `rec`'s own code, packed again).
pub(super) async fn redeploy_request(
    l: &Lambda,
    name: &str,
    rec: &Record,
    code: Option<Code>,
) -> Result<DeployRequest, LambdaError> {
    let app = l.app.clone();
    let (src_name, version) = (rec.name.clone(), rec.version);
    let (secrets, code) = tokio::task::spawn_blocking(move || {
        let (_, secrets) = app
            .registry
            .load(&src_name, version)
            .map_err(|e| LambdaError::service(format!("{e:#}")))?;
        let code = match code {
            Some(c) => c,
            None => {
                let dir = app.registry.version_dir(&src_name, version).join("code");
                let tgz = thaw_pack::pack_dir(&dir)
                    .map_err(|e| LambdaError::service(format!("packing the code: {e:#}")))?;
                Code {
                    format: "tar.gz".into(),
                    data_base64: base64::engine::general_purpose::STANDARD.encode(tgz),
                    filename: None,
                }
            }
        };
        Ok::<_, LambdaError>((secrets, code))
    })
    .await
    .map_err(|e| LambdaError::service(e.to_string()))??;
    Ok(DeployRequest {
        runtime: Some(rec.runtime.to_string()),
        handler: rec.handler.clone(),
        init: rec.init.clone(),
        before_snapshot: rec.before_snapshot.clone(),
        after_restore: rec.after_restore.clone(),
        packages: rec
            .packages
            .as_ref()
            .map(|p| p.requested.clone())
            .unwrap_or_default(),
        memory_mb: Some(rec.memory_mb),
        cpu_millis: rec.cpu_millis,
        cpu_weight: rec.cpu_weight,
        timeout_ms: Some(rec.timeout_ms),
        max_instances: Some(rec.max_instances),
        env: rec.env.clone(),
        secret_env: secrets,
        owner: Some(rec.owner.clone()),
        network: rec.network.clone(),
        root: rec.root.as_ref().map(|r| r.key.clone()),
        ..plain_request(name, code)
    })
}

/// A version's `FunctionConfiguration`.
pub(super) fn configuration(l: &Lambda, t: &Target) -> Value {
    let r = &t.v.rec;
    let m = &t.meta;
    let published = t
        .version
        .parse::<u64>()
        .ok()
        .and_then(|n| m.versions.get(&n));
    let d = published.map_or(&m.latest, |p| &p.described);
    let arn = arn(l, &t.name);
    let function_arn = match t.version.as_str() {
        "$LATEST" => arn,
        n => format!("{arn}:{n}"),
    };
    json!({
        "FunctionName": t.name,
        "FunctionArn": function_arn,
        "Runtime": d.runtime,
        "Role": if m.role.is_empty() { format!("arn:aws:iam::{}:role/thaw", ACCOUNT) } else { m.role.clone() },
        "Handler": r.handler,
        "CodeSize": if d.code_size > 0 { d.code_size } else { r.code_bytes },
        "Description": d.description,
        "Timeout": r.timeout_ms.div_ceil(1000),
        "MemorySize": r.memory_mb,
        "LastModified": d.last_modified,
        "CodeSha256": d.code_sha256,
        "Version": t.version,
        "Environment": {"Variables": r.env},
        "RevisionId": d.revision_id,
        "State": "Active",
        "LastUpdateStatus": "Successful",
        "PackageType": "Zip",
        "Architectures": ["x86_64"],
        "SnapStart": {
            "ApplyOn": "PublishedVersions",
            "OptimizationStatus": if r.snapshot.is_some() { "On" } else { "Off" },
        },
    })
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct QualifierQuery {
    #[serde(rename = "Qualifier")]
    pub qualifier: Option<String>,
}

/// 412 when the caller's `RevisionId` is not the function's now.
pub(super) fn check_revision(given: Option<&str>, now: &str) -> Result<(), LambdaError> {
    match given {
        Some(g) if g != now => Err(LambdaError::new(
            StatusCode::PRECONDITION_FAILED,
            "PreconditionFailedException",
            format!("The Revision Id provided does not match the latest Revision Id ({now}). Call GetFunction to get the latest Revision Id"),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_qualifiers_and_arns_split_as_lambda_reads_them() {
        let ok = |s: &str| split_name(s).unwrap();
        assert_eq!(ok("f"), ("f".into(), None));
        assert_eq!(ok("f:live"), ("f".into(), Some("live".into())));
        assert_eq!(
            ok("arn:aws:lambda:us-east-1:123456789012:function:f:7"),
            ("f".into(), Some("7".into()))
        );
        assert_eq!(ok("123456789012:function:f"), ("f".into(), None));
        for bad in ["", "F", "a--1", "a:b:c:d", "../f", "f:", &"a".repeat(64)] {
            let e = split_name(bad).map(|_| ()).unwrap_err();
            assert_eq!(e.kind, "InvalidParameterValueException", "{bad:?}");
        }
    }
}
