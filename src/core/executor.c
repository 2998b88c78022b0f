/* executor.c -- streams chunks of frames through a program.
 *
 * Per chunk, ops run in program order. Each value lives from the op that makes it to its last
 * consumer, so peak memory is that of one chunk's live activations plus the caches. Windowed ops
 * (temporal convs, temporal shuffle-down) keep the frames that a later window still needs: at
 * most kt-1 frames each, which is what makes memory independent of the video's length.
 *
 * Contiguous windows: when the input of a temporal conv (kt > 1) is an intermediate value with no
 * other consumer, that value is allocated with kt-1 spare frames in front of it. Before the conv
 * runs, the cached frames (and the front padding at stream start) are copied into that space, so
 * the conv's frame list is one contiguous [frames][h][w][c] tensor that a backend can read in
 * place (no per-tap gather). The cache itself stays a separate buffer of kt-1 frames, so memory
 * between chunks is unchanged. The backend may decline per op (vtbl conv_window, asked at the
 * start of each stream). VAE_EXEC_CONTIG=0 turns this off (frame lists as before).
 *
 * Work graphs: once a step starts from the same state as the step before and that step left the
 * state unchanged (the steady state of a stream: same input buffer and shape, every cache full,
 * the same cache buffers), the step is recorded once as a backend graph (vtbl graph_*) and the
 * following steps in that state replay it: the backend gets the whole chunk's work in one
 * launch, and the executor only replays its bookkeeping (frame counters, MACs). The graph's
 * buffers keep their addresses: blocks released while recording are free again in the backend's
 * allocator, which nothing else uses between steps, and the output buffer stays the graph's. If
 * recording fails, the step runs again normally and graphs stay off for this executor.
 * VAE_EXEC_GRAPH=0 turns graphs off.
 */
#include "executor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

typedef struct window {
    void **cache;     /* kt-1 frame buffers [h][w][c] */
    void *cbuf;       /* contiguous mode: one buffer of kt-1 frames (the cache) */
    int n;            /* frames pending in cache */
    int started;      /* front padding applied */
    void *zero_frame; /* one zero frame, for zero front padding */
    size_t frame_bytes;
    int h, w, c;
} window;

typedef struct op_state {
    void *prep;
    window win;
    int64_t frames_seen; /* input frames of the stream seen (TIME_HEAD / TIME_DROP) */
} op_state;

typedef struct value {
    void *buf;
    void *base; /* the allocation holding buf (a window buffer starts before buf), or NULL */
    int t, h, w, c;
    int refs;
} value;

struct vae_exec {
    const vae_program *p;
    vae_backend *be; /* NULL = dry */
    op_state *st;
    value *val;
    int *uses; /* static number of consumers of each value */
    int *win_of; /* per value: the op whose contiguous window it fills, or -1 */
    int contig;  /* contiguous windows allowed (VAE_EXEC_CONTIG) */
    const void **frames; /* scratch frame-pointer list */
    int frames_cap;
    double macs;
    /* work graph of the steady-state step (see the top of this file) */
    int check;                        /* VAE_EXEC_CHECK=1: every op's output must be finite */
    int graph_ok;                     /* graphs allowed (backend has them, VAE_EXEC_GRAPH) */
    void *graph;                      /* the recorded step, or NULL */
    uint64_t graph_sig;               /* the state it was recorded in */
    value graph_out;                  /* its output value (the buffer stays the graph's) */
    int64_t *graph_seen;              /* per op: frames_seen added by one step */
    double graph_macs;                /* MACs of one step */
    int have_prev;                    /* prev_* are set */
    uint64_t prev_before, prev_after; /* state signatures around the previous step */
};

static size_t vox_bytes(const vae_exec *e, int64_t n) { return (size_t)n * e->be->elem_size; }

/* Which values get a contiguous window (win_of); only between streams (no value is live). */
static void plan_windows(vae_exec *e) {
    const vae_program *p = e->p;
    for (int v = 0; v < p->n_values; v++) e->win_of[v] = -1;
    if (!e->contig) return;
    for (int i = 0; i < p->n_ops; i++) {
        const vae_op *op = &p->ops[i];
        int x = op->in[0];
        if (op->kind != VAE_OP_CONV || op->kt < 2 || x < 0 || x == p->input || x == p->output ||
            op->in[1] == x || e->uses[x] != 1 || op->tpad > op->kt - 1)
            continue;
        if (e->be->v->conv_window && !e->be->v->conv_window(e->be, op, e->st[i].prep)) continue;
        e->win_of[x] = i;
    }
}

int vae_exec_create(vae_exec **out, const vae_program *p, vae_backend *be) {
    vae_exec *e = vae_calloc(1, sizeof *e);
    if (!e) return vae_fail(VAE_ENOMEM, "out of memory creating an executor");
    e->p = p;
    e->be = be;
    e->st = vae_calloc((size_t)p->n_ops + 1, sizeof *e->st);
    e->val = vae_calloc((size_t)p->n_values, sizeof *e->val);
    e->uses = vae_calloc((size_t)p->n_values, sizeof *e->uses);
    e->win_of = vae_calloc((size_t)p->n_values, sizeof *e->win_of);
    e->graph_seen = vae_calloc((size_t)p->n_ops + 1, sizeof *e->graph_seen);
    if (!e->st || !e->val || !e->uses || !e->win_of || !e->graph_seen) {
        vae_exec_free(e);
        return vae_fail(VAE_ENOMEM, "out of memory creating an executor");
    }
    for (int i = 0; i < p->n_ops; i++)
        for (int k = 0; k < 2; k++)
            if (p->ops[i].in[k] >= 0) e->uses[p->ops[i].in[k]]++;
    const char *contig = getenv("VAE_EXEC_CONTIG"), *graph = getenv("VAE_EXEC_GRAPH");
    e->contig = be && !(contig && contig[0] == '0');
    const char *check = getenv("VAE_EXEC_CHECK");
    e->check = check && check[0] == '1';
    e->graph_ok = !e->check && be && be->v->graph_begin && be->v->graph_end &&
                  be->v->graph_launch && be->v->graph_free && !(graph && graph[0] == '0');
    for (int i = 0; i < p->n_ops; i++)
        if (p->ops[i].up > 1 && (p->ops[i].kind != VAE_OP_CONV || vae_op_is_windowed(&p->ops[i]))) {
            vae_exec_free(e);
            return vae_fail(VAE_EUNSUPPORTED, "%s: input upsampling only for non-temporal convs",
                            p->ops[i].name);
        }
    if (be) {
        for (int i = 0; i < p->n_ops; i++) {
            int rc = be->v->prepare(be, &p->ops[i], &e->st[i].prep);
            if (rc) {
                vae_exec_free(e);
                return vae_fail(rc, "preparing weights of %s failed", p->ops[i].name);
            }
        }
    }
    plan_windows(e);
    *out = e;
    return VAE_OK;
}

/* Gives a value's buffer back to the backend (its whole allocation), unless it is the graph's
 * output buffer (the graph keeps that one). */
static void value_free(vae_exec *e, value *v) {
    void *p = v->base ? v->base : v->buf;
    if (p && e->be && !(e->graph && v->buf == e->graph_out.buf)) e->be->v->release(e->be, p);
    v->buf = v->base = NULL;
}

/* Forgets the recorded graph and gives its output buffer back. */
static void graph_drop(vae_exec *e) {
    if (!e->graph) return;
    e->be->v->graph_free(e->be, e->graph);
    e->graph = NULL;
    void *p = e->graph_out.base ? e->graph_out.base : e->graph_out.buf;
    if (p) e->be->v->release(e->be, p);
    memset(&e->graph_out, 0, sizeof e->graph_out);
}

static void window_release(vae_exec *e, window *w, int kt) {
    if (e->be) {
        if (w->cache)
            for (int i = 0; i < kt - 1; i++)
                if (w->cache[i]) e->be->v->release(e->be, w->cache[i]);
        if (w->cbuf) e->be->v->release(e->be, w->cbuf);
        if (w->zero_frame) e->be->v->release(e->be, w->zero_frame);
    }
    vae_free(w->cache);
    memset(w, 0, sizeof *w);
}

static void values_release(vae_exec *e) {
    for (int i = 0; i < e->p->n_values; i++) {
        if (i != e->p->input) value_free(e, &e->val[i]);
        memset(&e->val[i], 0, sizeof e->val[i]);
    }
}

static void exec_clear(vae_exec *e) {
    values_release(e);
    graph_drop(e);
    e->have_prev = 0;
    for (int i = 0; i < e->p->n_ops; i++) {
        window_release(e, &e->st[i].win, e->p->ops[i].kt);
        e->st[i].frames_seen = 0;
    }
    e->macs = 0;
}

void vae_exec_reset(vae_exec *e) {
    exec_clear(e);
    plan_windows(e);
}

void vae_exec_free(vae_exec *e) {
    if (!e) return;
    if (e->st && e->val) exec_clear(e);
    if (e->st && e->be)
        for (int i = 0; i < e->p->n_ops; i++)
            if (e->st[i].prep) e->be->v->unprepare(e->be, &e->p->ops[i], e->st[i].prep);
    vae_free(e->st);
    vae_free(e->val);
    vae_free(e->uses);
    vae_free(e->win_of);
    vae_free(e->graph_seen);
    vae_free(e->frames);
    vae_free(e);
}

double vae_exec_macs(const vae_exec *e) { return e->macs; }

static int frames_reserve(vae_exec *e, int n) {
    if (n <= e->frames_cap) return VAE_OK;
    const void **f = vae_realloc(e->frames, (size_t)n * sizeof *f);
    if (!f) return vae_fail(VAE_ENOMEM, "out of memory");
    e->frames = f;
    e->frames_cap = n;
    return VAE_OK;
}

static int alloc_value(vae_exec *e, value *v) {
    v->buf = v->base = NULL;
    if (!e->be || v->t == 0) return VAE_OK;
    size_t fb = vox_bytes(e, (int64_t)v->h * v->w * v->c), bytes = fb * (size_t)v->t;
    int wi = e->win_of[v - e->val];
    size_t head = wi >= 0 ? (size_t)(e->p->ops[wi].kt - 1) * fb : 0; /* room for the window */
    v->base = e->be->v->alloc(e->be, head + bytes);
    if (!v->base)
        return vae_fail(VAE_ENOMEM, "out of %s memory allocating %zu bytes", e->be->v->name,
                        head + bytes);
    v->buf = (char *)v->base + head;
    return VAE_OK;
}

/* Builds e->frames = window cache ++ front padding (first time) ++ the chunk's frames, and returns
 * the count. For a dry executor only the count matters. */
static int window_gather(vae_exec *e, const vae_op *op, window *w, const value *x, int *count) {
    int pad = 0;
    if (!w->started && x->t > 0) pad = op->tpad;
    int total = w->n + pad + x->t;
    int rc = frames_reserve(e, total + 1);
    if (rc) return rc;
    if (e->be && (x->t > 0 || w->n > 0)) {
        size_t fb = vox_bytes(e, (int64_t)x->h * x->w * x->c);
        if (!w->cache && op->kt > 1) {
            w->cache = vae_calloc((size_t)op->kt - 1, sizeof *w->cache);
            if (!w->cache) return vae_fail(VAE_ENOMEM, "out of memory");
        }
        if (x->t > 0) {
            w->frame_bytes = fb;
            w->h = x->h, w->w = x->w, w->c = x->c;
        }
        int k = 0;
        for (int i = 0; i < w->n; i++) e->frames[k++] = w->cache[i];
        if (pad > 0 && op->tpad_mode == VAE_TPAD_ZERO && !w->zero_frame) {
            w->zero_frame = e->be->v->alloc(e->be, fb);
            if (!w->zero_frame) return vae_fail(VAE_ENOMEM, "out of device memory");
            rc = e->be->v->zero(e->be, w->zero_frame, fb);
            if (rc) return rc;
        }
        for (int i = 0; i < pad; i++)
            e->frames[k++] = op->tpad_mode == VAE_TPAD_ZERO ? w->zero_frame : x->buf;
        for (int i = 0; i < x->t; i++) e->frames[k++] = (const char *)x->buf + (size_t)i * fb;
    }
    if (x->t > 0) {
        w->started = 1;
        if (!e->be) w->h = x->h, w->w = x->w, w->c = x->c;
    }
    *count = total;
    return VAE_OK;
}

/* Keeps frames [used, total) of e->frames as the new cache (at most kt-1 frames). Destination
 * slot j <= source slot when the source is itself a cache slot, so copying forward is safe. */
static int window_keep(vae_exec *e, const vae_op *op, window *w, int total, int used) {
    int keep = total - used;
    if (keep > op->kt - 1) keep = op->kt - 1, used = total - keep;
    if (e->be) {
        for (int j = 0; j < keep; j++) {
            const void *src = e->frames[used + j];
            if (!w->cache[j]) {
                w->cache[j] = e->be->v->alloc(e->be, w->frame_bytes);
                if (!w->cache[j]) return vae_fail(VAE_ENOMEM, "out of device memory for a cache");
            }
            if (src != w->cache[j]) {
                int rc = e->be->v->copy(e->be, w->cache[j], src, w->frame_bytes);
                if (rc) return rc;
            }
        }
    }
    w->n = keep;
    return VAE_OK;
}

/* Contiguous mode (x was allocated with kt-1 spare frames in front, see alloc_value): the cached
 * frames and any front padding are copied in front of x's frames, so that e->frames lists one
 * contiguous tensor. Returns VAE_EAGAIN-free codes only; *count as window_gather. */
static int window_gather_contig(vae_exec *e, const vae_op *op, window *w, const value *x,
                                int *count) {
    vae_backend *be = e->be;
    int pad = (!w->started && x->t > 0) ? op->tpad : 0;
    int total = w->n + pad + x->t;
    int rc = frames_reserve(e, total + 1);
    if (rc) return rc;
    if (x->t > 0) {
        size_t fb = vox_bytes(e, (int64_t)x->h * x->w * x->c);
        w->frame_bytes = fb;
        w->h = x->h, w->w = x->w, w->c = x->c;
        char *head = (char *)x->buf - (size_t)(w->n + pad) * fb; /* inside x's allocation */
        if (w->n > 0 && (rc = be->v->copy(be, head, w->cbuf, (size_t)w->n * fb))) return rc;
        for (int i = 0; i < pad && rc == VAE_OK; i++) {
            char *slot = head + (size_t)(w->n + i) * fb;
            rc = op->tpad_mode == VAE_TPAD_ZERO ? be->v->zero(be, slot, fb)
                                                : be->v->copy(be, slot, x->buf, fb);
        }
        if (rc) return rc;
        for (int k = 0; k < total; k++) e->frames[k] = head + (size_t)k * w->frame_bytes;
        w->started = 1;
    } else {
        for (int k = 0; k < total; k++)
            e->frames[k] = (char *)w->cbuf + (size_t)k * w->frame_bytes;
    }
    *count = total;
    return VAE_OK;
}

/* Contiguous mode: keeps frames [used, total) (at most kt-1) in w->cbuf. */
static int window_keep_contig(vae_exec *e, const vae_op *op, window *w, int total, int used) {
    int keep = total - used;
    if (keep > op->kt - 1) keep = op->kt - 1, used = total - keep;
    if (keep > 0) {
        if (!w->cbuf) {
            w->cbuf = e->be->v->alloc(e->be, (size_t)(op->kt - 1) * w->frame_bytes);
            if (!w->cbuf) return vae_fail(VAE_ENOMEM, "out of device memory for a cache");
        }
        const void *src = e->frames[used];
        if (src != w->cbuf) {
            int rc = e->be->v->copy(e->be, w->cbuf, src, (size_t)keep * w->frame_bytes);
            if (rc) return rc;
        }
    }
    w->n = keep;
    return VAE_OK;
}

static int run_windowed(vae_exec *e, const vae_op *op, op_state *s, const value *x, value *y) {
    /* contiguous mode: x has room in front (or is empty and the cache is contiguous) */
    const int contig = e->be && op->in[0] >= 0 && e->win_of[op->in[0]] == op - e->p->ops &&
                       (x->t > 0 ? x->base != NULL && x->buf != x->base : s->win.cache == NULL);
    int total = 0, rc = contig ? window_gather_contig(e, op, &s->win, x, &total)
                               : window_gather(e, op, &s->win, x, &total);
    if (rc) return rc;
    int t_out = total >= op->kt ? (total - op->kt) / op->st + 1 : 0;
    const window *w = &s->win;
    int h = w->h, wd = w->w;
    y->c = op->c_out;
    if (op->kind == VAE_OP_CONV) {
        y->h = (h + op->pad_h[0] + op->pad_h[1] - op->kh) / op->sh + 1;
        y->w = (wd + op->pad_w[0] + op->pad_w[1] - op->kw) / op->sw + 1;
    } else {
        y->h = h / op->fs;
        y->w = wd / op->fs;
    }
    y->t = t_out;
    if (t_out > 0) {
        if ((rc = alloc_value(e, y))) return rc;
        if (e->be) {
            const value *res = op->in[1] >= 0 ? &e->val[op->in[1]] : NULL;
            if (op->kind == VAE_OP_CONV)
                rc = e->be->v->conv(e->be, op, s->prep, e->frames, total, h, wd,
                                    res ? res->buf : NULL, y->buf, t_out, y->h, y->w);
            else
                rc = e->be->v->resample(e->be, op, e->frames, t_out * op->ft, h, wd, y->buf, t_out);
            if (rc) return rc;
        }
    }
    return contig ? window_keep_contig(e, op, &s->win, total, t_out * op->st)
                  : window_keep(e, op, &s->win, total, t_out * op->st);
}

static int copy_frames(vae_exec *e, void *dst, const value *x, int from, int n) {
    if (!e->be || n == 0) return VAE_OK;
    size_t fb = vox_bytes(e, (int64_t)x->h * x->w * x->c);
    return e->be->v->copy(e->be, dst, (const char *)x->buf + (size_t)from * fb, (size_t)n * fb);
}

static int check_same(const vae_op *op, const value *a, const value *b, const char *what) {
    if (a->t == b->t && a->h == b->h && a->w == b->w && a->c == b->c) return VAE_OK;
    return vae_fail(VAE_ESHAPE,
                    "%s %s: inputs differ in shape ([%d,%d,%d,%d] vs [%d,%d,%d,%d]); the input "
                    "size is not one this model can process",
                    what, op->name, a->t, a->h, a->w, a->c, b->t, b->h, b->w, b->c);
}

/* A non-windowed conv over x's frames; up > 1: x upsampled first (by the backend itself when it
 * can, else into a temporary here). */
static int conv_plain(vae_exec *e, const vae_op *op, op_state *s, const value *x, const value *x2,
                      value *y, int up) {
    vae_backend *be = e->be;
    int rc = frames_reserve(e, x->t);
    if (rc) return rc;
    const void *res = x2 ? x2->buf : NULL;
    if (up > 1 && !be->v->conv_upsample) {
        const int hu = x->h * up, wu = x->w * up;
        const size_t fbu = vox_bytes(e, (int64_t)hu * wu * x->c);
        void *tmp = be->v->alloc(be, fbu * (size_t)x->t);
        if (!tmp) return vae_fail(VAE_ENOMEM, "out of %s memory upsampling the input of %s",
                                  be->v->name, op->name);
        vae_op u = vae_op_make(VAE_OP_UPSAMPLE, op->in[0], x->c, x->c);
        u.fs = up;
        snprintf(u.name, sizeof u.name, "%.80s.upsample", op->name);
        size_t fb = vox_bytes(e, (int64_t)x->h * x->w * x->c);
        for (int f = 0; f < x->t; f++) e->frames[f] = (const char *)x->buf + (size_t)f * fb;
        rc = be->v->resample(be, &u, e->frames, x->t, x->h, x->w, tmp, x->t);
        if (rc == VAE_OK) {
            vae_op o = *op;
            o.up = 0;
            for (int f = 0; f < x->t; f++) e->frames[f] = (const char *)tmp + (size_t)f * fbu;
            rc = be->v->conv(be, &o, s->prep, e->frames, x->t, hu, wu, res, y->buf, y->t, y->h,
                             y->w);
        }
        be->v->release(be, tmp);
        return rc;
    }
    size_t fb = vox_bytes(e, (int64_t)x->h * x->w * x->c);
    for (int f = 0; f < x->t; f++) e->frames[f] = (const char *)x->buf + (size_t)f * fb;
    return be->v->conv(be, op, s->prep, e->frames, x->t, x->h, x->w, res, y->buf, y->t, y->h,
                       y->w);
}

static int run_op(vae_exec *e, int i) {
    const vae_op *op = &e->p->ops[i];
    op_state *s = &e->st[i];
    const value *x = &e->val[op->in[0]];
    const value *x2 = op->in[1] >= 0 ? &e->val[op->in[1]] : NULL;
    value *y = &e->val[op->out];
    vae_backend *be = e->be;
    int rc = VAE_OK;
    *y = (value){.buf = NULL, .base = NULL, .t = x->t, .h = x->h, .w = x->w, .c = op->c_out};

    if (x->t > 0 && x->c != op->c_in)
        return vae_fail(VAE_ESHAPE, "op %s: input has %d channels, expected %d", op->name, x->c,
                        op->c_in);
    switch (op->kind) {
    case VAE_OP_CONV:
        if (vae_op_is_windowed(op)) {
            rc = run_windowed(e, op, s, x, y);
        } else {
            const int up = op->up > 1 ? op->up : 1; /* input upsampling (nearest) */
            y->h = (x->h * up + op->pad_h[0] + op->pad_h[1] - op->kh) / op->sh + 1;
            y->w = (x->w * up + op->pad_w[0] + op->pad_w[1] - op->kw) / op->sw + 1;
            if (x->t > 0 && (rc = alloc_value(e, y)) == VAE_OK && be)
                rc = conv_plain(e, op, s, x, x2, y, up);
        }
        if (rc == VAE_OK && y->t > 0 && (y->h <= 0 || y->w <= 0))
            return vae_fail(VAE_ESHAPE, "op %s: input %dx%d is too small", op->name, x->h, x->w);
        if (rc == VAE_OK && x2 && y->t > 0) rc = check_same(op, y, x2, "residual of");
        e->macs += (double)y->t * y->h * y->w * y->c * op->c_in * op->kt * op->kh * op->kw;
        break;
    case VAE_OP_RMS_NORM:
    case VAE_OP_GROUP_NORM:
        if (x->t > 0 && (rc = alloc_value(e, y)) == VAE_OK && be)
            rc = be->v->norm(be, op, s->prep, x->buf, y->buf, x->t, x->h, x->w);
        break;
    case VAE_OP_ACT:
    case VAE_OP_SCALE_SHIFT:
    case VAE_OP_ADD:
        if (x2 && (rc = check_same(op, x, x2, "add"))) return rc;
        if (x->t > 0 && (rc = alloc_value(e, y)) == VAE_OK && be)
            rc = be->v->eltwise(be, op, s->prep, x->buf, x2 ? x2->buf : NULL, y->buf,
                                (int64_t)x->t * x->h * x->w);
        break;
    case VAE_OP_UPSAMPLE:
    case VAE_OP_SHUFFLE_UP:
        y->t = x->t * op->ft;
        y->h = x->h * op->fs;
        y->w = x->w * op->fs;
        if (x->t > 0 && (rc = alloc_value(e, y)) == VAE_OK && be) {
            if ((rc = frames_reserve(e, x->t))) return rc;
            size_t fb = vox_bytes(e, (int64_t)x->h * x->w * x->c);
            for (int f = 0; f < x->t; f++) e->frames[f] = (const char *)x->buf + (size_t)f * fb;
            rc = be->v->resample(be, op, e->frames, x->t, x->h, x->w, y->buf, y->t);
        }
        break;
    case VAE_OP_SHUFFLE_DOWN:
        if (x->t > 0 && (x->h % op->fs || x->w % op->fs))
            return vae_fail(VAE_ESHAPE, "op %s: size %dx%d is not a multiple of %d", op->name,
                            x->h, x->w, op->fs);
        if (vae_op_is_windowed(op)) {
            rc = run_windowed(e, op, s, x, y);
        } else {
            y->h = x->h / op->fs;
            y->w = x->w / op->fs;
            if (x->t > 0 && (rc = alloc_value(e, y)) == VAE_OK && be) {
                if ((rc = frames_reserve(e, x->t))) return rc;
                size_t fb = vox_bytes(e, (int64_t)x->h * x->w * x->c);
                for (int f = 0; f < x->t; f++) e->frames[f] = (const char *)x->buf + (size_t)f * fb;
                rc = be->v->resample(be, op, e->frames, x->t, x->h, x->w, y->buf, y->t);
            }
        }
        break;
    case VAE_OP_TIME_HEAD:
    case VAE_OP_TIME_DROP: {
        int64_t before = s->frames_seen;
        s->frames_seen += x->t;
        int in_head = (int)(before >= op->n ? 0 : (op->n - before < x->t ? op->n - before : x->t));
        int from = op->kind == VAE_OP_TIME_HEAD ? 0 : in_head;
        y->t = op->kind == VAE_OP_TIME_HEAD ? in_head : x->t - in_head;
        if (y->t > 0 && (rc = alloc_value(e, y)) == VAE_OK) rc = copy_frames(e, y->buf, x, from, y->t);
        break;
    }
    case VAE_OP_CONCAT_T:
        if (x->t > 0 && x2->t > 0 && (x->h != x2->h || x->w != x2->w || x->c != x2->c))
            return check_same(op, x, x2, "concat");
        if (x->t == 0) y->h = x2->h, y->w = x2->w;
        y->t = x->t + x2->t;
        if (y->t > 0 && (rc = alloc_value(e, y)) == VAE_OK) {
            rc = copy_frames(e, y->buf, x, 0, x->t);
            if (rc == VAE_OK && be && x2->t > 0)
                rc = copy_frames(e, (char *)y->buf + vox_bytes(e, (int64_t)x->t * x->h * x->w * x->c),
                                 x2, 0, x2->t);
        }
        break;
    case VAE_OP_ATTENTION:
        if (x->t > 0 && (rc = alloc_value(e, y)) == VAE_OK && be)
            rc = be->v->attention(be, op, s->prep, x->buf, y->buf, x->t, x->h, x->w);
        e->macs += 2.0 * x->t * (double)x->h * x->w * x->h * x->w * op->c_out;
        break;
    default: return vae_fail(VAE_EINVAL, "internal: unknown op kind %d", (int)op->kind);
    }
    if (rc) return rc;
    y->refs = e->uses[op->out];
    if (y->refs == 0 && op->out != e->p->output && y->buf && be) /* dead value */
        value_free(e, y);
    /* Inputs whose last consumer this was are released now: peak memory stays one layer wide. */
    for (int k = 0; k < 2; k++) {
        int v = op->in[k];
        if (v < 0 || (k == 1 && v == op->in[0])) continue;
        value *iv = &e->val[v];
        int dec = (k == 0 && op->in[1] == v) ? 2 : 1;
        iv->refs -= dec;
        if (iv->refs <= 0 && v != e->p->input && v != e->p->output) {
            if (be) value_free(e, iv);
            iv->buf = iv->base = NULL;
        }
    }
    return VAE_OK;
}

/* FNV-1a over what decides a step's work and buffers: the input, and every op's stream state. */
static uint64_t sig_mix(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++, v >>= 8)
        h = (h ^ (v & 0xff)) * 0x100000001b3ull;
    return h;
}

static uint64_t state_sig(const vae_exec *e, const vae_chunk *in) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = sig_mix(h, (uint64_t)(uintptr_t)in->data);
    h = sig_mix(h, ((uint64_t)(uint32_t)in->t << 32) | (uint32_t)in->h);
    h = sig_mix(h, ((uint64_t)(uint32_t)in->w << 32) | (uint32_t)in->c);
    for (int i = 0; i < e->p->n_ops; i++) {
        const vae_op *op = &e->p->ops[i];
        const op_state *s = &e->st[i];
        const window *w = &s->win;
        int64_t seen = s->frames_seen < op->n ? s->frames_seen : op->n;
        h = sig_mix(h, ((uint64_t)(uint32_t)w->n << 33) | ((uint64_t)w->started << 32) |
                           (uint32_t)seen);
        h = sig_mix(h, (uint64_t)(uintptr_t)w->cbuf);
        h = sig_mix(h, (uint64_t)(uintptr_t)w->zero_frame);
        for (int k = 0; w->cache && k < op->kt - 1; k++)
            h = sig_mix(h, (uint64_t)(uintptr_t)w->cache[k]);
    }
    return h;
}

/* VAE_EXEC_CHECK=1: the op's output is read back and must be finite (test mode: names the first
 * op that makes a NaN or Inf, e.g. from memory it read before anything wrote it) */
static int check_output(vae_exec *e, int i) {
    const vae_op *op = &e->p->ops[i];
    const value *y = &e->val[op->out];
    if (!y->buf || y->t == 0) return VAE_OK;
    const size_t n = (size_t)y->t * y->h * y->w * y->c;
    float *host = vae_malloc(n * sizeof *host);
    if (!host) return vae_fail(VAE_ENOMEM, "out of memory checking %s", op->name);
    int rc = e->be->v->download(e->be, host, y->buf, n);
    const size_t plane = (size_t)y->h * y->w;
    for (size_t k = 0; rc == VAE_OK && k < n; k++)
        if (!isfinite(host[k]))
            rc = vae_fail(VAE_ENAN,
                          "op %d (%s) output [%d,%d,%d,%d]: non-finite at frame %d, pixel %lld, "
                          "channel %d (VAE_EXEC_CHECK)",
                          i, op->name, y->t, y->h, y->w, y->c, (int)(k / (plane * y->c)),
                          (long long)(k / (size_t)y->c % plane), (int)(k % (size_t)y->c));
    vae_free(host);
    return rc;
}

static int run_ops(vae_exec *e) {
    for (int i = 0; i < e->p->n_ops; i++) {
        int rc = run_op(e, i);
        if (rc == VAE_OK && e->check && e->be) rc = check_output(e, i);
        if (rc) {
            values_release(e);
            return rc;
        }
    }
    return VAE_OK;
}

/* Runs the step while the backend records it; keeps the graph and launches it (recording runs
 * nothing). VAE_EUNSUPPORTED when the step could not be recorded: the executor's state is then as
 * before the call (a steady step leaves it unchanged) and the caller runs the step normally. */
static int step_record(vae_exec *e, uint64_t sig) {
    vae_backend *be = e->be;
    const vae_program *p = e->p;
    for (int i = 0; i < p->n_ops; i++)
        e->graph_seen[i] = e->st[i].frames_seen;
    const double macs0 = e->macs;
    const value in = e->val[p->input]; /* a failing run_ops clears every value, the input too */
    int rc = be->v->graph_begin(be);
    if (rc == VAE_OK) {
        void *g = NULL;
        rc = run_ops(e);
        int rc_end = be->v->graph_end(be, &g); /* always: it ends the recording */
        if (rc == VAE_OK && rc_end == VAE_OK && g) {
            e->graph = g;
            e->graph_sig = sig;
            e->graph_out = e->val[p->output];
            for (int i = 0; i < p->n_ops; i++)
                e->graph_seen[i] = e->st[i].frames_seen - e->graph_seen[i];
            e->graph_macs = e->macs - macs0;
            VAE_DEBUG("executor: steady-state step recorded as a graph (%d ops)", p->n_ops);
            return be->v->graph_launch(be, g);
        }
        if (g) be->v->graph_free(be, g);
        if (rc == VAE_OK) rc = rc_end;
        values_release(e);
        e->val[p->input] = in;
    }
    VAE_DEBUG("executor: step not recorded as a graph (%s); running ops one by one",
              rc ? vae_last_error() : "no graph");
    for (int i = 0; i < p->n_ops; i++)
        e->st[i].frames_seen = e->graph_seen[i];
    e->macs = macs0;
    e->graph_ok = 0;
    vae_error_clear();
    return VAE_EUNSUPPORTED;
}

int vae_exec_step(vae_exec *e, const vae_chunk *in, vae_chunk *out) {
    const vae_program *p = e->p;
    /* the previous chunk's output is released now that the caller is done with it */
    value *o = &e->val[p->output];
    if (p->output != p->input) value_free(e, o);
    o->buf = o->base = NULL;
    if (in->c != p->in_channels)
        return vae_fail(VAE_ESHAPE, "input has %d channels, the model expects %d", in->c,
                        p->in_channels);
    e->val[p->input] = (value){.buf = in->data, .base = NULL, .t = in->t, .h = in->h, .w = in->w,
                               .c = in->c, .refs = e->uses[p->input]};
    int rc = VAE_EUNSUPPORTED;
    if (e->be && (e->graph || e->graph_ok)) {
        const uint64_t sig = state_sig(e, in);
        const int replay = e->graph && sig == e->graph_sig;
        /* the state before this step is the one before and after the previous step */
        const int steady = e->graph_ok && e->have_prev && sig == e->prev_before &&
                           e->prev_before == e->prev_after;
        VAE_DEBUG("executor: step of %d frames %dx%d: %s", in->t, in->h, in->w,
                  replay ? "graph replay" : steady ? "recording" : "ops");
        if (replay) {
            if ((rc = e->be->v->graph_launch(e->be, e->graph))) return rc;
            for (int i = 0; i < p->n_ops; i++)
                e->st[i].frames_seen += e->graph_seen[i];
            e->macs += e->graph_macs;
            e->val[p->output] = e->graph_out;
        } else {
            graph_drop(e);
            if (steady) rc = step_record(e, sig);
        }
        if (rc == VAE_EUNSUPPORTED) rc = run_ops(e);
        if (rc) return rc;
        e->prev_before = sig;
        e->prev_after = state_sig(e, in);
        e->have_prev = 1;
    } else if ((rc = run_ops(e))) {
        return rc;
    }
    o = &e->val[p->output];
    *out = (vae_chunk){o->buf, o->t, o->h, o->w, o->c};
    e->val[p->input].buf = NULL;
    return VAE_OK;
}
