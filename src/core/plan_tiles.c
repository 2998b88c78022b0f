/* plan_tiles.c -- what a plan costs: a part's memory, and grids of tiles of part B (their crops,
 * trims, peak over the parts, work with the halos, host store traffic) (plan_internal.h). */
#include <string.h>

#include "core.h"
#include "plan_internal.h"

int plan_part_steps(const part *q, int t_in) {
    if (t_in <= 0) return 0;
    return t_in <= q->first ? 1 : 1 + (t_in - q->first + q->chunk - 1) / q->chunk;
}

int plan_part_max_step(const part *q) {
    return q->first > q->chunk ? q->first : q->chunk;
}

/* The part's memory for value shapes vh x vw (a tile's, or the whole frame's). */
int64_t plan_part_mem(const planner *pl, const part *q, const int *vh, const int *vw, int t_in,
                      const vae_plan_trim *trims, int n_trims, const int *zw, int64_t *scratch,
                      int64_t *caches, double *copies) {
    if (caches) *caches = 0;
    if (copies) *copies = 0;
    if (!q->present) return 0;
    const int all = plan_part_steps(q, t_in);
    const int steps = all > 8 ? 8 : all; /* caches are full and the step is steady well before */
    int64_t need = 0;
    double step_copies = 0;
    vae_plan_request rq = *pl->rq;
    rq.step_copies = copies ? &step_copies : NULL;
    const int64_t m = vae_plan_mem_part(&q->prog, &q->loops[pl->fr], vh, vw, &rq, q->first,
                                        q->chunk, steps, trims, n_trims, zw, &need, caches);
    if (need > *scratch) *scratch = need;
    /* (the first step fills the caches: counted as copying nothing) */
    if (copies) *copies = step_copies * (all > 1 ? all - 1 : 0);
    return m;
}

int64_t plan_max_frame(const int *vh, const int *vw, int n) {
    int64_t most = 0;
    for (int v = 0; v < n; v++)
        if ((int64_t)vh[v] * vw[v] > most) most = (int64_t)vh[v] * vw[v];
    return most;
}

int64_t plan_rounded(const planner *pl, int64_t bytes) {
    if (bytes <= 0) return 0;
    return pl->rq->round ? (int64_t)pl->rq->round((size_t)bytes) : bytes;
}

/* bytes of t frames of value v of part q at h x w */
int64_t plan_frames_bytes(const planner *pl, const part *q, int v, int t, int h, int w) {
    const int c = vae_program_value_channels(&q->prog, v);
    return (int64_t)t * h * w * c * (int64_t)pl->rq->elem;
}

/* ---- tiles of part B -------------------------------------------------------------------------- */
/* and in the time a byte is copied on the device (strips' rebuilt inputs, the causal windows'
 * cached and kept frames: ~1.5 TB/s read and written; halved from 200 after measuring on the
 * H100: strips' overhead beyond their op calls was half what the model said, Wan2.2 704p at 4
 * GiB) */
#define DEVICE_BYTE_MACS 100

typedef struct axis_tiles {
    int n;
    vae_span own[MAX_SPANS], in[MAX_SPANS], out[MAX_SPANS];
    vae_span rel[MAX_SPANS][VAE_MAX_LOOPS]; /* trims: offset and length in the value's crop */
    int *len;                               /* [n][n_values]: each value's extent (as made) */
    int cls[MAX_SPANS];                     /* first span with the same extents and trims */
    int n_norms;                            /* band plans (rows): B's reducible ops */
    vae_exec_norm *norms;                   /* [n][n_norms]: each tile's owned rows at them */
} axis_tiles;

static int b_align_in(const planner *pl, const part *b, int blend) {
    const int a = blend ? pl->rq->video_factor
                        : b->vh[0] / (b->vh[b->prog.output] ? b->vh[b->prog.output] : 1);
    return pl->rq->encode && a > 1 ? a : 1;
}

/* A band's owned rows at each reducible op of B: the rows of the op's input in proportion to the
 * band's own output rows (so the bands' shares partition every frame), as the band holds them;
 * they lie in the rows it computes exactly (its need covers them). */
static int band_norms(const planner *pl, const part *b, vae_span own, vae_exec_norm *out) {
    const int n_out = b->vh[b->prog.output];
    int j = 0;
    for (int i = 0; i < b->prog.n_ops; i++) {
        const vae_op *op = &b->prog.ops[i];
        if (!vae_op_is_reducible(op)) continue;
        const int n = b->vh[op->in[0]];
        const int lo = (int)((int64_t)own.lo * n / n_out);
        const int hi = own.hi >= n_out ? n : (int)((int64_t)own.hi * n / n_out);
        const vae_span c = pl->op_crop[i], v = pl->op_valid[i];
        if (lo < v.lo || hi > v.hi || v.lo < c.lo || v.hi > c.hi)
            return vae_fail(VAE_EINVAL,
                            "internal: band rows %d..%d at %s are not exact (exact %d..%d)", lo, hi,
                            op->name, v.lo, v.hi);
        out[j++] = (vae_exec_norm){i, lo - c.lo, hi - lo, n};
    }
    return VAE_OK;
}

static int axis_tiles_make(planner *pl, const part *b, int axis, const vae_span *spans, int n,
                           int blend, axis_tiles *at) {
    const int nv = b->prog.n_values;
    at->n = n;
    at->len = vae_calloc((size_t)n * nv, sizeof *at->len);
    if (!at->len) return vae_fail(VAE_ENOMEM, "out of memory planning tiles");
    plan_tiler t = {&b->prog,
                    axis,
                    axis ? b->vw : b->vh,
                    b->trim_at,
                    blend ? 0 : b->n_trim_at,
                    b_align_in(pl, b, blend),
                    pl->b_reduce,
                    pl->need,
                    pl->crop,
                    pl->valid,
                    NULL,
                    NULL};
    at->n_norms = axis == 0 && !blend ? pl->b_reduce : 0;
    if (at->n_norms) {
        at->norms = vae_calloc((size_t)n * at->n_norms, sizeof *at->norms);
        if (!at->norms) return vae_fail(VAE_ENOMEM, "out of memory planning tiles");
        t.op_crop = pl->op_crop, t.op_valid = pl->op_valid;
    }
    for (int k = 0; k < n; k++) {
        vae_span in = spans[k];
        int *len = at->len + (size_t)k * nv;
        int rc = plan_tile_axis(&t, spans[k], !blend, &in, at->rel[k], len);
        if (rc == VAE_OK && at->n_norms)
            rc = band_norms(pl, b, spans[k], at->norms + (size_t)k * at->n_norms);
        if (rc) return rc;
        at->in[k] = in;
        at->out[k] = pl->crop[b->prog.output];
        at->own[k] = blend ? at->out[k] : spans[k];
        at->cls[k] = k;
        for (int j = 0; j < k; j++)
            if (memcmp(len, at->len + (size_t)j * nv, (size_t)nv * sizeof *len) == 0 &&
                memcmp(at->rel[k], at->rel[j], sizeof at->rel[k]) == 0) {
                at->cls[k] = j;
                break;
            }
    }
    return VAE_OK;
}

static void axis_tiles_free(axis_tiles *a) {
    vae_free(a->len);
    vae_free(a->norms);
    a->len = NULL;
    a->norms = NULL;
}

static int tile_trims(const part *b, const axis_tiles *ay, int iy, const axis_tiles *ax, int ix,
                      vae_plan_trim *out) {
    for (int k = 0; k < b->n_trim_at; k++) {
        int v;
        vae_program_crossing(&b->prog, b->trim_at[k], &v, 1);
        out[k] = (vae_plan_trim){v, ay->rel[iy][k].lo, ax->rel[ix][k].lo, ay->rel[iy][k].hi,
                                 ax->rel[ix][k].hi};
    }
    return b->n_trim_at;
}

/* frames of the whole stream that part b's input and output carry */
int plan_part_in_frames(const planner *pl, const part *q) {
    if (q->from == 0) return pl->rq->t;
    return (int)pl->op_frames[q->from - 1];
}

/* frames of value v of part b over the whole stream */
static int64_t part_value_frames(const planner *pl, const part *b, int v) {
    return v == b->prog.input ? plan_part_in_frames(pl, b) : pl->op_frames[b->from + v - 1];
}

/* Strip ix: the width each op input is rebuilt to (zw [n_ops][2], 0: used as it is); the bytes
 * those rebuilds copy over the stream are added to *copied. */
static void strip_rebuilds(const planner *pl, const part *b, const vae_strips *st, int ix, int *zw,
                           double *copied) {
    memset(zw, 0, (size_t)2 * b->prog.n_ops * sizeof *zw);
    for (int c = 0; c < st->n_carry; c++) {
        const vae_strip_carry *cy = &st->carry[c];
        const vae_span z = vae_strip_z(st, ix, c);
        if (z.hi <= z.lo) continue; /* used as it is */
        int w = z.hi - z.lo, left, c0, c1;
        if (pl->rq->strip_norm_in_place && b->prog.ops[cy->op].kind == VAE_OP_RMS_NORM) {
            vae_strip_z_parts(st, ix, c, &left, &c0, &c1);
            w = c0 - z.lo; /* the columns left of the value's own */
        }
        zw[2 * cy->op + cy->k] = w;
        *copied += 2.0 * (double)plan_frames_bytes(pl, b, cy->value,
                                                   (int)part_value_frames(pl, b, cy->value),
                                                   b->vh[cy->value], w);
    }
}

/* The MACs of ops [from, to) over the whole video, whole frames (of one kind; -1: every
 * kind). */
static double kind_macs(const planner *pl, int from, int to, int kind) {
    double macs = 0;
    for (int i = from; i < to; i++) {
        const vae_op *op = &pl->p->ops[i];
        if (kind < 0 || (int)op->kind == kind)
            macs += vae_op_macs(op, (int)pl->op_frames[i], pl->vh[op->out], pl->vw[op->out]);
    }
    return macs;
}

static double ops_macs(const planner *pl, int from, int to) {
    return kind_macs(pl, from, to, -1);
}

/* tiles of the axis in the class of tile i (the same extents: the same memory and copies) */
static int class_size(const axis_tiles *a, int i) {
    int n = 0;
    for (int k = 0; k < a->n; k++)
        n += a->cls[k] == i;
    return n;
}

/* A part that runs whole frames (A or C) over t_in frames: its memory (plan_part_mem), its
 * caches into the largest so far, its windows' copies added to *copied. */
static int64_t whole_part_mem(const planner *pl, const part *q, int t_in, int64_t *scratch,
                              int64_t *caches, double *copied) {
    int64_t cb = 0;
    double cp = 0;
    const int64_t m = plan_part_mem(pl, q, q->vh, q->vw, t_in, NULL, 0, NULL, scratch, &cb, &cp);
    if (cb > *caches) *caches = cb;
    *copied += cp;
    return m;
}

/* What the tiles of part B add up to: the largest tile's memory (its input crop included), the
 * backend scratch and causal caches the largest need, B's MACs over every tile, and the bytes B
 * copies on the device (strips' rebuilt inputs, the tiles' windows) */
typedef struct b_sums {
    int64_t mem, scratch, caches;
    double macs, copied;
} b_sums;

/* B's sums over the grid ay x ax (st: as column strips); c->frame raised to its largest frame */
static int tiles_b_sums(planner *pl, const part *b, const axis_tiles *ay, const axis_tiles *ax,
                        const vae_strips *st, b_sums *s, cand *c) {
    const int nv = b->prog.n_values, t_b = plan_part_in_frames(pl, b);
    int *zw = st ? vae_calloc((size_t)2 * b->prog.n_ops + 1, sizeof *zw) : NULL;
    if (st && !zw) return vae_fail(VAE_ENOMEM, "out of memory planning");
    for (int iy = 0; iy < ay->n; iy++)
        for (int ix = 0; ix < ax->n; ix++) {
            const int *ly = ay->len + (size_t)iy * nv, *lx = ax->len + (size_t)ix * nv;
            for (int i = 0; i < b->prog.n_ops; i++) {
                const vae_op *op = &b->prog.ops[i];
                s->macs +=
                    vae_op_macs(op, (int)pl->op_frames[b->from + i], ly[op->out], lx[op->out]);
            }
            if (ay->cls[iy] != iy || ax->cls[ix] != ix)
                continue; /* same memory as an earlier one */
            const int64_t fr = plan_max_frame(ly, lx, nv);
            if (fr > c->frame) c->frame = fr;
            vae_plan_trim trims[VAE_PLAN_MAX_TRIMS];
            int nt = st ? 0 : tile_trims(b, ay, iy, ax, ix, trims);
            if (st) strip_rebuilds(pl, b, st, ix, zw, &s->copied);
            int64_t cb = 0;
            double wc = 0; /* its windows' copies, as many times as tiles of its class */
            int64_t m = plan_part_mem(pl, b, ly, lx, t_b, trims, nt, zw, &s->scratch, &cb, &wc);
            s->copied += wc * class_size(ay, iy) * class_size(ax, ix);
            if (m < 0) {
                vae_free(zw);
                return vae_fail(VAE_ENOMEM, "out of memory planning");
            }
            if (cb > s->caches) s->caches = cb;
            /* its input: a crop of one frame of A's store, or of the user's input chunk */
            m += plan_rounded(pl, plan_frames_bytes(pl, b, 0, plan_part_max_step(b), ly[0], lx[0]));
            if (m > s->mem) s->mem = m;
        }
    vae_free(zw);
    return VAE_OK;
}

/* The parts that run whole frames around B (A before it, C after), what their stores hold: the
 * whole video on the device, or (host) a frame staged there and the rest on the host */
typedef struct whole_parts {
    int64_t store_a, frame_a, phase_a; /* A's output store, a frame of it, A's own run */
    int64_t store_b, frame_b, phase_c; /* B's output store (C's input), C's step, C's run */
    double copied;                     /* the bytes A and C copy on the device */
} whole_parts;

static void whole_parts_eval(planner *pl, const part *b, int blend, b_sums *s, whole_parts *w,
                             cand *c) {
    const vae_plan_request *rq = pl->rq;
    const part *pa = &pl->pa, *pc = &pl->pc;
    memset(w, 0, sizeof *w);
    for (int k = 0; k < 2 && !blend; k++) {
        const part *q = k ? pc : pa;
        const int64_t fr = q->present ? plan_max_frame(q->vh, q->vw, q->prog.n_values) : 0;
        if (fr > c->frame) c->frame = fr;
    }
    if (!blend && pa->present) {
        const int v = pa->prog.output;
        w->store_a = plan_rounded(
            pl, plan_frames_bytes(pl, pa, v, plan_part_in_frames(pl, b), pa->vh[v], pa->vw[v]));
        w->frame_a = plan_rounded(pl, plan_frames_bytes(pl, pa, v, 1, pa->vh[v], pa->vw[v]));
        w->phase_a =
            plan_rounded(pl, plan_frames_bytes(pl, pa, 0, plan_part_max_step(pa), rq->h, rq->w)) +
            whole_part_mem(pl, pa, rq->t, &s->scratch, &s->caches, &w->copied);
    }
    if (!blend && pc->present) {
        w->store_b = plan_rounded(
            pl, plan_frames_bytes(pl, pc, 0, plan_part_in_frames(pl, pc), pc->vh[0], pc->vw[0]));
        /* on the host, C's steps are copied to the device (its input buffer) */
        w->frame_b = plan_rounded(
            pl, plan_frames_bytes(pl, pc, 0, plan_part_max_step(pc), pc->vh[0], pc->vw[0]));
        w->phase_c = whole_part_mem(pl, pc, plan_part_in_frames(pl, pc), &s->scratch, &s->caches,
                                    &w->copied);
    }
}

/* The peak of B's tiles between A and C with the stores and strips' slots where they fit the
 * budget: on the device where they can, else on the host (c: the choice and its peak) */
static void stores_place(const planner *pl, const b_sums *s, const whole_parts *w, int64_t slots,
                         cand *c) {
    const vae_plan_request *rq = pl->rq;
    const int group = rq->ranks > 1; /* B's store: host memory every device of the group writes */
    /* strips: their slots on the device, or on the host where the budget needs it and they are
     * within the host cap (exec_strip.c keeps them in memory: no file behind them) */
    const int host_slots_ok = slots > 0 && slots <= rq->host_store_max;
    c->store_host[0] = c->store_host[1] = c->store_file[0] = c->store_file[1] = 0;
    int fit = 0;
    for (int sh = host_slots_ok && rq->store_host ? 1 : 0; sh < (host_slots_ok ? 2 : 1) && !fit;
         sh++) {
        c->slots_host = sh;
        const int64_t mb = s->mem + (sh ? 0 : slots);
        for (int host = rq->store_host || c->a_shared ? 1 : 0; host < 2; host++) {
            /* a host store of A (pinned, or a file through pinned slots) stages a frame on the
             * device, unless the backend copies host memory directly into the tiles' input */
            const int64_t sa = host ? (rq->host_direct ? 0 : w->frame_a) : w->store_a;
            const int64_t sb = host || group ? w->frame_b : w->store_b;
            int64_t pk = w->phase_a + sa;
            if (sa + mb + sb > pk) pk = sa + mb + sb;
            if (sb + w->phase_c > pk) pk = sb + w->phase_c;
            if (sh) pk += rq->host_copy; /* the backend's staging of the slots' copies */
            c->peak_alloc = pk;
            c->scratch = s->scratch;
            c->peak = rq->fixed + s->scratch + pk;
            c->store_host[0] = host && w->store_a;
            c->store_host[1] = (host || group) && w->store_b;
            c->store_file[0] = c->store_host[0] && w->store_a > rq->host_store_max;
            c->store_file[1] = c->store_host[1] && w->store_b > rq->host_store_max;
            if ((fit = rq->budget <= 0 || c->peak <= rq->budget)) break;
        }
    }
}

/* The bytes the chosen host stores and strips' slots move over the host link */
static double host_traffic(const planner *pl, const part *b, const axis_tiles *ay,
                           const axis_tiles *ax, const whole_parts *w, int64_t slots,
                           const cand *c) {
    double host_bytes = 0;
    /* a store on the host costs its traffic: written once, read again by the tiles' crops (A)
     * or by C (B) */
    if (c->store_host[0]) {
        double crops = 0;
        /* above host_store_max: through a temporary file (the page cache, a ring of pinned
         * slots, runner_store.c), counted twice */
        for (int iy = 0; iy < ay->n; iy++)
            for (int ix = 0; ix < ax->n; ix++)
                crops += (double)(ay->in[iy].hi - ay->in[iy].lo) * (ax->in[ix].hi - ax->in[ix].lo);
        host_bytes += (double)w->store_a * (1 + crops / ((double)b->vh[0] * b->vw[0])) *
                      (c->store_file[0] ? 2 : 1);
    }
    if (c->store_host[1]) host_bytes += 2.0 * (double)w->store_b * (c->store_file[1] ? 2 : 1);
    /* strips: each inner edge writes the slots once and reads them once (ahead, overlapped,
     * where the backend has a bus) */
    if (c->slots_host)
        host_bytes += 2.0 * (double)slots * (ax->n - 1) *
                      (pl->rq->host_copy ? OVERLAPPED_HOST_SHARE : 1);
    return host_bytes;
}

/* Memory and work of tiling part b as ay x ax (peak over the parts run before, with and after
 * the tiles; st: as column strips, ax their columns), into c. */
static int eval_tiles(planner *pl, const part *b, const axis_tiles *ay, const axis_tiles *ax,
                      int blend, const vae_strips *st, cand *c) {
    const vae_plan_request *rq = pl->rq;
    b_sums s = {0, rq->scratch_now, 0, 0, 0};
    c->frame = 0;
    int rc = tiles_b_sums(pl, b, ay, ax, st, &s, c);
    if (rc) return rc;
    whole_parts w;
    whole_parts_eval(pl, b, blend, &s, &w, c);
    c->caches = s.caches;
    const int64_t slots = st ? vae_strips_slot_bytes(st, &b->prog, rq->elem, rq->round) : 0;
    stores_place(pl, &s, &w, slots, c);
    /* work outside B: A and C run untiled */
    c->macs = s.macs + (blend ? 0 : ops_macs(pl, 0, b->from) + ops_macs(pl, b->to, pl->p->n_ops));
    const double host_bytes = host_traffic(pl, b, ay, ax, &w, slots, c);
    /* every op of B once per tile and step */
    const double calls_b =
        (double)ay->n * ax->n * b->prog.n_ops * plan_part_steps(b, plan_part_in_frames(pl, b));
    /* a group's devices share B's tiles; each runs A itself, or the first one runs it while the
     * others' wider tiles begin */
    const double ranks = rq->ranks > 1 ? rq->ranks : 1;
    /* (bands: every device runs A, but its attention's queries are shared out) */
    const double a_att = pl->b_reduce && !blend ? kind_macs(pl, 0, b->from, VAE_OP_ATTENTION) : 0;
    c->cost = (c->macs - s.macs - a_att * (1 - 1 / ranks) + DEVICE_BYTE_MACS * w.copied) /
                  (c->a_shared ? ranks : 1) +
              (s.macs + OP_CALL_MACS * calls_b + DEVICE_BYTE_MACS * s.copied) / ranks +
              HOST_BYTE_MACS * host_bytes;
    return VAE_OK;
}

static void fill_tiles(const part *b, axis_tiles *ay, const axis_tiles *ax, vae_plan *plan) {
    int k = 0;
    if (ay->n_norms && ax->n == 1) { /* bands: tile k is row span k */
        plan->n_norms = ay->n_norms;
        plan->norms = ay->norms;
        ay->norms = NULL; /* the plan's now */
    }
    for (int iy = 0; iy < ay->n; iy++)
        for (int ix = 0; ix < ax->n; ix++, k++) {
            vae_plan_tile *t = &plan->tiles[k];
            t->in_y = ay->in[iy], t->in_x = ax->in[ix];
            t->out_y = ay->out[iy], t->out_x = ax->out[ix];
            t->own_y = ay->own[iy], t->own_x = ax->own[ix];
            t->n_trims = tile_trims(b, ay, iy, ax, ix, t->trims);
        }
    plan->tiles_y = ay->n, plan->tiles_x = ax->n, plan->n_tiles = k;
}

/* Tiles of B as spans sy x sx (owned output spans, or BLEND input crops); fills plan when given. */
static int try_spans(planner *pl, const part *b, const vae_span *sy, int ny, const vae_span *sx,
                     int nx, int blend, cand *c, vae_plan *plan) {
    axis_tiles *ay = vae_calloc(1, sizeof *ay), *ax = vae_calloc(1, sizeof *ax);
    int rc = ay && ax ? VAE_OK : vae_fail(VAE_ENOMEM, "out of memory planning tiles");
    if (rc == VAE_OK) rc = axis_tiles_make(pl, b, 0, sy, ny, blend, ay);
    if (rc == VAE_OK) rc = axis_tiles_make(pl, b, 1, sx, nx, blend, ax);
    if (rc == VAE_OK) rc = eval_tiles(pl, b, ay, ax, blend, NULL, c);
    c->kind = blend ? VAE_PLAN_BLEND : VAE_PLAN_TILED;
    c->bands = !blend && pl->b_reduce;
    c->fr = pl->fr;
    c->cut = pl->cut_k;
    c->ty = ny, c->tx = nx;
    if (rc == VAE_OK && plan) {
        plan->tiles = vae_calloc((size_t)ny * nx, sizeof *plan->tiles);
        if (!plan->tiles)
            rc = vae_fail(VAE_ENOMEM, "out of memory planning tiles");
        else
            fill_tiles(b, ay, ax, plan);
    }
    if (ay) axis_tiles_free(ay);
    if (ax) axis_tiles_free(ax);
    vae_free(ay);
    vae_free(ax);
    return rc;
}

/* A device group's one row or column of ranks tiles of a decoder may run A once, on the first
 * device, while the others' tiles start on A's first frames (balance_line gives device 0 the
 * smaller tile). 0: not this plan (no A, an encoder, forced tiles, another grid; band plans: every
 * band's GroupNorms wait for all the others). */
static int shared_a_ok(const planner *pl, int ny, int nx) {
    const vae_plan_request *rq = pl->rq;
    const int n = rq->ranks;
    const int row = ny == 1 && nx == n, column = nx == 1 && ny == n;
    return n >= 2 && (row || column) && pl->pa.present && !rq->encode && rq->tile_w <= 0 &&
           rq->tile_h <= 0 && !pl->b_reduce && !rq->processes;
}

/* The tiles of a group's line (row bands, or a row or column with A once: *a_once) shared out so
 * that every device ends together. Device k's work is its share of B, plus the halo of each of
 * its inner edges (one at the ends, two in the middle: four bands of 272 rows of SeedVR2
 * 1080p: the middle ones took ~8% more GPU time, for which the others waited at every GroupNorm;
 * of 1x4 columns of Wan2.1 720p, the last one was done 30 ms early), plus A on device 0 when A runs once.
 * With e the halos' MACs per edge (measured on the even split) and A's MACs and op calls,
 * W = (B + 2 (n-1) e + A) / n the work of each, device k owns (W - edges_k e - [k = 0] A) / B of
 * B's output rows or columns (sy or sx rewritten); *a_once drops where device 0 would have nothing
 * left. */
static int balance_line(planner *pl, int *a_once, int ny, int nx, vae_span *sy, vae_span *sx) {
    const part *b = &pl->pb;
    const int n = pl->rq->ranks, column = nx == 1 && ny == n;
    if (!*a_once && !(pl->b_reduce && column)) return VAE_OK;
    const double mb = ops_macs(pl, b->from, b->to);
    /* A's op calls count as B's do in the cost (Wan2.1 720p on four GPUs: A took 86 ms of a
     * 384 ms lane, 8% of B's MACs with its calls, 5% without) */
    const part *pa = &pl->pa;
    const double a_macs = *a_once ? ops_macs(pl, 0, b->from) : 0;
    double edge = 0, a = a_macs + (*a_once ? OP_CALL_MACS * pa->prog.n_ops *
                                                 plan_part_steps(pa, plan_part_in_frames(pl, pa))
                                           : 0);
    if (mb <= 0 || (*a_once && a_macs <= 0)) { /* (B of no MACs: a shuffle; A once does not pay) */
        *a_once = 0;
        return VAE_OK;
    }
    if (n > 2) { /* (two: one edge each, which changes nothing) */
        cand even;
        memset(&even, 0, sizeof even);
        const int rc = try_spans(pl, b, sy, ny, sx, nx, 0, &even, NULL);
        if (rc) return rc;
        edge = (even.macs - ops_macs(pl, 0, pl->p->n_ops)) / (2.0 * (n - 1));
        if (edge < 0) edge = 0;
    }
    /* (where the calls would leave device 0 nothing, small frames, A's MACs alone) */
    if ((mb + 2 * (n - 1) * edge + a) / n - edge - a <= 0) a = a_macs;
    const double each = (mb + 2 * (n - 1) * edge + a) / n;
    if (each - edge - a <= 0) *a_once = 0, a = 0;
    double share[MAX_SPANS];
    for (int k = 0; k < n; k++)
        share[k] = (each - (k == 0 || k == n - 1 ? 1 : 2) * edge - (k == 0 ? a : 0)) / mb;
    const int v = b->prog.output;
    if (column)
        plan_split_shares(b->vh[v], share, n, pl->own_align, sy);
    else
        plan_split_shares(b->vw[v], share, n, pl->own_align, sx);
    const vae_span *s = column ? sy : sx;
    VAE_DEBUG("planner: a line of %d tiles balanced (a halo edge %.1f%% of B's work, A %.1f%%): "
              "%d, %d, .., %d %s",
              n, 100 * edge / mb, 100 * a / mb, s[0].hi - s[0].lo, s[1].hi - s[1].lo,
              s[n - 1].hi - s[n - 1].lo, column ? "rows" : "columns");
    return VAE_OK;
}

int plan_try_tiled(planner *pl, int tile_h, int tile_w, cand *c, vae_plan *plan) {
    const part *b = &pl->pb;
    vae_span sy[MAX_SPANS], sx[MAX_SPANS];
    const int hb = b->vh[b->prog.output], wb = b->vw[b->prog.output];
    int ny = plan_split_axis(hb, tile_h, pl->own_align, sy, MAX_SPANS);
    int nx = plan_split_axis(wb, tile_w, pl->own_align, sx, MAX_SPANS);
    if (sy[ny - 1].hi < hb || sx[nx - 1].hi < wb) /* (callers keep to MAX_SPANS a side) */
        return vae_fail(VAE_EINVAL, "internal: tiles of %dx%d leave part of a %dx%d frame out",
                        tile_h, tile_w, hb, wb);
    c->tile_h = sy[0].hi - sy[0].lo, c->tile_w = sx[0].hi - sx[0].lo; /* (the even split's) */
    c->tiles = ny * nx;
    c->a_shared = shared_a_ok(pl, ny, nx);
    const int rc = balance_line(pl, &c->a_shared, ny, nx, sy, sx);
    return rc ? rc : try_spans(pl, b, sy, ny, sx, nx, 0, c, plan);
}

int plan_try_blend(planner *pl, int tile_h, int tile_w, int overlap, cand *c, vae_plan *plan) {
    const vae_plan_request *rq = pl->rq;
    const part *b = &pl->whole;
    const int f = rq->video_factor > 0 ? rq->video_factor : 1;
    const int tile = tile_h < tile_w ? tile_h : tile_w;
    if (overlap >= tile)
        return vae_fail(VAE_EINVAL,
                        "blend overlap %d px is not below the tile "
                        "size %d px",
                        overlap, tile);
    /* crops of B's input: latent pixels for a decoder, video pixels for an encoder */
    const int unit = rq->encode ? 1 : f, align = rq->encode ? f : 1;
    const int ti_h = (tile_h + unit - 1) / unit, ti_w = (tile_w + unit - 1) / unit;
    const int ov = (overlap + unit - 1) / unit;
    vae_span sy[MAX_SPANS], sx[MAX_SPANS];
    int ny = plan_split_blend(b->vh[0], ti_h, ov, align, sy, MAX_SPANS);
    int nx = plan_split_blend(b->vw[0], ti_w, ov, align, sx, MAX_SPANS);
    if (sy[ny - 1].hi < b->vh[0] || sx[nx - 1].hi < b->vw[0]) {
        /* more crops than MAX_SPANS a side would leave part of the frame out: the least tile
         * whose MAX_SPANS crops reach across, (MAX_SPANS - 1) steps of tile - overlap and one
         * tile (with this overlap, or with the default overlap of tile / 8) */
        const int64_t n = b->vh[0] > b->vw[0] ? b->vh[0] : b->vw[0], k = MAX_SPANS - 1;
        int64_t least = (n + k * (ov + align)) / (k + 1) + 1;
        const int64_t scaled = (n + k * align) * 8 / (7 * k + 8) + 1;
        if (scaled > least) least = scaled;
        return vae_fail(VAE_EINVAL, "blended tiles of %d px (blend_tile) with %d px of overlap "
                                    "split this frame into more than %d tiles per side, the most "
                                    "the planner takes; use tiles of at least about %lld px",
                        tile, overlap, MAX_SPANS, (long long)(least * unit));
    }
    c->tile_h = sy[0].hi - sy[0].lo, c->tile_w = sx[0].hi - sx[0].lo;
    c->blend_tile = tile_h, c->blend_tile_w = tile_w, c->blend_overlap = overlap;
    c->a_shared = 0;
    if (plan) plan->blend_overlap = rq->encode ? (overlap + f - 1) / f : overlap;
    return try_spans(pl, b, sy, ny, sx, nx, 1, c, plan);
}

/* ---- column strips of part B (strip.h) -------------------------------------------------------- */
static int strips_eval(planner *pl, const part *b, vae_strips *st, int n, cand *c,
                       vae_plan *plan) {
    const int nv = b->prog.n_values;
    c->a_shared = 0;
    axis_tiles *ay = vae_calloc(1, sizeof *ay), *ax = vae_calloc(1, sizeof *ax);
    int rc = ay && ax ? VAE_OK : vae_fail(VAE_ENOMEM, "out of memory planning strips");
    if (rc == VAE_OK) {
        ay->len = vae_calloc((size_t)nv, sizeof *ay->len);
        ax->len = vae_calloc((size_t)n * nv, sizeof *ax->len);
        if (!ay->len || !ax->len) rc = vae_fail(VAE_ENOMEM, "out of memory planning strips");
    }
    if (rc == VAE_OK) {
        ay->n = 1, ax->n = n;
        ay->in[0] = (vae_span){0, b->vh[0]};
        ay->out[0] = ay->own[0] = (vae_span){0, b->vh[b->prog.output]};
        memcpy(ay->len, b->vh, (size_t)nv * sizeof *ay->len);
        for (int k = 0; k < n; k++) {
            ax->in[k] = vae_strip_exact(st, k, b->prog.input);
            ax->out[k] = vae_strip_crop(st, k, b->prog.output);
            ax->own[k] = vae_strip_exact(st, k, b->prog.output);
            ax->cls[k] = k;
            for (int v = 0; v < nv; v++) {
                const vae_span cr = vae_strip_crop(st, k, v);
                ax->len[(size_t)k * nv + v] = cr.hi - cr.lo;
            }
        }
        rc = eval_tiles(pl, b, ay, ax, 0, st, c);
    }
    c->kind = VAE_PLAN_TILED;
    c->fr = pl->fr, c->cut = pl->cut_k, c->ty = 1, c->tx = n, c->strips = n;
    c->tile_h = ay ? ay->own[0].hi : 0, c->tile_w = ax ? ax->own[0].hi - ax->own[0].lo : 0;
    if (rc == VAE_OK && plan) {
        plan->tiles = vae_calloc((size_t)n, sizeof *plan->tiles);
        plan->strips = vae_calloc(1, sizeof *plan->strips);
        if (!plan->tiles || !plan->strips) {
            rc = vae_fail(VAE_ENOMEM, "out of memory planning strips");
        } else {
            fill_tiles(b, ay, ax, plan);
            for (int k = 0; k < n; k++)
                plan->tiles[k].n_trims = 0; /* strips hold whole values: nothing is trimmed */
            st->slots_host = c->slots_host;
            *plan->strips = *st; /* the plan owns the geometry from now on */
            memset(st, 0, sizeof *st);
        }
    }
    if (ay) axis_tiles_free(ay);
    if (ax) axis_tiles_free(ax);
    vae_free(ay);
    vae_free(ax);
    return rc;
}

int plan_try_strips(planner *pl, int n, cand *c, vae_plan *plan) {
    const part *b = &pl->pb;
    const int w_in = b->vw[0];
    if (n < 2 || n > MAX_SPANS || n > w_in || pl->rq->ranks > 1) return VAE_EUNSUPPORTED;
    /* input bounds whose output edges split the output evenly: an edge moves left by the
     * network's shift s (output = f * input - s) */
    const int w_out = b->vw[b->prog.output], f = w_out / w_in > 0 ? w_out / w_in : 1;
    const int shift = f * (w_in / 2) - vae_strips_out_edge(&b->prog, b->vw, w_in / 2);
    int bounds[MAX_SPANS + 1];
    bounds[0] = 0, bounds[n] = w_in;
    for (int k = 1; k < n; k++) {
        bounds[k] = (int)(((int64_t)w_out * k / n + shift + f - 1) / f);
        if (bounds[k] <= bounds[k - 1]) bounds[k] = bounds[k - 1] + 1;
        if (bounds[k] >= w_in) return VAE_EUNSUPPORTED;
    }
    vae_strips st;
    int rc = vae_strips_make(&b->prog, b->vw, bounds, n, &st);
    if (rc == VAE_EUNSUPPORTED) { /* not for this part or this many strips */
        VAE_DEBUG("planner: no %d strips: %s", n, vae_last_error());
        vae_error_clear();
    }
    if (rc) return rc;
    for (int j = 0; j < st.n_slot; j++) { /* the slots hold every frame of their value */
        st.slot[j].frames = part_value_frames(pl, b, st.slot[j].value);
        st.slot[j].rows = b->vh[st.slot[j].value];
    }
    rc = strips_eval(pl, b, &st, n, c, plan);
    vae_strips_free(&st);
    return rc;
}
