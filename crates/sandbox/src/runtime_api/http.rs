//! Just enough HTTP/1.1 for the Runtime API's clients (aws-lambda-go's
//! net/http, lambda_runtime's hyper, curl in a shell bootstrap): requests
//! with a `Content-Length` or chunked body, keep-alive, and answers with a
//! length. The client is the function, so everything is bounded and a
//! malformed request is an error, never a panic.

use std::collections::BTreeMap;

/// Longest request head (request line and headers).
pub const MAX_HEAD: usize = 16 << 10;

/// One parsed request.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    pub method: String,
    pub path: String,
    /// by lower-cased name (a repeated header: its last value)
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl HttpRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// What the bytes received so far hold.
#[derive(Debug, PartialEq)]
pub enum Parsed {
    /// not a whole request yet
    Partial,
    /// a request and how many bytes of the buffer it took
    Request(HttpRequest, usize),
    /// not HTTP, or over a limit: the status to answer and why
    Bad(u16, String),
}

/// Parses the first request of `buf`; bodies over `max_body` are refused.
pub fn parse(buf: &[u8], max_body: usize) -> Parsed {
    let Some(head_len) = find(buf, b"\r\n\r\n").map(|i| i + 4) else {
        return match buf.len() > MAX_HEAD {
            true => Parsed::Bad(431, "request head over 16 KiB".into()),
            false => Parsed::Partial,
        };
    };
    if head_len > MAX_HEAD {
        return Parsed::Bad(431, "request head over 16 KiB".into());
    }
    let Ok(head) = std::str::from_utf8(&buf[..head_len - 4]) else {
        return Parsed::Bad(400, "request head is not UTF-8".into());
    };
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Parsed::Bad(400, format!("a malformed request line {line:?}"));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !path.starts_with('/') {
        return Parsed::Bad(400, format!("a malformed request line {line:?}"));
    }
    let mut headers = BTreeMap::new();
    for l in lines {
        let Some((k, v)) = l.split_once(':') else {
            return Parsed::Bad(400, format!("a malformed header {l:?}"));
        };
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let mut req = HttpRequest {
        method: method.to_string(),
        path: path.to_string(),
        headers,
        body: Vec::new(),
    };
    let chunked = req
        .header("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"));
    if chunked {
        return match dechunk(&buf[head_len..], max_body) {
            Ok(Some((body, used))) => {
                req.body = body;
                Parsed::Request(req, head_len + used)
            }
            Ok(None) => Parsed::Partial,
            Err((status, why)) => Parsed::Bad(status, why),
        };
    }
    let len = match req.header("content-length").map(str::parse::<usize>) {
        None => 0,
        Some(Ok(n)) => n,
        Some(Err(_)) => return Parsed::Bad(400, "a malformed Content-Length".into()),
    };
    if len > max_body {
        return Parsed::Bad(413, format!("a body of {len} bytes (at most {max_body})"));
    }
    if buf.len() < head_len + len {
        return Parsed::Partial;
    }
    req.body = buf[head_len..head_len + len].to_vec();
    Parsed::Request(req, head_len + len)
}

/// A chunked body and the bytes it took (None: not all here yet), or the
/// status to refuse it with and why.
type Dechunked = Result<Option<(Vec<u8>, usize)>, (u16, String)>;

/// Joins a chunked body.
fn dechunk(mut buf: &[u8], max_body: usize) -> Dechunked {
    let total = buf.len();
    let mut body = Vec::new();
    loop {
        let Some(eol) = find(buf, b"\r\n") else {
            return Ok(None);
        };
        let size_text = std::str::from_utf8(&buf[..eol]).unwrap_or("");
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| (400, format!("a malformed chunk size {size_text:?}")))?;
        if body.len() + size > max_body {
            return Err((413, format!("a chunked body over {max_body} bytes")));
        }
        let rest = &buf[eol + 2..];
        if size == 0 {
            // no trailers are sent by the clients: the final CRLF
            return match rest.len() >= 2 {
                true if &rest[..2] == b"\r\n" => Ok(Some((body, total - rest.len() + 2))),
                true => Err((400, "trailers after a chunked body".into())),
                false => Ok(None),
            };
        }
        if rest.len() < size + 2 {
            return Ok(None);
        }
        if &rest[size..size + 2] != b"\r\n" {
            return Err((400, "a chunk not ended by CRLF".into()));
        }
        body.extend_from_slice(&rest[..size]);
        buf = &rest[size + 2..];
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// An answer with a body of `body` and extra headers.
pub fn response(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        202 => "Accepted",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        413 => "Payload Too Large",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    };
    let mut out = format!("HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_with_a_length_is_parsed_whole_and_not_before() {
        let raw = b"POST /a/b HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET";
        let Parsed::Request(r, used) = parse(raw, 100) else {
            panic!("not parsed");
        };
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/a/b"));
        assert_eq!(r.header("host"), Some("x"));
        assert_eq!(r.body, b"hello");
        assert_eq!(used, raw.len() - 3);
        assert_eq!(parse(&raw[..raw.len() - 4], 100), Parsed::Partial);
    }

    #[test]
    fn a_chunked_body_is_joined() {
        let raw = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x\r\nde\r\n0\r\n\r\n";
        let Parsed::Request(r, used) = parse(raw, 100) else {
            panic!("not parsed");
        };
        assert_eq!(r.body, b"abcde");
        assert_eq!(used, raw.len());
        assert_eq!(parse(&raw[..raw.len() - 1], 100), Parsed::Partial);
    }

    #[test]
    fn bad_requests_and_limits_are_refused_with_a_status() {
        let bad = |raw: &[u8], max| match parse(raw, max) {
            Parsed::Bad(s, _) => s,
            other => panic!("accepted {other:?}"),
        };
        assert_eq!(bad(b"GARBAGE\r\n\r\n", 10), 400);
        assert_eq!(bad(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 10), 400);
        assert_eq!(
            bad(b"GET / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", 10),
            413
        );
        let big = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nff\r\n";
        assert_eq!(bad(big, 10), 413);
        assert_eq!(bad(&vec![b'a'; MAX_HEAD + 1], 10), 431);
    }
}
