/* executor.c -- streams chunks of frames through a program.
 *
 * Per chunk, ops run in program order. Each value lives from the op that makes it to its last
 * consumer, so peak memory is that of one chunk's live activations plus the caches (windowed ops,
 * exec_window.c). Shapes and stream rules come from op.h.
 *
 * Frame loops (vae_exec_config.loops): at a loop boundary the values crossing it are cut into
 * single frames and the rest of the program runs once per frame, depth first (a later boundary
 * cuts again). The step's output frames are gathered into one buffer. Trims crop those frames
 * first (spatial tiles: the planner's regions).
 *
 * Work graphs: once a step starts from the same state as the step before and that step left the
 * state unchanged (the steady state of a stream: same input buffer and shape, every cache full,
 * the same cache buffers), the step is recorded once as a backend graph (vtbl graph_*) and the
 * following steps in that state replay it: the backend gets the whole chunk's work in one
 * launch, and the executor only replays its bookkeeping (frame counters). The graph's buffers
 * keep their addresses: blocks released while recording are free again in the backend's
 * allocator, which nothing else may use between steps, and the output buffer stays the graph's.
 * If recording fails, the step runs again normally and graphs stay off for this executor.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "core.h"
#include "exec_internal.h"

size_t exec_vox_bytes(const vae_exec *e, int64_t n) {
    return (size_t)n * e->be->elem_size;
}

int exec_frames_reserve(vae_exec *e, int n) {
    if (n <= e->frames_cap) return VAE_OK;
    const void **f = vae_realloc(e->frames, (size_t)n * sizeof *f);
    if (!f) return vae_fail(VAE_ENOMEM, "out of memory");
    e->frames = f;
    e->frames_cap = n;
    return VAE_OK;
}

/* Allocates v's buffer (with kt-1 spare frames in front when it fills a contiguous window, or
 * when such a window's value may take it over: e->head). */
int exec_alloc_value(vae_exec *e, value *v, int v_id) {
    v->buf = v->base = NULL;
    v->kind = VALUE_OWNED;
    if (v->t == 0) return VAE_OK;
    size_t fb = exec_vox_bytes(e, (int64_t)v->h * v->w * v->c), bytes = fb * (size_t)v->t;
    size_t head = (size_t)e->head[v_id] * fb; /* room for a window */
    v->base = e->be->v->alloc(e->be, head + bytes);
    if (!v->base)
        return vae_fail(VAE_ENOMEM, "out of %s memory allocating %zu bytes", e->be->v->name,
                        head + bytes);
    v->buf = (char *)v->base + head;
    return VAE_OK;
}

/* Which values get a contiguous window (win_of) and room in front (head); only between streams
 * (no value is live). */
static void plan_windows(vae_exec *e) {
    const vae_program *p = e->p;
    for (int v = 0; v < p->n_values; v++)
        e->win_of[v] = -1;
    if (!e->set.exec_contig) return;
    for (int i = 0; i < p->n_ops; i++) {
        const vae_op *op = &p->ops[i];
        if (!vae_program_window_ok(p, i, e->uses) || e->trims[op->in[0]].on) continue;
        if (e->be->v->conv_window && !e->be->v->conv_window(e->be, op, e->st[i].prep)) continue;
        e->win_of[op->in[0]] = i;
    }
    vae_program_heads(p, e->win_of, e->head);
    for (int v = 0; v < p->n_values; v++)
        if (e->trims[v].on) e->head[v] = 0; /* its trims have no room (cut_frames) */
}

int vae_exec_create(vae_exec **out, const vae_program *p, vae_backend *be,
                    const vae_exec_config *cfg) {
    if (!be) return vae_fail(VAE_EINVAL, "executor: no backend");
    vae_exec *e = vae_calloc(1, sizeof *e);
    if (!e) return vae_fail(VAE_ENOMEM, "out of memory creating an executor");
    e->p = p;
    e->be = be;
    if (cfg && cfg->settings)
        e->set = *cfg->settings;
    else
        vae_settings_default(&e->set);
    e->st = vae_calloc((size_t)p->n_ops + 1, sizeof *e->st);
    e->val = vae_calloc((size_t)p->n_values, sizeof *e->val);
    e->uses = vae_calloc((size_t)p->n_values, sizeof *e->uses);
    e->win_of = vae_calloc((size_t)p->n_values, sizeof *e->win_of);
    e->head = vae_calloc((size_t)p->n_values, sizeof *e->head);
    e->trims = vae_calloc((size_t)p->n_values, sizeof *e->trims);
    e->graph_seen = vae_calloc((size_t)p->n_ops + 1, sizeof *e->graph_seen);
    e->clk = vae_calloc((size_t)p->n_ops + 1, sizeof *e->clk);
    e->tv = vae_calloc((size_t)p->n_values, sizeof *e->tv);
    int rc = VAE_OK;
    if (!e->st || !e->val || !e->uses || !e->win_of || !e->head || !e->trims || !e->graph_seen ||
        !e->clk || !e->tv)
        rc = vae_fail(VAE_ENOMEM, "out of memory creating an executor");
    for (int i = 0; rc == VAE_OK && i < p->n_ops; i++)
        rc = vae_op_check(&p->ops[i]);
    if (rc == VAE_OK) vae_program_count_readers(p, e->uses);
    if (rc == VAE_OK)
        rc = vae_loops_init(&e->loops, p, cfg ? cfg->loops : NULL, cfg ? cfg->whole : NULL,
                            cfg ? cfg->n_loops : 0);
    if (rc == VAE_OK && cfg) e->loops.width = cfg->loop_width;
    e->graph_ok = !e->set.exec_check && e->set.exec_graph && be->v->graph_begin &&
                  be->v->graph_end && be->v->graph_launch && be->v->graph_free;
    for (int i = 0; rc == VAE_OK && i < p->n_ops; i++)
        if ((rc = be->v->prepare(be, &p->ops[i], &e->st[i].prep)))
            rc = vae_fail(rc, "preparing weights of %s failed", p->ops[i].name);
    if (rc) {
        vae_exec_free(e);
        return rc;
    }
    plan_windows(e);
    *out = e;
    return VAE_OK;
}

/* Gives a value's buffer back to the backend (its whole allocation), unless it is a view or the
 * graph's output buffer (the graph keeps that one). */
static void value_free(vae_exec *e, value *v) {
    void *p = v->base ? v->base : v->buf;
    if (p && v->kind != VALUE_VIEW && !(e->graph && v->buf == e->graph_out.buf))
        e->be->v->release(e->be, p);
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

static void values_release(vae_exec *e) {
    for (int i = 0; i < e->p->n_values; i++) {
        if (i != e->p->input) value_free(e, &e->val[i]);
        memset(&e->val[i], 0, sizeof e->val[i]);
    }
    if (e->gather.buf && !(e->graph && e->gather.buf == e->graph_out.buf))
        value_free(e, &e->gather);
    memset(&e->gather, 0, sizeof e->gather);
}

static void exec_clear(vae_exec *e) {
    values_release(e);
    graph_drop(e);
    e->have_prev = 0;
    for (int i = 0; i < e->p->n_ops; i++) {
        exec_window_release(e, &e->st[i].win, e->p->ops[i].kt);
        memset(&e->st[i].clock, 0, sizeof e->st[i].clock);
    }
}

void vae_exec_reset(vae_exec *e) {
    exec_clear(e);
    e->marked = 0;
    if (e->strips) memset(e->carry_frames, 0, (size_t)e->strips->n_carry * sizeof *e->carry_frames);
    memset(e->trims, 0, (size_t)e->p->n_values * sizeof *e->trims);
    plan_windows(e);
}

int vae_exec_set_trim(vae_exec *e, int v, int y0, int x0, int h, int w) {
    int crossing = 0;
    for (int k = 0; k < e->loops.cross_at[e->loops.n]; k++)
        crossing |= e->loops.cross[k] == v;
    if (v < 0 || v >= e->p->n_values || !crossing || y0 < 0 || x0 < 0 || h < 0 || w < 0 ||
        (h > 0) != (w > 0))
        return vae_fail(VAE_EINVAL, "executor: trim of value %d (%d,%d %dx%d) at no frame loop", v,
                        y0, x0, h, w);
    e->trims[v] = (trim){h > 0, y0, x0, h, w};
    plan_windows(e);
    return VAE_OK;
}

void vae_exec_free(vae_exec *e) {
    if (!e) return;
    if (e->st && e->val) exec_clear(e);
    exec_strip_release(e);
    exec_offload_release(e);
    if (e->st)
        for (int i = 0; i < e->p->n_ops; i++)
            if (e->st[i].prep) e->be->v->unprepare(e->be, &e->p->ops[i], e->st[i].prep);
    vae_free(e->st);
    vae_free(e->val);
    vae_free(e->uses);
    vae_free(e->win_of);
    vae_free(e->head);
    vae_free(e->trims);
    vae_loops_free(&e->loops);
    vae_free(e->clk);
    vae_free(e->tv);
    vae_free(e->graph_seen);
    vae_free(e->frames);
    exec_reduce_release(e);
    vae_free(e);
}

/* ---- one op ---------------------------------------------------------------------------------- */
static int copy_frames(vae_exec *e, void *dst, const value *x, int from, int n) {
    if (n == 0) return VAE_OK;
    size_t fb = exec_vox_bytes(e, (int64_t)x->h * x->w * x->c);
    return e->be->v->copy(e->be, dst, (const char *)x->buf + (size_t)from * fb, (size_t)n * fb);
}

static int check_same(const vae_op *op, const value *a, const value *b, const char *what) {
    if (a->t == b->t && a->h == b->h && a->w == b->w && a->c == b->c) return VAE_OK;
    return vae_fail(VAE_ESHAPE,
                    "%s %s: inputs differ in shape ([%d,%d,%d,%d] vs [%d,%d,%d,%d]); the input "
                    "size is not one this model can process",
                    what, op->name, a->t, a->h, a->w, a->c, b->t, b->h, b->w, b->c);
}

/* e->frames = the frames of x. */
static int list_frames(vae_exec *e, const value *x) {
    int rc = exec_frames_reserve(e, x->t);
    size_t fb = exec_vox_bytes(e, (int64_t)x->h * x->w * x->c);
    for (int f = 0; rc == VAE_OK && f < x->t; f++)
        e->frames[f] = (const char *)x->buf + f * fb;
    return rc;
}

/* A non-windowed conv over x's frames; up > 1: x upsampled first (by the backend itself when it
 * can, else into a temporary here). */
static int conv_plain(vae_exec *e, const vae_op *op, op_state *s, const value *x, const value *x2,
                      value *y) {
    vae_backend *be = e->be;
    const void *res = x2 ? x2->buf : NULL;
    int rc = list_frames(e, x);
    if (rc) return rc;
    if (op->up <= 1 || be->v->conv_upsample)
        return be->v->conv(be, op, s->prep, e->frames, x->t, x->h, x->w, res, y->buf, y->t, y->h,
                           y->w);
    vae_op u = vae_op_make(VAE_OP_UPSAMPLE, op->in[0], x->c, x->c);
    u.fs = op->up;
    snprintf(u.name, sizeof u.name, "%.80s.upsample", op->name);
    const int hu = x->h * op->up, wu = x->w * op->up;
    const size_t fbu = exec_vox_bytes(e, (int64_t)hu * wu * x->c);
    void *tmp = be->v->alloc(be, fbu * (size_t)x->t);
    if (!tmp)
        return vae_fail(VAE_ENOMEM, "out of %s memory upsampling the input of %s", be->v->name,
                        op->name);
    rc = be->v->resample(be, &u, e->frames, x->t, x->h, x->w, tmp, x->t);
    if (rc == VAE_OK) {
        vae_op o = *op;
        o.up = 0;
        for (int f = 0; f < x->t; f++)
            e->frames[f] = (const char *)tmp + (size_t)f * fbu;
        rc = be->v->conv(be, &o, s->prep, e->frames, x->t, hu, wu, res, y->buf, y->t, y->h, y->w);
    }
    be->v->release(be, tmp);
    return rc;
}

/* Op i's output y (shape set) takes over the buffer of its input f->pass, frames [f->from,
 * f->from + y->t), instead of a copy: where this op is that value's last reader, the value is this
 * step's own allocation (not a view or trim of a frame loop, a strip's rebuilt input, the program's
 * input or output) and its buffer has the room y needs in front (e->head: a contiguous window's,
 * given to the value by vae_program_heads; otherwise y is allocated with it). 1: taken (the input's
 * pointers cleared, so its release frees nothing). */
static int value_take(vae_exec *e, int i, const vae_op_frames *f, value *y) {
    const vae_op *op = &e->p->ops[i];
    if (f->pass < 0 || e->strips) return 0;
    const int v = op->in[f->pass], from = f->from;
    value *x = &e->val[v];
    if (x->kind != VALUE_OWNED || x->refs != 1 || !x->buf || v == e->p->input || v == e->p->output)
        return 0;
    const size_t fb = exec_vox_bytes(e, (int64_t)x->h * x->w * x->c);
    char *base = x->base ? x->base : x->buf;
    if ((size_t)((char *)x->buf - base) / fb + (size_t)from < (size_t)e->head[op->out]) return 0;
    y->buf = (char *)x->buf + (size_t)from * fb;
    y->base = base;
    y->kind = VALUE_OWNED;
    x->buf = x->base = NULL;
    return 1;
}

/* Computes op i's output value (shape from op.h, then the backend call). */
static int op_compute(vae_exec *e, int i, const value *x, const value *x2, value *y) {
    const vae_op *op = &e->p->ops[i];
    op_state *s = &e->st[i];
    vae_backend *be = e->be;
    int rc = VAE_OK;
    if (vae_op_is_windowed(op)) return exec_run_windowed(e, i, x, x2, y);
    vae_op_frames f;
    vae_op_step_frames(op, &s->clock, x->t, x2 ? x2->t : 0, &f);
    *y = (value){.t = f.t_out, .h = x->h, .w = x->w, .c = op->c_out};
    switch (op->kind) {
    case VAE_OP_CONV:
    case VAE_OP_UPSAMPLE:
    case VAE_OP_SHUFFLE_UP:
    case VAE_OP_SHUFFLE_DOWN:
        if (x->t == 0) return VAE_OK;
        if ((rc = vae_op_out_size(op, x->h, x->w, &y->h, &y->w))) return rc;
        if (x2 && (rc = check_same(op, y, x2, "residual of"))) return rc;
        if ((rc = exec_alloc_value(e, y, op->out))) return rc;
        if (op->kind == VAE_OP_CONV) return conv_plain(e, op, s, x, x2, y);
        if ((rc = list_frames(e, x))) return rc;
        return be->v->resample(be, op, e->frames, x->t, x->h, x->w, y->buf, y->t);
    case VAE_OP_RMS_NORM:
    case VAE_OP_GROUP_NORM:
        if (x->t == 0 || (rc = exec_alloc_value(e, y, op->out))) return rc;
        if (x->kind == VALUE_IN_PLACE) return exec_strip_norm(e, i, x, y);
        if (e->comm && vae_op_is_reducible(op)) return exec_norm_reduced(e, i, x, y);
        return be->v->norm(be, op, s->prep, x->buf, y->buf, x->t, x->h, x->w);
    case VAE_OP_ACT:
    case VAE_OP_SCALE_SHIFT:
    case VAE_OP_ADD:
        if (x2 && (rc = check_same(op, x, x2, "add"))) return rc;
        if (x->t == 0 || (rc = exec_alloc_value(e, y, op->out))) return rc;
        return be->v->eltwise(be, op, s->prep, x->buf, x2 ? x2->buf : NULL, y->buf,
                              (int64_t)x->t * x->h * x->w);
    case VAE_OP_TIME_HEAD:
    case VAE_OP_TIME_DROP:
        if (y->t == 0 || value_take(e, i, &f, y)) return VAE_OK;
        if ((rc = exec_alloc_value(e, y, op->out))) return rc;
        return copy_frames(e, y->buf, x, f.from, y->t);
    case VAE_OP_CONCAT_T:
        if (x->t > 0 && x2->t > 0 && (x->h != x2->h || x->w != x2->w || x->c != x2->c))
            return check_same(op, x, x2, "concat");
        if (x->t == 0) y->h = x2->h, y->w = x2->w;
        if (y->t == 0 || value_take(e, i, &f, y)) return VAE_OK;
        if ((rc = exec_alloc_value(e, y, op->out))) return rc;
        if ((rc = copy_frames(e, y->buf, x, 0, x->t)) || x2->t == 0) return rc;
        return copy_frames(e,
                           (char *)y->buf + exec_vox_bytes(e, (int64_t)x->t * x->h * x->w * x->c),
                           x2, 0, x2->t);
    case VAE_OP_ATTENTION:
        if (x->t == 0 || (rc = exec_alloc_value(e, y, op->out))) return rc;
        if (e->split) return exec_attention_split(e, i, x, y);
        return be->v->attention(be, op, s->prep, x->buf, y->buf, x->t, x->h, x->w, 0, x->h * x->w);
    default: return vae_fail(VAE_EINVAL, "internal: unknown op kind %d", (int)op->kind);
    }
}

/* VAE_EXEC_CHECK=1: the op's output is read back and must be finite (test mode: names the first
 * op that makes a NaN or Inf, e.g. from memory it read before anything wrote it); an output
 * written as E4M3 codes (op.h fp8_codes_bound) holds no values to check */
static int check_output(vae_exec *e, int i) {
    const vae_op *op = &e->p->ops[i];
    const value *y = &e->val[op->out];
    if (!y->buf || y->t == 0 || op->fp8_codes_bound > 0) return VAE_OK; /* codes: no values */
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

void vae_exec_set_batch(vae_exec *e, int batch) {
    e->batch = batch;
}

void vae_exec_set_cancel(vae_exec *e, const atomic_int *cancel) {
    e->cancel = cancel;
}

static int run_op(vae_exec *e, int i) {
    const vae_op *op = &e->p->ops[i];
    if (e->cancel && atomic_load_explicit(e->cancel, memory_order_relaxed))
        return vae_fail(VAE_EINTERRUPTED, "stopped by the caller before op %s", op->name);
    const value *x = &e->val[op->in[0]];
    const value *x2 = op->in[1] >= 0 ? &e->val[op->in[1]] : NULL;
    value *y = &e->val[op->out];
    if (x->t > 0 && x->c != op->c_in)
        return vae_fail(VAE_ESHAPE, "op %s: input has %d channels, expected %d", op->name, x->c,
                        op->c_in);
    value z[2]; /* strips: inputs rebuilt over the columns this strip needs (exec_strip.c) */
    int rc = exec_strip_input(e, i, 0, x, &z[0], &x);
    z[1].buf = NULL;
    if (rc == VAE_OK && x2) rc = exec_strip_input(e, i, 1, x2, &z[1], &x2);
    if (rc == VAE_OK) rc = op_compute(e, i, x, x2, y);
    for (int k = 0; k < 2; k++)
        if (z[k].buf) e->be->v->release(e->be, z[k].base ? z[k].base : z[k].buf);
    if (rc == VAE_OK && e->set.exec_check) rc = check_output(e, i);
    if (rc) return rc;
    y->refs = e->uses[op->out];
    if (y->refs == 0 && op->out != e->p->output && y->buf) value_free(e, y); /* dead value */
    /* Inputs whose last consumer this was are released now: peak memory stays one layer wide. */
    for (int k = 0; k < 2; k++) {
        int v = op->in[k];
        if (v < 0 || (k == 1 && v == op->in[0])) continue;
        value *iv = &e->val[v];
        iv->refs -= (k == 0 && op->in[1] == v) ? 2 : 1;
        if (iv->refs <= 0 && v != e->p->input && v != e->p->output) value_free(e, iv);
    }
    return VAE_OK;
}

/* ---- frame loops ------------------------------------------------------------------------------
 */
/* Appends the frames of the (deepest level's) output value to the gather buffer. */
static int gather_output(vae_exec *e) {
    value *o = &e->val[e->p->output];
    if (o->t == 0) return VAE_OK;
    value *g = &e->gather;
    if (!g->buf) {
        *g = (value){.t = e->gather_cap, .h = o->h, .w = o->w, .c = o->c};
        int rc = exec_alloc_value(e, g, e->p->output);
        if (rc) return rc;
        e->gather_t = 0;
    }
    if (e->gather_t + o->t > e->gather_cap || o->h != g->h || o->w != g->w || o->c != g->c)
        return vae_fail(VAE_EINVAL, "internal: step output of %d frames %dx%d after %d of %d", o->t,
                        o->h, o->w, e->gather_t, e->gather_cap);
    size_t fb = exec_vox_bytes(e, (int64_t)o->h * o->w * o->c);
    int rc = copy_frames(e, (char *)g->buf + (size_t)e->gather_t * fb, o, 0, o->t);
    e->gather_t += o->t;
    value_free(e, o);
    return rc;
}

/* Frames [f, f+n) of parent as the value that the ops after a loop see: a view, or its trim in a
 * temporary. */
static int cut_frames(vae_exec *e, int v, const value *parent, int f, int n, value *out) {
    const size_t fb = exec_vox_bytes(e, (int64_t)parent->h * parent->w * parent->c);
    const char *src = (const char *)parent->buf + (size_t)f * fb;
    const trim *tr = &e->trims[v];
    *out = (value){.buf = (void *)src,
                   .base = parent->base,
                   .t = n,
                   .h = parent->h,
                   .w = parent->w,
                   .c = parent->c,
                   .refs = 1 << 30,
                   .kind = VALUE_VIEW};
    if (!tr->on || n == 0) return VAE_OK;
    if (tr->y0 + tr->h > parent->h || tr->x0 + tr->w > parent->w)
        return vae_fail(VAE_ESHAPE, "internal: trim %d,%d %dx%d of a %dx%d frame", tr->y0, tr->x0,
                        tr->h, tr->w, parent->h, parent->w);
    value t = {.t = n, .h = tr->h, .w = tr->w, .c = parent->c};
    int rc = exec_alloc_value(e, &t, v);
    if (rc) return rc;
    t.refs = 1 << 30;
    t.kind = VALUE_TEMP;
    *out = t;
    const size_t px = exec_vox_bytes(e, parent->c), tb = px * tr->w * tr->h;
    for (int j = 0; j < n && rc == VAE_OK; j++)
        rc = e->be->v->copy2d(e->be, (char *)t.buf + j * tb, px * tr->w,
                              src + j * fb + (tr->y0 * (size_t)parent->w + tr->x0) * px,
                              px * parent->w, px * tr->w, (size_t)tr->h);
    return rc;
}

static int run_level(vae_exec *e, int k) {
    const vae_loops *l = &e->loops;
    for (int i = k ? l->at[k - 1] : 0; i < l->at[k]; i++) {
        int rc = run_op(e, i);
        if (rc) return rc;
    }
    if (k == l->n) return l->n ? gather_output(e) : VAE_OK;
    const int *cv = l->cross + l->cross_at[k], nc = l->cross_at[k + 1] - l->cross_at[k];
    value par[16];
    if (nc < 1 || nc > 16)
        return vae_fail(VAE_EUNSUPPORTED, "executor: %d values cut by a loop", nc);
    for (int j = 0; j < nc; j++)
        par[j] = e->val[cv[j]];
    int rc = VAE_OK;
    const int passes = vae_loops_passes(l, k, par[0].t);
    for (int f = 0; rc == VAE_OK && f < passes; f++) {
        for (int j = 0; rc == VAE_OK && j < nc; j++) {
            int first;
            const int n = vae_loops_pass(l, k, par[j].t, f, &first);
            rc = cut_frames(e, cv[j], &par[j], first, n, &e->val[cv[j]]);
        }
        if (rc == VAE_OK) rc = run_level(e, k + 1);
        for (int j = 0; j < nc; j++) {
            value *v = &e->val[cv[j]];
            if (v->kind == VALUE_TEMP) e->be->v->release(e->be, v->base);
            *v = (value){0};
        }
    }
    for (int j = 0; j < nc; j++) { /* the whole values are done */
        e->val[cv[j]] = par[j];
        if (cv[j] != e->p->input) value_free(e, &e->val[cv[j]]);
        e->val[cv[j]].t = 0;
    }
    return rc;
}

static int run_ops(vae_exec *e, int t_in) {
    int rc = VAE_OK;
    if (e->loops.n) { /* the step's output frames: its stream rules on copies of the clocks */
        memset(&e->gather, 0, sizeof e->gather);
        e->gather_t = 0;
        for (int i = 0; i < e->p->n_ops; i++)
            e->clk[i] = e->st[i].clock;
        rc =
            vae_program_walk_step(e->p, &e->loops, e->clk, e->tv, t_in, NULL, NULL, &e->gather_cap);
    }
    if (rc == VAE_OK) rc = run_level(e, 0);
    if (rc == VAE_OK && e->loops.n) { /* the gathered frames are the step's output */
        value *o = &e->val[e->p->output];
        *o = e->gather;
        o->t = e->gather_t;
        o->kind = VALUE_OWNED;
        memset(&e->gather, 0, sizeof e->gather);
    }
    if (rc) values_release(e);
    return rc;
}

/* ---- steps and graphs -------------------------------------------------------------------------
 */
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
        int64_t seen = s->clock.seen < op->n ? s->clock.seen : op->n;
        h = sig_mix(h, ((uint64_t)(uint32_t)s->clock.pending << 33) |
                           ((uint64_t)s->clock.started << 32) | (uint32_t)seen);
        h = sig_mix(h, (uint64_t)(uintptr_t)w->cbuf);
        h = sig_mix(h, (uint64_t)(uintptr_t)w->zero_frame);
        for (int k = 0; w->cache && k < op->kt - 1; k++)
            h = sig_mix(h, (uint64_t)(uintptr_t)w->cache[k]);
    }
    return h;
}

/* Runs the step while the backend records it; keeps the graph and launches it (recording runs
 * nothing). VAE_EUNSUPPORTED when the step could not be recorded: the executor's state is then as
 * before the call (a steady step leaves it unchanged) and the caller runs the step normally. */
static int step_record(vae_exec *e, uint64_t sig, int t_in) {
    vae_backend *be = e->be;
    const vae_program *p = e->p;
    for (int i = 0; i < p->n_ops; i++)
        e->graph_seen[i] = e->st[i].clock.seen;
    const value in = e->val[p->input]; /* a failing run_ops clears every value, the input too */
    int rc = be->v->graph_begin(be);
    if (rc == VAE_OK) {
        void *g = NULL;
        rc = run_ops(e, t_in);
        int rc_end = be->v->graph_end(be, &g); /* always: it ends the recording */
        if (rc == VAE_OK && rc_end == VAE_OK && g) {
            e->graph = g;
            e->graph_sig = sig;
            e->graph_out = e->val[p->output];
            for (int i = 0; i < p->n_ops; i++)
                e->graph_seen[i] = e->st[i].clock.seen - e->graph_seen[i];
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
        e->st[i].clock.seen = e->graph_seen[i];
    e->graph_ok = 0;
    vae_error_clear();
    return VAE_EUNSUPPORTED;
}

/* VAE_EXEC_GRAPH=2, a call's own steps: whether the device has caught up with the host (it
 * reached the mark set as the previous step began: at most that step is still queued). A
 * heuristic: a recording runs nothing while it lasts, so where the host bounds the call the
 * device would wait through it, and the call's remaining steps may be too few to repay that
 * (not counted here); while the device is further behind, the capture hides behind the work
 * queued before it. A stream's pushes replay a recording for as long as it lasts: they record
 * as with 1. */
static int device_caught_up(const vae_exec *e) {
    const vae_backend_vtbl *v = e->be->v;
    return e->set.exec_graph == 2 && e->batch && e->marked && v->mark_reached &&
           v->mark_reached(e->be);
}

/* (VAE_EXEC_GRAPH=2) a mark at the start of a call's step, for device_caught_up at the next */
static void mark_step(vae_exec *e) {
    const vae_backend_vtbl *v = e->be->v;
    const int want = e->set.exec_graph == 2 && e->batch && v->mark;
    e->marked = want && v->mark(e->be) == VAE_OK;
    if (want && !e->marked) vae_error_clear(); /* (it only leaves the next step without one) */
}

/* How a step ran, for the host's time (executor.h vae_exec_host). */
enum { STEP_OPS, STEP_RECORDED, STEP_REPLAYED };

static void host_count(vae_exec *e, int how, double s) {
    vae_exec_host *h = &e->host;
    if (how == STEP_REPLAYED)
        h->replay_s += s, h->replayed++;
    else if (how == STEP_RECORDED)
        h->record_s += s, h->recorded++;
    else
        h->ops_s += s, h->ops++;
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
    e->val[p->input] = (value){.buf = in->data,
                               .base = NULL,
                               .t = in->t,
                               .h = in->h,
                               .w = in->w,
                               .c = in->c,
                               .refs = e->uses[p->input],
                               .kind = VALUE_VIEW};
    int rc = VAE_EUNSUPPORTED, how = STEP_OPS;
    const double t0 = vae_seconds();
    /* (band plans: the sums of a communicator with device buffers are stream work, which a
     * graph records like the rest; host sums wait in the middle of the step) */
    if ((e->graph || e->graph_ok) && !e->strips && !e->off_home &&
        !(e->comm && !e->comm->device_buffers) &&
        !(e->split && !e->split->device_buffers)) {
        const uint64_t sig = state_sig(e, in);
        const int replay = e->graph && sig == e->graph_sig;
        /* the state before this step is the one before and after the previous step */
        const int steady = e->graph_ok && e->have_prev && sig == e->prev_before &&
                           e->prev_before == e->prev_after && !device_caught_up(e);
        mark_step(e);
        VAE_DEBUG("executor: step of %d frames %dx%d: %s", in->t, in->h, in->w,
                  replay   ? "graph replay"
                  : steady ? "recording"
                           : "ops");
        if (replay) {
            if ((rc = e->be->v->graph_launch(e->be, e->graph))) return rc;
            for (int i = 0; i < p->n_ops; i++)
                e->st[i].clock.seen += e->graph_seen[i];
            e->val[p->output] = e->graph_out;
            how = STEP_REPLAYED;
        } else {
            graph_drop(e);
            if (steady && (rc = step_record(e, sig, in->t)) == VAE_OK) how = STEP_RECORDED;
        }
        if (rc == VAE_EUNSUPPORTED) rc = run_ops(e, in->t);
        if (rc) return rc;
        e->prev_before = sig;
        e->prev_after = state_sig(e, in);
        e->have_prev = 1;
    } else if ((rc = run_ops(e, in->t))) {
        return rc;
    }
    host_count(e, how, vae_seconds() - t0);
    o = &e->val[p->output];
    *out = (vae_chunk){o->buf, o->t, o->h, o->w, o->c};
    e->val[p->input].buf = NULL;
    return VAE_OK;
}

void vae_exec_host_take(vae_exec *e, vae_exec_host *sum) {
    sum->ops_s += e->host.ops_s, sum->record_s += e->host.record_s;
    sum->replay_s += e->host.replay_s;
    sum->ops += e->host.ops, sum->recorded += e->host.recorded, sum->replayed += e->host.replayed;
    memset(&e->host, 0, sizeof e->host);
}
