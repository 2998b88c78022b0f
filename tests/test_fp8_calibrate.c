/* test_fp8_calibrate.c -- dtype fp8's E4M3 convs chosen by the error budget (api/fp8_calibrate.h),
 * on by default (4e-2), on configurations no count was ever tuned on: synthesised Wan2.1 / Wan2.2
 * decoders of other widths and depths, each decoded in fp8 (CPU emulation) and in fp32 by the
 * same model. The fp32 output is within 1e-5 of the float64 reference (the fixtures), so fp8's
 * error against it is its error against the reference to that margin. Also: a budget of 1e-4
 * keeps no conv in E4M3 (the output is fp32's, exactly), a smaller budget keeps fewer,
 * VAE_FP8_CONVS still wins, a session calibrates only the side it uses (at its first call), a
 * second session takes the choice from the cache file (the same output, no run), a damaged cache
 * line is ignored, and a model with no conv of an E4M3 shape says so once as a warning. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "platform/platform.h"
#include "vae.h"
#include "vae_dev.h"

static int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

/* What the sessions logged: the E4M3 convs they kept, the warnings, the choices made by a
 * calibration or taken from the cache, and the encoders' */
static int kept_decoder, warnings, calibrated, cached, encoder_choices;
static char last_choice[512];
/* the sessions' tune cache (tune_cache option), whose folder holds the fp8 choices */
static char tune_file[512];

static void on_log(int level, const char *msg, void *user) {
    (void)user;
    if (getenv("FP8CAL_DEBUG")) printf("LOG %s\n", msg);
    if (level == VAE_LOG_WARN && strstr(msg, "no conv of this model has an E4M3 shape")) warnings++;
    int n;
    if (strstr(msg, " decoder convs in E4M3") && sscanf(msg, "session: %d", &n) == 1)
        kept_decoder = n;
    if (strncmp(msg, "fp8: ", 5) == 0 && strstr(msg, "decoder"))
        snprintf(last_choice, sizeof last_choice, "%s", msg);
    if (strncmp(msg, "fp8: ", 5) == 0 && strstr(msg, "encoder")) encoder_choices++;
    if (strncmp(msg, "fp8: ", 5) == 0 && strstr(msg, "calibrated in")) calibrated++;
    if (strncmp(msg, "fp8: ", 5) == 0 && strstr(msg, "from the cache")) cached++;
}

/* Decodes seeded N(0, 1) latents [1, z, 3, 6, 5] (another size than the calibration's) with
 * dtype dt, the switches param = value where param >= 0. NULL on failure. */
static float *decode(vae_model *m, int z, vae_dtype dt, int param, int64_t value, size_t *n) {
    vae_session_options o;
    vae_session_options_default(&o);
    o.device = VAE_DEVICE_CPU;
    o.dtype = dt;
    o.tune_cache = tune_file;
    if (param >= 0) vae_session_options_set(&o, (vae_param)param, value);
    vae_session *s;
    kept_decoder = -1;
    if (vae_session_create(&s, m, &o)) {
        printf("session: %s\n", vae_last_error());
        return NULL;
    }
    const int64_t shape[5] = {1, z, 3, 6, 5};
    const size_t count = (size_t)z * 3 * 6 * 5;
    float *x = malloc(count * sizeof *x);
    uint64_t r = 12345;
    for (size_t i = 0; i < count; i++) { /* Box-Muller on an LCG */
        double u[2];
        for (int k = 0; k < 2; k++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            u[k] = ((r >> 11) + 1.0) / 9007199254740993.0;
        }
        x[i] = (float)(sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]));
    }
    vae_tensor in = vae_tensor_dense(5, shape, VAE_DTYPE_F32, x), out;
    float *y = NULL;
    if (vae_decode_tensor(s, &in, &out) == VAE_OK) {
        *n = 1;
        for (int d = 0; d < out.ndim; d++)
            *n *= (size_t)out.shape[d];
        y = malloc(*n * sizeof *y);
        memcpy(y, out.data, *n * sizeof *y);
        vae_tensor_free(&out);
    } else {
        printf("decode: %s\n", vae_last_error());
    }
    free(x);
    vae_session_free(s);
    return y;
}

static double rel_err(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++)
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r += (double)b[i] * b[i];
    return sqrt(d / r);
}

/* The fp8 choice file beside tune_file */
static void choices_file(char *path, size_t len) {
    const char *slash = strrchr(tune_file, '/');
    snprintf(path, len, "%.*sfp8-choices.txt", slash ? (int)(slash - tune_file + 1) : 0, tune_file);
}

/* Damages the cached choice: a line of its key whose kept count disagrees with its set, a line
 * of garbage and one too long. The next session must calibrate again (and get the same output). */
static void damage_cache(void) {
    char path[600], line[1024], key[700] = "";
    choices_file(path, sizeof path);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        char *k = strstr(line, ":kept ");
        if (k) snprintf(key, sizeof key, "%.*s", (int)(k - line), line);
    }
    if (f) fclose(f);
    CHECK(key[0], "no :kept line in %s", path);
    if (!key[0] || !(f = fopen(path, "ab"))) return; /* (binary: the same bytes on Windows) */
    fprintf(f, "%s:kept 1\nnot a line of this cache\n%s:kept %0600d\n", key, key, 3);
    fclose(f);
}

/* A second session of the same model: the choice from the cache, the same output; then with the
 * cache damaged (first configuration only): calibrated again, the same output */
static void check_cache(vae_model *m, int z, const float *y8, size_t n8, int damage) {
    size_t n = 0;
    calibrated = cached = 0;
    float *y = decode(m, z, VAE_DTYPE_FP8, -1, 0, &n);
    CHECK(cached == 1 && calibrated == 0, "second session: %d cached, %d calibrated choices",
          cached, calibrated);
    CHECK(y && n == n8 && memcmp(y, y8, n * sizeof *y) == 0, "the cached choice decodes otherwise");
    free(y);
    if (!damage) return;
    damage_cache();
    calibrated = cached = 0;
    y = decode(m, z, VAE_DTYPE_FP8, -1, 0, &n);
    CHECK(cached == 0 && calibrated == 1, "damaged cache: %d cached, %d calibrated choices", cached,
          calibrated);
    CHECK(y && n == n8 && memcmp(y, y8, n * sizeof *y) == 0,
          "after the damaged cache: another output");
    free(y);
}

/* One configuration: fp8 at the default budget (4e-2) within it plus the margin, the decoder
 * alone calibrated, then the cache, and the checks above */
static void check_config(const char *arch, const char *config, int z, int damage) {
    vae_model *m;
    if (vae_model_synth(&m, arch, config)) {
        CHECK(0, "synth %s %s: %s", arch, config, vae_last_error());
        return;
    }
    size_t n32 = 0, n8 = 0, n0 = 0, nc = 0;
    float *y32 = decode(m, z, VAE_DTYPE_F32, -1, 0, &n32);
    calibrated = cached = encoder_choices = 0;
    float *y8 = decode(m, z, VAE_DTYPE_FP8, -1, 0, &n8); /* the default budget */
    const int kept = kept_decoder;
    printf("%s %s: %s\n", arch, config, last_choice);
    CHECK(calibrated == 1 && cached == 0 && encoder_choices == 0,
          "%s: first session: %d calibrated, %d cached choices, %d of the encoder (never used)",
          arch, calibrated, cached, encoder_choices);
    if (y8) check_cache(m, z, y8, n8, damage);
    float *y0 = decode(m, z, VAE_DTYPE_FP8, VAE_PARAM_FP8_ERROR, 1, &n0);
    const int kept0 = kept_decoder;
    free(decode(m, z, VAE_DTYPE_FP8, VAE_PARAM_FP8_ERROR, 150, &nc));
    const int kept_small = kept_decoder;
    free(decode(m, z, VAE_DTYPE_FP8, VAE_PARAM_FP8_CONVS, 2, &nc));
    const int kept_count = kept_decoder;
    CHECK(y32 && y8 && y0 && n8 == n32 && n0 == n32, "%s: the decodes", arch);
    if (y32 && y8 && y0 && n8 == n32 && n0 == n32) {
        const double e = rel_err(y8, y32, n32);
        printf("%s: %d decoder convs in E4M3, fp8 against fp32: %.3e (budget 4e-2 + margin 1e-2)\n",
               arch, kept, e);
        CHECK(kept > 0, "%s: no conv kept in E4M3", arch);
        CHECK(e <= 5e-2, "%s: fp8 error %.3e over 5e-2", arch, e);
        CHECK(kept0 == 0 && memcmp(y0, y32, n32 * sizeof *y0) == 0,
              "%s: budget 1e-4 kept %d convs, or differs from fp32", arch, kept0);
    }
    CHECK(kept_small >= 0 && kept_small <= kept, "%s: budget 1.5e-2 kept %d, 4e-2 %d", arch,
          kept_small, kept);
    CHECK(kept_count == 2, "%s: VAE_FP8_CONVS=2 kept %d", arch, kept_count);
    if (damage) { /* the environment's count wins over the default budget, not over the API's */
        vae_plat_setenv("VAE_FP8_CONVS", "2");
        free(decode(m, z, VAE_DTYPE_FP8, -1, 0, &nc));
        const int kept_env = kept_decoder;
        free(decode(m, z, VAE_DTYPE_FP8, VAE_PARAM_FP8_ERROR, 400, &nc));
        CHECK(kept_env == 2 && kept_decoder == kept,
              "%s: VAE_FP8_CONVS=2 kept %d (expected 2), with the API's budget %d (expected %d)",
              arch, kept_env, kept_decoder, kept);
        vae_plat_setenv("VAE_FP8_CONVS", NULL);
    }
    free(y32);
    free(y8);
    free(y0);
    vae_model_free(m);
}

/* Wider and deeper than main's, with attention and other temporal steps: shapes of both E4M3
 * kernels (96-filter 3x3x3 convs of 96 or 192 inputs, 128-filter ones). Left out with
 * VAE_TEST_QUICK=1 (the sanitizer builds: the same code as main's, on larger models). */
static void check_wider_configs(void) {
    check_config("wan2.1",
                 "{\"dim\": 96, \"z_dim\": 16, \"dim_mult\": [1, 2, 2], \"num_res_blocks\": 2, "
                 "\"attn_scales\": [], \"temperal_downsample\": [true, false]}",
                 16, 0);
    check_config(
        "wan2.2",
        "{\"dim\": 32, \"dec_dim\": 128, \"z_dim\": 48, \"dim_mult\": [1, 2, 2, 2], "
        "\"num_res_blocks\": 1, \"attn_scales\": [], \"temperal_downsample\": [false, true, "
        "true]}",
        48, 0);
}

int main(void) {
    vae_set_log_callback(on_log, NULL, VAE_LOG_INFO);
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = getenv("TEMP"); /* (Windows) */
    snprintf(tune_file, sizeof tune_file, "%s/vae-test-fp8-%lx/tune.txt",
             tmp && *tmp ? tmp : "/tmp",
             (unsigned long)time(NULL) ^ ((unsigned long)clock() << 20));
    /* widths with E4M3 shapes (inputs a multiple of 64, outputs of 96 or 128 filters), depths and
     * temporal steps the released models do not have */
    check_config("wan2.1",
                 "{\"dim\": 64, \"z_dim\": 16, \"dim_mult\": [1, 2, 2], \"num_res_blocks\": 1, "
                 "\"attn_scales\": [], \"temperal_downsample\": [false, true]}",
                 16, 1);
    check_config("wan2.2",
                 "{\"dim\": 32, \"dec_dim\": 64, \"z_dim\": 48, \"dim_mult\": [1, 2, 2], "
                 "\"num_res_blocks\": 1, \"attn_scales\": [], \"temperal_downsample\": [true, "
                 "false]}",
                 48, 0);
    const char *quick = getenv("VAE_TEST_QUICK");
    if (!quick || strcmp(quick, "1") != 0) check_wider_configs();
    /* a narrow model: no conv of an E4M3 shape, said once per session */
    vae_model *m;
    if (vae_model_synth(&m, "wan2.1",
                        "{\"dim\": 8, \"z_dim\": 16, \"dim_mult\": [1, 2], "
                        "\"num_res_blocks\": 1, \"attn_scales\": [], "
                        "\"temperal_downsample\": [true]}") == VAE_OK) {
        size_t n;
        warnings = 0;
        free(decode(m, 16, VAE_DTYPE_FP8, -1, 0, &n));
        CHECK(warnings == 1, "narrow model: %d warnings, expected 1", warnings);
        vae_model_free(m);
    } else {
        CHECK(0, "synth narrow: %s", vae_last_error());
    }
    char path[600];
    choices_file(path, sizeof path);
    remove(path);
    *strrchr(path, '/') = 0;
    remove(path); /* (the folder, empty now) */
    printf("%s\n", failures ? "FAILED" : "all passed");
    return failures != 0;
}
