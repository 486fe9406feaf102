/*
 * Build-time ABI dump (run by build.rs, never shipped): prints the sizes and
 * field offsets of plan.h's structs, and its step table, as Rust constants.
 * lib.rs asserts its #[repr(C)] mirrors against them at compile time.
 */
#include <stddef.h>
#include <stdio.h>
#include "plan.h"

#define SIZE(s) printf("pub const C_SIZE_%s: usize = %zu;\n", #s, sizeof(struct s))
#define OFF(s, f) printf("pub const C_OFF_%s_%s: usize = %zu;\n", #s, #f, offsetof(struct s, f))
#define STEP_NAME(name, n, text) printf("    (%d, \"%s\"),\n", n, text);

int main(void)
{
    SIZE(plan_header);
    OFF(plan_header, magic);
    OFF(plan_header, version);
    OFF(plan_header, n_vmas);
    OFF(plan_header, n_runs);
    OFF(plan_header, auxv_words);
    OFF(plan_header, n_filter);
    OFF(plan_header, strings_len);
    OFF(plan_header, vdso_block_start);
    OFF(plan_header, vdso_offset);
    OFF(plan_header, vdso_pieces);
    OFF(plan_header, n_vdso_pieces);
    OFF(plan_header, n_threads);
    OFF(plan_header, start_code);
    OFF(plan_header, env_end);
    OFF(plan_header, uid);
    OFF(plan_header, gid);
    OFF(plan_header, flags);
    OFF(plan_header, frame_len);
    OFF(plan_header, n_fds);
    OFF(plan_header, n_watches);
    OFF(plan_header, n_sigactions);
    OFF(plan_header, n_siginfos);
    OFF(plan_header, itimers);
    OFF(plan_header, n_shared);
    OFF(plan_header, reserved);
    SIZE(plan_shared);
    OFF(plan_shared, size);
    OFF(plan_shared, img_off);
    OFF(plan_shared, img_len);
    OFF(plan_shared, name_off);
    OFF(plan_shared, reserved);
    SIZE(plan_sigaction);
    OFF(plan_sigaction, handler);
    OFF(plan_sigaction, flags);
    OFF(plan_sigaction, restorer);
    OFF(plan_sigaction, mask);
    OFF(plan_sigaction, sig);
    OFF(plan_sigaction, reserved);
    SIZE(plan_siginfo);
    OFF(plan_siginfo, to_main);
    OFF(plan_siginfo, reserved);
    OFF(plan_siginfo, info);
    SIZE(plan_fd);
    OFF(plan_fd, fd);
    OFF(plan_fd, kind);
    OFF(plan_fd, flags);
    OFF(plan_fd, ref);
    OFF(plan_fd, path_off);
    OFF(plan_fd, path_len);
    OFF(plan_fd, arg);
    OFF(plan_fd, arg2);
    OFF(plan_fd, a);
    OFF(plan_fd, b);
    OFF(plan_fd, c);
    OFF(plan_fd, img_off);
    OFF(plan_fd, img_len);
    SIZE(plan_watch);
    OFF(plan_watch, epoll);
    OFF(plan_watch, fd);
    OFF(plan_watch, events);
    OFF(plan_watch, reserved);
    OFF(plan_watch, data);
    SIZE(plan_vma);
    OFF(plan_vma, start);
    OFF(plan_vma, end);
    OFF(plan_vma, file_off);
    OFF(plan_vma, prot);
    OFF(plan_vma, flags);
    OFF(plan_vma, path_off);
    OFF(plan_vma, first_run);
    OFF(plan_vma, n_runs);
    OFF(plan_vma, shared);
    SIZE(plan_run);
    OFF(plan_run, addr);
    OFF(plan_run, len);
    OFF(plan_run, img_off);
    OFF(plan_run, img_fd);
    OFF(plan_run, fill);
    SIZE(plan_thread);
    OFF(plan_thread, frame_off);
    OFF(plan_thread, fs_base);
    OFF(plan_thread, gs_base);
    OFF(plan_thread, clear_tid);
    OFF(plan_thread, robust_head);
    OFF(plan_thread, robust_len);
    OFF(plan_thread, rseq_addr);
    OFF(plan_thread, rseq_len);
    OFF(plan_thread, rseq_sig);
    OFF(plan_thread, comm);
    SIZE(restorer_status);
    OFF(restorer_status, magic);
    OFF(restorer_status, ok);
    OFF(restorer_status, err);
    OFF(restorer_status, step);
    OFF(restorer_status, detail);
    OFF(restorer_status, populate_ns);
    OFF(restorer_status, setup_ns);
    printf("pub const C_PLAN_MAGIC: u64 = %#lx;\n", THAW_PLAN_MAGIC);
    printf("pub const C_PLAN_VERSION: u32 = %d;\n", THAW_PLAN_VERSION);
    printf("pub const C_MAX_VDSO_PIECES: usize = %d;\n", MAX_VDSO_PIECES);
    printf("pub const C_MAX_THREADS: usize = %d;\n", MAX_THREADS);
    printf("pub const C_RESTORER_BASE: u64 = %#lx;\n", RESTORER_BASE);
    printf("pub const C_RESTORER_SPAN: u64 = %#lx;\n", RESTORER_SPAN);
    printf("pub const C_TRAMP: (u64, u64, u64) = (%#lx, %#lx, %#lx);\n", TRAMP_ADDR, TRAMP_SIZE,
           TRAMP_FRAME);
    printf("pub const C_TRAMP_FRAME_MAX: u64 = %#lx;\n", TRAMP_FRAME_MAX);
    printf("pub const C_RESUME_BYTE: u8 = %d;\n", RESUME_BYTE);
    printf("pub const C_SCRATCH_MAX: u64 = %#lx;\n", RESTORER_SCRATCH_MAX);
    printf("pub const C_FILL: [u32; 5] = [%d, %d, %d, %d, %d];\n", FILL_COPY, FILL_MAP,
           FILL_MAP_POPULATE, FILL_MAP_RANDOM, FILL_POPULATE_WRITE);
    printf("pub const C_VMA_FLAGS: [u32; 4] = [%d, %d, %d, %d];\n", VMA_ANON, VMA_GROWSDOWN,
           VMA_LAZY, VMA_POPULATE);
    printf("pub const C_PLAN_LAZY: u32 = %d;\n", PLAN_LAZY);
    printf("pub const C_PLAN_HOLD_THREADS: u32 = %d;\n", PLAN_HOLD_THREADS);
    printf("pub const C_PLAN_FDS: (usize, i32) = (%d, %d);\n", MAX_PLAN_FDS, PLAN_FD_BASE);
    printf("pub const C_FDS: (usize, u32) = (%d, %d);\n", MAX_FDS, MAX_FD_NUMBER);
    printf("pub const C_FD_KINDS: [u32; 10] = [%d, %d, %d, %d, %d, %d, %d, %d, %d, %d];\n", FD_DUP,
           FD_FILE, FD_PIPE, FD_EVENTFD, FD_EPOLL, FD_TIMERFD, FD_SIGNALFD, FD_MEMFD, FD_SOCKET,
           FD_SOCKETPAIR);
    printf("pub const C_RESOLVE_FLAGS: u64 = %#lx;\n", RESOLVE_FLAGS);
    printf("pub const C_FILES_BYTE: u8 = %d;\n", FILES_BYTE);
    printf("pub const C_SOCK_OPTS: [u32; 5] = [%d, %d, %d, %d, %d];\n", SOCK_OPT_REUSEADDR,
           SOCK_OPT_REUSEPORT, SOCK_OPT_V6ONLY, SOCK_OPT_DROPPED, SOCK_OPT_CONNECT);
    printf("/// (step number, what the restorer was doing), from plan.h's THAW_STEPS\n");
    printf("pub const STEPS: &[(u32, &str)] = &[\n");
    THAW_STEPS(STEP_NAME)
    printf("];\n");
    return 0;
}
