/* cuda_conv_phase.c -- nearest x2 upsampling + 3x3 conv (padding 1) as four 2x2 phase convs
 * (the Wan upsamplers; cuda_conv_internal.h; cuda_conv.c's conv_up calls it).
 *
 * Output phase (a, b) (row parity a, column parity b) is a 2x2 conv of the small input with
 * summed taps: 4/9 of the FLOPs and no upsampled tensor. Each phase conv has symmetric padding 1
 * and gives (h+1)x(w+1) outputs (in the scratch area, blocks of frames within scratch_limit), of
 * which phase (a,b) uses the window offset by (a,b); a kernel interleaves them into y
 * (+ residual). The four convs run on cuDNN or on the CUTLASS implicit-GEMM kernels
 * (cuda_conv_igemm.c), whichever was measured faster for the block's shape: timed on first sight
 * (VAE_CUDA_TUNE) and kept in the tune cache like the conv tuner's choices (cuda_conv.c), always
 * CUTLASS with VAE_CUDA_IGEMM=always, cuDNN with it off. Measured on the H100: CUTLASS is
 * faster at Wan2.1's 384->192 and 192->96 phases, cuDNN at most of Wan2.2's 1024 and 512
 * channels (untimed CUTLASS phases made Wan2.2 2% slower).
 * With 96 filters (Wan2.1's last upsampler, 192 -> 96 at full size) the halo-tile kernel's phase
 * mode is a third way (cuda_conv_igemm.c cu_conv_halo_up2, sm90/halo_conv.cu): one launch that
 * computes each phase's 2 x 2 conv from the 18 x 18 halo tile and writes it straight to its rows
 * and columns of y, with bias and residual: no planes in the scratch area, no interleave pass.
 * Which of the two runs a shape is timed once (up_choose: both twice, in alternating order), kept
 * in the tune cache, forced by VAE_CUDA_HALO=always.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/conv/cuda_conv_internal.h"

enum { PHASE_DNN = PATH_BLOCKS, PHASE_IGEMM = PATH_IGEMM };

int cu_conv_phase_takes(const cuda_backend *cb, const vae_op *op, const conv_state *s) {
    return op->up == 2 && cb->phase && !s->use_gemm && op->kt == 1 && op->st == 1 && op->kh == 3 &&
           op->kw == 3 && op->sh == 1 && op->sw == 1 && op->pad_h[0] == 1 && op->pad_h[1] == 1 &&
           op->pad_w[0] == 1 && op->pad_w[1] == 1 && s->kp == op->c_out;
}

size_t cu_conv_phase_count(const vae_op *op, const conv_state *s) {
    return (size_t)16 * s->kp * op->c_in;
}

/* Phase filters: phase (a, b) row tap r takes the 3x3 rows R_a(r) (a = 0: {0} | {1, 2}; a = 1:
 * {0, 1} | {2}), likewise columns; [a*2+b][kp][r][s][c_in] */
void cu_conv_phase_filters(const vae_op *op, const conv_state *s, float *host) {
    static const int lo[2][2] = {{0, 1}, {0, 2}},
                     hi[2][2] = {{0, 2}, {1, 2}}; /* [a][r]: dh range */
    const int ci = op->c_in;
    const size_t per = (size_t)s->kp * 4 * ci;
    memset(host, 0, 4 * per * sizeof(float));
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++)
            for (int o = 0; o < s->co; o++)
                for (int r = 0; r < 2; r++)
                    for (int q = 0; q < 2; q++)
                        for (int c = 0; c < ci; c++) {
                            double acc = 0;
                            for (int dh = lo[a][r]; dh <= hi[a][r]; dh++)
                                for (int dw = lo[b][q]; dw <= hi[b][q]; dw++)
                                    acc += op->w[(((size_t)o * ci + c) * 3 + dh) * 3 + dw];
                            host[(size_t)(a * 2 + b) * per + (((size_t)o * 2 + r) * 2 + q) * ci +
                                 c] = (float)acc;
                        }
}

/* the phase filters on the device: from the stage (session creation made them), else made now */
static int need_wph(cuda_backend *cb, const vae_op *op, conv_state *s) {
    if (s->wph) return VAE_OK;
    const size_t n = cu_conv_phase_count(op, s);
    s->wph_bytes = n * cb->base.elem_size;
    int rc = cu_upload_staged(cb, op->w, CU_STAGE_PHASE, n, 0, &s->wph, op->name);
    if (rc || s->wph) return rc;
    float *host = vae_malloc(n * sizeof(float));
    if (!host) return vae_fail(VAE_ENOMEM, "%s: out of host memory for weights", op->name);
    cu_conv_phase_filters(op, s, host);
    rc = cu_upload_param(cb, host, n, 0, &s->wph, op->name);
    vae_free(host);
    return rc;
}

/* One block's four phase convs by cuDNN: x [tb][h][w][c_in] -> tmp + p * plane. The bias goes
 * into the epilogue where cuDNN fuses it, else *add_bias tells the interleave to add it. */
static int phases_dnn(cuda_backend *cb, const vae_op *op, conv_state *s, const void *x, int tb,
                      int h, int w, void *tmp, size_t plane, int *add_bias) {
    const size_t filt = (size_t)s->kp * 4 * op->c_in * cb->base.elem_size;
    int rc = VAE_OK;
    *add_bias = 0;
    for (int p = 0; p < 4 && rc == VAE_OK; p++) {
        cu_dnn_conv g;
        memset(&g, 0, sizeof g);
        g.nd = 2, g.n = tb, g.c = op->c_in, g.hx = h, g.wx = w, g.k = s->kp;
        g.dx = g.dy = g.kd = g.sd = 1;
        g.kh = g.kw = 2, g.ph = g.pw = 1, g.sh = g.sw = 1, g.ho = h + 1, g.wo = w + 1;
        const void *wp = (const char *)s->wph + p * filt;
        void *out = (char *)tmp + p * plane;
        int ph = cu_prof_begin(cb, CU_P_CONV_DNN);
        rc = VAE_EUNSUPPORTED;
        if (cb->fuse && s->bias && s->bias_dt && !*add_bias) {
            cu_dnn_epi epi = {0.0f, s->bias_dt, s->bias, NULL};
            g.epi = CU_DNN_EPI_BIAS;
            rc = cu_dnn_conv_run(cb, &g, x, wp, &epi, out, op->name);
            g.epi = CU_DNN_EPI_NONE;
            if (rc == VAE_OK) cb->n_conv_fused++;
        }
        if (rc == VAE_EUNSUPPORTED) {
            if (p > 0 && s->bias && !*add_bias) { /* earlier phases fused the bias: redo */
                cu_prof_end(cb, ph);
                return VAE_EUNSUPPORTED;
            }
            vae_error_clear(); /* expected: unfused, the bias added after */
            cu_dnn_epi epi = {0.0f, NULL, NULL, NULL};
            rc = cu_dnn_conv_run(cb, &g, x, wp, &epi, out, op->name);
            *add_bias = s->bias != NULL;
        }
        cu_prof_end(cb, ph);
        if (rc == VAE_OK) cb->n_conv_cudnn++;
    }
    return rc;
}

/* The block's phase convs by `path`; the CUTLASS kernels fall back to cuDNN where they refuse
 * (remembered for the op: s->noigemm). */
static int phases_run(cuda_backend *cb, const vae_op *op, conv_state *s, const void *x, int tb,
                      int h, int w, void *tmp, size_t plane, int path, int *add_bias) {
    *add_bias = 0;
    if (path == PHASE_IGEMM && !s->noigemm) {
        int rc = cu_conv_igemm_phases(cb, op, s, x, tb, h, w, tmp, plane);
        if (rc != VAE_EUNSUPPORTED) return rc;
        VAE_DEBUG("%s: %s; cuDNN's phase convs", op->name, vae_last_error());
        vae_error_clear();
    }
    return phases_dnn(cb, op, s, x, tb, h, w, tmp, plane, add_bias);
}

/* A block's call and what times it (phases_time: way 0 cuDNN, 1 CUTLASS). */
typedef struct {
    cuda_backend *cb;
    const vae_op *op;
    conv_state *s;
    const void *x;
    void *tmp;
    size_t plane;
    int tb, h, w, *add_bias;
} phases_ctx;
static int phases_time(void *ctx, int way, float *t) {
    phases_ctx *c = ctx;
    int rc = cu_tune_mark(c->cb, 0, c->op->name);
    if (rc == VAE_OK)
        rc = phases_run(c->cb, c->op, c->s, c->x, c->tb, c->h, c->w, c->tmp, c->plane,
                        way ? PHASE_IGEMM : PHASE_DNN, c->add_bias);
    return rc ? rc : cu_tune_elapsed(c->cb, t, c->op->name);
}

/* Which path runs a block of tb frames of h x w: decided once per shape (s->ph_tune) by timing
 * both (each run leaves a correct result in tmp: a warm-up run of each, then the rounds of
 * VAE_CUDA_TUNE_REPS, at least one, cu_tune_alternate), or from the tune cache. *ran: the block
 * is already computed by the chosen path. */
static int phases_choose(cuda_backend *cb, const vae_op *op, conv_state *s, const void *x, int tb,
                         int h, int w, void *tmp, size_t plane, int *path, int *add_bias,
                         int *ran) {
    *ran = 0;
    for (int i = 0; i < s->n_ph_tune; i++)
        if (s->ph_tune[i].n_in == tb && s->ph_tune[i].h == h && s->ph_tune[i].w == w) {
            *path = s->ph_tune[i].path;
            return VAE_OK;
        }
    const int igemm = cu_conv_igemm_phases_ok(cb, op, s);
    *path = igemm && cb->igemm == 2 ? PHASE_IGEMM : PHASE_DNN;
    if (!igemm || cb->igemm == 2 || !cb->tune || cb->recording || s->n_ph_tune == CONV_TUNE_MAX)
        return VAE_OK; /* untimed: cuDNN's, as before the CUTLASS kernels */
    char key[160];
    snprintf(key, sizeof key, "phase|c%d-%d|n%d|%dx%d|b%d|%d%d|d%d|t%d", op->c_in, s->kp, tb, h, w,
             s->bias != NULL, PHASE_DNN, PHASE_IGEMM, cb->dnn_gain_us, cb->tune_reps);
    const int cached = cb->tune_seed ? -1 : cu_tune_lookup(cb, key);
    float ms[2] = {0, 0};
    if (cached == PHASE_DNN || cached == PHASE_IGEMM) {
        *path = cached;
    } else if (cb->tune_seed) {
        *path = cu_conv_seed_hash(cb->tune_seed, op->name, tb, h, w) % 2 ? PHASE_IGEMM : PHASE_DNN;
    } else {
        phases_ctx c = {cb, op, s, x, tmp, plane, tb, h, w, add_bias};
        int last = 0, rc = cu_tune_alternate(cb, &c, phases_time, 1, cb->tune_reps, ms, &last);
        if (rc) return rc;
        *path = cu_tune_own_wins(cb, ms[1], ms[0]) && !s->noigemm ? PHASE_IGEMM : PHASE_DNN;
        *ran = last == (*path == PHASE_IGEMM); /* that run left the block in tmp */
        cu_tune_store(cb, key, *path);
    }
    char msg[64] = "from the tune cache";
    if (ms[0] > 0 || ms[1] > 0)
        snprintf(msg, sizeof msg, "cuDNN %.3f ms, implicit GEMM %.3f ms", ms[0], ms[1]);
    else if (cb->tune_seed)
        snprintf(msg, sizeof msg, "seeded");
    VAE_DEBUG("%s: phases of %d frames %dx%d: %s -> %s", op->name, tb, h, w, msg,
              *path == PHASE_IGEMM ? "implicit GEMM" : "cuDNN");
    s->ph_tune[s->n_ph_tune++] = (conv_tune){tb, h, w, *path};
    return VAE_OK;
}

/* The activation the interleave applies: the conv's, unless a folded norm comes first (then the
 * norm's pass after the conv applies both, conv_post). */
static int interleave_act(const vae_op *op) {
    return op->norm_w ? VAE_ACT_NONE : (int)op->act;
}

/* The phase convs of the frames x0 (n_in consecutive), in blocks whose four phase planes fit
 * scratch_limit, each block interleaved into y (+ residual), with interleave_act. */
static int phases_blocks(cuda_backend *cb, const vae_op *op, conv_state *s, const void *x0,
                         int n_in, int h, int w, const void *residual, void *y) {
    vae_backend *be = &cb->base;
    const size_t es = be->elem_size, fb = (size_t)h * w * op->c_in * es;
    const size_t yfb = (size_t)4 * h * w * op->c_out * es;
    int rc = need_wph(cb, op, s);
    if (rc) return rc;
    const int64_t ph_frame = (int64_t)(h + 1) * (w + 1) * s->kp;
    int tb_max = n_in;
    /* the four phase outputs live in the scratch area, within scratch_limit (at least a frame) */
    while (tb_max > 1 && (size_t)(4 * tb_max * ph_frame) * es > cb->scratch_limit)
        tb_max--;
    if ((int64_t)tb_max * ph_frame > INT32_MAX / 4 ||
        (int64_t)tb_max * h * w * op->c_in > INT32_MAX)
        return vae_fail(VAE_EUNSUPPORTED, "%s: frames too large for the phase path", op->name);
    for (int j0 = 0; j0 < n_in; j0 += tb_max) {
        const int tb = n_in - j0 < tb_max ? n_in - j0 : tb_max;
        const size_t plane = (size_t)tb * ph_frame * es;
        void *tmp = cu_scratch(cb, 4 * plane, op->name);
        if (!tmp) return VAE_ENOMEM;
        const void *x = (const char *)x0 + (size_t)j0 * fb;
        int path, add_bias = 0, ran;
        rc = phases_choose(cb, op, s, x, tb, h, w, tmp, plane, &path, &add_bias, &ran);
        if (rc == VAE_OK && !ran)
            rc = phases_run(cb, op, s, x, tb, h, w, tmp, plane, path, &add_bias);
        if (rc == VAE_OK) {
            int ph = cu_prof_begin(cb, CU_P_RESAMPLE);
            cudaError_t e = cuk_phase_interleave(
                cb->stream, be->dtype, tmp, tb, h, w, op->c_out, add_bias ? s->bias : NULL,
                residual ? (const char *)residual + (size_t)j0 * yfb : NULL,
                interleave_act(op), op->act_scale,
                (char *)y + (size_t)j0 * yfb);
            cu_prof_end(cb, ph);
            if (e == cudaErrorInvalidValue) {
                cudaGetLastError();
                rc = vae_fail(VAE_EUNSUPPORTED, "%s: phase interleave needs aligned vectors",
                              op->name);
            } else {
                rc = cu_check(e, op->name, "phase interleave");
            }
        }
        if (rc) return rc;
    }
    return VAE_OK;
}

/* phases_blocks making the call's y; *acted: y has the conv's activation */
static int phases_y(cuda_backend *cb, const vae_op *op, conv_state *s, const void *x0, int n_in,
                    int h, int w, const void *residual, void *y, int *acted) {
    const int rc = phases_blocks(cb, op, s, x0, n_in, h, w, residual, y);
    *acted = rc == VAE_OK && interleave_act(op) != VAE_ACT_NONE;
    return rc;
}

/* After an up2 decision: the phase filters in the layouts the decisions so far read (the halo
 * kernel's, the phase convs'); a layout freed here is made again where a later shape needs it. */
static void up_trim(cuda_backend *cb, conv_state *s) {
    int halo = 0, phases = 0;
    for (int i = 0; i < s->n_up_tune; i++)
        halo |= s->up_tune[i].path == PATH_HALO, phases |= s->up_tune[i].path != PATH_HALO;
    const int drop_whp = !halo && s->whp, drop_wph = halo && !phases && s->wph && s->whp;
    if (cb->recording || (!drop_whp && !drop_wph)) return; /* the recorded work reads them */
    cudaStreamSynchronize(cb->stream);                     /* queued convs may still read them */
    if (drop_whp) {
        cu_free_param(cb, s->whp, s->whp_bytes);
        s->whp = NULL, s->whp_bytes = 0;
    }
    if (drop_wph) {
        cu_free_param(cb, s->wph, s->wph_bytes);
        s->wph = NULL; /* wph_bytes stays: the halo layout's size */
    }
}

/* One timed run of the shape on the halo kernel (halo) or the phase convs: *ms, or -1 where the
 * halo kernel refused it (s->nohalo; an expected fallback, no error left). */
static int up_timed(cuda_backend *cb, const vae_op *op, conv_state *s, const void *x0, int n_in,
                    int h, int w, const void *residual, void *y, int halo, float *ms) {
    int rc = cu_tune_mark(cb, 0, op->name);
    if (rc == VAE_OK)
        rc = halo ? cu_conv_halo_up2(cb, op, s, x0, n_in, h, w, residual, y)
                  : phases_blocks(cb, op, s, x0, n_in, h, w, residual, y);
    if (rc == VAE_EUNSUPPORTED && halo) {
        vae_error_clear();
        *ms = -1.0f;
        return VAE_OK;
    }
    return rc ? rc : cu_tune_elapsed(cb, ms, op->name);
}

/* A shape's call and what times it (up_run: way 1 the halo kernel, 0 the phase convs). */
typedef struct {
    cuda_backend *cb;
    const vae_op *op;
    conv_state *s;
    const void *x0, *residual;
    void *y;
    int n_in, h, w;
} up_ctx;
static int up_run(void *ctx, int halo, float *t) {
    up_ctx *c = ctx;
    return up_timed(c->cb, c->op, c->s, c->x0, c->n_in, c->h, c->w, c->residual, c->y, halo, t);
}

/* Whether the halo kernel (one launch straight into y) or the phase convs (planes in the scratch
 * area, then the interleave pass) run n_in frames of h x w: decided once per shape (s->up_tune)
 * by timing both (cu_tune_alternate), or from the tune cache; always the halo kernel with
 * VAE_CUDA_HALO=always. *ran: y is already made by the chosen path. */
static int up_choose(cuda_backend *cb, const vae_op *op, conv_state *s, const void *x0, int n_in,
                     int h, int w, const void *residual, void *y, int *halo, int *ran) {
    *halo = *ran = 0;
    for (int i = 0; i < s->n_up_tune; i++)
        if (s->up_tune[i].n_in == n_in && s->up_tune[i].h == h && s->up_tune[i].w == w) {
            *halo = s->up_tune[i].path == PATH_HALO;
            return VAE_OK;
        }
    if (cb->halo == 2) {
        *halo = 1;
        return VAE_OK;
    }
    const int over = cb->base.limit > 0 && cb->weight_reserve > 0 && !s->whp &&
                     cb->weight_bytes + (int64_t)s->wph_bytes > cb->weight_reserve;
    if (over || !cb->tune || cb->recording || s->n_up_tune == CONV_TUNE_MAX)
        return VAE_OK; /* untimed (or no room for the halo layout): the phase convs */
    char key[160];
    snprintf(key, sizeof key, "up2halo|c%d-%d|n%d|%dx%d|b%d|r%d|d%d|t%d", op->c_in, s->kp, n_in, h,
             w, s->bias != NULL, residual != NULL, cb->dnn_gain_us, cb->tune_reps);
    const int cached = cb->tune_seed ? -1 : cu_tune_lookup(cb, key);
    float ms[2] = {0, 0}; /* phase convs, halo */
    if (cached == PATH_HALO || cached == PATH_BLOCKS) {
        *halo = cached == PATH_HALO;
    } else if (cb->tune_seed) {
        *halo = (int)(cu_conv_seed_hash(cb->tune_seed, op->name, n_in, h, w) % 2);
    } else {
        /* a warm-up run of each, then the rounds of VAE_CUDA_TUNE_REPS (at least one) */
        up_ctx c = {cb, op, s, x0, residual, y, n_in, h, w};
        int last = 0, rc = cu_tune_alternate(cb, &c, up_run, 1, cb->tune_reps, ms, &last);
        if (rc) return rc;
        *halo = ms[1] >= 0 && ms[1] < ms[0];
        *ran = last == *halo; /* that run made y */
        cu_tune_store(cb, key, *halo ? PATH_HALO : PATH_BLOCKS);
    }
    if (ms[0] > 0)
        VAE_DEBUG("%s: up2 of %d frames %dx%d: phase convs %.3f ms, halo tile %.3f ms -> %s",
                  op->name, n_in, h, w, ms[0], ms[1], *halo ? "halo tile" : "phase convs");
    else
        VAE_DEBUG("%s: up2 of %d frames %dx%d: %s -> %s", op->name, n_in, h, w,
                  cb->tune_seed ? "seeded" : "from the tune cache",
                  *halo ? "halo tile" : "phase convs");
    s->up_tune[s->n_up_tune++] = (conv_tune){n_in, h, w, *halo ? PATH_HALO : PATH_BLOCKS};
    up_trim(cb, s);
    return VAE_OK;
}

int cu_conv_up_phase(cuda_backend *cb, const vae_op *op, conv_state *s, const void *const *frames,
                     int n_in, int h, int w, const void *residual, void *y, int *acted) {
    const size_t fb = (size_t)h * w * op->c_in * cb->base.elem_size;
    *acted = 0;
    if (!cu_frames_consecutive(frames, n_in, 1, fb))
        return vae_fail(VAE_EUNSUPPORTED, "%s: frames not consecutive", op->name);
    if (!cu_conv_halo_up2_ok(cb, op, s))
        return phases_y(cb, op, s, frames[0], n_in, h, w, residual, y, acted);
    /* the phase filters: the phase convs' and the source of the halo kernel's layout */
    int rc = s->whp ? VAE_OK : need_wph(cb, op, s), halo = 0, ran;
    if (rc || (rc = up_choose(cb, op, s, frames[0], n_in, h, w, residual, y, &halo, &ran)))
        return rc;
    if (ran) { /* (the halo kernel applies no activation; the phase convs' interleave does) */
        *acted = !halo && interleave_act(op) != VAE_ACT_NONE;
        return VAE_OK;
    }
    if (halo) {
        rc = cu_conv_halo_up2(cb, op, s, frames[0], n_in, h, w, residual, y);
        if (rc != VAE_EUNSUPPORTED) return rc;
        vae_error_clear(); /* expected: the phase convs instead */
    }
    return phases_y(cb, op, s, frames[0], n_in, h, w, residual, y, acted);
}
