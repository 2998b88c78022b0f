/* runner_rank.c -- one rank of a group of processes carries out its share of a plan (runner.h).
 *
 * The ranks (a process and a device each: vae_session_options.world) make the same plan, and
 * each runs what lane `rank` of a device group would (runner_group.c): its tiles (i % world ==
 * rank), each with its own halo, after computing A itself (A is never shared: the ranks have no
 * host memory in common); or its row band, whose GroupNorms sum their statistics and whose A
 * shares its attention's queries over the communicator. What the lanes of a device group put
 * into host memory they all write, the ranks exchange instead:
 * - the output of tiled and blended plans: each frame, once this rank's tiles have put it, gets
 *   the other ranks' tiles (an all-gather of each rank's own rows and columns: the same bits as
 *   one process), or for blends their weighted sums (an all-reduce: blends are not exact
 *   anyway), or with group_output own, zeros where they go (no exchange);
 * - an encoder's B store before C: each frame's own crops all-gathered in device memory and put
 *   where their tiles go; then every rank runs C whole (band encoders share its attention).
 * Every rank merges the frames in order, one collective each, as its last tile puts them (while
 * the others compute: no other exchange comes in between, except a band plan's GroupNorm sums,
 * which every rank's steps make at the same points), so that every rank makes the same calls.
 * Whole-frame plans run on every rank alone.
 */
#include <string.h>

#include "comm.h"
#include "comm_host.h"
#include "core.h"
#include "runner_internal.h"

static int own(const run *s, int tile) {
    return tile % s->world == s->rank;
}

static size_t tile_px(const vae_plan_tile *t) {
    return (size_t)(t->own_y.hi - t->own_y.lo) * (size_t)(t->own_x.hi - t->own_x.lo);
}

/* off[k]: where rank k's part starts in a packed frame (its tiles in order, px_bytes a pixel);
 * off[world]: the packed frame's bytes */
static void pack_offsets(const run *s, size_t px_bytes, size_t *off) {
    memset(off, 0, sizeof *off * (size_t)(s->world + 1));
    for (int i = 0; i < s->plan->n_tiles; i++)
        off[i % s->world + 1] += tile_px(&s->plan->tiles[i]) * px_bytes;
    for (int k = 0; k < s->world; k++)
        off[k + 1] += off[k];
}

/* The plan's tiles of this rank (OWN) or of the others (OTHERS), in order, each handed to fn with
 * where its pixels lie in a packed frame (rank k's tiles one after another from off[k]; at: the
 * world cursors). Stops at fn's first failure. */
enum { OWN, OTHERS };
typedef int (*pack_fn)(int tile, size_t at, void *user);

static int pack_walk(const run *s, const size_t *off, size_t *at, size_t px_bytes, int which,
                     pack_fn fn, void *user) {
    const vae_plan *pl = s->plan;
    int rc = VAE_OK;
    memcpy(at, off, sizeof *at * (size_t)s->world);
    for (int i = 0; rc == VAE_OK && i < pl->n_tiles; i++) {
        const int k = i % s->world;
        if ((k == s->rank) == (which == OWN)) rc = fn(i, at[k], user);
        at[k] += tile_px(&pl->tiles[i]) * px_bytes;
    }
    return rc;
}

/* ---- the output: frames [c][h][w] of the assembly ---------------------------------------- */
typedef struct merger {
    const run *s;
    int own_only;
    vae_comm_host ch; /* the exchange's buffer: a packed frame, or a blend's frame in double */
    size_t *off, *at; /* [world + 1]: pack_offsets (float pixels of c_out channels); cursors */
} merger;

enum { TO_PACK, TO_FRAME, ZEROS };

/* tile i's own part of frame fr and the packed [c][rows][cols] at p, one way or the other (or
 * zeros into the frame) */
static void tile_copy(const vae_plan *pl, int i, float *fr, float *p, int how) {
    const vae_plan_tile *t = &pl->tiles[i];
    const size_t cols = (size_t)(t->own_x.hi - t->own_x.lo);
    for (int k = 0; k < pl->c_out; k++)
        for (int y = t->own_y.lo; y < t->own_y.hi; y++) {
            float *row = fr + ((size_t)k * pl->h_out + y) * pl->w_out + t->own_x.lo;
            if (how == TO_PACK)
                memcpy(p, row, cols * sizeof *p);
            else if (how == TO_FRAME)
                memcpy(row, p, cols * sizeof *p);
            else
                memset(row, 0, cols * sizeof *row);
            p += how == ZEROS ? 0 : cols;
        }
}

static int merge_blend(merger *m, float *fr) {
    const vae_plan *pl = m->s->plan;
    const size_t n = (size_t)pl->c_out * pl->h_out * pl->w_out;
    double *sum = m->ch.host;
    for (size_t i = 0; i < n; i++)
        sum[i] = fr[i];
    const int rc = vae_comm_host_allreduce(&m->ch, n);
    for (size_t i = 0; rc == VAE_OK && i < n; i++)
        fr[i] = (float)sum[i];
    return rc;
}

/* a packed frame's tile copied one way or the other (pack_walk) */
typedef struct frame_pack {
    const vae_plan *pl;
    float *fr;
    char *pack;
    int how;
} frame_pack;

static int frame_tile(int tile, size_t at, void *user) {
    const frame_pack *p = user;
    tile_copy(p->pl, tile, p->fr, (float *)(p->pack + at), p->how);
    return VAE_OK;
}

/* assemble.h merge: frame f made whole from every rank's tiles (or zeros where the others'
 * go: group_output own) */
static int merge_frame(float *fr, int f, void *user) {
    merger *m = user;
    const run *s = m->s;
    const vae_plan *pl = s->plan;
    if (m->own_only || pl->kind == VAE_PLAN_BLEND) {
        for (int i = 0; m->own_only && i < pl->n_tiles; i++)
            if (!own(s, i)) tile_copy(pl, i, fr, NULL, ZEROS);
        return m->own_only ? VAE_OK : merge_blend(m, fr);
    }
    const size_t px = (size_t)pl->c_out * sizeof(float);
    frame_pack p = {pl, fr, m->ch.host, TO_PACK};
    pack_walk(s, m->off, m->at, px, OWN, frame_tile, &p);
    const int rc = vae_comm_host_allgather(&m->ch, m->off[s->world], 1, m->off);
    p.how = TO_FRAME;
    return rc ? rc : pack_walk(s, m->off, m->at, px, OTHERS, frame_tile, &p);
}

static int merger_open(merger *m, const run *s, vae_comm *comm, int own_only) {
    const vae_plan *pl = s->plan;
    memset(m, 0, sizeof *m);
    m->s = s, m->own_only = own_only;
    vae_comm_host_init(&m->ch, comm, s->r->be);
    m->off = vae_calloc(2 * ((size_t)s->world + 1), sizeof *m->off);
    if (!m->off) return vae_fail(VAE_ENOMEM, "out of memory");
    m->at = m->off + s->world + 1;
    pack_offsets(s, (size_t)pl->c_out * sizeof(float), m->off);
    const size_t frame = (size_t)pl->c_out * pl->h_out * pl->w_out;
    if (own_only) return VAE_OK;
    const size_t bytes = pl->kind == VAE_PLAN_BLEND ? frame * sizeof(double) : m->off[s->world];
    return vae_comm_host_reserve(&m->ch, bytes + 1);
}

static void merger_close(merger *m) {
    vae_free(m->off);
    vae_comm_host_free(&m->ch);
}

/* ---- an encoder's B store before C ---------------------------------------------------------- */
/* a frame of B's store and its packed tiles in a backend buffer (pack_walk) */
typedef struct store_pack {
    run *s;
    store *sb;
    int f;
    char *buf;
} store_pack;

static int store_pack_tile(int tile, size_t at, void *user) {
    const store_pack *p = user;
    const vae_plan_tile *t = &p->s->plan->tiles[tile];
    return runner_store_get(p->s, p->sb, p->f, t->own_y, t->own_x, p->buf + at);
}

static int store_unpack_tile(int tile, size_t at, void *user) {
    const store_pack *p = user;
    const vae_plan_tile *t = &p->s->plan->tiles[tile];
    const vae_chunk o = {p->buf + at, 1, t->own_y.hi - t->own_y.lo, t->own_x.hi - t->own_x.lo,
                         p->sb->c};
    return runner_store_put(p->s, p->sb, &o, p->f, t->own_y, t->own_x, t->own_y, t->own_x);
}

/* Every frame of sb gets the other ranks' tiles: this rank's own crops packed into a backend
 * buffer (rank k's part at off[k]), all-gathered there, the others' put into the store. */
static int store_merge(run *s, store *sb, vae_comm *comm) {
    vae_backend *be = s->r->be;
    const size_t px = runner_px_bytes(s->r, sb->c);
    if (!comm->device_buffers && !be->host_memory)
        return vae_fail(VAE_EUNSUPPORTED, "internal: the %s communicator cannot read %s memory",
                        comm->v->name, be->v->name);
    size_t *off = vae_calloc(2 * ((size_t)s->world + 1), sizeof *off), *at = off + s->world + 1;
    if (!off) return vae_fail(VAE_ENOMEM, "out of memory");
    pack_offsets(s, px, off);
    store_pack p = {s, sb, 0, be->v->alloc(be, off[s->world] + 1)};
    int rc = p.buf ? VAE_OK
                   : vae_fail(VAE_ENOMEM, "out of %s memory for a frame of B's store", be->v->name);
    for (; rc == VAE_OK && p.f < sb->t; p.f++) {
        rc = pack_walk(s, off, at, px, OWN, store_pack_tile, &p);
        if (rc == VAE_OK) rc = comm->v->allgather(comm, p.buf, off[s->world], 1, off);
        if (rc == VAE_OK) rc = pack_walk(s, off, at, px, OTHERS, store_unpack_tile, &p);
        if (rc == VAE_OK) rc = be->v->sync(be); /* buf is packed again for the next frame */
    }
    if (rc == VAE_OK) rc = runner_store_flush(s);
    if (p.buf) be->v->release(be, p.buf);
    vae_free(off);
    return rc;
}

/* ---- the rank's run ------------------------------------------------------------------------- */
/* B's tiles into a store, merged, then C on every rank (band encoders: its attention's queries
 * shared over the communicator) to the caller's output. */
static int run_tiles_c(run *s, vae_comm *comm) {
    store sb = {0};
    const vae_run_io *io = s->io;
    vae_run_io lio = *io;
    lio.emit = NULL, lio.out_view = NULL; /* B goes to the store only */
    s->io = &lio;
    int rc = runner_store_open(s, &sb, 1);
    if (rc == VAE_OK) rc = runner_run_tiles(s, NULL, &sb);
    if (rc == VAE_OK) rc = store_merge(s, &sb, comm);
    s->io = io;
    vae_exec *pc = s->r->part[2].e;
    if (rc == VAE_OK && s->plan->reduce) vae_exec_set_split(pc, comm);
    if (rc == VAE_OK) rc = runner_run_c(s, &sb);
    vae_exec_set_split(pc, NULL);
    runner_store_close(s, &sb);
    return rc;
}

/* This rank's tiles (or blend tiles) into the assembly; each frame merged and handed out as
 * its last tile puts it (runner.c take_output; every rank merges the frames in order, so that
 * the exchanges match, while the others compute: a band plan's GroupNorm sums come at the same
 * points of every rank's steps), the rest at the end. */
static int run_assembled(run *s, vae_comm *comm, int own_only) {
    vae_runner *r = s->r;
    const vae_run_io *io = s->io;
    vae_run_io lio = *io;
    lio.emit = NULL, lio.out_view = NULL; /* the tiles go to the assembly, */
    s->out_io = io;                       /* the assembled frames to the caller */
    merger m;
    int rc = merger_open(&m, s, comm, own_only);
    if (rc == VAE_OK)
        rc = vae_assembly_open(&s->out, s->plan, (int64_t)r->set.exec_host_mb << 20, &r->out_mem);
    if (rc == VAE_OK) {
        vae_assembly_set_rank(s->out, s->rank, s->world, merge_frame, &m);
        s->io = &lio;
        const int tiled = s->plan->kind == VAE_PLAN_TILED;
        rc = tiled ? runner_run_tiles(s, NULL, NULL) : runner_run_blend(s);
        s->io = io;
    }
    if (rc == VAE_OK) rc = runner_emit_assembled(s, s->out, s->plan->t_out);
    vae_assembly_free(s->out);
    s->out = NULL;
    merger_close(&m);
    return rc;
}

int vae_runner_run_rank(vae_runner *r, const vae_plan *plan, const vae_run_io *io, vae_comm *comm,
                        int own_only, int *emitted) {
    *emitted = 0;
    if (plan->kind == VAE_PLAN_WHOLE) return vae_runner_run(r, plan, io, emitted);
    run s = {.r = r,
             .plan = plan,
             .io = io,
             .rank = comm->rank,
             .world = comm->size,
             .comm = plan->reduce ? comm : NULL};
    if ((io->in_view || io->out_view) && !r->be->v->view_import)
        return vae_fail(VAE_EUNSUPPORTED, "the %s backend cannot use tensors in device memory",
                        r->be->v->name);
    int rc = runner_prepare(r, plan);
    s.total = runner_rank_steps(r, plan, s.rank, s.world);
    if (rc == VAE_OK)
        rc = plan->kind == VAE_PLAN_TILED && r->part[2].present ? run_tiles_c(&s, comm)
                                                                : run_assembled(&s, comm, own_only);
    if (rc) runner_drain(&s);
    runner_store_rings_free(&s);
    *emitted = io->out_view ? 0 : s.emitted;
    if (rc == VAE_OK)
        VAE_INFO("rank %d of %d: host time on the output: %.0f ms waiting for downloads, %.0f ms "
                 "assembling tiles",
                 s.rank, s.world, s.wait_s * 1e3, s.put_s * 1e3);
    return rc;
}
