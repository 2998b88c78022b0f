/* test_executor.c -- the streaming rules of the executor on the CPU backend.
 *
 * A causal op must give the same result however the stream is cut into chunks, and the same as a
 * direct computation over the whole front-padded sequence. Memory must not grow with the number
 * of frames. Also the program rules the executor relies on (frame walks, the FP8 mark of
 * residual-branch convs). Prints "N passed, M failed".
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/core.h"
#include "core/dtype.h"
#include "core/executor.h"
#include "core/fp8.h"
#include "core/op.h"
#include "core/plan.h"
#include "core/program.h"
#include "core/settings.h"
#include "platform/platform.h"

static int passed, failed;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) passed++;                                                                        \
        else {                                                                                     \
            failed++;                                                                              \
            printf("FAIL line %d: ", __LINE__);                                                    \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

enum { H = 5, W = 4, C = 3 };

/* what the executors of run_stream use: settings (tests switch graphs and checks here) and frame
 * loops */
static vae_settings test_set;
static vae_exec_config test_cfg = {&test_set, NULL, NULL, 0, 0};
static int test_batch; /* run_stream's steps as one call's (vae_exec_set_batch) */

/* Runs program p over T frames [T][H][W][C], cutting the stream as `cuts` (chunk sizes, the last
 * one repeated). Returns the output frames concatenated, and their count. */
static float *run_stream(vae_backend *be, const vae_program *p, const float *x, int T,
                         const int *cuts, int ncuts, int *t_out, int *oh, int *ow, int *oc,
                         int64_t *peak) {
    vae_exec *e;
    if (vae_exec_create(&e, p, be, &test_cfg)) return NULL;
    vae_exec_set_batch(e, test_batch);
    size_t fv = (size_t)H * W * C, cap = 0;
    float *out = NULL;
    *t_out = 0;
    void *dev = be->v->alloc(be, (size_t)T * fv * sizeof(float));
    for (int pos = 0, k = 0; pos < T; k++) {
        int n = cuts[k < ncuts ? k : ncuts - 1];
        if (pos + n > T) n = T - pos;
        be->v->upload(be, dev, x + pos * fv, n * fv);
        vae_chunk in = {dev, n, H, W, C}, o;
        if (vae_exec_step(e, &in, &o)) {
            printf("step failed: %s\n", vae_last_error());
            break;
        }
        pos += n;
        if (o.t == 0) continue;
        size_t ov = (size_t)o.h * o.w * o.c;
        if ((*t_out + o.t) * ov > cap) {
            cap = (*t_out + o.t) * ov * 2;
            out = realloc(out, cap * sizeof(float));
        }
        be->v->download(be, out + *t_out * ov, o.data, o.t * ov);
        *t_out += o.t;
        *oh = o.h, *ow = o.w, *oc = o.c;
    }
    be->v->release(be, dev);
    vae_exec_free(e);
    *peak = be->bytes_peak;
    return out;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Direct reference: conv over time only (1x1 spatial kernel) of the front-padded sequence. */
static void ref_tconv(const float *x, int T, const float *w, int kt, int st, int tpad, int replicate,
                      float *y, int *t_out) {
    int total = T + tpad;
    *t_out = total >= kt ? (total - kt) / st + 1 : 0;
    size_t fv = (size_t)H * W;
    for (int j = 0; j < *t_out; j++)
        for (size_t p = 0; p < fv; p++)
            for (int o = 0; o < C; o++) {
                double acc = 0;
                for (int dt = 0; dt < kt; dt++) {
                    int f = j * st + dt - tpad; /* index into x; < 0 is padding */
                    if (f < 0 && !replicate) continue;
                    if (f < 0) f = 0;
                    for (int i = 0; i < C; i++) acc += (double)w[(o * C + i) * kt + dt] * x[(f * fv + p) * C + i];
                }
                y[(j * fv + p) * C + o] = (float)acc;
            }
}

static void test_temporal_conv(vae_backend *be, int kt, int st, int tpad, int replicate) {
    enum { T = 13 };
    float x[T * H * W * C], w[C * C * 3];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = frand();
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) w[i] = frand();
    vae_program p;
    vae_program_init(&p, C);
    vae_op op = vae_op_make(VAE_OP_CONV, 0, C, C);
    op.kt = kt, op.st = st, op.tpad = tpad, op.tpad_mode = replicate ? VAE_TPAD_REPLICATE : VAE_TPAD_ZERO;
    op.w = w;
    snprintf(op.name, sizeof op.name, "tconv");
    vae_program_add(&p, &op);
    float ref[T * H * W * C];
    int t_ref;
    ref_tconv(x, T, w, kt, st, tpad, replicate, ref, &t_ref);
    const int cut_sets[][3] = {{T, T, T}, {1, 1, 1}, {1, 4, 4}, {2, 3, 5}};
    for (int s = 0; s < 4; s++) {
        int t_out, oh, ow, oc;
        int64_t peak;
        float *y = run_stream(be, &p, x, T, cut_sets[s], 3, &t_out, &oh, &ow, &oc, &peak);
        CHECK(y && t_out == t_ref, "kt %d st %d tpad %d rep %d cuts %d: %d frames, expected %d", kt,
              st, tpad, replicate, s, t_out, t_ref);
        if (y && t_out == t_ref)
            CHECK(max_diff(y, ref, (size_t)t_ref * H * W * C) < 1e-5,
                  "kt %d st %d cuts %d: values differ by %g", kt, st, s,
                  max_diff(y, ref, (size_t)t_ref * H * W * C));
        free(y);
    }
    vae_program_free(&p);
}

/* Wan's upsample3d time rule: frame 0 passes, frames >= 1 go through a causal conv and double. */
/* value v's first frame ++ the rest of it (time head, time drop, concat: the temporal upsamplers'
 * shape); returns the concat's value */
static int add_head_drop_concat(vae_program *p, int v) {
    vae_op head = vae_op_make(VAE_OP_TIME_HEAD, v, C, C),
           drop = vae_op_make(VAE_OP_TIME_DROP, v, C, C);
    head.n = drop.n = 1;
    int vh = vae_program_add(p, &head), vd = vae_program_add(p, &drop);
    vae_op cat = vae_op_make(VAE_OP_CONCAT_T, vh, C, C);
    cat.in[1] = vd;
    return vae_program_add(p, &cat);
}

/* the backend's copies, counted (test_time_split) */
static const vae_backend_vtbl *count_inner;
static int count_copies;
static int count_copy(vae_backend *be, void *dst, const void *src, size_t bytes) {
    count_copies++;
    return count_inner->copy(be, dst, src, bytes);
}

/* head ++ drop of the stream is the stream; the concat takes over the buffer of its one non-empty
 * input (the executor's value_take) instead of copying it: one copy a step (the drop's, from the
 * program's input, which it may not take), four in one step (head and drop, then both into the
 * concat). */
static void test_time_split(vae_backend *be) {
    enum { T = 6 };
    float x[T * H * W * C];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = frand();
    vae_program p;
    vae_program_init(&p, C);
    add_head_drop_concat(&p, 0);
    const int cuts[][2] = {{1, 1}, {T, T}, {1, 2}}, copies[] = {T, 4, 1 + (T - 1 + 1) / 2};
    vae_backend_vtbl counting = *be->v;
    counting.copy = count_copy;
    count_inner = be->v;
    for (int s = 0; s < 3; s++) {
        int t_out, oh, ow, oc;
        int64_t peak;
        be->v = &counting;
        count_copies = 0;
        float *y = run_stream(be, &p, x, T, cuts[s], 2, &t_out, &oh, &ow, &oc, &peak);
        be->v = count_inner;
        CHECK(y && t_out == T && max_diff(y, x, (size_t)T * H * W * C) == 0,
              "head ++ drop is the identity (cuts %d)", s);
        CHECK(count_copies == copies[s], "head ++ drop (cuts %d): %d copies, expected %d", s,
              count_copies, copies[s]);
        free(y);
    }
    vae_program_free(&p);
}

/* Memory for a stream of 40 frames equals that for 8: caches, not the video, are kept. */
static void test_bounded_memory(vae_backend *be, int contig) {
    enum { T = 40 };
    static float x[T * H * W * C];
    float w[C * C * 3];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = frand();
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) w[i] = frand();
    vae_program p;
    vae_program_init(&p, C);
    int src = 0;
    if (contig) { /* an intermediate input: contiguous windows */
        vae_op act = vae_op_make(VAE_OP_ACT, 0, C, C);
        src = vae_program_add(&p, &act);
    }
    vae_op op = vae_op_make(VAE_OP_CONV, src, C, C);
    op.kt = 3, op.tpad = 2, op.w = w;
    vae_program_add(&p, &op);
    int t_out, oh, ow, oc, cut = 1;
    int64_t peak8, peak40;
    be->bytes_peak = be->bytes_in_use;
    free(run_stream(be, &p, x, 8, &cut, 1, &t_out, &oh, &ow, &oc, &peak8));
    be->bytes_peak = be->bytes_in_use;
    free(run_stream(be, &p, x, T, &cut, 1, &t_out, &oh, &ow, &oc, &peak40));
    /* the input staging buffer of run_stream is T frames; subtract it */
    int64_t fb = (int64_t)H * W * C * sizeof(float);
    CHECK(peak40 - 40 * fb == peak8 - 8 * fb, "peak memory grows with frames (contig %d): %lld vs %lld", contig,
          (long long)(peak40 - 40 * fb), (long long)(peak8 - 8 * fb));
    vae_program_free(&p);
}

/* the bytes a backend's copies moved since this was last zeroed (counting_copy) */
static double copied_bytes;
static int (*real_copy)(vae_backend *be, void *dst, const void *src, size_t bytes);
static int counting_copy(vae_backend *be, void *dst, const void *src, size_t bytes) {
    copied_bytes += (double)bytes;
    return real_copy(be, dst, src, bytes);
}

/* The planner's count of causal caches (vae_plan_mem_part) is what an executor keeps between
 * steps: after some steps the backend holds the caches, the step's output and nothing else of
 * the stream; and the bytes its windows copy in a steady step (vae_plan_request.step_copies, a
 * cost of tiled plans) are what the executor's copies move. Two temporal convs: the first reads
 * the input (a list window with a zero frame), the second an intermediate value (a contiguous
 * window). */
static void test_plan_caches(vae_backend *be) {
    enum { STEPS = 4 };
    float w[C * C * 3];
    static float x[H * W * C];
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        w[i] = frand();
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = frand();
    vae_program p;
    vae_program_init(&p, C);
    vae_op a = vae_op_make(VAE_OP_CONV, 0, C, C);
    a.kt = 3, a.tpad = 2, a.w = w;
    vae_op act = vae_op_make(VAE_OP_ACT, vae_program_add(&p, &a), C, C);
    vae_op b = vae_op_make(VAE_OP_CONV, vae_program_add(&p, &act), C, C);
    b.kt = 3, b.tpad = 2, b.w = w;
    vae_program_add(&p, &b);
    vae_exec *e = NULL;
    void *dev = be->v->alloc(be, sizeof x);
    int64_t measured = -1, out_bytes = 0;
    double copies = -1;
    const vae_backend_vtbl *v = be->v;
    vae_backend_vtbl counting = *v;
    real_copy = v->copy, counting.copy = counting_copy;
    if (dev && vae_exec_create(&e, &p, be, &test_cfg) == VAE_OK) {
        const int64_t before = be->bytes_in_use;
        int rc = be->v->upload(be, dev, x, sizeof x / sizeof *x);
        for (int k = 0; rc == VAE_OK && k < STEPS; k++) {
            vae_chunk in = {dev, 1, H, W, C}, o;
            copied_bytes = 0;
            be->v = k == STEPS - 1 ? &counting : v; /* the last step's copies */
            rc = vae_exec_step(e, &in, &o);
            be->v = v;
            out_bytes = (int64_t)o.t * o.h * o.w * o.c * (int64_t)sizeof(float);
        }
        if (rc == VAE_OK) measured = be->bytes_in_use - before - out_bytes, copies = copied_bytes;
    }
    int vh[8], vw[8];
    for (int v = 0; v < p.n_values && v < 8; v++)
        vh[v] = H, vw[v] = W;
    vae_loops none;
    double step_copies = -2;
    vae_plan_request rq = {.prog = &p, .elem = sizeof(float), .step_copies = &step_copies};
    int64_t scratch = 0, caches = -2;
    if (vae_loops_init(&none, &p, NULL, NULL, 0) == VAE_OK) {
        vae_plan_mem_part(&p, &none, vh, vw, &rq, 1, 1, STEPS, NULL, 0, NULL, &scratch, &caches);
        vae_loops_free(&none);
    }
    CHECK(measured > 0 && caches == measured,
          "planned causal caches %lld bytes, the executor keeps %lld", (long long)caches,
          (long long)measured);
    CHECK(copies > 0 && step_copies == copies,
          "planned window copies of a steady step %.0f bytes, the executor's copies %.0f",
          step_copies, copies);
    rq.step_copies = NULL;
    /* the chunks in and out (1 frame each here) pass through the scratch area (planar_io), or
     * through stages of their own held through the run (stage_io): added to the peak instead */
    const int64_t io = (int64_t)H * W * C * (int64_t)sizeof(float);
    vae_plan_request rq_io = rq, rq_st = rq;
    rq_io.planar_io = 1;
    rq_st.planar_io = 1, rq_st.stage_io = 1;
    int64_t s0 = 0, s_io = 0, s_st = 0, p0 = -1, p_io = -1, p_st = -1;
    if (vae_loops_init(&none, &p, NULL, NULL, 0) == VAE_OK) {
        p0 = vae_plan_mem_part(&p, &none, vh, vw, &rq, 1, 1, STEPS, NULL, 0, NULL, &s0, NULL);
        p_io =
            vae_plan_mem_part(&p, &none, vh, vw, &rq_io, 1, 1, STEPS, NULL, 0, NULL, &s_io, NULL);
        p_st =
            vae_plan_mem_part(&p, &none, vh, vw, &rq_st, 1, 1, STEPS, NULL, 0, NULL, &s_st, NULL);
        vae_loops_free(&none);
    }
    CHECK(p0 > 0 && p_io == p0 && s_io == (s0 > io ? s0 : io) && p_st == p0 + 2 * io && s_st == s0,
          "chunk stages: peak %lld / %lld / %lld, scratch %lld / %lld / %lld (plain / planar_io / "
          "stage_io; a chunk %lld bytes)",
          (long long)p0, (long long)p_io, (long long)p_st, (long long)s0, (long long)s_io,
          (long long)s_st, (long long)io);
    vae_exec_free(e);
    if (dev) be->v->release(be, dev);
    vae_program_free(&p);
}

/* Contiguous windows: a temporal conv whose input is an intermediate value with no other consumer
 * gets its frame list as one contiguous tensor (cache frames and padding copied in front of the
 * chunk), with the same results as the reference; memory stays bounded. A wrapper backend records
 * whether every conv call saw consecutive frames. */
static vae_backend_vtbl wrap_vtbl;
static const vae_backend_vtbl *wrap_inner;
static int wrap_calls, wrap_contig;
static int wrap_conv(vae_backend *be, const vae_op *op, void *state, const void *const *frames,
                     int n_in, int h, int w, const void *res, void *y, int t_out, int ho, int wo) {
    size_t fb = (size_t)h * w * op->c_in * be->elem_size;
    int ok = 1;
    for (int i = 1; i < n_in; i++)
        if ((const char *)frames[i] != (const char *)frames[0] + (size_t)i * fb) ok = 0;
    wrap_calls++;
    wrap_contig += ok;
    return wrap_inner->conv(be, op, state, frames, n_in, h, w, res, y, t_out, ho, wo);
}

static void test_contiguous_window(vae_backend *be, int kt, int st, int tpad, int replicate) {
    enum { T = 13 };
    float x[T * H * W * C], w[C * C * 3];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = frand();
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) w[i] = frand();
    vae_program p;
    vae_program_init(&p, C);
    vae_op act = vae_op_make(VAE_OP_ACT, 0, C, C); /* identity: makes an intermediate value */
    int a = vae_program_add(&p, &act);
    vae_op op = vae_op_make(VAE_OP_CONV, a, C, C);
    op.kt = kt, op.st = st, op.tpad = tpad, op.tpad_mode = replicate ? VAE_TPAD_REPLICATE : VAE_TPAD_ZERO;
    op.w = w;
    snprintf(op.name, sizeof op.name, "tconv_contig");
    vae_program_add(&p, &op);
    float ref[T * H * W * C];
    int t_ref;
    ref_tconv(x, T, w, kt, st, tpad, replicate, ref, &t_ref);
    wrap_inner = be->v;
    wrap_vtbl = *be->v;
    wrap_vtbl.conv = wrap_conv;
    be->v = &wrap_vtbl;
    const int cut_sets[][3] = {{T, T, T}, {1, 1, 1}, {1, 4, 4}, {2, 3, 5}};
    for (int s = 0; s < 4; s++) {
        int t_out, oh, ow, oc;
        int64_t peak;
        wrap_calls = wrap_contig = 0;
        float *y = run_stream(be, &p, x, T, cut_sets[s], 3, &t_out, &oh, &ow, &oc, &peak);
        CHECK(y && t_out == t_ref, "contig kt %d st %d cuts %d: %d frames, expected %d", kt, st, s,
              t_out, t_ref);
        if (y && t_out == t_ref)
            CHECK(max_diff(y, ref, (size_t)t_ref * H * W * C) < 1e-5,
                  "contig kt %d st %d tpad %d rep %d cuts %d: values differ by %g", kt, st, tpad,
                  replicate, s, max_diff(y, ref, (size_t)t_ref * H * W * C));
        CHECK(wrap_calls > 0 && wrap_contig == wrap_calls,
              "contig kt %d st %d cuts %d: %d of %d conv calls saw contiguous frames", kt, st, s,
              wrap_contig, wrap_calls);
        free(y);
    }
    be->v = wrap_inner;
    vae_program_free(&p);
}

/* A temporal conv behind a time drop and a one-sided concat (first frame ++ the rest, as Wan's
 * and SeedVR2's temporal upsamplers): the drop and the concat take over their input's buffer,
 * which holds the conv's window room (vae_program_heads), so the conv still sees contiguous frames
 * and a steady step copies only its window (the cached frames in, the last ones out). */
static void test_window_take(vae_backend *be) {
    enum { T = 13 };
    float x[T * H * W * C], w[C * C * 3];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = frand();
    for (size_t i = 0; i < sizeof w / sizeof *w; i++)
        w[i] = frand();
    vae_program p;
    vae_program_init(&p, C);
    vae_op act = vae_op_make(VAE_OP_ACT, 0, C, C); /* identity: makes an intermediate value */
    int a = vae_program_add(&p, &act);
    vae_op conv = vae_op_make(VAE_OP_CONV, add_head_drop_concat(&p, a), C, C);
    conv.kt = 3, conv.tpad = 2, conv.w = w;
    snprintf(conv.name, sizeof conv.name, "tconv_take");
    vae_program_add(&p, &conv);
    float ref[T * H * W * C];
    int t_ref;
    ref_tconv(x, T, w, 3, 1, 2, 0, ref, &t_ref);
    wrap_inner = count_inner = be->v;
    wrap_vtbl = *be->v;
    wrap_vtbl.conv = wrap_conv, wrap_vtbl.copy = count_copy;
    be->v = &wrap_vtbl;
    /* copies: 2 a step (the window's); in one step the head's and both concat inputs' too */
    const int cuts[][2] = {{1, 1}, {1, 4}, {T, T}}, copies[] = {2 * T, 2 * 4, 4};
    for (int s = 0; s < 3; s++) {
        int t_out, oh, ow, oc;
        int64_t peak;
        wrap_calls = wrap_contig = count_copies = 0;
        float *y = run_stream(be, &p, x, T, cuts[s], 2, &t_out, &oh, &ow, &oc, &peak);
        CHECK(y && t_out == t_ref && max_diff(y, ref, (size_t)t_ref * H * W * C) < 1e-5,
              "window take (cuts %d): output differs from the conv of the stream", s);
        CHECK(wrap_calls > 0 && wrap_contig == wrap_calls,
              "window take (cuts %d): %d of %d conv calls saw contiguous frames", s, wrap_contig,
              wrap_calls);
        CHECK(count_copies == copies[s], "window take (cuts %d): %d copies, expected %d", s,
              count_copies, copies[s]);
        free(y);
    }
    be->v = wrap_inner;
    vae_program_free(&p);
}

/* Work graphs: a wrapper backend emulates recording (graph_begin .. graph_end stores each op call
 * instead of running it; graph_launch runs the stored calls again on the same buffers, and
 * buffers released while a graph exists are held back, as a device allocator keeps them). A
 * stream must give exactly the same output with and without graphs, record once in its steady
 * state and replay every later step of that state; a recording that fails (at its end, or at an op
 * half-way through the step) falls back to plain steps with the same output. */
typedef struct rec_call {
    int kind; /* 0 conv, 1 norm, 2 eltwise, 3 resample, 4 attention, 5 copy, 6 zero */
    const vae_op *op;
    void *state;
    const void **frames;
    int n_in, h, w, t_out, ho, wo;
    const void *a, *b;
    void *y;
    int64_t n;
} rec_call;
typedef struct rec_graph {
    rec_call *v;
    int n;
} rec_graph;
static const vae_backend_vtbl *rec_inner;
static vae_backend_vtbl rec_vtbl;
static rec_graph *rec_cur; /* recording into this one */
static int rec_graphs, rec_made, rec_launches;
static int rec_fail; /* 1: graph_end refuses; 2: the second conv fails while recording */
static void **rec_held;
static int rec_n_held;

static int rec_add(rec_call c) {
    if (c.frames) { /* the executor reuses its frame list */
        const void **f = malloc((size_t)c.n_in * sizeof *f);
        memcpy(f, c.frames, (size_t)c.n_in * sizeof *f);
        c.frames = f;
    }
    rec_cur->v = realloc(rec_cur->v, (size_t)(rec_cur->n + 1) * sizeof *rec_cur->v);
    rec_cur->v[rec_cur->n++] = c;
    return VAE_OK;
}
static int rec_run(vae_backend *be, const rec_call *c) {
    switch (c->kind) {
    case 0:
        return rec_inner->conv(be, c->op, c->state, c->frames, c->n_in, c->h, c->w, c->a, c->y,
                               c->t_out, c->ho, c->wo);
    case 1: return rec_inner->norm(be, c->op, c->state, c->a, c->y, c->t_out, c->h, c->w);
    case 2: return rec_inner->eltwise(be, c->op, c->state, c->a, c->b, c->y, c->n);
    case 3: return rec_inner->resample(be, c->op, c->frames, c->n_in, c->h, c->w, c->y, c->t_out);
    case 4:
        return rec_inner->attention(be, c->op, c->state, c->a, c->y, c->t_out, c->h, c->w, c->ho,
                                    c->wo);
    case 5: return rec_inner->copy(be, c->y, c->a, (size_t)c->n);
    default: return rec_inner->zero(be, c->y, (size_t)c->n);
    }
}
static int rec_call_or_add(vae_backend *be, rec_call c) {
    if (rec_cur && rec_fail == 2 && c.kind == 0 && strcmp(c.op->name, "graph.conv2") == 0)
        return vae_fail(VAE_EUNSUPPORTED, "test: op refused while recording");
    return rec_cur ? rec_add(c) : rec_run(be, &c);
}
static int rec_conv(vae_backend *be, const vae_op *op, void *st, const void *const *frames,
                    int n_in, int h, int w, const void *res, void *y, int t_out, int ho, int wo) {
    return rec_call_or_add(be, (rec_call){0, op, st, (const void **)frames, n_in, h, w, t_out, ho,
                                          wo, res, NULL, y, 0});
}
static int rec_norm(vae_backend *be, const vae_op *op, void *st, const void *x, void *y, int t,
                    int h, int w) {
    return rec_call_or_add(be, (rec_call){1, op, st, NULL, 0, h, w, t, 0, 0, x, NULL, y, 0});
}
static int rec_eltwise(vae_backend *be, const vae_op *op, void *st, const void *a, const void *b2,
                       void *y, int64_t n) {
    return rec_call_or_add(be, (rec_call){2, op, st, NULL, 0, 0, 0, 0, 0, 0, a, b2, y, n});
}
static int rec_resample(vae_backend *be, const vae_op *op, const void *const *frames, int n_in,
                        int h, int w, void *y, int t_out) {
    return rec_call_or_add(be, (rec_call){3, op, NULL, (const void **)frames, n_in, h, w, t_out, 0,
                                          0, NULL, NULL, y, 0});
}
static int rec_copy(vae_backend *be, void *dst, const void *src, size_t bytes) {
    return rec_call_or_add(
        be, (rec_call){5, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, src, NULL, dst, (int64_t)bytes});
}
static int rec_zero(vae_backend *be, void *dst, size_t bytes) {
    return rec_call_or_add(
        be, (rec_call){6, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, NULL, NULL, dst, (int64_t)bytes});
}
static void rec_release(vae_backend *be, void *p) {
    if (!rec_cur && rec_graphs == 0) {
        rec_inner->release(be, p);
        return;
    }
    rec_held = realloc(rec_held, (size_t)(rec_n_held + 1) * sizeof *rec_held);
    rec_held[rec_n_held++] = p;
}
static int rec_begin(vae_backend *be) {
    (void)be;
    rec_cur = calloc(1, sizeof *rec_cur);
    return VAE_OK;
}
static int rec_marks, rec_caught_up; /* marks set; what mark_reached answers */
static int rec_mark(vae_backend *be) {
    (void)be;
    rec_marks++;
    return VAE_OK;
}
static int rec_mark_reached(vae_backend *be) {
    (void)be;
    return rec_caught_up;
}

static void rec_free(vae_backend *be, void *graph) {
    rec_graph *g = graph;
    for (int i = 0; i < g->n; i++)
        free(g->v[i].frames);
    free(g->v);
    free(g);
    if (--rec_graphs == 0) {
        for (int i = 0; i < rec_n_held; i++)
            rec_inner->release(be, rec_held[i]);
        rec_n_held = 0;
    }
}
static int rec_end(vae_backend *be, void **graph) {
    rec_graph *g = rec_cur;
    rec_cur = NULL;
    rec_graphs++;
    if (rec_fail == 1) {
        rec_free(be, g);
        *graph = NULL;
        return vae_fail(VAE_EUNSUPPORTED, "test: recording refused");
    }
    rec_made += rec_fail == 0;
    *graph = g;
    return VAE_OK;
}
static int rec_launch(vae_backend *be, void *graph) {
    rec_graph *g = graph;
    rec_launches++;
    for (int i = 0; i < g->n; i++) {
        int rc = rec_run(be, &g->v[i]);
        if (rc) return rc;
    }
    return VAE_OK;
}

/* VAE_EXEC_CHECK=1 names the first op whose output is not finite (and a finite stream passes) */
static void test_check_mode(vae_backend *be) {
    vae_program p;
    vae_program_init(&p, C);
    vae_op a = vae_op_make(VAE_OP_ACT, 0, C, C);
    a.act = VAE_ACT_SILU;
    snprintf(a.name, sizeof a.name, "check.silu");
    int va = vae_program_add(&p, &a);
    vae_op s = vae_op_make(VAE_OP_SCALE_SHIFT, va, C, C);
    snprintf(s.name, sizeof s.name, "check.scale");
    vae_program_add(&p, &s);
    static float x[2 * H * W * C];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = frand();
    test_set.exec_check = 1;
    for (int bad = 0; bad < 2; bad++) {
        x[H * W * C + 5] = bad ? INFINITY : 0.5f; /* frame 1, pixel 1, channel 2 (C = 3) */
        vae_exec *e = NULL;
        int rc = vae_exec_create(&e, &p, be, &test_cfg);
        void *dev = be->v->alloc(be, sizeof x);
        if (rc == VAE_OK && dev) rc = be->v->upload(be, dev, x, sizeof x / sizeof *x);
        vae_chunk in = {dev, 2, H, W, C}, o;
        if (rc == VAE_OK) rc = vae_exec_step(e, &in, &o);
        CHECK(bad ? rc == VAE_ENAN && strstr(vae_last_error(), "check.silu") &&
                        strstr(vae_last_error(), "frame 1, pixel 1, channel 2")
                  : rc == VAE_OK,
              "check mode (bad %d): rc %d, %s", bad, rc, rc ? vae_last_error() : "ok");
        be->v->release(be, dev);
        vae_exec_free(e);
    }
    test_set.exec_check = 0;
    vae_program_free(&p);
}

static void test_graphs(vae_backend *be) {
    enum { T = 17 };
    static float x[T * H * W * C];
    float w1[C * C * 3], w2[C * C * 3];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = frand();
    for (int i = 0; i < C * C * 3; i++)
        w1[i] = frand(), w2[i] = frand();
    /* silu -> causal conv (+ residual x) -> first frame ++ the rest -> silu -> replicate-padded
     * conv: windows, contiguous windows, frame counters and a residual in one program */
    vae_program p;
    vae_program_init(&p, C);
    vae_op a = vae_op_make(VAE_OP_ACT, 0, C, C);
    a.act = VAE_ACT_SILU;
    int va = vae_program_add(&p, &a);
    vae_op c1 = vae_op_make(VAE_OP_CONV, va, C, C);
    c1.kt = 3, c1.tpad = 2, c1.w = w1, c1.in[1] = 0;
    snprintf(c1.name, sizeof c1.name, "graph.conv1");
    int v1 = vae_program_add(&p, &c1);
    vae_op a2 = vae_op_make(VAE_OP_ACT, add_head_drop_concat(&p, v1), C, C);
    a2.act = VAE_ACT_SILU;
    int va2 = vae_program_add(&p, &a2);
    vae_op c2 = vae_op_make(VAE_OP_CONV, va2, C, C);
    c2.kt = 3, c2.tpad = 2, c2.tpad_mode = VAE_TPAD_REPLICATE, c2.w = w2;
    snprintf(c2.name, sizeof c2.name, "graph.conv2");
    vae_program_add(&p, &c2);

    rec_inner = be->v;
    rec_vtbl = *be->v;
    rec_vtbl.conv = rec_conv, rec_vtbl.norm = rec_norm, rec_vtbl.eltwise = rec_eltwise;
    rec_vtbl.resample = rec_resample, rec_vtbl.copy = rec_copy, rec_vtbl.zero = rec_zero;
    rec_vtbl.release = rec_release;
    rec_vtbl.graph_begin = rec_begin, rec_vtbl.graph_end = rec_end;
    rec_vtbl.graph_launch = rec_launch, rec_vtbl.graph_free = rec_free;
    const int cut_sets[][4] = {{1, 1, 1, 1}, {1, 4, 4, 4}, {2, 3, 3, 3}, {1, 3, 3, 3}};
    for (int s = 0; s < 4; s++) {
        for (int fail = 0; fail < 3; fail++) {
            int t0, t1, oh, ow, oc;
            int64_t peak;
            test_set.exec_graph = 0;
            float *ref = run_stream(be, &p, x, T, cut_sets[s], 4, &t0, &oh, &ow, &oc, &peak);
            test_set.exec_graph = 1;
            be->v = &rec_vtbl;
            rec_made = rec_launches = 0;
            rec_fail = fail;
            float *y = run_stream(be, &p, x, T, cut_sets[s], 4, &t1, &oh, &ow, &oc, &peak);
            be->v = rec_inner;
            /* steps: the first, then the first steady one is recorded (state unchanged by the one
             * before); with 4-frame cuts the last, shorter step runs plainly */
            int steps = 0;
            for (int pos = 0, k = 0; pos < T; k++, steps++)
                pos += cut_sets[s][k < 4 ? k : 3];
            int tail = (T - cut_sets[s][0]) % cut_sets[s][3] != 0;
            int want = fail ? 0 : steps - 2 - tail;
            CHECK(ref && y && t0 == t1 && max_diff(ref, y, (size_t)t0 * H * W * C) == 0,
                  "graphs (cuts %d, failing %d): output differs from plain steps", s, fail);
            CHECK(rec_made == (fail ? 0 : 1) && rec_launches == want,
                  "graphs (cuts %d, failing %d): %d recorded, %d launches (expected %d, %d)", s,
                  fail, rec_made, rec_launches, fail ? 0 : 1, want);
            CHECK(rec_graphs == 0 && rec_n_held == 0, "graphs (cuts %d): %d graphs left", s,
                  rec_graphs);
            free(ref);
            free(y);
        }
    }
    /* VAE_EXEC_GRAPH=2 in one call's steps: no recording where the device has caught up with the
     * host (every mark reached), as with 1 where it stays behind; the same output either way */
    rec_vtbl.mark = rec_mark, rec_vtbl.mark_reached = rec_mark_reached;
    for (int caught_up = 0; caught_up < 3; caught_up++) { /* 2: caught up, in a stream */
        int t0, t1, oh, ow, oc;
        int64_t peak;
        test_set.exec_graph = 0;
        float *ref = run_stream(be, &p, x, T, cut_sets[1], 4, &t0, &oh, &ow, &oc, &peak);
        test_set.exec_graph = 2, test_batch = caught_up < 2;
        be->v = &rec_vtbl;
        rec_made = rec_launches = rec_marks = rec_fail = 0;
        rec_caught_up = caught_up > 0;
        float *y = run_stream(be, &p, x, T, cut_sets[1], 4, &t1, &oh, &ow, &oc, &peak);
        be->v = rec_inner;
        test_set.exec_graph = 1, test_batch = 0;
        CHECK(ref && y && t0 == t1 && max_diff(ref, y, (size_t)t0 * H * W * C) == 0,
              "graphs when behind (caught up %d): output differs from plain steps", caught_up);
        const int want = caught_up != 1; /* (a stream marks nothing and records) */
        CHECK((rec_marks > 0) == (caught_up < 2) && rec_made == want && rec_graphs == 0,
              "graphs when behind (case %d): %d marks, %d recorded (expected %d)", caught_up,
              rec_marks, rec_made, want);
        free(ref);
        free(y);
    }
    free(rec_held);
    vae_program_free(&p);
}

/* A conv with input upsampling (op.up = 2) equals UPSAMPLE then the conv (the executor upsamples
 * for backends without conv_upsample), with a residual, in dry and real mode. */
static void test_conv_up(vae_backend *be) {
    enum { T = 3 };
    float x[T * H * W * C], w[C * C * 9], b[C];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = frand();
    for (size_t i = 0; i < sizeof w / sizeof *w; i++) w[i] = frand();
    for (int i = 0; i < C; i++) b[i] = frand();
    vae_program p1, p2;
    vae_program_init(&p1, C);
    vae_program_init(&p2, C);
    vae_op conv = vae_op_make(VAE_OP_CONV, 0, C, C);
    conv.kh = conv.kw = 3, conv.pad_h[0] = conv.pad_h[1] = conv.pad_w[0] = conv.pad_w[1] = 1;
    conv.w = w, conv.b = b;
    snprintf(conv.name, sizeof conv.name, "conv_up");
    /* p1: y = conv(up(x)) + up(x) ; p2: the same with the upsampling inside the conv */
    vae_op up = vae_op_make(VAE_OP_UPSAMPLE, 0, C, C);
    up.fs = 2;
    int u = vae_program_add(&p1, &up);
    vae_op c1 = conv;
    c1.in[0] = u, c1.in[1] = u;
    vae_program_add(&p1, &c1);
    int u2 = vae_program_add(&p2, &up);
    vae_op c2 = conv;
    c2.in[0] = 0, c2.in[1] = u2, c2.up = 2;
    vae_program_add(&p2, &c2);
    const int cuts[1] = {2};
    int t1, h1, w1, o1, t2, h2, w2, o2;
    int64_t peak;
    float *y1 = run_stream(be, &p1, x, T, cuts, 1, &t1, &h1, &w1, &o1, &peak);
    float *y2 = run_stream(be, &p2, x, T, cuts, 1, &t2, &h2, &w2, &o2, &peak);
    CHECK(y1 && y2 && t1 == T && t2 == T && h1 == 2 * H && h2 == 2 * H && w2 == 2 * W,
          "conv up: %d frames %dx%d vs %d frames %dx%d", t1, h1, w1, t2, h2, w2);
    if (y1 && y2 && t1 == t2 && h1 == h2 && w1 == w2)
        CHECK(max_diff(y1, y2, (size_t)t1 * h1 * w1 * o1) < 1e-5, "conv up differs by %g",
              max_diff(y1, y2, (size_t)t1 * h1 * w1 * o1));
    int wt = 0, wh = 0, ww = 0;
    p2.first_chunk = p2.chunk = T;
    vae_plan_walk(&p2, T, H, W, &wt, &wh, &ww, NULL);
    CHECK(wt == T && wh == 2 * H && ww == 2 * W, "walked conv up: %d frames %dx%d", wt, wh, ww);
    free(y1);
    free(y2);
    vae_program_free(&p1);
    vae_program_free(&p2);
}

/* The planner's walk gives the frame count the stream rule gives. */
static void test_walk(void) {
    float w[C * C * 3] = {0};
    vae_program p;
    vae_program_init(&p, C);
    vae_op op = vae_op_make(VAE_OP_CONV, 0, C, C);
    op.kt = 3, op.st = 2, op.w = w;
    vae_program_add(&p, &op);
    p.first_chunk = 1, p.chunk = 4;
    int t = 0, h = 0, wd = 0;
    double macs = 0;
    int rc = vae_plan_walk(&p, 13, H, W, &t, &h, &wd, &macs);
    CHECK(rc == VAE_OK && t == (13 - 3) / 2 + 1 && h == H && wd == W &&
              macs == (double)t * H * W * C * C * 3,
          "walk gives %d frames %dx%d, %g MACs", t, h, wd, macs);
    vae_program_free(&p);
}

/* The FP8 mark (vae_program_mark_fp8): the convs of residual branches, wider than 16 channels. */
static int add_conv(vae_program *p, int x, int res, int c_in, int c_out) {
    vae_op op = vae_op_make(VAE_OP_CONV, x, c_in, c_out);
    op.in[1] = res;
    return vae_program_add(p, &op);
}

/* test_fp8_mark's backend: runs every conv in E4M3 but the one named "1" */
static int pick_runs(void *user, const vae_op *op) {
    (void)user;
    return strcmp(op->name, "1") != 0;
}

static int codes_yes(void *user, const vae_op *producer, const vae_op *reader) {
    (void)producer, (void)reader;
    return user != NULL;
}

/* E4M3 codes between producers and readers (vae_program_mark_fp8_codes) on test_fp8_mark's
 * program p (value n: the RMS norm read by conv b alone, b E4M3 with a bound; c and d E4M3
 * without one): b and its norm where the backend takes them, nothing where it does not; a conv
 * with a folded norm as the producer; a producer read twice, or an E4M3 conv without a bound,
 * never. */
static void test_fp8_codes_mark(const vae_program *p, int n, int b) {
    int yes = 1;
    for (int k = 0; k < 2; k++) {
        vae_program q;
        CHECK(vae_program_copy(p, &q) == VAE_OK, "copy: %s", vae_last_error());
        const int marked = vae_program_mark_fp8_codes(&q, codes_yes, k ? NULL : &yes);
        int others = 0;
        for (int j = 0; j < q.n_ops; j++)
            others += (q.ops[j].fp8_codes_in && j != b - 1) ||
                      (q.ops[j].fp8_codes_bound > 0 && j != n - 1);
        CHECK(marked == !k && q.ops[b - 1].fp8_codes_in == !k && others == 0 &&
                  q.ops[n - 1].fp8_codes_bound == (k ? 0.0f : q.ops[b - 1].fp8_bound),
              "fp8 codes marks (backend %s): %d readers, b %d, its norm's bound %g, %d others",
              k ? "refuses" : "takes", marked, q.ops[b - 1].fp8_codes_in,
              q.ops[n - 1].fp8_codes_bound, others);
        vae_program_free(&q);
    }
    /* input -> conv a (a folded norm) -> conv e (E4M3, bound 2) -> conv f, the output; a also
     * read by f as its skip, then not */
    for (int skip = 0; skip < 2; skip++) {
        static const float gamma[16] = {1.0f};
        vae_program q;
        vae_program_init(&q, 16);
        vae_op op = vae_op_make(VAE_OP_CONV, q.input, 16, 16);
        op.norm_w = gamma;
        const int a = vae_program_add(&q, &op);
        op = vae_op_make(VAE_OP_CONV, a, 16, 16);
        op.fp8 = 1, op.fp8_bound = 2.0f;
        const int e = vae_program_add(&q, &op);
        op = vae_op_make(VAE_OP_CONV, e, 16, 16);
        op.in[1] = skip ? a : -1;
        vae_program_add(&q, &op);
        const int marked = vae_program_mark_fp8_codes(&q, codes_yes, &yes);
        CHECK(marked == !skip && q.ops[e - 1].fp8_codes_in == !skip &&
                  q.ops[a - 1].fp8_codes_bound == (skip ? 0.0f : 2.0f),
              "fp8 codes from a conv's folded norm (%s): %d marked, bound %g",
              skip ? "read twice" : "read once", marked, q.ops[a - 1].fp8_codes_bound);
        vae_program_free(&q);
    }
}

static void test_fp8_mark(void) {
    enum { D = 32 };
    vae_program p;
    vae_program_init(&p, D);
    const int a = add_conv(&p, p.input, -1, D, D); /* read by the norm and as C's skip: no */
    float gamma[D], beta[D];
    for (int i = 0; i < D; i++)
        gamma[i] = 0.5f + 0.01f * i, beta[i] = 0.1f;
    gamma[3] = -2.0f, beta[3] = 0.5f; /* the bound's channel: sqrt(32) * 2 + 0.5 */
    gamma[5] = 0.1f, beta[5] = 3.0f;   /* the largest bias, not the bound's */
    vae_op op = vae_op_make(VAE_OP_RMS_NORM, a, D, D);
    op.w = gamma, op.b = beta, op.act = VAE_ACT_SILU;
    const int n = vae_program_add(&p, &op);
    const int b = add_conv(&p, n, -1, D, D); /* into C's first input: yes */
    const int c = add_conv(&p, b, a, D, D);  /* adds a residual: yes */
    const int d = add_conv(&p, c, -1, D, D); /* into the ADD's first input: yes */
    const int k = add_conv(&p, c, -1, D, D); /* the ADD's skip: no */
    op = vae_op_make(VAE_OP_ADD, d, D, D);
    op.in[1] = k;
    const int e = vae_program_add(&p, &op);
    const int f = add_conv(&p, e, -1, D, 16); /* narrow: no */
    const int g = add_conv(&p, f, e, 16, D);  /* narrow input, adds a residual: no */
    const int h = add_conv(&p, g, -1, D, D);  /* the program's output: no */
    vae_program_mark_fp8(&p);
    const int want[][2] = {{a, 0}, {b, 1}, {c, 1}, {d, 1}, {k, 0}, {f, 0}, {g, 0}, {h, 0}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const vae_op *o = &p.ops[want[i][0] - 1];
        CHECK(vae_op_fp8(o) == want[i][1], "conv %zu (value %d): fp8 %d, expected %d", i,
              want[i][0], vae_op_fp8(o), want[i][1]);
    }
    CHECK(!vae_op_fp8(&p.ops[n - 1]) && !vae_op_fp8(&p.ops[e - 1]), "a norm or an add marked");
    /* the input bound of the conv after the RMS norm + SiLU (vae_op_rms_bound), none after a conv
     * or an add; a GroupNorm or another activation gives none */
    const float bound = sqrtf((float)D) * 2.0f + 0.5f;
    CHECK(fabsf(p.ops[b - 1].fp8_bound - bound) < 1e-4f * bound && p.ops[c - 1].fp8_bound == 0 &&
              p.ops[d - 1].fp8_bound == 0,
          "fp8 input bounds %g (expected %g), %g, %g", p.ops[b - 1].fp8_bound, bound,
          p.ops[c - 1].fp8_bound, p.ops[d - 1].fp8_bound);
    vae_op norm = p.ops[n - 1];
    norm.act = VAE_ACT_RELU;
    CHECK(vae_op_rms_bound(&norm) == 0, "a bound through ReLU: %g", vae_op_rms_bound(&norm));
    norm.act = VAE_ACT_SILU, norm.w = NULL, norm.b = NULL;
    CHECK(fabsf(vae_op_rms_bound(&norm) - sqrtf((float)D)) < 1e-4f, "the bound without weights: %g",
          vae_op_rms_bound(&norm));
    norm.kind = VAE_OP_GROUP_NORM;
    CHECK(vae_op_rms_bound(&norm) == 0, "a bound of a GroupNorm: %g", vae_op_rms_bound(&norm));

    /* a session's pick (vae_program_pick_fp8) on copies: the marked convs the backend runs in
     * E4M3, nearest the output first, at most the budget; the model's marks stay */
    static const struct {
        int budget, refused, kept, want_b, want_c, want_d;
    } pick[] = {{0, 0, 3, 1, 1, 1},   {1, 0, 1, 0, 0, 1},   {2, 0, 2, 0, 1, 1},
                {2, 'd', 2, 1, 1, 0}, {0, 'c', 2, 1, 0, 1}, {5, 'b', 2, 0, 1, 1}};
    for (size_t i = 0; i < sizeof pick / sizeof *pick; i++) {
        vae_program q;
        CHECK(vae_program_copy(&p, &q) == VAE_OK, "copy: %s", vae_last_error());
        const int refuse = pick[i].refused == 'b'   ? b
                           : pick[i].refused == 'c' ? c
                           : pick[i].refused == 'd' ? d
                                                    : -1;
        for (int j = 0; j < q.n_ops; j++) /* the names tell the callback which conv it is */
            snprintf(q.ops[j].name, sizeof q.ops[j].name, "%d", q.ops[j].out == refuse);
        const int kept = vae_program_pick_fp8(&q, pick[i].budget, pick_runs, NULL);
        const int got[3] = {vae_op_fp8(&q.ops[b - 1]), vae_op_fp8(&q.ops[c - 1]),
                            vae_op_fp8(&q.ops[d - 1])};
        CHECK(kept == pick[i].kept && got[0] == pick[i].want_b && got[1] == pick[i].want_c &&
                  got[2] == pick[i].want_d,
              "pick %zu (budget %d): kept %d (b %d c %d d %d), expected %d (%d %d %d)", i,
              pick[i].budget, kept, got[0], got[1], got[2], pick[i].kept, pick[i].want_b,
              pick[i].want_c, pick[i].want_d);
        int others = 0;
        for (int j = 0; j < q.n_ops; j++)
            others += vae_op_fp8(&q.ops[j]) && j != b - 1 && j != c - 1 && j != d - 1;
        CHECK(others == 0, "pick %zu marked %d unmarked ops", i, others);
        vae_program_free(&q);
    }
    CHECK(vae_op_fp8(&p.ops[b - 1]) && vae_op_fp8(&p.ops[c - 1]) && vae_op_fp8(&p.ops[d - 1]),
          "picking on a copy changed the model's marks");
    test_fp8_codes_mark(&p, n, b);
    vae_program_free(&p);
}

/* The shapes the E4M3 GPU kernels take (vae_op_fp8_kernel), which the CPU emulation picks by
 * too: temporal, stride 1, no upsampling, symmetric spatial padding, and c_in % 64 with c_out % 96
 * or % 128 (the implicit GEMM), or 3x3 with 96 filters and c_in % 96 (the halo-tile kernel). Each
 * case changes one thing of a conv that is taken. */
static void test_fp8_kernel_shapes(void) {
    static const struct {
        const char *what;
        int c_in, c_out, kt, kh, stride_h, up, pad_bottom, kind, want;
    } cases[] = {
        {"192 -> 192, 3x3x3", 192, 192, 3, 3, 1, 0, 1, VAE_OP_CONV, 1},
        {"384 -> 768, 3x1x1 (time_conv)", 384, 768, 3, 1, 1, 0, 0, VAE_OP_CONV, 1},
        {"128 -> 96", 128, 96, 3, 3, 1, 0, 1, VAE_OP_CONV, 1},
        {"96 -> 96 (the halo-tile kernel)", 96, 96, 3, 3, 1, 0, 1, VAE_OP_CONV, 1},
        {"288 -> 96 (the halo-tile kernel)", 288, 96, 3, 3, 1, 0, 1, VAE_OP_CONV, 1},
        {"96 -> 96, 3x1x1 (c_in, not 3x3)", 96, 96, 3, 1, 1, 0, 0, VAE_OP_CONV, 0},
        {"96 -> 192 (c_in, not 96 filters)", 96, 192, 3, 3, 1, 0, 1, VAE_OP_CONV, 0},
        {"144 -> 96 (c_in)", 144, 96, 3, 3, 1, 0, 1, VAE_OP_CONV, 0},
        {"96 -> 96, 1x3x3 (2-D)", 96, 96, 1, 3, 1, 0, 1, VAE_OP_CONV, 0},
        {"128 -> 64 (c_out)", 128, 64, 3, 3, 1, 0, 1, VAE_OP_CONV, 0},
        {"192 -> 192, 1x3x3 (2-D)", 192, 192, 1, 3, 1, 0, 1, VAE_OP_CONV, 0},
        {"192 -> 192, stride 2", 192, 192, 3, 3, 2, 0, 1, VAE_OP_CONV, 0},
        {"192 -> 192, up 2", 192, 192, 3, 3, 1, 2, 1, VAE_OP_CONV, 0},
        {"192 -> 192, padding 1 above, 0 below", 192, 192, 3, 3, 1, 0, 0, VAE_OP_CONV, 0},
        {"an RMS norm", 192, 192, 1, 1, 1, 0, 0, VAE_OP_RMS_NORM, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        vae_op op = vae_op_make(cases[i].kind, 0, cases[i].c_in, cases[i].c_out);
        op.kt = cases[i].kt, op.kh = op.kw = cases[i].kh, op.sh = cases[i].stride_h;
        op.up = cases[i].up;
        op.pad_h[0] = op.pad_w[0] = op.pad_w[1] = cases[i].kh / 2;
        op.pad_h[1] = cases[i].pad_bottom;
        CHECK(vae_op_fp8_kernel(&op) == cases[i].want, "fp8 kernel shape %s: %d, expected %d",
              cases[i].what, vae_op_fp8_kernel(&op), cases[i].want);
    }
}

/* Each output channel's E4M3 weight scale (vae_fp8_weight_scales): float32 filters get their
 * largest magnitude / 448; filters already on a scaled E4M3 grid (E4M3 codes times a scale, each
 * product rounded to float32, subnormal codes among them) keep every code: rounded to the grid of
 * their scale they come back as they were, for the largest code of each of the 8 mantissas. */
static void test_fp8_weight_scales(void) {
    enum { CO = 10, PER = 96 };
    static float w[CO][PER];
    float scale[CO];
    for (int o = 0; o < CO; o++) {
        const float s_t = 0.37f * (float)(o + 1) / 7.0f; /* the checkpoint's scale */
        for (int i = 0; i < PER; i++) {
            float q = vae_f32_round_e4m3(200.0f * frand()); /* codes, a few of them subnormal */
            if (i % 16 == 5) q = vae_f32_round_e4m3(0.01f * frand());
            w[o][i] = o < 8 ? q * s_t : 0.01f * frand();
        }
        /* channel o < 8: its largest code 2^k (1 + o/8) (o = 7: 240, 480 being no E4M3 value) */
        if (o < 8) w[o][PER - 1] = (o < 7 ? 256.0f + 32.0f * o : 240.0f) / 2.0f * s_t;
    }
    memset(w[CO - 1], 0, sizeof w[CO - 1]); /* the last channel all zero */
    vae_fp8_weight_scales(&w[0][0], CO, PER, scale);
    for (int o = 0; o < CO; o++) {
        float m = 0, worst = 0;
        for (int i = 0; i < PER; i++) {
            m = fmaxf(m, fabsf(w[o][i]));
            if (scale[o] > 0) {
                const float back = vae_f32_round_e4m3(w[o][i] / scale[o]) * scale[o];
                worst = fmaxf(worst, fabsf(back - w[o][i]) / fabsf(w[o][i] + 1e-30f));
            }
        }
        if (o >= 8) { /* float32 filters (and zeros): largest / 448 */
            CHECK(scale[o] == m / 448.0f, "fp8 scale of float32 channel %d: %g, expected %g", o,
                  scale[o], m / 448.0f);
            continue;
        }
        CHECK(worst < 1e-6f && m / scale[o] <= 448.0f,
              "fp8 scale of stored channel %d: codes moved by %g of their value, largest %g", o,
              worst, m / scale[o]);
    }
}

/* The filters rounded onto their grids (vae_fp8_weights_round): every value a code times its
 * channel's scale; filters already on their grids, and 1 x 1 filters, as nearest rounding makes
 * them; 3 x 3 x 3 filters with their taps' errors spread: against a smooth input (a plane over
 * the window) the output's error well below nearest rounding's, against white noise not much
 * above. */
static void test_fp8_weights_round(void) {
    enum { CO = 6, CI = 8, KT = 3, TAPS = 9, PER = CI * KT * TAPS };
    static float w[CO * PER], r[CO * PER], q[CO * PER];
    float scale[CO];
    for (int i = 0; i < CO * PER; i++)
        w[i] = 0.05f * frand();
    vae_fp8_weight_scales(w, CO, PER, scale);
    vae_fp8_weights_round(w, CO, CI, KT, 3, 3, scale, r, 1);
    /* as codes, channels last (two threads): the same values */
    static uint8_t codes[CO * PER];
    CHECK(vae_fp8_weights_codes(w, CO, CI, KT, 3, 3, scale, codes, 2), "fp8 codes: no memory");
    int code_bad = 0;
    for (int o = 0; o < CO; o++)
        for (int c = 0; c < CI; c++)
            for (int k = 0; k < KT * TAPS; k++) {
                const float v = vae_f8e4m3_to_f32(codes[(o * KT * TAPS + k) * CI + c]) * scale[o];
                code_bad += v != r[(o * CI + c) * KT * TAPS + k];
            }
    CHECK(code_bad == 0, "fp8 weights codes: %d of %d differ from the rounded filters", code_bad,
          CO * PER);
    double smooth[2] = {0, 0}, white[2] = {0, 0};
    int off_grid = 0;
    for (int o = 0; o < CO; o++)
        for (int f = 0; f < CI * KT; f++) {
            const float *wf = w + (size_t)o * PER + f * TAPS;
            const float *rf = r + (size_t)o * PER + f * TAPS;
            const float a = frand(), gy = 0.3f * frand(), gx = 0.3f * frand(); /* the plane */
            double e_s[2] = {0, 0};
            for (int t = 0; t < TAPS; t++) {
                const float near = vae_f32_round_e4m3(wf[t] / scale[o]) * scale[o];
                off_grid += vae_f32_round_e4m3(rf[t] / scale[o]) * scale[o] != rf[t];
                const float x = a + gy * (float)(t / 3 - 1) + gx * (float)(t % 3 - 1);
                const double d[2] = {near - wf[t], rf[t] - wf[t]};
                for (int k = 0; k < 2; k++) {
                    e_s[k] += d[k] * x;
                    white[k] += d[k] * d[k];
                }
            }
            for (int k = 0; k < 2; k++)
                smooth[k] += e_s[k] * e_s[k];
        }
    CHECK(off_grid == 0, "fp8 weights round: %d values off their grids", off_grid);
    CHECK(smooth[1] < 0.45 * smooth[0] && white[1] < 1.7 * white[0],
          "fp8 weights round: error on a smooth input %.3g of nearest rounding's, on white noise "
          "%.3g (expected below 0.45 and 1.7; 0.34 and 1.47 when written)",
          smooth[1] / smooth[0], white[1] / white[0]);
    /* on the grid already (nearest rounding's output), and 1 x 1: nearest rounding */
    for (int i = 0; i < CO * PER; i++)
        q[i] = vae_f32_round_e4m3(w[i] / scale[i / PER]) * scale[i / PER];
    vae_fp8_weights_round(q, CO, CI, KT, 3, 3, scale, r, 1);
    CHECK(memcmp(q, r, sizeof q) == 0, "fp8 weights round: filters on their grid moved");
    vae_fp8_weights_round(w, CO, PER, 1, 1, 1, scale, r, 1);
    CHECK(memcmp(q, r, sizeof q) == 0, "fp8 weights round: 1 x 1 filters not nearest rounding");
}

/* Which convs read their input through a contiguous window (vae_program_window_ok, the rule the
 * executor and the planner share) and the reader counts it is decided on. */
static int add_tconv(vae_program *p, int x, int res, int tpad) {
    vae_op op = vae_op_make(VAE_OP_CONV, x, 8, 8);
    op.in[1] = res, op.kt = 3, op.tpad = tpad;
    return vae_program_add(p, &op);
}

static void test_window_rule(void) {
    vae_program p;
    vae_program_init(&p, 8);
    const int a = add_tconv(&p, p.input, -1, 2); /* the program's input: no */
    vae_op op = vae_op_make(VAE_OP_RMS_NORM, a, 8, 8);
    const int n = vae_program_add(&p, &op);
    const int b = add_tconv(&p, n, -1, 2); /* an inner value read once: yes */
    const int c = add_tconv(&p, b, -1, 3); /* more front padding than its cache: no */
    const int d = add_tconv(&p, c, -1, 2); /* c read twice: no */
    const int k = add_tconv(&p, c, d, 2);  /* (the other reader of c) */
    op = vae_op_make(VAE_OP_CONV, k, 8, 8);
    const int e = vae_program_add(&p, &op); /* not temporal: no */
    const int f = add_tconv(&p, e, e, 2);   /* its input also its residual: no */
    const int g = add_tconv(&p, f, -1, 2);  /* yes (its output is the program's) */
    int uses[16] = {0};
    if (p.n_values > 16) {
        CHECK(0, "%d values (the test holds 16)", p.n_values);
        vae_program_free(&p);
        return;
    }
    vae_program_count_readers(&p, uses);
    CHECK(uses[c] == 2 && uses[d] == 1 && uses[e] == 2 && uses[g] == 0 && uses[p.input] == 1,
          "reader counts: c %d d %d e %d g %d input %d", uses[c], uses[d], uses[e], uses[g],
          uses[p.input]);
    const int want[][2] = {{a, 0}, {b, 1}, {c, 0}, {d, 0}, {k, 0}, {e, 0}, {f, 0}, {g, 1}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK(vae_program_window_ok(&p, want[i][0] - 1, uses) == want[i][1],
              "conv %zu (value %d): window %d, expected %d", i, want[i][0],
              vae_program_window_ok(&p, want[i][0] - 1, uses), want[i][1]);
    vae_program_free(&p);
}

/* A program p and its folded copy q streamed over the same T frames of x (cut 1, 4, 3): the same
 * frames, bit for bit. Returns p's output (the caller frees it), NULL when they differ. */
static float *same_streams(vae_backend *be, const vae_program *p, const vae_program *q,
                           const float *x, int T, const char *what) {
    const int cuts[3] = {1, 4, 3};
    int t1, t2, oh, ow, oc;
    int64_t peak;
    float *y1 = run_stream(be, p, x, T, cuts, 3, &t1, &oh, &ow, &oc, &peak);
    float *y2 = run_stream(be, q, x, T, cuts, 3, &t2, &oh, &ow, &oc, &peak);
    const int ok = y1 && y2 && t1 == T && t2 == T;
    const double d = ok ? max_diff(y1, y2, (size_t)T * H * W * C) : 0;
    CHECK(ok && d == 0.0, "%s: %d and %d frames of %d, outputs differ by %g", what, t1, t2, T, d);
    free(y2);
    if (ok && d == 0.0) return y1;
    free(y1);
    return NULL;
}

/* RMS norms folded into the conv before them (vae_program_fuse_norms): only a norm whose input is
 * a conv's output that nothing else reads; the folded program streams to the same values (the
 * CPU runs the same norm in place) with two ops and two values fewer. */
static int add_norm(vae_program *p, int x, const float *g, vae_act act) {
    vae_op op = vae_op_make(VAE_OP_RMS_NORM, x, C, C);
    op.w = g, op.act = act;
    return vae_program_add(p, &op);
}

static int add_conv3(vae_program *p, int x, int res, const float *w) {
    vae_op op = vae_op_make(VAE_OP_CONV, x, C, C);
    op.in[1] = res, op.kt = op.kh = op.kw = 3, op.tpad = 2;
    op.pad_h[0] = op.pad_h[1] = op.pad_w[0] = op.pad_w[1] = 1;
    op.w = w;
    return vae_program_add(p, &op);
}

static void test_fuse_norms(vae_backend *be) {
    enum { T = 9, K = C * C * 27 };
    static float x[T * H * W * C], w[3][K], g[4][C];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = frand();
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < K; i++)
            w[k][i] = frand() * 0.3f;
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < C; i++)
            g[k][i] = 0.5f + 0.5f * frand();
    vae_program p;
    vae_program_init(&p, C);
    const int n0 = add_norm(&p, p.input, g[0], VAE_ACT_SILU); /* reads the input: stays */
    const int a = add_conv3(&p, n0, -1, w[0]);
    const int na = add_norm(&p, a, g[1], VAE_ACT_SILU); /* a read by it alone: folds */
    const int b = add_conv3(&p, na, p.input, w[1]);
    const int nb = add_norm(&p, b, g[2], VAE_ACT_NONE); /* b also c's residual: stays */
    const int c = add_conv3(&p, nb, b, w[2]);
    add_norm(&p, c, g[3], VAE_ACT_SILU); /* the output: folds */
    vae_program q;
    int folded = -1;
    CHECK(vae_program_copy(&p, &q) == VAE_OK && vae_program_fuse_norms(&q, &folded) == VAE_OK,
          "fuse: %s", vae_last_error());
    CHECK(folded == 2 && q.n_ops == p.n_ops - 2 && q.n_values == p.n_values - 2 &&
              q.output == q.n_values - 1,
          "fuse: %d folded, %d ops, %d values, output %d", folded, q.n_ops, q.n_values, q.output);
    CHECK(q.n_ops == 5 && q.ops[1].norm_w == g[1] && q.ops[1].norm_act == VAE_ACT_SILU &&
              q.ops[4].norm_w == g[3] && !q.ops[2].norm_w && q.ops[3].kind == VAE_OP_RMS_NORM &&
              q.ops[2].in[0] == q.ops[1].out && q.ops[2].in[1] == q.input &&
              q.ops[4].in[1] == q.ops[2].out && vae_op_check(&q.ops[1]) == VAE_OK,
          "fuse: the folded program's ops (values %d %d %d %d)", a, na, nb, c);
    float *y = same_streams(be, &p, &q, x, T, "fuse");
    double m = 0;
    for (size_t i = 0; y && i < (size_t)T * H * W * C; i++)
        m = fmax(m, fabs(y[i]));
    CHECK(m > 0.1, "fuse: max |y| %g", m);
    free(y);
    vae_program_free(&q);
    vae_program_free(&p);
    vae_program empty; /* an absent side (a model without an encoder): nothing, no error */
    memset(&empty, 0, sizeof empty);
    folded = -1;
    CHECK(vae_program_fuse_norms(&empty, &folded) == VAE_OK && folded == 0 && empty.n_ops == 0,
          "fuse on an empty program: %d folded", folded);
}

/* Activations folded into the conv before them (vae_program_fuse_acts), after the norms: only an
 * activation whose input is a conv's output that nothing else reads, and not a conv that took a
 * norm; the folded program streams to the same values, bit for bit (the CPU applies the
 * activation in place after the bias and the residual). */
static int add_act(vae_program *p, int x, vae_act act) {
    vae_op op = vae_op_make(VAE_OP_ACT, x, C, C);
    op.act = act, op.act_scale = act == VAE_ACT_TANH_SCALE ? 3.0f : 0.0f;
    return vae_program_add(p, &op);
}

static void test_fuse_acts(vae_backend *be) {
    enum { T = 9, K = C * C * 27 };
    static float x[T * H * W * C], w[4][K], g[C];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++)
        x[i] = frand();
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < K; i++)
            w[k][i] = frand() * 0.3f;
    for (int i = 0; i < C; i++)
        g[i] = 0.5f + 0.5f * frand();
    vae_program p;
    vae_program_init(&p, C);
    const int r0 = add_act(&p, p.input, VAE_ACT_RELU); /* reads the input: stays */
    const int a = add_conv3(&p, r0, -1, w[0]);
    const int ra = add_act(&p, a, VAE_ACT_RELU);       /* a read by it alone: folds */
    const int b = add_conv3(&p, ra, p.input, w[1]);    /* with a residual */
    const int rb = add_act(&p, b, VAE_ACT_TANH_SCALE); /* folds, after the residual */
    const int c = add_conv3(&p, rb, -1, w[2]);
    const int nc = add_norm(&p, c, g, VAE_ACT_NONE); /* c takes this norm ... */
    const int rc = add_act(&p, nc, VAE_ACT_SILU);    /* ... so this stays */
    const int d = add_conv3(&p, rc, -1, w[3]);
    add_act(&p, d, VAE_ACT_CLAMP01); /* the output: folds */
    vae_program q;
    int norms = -1, acts = -1;
    CHECK(vae_program_copy(&p, &q) == VAE_OK && vae_program_fuse_norms(&q, &norms) == VAE_OK &&
              vae_program_fuse_acts(&q, &acts) == VAE_OK,
          "fuse acts: %s", vae_last_error());
    CHECK(norms == 1 && acts == 3 && q.n_ops == p.n_ops - 4 && q.output == q.n_values - 1,
          "fuse acts: %d norms, %d acts folded, %d ops, output %d", norms, acts, q.n_ops, q.output);
    CHECK(q.n_ops == 6 && q.ops[0].kind == VAE_OP_ACT && q.ops[1].act == VAE_ACT_RELU &&
              q.ops[2].act == VAE_ACT_TANH_SCALE && q.ops[2].in[1] == q.input &&
              q.ops[3].norm_w == g && q.ops[3].act == VAE_ACT_NONE && q.ops[4].kind == VAE_OP_ACT &&
              q.ops[5].act == VAE_ACT_CLAMP01 && vae_op_check(&q.ops[2]) == VAE_OK,
          "fuse acts: the folded program's ops (values %d %d %d %d %d %d)", a, ra, b, rb, c, d);
    float *y = same_streams(be, &p, &q, x, T, "fuse acts");
    const size_t n = (size_t)T * H * W * C;
    size_t inside = 0; /* CLAMP01's range, strictly inside: the output is not all clamped */
    for (size_t i = 0; y && i < n; i++)
        inside += y[i] > 0.0f && y[i] < 1.0f;
    CHECK(inside > n / 10, "fuse acts: %zu of %zu outputs inside (0, 1)", inside, n);
    free(y);
    vae_program_free(&q);
    vae_program_free(&p);
}

/* A switch spelled as a word in the environment (VAE_CUDA_IGEMM=off|tuned|always) is read as its
 * value, a word it does not know is an error naming the variable and what it accepts. */
static void test_settings_words(void) {
    static const char *const words[3] = {"off", "tuned", "always"};
    vae_session_options so;
    vae_session_options_default(&so);
    for (int i = 0; i < 3; i++) {
        vae_settings s;
        vae_plat_setenv("VAE_CUDA_IGEMM", words[i]);
        int rc = vae_settings_resolve(&s, &so);
        CHECK(rc == VAE_OK && s.cuda_igemm == i, "VAE_CUDA_IGEMM=%s -> %d (rc %d)", words[i],
              s.cuda_igemm, rc);
    }
    vae_settings s;
    vae_plat_setenv("VAE_CUDA_IGEMM", "sometimes");
    int rc = vae_settings_resolve(&s, &so);
    CHECK(rc == VAE_EINVAL && strstr(vae_last_error(), "VAE_CUDA_IGEMM") &&
              strstr(vae_last_error(), "off, tuned, always, 0..2"),
          "VAE_CUDA_IGEMM=sometimes -> an error naming it (%s)", vae_last_error());
    vae_plat_setenv("VAE_CUDA_IGEMM", NULL);
    vae_error_clear();
}

/* What the settings log says while a test resolves: the INFO and DEBUG lines, one after another. */
static char settings_log[2048];
static void log_settings(int level, const char *msg, void *user) {
    (void)user;
    const size_t n = strlen(settings_log);
    snprintf(settings_log + n, sizeof settings_log - n, "%s%s\n",
             level == VAE_LOG_INFO ? "I " : level == VAE_LOG_DEBUG ? "D " : "? ", msg);
}

/* Precedence: the environment fills in a switch the API left unset, and a value set through the
 * API wins over the environment (a host pins a switch whatever the user's environment holds);
 * the INFO log names what came from the environment, the DEBUG log each override. A variable
 * the API overrode is not read (a bad value there is no error). The tune cache option likewise
 * wins over VAE_TUNE_CACHE. */
static void test_settings_precedence(void) {
    vae_settings s;
    vae_session_options so;
    vae_session_options_default(&so);
    vae_plat_setenv("VAE_EXEC_HOST_MB", "256");
    vae_plat_setenv("VAE_PLAN_STRIPS", "3");
    vae_plat_setenv("VAE_TUNE_CACHE", "/nonexistent/tune.txt");
    vae_set_log_callback(log_settings, NULL, VAE_LOG_DEBUG);
    settings_log[0] = 0;
    vae_settings_default(&s);
    int rc = vae_settings_resolve(&s, &so);
    CHECK(rc == VAE_OK && s.exec_host_mb == 256 && s.plan_strips == 3 && s.exec_graph == 1 &&
              strcmp(s.tune_cache, "/nonexistent/tune.txt") == 0,
          "the environment fills unset switches: rc %d host_mb %d strips %d tune cache '%s'", rc,
          s.exec_host_mb, s.plan_strips, s.tune_cache);
    CHECK(strstr(settings_log, "I settings from the environment: VAE_EXEC_HOST_MB=256, "
                               "VAE_PLAN_STRIPS=3, VAE_TUNE_CACHE=/nonexistent/tune.txt\n"),
          "one INFO line names what the environment set:\n%s", settings_log);
    CHECK(vae_session_options_set(&so, VAE_PARAM_PLAN_STRIPS, -1) == VAE_OK, "set strips");
    CHECK(vae_session_options_set(&so, VAE_PARAM_EXEC_CHUNKS, 1) == VAE_OK, "set chunks");
    so.tune_cache = "";
    settings_log[0] = 0;
    vae_settings_default(&s);
    rc = vae_settings_resolve(&s, &so);
    CHECK(rc == VAE_OK && s.plan_strips == -1 && s.exec_chunks == 1 && s.exec_host_mb == 256 &&
              s.tune_cache[0] == 0,
          "API values win: rc %d strips %d chunks %d host_mb %d tune cache '%s'", rc,
          s.plan_strips, s.exec_chunks, s.exec_host_mb, s.tune_cache);
    CHECK(strstr(settings_log, "I settings from the environment: VAE_EXEC_HOST_MB=256\n") &&
              strstr(settings_log, "D settings: VAE_PLAN_STRIPS=-1 set through the API wins over "
                                   "the environment's 3\n") &&
              strstr(settings_log, "VAE_TUNE_CACHE=/nonexistent/tune.txt"),
          "INFO names only the environment's values, DEBUG each override:\n%s", settings_log);
    vae_plat_setenv("VAE_PLAN_STRIPS", "sometimes");
    vae_settings_default(&s);
    rc = vae_settings_resolve(&s, &so);
    CHECK(rc == VAE_OK && s.plan_strips == -1, "a bad variable the API overrode: rc %d (%s)", rc,
          vae_last_error());
    so.params_set = 0; /* unset again: the variable is read, and refused */
    vae_settings_default(&s);
    rc = vae_settings_resolve(&s, &so);
    CHECK(rc == VAE_EINVAL && strstr(vae_last_error(), "VAE_PLAN_STRIPS"),
          "a bad variable of an unset switch: rc %d (%s)", rc, vae_last_error());
    vae_set_log_callback(NULL, NULL, VAE_LOG_DEBUG);
    vae_plat_setenv("VAE_EXEC_HOST_MB", NULL);
    vae_plat_setenv("VAE_PLAN_STRIPS", NULL);
    vae_plat_setenv("VAE_TUNE_CACHE", NULL);
    vae_error_clear();
}

/* The exact rows of a tile's crop after an op (vae_op_map_crop, found in closed form) are those
 * of the rule it states, row by row: output row j is exact when the rows it reads inside the
 * frame, in upsampled units [max(j*s - p0, 0), min(j*s - p0 + k, n*u)), lie in the valid part. */
static void test_map_crop(void) {
    const uint64_t saved = rng; /* (the later tests' data stays what it was) */
    int bad = 0, cases = 0;
    for (int it = 0; it < 20000; it++) {
        vae_op op = vae_op_make(VAE_OP_CONV, 0, C, C);
        const int u = 1 + (int)(rng % 3), k = 1 + (int)((rng >> 8) % 5), st = 1 + (int)((rng >> 16) % 2);
        op.up = u, op.kh = op.kw = k, op.sh = op.sw = st;
        op.pad_h[0] = op.pad_w[0] = (int)((rng >> 24) % 3), op.pad_h[1] = op.pad_w[1] = k / 2;
        frand();
        const int n = 4 + (int)(rng % 40), lo = (int)((rng >> 8) % (unsigned)n) / st * st;
        const int hi = lo + 1 + (int)((rng >> 16) % (unsigned)(n - lo));
        frand();
        const int vlo = lo + (int)(rng % 3) - 1, vhi = hi - (int)((rng >> 8) % 3) + 1;
        frand();
        vae_span oc, ov;
        if (vae_op_map_crop(&op, 0, n, (vae_span){lo, hi}, (vae_span){vlo, vhi}, 0, &oc, &ov))
            continue;
        cases++;
        const int64_t a0 = (int64_t)vlo * u, b0 = (int64_t)vhi * u, nu = (int64_t)n * u;
        int rlo = oc.hi, rhi = oc.lo;
        for (int j = oc.lo; j < oc.hi; j++) {
            int64_t a = (int64_t)j * st - op.pad_h[0], b = a + k;
            if (a < 0) a = 0;
            if (b > nu) b = nu;
            if (a >= a0 && b <= b0) {
                if (j < rlo) rlo = j;
                rhi = j + 1;
            }
        }
        const vae_span want = rlo < rhi ? (vae_span){rlo, rhi} : (vae_span){oc.lo, oc.lo};
        if (ov.lo != want.lo || ov.hi != want.hi) {
            if (bad++ < 3)
                printf("map_crop u%d k%d s%d p%d n%d crop %d..%d valid %d..%d: %d..%d, rule %d..%d\n",
                       u, k, st, op.pad_h[0], n, lo, hi, vlo, vhi, ov.lo, ov.hi, want.lo, want.hi);
        }
    }
    CHECK(bad == 0 && cases > 10000, "map_crop: %d of %d crops differ from the rule", bad, cases);
    rng = saved;
}

/* The engine's limits (plan.h): a frame larger than an op call takes is split by tiles even
 * with no budget; without tiles it is refused, as are tile grids finer than the planner takes
 * (they used to cover part of the frame) and values too large for the memory model's sums. */
static void test_plan_limits(void) {
    float w[C * C * 9] = {0};
    vae_program p;
    vae_program_init(&p, C);
    vae_op conv = vae_op_make(VAE_OP_CONV, 0, C, C);
    conv.kh = conv.kw = 3, conv.pad_h[0] = conv.pad_h[1] = conv.pad_w[0] = conv.pad_w[1] = 1;
    conv.w = w;
    snprintf(conv.name, sizeof conv.name, "conv");
    vae_program_add(&p, &conv);
    p.first_chunk = p.chunk = 1 << 16; /* (a walk of a few steps over 2^22 frames) */
    vae_plan_request rq = {.prog = &p, .t = 1, .h = 40000, .w = 40000, .elem = sizeof(float),
                           .mode = VAE_TILE_AUTO, .blend_tile = 512, .blend_overlap = 64,
                           .video_factor = 1};
    vae_plan plan;
    int rc = vae_plan_make(&plan, &rq), within = rc == VAE_OK;
    for (int k = 0; within && k < plan.n_tiles; k++) {
        const vae_plan_tile *t = &plan.tiles[k];
        within = (int64_t)(t->in_y.hi - t->in_y.lo) * (t->in_x.hi - t->in_x.lo) <=
                 VAE_PLAN_MAX_FRAME_PIXELS;
    }
    CHECK(within && plan.kind == VAE_PLAN_TILED && plan.tiles[plan.n_tiles - 1].own_y.hi == 40000,
          "a 40000x40000 frame with no budget: rc %d (%s), plan kind %d of %d tiles", rc,
          vae_last_error(), (int)plan.kind, plan.n_tiles);
    if (rc == VAE_OK) vae_plan_free(&plan);
    static const struct {
        vae_tile_mode mode;
        int tile, blend_tile, t, rc;
        const char *says;
    } refused[] = {{VAE_TILE_NONE, 0, 512, 1, VAE_ESHAPE, "1073741823 pixels"},
                   {VAE_TILE_AUTO, 64, 512, 1, VAE_EINVAL, "more than 96 tiles per side"},
                   {VAE_TILE_BLEND, 0, 64, 1, VAE_EINVAL, "(blend_tile)"},
                   {VAE_TILE_AUTO, 0, 512, 1 << 22, VAE_ESHAPE, "TiB over the video"}};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        vae_plan_request r = rq;
        r.mode = refused[i].mode, r.tile_h = r.tile_w = refused[i].tile;
        r.blend_tile = refused[i].blend_tile, r.blend_overlap = refused[i].blend_tile / 8;
        r.t = refused[i].t;
        vae_error_clear();
        rc = vae_plan_make(&plan, &r);
        CHECK(rc == refused[i].rc && strstr(vae_last_error(), refused[i].says),
              "limits case %zu: rc %d (%s), expected %d saying '%s'", i, rc, vae_last_error(),
              refused[i].rc, refused[i].says);
        if (rc == VAE_OK || rc == VAE_ENOMEM) vae_plan_free(&plan);
    }
    vae_program_free(&p);
}

/* A plan that fits only by moving causal caches over the host link is weighed
 * against one with every op's least scratch (vae_plan_make's second pass): here the scratch a
 * conv's path of choice takes is what keeps the caches off the device, and the least-scratch plan
 * keeps them all on it, with no traffic, so it is the one planned. Without a budget of the
 * caller's, the cost alike, the whole-frame plan with less memory; tiled plans stay as they are. */
static int64_t big_scratch;
static int64_t fake_scratch_need(vae_backend *be, const vae_op *op, int t, int h, int w,
                                 int minimal) {
    (void)be, (void)t;
    return op->kind == VAE_OP_CONV && !minimal ? big_scratch * h * w / (64 * 64) : 0;
}

static void test_plan_least_scratch(void) {
    enum { HB = 64, WB = 64 };
    float w[C * C * 3] = {0};
    vae_program p;
    vae_program_init(&p, C);
    int src = 0;
    for (int k = 0; k < 2; k++) { /* act, causal conv: contiguous windows whose caches can leave */
        vae_op act = vae_op_make(VAE_OP_ACT, src, C, C);
        vae_op conv = vae_op_make(VAE_OP_CONV, vae_program_add(&p, &act), C, C);
        conv.kt = 3, conv.tpad = 2, conv.w = w;
        snprintf(conv.name, sizeof conv.name, "conv%d", k);
        src = vae_program_add(&p, &conv);
    }
    const int64_t cache = 2LL * HB * WB * C * (int64_t)sizeof(float); /* 2 kept frames */
    big_scratch = 3 * cache / 2; /* more than one cache, less than both */
    vae_plan_request rq = {.prog = &p,
                           .t = 9,
                           .h = HB,
                           .w = WB,
                           .elem = sizeof(float),
                           .mode = VAE_TILE_NONE,
                           .video_factor = 1,
                           .host_direct = 1,
                           .scratch_need = fake_scratch_need,
                           .blend_tile = 512};
    vae_plan least, plan;
    vae_plan_request rq_least = rq;
    rq_least.scratch_minimal = 1;
    int rc = vae_plan_make(&least, &rq_least);
    CHECK(rc == VAE_OK && least.n_offload == 0, "least scratch, no budget: rc %d (%s)", rc,
          vae_last_error());
    if (rc != VAE_OK) {
        vae_program_free(&p);
        return;
    }
    rq.budget = least.peak; /* whole frames fit with the least scratch, not with the paths of
                             * choice unless a cache or two leaves */
    vae_plan_free(&least);
    rc = vae_plan_make(&plan, &rq);
    CHECK(rc == VAE_OK && plan.scratch_minimal && plan.n_offload == 0 && plan.host_traffic == 0,
          "budget %lld: rc %d (%s), least scratch %d, %d caches in host memory (%.0f bytes over "
          "the link)",
          (long long)rq.budget, rc, vae_last_error(), rc ? -1 : plan.scratch_minimal,
          rc ? -1 : plan.n_offload, rc ? -1.0 : plan.host_traffic);
    if (rc == VAE_OK) vae_plan_free(&plan);
    /* with room for the scratch of choice, that plan (no caches leave) */
    rq.budget = 0;
    rc = vae_plan_make(&plan, &rq);
    CHECK(rc == VAE_OK && !plan.scratch_minimal && plan.n_offload == 0,
          "no budget: rc %d, least scratch %d", rc, rc ? -1 : plan.scratch_minimal);
    if (rc == VAE_OK) vae_plan_free(&plan);
    /* unless no budget was given at all: then, the cost alike, the least memory */
    rq.least_memory = 1;
    rc = vae_plan_make(&plan, &rq);
    CHECK(rc == VAE_OK && plan.scratch_minimal && plan.n_offload == 0,
          "least memory: rc %d, least scratch %d", rc, rc ? -1 : plan.scratch_minimal);
    if (rc == VAE_OK) vae_plan_free(&plan);
    /* but not for blended or forced tiles: their grids (blend: the output) would change for a
     * cost the planner does not see */
    for (int k = 0; k < 2; k++) {
        vae_plan_request r = rq;
        if (k == 0) r.mode = VAE_TILE_BLEND, r.blend_tile = 32, r.blend_overlap = 8;
        else r.mode = VAE_TILE_AUTO, r.tile_h = r.tile_w = 32;
        rc = vae_plan_make(&plan, &r);
        CHECK(rc == VAE_OK && !plan.scratch_minimal && plan.kind != VAE_PLAN_WHOLE,
              "least memory, %s: rc %d (%s), plan kind %d, least scratch %d",
              k ? "forced tiles" : "blend", rc, vae_last_error(), rc ? -1 : (int)plan.kind,
              rc ? -1 : plan.scratch_minimal);
        if (rc == VAE_OK) vae_plan_free(&plan);
    }
    vae_program_free(&p);
}

/* Blended tiles without a size (blend_auto): under a budget that needs several, a grid of even
 * tiles, none overlapping its neighbour by much more than the planned overlap (tiles of one size
 * overlapped the last ones by whatever the size left over: up to twice the work). */
/* the largest overlap of neighbouring blended tiles, in B-input pixels */
static int blend_worst_overlap(const vae_plan *plan) {
    int worst = 0;
    for (int k = 0; k < plan->n_tiles; k++) {
        const vae_plan_tile *t = &plan->tiles[k];
        const int ox = k % plan->tiles_x ? plan->tiles[k - 1].in_x.hi - t->in_x.lo : 0;
        const int oy = k >= plan->tiles_x ? plan->tiles[k - plan->tiles_x].in_y.hi - t->in_y.lo : 0;
        worst = ox > worst ? ox : worst;
        worst = oy > worst ? oy : worst;
    }
    return worst;
}

/* blended tiles of no given size over 9 frames of h x w of B's input (8 video pixels a latent
 * pixel) */
static vae_plan_request blend_auto_request(const vae_program *p, int encode, int h, int w) {
    return (vae_plan_request){.prog = p,
                              .encode = encode,
                              .t = 9,
                              .h = h,
                              .w = w,
                              .elem = sizeof(float),
                              .mode = VAE_TILE_BLEND,
                              .video_factor = 8,
                              .blend_auto = 1,
                              .blend_overlap_auto = 1};
}

static void test_plan_blend_grid(void) {
    enum { WIDE = 32 }; /* activations of WIDE channels: what tiles make smaller */
    static float w[WIDE * C * 27];
    vae_program p;
    vae_program_init(&p, C);
    int src = 0;
    for (int k = 0; k < 2; k++) { /* C -> WIDE -> C, 3x3x3 causal */
        vae_op conv = vae_op_make(VAE_OP_CONV, src, k ? WIDE : C, k ? C : WIDE);
        conv.kh = conv.kw = 3, conv.pad_h[0] = conv.pad_h[1] = conv.pad_w[0] = conv.pad_w[1] = 1;
        conv.kt = 3, conv.tpad = 2, conv.w = w;
        snprintf(conv.name, sizeof conv.name, "conv%d", k);
        vae_op act = vae_op_make(VAE_OP_ACT, vae_program_add(&p, &conv), conv.c_out, conv.c_out);
        src = vae_program_add(&p, &act);
    }
    /* a decoder's latent (8 px of video a pixel), and an encoder's video, whose crops start at
     * multiples of 8 */
    for (int encode = 0; encode < 2; encode++) {
        vae_plan_request rq =
            blend_auto_request(&p, encode, encode ? 944 : 90, encode ? 1416 : 160);
        vae_plan whole, plan;
        int rc = vae_plan_make(&whole, &rq);
        CHECK(rc == VAE_OK && whole.n_tiles == 1, "blend (encode %d), no budget: rc %d", encode,
              rc);
        if (rc) continue;
        for (int div = 2; div <= 16; div *= 2) {
            rq.budget = whole.peak / div;
            vae_error_clear();
            if ((rc = vae_plan_make(&plan, &rq)) != VAE_OK) {
                CHECK(0, "blend (encode %d) at 1/%d of the untiled peak: rc %d: %s", encode, div,
                      rc, vae_last_error());
                continue;
            }
            /* the planned overlap in B-input pixels, and the rounding of even tiles to whole
             * units (latent pixels; an encoder's 8-pixel starts): the last tile of a row or
             * column overlaps by up to a unit more per tile before it */
            const int unit = 8, ov = encode ? plan.blend_overlap * 8 : (plan.blend_overlap + 7) / 8;
            const int most = plan.tiles_x > plan.tiles_y ? plan.tiles_x : plan.tiles_y;
            const int worst = blend_worst_overlap(&plan);
            CHECK(plan.kind == VAE_PLAN_BLEND && plan.n_tiles > 1 && plan.peak <= rq.budget &&
                      worst <= ov + (encode ? unit : 1) * most,
                  "blend (encode %d) at 1/%d of the untiled peak: %dx%d tiles, peak %lld of %lld, "
                  "overlap %d planned, %d the most between neighbours",
                  encode, div, plan.tiles_y, plan.tiles_x, (long long)plan.peak,
                  (long long)rq.budget, plan.blend_overlap, worst);
            vae_plan_free(&plan);
        }
        vae_plan_free(&whole);
    }
    /* a frame far wider than tall (64 x 8192 px): one tile, and a row of them under a budget */
    vae_plan_request rq = blend_auto_request(&p, 0, 8, 1024);
    vae_plan wide, row;
    int rc = vae_plan_make(&wide, &rq);
    CHECK(rc == VAE_OK && wide.n_tiles == 1, "blend of 64 x 8192 px: rc %d (%s)", rc,
          rc ? vae_last_error() : "");
    if (rc == VAE_OK) {
        rq.budget = wide.peak / 4;
        rc = vae_plan_make(&row, &rq);
        CHECK(rc == VAE_OK && row.tiles_y == 1 && row.tiles_x > 1 && row.peak <= rq.budget,
              "blend of 64 x 8192 px at a quarter of its peak: rc %d (%s)", rc,
              rc ? vae_last_error() : "");
        if (rc == VAE_OK) vae_plan_free(&row);
        vae_plan_free(&wide);
    }
    vae_program_free(&p);
}

int main(void) {
    vae_settings_default(&test_set);
    test_settings_words();
    test_settings_precedence();
    vae_backend *be;
    if (vae_cpu_backend_create(&be, VAE_DTYPE_F32, 0)) {
        printf("cannot create the CPU backend: %s\n", vae_last_error());
        return 1;
    }
    test_temporal_conv(be, 3, 1, 2, 0); /* Wan CausalConv3d */
    test_temporal_conv(be, 3, 1, 2, 1); /* SeedVR2 replicate padding */
    test_temporal_conv(be, 3, 2, 0, 0); /* Wan downsample3d time_conv */
    test_temporal_conv(be, 3, 2, 2, 1); /* SeedVR2 temporal downsample */
    test_temporal_conv(be, 2, 2, 1, 0); /* AvgDown3D-like windows */
    test_contiguous_window(be, 3, 1, 2, 0); /* Wan CausalConv3d after a norm */
    test_contiguous_window(be, 3, 1, 2, 1); /* SeedVR2 */
    test_contiguous_window(be, 3, 2, 0, 0); /* Wan downsample3d time_conv */
    test_contiguous_window(be, 3, 2, 2, 1); /* SeedVR2 temporal downsample */
    test_contiguous_window(be, 2, 1, 1, 0);
    test_time_split(be);
    test_window_take(be);
    test_bounded_memory(be, 0);
    test_bounded_memory(be, 1);
    test_plan_caches(be);
    test_walk();
    test_map_crop();
    test_plan_limits();
    test_plan_least_scratch();
    test_plan_blend_grid();
    test_fp8_mark();
    test_fp8_kernel_shapes();
    test_fp8_weight_scales();
    test_fp8_weights_round();
    test_window_rule();
    test_fuse_norms(be);
    test_fuse_acts(be);
    test_conv_up(be);
    test_graphs(be);
    test_check_mode(be);
    be->v->destroy(be);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
