//! The client against a small HTTP/1.1 server this test starts on a Unix
//! socket (and on loopback TCP) of its own.
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use thaw_client::{Client, Error, Target};

/// A server that answers every request with a JSON echo of what it got, and
/// closes each connection after `per_conn` requests.
struct Server {
    rt: tokio::runtime::Runtime,
    dir: PathBuf,
    socket: PathBuf,
    conns: Arc<AtomicUsize>,
}

async fn echo(
    req: hyper::Request<hyper::body::Incoming>,
    conn: usize,
) -> Result<hyper::Response<Full<Bytes>>, hyper::Error> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await?.to_bytes();
    let h = |n: &str| {
        parts
            .headers
            .get(n)
            .map(|v| v.to_str().unwrap_or("?").to_string())
    };
    let out = serde_json::json!({
        "method": parts.method.as_str(),
        "path": parts.uri.to_string(),
        "body": String::from_utf8_lossy(&body),
        "authorization": h("authorization"),
        "content_type": h("content-type"),
        "host": h("host"),
        "conn": conn,
    });
    if parts.uri.path() == "/text" {
        return Ok(hyper::Response::builder()
            .status(503)
            .header("X-Mixed-Case", " v ")
            .body(Full::new(Bytes::from_static(b"not json")))
            .unwrap());
    }
    Ok(hyper::Response::builder()
        .status(if parts.method == "DELETE" { 204 } else { 200 })
        .header("content-type", "application/json")
        .body(Full::new(if parts.method == "DELETE" {
            Bytes::new()
        } else {
            Bytes::from(out.to_string())
        }))
        .unwrap())
}

impl Server {
    fn start(tag: &str, per_conn: usize) -> Server {
        let dir = std::env::temp_dir().join(format!("thaw-client-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("api.sock");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let conns = Arc::new(AtomicUsize::new(0));
        let l = {
            let _in = rt.enter();
            tokio::net::UnixListener::bind(&socket).unwrap()
        };
        let c = conns.clone();
        rt.spawn(async move {
            loop {
                let Ok((s, _)) = l.accept().await else { return };
                let n = c.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::spawn(serve_conn(TokioIo::new(s), n, per_conn));
            }
        });
        Server {
            rt,
            dir,
            socket,
            conns,
        }
    }

    fn tcp(&self) -> std::net::SocketAddr {
        let l = self
            .rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let a = l.local_addr().unwrap();
        let c = self.conns.clone();
        self.rt.spawn(async move {
            loop {
                let Ok((s, _)) = l.accept().await else { return };
                let n = c.fetch_add(1, Ordering::SeqCst) + 1;
                tokio::spawn(serve_conn(TokioIo::new(s), n, usize::MAX));
            }
        });
        a
    }
}

async fn serve_conn<I>(io: I, conn: usize, per_conn: usize)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let served = Arc::new(AtomicUsize::new(0));
    let svc = service_fn(move |req| {
        let served = served.clone();
        async move {
            let mut r = echo(req, conn).await?;
            if served.fetch_add(1, Ordering::SeqCst) + 1 >= per_conn {
                r.headers_mut().insert(
                    "connection",
                    hyper::header::HeaderValue::from_static("close"),
                );
            }
            Ok::<_, hyper::Error>(r)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, svc)
        .await;
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn requests_share_one_connection_and_carry_body_token_and_headers() {
    let s = Server::start("keep", usize::MAX);
    let mut c = Client::new(Target::Unix(s.socket.clone())).with_token(Some("tok".into()));
    let r = c.deploy(&serde_json::json!({"name": "f"})).expect("deploy");
    assert_eq!(r.status, 200);
    let j = r.json().unwrap();
    assert_eq!(j["method"], "POST");
    assert_eq!(j["path"], "/v1/functions");
    assert_eq!(j["body"], r#"{"name":"f"}"#);
    assert_eq!(j["authorization"], "Bearer tok");
    assert_eq!(j["content_type"], "application/json");
    assert_eq!(j["host"], "thaw");
    assert_eq!(r.header("content-type"), Some("application/json"));

    let j = c.invoke("f", b"{\"x\":1}").unwrap().json().unwrap();
    assert_eq!(j["path"], "/v1/functions/f/invoke");
    assert_eq!(j["body"], r#"{"x":1}"#);
    let j = c.list().unwrap().json().unwrap();
    assert_eq!(
        (j["method"].as_str(), j["content_type"].as_str()),
        (Some("GET"), None)
    );
    assert_eq!(
        c.get("f").unwrap().json().unwrap()["path"],
        "/v1/functions/f"
    );
    assert_eq!(c.metrics().unwrap().json().unwrap()["path"], "/metrics");
    let d = c.delete("f").unwrap();
    assert_eq!((d.status, d.body.len()), (204, 0));
    // an empty POST still says what it is
    let j = c.request("POST", "/x", None).unwrap().json().unwrap();
    assert_eq!(
        (j["content_type"].as_str(), j["body"].as_str()),
        (Some("application/json"), Some(""))
    );
    assert_eq!(
        s.conns.load(Ordering::SeqCst),
        1,
        "one kept-alive connection"
    );
}

#[test]
fn a_connection_the_server_closed_is_replaced() {
    // every connection serves one request, then closes
    let s = Server::start("close", 1);
    let mut c = Client::new(Target::Unix(s.socket.clone()));
    for i in 1..=3 {
        let j = c.list().unwrap().json().unwrap();
        assert_eq!(j["conn"], i);
    }
    assert_eq!(s.conns.load(Ordering::SeqCst), 3);
}

#[test]
fn tcp_target_works_too() {
    let s = Server::start("tcp", usize::MAX);
    let a = s.tcp();
    let mut c = Client::new(Target::Tcp(a));
    for _ in 0..2 {
        assert_eq!(c.list().unwrap().status, 200);
    }
    assert_eq!(s.conns.load(Ordering::SeqCst), 1);
}

#[test]
fn errors_say_what_went_wrong() {
    let s = Server::start("errors", usize::MAX);
    let mut c = Client::new(Target::Unix(s.socket.clone()));
    let r = c.request("GET", "/text", None).unwrap();
    assert_eq!(r.status, 503);
    assert_eq!(
        r.header("x-mixed-case"),
        Some("v"),
        "names lower-cased, values trimmed"
    );
    match r.json() {
        Err(Error::NotJson {
            status: 503, head, ..
        }) => assert_eq!(head, "not json"),
        o => panic!("expected NotJson, got {o:?}"),
    }
    let missing = s.dir.join("nobody.sock");
    let e = Client::new(Target::Unix(missing.clone()))
        .list()
        .expect_err("nothing listens there");
    assert!(matches!(&e, Error::Connect { target: Target::Unix(p), .. } if *p == missing));
    assert!(e.to_string().contains("is `thaw serve` running?"), "{e}");
    let e = c
        .request("GET", "no spaces allowed", None)
        .expect_err("bad path");
    assert!(matches!(e, Error::Request { .. }), "{e:?}");
}

#[test]
fn a_connection_dropped_without_notice_is_retried_once() {
    use std::io::{BufRead, BufReader, Write};
    // answers one request per connection as if keeping it alive, then
    // drops it silently
    let dir = std::env::temp_dir().join(format!("thaw-client-drop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("api.sock");
    let l = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let server = std::thread::spawn(move || {
        for n in 1..=3 {
            let (s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s);
            let mut line = String::new();
            while r.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
                line.clear();
            }
            let body = format!("{{\"conn\":{n}}}");
            let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
            r.get_mut().write_all(head.as_bytes()).unwrap();
            r.get_mut().write_all(body.as_bytes()).unwrap();
        }
    });
    let mut c = Client::new(Target::Unix(socket));
    for n in 1..=3 {
        assert_eq!(c.list().unwrap().json().unwrap()["conn"], n);
    }
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
