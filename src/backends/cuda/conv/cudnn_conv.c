/* cudnn_conv.c -- every cuDNN call of the backend: 2-D NHWC and 3-D NDHWC convolutions through
 * the legacy cudnnConvolutionForward / cudnnConvolutionBiasActivationForward API (cuDNN 9).
 *
 * A plan is made once per shape (cu_dnn_conv): descriptors, then cuDNN's heuristic list of
 * algorithms (cudnnGetConvolutionForwardAlgorithm_v7), restricted to the implicit/explicit GEMM
 * and direct algorithms: FFT and Winograd trade accuracy for speed, and the float32 path must
 * match the CPU reference to 1e-5. The first candidate that runs becomes the plan's algorithm;
 * the call that tried it produced the real result. Shapes without any candidate are cached as
 * unsupported and the caller uses its GEMM path. float32 convolutions run with CUDNN_FMA_MATH
 * (no TF32); bfloat16 / float16 ones with tensor cores and float32 accumulation.
 * Fused plans (epi CU_DNN_EPI_BIAS) compute y = conv(x) + bias [+ z] in the convolution's epilogue
 * (cudnnConvolutionBiasActivationForward, identity activation, which requires the
 * IMPLICIT_PRECOMP_GEMM algorithm), and CU_DNN_EPI_RELU a ReLU of that (a conv's folded
 * activation, op->act): the bias is tried in the activation dtype, then in float32;
 * when cuDNN takes neither, the plan is remembered as unsupported and the caller initialises y
 * with bias + residual itself and runs an unfused plan with beta = 1.
 * The workspace is one buffer that grows (cuda_backend.ws).
 */
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/conv/cuda_conv_internal.h"

enum { DNN_WS_MAX = 1 << 30 }; /* algorithms needing more workspace are skipped */

typedef struct dnn_plan {
    cu_dnn_conv g;
    vae_dtype dtype;
    int ok; /* 0: no algorithm for this shape */
    int bias_f32; /* fused: the bias descriptor is float32 (else the activation dtype) */
    cudnnTensorDescriptor_t xd, yd, bd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnActivationDescriptor_t ad;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
    int remembered; /* its key is in the tune cache (plan_remember) */
} dnn_plan;

typedef struct dnn_state {
    cudnnHandle_t h;
    dnn_plan *plans;
    int n, cap;
} dnn_state;

static int dnn_category(cudnnStatus_t st) { return (int)st / 1000 * 1000; }

/* A cuDNN failure as a vae error: "who: what: cuDNN <status> (<detail>)" */
static int dnn_fail(cudnnStatus_t st, const char *who, const char *what) {
    char detail[256] = "";
    cudnnGetLastErrorString(detail, sizeof detail);
    int code = VAE_EDEVICE;
    if (st == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
        st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        code = VAE_ENOMEM;
    else if (dnn_category(st) == CUDNN_STATUS_NOT_SUPPORTED ||
             dnn_category(st) == CUDNN_STATUS_BAD_PARAM)
        code = VAE_EUNSUPPORTED;
    else if (dnn_category(st) == 1000) { /* library setup: sub-library missing, version mismatch */
        VAE_WARN("%s: %s: cuDNN %s%s%s; using the GEMM path", who, what, cudnnGetErrorString(st),
                 detail[0] ? ": " : "", detail);
        code = VAE_EUNSUPPORTED;
    }
    return vae_fail(code, "%s: %s: cuDNN %s%s%s", who, what, cudnnGetErrorString(st),
                    detail[0] ? ": " : "", detail);
}

static dnn_state *dnn_get(cuda_backend *cb) {
    if (cb->dnn) return cb->dnn;
    if (cb->dnn_failed) return NULL;
    dnn_state *d = vae_calloc(1, sizeof *d);
    if (!d) return NULL;
    const double t0 = cu_now();
    cudnnStatus_t st = cudnnCreate(&d->h);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnSetStream(d->h, cb->stream);
    cb->host_s[CU_H_DNN_HANDLE] += cu_now() - t0;
    if (st != CUDNN_STATUS_SUCCESS) {
        VAE_WARN("cuda backend: cuDNN cannot be used (%s); convolutions run as cuBLAS GEMMs",
                 cudnnGetErrorString(st));
        if (d->h) cudnnDestroy(d->h);
        vae_free(d);
        cb->dnn_failed = 1;
        cudaGetLastError();
        return NULL;
    }
    cb->dnn = d;
    return d;
}

static void plan_destroy_descriptors(dnn_plan *p) {
    if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
    if (p->bd) cudnnDestroyTensorDescriptor(p->bd);
    if (p->wd) cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd) cudnnDestroyConvolutionDescriptor(p->cd);
    if (p->ad) cudnnDestroyActivationDescriptor(p->ad);
    p->xd = p->yd = p->bd = NULL;
    p->wd = NULL;
    p->cd = NULL;
    p->ad = NULL;
}

static void plan_free(dnn_plan *p) {
    plan_destroy_descriptors(p);
    memset(p, 0, sizeof *p);
}

void cu_dnn_destroy(cuda_backend *cb) {
    dnn_state *d = cb->dnn;
    if (!d) return;
    for (int i = 0; i < d->n; i++) plan_free(&d->plans[i]);
    vae_free(d->plans);
    if (d->h) cudnnDestroy(d->h);
    vae_free(d);
    cb->dnn = NULL;
}

const char *cu_dnn_describe(cuda_backend *cb, char *buf, size_t len) {
    size_t v = cudnnGetVersion();
    if (cb && cb->dnn_failed) snprintf(buf, len, "cuDNN unavailable");
    else snprintf(buf, len, "cuDNN %zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
    return buf;
}

static cudnnDataType_t dnn_type(vae_dtype dt) {
    switch (dt) {
    case VAE_DTYPE_BF16: return CUDNN_DATA_BFLOAT16;
    case VAE_DTYPE_F16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
    }
}

static int ws_reserve(cuda_backend *cb, size_t bytes, const char *who) {
    if (bytes <= cb->ws_bytes) return VAE_OK;
    VAE_DEBUG("%s: cuDNN workspace grows from %zu to %zu bytes (%d graphs alive)", who,
              cb->ws_bytes, bytes, cb->pool.graphs);
    cu_retire(cb, cb->ws, cb->ws_bytes);
    cb->ws = NULL;
    cb->ws_bytes = 0;
    size_t want = (bytes + 0xFFFFF) & ~(size_t)0xFFFFF;
    cudaError_t e = cu_dev_malloc(&cb->pool, &cb->ws, want);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cu_pool_trim(&cb->pool);
        e = cu_dev_malloc(&cb->pool, &cb->ws, want);
    }
    if (e != cudaSuccess) {
        cb->ws = NULL;
        return cu_check(e, who, "allocating the cuDNN workspace");
    }
    cb->ws_bytes = want;
    cu_note_peak(cb);
    if (cb->poison) cu_poison(cb, cb->ws, want);
    return VAE_OK;
}

static int algo_allowed(cudnnConvolutionFwdAlgo_t a) {
    return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
}

/* The bias descriptor [1,k,1,1(,1)] of a fused plan, in float32 or the activation dtype. */
static cudnnStatus_t plan_bias_desc(dnn_plan *p, int f32) {
    cudnnDataType_t bt = f32 ? CUDNN_DATA_FLOAT : dnn_type(p->dtype);
    p->bias_f32 = f32;
    if (p->g.nd == 3) {
        int dims[5] = {1, p->g.k, 1, 1, 1};
        return cudnnSetTensorNdDescriptorEx(p->bd, CUDNN_TENSOR_NCHW, bt, 5, dims);
    }
    return cudnnSetTensor4dDescriptor(p->bd, CUDNN_TENSOR_NCHW, bt, 1, p->g.k, 1, 1);
}

/* Descriptors of a new plan; VAE_EUNSUPPORTED when cuDNN rejects the shape. */
static int plan_describe(dnn_plan *p, const char *who) {
    const cu_dnn_conv *g = &p->g;
    cudnnDataType_t dt = dnn_type(p->dtype);
    cudnnStatus_t st;
    if ((st = cudnnCreateTensorDescriptor(&p->xd)) || (st = cudnnCreateTensorDescriptor(&p->yd)) ||
        (st = cudnnCreateFilterDescriptor(&p->wd)) ||
        (st = cudnnCreateConvolutionDescriptor(&p->cd)))
        return dnn_fail(st, who, "creating descriptors");
    if (g->nd == 3) {
        int xdim[5] = {g->n, g->c, g->dx, g->hx, g->wx}, ydim[5] = {g->n, g->k, g->dy, g->ho, g->wo};
        int wdim[5] = {g->k, g->c, g->kd, g->kh, g->kw};
        int pad[3] = {g->pd, g->ph, g->pw}, str[3] = {g->sd, g->sh, g->sw}, dil[3] = {1, 1, 1};
        if ((st = cudnnSetTensorNdDescriptorEx(p->xd, CUDNN_TENSOR_NHWC, dt, 5, xdim)) ||
            (st = cudnnSetTensorNdDescriptorEx(p->yd, CUDNN_TENSOR_NHWC, dt, 5, ydim)) ||
            (st = cudnnSetFilterNdDescriptor(p->wd, dt, CUDNN_TENSOR_NHWC, 5, wdim)) ||
            (st = cudnnSetConvolutionNdDescriptor(p->cd, 3, pad, str, dil, CUDNN_CROSS_CORRELATION,
                                                  CUDNN_DATA_FLOAT)))
            return dnn_fail(st, who, "describing the 3-D convolution");
    } else if ((st = cudnnSetTensor4dDescriptor(p->xd, CUDNN_TENSOR_NHWC, dt, g->n, g->c, g->hx,
                                                g->wx)) ||
               (st = cudnnSetTensor4dDescriptor(p->yd, CUDNN_TENSOR_NHWC, dt, g->n, g->k, g->ho,
                                                g->wo)) ||
               (st = cudnnSetFilter4dDescriptor(p->wd, dt, CUDNN_TENSOR_NHWC, g->k, g->c, g->kh,
                                                g->kw)) ||
               (st = cudnnSetConvolution2dDescriptor(p->cd, g->ph, g->pw, g->sh, g->sw, 1, 1,
                                                     CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT))) {
        return dnn_fail(st, who, "describing the convolution");
    }
    st = cudnnSetConvolutionMathType(
        p->cd, p->dtype == VAE_DTYPE_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH);
    if (st) return dnn_fail(st, who, "cudnnSetConvolutionMathType");
    int od[5] = {0};
    st = cudnnGetConvolutionNdForwardOutputDim(p->cd, p->xd, p->wd, g->nd + 2, od);
    if (st) return dnn_fail(st, who, "cudnnGetConvolutionNdForwardOutputDim");
    int exp2[4] = {g->n, g->k, g->ho, g->wo}, exp3[5] = {g->n, g->k, g->dy, g->ho, g->wo};
    if (memcmp(od, g->nd == 3 ? exp3 : exp2, (size_t)(g->nd + 2) * sizeof(int)) != 0)
        return vae_fail(VAE_EINVAL, "%s: cuDNN output %dx%dx%dx%dx%d, expected %dx%dx%dx%d(x%d)",
                        who, od[0], od[1], od[2], od[3], od[4], g->n, g->k, g->dy, g->ho, g->wo);
    if (g->epi) {
        if ((st = cudnnCreateTensorDescriptor(&p->bd)) ||
            (st = cudnnCreateActivationDescriptor(&p->ad)) ||
            (st = cudnnSetActivationDescriptor(
                 p->ad,
                 g->epi == CU_DNN_EPI_RELU ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                 CUDNN_NOT_PROPAGATE_NAN, 0.0)) ||
            (st = plan_bias_desc(p, 0)))
            return dnn_fail(st, who, "describing the fused epilogue");
    }
    return VAE_OK;
}

static cudnnStatus_t plan_exec(cuda_backend *cb, dnn_state *d, dnn_plan *p, const void *x,
                               const void *w, const cu_dnn_epi *epi, void *y) {
    const float one = 1.0f;
    if (p->g.epi) {
        const float a2 = epi->z ? 1.0f : 0.0f;
        const void *bias = p->bias_f32 ? (const void *)epi->bias_f32 : epi->bias_dt;
        /* without a residual, z = y with alpha2 = 0 (the API wants a z) */
        return cudnnConvolutionBiasActivationForward(
            d->h, &one, p->xd, x, p->wd, w, p->cd, p->algo, cb->ws, p->ws, &a2, p->yd,
            epi->z ? epi->z : y, p->bd, bias, p->ad, p->yd, y);
    }
    return cudnnConvolutionForward(d->h, &one, p->xd, x, p->wd, w, p->cd, p->algo, cb->ws, p->ws,
                                   &epi->beta, p->yd, y);
}

/* Runs a candidate plan once (that run is the caller's result), timed as a first cuDNN run; the
 * plan is kept (ok) when it succeeds. */
static cudnnStatus_t plan_try(cuda_backend *cb, dnn_state *d, dnn_plan *p, const void *x,
                              const void *w, const cu_dnn_epi *epi, void *y) {
    const double t0 = cu_now();
    cudnnStatus_t st = plan_exec(cb, d, p, x, w, epi, y);
    cb->host_s[CU_H_DNN_FIRST] += cu_now() - t0;
    p->ok = st == CUDNN_STATUS_SUCCESS;
    return st;
}

/* Fused plan: IMPLICIT_PRECOMP_GEMM with the bias in the activation dtype, else in float32. */
static int plan_make_fused(cuda_backend *cb, dnn_state *d, dnn_plan *p, const void *x,
                           const void *w, const cu_dnn_epi *epi, void *y, const char *who) {
    const cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
    size_t ws = 0;
    cudnnStatus_t st =
        cudnnGetConvolutionForwardWorkspaceSize(d->h, p->xd, p->wd, p->cd, p->yd, algo, &ws);
    if (st == CUDNN_STATUS_SUCCESS && ws <= DNN_WS_MAX) {
        int rc = ws_reserve(cb, ws, who);
        if (rc) return rc;
        p->algo = algo;
        p->ws = ws;
        for (int f32 = 0; f32 < 2; f32++) {
            if (f32 && (st = plan_bias_desc(p, 1))) break;
            if ((f32 ? (const void *)epi->bias_f32 : epi->bias_dt) == NULL) continue;
            if ((st = plan_try(cb, d, p, x, w, epi, y)) == CUDNN_STATUS_SUCCESS) {
                VAE_DEBUG("%s: cuDNN fused conv+bias%s%s (%s bias, workspace %zu) for %dD n%d "
                          "%dx%dx%dx%d -> %d, k %dx%dx%d",
                          who, epi->z ? "+residual" : "",
                          p->g.epi == CU_DNN_EPI_RELU ? "+relu" : "", f32 ? "float32" : "dtype", ws,
                          p->g.nd, p->g.n, p->g.dx, p->g.hx, p->g.wx, p->g.c, p->g.k, p->g.kd,
                          p->g.kh, p->g.kw);
                return VAE_OK;
            }
            /* any failure here only means "not fused": the unfused plan reports real errors */
            VAE_DEBUG("%s: fused conv (%s bias): cuDNN %s", who, f32 ? "float32" : "dtype",
                      cudnnGetErrorString(st));
        }
    }
    p->ok = 0;
    return vae_fail(VAE_EUNSUPPORTED, "%s: no fused cuDNN convolution for this shape (%s)", who,
                    cudnnGetErrorString(st));
}

/* Makes a new plan and runs it once (that run is the caller's result). */
static int plan_make_and_run(cuda_backend *cb, dnn_state *d, dnn_plan *p, const void *x,
                             const void *w, const cu_dnn_epi *epi, void *y, const char *who) {
    int rc = plan_describe(p, who);
    if (rc) return rc;
    if (p->g.epi) return plan_make_fused(cb, d, p, x, w, epi, y, who);
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int found = 0;
    cudnnStatus_t st = cudnnGetConvolutionForwardAlgorithm_v7(
        d->h, p->xd, p->wd, p->cd, p->yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf);
    if (st) return dnn_fail(st, who, "cudnnGetConvolutionForwardAlgorithm_v7");
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int i = 0; i < found; i++) {
        const cudnnConvolutionFwdAlgoPerf_t *c = &perf[i];
        if (c->status != CUDNN_STATUS_SUCCESS || !algo_allowed(c->algo)) continue;
        if (p->dtype == VAE_DTYPE_F32 && c->mathType != CUDNN_FMA_MATH &&
            c->mathType != CUDNN_DEFAULT_MATH)
            continue; /* TF32 or down-conversion */
        cudnnMathType_t math = p->dtype == VAE_DTYPE_F32 ? CUDNN_FMA_MATH : c->mathType;
        if ((st = cudnnSetConvolutionMathType(p->cd, math))) {
            last = st;
            continue;
        }
        size_t ws = 0;
        if ((st = cudnnGetConvolutionForwardWorkspaceSize(d->h, p->xd, p->wd, p->cd, p->yd,
                                                          c->algo, &ws))) {
            last = st;
            continue;
        }
        if (ws > DNN_WS_MAX) continue;
        if ((rc = ws_reserve(cb, ws, who))) return rc;
        p->algo = c->algo;
        p->ws = ws;
        if ((st = plan_try(cb, d, p, x, w, epi, y)) == CUDNN_STATUS_SUCCESS) {
            VAE_DEBUG("%s: cuDNN algorithm %d (workspace %zu) for %dD n%d %dx%dx%dx%d -> %d, k "
                      "%dx%dx%d, stride %d,%d,%d, pad %d,%d,%d",
                      who, (int)c->algo, ws, p->g.nd, p->g.n, p->g.dx, p->g.hx, p->g.wx, p->g.c,
                      p->g.k, p->g.kd, p->g.kh, p->g.kw, p->g.sd, p->g.sh, p->g.sw, p->g.pd,
                      p->g.ph, p->g.pw);
            return VAE_OK;
        }
        last = st;
        int cat = dnn_category(st);
        if (cat != CUDNN_STATUS_NOT_SUPPORTED && cat != CUDNN_STATUS_BAD_PARAM)
            return dnn_fail(st, who, "cudnnConvolutionForward");
    }
    p->ok = 0;
    return vae_fail(VAE_EUNSUPPORTED, "%s: no cuDNN algorithm for this convolution (%s)", who,
                    cudnnGetErrorString(last));
}

/* ---- plans kept for the next process (the tune cache's "dnn:" entries) ---- */
enum { DNN_KEY_INTS = 20, DNN_WARM_PLANS = 32 };
/* a plan's x, w, y (and z) above this, or above a quarter of a memory budget: not warmed (a
 * Wan2.1 480p decode's time_conv, 10 x 120 x 208 x 384 -> 768: 0.5 GB) */
#define DNN_WARM_BYTES ((double)(1 << 30))
_Static_assert(sizeof(cu_dnn_conv) == DNN_KEY_INTS * sizeof(int), "cu_dnn_conv: the key's ints");

/* "<op>:<nd>.<n>.<c>. ... .<epi>" after the prefix "dnn:" (cu_dnn_conv's fields in order); -1
 * where the op's name cannot be part of a key (spaces, ':') */
static int plan_key(const char *who, const cu_dnn_conv *g, char *key, size_t len) {
    if (!who[0] || strpbrk(who, " \t\n:")) return -1;
    int v[DNN_KEY_INTS];
    memcpy(v, g, sizeof v);
    int n = snprintf(key, len, "dnn:%s:", who);
    for (int i = 0; i < DNN_KEY_INTS && n > 0 && (size_t)n < len; i++)
        n += snprintf(key + n, len - (size_t)n, i ? ".%d" : "%d", v[i]);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

/* A plan a call used (not a candidate being timed) goes to the tune cache once: path 1 where the
 * call added to y (beta) or a residual (z), whose launches may take other kernels. */
static void plan_remember(cuda_backend *cb, dnn_plan *p, const char *who, const cu_dnn_epi *epi) {
    if (p->remembered || cb->tuning || !p->ok) return;
    p->remembered = 1;
    char key[VAE_LC_FIELD_MAX];
    if (plan_key(who, &p->g, key, sizeof key) == 0 && cu_tune_lookup(cb, key) < 0)
        cu_tune_store(cb, key, epi->z != NULL || epi->beta != 0.0f);
}

/* One dimension's conv output, as cuDNN computes it (dilation 1); -1 where there is none. */
static int conv_out(int in, int k, int pad, int stride) {
    if (in < 1 || k < 1 || stride < 1 || in + 2 * pad < k) return -1;
    return (in + 2 * pad - k) / stride + 1;
}

/* A geometry a conv can have: sizes positive, outputs those of the inputs (the warm-up buffer is
 * laid out from these numbers, so they must be what cuDNN reads and writes); 2-D plans are made
 * with depth 1 (cuda_conv_paths.c, cuda_conv_phase.c). */
static int plan_consistent(const cu_dnn_conv *g) {
    if (g->n < 1 || g->c < 1 || g->k < 1 || g->epi < CU_DNN_EPI_NONE || g->epi > CU_DNN_EPI_RELU)
        return 0;
    if (conv_out(g->hx, g->kh, g->ph, g->sh) != g->ho ||
        conv_out(g->wx, g->kw, g->pw, g->sw) != g->wo)
        return 0;
    if (g->nd == 3) return conv_out(g->dx, g->kd, g->pd, g->sd) == g->dy;
    return g->nd == 2 && g->dx == 1 && g->dy == 1 && g->kd == 1 && g->sd == 1 && g->pd == 0;
}

/* An entry's geometry (text after "dnn:"): 0 where its op is a conv of program p, -1 where it is
 * another program's, -2 where the entry is damaged (numbers that do not parse, or a geometry no
 * conv has: cu_dnn_warm_seen forgets it). */
static int plan_parse(const char *text, const vae_program *p, cu_dnn_conv *g) {
    const char *geo = strrchr(text, ':');
    if (!geo) return -2;
    const size_t name_len = (size_t)(geo - text);
    const vae_op *op = NULL;
    for (int i = 0; i < p->n_ops && !op; i++)
        if (p->ops[i].kind == VAE_OP_CONV && strlen(p->ops[i].name) == name_len &&
            memcmp(p->ops[i].name, text, name_len) == 0)
            op = &p->ops[i];
    int v[DNN_KEY_INTS];
    const char *c = geo + 1;
    for (int i = 0; i < DNN_KEY_INTS; i++) {
        char *end;
        const long x = strtol(c, &end, 10);
        if (end == c || x < 0 || x > (1 << 20) || *end != (i + 1 < DNN_KEY_INTS ? '.' : '\0'))
            return -2;
        v[i] = (int)x;
        c = end + 1;
    }
    memcpy(g, v, sizeof v);
    if (!plan_consistent(g)) return -2;
    return op && g->k >= op->c_out ? 0 : -1;
}

/* A plan's warm-up buffer: x, then w, y, z (where the call adds) and the bias, each 256-byte
 * aligned; off[0..3] the offsets of w, y, z and the bias (valid once the size has been checked),
 * the size returned in double (a damaged entry's products may pass size_t's range). */
static double plan_layout(const cu_dnn_conv *g, int adds, size_t es, size_t off[4]) {
    const double y = (double)g->n * g->dy * g->ho * g->wo * g->k * es;
    const double part[4] = {(double)g->n * g->dx * g->hx * g->wx * g->c * es, /* x */
                            (double)g->k * g->kd * g->kh * g->kw * g->c * es, /* w */
                            y, adds ? y : 0};                                 /* y, z */
    double at = 0;
    for (int i = 0; i < 4; i++) {
        at += ceil(part[i] / 256) * 256;
        off[i] = at <= DNN_WARM_BYTES ? (size_t)at : 0;
    }
    return at + 4.0 * g->k; /* the bias, float32 at most */
}

/* One zero-filled buffer's x, w, y, z and bias for the warm-up of plan g (plan_layout). */
static int plan_warm_run(cuda_backend *cb, const cu_dnn_conv *g, int adds, char *buf) {
    size_t off[4];
    plan_layout(g, adds, cb->base.elem_size, off);
    char *w = buf + off[0], *y = buf + off[1], *z = buf + off[2], *bias = buf + off[3];
    cu_dnn_epi epi = {0.0f, NULL, NULL, NULL};
    if (g->epi) /* zeros are zeros in either dtype */
        epi.bias_dt = bias, epi.bias_f32 = (const float *)bias, epi.z = adds ? z : NULL;
    else
        epi.beta = adds ? 1.0f : 0.0f;
    return cu_dnn_conv_run(cb, g, buf, w, &epi, y, "cuDNN warm-up");
}

/* A replayed entry that failed: VAE_OK where the entry is at fault (a damaged line cuDNN
 * disagrees with or refuses: forgotten, so that the call that needs such a plan makes it afresh
 * and stores it again) or where there was no room (the first call pays instead); rc where the
 * device itself failed. */
static int warm_failed(cuda_backend *cb, int rc, const char *key) {
    if (rc == VAE_EDEVICE && cudaStreamSynchronize(cb->stream) != cudaSuccess) return rc;
    VAE_DEBUG("cuDNN warm-up: %s not replayed (%s)%s", key, vae_last_error(),
              rc == VAE_ENOMEM ? "" : ", forgotten");
    if (rc != VAE_ENOMEM) cu_tune_forget(cb, key);
    vae_error_clear();
    return VAE_OK;
}

/* The entries to replay for program p (up to DNN_WARM_PLANS): want[], adds[], key[] (the entry's
 * key, for warm_failed), the largest buffer in *most; damaged entries met on the way forgotten
 * (as many at most, so that a crafted file costs no more than that many appends). */
static int warm_pick(cuda_backend *cb, const vae_program *p, cu_dnn_conv *want, int *adds,
                     char (*key)[VAE_LC_FIELD_MAX], double *most) {
    int n = 0, flag, forgot = 0;
    const char *text;
    for (int i = 0; n < DNN_WARM_PLANS && (i = cu_tune_next(cb, "dnn:", i, &text, &flag)) >= 0;
         i++) {
        snprintf(key[n], VAE_LC_FIELD_MAX, "dnn:%s", text);
        const int r = plan_parse(text, p, &want[n]);
        if (r == -2 && forgot < DNN_WARM_PLANS) {
            VAE_DEBUG("cuDNN warm-up: %s is not a conv's geometry, forgotten", key[n]);
            cu_tune_forget(cb, key[n]), forgot++;
        }
        if (r != 0) continue;
        size_t off[4];
        const double b = plan_layout(&want[n], flag != 0, cb->base.elem_size, off);
        if (b > DNN_WARM_BYTES || (cb->base.limit > 0 && b > 0.25 * (double)cb->base.limit))
            continue;
        adds[n++] = flag != 0;
        if (b > *most) *most = b;
    }
    return n;
}

/* The cuDNN plans earlier processes' calls used (the tune cache's "dnn:" entries), made and
 * launched once on zeros at session creation, so that a first call neither makes them nor loads
 * their kernels (~19 ms of host time and ~14 ms of first launches in a fresh Wan2.1 480p
 * decode). Only plans of convs named in p, at most DNN_WARM_PLANS, each within DNN_WARM_BYTES.
 * The entries are input from the file: one that is damaged or fails to replay is forgotten
 * (warm_failed), never the session's failure; no room for the buffer is not an error either. */
int cu_dnn_warm_seen(cuda_backend *cb, const vae_program *p) {
    cu_dnn_conv want[DNN_WARM_PLANS];
    int adds[DNN_WARM_PLANS];
    char key[DNN_WARM_PLANS][VAE_LC_FIELD_MAX];
    double most = 0;
    const int n = warm_pick(cb, p, want, adds, key, &most);
    dnn_state *d = n ? dnn_get(cb) : NULL;
    if (!d) return VAE_OK;
    const int made = d->n;
    char *buf = NULL;
    if (cudaMalloc((void **)&buf, (size_t)most) != cudaSuccess) {
        cudaGetLastError(); /* (no room: the first call pays instead) */
        return VAE_OK;
    }
    int rc = cu_check(cudaMemsetAsync(buf, 0, (size_t)most, cb->stream), "cuDNN warm-up", "memset");
    for (int k = 0; k < n && rc == VAE_OK; k++) {
        rc = plan_warm_run(cb, &want[k], adds[k], buf);
        if (rc != VAE_OK) rc = warm_failed(cb, rc, key[k]);
    }
    if (rc == VAE_OK) rc = cu_check(cudaStreamSynchronize(cb->stream), "cuDNN warm-up", "sync");
    cudaFree(buf);
    cb->n_dnn_warmed += d->n - made;
    VAE_DEBUG("cuDNN warm-up: %d plans of earlier calls, %d new", n, d->n - made);
    return rc;
}

int cu_dnn_plans(const cuda_backend *cb) {
    const dnn_state *d = cb->dnn;
    return d ? d->n : 0;
}

int cu_dnn_conv_run(cuda_backend *cb, const cu_dnn_conv *g, const void *x, const void *w,
                    const cu_dnn_epi *epi, void *y, const char *who) {
    dnn_state *d = dnn_get(cb);
    if (!d) return vae_fail(VAE_EUNSUPPORTED, "%s: cuDNN is not available", who);
    for (int i = 0; i < d->n; i++) {
        dnn_plan *p = &d->plans[i];
        if (p->dtype != cb->base.dtype || memcmp(&p->g, g, sizeof *g) != 0) continue;
        if (!p->ok) return vae_fail(VAE_EUNSUPPORTED, "%s: no cuDNN algorithm for this shape", who);
        cudnnStatus_t st = plan_exec(cb, d, p, x, w, epi, y);
        if (st) return dnn_fail(st, who, "cudnnConvolutionForward");
        plan_remember(cb, p, who, epi);
        return VAE_OK;
    }
    if (d->n == d->cap) {
        int cap = d->cap ? d->cap * 2 : 16;
        dnn_plan *pl = vae_realloc(d->plans, (size_t)cap * sizeof *pl);
        if (!pl) return vae_fail(VAE_ENOMEM, "%s: out of memory", who);
        d->plans = pl;
        d->cap = cap;
    }
    dnn_plan *p = &d->plans[d->n];
    memset(p, 0, sizeof *p);
    p->g = *g;
    p->dtype = cb->base.dtype;
    const double t0 = cu_now(); /* host time: descriptors, the algorithm list, the first launch */
    int rc = plan_make_and_run(cb, d, p, x, w, epi, y, who);
    cb->host_s[CU_H_DNN_PLAN] += cu_now() - t0;
    if (rc == VAE_OK || rc == VAE_EUNSUPPORTED) {
        /* keep the plan (a negative result is remembered too) */
        if (rc) plan_destroy_descriptors(p);
        else
            plan_remember(cb, p, who, epi);
        d->n++;
    } else {
        plan_free(p);
    }
    return rc;
}

/* cuDNN's first use in the process (its handle, its engine libraries, their first kernels) paid
 * by the caller (cuda_warm, for programs with convs that only cuDNN runs): one 3x3 stride-2 conv
 * of 64 channels over 16x16 zeros in the backend's dtype, its plan kept like any other. Nothing
 * where cuDNN was used already, is unavailable, or refuses the shape; no error is left. */
int cu_dnn_warm(cuda_backend *cb) {
    if (cb->dnn || cb->dnn_failed || !dnn_get(cb)) return VAE_OK;
    cu_dnn_conv g;
    memset(&g, 0, sizeof g);
    g.nd = 2, g.n = 1, g.c = g.k = 64, g.hx = g.wx = 16, g.kh = g.kw = 3, g.ph = g.pw = 1;
    g.dx = g.dy = g.kd = g.sd = 1, g.sh = g.sw = 2, g.ho = g.wo = 8;
    const size_t es = cb->base.elem_size, xb = 16 * 16 * 64 * es, wb = 64 * 64 * 9 * es;
    const size_t bytes = xb + wb + 8 * 8 * 64 * es;
    char *buf = NULL;
    if (cudaMalloc((void **)&buf, bytes) != cudaSuccess) {
        cudaGetLastError(); /* (no room: not an error) */
        return VAE_OK;
    }
    int rc = cu_check(cudaMemsetAsync(buf, 0, bytes, cb->stream), "cuDNN warm-up", "memset");
    const cu_dnn_epi epi = {0};
    if (rc == VAE_OK)
        rc = cu_dnn_conv_run(cb, &g, buf, buf + xb, &epi, buf + xb + wb, "cuDNN warm-up");
    if (rc == VAE_EUNSUPPORTED) {
        vae_error_clear(); /* the first real conv pays instead */
        rc = VAE_OK;
    }
    if (rc == VAE_OK) rc = cu_check(cudaStreamSynchronize(cb->stream), "cuDNN warm-up", "sync");
    cudaFree(buf);
    return rc;
}
