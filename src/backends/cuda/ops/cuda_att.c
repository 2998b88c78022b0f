/* cuda_att.c -- ATTENTION on the GPU (backend.h attention): per frame, softmax(scale q k^T) v
 * over the frame's tokens, q, k and v strided views of the qkv buffer (row stride 3c). Large
 * 16-bit frames take cuBLAS for the scores and P v (the GEMM path, blocks of query rows in
 * scratch), the rest one fused kernel (cuda_attention.cu: no score matrix in device memory); the
 * GEMM path's first use warmed up at session creation (cu_att_warm, from cuda_warm).
 */
#include <stdint.h>
#include <stdio.h>

#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/conv/cuda_conv.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/ops/cuda_ops.h"

/* ---- the GEMM path ---- */
/* The GEMM path: per frame and block of query rows, S = scale q k^T on cuBLAS (float32 scores
 * in scratch), P = softmax(S) in the activation dtype (cuk_softmax_rows), y = P v on cuBLAS.
 * The fused kernel (cuk_attention) keeps its mma.sync tiles near 100 TFLOP/s; this path costs 6
 * bytes of scratch (bf16) per score of a block and took a Wan2.1 720p decode's latent part from
 * 121 to 88 ms (14400 tokens x 384 channels, 1.85 ms a frame). It applies to 16-bit, c % 8 == 0
 * and >= ATT_GEMM_MIN_TOKENS tokens (smaller frames keep the one fused launch instead of three
 * per block; not timed). */
enum { ATT_GEMM_MIN_TOKENS = 1024, ATT_GEMM_ROWS_ALIGN = 64 };
#define ATT_GEMM_SCRATCH ((size_t)128 << 20) /* the blocks' target; the scratch limit caps it */

/* scratch of `rows` query rows of n keys: float32 scores and P in the activation dtype */
static size_t att_gemm_bytes(const cuda_backend *cb, int rows, int n) {
    return (size_t)rows * n * (sizeof(float) + cb->base.elem_size);
}

/* query rows per block of the GEMM path within `bytes` of scratch (0: the path does not apply) */
static int att_gemm_rows(const cuda_backend *cb, const vae_op *op, int n, size_t bytes) {
    if (!cb->att_gemm || cb->base.dtype == VAE_DTYPE_F32 || n < ATT_GEMM_MIN_TOKENS ||
        op->c_out % 8)
        return 0;
    const size_t rows =
        bytes / att_gemm_bytes(cb, 1, n) / ATT_GEMM_ROWS_ALIGN * ATT_GEMM_ROWS_ALIGN;
    return rows > (size_t)n ? n : (int)rows;
}

/* the scratch the GEMM path's blocks aim at */
static size_t att_gemm_target(const cuda_backend *cb) {
    return cb->scratch_limit < ATT_GEMM_SCRATCH ? cb->scratch_limit : ATT_GEMM_SCRATCH;
}

/* the GEMM path's block: what the scratch allows now (a capped run's area, or room under the
 * budget to grow it; 0: the fused kernel instead, without touching the budget) */
static int att_gemm_block(cuda_backend *cb, const vae_op *op, int n) {
    int rows =
        att_gemm_rows(cb, op, n, cb->scratch_capped ? cb->scratch_bytes : att_gemm_target(cb));
    const size_t need = att_gemm_bytes(cb, rows, n);
    if (rows > 0 && need > cb->scratch_bytes && cb->base.limit > 0 &&
        cu_held(cb) + (int64_t)(need - cb->scratch_bytes) > cb->base.limit)
        rows = att_gemm_rows(cb, op, n, cb->scratch_bytes);
    return rows;
}

/* One block of mb query rows q (rows 3c apart, as k and v) against n keys: the scores sc
 * [mb][n] (float32), P [mb][n] (activation dtype), y [mb][c]. */
static int att_gemm_pair(cuda_backend *cb, const char *who, const char *q, const char *k,
                         const char *v, float *sc, void *p, char *y, int n, int mb, int c,
                         float scale) {
    const cudaDataType_t dt = cu_blas_type(cb->base.dtype);
    const float zero = 0.f, one = 1.f;
    /* column-major: S^T [n x mb] = K [c x n]^T Q_b [c x mb] */
    int rc = cu_blas_check(cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, n, mb, c, &scale, k,
                                        dt, 3 * c, q, dt, 3 * c, &zero, sc, CUDA_R_32F, n,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           who, "attention scores");
    if (rc == VAE_OK)
        rc = cu_check(cuk_softmax_rows(cb->stream, cb->base.dtype, sc, p, mb, n), who,
                      "attention softmax");
    /* Y_b^T [c x mb] = V [c x n] P^T [n x mb] */
    if (rc == VAE_OK)
        rc = cu_blas_check(cublasGemmEx(cb->cublas, CUBLAS_OP_N, CUBLAS_OP_N, c, mb, n, &one, v, dt,
                                        3 * c, p, dt, n, &zero, y, dt, c, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT),
                           who, "attention P V");
    return rc;
}

/* The GEMM path's blocks of a shape, kept in the tune cache for the next process's warm-up
 * (att_warm): "att:n<tokens>.c<channels>.r<rows a block>". */
static void att_remember(cuda_backend *cb, int n, int c, int rows) {
    char key[64];
    snprintf(key, sizeof key, "att:n%d.c%d.r%d", n, c, rows);
    if (cu_tune_lookup(cb, key) < 0) cu_tune_store(cb, key, 0);
}

static int attention_gemm(cuda_backend *cb, const vae_op *op, const char *qkv, char *y, int t,
                          int n, int q0, int q1, int rows) {
    const int c = op->c_out;
    att_remember(cb, n, c, rows);
    const size_t es = cb->base.elem_size;
    float *sc = cu_scratch(cb, att_gemm_bytes(cb, rows, n), op->name); /* [rows][n] */
    if (!sc) return VAE_ENOMEM;
    void *p = sc + (size_t)rows * n; /* [rows][n], activation dtype */
    int rc = VAE_OK;
    for (int f = 0; f < t && rc == VAE_OK; f++) {
        const char *q = qkv + (size_t)f * n * 3 * c * es, *k = q + c * es, *v = q + 2 * c * es;
        for (int r0 = q0; r0 < q1 && rc == VAE_OK; r0 += rows) {
            const int mb = q1 - r0 < rows ? q1 - r0 : rows;
            rc = att_gemm_pair(cb, op->name, q + (size_t)r0 * 3 * c * es, k, v, sc, p,
                               y + ((size_t)f * n + r0) * c * es, n, mb, c, op->scale);
        }
    }
    return rc;
}

/* The attention's GEMM path once on zeros at session creation, so that a process's first call does
 * not pay cuBLAS's first use (its heuristics and lazily loaded kernels: 152 ms of a fresh process's
 * first Wan2.1 480p decode on the H100) nor the first launches of the kernels its own shapes take
 * (13 ms more there). The blocks are those earlier processes ran at program p's attention width
 * (the tune cache's "att:" entries: a block of rows and the remainder of a frame), else
 * ATT_WARM_ROWS queries against ATT_WARM_TOKENS keys (8192 x 2048 warmed better than 2048 x 512 in
 * the same decode). Once per width (a decoder and an encoder of the same width share it). Own
 * buffers, not the scratch area or the pool: nothing stays allocated; where the device has no room
 * for them the first call pays instead. */
enum { ATT_WARM_TOKENS = 8192, ATT_WARM_ROWS = 2048, ATT_WARM_BLOCKS = 8 };
#define ATT_WARM_BYTES ((size_t)512 << 20) /* a cached shape needing more: not warmed */

/* qkv [n][3c], the scores and P of mb rows, y [mb][c]: one block's buffer */
static size_t att_warm_bytes(const cuda_backend *cb, int n, int mb, int c) {
    const size_t es = cb->base.elem_size;
    return (size_t)n * 3 * c * es + att_gemm_bytes(cb, mb, n) + (size_t)mb * c * es;
}

/* The blocks to warm at width c (blk[k] = {tokens, rows}), from the tune cache, else the
 * default; their count. */
static int att_warm_blocks(cuda_backend *cb, int c, int blk[ATT_WARM_BLOCKS][2]) {
    const char *text;
    int nb = 0, path;
    for (int i = 0;
         nb + 2 <= ATT_WARM_BLOCKS && (i = cu_tune_next(cb, "att:", i, &text, &path)) >= 0; i++) {
        int n, cc, r, len = 0;
        if (sscanf(text, "n%d.c%d.r%d%n", &n, &cc, &r, &len) != 3 || text[len] || cc != c ||
            n < ATT_GEMM_MIN_TOKENS || n > (1 << 20) || r <= 0 || r > n ||
            att_warm_bytes(cb, n, r, c) > ATT_WARM_BYTES)
            continue;
        blk[nb][0] = n, blk[nb++][1] = r;
        if (n % r) blk[nb][0] = n, blk[nb++][1] = n % r;
    }
    if (nb == 0) blk[nb][0] = ATT_WARM_TOKENS, blk[nb++][1] = ATT_WARM_ROWS;
    return nb;
}

int cu_att_warm(cuda_backend *cb, const vae_program *p) {
    const vae_op *op = NULL;
    for (int i = 0; i < p->n_ops && !op; i++)
        if (p->ops[i].kind == VAE_OP_ATTENTION) op = &p->ops[i];
    if (!op || op->c_out == cb->warm_att_c || att_gemm_rows(cb, op, ATT_WARM_TOKENS, SIZE_MAX) == 0)
        return VAE_OK;
    const int c = op->c_out;
    const size_t es = cb->base.elem_size;
    int blk[ATT_WARM_BLOCKS][2];
    const int nb = att_warm_blocks(cb, c, blk);
    size_t bytes = 0;
    for (int k = 0; k < nb; k++) {
        const size_t b = att_warm_bytes(cb, blk[k][0], blk[k][1], c);
        if (b > bytes) bytes = b;
    }
    char *buf = NULL;
    if (cudaMalloc((void **)&buf, bytes) != cudaSuccess) {
        cudaGetLastError(); /* (no room: not an error) */
        return VAE_OK;
    }
    int rc = cu_check(cudaMemsetAsync(buf, 0, bytes, cb->stream), op->name, "memset");
    for (int k = 0; k < nb && rc == VAE_OK; k++) {
        const int n = blk[k][0], mb = blk[k][1];
        float *sc = (float *)(buf + (size_t)n * 3 * c * es); /* [mb][n], P [mb][n], y [mb][c] */
        char *pm = (char *)(sc + (size_t)mb * n), *y = pm + (size_t)mb * n * es;
        rc = att_gemm_pair(cb, op->name, buf, buf + c * es, buf + 2 * c * es, sc, pm, y, n, mb, c,
                           op->scale);
    }
    if (rc == VAE_OK) rc = cu_check(cudaStreamSynchronize(cb->stream), op->name, "warm-up");
    cudaFree(buf);
    if (rc == VAE_OK) cb->warm_att_c = c;
    return rc;
}

static int attention_run(cuda_backend *cb, const vae_op *op, const void *qkv, void *y, int t, int h,
                         int w, int q0, int q1);

int cuda_attention(vae_backend *be, const vae_op *op, void *state, const void *qkv, void *y, int t,
                   int h, int w, int q0, int q1) {
    cuda_backend *cb = cu_be(be);
    cu_prof_name(cb, op->name);
    int ph = cu_prof_begin(cb, CU_P_ATT);
    int rc = attention_run(cb, op, qkv, y, t, h, w, q0, q1);
    cu_prof_end(cb, ph);
    return rc;
}

/* the GEMM path computes the queries [q0, q1) only; the fused kernel every query of a frame */
static int attention_run(cuda_backend *cb, const vae_op *op, const void *qkv, void *y, int t, int h,
                         int w, int q0, int q1) {
    vae_backend *be = &cb->base;
    int rc = vae_attention_check_call(op, qkv, y, t, h, w, q0, q1);
    if (rc || t == 0 || q1 == q0) return rc;
    const int c = op->c_out, n = h * w; /* (checked against overflow) */
    if ((rc = cu_enter(cb, op->name))) return rc;
    const int rows = att_gemm_block(cb, op, n);
    if (rows > 0) return attention_gemm(cb, op, qkv, y, t, n, q0, q1, rows);
    return cu_check(cuk_attention(cb->stream, be->dtype, qkv, y, t, n, c, op->scale), op->name,
                    "attention kernel");
}

int64_t cu_att_scratch_need(cuda_backend *cb, const vae_op *op, int n) {
    return (int64_t)att_gemm_bytes(cb, att_gemm_rows(cb, op, n, att_gemm_target(cb)), n);
}
