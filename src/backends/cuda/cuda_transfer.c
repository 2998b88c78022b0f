/* cuda_transfer.c -- the CUDA backend's copies (vtbl entries): host <-> device with the dtype's
 * conversion, planar frames through pinned buffers used in turn (or the io stage), device copies
 * and 2-D copies that reach host memory by the bus, zeroing. */
#include <string.h>

#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/base/cuda_host.h"
#include "backends/cuda/cuda_transfer.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/ops/cuda_ops.h"

int cuda_upload(vae_backend *be, void *dst, const float *src, size_t n) {
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

int cuda_download(vae_backend *be, float *dst, const void *src, size_t n) {
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
    cu_prof_flush(cb);
    return rc;
}

/* ---- asynchronous planar transfers (pinned host buffers, used in turn) ---------------------- */
void *cuda_stage_in(vae_backend *be, size_t bytes) {
    cuda_backend *cb = cu_be(be);
    if (cu_enter(cb, "cuda stage")) return NULL;
    cu_host_buf *b = &cb->hin[cb->hin_next];
    if (cu_host_buf_reserve(cb, b, bytes ? bytes : 1)) return NULL;
    return b->pin.p;
}

int cuda_upload_planar(vae_backend *be, void *dst, const float *src, int t, int h, int w,
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

int cuda_download_planar(vae_backend *be, const void *src, int t, int h, int w, int c,
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
int cuda_download_staged(vae_backend *be, int k, float **host) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda download");
    if (rc) return rc;
    cu_host_buf *b = &cb->hout[cb->hout_next];
    if ((rc = cu_io_stage_copy(cb, k, b))) return rc;
    cb->hout_next ^= 1;
    *host = b->pin.p;
    return VAE_OK;
}

int cuda_download_wait(vae_backend *be, const float *host) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda download");
    if (rc) return rc;
    for (int i = 0; i < 2; i++)
        if (cb->hout[i].pin.p == host) {
            rc = cu_host_buf_wait(&cb->hout[i]);
            if (!rc && cb->prof) {
                rc = cu_check(cudaStreamSynchronize(cb->stream), "cuda download", "synchronize");
                cu_prof_flush(cb);
            }
            return rc;
        }
    return vae_fail(VAE_EINVAL, "cuda download: not a transfer buffer of this backend");
}

int cuda_copy(vae_backend *be, void *dst, const void *src, size_t bytes) {
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

int cuda_copy2d(vae_backend *be, void *dst, size_t dst_pitch, const void *src,
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
    } else if (dk == MEM_HOST) { /* what was prefetched of it is stale now (the bus's copy out
                                  * forgets it itself, once its prefetches are read) */
        if (sk == MEM_DEVICE)
            rc = cu_bus_copy_out(cb, dst, dst_pitch, src, src_pitch, row_bytes, rows, &done);
        if (!done) cu_bus_forget(cb, dst, (rows - 1) * dst_pitch + row_bytes);
    } else if (sk == MEM_HOST && dk == MEM_DEVICE) {
        rc = cu_bus_copy_in(cb, dst, dst_pitch, src, src_pitch, row_bytes, rows, &done);
    }
    if (rc == VAE_OK && !done) { /* on the compute stream, after the bus's copies */
        cb->bus.n_direct++;
        if (dk == MEM_HOST || sk == MEM_HOST) cb->bus.bytes_direct += (long long)(row_bytes * rows);
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

int cuda_zero(vae_backend *be, void *dst, size_t bytes) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda zero");
    if (rc || bytes == 0) return rc;
    int ph = cu_prof_begin(cb, CU_P_COPY);
    rc = cu_check(cudaMemsetAsync(dst, 0, bytes, cb->stream), "cuda zero", "cudaMemsetAsync");
    cu_prof_end(cb, ph);
    return rc;
}

int cuda_zero2d(vae_backend *be, void *dst, size_t dst_pitch, size_t row_bytes,
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
