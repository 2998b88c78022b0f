/* fp8.c -- E4M3 filters (VAE_DTYPE_FP8): each output channel's scale, and the filters rounded
 * onto its grid, the rounding errors of each (output, input) channel pair's kt x kh x kw taps
 * spread over the taps after them (fp8.h). Every backend takes its E4M3 weights from here, so
 * that their codes are the same. */
#include "fp8.h"
#include "core.h"
#include "dtype.h"
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Do all of w / s lie on the E4M3 grid (within float32 rounding of a dequantised checkpoint)? */
static int on_e4m3_grid(const float *w, int64_t n, float s) {
    for (int64_t i = 0; i < n; i++) {
        const float v = w[i] / s, r = vae_f32_round_e4m3(v);
        if (fabsf(v - r) > fabsf(v) * 0x1p-16f) return 0;
    }
    return 1;
}

void vae_fp8_weight_scales(const float *w, int c_out, int64_t per, float *scale) {
    for (int o = 0; o < c_out; o++) {
        const float *wo = w + (int64_t)o * per;
        /* the largest magnitude: non-negative floats order as their bits (vectorises; weights
         * are finite, vb_weight) */
        uint32_t mb = 0;
        for (int64_t i = 0; i < per; i++) {
            uint32_t u;
            memcpy(&u, &wo[i], sizeof u);
            u &= 0x7fffffffu;
            mb = u > mb ? u : mb;
        }
        float m;
        memcpy(&m, &mb, sizeof m);
        scale[o] = m / 448.0f;
        if (m == 0 || on_e4m3_grid(wo, per, scale[o])) continue;
        /* the largest value's stored mantissa 1 + j/8: 256..416 in the top binade, 480 is not a
         * value (E4M3's largest is 448), so 1.875 maps onto 240 */
        for (int j = 0; j < 8; j++) {
            const float top = j < 7 ? 256.0f + 32.0f * j : 240.0f;
            if (top != 448.0f && on_e4m3_grid(wo, per, m / top)) {
                scale[o] = m / top;
                break;
            }
        }
    }
}

/* The prior over the n = kt x kh x kw taps of one (output, input) channel pair: correlation
 * RHO^(|dt| + |dy| + |dx|) between two taps, and some white noise (DAMP) on the diagonal.
 * Measured at the inputs of the synthetic-weight convs: Wan2.1's neighbours
 * correlate 0.57-0.86 within a frame and 0.1-0.2 across frames, SeedVR2's ~0.2 within a frame and
 * 0.5-0.8 across; one RHO for every axis serves both (the weights' share of the error: Wan2.1
 * decoder -48% in variance, SeedVR2 -38%), where a prior fitted to either loses on the other.
 * DAMP bounds the cost where the input is not smooth at all: against white noise the weights'
 * error grows ~1.4x in variance, against a plane it falls ~4x (tests/test_executor.c). */
#define FP8_RHO 0.5
#define FP8_DAMP 0.05

/* l [n][n] lower with a = l l^T (a symmetric [n][n]); 0 where a is not positive definite */
static int cholesky(int n, const double *a, double *l) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++) {
            double s = a[i * n + j];
            for (int k = 0; k < j; k++)
                s -= l[i * n + k] * l[j * n + k];
            if (i == j && s <= 0) return 0;
            l[i * n + j] = i == j ? sqrt(s) : s / l[j * n + j];
        }
    return 1;
}

/* u [n][n]: the upper Cholesky factor of the prior's inverse (inverse = u^T u), with which the
 * taps' rounding errors are spread over the taps after them (GPTQ's update). 0: the prior was
 * not positive definite (it always is: RHO < 1). */
static int tap_factor(int kt, int kh, int kw, double *u) {
    const int n = kt * kh * kw, hw = kh * kw;
    double a[VAE_FP8_MAX_TAPS * VAE_FP8_MAX_TAPS], l[VAE_FP8_MAX_TAPS * VAE_FP8_MAX_TAPS];
    double li[VAE_FP8_MAX_TAPS * VAE_FP8_MAX_TAPS] = {0};
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            const int d =
                abs(i / hw - j / hw) + abs(i % hw / kw - j % hw / kw) + abs(i % kw - j % kw);
            a[i * n + j] = pow(FP8_RHO, d) + (i == j ? FP8_DAMP : 0.0);
        }
    if (!cholesky(n, a, l)) return 0;
    for (int j = 0; j < n; j++) /* li = l^-1, column by column: forward substitution */
        for (int i = j; i < n; i++) {
            double s = i == j ? 1.0 : 0.0;
            for (int k = j; k < i; k++)
                s -= l[i * n + k] * li[k * n + j];
            li[i * n + j] = s / l[i * n + i];
        }
    for (int i = 0; i < n; i++) /* the inverse li^T li into a */
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = i > j ? i : j; k < n; k++)
                s += li[k * n + i] * li[k * n + j];
            a[i * n + j] = s;
        }
    if (!cholesky(n, a, l)) return 0; /* inverse = l l^T: u = l^T */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            u[i * n + j] = j >= i ? l[j * n + i] : 0.0;
    return 1;
}

enum { LANES = 16 }; /* input channels rounded side by side (the arithmetic vectorises) */

/* The taps w [m][n] of m <= LANES (output, input) channel pairs (rows n apart) rounded onto the
 * grid of s into out, tap by tap, each rounding error spread over the taps not yet rounded as the
 * prior says (u: NULL, to the nearest value alone). */
static void round_taps(const float *w, int m, int n, float s, const float *u, float *out) {
    float v[VAE_FP8_MAX_TAPS][LANES] = {{0}}, e[LANES];
    for (int c = 0; c < m; c++)
        for (int k = 0; k < n; k++)
            v[k][c] = w[c * n + k];
    for (int j = 0; j < n; j++) {
        const float d = u ? 1.0f / u[j * n + j] : 0.0f;
        for (int c = 0; c < LANES; c++) {
            const float q = vae_f32_round_e4m3(v[j][c] / s) * s;
            e[c] = (v[j][c] - q) * d;
            v[j][c] = q;
        }
        for (int k = j + 1; u && k < n; k++)
            for (int c = 0; c < LANES; c++)
                v[k][c] -= e[c] * u[j * n + k];
    }
    for (int c = 0; c < m; c++)
        for (int k = 0; k < n; k++)
            out[c * n + k] = v[k][c];
}

/* One output channel's filters wo [c_in][n] onto the grid of s into yo (vae_fp8_weights_round) */
static void round_channel(const float *wo, int c_in, int n, float s, const float *u, float *yo) {
    const int64_t per = (int64_t)c_in * n;
    if (s == 0) { /* a channel of zeros */
        memset(yo, 0, (size_t)per * sizeof *yo);
    } else if (n > VAE_FP8_MAX_TAPS) { /* no prior this large: each tap to its nearest value */
        for (int64_t i = 0; i < per; i++)
            yo[i] = vae_f32_round_e4m3(wo[i] / s) * s;
    } else {
        for (int ci = 0; ci < c_in; ci += LANES)
            round_taps(wo + (int64_t)ci * n, c_in - ci < LANES ? c_in - ci : LANES, n, s, u,
                       yo + (int64_t)ci * n);
    }
}

/* yo [c_in][n], on the grid of s, as codes [n][c_in] (the channels-last layout) */
static void encode_channel(const float *yo, int c_in, int n, float s, uint8_t *co) {
    for (int c = 0; c < c_in; c++)
        for (int k = 0; k < n; k++) /* yo / s is a code's value to float32 rounding */
            co[(int64_t)k * c_in + c] = s > 0 ? vae_f32_to_e4m3(yo[(int64_t)c * n + k] / s) : 0;
}

/* The rounding of every output channel into out (float32) or codes (E4M3, channels last). */
static int round_filters(const float *w, int c_out, int c_in, int kt, int kh, int kw,
                         const float *scale, float *out, uint8_t *codes, int threads) {
    const int n = kt * kh * kw;
    double ud[VAE_FP8_MAX_TAPS * VAE_FP8_MAX_TAPS];
    float u[VAE_FP8_MAX_TAPS * VAE_FP8_MAX_TAPS];
    const int spread = n > 1 && n <= VAE_FP8_MAX_TAPS && tap_factor(kt, kh, kw, ud);
    for (int i = 0; spread && i < n * n; i++)
        u[i] = (float)ud[i];
    const int64_t per = (int64_t)c_in * n;
    int ok = 1;
    /* the output channels spread over the threads; for codes each thread rounds one channel at a
     * time into a buffer of its own */
#pragma omp parallel num_threads(threads > 0 ? threads : omp_get_max_threads())
    {
        float *buf = codes ? vae_malloc((size_t)per * sizeof *buf) : NULL;
        if (codes && !buf) {
#pragma omp atomic write
            ok = 0;
        }
#pragma omp for schedule(dynamic, 4)
        for (int o = 0; o < c_out; o++) {
            float *yo = codes ? buf : out + o * per;
            if (!yo) continue;
            round_channel(w + o * per, c_in, n, scale[o], spread ? u : NULL, yo);
            if (codes) encode_channel(yo, c_in, n, scale[o], codes + o * per);
        }
        vae_free(buf);
    }
    return ok;
}

void vae_fp8_weights_round(const float *w, int c_out, int c_in, int kt, int kh, int kw,
                           const float *scale, float *out, int threads) {
    round_filters(w, c_out, c_in, kt, kh, kw, scale, out, NULL, threads);
}

int vae_fp8_weights_codes(const float *w, int c_out, int c_in, int kt, int kh, int kw,
                          const float *scale, uint8_t *codes, int threads) {
    return round_filters(w, c_out, c_in, kt, kh, kw, scale, NULL, codes, threads);
}
