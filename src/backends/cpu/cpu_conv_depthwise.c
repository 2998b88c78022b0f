/* cpu_conv_depthwise.c -- depthwise CONV (op.h: groups = c_in, m = c_out / c_in outputs per
 * input channel), computed directly: each output pixel's c_out sums are made in place in y, tap by
 * tap, in float32 (bias + residual first, then the taps in (dh, dw) order).
 *
 * Why not the GEMM of cpu_conv.c: a group has one input channel, so its GEMM has K = kh*kw and
 * nothing to block on, and the dense form (filters zero off the diagonal) costs c_in times the
 * MACs. The filters are packed [kh*kw][c_out] at prepare, contiguous over the output channels as
 * the activations are (channels-last), so that the inner loop runs over channels and vectorises;
 * one pixel's c_out sums (a few KB) stay in L1 while its taps go by.
 */
#include "backends/cpu/cpu_internal.h"

void cpu_conv_depthwise_pack(const vae_op *op, float *wp) {
    const int taps = op->kh * op->kw;
    for (int co = 0; co < op->c_out; co++)
        for (int tap = 0; tap < taps; tap++)
            wp[(size_t)tap * op->c_out + co] = op->w[(size_t)co * taps + tap];
}

/* yo[c] = bias[c] + res[c] (either may be NULL; res may be yo itself) */
static void pixel_init(float *yo, const float *bias, const float *res, int c_out) {
    for (int c = 0; c < c_out; c++)
        yo[c] = (bias ? bias[c] : 0.0f) + (res ? res[c] : 0.0f);
}

/* yo += one tap: wt[c_out] times the input pixel xp[c_in], output c reading input c / m */
static void pixel_tap(float *yo, const float *wt, const float *xp, int c_in, int m) {
    if (m == 1) {
        for (int c = 0; c < c_in; c++)
            yo[c] += wt[c] * xp[c];
        return;
    }
    for (int ci = 0; ci < c_in; ci++) {
        const float xv = xp[ci];
        float *yc = yo + (size_t)ci * m;
        const float *wc = wt + (size_t)ci * m;
        for (int k = 0; k < m; k++)
            yc[k] += wc[k] * xv;
    }
}

/* One output row oh of a frame x (h x w) into yr [w_out][c_out] (residual rr likewise, or NULL) */
static void conv_row(const vae_op *op, const float *wp, const float *x, int h, int w, int oh,
                     const float *rr, float *yr, int w_out) {
    const int c_in = op->c_in, c_out = op->c_out, m = c_out / c_in;
    for (int ow = 0; ow < w_out; ow++) {
        float *yo = yr + (size_t)ow * c_out;
        pixel_init(yo, op->b, rr ? rr + (size_t)ow * c_out : NULL, c_out);
        for (int dh = 0; dh < op->kh; dh++) {
            const int ih = oh * op->sh - op->pad_h[0] + dh;
            if (ih < 0 || ih >= h) continue;
            for (int dw = 0; dw < op->kw; dw++) {
                const int iw = ow * op->sw - op->pad_w[0] + dw;
                if (iw < 0 || iw >= w) continue;
                pixel_tap(yo, wp + (size_t)(dh * op->kw + dw) * c_out,
                          x + ((size_t)ih * w + iw) * c_in, c_in, m);
            }
        }
    }
}

int cpu_conv_depthwise(cpu_backend *cb, const vae_op *op, const float *wp,
                       const float *const *frames, int h, int w, const float *res, float *y,
                       int t_out, int h_out, int w_out) {
    const int64_t rows = (int64_t)t_out * h_out;
    const size_t row_vals = (size_t)w_out * op->c_out;
    /* kt = st = 1 (op.c check_grouped): output frame j reads frame j */
#pragma omp parallel for num_threads(cb->threads) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        conv_row(op, wp, frames[r / h_out], h, w, (int)(r % h_out), res ? res + r * row_vals : NULL,
                 y + r * row_vals, w_out);
    return VAE_OK;
}
