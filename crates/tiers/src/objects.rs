//! The remote tier's client: any S3-compatible store through `object_store`
//! (the emulated MinIO, or a real bucket by changing the tier's url and
//! setting AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY). Every object is
//! sealed on the way out and opened (authenticated) on the way back.
//! Requests carry a deadline: a store that is down or slow gives a clear
//! error, never a hang.
use crate::config::TierConfig;
use crate::error::{Result, TiersError};
use crate::seal::{self, Header, Key, HEADER_LEN};
use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjPath;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};
use std::ops::Range;
use std::path::Path;
use std::time::{Duration, Instant};
use thaw_error::fail;
use thaw_error::{Context, ResultExt};
use thaw_memory::usize_of;

/// Connecting to the store.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// One request, unless the tier configures its own.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The object [`RemoteStore::warm`] asks for (it need not exist).
const WARM_PROBE: &str = ".thaw-warm";
/// How long the client keeps an idle connection (reqwest's default).
pub const POOL_IDLE: Duration = Duration::from_secs(90);

/// When one GET's steps ended, in ms from a caller's start: the request
/// sent, the response's headers in (time to first byte), its body in, and
/// the body opened (authenticated and, if compressed, decompressed).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GetTiming {
    pub object: String,
    pub sent_ms: f64,
    pub headers_ms: f64,
    pub body_ms: f64,
    pub opened_ms: f64,
    pub stored_bytes: u64,
}

/// An object's plaintext and how its GET went.
pub type Timed = (Vec<u8>, GetTiming);

fn since(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1e3
}

/// The client's own runtime. Dropped without waiting for its I/O thread:
/// a daemon drops its client on an async task, where a blocking shutdown
/// would panic.
struct ClientRuntime(Option<tokio::runtime::Runtime>);

impl std::ops::Deref for ClientRuntime {
    type Target = tokio::runtime::Runtime;
    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect("present until dropped")
    }
}

impl Drop for ClientRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

pub struct RemoteStore {
    rt: ClientRuntime,
    store: AmazonS3,
    key: Key,
    pub url: String,
    timeout: Duration,
}

/// "http://host:port/bucket" into ("http://host:port", "bucket").
fn split_url(url: &str) -> Result<(String, String)> {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        fail!(
            TiersError::Config,
            "url {url}: want http(s)://host:port/bucket"
        );
    };
    let rest = &url[scheme_end..];
    let Some((host, bucket)) = rest.split_once('/') else {
        fail!(
            TiersError::Config,
            "url {url} names no bucket (want http(s)://host:port/bucket)"
        );
    };
    let bucket = bucket.trim_end_matches('/');
    if host.is_empty() || bucket.is_empty() || bucket.contains('/') {
        fail!(
            TiersError::Config,
            "url {url}: want http(s)://host:port/bucket"
        );
    }
    Ok((
        url[..scheme_end + host.len()].to_string(),
        bucket.to_string(),
    ))
}

impl RemoteStore {
    pub fn open(home: &Path, t: &TierConfig) -> Result<RemoteStore> {
        let Some(url) = t.url.clone() else {
            fail!(
                TiersError::Config,
                "tier {}: a remote tier needs a url",
                t.name
            );
        };
        let (endpoint, bucket) = split_url(&url)?;
        let timeout = t
            .request_timeout_s
            .map(Duration::from_secs)
            .unwrap_or(REQUEST_TIMEOUT);
        let mut b = if t.emulated {
            let (user, secret) = crate::remote::credentials(home, t)?;
            AmazonS3Builder::new()
                .with_access_key_id(user)
                .with_secret_access_key(secret)
        } else {
            AmazonS3Builder::from_env()
        };
        b = b
            .with_endpoint(&endpoint)
            .with_bucket_name(&bucket)
            .with_region("us-east-1")
            .with_client_options(
                ClientOptions::new()
                    .with_allow_http(endpoint.starts_with("http://"))
                    .with_connect_timeout(CONNECT_TIMEOUT)
                    .with_pool_idle_timeout(POOL_IDLE)
                    .with_timeout(timeout),
            )
            .with_retry(RetryConfig {
                max_retries: 1,
                retry_timeout: timeout,
                ..Default::default()
            });
        let store = b.build().context("configuring the object store client")?;
        // one I/O thread: callers on several threads (a stream's fetchers)
        // each block on their own request while it drives them all
        let rt = ClientRuntime(Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()?,
        ));
        Ok(RemoteStore {
            rt,
            store,
            key: Key::load_or_create(home)?,
            url,
            timeout,
        })
    }

    /// Creates the bucket (the emulated store starts empty); an existing
    /// bucket is fine. Sent as a pre-signed PUT over plain HTTP, the only
    /// scheme the emulated store speaks.
    /// Creates the bucket unless it exists. A server that is still starting
    /// answers 503 (MinIO's "server not initialized") for a while after its
    /// liveness check passes: that is retried until `deadline`.
    pub fn ensure_bucket(&self, deadline: std::time::Instant) -> Result<()> {
        use object_store::signer::{Method, Signer};
        loop {
            let url = self.rt.block_on(self.store.signed_url(
                Method::PUT,
                &ObjPath::from(""),
                Duration::from_secs(60),
            ));
            let url = url.with_context(|| format!("signing a request to {}", self.url))?;
            let Some(host) = url.host_str() else {
                fail!(TiersError::Failed, "the signed url {url} has no host");
            };
            let port = url.port_or_known_default().unwrap_or(80);
            let target = match url.query() {
                Some(q) => format!("{}?{q}", url.path()),
                None => url.path().to_string(),
            };
            let reply = http_put_empty(host, port, &target, self.timeout)?;
            match reply.split_whitespace().nth(1).unwrap_or("") {
                // 409: BucketAlreadyOwnedByYou
                "200" | "409" => return Ok(()),
                "503" if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200))
                }
                _ => fail!(
                    TiersError::Failed,
                    "creating the bucket at {}: {}",
                    self.url,
                    reply.lines().next().unwrap_or("")
                ),
            }
        }
    }

    /// Seals and stores `data` as `name`, compressed: for objects read whole.
    pub fn put(&self, name: &str, data: &[u8]) -> Result<()> {
        self.upload(name, seal::seal_compressed(&self.key, name, data)?)
    }

    /// Seals and stores `data` as `name` only if the store holds no object
    /// of that name: one conditional PUT (`If-None-Match: *`), which S3 and
    /// MinIO decide atomically. True if this call created it; false if the
    /// object existed (it stays as it was).
    pub fn put_new(&self, name: &str, data: &[u8]) -> Result<bool> {
        let sealed = seal::seal_compressed(&self.key, name, data)?;
        let opts = object_store::PutOptions::from(object_store::PutMode::Create);
        match self.rt.block_on(self.store.put_opts(
            &ObjPath::from(name),
            PutPayload::from(sealed),
            opts,
        )) {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(Context::new(
                format!(
                    "creating {name} on {} (a PUT with If-None-Match: *, which the store must support)",
                    self.url
                ),
                e,
            )
            .into()),
        }
    }

    /// Seals and stores `data` as `name` uncompressed, in chunks of `chunk`
    /// bytes: for objects read by range.
    pub fn put_chunked(&self, name: &str, data: &[u8], chunk: usize) -> Result<()> {
        self.upload(name, seal::seal_chunked(&self.key, name, data, chunk)?)
    }

    fn upload(&self, name: &str, sealed: Vec<u8>) -> Result<()> {
        self.rt
            .block_on(
                self.store
                    .put(&ObjPath::from(name), PutPayload::from(sealed)),
            )
            .with_context(|| format!("uploading {name} to {}", self.url))?;
        Ok(())
    }

    /// Fetches and opens `name` (one GET); a corrupt or tampered object is
    /// an error, and so is one that could hold more than `max_len` bytes
    /// (refused on its stored size, before its body is read).
    pub fn get(&self, name: &str, max_len: u64) -> Result<Vec<u8>> {
        self.rt.block_on(self.fetch_open(name, max_len))
    }

    /// [`RemoteStore::get`], or `None` if there is no such object.
    pub fn get_opt(&self, name: &str, max_len: u64) -> Result<Option<Vec<u8>>> {
        let got = self.get_timed(name, Instant::now(), || Ok(max_len))?;
        Ok(got.map(|g| g.0))
    }

    /// [`RemoteStore::get_opt`] with its steps timed from `t0`. The request
    /// is sent at once; `bound` (the most bytes the object may open to) is
    /// asked for only once the response's headers are in, so it may wait
    /// for what another request brings (a commit record).
    pub fn get_timed(
        &self,
        name: &str,
        t0: Instant,
        bound: impl FnOnce() -> Result<u64>,
    ) -> Result<Option<Timed>> {
        match self.rt.block_on(self.fetch_open_timed(name, t0, bound)) {
            Ok(v) => Ok(Some(v)),
            Err(TiersError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn fetch_open(&self, name: &str, max_len: u64) -> Result<Vec<u8>> {
        let got = self.fetch_open_timed(name, Instant::now(), || Ok(max_len));
        Ok(got.await?.0)
    }

    async fn fetch_open_timed(
        &self,
        name: &str,
        t0: Instant,
        bound: impl FnOnce() -> Result<u64>,
    ) -> Result<Timed> {
        let ctx = || format!("downloading {name} from {}", self.url);
        let mut t = GetTiming {
            object: name.to_string(),
            sent_ms: since(t0),
            ..Default::default()
        };
        let r = match self.store.get(&ObjPath::from(name)).await {
            Ok(r) => r,
            Err(e @ object_store::Error::NotFound { .. }) => {
                return Err(TiersError::NotFound(format!("{}: {e}", ctx())))
            }
            Err(e) => return Err(Context::new(ctx(), e).into()),
        };
        t.headers_ms = since(t0);
        t.stored_bytes = r.meta.size;
        let max_len = bound()?;
        if r.meta.size > seal::max_sealed_len(max_len) {
            fail!(
                TiersError::Failed,
                "{name} on {} is {} bytes stored, more than {max_len} bytes can take",
                self.url,
                r.meta.size
            );
        }
        // opened as it arrives: little is left to do after the last byte
        let mut opener = seal::Opener::new(&self.key, name, max_len);
        let mut body = r.into_stream();
        while let Some(b) = body.next().await {
            opener.push(&b.with_context(ctx)?)?;
        }
        t.body_ms = since(t0);
        let plain = opener.finish()?;
        t.opened_ms = since(t0);
        Ok((plain, t))
    }

    /// Opens `n` connections to the store at once (one HEAD request each)
    /// and leaves them in the client's pool, so that a restore's first
    /// round of requests, `n` at once, opens none. A long-lived worker
    /// calls it when it starts and again before its pool's idle timeout.
    pub fn warm(&self, n: usize) -> Result<()> {
        let probe = ObjPath::from(WARM_PROBE);
        let heads = (0..n).map(|_| async {
            match self.store.head(&probe).await {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        });
        self.rt
            .block_on(futures::future::try_join_all(heads))
            .with_context(|| format!("connecting to {}", self.url))?;
        Ok(())
    }

    /// Stores `data` as `name` unsealed: a plain S3 PUT, as any client
    /// would make (the XDT benchmark's object-store baseline; snapshots go
    /// through [`RemoteStore::put`]).
    pub fn put_plain(&self, name: &str, data: Vec<u8>) -> Result<()> {
        self.upload(name, data)
    }

    /// A plain S3 GET of `name`, its body written to `sink` chunk by chunk
    /// as it arrives; returns its size, or `None` if there is no such
    /// object. One larger than `max_len` is [`GetError::TooLarge`] before
    /// any byte is read.
    pub fn get_plain(
        &self,
        name: &str,
        max_len: u64,
        sink: &mut impl std::io::Write,
    ) -> Result<Option<u64>, GetError> {
        let ctx = || format!("downloading {name} from {}", self.url);
        self.rt.block_on(async {
            let r = match self.store.get(&ObjPath::from(name)).await {
                Ok(r) => r,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(TiersError::from(Context::new(ctx(), e)).into()),
            };
            let size = r.meta.size;
            if size > max_len {
                return Err(GetError::TooLarge {
                    what: format!("{name} on {}", self.url),
                    size,
                    max: max_len,
                });
            }
            let mut body = r.into_stream();
            let mut got = 0u64;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.with_context(ctx).map_err(TiersError::from)?;
                got += chunk.len() as u64;
                if got > size {
                    let e = TiersError::Failed(format!(
                        "{name} on {} sent more than its {size} bytes",
                        self.url
                    ));
                    return Err(e.into());
                }
                sink.write_all(&chunk)
                    .with_context(ctx)
                    .map_err(TiersError::from)?;
            }
            if got != size {
                let e = TiersError::Failed(format!(
                    "{name} on {} ended after {got} of {size} bytes",
                    self.url
                ));
                return Err(e.into());
            }
            Ok(Some(size))
        })
    }

    /// Fetches and opens several objects at once, each of the length the
    /// caller knows (from a commit record); any other length is an error.
    pub fn get_many(&self, objects: &[(String, u64)]) -> Result<Vec<Vec<u8>>> {
        let gets = objects.iter().map(|(name, len)| async move {
            let plain = self.fetch_open(name, *len).await?;
            if plain.len() as u64 != *len {
                fail!(
                    TiersError::Failed,
                    "{name} on {} holds {} bytes, not {len}",
                    self.url,
                    plain.len()
                );
            }
            Ok(plain)
        });
        self.rt.block_on(futures::future::try_join_all(gets))
    }

    /// The header of `name` (one small ranged read).
    pub fn header(&self, name: &str) -> Result<Header> {
        self.rt.block_on(self.fetch_header(name))
    }

    async fn fetch_header(&self, name: &str) -> Result<Header> {
        let raw = self
            .store
            .get_range(&ObjPath::from(name), 0..HEADER_LEN as u64)
            .await
            .with_context(|| format!("reading the header of {name} from {}", self.url))?;
        Header::parse(&raw)
    }

    /// Sends at once, from this thread, a GET of each of `objects` (name,
    /// most bytes it may open to) and a read of the header of `header_of`;
    /// their results in that order, each GET timed from `t0`.
    pub fn get_round(
        &self,
        objects: &[(String, u64)],
        header_of: &str,
        t0: Instant,
    ) -> (Vec<Result<Timed>>, Result<Header>) {
        let gets = objects
            .iter()
            .map(|(name, max)| self.fetch_open_timed(name, t0, || Ok(*max)));
        self.rt.block_on(futures::future::join(
            futures::future::join_all(gets),
            self.fetch_header(header_of),
        ))
    }

    /// Plaintext bytes `r` of `name`: fetches only the chunks covering them.
    pub fn get_range(&self, name: &str, h: &Header, r: Range<u64>) -> Result<Vec<u8>> {
        let (span, first) = h.sealed_span(&r)?;
        let raw = self
            .rt
            .block_on(self.store.get_range(&ObjPath::from(name), span))
            .with_context(|| format!("reading {name} from {}", self.url))?;
        let pt = seal::open_chunks(&self.key, name, h, first, &raw)?;
        let off = usize_of(r.start - first * h.chunk as u64);
        Ok(pt[off..off + usize_of(r.end - r.start)].to_vec())
    }

    /// How long one request may take before it fails.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The stored (sealed) bytes of `name`, unopened: for tools and tests
    /// that must see or damage what the store holds.
    pub fn get_raw(&self, name: &str) -> Result<Vec<u8>> {
        let r = self
            .rt
            .block_on(async { self.store.get(&ObjPath::from(name)).await?.bytes().await })
            .with_context(|| format!("downloading {name} from {}", self.url))?;
        Ok(r.to_vec())
    }

    /// Stores `raw` as `name` as it is (no sealing): the counterpart of
    /// [`RemoteStore::get_raw`].
    pub fn put_raw(&self, name: &str, raw: Vec<u8>) -> Result<()> {
        self.upload(name, raw)
    }

    /// Whether `name` exists (a HEAD request).
    pub fn exists(&self, name: &str) -> Result<bool> {
        match self.rt.block_on(self.store.head(&ObjPath::from(name))) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(Context::new(format!("looking up {name} on {}", self.url), e).into()),
        }
    }

    pub fn delete(&self, name: &str) -> Result<()> {
        self.rt
            .block_on(self.store.delete(&ObjPath::from(name)))
            .with_context(|| format!("deleting {name} from {}", self.url))?;
        Ok(())
    }

    /// Object names under `prefix`, with their stored (sealed) sizes.
    pub fn list(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        self.rt.block_on(async {
            let p = ObjPath::from(prefix);
            let mut s = self.store.list(Some(&p));
            let mut out = Vec::new();
            while let Some(m) = s.next().await {
                let m = m.with_context(|| format!("listing {prefix} on {}", self.url))?;
                out.push((m.location.to_string(), m.size));
            }
            Ok(out)
        })
    }
}

/// One HTTP/1.1 PUT with an empty body; returns the status line and headers.
fn http_put_empty(host: &str, port: u16, target: &str, timeout: Duration) -> Result<String> {
    use std::io::{Read, Write};
    let addr = format!("{host}:{port}");
    let Some(sa) = std::net::ToSocketAddrs::to_socket_addrs(&addr)
        .with_context(|| format!("resolving {addr}"))?
        .next()
    else {
        fail!(TiersError::Failed, "resolving {addr}: no address");
    };
    let mut s = std::net::TcpStream::connect_timeout(&sa, CONNECT_TIMEOUT)
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    write!(
        s,
        "PUT {target} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.take(64 << 10).read_to_end(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::split_url;

    #[test]
    fn urls_split_into_endpoint_and_bucket() {
        assert_eq!(
            split_url("http://10.0.0.2:9000/thaw").unwrap(),
            ("http://10.0.0.2:9000".into(), "thaw".into())
        );
        assert_eq!(
            split_url("https://s3.eu-west-1.amazonaws.com/b/").unwrap(),
            ("https://s3.eu-west-1.amazonaws.com".into(), "b".into())
        );
        for bad in ["http://host:9000", "http:///b", "http://h/a/b", "nourl"] {
            assert!(split_url(bad).is_err(), "{bad}");
        }
    }
}

/// Why [`RemoteStore::get_plain`] failed, for callers to match.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// the object is larger than the reader may take (the store is fine)
    #[error("{what} is {size} bytes, more than the {max} allowed")]
    TooLarge { what: String, size: u64, max: u64 },
    /// the store failed, or sent a body of the wrong length
    #[error(transparent)]
    Failed(#[from] TiersError),
}
