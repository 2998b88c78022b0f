/* perf_ops.c -- where a decode's time goes, conv by conv: every distinct convolution shape of the
 * released models, timed on every path of the backend (like ggml's test-backend-ops perf mode).
 *
 * The shapes come from the models' own programs (synthetic weights of the released
 * configuration, `vae bench`'s), walked for a video of the given size: each conv with its input
 * frames in the steady state (cache ++ chunk, one contiguous window, as the executor hands them
 * over), input and output size, bias and residual. Each distinct shape runs on each path:
 *   tuned    the backend as a session uses it (paths timed on first sight, no tune cache)
 *   3-D      the first candidate only (VAE_CUDA_TUNE=0): one 3-D cuDNN conv over the window
 *   pad3d    channel-padded 3-D windows (3-D path off)
 *   blocks   per block of output frames, temporally gathered 2-D cuDNN convs (3-D paths off)
 *   gemm     im2col + cuBLAS GEMM (VAE_CUDA_CONV=gemm)
 *   igemm    the CUTLASS implicit-GEMM kernels where they apply (VAE_CUDA_IGEMM=always: bf16 on
 *            sm_90, temporal convs over windows), else the 3-D path
 *   halo     the halo-tile kernel where it applies (VAE_CUDA_HALO=always: 96-filter 3x3 convs,
 *            16-bit on sm_90), else the 3-D path
 * With --dtype fp8 the convs the E4M3 kernels take run on them on every path. VAE_CUDA_MMA=1 in
 * the environment puts the mma.sync kernels (cuda_mma_conv.cu: Ampere / Ada / Blackwell's) in
 * place of the sm_90a ones on Hopper: igemm then times their 16-bit form, fp8 their E4M3 one.
 * (a path that does not apply to a shape runs the next one the backend falls back to; the cpu
 * backend has one path). Per shape and path: milliseconds (median of --reps after a warm-up),
 * TFLOP/s (2 x MACs) and GB/s (input window + output + weights, read or written once); then the
 * whole decode's conv time per path as the sum over shapes x ops x steps.
 *
 * usage: perf_ops [--arch wan2.1|wan2.2|seedvr2|all] [--op decode|encode] [--frames N]
 *                 [--size HxW] [--dtype bf16|fp16|fp32|fp8] [--device cuda|cpu] [--reps N]
 *                 [--paths tuned,3d,pad3d,blocks,gemm,igemm,halo] [--match NAME]
 * Lines: "PERF ..." per shape, "TOTAL ..." per path. Not a test: nothing here can fail but a
 * path's error, which is printed and counted (exit status 1).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "core/backend.h"
#include "core/core.h"
#include "core/op.h"
#include "core/program.h"
#include "core/settings.h"
#include "vae.h"

/* CUDA entry points exist only in builds with the backend: weak, so that this links without. */
int vae_cuda_backend_create(vae_backend **out, vae_dtype dtype, int device_index,
                            const vae_settings *settings, const vae_dev_allocator *alloc)
    __attribute__((weak));

enum { MAX_SHAPES = 256, N_PATHS = 7, MAX_FRAMES = 64 };
static const char *const path_names[N_PATHS] = {"tuned", "3d",    "pad3d", "blocks",
                                                "gemm",  "igemm", "halo"};

/* one distinct conv shape: the first op that has it, and how often the model runs it */
typedef struct shape {
    const vae_op *op;
    int n_in, t_out, h, w, h_out, w_out, residual;
    int ops;       /* ops of the program with this shape */
    int64_t calls; /* ops x steps of the whole video */
    double ms[N_PATHS];
} shape;

typedef struct walk {
    const vae_program *p;
    const int *vh, *vw;
    int record; /* only the steady-state step is recorded */
    int64_t steps;
    shape *s;
    int n;
} walk;

static int same(const shape *a, const shape *b) {
    const vae_op *x = a->op, *y = b->op;
    return x->c_in == y->c_in && x->c_out == y->c_out && x->kt == y->kt && x->kh == y->kh &&
           x->kw == y->kw && x->st == y->st && x->sh == y->sh && x->sw == y->sw &&
           x->pad_h[0] == y->pad_h[0] && x->pad_h[1] == y->pad_h[1] && x->pad_w[0] == y->pad_w[0] &&
           x->pad_w[1] == y->pad_w[1] && x->up == y->up && (x->b != NULL) == (y->b != NULL) &&
           a->n_in == b->n_in && a->t_out == b->t_out && a->h == b->h && a->w == b->w &&
           a->residual == b->residual;
}

static void on_op(void *user, vae_walk_event ev, int i, const vae_op_frames *f, const int *tv) {
    walk *k = user;
    const vae_op *op = &k->p->ops[i];
    if (ev != VAE_WALK_OP || !k->record || op->kind != VAE_OP_CONV || f->t_out < 1) return;
    shape s = {op,
               vae_op_is_windowed(op) ? f->total : tv[op->in[0]],
               f->t_out,
               k->vh[op->in[0]],
               k->vw[op->in[0]],
               k->vh[op->out],
               k->vw[op->out],
               op->in[1] >= 0,
               1,
               k->steps,
               {0}};
    for (int j = 0; j < k->n; j++)
        if (same(&k->s[j], &s)) {
            k->s[j].ops++;
            k->s[j].calls += k->steps;
            return;
        }
    if (k->n < MAX_SHAPES && s.n_in <= MAX_FRAMES) k->s[k->n++] = s;
}

/* The conv shapes of p for an input of t x h x w, in the third step (steady state). */
static int collect(const vae_program *p, int t, int h, int w, walk *k) {
    int *vh = calloc((size_t)p->n_values, sizeof *vh),
        *vw = calloc((size_t)p->n_values, sizeof *vw);
    int *tv = calloc((size_t)p->n_values, sizeof *tv);
    vae_op_clock *clk = calloc((size_t)p->n_ops + 1, sizeof *clk);
    int rc = vh && vw && tv && clk ? vae_program_shapes(p, h, w, vh, vw) : VAE_ENOMEM;
    k->p = p, k->vh = vh, k->vw = vw;
    k->steps = t <= p->first_chunk ? 1 : 1 + (t - p->first_chunk) / p->chunk;
    for (int step = 0; rc == VAE_OK && step < 3; step++) {
        int out = 0;
        k->record = step == 2;
        rc = vae_program_walk_step(p, NULL, clk, tv, step ? p->chunk : p->first_chunk, on_op, k,
                                   &out);
    }
    free(vh), free(vw), free(tv), free(clk);
    return rc;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median milliseconds of reps runs of shape s on be (after one warm-up, which also tunes). */
static int time_shape(vae_backend *be, const shape *s, int reps, double *ms) {
    vae_op op = *s->op;
    int h = s->h, w = s->w;
    if (op.up > 1 && !be->v->conv_upsample) /* the executor upsamples first for such backends */
        h *= op.up, w *= op.up, op.up = 1;
    const size_t es = be->elem_size, fsz = (size_t)h * w * op.c_in * es;
    const size_t ysz = (size_t)s->t_out * s->h_out * s->w_out * op.c_out * es;
    void *state = NULL, *x = NULL, *y = NULL, *res = NULL;
    int rc = be->v->prepare(be, &op, &state);
    if (rc == VAE_OK) {
        x = be->v->alloc(be, fsz * s->n_in), y = be->v->alloc(be, ysz);
        res = s->residual ? be->v->alloc(be, ysz) : NULL;
        if (!x || !y || (s->residual && !res)) rc = vae_fail(VAE_ENOMEM, "perf_ops: buffers");
    }
    /* data: zeros are as fast as anything for these kernels, and NaN-free */
    if (rc == VAE_OK) rc = be->v->zero(be, x, fsz * s->n_in);
    if (rc == VAE_OK && res) rc = be->v->zero(be, res, ysz);
    const void *frames[MAX_FRAMES];
    for (int i = 0; i < s->n_in; i++)
        frames[i] = (const char *)x + (size_t)i * fsz;
    double t[32];
    if (reps > 32) reps = 32;
    for (int r = -1; r < reps && rc == VAE_OK; r++) {
        double t0 = now();
        rc = be->v->conv(be, &op, state, frames, s->n_in, h, w, res, y, s->t_out, s->h_out,
                         s->w_out);
        if (rc == VAE_OK) rc = be->v->sync(be);
        if (r >= 0) t[r] = (now() - t0) * 1e3;
    }
    if (rc == VAE_OK) {
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        *ms = t[reps / 2];
    }
    if (x) be->v->release(be, x);
    if (y) be->v->release(be, y);
    if (res) be->v->release(be, res);
    if (state) be->v->unprepare(be, &op, state);
    return rc;
}

/* name is one of the comma-separated words of list */
static int in_list(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return 1;
    return 0;
}

/* A backend for path k (settings as the environment would give them, then the path's). */
static int make_backend(int cuda, vae_dtype dtype, int k, vae_backend **be) {
    if (!cuda) return k == 0 ? vae_cpu_backend_create(be, VAE_DTYPE_F32, 0) : VAE_EUNSUPPORTED;
    vae_settings set;
    vae_session_options so;
    vae_session_options_default(&so);
    vae_settings_default(&set);
    int rc = vae_settings_resolve(&set, &so);
    set.tune_cache[0] = 0; /* measure, never reuse an earlier process's choice */
    if (k > 0) set.cuda_tune = 0;
    /* igemm, halo: where the kernel applies, else the 3-D path (the halo kernel needs igemm on) */
    if (k > 0) set.cuda_igemm = k == 5 ? 2 : k == 6 ? 1 : 0;
    if (k > 0) set.cuda_halo = k == 6 ? 2 : 0;
    if (k >= 2 && k <= 4) set.cuda_conv3d = 0;
    if (k >= 3 && k <= 4) set.cuda_pad3d = 0;
    if (k == 4) set.cuda_conv = 1;
    return rc ? rc : vae_cuda_backend_create(be, dtype, 0, &set, NULL);
}

static double flops(const shape *s) {
    return 2.0 * vae_op_macs(s->op, s->t_out, s->h_out, s->w_out);
}

static double bytes(const shape *s, size_t es) {
    const vae_op *op = s->op;
    return (double)es * ((double)s->n_in * s->h * s->w * op->c_in +
                         (double)s->t_out * s->h_out * s->w_out * op->c_out * (1 + s->residual) +
                         (double)op->c_out * op->c_in * op->kt * op->kh * op->kw);
}

static void print_shape(const char *arch, const shape *s, const int *on, size_t es) {
    const vae_op *op = s->op;
    printf("PERF %s %-44s x%-2d %4d->%-4d k%dx%dx%d%s%s %2dx%4dx%-4d -> %2dx%4dx%-4d", arch,
           op->name, s->ops, op->c_in, op->c_out, op->kt, op->kh, op->kw, op->up > 1 ? " up2" : "",
           s->residual ? " +res" : "", s->n_in, s->h, s->w, s->t_out, s->h_out, s->w_out);
    int best = -1;
    for (int k = 1; k < N_PATHS; k++)
        if (on[k] && s->ms[k] > 0 && (best < 0 || s->ms[k] < s->ms[best])) best = k;
    for (int k = 0; k < N_PATHS; k++)
        if (on[k]) {
            if (s->ms[k] > 0)
                printf(" | %s%s %.3f ms %.1f TF/s %.0f GB/s", path_names[k], k == best ? "*" : "",
                       s->ms[k], flops(s) / s->ms[k] * 1e-9, bytes(s, es) / s->ms[k] * 1e-6);
            else
                printf(" | %s failed", path_names[k]);
        }
    printf("\n");
}

int main(int argc, char **argv) {
    const char *arch_s = "all", *op_s = "decode", *size_s = "480x832", *dtype_s = "bf16",
               *device = NULL, *paths_s = "tuned,3d,pad3d,blocks,gemm,igemm,halo", *match = NULL;
    int frames = 81, reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "--arch"))
            arch_s = v;
        else if (!strcmp(a, "--op"))
            op_s = v;
        else if (!strcmp(a, "--frames"))
            frames = atoi(v);
        else if (!strcmp(a, "--size"))
            size_s = v;
        else if (!strcmp(a, "--dtype"))
            dtype_s = v;
        else if (!strcmp(a, "--device"))
            device = v;
        else if (!strcmp(a, "--reps"))
            reps = atoi(v);
        else if (!strcmp(a, "--paths"))
            paths_s = v;
        else if (!strcmp(a, "--match"))
            match = v;
        else {
            fprintf(stderr, "perf_ops: unknown option %s (see the comment at the top)\n", a);
            return 2;
        }
    }
    int H = 0, W = 0;
    const int encode = !strcmp(op_s, "encode");
    if (sscanf(size_s, "%dx%d", &H, &W) != 2 || H <= 0 || W <= 0 || frames < 1 || reps < 1 ||
        (!encode && strcmp(op_s, "decode"))) {
        fprintf(stderr, "perf_ops: bad --size, --frames, --reps or --op\n");
        return 2;
    }
    const int cuda = device
                         ? !strcmp(device, "cuda")
                         : vae_cuda_backend_create != NULL && vae_device_available(VAE_DEVICE_CUDA);
    if (cuda && !vae_cuda_backend_create) {
        fprintf(stderr, "perf_ops: this build has no CUDA backend\n");
        return 2;
    }
    static const char *const dtype_names[] = {"fp32", "fp16", "bf16", "fp8"};
    static const vae_dtype dtypes[] = {VAE_DTYPE_F32, VAE_DTYPE_F16, VAE_DTYPE_BF16, VAE_DTYPE_FP8};
    int di = 0;
    while (di < 4 && strcmp(dtype_s, dtype_names[di]))
        di++;
    if (di == 4) {
        fprintf(stderr, "perf_ops: --dtype %s: expected fp32, fp16, bf16 or fp8\n", dtype_s);
        return 2;
    }
    const vae_dtype dtype = dtypes[di];
    int on[N_PATHS] = {0};
    for (int k = 0; k < N_PATHS; k++)
        on[k] = in_list(paths_s, path_names[k]) && (cuda || !k);
    const char *archs[3] = {"wan2.1", "wan2.2", "seedvr2"};
    int failures = 0;
    printf("perf_ops: %s %s %dx%dx%d, %s on %s, median of %d runs\n", arch_s, op_s, frames, H, W,
           cuda ? dtype_s : "fp32", cuda ? "cuda" : "cpu", reps);
    for (int a = 0; a < 3; a++) {
        if (strcmp(arch_s, "all") && strcmp(arch_s, archs[a])) continue;
        vae_model *m = NULL;
        if (vae_model_synth(&m, archs[a], NULL)) {
            fprintf(stderr, "perf_ops: %s: %s\n", archs[a], vae_last_error());
            return 1;
        }
        vae_model_info info;
        vae_model_get_info(m, &info);
        const vae_program *p = encode ? &m->enc : &m->dec;
        const int f = info.spatial_factor, tf = info.temporal_factor;
        static shape shapes[MAX_SHAPES];
        walk k = {0};
        k.s = shapes;
        int rc = encode ? collect(p, frames, H, W, &k)
                        : collect(p, 1 + (frames - 1) / tf, H / f, W / f, &k);
        if (rc) {
            fprintf(stderr, "perf_ops: %s: %s\n", archs[a], vae_last_error());
            vae_model_free(m);
            return 1;
        }
        double total[N_PATHS] = {0}, best_total = 0;
        for (int pth = 0; pth < N_PATHS; pth++) {
            if (!on[pth]) continue;
            vae_backend *be = NULL;
            if (make_backend(cuda, dtype, pth, &be)) {
                printf("PERF %s: path %s: no backend: %s\n", archs[a], path_names[pth],
                       vae_last_error());
                failures++;
                continue;
            }
            for (int i = 0; i < k.n; i++) {
                shape *s = &shapes[i];
                if (match && !strstr(s->op->name, match)) continue;
                if (time_shape(be, s, reps, &s->ms[pth])) {
                    printf("PERF %s %s: %s: %s\n", archs[a], s->op->name, path_names[pth],
                           vae_last_error());
                    s->ms[pth] = 0;
                    failures++;
                }
                total[pth] += s->ms[pth] * (double)s->calls;
            }
            be->v->destroy(be);
        }
        const size_t es = cuda && dtype != VAE_DTYPE_F32 ? 2 : 4;
        for (int i = 0; i < k.n; i++) {
            if (match && !strstr(shapes[i].op->name, match)) continue;
            print_shape(archs[a], &shapes[i], on, es);
            double b = 0;
            for (int pth = 0; pth < N_PATHS; pth++)
                if (on[pth] && shapes[i].ms[pth] > 0 && (b == 0 || shapes[i].ms[pth] < b))
                    b = shapes[i].ms[pth];
            best_total += b * (double)shapes[i].calls;
        }
        for (int pth = 0; pth < N_PATHS; pth++)
            if (on[pth])
                printf("TOTAL %s %s %dx%dx%d: %s %.1f ms of conv\n", archs[a], op_s, frames, H, W,
                       path_names[pth], total[pth]);
        printf("TOTAL %s %s %dx%dx%d: best path per shape %.1f ms of conv\n", archs[a], op_s,
               frames, H, W, best_total);
        vae_model_free(m);
    }
    return failures ? 1 : 0;
}
