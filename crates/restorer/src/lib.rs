//! The restorer: a freestanding static program (src/restorer.c) that rebuilds
//! a runtime's address space inside a fresh sandbox, and the Rust side of its
//! plan format (src/plan.h). The worker builds a [`Plan`], writes it to the
//! restorer's fd 3 and reads back a [`RestorerStatus`].

/// The restorer ELF, built by build.rs; executed from a memfd.
pub const RESTORER_ELF: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/restorer.elf"));

/// The restorer owns `[RESTORER_BASE, RESTORER_BASE + RESTORER_SPAN)`; runtimes
/// that map anything there cannot be snapshotted.
pub const RESTORER_BASE: u64 = 0x2_0000_0000;
pub const RESTORER_SPAN: u64 = 0x100_0000;
/// The restorer reads at most this much plan (its scratch area).
pub const MAX_PLAN_BYTES: u64 = RESTORER_SPAN - 0x40_0000;
/// The restorer moves its mremap scratch just above its span.
pub const RESTORER_VDSO_SCRATCH: u64 = RESTORER_BASE + RESTORER_SPAN;

pub const PLAN_MAGIC: u64 = 0x4e41_4c50_5741_4854;
pub const PLAN_VERSION: u32 = 1;
pub const MAX_VDSO_PIECES: usize = 4;

pub const FILL_COPY: u32 = 0;
pub const FILL_MAP: u32 = 1;
pub const FILL_MAP_POPULATE: u32 = 2;
pub const FILL_MAP_RANDOM: u32 = 3;
pub const FILL_POPULATE_WRITE: u32 = 4;

pub const VMA_ANON: u32 = 1;
pub const VMA_GROWSDOWN: u32 = 2;
pub const VMA_LAZY: u32 = 4;
pub const VMA_POPULATE: u32 = 8;

pub const PLAN_LAZY: u32 = 1;

/// The fields of `struct prctl_mm_map` the restorer sets (auxv and exe aside);
/// snapshots store them as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MmFields {
    pub start_code: u64,
    pub end_code: u64,
    pub start_data: u64,
    pub end_data: u64,
    pub start_brk: u64,
    pub brk: u64,
    pub start_stack: u64,
    pub arg_start: u64,
    pub arg_end: u64,
    pub env_start: u64,
    pub env_end: u64,
}

/// The fields of `struct plan_header` that are not counts (counts come from the vectors).
#[derive(Debug, Clone, Default)]
pub struct PlanHeader {
    pub vdso_block_start: u64,
    pub vdso_offset: u64,
    pub vdso_pieces: Vec<(u64, u64)>,
    pub mm: MmFields,
    pub uid: u32,
    pub gid: u32,
    pub flags: u32,
}

#[derive(Debug, Clone, Default)]
pub struct PlanVma {
    pub start: u64,
    pub end: u64,
    pub file_off: u64,
    pub prot: u32,
    pub flags: u32,
    /// Offset of the backing file's path in `Plan::strings`, -1 when anonymous.
    pub path_off: i32,
    pub first_run: u32,
    pub n_runs: u32,
}

#[derive(Debug, Clone, Default)]
pub struct PlanRun {
    pub addr: u64,
    pub len: u64,
    pub img_off: u64,
    pub img_fd: i32,
    pub fill: u32,
}

#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub header: PlanHeader,
    pub vmas: Vec<PlanVma>,
    pub runs: Vec<PlanRun>,
    pub auxv: Vec<u64>,
    /// seccomp BPF instructions, each `struct sock_filter` as its 8 raw bytes.
    pub filter: Vec<[u8; 8]>,
    pub strings: Vec<u8>,
}

impl Plan {
    /// Adds a NUL-terminated path and returns its offset.
    pub fn add_string(&mut self, s: &str) -> i32 {
        let off = self.strings.len() as i32;
        self.strings.extend_from_slice(s.as_bytes());
        self.strings.push(0);
        off
    }

    /// The bytes written to the restorer: a u64 length, then the blob.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let h = &self.header;
        if h.vdso_pieces.is_empty() || h.vdso_pieces.len() > MAX_VDSO_PIECES {
            return Err(format!(
                "{} vDSO mappings (1..=4 supported)",
                h.vdso_pieces.len()
            ));
        }
        let mut strings = self.strings.clone();
        if strings.last() != Some(&0) {
            strings.push(0);
        }
        let mut w = Vec::with_capacity(224 + self.vmas.len() * 48 + self.runs.len() * 32);
        let u64s = |w: &mut Vec<u8>, v: u64| w.extend_from_slice(&v.to_le_bytes());
        let u32s = |w: &mut Vec<u8>, v: u32| w.extend_from_slice(&v.to_le_bytes());
        u64s(&mut w, PLAN_MAGIC);
        u32s(&mut w, PLAN_VERSION);
        u32s(&mut w, self.vmas.len() as u32);
        u32s(&mut w, self.runs.len() as u32);
        u32s(&mut w, self.auxv.len() as u32);
        u32s(&mut w, self.filter.len() as u32);
        u32s(&mut w, strings.len() as u32);
        u64s(&mut w, h.vdso_block_start);
        u64s(&mut w, h.vdso_offset);
        for i in 0..MAX_VDSO_PIECES {
            let (off, len) = h.vdso_pieces.get(i).copied().unwrap_or((0, 0));
            u64s(&mut w, off);
            u64s(&mut w, len);
        }
        u32s(&mut w, h.vdso_pieces.len() as u32);
        u32s(&mut w, 0);
        for v in [
            h.mm.start_code,
            h.mm.end_code,
            h.mm.start_data,
            h.mm.end_data,
            h.mm.start_brk,
            h.mm.brk,
            h.mm.start_stack,
            h.mm.arg_start,
            h.mm.arg_end,
            h.mm.env_start,
            h.mm.env_end,
        ] {
            u64s(&mut w, v);
        }
        for v in [h.uid, h.gid, h.flags, 0] {
            u32s(&mut w, v);
        }
        debug_assert_eq!(w.len(), 224);
        for v in &self.vmas {
            u64s(&mut w, v.start);
            u64s(&mut w, v.end);
            u64s(&mut w, v.file_off);
            u32s(&mut w, v.prot);
            u32s(&mut w, v.flags);
            u32s(&mut w, v.path_off as u32);
            u32s(&mut w, v.first_run);
            u32s(&mut w, v.n_runs);
            u32s(&mut w, 0);
        }
        for r in &self.runs {
            u64s(&mut w, r.addr);
            u64s(&mut w, r.len);
            u64s(&mut w, r.img_off);
            u32s(&mut w, r.img_fd as u32);
            u32s(&mut w, r.fill);
        }
        for a in &self.auxv {
            u64s(&mut w, *a);
        }
        for f in &self.filter {
            w.extend_from_slice(f);
        }
        w.extend_from_slice(&strings);
        if w.len() as u64 > MAX_PLAN_BYTES {
            return Err(format!(
                "restore plan of {} bytes exceeds {MAX_PLAN_BYTES}",
                w.len()
            ));
        }
        let mut out = (w.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&w);
        Ok(out)
    }
}

/// What the restorer reports on fd 3 when it is ready or has failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestorerStatus {
    pub ok: bool,
    pub err: i32,
    pub step: u32,
    pub detail: u32,
    pub syscall_insn: u64,
    pub setup_ns: u64,
}

pub const STATUS_BYTES: usize = 40;

impl RestorerStatus {
    /// Decodes and validates a status record: the restorer runs in the sandbox,
    /// so its reply is checked like any other input from there.
    pub fn decode(b: &[u8]) -> Result<Self, String> {
        if b.len() != STATUS_BYTES {
            return Err(format!(
                "restorer status of {} bytes, want {STATUS_BYTES}",
                b.len()
            ));
        }
        let u64at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u32at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        if u64at(0) != PLAN_MAGIC {
            return Err("restorer status has a bad magic".into());
        }
        let s = RestorerStatus {
            ok: u32at(8) == 1,
            err: u32at(12) as i32,
            step: u32at(16),
            detail: u32at(20),
            syscall_insn: u64at(24),
            setup_ns: u64at(32),
        };
        if s.ok && !(RESTORER_BASE..RESTORER_BASE + RESTORER_SPAN).contains(&s.syscall_insn) {
            return Err(format!(
                "restorer reported a syscall address {:#x} outside its span",
                s.syscall_insn
            ));
        }
        Ok(s)
    }

    /// Names the step that failed.
    pub fn step_name(&self) -> &'static str {
        match self.step {
            1 => "reading the plan",
            2 => "validating the plan",
            3 => "unmapping its own address space",
            4 => "moving the vDSO",
            5 => "opening a runtime file",
            6 => "mapping a region",
            7 => "filling a region from the image",
            8 => "setting region protection",
            9 => "setting up userfaultfd",
            10 => "sending the userfaultfd",
            11 => "setting the mm layout (PR_SET_MM_MAP)",
            12 => "dropping privileges",
            13 => "installing the seccomp filter",
            _ => "an unknown step",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_is_embedded_and_linked_at_base() {
        assert_eq!(&RESTORER_ELF[..4], b"\x7fELF");
        // e_entry lies inside the restorer span
        let entry = u64::from_le_bytes(RESTORER_ELF[24..32].try_into().unwrap());
        assert!((RESTORER_BASE..RESTORER_BASE + RESTORER_SPAN).contains(&entry));
    }

    #[test]
    fn plan_encoding_has_c_layout_sizes() {
        let mut p = Plan::default();
        p.header.vdso_pieces = vec![(0, 4096)];
        p.vmas.push(PlanVma::default());
        p.runs.push(PlanRun::default());
        p.auxv = vec![0, 0];
        p.filter.push([0; 8]);
        let off = p.add_string("/usr/bin/python3");
        assert_eq!(off, 0);
        let enc = p.encode().unwrap();
        let len = u64::from_le_bytes(enc[..8].try_into().unwrap()) as usize;
        assert_eq!(len, enc.len() - 8);
        assert_eq!(len, 224 + 48 + 32 + 16 + 8 + 17);
    }

    #[test]
    fn status_rejects_garbage() {
        assert!(RestorerStatus::decode(&[0u8; 39]).is_err());
        assert!(RestorerStatus::decode(&[0u8; 40]).is_err());
        let mut b = [0u8; 40];
        b[..8].copy_from_slice(&PLAN_MAGIC.to_le_bytes());
        b[8] = 1;
        b[24..32].copy_from_slice(&0x1000u64.to_le_bytes());
        assert!(
            RestorerStatus::decode(&b).is_err(),
            "syscall address outside the span"
        );
        b[24..32].copy_from_slice(&(RESTORER_BASE + 0x1000).to_le_bytes());
        assert!(RestorerStatus::decode(&b).unwrap().ok);
    }
}
