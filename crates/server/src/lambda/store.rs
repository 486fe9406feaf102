//! What Lambda says of a function beyond the daemon's record: its Lambda
//! runtime name, description, code hash, revision, published versions and
//! aliases. Kept as `lambda.json` in the function's registry directory, so
//! it goes when the function does; a function deployed through the native
//! API has none until a Lambda call changes it (its defaults are derived
//! from its record).
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::app::App;
use crate::registry::Record;

/// What Lambda shows of `$LATEST`, or of a published version, beyond
/// the daemon's record.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Described {
    /// the runtime name it was created with (`python3.12`, ...)
    pub runtime: String,
    pub description: String,
    /// base64 SHA-256 of the deployment package, as Lambda gives it
    pub code_sha256: String,
    pub code_size: u64,
    pub revision_id: String,
    pub last_modified: String,
}

/// A function's Lambda side.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Meta {
    #[serde(flatten)]
    pub latest: Described,
    /// the role ARN given at create (not used: there is no IAM here)
    pub role: String,
    /// the number the next published version gets
    pub next_version: u64,
    pub versions: BTreeMap<u64, Published>,
    pub aliases: BTreeMap<String, Alias>,
}

/// A published version: the daemon's function `NAME--N`, deployed from
/// `$LATEST`'s code and configuration when it was published.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Published {
    #[serde(flatten)]
    pub described: Described,
    /// `$LATEST`'s revision it was published from (publishing an unchanged
    /// function gives this version back)
    pub from_revision: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Alias {
    /// `$LATEST` or a published version's number
    pub version: String,
    pub description: String,
    pub revision_id: String,
}

/// The daemon's function that serves published version `n` of `name`.
pub fn version_name(name: &str, n: u64) -> String {
    format!("{name}--{n}")
}

/// The runtime name Lambda shows for a record without a Lambda side.
pub fn default_runtime(rec: &Record) -> String {
    match rec.runtime {
        thaw_runtime::Runtime::Nodejs => "nodejs18.x".into(),
        thaw_runtime::Runtime::Python => "python3.11".into(),
        thaw_runtime::Runtime::Java => "java17".into(),
        thaw_runtime::Runtime::Provided => "provided.al2023".into(),
    }
}

fn path(app: &App, name: &str) -> PathBuf {
    app.registry.function_dir(name).join("lambda.json")
}

/// The function's Lambda side, or defaults from its record.
pub fn load(app: &App, rec: &Record) -> Meta {
    let read = std::fs::read(path(app, &rec.name))
        .ok()
        .and_then(|b| serde_json::from_slice::<Meta>(&b).ok());
    let mut m = read.unwrap_or_default();
    let l = &mut m.latest;
    if l.runtime.is_empty() {
        l.runtime = default_runtime(rec);
    }
    if l.revision_id.is_empty() {
        l.revision_id = format!("thaw-{}-{}", rec.name, rec.version);
    }
    if l.last_modified.is_empty() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(rec.created_unix);
        l.last_modified = super::sigv4::format_iso(t);
    }
    m.next_version = m.next_version.max(1);
    m
}

pub fn save(app: &App, name: &str, m: &Meta) -> Result<(), super::errors::LambdaError> {
    let data = serde_json::to_vec_pretty(m)
        .map_err(|e| super::errors::LambdaError::service(e.to_string()))?;
    crate::registry::write_private(&path(app, name), &data)
        .map_err(|e| super::errors::LambdaError::service(format!("{e:#}")))
}

/// A fresh revision id (a UUID's shape, as Lambda's).
pub fn new_revision() -> String {
    uuid_like()
}

/// 16 random bytes written as a UUID (version 4 bits set).
pub fn uuid_like() -> String {
    let mut b = rand::random::<[u8; 16]>();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// The time now as Lambda writes `LastModified`.
pub fn now_iso() -> String {
    super::sigv4::format_iso(std::time::SystemTime::now())
}
