//! thaw-restorer
