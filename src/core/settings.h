/* settings.h -- the engine's switches, in one struct read once per session (internal).
 *
 * Every switch has a default, can be set through the developer API (vae_dev.h:
 * vae_session_options_set with a VAE_PARAM_* number) and through its environment variable, which
 * is read here and nowhere else. Order: defaults, then the environment for what the API left
 * unset, then the API values -- an explicit value always wins, so that a host (ComfyUI, vaec)
 * can pin a switch whatever the user's environment holds; the environment only fills defaults.
 * The session logs at INFO (-v) which switches came from the environment, at DEBUG each API
 * value that overrode an environment variable, and at DEBUG the resolved values.
 */
#ifndef VAE_SETTINGS_H
#define VAE_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "vae_dev.h"

typedef struct vae_settings {
    /* executor */
    int exec_contig;  /* VAE_EXEC_CONTIG: temporal convs read a contiguous window (1) */
    int exec_graph;   /* VAE_EXEC_GRAPH: steady-state steps recorded as backend graphs: 1
                       * (default) always; 2 in a call's own steps only while the device is
                       * behind the host, a stream's pushes always; 0 never */
    int exec_check;   /* VAE_EXEC_CHECK: every op's output read back, must be finite (0) */
    int exec_frames;  /* VAE_EXEC_FRAMES: frame-granular streaming after temporal upsampling (1:
                       * where the budget needs it; 2: always, for tests and measurements) */
    int exec_loop_frames; /* VAE_EXEC_LOOP_FRAMES: frames a frame loop takes at a time (0: the
                           * planner's choice, 1 or 2 with caches in host memory; N: N) */
    int exec_chunks;  /* VAE_EXEC_CHUNKS: whole-frame plans feed up to this many of the
                       * model's chunks a step where they fit (4; 1: the model's steps) */
    int exec_host_mb; /* VAE_EXEC_HOST_MB: host memory (MiB) for each whole-video object of a
                       * tiled call (output, store, slots), else a temporary file (2048; 256:
                       * host memory flat in the video's length) */
    int exec_fuse_norms; /* VAE_EXEC_FUSE_NORMS: an RMS norm that alone reads a conv's output
                          * runs inside that conv (program.h vae_program_fuse_norms) (1) */
    int exec_fuse_acts;  /* VAE_EXEC_FUSE_ACTS: an activation that alone reads a conv's output
                          * runs inside that conv (program.h vae_program_fuse_acts) (1) */
    int exec_strip_norm; /* VAE_EXEC_STRIP_NORM: strips' RMS norms read their input where it
                          * lies instead of a copy put together (1) */
    int exec_store_host; /* VAE_EXEC_STORE_HOST: tiled plans keep their stores (and strips their
                          * slots) on the host (0) */
    int plan_cut;        /* VAE_PLAN_CUT: exact tiles from this cut candidate (-1: cheapest) */
    int plan_scratch_min; /* VAE_PLAN_SCRATCH_MIN: 1 plans with every op's least scratch; 0
                           * (default) where nothing else fits, where that saves link traffic
                           * or, without a budget, memory; -1 as 0 but not for memory alone */
    int plan_strips;      /* VAE_PLAN_STRIPS: exact tiles as column strips (strip.h): 0 where
                           * cheaper, -1 never, N >= 2 always N strips where the model allows */
    int plan_offload;     /* VAE_PLAN_OFFLOAD: causal caches in host memory where whole frames
                           * need it (0), never (-1), always the N largest (N >= 1) */
    int plan_bands;       /* VAE_PLAN_BANDS: a device group's row bands with all-reduced
                           * GroupNorms: 0 where faster, 1 wherever they apply, -1 never */
    int comm;             /* VAE_COMM: a group's sums through the backend's communicator (NCCL)
                           * where it has one (1), or the group's threads (0) */
    int fp8_convs;        /* VAE_FP8_CONVS: dtype fp8, E4M3 convs a program at most, the ones
                           * nearest its output (-1: those the error budget fp8_error allows, or
                           * the architecture's count, vae_arch fp8_convs, where it is 0; 0: all
                           * the backend runs in E4M3) */
    int fp8_error;        /* VAE_FP8_ERROR: dtype fp8 without fp8_convs, the output error the
                           * E4M3 convs may add, relative L2, in units of 1e-4 (400, the
                           * default: 4e-2; api/fp8_calibrate.h); 0: off (the architecture's
                           * counts) */
    int fp8_shapes;       /* VAE_FP8_SHAPES: dtype fp8, E4M3 on the shapes the GPU kernels take
                           * (0, "kernels") or on every marked conv the backend runs (1, "wide":
                           * the CPU emulation's narrow test models) */
    int fp8_codes;        /* VAE_FP8_CODES: dtype fp8, an E4M3 conv's input written as codes by
                           * the RMS norm that makes it, where the backend can (1) */
    /* CUDA backend */
    int cuda_scratch_mb;     /* VAE_CUDA_SCRATCH_MB: blocking target of the scratch area (256) */
    int cuda_profile;        /* VAE_CUDA_PROFILE: 1 per category, 2 per op (0) */
    int cuda_conv;           /* VAE_CUDA_CONV: 0 tuned, 1 gemm only, 2 cudnn only */
    int cuda_conv3d;         /* VAE_CUDA_CONV3D: 3-D cuDNN convs over contiguous windows (1) */
    int cuda_fuse;           /* VAE_CUDA_FUSE: fused norm/activation passes in 16-bit (1) */
    int cuda_poison;         /* VAE_CUDA_POISON: every block handed out is filled with NaN (0) */
    int cuda_tune;           /* VAE_CUDA_TUNE: 1 time the conv paths, 0 take the first (1) */
    uint64_t cuda_tune_seed; /* VAE_CUDA_TUNE=seed:N: paths chosen by hash (0 = timing) */
    int cuda_tune_reps;      /* VAE_CUDA_TUNE_REPS: the two fastest paths timed again (2) */
    int cuda_pw_gemm;        /* VAE_CUDA_PW=gemm: pointwise convs on cuBLAS only (0) */
    int cuda_phase;          /* VAE_CUDA_PHASE: upsample convs as four phase convs (1) */
    int cuda_pad3d;          /* VAE_CUDA_PAD3D: channel-padded 3-D windows (1) */
    int cuda_cpad;           /* VAE_CUDA_CPAD: channel-padded 2-D gathers (1) */
    int cuda_kpad;           /* VAE_CUDA_KPAD: filter-padded small convs (1) */
    int cuda_narrow;         /* VAE_CUDA_NARROW: narrow heads, stems and small 1x1s on own
                              * kernels (1) */
    int cuda_igemm;          /* VAE_CUDA_IGEMM: CUTLASS implicit-GEMM convs on sm_90: off, tuned
                              * (a candidate timed beside cuDNN's paths, 1), always (where it
                              * applies, untimed: tests) */
    int cuda_halo;           /* VAE_CUDA_HALO: the halo-tile kernel for 96-filter 3x3 convs: off,
                              * tuned (1), always (where it applies, untimed: tests) */
    int cuda_mma;            /* VAE_CUDA_MMA: the mma.sync conv kernels in place of the sm_90a
                              * ones on Hopper too (0: on Ampere, Ada, Blackwell only) */
    int cuda_bus;            /* VAE_CUDA_BUS: host copies on a second stream, reads prefetched
                              * (1); 2: reads ahead on a third, beside the copies out (1) */
    int cuda_att;            /* VAE_CUDA_ATT: large 16-bit attention on cuBLAS (1) or the fused
                              * kernel (0) */
    int cuda_warm;           /* VAE_CUDA_WARM: at session creation 0 nothing, 1 cuBLAS's and
                              * cuDNN's first uses, the plans the tune cache holds, the conv
                              * kernels' modules, 2 also the parameters staged in pinned memory
                              * (2) */
    int cuda_dnn_gain_us;    /* VAE_CUDA_DNN_GAIN_US: what a cuDNN path must save a call over the
                              * own kernels to be chosen, microseconds (100) */
    /* VAE_TUNE_CACHE / vae_session_options.tune_cache: the conv path cache file ("": none; the
     * option wins where it is not NULL) */
    char tune_cache[1024];
    /* VAE_GROUP_TIMEOUT: seconds a rank of a CPU group of processes waits at its session's
     * creation for the other ranks to join (300, as the CLI's rendezvous; environment only) */
    double group_timeout_s;
} vae_settings;

void vae_settings_default(vae_settings *s);
/* VAE_OK when value is in the range of parameter p, else VAE_EINVAL naming both. */
int vae_param_check(vae_param p, int64_t value);
/* Fills s (already vae_settings_default) from the environment where the options set no value,
 * then applies the options' VAE_PARAM_* values; VAE_EINVAL naming the bad parameter or variable
 * (a variable the API overrode is not read). */
int vae_settings_resolve(vae_settings *s, const vae_session_options *o);
/* One line "name=value ..." of every switch, for the log. */
void vae_settings_describe(const vae_settings *s, char *buf, size_t len);

#endif
