/* session.c -- a model bound to a backend; streams user tensors through the programs. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "core/dtype.h"

void vae_session_options_default(vae_session_options *o) {
    memset(o, 0, sizeof *o);
    o->device = VAE_DEVICE_CPU;
    o->dtype = VAE_DTYPE_F32;
    o->tile_mode = VAE_TILE_AUTO;
}

int vae_session_options_set(vae_session_options *o, vae_param p, int64_t value) {
    vae_error_clear();
    if (!o) return vae_fail(VAE_EINVAL, "vae_session_options_set: NULL options");
    int rc = vae_param_check(p, value);
    if (rc) return rc;
    o->params[p] = value;
    o->params_set |= 1ull << p;
    return VAE_OK;
}

static int check_options(const vae_session_options *o) {
    if (o->max_memory < 0)
        return vae_fail(VAE_EINVAL, "max_memory %lld is negative", (long long)o->max_memory);
    if (o->tile_mode != VAE_TILE_AUTO && o->tile_mode != VAE_TILE_NONE &&
        o->tile_mode != VAE_TILE_BLEND)
        return vae_fail(VAE_EINVAL, "unknown tile mode %d", (int)o->tile_mode);
    if (o->tile_height < 0 || o->tile_width < 0 || o->blend_tile < 0 || o->blend_overlap < 0)
        return vae_fail(VAE_EINVAL, "negative tile size (%d x %d, blend %d, overlap %d)",
                        o->tile_height, o->tile_width, o->blend_tile, o->blend_overlap);
    if (o->blend_tile > 0 && o->blend_overlap * 2 > o->blend_tile)
        return vae_fail(VAE_EINVAL, "blend overlap %d px is more than half the tile (%d px)",
                        o->blend_overlap, o->blend_tile);
    if ((o->tile_height || o->tile_width) && o->tile_mode != VAE_TILE_AUTO)
        return vae_fail(VAE_EINVAL, "a forced exact tile size needs the auto (exact) tile mode");
    return VAE_OK;
}

const char *vae_dtype_name(vae_dtype d) {
    switch (d) {
    case VAE_DTYPE_F32: return "fp32";
    case VAE_DTYPE_F16: return "fp16";
    case VAE_DTYPE_BF16: return "bf16";
    }
    return "?";
}

int vae_device_available(vae_device d) {
    if (d == VAE_DEVICE_CPU) return 1;
#ifdef VAE_HAVE_CUDA
    if (d == VAE_DEVICE_CUDA) return vae_cuda_available();
#endif
    return 0;
}

int vae_session_create(vae_session **out, const vae_model *m, const vae_session_options *opts) {
    vae_error_clear();
    if (!out || !m) return vae_fail(VAE_EINVAL, "vae_session_create: NULL argument");
    *out = NULL;
    vae_session_options o;
    if (opts) o = *opts;
    else vae_session_options_default(&o);
    int rc = check_options(&o);
    if (rc) return rc;
    vae_session *s = vae_calloc(1, sizeof *s);
    if (!s) return vae_fail(VAE_ENOMEM, "out of memory");
    s->model = m;
    s->opts = o;
    vae_settings_default(&s->set);
    if ((rc = vae_settings_resolve(&s->set, &o))) {
        vae_free(s);
        return rc;
    }
    if (o.device == VAE_DEVICE_CPU) {
        rc = vae_cpu_backend_create(&s->be, o.dtype, o.threads);
    } else if (o.device == VAE_DEVICE_CUDA) {
#ifdef VAE_HAVE_CUDA
        rc = vae_cuda_backend_create(&s->be, o.dtype, o.device_index, &s->set);
#else
        rc = vae_fail(VAE_EUNSUPPORTED, "device cuda: this build of vae has no CUDA backend "
                                        "(rebuild where nvcc is installed)");
#endif
    } else {
        rc = vae_fail(VAE_EINVAL, "unknown device %d", (int)o.device);
    }
    if (rc) {
        vae_free(s);
        return rc;
    }
    char desc[1024];
    vae_settings_describe(&s->set, desc, sizeof desc);
    VAE_INFO("session: %s backend, %s activations with fp32 accumulation%s; budget %s; tiles %s",
             s->be->v->name, vae_dtype_name(o.dtype),
             o.device == VAE_DEVICE_CPU ? " (OpenMP threads)" : "",
             o.max_memory > 0 ? "set" : "free memory minus a margin",
             o.tile_mode == VAE_TILE_BLEND ? "blended" : o.tile_mode == VAE_TILE_NONE ? "off"
                                                                                : "exact, as needed");
    VAE_INFO("settings: %s", desc);
    *out = s;
    return VAE_OK;
}

void vae_session_free(vae_session *s) {
    if (!s) return;
    vae_runner_free(s->enc);
    vae_runner_free(s->dec);
    if (s->be) s->be->v->destroy(s->be);
    vae_free(s);
}

int64_t vae_session_peak_bytes(const vae_session *s) { return s && s->be ? s->be->bytes_peak : 0; }

static float read_elem(const vae_tensor *t, int64_t i) {
    switch (t->dtype) {
    case VAE_DTYPE_F16: return vae_f16_to_f32(((const uint16_t *)t->data)[i]);
    case VAE_DTYPE_BF16: return vae_bf16_to_f32(((const uint16_t *)t->data)[i]);
    default: return ((const float *)t->data)[i];
    }
}

/* Geometry of a user tensor: [1,C,T,H,W] or [1,C,H,W] (one frame). */
typedef struct geom {
    int c, t, h, w;
} geom;

static int tensor_geom(const vae_tensor *x, const char *what, int channels, geom *g) {
    char sb[128];
    if (!x->data) return vae_fail(VAE_EINVAL, "%s: tensor has no data", what);
    if (x->dtype != VAE_DTYPE_F32 && x->dtype != VAE_DTYPE_F16 && x->dtype != VAE_DTYPE_BF16)
        return vae_fail(VAE_EDTYPE, "%s: dtype %d is not float32, float16 or bfloat16", what,
                        (int)x->dtype);
    if ((x->ndim != 5 && x->ndim != 4) || x->shape[0] != 1)
        return vae_fail(VAE_ESHAPE, "%s: shape %s, expected [1,%d,T,H,W] or [1,%d,H,W]", what,
                        vae_shape_str(x->shape, x->ndim, sb, sizeof sb), channels, channels);
    for (int i = 0; i < x->ndim; i++)
        if (x->shape[i] <= 0 || x->shape[i] > (1 << 20))
            return vae_fail(VAE_ESHAPE, "%s: shape %s has an empty or huge dimension", what,
                            vae_shape_str(x->shape, x->ndim, sb, sizeof sb));
    g->c = (int)x->shape[1];
    g->t = x->ndim == 5 ? (int)x->shape[2] : 1;
    g->h = (int)x->shape[x->ndim - 2];
    g->w = (int)x->shape[x->ndim - 1];
    if (g->c != channels)
        return vae_fail(VAE_ESHAPE, "%s: shape %s has %d channels, the model expects %d", what,
                        vae_shape_str(x->shape, x->ndim, sb, sizeof sb), g->c, channels);
    return VAE_OK;
}

/* How many input frames a program consumes: the first chunk, then whole chunks. */
static int frames_used(const vae_program *p, int t) {
    if (t < p->first_chunk) return 0;
    return p->first_chunk + (t - p->first_chunk) / p->chunk * p->chunk;
}

/* ---- reading the user's tensor ------------------------------------------------------------------ */
typedef struct reader {
    const vae_tensor *in;
    geom g;
    const char *what;
} reader;

/* planar float32 [c][n][rows][cols] <- frames [f, f+n), rows y, columns x of the NCTHW tensor,
 * every value checked finite */
static int read_input(void *user, float *dst, int f, int n, vae_span y, vae_span x) {
    const reader *r = user;
    const vae_tensor *in = r->in;
    const int64_t plane = (int64_t)r->g.h * r->g.w, rows = y.hi - y.lo, cols = x.hi - x.lo;
    for (int c = 0; c < r->g.c; c++)
        for (int j = 0; j < n; j++)
            for (int64_t yy = 0; yy < rows; yy++) {
                const int64_t src = ((int64_t)c * r->g.t + f + j) * plane + (y.lo + yy) * r->g.w + x.lo;
                float *d = dst + (((int64_t)c * n + j) * rows + yy) * cols;
                int bad = 0;
                if (in->dtype == VAE_DTYPE_F32) {
                    const float *sp = (const float *)in->data + src;
                    for (int64_t i = 0; i < cols; i++) bad |= !isfinite(d[i] = sp[i]);
                } else {
                    for (int64_t i = 0; i < cols; i++) bad |= !isfinite(d[i] = read_elem(in, src + i));
                }
                for (int64_t i = 0; bad && i < cols; i++)
                    if (!isfinite(d[i]))
                        return vae_fail(VAE_ENAN, "%s: NaN or Inf at channel %d, frame %d, pixel "
                                        "%lld", r->what, c, f + j,
                                        (long long)((y.lo + yy) * r->g.w + x.lo + i));
            }
    return VAE_OK;
}

/* ---- planning ------------------------------------------------------------------------------------ */
/* The budget: the option, else what the device has available minus a margin (0: unknown). */
static int64_t session_budget(const vae_session *s, int64_t avail) {
    if (s->opts.max_memory > 0) return s->opts.max_memory;
    if (avail <= 0) return 0;
    int64_t margin = ((int64_t)256 << 20) + avail / 20;
    return avail > 2 * margin ? avail - margin : avail / 2;
}

static int session_plan(vae_session *s, int encode, const geom *g, vae_plan *plan) {
    const vae_model *m = s->model;
    const vae_program *p = encode ? &m->enc : &m->dec;
    vae_backend *be = s->be;
    int64_t avail = 0, reserve = 0, scratch = 0;
    int rc = be->v->mem_info ? be->v->mem_info(be, p, &avail, &reserve, &scratch) : VAE_OK;
    if (rc) return rc;
    const vae_session_options *o = &s->opts;
    vae_plan_request rq = {
        .prog = p, .encode = encode, .t = frames_used(p, g->t), .h = g->h, .w = g->w,
        .elem = be->elem_size, .budget = session_budget(s, avail),
        .fixed = reserve + s->model_error[encode], .conv_upsample = be->v->conv_upsample,
        .round = be->v->alloc_size, .scratch_need = be->v->scratch_need, .be = be,
        .scratch_now = scratch, .planar_io = be->v->stage_in != NULL,
        .mode = o->tile_mode, .tile_h = o->tile_height, .tile_w = o->tile_width,
        .blend_tile = o->blend_tile > 0 ? o->blend_tile : 512,
        .video_factor = vae_config_spatial_factor(&m->cfg), .frame_loops = s->set.exec_frames};
    rq.blend_overlap = o->blend_overlap > 0 ? o->blend_overlap : rq.blend_tile / 8;
    return vae_plan_make(plan, &rq);
}

static int run_once(vae_session *s, int encode, const vae_tensor *in, const geom *g,
                    const vae_plan *plan, vae_frames_fn fn, void *user, int *emitted) {
    const vae_program *p = encode ? &s->model->enc : &s->model->dec;
    vae_runner **rp = encode ? &s->enc : &s->dec;
    int rc = *rp ? VAE_OK : vae_runner_create(rp, s->be, p, &s->set);
    if (rc == VAE_OK && s->be->v->scratch_reserve) /* grown now, not in the middle of a graph */
        rc = s->be->v->scratch_reserve(s->be, (size_t)plan->scratch);
    if (rc) return rc;
    reader rd = {in, *g, encode ? "encode input video" : "decode input latent"};
    return vae_runner_run(*rp, plan, read_input, &rd, fn, user, emitted);
}

static int session_run(vae_session *s, int encode, const vae_tensor *in, vae_frames_fn fn,
                       void *user) {
    const vae_model *m = s->model;
    const vae_program *p = encode ? &m->enc : &m->dec;
    const char *what = encode ? "encode input video" : "decode input latent";
    if (p->n_ops == 0)
        return vae_fail(VAE_EUNSUPPORTED, "%s: this %s checkpoint has no %s", m->path,
                        m->cfg.arch->name, encode ? "encoder" : "decoder");
    geom g;
    int rc = tensor_geom(in, what, p->in_channels, &g);
    if (rc) return rc;
    if (encode) {
        int f = vae_config_spatial_factor(&m->cfg);
        if (g.h % f || g.w % f)
            return vae_fail(VAE_ESHAPE, "%s: size %dx%d is not a multiple of %d (%s)", what, g.h,
                            g.w, f, m->cfg.arch->name);
    }
    int t_used = frames_used(p, g.t);
    if (t_used < g.t)
        VAE_WARN("%s: %d frames given, the model uses the first %d (%s takes 1 + %d*k frames)",
                 what, g.t, t_used, m->cfg.arch->name, p->chunk);
    double t0 = vae_seconds();
    int64_t *model_error = &s->model_error[encode];
    for (int attempt = 0;; attempt++) {
        vae_plan plan;
        if ((rc = session_plan(s, encode, &g, &plan))) return rc;
        VAE_INFO("plan: %s", plan.why);
        int emitted = 0;
        vae_backend *be = s->be;
        be->limit = plan.budget; /* the backend refuses to go over it */
        be->bytes_peak = be->bytes_in_use;
        rc = run_once(s, encode, in, &g, &plan, fn, user, &emitted);
        be->limit = 0;
        /* what the model missed (the backend's own temporaries, allocator effects): later
         * plans of this session add it */
        const int64_t modelled = plan.peak - *model_error, missed = be->bytes_peak - modelled;
        const int retry = rc == VAE_ENOMEM && emitted == 0 && attempt < 2 && plan.budget > 0 &&
                          s->opts.tile_mode != VAE_TILE_NONE;
        if (missed > *model_error) *model_error = missed;
        if (retry && plan.budget - modelled + plan.budget / 20 > *model_error)
            *model_error = plan.budget - modelled + plan.budget / 20;
        vae_plan_free(&plan);
        if (!retry) break;
        VAE_WARN("%s: %s; planning again with %.1f MiB more for what the memory model misses",
                 encode ? "encode" : "decode", vae_last_error(),
                 (double)*model_error / (1 << 20));
        vae_error_clear();
    }
    if (rc == VAE_OK)
        VAE_INFO("%s: done in %.3f s, peak backend memory %.1f MiB", encode ? "encode" : "decode",
                 vae_seconds() - t0, (double)s->be->bytes_peak / (1 << 20));
    return rc;
}

/* The geometry of an input shape (no data) for direction `encode` of model m. */
static int shape_geom(const vae_model *m, int encode, const int64_t *shape, int ndim, geom *g) {
    const vae_program *p = encode ? &m->enc : &m->dec;
    if (p->n_ops == 0)
        return vae_fail(VAE_EUNSUPPORTED, "%s: this checkpoint has no %s", m->path,
                        encode ? "encoder" : "decoder");
    if (ndim < 0 || ndim > 8) return vae_fail(VAE_ESHAPE, "bad rank %d", ndim);
    vae_tensor probe = {.ndim = ndim, .dtype = VAE_DTYPE_F32, .data = (void *)1};
    memcpy(probe.shape, shape, (size_t)ndim * sizeof *shape);
    return tensor_geom(&probe, encode ? "encode input video" : "decode input latent",
                       p->in_channels, g);
}

int vae_session_plan(vae_session *s, int encode, const int64_t *shape, int ndim,
                     vae_plan_info *info) {
    vae_error_clear();
    if (!s || !shape || !info) return vae_fail(VAE_EINVAL, "vae_session_plan: NULL argument");
    memset(info, 0, sizeof *info);
    geom g;
    int rc = shape_geom(s->model, encode, shape, ndim, &g);
    vae_plan plan;
    if (rc == VAE_OK) rc = session_plan(s, encode, &g, &plan);
    if (rc && rc != VAE_ENOMEM) return rc;
    info->order = (vae_plan_order)plan.kind;
    info->tiles_y = plan.tiles_y, info->tiles_x = plan.tiles_x;
    info->tile_height = plan.tile_h, info->tile_width = plan.tile_w;
    info->frame_loops = plan.part[1].n_loops;
    info->peak_bytes = plan.peak, info->floor_bytes = plan.floor, info->budget_bytes = plan.budget;
    info->flops = 2 * plan.macs;
    snprintf(info->text, sizeof info->text, "%s", plan.why);
    vae_plan_free(&plan);
    return rc;
}

int vae_decode(vae_session *s, const vae_tensor *latent, vae_frames_fn fn, void *user) {
    vae_error_clear();
    if (!s || !latent) return vae_fail(VAE_EINVAL, "vae_decode: NULL argument");
    return session_run(s, 0, latent, fn, user);
}

int vae_encode(vae_session *s, const vae_tensor *video, vae_frames_fn fn, void *user) {
    vae_error_clear();
    if (!s || !video) return vae_fail(VAE_EINVAL, "vae_encode: NULL argument");
    return session_run(s, 1, video, fn, user);
}

/* ---- whole-tensor convenience --------------------------------------------------------------- */
typedef struct collect {
    vae_tensor *out;
    int t_total, four_d;
} collect;

static int collect_frames(const float *frames, int first, int n, int c, int h, int w, void *user) {
    collect *k = user;
    vae_tensor *o = k->out;
    if (!o->data) {
        o->ndim = k->four_d ? 4 : 5;
        int64_t shape5[5] = {1, c, k->t_total, h, w}, shape4[4] = {1, c, h, w};
        memcpy(o->shape, k->four_d ? shape4 : shape5, (size_t)o->ndim * sizeof(int64_t));
        o->dtype = VAE_DTYPE_F32;
        o->data = vae_calloc((size_t)c * k->t_total * h * w, sizeof(float));
        if (!o->data) return 1;
    }
    if (first + n > k->t_total) return 1;
    int64_t plane = (int64_t)h * w;
    for (int ch = 0; ch < c; ch++)
        memcpy((float *)o->data + ((int64_t)ch * k->t_total + first) * plane,
               frames + (int64_t)ch * n * plane, (size_t)(n * plane) * sizeof(float));
    return 0;
}

static int run_tensor(vae_session *s, int encode, const vae_tensor *in, vae_tensor *out) {
    vae_error_clear();
    if (!s || !in || !out) return vae_fail(VAE_EINVAL, "NULL argument");
    memset(out, 0, sizeof *out);
    int64_t oshape[8] = {0};
    int ond = 0;
    int rc = vae_model_output_shape(s->model, encode, in->shape, in->ndim, oshape, &ond);
    if (rc) return rc;
    collect k = {out, ond == 5 ? (int)oshape[2] : 1, ond == 4};
    rc = session_run(s, encode, in, collect_frames, &k);
    if (rc == VAE_EINTERRUPTED && !out->data) rc = vae_fail(VAE_ENOMEM, "out of memory for output");
    if (rc) vae_tensor_free(out);
    return rc;
}

int vae_decode_tensor(vae_session *s, const vae_tensor *latent, vae_tensor *out) {
    return run_tensor(s, 0, latent, out);
}

int vae_encode_tensor(vae_session *s, const vae_tensor *video, vae_tensor *out) {
    return run_tensor(s, 1, video, out);
}

void vae_tensor_free(vae_tensor *t) {
    if (!t) return;
    vae_free(t->data);
    memset(t, 0, sizeof *t);
}

/* ---- shapes and cost without computing: the planner's walk ------------------------------------ */
static int dry_run(const vae_model *m, int encode, const int64_t *in_shape, int in_ndim,
                   int64_t *out_shape, int *out_ndim, double *macs) {
    if (!m || !in_shape) return vae_fail(VAE_EINVAL, "NULL argument");
    const vae_program *p = encode ? &m->enc : &m->dec;
    geom g;
    int rc = shape_geom(m, encode, in_shape, in_ndim, &g);
    if (rc) return rc;
    int t_out = 0, h = 0, w = 0, c = p->out_channels;
    if ((rc = vae_plan_walk(p, frames_used(p, g.t), g.h, g.w, &t_out, &h, &w, macs))) return rc;
    if (t_out == 0) return vae_fail(VAE_ESHAPE, "input gives no output frames");
    if (in_ndim == 4 && t_out != 1) return vae_fail(VAE_ESHAPE, "4-D input gave %d frames", t_out);
    if (out_shape) {
        int64_t s5[5] = {1, c, t_out, h, w}, s4[4] = {1, c, h, w};
        memcpy(out_shape, in_ndim == 5 ? s5 : s4, (size_t)in_ndim * sizeof(int64_t));
        *out_ndim = in_ndim;
    }
    return VAE_OK;
}

int vae_model_output_shape(const vae_model *m, int encode, const int64_t *in_shape, int in_ndim,
                           int64_t *out_shape, int *out_ndim) {
    if (!out_shape || !out_ndim) return vae_fail(VAE_EINVAL, "vae_model_output_shape: NULL argument");
    return dry_run(m, encode, in_shape, in_ndim, out_shape, out_ndim, NULL);
}

int vae_model_flops(const vae_model *m, int encode, const int64_t *in_shape, int in_ndim,
                    double *flops) {
    vae_error_clear();
    if (!flops) return vae_fail(VAE_EINVAL, "vae_model_flops: NULL argument");
    double macs = 0;
    int rc = dry_run(m, encode, in_shape, in_ndim, NULL, NULL, &macs);
    *flops = 2 * macs;
    return rc;
}
