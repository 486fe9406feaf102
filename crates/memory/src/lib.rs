//! thaw-memory
