//! AWS Signature Version 4, checked on every Lambda API request: the
//! daemon's one access key (a key file in the home, made at first start),
//! the canonical request rebuilt from what arrived, the signing key derived
//! from the secret for the request's date, region and service.
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::errors::LambdaError;

/// How far a request's `X-Amz-Date` may be from the daemon's clock.
pub const MAX_SKEW: Duration = Duration::from_secs(15 * 60);
/// The service name clients sign Lambda's requests for.
const SERVICE: &str = "lambda";

/// The daemon's access key and the region it answers as.
#[derive(Clone, Serialize, Deserialize)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub region: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // the secret never reaches a log
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// The key file under a state directory (`HOME/serve`).
pub fn key_file(state_dir: &Path) -> PathBuf {
    state_dir.join("lambda-credentials.json")
}

/// Reads the key file, making it (0600, a fresh random key) when there is none.
pub fn load_or_create(state_dir: &Path) -> std::io::Result<Credentials> {
    let path = key_file(state_dir);
    match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
            let id: String = rand::random::<[u8; 16]>()
                .iter()
                .map(|b| UPPER[(*b & 31) as usize] as char)
                .collect();
            let c = Credentials {
                // AWS's shape: AKIA and 16 more characters
                access_key_id: format!("AKIA{id}"),
                secret_access_key: base64_secret(),
                region: "us-east-1".into(),
            };
            let data = serde_json::to_vec_pretty(&c).map_err(std::io::Error::other)?;
            crate::registry::write_private(&path, &data).map_err(std::io::Error::other)?;
            Ok(c)
        }
        Err(e) => Err(e),
    }
}

fn base64_secret() -> String {
    use base64::Engine as _;
    // 30 random bytes: 40 characters, as AWS's secrets are
    base64::engine::general_purpose::STANDARD
        .encode(rand::random::<[u8; 30]>())
        .replace(['+', '/'], "A")
}

/// What was signed: the request as it arrived.
pub struct Signed<'a> {
    pub method: &'a str,
    /// the path as sent (still percent-encoded)
    pub path: &'a str,
    pub query: &'a str,
    pub headers: &'a axum::http::HeaderMap,
    pub body: &'a [u8],
}

fn denied(kind: &str, message: impl Into<String>) -> LambdaError {
    LambdaError::new(axum::http::StatusCode::FORBIDDEN, kind, message)
}

/// Checks the request's signature against `creds` at `now`.
pub fn verify(creds: &Credentials, req: &Signed, now: SystemTime) -> Result<(), LambdaError> {
    let auth = header(req.headers, "authorization").ok_or_else(|| {
        denied(
            "MissingAuthenticationTokenException",
            "Missing Authentication Token",
        )
    })?;
    let fields = auth.strip_prefix("AWS4-HMAC-SHA256 ").ok_or_else(|| {
        denied(
            "IncompleteSignatureException",
            "the Authorization header is not AWS4-HMAC-SHA256",
        )
    })?;
    let (mut credential, mut signed_headers, mut signature) = (None, None, None);
    for part in fields.split(',') {
        match part.trim().split_once('=') {
            Some(("Credential", v)) => credential = Some(v),
            Some(("SignedHeaders", v)) => signed_headers = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => {}
        }
    }
    let (Some(credential), Some(signed_headers), Some(signature)) =
        (credential, signed_headers, signature)
    else {
        return Err(denied(
            "IncompleteSignatureException",
            "the Authorization header lacks Credential, SignedHeaders or Signature",
        ));
    };
    let scope: Vec<&str> = credential.split('/').collect();
    let [key_id, day, region, service, terminal] = scope[..] else {
        return Err(denied(
            "IncompleteSignatureException",
            format!("credential {credential:?} is not KEY/DATE/REGION/SERVICE/aws4_request"),
        ));
    };
    if key_id != creds.access_key_id {
        return Err(denied(
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        ));
    }
    if region != creds.region {
        return Err(denied(
            "InvalidSignatureException",
            format!(
                "Credential should be scoped to a valid region, not '{region}' (this endpoint is '{}')",
                creds.region
            ),
        ));
    }
    if service != SERVICE || terminal != "aws4_request" {
        return Err(denied(
            "InvalidSignatureException",
            format!("Credential should be scoped to correct service: '{SERVICE}'"),
        ));
    }
    let stamp = header(req.headers, "x-amz-date").ok_or_else(|| {
        denied(
            "IncompleteSignatureException",
            "the request has no X-Amz-Date header",
        )
    })?;
    let at = parse_stamp(stamp).ok_or_else(|| {
        denied(
            "IncompleteSignatureException",
            format!("X-Amz-Date {stamp:?} is not YYYYMMDDTHHMMSSZ"),
        )
    })?;
    if !stamp.starts_with(day) || day.len() != 8 {
        return Err(denied(
            "InvalidSignatureException",
            "the credential's date is not the X-Amz-Date's",
        ));
    }
    let skew = match now.duration_since(at) {
        Ok(d) => d,
        Err(e) => e.duration(),
    };
    if skew > MAX_SKEW {
        return Err(denied(
            "InvalidSignatureException",
            format!(
                "Signature expired: {stamp} is now earlier or later than 15 minutes from {}",
                format_stamp(now)
            ),
        ));
    }
    let names: Vec<&str> = signed_headers.split(';').collect();
    if !names.contains(&"host") {
        return Err(denied(
            "InvalidSignatureException",
            "the signed headers must include host",
        ));
    }
    let canonical = canonical_request(req, &names);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{stamp}\n{day}/{region}/{SERVICE}/aws4_request\n{}",
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let key = signing_key(&creds.secret_access_key, day, region);
    let expected = hex::encode(hmac(&key, to_sign.as_bytes()));
    // compared as digests: the time taken says nothing of how much matched
    if Sha256::digest(expected.as_bytes()) != Sha256::digest(signature.as_bytes()) {
        return Err(denied(
            "InvalidSignatureException",
            "The request signature we calculated does not match the signature you provided. \
             Check your AWS Secret Access Key and signing method.",
        ));
    }
    Ok(())
}

fn header<'a>(h: &'a axum::http::HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The canonical request of SigV4 for what arrived, over `signed` headers.
pub fn canonical_request(req: &Signed, signed: &[&str]) -> String {
    // the path is encoded once more, as clients do for every service but S3
    let path = if req.path.is_empty() { "/" } else { req.path };
    let uri = encode(&normalize_path(path), "/");
    let mut pairs: Vec<(String, String)> = req
        .query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (encode(&decode(k), ""), encode(&decode(v), ""))
        })
        .collect();
    pairs.sort();
    let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut headers = String::new();
    for name in signed {
        let values: Vec<String> = req
            .headers
            .get_all(*name)
            .iter()
            .map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        headers += &format!("{name}:{}\n", values.join(","));
    }
    format!(
        "{}\n{uri}\n{}\n{headers}\n{}\n{}",
        req.method.to_ascii_uppercase(),
        query.join("&"),
        signed.join(";"),
        hex::encode(Sha256::digest(req.body))
    )
}

/// The path with `.` and `..` segments and repeated slashes resolved, as
/// clients resolve it before signing.
fn normalize_path(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    let mut s = format!("/{}", out.join("/"));
    if path.ends_with('/') && s != "/" {
        s.push('/');
    }
    s
}

/// Percent-encodes every byte but ASCII letters, digits, `_.-~` and `safe`.
fn encode(s: &str, safe: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"_.-~".contains(&b) || safe.as_bytes().contains(&b) {
            out.push(b as char);
        } else {
            out += &format!("%{b:02X}");
        }
    }
    out
}

/// Decodes `%XX` escapes (and `+` is kept: clients encode spaces as %20).
pub fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hexval = |c: u8| (c as char).to_digit(16).and_then(|d| u8::try_from(d).ok());
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hexval(b[i + 1]), hexval(b[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn signing_key(secret: &str, day: &str, region: &str) -> Vec<u8> {
    let k = hmac(format!("AWS4{secret}").as_bytes(), day.as_bytes());
    let k = hmac(&k, region.as_bytes());
    let k = hmac(&k, SERVICE.as_bytes());
    hmac(&k, b"aws4_request")
}

/// `YYYYMMDDTHHMMSSZ` as a time.
fn parse_stamp(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<u64>().ok();
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, se) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let int = |v: u64| i64::try_from(v).ok();
    let days = days_from_civil(int(y)?, int(mo)?, int(d)?);
    let secs = days.checked_mul(86400)? + int(h * 3600 + mi * 60 + se)?;
    Some(UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).ok()?))
}

/// A time as `YYYYMMDDTHHMMSSZ`.
pub fn format_stamp(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
}

/// A time as Lambda writes `LastModified`: `2024-01-31T12:00:00.000+0000`.
pub fn format_iso(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.000+0000")
}

fn civil(t: SystemTime) -> (i64, i64, i64, u64, u64, u64) {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    #[allow(clippy::cast_possible_wrap)] // u64 seconds / 86400 < 2^48
    let (days, rem) = ((secs / 86400) as i64, secs % 86400);
    // Howard Hinnant's days-to-civil algorithm
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's published example ("get-vanilla" of the SigV4 test suite):
    /// the key, request and signature of its documentation.
    #[test]
    fn signs_as_the_aws_test_suite_does() {
        let mut h = axum::http::HeaderMap::new();
        h.insert("host", "example.amazonaws.com".parse().unwrap());
        h.insert("x-amz-date", "20150830T123600Z".parse().unwrap());
        let req = Signed {
            method: "GET",
            path: "/",
            query: "",
            headers: &h,
            body: b"",
        };
        let c = canonical_request(&req, &["host", "x-amz-date"]);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n{}",
            hex::encode(Sha256::digest(c.as_bytes()))
        );
        let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
        let k = hmac(format!("AWS4{secret}").as_bytes(), b"20150830");
        let k = hmac(&hmac(&hmac(&k, b"us-east-1"), b"service"), b"aws4_request");
        assert_eq!(
            hex::encode(hmac(&k, to_sign.as_bytes())),
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    #[test]
    fn dates_round_trip() {
        let t = parse_stamp("20261129T012345Z").unwrap();
        assert_eq!(format_stamp(t), "20261129T012345Z");
        assert_eq!(format_iso(t), "2026-11-29T01:23:45.000+0000");
        assert!(parse_stamp("20261329T012345Z").is_none());
        assert!(parse_stamp("2026-11-29").is_none());
    }

    #[test]
    fn query_and_path_are_encoded_as_clients_sign_them() {
        assert_eq!(encode("a b/c~%", "/"), "a%20b/c~%25");
        assert_eq!(encode("a:b/", ""), "a%3Ab%2F");
        assert_eq!(decode("a%3Ab%2"), "a:b%2");
        assert_eq!(normalize_path("/a/./b/../c//"), "/a/c/");
    }
}
