/* cpu_resample.c -- UPSAMPLE (nearest), SHUFFLE_UP (depth to time/space) and SHUFFLE_DOWN
 * (time/space to depth with group averaging), exactly as program.h defines them.
 *
 * The shuffles are gathers through a small table built once per call from the op's channel
 * strides: SHUFFLE_UP maps (ti, hi, wi, o) to the source channel; SHUFFLE_DOWN maps each slot f of
 * the output depth to its source (frame ti of the window, offset of (hi, wi, c) in that frame).
 * Building the tables also checks that the strides describe a valid (bijective) shuffle.
 */
#include <string.h>

#include "backends/cpu/cpu_internal.h"

static int upsample(cpu_backend *cb, const vae_op *op, const float *x, int n_in, int h, int w,
                    float *y, int t_out) {
    const int fs = op->fs, c = op->c_in;
    if (fs < 1 || (op->c_out != c && op->c_out != 0) || t_out != n_in)
        return vae_fail(VAE_ESHAPE,
                        "%s: upsample x%d of %d frames (%d->%d ch) cannot give %d frames", op->name,
                        fs, n_in, c, op->c_out, t_out);
    const int ho = h * fs, wo = w * fs;
    const int64_t rows = (int64_t)n_in * ho;
#pragma omp parallel for num_threads(cb->threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = r / ho;
        int oh = (int)(r % ho);
        const float *src = x + (t * h + oh / fs) * (int64_t)w * c;
        float *dst = y + r * wo * c;
        for (int ow = 0; ow < wo; ow++)
            memcpy(dst + (size_t)ow * c, src + (size_t)(ow / fs) * c, (size_t)c * sizeof *dst);
    }
    return VAE_OK;
}

static int shuffle_up(cpu_backend *cb, const vae_op *op, const float *x, int n_in, int h, int w,
                      float *y, int t_out) {
    const int ft = op->ft, fs = op->fs, ci = op->c_in, co = op->c_out, group = op->group;
    if (ft < 1 || fs < 1 || group < 1 || ci < 1 || co < 1 || t_out != n_in * ft)
        return vae_fail(VAE_ESHAPE,
                        "%s: shuffle-up (ft %d, fs %d, group %d, %d->%d ch) of %d frames cannot "
                        "give %d frames",
                        op->name, ft, fs, group, ci, co, n_in, t_out);
    int *src_ch;
    size_t n_tab;
    int rc = vae_shuffle_up_table(op, &src_ch, &n_tab);
    if (rc) return rc;
    const int ho = h * fs, wo = w * fs;
    const int64_t rows = (int64_t)t_out * ho;
#pragma omp parallel for num_threads(cb->threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int tt = (int)(r / ho), oh = (int)(r % ho);
        int t = tt / ft, ti = tt % ft, ih = oh / fs, hi = oh % fs;
        const float *xrow = x + ((int64_t)t * h + ih) * (int64_t)w * ci;
        float *dst = y + r * wo * co;
        for (int ow = 0; ow < wo; ow++) {
            const float *src = xrow + (size_t)(ow / fs) * ci;
            const int *tab = src_ch + ((ti * fs + hi) * fs + ow % fs) * co;
            for (int o = 0; o < co; o++)
                dst[o] = src[tab[o]];
            dst += co;
        }
    }
    vae_free(src_ch);
    return VAE_OK;
}

static int shuffle_down(cpu_backend *cb, const vae_op *op, const float *const *frames, int n_in,
                        int h, int w, float *y, int t_out) {
    const int ft = op->ft, fs = op->fs, ci = op->c_in, co = op->c_out, group = op->group;
    const int64_t total = (int64_t)ci * ft * fs * fs;
    if (ft < 1 || fs < 1 || group < 1 || ci < 1 || co < 1 || n_in != ft * t_out ||
        total != (int64_t)co * group)
        return vae_fail(VAE_ESHAPE,
                        "%s: shuffle-down (ft %d, fs %d, group %d, %d->%d ch) of %d frames cannot "
                        "give %d frames",
                        op->name, ft, fs, group, ci, co, n_in, t_out);
    const int ho = h / fs, wo = w / fs;
    /* slot f of the output depth reads frame src_t[f] of the window at offset src_off[f] from the
     * block's top-left value */
    int *tab;
    size_t n_tab;
    int rc = vae_shuffle_down_table(op, &tab, &n_tab);
    if (rc) return rc;
    int *src_t = vae_malloc((size_t)total * 2 * sizeof *src_t);
    if (!src_t) {
        vae_free(tab);
        return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
    }
    int *src_off = src_t + total;
    for (int64_t f = 0; f < total; f++) {
        const int *e = tab + f * 4; /* (ti, hi, wi, c) */
        src_t[f] = e[0];
        src_off[f] = (e[1] * w + e[2]) * ci + e[3];
    }
    vae_free(tab);
    for (int i = 0; i < n_in; i++)
        if (!frames[i]) {
            vae_free(src_t);
            return vae_fail(VAE_EINVAL, "%s: input frame %d is NULL", op->name, i);
        }
    const float inv = 1.0f / (float)group;
    const int64_t rows = (int64_t)t_out * ho;
#pragma omp parallel for num_threads(cb->threads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int t = (int)(r / ho), oh = (int)(r % ho);
        const float *const *win = (const float *const *)frames + (size_t)t * ft;
        float *dst = y + r * wo * co;
        for (int ow = 0; ow < wo; ow++) {
            size_t base = ((size_t)oh * fs * w + (size_t)ow * fs) * ci;
            for (int o = 0; o < co; o++) {
                float s = 0.0f;
                for (int g = 0; g < group; g++) {
                    int64_t f = (int64_t)o * group + g;
                    s += win[src_t[f]][base + src_off[f]];
                }
                dst[o] = s * inv;
            }
            dst += co;
        }
    }
    vae_free(src_t);
    return VAE_OK;
}

int cpu_resample(vae_backend *be, const vae_op *op, const void *const *frames, int n_in, int h,
                 int w, void *y, int t_out) {
    cpu_backend *cb = cpu_be(be);
    if (n_in < 0 || h < 0 || w < 0 || t_out < 0)
        return vae_fail(VAE_ESHAPE, "%s: resample of %d frames %dx%d", op->name, n_in, h, w);
    if (n_in > 0 && (!frames || !frames[0] || !y))
        return vae_fail(VAE_EINVAL, "%s: resample without input or output", op->name);
    switch (op->kind) {
    case VAE_OP_UPSAMPLE:
        if (n_in == 0 && t_out == 0) return VAE_OK;
        return upsample(cb, op, frames[0], n_in, h, w, y, t_out);
    case VAE_OP_SHUFFLE_UP:
        if (n_in == 0 && t_out == 0) return VAE_OK;
        return shuffle_up(cb, op, frames[0], n_in, h, w, y, t_out);
    case VAE_OP_SHUFFLE_DOWN:
        if (n_in == 0 && t_out == 0) return VAE_OK;
        return shuffle_down(cb, op, (const float *const *)frames, n_in, h, w, y, t_out);
    default:
        return vae_fail(VAE_EINVAL, "%s: op kind %d is not a resample", op->name, (int)op->kind);
    }
}
