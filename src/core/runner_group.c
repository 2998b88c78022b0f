/* runner_group.c -- one plan on several runners at once, one host thread each (runner.h).
 *
 * Exact tiles are independent once A's output is known: each runner (a device) computes A over
 * the whole video itself (latent resolution: a few percent of the work, and nothing to send),
 * then its share of B's tiles (tile i to runner i % n), each with its own halo and caches, as a
 * runner alone would. What the tiles produce lands in host memory every device can write: B's
 * store when C follows (an encoder's middle and head: runner 0 runs it once every tile is in),
 * else the output assembly, handed out at the end; or, when the caller's output is a device
 * tensor that every runner's device reaches (its own, or a peer's), each writes its tiles there in
 * place. Nothing is exchanged between devices while they compute, so the result equals the
 * single-device tiled run bit for bit.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "runner_internal.h"

typedef struct lane {
    run s;
    store *sb;      /* the shared store of B's output, or NULL (output to the assembly) */
    atomic_int *first_failed;
    int rc;
    char err[1024]; /* its failure's message (vae_last_error is per thread) */
    pthread_t th;
    int started;
} lane;

/* One runner's share: executors, A, its tiles; its device's queued copies into host memory are
 * finished before another thread reads them. */
static void lane_work(lane *l) {
    run *s = &l->s;
    vae_backend *be = s->r->be;
    int rc = be->v->bind ? be->v->bind(be) : VAE_OK;
    if (rc == VAE_OK) rc = runner_prepare(s->r, s->plan);
    if (rc == VAE_OK)
        rc = s->plan->kind == VAE_PLAN_TILED ? runner_run_tiles(s, l->sb) : runner_run_blend(s);
    if (rc == VAE_OK) rc = be->v->sync(be);
    l->rc = rc;
    if (rc == VAE_OK) return;
    runner_drain(s);
    snprintf(l->err, sizeof l->err, "%s", vae_last_error());
    int none = -1;
    atomic_compare_exchange_strong(l->first_failed, &none, s->rank);
    atomic_store(&s->sh->stop, 1);
}

static void *lane_main(void *arg) {
    lane_work(arg);
    return NULL;
}

/* The lanes' work on their threads (runner 0 on the caller's); the first failure's code. */
static int run_lanes(lane *ln, int n, atomic_int *first_failed) {
    int rc = VAE_OK;
    for (int k = 1; k < n && rc == VAE_OK; k++) {
        ln[k].started = pthread_create(&ln[k].th, NULL, lane_main, &ln[k]) == 0;
        if (!ln[k].started) {
            rc = vae_fail(VAE_ENOMEM, "cannot start a thread for device %d of the group", k);
            atomic_store(&ln[0].s.sh->stop, 1);
        }
    }
    if (rc == VAE_OK) lane_work(&ln[0]);
    for (int k = 1; k < n; k++)
        if (ln[k].started) pthread_join(ln[k].th, NULL);
    if (rc) return rc;
    const int f = atomic_load(first_failed);
    if (f < 0) return VAE_OK;
    return vae_fail(ln[f].rc, "%s%s", f ? "(another device of the group) " : "", ln[f].err);
}

int vae_runner_run_group(vae_runner *const *rs, int n, const vae_plan *plan, const vae_run_io *io,
                         int *emitted) {
    *emitted = 0;
    if (n > plan->n_tiles) n = plan->n_tiles; /* a runner without a tile would only repeat A */
    if (n <= 1 || plan->kind == VAE_PLAN_WHOLE) return vae_runner_run(rs[0], plan, io, emitted);
    const int with_c = plan->kind == VAE_PLAN_TILED && plan->part[2].to > plan->part[2].from;
    if (io->in_view || (with_c && !plan->store_host[1]))
        return vae_fail(VAE_EINVAL, "internal: a device group reads its input and keeps B's "
                                    "store on the host");
    if (io->out_view && !rs[0]->be->v->view_export)
        return vae_fail(VAE_EUNSUPPORTED, "the %s backend cannot use tensors in device memory",
                        rs[0]->be->v->name);
    lane *ln = vae_calloc((size_t)n, sizeof *ln);
    run_shared sh;
    atomic_init(&sh.done, 0);
    atomic_init(&sh.stop, 0);
    atomic_int first_failed;
    atomic_init(&first_failed, -1);
    if (!ln) return vae_fail(VAE_ENOMEM, "out of memory");
    pthread_mutex_init(&sh.mu, NULL);
    /* the lanes' output: the shared store, the caller's device tensor in place (tiles without
     * C, when every lane's device reaches it), or one host assembly */
    int in_place = io->out_view && !with_c && plan->kind == VAE_PLAN_TILED;
    for (int k = 0; k < n && in_place; k++)
        in_place = rs[k]->be->v->view_reach && rs[k]->be->v->view_reach(rs[k]->be, io->out_view);
    vae_run_io lio = *io;
    lio.emit = NULL;
    lio.out_view = in_place ? io->out_view : NULL;
    store sb = {0};
    vae_assembly *out = NULL;
    int rc = runner_prepare(rs[0], plan);
    const int64_t total = rc ? 0 : runner_plan_steps(rs[0], plan, n);
    for (int k = 0; k < n; k++) {
        ln[k].s = (run){.r = rs[k], .plan = plan, .io = &lio, .total = total, .rank = k,
                        .world = n, .sh = &sh};
        ln[k].sb = with_c ? &sb : NULL;
        ln[k].first_failed = &first_failed;
    }
    if (rc == VAE_OK && with_c) rc = runner_store_open(&ln[0].s, &sb, 1);
    if (rc == VAE_OK && !with_c && !in_place)
        rc = vae_assembly_open(&out, plan, (int64_t)rs[0]->set.exec_host_mb << 20, &rs[0]->out_mem);
    for (int k = 0; k < n; k++)
        ln[k].s.out = out;
    if (rc == VAE_OK) rc = run_lanes(ln, n, &first_failed);
    run *s0 = &ln[0].s;
    s0->io = io; /* runner 0 hands the output to the caller */
    if (rc == VAE_OK && with_c) rc = runner_run_c(s0, &sb);
    if (rc == VAE_OK && out)
        rc = io->out_view ? vae_assembly_emit(out, runner_emit_to_view, s0, &s0->emitted)
                          : vae_assembly_emit(out, io->emit, io->emit_user, &s0->emitted);
    if (rc) runner_drain(s0);
    *emitted = io->out_view ? 0 : s0->emitted;
    runner_store_close(s0, &sb);
    vae_assembly_free(out);
    pthread_mutex_destroy(&sh.mu);
    vae_free(ln);
    return rc;
}
