//! `thaw load` against a small in-process HTTP endpoint on loopback that answers
//! like the invoke API (`Thaw-Start-Type`, `Server-Timing`), and can be told to
//! stall or to return errors.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thaw_load::schedule::{self, Bounds, Iat, Step, Stream};
use thaw_load::LoadError;

/// What the endpoint saw and how it behaves.
#[derive(Default)]
struct Endpoint {
    /// Thaw-Load-Seq of every request received.
    seqs: Mutex<Vec<u64>>,
    /// Functions that have started once (the first request is a boot).
    started: Mutex<HashSet<String>>,
    /// Requests arriving in [from, until) after the first one wait until `until`.
    stall: Option<(Duration, Duration)>,
    first: Mutex<Option<Instant>>,
    statuses: Mutex<HashMap<u16, u64>>,
}

impl Endpoint {
    async fn handle(&self, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        let now = Instant::now();
        let t0 = *self.first.lock().unwrap().get_or_insert(now);
        if let Some((from, until)) = self.stall {
            let at = now - t0;
            if at >= from && at < until {
                tokio::time::sleep(until - at).await;
            }
        }
        let seq = req
            .headers()
            .get("thaw-load-seq")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(u64::MAX);
        self.seqs.lock().unwrap().push(seq);
        let path = req.uri().path().to_string();
        let name = path
            .strip_prefix("/v1/functions/")
            .and_then(|p| p.strip_suffix("/invoke"))
            .unwrap_or("")
            .to_string();
        // Functions named errNNN answer status NNN.
        let status = match name.strip_prefix("err").and_then(|c| c.parse::<u16>().ok()) {
            Some(code) => code,
            None if req.method() == hyper::Method::POST && !name.is_empty() => 200,
            None => 404,
        };
        *self.statuses.lock().unwrap().entry(status).or_default() += 1;
        let start = if self.started.lock().unwrap().insert(name) {
            "boot"
        } else {
            "warm"
        };
        // A function named huge answers a body over the generator's limit.
        let body = if path.contains("/huge/") {
            Bytes::from(vec![b' '; thaw_load::client::MAX_RESPONSE_BYTES + 1])
        } else {
            Bytes::from_static(b"{\"ok\":true}")
        };
        Response::builder()
            .status(status)
            .header("Thaw-Start-Type", start)
            .header(
                "Server-Timing",
                "queue;dur=0.25, exec;dur=1.5;desc=\"run\", bogus",
            )
            .body(Full::new(body))
            .unwrap()
    }
}

/// Answers HTTP/1.1 requests on one connection with `ep`.
async fn serve_conn<IO>(io: IO, ep: Arc<Endpoint>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req| {
        let ep = ep.clone();
        async move { Ok::<_, std::convert::Infallible>(ep.handle(req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), svc)
        .await;
}

/// Runs `fut` on a tokio runtime of its own, on a thread of its own.
fn on_thread(fut: impl std::future::Future<Output = ()> + Send + 'static) {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(fut);
    });
}

/// Serves `ep` on 127.0.0.1 (a port of its own).
fn serve(ep: Arc<Endpoint>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    on_thread(async move {
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        loop {
            let (s, _) = listener.accept().await.unwrap();
            tokio::spawn(serve_conn(s, ep.clone()));
        }
    });
    format!("http://{addr}")
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("thaw-load-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Arguments of `thaw load`, given as one command line (no quoting).
fn args(cmd: &str) -> thaw_load::cli::Args {
    let argv = std::iter::once("thaw load").chain(cmd.split_whitespace());
    <thaw_load::cli::Args as clap::Parser>::try_parse_from(argv).unwrap()
}

/// Runs `thaw load` on a thread, failing the test if it does not end in time
/// (a hang is a failure, not a stuck test).
fn load(cmd: &str) -> Result<thaw_load::record::Summary, thaw_load::LoadError> {
    let a = args(cmd);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(thaw_load::cli::execute(&a));
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("thaw load did not finish within 60 s")
}

fn records(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn every_scheduled_request_is_sent_and_accounted_once() {
    let ep = Arc::new(Endpoint::default());
    let url = serve(ep.clone());
    let dir = tmpdir("count");
    let (rec, csv, plots) = (dir.join("r.jsonl"), dir.join("r.csv"), dir.join("plots"));
    let s = load(&format!("--target {url} --functions alpha,beta --rps 400 --requests 600 --seed 3 --quiet --records {} --csv {} --plots {}", rec.display(), csv.display(), plots.display()))
    .unwrap();
    assert_eq!(
        (s.scheduled, s.sent, s.answered, s.ok),
        (600, 600, 600, 600)
    );
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    // The endpoint saw each sequence number exactly once.
    let mut seen = ep.seqs.lock().unwrap().clone();
    seen.sort();
    assert_eq!(seen, (0..600).collect::<Vec<u64>>());
    // One record per request, each once; the first of each function is a boot.
    let recs = records(&rec);
    let seqs: HashSet<u64> = recs.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!((recs.len(), seqs.len()), (600, 600));
    assert_eq!(s.start_types.get("boot"), Some(&2));
    assert_eq!(s.start_types.get("warm"), Some(&598));
    assert_eq!(s.latency["all"].count, 600);
    assert_eq!(s.latency["boot"].count + s.latency["warm"].count, 600);
    // Server-Timing phases are parsed; the malformed metric is left out.
    let r0 = &recs[0]["server_timing"];
    assert_eq!(r0["queue"], 0.25);
    assert_eq!(r0["exec"], 1.5);
    assert!(r0.get("bogus").is_none());
    assert_eq!(s.server_timing_mean_ms["exec"], 1.5);
    for r in &recs {
        let (sch, sent, ans) = (
            r["scheduled_ms"].as_f64().unwrap(),
            r["sent_ms"].as_f64().unwrap(),
            r["answered_ms"].as_f64().unwrap(),
        );
        assert!(sch <= sent + 0.001 && sent <= ans, "{r}");
        let lat = r["latency_ms"].as_f64().unwrap();
        assert!((lat - (ans - sch)).abs() < 0.01, "{r}");
    }
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv.lines().count(), 601);
    assert!(csv
        .lines()
        .next()
        .unwrap()
        .starts_with("seq,function,scheduled_ms"));
    for f in ["latency-cdf.svg", "latency-over-time.svg"] {
        let svg = std::fs::read_to_string(plots.join(f)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("warm"), "{f}");
    }
}

fn gaps(items: &[schedule::Planned]) -> Vec<f64> {
    items
        .windows(2)
        .map(|w| (w[1].at_us - w[0].at_us) as f64)
        .collect()
}

fn mean_cv(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt() / mean)
}

fn one_stream(iat: Iat, rps: f64, n: usize, seed: u64) -> Vec<schedule::Planned> {
    let streams = [Stream {
        steps: vec![Step {
            rps,
            secs: f64::INFINITY,
        }],
        targets: vec![0],
    }];
    let b = Bounds {
        requests: Some(n),
        duration_us: None,
    };
    schedule::synthetic(vec!["f".into()], &streams, iat, 1, b, seed)
        .unwrap()
        .items
}

#[test]
fn inter_arrival_processes_have_their_means_and_shapes() {
    // 10,001 arrivals: 10,000 draws of a 1 ms mean gap.
    let exp = one_stream(Iat::Exponential, 1000.0, 10_001, 7);
    let (mean, cv) = mean_cv(&gaps(&exp));
    assert!((mean - 1000.0).abs() < 50.0, "Poisson mean gap {mean} us");
    assert!((cv - 1.0).abs() < 0.05, "Poisson CV {cv}");
    let uni = one_stream(Iat::Uniform, 1000.0, 10_001, 7);
    let (mean, cv) = mean_cv(&gaps(&uni));
    assert!((mean - 1000.0).abs() < 50.0, "uniform mean gap {mean} us");
    assert!((cv - 1.0 / 3f64.sqrt()).abs() < 0.05, "uniform CV {cv}");
    let eq = one_stream(Iat::Equidistant, 1000.0, 10_001, 7);
    assert!(gaps(&eq).iter().all(|&g| (g - 1000.0).abs() <= 1.0));
    // Seeded: the same seed gives the same schedule, another seed another.
    assert_eq!(exp, one_stream(Iat::Exponential, 1000.0, 10_001, 7));
    assert_ne!(exp, one_stream(Iat::Exponential, 1000.0, 10_001, 8));
}

#[test]
fn steps_bursts_and_per_function_rates() {
    // Steps of 100 and 400 rps for 5 s each: about 500 then 2000 arrivals.
    let streams = [Stream {
        steps: vec![
            Step {
                rps: 100.0,
                secs: 5.0,
            },
            Step {
                rps: 400.0,
                secs: 5.0,
            },
        ],
        targets: vec![0],
    }];
    let b = Bounds {
        requests: None,
        duration_us: Some(20_000_000),
    };
    let s = schedule::synthetic(vec!["f".into()], &streams, Iat::Exponential, 1, b, 1).unwrap();
    let first = s.items.iter().filter(|p| p.at_us < 5_000_000).count() as f64;
    let second = s.items.iter().filter(|p| p.at_us >= 5_000_000).count() as f64;
    assert!(
        (first - 500.0).abs() < 100.0 && (second - 2000.0).abs() < 200.0,
        "{first} {second}"
    );
    assert!(
        s.items.last().unwrap().at_us < 10_000_000,
        "steps end the schedule"
    );
    // Bursts of 5: every arrival time carries 5 requests to one function.
    let streams = [Stream {
        steps: vec![Step {
            rps: 10.0,
            secs: f64::INFINITY,
        }],
        targets: vec![0, 1],
    }];
    let b = Bounds {
        requests: Some(100),
        duration_us: None,
    };
    let s = schedule::synthetic(
        vec!["a".into(), "b".into()],
        &streams,
        Iat::Equidistant,
        5,
        b,
        1,
    )
    .unwrap();
    assert_eq!(s.items.len(), 100);
    for chunk in s.items.chunks(5) {
        assert!(chunk.iter().all(|p| p == &chunk[0]), "{chunk:?}");
    }
    // Per-function rates through the CLI's parsing: a at 90/s, b at 10/s.
    let a = args("--target http://127.0.0.1:9 --fn-rates a=90,b=10 --duration-s 100");
    let s = thaw_load::cli::schedule_of(&a).unwrap();
    let na = s.items.iter().filter(|p| p.function == 0).count() as f64;
    let nb = s.items.iter().filter(|p| p.function == 1).count() as f64;
    assert!(
        (na - 9000.0).abs() < 450.0 && (nb - 1000.0).abs() < 150.0,
        "{na} {nb}"
    );
    assert!(
        s.items.windows(2).all(|w| w[0].at_us <= w[1].at_us),
        "merged in time order"
    );
}

#[test]
fn a_stalled_target_shows_its_stall_in_the_latency() {
    // The endpoint stops answering from 0.5 s to 0.9 s after its first request.
    let ep = Arc::new(Endpoint {
        stall: Some((Duration::from_millis(500), Duration::from_millis(900))),
        ..Default::default()
    });
    let url = serve(ep.clone());
    let dir = tmpdir("stall");
    let rec = dir.join("r.jsonl");
    let s = load(&format!("--target {url} --functions f --rps 200 --iat equidistant --duration-s 1.5 --quiet --records {}", rec.display()))
    .unwrap();
    assert_eq!(s.ok, s.scheduled);
    // ~80 requests were due during the 400 ms stall. Measured from their intended
    // send time, each waited until the stall ended: a closed-loop client measuring
    // from its own send would report one slow request, not eighty.
    let recs = records(&rec);
    let slow: Vec<f64> = recs
        .iter()
        .map(|r| r["latency_ms"].as_f64().unwrap())
        .filter(|&l| l >= 50.0)
        .collect();
    assert!(
        slow.len() >= 60,
        "{} requests saw the stall: {slow:?}",
        slow.len()
    );
    assert!(s.latency["all"].max_ms >= 350.0, "{:?}", s.latency["all"]);
    assert!(s.latency["all"].p90_ms >= 50.0, "{:?}", s.latency["all"]);
    // Requests kept leaving during the stall (open loop): many were in flight at
    // once, where a closed-loop client with one connection has one.
    let spans: Vec<(f64, f64)> = recs
        .iter()
        .map(|r| {
            (
                r["sent_ms"].as_f64().unwrap(),
                r["answered_ms"].as_f64().unwrap(),
            )
        })
        .collect();
    let in_flight = spans
        .iter()
        .map(|&(t, _)| spans.iter().filter(|&&(a, b)| a <= t && t < b).count())
        .max()
        .unwrap();
    assert!(in_flight >= 40, "at most {in_flight} requests in flight");
}

#[test]
fn errors_are_counted_per_status_and_the_run_goes_on() {
    let ep = Arc::new(Endpoint::default());
    let url = serve(ep.clone());
    let s = load(&format!(
        "--target {url} --functions ok,err503,err500 --rps 300 --requests 300 --quiet"
    ))
    .unwrap();
    assert_eq!(s.answered, 300);
    let got = ep.statuses.lock().unwrap().clone();
    assert_eq!(s.by_status.get("200").copied(), got.get(&200).copied());
    assert_eq!(s.errors.get("503").copied(), got.get(&503).copied());
    assert_eq!(s.errors.get("500").copied(), got.get(&500).copied());
    assert!(got[&503] > 50 && got[&500] > 50, "{got:?}");
    assert_eq!(s.ok, got[&200]);
    assert_eq!(s.latency["all"].count, got[&200], "only 2xx in the latency");
}

#[test]
fn an_oversized_response_is_a_failure_not_a_memory_hog() {
    let ep = Arc::new(Endpoint::default());
    let url = serve(ep.clone());
    let s = load(&format!(
        "--target {url} --functions huge --rps 10 --requests 2 --quiet"
    ))
    .unwrap();
    assert_eq!((s.sent, s.ok), (2, 0));
    assert_eq!(s.errors.get("io"), Some(&2), "{:?}", s.errors);
}

#[test]
fn warm_up_requests_are_sent_but_not_summarised() {
    let ep = Arc::new(Endpoint::default());
    let url = serve(ep.clone());
    let s = load(&format!("--target {url} --functions f --rps 200 --iat equidistant --duration-s 1 --warmup-s 0.5 --quiet"))
    .unwrap();
    assert_eq!(ep.seqs.lock().unwrap().len() as u64, s.scheduled);
    assert!(
        s.warmup_excluded >= 95 && s.warmup_excluded <= 105,
        "{}",
        s.warmup_excluded
    );
    assert_eq!(s.ok + s.warmup_excluded, s.scheduled);
    // The boot was in the warm-up.
    assert_eq!(s.start_types.get("boot"), None);
}

#[test]
fn unreachable_or_silent_targets_fail_clearly_without_hanging() {
    // Nothing listens: a clear error before anything is sent.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    for (target, expect) in [
        (
            format!("http://127.0.0.1:{port}"),
            "cannot reach http://127.0.0.1",
        ),
        (
            "unix:/nonexistent/api.sock".to_string(),
            "cannot reach unix:/nonexistent/api.sock",
        ),
    ] {
        let e = load(&format!(
            "--target {target} --functions f --rps 10 --requests 5 --quiet"
        ))
        .unwrap_err();
        assert!(
            matches!(&e, LoadError::Unreachable(m) if m.contains(expect)),
            "{e:#}"
        );
    }
    // Accepts connections but never answers: every request times out, and is counted.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let s = load(&format!(
        "--target {url} --functions f --rps 50 --requests 10 --timeout-s 0.5 --quiet"
    ))
    .unwrap();
    assert_eq!((s.sent, s.answered, s.ok), (10, 0, 0));
    assert_eq!(s.errors.get("timeout"), Some(&10));
    drop(silent);
    // Only loopback targets.
    for bad in [
        "http://10.0.0.1:80",
        "http://example.com:80",
        "https://127.0.0.1:1",
        "http://127.0.0.1",
        "ftp://x",
    ] {
        let e = load(&format!(
            "--target {bad} --functions f --rps 1 --requests 1 --quiet"
        ))
        .unwrap_err();
        assert!(
            matches!(&e, LoadError::Config(m) if m.contains("--target")),
            "{bad}: {e:#}"
        );
    }
}

#[test]
fn unix_socket_targets_work() {
    let dir = tmpdir("unix");
    let sock = dir.join("api.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let ep = Arc::new(Endpoint::default());
    let ep2 = ep.clone();
    on_thread(async move {
        let listener = tokio::net::UnixListener::from_std(listener).unwrap();
        loop {
            let (s, _) = listener.accept().await.unwrap();
            tokio::spawn(serve_conn(s, ep2.clone()));
        }
    });
    let target = format!("unix:{}", sock.display());
    let s = load(&format!(
        "--target {target} --functions f --rps 100 --requests 50 --quiet"
    ))
    .unwrap();
    assert_eq!((s.sent, s.ok), (50, 50));
    assert_eq!(ep.seqs.lock().unwrap().len(), 50);
}

const HEADER_2021: &str = "app,func,end_timestamp,duration\n";

#[test]
fn traces_replay_through_the_simulator_parsers() {
    let dir = tmpdir("trace");
    // Two functions over 2 s of trace time: a short small one and a long one.
    let mut t = String::from(HEADER_2021);
    for i in 0..40 {
        let start = i as f64 * 0.05;
        t.push_str(&format!("app1,fast,{:.3},0.010\n", start + 0.010));
        if i % 4 == 0 {
            t.push_str(&format!("app2,slow,{:.3},2.000\n", start + 2.0));
        }
    }
    let trace = dir.join("t.csv");
    std::fs::write(&trace, t).unwrap();
    let ep = Arc::new(Endpoint::default());
    let url = serve(ep.clone());
    let s = load(&format!("--target {url} --trace {} --format azure2021 --functions helloworld,lr_training --time-scale 2 --duration-s 10 --quiet", trace.display()))
    .unwrap();
    assert_eq!(s.ok, 50, "every trace row is one request");
    let st = s.trace.as_ref().unwrap();
    assert_eq!((st.trace_functions, st.invocations_read), (2, 50));
    // Sampling thins, and the first-N rule drops functions.
    let a = args(&format!("--target {url} --trace {} --format azure2021 --functions helloworld --sample 0.5 --trace-functions 1 --duration-s 100 --time-scale 2", trace.display()));
    let sch = thaw_load::cli::schedule_of(&a).unwrap();
    let st = sch.trace.unwrap();
    assert_eq!((st.trace_functions, st.functions_dropped), (1, 1));
    assert!(
        sch.items.len() > 10 && sch.items.len() < 30,
        "{}",
        sch.items.len()
    );
    // Time scale 2: 2 s of trace in 1 s.
    assert!(sch.items.last().unwrap().at_us <= 1_000_000);
    // By name: app1,fast -> fast and app2,slow -> slow, whatever the order of
    // --functions; a trace function without its namesake is refused.
    let a = args(&format!("--target {url} --trace {} --format azure2021 --functions slow,fast --map-by-name --duration-s 100", trace.display()));
    let sch = thaw_load::cli::schedule_of(&a).unwrap();
    let st = sch.trace.unwrap();
    let mut mapping = st.mapping.clone();
    mapping.sort();
    assert_eq!(
        mapping,
        vec![
            ("app1,fast".to_string(), "fast".to_string()),
            ("app2,slow".to_string(), "slow".to_string())
        ]
    );
    let fast = sch.items.iter().filter(|p| p.function == 1).count();
    assert_eq!((fast, sch.items.len()), (40, 50));
    let a = args(&format!("--target {url} --trace {} --format azure2021 --functions fast --map-by-name --duration-s 100", trace.display()));
    let e = thaw_load::cli::schedule_of(&a).unwrap_err();
    assert!(
        matches!(&e, LoadError::Config(m) if m.contains("no deployed function named \"slow\"")),
        "{e:#}"
    );
}

#[test]
fn trace_functions_map_by_memory_and_duration_class() {
    let deployed = vec![
        schedule::Deployed {
            name: "small_fast".into(),
            class: Some((128.0, 2.0)),
        },
        schedule::Deployed {
            name: "big_slow".into(),
            class: Some((1024.0, 2000.0)),
        },
    ];
    assert_eq!(schedule::map_function(&deployed, "x", 150, 3_000, 1), 0);
    assert_eq!(schedule::map_function(&deployed, "y", 900, 1_500_000, 1), 1);
    assert_eq!(
        schedule::map_function(&deployed, "z", 100, 5_000_000, 1),
        1,
        "duration decades dominate memory doublings here"
    );
    // Without classes, trace functions spread over the deployed ones by name.
    let plain = vec![
        schedule::Deployed {
            name: "a".into(),
            class: None,
        },
        schedule::Deployed {
            name: "b".into(),
            class: None,
        },
    ];
    let hits: HashSet<u32> = (0..50)
        .map(|i| schedule::map_function(&plain, &format!("fn{i}"), 128, 1000, 1))
        .collect();
    assert_eq!(hits.len(), 2);
}

#[test]
fn malformed_and_truncated_traces_name_file_and_line() {
    let dir = tmpdir("bad");
    let run = |p: &Path, format: &str| {
        let a = args(&format!("--target http://127.0.0.1:9 --trace {} --format {format} --functions f --duration-s 100", p.display()));
        thaw_load::cli::schedule_of(&a).map(|s| s.items.len())
    };
    let bad = dir.join("bad.csv");
    std::fs::write(
        &bad,
        format!("{HEADER_2021}a,f,1.0,0.5\na,f,notanumber,0.5\n"),
    )
    .unwrap();
    let e = format!("{:#}", run(&bad, "azure2021").unwrap_err());
    assert!(e.contains(&format!("{}:3:", bad.display())), "{e}");
    // Truncated: the last row stops mid-field.
    let cut = dir.join("cut.csv");
    std::fs::write(&cut, format!("{HEADER_2021}a,f,1.0,0.5\na,f,2.")).unwrap();
    let e = format!("{:#}", run(&cut, "azure2021").unwrap_err());
    assert!(e.contains(&format!("{}:3:", cut.display())), "{e}");
    // With --skip-malformed the good rows are kept and the bad ones counted.
    let a = args(&format!("--target http://127.0.0.1:9 --trace {} --format azure2021 --functions f --duration-s 100 --skip-malformed", bad.display()));
    let s = thaw_load::cli::schedule_of(&a).unwrap();
    assert_eq!((s.items.len(), s.trace.unwrap().malformed_lines), (1, 1));
    // azure2019: a row cut short.
    let d = dir.join("t2019");
    std::fs::create_dir_all(&d).unwrap();
    let mut inv = String::from("HashOwner,HashApp,HashFunction,Trigger");
    for m in 1..=1440 {
        inv.push_str(&format!(",{m}"));
    }
    inv.push_str("\no,a,f,http");
    inv.push_str(&",1".repeat(1440));
    inv.push_str("\no,a,g,http,1,2\n");
    std::fs::write(d.join("invocations_per_function_md.anon.d01.csv"), inv).unwrap();
    let e = format!("{:#}", run(&d, "azure2019").unwrap_err());
    assert!(
        e.contains("invocations_per_function_md.anon.d01.csv:3:"),
        "{e}"
    );
    // A header that is not the format at all.
    let junk = dir.join("junk.csv");
    std::fs::write(&junk, "hello\n").unwrap();
    let e = format!("{:#}", run(&junk, "azure2021").unwrap_err());
    assert!(e.contains(&format!("{}:1:", junk.display())), "{e}");
}

#[test]
fn bad_arguments_are_refused_before_sending() {
    let ep = Arc::new(Endpoint::default());
    let url = serve(ep.clone());
    for bad in [
        "--functions f --rps 10",
        "--functions f --rps=-1 --requests 3",
        "--functions f --rps 0 --requests 3",
        "--functions ../x --rps 1 --requests 3",
        "--functions f --rps 1 --requests 0",
        "--functions f --rps 1 --requests 3 --burst-size 0",
        "--functions f --rps 1 --requests 3 --data {not-json",
        "--functions f --rps 1 --requests 3 --data @/nonexistent.json",
        "--functions f --rps 1 --requests 3 --timeout-s 0",
        "--fn-rates f --requests 3",
        "--rps 1 --requests 3",
    ] {
        // Well-formed except for the one fault: the endpoint would answer.
        assert!(
            load(&format!("--target {url} --quiet {bad}")).is_err(),
            "{bad:?} was accepted"
        );
    }
    assert!(
        load(&format!(
            "--target {url} --quiet --functions f --rps 100 --requests 1"
        ))
        .is_ok(),
        "the control run failed"
    );
    assert_eq!(
        ep.seqs.lock().unwrap().len(),
        1,
        "a refused run sent requests"
    );
}
