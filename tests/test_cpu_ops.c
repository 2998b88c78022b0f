/* test_cpu_ops.c -- the CPU backend's ops against naive double-precision references.
 *
 * Every op kind runs on fresh random inputs (seeded PRNG) for several shapes and parameters and is
 * compared with a direct implementation of program.h's definition written here in double:
 * relative error ||y - ref|| / ||ref|| <= 1e-5 and no NaN. Also: frame lists at non-contiguous
 * addresses, in-place ops, alloc accounting, error paths, and one timing line (3x3x3 conv).
 * Prints "N passed, M failed"; exits non-zero on any failure.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "core/backend.h"
#include "core/core.h"
#include "core/dtype.h"
#include "core/fp8.h"
#include "core/op.h"
#include "core/program.h"

static int n_pass, n_fail;
static const double TOL = 1e-5;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (cond) {                                                                                \
            n_pass++;                                                                              \
        } else {                                                                                   \
            n_fail++;                                                                              \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

/* ---- helpers -------------------------------------------------------------------------------- */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float frand(void) {
    return (float)((rng_next() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

static float *rand_buf(size_t n, float scale, float offset) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = frand() * scale + offset;
    return p;
}

static void fill_nan(float *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
}

/* relative L2 error of y against ref; returns INFINITY if y has a NaN/Inf */
static double rel_err(const float *y, const double *ref, size_t n) {
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) return INFINITY;
        double d = (double)y[i] - ref[i];
        e += d * d;
        r += ref[i] * ref[i];
    }
    if (r == 0) return sqrt(e);
    return sqrt(e / r);
}

static double act_ref(vae_act act, double s, double x) {
    switch (act) {
    case VAE_ACT_SILU: return x / (1.0 + exp(-x));
    case VAE_ACT_RELU: return x > 0 ? x : 0;
    case VAE_ACT_TANH_SCALE: return tanh(x / s) * s;
    case VAE_ACT_CLAMP01: return x < 0 ? 0 : x > 1 ? 1 : x;
    default: return x;
    }
}
static const char *act_name(vae_act a) {
    static const char *names[] = {"none", "silu", "relu", "tanh_scale", "clamp01"};
    return names[a];
}

static vae_backend *new_backend(int threads) {
    vae_backend *be = NULL;
    int rc = vae_cpu_backend_create(&be, VAE_DTYPE_F32, threads);
    if (rc != VAE_OK || !be) {
        printf("cannot create CPU backend: %s\n", vae_last_error());
        exit(2);
    }
    return be;
}

/* ---- CONV ----------------------------------------------------------------------------------- */
typedef struct conv_case {
    const char *name;
    int c_in, c_out, kt, kh, kw, st, sh, sw, pt, pb, pl, pr;
    int n_in, h, w;
    int bias, residual; /* residual: 0 off, 1 separate buffer, 2 residual == y */
    int scattered;      /* frames at separate, non-contiguous addresses */
    int threads;
    size_t scratch_limit; /* 0 = default */
} conv_case;

/* groups > 1: a grouped conv, group g = [g cig, (g+1) cig) of the inputs -> its c_out / groups
 * outputs, weight [c_out][cig][kt][kh][kw] (cig = c_in / groups) */
static void conv_ref(const conv_case *cc, int groups, const float *wt, const float *b,
                     const float *const *fr, const float *res, double *ref, int t_out, int ho,
                     int wo) {
    groups = groups > 1 ? groups : 1;
    const int cig = cc->c_in / groups;
    for (int j = 0; j < t_out; j++)
        for (int oh = 0; oh < ho; oh++)
            for (int ow = 0; ow < wo; ow++)
                for (int co = 0; co < cc->c_out; co++) {
                    double s = b ? b[co] : 0.0;
                    const int g = co / (cc->c_out / groups); /* group g reads [g cig, (g+1) cig) */
                    for (int cl = 0; cl < cig; cl++)
                        for (int dt = 0; dt < cc->kt; dt++)
                            for (int dh = 0; dh < cc->kh; dh++)
                                for (int dw = 0; dw < cc->kw; dw++) {
                                    int ih = oh * cc->sh - cc->pt + dh,
                                        iw = ow * cc->sw - cc->pl + dw;
                                    if (ih < 0 || ih >= cc->h || iw < 0 || iw >= cc->w) continue;
                                    const int ci = g * cig + cl;
                                    double wv = wt[(((size_t)co * cig + cl) * cc->kt + dt) *
                                                       cc->kh * cc->kw +
                                                   dh * cc->kw + dw];
                                    s += wv * fr[j * cc->st + dt]
                                                [((size_t)ih * cc->w + iw) * cc->c_in + ci];
                                }
                    size_t o = (((size_t)j * ho + oh) * wo + ow) * cc->c_out + co;
                    if (res) s += res[o];
                    ref[o] = s;
                }
}

/* groups: op.groups (> 1: depthwise, op.h) */
static void test_conv_groups(const conv_case *cc, int groups) {
    vae_backend *be = new_backend(cc->threads);
    if (cc->scratch_limit) cpu_be(be)->scratch_limit = cc->scratch_limit;
    int K = cc->c_in / (groups > 1 ? groups : 1) * cc->kt * cc->kh * cc->kw;
    int t_out = (cc->n_in - cc->kt) / cc->st + 1;
    int ho = (cc->h + cc->pt + cc->pb - cc->kh) / cc->sh + 1;
    int wo = (cc->w + cc->pl + cc->pr - cc->kw) / cc->sw + 1;
    size_t fsz = (size_t)cc->h * cc->w * cc->c_in, ysz = (size_t)t_out * ho * wo * cc->c_out;

    float *wt = rand_buf((size_t)cc->c_out * K, 1.0f / sqrtf((float)K), 0.0f);
    float *b = cc->bias ? rand_buf(cc->c_out, 0.5f, 0.0f) : NULL;
    const float **fr = malloc(cc->n_in * sizeof *fr);
    float *block = NULL, **own = calloc(cc->n_in, sizeof *own);
    if (cc->scattered) { /* separate allocations, in reverse order, with gaps */
        for (int i = cc->n_in - 1; i >= 0; i--) {
            own[i] = rand_buf(fsz + 17, 1.0f, 0.0f);
            fr[i] = own[i] + 3;
        }
    } else {
        block = rand_buf(fsz * cc->n_in, 1.0f, 0.0f);
        for (int i = 0; i < cc->n_in; i++)
            fr[i] = block + i * fsz;
    }
    float *y = be->v->alloc(be, ysz * sizeof(float));
    float *res = NULL;
    double *ref = malloc(ysz * sizeof *ref);
    if (cc->residual == 1) res = rand_buf(ysz, 1.0f, 0.0f);
    if (cc->residual == 2) {
        res = rand_buf(ysz, 1.0f, 0.0f);
    }

    vae_op op = vae_op_make(VAE_OP_CONV, 0, cc->c_in, cc->c_out);
    op.kt = cc->kt, op.kh = cc->kh, op.kw = cc->kw, op.st = cc->st, op.sh = cc->sh, op.sw = cc->sw;
    op.pad_h[0] = cc->pt, op.pad_h[1] = cc->pb, op.pad_w[0] = cc->pl, op.pad_w[1] = cc->pr;
    op.w = wt, op.b = b;
    op.groups = groups;
    snprintf(op.name, sizeof op.name, "test.conv.%s", cc->name);
    conv_ref(cc, groups, wt, b, fr, res, ref, t_out, ho, wo);

    void *state = NULL;
    int rc = be->v->prepare(be, &op, &state);
    EXPECT(rc == VAE_OK, "conv %s: prepare rc %d (%s)", cc->name, rc, vae_last_error());
    const float *resid = res;
    if (cc->residual == 2) { /* residual aliasing the output */
        memcpy(y, res, ysz * sizeof(float));
        resid = y;
    } else {
        fill_nan(y, ysz); /* the output's old contents must not matter */
    }
    for (int rep = 0; rep < 2 && rc == VAE_OK; rep++) { /* twice: scratch reuse */
        if (rep == 1 && cc->residual == 2) memcpy(y, res, ysz * sizeof(float));
        rc = be->v->conv(be, &op, state, (const void *const *)fr, cc->n_in, cc->h, cc->w, resid, y,
                         t_out, ho, wo);
        EXPECT(rc == VAE_OK, "conv %s: rc %d (%s)", cc->name, rc, vae_last_error());
        double e = rel_err(y, ref, ysz);
        EXPECT(e <= TOL, "conv %s (rep %d): rel err %.3g", cc->name, rep, e);
    }
    be->v->unprepare(be, &op, state);
    be->v->release(be, y);
    EXPECT(be->bytes_in_use == 0, "conv %s: %lld bytes still in use", cc->name,
           (long long)be->bytes_in_use);
    be->v->destroy(be);
    for (int i = 0; i < cc->n_in; i++)
        free(own[i]);
    free(own);
    free(block);
    free(fr);
    free(wt);
    free(b);
    free(res);
    free(ref);
}

/* ---- FP8 emulation (VAE_DTYPE_FP8) ----------------------------------------------------------- */
/* E4M3 rounding: every finite code is a fixed point; a midpoint between neighbours goes to the
 * even code; beyond 448 saturates; below half the smallest subnormal goes to zero. The codes
 * (vae_f32_to_e4m3) of those values. */
static void test_e4m3_round(void) {
    int bad = 0;
    for (int code = 0; code < 256; code++) {
        if ((code & 0x7f) == 0x7f) continue; /* NaN */
        const float v = vae_f8e4m3_to_f32((uint8_t)code);
        bad += vae_f32_round_e4m3(v) != v;
        if ((code & 0x7f) < 0x7e) { /* the midpoint to the next larger magnitude */
            const float up = vae_f8e4m3_to_f32((uint8_t)(code + 1)), mid = 0.5f * (v + up);
            const float want = (code & 1) ? up : v; /* ties to the even code */
            bad += vae_f32_round_e4m3(mid) != want;
            bad += vae_f32_round_e4m3(0.75f * v + 0.25f * up) != v;
        }
    }
    /* codes: each one's value gives it back; any float's code is its rounded value's */
    for (int code = 0; code < 256; code++)
        bad += (code & 0x7f) != 0x7f && vae_f32_to_e4m3(vae_f8e4m3_to_f32((uint8_t)code)) != code;
    for (int i = 0; i < 100000; i++) {
        const float x = ldexpf(frand(), (i % 40) - 20);
        const float r = vae_f32_round_e4m3(x), back = vae_f8e4m3_to_f32(vae_f32_to_e4m3(x));
        bad += back != r || signbit(back) != signbit(r);
    }
    bad += vae_f32_to_e4m3(NAN) != 0x7f || vae_f32_to_e4m3(1e9f) != 0x7e;
    bad += vae_f32_round_e4m3(1e6f) != 448.0f || vae_f32_round_e4m3(-500.0f) != -448.0f;
    bad += vae_f32_round_e4m3(ldexpf(1.0f, -11)) != 0.0f || !isnan(vae_f32_round_e4m3(NAN));
    EXPECT(bad == 0, "e4m3 rounding: %d wrong values (fixed points, ties to even, saturation)",
           bad);
}

/* A conv in the FP8 emulation equals the float64 conv of the scaled-E4M3 weights (per output
 * channel, rounded by fp8.h's rule) and input (per call) to float32 rounding, and is near (not
 * equal to) the float32 conv; a narrow conv (<= 16 channels) stays float32. */
static void test_conv_fp8(int c_in, int c_out) {
    vae_backend *be = NULL;
    int rc = vae_cpu_backend_create(&be, VAE_DTYPE_FP8, 2);
    EXPECT(rc == VAE_OK, "fp8 backend: %s", vae_last_error());
    if (rc) return;
    const conv_case cc = {"fp8", c_in, c_out, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 9, 7, 1, 1, 0, 2, 0};
    const int K = c_in * 27, ho = cc.h, wo = cc.w;
    const size_t fsz = (size_t)cc.h * cc.w * c_in, ysz = (size_t)ho * wo * c_out;
    float *wt = rand_buf((size_t)c_out * K, 1.0f / sqrtf((float)K), 0.0f);
    float *b = rand_buf(c_out, 0.5f, 0.0f), *res = rand_buf(ysz, 1.0f, 0.0f);
    float *x = rand_buf(fsz * 3, 2.0f, 0.3f), *xq = malloc(fsz * 3 * sizeof *xq);
    float *wq = malloc((size_t)c_out * K * sizeof *wq);
    const float *fr[3] = {x, x + fsz, x + 2 * fsz}, *frq[3] = {xq, xq + fsz, xq + 2 * fsz};
    vae_op op = vae_op_make(VAE_OP_CONV, 0, c_in, c_out);
    op.kt = op.kh = op.kw = 3, op.st = op.sh = op.sw = 1;
    op.pad_h[0] = op.pad_h[1] = op.pad_w[0] = op.pad_w[1] = 1;
    op.w = wt, op.b = b;
    op.fp8 = vae_op_fp8_shape(&op); /* as if in a residual branch: vae_program_mark_fp8 */
    snprintf(op.name, sizeof op.name, "test.conv.fp8.%dx%d", c_in, c_out);
    const int fp8 = vae_op_fp8(&op);
    /* the reference's operands: rounded as documented (or not at all for a narrow conv) */
    float amax = 0;
    for (size_t i = 0; i < fsz * 3; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    for (size_t i = 0; i < fsz * 3; i++)
        xq[i] = fp8 ? vae_f32_round_e4m3(x[i] / (amax / 448)) * (amax / 448) : x[i];
    float *ws = malloc((size_t)c_out * sizeof *ws); /* fp8.h: each channel's largest / 448 */
    for (int co = 0; co < c_out; co++) {
        ws[co] = 0;
        for (int k = 0; k < K; k++)
            ws[co] = fmaxf(ws[co], fabsf(wt[(size_t)co * K + k]) / 448);
    }
    if (fp8)
        vae_fp8_weights_round(wt, c_out, c_in, 3, 3, 3, ws, wq, 1);
    else
        memcpy(wq, wt, (size_t)c_out * K * sizeof *wq);
    free(ws);
    double *ref = malloc(ysz * sizeof *ref), *ref32 = malloc(ysz * sizeof *ref32);
    conv_ref(&cc, 0, wq, b, frq, res, ref, 1, ho, wo);
    conv_ref(&cc, 0, wt, b, fr, res, ref32, 1, ho, wo);
    float *y = be->v->alloc(be, ysz * sizeof(float));
    void *state = NULL;
    rc = be->v->prepare(be, &op, &state);
    if (rc == VAE_OK)
        rc = be->v->conv(be, &op, state, (const void *const *)fr, 3, cc.h, cc.w, res, y, 1, ho, wo);
    EXPECT(rc == VAE_OK, "fp8 conv %dx%d: %s", c_in, c_out, vae_last_error());
    const double e = rel_err(y, ref, ysz), e32 = rel_err(y, ref32, ysz);
    EXPECT(e <= TOL, "fp8 conv %d->%d: against the rounded operands %.3g", c_in, c_out, e);
    EXPECT(fp8 ? e32 > 1e-3 && e32 < 0.1 : e32 <= TOL, "fp8 conv %d->%d (%s): against float32 %.3g",
           c_in, c_out, fp8 ? "quantised" : "narrow, kept float32", e32);
    if (state) be->v->unprepare(be, &op, state);
    be->v->release(be, y);
    be->v->destroy(be);
    free(wt), free(b), free(res), free(x), free(xq), free(wq), free(ref), free(ref32);
}

/* ---- norms ---------------------------------------------------------------------------------- */
/* A GroupNorm split into three row bands as a device group runs it (backend.h norm_stats, then
 * norm_apply with the sums of all bands): against the reference of the whole frame. */
static void test_norm_bands(vae_backend *be, const vae_op *op, const float *x, int t, int h, int w,
                            float offset, const double *ref) {
    const size_t n = (size_t)t * h * w * op->c_in, ns = (size_t)t * op->groups * 3;
    float *y = malloc(n * sizeof *y);
    double *sum = calloc(ns, sizeof *sum), *part = malloc(ns * sizeof *part);
    int rc = VAE_OK;
    for (int k = 0; k < 3 && rc == VAE_OK; k++) {
        const int y0 = h * k / 3, y1 = h * (k + 1) / 3;
        rc = be->v->norm_stats(be, op, x, t, h, w, y0, y1 - y0, part, 0);
        for (size_t i = 0; i < ns; i++)
            sum[i] += part[i];
    }
    fill_nan(y, n);
    if (rc == VAE_OK) rc = be->v->norm_apply(be, op, NULL, x, y, t, h, w, sum, 0);
    EXPECT(rc == VAE_OK, "group_norm in bands: rc %d (%s)", rc, vae_last_error());
    const double e = rc ? 1.0 : rel_err(y, ref, n);
    EXPECT(e <= TOL, "group_norm c=%d groups=%d t=%d %dx%d offset=%g in 3 row bands: rel err %.3g",
           op->c_in, op->groups, t, h, w, offset, e);
    free(y), free(sum), free(part);
}

/* An RMS norm over rows of columns (backend.h norm_rows, what column strips run): columns
 * [2, w - 1) of x (rows t * h) into columns [1, w - 2) of a y two columns wider; y's other
 * columns must keep their NaN, the rest match the reference of the whole frame. */
static void test_norm_rows(vae_backend *be, const vae_op *op, const float *x, int t, int h, int w,
                           const double *ref) {
    const int c = op->c_in, cols = w - 3, yw = w + 2;
    const size_t rows = (size_t)t * h, n = rows * yw * c;
    float *y = malloc(n * sizeof *y);
    fill_nan(y, n);
    int rc = be->v->norm_rows(be, op, NULL, x + 2 * c, sizeof(float) * w * c, y + c,
                              sizeof(float) * yw * c, (int64_t)rows, cols);
    EXPECT(rc == VAE_OK, "norm_rows rc %d (%s)", rc, vae_last_error());
    double e = 0;
    size_t kept = 0;
    for (size_t r = 0; r < rows; r++)
        for (int col = 0; col < yw; col++)
            for (int i = 0; i < c; i++) {
                const float v = y[(r * yw + col) * c + i];
                if (col < 1 || col >= 1 + cols) {
                    kept += isnan(v) != 0;
                    continue;
                }
                const double want = ref[(r * w + col + 1) * c + i];
                const double d = fabs(v - want) / (fabs(want) + 1.0);
                if (!(d <= e)) e = isnan(d) ? 1.0 : d;
            }
    EXPECT(e <= TOL && kept == rows * (yw - cols) * c,
           "rms_norm rows c=%d %zu rows of %d columns: rel err %.3g, %zu of %zu outside kept", c,
           rows, cols, e, kept, rows * (yw - cols) * c);
    vae_error_clear();
    rc = be->v->norm_rows(be, op, NULL, x, sizeof(float) * (w * c - 1), y, sizeof(float) * yw * c,
                          (int64_t)rows, w);
    EXPECT(rc == VAE_ESHAPE && strstr(vae_last_error(), op->name),
           "norm_rows with a pitch shorter than its row: rc %d (%s)", rc, vae_last_error());
    vae_error_clear();
    free(y);
}

/* The bound an E4M3 conv takes as the magnitude of an RMS norm's output (op.h vae_op_rms_bound):
 * random pixels stay within it, and pixels of one channel each (the sign that adds to the bias;
 * SiLU: the positive side) reach it, so it is the least bound of the norm's weights. */
static void test_rms_bound(int c, vae_act act) {
    vae_backend *be = new_backend(0);
    const int rand_px = 64, px = rand_px + c;
    float *x = rand_buf((size_t)px * c, 2.0f, 0.0f), *y = malloc((size_t)px * c * sizeof *y);
    float *g = rand_buf(c, 1.5f, 0.0f), *b = rand_buf(c, 0.5f, 0.0f);
    for (int k = 0; k < c; k++) { /* pixel rand_px + k: only channel k, toward b[k]'s sign */
        float *xp = x + (size_t)(rand_px + k) * c;
        memset(xp, 0, (size_t)c * sizeof *xp);
        const int up = act == VAE_ACT_SILU || b[k] >= 0; /* y_k = +-(sqrt(C) |g_k|) + b_k */
        xp[k] = (g[k] < 0) != up ? 0.3f : -0.3f;
    }
    vae_op op = vae_op_make(VAE_OP_RMS_NORM, 0, c, c);
    op.act = act, op.w = g, op.b = b;
    snprintf(op.name, sizeof op.name, "test.rms_bound");
    const int rc = be->v->norm(be, &op, NULL, x, y, 1, 1, px);
    float m = 0;
    for (size_t i = 0; i < (size_t)px * c; i++)
        m = fmaxf(m, fabsf(y[i]));
    const float bound = vae_op_rms_bound(&op);
    EXPECT(rc == VAE_OK && m <= bound && m >= 0.999f * bound,
           "rms bound c=%d act=%s: largest |y| %g, bound %g (rc %d)", c, act_name(act), m, bound,
           rc);
    free(x), free(y), free(g), free(b);
    be->v->destroy(be);
}

static void test_norm(vae_op_kind kind, int c, int groups, vae_act act, int t, int h, int w,
                      float offset, int has_w, int has_b, int in_place) {
    vae_backend *be = new_backend(0);
    size_t n = (size_t)t * h * w * c;
    float *x = rand_buf(n, 1.5f, offset);
    float *g = has_w ? rand_buf(c, 1.0f, 1.0f) : NULL;
    float *b = has_b ? rand_buf(c, 0.5f, 0.0f) : NULL;
    double *ref = malloc(n * sizeof *ref);
    vae_op op = vae_op_make(kind, 0, c, c);
    op.act = act, op.act_scale = 3.0f, op.eps = 1e-6f, op.groups = groups, op.w = g, op.b = b;
    snprintf(op.name, sizeof op.name, "test.norm");

    if (kind == VAE_OP_RMS_NORM) {
        for (size_t v = 0; v < n / c; v++) {
            double ss = 0;
            for (int i = 0; i < c; i++)
                ss += (double)x[v * c + i] * x[v * c + i];
            double nrm = fmax(sqrt(ss), 1e-12);
            for (int i = 0; i < c; i++) {
                double r =
                    x[v * c + i] / nrm * sqrt((double)c) * (g ? g[i] : 1.0) + (b ? b[i] : 0.0);
                ref[v * c + i] = act_ref(act, 3.0, r);
            }
        }
    } else {
        int cg = c / groups;
        size_t hw = (size_t)h * w;
        for (int f = 0; f < t; f++)
            for (int gi = 0; gi < groups; gi++) {
                double s = 0, s2 = 0, cnt = (double)cg * hw;
                for (size_t p = 0; p < hw; p++)
                    for (int i = gi * cg; i < (gi + 1) * cg; i++)
                        s += x[(f * hw + p) * c + i];
                double mean = s / cnt;
                for (size_t p = 0; p < hw; p++)
                    for (int i = gi * cg; i < (gi + 1) * cg; i++) {
                        double d = x[(f * hw + p) * c + i] - mean;
                        s2 += d * d;
                    }
                double rstd = 1.0 / sqrt(s2 / cnt + 1e-6);
                for (size_t p = 0; p < hw; p++)
                    for (int i = gi * cg; i < (gi + 1) * cg; i++) {
                        size_t o = (f * hw + p) * c + i;
                        double r = (x[o] - mean) * rstd * (g ? g[i] : 1.0) + (b ? b[i] : 0.0);
                        ref[o] = act_ref(act, 3.0, r);
                    }
            }
    }
    if (kind == VAE_OP_GROUP_NORM) test_norm_bands(be, &op, x, t, h, w, offset, ref);
    if (kind == VAE_OP_RMS_NORM && w > 3) test_norm_rows(be, &op, x, t, h, w, ref);
    float *y = in_place ? x : malloc(n * sizeof *y);
    if (!in_place) fill_nan(y, n);
    int rc = be->v->norm(be, &op, NULL, x, y, t, h, w);
    EXPECT(rc == VAE_OK, "norm rc %d (%s)", rc, vae_last_error());
    double e = rel_err(y, ref, n);
    EXPECT(e <= TOL, "%s c=%d groups=%d act=%s t=%d %dx%d offset=%g%s: rel err %.3g",
           kind == VAE_OP_RMS_NORM ? "rms_norm" : "group_norm", c, groups, act_name(act), t, h, w,
           offset, in_place ? " in-place" : "", e);
    if (!in_place) free(y);
    free(x);
    free(g);
    free(b);
    free(ref);
    be->v->destroy(be);
}

/* ---- eltwise -------------------------------------------------------------------------------- */
static void test_eltwise(vae_op_kind kind, vae_act act, int c, int64_t n_vox, int in_place) {
    vae_backend *be = new_backend(0);
    size_t n = (size_t)n_vox * c;
    float *a = rand_buf(n, 4.0f, 0.0f), *b2 = rand_buf(n, 4.0f, 0.0f);
    float *sc = rand_buf(c, 2.0f, 0.0f), *sh = rand_buf(c, 1.0f, 0.0f);
    double *ref = malloc(n * sizeof *ref);
    vae_op op = vae_op_make(kind, 0, c, c);
    op.act = act, op.act_scale = 2.5f;
    if (kind == VAE_OP_SCALE_SHIFT) op.w = sc, op.b = sh;
    snprintf(op.name, sizeof op.name, "test.eltwise");
    for (size_t i = 0; i < n; i++) {
        double v = a[i];
        if (kind == VAE_OP_ADD) v += b2[i];
        if (kind == VAE_OP_SCALE_SHIFT) v = v * sc[i % c] + sh[i % c];
        ref[i] = act_ref(act, 2.5, v);
    }
    float *y = in_place ? a : malloc(n * sizeof *y);
    if (!in_place) fill_nan(y, n);
    int rc = be->v->eltwise(be, &op, NULL, a, b2, y, n_vox);
    EXPECT(rc == VAE_OK, "eltwise rc %d (%s)", rc, vae_last_error());
    double e = rel_err(y, ref, n);
    EXPECT(e <= TOL, "eltwise kind %d act %s c=%d n=%lld%s: rel err %.3g", (int)kind, act_name(act),
           c, (long long)n_vox, in_place ? " in-place" : "", e);
    if (!in_place) free(y);
    free(a);
    free(b2);
    free(sc);
    free(sh);
    free(ref);
    be->v->destroy(be);
}

/* ---- resample ------------------------------------------------------------------------------- */
static void test_upsample(int c, int fs, int n_in, int h, int w) {
    vae_backend *be = new_backend(0);
    size_t nx = (size_t)n_in * h * w * c, ny = nx * fs * fs;
    float *x = rand_buf(nx, 1.0f, 0.0f), *y = malloc(ny * sizeof *y);
    double *ref = malloc(ny * sizeof *ref);
    fill_nan(y, ny);
    int ho = h * fs, wo = w * fs;
    for (int t = 0; t < n_in; t++)
        for (int oh = 0; oh < ho; oh++)
            for (int ow = 0; ow < wo; ow++)
                for (int i = 0; i < c; i++)
                    ref[(((size_t)t * ho + oh) * wo + ow) * c + i] =
                        x[(((size_t)t * h + oh / fs) * w + ow / fs) * c + i];
    vae_op op = vae_op_make(VAE_OP_UPSAMPLE, 0, c, c);
    op.fs = fs;
    snprintf(op.name, sizeof op.name, "test.upsample");
    const void *frames[1] = {x};
    int rc = be->v->resample(be, &op, frames, n_in, h, w, y, n_in);
    EXPECT(rc == VAE_OK, "upsample rc %d (%s)", rc, vae_last_error());
    double e = rel_err(y, ref, ny);
    EXPECT(e <= TOL, "upsample c=%d fs=%d %dx%dx%d: rel err %.3g", c, fs, n_in, h, w, e);
    free(x);
    free(y);
    free(ref);
    be->v->destroy(be);
}

typedef struct shuf_case {
    const char *name;
    int c_in, c_out, ft, fs, cs_o, cs_t, cs_h, cs_w, group;
    int n_in, h, w; /* SHUFFLE_DOWN: n_in = ft * t_out */
} shuf_case;

static void test_shuffle_up(const shuf_case *sc) {
    vae_backend *be = new_backend(0);
    int t_out = sc->n_in * sc->ft, ho = sc->h * sc->fs, wo = sc->w * sc->fs;
    size_t nx = (size_t)sc->n_in * sc->h * sc->w * sc->c_in,
           ny = (size_t)t_out * ho * wo * sc->c_out;
    float *x = rand_buf(nx, 1.0f, 0.0f), *y = malloc(ny * sizeof *y);
    double *ref = malloc(ny * sizeof *ref);
    fill_nan(y, ny);
    for (int tt = 0; tt < t_out; tt++)
        for (int oh = 0; oh < ho; oh++)
            for (int ow = 0; ow < wo; ow++)
                for (int o = 0; o < sc->c_out; o++) {
                    int t = tt / sc->ft, ti = tt % sc->ft, hh = oh / sc->fs, hi = oh % sc->fs;
                    int ww = ow / sc->fs, wi = ow % sc->fs;
                    int ch =
                        (o * sc->cs_o + ti * sc->cs_t + hi * sc->cs_h + wi * sc->cs_w) / sc->group;
                    ref[(((size_t)tt * ho + oh) * wo + ow) * sc->c_out + o] =
                        x[(((size_t)t * sc->h + hh) * sc->w + ww) * sc->c_in + ch];
                }
    vae_op op = vae_op_make(VAE_OP_SHUFFLE_UP, 0, sc->c_in, sc->c_out);
    op.ft = sc->ft, op.fs = sc->fs, op.cs_o = sc->cs_o, op.cs_t = sc->cs_t, op.cs_h = sc->cs_h;
    op.cs_w = sc->cs_w, op.group = sc->group;
    snprintf(op.name, sizeof op.name, "test.shuffle_up.%s", sc->name);
    const void *frames[1] = {x};
    int rc = be->v->resample(be, &op, frames, sc->n_in, sc->h, sc->w, y, t_out);
    EXPECT(rc == VAE_OK, "shuffle_up %s rc %d (%s)", sc->name, rc, vae_last_error());
    double e = rel_err(y, ref, ny);
    EXPECT(e <= TOL, "shuffle_up %s: rel err %.3g", sc->name, e);
    free(x);
    free(y);
    free(ref);
    be->v->destroy(be);
}

static void test_shuffle_down(const shuf_case *sc) {
    vae_backend *be = new_backend(0);
    int t_out = sc->n_in / sc->ft, ho = sc->h / sc->fs, wo = sc->w / sc->fs;
    size_t fsz = (size_t)sc->h * sc->w * sc->c_in, ny = (size_t)t_out * ho * wo * sc->c_out;
    float **own = malloc(sc->n_in * sizeof *own);
    const void **frames = malloc(sc->n_in * sizeof *frames);
    for (int i = sc->n_in - 1; i >= 0; i--) { /* scattered frames */
        own[i] = rand_buf(fsz + 5, 1.0f, 0.0f);
        frames[i] = own[i] + 5;
    }
    float *y = malloc(ny * sizeof *y);
    double *ref = calloc(ny, sizeof *ref);
    fill_nan(y, ny);
    for (int t = 0; t < t_out; t++)
        for (int oh = 0; oh < ho; oh++)
            for (int ow = 0; ow < wo; ow++)
                for (int c = 0; c < sc->c_in; c++)
                    for (int ti = 0; ti < sc->ft; ti++)
                        for (int hi = 0; hi < sc->fs; hi++)
                            for (int wi = 0; wi < sc->fs; wi++) {
                                int f =
                                    c * sc->cs_o + ti * sc->cs_t + hi * sc->cs_h + wi * sc->cs_w;
                                const float *fr = frames[t * sc->ft + ti];
                                double v =
                                    fr[((size_t)(oh * sc->fs + hi) * sc->w + ow * sc->fs + wi) *
                                           sc->c_in +
                                       c];
                                ref[(((size_t)t * ho + oh) * wo + ow) * sc->c_out +
                                    f / sc->group] += v / sc->group;
                            }
    vae_op op = vae_op_make(VAE_OP_SHUFFLE_DOWN, 0, sc->c_in, sc->c_out);
    op.ft = sc->ft, op.fs = sc->fs, op.cs_o = sc->cs_o, op.cs_t = sc->cs_t, op.cs_h = sc->cs_h;
    op.cs_w = sc->cs_w, op.group = sc->group;
    snprintf(op.name, sizeof op.name, "test.shuffle_down.%s", sc->name);
    int rc = be->v->resample(be, &op, frames, sc->n_in, sc->h, sc->w, y, t_out);
    EXPECT(rc == VAE_OK, "shuffle_down %s rc %d (%s)", sc->name, rc, vae_last_error());
    double e = rel_err(y, ref, ny);
    EXPECT(e <= TOL, "shuffle_down %s: rel err %.3g", sc->name, e);
    for (int i = 0; i < sc->n_in; i++)
        free(own[i]);
    free(own);
    free(frames);
    free(y);
    free(ref);
    be->v->destroy(be);
}

/* ---- attention ------------------------------------------------------------------------------ */
/* queries [q0, q1) of each frame (q1 = 0: all of them); the other rows must stay untouched */
static void test_attention(int c, int t, int h, int w, float qk_scale, size_t scratch_limit, int q0,
                           int q1) {
    vae_backend *be = new_backend(0);
    if (scratch_limit) cpu_be(be)->scratch_limit = scratch_limit;
    int n = h * w;
    if (q1 == 0) q1 = n;
    size_t nx = (size_t)t * n * 3 * c, ny = (size_t)t * n * c;
    float *qkv = rand_buf(nx, qk_scale, 0.0f), *y = malloc(ny * sizeof *y);
    double *ref = malloc(ny * sizeof *ref), *p = malloc(n * sizeof *p);
    fill_nan(y, ny);
    double scale = 1.0 / sqrt((double)c);
    for (int f = 0; f < t; f++) {
        const float *base = qkv + (size_t)f * n * 3 * c;
        for (int i = 0; i < n; i++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < n; j++) {
                double s = 0;
                for (int k = 0; k < c; k++)
                    s += (double)base[(size_t)i * 3 * c + k] * base[(size_t)j * 3 * c + c + k];
                p[j] = s * scale;
                mx = fmax(mx, p[j]);
            }
            for (int j = 0; j < n; j++)
                sum += (p[j] = exp(p[j] - mx));
            for (int k = 0; k < c; k++) {
                double acc = 0;
                for (int j = 0; j < n; j++)
                    acc += p[j] * base[(size_t)j * 3 * c + 2 * c + k];
                ref[((size_t)f * n + i) * c + k] = acc / sum;
            }
        }
    }
    vae_op op = vae_op_make(VAE_OP_ATTENTION, 0, 3 * c, c);
    op.scale = (float)scale;
    snprintf(op.name, sizeof op.name, "test.attention");
    int rc = be->v->attention(be, &op, NULL, qkv, y, t, h, w, q0, q1);
    EXPECT(rc == VAE_OK, "attention rc %d (%s)", rc, vae_last_error());
    double e = 0;
    int outside = 0; /* rows it should not have written */
    for (int f = 0; f < t; f++) {
        const size_t at = ((size_t)f * n + q0) * c, m = (size_t)(q1 - q0) * c;
        const double ef = rel_err(y + at, ref + at, m);
        e = ef > e ? ef : e;
        for (size_t i = (size_t)f * n * c; i < ((size_t)f + 1) * n * c; i++)
            outside += (i < at || i >= at + m) && !isnan(y[i]);
    }
    EXPECT(e <= TOL && outside == 0,
           "attention c=%d t=%d %dx%d (N=%d) queries [%d, %d) limit=%zu: rel err %.3g, %d values "
           "written outside",
           c, t, h, w, n, q0, q1, scratch_limit, e, outside);
    free(qkv);
    free(y);
    free(ref);
    free(p);
    be->v->destroy(be);
}

/* ---- sgemm (the helper under conv and attention) --------------------------------------------- */
static void test_sgemm(int threads, int trans_b, int m, int n, int k, float alpha, float beta) {
    int lda = k + 3, ldb = (trans_b ? k : n) + 5, ldc = n + 2; /* padded row strides */
    float *a = rand_buf((size_t)m * lda, 1.0f, 0.0f);
    float *b = rand_buf((size_t)(trans_b ? n : k) * ldb, 1.0f, 0.0f);
    float *c = rand_buf((size_t)m * ldc, 1.0f, 0.0f);
    double *ref = malloc((size_t)m * n * sizeof *ref);
    float *got = malloc((size_t)m * n * sizeof *got);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int p = 0; p < k; p++)
                s += (double)a[(size_t)i * lda + p] *
                     (trans_b ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]);
            ref[(size_t)i * n + j] =
                alpha * s + (beta == 0.0f ? 0.0 : (double)beta * c[(size_t)i * ldc + j]);
        }
    if (beta == 0.0f) /* old contents must be ignored, NaN included */
        for (int i = 0; i < m; i++)
            fill_nan(c + (size_t)i * ldc, n);
    int rc = cpu_sgemm(threads, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    EXPECT(rc == VAE_OK, "sgemm rc %d", rc);
    for (int i = 0; i < m; i++)
        memcpy(got + (size_t)i * n, c + (size_t)i * ldc, (size_t)n * sizeof *got);
    double e = rel_err(got, ref, (size_t)m * n);
    EXPECT(e <= TOL, "sgemm %s %dx%dx%d alpha %g beta %g threads %d: rel err %.3g",
           trans_b ? "NT" : "NN", m, n, k, alpha, beta, threads, e);
    free(a);
    free(b);
    free(c);
    free(ref);
    free(got);
}

/* ---- buffers, errors ------------------------------------------------------------------------ */
static void test_buffers(void) {
    vae_backend *be = new_backend(0);
    EXPECT(be->dtype == VAE_DTYPE_F32 && be->elem_size == 4, "backend dtype/elem_size");
    EXPECT(be->bytes_in_use == 0 && be->bytes_peak == 0, "fresh backend accounting");
    void *a = be->v->alloc(be, 1000), *b = be->v->alloc(be, 500);
    EXPECT(a && b, "alloc");
    EXPECT(((uintptr_t)a & 63) == 0 && ((uintptr_t)b & 63) == 0, "alloc 64-byte aligned");
    EXPECT(be->bytes_in_use == 1500 && be->bytes_peak == 1500, "in use %lld peak %lld (1500 1500)",
           (long long)be->bytes_in_use, (long long)be->bytes_peak);
    be->v->release(be, a);
    EXPECT(be->bytes_in_use == 500 && be->bytes_peak == 1500, "after release: %lld %lld",
           (long long)be->bytes_in_use, (long long)be->bytes_peak);
    void *c = be->v->alloc(be, 200);
    EXPECT(be->bytes_in_use == 700 && be->bytes_peak == 1500, "after realloc: %lld %lld",
           (long long)be->bytes_in_use, (long long)be->bytes_peak);
    void *d = be->v->alloc(be, 2000);
    EXPECT(be->bytes_in_use == 2700 && be->bytes_peak == 2700, "new peak: %lld %lld",
           (long long)be->bytes_in_use, (long long)be->bytes_peak);
    /* upload / download / copy / zero */
    float src[64], dst[64];
    for (int i = 0; i < 64; i++)
        src[i] = (float)i - 7.5f;
    EXPECT(be->v->upload(be, d, src, 64) == VAE_OK, "upload");
    EXPECT(be->v->copy(be, (float *)d + 64, d, 64 * sizeof(float)) == VAE_OK, "copy");
    EXPECT(be->v->download(be, dst, (float *)d + 64, 64) == VAE_OK && !memcmp(src, dst, sizeof src),
           "upload/copy/download round trip");
    EXPECT(be->v->zero(be, d, 64 * sizeof(float)) == VAE_OK, "zero");
    be->v->download(be, dst, d, 64);
    int zero = 1;
    for (int i = 0; i < 64; i++)
        zero &= dst[i] == 0.0f;
    EXPECT(zero, "zero fills zeros");
    EXPECT(be->v->sync(be) == VAE_OK, "sync");
    be->v->release(be, NULL);
    be->v->release(be, b);
    be->v->release(be, c);
    be->v->release(be, d);
    EXPECT(be->bytes_in_use == 0 && be->bytes_peak == 2700, "all released: %lld %lld",
           (long long)be->bytes_in_use, (long long)be->bytes_peak);
    /* injected allocation failure */
    vae_alloc_fail_after(1);
    void *e = be->v->alloc(be, 100);
    vae_alloc_fail_after(0);
    EXPECT(e == NULL && be->bytes_in_use == 0, "failed alloc returns NULL, accounting unchanged");
    be->v->destroy(be);
}

static void test_errors(void) {
    vae_backend *be = NULL;
    vae_error_clear();
    int rc = vae_cpu_backend_create(&be, VAE_DTYPE_F16, 0);
    EXPECT(rc == VAE_EUNSUPPORTED && be == NULL, "F16 backend: rc %d", rc);
    rc = vae_cpu_backend_create(&be, VAE_DTYPE_BF16, 2);
    EXPECT(rc == VAE_EUNSUPPORTED && be == NULL, "BF16 backend: rc %d", rc);
    be = new_backend(2);

    /* conv with a wrong output shape */
    float wt[2 * 3 * 9], x[5 * 5 * 3], y[5 * 5 * 2];
    for (size_t i = 0; i < sizeof wt / sizeof *wt; i++)
        wt[i] = 0.1f;
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = 1.0f;
    vae_op op = vae_op_make(VAE_OP_CONV, 0, 3, 2);
    op.kh = op.kw = 3, op.pad_h[0] = op.pad_h[1] = op.pad_w[0] = op.pad_w[1] = 1, op.w = wt;
    snprintf(op.name, sizeof op.name, "decoder.conv_bad");
    void *st = NULL;
    rc = be->v->prepare(be, &op, &st);
    EXPECT(rc == VAE_OK && st, "prepare small conv");
    const void *fr[1] = {x};
    vae_error_clear();
    rc = be->v->conv(be, &op, st, fr, 1, 5, 5, NULL, y, 1, 4, 5);
    EXPECT(rc == VAE_ESHAPE, "conv wrong h_out: rc %d", rc);
    EXPECT(strstr(vae_last_error(), "decoder.conv_bad") != NULL, "error names the op: '%s'",
           vae_last_error());
    vae_error_clear();
    rc = be->v->conv(be, &op, st, fr, 1, 5, 5, NULL, y, 2, 5, 5);
    EXPECT(rc == VAE_ESHAPE, "conv wrong t_out: rc %d", rc);
    /* a conv needing scratch, with the allocation failing */
    vae_alloc_fail_after(1);
    vae_error_clear();
    rc = be->v->conv(be, &op, st, fr, 1, 5, 5, NULL, y, 1, 5, 5);
    vae_alloc_fail_after(0);
    EXPECT(rc == VAE_ENOMEM, "conv scratch OOM: rc %d", rc);
    rc = be->v->conv(be, &op, st, fr, 1, 5, 5, NULL, y, 1, 5, 5);
    EXPECT(rc == VAE_OK, "conv works after OOM: rc %d", rc);
    be->v->unprepare(be, &op, st);
    /* prepare OOM */
    vae_alloc_fail_after(1);
    st = NULL;
    rc = be->v->prepare(be, &op, &st);
    vae_alloc_fail_after(0);
    EXPECT(rc == VAE_ENOMEM && st == NULL, "prepare OOM: rc %d", rc);
    /* unprepared conv */
    rc = be->v->conv(be, &op, NULL, fr, 1, 5, 5, NULL, y, 1, 5, 5);
    EXPECT(rc == VAE_EINVAL, "unprepared conv: rc %d", rc);
    /* grouped convs: only depthwise (groups = c_in, whole outputs per group), only 2-D; a
     * depthwise prepare that runs out of memory leaves nothing behind */
    op.groups = 2; /* 3 channels in 2 groups */
    vae_error_clear();
    rc = be->v->prepare(be, &op, &st);
    EXPECT(rc == VAE_EINVAL && strstr(vae_last_error(), "decoder.conv_bad"),
           "grouped conv, groups != c_in: rc %d '%s'", rc, vae_last_error());
    op.groups = 3, op.c_out = 6, op.kt = 2;
    rc = be->v->prepare(be, &op, &st);
    EXPECT(rc == VAE_EUNSUPPORTED, "depthwise conv with kt 2: rc %d '%s'", rc, vae_last_error());
    op.kt = 1;
    vae_alloc_fail_after(2);
    st = NULL;
    rc = be->v->prepare(be, &op, &st);
    vae_alloc_fail_after(0);
    EXPECT(rc == VAE_ENOMEM && st == NULL && be->bytes_in_use == 0, "depthwise prepare OOM: rc %d",
           rc);
    EXPECT(vae_op_macs(&op, 1, 5, 5) == 25.0 * 6 * 9 && vae_op_weight_count(&op) == 6 * 9 &&
               !vae_op_fp8_shape(&op),
           "depthwise MACs %g, weights %lld", vae_op_macs(&op, 1, 5, 5),
           (long long)vae_op_weight_count(&op));
    op.groups = 0, op.c_out = 2;

    /* group norm with groups not dividing c */
    vae_op gn = vae_op_make(VAE_OP_GROUP_NORM, 0, 6, 6);
    gn.groups = 4, gn.eps = 1e-6f;
    snprintf(gn.name, sizeof gn.name, "encoder.norm_bad");
    vae_error_clear();
    rc = be->v->norm(be, &gn, NULL, x, x, 1, 2, 2);
    EXPECT(rc == VAE_EINVAL && strstr(vae_last_error(), "encoder.norm_bad"), "bad groups: rc %d",
           rc);
    /* shuffle-down strides that do not enumerate the sub-positions */
    vae_op sd = vae_op_make(VAE_OP_SHUFFLE_DOWN, 0, 3, 12);
    sd.fs = 2, sd.cs_o = 4, sd.cs_h = 2, sd.cs_w = 2, sd.group = 1;
    snprintf(sd.name, sizeof sd.name, "shuffle_bad");
    rc = be->v->resample(be, &sd, fr, 1, 4, 4, y, 1);
    EXPECT(rc == VAE_EINVAL, "bad shuffle strides: rc %d", rc);
    /* attention with c_in != 3 c_out */
    vae_op at = vae_op_make(VAE_OP_ATTENTION, 0, 4, 4);
    rc = be->v->attention(be, &at, NULL, x, y, 1, 2, 2, 0, 4);
    EXPECT(rc == VAE_ESHAPE, "attention bad channels: rc %d", rc);
    /* queries outside the frame */
    vae_op at3 = vae_op_make(VAE_OP_ATTENTION, 0, 6, 2);
    vae_error_clear();
    rc = be->v->attention(be, &at3, NULL, x, y, 1, 2, 2, 1, 5);
    EXPECT(rc == VAE_EINVAL && strstr(vae_last_error(), "queries [1, 5) of 4"),
           "attention queries past the frame: rc %d (%s)", rc, vae_last_error());
    /* tanh activation without a scale */
    vae_op th = vae_op_make(VAE_OP_ACT, 0, 3, 3);
    th.act = VAE_ACT_TANH_SCALE, th.act_scale = 0.0f;
    rc = be->v->eltwise(be, &th, NULL, x, NULL, y, 2);
    EXPECT(rc == VAE_EINVAL, "tanh scale 0: rc %d", rc);
    /* wrong op kind for a family */
    vae_op ad = vae_op_make(VAE_OP_ADD, 0, 3, 3);
    rc = be->v->norm(be, &ad, NULL, x, x, 1, 2, 2);
    EXPECT(rc == VAE_EINVAL, "norm called with ADD: rc %d", rc);
    be->v->destroy(be);
}

/* ---- timing --------------------------------------------------------------------------------- */
static void bench_conv(void) {
    const int ci = 96, co = 96, n_in = 3, h = 64, w = 104;
    vae_backend *be = new_backend(0);
    size_t fsz = (size_t)h * w * ci, ysz = (size_t)h * w * co;
    float *wt = rand_buf((size_t)co * ci * 27, 0.05f, 0.0f), *b = rand_buf(co, 0.1f, 0.0f);
    float *x = rand_buf(fsz * n_in, 1.0f, 0.0f), *y = malloc(ysz * sizeof *y);
    const void *fr[3] = {x, x + fsz, x + 2 * fsz};
    vae_op op = vae_op_make(VAE_OP_CONV, 0, ci, co);
    op.kt = op.kh = op.kw = 3, op.pad_h[0] = op.pad_h[1] = op.pad_w[0] = op.pad_w[1] = 1;
    op.w = wt, op.b = b;
    snprintf(op.name, sizeof op.name, "bench.conv");
    void *st = NULL;
    be->v->prepare(be, &op, &st);
    be->v->conv(be, &op, st, fr, n_in, h, w, NULL, y, 1, h, w); /* warm-up */
    double dt = INFINITY; /* best of 5: the machine may be shared */
    for (int r = 0; r < 5; r++) {
        double t0 = omp_get_wtime();
        be->v->conv(be, &op, st, fr, n_in, h, w, NULL, y, 1, h, w);
        t0 = omp_get_wtime() - t0;
        dt = t0 < dt ? t0 : dt;
    }
    double flop = 2.0 * h * w * co * ci * 27;
    /* spot-check a few outputs */
    double e2 = 0, r2 = 0;
    for (int s = 0; s < 64; s++) {
        int oh = (int)(rng_next() % h), ow = (int)(rng_next() % w), o = (int)(rng_next() % co);
        double ref = b[o];
        for (int dt3 = 0; dt3 < 3; dt3++)
            for (int dh = 0; dh < 3; dh++)
                for (int dw = 0; dw < 3; dw++) {
                    int ih = oh - 1 + dh, iw = ow - 1 + dw;
                    if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
                    for (int c = 0; c < ci; c++)
                        ref += (double)wt[(((size_t)o * ci + c) * 3 + dt3) * 9 + dh * 3 + dw] *
                               x[dt3 * fsz + ((size_t)ih * w + iw) * ci + c];
                }
        double d = y[((size_t)oh * w + ow) * co + o] - ref;
        e2 += d * d;
        r2 += ref * ref;
    }
    EXPECT(sqrt(e2 / r2) <= TOL, "bench conv spot check: rel err %.3g", sqrt(e2 / r2));
    printf("timing: conv 3x3x3 %d->%d on [%d][%d][%d]: %.2f ms, %.1f GFLOP/s (best of 5, %d "
           "threads, %s sgemm)\n",
           ci, co, n_in, h, w, dt * 1e3, flop / dt * 1e-9, cpu_be(be)->threads, cpu_gemm_name());
    be->v->unprepare(be, &op, st);
    be->v->destroy(be);
    free(wt);
    free(b);
    free(x);
    free(y);
}

int main(void) {
    test_buffers();
    test_errors();

    /* sgemm: edges of every blocking (MR, NR, MC, NB, KC), both layouts of B, beta 0 / 1 / other */
    test_sgemm(2, 0, 1, 1, 1, 1.0f, 0.0f);
    test_sgemm(2, 0, 7, 13, 5, 1.0f, 0.0f);
    test_sgemm(2, 1, 7, 13, 5, 0.5f, 1.0f);
    test_sgemm(2, 0, 131, 300, 600, 1.0f, 1.0f);
    test_sgemm(2, 1, 131, 300, 600, 0.3f, 0.0f);
    test_sgemm(1, 0, 200, 37, 257, 1.0f, -0.5f);
    test_sgemm(2, 1, 33, 530, 70, 2.0f, 0.25f);
    test_sgemm(2, 0, 5, 6, 0, 1.0f, 0.5f); /* k = 0: C = beta C */
    test_sgemm(2, 0, 5, 6, 7, 0.0f, 0.0f); /* alpha = 0 */

    /* name, c_in, c_out, kt kh kw, st sh sw, pad t b l r, n_in h w, bias, residual, scattered,
     * threads, scratch_limit */
    static const conv_case convs[] = {
        {"1x1x1", 16, 24, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 5, 7, 1, 0, 0, 0, 0},
        {"1x1x1_nobias_res", 13, 7, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 3, 4, 3, 0, 1, 0, 0, 0},
        {"3x3x3_t2", 5, 11, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 6, 9, 1, 1, 0, 0, 0},
        {"3x3x3_scattered", 16, 16, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 9, 8, 0, 1, 1, 0, 0},
        {"3x3x3_res_alias", 12, 12, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 5, 7, 1, 2, 1, 0, 0},
        {"3x3x3_c3", 3, 20, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 11, 13, 1, 0, 0, 0, 0},
        {"3x1x1_t2", 12, 24, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 4, 5, 6, 1, 0, 1, 0, 0},
        {"3x1x1_res", 9, 9, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 3, 3, 5, 0, 1, 0, 0, 0},
        {"3x3_s2_pad01", 6, 10, 1, 3, 3, 1, 2, 2, 0, 1, 0, 1, 1, 9, 10, 1, 0, 0, 0, 0},
        {"3x3_s2_pad01_even", 8, 8, 1, 3, 3, 1, 2, 2, 0, 1, 0, 1, 2, 8, 12, 1, 1, 0, 0, 0},
        {"3x1x1_st2", 8, 8, 3, 1, 1, 2, 1, 1, 0, 0, 0, 0, 5, 4, 5, 1, 1, 1, 0, 0},
        {"3x1x1_st2_n6", 7, 5, 3, 1, 1, 2, 1, 1, 0, 0, 0, 0, 6, 3, 4, 1, 0, 0, 0, 0},
        {"3x3_pad1_2d", 17, 9, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 7, 6, 1, 0, 0, 0, 0},
        {"3x3x3_tiny_frame", 4, 6, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 2, 1, 1, 0, 0, 0, 0},
        {"1x1_s2", 4, 6, 1, 1, 1, 1, 2, 2, 0, 0, 0, 0, 1, 7, 7, 1, 0, 0, 0, 0},
        {"5x3_asym", 5, 7, 2, 5, 3, 1, 1, 2, 2, 1, 0, 2, 3, 9, 11, 1, 1, 1, 0, 0},
        {"3x3x3_blocks", 16, 12, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 9, 11, 1, 1, 0, 0, 20000},
        {"3x3x3_1thread", 10, 12, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 6, 7, 1, 1, 1, 1, 0},
        {"1x1x1_wide", 96, 200, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 17, 19, 1, 1, 0, 0, 0},
        /* per-tap GEMMs (cpu_conv_taps.c): the AVX-512 panels (c_out % 32 == 0), one-row bands,
         * asymmetric pads, one thread; OpenBLAS per tap (c_out 16), a 5x3 kernel */
        {"taps_panels", 40, 64, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 7, 9, 1, 1, 1, 0, 0},
        {"taps_panels_bands", 24, 32, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 13, 5, 1, 2, 0, 0, 20000},
        {"taps_panels_asym", 32, 96, 1, 3, 3, 1, 1, 1, 0, 2, 1, 0, 1, 6, 11, 0, 0, 0, 1, 0},
        {"taps_blas_5x3", 17, 16, 2, 5, 3, 1, 1, 1, 2, 1, 0, 2, 3, 9, 11, 1, 1, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof convs / sizeof *convs; i++)
        test_conv_groups(&convs[i], 0);
    /* depthwise (groups = c_in; cpu_conv_depthwise.c): TAEHV super's 7x7 with two outputs per
     * channel, one output per channel with the residual in place, odd sizes, strides and uneven
     * padding, a frame smaller than the kernel, one thread */
    static const conv_case depthwise[] = {
        {"dw_7x7_m2", 12, 24, 1, 7, 7, 1, 1, 1, 3, 3, 3, 3, 3, 9, 11, 0, 0, 1, 0, 0},
        {"dw_3x3_res_alias", 13, 13, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 2, 7, 5, 1, 2, 0, 0, 0},
        {"dw_5x3_s2_asym_m3", 5, 15, 1, 5, 3, 1, 2, 2, 2, 1, 0, 2, 2, 9, 10, 1, 1, 1, 0, 0},
        {"dw_7x7_tiny_frame", 8, 16, 1, 7, 7, 1, 1, 1, 3, 3, 3, 3, 1, 2, 3, 1, 1, 0, 1, 0},
        {"dw_1x1_m2", 3, 6, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 3, 4, 1, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof depthwise / sizeof *depthwise; i++)
        test_conv_groups(&depthwise[i], depthwise[i].c_in);
    test_e4m3_round();
    test_conv_fp8(32, 24);
    test_conv_fp8(20, 40);
    test_conv_fp8(32, 3);
    test_conv_fp8(48, 64); /* per-tap GEMMs on the AVX-512 panels */

    static const vae_act acts[] = {VAE_ACT_NONE, VAE_ACT_SILU, VAE_ACT_RELU, VAE_ACT_TANH_SCALE};
    for (int a = 0; a < 4; a++) {
        test_norm(VAE_OP_RMS_NORM, 13, 1, acts[a], 2, 3, 5, 0.0f, 1, 0, 0);
        test_norm(VAE_OP_RMS_NORM, 96, 1, acts[a], 1, 7, 9, 0.5f, 1, 0, a == 1);
        test_norm(VAE_OP_GROUP_NORM, 32, 32, acts[a], 2, 5, 7, 0.0f, 1, 1, 0);
        test_norm(VAE_OP_GROUP_NORM, 64, 8, acts[a], 3, 9, 11, 2.0f, 1, 1, a == 2);
    }
    test_norm(VAE_OP_RMS_NORM, 8, 1, VAE_ACT_NONE, 1, 4, 4, 0.0f, 0, 0, 0); /* no gamma */
    test_rms_bound(96, VAE_ACT_SILU);
    test_rms_bound(13, VAE_ACT_NONE);
    test_norm(VAE_OP_GROUP_NORM, 20, 1, VAE_ACT_SILU, 2, 6, 5, 0.0f, 1, 1, 0);
    test_norm(VAE_OP_GROUP_NORM, 12, 4, VAE_ACT_NONE, 1, 13, 3, 0.0f, 1, 1, 0);
    test_norm(VAE_OP_GROUP_NORM, 96, 32, VAE_ACT_SILU, 2, 16, 17, 0.0f, 1, 1, 0);
    test_norm(VAE_OP_GROUP_NORM, 64, 32, VAE_ACT_NONE, 1, 10, 10, 50.0f, 1, 1, 0); /* big mean */
    test_norm(VAE_OP_GROUP_NORM, 12, 4, VAE_ACT_NONE, 1, 5, 5, 0.0f, 0, 0, 0);     /* no affine */

    for (int a = 0; a < 4; a++) {
        test_eltwise(VAE_OP_ACT, acts[a], 7, 1001, 0);
        test_eltwise(VAE_OP_ADD, acts[a], 13, 777, a == 1);
        test_eltwise(VAE_OP_SCALE_SHIFT, acts[a], 16, 300, a == 3);
    }
    test_eltwise(VAE_OP_ACT, VAE_ACT_SILU, 5, 3000, 1);
    test_eltwise(VAE_OP_ACT, VAE_ACT_CLAMP01, 7, 1001, 0); /* TAEHV's output */
    test_eltwise(VAE_OP_ADD, VAE_ACT_NONE, 96, 1234, 0);

    test_upsample(5, 2, 2, 3, 7);
    test_upsample(16, 2, 1, 8, 5);
    test_upsample(3, 3, 3, 2, 2);

    static const shuf_case ups[] = {
        /* unpatchify, channel = o*fs*fs + hi*fs + wi */
        {"unpatch_c_major", 12, 3, 1, 2, 4, 0, 2, 1, 1, 2, 3, 5},
        /* unpatchify, channel = (hi*fs + wi)*c_out + o */
        {"unpatch_pos_major", 12, 3, 1, 2, 1, 0, 6, 3, 1, 1, 4, 3},
        /* DupUp3D-like: ft 2, fs 2, repeats (group 4) */
        {"dup_up_3d", 8, 4, 2, 2, 8, 4, 2, 1, 4, 2, 3, 3},
        /* time only: frames from channel halves (Wan time_conv style) */
        {"time_only", 10, 5, 2, 1, 1, 5, 0, 0, 1, 3, 2, 3},
    };
    for (size_t i = 0; i < sizeof ups / sizeof *ups; i++)
        test_shuffle_up(&ups[i]);
    static const shuf_case downs[] = {
        /* AvgDown3D-like: c 4, ft 2, fs 2 -> 32 sub-positions, 8 channels of 4 averaged */
        {"avg_down_3d", 4, 8, 2, 2, 8, 4, 2, 1, 4, 4, 6, 8},
        /* patchify, no averaging, position-major output channels, odd size (cropped) */
        {"patchify", 3, 12, 1, 2, 1, 0, 6, 3, 1, 2, 7, 9},
        /* ft 2 spatial 1, averaging the two frames of each window */
        {"time_avg", 6, 6, 2, 1, 2, 1, 0, 0, 2, 6, 3, 4},
        /* fs 2, group 2, c not a multiple of 8 */
        {"avg_down_2d", 5, 10, 1, 2, 4, 0, 2, 1, 2, 3, 5, 4},
    };
    for (size_t i = 0; i < sizeof downs / sizeof *downs; i++)
        test_shuffle_down(&downs[i]);

    test_attention(8, 1, 5, 7, 1.0f, 0, 0, 0);
    test_attention(20, 2, 17, 19, 2.0f, 0, 0, 0);   /* N = 323: one full block + a partial one */
    test_attention(13, 1, 16, 16, 2.0f, 0, 0, 0);   /* N = 256: exactly one block */
    test_attention(16, 2, 9, 13, 3.0f, 4096, 0, 0); /* small scratch: blocks of 16 rows */
    test_attention(64, 1, 24, 24, 1.0f, 0, 0, 0);   /* N = 576 */
    /* a band's share of the queries (exec_reduce.c): a middle range over two blocks, the last
     * rows, none */
    test_attention(20, 2, 17, 19, 2.0f, 0, 3 * 19, 17 * 19 - 2 * 19);
    test_attention(16, 2, 9, 13, 3.0f, 4096, 7 * 13, 9 * 13);
    test_attention(8, 1, 5, 7, 1.0f, 0, 14, 14);

    bench_conv();

    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
