//! The sandbox's seccomp filter, as classic BPF. It refuses (EPERM) the calls a
//! function has no business making: debugging other processes, mounts,
//! namespaces, kernel modules, BPF, clocks, raw devices, io_uring; it limits
//! socket() to AF_UNIX and clone() to plain threads/processes.

const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARG0: u32 = 16;
const OFF_ARG2: u32 = 32;

/// Syscalls refused with EPERM, by x86_64 number.
const DENIED: &[(u32, &str)] = &[
    (101, "ptrace"),
    (103, "syslog"),
    (133, "mknod"),
    (135, "personality"),
    (153, "vhangup"),
    (155, "pivot_root"),
    (159, "adjtimex"),
    (161, "chroot"),
    (163, "acct"),
    (164, "settimeofday"),
    (165, "mount"),
    (166, "umount2"),
    (167, "swapon"),
    (168, "swapoff"),
    (169, "reboot"),
    (172, "iopl"),
    (173, "ioperm"),
    (175, "init_module"),
    (176, "delete_module"),
    (179, "quotactl"),
    (212, "lookup_dcookie"),
    (227, "clock_settime"),
    (246, "kexec_load"),
    (248, "add_key"),
    (249, "request_key"),
    (250, "keyctl"),
    (259, "mknodat"),
    (272, "unshare"),
    (298, "perf_event_open"),
    (300, "fanotify_init"),
    (303, "name_to_handle_at"),
    (304, "open_by_handle_at"),
    (305, "clock_adjtime"),
    (308, "setns"),
    (310, "process_vm_readv"),
    (311, "process_vm_writev"),
    (312, "kcmp"),
    (313, "finit_module"),
    (320, "kexec_file_load"),
    (321, "bpf"),
    (323, "userfaultfd"),
    (425, "io_uring_setup"),
    (426, "io_uring_enter"),
    (427, "io_uring_register"),
    (428, "open_tree"),
    (429, "move_mount"),
    (430, "fsopen"),
    (431, "fsconfig"),
    (432, "fsmount"),
    (433, "fspick"),
    (438, "pidfd_getfd"),
    (442, "mount_setattr"),
];

const SYS_SOCKET: u32 = 41;
const SYS_CLONE: u32 = 56;
const SYS_CLONE3: u32 = 435;
const AF_UNIX: u32 = 1;
const AF_INET: u32 = 2;
const AF_NETLINK: u32 = 16;
const AF_INET6: u32 = 10;
const NETLINK_ROUTE: u32 = 0;
/// CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
const CLONE_NS_FLAGS: u32 = 0x0002_0000
    | 0x0200_0000
    | 0x0400_0000
    | 0x0800_0000
    | 0x1000_0000
    | 0x2000_0000
    | 0x4000_0000
    | 0x80;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0..2].copy_from_slice(&code.to_le_bytes());
    b[2] = jt;
    b[3] = jf;
    b[4..8].copy_from_slice(&k.to_le_bytes());
    b
}

/// The filter program, each instruction as the 8 bytes of a `struct sock_filter`.
pub fn filter() -> Vec<[u8; 8]> {
    filter_for(false)
}

/// [`filter`], and with `network` (a function given egress) also `AF_INET`,
/// `AF_INET6` and read-only routing netlink (what `getaddrinfo` asks).
pub fn filter_for(network: bool) -> Vec<[u8; 8]> {
    let errno = |e: i32| insn(RET_K, 0, 0, RET_ERRNO | (e.cast_unsigned() & 0xffff));
    let mut p = vec![
        insn(LD_W_ABS, 0, 0, OFF_ARCH),
        insn(JEQ_K, 1, 0, AUDIT_ARCH_X86_64),
        insn(RET_K, 0, 0, RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, OFF_NR),
        insn(JGE_K, 0, 1, X32_SYSCALL_BIT),
        insn(RET_K, 0, 0, RET_KILL_PROCESS),
    ];
    for (nr, _) in DENIED {
        p.push(insn(JEQ_K, 0, 1, *nr));
        p.push(errno(libc::EPERM));
    }
    // clone3 passes flags in memory BPF cannot see: ENOSYS makes libc fall back to clone.
    p.push(insn(JEQ_K, 0, 1, SYS_CLONE3));
    p.push(errno(libc::ENOSYS));
    // socket(domain not allowed) -> EAFNOSUPPORT
    let (families, netlink): (&[u32], Vec<[u8; 8]>) = match network {
        false => (&[AF_UNIX], vec![]),
        // routing netlink only
        true => (
            &[AF_UNIX, AF_INET, AF_INET6],
            vec![
                insn(JEQ_K, 0, 2, AF_NETLINK),
                insn(LD_W_ABS, 0, 0, OFF_ARG2),
                insn(JEQ_K, 1, 0, NETLINK_ROUTE),
            ],
        ),
    };
    // each allowed family jumps over the rest to the allow at the end
    let mut socket_rule = vec![insn(LD_W_ABS, 0, 0, OFF_ARG0)];
    for (i, family) in families.iter().enumerate() {
        #[allow(clippy::cast_possible_truncation)] // at most 6 instructions
        let over = (families.len() - 1 - i + netlink.len() + 1) as u8;
        socket_rule.push(insn(JEQ_K, over, 0, *family));
    }
    socket_rule.extend(netlink);
    socket_rule.push(errno(libc::EAFNOSUPPORT));
    socket_rule.push(insn(RET_K, 0, 0, RET_ALLOW));
    #[allow(clippy::cast_possible_truncation)] // the socket rule is at most 9 instructions
    let skip_socket = socket_rule.len() as u8;
    p.push(insn(JEQ_K, 0, skip_socket, SYS_SOCKET));
    p.extend(socket_rule);
    // clone with namespace flags -> EPERM
    p.push(insn(JEQ_K, 0, 3, SYS_CLONE));
    p.push(insn(LD_W_ABS, 0, 0, OFF_ARG0));
    p.push(insn(JSET_K, 0, 1, CLONE_NS_FLAGS));
    p.push(errno(libc::EPERM));
    p.push(insn(RET_K, 0, 0, RET_ALLOW));
    p
}

/// Names of the refused syscalls, for docs and error messages.
pub fn denied_names() -> Vec<&'static str> {
    DENIED.iter().map(|(_, n)| *n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny classic-BPF interpreter over the subset we emit, to check the
    /// program's verdicts without loading it.
    fn run(prog: &[[u8; 8]], nr: u32, arch: u32, arg0: u32) -> u32 {
        run_args(prog, nr, arch, arg0, 0)
    }

    fn run_args(prog: &[[u8; 8]], nr: u32, arch: u32, arg0: u32, arg2: u32) -> u32 {
        let mut acc = 0u32;
        let mut pc = 0usize;
        loop {
            let b = prog[pc];
            let code = u16::from_le_bytes([b[0], b[1]]);
            let (jt, jf) = (b[2] as usize, b[3] as usize);
            let k = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
            pc += 1;
            match code {
                LD_W_ABS => {
                    acc = match k {
                        OFF_NR => nr,
                        OFF_ARCH => arch,
                        OFF_ARG0 => arg0,
                        OFF_ARG2 => arg2,
                        _ => panic!("load {k}"),
                    }
                }
                JEQ_K => pc += if acc == k { jt } else { jf },
                JGE_K => pc += if acc >= k { jt } else { jf },
                JSET_K => pc += if acc & k != 0 { jt } else { jf },
                RET_K => return k,
                _ => panic!("opcode {code:#x}"),
            }
        }
    }

    #[test]
    fn verdicts() {
        let p = filter();
        let a = AUDIT_ARCH_X86_64;
        assert_eq!(run(&p, 0, a, 0), RET_ALLOW, "read");
        assert_eq!(run(&p, 101, a, 0), RET_ERRNO | libc::EPERM as u32, "ptrace");
        assert_eq!(run(&p, 165, a, 0), RET_ERRNO | libc::EPERM as u32, "mount");
        assert_eq!(run(&p, 41, a, 1), RET_ALLOW, "socket(AF_UNIX)");
        assert_eq!(
            run(&p, 41, a, 2),
            RET_ERRNO | libc::EAFNOSUPPORT as u32,
            "socket(AF_INET)"
        );
        assert_eq!(run(&p, 56, a, 0x11), RET_ALLOW, "fork-like clone");
        assert_eq!(
            run(&p, 56, a, 0x1000_0000),
            RET_ERRNO | libc::EPERM as u32,
            "clone(NEWUSER)"
        );
        assert_eq!(
            run(&p, 435, a, 0),
            RET_ERRNO | libc::ENOSYS as u32,
            "clone3"
        );
        assert_eq!(run(&p, 0, 0x4000_0003, 0), RET_KILL_PROCESS, "i386 arch");
        assert_eq!(run(&p, X32_SYSCALL_BIT | 1, a, 0), RET_KILL_PROCESS, "x32");
        assert!(p.len() < 4096);
        assert!(denied_names().contains(&"bpf"));
    }

    #[test]
    fn network_functions_may_open_inet_sockets_only() {
        let (n, a) = (filter_for(true), AUDIT_ARCH_X86_64);
        let refused = RET_ERRNO | libc::EAFNOSUPPORT as u32;
        for (domain, proto, want) in [
            (AF_UNIX, 0, RET_ALLOW),
            (AF_INET, 6, RET_ALLOW),
            (AF_INET6, 0, RET_ALLOW),
            (AF_NETLINK, NETLINK_ROUTE, RET_ALLOW),
            (AF_NETLINK, 9, refused), // audit
            (17, 0, refused),         // AF_PACKET
        ] {
            assert_eq!(run_args(&n, 41, a, domain, proto), want, "{domain}/{proto}");
        }
        // the rest of the program is the same
        assert_eq!(run(&n, 101, a, 0), RET_ERRNO | libc::EPERM as u32, "ptrace");
        assert_eq!(run(&n, 56, a, 0x1000_0000), RET_ERRNO | libc::EPERM as u32);
        assert_eq!(run(&filter(), 41, a, AF_INET), refused);
    }
}
