/* cpu_taps_gemm.c -- the GEMMs of cpu_conv_taps.c on AVX-512 without packing the input.
 *
 * band[M][N] = sum over the spatial taps of A_tap[M][depth] * W_tap[depth][N], A_tap a view of
 * the slab (row stride depth, rows overlapping between taps). OpenBLAS copies every A it is handed
 * into its panel layout (and the filters in every call): ~17% of a decode's time, one slab copy
 * per tap. Here the filters are laid out once by prepare in 32-column panels
 * [tap][N/32][depth][32] and the micro-kernel broadcasts A straight from the slab: 12 rows x 32
 * columns of accumulators (24 zmm), a panel of KC x 32 filters in L1 while it sweeps the MC rows
 * of an A block that stays in L2.
 *
 * M is rounded up to 12 rows: the caller's slab and band have room for the extra rows, whose
 * results are never copied out. Built where GCC/Clang target x86-64 (not Windows, below); taken
 * at run time where the CPU has AVX-512F (cpu_taps_gemm_ok).
 */
#include "backends/cpu/cpu_internal.h"

/* not under mingw-w64: its GCC does not realign the stack for 64-byte spills (GCC bug 54412) */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(_WIN32)
#include <immintrin.h>

enum { MR = 12, NP = 32, KC = 192, MC = 384 };

int cpu_taps_gemm_ok(const vae_op *op) {
    return op->c_out % NP == 0 && __builtin_cpu_supports("avx512f");
}

#define ACC_DECL(i) __m512 c##i##0, c##i##1
#define ACC_INIT(i)                                                                                \
    do {                                                                                           \
        c##i##0 = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + (size_t)(i)*ldc);              \
        c##i##1 = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + (size_t)(i)*ldc + 16);         \
    } while (0)
#define ACC_STEP(i)                                                                                \
    do {                                                                                           \
        const __m512 ai = _mm512_set1_ps(a[(size_t)(i)*lda + k]);                                  \
        c##i##0 = _mm512_fmadd_ps(ai, b0, c##i##0);                                                \
        c##i##1 = _mm512_fmadd_ps(ai, b1, c##i##1);                                                \
    } while (0)
#define ACC_SAVE(i)                                                                                \
    do {                                                                                           \
        _mm512_storeu_ps(c + (size_t)(i)*ldc, c##i##0);                                            \
        _mm512_storeu_ps(c + (size_t)(i)*ldc + 16, c##i##1);                                       \
    } while (0)
#define ACC_ALL(M)                                                                                 \
    M(0);                                                                                          \
    M(1);                                                                                          \
    M(2);                                                                                          \
    M(3);                                                                                          \
    M(4);                                                                                          \
    M(5);                                                                                          \
    M(6);                                                                                          \
    M(7);                                                                                          \
    M(8);                                                                                          \
    M(9);                                                                                          \
    M(10);                                                                                         \
    M(11)

/* c[0..12)[0..32) (=, first, or +=) a[0..12)[0..kc) * b[kc][32] */
__attribute__((target("avx512f"))) static void
kernel_12x32(int kc, const float *a, size_t lda, const float *b, float *c, size_t ldc, int first) {
    ACC_ALL(ACC_DECL);
    ACC_ALL(ACC_INIT);
    for (int k = 0; k < kc; k++, b += NP) {
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        ACC_ALL(ACC_STEP);
    }
    ACC_ALL(ACC_SAVE);
}

void cpu_taps_gemm(int taps, const size_t *tap_offset, int m, int n, int depth, const float *a,
                   const float *w_panels, float *band) {
    const int m_pad = (m + MR - 1) / MR * MR, panels = n / NP;
    for (int t = 0; t < taps; t++) {
        const float *at = a + tap_offset[t];
        const float *wt = w_panels + (size_t)t * depth * n;
        for (int k0 = 0; k0 < depth; k0 += KC) {
            const int kc = depth - k0 < KC ? depth - k0 : KC, first = t == 0 && k0 == 0;
            for (int m0 = 0; m0 < m_pad; m0 += MC) {
                const int m1 = m_pad - m0 < MC ? m_pad : m0 + MC;
                for (int p = 0; p < panels; p++) {
                    const float *bp = wt + ((size_t)p * depth + k0) * NP;
                    for (int i = m0; i < m1; i += MR)
                        kernel_12x32(kc, at + (size_t)i * depth + k0, (size_t)depth, bp,
                                     band + (size_t)i * n + (size_t)p * NP, (size_t)n, first);
                }
            }
        }
    }
}

#else

int cpu_taps_gemm_ok(const vae_op *op) {
    (void)op;
    return 0;
}

void cpu_taps_gemm(int taps, const size_t *tap_offset, int m, int n, int depth, const float *a,
                   const float *w_panels, float *band) {
    (void)taps, (void)tap_offset, (void)m, (void)n, (void)depth, (void)a, (void)w_panels,
        (void)band;
}

#endif
