/* cpu_attention.c -- single-head attention within each frame: y = softmax(q k^T * scale) v.
 *
 * qkv holds, per token, [q(c) k(c) v(c)]; the q, k and v matrices are therefore strided views
 * (row stride 3c) and go to sgemm without copies. Queries are processed in blocks of `bq` rows so
 * that only a bq x N block of scores is ever materialised (in the scratch buffer):
 *   S = scale * Qb K^T          (sgemm, B transposed)
 *   S = exp(S - rowmax), l = rowsum   (float32, max-subtracted; sum in double)
 *   Yb = S V, then Yb /= l      (sgemm)
 */
#include "backends/cpu/cpu_internal.h"

/* row[j] = exp(row[j] - max(row)); returns 1 / sum(row) (sum in double). */
static float softmax_row(float *row, int n) {
    float mx = row[0];
    for (int j = 1; j < n; j++)
        mx = row[j] > mx ? row[j] : mx;
#pragma omp simd
    for (int j = 0; j < n; j++)
        row[j] = cpu_exp_neg(row[j] - mx);
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++)
        sum += row[j];
    return (float)(1.0 / sum);
}

enum { ATT_BLOCK = 256 }; /* query rows per block (fewer when N is huge: scratch_limit) */

int cpu_attention(vae_backend *be, const vae_op *op, void *state, const void *qkv, void *y, int t,
                  int h, int w, int q0, int q1) {
    cpu_backend *cb = cpu_be(be);
    int rc = vae_attention_check_call(op, qkv, y, t, h, w, q0, q1);
    if (rc || t == 0 || q1 == q0) return rc;
    const int c = op->c_out, nt = cb->threads, n = h * w; /* (checked against overflow) */

    int64_t bq64 = (int64_t)(cb->scratch_limit / ((size_t)n * sizeof(float)));
    if (bq64 > ATT_BLOCK) bq64 = ATT_BLOCK;
    if (bq64 < 16) bq64 = 16; /* very long sequences: the block still needs some height */
    if (bq64 > n) bq64 = n;
    const int bq = (int)bq64;
    /* scores [bq][n], then the row sums [bq] */
    float *s = cpu_scratch(cb, ((size_t)bq * n + (size_t)bq) * sizeof(float), op->name);
    if (!s) return VAE_ENOMEM;
    float *rowsum = s + (size_t)bq * n;
    const int ld = 3 * c;

    for (int f = 0; f < t; f++) {
        const float *q = (const float *)qkv + (size_t)f * n * ld, *k = q + c, *v = q + 2 * c;
        float *yf = (float *)y + (size_t)f * n * c;
        for (int i0 = q0; i0 < q1; i0 += bq) {
            int m = q1 - i0 < bq ? q1 - i0 : bq;
            rc = cpu_sgemm(nt, 1, m, n, c, op->scale, q + (size_t)i0 * ld, ld, k, ld, 0.0f, s, n);
            if (rc) return rc;
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int i = 0; i < m; i++)
                rowsum[i] = softmax_row(s + (size_t)i * n, n);
            float *yb = yf + (size_t)i0 * c;
            rc = cpu_sgemm(nt, 0, m, c, n, 1.0f, s, n, v, ld, 0.0f, yb, c);
            if (rc) return rc;
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int i = 0; i < m; i++)
                for (int j = 0; j < c; j++)
                    yb[(size_t)i * c + j] *= rowsum[i];
        }
    }
    return VAE_OK;
}
