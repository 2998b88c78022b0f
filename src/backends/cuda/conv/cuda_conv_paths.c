/* cuda_conv_paths.c -- the paths a conv call can take (cuda_conv.c's header says when each is
 * chosen): per block of output frames (cuDNN 2-D over the temporally gathered input, pointwise
 * GEMMs or im2col + GEMM through cuBLAS), 3-D (one cuDNN NDHWC conv over consecutive frames),
 * padded 3-D (a channel-padded window, then cuDNN or the implicit-GEMM kernels), and the
 * fallbacks between them (cu_conv_run_path). The implicit-GEMM and FP8 kernels:
 * cuda_conv_igemm.c; the weight layouts: cuda_conv_weights.c.
 */
#include <stdint.h>
#include <string.h>

#include "backends/cuda/conv/cuda_conv_internal.h"

/* Y[P][co] = X[P][K] * W[co][K]^T + beta * Y (row-major), float32 accumulation. */
static int gemm_xwt(cuda_backend *cb, const void *w, int64_t k, int co, const void *x, int64_t p,
                    void *y, float beta, const char *who) {
    const cudaDataType_t t = cu_blas_type(cb->base.dtype);
    const size_t es = cb->base.elem_size;
    const float one = 1.0f;
    const int64_t max_rows = (int64_t)1 << 30;
    int ph = cu_prof_begin(cb, CU_P_CONV_GEMM);
    for (int64_t r0 = 0; r0 < p; r0 += max_rows) {
        int64_t n = p - r0 < max_rows ? p - r0 : max_rows;
        cublasStatus_t st = cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, co, (int)n, (int)k,
                                         &one, w, t, (int)k, (const char *)x + (size_t)r0 * k * es,
                                         t, (int)k, &beta, (char *)y + (size_t)r0 * co * es, t, co,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        int rc = cu_blas_check(st, who, "cublasGemmEx");
        if (rc) {
            cu_prof_end(cb, ph);
            return rc;
        }
    }
    cu_prof_end(cb, ph);
    cb->n_conv_gemm++;
    return VAE_OK;
}

static void fill_frames(cuk_frames *f, const void *const *frames, int n) {
    memset(f, 0, sizeof *f);
    for (int i = 0; i < n && i < CUK_MAX_FRAMES; i++)
        f->p[i] = frames[i];
}

/* Bytes of one output frame's temporally gathered input x' with explicit zero padding
 * ([h + pads][w + pads][cg]): what the per-block path holds in the scratch area per frame. */
size_t cu_conv_gathered_bytes(const vae_op *op, int h, int w, int cg, size_t es) {
    return (size_t)(h + op->pad_h[0] + op->pad_h[1]) * (size_t)(w + op->pad_w[0] + op->pad_w[1]) *
           (size_t)cg * es;
}

int cu_frames_consecutive(const void *const *fr, int tb, int st, size_t fb) {
    for (int j = 1; j < tb; j++)
        if ((const char *)fr[j * st] != (const char *)fr[0] + (size_t)j * fb) return 0;
    return 1;
}

/* Before an unfused block of output frames [j0, j0+tb): y = bias + residual there (beta = 1), or
 * beta = 0 when there is neither. Idempotent (the residual is not y when this runs per block). */
static int block_epi(conv_call *cc, int j0, int tb) {
    if (cc->init_done) {
        cc->beta = 1.0f;
        return VAE_OK;
    }
    if (!cc->s->bias && !cc->res) {
        cc->beta = 0.0f;
        return VAE_OK;
    }
    cuda_backend *cb = cc->cb;
    size_t off = (size_t)j0 * cc->yfb;
    int ph = cu_prof_begin(cb, CU_P_BIAS);
    int rc = cu_check(cuk_bias_init(cb->stream, cb->base.dtype, (char *)cc->y + off, cc->s->bias,
                                    cc->res ? (const char *)cc->res + off : NULL,
                                    (int64_t)tb * cc->ho * cc->wo, cc->op->c_out),
                      cc->op->name, "bias");
    cu_prof_end(cb, ph);
    cc->beta = 1.0f;
    return rc;
}

/* cuDNN convolution of output frames [j0, j0+tb): fused epilogue when possible, else block_epi +
 * beta. VAE_EUNSUPPORTED when cuDNN has no plan even unfused. */
static int dnn_block(conv_call *cc, cu_dnn_conv *g, const void *x, const void *w, int j0, int tb) {
    cuda_backend *cb = cc->cb;
    const vae_op *op = cc->op;
    const size_t off = (size_t)j0 * cc->yfb;
    void *yb = (char *)cc->y + off;
    int rc;
    if (cc->fuse && !cc->init_done) {
        cu_dnn_epi epi = {0.0f, cc->s->bias_dt, cc->s->bias,
                          cc->res ? (const char *)cc->res + off : NULL};
        g->epi = op->act == VAE_ACT_RELU ? CU_DNN_EPI_RELU : CU_DNN_EPI_BIAS;
        int ph = cu_prof_begin(cb, CU_P_CONV_DNN);
        rc = cu_dnn_conv_run(cb, g, x, w, &epi, yb, op->name);
        cu_prof_end(cb, ph);
        const int relu = g->epi == CU_DNN_EPI_RELU;
        g->epi = CU_DNN_EPI_NONE;
        if (rc == VAE_OK) {
            cb->n_conv_cudnn++;
            cb->n_conv_fused++;
            if (relu) cc->act_frames += tb;
            return VAE_OK;
        }
        if (rc != VAE_EUNSUPPORTED) return rc;
        vae_error_clear(); /* expected: unfused below */
    }
    if ((rc = block_epi(cc, j0, tb))) return rc;
    cu_dnn_epi epi = {cc->beta, NULL, NULL, NULL};
    int ph = cu_prof_begin(cb, CU_P_CONV_DNN);
    rc = cu_dnn_conv_run(cb, g, x, w, &epi, yb, op->name);
    cu_prof_end(cb, ph);
    if (rc == VAE_OK) cb->n_conv_cudnn++;
    return rc;
}

/* im2col + GEMM over output frames [j0, j0+tb); fr = frames + j0*st */
static int block_im2col(conv_call *cc, const void *const *fr, int j0, int tb, void *y) {
    const vae_op *op = cc->op;
    cuda_backend *cb = cc->cb;
    const int64_t hwo = (int64_t)cc->ho * cc->wo, k = cc->s->k;
    int64_t np = (int64_t)(cb->scratch_limit / ((size_t)k * cc->es));
    if (np < 1) np = 1;
    if (np > tb * hwo) np = tb * hwo;
    void *col = cu_scratch(cb, (size_t)np * k * cc->es, op->name);
    if (!col) return VAE_ENOMEM;
    int rc0 = block_epi(cc, j0, tb);
    if (rc0) return rc0;
    cuk_frames f;
    fill_frames(&f, fr, (tb - 1) * op->st + op->kt);
    for (int64_t q0 = 0; q0 < tb * hwo; q0 += np) {
        int64_t n = tb * hwo - q0 < np ? tb * hwo - q0 : np;
        int ph = cu_prof_begin(cb, CU_P_GATHER);
        int rc = cu_check(cuk_im2col(cb->stream, cc->es, &f, 0, op->st, op->kt, cc->h, cc->w,
                                     op->c_in, op->kh, op->kw, op->sh, op->sw, op->pad_h[0],
                                     op->pad_w[0], cc->ho, cc->wo, q0, n, col),
                          op->name, "im2col");
        cu_prof_end(cb, ph);
        if (rc) return rc;
        if ((rc = cu_conv_need_w2(cb, op, cc->s))) return rc;
        rc = gemm_xwt(cb, cc->s->w, k, op->c_out, col, n,
                      (char *)y + ((size_t)j0 * hwo + q0) * op->c_out * cc->es, cc->beta, op->name);
        if (rc) return rc;
    }
    return VAE_OK;
}

/* pointwise (1x1, stride 1, unpadded) conv of output frames [j0, j0+tb) as GEMMs */
static int block_pointwise(conv_call *cc, const void *const *fr, int j0, int tb, void *y) {
    const vae_op *op = cc->op;
    cuda_backend *cb = cc->cb;
    const int64_t hw = (int64_t)cc->h * cc->w;
    const size_t yfb = (size_t)hw * op->c_out * cc->es;
    char *yb = (char *)y + (size_t)j0 * yfb;
    int rc0 = block_epi(cc, j0, tb);
    if (rc0 || (rc0 = cu_conv_need_w2(cb, op, cc->s))) return rc0;
    if (op->kt == 1) { /* runs of consecutive frames are one GEMM each */
        for (int j = 0; j < tb;) {
            int run = 1;
            while (j + run < tb && (const char *)fr[(j + run) * op->st] ==
                                       (const char *)fr[j * op->st] + (size_t)run * cc->fb)
                run++;
            int rc = gemm_xwt(cb, cc->s->w, op->c_in, op->c_out, fr[j * op->st], run * hw,
                              yb + (size_t)j * yfb, cc->beta, op->name);
            if (rc) return rc;
            j += run;
        }
        return VAE_OK;
    }
    void *g = cu_scratch(cb, (size_t)tb * op->kt * cc->fb, op->name);
    if (!g) return VAE_ENOMEM;
    cuk_frames f;
    fill_frames(&f, fr, (tb - 1) * op->st + op->kt);
    int ph = cu_prof_begin(cb, CU_P_GATHER);
    int rc = cu_check(cuk_conv_gather(cb->stream, cc->es, &f, tb, op->st, op->kt, cc->h, cc->w,
                                      op->c_in, 0, 0, 0, 0, g),
                      op->name, "temporal gather");
    cu_prof_end(cb, ph);
    if (rc) return rc;
    return gemm_xwt(cb, cc->s->w, cc->s->k, op->c_out, g, tb * hw, yb, cc->beta, op->name);
}

/* spatial conv of output frames [j0, j0+tb) through cuDNN; VAE_EUNSUPPORTED -> caller falls back */
static int block_cudnn(conv_call *cc, const void *const *fr, int j0, int tb) {
    const vae_op *op = cc->op;
    cuda_backend *cb = cc->cb;
    const int sym = op->pad_h[0] == op->pad_h[1] && op->pad_w[0] == op->pad_w[1];
    int rc = cu_conv_need_w2(cb, op, cc->s);
    if (rc) return rc;
    cu_dnn_conv g;
    memset(&g, 0, sizeof g);
    g.nd = 2, g.n = tb, g.dx = g.dy = g.kd = g.sd = 1;
    g.k = op->c_out;
    g.kh = op->kh, g.kw = op->kw, g.sh = op->sh, g.sw = op->sw;
    g.ho = cc->ho, g.wo = cc->wo;
    const void *x;
    /* in place, unless its channels are to be padded (16-bit, c_in not a multiple of 8: cuDNN's
     * kernels for those run at a fraction of its tensor-core rate, TAEHV's 12-channel stems) */
    if (op->kt == 1 && sym && cc->s->cg == op->c_in &&
        cu_frames_consecutive(fr, tb, op->st, cc->fb)) {
        x = fr[0];
        g.c = op->c_in, g.hx = cc->h, g.wx = cc->w, g.ph = op->pad_h[0], g.pw = op->pad_w[0];
    } else {
        /* narrow gathered inputs (e.g. 3 channels x 3 taps) padded to a multiple of 8 */
        const int cg = cc->s->cg, padded = cg != op->kt * op->c_in;
        const int hp = cc->h + op->pad_h[0] + op->pad_h[1],
                  wp = cc->w + op->pad_w[0] + op->pad_w[1];
        if (padded && (rc = cu_conv_need_w2p(cb, op, cc->s))) return rc;
        const size_t frame = cu_conv_gathered_bytes(op, cc->h, cc->w, cg, cc->es);
        void *gbuf = cu_scratch(cb, (size_t)tb * frame, op->name);
        if (!gbuf) return VAE_ENOMEM;
        cuk_frames f;
        fill_frames(&f, fr, (tb - 1) * op->st + op->kt);
        int ph = cu_prof_begin(cb, CU_P_GATHER);
        if (padded)
            rc = cu_check(cuk_conv_gather_pad(cb->stream, cc->es, &f, tb, op->st, op->kt, cc->h,
                                              cc->w, op->c_in, cg, op->pad_h[0], op->pad_h[1],
                                              op->pad_w[0], op->pad_w[1], gbuf),
                          op->name, "conv gather");
        else
            rc = cu_check(cuk_conv_gather(cb->stream, cc->es, &f, tb, op->st, op->kt, cc->h, cc->w,
                                          op->c_in, op->pad_h[0], op->pad_h[1], op->pad_w[0],
                                          op->pad_w[1], gbuf),
                          op->name, "conv gather");
        cu_prof_end(cb, ph);
        if (rc) return rc;
        x = gbuf;
        g.c = cg, g.hx = hp, g.wx = wp, g.ph = 0, g.pw = 0;
        return dnn_block(cc, &g, x, padded ? cc->s->w2p : cc->s->w, j0, tb);
    }
    return dnn_block(cc, &g, x, cc->s->w, j0, tb);
}

/* 3-D path: the frames are consecutive in memory; one cuDNN NDHWC convolution per block of output
 * frames (blocks only keep tensors under 2^31 elements). VAE_EUNSUPPORTED -> caller falls back. */
static int conv3d(conv_call *cc, const void *x0, int t_out) {
    const vae_op *op = cc->op;
    cuda_backend *cb = cc->cb;
    int rc = cu_conv_need_w3(cb, op, cc->s);
    if (rc) return rc;
    const int64_t in_frame = (int64_t)cc->h * cc->w * op->c_in;
    const int64_t out_frame = (int64_t)cc->ho * cc->wo * op->c_out;
    int64_t tb_max = t_out;
    while (tb_max > 1 && (((tb_max - 1) * op->st + op->kt) * in_frame > INT32_MAX ||
                          tb_max * out_frame > INT32_MAX))
        tb_max = (tb_max + 1) / 2;
    if (((tb_max - 1) * op->st + op->kt) * in_frame > INT32_MAX || tb_max * out_frame > INT32_MAX)
        return vae_fail(VAE_EUNSUPPORTED, "%s: frames too large for one cuDNN call", op->name);
    for (int j0 = 0; j0 < t_out; j0 += (int)tb_max) {
        int tb = t_out - j0 < tb_max ? t_out - j0 : (int)tb_max;
        cu_dnn_conv g;
        memset(&g, 0, sizeof g);
        g.nd = 3, g.n = 1, g.c = op->c_in;
        g.dx = (tb - 1) * op->st + op->kt, g.hx = cc->h, g.wx = cc->w;
        g.k = op->c_out, g.kd = op->kt, g.kh = op->kh, g.kw = op->kw;
        g.pd = 0, g.ph = op->pad_h[0], g.pw = op->pad_w[0];
        g.sd = op->st, g.sh = op->sh, g.sw = op->sw;
        g.dy = tb, g.ho = cc->ho, g.wo = cc->wo;
        const void *x = (const char *)x0 + (size_t)j0 * op->st * cc->fb;
        rc = dnn_block(cc, &g, x, op->kt > 1 ? cc->s->w3 : cc->s->w, j0, tb);
        if (rc) return rc;
        cb->n_conv_3d++;
    }
    return VAE_OK;
}

/* Padded 3-D path: per block of output frames, the block's input frames are copied into a
 * window with cp channels (zeros above c_in) in the scratch area, then one 3-D cuDNN conv. */
static int conv3d_pad(conv_call *cc, const void *const *frames, int t_out) {
    const vae_op *op = cc->op;
    cuda_backend *cb = cc->cb;
    conv_state *s = cc->s;
    int rc = cu_conv_need_w3p(cb, op, s);
    if (rc) return rc;
    const int64_t hw = (int64_t)cc->h * cc->w, in_frame = hw * s->cp;
    const int64_t out_frame = (int64_t)cc->ho * cc->wo * op->c_out;
    int tb_max = (CUK_MAX_FRAMES - op->kt) / op->st + 1;
    if (tb_max > t_out) tb_max = t_out;
    /* the temporary window is the scratch area: within scratch_limit (at least one output
     * frame's kt frames), so that this path needs no more memory than the per-block gathers */
    const int64_t cap = (int64_t)(cb->scratch_limit / ((size_t)in_frame * cc->es));
    while (tb_max > 1 && ((int64_t)(tb_max - 1) * op->st + op->kt > cap ||
                          ((int64_t)(tb_max - 1) * op->st + op->kt) * in_frame > INT32_MAX ||
                          tb_max * out_frame > INT32_MAX))
        tb_max--;
    if (((int64_t)(tb_max - 1) * op->st + op->kt) * in_frame > INT32_MAX ||
        tb_max * out_frame > INT32_MAX)
        return vae_fail(VAE_EUNSUPPORTED, "%s: frames too large for one cuDNN call", op->name);
    for (int j0 = 0; j0 < t_out; j0 += tb_max) {
        const int tb = t_out - j0 < tb_max ? t_out - j0 : tb_max;
        const int nf = (tb - 1) * op->st + op->kt;
        void *win = cu_scratch(cb, (size_t)(nf * in_frame) * cc->es, op->name);
        if (!win) return VAE_ENOMEM;
        cuk_frames f;
        fill_frames(&f, frames + (size_t)j0 * op->st, nf);
        int ph = cu_prof_begin(cb, CU_P_GATHER);
        cudaError_t e = cuk_frames_pad(cb->stream, cc->es, &f, nf, hw, op->c_in, s->cp, win);
        cu_prof_end(cb, ph);
        if (e == cudaErrorInvalidValue) { /* misaligned frames: not this path */
            cudaGetLastError();
            return vae_fail(VAE_EUNSUPPORTED, "%s: frames not aligned for the padded path",
                            op->name);
        }
        rc = cu_check(e, op->name, "channel padding");
        int done = 0;
        if (rc == VAE_OK && cu_conv_igemm_padded_ok(cc)) {
            rc = cu_conv_igemm_padded(cc, win, nf, j0);
            done = rc == VAE_OK;
            if (rc == VAE_EUNSUPPORTED) {
                vae_error_clear(); /* expected: cuDNN's 3-D conv below */
                rc = VAE_OK;
            }
        }
        if (rc == VAE_OK && !done) {
            cu_dnn_conv g;
            memset(&g, 0, sizeof g);
            g.nd = 3, g.n = 1, g.c = s->cp;
            g.dx = nf, g.hx = cc->h, g.wx = cc->w;
            g.k = op->c_out, g.kd = op->kt, g.kh = op->kh, g.kw = op->kw;
            g.pd = 0, g.ph = op->pad_h[0], g.pw = op->pad_w[0];
            g.sd = op->st, g.sh = op->sh, g.sw = op->sw;
            g.dy = tb, g.ho = cc->ho, g.wo = cc->wo;
            rc = dnn_block(cc, &g, win, s->w3p, j0, tb);
            if (rc == VAE_OK) cb->n_conv_3d++;
        }
        if (rc) return rc; /* stream order keeps the conv's reads of win safe from its reuse */
    }
    return VAE_OK;
}

/* A path ended (rc): where it made all of y and cuDNN's epilogue applied op->act to each output
 * frame, the conv's pass after it is done (a path writes each frame once). The count starts again
 * for the next path: every path attempt that can count ends here. */
static int act_settled(conv_call *cc, int t_out, int rc) {
    if (rc == VAE_OK && cc->op->act != VAE_ACT_NONE && cc->act_frames >= t_out) cc->post_done = 1;
    cc->act_frames = 0;
    return rc;
}

static int conv_blocks(conv_call *cc, const void *const *frames, int t_out);

/* The per-block path (any frame list). */
int cu_conv_blocks(conv_call *cc, const void *const *frames, int t_out) {
    return act_settled(cc, t_out, conv_blocks(cc, frames, t_out));
}

static int conv_blocks(conv_call *cc, const void *const *frames, int t_out) {
    cuda_backend *cb = cc->cb;
    const vae_op *op = cc->op;
    conv_state *s = cc->s;
    const int h = cc->h, w = cc->w;
    void *y = cc->y;
    const int pointwise = op->kh == 1 && op->kw == 1 && op->sh == 1 && op->sw == 1 &&
                          op->pad_h[0] == 0 && op->pad_h[1] == 0 && op->pad_w[0] == 0 &&
                          op->pad_w[1] == 0;
    int rc = VAE_OK;
    /* output frames per block: the frame list of a block fits a kernel argument, and its gathered
     * input stays within scratch_limit (at least one frame) */
    int tb_max = (CUK_MAX_FRAMES - op->kt) / op->st + 1;
    size_t per_frame = cu_conv_gathered_bytes(op, h, w, s->cg, cc->es);
    size_t fit = per_frame ? cb->scratch_limit / per_frame : (size_t)tb_max;
    if (fit < 1) fit = 1;
    if ((size_t)tb_max > fit) tb_max = (int)fit;

    for (int j0 = 0; j0 < t_out; j0 += tb_max) {
        int tb = t_out - j0 < tb_max ? t_out - j0 : tb_max;
        const void *const *fr = frames + (size_t)j0 * op->st;
        if (pointwise) {
            rc = VAE_EUNSUPPORTED;
            /* 1x1 convs by cuDNN too, for its fused bias epilogue (VAE_CUDA_PW=gemm: cuBLAS) */
            if (cb->pw_dnn && op->kt == 1 && cc->fuse && !s->pw_gemm) {
                rc = block_cudnn(cc, fr, j0, tb);
                if (rc == VAE_EUNSUPPORTED) s->pw_gemm = 1;
            }
            if (rc == VAE_EUNSUPPORTED) {
                vae_error_clear(); /* expected: cuBLAS instead */
                rc = block_pointwise(cc, fr, j0, tb, y);
            }
        } else {
            rc = VAE_EUNSUPPORTED;
            if (!s->use_gemm) {
                rc = block_cudnn(cc, fr, j0, tb);
                if (rc == VAE_EUNSUPPORTED && cb->conv_mode != CU_CONV_CUDNN) {
                    VAE_DEBUG("%s: %s; using im2col + GEMM", op->name, vae_last_error());
                    vae_error_clear();
                    s->use_gemm = 1;
                }
            }
            if (s->use_gemm) rc = block_im2col(cc, fr, j0, tb, y);
        }
        if (rc) return rc;
    }
    return VAE_OK;
}

/* 1 when a path's rc says "not for this conv" (VAE_EUNSUPPORTED): said at debug level with the
 * path tried next, the error cleared. */
static int falls_back(const conv_call *cc, int rc, const char *next) {
    if (rc != VAE_EUNSUPPORTED) return 0;
    VAE_DEBUG("%s: %s; using the %s path", cc->op->name, vae_last_error(), next);
    vae_error_clear();
    return 1;
}

/* The path, or where it falls back to: implicit GEMM -> 3-D -> per block, padded 3-D -> per
 * block (each fallback remembered for the op). */
int cu_conv_run_path(conv_call *cc, const void *const *frames, int t_out, int path) {
    conv_state *s = cc->s;
    cc->post_done = 0; /* y is made anew: its norm or activation still to apply */
    if (path == PATH_HALO && !s->nohalo) {
        int rc = cu_conv_halo(cc, frames[0], t_out);
        if (!falls_back(cc, rc, "implicit-GEMM")) return rc;
    }
    if (path == PATH_HALO) path = cu_conv_igemm_ok(cc, 1) ? PATH_IGEMM : PATH_3D;
    if (path == PATH_IGEMM && !s->noigemm) {
        int rc = cu_conv_igemm(cc, frames[0], t_out);
        if (!falls_back(cc, rc, "3-D")) return rc;
        s->noigemm = 1;
    }
    if (path == PATH_IGEMM) path = cu_conv_pads_even(cc->op) ? PATH_3D : PATH_BLOCKS;
    if (path == PATH_3D && !s->no3d) {
        int rc = act_settled(cc, t_out, conv3d(cc, frames[0], t_out));
        if (!falls_back(cc, rc, "per-block")) return rc;
        s->no3d = 1;
    }
    if (path == PATH_3DPAD && s->cp) {
        int rc = act_settled(cc, t_out, conv3d_pad(cc, frames, t_out));
        if (!falls_back(cc, rc, "per-block")) return rc;
        s->cp = 0;
    }
    return cu_conv_blocks(cc, frames, t_out);
}
