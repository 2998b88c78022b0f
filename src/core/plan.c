/* plan.c -- the planner: frame loops, parts, tiles and their memory (plan.h). */
#include "plan.h"

#include <stdio.h>
#include <string.h>

#include "core.h"
#include "plan_internal.h"

/* "812.4 MiB", "3.25 GiB" (four of them per message at most: rotating buffers) */
static const char *size_str(int64_t bytes) {
    static _Thread_local char buf[4][32];
    static _Thread_local int next;
    char *b = buf[next++ & 3];
    const double v = (double)bytes;
    if (v >= 1024.0 * 1024 * 1024)
        snprintf(b, 32, "%.2f GiB", v / (1024.0 * 1024 * 1024));
    else
        snprintf(b, 32, "%.1f MiB", v / (1024.0 * 1024));
    return b;
}

/* ---- parts -------------------------------------------------------------------------------------
 */
typedef struct part {
    vae_program prog; /* the slice (or a copy of the whole program's ops) */
    int from, to, present;
    int first, chunk; /* input frames per step */
    /* two ways through it: [0] whole chunks (trim points only), [1] frame by frame after
     * temporal upsampling (less memory, a little slower on GPUs) */
    vae_loops loops[2];
    int loop_at[2][VAE_MAX_LOOPS], whole[2][VAE_MAX_LOOPS], n_loops[2];
    int trim_at[VAE_MAX_LOOPS], n_trim_at;
    int *vh, *vw; /* whole-frame shapes of the slice's values */
} part;

typedef struct planner {
    const vae_plan_request *rq;
    const vae_program *p;
    int *vh, *vw;       /* the whole program's value shapes */
    int64_t *op_frames; /* per op: output frames over the stream */
    int steps;          /* steps of the whole stream */
    part whole, pa, pb, pc;
    int tiled_ok;      /* a tiled plan exists (B without global ops) */
    int own_align;     /* owned tile edges in B's output are multiples of this */
    int fr;            /* the loops being evaluated: 0 whole chunks, 1 frame by frame */
    double macs_whole; /* of the untiled program */
    /* scratch for tilers */
    vae_span *need, *crop, *valid;
    int *len_y, *len_x;
} planner;

static void part_free(part *q) {
    if (q->present) vae_program_free(&q->prog);
    vae_loops_free(&q->loops[0]);
    vae_loops_free(&q->loops[1]);
    vae_free(q->vh);
    vae_free(q->vw);
    memset(q, 0, sizeof *q);
}

/* The slice [from, to) of the program with its shapes and loops. */
static int part_make(planner *pl, part *q, int from, int to, int first, int chunk, int tiled) {
    memset(q, 0, sizeof *q);
    if (from >= to) return VAE_OK;
    int rc = vae_program_slice(pl->p, from, to, &q->prog);
    if (rc) return rc;
    q->present = 1;
    q->from = from, q->to = to, q->first = first, q->chunk = chunk;
    int in;
    vae_program_crossing(pl->p, from, &in, 1);
    q->vh = vae_calloc((size_t)q->prog.n_values, sizeof *q->vh);
    q->vw = vae_calloc((size_t)q->prog.n_values, sizeof *q->vw);
    if (!q->vh || !q->vw) return vae_fail(VAE_ENOMEM, "out of memory planning");
    for (int v = 0; v < q->prog.n_values; v++) {
        int whole = v == 0 ? in : from + v;
        q->vh[v] = pl->vh[whole];
        q->vw[v] = pl->vw[whole];
    }
    for (int fr = 0; fr < 2 && rc == VAE_OK; fr++) {
        rc = plan_choose_loops(&q->prog, first, chunk, fr && pl->rq->frame_loops, tiled,
                               q->loop_at[fr], q->whole[fr], &q->n_loops[fr], q->trim_at,
                               &q->n_trim_at);
        if (rc == VAE_OK)
            rc = vae_loops_init(&q->loops[fr], &q->prog, q->loop_at[fr], q->whole[fr],
                                q->n_loops[fr]);
    }
    return rc;
}

static int part_steps(const part *q, int t_in) {
    if (t_in <= 0) return 0;
    return t_in <= q->first ? 1 : 1 + (t_in - q->first + q->chunk - 1) / q->chunk;
}

/* The part's memory for value shapes vh x vw (a tile's, or the whole frame's). */
static int64_t part_mem(const planner *pl, const part *q, const int *vh, const int *vw, int t_in,
                        const vae_plan_trim *trims, int n_trims, int64_t *scratch) {
    if (!q->present) return 0;
    int steps = part_steps(q, t_in);
    if (steps > 8) steps = 8; /* caches are full and the step is steady well before */
    int64_t need = 0;
    const int64_t m = vae_plan_mem_part(&q->prog, &q->loops[pl->fr], vh, vw, pl->rq, q->first,
                                        q->chunk, steps, trims, n_trims, &need);
    if (need > *scratch) *scratch = need;
    return m;
}

static int64_t rounded(const planner *pl, int64_t bytes) {
    if (bytes <= 0) return 0;
    return pl->rq->round ? (int64_t)pl->rq->round((size_t)bytes) : bytes;
}

/* bytes of t frames of value v of part q at h x w */
static int64_t frames_bytes(const planner *pl, const part *q, int v, int t, int h, int w) {
    const int c = v == 0 ? q->prog.in_channels : q->prog.ops[v - 1].c_out;
    return (int64_t)t * h * w * c * (int64_t)pl->rq->elem;
}

/* ---- candidates ---------------------------------------------------------------------------------
 */
typedef struct cand {
    vae_plan_kind kind;
    int fr;             /* the loops it was evaluated with */
    int ty, tx;         /* tile grid */
    int tile_h, tile_w; /* owned tile size in B's output (TILED), or input crop size (BLEND) */
    int64_t peak, peak_alloc, scratch;
    int store_host[2];
    double macs;
} cand;

static int64_t whole_peak(const planner *pl, int64_t *scratch) {
    const vae_plan_request *rq = pl->rq;
    const part *q = &pl->whole;
    const int max_chunk = q->first > q->chunk ? q->first : q->chunk;
    int64_t dev_in = rounded(pl, frames_bytes(pl, q, 0, max_chunk, rq->h, rq->w));
    int64_t m = part_mem(pl, q, q->vh, q->vw, rq->t, NULL, 0, scratch);
    return m < 0 ? -1 : dev_in + m;
}

/* ---- tiles of part B
 * ------------------------------------------------------------------------------ */
enum { MAX_SPANS = 96 };

typedef struct axis_tiles {
    int n;
    vae_span own[MAX_SPANS], in[MAX_SPANS], out[MAX_SPANS];
    vae_span rel[MAX_SPANS][VAE_MAX_LOOPS]; /* trims: offset and length in the value's crop */
    int *len;                               /* [n][n_values]: each value's extent (as made) */
    int cls[MAX_SPANS];                     /* first span with the same extents and trims */
} axis_tiles;

static int b_align_in(const planner *pl, const part *b, int blend) {
    const int a = blend ? pl->rq->video_factor
                        : b->vh[0] / (b->vh[b->prog.output] ? b->vh[b->prog.output] : 1);
    return pl->rq->encode && a > 1 ? a : 1;
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
                    pl->need,
                    pl->crop,
                    pl->valid};
    for (int k = 0; k < n; k++) {
        vae_span in = spans[k];
        int *len = at->len + (size_t)k * nv;
        int rc = plan_tile_axis(&t, spans[k], !blend, &in, at->rel[k], len);
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
    a->len = NULL;
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
static int part_in_frames(const planner *pl, const part *q) {
    if (q->from == 0) return pl->rq->t;
    return (int)pl->op_frames[q->from - 1];
}

/* Memory and work of tiling part b as ay x ax (peak over the parts run before, with and after
 * the tiles), into c. */
static int eval_tiles(planner *pl, const part *b, const axis_tiles *ay, const axis_tiles *ax,
                      int blend, cand *c) {
    const vae_plan_request *rq = pl->rq;
    const int nv = b->prog.n_values, t_b = part_in_frames(pl, b);
    int64_t mem_b = 0, scratch = pl->rq->scratch_now;
    double macs = 0;
    for (int iy = 0; iy < ay->n; iy++)
        for (int ix = 0; ix < ax->n; ix++) {
            const int *ly = ay->len + (size_t)iy * nv, *lx = ax->len + (size_t)ix * nv;
            for (int i = 0; i < b->prog.n_ops; i++) {
                const vae_op *op = &b->prog.ops[i];
                macs += vae_op_macs(op, (int)pl->op_frames[b->from + i], ly[op->out], lx[op->out]);
            }
            if (ay->cls[iy] != iy || ax->cls[ix] != ix)
                continue; /* same memory as an earlier one */
            vae_plan_trim trims[VAE_PLAN_MAX_TRIMS];
            int nt = tile_trims(b, ay, iy, ax, ix, trims);
            int64_t m = part_mem(pl, b, ly, lx, t_b, trims, nt, &scratch);
            if (m < 0) return vae_fail(VAE_ENOMEM, "out of memory planning");
            /* its input: a crop of one frame of A's store, or of the user's input chunk */
            const int in_frames = b->from == 0 ? (b->first > b->chunk ? b->first : b->chunk) : 1;
            m += rounded(pl, frames_bytes(pl, b, 0, in_frames, ly[0], lx[0]));
            if (m > mem_b) mem_b = m;
        }
    const part *pa = &pl->pa, *pc = &pl->pc;
    /* the stores hold the whole video on the device when that fits, else one frame is staged
     * there and the rest lives on the host */
    int64_t store_a = 0, store_b = 0, frame_a = 0, frame_b = 0, phase_a = 0, phase_c = 0;
    if (!blend && pa->present) {
        const int v = pa->prog.output;
        store_a = rounded(pl, frames_bytes(pl, pa, v, part_in_frames(pl, b), pa->vh[v], pa->vw[v]));
        frame_a = rounded(pl, frames_bytes(pl, pa, v, 1, pa->vh[v], pa->vw[v]));
        const int mc = pa->first > pa->chunk ? pa->first : pa->chunk;
        phase_a = rounded(pl, frames_bytes(pl, pa, 0, mc, rq->h, rq->w)) +
                  part_mem(pl, pa, pa->vh, pa->vw, rq->t, NULL, 0, &scratch);
    }
    if (!blend && pc->present) {
        store_b =
            rounded(pl, frames_bytes(pl, pc, 0, part_in_frames(pl, pc), pc->vh[0], pc->vw[0]));
        frame_b = rounded(pl, frames_bytes(pl, pc, 0, 1, pc->vh[0], pc->vw[0]));
        phase_c = part_mem(pl, pc, pc->vh, pc->vw, part_in_frames(pl, pc), NULL, 0, &scratch);
    }
    c->store_host[0] = c->store_host[1] = 0;
    for (int host = 0; host < 2; host++) {
        const int64_t sa = host ? frame_a : store_a, sb = host ? frame_b : store_b;
        int64_t pk = phase_a + sa;
        if (sa + mem_b + sb > pk) pk = sa + mem_b + sb;
        if (sb + phase_c > pk) pk = sb + phase_c;
        c->peak_alloc = pk;
        c->scratch = scratch;
        c->peak = rq->fixed + scratch + pk;
        c->store_host[0] = host && store_a;
        c->store_host[1] = host && store_b;
        if (rq->budget <= 0 || c->peak <= rq->budget) break;
    }
    /* work outside B: A and C run untiled */
    for (int i = 0; i < pl->p->n_ops; i++)
        if (!blend && (i < b->from || i >= b->to))
            macs += vae_op_macs(&pl->p->ops[i], (int)pl->op_frames[i], pl->vh[pl->p->ops[i].out],
                                pl->vw[pl->p->ops[i].out]);
    c->macs = macs;
    return VAE_OK;
}

static void fill_tiles(const part *b, const axis_tiles *ay, const axis_tiles *ax,
                       vae_plan *plan) {
    int k = 0;
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
    if (rc == VAE_OK) rc = eval_tiles(pl, b, ay, ax, blend, c);
    c->kind = blend ? VAE_PLAN_BLEND : VAE_PLAN_TILED;
    c->fr = pl->fr;
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

static int try_tiled(planner *pl, int tile_h, int tile_w, cand *c, vae_plan *plan) {
    const part *b = &pl->pb;
    vae_span sy[MAX_SPANS], sx[MAX_SPANS];
    const int hb = b->vh[b->prog.output], wb = b->vw[b->prog.output];
    int ny = plan_split_axis(hb, tile_h, pl->own_align, sy, MAX_SPANS);
    int nx = plan_split_axis(wb, tile_w, pl->own_align, sx, MAX_SPANS);
    c->tile_h = sy[0].hi - sy[0].lo, c->tile_w = sx[0].hi - sx[0].lo;
    return try_spans(pl, b, sy, ny, sx, nx, 0, c, plan);
}

static int try_blend(planner *pl, cand *c, vae_plan *plan) {
    const vae_plan_request *rq = pl->rq;
    const part *b = &pl->whole;
    const int f = rq->video_factor > 0 ? rq->video_factor : 1;
    const int tile = rq->blend_tile, overlap = rq->blend_overlap;
    if (overlap >= tile)
        return vae_fail(VAE_EINVAL,
                        "blend overlap %d px is not below the tile "
                        "size %d px",
                        overlap, tile);
    /* crops of B's input: latent pixels for a decoder, video pixels for an encoder */
    const int unit = rq->encode ? 1 : f, align = rq->encode ? f : 1;
    int ti = (tile + unit - 1) / unit, ov = (overlap + unit - 1) / unit;
    vae_span sy[MAX_SPANS], sx[MAX_SPANS];
    int ny = plan_split_blend(b->vh[0], ti, ov, align, sy, MAX_SPANS);
    int nx = plan_split_blend(b->vw[0], ti, ov, align, sx, MAX_SPANS);
    c->tile_h = sy[0].hi - sy[0].lo, c->tile_w = sx[0].hi - sx[0].lo;
    if (plan) plan->blend_overlap = rq->encode ? (overlap + f - 1) / f : overlap;
    return try_spans(pl, b, sy, ny, sx, nx, 1, c, plan);
}

/* The tiled parts: B after the last op global per frame (decoders) or before the first
 * (encoders), cut where one value crosses. */
static int make_parts(planner *pl) {
    const vae_program *p = pl->p;
    int first_g = p->n_ops, last_g = -1, cut = -1;
    for (int i = 0; i < p->n_ops; i++)
        if (vae_op_is_global(&p->ops[i])) {
            if (first_g == p->n_ops) first_g = i;
            last_g = i;
        }
    if (pl->rq->encode) {
        for (int pos = first_g; pos >= 1 && cut < 0; pos--)
            if (pos == p->n_ops || vae_program_crossing(p, pos, NULL, 0) == 1) cut = pos;
        if (cut < 1) return VAE_OK;
        int rc = part_make(pl, &pl->pb, 0, cut, p->first_chunk, p->chunk, 1);
        if (rc == VAE_OK) rc = part_make(pl, &pl->pc, cut, p->n_ops, 1, 1, 0);
        pl->tiled_ok = rc == VAE_OK;
        return rc;
    }
    /* B starts at the last single-value position before the first upsampling (in space or time):
     * the stages before it are at the latent resolution, cheap to run whole, and their halos
     * would cost the tiles the most (the widest receptive field at the coarsest scale) */
    int up = last_g + 1;
    while (up < p->n_ops && !plan_is_upsampling(&p->ops[up]) &&
           !(p->ops[up].kind == VAE_OP_SHUFFLE_UP && p->ops[up].ft > 1))
        up++;
    for (int pos = up < p->n_ops ? up : p->n_ops - 1; pos > last_g && cut < 0; pos--)
        if (pos == 0 || vae_program_crossing(p, pos, NULL, 0) == 1) cut = pos;
    for (int pos = last_g + 1; pos < p->n_ops && cut < 0; pos++)
        if (pos == 0 || vae_program_crossing(p, pos, NULL, 0) == 1) cut = pos;
    if (cut < 0) return VAE_OK;
    int rc = part_make(pl, &pl->pa, 0, cut, p->first_chunk, p->chunk, 0);
    if (rc == VAE_OK) rc = part_make(pl, &pl->pb, cut, p->n_ops, 1, 1, 1);
    pl->tiled_ok = rc == VAE_OK;
    return rc;
}

/* ---- the decision ------------------------------------------------------------------------------
 */
static void planner_free(planner *pl) {
    part_free(&pl->whole);
    part_free(&pl->pa);
    part_free(&pl->pb);
    part_free(&pl->pc);
    vae_free(pl->vh);
    vae_free(pl->vw);
    vae_free(pl->op_frames);
    vae_free(pl->need);
    vae_free(pl->crop);
    vae_free(pl->valid);
}

static int planner_init(planner *pl, const vae_plan_request *rq, vae_plan *plan) {
    const vae_program *p = rq->prog;
    memset(pl, 0, sizeof *pl);
    pl->rq = rq;
    pl->p = p;
    const size_t nv = (size_t)p->n_values;
    pl->vh = vae_calloc(nv, sizeof *pl->vh);
    pl->vw = vae_calloc(nv, sizeof *pl->vw);
    pl->op_frames = vae_calloc((size_t)p->n_ops + 1, sizeof *pl->op_frames);
    pl->need = vae_calloc(nv, sizeof *pl->need);
    pl->crop = vae_calloc(nv, sizeof *pl->crop);
    pl->valid = vae_calloc(nv, sizeof *pl->valid);
    if (!pl->vh || !pl->vw || !pl->op_frames || !pl->need || !pl->crop || !pl->valid)
        return vae_fail(VAE_ENOMEM, "out of memory planning");
    int rc = vae_program_shapes(p, rq->h, rq->w, pl->vh, pl->vw);
    if (rc) return rc;
    plan_walk_sum sum = {p, pl->vh, pl->vw, 0, pl->op_frames};
    if ((rc = plan_walk_stream(p, NULL, rq->t, p->first_chunk, p->chunk, &sum, &plan->t_out)))
        return rc;
    if (plan->t_out == 0) return vae_fail(VAE_ESHAPE, "input of %d frames gives no output", rq->t);
    plan->macs_whole = sum.macs;
    plan->h_out = pl->vh[p->output], plan->w_out = pl->vw[p->output];
    plan->c_out = p->out_channels;
    if ((rc = part_make(pl, &pl->whole, 0, p->n_ops, p->first_chunk, p->chunk, 0))) return rc;
    if ((rc = make_parts(pl))) return rc;
    if (pl->tiled_ok) {
        const part *b = &pl->pb;
        int in = b->vh[0], out = b->vh[b->prog.output];
        pl->own_align = !rq->encode && out > in && in > 0 ? out / in : 1;
    }
    return VAE_OK;
}

static void plan_set_part(vae_plan_part *dst, const part *src, int fr) {
    memset(dst, 0, sizeof *dst);
    if (!src->present) return;
    dst->from = src->from, dst->to = src->to, dst->n_loops = src->n_loops[fr];
    memcpy(dst->loops, src->loop_at[fr], sizeof dst->loops);
    memcpy(dst->whole, src->whole[fr], sizeof dst->whole);
}

/* Fills the plan's parts and stores for the chosen candidate. */
static int plan_fill(planner *pl, const cand *c, vae_plan *plan) {
    plan->kind = c->kind;
    plan->peak = c->peak;
    plan->peak_alloc = c->peak_alloc;
    plan->scratch = c->scratch;
    plan->macs = c->macs;
    plan->tile_h = c->tile_h, plan->tile_w = c->tile_w;
    if (c->kind == VAE_PLAN_WHOLE) {
        plan_set_part(&plan->part[1], &pl->whole, c->fr);
        plan->tiles = vae_calloc(1, sizeof *plan->tiles);
        if (!plan->tiles) return vae_fail(VAE_ENOMEM, "out of memory planning");
        vae_plan_tile *t = &plan->tiles[0];
        t->in_y = t->out_y = t->own_y = (vae_span){0, 0};
        t->in_y.hi = pl->rq->h, t->in_x.hi = pl->rq->w;
        t->out_y.hi = t->own_y.hi = plan->h_out;
        t->out_x.hi = t->own_x.hi = plan->w_out;
        plan->tiles_y = plan->tiles_x = plan->n_tiles = 1;
        return VAE_OK;
    }
    if (c->kind == VAE_PLAN_BLEND) {
        plan_set_part(&plan->part[1], &pl->whole, c->fr);
        cand again;
        return try_blend(pl, &again, plan);
    }
    plan_set_part(&plan->part[0], &pl->pa, c->fr);
    plan_set_part(&plan->part[1], &pl->pb, c->fr);
    plan_set_part(&plan->part[2], &pl->pc, c->fr);
    for (int k = 0; k < 2; k++) {
        const part *q = k == 0 ? &pl->pa : &pl->pc;
        if (!q->present) continue;
        const int v = k == 0 ? q->prog.output : 0;
        plan->store_t[k] = k == 0 ? part_in_frames(pl, &pl->pb) : part_in_frames(pl, q);
        plan->store_h[k] = q->vh[v], plan->store_w[k] = q->vw[v];
        plan->store_c[k] = k == 0 ? q->prog.out_channels : q->prog.in_channels;
        plan->store_host[k] = c->store_host[k];
    }
    cand again;
    return try_tiled(pl, c->tile_h, c->tile_w, &again, plan);
}

static const char *kind_name(vae_plan_kind k) {
    return k == VAE_PLAN_WHOLE   ? "whole frames"
           : k == VAE_PLAN_TILED ? "exact tiles, tile-major"
                                 : "blended tiles";
}

/* Searches tile grids from few to many tiles: the first whose peak fits, or the smallest peak. */
static int search_tiles(planner *pl, cand *best, cand *floor_c) {
    memset(floor_c, 0, sizeof *floor_c);
    const part *b = &pl->pb;
    const int hb = b->vh[b->prog.output], wb = b->vw[b->prog.output];
    const int64_t budget = pl->rq->budget;
    floor_c->peak = -1;
    int tried = 0;
    for (int n = 1; n <= 48 * 48 && tried < 64; n++)
        for (int ny = 1; ny <= n && tried < 64; ny++) {
            if (n % ny) continue;
            const int nx = n / ny;
            const int th = (hb + ny - 1) / ny, tw = (wb + nx - 1) / nx;
            if (ny > MAX_SPANS / 2 || nx > MAX_SPANS / 2 || th < 2 * pl->own_align ||
                tw < 2 * pl->own_align || (th > 2 * tw && ny < hb) || (tw > 2 * th && nx < wb))
                continue;
            if (n == 1) continue; /* one tile is the whole frame */
            cand c;
            memset(&c, 0, sizeof c);
            tried++;
            int rc = try_tiled(pl, th, tw, &c, NULL);
            if (rc) return rc;
            if (floor_c->peak < 0 || c.peak < floor_c->peak) *floor_c = c;
            if (c.peak <= budget) {
                *best = c;
                return VAE_OK;
            }
        }
    return PLAN_NOFIT;
}

static void describe(const planner *pl, vae_plan *plan) {
    const vae_plan_request *rq = pl->rq;
    char *w = plan->why;
    const size_t cap = sizeof plan->why;
    size_t n = (size_t)snprintf(w, cap, "%s %dx%dx%d: %s", rq->encode ? "encode" : "decode", rq->t,
                                rq->h, rq->w, kind_name(plan->kind));
    if (plan->kind != VAE_PLAN_WHOLE && n < cap)
        n += (size_t)snprintf(w + n, cap - n, ", %dx%d tiles of %dx%d (%s), ops %d..%d tiled",
                              plan->tiles_y, plan->tiles_x, plan->tile_h, plan->tile_w,
                              plan->kind == VAE_PLAN_BLEND ? "input crops" : "output rows x cols",
                              plan->part[1].from, plan->part[1].to);
    for (int k = 0; k < 2 && n < cap; k++)
        if (plan->store_t[k])
            n +=
                (size_t)snprintf(w + n, cap - n, ", store %c of %d frames %dx%dx%d on the %s (%s)",
                                 'A' + k, plan->store_t[k], plan->store_h[k], plan->store_w[k],
                                 plan->store_c[k], plan->store_host[k] ? "host" : "device",
                                 size_str((int64_t)plan->store_t[k] * plan->store_h[k] *
                                          plan->store_w[k] * plan->store_c[k] * (int64_t)rq->elem));
    int frame_loops = 0;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < plan->part[k].n_loops; i++)
            frame_loops += !plan->part[k].whole[i];
    if (n < cap)
        n += (size_t)snprintf(w + n, cap - n, "; %s",
                              frame_loops ? "frame by frame after "
                                            "temporal upsampling"
                                          : "chunks whole");
    if (n < cap)
        snprintf(w + n, cap - n,
                 "; predicted peak %s (weights and workspace %s, scratch %s) for a budget of %s "
                 "(the exact floor: %s); work %+.1f%%",
                 size_str(plan->peak), size_str(rq->fixed), size_str(plan->scratch),
                 rq->budget > 0 ? size_str(rq->budget) : "none", size_str(plan->floor),
                 100.0 * (plan->macs / (plan->macs_whole > 0 ? plan->macs_whole : 1) - 1));
}

/* The candidate to run: the first that fits, in the order of speed (below); *floor_c: the
 * smallest exact peak met on the way. PLAN_NOFIT when none fits (best: the smallest); VAE_ENOMEM
 * only when the host ran out of memory. */
static int choose(planner *pl, cand *best, cand *floor_c) {
    const vae_plan_request *rq = pl->rq;
    const int64_t budget = rq->budget;
    const int n_fr = rq->frame_loops ? 2 : 1;
    floor_c->peak = -1;
    int rc = VAE_OK;
    if (rq->mode == VAE_TILE_BLEND) {
        for (int fr = 0; fr < n_fr; fr++) {
            pl->fr = fr;
            if ((rc = try_blend(pl, best, NULL))) return rc;
            best->fr = fr;
            if (budget <= 0 || best->peak <= budget) return VAE_OK;
        }
        return PLAN_NOFIT;
    }
    const int forced = rq->tile_h > 0 || rq->tile_w > 0;
    if (forced && !pl->tiled_ok)
        return vae_fail(VAE_EUNSUPPORTED, "exact tiles: this model has no part that tiles (every "
                                          "stage has an op global per frame); use the blend mode");
    if (forced) {
        const part *b = &pl->pb;
        /* video-side pixels per pixel of B's output */
        int r = rq->encode ? b->vh[0] / (b->vh[b->prog.output] ? b->vh[b->prog.output] : 1) : 1;
        if (r < 1) r = 1;
        const int th = rq->tile_h > 0 ? (rq->tile_h + r - 1) / r : b->vh[b->prog.output];
        const int tw = rq->tile_w > 0 ? (rq->tile_w + r - 1) / r : b->vw[b->prog.output];
        for (int fr = 0; fr < n_fr; fr++) {
            pl->fr = fr;
            if ((rc = try_tiled(pl, th, tw, best, NULL))) return rc;
            best->fr = fr;
            if (budget <= 0 || best->peak <= budget) break;
        }
        *floor_c = *best;
        return VAE_OK; /* forced: runs even over the budget (the backend still enforces it) */
    }
    /* in the order of speed on a GPU: whole frames in chunks, tiles in chunks, then frame by frame
     * (which needs the least memory but runs 1-frame kernels) */
    for (int fr = 0; fr < n_fr; fr++) {
        pl->fr = fr;
        cand c;
        memset(&c, 0, sizeof c);
        c.kind = VAE_PLAN_WHOLE, c.fr = fr, c.macs = pl->macs_whole;
        c.scratch = rq->scratch_now;
        c.peak_alloc = whole_peak(pl, &c.scratch);
        if (c.peak_alloc < 0) return vae_fail(VAE_ENOMEM, "out of memory planning");
        c.peak = rq->fixed + c.scratch + c.peak_alloc;
        if (floor_c->peak < 0 || c.peak < floor_c->peak) *floor_c = c;
        if (budget <= 0 || c.peak <= budget) {
            *best = c;
            return VAE_OK;
        }
        if (rq->mode == VAE_TILE_NONE || !pl->tiled_ok) continue;
        cand tf;
        rc = search_tiles(pl, best, &tf);
        if (tf.peak > 0 && tf.peak < floor_c->peak) *floor_c = tf;
        if (rc != PLAN_NOFIT) return rc;
    }
    *best = *floor_c;
    return PLAN_NOFIT;
}

int vae_plan_make(vae_plan *plan, const vae_plan_request *rq) {
    memset(plan, 0, sizeof *plan);
    plan->encode = rq->encode;
    plan->budget = rq->budget;
    plan->t_in = rq->t, plan->h_in = rq->h, plan->w_in = rq->w;
    plan->c_in = rq->prog->in_channels;
    planner pl;
    cand best, floor_c;
    memset(&best, 0, sizeof best);
    memset(&floor_c, 0, sizeof floor_c);
    int rc = planner_init(&pl, rq, plan);
    pl.macs_whole = plan->macs_whole;
    if (rc == VAE_OK) rc = choose(&pl, &best, &floor_c);
    plan->floor = floor_c.peak;
    if (rc == VAE_OK || rc == PLAN_NOFIT) {
        pl.fr = best.fr;
        int rc2 = plan_fill(&pl, &best, plan);
        if (rc2)
            rc = rc2;
        else
            describe(&pl, plan);
    }
    const int nofit = rc == PLAN_NOFIT; /* a plan to describe, unlike a host allocation failure */
    if (nofit)
        rc = vae_fail(VAE_ENOMEM,
                      "memory budget %s is below what %s needs: %s (the exact floor: %s, of "
                      "which weights and backend reserve %s). Raise --max-memory%s",
                      size_str(rq->budget),
                      rq->mode == VAE_TILE_NONE ? "whole frames" : "this input",
                      size_str(plan->peak), size_str(plan->floor), size_str(rq->fixed),
                      rq->mode == VAE_TILE_BLEND  ? " or use a smaller --tile-size"
                      : rq->mode == VAE_TILE_NONE ? " or allow tiles (--tile-mode auto)"
                                                  : ", or use --tile-mode blend (not exact)");
    planner_free(&pl);
    if (rc && !nofit) vae_plan_free(plan);
    return rc;
}

void vae_plan_free(vae_plan *plan) {
    vae_free(plan->tiles);
    plan->tiles = NULL;
    plan->n_tiles = 0;
}
