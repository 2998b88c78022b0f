/* cuda_backend.c -- the CUDA backend: creation, buffers, memory queries, per-op preparation,
 * work graphs and the vtable (the top floor: it may use every folder below it; its copies are in
 * cuda_transfer.c). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/base/cuda_host.h"
#include "backends/cuda/conv/cuda_conv.h"
#include "backends/cuda/cuda_transfer.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/ops/cuda_ops.h"
#include "core/dtype.h"
#include "core/settings.h"

/* One line about the backend: device, cuDNN, conv blocks per path, memory (tests, logs). */
const char *vae_cuda_backend_describe(vae_backend *be, char *buf, size_t len);

/* ---- vtbl: buffers --------------------------------------------------------------------------- */
static void cuda_destroy(vae_backend *be) {
    if (!be) return;
    cuda_backend *cb = cu_be(be);
    cudaSetDevice(cb->device);
    if (cb->stream) cudaStreamSynchronize(cb->stream);
    if (cb->stream) {
        char d[1536];
        VAE_INFO("cuda backend: %s", vae_cuda_backend_describe(be, d, sizeof d));
    }
    cu_prof_report(cb);
    cu_dnn_destroy(cb);
    cuda_ops_destroy(cb);
    cu_bus_destroy(cb);
    cu_io_stage_destroy(cb);
    cu_host_bufs_free(cb);
    cu_stage_free(cb, &cb->stage);
    cu_stores_release(cb, 1);
    for (int i = 0; i < 2; i++)
        if (cb->tune_ev[i]) cudaEventDestroy(cb->tune_ev[i]);
    if (cb->mark_ev) cudaEventDestroy(cb->mark_ev);
    if (cb->cublas) cublasDestroy(cb->cublas);
    cu_pool_destroy(&cb->pool);
    if (cb->scratch) cu_dev_free(&cb->pool, cb->scratch, cb->scratch_bytes);
    if (cb->ws) cu_dev_free(&cb->pool, cb->ws, cb->ws_bytes);
    cu_retired_free(cb);
    if (cb->stream) cudaStreamDestroy(cb->stream);
    cu_tune_cache_free(cb);
    vae_free(cb);
}

static void *cuda_alloc(vae_backend *be, size_t bytes) {
    cuda_backend *cb = cu_be(be);
    if (cu_enter(cb, "cuda alloc") || cu_over_budget(cb, cu_pool_round(bytes), "cuda alloc"))
        return NULL;
    size_t got = 0;
    cudaError_t e;
    void *p = cu_pool_alloc(&cb->pool, bytes, &got, &e);
    if (!p) {
        vae_fail(VAE_ENOMEM, "cuda: cannot allocate %zu bytes of device memory (%s; %lld in use)",
                 bytes, cudaGetErrorString(e), (long long)be->bytes_in_use);
        return NULL;
    }
    be->bytes_in_use += (int64_t)got;
    cu_note_peak(cb);
    if (cb->poison) cu_poison(cb, p, got);
    return p;
}

static void cuda_release(vae_backend *be, void *p) {
    if (!p) return;
    cuda_backend *cb = cu_be(be);
    cu_enter(cb, "cuda release");
    be->bytes_in_use -= (int64_t)cu_pool_free(&cb->pool, p);
}

/* avail: free device memory plus what this backend holds already; reserve: the weights (one
 * layout per conv, 5% more than dense for channel padding or the phase filters of upsampling
 * convs, and room for the largest conv's layouts twice: tuning makes a candidate's layout before
 * it frees the one it did not take; the tuner keeps within this, cuda_conv.c) and the cuDNN
 * workspace as far as it has grown (at least 64 MiB); scratch: the scratch area now */
static int cuda_mem_info(vae_backend *be, const vae_program *p, int64_t *avail, int64_t *reserve,
                         int64_t *scratch) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda memory info");
    if (rc) return rc;
    size_t free_b = 0, total_b = 0;
    if ((rc = cu_check(cudaMemGetInfo(&free_b, &total_b), "cuda memory info", "cudaMemGetInfo")))
        return rc;
    /* what this backend holds, its allocator's cached blocks included, and what the host's
     * pool (dev_alloc) holds free */
    *avail = (int64_t)free_b + cu_held(cb) + (int64_t)cb->pool.reserved_bytes -
             cb->base.bytes_in_use;
    if (cb->pool.al.pool_free) *avail += cb->pool.al.pool_free(cb->device, cb->pool.al.user);
    double w = 0, largest = 0;
    for (int i = 0; i < p->n_ops; i++) {
        const vae_op *op = &p->ops[i];
        if (op->kind == VAE_OP_CONV) {
            const double dense = (double)vae_op_weight_count(op) * be->elem_size;
            /* (an upsampling 3x3 conv's four 2x2 phase filters: 16 taps for 9) */
            const int phases = op->up == 2 && op->kh == 3 && op->kw == 3;
            w += (phases ? 16.0 / 9.0 : 1.05) * dense + 4.0 * op->c_out;
            largest = dense > largest ? dense : largest;
        } else if (op->w) {
            w += 8.0 * op->c_out;
        }
    }
    w += 2 * 1.05 * largest;
    cb->weight_reserve = (int64_t)w;
    const size_t ws = cb->ws_bytes > ((size_t)64 << 20) ? cb->ws_bytes : (size_t)64 << 20;
    *reserve = (int64_t)w + (int64_t)ws;
    *scratch = (int64_t)cb->scratch_bytes;
    return VAE_OK;
}

static int cuda_trim(vae_backend *be) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda trim");
    if (rc == VAE_OK) cu_pool_trim(&cb->pool);
    if (rc == VAE_OK) cu_stores_release(cb, 0);
    if (rc == VAE_OK) cu_stage_free(cb, &cb->stage);
    return rc;
}

static int cuda_bind(vae_backend *be) { return cu_enter(cu_be(be), "cuda device group"); }

static int cuda_scratch_reserve(vae_backend *be, size_t bytes, int capped) {
    cuda_backend *cb = cu_be(be);
    /* the caller's thread may have another device of a group current (session_plan.c reserves
     * for every device in turn): the scratch must be this one's */
    int rc = cu_enter(cb, "scratch reserve");
    if (rc) return rc;
    cb->scratch_capped = capped;
    /* a plan without the bus, or with a smaller ring than the one held: the ring goes (the
     * bus makes its own at first use) */
    if (cb->bus.stream && (!be->host_copy_on || cb->bus.ring_bytes > cu_bus_ring_wanted(cb)))
        cu_bus_destroy(cb);
    cu_io_stage_release(cb); /* the stages: the run's plan counts its own */
    if (bytes <= cb->scratch_bytes) return VAE_OK;
    return cu_scratch(cb, bytes, "scratch reserve") ? VAE_OK : VAE_ENOMEM;
}

static int cuda_sync(vae_backend *be) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda sync");
    if (rc) return rc;
    rc = cu_check(cudaStreamSynchronize(cb->stream), "cuda sync", "cudaStreamSynchronize");
    if (rc == VAE_OK) rc = cu_bus_sync(cb); /* host memory the bus stream writes */
    if (rc == VAE_OK && cb->io.stream)      /* ... and the user's frames */
        rc = cu_check(cudaStreamSynchronize(cb->io.stream), "cuda sync", "cudaStreamSynchronize");
    cu_prof_flush(cb);
    return rc;
}

/* ---- vtbl: per-op state ---------------------------------------------------------------------- */
static int cuda_prepare(vae_backend *be, const vae_op *op, void **state) {
    *state = NULL;
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, op->name);
    if (rc) return rc;
    const double t0 = cu_now();
    rc = op->kind == VAE_OP_CONV ? cuda_conv_prepare(be, op, state)
                                 : cuda_ops_prepare(be, op, state);
    cb->host_s[CU_H_PREPARE] += cu_now() - t0;
    return rc;
}

static void cuda_unprepare(vae_backend *be, const vae_op *op, void *state) {
    if (!state) return;
    cu_enter(cu_be(be), op->name);
    if (op->kind == VAE_OP_CONV) cuda_conv_unprepare(be, op, state);
    else cuda_ops_unprepare(be, op, state);
}

/* ---- work graphs (CUDA graphs by stream capture) -------------------------------------------- */
static int cuda_graph_begin(vae_backend *be) {
    cuda_backend *cb = cu_be(be);
    if (cb->prof) /* profiling reads its events back one by one */
        return vae_fail(VAE_EUNSUPPORTED, "cuda: no graphs while profiling");
    int rc = cu_enter(cb, "cuda graph");
    if (rc == VAE_OK) rc = cu_bus_wait(cb); /* not inside the capture: the bus is not in it */
    if (rc) return rc;
    /* relaxed: a cudaMalloc while recording (a cache miss of the allocator) is allowed */
    rc = cu_check(cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeRelaxed), "cuda graph",
                  "cudaStreamBeginCapture");
    cb->recording = rc == VAE_OK;
    return rc;
}

static int cuda_graph_end(vae_backend *be, void **graph) {
    cuda_backend *cb = cu_be(be);
    *graph = NULL;
    cudaGraph_t g = NULL;
    const double t0 = cu_now();
    int rc = cu_check(cudaStreamEndCapture(cb->stream, &g), "cuda graph", "cudaStreamEndCapture");
    cb->recording = 0;
    if (rc == VAE_OK && !g) rc = vae_fail(VAE_EDEVICE, "cuda graph: nothing was recorded");
    cudaGraphExec_t x = NULL;
    if (rc == VAE_OK)
        rc = cu_check(cudaGraphInstantiate(&x, g, 0), "cuda graph", "cudaGraphInstantiate");
    if (g) cudaGraphDestroy(g);
    cb->host_s[CU_H_GRAPH] += cu_now() - t0;
    if (rc) {
        cudaGetLastError(); /* a failed recording is not an error of later work */
        if (cb->pool.graphs == 0 && cb->n_retired) { /* what it outgrew (cu_retire) */
            cudaStreamSynchronize(cb->stream);
            cu_retired_free(cb);
        }
        return rc;
    }
    *graph = x;
    cb->pool.graphs++;
    return VAE_OK;
}

static int cuda_graph_launch(vae_backend *be, void *graph) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda graph");
    if (rc) return rc;
    cb->n_graph_launches++;
    if ((rc = cu_bus_wait(cb))) return rc; /* host copies recorded in it follow the bus's */
    return cu_check(cudaGraphLaunch((cudaGraphExec_t)graph, cb->stream), "cuda graph",
                    "cudaGraphLaunch");
}

static void cuda_graph_free(vae_backend *be, void *graph) {
    if (!graph) return;
    cuda_backend *cb = cu_be(be);
    cu_enter(cb, "cuda graph");
    cudaStreamSynchronize(cb->stream); /* a launch of it may still be running */
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
    if (--cb->pool.graphs == 0) cu_retired_free(cb);
}

static int cuda_mark(vae_backend *be) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda mark");
    if (rc == VAE_OK && !cb->mark_ev)
        rc = cu_check(cudaEventCreateWithFlags(&cb->mark_ev, cudaEventDisableTiming), "cuda mark",
                      "cudaEventCreate");
    return rc ? rc
              : cu_check(cudaEventRecord(cb->mark_ev, cb->stream), "cuda mark", "cudaEventRecord");
}

static int cuda_mark_reached(vae_backend *be) {
    cuda_backend *cb = cu_be(be);
    if (!cb->mark_ev) return 1;
    /* not ready is a state, not an error: cleared from the last error, as PyTorch's event
     * query does (every launch checks its own error at once, so nothing else is pending);
     * any other error surfaces from the next call that checks */
    const cudaError_t e = cudaEventQuery(cb->mark_ev);
    if (e == cudaErrorNotReady) cudaGetLastError();
    return e != cudaErrorNotReady;
}

static const vae_backend_vtbl cuda_vtbl = {
    .name = "cuda",
    .destroy = cuda_destroy,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .copy2d = cuda_copy2d,
    .host_alloc = cu_store_alloc,
    .host_free = cu_store_free,
    .prefetch = cu_bus_prefetch,
    .mem_info = cuda_mem_info,
    .alloc_size = cu_pool_round,
    .scratch_need = cuda_scratch_need,
    .scratch_reserve = cuda_scratch_reserve,
    .zero = cuda_zero,
    .zero2d = cuda_zero2d,
    .sync = cuda_sync,
    .prepare = cuda_prepare,
    .unprepare = cuda_unprepare,
    .conv = cuda_conv,
    .norm = cuda_norm,
    .norm_rows = cuda_norm_rows,
    .norm_stats = cuda_norm_stats,
    .norm_apply = cuda_norm_apply,
    .comm_create = cuda_comm_create,
    .comm_join = cuda_comm_join,
    .eltwise = cuda_eltwise,
    .resample = cuda_resample,
    .attention = cuda_attention,
    .stage_in = cuda_stage_in,
    .upload_planar = cuda_upload_planar,
    .download_planar = cuda_download_planar,
    .download_stage = cu_io_stage_put,
    .download_staged = cuda_download_staged,
    .download_wait = cuda_download_wait,
    .view_finite = cu_view_finite,
    .view_import = cu_view_import,
    .view_export = cu_view_export,
    .stream_join = cu_stream_join,
    .view_reach = cu_view_reach,
    .trim = cuda_trim,
    .bind = cuda_bind,
    .warm = cuda_warm,
    .conv_window = cuda_conv_window,
    .fp8_conv = cuda_conv_fp8,
    .fp8_codes = cuda_fp8_codes,
    .conv_upsample = 1,
    .conv_norm = 1,
    .conv_act = 1,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
    .mark = cuda_mark,
    .mark_reached = cuda_mark_reached,
};

const char *vae_cuda_backend_describe(vae_backend *be, char *buf, size_t len) {
    cuda_backend *cb = cu_be(be);
    char dnn[64];
    snprintf(
        buf, len,
        "%s, %s, %s; conv blocks: %lld cuDNN (%lld 3-D, %lld fused bias), %lld GEMM, %lld "
        "implicit GEMM (%s, %s), %lld halo tile, %lld halo normed, %lld halo up2, %lld stem, %lld "
        "fp8, "
        "%lld fp8 halo tile, %lld fp8 mma.sync, %lld mma.sync 16-bit, %lld graph "
        "launches; %d cuDNN plans, %lld made by the warm-up; weights %.1f MiB; peak %.1f MiB "
        "(weights %.1f, activations %.1f, scratch %.1f, cuDNN workspace %.1f); pool %.1f MiB; "
        "session creation %.0f ms (warm-up, %.1f MiB of parameters staged, %lld uploads from "
        "the stage); host set-up: device allocations %.0f ms, pinned buffers %.0f ms, cuDNN "
        "handle %.0f ms, cuDNN plans %.0f ms (first launches %.0f ms), graphs %.0f ms, op "
        "preparation %.0f ms, weight uploads %.0f ms, CUTLASS launches %.0f ms; host copies: "
        "%lld out on the bus (%.2f GiB), %lld prefetched (%.2f GiB), %lld read from prefetches, "
        "%lld on the compute stream (%.2f GiB between host and device)",
        cb->device_name, cb->fp8 ? "bf16 activations with fp8 convs" : vae_dtype_name(be->dtype),
        cu_dnn_describe(cb, dnn, sizeof dnn), (long long)cb->n_conv_cudnn, (long long)cb->n_conv_3d,
        (long long)cb->n_conv_fused, (long long)cb->n_conv_gemm, (long long)cb->n_conv_igemm,
        cb->igemm == 2 ? "always"
        : cb->igemm    ? "tuned"
                       : "off",
        cb->mma              ? "mma.sync"
        : cuk_igemm_device() ? "sm_90a"
                             : "no kernels for this device",
        (long long)cb->n_conv_halo, (long long)cb->n_conv_normed, (long long)cb->n_conv_halo_up2,
        (long long)cb->n_conv_stem, (long long)cb->n_conv_fp8, (long long)cb->n_conv_fp8_halo,
        (long long)cb->n_conv_fp8_mma, (long long)cb->n_conv_mma, (long long)cb->n_graph_launches,
        cu_dnn_plans(cb), (long long)cb->n_dnn_warmed, (double)cb->weight_bytes / 1048576.0,
        (double)be->bytes_peak / 1048576.0, (double)cb->peak_parts[0] / 1048576.0,
        (double)cb->peak_parts[1] / 1048576.0, (double)cb->peak_parts[2] / 1048576.0,
        (double)cb->peak_parts[3] / 1048576.0, (double)cb->pool.reserved_bytes / 1048576.0,
        cb->host_s[CU_H_WARM] * 1e3, (double)cu_stage_bytes(&cb->stage) / 1048576.0,
        (long long)cb->n_staged_uploads, cb->host_s[CU_H_MALLOC] * 1e3,
        cb->host_s[CU_H_PINNED] * 1e3, cb->host_s[CU_H_DNN_HANDLE] * 1e3,
        cb->host_s[CU_H_DNN_PLAN] * 1e3, cb->host_s[CU_H_DNN_FIRST] * 1e3,
        cb->host_s[CU_H_GRAPH] * 1e3, cb->host_s[CU_H_PREPARE] * 1e3,
        cb->host_s[CU_H_WEIGHTS] * 1e3, cb->host_s[CU_H_IGEMM] * 1e3, cb->bus.n_out,
        (double)cb->bus.bytes_out / 1073741824.0, cb->bus.n_ahead,
        (double)cb->bus.bytes_ahead / 1073741824.0, cb->bus.n_hit, cb->bus.n_direct,
        (double)cb->bus.bytes_direct / 1073741824.0);
    return buf;
}

/* ---- creation -------------------------------------------------------------------------------- */
int vae_cuda_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (n < 1) return 0;
    int cur = 0;
    if (cudaGetDevice(&cur) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return cuk_probe(); /* this binary has kernels for the device */
}

int vae_cuda_backend_create(vae_backend **out, vae_dtype dtype, int device_index,
                            const vae_settings *settings, const vae_dev_allocator *alloc) {
    vae_settings defaults;
    vae_settings_default(&defaults);
    const vae_settings *st = settings ? settings : &defaults;
    if (!out) return vae_fail(VAE_EINVAL, "cuda backend: NULL output pointer");
    *out = NULL;
    /* fp8: bf16 activations, E4M3 operands in the convs the FP8 kernels take (cuda_conv.c) */
    const int fp8 = dtype == VAE_DTYPE_FP8;
    if (fp8) dtype = VAE_DTYPE_BF16;
    if (dtype != VAE_DTYPE_F32 && dtype != VAE_DTYPE_BF16 && dtype != VAE_DTYPE_F16)
        return vae_fail(VAE_EUNSUPPORTED, "cuda backend: activation dtype %d is not supported",
                        (int)dtype);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return vae_fail(VAE_EDEVICE, "cuda backend: no usable CUDA driver or device (%s)",
                        cudaGetErrorString(e));
    }
    if (device_index < 0 || device_index >= n)
        return vae_fail(VAE_EDEVICE, "cuda backend: device %d does not exist (%d device%s)",
                        device_index, n, n == 1 ? "" : "s");
    int rc = cu_check(cudaSetDevice(device_index), "cuda backend", "cudaSetDevice");
    if (rc) return rc;
    if (!cuk_probe())
        return vae_fail(VAE_EDEVICE, "cuda backend: this build has no kernels for device %d "
                                     "(rebuild with its CUDA architecture)",
                        device_index);
    struct cudaDeviceProp prop;
    if ((rc = cu_check(cudaGetDeviceProperties(&prop, device_index), "cuda backend",
                       "cudaGetDeviceProperties")))
        return rc;
    if (dtype == VAE_DTYPE_BF16 && prop.major < 8)
        return vae_fail(VAE_EUNSUPPORTED, "cuda backend: %s (sm_%d%d) has no bfloat16 support",
                        prop.name, prop.major, prop.minor);
    /* The own GEMM kernels: the sm_90a ones on Hopper (CUTLASS builds), else the mma.sync ones
     * (Ampere, Ada, Blackwell); on Hopper those only when asked (VAE_CUDA_MMA: tests), since they
     * cannot match its wgmma kernels and its E4M3 mma.sync is emulated through fp16. */
    const int mma = cuk_mma_device(0) && (prop.major == 9 ? st->cuda_mma : 1);
    const int sm90 = cuk_igemm_device() && !mma;
    /* cuDNN's FP8 3-D convs run slower than its bf16 ones (measured on the H100): fp8
     * takes own kernels */
    if (fp8 && !sm90 && !(mma && cuk_mma_device(1)))
        return vae_fail(VAE_EUNSUPPORTED,
                        "cuda backend: fp8 convolutions need E4M3 kernels for the GPU: on Hopper "
                        "a build with CUTLASS's, on Ada / Blackwell (sm_89, sm_120) the mma.sync "
                        "one (%s is sm_%d%d; this build: sm_%s, %s CUTLASS); use bf16, or "
                        "device=cpu to emulate fp8",
                        prop.name, prop.major, prop.minor, VAE_CUDA_ARCHS_STRING,
                        cuk_igemm_built() ? "with" : "without");

    cuda_backend *cb = vae_calloc(1, sizeof *cb);
    if (!cb) return vae_fail(VAE_ENOMEM, "cuda backend: out of memory");
    cb->base.v = &cuda_vtbl;
    cb->base.dtype = dtype;
    cb->base.elem_size = dtype == VAE_DTYPE_F32 ? 4 : 2;
    cb->device = device_index;
    cb->sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
    snprintf(cb->device_name, sizeof cb->device_name, "%s", prop.name);
    cb->scratch_limit = (size_t)st->cuda_scratch_mb << 20;
    cb->prof = st->cuda_profile;
    cb->conv_mode = st->cuda_conv;
    cb->conv3d = st->cuda_conv3d;
    cb->fuse = dtype != VAE_DTYPE_F32 && st->cuda_fuse;
    cb->poison = st->cuda_poison;
    cb->tune = st->cuda_tune;
    snprintf(cb->tc.file, sizeof cb->tc.file, "%s", st->tune_cache);
    /* seed:N -- no timing: each (op, shape) gets a path chosen by a hash of N (tests explore the
     * combinations of paths that timing noise can produce) */
    cb->tune_seed = st->cuda_tune_seed;
    cb->tune_reps = st->cuda_tune_reps;
    cb->pw_dnn = !st->cuda_pw_gemm;
    cb->phase = st->cuda_phase;
    cb->pad3d = st->cuda_pad3d;
    cb->cpad = st->cuda_cpad;
    cb->kpad = st->cuda_kpad;
    cb->narrow = st->cuda_narrow;
    cb->att_gemm = st->cuda_att;
    cb->warm = st->cuda_warm;
    cb->mma = mma;
    cb->igemm = sm90 || mma ? st->cuda_igemm : 0;
    cb->halo = cb->igemm && !cb->mma ? st->cuda_halo : 0;
    cb->dnn_gain_us = st->cuda_dnn_gain_us;
    cb->fp8 = fp8;
    cb->bus.off = !st->cuda_bus;
    cb->bus.two = st->cuda_bus == 2;
    cb->io.never = !st->cuda_bus; /* the user's frames on a stream of their own, too */
    cb->base.host_copy_bytes = cb->bus.off ? 0 : (int64_t)CU_BUS_RING; /* cuda_bus.c's ring */

    if ((rc = cu_check(cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking),
                       "cuda backend", "cudaStreamCreate")))
        goto fail;
    cb->pool.stream = cb->stream;
    cb->pool.device = device_index;
    cb->pool.malloc_s = &cb->host_s[CU_H_MALLOC];
    if (alloc && alloc->alloc && alloc->free) cb->pool.al = *alloc;
    cublasStatus_t bst = cublasCreate(&cb->cublas);
    if (bst != CUBLAS_STATUS_SUCCESS) {
        cb->cublas = NULL;
        rc = cu_blas_check(bst, "cuda backend", "cublasCreate");
        goto fail;
    }
    if ((rc = cu_blas_check(cublasSetStream(cb->cublas, cb->stream), "cuda backend",
                            "cublasSetStream")))
        goto fail;
    /* no TF32; no reduced-precision split-K reductions */
    if ((rc = cu_blas_check(cublasSetMathMode(cb->cublas,
                                              (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                             CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                            "cuda backend", "cublasSetMathMode")))
        goto fail;
    VAE_INFO("cuda backend: device %d %s (sm_%d%d, %d SMs, %.1f GiB), %s activations", device_index,
             prop.name, prop.major, prop.minor, cb->sm_count,
             (double)prop.totalGlobalMem / (1024.0 * 1024 * 1024), vae_dtype_name(dtype));
    *out = &cb->base;
    return VAE_OK;
fail:
    cuda_destroy(&cb->base);
    return rc;
}
