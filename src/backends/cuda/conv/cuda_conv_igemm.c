/* cuda_conv_igemm.c -- the convs that the engine's own GEMM kernels run (cuda_conv_internal.h):
 * implicit GEMM (CUTLASS's bf16 kernels on sm_90a; elsewhere, or under VAE_CUDA_MMA=1, the
 * mma.sync kernel of cuda_mma_conv.cu: cb->mma) and the halo-tile kernel (the 96-filter 3x3
 * convs, 16-bit, sm_90a), two candidates of cuda_conv.c's tuner, and the FP8 path of dtype fp8
 * (the kernels: cutlass/ and sm90/, their choice: cuda_igemm.cu, or the mma.sync one; the
 * quantisation: cuda_fp8.cu).
 */
#include "backends/cuda/base/cuda_host.h"
#include "backends/cuda/conv/cuda_conv_internal.h"
#include "core/fp8.h"

/* What every CUTLASS conv here needs of the op: stride 1, symmetric spatial padding and no input
 * upsampling (op.h vae_op_plain_geometry; a temporal conv's window is read in place, a 2-D conv's
 * frames are its "time" axis with one tap; the kernels' channel rules: cuda_igemm.cu). */
static int igemm_geometry(const vae_op *op) {
    return vae_op_plain_geometry(op);
}

/* Strided or unevenly padded convs (the encoders' downsamplers: 3 x 3 stride 2 with the padding
 * after the rows and columns, temporal stride 2): CUTLASS's kernels alone (the TMA's traversal
 * strides and its own padding on each side), not the mma.sync one, nor the halo-tile kernel. */
static int igemm_strided(const cuda_backend *cb, const vae_op *op) {
    return !cb->mma && op->up <= 1 && !vae_op_plain_geometry(op);
}

/* The 16-bit kernels (CUTLASS's, or the mma.sync one: cb->mma) take c_in input channels (the
 * op's, or its padded count) to s->kp == c_out outputs, and nothing has refused the op before. */
static int igemm_takes(const cuda_backend *cb, const conv_state *s, const vae_op *op, int ci) {
    if (!cb->igemm || s->noigemm || s->kp != op->c_out) return 0;
    if (cb->mma) /* channels only: the phases' 2 x 2 (padding 1) as well as the op's own taps */
        return cuk_mma_supported(cb->base.dtype, ci, s->kp);
    return cuk_igemm_supported(cb->base.dtype, ci, s->kp);
}

/* The implicit-GEMM kernel takes this conv over a contiguous window (frames consecutive). */
int cu_conv_igemm_ok(const conv_call *cc, int consec) {
    return consec && (igemm_geometry(cc->op) || igemm_strided(cc->cb, cc->op)) &&
           igemm_takes(cc->cb, cc->s, cc->op, cc->op->c_in);
}

int cu_conv_halo_takes(const cuda_backend *cb, const vae_op *op, const conv_state *s) {
    return cb->halo && !s->nohalo && s->kp == op->c_out && igemm_geometry(op) &&
           cuk_halo_takes(cb->base.dtype, op->kt, op->kh, op->kw, op->pad_h[0], op->pad_w[0],
                          op->c_in, op->c_out);
}

int cu_conv_halo_ok(const conv_call *cc, int consec) {
    return consec && cu_conv_halo_takes(cc->cb, cc->op, cc->s);
}

/* One bf16 kernel call: x [t_in][h][w][ci] by filters wt [kp][kt][kh][kw][ci] (spatial padding
 * ph, pw) into y, + bias, + res; profiled, its host time and the conv counted. VAE_EUNSUPPORTED
 * (and the op marked: s->noigemm) when the kernel refuses the problem (TMA limits). */
typedef struct igemm_call {
    const void *x;
    int t_in, h, w, ci, kt, kh, kw, ph, pw;
    const void *wt;
    const float *bias;
    const void *res;
    void *y;
} igemm_call;

static int igemm_launch(cuda_backend *cb, conv_state *s, const vae_op *op, const igemm_call *k,
                        const cuk_igemm_geom *g, const char *what) {
    int ph = cu_prof_begin(cb, CU_P_IGEMM);
    const double t0 = cu_now();
    cudaError_t e =
        cb->mma
            ? cuk_mma_conv(cb->stream, cb->base.dtype, k->x, k->t_in, k->h, k->w, k->ci, s->kp,
                           k->kt, k->kh, k->kw, k->ph, k->pw, k->wt, NULL, k->bias, k->res, k->y)
            : cuk_igemm_conv(cb->stream, cb->base.dtype, k->x, k->t_in, k->h, k->w, k->ci, s->kp,
                             k->kt, k->kh, k->kw, k->ph, k->pw, g, k->wt, k->bias, k->res, k->y);
    cb->host_s[CU_H_IGEMM] += cu_now() - t0;
    cu_prof_end(cb, ph);
    if (e == cudaErrorNotSupported) {
        cudaGetLastError();
        s->noigemm = 1;
        return vae_fail(VAE_EUNSUPPORTED, "%s: the implicit-GEMM kernel cannot take %s of %dx%d "
                        "frames", op->name, what, k->h, k->w);
    }
    int rc = cu_check(e, op->name, "implicit GEMM conv");
    if (rc == VAE_OK) cb->n_conv_igemm++, cb->n_conv_mma += cb->mma;
    return rc;
}

/* A halo-tile launch's outcome: VAE_EUNSUPPORTED (and the op marked: s->nohalo) where the kernel
 * refused h x w frames (the TMA cannot describe them), else cu_check's. */
static int halo_result(const vae_op *op, conv_state *s, cudaError_t e, int h, int w) {
    if (e == cudaErrorNotSupported) {
        cudaGetLastError();
        s->nohalo = 1;
        return vae_fail(VAE_EUNSUPPORTED, "%s: the halo-tile kernel cannot take %dx%d frames",
                        op->name, h, w);
    }
    return cu_check(e, op->name, "halo-tile conv");
}

/* The halo-tile kernel over the window x0 (its own filter layout, bias and residual in its
 * epilogue, after an up-front init as cu_conv_igemm's; the conv's RMS norm too: each output
 * pixel's 96 channels are in one tile). */
int cu_conv_halo(conv_call *cc, const void *x0, int t_out) {
    const vae_op *op = cc->op;
    cuda_backend *cb = cc->cb;
    conv_state *s = cc->s;
    int rc = cu_conv_need_wh(cb, op, s);
    if (rc) return rc;
    int ph = cu_prof_begin(cb, CU_P_HALO);
    const double t0 = cu_now();
    cudaError_t e = cuk_halo_conv(cb->stream, cb->base.dtype, x0, t_out + op->kt - 1, cc->h, cc->w,
                                  op->c_in, op->kt, s->wh, cc->init_done ? NULL : s->bias,
                                  cc->init_done ? cc->y : cc->res, s->nw, (int)op->norm_act,
                                  op->act_scale, cu_codes_scale(op), cc->y, cb->sm_count);
    cb->host_s[CU_H_IGEMM] += cu_now() - t0;
    cu_prof_end(cb, ph);
    if ((rc = halo_result(op, s, e, cc->h, cc->w))) return rc;
    cb->n_conv_halo++;
    cb->n_conv_normed += s->nw != NULL;
    cc->post_done = s->nw != NULL;
    return VAE_OK;
}

int cu_conv_halo_up2_ok(const cuda_backend *cb, const vae_op *op, const conv_state *s) {
    return cb->halo && !s->nohalo && s->kp == op->c_out &&
           cuk_halo_takes(cb->base.dtype, 1, 3, 3, 1, 1, op->c_in, op->c_out);
}

int cu_conv_halo_up2(cuda_backend *cb, const vae_op *op, conv_state *s, const void *x, int t, int h,
                     int w, const void *res, void *y) {
    int rc = cu_conv_need_whp(cb, op, s);
    if (rc) return rc;
    int ph = cu_prof_begin(cb, CU_P_HALO);
    const double t0 = cu_now();
    cudaError_t e = cuk_halo_conv_up2(cb->stream, cb->base.dtype, x, t, h, w, op->c_in, s->whp,
                                      s->bias, res, y, cb->sm_count);
    cb->host_s[CU_H_IGEMM] += cu_now() - t0;
    cu_prof_end(cb, ph);
    if ((rc = halo_result(op, s, e, h, w))) return rc;
    cb->n_conv_halo_up2++;
    return VAE_OK;
}

/* Implicit-GEMM path: the whole window x0 (t_out + kt - 1 frames) in one kernel, bias and
 * residual in its epilogue (after an up-front bias + residual init: y accumulates on itself).
 * VAE_EUNSUPPORTED when the kernel refuses the problem. */
int cu_conv_igemm(conv_call *cc, const void *x0, int t_out) {
    const vae_op *op = cc->op;
    int rc = cu_conv_need_w3(cc->cb, op, cc->s);
    if (rc) return rc;
    const cuk_igemm_geom g = {op->st, op->sh, op->sw, op->pad_h[1], op->pad_w[1]};
    const int t_in = op->st * (t_out - 1) + op->kt; /* the window's frames the outputs read */
    const igemm_call k = {x0,
                          t_in,
                          cc->h,
                          cc->w,
                          op->c_in,
                          op->kt,
                          op->kh,
                          op->kw,
                          op->pad_h[0],
                          op->pad_w[0],
                          op->kt > 1 ? cc->s->w3 : cc->s->w, /* kt 1: the 2-D layout is the same */
                          cc->init_done ? NULL : cc->s->bias,
                          cc->init_done ? cc->y : cc->res,
                          cc->y};
    return igemm_launch(cc->cb, cc->s, op, &k, &g, "the window");
}

int cu_conv_igemm_padded_ok(const conv_call *cc) {
    return cc->s->cp > 0 && igemm_geometry(cc->op) && igemm_takes(cc->cb, cc->s, cc->op, cc->s->cp);
}

int cu_conv_igemm_padded(conv_call *cc, const void *win, int nf, int j0) {
    const vae_op *op = cc->op;
    const conv_state *s = cc->s;
    const size_t off = (size_t)j0 * cc->yfb;
    void *yb = (char *)cc->y + off;
    const igemm_call k = {win, nf, cc->h, cc->w, s->cp, op->kt, op->kh, op->kw, op->pad_h[0],
                          op->pad_w[0], s->w3p, cc->init_done ? NULL : s->bias,
                          cc->init_done ? yb : cc->res ? (const char *)cc->res + off : NULL, yb};
    return igemm_launch(cc->cb, cc->s, op, &k, NULL, "the padded window");
}

/* The four 2x2 phase convs of a nearest x2 upsampling + 3x3 conv (cuda_conv.c's phase path):
 * x [tb][h][w][c_in] -> out + p * plane, [tb][h+1][w+1][kp] each, with the bias; wph: the phase
 * filters [4][kp][2][2][c_in]. VAE_EUNSUPPORTED when the kernels do not take them. */
int cu_conv_igemm_phases_ok(const cuda_backend *cb, const vae_op *op, const conv_state *s) {
    return igemm_takes(cb, s, op, op->c_in);
}

int cu_conv_igemm_phases(cuda_backend *cb, const vae_op *op, conv_state *s, const void *x, int tb,
                         int h, int w, void *out, size_t plane) {
    if (!cu_conv_igemm_phases_ok(cb, op, s))
        return vae_fail(VAE_EUNSUPPORTED, "%s: no implicit-GEMM kernel for the phases", op->name);
    const size_t filt = (size_t)s->kp * 4 * op->c_in * cb->base.elem_size;
    for (int p = 0; p < 4; p++) {
        const igemm_call k = {x, tb, h, w, op->c_in, 1, 2, 2, 1, 1,
                              (const char *)s->wph + p * filt, s->bias, NULL,
                              (char *)out + p * plane};
        int rc = igemm_launch(cb, s, op, &k, NULL, "the phases");
        if (rc) return rc;
    }
    return VAE_OK;
}

/* ---- the warm-up ---- */
/* The kernels a conv could take: the 16-bit CUTLASS one of its channels (its own taps, or an
 * upsampling conv's phases), the halo-tile kernel's forms, the E4M3 kernel where fp8 runs it. */
static cudaError_t load_kernels(const cuda_backend *cb, const vae_op *op) {
    const int dt = (int)cb->base.dtype, plain = igemm_geometry(op);
    cudaError_t e = plain || op->up > 1 || igemm_strided(cb, op)
                        ? cuk_igemm_load(dt, op->c_in, op->c_out)
                        : cudaSuccess;
    if (e == cudaSuccess && cb->halo && plain &&
        cuk_halo_takes(dt, op->kt, op->kh, op->kw, op->pad_h[0], op->pad_w[0], op->c_in, op->c_out))
        e = cuk_halo_load(dt, 0);
    if (e == cudaSuccess && cb->halo && op->up == 2 &&
        cuk_halo_takes(dt, 1, 3, 3, 1, 1, op->c_in, op->c_out))
        e = cuk_halo_load(dt, 1);
    if (e == cudaSuccess && cu_conv_fp8_takes(cb, op))
        e = cu_conv_fp8_halo_takes(cb, op) ? cuk_halo_load(VAE_DTYPE_FP8, 0)
                                           : cuk_igemm_load(VAE_DTYPE_FP8, op->c_in, op->c_out);
    return e;
}

/* Under CUDA's lazy loading a kernel's first launch loads its module; here they load at session
 * creation instead. A failure is left to the launch (which falls back), not reported here. */
void cuda_conv_load_kernels(cuda_backend *cb, const vae_program *p) {
    if (!cb->igemm || cb->mma) return;
    for (int i = 0; i < p->n_ops; i++) {
        if (p->ops[i].kind != VAE_OP_CONV || vae_op_grouped(&p->ops[i])) continue;
        const cudaError_t e = load_kernels(cb, &p->ops[i]);
        if (e != cudaSuccess) {
            cudaGetLastError();
            VAE_DEBUG("%s: its kernels not loaded ahead (%s)", p->ops[i].name,
                      cudaGetErrorString(e));
            return;
        }
    }
}

/* ---- FP8 ---- */
/* The E4M3 kernel for a conv of core's rule (op.h vae_op_fp8_kernel: the rule rows of
 * fp8_shapes.h): the sm_90a kernels where they run, in the table's order (CUTLASS's GEMM, then
 * the halo-tile kernel where it is on: not under VAE_CUDA_HALO=off), else the mma.sync one
 * (cb->mma); each kernel's takes reads its own row of the table. */
static vae_fp8_kernel fp8_kernel(const cuda_backend *cb, const vae_op *op) {
    if (!cb->fp8 || !vae_op_fp8_kernel(op)) return VAE_FP8_NONE;
    const int kt = op->kt, kh = op->kh, kw = op->kw, ph = op->pad_h[0], pw = op->pad_w[0];
    if (cb->mma)
        return cuk_mma_takes(VAE_DTYPE_FP8, kt, kh, kw, ph, pw, op->c_in, op->c_out)
                   ? VAE_FP8_MMA
                   : VAE_FP8_NONE;
    if (cuk_igemm8_takes(kt, kh, kw, ph, pw, op->c_in, op->c_out)) return VAE_FP8_GEMM;
    return cb->halo && cuk_halo8_takes(kt, kh, kw, ph, pw, op->c_in, op->c_out) ? VAE_FP8_HALO
                                                                                : VAE_FP8_NONE;
}

/* backend.h fp8_conv: asked by the session (vae_program_pick_fp8), which keeps the answer in
 * op->fp8_kernel; every later question reads that (cu_conv_fp8_takes) */
int cuda_conv_fp8(vae_backend *be, const vae_op *op) {
    return fp8_kernel(cu_be(be), op);
}

/* The producers: an RMS norm, or a conv with a folded one (the norm's pass after the conv, or
 * the halo-tile kernels' epilogue: both write the codes); the readers: the sm_90a E4M3 kernels
 * (strided places), not the mma.sync one, nor an upsampling conv; the codes' conversion takes at
 * most 1024 channels a pixel (cuk_fp8_codes_convert's own limit). */
int cuda_fp8_codes(vae_backend *be, const vae_op *producer, const vae_op *reader) {
    const cuda_backend *cb = cu_be(be);
    const int dt = (int)cb->base.dtype;
    if (reader->fp8_kernel == VAE_FP8_MMA || reader->up > 1 || reader->c_in > 1024 ||
        !cu_conv_fp8_takes(cb, reader))
        return 0;
    if (producer->kind == VAE_OP_RMS_NORM) return cuk_rms_codes_ok(dt, producer->c_in);
    return producer->kind == VAE_OP_CONV && producer->norm_w &&
           cuk_rms_codes_ok(dt, producer->c_out);
}

/* The op's mark and the kernel its session resolved (op->fp8_kernel), one of this backend's */
int cu_conv_fp8_takes(const cuda_backend *cb, const vae_op *op) {
    const vae_fp8_kernel k = op->fp8_kernel;
    return cb->fp8 && vae_op_fp8(op) &&
           (cb->mma ? k == VAE_FP8_MMA : k == VAE_FP8_GEMM || k == VAE_FP8_HALO);
}

/* The E4M3 form of the halo-tile kernel runs the conv: the session's choice (fp8_kernel) */
int cu_conv_fp8_halo_takes(const cuda_backend *cb, const vae_op *op) {
    return cu_conv_fp8_takes(cb, op) && op->fp8_kernel == VAE_FP8_HALO;
}

/* A device block counted with the weights (freed by cu_free_param with the same size). */
static int fp8_alloc(cuda_backend *cb, void **p, size_t bytes, const char *who) {
    int rc = cu_check(cu_dev_malloc(&cb->pool, p, bytes), who, "allocating fp8 weights");
    if (rc == VAE_OK) cb->weight_bytes += (int64_t)bytes;
    return rc;
}

float *cu_conv_w8_scales_host(const vae_op *op, int co) {
    float *host = vae_malloc((size_t)co * sizeof *host);
    if (host) vae_fp8_weight_scales(op->w, co, (int64_t)op->kt * op->kh * op->kw * op->c_in, host);
    return host;
}

uint8_t *cu_conv_w8_codes_host(const vae_op *op, int co, const float *scale) {
    const size_t n = (size_t)co * op->c_in * op->kt * op->kh * op->kw;
    uint8_t *host = vae_malloc(n);
    if (host &&
        !vae_fp8_weights_codes(op->w, co, op->c_in, op->kt, op->kh, op->kw, scale, host, 0)) {
        vae_free(host);
        host = NULL;
    }
    return host;
}

/* An op's E4M3 weight scales (*scale, float32) and codes (into dst: n bytes, channels last) on
 * the device: from the stage (cuda_conv_stage), else made on the host now and uploaded. */
static int w8_upload(cuda_backend *cb, const vae_op *op, int co, size_t n, float **scale,
                     uint8_t *dst) {
    int rc = cu_upload_staged(cb, op->w, CU_STAGE_FP8, (size_t)co, 1, (void **)scale, op->name);
    const void *staged = cu_stage_find(&cb->stage, op->w, CU_STAGE_W8, VAE_DTYPE_FP8, n);
    if (rc == VAE_OK && staged) {
        rc = cu_upload_host(cb, dst, staged, n, op->name);
        cb->n_staged_uploads++;
    }
    if (rc || (*scale && staged)) return rc;
    const double t0 = cu_now();
    float *hs = cu_conv_w8_scales_host(op, co);
    uint8_t *hc = hs && !staged ? cu_conv_w8_codes_host(op, co, hs) : NULL;
    rc = !hs || (!staged && !hc) ? vae_fail(VAE_ENOMEM, "%s: out of memory", op->name) : VAE_OK;
    if (rc == VAE_OK && !*scale)
        rc = cu_upload_param(cb, hs, (size_t)co, 1, (void **)scale, op->name);
    if (rc == VAE_OK && !staged) rc = cu_upload_host(cb, dst, hc, n, op->name); /* copied now */
    vae_free(hs);
    vae_free(hc);
    cb->host_s[CU_H_WEIGHTS] += cu_now() - t0;
    return rc;
}

/* The E4M3 operands of an op (every backend's, fp8.h): each output channel's filters on the
 * E4M3 grid of its scale, as codes in the 3-D layout (s->fp8_halo: then tiled for the halo-tile
 * kernel); the scales, the per-call factors and the input's largest magnitude beside them. All
 * or nothing: after a failure a later call tries again. */
static int need_w8(cuda_backend *cb, const vae_op *op, conv_state *s) {
    if (s->w8) return VAE_OK;
    const int co = s->co;
    const size_t n = (size_t)op->kt * op->kh * op->kw * op->c_in * co,
                 fb = (size_t)co * sizeof(float);
    uint8_t *codes = NULL; /* the 3-D layout: w8 itself, or the halo tiling's source */
    int rc = fp8_alloc(cb, (void **)&s->w8, n, op->name);
    if (rc == VAE_OK && s->fp8_halo) rc = fp8_alloc(cb, (void **)&codes, n, op->name);
    if (!s->fp8_halo) codes = s->w8;
    if (rc == VAE_OK) rc = w8_upload(cb, op, co, n, &s->w8_scale, codes);
    if (rc == VAE_OK) rc = fp8_alloc(cb, (void **)&s->scale8, fb, op->name);
    if (rc == VAE_OK) rc = fp8_alloc(cb, (void **)&s->amax, sizeof(float), op->name);
    if (rc == VAE_OK && s->fp8_halo)
        rc = cu_check(cuk_halo8_tile_filters(cb->stream, codes, s->w8, op->kt, op->c_in), op->name,
                      "fp8 halo-tile filters");
    if (codes != s->w8) cu_free_param(cb, codes, n); /* after the kernel (stream order) */
    if (rc) {
        cudaStreamSynchronize(cb->stream);
        cu_free_param(cb, s->w8, n);
        cu_free_param(cb, s->w8_scale, fb);
        cu_free_param(cb, s->scale8, fb);
        cu_free_param(cb, s->amax, sizeof(float));
        s->w8 = NULL, s->w8_scale = s->scale8 = s->amax = NULL;
    }
    s->w8_bytes = s->w8 ? n : 0;
    cu_note_peak(cb);
    return rc;
}

/* The FP8 kernels take this call: an op they take (s->fp8), its window in place. */
int cu_conv_fp8_ok(const conv_call *cc, int consec) {
    return cc->s->fp8 && consec;
}

/* The FP8 kernel over the window's E4M3 codes q (xs places a value: 1, the window's copy; 2, the
 * codes its producer wrote, op.h fp8_codes_bound): the one op->fp8_kernel names, the halo-tile
 * kernel (the conv's norm too), CUTLASS's, or the mma.sync one (packed codes only). */
static cudaError_t fp8_launch(conv_call *cc, const uint8_t *q, int xs, int n_in) {
    const vae_op *op = cc->op;
    cuda_backend *cb = cc->cb;
    const conv_state *s = cc->s;
    const float *bias = cc->init_done ? NULL : s->bias;
    const void *res = cc->init_done ? cc->y : cc->res;
    if (op->fp8_kernel == VAE_FP8_MMA)
        return xs != 1 ? cudaErrorNotSupported
                       : cuk_mma_conv(cb->stream, cb->base.dtype, q, n_in, cc->h, cc->w, op->c_in,
                                      op->c_out, op->kt, op->kh, op->kw, op->pad_h[0], op->pad_w[0],
                                      s->w8, s->scale8, bias, res, cc->y);
    if (s->fp8_halo)
        return cuk_halo8_conv(cb->stream, cb->base.dtype, q, xs, n_in, cc->h, cc->w, op->c_in,
                              op->kt, s->w8, s->scale8, bias, res, s->nw, (int)op->norm_act,
                              op->act_scale, cu_codes_scale(op), cc->y, cb->sm_count);
    return cuk_igemm8_conv(cb->stream, q, xs, n_in, cc->h, cc->w, op->c_in, op->c_out, op->kt,
                           op->kh, op->kw, op->pad_h[0], op->pad_w[0], s->w8, s->scale8, bias, res,
                           cc->y);
}

/* FP8 path: the window's E4M3 copy (scale from its largest magnitude, in the scratch area; none
 * where its producer wrote the codes, op->fp8_codes_in), the epilogue's factors, then one kernel
 * (fp8_launch). VAE_EUNSUPPORTED when the kernel refuses it. */
int cu_conv_fp8(conv_call *cc, const void *x0, int t_out) {
    const vae_op *op = cc->op;
    cuda_backend *cb = cc->cb;
    conv_state *s = cc->s;
    int rc = need_w8(cb, op, s);
    if (rc) return rc;
    const int n_in = t_out + op->kt - 1, xs = op->fp8_codes_in ? (int)cb->base.elem_size : 1;
    const int64_t n = (int64_t)n_in * cc->h * cc->w * op->c_in;
    const uint8_t *q = op->fp8_codes_in ? x0 : cu_scratch(cb, (size_t)n, op->name);
    if (!q) return VAE_ENOMEM;
    int ph = cu_prof_begin(cb, s->fp8_halo ? CU_P_HALO : CU_P_IGEMM);
    const double t0 = cu_now();
    cudaError_t e = cuk_fp8_quantize(cb->stream, cb->base.dtype, x0, n, op->fp8_bound, s->amax,
                                     op->fp8_codes_in ? NULL : (uint8_t *)q);
    if (e == cudaSuccess) e = cuk_fp8_scales(cb->stream, s->amax, s->w8_scale, s->co, s->scale8);
    if (e == cudaSuccess) e = fp8_launch(cc, q, xs, n_in);
    cb->host_s[CU_H_IGEMM] += cu_now() - t0;
    cu_prof_end(cb, ph);
    if (e == cudaErrorNotSupported) {
        cudaGetLastError();
        return vae_fail(VAE_EUNSUPPORTED, "%s: the fp8 kernel cannot take %dx%d frames", op->name,
                        cc->h, cc->w);
    }
    if ((rc = cu_check(e, op->name, "fp8 conv"))) return rc;
    cb->n_conv_fp8++;
    cb->n_conv_fp8_mma += cb->mma;
    if (s->fp8_halo) { /* it applied the conv's norm too */
        cb->n_conv_fp8_halo++;
        cb->n_conv_normed += s->nw != NULL;
        cc->post_done = s->nw != NULL;
    }
    return VAE_OK;
}

