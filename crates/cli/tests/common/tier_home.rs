//! A state home for the storage tiers' tests: on the real disk (loop
//! backing files must not go to tmpfs), with `thaw` run on it.
use std::path::PathBuf;
use std::process::Command;
use thaw_tiers::TiersConfig;

use super::THAW;

/// A state home on the real disk (loop backing files must not go to tmpfs),
/// removed at the end, after checking that teardown left it empty.
pub struct Home(pub PathBuf);

impl Home {
    pub fn new(tag: &str) -> Home {
        assert_eq!(
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() },
            0,
            "the tier tests need root (loop devices, mounts, cgroups, netns)"
        );
        let p = PathBuf::from(format!(
            "/var/tmp/thaw-tiertest-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Home(p)
    }

    /// Writes a configuration: the defaults with small capacities, keeping `keep`.
    pub fn config(&self, keep: &[&str], edit: impl Fn(&mut thaw_tiers::TierConfig)) {
        let mut c = TiersConfig::defaults(&self.0);
        c.tiers.retain(|t| keep.contains(&t.name.as_str()));
        for t in &mut c.tiers {
            t.capacity_bytes = 256 << 20;
            edit(t);
        }
        c.save(&self.0).unwrap();
    }

    pub fn thaw(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(THAW)
            .arg("--home")
            .arg(&self.0)
            .args(args)
            .output()
            .expect("running thaw");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.thaw(args);
        assert!(ok, "thaw {args:?} failed:\n{out}\n{err}");
        out
    }

    /// `thaw snapshot move helloworld --from A --to B`, which must succeed.
    pub fn mv(&self, from: &str, to: &str) {
        self.ok(&["snapshot", "move", "helloworld", "--from", from, "--to", to]);
    }

    pub fn fails(&self, args: &[&str], needle: &str) {
        let (ok, out, err) = self.thaw(args);
        assert!(!ok, "thaw {args:?} succeeded:\n{out}");
        assert!(
            err.contains(needle),
            "thaw {args:?}: expected {needle:?} in:\n{err}"
        );
        assert!(!err.contains("panicked"), "thaw {args:?} panicked:\n{err}");
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        // a failed test still must not leave devices behind
        let _ = Command::new(THAW)
            .arg("--home")
            .arg(&self.0)
            .args(["tier", "teardown", "--force"])
            .output();
        // streamed restores stage on the home's DRAM tmpfs
        let _ = thaw_store::Tier::unmount_dram(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
