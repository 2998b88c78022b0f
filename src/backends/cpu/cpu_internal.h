/* cpu_internal.h -- the CPU reference backend, shared between its files (internal).
 *
 * float32 activations, channels-last [t][h][w][c]. Heavy ops (conv, attention) run as sgemm calls
 * (OpenBLAS when built with VAE_HAVE_BLAS=1, otherwise the blocked OpenMP kernel of cpu_gemm.c);
 * everything else is plain OpenMP loops. A backend is used by one thread at a time (it owns one
 * reusable scratch buffer).
 */
#ifndef VAE_CPU_INTERNAL_H
#define VAE_CPU_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/backend.h"
#include "core/core.h"

enum { CPU_POOL_SLOTS = 64 };
#define CPU_POOL_MAX_BYTES ((size_t)2 << 30)

typedef struct cpu_backend {
    vae_backend base;
    int threads;          /* OpenMP threads of every parallel region (>= 1) */
    int fp8;              /* VAE_DTYPE_FP8 emulated: convs see E4M3-rounded inputs and weights */
    float *scratch;       /* reusable work space (im2col columns, attention scores) */
    size_t scratch_bytes; /* its capacity; not counted in base.bytes_in_use */
    size_t scratch_limit; /* conv im2col blocks and attention score blocks aim below this */
    /* Released buffers kept for reuse: every chunk after the first allocates the same sizes, and
     * returning them to malloc would mmap/munmap (and page-fault) large blocks per op. */
    void *pool[CPU_POOL_SLOTS];
    size_t pool_bytes;
} cpu_backend;

enum { CPU_SCRATCH_LIMIT = 16 << 20 }; /* default scratch_limit (bytes) */

static inline cpu_backend *cpu_be(vae_backend *be) {
    return (cpu_backend *)be;
}

/* 64-byte aligned blocks through vae_malloc (so that failure injection reaches them). */
void *cpu_aligned_alloc(size_t bytes);
void cpu_aligned_free(void *p);
size_t cpu_aligned_size(const void *p); /* the size asked for at allocation */

/* The backend's scratch buffer with at least `bytes` bytes (contents undefined); NULL + vae_fail
 * on OOM. Grows, never shrinks, until the backend is destroyed. */
float *cpu_scratch(cpu_backend *cb, size_t bytes, const char *who);

/* Row-major C[m][n] = alpha * A[m][k] * op(B) + beta * C, op(B) = B[k][n] (trans_b = 0, row
 * stride ldb) or B[n][k]^T (trans_b = 1). beta == 0 ignores C's old contents (NaN included).
 * Returns VAE_OK or VAE_ENOMEM (the built-in kernel packs its operands). */
int cpu_sgemm(int threads, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc);

/* "OpenBLAS" or "built-in": which sgemm this build uses (for logs and benchmarks). */
const char *cpu_gemm_name(void);

/* exp(x) for x <= 0 (softmax, sigmoid), in a form the compiler vectorises (libm's expf is a call
 * per value, 4-5x slower): x = k ln2 + r with |r| <= ln2/2, exp(x) = 2^k * p(r), p the degree-6
 * Taylor polynomial (relative error < 3e-7). x is first clamped to -87 (exp(-87) ~ 1.6e-38, still
 * a normal float); the clamp compares the bit patterns as unsigned integers because a float
 * comparison may trap (-ftrapping-math) and then keeps the loop from being vectorised. Non-positive
 * floats order by magnitude as unsigned bits; +0 (bits 0) is left alone. */
static inline float cpu_exp_neg(float x) {
    const uint32_t minus87 = 0xC2AE0000u; /* bits of -87.0f */
    uint32_t ux;
    memcpy(&ux, &x, sizeof ux);
    ux = ux > minus87 ? minus87 : ux;
    memcpy(&x, &ux, sizeof x);
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float kf = (x * 1.44269504f + shifter) - shifter;
    float r = (x - kf * 0.693145752f) - kf * 1.42860677e-6f; /* ln2 split in two parts */
    float p = 1.0f / 720; /* Horner: 1 + r + r^2/2 + ... + r^6/720 */
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)kf + 127) * (1 << 23); /* 2^k, k in [-126, 0] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* x * sigmoid(x) through cpu_exp_neg: with e = exp(-|x|), sigmoid(|x|) = 1 / (1 + e) and
 * sigmoid(-|x|) = e / (1 + e). The factor (e for x < 0, else 1) is picked with a mask made from
 * the sign bit, for the same reason as above (a float comparison keeps the loop scalar).
 * Relative error < 4e-7 for x > -87; below, |result| < 1e-35 where libm would give 0. */
static inline float cpu_silu(float x) {
    uint32_t bits, e_bits, one_bits = 0x3F800000u; /* 1.0f */
    memcpy(&bits, &x, sizeof bits);
    float e = cpu_exp_neg(-fabsf(x)), f;
    memcpy(&e_bits, &e, sizeof e_bits);
    uint32_t neg = 0u - (bits >> 31); /* all ones when x < 0 */
    uint32_t f_bits = (e_bits & neg) | (one_bits & ~neg);
    memcpy(&f, &f_bits, sizeof f);
    return x * f / (1.0f + e);
}

/* Applies act to n contiguous values in place (serial; callers parallelise). */
void cpu_act_row(vae_act act, float s, float *x, int64_t n);

/* Op families (vtbl entries). */
int cpu_conv_prepare(vae_backend *be, const vae_op *op, void **state);
/* backend.h fp8_conv: the emulation (VAE_FP8_EMULATED) can run every conv the rule lets run in
 * E4M3 (op.h vae_op_fp8_shape; a session keeps those that the rule rows of fp8_shapes.h take
 * unless VAE_FP8_SHAPES=wide); prepare rounds those that are marked, reading the mark alone */
int cpu_conv_fp8(vae_backend *be, const vae_op *op);
void cpu_conv_unprepare(vae_backend *be, const vae_op *op, void *state);
/* cpu_conv_taps.c: convs of spatial stride 1, a spatial kernel and >= 16 channels in and out run
 * as one GEMM per spatial tap on padded bands of rows (no im2col); prepare packs their filters
 * [(dh*kw + dw)*kt + dt][c_in][c_out]. xs: FP8 input scale (0: float32). */
int cpu_conv_taps_fits(const vae_op *op);
/* panels: the filters are in cpu_taps_gemm's layout (cpu_taps_gemm_ok at prepare) */
int cpu_conv_taps(cpu_backend *cb, const vae_op *op, const float *wp_filters, int panels,
                  const float *const *frames, int h, int w, const float *res, float *y, int t_out,
                  int h_out, int w_out, float xs);
/* cpu_taps_gemm.c: band[m][n] = sum_t a[tap_offset[t] + row*depth ..][depth] x filters of tap t,
 * the filters [tap][n/32][depth][32]; reads and writes up to CPU_TAPS_ROW_PAD rows past m. */
enum { CPU_TAPS_ROW_PAD = 12 };
int cpu_taps_gemm_ok(const vae_op *op);
void cpu_taps_gemm(int taps, const size_t *tap_offset, int m, int n, int depth, const float *a,
                   const float *w_panels, float *band);
/* cpu_conv_depthwise.c: depthwise convs (op.h vae_op_grouped), directly; prepare packs their
 * filters [kh*kw][c_out] (cpu_conv_depthwise_pack: kh*kw*c_out floats into wp) */
void cpu_conv_depthwise_pack(const vae_op *op, float *wp);
int cpu_conv_depthwise(cpu_backend *cb, const vae_op *op, const float *wp,
                       const float *const *frames, int h, int w, const float *res, float *y,
                       int t_out, int h_out, int w_out);
int cpu_conv(vae_backend *be, const vae_op *op, void *state, const void *const *frames, int n_in,
             int h, int w, const void *residual, void *y, int t_out, int h_out, int w_out);
int cpu_norm(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t, int h,
             int w);
/* GROUP_NORM split across row bands (backend.h norm_stats, norm_apply) */
int cpu_norm_rows(vae_backend *be, const vae_op *op, void *state, const void *x, size_t x_pitch,
                  void *y, size_t y_pitch, int64_t rows, int w);
int cpu_norm_stats(vae_backend *be, const vae_op *op, const void *x, int t, int h, int w, int y0,
                   int rows, double *st, int dev);
int cpu_norm_apply(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t,
                   int h, int w, const double *st, int dev);
int cpu_eltwise(vae_backend *be, const vae_op *op, void *state, const void *a, const void *b2,
                void *y, int64_t n_vox);
int cpu_resample(vae_backend *be, const vae_op *op, const void *const *frames, int n_in, int h,
                 int w, void *y, int t_out);
int cpu_attention(vae_backend *be, const vae_op *op, void *state, const void *qkv, void *y, int t,
                  int h, int w, int q0, int q1);

#endif
