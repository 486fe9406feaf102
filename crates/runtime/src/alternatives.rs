//! The symlinks Debian's `update-alternatives` would make: read from the
//! packages' maintainer scripts (which the root build does not run) and
//! made relative, so they resolve inside the root and from the host.
use crate::error::Result;
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;
use thaw_error::ResultExt;

/// (name, priority, [(link, path)]) of one `update-alternatives --install`.
pub type Alternative = (String, i64, Vec<(String, String)>);

/// What the unpacked packages' `update-alternatives --install` calls would
/// leave: for each name, the links of its highest priority.
#[derive(Default)]
pub(crate) struct Alternatives(BTreeMap<String, (i64, Vec<(String, String)>)>);

impl Alternatives {
    /// Takes in the alternatives of a .deb's postinst.
    pub(crate) fn add(&mut self, deb: &Path) -> Result<()> {
        let post = Command::new("dpkg-deb")
            .arg("-I")
            .arg(deb)
            .arg("postinst")
            .output()?;
        if post.status.success() {
            for (name, prio, links) in parse_alternatives(&String::from_utf8_lossy(&post.stdout)) {
                let better = self.0.get(&name).map(|(p, _)| prio > *p).unwrap_or(true);
                if better {
                    self.0.insert(name, (prio, links));
                }
            }
        }
        Ok(())
    }

    /// Makes each link under `tree` whose target the tree holds (relative,
    /// so it resolves wherever the tree is mounted); an existing file wins.
    pub(crate) fn link(&self, tree: &Path) -> Result<()> {
        for (name, (_, links)) in &self.0 {
            for (link, target) in links {
                if !tree.join(target.trim_start_matches('/')).exists() {
                    continue;
                }
                let lp = tree.join(link.trim_start_matches('/'));
                if fs::symlink_metadata(&lp).is_ok() {
                    continue;
                }
                fs::create_dir_all(lp.parent().unwrap())?;
                std::os::unix::fs::symlink(relative_link(link, target), &lp)
                    .with_context(|| format!("alternative {name}: {link} -> {target}"))?;
            }
        }
        Ok(())
    }
}

/// `update-alternatives --install LINK NAME PATH PRIO [--slave LINK NAME PATH]...`
/// lines of a maintainer script: (name, prio, [(link, path)]).
pub fn parse_alternatives(script: &str) -> Vec<Alternative> {
    let joined = script.replace("\\\n", " ");
    let mut out = Vec::new();
    for line in joined.lines() {
        let toks: Vec<&str> = line.split_whitespace().collect();
        let Some(i) = toks.iter().position(|t| *t == "update-alternatives") else {
            continue;
        };
        let rest = &toks[i + 1..];
        let Some(j) = rest.iter().position(|t| *t == "--install") else {
            continue;
        };
        let a = &rest[j + 1..];
        if a.len() < 4 || a[..4].iter().any(|t| t.contains('$')) {
            continue;
        }
        let Ok(prio) = a[3].parse::<i64>() else {
            continue;
        };
        let mut links = vec![(a[0].to_string(), a[2].to_string())];
        let mut k = 4;
        while k + 3 < a.len() && a[k] == "--slave" {
            if a[k + 1..k + 4].iter().all(|t| !t.contains('$')) {
                links.push((a[k + 1].to_string(), a[k + 3].to_string()));
            }
            k += 4;
        }
        out.push((a[1].to_string(), prio, links));
    }
    out
}

/// The relative symlink text that makes absolute `link` point at absolute `target`
/// (so the link also resolves when the root is viewed from the host).
pub fn relative_link(link: &str, target: &str) -> String {
    let l: Vec<&str> = link.split('/').filter(|c| !c.is_empty()).collect();
    let t: Vec<&str> = target.split('/').filter(|c| !c.is_empty()).collect();
    let dir = &l[..l.len().saturating_sub(1)];
    let common = dir.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<&str> = vec![".."; dir.len() - common];
    parts.extend_from_slice(&t[common..]);
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_links() {
        assert_eq!(
            relative_link(
                "/usr/lib/x86_64-linux-gnu/libblas.so.3",
                "/usr/lib/x86_64-linux-gnu/openblas-serial/libblas.so.3"
            ),
            "openblas-serial/libblas.so.3"
        );
        assert_eq!(relative_link("/usr/bin/x", "/etc/y"), "../../etc/y");
    }

    #[test]
    fn parses_update_alternatives() {
        let s = "#!/bin/sh\nupdate-alternatives --install /usr/lib/a.so.3 \\\n   a.so.3-x /usr/lib/o/a.so.3 90 \\\n  --slave /usr/lib/b b /usr/lib/o/b\nupdate-alternatives --install $X n $Y 10\n";
        let v = parse_alternatives(s);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].0, "a.so.3-x");
        assert_eq!(v[0].1, 90);
        assert_eq!(
            v[0].2,
            vec![
                (
                    "/usr/lib/a.so.3".to_string(),
                    "/usr/lib/o/a.so.3".to_string()
                ),
                ("/usr/lib/b".to_string(), "/usr/lib/o/b".to_string())
            ]
        );
    }
}
