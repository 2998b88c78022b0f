/* runner_store.c -- the stores between a plan's parts (runner_internal.h).
 *
 * A store holds a part's output over the whole video: on the device, pinned on the host in the
 * activation dtype (the device copies it directly), or as float32 on the host, in memory or, above
 * VAE_EXEC_HOST_MB, in a temporary file. In a group (runner_group.c) several runners write their
 * own tiles' rows of one shared store at once: disjoint rows in memory need no lock; a file's
 * one-frame buffer does.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "runner_internal.h"

int runner_grow(float **buf, size_t *cap, size_t n) {
    if (n <= *cap) return VAE_OK;
    vae_free(*buf);
    *buf = vae_malloc(n * sizeof **buf);
    *cap = *buf ? n : 0;
    return *buf ? VAE_OK : vae_fail(VAE_ENOMEM, "out of host memory for %zu values", n);
}

/* Frame f of a host store: in memory, or read from its file into the one-frame buffer. */
static float *store_frame(const store *st, int f, int load) {
    const size_t n = (size_t)st->h * st->w * st->c;
    if (!st->file) return st->host + (size_t)f * n;
    if (load && pread(fileno(st->file), st->host, n * sizeof(float), (off_t)(f * n * sizeof(float))) !=
                    (ssize_t)(n * sizeof(float))) {
        vae_fail(VAE_EIO, "temporary store file: cannot read frame %d", f);
        return NULL;
    }
    return st->host;
}

/* After frame f of a file-backed store was changed: written back. */
static int store_frame_done(const store *st, int f) {
    const size_t n = (size_t)st->h * st->w * st->c;
    if (!st->file ||
        pwrite(fileno(st->file), st->host, n * sizeof(float), (off_t)(f * n * sizeof(float))) ==
            (ssize_t)(n * sizeof(float)))
        return VAE_OK;
    return vae_fail(VAE_EIO, "temporary store file: cannot write frame %d", f);
}

/* A store in a temporary file has one frame buffer: runners of a group take turns with it. */
static void file_lock(run *s, const store *st, int lock) {
    if (!st->file || !s->sh) return;
    if (lock) pthread_mutex_lock(&s->sh->mu);
    else pthread_mutex_unlock(&s->sh->mu);
}

int runner_store_open(run *s, store *st, int k) {
    const vae_plan *pl = s->plan;
    memset(st, 0, sizeof *st);
    st->t = pl->store_t[k], st->h = pl->store_h[k], st->w = pl->store_w[k], st->c = pl->store_c[k];
    const size_t vals = (size_t)st->t * st->h * st->w * st->c;
    if (!pl->store_host[k]) {
        st->dev = s->r->be->v->alloc(s->r->be, vals * s->r->be->elem_size);
        if (!st->dev)
            return vae_fail(VAE_ENOMEM, "out of %s memory for a store of %d frames of %dx%dx%d",
                            s->r->be->v->name, st->t, st->h, st->w, st->c);
        return VAE_OK;
    }
    /* on the host in the activation dtype, read and written by copy2d like a device store */
    vae_backend *be = s->r->be;
    const size_t raw = vals * be->elem_size, host_max = (size_t)s->r->set.exec_host_mb << 20;
    if (be->v->host_alloc && raw <= host_max && (st->dev = be->v->host_alloc(be, raw))) {
        st->pinned = 1;
        return VAE_OK;
    }
    const size_t frame = (size_t)st->h * st->w * st->c;
    const int spill = vals * sizeof(float) > host_max;
    st->host = vae_calloc(spill ? frame : vals, sizeof(float));
    if (!st->host)
        return vae_fail(VAE_ENOMEM, "out of host memory for a store of %d frames", st->t);
    /* a sparse file of the whole size: frames not written yet read as zeros */
    if (spill && (!(st->file = tmpfile()) ||
                  ftruncate(fileno(st->file), (off_t)(vals * sizeof(float))) != 0))
        return vae_fail(VAE_EIO, "cannot create a temporary file for a store of %d frames: %s",
                        st->t, strerror(errno));
    return VAE_OK;
}

void runner_store_close(run *s, store *st) {
    if (st->dev && st->pinned) s->r->be->v->host_free(s->r->be, st->dev);
    else if (st->dev) s->r->be->v->release(s->r->be, st->dev);
    if (st->file) fclose(st->file);
    vae_free(st->host);
    memset(st, 0, sizeof *st);
}

/* A shared store: frames [0, n) are in place (their copies done), for the readers waiting. */
static int store_publish(run *s, const store *st, int n) {
    int rc = s->r->be->v->sync(s->r->be);
    if (rc) return rc;
    pthread_mutex_lock(&s->sh->mu);
    atomic_store(st->ready, n);
    pthread_cond_broadcast(&s->sh->filled);
    pthread_mutex_unlock(&s->sh->mu);
    return VAE_OK;
}

/* A shared store: until frame f is in place, or the group stops. */
static int store_wait(run *s, const store *st, int f) {
    if (!st->ready || atomic_load(st->ready) > f) return VAE_OK;
    pthread_mutex_lock(&s->sh->mu);
    while (atomic_load(st->ready) <= f && !atomic_load(&s->sh->stop))
        pthread_cond_wait(&s->sh->filled, &s->sh->mu);
    pthread_mutex_unlock(&s->sh->mu);
    return atomic_load(st->ready) > f
               ? VAE_OK
               : vae_fail(VAE_EINTERRUPTED, "stopped: another device of the group failed");
}

static int store_put(run *s, store *st, const vae_chunk *o, int first, vae_span out_y,
                     vae_span out_x, vae_span own_y, vae_span own_x) {
    vae_runner *r = s->r;
    vae_backend *be = r->be;
    if (first + o->t > st->t || o->c != st->c)
        return vae_fail(VAE_EINVAL, "internal: %d frames into a store of %d at %d", o->t, st->t,
                        first);
    const int rows = own_y.hi - own_y.lo, cols = own_x.hi - own_x.lo;
    const size_t px = runner_px_bytes(r, o->c);
    if (st->dev) {
        for (int j = 0; j < o->t; j++) {
            const char *src =
                (const char *)o->data +
                (((size_t)j * o->h + (own_y.lo - out_y.lo)) * o->w + (own_x.lo - out_x.lo)) * px;
            char *dst = (char *)st->dev +
                        (((size_t)(first + j) * st->h + own_y.lo) * st->w + own_x.lo) * px;
            int rc = be->v->copy2d(be, dst, (size_t)st->w * px, src, (size_t)o->w * px,
                                   (size_t)cols * px, (size_t)rows);
            if (rc) return rc;
        }
        return VAE_OK;
    }
    const size_t vals = (size_t)o->t * o->h * o->w * o->c;
    int rc = runner_grow(&r->cl, &r->cl_cap, vals);
    if (rc == VAE_OK) rc = be->v->download(be, r->cl, o->data, vals);
    const int whole = rows == st->h && cols == st->w;
    for (int j = 0; rc == VAE_OK && j < o->t; j++) {
        file_lock(s, st, 1);
        float *fr = store_frame(st, first + j, !whole);
        for (int yy = own_y.lo; fr && yy < own_y.hi; yy++)
            memcpy(fr + ((size_t)yy * st->w + own_x.lo) * st->c,
                   r->cl + (((size_t)j * o->h + yy - out_y.lo) * o->w + own_x.lo - out_x.lo) * o->c,
                   (size_t)cols * o->c * sizeof(float));
        rc = fr ? store_frame_done(st, first + j) : VAE_EIO;
        file_lock(s, st, 0);
    }
    return rc;

}

int runner_store_put(run *s, store *st, const vae_chunk *o, int first, vae_span out_y,
                     vae_span out_x, vae_span own_y, vae_span own_x) {
    int rc = store_put(s, st, o, first, out_y, out_x, own_y, own_x);
    if (rc == VAE_OK && st->ready && o->t > 0) rc = store_publish(s, st, first + o->t);
    return rc;
}

int runner_store_get(run *s, const store *st, int f, vae_span y, vae_span x, void *dst) {
    int rc = store_wait(s, st, f);
    if (rc) return rc;
    vae_runner *r = s->r;
    vae_backend *be = r->be;
    const int rows = y.hi - y.lo, cols = x.hi - x.lo;
    const size_t px = runner_px_bytes(r, st->c);
    if (st->dev)
        return be->v->copy2d(be, dst, (size_t)cols * px,
                             (const char *)st->dev +
                                 (((size_t)f * st->h + y.lo) * st->w + x.lo) * px,
                             (size_t)st->w * px, (size_t)cols * px, (size_t)rows);
    const size_t vals = (size_t)rows * cols * st->c;
    rc = runner_grow(&r->cl, &r->cl_cap, vals);
    file_lock(s, st, 1);
    const float *fr = rc ? NULL : store_frame(st, f, 1);
    for (int yy = 0; fr && yy < rows; yy++)
        memcpy(r->cl + (size_t)yy * cols * st->c, fr + ((size_t)(y.lo + yy) * st->w + x.lo) * st->c,
               (size_t)cols * st->c * sizeof(float));
    file_lock(s, st, 0);
    if (rc == VAE_OK && !fr) rc = VAE_EIO;
    return rc ? rc : be->v->upload(be, dst, r->cl, vals);
}
