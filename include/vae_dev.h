/*
 * vae_dev.h -- developer API of vae.c: the engine's switches (VAE_PARAM_*).
 *
 * vae.h is the stable API: what a program or a host (ComfyUI, vaec) builds on. This header adds
 * the developer switches, which exist to measure, test or work around something: the defaults
 * are right for users, and a switch may change meaning or go in any version (its number is
 * never reused for another switch: the numbers are ABI, which is why each is written out).
 * docs/settings.md lists them with their ranges and defaults.
 *
 * Each switch is also an environment variable of the same name (VAE_EXEC_GRAPH=0 ...). A value
 * set with vae_session_options_set wins over the environment, which only fills in the switches
 * the program left unset; the session logs at INFO (vae -v) which ones it took from there.
 * The values live in vae_session_options.params[] (params_set: which were set), so an options
 * struct made with vae.h alone carries them; this header is only needed to set them.
 */
#ifndef VAE_DEV_H
#define VAE_DEV_H

#include "vae.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The developer switches: vae_session_options_set(&opts, VAE_PARAM_..., value) before
 * vae_session_create; the value in parentheses is the default. */
typedef enum {
    VAE_PARAM_EXEC_CONTIG = 0,       /* temporal convs read one contiguous window (1) */
    VAE_PARAM_EXEC_GRAPH = 1,        /* steady-state steps recorded as device graphs: always
                                      * (1); 2: within one call only while the device is still
                                      * behind the host (the recording then costs it no idle
                                      * time), a stream's pushes always; 0: never */
    VAE_PARAM_EXEC_CHECK = 2,        /* every op's output read back and checked finite (0) */
    VAE_PARAM_EXEC_FRAMES = 3,       /* frame-granular streaming after temporal upsampling: 1
                                      * where the budget needs it, 2 always (measurements) (1) */
    VAE_PARAM_EXEC_HOST_MB = 4,      /* host memory in MiB for each whole-video object of a tiled
                                      * call (its output, a store between parts, strips' slots);
                                      * beyond it a temporary file (slots: the device); 256 keeps
                                      * host memory flat in the video's length (2048) */
    VAE_PARAM_CUDA_SCRATCH_MB = 5,   /* CUDA scratch blocking target in MiB (256) */
    VAE_PARAM_CUDA_PROFILE = 6,      /* CUDA per-kernel timing: 1 by category, 2 by op (0) */
    VAE_PARAM_CUDA_CONV = 7,         /* conv paths: 0 tuned, 1 GEMM only, 2 cuDNN only (0) */
    VAE_PARAM_CUDA_CONV3D = 8,       /* 3-D cuDNN convs (1) */
    VAE_PARAM_CUDA_FUSE = 9,         /* fused norm + activation passes in 16-bit (1) */
    VAE_PARAM_CUDA_POISON = 10,      /* fill every device block handed out with NaN (0) */
    VAE_PARAM_CUDA_TUNE = 11,        /* time conv paths per shape (1) or take the first (0) */
    VAE_PARAM_CUDA_TUNE_SEED = 12,   /* nonzero: conv paths chosen by a hash of this seed (0) */
    VAE_PARAM_CUDA_PW_GEMM = 13,     /* pointwise convs on cuBLAS only (0) */
    VAE_PARAM_CUDA_PHASE = 14,       /* upsample convs as four phase convs (1) */
    VAE_PARAM_CUDA_PAD3D = 15,       /* channel-padded 3-D windows (1) */
    VAE_PARAM_CUDA_CPAD = 16,        /* channel-padded 2-D gathers (1) */
    VAE_PARAM_CUDA_KPAD = 17,        /* filter-padded small convs (1) */
    VAE_PARAM_PLAN_CUT = 18,         /* exact tiles start at this cut candidate of the planner
                                      * (-1: the cheapest that fits) */
    VAE_PARAM_EXEC_STORE_HOST = 19,  /* 1: the stores of tiled plans and the slots of column
                                      * strips are kept on the host (0: only when they do not fit
                                      * the budget on the device) */
    VAE_PARAM_PLAN_SCRATCH_MIN = 20, /* 1: plans keep every op to its least backend scratch;
                                      * 0 (default): where the backend's paths of choice do not
                                      * fit the budget, where that plan saves host-link traffic
                                      * and, with no budget given, where a whole-frame plan
                                      * needs less memory at no more predicted cost; -1: as 0
                                      * but never for memory alone */
    VAE_PARAM_CUDA_NARROW = 21,      /* narrow 3x3 heads (<= 8 outputs), encoders' stems (a few
                                      * input channels) and 1x1 convs of few channels on their
                                      * own kernels (1) */
    VAE_PARAM_CUDA_IGEMM = 22,       /* implicit-GEMM convs on Hopper (CUTLASS): 0 off, 1 a tuned
                                      * candidate, 2 wherever they apply (1); 0 also turns off
                                      * the other sm_90a kernels (fp8: the mma.sync one runs
                                      * instead) */
    VAE_PARAM_CUDA_DNN_GAIN_US = 23, /* the tuner takes a cuDNN path for a shape only where it is
                                      * this many microseconds a call faster than the engine's
                                      * own sm_90a kernels: cuDNN's first use costs a process
                                      * ~0.3 s (100; the mma.sync kernels get no such margin) */
    VAE_PARAM_PLAN_STRIPS = 24,      /* exact tiles as column strips that hand their edge columns
                                      * on instead of recomputing halos: 0 where the planner
                                      * finds them cheaper, -1 never, N >= 2 always N strips
                                      * where the model allows (decoders) (0) */
    VAE_PARAM_CUDA_BUS = 25,         /* copies to and from pinned host memory (strips' slots,
                                      * host stores, the output's frames) on a second stream,
                                      * overlapping compute, with reads prefetched where the
                                      * engine knows them ahead; 2: the reads ahead on a
                                      * stream of their own, so that both directions of the host
                                      * link work at once (1) */
    VAE_PARAM_CUDA_ATT = 26,         /* attention of >= 1024 tokens in 16-bit: 1 scores and P V
                                      * on cuBLAS (float32 scores of a block of query rows in
                                      * scratch), 0 the fused kernel everywhere (1) */
    VAE_PARAM_PLAN_BANDS = 27,       /* device groups: models with GroupNorm (SeedVR2) in row
                                      * bands, one per device, their statistics all-reduced: 0
                                      * where the planner finds them faster than one device, 1
                                      * wherever they apply (tests), -1 never (0) */
    VAE_PARAM_COMM = 28,             /* how the devices of a group add up their bands' GroupNorm
                                      * sums: 1 through the backend's communicator where it has
                                      * one (CUDA: NCCL, when it loads and each GPU is in the
                                      * group once), else 0: through host memory, the group's
                                      * threads (1) */
    VAE_PARAM_EXEC_STRIP_NORM = 29,  /* column strips: an RMS norm reads its input's columns
                                      * where they lie and the previous strip's beside them,
                                      * instead of a copy of both put together first (1) */
    VAE_PARAM_CUDA_WARM = 30,        /* what a CUDA session pays at its creation instead of in
                                      * its first call: 0 nothing, 1 cuBLAS's first use
                                      * (attention) and cuDNN's (models with strided convs), the
                                      * cuDNN plans and attention blocks of earlier processes
                                      * (the tune cache), the conv kernels' modules, 2 also the
                                      * parameters converted into pinned host memory, so that
                                      * first uses copy them as they are (2; host memory of ~2
                                      * bytes a parameter, until vae_session_trim) */
    VAE_PARAM_FP8_CONVS = 31,        /* VAE_DTYPE_FP8: at most this many convs of each program in
                                      * E4M3, those nearest its output that the backend runs in
                                      * E4M3 (their noise is the least amplified); each adds
                                      * ~0.8-1.2% relative error at the output, with no
                                      * calibration (-1, the default: those the error budget
                                      * VAE_PARAM_FP8_ERROR allows, or where that is 0 the
                                      * architecture's counts: decoders Wan2.1 16, Wan2.2 24,
                                      * SeedVR2 12, encoders Wan's all, SeedVR2 11; 0 or "all":
                                      * every conv that may, for the most speed, up to 1e-1) */
    VAE_PARAM_EXEC_CHUNKS = 32,      /* one device's whole-frame plans feed up to this many of
                                      * the model's input chunks a step (decoders: latent
                                      * frames), as many as divide the input's later chunks,
                                      * where they fit the budget without frame-by-frame
                                      * streaming and no tiles or strips were asked for: fewer,
                                      * larger kernels and fewer causal-window copies a frame,
                                      * for more memory (4; 1: the model's own steps; the result
                                      * is the same) */
    VAE_PARAM_CUDA_HALO = 33,        /* Hopper: the halo-tile wgmma kernel for the 3x3(x3) convs
                                      * with 96 filters (Wan's full-resolution blocks): 0 off, 1
                                      * a tuned candidate beside CUTLASS's and cuDNN's paths, 2
                                      * wherever it applies (1; needs VAE_PARAM_CUDA_IGEMM on) */
    VAE_PARAM_EXEC_FUSE_NORMS = 34,  /* an RMS norm that alone reads a conv's output runs inside
                                      * that conv (its output written once: one pass over the
                                      * activation fewer, and one buffer), where the backend can
                                      * (1; 0: as separate ops; the result is the same) */
    VAE_PARAM_CUDA_TUNE_REPS = 35,   /* the conv tuner: each candidate path of a shape is timed
                                      * once, then the two fastest (where the second is within
                                      * 15% of the first) this many rounds more, in alternating
                                      * order, and judged by those: the GPU slows down as its
                                      * power limit sets in during the first round, which would
                                      * favour whichever ran earlier (2; 0: the first round
                                      * decides) */
    VAE_PARAM_FP8_SHAPES = 36,       /* VAE_DTYPE_FP8: which convs may run in E4M3: 0 ("kernels")
                                      * the temporal ones the GPU's E4M3 kernels take (stride 1,
                                      * input channels a multiple of 64, outputs of 96 or 128),
                                      * so that the CPU emulation picks the very convs a GPU
                                      * does; 1 ("wide") any conv of a residual branch wider than
                                      * 16 channels, which only the CPU emulation runs (to
                                      * measure the error of narrow test models); 0 */
    VAE_PARAM_CUDA_MMA = 37,         /* the engine's mma.sync conv kernels (implicit GEMM in
                                      * 16-bit, and dtype fp8's E4M3 convs on sm_89+) run on
                                      * Ampere, Ada and Blackwell; 1 runs them in place of the
                                      * sm_90a ones on Hopper too (tests: slower there); 0 */
    VAE_PARAM_FP8_CODES = 38,        /* VAE_DTYPE_FP8 on a GPU: the input of an E4M3 conv that an
                                      * RMS norm makes (and nothing else reads) is written by
                                      * that norm as E4M3 codes, so that the conv reads it as it
                                      * is, with no pass of its own to make them (the same codes:
                                      * the norm bounds the values, and the scale is that bound /
                                      * 448); 1 */
    VAE_PARAM_PLAN_OFFLOAD = 39,     /* causal caches in pinned host memory, copied to the device
                                      * around each call of their op (exact): 0 where whole
                                      * frames need it to fit the budget and no exact tiles do,
                                      * largest caches first; -1 never; N >= 1 always the N
                                      * largest (tests); 0 */
    VAE_PARAM_FP8_ERROR = 40,        /* VAE_DTYPE_FP8 where VAE_PARAM_FP8_CONVS is -1 (its
                                      * default): the relative L2 error that the E4M3 convs may
                                      * add to each program's output, in units of 1e-4 (400, the
                                      * default: 4e-2). At a side's first plan or call (decode,
                                      * encode) the CPU emulation measures the candidate convs'
                                      * errors on a small seeded input (all at once, then, where
                                      * that is over the budget, a run per residual block's pair:
                                      * seconds for a full-size program on a CPU) and keeps the
                                      * smallest while their sum in quadrature stays within it,
                                      * checked by one run with the chosen set; the choice is
                                      * cached beside the
                                      * tune cache (fp8-choices.txt; none where the tune cache is
                                      * "") for later sessions (docs/fp8.md). 0: the
                                      * architecture's counts */
    VAE_PARAM_EXEC_FUSE_ACTS = 41,   /* an activation that alone reads a conv's output (one
                                      * without a folded norm) runs inside that conv: one pass
                                      * over the activation fewer, and one buffer, where the
                                      * backend can (1; 0: as separate ops; the result is the
                                      * same) */
    VAE_PARAM_EXEC_LOOP_FRAMES = 42, /* frames a frame loop takes at a time: 0 the planner's
                                      * choice (1 or 2 where caches are in host memory: fewer
                                      * copies for more memory), N always N (tests) */
    VAE_PARAM_COUNT = 43             /* the number of switches (not one itself) */
} vae_param;

/* Sets a developer switch in opts (params[param], and its bit of params_set): the session made
 * with opts takes this value whatever the switch's environment variable says. VAE_EINVAL for an
 * unknown parameter or a value out of its range. */
VAE_API int vae_session_options_set(vae_session_options *opts, vae_param param, int64_t value);

#ifdef __cplusplus
}
#endif
#endif /* VAE_DEV_H */
