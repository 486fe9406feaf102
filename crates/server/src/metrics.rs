//! Prometheus metrics (the `prometheus-client` crate, text format).
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InvocationLabels {
    pub function: String,
    pub start_type: String,
    pub status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionLabel {
    pub function: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RestoreLabels {
    pub strategy: String,
    pub tier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TierLabel {
    pub tier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MoveLabels {
    pub from: String,
    pub to: String,
}

/// `START:TIER` pairs (`restore:tmpfs`, `warm:-`, `boot:-`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PredictionLabels {
    pub predicted: String,
    pub actual: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

fn seconds_histogram() -> Histogram {
    // 100 us .. ~100 s
    Histogram::new(exponential_buckets(1e-4, 2.0, 21))
}

/// Every reason a request is refused with (`thaw_rejected_requests_total`).
pub const REJECT_REASONS: [&str; 11] = [
    "queue_full",
    "memory",
    "queue_timeout",
    "shutting_down",
    "payload_too_large",
    "bad_request",
    "replaced",
    "at_cap",
    "node_full",
    "start_failed",
    "unauthorized",
];

pub struct Metrics {
    registry: Registry,
    pub invocations: Family<InvocationLabels, Counter>,
    pub duration: Family<FunctionLabel, Histogram>,
    pub restore: Family<RestoreLabels, Histogram>,
    pub queue_wait: Histogram,
    pub instances: Family<StateLabel, Gauge>,
    pub memory: Family<TierLabel, Gauge>,
    pub moves: Family<MoveLabels, Counter>,
    pub mispredictions: Family<PredictionLabels, Counter>,
    pub rejected: Family<ReasonLabel, Counter>,
    /// idle instances given up for pressure the budget does not see, by
    /// reason (`psi`: the kernel reported memory stalls)
    pub shed: Family<ReasonLabel, Counter>,
    /// XDT pulls from other workers, by outcome (`ok`, or the error kind)
    pub pulls: Family<OutcomeLabel, Counter>,
    pub pulled_bytes: Counter,
    pub pull_duration: Histogram,
    /// bytes to and from functions given egress, by direction (`in`, `out`)
    pub egress_bytes: Family<DirectionLabels, Counter>,
    /// packets the egress rules refused, per function (read from the rule
    /// table's counters at each scrape)
    pub egress_refused: Family<FunctionLabel, Counter>,
    /// deploys by what they did with the snapshot shared across nodes
    /// (`published`, `fetched`, `refused`, `unshared`)
    pub shared: Family<OutcomeLabel, Counter>,
    /// Lambda's asynchronous invocations, by function and final outcome
    /// (`ok`, or `failed` after the retries)
    pub async_events: Family<AsyncLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AsyncLabels {
    pub function: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DirectionLabels {
    pub function: String,
    pub direction: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: String,
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("thaw");
        let invocations = Family::<InvocationLabels, Counter>::default();
        let duration = Family::<FunctionLabel, Histogram>::new_with_constructor(
            seconds_histogram as fn() -> Histogram,
        );
        let restore = Family::<RestoreLabels, Histogram>::new_with_constructor(
            seconds_histogram as fn() -> Histogram,
        );
        let queue_wait = seconds_histogram();
        let instances = Family::<StateLabel, Gauge>::default();
        let memory = Family::<TierLabel, Gauge>::default();
        let moves = Family::<MoveLabels, Counter>::default();
        let rejected = Family::<ReasonLabel, Counter>::default();
        let shed = Family::<ReasonLabel, Counter>::default();
        let mispredictions = Family::<PredictionLabels, Counter>::default();
        let pulls = Family::<OutcomeLabel, Counter>::default();
        let pulled_bytes = Counter::default();
        let pull_duration = seconds_histogram();
        let egress_bytes = Family::<DirectionLabels, Counter>::default();
        let egress_refused = Family::<FunctionLabel, Counter>::default();
        let shared = Family::<OutcomeLabel, Counter>::default();
        let async_events = Family::<AsyncLabels, Counter>::default();
        registry.register(
            "lambda_async_invocations",
            "Asynchronous invocations through the Lambda API by final outcome (ok, or failed after two retries)",
            async_events.clone(),
        );
        registry.register(
            "shared_snapshots",
            "Deploys by what they did with the snapshot shared across nodes (published, fetched, refused, unshared)",
            shared.clone(),
        );
        registry.register(
            "egress_bytes",
            "Bytes received (in) and sent (out) by instances of functions given network egress",
            egress_bytes.clone(),
        );
        registry.register(
            "egress_refused_packets",
            "Packets from instances of a function that its egress rules refused",
            egress_refused.clone(),
        );
        registry.register(
            "xdt_pulls",
            "XDT objects pulled from other workers, by outcome (ok or error kind)",
            pulls.clone(),
        );
        registry.register(
            "xdt_pulled_bytes",
            "Bytes of XDT objects pulled from other workers",
            pulled_bytes.clone(),
        );
        registry.register(
            "xdt_pull_duration_seconds",
            "One successful pull: request to the last byte in the consumer's memfd",
            pull_duration.clone(),
        );
        registry.register(
            "invocations",
            "Invocations by function, start type and status",
            invocations.clone(),
        );
        registry.register(
            "invocation_duration_seconds",
            "Request to response, per function",
            duration.clone(),
        );
        registry.register(
            "restore_duration_seconds",
            "Instance restore time by strategy and tier",
            restore.clone(),
        );
        registry.register(
            "queue_wait_seconds",
            "Time a request waited for an instance",
            queue_wait.clone(),
        );
        registry.register("instances", "Live instances by state", instances.clone());
        registry.register(
            "memory_bytes",
            "Memory by tier (instances: charged to sandboxes; tmpfs/disk: snapshot files)",
            memory.clone(),
        );
        registry.register(
            "snapshot_moves",
            "Snapshot moves between tiers",
            moves.clone(),
        );
        registry.register(
            "start_mispredictions",
            "Starts that differ from the policy's prediction (start type and tier)",
            mispredictions.clone(),
        );
        registry.register(
            "rejected_requests",
            "Requests refused, by reason",
            rejected.clone(),
        );
        registry.register(
            "shed_instances",
            "Idle instances given up for memory pressure the budget does not see, by reason",
            shed.clone(),
        );
        let _ = shed.get_or_create(&ReasonLabel {
            reason: "psi".into(),
        });
        // every series exists from the start (a scrape sees 0, not nothing)
        for (from, to) in [("tmpfs", "disk"), ("disk", "tmpfs")] {
            let _ = moves.get_or_create(&MoveLabels {
                from: from.into(),
                to: to.into(),
            });
        }
        for reason in REJECT_REASONS {
            let _ = rejected.get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            });
        }
        Metrics {
            registry,
            invocations,
            duration,
            restore,
            queue_wait,
            instances,
            memory,
            moves,
            mispredictions,
            rejected,
            shed,
            pulls,
            pulled_bytes,
            pull_duration,
            egress_bytes,
            egress_refused,
            shared,
            async_events,
        }
    }

    /// Adds one invocation's network bytes (received, sent) to `function`'s.
    pub fn egress_bytes(&self, function: &str, (received, sent): (u64, u64)) {
        for (direction, n) in [("in", received), ("out", sent)] {
            self.egress_bytes
                .get_or_create(&DirectionLabels {
                    function: function.into(),
                    direction: direction.into(),
                })
                .inc_by(n);
        }
    }

    /// Brings `function`'s refused-packet counter up to the rule table's.
    pub fn egress_refused(&self, function: &str, total: u64) {
        let c = self.egress_refused.get_or_create(&FunctionLabel {
            function: function.into(),
        });
        c.inc_by(total.saturating_sub(c.get()));
    }

    pub fn reject(&self, reason: &str) {
        self.rejected
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .inc();
    }

    pub fn encode(&self) -> String {
        let mut s = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
