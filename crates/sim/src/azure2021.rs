//! Azure Functions 2021 per-invocation trace: `app,func,end_timestamp,duration`,
//! times in seconds from the start of the trace.
//!
//! Arrival = end_timestamp - duration. The published file is ordered by arrival
//! (the sample in shared/data/traces is); a row whose arrival precedes one already
//! replayed is reported as unsorted. `reorder_window` buffers rows for that long
//! (in arrival time) so a file ordered by end time can still be replayed: memory
//! grows with the rows inside the window, never with the trace.
//! The trace has no memory column: each function gets a stable per-name draw from
//! the app-memory distribution (see `synthetic`), or a fixed size if asked.

use crate::error::Result;
use crate::source::{mem_for_name, num, Inv, Item, Lines, Names, Source};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;
use thaw_policy::Time;

pub struct Azure2021 {
    lines: Lines,
    names: Names,
    mem: Vec<u32>,
    fixed_mem: Option<u32>,
    seed: u64,
    window: Time,
    heap: BinaryHeap<Reverse<(Time, u64, u32, Time)>>,
    seq: u64,
    max_start: Time,
    last_emitted: Time,
    eof: bool,
}

impl Azure2021 {
    pub fn open(path: &Path, seed: u64, fixed_mem: Option<u32>, window: Time) -> Result<Self> {
        Ok(Azure2021 {
            lines: Lines::open(path)?,
            names: Names::default(),
            mem: Vec::new(),
            fixed_mem,
            seed,
            window,
            heap: BinaryHeap::new(),
            seq: 0,
            max_start: 0,
            last_emitted: 0,
            eof: false,
        })
    }

    /// Parses the current line into the reorder buffer.
    // float casts saturate (NaN, negatives to 0): the clamp wanted
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn take_line(&mut self) -> Result<(), String> {
        let line = &self.lines.buf;
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != 4 {
            return Err(format!(
                "expected 4 columns (app,func,end_timestamp,duration), found {}",
                fields.len()
            ));
        }
        if fields[0].is_empty() || fields[1].is_empty() {
            return Err("empty app or function id".into());
        }
        let end = num(fields[2], "end_timestamp")?;
        let dur = num(fields[3], "duration")?;
        // Rows that began before the trace window start at its origin.
        let start = (end - dur).max(0.0);
        let t = (start * 1e6).round() as Time;
        if t < self.last_emitted {
            return Err(format!(
                "unsorted: arrival {start:.6} s precedes {:.6} s already replayed (see --reorder-window-s)",
                self.last_emitted as f64 / 1e6
            ));
        }
        let key = &line[..fields[0].len() + 1 + fields[1].len()];
        let (f, new) = self.names.intern(key);
        if new {
            let m = self
                .fixed_mem
                .unwrap_or_else(|| mem_for_name(self.seed, key));
            self.mem.push(m);
        }
        self.heap
            .push(Reverse((t, self.seq, f, (dur * 1e6).round() as Time)));
        self.seq += 1;
        self.max_start = self.max_start.max(t);
        Ok(())
    }
}

impl Source for Azure2021 {
    fn next_item(&mut self) -> Result<Option<Item>> {
        loop {
            if let Some(&Reverse((t, _, f, dur))) = self.heap.peek() {
                if self.eof || t + self.window <= self.max_start {
                    self.heap.pop();
                    self.last_emitted = t;
                    let mem_mb = self.mem[f as usize];
                    return Ok(Some(Item::Inv(Inv { t, f, mem_mb, dur })));
                }
            }
            if self.eof {
                return Ok(None);
            }
            if !self.lines.next_line()? {
                self.eof = true;
                continue;
            }
            if self.lines.line_no == 1 {
                if self.lines.buf.trim_start_matches('\u{feff}')
                    == "app,func,end_timestamp,duration"
                {
                    continue;
                }
                return Ok(Some(Item::Bad(
                    self.lines
                        .bad("expected the header app,func,end_timestamp,duration"),
                )));
            }
            if self.lines.buf.trim().is_empty() {
                continue;
            }
            if let Err(reason) = self.take_line() {
                return Ok(Some(Item::Bad(self.lines.bad(reason))));
            }
        }
    }

    fn fn_name(&self, f: u32) -> Option<&str> {
        self.names.get(f)
    }

    fn progress(&self) -> Option<f64> {
        (self.lines.bytes_total > 0)
            .then(|| self.lines.bytes_read as f64 / self.lines.bytes_total as f64)
    }
}
