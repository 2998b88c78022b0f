/* cpu_gemm.c -- row-major sgemm: cblas_sgemm when built with VAE_HAVE_BLAS=1, otherwise a
 * cache-blocked, packed OpenMP kernel in plain C that the compiler vectorises.
 *
 * Built-in kernel (the Goto scheme, simplified): C is cut into tiles of MC rows x NB columns,
 * handed out to the threads dynamically (no barrier inside: robust when a core is shared with
 * another process). For each tile and each block of KC along k:
 *   pack A[mc][kc] into panels of MR rows, [panel][k][MR]      (L2)
 *   pack B[kc][nb] into panels of NR columns, [panel][k][NR]   (L1/L2)
 *   for each MR x NR micro-tile: acc += sum_k a[k][0..MR) x b[k][0..NR)  (registers)
 *   C += alpha * acc
 * Edges are zero-padded in the packed copies, so the micro-kernel has no branches. Packing B per
 * tile repeats it once per row tile, about 1/MC of the arithmetic.
 */
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"

#if defined(VAE_HAVE_BLAS) && VAE_HAVE_BLAS
#include <cblas.h>

/* The backend sets OpenBLAS to one thread (see vae_cpu_backend_create) and parallelises here with
 * OpenMP instead: each thread runs cblas_sgemm on a slice of C's rows or columns. Two thread pools
 * (OpenMP for the other loops, OpenBLAS's pthreads for the GEMMs) that both spin-wait fight over
 * the cores, which made a conv several times slower on a 2-core machine. */
const char *cpu_gemm_name(void) {
    return "OpenBLAS";
}

int cpu_sgemm(int threads, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc) {
    if (m <= 0 || n <= 0) return VAE_OK;
    if (k <= 0) { /* BLAS may reject k = 0 with lda < 1; do it by hand */
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
        return VAE_OK;
    }
    const enum CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
    /* Slices of at least 64 rows/columns, only for GEMMs worth it; up to 4 per thread, handed
     * out dynamically, so that a core shared with another process delays one slice, not half. */
    int split_rows = m >= n, len = split_rows ? m : n;
    int parts = 4 * threads < len / 64 ? 4 * threads : len / 64;
    if (threads < 2 || (double)m * n * k < 1e6 || parts < 2) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return VAE_OK;
    }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int part = 0; part < parts; part++) {
        /* slice boundaries rounded to multiples of 16 */
        int lo = (int)((int64_t)len * part / parts) & ~15;
        int hi = part == parts - 1 ? len : (int)((int64_t)len * (part + 1) / parts) & ~15;
        if (hi <= lo) continue;
        if (split_rows)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, hi - lo, n, k, alpha, a + (size_t)lo * lda,
                        lda, b, ldb, beta, c + (size_t)lo * ldc, ldc);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, m, hi - lo, k, alpha, a, lda,
                        trans_b ? b + (size_t)lo * ldb : b + lo, ldb, beta, c + lo, ldc);
    }
    return VAE_OK;
}

#else /* built-in kernel */

#if defined(__AVX__)
enum { MR = 6, NR = 16 }; /* 12 ymm accumulators */
#define MR_IS_6 1
#else
enum { MR = 4, NR = 8 }; /* 8 xmm accumulators (SSE2 baseline) */
#define MR_IS_6 0
#endif
enum {
    KC = 256,     /* depth of one packed block: an A micro-panel (MR x KC) stays in L1 */
    MC = 16 * MR, /* rows of a packed A block (L2) */
    NB = 16 * NR  /* columns of one tile */
};

const char *cpu_gemm_name(void) {
    return "built-in";
}

/* Packs rows [0, mc) x depth [0, kc) of A (already offset) into MR-row panels. */
static void pack_a(int mc, int kc, const float *a, int lda, float *ap) {
    for (int i0 = 0; i0 < mc; i0 += MR) {
        int mr = mc - i0 < MR ? mc - i0 : MR;
        for (int p = 0; p < kc; p++) {
            for (int i = 0; i < mr; i++)
                ap[i] = a[(size_t)(i0 + i) * lda + p];
            for (int i = mr; i < MR; i++)
                ap[i] = 0.0f;
            ap += MR;
        }
    }
}

/* Packs one NR-column panel: columns [j0, j0+nr) x depth [0, kc) of op(B) (already offset). */
static void pack_b_panel(int trans_b, int nr, int kc, const float *b, int ldb, float *bp) {
    for (int p = 0; p < kc; p++) {
        if (trans_b)
            for (int j = 0; j < nr; j++)
                bp[j] = b[(size_t)j * ldb + p];
        else
            for (int j = 0; j < nr; j++)
                bp[j] = b[(size_t)p * ldb + j];
        for (int j = nr; j < NR; j++)
            bp[j] = 0.0f;
        bp += NR;
    }
}

/* c[0..mr)[0..nr) += alpha * (ap panel x bp panel) over kc. The MR x NR accumulator tile must
 * live in registers: with GCC/Clang vector types and the rows written out (below) it does even at
 * -O2, while a float array (the portable version after #else) stays in memory there (3x slower). */
#if defined(__GNUC__)
enum { VW = NR / 2 }; /* two vectors per row of the tile */
typedef float vfloat __attribute__((vector_size(VW * sizeof(float))));

static inline vfloat vload(const float *p) {
    vfloat v;
    memcpy(&v, p, sizeof v);
    return v;
}

#define ROW_STEP(i)                                                                                \
    do {                                                                                           \
        vfloat ai = (vfloat){0} + ap[i]; /* broadcast */                                           \
        c##i##0 += ai * b0;                                                                        \
        c##i##1 += ai * b1;                                                                        \
    } while (0)
#define ROW_SAVE(i)                                                                                \
    do {                                                                                           \
        memcpy(&tile[i][0], &c##i##0, sizeof(vfloat));                                             \
        memcpy(&tile[i][VW], &c##i##1, sizeof(vfloat));                                            \
    } while (0)

static void micro_kernel(int kc, const float *restrict ap, const float *restrict bp, float alpha,
                         float *restrict c, int ldc, int mr, int nr) {
    vfloat z = {0};
    vfloat c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
#if MR_IS_6
    vfloat c40 = z, c41 = z, c50 = z, c51 = z;
#endif
    for (int p = 0; p < kc; p++) {
        vfloat b0 = vload(bp), b1 = vload(bp + VW);
        ROW_STEP(0);
        ROW_STEP(1);
        ROW_STEP(2);
        ROW_STEP(3);
#if MR_IS_6
        ROW_STEP(4);
        ROW_STEP(5);
#endif
        ap += MR;
        bp += NR;
    }
    float tile[MR][NR];
    ROW_SAVE(0);
    ROW_SAVE(1);
    ROW_SAVE(2);
    ROW_SAVE(3);
#if MR_IS_6
    ROW_SAVE(4);
    ROW_SAVE(5);
#endif
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            c[(size_t)i * ldc + j] += alpha * tile[i][j];
}
#else
static void micro_kernel(int kc, const float *restrict ap, const float *restrict bp, float alpha,
                         float *restrict c, int ldc, int mr, int nr) {
    float acc[MR][NR];
    memset(acc, 0, sizeof acc);
    for (int p = 0; p < kc; p++) {
        for (int i = 0; i < MR; i++)
            for (int j = 0; j < NR; j++)
                acc[i][j] += ap[i] * bp[j];
        ap += MR;
        bp += NR;
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            c[(size_t)i * ldc + j] += alpha * acc[i][j];
}
#endif

int cpu_sgemm(int threads, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
              const float *b, int ldb, float beta, float *c, int ldc) {
    if (m <= 0 || n <= 0) return VAE_OK;
    const int m_tiles = (m + MC - 1) / MC, n_tiles = (n + NB - 1) / NB, tiles = m_tiles * n_tiles;
    const int kc_max = k < 1 ? 1 : k < KC ? k : KC;
    if (threads > tiles) threads = tiles;
    if (threads < 1 || (double)m * n * kc_max < 65536) threads = 1;
    const size_t per_thread = (size_t)(MC + NB) * kc_max; /* packed A block + packed B block */
    float *pack = cpu_aligned_alloc((size_t)threads * per_thread * sizeof(float));
    if (!pack)
        return vae_fail(VAE_ENOMEM, "sgemm %dx%dx%d: cannot allocate packing buffers", m, n, k);

#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
    for (int tile = 0; tile < tiles; tile++) {
        const int i0 = (tile / n_tiles) * MC, j0 = (tile % n_tiles) * NB;
        const int mc = m - i0 < MC ? m - i0 : MC, nb = n - j0 < NB ? n - j0 : NB;
        float *ap = pack + (size_t)omp_get_thread_num() * per_thread;
        float *bp = ap + (size_t)MC * kc_max;
        float *ct = c + (size_t)i0 * ldc + j0;
        for (int i = 0; i < mc; i++) { /* C = beta * C (beta == 0 ignores NaN in C) */
            float *ci = ct + (size_t)i * ldc;
            if (beta == 0.0f)
                memset(ci, 0, (size_t)nb * sizeof *ci);
            else if (beta != 1.0f)
                for (int j = 0; j < nb; j++)
                    ci[j] *= beta;
        }
        if (alpha == 0.0f) continue;
        for (int pc = 0; pc < k; pc += KC) {
            const int kc = k - pc < KC ? k - pc : KC;
            pack_a(mc, kc, a + (size_t)i0 * lda + pc, lda, ap);
            for (int jp = 0; jp < nb; jp += NR) {
                const int nr = nb - jp < NR ? nb - jp : NR;
                const float *src =
                    trans_b ? b + (size_t)(j0 + jp) * ldb + pc : b + (size_t)pc * ldb + j0 + jp;
                pack_b_panel(trans_b, nr, kc, src, ldb, bp + (size_t)(jp / NR) * kc * NR);
            }
            for (int jp = 0; jp < nb; jp += NR) {
                const int nr = nb - jp < NR ? nb - jp : NR;
                for (int ii = 0; ii < mc; ii += MR) {
                    const int mr = mc - ii < MR ? mc - ii : MR;
                    micro_kernel(kc, ap + (size_t)ii * kc, bp + (size_t)(jp / NR) * kc * NR, alpha,
                                 ct + (size_t)ii * ldc + jp, ldc, mr, nr);
                }
            }
        }
    }
    cpu_aligned_free(pack);
    return VAE_OK;
}

#endif
