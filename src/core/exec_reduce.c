/* exec_reduce.c -- the collective ops of a band plan (comm.h).
 * - Its GroupNorms (vae_exec_set_reduce): the band's count, sum and sum of squares over the rows
 *   it owns, all-reduced over the group, then every row it holds normalised with the group's
 *   statistics (the halo rows too: they are exact where the band computes them, and the later
 *   ops read them).
 * - The attention of A, which every rank computes whole (vae_exec_set_split): each rank computes
 *   its share of the queries' rows, then all-gathers the others' (SeedVR2 1080p: 0.29 s of A's
 *   0.39 s was the attention, repeated on every GPU). */
#include "comm.h"
#include "core.h"
#include "exec_internal.h"

int vae_exec_set_reduce(vae_exec *e, vae_comm *comm, const vae_exec_norm *norms, int n) {
    if (comm && (!e->be->v->norm_stats || !e->be->v->norm_apply))
        return vae_fail(VAE_EUNSUPPORTED, "executor: backend %s cannot split a group norm",
                        e->be->v->name);
    for (int j = 0; comm && j < n; j++)
        if (norms[j].op < 0 || norms[j].op >= e->p->n_ops ||
            !vae_op_is_reducible(&e->p->ops[norms[j].op]) || norms[j].rows < 0 || norms[j].n < 1)
            return vae_fail(VAE_EINVAL, "executor: band norm %d (op %d) is not a group norm", j,
                            norms[j].op);
    if (comm != e->comm) exec_reduce_release(e); /* another kind of buffer, maybe */
    e->comm = comm;
    e->norms = comm ? norms : NULL;
    e->n_norms = comm ? n : 0;
    if (comm)
        VAE_DEBUG("executor: rank %d of %d: %d group norms over its band's rows, all-reduced",
                  comm->rank, comm->size, n);
    return VAE_OK;
}

static const vae_exec_norm *norm_of(const vae_exec *e, int i) {
    for (int j = 0; j < e->n_norms; j++)
        if (e->norms[j].op == i) return &e->norms[j];
    return NULL;
}

/* the sums' buffer: host memory, or a backend buffer for a device communicator; at least
 * SUMS_MIN doubles (64 frames of 32 groups), so that it is made once, on a stream's first
 * GroupNorm, not again inside a step a graph records */
enum { SUMS_MIN = 64 * 32 * 3 };
static int sums_reserve(vae_exec *e, size_t n, const char *who) {
    if (n <= e->sums_cap && (e->sums_dev != NULL) == e->comm->device_buffers) return VAE_OK;
    exec_reduce_release(e);
    if (n < SUMS_MIN) n = SUMS_MIN;
    if (e->comm->device_buffers)
        e->sums_dev = e->be->v->alloc(e->be, n * sizeof(double));
    else
        e->sums = vae_malloc(n * sizeof(double));
    if (!e->sums && !e->sums_dev) return vae_fail(VAE_ENOMEM, "out of memory for %s's sums", who);
    e->sums_cap = n;
    return VAE_OK;
}

void exec_reduce_release(vae_exec *e) {
    vae_free(e->sums);
    if (e->sums_dev) e->be->v->release(e->be, e->sums_dev);
    e->sums = NULL, e->sums_dev = NULL, e->sums_cap = 0;
}

int exec_norm_reduced(vae_exec *e, int i, const value *x, value *y) {
    const vae_op *op = &e->p->ops[i];
    vae_backend *be = e->be;
    const vae_exec_norm *nm = norm_of(e, i);
    if (!nm || nm->y0 < 0 || nm->y0 + nm->rows > x->h)
        return vae_fail(VAE_EINVAL, "internal: %s: no band rows for its input of %d rows", op->name,
                        x->h);
    const size_t n = (size_t)x->t * op->groups * 3;
    int rc = sums_reserve(e, n, op->name);
    if (rc) return rc;
    const int dev = e->comm->device_buffers;
    double *st = dev ? e->sums_dev : e->sums;
    rc = be->v->norm_stats(be, op, x->buf, x->t, x->h, x->w, nm->y0, nm->rows, st, dev);
    if (rc == VAE_OK) rc = e->comm->v->allreduce_sum(e->comm, st, n);
    if (rc) return rc;
    /* the bands' rows partition the frame: every pixel counted once (on the host: where the
     * sums are in device memory, the planner's partition stands unchecked here) */
    const double count = (double)(op->c_in / op->groups) * nm->n * x->w;
    for (size_t k = 0; !dev && k < n; k += 3)
        if (st[k] != count)
            return vae_fail(VAE_EINVAL,
                            "internal: %s: the bands count %.0f values of a group, the frame "
                            "has %.0f",
                            op->name, st[k], count);
    return be->v->norm_apply(be, op, e->st[i].prep, x->buf, y->buf, x->t, x->h, x->w, st, dev);
}

int vae_exec_set_split(vae_exec *e, vae_comm *comm) {
    /* comm_threads.c reads host memory only */
    if (comm && !comm->device_buffers && !e->be->host_memory) comm = NULL;
    e->split = comm && comm->size > 1 ? comm : NULL;
    return e->split != NULL;
}

int exec_attention_split(vae_exec *e, int i, const value *x, value *y) {
    const vae_op *op = &e->p->ops[i];
    vae_comm *c = e->split;
    if (c->size > VAE_MAX_DEVICES)
        return vae_fail(VAE_EINVAL, "internal: %s shared by %d ranks", op->name, c->size);
    /* rank k: the query rows [h k / size, h (k + 1) / size) of each frame, bytes off[k] .. */
    const size_t row = exec_vox_bytes(e, (int64_t)x->w * op->c_out);
    size_t off[VAE_MAX_DEVICES + 1];
    for (int k = 0; k <= c->size; k++)
        off[k] = (size_t)((int64_t)x->h * k / c->size) * row;
    const int r0 = (int)(off[c->rank] / row), r1 = (int)(off[c->rank + 1] / row);
    int rc = e->be->v->attention(e->be, op, e->st[i].prep, x->buf, y->buf, x->t, x->h, x->w,
                                 r0 * x->w, r1 * x->w);
    return rc ? rc : c->v->allgather(c, y->buf, row * x->h, x->t, off);
}
