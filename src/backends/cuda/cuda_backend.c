/* cuda_backend.c -- the CUDA backend: creation, buffers, host <-> device, per-op preparation. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"
#include "core/dtype.h"
#include "core/settings.h"


/* ---- errors --------------------------------------------------------------------------------- */
int cu_check(cudaError_t e, const char *who, const char *what) {
    if (e == cudaSuccess) return VAE_OK;
    cudaGetLastError(); /* clear a non-sticky error */
    return vae_fail(e == cudaErrorMemoryAllocation ? VAE_ENOMEM : VAE_EDEVICE, "%s: %s: CUDA %s (%s)",
                    who, what, cudaGetErrorName(e), cudaGetErrorString(e));
}

int cu_blas_check(cublasStatus_t st, const char *who, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS) return VAE_OK;
    return vae_fail(st == CUBLAS_STATUS_ALLOC_FAILED ? VAE_ENOMEM : VAE_EDEVICE,
                    "%s: %s: cuBLAS %s (%s)", who, what, cublasGetStatusName(st),
                    cublasGetStatusString(st));
}

int cu_enter(cuda_backend *cb, const char *who) {
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == cb->device) return VAE_OK;
    return cu_check(cudaSetDevice(cb->device), who, "cudaSetDevice");
}

cudaDataType_t cu_blas_type(vae_dtype dt) {
    switch (dt) {
    case VAE_DTYPE_BF16: return CUDA_R_16BF;
    case VAE_DTYPE_F16: return CUDA_R_16F;
    default: return CUDA_R_32F;
    }
}

/* Everything the backend holds on the device now. */
int64_t cu_held(const cuda_backend *cb) {
    return cb->base.bytes_in_use + (int64_t)(cb->scratch_bytes + cb->retired_bytes) +
           (int64_t)cb->ws_bytes + cb->weight_bytes + cu_bus_bytes(cb);
}

int cu_over_budget(cuda_backend *cb, size_t more, const char *who) {
    const int64_t limit = cb->base.limit, held = cu_held(cb);
    if (limit <= 0 || held + (int64_t)more <= limit) return VAE_OK;
    cb->base.refused = 1;
    return vae_fail(VAE_ENOMEM, "%s: %.1f MiB more would exceed the memory budget of %.1f MiB "
                                "(%.1f MiB held)", who, (double)more / 1048576.0,
                    (double)limit / 1048576.0, (double)held / 1048576.0);
}

void cu_note_peak(cuda_backend *cb) {
    const int64_t scratch = (int64_t)(cb->scratch_bytes + cb->retired_bytes);
    const int64_t total = cu_held(cb);
    if (total <= cb->base.bytes_peak) return;
    cb->base.bytes_peak = total;
    cb->peak_parts[0] = cb->weight_bytes;
    cb->peak_parts[1] = cb->base.bytes_in_use;
    cb->peak_parts[2] = scratch;
    cb->peak_parts[3] = (int64_t)cb->ws_bytes;
}

/* ---- profiling ------------------------------------------------------------------------------- */
enum { CU_PROF_CAP = 4096 }; /* event pairs resolved at once */
/* clang-format off */
static const char *const prof_names[CU_P_N] = {
    "conv cuDNN", "conv GEMM", "conv gather/im2col", "conv bias/residual init", "rms norm",
    "group norm", "eltwise", "resample", "attention", "copy/zero", "upload", "download",
    "conv narrow head/stem", "conv implicit GEMM", "copy host<->device", "conv halo tile"};
/* clang-format on */

static void prof_flush(cuda_backend *cb) {
    if (!cb->prof || cb->prof_n == 0) return;
    cudaStreamSynchronize(cb->stream);
    for (int i = 0; i < cb->prof_n; i++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, cb->prof_ev[2 * i], cb->prof_ev[2 * i + 1]) == cudaSuccess) {
            cb->prof_ms[cb->prof_cat[i]] += ms;
            cb->prof_calls[cb->prof_cat[i]]++;
            const char *nm = cb->prof_name ? cb->prof_name[i] : NULL;
            if (nm) {
                int k = 0;
                while (k < cb->n_prof_ops && (cb->prof_ops[k].cat != cb->prof_cat[i] ||
                                              strcmp(cb->prof_ops[k].name, nm) != 0))
                    k++;
                if (k == cb->n_prof_ops && k == cb->cap_prof_ops) {
                    int cap = cb->cap_prof_ops ? 2 * cb->cap_prof_ops : 256;
                    cu_prof_op *t = vae_realloc(cb->prof_ops, (size_t)cap * sizeof *t);
                    if (t) cb->prof_ops = t, cb->cap_prof_ops = cap;
                }
                if (k < cb->cap_prof_ops) {
                    if (k == cb->n_prof_ops) {
                        memset(&cb->prof_ops[k], 0, sizeof cb->prof_ops[k]);
                        snprintf(cb->prof_ops[k].name, sizeof cb->prof_ops[k].name, "%s", nm);
                        cb->prof_ops[k].cat = cb->prof_cat[i];
                        cb->n_prof_ops++;
                    }
                    cb->prof_ops[k].ms += ms;
                    cb->prof_ops[k].calls++;
                }
            }
        } else {
            cudaGetLastError();
        }
    }
    cb->prof_n = 0;
}

int cu_prof_begin(cuda_backend *cb, int cat) {
    if (!cb->prof || cu_enter(cb, "cuda profile")) return -1;
    if (!cb->prof_ev) {
        cb->prof_ev = vae_calloc(2 * CU_PROF_CAP, sizeof *cb->prof_ev);
        cb->prof_cat = vae_calloc(CU_PROF_CAP, sizeof *cb->prof_cat);
        if (cb->prof > 1) cb->prof_name = vae_calloc(CU_PROF_CAP, sizeof *cb->prof_name);
        if (!cb->prof_ev || !cb->prof_cat) {
            cb->prof = 0;
            return -1;
        }
        cb->prof_cap = CU_PROF_CAP;
    }
    if (cb->prof_n == cb->prof_cap) prof_flush(cb);
    int i = cb->prof_n;
    if (i >= cb->prof_made) {
        if (cudaEventCreate(&cb->prof_ev[2 * i]) != cudaSuccess ||
            cudaEventCreate(&cb->prof_ev[2 * i + 1]) != cudaSuccess) {
            cudaGetLastError();
            return -1;
        }
        cb->prof_made = i + 1;
    }
    cb->prof_cat[i] = cat;
    if (cb->prof_name) cb->prof_name[i] = cb->prof_op;
    cudaEventRecord(cb->prof_ev[2 * i], cb->stream);
    cb->prof_n++;
    return i;
}

void cu_prof_end(cuda_backend *cb, int h) {
    if (h >= 0) cudaEventRecord(cb->prof_ev[2 * h + 1], cb->stream);
}

static void prof_report(cuda_backend *cb) {
    if (!cb->prof) return;
    prof_flush(cb);
    double total = 0;
    for (int k = 0; k < CU_P_N; k++) total += cb->prof_ms[k];
    VAE_INFO("cuda profile (%s, %s): %.1f ms of GPU work in %d categories", cb->device_name,
             vae_dtype_name(cb->base.dtype), total, CU_P_N);
    int done[CU_P_N] = {0};
    for (int r = 0; r < CU_P_N; r++) { /* largest first */
        int best = -1;
        for (int k = 0; k < CU_P_N; k++)
            if (!done[k] && (best < 0 || cb->prof_ms[k] > cb->prof_ms[best])) best = k;
        done[best] = 1;
        if (cb->prof_calls[best] == 0) continue;
        VAE_INFO("cuda profile: %-24s %10.2f ms %5.1f%% %8lld calls", prof_names[best],
                 cb->prof_ms[best], total > 0 ? 100.0 * cb->prof_ms[best] / total : 0.0,
                 (long long)cb->prof_calls[best]);
    }
    if (cb->n_prof_ops) { /* VAE_CUDA_PROFILE=2: the 60 most expensive ops by name */
        VAE_INFO("cuda profile by op (name, category, GPU ms, calls):");
        for (int r = 0; r < 60 && r < cb->n_prof_ops; r++) {
            int best = r;
            for (int k = r + 1; k < cb->n_prof_ops; k++)
                if (cb->prof_ops[k].ms > cb->prof_ops[best].ms) best = k;
            cu_prof_op t = cb->prof_ops[r];
            cb->prof_ops[r] = cb->prof_ops[best];
            cb->prof_ops[best] = t;
            VAE_INFO("cuda op profile: %-52s %-12.12s %9.2f ms %6lld", cb->prof_ops[r].name,
                     prof_names[cb->prof_ops[r].cat], cb->prof_ops[r].ms,
                     (long long)cb->prof_ops[r].calls);
        }
    }
    vae_free(cb->prof_ops);
    vae_free(cb->prof_name);
    cb->prof_ops = NULL;
    cb->prof_name = NULL;
    cb->n_prof_ops = cb->cap_prof_ops = 0;
    for (int i = 0; i < cb->prof_made; i++) {
        cudaEventDestroy(cb->prof_ev[2 * i]);
        cudaEventDestroy(cb->prof_ev[2 * i + 1]);
    }
    vae_free(cb->prof_ev);
    vae_free(cb->prof_cat);
    cb->prof_ev = NULL;
    cb->prof_cat = NULL;
    cb->prof_made = cb->prof_n = 0;
}

/* VAE_CUDA_POISON=1: every block handed out (pool, scratch, workspace) is first filled with
 * all-ones bytes, a NaN in every float type, so that work reading memory it did not write shows
 * up as non-finite output instead of depending on what the block held before (test mode). */
void cu_poison(cuda_backend *cb, void *p, size_t bytes) {
    if (p && bytes) cudaMemsetAsync(p, 0xFF, bytes, cb->stream);
}

/* ---- scratch --------------------------------------------------------------------------------- */
void cu_retire(cuda_backend *cb, void *p, size_t bytes) {
    if (!p) return;
    /* a recorded graph may still use it, or (while recording) work queued before: keep it till
     * the last graph is gone */
    if (cb->pool.graphs > 0 || cb->recording) {
        struct cu_block *r = vae_realloc(cb->retired, (size_t)(cb->n_retired + 1) * sizeof *r);
        if (r) {
            cb->retired = r;
            cb->retired[cb->n_retired++] = (struct cu_block){p, bytes};
            cb->retired_bytes += bytes;
            return;
        }
    }
    cudaStreamSynchronize(cb->stream); /* pending work may still read it */
    cu_dev_free(&cb->pool, p, bytes);
}

/* After the last graph is gone: what cu_retire kept. */
static void retired_free(cuda_backend *cb) {
    for (int i = 0; i < cb->n_retired; i++)
        cu_dev_free(&cb->pool, cb->retired[i].p, cb->retired[i].bytes);
    vae_free(cb->retired);
    cb->retired = NULL;
    cb->n_retired = 0;
    cb->retired_bytes = 0;
}

void *cu_scratch(cuda_backend *cb, size_t bytes, const char *who) {
    if (bytes <= cb->scratch_bytes) {
        if (cb->poison) cu_poison(cb, cb->scratch, bytes); /* what an earlier user left */
        return cb->scratch;
    }
    VAE_DEBUG("%s: scratch grows from %zu to %zu bytes (%d graphs alive)", who, cb->scratch_bytes,
              bytes, cb->pool.graphs);
    /* grow by at least 1/4 so that slowly growing requests do not reallocate every time */
    size_t want = bytes + bytes / 4;
    want = (want + 0xFFFFF) & ~(size_t)0xFFFFF;
    if (cb->base.limit > 0 && cu_over_budget(cb, want - cb->scratch_bytes, who)) {
        want = (bytes + 0xFFFFF) & ~(size_t)0xFFFFF; /* no room to grow ahead: just enough */
        if (cu_over_budget(cb, want - cb->scratch_bytes, who)) return NULL;
    }
    cu_retire(cb, cb->scratch, cb->scratch_bytes);
    cb->scratch = NULL;
    cb->scratch_bytes = 0;
    void *p = NULL;
    cudaError_t e = cu_dev_malloc(&cb->pool, &p, want);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cu_pool_trim(&cb->pool);
        want = bytes;
        e = cu_dev_malloc(&cb->pool, &p, want);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        vae_fail(VAE_ENOMEM, "%s: cannot allocate %zu bytes of device scratch (%s)", who, bytes,
                 cudaGetErrorString(e));
        return NULL;
    }
    cb->scratch = p;
    cb->scratch_bytes = want;
    cu_note_peak(cb);
    if (cb->poison) cu_poison(cb, p, want);
    return p;
}

/* ---- parameters (weights) ------------------------------------------------------------------- */
int cu_upload_refused(cuda_backend *cb, const char *who) {
    if (!cb->recording) return VAE_OK;
    return vae_fail(VAE_EUNSUPPORTED, "%s: no upload of constants while recording a graph", who);
}

/* Copies pageable host memory to the device in the stream's order. A plain cudaMemcpy would run on
 * the legacy stream, which the backend's non-blocking stream does not wait for, and for pageable
 * memory it returns once the data is staged, before it has landed: a kernel queued right after
 * (a weight layout made on first use) could read it half-written. The async copy stages the host
 * data before returning too, so the caller may free it at once. Not while a graph is being
 * recorded (the graph would keep a copy from host memory): the recording then fails and the step
 * runs normally. */
int cu_upload_host(cuda_backend *cb, void *dst, const void *host, size_t bytes, const char *who) {
    const int rc = cu_upload_refused(cb, who);
    if (rc) return rc;
    return cu_check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, cb->stream), who,
                    "uploading constants");
}

/* key/tag: what to look up in the stage; src: float32 values to convert where it has no such
 * item (NULL: then nothing is done) */
static int upload_param(cuda_backend *cb, const void *key, int tag, const float *src, size_t n,
                        int as_f32, void **out, const char *who) {
    *out = NULL;
    if (!key || n == 0) return VAE_OK;
    vae_dtype dt = as_f32 ? VAE_DTYPE_F32 : cb->base.dtype;
    size_t es = dt == VAE_DTYPE_F32 ? 4 : 2, bytes = n * es;
    const void *staged = cu_stage_find(&cb->stage, key, tag, dt, n);
    if (!staged && !src) return VAE_OK;
    void *p = NULL;
    cudaError_t e = cu_dev_malloc(&cb->pool, &p, bytes);
    int rc = e != cudaSuccess ? cu_check(e, who, "allocating weights")
             : staged         ? cu_upload_host(cb, p, staged, bytes, who)
                              : cu_ring_upload(cb, p, src, n, dt, who);
    if (rc) {
        if (p) cu_dev_free(&cb->pool, p, bytes);
        return rc;
    }
    cb->n_staged_uploads += staged != NULL;
    cb->weight_bytes += (int64_t)bytes;
    cu_note_peak(cb);
    *out = p;
    return VAE_OK;
}

int cu_upload_param(cuda_backend *cb, const float *src, size_t n, int as_f32, void **out,
                    const char *who) {
    const double t0 = cu_now();
    int rc = upload_param(cb, src, CU_STAGE_RAW, src, n, as_f32, out, who);
    cb->host_s[CU_H_WEIGHTS] += cu_now() - t0;
    return rc;
}

int cu_upload_staged(cuda_backend *cb, const void *key, int tag, size_t n, int as_f32, void **out,
                     const char *who) {
    const double t0 = cu_now();
    int rc = upload_param(cb, key, tag, NULL, n, as_f32, out, who);
    cb->host_s[CU_H_WEIGHTS] += cu_now() - t0;
    return rc;
}

void cu_free_param(cuda_backend *cb, void *p, size_t bytes) {
    if (!p) return;
    cu_dev_free(&cb->pool, p, bytes);
    cb->weight_bytes -= (int64_t)bytes;
}

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
    prof_report(cb);
    cu_dnn_destroy(cb);
    cuda_ops_destroy(cb);
    cu_bus_destroy(cb);
    cu_io_stage_destroy(cb);
    cu_host_bufs_free(cb);
    cu_stage_free(cb, &cb->stage);
    cu_stores_release(cb, 1);
    for (int i = 0; i < 2; i++)
        if (cb->tune_ev[i]) cudaEventDestroy(cb->tune_ev[i]);
    if (cb->cublas) cublasDestroy(cb->cublas);
    cu_pool_destroy(&cb->pool);
    if (cb->scratch) cu_dev_free(&cb->pool, cb->scratch, cb->scratch_bytes);
    if (cb->ws) cu_dev_free(&cb->pool, cb->ws, cb->ws_bytes);
    retired_free(cb);
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

static int cuda_upload(vae_backend *be, void *dst, const float *src, size_t n) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda upload");
    if (rc || n == 0) return rc;
    if (!dst || !src) return vae_fail(VAE_EINVAL, "cuda upload: NULL buffer");
    if (be->dtype == VAE_DTYPE_F32) {
        int ph = cu_prof_begin(cb, CU_P_UPLOAD);
        rc = cu_check(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice,
                                      cb->stream),
                      "cuda upload", "cudaMemcpyAsync");
        cu_prof_end(cb, ph);
        return rc;
    }
    float *stage = cu_scratch(cb, n * sizeof(float), "cuda upload");
    if (!stage) return VAE_ENOMEM;
    int ph = cu_prof_begin(cb, CU_P_UPLOAD);
    rc = cu_check(cudaMemcpyAsync(stage, src, n * sizeof(float), cudaMemcpyHostToDevice, cb->stream),
                  "cuda upload", "cudaMemcpyAsync");
    if (!rc)
        rc = cu_check(cuk_from_f32(cb->stream, be->dtype, dst, stage, n), "cuda upload", "convert");
    cu_prof_end(cb, ph);
    return rc;
}

static int cuda_download(vae_backend *be, float *dst, const void *src, size_t n) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda download");
    if (rc || n == 0) return rc;
    if (!dst || !src) return vae_fail(VAE_EINVAL, "cuda download: NULL buffer");
    const void *from = src;
    float *stage = NULL;
    if (be->dtype != VAE_DTYPE_F32 && !(stage = cu_scratch(cb, n * sizeof(float), "cuda download")))
        return VAE_ENOMEM;
    int ph = cu_prof_begin(cb, CU_P_DOWNLOAD);
    if (stage) {
        rc = cu_check(cuk_to_f32(cb->stream, be->dtype, stage, src, n), "cuda download", "convert");
        from = stage;
    }
    if (!rc)
        rc = cu_check(cudaMemcpyAsync(dst, from, n * sizeof(float), cudaMemcpyDeviceToHost,
                                      cb->stream),
                      "cuda download", "cudaMemcpyAsync");
    cu_prof_end(cb, ph);
    if (rc) return rc;
    rc = cu_check(cudaStreamSynchronize(cb->stream), "cuda download", "synchronize");
    prof_flush(cb);
    return rc;
}

/* ---- asynchronous planar transfers (pinned host buffers, used in turn) ---------------------- */
static void *cuda_stage_in(vae_backend *be, size_t bytes) {
    cuda_backend *cb = cu_be(be);
    if (cu_enter(cb, "cuda stage")) return NULL;
    cu_host_buf *b = &cb->hin[cb->hin_next];
    if (cu_host_buf_reserve(cb, b, bytes ? bytes : 1)) return NULL;
    return b->pin.p;
}

static int cuda_upload_planar(vae_backend *be, void *dst, const float *src, int t, int h, int w,
                              int c) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda upload");
    if (rc) return rc;
    const int64_t n = (int64_t)t * h * w;
    if (n * c == 0) return VAE_OK;
    if (!dst || !src) return vae_fail(VAE_EINVAL, "cuda upload: NULL buffer");
    cu_host_buf *b = &cb->hin[cb->hin_next];
    const int pinned = b->pin.p == src && b->ev; /* the transfer buffer from stage_in */
    int ph = cu_prof_begin(cb, CU_P_UPLOAD), staged = 0;
    rc = cu_io_upload(cb, dst, src, n, c, pinned ? b : NULL, &staged); /* beside the compute */
    if (!rc && !staged) {
        float *stage = cu_scratch(cb, (size_t)(n * c) * sizeof(float), "cuda upload");
        rc = stage ? VAE_OK : VAE_ENOMEM;
        if (!rc)
            rc = cu_check(cudaMemcpyAsync(stage, src, (size_t)(n * c) * sizeof(float),
                                          cudaMemcpyHostToDevice, cb->stream),
                          "cuda upload", "cudaMemcpyAsync");
        if (!rc && pinned) rc = cu_host_buf_queued(b, cb->stream);
        if (!rc)
            rc = cu_check(cuk_planar_to_act(cb->stream, be->dtype, stage, dst, n, c), "cuda upload",
                          "layout");
    }
    if (!rc && pinned) cb->hin_next ^= 1;
    cu_prof_end(cb, ph);
    return rc;
}

static int cuda_download_planar(vae_backend *be, const void *src, int t, int h, int w, int c,
                                float **host) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda download");
    if (rc) return rc;
    const int64_t n = (int64_t)t * h * w;
    const size_t bytes = (size_t)(n * c) * sizeof(float);
    if (!src || !host) return vae_fail(VAE_EINVAL, "cuda download: NULL buffer");
    cu_host_buf *b = &cb->hout[cb->hout_next];
    if ((rc = cu_host_buf_reserve(cb, b, bytes ? bytes : 1))) return rc;
    float *stage = cu_scratch(cb, bytes ? bytes : 1, "cuda download");
    if (!stage) return VAE_ENOMEM;
    int ph = cu_prof_begin(cb, CU_P_DOWNLOAD);
    rc = cu_check(cuk_act_to_planar(cb->stream, be->dtype, src, stage, n, c), "cuda download",
                  "layout");
    if (!rc && bytes)
        rc = cu_check(cudaMemcpyAsync(b->pin.p, stage, bytes, cudaMemcpyDeviceToHost, cb->stream),
                      "cuda download", "cudaMemcpyAsync");
    if (!rc) rc = cu_host_buf_queued(b, cb->stream);
    cu_prof_end(cb, ph);
    if (rc) return rc;
    cb->hout_next ^= 1;
    *host = b->pin.p;
    return VAE_OK;
}

/* piece k of the staged chunk (cuda_io_stage.c) into the next transfer buffer */
static int cuda_download_staged(vae_backend *be, int k, float **host) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda download");
    if (rc) return rc;
    cu_host_buf *b = &cb->hout[cb->hout_next];
    if ((rc = cu_io_stage_copy(cb, k, b))) return rc;
    cb->hout_next ^= 1;
    *host = b->pin.p;
    return VAE_OK;
}

static int cuda_download_wait(vae_backend *be, const float *host) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda download");
    if (rc) return rc;
    for (int i = 0; i < 2; i++)
        if (cb->hout[i].pin.p == host) {
            rc = cu_host_buf_wait(&cb->hout[i]);
            if (!rc && cb->prof) {
                rc = cu_check(cudaStreamSynchronize(cb->stream), "cuda download", "synchronize");
                prof_flush(cb);
            }
            return rc;
        }
    return vae_fail(VAE_EINVAL, "cuda download: not a transfer buffer of this backend");
}

static int cuda_copy(vae_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda copy");
    if (rc || bytes == 0 || dst == src) return rc;
    int ph = cu_prof_begin(cb, CU_P_COPY);
    rc = cu_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cb->stream),
                  "cuda copy", "cudaMemcpyAsync");
    cu_prof_end(cb, ph);
    return rc;
}

/* Where a copy's side lies: this backend's device memory, host memory (a pinned store), or
 * elsewhere (another device, managed memory: the copy engine's business). */
enum { MEM_DEVICE, MEM_HOST, MEM_OTHER };
static int cu_mem_kind(const cuda_backend *cb, const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* an unregistered host pointer on older runtimes */
        return MEM_HOST;
    }
    if (a.type == cudaMemoryTypeDevice) return a.device == cb->device ? MEM_DEVICE : MEM_OTHER;
    return a.type == cudaMemoryTypeManaged ? MEM_OTHER : MEM_HOST;
}

static int cuda_copy2d(vae_backend *be, void *dst, size_t dst_pitch, const void *src,
                       size_t src_pitch, size_t row_bytes, size_t rows) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda copy2d");
    if (rc || row_bytes == 0 || rows == 0) return rc;
    const int dk = cu_mem_kind(cb, dst), sk = cu_mem_kind(cb, src);
    int ph = cu_prof_begin(cb, dk == MEM_DEVICE && sk == MEM_DEVICE ? CU_P_COPY : CU_P_BUS);
    int done = 0;
    if (dk == MEM_DEVICE && sk == MEM_DEVICE) { /* a kernel: faster than the copy engine */
        rc = cu_check(cuk_copy2d(cb->stream, dst, dst_pitch, src, src_pitch, row_bytes, rows),
                      "cuda copy2d", "copy kernel");
        done = 1;
    } else if (dk == MEM_HOST) { /* what was prefetched of it is stale now */
        cu_bus_forget(cb, dst, (rows - 1) * dst_pitch + row_bytes);
        if (sk == MEM_DEVICE)
            rc = cu_bus_copy_out(cb, dst, dst_pitch, src, src_pitch, row_bytes, rows, &done);
    } else if (sk == MEM_HOST && dk == MEM_DEVICE) {
        rc = cu_bus_copy_in(cb, dst, dst_pitch, src, src_pitch, row_bytes, rows, &done);
    }
    if (rc == VAE_OK && !done) { /* on the compute stream, after the bus's copies */
        cb->bus.n_direct++;
        rc = cu_bus_wait(cb);
        /* cudaMemcpyDefault: either side may be a pinned host store (host_alloc) */
        if (rc == VAE_OK)
            rc = cu_check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                                            cudaMemcpyDefault, cb->stream),
                          "cuda copy2d", "cudaMemcpy2DAsync");
    }
    cu_prof_end(cb, ph);
    return rc;
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
            const double dense =
                (double)op->c_out * op->c_in * op->kt * op->kh * op->kw * be->elem_size;
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

static int cuda_zero(vae_backend *be, void *dst, size_t bytes) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda zero");
    if (rc || bytes == 0) return rc;
    int ph = cu_prof_begin(cb, CU_P_COPY);
    rc = cu_check(cudaMemsetAsync(dst, 0, bytes, cb->stream), "cuda zero", "cudaMemsetAsync");
    cu_prof_end(cb, ph);
    return rc;
}

static int cuda_zero2d(vae_backend *be, void *dst, size_t dst_pitch, size_t row_bytes,
                       size_t rows) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda zero2d");
    if (rc || row_bytes == 0 || rows == 0) return rc;
    int ph = cu_prof_begin(cb, CU_P_COPY);
    rc = cu_check(cudaMemset2DAsync(dst, dst_pitch, 0, row_bytes, rows, cb->stream),
                  "cuda zero2d", "cudaMemset2DAsync");
    cu_prof_end(cb, ph);
    return rc;
}

static int cuda_sync(vae_backend *be) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda sync");
    if (rc) return rc;
    rc = cu_check(cudaStreamSynchronize(cb->stream), "cuda sync", "cudaStreamSynchronize");
    if (rc == VAE_OK) rc = cu_bus_sync(cb); /* host memory the bus stream writes */
    if (rc == VAE_OK && cb->io.stream)      /* ... and the user's frames */
        rc = cu_check(cudaStreamSynchronize(cb->io.stream), "cuda sync", "cudaStreamSynchronize");
    prof_flush(cb);
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
            retired_free(cb);
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
    if (--cb->pool.graphs == 0) retired_free(cb);
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
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
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
        "%lld out on the bus, %lld prefetched, %lld read from prefetches, %lld on the compute "
        "stream",
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
        cb->bus.n_ahead, cb->bus.n_hit, cb->bus.n_direct);
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
                        "--device cpu to emulate fp8",
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
