/* test_alloc_fail.c -- every host allocation of a session's life made to fail in turn.
 *
 * For each scenario (decode and encode; whole frames, exact tiles, blended tiles) and each k, the
 * k-th allocation from the session's creation on fails (core.c's vae_alloc_fail_after): the call
 * that meets it returns VAE_ENOMEM with a message, nothing leaks (the library's live-block count
 * comes back to where it was), and the same session, if it was made, then runs again and gives
 * the output of a run without failures. The sweep ends when k passes the last allocation.
 * With "cuda", the sessions run on the GPU and the countdown also fails device allocations
 * (the backend's cudaMalloc or the host's pool); those the caching allocator recovers from (it
 * frees its cached blocks and tries again) succeed.
 * A device group of two lanes (threads) sweeps too: a failure on either stops both, and the call
 * returns it; also in row bands (SeedVR2 tiny, synthetic: the lanes wait for each other's
 * GroupNorm sums, so a failure on one must wake the other).
 * "quick" sweeps three of the scenarios (the sanitizer build, where every try is 3x slower; the
 * bands' ~2000 allocations take ~3 min even in the release build).
 * A third argument runs only the scenarios whose name holds it (e.g. "bands"); none matching fails.
 * usage: test_alloc_fail SHARED_DIR [all|cuda|quick] [NAME-PART] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "vae_dev.h" /* (vae.h, and the developer switches) */

/* the seedvr2_tiny fixture's configuration (its synthetic weights: vae_model_synth) */
#define SEEDVR2_TINY                                                                               \
    "{\"act_fn\":\"silu\",\"block_out_channels\":[32,32,64,64],\"down_block_types\":["             \
    "\"DownEncoderBlock3D\","                                                                      \
    "\"DownEncoderBlock3D\",\"DownEncoderBlock3D\",\"DownEncoderBlock3D\"],\"in_channels\":3,"     \
    "\"latent_channels\":16,"                                                                      \
    "\"layers_per_block\":2,\"norm_num_groups\":8,\"out_channels\":3,\"slicing_sample_min_size\":" \
    "4,"                                                                                           \
    "\"temporal_scale_num\":2,\"inflation_mode\":\"pad\",\"up_block_types\":["                     \
    "\"UpDecoderBlock3D\","                                                                        \
    "\"UpDecoderBlock3D\",\"UpDecoderBlock3D\",\"UpDecoderBlock3D\"],\"spatial_downsample_"        \
    "factor\":8,"                                                                                  \
    "\"temporal_downsample_factor\":4,\"use_quant_conv\":false,\"use_post_quant_conv\":false}"

static int n_fail;
static vae_device device = VAE_DEVICE_CPU;
static double tol = 1e-6; /* against the run without failures (GPU: paths may be timed anew) */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            n_fail++;                                                                              \
            printf("FAIL ");                                                                       \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

typedef struct scenario {
    const char *name, *input;
    int encode;
    vae_tile_mode mode;
    int tile, blend;
    int lanes; /* > 1: a device group of that many lanes (threads; a failure on one stops all) */
    int bands; /* the SeedVR2 model in row bands (VAE_PARAM_PLAN_BANDS) instead of Wan2.1 */
} scenario;

static double rel_diff(const vae_tensor *a, const vae_tensor *b) {
    int64_t n = vae_shape_numel(a->shape, a->ndim);
    if (n != vae_shape_numel(b->shape, b->ndim)) return INFINITY;
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = ((const float *)a->data)[i], y = ((const float *)b->data)[i];
        num += (x - y) * (x - y), den += y * y;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int run(vae_session *s, const scenario *sc, const vae_tensor *in, vae_tensor *out) {
    return sc->encode ? vae_encode_tensor(s, in, out) : vae_decode_tensor(s, in, out);
}

/* every how many allocations the sweep tries: all (VAE_ALLOC_FAIL_STRIDE=N: every N-th, the CI's
 * sweeps of the slowest scenarios; the full ones carry the ctest label "nightly"), except for
 * bands on GPUs (each try makes a new NCCL communicator, ~0.3 s: every 37th, which still fails
 * the lanes mid-run, where one waits in an all-reduce for the other) */
static long sweep_step(const scenario *sc) {
    if (device == VAE_DEVICE_CUDA && sc->bands) return 37;
    const char *s = getenv("VAE_ALLOC_FAIL_STRIDE");
    const long n = s ? strtol(s, NULL, 10) : 1;
    return n > 1 ? n : 1;
}

/* One scenario: the reference, then the sweep. Returns the number of allocations it met. */
static long sweep(const vae_model *m, const scenario *sc, const vae_tensor *in) {
    vae_session_options so;
    vae_session_options_default(&so);
    so.threads = 1;
    so.device = device;
    so.tile_mode = sc->mode;
    so.tile_height = so.tile_width = sc->tile;
    so.blend_tile = sc->blend, so.blend_overlap = sc->blend / 4;
    so.n_devices = sc->lanes;
    /* GPUs 0, 1, ..: a group of distinct GPUs makes an NCCL communicator for its bands (one
     * GPU: two lanes on it, the threads' communicator) */
    const int gpus = device == VAE_DEVICE_CUDA ? vae_device_count(VAE_DEVICE_CUDA) : 0;
    for (int k = 0; k < sc->lanes && gpus > 0; k++)
        so.devices[k] = k % gpus;
    so.threads = sc->lanes > 1 ? sc->lanes : 1; /* one thread per lane */
    if (sc->bands) vae_session_options_set(&so, VAE_PARAM_PLAN_BANDS, 1);
    vae_session *s = NULL;
    vae_tensor ref = {0}, out = {0};
    int rc = vae_session_create(&s, m, &so);
    if (rc == VAE_OK) rc = run(s, sc, in, &ref);
    vae_session_free(s);
    CHECK(rc == VAE_OK, "%s: reference run: %s", sc->name, vae_last_error());
    if (rc) return 0;
    long k = 1;
    for (; k < 100000; k += sweep_step(sc)) {
        const long live = vae_alloc_live();
        s = NULL;
        vae_alloc_fail_after(k);
        int rc_create = vae_session_create(&s, m, &so);
        rc = rc_create ? rc_create : run(s, sc, in, &out);
        /* done: the k-th allocation never came; a success after it failed is a recovery (the
         * session planned again for less) */
        const int done = vae_alloc_fail_after(0) > 0;
        CHECK(rc == VAE_OK || (rc == VAE_ENOMEM && vae_last_error()[0]),
              "%s: allocation %ld failing: %s (%s), expected VAE_ENOMEM", sc->name, k,
              vae_strerror(rc), vae_last_error());
        CHECK(!rc_create || s == NULL, "%s: allocation %ld: a failed create left a session",
              sc->name, k);
        if (s && rc) { /* the same session works afterwards */
            vae_tensor_free(&out);
            int rc2 = run(s, sc, in, &out);
            CHECK(rc2 == VAE_OK && rel_diff(&out, &ref) < tol,
                  "%s: after allocation %ld failed, the session's next run: %s, diff %.2g",
                  sc->name, k, rc2 ? vae_last_error() : "ok", rc2 ? 0.0 : rel_diff(&out, &ref));
        }
        if (!rc) CHECK(rel_diff(&out, &ref) < tol, "%s: allocation %ld: output differs", sc->name, k);
        vae_tensor_free(&out);
        vae_session_free(s);
        CHECK(vae_alloc_live() == live, "%s: allocation %ld failing leaked %ld blocks", sc->name,
              k, vae_alloc_live() - live);
        if (done || n_fail > 20) break;
    }
    vae_tensor_free(&ref);
    return k - 1;
}

int main(int argc, char **argv) {
    if (argc < 2 || (argc > 2 && strcmp(argv[2], "all") && strcmp(argv[2], "cuda") &&
                     strcmp(argv[2], "quick"))) {
        printf("usage: test_alloc_fail SHARED_DIR [all|cuda|quick] [NAME-PART]\n");
        return 2;
    }
    const int quick = argc > 2 && strcmp(argv[2], "quick") == 0;
    if (argc > 2 && strcmp(argv[2], "cuda") == 0) {
        if (!vae_device_available(VAE_DEVICE_CUDA)) {
            printf("skipped: no GPU\n");
            return 0;
        }
        device = VAE_DEVICE_CUDA, tol = 1e-5;
    }
    char path[1024], io[1024], io2[1024];
    snprintf(path, sizeof path, "%s/fixtures/wan21_tiny.safetensors", argv[1]);
    snprintf(io, sizeof io, "%s/fixtures/wan21_tiny.io.safetensors", argv[1]);
    snprintf(io2, sizeof io2, "%s/fixtures/seedvr2_tiny.io.safetensors", argv[1]);
    vae_model *m = NULL, *m2 = NULL;
    vae_tensor lat = {0}, img = {0}, lat2 = {0};
    if (vae_model_open(&m, path, NULL) || vae_tensor_load(io, "dec_img.latent", &lat) ||
        vae_tensor_load(io, "enc_img.video", &img) ||
        vae_model_synth(&m2, "seedvr2", SEEDVR2_TINY) ||
        vae_tensor_load(io2, "dec_img.latent", &lat2)) {
        printf("FAIL setup: %s\n", vae_last_error());
        return 1;
    }
    const scenario scs[] = {
        {"decode, whole frames", "dec_img.latent", 0, VAE_TILE_AUTO, 0, 0, 1, 0},
        {"encode, whole frames", "enc_img.video", 1, VAE_TILE_AUTO, 0, 0, 1, 0},
        {"decode, exact 16 px tiles", "dec_img.latent", 0, VAE_TILE_AUTO, 16, 0, 1, 0},
        {"encode, exact 16 px tiles", "enc_img.video", 1, VAE_TILE_AUTO, 16, 0, 1, 0},
        {"decode, blended 32 px tiles", "dec_img.latent", 0, VAE_TILE_BLEND, 0, 32, 1, 0},
        {"encode, exact 16 px tiles on 2 lanes", "enc_img.video", 1, VAE_TILE_AUTO, 16, 0, 2, 0},
        {"decode, row bands on 2 lanes (SeedVR2 bands)", "dec_img.latent", 0, VAE_TILE_AUTO, 0, 0, 2, 1},
    };
    int n_run = 0;
    for (size_t i = 0; i < sizeof scs / sizeof *scs; i++) {
        /* on the GPU every try makes a CUDA backend (~0.1 s): the decodes, whole and tiled */
        if (device == VAE_DEVICE_CUDA && (scs[i].encode || scs[i].mode == VAE_TILE_BLEND)) continue;
        if (argc > 3 && !strstr(scs[i].name, argv[3])) continue;
        /* quick (the sanitizer build, 3x slower): whole-frame decode, tiled encode, a group */
        if (quick && i != 0 && i != 3 && i != 5) continue;
        const long before = n_fail;
        n_run++;
        long n = scs[i].bands ? sweep(m2, &scs[i], &lat2)
                              : sweep(m, &scs[i], scs[i].encode ? &img : &lat);
        printf("%s %s: %ld allocations, each %s failing in turn\n",
               n_fail == before ? "PASS" : "FAIL", scs[i].name, n,
               sweep_step(&scs[i]) > 1 ? "n-th" : "one");
    }
    CHECK(n_run > 0, "no scenario's name holds \"%s\"", argc > 3 ? argv[3] : "");
    vae_tensor_free(&lat);
    vae_tensor_free(&img);
    vae_tensor_free(&lat2);
    vae_model_free(m);
    vae_model_free(m2);
    printf("%s: %d failures\n", n_fail ? "FAILED" : "OK", n_fail);
    return n_fail != 0;
}
