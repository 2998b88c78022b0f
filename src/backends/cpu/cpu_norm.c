/* cpu_norm.c -- RMS_NORM (per voxel, over channels) and GROUP_NORM (per frame), with fused act.
 *
 * Statistics are accumulated in double. GroupNorm is two-pass (mean, then the mean of squared
 * deviations), which stays accurate when |mean| >> std. Channels-last makes every pass a loop over
 * pixels with an inner, vectorisable loop over the contiguous channels; the per-channel partial
 * sums are combined into groups afterwards.
 * Split across the row bands of a device group (norm_stats, norm_apply): each band's count, sum
 * and sum of squares (from its own two-pass moments), which the group adds up before anyone
 * normalises.
 */
#include <string.h>

#include "backends/cpu/cpu_internal.h"

/* rows rows of w voxels, x's rows xp floats apart and y's yp (packed: one row of every voxel) */
static int rms_norm(cpu_backend *cb, const vae_op *op, const float *x, size_t xp, float *y,
                    size_t yp, int64_t rows, int64_t w) {
    const int c = op->c_in;
    const float *g = op->w, *bias = op->b;
    const double sqrt_c = sqrt((double)c);
    const int64_t n_vox = rows * w;
#pragma omp parallel for num_threads(cb->threads) schedule(static)
    for (int64_t v = 0; v < n_vox; v++) {
        const int64_t r = v / w, col = v % w;
        const float *xv = x + (size_t)r * xp + (size_t)col * c;
        float *yv = y + (size_t)r * yp + (size_t)col * c;
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

/* Per group of one frame's pixels xf[0 .. np): the mean and the sum of squared deviations M2,
 * two passes in double. sum, sq, mean_d: c doubles of scratch each. */
static void gn_moments(const cpu_backend *cb, const vae_op *op, const float *xf, int64_t np,
                       double *sum, double *sq, double *mean_d, double *mean_g, double *m2_g) {
    const int c = op->c_in, groups = op->groups, cg = c / groups, nt = cb->threads;
    const double count = (double)cg * (double)np;
    memset(sum, 0, (size_t)c * sizeof *sum);
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : sum[:c])
    for (int64_t p = 0; p < np; p++) {
        const float *xp = xf + p * c;
        for (int i = 0; i < c; i++)
            sum[i] += xp[i];
    }
    for (int gi = 0; gi < groups; gi++) {
        double s = 0.0;
        for (int i = gi * cg; i < (gi + 1) * cg; i++)
            s += sum[i];
        mean_g[gi] = count > 0 ? s / count : 0.0;
        for (int i = gi * cg; i < (gi + 1) * cg; i++)
            mean_d[i] = mean_g[gi];
    }
    memset(sq, 0, (size_t)c * sizeof *sq);
#pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : sq[:c])
    for (int64_t p = 0; p < np; p++) {
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
        m2_g[gi] = s;
    }
}

/* y = act((x - mean) * rstd * w + b) over one frame of hw pixels; chan: 3c floats of scratch */
static void gn_apply_frame(const cpu_backend *cb, const vae_op *op, const float *xf, float *yf,
                           int64_t hw, const double *mean_g, const double *rstd_g, float *chan) {
    const int c = op->c_in, cg = c / op->groups;
    const float *g = op->w, *bias = op->b;
    float *mean_c = chan, *scale_c = chan + c, *shift_c = chan + 2 * c;
    for (int i = 0; i < c; i++) {
        mean_c[i] = (float)mean_g[i / cg];
        scale_c[i] = (float)(rstd_g[i / cg] * (g ? g[i] : 1.0f));
        shift_c[i] = bias ? bias[i] : 0.0f;
    }
#pragma omp parallel for num_threads(cb->threads) schedule(static)
    for (int64_t p = 0; p < hw; p++) {
        const float *xp = xf + p * c;
        float *yp = yf + p * c;
        for (int i = 0; i < c; i++)
            yp[i] = (xp[i] - mean_c[i]) * scale_c[i] + shift_c[i];
        cpu_act_row(op->act, op->act_scale, yp, c);
    }
}

/* scratch of the GroupNorm passes: 3c + 3 groups doubles (sum, sq, mean per channel; mean, M2,
 * rstd per group) and 3c floats */
typedef struct gn_scratch {
    double *sum, *sq, *mean_d, *mean_g, *m2_g, *rstd_g;
    float *chan;
} gn_scratch;

static int gn_scratch_get(const vae_op *op, gn_scratch *z) {
    const size_t c = (size_t)op->c_in, g = (size_t)op->groups;
    z->sum = vae_malloc((3 * c + 3 * g) * sizeof(double));
    z->chan = vae_malloc(3 * c * sizeof(float));
    if (!z->sum || !z->chan) {
        vae_free(z->sum);
        vae_free(z->chan);
        return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
    }
    z->sq = z->sum + c, z->mean_d = z->sq + c, z->mean_g = z->mean_d + c;
    z->m2_g = z->mean_g + g, z->rstd_g = z->m2_g + g;
    return VAE_OK;
}

static void gn_scratch_put(gn_scratch *z) {
    vae_free(z->sum);
    vae_free(z->chan);
}

static int group_norm(cpu_backend *cb, const vae_op *op, const float *x, float *y, int t,
                      int64_t hw) {
    const int c = op->c_in, groups = op->groups;
    const double count = (double)(c / groups) * (double)hw;
    gn_scratch z;
    int rc = gn_scratch_get(op, &z);
    if (rc) return rc;
    for (int f = 0; f < t; f++) {
        const float *xf = x + (size_t)f * hw * c;
        gn_moments(cb, op, xf, hw, z.sum, z.sq, z.mean_d, z.mean_g, z.m2_g);
        for (int gi = 0; gi < groups; gi++) /* biased variance */
            z.rstd_g[gi] = 1.0 / sqrt(z.m2_g[gi] / count + (double)op->eps);
        gn_apply_frame(cb, op, xf, y + (size_t)f * hw * c, hw, z.mean_g, z.rstd_g, z.chan);
    }
    gn_scratch_put(&z);
    return VAE_OK;
}

static int gn_check(const vae_op *op, const void *x, int t, int h, int w) {
    if (op->kind != VAE_OP_GROUP_NORM || op->groups < 1 || op->c_in < 1 || op->c_in % op->groups)
        return vae_fail(VAE_EINVAL, "%s: not a group norm over whole groups", op->name);
    if (t < 0 || h < 0 || w < 0 || (!x && t * (int64_t)h * w > 0))
        return vae_fail(VAE_ESHAPE, "%s: norm input %dx%dx%d", op->name, t, h, w);
    return vae_op_check(op);
}

int cpu_norm_stats(vae_backend *be, const vae_op *op, const void *x, int t, int h, int w, int y0,
                   int rows, double *st, int dev) {
    (void)dev; /* this backend's buffers are host memory */
    int rc = gn_check(op, x, t, h, w);
    if (rc) return rc;
    if (y0 < 0 || rows < 0 || y0 + rows > h)
        return vae_fail(VAE_EINVAL, "%s: rows %d..%d of a frame of %d", op->name, y0, y0 + rows, h);
    const int c = op->c_in, groups = op->groups;
    const int64_t np = (int64_t)rows * w, hw = (int64_t)h * w;
    const double n = (double)(c / groups) * (double)np;
    gn_scratch z;
    if (t == 0) return VAE_OK;
    if ((rc = gn_scratch_get(op, &z))) return rc;
    for (int f = 0; f < t; f++) {
        const float *xf = (const float *)x + ((size_t)f * hw + (size_t)y0 * w) * c;
        gn_moments(cpu_be(be), op, xf, np, z.sum, z.sq, z.mean_d, z.mean_g, z.m2_g);
        for (int gi = 0; gi < groups; gi++) {
            double *o = st + ((size_t)f * groups + gi) * 3;
            o[0] = n, o[1] = n * z.mean_g[gi], o[2] = z.m2_g[gi] + n * z.mean_g[gi] * z.mean_g[gi];
        }
    }
    gn_scratch_put(&z);
    return VAE_OK;
}

int cpu_norm_apply(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t,
                   int h, int w, const double *st, int dev) {
    (void)state, (void)dev;
    int rc = gn_check(op, x, t, h, w);
    if (rc) return rc;
    const int c = op->c_in, groups = op->groups;
    const int64_t hw = (int64_t)h * w;
    gn_scratch z;
    if (t == 0) return VAE_OK;
    if ((rc = gn_scratch_get(op, &z))) return rc;
    for (int f = 0; f < t; f++) {
        for (int gi = 0; gi < groups; gi++) {
            const double *o = st + ((size_t)f * groups + gi) * 3;
            const double m = o[0] > 0 ? o[1] / o[0] : 0.0;
            const double var = o[0] > 0 ? o[2] / o[0] - m * m : 0.0;
            z.mean_g[gi] = m;
            z.rstd_g[gi] = 1.0 / sqrt((var > 0 ? var : 0.0) + (double)op->eps);
        }
        gn_apply_frame(cpu_be(be), op, (const float *)x + (size_t)f * hw * c,
                       (float *)y + (size_t)f * hw * c, hw, z.mean_g, z.rstd_g, z.chan);
    }
    gn_scratch_put(&z);
    return VAE_OK;
}

/* what every norm call checks of its op */
static int norm_op_check(const vae_op *op) {
    if (op->kind != VAE_OP_RMS_NORM && op->kind != VAE_OP_GROUP_NORM)
        return vae_fail(VAE_EINVAL, "%s: op kind %d is not a norm", op->name, (int)op->kind);
    if (op->c_in < 1 || (op->c_out != op->c_in && op->c_out != 0))
        return vae_fail(VAE_EINVAL, "%s: norm over %d channels cannot give %d", op->name, op->c_in,
                        op->c_out);
    return vae_op_check(op);
}

int cpu_norm(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t, int h,
             int w) {
    cpu_backend *cb = cpu_be(be);
    int rc = norm_op_check(op);
    if (rc) return rc;
    if (t < 0 || h < 0 || w < 0 || (!x && t * (int64_t)h * w > 0))
        return vae_fail(VAE_ESHAPE, "%s: norm input %dx%dx%d", op->name, t, h, w);
    int64_t hw = (int64_t)h * w;
    if (t == 0 || hw == 0) return VAE_OK;
    if (op->kind == VAE_OP_RMS_NORM) { /* one row of every voxel */
        const size_t all = (size_t)(t * hw) * op->c_in;
        return rms_norm(cb, op, x, all, y, all, 1, t * hw);
    }
    if (op->groups < 1 || op->c_in % op->groups)
        return vae_fail(VAE_EINVAL, "%s: %d channels cannot form %d groups", op->name, op->c_in,
                        op->groups);
    return group_norm(cb, op, x, y, t, hw);
}

int cpu_norm_rows(vae_backend *be, const vae_op *op, void *state, const void *x, size_t x_pitch,
                  void *y, size_t y_pitch, int64_t rows, int w) {
    (void)state;
    const size_t row = (size_t)w * (size_t)op->c_in * sizeof(float);
    int rc = norm_op_check(op);
    if (rc == VAE_OK && op->kind != VAE_OP_RMS_NORM)
        rc = vae_fail(VAE_EINVAL, "%s: rows of an RMS norm, not op kind %d", op->name,
                      (int)op->kind);
    if (rc == VAE_OK &&
        (rows < 0 || w < 0 || x_pitch < row || y_pitch < row || x_pitch % sizeof(float) ||
         y_pitch % sizeof(float) || ((!x || !y) && rows * w > 0)))
        rc = vae_fail(VAE_ESHAPE, "%s: norm rows %lld x %d, pitches %zu and %zu bytes", op->name,
                      (long long)rows, w, x_pitch, y_pitch);
    if (rc || rows == 0 || w == 0) return rc;
    return rms_norm(cpu_be(be), op, x, x_pitch / sizeof(float), y, y_pitch / sizeof(float), rows,
                    w);
}
