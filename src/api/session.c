/* session.c -- a model bound to a backend; streams user tensors through the programs. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "api/fp8_calibrate.h"
#include "core/dtype.h"
#include "platform/platform.h"
#include "vae_dev.h" /* vae_session_options_set is defined here: exported as declared */

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

/* The tile options: sizes in range, each with the mode it belongs to (the one place they are
 * checked: the CLI and vaec only parse them). */
static int check_tile_options(const vae_session_options *o) {
    const int sides[4] = {o->tile_height, o->tile_width, o->blend_tile, o->blend_overlap};
    static const char *const names[4] = {"tile_height", "tile_width", "blend_tile", "blend_overlap"};
    for (int i = 0; i < 4; i++)
        if (sides[i] < 0 || sides[i] > (1 << 20))
            return vae_fail(VAE_EINVAL, "%s %d px: expected 0 (the planner's choice) to 2^20 (a "
                                        "frame side's largest)", names[i], sides[i]);
    if ((o->tile_height || o->tile_width) && o->tile_mode != VAE_TILE_AUTO)
        return vae_fail(VAE_EINVAL, "a forced tile size (tile_height/tile_width) goes "
                                    "with tile_mode=auto");
    if ((o->blend_tile || o->blend_overlap) && o->tile_mode != VAE_TILE_BLEND)
        return vae_fail(VAE_EINVAL, "blend_tile and blend_overlap are for tile_mode=blend");
    if (o->blend_tile > 0 && o->blend_tile < 16)
        return vae_fail(VAE_EINVAL, "blend_tile %d px: blended tiles are at least 16 px a side",
                        o->blend_tile);
    if (o->blend_tile > 0 && o->blend_overlap * 2 > o->blend_tile)
        return vae_fail(VAE_EINVAL, "blend_overlap %d px is more than half the tile (blend_tile "
                        "%d px)", o->blend_overlap, o->blend_tile);
    return VAE_OK;
}

static int check_options(const vae_session_options *o) {
    if (o->max_memory < 0)
        return vae_fail(VAE_EINVAL, "max_memory %lld is negative", (long long)o->max_memory);
    if (o->tile_mode != VAE_TILE_AUTO && o->tile_mode != VAE_TILE_NONE &&
        o->tile_mode != VAE_TILE_BLEND)
        return vae_fail(VAE_EINVAL, "unknown tile mode %d", (int)o->tile_mode);
    int rc = check_tile_options(o);
    if (rc != VAE_OK) return rc;
    if (!o->dev_alloc != !o->dev_free || (o->dev_pool_free && !o->dev_alloc))
        return vae_fail(VAE_EINVAL, "dev_alloc and dev_free come together (one of them is NULL), "
                        "dev_pool_free only with them");
    if (o->n_devices < 0 || o->n_devices > VAE_MAX_DEVICES)
        return vae_fail(VAE_EINVAL, "n_devices %d: a device group has 1 to %d devices",
                        o->n_devices, VAE_MAX_DEVICES);
    for (int i = 0; i < o->n_devices; i++)
        if (o->devices[i] < 0)
            return vae_fail(VAE_EINVAL, "devices: index %d is negative", o->devices[i]);
    if (o->world < 0 || (o->world > 1 && (o->rank < 0 || o->rank >= o->world)))
        return vae_fail(VAE_EINVAL,
                        "rank %d of world %d: a group of processes has world >= 2 "
                        "ranks, numbered 0 .. world-1",
                        o->rank, o->world);
    if (o->world > 1 && o->n_devices > 1)
        return vae_fail(VAE_EINVAL,
                        "a rank of a group of processes (world %d) runs on one device "
                        "(n_devices %d): one process per GPU",
                        o->world, o->n_devices);
    if (o->group_output != VAE_GROUP_OUTPUT_ALL && o->group_output != VAE_GROUP_OUTPUT_OWN)
        return vae_fail(VAE_EINVAL, "unknown group_output %d", o->group_output);
    if (o->preview < VAE_PREVIEW_NONE || o->preview > VAE_PREVIEW_BOTH)
        return vae_fail(VAE_EINVAL, "preview %d: expected none (0), time (1), space (2) or both "
                        "(3)", o->preview);
    return VAE_OK;
}

int vae_device_available(vae_device d) {
    if (d == VAE_DEVICE_CPU) return 1;
#ifdef VAE_HAVE_CUDA
    if (d == VAE_DEVICE_CUDA) return vae_cuda_available();
#endif
    return 0;
}

/* The backend of one device of the session. CPU lanes of a group share the threads. */
static int lane_create(vae_session *s, int device_index, vae_backend **be) {
    const vae_session_options *o = &s->opts;
    if (o->device == VAE_DEVICE_CPU) {
        int threads = o->threads > 0 ? o->threads : vae_plat_cpu_count();
        if (s->n_lanes > 1) threads = threads / s->n_lanes > 0 ? threads / s->n_lanes : 1;
        return vae_cpu_backend_create(be, o->dtype, s->n_lanes > 1 ? threads : o->threads);
    }
    if (o->device == VAE_DEVICE_CUDA) {
#ifdef VAE_HAVE_CUDA
        const vae_dev_allocator al = {o->dev_alloc, o->dev_free, o->dev_alloc_user,
                                      o->dev_pool_free};
        return vae_cuda_backend_create(be, o->dtype, device_index, &s->set, &al);
#else
        (void)device_index;
        return vae_fail(VAE_EUNSUPPORTED, "device cuda: this build of vae has no CUDA backend "
                                          "(rebuild where nvcc is installed)");
#endif
    }
    return vae_fail(VAE_EINVAL, "unknown device %d", (int)o->device);
}

/* The backend's one-time costs of the session's programs, paid now rather than in the first call
 * (backend.h warm). */
static int lane_warm(vae_backend *be, const vae_session *s) {
    int rc = VAE_OK;
    for (int d = 0; d < 2 && rc == VAE_OK; d++)
        if (be->v->warm && s->prog[d].n_ops > 0 && !s->fp8_pending[d])
            rc = be->v->warm(be, &s->prog[d]); /* (a pending side: vae_session_fp8_ready) */
    return rc;
}

/* The kernel that runs a marked conv of this session in E4M3 (VAE_FP8_NONE: none): lane 0's
 * backend's (every lane of a group has the same kind of device), for a conv of a shape the rule
 * rows of the E4M3 kernels take (op.h vae_op_fp8_kernel, fp8_shapes.h), unless
 * VAE_FP8_SHAPES=wide lets the CPU emulation take every marked conv. */
static int fp8_runs(void *session, const vae_op *op) {
    const vae_session *s = session;
    vae_backend *b = s->be;
    if (!b->v->fp8_conv || (s->set.fp8_shapes != 1 && !vae_op_fp8_kernel(op))) return VAE_FP8_NONE;
    return b->v->fp8_conv(b, op);
}

/* The backend writes the producer's output as E4M3 codes the reader takes (backend.h fp8_codes) */
static int fp8_codes_takes(void *session, const vae_op *producer, const vae_op *reader) {
    vae_backend *b = ((const vae_session *)session)->be;
    return b->v->fp8_codes(b, producer, reader);
}

/* The session's decoder under options.preview: built now from the model's decoder, whose weights
 * it shares (a few dozen ops; no weights copied), so that one model serves full and preview
 * sessions at once. */
static int preview_program(vae_session *s) {
    const vae_model *m = s->model;
    static const char *const kinds[] = {"none", "time", "space", "both"};
    if (!m->cfg.arch->preview)
        return vae_fail(VAE_EUNSUPPORTED, "preview %s: the %s decoder has no preview mode",
                        kinds[s->opts.preview], m->cfg.arch->name);
    int rc = m->cfg.arch->preview(&m->cfg, &m->dec, s->opts.preview, &s->prog[0]);
    if (rc == VAE_OK) vae_program_mark_fp8(&s->prog[0]);
    return rc;
}

/* dtype fp8 with an error budget (VAE_FP8_ERROR, 4e-2 by default) and no VAE_FP8_CONVS: of the
 * convs p's backend runs in E4M3 (marked), those that keep p's output within the budget
 * (fp8_calibrate.h), measured on the CPU emulation at FP8_CALIBRATION_PX pixels a side (2 x 2
 * latents at least): the errors are relative, and a full-size program's ~30 runs cost their
 * pixels (docs/fp8.md: seconds) */
enum { FP8_CALIBRATION_PX = 32 };

static int by_budget(const vae_session *s) {
    return s->opts.dtype == VAE_DTYPE_FP8 && s->set.fp8_convs < 0 && s->set.fp8_error > 0;
}

/* A calibration request with the storage it points into (the pixel range, the cache path) */
typedef struct {
    float pixels[2];
    char cache[1024];
    vae_fp8_request rq;
} fp8_call;

static void fp8_request(const vae_session *s, int encode, fp8_call *fc) {
    const vae_arch *a = s->model->cfg.arch;
    const int f = a->spatial_factor > 0 ? a->spatial_factor : 8;
    const int latents = FP8_CALIBRATION_PX / f > 2 ? FP8_CALIBRATION_PX / f : 2;
    fc->pixels[0] = a->image_min;
    fc->pixels[1] = a->image_max;
    vae_fp8_cache_file(&s->set, fc->cache, sizeof fc->cache);
    fc->rq = (vae_fp8_request){encode ? fc->pixels : NULL, encode ? latents * f : latents,
                               s->set.fp8_error * 1e-4, encode ? 0 : s->opts.preview, &s->set,
                               s->opts.device == VAE_DEVICE_CPU ? s->opts.threads : 0, fc->cache};
}

/* The choice in words, for vae_session_plan's text (vaec's plan()["text"]) */
static void fp8_note(vae_session *s, int encode, const vae_fp8_choice *c, double budget) {
    snprintf(s->fp8_choice[encode ? 1 : 0], sizeof s->fp8_choice[0],
             "; fp8: %d of %d E4M3 candidate convs in E4M3 (error budget %.2e: predicted %.2e, "
             "measured %.2e%s)", c->kept, c->candidates, budget, c->predicted, c->measured,
             c->cached ? ", cached" : "");
}

/* At creation: the cached choice where there is one, else the side waits for its first plan or
 * call (vae_session_fp8_ready): a session that never encodes never calibrates its encoder. */
static void fp8_by_budget(vae_session *s, int encode, int *kept) {
    if (!by_budget(s) || *kept == 0) return;
    fp8_call fc;
    vae_fp8_choice c;
    fp8_request(s, encode, &fc);
    if (vae_fp8_cache_get(&s->prog[encode], &fc.rq, &c)) {
        *kept = c.kept;
        fp8_note(s, encode, &c, fc.rq.budget);
        VAE_INFO("fp8: %d of the %s's %d E4M3 candidate convs in E4M3 (predicted error %.2e, "
                 "%.2e measured on the calibration input; budget %.2e), from the cache in %.2f s",
                 c.kept, encode ? "encoder" : "decoder", c.candidates, c.predicted, c.measured,
                 fc.rq.budget, c.seconds);
    } else {
        s->fp8_pending[encode] = 1;
    }
}

/* The program's last steps once its E4M3 convs are chosen: the RMS norms, then the activations,
 * that alone read a conv's output folded into that conv (vae_program_fuse_norms,
 * vae_program_fuse_acts), where the backend applies them; then the E4M3 convs whose input its
 * producer writes as codes (vae_program_mark_fp8_codes, VAE_FP8_CODES). */
static int program_finish(vae_session *s, int d, int kept, const char *how) {
    int folded = 0, acts = 0, rc;
    if (s->set.exec_fuse_norms && s->be->v->conv_norm &&
        (rc = vae_program_fuse_norms(&s->prog[d], &folded)))
        return rc;
    if (s->set.exec_fuse_acts && s->be->v->conv_act &&
        (rc = vae_program_fuse_acts(&s->prog[d], &acts)))
        return rc;
    if (folded || acts)
        VAE_DEBUG("session: %d RMS norms and %d activations of the %s run inside the conv before "
                  "them",
                  folded, acts, d ? "encoder" : "decoder");
    if (s->opts.dtype == VAE_DTYPE_FP8 && s->set.fp8_codes && s->be->v->fp8_codes) {
        const int codes = vae_program_mark_fp8_codes(&s->prog[d], fp8_codes_takes, s);
        VAE_DEBUG("session: %d E4M3 convs of the %s read the codes their input's producer writes",
                  codes, d ? "encoder" : "decoder");
    }
    if (s->opts.dtype == VAE_DTYPE_FP8 && s->prog[d].n_ops > 0)
        VAE_INFO("session: %d %s convs in E4M3 (%s; VAE_FP8_SHAPES=%s)", kept,
                 d ? "encoder" : "decoder", how, s->set.fp8_shapes ? "wide" : "kernels");
    return VAE_OK;
}

int vae_session_fp8_ready(vae_session *s, int encode) {
    const int d = encode ? 1 : 0;
    if (!s->fp8_pending[d]) return VAE_OK;
    fp8_call fc;
    vae_fp8_choice c;
    fp8_request(s, encode, &fc);
    int rc = vae_fp8_choose(&s->prog[d], &fc.rq, &c);
    if (rc == VAE_OK) rc = program_finish(s, d, c.kept, "the error budget");
    if (rc == VAE_OK) fp8_note(s, encode, &c, fc.rq.budget);
    if (rc) return rc; /* (still pending: the next call tries again) */
    s->fp8_pending[d] = 0;
    for (int k = 0; k < s->n_lanes && rc == VAE_OK; k++) /* lane_warm's, for this side */
        if (s->lane[k]->v->warm) rc = s->lane[k]->v->warm(s->lane[k], &s->prog[d]);
    return rc;
}

/* The session's copies of the model's programs (the decoder: its preview under options.preview);
 * under dtype fp8 the convs it runs in E4M3 (fp8_runs): at most set.fp8_convs of them a program
 * nearest its output, or, with no count (-1), those the error budget set.fp8_error allows
 * (fp8_by_budget; program.h: vae_program_pick_fp8; budget 0: the architecture's count, vae_arch
 * fp8_convs); then program_finish, at once or, where the budget's choice waits, after it. */
static int session_programs(vae_session *s) {
    const vae_program *src[2] = {&s->model->dec, &s->model->enc};
    int any_e4m3 = 0;
    for (int d = 0; d < 2; d++) {
        const int budget = s->set.fp8_convs >= 0 ? s->set.fp8_convs
                           : by_budget(s)        ? 0
                                                 : s->model->cfg.arch->fp8_convs[d];
        char how[32] = "at most all";
        if (budget > 0) snprintf(how, sizeof how, "at most %d", budget);
        int rc = d == 0 && s->opts.preview ? preview_program(s)
                                           : vae_program_copy(src[d], &s->prog[d]);
        if (rc) return rc;
        int kept = vae_program_pick_fp8(&s->prog[d], budget, fp8_runs, s);
        any_e4m3 |= kept > 0;
        fp8_by_budget(s, d, &kept);
        if (!s->fp8_pending[d] &&
            (rc = program_finish(s, d, kept, by_budget(s) ? "the error budget" : how)))
            return rc;
    }
    if (s->opts.dtype == VAE_DTYPE_FP8 && !any_e4m3)
        VAE_WARN("dtype fp8: no conv of this model has an E4M3 shape: it runs in %s",
                 s->opts.device == VAE_DEVICE_CPU ? "fp32" : "bf16");
    return VAE_OK;
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
    vae_model_hold(m);
    s->opts = o;
    vae_settings_default(&s->set);
    if ((rc = vae_settings_resolve(&s->set, &o))) {
        vae_session_free(s); /* (lets go of the model too) */
        return rc;
    }
    /* a device group: the options' devices; else device_index alone */
    s->n_lanes = o.n_devices > 1 ? o.n_devices : 1;
    if (o.n_devices >= 1) o.device_index = s->opts.device_index = o.devices[0];
    for (int k = 0; k < s->n_lanes && rc == VAE_OK; k++)
        rc = lane_create(s, o.n_devices > 1 ? o.devices[k] : o.device_index, &s->lane[k]);
    s->be = s->lane[0];
    if (rc == VAE_OK) rc = session_programs(s);
    for (int k = 0; k < s->n_lanes && rc == VAE_OK; k++)
        rc = lane_warm(s->lane[k], s);
    if (rc == VAE_OK && o.world > 1) rc = vae_session_group_join(s);
    if (rc) {
        vae_session_free(s);
        return rc;
    }
    char desc[1024], group[128] = "";
    vae_settings_describe(&s->set, desc, sizeof desc);
    for (int k = 0, n = 0; s->n_lanes > 1 && k < s->n_lanes; k++)
        n += snprintf(group + n, sizeof group - (size_t)n, "%s%d", k ? "," : "", o.devices[k]);
    VAE_INFO("session: %s backend%s%s, %s with fp32 accumulation%s; budget %s%s; tiles %s",
             s->be->v->name, s->n_lanes > 1 ? " on devices " : "", group,
             o.dtype == VAE_DTYPE_FP8 && o.device == VAE_DEVICE_CPU
                 ? "fp8 convolutions emulated on fp32 activations"
             : o.dtype == VAE_DTYPE_FP8  ? "fp8 convolutions (Hopper kernels) on bf16 activations"
             : o.dtype == VAE_DTYPE_F32  ? "fp32 activations"
             : o.dtype == VAE_DTYPE_BF16 ? "bf16 activations"
                                         : "fp16 activations",
             o.device == VAE_DEVICE_CPU ? " (OpenMP threads)" : "",
             o.max_memory > 0 ? "set" : "free memory minus a margin",
             s->n_lanes > 1 ? " per device" : "",
             o.tile_mode == VAE_TILE_BLEND  ? "blended"
             : o.tile_mode == VAE_TILE_NONE ? "off"
                                            : "exact, as needed");
    VAE_DEBUG("settings: %s", desc); /* ~40 switches: for -v, not a host's console */
    *out = s;
    return VAE_OK;
}

void vae_session_free(vae_session *s) {
    if (!s) return;
    vae_session_stream_drop(s); /* before the runner whose executor it holds */
    vae_session_group_leave(s);
    for (int k = 0; k < VAE_MAX_DEVICES; k++) {
        vae_runner_free(s->runner[0][k]);
        vae_runner_free(s->runner[1][k]);
        if (s->lane[k]) s->lane[k]->v->destroy(s->lane[k]);
    }
    vae_session_memo_drop(s, 0);
    vae_session_memo_drop(s, 1);
    vae_program_free(&s->prog[0]);
    vae_program_free(&s->prog[1]);
    vae_model_release(s->model);
    vae_free(s);
}

/* A session runs one call (decode, encode, plan, trim) at a time: a second one, from another
 * thread, is refused instead of sharing the buffers and the plan of the running one. */
int vae_session_enter(vae_session *s, const char *fn) {
    int idle = 0;
    if (!atomic_compare_exchange_strong(&s->busy, &idle, 1))
        return vae_fail(VAE_EINVAL, "%s: another call is running on this session (one at a time: "
                        "wait for it, stop it with vae_session_cancel, or use a session a thread)",
                        fn);
    return VAE_OK;
}

void vae_session_leave(vae_session *s) {
    atomic_store(&s->busy, 0);
}

/* The calls of this file also wait for an open stream's end: it holds the session's executor,
 * caches and step size between its pushes. */
static int session_enter(vae_session *s, const char *fn) {
    int rc = vae_session_enter(s, fn);
    if (rc == VAE_OK && s->stream) {
        vae_session_leave(s);
        rc = vae_fail(VAE_EINVAL, "%s: a stream is open on this session (vae_stream_begin): end "
                      "it (vae_stream_end) or abort it (vae_stream_abort) first", fn);
    }
    return rc;
}

static void session_leave(vae_session *s) {
    vae_session_leave(s);
}

int64_t vae_session_peak_bytes(const vae_session *s) {
    int64_t peak = 0;
    for (int k = 0; s && k < s->n_lanes; k++)
        if (s->lane[k]->bytes_peak > peak) peak = s->lane[k]->bytes_peak;
    return peak;
}

int vae_session_device_peaks(const vae_session *s, int64_t *peaks, int max) {
    if (!s) return 0;
    for (int k = 0; peaks && k < s->n_lanes && k < max; k++)
        peaks[k] = s->lane[k]->bytes_peak;
    return s->n_lanes;
}

/* ---- the caller's tensors on the host ------------------------------------------------------ */
typedef struct reader {
    const vae_io_view *v;
    const char *what;
} reader;

/* Frames past the input's end (an encoder that pads its input, program.h pad_end) repeat its
 * last frame: done here, where every host read passes, so that the planner, the executor and
 * the caches see one longer input and nothing else knows of the padding. */
static int read_input(void *user, float *dst, int f, int n, vae_span y, vae_span x) {
    const reader *r = user;
    const int rows = y.hi - y.lo, cols = x.hi - x.lo, t = r->v->t;
    if (f + n <= t || f < 0 || t < 1)
        return vae_view_read_host(r->v, r->what, dst, f, n, y.lo, rows, x.lo, cols);
    const int f0 = f < t ? f : t - 1, have = t - f0; /* the frames there are from f, or the last */
    float *tmp = vae_malloc((size_t)r->v->c * have * rows * cols * sizeof *tmp);
    if (!tmp) return vae_fail(VAE_ENOMEM, "out of memory for %d input frames", have);
    int rc = vae_view_read_host(r->v, r->what, tmp, f0, have, y.lo, rows, x.lo, cols);
    const size_t plane = (size_t)rows * cols;
    for (int c = 0; rc == VAE_OK && c < r->v->c; c++) /* planar [c][n][rows][cols] */
        for (int k = 0; k < n; k++) {
            const int src = (f + k < t ? f + k : t - 1) - f0;
            memcpy(dst + ((size_t)c * n + k) * plane, tmp + ((size_t)c * have + src) * plane,
                   plane * sizeof *dst);
        }
    vae_free(tmp);
    return rc;
}

/* Frames [first, first+n) of c x h x w fit the output view v */
static int frames_fit(const vae_io_view *v, int first, int n, int c, int h, int w) {
    return c == v->c && h == v->h && w == v->w && first + n <= v->t;
}

static int write_output(const float *frames, int first, int n, int c, int h, int w, void *user) {
    const vae_io_view *v = user;
    if (!frames_fit(v, first, n, c, h, w)) return 1;
    return vae_view_write_host(v, frames, first, n) != VAE_OK;
}

/* A device output filled frame by frame from the host (a frame rule places the frames). */
typedef struct device_out {
    vae_backend *be;
    const vae_io_view *v;
    float *cl;
    size_t cap;
    int rc; /* the copy's failure (the run reports a stop by its callback) */
} device_out;

static int write_device_output(const float *frames, int first, int n, int c, int h, int w,
                               void *user) {
    device_out *d = user;
    if (!frames_fit(d->v, first, n, c, h, w))
        d->rc = vae_fail(VAE_ESHAPE, "internal: frames [%d, %d) of %dx%dx%d for an output of %d "
                                     "frames of %dx%dx%d", first, first + n, c, h, w, d->v->t,
                         d->v->c, d->v->h, d->v->w);
    else
        d->rc = vae_runner_put_view_frames(d->be, d->v, &d->cl, &d->cap, frames, first, n, c, h, w);
    return d->rc != VAE_OK;
}

/* A tensor's memory must be where the session computes, or the host. */
static int check_device(const vae_session *s, const vae_tensor *x, const char *what) {
    if (x->device == VAE_DEVICE_CPU) return VAE_OK;
    if (s->opts.device != VAE_DEVICE_CUDA || x->device_index != s->opts.device_index)
        return vae_fail(VAE_EINVAL, "%s is in the memory of CUDA device %d, but the session runs "
                        "on %s%s", what, x->device_index,
                        s->opts.device == VAE_DEVICE_CUDA ? "CUDA device " : "the CPU",
                        s->opts.device == VAE_DEVICE_CUDA ? "another index" : "");
    if (!s->be->v->view_import)
        return vae_fail(VAE_EUNSUPPORTED, "%s: the %s backend cannot read device tensors", what,
                        s->be->v->name);
    return VAE_OK;
}

/* One encode/decode: input `in`; output into `out` (a tensor) or to fn (frames as they come). */
typedef struct call {
    const vae_tensor *in, *out;
    vae_frames_fn fn;
    void *user;
    vae_call_options co;
} call;

static int call_views(vae_session *s, int encode, const call *k, vae_io_view *iv, vae_io_view *ov) {
    const vae_model *m = s->model;
    const vae_program *p = vae_session_program(s, encode);
    const char *what = encode ? "encode input video" : "decode input latent";
    const char *what_out = encode ? "encode output latent" : "decode output video";
    if (p->n_ops == 0)
        return vae_fail(VAE_EUNSUPPORTED, "%s: this %s checkpoint has no %s", m->path,
                        m->cfg.arch->name, encode ? "encoder" : "decoder");
    int rc = vae_tensor_view(k->in, what, p->in_channels, iv);
    if (rc == VAE_OK) rc = check_device(s, k->in, what);
    if (rc) return rc;
    if (encode) {
        int f = vae_config_spatial_factor(&m->cfg);
        if (iv->h % f || iv->w % f)
            return vae_fail(VAE_ESHAPE, "%s: size %dx%d is not a multiple of %d (%s)", what, iv->h,
                            iv->w, f, m->cfg.arch->name);
    }
    if (!k->out) return VAE_OK;
    if ((rc = vae_tensor_check(k->out, what_out, 1, k->in))) return rc;
    int64_t want[8] = {0};
    int nd = 0;
    char a[128], b[128];
    if ((rc = vae_session_output_shape(s, encode, k->in->shape, k->in->ndim, want, &nd))) return rc;
    if (k->out->ndim != nd || memcmp(k->out->shape, want, (size_t)nd * sizeof *want) != 0)
        return vae_fail(VAE_ESHAPE, "%s: shape %s, expected %s for input %s", what_out,
                        vae_shape_str(k->out->shape, k->out->ndim, a, sizeof a),
                        vae_shape_str(want, nd, b, sizeof b),
                        vae_shape_str(k->in->shape, k->in->ndim, a + 64, 64));
    rc = vae_tensor_view(k->out, what_out, p->out_channels, ov);
    return rc ? rc : check_device(s, k->out, what_out);
}

/* The devices of a group read the input through the host: a tensor in device memory is copied
 * there first (*host: float32 [c][t][h][w], as the backend's dtype holds it), a frame at a time
 * through device 0. */
static int input_to_host(vae_session *s, const vae_io_view *iv, float **host, vae_io_view *hv) {
    vae_backend *be = s->be;
    const size_t plane = (size_t)iv->h * iv->w, frame = plane * (size_t)iv->c;
    float *h = vae_malloc((size_t)iv->t * frame * sizeof *h), *cl = vae_malloc(frame * sizeof *cl);
    void *dev = be->v->alloc(be, frame * be->elem_size);
    int rc = h && cl && dev ? VAE_OK
                            : vae_fail(VAE_ENOMEM, "out of memory for a host copy of the input "
                                                   "(%d frames of %dx%dx%d)", iv->t, iv->h, iv->w, iv->c);
    for (int f = 0; rc == VAE_OK && f < iv->t; f++) {
        rc = be->v->view_import(be, dev, iv, f, 1, 0, iv->h, 0, iv->w);
        if (rc == VAE_OK) rc = be->v->download(be, cl, dev, frame);
        for (size_t i = 0; rc == VAE_OK && i < plane; i++)
            for (int c = 0; c < iv->c; c++)
                h[((size_t)c * iv->t + f) * plane + i] = cl[i * iv->c + c];
    }
    if (dev) be->v->release(be, dev);
    vae_free(cl);
    if (rc) {
        vae_free(h);
        return rc;
    }
    *host = h;
    *hv = (vae_io_view){h, VAE_DTYPE_F32, iv->c, iv->t, iv->h, iv->w,
                        (int64_t)iv->t * (int64_t)plane, (int64_t)plane, iv->w, 1};
    return VAE_OK;
}

static int session_run(vae_session *s, int encode, const call *k) {
    const vae_model *m = s->model;
    const char *what = encode ? "encode input video" : "decode input latent";
    vae_io_view iv, ov;
    int rc = call_views(s, encode, k, &iv, &ov);
    if (rc) return rc;
    int t_used = vae_session_frames_used(s, encode, iv.t);
    if (t_used < iv.t)
        VAE_WARN("%s: %d frames given, the model uses the first %d (%s takes 1 + %d*k frames)",
                 what, iv.t, t_used, m->cfg.arch->name, (encode ? &m->enc : &m->dec)->chunk);
    const int dev_in = k->in->device == VAE_DEVICE_CUDA;
    const int dev_out = k->out && k->out->device == VAE_DEVICE_CUDA;
    vae_backend *be = s->be;
    if ((dev_in || dev_out) && (rc = be->v->stream_join(be, k->co.cuda_stream, 0))) return rc;
    const double t_check = vae_seconds();
    if (dev_in) { /* checked whole first: a device tensor cannot be checked while it is read */
        int64_t bad = -1;
        if ((rc = be->v->view_finite(be, &iv, &bad))) return rc;
        if (bad >= 0) return vae_view_nan_error(&iv, what, bad);
    }
    float *host_in = NULL; /* a device group's copy of a device input */
    vae_io_view hv;
    /* a frame rule reads its input and places its frames through the host */
    const int framed = vae_session_frame_rule(m, encode, s->opts.preview, NULL);
    const int group_in = dev_in && (s->n_lanes > 1 || framed);
    if (group_in && (rc = input_to_host(s, &iv, &host_in, &hv))) return rc;
    device_out dout = {be, &ov, NULL, 0, VAE_OK};
    /* the group's other devices write a device output without waiting on the caller's stream:
     * what the caller queued before the call is finished first (input_to_host did it already) */
    if (dev_out && s->n_lanes > 1 && !group_in && (rc = be->v->sync(be))) return rc;
    reader rd = {group_in ? &hv : &iv, what};
    vae_frames_fn emit = dev_out && framed ? write_device_output : k->out ? write_output : k->fn;
    void *emit_user = dev_out && framed ? (void *)&dout : k->out ? (void *)&ov : k->user;
    vae_run_io io = {.read = read_input,
                     .read_user = &rd,
                     .in_view = dev_in && !group_in ? &iv : NULL,
                     .emit = emit,
                     .emit_user = emit_user,
                     .out_view = dev_out && !framed ? &ov : NULL,
                     .progress = k->co.progress,
                     .progress_user = k->co.progress_user,
                     .cancel = &s->cancel};
    const double t0 = vae_seconds();
    rc = vae_session_run_framed(s, encode, &iv, &io);
    if (rc && dout.rc) rc = dout.rc; /* (its message is the one kept) */
    vae_free(host_in);
    vae_free(dout.cl);
    if ((dev_in || dev_out)) { /* the caller's stream waits for the engine, even after a failure */
        int rj = be->v->stream_join(be, k->co.cuda_stream, 1);
        if (rc == VAE_OK) rc = rj;
    }
    if (rc == VAE_OK)
        VAE_INFO("%s: done in %.3f s (before it: %.2f ms checking and copying the input), peak "
                 "backend memory %.1f MiB",
                 encode ? "encode" : "decode", vae_seconds() - t0, (t0 - t_check) * 1e3,
                 (double)vae_session_peak_bytes(s) / (1 << 20));
    return rc;
}

/* The geometry of an input shape (no data) for direction `encode` of model m. */
static int shape_geom(const vae_model *m, int encode, const int64_t *shape, int ndim,
                      vae_io_view *g) {
    const vae_program *p = encode ? &m->enc : &m->dec;
    if (p->n_ops == 0)
        return vae_fail(VAE_EUNSUPPORTED, "%s: this checkpoint has no %s", m->path,
                        encode ? "encoder" : "decoder");
    if (ndim < 0 || ndim > 8) return vae_fail(VAE_ESHAPE, "shape of rank %d, expected 4 or 5", ndim);
    vae_tensor probe = vae_tensor_dense(ndim, shape, VAE_DTYPE_F32, (void *)1);
    return vae_tensor_view(&probe, encode ? "encode input video" : "decode input latent",
                           p->in_channels, g);
}

int vae_session_plan(vae_session *s, int encode, const int64_t *shape, int ndim,
                     vae_plan_info *info) {
    vae_error_clear();
    if (!s || !shape || !info) return vae_fail(VAE_EINVAL, "vae_session_plan: NULL argument");
    memset(info, 0, sizeof *info);
    vae_io_view g;
    int rc = shape_geom(s->model, encode, shape, ndim, &g);
    if (rc) return rc;
    if ((rc = session_enter(s, "vae_session_plan"))) return rc;
    vae_plan plan;
    rc = vae_session_plan_make(s, encode, &g, &plan);
    session_leave(s);
    if (rc && rc != VAE_ENOMEM) return rc;
    info->order = (vae_plan_order)plan.kind;
    info->tiles_y = plan.tiles_y, info->tiles_x = plan.tiles_x;
    info->tile_height = plan.tile_h, info->tile_width = plan.tile_w;
    info->frame_loops = plan.part[1].n_loops;
    info->strips = plan.strips ? plan.strips->n : 0;
    info->step_frames = vae_session_program(s, encode)->chunk;
    info->peak_bytes = plan.peak, info->floor_bytes = plan.floor, info->budget_bytes = plan.budget;
    info->flops = 2 * plan.macs;
    info->host_caches = plan.n_offload, info->host_cache_bytes = plan.host_caches;
    snprintf(info->text, sizeof info->text, "%s%s", plan.why, s->fp8_choice[encode ? 1 : 0]);
    vae_plan_free(&plan);
    return rc;
}

void vae_call_options_default(vae_call_options *o) { memset(o, 0, sizeof *o); }

size_t vae_struct_size(const char *name) {
    static const struct {
        const char *name;
        size_t size;
    } sizes[] = {{"vae_tensor", sizeof(vae_tensor)},
                 {"vae_session_options", sizeof(vae_session_options)},
                 {"vae_model_options", sizeof(vae_model_options)},
                 {"vae_model_info", sizeof(vae_model_info)},
                 {"vae_call_options", sizeof(vae_call_options)},
                 {"vae_plan_info", sizeof(vae_plan_info)},
                 {"vae_device_info", sizeof(vae_device_info)}};
    for (size_t i = 0; name && i < sizeof sizes / sizeof *sizes; i++)
        if (strcmp(name, sizes[i].name) == 0) return sizes[i].size;
    return 0;
}

static int session_call(vae_session *s, int encode, const vae_tensor *in, const vae_tensor *out,
                        vae_frames_fn fn, void *user, const vae_call_options *co) {
    vae_error_clear();
    if (!s || !in) return vae_fail(VAE_EINVAL, "vae_%s: NULL argument", encode ? "encode" : "decode");
    const char *fn_name = out ? (encode ? "vae_encode_into" : "vae_decode_into")
                              : (encode ? "vae_encode" : "vae_decode");
    int rc = session_enter(s, fn_name);
    if (rc) return rc;
    atomic_store(&s->cancel, 0);
    call k = {in, out, fn, user, {0}};
    if (co) k.co = *co;
    rc = session_run(s, encode, &k);
    session_leave(s);
    if (rc == VAE_OK) vae_error_clear(); /* nothing a recovered fallback said stays behind */
    return rc;
}

int vae_decode(vae_session *s, const vae_tensor *latent, vae_frames_fn fn, void *user) {
    return session_call(s, 0, latent, NULL, fn, user, NULL);
}

int vae_encode(vae_session *s, const vae_tensor *video, vae_frames_fn fn, void *user) {
    return session_call(s, 1, video, NULL, fn, user, NULL);
}

int vae_decode_into(vae_session *s, const vae_tensor *latent, const vae_tensor *out,
                    const vae_call_options *co) {
    if (!out) return vae_fail(VAE_EINVAL, "vae_decode_into: NULL output");
    return session_call(s, 0, latent, out, NULL, NULL, co);
}

int vae_encode_into(vae_session *s, const vae_tensor *video, const vae_tensor *out,
                    const vae_call_options *co) {
    if (!out) return vae_fail(VAE_EINVAL, "vae_encode_into: NULL output");
    return session_call(s, 1, video, out, NULL, NULL, co);
}

void vae_session_cancel(vae_session *s) {
    if (s) atomic_store(&s->cancel, 1);
}

int vae_session_trim(vae_session *s) {
    vae_error_clear();
    if (!s) return vae_fail(VAE_EINVAL, "vae_session_trim: NULL session");
    int rc = session_enter(s, "vae_session_trim");
    if (rc) return rc;
    for (int d = 0; d < 2; d++) {
        for (int k = 0; k < VAE_MAX_DEVICES; k++)
            vae_runner_trim(s->runner[d][k]);
        vae_session_memo_drop(s, d); /* (its tiles: host memory, given back too) */
    }
    for (int k = 0; k < s->n_lanes && rc == VAE_OK; k++)
        if (s->lane[k]->v->trim) rc = s->lane[k]->v->trim(s->lane[k]);
    session_leave(s);
    return rc;
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
        int64_t shape5[5] = {1, c, k->t_total, h, w}, shape4[4] = {1, c, h, w};
        void *data = vae_calloc((size_t)c * k->t_total * h * w, sizeof(float));
        if (!data) return 1;
        *o = vae_tensor_dense(k->four_d ? 4 : 5, k->four_d ? shape4 : shape5, VAE_DTYPE_F32, data);
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
    if (in->device != VAE_DEVICE_CPU)
        return vae_fail(VAE_EINVAL, "vae_%s_tensor: the input must be in host memory (device "
                        "tensors: vae_%s_into)", encode ? "encode" : "decode",
                        encode ? "encode" : "decode");
    memset(out, 0, sizeof *out);
    int64_t oshape[8] = {0};
    int ond = 0;
    int rc = vae_session_output_shape(s, encode, in->shape, in->ndim, oshape, &ond);
    if (rc) return rc;
    collect k = {out, ond == 5 ? (int)oshape[2] : 1, ond == 4};
    rc = session_call(s, encode, in, NULL, collect_frames, &k, NULL);
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
/* p: the model's program of that direction, or a session's (its preview decoder, `preview`) */
static int dry_run(const vae_model *m, const vae_program *p, int encode, int preview,
                   const int64_t *in_shape, int in_ndim, int64_t *out_shape, int *out_ndim,
                   double *macs) {
    if (!in_shape) return vae_fail(VAE_EINVAL, "NULL argument");
    vae_io_view g;
    int rc = shape_geom(m, encode, in_shape, in_ndim, &g);
    if (rc) return rc;
    int t_out = 0, h = 0, w = 0, c = p->out_channels;
    vae_frame_rule rule;
    if (vae_session_frame_rule(m, encode, preview, &rule))
        rc = vae_frame_rule_shape(&rule, encode, p, g.t, g.h, g.w, &t_out, &h, &w, macs);
    else
        rc = vae_plan_walk(p, vae_frames_used(p, g.t), g.h, g.w, &t_out, &h, &w, macs);
    if (rc) return rc;
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
    vae_error_clear();
    if (!out_shape || !out_ndim || !m)
        return vae_fail(VAE_EINVAL, "vae_model_output_shape: NULL argument");
    return dry_run(m, encode ? &m->enc : &m->dec, encode, 0, in_shape, in_ndim, out_shape,
                   out_ndim, NULL);
}

int vae_session_output_shape(const vae_session *s, int encode, const int64_t *in_shape,
                             int in_ndim, int64_t *out_shape, int *out_ndim) {
    vae_error_clear();
    if (!s || !out_shape || !out_ndim)
        return vae_fail(VAE_EINVAL, "vae_session_output_shape: NULL argument");
    const vae_program q = vae_session_shape_program(s, encode);
    return dry_run(s->model, &q, encode, s->opts.preview, in_shape, in_ndim, out_shape, out_ndim,
                   NULL);
}

int vae_model_flops(const vae_model *m, int encode, const int64_t *in_shape, int in_ndim,
                    double *flops) {
    vae_error_clear();
    if (!flops) return vae_fail(VAE_EINVAL, "vae_model_flops: NULL argument");
    double macs = 0;
    if (!m) return vae_fail(VAE_EINVAL, "vae_model_flops: NULL model");
    int rc = dry_run(m, encode ? &m->enc : &m->dec, encode, 0, in_shape, in_ndim, NULL, NULL, &macs);
    *flops = 2 * macs;
    return rc;
}
