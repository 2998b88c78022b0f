/* runner_internal.h -- what runner.c, runner_store.c and runner_group.c share (internal).
 *
 * runner_store.c  the stores between a plan's parts (device, pinned host, host, temporary file)
 * runner.c        one runner: parts, streams, tiles, host output (uses runner_store.c)
 * runner_group.c  several runners on one plan, one thread each (uses runner.c)
 * runner_rank.c   one rank of a group of processes: its share of a plan, the output exchanged
 *                 (uses runner.c and runner_store.c)
 */
#ifndef VAE_RUNNER_INTERNAL_H
#define VAE_RUNNER_INTERNAL_H

#include <stdatomic.h>
#include <stdio.h>

#include "assemble.h"
#include "executor.h"
#include "platform/platform.h" /* pthreads */
#include "runner.h"

typedef struct rpart {
    int present, from, to, n_loops, loops[VAE_MAX_LOOPS], whole[VAE_MAX_LOOPS], loop_width;
    vae_program prog;
    vae_exec *e;
} rpart;

struct vae_runner {
    vae_backend *be;
    const vae_program *p;
    vae_settings set;
    rpart part[3];
    float *planar, *cl; /* host staging without asynchronous transfers */
    size_t planar_cap, cl_cap;
    vae_assembly_mem out_mem; /* the in-memory output of tiled plans, kept between calls */
    /* runner 0 of a group: the communicator of its band plans, kept between calls (making an
     * NCCL one takes ~0.3 s); every rank's handle, comm_n ranks (0: none) */
    struct vae_comm *comm[VAE_MAX_DEVICES];
    int comm_n;
};

/* gives runner 0's communicator back (its handles of every rank) */
void runner_comm_drop(vae_runner *r);

/* A part's output over the whole video, between parts. */
typedef struct store {
    int k;       /* 0: A's output, 1: B's */
    void *dev;   /* [t][h][w][c] in the backend's dtype (device memory, or host memory from
                  * host_alloc when pinned), or NULL: */
    int pinned;
    FILE *file;  /* above VAE_EXEC_HOST_MB: the same in a temporary file, through the run's
                  * ring (store_ring), or: */
    float *host; /* as float32 in host memory (a backend without host_alloc) */
    int t, h, w, c;
    /* a store one runner of a group fills while the others read it (a shared A): the frames
     * written so far (run_shared.a_frames); NULL: complete before anyone reads */
    atomic_int *ready;
} store;

/* A run's staging of one file-backed store (run.ring[store.k]): slots of host_alloc memory,
 * each a frame's crop [rows][cols][c] in the activation dtype, used in turn. The copy to or from
 * the device of a slot used since the last flush may still be in flight; a flush waits for them
 * (sync) and writes the slots that hold a put into the file. */
typedef struct ring_slot {
    int f, dirty;
    vae_span y, x;
} ring_slot;

typedef struct store_ring {
    const struct store *st; /* the store it stages (one per store of the run) */
    char *mem;
    size_t slot_bytes;
    int n, next, used; /* slots, the next one, the ones used since the last flush */
    int dirty;         /* of those, the ones holding a put */
    ring_slot *slot;
} store_ring;

/* What the runners of a group share (runner_group.c fills it; NULL for a runner alone). */
typedef struct run_shared {
    atomic_llong done;     /* units of work done by every runner */
    atomic_int stop;       /* a runner failed: the others stop at their next unit */
    pthread_mutex_t mu;    /* with: */
    pthread_cond_t filled; /* a shared A's store has more frames (a_frames), or stop */
    atomic_int a_frames;
} run_shared;

/* one call of vae_runner_run (or one runner's share of a group's call) */
typedef struct run {
    vae_runner *r;
    const vae_plan *plan;
    const vae_run_io *io;
    const vae_run_io *out_io; /* where assembled frames go (NULL: io; a rank of a group of
                               * processes runs its tiles with an io without output) */
    int emitted;
    int64_t done, total; /* units of work (executor steps) */
    int rank, world;     /* this runner takes the tiles i with i % world == rank */
    run_shared *sh;
    struct vae_comm *comm; /* band plans (vae_plan.reduce): this runner's rank of the group */
    int direct;        /* outputs go to emit as they come (else into out) */
    vae_assembly *out; /* tiled and blended plans: the output until every tile has run */
    const vae_plan_tile *tile;
    /* one download in flight */
    int q_pending, q_first, q_n, q_c, q_h, q_w;
    const float *q_host;
    const vae_plan_tile *q_tile;
    /* a step's output chunk staged on the device (download_stage), its pieces copied to the host
     * once the next step is queued: `staged` pieces (0: none) of frames first.. */
    int staged, st_first, st_t, st_c, st_h, st_w;
    const vae_plan_tile *st_tile;
    /* host seconds spent reading the caller's input (into the backend's transfer buffers), and
     * on the output: waiting for downloads, putting tiles into the assembly, handing the
     * assembled frames out (logged with -v) */
    double read_s, wait_s, put_s, emit_s;
    double a_s; /* a group's lane: host seconds until A's store was complete (logged with -v) */
    store_ring ring[2]; /* its staging of file-backed stores (runner_store.c) */
} run;

/* bytes of one pixel of c channels in the runner's activation dtype */
static inline size_t runner_px_bytes(const vae_runner *r, int c) {
    return (size_t)c * r->be->elem_size;
}

/* ---- runner_store.c ---- */
int runner_grow(float **buf, size_t *cap, size_t n);
int runner_store_open(run *s, store *st, int k);
void runner_store_close(run *s, store *st);
/* The run's puts into file-backed stores written (at the end of each stream); its rings freed. */
int runner_store_flush(run *s);
void runner_store_rings_free(run *s);
/* Frames [first, first + o->t) of the store <- the rows/columns `own` of o (o covers `out`). */
int runner_store_put(run *s, store *st, const vae_chunk *o, int first, vae_span out_y,
                     vae_span out_x, vae_span own_y, vae_span own_x);
/* Frame f of the store, rows y and columns x, into dst (a device frame [h][w][c]). */
int runner_store_get(run *s, const store *st, int f, vae_span y, vae_span x, void *dst);

/* ---- runner.c: the steps of a plan, for runner_group.c ---- */
int runner_prepare(vae_runner *r, const vae_plan *plan);
int64_t runner_plan_steps(const vae_runner *r, const vae_plan *pl, int world);
int64_t runner_rank_steps(const vae_runner *r, const vae_plan *pl, int rank, int world);
/* A (if any) and this run's tiles of B; B's output into sb (C follows) or to the output.
 * shared_a: a group's store of A (plan a_shared), filled by runner 0 while the others read it */
int runner_run_tiles(run *s, store *shared_a, store *sb);
/* C over B's store, whole frames, to the output */
int runner_run_c(run *s, store *sb);
int runner_run_blend(run *s);
/* Frames [s->emitted, upto) of an assembled output to the caller (s->io): into its device
 * tensor (out_view) or through its emit callback. */
int runner_emit_assembled(run *s, vae_assembly *a, int upto);
/* A whole-frame plan's step over the caller's input frames [pos, pos + n) (dev_in: room for n
 * of them), its output handed out before it returns (no download left in flight); *fo: the
 * output frames so far, advanced. For runner_feed.c (a stream fed by the caller). */
int runner_step_whole(run *s, void *dev_in, int pos, int n, int *fo);
/* after a failure: nothing may stay in flight into a host buffer */
void runner_drain(run *s);

#endif
