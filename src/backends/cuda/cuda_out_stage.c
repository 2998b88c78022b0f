/* cuda_out_stage.c -- the output's way to the host off the compute stream (vtbl download_stage,
 * download_staged).
 *
 * Without it, each output piece is converted to planar float32 in the scratch area and copied
 * into pinned host memory on the compute stream, in the runner's loop that waits for each piece:
 * the next step is queued only once the last copies are done, and the GPU computes nothing while
 * they run (~52 GB/s: 17 ms of an 81-frame 720x1280 decode's 0.9 GB). With it, a step's output
 * chunk is converted at once into a device stage (download_stage, on the compute stream, right
 * after the step), and the runner asks for its pieces' copies (download_staged, on a stream of
 * their own) only after it has queued the next step, so that they run beside it.
 *
 * Ordering. Before a chunk is converted, the compute stream waits for the copies of the chunk
 * before (event `copied`); the copies wait for the conversion (event `ready`, recorded once after
 * it); a host buffer's event (cu_host_buf.ev) is recorded after its copy on the copy stream, so
 * download_wait and the buffer's next reserve wait for the copy itself.
 * Memory: the plan counted the chunk (vae_plan_request.stage_out): the stage is part of
 * bytes_in_use, grown for a larger chunk, given back at the next run's start. Where it cannot be
 * had (over the budget, a stream that cannot be made, a graph being recorded, VAE_CUDA_BUS=0),
 * download_stage says so (0 pieces) and the runner downloads as without it: an expected
 * fallback, no error left behind.
 */
#include "backends/cuda/cuda_internal.h"

#include <string.h>

#include "core/core.h"

enum { OUT_STAGE_ALIGN = 256 };

/* The stage given back (the compute stream first waits for the copies that read it). */
void cu_out_stage_release(cuda_backend *cb) {
    cu_out_stage *q = &cb->out;
    q->n = 0;
    if (!q->ring) return;
    if (q->copied) cudaStreamWaitEvent(cb->stream, q->copied, 0);
    cb->base.bytes_in_use -= (int64_t)cu_pool_free(&cb->pool, q->ring);
    q->ring = NULL;
    q->cap = 0;
}

void cu_out_stage_destroy(cuda_backend *cb) {
    cu_out_stage *q = &cb->out;
    if (q->stream) cudaStreamSynchronize(q->stream);
    cu_out_stage_release(cb);
    if (q->ready) cudaEventDestroy(q->ready);
    if (q->copied) cudaEventDestroy(q->copied);
    if (q->stream) cudaStreamDestroy(q->stream);
    memset(q, 0, sizeof *q);
}

/* The copy stream and its events, made at first use; 0 where they cannot be. */
static int out_stage_stream(cuda_backend *cb) {
    cu_out_stage *q = &cb->out;
    if (q->stream) return 1;
    if (q->never) return 0;
    if (cudaStreamCreateWithFlags(&q->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&q->ready, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&q->copied, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        cu_out_stage_destroy(cb);
        q->never = 1;
        return 0;
    }
    return 1;
}

/* A stage of `bytes`, the old one given back when smaller; 0 where there is no room. */
static int out_stage_grow(cuda_backend *cb, size_t bytes) {
    cu_out_stage *q = &cb->out;
    if (bytes <= q->cap) return 1;
    cu_out_stage_release(cb);
    const size_t want = cu_pool_round(bytes);
    if (cb->base.limit > 0 && cu_held(cb) + (int64_t)want > cb->base.limit) return 0;
    size_t got = 0;
    cudaError_t e;
    if (!(q->ring = cu_pool_alloc(&cb->pool, bytes, &got, &e))) {
        cudaGetLastError();
        return 0;
    }
    q->cap = bytes;
    cb->base.bytes_in_use += (int64_t)got;
    cu_note_peak(cb);
    return 1;
}

/* bytes of piece k's place in the stage (256-byte aligned) */
static size_t piece_place(const cu_out_stage *q, int k) {
    const size_t full = (size_t)q->piece * q->frame;
    return k * ((full + OUT_STAGE_ALIGN - 1) / OUT_STAGE_ALIGN * OUT_STAGE_ALIGN);
}

int cu_out_stage_put(vae_backend *be, const void *src, int t, int h, int w, int c, int piece,
                     int *pieces) {
    cuda_backend *cb = cu_be(be);
    cu_out_stage *q = &cb->out;
    int rc = cu_enter(cb, "cuda download");
    *pieces = 0;
    q->n = 0;
    if (rc || t <= 0 || piece <= 0) return rc;
    q->t = t, q->piece = piece, q->c = c, q->hw = (size_t)h * w;
    q->frame = q->hw * c * sizeof(float);
    const int n = (t + piece - 1) / piece;
    if (cb->recording || !out_stage_stream(cb) ||
        !out_stage_grow(cb, piece_place(q, n - 1) + (size_t)(t - (n - 1) * piece) * q->frame))
        return VAE_OK; /* the runner downloads as without a stage */
    const size_t in_frame = q->hw * c * be->elem_size;
    int ph = cu_prof_begin(cb, CU_P_DOWNLOAD);
    rc = cu_check(cudaStreamWaitEvent(cb->stream, q->copied, 0), "cuda download", "wait");
    for (int k = 0; k < n && rc == VAE_OK; k++) {
        const int f = k * piece, m = t - f < piece ? t - f : piece;
        rc = cu_check(cuk_act_to_planar(cb->stream, be->dtype, (const char *)src + f * in_frame,
                                        (float *)(q->ring + piece_place(q, k)), (int64_t)m * q->hw,
                                        c),
                      "cuda download", "layout");
    }
    if (rc == VAE_OK)
        rc = cu_check(cudaEventRecord(q->ready, cb->stream), "cuda download", "cudaEventRecord");
    cu_prof_end(cb, ph);
    if (rc == VAE_OK) *pieces = q->n = n;
    return rc;
}

int cu_out_stage_copy(cuda_backend *cb, int k, cu_host_buf *b) {
    cu_out_stage *q = &cb->out;
    if (k < 0 || k >= q->n) return vae_fail(VAE_EINVAL, "cuda download: no staged piece %d", k);
    const int f = k * q->piece, m = q->t - f < q->piece ? q->t - f : q->piece;
    const size_t bytes = (size_t)m * q->frame;
    int rc = cu_host_buf_reserve(cb, b, bytes);
    if (!rc) rc = cu_check(cudaStreamWaitEvent(q->stream, q->ready, 0), "cuda download", "wait");
    if (!rc)
        rc = cu_check(cudaMemcpyAsync(b->pin.p, q->ring + piece_place(q, k), bytes,
                                      cudaMemcpyDeviceToHost, q->stream),
                      "cuda download", "cudaMemcpyAsync");
    if (!rc) rc = cu_check(cudaEventRecord(b->ev, q->stream), "cuda download", "cudaEventRecord");
    if (!rc)
        rc = cu_check(cudaEventRecord(q->copied, q->stream), "cuda download", "cudaEventRecord");
    b->pending = rc == VAE_OK;
    return rc;
}
