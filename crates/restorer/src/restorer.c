/*
 * thaw restorer: a tiny static program, linked at RESTORER_BASE, that runs as
 * pid 1 of a fresh sandbox, reads a restore plan from fd 3, tears down its own
 * address space except itself, rebuilds the runtime's mappings and memory, sets
 * the mm layout, drops privileges, installs the seccomp filter, reports ready,
 * recreates the runtime's other threads (each waits for the go-ahead, then
 * rt_sigreturns into its own saved state from a stub outside the rest of the
 * span) and waits for the worker's go-ahead. Then it re-registers the main
 * thread's kernel-side state, and a trampoline unmaps the restorer, lets the
 * other threads go and rt_sigreturns into the runtime with the frame the
 * worker built (registers, signal mask, XSAVE area). No
 * libc: every call is a raw syscall, so nothing of ours lingers in memory the
 * runtime uses.
 */
#include "plan.h"

#define NULL ((void *)0)

#define SYS_read 0
#define SYS_write 1
#define SYS_open 2
#define SYS_close 3
#define SYS_mmap 9
#define SYS_mprotect 10
#define SYS_munmap 11
#define SYS_pread64 17
#define SYS_mremap 25
#define SYS_madvise 28
#define MADV_POPULATE_READ 22
#define MADV_RANDOM 1
#define MADV_DONTNEED 4
#define MADV_POPULATE_WRITE 23
#define SYS_sendmsg 46
#define SYS_recvmsg 47
#define SYS_dup2 33
#define MSG_CTRUNC 8
#define SYS_exit_group 231
#define SYS_setresuid 117
#define SYS_setresgid 119
#define SYS_setgroups 116
#define SYS_prctl 157
#define SYS_clock_gettime 228
#define SYS_userfaultfd 323
#define SYS_seccomp 317
#define SYS_ioctl 16
#define SYS_arch_prctl 158
#define SYS_rt_sigreturn 15
#define SYS_set_tid_address 218
#define SYS_set_robust_list 273
#define SYS_rseq 334
#define SYS_rt_sigprocmask 14
#define SYS_rt_sigaction 13
#define SYS_rt_sigqueueinfo 129
#define SYS_rt_tgsigqueueinfo 297
#define SYS_setitimer 38
#define SYS_getpid 39
#define SYS_gettid 186
#define SYS_fcntl 72
#define SYS_dup3 292
#define SYS_lseek 8
#define SYS_pipe2 293
#define SYS_eventfd2 290
#define SYS_epoll_create1 291
#define SYS_epoll_ctl 233
#define SYS_timerfd_create 283
#define SYS_timerfd_settime 286
#define SYS_signalfd4 289
#define SYS_memfd_create 319
#define SYS_ftruncate 77
#define SYS_socket 41
#define SYS_bind 49
#define SYS_listen 50
#define SYS_setsockopt 54
#define SYS_socketpair 53
#define SYS_shutdown 48
#define SYS_connect 42
#define SYS_getsockopt 55
#define SYS_poll 7
#define SYS_openat2 437
#define F_GETFD 1
#define F_SETFL 4
#define F_SETPIPE_SZ 1031
#define F_ADD_SEALS 1033
#define AT_FDCWD -100
#define O_APPEND 02000
#define O_RDWR_ 2
#define O_PATH 010000000
#define O_DIRECTORY 0200000
#define O_NOFOLLOW 0400000
#define MFD_CLOEXEC 1U
#define MFD_ALLOW_SEALING 2U
#define SOCK_NONBLOCK 04000
#define SOCK_CLOEXEC O_CLOEXEC
#define SOL_SOCKET_ 1
#define SO_REUSEADDR 2
#define SO_REUSEPORT 15
#define SO_ERROR 4
#define EINPROGRESS 115
#define ECONNREFUSED 111
#define POLLOUT 4
#define IPPROTO_IPV6 41
#define IPV6_V6ONLY 26
#define EPOLL_CTL_ADD 1
#define TFD_IOC_SET_TICKS 0x40085400UL
/* as glibc's pthread_create: shared everything, the thread pointer set, the
 * thread id written to (and cleared at exit from) glibc's copy of it */
#define CLONE_THREAD_FLAGS 0xd0f00UL /* VM FS FILES SIGHAND THREAD SYSVSEM SETTLS */
#define CLONE_TID_FLAGS 0x300000UL    /* PARENT_SETTID CHILD_CLEARTID */
/* exit status when a thread cannot be recreated (after the ready report) */
#define EXIT_THREADS 97
#define ARCH_SET_GS 0x1001
#define ARCH_SET_FS 0x1002
#define PROT_EXEC 4

#define PROT_READ 1
#define PROT_WRITE 2
#define MAP_PRIVATE 0x02
#define MAP_SHARED 0x01
#define MAP_FIXED 0x10
#define MAP_ANONYMOUS 0x20
#define MAP_GROWSDOWN 0x100
#define MAP_NORESERVE 0x4000
#define MREMAP_MAYMOVE 1
#define MREMAP_FIXED 2
#define O_RDONLY 0
#define O_CLOEXEC 02000000
#define O_NONBLOCK 04000
#define EINTR 4
#define EINVAL 22
#define EACCES 13
#define EIO 5
#define EFAULT_ 14
#define ENOMEM_ 12
#define PR_SET_MM 35
#define PR_SET_NAME 15
#define PR_SET_MM_MAP 14
#define PR_SET_NO_NEW_PRIVS 38
#define SECCOMP_SET_MODE_FILTER 1
#define AT_SYSINFO_EHDR 33
#define TASK_SIZE 0x7ffffffff000UL
#define PAGE 4096UL

/* userfaultfd ABI (linux/userfaultfd.h) */
#define UFFD_API 0xAAUL
#define UFFDIO_API 0xc018aa3fUL
#define UFFDIO_REGISTER 0xc020aa00UL
#define UFFDIO_REGISTER_MODE_MISSING 1UL
struct uffdio_api {
    u64 api, features, ioctls;
};
struct uffdio_register {
    u64 start, len, mode, ioctls;
};

struct prctl_mm_map {
    u64 start_code, end_code, start_data, end_data, start_brk, brk, start_stack;
    u64 arg_start, arg_end, env_start, env_end;
    u64 *auxv;
    u32 auxv_size;
    u32 exe_fd;
};

struct sock_fprog {
    unsigned short len;
    void *filter;
};

struct iovec {
    void *base;
    u64 len;
};
struct msghdr {
    void *name;
    u32 namelen;
    struct iovec *iov;
    u64 iovlen;
    void *control;
    u64 controllen;
    int flags;
};
struct cmsg_fd {
    u64 len;
    int level;
    int type;
    int fd;
    int pad;
};
#define SOL_SOCKET 1
#define SCM_RIGHTS 1

struct timespec {
    long sec, nsec;
};
struct itimerspec {
    struct timespec interval, value;
};
struct open_how {
    u64 flags, mode, resolve;
};
struct epoll_event {
    u32 events;
    u64 data;
} __attribute__((packed));

static long sys6(long n, long a, long b, long c, long d, long e, long f)
{
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#define sys3(n, a, b, c) sys6(n, (long)(a), (long)(b), (long)(c), 0, 0, 0)

#define STR_(x) #x
#define STR(x) STR_(x)
/* The resume trampoline, copied to TRAMP_ADDR (position independent).
 * thaw_tramp_start: in: rdi, rsi = the range to unmap (the span but the
 * trampoline), rdx = the frame's ucontext. Once the rest of the span is
 * gone it sets the go-ahead word and wakes the threads waiting on it (with
 * no other thread running, the unmap needs no other CPU's TLB flushed).
 * The kernel reads the frame at rt_sigreturn, after the restorer is gone;
 * nothing returns here. Should the unmap fail, exit 98.
 * thaw_tramp_clone(flags, stack, ptid, ctid, tls, const struct plan_thread *):
 * clone; the parent returns the new tid (or -errno). The child, on the
 * frame at `stack`, waits for the go-ahead word, registers its robust list
 * and rseq area, sets its gs base and rt_sigreturns: it never runs
 * restorer code outside this page and reads nothing but its registers, its
 * frame, the go-ahead word and this page's hold word (PLAN_HOLD_THREADS),
 * so the parent need not wait for it. Offsets into struct plan_thread are
 * checked below. */
__asm__(".globl thaw_tramp_start\n"
        "thaw_tramp_start:\n"
        "  mov $11, %eax\n" /* munmap */
        "  syscall\n"
        "  test %rax, %rax\n"
        "  jnz 1f\n"
        "  mov %rdx, %rsp\n"
        "  lea thaw_tramp_start+" STR(TRAMP_GO_OFF) "(%rip), %rdi\n"
        "  movl $1, (%rdi)\n"
        "  mov $129, %esi\n" /* FUTEX_WAKE | FUTEX_PRIVATE_FLAG */
        "  mov $0x7fffffff, %edx\n"
        "  mov $202, %eax\n" /* futex */
        "  syscall\n"
        "  mov $15, %eax\n" /* rt_sigreturn */
        "  syscall\n"
        "1:\n"
        "  mov $98, %edi\n"
        "  mov $231, %eax\n" /* exit_group */
        "  syscall\n"
        "  hlt\n"
        ".globl thaw_tramp_clone\n"
        "thaw_tramp_clone:\n"
        "  push %rbx\n"
        "  push %r12\n"
        "  push %r13\n"
        "  push %r14\n"
        "  push %r15\n"
        "  mov 32(%r9), %r12\n"   /* robust_head */
        "  mov 40(%r9), %r13\n"   /* robust_len */
        "  mov 48(%r9), %r14\n"   /* rseq_addr */
        "  mov 56(%r9), %r15\n"   /* rseq_len | rseq_sig << 32 */
        "  mov 16(%r9), %rbx\n"   /* gs_base */
        "  mov %rcx, %r10\n"
        "  mov $56, %eax\n" /* clone */
        "  syscall\n"
        "  test %rax, %rax\n"
        "  jz 2f\n"
        "  pop %r15\n"
        "  pop %r14\n"
        "  pop %r13\n"
        "  pop %r12\n"
        "  pop %rbx\n"
        "  ret\n"
        "2:\n"
        "  lea thaw_tramp_start+" STR(TRAMP_GO_OFF) "(%rip), %rdi\n"
        "7:\n"
        "  cmpl $0, (%rdi)\n"
        "  jnz 8f\n"
        "  mov $128, %esi\n" /* FUTEX_WAIT | FUTEX_PRIVATE_FLAG, for 0 */
        "  xor %edx, %edx\n"
        "  xor %r10d, %r10d\n"
        "  mov $202, %eax\n" /* futex */
        "  syscall\n"
        "  jmp 7b\n"
        "8:\n"
        "  test %r12, %r12\n"
        "  jz 3f\n"
        "  mov %r12, %rdi\n"
        "  mov %r13, %rsi\n"
        "  mov $273, %eax\n" /* set_robust_list */
        "  syscall\n"
        "3:\n"
        "  test %r14, %r14\n"
        "  jz 4f\n"
        "  mov %r14, %rdi\n"
        "  mov %r15d, %esi\n"
        "  xor %edx, %edx\n"
        "  mov %r15, %r10\n"
        "  shr $32, %r10\n"
        "  mov $334, %eax\n" /* rseq */
        "  syscall\n"
        "4:\n"
        "  test %rbx, %rbx\n"
        "  jz 5f\n"
        "  mov $0x1001, %edi\n" /* ARCH_SET_GS */
        "  mov %rbx, %rsi\n"
        "  mov $158, %eax\n" /* arch_prctl */
        "  syscall\n"
        "5:\n"
        "  cmpl $0, thaw_tramp_hold(%rip)\n"
        "  jz 6f\n"
        "  lea thaw_tramp_noset(%rip), %rdi\n" /* PLAN_HOLD_THREADS: wait for */
        "  xor %esi, %esi\n"                   /* no signal, no timeout */
        "  xor %edx, %edx\n"
        "  mov $8, %r10d\n"
        "  mov $128, %eax\n" /* rt_sigtimedwait */
        "  syscall\n"
        "6:\n"
        "  mov $15, %eax\n" /* rt_sigreturn */
        "  syscall\n"
        "  hlt\n"
        "  .balign 8\n"
        ".globl thaw_tramp_hold\n"
        "thaw_tramp_hold:\n" /* set in the copy, before it turns read-only */
        "  .long 0, 0\n"
        "thaw_tramp_noset:\n" /* an empty signal set */
        "  .quad 0\n"
        ".globl thaw_tramp_end\n"
        "thaw_tramp_end:\n");
_Static_assert(__builtin_offsetof(struct plan_thread, gs_base) == 16, "clone stub offsets");
_Static_assert(__builtin_offsetof(struct plan_thread, robust_head) == 32, "clone stub offsets");
_Static_assert(__builtin_offsetof(struct plan_thread, robust_len) == 40, "clone stub offsets");
_Static_assert(__builtin_offsetof(struct plan_thread, rseq_addr) == 48, "clone stub offsets");
_Static_assert(__builtin_offsetof(struct plan_thread, rseq_len) == 56, "clone stub offsets");
_Static_assert(__builtin_offsetof(struct plan_thread, rseq_sig) == 60, "clone stub offsets");
extern char thaw_tramp_start[], thaw_tramp_clone[], thaw_tramp_hold[], thaw_tramp_end[];
typedef long (*tramp_clone_fn)(u64 flags, u64 stack, u64 ptid, u64 ctid, u64 tls,
                               const struct plan_thread *t);

/* The compiler may emit calls to these for struct copies. String
 * instructions: the frames (a few KiB per thread with AVX-512) copy at
 * many bytes a cycle instead of one. */
void *memset(void *d, int c, unsigned long n)
{
    void *p = d;
    __asm__ volatile("rep stosb" : "+D"(p), "+c"(n) : "a"(c) : "memory");
    return d;
}
void *memcpy(void *d, const void *s, unsigned long n)
{
    void *p = d;
    __asm__ volatile("rep movsb" : "+D"(p), "+S"(s), "+c"(n) : : "memory");
    return d;
}

static u64 now_ns(void)
{
    struct timespec ts;
    sys3(SYS_clock_gettime, 1 /* CLOCK_MONOTONIC */, &ts, 0);
    return (u64)ts.sec * 1000000000UL + (u64)ts.nsec;
}

static struct restorer_status status;

static void report(void)
{
    const char *p = (const char *)&status;
    u64 left = sizeof(status);
    while (left) {
        long n = sys3(SYS_write, 3, p, left);
        if (n == -EINTR)
            continue;
        if (n <= 0)
            break;
        p += n;
        left -= (u64)n;
    }
}

static void fail(u32 step, long err, u32 detail)
{
    status.magic = THAW_PLAN_MAGIC;
    status.ok = 0;
    status.err = (i32)(err < 0 ? -err : err);
    status.step = step;
    status.detail = detail;
    report();
    sys3(SYS_exit_group, 100 + step, 0, 0);
    for (;;)
        ;
}

static long read_full(int fd, void *buf, u64 len, u64 off, int positional)
{
    char *p = buf;
    while (len) {
        long n = positional ? sys6(SYS_pread64, fd, (long)p, (long)len, (long)off, 0, 0)
                            : sys3(SYS_read, fd, p, len);
        if (n == -EINTR)
            continue;
        if (n < 0)
            return n;
        if (n == 0)
            return -EIO;
        p += n;
        len -= (u64)n;
        off += (u64)n;
    }
    return 0;
}

/* madvise(MADV_POPULATE_*), timed into status.populate_ns */
static long populate(u64 addr, u64 len, int advice)
{
    u64 t = now_ns();
    long r = sys3(SYS_madvise, addr, len, advice);
    status.populate_ns += now_ns() - t;
    return r;
}

static int inside(u64 a, u64 b, u64 lo, u64 hi) { return a >= lo && b <= hi && a <= b; }

/* Whether the runs of a mapping map the image over all of it, one after
 * the other (populate runs aside): then nothing needs to go underneath,
 * neither anonymous memory (V8 keeps many 256 KiB pages whole in a
 * snapshot) nor the file of a mapping whose every page was modified (a
 * library's relocated data). Each run is checked against its mapping after. */
static int mapped_whole(const struct plan_vma *v, const struct plan_run *runs)
{
    u64 at = v->start;
    for (u32 k = 0; k < v->n_runs; k++) {
        const struct plan_run *run = &runs[v->first_run + k];
        if (run->fill == FILL_POPULATE_WRITE)
            continue;
        if ((run->fill != FILL_MAP && run->fill != FILL_MAP_POPULATE &&
             run->fill != FILL_MAP_RANDOM) ||
            run->addr != at || run->len > v->end - at)
            return 0;
        at += run->len;
    }
    return at == v->end;
}

static void unmap_range(u64 lo, u64 hi)
{
    if (hi > lo) {
        long r = sys3(SYS_munmap, lo, hi - lo, 0);
        if (r < 0)
            fail(STEP_UNMAP, r, 0);
    }
}

/* Move the kernel-given [vvar .. vdso] block so [vdso] sits where the runtime
 * had it: glibc caches pointers into the vDSO. mremap moves one mapping at a
 * time, and old and new places may overlap, so each piece goes through a
 * scratch address just above our span. */
static void place_vdso(const struct plan_header *h, u64 my_block)
{
    if (my_block == h->vdso_block_start)
        return;
    u64 tmp = RESTORER_BASE + RESTORER_SPAN;
    for (int pass = 0; pass < 2; pass++) {
        u64 from = pass ? tmp : my_block, to = pass ? h->vdso_block_start : tmp;
        for (u32 i = 0; i < h->n_vdso_pieces; i++) {
            u64 off = h->vdso_pieces[i][0], len = h->vdso_pieces[i][1];
            long r = sys6(SYS_mremap, from + off, len, len, MREMAP_MAYMOVE | MREMAP_FIXED,
                          to + off, 0);
            if (r < 0)
                fail(STEP_VDSO, r, pass * 10 + i);
        }
    }
}

/* The plan's length arrives with the image descriptors attached (SCM_RIGHTS):
 * the restorer may have been started before the restore was asked for (a
 * pooled sandbox), so they cannot be inherited. They go to PLAN_FD_BASE + i.
 * The kernel hands them out lowest-first above fd 3, so fd[i] >= base + i and
 * no dup2 overwrites a descriptor still to be moved. */
struct cmsg_fds {
    u64 len;
    int level;
    int type;
    int fd[MAX_PLAN_FDS];
    int pad;
};

static void recv_plan_len(u64 *len)
{
    struct iovec iov = {len, sizeof(*len)};
    struct cmsg_fds c;
    memset(&c, 0, sizeof(c));
    struct msghdr m = {NULL, 0, &iov, 1, &c, sizeof(c), 0};
    long n;
    do
        n = sys3(SYS_recvmsg, 3, &m, 0);
    while (n == -EINTR);
    if (n <= 0)
        fail(STEP_READ_PLAN, n < 0 ? n : EIO, 0);
    if (m.flags & MSG_CTRUNC)
        fail(STEP_READ_PLAN, EINVAL, 3);
    if (m.controllen >= 16 && c.level == SOL_SOCKET && c.type == SCM_RIGHTS) {
        u64 nfd = (c.len - 16) / sizeof(int);
        for (u64 i = 0; i < nfd && i < MAX_PLAN_FDS; i++) {
            if (c.fd[i] == PLAN_FD_BASE + (int)i)
                continue;
            long r = sys3(SYS_dup2, c.fd[i], PLAN_FD_BASE + (int)i, 0);
            if (r < 0)
                fail(STEP_READ_PLAN, r, 4);
            sys3(SYS_close, c.fd[i], 0, 0);
        }
    }
    if (n < (long)sizeof(*len)) {
        long r = read_full(3, (char *)len + n, sizeof(*len) - (u64)n, 0, 0);
        if (r < 0)
            fail(STEP_READ_PLAN, r, 0);
    }
}

static int send_fd(int sock, int fd)
{
    char byte = 'U';
    struct iovec iov = {&byte, 1};
    struct cmsg_fd c = {sizeof(u64) + 2 * sizeof(int) + sizeof(int), SOL_SOCKET, SCM_RIGHTS, fd, 0};
    struct msghdr m = {NULL, 0, &iov, 1, &c, sizeof(c), 0};
    long r;
    do
        r = sys3(SYS_sendmsg, sock, &m, 0);
    while (r == -EINTR);
    return (int)r;
}

/* Recreates threads[1..] as glibc's pthread_create would (the new tids
 * written to glibc's copies), between the ready report and the go-ahead,
 * so the clones overlap the worker's turn (reading the report, starting
 * its page server). Each new thread waits on the go-ahead word in the
 * trampoline page, which stays; the main thread sets it once it has the
 * go-ahead and goes on without waiting for them to run: each is then a
 * runnable thread whose first instructions put it back where it was, as
 * if the scheduler had not run it yet; waiting would cost a trip through
 * the scheduler per thread, milliseconds on a loaded machine. A checkpoint
 * lets a thread still there go on before it freezes the runtime. A
 * failure exits with EXIT_THREADS: the worker's go-ahead or its greeting
 * to the agent then goes unanswered. */
static void clone_threads(const struct plan_header *h, const struct plan_thread *threads)
{
    tramp_clone_fn clone_fn = (tramp_clone_fn)(TRAMP_ADDR + (u64)(thaw_tramp_clone - thaw_tramp_start));
    /* every signal blocked until each thread's frame sets its own mask */
    u64 all = ~0UL;
    sys6(SYS_rt_sigprocmask, 2 /* SIG_SETMASK */, (long)&all, 0, 8, 0, 0);
    for (u32 i = 1; i < h->n_threads; i++) {
        const struct plan_thread *t = &threads[i];
        u64 flags = CLONE_THREAD_FLAGS | (t->clear_tid ? CLONE_TID_FLAGS : 0);
        /* a new thread starts with its creator's name: take its name first */
        if (sys3(SYS_prctl, PR_SET_NAME, (long)t->comm, 0) < 0)
            sys3(SYS_exit_group, EXIT_THREADS, 0, 0);
        long r = clone_fn(flags, TRAMP_FRAME + t->frame_off + 8, t->clear_tid, t->clear_tid,
                          t->fs_base, t);
        if (r < 0)
            sys3(SYS_exit_group, EXIT_THREADS, 0, 0);
    }
}

/* The runtime's signal state, before any of its threads runs: every signal
 * blocked from here on (each thread's frame sets its own mask), the
 * dispositions set, the signals queued at the snapshot queued again, the
 * interval timers armed with the time they had left. A signal that arrives
 * meanwhile (an interval timer's) waits, blocked, for the runtime. */
static void restore_signals(const struct plan_header *h, const struct plan_sigaction *acts,
                            const struct plan_siginfo *infos)
{
    u64 all = ~0UL;
    long r = sys6(SYS_rt_sigprocmask, 2 /* SIG_SETMASK */, (long)&all, 0, 8, 0, 0);
    if (r < 0)
        fail(STEP_SIGNALS, r, 0);
    for (u32 i = 0; i < h->n_sigactions; i++) {
        const struct plan_sigaction *a = &acts[i];
        u64 k[4] = {a->handler, a->flags, a->restorer, a->mask}; /* struct k_sigaction */
        r = sys6(SYS_rt_sigaction, a->sig, (long)k, 0, 8, 0, 0);
        if (r < 0)
            fail(STEP_SIGNALS, r, a->sig);
    }
    long pid = sys3(SYS_getpid, 0, 0, 0), tid = sys3(SYS_gettid, 0, 0, 0);
    for (u32 i = 0; i < h->n_siginfos; i++) {
        const struct plan_siginfo *q = &infos[i];
        i32 sig = *(const i32 *)q->info;
        /* to ourselves, so the kernel takes the siginfo as it was */
        if (q->to_main)
            r = sys6(SYS_rt_tgsigqueueinfo, pid, tid, sig, (long)q->info, 0, 0);
        else
            r = sys6(SYS_rt_sigqueueinfo, pid, sig, (long)q->info, 0, 0, 0);
        if (r < 0)
            fail(STEP_SIGNALS, r, 100 + (u32)sig);
    }
    for (int which = 0; which < 3; which++) {
        u64 iv = h->itimers[which][0], val = h->itimers[which][1];
        if (!val) /* unarmed (an armed timer reads at least 1 us left) */
            continue;
        u64 t[4] = {iv / 1000000, iv % 1000000, val / 1000000, val % 1000000}; /* struct itimerval */
        r = sys3(SYS_setitimer, which, (long)t, 0);
        if (r < 0)
            fail(STEP_SIGNALS, r, 200 + (u32)which);
    }
}

/* Gives the main thread back its own kernel-side state (after the
 * go-ahead: its rseq area is the runtime's memory, lazy pages included). */
static void main_thread_state(const struct plan_thread *m)
{
    long r = sys3(SYS_prctl, PR_SET_NAME, (long)m->comm, 0);
    if (m->clear_tid)
        sys3(SYS_set_tid_address, m->clear_tid, 0, 0);
    if (r >= 0 && m->robust_head)
        r = sys3(SYS_set_robust_list, m->robust_head, m->robust_len, 0);
    if (r >= 0 && m->rseq_addr)
        r = sys6(SYS_rseq, (long)m->rseq_addr, m->rseq_len, 0, m->rseq_sig, 0, 0);
    if (r < 0)
        sys3(SYS_exit_group, EXIT_THREADS, 0, 0);
}

/* Descriptors at their temporary numbers while they are made (see make_fds),
 * and the other end of a pipe or socketpair until its second record takes it. */
static int fd_tmp[MAX_FDS], fd_other[MAX_FDS];

/* Copies a record's content from the image into `out`, through a buffer
 * (a splice would need a pipe slot per page the content touches, one more
 * than the pipe has when the content is not page-aligned). Writes never
 * block: a queue that cannot take it all fails instead of hanging. */
static char fill_buf[16 * PAGE];

static long fill_from_image(int out, u64 off, u64 left)
{
    while (left) {
        u64 n = left < sizeof(fill_buf) ? left : sizeof(fill_buf);
        long r = read_full(PLAN_FD_BASE, fill_buf, n, off, 1);
        if (r < 0)
            return r;
        for (u64 done = 0; done < n;) {
            long w = sys3(SYS_write, out, fill_buf + done, n - done);
            if (w == -EINTR)
                continue;
            if (w <= 0)
                return w < 0 ? w : -EIO;
            done += (u64)w;
        }
        off += n;
        left -= n;
    }
    return 0;
}

static long fill_fd(int out, const struct plan_fd *f)
{
    return fill_from_image(out, f->img_off, f->img_len);
}

/* Makes TCP socket `fd` (of `family`, still unconnected) a dropped
 * connection: a non-blocking connect to port 0 of its loopback, which no
 * socket can listen on, ends in a reset; once it has (`SO_ERROR` read, so no
 * error is left pending) the socket is closed both ways, as after a reset
 * from a peer. Its flags are set later (as every socket's). */
static long drop_connection(long fd, u32 family)
{
    /* sockaddr_in / sockaddr_in6, port 0, 127.0.0.1 / ::1 */
    unsigned char sa[28] = {0};
    long len;
    sa[0] = (unsigned char)family;
    if (family == 2 /* AF_INET */) {
        sa[4] = 127;
        sa[7] = 1;
        len = 16;
    } else if (family == 10 /* AF_INET6 */) {
        sa[23] = 1;
        len = 28;
    } else {
        return -EINVAL;
    }
    long r = sys3(SYS_fcntl, fd, F_SETFL, O_NONBLOCK);
    if (r >= 0)
        r = sys3(SYS_connect, fd, (long)sa, len);
    if (r != -EINPROGRESS && r != -ECONNREFUSED)
        return r < 0 ? r : -EIO;
    struct {
        int fd;
        short events, revents;
    } p = {(int)fd, POLLOUT, 0};
    do
        r = sys3(SYS_poll, (long)&p, 1, 5000);
    while (r == -EINTR);
    if (r <= 0)
        return r < 0 ? r : -EIO;
    int err = 0, elen = 4;
    r = sys6(SYS_getsockopt, fd, SOL_SOCKET_, SO_ERROR, (long)&err, (long)&elen, 0);
    if (r < 0)
        return r;
    /* ECONNREFUSED: the reset; 0 only if the synchronous connect took it */
    return err == ECONNREFUSED || err == 0 ? 0 : -EIO;
}

/* Waits for the worker's word that the sandbox's /tmp and /dev/shm are
 * restored (shared mappings and descriptors reopen files there). */
static void wait_for_files(void)
{
    long r;
    char c = 0;
    do
        r = sys3(SYS_read, 3, &c, 1);
    while (r == -EINTR);
    if (r != 1 || c != FILES_BYTE)
        fail(STEP_FD_WAIT, r < 0 ? r : EIO, 0);
}

/* Whether the plan waits for the sandbox's files (the worker's FILES_BYTE):
 * it has descriptors or shared mappings. Plan::waits_for_files in lib.rs
 * is the worker's side of the same rule. */
static int waits_for_files(const struct plan_header *h, const struct plan_vma *vmas)
{
    for (u32 i = 0; i < h->n_vmas; i++)
        if (vmas[i].flags & VMA_SHARED)
            return 1;
    return h->n_fds != 0;
}

/* The runtime's shared mappings (VMA_SHARED), as the sandbox's uid once its
 * files are back: a file of its /tmp or /dev/shm opened by path and mapped
 * shared; each shared memory object made again as a memfd of its size with
 * its content, mapped shared wherever it was. A restore makes its own, so
 * clones never see each other's writes. */
static void map_shared(const struct plan_header *h, const struct plan_vma *vmas,
                       const struct plan_shared *objs, const char *strings)
{
    static int obj_fd[MAX_SHARED];
    for (u32 k = 0; k < h->n_shared; k++) {
        const struct plan_shared *o = &objs[k];
        long fd = sys3(SYS_memfd_create, (long)(strings + o->name_off), MFD_CLOEXEC, 0);
        long r = fd;
        if (r >= 0)
            r = sys3(SYS_ftruncate, fd, (long)o->size, 0);
        if (r >= 0)
            r = fill_from_image((int)fd, o->img_off, o->img_len);
        if (r < 0)
            fail(STEP_SHARED, r, 1000000 + k);
        obj_fd[k] = (int)fd;
    }
    for (u32 i = 0; i < h->n_vmas; i++) {
        const struct plan_vma *v = &vmas[i];
        if (!(v->flags & VMA_SHARED))
            continue;
        long fd;
        if (v->path_off >= 0) {
            /* read-write where the sandbox's uid may: a mapping made
             * read-only may be made writable later (mprotect) */
            struct open_how how = {O_RDWR_ | O_CLOEXEC, 0, RESOLVE_FLAGS};
            fd = sys6(SYS_openat2, AT_FDCWD, (long)(strings + v->path_off), (long)&how,
                      sizeof(how), 0, 0);
            if (fd == -EACCES && !(v->prot & PROT_WRITE)) {
                how.flags = O_RDONLY | O_CLOEXEC;
                fd = sys6(SYS_openat2, AT_FDCWD, (long)(strings + v->path_off), (long)&how,
                          sizeof(how), 0, 0);
            }
            if (fd < 0)
                fail(STEP_SHARED, fd, i);
        } else {
            fd = obj_fd[v->shared];
        }
        long r = sys6(SYS_mmap, v->start, v->end - v->start, v->prot, MAP_SHARED | MAP_FIXED, fd,
                      (long)v->file_off);
        if (v->path_off >= 0)
            sys3(SYS_close, fd, 0, 0);
        if (r < 0)
            fail(STEP_SHARED, r, i);
    }
    for (u32 k = 0; k < h->n_shared; k++)
        sys3(SYS_close, obj_fd[k], 0, 0);
}

/* Makes one record's object at a temporary number (any free one: every
 * target number is held by then). */
static long make_fd(u32 i, const struct plan_fd *fds, const char *strings)
{
    const struct plan_fd *f = &fds[i];
    const char *path = f->path_off >= 0 ? strings + f->path_off : NULL;
    long fd, r = 0;
    int pair[2];
    if (f->kind == FD_PIPE && path) {
        /* a FIFO: each end by its path; the first record also holds a
         * read-write open (so no open blocks, and the content has a way in)
         * until every end is made */
        struct open_how how = {O_RDWR_ | O_NONBLOCK | O_CLOEXEC, 0, RESOLVE_FLAGS};
        if (f->ref < 0) {
            long anchor = sys6(SYS_openat2, AT_FDCWD, (long)path, (long)&how, sizeof(how), 0, 0);
            if (anchor < 0)
                return anchor;
            fd_other[i] = (int)anchor;
            if (f->arg != 16 * PAGE)
                r = sys3(SYS_fcntl, anchor, F_SETPIPE_SZ, f->arg);
            if (r >= 0 && f->img_len)
                r = fill_fd((int)anchor, f);
            if (r < 0)
                fail(STEP_FD_FILL, r, (u32)f->fd);
        }
        how.flags = (f->flags & 3 /* O_ACCMODE */) | O_NONBLOCK | O_CLOEXEC;
        return sys6(SYS_openat2, AT_FDCWD, (long)path, (long)&how, sizeof(how), 0, 0);
    }
    switch (f->kind) {
    case FD_FILE: {
        u64 fl = f->flags | O_CLOEXEC;
        if (fl & O_PATH)
            fl &= O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
        struct open_how how = {fl, 0, RESOLVE_FLAGS};
        if (!path)
            return -EINVAL;
        fd = sys6(SYS_openat2, AT_FDCWD, (long)path, (long)&how, sizeof(how), 0, 0);
        if (fd >= 0 && f->a && !(fl & O_PATH))
            r = sys3(SYS_lseek, fd, f->a, 0 /* SEEK_SET */);
        break;
    }
    case FD_PIPE:
    case FD_SOCKETPAIR:
        if (f->ref < 0) {
            if (f->kind == FD_PIPE)
                fd = sys3(SYS_pipe2, pair, O_CLOEXEC | O_NONBLOCK, 0);
            else
                fd = sys6(SYS_socketpair, 1 /* AF_UNIX */, f->arg2 | SOCK_CLOEXEC | SOCK_NONBLOCK,
                          0, (long)pair, 0, 0);
            if (fd < 0)
                return fd;
            if (f->kind == FD_PIPE && f->arg != 16 * PAGE)
                r = sys3(SYS_fcntl, pair[1], F_SETPIPE_SZ, f->arg);
            /* a pipe's read end is pair[0] */
            int mine = f->kind == FD_PIPE && !f->arg2 ? 1 : 0;
            fd = pair[mine];
            fd_other[i] = pair[1 - mine];
        } else {
            fd = fd_other[f->ref];
            fd_other[f->ref] = -1;
            if (fd < 0 || fds[f->ref].kind != f->kind)
                return -EINVAL;
        }
        if (r >= 0 && f->img_len) {
            /* a pipe's unread bytes go in at its write end, a socket's queue
             * at the other end of the pair */
            int into = f->ref < 0 ? fd_other[i] : fd_tmp[f->ref];
            fd_tmp[i] = (int)fd;
            r = fill_fd(into, f);
            if (r < 0)
                fail(STEP_FD_FILL, r, (u32)f->fd);
        }
        break;
    case FD_EVENTFD:
        fd = sys3(SYS_eventfd2, 0, O_CLOEXEC | (f->arg ? 1 /* EFD_SEMAPHORE */ : 0), 0);
        if (fd >= 0 && f->a)
            r = sys3(SYS_write, fd, &f->a, 8);
        break;
    case FD_EPOLL:
        fd = sys3(SYS_epoll_create1, O_CLOEXEC, 0, 0);
        break;
    case FD_TIMERFD:
        fd = sys3(SYS_timerfd_create, f->arg, O_CLOEXEC, 0);
        if (fd >= 0 && f->a) {
            /* the remaining time, from now: the restore is the new start */
            struct itimerspec t = {{(long)(f->b / 1000000000UL), (long)(f->b % 1000000000UL)},
                                   {(long)(f->a / 1000000000UL), (long)(f->a % 1000000000UL)}};
            r = sys6(SYS_timerfd_settime, fd, 0, (long)&t, 0, 0, 0);
        }
        if (fd >= 0 && r >= 0 && f->c)
            r = sys3(SYS_ioctl, fd, TFD_IOC_SET_TICKS, &f->c);
        break;
    case FD_SIGNALFD:
        fd = sys6(SYS_signalfd4, -1, (long)&f->a, 8, O_CLOEXEC, 0, 0);
        break;
    case FD_MEMFD:
        if (!path)
            return -EINVAL;
        fd = sys3(SYS_memfd_create, path, MFD_CLOEXEC | MFD_ALLOW_SEALING, 0);
        if (fd >= 0)
            r = sys3(SYS_ftruncate, fd, f->b, 0);
        if (fd >= 0 && r >= 0 && f->img_len) {
            r = fill_fd((int)fd, f);
            if (r < 0)
                fail(STEP_FD_FILL, r, (u32)f->fd);
        }
        if (fd >= 0 && r >= 0)
            r = sys3(SYS_lseek, fd, f->a, 0);
        if (fd >= 0 && r >= 0 && f->arg)
            r = sys3(SYS_fcntl, fd, F_ADD_SEALS, f->arg);
        break;
    case FD_SOCKET: {
        u32 opts = (u32)(f->a >> 8) & 0xff;
        int one = 1;
        fd = sys3(SYS_socket, f->arg, f->arg2 | SOCK_CLOEXEC, f->a & 0xff);
        if (fd >= 0 && (opts & SOCK_OPT_REUSEADDR))
            r = sys6(SYS_setsockopt, fd, SOL_SOCKET_, SO_REUSEADDR, (long)&one, 4, 0);
        if (fd >= 0 && r >= 0 && (opts & SOCK_OPT_REUSEPORT))
            r = sys6(SYS_setsockopt, fd, SOL_SOCKET_, SO_REUSEPORT, (long)&one, 4, 0);
        if (fd >= 0 && r >= 0 && (opts & SOCK_OPT_V6ONLY))
            r = sys6(SYS_setsockopt, fd, IPPROTO_IPV6, IPV6_V6ONLY, (long)&one, 4, 0);
        if (fd >= 0 && r >= 0 && path && (opts & SOCK_OPT_CONNECT))
            r = sys3(SYS_connect, fd, path, f->path_len);
        else if (fd >= 0 && r >= 0 && path)
            r = sys3(SYS_bind, fd, path, f->path_len);
        if (fd >= 0 && r >= 0 && (f->a >> 32))
            r = sys3(SYS_listen, fd, (f->a >> 32) - 1, 0);
        if (fd >= 0 && r >= 0 && (opts & SOCK_OPT_DROPPED))
            r = drop_connection(fd, f->arg);
        break;
    }
    default:
        return -EINVAL;
    }
    if (fd >= 0 && r < 0)
        fail(STEP_FD_MAKE, r, (u32)f->fd);
    return fd;
}

/* Moves whatever object of ours sits at number `t` (a temporary number or a
 * held other end) out of the way, to the lowest free number. */
static void clear_number(u32 n, int t)
{
    for (u32 k = 0; k < n; k++) {
        int *slot = fd_tmp[k] == t ? &fd_tmp[k] : fd_other[k] == t ? &fd_other[k] : NULL;
        if (!slot)
            continue;
        long r = sys3(SYS_fcntl, t, 1030 /* F_DUPFD_CLOEXEC */, 0);
        if (r < 0)
            fail(STEP_FD_PLACE, r, (u32)t);
        sys3(SYS_close, t, 0, 0);
        *slot = (int)r;
        return;
    }
}

/* Image descriptors are the worker's business, not the runtime's. Runs
 * share a few of them: each is closed once, not once per run. */
static void close_image_fds(const struct plan_header *h, const struct plan_run *runs)
{
    u64 closed = 0;
    for (u32 k = 0; k < h->n_runs; k++) {
        int fd = runs[k].img_fd;
        if (fd <= 3)
            continue;
        if (fd < 64) {
            if (closed & (1ULL << fd))
                continue;
            closed |= 1ULL << fd;
        }
        sys3(SYS_close, fd, 0, 0);
    }
}

/* Recreates the runtime's descriptors, as the sandbox's uid: each object is
 * made at whatever number is free, then, once the image descriptors are
 * closed, moved to its own (an object of ours already there moves aside
 * first); dups follow, then flags, shutdowns, and the epoll watches (keyed
 * by file and number, so only now). */
static void make_fds(const struct plan_header *h, const struct plan_fd *fds,
                     const struct plan_watch *watches, const char *strings,
                     const struct plan_run *runs)
{
    long r;
    for (u32 i = 0; i < h->n_fds; i++) {
        fd_tmp[i] = fd_other[i] = -1;
        if (fds[i].kind == FD_DUP)
            continue;
        long fd = make_fd(i, fds, strings);
        if (fd < 0)
            fail(STEP_FD_MAKE, fd, (u32)fds[i].fd);
        fd_tmp[i] = (int)fd;
    }
    close_image_fds(h, runs);
    for (u32 i = 0; i < h->n_fds; i++) {
        const struct plan_fd *f = &fds[i];
        if (f->kind != FD_DUP && fd_tmp[i] == f->fd) {
            /* made right at its number: only the close-on-exec flag to set */
            fd_tmp[i] = -1;
            r = sys3(SYS_fcntl, f->fd, 2 /* F_SETFD */, (f->flags & O_CLOEXEC) ? 1 : 0);
        } else {
            clear_number(h->n_fds, f->fd);
            int src = f->kind == FD_DUP ? fds[f->ref].fd : fd_tmp[i];
            r = sys3(SYS_dup3, src, f->fd, f->flags & O_CLOEXEC);
            if (r >= 0 && f->kind != FD_DUP) {
                sys3(SYS_close, src, 0, 0);
                fd_tmp[i] = -1;
            }
        }
        if (r >= 0 && f->kind != FD_FILE && f->kind != FD_DUP)
            r = sys3(SYS_fcntl, f->fd, F_SETFL, f->flags & (O_APPEND | O_NONBLOCK));
        if (r >= 0 && f->kind == FD_SOCKETPAIR && ((f->a >> 16) & 3))
            r = sys3(SYS_shutdown, f->fd, ((f->a >> 16) & 3) - 1, 0);
        if (r < 0)
            fail(STEP_FD_PLACE, r, (u32)f->fd);
    }
    for (u32 i = 0; i < h->n_fds; i++)
        if (fd_other[i] >= 0)
            sys3(SYS_close, fd_other[i], 0, 0);
    for (u32 k = 0; k < h->n_watches; k++) {
        const struct plan_watch *w = &watches[k];
        struct epoll_event ev = {w->events, w->data};
        r = sys6(SYS_epoll_ctl, fds[w->epoll].fd, EPOLL_CTL_ADD, w->fd, (long)&ev, 0, 0);
        if (r < 0)
            fail(STEP_FD_EPOLL, r, (u32)w->fd);
    }
}

void restorer_main(u64 *initial_sp)
{
    /* argc, argv..., NULL, envp..., NULL, auxv pairs */
    u64 *p = initial_sp;
    u64 argc = *p++;
    p += argc + 1;
    while (*p)
        p++;
    p++;
    u64 my_vdso = 0;
    for (; p[0]; p += 2)
        if (p[0] == AT_SYSINFO_EHDR)
            my_vdso = p[1];

    /* plan: u64 length, then the blob, into scratch memory inside our span */
    u64 len = 0;
    long r;
    recv_plan_len(&len);
    /* timed from the plan's arrival: a pooled restorer waited before it */
    u64 t0 = now_ns();
    if (len < sizeof(struct plan_header) || len > RESTORER_SCRATCH_MAX)
        fail(STEP_BAD_PLAN, EINVAL, 0);
    u64 maplen = (len + PAGE - 1) & ~(PAGE - 1);
    r = sys6(SYS_mmap, RESTORER_SCRATCH, maplen, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (r < 0)
        fail(STEP_READ_PLAN, r, 1);
    char *blob = (char *)RESTORER_SCRATCH;
    r = read_full(3, blob, len, 0, 0);
    if (r < 0)
        fail(STEP_READ_PLAN, r, 2);

    /* The worker built and validated the plan; these checks only keep a bad
     * one from walking us off the end of the blob. */
    struct plan_header *h = (struct plan_header *)blob;
    if (h->magic != THAW_PLAN_MAGIC || h->version != THAW_PLAN_VERSION)
        fail(STEP_BAD_PLAN, EINVAL, 1);
    if (h->n_threads == 0 || h->n_threads > MAX_THREADS)
        fail(STEP_BAD_PLAN, EINVAL, 6);
    u64 need = sizeof(*h) + (u64)h->n_vmas * sizeof(struct plan_vma) +
               (u64)h->n_runs * sizeof(struct plan_run) +
               (u64)h->n_threads * sizeof(struct plan_thread) +
               (u64)h->n_fds * sizeof(struct plan_fd) +
               (u64)h->n_watches * sizeof(struct plan_watch) +
               (u64)h->n_sigactions * sizeof(struct plan_sigaction) +
               (u64)h->n_siginfos * sizeof(struct plan_siginfo) +
               (u64)h->n_shared * sizeof(struct plan_shared) + (u64)h->auxv_words * 8 +
               (u64)h->n_filter * 8 + h->frame_len + h->strings_len;
    if (need != len)
        fail(STEP_BAD_PLAN, EINVAL, 2);
    struct plan_vma *vmas = (struct plan_vma *)(h + 1);
    struct plan_run *runs = (struct plan_run *)(vmas + h->n_vmas);
    struct plan_thread *threads = (struct plan_thread *)(runs + h->n_runs);
    struct plan_fd *fds = (struct plan_fd *)(threads + h->n_threads);
    struct plan_watch *watches = (struct plan_watch *)(fds + h->n_fds);
    struct plan_sigaction *sigactions = (struct plan_sigaction *)(watches + h->n_watches);
    struct plan_siginfo *siginfos = (struct plan_siginfo *)(sigactions + h->n_sigactions);
    struct plan_shared *shared = (struct plan_shared *)(siginfos + h->n_siginfos);
    u64 *auxv = (u64 *)(shared + h->n_shared);
    void *filter = auxv + h->auxv_words;
    char *frame = (char *)filter + (u64)h->n_filter * 8;
    char *strings = frame + h->frame_len;
    if (h->frame_len == 0 || h->frame_len > TRAMP_FRAME_MAX || h->frame_len % 8)
        fail(STEP_BAD_PLAN, EINVAL, 5);
    for (u32 i = 0; i < h->n_threads; i++)
        if (threads[i].frame_off % 8 || threads[i].frame_off >= h->frame_len ||
            (i == 0 && threads[i].frame_off != 0) || threads[i].comm[15] != 0)
            fail(STEP_BAD_PLAN, EINVAL, 7);
    if (h->strings_len == 0 || strings[h->strings_len - 1] != 0)
        fail(STEP_BAD_PLAN, EINVAL, 3);
    if (h->n_fds > MAX_FDS)
        fail(STEP_BAD_PLAN, EINVAL, 8);
    for (u32 i = 0; i < h->n_fds; i++) {
        const struct plan_fd *f = &fds[i];
        if (f->fd <= 3 || f->fd >= (i32)MAX_FD_NUMBER || f->ref >= (i32)i ||
            (f->kind == FD_DUP && f->ref < 0) ||
            (f->path_off >= 0 && (u64)f->path_off + f->path_len >= h->strings_len) ||
            (i > 0 && f->fd <= fds[i - 1].fd))
            fail(STEP_BAD_PLAN, EINVAL, 9);
    }
    for (u32 k = 0; k < h->n_watches; k++)
        if (watches[k].epoll < 0 || (u32)watches[k].epoll >= h->n_fds ||
            fds[watches[k].epoll].kind != FD_EPOLL)
            fail(STEP_BAD_PLAN, EINVAL, 11);
    if (h->n_shared > MAX_SHARED)
        fail(STEP_BAD_PLAN, EINVAL, 12);
    for (u32 k = 0; k < h->n_shared; k++)
        if (shared[k].name_off < 0 || (u32)shared[k].name_off >= h->strings_len ||
            shared[k].img_len > shared[k].size)
            fail(STEP_BAD_PLAN, EINVAL, 13);
    for (u32 i = 0; i < h->n_vmas; i++)
        if ((vmas[i].flags & VMA_SHARED) &&
            (vmas[i].n_runs || (vmas[i].path_off < 0 && vmas[i].shared >= h->n_shared) ||
             (vmas[i].path_off >= 0 && (u32)vmas[i].path_off >= h->strings_len)))
            fail(STEP_BAD_PLAN, EINVAL, 14);

    /* Everything but our span and the vDSO block goes. */
    if (h->n_vdso_pieces == 0 || h->n_vdso_pieces > MAX_VDSO_PIECES)
        fail(STEP_BAD_PLAN, EINVAL, 4);
    u64 vlen = h->vdso_pieces[h->n_vdso_pieces - 1][0] + h->vdso_pieces[h->n_vdso_pieces - 1][1];
    u64 my_block = my_vdso - h->vdso_offset;
    u64 span_lo = RESTORER_BASE, span_hi = RESTORER_BASE + RESTORER_SPAN;
    if (my_block < span_hi) {
        unmap_range(PAGE * 16, my_block < span_lo ? my_block : span_lo);
        unmap_range(my_block + vlen, span_lo);
        unmap_range(span_hi, TASK_SIZE);
    } else {
        unmap_range(PAGE * 16, span_lo);
        unmap_range(span_hi, my_block);
        unmap_range(my_block + vlen, TASK_SIZE);
    }
    place_vdso(h, my_block);

    /* Rebuild every mapping. */
    int cur_fd = -1;
    i32 cur_path = -2;
    for (u32 i = 0; i < h->n_vmas; i++) {
        struct plan_vma *v = &vmas[i];
        if (v->first_run + (u64)v->n_runs > h->n_runs || v->end <= v->start ||
            inside(v->start, v->end, span_lo, span_hi) || v->end > TASK_SIZE)
            fail(STEP_BAD_PLAN, EINVAL, 10 + i);
        if (v->flags & VMA_SHARED)
            continue; /* map_shared, once the files are there */
        int copy = 0;
        for (u32 k = 0; k < v->n_runs; k++)
            if (runs[v->first_run + k].fill == FILL_COPY)
                copy = 1;
        u32 prot = v->prot | (copy ? PROT_WRITE : 0);
        u64 vlen2 = v->end - v->start;
        if (mapped_whole(v, runs)) {
            /* the image's mappings below make all of it */
        } else if (v->flags & VMA_ANON) {
            long fl = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE;
            if (v->flags & VMA_GROWSDOWN)
                fl |= MAP_GROWSDOWN;
            r = sys6(SYS_mmap, v->start, vlen2, prot, fl, -1, 0);
        } else {
            if (v->path_off < 0 || (u32)v->path_off >= h->strings_len)
                fail(STEP_BAD_PLAN, EINVAL, 10 + i);
            if (v->path_off != cur_path) {
                if (cur_fd >= 0)
                    sys3(SYS_close, cur_fd, 0, 0);
                cur_fd = (int)sys3(SYS_open, strings + v->path_off, O_RDONLY | O_CLOEXEC, 0);
                if (cur_fd < 0)
                    fail(STEP_OPEN, cur_fd, i);
                cur_path = v->path_off;
            }
            r = sys6(SYS_mmap, v->start, vlen2, prot, MAP_PRIVATE | MAP_FIXED, cur_fd,
                     (long)v->file_off);
        }
        if (r < 0)
            fail(STEP_MMAP, r, i);
        for (u32 k = 0; k < v->n_runs; k++) {
            struct plan_run *run = &runs[v->first_run + k];
            if (!inside(run->addr, run->addr + run->len, v->start, v->end))
                fail(STEP_BAD_PLAN, EINVAL, 100000 + i);
            if (run->fill == FILL_MAP || run->fill == FILL_MAP_POPULATE ||
                run->fill == FILL_MAP_RANDOM) {
                r = sys6(SYS_mmap, run->addr, run->len, v->prot, MAP_PRIVATE | MAP_FIXED,
                         run->img_fd, (long)run->img_off);
                if (r >= 0 && run->fill == FILL_MAP_POPULATE && (v->prot & PROT_READ))
                    r = populate(run->addr, run->len, MADV_POPULATE_READ);
                if (r >= 0 && run->fill == FILL_MAP_RANDOM)
                    r = sys3(SYS_madvise, run->addr, run->len, MADV_RANDOM);
            } else if (run->fill == FILL_POPULATE_WRITE) {
                /* an optimisation only: a range the kernel refuses stays lazy */
                populate(run->addr, run->len, MADV_POPULATE_WRITE);
                r = 0;
            } else
                r = read_full(run->img_fd, (void *)run->addr, run->len, run->img_off, 1);
            if (r < 0)
                fail(STEP_FILL, r, i);
        }
        if (prot != v->prot) {
            r = sys3(SYS_mprotect, v->start, vlen2, v->prot);
            if (r < 0)
                fail(STEP_MPROTECT, r, i);
        }
        if ((v->flags & VMA_POPULATE) && (v->prot & PROT_READ)) {
            r = populate(v->start, vlen2, MADV_POPULATE_READ);
            /* a file shorter than its mapping cannot populate the tail: not fatal */
            if (r < 0 && r != -EFAULT_ && r != -ENOMEM_)
                fail(STEP_FILL, r, i);
        }
    }
    if (cur_fd >= 0)
        sys3(SYS_close, cur_fd, 0, 0);

    /* Lazy regions: one userfaultfd for all, handed to the worker's page server. */
    if (h->flags & PLAN_LAZY) {
        int uffd = (int)sys3(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK, 0, 0);
        if (uffd < 0)
            fail(STEP_UFFD, uffd, 0);
        struct uffdio_api api = {UFFD_API, 0, 0};
        r = sys3(SYS_ioctl, uffd, UFFDIO_API, &api);
        if (r < 0)
            fail(STEP_UFFD, r, 1);
        for (u32 i = 0; i < h->n_vmas; i++) {
            if (!(vmas[i].flags & VMA_LAZY))
                continue;
            struct uffdio_register reg = {vmas[i].start, vmas[i].end - vmas[i].start,
                                          UFFDIO_REGISTER_MODE_MISSING, 0};
            r = sys3(SYS_ioctl, uffd, UFFDIO_REGISTER, &reg);
            if (r < 0)
                fail(STEP_UFFD, r, 2 + i);
            /* A lazy region must be empty when the worker takes over: the
             * prefetch and the page server take an existing page (EEXIST) as
             * already installed. We never touch these regions, but anyone
             * else may have in the window between the mmap above and this
             * registration: reading /proc/PID/cmdline (ps does) faults in
             * our argv, which still points into the exec stack's top page,
             * now the runtime's stack mapping, and the read maps the zero
             * page there, so the runtime would resume with a zeroed stack
             * top. Drop whatever such readers mapped; from now on a fault
             * here goes to the userfaultfd and waits for the real page. */
            r = sys3(SYS_madvise, vmas[i].start, vmas[i].end - vmas[i].start, MADV_DONTNEED);
            if (r < 0)
                fail(STEP_UFFD, r, 2 + i);
        }
        if (send_fd(3, uffd) < 0)
            fail(STEP_SEND_UFFD, EIO, 0);
        sys3(SYS_close, uffd, 0, 0);
    }

    /* mm layout (brk, stack, args, env, auxv); exe stays the restorer's. */
    struct prctl_mm_map mm = {
        h->start_code, h->end_code, h->start_data, h->end_data, h->start_brk, h->brk,
        h->start_stack, h->arg_start, h->arg_end, h->env_start, h->env_end,
        auxv, h->auxv_words * 8, (u32)-1,
    };
    r = sys6(SYS_prctl, PR_SET_MM, PR_SET_MM_MAP, (long)&mm, sizeof(mm), 0, 0);
    if (r < 0)
        fail(STEP_MM, r, 0);

    /* The trampoline: its code, read-only and executable, then the frame. */
    r = sys6(SYS_mmap, TRAMP_ADDR, TRAMP_SIZE, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (r < 0)
        fail(STEP_TRAMPOLINE, r, 0);
    memcpy((void *)TRAMP_ADDR, thaw_tramp_start, (u64)(thaw_tramp_end - thaw_tramp_start));
    memcpy((void *)TRAMP_FRAME, frame, h->frame_len);
    if (h->flags & PLAN_HOLD_THREADS)
        *(u32 *)(TRAMP_ADDR + (u64)(thaw_tramp_hold - thaw_tramp_start)) = 1;
    r = sys3(SYS_mprotect, TRAMP_ADDR, PAGE, PROT_READ | PROT_EXEC);
    if (r < 0)
        fail(STEP_TRAMPOLINE, r, 1);
    /* thread pointers are not in a sigreturn frame; nothing here uses them */
    r = sys3(SYS_arch_prctl, ARCH_SET_FS, threads[0].fs_base, 0);
    if (r >= 0 && threads[0].gs_base)
        r = sys3(SYS_arch_prctl, ARCH_SET_GS, threads[0].gs_base, 0);
    if (r < 0)
        fail(STEP_TRAMPOLINE, r, 2);

    /* Drop root for good, then the filter (it forbids what we just used). */
    r = sys3(SYS_setgroups, 0, NULL, 0);
    if (r >= 0)
        r = sys3(SYS_setresgid, h->gid, h->gid, h->gid);
    if (r >= 0)
        r = sys3(SYS_setresuid, h->uid, h->uid, h->uid);
    if (r < 0)
        fail(STEP_CREDS, r, 0);
    /* files open with the function's own permissions, inside its root */
    if (waits_for_files(h, vmas))
        wait_for_files();
    map_shared(h, vmas, shared, strings);
    if (h->n_fds) {
        make_fds(h, fds, watches, strings, runs);
    } else {
        close_image_fds(h, runs);
    }
    restore_signals(h, sigactions, siginfos);
    r = sys6(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0);
    if (r >= 0 && h->n_filter) {
        struct sock_fprog prog = {(unsigned short)h->n_filter, filter};
        r = sys3(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
    }
    if (r < 0)
        fail(STEP_SECCOMP, r, 0);

    status.magic = THAW_PLAN_MAGIC;
    status.ok = 1;
    status.setup_ns = now_ns() - t0;
    report();
    clone_threads(h, threads);
    /* Wait for the worker's go-ahead (its page server is up); anything else,
     * or a closed socket, and we leave (the new threads with us). The
     * agent's first request follows the byte and stays for the runtime to
     * read. */
    char c = 0;
    do
        r = sys3(SYS_read, 3, &c, 1);
    while (r == -EINTR);
    if (r != 1 || c != RESUME_BYTE)
        sys3(SYS_exit_group, 99, 0, 0);
    main_thread_state(&threads[0]);
    register u64 lo __asm__("rdi") = span_lo;
    register u64 n __asm__("rsi") = TRAMP_ADDR - span_lo;
    register u64 uc __asm__("rdx") = TRAMP_FRAME + 8;
    __asm__ volatile("jmp *%3" : : "r"(lo), "r"(n), "r"(uc), "r"(TRAMP_ADDR) : "memory");
    __builtin_unreachable();
}

/* Own stack inside our span: the kernel's stack sits where the runtime's was. */
__attribute__((used)) static char stack[256 * 1024] __attribute__((aligned(16)));

__asm__(".globl _start\n"
        "_start:\n"
        "  mov %rsp, %rdi\n"
        "  lea stack+262144(%rip), %rsp\n"
        "  and $-16, %rsp\n"
        "  call restorer_main\n"
        "  hlt\n");
