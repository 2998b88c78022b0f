/* cuda_bus.c -- copies between this device and pinned host memory on a second stream, the bus,
 * so that the bus works while the compute stream goes on (strips' slots, host stores).
 *
 * Both directions go through one ring of device blocks, handed out in ring order:
 * - out (cu_bus_copy_out): a kernel on the compute stream packs the rows into a block; the bus
 *   stream copies the block into host memory once the kernel is done, in one contiguous copy
 *   where the host rows are contiguous;
 * - in, ahead (cu_bus_prefetch, a hint from the executor): the bus stream copies a host range
 *   into a block while the compute stream works; a later read whose source lies inside it
 *   (cu_bus_copy_in) waits for that copy alone and reads the block with the copy kernel.
 * Ordering. The bus stream runs its copies in the order of the calls; before each, it waits for
 * the compute stream's position at the call (event `mark`), so it never reads a block or host
 * range before the compute work queued earlier is done with it, nor overwrites a block a read
 * still needs. The compute stream, before it writes a block again, waits for the bus copy of the
 * block's last user; before it copies host memory itself (reads that were not prefetched, copies
 * the bus does not take), it waits for the bus's last copy (cu_bus_wait); sync() waits for the
 * bus stream. A copy into host memory forgets the prefetches of what it overwrites.
 * Two streams (settings.cuda_bus = 2): the prefetches run on a stream of their own, `ahead`, so
 * that a copy in and a copy out cross the host link at once (each way has its own copy engine).
 * The order the single stream gave is then kept by events: a prefetch waits for the copies out
 * still writing the host bytes it reads, and a copy out for the prefetches still reading the
 * bytes it writes (those in the ring: a prefetch evicted by another may still be reading, but
 * nothing reads its block any more); a block taken over waits for the copies of every block it
 * evicts.
 * Not while a graph records: the bus is not part of it (graph_begin and graph_launch wait for it);
 * and only where the run's plan counted the ring (vae_backend.host_copy_on: strips' slots on the
 * host); other host copies go on the compute stream.
 */
#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/base/cuda_host.h"
#include "backends/cuda/kernels/cuda_kernels.h"

#include <string.h>

#include "core/core.h"

enum { BUS_ALIGN = 256 };
#define BUS_MOST (CU_BUS_RING / 4) /* the largest block: room for the ones still in use */

/* The ring a run's plan counted: the default, or room to prefetch a cache in host memory whole
 * while the previous op's copy out drains (plan_offload.c, vae_backend.host_copy_ring). */
size_t cu_bus_ring_wanted(const cuda_backend *cb) {
    const int64_t want = cb->base.host_copy_ring;
    return want > (int64_t)CU_BUS_RING ? (size_t)want : CU_BUS_RING;
}

/* the largest prefetch: a quarter of the default ring, half of a larger one (whose plan
 * counted twice its largest prefetch) */
static size_t most_ahead(const cu_bus *b) {
    return b->ring_bytes > CU_BUS_RING ? b->ring_bytes / 2 : BUS_MOST;
}

static int bus_fail(cuda_backend *cb) {
    cu_bus_destroy(cb);
    cb->bus.off = 1;
    vae_error_clear(); /* an expected fallback: copies on the compute stream, as without a bus */
    return 0;
}

/* The bus stream, its events and ring, made at first use; 0 where there is no bus. */
static int bus_ready(cuda_backend *cb) {
    cu_bus *b = &cb->bus;
    if (cb->recording || !cb->base.host_copy_on) return 0; /* not in a graph, not unplanned */
    const size_t want = cu_bus_ring_wanted(cb);
    if (b->stream && b->ring_bytes >= want) return 1;
    if (b->stream) cu_bus_destroy(cb); /* a larger ring for this plan */
    if (b->off) return 0;
    if (cb->base.limit > 0 && cu_held(cb) + (int64_t)want > cb->base.limit)
        return 0; /* no room now (the plan counted it, so rarely): copies as without a bus */
    b->ring_bytes = want;
    if (cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&b->mark, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&b->last, cudaEventDisableTiming) != cudaSuccess ||
        (b->two && (cudaStreamCreateWithFlags(&b->ahead, cudaStreamNonBlocking) != cudaSuccess ||
                    cudaEventCreateWithFlags(&b->last_ahead, cudaEventDisableTiming) !=
                        cudaSuccess)) ||
        cudaMalloc((void **)&b->ring, want) != cudaSuccess) {
        cudaGetLastError();
        return bus_fail(cb);
    }
    for (int i = 0; i < CU_BUS_BLOCKS; i++)
        if (cudaEventCreateWithFlags(&b->blk[i].done, cudaEventDisableTiming) != cudaSuccess) {
            cudaGetLastError();
            return bus_fail(cb);
        }
    cu_note_peak(cb);
    return 1;
}

void cu_bus_destroy(cuda_backend *cb) {
    cu_bus *b = &cb->bus;
    if (b->stream) cudaStreamSynchronize(b->stream);
    if (b->ahead) cudaStreamSynchronize(b->ahead);
    for (int i = 0; i < CU_BUS_BLOCKS; i++)
        if (b->blk[i].done) cudaEventDestroy(b->blk[i].done);
    if (b->mark) cudaEventDestroy(b->mark);
    if (b->last) cudaEventDestroy(b->last);
    if (b->last_ahead) cudaEventDestroy(b->last_ahead);
    if (b->ring) cudaFree(b->ring);
    if (b->stream) cudaStreamDestroy(b->stream);
    if (b->ahead) cudaStreamDestroy(b->ahead);
    const int off = b->off, two = b->two;
    memset(b, 0, sizeof *b);
    b->off = off, b->two = two;
}

int64_t cu_bus_bytes(const cuda_backend *cb) {
    return cb->bus.ring ? (int64_t)cb->bus.ring_bytes : 0;
}

/* A block of `bytes` at the ring's head; the oldest blocks in its way (and, when the ring wraps,
 * those in the tail it skips) are dropped, and `waiter` waits for their copies (each of them:
 * with two streams the newest's alone does not order the others). */
static int ring_take(cuda_backend *cb, size_t bytes, cudaStream_t waiter,
                     struct cu_bus_block **out) {
    cu_bus *b = &cb->bus;
    bytes = (bytes + BUS_ALIGN - 1) / BUS_ALIGN * BUS_ALIGN;
    const int wrap = b->head + bytes > b->ring_bytes;
    const size_t at = wrap ? 0 : b->head;
    cudaEvent_t evicted = NULL;
    int rc = VAE_OK;
    while (b->count > 0 && rc == VAE_OK) {
        struct cu_bus_block *f = &b->blk[b->first];
        const int in_way = b->count == CU_BUS_BLOCKS || (wrap && f->off >= b->head) ||
                           (f->off < at + bytes && f->off + f->bytes > at);
        if (!in_way) break;
        if (b->two) rc = cu_check(cudaStreamWaitEvent(waiter, f->done, 0), "cuda bus", "wait");
        evicted = f->done;
        b->first = (b->first + 1) % CU_BUS_BLOCKS;
        b->count--;
    }
    /* one stream: its newest copy orders the rest, and the bus stream itself needs no wait */
    if (rc == VAE_OK && evicted && !b->two && waiter != b->stream)
        rc = cu_check(cudaStreamWaitEvent(waiter, evicted, 0), "cuda bus", "wait");
    struct cu_bus_block *blk = &b->blk[(b->first + b->count) % CU_BUS_BLOCKS];
    b->count++;
    blk->off = at;
    blk->bytes = bytes;
    blk->host = blk->out_lo = blk->out_hi = NULL;
    b->head = at + bytes;
    *out = blk;
    return rc;
}

/* Two streams: `waiter` waits for the blocks' copies that touch host bytes [lo, hi) the other
 * way: the copies out writing them (a prefetch about to read them: readers = 0) or the
 * prefetches reading them (a copy out about to write them: readers = 1). */
static int wait_host_users(cuda_backend *cb, cudaStream_t waiter, const char *lo, const char *hi,
                           int readers) {
    cu_bus *b = &cb->bus;
    int rc = VAE_OK;
    for (int k = 0; b->two && k < b->count && rc == VAE_OK; k++) {
        const struct cu_bus_block *blk = &b->blk[(b->first + k) % CU_BUS_BLOCKS];
        const char *l = readers ? blk->host : blk->out_lo;
        const char *h = readers ? (blk->host ? blk->host + blk->bytes : NULL) : blk->out_hi;
        if (l && l < hi && h > lo)
            rc = cu_check(cudaStreamWaitEvent(waiter, blk->done, 0), "cuda bus", "wait");
    }
    return rc;
}

/* A bus stream waits for the compute stream's work queued so far. */
static int bus_follow(cuda_backend *cb, cudaStream_t bus) {
    cu_bus *b = &cb->bus;
    int rc = cu_check(cudaEventRecord(b->mark, cb->stream), "cuda bus", "cudaEventRecord");
    if (rc == VAE_OK)
        rc = cu_check(cudaStreamWaitEvent(bus, b->mark, 0), "cuda bus", "cudaStreamWaitEvent");
    return rc;
}

/* After a copy on bus stream `bus` into or out of blk. */
static int bus_done(cuda_backend *cb, cudaStream_t bus, struct cu_bus_block *blk) {
    cu_bus *b = &cb->bus;
    int rc = cu_check(cudaEventRecord(blk->done, bus), "cuda bus", "cudaEventRecord");
    if (rc == VAE_OK)
        rc = cu_check(cudaEventRecord(bus == b->ahead ? b->last_ahead : b->last, bus), "cuda bus",
                      "cudaEventRecord");
    if (rc == VAE_OK) b->pending = b->unwaited = 1;
    return rc;
}

void cu_bus_forget(cuda_backend *cb, const void *p, size_t bytes) {
    cu_bus *b = &cb->bus;
    if (!p && b->ahead) /* host blocks handed out again: no copy out overtakes a prefetch of them */
        if (cudaStreamWaitEvent(b->stream, b->last_ahead, 0) != cudaSuccess) cudaGetLastError();
    const char *lo = p, *hi = lo + bytes;
    for (int k = 0; k < b->count; k++) {
        struct cu_bus_block *blk = &b->blk[(b->first + k) % CU_BUS_BLOCKS];
        if (blk->host && (!p || (blk->host < hi && blk->host + blk->bytes > lo))) blk->host = NULL;
    }
}

int cu_bus_copy_out(cuda_backend *cb, void *dst, size_t dst_pitch, const void *src,
                    size_t src_pitch, size_t row_bytes, size_t rows, int *done) {
    *done = 0;
    if (row_bytes > BUS_MOST || !bus_ready(cb)) return VAE_OK;
    cu_bus *b = &cb->bus;
    const size_t per = BUS_MOST / row_bytes; /* rows a block */
    const char *lo = dst, *hi = lo + (rows - 1) * dst_pitch + row_bytes;
    /* the prefetches still reading these bytes finish first; then they are stale */
    int rc = wait_host_users(cb, b->stream, lo, hi, 1);
    cu_bus_forget(cb, dst, (size_t)(hi - lo));
    for (size_t r = 0; r < rows && rc == VAE_OK; r += per) {
        const size_t n = rows - r < per ? rows - r : per;
        struct cu_bus_block *blk = NULL;
        /* (the evicted blocks' bus copies may still read or write the space) */
        rc = ring_take(cb, n * row_bytes, cb->stream, &blk);
        if (rc == VAE_OK)
            rc = cu_check(cuk_copy2d(cb->stream, b->ring + blk->off, row_bytes,
                                     (const char *)src + r * src_pitch, src_pitch, row_bytes, n),
                          "cuda bus", "staging kernel");
        if (rc == VAE_OK) rc = bus_follow(cb, b->stream);
        if (rc == VAE_OK)
            rc = cu_check(cudaMemcpy2DAsync((char *)dst + r * dst_pitch, dst_pitch,
                                            b->ring + blk->off, row_bytes, row_bytes, n,
                                            cudaMemcpyDeviceToHost, b->stream),
                          "cuda bus", "cudaMemcpy2DAsync");
        if (rc == VAE_OK) {
            blk->out_lo = (const char *)dst + r * dst_pitch;
            blk->out_hi = blk->out_lo + (n - 1) * dst_pitch + row_bytes;
            rc = bus_done(cb, b->stream, blk);
        }
    }
    if (rc == VAE_OK) {
        b->n_out++;
        b->bytes_out += (long long)(row_bytes * rows);
        *done = 1;
    }
    return rc;
}

int cu_bus_prefetch(vae_backend *be, const void *host, size_t bytes) {
    cuda_backend *cb = cu_be(be);
    int rc = cu_enter(cb, "cuda prefetch");
    if (rc || bytes == 0 || !bus_ready(cb) || bytes > most_ahead(&cb->bus)) return rc;
    cu_bus *b = &cb->bus;
    for (int k = 0; k < b->count; k++) { /* already on its way */
        const struct cu_bus_block *blk = &b->blk[(b->first + k) % CU_BUS_BLOCKS];
        if (blk->host == host && blk->bytes >= bytes) return VAE_OK;
    }
    cudaStream_t bus = b->ahead ? b->ahead : b->stream;
    /* the copies out still writing these bytes finish first (one stream: its order) */
    rc = wait_host_users(cb, bus, host, (const char *)host + bytes, 0);
    struct cu_bus_block *blk = NULL;
    /* one stream: the evicted blocks' copies came before on it, and the compute stream's reads
     * of them before the mark below; two: the prefetch stream waits for the evicted copies */
    if (rc == VAE_OK) rc = ring_take(cb, bytes, bus, &blk);
    if (rc == VAE_OK) rc = bus_follow(cb, bus);
    if (rc == VAE_OK)
        rc = cu_check(
            cudaMemcpyAsync(b->ring + blk->off, host, bytes, cudaMemcpyHostToDevice, bus),
            "cuda prefetch", "cudaMemcpyAsync");
    if (rc == VAE_OK) rc = bus_done(cb, bus, blk);
    if (rc == VAE_OK) {
        blk->host = host;
        blk->bytes = bytes; /* the range it holds (its space stays rounded in the ring) */
        b->n_ahead++;
        b->bytes_ahead += (long long)bytes;
    }
    return rc;
}

int cu_bus_copy_in(cuda_backend *cb, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                   size_t row_bytes, size_t rows, int *done) {
    *done = 0;
    cu_bus *b = &cb->bus;
    if (!b->stream || cb->recording) return VAE_OK;
    const char *lo = src, *hi = lo + (rows - 1) * src_pitch + row_bytes;
    for (int k = b->count - 1; k >= 0; k--) { /* the newest first */
        const struct cu_bus_block *blk = &b->blk[(b->first + k) % CU_BUS_BLOCKS];
        if (!blk->host || lo < blk->host || hi > blk->host + blk->bytes) continue;
        int rc = cu_check(cudaStreamWaitEvent(cb->stream, blk->done, 0), "cuda bus", "wait");
        if (rc == VAE_OK)
            rc = cu_check(cuk_copy2d(cb->stream, dst, dst_pitch,
                                     b->ring + blk->off + (size_t)(lo - blk->host), src_pitch,
                                     row_bytes, rows),
                          "cuda bus", "copy kernel");
        if (rc == VAE_OK) {
            b->n_hit++;
            *done = 1;
        }
        return rc;
    }
    return VAE_OK;
}

int cu_bus_wait(cuda_backend *cb) {
    cu_bus *b = &cb->bus;
    if (!b->unwaited) return VAE_OK;
    int rc =
        cu_check(cudaStreamWaitEvent(cb->stream, b->last, 0), "cuda bus", "cudaStreamWaitEvent");
    if (rc == VAE_OK && b->ahead)
        rc = cu_check(cudaStreamWaitEvent(cb->stream, b->last_ahead, 0), "cuda bus",
                      "cudaStreamWaitEvent");
    if (rc == VAE_OK) b->unwaited = 0;
    return rc;
}

int cu_bus_sync(cuda_backend *cb) {
    cu_bus *b = &cb->bus;
    if (!b->pending) return VAE_OK;
    int rc = cu_check(cudaStreamSynchronize(b->stream), "cuda bus", "cudaStreamSynchronize");
    if (rc == VAE_OK && b->ahead)
        rc = cu_check(cudaStreamSynchronize(b->ahead), "cuda bus", "cudaStreamSynchronize");
    if (rc == VAE_OK) b->pending = b->unwaited = 0;
    return rc;
}
