/* cuda_host.h -- the CUDA backend's host side (internal, ground floor): pinned host memory
 * (cuda_pinned.c), the parameters staged in it at session creation (cuda_stage.c), and the bus
 * that copies to and from it on a second stream (cuda_bus.c). The types sit in cuda_base.h, in
 * the backend's state.
 */
#ifndef VAE_CUDA_HOST_H
#define VAE_CUDA_HOST_H

#include "backends/cuda/base/cuda_base.h"

/* ---- cuda_bus.c ---- */
/* copy2d between this device and pinned host memory by the bus (*done = 1), or nothing for the
 * caller's copy on the compute stream (*done = 0: the bus is off, a graph records, a row too
 * large); a read takes a prefetched block when one holds its range. */
int cu_bus_copy_out(cuda_backend *cb, void *dst, size_t dst_pitch, const void *src,
                    size_t src_pitch, size_t row_bytes, size_t rows, int *done);
int cu_bus_copy_in(cuda_backend *cb, void *dst, size_t dst_pitch, const void *src,
                   size_t src_pitch, size_t row_bytes, size_t rows, int *done);
/* vtbl prefetch (backend.h) */
int cu_bus_prefetch(vae_backend *be, const void *host, size_t bytes);
/* Host memory [p, p + bytes) is written: prefetches of it are stale (p NULL: all of them). */
void cu_bus_forget(cuda_backend *cb, const void *p, size_t bytes);
/* The compute stream waits for the bus's copies (before it reads or writes host memory itself);
 * sync: the host waits for them. */
int cu_bus_wait(cuda_backend *cb);
int cu_bus_sync(cuda_backend *cb);
int64_t cu_bus_bytes(const cuda_backend *cb); /* the ring, once started */
size_t cu_bus_ring_wanted(const cuda_backend *cb); /* the ring the run's plan counted */
void cu_bus_destroy(cuda_backend *cb);

/* ---- cuda_pinned.c: pinned host memory ---- */
/* A pinned block of at least `bytes` (portable: for every device of a group); no message on
 * failure (the caller reports it or falls back). */
cudaError_t cu_pin_alloc(cuda_backend *cb, cu_pin *b, size_t bytes, int portable);
void cu_pin_free(cu_pin *b);
/* Transfer buffers: reserve waits for the buffer's last copy and grows it to `bytes`; queued
 * marks a copy from or into it just queued on `stream` (the compute stream, or the io stage's). */
int cu_host_buf_reserve(cuda_backend *cb, cu_host_buf *b, size_t bytes);
int cu_host_buf_wait(cu_host_buf *b);
int cu_host_buf_queued(cu_host_buf *b, cudaStream_t stream);
void cu_host_bufs_free(cuda_backend *cb);
/* dst [n] in dt (float32, bfloat16 or float16) <- host float32 src [n], on the host (threads for
 * large n): what the ring and the stage hold */
void cu_params_convert(void *dst, const float *src, size_t n, vae_dtype dt);
/* dst (device, n values of dt) <- host float32 src, converted on the host and copied through
 * the pinned ring in the stream's order (src may be freed on return) */
int cu_ring_upload(cuda_backend *cb, void *dst, const float *src, size_t n, vae_dtype dt,
                   const char *who);
/* ---- cuda_stage.c: parameters staged at session creation ---- */
/* Staging a program: begin, the puts of every parameter (counting), alloc, the same puts again
 * (filling), end. put's src (n float32 values converted to dt; for dt VAE_DTYPE_FP8 n E4M3
 * codes, copied) may be NULL while counting; a key already staged is skipped. alloc: 0 when
 * there is no room (nothing is staged then, no error). */
void cu_stage_begin(cu_stage *st);
void cu_stage_put(cu_stage *st, const void *key, int tag, vae_dtype dt, size_t n, const void *src);
int cu_stage_counting(const cu_stage *st);
int cu_stage_alloc(cuda_backend *cb, cu_stage *st);
void cu_stage_end(cu_stage *st);
/* the staged values (pinned, dt) of (key, tag, dt, n), or NULL */
const void *cu_stage_find(const cu_stage *st, const void *key, int tag, vae_dtype dt, size_t n);
size_t cu_stage_bytes(const cu_stage *st);
void cu_stage_free(cuda_backend *cb, cu_stage *st); /* after the stream's copies from it */

/* host stores (vtbl host_alloc / host_free) and giving their kept blocks back (all: also the
 * ones in use) */
void *cu_store_alloc(vae_backend *be, size_t bytes);
void cu_store_free(vae_backend *be, void *p);
void cu_stores_release(cuda_backend *cb, int all);

#endif
