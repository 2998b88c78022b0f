/* session_plan.c -- one call's plan and its runs: the budget (each device's, for a device
 * group), the planner's request, runs until one fits, the group's lanes (api.h). */
#include <string.h>

#include "api/api.h"
#include "core/comm.h"

/* How many input frames a program consumes: the first chunk, then whole chunks; where it pads its
 * input's end (pad_end), a last partial chunk counts whole. */
int vae_frames_used(const vae_program *p, int t) {
    if (p->pad_end && t > 0) {
        const int later = t > p->first_chunk ? t - p->first_chunk : 0;
        return p->first_chunk + (later + p->chunk - 1) / p->chunk * p->chunk;
    }
    if (t < p->first_chunk) return 0;
    return p->first_chunk + (t - p->first_chunk) / p->chunk * p->chunk;
}

/* The budget: the option, else what the device has available minus a margin (0: unknown). */
static int64_t session_budget(const vae_session *s, int64_t avail) {
    if (s->retry_budget > 0) return s->retry_budget;
    if (s->opts.max_memory > 0) return s->opts.max_memory;
    if (avail <= 0) return 0;
    int64_t margin = ((int64_t)256 << 20) + avail / 20;
    return avail > 2 * margin ? avail - margin : avail / 2;
}

/* Neither the caller nor a retry set the budget: of plans alike in cost, the least memory. */
static int no_budget_given(const vae_session *s) {
    return s->retry_budget <= 0 && s->opts.max_memory <= 0;
}

/* The most lanes of the session on one device (a device listed more than once). */
static int lanes_per_device(const vae_session *s) {
    int most = 1;
    for (int i = 0; i < s->n_lanes; i++) {
        int n = 0;
        for (int j = 0; j < s->n_lanes; j++)
            n += s->opts.n_devices > 1 && s->opts.devices[j] == s->opts.devices[i];
        if (n > most) most = n;
    }
    return most;
}

int vae_session_mem_info(vae_session *s, int encode, vae_session_mem *mem) {
    const vae_program *p = vae_session_program(s, encode);
    vae_backend *be = s->be;
    memset(mem, 0, sizeof *mem);
    if (!be->v->mem_info) return VAE_OK;
    int rc = be->v->mem_info(be, p, &mem->avail, &mem->reserve, &mem->scratch);
    for (int k = 1; rc == VAE_OK && k < s->n_lanes; k++) {
        int64_t a = 0, r = 0, sc = 0; /* a group plans for its device with the least memory */
        rc = s->lane[k]->v->mem_info(s->lane[k], p, &a, &r, &sc);
        if (a < mem->avail) mem->avail = a;
    }
    return rc;
}

int vae_session_plan_make(vae_session *s, int encode, const vae_io_view *g, vae_plan *plan) {
    vae_session_mem mem;
    memset(plan, 0, sizeof *plan); /* (freed by the caller on failure) */
    int rc = vae_session_fp8_ready(s, encode);
    if (rc == VAE_OK) rc = vae_session_mem_info(s, encode, &mem);
    return rc ? rc : vae_session_plan_for(s, encode, g, &mem, plan);
}

/* Pixels of the video side per pixel of the latent side: the model's; a space preview's decoder
 * (options.preview) upscales less, by what its program makes of one latent pixel. */
static int video_factor(const vae_session *s, int encode) {
    const int f = vae_config_spatial_factor(&s->model->cfg);
    const vae_program *p = vae_session_program(s, encode);
    if (encode || !(s->opts.preview & VAE_PREVIEW_SPACE)) return f;
    int *vh = vae_malloc((size_t)p->n_values * 2 * sizeof *vh);
    if (!vh) return f;
    const int ok = vae_program_shapes(p, 1, 1, vh, vh + p->n_values) == VAE_OK;
    const int g = ok && vh[p->output] > 0 ? vh[p->output] : f;
    vae_free(vh);
    return g;
}

static const vae_program *model_program(const vae_session *s, int encode) {
    return encode ? &s->model->enc : &s->model->dec;
}

int vae_session_frames_used(const vae_session *s, int encode, int t) {
    return vae_frames_used(model_program(s, encode), t);
}

/* What a plan in steps of several of the model's chunks may be (plan_for) */
enum { STEPS_ANY, STEPS_WHOLE, STEPS_TILED };

/* The planner's request for the session's program as it is now (its chunk: plan_for); STEPS_WHOLE:
 * whole frames in chunks only (no tiles, no frame-by-frame streaming); STEPS_TILED: tiles too,
 * but no caches in host memory. */
static int plan_request(vae_session *s, int encode, const vae_io_view *g,
                        const vae_session_mem *mem, int steps, vae_plan *plan) {
    const int whole = steps == STEPS_WHOLE;
    const vae_program *p = vae_session_program(s, encode);
    vae_backend *be = s->be;
    const int sharing = lanes_per_device(s); /* lanes on one device share its memory */
    const int ranks = s->comm ? s->comm->size : s->n_lanes;
    const vae_session_options *o = &s->opts;
    const int t_used = vae_session_frames_used(s, encode, g->t);
    vae_plan_request rq = {.prog = p,
                           .encode = encode,
                           .t = t_used,
                           .h = g->h,
                           .w = g->w,
                           .elem = be->elem_size,
                           .budget = session_budget(s, mem->avail) / sharing,
                           .fixed = mem->reserve + s->model_error[encode],
                           .conv_upsample = be->v->conv_upsample,
                           .round = be->v->alloc_size,
                           .scratch_need = be->v->scratch_need,
                           .be = be,
                           .scratch_now = mem->scratch,
                           .planar_io = be->v->stage_in != NULL,
                           .host_direct = be->v->host_alloc != NULL,
                           .host_copy = be->host_copy_bytes,
                           .mode = o->tile_mode,
                           .tile_h = o->tile_height,
                           .tile_w = o->tile_width,
                           .blend_tile = o->blend_tile, /* (0: blend_auto) */
                           .video_factor = video_factor(s, encode),
                           .frame_loops = s->set.exec_frames,
                           .cut = s->set.plan_cut,
                           .store_host = s->set.exec_store_host,
                           .scratch_minimal = s->set.plan_scratch_min > 0,
                           .strips = s->set.plan_strips,
                           .host_store_max = (int64_t)s->set.exec_host_mb << 20,
                           .ranks = s->n_lanes};
    rq.ranks = ranks, rq.processes = s->comm != NULL; /* (a group of processes: its ranks) */
    rq.loop_frames = s->set.exec_loop_frames;
    rq.least_memory = no_budget_given(s) && s->set.plan_scratch_min == 0;
    rq.stage_io = be->v->download_stage != NULL;
    rq.blend_overlap = o->blend_overlap > 0 ? o->blend_overlap : rq.blend_tile / 8;
    rq.blend_auto = o->blend_tile <= 0, rq.blend_overlap_auto = o->blend_overlap <= 0;
    rq.strip_norm_in_place = s->set.exec_strip_norm && be->v->norm_rows;
    /* band plans: every lane splits GroupNorm (its sums all-reduced by the group's communicator,
     * runner_group.c) */
    int split = ranks > 1 && s->set.plan_bands >= 0;
    for (int k = 0; k < s->n_lanes; k++)
        split = split && s->lane[k]->v->norm_stats && s->lane[k]->v->norm_apply;
    rq.reduce = split ? 1 + s->set.plan_bands : 0;
    /* causal caches in host memory: whole frames on one device in the model's steps (larger
     * steps are taken only where they fit as they are); where the planner chooses them, only
     * over contiguous windows (what its memory model counts) */
    rq.offload = s->set.plan_offload;
    if ((steps != STEPS_ANY && rq.offload == 0) || s->n_lanes > 1 || s->comm ||
        (!s->set.exec_contig && rq.offload == 0))
        rq.offload = -1;
    if (whole) rq.mode = VAE_TILE_NONE, rq.frame_loops = 0;
    return vae_plan_make(plan, &rq);
}

enum { MAX_STEP_CHOICES = 6 };

/* How many of the model's chunks a step of this input may take: those up to settings.exec_chunks
 * that divide the number of its later chunks (no frame left over, every later step alike),
 * largest first (MAX_STEP_CHOICES - 1 at most), and 1. */
static int chunk_choices(const vae_session *s, int encode, int t, int *ks) {
    const vae_program *m = model_program(s, encode);
    const int used = vae_session_frames_used(s, encode, t);
    const int later = used > m->first_chunk ? (used - m->first_chunk) / m->chunk : 0;
    int n = 0;
    for (int k = s->set.exec_chunks < later ? s->set.exec_chunks : later;
         k > 1 && n < MAX_STEP_CHOICES - 1; k--)
        if (later % k == 0) ks[n++] = k;
    ks[n++] = 1;
    return n;
}

/* The plan of this input in steps of k of the model's chunks (k > 1: as `steps` says, where they
 * fit; the session's program keeps that chunk); VAE_ENOMEM / VAE_ESHAPE when they do not fit
 * (k > 1) */
static int plan_in_steps(vae_session *s, int encode, const vae_io_view *g,
                         const vae_session_mem *mem, int k, int steps, vae_plan *plan) {
    vae_program *p = &s->prog[encode ? 1 : 0];
    p->chunk = k * model_program(s, encode)->chunk;
    return plan_request(s, encode, g, mem, k > 1 ? steps : STEPS_ANY, plan);
}

/* Without a budget of the caller's: of the plans in steps of each k, the one with the least
 * memory whose predicted time is within 3% of the fastest (larger steps save op calls, at a
 * cost in memory that can be far larger than the time they save). */
static int plan_least_memory(vae_session *s, int encode, const vae_io_view *g,
                             const vae_session_mem *mem, const int *ks, int n, vae_plan *plan) {
    vae_plan plans[MAX_STEP_CHOICES];
    int ok[MAX_STEP_CHOICES] = {0}, best = -1, fastest = -1, rc = VAE_OK;
    for (int j = 0; j < n && rc == VAE_OK; j++) {
        rc = plan_in_steps(s, encode, g, mem, ks[j], STEPS_WHOLE, &plans[j]);
        if (rc == VAE_OK) {
            ok[j] = 1;
            if (fastest < 0 || plans[j].cost < plans[fastest].cost) fastest = j;
        } else if ((rc == VAE_ENOMEM || rc == VAE_ESHAPE) && (ks[j] > 1 || fastest >= 0)) {
            vae_plan_free(&plans[j]); /* an expected fallback: these steps do not fit */
            vae_error_clear();
            rc = VAE_OK;
        } else if (ks[j] == 1) { /* nothing fits: this plan says what it needs */
            for (int i = 0; i < j; i++)
                if (ok[i]) vae_plan_free(&plans[i]);
            *plan = plans[j];
            return rc;
        } else {
            vae_plan_free(&plans[j]); /* the input's fault: no fallback */
        }
    }
    for (int j = 0; rc == VAE_OK && j < n; j++)
        if (ok[j] && plans[j].cost <= 1.03 * plans[fastest].cost &&
            (best < 0 || plans[j].peak < plans[best].peak))
            best = j;
    if (rc == VAE_OK)
        VAE_INFO("plan: no budget given: steps of %d of the model's chunks, predicted peak %.2f "
                 "GiB, %+.1f%% of the fastest plan's time (steps of %d, %.2f GiB)",
                 ks[best], (double)plans[best].peak / (1 << 30),
                 100.0 * (plans[best].cost / (plans[fastest].cost > 0 ? plans[fastest].cost : 1) -
                          1),
                 ks[fastest], (double)plans[fastest].peak / (1 << 30));
    for (int j = 0; j < n; j++)
        if (ok[j] && (rc || j != best)) vae_plan_free(&plans[j]);
    if (rc) return rc;
    *plan = plans[best];
    s->prog[encode ? 1 : 0].chunk = ks[best] * model_program(s, encode)->chunk;
    return VAE_OK;
}

/* A tiled plan in the model's steps (plan) against tiles in steps of each k of ks: the cheapest
 * that fits (larger steps: fewer op calls, for smaller tiles and more halo); the session's
 * program keeps its chunk. */
static int tiles_in_steps(vae_session *s, int encode, const vae_io_view *g,
                          const vae_session_mem *mem, const int *ks, int n, vae_plan *plan) {
    int best = 1;
    for (int j = 0; j < n; j++) {
        vae_plan c;
        if (plan_in_steps(s, encode, g, mem, ks[j], STEPS_TILED, &c) != VAE_OK) {
            vae_plan_free(&c); /* these steps do not fit (the model's steps do: plan) */
            vae_error_clear();
            continue;
        }
        VAE_DEBUG("plan: tiles in steps of %d of the model's chunks: predicted peak %.2f GiB, "
                  "cost %.4g (steps of %d: %.4g)",
                  ks[j], (double)c.peak / (1 << 30), c.cost, best, plan->cost);
        if (c.cost < plan->cost) {
            vae_plan_free(plan);
            *plan = c, best = ks[j];
        } else {
            vae_plan_free(&c);
        }
    }
    s->prog[encode ? 1 : 0].chunk = best * model_program(s, encode)->chunk;
    VAE_DEBUG("plan: tiles in steps of %d of the model's chunks (the cheapest that fits)", best);
    return VAE_OK;
}

/* Whole frames in steps of several of the model's chunks where they fit the budget without
 * streaming frame by frame: fewer, larger kernels and fewer causal-window copies a frame (the
 * result is the same: program.h); without a budget of the caller's, the least memory within 3%
 * of the fastest. Else, and where the caller asked for tiles, strips or a device group, the
 * model's own steps, planned as they were. The session's program keeps the chosen chunk for this
 * call's runs. */
static int plan_for(vae_session *s, int encode, const vae_io_view *g, const vae_session_mem *mem,
                    vae_plan *plan) {
    const vae_session_options *o = &s->opts;
    int ks[MAX_STEP_CHOICES] = {1}, n = 1;
    if (s->n_lanes == 1 && !s->comm && o->tile_mode != VAE_TILE_BLEND && o->tile_height <= 0 &&
        o->tile_width <= 0 && s->set.plan_strips < 2 && s->set.exec_frames < 2)
        n = chunk_choices(s, encode, g->t, ks);
    if (n > 1 && no_budget_given(s)) return plan_least_memory(s, encode, g, mem, ks, n, plan);
    for (int j = 0; j + 1 < n; j++) { /* the largest steps that fit */
        const int rc = plan_in_steps(s, encode, g, mem, ks[j], STEPS_WHOLE, plan);
        if (rc == VAE_OK) return VAE_OK;
        /* the input's fault: no fallback; but whole frames larger than an op call takes
         * (VAE_ESHAPE, plan.h's limits) may still go in tiles */
        if (rc != VAE_ENOMEM && rc != VAE_ESHAPE) return rc;
        /* an expected fallback (whole frames in these steps do not fit): smaller ones */
        vae_plan_free(plan);
        vae_error_clear();
    }
    int rc = plan_in_steps(s, encode, g, mem, 1, STEPS_ANY, plan);
    return rc == VAE_OK && plan->kind == VAE_PLAN_TILED && n > 1
               ? tiles_in_steps(s, encode, g, mem, ks, n - 1, plan)
               : rc;
}

int vae_session_plan_stream(vae_session *s, int encode, const vae_io_view *g, vae_plan *plan) {
    vae_session_mem mem;
    memset(plan, 0, sizeof *plan); /* (freed by the caller on failure) */
    int rc = vae_session_fp8_ready(s, encode);
    if (rc == VAE_OK) rc = vae_session_mem_info(s, encode, &mem);
    return rc ? rc : plan_in_steps(s, encode, g, &mem, 1, STEPS_ANY, plan);
}

static int run_once(vae_session *s, int encode, const vae_plan *plan, const vae_run_io *io,
                    int *emitted) {
    const vae_program *p = vae_session_program(s, encode);
    vae_runner **rs = s->runner[encode];
    int rc = VAE_OK;
    for (int k = 0; k < s->n_lanes && rc == VAE_OK; k++) {
        vae_backend *be = s->lane[k];
        if (!rs[k]) rc = vae_runner_create(&rs[k], be, p, &s->set);
        /* counted by the plan: the ring for strips' slots or caches in host memory */
        be->host_copy_on = (plan->strips && plan->strips->slots_host) || plan->n_offload > 0;
        be->host_copy_ring = plan->host_ring;
        if (rc == VAE_OK && be->v->scratch_reserve) /* grown now, not in the middle of a graph */
            rc = be->v->scratch_reserve(be, (size_t)plan->scratch, plan->scratch_minimal);
    }
    if (rc) return rc;
    if (s->comm) return vae_session_group_run(s, rs[0], plan, io, emitted);
    return s->n_lanes > 1 ? vae_runner_run_group(rs, s->n_lanes, plan, io, emitted)
                          : vae_runner_run(rs[0], plan, io, emitted);
}

/* Each device's budget before a run; after it, the largest peak and whether any refused. */
static void lanes_limit(vae_session *s, int64_t budget) {
    for (int k = 0; k < s->n_lanes; k++) {
        vae_backend *be = s->lane[k];
        be->limit = budget; /* the backend refuses to go over it */
        be->refused = 0;
        be->bytes_peak = be->bytes_in_use;
    }
}

static int64_t lanes_unlimit(vae_session *s, int *refused) {
    int64_t peak = 0;
    *refused = 0;
    for (int k = 0; k < s->n_lanes; k++) {
        vae_backend *be = s->lane[k];
        be->limit = 0;
        *refused |= be->refused;
        if (be->bytes_peak > peak) peak = be->bytes_peak;
    }
    return peak;
}

/* The host's time in the steps of the session's runners of direction `encode` since the last
 * take. */
static vae_exec_host host_take(vae_session *s, int encode) {
    vae_exec_host h = {0};
    for (int k = 0; k < s->n_lanes; k++)
        if (s->runner[encode][k]) vae_runner_host_take(s->runner[encode][k], &h);
    return h;
}

/* Where a call's host time went (what keeps a short call from its device time): planning, and
 * its steps by how they ran (executor.h vae_exec_host). */
static void log_host_times(int encode, double plan_s, const vae_exec_host *h) {
    VAE_INFO("%s: host time: plan %.2f ms; steps: %d of ops one by one %.2f ms, %d recorded as "
             "graphs %.2f ms, %d graph replays %.2f ms",
             encode ? "encode" : "decode", plan_s * 1e3, h->ops, h->ops_s * 1e3, h->recorded,
             h->record_s * 1e3, h->replayed, h->replay_s * 1e3);
}

/* Runs plans until one succeeds: a plan the backend refused (over the budget) before any frame
 * was handed out is made again with what the memory model missed. */
int vae_session_run_planned(vae_session *s, int encode, const vae_io_view *g,
                            const vae_run_io *io) {
    int64_t *model_error = &s->model_error[encode];
    int rc = vae_session_fp8_ready(s, encode); /* (before a group's plan, too) */
    if (rc) return rc;
    s->retry_budget = 0;
    for (int attempt = 0;; attempt++) {
        vae_plan plan;
        const double t0 = vae_seconds();
        rc = s->comm ? vae_session_group_plan(s, encode, g, &plan)
                     : vae_session_plan_make(s, encode, g, &plan);
        const double plan_s = vae_seconds() - t0;
        if (rc) {
            vae_plan_free(&plan); /* a plan that does not fit keeps its tiles for the caller */
            break;
        }
        VAE_INFO("plan: %s", plan.why);
        if (s->comm && plan.kind == VAE_PLAN_WHOLE && attempt == 0)
            VAE_WARN("%s: the plan is whole frames, so every rank of the group computes all of "
                     "it (no exact tiles or bands to share: the input is too small for them to "
                     "pay, or VAE_PLAN_BANDS=-1)",
                     encode ? "encode" : "decode");
        if (s->n_lanes > 1 && plan.kind == VAE_PLAN_WHOLE && attempt == 0)
            VAE_WARN(
                "%s: the plan is whole frames, so device %d runs it alone (no exact tiles or "
                "bands to share: the input is too small for them to pay, or VAE_PLAN_BANDS=-1)",
                encode ? "encode" : "decode", s->opts.device_index);
        int emitted = 0, refused = 0;
        lanes_limit(s, plan.budget);
        host_take(s, encode); /* (what an earlier call left: a failed one's) */
        rc = run_once(s, encode, &plan, io, &emitted);
        const vae_exec_host host = host_take(s, encode);
        if (rc == VAE_OK) log_host_times(encode, plan_s, &host);
        const int64_t peak = lanes_unlimit(s, &refused);
        /* what the model missed (the backend's own temporaries, allocator effects): later
         * plans of this session add it */
        const int64_t modelled = plan.peak - *model_error, missed = peak - modelled;
        if (missed > *model_error) *model_error = missed;
        /* planned again if nothing was handed out yet: a refusal by the budget is the memory
         * model's error (later plans of this session add what it missed); a device or host that
         * ran out says nothing about the model: this call plans for 80% of what it held then,
         * if an exact plan that small exists */
        const int64_t ran_out_at = peak * 4 / 5;
        /* (not in a group of processes: its ranks would have to fail together) */
        const int retry = rc == VAE_ENOMEM && !s->comm && emitted == 0 && attempt < 2 &&
                          plan.budget > 0 && s->opts.tile_mode != VAE_TILE_NONE &&
                          (refused || ran_out_at >= plan.floor);
        if (retry && refused && plan.budget - modelled + plan.budget / 20 > *model_error)
            *model_error = plan.budget - modelled + plan.budget / 20;
        if (retry && !refused) s->retry_budget = ran_out_at;
        vae_plan_free(&plan);
        if (!retry) break;
        if (s->retry_budget > 0)
            VAE_WARN("%s: %s; planning again for %.1f MiB", encode ? "encode" : "decode",
                     vae_last_error(), (double)s->retry_budget / (1 << 20));
        else
            VAE_WARN("%s: %s; planning again with %.1f MiB more for what the memory model misses",
                     encode ? "encode" : "decode", vae_last_error(),
                     (double)*model_error / (1 << 20));
        vae_error_clear();
    }
    s->retry_budget = 0; /* later calls start from the budget again */
    return rc;
}

/* What a plan of this input for this memory depends on: what plan_request reads besides the
 * session's settings, options and backend (fixed at its creation) and its program (finished by
 * vae_session_fp8_ready before any plan; its chunk is the memo's). */
static vae_plan_key memo_key(const vae_session *s, int encode, const vae_io_view *g,
                             const vae_session_mem *mem) {
    return (vae_plan_key){.t = g->t,
                          .h = g->h,
                          .w = g->w,
                          .budget = session_budget(s, mem->avail),
                          .reserve = mem->reserve,
                          .scratch = mem->scratch,
                          .error = s->model_error[encode ? 1 : 0],
                          .host_copy = s->be->host_copy_bytes};
}

static int key_equal(const vae_plan_key *a, const vae_plan_key *b) {
    return a->t == b->t && a->h == b->h && a->w == b->w && a->budget == b->budget &&
           a->reserve == b->reserve && a->scratch == b->scratch && a->error == b->error &&
           a->host_copy == b->host_copy;
}

void vae_session_memo_drop(vae_session *s, int encode) {
    vae_plan_memo *m = &s->plan_memo[encode ? 1 : 0];
    if (m->valid) vae_plan_free(&m->plan);
    m->valid = 0;
}

int vae_session_plan_for(vae_session *s, int encode, const vae_io_view *g,
                         const vae_session_mem *mem, vae_plan *plan) {
    vae_plan_memo *m = &s->plan_memo[encode ? 1 : 0];
    vae_program *p = &s->prog[encode ? 1 : 0];
    const int memo = s->n_lanes == 1 && !s->comm && s->retry_budget <= 0;
    const vae_plan_key key = memo_key(s, encode, g, mem);
    if (memo && m->valid && key_equal(&m->key, &key)) {
        if (vae_plan_copy(plan, &m->plan, p->n_ops) == VAE_OK) {
            p->chunk = m->chunk;
            return VAE_OK;
        }
        vae_error_clear(); /* (out of host memory for the copy: planned afresh below) */
    }
    const int rc = plan_for(s, encode, g, mem, plan);
    vae_session_memo_drop(s, encode);
    if (rc != VAE_OK || !memo) return rc;
    if (vae_plan_copy(&m->plan, plan, p->n_ops) != VAE_OK) {
        vae_error_clear(); /* (strips' and bands' plans are not kept: their calls plan again) */
        return rc;
    }
    m->valid = 1, m->key = key, m->chunk = p->chunk;
    return rc;
}
