/* cuda_base.h -- the CUDA backend's ground floor (internal): its state (cuda_backend) and the
 * helpers every floor above uses: errors, the current device, memory accounting and the budget,
 * profiling, the scratch area, parameter uploads, the caching allocator.
 *
 * Every op runs on one CUDA stream owned by the backend, so buffers released by the executor can
 * be handed out again at once (stream order keeps them safe).
 *
 * Files (base/): cuda_context.c (errors, device, accounting, scratch), cuda_profile.c (GPU time
 * per category and op), cuda_params.c (parameters to the device), cuda_alloc.c (the caching
 * allocator); the host side's pinned memory, stage and bus are in cuda_host.h.
 */
#ifndef VAE_CUDA_BASE_H
#define VAE_CUDA_BASE_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "core/backend.h"
#include "core/core.h"
#include "formats/linecache.h"

/* ---- caching allocator (cuda_alloc.c) ---- */
typedef struct cu_bin {
    size_t size;
    void **v;
    int n, cap;
} cu_bin;

typedef struct cu_slot {
    void *p;
    size_t size;
} cu_slot;

typedef struct cu_pool {
    cu_bin *bins;
    int n_bins, cap_bins;
    cu_slot *map; /* live blocks: open addressing on the pointer */
    size_t map_cap, map_used, map_live;
    size_t cached_bytes;   /* in free lists */
    size_t reserved_bytes; /* cudaMalloc'd through the pool (live + cached) */
    size_t live_peak;      /* the most live bytes so far (a host allocator's bound on reserved) */
    cudaStream_t stream;   /* synchronised before cached blocks are really freed */
    int graphs;            /* live work graphs: cached blocks are never freed then */
    vae_dev_allocator al;  /* the host's allocator (al.alloc NULL: cudaMalloc) */
    int device;
    double *malloc_s; /* where the time of the device allocations is added (cold-start log) */
} cu_pool;

/* Every device block of the backend comes from and goes back through these two: the host's
 * allocator (vae_session_options.dev_alloc) when it gave one, else cudaMalloc / cudaFree. */
cudaError_t cu_dev_malloc(const cu_pool *pool, void **p, size_t bytes);
void cu_dev_free(const cu_pool *pool, void *p, size_t bytes);

size_t cu_pool_round(size_t bytes);
/* NULL on failure (*err says why). */
void *cu_pool_alloc(cu_pool *pool, size_t bytes, size_t *got, cudaError_t *err);
/* Returns the block's size, 0 if p is not a live block of this pool. */
size_t cu_pool_free(cu_pool *pool, void *p);
/* cudaFree's every cached (free) block (none while pool->graphs > 0). */
void cu_pool_trim(cu_pool *pool);
void cu_pool_destroy(cu_pool *pool);

/* ---- the backend ---- */
/* VAE_CUDA_PROFILE=1: GPU time per category (CUDA events around every launch), logged at INFO
 * level when the backend is destroyed. */
enum {
    CU_P_CONV_DNN,
    CU_P_CONV_GEMM,
    CU_P_GATHER,
    CU_P_BIAS,
    CU_P_RMS,
    CU_P_GN,
    CU_P_ELT,
    CU_P_RESAMPLE,
    CU_P_ATT,
    CU_P_COPY,
    CU_P_UPLOAD,
    CU_P_DOWNLOAD,
    CU_P_NARROW,
    CU_P_IGEMM,
    CU_P_BUS,  /* copy2d to or from host memory (host stores, strips' slots) */
    CU_P_HALO, /* the halo-tile conv kernel (PATH_HALO: the 96-filter 3x3 convs) */
    CU_P_N
};

typedef struct cu_table {
    int key[10]; /* kind, c_in, c_out, ft, fs, cs_o, cs_t, cs_h, cs_w, group */
    int *dev;
    size_t bytes;
    int contig_align; /* shuffle-up: see cuk_shuffle_up */
} cu_table;

enum { CU_CONV_AUTO = 0, CU_CONV_GEMM = 1, CU_CONV_CUDNN = 2 };

/* a block of pinned host memory (cuda_pinned.c) */
typedef struct cu_pin {
    void *p;
    size_t bytes;
    int mapped; /* mmap + cudaHostRegister (else cudaHostAlloc) */
} cu_pin;

/* pinned host buffer for asynchronous transfers; ev marks the end of its last copy */
typedef struct cu_host_buf {
    cu_pin pin;
    cudaEvent_t ev;
    int pending;
} cu_host_buf;

/* The model's parameters staged at session creation (cuda_stage.c): converted into pinned host
 * memory once, so that a first use copies them to the device as they are. An item is keyed by
 * its host array (the op's w or b), what was made of it (tag) and its dtype and length. */
enum {
    CU_STAGE_RAW = 0,   /* the array as it is, converted to dt */
    CU_STAGE_BIAS = 1,  /* a conv's bias padded to its kp filters with zeros */
    CU_STAGE_PHASE = 2, /* an upsampling conv's four phase filters (cuda_conv_phase.c) */
    CU_STAGE_FP8 = 3,   /* an E4M3 conv's weight scales (fp8.h vae_fp8_weight_scales) */
    CU_STAGE_W8 = 4     /* its filters' E4M3 codes, channels last (fp8.h vae_fp8_weights_codes) */
};
enum { CU_STAGE_BLOCKS = 4 }; /* programs staged at once */
typedef struct cu_stage_item {
    const void *key;
    int tag, block, ready;
    vae_dtype dt;
    size_t n, off; /* values, and their byte offset in the block */
} cu_stage_item;
typedef struct cu_stage {
    cu_pin block[CU_STAGE_BLOCKS];    /* one per staged program */
    size_t reserved[CU_STAGE_BLOCKS]; /* its share of the process's cap (cuda_stage.c) */
    int n_blocks;
    cu_stage_item *items;
    int n, cap;
    int first;   /* the items of the program being staged start here */
    size_t want; /* its bytes so far (counting pass) */
    int filling; /* 0: counting pass, 1: writing into the newest block */
} cu_stage;

/* The conv path choices on disk (cuda_tune_cache.c). */
typedef struct cu_tune_cache {
    char file[1024];   /* "" : none */
    vae_linecache lc;  /* this device's choices, from the file and from this process */
    int loaded;
} cu_tune_cache;

/* one-off host work a cold first call pays, timed for the log (cuda_backend.host_s) */
enum {
    CU_H_MALLOC,     /* device allocations (cudaMalloc or the host's allocator) */
    CU_H_PINNED,     /* pinned host buffers (cudaHostAlloc) */
    CU_H_DNN_HANDLE, /* cudnnCreate */
    CU_H_DNN_PLAN,   /* cuDNN descriptors and algorithm choice per shape, first launch included */
    CU_H_DNN_FIRST,  /* of which the first launch of each plan (loads its kernels) */
    CU_H_GRAPH,      /* graph capture end + instantiation */
    CU_H_PREPARE,    /* per-op state at executor creation (weights, scales, descriptors) */
    CU_H_WEIGHTS,    /* of which and later: parameters converted and copied to the device */
    CU_H_IGEMM,      /* host time of the CUTLASS launches (the first ones load their modules) */
    CU_H_WARM,       /* at session creation (warm): cuBLAS's and cuDNN's warm-ups, the staging */
    CU_H_N
};

/* cuda_bus.c: the bus stream and its ring of device blocks (copies into pinned host memory
 * staged there, host ranges prefetched there) */
enum { CU_BUS_BLOCKS = 512 };
#define CU_BUS_RING ((size_t)32 << 20)
/* cuda_io_stage.c: the user's frames staged on the device as planar float32 (an input chunk; a
 * step's output chunk in pieces), copied to and from the host on a stream of their own */
typedef struct cu_io_buf {
    char *p; /* cap bytes, part of bytes_in_use, or NULL */
    size_t cap;
} cu_io_buf;
typedef struct cu_io_stage {
    cudaStream_t stream;    /* the copies to and from the host */
    cudaEvent_t out_ready;  /* compute stream: the output chunk converted into `out` */
    cudaEvent_t out_copied; /* copy stream: the last copy out of `out` */
    cudaEvent_t in_copied;  /* copy stream: the last copy into `in` */
    cudaEvent_t in_used;    /* compute stream: `in` converted into the input buffer */
    cu_io_buf in, out;
    int n, t, piece;    /* the staged output chunk: n pieces of `piece` frames (the last: the
                         * rest of t); n = 0: none */
    size_t frame;       /* its float32 bytes a frame */
    int never;          /* settings.cuda_bus = 0, or the stream could not be made */
} cu_io_stage;

/* host_alloc blocks at once: A's and B's stores (pinned, or their files' staging rings), strips'
 * slots, one spare */
enum { CU_PINNED_BLOCKS = 4 };
struct cu_bus_block {
    size_t off, bytes;  /* in the ring */
    const char *host;   /* a prefetch: the host range it holds; NULL: staging of a copy out, or
                         * a prefetch forgotten (written since) */
    const char *out_lo, *out_hi; /* a copy out: the host bytes it writes (NULL: a prefetch) */
    cudaEvent_t done;   /* recorded on the bus stream after the block's copy */
};
typedef struct cu_bus {
    cudaStream_t stream; /* NULL until first used */
    cudaStream_t ahead;  /* settings.cuda_bus = 2: the prefetches' stream (else NULL: `stream`) */
    int two;             /* settings.cuda_bus = 2 */
    int off;             /* settings.cuda_bus = 0, or it could not start: copies as before */
    char *ring;          /* ring_bytes of device memory */
    size_t ring_bytes;   /* CU_BUS_RING, or the larger ring a plan counted (host_copy_ring) */
    size_t head;         /* where the next block goes */
    struct cu_bus_block blk[CU_BUS_BLOCKS]; /* a FIFO, oldest first */
    int first, count;
    cudaEvent_t mark;    /* the compute stream's position, for the bus stream to wait on */
    cudaEvent_t last;    /* the bus stream's last copy */
    cudaEvent_t last_ahead; /* the prefetch stream's last copy (two streams) */
    int pending;         /* copies on the bus since the host last waited for it */
    int unwaited;        /* ... since the compute stream last waited for it */
    long long n_out, n_ahead, n_hit, n_direct; /* copies out, prefetches, reads from them,
                                                * host copies the bus did not take */
    long long bytes_out, bytes_ahead, bytes_direct; /* the bytes of those copies */
} cu_bus;

typedef struct cuda_backend {
    vae_backend base;
    int device;
    int sm_count;
    char device_name[256];
    cudaStream_t stream;
    cublasHandle_t cublas;
    cu_pool pool;
    /* one reusable scratch area (gathers, im2col, padded 3-D windows, phase-conv planes, upload
     * staging) and the cuDNN workspace; both grow, never shrink. bytes_in_use counts the
     * executor's buffers only (it returns to 0 when all are released); bytes_peak also counts
     * scratch, workspace and the weights on the device, so that it is all the device memory the
     * backend held at its worst moment (what PyTorch's max_memory_allocated counts for a model). */
    void *scratch;
    size_t scratch_bytes;
    void *ws;
    size_t ws_bytes;
    size_t scratch_limit; /* blocking target for what uses the scratch area (bytes) */
    int scratch_capped;   /* the run must do with scratch_bytes (scratch_reserve, capped) */
    struct cu_block { void *p; size_t bytes; } *retired; /* scratch / workspace buffers
                                                           * outgrown while graphs were alive */
    int n_retired;
    size_t retired_bytes;
    /* switches from the session's settings (core/settings.h, VAE_CUDA_*) */
    int conv_mode;        /* CU_CONV_*: VAE_CUDA_CONV=auto|gemm|cudnn */
    int conv3d;           /* 3-D cuDNN convs over contiguous windows (VAE_CUDA_CONV3D, default 1) */
    int fuse;             /* bias/residual in cuDNN's epilogue, 16-bit only (VAE_CUDA_FUSE) */
    int tune;             /* time 3-D vs per-block convs per shape (VAE_CUDA_TUNE, default 1) */
    int recording;        /* a graph is being recorded (stream capture): no timing, no frees */
    int tuning;           /* candidate paths are being timed: their cuDNN plans are not kept in
                           * the tune cache for the next process's warm-up */
    int poison;           /* VAE_CUDA_POISON=1: new blocks filled with NaN (cu_poison) */
    uint64_t tune_seed;   /* VAE_CUDA_TUNE=seed:N: paths by hash instead of timing (0: off) */
    int tune_reps;        /* the two fastest paths' rounds after the first (VAE_CUDA_TUNE_REPS) */
    int pw_dnn;           /* 1x1 convs through cuDNN with the fused epilogue (VAE_CUDA_PW=gemm: off) */
    int phase;            /* nearest x2 + 3x3 conv as four 2x2 phase convs (VAE_CUDA_PHASE) */
    int narrow;           /* narrow heads, small 1x1 convs on own kernels (VAE_CUDA_NARROW) */
    int att_gemm;         /* large 16-bit attention on cuBLAS (VAE_CUDA_ATT) */
    int igemm;            /* implicit-GEMM convs: 0 off (or no kernels for this device), 1 a
                           * tuned candidate, 2 wherever they apply (VAE_CUDA_IGEMM) */
    int mma;              /* ... and the fp8 convs: the mma.sync kernels (cuda_mma_conv.cu), not
                           * the sm_90a ones (CUTLASS's, the halo tile's): a device not Hopper,
                           * or VAE_CUDA_MMA=1 */
    int halo;             /* the halo-tile kernel for 96-filter 3x3 convs: 0 off (or igemm off), 1
                           * a tuned candidate, 2 wherever it applies (VAE_CUDA_HALO) */
    int dnn_gain_us;      /* a cuDNN path is chosen where it saves more than this a call over the
                           * fastest own sm_90a kernel (VAE_CUDA_DNN_GAIN_US; cu_tune_own_wins) */
    int fp8;              /* dtype fp8: bf16 activations, E4M3 convs where the FP8 kernels apply */
    int64_t n_conv_fp8;   /* convs run by the FP8 kernels */
    int64_t n_conv_fp8_halo; /* ... of them by the E4M3 halo-tile kernel */
    int64_t n_conv_fp8_mma;  /* ... of them by the mma.sync kernel (cuda_mma_conv.cu) */
    int64_t n_conv_mma;      /* 16-bit implicit-GEMM convs by the mma.sync kernel */
    int pad3d, cpad, kpad; /* channel-padded 3-D windows, 2-D gathers, filters (VAE_CUDA_*PAD*) */
    cudaEvent_t tune_ev[2];
    cudaEvent_t mark_ev;  /* vtbl mark: the last mark in the stream (made on first use) */
    void *dnn;            /* cudnn state (cudnn_conv.c), created on first use */
    int dnn_failed;       /* cuDNN could not be initialised: GEMM path only */
    struct cu_table *tables; /* shuffle index tables, keyed by the op's shuffle parameters */
    int n_tables, cap_tables;
    int64_t weight_bytes; /* prepared weights and tables (not in bytes_in_use) */
    int64_t weight_reserve; /* the weights' share of the plan's memory (cuda_mem_info): under a
                             * budget, the tuner makes no weight layout beyond it */
    int64_t peak_parts[4];             /* bytes_peak as weights, activations, scratch, workspace */
    int64_t n_conv_cudnn, n_conv_gemm; /* conv blocks run by each path (diagnostics) */
    int64_t n_conv_3d, n_conv_fused;   /* of the cuDNN blocks: 3-D ones, fused-epilogue ones */
    int64_t n_conv_igemm;              /* convs run by the CUTLASS implicit-GEMM kernels */
    int64_t n_conv_halo;               /* convs run by the halo-tile kernel */
    int64_t n_conv_normed;             /* of those, convs whose RMS norm it applied too */
    int64_t n_conv_halo_up2;           /* upsampling convs run by it (the phase mode) */
    int64_t n_conv_stem;               /* convs run by the stem kernel (cuda_stem_conv.cu) */
    int64_t n_graph_launches;          /* recorded steps replayed (executor work graphs) */
    int64_t n_dnn_warmed;              /* cuDNN plans made by the warm-up (cu_dnn_warm_seen) */
    int64_t n_staged_uploads;          /* parameters copied from the stage (cuda_stage.c) */
    cu_host_buf hin[2], hout[2];       /* stage_in / download_planar buffers, used in turn */
    cu_host_buf wring[2];              /* parameters on their way to the device, in turn */
    cu_stage stage;                    /* parameters staged at session creation */
    int warm;                          /* VAE_CUDA_WARM */
    int warm_att_c;                    /* the attention width cuBLAS was warmed up for */
    int hin_next, hout_next, wring_next;
    /* host time of one-off set-up work (what a cold first call pays), seconds; -v prints it */
    double host_s[CU_H_N];
    /* host_alloc: pinned blocks for host stores, strips' slots and the staging of stores in
     * files, kept between calls (pinning is slow) */
    struct cu_pinned {
        cu_pin pin;
        int used;
    } pinned[CU_PINNED_BLOCKS];
    cu_tune_cache tc;                  /* conv path choices kept between processes */
    cu_bus bus;                        /* cuda_bus.c: copies to and from host memory */
    cu_io_stage io;                    /* cuda_io_stage.c: the user's frames, host <-> device */
    int prof;                          /* VAE_CUDA_PROFILE */
    cudaEvent_t *prof_ev;              /* event pairs (begin, end) */
    int *prof_cat;
    int prof_n, prof_cap, prof_made;
    double prof_ms[CU_P_N];
    int64_t prof_calls[CU_P_N];
    /* VAE_CUDA_PROFILE=2: also GPU time per op name (the op being run, set by the entry points) */
    const char *prof_op;
    const char **prof_name; /* per event pair */
    struct cu_prof_op *prof_ops;
    int n_prof_ops, cap_prof_ops;
} cuda_backend;

static inline cuda_backend *cu_be(vae_backend *be) { return (cuda_backend *)be; }

/* seconds, for host-time accounting (host_s) */
static inline double cu_now(void) {
    return vae_seconds(); /* (timespec_get: not in Windows' msvcrt) */
}

typedef struct cu_prof_op {
    char name[96];
    int cat;
    double ms;
    int64_t calls;
} cu_prof_op;
/* Profiling by op name (VAE_CUDA_PROFILE=2): the op that the next launches belong to. */
static inline void cu_prof_name(cuda_backend *cb, const char *name) { cb->prof_op = name; }

/* Makes the backend's device current for this thread; VAE_OK or VAE_EDEVICE. */
int cu_enter(cuda_backend *cb, const char *who);
/* cudaError_t -> VAE_OK / VAE_ENOMEM / VAE_EDEVICE with "who: what: CUDA message". */
int cu_check(cudaError_t e, const char *who, const char *what);
int cu_blas_check(cublasStatus_t st, const char *who, const char *what);
/* Profiling: a handle (or -1 when off) for the GPU work queued between begin and end. */
int cu_prof_begin(cuda_backend *cb, int cat);
void cu_prof_end(cuda_backend *cb, int h);
/* Profiling, at the backend's end and where the host reads results: the recorded event pairs
 * resolved into the totals (cu_prof_flush), and the totals logged and the events freed
 * (cu_prof_report). */
void cu_prof_flush(cuda_backend *cb);
void cu_prof_report(cuda_backend *cb);
/* bytes_peak = max(bytes_peak, weights + bytes_in_use + scratch + workspace) */
void cu_note_peak(cuda_backend *cb);
/* everything the backend holds on the device now */
int64_t cu_held(const cuda_backend *cb);
/* VAE_ENOMEM (and the message) when holding `more` bytes besides what the backend holds would
 * exceed its memory budget (base.limit > 0) */
int cu_over_budget(cuda_backend *cb, size_t more, const char *who);
/* Frees a device buffer that queued work may still use (after a stream synchronisation); while
 * work graphs exist (they replay on the addresses they recorded) or one is being recorded, it is
 * kept until the last graph is freed (or the recording failed). */
void cu_retire(cuda_backend *cb, void *p, size_t bytes);
/* After the last graph is gone: what cu_retire kept, freed. */
void cu_retired_free(cuda_backend *cb);
/* Device scratch of at least `bytes` bytes; NULL + vae_fail on failure. */
void *cu_scratch(cuda_backend *cb, size_t bytes, const char *who);
/* VAE_CUDA_POISON: fills a block the backend hands out with NaN bytes (queued on the stream). */
void cu_poison(cuda_backend *cb, void *p, size_t bytes);
/* VAE_EUNSUPPORTED (with the message) while a graph is being recorded: it would keep a copy from
 * host memory, so uploads refuse, the recording fails and the step runs normally; else VAE_OK. */
int cu_upload_refused(cuda_backend *cb, const char *who);
/* Host -> device copy of constants in the stream's order (the host buffer may be freed on
 * return); VAE_EUNSUPPORTED while a graph is being recorded (cu_upload_refused). */
int cu_upload_host(cuda_backend *cb, void *dst, const void *host, size_t bytes, const char *who);
/* Device buffer from host float32 data converted to the backend dtype (conv weights), or a
 * float32 copy (norm parameters) when as_f32: copied from the stage where src is staged as it
 * is (CU_STAGE_RAW), else through the pinned ring (cu_ring_upload); *out = NULL for src ==
 * NULL. */
int cu_upload_param(cuda_backend *cb, const float *src, size_t n, int as_f32, void **out,
                    const char *who);
/* The same from what the stage made of key (tag): VAE_OK with *out set, or VAE_OK with *out =
 * NULL where the stage has no such item (the caller makes it itself). */
int cu_upload_staged(cuda_backend *cb, const void *key, int tag, size_t n, int as_f32, void **out,
                     const char *who);
void cu_free_param(cuda_backend *cb, void *p, size_t bytes);
cudaDataType_t cu_blas_type(vae_dtype dt);

#endif
