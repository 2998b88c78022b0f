/* fp8_calibrate.c -- dtype fp8: the E4M3 convs chosen by an error budget (fp8_calibrate.h). */
#include "api/fp8_calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/core.h"
#include "core/executor.h"

/* The emulation's prepared convs (their packed, perhaps E4M3-rounded weights) kept across the
 * calibration's runs: each run is an executor of its own (over a slice of the program), which
 * prepares every op, and packing a full-size decoder's weights cost a third of a run at the
 * calibration's size; with them kept, each conv is packed at most twice (without and with
 * E4M3). The backend's table is replaced by this copy, whose prepare looks the state up by the
 * conv's weights (slices share them) and whose unprepare keeps it. */
typedef struct memo_vtbl {
    vae_backend_vtbl v; /* first: the backend's own, prepare and unprepare replaced */
    const vae_backend_vtbl *own;
    const vae_op *ops; /* the work program's */
    int n_ops;
    void **prep; /* [2][n_ops]: op i's state without, with E4M3 */
} memo_vtbl;

/* The work program's conv that op is (a slice's copy of it: the same weights and name), -1 */
static int memo_find(const memo_vtbl *m, const vae_op *op) {
    for (int i = 0; op->kind == VAE_OP_CONV && i < m->n_ops; i++)
        if (m->ops[i].kind == VAE_OP_CONV && m->ops[i].w == op->w &&
            strcmp(m->ops[i].name, op->name) == 0)
            return i;
    return -1;
}

static int memo_prepare(vae_backend *be, const vae_op *op, void **state) {
    const memo_vtbl *m = (const memo_vtbl *)(const void *)be->v;
    const int i = memo_find(m, op);
    if (i < 0) return m->own->prepare(be, op, state);
    void **slot = &m->prep[(size_t)vae_op_fp8(op) * (size_t)m->n_ops + (size_t)i];
    int rc = *slot ? VAE_OK : m->own->prepare(be, op, slot);
    *state = *slot;
    return rc;
}

static void memo_unprepare(vae_backend *be, const vae_op *op, void *state) {
    const memo_vtbl *m = (const memo_vtbl *)(const void *)be->v;
    if (memo_find(m, op) < 0) m->own->unprepare(be, op, state); /* else kept until memo_close */
}

static int memo_open(memo_vtbl *m, vae_backend *be, const vae_program *work) {
    *m = (memo_vtbl){*be->v, be->v, work->ops, work->n_ops, NULL};
    if (!(m->prep = vae_calloc(2 * (size_t)work->n_ops + 1, sizeof *m->prep)))
        return vae_fail(VAE_ENOMEM, "fp8 calibration: out of memory");
    m->v.prepare = memo_prepare;
    m->v.unprepare = memo_unprepare;
    be->v = &m->v;
    return VAE_OK;
}

static void memo_close(memo_vtbl *m, vae_backend *be) {
    if (!m->own) return;
    be->v = m->own;
    for (int k = 0; m->prep && k < 2 * m->n_ops; k++)
        if (m->prep[k]) m->own->unprepare(be, &m->ops[k % m->n_ops], m->prep[k]);
    vae_free(m->prep);
}

/* Two steps' frames (the first chunk, then one more), concatenated: [t][h][w][c] each */
typedef struct stream {
    float *data;
    int t[2], h, w, c;
} stream;

/* The runs share their beginnings: a run with E4M3 from op i on computes what y0's run did
 * before i. So y0's run goes cut by cut, at the ops where one value alone crosses (between
 * blocks), keeping that value's frames; a candidate's run then starts from the last cut at or
 * before it, as a slice of the program. */
enum { MAX_CUTS = 64, MEASURE_GROUP = 2 };

typedef struct calib {
    const vae_program *p; /* the session's program, its candidates marked */
    vae_program work;     /* a copy whose marks each run sets */
    vae_backend *be;      /* the CPU emulation (VAE_DTYPE_FP8) */
    memo_vtbl memo;       /* be's table while the calibration runs */
    vae_exec_config cfg;
    int n_cuts;
    int cut[MAX_CUTS];   /* ascending op indices, cut[0] = 0 */
    stream at[MAX_CUTS]; /* y0's frames entering cut k (at[0]: the input) */
    stream y0;           /* the output with no E4M3 conv */
    size_t n;            /* its values */
} calib;

typedef struct candidate {
    int op;
    double e; /* relative error with this conv alone in E4M3 */
} candidate;

/* xorshift64*: a fixed stream, so that a model's choice is the same in every session */
static double uniform(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return ((*s * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}

/* Decoders: N(0, 1) latents (what a diffusion model hands them, normalised). Encoders: a smooth
 * moving pattern over 80% of the pixel range [lo, hi] per channel (without its clipped ends):
 * noise would excite the high frequencies no video has. */
static void fill_input(float *x, int t, int h, int w, int c, const float *range) {
    const double mid = range ? 0.5 * (range[0] + range[1]) : 0;
    const double amp = range ? 0.4 * (range[1] - range[0]) : 0;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    const double pi = 3.14159265358979;
    size_t k = 0;
    for (int f = 0; f < t; f++)
        for (int y = 0; y < h; y++)
            for (int i = 0; i < w; i++)
                for (int ch = 0; ch < c; ch++, k++) {
                    if (!range) {
                        const double u = uniform(&s) + 1e-12, v = uniform(&s);
                        x[k] = (float)(sqrt(-2 * log(u)) * cos(2 * pi * v));
                        continue;
                    }
                    const double a =
                        2 * pi * ((1 + ch % 3) * (double)i / w + (2 - ch % 2) * (double)y / h);
                    x[k] = (float)(mid +
                                   amp * sin(a + 0.35 * f + 2.1 * ch) * cos(pi * y / h - 0.2 * f));
                }
}

static size_t stream_values(const stream *x) {
    return (size_t)(x->t[0] + x->t[1]) * x->h * x->w * x->c;
}

/* Runs prog on `in`, step by step (a step of no frames is left out: it makes none): *out */
static int run_stream(calib *c, const vae_program *prog, const stream *in, stream *out) {
    memset(out, 0, sizeof *out);
    vae_exec *e;
    int rc = vae_exec_create(&e, prog, c->be, &c->cfg);
    if (rc) return rc;
    const size_t fv = (size_t)in->h * in->w * in->c;
    void *dev = c->be->v->alloc(c->be, (size_t)(in->t[0] + in->t[1]) * fv * c->be->elem_size + 1);
    if (!dev) rc = vae_fail(VAE_ENOMEM, "fp8 calibration: out of memory for its input");
    size_t n = 0;
    for (int k = 0, pos = 0; rc == VAE_OK && k < 2; pos += in->t[k], k++) {
        vae_chunk x = {dev, in->t[k], in->h, in->w, in->c}, o;
        if (x.t == 0) continue;
        if ((rc = c->be->v->upload(c->be, dev, in->data + pos * fv, x.t * fv))) break;
        if ((rc = vae_exec_step(e, &x, &o))) break;
        const size_t got = (size_t)o.t * o.h * o.w * o.c;
        if (got && n && (o.h != out->h || o.w != out->w || o.c != out->c))
            rc = vae_fail(VAE_ESHAPE, "fp8 calibration: the steps' frames differ in size");
        float *grown = got ? realloc(out->data, (n + got) * sizeof(float)) : out->data;
        if (rc == VAE_OK && !grown) rc = vae_fail(VAE_ENOMEM, "fp8 calibration: out of memory");
        if (rc == VAE_OK && got) {
            out->data = grown;
            out->h = o.h, out->w = o.w, out->c = o.c;
            rc = c->be->v->download(c->be, out->data + n, o.data, got);
        }
        out->t[k] = o.t;
        n += got;
    }
    if (dev) c->be->v->release(c->be, dev);
    vae_exec_free(e);
    if (rc) {
        free(out->data);
        out->data = NULL;
    }
    return rc;
}

/* c->work's ops [cut[k], n_ops) (its marks as set) on y0's frames at cut k: *y */
static int run_from(calib *c, int k, stream *y) {
    if (c->cut[k] == 0) return run_stream(c, &c->work, &c->at[0], y);
    vae_program tail;
    int rc = vae_program_slice(&c->work, c->cut[k], c->work.n_ops, &tail);
    if (rc) return rc;
    rc = run_stream(c, &tail, &c->at[k], y);
    vae_program_free(&tail);
    return rc;
}

/* ||y - c->y0|| / ||c->y0|| */
static double rel_error(const calib *c, const float *y) {
    double d = 0, r = 0;
    for (size_t i = 0; i < c->n; i++) {
        const double a = (double)y[i] - c->y0.data[i];
        d += a * a;
        r += (double)c->y0.data[i] * c->y0.data[i];
    }
    return r > 0 ? sqrt(d / r) : (d > 0 ? INFINITY : 0);
}

/* The work program with E4M3 on the candidates on[0 .. n) alone (their kernels as picked) */
static void mark_only(calib *c, const candidate *on, int n) {
    for (int i = 0; i < c->work.n_ops; i++) {
        c->work.ops[i].fp8 = 0;
        c->work.ops[i].fp8_kernel = VAE_FP8_NONE;
    }
    for (int k = 0; k < n; k++) {
        c->work.ops[on[k].op].fp8 = 1;
        c->work.ops[on[k].op].fp8_kernel = c->p->ops[on[k].op].fp8_kernel;
    }
}

/* The cut a candidate's run starts from: the last at or before it */
static int cut_of(const calib *c, int op) {
    int k = 0;
    while (k + 1 < c->n_cuts && c->cut[k + 1] <= op)
        k++;
    return k;
}

/* The error with candidates on[0 .. n) in E4M3, run from the last cut before the first of them */
static int measure(calib *c, const candidate *on, int n, double *e) {
    mark_only(c, on, n);
    int first = c->work.n_ops;
    for (int j = 0; j < n; j++)
        first = on[j].op < first ? on[j].op : first;
    stream y;
    int rc = run_from(c, cut_of(c, first), &y);
    if (rc) return rc;
    if (stream_values(&y) != c->n)
        rc = vae_fail(VAE_ESHAPE, "fp8 calibration: %zu outputs, not %zu", stream_values(&y), c->n);
    else
        *e = rel_error(c, y.data);
    free(y.data);
    return rc;
}

static int by_error(const void *a, const void *b) {
    const double x = ((const candidate *)a)->e, y = ((const candidate *)b)->e;
    return x < y ? -1 : x > y;
}

/* The most candidates (sorted by e) whose errors in quadrature stay within the budget, then
 * checked together: the largest dropped until the measured error holds. */
static int choose(calib *c, candidate *cand, int n, double budget, vae_fp8_choice *out) {
    qsort(cand, (size_t)n, sizeof *cand, by_error);
    double sum = 0;
    int k = 0;
    while (k < n && sqrt(sum + cand[k].e * cand[k].e) <= budget)
        sum += cand[k].e * cand[k].e, k++;
    out->measured = 0;
    for (; k > 0; k--) {
        int rc = measure(c, cand, k, &out->measured);
        if (rc) return rc;
        if (out->measured <= budget) break;
        sum -= cand[k - 1].e * cand[k - 1].e;
    }
    out->kept = k;
    out->predicted = k ? sqrt(sum > 0 ? sum : 0) : 0;
    if (!k) out->measured = 0;
    return VAE_OK;
}

/* cand[k].e: a run per pair of candidates of one cut (a residual block's two convs, whose errors
 * measured alone were within 12% of each other on every full-size decoder), each given
 * E / sqrt(2) of the pair's E (independent roundings add in quadrature), a run per candidate
 * where its cut has one: half the runs, and choose's check run still measures the chosen set. */
static int measure_each(calib *c, candidate *cand, int n) {
    for (int k = 0, g; k < n; k += g) {
        g = 1;
        while (k + g < n && g < MEASURE_GROUP && cut_of(c, cand[k + g].op) == cut_of(c, cand[k].op))
            g++;
        double e = 0;
        int rc = measure(c, &cand[k], g, &e);
        if (rc) return rc;
        for (int j = 0; j < g; j++)
            cand[k + j].e = e / sqrt(g);
    }
    return VAE_OK;
}

/* Every candidate at once, one run: where that is within the budget they all stay (an encoder's
 * usual case), and no run per candidate is needed. 1: so. */
static int all_within(calib *c, candidate *cand, int n, double budget, vae_fp8_choice *out) {
    double e = 0;
    int rc = measure(c, cand, n, &e);
    if (rc) return rc;
    if (e > budget) return 0;
    out->kept = n;
    out->predicted = out->measured = e;
    return 1;
}

/* pos is a cut: one value alone crosses into op pos, the one op pos - 1 makes (a slice) */
static int is_cut(const vae_program *p, int pos) {
    int v = -1;
    return pos == 0 || (vae_program_crossing(p, pos, &v, 1) == 1 && v == p->ops[pos - 1].out);
}

/* The cuts: the last one at or before each candidate (cand in program order) */
static void place_cuts(calib *c, const candidate *cand, int n) {
    c->n_cuts = 1;
    c->cut[0] = 0;
    for (int j = 0; j < n && c->n_cuts < MAX_CUTS; j++) {
        int pos = cand[j].op;
        while (!is_cut(c->p, pos))
            pos--;
        if (pos > c->cut[c->n_cuts - 1]) c->cut[c->n_cuts++] = pos;
    }
}

/* y0, cut by cut, keeping the frames that enter each cut */
static int run_reference(calib *c) {
    mark_only(c, NULL, 0);
    for (int k = 0; k < c->n_cuts; k++) {
        const int last = k + 1 == c->n_cuts, to = last ? c->work.n_ops : c->cut[k + 1];
        stream *y = last ? &c->y0 : &c->at[k + 1];
        if (k == 0 && last) return run_stream(c, &c->work, &c->at[0], y);
        vae_program seg = {0};
        int rc = vae_program_slice(&c->work, c->cut[k], to, &seg);
        if (rc == VAE_OK) rc = run_stream(c, &seg, &c->at[k], y);
        vae_program_free(&seg);
        if (rc) return rc;
    }
    return VAE_OK;
}

/* The work copy, the backend, the input, the cuts and y0 */
static int calib_open(calib *c, const vae_program *p, const candidate *cand, int n_cand,
                      const float *range, int size, const vae_settings *set, int threads) {
    memset(c, 0, sizeof *c);
    c->p = p;
    c->cfg = (vae_exec_config){set, NULL, NULL, 0, 0};
    stream *x = &c->at[0];
    *x = (stream){NULL,
                  {p->first_chunk > 0 ? p->first_chunk : 1, p->chunk > 0 ? p->chunk : 1},
                  size,
                  size,
                  p->in_channels};
    int rc = vae_program_copy(p, &c->work);
    if (rc == VAE_OK) rc = vae_cpu_backend_create(&c->be, VAE_DTYPE_FP8, threads);
    if (rc == VAE_OK) rc = memo_open(&c->memo, c->be, &c->work);
    if (rc) return rc;
    if (!(x->data = malloc(stream_values(x) * sizeof *x->data)))
        return vae_fail(VAE_ENOMEM, "fp8 calibration: out of memory for its input");
    fill_input(x->data, x->t[0] + x->t[1], size, size, x->c, range);
    place_cuts(c, cand, n_cand);
    if ((rc = run_reference(c))) return rc;
    c->n = stream_values(&c->y0);
    return c->n ? VAE_OK : vae_fail(VAE_ESHAPE, "fp8 calibration: no output frames");
}

static void calib_close(calib *c) {
    free(c->y0.data);
    for (int k = 0; k < MAX_CUTS; k++)
        free(c->at[k].data);
    if (c->be) {
        memo_close(&c->memo, c->be);
        c->be->v->destroy(c->be);
    }
    vae_program_free(&c->work);
}

/* p's E4M3 marks kept on cand[0 .. k) and cleared on every other conv */
static void keep_only(vae_program *p, const candidate *cand, int k) {
    for (int i = 0; i < p->n_ops; i++) {
        int chosen = 0;
        for (int j = 0; j < k && !chosen; j++)
            chosen = cand[j].op == i;
        if (chosen) continue;
        p->ops[i].fp8 = 0;
        p->ops[i].fp8_kernel = VAE_FP8_NONE;
    }
}

int vae_fp8_calibrate(vae_program *p, const float *range, int size, double budget,
                      const vae_settings *set, int threads, vae_fp8_choice *out) {
    if (!p || !out) return vae_fail(VAE_EINVAL, "vae_fp8_calibrate: NULL argument");
    if (size < 1) return vae_fail(VAE_EINVAL, "fp8 calibration size %d: expected >= 1", size);
    if (!(budget >= 0)) return vae_fail(VAE_EINVAL, "fp8 error budget %g: expected >= 0", budget);
    memset(out, 0, sizeof *out);
    const double t_start = vae_seconds();
    candidate *cand = vae_calloc((size_t)p->n_ops + 1, sizeof *cand);
    if (!cand) return vae_fail(VAE_ENOMEM, "fp8 calibration: out of memory");
    for (int i = 0; i < p->n_ops; i++)
        if (vae_op_fp8(&p->ops[i])) cand[out->candidates++].op = i;
    calib c = {0};
    int rc = VAE_OK;
    if (out->candidates > 0 && budget > 0) { /* (budget 0: none, with no run) */
        double t[4] = {vae_seconds(), 0, 0, 0};
        rc = calib_open(&c, p, cand, out->candidates, range, size, set, threads);
        int all = 0; /* 1: every candidate kept (all_within; errors are negative) */
        if (rc == VAE_OK && (all = all_within(&c, cand, out->candidates, budget, out)) < 0)
            rc = all;
        t[1] = vae_seconds();
        if (rc == VAE_OK && !all) rc = measure_each(&c, cand, out->candidates);
        t[2] = vae_seconds();
        if (rc == VAE_OK && !all) rc = choose(&c, cand, out->candidates, budget, out);
        t[3] = vae_seconds();
        VAE_DEBUG("fp8 calibration: %d cuts; %.2f s the reference and the whole set (%s), %.2f s "
                  "the candidates' runs, %.2f s the check", c.n_cuts, t[1] - t[0],
                  all > 0 ? "within the budget" : "over it", t[2] - t[1], t[3] - t[2]);
        calib_close(&c);
    }
    if (rc == VAE_OK) keep_only(p, cand, out->kept);
    vae_free(cand);
    out->seconds = vae_seconds() - t_start;
    return rc;
}
