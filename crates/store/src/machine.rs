//! The machine a snapshot was taken on, as far as a restore depends on it.
//! A snapshot resumes code that already chose its paths by what the CPU
//! offered at init (numpy's AVX2 kernels, glibc's string functions), saved
//! register state in the CPU's XSAVE layout, and mapped the kernel's vDSO:
//! restored on a machine with fewer CPU features, a smaller XSAVE area or
//! another kernel, it would fault or lose state silently. The record goes
//! into every manifest; opening a snapshot whose record this machine cannot
//! honour is refused with the reason, and its owner takes a new one.
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// CPUID leaves (leaf, subleaf) whose feature bits user code tests: the
/// basic features, the structured extended features, the extended ones.
const FEATURE_LEAVES: [(u32, u32); 3] = [(1, 0), (7, 0), (0x8000_0001, 0)];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineRecord {
    pub cpu_vendor: String,
    /// `LEAF.SUBLEAF.REG` (hex leaf) -> feature bits, e.g. `7.0.ebx`.
    pub cpu_features: BTreeMap<String, u32>,
    /// XSAVE state components the CPU supports (CPUID 0xD.0 EDX:EAX).
    pub xsave_features: u64,
    /// Bytes of the XSAVE area for the components the kernel enabled (0xD.0 EBX).
    pub xsave_bytes: u32,
    /// `uname -r`: the vDSO and the kernel ABI the snapshot saw.
    pub kernel_release: String,
}

fn kernel_release() -> String {
    // SAFETY: uname fills the struct we pass; all-zero is a valid start.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: a plain syscall into our struct.
    if unsafe { libc::uname(&mut u) } != 0 {
        return String::new();
    }
    let bytes: Vec<u8> = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c.cast_unsigned())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl MachineRecord {
    /// This machine (read once per process).
    pub fn this() -> &'static MachineRecord {
        static THIS: OnceLock<MachineRecord> = OnceLock::new();
        THIS.get_or_init(|| {
            use std::arch::x86_64::__cpuid_count;
            let v = __cpuid_count(0, 0);
            let vendor: Vec<u8> = [v.ebx, v.edx, v.ecx]
                .iter()
                .flat_map(|r| r.to_le_bytes())
                .collect();
            let max_basic = v.eax;
            let max_ext = __cpuid_count(0x8000_0000, 0).eax;
            let mut cpu_features = BTreeMap::new();
            for (leaf, sub) in FEATURE_LEAVES {
                let max = if leaf >= 0x8000_0000 {
                    max_ext
                } else {
                    max_basic
                };
                if leaf > max {
                    continue;
                }
                let r = __cpuid_count(leaf, sub);
                for (reg, bits) in [("ebx", r.ebx), ("ecx", r.ecx), ("edx", r.edx)] {
                    // leaf 1's EBX is the APIC id and counts, not features
                    if leaf == 1 && reg == "ebx" {
                        continue;
                    }
                    cpu_features.insert(format!("{leaf:x}.{sub}.{reg}"), bits);
                }
            }
            let x = __cpuid_count(0xd, 0);
            MachineRecord {
                cpu_vendor: String::from_utf8_lossy(&vendor).into_owned(),
                cpu_features,
                xsave_features: u64::from(x.eax) | u64::from(x.edx) << 32,
                xsave_bytes: x.ebx,
                kernel_release: kernel_release(),
            }
        })
    }

    /// Why a snapshot taken on `self` cannot resume on `here`, if it cannot.
    pub fn mismatch(&self, here: &MachineRecord) -> Option<String> {
        let mut why = Vec::new();
        for (reg, &bits) in &self.cpu_features {
            let have = here.cpu_features.get(reg).copied().unwrap_or(0);
            let missing = bits & !have;
            if missing != 0 {
                why.push(format!("CPU features {reg} {missing:#x} missing here"));
            }
        }
        let missing = self.xsave_features & !here.xsave_features;
        if missing != 0 {
            why.push(format!("XSAVE components {missing:#x} missing here"));
        }
        if self.xsave_bytes > here.xsave_bytes {
            why.push(format!(
                "XSAVE area of {} bytes, this CPU's is {}",
                self.xsave_bytes, here.xsave_bytes
            ));
        }
        if self.kernel_release != here.kernel_release {
            why.push(format!(
                "kernel {:?}, this machine runs {:?}",
                self.kernel_release, here.kernel_release
            ));
        }
        (!why.is_empty()).then(|| {
            format!(
                "taken on another kind of machine ({} CPU): {}",
                self.cpu_vendor,
                why.join("; ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_matches_itself_and_a_forged_record_is_refused() {
        let here = MachineRecord::this();
        assert!(!here.cpu_features.is_empty());
        assert!(here.xsave_bytes >= 576, "{here:?}");
        assert!(here.mismatch(here).is_none());

        let mut richer = here.clone();
        richer.cpu_features.insert("7.0.ebx".into(), u32::MAX);
        let why = richer.mismatch(here).unwrap();
        assert!(why.contains("7.0.ebx"), "{why}");

        let mut bigger = here.clone();
        bigger.xsave_bytes = here.xsave_bytes + 64;
        assert!(bigger.mismatch(here).unwrap().contains("XSAVE area"));

        let mut other_kernel = here.clone();
        other_kernel.kernel_release = "1.0.0-forged".into();
        assert!(other_kernel
            .mismatch(here)
            .unwrap()
            .contains("1.0.0-forged"));

        // a machine with fewer features restores on one with more
        let mut poorer = here.clone();
        poorer.cpu_features.insert("7.0.ebx".into(), 0);
        poorer.xsave_features = 3;
        poorer.xsave_bytes = 576;
        assert!(poorer.mismatch(here).is_none());
    }
}
