/* test_taehv_variants.c -- every upstream TAEHV file name (taew2_1, taehv, taeos1_3, taecvx,
 * taew2_2, taew2_2_super, taehv1_5, taehv1_5_super, taeh3, taeltx_2, taeltx2_3) from its weights
 * alone, and the frame rules upstream keys on the name.
 *
 * Each variant synthesised with {"variant": NAME} and written twice: under a neutral file name
 * with the checkpoint's vae.* metadata made unreadable (so nothing but the tensors' names and
 * shapes tells the configuration: the first variant of that layout is reported, e.g. taew2_1 for
 * taehv's), and under upstream's file name (that name reported). Then: its factors and latent
 * channels, the output shapes of a decode and an encode (taeh3: 5 latents a 17-frame segment, 3
 * dropped; taecvx: an even latent count untrimmed), a decode and an encode through exact tiles
 * equal to the untiled ones, taeh3's segments each starting from a fresh state (a clip given
 * twice encodes its latents twice) and its zero-completed last period, taecvx's untrimmed frames
 * holding the trimmed decode, and a session's calls of several lengths in turn each equal to a
 * fresh session's. The numbers against upstream: bench/taehv_upstream_check.py.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"
#include "test_check.h"
#include "vae.h"

typedef struct variant {
    const char *name, *neutral; /* upstream's file name; what its weights alone report */
    int spatial, temporal, latent;
} variant;

static const variant variants[] = {
    {"taew2_1", "taew2_1", 8, 4, 16},        {"taehv", "taew2_1", 8, 4, 16},
    {"taeos1_3", "taew2_1", 8, 4, 16},       {"taecvx", "taew2_1", 8, 4, 16},
    {"taew2_2", "taew2_2", 16, 4, 48},       {"taew2_2_super", "taew2_2_super", 16, 4, 48},
    {"taehv1_5", "taehv1_5", 16, 4, 32},     {"taehv1_5_super", "taehv1_5_super", 16, 4, 32},
    {"taeh3", "taeh3", 16, 4, 24},           {"taeltx_2", "taeltx_2", 32, 8, 128},
    {"taeltx2_3", "taeltx_2", 32, 8, 128},
};

static void tmp_path(char *buf, size_t n, const char *name) {
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(buf, n, "%s/vae_test_hv%ld_%s.safetensors", tmp, vae_plat_pid(), name);
}

/* The safetensors header's "vae.arch" key renamed in place, so the reader finds no metadata
 * configuration (the weights alone are left). */
static int hide_metadata(const char *path) {
    FILE *f = fopen(path, "r+b");
    unsigned char len8[8];
    if (!f || fread(len8, 1, 8, f) != 8) return f ? fclose(f), -1 : -1;
    size_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
    char *h = malloc(n + 1);
    int rc = h && fread(h, 1, n, f) == n ? 0 : -1;
    char *k = rc ? NULL : (h[n] = 0, strstr(h, "\"vae.arch\""));
    if (k) {
        k[5] = 'X';
        rc = fseek(f, 8, SEEK_SET) || fwrite(h, 1, n, f) != n ? -1 : 0;
    }
    free(h);
    fclose(f);
    return k ? rc : -1;
}

/* The variant name in a model's configuration ("" when none) */
static void variant_of(const vae_model *m, char *out, size_t n) {
    vae_model_info info;
    out[0] = 0;
    const char *v = vae_model_get_info(m, &info) ? NULL : strstr(info.config_json, "\"variant\":\"");
    if (v) snprintf(out, n, "%.*s", (int)strcspn(v + 11, "\""), v + 11);
}

static vae_model *open_as(const variant *v, const char *file, int hide) {
    char path[512], cfg[64];
    tmp_path(path, sizeof path, file);
    snprintf(cfg, sizeof cfg, "{\"variant\":\"%s\"}", v->name);
    vae_model *m = NULL;
    int rc = vae_synth_checkpoint("taehv", cfg, path);
    if (rc == VAE_OK && hide) rc = hide_metadata(path) ? VAE_EINVAL : VAE_OK;
    if (rc == VAE_OK) rc = vae_model_open(&m, path, NULL);
    check(rc == VAE_OK, "%s: written as %s and reopened %s", v->name, file,
          rc ? vae_last_error() : "");
    remove(path);
    return m;
}

static int64_t out_frames(const vae_model *m, int encode, int64_t t, int64_t c, int64_t h,
                          int64_t w) {
    int64_t in[5] = {1, c, t, h, w}, out[5] = {0};
    int nd = 0;
    return vae_model_output_shape(m, encode, in, 5, out, &nd) ? -1 : out[2];
}

static void check_detection(const variant *v) {
    vae_model *m = open_as(v, "model", 1), *named = open_as(v, v->name, 1);
    char a[32] = "", b[32] = "";
    vae_model_info info = {0};
    if (m) variant_of(m, a, sizeof a), vae_model_get_info(m, &info);
    if (named) variant_of(named, b, sizeof b);
    check(m && strcmp(info.arch, "taehv") == 0 && strcmp(a, v->neutral) == 0 &&
              info.spatial_factor == v->spatial && info.temporal_factor == v->temporal &&
              info.latent_channels == v->latent && info.can_encode && info.can_decode,
          "%s: weights alone -> %s (%s), factors %d/%d, %d latent channels", v->name, a,
          m ? info.config_json : "", info.spatial_factor, info.temporal_factor,
          info.latent_channels);
    check(named && strcmp(b, v->name) == 0, "%s: under its own file name -> %s", v->name, b);
    /* frame counts: T latents -> 1 + f (T - 1); F frames -> ceil(F / f); taeh3 and taecvx's */
    const int f = v->temporal, h3 = strcmp(v->name, "taeh3") == 0;
    const int cvx = strcmp(v->name, "taecvx") == 0;
    const int64_t dec3 = out_frames(named, 0, 3, v->latent, 2, 3),
                  dec4 = out_frames(named, 0, 4, v->latent, 2, 3),
                  enc = out_frames(named, 1, 2 * f + 1, 3, v->spatial, v->spatial),
                  enc18 = out_frames(named, 1, 18, 3, v->spatial, v->spatial);
    const int64_t want_dec3 = h3 ? 5 : 1 + f * 2, want_dec4 = h3 ? 5 : cvx ? 16 : 1 + f * 3,
                  want_enc = h3 ? 2 : 3, want_enc18 = h3 ? 7 : (18 + f - 1) / f;
    check(dec3 == want_dec3 && dec4 == want_dec4 && enc == want_enc && enc18 == want_enc18,
          "%s: decode 3 / 4 latents -> %lld / %lld frames, encode %d / 18 frames -> %lld / %lld "
          "latents",
          v->name, (long long)dec3, (long long)dec4, 2 * f + 1, (long long)enc, (long long)enc18);
    vae_model_free(m);
    vae_model_free(named);
}

/* ---- runs ------------------------------------------------------------------------------------ */
static float *filled(int64_t n, unsigned seed, float lo, float hi) {
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; x && i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)(seed >> 8) / (float)(1u << 24);
    }
    return x;
}

/* op on in ([1,c,t,h,w]) in a session with exact tiles of tile x tile pixels (0: untiled) */
static int run(const vae_model *m, int encode, int tile, const vae_tensor *in, vae_tensor *out) {
    vae_session_options so;
    vae_session_options_default(&so);
    so.tile_height = so.tile_width = tile;
    so.threads = 1; /* tiny frames: threads would only wait on each other */
    vae_session *s = NULL;
    vae_plan_info plan;
    int rc = vae_session_create(&s, m, &so);
    if (rc == VAE_OK && tile) rc = vae_session_plan(s, encode, in->shape, 5, &plan);
    if (rc == VAE_OK && tile && plan.tiles_y * plan.tiles_x < 2)
        rc = VAE_EINVAL, fprintf(stderr, "%d x %d tiles, expected several\n", plan.tiles_y,
                                 plan.tiles_x);
    if (rc == VAE_OK) rc = encode ? vae_encode_tensor(s, in, out) : vae_decode_tensor(s, in, out);
    vae_session_free(s);
    return rc;
}

static double rel_diff(const vae_tensor *a, const vae_tensor *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        const double x = ((const float *)a->data)[i], y = ((const float *)b->data)[i];
        num += (x - y) * (x - y), den += y * y;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int64_t numel(const vae_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* a decode of 1 latent of 2x2 and an encode of f + 1 frames of 2s x 2s: exact tiles of s
 * pixels (2x2 of them) equal to whole frames */
static void check_tiles(const variant *v) {
    vae_model *m = NULL;
    char cfg[64];
    snprintf(cfg, sizeof cfg, "{\"variant\":\"%s\"}", v->name);
    int rc = vae_model_synth(&m, "taehv", cfg);
    const int s = v->spatial, f = v->temporal;
    const int64_t lat[5] = {1, v->latent, 1, 2, 2}, vid[5] = {1, 3, f + 1, 2 * s, 2 * s};
    float *zl = filled(4 * v->latent, 7, -3, 3), *zv = filled(3 * (f + 1) * 4 * s * s, 9, 0, 1);
    vae_tensor l = vae_tensor_dense(5, lat, VAE_DTYPE_F32, zl),
               x = vae_tensor_dense(5, vid, VAE_DTYPE_F32, zv);
    for (int encode = 0; encode < 2; encode++) {
        vae_tensor whole = {0}, tiled = {0};
        if (rc == VAE_OK) rc = run(m, encode, 0, encode ? &x : &l, &whole);
        if (rc == VAE_OK) rc = run(m, encode, s, encode ? &x : &l, &tiled);
        const double d = rc ? 1 : rel_diff(&tiled, &whole, numel(&whole));
        check(rc == VAE_OK && numel(&whole) == numel(&tiled) && d <= 1e-6,
              "%s: %s through exact tiles of %d px = whole frames (%.1e) %s", v->name,
              encode ? "encode" : "decode", s, d, rc ? vae_last_error() : "");
        vae_tensor_free(&whole);
        vae_tensor_free(&tiled);
    }
    free(zl);
    free(zv);
    vae_model_free(m);
}

/* taeh3: a clip of 17 frames given twice encodes to its 5 segment latents twice (each segment
 * from a fresh state), less the last 3; one latent decodes to one frame and 4 zero frames */
static void check_h3(void) {
    vae_model *m = NULL;
    int rc = vae_model_synth(&m, "taehv", "{\"variant\":\"taeh3\"}");
    const int64_t plane = 16 * 16, shape[5] = {1, 3, 34, 16, 16};
    float *clip = filled(3 * 17 * plane, 11, 0, 1), *two = malloc(3 * 34 * plane * sizeof *two);
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 2; k++)
            memcpy(two + (c * 34 + k * 17) * plane, clip + c * 17 * plane, 17 * plane * 4);
    vae_tensor x = vae_tensor_dense(5, shape, VAE_DTYPE_F32, two), z = {0}, y = {0};
    if (rc == VAE_OK) rc = run(m, 1, 0, &x, &z);
    int same = rc == VAE_OK && z.shape[2] == 7;
    for (int c = 0; same && c < 24; c++) /* latents 5, 6 = 0, 1 (1x1 each) */
        same = fabsf(((float *)z.data)[c * 7 + 5] - ((float *)z.data)[c * 7]) < 1e-6f &&
               fabsf(((float *)z.data)[c * 7 + 6] - ((float *)z.data)[c * 7 + 1]) < 1e-6f;
    check(same, "taeh3: 34 frames (a clip twice) -> 7 latents, the second segment's = the first's "
          "%s", rc ? vae_last_error() : "");
    float *zl = filled(24 * 4, 5, -3, 3);
    vae_tensor l = vae_tensor_dense(5, (int64_t[]){1, 24, 1, 2, 2}, VAE_DTYPE_F32, zl);
    if (rc == VAE_OK) rc = run(m, 0, 0, &l, &y);
    int zeros = rc == VAE_OK && y.shape[2] == 5 && y.shape[3] == 32;
    double first = 0;
    for (int c = 0; zeros && c < 3; c++)
        for (int t = 0; t < 5; t++)
            for (int i = 0; i < 32 * 32; i++) {
                const float val = ((float *)y.data)[(c * 5 + t) * 1024 + i];
                if (t == 0) first += val;
                zeros = zeros && (t == 0 || val == 0.0f);
            }
    check(zeros && first > 0, "taeh3: 1 latent -> 5 frames, the last 4 zeros (upstream's padded "
          "period) %s", rc ? vae_last_error() : "");
    vae_tensor_free(&z);
    vae_tensor_free(&y);
    free(clip), free(two), free(zl);
    vae_model_free(m);
}

/* taecvx: 2 latents -> 8 frames, whose last 5 are taew2_1's (trimmed) decode of the same weights */
static void check_cvx(void) {
    vae_model *cvx = NULL, *w21 = NULL;
    int rc = vae_model_synth(&cvx, "taehv", "{\"variant\":\"taecvx\"}");
    if (rc == VAE_OK) rc = vae_model_synth(&w21, "taehv", "{\"variant\":\"taew2_1\"}");
    float *zl = filled(16 * 2 * 4, 3, -3, 3);
    vae_tensor l = vae_tensor_dense(5, (int64_t[]){1, 16, 2, 2, 2}, VAE_DTYPE_F32, zl), a = {0},
               b = {0};
    if (rc == VAE_OK) rc = run(cvx, 0, 0, &l, &a);
    if (rc == VAE_OK) rc = run(w21, 0, 0, &l, &b);
    double num = 0, den = 0;
    const int ok = rc == VAE_OK && a.shape[2] == 8 && b.shape[2] == 5 && a.shape[3] == 16;
    for (int c = 0; ok && c < 3; c++) /* channel c's frames 3..7 of 8 against its 5 */
        for (int i = 0; i < 5 * 256; i++) {
            const double x = ((float *)a.data)[(c * 8 + 3) * 256 + i],
                         y = ((float *)b.data)[c * 5 * 256 + i];
            num += (x - y) * (x - y), den += y * y;
        }
    const double d = ok && den > 0 ? sqrt(num / den) : 1;
    check(d <= 1e-6, "taecvx: 2 latents -> %lld frames, the last 5 = taew2_1's %s",
          rc ? 0LL : (long long)a.shape[2], rc ? vae_last_error() : "");
    vae_tensor_free(&a);
    vae_tensor_free(&b);
    free(zl);
    vae_model_free(cvx);
    vae_model_free(w21);
}

/* A frame rule's calls in one session, of lengths in turn: each as a fresh session's. A call
 * that takes larger steps leaves the session's program stepping several chunks at once; the
 * next call's frame counts must still be the model's (else a 6-latent decode after a 5-latent
 * one leaves 17 of its 22 frames unwritten). */
static void check_rules_in_one_session(const char *name, int latent) {
    vae_model *m = NULL;
    char cfg[64];
    snprintf(cfg, sizeof cfg, "{\"variant\":\"%s\"}", name);
    int rc = vae_model_synth(&m, "taehv", cfg);
    vae_session_options so;
    vae_session_options_default(&so);
    so.threads = 1;
    vae_session *s = NULL;
    if (rc == VAE_OK) rc = vae_session_create(&s, m, &so);
    static const int lengths[2][3] = {{5, 6, 2}, {17, 34, 20}}; /* latents; frames */
    for (int encode = 0; encode < 2 && rc == VAE_OK; encode++)
        for (int i = 0; i < 3 && rc == VAE_OK; i++) {
            const int c = encode ? 3 : latent, side = encode ? 16 : 2, t = lengths[encode][i];
            const int64_t shape[5] = {1, c, t, side, side};
            const float lo = encode ? 0 : -3, hi = encode ? 1 : 3;
            float *x = filled((int64_t)c * t * side * side, 13 + i, lo, hi);
            vae_tensor in = vae_tensor_dense(5, shape, VAE_DTYPE_F32, x), got = {0}, fresh = {0};
            rc = encode ? vae_encode_tensor(s, &in, &got) : vae_decode_tensor(s, &in, &got);
            vae_plan_info plan;
            if (rc == VAE_OK && i == 0) { /* the case: this call left the program in larger steps */
                rc = vae_session_plan(s, encode, shape, 5, &plan);
                check(rc == VAE_OK && plan.step_frames > (encode ? 4 : 1),
                      "%s: the first %s took steps of %d frames (several of the model's chunks)",
                      name, encode ? "encode" : "decode", rc ? 0 : plan.step_frames);
            }
            if (rc == VAE_OK) rc = run(m, encode, 0, &in, &fresh);
            const int same = rc == VAE_OK && numel(&got) == numel(&fresh) &&
                             memcmp(got.data, fresh.data, (size_t)numel(&got) * 4) == 0;
            check(same,
                  "%s: %s of %d %s after %d other calls of the session = a fresh session's %s",
                  name, encode ? "encode" : "decode", t, encode ? "frames" : "latents",
                  encode * 3 + i, rc ? vae_last_error() : "");
            vae_tensor_free(&got);
            vae_tensor_free(&fresh);
            free(x);
        }
    check(rc == VAE_OK, "%s: calls of lengths in turn %s", name, rc ? vae_last_error() : "");
    vae_session_free(s);
    vae_model_free(m);
}

/* arguments: only that part (detect, tiles, rules), of that variant; none: all */
int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : "", *name = argc > 2 ? argv[2] : NULL;
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        if (name && strcmp(name, variants[i].name) != 0) continue;
        if (strstr("detect", only)) check_detection(&variants[i]);
        if (strstr("tiles", only)) check_tiles(&variants[i]);
    }
    if (strstr("rules", only)) {
        check_h3();
        check_cvx();
        check_rules_in_one_session("taeh3", 24);
        check_rules_in_one_session("taecvx", 16);
    }
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
