/* cuda_conv.c -- CONV on the GPU.
 *
 * Weights are laid out once, in the activation dtype, as w[c_out][kh][kw][kt*c_in] with the
 * temporal taps next to the input channels: one KRSC filter of kt*c_in channels. A causal 3-D
 * conv over the frame list is then one 2-D convolution over the "temporally gathered" input
 * x'[j][y][x][dt*c_in + ci] = frame[j*st + dt][y][x][ci], so the kt taps accumulate in float32
 * inside one cuDNN / cuBLAS call. Per block of output frames:
 *  - pointwise kernels (1x1, stride 1, no padding) are GEMMs (cuBLAS): directly on the frames
 *    when kt == 1, else on the gathered x';
 *  - other kernels go to cuDNN (NHWC). The input is used in place when kt == 1, the frames are
 *    consecutive in memory and the padding is symmetric; otherwise x' is gathered with explicit
 *    zero padding (asymmetric {0,1} padding included) and cuDNN runs unpadded;
 *  - when cuDNN has no algorithm for a shape (or VAE_CUDA_CONV=gemm), im2col + cuBLAS GEMM.
 * Bias and residual: y is first set to bias + residual and the convolution accumulates on top
 * (beta = 1). Gathers are bounded by scratch_limit (at least one output frame per block).
 */
#include <string.h>

#include "backends/cuda/cuda_internal.h"

typedef struct conv_state {
    void *w;     /* [c_out][kh][kw][kt*c_in], dtype */
    float *bias; /* [c_out] float32, or NULL */
    size_t w_bytes, b_bytes;
    int64_t k; /* kh*kw*kt*c_in */
    int use_gemm;
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

int cuda_conv_prepare(vae_backend *be, const vae_op *op, void **state) {
    cuda_backend *cb = cu_be(be);
    *state = NULL;
    int rc = conv_check_params(op);
    if (rc) return rc;
    const int ci = op->c_in, co = op->c_out, kt = op->kt, kh = op->kh, kw = op->kw;
    conv_state *s = vae_calloc(1, sizeof *s);
    if (!s) return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
    s->k = (int64_t)kh * kw * kt * ci;
    s->use_gemm = cb->conv_mode == CU_CONV_GEMM;
    size_t n = (size_t)s->k * co;
    float *host = vae_malloc(n * sizeof(float));
    if (!host) {
        vae_free(s);
        return vae_fail(VAE_ENOMEM, "%s: out of host memory for weights", op->name);
    }
    /* PyTorch w[co][ci][dt][dh][dw] -> [co][dh][dw][dt][ci] */
    for (int o = 0; o < co; o++)
        for (int c = 0; c < ci; c++)
            for (int dt = 0; dt < kt; dt++)
                for (int dh = 0; dh < kh; dh++)
                    for (int dw = 0; dw < kw; dw++)
                        host[(size_t)o * s->k + (((size_t)dh * kw + dw) * kt + dt) * ci + c] =
                            op->w[((((size_t)o * ci + c) * kt + dt) * kh + dh) * kw + dw];
    rc = cu_upload_param(cb, host, n, 0, &s->w, op->name);
    vae_free(host);
    s->w_bytes = n * be->elem_size;
    if (rc == VAE_OK && op->b) {
        rc = cu_upload_param(cb, op->b, (size_t)co, 1, (void **)&s->bias, op->name);
        s->b_bytes = (size_t)co * sizeof(float);
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
    cu_free_param(cb, s->bias, s->b_bytes);
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
    size_t es, fb;   /* element size, input frame bytes */
    float beta;
} conv_call;

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
static int block_cudnn(conv_call *cc, const void *const *fr, int j0, int tb, void *y) {
    const vae_op *op = cc->op;
    cuda_backend *cb = cc->cb;
    const int sym = op->pad_h[0] == op->pad_h[1] && op->pad_w[0] == op->pad_w[1];
    const size_t yfb = (size_t)cc->ho * cc->wo * op->c_out * cc->es;
    cu_dnn_conv g = {0};
    g.n = tb;
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
        int rc = cu_check(cuk_conv_gather(cb->stream, cc->es, &f, tb, op->st, op->kt, cc->h, cc->w,
                                          op->c_in, op->pad_h[0], op->pad_h[1], op->pad_w[0],
                                          op->pad_w[1], gbuf),
                          op->name, "conv gather");
        cu_prof_end(cb, ph);
        if (rc) return rc;
        x = gbuf;
        g.c = op->kt * op->c_in, g.hx = hp, g.wx = wp, g.ph = 0, g.pw = 0;
    }
    int ph = cu_prof_begin(cb, CU_P_CONV_DNN);
    int rc = cu_dnn_conv_run(cb, &g, x, cc->s->w, cc->beta, (char *)y + (size_t)j0 * yfb, op->name);
    cu_prof_end(cb, ph);
    if (rc == VAE_OK) cb->n_conv_cudnn++;
    return rc;
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

    conv_call cc = {cb, op, s, h, w, h_out, w_out, be->elem_size, 0, 0.0f};
    cc.fb = (size_t)h * w * op->c_in * cc.es;
    const int64_t hwo = (int64_t)h_out * w_out;
    if (hwo > INT32_MAX / 2 || (int64_t)h * w > INT32_MAX / 2)
        return vae_fail(VAE_EUNSUPPORTED, "%s: frame of %dx%d is too large", op->name, h, w);
    if (s->bias || residual) {
        int ph = cu_prof_begin(cb, CU_P_BIAS);
        rc = cu_check(cuk_bias_init(cb->stream, be->dtype, y, s->bias, residual, t_out * hwo,
                                    op->c_out),
                      op->name, "bias");
        cu_prof_end(cb, ph);
        if (rc) return rc;
        cc.beta = 1.0f;
    }
    const int pointwise = op->kh == 1 && op->kw == 1 && op->sh == 1 && op->sw == 1 &&
                          op->pad_h[0] == 0 && op->pad_h[1] == 0 && op->pad_w[0] == 0 &&
                          op->pad_w[1] == 0;
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
                rc = block_cudnn(&cc, fr, j0, tb, y);
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
