/* stream.c -- the input a step at a time (vae.h vae_stream_*): the caller's frames gathered into
 * the model's steps, each step run by the runner's feed (runner.h) as soon as it is whole, on
 * the plan and executor a call of the session uses, so that the output is the call's. */
#include <string.h>

#include "api/api.h"
#include "core/dtype.h"

typedef struct vae_stream {
    int encode;
    int c, h, w;   /* every push's frames: c channels of h x w */
    vae_plan plan; /* whole frames, the model's own steps */
    vae_run_io io; /* reads `pending`, hands frames to the current call's fn */
    vae_runner_feed *feed;
    float *pending;                /* the next step's frames so far: [cap][c][h][w] */
    int cap, have;                 /* frames it holds room for, frames in it */
    int64_t base;                  /* the stream index of pending's first frame */
    int64_t frames_in, frames_out; /* pushed, handed out */
    vae_frames_fn fn;              /* the running push's or end's */
    void *user;
} vae_stream;

static size_t frame_vals(const vae_stream *st) {
    return (size_t)st->c * st->h * st->w;
}

/* The runner's input: frames [f, f+n) of the stream, which are pending's first n (whole
 * frames: the plan has no tiles), as planar [c][n][h][w]. */
static int read_pending(void *user, float *dst, int f, int n, vae_span y, vae_span x) {
    const vae_stream *st = user;
    if (f != st->base || n > st->have || y.hi - y.lo != st->h || x.hi - x.lo != st->w)
        return vae_fail(VAE_EINVAL, "internal: a stream step read frames %d..%d of its input", f,
                        f + n);
    const size_t plane = (size_t)st->h * st->w;
    for (int c = 0; c < st->c; c++)
        for (int k = 0; k < n; k++)
            memcpy(dst + ((size_t)c * n + k) * plane,
                   st->pending + (size_t)k * frame_vals(st) + (size_t)c * plane,
                   plane * sizeof *dst);
    return VAE_OK;
}

static int emit_to_caller(const float *frames, int first, int n, int c, int h, int w, void *user) {
    vae_stream *st = user;
    st->frames_out += n;
    return st->fn ? st->fn(frames, first, n, c, h, w, st->user) : 0;
}

static void stream_free(vae_session *s) {
    vae_stream *st = s->stream;
    if (!st) return;
    vae_runner_feed_end(st->feed);
    vae_plan_free(&st->plan);
    vae_free(st->pending);
    vae_free(st);
    s->stream = NULL;
    s->be->limit = 0; /* (the budget holds for the stream's steps only) */
}

void vae_session_stream_drop(vae_session *s) {
    stream_free(s);
}

/* The stream's geometry from begin's shape: [1, C, T, H, W], T not read. */
static int begin_geometry(vae_session *s, int encode, const int64_t *shape, int ndim,
                          vae_io_view *g) {
    const vae_program *p = vae_session_program(s, encode);
    const char *what = encode ? "vae_stream_begin: video shape" : "vae_stream_begin: latent shape";
    if (p->n_ops == 0)
        return vae_fail(VAE_EUNSUPPORTED, "vae_stream_begin: this %s checkpoint has no %s",
                        s->model->cfg.arch->name, encode ? "encoder" : "decoder");
    if (!shape || ndim != 5)
        return vae_fail(VAE_ESHAPE, "%s: rank %d, expected 5 ([1,%d,T,H,W]; T is not read)", what,
                        ndim, p->in_channels);
    int64_t one[5];
    memcpy(one, shape, sizeof one);
    one[2] = 1;
    vae_tensor probe = vae_tensor_dense(5, one, VAE_DTYPE_F32, (void *)1);
    int rc = vae_tensor_view(&probe, what, p->in_channels, g);
    if (rc) return rc;
    const int f = vae_config_spatial_factor(&s->model->cfg);
    if (encode && (g->h % f || g->w % f))
        return vae_fail(VAE_ESHAPE, "%s: size %dx%d is not a multiple of %d (%s)", what, g->h, g->w,
                        f, s->model->cfg.arch->name);
    return VAE_OK;
}

/* Refusals of what a stream cannot run: several devices or ranks, a frame rule around the
 * model's steps (before planning), tiles (plan: the stream's, else NULL). */
static int begin_check(const vae_session *s, int encode, const vae_plan *plan) {
    if (!plan && vae_session_frame_rule(s->model, encode, s->opts.preview, NULL))
        return vae_fail(VAE_EUNSUPPORTED,
                        "vae_stream_begin: the %s %s cuts and pads its frames around the model's "
                        "steps (its own segments), which a stream does not yet: call vae_%s",
                        s->model->cfg.arch->name, encode ? "encoder" : "decoder",
                        encode ? "encode" : "decode");
    if (s->n_lanes > 1 || s->comm)
        return vae_fail(VAE_EUNSUPPORTED,
                        "vae_stream_begin: a stream runs on one device (this "
                        "session shares its calls among %d %s)",
                        s->comm ? s->comm->size : s->n_lanes, s->comm ? "ranks" : "devices");
    if (plan && plan->kind != VAE_PLAN_WHOLE)
        return vae_fail(VAE_EUNSUPPORTED,
                        "vae_stream_begin: a stream runs whole frames, but "
                        "frames of %dx%d %s (%s): raise max_memory, or stream smaller frames",
                        plan->w_in, plan->h_in,
                        plan->kind == VAE_PLAN_BLEND ? "go in blended tiles (tile_mode=blend)"
                                                     : "need tiles under the session's budget",
                        plan->why);
    return VAE_OK;
}

static int stream_open(vae_session *s, int encode, const vae_io_view *g) {
    vae_stream *st = vae_calloc(1, sizeof *st);
    if (!st) return vae_fail(VAE_ENOMEM, "out of memory");
    s->stream = st;
    st->encode = encode, st->c = g->c, st->h = g->h, st->w = g->w;
    const vae_program *m = encode ? &s->model->enc : &s->model->dec;
    vae_io_view two = *g; /* the plan of two steps: a stream's every step is one of them */
    two.t = m->first_chunk + m->chunk;
    int rc = begin_check(s, encode, NULL);
    if (rc == VAE_OK) rc = vae_session_plan_stream(s, encode, &two, &st->plan);
    if (rc == VAE_OK) rc = begin_check(s, encode, &st->plan);
    if (rc) return rc;
    VAE_INFO("stream: %s, plan: %s", encode ? "encode" : "decode", st->plan.why);
    const vae_program *p = vae_session_program(s, encode);
    st->cap = p->first_chunk > p->chunk ? p->first_chunk : p->chunk;
    st->pending = vae_malloc((size_t)st->cap * frame_vals(st) * sizeof *st->pending);
    if (!st->pending)
        return vae_fail(VAE_ENOMEM, "out of memory for a step of %d frames of %dx%dx%d", st->cap,
                        st->h, st->w, st->c);
    st->io = (vae_run_io){.read = read_pending,
                          .read_user = st,
                          .emit = emit_to_caller,
                          .emit_user = st,
                          .cancel = &s->cancel};
    vae_backend *be = s->be;
    be->limit = st->plan.budget; /* the backend refuses to go over it, as in a call */
    be->refused = 0;
    be->bytes_peak = be->bytes_in_use;
    vae_runner **r = &s->runner[encode][0]; /* a call's runner, as session_plan.c makes it */
    if (!*r && (rc = vae_runner_create(r, be, p, &s->set))) return rc;
    be->host_copy_on = st->plan.n_offload > 0; /* counted by the plan: caches in host memory */
    be->host_copy_ring = st->plan.host_ring;
    if (be->v->scratch_reserve &&
        (rc = be->v->scratch_reserve(be, (size_t)st->plan.scratch, st->plan.scratch_minimal)))
        return rc;
    return vae_runner_feed_begin(&st->feed, *r, &st->plan, &st->io);
}

int vae_stream_begin(vae_session *s, int encode, const int64_t *shape, int ndim) {
    vae_error_clear();
    if (!s) return vae_fail(VAE_EINVAL, "vae_stream_begin: NULL session");
    if (encode != 0 && encode != 1)
        return vae_fail(VAE_EINVAL,
                        "vae_stream_begin: encode %d, expected 0 (decode) or 1 "
                        "(encode)",
                        encode);
    vae_io_view g;
    int rc = begin_geometry(s, encode, shape, ndim, &g);
    if (rc) return rc;
    if ((rc = vae_session_enter(s, "vae_stream_begin"))) return rc;
    if (s->stream)
        rc = vae_fail(VAE_EINVAL, "vae_stream_begin: a stream is already open on this session "
                                  "(one at a time: vae_stream_end or vae_stream_abort it first)");
    else if ((rc = stream_open(s, encode, &g)))
        stream_free(s);
    vae_session_leave(s);
    return rc;
}

/* The frames of the step that begins at pending's first: the program's first chunk, then its
 * chunk. */
static int step_frames(const vae_session *s, const vae_stream *st) {
    const vae_program *p = vae_session_program(s, st->encode);
    return st->base == 0 ? p->first_chunk : p->chunk;
}

/* pending's frames through one step of the model. */
static int run_step(vae_session *s, vae_stream *st) {
    const int n = st->have;
    const int rc = vae_runner_feed_step(st->feed, n);
    if (rc) return rc;
    st->base += n;
    st->have = 0;
    return VAE_OK;
}

/* A push's chunk: host memory, [1, C, T, H, W] with begin's C, H and W (T >= 0). *v: its view
 * (v->t 0: no frames). */
static int push_view(const vae_stream *st, const vae_tensor *x, vae_io_view *v) {
    char a[160];
    static const char *const what = "vae_stream_push: chunk";
    memset(v, 0, sizeof *v);
    if (x->device != VAE_DEVICE_CPU)
        return vae_fail(VAE_EINVAL, "%s is in device memory: a stream takes host tensors", what);
    if (x->ndim != 5 || x->shape[0] != 1 || x->shape[1] != st->c || x->shape[2] < 0 ||
        x->shape[3] != st->h || x->shape[4] != st->w)
        return vae_fail(VAE_ESHAPE,
                        "%s: shape %s, expected [1,%d,T,%d,%d] (vae_stream_begin's "
                        "shape, any T >= 0)",
                        what, vae_shape_str(x->shape, x->ndim, a, sizeof a), st->c, st->h, st->w);
    if (x->dtype != VAE_DTYPE_F32 && x->dtype != VAE_DTYPE_F16 && x->dtype != VAE_DTYPE_BF16)
        return vae_fail(VAE_EDTYPE, "%s: dtype %s, expected float32, float16 or bfloat16", what,
                        vae_dtype_name(x->dtype));
    if (x->shape[2] == 0) return VAE_OK;
    return vae_tensor_view(x, what, st->c, v);
}

/* The chunk's frames into pending, each step run as soon as it is whole. */
static int push_frames(vae_session *s, vae_stream *st, const vae_io_view *v) {
    int rc = VAE_OK;
    for (int j = 0; rc == VAE_OK && j < v->t; j++) {
        float *dst = st->pending + (size_t)st->have * frame_vals(st);
        rc = vae_view_read_host(v, "vae_stream_push: chunk", dst, j, 1, 0, st->h, 0, st->w);
        if (rc) break;
        st->have++;
        st->frames_in++;
        if (st->have == step_frames(s, st)) rc = run_step(s, st);
    }
    return rc;
}

/* The session entered for a push or end of its open stream (fn: the call's name). */
static int stream_enter(vae_session *s, const char *fn) {
    if (!s) return vae_fail(VAE_EINVAL, "%s: NULL session", fn);
    int rc = vae_session_enter(s, fn);
    if (rc == VAE_OK && !s->stream) {
        vae_session_leave(s);
        rc = vae_fail(VAE_EINVAL,
                      "%s: no stream is open on this session (vae_stream_begin "
                      "first)",
                      fn);
    }
    if (rc == VAE_OK) atomic_store(&s->cancel, 0); /* as a call: an older cancel is cleared */
    return rc;
}

int vae_stream_push(vae_session *s, const vae_tensor *chunk, vae_frames_fn fn, void *user) {
    vae_error_clear();
    int rc = stream_enter(s, "vae_stream_push");
    if (rc) return rc;
    vae_stream *st = s->stream;
    vae_io_view v;
    if (!chunk)
        rc = vae_fail(VAE_EINVAL, "vae_stream_push: NULL chunk");
    else
        rc = push_view(st, chunk, &v);
    if (rc == VAE_OK) { /* from here a failure ends the stream */
        st->fn = fn, st->user = user;
        rc = push_frames(s, st, &v);
        st->fn = NULL, st->user = NULL;
        if (rc) stream_free(s);
    }
    vae_session_leave(s);
    return rc;
}

/* The unfinished step at the end: completed by repeating the last frame where the program pads
 * its input's end (TAEHV's encoder), else left out as vae_encode leaves it. */
static int finish(vae_session *s, vae_stream *st) {
    const vae_program *p = vae_session_program(s, st->encode);
    if (st->have > 0 && p->pad_end) {
        const size_t fv = frame_vals(st);
        const float *last = st->pending + (size_t)(st->have - 1) * fv;
        for (int n = step_frames(s, st); st->have < n; st->have++)
            memcpy(st->pending + (size_t)st->have * fv, last, fv * sizeof *last);
        return run_step(s, st);
    }
    if (st->have > 0)
        VAE_WARN("stream: the last %d %s frames make no whole step of %d: not used (%s)", st->have,
                 st->encode ? "video" : "latent", step_frames(s, st), s->model->cfg.arch->name);
    if (st->frames_out == 0 && st->base == 0)
        return vae_fail(VAE_ESHAPE,
                        "vae_stream_end: the stream ended before its first step "
                        "(%lld frames pushed; %s takes %d first)",
                        (long long)st->frames_in, s->model->cfg.arch->name, step_frames(s, st));
    return VAE_OK;
}

int vae_stream_end(vae_session *s, vae_frames_fn fn, void *user) {
    vae_error_clear();
    int rc = stream_enter(s, "vae_stream_end");
    if (rc) return rc;
    vae_stream *st = s->stream;
    st->fn = fn, st->user = user;
    rc = finish(s, st);
    if (rc == VAE_OK)
        VAE_INFO("stream: %s of %lld frames into %lld, peak backend memory %.1f MiB",
                 st->encode ? "encode" : "decode", (long long)st->frames_in,
                 (long long)st->frames_out, (double)vae_session_peak_bytes(s) / (1 << 20));
    stream_free(s);
    vae_session_leave(s);
    return rc;
}

int vae_stream_abort(vae_session *s) {
    vae_error_clear();
    if (!s) return vae_fail(VAE_EINVAL, "vae_stream_abort: NULL session");
    const int rc = vae_session_enter(s, "vae_stream_abort");
    if (rc) return rc;
    stream_free(s);
    vae_session_leave(s);
    return VAE_OK;
}

int vae_stream_status(const vae_session *s, int *encode, int64_t *frames_in, int64_t *frames_out) {
    const vae_stream *st = s ? s->stream : NULL;
    if (encode) *encode = st ? st->encode : 0;
    if (frames_in) *frames_in = st ? st->frames_in : 0;
    if (frames_out) *frames_out = st ? st->frames_out : 0;
    return st != NULL;
}
