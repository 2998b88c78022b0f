/* cuda_io_stage.c -- the user's frames to and from the host off the compute stream: device stages
 * whose copies run on a stream of their own beside the steps' work (upload_planar; vtbl
 * download_stage, download_staged).
 *
 * Without them, the input chunk and each output piece pass through the scratch area as planar
 * float32, copied on the compute stream at ~52 GB/s while the GPU computes nothing: 17 ms of an
 * 81-frame 720x1280 decode's 0.9 GB of output, 7.5 ms of an 81-frame 480x832 encode's input; and
 * the runner waited for each output piece before it queued the next step.
 * - Output: a step's output chunk is converted at once into the output stage (download_stage, on
 *   the compute stream, right after the step); the runner asks for its pieces' copies
 *   (download_staged) once it has queued the next step, so that they run beside it.
 * - Input: the runner uploads step k + 1's chunk once step k is queued; its copy into the input
 *   stage starts at once on the copy stream, and the compute stream converts it into the input
 *   buffer after step k.
 *
 * Ordering (events): the compute stream converts an output chunk after the copies of the chunk
 * before (`out_copied`); those copies wait for their conversion (`out_ready`, recorded once after
 * it). An input copy waits until the input before it was converted out of the stage (`in_used`);
 * its conversion waits for it (`in_copied`). A host buffer's event (cu_host_buf.ev) is recorded
 * after its copy on the copy stream, so download_wait and the buffer's next reserve wait for the
 * copy itself.
 * Memory: the plan counted both stages (vae_plan_request.stage_io): they are part of
 * bytes_in_use, grown for a larger chunk, given back at the next run's start. Where a stage
 * cannot be had (over the budget, a stream that cannot be made, a graph being recorded,
 * VAE_CUDA_BUS=0), the frames go through the scratch area as without it: an expected fallback,
 * no error left behind.
 */
#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/base/cuda_host.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/ops/cuda_ops.h"

#include <string.h>

#include "core/core.h"

enum { IO_STAGE_ALIGN = 256 };

/* A stage given back (the compute stream first waits for the copies that use it). */
static void stage_release(cuda_backend *cb, cu_io_buf *s, cudaEvent_t last_copy) {
    if (!s->p) return;
    if (last_copy) cudaStreamWaitEvent(cb->stream, last_copy, 0);
    cb->base.bytes_in_use -= (int64_t)cu_pool_free(&cb->pool, s->p);
    s->p = NULL;
    s->cap = 0;
}

void cu_io_stage_release(cuda_backend *cb) {
    cu_io_stage *q = &cb->io;
    q->n = 0;
    stage_release(cb, &q->out, q->out_copied);
    stage_release(cb, &q->in, q->in_copied);
}

void cu_io_stage_destroy(cuda_backend *cb) {
    cu_io_stage *q = &cb->io;
    if (q->stream) cudaStreamSynchronize(q->stream);
    cu_io_stage_release(cb);
    cudaEvent_t *ev[4] = {&q->out_ready, &q->out_copied, &q->in_copied, &q->in_used};
    for (int i = 0; i < 4; i++)
        if (*ev[i]) cudaEventDestroy(*ev[i]);
    if (q->stream) cudaStreamDestroy(q->stream);
    const int never = q->never;
    memset(q, 0, sizeof *q);
    q->never = never;
}

/* The copy stream and its events, made at first use; 0 where they cannot be, and while a graph
 * records (a capture may not wait for work outside it). */
static int io_stream(cuda_backend *cb) {
    cu_io_stage *q = &cb->io;
    if (cb->recording) return 0;
    if (q->stream) return 1;
    if (q->never) return 0;
    cudaEvent_t *ev[4] = {&q->out_ready, &q->out_copied, &q->in_copied, &q->in_used};
    int ok = cudaStreamCreateWithFlags(&q->stream, cudaStreamNonBlocking) == cudaSuccess;
    for (int i = 0; i < 4 && ok; i++)
        ok = cudaEventCreateWithFlags(ev[i], cudaEventDisableTiming) == cudaSuccess;
    if (!ok) {
        cudaGetLastError();
        cu_io_stage_destroy(cb);
        q->never = 1;
    }
    return ok;
}

/* Stage s of at least `bytes`, the old one given back when smaller; 0 where there is no room. */
static int stage_grow(cuda_backend *cb, cu_io_buf *s, cudaEvent_t last_copy, size_t bytes) {
    if (bytes <= s->cap) return 1;
    stage_release(cb, s, last_copy);
    const size_t want = cu_pool_round(bytes);
    if (cb->base.limit > 0 && cu_held(cb) + (int64_t)want > cb->base.limit) return 0;
    size_t got = 0;
    cudaError_t e;
    if (!(s->p = cu_pool_alloc(&cb->pool, bytes, &got, &e))) {
        cudaGetLastError();
        return 0;
    }
    s->cap = bytes;
    cb->base.bytes_in_use += (int64_t)got;
    cu_note_peak(cb);
    return 1;
}

/* ---- input ----------------------------------------------------------------------------------- */
int cu_io_upload(cuda_backend *cb, void *dst, const float *src, int64_t n, int c, cu_host_buf *b,
                 int *done) {
    cu_io_stage *q = &cb->io;
    const size_t bytes = (size_t)(n * c) * sizeof(float);
    *done = 0;
    if (!io_stream(cb) || !stage_grow(cb, &q->in, q->in_copied, bytes))
        return VAE_OK; /* through the scratch area, on the compute stream */
    int rc = cu_check(cudaStreamWaitEvent(q->stream, q->in_used, 0), "cuda upload", "wait");
    if (!rc)
        rc = cu_check(cudaMemcpyAsync(q->in.p, src, bytes, cudaMemcpyHostToDevice, q->stream),
                      "cuda upload", "cudaMemcpyAsync");
    if (!rc && b) rc = cu_host_buf_queued(b, q->stream);
    if (!rc)
        rc = cu_check(cudaEventRecord(q->in_copied, q->stream), "cuda upload", "cudaEventRecord");
    if (!rc) rc = cu_check(cudaStreamWaitEvent(cb->stream, q->in_copied, 0), "cuda upload", "wait");
    if (!rc)
        rc = cu_check(
            cuk_planar_to_act(cb->stream, cb->base.dtype, (const float *)q->in.p, dst, n, c),
            "cuda upload", "layout");
    if (!rc)
        rc = cu_check(cudaEventRecord(q->in_used, cb->stream), "cuda upload", "cudaEventRecord");
    *done = rc == VAE_OK;
    return rc;
}

/* ---- output ---------------------------------------------------------------------------------- */
/* bytes of piece k's place in the output stage (256-byte aligned) */
static size_t piece_place(const cu_io_stage *q, int k) {
    const size_t full = (size_t)q->piece * q->frame;
    return k * ((full + IO_STAGE_ALIGN - 1) / IO_STAGE_ALIGN * IO_STAGE_ALIGN);
}

int cu_io_stage_put(vae_backend *be, const void *src, int t, int h, int w, int c, int piece,
                    int *pieces) {
    cuda_backend *cb = cu_be(be);
    cu_io_stage *q = &cb->io;
    int rc = cu_enter(cb, "cuda download");
    *pieces = 0;
    q->n = 0;
    if (rc || t <= 0 || piece <= 0) return rc;
    const size_t hw = (size_t)h * w;
    q->t = t, q->piece = piece, q->frame = hw * c * sizeof(float);
    const int n = (t + piece - 1) / piece;
    if (!io_stream(cb) ||
        !stage_grow(cb, &q->out, q->out_copied,
                    piece_place(q, n - 1) + (size_t)(t - (n - 1) * piece) * q->frame))
        return VAE_OK; /* the runner downloads as without a stage */
    const size_t in_frame = hw * c * be->elem_size;
    int ph = cu_prof_begin(cb, CU_P_DOWNLOAD);
    rc = cu_check(cudaStreamWaitEvent(cb->stream, q->out_copied, 0), "cuda download", "wait");
    for (int k = 0; k < n && rc == VAE_OK; k++) {
        const int f = k * piece, m = t - f < piece ? t - f : piece;
        rc =
            cu_check(cuk_act_to_planar(cb->stream, be->dtype, (const char *)src + f * in_frame,
                                       (float *)(q->out.p + piece_place(q, k)), (int64_t)m * hw, c),
                     "cuda download", "layout");
    }
    if (rc == VAE_OK)
        rc =
            cu_check(cudaEventRecord(q->out_ready, cb->stream), "cuda download", "cudaEventRecord");
    cu_prof_end(cb, ph);
    if (rc == VAE_OK) *pieces = q->n = n;
    return rc;
}

int cu_io_stage_copy(cuda_backend *cb, int k, cu_host_buf *b) {
    cu_io_stage *q = &cb->io;
    if (k < 0 || k >= q->n) return vae_fail(VAE_EINVAL, "cuda download: no staged piece %d", k);
    const int f = k * q->piece, m = q->t - f < q->piece ? q->t - f : q->piece;
    const size_t bytes = (size_t)m * q->frame;
    int rc = cu_host_buf_reserve(cb, b, bytes);
    if (!rc)
        rc = cu_check(cudaStreamWaitEvent(q->stream, q->out_ready, 0), "cuda download", "wait");
    if (!rc)
        rc = cu_check(cudaMemcpyAsync(b->pin.p, q->out.p + piece_place(q, k), bytes,
                                      cudaMemcpyDeviceToHost, q->stream),
                      "cuda download", "cudaMemcpyAsync");
    if (!rc) rc = cu_host_buf_queued(b, q->stream);
    if (!rc)
        rc =
            cu_check(cudaEventRecord(q->out_copied, q->stream), "cuda download", "cudaEventRecord");
    return rc;
}
