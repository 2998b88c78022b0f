/* comm_host.c -- comm.h's calls on a host buffer for any communicator (comm_host.h): a device
 * communicator's (NCCL: device_buffers) go through a buffer of the rank's backend, with the host
 * buffer in its pinned memory, so that only what moves is copied (a rank's own part in, the
 * others' out); a host communicator (comm_threads.c) works on the host buffer itself.
 */
#include "comm_host.h"

#include <string.h>

#include "core.h"

void vae_comm_host_init(vae_comm_host *h, vae_comm *c, vae_backend *be) {
    memset(h, 0, sizeof *h);
    h->c = c, h->be = be;
}

void vae_comm_host_free(vae_comm_host *h) {
    vae_backend *be = h->be;
    if (h->dev) be->v->release(be, h->dev);
    if (h->host && h->pinned)
        be->v->host_free(be, h->host);
    else
        vae_free(h->host);
    h->dev = h->host = NULL;
    h->bytes = 0;
}

int vae_comm_host_reserve(vae_comm_host *h, size_t bytes) {
    vae_backend *be = h->be;
    if (bytes <= h->bytes) return VAE_OK;
    vae_comm_host_free(h);
    h->pinned = h->c->device_buffers;
    if (h->pinned && !be->v->host_alloc)
        return vae_fail(VAE_EUNSUPPORTED,
                        "comm: the %s backend has no pinned host memory to "
                        "stage a device communicator's exchange",
                        be->v->name);
    h->dev = h->pinned ? be->v->alloc(be, bytes) : NULL;
    h->host = !h->pinned ? vae_malloc(bytes) : h->dev ? be->v->host_alloc(be, bytes) : NULL;
    if (!h->host) {
        vae_comm_host_free(h);
        return vae_fail(VAE_ENOMEM, "comm: out of memory for an exchange of %zu bytes", bytes);
    }
    h->bytes = bytes;
    return VAE_OK;
}

/* bytes [lo, hi) of each of `frames` frames of the buffer, to the device (in = 1) or back */
static int copy_rows(vae_comm_host *h, int in, size_t frame_bytes, int frames, size_t lo,
                     size_t hi) {
    vae_backend *be = h->be;
    if (hi <= lo || frames == 0) return VAE_OK;
    char *d = (char *)h->dev + lo, *p = (char *)h->host + lo;
    return in ? be->v->copy2d(be, d, frame_bytes, p, frame_bytes, hi - lo, (size_t)frames)
              : be->v->copy2d(be, p, frame_bytes, d, frame_bytes, hi - lo, (size_t)frames);
}

int vae_comm_host_allreduce(vae_comm_host *h, size_t n) {
    vae_comm *c = h->c;
    if (!c->device_buffers || n == 0) return c->v->allreduce_sum(c, h->host, n);
    const size_t bytes = n * sizeof(double);
    int rc = copy_rows(h, 1, bytes, 1, 0, bytes);
    if (rc == VAE_OK) rc = c->v->allreduce_sum(c, h->dev, n);
    if (rc == VAE_OK) rc = copy_rows(h, 0, bytes, 1, 0, bytes);
    return rc ? rc : h->be->v->sync(h->be); /* (queued work) */
}

int vae_comm_host_allgather(vae_comm_host *h, size_t frame_bytes, int frames, const size_t *off) {
    vae_comm *c = h->c;
    if (!c->device_buffers) return c->v->allgather(c, h->host, frame_bytes, frames, off);
    const size_t lo = off[c->rank], hi = off[c->rank + 1];
    int rc = copy_rows(h, 1, frame_bytes, frames, lo, hi); /* its own part goes */
    if (rc == VAE_OK) rc = c->v->allgather(c, h->dev, frame_bytes, frames, off);
    if (rc == VAE_OK) rc = copy_rows(h, 0, frame_bytes, frames, 0, lo); /* the others' come */
    if (rc == VAE_OK) rc = copy_rows(h, 0, frame_bytes, frames, hi, frame_bytes);
    return rc ? rc : h->be->v->sync(h->be);
}
