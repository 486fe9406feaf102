//! thaw-sandbox
