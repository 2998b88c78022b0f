/* plan_offload.c -- whole frames with causal caches in host memory (exec_window.c): which caches
 * leave the device, what their traffic costs, and the homes the executor gives them.
 *
 * Where whole frames do not fit the budget and no exact tiles do (SeedVR2: GroupNorm in every
 * stage), the caches are what no order of the work makes smaller. A contiguous window's cache can
 * live in host memory instead: copied in front of its op's input before the op runs and its new
 * frames back after, each step (each frame inside a frame loop), so every cache that leaves
 * costs up to twice its bytes per call over the host link (op_traffic). The caches leave largest
 * first (the most memory for the fewest op calls' copies) until the peak fits; the backend stages
 * the copies in a device ring large enough to prefetch the largest of them while the op before
 * it runs (vae_plan.host_ring).
 */
#include <string.h>

#include "core.h"
#include "plan_internal.h"

int64_t plan_whole_mem(const planner *pl, const unsigned char *offload, int64_t *op_caches,
                       int64_t *scratch, int64_t *caches) {
    vae_plan_request rq = *pl->rq;
    rq.offload_ops = offload;
    rq.op_caches = op_caches;
    planner with = *pl; /* the same planner, whose memory model sees these homes */
    with.rq = &rq;
    const part *q = &pl->whole;
    int64_t dev_in =
        plan_rounded(pl, plan_frames_bytes(pl, q, 0, plan_part_max_step(q), rq.h, rq.w));
    int64_t m =
        plan_part_mem(&with, q, q->vh, q->vw, rq.t, NULL, 0, NULL, scratch, caches, NULL);
    return m < 0 ? -1 : dev_in + m;
}

/* the device ring a backend with a bus (rq->host_copy) stages the copies in: room to prefetch the
 * largest cache in host memory while the previous op's copy out drains */
static int64_t ring_bytes(const planner *pl, int64_t largest) {
    return pl->rq->host_copy > 0 ? plan_rounded(pl, 2 * largest + pl->rq->host_copy) : 0;
}

/* whether op i runs a frame at a time (inside a frame loop of the current choice pl->fr) */
static int op_looped(const planner *pl, int i) {
    const part *q = &pl->whole;
    for (int k = 0; k < q->n_loops[pl->fr]; k++)
        if (!q->whole[pl->fr][k] && i >= q->loop_at[pl->fr][k]) return 1;
    return 0;
}

/* whether the current choice pl->fr has a frame loop at all (where a loop's width matters) */
static int any_looped(const planner *pl) {
    const part *q = &pl->whole;
    for (int k = 0; k < q->n_loops[pl->fr]; k++)
        if (!q->whole[pl->fr][k]) return 1;
    return 0;
}

double plan_op_calls(const planner *pl, int i) {
    const int w = vae_loops_width(&pl->whole.loops[pl->fr]);
    return op_looped(pl, i) ? (double)((pl->op_frames[i] + w - 1) / w)
                            : (double)plan_part_steps(&pl->whole, pl->rq->t);
}

/* Host bytes a cache of `bytes` in host memory moves over the run: read whole before each call,
 * and its new frames written back after (exec_window.c's ring: a call of w frames inside a frame
 * loop adds w of the kt-1 kept frames, a step adds them all). An estimate for the costs: a
 * strided temporal conv inside a loop adds a frame per input frame, more than w a call. */
static double op_traffic(const planner *pl, int i, int64_t bytes) {
    const int kept = pl->p->ops[i].kt - 1, w = vae_loops_width(&pl->whole.loops[pl->fr]);
    const double back = op_looped(pl, i) && kept > w ? (double)w / kept : 1.0;
    return (double)bytes * (1.0 + back) * plan_op_calls(pl, i);
}

typedef struct offload_order {
    int n;         /* contiguous windows with a cache */
    int *op;       /* largest cache first */
    int64_t *size; /* per op: its cache's bytes */
} offload_order;

static int order_make(const planner *pl, offload_order *o) {
    const int n_ops = pl->p->n_ops;
    memset(o, 0, sizeof *o);
    o->op = vae_calloc((size_t)n_ops + 1, sizeof *o->op);
    o->size = vae_calloc((size_t)n_ops + 1, sizeof *o->size);
    if (!o->op || !o->size) return vae_fail(VAE_ENOMEM, "out of memory planning");
    int64_t scratch = 0;
    if (plan_whole_mem(pl, NULL, o->size, &scratch, NULL) < 0)
        return vae_fail(VAE_ENOMEM, "out of memory planning");
    for (int i = 0; i < n_ops; i++) { /* insertion by size, largest first (ties: program order) */
        if (o->size[i] <= 0) continue;
        int j = o->n++;
        for (; j > 0 && o->size[o->op[j - 1]] < o->size[i]; j--)
            o->op[j] = o->op[j - 1];
        o->op[j] = i;
    }
    return VAE_OK;
}

static void order_free(offload_order *o) {
    vae_free(o->op);
    vae_free(o->size);
}

/* Whole frames with the k largest caches in host memory: peak and cost into c. */
static int eval_offload(planner *pl, const offload_order *o, int k, cand *c) {
    const vae_plan_request *rq = pl->rq;
    unsigned char *off = vae_calloc((size_t)pl->p->n_ops + 1, 1);
    if (!off) return vae_fail(VAE_ENOMEM, "out of memory planning");
    double traffic = 0;
    int64_t host = 0;
    for (int j = 0; j < k; j++) {
        const int i = o->op[j];
        off[i] = 1;
        host += o->size[i];
        traffic += op_traffic(pl, i, o->size[i]);
    }
    memset(c, 0, sizeof *c);
    c->kind = VAE_PLAN_WHOLE, c->fr = pl->fr, c->macs = pl->macs_whole;
    c->width = pl->whole.loops[pl->fr].width;
    c->scratch = rq->scratch_now;
    c->peak_alloc = plan_whole_mem(pl, off, NULL, &c->scratch, &c->caches);
    vae_free(off);
    if (c->peak_alloc < 0) return vae_fail(VAE_ENOMEM, "out of memory planning");
    c->host_ring = k > 0 ? ring_bytes(pl, o->size[o->op[0]]) : 0;
    c->peak_alloc += c->host_ring;
    c->peak = rq->fixed + c->scratch + c->peak_alloc;
    c->frame = plan_max_frame(pl->vh, pl->vw, pl->p->n_values);
    c->n_offload = k;
    c->host_caches = host;
    c->host_traffic = traffic;
    c->cost = c->macs + HOST_BYTE_MACS * traffic * (rq->host_copy ? OVERLAPPED_HOST_SHARE : 1);
    return VAE_OK;
}

/* The cheapest fit (or, forced, the n largest) with the loops of pl->fr at their current width:
 * into best where cheaper (*found), the floor into floor_c. */
static int choose_at(planner *pl, int forced, cand *best, cand *floor_c, int *found) {
    const vae_plan_request *rq = pl->rq;
    offload_order o;
    cand c;
    int rc = order_make(pl, &o);
    if (rc || o.n == 0) {
        order_free(&o);
        return rc;
    }
    if (forced) { /* the n largest, whatever the budget (tests, measurements) */
        if ((rc = eval_offload(pl, &o, forced < o.n ? forced : o.n, &c)) == VAE_OK)
            *best = *floor_c = c, *found = 1;
        order_free(&o);
        return rc;
    }
    /* every cache that can leave: the floor of exact whole frames */
    if ((rc = eval_offload(pl, &o, o.n, &c)) == VAE_OK && plan_runnable(&c) &&
        (floor_c->peak < 0 || c.peak < floor_c->peak))
        *floor_c = c;
    if (rc == VAE_OK && plan_runnable(&c) && (rq->budget <= 0 || c.peak <= rq->budget)) {
        int lo = 1, hi = o.n; /* the fewest that fit (the peak falls as k grows) */
        while (lo < hi && rc == VAE_OK) {
            const int mid = (lo + hi) / 2;
            cand m;
            if ((rc = eval_offload(pl, &o, mid, &m)) == VAE_OK) {
                if (m.peak <= rq->budget)
                    hi = mid;
                else
                    lo = mid + 1;
            }
        }
        if (rc == VAE_OK) rc = eval_offload(pl, &o, lo, &c);
        if (rc == VAE_OK && (!*found || c.cost < best->cost)) *best = c, *found = 1;
    }
    order_free(&o);
    return rc;
}

/* Frame loops of 2 frames at a time copy each cache in and out half as often as loops of one,
 * for the memory of a second frame in every looped stage: with caches in host memory, whose
 * traffic is the cost, both are tried (settings.exec_loop_frames fixes the width). */
int plan_choose_offload(planner *pl, int forced, cand *best, cand *floor_c) {
    const vae_plan_request *rq = pl->rq;
    const int n_fr = rq->frame_loops ? 2 : 1, fr0 = rq->frame_loops == 2;
    int found = 0, rc = VAE_OK;
    for (int fr = fr0; fr < n_fr && rc == VAE_OK; fr++) {
        pl->fr = fr;
        vae_loops *l = &pl->whole.loops[fr];
        /* else widths 1 and 2 (with no frame loop, both are the same plan) */
        const int fixed = !fr || rq->loop_frames > 0 || !any_looped(pl);
        const int w_lo = fixed ? l->width : 1, w_hi = fixed ? l->width : 2;
        for (int w = w_lo; w <= w_hi && rc == VAE_OK && !(forced && found); w++) {
            l->width = w;
            rc = choose_at(pl, forced, best, floor_c, &found);
            if (rc && w > 1 && !fixed) { /* (a width the loops do not take: loops of one) */
                vae_error_clear();
                rc = VAE_OK;
            }
        }
        if (!fixed) l->width = 0; /* (the chosen width is the candidate's) */
        if (forced && found) break;
    }
    if (rc) return rc;
    return found ? VAE_OK : PLAN_NOFIT;
}

int plan_fill_offload(planner *pl, const cand *c, vae_plan *plan) {
    if (c->n_offload <= 0) return VAE_OK;
    offload_order o;
    int rc = order_make(pl, &o);
    plan->offload = rc ? NULL : vae_calloc((size_t)pl->p->n_ops + 1, sizeof *plan->offload);
    if (rc == VAE_OK && !plan->offload) rc = vae_fail(VAE_ENOMEM, "out of memory planning");
    for (int j = 0; rc == VAE_OK && j < c->n_offload && j < o.n; j++)
        plan->offload[o.op[j]] = o.size[o.op[j]];
    plan->n_offload = c->n_offload;
    plan->host_caches = c->host_caches;
    plan->host_ring = c->host_ring;
    plan->host_traffic = c->host_traffic;
    order_free(&o);
    return rc;
}
