/* exec_strip.c -- the executor's side of column strips (strip.h): slots and carries.
 *
 * A carry rebuilds an op's input over the columns the strip's exact output needs: the columns
 * left of the value's own exact ones come from the slot (what the previous strip kept of every
 * frame), the rest from the value; columns that neither has (the inexact margin of a binary op's
 * other input) are zeros. Then the value's last n exact columns go into the slot, after the
 * rebuild read it. Slot frames are counted per carry, so chunks and frame loops do not matter.
 */
#include <string.h>

#include "core.h"
#include "exec_internal.h"

void exec_strip_release(vae_exec *e) {
    if (e->slot && e->slot[0]) {
        if (e->strips->slots_host && e->be->v->host_free)
            e->be->v->host_free(e->be, e->slot[0]);
        else
            e->be->v->release(e->be, e->slot[0]);
    }
    vae_free(e->slot);
    vae_free(e->slot_frames);
    e->slot = NULL;
    e->slot_frames = NULL;
    e->strips = NULL;
}

/* One block for every slot (slot[c] points into it; slot[0] is its start). */
static int slots_alloc(vae_exec *e) {
    const vae_strips *s = e->strips;
    vae_backend *be = e->be;
    const size_t total = (size_t)vae_strips_slot_bytes(s, e->p, be->elem_size, NULL);
    if (total == 0) return VAE_OK;
    const int host = s->slots_host && be->v->host_alloc;
    char *base = host ? be->v->host_alloc(be, total) : be->v->alloc(be, total);
    if (!base)
        return vae_fail(VAE_ENOMEM, "out of %s memory for the %zu bytes strips keep between them",
                        host ? "host" : be->v->name, total);
    for (int c = 0; c < s->n_carry; c++) {
        e->slot[c] = base;
        base += exec_vox_bytes(e, vae_strip_slot_values(s, e->p, c));
    }
    return VAE_OK;
}

int vae_exec_set_strip(vae_exec *e, const vae_strips *s, int k) {
    if (s && (s->n_values != e->p->n_values || s->n_ops != e->p->n_ops || k < 0 || k >= s->n))
        return vae_fail(VAE_EINVAL, "executor: strip %d of %d for another program", k, s ? s->n : 0);
    int rc = VAE_OK;
    if (s != e->strips) { /* new geometry: its slots */
        exec_strip_release(e);
        if (!s) return VAE_OK;
        e->strips = s;
        e->slot = vae_calloc((size_t)s->n_carry + 1, sizeof *e->slot);
        e->slot_frames = vae_calloc((size_t)s->n_carry + 1, sizeof *e->slot_frames);
        rc = e->slot && e->slot_frames ? slots_alloc(e)
                                       : vae_fail(VAE_ENOMEM, "out of memory for strips");
        if (rc) {
            exec_strip_release(e);
            return rc;
        }
    }
    e->strip = k;
    memset(e->slot_frames, 0, (size_t)s->n_carry * sizeof *e->slot_frames);
    return VAE_OK;
}

/* z <- slot ++ x (x's columns cx, the slot's the n left of ex.lo), over the columns zc */
static int carry_build(vae_exec *e, const vae_strip_carry *cy, const value *x, vae_span cx,
                       vae_span ex, vae_span zc, const char *slot, value *z) {
    vae_backend *be = e->be;
    *z = (value){.t = x->t, .h = x->h, .w = zc.hi - zc.lo, .c = x->c};
    int rc = exec_alloc_value(e, z, cy->value);
    if (rc) return rc;
    const size_t px = exec_vox_bytes(e, x->c), rows = (size_t)x->t * x->h;
    const size_t zp = px * (size_t)z->w;
    const int a = zc.lo, b = zc.hi < ex.lo ? zc.hi : ex.lo; /* from the slot */
    const int c0 = zc.lo > ex.lo ? zc.lo : ex.lo, c1 = zc.hi < cx.hi ? zc.hi : cx.hi; /* x */
    if (a < ex.lo - cy->n || (a < b && !slot))
        return vae_fail(VAE_EINVAL, "internal: strip carry of %s needs column %d, slot from %d",
                        e->p->ops[cy->op].name, a, ex.lo - cy->n);
    if (c1 < zc.hi) rc = be->v->zero(be, z->buf, zp * rows); /* a margin neither has */
    if (rc == VAE_OK && a < b)
        rc = be->v->copy2d(be, z->buf, zp, slot + (size_t)(a - (ex.lo - cy->n)) * px,
                           px * (size_t)cy->n, px * (size_t)(b - a), rows);
    if (rc == VAE_OK && c0 < c1)
        rc = be->v->copy2d(be, (char *)z->buf + (size_t)(c0 - zc.lo) * px, zp,
                           (const char *)x->buf + (size_t)(c0 - cx.lo) * px, px * (size_t)x->w,
                           px * (size_t)(c1 - c0), rows);
    return rc;
}

int exec_strip_input(vae_exec *e, int i, int k, const value *x, value *z, const value **out) {
    const vae_strips *s = e->strips;
    *out = x;
    z->buf = z->base = NULL;
    const int c = s ? s->carry_of[2 * i + k] : -1;
    if (c < 0 || x->t == 0) return VAE_OK;
    const vae_strip_carry *cy = &s->carry[c];
    const vae_span cx = vae_strip_crop(s, e->strip, cy->value);
    const vae_span ex = vae_strip_exact(s, e->strip, cy->value), zc = vae_strip_z(s, e->strip, c);
    const int64_t f0 = e->slot_frames[c];
    if (x->w != cx.hi - cx.lo || x->h != cy->rows || f0 + x->t > cy->frames)
        return vae_fail(VAE_EINVAL,
                        "internal: strip %d at %s: input %d columns wide (planned %d), frames "
                        "%lld..%lld of %lld",
                        e->strip, e->p->ops[i].name, x->w, cx.hi - cx.lo, (long long)f0,
                        (long long)(f0 + x->t), (long long)cy->frames);
    e->slot_frames[c] += x->t;
    const size_t px = exec_vox_bytes(e, x->c), slot_fb = px * (size_t)cy->n * x->h;
    int rc = VAE_OK;
    char *slot = cy->n > 0 ? (char *)e->slot[c] + (size_t)f0 * slot_fb : NULL;
    if (zc.hi > zc.lo) {
        rc = carry_build(e, cy, x, cx, ex, zc, slot, z);
        if (rc == VAE_OK) *out = z;
    }
    if (rc == VAE_OK && cy->n > 0 && e->strip + 1 < s->n) /* for the next strip */
        rc = e->be->v->copy2d(e->be, slot, px * (size_t)cy->n,
                              (const char *)x->buf + (size_t)(ex.hi - cy->n - cx.lo) * px,
                              px * (size_t)x->w, px * (size_t)cy->n, (size_t)x->t * x->h);
    if (rc && z->buf) {
        e->be->v->release(e->be, z->base ? z->base : z->buf);
        z->buf = z->base = NULL;
    }
    return rc;
}
