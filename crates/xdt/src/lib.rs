//! thaw-xdt: functions that call functions and pass data by reference
//! (XDT: "Data-centric Serverless Cloud Architecture", chapter 6,
//! "Expedited Data Transfers").
//!
//! * [`reference`]: opaque tokens sealed with the worker's key that name an
//!   object the worker holds (producer worker, object id, size, retrieval
//!   count, expiry, owner). Sandboxed code can pass them on but can neither
//!   read nor forge them.
//! * [`memfd`]: objects are sealed memfds, written once by the producer and
//!   handed to consumers as read-only descriptors (zero copy on one worker).
//! * [`table`]: the worker's objects with retrieval counting, TTL and a
//!   memory budget per producing function.
//! * [`chain`]: per-chain depth and fan-out limits for nested invocations.
//! * [`sdk`]: the worker's side of the in-sandbox `thaw` module's requests.
pub mod chain;
pub mod memfd;
pub mod reference;
pub mod sdk;
pub mod table;

pub use chain::{CallCtx, ChainLimits};
pub use reference::{RefClaims, RefKey, WorkerId};
pub use table::{ObjectTable, TableLimits, XdtError};
