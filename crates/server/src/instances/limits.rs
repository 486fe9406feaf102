//! The most instances one node holds. Past the memory budget, what runs
//! out first is the daemon's descriptors (each instance holds about seven:
//! its two pipes, its snapshot mapped twice, its agent socket, its
//! userfaultfd and its uid lock), then the kernel's pids (an instance is
//! about three: its thread in the daemon, its runtime, the daemon's helper
//! thread) and the sandbox uids. The node's cap keeps every instance inside
//! those: at the cap, a new instance gives an idle one up (the policy's
//! order) or waits for a running one, and a prewarm stops with `node_full`;
//! none of them reaches `EMFILE` or a failed `clone`.

/// Daemon descriptors an instance holds, rounded up from the seven measured.
const FDS_PER_INSTANCE: u64 = 8;
/// Kernel pids an instance takes, rounded up from the three measured.
const PIDS_PER_INSTANCE: u64 = 4;
/// Descriptors and pids the daemon keeps for itself (listeners, logs,
/// snapshots, deploys, tools it runs).
const RESERVED: u64 = 1024;

/// Raises the daemon's soft descriptor limit to its hard one: the soft
/// default (1024 on most systems) would stop a node at about 120 instances.
pub(super) fn raise_nofile() -> u64 {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) != 0 {
            return 1024;
        }
        if l.rlim_cur < l.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: l.rlim_max,
                rlim_max: l.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                l.rlim_cur = l.rlim_max;
            }
        }
    }
    l.rlim_cur
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The node's instance cap: `configured` if set, else what the daemon's
/// descriptors, the kernel's pids and the sandbox uids allow; with what
/// bounds it, for the log.
pub(super) fn node_cap(configured: u32, nofile: u64) -> (u32, String) {
    if configured > 0 {
        return (configured, "limits.instances_per_node".into());
    }
    let pids = read_u64("/proc/sys/kernel/pid_max").unwrap_or(32_768);
    let bounds = [
        (
            nofile.saturating_sub(RESERVED) / FDS_PER_INSTANCE,
            format!("{nofile} descriptors"),
        ),
        (
            pids.saturating_sub(RESERVED) / PIDS_PER_INSTANCE,
            format!("pid_max {pids}"),
        ),
        (
            thaw_sandbox::uid::UID_COUNT as u64,
            "the sandbox uids".into(),
        ),
    ];
    let (n, why) = bounds
        .into_iter()
        .min_by_key(|b| b.0)
        .expect("three bounds");
    (u32::try_from(n).unwrap_or(u32::MAX).max(1), why)
}
