//! thaw-client: a small blocking client of the `thaw serve` API over its
//! Unix socket or TCP, on hyper's HTTP/1.1 connection. What `thaw fn ...`,
//! the shim, the benchmarks and the tests use: one kept-alive connection per
//! [`Client`], any request ([`Client::request`]) and the common ones by name
//! (deploy, invoke, list, get, delete, metrics). See docs/API.md.
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use std::path::PathBuf;

/// Where the daemon listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Unix(PathBuf),
    Tcp(std::net::SocketAddr),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Unix(p) => write!(f, "{}", p.display()),
            Target::Tcp(a) => write!(f, "{a}"),
        }
    }
}

/// Why a request got no response.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connecting to {target}{hint}", hint = if matches!(target, Target::Unix(_)) { " (is `thaw serve` running?)" } else { "" })]
    Connect {
        target: Target,
        #[source]
        source: std::io::Error,
    },
    #[error("the client's event loop: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("{method} {path}: not a valid request: {source}")]
    Request {
        method: String,
        path: String,
        #[source]
        source: hyper::http::Error,
    },
    #[error("HTTP exchange with the daemon: {0}")]
    Http(#[from] hyper::Error),
    #[error("response ({status}) is not JSON: {head}")]
    NotJson {
        status: u16,
        /// the body's first 300 bytes
        head: String,
        #[source]
        source: serde_json::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// lower-case names
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Result<serde_json::Value> {
        serde_json::from_slice(&self.body).map_err(|source| Error::NotJson {
            status: self.status,
            head: String::from_utf8_lossy(&self.body[..self.body.len().min(300)]).into(),
            source,
        })
    }
}

/// One connection, kept alive across requests; blocking (its own
/// single-threaded event loop runs the connection during each request, so
/// it may be used from any thread that is not itself an async task).
pub struct Client {
    target: Target,
    token: Option<String>,
    rt: Option<tokio::runtime::Runtime>,
    conn: Option<SendRequest<Full<Bytes>>>,
}

impl Client {
    pub fn new(target: Target) -> Client {
        Client {
            target,
            token: None,
            rt: None,
            conn: None,
        }
    }

    /// Sends `authorization: Bearer TOKEN` (the daemon's TCP listener asks
    /// for it when it has a token file).
    pub fn with_token(mut self, token: Option<String>) -> Client {
        self.token = token;
        self
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// `POST /v1/functions` with a deploy request.
    pub fn deploy(&mut self, request: &serde_json::Value) -> Result<Response> {
        self.post_json("/v1/functions", request)
    }

    /// `POST /v1/functions/NAME/invoke` with the event's JSON bytes.
    pub fn invoke(&mut self, name: &str, event: &[u8]) -> Result<Response> {
        self.request("POST", &format!("/v1/functions/{name}/invoke"), Some(event))
    }

    /// `GET /v1/functions`.
    pub fn list(&mut self) -> Result<Response> {
        self.request("GET", "/v1/functions", None)
    }

    /// `GET /v1/functions/NAME`.
    pub fn get(&mut self, name: &str) -> Result<Response> {
        self.request("GET", &format!("/v1/functions/{name}"), None)
    }

    /// `DELETE /v1/functions/NAME`.
    pub fn delete(&mut self, name: &str) -> Result<Response> {
        self.request("DELETE", &format!("/v1/functions/{name}"), None)
    }

    /// `GET /metrics` (Prometheus text).
    pub fn metrics(&mut self) -> Result<Response> {
        self.request("GET", "/metrics", None)
    }

    /// `POST path` with `body` as JSON.
    pub fn post_json(&mut self, path: &str, body: &serde_json::Value) -> Result<Response> {
        let bytes = serde_json::to_vec(body).expect("a JSON value serializes");
        self.request("POST", path, Some(&bytes))
    }

    /// Any request; a body is sent as `application/json`.
    pub fn request(&mut self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Response> {
        let body = Bytes::copy_from_slice(body.unwrap_or(b""));
        let token = self.token.as_deref();
        let build = || request(method, path, token, body.clone());
        if self.rt.is_none() {
            self.rt = Some(
                tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .build()
                    .map_err(Error::Runtime)?,
            );
        }
        let rt = self.rt.as_ref().expect("made above");
        let (target, conn) = (&self.target, &mut self.conn);
        rt.block_on(async {
            if let Some(send) = conn.take().filter(|s| !s.is_closed()) {
                // the daemon may have closed the kept-alive connection in
                // the meantime: then once more on a new one
                if let Ok((send, r)) = exchange(send, build()?).await {
                    *conn = Some(send);
                    return Ok(r);
                }
            }
            let (send, r) = exchange(connect(target).await?, build()?).await?;
            *conn = Some(send);
            Ok(r)
        })
    }
}

fn request(
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Bytes,
) -> Result<hyper::Request<Full<Bytes>>> {
    let mut b = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "thaw");
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    if !body.is_empty() || matches!(method, "POST" | "PUT") {
        b = b.header("content-type", "application/json");
    }
    b.body(Full::new(body)).map_err(|source| Error::Request {
        method: method.into(),
        path: path.into(),
        source,
    })
}

/// One request and its whole response on `send`, handed back for the next.
async fn exchange(
    mut send: SendRequest<Full<Bytes>>,
    req: hyper::Request<Full<Bytes>>,
) -> Result<(SendRequest<Full<Bytes>>, Response)> {
    send.ready().await?;
    let res = send.send_request(req).await?;
    let (parts, body) = res.into_parts();
    let body = body.collect().await?.to_bytes().to_vec();
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| {
            let v = String::from_utf8_lossy(v.as_bytes()).trim().to_string();
            (k.as_str().to_string(), v)
        })
        .collect();
    let r = Response {
        status: parts.status.as_u16(),
        headers,
        body,
    };
    Ok((send, r))
}

async fn connect(target: &Target) -> Result<SendRequest<Full<Bytes>>> {
    let err = |source| Error::Connect {
        target: target.clone(),
        source,
    };
    match target {
        Target::Unix(p) => {
            let s = tokio::net::UnixStream::connect(p).await.map_err(err)?;
            handshake(s).await
        }
        Target::Tcp(a) => {
            let s = tokio::net::TcpStream::connect(a).await.map_err(err)?;
            s.set_nodelay(true).map_err(err)?;
            handshake(s).await
        }
    }
}

async fn handshake<S>(stream: S) -> Result<SendRequest<Full<Bytes>>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (send, conn) = http1::handshake(TokioIo::new(stream)).await?;
    // runs while a request is under way (the loop is driven only then); it
    // ends when the daemon closes the connection or `send` is dropped
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}
