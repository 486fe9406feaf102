/*
 * The restore plan: what the worker tells the restorer to build.
 * Mirrored field for field by crates/restorer/src/lib.rs (PlanHeader, PlanVma,
 * PlanRun); keep both in step and bump THAW_PLAN_VERSION on any change.
 *
 * Layout of the plan blob (all little-endian, 8-byte aligned):
 *   struct plan_header
 *   struct plan_vma   vmas[n_vmas]
 *   struct plan_run   runs[n_runs]
 *   u64               auxv[auxv_words]
 *   struct sock_filter_raw seccomp[n_filter]   (8 bytes each)
 *   char              strings[strings_len]     (NUL-terminated paths)
 */
#ifndef THAW_PLAN_H
#define THAW_PLAN_H

typedef unsigned long u64;
typedef unsigned int u32;
typedef int i32;

#define THAW_PLAN_MAGIC 0x4e414c5057414854UL /* "THAWPLAN" */
#define THAW_PLAN_VERSION 1

/* The restorer owns [RESTORER_BASE, RESTORER_BASE + RESTORER_SPAN): its image,
 * stack and scratch. Checkpoint refuses runtimes that map anything there. */
#define RESTORER_BASE 0x200000000UL
#define RESTORER_SPAN 0x1000000UL
#define RESTORER_SCRATCH (RESTORER_BASE + 0x400000UL)
#define RESTORER_SCRATCH_MAX (RESTORER_SPAN - 0x400000UL)

#define MAX_VDSO_PIECES 4

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
    u32 reserved0;
    /* prctl_mm_map fields */
    u64 start_code, end_code, start_data, end_data, start_brk, brk, start_stack;
    u64 arg_start, arg_end, env_start, env_end;
    u32 uid, gid;
    u32 flags; /* PLAN_LAZY: create a userfaultfd and send it to the worker */
    u32 reserved;
};

#define PLAN_LAZY 1

struct plan_vma {
    u64 start, end;
    u64 file_off;    /* offset in the backing file (file-backed only) */
    u32 prot;        /* PROT_* bits */
    u32 flags;       /* VMA_* */
    i32 path_off;    /* offset into strings, -1 when anonymous */
    u32 first_run;
    u32 n_runs;
    u32 reserved;
};

struct plan_run {
    u64 addr;    /* absolute address */
    u64 len;     /* bytes, page multiple */
    u64 img_off; /* offset in the image file */
    i32 img_fd;  /* descriptor the worker placed the image file at */
    u32 fill;    /* FILL_* */
};

/* Status the restorer writes to fd 3 when it is done (or fails). */
struct restorer_status {
    u64 magic;        /* THAW_PLAN_MAGIC */
    i32 ok;           /* 1 ready, 0 failed */
    i32 err;          /* errno of the failing call */
    u32 step;         /* which step failed (see STEP_*) */
    u32 detail;       /* e.g. the vma index */
    u64 syscall_insn; /* address of a `syscall` instruction the worker may use */
    u64 setup_ns;     /* CLOCK_MONOTONIC time spent on memory setup */
};

enum {
    STEP_READ_PLAN = 1,
    STEP_BAD_PLAN,
    STEP_UNMAP,
    STEP_VDSO,
    STEP_OPEN,
    STEP_MMAP,
    STEP_FILL,
    STEP_MPROTECT,
    STEP_UFFD,
    STEP_SEND_UFFD,
    STEP_MM,
    STEP_CREDS,
    STEP_SECCOMP,
};

/* Sizes the Rust encoder (lib.rs) relies on. */
_Static_assert(sizeof(struct plan_header) == 224, "plan_header layout");
_Static_assert(sizeof(struct plan_vma) == 48, "plan_vma layout");
_Static_assert(sizeof(struct plan_run) == 32, "plan_run layout");
_Static_assert(sizeof(struct restorer_status) == 40, "restorer_status layout");

#endif
