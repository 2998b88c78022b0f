/* cpu_norm.c -- RMS_NORM (per voxel, over channels) and GROUP_NORM (per frame), with fused act.
 *
 * Statistics are accumulated in double. GroupNorm is two-pass (mean, then the mean of squared
 * deviations), which stays accurate when |mean| >> std. Channels-last makes every pass a loop over
 * pixels with an inner, vectorisable loop over the contiguous channels; the per-channel partial
 * sums are combined into groups afterwards.
 */
#include <string.h>

#include "backends/cpu/cpu_internal.h"

static int rms_norm(cpu_backend *cb, const vae_op *op, const float *x, float *y, int64_t n_vox) {
    const int c = op->c_in;
    const float *g = op->w, *bias = op->b;
    const double sqrt_c = sqrt((double)c);
#pragma omp parallel for num_threads(cb->threads) schedule(static)
    for (int64_t v = 0; v < n_vox; v++) {
        const float *xv = x + v * c;
        float *yv = y + v * c;
        double ss = 0.0;
        for (int i = 0; i < c; i++)
            ss += (double)xv[i] * xv[i];
        double nrm = sqrt(ss);
        float scale = (float)(sqrt_c / (nrm > 1e-12 ? nrm : 1e-12));
        for (int i = 0; i < c; i++) {
            float t = xv[i] * scale;
            if (g) t *= g[i];
            if (bias) t += bias[i];
            yv[i] = t;
        }
        cpu_act_row(op->act, op->act_scale, yv, c);
    }
    return VAE_OK;
}

static int group_norm(cpu_backend *cb, const vae_op *op, const float *x, float *y, int t,
                      int64_t hw) {
    const int c = op->c_in, groups = op->groups, cg = c / groups, nt = cb->threads;
    const float *g = op->w, *bias = op->b;
    /* per channel: sum, sum of squared deviations, and the group mean / scale spread per channel */
    double *sum = vae_malloc((size_t)c * 3 * sizeof(double));
    float *chan = vae_malloc((size_t)c * 3 * sizeof(float));
    if (!sum || !chan) {
        vae_free(sum);
        vae_free(chan);
        return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
    }
    double *sq = sum + c, *mean_d = sum + 2 * c;
    float *mean_c = chan, *scale_c = chan + c, *shift_c = chan + 2 * c;
    const double count = (double)cg * (double)hw;

    for (int f = 0; f < t; f++) {
        const float *xf = x + (size_t)f * hw * c;
        float *yf = y + (size_t)f * hw * c;

        /* pass 1: mean of each group */
        memset(sum, 0, (size_t)c * sizeof *sum);
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : sum[:c])
        for (int64_t p = 0; p < hw; p++) {
            const float *xp = xf + p * c;
            for (int i = 0; i < c; i++)
                sum[i] += xp[i];
        }
        for (int gi = 0; gi < groups; gi++) {
            double s = 0.0;
            for (int i = gi * cg; i < (gi + 1) * cg; i++)
                s += sum[i];
            for (int i = gi * cg; i < (gi + 1) * cg; i++) {
                mean_d[i] = s / count;
                mean_c[i] = (float)mean_d[i];
            }
        }

        /* pass 2: biased variance, sum of (x - mean)^2 */
        memset(sq, 0, (size_t)c * sizeof *sq);
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : sq[:c])
        for (int64_t p = 0; p < hw; p++) {
            const float *xp = xf + p * c;
            for (int i = 0; i < c; i++) {
                double d = (double)xp[i] - mean_d[i];
                sq[i] += d * d;
            }
        }
        for (int gi = 0; gi < groups; gi++) {
            double s = 0.0;
            for (int i = gi * cg; i < (gi + 1) * cg; i++)
                s += sq[i];
            double rstd = 1.0 / sqrt(s / count + (double)op->eps);
            for (int i = gi * cg; i < (gi + 1) * cg; i++) {
                scale_c[i] = (float)(rstd * (g ? g[i] : 1.0f));
                shift_c[i] = bias ? bias[i] : 0.0f;
            }
        }

        /* pass 3: y = (x - mean) * rstd * w + b, then act */
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t p = 0; p < hw; p++) {
            const float *xp = xf + p * c;
            float *yp = yf + p * c;
            for (int i = 0; i < c; i++)
                yp[i] = (xp[i] - mean_c[i]) * scale_c[i] + shift_c[i];
            cpu_act_row(op->act, op->act_scale, yp, c);
        }
    }
    vae_free(sum);
    vae_free(chan);
    return VAE_OK;
}

int cpu_norm(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t, int h,
             int w) {
    cpu_backend *cb = cpu_be(be);
    if (op->kind != VAE_OP_RMS_NORM && op->kind != VAE_OP_GROUP_NORM)
        return vae_fail(VAE_EINVAL, "%s: op kind %d is not a norm", op->name, (int)op->kind);
    if (op->c_in < 1 || (op->c_out != op->c_in && op->c_out != 0))
        return vae_fail(VAE_EINVAL, "%s: norm over %d channels cannot give %d", op->name, op->c_in,
                        op->c_out);
    int rc = vae_op_check(op);
    if (rc) return rc;
    if (t < 0 || h < 0 || w < 0 || (!x && t * (int64_t)h * w > 0))
        return vae_fail(VAE_ESHAPE, "%s: norm input %dx%dx%d", op->name, t, h, w);
    int64_t hw = (int64_t)h * w;
    if (t == 0 || hw == 0) return VAE_OK;
    if (op->kind == VAE_OP_RMS_NORM) return rms_norm(cb, op, x, y, t * hw);
    if (op->groups < 1 || op->c_in % op->groups)
        return vae_fail(VAE_EINVAL, "%s: %d channels cannot form %d groups", op->name, op->c_in,
                        op->groups);
    return group_norm(cb, op, x, y, t, hw);
}
