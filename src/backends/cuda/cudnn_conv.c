/* cudnn_conv.c -- every cuDNN call of the backend: 2-D NHWC convolutions through the legacy
 * cudnnConvolutionForward API (cuDNN 9).
 *
 * A plan is made once per shape (cu_dnn_conv): descriptors, then cuDNN's heuristic list of
 * algorithms (cudnnGetConvolutionForwardAlgorithm_v7), restricted to the implicit/explicit GEMM
 * and direct algorithms: FFT and Winograd trade accuracy for speed, and the float32 path must
 * match the CPU reference to 1e-5. The first candidate that runs becomes the plan's algorithm;
 * the call that tried it produced the real result. Shapes without any candidate are cached as
 * unsupported and the caller uses its GEMM path. float32 convolutions run with CUDNN_FMA_MATH
 * (no TF32); bfloat16 / float16 ones with tensor cores and float32 accumulation.
 * The workspace is one buffer that grows (cuda_backend.ws).
 */
#include <cudnn.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

enum { DNN_WS_MAX = 1 << 30 }; /* algorithms needing more workspace are skipped */

typedef struct dnn_plan {
    cu_dnn_conv g;
    vae_dtype dtype;
    int ok; /* 0: no algorithm for this shape */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnConvolutionFwdAlgo_t algo;
    size_t ws;
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
    cudnnStatus_t st = cudnnCreate(&d->h);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnSetStream(d->h, cb->stream);
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

static void plan_free(dnn_plan *p) {
    if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
    if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
    if (p->wd) cudnnDestroyFilterDescriptor(p->wd);
    if (p->cd) cudnnDestroyConvolutionDescriptor(p->cd);
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
    if (cb->ws) {
        cudaStreamSynchronize(cb->stream);
        cudaFree(cb->ws);
        cb->ws = NULL;
        cb->ws_bytes = 0;
    }
    size_t want = (bytes + 0xFFFFF) & ~(size_t)0xFFFFF;
    cudaError_t e = cudaMalloc(&cb->ws, want);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cu_pool_trim(&cb->pool);
        e = cudaMalloc(&cb->ws, want);
    }
    if (e != cudaSuccess) {
        cb->ws = NULL;
        return cu_check(e, who, "allocating the cuDNN workspace");
    }
    cb->ws_bytes = want;
    cu_note_peak(cb);
    return VAE_OK;
}

static int algo_allowed(cudnnConvolutionFwdAlgo_t a) {
    return a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || a == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
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
    if ((st = cudnnSetTensor4dDescriptor(p->xd, CUDNN_TENSOR_NHWC, dt, g->n, g->c, g->hx, g->wx)) ||
        (st = cudnnSetTensor4dDescriptor(p->yd, CUDNN_TENSOR_NHWC, dt, g->n, g->k, g->ho, g->wo)) ||
        (st = cudnnSetFilter4dDescriptor(p->wd, dt, CUDNN_TENSOR_NHWC, g->k, g->c, g->kh, g->kw)) ||
        (st = cudnnSetConvolution2dDescriptor(p->cd, g->ph, g->pw, g->sh, g->sw, 1, 1,
                                              CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT)))
        return dnn_fail(st, who, "describing the convolution");
    st = cudnnSetConvolutionMathType(
        p->cd, p->dtype == VAE_DTYPE_F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH);
    if (st) return dnn_fail(st, who, "cudnnSetConvolutionMathType");
    int n, c, h, w;
    st = cudnnGetConvolution2dForwardOutputDim(p->cd, p->xd, p->wd, &n, &c, &h, &w);
    if (st) return dnn_fail(st, who, "cudnnGetConvolution2dForwardOutputDim");
    if (n != g->n || c != g->k || h != g->ho || w != g->wo)
        return vae_fail(VAE_EINVAL, "%s: cuDNN output %dx%dx%dx%d, expected %dx%dx%dx%d", who, n,
                        h, w, c, g->n, g->ho, g->wo, g->k);
    return VAE_OK;
}

static cudnnStatus_t plan_exec(cuda_backend *cb, dnn_state *d, dnn_plan *p, const void *x,
                               const void *w, float beta, void *y) {
    const float one = 1.0f;
    return cudnnConvolutionForward(d->h, &one, p->xd, x, p->wd, w, p->cd, p->algo, cb->ws, p->ws,
                                   &beta, p->yd, y);
}

/* Makes a new plan and runs it once (that run is the caller's result). */
static int plan_make_and_run(cuda_backend *cb, dnn_state *d, dnn_plan *p, const void *x,
                             const void *w, float beta, void *y, const char *who) {
    int rc = plan_describe(p, who);
    if (rc) return rc;
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
        st = plan_exec(cb, d, p, x, w, beta, y);
        if (st == CUDNN_STATUS_SUCCESS) {
            p->ok = 1;
            VAE_DEBUG("%s: cuDNN algorithm %d (workspace %zu) for n%d %dx%dx%d -> %d, k %dx%d, "
                      "stride %d,%d, pad %d,%d",
                      who, (int)c->algo, ws, p->g.n, p->g.hx, p->g.wx, p->g.c, p->g.k, p->g.kh,
                      p->g.kw, p->g.sh, p->g.sw, p->g.ph, p->g.pw);
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

int cu_dnn_conv_run(cuda_backend *cb, const cu_dnn_conv *g, const void *x, const void *w,
                    float beta, void *y, const char *who) {
    dnn_state *d = dnn_get(cb);
    if (!d) return vae_fail(VAE_EUNSUPPORTED, "%s: cuDNN is not available", who);
    for (int i = 0; i < d->n; i++) {
        dnn_plan *p = &d->plans[i];
        if (p->dtype != cb->base.dtype || memcmp(&p->g, g, sizeof *g) != 0) continue;
        if (!p->ok) return vae_fail(VAE_EUNSUPPORTED, "%s: no cuDNN algorithm for this shape", who);
        cudnnStatus_t st = plan_exec(cb, d, p, x, w, beta, y);
        return st ? dnn_fail(st, who, "cudnnConvolutionForward") : VAE_OK;
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
    int rc = plan_make_and_run(cb, d, p, x, w, beta, y, who);
    if (rc == VAE_OK || rc == VAE_EUNSUPPORTED) {
        /* keep the plan (a negative result is remembered too) */
        if (rc) {
            if (p->xd) cudnnDestroyTensorDescriptor(p->xd);
            if (p->yd) cudnnDestroyTensorDescriptor(p->yd);
            if (p->wd) cudnnDestroyFilterDescriptor(p->wd);
            if (p->cd) cudnnDestroyConvolutionDescriptor(p->cd);
            p->xd = p->yd = NULL;
            p->wd = NULL;
            p->cd = NULL;
        }
        d->n++;
    } else {
        plan_free(p);
    }
    return rc;
}
