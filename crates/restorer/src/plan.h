/*
 * The restore plan: what the worker tells the restorer to build.
 * Mirrored by the #[repr(C)] structs of crates/restorer/src/lib.rs; build.rs
 * compiles src/abi.c against this header and the Rust build fails if any size
 * or field offset differs. Bump THAW_PLAN_VERSION on any change.
 *
 * Layout of the plan blob (all little-endian, 8-byte aligned):
 *   struct plan_header
 *   struct plan_vma   vmas[n_vmas]
 *   struct plan_run   runs[n_runs]
 *   struct plan_thread threads[n_threads]      (threads[0] is the main thread)
 *   struct plan_fd    fds[n_fds]               (ascending descriptor numbers)
 *   struct plan_watch watches[n_watches]       (epoll interest lists)
 *   struct plan_sigaction sigactions[n_sigactions] (dispositions to set)
 *   struct plan_siginfo siginfos[n_siginfos]   (signals to queue again, oldest first)
 *   struct plan_shared shared[n_shared]        (shared memory objects, see VMA_SHARED)
 *   u64               auxv[auxv_words]
 *   struct sock_filter_raw seccomp[n_filter]   (8 bytes each)
 *   char              frame[frame_len]         (every thread's rt_sigreturn frame, see below)
 *   char              strings[strings_len]     (NUL-terminated paths)
 */
#ifndef THAW_PLAN_H
#define THAW_PLAN_H

typedef unsigned long u64;
typedef unsigned int u32;
typedef int i32;

#define THAW_PLAN_MAGIC 0x4e414c5057414854UL /* "THAWPLAN" */
#define THAW_PLAN_VERSION 9

/* The restorer owns [RESTORER_BASE, RESTORER_BASE + RESTORER_SPAN): its image,
 * stack and scratch. Checkpoint refuses runtimes that map anything there. */
#define RESTORER_BASE 0x200000000UL
#define RESTORER_SPAN 0x1000000UL
#define RESTORER_SCRATCH (RESTORER_BASE + 0x400000UL)
#define RESTORER_SCRATCH_MAX (RESTORER_SPAN - 0x400000UL - TRAMP_SIZE)

/* The resume trampoline: the span's last TRAMP_SIZE bytes. Its first page
 * holds a copy of the code that starts the other threads, unmaps the rest of
 * the span and calls rt_sigreturn; the frames the worker built (registers,
 * signal mask, XSAVE area, one per thread) sit at TRAMP_FRAME; its last 64
 * bytes hold the go-ahead word (at TRAMP_ADDR + TRAMP_GO_OFF) the other
 * threads wait on, created before the go-ahead, and the main thread sets
 * and wakes once the rest of the span is gone. With one
 * thread the agent unmaps it when told it was restored. With several, a
 * thread may not have run its first instructions here yet when the main
 * thread resumes: it stays mapped, and a checkpoint leaves it out of the
 * snapshot once no thread is in it. */
#define TRAMP_SIZE 0x40000UL
#define TRAMP_ADDR (RESTORER_BASE + RESTORER_SPAN - TRAMP_SIZE)
#define TRAMP_FRAME (TRAMP_ADDR + 0x1000UL)
#define TRAMP_GO_OFF 0x3ffc0 /* a literal for the stub's assembly */
#define TRAMP_FRAME_MAX (TRAMP_GO_OFF - 0x1000UL)
_Static_assert(TRAMP_GO_OFF == TRAMP_SIZE - 64, "the go-ahead word is the trampoline's last 64 bytes");

#define MAX_VDSO_PIECES 4

/* Threads a plan may recreate (the main thread included); the sandbox's
 * pids limit is lower. */
#define MAX_THREADS 64

/* Descriptors sent with the plan (SCM_RIGHTS) land at PLAN_FD_BASE + i. */
#define MAX_PLAN_FDS 3
#define PLAN_FD_BASE 4

/* Descriptors a plan may recreate, and the highest number one may have. */
#define MAX_FDS 128
/* Shared memory objects a plan may make again (see VMA_SHARED). */
#define MAX_SHARED 64
#define MAX_FD_NUMBER 65536

/* What a plan_fd makes. */
#define FD_DUP 0       /* dup of fds[ref] */
#define FD_FILE 1      /* openat2 of path (RESOLVE_FLAGS), then lseek to a */
#define FD_PIPE 2      /* ref < 0: a new pipe (arg: its size), this record's end (arg2: 1 read);
                        * ref >= 0: the other end of fds[ref]'s pipe. A read end's
                        * record carries the unread bytes (img_off, img_len).
                        * With a path: a FIFO, each record an open of it by
                        * that path; the first (ref < 0) carries size and bytes */
#define FD_EVENTFD 3   /* a: count, arg: EFD_SEMAPHORE */
#define FD_EPOLL 4     /* its watches follow in the watch table */
#define FD_TIMERFD 5   /* arg: clock, a: remaining ns, b: interval ns, c: expirations */
#define FD_SIGNALFD 6  /* a: mask */
#define FD_MEMFD 7     /* path: name, a: position, b: size, arg: seals, content */
#define FD_SOCKET 8    /* arg: family, arg2: type, a: protocol | options << 8 |
                        * shutdown << 16 | (backlog + 1) << 32 (0: not listening);
                        * path (path_len bytes): the address to bind, if any */
#define FD_SOCKETPAIR 9 /* ref < 0: a new AF_UNIX pair (arg2: type), this record
                         * one end; ref >= 0: the other end of fds[ref]'s pair.
                         * Content: the bytes this end had queued to read */
/* openat2 resolve flags for FD_FILE: no symbolic link, no magic link */
#define RESOLVE_FLAGS 0x06UL /* RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS */
#define SOCK_OPT_REUSEADDR 1
#define SOCK_OPT_REUSEPORT 2
#define SOCK_OPT_V6ONLY 4
/* a TCP connection closed at the snapshot: made again as one its peer
 * refused (connected to port 0 of loopback), so reads see end of file and
 * writes EPIPE, as on the deploying instance's shut-down socket */
#define SOCK_OPT_DROPPED 8
/* a custom runtime's Runtime API connection, its `next` pending: the path
 * is an address to connect to (the worker's listener in the new sandbox),
 * not one to bind */
#define SOCK_OPT_CONNECT 16

/* How a run of image pages gets into memory. */
#define FILL_COPY 0 /* pread from the image fd into the mapping */
#define FILL_MAP 1  /* MAP_PRIVATE|MAP_FIXED mapping of the image fd */
#define FILL_MAP_POPULATE 2 /* FILL_MAP, then build its page tables (MADV_POPULATE_READ) */
#define FILL_MAP_RANDOM 3   /* FILL_MAP with readahead off (MADV_RANDOM): sparse pages on a slow tier */
#define FILL_POPULATE_WRITE 4 /* no data: copy-on-write the range now (MADV_POPULATE_WRITE); best effort */

/* vma flags */
#define VMA_ANON 1      /* anonymous private memory */
#define VMA_GROWSDOWN 2 /* the stack */
#define VMA_LAZY 4      /* register with userfaultfd (missing mode) */
#define VMA_POPULATE 8  /* build page tables for the whole mapping before resume */
/* MAP_SHARED, mapped once the sandbox's files are restored (FILES_BYTE): the
 * file at path_off (of the sandbox's /tmp or /dev/shm), or, with path_off < 0,
 * shared memory object `shared` (a memfd made from the image); no runs */
#define VMA_SHARED 16

struct plan_header {
    u64 magic;
    u32 version;
    u32 n_vmas;
    u32 n_runs;
    u32 auxv_words;
    u32 n_filter;
    u32 strings_len;
    /* runtime's [vvar .. vdso end) block: start, where [vdso] begins in it,
     * and its mappings as (offset, length) pairs (mremap moves one at a time) */
    u64 vdso_block_start;
    u64 vdso_offset;
    u64 vdso_pieces[MAX_VDSO_PIECES][2];
    u32 n_vdso_pieces;
    u32 n_threads; /* >= 1 */
    /* prctl_mm_map fields */
    u64 start_code, end_code, start_data, end_data, start_brk, brk, start_stack;
    u64 arg_start, arg_end, env_start, env_end;
    u32 uid, gid;
    u32 flags; /* PLAN_LAZY, PLAN_HOLD_THREADS */
    u32 frame_len; /* bytes of frames, copied to TRAMP_FRAME (multiple of 8) */
    u32 n_fds;
    u32 n_watches;
    u32 n_sigactions;
    u32 n_siginfos;
    /* ITIMER_REAL, _VIRTUAL, _PROF: interval and remaining time in
     * microseconds, armed again counted from the restore (0, 0: unarmed) */
    u64 itimers[3][2];
    u32 n_shared;
    u32 reserved;
};

/* create a userfaultfd and send it to the worker */
#define PLAN_LAZY 1
/* For tests only: each recreated thread (the main thread aside) waits on its
 * last instruction in the trampoline, in an rt_sigtimedwait for no signal
 * (every one is blocked there), until a ptrace stop or a fatal signal ends
 * the wait; it then goes on. A checkpoint's freeze is the one thing that
 * ends it, so that freeze finds the thread in the trampoline. */
#define PLAN_HOLD_THREADS 2

/* The worker's go-ahead after a ready status: resume the runtime. */
#define RESUME_BYTE 'G'
/* The worker's word that the sandbox's /tmp and /dev/shm are restored: a
 * plan with descriptors waits for it before it reopens any. */
#define FILES_BYTE 'F'

struct plan_vma {
    u64 start, end;
    u64 file_off;    /* offset in the backing file (file-backed only) */
    u32 prot;        /* PROT_* bits */
    u32 flags;       /* VMA_* */
    i32 path_off;    /* offset into strings, -1 when anonymous */
    u32 first_run;
    u32 n_runs;
    u32 shared;      /* VMA_SHARED without a path: index into the shared objects */
};

struct plan_run {
    u64 addr;    /* absolute address */
    u64 len;     /* bytes, page multiple */
    u64 img_off; /* offset in the image file */
    i32 img_fd;  /* descriptor the worker placed the image file at */
    u32 fill;    /* FILL_* */
};

/* One thread: where its frame is and the kernel-side state no frame
 * carries. The field offsets are used by the clone stub's assembly. */
struct plan_thread {
    u64 frame_off;   /* its rt_sigreturn frame: at TRAMP_FRAME + frame_off */
    u64 fs_base, gs_base; /* thread pointers (not in a sigreturn frame) */
    u64 clear_tid;   /* set_tid_address / CLONE_CHILD_CLEARTID|PARENT_SETTID; 0: none */
    u64 robust_head; /* set_robust_list; 0: none */
    u64 robust_len;
    u64 rseq_addr;   /* rseq registration; 0: none */
    u32 rseq_len;
    u32 rseq_sig;
    char comm[16];   /* its name (PR_SET_NAME), NUL-terminated */
};

/* One descriptor of the runtime (see FD_*). Made at a temporary number
 * inside the sandbox, as its uid, then moved to `fd`. */
struct plan_fd {
    i32 fd;         /* the runtime's number (> 3) */
    u32 kind;       /* FD_* */
    u32 flags;      /* file status flags (fdinfo's), O_CLOEXEC for the fd flag */
    i32 ref;        /* another record, per kind; -1: none */
    i32 path_off;   /* offset into strings (path, memfd name, address); -1: none */
    u32 path_len;
    u32 arg, arg2;
    u64 a, b, c;
    u64 img_off, img_len; /* content in the image (fd PLAN_FD_BASE) */
};

/* One epoll watch: fds[epoll] gets (fd, events, data) once every
 * descriptor is at its number (epoll keys watches by file and number). */
struct plan_watch {
    i32 epoll;      /* index of the FD_EPOLL record */
    i32 fd;         /* the watched descriptor's number */
    u32 events;
    u32 reserved;
    u64 data;
};

/* One signal's disposition: struct k_sigaction for rt_sigaction. Set
 * before any thread of the runtime runs, with every signal blocked. */
struct plan_sigaction {
    u64 handler, flags, restorer, mask;
    u32 sig;
    u32 reserved;
};

/* A signal that was queued at the snapshot: its siginfo_t, queued again
 * (rt_sigqueueinfo to the process, or rt_tgsigqueueinfo to the main thread
 * when to_main) while every signal is blocked, so that each is delivered
 * when the runtime's own masks allow, as it would have been. */
#define SIGINFO_BYTES 128
struct plan_siginfo {
    u32 to_main;
    u32 reserved;
    char info[SIGINFO_BYTES];
};

/* A shared memory object (a deleted file of /tmp or /dev/shm, shared
 * anonymous memory, a memfd) that VMA_SHARED mappings map: made again as a
 * memfd named name_off of `size` bytes, its first img_len bytes from the
 * image at img_off. */
struct plan_shared {
    u64 size;
    u64 img_off, img_len;
    i32 name_off;
    u32 reserved;
};

/* Status the restorer writes to fd 3 when it is done (or fails). For the
 * FD_* steps, detail is the descriptor's number. */
struct restorer_status {
    u64 magic;        /* THAW_PLAN_MAGIC */
    i32 ok;           /* 1 ready, 0 failed */
    i32 err;          /* errno of the failing call */
    u32 step;         /* which step failed (see STEP_*) */
    u32 detail;       /* e.g. the vma index */
    u64 populate_ns;  /* of setup_ns: building page tables and copying on write ahead (POPULATE) */
    u64 setup_ns;     /* CLOCK_MONOTONIC time spent on memory setup */
};

/* The restorer's steps, for its failure reports: the one table. The enum
 * below and the Rust names (RestorerStatus::step_name, generated by build.rs)
 * both come from it. */
#define THAW_STEPS(X)                                             \
    X(READ_PLAN, 1, "reading the plan")                           \
    X(BAD_PLAN, 2, "validating the plan")                         \
    X(UNMAP, 3, "unmapping its own address space")                \
    X(VDSO, 4, "moving the vDSO")                                 \
    X(OPEN, 5, "opening a runtime file")                          \
    X(MMAP, 6, "mapping a region")                                \
    X(FILL, 7, "filling a region from the image")                 \
    X(MPROTECT, 8, "setting region protection")                   \
    X(UFFD, 9, "setting up userfaultfd")                          \
    X(SEND_UFFD, 10, "sending the userfaultfd")                   \
    X(MM, 11, "setting the mm layout (PR_SET_MM_MAP)")            \
    X(CREDS, 12, "dropping privileges")                           \
    X(SECCOMP, 13, "installing the seccomp filter")               \
    X(TRAMPOLINE, 14, "preparing the resume trampoline")         \
    X(THREADS, 15, "recreating the threads")                      \
    X(FD_WAIT, 16, "waiting for the sandbox's files")             \
    X(FD_MAKE, 17, "recreating a descriptor")                     \
    X(FD_FILL, 18, "refilling a descriptor's content")            \
    X(FD_PLACE, 19, "moving a descriptor to its number")          \
    X(FD_EPOLL, 20, "adding an epoll watch")                      \
    X(SIGNALS, 21, "setting the signal state")                    \
    X(SHARED, 22, "mapping a shared mapping")

#define THAW_STEP_ENUM(name, n, text) STEP_##name = n,
enum { THAW_STEPS(THAW_STEP_ENUM) };

/* The Rust side checks every offset too (build.rs, src/abi.c). */
_Static_assert(sizeof(struct plan_header) == 296, "plan_header layout");
_Static_assert(sizeof(struct plan_shared) == 32, "plan_shared layout");
_Static_assert(sizeof(struct plan_sigaction) == 40, "plan_sigaction layout");
_Static_assert(sizeof(struct plan_siginfo) == 136, "plan_siginfo layout");
_Static_assert(sizeof(struct plan_fd) == 72, "plan_fd layout");
_Static_assert(sizeof(struct plan_watch) == 24, "plan_watch layout");
_Static_assert(sizeof(struct plan_thread) == 80, "plan_thread layout");
_Static_assert(sizeof(struct plan_vma) == 48, "plan_vma layout");
_Static_assert(sizeof(struct plan_run) == 32, "plan_run layout");
_Static_assert(sizeof(struct restorer_status) == 40, "restorer_status layout");

#endif
