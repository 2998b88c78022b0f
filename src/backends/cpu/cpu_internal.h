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

#include "core/backend.h"
#include "core/core.h"

typedef struct cpu_backend {
    vae_backend base;
    int threads;          /* OpenMP threads of every parallel region (>= 1) */
    float *scratch;       /* reusable work space (im2col columns, attention scores) */
    size_t scratch_bytes; /* its capacity; not counted in base.bytes_in_use */
    size_t scratch_limit; /* conv im2col blocks and attention score blocks aim below this */
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

/* Activation of one value: NONE, SILU x*sigmoid(x), RELU, TANH_SCALE tanh(x/s)*s. */
static inline float cpu_act1(vae_act act, float s, float x) {
    switch (act) {
    case VAE_ACT_SILU: return x / (1.0f + expf(-x));
    case VAE_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case VAE_ACT_TANH_SCALE: return tanhf(x / s) * s;
    default: return x;
    }
}
/* Applies act to n contiguous values in place (serial; callers parallelise). */
void cpu_act_row(vae_act act, float s, float *x, int64_t n);
/* VAE_OK if op->act is known (and TANH_SCALE has a positive scale), else vae_fail(VAE_EINVAL). */
int cpu_check_act(const vae_op *op);

/* Op families (vtbl entries). */
int cpu_conv_prepare(vae_backend *be, const vae_op *op, void **state);
void cpu_conv_unprepare(vae_backend *be, const vae_op *op, void *state);
int cpu_conv(vae_backend *be, const vae_op *op, void *state, const void *const *frames, int n_in,
             int h, int w, const void *residual, void *y, int t_out, int h_out, int w_out);
int cpu_norm(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t, int h,
             int w);
int cpu_eltwise(vae_backend *be, const vae_op *op, void *state, const void *a, const void *b2,
                void *y, int64_t n_vox);
int cpu_resample(vae_backend *be, const vae_op *op, const void *const *frames, int n_in, int h,
                 int w, void *y, int t_out);
int cpu_attention(vae_backend *be, const vae_op *op, void *state, const void *qkv, void *y, int t,
                  int h, int w);

#endif
