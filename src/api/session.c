/* session.c -- a model bound to a backend; streams user tensors through the programs. */
#include <math.h>
#include <string.h>

#include "api/api.h"
#include "core/dtype.h"

void vae_session_options_default(vae_session_options *o) {
    memset(o, 0, sizeof *o);
    o->device = VAE_DEVICE_CPU;
    o->dtype = VAE_DTYPE_F32;
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
    vae_session *s = vae_calloc(1, sizeof *s);
    if (!s) return vae_fail(VAE_ENOMEM, "out of memory");
    s->model = m;
    s->opts = o;
    int rc;
    if (o.device == VAE_DEVICE_CPU) {
        rc = vae_cpu_backend_create(&s->be, o.dtype, o.threads);
    } else if (o.device == VAE_DEVICE_CUDA) {
#ifdef VAE_HAVE_CUDA
        rc = vae_cuda_backend_create(&s->be, o.dtype, o.device_index);
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
    VAE_INFO("session: %s backend, %s activations with fp32 accumulation%s", s->be->v->name,
             vae_dtype_name(o.dtype), o.device == VAE_DEVICE_CPU ? " (OpenMP threads)" : "");
    *out = s;
    return VAE_OK;
}

void vae_session_free(vae_session *s) {
    if (!s) return;
    vae_exec_free(s->enc);
    vae_exec_free(s->dec);
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

int vae_session_run(vae_session *s, int encode, const vae_tensor *in, vae_frames_fn fn,
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
    VAE_INFO("%s: %s [%d,%d,%d,%d] in chunks of %d then %d frames, whole %dx%d frames per chunk "
             "(no spatial tiling), %d ops, causal caches kept per op", encode ? "encode" : "decode",
             m->cfg.arch->name, g.c, g.t, g.h, g.w, p->first_chunk, p->chunk, g.h, g.w, p->n_ops);
    vae_exec **ep = encode ? &s->enc : &s->dec;
    if (!*ep && (rc = vae_exec_create(ep, p, s->be))) return rc;
    vae_exec *e = *ep;
    vae_exec_reset(e);
    vae_backend *be = s->be;
    int out_frame = 0;
    /* host seconds spent queueing the chunks' work, and waiting for the device's results: when
     * the wait is short, the host is what limits the speed */
    double t_step = 0, t_wait = 0, t_run = vae_seconds();

    int max_chunk = p->first_chunk > p->chunk ? p->first_chunk : p->chunk;
    int64_t plane = (int64_t)g.h * g.w, frame_vals = plane * g.c;
    float *host_in = vae_malloc((size_t)(max_chunk * frame_vals) * sizeof(float));
    void *dev_in = be->v->alloc(be, (size_t)(max_chunk * frame_vals) * be->elem_size);
    float *host_out = NULL, *planar = NULL;
    size_t out_cap = 0;
    if (!host_in || !dev_in) {
        rc = vae_fail(VAE_ENOMEM, "out of memory for a chunk of %d frames of %dx%dx%d", max_chunk,
                      g.h, g.w, g.c);
        goto done;
    }
    /* Backends with asynchronous planar transfers: the next chunk's input is prepared and the
     * previous chunk's output handed to fn while the device computes (one chunk in flight). */
    const int async = be->v->stage_in && be->v->upload_planar && be->v->download_planar &&
                      be->v->download_wait;
    float *pend = NULL; /* async: the previous chunk's output, [c][t][h][w] */
    int pend_t = 0, pend_c = 0, pend_h = 0, pend_w = 0;
    for (int pos = 0; pos < t_used;) {
        int n = pos == 0 ? p->first_chunk : p->chunk;
        if (async) {
            /* NCTHW user layout -> planar [c][n][h][w]: one run per channel */
            float *stage = be->v->stage_in(be, (size_t)(n * frame_vals) * sizeof(float));
            if (!stage) {
                rc = vae_fail(VAE_ENOMEM, "out of pinned host memory for a chunk of %d frames", n);
                goto done;
            }
            const int64_t run = (int64_t)n * plane;
            for (int c = 0; c < g.c; c++) {
                const int64_t src = ((int64_t)c * g.t + pos) * plane;
                float *dst = stage + c * run;
                int bad = 0;
                if (in->dtype == VAE_DTYPE_F32) {
                    const float *sp = (const float *)in->data + src;
                    for (int64_t i = 0; i < run; i++) {
                        dst[i] = sp[i];
                        bad |= !isfinite(sp[i]);
                    }
                } else {
                    for (int64_t i = 0; i < run; i++) {
                        dst[i] = read_elem(in, src + i);
                        bad |= !isfinite(dst[i]);
                    }
                }
                if (bad)
                    for (int64_t i = 0; i < run; i++)
                        if (!isfinite(dst[i])) {
                            rc = vae_fail(VAE_ENAN,
                                          "%s: NaN or Inf at channel %d, frame %d, pixel %lld",
                                          what, c, pos + (int)(i / plane), (long long)(i % plane));
                            goto done;
                        }
            }
            if ((rc = be->v->upload_planar(be, dev_in, stage, n, g.h, g.w, g.c))) goto done;
        } else {
            /* NCTHW user layout -> [n][h][w][c] channels-last */
            for (int f = 0; f < n; f++)
                for (int c = 0; c < g.c; c++) {
                    const int64_t src = ((int64_t)c * g.t + pos + f) * plane;
                    float *dst = host_in + f * frame_vals + c;
                    for (int64_t i = 0; i < plane; i++) {
                        float v = read_elem(in, src + i);
                        if (!isfinite(v)) {
                            rc = vae_fail(VAE_ENAN,
                                          "%s: NaN or Inf at channel %d, frame %d, pixel %lld",
                                          what, c, pos + f, (long long)i);
                            goto done;
                        }
                        dst[i * g.c] = v;
                    }
                }
            if ((rc = be->v->upload(be, dev_in, host_in, (size_t)(n * frame_vals)))) goto done;
        }
        vae_chunk cin = {dev_in, n, g.h, g.w, g.c}, cout;
        double t0 = vae_seconds();
        if ((rc = vae_exec_step(e, &cin, &cout))) goto done;
        t_step += vae_seconds() - t0;
        pos += n;
        if (async) {
            if (pend) { /* the previous chunk, while this one computes */
                t0 = vae_seconds();
                if ((rc = be->v->download_wait(be, pend))) goto done;
                t_wait += vae_seconds() - t0;
                if (fn && fn(pend, out_frame, pend_t, pend_c, pend_h, pend_w, user)) {
                    rc = vae_fail(VAE_EINTERRUPTED, "%s stopped by the caller after %d frames",
                                  encode ? "encode" : "decode", out_frame + pend_t);
                    goto done;
                }
                out_frame += pend_t;
                pend = NULL;
            }
            if (cout.t > 0) {
                if ((rc = be->v->download_planar(be, cout.data, cout.t, cout.h, cout.w, cout.c,
                                                 &pend)))
                    goto done;
                pend_t = cout.t, pend_c = cout.c, pend_h = cout.h, pend_w = cout.w;
            }
            continue;
        }
        if (cout.t == 0) continue;
        size_t vals = (size_t)cout.t * cout.h * cout.w * cout.c;
        if (vals > out_cap) {
            vae_free(host_out);
            vae_free(planar);
            host_out = vae_malloc(vals * sizeof(float));
            planar = vae_malloc(vals * sizeof(float));
            out_cap = vals;
            if (!host_out || !planar) {
                rc = vae_fail(VAE_ENOMEM, "out of memory for an output chunk");
                goto done;
            }
        }
        if ((rc = be->v->download(be, host_out, cout.data, vals))) goto done;
        /* [t][h][w][c] -> [c][t][h][w] */
        int64_t op = (int64_t)cout.h * cout.w;
        for (int f = 0; f < cout.t; f++)
            for (int64_t i = 0; i < op; i++)
                for (int c = 0; c < cout.c; c++)
                    planar[((int64_t)c * cout.t + f) * op + i] =
                        host_out[((int64_t)f * op + i) * cout.c + c];
        if (fn && fn(planar, out_frame, cout.t, cout.c, cout.h, cout.w, user)) {
            rc = vae_fail(VAE_EINTERRUPTED, "%s stopped by the caller after %d frames",
                          encode ? "encode" : "decode", out_frame + cout.t);
            goto done;
        }
        out_frame += cout.t;
    }
    if (pend) { /* the last chunk */
        if ((rc = be->v->download_wait(be, pend))) goto done;
        if (fn && fn(pend, out_frame, pend_t, pend_c, pend_h, pend_w, user)) {
            rc = vae_fail(VAE_EINTERRUPTED, "%s stopped by the caller after %d frames",
                          encode ? "encode" : "decode", out_frame + pend_t);
            goto done;
        }
        out_frame += pend_t;
    }
done:
    if (rc == VAE_OK)
        VAE_INFO("%s: %d frames out in %.3f s (host: %.3f s queueing chunks, %.3f s waiting for "
                 "the device), peak backend memory %.1f MiB",
                 encode ? "encode" : "decode", out_frame, vae_seconds() - t_run, t_step, t_wait,
                 (double)be->bytes_peak / (1 << 20));
    vae_exec_reset(e);
    vae_free(host_in);
    vae_free(host_out);
    vae_free(planar);
    if (dev_in) be->v->release(be, dev_in);
    return rc;
}

int vae_decode(vae_session *s, const vae_tensor *latent, vae_frames_fn fn, void *user) {
    vae_error_clear();
    if (!s || !latent) return vae_fail(VAE_EINVAL, "vae_decode: NULL argument");
    return vae_session_run(s, 0, latent, fn, user);
}

int vae_encode(vae_session *s, const vae_tensor *video, vae_frames_fn fn, void *user) {
    vae_error_clear();
    if (!s || !video) return vae_fail(VAE_EINVAL, "vae_encode: NULL argument");
    return vae_session_run(s, 1, video, fn, user);
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
    rc = vae_session_run(s, encode, in, collect_frames, &k);
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

/* ---- shapes and cost without computing: a dry run of the program ---------------------------- */
static int dry_run(const vae_model *m, int encode, const int64_t *in_shape, int in_ndim,
                   int64_t *out_shape, int *out_ndim, double *macs) {
    if (!m || !in_shape) return vae_fail(VAE_EINVAL, "NULL argument");
    const vae_program *p = encode ? &m->enc : &m->dec;
    if (p->n_ops == 0)
        return vae_fail(VAE_EUNSUPPORTED, "%s: this checkpoint has no %s", m->path,
                        encode ? "encoder" : "decoder");
    if (in_ndim < 0 || in_ndim > 8) return vae_fail(VAE_ESHAPE, "bad rank %d", in_ndim);
    vae_tensor probe = {.ndim = in_ndim, .dtype = VAE_DTYPE_F32, .data = (void *)1};
    memcpy(probe.shape, in_shape, (size_t)in_ndim * sizeof *in_shape);
    geom g;
    int rc = tensor_geom(&probe, encode ? "encode input video" : "decode input latent",
                         p->in_channels, &g);
    if (rc) return rc;
    vae_exec *e;
    if ((rc = vae_exec_create(&e, p, NULL))) return rc;
    int t_used = frames_used(p, g.t), t_out = 0, h = 0, w = 0, c = p->out_channels;
    for (int pos = 0; pos < t_used && rc == VAE_OK;) {
        int n = pos == 0 ? p->first_chunk : p->chunk;
        vae_chunk cin = {NULL, n, g.h, g.w, g.c}, cout;
        rc = vae_exec_step(e, &cin, &cout);
        if (rc == VAE_OK && cout.t > 0) t_out += cout.t, h = cout.h, w = cout.w;
        pos += n;
    }
    if (macs) *macs = vae_exec_macs(e);
    vae_exec_free(e);
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
