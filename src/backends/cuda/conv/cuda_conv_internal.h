/* cuda_conv_internal.h -- what the conv's files share (internal to the CUDA backend):
 *   cuda_conv.c          the op: prepare, the call's checks and dispatch (narrow heads, pointwise,
 *                        upsampling, FP8, tuned paths), the scratch rules
 *   cuda_conv_tune.c     which path per shape (timed once, kept in the tune cache)
 *   cuda_conv_paths.c    the paths: per block (cuDNN, cuBLAS), 3-D, padded 3-D, their fallbacks
 *   cuda_conv_phase.c    the upsampling convs' phase path
 *   cuda_conv_igemm.c    the CUTLASS implicit-GEMM and FP8 kernels' calls
 *   cuda_conv_weights.c  the filters in each path's layout
 *   cuda_conv_depthwise.c  depthwise convs (op.h vae_op_grouped): their own kernel, no other path
 *   cudnn_conv.c         cuDNN (cu_dnn_conv_run here; its life cycle in cuda_conv.h)
 *   cuda_tune_cache.c    the tune cache on disk (cuda_conv.h)
 * Calls go down this list (cuda_conv.c -> tune -> paths -> igemm -> weights; cuda_conv.c calls
 * phase, which uses tune's timing helpers, paths' cu_frames_consecutive and igemm's phase
 * kernels), never up.
 */
#ifndef VAE_CUDA_CONV_INTERNAL_H
#define VAE_CUDA_CONV_INTERNAL_H

#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/conv/cuda_conv.h"
#include "backends/cuda/kernels/cuda_kernels.h"

/* ---- cuDNN (cudnn_conv.c) ---- */
/* One NHWC convolution: nd = 2: y[n][ho][wo][k] = conv(x[n][hx][wx][c], w[k][kh][kw][c]);
 * nd = 3 (NDHWC): y[n][dy][ho][wo][k] = conv(x[n][dx][hx][wx][c], w[k][kd][kh][kw][c]) (set
 * dx = dy = kd = sd = 1 and pd = 0 for nd = 2). Symmetric zero padding, strides. epi = 0:
 * y = conv + beta * y; epi = 1: y = conv + bias [+ z] in the convolution's epilogue.
 * VAE_EUNSUPPORTED when cuDNN has no algorithm for it (the caller falls back: unfused, or the
 * GEMM path), other codes on real errors. Zero-initialise (memcmp keys the plan cache). */
/* epi: what cuDNN's epilogue adds: nothing (beta * y), the bias (+ residual), or those and a
 * ReLU after them */
enum { CU_DNN_EPI_NONE = 0, CU_DNN_EPI_BIAS = 1, CU_DNN_EPI_RELU = 2 };
typedef struct cu_dnn_conv {
    int nd, n, c, dx, hx, wx, k, kd, kh, kw, pd, ph, pw, sd, sh, sw, dy, ho, wo, epi;
} cu_dnn_conv;
typedef struct cu_dnn_epi {
    float beta;           /* epi = 0 */
    const void *bias_dt;  /* epi = 1: bias [k] in the activation dtype */
    const float *bias_f32; /* epi = 1: the same bias in float32 */
    const void *z;        /* epi = 1: residual, y-shaped and not y, or NULL */
} cu_dnn_epi;
int cu_dnn_conv_run(cuda_backend *cb, const cu_dnn_conv *g, const void *x, const void *w,
                    const cu_dnn_epi *epi, void *y, const char *who);

enum { CONV_TUNE_MAX = 6 };
enum { PATH_BLOCKS = 0, PATH_3D = 1, PATH_3DPAD = 2, PATH_IGEMM = 3, PATH_HALO = 4, N_PATHS = 5 };
typedef struct conv_tune {
    int n_in, h, w, path;
} conv_tune;

typedef struct conv_state {
    void *w;       /* [kp][kh][kw][kt*c_in], dtype (made on first use) */
    void *w3;      /* [kp][kt][kh][kw][c_in], dtype (kt > 1; made on first use) */
    void *w2p;     /* [kp][kh][kw][cg], the gathered channels padded to cg (made on first use) */
    int cg;        /* gathered channels: kt*c_in, or padded to a multiple of 8 (16-bit) */
    size_t w2p_bytes;
    void *w3p;     /* [kp][kt][kh][kw][cp]: padded 3-D (made on first use) */
    int cp;        /* padded 3-D input channels (32, or a multiple of 64), 0: no padded 3-D path */
    size_t w3p_bytes;
    void *wh; /* [kt][c_in / 96][9][12][96][8]: the halo-tile kernel's (made on first use) */
    size_t wh_bytes;
    float *bias;   /* [kp] float32, or NULL */
    float *nw;     /* [c_out] float32: op->norm_w (the RMS norm after the conv), or NULL */
    void *bias_dt; /* [kp] activation dtype, or NULL */
    size_t w_bytes, w3_bytes, b_bytes, bdt_bytes;
    int64_t k;  /* kh*kw*kt*c_in */
    int co, kp; /* c_out, and the padded c_out the device computes (kp >= co) */
    int use_gemm;
    int no3d;    /* the 3-D path is unsupported for this op */
    int noigemm; /* the implicit-GEMM kernel refused this op */
    int nohalo;  /* the halo-tile kernel refused this op */
    int pw_gemm; /* cuDNN had no plan for this 1x1 conv: cuBLAS */
    conv_tune tune[CONV_TUNE_MAX]; /* PATH_* measured per shape */
    int n_tune;
    int main_nin, main_path; /* the decision for the largest frame count seen */
    void *wph;               /* up = 2: 4 phase filters [4][kp][2][2][c_in] (made on first use) */
    size_t wph_bytes;
    void *whp; /* up = 2: the phase filters in the halo-tile kernel's layout (made on first use) */
    size_t whp_bytes;
    conv_tune up_tune[CONV_TUNE_MAX]; /* up = 2: the halo kernel (PATH_HALO) or the phase convs */
    int n_up_tune;
    int nophase;             /* the phase path is unsupported for this op */
    conv_tune ph_tune[CONV_TUNE_MAX]; /* the phase convs' path (cuDNN or CUTLASS) per shape */
    int n_ph_tune;
    /* FP8 (cu_conv_fp8_takes): the operands of the E4M3 kernels (made on first use) */
    int fp8;
    int fp8_halo;    /* the E4M3 halo-tile kernel runs it (w8 in its layout), else CUTLASS's or
                      * the mma.sync one (op->fp8_kernel) */
    uint8_t *w8;     /* [co][kt][kh][kw][ci] E4M3 codes of w / w8_scale[co] (fp8_halo: tiled) */
    float *w8_scale; /* [co] each output channel's largest |w| / 448 */
    float *amax;     /* [1] the current call's largest input magnitude */
    float *scale8;   /* [co] amax / 448 * w8_scale: the epilogue's factors */
    size_t w8_bytes;
    /* depthwise (vae_op_grouped, decided at prepare): only cu_conv_depthwise runs it */
    int depthwise;
    float *wdw; /* [c_out][kh][kw] float32, PyTorch's layout */
    size_t wdw_bytes;
} conv_state;

typedef struct conv_call {
    cuda_backend *cb;
    const vae_op *op;
    conv_state *s;
    int h, w, ho, wo;
    size_t es, fb, yfb; /* element size, input and output frame bytes */
    const void *res;    /* residual (whole output), or NULL */
    void *y;            /* whole output */
    int fuse;           /* bias (+ residual) may go into cuDNN's epilogue */
    int init_done;      /* y was set to bias + residual up front (beta = 1 everywhere) */
    float beta;         /* beta of the block being run (set by block_epi) */
    int post_done;      /* y has the conv's pass after it (op->norm_w or op->act): from the path
                         * that made it last (the halo kernel's norm, cuDNN's ReLU), or since
                         * from cu_conv_post */
    int act_frames;     /* output frames the current path's cuDNN epilogue applied op->act to
                         * (zero between paths: cuda_conv_paths.c act_settled) */
} conv_call;

/* The conv's pass over its output cc->y [n_vox][c_out] in place, unless cc->post_done: its RMS
 * norm (op->norm_w) or its activation (op->act, vae_program_fuse_acts); sets it. */
int cu_conv_post(conv_call *cc, int64_t n_vox);

/* ---- cuda_conv_depthwise.c: depthwise convs (op.h vae_op_grouped) ---- */
/* The kernel takes the op's filter size; VAE_EUNSUPPORTED naming the op otherwise. */
int cu_conv_depthwise_check(const vae_op *op);
/* Its parameters into the stage, as prepare takes them. */
void cu_conv_depthwise_stage(cuda_backend *cb, const vae_op *op);
/* s (zeroed) for the op: filters, bias and norm on the device; s->depthwise set. */
int cu_conv_depthwise_prepare(cuda_backend *cb, const vae_op *op, conv_state *s);
/* y [t_out][h_out][w_out][c_out] = bias + residual + the conv of frames[j] (t_out of them, h x w):
 * the call checked (vae_conv_check_call); the norm (op->norm_w) is the caller's. */
int cu_conv_depthwise(cuda_backend *cb, const vae_op *op, const conv_state *s,
                      const void *const *frames, int h, int w, const void *residual, void *y,
                      int t_out, int h_out, int w_out);

/* ---- cuda_conv_weights.c: the filters in each path's layout, made on first use ---- */
/* [kp][kh][kw][kt*c_in]: the per-block paths' 2-D layout (the taps next to the channels) */
int cu_conv_need_w2(cuda_backend *cb, const vae_op *op, conv_state *s);
/* [kp][kt][kh][kw][c_in]: the 3-D layout (kt 1: the 2-D one) */
int cu_conv_need_w3(cuda_backend *cb, const vae_op *op, conv_state *s);
/* [kp][kh][kw][cg]: the 2-D layout with the gathered channels padded to cg */
int cu_conv_need_w2p(cuda_backend *cb, const vae_op *op, conv_state *s);
/* [kp][kt][kh][kw][cp]: the 3-D layout with the input channels padded to cp */
int cu_conv_need_w3p(cuda_backend *cb, const vae_op *op, conv_state *s);
/* the halo-tile kernel's layout, tiled from the 3-D one */
int cu_conv_need_wh(cuda_backend *cb, const vae_op *op, conv_state *s);
/* the phase filters (s->wph, which the caller made) in the halo-tile kernel's layout */
int cu_conv_need_whp(cuda_backend *cb, const vae_op *op, conv_state *s);
/* Frees the layouts not kept (w and w2p, w3, w3p, wh) that exist; not while a graph records. */
void cu_conv_trim_layouts(cuda_backend *cb, conv_state *s, int keep_w, int keep_w3, int keep_w3p,
                          int keep_wh);
/* After a tuning decision: frees the layouts no path chosen so far reads. */
void cu_conv_trim_tuned(cuda_backend *cb, const vae_op *op, conv_state *s);

/* The same zero padding before and after the rows and the columns: what cuDNN's 3-D paths take
 * (the others: the per-block path's gather, or the implicit GEMM's own padding on each side). */
static inline int cu_conv_pads_even(const vae_op *op) {
    return op->pad_h[0] == op->pad_h[1] && op->pad_w[0] == op->pad_w[1];
}

/* ---- cuda_conv_paths.c: per block, 3-D, padded 3-D ---- */
/* frames fr[j*st] for j < tb follow each other in memory (one [tb][h][w][c] tensor) */
int cu_frames_consecutive(const void *const *fr, int tb, int st, size_t fb);
/* The bytes of one output frame's temporally gathered input (cg channels) of the per-block path. */
size_t cu_conv_gathered_bytes(const vae_op *op, int h, int w, int cg, size_t es);
/* The per-block path (any frame list): cuDNN, else pointwise GEMMs or im2col + GEMM. */
int cu_conv_blocks(conv_call *cc, const void *const *frames, int t_out);
/* The call by a path (PATH_*), or where it falls back to: halo tile -> implicit GEMM -> 3-D ->
 * per block, padded 3-D -> per block (each fallback remembered for the op). */
int cu_conv_run_path(conv_call *cc, const void *const *frames, int t_out, int path);

/* ---- cuda_conv_tune.c ---- */
/* A temporal conv (or a 2-D one the implicit-GEMM kernels take) by the path measured fastest for
 * its shape: timed on first sight, or taken from the tune cache (consec: frames consecutive). */
int cu_conv_run_tuned(conv_call *cc, const void *const *frames, int n_in, int t_out, int consec);
/* Timing a candidate: event i (0 before, 1 after) on the stream; the milliseconds between. */
int cu_tune_mark(cuda_backend *cb, int i, const char *who);
int cu_tune_elapsed(cuda_backend *cb, float *ms, const char *who);
/* Two ways of making the same output timed against each other: with warm, one untimed run of
 * each first; then `rounds` (at least one) rounds of one timed run each, way 0 first in even rounds
 * and way 1 in odd ones (the GPU slows as its power limit sets in, which would favour whichever
 * always ran first). ms[w]: the mean of way w's timed runs, -1 where it refused (run gave *t < 0:
 * it ran nothing); *last: the way whose run made the output last. run(ctx, way, &t) runs and times
 * way, with cb->tuning raised. */
typedef int (*cu_tune_way_fn)(void *ctx, int way, float *t);
int cu_tune_alternate(cuda_backend *cb, void *ctx, cu_tune_way_fn run, int warm, int rounds,
                      float ms[2], int *last);
/* VAE_CUDA_TUNE=seed:N: FNV-1a of the seed, the op's name and the shape */
uint64_t cu_conv_seed_hash(uint64_t seed, const char *name, int n_in, int h, int w);
/* The tuner's one rule between an own kernel (own_ms a call) and cuDNN's path (dnn_ms): the own
 * kernel wins unless cuDNN saves more than cb->dnn_gain_us, since cuDNN's first use in a process
 * (~0.3 s) outweighs a small gain for any one shape; the mma.sync kernels (cb->mma) only where they
 * are faster. */
int cu_tune_own_wins(const cuda_backend *cb, float own_ms, float dnn_ms);

/* ---- cuda_conv_phase.c ---- */
/* op->up = 2 with a 3x3 conv (padding 1): the phase path; VAE_EUNSUPPORTED where it cannot run
 * (then the caller upsamples first). *acted: y has the conv's activation (op->act) already. */
int cu_conv_up_phase(cuda_backend *cb, const vae_op *op, conv_state *s, const void *const *frames,
                     int n_in, int h, int w, const void *residual, void *y, int *acted);
/* The op's shape and the settings allow the phase path (whether it runs is decided per call). */
int cu_conv_phase_takes(const cuda_backend *cb, const vae_op *op, const conv_state *s);
/* The phase filters: how many values, and those values (float32, [4][kp][2][2][c_in]). */
size_t cu_conv_phase_count(const vae_op *op, const conv_state *s);
void cu_conv_phase_filters(const vae_op *op, const conv_state *s, float *host);

/* ---- cuda_conv_igemm.c ---- */
/* The CUTLASS bf16 kernel takes this conv (frames consecutive: consec). */
int cu_conv_igemm_ok(const conv_call *cc, int consec);
/* The halo-tile kernel (PATH_HALO: 96 filters, 3x3, c_in a multiple of 96, 16-bit) takes this op,
 * and this call (frames consecutive); the call over the window x0, VAE_EUNSUPPORTED (and the op
 * marked: s->nohalo) when it refuses. */
int cu_conv_halo_takes(const cuda_backend *cb, const vae_op *op, const conv_state *s);
int cu_conv_halo_ok(const conv_call *cc, int consec);
/* An upsampling conv (op->up = 2, 3x3, 96 filters) on the halo-tile kernel's phase mode: the
 * kernel takes it (settings, dtype, channels), and the call: y [t][2h][2w][96] = bias + res +
 * the conv of nearest x2 of the consecutive frames x (s->wph made by the caller; VAE_EUNSUPPORTED
 * and s->nohalo where the kernel refuses). */
int cu_conv_halo_up2_ok(const cuda_backend *cb, const vae_op *op, const conv_state *s);
int cu_conv_halo_up2(cuda_backend *cb, const vae_op *op, conv_state *s, const void *x, int t, int h,
                     int w, const void *res, void *y);
int cu_conv_halo(conv_call *cc, const void *x0, int t_out);
/* The conv of the window x0 (t_out + kt - 1 frames) by it; VAE_EUNSUPPORTED when it refuses. */
int cu_conv_igemm(conv_call *cc, const void *x0, int t_out);
/* The padded 3-D path's window (c_in zero-padded to s->cp channels) by the kernel: one call for
 * nf window frames, output frames from j0 on; VAE_EUNSUPPORTED when it refuses (then cuDNN's 3-D
 * conv). */
int cu_conv_igemm_padded_ok(const conv_call *cc);
int cu_conv_igemm_padded(conv_call *cc, const void *win, int nf, int j0);
/* The four 2x2 convs of the phase path (cuda_conv_phase.c) by it: whether it takes them, and
 * the call; VAE_EUNSUPPORTED when it refuses. */
int cu_conv_igemm_phases_ok(const cuda_backend *cb, const vae_op *op, const conv_state *s);
int cu_conv_igemm_phases(cuda_backend *cb, const vae_op *op, conv_state *s, const void *x, int tb,
                         int h, int w, void *out, size_t plane);
/* The FP8 kernels run this op (dtype fp8, a conv vae_op_fp8 names, with one of this backend's
 * E4M3 kernels in op->fp8_kernel: its session resolved both, fp8_shapes.h), for its state and its
 * scratch; cu_conv_fp8_ok: and this call (frames consecutive). */
int cu_conv_fp8_takes(const cuda_backend *cb, const vae_op *op);
/* The E4M3 halo-tile kernel, not CUTLASS's, runs the op (op->fp8_kernel VAE_FP8_HALO) */
int cu_conv_fp8_halo_takes(const cuda_backend *cb, const vae_op *op);
int cu_conv_fp8_ok(const conv_call *cc, int consec);
int cu_conv_fp8(conv_call *cc, const void *x0, int t_out);
/* Each of the op's co output channels' E4M3 weight scale (fp8.h vae_fp8_weight_scales), and its
 * filters rounded onto those scales' grids as codes [co][taps][c_in] (vae_fp8_weights_codes), in
 * new host arrays (vae_free them), NULL when out of memory; staged (cuda_conv_stage) or on
 * first use */
float *cu_conv_w8_scales_host(const vae_op *op, int co);
uint8_t *cu_conv_w8_codes_host(const vae_op *op, int co, const float *scale);

#endif
