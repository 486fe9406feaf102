//! thaw-policy
