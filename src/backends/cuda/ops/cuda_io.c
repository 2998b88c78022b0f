/* cuda_io.c -- tensors the caller holds on the device, and the caller's stream (vtbl entries).
 *
 * A host framework (PyTorch) hands the engine device tensors on its own stream. The engine keeps
 * its own non-blocking stream (graphs cannot be recorded on the legacy default stream that
 * framework code often runs on) and orders itself against the caller's with events: its work
 * waits for what the caller queued before the call, and the caller's later work waits for it.
 */
#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/ops/cuda_ops.h"

static cuk_view to_cuk(const vae_io_view *v) {
    cuk_view k = {v->data, (int)v->dtype, v->c, v->t, v->h, v->w, v->sc, v->st, v->sh, v->sw};
    return k;
}

int cu_view_finite(vae_backend *be, const vae_io_view *v, int64_t *first_bad) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "input check");
    if (rc) return rc;
    *first_bad = -1;
    unsigned long long *flag = cu_scratch(cb, sizeof *flag, "input check"), host = ~0ull;
    if (!flag) return VAE_ENOMEM;
    const cuk_view k = to_cuk(v);
    rc = cu_check(cudaMemsetAsync(flag, 0xFF, sizeof *flag, cb->stream), "input check",
                  "cudaMemsetAsync"); /* ~0: none found */
    if (!rc) rc = cu_check(cuk_view_finite(cb->stream, &k, flag), "input check", "kernel");
    if (!rc)
        rc = cu_check(cudaMemcpyAsync(&host, flag, sizeof host, cudaMemcpyDeviceToHost, cb->stream),
                      "input check", "cudaMemcpyAsync");
    if (!rc) rc = cu_check(cudaStreamSynchronize(cb->stream), "input check", "synchronize");
    if (!rc && host != ~0ull) *first_bad = (int64_t)host;
    return rc;
}

int cu_view_import(vae_backend *be, void *dst, const vae_io_view *src, int f, int n, int y0,
                   int rows, int x0, int cols) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda input");
    if (rc) return rc;
    if (f < 0 || n < 0 || f + n > src->t || y0 < 0 || y0 + rows > src->h || x0 < 0 ||
        x0 + cols > src->w)
        return vae_fail(VAE_EINVAL, "internal: input window outside the tensor");
    const cuk_view k = to_cuk(src);
    int ph = cu_prof_begin(cb, CU_P_UPLOAD);
    rc = cu_check(cuk_view_import(cb->stream, be->dtype, &k, dst, f, n, y0, rows, x0, cols),
                  "cuda input", "kernel");
    cu_prof_end(cb, ph);
    return rc;
}

int cu_view_export(vae_backend *be, const void *src, int t, int h, int w, int sy, int sx, int rows,
                   int cols, const vae_io_view *dst, int f, int y0, int x0) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda output");
    if (rc) return rc;
    if (f < 0 || f + t > dst->t || y0 < 0 || y0 + rows > dst->h || x0 < 0 || x0 + cols > dst->w ||
        sy < 0 || sy + rows > h || sx < 0 || sx + cols > w)
        return vae_fail(VAE_EINVAL, "internal: output window outside the tensor");
    const cuk_view k = to_cuk(dst);
    int ph = cu_prof_begin(cb, CU_P_DOWNLOAD);
    rc = cu_check(cuk_view_export(cb->stream, be->dtype, src, t, h, w, sy, sx, rows, cols, &k, f,
                                  y0, x0),
                  "cuda output", "kernel");
    cu_prof_end(cb, ph);
    return rc;
}

/* A device group's lane writes its tiles into the caller's output in place when the output is
 * on its GPU or on one it can reach directly (peer access, e.g. over NVLink, enabled here). */
int cu_view_reach(vae_backend *be, const vae_io_view *v) {
    cuda_backend *cb = cu_be(be);
    if (cu_enter(cb, "cuda output")) return 0;
    struct cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, v->data) != cudaSuccess || at.type != cudaMemoryTypeDevice) {
        cudaGetLastError(); /* not device memory: not reachable (an expected answer) */
        return 0;
    }
    if (at.device == cb->device) return 1;
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, cb->device, at.device) != cudaSuccess || !can) {
        cudaGetLastError();
        return 0;
    }
    const cudaError_t e = cudaDeviceEnablePeerAccess(at.device, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
    return e == cudaSuccess || e == cudaErrorPeerAccessAlreadyEnabled;
}

int cu_stream_join(vae_backend *be, void *stream, int after) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "stream order");
    if (rc) return rc;
    cudaStream_t theirs = (cudaStream_t)stream;
    if (theirs == cb->stream) return VAE_OK;
    cudaEvent_t ev;
    if ((rc = cu_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "stream order",
                       "cudaEventCreate")))
        return rc;
    cudaStream_t from = after ? cb->stream : theirs, to = after ? theirs : cb->stream;
    rc = cu_check(cudaEventRecord(ev, from), "stream order", "cudaEventRecord");
    if (!rc) rc = cu_check(cudaStreamWaitEvent(to, ev, 0), "stream order", "cudaStreamWaitEvent");
    cudaEventDestroy(ev); /* released once the wait is resolved */
    return rc;
}
