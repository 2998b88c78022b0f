/* test_cuda_ops.c -- the CUDA backend's ops against the CPU backend.
 *
 * Every op kind runs on both backends with the same fresh random inputs (seeded PRNG), for several
 * shapes and parameters, and the outputs are compared: relative L2 error ||gpu - cpu|| / ||cpu||
 * <= 1e-5 for float32 activations, <= 2e-2 for bfloat16 / float16, and no NaN/Inf. Frame lists
 * come in the layouts the executor makes (one chunk, scattered frames, cache frames + chunk, a
 * repeated first frame; "chunk" frames are consecutive, like the executor's contiguous windows,
 * and take the 3-D cuDNN path); depthwise convs (groups = c_in) on their own kernel in every
 * variant. Variants: each dtype with the default paths; convolutions forced
 * through im2col + cuBLAS (VAE_CUDA_CONV=gemm); without the 3-D path (VAE_CUDA_CONV3D=0) or the
 * fused bias epilogue (VAE_CUDA_FUSE=0); a 1 MiB scratch limit (blocked gathers); the CUTLASS
 * implicit-GEMM kernels forced (VAE_CUDA_IGEMM=always) or off; the halo-tile kernel forced
 * (VAE_CUDA_HALO=always, bf16 and fp16: the 96-filter 3x3 cases); fp8 (sm_89+ GPUs):
 * the implicit-GEMM and halo-tile cases against the CPU backend's fp8 emulation (the shapes the
 * FP8 kernels do not take run in bf16 and are compared with the float32 reference), also with
 * filters a checkpoint stored in fp8 (fp8/stored), and the E4M3 input codes that norms and
 * convs with a norm write for the E4M3 conv reading them (test_fp8_codes: byte for byte, the
 * conv's output bit for bit), and on the mma.sync kernel of the GPUs
 * without sm_90a kernels (fp8/mma: VAE_CUDA_MMA=1), that kernel's 16-bit form forced (bf16/mma,
 * fp16/mma); the convs with their parameters staged first
 * (VAE_CUDA_WARM=2, as sessions do), in fp32, bf16 and fp8.
 * Then buffers, the planar host transfers, error paths, and timings of model-sized convs, norms,
 * shuffles and attention (informative).
 * Without a usable GPU: prints "skipped: no GPU" and exits 0.
 * Prints one line per check and "N passed, M failed". --buffers: the buffer and copy checks alone
 * (host copies on the bus among them); --no-bench: no timings; --bench: the timings alone.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/core.h"
#include "core/dtype.h"
#include "core/program.h"
#include "core/settings.h"
#include "vae.h"

/* The CUDA entry points exist only in builds with the backend: weak, so that this test links (and
 * skips) without it. */
int vae_cuda_backend_create(vae_backend **out, vae_dtype dtype, int device_index,
                            const vae_settings *settings, const vae_dev_allocator *alloc)
    __attribute__((weak));
int vae_cuda_available(void) __attribute__((weak));
const char *vae_cuda_backend_describe(vae_backend *be, char *buf, size_t len) __attribute__((weak));
/* The E4M3 kernels' takes (cuda_kernels.h, whose CUDA header this test does without) */
int cuk_igemm_built(void) __attribute__((weak));
int cuk_igemm8_takes(int kt, int kh, int kw, int ph, int pw, int ci, int co) __attribute__((weak));
int cuk_halo8_takes(int kt, int kh, int kw, int ph, int pw, int ci, int co) __attribute__((weak));
int cuk_mma_takes(int dtype, int kt, int kh, int kw, int ph, int pw, int ci, int co)
    __attribute__((weak));

static int n_pass, n_fail;
static vae_backend *cpu, *gpu;
static vae_backend *cpu8, *ref; /* the CPU's fp8 emulation; the conv tests' reference (cpu or it) */
static double tol;
static const char *variant = "";
/* variant "fp8/stored": the convs' filters on a scaled E4M3 grid, as a checkpoint stored in fp8
 * has them (fp8.h vae_fp8_weight_scales then keeps their codes, on both backends) */
static int fp8_stored;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s [%s] ", ok ? "PASS" : "FAIL", variant);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (ok) n_pass++;
    else n_fail++;
}

/* ---- helpers ---------------------------------------------------------------------------------- */
static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rng_next(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static float frand(void) { return (float)((rng_next() >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0); }
static float *rand_buf(size_t n, float scale, float offset) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale + offset;
    return p;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* device (or CPU) buffer holding host data */
static void *dev_from(vae_backend *be, const float *h, size_t n) {
    void *d = be->v->alloc(be, (n ? n : 1) * be->elem_size);
    if (!d) {
        printf("alloc of %zu values failed: %s\n", n, vae_last_error());
        exit(2);
    }
    if (n && be->v->upload(be, d, h, n)) {
        printf("upload failed: %s\n", vae_last_error());
        exit(2);
    }
    return d;
}

static float *host_from(vae_backend *be, const void *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    int rc = n ? be->v->download(be, h, d, n) : VAE_OK;
    if (rc) printf("  download failed: %s\n", vae_last_error());
    return h;
}

/* relative L2 error of y against ref; *bad = count of non-finite values in y */
static double rel_err(const float *y, const float *ref, size_t n, size_t *bad) {
    double e = 0, r = 0;
    *bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) {
            (*bad)++;
            continue;
        }
        double d = (double)y[i] - ref[i];
        e += d * d;
        r += (double)ref[i] * ref[i];
    }
    return r > 0 ? sqrt(e / r) : sqrt(e);
}

static void compare(const char *what, int rc_cpu, int rc_gpu, const float *yg, const float *yc,
                    size_t n) {
    if (rc_cpu || rc_gpu) {
        check(0, "%s: rc cpu %d gpu %d (%s)", what, rc_cpu, rc_gpu, vae_last_error());
        return;
    }
    size_t bad;
    double e = rel_err(yg, yc, n, &bad);
    check(e <= tol && bad == 0, "%s: rel_err %.2e (tol %.0e) nonfinite %zu", what, e, tol, bad);
}

static const char *act_name(vae_act a) {
    static const char *n[] = {"none", "silu", "relu", "tanh3", "clamp01"};
    return (unsigned)a < 5 ? n[a] : "?";
}

/* ---- CONV ----------------------------------------------------------------------------------- */
enum { L_CHUNK = 0, L_SCATTER = 1, L_CACHE_CHUNK = 2, L_REPLICATE = 3 };
static const char *layout_name[] = {"chunk", "scattered", "cache+chunk", "replicate"};

typedef struct conv_case {
    const char *name;
    int c_in, c_out, kt, kh, kw, st, sh, sw, pt, pb, pl, pr;
    int n_in, h, w;
    int bias, residual; /* residual: 0 none, 1 separate buffer, 2 residual == y */
    int layout;
    int norm; /* an RMS norm of the output (op.norm_w): 0 none, 1 with SiLU, 2 alone */
} conv_case;

/* Runs the conv on be; returns the output on the host (NULL on error, *rc set). */
static float *run_conv(vae_backend *be, const conv_case *cc, const vae_op *op, float *const *src,
                       int n_src, const int *frame_src, const float *res_h, size_t fsz,
                       size_t ysz, int t_out, int ho, int wo, int *rc) {
    void *state = NULL;
    *rc = be->v->prepare(be, op, &state);
    if (*rc) return NULL;
    void *bufs[64] = {0};
    const void *srcp[64], *frames[64];
    int nb = 0;
    if (cc->layout == L_SCATTER) {
        for (int i = n_src - 1; i >= 0; i--) bufs[i] = dev_from(be, src[i], fsz), srcp[i] = bufs[i];
        nb = n_src;
    } else {
        int first = cc->layout == L_CACHE_CHUNK ? 2 : 0;
        for (int i = 0; i < first; i++) bufs[nb++] = dev_from(be, src[i], fsz), srcp[i] = bufs[i];
        /* the chunk: one buffer with frames first..n_src-1 */
        float *tmp = malloc((size_t)(n_src - first) * fsz * sizeof *tmp);
        for (int i = first; i < n_src; i++) memcpy(tmp + (size_t)(i - first) * fsz, src[i], fsz * sizeof *tmp);
        void *chunk = dev_from(be, tmp, (size_t)(n_src - first) * fsz);
        free(tmp);
        bufs[nb++] = chunk;
        for (int i = first; i < n_src; i++)
            srcp[i] = (const char *)chunk + (size_t)(i - first) * fsz * be->elem_size;
    }
    for (int i = 0; i < cc->n_in; i++) frames[i] = srcp[frame_src[i]];
    void *y = be->v->alloc(be, ysz * be->elem_size), *res = NULL;
    if (cc->residual == 1) res = dev_from(be, res_h, ysz);
    if (cc->residual == 2) {
        be->v->upload(be, y, res_h, ysz);
        res = y;
    } else {
        float *junk = malloc(ysz * sizeof *junk); /* the old contents of y must not matter */
        for (size_t i = 0; i < ysz; i++) junk[i] = NAN;
        be->v->upload(be, y, junk, ysz);
        free(junk);
    }
    *rc = be->v->conv(be, op, state, frames, cc->n_in, cc->h, cc->w, res, y, t_out, ho, wo);
    float *out = *rc ? NULL : host_from(be, y, ysz);
    if (res && res != y) be->v->release(be, res);
    be->v->release(be, y);
    for (int i = 0; i < nb; i++) be->v->release(be, bufs[i]);
    be->v->unprepare(be, op, state);
    return out;
}

/* Convs the GPU ran through its FP8 kernels so far (the backend's description says). */
/* The count the backend's description gives right before `what` (" fp8,"), -1 without it. */
static long described_count(const char *what) {
    char buf[2048];
    const char *d = vae_cuda_backend_describe(gpu, buf, sizeof buf), *p = strstr(d, what);
    if (!p) return -1;
    while (p > d && p[-1] != ' ')
        p--;
    return strtol(p, NULL, 10);
}

static long fp8_convs(void) {
    const long n = described_count(" fp8,");
    return n > 0 ? n : 0;
}

/* The op's E4M3 mark as a session leaves it: a wide conv, as if in a residual branch
 * (vae_program_mark_fp8), with the kernel the GPU backend names for it (vae_program_pick_fp8:
 * op->fp8_kernel, which the backend then reads); VAE_FP8_NONE: it runs in 16 bits. */
static void mark_fp8(vae_op *op) {
    op->fp8 = vae_op_fp8_shape(op);
    op->fp8_kernel = op->fp8 ? (vae_fp8_kernel)gpu->v->fp8_conv(gpu, op) : VAE_FP8_NONE;
}

/* Variants "<dtype>/staged": each conv's parameters are staged first (backend.h warm, as a
 * session does at its creation), so that its first uses copy them from the stage; the stage is
 * given back after each conv (trim), since the next test's host arrays may take the same
 * addresses. */
static int staged;

static void stage_op(const vae_op *op) {
    vae_program p;
    vae_program_init(&p, op->c_in);
    if (staged && gpu->v->warm && vae_program_add(&p, op) >= 0) {
        int rc = gpu->v->warm(gpu, &p);
        check(rc == VAE_OK, "%s: staging: %s", op->name, rc ? vae_last_error() : "ok");
    }
    vae_program_free(&p);
}

static void unstage(void) {
    if (staged && gpu->v->trim) gpu->v->trim(gpu);
}

/* groups: op.groups (> 1: depthwise, op.h); act: an activation of the output folded into the conv
 * (op.act, vae_program_fuse_acts; without a norm) */
static void test_conv_groups(const conv_case *cc, int groups, vae_act act) {
    int K = cc->c_in / (groups > 1 ? groups : 1) * cc->kt * cc->kh * cc->kw;
    int t_out = (cc->n_in - cc->kt) / cc->st + 1;
    int ho = (cc->h + cc->pt + cc->pb - cc->kh) / cc->sh + 1;
    int wo = (cc->w + cc->pl + cc->pr - cc->kw) / cc->sw + 1;
    size_t fsz = (size_t)cc->h * cc->w * cc->c_in, ysz = (size_t)t_out * ho * wo * cc->c_out;
    int n_src = cc->layout == L_REPLICATE ? cc->n_in - 2 : cc->n_in, frame_src[64];
    for (int i = 0; i < cc->n_in; i++)
        frame_src[i] = cc->layout == L_REPLICATE ? (i < 2 ? 0 : i - 2) : i;
    float *src[64];
    for (int i = 0; i < n_src; i++) src[i] = rand_buf(fsz, 1.0f, 0.0f);
    /* fp8: the GPU quantises its bf16 activations; the reference sees the same values */
    for (int i = 0; ref != cpu && i < n_src; i++)
        for (size_t j = 0; j < fsz; j++)
            src[i][j] = vae_bf16_to_f32(vae_f32_to_bf16(src[i][j]));
    float *wt = rand_buf((size_t)cc->c_out * K, 1.0f / sqrtf((float)K), 0.0f);
    for (size_t i = 0; fp8_stored && i < (size_t)cc->c_out * K; i++) /* largest code ~200 */
        wt[i] = vae_f32_round_e4m3(wt[i] * sqrtf((float)K) * 200.0f) / (sqrtf((float)K) * 200.0f);
    float *b = cc->bias ? rand_buf(cc->c_out, 0.5f, 0.0f) : NULL;
    float *res = cc->residual ? rand_buf(ysz, 1.0f, 0.0f) : NULL;
    float *gamma = cc->norm ? rand_buf(cc->c_out, 0.5f, 1.0f) : NULL;
    vae_op op = vae_op_make(VAE_OP_CONV, 0, cc->c_in, cc->c_out);
    op.norm_w = gamma, op.norm_act = cc->norm == 1 ? VAE_ACT_SILU : VAE_ACT_NONE;
    op.act = act, op.act_scale = act == VAE_ACT_TANH_SCALE ? 3.0f : 0.0f;
    op.kt = cc->kt, op.kh = cc->kh, op.kw = cc->kw, op.st = cc->st, op.sh = cc->sh, op.sw = cc->sw;
    op.pad_h[0] = cc->pt, op.pad_h[1] = cc->pb, op.pad_w[0] = cc->pl, op.pad_w[1] = cc->pr;
    op.w = wt, op.b = b;
    op.groups = groups;
    mark_fp8(&op);
    snprintf(op.name, sizeof op.name, "test.conv.%s", cc->name);
    int rc_c, rc_g;
    const long fp8_before = ref != cpu ? fp8_convs() : 0;
    stage_op(&op);
    float *yg = run_conv(gpu, cc, &op, src, n_src, frame_src, res, fsz, ysz, t_out, ho, wo, &rc_g);
    unstage();
    /* fp8: a shape the FP8 kernels do not take ran in bf16: then the bf16 reference */
    vae_backend *r = ref != cpu && fp8_convs() == fp8_before ? cpu : ref;
    /* the GPU's E4M3 shapes are core's rule, which the CPU emulation picks by (op.h) */
    if (ref != cpu)
        check((gpu->v->fp8_conv(gpu, &op) != VAE_FP8_NONE) == vae_op_fp8_kernel(&op) &&
                  (r == cpu || vae_op_fp8_kernel(&op)),
              "%s: the backend runs it in E4M3: %d (this call: %d), core's rule "
              "(vae_op_fp8_kernel): %d",
              op.name, gpu->v->fp8_conv(gpu, &op), r != cpu, vae_op_fp8_kernel(&op));
    float *yc = run_conv(r, cc, &op, src, n_src, frame_src, res, fsz, ysz, t_out, ho, wo, &rc_c);
    char what[200];
    snprintf(
        what, sizeof what,
        "conv %-18s %3d->%-3d k%dx%dx%d s%d,%d,%d pad %d%d%d%d %2d frames %dx%d %s%s%s%s%s%s%s",
        cc->name, cc->c_in, cc->c_out, cc->kt, cc->kh, cc->kw, cc->st, cc->sh, cc->sw, cc->pt,
        cc->pb, cc->pl, cc->pr, cc->n_in, cc->h, cc->w, layout_name[cc->layout],
        cc->bias ? " bias" : "",
        cc->residual == 2 ? " res=y"
        : cc->residual    ? " res"
                          : "",
        cc->norm == 1 ? " norm+silu"
        : cc->norm    ? " norm"
                      : "",
        act ? " act " : "", act ? act_name(act) : "",
        r != cpu     ? " (fp8)"
        : ref != cpu ? " (bf16: no fp8 kernel)"
                     : "");
    compare(what, rc_c, rc_g, yg, yc, ysz);
    for (int i = 0; i < n_src; i++) free(src[i]);
    free(wt);
    free(b);
    free(res);
    free(gamma);
    free(yc);
    free(yg);
}

static void test_conv(const conv_case *cc) {
    test_conv_groups(cc, 0, VAE_ACT_NONE);
}

/* Depthwise convs (groups = c_in; their own kernel, cuda_depthwise_conv.cu, in every variant):
 * TAEHV super's 7x7 with two outputs per channel (frames scattered, more output channels than a
 * block's 32), one output per channel with the residual in place, strides and uneven padding with
 * three outputs per channel, a frame smaller than the kernel, > 32 frames (two launches), an RMS
 * norm after it */
static const conv_case depthwise[] = {
    {"dw_7x7_m2", 40, 80, 1, 7, 7, 1, 1, 1, 3, 3, 3, 3, 3, 13, 17, 0, 0, L_SCATTER, 0},
    {"dw_3x3_res=y", 13, 13, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 2, 7, 5, 1, 2, L_CHUNK, 0},
    {"dw_5x3_s2_asym_m3", 5, 15, 1, 5, 3, 1, 2, 2, 2, 1, 0, 2, 2, 9, 10, 1, 1, L_CHUNK, 0},
    {"dw_7x7_tiny_frame", 8, 16, 1, 7, 7, 1, 1, 1, 3, 3, 3, 3, 1, 2, 3, 1, 1, L_CHUNK, 0},
    {"dw_7x7_many", 16, 32, 1, 7, 7, 1, 1, 1, 3, 3, 3, 3, 35, 5, 6, 1, 1, L_CHUNK, 0},
    {"dw_3x3_norm", 24, 48, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 2, 6, 7, 1, 0, L_CHUNK, 1},
};

/* name, c_in, c_out, kt kh kw, st sh sw, pad t b l r, n_in h w, bias, residual, layout */
static const conv_case convs[] = {
    /* Wan CausalConv3d: 2 cache frames + chunk, bias, residual */
    {"3x3x3_cache", 16, 24, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 9, 11, 1, 1, L_CACHE_CHUNK, 0},
    {"3x3x3_zero_pad", 12, 16, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 8, 8, 1, 0, L_SCATTER, 0},
    {"3x3x3_replicate", 8, 8, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 5, 7, 6, 1, 2, L_REPLICATE, 0},
    {"3x3x3_c3_in", 3, 32, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 16, 12, 1, 0, L_CACHE_CHUNK, 0},
    {"3x3x3_c3_out", 32, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 10, 14, 1, 0, L_CHUNK, 0},
    /* narrow heads (16-bit: the direct kernel): partial 16x16 tiles, cache frames, residual */
    {"3x3x3_head96", 96, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 19, 37, 1, 1, L_CACHE_CHUNK, 0},
    /* several blocks of output frames in time, the last one partial (7 = 4 + 3) */
    {"3x3x3_head32_t7", 32, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 9, 12, 21, 1, 0, L_CACHE_CHUNK, 0},
    {"1x3x3_head4_res_alias", 48, 4, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 17, 15, 0, 2, L_SCATTER, 0},
    /* the folded form's other shapes (c_out <= 4, kt 2 or 3): kt 2 with a residual, one output */
    {"2x3x3_head4_res", 32, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 5, 13, 19, 1, 1, L_CHUNK, 0},
    {"3x3x3_head1", 16, 1, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 18, 17, 0, 0, L_CACHE_CHUNK, 0},
    {"3x3x3_c64", 64, 64, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 16, 20, 1, 1, L_CACHE_CHUNK, 0},
    /* stems (16-bit: their own kernel): Wan2.1's 3 -> 96 on partial 8x16 tiles with cache frames,
     * SeedVR2's 3 -> 128 with a residual, a 2-D one with residual == y, and 12 output frames (two
     * blocks of frames, the last partial) of 2 channels */
    {"3x3x3_stem96", 3, 96, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 19, 37, 1, 0, L_CACHE_CHUNK, 0},
    {"3x3x3_stem128_res", 3, 128, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 5, 9, 20, 1, 1, L_CHUNK, 0},
    {"1x3x3_stem64_res_alias", 3, 64, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 17, 15, 1, 2, L_SCATTER, 0},
    {"3x3x3_stem32_t12", 2, 32, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 14, 8, 16, 0, 0, L_CHUNK, 0},
    {"3x3x3_odd_c", 13, 7, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 5, 9, 1, 1, L_SCATTER, 0},
    {"3x3x3_many", 8, 8, 3, 3, 3,       1, 1, 1, 1, 1, 1, 1,
     40,           4, 5, 1, 1, L_CHUNK, 0}, /* > 32 frames */
    {"3x3x3_blocks", 64, 32, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 8, 24, 24, 1, 1, L_CACHE_CHUNK, 0},
    /* 2-D convs (kt 1): cuDNN on the frames in place */
    {"1x3x3_pad1", 32, 16, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 12, 10, 1, 0, L_CHUNK, 0},
    {"1x3x3_scatter", 16, 16, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 9, 7, 0, 1, L_SCATTER, 0},
    {"1x3x3_res_alias", 24, 24, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 2, 8, 8, 1, 2, L_CHUNK, 0},
    /* downsample2d: stride 2, padding {0,1} */
    {"3x3_s2_pad01", 16, 16, 1, 3, 3, 1, 2, 2, 0, 1, 0, 1, 2, 16, 12, 1, 0, L_CHUNK, 0},
    {"3x3_s2_pad01_odd", 6, 10, 1, 3, 3, 1, 2, 2, 0, 1, 0, 1, 1, 9, 11, 1, 0, L_CHUNK, 0},
    /* SeedVR2 temporal+spatial downsample: kt 3 st 2, stride 2, pad {0,1} */
    {"3x3x3_st2_s2", 8, 16, 3, 3, 3, 2, 2, 2, 0, 1, 0, 1, 5, 8, 10, 1, 0, L_REPLICATE, 0},
    /* the same with channels the implicit-GEMM kernels take (strides and the padding after the
     * rows and columns their own): Wan's 2-D downsample, odd sizes with a residual, its temporal
     * one (6 frames: one left over), SeedVR2's */
    {"3x3_s2_pad01_c96", 96, 96, 1, 3, 3, 1, 2, 2, 0, 1, 0, 1, 2, 16, 20, 1, 0, L_CHUNK, 0},
    {"3x3_s2_pad01_c128_odd", 128, 128, 1, 3, 3, 1, 2, 2, 0, 1, 0, 1, 1, 9, 11, 1, 1, L_CHUNK, 0},
    {"3x1x1_st2_c192", 192, 192, 3, 1, 1, 2, 1, 1, 0, 0, 0, 0, 6, 4, 5, 1, 0, L_CHUNK, 0},
    {"3x3x3_st2_s2_c128", 128, 128, 3, 3, 3, 2, 2, 2, 0, 1, 0, 1, 5, 8, 10, 1, 0, L_CHUNK, 0},
    /* pointwise: GEMM */
    {"1x1x1", 64, 192, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 3, 9, 10, 1, 0, L_CHUNK, 0},
    {"1x1x1_res", 13, 7, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 3, 4, 3, 0, 1, L_SCATTER, 0},
    /* pointwise with few channels: their own kernel (Wan's conv2 16 -> 16, 48 -> 48, 32 -> 32) */
    {"1x1x1_pw_c16", 16, 16, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 3, 12, 10, 1, 0, L_CHUNK, 0},
    {"1x1x1_pw_c48_res=y", 48, 48, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 9, 7, 1, 2, L_CHUNK, 0},
    {"1x1x1_pw_32to16_nobias", 32, 16, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 3, 5, 6, 0, 1, L_SCATTER, 0},
    {"1x1x1_pw_64to36", 64, 36, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 7, 11, 1, 1, L_CHUNK, 0},
    {"3x1x1_time_conv", 32, 64, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 4, 6, 5, 1, 0, L_CACHE_CHUNK, 0},
    {"3x1x1_st2", 16, 16, 3, 1, 1, 2, 1, 1, 0, 0, 0, 0, 5, 4, 5, 1, 1, L_SCATTER, 0},
    {"3x1x1_st2_n6", 7, 5, 3, 1, 1, 2, 1, 1, 0, 0, 0, 0, 6, 3, 4, 1, 0, L_CHUNK, 0},
    /* contiguous windows (the executor's layout): 3-D cuDNN, fused bias / residual */
    {"3x3x3_window", 16, 24, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 9, 11, 1, 1, L_CHUNK, 0},
    {"3x3x3_window_c64", 64, 64, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 16, 20, 1, 1, L_CHUNK, 0},
    {"3x3x3_window_nores", 32, 32, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 12, 10, 1, 0, L_CHUNK, 0},
    {"3x3x3_window_res=y", 16, 16, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 5, 8, 9, 1, 2, L_CHUNK, 0},
    {"3x3x3_window_nobias", 8, 8, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 5, 6, 7, 0, 1, L_CHUNK, 0},
    {"3x3x3_window_first", 24, 16, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 10, 12, 1, 0, L_CHUNK, 0},
    {"3x3x3_window_st2", 16, 16, 3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 7, 8, 6, 1, 0, L_CHUNK, 0},
    {"3x1x1_window", 32, 64, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 6, 6, 5, 1, 0, L_CHUNK, 0},
    {"1x3x3_bias_res", 32, 16, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 12, 10, 1, 1, L_CHUNK, 0},
    /* TAEHV's: a 12-channel stem (16-bit: channels padded for cuDNN), a block's last conv */
    {"1x3x3_c12to64", 12, 64, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 20, 18, 1, 0, L_CHUNK, 0},
    {"1x3x3_c64_res", 64, 64, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 12, 14, 1, 1, L_CHUNK, 0},
    {"1x3x3_c64_nobias", 64, 64, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 10, 9, 0, 0, L_SCATTER, 0},
    /* 96 / 48 input channels: padded 3-D candidate (any frame layout) */
    {"3x3x3_c96_cache", 96, 96, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 10, 12, 1, 1, L_CACHE_CHUNK, 0},
    {"3x3x3_c96_window", 96, 32, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 9, 10, 1, 0, L_CHUNK, 0},
    {"3x3x3_c48_rep", 48, 16, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 5, 7, 8, 1, 1, L_REPLICATE, 0},
    {"3x3x3_c96_st2", 96, 24, 3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 7, 6, 5, 1, 0, L_SCATTER, 0},
    /* narrow outputs (c_out padded to 8 on the device for 16-bit), with residuals */
    {"3x3x3_c3_res", 16, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 5, 9, 8, 1, 1, L_CHUNK, 0},
    {"3x3x3_c12_res=y", 24, 12, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 7, 9, 1, 2, L_CHUNK, 0},
    {"1x3x3_c3_cache", 8, 3, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 2, 6, 6, 1, 0, L_SCATTER, 0},
    /* odd shapes */
    {"1x1_s2", 4, 6, 1, 1, 1, 1, 2, 2, 0, 0, 0, 0, 1, 7, 7, 1, 0, L_CHUNK, 0},
    {"2x5x3_asym", 5, 7, 2, 5, 3, 1, 1, 2, 2, 1, 0, 2, 3, 9, 11, 1, 1, L_SCATTER, 0},
    {"3x3x3_tiny_frame", 4, 6, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 2, 1, 1, 0, L_CHUNK, 0},
    /* implicit-GEMM kernels (bf16 on sm_90; c_in % 32, c_out % 96 or % 128; windows): each filter
     * and channel tile, partial pixel tiles, residual (also in place), no bias, many tiles */
    {"3x3x3_ig_c96", 96, 96, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 10, 13, 1, 1, L_CHUNK, 0},
    {"3x3x3_ig_c192", 192, 192, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 9, 7, 1, 0, L_CHUNK, 0},
    {"3x3x3_ig_c128_res=y", 128, 128, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 5, 8, 11, 1, 2, L_CHUNK, 0},
    {"3x3x3_ig_96to192", 96, 192, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 17, 5, 0, 1, L_CHUNK, 0},
    {"3x3x3_ig_c384", 384, 384, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 6, 6, 1, 1, L_CHUNK, 0},
    {"3x3x3_ig_64to96", 64, 96, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 40, 72, 1, 1, L_CHUNK, 0},
    {"3x3x3_ig_c512", 512, 512, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 5, 9, 1, 1, L_CHUNK, 0},
    {"3x3x3_ig_32to256", 32, 256, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 3, 4, 1, 0, L_CHUNK, 0},
    {"3x1x1_ig_time", 96, 192, 3, 1, 1, 1, 1, 1, 0, 0, 0, 0, 6, 6, 10, 1, 0, L_CHUNK, 0},
    /* the halo-tile kernel (96 filters, 3x3, c_in % 96: a tuner path of its own, forced by the
     * halo variants): two channel blocks with the residual in place, partial 16x16 tiles; three
     * blocks and kt 2; more tiles than an H100's 132 blocks (each block walks several) */
    {"3x3x3_halo_192to96_res=y",
     192,
     96,
     3,
     3,
     3,
     1,
     1,
     1,
     1,
     1,
     1,
     1,
     4,
     19,
     21,
     1,
     2,
     L_CHUNK,
     0},
    {"2x3x3_halo_288to96", 288, 96, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 7, 23, 0, 0, L_CHUNK, 0},
    {"1x3x3_halo_many_tiles", 96, 96, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 6, 66, 66, 1, 1, L_CHUNK, 0},
    /* an RMS norm of the output (vae_program_fuse_norms): in the halo-tile kernel's epilogue
     * (residual in place, two channel blocks, no activation), else a pass after the conv */
    {"3x3x3_halo_norm_res=y", 96, 96, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 5, 19, 21, 1, 2, L_CHUNK, 1},
    {"3x3x3_halo_192to96_norm", 192, 96, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 17, 35, 1, 0, L_CHUNK, 1},
    {"1x3x3_halo_norm_alone", 96, 96, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 20, 18, 0, 1, L_CHUNK, 2},
    /* 180 tiles: blocks walk several (fp8: the E4M3 kernel's A buffers handed back early) */
    {"3x3x3_halo_tiles_norm", 96, 96, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 7, 90, 90, 1, 1, L_CHUNK, 1},
    {"3x3x3_c64_norm", 64, 64, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 4, 9, 10, 1, 1, L_CACHE_CHUNK, 1},
    {"1x1_c32_norm_res=y", 32, 32, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 6, 7, 1, 2, L_CHUNK, 1},
    /* 2-D convs on the kernels (frames as the time axis, one tap); 16 input channels (Wan's
     * conv1: the kernels on its window padded to 32 channels) */
    {"1x3x3_ig_c96_res", 96, 96, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 11, 9, 1, 1, L_CHUNK, 0},
    {"1x1x1_ig_c128_res=y", 128, 128, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 7, 9, 1, 2, L_CHUNK, 0},
    {"3x3x3_ig_pad16_cache", 16, 96, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 5, 9, 14, 1, 1,
     L_CACHE_CHUNK,          0},
    {"3x3x3_ig_pad16_scatter", 16, 128, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 6, 5, 0, 0, L_SCATTER, 0},
};
static const size_t n_convs = sizeof convs / sizeof *convs;

/* Every conv without a norm again with an activation folded into it (vae_program_fuse_acts):
 * ReLU, which cuDNN's epilogue and the stem kernel apply themselves, and by turns the others
 * (the pass after the conv) */
static void test_conv_acts(void) {
    static const vae_act others[] = {VAE_ACT_SILU, VAE_ACT_CLAMP01, VAE_ACT_TANH_SCALE};
    for (size_t i = 0; i < n_convs; i++) {
        if (convs[i].norm) continue;
        test_conv_groups(&convs[i], 0, i % 4 ? VAE_ACT_RELU : others[i / 4 % 3]);
    }
}

/* CONV with input upsampling (op.up = 2, the fused nearest x2 + conv of the Wan upsamplers): the
 * GPU gets the small frames; the CPU reference gets them upsampled on the host and op.up = 0.
 * act: an activation folded into the conv (the phase path's interleave applies it). */
static void test_conv_up_act(int c_in, int c_out, int kh, int n, int h, int w, int bias,
                             int residual, vae_act act) {
    const int up = 2, hu = h * up, wu = w * up, pad = kh / 2;
    const int ho = hu + 2 * pad - kh + 1, wo = wu + 2 * pad - kh + 1;
    size_t fsz = (size_t)h * w * c_in, fszu = (size_t)hu * wu * c_in, ysz = (size_t)n * ho * wo * c_out;
    float *x = rand_buf(fsz * n, 1.0f, 0.0f), *xu = malloc(fszu * n * sizeof *xu);
    for (int f = 0; f < n; f++)
        for (int yy = 0; yy < hu; yy++)
            for (int xx = 0; xx < wu; xx++)
                memcpy(xu + (((size_t)f * hu + yy) * wu + xx) * c_in,
                       x + (((size_t)f * h + yy / up) * w + xx / up) * c_in, c_in * sizeof *x);
    int K = c_in * kh * kh;
    float *wt = rand_buf((size_t)c_out * K, 1.0f / sqrtf((float)K), 0.0f);
    float *b = bias ? rand_buf(c_out, 0.5f, 0.0f) : NULL;
    float *res = residual ? rand_buf(ysz, 1.0f, 0.0f) : NULL;
    vae_op op = vae_op_make(VAE_OP_CONV, 0, c_in, c_out);
    op.kh = op.kw = kh, op.pad_h[0] = op.pad_h[1] = op.pad_w[0] = op.pad_w[1] = pad;
    op.w = wt, op.b = b;
    op.act = act, op.act_scale = act == VAE_ACT_TANH_SCALE ? 3.0f : 0.0f;
    snprintf(op.name, sizeof op.name, "test.conv_up");
    float *out[2] = {NULL, NULL};
    int rc[2];
    vae_backend *bes[2] = {cpu, gpu};
    for (int k = 0; k < 2; k++) {
        vae_backend *be = bes[k];
        vae_op o = op;
        o.up = k == 0 ? 0 : up;
        if (be == gpu) stage_op(&o);
        void *state = NULL;
        rc[k] = be->v->prepare(be, &o, &state);
        const int hh = k == 0 ? hu : h, ww = k == 0 ? wu : w;
        const size_t fs = k == 0 ? fszu : fsz;
        void *xd = dev_from(be, k == 0 ? xu : x, fs * n);
        const void *frames[64];
        for (int f = 0; f < n; f++) frames[f] = (const char *)xd + (size_t)f * fs * be->elem_size;
        void *yd = be->v->alloc(be, ysz * be->elem_size), *rd = NULL;
        if (residual == 1) rd = dev_from(be, res, ysz);
        if (residual == 2) {
            be->v->upload(be, yd, res, ysz);
            rd = yd;
        }
        if (!rc[k]) rc[k] = be->v->conv(be, &o, state, frames, n, hh, ww, rd, yd, n, ho, wo);
        if (!rc[k]) out[k] = host_from(be, yd, ysz);
        if (rd && rd != yd) be->v->release(be, rd);
        be->v->release(be, yd);
        be->v->release(be, xd);
        be->v->unprepare(be, &o, state);
        if (be == gpu) unstage();
    }
    char what[200];
    snprintf(what, sizeof what, "conv up2 %dx%d %3d->%-3d %d frames %dx%d%s%s%s%s", kh, kh, c_in,
             c_out, n, h, w, bias ? " bias" : "",
             residual == 2 ? " res=y"
             : residual    ? " res"
                           : "",
             act ? " act " : "", act ? act_name(act) : "");
    compare(what, rc[0], rc[1], out[1], out[0], ysz);
    free(x);
    free(xu);
    free(wt);
    free(b);
    free(res);
    free(out[0]);
    free(out[1]);
}

static void test_conv_up(int c_in, int c_out, int kh, int n, int h, int w, int bias, int residual) {
    test_conv_up_act(c_in, c_out, kh, n, h, w, bias, residual, VAE_ACT_NONE);
}

/* ---- fp8 codes between a norm and the E4M3 conv reading it (program.h fp8_codes_bound) ---- */
/* The E4M3 codes at the start of each of n_vox voxels' places of c 16-bit values, from their
 * download as floats (16-bit values convert both ways exactly; valid codes never pair into a
 * 16-bit NaN: they never use 0x7f / 0xff) */
static uint8_t *codes_from(const float *dl, size_t n_vox, int c) {
    uint8_t *b = malloc(n_vox * (size_t)c + 1);
    for (size_t p = 0; p < n_vox; p++)
        for (int k = 0; k < c / 2; k++) {
            const uint16_t u = vae_f32_to_bf16(dl[p * c + k]);
            b[p * c + 2 * k] = (uint8_t)(u & 0xff), b[p * c + 2 * k + 1] = (uint8_t)(u >> 8);
        }
    return b;
}

/* codes differing from those of the values vals at scale s8 (n_vox voxels of c; the product with
 * vae_e4m3_inv, as the kernels make them) */
static size_t codes_off(const uint8_t *codes, const float *vals, size_t n_vox, int c, float s8) {
    size_t bad = 0;
    const float inv = vae_e4m3_inv(s8);
    for (size_t p = 0; p < n_vox; p++)
        for (int k = 0; k < c; k++)
            bad += codes[p * c + k] != vae_f32_to_e4m3(vals[p * c + k] * inv);
    return bad;
}

static void *gpu_alloc_vals(size_t n) {
    return gpu->v->alloc(gpu, n * gpu->elem_size);
}

/* A conv op c_in -> c_out, 3x3x3 with padding 1 and a bias, E4M3 under bound */
static vae_op codes_conv(int c_in, int c_out, float *wt, float *b, float bound) {
    vae_op op = vae_op_make(VAE_OP_CONV, 0, c_in, c_out);
    op.kt = op.kh = op.kw = 3;
    op.pad_h[0] = op.pad_h[1] = op.pad_w[0] = op.pad_w[1] = 1;
    op.w = wt, op.b = b, op.fp8_bound = bound;
    mark_fp8(&op);
    snprintf(op.name, sizeof op.name, "test.codes.conv%d_%d", c_in, c_out);
    return op;
}

/* One conv call on the GPU over frames, into a new host array (NULL: *rc set) */
static float *codes_conv_run(const vae_op *op, const void *const *frames, int n_in, int h, int w,
                             size_t ysz, int *rc) {
    void *state = NULL, *y = gpu_alloc_vals(ysz);
    float *out = NULL;
    *rc = gpu->v->prepare(gpu, op, &state);
    if (*rc == VAE_OK)
        *rc = gpu->v->conv(gpu, op, state, frames, n_in, h, w, NULL, y, n_in - 2, h, w);
    if (*rc == VAE_OK) out = host_from(gpu, y, ysz);
    gpu->v->release(gpu, y);
    gpu->v->unprepare(gpu, op, state);
    return out;
}

/* The RMS norm (+ SiLU) that makes an E4M3 conv's input, writing codes: they are those of its
 * 16-bit output / (bound / 448), byte for byte, packed and over rows; the conv on them equals the
 * conv on that output (quantised by its own pass) bit for bit, through the E4M3 kernel; on frames
 * not consecutive (the first listed twice: the 16-bit paths over the codes expanded in place) it
 * matches the float32 conv of the codes' values and leaves the codes as they were. A conv with a
 * folded norm writes codes too. */
static void test_fp8_codes(int c_in, int c_out, int h, int w) {
    enum { N_IN = 5 };
    const size_t es = gpu->elem_size, fsz = (size_t)h * w * c_in, n = N_IN * fsz;
    const size_t n_vox = n / c_in, ysz = (size_t)(N_IN - 2) * h * w * c_out;
    float *x = rand_buf(n, 1.5f, 0.0f), *g = rand_buf(c_in, 0.5f, 1.0f);
    const int K = 27 * c_in;
    float *wt = rand_buf((size_t)c_out * K, 1.0f / sqrtf((float)K), 0.0f);
    float *b = rand_buf(c_out, 0.5f, 0.0f);
    vae_op norm = vae_op_make(VAE_OP_RMS_NORM, 0, c_in, c_in);
    norm.act = VAE_ACT_SILU, norm.w = g;
    snprintf(norm.name, sizeof norm.name, "test.codes.norm%d", c_in);
    const float bound = vae_op_rms_bound(&norm), s8 = bound / 448.0f;
    vae_op normc = norm;
    normc.fp8_codes_bound = bound;
    char *xd = dev_from(gpu, x, n),
         *y[3] = {gpu_alloc_vals(n), gpu_alloc_vals(n), gpu_alloc_vals(n)};
    void *st = NULL;
    int rc = gpu->v->prepare(gpu, &norm, &st);
    if (!rc) rc = gpu->v->norm(gpu, &norm, st, xd, y[0], N_IN, h, w);
    if (!rc) rc = gpu->v->norm(gpu, &normc, st, xd, y[1], N_IN, h, w);
    if (!rc)
        rc = gpu->v->norm_rows(gpu, &normc, st, xd, es * w * c_in, y[2], es * w * c_in,
                               (int64_t)N_IN * h, w);
    gpu->v->unprepare(gpu, &norm, st);
    float *h0 = host_from(gpu, y[0], n), *h1 = host_from(gpu, y[1], n),
          *h2 = host_from(gpu, y[2], n);
    uint8_t *c1 = codes_from(h1, n_vox, c_in), *c2 = codes_from(h2, n_vox, c_in);
    check(rc == VAE_OK && codes_off(c1, h0, n_vox, c_in, s8) == 0 &&
              codes_off(c2, h0, n_vox, c_in, s8) == 0,
          "fp8 codes: rms norm c=%d %dx%d: rc %d, codes off packed %zu, over rows %zu", c_in, h, w,
          rc, rc ? 0 : codes_off(c1, h0, n_vox, c_in, s8),
          rc ? 0 : codes_off(c2, h0, n_vox, c_in, s8));
    /* the conv on the 16-bit output and on the codes, then on codes not consecutive */
    vae_op conv = codes_conv(c_in, c_out, wt, b, bound), convc = conv;
    convc.fp8_codes_in = 1;
    const void *f0[N_IN], *f1[N_IN], *f3[N_IN];
    for (int i = 0; i < N_IN; i++)
        f0[i] = y[0] + i * fsz * es, f1[i] = y[1] + i * fsz * es;
    f3[0] = f1[0];
    for (int i = 1; i < N_IN; i++)
        f3[i] = f1[i - 1];
    const long fp8_before = fp8_convs();
    int rc_a, rc_b, rc_c;
    float *ya = codes_conv_run(&conv, f0, N_IN, h, w, ysz, &rc_a);
    float *yb = codes_conv_run(&convc, f1, N_IN, h, w, ysz, &rc_b);
    const long fp8_ran = fp8_convs() - fp8_before;
    check(!rc_a && !rc_b && fp8_ran == 2 && !memcmp(ya, yb, ysz * sizeof *ya),
          "fp8 codes: conv %d->%d on them as the E4M3 kernel's input (rc %d %d, E4M3 calls %ld): "
          "the same output bit for bit",
          c_in, c_out, rc_a, rc_b, fp8_ran);
    float *yc = codes_conv_run(&convc, f3, N_IN, h, w, ysz, &rc_c);
    float *h1b = host_from(gpu, y[1], n);
    uint8_t *c1b = codes_from(h1b, n_vox, c_in);
    check(rc_c == VAE_OK && memcmp(c1, c1b, n) == 0,
          "fp8 codes: conv on frames not consecutive: rc %d, the codes kept", rc_c);
    float *vals = malloc(n * sizeof *vals); /* the codes' values, the float32 reference's input */
    for (size_t i = 0; i < n; i++)
        vals[i] = vae_bf16_to_f32(vae_f32_to_bf16(vae_f8e4m3_to_f32(c1[i]) * s8));
    const void *fr[N_IN];
    char *vd = dev_from(cpu, vals, n), *ycd = cpu->v->alloc(cpu, ysz * cpu->elem_size);
    fr[0] = vd;
    for (int i = 1; i < N_IN; i++)
        fr[i] = vd + (i - 1) * fsz * cpu->elem_size;
    void *cst = NULL;
    vae_op conv32 = conv;
    conv32.fp8 = 0;
    int rc_r = cpu->v->prepare(cpu, &conv32, &cst);
    if (!rc_r) rc_r = cpu->v->conv(cpu, &conv32, cst, fr, N_IN, h, w, NULL, ycd, N_IN - 2, h, w);
    float *yr = rc_r ? NULL : host_from(cpu, ycd, ysz);
    cpu->v->unprepare(cpu, &conv32, cst);
    char what[160];
    snprintf(what, sizeof what, "fp8 codes: conv %d->%d on frames not consecutive (16-bit paths)",
             c_in, c_out);
    compare(what, rc_r, rc_c, yc, yr, ysz);
    cpu->v->release(cpu, vd);
    cpu->v->release(cpu, ycd);
    free(vals), free(yr), free(yc), free(h1b), free(c1b), free(ya), free(yb);
    free(h0), free(h1), free(h2), free(c1), free(c2);
    for (int k = 0; k < 3; k++)
        gpu->v->release(gpu, y[k]);
    gpu->v->release(gpu, xd);
    free(x), free(g), free(wt), free(b);
}

/* A conv with a folded RMS norm (+ SiLU) writing its output as codes (the norm a pass after the
 * conv, or 96 filters: the halo-tile kernel's epilogue; fp8: the conv itself in E4M3): those of
 * its 16-bit output / (bound / 448), byte for byte. */
static void test_fp8_codes_conv(int c_in, int c_out, int h, int w, int fp8) {
    enum { N_IN = 4 };
    const size_t fsz = (size_t)h * w * c_in, n = N_IN * fsz, ysz = (size_t)2 * h * w * c_out;
    float *x = rand_buf(n, 1.0f, 0.0f), *g = rand_buf(c_out, 0.5f, 1.0f);
    const int K = 27 * c_in;
    float *wt = rand_buf((size_t)c_out * K, 1.0f / sqrtf((float)K), 0.0f);
    vae_op norm = vae_op_make(VAE_OP_RMS_NORM, 0, c_out, c_out);
    norm.act = VAE_ACT_SILU, norm.w = g;
    const float bound = vae_op_rms_bound(&norm);
    vae_op conv = codes_conv(c_in, c_out, wt, NULL, 0.0f), convc;
    if (!fp8) conv.fp8 = 0, conv.fp8_kernel = VAE_FP8_NONE;
    conv.norm_w = g, conv.norm_act = VAE_ACT_SILU;
    convc = conv;
    convc.fp8_codes_bound = bound;
    char *xd = dev_from(gpu, x, n);
    const void *f[N_IN];
    for (int i = 0; i < N_IN; i++)
        f[i] = xd + i * fsz * gpu->elem_size;
    int rc_a, rc_b;
    float *ya = codes_conv_run(&conv, f, N_IN, h, w, ysz, &rc_a);
    float *yb = codes_conv_run(&convc, f, N_IN, h, w, ysz, &rc_b);
    uint8_t *cb = yb ? codes_from(yb, ysz / c_out, c_out) : NULL;
    const size_t off = cb && ya ? codes_off(cb, ya, ysz / c_out, c_out, bound / 448.0f) : ysz;
    /* each op tunes its own path: two paths' sums may round apart, a code apart at most */
    check(!rc_a && !rc_b && off <= ysz / 1000,
          "fp8 codes: conv %d->%d%s + rms norm writing codes (rc %d %d): %zu of %zu codes off "
          "(at most 0.1%%)",
          c_in, c_out, conv.fp8 ? " (E4M3)" : "", rc_a, rc_b, off, ysz);
    free(cb), free(ya), free(yb), free(x), free(g), free(wt);
    gpu->v->release(gpu, xd);
}

/* ---- norms ---------------------------------------------------------------------------------- */
static void test_norm(vae_op_kind kind, int c, int groups, vae_act act, int t, int h, int w,
                      float offset, int has_w, int has_b, int in_place) {
    size_t n = (size_t)t * h * w * c;
    float *x = rand_buf(n, 1.5f, offset);
    float *g = has_w ? rand_buf(c, 0.5f, 1.0f) : NULL, *b = has_b ? rand_buf(c, 0.5f, 0.0f) : NULL;
    vae_op op = vae_op_make(kind, 0, c, c);
    op.act = act, op.act_scale = 3.0f, op.groups = groups, op.eps = 1e-6f, op.w = g, op.b = b;
    snprintf(op.name, sizeof op.name, "test.norm");
    float *out[2] = {NULL, NULL};
    int rc[2];
    vae_backend *bes[2] = {cpu, gpu};
    for (int k = 0; k < 2; k++) {
        vae_backend *be = bes[k];
        void *state = NULL;
        rc[k] = be->v->prepare(be, &op, &state);
        void *xd = dev_from(be, x, n), *yd = in_place ? xd : be->v->alloc(be, n * be->elem_size);
        if (!rc[k]) rc[k] = be->v->norm(be, &op, state, xd, yd, t, h, w);
        if (!rc[k]) out[k] = host_from(be, yd, n);
        if (yd != xd) be->v->release(be, yd);
        be->v->release(be, xd);
        be->v->unprepare(be, &op, state);
    }
    char what[200];
    snprintf(what, sizeof what, "%s c=%d groups=%d %s t=%d %dx%d offset %g%s%s%s",
             kind == VAE_OP_RMS_NORM ? "rms_norm" : "group_norm", c, groups, act_name(act), t, h, w,
             offset, has_w ? " w" : "", has_b ? " b" : "", in_place ? " in-place" : "");
    compare(what, rc[0], rc[1], out[1], out[0], n);
    free(x);
    free(g);
    free(b);
    free(out[0]);
    free(out[1]);
}

/* An RMS norm over rows of columns (norm_rows, what column strips run): columns [2, w - 1) of
 * x (t * h rows) into columns [1, w - 2) of a zeroed y two columns wider, on both backends. */
static void test_norm_rows(int c, vae_act act, int t, int h, int w) {
    const int cols = w - 3, yw = w + 2;
    const size_t rows = (size_t)t * h, n = rows * w * c, ny = rows * yw * c;
    float *x = rand_buf(n, 1.5f, 0.0f), *g = rand_buf(c, 0.5f, 1.0f);
    vae_op op = vae_op_make(VAE_OP_RMS_NORM, 0, c, c);
    op.act = act, op.act_scale = 3.0f, op.w = g;
    snprintf(op.name, sizeof op.name, "test.norm_rows");
    float *out[2] = {NULL, NULL};
    int rc[2];
    vae_backend *bes[2] = {cpu, gpu};
    for (int k = 0; k < 2; k++) {
        vae_backend *be = bes[k];
        const size_t es = be->elem_size;
        void *state = NULL;
        rc[k] = be->v->prepare(be, &op, &state);
        char *xd = dev_from(be, x, n), *yd = be->v->alloc(be, ny * es);
        if (!rc[k]) rc[k] = be->v->zero(be, yd, ny * es);
        if (!rc[k])
            rc[k] = be->v->norm_rows(be, &op, state, xd + 2 * c * es, es * w * c, yd + c * es,
                                     es * yw * c, (int64_t)rows, cols);
        if (!rc[k]) out[k] = host_from(be, yd, ny);
        be->v->release(be, yd);
        be->v->release(be, xd);
        be->v->unprepare(be, &op, state);
    }
    char what[160];
    snprintf(what, sizeof what, "rms_norm rows c=%d %s %zu rows of %d of %d columns", c,
             act_name(act), rows, cols, w);
    compare(what, rc[0], rc[1], out[1], out[0], ny);
    free(x);
    free(g);
    free(out[0]);
    free(out[1]);
}

/* A GroupNorm in row bands as a device group runs it: each band's sums (norm_stats, at its rows'
 * offset), added up, then norm_apply over a band of the frame with a halo row (what a band holds):
 * the GPU against the CPU, with the sums in host memory and in device memory (a device
 * communicator's buffers: read back and written through pinned memory here). */
static int band_sums(vae_backend *be, const vae_op *op, const void *xd, int t, int h, int w,
                     int bands, int dev, double *sum, double *part, void *dsum, double *pin) {
    const size_t ns = (size_t)t * op->groups * 3, bytes = ns * sizeof(double);
    memset(sum, 0, bytes);
    int rc = VAE_OK;
    for (int j = 0; j < bands && !rc; j++) {
        const int y0 = h * j / bands, rows = h * (j + 1) / bands - y0;
        rc = be->v->norm_stats(be, op, xd, t, h, w, y0, rows, dev ? dsum : part, dev);
        if (!rc && dev) rc = be->v->copy2d(be, pin, bytes, dsum, bytes, bytes, 1);
        if (!rc && dev) rc = be->v->sync(be);
        for (size_t i = 0; i < ns && !rc; i++)
            sum[i] += dev ? pin[i] : part[i];
    }
    if (!rc && dev) { /* the summed statistics into the device buffer */
        memcpy(pin, sum, bytes);
        rc = be->v->copy2d(be, dsum, bytes, pin, bytes, bytes, 1);
    }
    return rc;
}

static void test_norm_bands(int c, int groups, vae_act act, int t, int h, int w, int bands,
                            float offset) {
    const size_t n = (size_t)t * h * w * c, ns = (size_t)t * groups * 3;
    float *x = rand_buf(n, 1.5f, offset);
    float *g = rand_buf(c, 0.5f, 1.0f), *b = rand_buf(c, 0.5f, 0.0f);
    vae_op op = vae_op_make(VAE_OP_GROUP_NORM, 0, c, c);
    op.act = act, op.act_scale = 3.0f, op.groups = groups, op.eps = 1e-6f, op.w = g, op.b = b;
    snprintf(op.name, sizeof op.name, "test.norm_bands");
    const int y0 = h / 3, rows = h - y0 > 2 ? h - y0 - 1 : h - y0; /* the band applied: a halo */
    const size_t nb = (size_t)t * rows * w * c;
    float *out[3] = {NULL, NULL, NULL};
    int rc[3];
    vae_backend *bes[3] = {cpu, gpu, gpu};
    double *sum = malloc(ns * sizeof *sum), *part = malloc(ns * sizeof *part);
    for (int k = 0; k < 3; k++) {
        vae_backend *be = bes[k];
        const int dev = k == 2;
        void *state = NULL;
        rc[k] = be->v->prepare(be, &op, &state);
        void *xd = dev_from(be, x, n), *yd = be->v->alloc(be, nb * be->elem_size);
        void *bd = be->v->alloc(be, nb * be->elem_size); /* rows [y0, y0 + rows) of each frame */
        void *dsum = dev ? be->v->alloc(be, ns * sizeof(double)) : NULL;
        double *pin = dev ? be->v->host_alloc(be, ns * sizeof(double)) : NULL;
        if (!rc[k] && dev && (!dsum || !pin)) rc[k] = VAE_ENOMEM;
        if (!rc[k]) rc[k] = band_sums(be, &op, xd, t, h, w, bands, dev, sum, part, dsum, pin);
        const size_t row = (size_t)w * c * be->elem_size;
        if (!rc[k])
            rc[k] = be->v->copy2d(be, bd, rows * row, (const char *)xd + y0 * row, h * row,
                                  rows * row, (size_t)t);
        if (!rc[k])
            rc[k] = be->v->norm_apply(be, &op, state, bd, yd, t, rows, w, dev ? dsum : sum, dev);
        if (!rc[k]) out[k] = host_from(be, yd, nb);
        if (dsum) be->v->release(be, dsum);
        if (pin) be->v->host_free(be, pin);
        be->v->release(be, bd);
        be->v->release(be, yd);
        be->v->release(be, xd);
        be->v->unprepare(be, &op, state);
    }
    for (int k = 1; k < 3; k++) {
        char what[200];
        snprintf(what, sizeof what,
                 "group_norm in %d bands (sums on the %s) c=%d groups=%d %s "
                 "t=%d %dx%d offset %g",
                 bands, k == 2 ? "device" : "host", c, groups, act_name(act), t, h, w, offset);
        compare(what, rc[0], rc[k], out[k], out[0], nb);
    }
    free(x), free(g), free(b), free(sum), free(part), free(out[0]), free(out[1]), free(out[2]);
}

/* ---- eltwise -------------------------------------------------------------------------------- */
static void test_eltwise(vae_op_kind kind, vae_act act, int c, int64_t n_vox, int in_place) {
    size_t n = (size_t)n_vox * c;
    float *a = rand_buf(n, 3.0f, 0.0f), *b2 = rand_buf(n, 3.0f, 0.0f);
    float *sc = rand_buf(c, 1.0f, 0.5f), *sh = rand_buf(c, 1.0f, 0.0f);
    vae_op op = vae_op_make(kind, 0, c, c);
    op.act = act, op.act_scale = 3.0f;
    if (kind == VAE_OP_ADD) op.in[1] = 0;
    if (kind == VAE_OP_SCALE_SHIFT) op.w = sc, op.b = sh;
    snprintf(op.name, sizeof op.name, "test.eltwise");
    float *out[2] = {NULL, NULL};
    int rc[2];
    vae_backend *bes[2] = {cpu, gpu};
    for (int k = 0; k < 2; k++) {
        vae_backend *be = bes[k];
        void *state = NULL;
        rc[k] = be->v->prepare(be, &op, &state);
        void *ad = dev_from(be, a, n), *bd = kind == VAE_OP_ADD ? dev_from(be, b2, n) : NULL;
        void *yd = in_place ? ad : be->v->alloc(be, n * be->elem_size);
        if (!rc[k]) rc[k] = be->v->eltwise(be, &op, state, ad, bd, yd, n_vox);
        if (!rc[k]) out[k] = host_from(be, yd, n);
        if (yd != ad) be->v->release(be, yd);
        be->v->release(be, ad);
        if (bd) be->v->release(be, bd);
        be->v->unprepare(be, &op, state);
    }
    static const char *kn[] = {[VAE_OP_ACT] = "act", [VAE_OP_ADD] = "add", [VAE_OP_SCALE_SHIFT] = "scale_shift"};
    char what[200];
    snprintf(what, sizeof what, "%s %s c=%d voxels=%lld%s", kn[kind], act_name(act), c,
             (long long)n_vox, in_place ? " in-place" : "");
    compare(what, rc[0], rc[1], out[1], out[0], n);
    free(a);
    free(b2);
    free(sc);
    free(sh);
    free(out[0]);
    free(out[1]);
}

/* ---- resample ------------------------------------------------------------------------------- */
typedef struct shuf_case {
    const char *name;
    vae_op_kind kind;
    int c_in, c_out, ft, fs, cs_o, cs_t, cs_h, cs_w, group;
    int n_in, h, w;
    int scattered; /* SHUFFLE_DOWN: frames at separate addresses */
} shuf_case;

static void test_resample(const shuf_case *sc) {
    int t_out, ho = sc->h * sc->fs, wo = sc->w * sc->fs;
    if (sc->kind == VAE_OP_SHUFFLE_DOWN) t_out = sc->n_in / sc->ft, ho = sc->h / sc->fs, wo = sc->w / sc->fs;
    else if (sc->kind == VAE_OP_SHUFFLE_UP) t_out = sc->n_in * sc->ft;
    else t_out = sc->n_in;
    size_t fsz = (size_t)sc->h * sc->w * sc->c_in, ny = (size_t)t_out * ho * wo * sc->c_out;
    float *x = rand_buf(fsz * sc->n_in, 1.0f, 0.0f);
    vae_op op = vae_op_make(sc->kind, 0, sc->c_in, sc->c_out);
    op.ft = sc->ft, op.fs = sc->fs, op.cs_o = sc->cs_o, op.cs_t = sc->cs_t, op.cs_h = sc->cs_h;
    op.cs_w = sc->cs_w, op.group = sc->group, op.kt = op.st = sc->ft;
    snprintf(op.name, sizeof op.name, "test.resample.%s", sc->name);
    float *out[2] = {NULL, NULL};
    int rc[2];
    vae_backend *bes[2] = {cpu, gpu};
    for (int k = 0; k < 2; k++) {
        vae_backend *be = bes[k];
        void *state = NULL;
        void *bufs[64];
        const void *frames[64];
        int nb = 0;
        rc[k] = be->v->prepare(be, &op, &state);
        if (sc->scattered) {
            for (int i = sc->n_in - 1; i >= 0; i--)
                frames[i] = bufs[nb++] = dev_from(be, x + (size_t)i * fsz, fsz);
        } else {
            bufs[nb++] = dev_from(be, x, fsz * sc->n_in);
            for (int i = 0; i < sc->n_in; i++)
                frames[i] = (const char *)bufs[0] + (size_t)i * fsz * be->elem_size;
        }
        void *yd = be->v->alloc(be, (ny ? ny : 1) * be->elem_size);
        if (!rc[k]) rc[k] = be->v->resample(be, &op, frames, sc->n_in, sc->h, sc->w, yd, t_out);
        if (!rc[k]) out[k] = host_from(be, yd, ny);
        be->v->release(be, yd);
        for (int i = 0; i < nb; i++) be->v->release(be, bufs[i]);
        be->v->unprepare(be, &op, state);
    }
    char what[200];
    snprintf(what, sizeof what, "%s %s %d->%d ft %d fs %d group %d, %d frames %dx%d%s",
             sc->kind == VAE_OP_UPSAMPLE ? "upsample" : sc->kind == VAE_OP_SHUFFLE_UP ? "shuffle_up" : "shuffle_down",
             sc->name, sc->c_in, sc->c_out, sc->ft, sc->fs, sc->group, sc->n_in, sc->h, sc->w,
             sc->scattered ? " scattered" : "");
    compare(what, rc[0], rc[1], out[1], out[0], ny);
    free(x);
    free(out[0]);
    free(out[1]);
}

/* name, kind, c_in, c_out, ft, fs, cs_o, cs_t, cs_h, cs_w, group, n_in, h, w, scattered */
static const shuf_case resamples[] = {
    {"nearest_x2", VAE_OP_UPSAMPLE, 16, 16, 1, 2, 0, 0, 0, 0, 1, 2, 5, 7, 0},
    {"nearest_x2_c3", VAE_OP_UPSAMPLE, 3, 3, 1, 2, 0, 0, 0, 0, 1, 3, 4, 3, 0},
    {"nearest_x3_c5", VAE_OP_UPSAMPLE, 5, 5, 1, 3, 0, 0, 0, 0, 1, 1, 3, 4, 0},
    /* Wan unpatchify: vb_shuffle_up(x, 12, 3, 1, 2, 4, 0, 1, 2, 1) */
    {"unpatchify", VAE_OP_SHUFFLE_UP, 12, 3, 1, 2, 4, 0, 1, 2, 1, 2, 3, 5, 0},
    /* Wan2.2 DupUp3D (ft 2, fs 2): factor 8, cs (8, 4, 2, 1), repeats = c_out*8/c_in */
    {"dup_up_3d", VAE_OP_SHUFFLE_UP, 16, 8, 2, 2, 8, 4, 2, 1, 4, 2, 3, 4, 0},
    /* Wan time_conv split: vb_shuffle_up(rest, 2c, c, 2, 1, 1, c, 0, 0, 1) */
    {"time_split", VAE_OP_SHUFFLE_UP, 24, 12, 2, 1, 1, 12, 0, 0, 1, 3, 4, 5, 0},
    /* SeedVR2 upscale: vb_shuffle_up(u, 4*rt*c, c, rt, 2, 1, c, 2*rt*c, rt*c, 1), rt 2 */
    {"seedvr2_up", VAE_OP_SHUFFLE_UP, 64, 8, 2, 2, 1, 8, 32, 16, 1, 2, 3, 3, 0},
    /* vectorised shuffle-up: contiguous runs (one 16-byte load) and gathered runs */
    {"time_split_c64", VAE_OP_SHUFFLE_UP, 128, 64, 2, 1, 1, 64, 0, 0, 1, 2, 6, 5, 0},
    {"dup_up_same_c", VAE_OP_SHUFFLE_UP, 16, 16, 2, 2, 8, 4, 2, 1, 8, 2, 3, 4, 0},
    {"dup_up_c32", VAE_OP_SHUFFLE_UP, 64, 32, 2, 2, 8, 4, 2, 1, 4, 2, 3, 4, 0},
    {"seedvr2_up_c16", VAE_OP_SHUFFLE_UP, 128, 16, 2, 2, 1, 16, 64, 32, 1, 2, 4, 3, 0},
    {"nearest_x2_c64", VAE_OP_UPSAMPLE, 64, 64, 1, 2, 0, 0, 0, 0, 1, 2, 6, 5, 0},
    /* Wan patchify: vb_shuffle_down(x, 3, 12, 1, 2, 4, 0, 1, 2, 1, 0) */
    {"patchify", VAE_OP_SHUFFLE_DOWN, 3, 12, 1, 2, 4, 0, 1, 2, 1, 2, 8, 6, 0},
    /* Wan2.2 AvgDown3D (ft 2, fs 2): cs (8, 4, 2, 1), group = c_in*8/c_out */
    {"avg_down_3d", VAE_OP_SHUFFLE_DOWN, 8, 16, 2, 2, 8, 4, 2, 1, 4, 4, 6, 8, 1},
    {"avg_down_2d", VAE_OP_SHUFFLE_DOWN, 5, 10, 1, 2, 4, 0, 2, 1, 2, 3, 5, 4, 0},
    {"patchify_crop", VAE_OP_SHUFFLE_DOWN, 3, 12, 1, 2, 1, 0, 6, 3, 1, 2, 7, 9, 0},
    {"avg_down_many", VAE_OP_SHUFFLE_DOWN, 4, 8, 2, 2, 8, 4, 2, 1, 4, 40, 4, 4, 0}, /* > 32 frames */
};

/* ---- planar host transfers (the session's asynchronous path) -------------------------------- */
static void test_transfers(int t, int h, int w, int c) {
    vae_backend *be = gpu;
    if (!be->v->stage_in || !be->v->upload_planar || !be->v->download_planar || !be->v->download_wait) {
        check(0, "planar transfers: not provided");
        return;
    }
    const size_t n = (size_t)t * h * w * c, plane = (size_t)t * h * w;
    float *planar = rand_buf(n, 2.0f, 0.0f), *cl = malloc(n * sizeof *cl);
    for (size_t p = 0; p < plane; p++)
        for (int ch = 0; ch < c; ch++) cl[p * c + ch] = planar[(size_t)ch * plane + p];
    /* upload twice in a row (the staging buffers alternate), check the second and the first */
    void *d1 = be->v->alloc(be, n * be->elem_size), *d2 = be->v->alloc(be, n * be->elem_size);
    float *st = be->v->stage_in(be, n * sizeof(float));
    int rc = st ? VAE_OK : VAE_ENOMEM;
    if (!rc) memcpy(st, planar, n * sizeof(float));
    if (!rc) rc = be->v->upload_planar(be, d1, st, t, h, w, c);
    float *st2 = rc ? NULL : be->v->stage_in(be, n * sizeof(float));
    if (st2) {
        for (size_t i = 0; i < n; i++) st2[i] = -planar[i];
        rc = be->v->upload_planar(be, d2, st2, t, h, w, c);
    }
    float *back = rc ? NULL : host_from(be, d1, n);
    char what[160];
    snprintf(what, sizeof what, "upload_planar t=%d %dx%d c=%d", t, h, w, c);
    compare(what, 0, rc || !back, back, cl, n);
    free(back);
    /* download_planar of d2 (= -cl) and d1, waited for in reverse order */
    float *h2 = NULL, *h1 = NULL;
    if (!rc) rc = be->v->download_planar(be, d2, t, h, w, c, &h2);
    if (!rc) rc = be->v->download_planar(be, d1, t, h, w, c, &h1);
    if (!rc) rc = be->v->download_wait(be, h1);
    if (!rc) rc = be->v->download_wait(be, h2);
    snprintf(what, sizeof what, "download_planar t=%d %dx%d c=%d", t, h, w, c);
    compare(what, 0, rc, h1, planar, n);
    float *neg = malloc(n * sizeof *neg);
    for (size_t i = 0; i < n; i++) neg[i] = -planar[i];
    snprintf(what, sizeof what, "download_planar (second buffer) t=%d %dx%d c=%d", t, h, w, c);
    compare(what, 0, rc, h2, neg, n);
    /* through the device stage: d2 ++ d1 staged as one chunk of 2t frames in pieces of t, the
     * chunk zeroed on the compute stream before the copies (they read the stage), the pieces
     * waited for in reverse order; twice (the second stage waits for the first's copies) */
    if (be->v->download_stage && !rc) {
        void *dd = be->v->alloc(be, 2 * n * be->elem_size);
        for (int round = 0; round < 2 && !rc; round++) {
            int pieces = 0;
            rc = be->v->copy(be, dd, d2, n * be->elem_size);
            if (!rc) rc = be->v->copy(be, (char *)dd + n * be->elem_size, d1, n * be->elem_size);
            if (!rc) rc = be->v->download_stage(be, dd, 2 * t, h, w, c, t, &pieces);
            if (!rc) rc = be->v->zero(be, dd, 2 * n * be->elem_size);
            snprintf(what, sizeof what, "download_stage %d: pieces t=%d %dx%d c=%d", round, t, h, w,
                     c);
            check(!rc && pieces == 2, "%s", what);
            if (rc || pieces != 2) break;
            rc = be->v->download_staged(be, 0, &h2);
            if (!rc) rc = be->v->download_staged(be, 1, &h1);
            if (!rc) rc = be->v->download_wait(be, h1);
            if (!rc) rc = be->v->download_wait(be, h2);
            snprintf(what, sizeof what, "download_staged %d: first piece t=%d %dx%d c=%d", round, t,
                     h, w, c);
            compare(what, 0, rc, h2, neg, n);
            snprintf(what, sizeof what, "download_staged %d: second piece t=%d %dx%d c=%d", round,
                     t, h, w, c);
            compare(what, 0, rc, h1, planar, n);
        }
        be->v->release(be, dd);
    }
    be->v->release(be, d1);
    be->v->release(be, d2);
    free(planar);
    free(cl);
    free(neg);
}

/* ---- attention ------------------------------------------------------------------------------ */
/* queries [q0, q1) of each frame compared (q1 = 0: all; the GPU may write the others too) */
static void test_attention_range(int c, int t, int h, int w, float qk, int q0, int q1) {
    int n = h * w;
    if (q1 == 0) q1 = n;
    size_t nx = (size_t)t * n * 3 * c, ny = (size_t)t * n * c;
    float *qkv = rand_buf(nx, qk, 0.0f);
    vae_op op = vae_op_make(VAE_OP_ATTENTION, 0, 3 * c, c);
    op.scale = (float)(1.0 / sqrt((double)c));
    snprintf(op.name, sizeof op.name, "test.attention");
    float *out[2] = {NULL, NULL};
    int rc[2];
    vae_backend *bes[2] = {cpu, gpu};
    for (int k = 0; k < 2; k++) {
        vae_backend *be = bes[k];
        void *state = NULL;
        rc[k] = be->v->prepare(be, &op, &state);
        void *xd = dev_from(be, qkv, nx), *yd = be->v->alloc(be, ny * be->elem_size);
        if (!rc[k]) rc[k] = be->v->attention(be, &op, state, xd, yd, t, h, w, q0, q1);
        if (!rc[k]) out[k] = host_from(be, yd, ny);
        for (int f = 0; out[k] && f < t; f++) /* frame f's queries, packed */
            memmove(out[k] + (size_t)f * (q1 - q0) * c, out[k] + ((size_t)f * n + q0) * c,
                    (size_t)(q1 - q0) * c * sizeof(float));
        be->v->release(be, xd);
        be->v->release(be, yd);
        be->v->unprepare(be, &op, state);
    }
    char what[200];
    snprintf(what, sizeof what, "attention c=%d t=%d %dx%d (N=%d) queries [%d, %d) qk scale %g", c,
             t, h, w, n, q0, q1, qk);
    compare(what, rc[0], rc[1], out[1], out[0], (size_t)t * (q1 - q0) * c);
    free(qkv);
    free(out[0]);
    free(out[1]);
}

static void test_attention(int c, int t, int h, int w, float qk) {
    test_attention_range(c, t, h, w, qk, 0, 0);
}

/* ---- buffers, errors ------------------------------------------------------------------------ */
static void test_buffers(void) {
    vae_backend *be = gpu;
    int64_t base = be->bytes_in_use;
    size_t n = 10007;
    check(base == 0 && be->bytes_peak == 0, "fresh backend: nothing in use (%lld, peak %lld)",
          (long long)base, (long long)be->bytes_peak);
    float *x = rand_buf(n, 100.0f, 0.0f);
    void *d = dev_from(be, x, n);
    float *back = host_from(be, d, n);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)back[i] - x[i]) / (fabs(x[i]) + 1e-30);
        if (!(e <= worst)) worst = e; /* NaN counts as worst */
    }
    double lim = be->dtype == VAE_DTYPE_F32 ? 0.0 : be->dtype == VAE_DTYPE_BF16 ? 1.0 / 256 : 1.0 / 2048;
    check(worst <= lim, "upload/download round trip: worst rel err %.2e (limit %.1e)", worst, lim);
    void *d2 = be->v->alloc(be, n * be->elem_size);
    int rc = be->v->copy(be, d2, d, n * be->elem_size);
    float *back2 = host_from(be, d2, n);
    check(rc == VAE_OK && memcmp(back, back2, n * sizeof(float)) == 0, "device copy");
    rc = be->v->zero(be, d2, n * be->elem_size);
    free(back2);
    back2 = host_from(be, d2, n);
    int zeros = 1;
    for (size_t i = 0; i < n; i++) zeros &= back2[i] == 0.0f;
    check(rc == VAE_OK && zeros, "device zero");
    check(be->bytes_in_use > base && be->bytes_peak >= be->bytes_in_use, "accounting while in use");
    be->v->release(be, d2);
    void *d3 = be->v->alloc(be, n * be->elem_size); /* same size class: the cached block */
    check(d3 == d2, "caching allocator reuses a released block");
    be->v->release(be, d3);
    be->v->release(be, d);
    check(be->bytes_in_use == base, "accounting back to %lld after release (%lld)", (long long)base,
          (long long)be->bytes_in_use);
    check(be->v->sync(be) == VAE_OK, "sync");
    free(x);
    free(back);
    free(back2);
}

/* Host copies on the bus (cuda_bus.c) as strips use them: S strips of F one-frame steps; each
 * step reads the previous strip's two columns of the frame from a pinned host slot (after a
 * prefetch made in the step before), asks for the next frame's, then writes its own. Reads
 * must see exactly what was written before them, never a prefetch made stale by a later write;
 * then copies larger than a ring block (chunked). */
static void test_bus_slots(void) {
    enum { S = 3, F = 7, R = 37, W = 12, N = 2, C = 96 };
    const size_t es = gpu->elem_size, px = (size_t)C * es, fb = (size_t)R * N * px;
    char *slot = gpu->v->host_alloc(gpu, F * fb);
    check(slot != NULL, "bus: a pinned host slot of %zu bytes", F * fb);
    if (!slot) return;
    float *mirror = calloc((size_t)F * R * N * C, sizeof *mirror); /* what the slot holds */
    gpu->host_copy_on = 1; /* as a plan with strips' slots on the host sets it */
    const long hits0 = described_count(" read from prefetches");
    int rc = VAE_OK, same = 1;
    for (int k = 0; k < S && rc == VAE_OK; k++)
        for (int f = 0; f < F && rc == VAE_OK; f++) {
            const size_t nx = (size_t)R * W * C, nz = (size_t)R * (N + 3) * C;
            float *x = rand_buf(nx, 1.0f, (float)k), *zero = calloc(nz, sizeof *zero);
            void *dx = dev_from(gpu, x, nx), *dz = dev_from(gpu, zero, nz);
            float *xs = host_from(gpu, dx, nx); /* in the GPU's dtype */
            if (k > 0) /* the slot's frame f into columns 1..1+N of z */
                rc = gpu->v->copy2d(gpu, (char *)dz + px, (N + 3) * px, slot + f * fb, N * px,
                                    N * px, R);
            if (rc == VAE_OK && k > 0 && f + 1 < F)
                rc = gpu->v->prefetch(gpu, slot + (f + 1) * fb, fb);
            if (rc == VAE_OK && k > 0) {
                float *z = host_from(gpu, dz, nz);
                for (int r = 0; r < R; r++)
                    same &= memcmp(z + ((size_t)r * (N + 3) + 1) * C,
                                   mirror + ((size_t)f * R + r) * N * C, N * C * sizeof *z) == 0;
                free(z);
            }
            if (rc == VAE_OK) /* x's last N columns into the slot's frame f */
                rc = gpu->v->copy2d(gpu, slot + f * fb, N * px, (char *)dx + (W - N) * px,
                                    W * px, N * px, R);
            for (int r = 0; r < R; r++)
                memcpy(mirror + ((size_t)f * R + r) * N * C, xs + ((size_t)r * W + W - N) * C,
                       N * C * sizeof *xs);
            gpu->v->release(gpu, dx);
            gpu->v->release(gpu, dz);
            free(x);
            free(xs);
            free(zero);
        }
    check(rc == VAE_OK && same, "bus: %d strips of %d steps through a host slot read what the "
          "strip before wrote (%s)", S, F, rc ? vae_last_error() : "ok");
    const long hits = described_count(" read from prefetches") - hits0;
    check(hits0 < 0 || hits >= (S - 1) * (F - 1), "bus: %ld of %d reads from prefetches", hits,
          (S - 1) * (F - 1));
    gpu->v->host_free(gpu, slot);
    free(mirror);
    /* rows larger in all than a ring block: the copy out in pieces, then back */
    const size_t rows = 600, cols = 16384, n = rows * cols;
    float *x = rand_buf(n, 1.0f, 0.0f);
    void *dx = dev_from(gpu, x, n), *dy = gpu->v->alloc(gpu, n * es);
    char *h = gpu->v->host_alloc(gpu, n * es);
    rc = h ? VAE_OK : VAE_ENOMEM;
    if (rc == VAE_OK) rc = gpu->v->copy2d(gpu, h, cols * es, dx, cols * es, cols * es, rows);
    if (rc == VAE_OK) rc = gpu->v->prefetch(gpu, h, 4096); /* a prefetch of part of it */
    if (rc == VAE_OK) rc = gpu->v->copy2d(gpu, dy, cols * es, h, cols * es, cols * es, rows);
    float *a = host_from(gpu, dx, n), *b = host_from(gpu, dy, n);
    check(rc == VAE_OK && memcmp(a, b, n * sizeof *a) == 0,
          "bus: %zu MiB out to the host in pieces and back (%s)", n * es >> 20,
          rc ? vae_last_error() : "ok");
    if (h) gpu->v->host_free(gpu, h);
    gpu->v->release(gpu, dx);
    gpu->v->release(gpu, dy);
    free(x);
    free(a);
    free(b);
    gpu->host_copy_on = 0;
}

/* copy2d / zero2d of crops of channels-last frames (a strip's rebuilt input: wide rows, a slot of
 * a column or two, odd channel counts for the narrow vector widths), against the CPU backend's
 * on the same values; the pixels outside the copied columns must stay as they were */
static void test_copy2d(int rows, int w_src, int w_dst, int c, int x_src, int x_dst, int cols) {
    const size_t es = gpu->elem_size, ns = (size_t)rows * w_src * c, nd = (size_t)rows * w_dst * c;
    float *s = rand_buf(ns, 1.0f, 0.0f), *d = rand_buf(nd, 1.0f, 0.0f);
    void *ds = dev_from(gpu, s, ns), *dd = dev_from(gpu, d, nd);
    float *s_back = host_from(gpu, ds, ns), *want = host_from(gpu, dd, nd); /* in the GPU's dtype */
    int rc = gpu->v->copy2d(gpu, (char *)dd + (size_t)x_dst * c * es, (size_t)w_dst * c * es,
                            (const char *)ds + (size_t)x_src * c * es, (size_t)w_src * c * es,
                            (size_t)cols * c * es, (size_t)rows);
    if (rc == VAE_OK) /* zeros over the columns after the copied ones, as far as they go */
        rc = gpu->v->zero2d(gpu, (char *)dd + (size_t)(x_dst + cols) * c * es,
                            (size_t)w_dst * c * es, (size_t)(w_dst - x_dst - cols) * c * es,
                            (size_t)rows);
    cpu->v->copy2d(cpu, want + (size_t)x_dst * c, (size_t)w_dst * c * 4,
                   s_back + (size_t)x_src * c, (size_t)w_src * c * 4, (size_t)cols * c * 4,
                   (size_t)rows);
    cpu->v->zero2d(cpu, want + (size_t)(x_dst + cols) * c, (size_t)w_dst * c * 4,
                   (size_t)(w_dst - x_dst - cols) * c * 4, (size_t)rows);
    float *got = host_from(gpu, dd, nd);
    check(rc == VAE_OK && memcmp(got, want, nd * sizeof *got) == 0,
          "copy2d + zero2d: %d rows, columns %d..%d of %d -> %d.. of %d, %d channels", rows, x_src,
          x_src + cols, w_src, x_dst, w_dst, c);
    gpu->v->release(gpu, ds);
    gpu->v->release(gpu, dd);
    free(s), free(d), free(s_back), free(want), free(got);
}

static void test_errors(void) {
    vae_backend *be = NULL;
    int rc = vae_cuda_backend_create(&be, VAE_DTYPE_F32, 999, NULL, NULL);
    check(rc == VAE_EDEVICE && !be, "device 999 -> VAE_EDEVICE (%s)", vae_last_error());
    rc = vae_cuda_backend_create(&be, (vae_dtype)7, 0, NULL, NULL);
    check(rc == VAE_EUNSUPPORTED && !be, "dtype 7 -> VAE_EUNSUPPORTED");
    float w[8 * 8 * 9] = {0};
    vae_op op = vae_op_make(VAE_OP_CONV, 0, 8, 8);
    op.kh = op.kw = 3, op.pad_h[0] = op.pad_h[1] = op.pad_w[0] = op.pad_w[1] = 1, op.w = w;
    snprintf(op.name, sizeof op.name, "test.errors.conv");
    void *x = gpu->v->alloc(gpu, 8 * 4 * 4 * gpu->elem_size), *y = gpu->v->alloc(gpu, 8 * 4 * 4 * gpu->elem_size);
    const void *frames[1] = {x};
    rc = gpu->v->conv(gpu, &op, NULL, frames, 1, 4, 4, NULL, y, 1, 4, 4);
    check(rc == VAE_EINVAL, "conv without prepare -> VAE_EINVAL (%s)", vae_last_error());
    void *state = NULL;
    rc = gpu->v->prepare(gpu, &op, &state);
    if (rc == VAE_OK) rc = gpu->v->conv(gpu, &op, state, frames, 1, 4, 4, NULL, y, 1, 5, 4);
    check(rc == VAE_ESHAPE, "conv with a wrong output size -> VAE_ESHAPE (%s)", vae_last_error());
    gpu->v->unprepare(gpu, &op, state);
    vae_op bad = vae_op_make(VAE_OP_SHUFFLE_DOWN, 0, 4, 8);
    bad.ft = 1, bad.fs = 2, bad.cs_o = 1, bad.cs_t = 0, bad.cs_h = 1, bad.cs_w = 1, bad.group = 2;
    snprintf(bad.name, sizeof bad.name, "test.errors.shuffle");
    state = NULL;
    rc = gpu->v->prepare(gpu, &bad, &state);
    check(rc == VAE_EINVAL, "shuffle with colliding strides -> VAE_EINVAL (%s)", vae_last_error());
    gpu->v->release(gpu, x);
    gpu->v->release(gpu, y);
    check(gpu->v->sync(gpu) == VAE_OK, "device healthy after the error paths");
}

/* ---- timings (GPU only; informative) -------------------------------------------------------- */
/* groups: op.groups (> 1: depthwise, op.h) */
static void bench_conv_groups(const char *label, int groups, int c_in, int c_out, int kt, int kh,
                              int h, int w, int t_out, int contig) {
    int n_in = t_out + kt - 1, K = c_in / (groups > 1 ? groups : 1) * kt * kh * kh;
    size_t fsz = (size_t)h * w * c_in, ysz = (size_t)t_out * h * w * c_out;
    float *wt = rand_buf((size_t)c_out * K, 1.0f / sqrtf((float)K), 0.0f);
    float *b = rand_buf(c_out, 0.1f, 0.0f);
    vae_op op = vae_op_make(VAE_OP_CONV, 0, c_in, c_out);
    op.kt = kt, op.kh = op.kw = kh, op.pad_h[0] = op.pad_h[1] = op.pad_w[0] = op.pad_w[1] = kh / 2;
    op.w = wt, op.b = b;
    op.groups = groups;
    snprintf(op.name, sizeof op.name, "bench.%s", label);
    void *state = NULL;
    int rc = gpu->v->prepare(gpu, &op, &state);
    /* contig: one buffer of n_in frames (the executor's contiguous window); else cache + chunk */
    void *cache = gpu->v->alloc(gpu, (size_t)(kt - 1 > 0 ? kt - 1 : 1) * fsz * gpu->elem_size);
    void *chunk = gpu->v->alloc(gpu, (size_t)(contig ? n_in : t_out) * fsz * gpu->elem_size);
    void *y = gpu->v->alloc(gpu, ysz * gpu->elem_size);
    if (!rc && (!cache || !chunk || !y)) rc = VAE_ENOMEM;
    const void *frames[64];
    for (int i = 0; i < n_in; i++)
        frames[i] = contig ? (const char *)chunk + (size_t)i * fsz * gpu->elem_size
                    : i < kt - 1 ? (const char *)cache + (size_t)i * fsz * gpu->elem_size
                                 : (const char *)chunk + (size_t)(i - kt + 1) * fsz * gpu->elem_size;
    if (!rc) { /* random data, not zeros */
        size_t nz = (size_t)(contig ? n_in : t_out) * fsz;
        float *hx = rand_buf(nz, 1.0f, 0.0f);
        rc = gpu->v->upload(gpu, chunk, hx, nz);
        free(hx);
    }
    if (!rc) rc = gpu->v->conv(gpu, &op, state, frames, n_in, h, w, NULL, y, t_out, h, w); /* warm-up */
    if (!rc) rc = gpu->v->sync(gpu);
    int reps = 5;
    double t0 = now();
    for (int r = 0; r < reps && !rc; r++)
        rc = gpu->v->conv(gpu, &op, state, frames, n_in, h, w, NULL, y, t_out, h, w);
    if (!rc) rc = gpu->v->sync(gpu);
    double dt = (now() - t0) / reps;
    double flop = 2.0 * ysz * K;
    if (rc) printf("TIME [%s] conv %s: failed: %s\n", variant, label, vae_last_error());
    else
        printf("TIME [%s] conv %-28s %3d->%-3d k%dx%dx%d %dx%d x%d %-6s: %8.3f ms  %7.1f TFLOP/s\n",
               variant, label, c_in, c_out, kt, kh, kh, h, w, t_out, contig ? "window" : "cache",
               dt * 1e3, flop / dt * 1e-12);
    gpu->v->release(gpu, cache);
    gpu->v->release(gpu, chunk);
    gpu->v->release(gpu, y);
    gpu->v->unprepare(gpu, &op, state);
    free(wt);
    free(b);
}

static void bench_conv(const char *label, int c_in, int c_out, int kt, int kh, int h, int w,
                       int t_out, int contig) {
    bench_conv_groups(label, 0, c_in, c_out, kt, kh, h, w, t_out, contig);
}

/* nearest x2 + 3x3 conv (op.up = 2) on small frames h x w; FLOPs counted on the upsampled size */
static void bench_conv_up(const char *label, int c_in, int c_out, int h, int w, int t) {
    const int K = c_in * 9;
    const size_t fsz = (size_t)h * w * c_in, ysz = (size_t)t * 4 * h * w * c_out;
    float *wt = rand_buf((size_t)c_out * K, 1.0f / sqrtf((float)K), 0.0f);
    float *b = rand_buf(c_out, 0.1f, 0.0f);
    vae_op op = vae_op_make(VAE_OP_CONV, 0, c_in, c_out);
    op.kh = op.kw = 3, op.pad_h[0] = op.pad_h[1] = op.pad_w[0] = op.pad_w[1] = 1, op.up = 2;
    op.w = wt, op.b = b;
    snprintf(op.name, sizeof op.name, "bench.%s", label);
    void *state = NULL;
    int rc = gpu->v->prepare(gpu, &op, &state);
    float *hx = rand_buf(fsz * t, 1.0f, 0.0f);
    void *x = dev_from(gpu, hx, fsz * t), *y = gpu->v->alloc(gpu, ysz * gpu->elem_size);
    free(hx);
    const void *frames[16];
    for (int f = 0; f < t; f++) frames[f] = (const char *)x + (size_t)f * fsz * gpu->elem_size;
    if (!rc) rc = gpu->v->conv(gpu, &op, state, frames, t, h, w, NULL, y, t, 2 * h, 2 * w);
    if (!rc) rc = gpu->v->sync(gpu);
    int reps = 5;
    double t0 = now();
    for (int r = 0; r < reps && !rc; r++)
        rc = gpu->v->conv(gpu, &op, state, frames, t, h, w, NULL, y, t, 2 * h, 2 * w);
    if (!rc) rc = gpu->v->sync(gpu);
    double dt = (now() - t0) / reps, flop = 2.0 * ysz * K;
    if (rc) printf("TIME [%s] conv %s: failed: %s\n", variant, label, vae_last_error());
    else
        printf("TIME [%s] conv %-28s %3d->%-3d up2+3x3 %dx%d x%d: %8.3f ms  %7.1f nominal TFLOP/s\n",
               variant, label, c_in, c_out, h, w, t, dt * 1e3, flop / dt * 1e-12);
    gpu->v->release(gpu, x);
    gpu->v->release(gpu, y);
    gpu->v->unprepare(gpu, &op, state);
    free(wt);
    free(b);
}

/* bandwidth of a norm: bytes read + written once */
static void bench_norm(vae_op_kind kind, int c, int groups, int t, int h, int w) {
    size_t n = (size_t)t * h * w * c;
    float *g = rand_buf(c, 0.5f, 1.0f), *b = rand_buf(c, 0.5f, 0.0f);
    vae_op op = vae_op_make(kind, 0, c, c);
    op.act = VAE_ACT_SILU, op.groups = groups, op.eps = 1e-6f, op.w = g;
    op.b = kind == VAE_OP_GROUP_NORM ? b : NULL;
    snprintf(op.name, sizeof op.name, "bench.norm");
    void *state = NULL;
    int rc = gpu->v->prepare(gpu, &op, &state);
    float *hx = rand_buf(n, 1.0f, 0.1f);
    void *x = dev_from(gpu, hx, n), *y = gpu->v->alloc(gpu, n * gpu->elem_size);
    free(hx);
    if (!rc) rc = gpu->v->norm(gpu, &op, state, x, y, t, h, w);
    if (!rc) rc = gpu->v->sync(gpu);
    int reps = 10;
    double t0 = now();
    for (int r = 0; r < reps && !rc; r++) rc = gpu->v->norm(gpu, &op, state, x, y, t, h, w);
    if (!rc) rc = gpu->v->sync(gpu);
    double dt = (now() - t0) / reps;
    if (rc) printf("TIME [%s] %s: failed: %s\n", variant, kind == VAE_OP_RMS_NORM ? "rms" : "gn", vae_last_error());
    else
        printf("TIME [%s] %-10s c=%-4d %dx%d x%d: %8.3f ms  %6.0f GB/s (read+write once)\n", variant,
               kind == VAE_OP_RMS_NORM ? "rms+silu" : "gn+silu", c, h, w, t, dt * 1e3,
               2.0 * n * gpu->elem_size / dt * 1e-9);
    gpu->v->release(gpu, x);
    gpu->v->release(gpu, y);
    gpu->v->unprepare(gpu, &op, state);
    free(g);
    free(b);
}

static void bench_shuffle(const shuf_case *sc) {
    int t_out = sc->kind == VAE_OP_SHUFFLE_UP ? sc->n_in * sc->ft : sc->n_in;
    size_t nx = (size_t)sc->n_in * sc->h * sc->w * sc->c_in;
    size_t ny = (size_t)t_out * sc->h * sc->fs * sc->w * sc->fs * sc->c_out;
    vae_op op = vae_op_make(sc->kind, 0, sc->c_in, sc->c_out);
    op.ft = sc->ft, op.fs = sc->fs, op.cs_o = sc->cs_o, op.cs_t = sc->cs_t, op.cs_h = sc->cs_h;
    op.cs_w = sc->cs_w, op.group = sc->group, op.kt = op.st = sc->ft;
    snprintf(op.name, sizeof op.name, "bench.%s", sc->name);
    void *state = NULL;
    int rc = gpu->v->prepare(gpu, &op, &state);
    float *hx = rand_buf(nx, 1.0f, 0.0f);
    void *x = dev_from(gpu, hx, nx), *y = gpu->v->alloc(gpu, ny * gpu->elem_size);
    free(hx);
    const void *frames[1] = {x};
    if (!rc) rc = gpu->v->resample(gpu, &op, frames, sc->n_in, sc->h, sc->w, y, t_out);
    if (!rc) rc = gpu->v->sync(gpu);
    int reps = 10;
    double t0 = now();
    for (int r = 0; r < reps && !rc; r++) rc = gpu->v->resample(gpu, &op, frames, sc->n_in, sc->h, sc->w, y, t_out);
    if (!rc) rc = gpu->v->sync(gpu);
    double dt = (now() - t0) / reps;
    if (rc) printf("TIME [%s] %s: failed: %s\n", variant, sc->name, vae_last_error());
    else
        printf("TIME [%s] %-16s %d->%d %dx%d x%d: %8.3f ms  %6.0f GB/s (read+write once)\n", variant,
               sc->name, sc->c_in, sc->c_out, sc->h, sc->w, sc->n_in, dt * 1e3,
               (double)(nx + ny) * gpu->elem_size / dt * 1e-9);
    gpu->v->release(gpu, x);
    gpu->v->release(gpu, y);
    gpu->v->unprepare(gpu, &op, state);
}

/* the queries of `share` ranks' first band of rows (1: all; exec_reduce.c) */
static void bench_attention(int c, int h, int w, int t, int share) {
    int n = h * w, q1 = h / share * w;
    size_t nx = (size_t)t * n * 3 * c, ny = (size_t)t * n * c;
    vae_op op = vae_op_make(VAE_OP_ATTENTION, 0, 3 * c, c);
    op.scale = (float)(1.0 / sqrt((double)c));
    snprintf(op.name, sizeof op.name, "bench.attention");
    void *x = gpu->v->alloc(gpu, nx * gpu->elem_size), *y = gpu->v->alloc(gpu, ny * gpu->elem_size);
    int rc = x && y ? gpu->v->zero(gpu, x, nx * gpu->elem_size) : VAE_ENOMEM;
    if (!rc) rc = gpu->v->attention(gpu, &op, NULL, x, y, t, h, w, 0, q1);
    if (!rc) rc = gpu->v->sync(gpu);
    int reps = 3;
    double t0 = now();
    for (int r = 0; r < reps && !rc; r++)
        rc = gpu->v->attention(gpu, &op, NULL, x, y, t, h, w, 0, q1);
    if (!rc) rc = gpu->v->sync(gpu);
    double dt = (now() - t0) / reps, flop = 4.0 * t * (double)q1 * n * c;
    if (rc) printf("TIME [%s] attention: failed: %s\n", variant, vae_last_error());
    else
        printf("TIME [%s] attention c=%d %dx%d (N=%d) x%d, queries [0, %d): %8.3f ms  %7.1f "
               "TFLOP/s\n",
               variant, c, h, w, n, t, q1, dt * 1e3, flop / dt * 1e-12);
    gpu->v->release(gpu, x);
    gpu->v->release(gpu, y);
}

/* ---- variants ------------------------------------------------------------------------------- */
enum {
    V_CONV = 1,
    V_NORM = 2,
    V_ELT = 4,
    V_RES = 8,
    V_ATT = 16,
    V_BUF = 32,
    V_ALL = 63,
    V_FP8 = 64
};
typedef struct variant_def {
    const char *label;
    vae_dtype dtype;
    const char *conv_env, *scratch_env;
    int what;
    int profile;       /* VAE_CUDA_PROFILE=1 (GPU time per op category, logged at destroy) */
    const char *extra; /* "NAME=VALUE[ NAME=VALUE]" set while the backend is created, or NULL */
} variant_def;

static int make_gpu(const variant_def *v) {
    if (v->conv_env) setenv("VAE_CUDA_CONV", v->conv_env, 1);
    else unsetenv("VAE_CUDA_CONV");
    if (v->scratch_env) setenv("VAE_CUDA_SCRATCH_MB", v->scratch_env, 1);
    else unsetenv("VAE_CUDA_SCRATCH_MB");
    if (v->profile) setenv("VAE_CUDA_PROFILE", "1", 1);
    else unsetenv("VAE_CUDA_PROFILE");
    char names[2][64] = {"", ""}; /* the extra settings, up to two */
    const char *e = v->extra;
    for (int k = 0; e && *e && k < 2; k++) {
        const char *eq = strchr(e, '='), *end = strchr(e, ' ');
        if (!end) end = e + strlen(e);
        char value[64];
        snprintf(names[k], sizeof names[k], "%.*s", (int)(eq - e), e);
        snprintf(value, sizeof value, "%.*s", (int)(end - eq - 1), eq + 1);
        setenv(names[k], value, 1);
        e = *end ? end + 1 : end;
    }
    gpu = NULL;
    vae_settings set; /* the variables just set, read the way a session reads them */
    vae_session_options so;
    vae_session_options_default(&so);
    vae_settings_default(&set);
    int rc = vae_settings_resolve(&set, &so);
    if (rc == VAE_OK) rc = vae_cuda_backend_create(&gpu, v->dtype, 0, &set, NULL);
    for (int k = 0; k < 2; k++)
        if (names[k][0]) unsetenv(names[k]);
    unsetenv("VAE_CUDA_CONV");
    unsetenv("VAE_CUDA_SCRATCH_MB");
    unsetenv("VAE_CUDA_PROFILE");
    return rc;
}

static void describe(void) {
    char buf[2048];
    if (vae_cuda_backend_describe) printf("INFO [%s] %s\n", variant, vae_cuda_backend_describe(gpu, buf, sizeof buf));
}

/* A variant that forces the implicit-GEMM kernels ran some convs through them (where this build
 * has them and the device runs them: the backend's description says). */
static void check_igemm_ran(const char *what) {
    const long n = described_count(what);
    if (n < 0) {
        printf("INFO [%s] no implicit-GEMM kernels (not built, or not an sm_90 device)\n", variant);
        return;
    }
    check(n > 0, "convs through the implicit-GEMM kernels (%s): %ld", what, n);
}

/* The E4M3 table (core/fp8_shapes.h) swapped as test_fp8_shapes.c swaps it for core and the
 * CPU: the halo-tile kernel's row dropped, the GEMM's c_in multiple raised to 128, the mma.sync
 * row's to 64. The backend's dispatch (fp8_conv, the kernel a session keeps in op->fp8_kernel)
 * and its kernels' E4M3 takes follow: 128 -> 128, 192 -> 192, 96 -> 96 and 96 -> 192 (never),
 * 3x3x3 with padding 1, on the sm_90a kernels (GEMM, halo-tile where VAE_CUDA_HALO leaves it on)
 * or the mma.sync one. */
static void test_fp8_table(void) {
    enum { T_BUILTIN, T_NO_HALO, T_GEMM_128, T_MMA_64, T_N };
    static const int ch[4][2] = {{128, 128}, {192, 192}, {96, 96}, {96, 192}};
    enum { G = VAE_FP8_GEMM, H = VAE_FP8_HALO, M = VAE_FP8_MMA, N = VAE_FP8_NONE };
    static const int want_sm90[T_N][4] = {{G, G, H, N}, {G, G, N, N}, {G, N, H, N}, {G, G, H, N}};
    static const int want_mma[T_N][4] = {{M, M, M, N}, {M, M, N, N}, {M, N, M, N}, {M, M, N, N}};
    static vae_fp8_shape rows[T_N][8];
    int n = 0, n_rows[T_N] = {0};
    const vae_fp8_shape *builtin = vae_fp8_shapes(&n);
    for (int i = 0; i < n && i < 8; i++)
        for (int t = 1; t < T_N; t++) {
            vae_fp8_shape r = builtin[i];
            if (t == T_NO_HALO && r.kernel == VAE_FP8_HALO) continue;
            if (t == T_GEMM_128 && r.kernel == VAE_FP8_GEMM) r.c_in_multiple = 128;
            if (t == T_MMA_64 && r.kernel == VAE_FP8_MMA) r.c_in_multiple = 64;
            rows[t][n_rows[t]++] = r;
        }
    vae_op op = vae_op_make(VAE_OP_CONV, 0, 128, 128);
    op.kt = op.kh = op.kw = 3;
    op.pad_h[0] = op.pad_h[1] = op.pad_w[0] = op.pad_w[1] = 1;
    const int mma = gpu->v->fp8_conv(gpu, &op) == VAE_FP8_MMA, built = cuk_igemm_built();
    op.c_in = op.c_out = 96;
    const int halo = mma || gpu->v->fp8_conv(gpu, &op) == VAE_FP8_HALO;
    for (int t = 0; t < T_N; t++) {
        vae_fp8_shapes_swap(t == T_BUILTIN ? NULL : rows[t], n_rows[t]);
        for (int c = 0; c < 4; c++) {
            op.c_in = ch[c][0], op.c_out = ch[c][1];
            const int got = gpu->v->fp8_conv(gpu, &op);
            int want = mma ? want_mma[t][c] : want_sm90[t][c];
            if (want == H && !halo) want = N; /* VAE_CUDA_HALO=off */
            check(got == want, "fp8 table %d: %d -> %d runs on E4M3 kernel %d, expected %d", t,
                  ch[c][0], ch[c][1], got, want);
        }
        /* the kernels' own E4M3 takes: each reads its row */
        const int gemm = cuk_igemm8_takes(3, 3, 3, 1, 1, 192, 192),
                  halo8 = cuk_halo8_takes(3, 3, 3, 1, 1, 96, 96),
                  mma8 = cuk_mma_takes(VAE_DTYPE_FP8, 3, 3, 3, 1, 1, 96, 96);
        check(gemm == (built && t != T_GEMM_128) && halo8 == (built && t != T_NO_HALO) &&
                  mma8 == (t != T_MMA_64),
              "fp8 table %d: the kernels take 192 -> 192 (GEMM) %d, 96 -> 96 (halo-tile) %d, "
              "96 -> 96 (mma.sync) %d",
              t, gemm, halo8, mma8);
    }
    vae_fp8_shapes_swap(NULL, 0);
}

static void run_variant(const variant_def *v) {
    variant = v->label;
    tol = v->dtype == VAE_DTYPE_F32 ? 1e-5 : 2e-2;
    staged = v->extra && !strcmp(v->extra, "VAE_CUDA_WARM=2");
    int rc = make_gpu(v);
    if (rc == VAE_EUNSUPPORTED && v->dtype == VAE_DTYPE_FP8) { /* sm_89+ GPUs with E4M3 kernels */
        printf("INFO [%s] skipped: %s\n", variant, vae_last_error());
        return;
    }
    check(rc == VAE_OK, "create the CUDA backend (%s)", rc ? vae_last_error() : "ok");
    if (rc) return;
    ref = v->dtype == VAE_DTYPE_FP8 ? cpu8 : cpu;
    double t0 = now();
    int f32 = v->dtype == VAE_DTYPE_F32;
    if (v->what & V_BUF) {
        test_buffers();
        test_transfers(3, 5, 7, 3);
        test_transfers(2, 9, 4, 16);
        test_transfers(1, 6, 6, 48);
        test_copy2d(2 * 44, 166, 168, 256, 2, 1, 164); /* a strip rebuilt: 16-byte vectors */
        test_copy2d(3 * 20, 166, 2, 256, 162, 0, 2);   /* its slot of two columns */
        test_copy2d(37, 9, 12, 3, 1, 4, 7);            /* 3 channels: 2- or 4-byte vectors */
        test_copy2d(5, 7, 7, 1, 0, 0, 7);              /* whole rows of one channel */
        test_bus_slots();
    }
    if (v->what & V_FP8) /* the convs the FP8 kernels take, against the CPU's emulation */
        for (size_t i = 0; i < sizeof convs / sizeof *convs; i++)
            if (strstr(convs[i].name, "_ig_") || strstr(convs[i].name, "_halo_"))
                test_conv(&convs[i]);
    if ((v->what & V_FP8) && !fp8_stored) test_fp8_table();
    if ((v->what & V_FP8) && !v->extra) { /* E4M3 codes from their producers (sm_90a kernels) */
        test_fp8_codes(96, 96, 19, 37);   /* the halo-tile kernel, partial tiles */
        test_fp8_codes(192, 96, 16, 16);  /* two channel blocks */
        test_fp8_codes(128, 128, 9, 21);  /* CUTLASS's */
        test_fp8_codes(384, 384, 6, 10);
        test_fp8_codes_conv(64, 128, 7, 9, 0);
        test_fp8_codes_conv(128, 384, 5, 6, 1);
        test_fp8_codes_conv(96, 96, 19, 37, 0); /* the halo-tile kernel's epilogue (tuned) */
        test_fp8_codes_conv(96, 96, 17, 20, 1); /* its E4M3 form */
        test_fp8_codes_conv(192, 96, 9, 18, 1);
    }
    if (v->what & V_CONV) {
        for (size_t i = 0; i < sizeof convs / sizeof *convs; i++) test_conv(&convs[i]);
        test_conv_acts();
        for (size_t i = 0; i < sizeof depthwise / sizeof *depthwise; i++)
            test_conv_groups(&depthwise[i], depthwise[i].c_in,
                             i % 2 && !depthwise[i].norm ? VAE_ACT_RELU : VAE_ACT_NONE);
        test_conv_up(16, 8, 3, 2, 5, 7, 1, 0);   /* phase path */
        test_conv_up(32, 16, 3, 3, 6, 4, 1, 1);  /* + residual (Wan2.2) */
        test_conv_up(64, 32, 3, 1, 9, 10, 0, 1); /* no bias */
        test_conv_up(24, 24, 3, 2, 8, 8, 1, 2);  /* residual == y: upsample first */
        test_conv_up(8, 3, 3, 2, 4, 5, 1, 0);    /* narrow output: upsample first */
        test_conv_up(16, 16, 1, 2, 3, 4, 1, 0);  /* 1x1: upsample first */
        test_conv_up(12, 20, 3, 17, 3, 2, 1, 1); /* many frames, odd channels */
        test_conv_up(64, 96, 3, 2, 6, 9, 1, 0);  /* phases on the implicit-GEMM kernels */
        test_conv_up(32, 128, 3, 3, 5, 4, 1, 1); /* the same, + residual */
        /* 96 filters: the halo-tile kernel's phase mode (partial tiles, two channel blocks) */
        test_conv_up(192, 96, 3, 3, 17, 35, 1, 0);
        test_conv_up(96, 96, 3, 2, 16, 16, 0, 1); /* one whole tile, + residual, no bias */
        /* activations folded into them: the phase path's interleave (TAEHV's 64->64 + ReLU),
         * the halo tile's and upsample-first paths' pass after the conv */
        test_conv_up_act(64, 64, 3, 2, 6, 9, 1, 0, VAE_ACT_RELU);
        test_conv_up_act(32, 16, 3, 3, 6, 4, 1, 1, VAE_ACT_SILU);
        test_conv_up_act(96, 96, 3, 2, 16, 16, 0, 1, VAE_ACT_RELU);
        test_conv_up_act(24, 24, 3, 2, 8, 8, 1, 2, VAE_ACT_RELU);
    }
    if (v->what & V_NORM) {
        static const vae_act acts[] = {VAE_ACT_NONE, VAE_ACT_SILU, VAE_ACT_RELU, VAE_ACT_TANH_SCALE};
        for (int a = 0; a < 4; a++) {
            test_norm(VAE_OP_RMS_NORM, 96, 1, acts[a], 2, 5, 7, 0.0f, 1, 0, a == 1);
            test_norm(VAE_OP_GROUP_NORM, 128, 32, acts[a], 2, 9, 11, 0.5f, 1, 1, a == 2);
        }
        test_norm(VAE_OP_RMS_NORM, 16, 1, VAE_ACT_NONE, 1, 4, 4, 0.0f, 1, 0, 0);
        test_norm(VAE_OP_RMS_NORM, 13, 1, VAE_ACT_SILU, 2, 3, 5, 0.0f, 1, 1, 0);
        test_norm(VAE_OP_RMS_NORM, 384, 1, VAE_ACT_SILU, 1, 12, 13, 0.0f, 1, 0, 0);
        test_norm(VAE_OP_RMS_NORM, 1024, 1, VAE_ACT_SILU, 1, 6, 5, 0.0f, 1, 0, 0);
        test_norm(VAE_OP_RMS_NORM, 8, 1, VAE_ACT_NONE, 1, 4, 4, 0.0f, 0, 0, 0); /* no gamma */
        test_norm_rows(256, VAE_ACT_SILU, 2, 5, 11); /* the vector kernels */
        test_norm_rows(2048, VAE_ACT_SILU, 1, 3, 9);
        test_norm_rows(13, VAE_ACT_NONE, 2, 3, 6); /* the scalar one */
        test_norm(VAE_OP_GROUP_NORM, 512, 32, VAE_ACT_SILU, 3, 16, 24, 0.0f, 1, 1, 0);
        test_norm(VAE_OP_GROUP_NORM, 256, 4, VAE_ACT_RELU, 1, 20, 18, 0.0f, 1, 1, 0); /* taesd */
        test_norm(VAE_OP_GROUP_NORM, 20, 1, VAE_ACT_SILU, 2, 6, 5, 0.0f, 1, 1, 0);
        test_norm(VAE_OP_GROUP_NORM, 12, 4, VAE_ACT_NONE, 1, 5, 5, 0.0f, 0, 0, 0); /* no affine */
        test_norm(VAE_OP_GROUP_NORM, 64, 32, VAE_ACT_NONE, 1, 64, 80, f32 ? 20.0f : 1.0f, 1, 1, 0);
        /* model widths: Wan RMS (gamma only), SeedVR2 GroupNorm (32 groups), many pixel blocks */
        test_norm(VAE_OP_RMS_NORM, 96, 1, VAE_ACT_SILU, 4, 12, 10, 0.0f, 1, 0, 0);
        test_norm(VAE_OP_RMS_NORM, 160, 1, VAE_ACT_SILU, 2, 9, 7, 0.0f, 1, 0, 0);
        test_norm(VAE_OP_RMS_NORM, 192, 1, VAE_ACT_SILU, 3, 8, 9, 0.5f, 1, 0, 1);
        test_norm(VAE_OP_RMS_NORM, 48, 1, VAE_ACT_NONE, 2, 5, 5, 0.0f, 1, 1, 0);
        test_norm(VAE_OP_GROUP_NORM, 128, 32, VAE_ACT_SILU, 2, 48, 40, 0.0f, 1, 1, 0);
        test_norm(VAE_OP_GROUP_NORM, 512, 32, VAE_ACT_SILU, 1, 40, 36, f32 ? 30.0f : 2.0f, 1, 1, 1);
        test_norm(VAE_OP_GROUP_NORM, 96, 32, VAE_ACT_SILU, 2, 30, 20, 0.0f, 1, 1, 0);
        test_norm(VAE_OP_GROUP_NORM, 256, 32, VAE_ACT_NONE, 3, 3, 2, 0.0f, 1, 1, 0);
        test_norm(VAE_OP_GROUP_NORM, 256, 8, VAE_ACT_SILU, 1, 120, 100, 0.0f, 1, 1, 0);
        /* split into the row bands of a device group (SeedVR2's widths; a band of no rows) */
        test_norm_bands(128, 32, VAE_ACT_SILU, 2, 48, 40, 2, 0.0f);
        test_norm_bands(512, 32, VAE_ACT_SILU, 1, 40, 36, 3, f32 ? 30.0f : 2.0f);
        test_norm_bands(256, 32, VAE_ACT_NONE, 3, 9, 7, 4, 0.5f);
        test_norm_bands(64, 32, VAE_ACT_SILU, 1, 2, 33, 3, 0.0f);
    }
    if (v->what & V_ELT) {
        static const vae_act acts[] = {VAE_ACT_NONE, VAE_ACT_SILU, VAE_ACT_RELU, VAE_ACT_TANH_SCALE};
        for (int a = 0; a < 4; a++) {
            test_eltwise(VAE_OP_ACT, acts[a], 7, 1001, 0);
            test_eltwise(VAE_OP_ADD, acts[a], 13, 777, a == 1);
            test_eltwise(VAE_OP_SCALE_SHIFT, acts[a], 16, 300, a == 3);
        }
        test_eltwise(VAE_OP_ADD, VAE_ACT_NONE, 96, 12345, 0);
        test_eltwise(VAE_OP_ACT, VAE_ACT_CLAMP01, 7, 1001, 0); /* TAEHV's output */
    }
    if (v->what & V_RES)
        for (size_t i = 0; i < sizeof resamples / sizeof *resamples; i++)
            test_resample(&resamples[i]);
    if (v->what & V_ATT) {
        test_attention(8, 1, 5, 7, 1.0f);
        test_attention(20, 2, 17, 19, 2.0f);
        test_attention(64, 3, 12, 16, 2.0f);
        test_attention(384, 1, 24, 30, 1.0f);   /* Wan middle block width, N = 720 */
        test_attention(512, 2, 16, 16, 1.0f);   /* SeedVR2 */
        test_attention(1024, 1, 8, 12, 1.0f);   /* head dim 1024 */
        /* edges of the fused kernels (tensor cores: 64 queries x 64 keys x 64-channel chunks,
         * block columns of <= 512 output channels; fp32: 32 x 64 x 32, columns of 256 / 512) */
        test_attention(1024, 1, 10, 13, 1.0f); /* 2 block columns, key tail (N = 130) */
        test_attention(64, 1, 7, 9, 1.0f);     /* N = 63 < one tile */
        test_attention(64, 2, 1, 1, 1.0f);     /* N = 1 */
        test_attention(384, 3, 3, 5, 2.0f);    /* N = 15, t > 1, halves of 192 */
        test_attention(48, 3, 7, 9, 2.0f);     /* a channel half wider than c */
        test_attention(96, 2, 33, 17, 1.0f);   /* N = 561 */
        test_attention(200, 1, 9, 11, 1.0f);   /* c % 16 == 8: a half-empty k16 step */
        test_attention(320, 1, 11, 7, 1.0f);   /* halves of 192, the upper one partial */
        test_attention(600, 1, 6, 7, 1.0f);    /* fp32: 2 columns of 512 */
        /* >= 1024 tokens in 16-bit: cuBLAS scores + softmax rows + P V (VAE_CUDA_ATT) */
        test_attention(512, 1, 25, 44, 1.0f);  /* N = 1100: one block, N % 64 != 0 */
        test_attention(64, 2, 64, 100, 1.0f);  /* N = 6400: two blocks of query rows, t > 1 */
        /* a band's share of the queries (exec_reduce.c): GEMM blocks from q0, a partial last
         * one; the fused kernels (every query) */
        test_attention_range(64, 2, 64, 100, 1.0f, 1700, 6100);
        test_attention_range(512, 1, 25, 44, 1.0f, 44 * 12, 44 * 25);
        test_attention_range(64, 2, 33, 17, 2.0f, 17 * 11, 17 * 22);
        test_attention(64, 2, 33, 17, 4.0f);   /* large scores: the online softmax rescales */
        test_attention(13, 2, 19, 17, 4.0f);   /* odd c: the FMA kernel in every dtype */
        /* 16-bit: 8 warps, two per 16 rows (channel halves of 2 DVW <= 512 per block column) */
        test_attention(512, 2, 9, 15, 2.0f);   /* N = 135: one column, two frames, key tail */
        test_attention(128, 1, 1, 127, 2.0f);  /* N = 127 */
        test_attention(256, 1, 3, 43, 1.0f);   /* N = 129: a 1-row last tile */
        test_attention(192, 1, 8, 25, 2.0f);   /* N = 200, DVW = 128: the upper half partial */
        test_attention(72, 1, 9, 10, 3.0f);    /* DVW = 64, k16 steps of one half empty */
        test_attention(520, 1, 12, 16, 1.0f);  /* 2 columns of 2 x 192, the last mostly empty */
        test_attention(768, 2, 5, 13, 1.0f);   /* 2 columns of 2 x 192 */
    }
    printf("TIME [%s] tests took %.2f s\n", variant, now() - t0);
    describe();
    char d[2048]; /* the implicit-GEMM kernels are the mma.sync ones (VAE_CUDA_MMA=1, or no
                   * sm_90a kernels on this GPU) */
    const int mma = strstr(vae_cuda_backend_describe(gpu, d, sizeof d), ", mma.sync)") != NULL;
    if (v->extra && strstr(v->extra, "VAE_CUDA_IGEMM=always")) {
        check_igemm_ran(" implicit GEMM (always");
        if (mma) check_igemm_ran(" mma.sync 16-bit"); /* not CUTLASS's */
    }
    if (v->extra && !strcmp(v->extra, "VAE_CUDA_HALO=always")) {
        check_igemm_ran(" halo tile");
        check_igemm_ran(" halo normed"); /* the norm in the kernel's epilogue */
        check_igemm_ran(" halo up2");    /* the upsampling convs' phase mode */
    }
    if (v->dtype == VAE_DTYPE_FP8) {
        check_igemm_ran(" fp8,");
        if (mma) /* the mma.sync kernel in place of the sm_90a ones */
            check_igemm_ran(" fp8 mma.sync");
        else
            check_igemm_ran(" fp8 halo tile"); /* the 96-filter 3x3x3 convs' E4M3 kernel */
    }
    if ((v->what & V_CONV) && v->dtype != VAE_DTYPE_F32 &&
        !(v->extra && strstr(v->extra, "NARROW=0")))
        check(described_count(" stem,") > 0, "convs through the stem kernel: %ld",
              described_count(" stem,"));
    if (staged) {
        const long n = described_count(" uploads from the stage");
        check(n > 0, "first uses that copied their parameters from the stage: %ld", n);
    }
    gpu->v->destroy(gpu);
    gpu = NULL;
}

/* ---- the warm-up from the tune cache ------------------------------------------------------- */
/* A backend keeps the cuDNN plans and the attention's GEMM blocks its calls used in the tune cache
 * (a file of this test's own); a second backend on the file makes them at its warm-up (backend.h
 * warm, cuda_warm), so that its calls make no plan, and their results still match the CPU's. */
static void test_warm_seen(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/vae-test-warm-%d.txt", (int)getpid());
    unlink(path);
    setenv("VAE_TUNE_CACHE", path, 1);
    /* a strided conv (cuDNN's per frame, fused bias) and 1600 tokens of attention (cuBLAS) */
    const conv_case conv = {"warm", 64, 64, 1, 3,  3,  1, 2, 2,       1,
                            1,      1,  1,  2, 20, 24, 1, 0, L_CHUNK, 0};
    for (int k = 0; k < 2; k++) {
        const variant_def v = {k ? "bf16/warm-seen" : "bf16/seen",
                               VAE_DTYPE_BF16,
                               NULL,
                               NULL,
                               V_CONV,
                               0,
                               "VAE_CUDA_WARM=1"};
        variant = v.label;
        ref = cpu, tol = 2e-2, staged = 0, fp8_stored = 0;
        if (make_gpu(&v) != VAE_OK) {
            check(0, "creating the backend: %s", vae_last_error());
            break;
        }
        if (k == 1) { /* a program naming the conv and of the attention's width, warmed */
            vae_program p;
            vae_program_init(&p, 64);
            vae_op c = vae_op_make(VAE_OP_CONV, 0, 64, 64),
                   a = vae_op_make(VAE_OP_ATTENTION, 0, 192, 64);
            c.kh = c.kw = 3, c.sh = c.sw = 2;
            snprintf(c.name, sizeof c.name, "test.conv.warm");
            snprintf(a.name, sizeof a.name, "test.attention");
            vae_program_add(&p, &c);
            vae_program_add(&p, &a);
            const int rc = gpu->v->warm(gpu, &p);
            vae_program_free(&p);
            check(rc == VAE_OK && described_count(" made by the warm-up") > 0,
                  "the warm-up made the plans the tune cache holds: rc %d, %ld made", rc,
                  described_count(" made by the warm-up"));
        }
        const long plans = described_count(" cuDNN plans,");
        test_conv(&conv);
        test_attention(64, 1, 40, 40, 1.0f);
        if (k == 1)
            check(described_count(" cuDNN plans,") == plans,
                  "the calls after the warm-up made no cuDNN plan: %ld before, %ld after", plans,
                  described_count(" cuDNN plans,"));
        describe();
        gpu->v->destroy(gpu);
        gpu = NULL;
    }
    char text[8192] = "";
    FILE *f = fopen(path, "r");
    const size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[got] = 0;
    if (f) fclose(f);
    check(strstr(text, " dnn:test.conv.warm:2.") && strstr(text, " att:n1600.c64.r"),
          "the tune cache keeps the conv's cuDNN plan and the attention's blocks: %s", text);
    unlink(path);
    unsetenv("VAE_TUNE_CACHE");
}

static void log_line(int level, const char *msg, void *user) {
    (void)user;
    printf("LOG %d %s\n", level, msg);
}

int main(int argc, char **argv) {
    /* --no-bench: no timings; --buffers: only the buffer and copy checks, in each dtype */
    int bench = !(argc > 1 && strcmp(argv[1], "--no-bench") == 0);
    const int buffers_only = argc > 1 && strcmp(argv[1], "--buffers") == 0;
    const int bench_only = argc > 1 && strcmp(argv[1], "--bench") == 0;
    if (!vae_cuda_backend_create || !vae_cuda_available || !vae_device_available(VAE_DEVICE_CUDA) ||
        !vae_cuda_available()) {
        printf("skipped: no GPU\n0 passed, 0 failed, 1 skipped\n");
        return 0;
    }
    /* library logs on stdout (VAE_TEST_DEBUG=1: also which cuDNN algorithm / fallback each conv
     * shape got) */
    vae_set_log_callback(log_line, NULL, getenv("VAE_TEST_DEBUG") ? VAE_LOG_DEBUG : VAE_LOG_WARN);
    if (vae_cpu_backend_create(&cpu, VAE_DTYPE_F32, 0) != VAE_OK ||
        vae_cpu_backend_create(&cpu8, VAE_DTYPE_FP8, 0) != VAE_OK) {
        printf("cannot create the CPU backend: %s\n", vae_last_error());
        return 2;
    }
    static const variant_def variants[] = {
        {"fp32", VAE_DTYPE_F32, NULL, NULL, V_ALL, 0, NULL},
        {"bf16", VAE_DTYPE_BF16, NULL, NULL, V_ALL, 0, NULL},
        {"fp16+profile", VAE_DTYPE_F16, NULL, NULL, V_ALL, 1, NULL},
        {"fp32/gemm", VAE_DTYPE_F32, "gemm", NULL, V_CONV, 0, NULL},
        {"bf16/gemm", VAE_DTYPE_BF16, "gemm", NULL, V_CONV, 0, NULL},
        {"fp32/gemm/scratch1M", VAE_DTYPE_F32, "gemm", "1", V_CONV, 0, NULL},
        {"fp32/scratch1M", VAE_DTYPE_F32, NULL, "1", V_CONV | V_ATT | V_NORM, 0, NULL},
        {"bf16/scratch1M", VAE_DTYPE_BF16, NULL, "1", V_CONV | V_ATT, 0, NULL},
        {"bf16/no3d", VAE_DTYPE_BF16, NULL, NULL, V_CONV, 0, "VAE_CUDA_CONV3D=0"},
        {"bf16/nofuse", VAE_DTYPE_BF16, NULL, NULL, V_CONV, 0, "VAE_CUDA_FUSE=0"},
        {"fp32/no3d", VAE_DTYPE_F32, NULL, NULL, V_CONV, 0, "VAE_CUDA_CONV3D=0"},
        {"bf16/notune", VAE_DTYPE_BF16, NULL, NULL, V_CONV, 0, "VAE_CUDA_TUNE=0"},
        {"bf16/pwgemm", VAE_DTYPE_BF16, NULL, NULL, V_CONV, 0, "VAE_CUDA_PW=gemm"},
        {"bf16/nocpad", VAE_DTYPE_BF16, NULL, NULL, V_CONV, 0, "VAE_CUDA_CPAD=0"},
        {"bf16/nopad3d", VAE_DTYPE_BF16, NULL, NULL, V_CONV, 0, "VAE_CUDA_PAD3D=0"},
        {"bf16/nophase", VAE_DTYPE_BF16, NULL, NULL, V_CONV, 0, "VAE_CUDA_PHASE=0"},
        {"bf16/nokpad", VAE_DTYPE_BF16, NULL, NULL, V_CONV, 0, "VAE_CUDA_KPAD=0"},
        {"bf16/igemm", VAE_DTYPE_BF16, NULL, NULL, V_CONV, 0, "VAE_CUDA_IGEMM=always"},
        {"bf16/noigemm", VAE_DTYPE_BF16, NULL, NULL, V_CONV, 0, "VAE_CUDA_IGEMM=off"},
        {"bf16/halo", VAE_DTYPE_BF16, NULL, NULL, V_CONV, 0, "VAE_CUDA_HALO=always"},
        {"fp16/halo", VAE_DTYPE_F16, NULL, NULL, V_CONV, 0, "VAE_CUDA_HALO=always"},
        {"fp8", VAE_DTYPE_FP8, NULL, NULL, V_FP8, 0, NULL},
        {"fp32/staged", VAE_DTYPE_F32, NULL, NULL, V_CONV, 0, "VAE_CUDA_WARM=2"},
        {"bf16/staged", VAE_DTYPE_BF16, NULL, NULL, V_CONV, 0, "VAE_CUDA_WARM=2"},
        {"fp8/staged", VAE_DTYPE_FP8, NULL, NULL, V_FP8, 0, "VAE_CUDA_WARM=2"},
        {"fp8/stored", VAE_DTYPE_FP8, NULL, NULL, V_FP8, 0, NULL},
        /* the mma.sync kernels (Ampere / Ada / Blackwell's) in place of the sm_90a ones */
        {"bf16/mma", VAE_DTYPE_BF16, NULL, NULL, V_CONV, 0, "VAE_CUDA_MMA=1 VAE_CUDA_IGEMM=always"},
        {"fp16/mma", VAE_DTYPE_F16, NULL, NULL, V_CONV, 0, "VAE_CUDA_MMA=1 VAE_CUDA_IGEMM=always"},
        {"fp8/mma", VAE_DTYPE_FP8, NULL, NULL, V_FP8, 0, "VAE_CUDA_MMA=1"},
    };
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        variant_def v = variants[i];
        if (buffers_only) v.what &= V_BUF;
        if (bench_only) v.what = 0;
        fp8_stored = strcmp(v.label, "fp8/stored") == 0;
        if (v.what) run_variant(&v);
    }
    if (!buffers_only && !bench_only) test_warm_seen();
    if (buffers_only) {
        printf("%d passed, %d failed\n", n_pass, n_fail);
        return n_fail ? 1 : 0;
    }

    variant = "errors";
    tol = 1e-5;
    if (!bench_only && make_gpu(&variants[0]) == VAE_OK) {
        test_errors();
        gpu->v->destroy(gpu);
        gpu = NULL;
    }

    if (bench) {
        static const variant_def bv[] = {
            {"bench bf16", VAE_DTYPE_BF16, NULL, NULL, 0, 1, NULL},
            {"bench bf16/nofuse", VAE_DTYPE_BF16, NULL, NULL, 0, 0, "VAE_CUDA_FUSE=0"},
        };
        for (size_t i = 0; i < sizeof bv / sizeof *bv; i++) {
            variant = bv[i].label;
            if (make_gpu(&bv[i]) != VAE_OK) continue;
            /* Wan2.1 decoder convs at 480p (latent 60x104); window = the executor's layout */
            for (int contig = 1; contig >= (i == 0 ? 0 : 1); contig--) {
                bench_conv("wan_mid_384", 384, 384, 3, 3, 60, 104, 1, contig);
                bench_conv("wan_up1_384", 384, 384, 3, 3, 120, 208, 2, contig);
                bench_conv("wan_up2_192", 192, 192, 3, 3, 240, 416, 4, contig);
                bench_conv("wan_up3_96", 96, 96, 3, 3, 480, 832, 4, contig);
                bench_conv("wan_head_96to3", 96, 3, 3, 3, 480, 832, 4, contig);
                bench_conv("seedvr2_out_128to3", 128, 3, 3, 3, 720, 1248, 4, contig);
                bench_conv("seedvr2_up3_128", 128, 128, 3, 3, 720, 1248, 4, contig);
                bench_conv("wan22_up_256", 256, 256, 3, 3, 352, 640, 4, contig);
            }
            bench_conv("wan_enc_conv1_3to96", 3, 96, 3, 3, 480, 832, 4, 0);
            bench_conv("seedvr2_enc_in_3to128", 3, 128, 3, 3, 720, 1248, 4, 0);
            bench_conv("wan_upsample2d_384to192", 384, 192, 1, 3, 240, 416, 2, 1);
            bench_conv_up("wan_up2x_384to192", 384, 192, 120, 208, 2);
            bench_conv_up("wan22_up2x_512", 512, 512, 176, 320, 4);
            bench_conv("shortcut_1x1_192to384", 192, 384, 1, 1, 120, 208, 2, 1);
            /* taew2_2_super's depthwise 7x7 at 480x832 (its first and last stages) */
            bench_conv_groups("taehv_super_dw_512", 512, 512, 1024, 1, 7, 30, 52, 4, 1);
            bench_conv_groups("taehv_super_dw_128", 128, 128, 256, 1, 7, 120, 208, 4, 1);
            if (i == 0) {
                bench_norm(VAE_OP_RMS_NORM, 96, 1, 4, 480, 832);
                bench_norm(VAE_OP_RMS_NORM, 384, 1, 2, 120, 208);
                bench_norm(VAE_OP_GROUP_NORM, 128, 32, 4, 720, 1248);
                bench_norm(VAE_OP_GROUP_NORM, 512, 32, 4, 180, 312);
                static const shuf_case bs[] = {
                    {"dup_up_1024to512", VAE_OP_SHUFFLE_UP, 1024, 512, 2, 2, 8, 4, 2, 1, 4, 1, 44, 80, 0},
                    {"time_split_384", VAE_OP_SHUFFLE_UP, 768, 384, 2, 1, 1, 384, 0, 0, 1, 4, 120, 208, 0},
                    {"seedvr2_up_512", VAE_OP_SHUFFLE_UP, 4096, 512, 2, 2, 1, 512, 2048, 1024, 1, 1, 90, 156, 0},
                    {"upsample_192", VAE_OP_UPSAMPLE, 192, 192, 1, 2, 0, 0, 0, 0, 1, 4, 240, 416, 0},
                };
                for (size_t k = 0; k < sizeof bs / sizeof *bs; k++) bench_shuffle(&bs[k]);
                bench_attention(384, 60, 104, 1, 1);
                bench_attention(384, 90, 160, 1, 1); /* Wan2.1 middle block, 720p */
                bench_attention(512, 90, 156, 1, 1); /* SeedVR2 middle block, 720p */
                /* SeedVR2 1080p, whole and one band's queries of 2 and of 4 */
                bench_attention(512, 135, 240, 1, 1);
                bench_attention(512, 135, 240, 1, 2);
                bench_attention(512, 135, 240, 1, 4);
            }
            describe();
            gpu->v->destroy(gpu);
            gpu = NULL;
        }
    }
    cpu->v->destroy(cpu);
    cpu8->v->destroy(cpu8);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
