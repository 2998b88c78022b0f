/* cuda_params.c -- the model's parameters on their way to the device: from the stage where
 * session creation put them (cuda_stage.c), else converted through the pinned ring
 * (cuda_pinned.c), in the stream's order; refused while a graph is being recorded. */
#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/base/cuda_host.h"

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
