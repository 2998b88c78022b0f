/* exec_strip.c -- the executor's side of column strips (strip.h): slots and carries.
 *
 * A carry rebuilds an op's input over the columns the strip's exact output needs: the columns
 * left of the value's own exact ones come from the value's slot (what the previous strip kept of
 * every frame), the rest from the value; columns that neither has (inexact margins) are zeros.
 * The value's last reader then puts its last n exact columns into the slot, after every reader
 * took the previous strip's. Frames are counted per carry, so chunks and frame loops do not
 * matter. An RMS norm (per voxel) reads its input in place instead (backend norm_rows): only the
 * columns left of the value's own are put in a buffer, and the norm runs over both where they
 * lie (the copy of the whole input was ~0.1 s of a Wan2.2 704p decode in strips). Slots in
 * host memory: the backend stages the copies (one contiguous copy each way on the bus instead of
 * rows of a column or two), and each read from a slot asks it to prefetch what the next few carries
 * will read (as many frames as their last step), which the previous strip wrote long before and
 * this one refills only after they read it.
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
    vae_free(e->carry_frames);
    e->slot = NULL;
    e->carry_frames = e->carry_step = NULL;
    e->strips = NULL;
}

/* One block for every slot (slot[j] points into it; slot[0] is its start). */
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
    for (int j = 0; j < s->n_slot; j++) {
        e->slot[j] = base;
        base += exec_vox_bytes(e, vae_strip_slot_values(s, e->p, j));
    }
    return VAE_OK;
}

int vae_exec_set_strip(vae_exec *e, const vae_strips *s, int k) {
    if (s && (s->n_values != e->p->n_values || s->n_ops != e->p->n_ops || k < 0 || k >= s->n))
        return vae_fail(VAE_EINVAL, "executor: strip %d of %d for another program", k,
                        s ? s->n : 0);
    int rc = VAE_OK;
    if (s != e->strips) { /* new geometry: its slots */
        exec_strip_release(e);
        if (!s) return VAE_OK;
        e->strips = s;
        e->slot = vae_calloc((size_t)s->n_slot + 1, sizeof *e->slot);
        e->carry_frames = vae_calloc(2 * (size_t)s->n_carry + 1, sizeof *e->carry_frames);
        e->carry_step = e->carry_frames ? e->carry_frames + s->n_carry : NULL;
        rc = e->slot && e->carry_frames ? slots_alloc(e)
                                        : vae_fail(VAE_ENOMEM, "out of memory for strips");
        if (rc) {
            exec_strip_release(e);
            return rc;
        }
    }
    if (!s) return VAE_OK; /* none set: a run that stopped before its first strip */
    e->strip = k;
    memset(e->carry_frames, 0, (size_t)s->n_carry * sizeof *e->carry_frames);
    return VAE_OK;
}

/* dst (rows dst_pitch apart) <- the slot's bytes [a, a + len) of each of its rows */
static int slot_read(vae_exec *e, const char *at, size_t row, size_t rows, size_t a, size_t len,
                     void *dst, size_t dst_pitch) {
    return e->be->v->copy2d(e->be, dst, dst_pitch, at + a, row, len, rows);
}

/* the slot <- src's rows (src_pitch apart) */
static int slot_write(vae_exec *e, char *at, size_t row, size_t rows, const void *src,
                      size_t src_pitch) {
    return e->be->v->copy2d(e->be, at, row, src, src_pitch, row, rows);
}

/* bytes of one frame of slot j */
static size_t slot_frame_bytes(const vae_exec *e, int j) {
    return exec_vox_bytes(e, vae_strip_slot_frame_values(e->strips, e->p, j));
}

enum { PREFETCH_AHEAD = 3 }; /* carries */

/* A hint to the backend: the reads from host slots of the PREFETCH_AHEAD carries after c in op
 * order (past the last one: the next step's), each as long as its last step. */
static int slots_prefetch(vae_exec *e, int c) {
    const vae_strips *s = e->strips;
    vae_backend *be = e->be;
    if (!s->slots_host || !be->v->prefetch) return VAE_OK;
    int rc = VAE_OK;
    for (int d = 1; d <= PREFETCH_AHEAD && d < s->n_carry && rc == VAE_OK; d++) {
        const int c2 = (c + d) % s->n_carry, j = s->carry[c2].slot;
        const vae_span sc = vae_strip_from_slot(s, e->strip, c2);
        const int64_t f0 = e->carry_frames[c2], t = e->carry_step[c2];
        if (j < 0 || sc.hi <= sc.lo || t <= 0 || f0 + t > s->slot[j].frames) continue;
        const size_t fb = slot_frame_bytes(e, j);
        rc = be->v->prefetch(be, (char *)e->slot[j] + (size_t)f0 * fb, (size_t)t * fb);
    }
    return rc;
}

/* Does op i read its carried input where it lies (an RMS norm, per voxel: exec_strip_norm),
 * so that only the columns left of x's own are rebuilt? */
static int strip_in_place(const vae_exec *e, int i) {
    return e->p->ops[i].kind == VAE_OP_RMS_NORM && e->set.exec_strip_norm && e->be->v->norm_rows;
}

/* z <- the carry's rebuilt input in strip e->strip (vae_strip_z_parts): zeros, the slot's
 * columns sc (it holds the n left of ex.lo), x's columns (cx are those it has), zeros. In place
 * (strip_in_place): z's buffer holds only what lies left of x's columns, z->in_place says
 * where the rest is. */
static int carry_build(vae_exec *e, int c, const value *x, vae_span cx, vae_span ex,
                       const char *slot, int n, int in_place, value *z) {
    vae_backend *be = e->be;
    const vae_strips *s = e->strips;
    const vae_strip_carry *cy = &s->carry[c];
    const vae_span zc = vae_strip_z(s, e->strip, c), sc = vae_strip_from_slot(s, e->strip, c);
    int left, c0, c1;
    vae_strip_z_parts(s, e->strip, c, &left, &c0, &c1);
    const int from_slot = sc.hi > sc.lo;
    if (from_slot &&
        (sc.lo < zc.lo || sc.hi > zc.hi || sc.lo < ex.lo - n || sc.hi > ex.lo || !slot))
        return vae_fail(VAE_EINVAL, "internal: strip carry of %s needs columns %d..%d, slot %d..%d",
                        e->p->ops[cy->op].name, sc.lo, sc.hi, ex.lo - n, ex.lo);
    const int bw = in_place ? c0 - zc.lo : zc.hi - zc.lo; /* z's buffer: columns from zc.lo */
    *z = (value){.t = x->t, .h = x->h, .w = bw, .c = x->c};
    int rc = bw > 0 ? exec_alloc_value(e, z, cy->value) : VAE_OK;
    z->w = zc.hi - zc.lo;
    if (in_place)
        z->kind = VALUE_IN_PLACE,
        z->in_place = (value_in_place){.x = x, .left = bw, .x0 = c0 - cx.lo, .cols = c1 - c0};
    if (rc || bw == 0) return rc;
    const size_t px = exec_vox_bytes(e, x->c), rows = (size_t)x->t * x->h;
    const size_t zp = px * (size_t)bw;
    if (left > zc.lo) rc = be->v->zero2d(be, z->buf, zp, px * (size_t)(left - zc.lo), rows);
    if (rc == VAE_OK && !in_place && c1 < zc.hi)
        rc = be->v->zero2d(be, (char *)z->buf + (size_t)(c1 - zc.lo) * px, zp,
                           px * (size_t)(zc.hi - c1), rows);
    if (rc == VAE_OK && from_slot)
        rc = slot_read(e, slot, px * (size_t)n, rows, px * (size_t)(sc.lo - (ex.lo - n)),
                       px * (size_t)(sc.hi - sc.lo), (char *)z->buf + (size_t)(sc.lo - zc.lo) * px,
                       zp);
    if (rc == VAE_OK && !in_place && c0 < c1)
        rc = be->v->copy2d(be, (char *)z->buf + (size_t)(c0 - zc.lo) * px, zp,
                           (const char *)x->buf + (size_t)(c0 - cx.lo) * px, px * (size_t)x->w,
                           px * (size_t)(c1 - c0), rows);
    return rc;
}

int exec_strip_norm(vae_exec *e, int i, const value *z, value *y) {
    const vae_op *op = &e->p->ops[i];
    vae_backend *be = e->be;
    const value_in_place *ip = &z->in_place;
    const size_t px = exec_vox_bytes(e, z->c), yp = px * (size_t)y->w;
    const int64_t rows = (int64_t)z->t * z->h;
    const int right = y->w - ip->left - ip->cols;
    int rc = VAE_OK;
    if (ip->left > 0)
        rc = be->v->norm_rows(be, op, e->st[i].prep, z->buf, px * (size_t)ip->left, y->buf, yp,
                              rows, ip->left);
    if (rc == VAE_OK && ip->cols > 0)
        rc = be->v->norm_rows(be, op, e->st[i].prep, (const char *)ip->x->buf + px * ip->x0,
                              px * (size_t)ip->x->w, (char *)y->buf + px * ip->left, yp, rows,
                              ip->cols);
    if (rc == VAE_OK && right > 0) /* an inexact margin, which nothing exact reads */
        rc = be->v->zero2d(be, (char *)y->buf + px * (size_t)(ip->left + ip->cols), yp,
                           px * (size_t)right, (size_t)rows);
    return rc;
}

/* The value's last reader: its last n exact columns of frames f0.. into the slot for the next
 * strip, once every other reader of the slot has taken these frames of the previous strip. */
static int slot_fill(vae_exec *e, const vae_strip_slot *sl, const value *x, vae_span cx,
                     vae_span ex, int64_t f0, char *slot) {
    const vae_strips *s = e->strips;
    for (int c = 0; c < s->n_carry; c++)
        if (s->carry[c].slot == s->carry[sl->fill].slot && e->carry_frames[c] < f0 + x->t)
            return vae_fail(VAE_EINVAL,
                            "internal: strip %d: the slot of value %d is refilled at frame %lld "
                            "before %s read it",
                            e->strip, sl->value, (long long)f0, e->p->ops[s->carry[c].op].name);
    const size_t px = exec_vox_bytes(e, x->c);
    return slot_write(e, slot, px * (size_t)sl->n, (size_t)x->t * x->h,
                      (const char *)x->buf + (size_t)(ex.hi - sl->n - cx.lo) * px,
                      px * (size_t)x->w);
}

int exec_strip_input(vae_exec *e, int i, int k, const value *x, value *z, const value **out) {
    const vae_strips *s = e->strips;
    *out = x;
    z->buf = z->base = NULL;
    const int c = s ? s->carry_of[2 * i + k] : -1;
    if (c < 0 || x->t == 0) return VAE_OK;
    const vae_strip_carry *cy = &s->carry[c];
    const vae_strip_slot *sl = cy->slot >= 0 ? &s->slot[cy->slot] : NULL;
    const vae_span cx = vae_strip_crop(s, e->strip, cy->value);
    const vae_span ex = vae_strip_exact(s, e->strip, cy->value), zc = vae_strip_z(s, e->strip, c);
    const int64_t f0 = e->carry_frames[c];
    if (x->w != cx.hi - cx.lo || (sl && (x->h != sl->rows || f0 + x->t > sl->frames)))
        return vae_fail(VAE_EINVAL,
                        "internal: strip %d at %s: input %d columns wide (planned %d), frames "
                        "%lld..%lld of %lld",
                        e->strip, e->p->ops[i].name, x->w, cx.hi - cx.lo, (long long)f0,
                        (long long)(f0 + x->t), (long long)(sl ? sl->frames : 0));
    e->carry_frames[c] += x->t;
    e->carry_step[c] = x->t;
    const size_t slot_fb = sl ? slot_frame_bytes(e, cy->slot) : 0;
    char *slot = sl && sl->n > 0 ? (char *)e->slot[cy->slot] + (size_t)f0 * slot_fb : NULL;
    int rc = VAE_OK;
    if (zc.hi > zc.lo) {
        const vae_span sc = vae_strip_from_slot(s, e->strip, c);
        rc = carry_build(e, c, x, cx, ex, slot, sl ? sl->n : 0, k == 0 && strip_in_place(e, i), z);
        if (rc == VAE_OK) *out = z;
        if (rc == VAE_OK && sc.hi > sc.lo) rc = slots_prefetch(e, c);
    }
    if (rc == VAE_OK && slot && sl->fill == c && e->strip + 1 < s->n)
        rc = slot_fill(e, sl, x, cx, ex, f0, slot);
    if (rc && z->buf) {
        e->be->v->release(e->be, z->base ? z->base : z->buf);
        z->buf = z->base = NULL;
    }
    return rc;
}
