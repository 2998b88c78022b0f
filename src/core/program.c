/* program.c -- building op lists. */
#include "program.h"

#include <stddef.h>
#include <string.h>

#include "core.h"
#include "op.h"

void vae_program_init(vae_program *p, int in_channels) {
    memset(p, 0, sizeof *p);
    p->n_values = 1; /* value 0 is the input */
    p->input = 0;
    p->output = 0;
    p->in_channels = in_channels;
    p->out_channels = in_channels;
    p->first_chunk = 1;
    p->chunk = 1;
}

void vae_program_free(vae_program *p) {
    vae_free(p->ops);
    memset(p, 0, sizeof *p);
}

int vae_program_add(vae_program *p, const vae_op *op) {
    if (p->n_ops == p->cap_ops) {
        int cap = p->cap_ops ? p->cap_ops * 2 : 64;
        vae_op *ops = vae_realloc(p->ops, (size_t)cap * sizeof *ops);
        if (!ops) return -1;
        p->ops = ops;
        p->cap_ops = cap;
    }
    vae_op *o = &p->ops[p->n_ops++];
    *o = *op;
    o->out = p->n_values++;
    p->output = o->out;
    p->out_channels = o->c_out;
    return o->out;
}

int vae_program_crossing(const vae_program *p, int pos, int *vals, int max) {
    int n = 0;
    for (int v = 0; v < p->n_values; v++) {
        /* made before pos: the input, or the output of an op before pos (op i makes value i+1) */
        int made = v == p->input || (v > 0 && v - 1 < pos && p->ops[v - 1].out == v);
        int read = 0;
        for (int i = pos; made && !read && i < p->n_ops; i++)
            read = p->ops[i].in[0] == v || p->ops[i].in[1] == v;
        if (made && read) {
            if (n < max) vals[n] = v;
            n++;
        }
    }
    return n;
}

int vae_program_shapes(const vae_program *p, int h, int w, int *vh, int *vw) {
    vh[p->input] = h;
    vw[p->input] = w;
    for (int i = 0; i < p->n_ops; i++) {
        const vae_op *op = &p->ops[i];
        int x = op->in[0], rc = vae_op_out_size(op, vh[x], vw[x], &vh[op->out], &vw[op->out]);
        if (rc) return rc;
        int x2 = op->in[1];
        if (x2 >= 0 && op->kind != VAE_OP_CONCAT_T &&
            (vh[x2] != vh[op->out] || vw[x2] != vw[op->out]))
            return vae_fail(VAE_ESHAPE,
                            "op %s: inputs of %dx%d and %dx%d; the input size is not one this "
                            "model can process",
                            op->name, vh[op->out], vw[op->out], vh[x2], vw[x2]);
    }
    return VAE_OK;
}

int vae_program_slice(const vae_program *p, int from, int to, vae_program *out) {
    int in = -1, outv = -1;
    if (from < 0 || to > p->n_ops || from >= to || vae_program_crossing(p, from, &in, 1) != 1 ||
        (to < p->n_ops && vae_program_crossing(p, to, &outv, 1) != 1))
        return vae_fail(VAE_EINVAL,
                        "internal: ops %d..%d of %d are not a slice with one input "
                        "and one output",
                        from, to, p->n_ops);
    if (to == p->n_ops) outv = p->output;
    if (outv != p->ops[to - 1].out)
        return vae_fail(VAE_EINVAL,
                        "internal: the slice ending at op %d does not output its last "
                        "value",
                        to);
    const int c_in = vae_program_value_channels(p, in);
    vae_program_init(out, c_in);
    for (int i = from; i < to; i++) {
        vae_op op = p->ops[i];
        for (int k = 0; k < 2; k++)
            if (op.in[k] == in)
                op.in[k] = 0;
            else if (op.in[k] >= 0)
                op.in[k] -= from; /* made by op in[k]-1 >= from */
        if (vae_program_add(out, &op) < 0) {
            vae_program_free(out);
            return vae_fail(VAE_ENOMEM, "out of memory slicing a program");
        }
    }
    out->first_chunk = out->chunk = 1;
    return VAE_OK;
}

/* The one op that reads value v (its index; *k: as which input), or -1 when none or several do
 * or v is the program's output. */
static int only_reader(const vae_program *p, int v, int *k) {
    int reader = -1;
    if (v == p->output) return -1;
    for (int j = 0; j < p->n_ops; j++)
        for (int q = 0; q < 2; q++)
            if (p->ops[j].in[q] == v) {
                if (reader >= 0) return -1;
                reader = j, *k = q;
            }
    return reader;
}

/* Conv i's output is added beside a skip: conv i adds a residual, or its output reaches the
 * first input of a conv that adds one (or of an ADD) through ops that nothing else reads. Each
 * step goes to a later op, so the walk ends. */
static int in_residual_branch(const vae_program *p, int i) {
    for (;;) {
        const vae_op *op = &p->ops[i];
        if ((op->kind == VAE_OP_CONV && op->in[1] >= 0) || op->kind == VAE_OP_ADD) return 1;
        int k = 0, j = only_reader(p, op->out, &k);
        if (j < 0 || k != 0) return 0; /* read twice (a skip itself), as a skip, or the output */
        i = j;
    }
}

/* The op that makes value v, NULL for the program's input */
static vae_op *producer(vae_program *p, int v) {
    for (int j = 0; j < p->n_ops; j++)
        if (p->ops[j].out == v) return &p->ops[j];
    return NULL;
}

void vae_program_mark_fp8(vae_program *p) {
    for (int i = 0; i < p->n_ops; i++) {
        vae_op *op = &p->ops[i];
        op->fp8 = vae_op_fp8_shape(op) && in_residual_branch(p, i);
        op->fp8_kernel = VAE_FP8_NONE; /* a session's backend names it (vae_program_pick_fp8) */
        const vae_op *src = op->fp8 ? producer(p, op->in[0]) : NULL;
        op->fp8_bound = src ? vae_op_rms_bound(src) : 0.0f;
    }
}

int vae_program_pick_fp8(vae_program *p, int budget, int (*runs)(void *user, const vae_op *op),
                         void *user) {
    int kept = 0;
    for (int i = p->n_ops - 1; i >= 0; i--) {
        vae_op *op = &p->ops[i];
        if (!op->fp8) {
            op->fp8_kernel = VAE_FP8_NONE;
            continue;
        }
        op->fp8_kernel = budget == 0 || kept < budget ? runs(user, op) : VAE_FP8_NONE;
        op->fp8 = op->fp8_kernel != VAE_FP8_NONE;
        kept += op->fp8;
    }
    return kept;
}

int vae_program_mark_fp8_codes(vae_program *p,
                               int (*takes)(void *user, const vae_op *producer,
                                            const vae_op *reader),
                               void *user) {
    int marked = 0;
    for (int i = 0; i < p->n_ops; i++) {
        vae_op *op = &p->ops[i];
        const int x = op->in[0];
        int k = 0;
        if (op->kind != VAE_OP_CONV || !op->fp8 || !(op->fp8_bound > 0) || x < 0 || x == p->input ||
            only_reader(p, x, &k) != i || k != 0)
            continue;
        vae_op *src = producer(p, x);
        const int makes =
            src && (src->kind == VAE_OP_RMS_NORM || (src->kind == VAE_OP_CONV && src->norm_w));
        if (!makes || !takes(user, src, op)) continue;
        src->fp8_codes_bound = op->fp8_bound;
        op->fp8_codes_in = 1;
        marked++;
    }
    return marked;
}

int vae_program_copy(const vae_program *p, vae_program *out) {
    *out = *p;
    out->ops = NULL;
    out->cap_ops = 0;
    if (p->n_ops == 0) return VAE_OK;
    out->ops = vae_malloc((size_t)p->n_ops * sizeof *out->ops);
    if (!out->ops) {
        out->n_ops = 0;
        return vae_fail(VAE_ENOMEM, "out of memory copying a program");
    }
    memcpy(out->ops, p->ops, (size_t)p->n_ops * sizeof *out->ops);
    out->cap_ops = p->n_ops;
    return VAE_OK;
}

void vae_program_count_readers(const vae_program *p, int *uses) {
    for (int v = 0; v < p->n_values; v++)
        uses[v] = 0;
    for (int i = 0; i < p->n_ops; i++)
        for (int k = 0; k < 2; k++)
            if (p->ops[i].in[k] >= 0) uses[p->ops[i].in[k]]++;
}

/* The conv that makes op j's input, where that input is its output alone, which nothing else
 * reads and the program does not return; NULL otherwise. */
static const vae_op *sole_conv_input(const vae_program *p, int j, const int *uses) {
    const int x = p->ops[j].in[0];
    if (x <= 0 || x == p->output || uses[x] != 1 || p->ops[j].in[1] >= 0) return NULL;
    const vae_op *c = &p->ops[x - 1];
    return c->out == x && c->kind == VAE_OP_CONV && c->c_out == p->ops[j].c_in ? c : NULL;
}

/* Op j is an RMS norm (without a bias) that folds into the conv making its input. */
static int norm_folds(const vae_program *p, int j, const int *uses) {
    const vae_op *n = &p->ops[j], *c = sole_conv_input(p, j, uses);
    return n->kind == VAE_OP_RMS_NORM && c && !c->norm_w && c->act == VAE_ACT_NONE && !n->b;
}

static void norm_apply(vae_op *conv, const vae_op *n) {
    conv->norm_w = n->w, conv->norm_act = n->act, conv->act_scale = n->act_scale;
}

/* Op j is an activation that folds into the conv making its input (one without a norm). */
static int act_folds(const vae_program *p, int j, const int *uses) {
    const vae_op *a = &p->ops[j], *c = sole_conv_input(p, j, uses);
    return a->kind == VAE_OP_ACT && c && !c->norm_w && c->act == VAE_ACT_NONE;
}

static void act_apply(vae_op *conv, const vae_op *a) {
    conv->act = a->act, conv->act_scale = a->act_scale;
}

/* Every op that `folds` into the conv making its input, folded into it by `apply`, the values
 * renumbered (vae_program_fuse_norms, vae_program_fuse_acts). */
static int fuse_into_convs(vae_program *p, int (*folds)(const vae_program *, int, const int *),
                           void (*apply)(vae_op *, const vae_op *), int *folded) {
    *folded = 0;
    if (p->n_ops == 0) return VAE_OK; /* an absent side (no encoder): not even an input value */
    for (int i = 0; i < p->n_ops; i++)
        if (p->ops[i].out != i + 1) return VAE_OK; /* not numbered as vae_program_add does */
    int *uses = vae_malloc((size_t)p->n_values * sizeof *uses);
    int *map = vae_malloc((size_t)p->n_values * sizeof *map);
    int *fold_of = vae_malloc((size_t)(p->n_ops + 1) * sizeof *fold_of);
    if (!uses || !map || !fold_of) {
        vae_free(uses), vae_free(map), vae_free(fold_of);
        return vae_fail(VAE_ENOMEM, "out of memory fusing ops into convs");
    }
    vae_program_count_readers(p, uses);
    for (int i = 0; i < p->n_ops; i++) /* the op folded into conv i, -1 none */
        fold_of[i] = -1;
    for (int j = 0; j < p->n_ops; j++)
        if (folds(p, j, uses)) fold_of[p->ops[j].in[0] - 1] = j;
    map[p->input] = p->input;
    int k = 0; /* ops kept so far: op i moves to k <= i, its value to k + 1 */
    for (int i = 0; i < p->n_ops; i++) {
        vae_op o = p->ops[i];
        const int x = o.in[0];
        if (x > 0 && fold_of[x - 1] == i) {
            map[o.out] = map[x]; /* the conv's value now holds this op's */
            (*folded)++;
            continue;
        }
        for (int q = 0; q < 2; q++)
            if (o.in[q] >= 0) o.in[q] = map[o.in[q]];
        if (fold_of[i] >= 0) apply(&o, &p->ops[fold_of[i]]); /* j > i: not moved yet */
        map[o.out] = k + 1;
        o.out = k + 1;
        p->ops[k++] = o;
    }
    p->output = map[p->output];
    p->n_ops = k;
    p->n_values = k + 1;
    vae_free(uses), vae_free(map), vae_free(fold_of);
    return VAE_OK;
}

int vae_program_fuse_norms(vae_program *p, int *folded) {
    return fuse_into_convs(p, norm_folds, norm_apply, folded);
}

int vae_program_fuse_acts(vae_program *p, int *folded) {
    return fuse_into_convs(p, act_folds, act_apply, folded);
}

int vae_program_window_ok(const vae_program *p, int i, const int *uses) {
    const vae_op *op = &p->ops[i];
    const int x = op->in[0];
    return op->kind == VAE_OP_CONV && op->kt >= 2 && x >= 0 && x != p->input && x != p->output &&
           op->in[1] != x && uses[x] == 1 && op->tpad <= op->kt - 1;
}

/* n frames in front of v, and of the inputs whose buffer v may take over (vae_program_heads); a
 * value marked with n already is not walked again */
static void mark_head(const vae_program *p, int v, int n, int *head) {
    if (v < 0 || v == p->input || v == p->output || head[v] >= n) return;
    head[v] = n;
    for (int j = 0; j < p->n_ops; j++) {
        const vae_op *op = &p->ops[j];
        if (op->out != v) continue;
        if (op->kind == VAE_OP_TIME_HEAD || op->kind == VAE_OP_TIME_DROP)
            mark_head(p, op->in[0], n, head);
        if (op->kind == VAE_OP_CONCAT_T) {
            mark_head(p, op->in[0], n, head);
            mark_head(p, op->in[1], n, head);
        }
    }
}

void vae_program_heads(const vae_program *p, const int *win_of, int *head) {
    for (int v = 0; v < p->n_values; v++)
        head[v] = 0;
    for (int v = 0; v < p->n_values; v++)
        if (win_of[v] >= 0) mark_head(p, v, p->ops[win_of[v]].kt - 1, head);
}

/* ---- frame loops ------------------------------------------------------------------------------
 */
int vae_loops_init(vae_loops *l, const vae_program *p, const int *at, const int *whole, int n) {
    memset(l, 0, sizeof *l);
    if (n < 0 || n > VAE_MAX_LOOPS)
        return vae_fail(VAE_EINVAL, "%d frame loops (at most %d)", n, VAE_MAX_LOOPS);
    int total = 0;
    for (int k = 0; k < n; k++) {
        if (at[k] < 0 || at[k] >= p->n_ops || (k > 0 && at[k] <= at[k - 1]))
            return vae_fail(VAE_EINVAL, "frame loop at op %d of %d", at[k], p->n_ops);
        l->at[k] = at[k];
        l->whole[k] = whole ? whole[k] : 0;
        l->cross_at[k] = total;
        total += vae_program_crossing(p, at[k], NULL, 0);
    }
    l->n = n;
    l->at[n] = p->n_ops;
    l->cross_at[n] = total;
    l->cross = vae_calloc((size_t)total + 1, sizeof *l->cross);
    if (!l->cross) return vae_fail(VAE_ENOMEM, "out of memory");
    for (int k = 0; k < n; k++)
        vae_program_crossing(p, l->at[k], l->cross + l->cross_at[k],
                             l->cross_at[k + 1] - l->cross_at[k]);
    return VAE_OK;
}

int vae_loops_width(const vae_loops *l) {
    return l->width > 1 ? l->width : 1;
}

int vae_loops_passes(const vae_loops *l, int k, int t) {
    const int w = vae_loops_width(l);
    return l->whole[k] ? 1 : (t + w - 1) / w;
}

int vae_loops_pass(const vae_loops *l, int k, int t, int pass, int *first) {
    const int w = vae_loops_width(l);
    if (l->whole[k]) return *first = 0, t;
    *first = pass * w;
    return t - *first < w ? t - *first : w;
}

void vae_loops_free(vae_loops *l) {
    vae_free(l->cross);
    memset(l, 0, sizeof *l);
}

static int walk_level(const vae_program *p, const vae_loops *l, int k, vae_op_clock *clk, int *tv,
                      vae_walk_fn fn, void *user, int *t_out) {
    for (int i = k ? l->at[k - 1] : 0; i < l->at[k]; i++) {
        const vae_op *op = &p->ops[i];
        vae_op_frames f;
        vae_op_step_frames(op, &clk[i], tv[op->in[0]], op->in[1] >= 0 ? tv[op->in[1]] : 0, &f);
        tv[op->out] = f.t_out;
        if (fn) fn(user, VAE_WALK_OP, i, &f, tv);
    }
    if (k == l->n) {
        *t_out += tv[p->output];
        return VAE_OK;
    }
    const int *cv = l->cross + l->cross_at[k], nc = l->cross_at[k + 1] - l->cross_at[k];
    const int t = tv[cv[0]], whole = l->whole[k];
    for (int j = 1; j < nc && !whole; j++)
        if (tv[cv[j]] != t)
            return vae_fail(VAE_EINVAL,
                            "a frame loop at op %d (%s) would cut values of %d and %d frames",
                            l->at[k], p->ops[l->at[k]].name, t, tv[cv[j]]);
    const int passes = vae_loops_passes(l, k, t); /* a whole loop passes the chunk on once */
    for (int f = 0; f < passes; f++) {
        int first;
        const int n = vae_loops_pass(l, k, t, f, &first);
        for (int j = 0; j < nc && !whole; j++)
            tv[cv[j]] = n;
        if (fn) fn(user, VAE_WALK_FRAME, k, NULL, tv);
        int rc = walk_level(p, l, k + 1, clk, tv, fn, user, t_out);
        if (rc) return rc;
        if (fn) fn(user, VAE_WALK_FRAME_END, k, NULL, tv);
    }
    if (fn) fn(user, VAE_WALK_LOOP_END, k, NULL, tv);
    return VAE_OK;
}

int vae_program_walk_step(const vae_program *p, const vae_loops *l, vae_op_clock *clk, int *tv,
                          int t_in, vae_walk_fn fn, void *user, int *t_out) {
    vae_loops flat = {.n = 0};
    flat.at[0] = p->n_ops;
    *t_out = 0;
    tv[p->input] = t_in;
    if (!l) l = &flat;
    return walk_level(p, l, 0, clk, tv, fn, user, t_out);
}
