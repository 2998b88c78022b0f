/* session_group.c -- a session as one rank of a group of processes (vae_session_options.world;
 * api.h): joining the group, agreeing on each call's plan, running the rank's share.
 *
 * The ranks only exchange what a collective call of every rank carries: at creation the join
 * (NCCL's, or on the CPU comm_threads.c's registry, whose ranks are threads of one process:
 * it waits for every rank, at most VAE_GROUP_TIMEOUT seconds);
 * in each call the budget (the least memory any rank has), then the plan's signature (a plan
 * that differs between ranks, or that one rank could not make, fails on every rank before any
 * work), then the run (runner_rank.c). A failure inside the run stops the communicator (the
 * others stop at their next exchange instead of waiting for the failed rank); the group is then
 * unusable, and the sessions must be made again with a new id.
 */
#include <string.h>

#include "api/api.h"
#include "core/comm.h"
#include "core/comm_host.h"

int vae_group_id_create(vae_device device, vae_group_id *id) {
    vae_error_clear();
    if (!id) return vae_fail(VAE_EINVAL, "vae_group_id_create: NULL id");
    if (device == VAE_DEVICE_CPU) {
        vae_comm_threads_new_id(id->bytes);
        return VAE_OK;
    }
#ifdef VAE_HAVE_CUDA
    if (device == VAE_DEVICE_CUDA) return vae_cuda_group_id_create(id->bytes);
#endif
    return vae_fail(VAE_EUNSUPPORTED, "vae_group_id_create: device %d: not in this build",
                    (int)device);
}

int vae_session_group_join(vae_session *s) {
    const vae_session_options *o = &s->opts;
    vae_backend *be = s->be;
    const int threads_id = vae_comm_threads_id(o->group_id.bytes);
    int rc;
    if (be->host_memory)
        rc = vae_comm_threads_join(o->group_id.bytes, o->rank, o->world, s->set.group_timeout_s,
                                   &s->comm);
    else if (threads_id)
        rc = vae_fail(VAE_EINVAL,
                      "group_id: made for CPU sessions; a %s session joins a group "
                      "with an id from vae_group_id_create on its device",
                      be->v->name);
    else if (be->v->comm_join)
        rc = be->v->comm_join(be, o->group_id.bytes, o->rank, o->world, &s->comm);
    else
        rc = vae_fail(VAE_EUNSUPPORTED, "the %s backend cannot join a group of processes",
                      be->v->name);
    if (rc == VAE_OK) { /* share()'s staging, kept until leave (which frees it on failure too) */
        s->comm->cancel = &s->cancel; /* vae_session_cancel stops a wait for a missing rank */
        vae_comm_host_init(&s->group_stage, s->comm, be);
        rc = vae_comm_host_reserve(&s->group_stage, (size_t)o->world * sizeof(double));
        if (rc) s->comm->v->abort(s->comm); /* the others stop at their first exchange */
    }
    if (rc == VAE_OK)
        VAE_INFO("session: rank %d of a group of %d processes (%s)", o->rank, o->world,
                 s->comm->v->name);
    return rc;
}

void vae_session_group_leave(vae_session *s) {
    vae_comm_host_free(&s->group_stage); /* (zeros when the join did not get that far) */
    if (s->comm) s->comm->v->destroy(s->comm);
    s->comm = NULL;
}

/* 52 bits of FNV-1a over the ints that make a plan (exact in a double) */
typedef struct sig {
    uint64_t h;
} sig;

static void sig_add(sig *g, int64_t v) {
    for (int b = 0; b < 8; b++, v >>= 8) {
        g->h ^= (uint64_t)(v & 0xff);
        g->h *= 1099511628211ull;
    }
}

static void sig_span(sig *g, vae_span s) {
    sig_add(g, s.lo);
    sig_add(g, s.hi);
}

static double plan_signature(const vae_session *s, const vae_plan *pl) {
    sig g = {14695981039346656037ull};
    const int64_t head[] = {
        pl->kind,     pl->encode,   pl->t_in,          pl->h_in,          pl->w_in,
        pl->t_out,    pl->h_out,    pl->w_out,         pl->c_out,         pl->n_tiles,
        pl->reduce,   pl->a_shared, pl->store_host[0], pl->store_host[1], s->opts.group_output,
        s->opts.dtype};
    for (size_t i = 0; i < sizeof head / sizeof *head; i++)
        sig_add(&g, head[i]);
    for (int k = 0; k < 3; k++) {
        const vae_plan_part *p = &pl->part[k];
        sig_add(&g, p->from), sig_add(&g, p->to), sig_add(&g, p->first), sig_add(&g, p->chunk);
    }
    for (int i = 0; pl->kind != VAE_PLAN_WHOLE && i < pl->n_tiles; i++) {
        const vae_plan_tile *t = &pl->tiles[i];
        sig_span(&g, t->in_y), sig_span(&g, t->in_x), sig_span(&g, t->own_y);
        sig_span(&g, t->own_x);
    }
    return (double)(g.h >> 12);
}

/* v[0 .. world) <- every rank's x (summed: the others' slots are zero) */
static int share(vae_session *s, double x, double *v) {
    const size_t world = (size_t)s->comm->size;
    double *buf = s->group_stage.host; /* (reserved for world doubles by the join) */
    memset(buf, 0, world * sizeof *v);
    buf[s->comm->rank] = x;
    const int rc = vae_comm_host_allreduce(&s->group_stage, world);
    if (rc == VAE_OK) memcpy(v, buf, world * sizeof *v);
    return rc;
}

int vae_session_group_plan(vae_session *s, int encode, const vae_io_view *g, vae_plan *plan) {
    const int world = s->comm->size;
    memset(plan, 0, sizeof *plan); /* (freed by the caller, made or not) */
    if (s->group_stopped)
        return vae_fail(VAE_EINTERRUPTED,
                        "rank %d: an earlier call stopped this group of "
                        "processes; make the sessions again with a new group id",
                        s->comm->rank);
    double *v = vae_calloc((size_t)world, sizeof *v);
    if (!v) return vae_fail(VAE_ENOMEM, "out of memory");
    vae_session_mem mem;
    const int mrc = vae_session_mem_info(s, encode, &mem);
    int rc = share(s, mrc ? 0.0 : (double)mem.avail, v); /* every rank shares (0: unknown) */
    int64_t least = 0; /* the plan's budget base: the least any rank has available */
    for (int k = 0; rc == VAE_OK && k < world; k++)
        if (v[k] > 0 && (least == 0 || (int64_t)v[k] < least)) least = (int64_t)v[k];
    if (least > 0) mem.avail = least;
    int prc = mrc ? mrc : rc ? rc : vae_session_plan_for(s, encode, g, &mem, plan);
    const double mine = prc == VAE_OK ? plan_signature(s, plan) : -1;
    if (rc == VAE_OK) rc = share(s, mine, v);
    if (rc) { /* an exchange failed (another rank stopped the group) or could not start */
        s->comm->v->abort(s->comm);
        s->group_stopped = 1;
    }
    for (int k = 0; rc == VAE_OK && prc == VAE_OK && k < world; k++)
        if (v[k] != mine)
            rc = vae_fail(v[k] < 0 ? VAE_ENOMEM : VAE_EINVAL,
                          v[k] < 0 ? "rank %d of the group found no plan for this call (rank %d "
                                     "did)"
                                   : "rank %d of the group made another plan than rank %d: give "
                                     "every rank the same model, options and input",
                          k, s->comm->rank);
    vae_free(v);
    return prc ? prc : rc;
}

int vae_session_group_run(vae_session *s, vae_runner *r, const vae_plan *plan, const vae_run_io *io,
                          int *emitted) {
    const int rc = vae_runner_run_rank(r, plan, io, s->comm, s->opts.group_output, emitted);
    if (rc != VAE_OK) { /* the others stop at their next exchange instead of waiting for it */
        s->comm->v->abort(s->comm);
        s->group_stopped = 1;
    }
    return rc;
}
