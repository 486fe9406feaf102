//! The open-loop engine: one dispatcher sleeps until each request's intended
//! time and hands it to a task of its own, whether or not earlier ones have
//! answered; a collector writes records and tallies them as they come.

use crate::client::{Client, Failure};
use crate::error::{LoadError, Result};
use crate::record::{Record, Sink, Tally};
use crate::schedule::Schedule;
use bytes::Bytes;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thaw_error::{fail, ResultExt};
use tokio::sync::mpsc;

pub struct RunOptions {
    pub body: Bytes,
    /// Per request: no answer by then is a `timeout` record.
    pub timeout: Duration,
    /// The target must accept a connection within this before anything is sent.
    pub connect_timeout: Duration,
    /// Requests scheduled before this are sent but left out of the summary.
    pub warmup: Duration,
    pub progress: bool,
}

/// Sends the schedule to the client's target; every scheduled request yields
/// exactly one record (given to `sink` and `tally`).
pub async fn run(
    client: Arc<Client>,
    schedule: &Schedule,
    opts: &RunOptions,
    sink: &mut Sink,
    tally: &mut Tally,
) -> Result<()> {
    client.probe(opts.connect_timeout).await?;
    tally.scheduled = schedule.items.len() as u64;
    let names: Arc<Vec<String>> = Arc::new(schedule.functions.clone());
    let (tx, mut rx) = mpsc::unbounded_channel::<Record>();
    // A short lead so the first requests are not late by the set-up itself.
    let start = tokio::time::Instant::now() + Duration::from_millis(5);
    let items = schedule.items.clone();
    let warmup_us = opts.warmup.as_micros().try_into().unwrap_or(u64::MAX);
    let (body, timeout) = (opts.body.clone(), opts.timeout);
    let dispatcher = tokio::spawn(async move {
        for (seq, p) in items.into_iter().enumerate() {
            let due = start + Duration::from_micros(p.at_us);
            tokio::time::sleep_until(due).await;
            let (client, names, tx, body) =
                (client.clone(), names.clone(), tx.clone(), body.clone());
            tokio::spawn(async move {
                let ms = |t: tokio::time::Instant| {
                    t.saturating_duration_since(start).as_secs_f64() * 1e3
                };
                let sent = tokio::time::Instant::now();
                let function = &names[p.function as usize];
                let res = tokio::time::timeout(timeout, client.invoke(function, body, seq as u64))
                    .await
                    .unwrap_or(Err(Failure::Timeout));
                let answered = tokio::time::Instant::now();
                let scheduled_ms = p.at_us as f64 / 1e3;
                let mut r = Record {
                    seq: seq as u64,
                    function: function.clone(),
                    scheduled_ms,
                    sent_ms: ms(sent),
                    answered_ms: ms(answered),
                    status: String::new(),
                    start_type: None,
                    latency_ms: ms(answered) - scheduled_ms,
                    lag_ms: ms(sent) - scheduled_ms,
                    warmup: p.at_us < warmup_us,
                    server_timing: Default::default(),
                    error: None,
                };
                match res {
                    Ok(a) => {
                        r.status = a.status.to_string();
                        r.start_type = a.start_type;
                        r.set_server_timing(a.server_timing.as_deref());
                    }
                    Err(f) => {
                        r.status = f.status().to_string();
                        r.error = Some(f.to_string());
                    }
                }
                // The collector outlives every sender: a send cannot fail.
                let _ = tx.send(r);
            });
        }
    });
    let total = schedule.items.len() as u64;
    let wall = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut done = 0u64;
    let mut last_lag_ms = 0.0f64;
    while done < total {
        tokio::select! {
            r = rx.recv() => {
                let Some(r) = r else { break };
                last_lag_ms = r.lag_ms;
                tally.add(&r);
                sink.write(&r)?;
                done += 1;
            }
            _ = tick.tick(), if opts.progress => {
                let errs: u64 = tally.by_status.iter().filter(|(k, _)| !k.starts_with('2')).map(|(_, v)| v).sum();
                thaw_output::err!(
                    "\rthaw load: {:>6.1} s  {done}/{total} answered  {} ok  {errs} errors  lag {last_lag_ms:.1} ms   ",
                    wall.elapsed().as_secs_f64(), tally.ok
                );
                let _ = std::io::stderr().flush();
            }
        }
    }
    if opts.progress {
        thaw_output::errln!(
            "\rthaw load: {:>6.1} s  {done}/{total} answered, done                              ",
            wall.elapsed().as_secs_f64()
        );
    }
    dispatcher.await.context("the request dispatcher")?;
    sink.finish()?;
    if done != total {
        fail!(
            LoadError::Lost,
            "{} of {total} requests were never accounted for",
            total - done
        );
    }
    Ok(())
}
