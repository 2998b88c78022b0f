/* cuda_context.c -- the CUDA backend's ground floor: errors, the current device, what it holds
 * on the device (the budget, the peak), the scratch area and the buffers retired while work
 * graphs may still use them. */
#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/base/cuda_host.h"

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
void cu_retired_free(cuda_backend *cb) {
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
