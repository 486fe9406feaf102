//! The process state a snapshot carries besides its memory pages.
use crate::ptrace::NREGS;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use thaw_memory::MemoryLayout;

pub const STATE_VERSION: u32 = 1;

/// One mapping of the runtime. `path` is inside the runtime root for
/// file-backed mappings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    /// PROT_READ | PROT_WRITE | PROT_EXEC bits
    pub prot: u32,
    pub path: Option<String>,
    pub file_off: u64,
    pub growsdown: bool,
    pub name: String,
}

/// The mm layout fields (`struct prctl_mm_map` minus auxv and exe).
pub use thaw_restorer::MmFields as MmLayout;

/// The runtime's [vvar .. vdso] block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VdsoBlock {
    pub start: u64,
    pub vdso_offset: u64,
    /// (offset, length) of each mapping in the block
    pub pieces: Vec<(u64, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessState {
    pub version: u32,
    /// `struct user_regs_struct`, prepared to re-issue an interrupted syscall
    pub regs: Vec<u64>,
    /// XSAVE area, hex
    pub xstate: String,
    pub sigmask: u64,
    pub mm: MmLayout,
    pub auxv: Vec<u64>,
    pub vdso: VdsoBlock,
    /// `vmas[i]` and `memory.regions[i]` describe the same mapping.
    pub vmas: Vec<Vma>,
    pub memory: MemoryLayout,
    /// argv the runtime was started with (to restart it fresh if needed)
    pub argv: Vec<String>,
}

impl ProcessState {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("state serialises")
    }

    /// Parses and checks a state file: everything in it is later used to
    /// build mappings, so shape errors are caught here, not in the restorer.
    pub fn decode(data: &[u8]) -> Result<ProcessState> {
        let s: ProcessState = serde_json::from_slice(data).context("process state is corrupt")?;
        if s.version != STATE_VERSION {
            bail!(
                "process state version {} is not supported (want {STATE_VERSION})",
                s.version
            );
        }
        if s.regs.len() != NREGS {
            bail!("process state has {} registers, want {NREGS}", s.regs.len());
        }
        let x = hex::decode(&s.xstate).context("process state: xstate is not hex")?;
        if x.len() < 576 || x.len() > 16384 {
            bail!(
                "process state: XSAVE area of {} bytes is implausible",
                x.len()
            );
        }
        if s.vmas.len() != s.memory.regions.len() {
            bail!(
                "process state: {} mappings but {} memory regions",
                s.vmas.len(),
                s.memory.regions.len()
            );
        }
        s.memory
            .validate()
            .context("process state: memory layout")?;
        for (v, r) in s.vmas.iter().zip(&s.memory.regions) {
            if v.start != r.start || v.end != r.end || r.anonymous != v.path.is_none() {
                bail!(
                    "process state: mapping {:#x} and its memory region disagree",
                    v.start
                );
            }
            if v.prot & !7 != 0 {
                bail!(
                    "process state: mapping {:#x} has bad protection bits",
                    v.start
                );
            }
            if let Some(p) = &v.path {
                if !p.starts_with('/') || p.split('/').any(|c| c == "..") || p.contains('\0') {
                    bail!(
                        "process state: mapping {:#x} names a bad path {p:?}",
                        v.start
                    );
                }
            }
            let lo = thaw_restorer::RESTORER_BASE;
            let hi = lo + 2 * thaw_restorer::RESTORER_SPAN; // span + vdso scratch
            if v.start < hi && v.end > lo {
                bail!(
                    "process state: mapping {:#x} overlaps the restorer's reserved range",
                    v.start
                );
            }
            if v.end > 0x7fff_ffff_f000 || v.start < 0x10000 {
                bail!(
                    "process state: mapping {:#x} is outside user space",
                    v.start
                );
            }
        }
        if s.vdso.pieces.is_empty() || s.vdso.pieces.len() > thaw_restorer::MAX_VDSO_PIECES {
            bail!(
                "process state: vDSO block with {} mappings",
                s.vdso.pieces.len()
            );
        }
        if s.auxv.len() > 128 || !s.auxv.len().is_multiple_of(2) {
            bail!("process state: auxv of {} words", s.auxv.len());
        }
        Ok(s)
    }

    pub fn xstate_bytes(&self) -> Vec<u8> {
        hex::decode(&self.xstate).unwrap_or_default()
    }

    pub fn regs_array(&self) -> [u64; NREGS] {
        let mut r = [0u64; NREGS];
        r.copy_from_slice(&self.regs[..NREGS]);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use thaw_memory::{Region, Run};

    fn valid() -> ProcessState {
        ProcessState {
            version: STATE_VERSION,
            regs: vec![0; NREGS],
            xstate: hex::encode(vec![0u8; 832]),
            sigmask: 0,
            mm: MmLayout::default(),
            auxv: vec![6, 4096, 0, 0],
            vdso: VdsoBlock {
                start: 0x7fff_f7fc_2000,
                vdso_offset: 0x6000,
                pieces: vec![(0, 0x6000), (0x6000, 0x2000)],
            },
            vmas: vec![Vma {
                start: 0x1000_0000,
                end: 0x1000_2000,
                prot: 3,
                path: None,
                file_off: 0,
                growsdown: false,
                name: String::new(),
            }],
            memory: MemoryLayout {
                regions: vec![Region {
                    start: 0x1000_0000,
                    end: 0x1000_2000,
                    anonymous: true,
                    runs: vec![Run {
                        addr: 0x1000_0000,
                        len: 4096,
                        file_off: 0,
                    }],
                }],
                image_len: 4096,
            },
            argv: vec![],
        }
    }

    #[test]
    fn valid_state_round_trips_and_bad_ones_are_named() {
        let s = valid();
        assert_eq!(ProcessState::decode(&s.encode()).unwrap(), s);
        let mut bad = valid();
        bad.vmas[0].start = thaw_restorer::RESTORER_BASE;
        bad.vmas[0].end = thaw_restorer::RESTORER_BASE + 0x2000;
        bad.memory.regions[0].start = bad.vmas[0].start;
        bad.memory.regions[0].end = bad.vmas[0].end;
        bad.memory.regions[0].runs.clear();
        assert!(
            format!("{:#}", ProcessState::decode(&bad.encode()).unwrap_err()).contains("restorer")
        );
        let mut bad = valid();
        bad.vmas[0].path = Some("/../../etc/passwd".into());
        bad.memory.regions[0].anonymous = false;
        assert!(ProcessState::decode(&bad.encode()).is_err());
        let mut bad = valid();
        bad.regs.pop();
        assert!(ProcessState::decode(&bad.encode()).is_err());
        let mut bad = valid();
        bad.version = 2;
        assert!(
            format!("{:#}", ProcessState::decode(&bad.encode()).unwrap_err()).contains("version")
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        #[test]
        fn decoding_arbitrary_bytes_never_panics(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = ProcessState::decode(&data);
        }

        #[test]
        fn decoding_mutated_states_never_panics(pos in 0usize..4096, byte in any::<u8>(), n in 1usize..8) {
            let mut data = valid().encode();
            for k in 0..n {
                let i = (pos + k * 97) % data.len();
                data[i] = byte.wrapping_add(k as u8);
            }
            let _ = ProcessState::decode(&data);
        }
    }
}
