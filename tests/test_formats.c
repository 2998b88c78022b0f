/* test_formats.c -- the tensor-file readers (safetensors, PyTorch zip, GGUF, .npy) and the
 * safetensors writer: real shared files, files written here byte by byte with known values, and
 * broken inputs (truncated, empty, garbage lengths, corrupted bytes) that must fail cleanly.
 * Set VAE_TEST_VERBOSE=1 to list every tensor of the real files. */
#define _GNU_SOURCE
#include "api/api.h"
#include "core/core.h"
#include "core/dtype.h"
#include "formats/store.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#ifndef VAE_SHARED_DIR
#define VAE_SHARED_DIR "../shared"
#endif

static int passed, failed;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (cond) passed++;                                                                        \
        else {                                                                                     \
            failed++;                                                                              \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("  [last error: %s]\n", vae_last_error());                                      \
        }                                                                                          \
    } while (0)

/* ---- temporary files ---- */

static char tmpdir[512];
static int tmp_counter;
static void tmp_path(char *out, size_t len, const char *ext) {
    snprintf(out, len, "%s/vae_test_formats_%ld_%d%s", tmpdir, (long)getpid(), tmp_counter++, ext);
}
/* 1 when path's folder holds no "STEM.tmp.*" (STEM: path without ext) */
static int no_temp_left(const char *path, const char *ext) {
    const char *slash = strrchr(path, '/');
    char dir[600], prefix[600];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    snprintf(prefix, sizeof prefix, "%.*s.tmp.", (int)(strlen(slash ? slash + 1 : path) - strlen(ext)),
             slash ? slash + 1 : path);
    DIR *d = opendir(dir);
    int clean = 1;
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, prefix, strlen(prefix))) clean = 0;
    if (d) closedir(d);
    return clean;
}
static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}
/* data written to a new temporary file (its name into p), then opened with no error left over */
static int open_written(char *p, size_t len, const char *ext, const void *data, size_t n,
                        vae_store **s) {
    tmp_path(p, len, ext);
    write_file(p, data, n);
    *s = NULL;
    vae_error_clear();
    return vae_store_open(s, p);
}
static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(sz > 0 ? (size_t)sz : 1);
    *n = b ? fread(b, 1, (size_t)sz, f) : 0;
    fclose(f);
    return b;
}

/* ---- a growing byte buffer for building files ---- */

typedef struct {
    uint8_t *b;
    size_t n, cap;
} buf;
static void put(buf *x, const void *p, size_t n) {
    if (x->n + n > x->cap) {
        x->cap = (x->n + n) * 2 + 64;
        x->b = realloc(x->b, x->cap);
    }
    memcpy(x->b + x->n, p, n);
    x->n += n;
}
static void put_u8(buf *x, unsigned v) { uint8_t b = (uint8_t)v; put(x, &b, 1); }
static void put_le(buf *x, uint64_t v, int n) {
    for (int i = 0; i < n; i++) put_u8(x, (unsigned)(v >> (8 * i)) & 0xff);
}
static void put_str(buf *x, const char *s) { put(x, s, strlen(s)); }
static void pad_to(buf *x, size_t align) {
    while (x->n % align) put_u8(x, 0);
}

/* Opens a file expected to be rejected: a negative code and a message, never a crash. */
static void expect_fail(const char *path, const char *what) {
    vae_store *s = NULL;
    vae_error_clear();
    int rc = vae_store_open(&s, path);
    CHECK(rc < 0 && vae_last_error()[0] != 0 && s == NULL, "%s: expected an error, got rc=%d", what, rc);
    vae_store_free(s);
}
static void expect_fail_bytes(const void *data, size_t n, const char *what) {
    char p[600];
    tmp_path(p, sizeof p, ".bin");
    write_file(p, data, n);
    expect_fail(p, what);
    remove(p);
}
/* Opens a file that may or may not be valid (fuzzing): only a clean outcome is required. */
static void open_any(const void *data, size_t n) {
    char p[600];
    vae_store *s = NULL;
    int rc = open_written(p, sizeof p, ".bin", data, n, &s);
    if (rc == 0) { /* a valid result must convert without reading out of bounds */
        for (int i = 0; i < s->n; i++) {
            int64_t ne = vae_store_numel(&s->tensors[i]);
            if (ne > (1 << 20)) continue;
            float *f = malloc((size_t)(ne ? ne : 1) * sizeof *f);
            vae_error_clear();
            vae_store_to_f32(s, &s->tensors[i], f);
            free(f);
        }
    } else {
        CHECK(vae_last_error()[0] != 0, "fuzzed file rejected without a message (rc=%d)", rc);
    }
    vae_store_free(s);
    remove(p);
}

/* Truncations at every length (small files) or at a few points (large ones) must all fail. */
static void truncations(const uint8_t *d, size_t n, const char *what, int every) {
    size_t pts[] = {1, 4, 7, 8, 9, 12, 30, 64, n / 3, n / 2, n - 100, n - 1};
    if (every) {
        for (size_t k = 0; k < n; k++) expect_fail_bytes(d, k, what);
    } else {
        for (size_t i = 0; i < sizeof pts / sizeof *pts; i++)
            if (pts[i] < n) expect_fail_bytes(d, pts[i], what);
    }
}
/* Every byte flipped in a few ways: any outcome but a crash (ASan watches the reads). */
static void fuzz_bytes(const uint8_t *d, size_t n) {
    uint8_t *c = malloc(n);
    for (size_t i = 0; i < n; i++) {
        static const uint8_t vals[] = {0x00, 0xff, 0x7f};
        for (int v = 0; v < 3; v++) {
            memcpy(c, d, n);
            c[i] = vals[v] == d[i] ? (uint8_t)(d[i] ^ 0x80) : vals[v];
            open_any(c, n);
        }
    }
    free(c);
}

static void list_tensors(const vae_store *s, int all) {
    printf("  %s: %d tensors (%s)\n", s->path, s->n, s->format);
    for (int i = 0; i < s->n && (all || i < 10); i++) {
        char sh[128];
        const vae_store_tensor *t = &s->tensors[i];
        printf("    %-40s %-5s %s\n", t->name, vae_storage_type_name(t->type), vae_shape_str(t->shape, t->ndim, sh, sizeof sh));
    }
}

static int shape_is(const vae_store_tensor *t, int ndim, const int64_t *shape) {
    if (!t || t->ndim != ndim) return 0;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i]) return 0;
    return 1;
}

static float *to_f32(const vae_store *s, const vae_store_tensor *t) {
    int64_t n = vae_store_numel(t);
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    vae_error_clear();
    if (vae_store_to_f32(s, t, f) != 0) {
        free(f);
        return NULL;
    }
    return f;
}

static int all_finite(const float *f, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(f[i])) return 0;
    return 1;
}

/* ---- real files ---- */

static void test_wan_safetensors(void) {
    vae_store *a = NULL, *b = NULL;
    vae_error_clear();
    int ra = vae_store_open(&a, VAE_SHARED_DIR "/fixtures/wan21_tiny.safetensors");
    int rb = vae_store_open(&b, VAE_SHARED_DIR "/fixtures/wan21_tiny.diffusers.safetensors");
    CHECK(ra == 0 && rb == 0, "open wan21_tiny safetensors: %d %d", ra, rb);
    if (ra || rb) goto done;
    CHECK(!strcmp(a->format, "safetensors"), "format %s", a->format);
    CHECK(a->n == 194 && b->n == 194, "tensor counts %d %d (expected 194)", a->n, b->n);
    const char *pairs[][2] = {{"decoder.conv1.weight", "decoder.conv_in.weight"},
                              {"encoder.conv1.weight", "encoder.conv_in.weight"},
                              {"decoder.conv1.bias", "decoder.conv_in.bias"}};
    const vae_store_tensor *w = vae_store_find(a, "decoder.conv1.weight");
    CHECK(shape_is(w, 5, (int64_t[]){32, 16, 3, 3, 3}) && w->type == VAE_ST_F32, "decoder.conv1.weight shape");
    CHECK(shape_is(vae_store_find(a, "conv1.weight"), 5, (int64_t[]){32, 32, 1, 1, 1}), "conv1.weight shape");
    CHECK(shape_is(vae_store_find(a, "encoder.conv1.weight"), 5, (int64_t[]){8, 3, 3, 3, 3}), "encoder.conv1.weight");
    CHECK(vae_store_find(a, "decoder.conv_in.weight") == NULL && vae_store_find(a, "") == NULL, "absent names");
    for (int i = 0; i < 3; i++) {
        const vae_store_tensor *x = vae_store_find(a, pairs[i][0]), *y = vae_store_find(b, pairs[i][1]);
        CHECK(x && y, "pair %s / %s present", pairs[i][0], pairs[i][1]);
        if (!x || !y) continue;
        CHECK(x->ndim == y->ndim && !memcmp(x->shape, y->shape, sizeof x->shape), "pair %s shapes", pairs[i][0]);
        float *fx = to_f32(a, x), *fy = to_f32(b, y);
        int64_t n = vae_store_numel(x);
        CHECK(fx && fy && !memcmp(fx, fy, (size_t)n * 4) && all_finite(fx, n), "pair %s values equal", pairs[i][0]);
        free(fx);
        free(fy);
    }
    /* every tensor converts and is finite */
    int ok = 1;
    for (int i = 0; i < a->n; i++) {
        float *f = to_f32(a, &a->tensors[i]);
        ok &= f && all_finite(f, vae_store_numel(&a->tensors[i]));
        free(f);
    }
    CHECK(ok, "all wan21_tiny tensors convert");
done:
    vae_store_free(a);
    vae_store_free(b);
}

static void test_taef2(int verbose) {
    const char *files[] = {VAE_SHARED_DIR "/models/taef2_encoder.pth", VAE_SHARED_DIR "/models/taef2_decoder.pth"};
    for (int k = 0; k < 2; k++) {
        vae_store *s = NULL;
        vae_error_clear();
        int rc = vae_store_open(&s, files[k]);
        CHECK(rc == 0, "open %s: %d", files[k], rc);
        if (rc) continue;
        list_tensors(s, verbose);
        CHECK(!strcmp(s->format, "pth") && s->n > 10, "%s: format %s, %d tensors", files[k], s->format, s->n);
        int all_f16 = 1, ok = 1;
        for (int i = 0; i < s->n; i++) {
            all_f16 &= s->tensors[i].type == VAE_ST_F16;
            float *f = to_f32(s, &s->tensors[i]);
            ok &= f && all_finite(f, vae_store_numel(&s->tensors[i]));
            free(f);
        }
        CHECK(all_f16, "%s: all tensors fp16", files[k]);
        CHECK(ok, "%s: all tensors convert to finite float32", files[k]);
        if (k == 0) {
            CHECK(shape_is(vae_store_find(s, "0.weight"), 4, (int64_t[]){64, 3, 3, 3}), "encoder 0.weight [64,3,3,3]");
            CHECK(shape_is(vae_store_find(s, "0.bias"), 1, (int64_t[]){64}), "encoder 0.bias [64]");
        } else {
            /* values cross-checked against Python's own unpickling of the file */
            const vae_store_tensor *t = vae_store_find(s, "3.pool.0.weight");
            float *f = t ? to_f32(s, t) : NULL;
            CHECK(f && shape_is(t, 4, (int64_t[]){256, 64, 1, 1}) && f[0] == 0.034576416015625f &&
                      f[1] == -0.13427734375f && f[2] == -0.105224609375f && f[3] == 0.06396484375f,
                  "decoder 3.pool.0.weight [256,64,1,1] and its first values");
            free(f);
            CHECK(shape_is(vae_store_find(s, "1.weight"), 4, (int64_t[]){64, 32, 3, 3}), "decoder 1.weight [64,32,3,3]");
        }
        CHECK(s->n == 79, "%s: 79 tensors (got %d)", files[k], s->n);
        vae_store_free(s);
    }
}

static void test_latents(void) {
    vae_store *s = NULL;
    vae_error_clear();
    int rc = vae_store_open(&s, VAE_SHARED_DIR "/media/wan21_latents_1x16x16x40x64.pth");
    CHECK(rc == 0, "open latents: %d", rc);
    if (rc) return;
    CHECK(s->n == 1 && !strcmp(s->tensors[0].name, ""), "latents: one tensor named \"\" (%d)", s->n);
    const vae_store_tensor *t = vae_store_find(s, "");
    CHECK(t && t->type == VAE_ST_BF16 && shape_is(t, 5, (int64_t[]){1, 16, 16, 40, 64}), "latents bf16 [1,16,16,40,64]");
    if (t) {
        float *f = to_f32(s, t);
        int64_t n = vae_store_numel(t);
        double sum2 = 0;
        for (int64_t i = 0; f && i < n; i++) sum2 += (double)f[i] * f[i];
        CHECK(f && all_finite(f, n) && sum2 > 0, "latents finite and non-zero (rms %g)", f ? sqrt(sum2 / (double)n) : 0.0);
        CHECK(f && f[0] == -0.0732421875f && f[1] == -0.12158203125f && f[n - 1] == 0.216796875f,
              "latents first/last values (cross-checked with Python)");
        free(f);
    }
    vae_store_free(s);
}

/* ---- safetensors round trip ---- */

static void test_roundtrip(void) {
    float a[24], b[5] = {1e-8f, -65504.f, 70000.f, 3.14159265f, -0.0f}, c[1] = {42.5f};
    for (int i = 0; i < 24; i++) a[i] = (float)(i - 12) * 0.173f;
    const char *weird = "w\"e\\ird/\xc3\xa9 name";
    vae_out_tensor ts[] = {
        {"layer.a", 3, {2, 3, 4}, a},
        {weird, 1, {5}, b},
        {"scalar", 0, {0}, c},
        {"empty", 2, {0, 3}, NULL},
    };
    vae_storage_type types[] = {VAE_ST_F32, VAE_ST_F16, VAE_ST_BF16};
    for (int k = 0; k < 3; k++) {
        char p[600];
        tmp_path(p, sizeof p, ".safetensors");
        vae_error_clear();
        int rc = vae_safetensors_write(p, ts, 4, types[k]);
        CHECK(rc == 0, "write %s: %d", vae_storage_type_name(types[k]), rc);
        CHECK(no_temp_left(p, ".safetensors"), "no temporary file left behind");
        vae_store *s = NULL;
        rc = vae_store_open(&s, p);
        CHECK(rc == 0 && s->n == 4, "reopen %s: rc %d", vae_storage_type_name(types[k]), rc);
        if (rc == 0) {
            for (int i = 0; i < 4; i++) {
                const vae_store_tensor *t = vae_store_find(s, ts[i].name);
                CHECK(t && t->type == types[k] && shape_is(t, ts[i].ndim, ts[i].shape), "tensor '%s' listed", ts[i].name);
                if (!t) continue;
                int64_t n = vae_store_numel(t);
                float *f = to_f32(s, t);
                int same = f != NULL;
                for (int64_t j = 0; f && j < n; j++) {
                    float x = ts[i].data[j];
                    float want = types[k] == VAE_ST_F32 ? x
                                 : types[k] == VAE_ST_F16 ? vae_f16_to_f32(vae_f32_to_f16(x))
                                                          : vae_bf16_to_f32(vae_f32_to_bf16(x));
                    same &= memcmp(&f[j], &want, 4) == 0;
                }
                CHECK(same, "tensor '%s' values after %s round trip", ts[i].name, vae_storage_type_name(types[k]));
                free(f);
            }
            /* 8-byte aligned data region, as the reference writer does */
            uint64_t hl;
            memcpy(&hl, s->map, 8);
            CHECK(hl % 8 == 0, "header length %llu padded to 8", (unsigned long long)hl);
        }
        vae_store_free(s);
        remove(p);
    }
    /* metadata pairs survive a round trip; other formats and absent keys give NULL */
    {
        char p[600];
        tmp_path(p, sizeof p, ".safetensors");
        const char *keys[] = {"vae.arch", "vae.config", "vae.arch"};
        const char *vals[] = {"first", "{\"dim\": 8, \"quote\": \"\\\"\"}", "wan2.1"};
        vae_error_clear();
        int rc = vae_safetensors_write_meta(p, ts, 1, VAE_ST_F32, keys, vals, 3);
        vae_store *s = NULL;
        if (rc == 0) rc = vae_store_open(&s, p);
        CHECK(rc == 0, "write/read with metadata: rc %d", rc);
        if (rc == 0) {
            const char *a = vae_store_metadata(s, "vae.arch"), *c = vae_store_metadata(s, "vae.config");
            CHECK(a && !strcmp(a, "wan2.1") && c && !strcmp(c, vals[1]), "metadata values (last key wins)");
            const char *f = vae_store_metadata(s, "format");
            CHECK(f && !strcmp(f, "pt") && !vae_store_metadata(s, "absent"), "format=pt added, absent key NULL");
            vae_store_free(s);
        }
        remove(p);
        vae_error_clear();
        CHECK(vae_safetensors_write_meta(p, ts, 1, VAE_ST_F32, keys, NULL, 1) == VAE_EINVAL, "NULL metadata values rejected");
        vae_store *w = NULL;
        if (vae_store_open(&w, VAE_SHARED_DIR "/fixtures/wan21_tiny.safetensors") == 0) {
            const char *f = vae_store_metadata(w, "format");
            CHECK(f && !strcmp(f, "pt") && !vae_store_metadata(w, "vae.arch"), "wan21_tiny metadata format=pt");
            vae_store_free(w);
        }
    }
    /* bad arguments: no file, no crash */
    char p[600];
    tmp_path(p, sizeof p, ".safetensors");
    vae_out_tensor dup[] = {{"x", 1, {2}, a}, {"x", 1, {2}, a}};
    vae_out_tensor neg[] = {{"x", 1, {-2}, a}};
    vae_error_clear();
    CHECK(vae_safetensors_write(p, dup, 2, VAE_ST_F32) == VAE_EINVAL && access(p, F_OK) != 0, "duplicate names rejected");
    vae_error_clear();
    CHECK(vae_safetensors_write(p, neg, 1, VAE_ST_F32) == VAE_EINVAL, "negative shape rejected");
    vae_error_clear();
    CHECK(vae_safetensors_write(p, ts, 1, VAE_ST_Q8_0) == VAE_EINVAL, "Q8_0 output rejected");
    vae_error_clear();
    CHECK(vae_safetensors_write("/nonexistent-dir/x.safetensors", ts, 1, VAE_ST_F32) == VAE_EIO && vae_last_error()[0],
          "unwritable path -> VAE_EIO");
}

/* Hand-made safetensors with a given header and data size: the header checks. */
static void st_case(const char *json, size_t data_bytes, int expect_ok, const char *what) {
    buf x = {0};
    put_le(&x, strlen(json), 8);
    put_str(&x, json);
    for (size_t i = 0; i < data_bytes; i++) put_u8(&x, (unsigned)i);
    if (expect_ok) {
        char p[600];
        vae_store *s = NULL;
        int rc = open_written(p, sizeof p, ".safetensors", x.b, x.n, &s);
        CHECK(rc == 0, "%s: expected to open, rc %d", what, rc);
        vae_store_free(s);
        remove(p);
    } else {
        expect_fail_bytes(x.b, x.n, what);
    }
    free(x.b);
}

static void test_safetensors_bad(void) {
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 1, "minimal valid");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}   ", 8, 1, "trailing spaces");
    st_case("{\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3, 1, "other dtype listed");
    /* an unknown dtype: at least one bit per element (a sub-byte type fits, 2^40 elements in 4 bytes do not) */
    st_case("{\"a\":{\"dtype\":\"Q9\",\"shape\":[32],\"data_offsets\":[0,4]}}", 4, 1, "unknown dtype, 32 elements in 4 bytes");
    st_case("{\"a\":{\"dtype\":\"Q9\",\"shape\":[33],\"data_offsets\":[0,4]}}", 4, 0, "unknown dtype, 33 elements in 4 bytes");
    st_case("{\"a\":{\"dtype\":\"Q9\",\"shape\":[1099511627776],\"data_offsets\":[0,4]}}", 4, 0,
            "unknown dtype, 2^40 elements in 4 bytes");
    st_case("{\"__metadata__\":{\"k\":1,\"l\":[\"x\"]},\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]}}", 3, 1,
            "non-string metadata ignored");
    st_case("{\"__metadata__\":5}", 0, 1, "no tensors, odd metadata");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, 0, "nbytes != shape*dtype");
    st_case("{\"a\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,4]}}", 4, 0, "nbytes != shape (other dtype)");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 7, 0, "data past end");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, 0, "overlapping data");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
            "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, 0, "duplicate names");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, 0, "shape overflow");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, 0, "negative dim");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}", 8, 0, "fractional dim");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, 0, "reversed offsets");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,1e300]}}", 8, 0, "huge offset");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, 0, "missing offsets");
    st_case("{\"a\":[1,2]}", 8, 0, "entry not an object");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, 0, "9 dims");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, 0, "unterminated JSON");
    st_case("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}xyz", 8, 0, "garbage after JSON");
    st_case("{\"a\" {\"dtype\":\"F32\"}}", 8, 0, "invalid JSON");
    /* a header length far beyond the file, and one that overflows when added to 8 */
    uint8_t h[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    expect_fail_bytes(h, 16, "header length 2^64-1");
    h[7] = 0x00, h[6] = 0x00;
    expect_fail_bytes(h, 16, "header length 2^48");
}

/* ---- GGUF written byte by byte ---- */

static void gg_str(buf *x, const char *s) {
    put_le(x, strlen(s), 8);
    put_str(x, s);
}

/* Q8_0 block: fp16 scale, 32 int8. Values scale * (j - 16 + b). */
static void q8_block(buf *x, float scale, int b) {
    put_le(x, vae_f32_to_f16(scale), 2);
    for (int j = 0; j < 32; j++) put_u8(x, (unsigned)(uint8_t)(int8_t)(j - 16 + b));
}

static buf make_gguf(void) {
    buf x = {0};
    put_str(&x, "GGUF");
    put_le(&x, 3, 4);
    put_le(&x, 5, 8); /* tensors */
    put_le(&x, 6, 8); /* metadata pairs */
    gg_str(&x, "general.architecture"); put_le(&x, 8, 4); gg_str(&x, "test");
    gg_str(&x, "general.alignment"); put_le(&x, 4, 4); put_le(&x, 64, 4);
    gg_str(&x, "some.f32"); put_le(&x, 6, 4); put_le(&x, 0x3f800000, 4);
    gg_str(&x, "some.bool"); put_le(&x, 7, 4); put_u8(&x, 1);
    gg_str(&x, "some.strings"); put_le(&x, 9, 4); put_le(&x, 8, 4); put_le(&x, 2, 8); gg_str(&x, "ab"); gg_str(&x, "");
    gg_str(&x, "some.u64s"); put_le(&x, 9, 4); put_le(&x, 10, 4); put_le(&x, 3, 8); put_le(&x, 1, 8); put_le(&x, 2, 8); put_le(&x, 3, 8);
    /* infos: name, n_dims, ne (innermost first), type, offset (multiples of 64) */
    gg_str(&x, "f32t"); put_le(&x, 2, 4); put_le(&x, 4, 8); put_le(&x, 3, 8); put_le(&x, 0, 4); put_le(&x, 0, 8);
    gg_str(&x, "f16t"); put_le(&x, 1, 4); put_le(&x, 8, 8); put_le(&x, 1, 4); put_le(&x, 64, 8);
    gg_str(&x, "bf16t"); put_le(&x, 2, 4); put_le(&x, 2, 8); put_le(&x, 2, 8); put_le(&x, 30, 4); put_le(&x, 128, 8);
    gg_str(&x, "q4t"); put_le(&x, 1, 4); put_le(&x, 32, 8); put_le(&x, 2, 4); put_le(&x, 192, 8);
    gg_str(&x, "q8t"); put_le(&x, 2, 4); put_le(&x, 64, 8); put_le(&x, 2, 8); put_le(&x, 8, 4); put_le(&x, 256, 8);
    pad_to(&x, 64);
    size_t base = x.n;
    for (int i = 0; i < 12; i++) { float v = (float)i * 0.5f; put(&x, &v, 4); }
    pad_to(&x, 64);
    for (int i = 0; i < 8; i++) put_le(&x, vae_f32_to_f16((float)i - 3.25f), 2);
    pad_to(&x, 64);
    for (int i = 0; i < 4; i++) put_le(&x, vae_f32_to_bf16((float)i * 1.5f + 0.5f), 2);
    while (x.n < base + 192) put_u8(&x, 0);
    for (int i = 0; i < 18; i++) put_u8(&x, (unsigned)i);
    while (x.n < base + 256) put_u8(&x, 0);
    q8_block(&x, 0.5f, 0); q8_block(&x, 0.25f, 1); q8_block(&x, 2.0f, 2); q8_block(&x, 1.0f, 3);
    return x; /* the last tensor ends exactly at the end of the file */
}

static void test_gguf(void) {
    buf x = make_gguf();
    char p[600];
    vae_store *s = NULL;
    int rc = open_written(p, sizeof p, ".gguf", x.b, x.n, &s);
    CHECK(rc == 0, "open generated gguf: %d", rc);
    if (rc == 0) {
        CHECK(!strcmp(s->format, "gguf") && s->n == 5, "gguf: %s, %d tensors", s->format, s->n);
        const vae_store_tensor *t = vae_store_find(s, "f32t");
        CHECK(t && t->type == VAE_ST_F32 && shape_is(t, 2, (int64_t[]){3, 4}), "f32t [3,4]");
        float *f = t ? to_f32(s, t) : NULL;
        int ok = f != NULL;
        for (int i = 0; f && i < 12; i++) ok &= f[i] == (float)i * 0.5f;
        CHECK(ok, "f32t values");
        free(f);
        t = vae_store_find(s, "f16t");
        f = t ? to_f32(s, t) : NULL;
        ok = f && t->type == VAE_ST_F16 && shape_is(t, 1, (int64_t[]){8});
        for (int i = 0; f && i < 8; i++) ok &= f[i] == (float)i - 3.25f;
        CHECK(ok, "f16t values");
        free(f);
        t = vae_store_find(s, "bf16t");
        f = t ? to_f32(s, t) : NULL;
        ok = f && t->type == VAE_ST_BF16 && shape_is(t, 2, (int64_t[]){2, 2});
        for (int i = 0; f && i < 4; i++) ok &= f[i] == (float)i * 1.5f + 0.5f;
        CHECK(ok, "bf16t values");
        free(f);
        t = vae_store_find(s, "q8t");
        f = t ? to_f32(s, t) : NULL;
        ok = f && t->type == VAE_ST_Q8_0 && shape_is(t, 2, (int64_t[]){2, 64}) && t->nbytes == 4 * 34;
        const float scales[4] = {0.5f, 0.25f, 2.0f, 1.0f};
        for (int b = 0; f && b < 4; b++)
            for (int j = 0; j < 32; j++) ok &= f[32 * b + j] == scales[b] * (float)(j - 16 + b);
        CHECK(ok, "q8t Q8_0 values");
        free(f);
        t = vae_store_find(s, "q4t");
        CHECK(t && t->type == VAE_ST_OTHER && t->nbytes == 18, "q4t listed as OTHER");
        float tmp[32];
        vae_error_clear();
        CHECK(t && vae_store_to_f32(s, t, tmp) == VAE_EDTYPE && strstr(vae_last_error(), "q4t"), "q4t conversion -> VAE_EDTYPE");
    }
    vae_store_free(s);
    remove(p);

    /* the same file as GGUF v2 (identical layout) */
    x.b[4] = 2;
    rc = open_written(p, sizeof p, ".gguf", x.b, x.n, &s);
    CHECK(rc == 0 && s->n == 5, "gguf v2 opens: rc %d", rc);
    if (rc == 0) vae_store_free(s);
    remove(p);
    x.b[4] = 3;

    truncations(x.b, x.n, "gguf truncated", 1);
    fuzz_bytes(x.b, x.n);
    /* garbage counts and lengths */
    buf y = {0};
    put(&y, x.b, x.n);
    memset(y.b + 8, 0xff, 8);
    expect_fail_bytes(y.b, y.n, "gguf n_tensors 2^64-1");
    memcpy(y.b, x.b, x.n);
    memset(y.b + 24, 0xff, 8); /* the length of the first key */
    expect_fail_bytes(y.b, y.n, "gguf key length 2^64-1");
    memcpy(y.b, x.b, x.n);
    y.b[4] = 1;
    expect_fail_bytes(y.b, y.n, "gguf version 1");
    /* an alignment that is not a power of two */
    memcpy(y.b, x.b, x.n);
    size_t at = 0; /* (memmem: not on Windows) */
    while (at + 17 <= y.n && memcmp(y.b + at, "general.alignment", 17)) at++;
    at += 17 + 4;
    y.b[at] = 48;
    expect_fail_bytes(y.b, y.n, "gguf alignment 48");
    free(y.b);
    free(x.b);
}

/* ---- .npy written byte by byte ---- */

static buf make_npy(int major, const char *dict, const void *data, size_t n) {
    buf x = {0};
    put_str(&x, "\x93NUMPY");
    put_u8(&x, (unsigned)major);
    put_u8(&x, 0);
    size_t pre = major == 1 ? 10 : 12, hl = strlen(dict) + 1;
    while ((pre + hl) % 64) hl++;
    put_le(&x, hl, major == 1 ? 2 : 4);
    put_str(&x, dict);
    while (x.n < pre + hl - 1) put_u8(&x, ' ');
    put_u8(&x, '\n');
    put(&x, data, n);
    return x;
}

static void npy_check(buf x, vae_storage_type type, int ndim, const int64_t *shape, const float *want, const char *what) {
    char p[600];
    vae_store *s = NULL;
    int rc = open_written(p, sizeof p, ".npy", x.b, x.n, &s);
    CHECK(rc == 0, "%s: open rc %d", what, rc);
    if (rc == 0) {
        const vae_store_tensor *t = vae_store_find(s, "");
        CHECK(s->n == 1 && t && t->type == type && shape_is(t, ndim, shape) && !strcmp(s->format, "npy"), "%s: listing", what);
        float *f = t ? to_f32(s, t) : NULL;
        int ok = f != NULL;
        for (int64_t i = 0; f && i < vae_store_numel(t); i++) ok &= f[i] == want[i];
        CHECK(ok, "%s: values", what);
        free(f);
    }
    vae_store_free(s);
    remove(p);
}

static void test_npy(void) {
    float f32[6] = {1, -2, 3.5f, 0, 1e-3f, 1e30f};
    uint16_t f16[4];
    float f16v[4] = {0.5f, -1.25f, 1024, 0};
    for (int i = 0; i < 4; i++) f16[i] = vae_f32_to_f16(f16v[i]);
    double f64 = -7.25;
    float f64v = -7.25f;
    buf a = make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f32, sizeof f32);
    buf b = make_npy(2, "{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", f16, sizeof f16);
    buf c = make_npy(3, "{\"descr\": \"<f8\", \"fortran_order\": False, \"shape\": ()}", &f64, 8);
    npy_check(a, VAE_ST_F32, 2, (int64_t[]){2, 3}, f32, "npy v1 <f4 (2,3)");
    npy_check(b, VAE_ST_F16, 1, (int64_t[]){4}, f16v, "npy v2 <f2 (4,)");
    npy_check(c, VAE_ST_F64, 0, (int64_t[]){0}, &f64v, "npy v3 <f8 ()");
    truncations(a.b, a.n, "npy truncated", 1);
    fuzz_bytes(a.b, a.n);

    const char *bad[] = {
        "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
        "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 3), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3 }",
        "{'descr': '<f4', 'shape': (2, 3), }",
        "{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3), }",
        "garbage",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        buf x = make_npy(1, bad[i], f32, sizeof f32);
        expect_fail_bytes(x.b, x.n, bad[i]);
        free(x.b);
    }
    buf x = make_npy(2, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f32, sizeof f32);
    memset(x.b + 8, 0xff, 4);
    expect_fail_bytes(x.b, x.n, "npy header length 2^32-1");
    x.b[6] = 9;
    expect_fail_bytes(x.b, x.n, "npy version 9");
    free(x.b);
    free(a.b);
    free(b.b);
    free(c.b);
}

/* ---- PyTorch zip archives written byte by byte ---- */

typedef struct {
    const char *name;
    const void *data;
    size_t n;
    int deflate;
} zent;

static buf make_zip(const zent *e, int n) {
    buf x = {0}, cd = {0};
    for (int i = 0; i < n; i++) {
        uLong crc = crc32(crc32(0, Z_NULL, 0), e[i].data, (uInt)e[i].n);
        uint8_t *comp = (uint8_t *)e[i].data;
        size_t cn = e[i].n;
        if (e[i].deflate) { /* raw deflate, as zip wants */
            z_stream zs;
            memset(&zs, 0, sizeof zs);
            deflateInit2(&zs, 9, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY);
            comp = malloc(e[i].n + 64);
            zs.next_in = (Bytef *)e[i].data;
            zs.avail_in = (uInt)e[i].n;
            zs.next_out = comp;
            zs.avail_out = (uInt)e[i].n + 64;
            deflate(&zs, Z_FINISH);
            cn = zs.total_out;
            deflateEnd(&zs);
        }
        size_t lho = x.n;
        put_le(&x, 0x04034b50, 4); put_le(&x, 20, 2); put_le(&x, 0, 2); put_le(&x, e[i].deflate ? 8 : 0, 2);
        put_le(&x, 0, 4); put_le(&x, crc, 4); put_le(&x, cn, 4); put_le(&x, e[i].n, 4);
        put_le(&x, strlen(e[i].name), 2); put_le(&x, 0, 2); put_str(&x, e[i].name);
        put(&x, comp, cn);
        put_le(&cd, 0x02014b50, 4); put_le(&cd, 20, 2); put_le(&cd, 20, 2); put_le(&cd, 0, 2);
        put_le(&cd, e[i].deflate ? 8 : 0, 2); put_le(&cd, 0, 4); put_le(&cd, crc, 4); put_le(&cd, cn, 4);
        put_le(&cd, e[i].n, 4); put_le(&cd, strlen(e[i].name), 2); put_le(&cd, 0, 2); put_le(&cd, 0, 2);
        put_le(&cd, 0, 2); put_le(&cd, 0, 2); put_le(&cd, 0, 4); put_le(&cd, lho, 4); put_str(&cd, e[i].name);
        if (e[i].deflate) free(comp);
    }
    size_t cdo = x.n;
    put(&x, cd.b, cd.n);
    put_le(&x, 0x06054b50, 4); put_le(&x, 0, 4); put_le(&x, (unsigned)n, 2); put_le(&x, (unsigned)n, 2);
    put_le(&x, cd.n, 4); put_le(&x, cdo, 4); put_le(&x, 0, 2);
    free(cd.b);
    return x;
}

/* Pickle pieces (protocol 2). */
static void pk_uni(buf *x, const char *s) { put_u8(x, 'X'); put_le(x, strlen(s), 4); put_str(x, s); }
static void pk_int(buf *x, int v) { put_u8(x, 'K'); put_u8(x, (unsigned)v); }
static void pk_global(buf *x, const char *mod, const char *name) {
    put_u8(x, 'c'); put_str(x, mod); put_u8(x, '\n'); put_str(x, name); put_u8(x, '\n');
}
/* _rebuild_tensor_v2(storage(type, key, numel), offset, size, stride, False, OrderedDict()) */
static void pk_tensor(buf *x, const char *stype, const char *key, int numel, int offset, int nd, const int *size,
                      const int *stride) {
    pk_global(x, "torch._utils", "_rebuild_tensor_v2");
    put_u8(x, '(');
    put_u8(x, '('); pk_uni(x, "storage"); pk_global(x, "torch", stype); pk_uni(x, key); pk_uni(x, "cpu");
    pk_int(x, numel); put_u8(x, 't'); put_u8(x, 'Q');
    pk_int(x, offset);
    put_u8(x, '('); for (int i = 0; i < nd; i++) pk_int(x, size[i]); put_u8(x, 't');
    put_u8(x, '('); for (int i = 0; i < nd; i++) pk_int(x, stride[i]); put_u8(x, 't');
    put_u8(x, 0x89);
    pk_global(x, "collections", "OrderedDict"); put_u8(x, ')'); put_u8(x, 'R');
    put_u8(x, 't'); put_u8(x, 'R');
}

/* {"a": {"w": F32 [2,3] transposed view}, "n": 5, "b": [F16 [2] at offset 1], "c": Parameter(BF16 [3]),
 *  "d": v3 float8_e4m3fn [2], "e": 2.5} */
static buf make_pickle(const char *variant) {
    buf x = {0};
    put_u8(&x, 0x80); put_u8(&x, 4);
    put_u8(&x, 0x95); put_le(&x, 0, 8); /* FRAME: its length is patched at the end */
    put_u8(&x, '}'); put_u8(&x, 'q'); put_u8(&x, 0);
    put_u8(&x, '(');
    pk_uni(&x, "a"); put_u8(&x, '}'); pk_uni(&x, "w");
    pk_tensor(&x, "FloatStorage", "0", 6, 0, 2, (int[]){2, 3}, (int[]){1, 2});
    put_u8(&x, 'r'); put_le(&x, 300, 4); /* LONG_BINPUT: a.w is reused as g.0 below */
    put_u8(&x, 's');
    pk_uni(&x, "n"); put_u8(&x, 0x8a); put_u8(&x, 2); put_le(&x, 0x8000, 2); /* LONG1 -32768 */
    /* l: a list of non-tensors through APPENDS, BININT, BININT2, BINUNICODE8, TUPLE2 */
    pk_uni(&x, "l"); put_u8(&x, ']'); put_u8(&x, '(');
    put_u8(&x, 'J'); put_le(&x, 0xfffffffe, 4); put_u8(&x, 'M'); put_le(&x, 513, 2);
    put_u8(&x, 0x8d); put_le(&x, 2, 8); put_str(&x, "hi"); put_u8(&x, 'N'); pk_int(&x, 1); put_u8(&x, 0x86);
    put_u8(&x, 'e');
    /* g: (a.w, None, False) through LONG_BINGET, MEMOIZE, TUPLE3 */
    pk_uni(&x, "g"); put_u8(&x, 'j'); put_le(&x, 300, 4); put_u8(&x, 0x94); put_u8(&x, 'N'); put_u8(&x, 0x89);
    put_u8(&x, 0x87);
    pk_uni(&x, "b"); put_u8(&x, ']');
    pk_tensor(&x, "HalfStorage", "1", 4, 1, 1, (int[]){2}, (int[]){1});
    put_u8(&x, 'a');
    /* c: nn.Parameter through STACK_GLOBAL, SHORT_BINUNICODE, memo and NEWTRUE */
    put_u8(&x, 0x8c); put_u8(&x, 1); put_str(&x, "c");
    put_u8(&x, 0x8c); put_u8(&x, 12); put_str(&x, "torch._utils");
    put_u8(&x, 0x8c); put_u8(&x, 18); put_str(&x, "_rebuild_parameter");
    put_u8(&x, 0x93); put_u8(&x, 'q'); put_u8(&x, 7);
    put_u8(&x, '(');
    pk_tensor(&x, "BFloat16Storage", "2", 3, 0, 1, (int[]){3}, (int[]){1});
    put_u8(&x, 0x88); put_u8(&x, '}'); put_u8(&x, 't'); put_u8(&x, 'R');
    /* d: _rebuild_tensor_v3 over a byte storage with dtype torch.float8_e4m3fn */
    pk_uni(&x, "d");
    pk_global(&x, "torch._utils", "_rebuild_tensor_v3");
    put_u8(&x, '(');
    put_u8(&x, '('); pk_uni(&x, "storage"); pk_global(&x, "torch", "ByteStorage"); pk_uni(&x, "3"); pk_uni(&x, "cpu");
    pk_int(&x, 2); put_u8(&x, 't'); put_u8(&x, 'Q');
    pk_int(&x, 0); pk_int(&x, 2); put_u8(&x, 0x85); pk_int(&x, 1); put_u8(&x, 0x85); put_u8(&x, 0x89);
    put_u8(&x, '}'); pk_global(&x, "torch", "float8_e4m3fn");
    put_u8(&x, 't'); put_u8(&x, 'R');
    pk_uni(&x, "e"); put_u8(&x, 'G'); put_le(&x, 0x0000000000000440ull, 8);
    if (!strcmp(variant, "bad_global")) { pk_uni(&x, "z"); pk_global(&x, "os", "system"); }
    if (!strcmp(variant, "bad_opcode")) { pk_uni(&x, "z"); put_u8(&x, 'i'); }
    if (!strcmp(variant, "bad_view")) { pk_uni(&x, "z"); pk_tensor(&x, "FloatStorage", "0", 6, 4, 1, (int[]){3}, (int[]){1}); }
    if (!strcmp(variant, "bad_key")) { pk_uni(&x, "z"); pk_tensor(&x, "FloatStorage", "9", 6, 0, 1, (int[]){3}, (int[]){1}); }
    if (!strcmp(variant, "bad_memo")) { pk_uni(&x, "z"); put_u8(&x, 'h'); put_u8(&x, 200); }
    if (!strcmp(variant, "cycle")) { pk_uni(&x, "z"); put_u8(&x, 'h'); put_u8(&x, 0); }
    /* zero strides: 255^3 floats (66 MB) gathered from a 24-byte storage, beyond the view budget */
    if (!strcmp(variant, "zero_stride")) { pk_uni(&x, "z"); pk_tensor(&x, "FloatStorage", "0", 6, 0, 3, (int[]){255, 255, 255}, (int[]){0, 0, 0}); }
    /* a small broadcast view (stride 0) stays within the allowance and loads */
    if (!strcmp(variant, "broadcast")) { pk_uni(&x, "z"); pk_tensor(&x, "FloatStorage", "0", 6, 0, 2, (int[]){4, 6}, (int[]){0, 1}); }
    put_u8(&x, 'u');
    put_u8(&x, '.');
    for (int i = 0; i < 8; i++) x.b[3 + i] = (uint8_t)((x.n - 11) >> (8 * i));
    return x;
}

static buf make_pth(const char *variant) {
    static float s0[6] = {0, 1, 2, 3, 4, 5};
    static uint16_t s1[4], s2[3];
    static uint8_t s3[2] = {0x38, 0x40}; /* e4m3: 1.0, 2.0 */
    for (int i = 0; i < 4; i++) s1[i] = vae_f32_to_f16((float)i + 0.5f);
    for (int i = 0; i < 3; i++) s2[i] = vae_f32_to_bf16((float)i * -2.0f);
    buf pk = make_pickle(variant);
    zent e[] = {
        {"archive/data.pkl", pk.b, pk.n, 1},
        {"archive/byteorder", "little", 6, 0},
        {"archive/data/0", s0, sizeof s0, 0},
        {"archive/data/1", s1, sizeof s1, 1},
        {"archive/data/2", s2, sizeof s2, 0},
        {"archive/data/3", s3, sizeof s3, 0},
        {"archive/version", "3\n", 2, 0},
    };
    buf z = make_zip(e, 7);
    free(pk.b);
    return z;
}

static void test_pth_synthetic(void) {
    buf z = make_pth("");
    char p[600];
    vae_store *s = NULL;
    int rc = open_written(p, sizeof p, ".pth", z.b, z.n, &s);
    CHECK(rc == 0, "open synthetic pth: %d", rc);
    if (rc == 0) {
        CHECK(s->n == 5, "synthetic pth: 5 tensors (got %d)", s->n);
        const vae_store_tensor *g = vae_store_find(s, "g.0"), *w = vae_store_find(s, "a.w");
        CHECK(g && w && g->data == w->data && shape_is(g, 2, w->shape), "g.0 is a.w through the memo");
        const vae_store_tensor *t = vae_store_find(s, "a.w");
        float *f = t ? to_f32(s, t) : NULL;
        const float aw[6] = {0, 2, 4, 1, 3, 5}; /* [2,3] with strides (1,2) */
        CHECK(f && t->type == VAE_ST_F32 && shape_is(t, 2, (int64_t[]){2, 3}) && !memcmp(f, aw, sizeof aw), "a.w transposed copy");
        free(f);
        t = vae_store_find(s, "b.0");
        f = t ? to_f32(s, t) : NULL;
        CHECK(f && t->type == VAE_ST_F16 && shape_is(t, 1, (int64_t[]){2}) && f[0] == 1.5f && f[1] == 2.5f, "b.0 deflated f16 at offset 1");
        free(f);
        t = vae_store_find(s, "c");
        f = t ? to_f32(s, t) : NULL;
        CHECK(f && t->type == VAE_ST_BF16 && f[0] == 0 && f[1] == -2 && f[2] == -4, "c parameter bf16");
        free(f);
        t = vae_store_find(s, "d");
        f = t ? to_f32(s, t) : NULL;
        CHECK(f && t->type == VAE_ST_F8_E4M3 && f[0] == 1 && f[1] == 2, "d float8 via _rebuild_tensor_v3");
        free(f);
        CHECK(!vae_store_find(s, "n") && !vae_store_find(s, "e"), "non-tensor leaves skipped");
    }
    vae_store_free(s);
    remove(p);
    truncations(z.b, z.n, "pth truncated", 1);
    fuzz_bytes(z.b, z.n);
    free(z.b);

    const struct { const char *v; int code; } bad[] = {
        {"bad_global", VAE_EUNSUPPORTED}, {"bad_opcode", VAE_EUNSUPPORTED}, {"bad_view", VAE_EFORMAT},
        {"bad_key", VAE_EFORMAT},         {"bad_memo", VAE_EFORMAT},        {"cycle", VAE_EFORMAT},
        {"zero_stride", VAE_EUNSUPPORTED}, {"broadcast", VAE_OK},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        buf y = make_pth(bad[i].v);
        rc = open_written(p, sizeof p, ".pth", y.b, y.n, &s);
        CHECK(rc == bad[i].code && (rc == 0 || vae_last_error()[0]), "pickle %s: rc %d (want %d)", bad[i].v, rc, bad[i].code);
        if (rc == 0) {
            const vae_store_tensor *zt = vae_store_find(s, "z");
            float *f = zt ? to_f32(s, zt) : NULL;
            CHECK(f && f[6] == 0 && f[11] == 5 && f[23] == 5, "broadcast view: rows repeat the storage");
            free(f);
            vae_store_free(s);
        }
        if (i < 2) printf("  (message for %s: %s)\n", bad[i].v, vae_last_error());
        remove(p);
        free(y.b);
    }
}

/* Resource bounds (issue 12, src/formats/limits.h): zip entries sharing bytes, FIFOs. The large
 * reproducers live in tests/regress (test_regress.py measures their memory). */
static void test_resource_bounds(void) {
    /* two central records for the bytes of one entry: the second's local header offset is
     * pointed at the first's */
    uint8_t d[16] = {0};
    zent e[] = {{"archive/data/0", d, sizeof d, 1}, {"archive/data/1", d, sizeof d, 1}};
    buf z = make_zip(e, 2);
    size_t cdo = (size_t)z.b[z.n - 6] | (size_t)z.b[z.n - 5] << 8 | (size_t)z.b[z.n - 4] << 16;
    size_t second = cdo + 46 + strlen(e[0].name);
    memset(z.b + second + 42, 0, 4); /* local header offset := 0, the first entry's */
    char p[600];
    vae_store *s = NULL;
    int rc = open_written(p, sizeof p, ".pth", z.b, z.n, &s);
    CHECK(rc == VAE_EFORMAT && strstr(vae_last_error(), "overlap") && strstr(vae_last_error(), p),
          "zip entries sharing bytes: rc %d (%s)", rc, vae_last_error());
    if (rc == 0) vae_store_free(s);
    remove(p);
    free(z.b);
#ifndef _WIN32 /* (Windows has no FIFOs in its file system) */
    /* a FIFO: refused at once (open() would otherwise wait for a writer forever) */
    tmp_path(p, sizeof p, ".safetensors");
    if (mkfifo(p, 0600) == 0) {
        vae_error_clear();
        rc = vae_store_open(&s, p);
        CHECK(rc == VAE_EIO && strstr(vae_last_error(), "not a regular file"), "FIFO: rc %d (%s)", rc, vae_last_error());
        if (rc == 0) vae_store_free(s);
        remove(p);
    }
#endif
}

/* Real files cut short, and bytes of their headers corrupted. */
static void test_real_files_bad(void) {
    const char *files[] = {VAE_SHARED_DIR "/fixtures/wan21_tiny.safetensors", VAE_SHARED_DIR "/models/taef2_encoder.pth",
                           VAE_SHARED_DIR "/media/wan21_latents_1x16x16x40x64.pth"};
    for (int k = 0; k < 3; k++) {
        size_t n;
        uint8_t *d = read_file(files[k], &n);
        CHECK(d && n > 1000, "read %s", files[k]);
        if (!d) continue;
        truncations(d, n, files[k], 0);
        if (k == 0) {
            /* a corrupted JSON byte, a huge header length, a header length just past the end */
            uint8_t *c = malloc(n);
            memcpy(c, d, n);
            uint8_t *colon = memchr(c + 8, ':', 200);
            *colon = 'x';
            expect_fail_bytes(c, n, "safetensors JSON corrupted");
            memcpy(c, d, n);
            c[8] = '[';
            expect_fail_bytes(c, n, "safetensors header not an object");
            memcpy(c, d, n);
            c[5] = 0x7f;
            expect_fail_bytes(c, n, "safetensors header length huge");
            free(c);
        } else {
            /* zip: the central directory offset pointing past the end; data.pkl's first opcodes
             * replaced by an unknown one; the end record's entry count inflated */
            uint8_t *c = malloc(n);
            memcpy(c, d, n);
            uint8_t *eocd = c + n - 22;
            CHECK(eocd[0] == 0x50 && eocd[1] == 0x4b && eocd[2] == 5 && eocd[3] == 6, "end record at the end");
            /* torch writes a zip64 end record too (found through the locator 20 bytes before
             * the end record), and its values take precedence: corrupt both */
            uint8_t *e64 = c + n - 22 - 20 - 56;
            CHECK(e64[0] == 0x50 && e64[1] == 0x4b && e64[2] == 6 && e64[3] == 6, "zip64 end record");
            memset(eocd + 16, 0xff, 4);
            memset(e64 + 48, 0x7f, 8);
            expect_fail_bytes(c, n, "zip central directory offset huge");
            memcpy(c, d, n);
            memset(eocd + 8, 0xff, 4);
            memset(e64 + 32, 0x7f, 8);
            expect_fail_bytes(c, n, "zip entry count huge");
            memcpy(c, d, n);
            memset(e64 + 40, 0, 8); /* central directory size 0 but entries claimed */
            expect_fail_bytes(c, n, "zip central directory size 0");
            memcpy(c, d, n);
            /* data.pkl is the first entry: data at 30 + name length + extra length */
            size_t pkl = 30 + (size_t)(c[26] | c[27] << 8) + (size_t)(c[28] | c[29] << 8);
            CHECK(c[pkl] == 0x80 && c[pkl + 1] == 2, "data.pkl starts with PROTO 2");
            c[pkl + 2] = 0xff; /* the first GLOBAL becomes an unknown opcode */
            expect_fail_bytes(c, n, "pickle opcode corrupted");
            memcpy(c, d, n);
            c[pkl + 1 + 2 + 12] ^= 0x20; /* inside the first GLOBAL's module name */
            expect_fail_bytes(c, n, "pickle global corrupted");
            memcpy(c, d, n);
            c[2] = 0; /* not a zip local header any more: unrecognised format */
            expect_fail_bytes(c, n, "zip magic corrupted");
            free(c);
        }
        free(d);
    }
    char p[600];
    tmp_path(p, sizeof p, ".empty");
    write_file(p, "", 0);
    expect_fail(p, "zero-length file");
    remove(p);
    expect_fail("/nonexistent/file.safetensors", "missing file");
    expect_fail(tmpdir, "a directory");
    expect_fail_bytes("\x80\x02}q\x00.", 6, "legacy pickle");
    expect_fail_bytes("hello world, not a tensor file", 30, "random text");
}

/* Every allocation of an open failing in turn: VAE_ENOMEM (or success once the countdown passes
 * the last allocation), no leak (LeakSanitizer checks at exit), no crash. */
static void test_alloc_failures(void) {
    buf z = make_pth(""), g = make_gguf();
    char pz[600], pg[600];
    tmp_path(pz, sizeof pz, ".pth");
    tmp_path(pg, sizeof pg, ".gguf");
    write_file(pz, z.b, z.n);
    write_file(pg, g.b, g.n);
    const char *files[] = {pz, pg, VAE_SHARED_DIR "/fixtures/wan21_tiny.safetensors"};
    for (int k = 0; k < 3; k++) {
        int ok = 1, succeeded = 0;
        for (long n = 1; n < 2000 && !succeeded; n++) {
            vae_store *s = NULL;
            vae_error_clear();
            vae_alloc_fail_after(n);
            int rc = vae_store_open(&s, files[k]);
            vae_alloc_fail_after(0);
            if (rc == 0) succeeded = 1;
            else ok &= rc == VAE_ENOMEM && vae_last_error()[0] && s == NULL;
            vae_store_free(s);
        }
        CHECK(ok && succeeded, "%s: allocation failures reported as VAE_ENOMEM", files[k]);
    }
    remove(pz);
    remove(pg);
    free(z.b);
    free(g.b);
}

/* A caller's float32 tensor is read row by row as it is; a NaN or an Inf anywhere in a row (in
 * the 8-value blocks of the finiteness test, or past the last whole block) fails the read with
 * its place (channel, frame, row, column), and finite rows come back exact. */
static void test_view_nonfinite(void) {
    enum { C = 2, T = 2, H = 3, W = 21 }; /* two blocks of 8 and a tail of 5 a row */
    static float x[C * T * H * W], out[C * T * H * W];
    for (int i = 0; i < C * T * H * W; i++)
        x[i] = (float)i * 0.25f - 40.0f;
    const int64_t shape[5] = {1, C, T, H, W};
    const int64_t strides[5] = {C * T * H * W, T * H * W, H * W, W, 1};
    vae_tensor tx = {.ndim = 5, .dtype = VAE_DTYPE_F32, .data = x, .device = VAE_DEVICE_CPU};
    tx = vae_tensor_dense(5, shape, VAE_DTYPE_F32, x);
    memcpy(tx.strides, strides, sizeof strides);
    vae_io_view v;
    int rc = vae_tensor_view(&tx, "input", C, &v);
    if (rc == VAE_OK) rc = vae_view_read_host(&v, "input", out, 0, T, 0, H, 0, W);
    CHECK(rc == VAE_OK && memcmp(out, x, sizeof x) == 0, "finite rows read as they are: rc %d", rc);
    const int cols[4] = {0, 7, 16, 20}; /* first and last of a block, first and last of the tail */
    for (int k = 0; k < 4; k++) {
        const int at = ((1 * T + 1) * H + 2) * W + cols[k]; /* channel 1, frame 1, row 2 */
        const float keep = x[at];
        x[at] = k % 2 ? INFINITY : NAN;
        vae_error_clear(); /* the innermost failure's message is kept until cleared */
        rc = v.data ? vae_view_read_host(&v, "input", out, 0, T, 0, H, 0, W) : VAE_EINVAL;
        char want[64];
        snprintf(want, sizeof want, "channel 1, frame 1, row 2, column %d", cols[k]);
        CHECK(rc == VAE_ENAN && strstr(vae_last_error(), want), "a %s at column %d: rc %d, \"%s\"",
              k % 2 ? "Inf" : "NaN", cols[k], rc, vae_last_error());
        x[at] = keep;
    }
}

int main(void) {
    const char *t = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s", t && *t ? t : "/tmp");
    int verbose = getenv("VAE_TEST_VERBOSE") != NULL;
    vae_store_free(NULL);
    test_wan_safetensors();
    test_taef2(verbose);
    test_latents();
    test_roundtrip();
    test_safetensors_bad();
    test_gguf();
    test_npy();
    test_pth_synthetic();
    test_real_files_bad();
    test_resource_bounds();
    test_alloc_failures();
    test_view_nonfinite();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
