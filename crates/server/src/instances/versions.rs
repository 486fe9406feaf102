//! Deployed versions and where their snapshots are: the version new
//! instances run, the tier the policy wants each snapshot on, and the
//! transfers the mover carries out (`crate::tiering`).
use std::sync::Arc;
use thaw_policy::{Footprint, InstanceId, Policy, XferId};

use super::deployed::{FnVersion, Placed};
use super::start::level_of;
use super::{fn_id, forget_idle, lock, wake_all, wake_memory, Instances, State};
use crate::stored::{RemoteCopy, Stored};

impl Instances {
    /// Makes `v` the version new instances run; idle instances of older
    /// versions go now, busy ones when their invocation ends. The policy
    /// learns where the version's snapshot is (which may make it move
    /// other functions' snapshots down to make room).
    pub fn set_version(&self, v: &FnVersion) {
        let name = v.rec.name.as_str();
        let mut st = lock(&self.state);
        let fid = fn_id(&mut st, name);
        st.fns.entry(name.to_string()).or_default().version = v.rec.version;
        self.drop_idle_of(&mut st, name, |old| old != v.rec.version);
        let placed = v.placed();
        let mb = v.rec.snapshot.as_ref().map_or(0, |s| {
            u32::try_from(s.size_bytes.div_ceil(1 << 20)).unwrap_or(u32::MAX)
        });
        let level = placed.as_ref().map(|p| level_of(&self.tiers, &p.tier));
        match &placed {
            Some(p) => st
                .want_fast
                .insert(name.to_string(), p.tier == self.tiers.fast),
            None => st.want_fast.remove(name),
        };
        let mut out = Vec::new();
        st.engine.set_snapshot(self.now(), fid, mb, level, &mut out);
        // a new version's idle instances are charged their declared memory
        // until measured; its snapshot's pages are shared by all of them
        if self.measure_idle {
            let fp = Footprint {
                idle_mb: None,
                shared_mb: mb,
            };
            st.engine.set_footprint(fid, fp, &mut out);
        }
        self.apply(&mut st, out);
        wake_all(st.fns.get_mut(name));
        wake_memory(&mut st);
    }

    /// `v`'s snapshot is now where `v.placed` says (a shared copy kept on
    /// the fast tier): the policy learns its level, if `v` is still live.
    pub fn placed_changed(&self, v: &FnVersion) {
        let live = lock(&self.state).fns.get(&v.rec.name).map(|f| f.version);
        if live == Some(v.rec.version) {
            self.set_version(v);
        }
    }

    /// Forgets a function: idle instances go, waiters are told, the policy
    /// forgets its snapshot.
    pub fn remove(&self, name: &str) {
        let mut st = lock(&self.state);
        if let Some(fp) = st.fns.get_mut(name) {
            fp.version = 0;
        }
        self.drop_idle_of(&mut st, name, |_| true);
        if let Some(&fid) = st.fn_ids.get(name) {
            let mut out = Vec::new();
            st.engine.set_snapshot(self.now(), fid, 0, None, &mut out);
            self.apply(&mut st, out);
        }
        st.want_fast.remove(name);
        wake_all(st.fns.get_mut(name));
        wake_memory(&mut st);
        let mut m = self.measured.lock().unwrap_or_else(|p| p.into_inner());
        m.ended_cpu_ns.remove(name);
    }

    /// Where the policy wants `name`'s snapshot now: the fast tier (true)
    /// or the slow one; `None` for a function without a snapshot.
    pub fn wants_fast(&self, name: &str) -> Option<bool> {
        lock(&self.state).want_fast.get(name).copied()
    }

    /// The mover has carried out what the policy wanted for `name`: every
    /// transfer issued for it so far is done.
    pub fn transfers_done(&self, name: &str) {
        let mut st = lock(&self.state);
        let ids: Vec<XferId> = st
            .transfers
            .iter()
            .filter(|(_, (f, _))| f == name)
            .map(|(id, _)| *id)
            .collect();
        let now = self.now();
        for id in ids {
            st.transfers.remove(&id);
            let mut out = Vec::new();
            st.engine.transfer_done(now, id, &mut out);
            self.apply(&mut st, out);
        }
    }

    /// Transfers the policy issued that the mover has not finished.
    pub fn transfers_pending(&self) -> usize {
        lock(&self.state).transfers.len()
    }

    fn drop_idle_of(&self, st: &mut State, name: &str, pred: impl Fn(u64) -> bool) {
        let ids: Vec<InstanceId> = st
            .idle
            .iter()
            .filter(|(_, i)| i.name_fn() == name && pred(i.version))
            .map(|(id, _)| *id)
            .collect();
        let now = self.now();
        for id in ids {
            let _ = st.engine.discard(now, id);
            forget_idle(st, id);
        }
        wake_memory(st);
    }
}

/// A stream of the copy shared across nodes arrived whole: it becomes the
/// node's own snapshot on the fast tier (restores read it from there; the
/// node's policy moves it from then on, as any other).
pub(super) fn keep_shared(
    home: &std::path::Path,
    v: &Arc<FnVersion>,
    copy: &RemoteCopy,
    staged: &std::path::Path,
    instances: &std::sync::Weak<Instances>,
) {
    let Some(keep) = &copy.keep else { return };
    match keep.keep(home, staged) {
        Ok(Some(snap)) => {
            let kept = Placed {
                tier: keep.tier.clone(),
                stored: Stored::Local(snap),
            };
            // the pool is not held through the wait (a stop drops it)
            let Some(wait) = instances.upgrade().map(|p| p.switch_wait) else {
                return;
            };
            if let Err(waited) = v.switch_placed(kept, wait) {
                // restores stream the shared copy still; the kept one is
                // found again at the next start (`tiering::locate`)
                tracing::warn!(function = %v.rec.name, "kept the shared snapshot on this node, yet restores held the shared copy past {waited:?}: they stream it still");
                return;
            }
            tracing::info!(function = %v.rec.name, tier = %keep.tier, "kept the shared snapshot on this node");
            if let Some(instances) = instances.upgrade() {
                instances.placed_changed(v);
            }
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(function = %v.rec.name, "keeping the shared snapshot on this node: {e:#}")
        }
    }
}
