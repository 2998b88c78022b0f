/* plan_geom.c -- what the planner derives from a program alone: the stream walk, loop positions
 * and the rows a tile needs and gets (plan_internal.h). */
#include <string.h>

#include "core.h"
#include "plan_internal.h"

/* ---- walking the untiled program --------------------------------------------------------------
 */

static void sum_op(void *user, vae_walk_event ev, int i, const vae_op_frames *f, const int *tv) {
    plan_walk_sum *s = user;
    if (ev != VAE_WALK_OP) return;
    const vae_op *op = &s->p->ops[i];
    s->macs += vae_op_macs(op, f->t_out, s->vh[op->out], s->vw[op->out]);
    if (s->frames) s->frames[i] += f->t_out;
}

/* Steps through the whole stream of t input frames (first chunk, then chunks). */
int plan_walk_stream(const vae_program *p, const vae_loops *l, int t, int first, int chunk,
                     plan_walk_sum *sum, int *t_out) {
    vae_op_clock *clk = vae_calloc((size_t)p->n_ops + 1, sizeof *clk);
    int *tv = vae_calloc((size_t)p->n_values, sizeof *tv);
    int rc = clk && tv ? VAE_OK : vae_fail(VAE_ENOMEM, "out of memory planning");
    *t_out = 0;
    for (int pos = 0; rc == VAE_OK && pos < t;) {
        int n = pos == 0 ? first : chunk, out = 0;
        if (pos + n > t) n = t - pos;
        rc = vae_program_walk_step(p, l, clk, tv, n, sum ? sum_op : NULL, sum, &out);
        *t_out += out;
        pos += n;
    }
    vae_free(clk);
    vae_free(tv);
    return rc;
}

int vae_plan_walk(const vae_program *p, int t, int h, int w, int *t_out, int *h_out, int *w_out,
                  double *macs) {
    int *vh = vae_calloc((size_t)p->n_values, sizeof *vh);
    int *vw = vae_calloc((size_t)p->n_values, sizeof *vw);
    int rc = vh && vw ? vae_program_shapes(p, h, w, vh, vw) : vae_fail(VAE_ENOMEM, "out of memory");
    plan_walk_sum sum = {p, vh, vw, 0, NULL};
    if (rc == VAE_OK) rc = plan_walk_stream(p, NULL, t, p->first_chunk, p->chunk, &sum, t_out);
    if (rc == VAE_OK) {
        *h_out = vh[p->output];
        *w_out = vw[p->output];
        if (macs) *macs = sum.macs;
    }
    vae_free(vh);
    vae_free(vw);
    return rc;
}

/* ---- frame loops -------------------------------------------------------------------------------
 */
/* What a candidate loop position sees over the first steps: whether the values crossing it always
 * have equal frame counts, and the most frames they have in one (sub-)step. */
typedef struct probe {
    const vae_program *p;
    int pos, n_cross, cross[16];
    int equal, most;
} probe;

static void probe_op(void *user, vae_walk_event ev, int i, const vae_op_frames *f, const int *tv) {
    probe *q = user;
    if (ev != VAE_WALK_OP || i != q->pos) return;
    for (int j = 0; j < q->n_cross; j++) {
        if (tv[q->cross[j]] != tv[q->cross[0]]) q->equal = 0;
        if (tv[q->cross[j]] > q->most) q->most = tv[q->cross[j]];
    }
}

static int probe_pos(const vae_program *p, const int *loops, const int *whole, int n_loops, int pos,
                     int first, int chunk, probe *q) {
    memset(q, 0, sizeof *q);
    q->p = p;
    q->pos = pos;
    q->equal = 1;
    q->n_cross = vae_program_crossing(p, pos, q->cross, 16);
    if (q->n_cross < 1 || q->n_cross > 16) {
        q->equal = 0;
        return VAE_OK;
    }
    vae_loops l;
    int rc = VAE_OK, t_out;
    vae_op_clock *clk = vae_calloc((size_t)p->n_ops + 1, sizeof *clk);
    int *tv = vae_calloc((size_t)p->n_values, sizeof *tv);
    if (!clk || !tv || vae_loops_init(&l, p, loops, whole, n_loops)) {
        vae_free(clk);
        vae_free(tv);
        return vae_fail(VAE_ENOMEM, "out of memory planning");
    }
    for (int s = 0; s < 4 && rc == VAE_OK; s++)
        rc = vae_program_walk_step(p, &l, clk, tv, s ? chunk : first, probe_op, q, &t_out);
    vae_loops_free(&l);
    vae_free(clk);
    vae_free(tv);
    return rc;
}

int plan_is_upsampling(const vae_op *op) {
    return (op->kind == VAE_OP_CONV && op->up > 1) || op->kind == VAE_OP_UPSAMPLE ||
           (op->kind == VAE_OP_SHUFFLE_UP && op->fs > 1);
}

/* Loops of a part fed first, then chunk frames per step. With frames: a frame loop at the first
 * position after each rise of the frame count where the crossing values stay in step (frame
 * granularity). With trims (a tiled part): a trim point at each single-value position just
 * before an upsampling op or, failing that, the first one after it, where the tile's crop is cut
 * to what it needs (a whole-chunk loop where it is not a frame loop already). */
int plan_choose_loops(const vae_program *p, int first, int chunk, int frames, int trims, int *loops,
                      int *whole, int *n_loops, int *trim_at, int *n_trims) {
    int n = 0, nt = 0, want_trim = 0;
    for (int pos = 0; pos < p->n_ops && n < VAE_MAX_LOOPS && (frames || trims); pos++) {
        const int up = plan_is_upsampling(&p->ops[pos]);
        probe q;
        int rc = probe_pos(p, loops, whole, n, pos, first, chunk, &q);
        if (rc) return rc;
        const int frame_loop = frames && q.equal && q.most > 1;
        const int trim = trims && q.n_cross == 1 && pos > 0 && (up || want_trim);
        if (frame_loop || trim) {
            whole[n] = !frame_loop;
            loops[n++] = pos;
        }
        if (trim) {
            trim_at[nt++] = pos;
            want_trim = 0;
        } else if (up) {
            want_trim = 1;
        }
    }
    *n_loops = n;
    *n_trims = nt;
    return VAE_OK;
}

/* ---- tiles: spans per axis
 * ----------------------------------------------------------------------- */

static vae_span span_union(vae_span a, vae_span b) {
    if (a.hi <= a.lo) return b;
    if (b.hi <= b.lo) return a;
    return (vae_span){a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi};
}

/* need[v]: the rows of each value that the output rows `own` depend on (clipped to the frame). */
static void tile_need(const plan_tiler *t, vae_span own) {
    const vae_program *b = t->b;
    for (int v = 0; v < b->n_values; v++)
        t->need[v] = (vae_span){0, 0};
    t->need[b->output] = own;
    for (int i = b->n_ops - 1; i >= 0; i--) {
        const vae_op *op = &b->ops[i];
        vae_span o = t->need[op->out];
        if (o.hi <= o.lo) continue;
        int x = op->in[0];
        vae_span s = vae_span_clip(vae_op_in_span(op, t->axis, o, t->n[x], t->reduce), 0, t->n[x]);
        t->need[x] = span_union(t->need[x], s);
        if (op->in[1] >= 0) /* residual, addend, concat: the output's rows */
            t->need[op->in[1]] = span_union(t->need[op->in[1]], vae_span_clip(o, 0, t->n[op->in[1]]));
    }
}

/* Forward from B's input crop: every value's crop and exact part (trims applied at trim_at);
 * rel[k]: the trim at trim_at[k] relative to the value's crop; len[v]: each value's extent as
 * it is made (before a trim). */
static int tile_forward(const plan_tiler *t, vae_span in, vae_span *rel, int *len) {
    const vae_program *b = t->b;
    t->crop[b->input] = in;
    t->valid[b->input] = in;
    len[b->input] = in.hi - in.lo;
    int k = 0;
    for (int i = 0; i < b->n_ops; i++) {
        const vae_op *op = &b->ops[i];
        if (k < t->n_trim_at && t->trim_at[k] == i) {
            int v;
            vae_program_crossing(b, i, &v, 1);
            vae_span c = t->crop[v], s = vae_span_clip(t->need[v], c.lo, c.hi);
            if (s.hi <= s.lo) s = c;
            rel[k++] = (vae_span){s.lo - c.lo, s.hi - s.lo};
            t->crop[v] = s;
            t->valid[v] = vae_span_clip(t->valid[v], s.lo, s.hi);
        }
        const int x = op->in[0], y = op->out;
        if (t->op_crop) t->op_crop[i] = t->crop[x], t->op_valid[i] = t->valid[x];
        int rc = vae_op_map_crop(op, t->axis, t->n[x], t->crop[x], t->valid[x], t->reduce,
                                 &t->crop[y], &t->valid[y]);
        if (rc) return rc;
        len[y] = t->crop[y].hi - t->crop[y].lo;
        const int x2 = op->in[1];
        if (x2 >= 0) {
            if (t->crop[x2].lo != t->crop[y].lo || t->crop[x2].hi != t->crop[y].hi)
                return vae_fail(VAE_EINVAL, "internal: tile crops differ at %s (%d..%d vs %d..%d)",
                                op->name, t->crop[x2].lo, t->crop[x2].hi, t->crop[y].lo,
                                t->crop[y].hi);
            t->valid[y] = vae_span_clip(t->valid[y], t->valid[x2].lo, t->valid[x2].hi);
        }
    }
    return VAE_OK;
}

/* The input crop for output rows own, and everything forward from it. exact: own must come out
 * exact (TILED), else any crop will do (BLEND passes its own crop in *in). */
int plan_tile_axis(const plan_tiler *t, vae_span own, int exact, vae_span *in, vae_span *rel,
                   int *len) {
    const vae_program *b = t->b;
    const int n_in = t->n[b->input], a = t->align_in;
    if (exact) {
        tile_need(t, own);
        vae_span s = t->need[b->input];
        s.lo = s.lo / a * a;
        s.hi = (s.hi + a - 1) / a * a;
        *in = vae_span_clip(s, 0, n_in);
    } else {
        tile_need(t, (vae_span){0, t->n[b->output]}); /* no trims: need = everything */
    }
    int rc = tile_forward(t, *in, rel, len);
    if (rc) return rc;
    const vae_span v = t->valid[b->output];
    if (exact && (own.lo < v.lo || own.hi > v.hi))
        return vae_fail(VAE_EINVAL, "internal: tile rows %d..%d are not exact (exact %d..%d)",
                        own.lo, own.hi, v.lo, v.hi);
    return VAE_OK;
}

/* Owned spans of n rows in pieces of `size` (multiples of align, the last one what is left). */
int plan_split_axis(int n, int size, int align, vae_span *out, int max) {
    if (size < align) size = align;
    size = (size + align - 1) / align * align;
    int k = 0;
    for (int lo = 0; lo < n && k < max; lo += size)
        out[k++] = (vae_span){lo, lo + size < n ? lo + size : n};
    if (k >= 2 && out[k - 1].hi - out[k - 1].lo < align) { /* fold a sliver into its neighbour */
        out[k - 2].hi = n;
        k--;
    }
    return k;
}

int plan_split_shares(int n, const double *share, int k, int align, vae_span *out) {
    if (k < 1 || (int64_t)k * align > n) return 0;
    double sum = 0;
    int lo = 0;
    for (int i = 0; i < k; i++) {
        sum += share[i];
        int hi = i == k - 1 ? n : (int)(n * sum / align + 0.5) * align;
        if (hi < lo + align) hi = lo + align;
        if (hi > n - (k - 1 - i) * align) hi = n - (k - 1 - i) * align; /* room for the rest */
        out[i] = (vae_span){lo, hi};
        lo = hi;
    }
    return k;
}

/* Blend crops of B's input (n rows): tiles of `size` rows every size - overlap, the last one
 * ending at n, starts multiples of align. */
int plan_split_blend(int n, int size, int overlap, int align, vae_span *out, int max) {
    size = (size + align - 1) / align * align;
    if (size >= n) {
        out[0] = (vae_span){0, n};
        return 1;
    }
    int step = (size - overlap) / align * align, k = 0;
    if (step < align) step = align;
    for (int lo = 0; k < max; lo += step) {
        int a = lo + size >= n ? (n - size) / align * align : lo;
        out[k++] = (vae_span){a, a + size < n ? a + size : n};
        if (a + size >= n) break;
    }
    return k;
}
