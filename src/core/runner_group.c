/* runner_group.c -- one plan on several runners at once, one host thread each (runner.h).
 *
 * Exact tiles are independent once A's output is known: each runner (a device) computes A over
 * the whole video itself (latent resolution: a few percent of the work, and nothing to send),
 * then its share of B's tiles (tile i to runner i % n), each with its own halo and caches, as a
 * runner alone would. Or (plan a_shared: one column per device) runner 0 alone computes A into
 * a store in host memory and publishes each step's frames once its copies are done; the others
 * start their tiles at once, each reading a frame of A when it is there (A makes a latent frame
 * in a few ms, a tile takes tens of ms for it), and runner 0's tile is narrower by A's work, so
 * that no device computes anything twice (A was 15% of each device's time when each computed it).
 * What the tiles produce lands in host memory every device can write: B's store when C follows (an
 * encoder's middle and head: runner 0 runs it once every tile is in), else the output assembly,
 * handed out at the end; or, when the caller's output is a device tensor that every runner's device
 * reaches (its own, or a peer's), each writes its tiles there in place. Nothing is exchanged
 * between devices while they compute, so the result equals the single-device tiled run bit for bit.
 * Band plans (vae_plan.reduce: a B with GroupNorms, SeedVR2) are the exception: one row band per
 * device, whose GroupNorms sum the statistics of every band's own rows over a communicator
 * (comm.h: the backend's own, NCCL on CUDA, else the host threads of this group; kept in runner
 * 0 between calls) before they normalise; a failing band aborts it, so that no band waits for
 * it. Every band computes A, and a band encoder's C after the bands, each with the attention's
 * queries shared out over the communicator (exec_reduce.c); runner 0 hands C's output out. Their
 * result equals one device's up to the rounding of the sums.
 */
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "core.h"
#include "runner_internal.h"

typedef struct lane {
    run s;
    store *sa; /* the shared store of A's output (plan a_shared), or NULL (its own A) */
    store *sb; /* the shared store of B's output, or NULL (output to the assembly) */
    atomic_int *first_failed;
    int rc;
    char err[1024]; /* its failure's message (vae_last_error is per thread) */
    pthread_t th;
    int started;
    int c_phase;           /* band encoders' second phase: C on every lane (lane_share) */
    double prep_s, work_s; /* host seconds: preparing, then until its device was done */
    double c_s;            /* the second phase's */
} lane;

/* The lane's share of the call: A and its tiles; or, once every band is in B's store, a band
 * encoder's C (the middle and head), which every lane runs with its attention's queries shared
 * out (as bands do A), so that no GPU waits for the first one's attention; lane 0 hands the
 * output out, the others' is dropped. */
static int lane_share(lane *l) {
    run *s = &l->s;
    if (!l->c_phase)
        return s->plan->kind == VAE_PLAN_TILED ? runner_run_tiles(s, l->sa, l->sb)
                                               : runner_run_blend(s);
    vae_exec *pc = s->r->part[2].e;
    vae_exec_set_split(pc, s->comm);
    const int rc = runner_run_c(s, l->sb);
    vae_exec_set_split(pc, NULL);
    return rc;
}

/* One runner's share: executors, then lane_share; its device's queued copies into host memory
 * are finished before another thread reads them. */
static void lane_work(lane *l) {
    run *s = &l->s;
    vae_backend *be = s->r->be;
    const double t0 = vae_seconds();
    int rc = be->v->bind ? be->v->bind(be) : VAE_OK;
    if (rc == VAE_OK) rc = runner_prepare(s->r, s->plan);
    const double t1 = vae_seconds();
    if (rc == VAE_OK) rc = lane_share(l);
    if (rc == VAE_OK) rc = be->v->sync(be);
    if (l->c_phase)
        l->c_s = vae_seconds() - t0;
    else
        l->prep_s = t1 - t0, l->work_s = vae_seconds() - t1;
    l->rc = rc;
    if (rc == VAE_OK) return;
    runner_drain(s);
    snprintf(l->err, sizeof l->err, "%s", vae_last_error());
    int none = -1;
    atomic_compare_exchange_strong(l->first_failed, &none, s->rank);
    if (s->comm) s->comm->v->abort(s->comm); /* wakes the bands waiting for its sums */
    pthread_mutex_lock(&s->sh->mu); /* wakes the runners waiting for A's frames */
    atomic_store(&s->sh->stop, 1);
    pthread_cond_broadcast(&s->sh->filled);
    pthread_mutex_unlock(&s->sh->mu);
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

/* -v: each lane's time (A, its tiles, a band encoder's C, the host's share of the output) */
static void lanes_log(const lane *ln, int n, int a_shared, double lanes_s) {
    for (int k = 0; k < n; k++) {
        char a[64], c[64] = "";
        if (a_shared && k > 0)
            snprintf(a, sizeof a, "A from device 0");
        else
            snprintf(a, sizeof a, "A done at %.0f ms", ln[k].s.a_s * 1e3);
        if (ln[k].c_phase) snprintf(c, sizeof c, ", then C in %.0f ms", ln[k].c_s * 1e3);
        VAE_INFO("group: device %d: prepared in %.0f ms, %s, its tiles at %.0f ms (of the lanes' "
                 "%.0f ms)%s; host time on the output: %.0f ms waiting for downloads, %.0f ms "
                 "assembling tiles",
                 k, ln[k].prep_s * 1e3, a, ln[k].work_s * 1e3, lanes_s * 1e3, c,
                 ln[k].s.wait_s * 1e3, ln[k].s.put_s * 1e3);
    }
}

/* A band plan's communicator, kept in runner 0 between calls: the backend's own (NCCL: sums
 * added on the devices) where settings.comm allows and it can be made, else the group's threads
 * (sums in host memory). */
static int group_comm(vae_runner *const *rs, int n) {
    vae_runner *r0 = rs[0];
    if (r0->comm_n == n) return VAE_OK;
    runner_comm_drop(r0);
    vae_backend *lanes[VAE_MAX_DEVICES];
    for (int k = 0; k < n; k++)
        lanes[k] = rs[k]->be;
    int rc = VAE_EUNSUPPORTED;
    if (r0->set.comm && lanes[0]->v->comm_create) {
        rc = lanes[0]->v->comm_create(lanes, n, r0->comm);
        if (rc != VAE_OK && rc != VAE_EUNSUPPORTED)
            VAE_INFO("group: the %s backend's communicator failed (%s); the group's threads add "
                     "up its sums instead",
                     lanes[0]->v->name, vae_last_error());
        if (rc != VAE_OK) vae_error_clear(); /* an expected way round: nothing left behind */
    }
    if (rc != VAE_OK) rc = vae_comm_threads_create(n, r0->comm);
    if (rc == VAE_OK) r0->comm_n = n;
    return rc;
}

int vae_runner_run_group(vae_runner *const *rs, int n, const vae_plan *plan, const vae_run_io *io,
                         int *emitted) {
    *emitted = 0;
    if (n > plan->n_tiles) n = plan->n_tiles; /* a runner without a tile would only repeat A */
    if (n <= 1 || plan->kind == VAE_PLAN_WHOLE) return vae_runner_run(rs[0], plan, io, emitted);
    const int with_c = plan->kind == VAE_PLAN_TILED && plan->part[2].to > plan->part[2].from;
    if (io->in_view || (with_c && !plan->store_host[1]) || (plan->a_shared && !plan->store_host[0]))
        return vae_fail(VAE_EINVAL, "internal: a device group reads its input and keeps B's "
                                    "store (and a shared A's) on the host");
    if (io->out_view && !rs[0]->be->v->view_export)
        return vae_fail(VAE_EUNSUPPORTED, "the %s backend cannot use tensors in device memory",
                        rs[0]->be->v->name);
    if (plan->reduce && (n != plan->n_tiles || n > VAE_MAX_DEVICES))
        return vae_fail(VAE_EINVAL, "internal: %d row bands on %d devices", plan->n_tiles, n);
    lane *ln = vae_calloc((size_t)n, sizeof *ln);
    run_shared sh;
    atomic_init(&sh.done, 0);
    atomic_init(&sh.stop, 0);
    atomic_init(&sh.a_frames, 0);
    atomic_int first_failed;
    atomic_init(&first_failed, -1);
    if (!ln) return vae_fail(VAE_ENOMEM, "out of memory");
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.filled, NULL);
    /* the lanes' output: the shared store, the caller's device tensor in place (tiles without
     * C, when every lane's device reaches it), or one host assembly */
    int in_place = io->out_view && !with_c && plan->kind == VAE_PLAN_TILED;
    for (int k = 0; k < n && in_place; k++)
        in_place = rs[k]->be->v->view_reach && rs[k]->be->v->view_reach(rs[k]->be, io->out_view);
    vae_run_io lio = *io;
    lio.emit = NULL;
    lio.out_view = in_place ? io->out_view : NULL;
    store sa = {0}, sb = {0};
    vae_assembly *out = NULL;
    int rc = runner_prepare(rs[0], plan);
    const int64_t total = rc ? 0 : runner_plan_steps(rs[0], plan, n);
    for (int k = 0; k < n; k++) {
        ln[k].s = (run){
            .r = rs[k], .plan = plan, .io = &lio, .total = total, .rank = k, .world = n, .sh = &sh};
        ln[k].sa = plan->a_shared ? &sa : NULL;
        ln[k].sb = with_c ? &sb : NULL;
        ln[k].first_failed = &first_failed;
    }
    if (rc == VAE_OK && plan->reduce) rc = group_comm(rs, n); /* bands: their sums */
    for (int k = 0; k < n && plan->reduce && rc == VAE_OK; k++)
        ln[k].s.comm = rs[0]->comm[k];
    if (rc == VAE_OK && with_c) rc = runner_store_open(&ln[0].s, &sb, 1);
    if (rc == VAE_OK && plan->a_shared) { /* runner 0 fills it, the others read as it fills */
        rc = runner_store_open(&ln[0].s, &sa, 0);
        sa.ready = &sh.a_frames;
    }
    if (rc == VAE_OK && !with_c && !in_place)
        rc = vae_assembly_open(&out, plan, (int64_t)rs[0]->set.exec_host_mb << 20, &rs[0]->out_mem);
    for (int k = 0; k < n; k++)
        ln[k].s.out = out;
    const double t0 = vae_seconds();
    if (rc == VAE_OK) rc = run_lanes(ln, n, &first_failed);
    const double t1 = vae_seconds();
    run *s0 = &ln[0].s;
    s0->io = io; /* runner 0 hands the output to the caller */
    if (rc == VAE_OK && with_c && plan->reduce) { /* band encoders: C on every lane */
        for (int k = 0; k < n; k++)
            ln[k].c_phase = 1;
        rc = run_lanes(ln, n, &first_failed);
    } else if (rc == VAE_OK && with_c) {
        rc = runner_run_c(s0, &sb);
    }
    if (rc == VAE_OK && out) rc = runner_emit_assembled(s0, out, plan->t_out);
    if (rc) runner_drain(s0);
    if (rc == VAE_OK) lanes_log(ln, n, plan->a_shared, t1 - t0);
    if (rc == VAE_OK)
        VAE_INFO("group: C and the output handed out in %.0f ms", (vae_seconds() - t1) * 1e3);
    *emitted = io->out_view ? 0 : s0->emitted;
    for (int k = 0; k < n; k++)
        runner_store_rings_free(&ln[k].s);
    runner_store_close(s0, &sb);
    runner_store_close(s0, &sa);
    vae_assembly_free(out);
    if (rc && plan->reduce) runner_comm_drop(rs[0]); /* maybe aborted: a new one next time */
    pthread_cond_destroy(&sh.filled);
    pthread_mutex_destroy(&sh.mu);
    vae_free(ln);
    return rc;
}
