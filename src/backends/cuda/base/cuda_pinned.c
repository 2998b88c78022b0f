/* cuda_pinned.c -- pinned host memory: the transfer buffers, the host stores and the ring that
 * weights go to the device through (cuda_host.h).
 *
 * Pinning is what a cold first call waits for (cudaHostAlloc: ~0.75 ms per MiB on the H100's
 * host, mostly the kernel faulting in and locking 4 KiB pages). Blocks are therefore mapped with
 * transparent huge pages where the kernel gives them and then registered (cudaHostRegister:
 * ~0.35 ms per MiB there, 2 MiB pages), with cudaHostAlloc as the fallback.
 */
#define _DEFAULT_SOURCE
#include <string.h>

#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/base/cuda_host.h"
#include "core/dtype.h"
#include "platform/platform.h"

enum { HUGE_PAGE = 2 << 20 };

/* ---- blocks ------------------------------------------------------------------------------ */
cudaError_t cu_pin_alloc(cuda_backend *cb, cu_pin *b, size_t bytes, int portable) {
    memset(b, 0, sizeof *b);
    if (bytes == 0) bytes = 1;
    const double t0 = cu_now();
    const size_t len = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *p = vae_plat_pages_alloc(len); /* huge pages where the kernel gives them */
    cudaError_t e = cudaErrorMemoryAllocation;
    if (p) {
        e = cudaHostRegister(p, len, portable ? cudaHostRegisterPortable : 0);
        if (e == cudaSuccess) {
            b->p = p, b->bytes = len, b->mapped = 1;
        } else {
            cudaGetLastError(); /* an expected fallback */
            vae_plat_pages_free(p, len);
        }
    }
    if (!b->p) {
        e = cudaHostAlloc(&b->p, bytes, portable ? cudaHostAllocPortable : cudaHostAllocDefault);
        if (e == cudaSuccess)
            b->bytes = bytes;
        else
            b->p = NULL;
    }
    cb->host_s[CU_H_PINNED] += cu_now() - t0;
    if (e != cudaSuccess) cudaGetLastError(); /* the caller reports it, or falls back */
    return e;
}

void cu_pin_free(cu_pin *b) {
    if (!b->p) return;
    if (b->mapped) {
        cudaHostUnregister(b->p);
        vae_plat_pages_free(b->p, b->bytes);
    } else {
        cudaFreeHost(b->p);
    }
    memset(b, 0, sizeof *b);
}

/* ---- transfer buffers (pinned, used in turn; ev marks the end of a buffer's last copy) ---- */
int cu_host_buf_wait(cu_host_buf *b) {
    if (!b->pending) return VAE_OK;
    b->pending = 0;
    return cu_check(cudaEventSynchronize(b->ev), "cuda transfer", "cudaEventSynchronize");
}

int cu_host_buf_reserve(cuda_backend *cb, cu_host_buf *b, size_t bytes) {
    int rc = cu_host_buf_wait(b);
    if (rc || bytes <= b->pin.bytes) return rc;
    if (!b->ev && (rc = cu_check(cudaEventCreateWithFlags(&b->ev, cudaEventDisableTiming),
                                 "cuda transfer", "cudaEventCreate")))
        return rc;
    cu_pin_free(&b->pin);
    return cu_check(cu_pin_alloc(cb, &b->pin, bytes + bytes / 4, 0), "cuda transfer",
                    "pinning a host buffer");
}

/* After a copy from or into b was queued on `stream`: the next reserve of b waits for it. */
int cu_host_buf_queued(cu_host_buf *b, cudaStream_t stream) {
    int rc = cu_check(cudaEventRecord(b->ev, stream), "cuda transfer", "cudaEventRecord");
    b->pending = rc == VAE_OK;
    return rc;
}

void cu_host_bufs_free(cuda_backend *cb) {
    cu_host_buf *all[6] = {&cb->hin[0],  &cb->hin[1],   &cb->hout[0],
                           &cb->hout[1], &cb->wring[0], &cb->wring[1]};
    for (int i = 0; i < 6; i++) {
        cu_pin_free(&all[i]->pin);
        if (all[i]->ev) cudaEventDestroy(all[i]->ev);
        memset(all[i], 0, sizeof *all[i]);
    }
}

/* ---- parameters: converted into the ring, copied from there ------------------------------- */
/* Pieces of at most this many bytes: the ring stays small (it is pinned once per backend), and
 * converting one piece overlaps the copy of the one before. */
enum { RING_PIECE = 4 << 20 };

void cu_params_convert(void *dst, const float *src, size_t n, vae_dtype dt) {
    if (dt == VAE_DTYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    uint16_t *d = dst;
    const int bf16 = dt == VAE_DTYPE_BF16;
#pragma omp parallel for schedule(static) if (n >= ((size_t)1 << 18))
    for (size_t i = 0; i < n; i++)
        d[i] = bf16 ? vae_f32_to_bf16(src[i]) : vae_f32_to_f16(src[i]);
}

int cu_ring_upload(cuda_backend *cb, void *dst, const float *src, size_t n, vae_dtype dt,
                   const char *who) {
    const int refused = cu_upload_refused(cb, who);
    if (refused) return refused;
    const size_t es = dt == VAE_DTYPE_F32 ? 4 : 2, per = RING_PIECE / es;
    for (size_t at = 0; at < n; at += per) {
        const size_t k = n - at < per ? n - at : per;
        cu_host_buf *b = &cb->wring[cb->wring_next];
        int rc = cu_host_buf_reserve(cb, b, RING_PIECE);
        if (rc) return rc;
        cu_params_convert(b->pin.p, src + at, k, dt);
        rc = cu_check(cudaMemcpyAsync((char *)dst + at * es, b->pin.p, k * es,
                                      cudaMemcpyHostToDevice, cb->stream),
                      who, "uploading parameters");
        if (rc == VAE_OK) rc = cu_host_buf_queued(b, cb->stream);
        if (rc) return rc;
        cb->wring_next ^= 1;
    }
    return VAE_OK;
}

/* ---- host stores: pinned blocks kept for the next call (pinning gigabytes takes a while); a
 * block is given back only after the stream has finished with it ---- */
/* Before a pinned store block is freed: no copy into it is left on either stream, and no
 * prefetch of it is kept. */
static void stores_idle(cuda_backend *cb) {
    cudaStreamSynchronize(cb->stream);
    cu_bus_sync(cb);
    cu_bus_forget(cb, NULL, 0);
}

void cu_stores_release(cuda_backend *cb, int all) {
    int synced = 0;
    for (int i = 0; i < CU_PINNED_BLOCKS; i++) {
        struct cu_pinned *b = &cb->pinned[i];
        if (!b->pin.p || (b->used && !all)) continue;
        if (!synced++) stores_idle(cb);
        cu_pin_free(&b->pin);
        b->used = 0;
    }
}

void *cu_store_alloc(vae_backend *be, size_t bytes) {
    cuda_backend *cb = cu_be(be);
    if (cu_enter(cb, "cuda host store")) return NULL;
    struct cu_pinned *pick = NULL;
    for (int i = 0; i < CU_PINNED_BLOCKS && !pick; i++) /* a kept block that is large enough */
        if (!cb->pinned[i].used && cb->pinned[i].pin.bytes >= bytes) pick = &cb->pinned[i];
    /* else a free slot, its old block given back */
    for (int i = 0; i < CU_PINNED_BLOCKS && !pick; i++)
        if (!cb->pinned[i].used) {
            pick = &cb->pinned[i];
            if (pick->pin.p) {
                stores_idle(cb);
                cu_pin_free(&pick->pin);
            }
            /* portable: the devices of a group copy into the same store */
            if (cu_pin_alloc(cb, &pick->pin, bytes, 1) != cudaSuccess)
                return NULL; /* an expected fallback: the caller keeps a pageable store */
        }
    if (!pick) return NULL;
    pick->used = 1;
    return pick->pin.p;
}

void cu_store_free(vae_backend *be, void *p) {
    cuda_backend *cb = cu_be(be);
    cu_bus_forget(cb, NULL, 0); /* a later host_alloc may hand the block out again */
    for (int i = 0; i < CU_PINNED_BLOCKS; i++)
        if (p && cb->pinned[i].pin.p == p) cb->pinned[i].used = 0;
}
