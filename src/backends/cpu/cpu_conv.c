/* cpu_conv.c -- CONV as GEMM: y[p][co] = sum_k col[p][k] * wp[k][co] + bias[co] (+ residual).
 *
 * prepare() re-lays the PyTorch weight [c_out][c_in][kt][kh][kw] into wp[k][c_out] with
 * k = ((dt*kh + dh)*kw + dw)*c_in + ci, so that one row of the im2col matrix, the receptive field
 * of an output pixel, is kt*kh*kw runs of c_in contiguous channels (channels-last input).
 *
 * Depthwise convs (op.h vae_op_grouped) take cpu_conv_depthwise.c (direct, filters [tap][c_out]).
 * Spatial kernels of stride 1 with >= 16 channels in and out take cpu_conv_taps.c (one GEMM per
 * spatial tap on padded bands, no im2col; its own filter order). The others, per output frame j
 * (input frames j*st .. j*st+kt-1):
 *  - pointwise spatial kernels (kh = kw = 1, stride 1, no padding) need no im2col: the input
 *    frame [h*w][c_in] already is the matrix, one GEMM per temporal tap, accumulated;
 *  - otherwise output pixels are processed in blocks of P rows: im2col into scratch [P][K]
 *    (bounded by the backend's scratch_limit, 16 MB), then one GEMM into y.
 * Bias and residual are written into y first and the GEMMs accumulate on top (beta = 1).
 *
 * FP8 emulation (VAE_DTYPE_FP8, convs that vae_op_fp8 names): prepare() packs the weights
 * rounded onto each output channel's E4M3 grid as every backend rounds them (fp8.h: scaled so
 * that the largest magnitude is 448, or a checkpoint's own codes; the taps' errors spread); each
 * call finds the largest magnitude of its input frames and rounds the im2col rows (or a copy of a
 * pointwise conv's frame) to the E4M3 grid scaled likewise. The products are then exact float32
 * products of FP8 values, accumulated in float32, as FP8 tensor cores compute them.
 */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "core/dtype.h"
#include "core/fp8.h"

typedef struct conv_state {
    float *wp;     /* [K][c_out] */
    int k;         /* K = kt*kh*kw*c_in */
    int fp8;       /* FP8 emulation: wp is on the scaled E4M3 grid, inputs are rounded per call */
    int taps;      /* cpu_conv_taps_fits: one GEMM per spatial tap, wp in that path's order */
    int panels;    /* taps with cpu_taps_gemm: wp in its 32-column panels */
    int depthwise; /* vae_op_grouped: cpu_conv_depthwise, wp [kh*kw][c_out] (K = kh*kw) */
} conv_state;

/* The filters [c_out][c_in][taps] as the conv multiplies them: op->w, or under FP8 a new copy
 * on the E4M3 grids of its output channels (fp8.h), freed by the caller. */
static const float *conv_filters(const vae_op *op, int fp8, int64_t n, int threads) {
    if (!fp8) return op->w;
    float *scale = vae_malloc((size_t)op->c_out * sizeof *scale);
    float *r = vae_malloc((size_t)n * sizeof *r);
    if (scale && r) {
        vae_fp8_weight_scales(op->w, op->c_out, n / op->c_out, scale);
        vae_fp8_weights_round(op->w, op->c_out, op->c_in, op->kt, op->kh, op->kw, scale, r,
                              threads);
    } else {
        vae_free(r);
        r = NULL;
    }
    vae_free(scale);
    return r;
}

/* The E4M3 scale of a call's input: the op's bound / 448 where the model gives one (program.h
 * fp8_bound), else its largest magnitude over the frames / 448 (0: all zero) */
static float input_scale(int nt, const vae_op *op, const float *const *frames, int n_in, size_t n) {
    if (op->fp8_bound > 0) return op->fp8_bound / 448.0f;
    float amax = 0;
    for (int f = 0; f < n_in; f++) {
        const float *x = frames[f];
        float m = 0;
#pragma omp parallel for num_threads(nt) reduction(max : m) schedule(static)
        for (size_t i = 0; i < n; i++)
            m = fmaxf(m, fabsf(x[i]));
        amax = fmaxf(amax, m);
    }
    return amax / 448.0f;
}

static void quantise(int nt, float *x, size_t n, float s) {
    if (s == 0) return;
    const float inv = vae_e4m3_inv(s); /* as the GPU's codes are made */
#pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] = vae_f32_round_e4m3(x[i] * inv) * s;
}

int cpu_conv_fp8(vae_backend *be, const vae_op *op) {
    return cpu_be(be)->fp8 && vae_op_fp8_shape(op) ? VAE_FP8_EMULATED : VAE_FP8_NONE;
}

/* Where filter w[co][ci][tap] (tap = (dt*kh + dh)*kw + dw, PyTorch's order) goes in wp:
 * im2col [tap][c_in][c_out]; per-tap GEMMs [dh*kw + dw][dt][c_in][c_out]; their AVX-512 kernel
 * the same rows in 32-column panels [dh*kw + dw][c_out / 32][dt][c_in][32] (cpu_taps_gemm.c). */
static size_t packed_index(const conv_state *s, const vae_op *op, int tap, int ci, int co) {
    const int khw = op->kh * op->kw;
    if (!s->taps) return ((size_t)tap * op->c_in + ci) * op->c_out + co;
    const size_t row = (size_t)(tap / khw) * op->c_in + ci, depth = (size_t)op->kt * op->c_in;
    const size_t tap_base = (size_t)(tap % khw) * depth * op->c_out;
    if (!s->panels) return tap_base + row * op->c_out + co;
    return tap_base + ((size_t)(co / 32) * depth + row) * 32 + co % 32;
}

/* A depthwise conv's state: its filters packed for cpu_conv_depthwise (never E4M3: op.h) */
static int prepare_depthwise(const vae_op *op, conv_state *s) {
    s->depthwise = 1;
    s->k = op->kh * op->kw;
    const size_t bytes = (size_t)s->k * op->c_out * sizeof(float);
    if (!(s->wp = cpu_aligned_alloc(bytes)))
        return vae_fail(VAE_ENOMEM, "%s: cannot allocate %zu bytes of packed weights", op->name,
                        bytes);
    cpu_conv_depthwise_pack(op, s->wp);
    return VAE_OK;
}

int cpu_conv_prepare(vae_backend *be, const vae_op *op, void **state) {
    *state = NULL;
    int rc = vae_op_check(op);
    if (rc) return rc;
    if (vae_op_grouped(op)) {
        conv_state *s = vae_calloc(1, sizeof *s);
        if (!s) return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
        if ((rc = prepare_depthwise(op, s))) {
            vae_free(s);
            return rc;
        }
        *state = s;
        return VAE_OK;
    }
    int ci_n = op->c_in, co_n = op->c_out, taps = op->kt * op->kh * op->kw;
    conv_state *s = vae_calloc(1, sizeof *s);
    if (!s) return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
    s->k = taps * ci_n;
    const size_t bytes = (size_t)s->k * co_n * sizeof(float);
    s->wp = cpu_aligned_alloc(bytes);
    if (!s->wp) {
        vae_free(s);
        return vae_fail(VAE_ENOMEM, "%s: cannot allocate %zu bytes of packed weights", op->name,
                        bytes);
    }
    s->fp8 = cpu_be(be)->fp8 && vae_op_fp8(op); /* the mark decides, the session made it */
    const float *w = conv_filters(op, s->fp8, (int64_t)s->k * co_n, cpu_be(be)->threads);
    if (!w) {
        cpu_conv_unprepare(be, op, s);
        return vae_fail(VAE_ENOMEM, "%s: out of memory rounding the fp8 weights", op->name);
    }
    s->taps = cpu_conv_taps_fits(op);
    s->panels = s->taps && cpu_taps_gemm_ok(op);
    /* over output channels: each thread reads its filters in order and fills whole lines of wp */
#pragma omp parallel for num_threads(cpu_be(be)->threads) schedule(static)
    for (int co = 0; co < co_n; co++)
        for (int ci = 0; ci < ci_n; ci++)
            for (int tap = 0; tap < taps; tap++)
                s->wp[packed_index(s, op, tap, ci, co)] = w[((size_t)co * ci_n + ci) * taps + tap];
    if (w != op->w) vae_free((void *)w);
    *state = s;
    return VAE_OK;
}

void cpu_conv_unprepare(vae_backend *be, const vae_op *op, void *state) {
    conv_state *s = state;
    if (!s) return;
    cpu_aligned_free(s->wp);
    vae_free(s);
}

/* One im2col row: the receptive field of output pixel (oh, ow) of output frame whose first input
 * frame is frames[0], as kt*kh*kw runs of c_in values (zeros outside the frame). */
static void im2col_row(const vae_op *op, const float *const *frames, int h, int w, int oh, int ow,
                       float *dst) {
    int c = op->c_in, kw = op->kw;
    int iw0 = ow * op->sw - op->pad_w[0];
    int row_inside = iw0 >= 0 && iw0 + kw <= w;
    size_t run = (size_t)kw * c;
    for (int dt = 0; dt < op->kt; dt++) {
        const float *fr = frames[dt];
        for (int dh = 0; dh < op->kh; dh++, dst += run) {
            int ih = oh * op->sh - op->pad_h[0] + dh;
            if (ih < 0 || ih >= h) {
                memset(dst, 0, run * sizeof *dst);
                continue;
            }
            const float *src = fr + ((size_t)ih * w) * c;
            if (row_inside) { /* the kw taps are kw consecutive pixels */
                memcpy(dst, src + (size_t)iw0 * c, run * sizeof *dst);
                continue;
            }
            for (int dw = 0; dw < kw; dw++) {
                int iw = iw0 + dw;
                if (iw < 0 || iw >= w)
                    memset(dst + (size_t)dw * c, 0, (size_t)c * sizeof *dst);
                else
                    memcpy(dst + (size_t)dw * c, src + (size_t)iw * c, (size_t)c * sizeof *dst);
            }
        }
    }
}

/* y = conv(frames) + bias [+ residual] (the checks done) */
static int conv_run(vae_backend *be, const vae_op *op, const conv_state *s,
                    const void *const *frames, int n_in, int h, int w, const void *residual,
                    void *y, int t_out, int h_out, int w_out) {
    cpu_backend *cb = cpu_be(be);
    int rc = VAE_OK;

    const int c_in = op->c_in, c_out = op->c_out, K = s->k, nt = cb->threads;
    const int64_t hw_out = (int64_t)h_out * w_out;
    if (hw_out > INT32_MAX / 2)
        return vae_fail(VAE_EUNSUPPORTED, "%s: frame of %dx%d is too large", op->name, h_out,
                        w_out);
    float *yf = y;
    const float *res = residual;
    const size_t frame = (size_t)h * w * c_in;
    if (s->depthwise)
        return cpu_conv_depthwise(cb, op, s->wp, (const float *const *)frames, h, w, res, yf, t_out,
                                  h_out, w_out);
    const float xs = s->fp8 ? input_scale(nt, op, (const float *const *)frames, n_in, frame) : 0;
    if (s->taps)
        return cpu_conv_taps(cb, op, s->wp, s->panels, (const float *const *)frames, h, w, res, yf,
                             t_out, h_out, w_out, xs);

    /* y = bias + residual; the GEMMs then accumulate (beta = 1) */
    float beta = 0.0f;
    if (op->b || res) {
        const float *bias = op->b;
        int64_t rows = (int64_t)t_out * hw_out;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            float *yr = yf + r * c_out;
            const float *rr = res ? res + r * c_out : NULL;
            for (int co = 0; co < c_out; co++)
                yr[co] = (bias ? bias[co] : 0.0f) + (rr ? rr[co] : 0.0f);
        }
        beta = 1.0f;
    }

    int pointwise = op->kh == 1 && op->kw == 1 && op->sh == 1 && op->sw == 1 && op->pad_h[0] == 0 &&
                    op->pad_h[1] == 0 && op->pad_w[0] == 0 && op->pad_w[1] == 0;
    if (pointwise) {
        float *q = xs > 0 ? cpu_scratch(cb, frame * sizeof(float), op->name) : NULL;
        if (xs > 0 && !q) return VAE_ENOMEM;
        for (int j = 0; j < t_out; j++) {
            float *yj = yf + (size_t)j * hw_out * c_out;
            for (int dt = 0; dt < op->kt; dt++) {
                const float *x = frames[j * op->st + dt];
                if (q) { /* FP8: a rounded copy of the frame */
                    memcpy(q, x, frame * sizeof(float));
                    quantise(nt, q, frame, xs);
                    x = q;
                }
                rc = cpu_sgemm(nt, 0, (int)hw_out, c_out, c_in, 1.0f, x, c_in,
                               s->wp + (size_t)dt * c_in * c_out, c_out, dt ? 1.0f : beta, yj,
                               c_out);
                if (rc) return rc;
            }
        }
        return VAE_OK;
    }

    /* im2col in blocks of output pixels */
    int64_t block = (int64_t)(cb->scratch_limit / ((size_t)K * sizeof(float)));
    if (block < 1) block = 1;
    if (block > hw_out) block = hw_out;
    float *col = cpu_scratch(cb, (size_t)block * K * sizeof(float), op->name);
    if (!col) return VAE_ENOMEM;
    for (int j = 0; j < t_out; j++) {
        const float *const *fj = (const float *const *)frames + (size_t)j * op->st;
        float *yj = yf + (size_t)j * hw_out * c_out;
        for (int64_t p0 = 0; p0 < hw_out; p0 += block) {
            int64_t np = hw_out - p0 < block ? hw_out - p0 : block;
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t i = 0; i < np; i++) {
                int64_t p = p0 + i;
                im2col_row(op, fj, h, w, (int)(p / w_out), (int)(p % w_out), col + i * K);
            }
            quantise(nt, col, (size_t)np * K, xs);
            rc = cpu_sgemm(nt, 0, (int)np, c_out, K, 1.0f, col, K, s->wp, c_out, beta,
                           yj + p0 * c_out, c_out);
            if (rc) return rc;
        }
    }
    return VAE_OK;
}

int cpu_conv(vae_backend *be, const vae_op *op, void *state, const void *const *frames, int n_in,
             int h, int w, const void *residual, void *y, int t_out, int h_out, int w_out) {
    const conv_state *s = state;
    if (op->kind != VAE_OP_CONV) return vae_fail(VAE_EINVAL, "%s: not a conv op", op->name);
    int rc = vae_op_check(op);
    if (rc) return rc;
    if (!s) return vae_fail(VAE_EINVAL, "%s: conv was not prepared", op->name);
    /* the executor upsamples the input for this backend (no conv_upsample): op->up is 0 here */
    if ((rc = vae_conv_check_call(op, frames, n_in, h, w, y, t_out, h_out, w_out))) return rc;
    rc = conv_run(be, op, s, frames, n_in, h, w, residual, y, t_out, h_out, w_out);
    if (rc == VAE_OK && op->act != VAE_ACT_NONE) { /* its activation, in place */
        const vae_op a = vae_conv_act_op(op);
        rc = cpu_eltwise(be, &a, NULL, y, NULL, y, (int64_t)t_out * h_out * w_out);
    }
    if (rc || !op->norm_w) return rc;
    const vae_op n = vae_conv_norm_op(op); /* its RMS norm, in place (per voxel: reads first) */
    return cpu_norm(be, &n, NULL, y, y, t_out, h_out, w_out);
}
