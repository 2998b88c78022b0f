/* runner_store.c -- the stores between a plan's parts (runner_internal.h).
 *
 * A store holds a part's output over the whole video: on the device; on the host in the
 * activation dtype, pinned (the device copies it directly) up to VAE_EXEC_HOST_MB; above it in
 * a temporary file, in the same layout. A file-backed store goes through the run's ring of
 * staging slots (store_ring): a put copies the crop into a slot and writes it to the file once the
 * copy is done, a get reads the crop into a slot and copies it to the device, so that the file's
 * reads and writes overlap the device's work and wait for it only when the ring comes round (a
 * sync every few frames, not one per frame). A backend without host memory of its own keeps the
 * store as float32 in memory. In a group (runner_group.c) several runners write their own tiles'
 * rows of one shared store at once, each through its own ring: disjoint rows need no lock.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <string.h>

#include "core.h"
#include "platform/platform.h"
#include "runner_internal.h"

enum { RING_SLOTS = 8 };
#define RING_BYTES ((size_t)64 << 20) /* the ring's host memory, at least two frames */

int runner_grow(float **buf, size_t *cap, size_t n) {
    if (n <= *cap) return VAE_OK;
    vae_free(*buf);
    *buf = vae_malloc(n * sizeof **buf);
    *cap = *buf ? n : 0;
    return *buf ? VAE_OK : vae_fail(VAE_ENOMEM, "out of host memory for %zu values", n);
}

/* ---- the ring of a file-backed store ---------------------------------------------------- */
/* rows of row bytes at buf (packed) <-> the file's rows of frame f, y0.., from byte x0 of each
 * row (one call where the rows are whole) */
static int file_rows(const store *st, int write, char *buf, int f, int y0, int rows, size_t x0,
                     size_t row, size_t px) {
    const size_t line = (size_t)st->w * px;
    const int fd = fileno(st->file);
    const int n = row == line ? 1 : rows;
    const size_t len = row == line ? row * (size_t)rows : row;
    for (int i = 0; i < n; i++) {
        const int64_t at = (int64_t)((((size_t)f * st->h + y0 + i) * st->w) * px + x0);
        const int64_t got = write ? vae_plat_pwrite(fd, buf + i * len, len, at)
                                  : vae_plat_pread(fd, buf + i * len, len, at);
        if (got != (int64_t)len)
            return vae_fail(VAE_EIO, "temporary store file: cannot %s frame %d: %s",
                            write ? "write" : "read", f, got < 0 ? strerror(errno) : "short");
    }
    return VAE_OK;
}

/* waits for the ring's copies in flight, then writes the puts among them to their files */
static int ring_flush(run *s, store_ring *g) {
    if (g->used == 0) return VAE_OK;
    vae_backend *be = s->r->be;
    int rc = be->v->sync(be);
    for (int j = 0; j < g->used && rc == VAE_OK; j++) {
        const int i = (g->next - g->used + j + g->n) % g->n;
        ring_slot *sl = &g->slot[i];
        if (!sl->dirty) continue;
        const size_t px = runner_px_bytes(s->r, g->st->c);
        rc = file_rows(g->st, 1, g->mem + (size_t)i * g->slot_bytes, sl->f, sl->y.lo,
                       sl->y.hi - sl->y.lo, (size_t)sl->x.lo * px,
                       (size_t)(sl->x.hi - sl->x.lo) * px, px);
        sl->dirty = 0;
    }
    g->used = g->dirty = 0;
    return rc;
}

/* the next slot of st's ring for frame f's crop (y, x), a put's or a get's (the ring made at
 * first use; a full one flushed first) */
static int ring_take(run *s, const store *st, int f, vae_span y, vae_span x, int put, char **mem) {
    store_ring *g = &s->ring[st->k];
    vae_backend *be = s->r->be;
    const size_t frame = (size_t)st->h * st->w * runner_px_bytes(s->r, st->c);
    if (g->mem && g->st != st) return vae_fail(VAE_EINVAL, "internal: a ring for another store");
    if (!g->mem) {
        g->st = st;
        g->n = (int)(RING_BYTES / frame);
        g->n = g->n < 2 ? 2 : g->n > RING_SLOTS ? RING_SLOTS : g->n;
        g->slot_bytes = frame;
        g->slot = vae_calloc((size_t)g->n, sizeof *g->slot);
        g->mem = g->slot ? be->v->host_alloc(be, (size_t)g->n * frame) : NULL;
        if (!g->mem) {
            vae_free(g->slot);
            g->slot = NULL;
            return vae_fail(VAE_ENOMEM, "out of host memory for %d frames staging a store's file",
                            g->n);
        }
    }
    int rc = g->used == g->n ? ring_flush(s, g) : VAE_OK;
    if (rc) return rc;
    const int i = g->next;
    g->next = (i + 1) % g->n;
    g->used++;
    g->slot[i] = (ring_slot){.f = f, .dirty = put, .y = y, .x = x};
    g->dirty += put;
    *mem = g->mem + (size_t)i * g->slot_bytes;
    return VAE_OK;
}

int runner_store_flush(run *s) {
    int rc = VAE_OK;
    for (int k = 0; k < 2 && rc == VAE_OK; k++)
        rc = ring_flush(s, &s->ring[k]);
    return rc;
}

void runner_store_rings_free(run *s) {
    vae_backend *be = s->r->be;
    for (int k = 0; k < 2; k++) {
        store_ring *g = &s->ring[k];
        if (g->mem) {
            be->v->sync(be); /* (after a failure: nothing in flight into the slots) */
            be->v->host_free(be, g->mem);
        }
        vae_free(g->slot);
        memset(g, 0, sizeof *g);
    }
}

/* ---- opening and closing ------------------------------------------------------------------ */
int runner_store_open(run *s, store *st, int k) {
    const vae_plan *pl = s->plan;
    memset(st, 0, sizeof *st);
    st->k = k;
    st->t = pl->store_t[k], st->h = pl->store_h[k], st->w = pl->store_w[k], st->c = pl->store_c[k];
    const size_t vals = (size_t)st->t * st->h * st->w * st->c;
    vae_backend *be = s->r->be;
    if (!pl->store_host[k]) {
        st->dev = be->v->alloc(be, vals * be->elem_size);
        if (!st->dev)
            return vae_fail(VAE_ENOMEM, "out of %s memory for a store of %d frames of %dx%dx%d",
                            be->v->name, st->t, st->h, st->w, st->c);
        return VAE_OK;
    }
    /* on the host in the activation dtype, read and written by copy2d like a device store:
     * pinned within the host cap (the plan's store_file), else in a file */
    const size_t raw = vals * be->elem_size;
    if (be->v->host_alloc && !pl->store_file[k] && (st->dev = be->v->host_alloc(be, raw))) {
        st->pinned = 1;
        return VAE_OK;
    }
    if (!be->v->host_alloc) {
        st->host = vae_calloc(vals, sizeof(float));
        return st->host
                   ? VAE_OK
                   : vae_fail(VAE_ENOMEM, "out of host memory for a store of %d frames", st->t);
    }
    /* a sparse file of the whole size: frames not written yet read as zeros */
    if (!(st->file = vae_spill_file()) || vae_plat_truncate(fileno(st->file), (int64_t)raw) != 0)
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

/* A shared store: frames [0, n) are in place (their copies done, a file's writes made), for the
 * readers waiting. */
static int store_publish(run *s, const store *st, int n) {
    int rc = st->file ? ring_flush(s, &s->ring[st->k]) : s->r->be->v->sync(s->r->be);
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
    if (st->host) { /* float32 in memory */
        const size_t vals = (size_t)o->t * o->h * o->w * o->c;
        int rc = runner_grow(&r->cl, &r->cl_cap, vals);
        if (rc == VAE_OK) rc = be->v->download(be, r->cl, o->data, vals);
        for (int j = 0; rc == VAE_OK && j < o->t; j++)
            for (int yy = own_y.lo; yy < own_y.hi; yy++)
                memcpy(st->host + (((size_t)(first + j) * st->h + yy) * st->w + own_x.lo) * st->c,
                       r->cl +
                           (((size_t)j * o->h + yy - out_y.lo) * o->w + own_x.lo - out_x.lo) * o->c,
                       (size_t)cols * o->c * sizeof(float));
        return rc;
    }
    for (int j = 0; j < o->t; j++) {
        const char *src =
            (const char *)o->data +
            (((size_t)j * o->h + (own_y.lo - out_y.lo)) * o->w + (own_x.lo - out_x.lo)) * px;
        char *dst = NULL;
        size_t pitch = (size_t)cols * px; /* a ring slot: the crop packed */
        int rc = VAE_OK;
        if (st->file) {
            rc = ring_take(s, st, first + j, own_y, own_x, 1, &dst);
        } else {
            dst = (char *)st->dev +
                  (((size_t)(first + j) * st->h + own_y.lo) * st->w + own_x.lo) * px;
            pitch = (size_t)st->w * px;
        }
        if (rc == VAE_OK)
            rc = be->v->copy2d(be, dst, pitch, src, (size_t)o->w * px, (size_t)cols * px,
                               (size_t)rows);
        if (rc) return rc;
    }
    return VAE_OK;
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
    const size_t px = runner_px_bytes(r, st->c), row = (size_t)cols * px;
    if (st->dev)
        return be->v->copy2d(
            be, dst, row, (const char *)st->dev + (((size_t)f * st->h + y.lo) * st->w + x.lo) * px,
            (size_t)st->w * px, row, (size_t)rows);
    if (st->file) { /* the run's own puts reach the file first */
        char *slot = NULL;
        if (s->ring[st->k].dirty) rc = ring_flush(s, &s->ring[st->k]);
        if (rc == VAE_OK) rc = ring_take(s, st, f, y, x, 0, &slot);
        if (rc == VAE_OK) rc = file_rows(st, 0, slot, f, y.lo, rows, (size_t)x.lo * px, row, px);
        return rc ? rc : be->v->copy2d(be, dst, row, slot, row, row, (size_t)rows);
    }
    const size_t vals = (size_t)rows * cols * st->c;
    rc = runner_grow(&r->cl, &r->cl_cap, vals);
    for (int yy = 0; rc == VAE_OK && yy < rows; yy++)
        memcpy(r->cl + (size_t)yy * cols * st->c,
               st->host + (((size_t)f * st->h + y.lo + yy) * st->w + x.lo) * st->c,
               (size_t)cols * st->c * sizeof(float));
    return rc ? rc : be->v->upload(be, dst, r->cl, vals);
}
