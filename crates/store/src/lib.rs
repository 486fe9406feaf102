//! thaw-store
