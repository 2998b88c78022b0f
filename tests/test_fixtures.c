/* test_fixtures.c -- every case of a reference fixture, through the public API.
 *
 * usage: test_fixtures SHARED_DIR FIXTURE [--device cpu|cuda] [--dtype fp32|bf16|fp16|fp8]
 *                     [--tol X] [--min-psnr DB] [--tiles N] [--strips N] [--blend PX] [--tile HxW]
 *                     [--offload N] [--max-memory BYTES] [--devices N | --ranks N] [--case NAME] [--threads N]
 *
 * Weights come from the shipped checkpoint ("file"), the taef2 .pth files, or a checkpoint written
 * by vae_synth_checkpoint() from the fixture's `config` (then checked against its `checksums`).
 * Each case's output must be within the relative error tolerance of the float64 reference, with no
 * NaN (default tolerance: fp32 1e-4, bf16/fp16 2e-2, fp8 5e-2); with --min-psnr, decoded images
 * must also be at least that many dB from the reference (over the reference's value range).
 * With --devices N, each case (and each tiled or blended run) again on a device group of N
 * (CPU: N lanes; CUDA: GPUs 0..N-1, shared by lanes when there are fewer): exact plans must equal
 * the one-device output bit for bit on the CPU (within the tiles' tolerance on GPUs, which tune
 * their conv paths each by its own timing), blends within 1e-6. With --ranks N, the same as
 * N ranks of a group of processes (threads standing in for them, each with its own session
 * joined by a group id): every rank's output as for --devices, and each rank keeping only its
 * own tiles (group_output own) adds up with the others to the whole output.
 * --offload N: each case again with the causal caches of its N largest ops in host memory, bit
 * for bit the untiled output on the CPU.
 * --case NAME runs that case alone, --threads N sets the CPU backend's threads (1: no OpenMP
 * workers, for ThreadSanitizer, which does not see into them).
 * Prints one line per check and "N passed, M failed".
 */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "platform/platform.h" /* pthreads, the clock, the machine */
#include "test_fixture_case.h"
#include "vae_dev.h" /* (vae.h, and the developer switches) */

static int passed, failed;
static int group_devices; /* --devices or --ranks */
static int group_ranks;   /* --ranks: the group is processes (ranks as threads, a session each) */

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (ok) passed++;
    else failed++;
}

/* VAE_TEST_LOG=debug|info: the library's log on stderr (to follow a failing GPU case) */
static void log_stderr(int level, const char *message, void *user) {
    (void)user;
    fprintf(stderr, "[%d] %s\n", level, message);
}

static double now(void) {
    return vae_plat_monotonic();
}

static int64_t numel(const vae_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* Adds x[0..n) vs y[0..n) to the sums of squared differences and of squared references;
 * non-finite x values are counted instead. */
static void err_sums(const float *x, const float *y, int64_t n, double *num, double *den,
                     int64_t *nonfinite) {
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            (*nonfinite)++;
            continue;
        }
        double d = (double)x[i] - y[i];
        *num += d * d;
        *den += (double)y[i] * y[i];
    }
}

static double rel_error(const vae_tensor *a, const vae_tensor *b, int64_t *nonfinite) {
    double num = 0, den = 0;
    *nonfinite = 0;
    err_sums(a->data, b->data, numel(a), &num, &den, nonfinite);
    return sqrt(num / (den > 0 ? den : 1));
}

/* PSNR of a against the reference b over b's value range (peak to peak). */
static double psnr(const vae_tensor *a, const vae_tensor *b) {
    const float *x = a->data, *y = b->data;
    const int64_t n = numel(b);
    double se = 0, lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        const double d = (double)x[i] - y[i];
        se += d * d;
        lo = fmin(lo, y[i]), hi = fmax(hi, y[i]);
    }
    return se > 0 ? 10 * log10((hi - lo) * (hi - lo) / (se / (double)n)) : INFINITY;
}

/* After a failure of a video output [1,C,T,H,W]: which frames are off (they tell which chunk of
 * the stream went wrong); a frame with a non-finite value counts as infinitely off. */
static void print_frame_errors(const vae_tensor *a, const vae_tensor *b, double tol) {
    if (a->ndim != 5) return;
    const int64_t c = a->shape[1], t = a->shape[2], plane = a->shape[3] * a->shape[4];
    const float *x = a->data, *y = b->data;
    for (int64_t f = 0; f < t; f++) {
        double num = 0, den = 0;
        int64_t bad = 0;
        for (int64_t k = 0; k < c; k++) /* one plane per channel */
            err_sums(x + (k * t + f) * plane, y + (k * t + f) * plane, plane, &num, &den, &bad);
        const double e = bad ? INFINITY : sqrt(num / (den > 0 ? den : 1));
        if (!(e <= tol))
            printf("    frame %lld of %lld: rel_err %.2e\n", (long long)f, (long long)t, e);
    }
}

static int same_shape(const vae_tensor *a, const cJSON *shape) {
    if (a->ndim != cJSON_GetArraySize(shape)) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != (int64_t)cJSON_GetArrayItem(shape, i)->valuedouble) return 0;
    return 1;
}

/* one rank of a group of processes, on its own thread */
typedef struct rank_call {
    const vae_model *m;
    vae_session_options so;
    int encode;
    const vae_tensor *in;
    vae_tensor out;
    vae_plan_info plan;
    int rc;
    char err[512];
    pthread_t th;
} rank_call;

static void *rank_main(void *arg) {
    rank_call *k = arg;
    vae_session *s = NULL;
    k->rc = vae_session_create(&s, k->m, &k->so);
    if (k->rc == VAE_OK)
        k->rc = vae_session_plan(s, k->encode, k->in->shape, k->in->ndim, &k->plan);
    if (k->rc == VAE_OK)
        k->rc =
            k->encode ? vae_encode_tensor(s, k->in, &k->out) : vae_decode_tensor(s, k->in, &k->out);
    if (k->rc) snprintf(k->err, sizeof k->err, "%s", vae_last_error());
    vae_session_free(s);
    return NULL;
}

/* group_devices ranks, threads standing in for processes (each its own session, joined by a
 * group id), group_output `gout`; 0 when every rank ran */
static int run_ranks(const vae_model *m, const vae_session_options *base, int encode,
                     const vae_tensor *in, int gout, rank_call *k, const char *label) {
    vae_group_id id;
    if (vae_group_id_create(base->device, &id) != VAE_OK) {
        check(0, "%s: group id: %s", label, vae_last_error());
        return 1;
    }
    const int gpus = base->device == VAE_DEVICE_CUDA ? vae_device_count(VAE_DEVICE_CUDA) : 0;
    for (int r = 0; r < group_devices; r++) {
        k[r] = (rank_call){.m = m, .so = *base, .encode = encode, .in = in};
        k[r].so.world = group_devices, k[r].so.rank = r, k[r].so.group_id = id;
        k[r].so.group_output = gout;
        k[r].so.device_index = gpus > 0 ? r % gpus : 0;
        pthread_create(&k[r].th, NULL, rank_main, &k[r]);
    }
    int failed_ranks = 0;
    for (int r = 0; r < group_devices; r++) {
        pthread_join(k[r].th, NULL);
        if (k[r].rc) check(0, "%s: rank %d of %d: %s", label, r, group_devices, k[r].err);
        failed_ranks += k[r].rc != 0;
    }
    return failed_ranks;
}

/* The same call as group_devices ranks of a group of processes: every rank's output against the
 * one-device output (bit for bit when bits, else within tol); then each rank keeping only its own
 * tiles (group_output own): at most one rank has a value where the output is not zero, and the
 * ranks' outputs add up to the whole output. */
static void check_ranks(const vae_model *m, const vae_session_options *base, int encode,
                        const vae_tensor *in, const vae_tensor *single, int bits, double tol,
                        const char *label) {
    rank_call k[VAE_MAX_DEVICES];
    if (base->device == VAE_DEVICE_CUDA) bits = 0;
    static const char *const order[] = {"whole frames", "tiles", "blend"};
    vae_tensor whole = {0}; /* rank 0's whole output (bands: the sums round differently) */
    if (run_ranks(m, base, encode, in, VAE_GROUP_OUTPUT_ALL, k, label) == 0) {
        for (int r = 0; r < group_devices; r++) {
            int64_t bad;
            const double e = rel_error(&k[r].out, single, &bad);
            const int same =
                numel(&k[r].out) == numel(single) &&
                memcmp(k[r].out.data, single->data, (size_t)numel(single) * sizeof(float)) == 0;
            check(bad == 0 && (bits ? same : e <= tol),
                  "%s, rank %d of %d processes (%s %dx%d): %s one process (rel %.2e, tol %.0e)",
                  label, r, group_devices, order[k[r].plan.order], k[r].plan.tiles_y,
                  k[r].plan.tiles_x, same ? "bit for bit as" : "against", e, bits ? 0.0 : tol);
        }
        whole = k[0].out;
        k[0].out = (vae_tensor){0};
    }
    for (int r = 0; r < group_devices; r++)
        vae_tensor_free(&k[r].out);
    /* own tiles: exact decodes */
    if (whole.data && k[0].plan.order == VAE_ORDER_TILED && !encode &&
        run_ranks(m, base, encode, in, VAE_GROUP_OUTPUT_OWN, k, label) == 0) {
        /* (GPUs: a second call may tune its conv paths otherwise: within tol) */
        const int64_t n = numel(single);
        int64_t shared = 0, wrong = 0;
        double num = 0, den = 0;
        for (int64_t i = 0; i < n; i++) {
            float sum = 0;
            int nonzero = 0;
            for (int r = 0; r < group_devices; r++) {
                const float v = ((const float *)k[r].out.data)[i];
                sum += v, nonzero += v != 0;
            }
            const float want = ((const float *)whole.data)[i];
            shared += nonzero > 1;
            wrong += sum != want;
            num += ((double)sum - want) * ((double)sum - want), den += (double)want * want;
        }
        const double e = den > 0 ? sqrt(num / den) : sqrt(num);
        check(shared == 0 && (bits ? wrong == 0 : e <= tol),
              "%s, each of %d ranks its own tiles: %lld values on more than one rank, %lld "
              "differing from the whole output in the ranks' sum (rel %.2e)",
              label, group_devices, (long long)shared, (long long)wrong, e);
        for (int r = 0; r < group_devices; r++)
            vae_tensor_free(&k[r].out);
    }
    vae_tensor_free(&whole);
}

/* The measured peak against the predicted one: on the CPU within -10% .. +2% (what: after the
 * label, or ""); on GPUs it is printed */
static void check_peak(const vae_session *s, const vae_session_options *so,
                       const vae_plan_info *plan, const char *label, const char *what) {
    const double measured = (double)vae_session_peak_bytes(s), predicted = (double)plan->peak_bytes;
    const char *sep = *what ? " " : "";
    if (so->device == VAE_DEVICE_CPU)
        check(measured <= 1.02 * predicted && measured >= 0.9 * predicted,
              "%s%s%s: predicted peak %.0f bytes, measured %.0f (%+.1f%%)", label, sep, what,
              predicted, measured, 100.0 * (measured / predicted - 1));
    else
        printf("INFO %s%s%s: predicted peak %.1f MiB, measured %.1f MiB (%+.1f%%)\n", label, sep,
               what, predicted / 1048576, measured / 1048576, 100.0 * (measured / predicted - 1));
}

/* The same call on a device group of group_devices (options *base otherwise): its output against
 * the one-device output `single` (bit for bit when bits, else within tol), and, on the CPU, its
 * predicted peak against the largest measured on a device. */
static void check_group(const vae_model *m, const vae_session_options *base, int encode,
                        const vae_tensor *in, const vae_tensor *single, int bits, double tol,
                        const char *label) {
    if (group_ranks) {
        check_ranks(m, base, encode, in, single, bits, tol, label);
        return;
    }
    vae_session_options so = *base;
    so.n_devices = group_devices;
    /* GPUs 0..N-1; with fewer GPUs, lanes share them (the same code, one device's speed) */
    const int gpus = so.device == VAE_DEVICE_CUDA ? vae_device_count(VAE_DEVICE_CUDA) : 0;
    for (int k = 0; k < group_devices; k++)
        so.devices[k] = gpus > 0 ? k % gpus : k;
    /* CPU lanes share the threads: each gets as many as the one-device session had (sums over
     * other thread counts round differently) */
    so.threads = (base->threads > 0 ? base->threads : vae_plat_cpu_count()) *
                 group_devices;
    /* GPUs tune their conv paths each by its own timing: equal within rounding only */
    if (so.device == VAE_DEVICE_CUDA) bits = 0;
    vae_session *s = NULL;
    vae_plan_info plan;
    vae_tensor out = {0};
    int rc = vae_session_create(&s, m, &so);
    if (rc == VAE_OK) rc = vae_session_plan(s, encode, in->shape, in->ndim, &plan);
    const double t0 = now();
    if (rc == VAE_OK) rc = encode ? vae_encode_tensor(s, in, &out) : vae_decode_tensor(s, in, &out);
    const double dt = now() - t0;
    if (rc) {
        check(0, "%s on %d devices: %s", label, group_devices, vae_last_error());
        vae_session_free(s);
        return;
    }
    int64_t bad;
    const double e = rel_error(&out, single, &bad);
    const int same = numel(&out) == numel(single) &&
                     memcmp(out.data, single->data, (size_t)numel(&out) * sizeof(float)) == 0;
    static const char *const order[] = {"whole frames", "tiles", "blend"};
    check(bad == 0 && (bits ? same : e <= tol),
          "%s on %d devices (%s %dx%d): %s one device (rel %.2e, %s %.0e)  %.2f s", label,
          group_devices, order[plan.order], plan.tiles_y, plan.tiles_x,
          same ? "bit for bit as on" : "against", e, bits ? "wanted 0, tol" : "tol", tol, dt);
    int64_t peaks[VAE_MAX_DEVICES];
    const int n = vae_session_device_peaks(s, peaks, VAE_MAX_DEVICES);
    check(n == group_devices, "%s: %d devices report a peak", label, n);
    char on[32];
    snprintf(on, sizeof on, "on %d devices", group_devices);
    check_peak(s, &so, &plan, label, on);
    vae_tensor_free(&out);
    vae_session_free(s);
}

/* The case once more in a fresh session with other tiling options: exact tiles (at least n per
 * axis where the size allows) must meet the fixture's tolerance and stay within tol_tiles of the
 * untiled output; blended tiles (blend > 0: tile size in pixels) report their distance to it and
 * must stay finite. Both check the planner's predicted peak against the measured one (CPU: within
 * 10%, never more than 2% under). */
static void check_tiles(const vae_model *m, const vae_session_options *base, int encode,
                        const vae_tensor *in, const vae_tensor *untiled, const vae_tensor *ref,
                        double tol, double tol_tiles, int n, int blend, const char *label) {
    vae_model_info info;
    vae_model_get_info(m, &info);
    const int f = info.spatial_factor;
    const vae_tensor *vid = encode ? in : untiled;
    const int64_t H = vid->shape[vid->ndim - 2], W = vid->shape[vid->ndim - 1];
    vae_session_options so = *base;
    if (blend) {
        so.tile_mode = VAE_TILE_BLEND, so.blend_tile = blend, so.blend_overlap = blend / 4;
    } else {
        so.tile_height = (int)(H / n / f * f), so.tile_width = (int)(W / n / f * f);
        if (so.tile_height < f) so.tile_height = f;
        if (so.tile_width < f) so.tile_width = f;
    }
    vae_session *s = NULL;
    vae_plan_info plan;
    vae_tensor out = {0};
    int rc = vae_session_create(&s, m, &so);
    if (rc == VAE_OK) rc = vae_session_plan(s, encode, in->shape, in->ndim, &plan);
    double t0 = now();
    if (rc == VAE_OK) rc = encode ? vae_encode_tensor(s, in, &out) : vae_decode_tensor(s, in, &out);
    const double dt = now() - t0;
    if (rc) {
        check(0, "%s %s: %s", label, blend ? "blend" : "tiles", vae_last_error());
        vae_session_free(s);
        return;
    }
    int64_t bad_ref, bad_untiled;
    const double e_ref = rel_error(&out, ref, &bad_ref), e_un = rel_error(&out, untiled, &bad_untiled);
    if (blend) {
        check(bad_ref == 0 && e_un < 1.0,
              "%s blend %dx%d tiles of %d px (overlap %d): distance to exact %.2e (to the "
              "reference %.2e)  %.2f s", label, plan.tiles_y, plan.tiles_x, blend, blend / 4,
              e_un, e_ref, dt);
    } else {
        const int want_y = H / f >= n ? n : (int)(H / f), want_x = W / f >= n ? n : (int)(W / f);
        check(plan.order == VAE_ORDER_TILED && plan.tiles_y >= want_y && plan.tiles_x >= want_x &&
                  e_ref <= tol && e_un <= tol_tiles && bad_ref == 0,
              "%s tiles %dx%d of %dx%d px: rel_err %.2e (tol %.0e), vs untiled %.2e (tol %.0e)  "
              "%.2f s", label, plan.tiles_y, plan.tiles_x, so.tile_height, so.tile_width, e_ref,
              tol, e_un, tol_tiles, dt);
    }
    /* again in the same session: the output block it keeps between calls holds this call's
     * frames (a blend must start from zeros again) */
    vae_tensor again = {0};
    rc = encode ? vae_encode_tensor(s, in, &again) : vae_decode_tensor(s, in, &again);
    int64_t bad_again = 0;
    const double e_again = rc ? 1.0 : rel_error(&again, &out, &bad_again);
    const double tol_again = so.device == VAE_DEVICE_CPU ? 0.0 : tol_tiles;
    check(rc == VAE_OK && e_again <= tol_again && bad_again == 0,
          "%s %s: a second call in the same session: %.2e from the first (tol %.0e)%s%s", label,
          blend ? "blend" : "tiles", e_again, tol_again, rc ? ": " : "",
          rc ? vae_last_error() : "");
    vae_tensor_free(&again);
    check_peak(s, &so, &plan, label, "");
    if (group_devices > 1) { /* the same tiles shared out: the same output, bit for bit */
        char glabel[300];
        snprintf(glabel, sizeof glabel, "%s %s", label, blend ? "blend" : "tiles");
        check_group(m, &so, encode, in, &out, !blend, blend ? 1e-6 : tol_tiles, glabel);
    }
    vae_tensor_free(&out);
    vae_session_free(s);
}

/* A fresh session of options so: its plan for in, then the call; NULL (a failed check) when
 * either fails. */
static vae_session *run_planned(const vae_model *m, const vae_session_options *so, int encode,
                                const vae_tensor *in, vae_plan_info *plan, vae_tensor *out,
                                const char *label, const char *what) {
    vae_session *s = NULL;
    int rc = vae_session_create(&s, m, so);
    if (rc == VAE_OK) rc = vae_session_plan(s, encode, in->shape, in->ndim, plan);
    if (rc == VAE_OK) rc = encode ? vae_encode_tensor(s, in, out) : vae_decode_tensor(s, in, out);
    if (rc == VAE_OK) return s;
    check(0, "%s %s: %s", label, what, vae_last_error());
    vae_session_free(s);
    return NULL;
}

/* The case in a fresh session whose exact tiles are n column strips that hand their edge
 * columns on (VAE_PARAM_PLAN_STRIPS): within the fixture's tolerance and tol_tiles of the
 * untiled output, the predicted peak checked as for tiles. Where the model has no part that runs
 * in strips (encoders, SeedVR2) or the input is too narrow for n, the planner plans as usual;
 * *ran counts the cases that ran in strips. */
static void check_strips(const vae_model *m, const vae_session_options *base, int encode,
                         const vae_tensor *in, const vae_tensor *untiled, const vae_tensor *ref,
                         double tol, double tol_tiles, int n, const char *label, int *ran) {
    vae_session_options so = *base;
    vae_session_options_set(&so, VAE_PARAM_PLAN_STRIPS, n);
    vae_plan_info plan;
    vae_tensor out = {0};
    vae_session *s = run_planned(m, &so, encode, in, &plan, &out, label, "strips");
    if (!s) return;
    int64_t bad_ref, bad_untiled;
    const double e_ref = rel_error(&out, ref, &bad_ref), e_un = rel_error(&out, untiled, &bad_untiled);
    *ran += plan.strips > 0;
    check(e_ref <= tol && e_un <= tol_tiles && bad_ref == 0 && (plan.strips == 0 || plan.strips == n),
          "%s %d strips (planned %d, tiles %dx%d): rel_err %.2e (tol %.0e), vs untiled %.2e (tol "
          "%.0e)", label, n, plan.strips, plan.tiles_y, plan.tiles_x, e_ref, tol, e_un, tol_tiles);
    check_peak(s, &so, &plan, label, "strips");
    vae_tensor_free(&out);
    vae_session_free(s);
}

/* The case in a fresh session with the causal caches of the n largest ops in host memory
 * (VAE_PARAM_PLAN_OFFLOAD): the same arithmetic, so bit for bit the untiled output on the CPU
 * (within tol_tiles on GPUs, which tune their conv paths each by its own timing), and the
 * predicted peak checked as for tiles (the host caches are not in it). */
static void check_offload(const vae_model *m, const vae_session_options *base, int encode,
                          const vae_tensor *in, const vae_tensor *untiled, double tol_tiles, int n,
                          const char *label, int *ran) {
    vae_session_options so = *base;
    vae_session_options_set(&so, VAE_PARAM_PLAN_OFFLOAD, n);
    vae_plan_info plan;
    vae_tensor out = {0};
    vae_session *s = run_planned(m, &so, encode, in, &plan, &out, label, "caches in host memory");
    if (!s) return;
    int64_t bad;
    const int cpu = so.device == VAE_DEVICE_CPU;
    const double e = rel_error(&out, untiled, &bad);
    const int same = numel(&out) == numel(untiled) &&
                     memcmp(out.data, untiled->data, (size_t)numel(&out) * sizeof(float)) == 0;
    *ran += plan.host_caches > 0;
    check(bad == 0 && (cpu ? same : e <= tol_tiles),
          "%s: the causal caches of %d ops (%.1f KiB) in host memory: %s untiled (rel_err %.2e, "
          "tol %s)", label, plan.host_caches, (double)plan.host_cache_bytes / 1024,
          same ? "bit for bit as" : "against", e, cpu ? "0" : "tol_tiles");
    const char *contig = getenv("VAE_EXEC_CONTIG"); /* off: list windows, not what is modelled */
    if (!contig || strcmp(contig, "0") != 0)
        check_peak(s, &so, &plan, label, "caches in host memory");
    vae_tensor_free(&out);
    vae_session_free(s);
}

/* A whole-frame decode of t latent frames steps through several of them at once: the most, up
 * to VAE_EXEC_CHUNKS (default 4), that divides t - 1. */
static void check_steps(vae_session *s, const vae_tensor *in, const char *label) {
    if (getenv("VAE_EXEC_FRAMES") || in->ndim != 5) return;
    const char *env = getenv("VAE_EXEC_CHUNKS");
    const int most = env && *env ? atoi(env) : 4;
    vae_plan_info plan;
    if (vae_session_plan(s, 0, in->shape, in->ndim, &plan) != VAE_OK) {
        check(0, "%s: plan: %s", label, vae_last_error());
        return;
    }
    const int later = (int)in->shape[2] - 1;
    if (plan.order != VAE_ORDER_WHOLE || later < 1) return;
    int want = most < later ? most : later;
    while (want > 1 && later % want)
        want--;
    check(plan.step_frames == want,
          "%s: whole frames in steps of %d latent frames after the first (of %d; wanted %d)", label,
          plan.step_frames, later, want);
}

/* The synthesiser against the fixture's checksums: every key, shape, sum and first values. */
static void check_checksums(const char *ckpt, const cJSON *sums) {
    int n = 0, bad = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, sums) {
        vae_tensor t;
        n++;
        if (vae_tensor_load(ckpt, it->string, &t) != VAE_OK) {
            if (bad++ < 5) printf("  missing %s: %s\n", it->string, vae_last_error());
            continue;
        }
        const cJSON *shape = cJSON_GetObjectItem(it, "shape"), *first = cJSON_GetObjectItem(it, "first");
        double ref = cJSON_GetObjectItem(it, "sum")->valuedouble, sum = 0, mag = 0;
        const int64_t count = numel(&t);
        for (int64_t i = 0; i < count; i++) {
            sum += ((float *)t.data)[i];
            mag += fabs(((float *)t.data)[i]);
        }
        int ok = same_shape(&t, shape) && fabs(sum - ref) <= 1e-6 * mag + 1e-9;
        for (int i = 0; ok && i < cJSON_GetArraySize(first) && i < count; i++) {
            double v = cJSON_GetArrayItem(first, i)->valuedouble;
            ok = fabs(((float *)t.data)[i] - v) <= 1e-7 * (1 + fabs(v));
        }
        if (!ok && bad++ < 5) printf("  mismatch %s (sum %.9g vs %.9g)\n", it->string, sum, ref);
        vae_tensor_free(&t);
    }
    check(bad == 0, "synth checksums: %d tensors, %d wrong", n, bad);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr,
                "usage: %s SHARED_DIR FIXTURE [--device D] [--dtype T] [--tol X] "
                "[--tiles N] [--strips N] [--blend PX] [--tile HxW] [--offload N] [--max-memory BYTES] "
                "[--devices N | --ranks N]\n",
                argv[0]);
        return 2;
    }
    const char *shared = argv[1], *name = argv[2], *device = "cpu", *dtype = "fp32";
    double tol = -1, min_psnr = 0;
    int tile_h = 0, tile_w = 0, blend = 0, tiles = 0, strips = 0, strip_runs = 0, offload = 0,
        offload_runs = 0;
    long long max_mem = 0;
    const char *only = NULL; /* --case */
    int threads = 0;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--device") == 0) device = argv[i + 1];
        else if (strcmp(argv[i], "--dtype") == 0) dtype = argv[i + 1];
        else if (strcmp(argv[i], "--tol") == 0) tol = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--min-psnr") == 0) min_psnr = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--tile") == 0) sscanf(argv[i + 1], "%dx%d", &tile_h, &tile_w);
        else if (strcmp(argv[i], "--blend") == 0) sscanf(argv[i + 1], "%d", &blend);
        else if (strcmp(argv[i], "--tiles") == 0) sscanf(argv[i + 1], "%d", &tiles);
        else if (strcmp(argv[i], "--strips") == 0) sscanf(argv[i + 1], "%d", &strips);
        else if (strcmp(argv[i], "--offload") == 0) sscanf(argv[i + 1], "%d", &offload);
        else if (strcmp(argv[i], "--max-memory") == 0) sscanf(argv[i + 1], "%lld", &max_mem);
        else if (strcmp(argv[i], "--devices") == 0) sscanf(argv[i + 1], "%d", &group_devices);
        else if (strcmp(argv[i], "--ranks") == 0)
            group_ranks = sscanf(argv[i + 1], "%d", &group_devices) == 1;
        else if (strcmp(argv[i], "--case") == 0)
            only = argv[i + 1];
        else if (strcmp(argv[i], "--threads") == 0)
            threads = atoi(argv[i + 1]);
    }
    const char *lv = getenv("VAE_TEST_LOG");
    if (lv && *lv)
        vae_set_log_callback(log_stderr, NULL,
                             strcmp(lv, "debug") == 0 ? VAE_LOG_DEBUG : VAE_LOG_INFO);
    vae_session_options so;
    vae_session_options_default(&so);
    if (strcmp(device, "cuda") == 0) {
        if (!vae_device_available(VAE_DEVICE_CUDA)) {
            printf("skipped: no GPU\n0 passed, 0 failed, 1 skipped\n");
            return 0;
        }
        so.device = VAE_DEVICE_CUDA;
    }
    so.dtype = strcmp(dtype, "bf16") == 0   ? VAE_DTYPE_BF16
               : strcmp(dtype, "fp16") == 0 ? VAE_DTYPE_F16
               : strcmp(dtype, "fp8") == 0  ? VAE_DTYPE_FP8
                                            : VAE_DTYPE_F32;
    if (tol < 0) tol = so.dtype == VAE_DTYPE_F32 ? 1e-4 : so.dtype == VAE_DTYPE_FP8 ? 5e-2 : 2e-2;
    so.tile_height = tile_h, so.tile_width = tile_w, so.max_memory = max_mem;
    if (threads > 0) so.threads = threads;

    char path[4096], io[4096], ckpt[4096], ckpt2[4096] = "";
    snprintf(io, sizeof io, "%s/fixtures/%s.io.safetensors", shared, name);
    cJSON *js = fixture_json(shared, name, path, sizeof path);
    if (!js) {
        fprintf(stderr, "cannot read fixture %s\n", path);
        return 1;
    }
    const char *arch = cJSON_GetObjectItem(js, "arch")->valuestring;
    int synthetic = fixture_synthetic(js);
    if (strcmp(arch, "taesd") == 0) {
        snprintf(ckpt, sizeof ckpt, "%s/models/taef2_encoder.pth", shared);
        snprintf(ckpt2, sizeof ckpt2, "%s/models/taef2_decoder.pth", shared);
    } else if (synthetic) {
        const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(ckpt, sizeof ckpt, "%s/vae_test_%s_%ld.safetensors", tmp, name, vae_plat_pid());
        char *cfg = cJSON_PrintUnformatted(cJSON_GetObjectItem(js, "config"));
        double t0 = now();
        int rc = vae_synth_checkpoint(arch, cfg, ckpt);
        free(cfg);
        check(rc == VAE_OK, "synth %s (%.1f s) %s", arch, now() - t0, rc ? vae_last_error() : "");
        if (rc) return 1;
        check_checksums(ckpt, cJSON_GetObjectItem(js, "checksums"));
    } else {
        snprintf(ckpt, sizeof ckpt, "%s/fixtures/%s.safetensors", shared, name);
        snprintf(ckpt2, sizeof ckpt2, "%s/fixtures/%s.diffusers.safetensors", shared, name);
        if (access(ckpt2, R_OK) != 0) ckpt2[0] = 0;
    }

    /* For taesd, ckpt is the encoder and ckpt2 the decoder; for Wan files, ckpt2 is the same
     * weights under another key scheme and runs every case again. */
    int is_taesd = strcmp(arch, "taesd") == 0;
    for (int pass = 0; pass < (ckpt2[0] && !is_taesd ? 2 : 1); pass++) {
        vae_model *enc = NULL, *dec = NULL;
        vae_session *se = NULL, *sd = NULL;
        const char *file = pass ? ckpt2 : ckpt;
        int rc = vae_model_open(&enc, file, NULL);
        check(rc == VAE_OK, "open %s %s", file, rc ? vae_last_error() : "");
        if (rc) break;
        if (is_taesd) {
            rc = vae_model_open(&dec, ckpt2, NULL);
            check(rc == VAE_OK, "open %s %s", ckpt2, rc ? vae_last_error() : "");
            if (rc) break;
        } else {
            dec = enc;
        }
        if ((rc = vae_session_create(&se, enc, &so)) == VAE_OK && dec != enc)
            rc = vae_session_create(&sd, dec, &so);
        if (!sd) sd = se;
        check(rc == VAE_OK, "session %s/%s %s", device, dtype, rc ? vae_last_error() : "");
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(js, "cases")) {
            if (rc) break;
            const char *cname = cJSON_GetObjectItem(c, "name")->valuestring;
            if (only && strcmp(cname, only) != 0) continue;
            int encode = strcmp(cJSON_GetObjectItem(c, "op")->valuestring, "encode") == 0;
            vae_tensor in, ref, out;
            if (vae_tensor_load(io, cJSON_GetObjectItem(c, "input")->valuestring, &in) ||
                vae_tensor_load(io, cJSON_GetObjectItem(c, "expect")->valuestring, &ref)) {
                check(0, "%s: cannot load case tensors: %s", cname, vae_last_error());
                continue;
            }
            /* a preview case: its own session (the model's preview decoder) */
            vae_session_options cso = so;
            cso.preview = case_preview(c);
            vae_session *sp = NULL;
            if (cso.preview && vae_session_create(&sp, dec, &cso) != VAE_OK) {
                check(0, "%s %s: preview session: %s", name, cname, vae_last_error());
                vae_tensor_free(&in);
                vae_tensor_free(&ref);
                continue;
            }
            vae_session *sdc = sp ? sp : sd;
            double t0 = now();
            int r = encode ? vae_encode_tensor(se, &in, &out) : vae_decode_tensor(sdc, &in, &out);
            double dt = now() - t0;
            if (r) {
                check(0, "%s %s: %s", name, cname, vae_last_error());
            } else if (vae_last_error()[0]) { /* a recovered fallback leaves nothing behind */
                check(0, "%s %s: succeeded but left the message '%s'", name, cname,
                      vae_last_error());
            } else if (!same_shape(&out, cJSON_GetObjectItem(c, "out_shape"))) {
                check(0, "%s %s: output shape [%lld,%lld,...] differs from the reference", name,
                      cname, (long long)out.shape[0], (long long)out.shape[1]);
            } else {
                int64_t nonfinite;
                double err = rel_error(&out, &ref, &nonfinite);
                check(err <= tol && nonfinite == 0,
                      "%s%s %s (%s): rel_err %.2e (tol %.0e) nonfinite %lld  %.2f s", name,
                      pass ? " [diffusers names]" : "", cname, encode ? "encode" : "decode", err,
                      tol, (long long)nonfinite, dt);
                if (!(err <= tol && nonfinite == 0)) print_frame_errors(&out, &ref, tol);
                if (min_psnr > 0 && !encode) {
                    const double db = psnr(&out, &ref);
                    check(db >= min_psnr, "%s %s: PSNR against the reference %.2f dB (at least %.0f)",
                          name, cname, db, min_psnr);
                }
                char label[256];
                snprintf(label, sizeof label, "%s %s", name, cname);
                const vae_model *mm = encode ? enc : dec;
                const double tol_tiles = so.dtype == VAE_DTYPE_F32 ? 1e-5 : 2e-2;
                if (!encode && !is_taesd && group_devices <= 1) check_steps(sdc, &in, label);
                if (group_devices > 1) /* the planner's own choice for the group */
                    check_group(mm, &cso, encode, &in, &out, 0, tol_tiles, label);
                if (tiles) check_tiles(mm, &cso, encode, &in, &out, &ref, tol, tol_tiles, tiles, 0, label);
                if (blend) check_tiles(mm, &cso, encode, &in, &out, &ref, tol, tol_tiles, 0, blend, label);
                if (strips)
                    check_strips(mm, &cso, encode, &in, &out, &ref, tol, tol_tiles, strips, label,
                                 &strip_runs);
                if (offload)
                    check_offload(mm, &cso, encode, &in, &out, tol_tiles, offload, label,
                                  &offload_runs);
            }
            vae_session_free(sp);
            vae_tensor_free(&in);
            vae_tensor_free(&ref);
            vae_tensor_free(&out);
        }
        if (sd != se) vae_session_free(sd);
        vae_session_free(se);
        if (dec != enc) vae_model_free(dec);
        vae_model_free(enc);
    }
    if (strips) check(strip_runs > 0, "%s: %d cases ran in %d strips", name, strip_runs, strips);
    if (offload)
        check(offload_runs > 0, "%s: %d cases ran with causal caches in host memory", name,
              offload_runs);
    if (synthetic) remove(ckpt);
    cJSON_Delete(js);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
