/* plan.c -- the planner's decision: parts and where tiles start, the search over grids, the
 * order of candidates, the description (plan.h; what a candidate costs: plan_tiles.c). */
#include "plan.h"

#include <stdio.h>
#include <string.h>

#include "core.h"
#include "plan_internal.h"

/* "812.4 MiB", "3.25 GiB" (eight of them per message at most: rotating buffers) */
static const char *size_str(int64_t bytes) {
    static _Thread_local char buf[8][32];
    static _Thread_local int next;
    char *b = buf[next++ & 7];
    const double v = (double)bytes;
    if (v >= 1024.0 * 1024 * 1024)
        snprintf(b, 32, "%.2f GiB", v / (1024.0 * 1024 * 1024));
    else
        snprintf(b, 32, "%.1f MiB", v / (1024.0 * 1024));
    return b;
}

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
        q->loops[fr].width = fr ? pl->rq->loop_frames : 0;
    }
    return rc;
}

/* Where B may start. Encoders: one cut, before their first op global per frame (B = [0, cut),
 * C = the middle and head). Decoders: after their last global op; the first candidate is the
 * last single-value position before the first upsampling (in space or time): the stages before
 * it are at the latent resolution, cheap to run whole, and their halos would cost the tiles the
 * most (the widest receptive field at the coarsest scale); later candidates start B before each
 * further upsampling, trading a larger store of A's output for smaller halos. */
static void find_cuts(planner *pl) {
    const vae_program *p = pl->p;
    int first_g = p->n_ops, last_g = -1;
    pl->n_cuts = 0;
    for (int i = 0; i < p->n_ops; i++)
        if (vae_op_is_global(&p->ops[i]) && !(pl->reduce_ok && vae_op_is_reducible(&p->ops[i]))) {
            if (first_g == p->n_ops) first_g = i;
            last_g = i;
        }
    if (pl->rq->encode) {
        for (int pos = first_g; pos >= 1; pos--)
            if (pos == p->n_ops || vae_program_crossing(p, pos, NULL, 0) == 1) {
                pl->cuts[pl->n_cuts++] = pos;
                break;
            }
        return;
    }
    int lo = last_g + 1; /* no cut before this */
    for (int up = lo; up < p->n_ops && pl->n_cuts < MAX_CUTS; up++) {
        const vae_op *op = &p->ops[up];
        const int first = pl->n_cuts == 0;
        if (!plan_is_upsampling(op) && !(op->kind == VAE_OP_SHUFFLE_UP && op->ft > 1)) continue;
        int cut = -1;
        for (int pos = up; pos >= lo && cut < 0; pos--)
            if (pos == 0 || vae_program_crossing(p, pos, NULL, 0) == 1) cut = pos;
        if (cut >= 0 && (first || cut > pl->cuts[pl->n_cuts - 1])) pl->cuts[pl->n_cuts++] = cut;
        if (cut >= 0) lo = cut + 1;
    }
    if (pl->n_cuts == 0) /* no upsampling: the last single-value position after the global ops */
        for (int pos = p->n_ops - 1; pos > last_g; pos--)
            if (pos == 0 || vae_program_crossing(p, pos, NULL, 0) == 1) {
                pl->cuts[pl->n_cuts++] = pos;
                break;
            }
}

/* Builds parts A, B, C for cut candidate k. */
static int parts_at(planner *pl, int k) {
    if (pl->cut_k == k && pl->pb.present) return VAE_OK;
    part_free(&pl->pa);
    part_free(&pl->pb);
    part_free(&pl->pc);
    pl->cut_k = k;
    const vae_program *p = pl->p;
    const int cut = pl->cuts[k];
    /* the part after the cut takes its input in the steps the untiled stream has there (a
     * decoder's later cut after a temporal upsampling: 1 frame, then 2 per step), so that its
     * convs see the untiled chunk sizes; 1 frame per step where the steps are not steady */
    int first = p->first_chunk, chunk = p->chunk;
    if (cut > 0) {
        first = (int)pl->step_frames[0][cut - 1], chunk = (int)pl->step_frames[1][cut - 1];
        if (first < 1 || chunk < 1 || pl->step_frames[2][cut - 1] != chunk) first = chunk = 1;
    }
    int rc;
    if (pl->rq->encode) {
        rc = part_make(pl, &pl->pb, 0, cut, p->first_chunk, p->chunk, 1);
        if (rc == VAE_OK) rc = part_make(pl, &pl->pc, cut, p->n_ops, first, chunk, 0);
    } else {
        rc = part_make(pl, &pl->pa, 0, cut, p->first_chunk, p->chunk, 0);
        if (rc == VAE_OK) rc = part_make(pl, &pl->pb, cut, p->n_ops, first, chunk, 1);
    }
    if (rc) return rc;
    const part *b = &pl->pb;
    pl->b_reduce = 0;
    for (int i = 0; pl->reduce_ok && i < b->prog.n_ops; i++)
        pl->b_reduce += vae_op_is_reducible(&b->prog.ops[i]);
    const int in = b->vh[0], out = b->vh[b->prog.output];
    pl->own_align = !pl->rq->encode && out > in && in > 0 ? out / in : 1;
    return VAE_OK;
}

/* ---- the engine's limits (plan.h) ---------------------------------------------------------------
 */
static const char *input_name(const vae_plan_request *rq) {
    return rq->encode ? "encode input video" : "decode input latent";
}

static const char *op_label(const vae_program *p, int i, char *buf, size_t n) {
    if (p->ops[i].name[0]) return p->ops[i].name;
    snprintf(buf, n, "op %d", i);
    return buf;
}

/* Every value's bytes over the whole video within VAE_PLAN_MAX_VALUE_BYTES, and the frames of the
 * parts that no tile plan splits within VAE_PLAN_MAX_FRAME_PIXELS: an input beyond them is
 * refused before the search (blended tiles crop every part: plan_try_blend checks their
 * frames). Decoders run whole frames up to their first cut at least, encoders from their cut on;
 * without tiles, everything. */
static int check_limits(const planner *pl) {
    const vae_plan_request *rq = pl->rq;
    const vae_program *p = pl->p;
    char name[32];
    const int tiles = rq->mode != VAE_TILE_NONE && pl->n_cuts > 0;
    const int cut = tiles ? pl->cuts[0] : 0;
    int worst = -1; /* the op whose output frame is the largest that runs whole */
    int64_t most = 0;
    for (int i = -1; i < p->n_ops; i++) { /* (-1: the input) */
        const int v = i < 0 ? p->input : p->ops[i].out;
        const int64_t frames = i < 0 ? rq->t : pl->op_frames[i];
        const double bytes = (double)frames * pl->vh[v] * pl->vw[v] *
                             vae_program_value_channels(p, v) * rq->elem;
        if (bytes > (double)VAE_PLAN_MAX_VALUE_BYTES)
            return vae_fail(VAE_ESHAPE, "%s %dx%dx%d: %s would hold %.0f TiB over the video, "
                                        "more than the %lld TiB the planner counts in; split the "
                                        "video into shorter calls",
                            input_name(rq), rq->t, rq->h, rq->w,
                            i < 0 ? "the input" : op_label(p, i, name, sizeof name),
                            bytes / 1099511627776.0,
                            (long long)(VAE_PLAN_MAX_VALUE_BYTES >> 40));
        /* (a decoder's input runs whole where A is not empty, an encoder's never does) */
        const int whole = rq->mode == VAE_TILE_BLEND ? 0
                          : !tiles                   ? 1
                          : rq->encode               ? i >= cut - 1 && i >= 0
                                                     : i < cut && (i >= 0 || cut > 0);
        const int64_t px = (int64_t)pl->vh[v] * pl->vw[v];
        if (whole && px > most) most = px, worst = i;
    }
    if (most <= VAE_PLAN_MAX_FRAME_PIXELS) return VAE_OK;
    const int v = worst < 0 ? p->input : p->ops[worst].out;
    return vae_fail(VAE_ESHAPE, "%s %dx%dx%d: %s%s whole frames of %dx%d (%lld pixels), more "
                                "than the %lld pixels the backends index in one op call%s",
                    input_name(rq), rq->t, rq->h, rq->w,
                    worst < 0 ? "the model reads its" : op_label(p, worst, name, sizeof name),
                    worst < 0 ? "" : " makes", pl->vh[v], pl->vw[v],
                    (long long)most, (long long)VAE_PLAN_MAX_FRAME_PIXELS,
                    !tiles && pl->n_cuts ? "; allow tiles (tile_mode=auto)"
                                         : " (no exact tiles split that part; tile_mode=blend "
                                           "crops every part)");
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
    for (int k = 0; k < 3; k++)
        vae_free(pl->step_frames[k]);
    vae_free(pl->need);
    vae_free(pl->crop);
    vae_free(pl->valid);
    vae_free(pl->op_crop);
    vae_free(pl->op_valid);
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
    pl->op_crop = vae_calloc((size_t)p->n_ops + 1, sizeof *pl->op_crop);
    pl->op_valid = vae_calloc((size_t)p->n_ops + 1, sizeof *pl->op_valid);
    /* GroupNorms inside B: a group whose backends split them, exact tiles of the planner's size */
    pl->reduce_ok = rq->reduce && rq->ranks > 1 && rq->mode != VAE_TILE_BLEND && rq->tile_h <= 0 &&
                    rq->tile_w <= 0;
    if (!pl->vh || !pl->vw || !pl->op_frames || !pl->need || !pl->crop || !pl->valid ||
        !pl->op_crop || !pl->op_valid)
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
    /* the frames each op makes in the first three steps (cumulative walks, then differences) */
    for (int k = 0; k < 3 && rc == VAE_OK; k++) {
        int64_t *f = pl->step_frames[k] = vae_calloc((size_t)p->n_ops + 1, sizeof *f);
        plan_walk_sum one = {p, pl->vh, pl->vw, 0, f};
        int dummy;
        rc = f ? plan_walk_stream(p, NULL, p->first_chunk + k * p->chunk, p->first_chunk, p->chunk,
                                  &one, &dummy)
               : vae_fail(VAE_ENOMEM, "out of memory planning");
    }
    for (int k = 2; k > 0 && rc == VAE_OK; k--)
        for (int i = 0; i < p->n_ops; i++)
            pl->step_frames[k][i] -= pl->step_frames[k - 1][i];
    if (rc) return rc;
    find_cuts(pl);
    if ((rc = check_limits(pl))) return rc;
    if ((rc = part_make(pl, &pl->whole, 0, p->n_ops, p->first_chunk, p->chunk, 0))) return rc;
    pl->cut_k = -1;
    if (pl->n_cuts == 0) return VAE_OK;
    rc = parts_at(pl, 0);
    pl->tiled_ok = rc == VAE_OK;
    return rc;
}

static void plan_set_part(vae_plan_part *dst, const part *src, int fr) {
    memset(dst, 0, sizeof *dst);
    if (!src->present) return;
    dst->from = src->from, dst->to = src->to, dst->n_loops = src->n_loops[fr];
    dst->first = src->first, dst->chunk = src->chunk;
    memcpy(dst->loops, src->loop_at[fr], sizeof dst->loops);
    memcpy(dst->whole, src->whole[fr], sizeof dst->whole);
    dst->loop_width = src->loops[fr].width;
}

/* Fills the plan's parts and stores for the chosen candidate. */
static int plan_fill(planner *pl, const cand *c, vae_plan *plan) {
    plan->kind = c->kind;
    plan->peak = c->peak;
    plan->peak_alloc = c->peak_alloc;
    plan->scratch = c->scratch;
    plan->caches = c->caches;
    plan->macs = c->macs;
    plan->cost = c->cost;
    plan->tile_h = c->tile_h, plan->tile_w = c->tile_w;
    if (c->kind == VAE_PLAN_WHOLE) { /* (the tiles' costs count their op calls already) */
        if (c->width) pl->whole.loops[c->fr].width = c->width;
        for (int i = 0; i < pl->p->n_ops; i++)
            plan->cost += OP_CALL_MACS * plan_op_calls(pl, i);
        plan_set_part(&plan->part[1], &pl->whole, c->fr);
        int rc = plan_fill_offload(pl, c, plan);
        if (rc) return rc;
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
        return plan_try_blend(pl, c->blend_tile, c->blend_tile_w, c->blend_overlap, &again, plan);
    }
    int rc = parts_at(pl, c->cut);
    if (rc) return rc;
    plan_set_part(&plan->part[0], &pl->pa, c->fr);
    plan_set_part(&plan->part[1], &pl->pb, c->fr);
    plan_set_part(&plan->part[2], &pl->pc, c->fr);
    for (int k = 0; k < 2; k++) {
        const part *q = k == 0 ? &pl->pa : &pl->pc;
        if (!q->present) continue;
        const int v = k == 0 ? q->prog.output : 0;
        plan->store_t[k] = k == 0 ? plan_part_in_frames(pl, &pl->pb) : plan_part_in_frames(pl, q);
        plan->store_h[k] = q->vh[v], plan->store_w[k] = q->vw[v];
        plan->store_c[k] = k == 0 ? q->prog.out_channels : q->prog.in_channels;
        plan->store_host[k] = c->store_host[k];
        plan->store_file[k] = c->store_file[k];
    }
    plan->a_shared = c->a_shared;
    plan->reduce = c->bands;
    cand again;
    if (c->strips) return plan_try_strips(pl, c->strips, &again, plan);
    return plan_try_tiled(pl, c->tile_h, c->tile_w, &again, plan);
}

static const char *kind_name(vae_plan_kind k) {
    return k == VAE_PLAN_WHOLE   ? "whole frames"
           : k == VAE_PLAN_TILED ? "exact tiles, tile-major"
                                 : "blended tiles";
}

/* the cut candidate settings.plan_cut asks for (the last one when there are fewer) */
static int forced_cut(const planner *pl) {
    return pl->rq->cut < pl->n_cuts ? pl->rq->cut : pl->n_cuts - 1;
}

/* -v: each candidate the search weighs */
static void cand_debug(const planner *pl, const cand *c) {
    VAE_DEBUG("planner: cut %d (ops %d..), frame loops %d: %dx%d %s: peak %.2f GiB%s, cost %.4g "
              "(work %.4g MACs)%s%s%s",
              c->cut, pl->pb.from, c->fr, c->ty, c->tx, c->strips ? "strips" : "tiles",
              (double)c->peak / (1 << 30),
              pl->rq->budget > 0 && c->peak > pl->rq->budget ? " (over the budget)" : "", c->cost,
              c->macs, c->slots_host ? ", slots on the host" : "",
              c->store_host[0] ? ", store A on the host" : "",
              c->a_shared ? ", A once"
              : c->bands  ? ", row bands"
                          : "");
}

int plan_runnable(const cand *c) {
    return c->frame <= VAE_PLAN_MAX_FRAME_PIXELS;
}

/* Column strips of B (strip.h) at the current cut, from 2 to 16: into *best where they fit and
 * cost less, *floor_c where their peak is smaller. */
static int search_strips(planner *pl, cand *best, cand *floor_c) {
    static const int counts[] = {2, 3, 4, 5, 6, 8, 10, 12, 16};
    if (pl->rq->strips < 0) return VAE_OK;
    for (size_t j = 0; j < sizeof counts / sizeof counts[0]; j++) {
        cand c;
        memset(&c, 0, sizeof c);
        int rc = plan_try_strips(pl, counts[j], &c, NULL);
        if (rc == VAE_EUNSUPPORTED) return VAE_OK; /* more strips are narrower still */
        if (rc) return rc;
        cand_debug(pl, &c);
        if (!plan_runnable(&c)) continue;
        if (floor_c->peak < 0 || c.peak < floor_c->peak) *floor_c = c;
        if (pl->rq->budget > 0 && c.peak > pl->rq->budget) continue;
        if (best->peak < 0 || c.cost < best->cost) *best = c;
    }
    return VAE_OK;
}

/* Searches tile grids (from few to many tiles) at every cut: *best the cheapest that fits
 * (cost: work including halos, and host traffic), *floor_c the smallest peak. */
static int search_tiles(planner *pl, cand *best, cand *floor_c) {
    memset(floor_c, 0, sizeof *floor_c);
    floor_c->peak = -1;
    best->peak = -1;
    const int64_t budget = pl->rq->budget;
    /* every start point, or the one settings.plan_cut asks for */
    const int k0 = pl->rq->cut >= 0 ? forced_cut(pl) : 0;
    const int k1 = pl->rq->cut >= 0 ? k0 + 1 : pl->n_cuts;
    for (int k = k0; k < k1; k++) {
        int rc = parts_at(pl, k);
        if (rc) return rc;
        const part *b = &pl->pb;
        const int hb = b->vh[b->prog.output], wb = b->vw[b->prog.output];
        int tried = 0, fit_n = 0;
        for (int n = 2; n <= 48 * 48 && tried < 64 && (!fit_n || n <= 2 * fit_n); n++)
            for (int ny = 1; ny <= n && tried < 64; ny++) {
                if (n % ny || (pl->rq->ranks > 1 && n % pl->rq->ranks)) continue;
                if (pl->b_reduce && (ny != pl->rq->ranks || n != ny)) continue; /* bands */
                const int nx = n / ny;
                const int th = (hb + ny - 1) / ny, tw = (wb + nx - 1) / nx;
                /* one row or column of a group's tiles: A may run once (plan_tiles.c shared_a_ok)
                 */
                const int line = pl->rq->ranks > 1 && n == pl->rq->ranks && (nx == 1 || ny == 1);
                if (ny > MAX_SPANS / 2 || nx > MAX_SPANS / 2 || th < 2 * pl->own_align ||
                    tw < 2 * pl->own_align ||
                    (!pl->b_reduce && !line &&
                     ((th > 2 * tw && ny < hb) || (tw > 2 * th && nx < wb))))
                    continue; /* (tiles about square, bands as wide as the frame) */
                if ((int64_t)th * tw > VAE_PLAN_MAX_FRAME_PIXELS)
                    continue; /* (too large to run, whatever their halos: not worth a try) */
                cand c;
                memset(&c, 0, sizeof c);
                tried++;
                if ((rc = plan_try_tiled(pl, th, tw, &c, NULL))) return rc;
                /* a group of processes runs a band on every rank (runner_rank.c): as many as
                 * there are ranks (a device group leaves a device without one out) */
                if (pl->rq->processes && pl->b_reduce && c.tiles != pl->rq->ranks) continue;
                cand_debug(pl, &c);
                if (!plan_runnable(&c)) continue;
                if (floor_c->peak < 0 || c.peak < floor_c->peak) *floor_c = c;
                if (budget > 0 && c.peak > budget) continue;
                if (!fit_n) fit_n = n;
                if (best->peak < 0 || c.cost < best->cost) *best = c;
            }
        if ((rc = search_strips(pl, best, floor_c))) return rc;
    }
    return best->peak < 0 ? PLAN_NOFIT : VAE_OK;
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
    if (plan->kind == VAE_PLAN_TILED && n < cap)
        n += (size_t)snprintf(w + n, cap - n, " in steps of %d then %d frames", plan->part[1].first,
                              plan->part[1].chunk);
    if (plan->strips && n < cap)
        n += (size_t)snprintf(
            w + n, cap - n, ", as column strips that hand their edge columns on (no halos; %d "
                            "carries, %d slots of %s on the %s)",
            plan->strips->n_carry, plan->strips->n_slot,
            size_str(vae_strips_slot_bytes(plan->strips, &pl->pb.prog, rq->elem, NULL)),
            plan->strips->slots_host ? "host" : "device");
    if (plan->kind != VAE_PLAN_WHOLE && rq->ranks > 1 && n < cap)
        n += (size_t)snprintf(
            w + n, cap - n, ", shared by %d devices (tile i to device i %% %d%s%s)", rq->ranks,
            rq->ranks, plan->reduce ? "; row bands: the GroupNorms' sums all-reduced" : "",
            plan->a_shared ? "; A once, on device 0, its tile narrower by A's "
                             "work: the others start on A's first frames"
                           : "");
    for (int k = 0; k < 2 && n < cap; k++) {
        const int64_t bytes = (int64_t)plan->store_t[k] * plan->store_h[k] * plan->store_w[k] *
                              plan->store_c[k] * (int64_t)rq->elem;
        if (plan->store_t[k])
            n += (size_t)snprintf(w + n, cap - n, ", store %c of %d frames %dx%dx%d %s (%s)",
                                  'A' + k, plan->store_t[k], plan->store_h[k], plan->store_w[k],
                                  plan->store_c[k],
                                  !plan->store_host[k]  ? "on the device"
                                  : plan->store_file[k] ? "in a temporary file"
                                                        : "on the host",
                                  size_str(bytes));
    }
    int frame_loops = 0, width = 1;
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < plan->part[k].n_loops; i++)
            if (!plan->part[k].whole[i]) {
                frame_loops++;
                if (plan->part[k].loop_width > width) width = plan->part[k].loop_width;
            }
    if (plan->kind == VAE_PLAN_WHOLE && n < cap)
        n += (size_t)snprintf(w + n, cap - n, " in steps of %d then %d frames",
                              rq->prog->first_chunk, rq->prog->chunk);
    if (n < cap && frame_loops && width > 1)
        n += (size_t)snprintf(w + n, cap - n, "; %d frames at a time after temporal upsampling",
                              width);
    else if (n < cap)
        n += (size_t)snprintf(w + n, cap - n, "; %s",
                              frame_loops ? "frame by frame after "
                                            "temporal upsampling"
                                          : "chunks whole");
    if (plan->n_offload > 0 && n < cap)
        n += (size_t)snprintf(w + n, cap - n,
                              "; the causal caches of %d ops (%s) in host memory, copied in and "
                              "out around each call (%s over the host link in all)%s%s",
                              plan->n_offload, size_str(plan->host_caches),
                              size_str((int64_t)plan->host_traffic),
                              plan->host_ring > 0 ? " through a device ring of " : "",
                              plan->host_ring > 0 ? size_str(plan->host_ring) : "");
    if (plan->scratch_minimal && n < cap)
        n += (size_t)snprintf(w + n, cap - n,
                              "; every op within its least scratch (convs in "
                              "place, not gathered)");
    if (n < cap)
        snprintf(w + n, cap - n,
                 "; predicted peak %s (weights and workspace %s, scratch %s, causal caches %s) for "
                 "a budget of %s (the exact floor: %s); work %+.1f%%",
                 size_str(plan->peak), size_str(rq->fixed), size_str(plan->scratch),
                 size_str(plan->caches), rq->budget > 0 ? size_str(rq->budget) : "none",
                 plan->floor >= 0 ? size_str(plan->floor) : "not computed in this mode",
                 100.0 * (plan->macs / (plan->macs_whole > 0 ? plan->macs_whole : 1) - 1));
}

/* Forced tiles (th x tw of B's output, r video pixels each) of at most MAX_SPANS per side:
 * a finer grid would leave part of the frame out. */
static int forced_tiles_ok(const planner *pl, int r, int th, int tw) {
    const part *b = &pl->pb;
    const int hb = b->vh[b->prog.output], wb = b->vw[b->prog.output], a = pl->own_align;
    const int64_t sy = ((int64_t)(th < a ? a : th) + a - 1) / a * a;
    const int64_t sx = ((int64_t)(tw < a ? a : tw) + a - 1) / a * a;
    if ((hb + sy - 1) / sy <= MAX_SPANS && (wb + sx - 1) / sx <= MAX_SPANS) return VAE_OK;
    /* the smallest tiles that do (the last one of a side may be shorter) */
    const int64_t mh = ((hb + MAX_SPANS - 1) / MAX_SPANS + a - 1) / a * a * r;
    const int64_t mw = ((wb + MAX_SPANS - 1) / MAX_SPANS + a - 1) / a * a * r;
    return vae_fail(VAE_EINVAL, "exact tiles of %dx%d px (tile_height/tile_width) split this frame into more than "
                                "%d tiles per side, the most the planner takes; use tiles of at "
                                "least %lldx%lld px",
                    pl->rq->tile_h, pl->rq->tile_w, MAX_SPANS, (long long)mh, (long long)mw);
}

/* Strips forced (settings.plan_strips), from the first cut where they are wide enough (or the
 * one asked for): VAE_OK with *best, PLAN_NOFIT where B cannot run in them. */
static int choose_strips(planner *pl, cand *best, cand *floor_c, int fr0, int n_fr) {
    const vae_plan_request *rq = pl->rq;
    const int k0 = rq->cut >= 0 ? forced_cut(pl) : 0;
    const int k1 = rq->cut >= 0 ? k0 + 1 : pl->n_cuts;
    for (int k = k0; k < k1; k++) {
        int rc = parts_at(pl, k);
        if (rc) return rc;
        for (int fr = fr0; fr < n_fr && rc == VAE_OK; fr++) {
            pl->fr = fr;
            rc = plan_try_strips(pl, rq->strips, best, NULL);
            if (rc == VAE_OK && !plan_runnable(best)) break; /* (planned as usual) */
            if (rc == VAE_OK && (rq->budget <= 0 || best->peak <= rq->budget || fr + 1 == n_fr)) {
                *floor_c = *best;
                return VAE_OK;
            }
        }
        if (rc != VAE_OK && rc != VAE_EUNSUPPORTED) return rc;
    }
    return PLAN_NOFIT;
}

/* Blended tiles of tile_h x tile_w video pixels overlapping by `overlap` in the first
 * frame-loop choice that fits: VAE_OK, PLAN_NOFIT (*c the last tried), or an error. */
static int blend_at(planner *pl, int tile_h, int tile_w, int overlap, cand *c) {
    const vae_plan_request *rq = pl->rq;
    const int n_fr = rq->frame_loops ? 2 : 1, fr0 = rq->frame_loops == 2; /* 2: always */
    const int least = tile_h < tile_w ? tile_h : tile_w;
    if (overlap * 2 > least) overlap = least / 2;
    for (int fr = fr0; fr < n_fr; fr++) {
        pl->fr = fr;
        int rc = plan_try_blend(pl, tile_h, tile_w, overlap, c, NULL);
        if (rc) return rc;
        c->kind = VAE_PLAN_BLEND, c->fr = fr;
        if (plan_runnable(c) && (rq->budget <= 0 || c->peak <= rq->budget)) return VAE_OK;
    }
    return PLAN_NOFIT;
}

/* the side of k blended tiles across n units overlapping by ov units, starts at multiples of
 * align (plan_split_blend's rule): the least that k tiles cover n with, so that no tile overlaps
 * its neighbour by much more than ov (unlike tiles of one size, whose last one overlaps by
 * whatever the size leaves over) */
static int blend_even_side(int n, int k, int ov, int align) {
    if (k <= 1) return n;
    int s = ((n + (k - 1) * ov + k - 1) / k + align - 1) / align * align;
    while (s < n && s + (k - 1) * ((s - ov) / align * align) < n)
        s += align;
    return s;
}

/* the overlap of blended tiles of `size` px: the request's, or an eighth of the tile */
static int blend_overlap(const vae_plan_request *rq, int size) {
    return rq->blend_overlap_auto ? size / 8 : rq->blend_overlap;
}

/* No tile size given: a grid of ny x nx even tiles, the cheapest that fits the budget (the
 * planner's cost: the overlap work and the op calls of the frame-loop choice that fits). Rows
 * of tiles from 1 up, each with the column counts nearest square tiles, until a row count past
 * the first that fits (more tiles only add overlap). The overlap is the request's, or an eighth
 * of the even share of the frame. */
static int choose_blend_grid(planner *pl, cand *best) {
    const vae_plan_request *rq = pl->rq;
    const int f = rq->video_factor > 0 ? rq->video_factor : 1;
    const int unit = rq->encode ? 1 : f, align = rq->encode ? f : 1; /* (plan_try_blend's) */
    const int n_h = rq->h, n_w = rq->w; /* B's input, in units of `unit` video pixels */
    int found_ny = 0, tried = 0, err = VAE_OK;
    for (int ny = 1; ny <= MAX_SPANS && (!found_ny || ny <= found_ny + 1); ny++) {
        if (ny > 1 && n_h * unit / ny < BLEND_LEAST_PX) break;
        const int64_t square = (int64_t)ny * n_w / n_h; /* columns of square tiles */
        const int lo = ny == 1 || square <= 2 ? 1
                       : square < MAX_SPANS   ? (int)square - 1
                                              : MAX_SPANS;
        const int hi = square + 2 < MAX_SPANS ? (int)square + 2 : MAX_SPANS;
        for (int nx = lo; nx <= hi; nx++) {
            if (nx > 1 && n_w * unit / nx < BLEND_LEAST_PX) break;
            const int share_h = (n_h + ny - 1) / ny, share_w = (n_w + nx - 1) / nx;
            const int ov_px = blend_overlap(rq, (share_h > share_w ? share_h : share_w) * unit);
            const int ov = (ov_px + unit - 1) / unit;
            const int th = blend_even_side(n_h, ny, ov, align) * unit;
            const int tw = blend_even_side(n_w, nx, ov, align) * unit;
            cand c;
            const int rc = blend_at(pl, th, tw, ov_px, &c);
            if (rc == VAE_ENOMEM) return rc; /* (the host's memory, not the budget) */
            if (rc != VAE_OK && rc != PLAN_NOFIT) { /* (a grid the planner does not take) */
                err = rc;
                continue;
            }
            if (rc == VAE_OK && (!found_ny || c.cost < best->cost)) *best = c;
            if (rc == VAE_OK && !found_ny) found_ny = ny;
            if (rc == PLAN_NOFIT && !found_ny && (!tried || c.peak < best->peak)) *best = c;
            tried = 1;
        }
    }
    if (!tried) return err ? err : vae_fail(VAE_EINVAL, "blended tiles: no grid splits this frame");
    vae_error_clear(); /* (what the grids the planner does not take said) */
    return found_ny ? VAE_OK : PLAN_NOFIT;
}

/* Blended tiles of the given size where they fit, else each try an eighth smaller (said in a
 * warning); with no size given, the cheapest grid of even tiles (choose_blend_grid). */
static int choose_blend(planner *pl, cand *best) {
    const vae_plan_request *rq = pl->rq;
    if (rq->blend_auto) return choose_blend_grid(pl, best);
    int size = rq->blend_tile;
    int rc = blend_at(pl, size, size, blend_overlap(rq, size), best);
    if (rc != VAE_OK && rc != PLAN_NOFIT) return rc; /* the caller's tiles cannot split it */
    if (rc == PLAN_NOFIT && !plan_runnable(best))
        return vae_fail(VAE_EINVAL, "blended tiles of %d px (blend_tile): op calls would see "
                                    "frames of %lld pixels, more than the %lld the backends "
                                    "index; use smaller tiles",
                        size, (long long)best->frame, (long long)VAE_PLAN_MAX_FRAME_PIXELS);
    while (rc == PLAN_NOFIT) { /* *best: the smallest tried */
        const int next = size * 7 / 8 / 16 * 16;
        if (next < 64) return PLAN_NOFIT;
        cand c;
        rc = blend_at(pl, next, next, blend_overlap(rq, next), &c);
        if (rc != VAE_OK && rc != PLAN_NOFIT) { /* more tiles a side than the planner takes */
            vae_error_clear();
            return PLAN_NOFIT;
        }
        size = next;
        *best = c;
    }
    if (size != rq->blend_tile)
        VAE_WARN("blended tiles of %d px do not fit the budget of %.2f GiB: planned with tiles of "
                 "%d px",
                 rq->blend_tile, (double)rq->budget / (1 << 30), size);
    return VAE_OK;
}

/* The candidate to run: the first that fits, in the order of speed (below); *floor_c: the
 * smallest exact peak met on the way. PLAN_NOFIT when none fits (best: the smallest); VAE_ENOMEM
 * only when the host ran out of memory. */
static int choose(planner *pl, cand *best, cand *floor_c) {
    const vae_plan_request *rq = pl->rq;
    const int64_t budget = rq->budget;
    const int n_fr = rq->frame_loops ? 2 : 1, fr0 = rq->frame_loops == 2; /* 2: always */
    floor_c->peak = -1;
    int rc = VAE_OK;
    if (rq->mode == VAE_TILE_BLEND) return choose_blend(pl, best);
    /* strips forced (settings.plan_strips): where B can run in them, else planned as usual */
    if (rq->strips >= 2 && pl->tiled_ok && rq->mode != VAE_TILE_NONE && rq->tile_h <= 0 &&
        rq->tile_w <= 0 && (rc = choose_strips(pl, best, floor_c, fr0, n_fr)) != PLAN_NOFIT)
        return rc;
    const int forced = rq->tile_h > 0 || rq->tile_w > 0;
    /* caches in host memory forced (settings.plan_offload > 0): whole frames, whatever fits */
    if (rq->offload > 0 && !forced && rq->host_direct &&
        (rc = plan_choose_offload(pl, rq->offload, best, floor_c)) != PLAN_NOFIT)
        return rc;
    if (forced && !pl->tiled_ok)
        return vae_fail(VAE_EUNSUPPORTED, "exact tiles: this model has no part that tiles (every "
                                          "stage has an op global per frame); use the blend mode");
    if (forced) {
        if ((rc = parts_at(pl, pl->rq->cut >= 0 ? forced_cut(pl) : 0)))
            return rc; /* forced tiles: B from the first cut, unless told otherwise */
        const part *b = &pl->pb;
        /* video-side pixels per pixel of B's output */
        int r = rq->encode ? b->vh[0] / (b->vh[b->prog.output] ? b->vh[b->prog.output] : 1) : 1;
        if (r < 1) r = 1;
        const int th = rq->tile_h > 0 ? (rq->tile_h + r - 1) / r : b->vh[b->prog.output];
        const int tw = rq->tile_w > 0 ? (rq->tile_w + r - 1) / r : b->vw[b->prog.output];
        if ((rc = forced_tiles_ok(pl, r, th, tw))) return rc;
        for (int fr = fr0; fr < n_fr; fr++) {
            pl->fr = fr;
            if ((rc = plan_try_tiled(pl, th, tw, best, NULL))) return rc;
            if (!plan_runnable(best))
                return vae_fail(VAE_EINVAL, "exact tiles of %dx%d px (tile_height/tile_width): op calls would see "
                                            "frames of %lld pixels, more than the %lld the "
                                            "backends index; use smaller tiles",
                                rq->tile_h, rq->tile_w, (long long)best->frame,
                                (long long)VAE_PLAN_MAX_FRAME_PIXELS);
            best->fr = fr;
            if (budget <= 0 || best->peak <= budget) break;
        }
        *floor_c = *best;
        return VAE_OK; /* forced: runs even over the budget (the backend still enforces it) */
    }
    /* in the order of speed on a GPU: whole frames in chunks, tiles in chunks, then frame by frame
     * (which needs the least memory but runs 1-frame kernels) */
    for (int fr = fr0; fr < n_fr; fr++) {
        pl->fr = fr;
        cand c;
        memset(&c, 0, sizeof c);
        c.kind = VAE_PLAN_WHOLE, c.fr = fr, c.macs = c.cost = pl->macs_whole;
        c.scratch = rq->scratch_now;
        c.peak_alloc = plan_whole_mem(pl, NULL, NULL, &c.scratch, &c.caches);
        if (c.peak_alloc < 0) return vae_fail(VAE_ENOMEM, "out of memory planning");
        c.peak = rq->fixed + c.scratch + c.peak_alloc;
        c.frame = plan_max_frame(pl->vh, pl->vw, pl->p->n_values);
        if (plan_runnable(&c) && (floor_c->peak < 0 || c.peak < floor_c->peak)) *floor_c = c;
        const int tiles_ok = rq->mode != VAE_TILE_NONE && pl->tiled_ok;
        cand tf;
        if (plan_runnable(&c) && (budget <= 0 || c.peak <= budget)) {
            /* a device group shares tiles out where that is faster than one device whole */
            if (rq->ranks > 1 && tiles_ok && fr == fr0) {
                if ((rc = search_tiles(pl, best, &tf)) != PLAN_NOFIT && rc != VAE_OK) return rc;
                if (rc == VAE_OK && (best->cost < 0.9 * c.cost || (best->bands && rq->reduce > 1)))
                    return VAE_OK;
            }
            *best = c;
            return VAE_OK;
        }
        if (!tiles_ok) continue;
        rc = search_tiles(pl, best, &tf);
        if (tf.peak > 0 && (floor_c->peak < 0 || tf.peak < floor_c->peak)) *floor_c = tf;
        if (rc != PLAN_NOFIT) return rc;
    }
    /* whole frames with causal caches in host memory (a slower link, but exact and no halos) */
    if (rq->offload == 0 && rq->host_direct &&
        (rc = plan_choose_offload(pl, 0, best, floor_c)) != PLAN_NOFIT)
        return rc;
    if (floor_c->peak < 0) /* (whole frames too large, and no tiles small enough) */
        return vae_fail(VAE_ESHAPE, "%s %dx%dx%d: no plan keeps the frames of every op call "
                                    "within %lld pixels, the most the backends index (whole "
                                    "frames are larger, and so are the tiles of a grid of up to "
                                    "%d x %d)%s",
                        input_name(rq), rq->t, rq->h, rq->w,
                        (long long)VAE_PLAN_MAX_FRAME_PIXELS, MAX_SPANS / 2, MAX_SPANS / 2,
                        rq->mode == VAE_TILE_NONE ? ": allow tiles (tile_mode=auto)"
                                                  : ": a smaller input, or tile_mode=blend");
    *best = *floor_c;
    return PLAN_NOFIT;
}

/* One planning pass: VAE_OK or PLAN_NOFIT with the plan filled and described, else an error
 * (the plan freed). */
static int plan_once(vae_plan *plan, const vae_plan_request *rq) {
    memset(plan, 0, sizeof *plan);
    plan->encode = rq->encode;
    plan->budget = rq->budget;
    plan->t_in = rq->t, plan->h_in = rq->h, plan->w_in = rq->w;
    plan->c_in = rq->prog->in_channels;
    plan->scratch_minimal = rq->scratch_minimal;
    planner pl;
    cand best, floor_c;
    memset(&best, 0, sizeof best);
    memset(&floor_c, 0, sizeof floor_c);
    int rc = planner_init(&pl, rq, plan);
    pl.macs_whole = plan->macs_whole;
    if (rc == VAE_OK) rc = choose(&pl, &best, &floor_c);
    plan->floor = floor_c.peak;
    plan->floor_caches = floor_c.caches;
    plan->floor_host_caches = floor_c.host_caches;
    if (rc == VAE_OK || rc == PLAN_NOFIT) {
        pl.fr = best.fr;
        int rc2 = plan_fill(&pl, &best, plan);
        if (rc2)
            rc = rc2;
        else
            describe(&pl, plan);
    }
    planner_free(&pl);
    if (rc && rc != PLAN_NOFIT) vae_plan_free(plan);
    return rc;
}

/* Whether a plan with every op's least scratch is weighed against the first pass's, and how:
 * where nothing fit, whichever fits or needs less (WEIGH_FIT); where the first fits by moving
 * causal caches over the host link, whose traffic the scratch saved may spare (caches kept on the
 * device, more frames a loop), the cheaper (WEIGH_LINK); without a budget of the caller's, a
 * whole-frame plan's twin where it needs less memory at no more cost (WEIGH_MEMORY). The
 * planner's cost does not price the least-scratch paths' own speed (measured 0-3% slower on the
 * H100: docs/memory-and-tiles.md), so tiled and blended plans are not weighed for memory: their
 * grids would change (blend: the output too) for a cost the model does not see. */
enum { WEIGH_NONE, WEIGH_FIT, WEIGH_LINK, WEIGH_MEMORY };

static int least_scratch_weighed(const vae_plan *plan, int rc, const vae_plan_request *rq) {
    if (!rq->scratch_need || rq->scratch_minimal) return WEIGH_NONE;
    if (rc == PLAN_NOFIT) return WEIGH_FIT;
    if (rc != VAE_OK) return WEIGH_NONE;
    if (plan->n_offload > 0) return WEIGH_LINK;
    return rq->least_memory && plan->kind == VAE_PLAN_WHOLE ? WEIGH_MEMORY : WEIGH_NONE;
}

static int least_scratch_better(int weigh, const vae_plan *first, int rc2, const vae_plan *p2) {
    if (weigh == WEIGH_FIT) return rc2 == VAE_OK || p2->peak < first->peak;
    if (rc2 != VAE_OK) return 0;
    if (weigh == WEIGH_LINK) return p2->cost < first->cost;
    return p2->kind == VAE_PLAN_WHOLE && p2->n_offload == 0 && p2->cost <= first->cost &&
           p2->peak < first->peak;
}

int vae_plan_make(vae_plan *plan, const vae_plan_request *rq) {
    int rc = plan_once(plan, rq);
    const int weigh = least_scratch_weighed(plan, rc, rq);
    if (weigh != WEIGH_NONE) {
        vae_plan_request least = *rq;
        least.scratch_minimal = 1;
        vae_plan p2;
        const int rc2 = plan_once(&p2, &least);
        if (rc2 != VAE_OK && rc2 != PLAN_NOFIT && weigh != WEIGH_FIT) {
            vae_error_clear(); /* (the first pass's plan fits) */
            return rc;
        }
        if (rc2 != VAE_OK && rc2 != PLAN_NOFIT) {
            vae_plan_free(plan);
            return rc2;
        }
        const int second = p2.floor < plan->floor; /* the floor of the second pass */
        const int64_t floor = second ? p2.floor : plan->floor;
        const int64_t floor_caches = second ? p2.floor_caches : plan->floor_caches;
        const int64_t floor_host = second ? p2.floor_host_caches : plan->floor_host_caches;
        const int better = least_scratch_better(weigh, plan, rc2, &p2);
        if (better) {
            vae_plan_free(plan);
            *plan = p2;
            rc = rc2;
        } else {
            vae_plan_free(&p2);
        }
        plan->floor = floor;
        plan->floor_caches = floor_caches;
        plan->floor_host_caches = floor_host;
    }
    if (rc != PLAN_NOFIT) return rc;
    /* a plan to describe, unlike a host allocation failure */
    char floor[256] = "";
    if (plan->floor >= 0)
        snprintf(floor, sizeof floor,
                 " (the exact floor: %s, of which weights and backend reserve %s, causal caches "
                 "%s%s%s%s)",
                 size_str(plan->floor), size_str(rq->fixed), size_str(plan->floor_caches),
                 plan->floor_host_caches > 0 ? " on the device and " : "",
                 plan->floor_host_caches > 0 ? size_str(plan->floor_host_caches) : "",
                 plan->floor_host_caches > 0 ? " in host memory" : "");
    rc = vae_fail(VAE_ENOMEM, "memory budget %s is below what %s needs: %s%s. Raise max_memory%s",
                  size_str(rq->budget), rq->mode == VAE_TILE_NONE ? "whole frames" : "this input",
                  size_str(plan->peak), floor,
                  rq->mode == VAE_TILE_BLEND  ? " or use a smaller blend_tile"
                  : rq->mode == VAE_TILE_NONE ? " or allow tiles (tile_mode=auto)"
                                              : ", or use tile_mode=blend (not exact)");
    return rc;
}

int vae_plan_copy(vae_plan *dst, const vae_plan *src, int n_ops) {
    memset(dst, 0, sizeof *dst);
    if (src->strips || src->norms)
        return vae_fail(VAE_EUNSUPPORTED, "a plan with strips or band norms is not copied");
    *dst = *src;
    dst->tiles = NULL, dst->offload = NULL;
    if (src->tiles && src->n_tiles > 0 &&
        !(dst->tiles = vae_malloc((size_t)src->n_tiles * sizeof *dst->tiles))) {
        memset(dst, 0, sizeof *dst);
        return vae_fail(VAE_ENOMEM, "out of memory copying a plan");
    }
    if (dst->tiles) memcpy(dst->tiles, src->tiles, (size_t)src->n_tiles * sizeof *dst->tiles);
    if (src->offload) { /* (plan_fill_offload: one entry per op, and one more) */
        if (!(dst->offload = vae_malloc(((size_t)n_ops + 1) * sizeof *dst->offload))) {
            vae_plan_free(dst);
            memset(dst, 0, sizeof *dst);
            return vae_fail(VAE_ENOMEM, "out of memory copying a plan");
        }
        memcpy(dst->offload, src->offload, ((size_t)n_ops + 1) * sizeof *dst->offload);
    }
    return VAE_OK;
}

void vae_plan_free(vae_plan *plan) {
    if (plan->strips) vae_strips_free(plan->strips);
    vae_free(plan->strips);
    plan->strips = NULL;
    vae_free(plan->tiles);
    plan->tiles = NULL;
    vae_free(plan->norms);
    plan->norms = NULL;
    vae_free(plan->offload);
    plan->offload = NULL;
    plan->n_tiles = 0;
}
