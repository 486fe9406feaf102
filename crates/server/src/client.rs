//! A small blocking HTTP/1.1 client for the daemon's Unix socket (or TCP):
//! what `thaw fn ...`, the tests and `thaw bench serve` use.
use anyhow::{anyhow, bail, Context, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub enum Target {
    Unix(PathBuf),
    Tcp(std::net::SocketAddr),
}

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
        serde_json::from_slice(&self.body).with_context(|| {
            format!(
                "response ({}) is not JSON: {}",
                self.status,
                String::from_utf8_lossy(&self.body[..self.body.len().min(300)])
            )
        })
    }
}

trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

/// One connection, kept alive across requests.
pub struct Client {
    target: Target,
    token: Option<String>,
    conn: Option<BufReader<Box<dyn Stream + Send>>>,
}

impl Client {
    pub fn new(target: Target) -> Client {
        Client {
            target,
            token: None,
            conn: None,
        }
    }

    pub fn with_token(mut self, token: Option<String>) -> Client {
        self.token = token;
        self
    }

    fn connect(&self) -> Result<BufReader<Box<dyn Stream + Send>>> {
        let s: Box<dyn Stream + Send> = match &self.target {
            Target::Unix(p) => {
                Box::new(std::os::unix::net::UnixStream::connect(p).with_context(|| {
                    format!("connecting to {} (is `thaw serve` running?)", p.display())
                })?)
            }
            Target::Tcp(a) => {
                let s = std::net::TcpStream::connect(a)
                    .with_context(|| format!("connecting to {a}"))?;
                s.set_nodelay(true)?;
                Box::new(s)
            }
        };
        Ok(BufReader::new(s))
    }

    pub fn request(&mut self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Response> {
        // a kept-alive connection may have been closed by the server: retry once
        let reused = self.conn.is_some();
        match self.try_request(method, path, body) {
            Ok(r) => Ok(r),
            Err(_) if reused => {
                self.conn = None;
                self.try_request(method, path, body)
            }
            Err(e) => Err(e),
        }
    }

    fn try_request(&mut self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Response> {
        if self.conn.is_none() {
            self.conn = Some(self.connect()?);
        }
        let res = self.exchange(method, path, body);
        if res.is_err() {
            self.conn = None;
        }
        res
    }

    fn exchange(&mut self, method: &str, path: &str, body: Option<&[u8]>) -> Result<Response> {
        let conn = self.conn.as_mut().expect("connected above");
        let mut head = format!("{method} {path} HTTP/1.1\r\nhost: thaw\r\n");
        if let Some(t) = &self.token {
            head += &format!("authorization: Bearer {t}\r\n");
        }
        let body = body.unwrap_or(b"");
        if !body.is_empty() || matches!(method, "POST" | "PUT") {
            head += &format!(
                "content-type: application/json\r\ncontent-length: {}\r\n",
                body.len()
            );
        }
        head += "\r\n";
        let w = conn.get_mut();
        w.write_all(head.as_bytes())?;
        w.write_all(body)?;
        w.flush()?;
        let mut line = String::new();
        if conn.read_line(&mut line)? == 0 {
            bail!("the daemon closed the connection");
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow!("malformed status line {line:?}"))?;
        let mut headers = Vec::new();
        loop {
            line.clear();
            conn.read_line(&mut line)?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let get = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        if status == 204 || status == 304 || status < 200 || method == "HEAD" {
            // no body, whatever the headers say
        } else if let Some(n) = get("content-length") {
            let n: usize = n.parse().context("bad content-length")?;
            body.resize(n, 0);
            conn.read_exact(&mut body)?;
        } else if get("transfer-encoding").is_some_and(|t| t.contains("chunked")) {
            loop {
                line.clear();
                conn.read_line(&mut line)?;
                let n = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .context("bad chunk size")?;
                let mut chunk = vec![0; n + 2];
                conn.read_exact(&mut chunk)?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        } else {
            conn.read_to_end(&mut body)?;
            self.conn = None;
        }
        if get("connection").is_some_and(|c| c.eq_ignore_ascii_case("close")) {
            self.conn = None;
        }
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}
