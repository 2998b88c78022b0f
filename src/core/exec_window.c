/* exec_window.c -- windowed ops: a temporal conv or shuffle-down sees cache ++ chunk.
 *
 * Each windowed op keeps the input frames that a later window still needs (at most kt-1, the
 * op's clock.pending, op.h), which is what makes memory independent of the video's length.
 *
 * Contiguous windows: when the input of a temporal conv (kt > 1) is an intermediate value with no
 * other consumer, that value is allocated with kt-1 spare frames in front of it (executor.c,
 * plan_windows), or takes over a buffer that has them (a time drop's or a one-sided concat's
 * input: vae_program_heads, executor.c value_take). Before the conv runs, the cached frames (and
 * the front padding at stream start) are copied into that space, so the conv's frame list is one
 * contiguous [frames][h][w][c] tensor that a backend can read in place (no per-tap gather). The
 * cache itself stays a separate buffer of kt-1 frames, so memory between chunks is unchanged. A
 * frame of a value cut by a frame loop is contiguous too: the frames before it in its buffer
 * (already consumed) or the buffer's spare frames take the cache.
 *
 * Offloaded caches (vae_exec_set_offload): a contiguous window's cache may live in host memory
 * instead. Its frames are copied from there into the spare frames before the op runs (what the
 * device copy from the cache buffer does otherwise) and back after it; the same bytes reach the
 * conv, so the result is the same. The home is a ring of frame slots: a call writes back only
 * the frames it adds (one of a 3-tap conv's two inside a frame loop), the kept older ones stay in
 * their slots. While an op runs, the backend is asked to prefetch the cache of the next offloaded
 * op (vtbl prefetch), so that the host link works beside the compute.
 */
#include <string.h>

#include "core.h"
#include "exec_internal.h"

void exec_window_release(vae_exec *e, window *w, int kt) {
    if (w->cache)
        for (int i = 0; i < kt - 1; i++)
            if (w->cache[i]) e->be->v->release(e->be, w->cache[i]);
    if (w->cbuf) e->be->v->release(e->be, w->cbuf);
    if (w->zero_frame) e->be->v->release(e->be, w->zero_frame);
    vae_free(w->cache);
    memset(w, 0, sizeof *w);
}

void exec_offload_release(vae_exec *e) {
    if (e->off_block && e->be->v->host_free) e->be->v->host_free(e->be, e->off_block);
    vae_free(e->off_home);
    vae_free(e->off_cap);
    vae_free(e->off_next);
    vae_free(e->off_first);
    e->off_block = NULL;
    e->off_home = NULL;
    e->off_cap = NULL;
    e->off_next = NULL;
    e->off_first = NULL;
}

int vae_exec_set_offload(vae_exec *e, const int64_t *bytes) {
    exec_offload_release(e);
    const int n = e->p->n_ops;
    int64_t total = 0;
    for (int i = 0; bytes && i < n; i++)
        if (bytes[i] > 0) total += (bytes[i] + 255) / 256 * 256;
    if (total == 0) return VAE_OK;
    if (!e->be->v->host_alloc)
        return vae_fail(VAE_EUNSUPPORTED, "causal caches in host memory: the %s backend has none",
                        e->be->v->name);
    e->off_home = vae_calloc((size_t)n, sizeof *e->off_home);
    e->off_cap = vae_calloc((size_t)n, sizeof *e->off_cap);
    e->off_next = vae_calloc((size_t)n, sizeof *e->off_next);
    e->off_first = vae_calloc((size_t)n, sizeof *e->off_first);
    if (e->off_home && e->off_cap && e->off_next && e->off_first)
        e->off_block = e->be->v->host_alloc(e->be, (size_t)total);
    if (!e->off_block) {
        exec_offload_release(e);
        return vae_fail(VAE_ENOMEM, "out of host memory for %.1f MiB of causal caches",
                        (double)total / (1 << 20));
    }
    char *at = e->off_block;
    int first = -1, prev = -1;
    for (int i = 0; i < n; i++) {
        if (bytes[i] <= 0) continue;
        e->off_home[i] = at;
        e->off_cap[i] = bytes[i];
        at += (bytes[i] + 255) / 256 * 256;
        if (prev >= 0) e->off_next[prev] = i;
        if (first < 0) first = i;
        prev = i;
    }
    e->off_next[prev] = first;
    return VAE_OK;
}

/* n frames of fb bytes between the device and a cache's home, a row of pixels a copy (rows of
 * host memory, the unit the backend's bus stages) */
static int home_copy(vae_exec *e, void *dst, const void *src, const window *w, int n) {
    const size_t fb = w->frame_bytes, h = fb % (size_t)w->h == 0 ? (size_t)w->h : 1;
    return n > 0 ? e->be->v->copy2d(e->be, dst, fb / h, src, fb / h, fb / h, (size_t)n * h)
                 : VAE_OK;
}

/* The ring of frame slots an op's home holds (its bytes over the frame's) */
static int home_slots(const vae_exec *e, int i, const window *w) {
    return w->frame_bytes ? (int)(e->off_cap[i] / (int64_t)w->frame_bytes) : 0;
}

/* n consecutive frames of the ring from slot `at` (wrapping) <-> the device frames at dev
 * (contiguous): at most two copies. to_home: device -> home. */
static int ring_copy(vae_exec *e, int i, const window *w, int at, void *dev, int n, int to_home) {
    const int slots = home_slots(e, i, w);
    const size_t fb = w->frame_bytes;
    int rc = VAE_OK;
    for (int done = 0; done < n && rc == VAE_OK;) {
        const int slot = (at + done) % slots;
        const int run = n - done < slots - slot ? n - done : slots - slot;
        char *home = e->off_home[i] + (size_t)slot * fb, *d = (char *)dev + (size_t)done * fb;
        rc = to_home ? home_copy(e, home, d, w, run) : home_copy(e, d, home, w, run);
        done += run;
    }
    return rc;
}

/* The next offloaded op's cache is wanted soon: a hint to the backend (the slots of its frames
 * kept so far; the whole ring where they wrap) */
static int home_prefetch(vae_exec *e, int i) {
    if (!e->be->v->prefetch) return VAE_OK;
    const int j = e->off_next[i];
    if (j == i) return VAE_OK; /* its own home: this call writes it back (and reads it now) */
    const window *wj = &e->st[j].win;
    const int pending = e->st[j].clock.pending, slots = home_slots(e, j, wj);
    if (pending <= 0 || slots <= 0) return VAE_OK;
    const int first = e->off_first[j] + pending <= slots ? e->off_first[j] : 0;
    const int n = first == e->off_first[j] ? pending : slots;
    return e->be->v->prefetch(e->be, e->off_home[j] + (size_t)first * wj->frame_bytes,
                              (size_t)n * wj->frame_bytes);
}

/* A window whose cache lives in host memory but that is not contiguous this step (its input has
 * no room in front): the kept frames go to device frames for the step (list mode), and back. */
static int home_to_list(vae_exec *e, int i, window *w, int first, int pending) {
    const vae_op *op = &e->p->ops[i];
    if (!w->cache && op->kt > 1) {
        w->cache = vae_calloc((size_t)op->kt - 1, sizeof *w->cache);
        if (!w->cache) return vae_fail(VAE_ENOMEM, "out of memory");
    }
    for (int j = 0; j < pending; j++) {
        if (!w->cache[j] && !(w->cache[j] = e->be->v->alloc(e->be, w->frame_bytes)))
            return vae_fail(VAE_ENOMEM, "out of device memory for a cache");
        int rc = ring_copy(e, i, w, first + j, w->cache[j], 1, 0);
        if (rc) return rc;
    }
    return VAE_OK;
}

/* The new cache's frames (w->cache[0, keep), kept by keep_list) that the step added go to their
 * slots from `first` (the oldest's), the others are there already. */
static int list_to_home(vae_exec *e, int i, window *w, int first, int added, int keep) {
    const vae_op *op = &e->p->ops[i];
    int rc = VAE_OK;
    for (int j = keep - added; j < keep && rc == VAE_OK; j++)
        rc = ring_copy(e, i, w, first + j, w->cache[j], 1, 1);
    for (int j = 0; w->cache && j < op->kt - 1; j++) { /* (in stream order, after the copies) */
        if (w->cache[j]) e->be->v->release(e->be, w->cache[j]);
        w->cache[j] = NULL;
    }
    return rc;
}

/* e->frames = cache ++ front padding (at stream start) ++ the chunk's frames (f: op.h). */
static int gather_list(vae_exec *e, const vae_op *op, window *w, int pending, const value *x,
                       const vae_op_frames *f) {
    int rc = exec_frames_reserve(e, f->total + 1);
    if (rc || f->total == 0) return rc;
    size_t fb = w->frame_bytes;
    if (!w->cache && op->kt > 1) {
        w->cache = vae_calloc((size_t)op->kt - 1, sizeof *w->cache);
        if (!w->cache) return vae_fail(VAE_ENOMEM, "out of memory");
    }
    int k = 0;
    for (int i = 0; i < pending; i++)
        e->frames[k++] = w->cache[i];
    if (f->pad > 0 && op->tpad_mode == VAE_TPAD_ZERO && !w->zero_frame) {
        w->zero_frame = e->be->v->alloc(e->be, fb);
        if (!w->zero_frame) return vae_fail(VAE_ENOMEM, "out of device memory");
        if ((rc = e->be->v->zero(e->be, w->zero_frame, fb))) return rc;
    }
    for (int i = 0; i < f->pad; i++)
        e->frames[k++] = op->tpad_mode == VAE_TPAD_ZERO ? w->zero_frame : x->buf;
    for (int i = 0; i < x->t; i++)
        e->frames[k++] = (const char *)x->buf + (size_t)i * fb;
    return VAE_OK;
}

/* Keeps the last f->keep frames of e->frames as the new cache. Destination slot j <= source slot
 * when the source is itself a cache slot, so copying forward is safe. */
static int keep_list(vae_exec *e, window *w, const vae_op_frames *f) {
    for (int j = 0; j < f->keep; j++) {
        const void *src = e->frames[f->used + j];
        if (!w->cache[j]) {
            w->cache[j] = e->be->v->alloc(e->be, w->frame_bytes);
            if (!w->cache[j]) return vae_fail(VAE_ENOMEM, "out of device memory for a cache");
        }
        if (src != w->cache[j]) {
            int rc = e->be->v->copy(e->be, w->cache[j], src, w->frame_bytes);
            if (rc) return rc;
        }
    }
    return VAE_OK;
}

/* Contiguous mode: the cached frames and any front padding are copied in front of x's frames,
 * so that e->frames lists one contiguous tensor. */
static int gather_contig(vae_exec *e, int i, window *w, int first, int pending, const value *x,
                         const vae_op_frames *f) {
    const vae_op *op = &e->p->ops[i];
    const int home = e->off_home && e->off_home[i];
    vae_backend *be = e->be;
    int rc = exec_frames_reserve(e, f->total + 1);
    if (rc) return rc;
    const size_t fb = w->frame_bytes;
    if (x->t == 0) {
        for (int k = 0; k < f->total; k++)
            e->frames[k] = (char *)w->cbuf + (size_t)k * fb;
        return VAE_OK;
    }
    char *head = (char *)x->buf - (size_t)(pending + f->pad) * fb; /* inside x's allocation */
    if (pending > 0 && (rc = home ? ring_copy(e, i, w, first, head, pending, 0)
                                   : be->v->copy(be, head, w->cbuf, (size_t)pending * fb)))
        return rc;
    for (int k = 0; k < f->pad && rc == VAE_OK; k++) {
        char *slot = head + (size_t)(pending + k) * fb;
        rc = op->tpad_mode == VAE_TPAD_ZERO ? be->v->zero(be, slot, fb)
                                            : be->v->copy(be, slot, x->buf, fb);
    }
    for (int k = 0; k < f->total; k++)
        e->frames[k] = head + (size_t)k * fb;
    return rc;
}

/* Contiguous mode: keeps the last f->keep frames in w->cbuf, or in the op's home in host
 * memory (the `added` newest of them: the others are in their slots from `first` already). */
static int keep_contig(vae_exec *e, int i, window *w, int first, int added,
                       const vae_op_frames *f) {
    const vae_op *op = &e->p->ops[i];
    if (f->keep == 0) return VAE_OK;
    if (e->off_home && e->off_home[i])
        return ring_copy(e, i, w, first + f->keep - added,
                         (void *)e->frames[f->used + f->keep - added], added, 1);
    if (!w->cbuf) {
        w->cbuf = e->be->v->alloc(e->be, (size_t)(op->kt - 1) * w->frame_bytes);
        if (!w->cbuf) return vae_fail(VAE_ENOMEM, "out of device memory for a cache");
    }
    const void *src = e->frames[f->used];
    if (src == w->cbuf) return VAE_OK;
    return e->be->v->copy(e->be, w->cbuf, src, (size_t)f->keep * w->frame_bytes);
}

int exec_run_windowed(vae_exec *e, int i, const value *x, const value *res, value *y) {
    const vae_op *op = &e->p->ops[i];
    op_state *s = &e->st[i];
    window *w = &s->win;
    /* contiguous mode: x has room in front (or is empty and the cache is contiguous) */
    const int contig = op->in[0] >= 0 && e->win_of[op->in[0]] == i &&
                       (x->t > 0 ? x->base != NULL && x->buf != x->base : w->cache == NULL);
    const int pending = s->clock.pending;
    vae_op_frames f;
    vae_op_step_frames(op, &s->clock, x->t, 0, &f);
    if (x->t > 0) {
        w->frame_bytes = exec_vox_bytes(e, (int64_t)x->h * x->w * x->c);
        w->h = x->h, w->w = x->w, w->c = x->c;
    }
    char *home = e->off_home ? e->off_home[i] : NULL;
    /* the ring: the oldest kept frame's slot now and after this step, the kept frames this step
     * adds (those not from the cache) */
    const int first = home && pending > 0 ? e->off_first[i] : 0;
    const int slots = home ? home_slots(e, i, w) : 0;
    const int next_first = slots > 0 ? (first + f.used) % slots : 0;
    const int added = f.keep - (pending > f.used ? pending - f.used : 0);
    if (home && x->t == 0) { /* nothing new (so no output: the stream rule): the cache stays */
        if (f.t_out > 0)
            return vae_fail(VAE_EINVAL, "internal: %s: output from a cache in host memory alone",
                            op->name);
        y->t = 0, y->c = op->c_out, y->h = y->w = 0;
        return VAE_OK;
    }
    if (home && (int64_t)f.keep * (int64_t)w->frame_bytes > e->off_cap[i])
        return vae_fail(VAE_EINVAL, "internal: the cache of %s in host memory holds %lld bytes, "
                                    "it needs %lld",
                        op->name, (long long)e->off_cap[i],
                        (long long)f.keep * (long long)w->frame_bytes);
    int rc = home && !contig ? home_to_list(e, i, w, first, pending) : VAE_OK;
    if (rc == VAE_OK)
        rc = contig ? gather_contig(e, i, w, first, pending, x, &f)
                    : gather_list(e, op, w, pending, x, &f);
    /* the next cache in host memory is wanted soon: on its way while this op runs */
    if (rc == VAE_OK && home && pending > 0) rc = home_prefetch(e, i);
    if (rc) return rc;
    y->t = f.t_out;
    y->c = op->c_out;
    y->h = y->w = 0;
    if (f.t_out > 0) {
        if ((rc = vae_op_out_size(op, w->h, w->w, &y->h, &y->w))) return rc;
        if (res && (res->t != y->t || res->h != y->h || res->w != y->w || res->c != y->c))
            return vae_fail(VAE_ESHAPE, "residual of %s: [%d,%d,%d,%d] vs [%d,%d,%d,%d]", op->name,
                            res->t, res->h, res->w, res->c, y->t, y->h, y->w, y->c);
        if ((rc = exec_alloc_value(e, y, op->out))) return rc;
        if (op->kind == VAE_OP_CONV)
            rc = e->be->v->conv(e->be, op, s->prep, e->frames, f.total, w->h, w->w,
                                res ? res->buf : NULL, y->buf, f.t_out, y->h, y->w);
        else
            rc = e->be->v->resample(e->be, op, e->frames, f.t_out * op->ft, w->h, w->w, y->buf,
                                    f.t_out);
        if (rc) return rc;
    }
    rc = contig ? keep_contig(e, i, w, next_first, added, &f) : keep_list(e, w, &f);
    if (rc == VAE_OK && home && !contig) rc = list_to_home(e, i, w, next_first, added, f.keep);
    if (rc == VAE_OK && home) e->off_first[i] = next_first;
    return rc;
}
