//! Call chains: a top-level invocation starts a chain; every invocation a
//! function makes through the SDK joins it one level deeper. The worker
//! refuses a call past the depth limit (recursion cannot fork-bomb the
//! worker), past the fan-out limit of one invocation, past the chain's total,
//! or to a function of another owner.
use crate::table::XdtError;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChainLimits {
    /// a top-level invocation is depth 0; its callees depth 1, ...
    pub max_depth: u32,
    /// invocations one invocation may start
    pub max_fanout: u32,
    /// invocations in a whole chain (the top-level one included)
    pub max_chain_invocations: u32,
}

impl Default for ChainLimits {
    fn default() -> Self {
        ChainLimits {
            max_depth: 8,
            max_fanout: 64,
            max_chain_invocations: 1024,
        }
    }
}

#[derive(Debug)]
pub struct Chain {
    pub id: String,
    invocations: AtomicU32,
}

/// Who is calling: the chain, how deep, as which function of which owner,
/// and until when (a callee never outlives its caller's deadline).
#[derive(Debug, Clone)]
pub struct CallCtx {
    pub chain: Arc<Chain>,
    pub depth: u32,
    pub owner: String,
    pub function: String,
    pub deadline: Instant,
}

impl CallCtx {
    /// A top-level invocation: a new chain.
    pub fn root(owner: &str, function: &str, deadline: Instant) -> CallCtx {
        CallCtx {
            chain: Arc::new(Chain {
                id: hex::encode(rand::random::<[u8; 8]>()),
                invocations: AtomicU32::new(1),
            }),
            depth: 0,
            owner: owner.to_string(),
            function: function.to_string(),
            deadline,
        }
    }

    /// The context of a call from this invocation to `callee` (of
    /// `callee_owner`), or why it is refused.
    pub fn child(
        &self,
        callee: &str,
        callee_owner: &str,
        limits: &ChainLimits,
    ) -> Result<CallCtx, XdtError> {
        if callee_owner != self.owner {
            return Err(XdtError::Forbidden);
        }
        if self.depth + 1 > limits.max_depth {
            return Err(XdtError::Limit(format!(
                "call depth limit of {} reached ({} -> {callee} in chain {})",
                limits.max_depth, self.function, self.chain.id
            )));
        }
        let n = self.chain.invocations.fetch_add(1, Ordering::SeqCst) + 1;
        if n > limits.max_chain_invocations {
            self.chain.invocations.fetch_sub(1, Ordering::SeqCst);
            return Err(XdtError::Limit(format!(
                "chain {} reached its limit of {} invocations",
                self.chain.id, limits.max_chain_invocations
            )));
        }
        Ok(CallCtx {
            chain: self.chain.clone(),
            depth: self.depth + 1,
            owner: self.owner.clone(),
            function: callee.to_string(),
            deadline: self.deadline,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn depth_chain_and_owner_limits() {
        let l = ChainLimits {
            max_depth: 2,
            max_fanout: 8,
            max_chain_invocations: 4,
        };
        let root = CallCtx::root("a", "f", Instant::now() + Duration::from_secs(1));
        assert!(matches!(root.child("g", "b", &l), Err(XdtError::Forbidden)));
        let c1 = root.child("g", "a", &l).unwrap();
        let c2 = c1.child("h", "a", &l).unwrap();
        assert_eq!(c2.depth, 2);
        assert!(matches!(c2.child("i", "a", &l), Err(XdtError::Limit(_))));
        // 3 so far; one more fits, then the chain is full
        root.child("g", "a", &l).unwrap();
        let e = root.child("g", "a", &l).unwrap_err();
        assert!(e.to_string().contains("limit of 4"), "{e}");
    }
}
