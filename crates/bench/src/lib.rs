//! thaw-bench
