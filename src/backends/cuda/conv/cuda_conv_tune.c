/* cuda_conv_tune.c -- which path a conv takes for a shape (cuda_conv_paths.c: per block, 3-D,
 * padded 3-D, implicit GEMM, halo tile): the candidates that fit the scratch area and the weights'
 * share of a budget, each timed once (a warm-up run, then one between two events), then the two
 * fastest, where they are close, again in alternating order (VAE_CUDA_TUNE_REPS), the fastest
 * kept per (op, frames, size) and stored in the tune cache (cuda_tune_cache.c: a later process
 * takes it without timing); VAE_CUDA_TUNE=seed:N picks by a hash instead (tests),
 * VAE_CUDA_TUNE=0 takes the first candidate. An own kernel wins unless cuDNN saves more than
 * cb->dnn_gain_us.
 * Why the second rounds: an H100 running the candidates back to back reaches its power limit within
 * ~0.1 s and lowers its clock (1.98 -> ~1.45 GHz in a 720p decode), so the first round favours the
 * paths timed early; the halo-tile kernel, timed last, lost or won the 720p residual convs by 1-5%
 * from one process to the next, a swing of the 10 ms norm pass it saves per conv. The later rounds
 * run in the limited state the decode itself runs in, each path as often first as second.
 */
#include <stdio.h>
#include <string.h>

#include "backends/cuda/conv/cuda_conv_internal.h"

static const char *const path_names[N_PATHS] = {"per block", "3-D", "padded 3-D", "implicit GEMM",
                                                "halo tile"};

/* One warm-up run (plans; not when warm is 0), then one timed run; with the conv's pass after it
 * (its RMS norm or activation) as a pass of its own where the path does not apply it, so that a
 * path that does is credited with it. */
static int timed_path(conv_call *cc, const void *const *frames, int t_out, int path, int warm,
                      float *ms) {
    cuda_backend *cb = cc->cb;
    int rc = warm ? cu_conv_run_path(cc, frames, t_out, path) : VAE_OK;
    if (rc) return rc;
    if ((rc = cu_tune_mark(cb, 0, cc->op->name))) return rc;
    rc = cu_conv_run_path(cc, frames, t_out, path);
    if (rc == VAE_OK) rc = cu_conv_post(cc, (int64_t)t_out * cc->ho * cc->wo);
    return rc ? rc : cu_tune_elapsed(cb, ms, cc->op->name);
}

int cu_tune_alternate(cuda_backend *cb, void *ctx, cu_tune_way_fn run, int warm, int rounds,
                      float ms[2], int *last) {
    ms[0] = ms[1] = 0.0f;
    if (rounds < 1) rounds = 1;
    for (int r = warm ? -1 : 0; r < rounds; r++) /* r = -1: the warm-ups */
        for (int i = 0; i < 2; i++) {
            const int way = i ^ (r > 0 && r % 2);
            float t = 0.0f;
            cb->tuning++;
            int rc = run(ctx, way, &t);
            cb->tuning--;
            if (rc) return rc;
            if (t < 0) {
                ms[way] = -1.0f;
                continue;
            }
            if (r >= 0 && ms[way] >= 0) ms[way] += t / (float)rounds;
            *last = way;
        }
    return VAE_OK;
}

int cu_tune_mark(cuda_backend *cb, int i, const char *who) {
    for (int k = 0; k < 2; k++)
        if (!cb->tune_ev[k]) {
            int rc = cu_check(cudaEventCreate(&cb->tune_ev[k]), who, "cudaEventCreate");
            if (rc) return rc;
        }
    return cu_check(cudaEventRecord(cb->tune_ev[i], cb->stream), who, "event");
}

int cu_tune_elapsed(cuda_backend *cb, float *ms, const char *who) {
    int rc = cu_tune_mark(cb, 1, who);
    if (rc == VAE_OK) rc = cu_check(cudaEventSynchronize(cb->tune_ev[1]), who, "event");
    return rc ? rc
              : cu_check(cudaEventElapsedTime(ms, cb->tune_ev[0], cb->tune_ev[1]), who, "event");
}

uint64_t cu_conv_seed_hash(uint64_t seed, const char *name, int n_in, int h, int w) {
    uint64_t x = 0xcbf29ce484222325ull ^ seed;
    for (const char *c = name; *c; c++)
        x = (x ^ (unsigned char)*c) * 0x100000001b3ull;
    const int v[3] = {n_in, h, w};
    for (int i = 0; i < 3; i++)
        x = (x ^ (uint64_t)(uint32_t)v[i]) * 0x100000001b3ull;
    return x ^ (x >> 29);
}

/* The key of a tuning decision in the cache file: everything the paths' speed depends on. */
static void tune_key(const conv_call *cc, int n_in, const int *cand, int nc, char *key,
                     size_t len) {
    const vae_op *op = cc->op;
    int n =
        snprintf(key, len, "c%d-%d|k%dx%dx%d|s%dx%dx%d|p%d.%d.%d.%d|u%d|n%d|%dx%d|r%d|f%d|q%d|a%d|",
                 op->c_in, op->c_out, op->kt, op->kh, op->kw, op->st, op->sh, op->sw, op->pad_h[0],
                 op->pad_h[1], op->pad_w[0], op->pad_w[1], op->up, n_in, cc->h, cc->w,
                 cc->res != NULL, cc->fuse, op->norm_w != NULL, (int)op->act);
    for (int k = 0; k < nc && n > 0 && (size_t)n < len; k++) /* the paths it was chosen from */
        n += snprintf(key + n, len - (size_t)n, "%d%s", cand[k],
                      cand[k] == PATH_3DPAD && cu_conv_igemm_padded_ok(cc) ? "g" : "");
    if (n > 0 && (size_t)n < len) /* the rules it was chosen by */
        snprintf(key + n, len - (size_t)n, "|d%d|t%d", cc->cb->dnn_gain_us, cc->cb->tune_reps);
}

int cu_tune_own_wins(const cuda_backend *cb, float own_ms, float dnn_ms) {
    /* no margin for the mma.sync kernels (cb->mma): their speed against cuDNN on Ampere / Ada is
     * not measured, so there the faster by the timing wins */
    const float margin_us = cb->mma ? 0.0f : (float)cb->dnn_gain_us;
    return (own_ms - dnn_ms) * 1000.0f <= margin_us;
}

/* The engine's own kernels run the path (CUTLASS over the window or the padded window); the
 * other paths are cuDNN's. */
static int path_is_own(const conv_call *cc, int path) {
    return path == PATH_IGEMM || path == PATH_HALO ||
           (path == PATH_3DPAD && cu_conv_igemm_padded_ok(cc));
}

/* The timed choice among nc candidates (ms[k] < 0: did not run as itself): the fastest, except
 * that a cuDNN path must beat the fastest own path by the margin of cu_tune_own_wins. */
static int tuned_pick(const conv_call *cc, const int *cand, const float *ms, int nc) {
    int best = -1, own = -1;
    for (int k = 0; k < nc; k++) {
        if (ms[k] < 0) continue;
        if (best < 0 || ms[k] < ms[best]) best = k;
        if (path_is_own(cc, cand[k]) && (own < 0 || ms[k] < ms[own])) own = k;
    }
    if (best >= 0 && own >= 0 && best != own && !path_is_own(cc, cand[best]) &&
        cu_tune_own_wins(cc->cb, ms[own], ms[best]))
        return own;
    return best;
}

/* A later round's run of path[way] (tune_reps: the first round's fastest two, the later-timed
 * one first). */
typedef struct {
    conv_call *cc;
    const void *const *frames;
    int t_out, path[2];
} rep_ctx;
static int rep_run(void *ctx, int way, float *t) {
    rep_ctx *c = ctx;
    return timed_path(c->cc, c->frames, c->t_out, c->path[way], 0, t);
}

/* The later rounds (VAE_CUDA_TUNE_REPS): where the second fastest of the first round's times
 * (ms[k] < 0: did not run) is within 15% of the fastest, both are timed again, rounds times each,
 * alternating which goes first (the later-timed of the first round first: cu_tune_alternate), and
 * their times become the means of those runs. *last: the path whose run made y last; *ran: the
 * rounds run. */
static int tune_reps(conv_call *cc, const void *const *frames, int t_out, const int *cand,
                     float *ms, int nc, int *last, int *ran) {
    int a = -1, b = -1; /* the fastest two */
    for (int k = 0; k < nc; k++) {
        if (ms[k] < 0) continue;
        if (a < 0 || ms[k] < ms[a])
            b = a, a = k;
        else if (b < 0 || ms[k] < ms[b])
            b = k;
    }
    const int rounds = cc->cb->tune_reps;
    *ran = 0;
    if (rounds <= 0 || b < 0 || ms[b] > 1.15f * ms[a]) return VAE_OK;
    if (a < b) { /* a: the one timed later in the first round */
        const int t = a;
        a = b, b = t;
    }
    rep_ctx c = {cc, frames, t_out, {cand[a], cand[b]}};
    float mean[2];
    int way = 0, rc = cu_tune_alternate(cc->cb, &c, rep_run, 0, rounds, mean, &way);
    if (rc) return rc;
    ms[a] = mean[0], ms[b] = mean[1];
    *last = c.path[way];
    *ran = rounds;
    return VAE_OK;
}

/* Under a capped scratch area (a plan made with the least scratch), a path that needs more than
 * the area for one output frame is not taken where the 3-D path can run. */
static int path_too_big(const conv_call *cc, int path, int consec) {
    const cuda_backend *cb = cc->cb;
    const vae_op *op = cc->op;
    if (!cb->scratch_capped || path == PATH_3D || path == PATH_IGEMM || path == PATH_HALO ||
        !consec || cc->s->no3d)
        return 0;
    const size_t need = path == PATH_3DPAD /* one output frame's window, or gathered frame */
                            ? (size_t)op->kt * cc->h * cc->w * (size_t)cc->s->cp * cc->es
                            : cu_conv_gathered_bytes(op, cc->h, cc->w, cc->s->cg, cc->es);
    return need > cb->scratch_bytes;
}

/* The bytes of weights a path would add: its layout, where it is not held yet. */
static size_t path_layout_bytes(const conv_call *cc, int path) {
    const vae_op *op = cc->op;
    const conv_state *s = cc->s;
    const size_t taps = (size_t)s->kp * op->kt * op->kh * op->kw;
    if (path == PATH_3DPAD) return s->w3p ? 0 : taps * s->cp * cc->es;
    if (path == PATH_HALO) return s->wh ? 0 : taps * op->c_in * cc->es;
    if ((path == PATH_3D || path == PATH_IGEMM) && op->kt > 1)
        return s->w3 ? 0 : taps * op->c_in * cc->es;
    return s->w || s->w2p ? 0 : taps * op->c_in * cc->es; /* the 2-D layout */
}

/* Under a memory budget, the candidates whose layout the weights' share of the plan still holds
 * (cuda_mem_info: one layout per conv; a conv that tuned another shape's path keeps to its
 * layouts: two layouts of six 1024-channel convs once took 324 MiB more than planned and the
 * plan failed): cand[0 .. nc) filtered in place (all kept where none would fit). */
static int fitting_paths(const conv_call *cc, int *cand, int nc) {
    const cuda_backend *cb = cc->cb;
    if (cb->base.limit <= 0 || cb->weight_reserve <= 0) return nc;
    int kept[N_PATHS], nk = 0;
    for (int k = 0; k < nc; k++)
        if (cb->weight_bytes + (int64_t)path_layout_bytes(cc, cand[k]) <= cb->weight_reserve)
            kept[nk++] = cand[k];
    if (nk == 0 || nk == nc) return nc;
    VAE_DEBUG("%s: %d of %d paths within the weights' share of the budget", cc->op->name, nk, nc);
    memcpy(cand, kept, (size_t)nk * sizeof *cand);
    return nk;
}

/* Every candidate timed (ms[k]; -1 where the path turned out unsupported and ran per block), the
 * close ones again (tune_reps): *best the candidate picked, *last the path that made y last. */
static int time_candidates(conv_call *cc, const void *const *frames, int t_out, const int *cand,
                           int nc, float *ms, int *rounds, int *last, int *best) {
    const conv_state *s = cc->s;
    for (int k = 0; k < nc; k++) {
        float t;
        int rc = timed_path(cc, frames, t_out, cand[k], 1, &t);
        if (rc) return rc;
        ms[k] = (cand[k] == PATH_3D && s->no3d) || (cand[k] == PATH_3DPAD && !s->cp) ||
                        (cand[k] == PATH_IGEMM && s->noigemm) || (cand[k] == PATH_HALO && s->nohalo)
                    ? -1.0f
                    : t;
        *last = cand[k];
    }
    int rc = tune_reps(cc, frames, t_out, cand, ms, nc, last, rounds);
    if (rc == VAE_OK) *best = tuned_pick(cc, cand, ms, nc);
    return rc;
}

/* The debug line of a timed decision: each candidate's time (the fastest two: their later rounds'
 * means, where those ran) and the path taken. */
static void tune_log(const conv_call *cc, int n_in, const int *cand, const float *ms, int nc,
                     int rounds, int path) {
    char msg[256];
    int len = 0;
    for (int k = 0; k < nc && len < (int)sizeof msg; k++)
        len += snprintf(msg + len, sizeof msg - (size_t)len, "%s%s %.3f ms", k ? ", " : "",
                        path_names[cand[k]], ms[k]);
    if (rounds && len < (int)sizeof msg)
        snprintf(msg + len, sizeof msg - (size_t)len, " (the two fastest: %d more rounds)", rounds);
    VAE_DEBUG("%s: %d frames %dx%d: %s -> %s", cc->op->name, n_in, cc->h, cc->w, msg,
              path_names[path]);
}

/* A temporal conv: the path measured fastest for this shape (timed on first sight, or taken
 * from the tune cache of an earlier process). */
int cu_conv_run_tuned(conv_call *cc, const void *const *frames, int n_in, int t_out, int consec) {
    conv_state *s = cc->s;
    for (int i = 0; i < s->n_tune; i++)
        if (s->tune[i].n_in == n_in && s->tune[i].h == cc->h && s->tune[i].w == cc->w) {
            int path = s->tune[i].path;
            if (path_too_big(cc, path, consec)) path = PATH_3D;
            if ((path == PATH_3D || path == PATH_3DPAD) && !cu_conv_pads_even(cc->op))
                path = PATH_BLOCKS;
            if ((path == PATH_3D || path == PATH_IGEMM || path == PATH_HALO) && !consec) {
                path = s->cp ? PATH_3DPAD : PATH_BLOCKS;
                VAE_DEBUG("%s: %d frames %dx%d: not consecutive, %s", cc->op->name, n_in, cc->h,
                          cc->w, path_names[path]);
            }
            return cu_conv_run_path(cc, frames, t_out, path);
        }
    const int igemm = cu_conv_igemm_ok(cc, consec), halo = cu_conv_halo_ok(cc, consec);
    if (halo && cc->cb->halo == 2) return cu_conv_run_path(cc, frames, t_out, PATH_HALO);
    if (igemm && cc->cb->igemm == 2) return cu_conv_run_path(cc, frames, t_out, PATH_IGEMM);
    if (cc->cb->igemm == 2 && cu_conv_igemm_padded_ok(cc)) /* the kernels on the padded window */
        return cu_conv_run_path(cc, frames, t_out, PATH_3DPAD);
    int cand[N_PATHS], nc = 0;
    const int even = cu_conv_pads_even(cc->op); /* else no 3-D candidates (cuDNN's: even) */
    if (consec && !s->no3d && even) cand[nc++] = PATH_3D;
    if (s->cp && even && !path_too_big(cc, PATH_3DPAD, consec)) cand[nc++] = PATH_3DPAD;
    if (!path_too_big(cc, PATH_BLOCKS, consec)) cand[nc++] = PATH_BLOCKS;
    if (igemm) cand[nc++] = PATH_IGEMM; /* last: untimed choices keep cuDNN's 3-D path first */
    if (halo) cand[nc++] = PATH_HALO;
    nc = fitting_paths(cc, cand, nc);
    /* every run rewrites y completely, except an in-place residual (y = bias + y up front); a
     * shape first seen while recording a graph is measured on a later plain call */
    if (nc == 1 || !cc->cb->tune || cc->init_done || s->n_tune == CONV_TUNE_MAX ||
        cc->cb->recording)
        return cu_conv_run_path(cc, frames, t_out, cand[0]);
    float ms[N_PATHS] = {0};
    int best = -1, last = -1, rounds = 0; /* last: the path whose run made y last */
    char key[256];
    tune_key(cc, n_in, cand, nc, key, sizeof key);
    const int cached = cc->cb->tune_seed ? -1 : cu_tune_lookup(cc->cb, key);
    for (int k = 0; k < nc; k++)
        if (cand[k] == cached) best = k; /* chosen by an earlier process (a path offered here) */
    const int from_cache = best >= 0;
    if (!from_cache && cc->cb->tune_seed) {
        best = (int)(cu_conv_seed_hash(cc->cb->tune_seed, cc->op->name, n_in, cc->h, cc->w) %
                     (uint64_t)nc);
    } else if (!from_cache) {
        cc->cb->tuning++;
        int rc = time_candidates(cc, frames, t_out, cand, nc, ms, &rounds, &last, &best);
        cc->cb->tuning--;
        if (rc) return rc;
    }
    const int path = best >= 0 ? cand[best] : PATH_BLOCKS;
    const int timed = !from_cache && !cc->cb->tune_seed;
    if (path != last || !timed) { /* y from the chosen path (unless its timing run made it) */
        int rc = cu_conv_run_path(cc, frames, t_out, path);
        if (rc) return rc;
    }
    if (from_cache)
        VAE_DEBUG("%s: %d frames %dx%d: from the tune cache -> %s", cc->op->name, n_in, cc->h,
                  cc->w, path_names[path]);
    else
        tune_log(cc, n_in, cand, ms, nc, rounds, path);
    if (timed) cu_tune_store(cc->cb, key, path);
    s->tune[s->n_tune++] = (conv_tune){n_in, cc->h, cc->w, path};
    if (n_in >= s->main_nin) s->main_nin = n_in, s->main_path = path;
    cu_conv_trim_tuned(cc->cb, cc->op, s);
    return VAE_OK;
}
