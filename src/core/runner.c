/* runner.c -- carries out a plan: parts, streams, tiles, host output (runner.h; the stores:
 * runner_store.c; several runners at once: runner_group.c).
 *
 * Allocation rule of the executor (executor.h): while an executor holds a graph, nothing else
 * allocates from the backend between its steps. So every buffer a part's stream needs (its input
 * chunk, a tile's crop, the stores) is allocated before that stream's first step and released
 * after its last; only the executor itself allocates in between.
 */
#include <string.h>

#include "comm.h"
#include "core.h"
#include "runner_internal.h"

static void part_clear(vae_runner *r, rpart *q) {
    vae_exec_free(q->e);
    if (q->present) vae_program_free(&q->prog);
    memset(q, 0, sizeof *q);
}

int vae_runner_create(vae_runner **out, vae_backend *be, const vae_program *p,
                      const vae_settings *set) {
    vae_runner *r = vae_calloc(1, sizeof *r);
    if (!r) return vae_fail(VAE_ENOMEM, "out of memory");
    r->be = be;
    r->p = p;
    r->set = *set;
    *out = r;
    return VAE_OK;
}

void runner_comm_drop(vae_runner *r) {
    for (int k = 0; k < r->comm_n; k++)
        r->comm[k]->v->destroy(r->comm[k]);
    memset(r->comm, 0, sizeof r->comm);
    r->comm_n = 0;
}

void vae_runner_host_take(vae_runner *r, vae_exec_host *sum) {
    for (int k = 0; k < 3; k++)
        if (r->part[k].e) vae_exec_host_take(r->part[k].e, sum);
}

void vae_runner_free(vae_runner *r) {
    if (!r) return;
    for (int k = 0; k < 3; k++)
        part_clear(r, &r->part[k]);
    runner_comm_drop(r);
    vae_runner_trim(r);
    vae_free(r);
}

void vae_runner_trim(vae_runner *r) {
    if (!r) return;
    vae_free(r->planar);
    vae_free(r->cl);
    r->planar = r->cl = NULL;
    r->planar_cap = r->cl_cap = 0;
    vae_assembly_mem_free(&r->out_mem);
}

/* Executors for the plan's parts: kept when a part is unchanged, else made anew (the old ones
 * are freed first, so that their weights are not on the device twice). */
int runner_prepare(vae_runner *r, const vae_plan *plan) {
    for (int k = 0; k < 3; k++) {
        const vae_plan_part *pp = &plan->part[k];
        rpart *q = &r->part[k];
        const int want = pp->to > pp->from;
        if (q->present && want && q->from == pp->from && q->to == pp->to &&
            q->n_loops == pp->n_loops && q->loop_width == pp->loop_width &&
            memcmp(q->loops, pp->loops, sizeof(int) * (size_t)pp->n_loops) == 0 &&
            memcmp(q->whole, pp->whole, sizeof(int) * (size_t)pp->n_loops) == 0)
            continue;
        part_clear(r, q);
    }
    for (int k = 0; k < 3; k++) {
        const vae_plan_part *pp = &plan->part[k];
        rpart *q = &r->part[k];
        if (q->present || pp->to <= pp->from) continue;
        int rc = vae_program_slice(r->p, pp->from, pp->to, &q->prog);
        if (rc) return rc;
        q->present = 1;
        q->from = pp->from, q->to = pp->to, q->n_loops = pp->n_loops;
        q->loop_width = pp->loop_width;
        memcpy(q->loops, pp->loops, sizeof q->loops);
        memcpy(q->whole, pp->whole, sizeof q->whole);
        vae_exec_config cfg = {&r->set, q->loops, q->whole, q->n_loops, q->loop_width};
        if ((rc = vae_exec_create(&q->e, &q->prog, r->be, &cfg))) {
            part_clear(r, q);
            return rc;
        }
    }
    return VAE_OK;
}

/* ---- transfers ------------------------------------------------------------------------------ */
static int async_io(const vae_backend *be) {
    return be->v->stage_in && be->v->upload_planar && be->v->download_planar &&
           be->v->download_wait;
}

/* cl [plane][c] <- planar [c][plane]: the user's layout to the backends' channels-last one */
static void planar_to_cl(float *cl, const float *planar, size_t plane, int c) {
    for (size_t i = 0; i < plane; i++)
        for (int k = 0; k < c; k++)
            cl[i * c + k] = planar[k * plane + i];
}

/* The caller's frames [f, f+n), crop y x x, into host memory (planar float32), timed. */
static int read_input(run *s, float *dst, int f, int n, vae_span y, vae_span x) {
    const double t0 = vae_seconds();
    const int rc = s->io->read(s->io->read_user, dst, f, n, y, x);
    s->read_s += vae_seconds() - t0;
    return rc;
}

/* A device input's frames [f, f+n), crop h x w at (y0, x0), into dst: frames past its end repeat
 * its last (an encoder that pads its input, program.h pad_end), as api/session.c's host reader
 * makes them, so that a device tensor stays on the device. */
static int import_view(vae_backend *be, const vae_io_view *v, void *dst, int f, int n, int y0,
                       int h, int x0, int w) {
    const int have = f >= v->t ? 0 : f + n <= v->t ? n : v->t - f;
    const size_t frame = (size_t)h * w * v->c * be->elem_size;
    int rc = have > 0 ? be->v->view_import(be, dst, v, f, have, y0, h, x0, w) : VAE_OK;
    for (int k = have; rc == VAE_OK && k < n; k++)
        rc = be->v->view_import(be, (char *)dst + (size_t)k * frame, v, v->t - 1, 1, y0, h, x0, w);
    return rc;
}

/* Input frames [f, f+n) of the crop y x x into dst ([n][h][w][c], backend dtype). */
static int upload_input(run *s, void *dst, int f, int n, vae_span y, vae_span x) {
    vae_runner *r = s->r;
    vae_backend *be = r->be;
    const int h = y.hi - y.lo, w = x.hi - x.lo, c = r->p->in_channels;
    const size_t vals = (size_t)n * h * w * c;
    if (s->io->in_view) return import_view(be, s->io->in_view, dst, f, n, y.lo, h, x.lo, w);
    if (async_io(be)) {
        float *stage = be->v->stage_in(be, vals * sizeof(float));
        if (!stage) return vae_fail(VAE_ENOMEM, "out of pinned host memory for %d frames", n);
        int rc = read_input(s, stage, f, n, y, x);
        return rc ? rc : be->v->upload_planar(be, dst, stage, n, h, w, c);
    }
    int rc = runner_grow(&r->planar, &r->planar_cap, vals);
    if (rc == VAE_OK) rc = runner_grow(&r->cl, &r->cl_cap, vals);
    if (rc == VAE_OK) rc = read_input(s, r->planar, f, n, y, x);
    if (rc) return rc;
    planar_to_cl(r->cl, r->planar, (size_t)n * h * w, c);
    return be->v->upload(be, dst, r->cl, vals);
}

/* What to do with downloaded output frames (planar [c][n][h][w]) of the current tile. */
static int take_output(run *s, const float *fr, int first, int n, int c, int h, int w,
                       const vae_plan_tile *tile);

/* The download in flight: waited for, its frames handed on. */
static int out_wait_piece(run *s) {
    if (!s->q_pending) return VAE_OK;
    s->q_pending = 0;
    const double t0 = vae_seconds();
    int rc = s->r->be->v->download_wait(s->r->be, s->q_host);
    s->wait_s += vae_seconds() - t0;
    return rc ? rc
              : take_output(s, s->q_host, s->q_first, s->q_n, s->q_c, s->q_h, s->q_w, s->q_tile);
}

/* A new download in flight (the one before it waited for first). */
static int out_queue_piece(run *s, const float *host, int first, int n, int c, int h, int w,
                           const vae_plan_tile *tile) {
    const int rc = out_wait_piece(s); /* the previous one, while this one copies */
    s->q_pending = rc == VAE_OK;
    s->q_host = host, s->q_first = first, s->q_n = n, s->q_c = c;
    s->q_h = h, s->q_w = w, s->q_tile = tile;
    return rc;
}

enum { OUT_PIECE = 4 }; /* output frames a download at most (asynchronous backends) */

/* The staged chunk's pieces to the host (the step after it is queued: they copy beside it). */
static int out_send_staged(run *s) {
    vae_backend *be = s->r->be;
    const int n = s->staged;
    s->staged = 0;
    int rc = VAE_OK;
    for (int k = 0; k < n && rc == VAE_OK; k++) {
        const int f = k * OUT_PIECE, m = s->st_t - f < OUT_PIECE ? s->st_t - f : OUT_PIECE;
        const int at = s->st_first + f;
        float *host;
        rc = be->v->download_staged(be, k, &host);
        if (rc == VAE_OK)
            rc = out_queue_piece(s, host, at, m, s->st_c, s->st_h, s->st_w, s->st_tile);
    }
    return rc;
}

/* Every download of the stream done and handed on. */
static int out_flush(run *s) {
    const int rc = out_send_staged(s);
    return rc ? rc : out_wait_piece(s);
}

/* Output chunk o (frames first..) of the current tile: downloaded while the next step computes
 * (asynchronous backends: staged on the device, or in pieces that the next piece waits for),
 * or at once. */
static int out_push(run *s, const vae_chunk *o, int first) {
    vae_runner *r = s->r;
    vae_backend *be = r->be;
    if (o->t == 0) return VAE_OK;
    if (s->io->out_view && s->plan->kind != VAE_PLAN_BLEND) { /* in place, the tile's own part */
        const vae_plan_tile *t = s->tile;
        const int whole = s->direct;
        const int sy = whole ? 0 : t->own_y.lo - t->out_y.lo, sx = whole ? 0 : t->own_x.lo - t->out_x.lo;
        const int rows = whole ? o->h : t->own_y.hi - t->own_y.lo;
        const int cols = whole ? o->w : t->own_x.hi - t->own_x.lo;
        return be->v->view_export(be, o->data, o->t, o->h, o->w, sy, sx, rows, cols,
                                  s->io->out_view, first, whole ? 0 : t->own_y.lo,
                                  whole ? 0 : t->own_x.lo);
    }
    if (async_io(be)) {
        int rc = out_send_staged(s), pieces = 0; /* the chunk before, beside this step's work */
        if (rc == VAE_OK && be->v->download_stage)
            rc = be->v->download_stage(be, o->data, o->t, o->h, o->w, o->c, OUT_PIECE, &pieces);
        if (rc || pieces) {
            s->staged = rc ? 0 : pieces, s->st_first = first, s->st_t = o->t, s->st_c = o->c;
            s->st_h = o->h, s->st_w = o->w, s->st_tile = s->tile;
            return rc;
        }
        /* in pieces of at most OUT_PIECE frames: the pinned buffers they pass through stay those
         * of a 4-frame step when a step makes more (pinning costs a cold call ~0.35 ms a MiB) */
        const size_t frame = (size_t)o->h * o->w * o->c * be->elem_size;
        for (int f = 0; f < o->t && rc == VAE_OK; f += OUT_PIECE) {
            const int n = o->t - f < OUT_PIECE ? o->t - f : OUT_PIECE;
            float *host;
            rc = be->v->download_planar(be, (const char *)o->data + (size_t)f * frame, n, o->h,
                                        o->w, o->c, &host);
            if (rc == VAE_OK)
                rc = out_queue_piece(s, host, first + f, n, o->c, o->h, o->w, s->tile);
        }
        return rc;
    }
    const size_t vals = (size_t)o->t * o->h * o->w * o->c, plane = vals / (size_t)o->c;
    int rc = runner_grow(&r->cl, &r->cl_cap, vals);
    if (rc == VAE_OK) rc = runner_grow(&r->planar, &r->planar_cap, vals);
    if (rc == VAE_OK) rc = be->v->download(be, r->cl, o->data, vals);
    if (rc) return rc;
    for (size_t i = 0; i < plane; i++)
        for (int k = 0; k < o->c; k++)
            r->planar[k * plane + i] = r->cl[i * o->c + k];
    return take_output(s, r->planar, first, o->t, o->c, o->h, o->w, s->tile);
}

/* ---- output on the host --------------------------------------------------------------------- */
static int emit_frames(run *s, const float *fr, int first, int n, int c, int h, int w) {
    if (s->io->emit && s->io->emit(fr, first, n, c, h, w, s->io->emit_user))
        return vae_fail(VAE_EINTERRUPTED, "%s stopped by the caller after %d frames",
                        s->plan->encode ? "encode" : "decode", first + n);
    s->emitted += n;
    return VAE_OK;
}

/* The io that assembled frames go to. */
static const vae_run_io *out_io(const run *s) {
    return s->out_io ? s->out_io : s->io;
}

/* A tile's frames into the assembly; a runner alone (or a rank of a group of processes) hands
 * out the frames its last tile has finished (every tile before it ran through every frame)
 * while the device computes the next step, instead of all of them after the last step. */
static int take_output(run *s, const float *fr, int first, int n, int c, int h, int w,
                       const vae_plan_tile *t) {
    if (s->direct) return emit_frames(s, fr, first, n, c, h, w);
    const double t0 = vae_seconds();
    const int tile = (int)(t - s->plan->tiles);
    int rc = vae_assembly_put(s->out, tile, fr, first, n, c, h, w);
    s->put_s += vae_seconds() - t0;
    const int last = s->rank + (s->plan->n_tiles - 1 - s->rank) / s->world * s->world;
    if (rc == VAE_OK && !s->sh && tile == last && (s->world > 1 || !out_io(s)->out_view)) {
        const double t1 = vae_seconds();
        rc = runner_emit_assembled(s, s->out, first + n);
        s->emit_s += vae_seconds() - t1;
    }
    return rc;
}

int vae_runner_put_view_frames(vae_backend *be, const vae_io_view *v, float **cl, size_t *cl_cap,
                               const float *fr, int first, int n, int c, int h, int w) {
    const size_t vals = (size_t)n * h * w * c;
    int rc = runner_grow(cl, cl_cap, vals);
    if (rc) return rc;
    planar_to_cl(*cl, fr, (size_t)n * h * w, c);
    void *dev = be->v->alloc(be, vals * be->elem_size);
    if (!dev)
        return vae_fail(VAE_ENOMEM, "out of %s memory for an output frame", be->v->name);
    rc = be->v->upload(be, dev, *cl, vals);
    if (rc == VAE_OK) rc = be->v->view_export(be, dev, n, h, w, 0, 0, h, w, v, first, 0, 0);
    if (rc == VAE_OK) rc = be->v->sync(be); /* *cl is reused by the next frame */
    be->v->release(be, dev);
    return rc;
}

/* Blended plans with device output: each assembled host frame goes to the device in place. */
static int emit_to_view(const float *fr, int first, int n, int c, int h, int w, void *user) {
    run *s = user;
    vae_runner *r = s->r;
    return vae_runner_put_view_frames(r->be, out_io(s)->out_view, &r->cl, &r->cl_cap, fr, first, n,
                                      c, h, w);
}

/* The assembled frames go out one by one at the end of a tile-major run (thousands of frames,
 * each read back from the temporary file when large): the caller's stop is seen between them. */
typedef struct emit_gate {
    const atomic_int *cancel;
    vae_frames_fn fn;
    void *user;
} emit_gate;

static int emit_unless_cancelled(const float *fr, int first, int n, int c, int h, int w,
                                 void *user) {
    const emit_gate *g = user;
    if (g->cancel && atomic_load_explicit(g->cancel, memory_order_relaxed)) return 1;
    return g->fn ? g->fn(fr, first, n, c, h, w, g->user) : 0;
}

int runner_emit_assembled(run *s, vae_assembly *a, int upto) {
    const vae_run_io *io = out_io(s);
    emit_gate g = {s->io->cancel, io->out_view ? emit_to_view : io->emit,
                   io->out_view ? (void *)s : io->emit_user};
    return vae_assembly_emit(a, upto, emit_unless_cancelled, &g, &s->emitted);
}

/* After each executor step: progress (reported by runner 0 of a device group: the caller's
 * thread; by every rank of a group of processes to its own caller), the caller's request to
 * stop, and, in a device group, another runner's failure. */
static int tick(run *s) {
    s->done++;
    const int64_t done = s->sh ? atomic_fetch_add(&s->sh->done, 1) + 1 : s->done;
    const vae_run_io *io = s->io;
    if (s->sh && atomic_load(&s->sh->stop))
        return vae_fail(VAE_EINTERRUPTED, "stopped: another device of the group failed");
    if ((io->cancel && atomic_load_explicit(io->cancel, memory_order_relaxed)) ||
        (io->progress && (!s->sh || s->rank == 0) &&
         io->progress(done, s->total, io->progress_user)))
        return s->total > 0
                   ? vae_fail(VAE_EINTERRUPTED, "%s stopped by the caller after %lld of %lld "
                              "steps", s->plan->encode ? "encode" : "decode", (long long)done,
                              (long long)s->total)
                   : vae_fail(VAE_EINTERRUPTED, "%s stopped by the caller after %lld steps (a "
                              "stream: its length is not known)",
                              s->plan->encode ? "encode" : "decode", (long long)done);
    return VAE_OK;
}

static int64_t input_chunks(const vae_program *p, const vae_plan *pl) {
    return pl->t_in < p->first_chunk ? 0 : 1 + (pl->t_in - p->first_chunk) / p->chunk;
}

/* Units of work of the plan: executor steps over every part and tile (A once per runner of a
 * group of `world`, or once for all of them when shared). */
int64_t runner_plan_steps(const vae_runner *r, const vae_plan *pl, int world) {
    const vae_program *p = r->p;
    const int64_t chunks = input_chunks(p, pl);
    if (pl->kind != VAE_PLAN_TILED) return chunks * pl->n_tiles;
    const int a = r->part[0].present, c = r->part[2].present;
    /* (C after bands: on every runner, runner_group.c) */
    return (a ? chunks * (pl->a_shared ? 1 : world) : 0) +
           (int64_t)pl->n_tiles * (a ? pl->store_t[0] : chunks) +
           (c ? pl->store_t[1] * (pl->reduce ? world : 1) : 0);
}

/* The same for rank `rank` of a group of processes (runner_rank.c): A, its tiles, and C. */
int64_t runner_rank_steps(const vae_runner *r, const vae_plan *pl, int rank, int world) {
    const int64_t chunks = input_chunks(r->p, pl);
    const int64_t tiles = (pl->n_tiles - rank + world - 1) / world;
    if (pl->kind != VAE_PLAN_TILED) return chunks * tiles;
    const int a = r->part[0].present, c = r->part[2].present;
    return (a ? chunks : 0) + tiles * (a ? pl->store_t[0] : chunks) + (c ? pl->store_t[1] : 0);
}

/* ---- streams through one part -----------------------------------------------------------------
 */
static const vae_span span0 = {0, 0};

/* where a part's output chunks go: to the host output, or into a store */
typedef struct sink {
    store *st;             /* NULL: the host output (out_push) */
    vae_span out_y, out_x; /* the part's computed output rows / columns */
    vae_span own_y, own_x; /* the ones kept */
} sink;

static int sink_put(run *s, const sink *k, const vae_chunk *o, int first) {
    if (!k->st) return out_push(s, o, first);
    return runner_store_put(s, k->st, o, first, k->out_y, k->out_x, k->own_y, k->own_x);
}

/* One executor step of part q over the caller's input frames [pos, pos + n), rows y x columns
 * x, through dev_in (room for n such frames); its output to k as frames *fo.. (*fo advanced). */
static int step_input(run *s, rpart *q, void *dev_in, int pos, int n, vae_span y, vae_span x,
                      const sink *k, int *fo) {
    vae_chunk in = {dev_in, n, y.hi - y.lo, x.hi - x.lo, s->r->p->in_channels}, o;
    int rc = upload_input(s, dev_in, pos, n, y, x);
    if (rc == VAE_OK) rc = vae_exec_step(q->e, &in, &o);
    if (rc == VAE_OK) rc = tick(s);
    if (rc == VAE_OK) rc = sink_put(s, k, &o, *fo);
    if (rc == VAE_OK) *fo += o.t;
    return rc;
}

int runner_step_whole(run *s, void *dev_in, int pos, int n, int *fo) {
    const sink k = {NULL, span0, span0, span0, span0};
    const vae_span y = {0, s->plan->h_in}, x = {0, s->plan->w_in};
    const int rc = step_input(s, &s->r->part[1], dev_in, pos, n, y, x, &k, fo);
    return rc ? rc : out_flush(s);
}

/* The user's input, rows y x columns x, through part q in the program's chunks. */
static int stream_input(run *s, rpart *q, vae_span y, vae_span x, const sink *k) {
    vae_runner *r = s->r;
    const vae_program *p = r->p;
    const int T = s->plan->t_in, h = y.hi - y.lo, w = x.hi - x.lo, c = p->in_channels;
    const int max_chunk = p->first_chunk > p->chunk ? p->first_chunk : p->chunk;
    void *dev_in = r->be->v->alloc(r->be, (size_t)max_chunk * h * w * runner_px_bytes(r, c));
    if (!dev_in)
        return vae_fail(VAE_ENOMEM, "out of %s memory for an input chunk of %d frames of %dx%dx%d",
                        r->be->v->name, max_chunk, h, w, c);
    int rc = VAE_OK, fo = 0;
    vae_exec_set_cancel(q->e, s->io->cancel);
    vae_exec_set_batch(q->e, 1);
    for (int pos = 0; rc == VAE_OK && pos < T;) {
        const int n = pos == 0 ? p->first_chunk : p->chunk;
        rc = step_input(s, q, dev_in, pos, n, y, x, k, &fo);
        pos += n;
    }
    if (rc == VAE_OK) rc = out_flush(s);
    if (rc == VAE_OK) rc = runner_store_flush(s);
    vae_exec_reset(q->e); /* caches and graph go before the buffers they were recorded with */
    vae_exec_set_batch(q->e, 0);
    r->be->v->release(r->be, dev_in);
    return rc;
}

/* Rows y x columns x of the store through part q, `first` frames in the first step, then
 * `chunk` per step (the steps the untiled stream has there). */
static int stream_store(run *s, rpart *q, const store *st, vae_span y, vae_span x, int first,
                        int chunk, const sink *k) {
    vae_runner *r = s->r;
    const int h = y.hi - y.lo, w = x.hi - x.lo, nmax = first > chunk ? first : chunk;
    const size_t frame = (size_t)h * w * runner_px_bytes(r, st->c);
    /* a device store of whole frames is read in place; crops and host stores are copied */
    const int whole = h == st->h && w == st->w && st->dev && !st->pinned;
    void *buf = whole ? NULL : r->be->v->alloc(r->be, (size_t)nmax * frame);
    if (!whole && !buf)
        return vae_fail(VAE_ENOMEM, "out of %s memory for %d frames of a tile of %dx%dx%d",
                        r->be->v->name, nmax, h, w, st->c);
    int rc = VAE_OK, fo = 0;
    vae_exec_set_cancel(q->e, s->io->cancel);
    vae_exec_set_batch(q->e, 1);
    for (int f = 0; rc == VAE_OK && f < st->t;) {
        int n = f == 0 ? first : chunk;
        if (f + n > st->t) n = st->t - f;
        vae_chunk in = {buf, n, h, w, st->c}, o;
        if (whole) in.data = (char *)st->dev + (size_t)f * frame;
        for (int j = 0; !whole && rc == VAE_OK && j < n; j++)
            rc = runner_store_get(s, st, f + j, y, x, (char *)buf + (size_t)j * frame);
        f += n;
        if (rc == VAE_OK) rc = vae_exec_step(q->e, &in, &o);
        if (rc == VAE_OK) rc = tick(s);
        if (rc == VAE_OK) rc = sink_put(s, k, &o, fo);
        if (rc == VAE_OK) fo += o.t;
    }
    if (rc == VAE_OK) rc = out_flush(s);
    if (rc == VAE_OK) rc = runner_store_flush(s);
    vae_exec_reset(q->e);
    vae_exec_set_batch(q->e, 0);
    if (buf) r->be->v->release(r->be, buf);
    return rc;
}

/* ---- plans ------------------------------------------------------------------------------------
 */
static int set_trims(rpart *q, const vae_plan_tile *t) {
    for (int i = 0; i < t->n_trims; i++) {
        const vae_plan_trim *tr = &t->trims[i];
        int rc = vae_exec_set_trim(q->e, tr->value, tr->y0, tr->x0, tr->h, tr->w);
        if (rc) return rc;
    }
    return VAE_OK;
}

static int run_whole(run *s) {
    const vae_plan *pl = s->plan;
    s->direct = 1;
    s->tile = &pl->tiles[0];
    sink k = {NULL, span0, span0, span0, span0};
    rpart *q = &s->r->part[1];
    int rc = vae_exec_set_offload(q->e, pl->offload);
    if (rc == VAE_OK)
        rc = stream_input(s, q, (vae_span){0, pl->h_in}, (vae_span){0, pl->w_in}, &k);
    vae_exec_set_offload(q->e, NULL); /* (a backend keeps pinned blocks for the next call) */
    return rc;
}

/* A over the whole video into its store (each runner of a group runs it, or runner 0 alone
 * into shared_a, publishing its frames as they come), then this run's tiles of B, each through
 * every frame, into sb (C follows) or to the output. */
int runner_run_tiles(run *s, store *shared_a, store *sb) {
    vae_runner *r = s->r;
    const vae_plan *pl = s->plan;
    rpart *pa = &r->part[0], *pb = &r->part[1];
    store own = {0}, *sa = shared_a ? shared_a : &own;
    int rc = VAE_OK;
    const double t0 = vae_seconds();
    if (pa->present && (!shared_a || s->rank == 0)) {
        if (!shared_a) rc = runner_store_open(s, &own, 0);
        /* bands: every runner computes A; its attention's queries are shared out */
        if (pl->reduce && s->comm && vae_exec_set_split(pa->e, s->comm) && s->rank == 0)
            VAE_DEBUG("group: A's attention queries shared by the bands");
        const vae_span all_y = {0, sa->h}, all_x = {0, sa->w};
        sink k = {sa, all_y, all_x, all_y, all_x};
        if (rc == VAE_OK)
            rc = stream_input(s, pa, (vae_span){0, pl->h_in}, (vae_span){0, pl->w_in}, &k);
        vae_exec_set_split(pa->e, NULL);
        /* a group's lane logs how long A took; the wait costs one launch latency */
        if (rc == VAE_OK && s->world > 1) rc = s->r->be->v->sync(s->r->be);
        s->a_s = vae_seconds() - t0;
    }
    for (int i = s->rank; rc == VAE_OK && i < pl->n_tiles; i += s->world) {
        const vae_plan_tile *t = &pl->tiles[i];
        s->tile = t;
        sink k = {sb, t->out_y, t->out_x, t->own_y, t->own_x};
        rc = set_trims(pb, t);
        /* strips run in order on one runner, each after the one whose edges it takes */
        if (rc == VAE_OK && pl->strips)
            rc = s->world == 1 ? vae_exec_set_strip(pb->e, pl->strips, i)
                               : vae_fail(VAE_EINVAL, "internal: strips shared by a group");
        /* bands: one per runner, their GroupNorms all-reduced (every runner in step) */
        if (rc == VAE_OK && pl->reduce)
            rc = s->comm && s->world == pl->n_tiles
                     ? vae_exec_set_reduce(pb->e, s->comm, pl->norms + (size_t)i * pl->n_norms,
                                           pl->n_norms)
                     : vae_fail(VAE_EINVAL, "internal: row bands without one device each");
        if (rc == VAE_OK)
            rc = pa->present ? stream_store(s, pb, sa, t->in_y, t->in_x, pl->part[1].first,
                                            pl->part[1].chunk, &k)
                             : stream_input(s, pb, t->in_y, t->in_x, &k);
    }
    if (pl->strips) vae_exec_set_strip(pb->e, NULL, 0); /* the slots go */
    if (pl->reduce) vae_exec_set_reduce(pb->e, NULL, NULL, 0);
    runner_store_close(s, &own);
    return rc;
}

int runner_run_c(run *s, store *sb) {
    const vae_plan *pl = s->plan;
    s->direct = 1;
    sink k = {NULL, span0, span0, span0, span0};
    return stream_store(s, &s->r->part[2], sb, (vae_span){0, sb->h}, (vae_span){0, sb->w},
                        pl->part[2].first, pl->part[2].chunk, &k);
}

static int run_tiled(run *s) {
    store sb = {0};
    const int c = s->r->part[2].present;
    int rc = c ? runner_store_open(s, &sb, 1) : VAE_OK;
    if (rc == VAE_OK) rc = runner_run_tiles(s, NULL, c ? &sb : NULL);
    if (rc == VAE_OK && c) rc = runner_run_c(s, &sb);
    runner_store_close(s, &sb);
    return rc;
}

int runner_run_blend(run *s) {
    const vae_plan *pl = s->plan;
    int rc = VAE_OK;
    for (int i = s->rank; rc == VAE_OK && i < pl->n_tiles; i += s->world) {
        const vae_plan_tile *t = &pl->tiles[i];
        s->tile = t;
        sink k = {NULL, t->out_y, t->out_x, t->own_y, t->own_x};
        rc = stream_input(s, &s->r->part[1], t->in_y, t->in_x, &k);
    }
    return rc;
}

void runner_drain(run *s) {
    s->staged = 0;
    if (!s->q_pending) return;
    s->q_pending = 0;
    s->r->be->v->download_wait(s->r->be, s->q_host);
}

int vae_runner_run(vae_runner *r, const vae_plan *plan, const vae_run_io *io, int *emitted) {
    run s = {.r = r, .plan = plan, .io = io, .world = 1};
    vae_backend *be = r->be;
    if ((io->in_view || io->out_view) && !be->v->view_import)
        return vae_fail(VAE_EUNSUPPORTED, "the %s backend cannot use tensors in device memory",
                        be->v->name);
    int rc = runner_prepare(r, plan);
    s.total = runner_plan_steps(r, plan, 1);
    /* device output is written in place by the tiles, except for blended plans */
    const int assemble = plan->kind == VAE_PLAN_BLEND ||
                         (plan->kind == VAE_PLAN_TILED && !r->part[2].present && !io->out_view);
    if (rc == VAE_OK && assemble)
        rc = vae_assembly_open(&s.out, plan, (int64_t)r->set.exec_host_mb << 20, &r->out_mem);
    if (rc == VAE_OK)
        rc = plan->kind == VAE_PLAN_WHOLE   ? run_whole(&s)
             : plan->kind == VAE_PLAN_TILED ? run_tiled(&s)
                                            : runner_run_blend(&s);
    const double t0 = vae_seconds();
    if (rc == VAE_OK && assemble) rc = runner_emit_assembled(&s, s.out, plan->t_out);
    if (io->out_view) s.emitted = 0;
    if (rc) runner_drain(&s);
    runner_store_rings_free(&s);
    vae_assembly_free(s.out);
    s.emit_s += vae_seconds() - t0;
    if (rc == VAE_OK)
        VAE_DEBUG("runner: host time: %.0f ms reading the input; on the output %.0f ms waiting "
                 "for downloads, %.0f ms assembling tiles, %.0f ms handing assembled frames out",
                 s.read_s * 1e3, s.wait_s * 1e3, s.put_s * 1e3, s.emit_s * 1e3);
    *emitted = s.emitted;
    return rc;
}
