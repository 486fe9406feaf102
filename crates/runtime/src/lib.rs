//! thaw-runtime
