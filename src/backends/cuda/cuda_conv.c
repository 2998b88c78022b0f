/* cuda_conv.c -- CONV on the GPU.
 *
 * Paths, per call:
 *  - 3-D (kt > 1 or st > 1, symmetric spatial padding, frames consecutive in memory -- what the
 *    executor's contiguous windows give): one cuDNN NDHWC convolution over the frame list in
 *    place, weights [c_out][kt][kh][kw][c_in] (VAE_CUDA_CONV3D=0 turns it off);
 *  - otherwise per block of output frames, with weights [c_out][kh][kw][kt*c_in] (the temporal
 *    taps next to the input channels: one KRSC filter of kt*c_in channels), so that a causal 3-D
 *    conv over a scattered frame list is one 2-D convolution over the "temporally gathered" input
 *    x'[j][y][x][dt*c_in + ci] = frame[j*st + dt][y][x][ci]:
 *    - pointwise kernels (1x1, stride 1, no padding) are GEMMs (cuBLAS): directly on the frames
 *      when kt == 1, else on the gathered x';
 *    - other kernels go to cuDNN (NHWC). The input is used in place when kt == 1, the frames are
 *      consecutive in memory and the padding is symmetric; otherwise x' is gathered with explicit
 *      zero padding (asymmetric {0,1} padding included) and cuDNN runs unpadded;
 *    - when cuDNN has no algorithm for a shape (or VAE_CUDA_CONV=gemm), im2col + cuBLAS GEMM.
 * Bias and residual: for 16-bit activations cuDNN adds them in the convolution's epilogue (fused,
 * float32, one rounding; VAE_CUDA_FUSE=0 turns it off); otherwise y is first set to bias +
 * residual and the convolution accumulates on top (beta = 1). Each weight layout is made on first
 * use. Gathers are bounded by scratch_limit (at least one output frame per block).
 */
#include <string.h>

#include "backends/cuda/cuda_internal.h"

typedef struct conv_state {
    void *w;       /* [c_out][kh][kw][kt*c_in], dtype (made on first use) */
    void *w3;      /* [c_out][kt][kh][kw][c_in], dtype (kt > 1; made on first use) */
    float *bias;   /* [c_out] float32, or NULL */
    void *bias_dt; /* [c_out] activation dtype, or NULL */
    size_t w_bytes, b_bytes, bdt_bytes;
    int64_t k; /* kh*kw*kt*c_in */
    int use_gemm;
    int no3d; /* the 3-D path is unsupported for this op */
} conv_state;

static int conv_check_params(const vae_op *op) {
    if (op->c_in < 1 || op->c_out < 1 || op->kt < 1 || op->kh < 1 || op->kw < 1 || op->st < 1 ||
        op->sh < 1 || op->sw < 1 || op->pad_h[0] < 0 || op->pad_h[1] < 0 || op->pad_w[0] < 0 ||
        op->pad_w[1] < 0 || op->kt > CUK_MAX_FRAMES)
        return vae_fail(VAE_EINVAL,
                        "%s: bad conv parameters (c %d->%d, kernel %dx%dx%d, stride %dx%dx%d, "
                        "pad h %d,%d w %d,%d)",
                        op->name, op->c_in, op->c_out, op->kt, op->kh, op->kw, op->st, op->sh,
                        op->sw, op->pad_h[0], op->pad_h[1], op->pad_w[0], op->pad_w[1]);
    if (!op->w) return vae_fail(VAE_EINVAL, "%s: conv has no weight", op->name);
    if ((int64_t)op->kt * op->kh * op->kw * op->c_in > INT32_MAX / 2)
        return vae_fail(VAE_EUNSUPPORTED, "%s: conv kernel too large", op->name);
    return VAE_OK;
}

/* Uploads op->w (PyTorch [co][ci][kt][kh][kw]) in the 2-D layout [co][kh][kw][kt][ci] or the 3-D
 * layout [co][kt][kh][kw][ci]. */
static int upload_weights(cuda_backend *cb, const vae_op *op, int three_d, void **out) {
    const int ci = op->c_in, co = op->c_out, kt = op->kt, kh = op->kh, kw = op->kw;
    const size_t k = (size_t)kh * kw * kt * ci, n = k * co;
    float *host = vae_malloc(n * sizeof(float));
    if (!host) return vae_fail(VAE_ENOMEM, "%s: out of host memory for weights", op->name);
    for (int o = 0; o < co; o++)
        for (int c = 0; c < ci; c++)
            for (int dt = 0; dt < kt; dt++)
                for (int dh = 0; dh < kh; dh++)
                    for (int dw = 0; dw < kw; dw++) {
                        size_t dst = three_d ? (((size_t)dt * kh + dh) * kw + dw) * ci + c
                                             : (((size_t)dh * kw + dw) * kt + dt) * ci + c;
                        host[(size_t)o * k + dst] =
                            op->w[((((size_t)o * ci + c) * kt + dt) * kh + dh) * kw + dw];
                    }
    int rc = cu_upload_param(cb, host, n, 0, out, op->name);
    vae_free(host);
    return rc;
}

static int need_w2(cuda_backend *cb, const vae_op *op, conv_state *s) {
    if (s->w) return VAE_OK;
    s->w_bytes = (size_t)s->k * op->c_out * cb->base.elem_size;
    return upload_weights(cb, op, 0, &s->w);
}

static int need_w3(cuda_backend *cb, const vae_op *op, conv_state *s) {
    if (op->kt == 1) return need_w2(cb, op, s); /* the same layout */
    if (s->w3) return VAE_OK;
    return upload_weights(cb, op, 1, &s->w3);
}

int cuda_conv_prepare(vae_backend *be, const vae_op *op, void **state) {
    cuda_backend *cb = cu_be(be);
    *state = NULL;
    int rc = conv_check_params(op);
    if (rc) return rc;
    conv_state *s = vae_calloc(1, sizeof *s);
    if (!s) return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
    s->k = (int64_t)op->kh * op->kw * op->kt * op->c_in;
    s->use_gemm = cb->conv_mode == CU_CONV_GEMM;
    /* the layout the model's streams will use (the other one only if a call needs it) */
    const int sym = op->pad_h[0] == op->pad_h[1] && op->pad_w[0] == op->pad_w[1];
    if (op->kt > 1 && cb->conv3d && sym && !s->use_gemm) rc = need_w3(cb, op, s);
    else rc = need_w2(cb, op, s);
    if (rc == VAE_OK && op->b) {
        rc = cu_upload_param(cb, op->b, (size_t)op->c_out, 1, (void **)&s->bias, op->name);
        s->b_bytes = (size_t)op->c_out * sizeof(float);
        if (rc == VAE_OK && be->dtype != VAE_DTYPE_F32) {
            rc = cu_upload_param(cb, op->b, (size_t)op->c_out, 0, &s->bias_dt, op->name);
            s->bdt_bytes = (size_t)op->c_out * be->elem_size;
        }
    }
    if (rc) {
        cuda_conv_unprepare(be, op, s);
        return rc;
    }
    *state = s;
    return VAE_OK;
}

void cuda_conv_unprepare(vae_backend *be, const vae_op *op, void *state) {
    conv_state *s = state;
    if (!s) return;
    cuda_backend *cb = cu_be(be);
    cudaStreamSynchronize(cb->stream);
    cu_free_param(cb, s->w, s->w_bytes);
    if (s->w3) cu_free_param(cb, s->w3, (size_t)s->k * op->c_out * be->elem_size);
    cu_free_param(cb, s->bias, s->b_bytes);
    cu_free_param(cb, s->bias_dt, s->bdt_bytes);
    vae_free(s);
}

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
        cublasStatus_t st = cublasGemmEx(
            cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, co, (int)n, (int)k, &one, w, t, (int)k,
            (const char *)x + (size_t)r0 * k * es, t, (int)k, &beta,
            (char *)y + (size_t)r0 * co * es, t, co, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
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
    for (int i = 0; i < n && i < CUK_MAX_FRAMES; i++) f->p[i] = frames[i];
}

/* frames fr[j*st] for j < tb follow each other in memory (one [tb][h][w][c] tensor) */
static int frames_consecutive(const void *const *fr, int tb, int st, size_t fb) {
    for (int j = 1; j < tb; j++)
        if ((const char *)fr[j * st] != (const char *)fr[0] + (size_t)j * fb) return 0;
    return 1;
}

typedef struct conv_call {
    cuda_backend *cb;
    const vae_op *op;
    conv_state *s;
    int h, w, ho, wo;
    size_t es, fb, yfb; /* element size, input and output frame bytes */
    const void *res;    /* residual (whole output), or NULL */
    void *y;            /* whole output */
    int fuse;           /* bias (+ residual) may go into cuDNN's epilogue */
    int init_done;      /* y was set to bias + residual up front (beta = 1 everywhere) */
    float beta;         /* beta of the block being run (set by block_epi) */
} conv_call;

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
        g->epi = 1;
        int ph = cu_prof_begin(cb, CU_P_CONV_DNN);
        rc = cu_dnn_conv_run(cb, g, x, w, &epi, yb, op->name);
        cu_prof_end(cb, ph);
        g->epi = 0;
        if (rc == VAE_OK) {
            cb->n_conv_cudnn++;
            cb->n_conv_fused++;
            return VAE_OK;
        }
        if (rc != VAE_EUNSUPPORTED) return rc;
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
        if ((rc = need_w2(cb, op, cc->s))) return rc;
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
    if (rc0 || (rc0 = need_w2(cb, op, cc->s))) return rc0;
    if (op->kt == 1) { /* runs of consecutive frames are one GEMM each */
        for (int j = 0; j < tb;) {
            int run = 1;
            while (j + run < tb &&
                   (const char *)fr[(j + run) * op->st] ==
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
    int rc = need_w2(cb, op, cc->s);
    if (rc) return rc;
    cu_dnn_conv g;
    memset(&g, 0, sizeof g);
    g.nd = 2, g.n = tb, g.dx = g.dy = g.kd = g.sd = 1;
    g.k = op->c_out;
    g.kh = op->kh, g.kw = op->kw, g.sh = op->sh, g.sw = op->sw;
    g.ho = cc->ho, g.wo = cc->wo;
    const void *x;
    if (op->kt == 1 && sym && frames_consecutive(fr, tb, op->st, cc->fb)) {
        x = fr[0];
        g.c = op->c_in, g.hx = cc->h, g.wx = cc->w, g.ph = op->pad_h[0], g.pw = op->pad_w[0];
    } else {
        const int hp = cc->h + op->pad_h[0] + op->pad_h[1], wp = cc->w + op->pad_w[0] + op->pad_w[1];
        void *gbuf = cu_scratch(cb, (size_t)tb * hp * wp * op->kt * op->c_in * cc->es, op->name);
        if (!gbuf) return VAE_ENOMEM;
        cuk_frames f;
        fill_frames(&f, fr, (tb - 1) * op->st + op->kt);
        int ph = cu_prof_begin(cb, CU_P_GATHER);
        rc = cu_check(cuk_conv_gather(cb->stream, cc->es, &f, tb, op->st, op->kt, cc->h, cc->w,
                                      op->c_in, op->pad_h[0], op->pad_h[1], op->pad_w[0],
                                      op->pad_w[1], gbuf),
                      op->name, "conv gather");
        cu_prof_end(cb, ph);
        if (rc) return rc;
        x = gbuf;
        g.c = op->kt * op->c_in, g.hx = hp, g.wx = wp, g.ph = 0, g.pw = 0;
    }
    return dnn_block(cc, &g, x, cc->s->w, j0, tb);
}

/* 3-D path: the frames are consecutive in memory; one cuDNN NDHWC convolution per block of output
 * frames (blocks only keep tensors under 2^31 elements). VAE_EUNSUPPORTED -> caller falls back. */
static int conv3d(conv_call *cc, const void *x0, int t_out) {
    const vae_op *op = cc->op;
    cuda_backend *cb = cc->cb;
    int rc = need_w3(cb, op, cc->s);
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

int cuda_conv(vae_backend *be, const vae_op *op, void *state, const void *const *frames, int n_in,
              int h, int w, const void *residual, void *y, int t_out, int h_out, int w_out) {
    cuda_backend *cb = cu_be(be);
    conv_state *s = state;
    if (op->kind != VAE_OP_CONV) return vae_fail(VAE_EINVAL, "%s: not a conv op", op->name);
    int rc = conv_check_params(op);
    if (rc) return rc;
    if (!s) return vae_fail(VAE_EINVAL, "%s: conv was not prepared", op->name);
    if (!frames || !y || h < 1 || w < 1 || n_in < op->kt)
        return vae_fail(VAE_ESHAPE, "%s: conv input of %d frames of %dx%d (kernel kt = %d)",
                        op->name, n_in, h, w, op->kt);
    int exp_t = (n_in - op->kt) / op->st + 1;
    int exp_h = (h + op->pad_h[0] + op->pad_h[1] - op->kh) / op->sh + 1;
    int exp_w = (w + op->pad_w[0] + op->pad_w[1] - op->kw) / op->sw + 1;
    if (h + op->pad_h[0] + op->pad_h[1] < op->kh || w + op->pad_w[0] + op->pad_w[1] < op->kw ||
        t_out != exp_t || h_out != exp_h || w_out != exp_w)
        return vae_fail(VAE_ESHAPE,
                        "%s: conv of %d frames %dx%d gives %dx%dx%d, not the %dx%dx%d asked for",
                        op->name, n_in, h, w, exp_t, exp_h, exp_w, t_out, h_out, w_out);
    for (int i = 0; i < n_in; i++)
        if (!frames[i]) return vae_fail(VAE_EINVAL, "%s: input frame %d is NULL", op->name, i);
    if ((rc = cu_enter(cb, op->name))) return rc;

    conv_call cc;
    memset(&cc, 0, sizeof cc);
    cc.cb = cb, cc.op = op, cc.s = s, cc.h = h, cc.w = w, cc.ho = h_out, cc.wo = w_out;
    cc.es = be->elem_size;
    cc.fb = (size_t)h * w * op->c_in * cc.es;
    cc.yfb = (size_t)h_out * w_out * op->c_out * cc.es;
    cc.res = residual, cc.y = y;
    const int64_t hwo = (int64_t)h_out * w_out;
    if (hwo > INT32_MAX / 2 || (int64_t)h * w > INT32_MAX / 2)
        return vae_fail(VAE_EUNSUPPORTED, "%s: frame of %dx%d is too large", op->name, h, w);
    const int pointwise = op->kh == 1 && op->kw == 1 && op->sh == 1 && op->sw == 1 &&
                          op->pad_h[0] == 0 && op->pad_h[1] == 0 && op->pad_w[0] == 0 &&
                          op->pad_w[1] == 0;
    const int sym = op->pad_h[0] == op->pad_h[1] && op->pad_w[0] == op->pad_w[1];
    /* fused bias (+ residual) in cuDNN's epilogue: 16-bit activations, a bias, residual not y */
    cc.fuse = cb->fuse && s->bias && s->bias_dt && residual != y;
    if ((s->bias || residual) && residual == y) { /* in place: y = bias + y up front */
        int ph = cu_prof_begin(cb, CU_P_BIAS);
        rc = cu_check(cuk_bias_init(cb->stream, be->dtype, y, s->bias, residual, t_out * hwo,
                                    op->c_out),
                      op->name, "bias");
        cu_prof_end(cb, ph);
        if (rc) return rc;
        cc.init_done = 1;
    }

    /* 3-D path: consecutive frames (a contiguous window), one cuDNN call */
    if ((op->kt > 1 || op->st > 1) && cb->conv3d && !s->no3d && !s->use_gemm && sym &&
        frames_consecutive(frames, n_in, 1, cc.fb)) {
        rc = conv3d(&cc, frames[0], t_out);
        if (rc != VAE_EUNSUPPORTED) return rc;
        VAE_DEBUG("%s: %s; using the per-block path", op->name, vae_last_error());
        s->no3d = 1;
    }

    /* output frames per block: the frame list of a block fits a kernel argument, and its gathered
     * input stays within scratch_limit (at least one frame) */
    int tb_max = (CUK_MAX_FRAMES - op->kt) / op->st + 1;
    size_t per_frame = (size_t)(h + op->pad_h[0] + op->pad_h[1]) *
                       (w + op->pad_w[0] + op->pad_w[1]) * op->kt * op->c_in * cc.es;
    size_t fit = per_frame ? cb->scratch_limit / per_frame : (size_t)tb_max;
    if (fit < 1) fit = 1;
    if ((size_t)tb_max > fit) tb_max = (int)fit;

    for (int j0 = 0; j0 < t_out; j0 += tb_max) {
        int tb = t_out - j0 < tb_max ? t_out - j0 : tb_max;
        const void *const *fr = frames + (size_t)j0 * op->st;
        if (pointwise) {
            rc = block_pointwise(&cc, fr, j0, tb, y);
        } else {
            rc = VAE_EUNSUPPORTED;
            if (!s->use_gemm) {
                rc = block_cudnn(&cc, fr, j0, tb);
                if (rc == VAE_EUNSUPPORTED && cb->conv_mode != CU_CONV_CUDNN) {
                    VAE_DEBUG("%s: %s; using im2col + GEMM", op->name, vae_last_error());
                    s->use_gemm = 1;
                }
            }
            if (s->use_gemm) rc = block_im2col(&cc, fr, j0, tb, y);
        }
        if (rc) return rc;
    }
    return VAE_OK;
}
