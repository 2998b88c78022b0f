/* cuda_comm_nccl.c -- the communicator of comm.h over NCCL, for the CUDA lanes of one process
 * (backend.h comm_create): one rank per lane, its buffers in the lane's device memory, its work
 * queued on the lane's stream, so that a band's GroupNorm sums are added up between two kernels
 * with no host waiting (the GPU waits for its peer instead).
 *
 * NCCL is loaded when a group first asks for it (dlopen: the library found at build time, then
 * libnccl.so.2 from the loader's path), so that libvae runs where it is absent: comm_create then
 * says VAE_EUNSUPPORTED with no error left, and the group takes comm_threads.c. The comms come
 * from ncclCommInitAll over the lanes' devices (each device once) and are warmed up with one
 * all-reduce, so that later calls only queue work.
 *
 * abort: the first rank that fails marks the group, waits (at most ABORT_WAIT_S) until no rank is
 * inside an NCCL call, and aborts every comm: ranks waiting on their stream for the failed one
 * come free (their NCCL kernels end), and every later call returns VAE_EINTERRUPTED.
 */
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/ops/cuda_ops.h"
#include "core/comm.h"
#include "platform/platform.h" /* pthreads, loading NCCL */

#ifdef VAE_HAVE_NCCL
#include <nccl.h>

#ifndef VAE_NCCL_LIB
#define VAE_NCCL_LIB "libnccl.so.2"
#endif
#define ABORT_WAIT_S 2.0

typedef struct nccl_api {
    ncclResult_t (*init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*abort)(ncclComm_t);
    ncclResult_t (*destroy)(ncclComm_t);
    const char *(*error_string)(ncclResult_t);
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*init_rank)(ncclComm_t *, int, ncclUniqueId, int);
} nccl_api;

static nccl_api api;
static int api_ok;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void api_load(void) {
    void *lib = vae_plat_lib_open(VAE_NCCL_LIB);
    if (!lib) lib = vae_plat_lib_open("libnccl.so.2");
    if (!lib) return;
    void **fn[] = {
        (void **)&api.init_all,      (void **)&api.all_reduce,  (void **)&api.send,
        (void **)&api.recv,          (void **)&api.group_start, (void **)&api.group_end,
        (void **)&api.abort,         (void **)&api.destroy,     (void **)&api.error_string,
        (void **)&api.get_unique_id, (void **)&api.init_rank};
    static const char *const names[] = {"ncclCommInitAll", "ncclAllReduce",   "ncclSend",
                                        "ncclRecv",        "ncclGroupStart",  "ncclGroupEnd",
                                        "ncclCommAbort",   "ncclCommDestroy", "ncclGetErrorString",
                                        "ncclGetUniqueId", "ncclCommInitRank"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!(*fn[k] = vae_plat_lib_sym(lib, names[k]))) return; /* the library stays loaded, unused */
    api_ok = 1;
}

typedef struct ngroup {
    int size;
    ncclComm_t comm[VAE_MAX_DEVICES];
    atomic_int aborted_by; /* -1, or the rank that aborted */
    atomic_int busy;       /* ranks inside an NCCL call now */
    atomic_int handles;
} ngroup;

typedef struct nrank {
    vae_comm base;
    ngroup *g;
    cuda_backend *cb;
    double *one; /* a device double: barriers, the warm-up */
    int slot;    /* its comm: g->comm[slot] (a rank of another process is not in g) */
} nrank;

static nrank *rank_of(vae_comm *c) {
    return (nrank *)c;
}

static int nccl_fail(ncclResult_t r, const char *what) {
    return vae_fail(VAE_EDEVICE, "nccl: %s: %s", what, api.error_string(r));
}

/* an NCCL call may start (and *must* be followed by leave) unless the group was aborted */
static int enter(ngroup *g) {
    atomic_fetch_add(&g->busy, 1);
    if (atomic_load(&g->aborted_by) < 0) return VAE_OK;
    atomic_fetch_sub(&g->busy, 1);
    return vae_fail(VAE_EINTERRUPTED, "comm: rank %d of the group stopped it",
                    atomic_load(&g->aborted_by));
}

static void leave(ngroup *g) {
    atomic_fetch_sub(&g->busy, 1);
}

static int nccl_allreduce_sum(vae_comm *c, double *buf, size_t n) {
    nrank *r = rank_of(c);
    int rc = enter(r->g);
    if (rc) return rc;
    ncclResult_t e =
        api.all_reduce(buf, buf, n, ncclFloat64, ncclSum, r->g->comm[r->slot], r->cb->stream);
    leave(r->g);
    return e == ncclSuccess ? VAE_OK : nccl_fail(e, "all-reduce");
}

static int nccl_sendrecv(vae_comm *c, const void *send, size_t send_bytes, int to, void *recv,
                         size_t recv_bytes, int from) {
    nrank *r = rank_of(c);
    if (to >= c->size || from >= c->size || to == c->rank || (from == c->rank && from >= 0))
        return vae_fail(VAE_EINVAL, "comm: rank %d sends to %d, receives from %d of %d", c->rank,
                        to, from, c->size);
    int rc = enter(r->g);
    if (rc) return rc;
    ncclComm_t comm = r->g->comm[r->slot];
    ncclResult_t e = api.group_start();
    if (e == ncclSuccess && to >= 0)
        e = api.send(send, send_bytes, ncclUint8, to, comm, r->cb->stream);
    if (e == ncclSuccess && from >= 0)
        e = api.recv(recv, recv_bytes, ncclUint8, from, comm, r->cb->stream);
    const ncclResult_t e2 = api.group_end();
    leave(r->g);
    if (e == ncclSuccess) e = e2;
    return e == ncclSuccess ? VAE_OK : nccl_fail(e, "send/receive");
}

/* every other rank's part of each frame received, this rank's sent to each: one NCCL group of
 * sends and receives (parts are rows of channels-last frames: contiguous within a frame) */
static int nccl_allgather(vae_comm *c, void *buf, size_t frame_bytes, int frames,
                          const size_t *off) {
    nrank *r = rank_of(c);
    const int me = c->rank;
    int covered = off[0] == 0 && off[c->size] == frame_bytes;
    for (int k = 0; k < c->size; k++)
        covered = covered && off[k] <= off[k + 1];
    if (!covered)
        return vae_fail(VAE_EINVAL, "comm allgather: rank %d's parts do not cover a frame", me);
    int rc = enter(r->g);
    if (rc) return rc;
    ncclComm_t comm = r->g->comm[r->slot];
    char *b = buf;
    const size_t mine = off[me + 1] - off[me];
    ncclResult_t e = api.group_start();
    for (int f = 0; f < frames && e == ncclSuccess; f++)
        for (int k = 0; k < c->size && e == ncclSuccess; k++) {
            const size_t theirs = off[k + 1] - off[k];
            if (k == me) continue;
            if (mine)
                e = api.send(b + (size_t)f * frame_bytes + off[me], mine, ncclUint8, k, comm,
                             r->cb->stream);
            if (e == ncclSuccess && theirs)
                e = api.recv(b + (size_t)f * frame_bytes + off[k], theirs, ncclUint8, k, comm,
                             r->cb->stream);
        }
    const ncclResult_t e2 = api.group_end();
    leave(r->g);
    if (e == ncclSuccess) e = e2;
    return e == ncclSuccess ? VAE_OK : nccl_fail(e, "all-gather");
}

static int nccl_barrier(vae_comm *c) {
    nrank *r = rank_of(c);
    int rc = nccl_allreduce_sum(c, r->one, 1);
    return rc ? rc : r->cb->base.v->sync(&r->cb->base);
}

static void nccl_abort(vae_comm *c) {
    ngroup *g = rank_of(c)->g;
    int none = -1;
    if (!atomic_compare_exchange_strong(&g->aborted_by, &none, c->rank)) return;
    /* no rank is between enter and leave once this drains (they only queue work) */
    const double t0 = vae_seconds();
    while (atomic_load(&g->busy) > 0 && vae_seconds() - t0 < ABORT_WAIT_S)
        sched_yield();
    for (int k = 0; k < g->size; k++)
        if (g->comm[k]) api.abort(g->comm[k]);
}

static void nccl_destroy(vae_comm *c) {
    nrank *r = rank_of(c);
    ngroup *g = r->g;
    if (r->one) r->cb->base.v->release(&r->cb->base, r->one);
    vae_free(r);
    if (atomic_fetch_sub(&g->handles, 1) != 1) return;
    for (int k = 0; k < g->size && atomic_load(&g->aborted_by) < 0; k++)
        if (g->comm[k]) api.destroy(g->comm[k]);
    vae_free(g);
}

static const vae_comm_vtbl nccl_vtbl = {
    .name = "nccl",
    .allreduce_sum = nccl_allreduce_sum,
    .sendrecv = nccl_sendrecv,
    .allgather = nccl_allgather,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

/* One all-reduce on every comm from this thread (a group call), then every stream waited for:
 * the connections are made now, not inside a later call. */
static int warm_up(ngroup *g, nrank **rk, int n) {
    ncclResult_t e = api.group_start();
    for (int k = 0; k < n && e == ncclSuccess; k++) {
        int rc = rk[k]->cb->base.v->bind(&rk[k]->cb->base);
        if (rc) {
            api.group_end();
            return rc;
        }
        e = api.all_reduce(rk[k]->one, rk[k]->one, 1, ncclFloat64, ncclSum, g->comm[k],
                           rk[k]->cb->stream);
    }
    const ncclResult_t e2 = api.group_end();
    if (e == ncclSuccess) e = e2;
    if (e != ncclSuccess) return nccl_fail(e, "the first all-reduce");
    int rc = VAE_OK;
    for (int k = 0; k < n && rc == VAE_OK; k++)
        rc = rk[k]->cb->base.v->sync(&rk[k]->cb->base);
    return rc;
}

int cuda_comm_create(vae_backend *const *lanes, int n, vae_comm **ranks) {
    int devs[VAE_MAX_DEVICES];
    if (n < 2 || n > VAE_MAX_DEVICES) return VAE_EUNSUPPORTED;
    for (int k = 0; k < n; k++) {
        devs[k] = cu_be(lanes[k])->device;
        for (int j = 0; j < k; j++)
            if (devs[j] == devs[k]) return VAE_EUNSUPPORTED; /* NCCL: each device once */
    }
    pthread_once(&api_once, api_load);
    if (!api_ok) {
        VAE_DEBUG("nccl: not loaded (%s, libnccl.so.2): the group's threads exchange instead",
                  VAE_NCCL_LIB);
        return VAE_EUNSUPPORTED;
    }
    ngroup *g = vae_calloc(1, sizeof *g);
    nrank *rk[VAE_MAX_DEVICES] = {0};
    int rc = g ? VAE_OK : vae_fail(VAE_ENOMEM, "nccl: out of memory");
    for (int k = 0; k < n && rc == VAE_OK; k++) {
        rk[k] = vae_calloc(1, sizeof *rk[k]);
        if (!rk[k]) rc = vae_fail(VAE_ENOMEM, "nccl: out of memory");
        if (rc == VAE_OK && (rc = lanes[k]->v->bind(lanes[k])) == VAE_OK &&
            !(rk[k]->one = lanes[k]->v->alloc(lanes[k], sizeof(double))))
            rc = vae_fail(VAE_ENOMEM, "nccl: out of device memory");
        if (rc == VAE_OK) rc = lanes[k]->v->zero(lanes[k], rk[k]->one, sizeof(double));
        if (rc == VAE_OK) rk[k]->cb = cu_be(lanes[k]), rk[k]->g = g;
    }
    if (rc == VAE_OK) {
        g->size = n;
        atomic_init(&g->aborted_by, -1);
        atomic_init(&g->busy, 0);
        atomic_init(&g->handles, n);
        ncclResult_t e = api.init_all(g->comm, n, devs);
        rc = e == ncclSuccess ? warm_up(g, rk, n) : nccl_fail(e, "creating the communicators");
    }
    if (rc == VAE_OK) rc = lanes[0]->v->bind(lanes[0]); /* the caller runs lane 0 */
    if (rc) {
        for (int k = 0; g && k < n; k++)
            if (g->comm[k]) api.destroy(g->comm[k]);
        for (int k = 0; k < n; k++)
            if (rk[k] && rk[k]->one) lanes[k]->v->release(lanes[k], rk[k]->one);
        for (int k = 0; k < n; k++)
            vae_free(rk[k]);
        vae_free(g);
        return rc;
    }
    for (int k = 0; k < n; k++) {
        rk[k]->base = (vae_comm){&nccl_vtbl, k, n, 1, NULL}; /* NCCL waits are not cancellable yet */
        rk[k]->slot = k;
        ranks[k] = &rk[k]->base;
    }
    VAE_DEBUG("nccl: a communicator of %d GPUs for the group's GroupNorm sums", n);
    return VAE_OK;
}

/* ---- one rank of a group of processes (vae_session_options.world): its comm alone in its
 * ngroup (comm[rank]; the others' are in their processes), joined with the id rank 0 made */
static int nccl_loaded(void) {
    pthread_once(&api_once, api_load);
    if (api_ok) return VAE_OK;
    return vae_fail(VAE_EUNSUPPORTED,
                    "nccl: %s (or libnccl.so.2) does not load: groups of "
                    "processes on CUDA need NCCL",
                    VAE_NCCL_LIB);
}

int vae_cuda_group_id_create(unsigned char *id) {
    int rc = nccl_loaded();
    if (rc) return rc;
    ncclUniqueId u;
    ncclResult_t e = api.get_unique_id(&u);
    if (e != ncclSuccess) return nccl_fail(e, "making a group id");
    _Static_assert(sizeof u <= VAE_COMM_ID_BYTES, "ncclUniqueId fits a group id");
    memset(id, 0, VAE_COMM_ID_BYTES);
    memcpy(id, &u, sizeof u);
    return VAE_OK;
}

int cuda_comm_join(vae_backend *be, const unsigned char *id, int rank, int world, vae_comm **out) {
    int rc = nccl_loaded();
    if (rc) return rc;
    ngroup *g = vae_calloc(1, sizeof *g);
    nrank *r = vae_calloc(1, sizeof *r);
    if (!g || !r) rc = vae_fail(VAE_ENOMEM, "nccl: out of memory");
    if (rc == VAE_OK) rc = be->v->bind(be);
    if (rc == VAE_OK && !(r->one = be->v->alloc(be, sizeof(double))))
        rc = vae_fail(VAE_ENOMEM, "nccl: out of device memory");
    if (rc == VAE_OK) rc = be->v->zero(be, r->one, sizeof(double));
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclResult_t e = ncclSuccess;
    if (rc == VAE_OK && (e = api.init_rank(&g->comm[0], world, u, rank)) != ncclSuccess)
        rc = nccl_fail(e, "joining the group of processes");
    if (rc) {
        if (r && r->one) be->v->release(be, r->one);
        vae_free(r);
        vae_free(g);
        return rc;
    }
    g->size = 1; /* the comms it holds: this rank's, at comm[0] */
    atomic_init(&g->aborted_by, -1);
    atomic_init(&g->busy, 0);
    atomic_init(&g->handles, 1);
    r->cb = cu_be(be), r->g = g;
    r->base = (vae_comm){&nccl_vtbl, rank, world, 1, NULL};
    r->slot = 0;
    *out = &r->base;
    rc = nccl_barrier(&r->base); /* the connections made now, not inside a call */
    if (rc) nccl_destroy(&r->base);
    if (rc == VAE_OK) VAE_DEBUG("nccl: rank %d of a group of %d processes", rank, world);
    return rc;
}

#else /* built without NCCL's header */

int cuda_comm_create(vae_backend *const *lanes, int n, vae_comm **ranks) {
    (void)lanes, (void)n, (void)ranks;
    return VAE_EUNSUPPORTED;
}

int vae_cuda_group_id_create(unsigned char *id) {
    (void)id;
    return vae_fail(VAE_EUNSUPPORTED, "this build of vae has no NCCL: groups of processes on "
                                      "CUDA need it");
}

int cuda_comm_join(vae_backend *be, const unsigned char *id, int rank, int world, vae_comm **out) {
    (void)be, (void)id, (void)rank, (void)world, (void)out;
    return vae_cuda_group_id_create(NULL);
}

#endif
