/* test_stream.c -- the input a step at a time (vae.h vae_stream_*).
 *
 * For every case of the fixtures of causal video models (tiny Wan2.1 / Wan2.2, SeedVR2 tiny, the
 * TAEHV variants with their preview decoders): the frames a stream hands out, concatenated, equal
 * vae_decode / vae_encode of the whole input bit for bit, with pushes of one frame and of random
 * sizes (empty pushes included); a decoder hands out each latent's frames in the push that
 * brings it. Then the error paths (no stream, a second begin, shapes, dtypes, device memory,
 * the session's other calls during a stream, a callback that stops, a cancel, an end before any
 * step, a free with an open stream) and a sweep of every host allocation of a stream failing
 * in turn (VAE_ENOMEM, nothing leaked, the session usable afterwards).
 * usage: test_stream SHARED_DIR */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "test_fixture_case.h"
#include "vae.h"

static int n_pass, n_fail;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        const int ok_ = (cond);                                                                    \
        ok_ ? n_pass++ : n_fail++;                                                                 \
        printf("%s ", ok_ ? "PASS" : "FAIL");                                                      \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        fflush(stdout);                                                                            \
    } while (0)

/* The frames a stream hands out, gathered into [C][cap][H][W]; pushed: frames of the current push.
 */
typedef struct gather {
    float *data;
    int c, h, w, cap, next, pushed;
    int stop_after;      /* > 0: the callback asks to stop once this many frames came */
    vae_session *cancel; /* non-NULL: the callback cancels this session */
    int bad;             /* frames out of order or of another size */
} gather;

static int on_frames(const float *fr, int first, int n, int c, int h, int w, void *user) {
    gather *g = user;
    if (first != g->next || c != g->c || h != g->h || w != g->w || first + n > g->cap) {
        g->bad = 1;
        return 1;
    }
    const size_t plane = (size_t)h * w;
    for (int k = 0; k < c; k++)
        memcpy(g->data + ((size_t)k * g->cap + first) * plane, fr + (size_t)k * n * plane,
               (size_t)n * plane * sizeof *fr);
    g->next += n;
    g->pushed += n;
    if (g->cancel) vae_session_cancel(g->cancel);
    return g->stop_after > 0 && g->next >= g->stop_after;
}

/* frames [t0, t0+n) of a dense [1,C,T,H,W] tensor as a strided view (no copy) */
static vae_tensor frames_of(const vae_tensor *x, int t0, int n) {
    vae_tensor v = *x;
    v.shape[2] = n;
    v.data = (float *)x->data + (size_t)t0 * x->strides[2];
    v.storage_bytes = 0;
    return v;
}

static unsigned rng = 12345;
static int rand_below(int n) {
    rng = rng * 1103515245u + 12345u;
    return (int)((rng >> 16) % (unsigned)n);
}

/* The input streamed in pushes (sizes: 1 each, or random 0..4), against the whole call's output
 * `ref` bit for bit; a decoder's pushes of one latent hand out that latent's frames at once. */
static void check_stream(vae_session *s, int encode, const vae_tensor *in, const vae_tensor *ref,
                         int random_sizes, const char *label) {
    const int T = (int)in->shape[2];
    gather g = {NULL,
                (int)ref->shape[1],
                (int)ref->shape[3],
                (int)ref->shape[4],
                (int)ref->shape[2],
                0,
                0,
                0,
                NULL,
                0};
    g.data = calloc((size_t)g.c * g.cap * g.h * g.w, sizeof(float));
    int rc = vae_stream_begin(s, encode, in->shape, 5), early = 1;
    for (int t = 0; rc == VAE_OK && t < T;) {
        int n = random_sizes ? rand_below(5) : 1;
        if (t + n > T) n = T - t;
        vae_tensor part = frames_of(in, t, n);
        g.pushed = 0;
        rc = vae_stream_push(s, &part, on_frames, &g);
        t += n;
        if (rc == VAE_OK && !encode && n > 0) { /* frames of latents 0..t-1 out now */
            int64_t shape[5] = {1, in->shape[1], t, in->shape[3], in->shape[4]}, os[5];
            int nd = 0;
            early &= vae_session_output_shape(s, 0, shape, 5, os, &nd) == VAE_OK && os[2] == g.next;
        }
    }
    if (rc == VAE_OK) rc = vae_stream_end(s, on_frames, &g);
    int same = rc == VAE_OK && !g.bad && g.next == g.cap;
    const size_t n = (size_t)g.c * g.cap * g.h * g.w;
    size_t diff = 0;
    for (size_t i = 0; same && i < n; i++)
        diff += ((const float *)ref->data)[i] != g.data[i];
    CHECK(same && diff == 0,
          "%s: streamed in pushes of %s: %d of %d frames, %zu values differ "
          "from the whole call %s",
          label, random_sizes ? "0-4" : "1", g.next, g.cap, diff, rc ? vae_last_error() : "");
    if (!encode)
        CHECK(rc == VAE_OK && early, "%s: each push of latents hands out their frames at once",
              label);
    CHECK(vae_stream_status(s, NULL, NULL, NULL) == 0, "%s: the stream is closed", label);
    free(g.data);
}

static vae_model *open_fixture(const char *shared, const char *name, cJSON *js) {
    vae_model *m = NULL;
    int rc;
    if (fixture_synthetic(js)) {
        char *cfg = cJSON_PrintUnformatted(cJSON_GetObjectItem(js, "config"));
        rc = vae_model_synth(&m, cJSON_GetObjectItem(js, "arch")->valuestring, cfg);
        free(cfg);
    } else {
        char path[4096];
        snprintf(path, sizeof path, "%s/fixtures/%s.safetensors", shared, name);
        rc = vae_model_open(&m, path, NULL);
    }
    CHECK(rc == VAE_OK, "%s: model %s", name, rc ? vae_last_error() : "");
    return rc ? NULL : m;
}

/* Every 5-D case of one fixture: the whole call, then streams. */
/* VAE_TEST_QUICK=1 (the sanitizer and Wine runs): the random pushes alone (of 0 to 4 frames, so
 * pushes of one among them), not also one frame a push */
static int quick;

static void check_fixture(const char *shared, const char *name) {
    char path[4096], io[4096];
    snprintf(io, sizeof io, "%s/fixtures/%s.io.safetensors", shared, name);
    cJSON *js = fixture_json(shared, name, path, sizeof path);
    if (!js) {
        CHECK(0, "%s: cannot read %s", name, path);
        return;
    }
    vae_model *m = open_fixture(shared, name, js);
    const cJSON *c, *cases = m ? cJSON_GetObjectItem(js, "cases") : NULL;
    cJSON_ArrayForEach(c, cases) {
        const char *cname = cJSON_GetObjectItem(c, "name")->valuestring;
        const int encode = strcmp(cJSON_GetObjectItem(c, "op")->valuestring, "encode") == 0;
        vae_tensor in, ref;
        if (vae_tensor_load(io, cJSON_GetObjectItem(c, "input")->valuestring, &in)) {
            CHECK(0, "%s %s: input: %s", name, cname, vae_last_error());
            continue;
        }
        vae_session_options so;
        vae_session_options_default(&so);
        so.preview = case_preview(c);
        vae_session *s = NULL;
        int rc = vae_session_create(&s, m, &so);
        if (rc == VAE_OK && in.ndim == 5)
            rc = encode ? vae_encode_tensor(s, &in, &ref) : vae_decode_tensor(s, &in, &ref);
        char label[256];
        snprintf(label, sizeof label, "%s %s (%s)", name, cname, encode ? "encode" : "decode");
        if (rc) CHECK(0, "%s: the whole call: %s", label, vae_last_error());
        if (rc == VAE_OK && in.ndim == 5) {
            if (!quick) check_stream(s, encode, &in, &ref, 0, label);
            check_stream(s, encode, &in, &ref, 1, label);
            vae_tensor_free(&ref);
        }
        vae_session_free(s);
        vae_tensor_free(&in);
    }
    vae_model_free(m);
    cJSON_Delete(js);
}

static vae_tensor random_tensor(int64_t c, int64_t t, int64_t h, int64_t w, float lo, float hi) {
    const int64_t shape[5] = {1, c, t, h, w};
    const size_t n = (size_t)(c * t * h * w);
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (float)rand_below(10000) / 10000.0f;
    return vae_tensor_dense(5, shape, VAE_DTYPE_F32, x);
}

/* The calls out of order and the arguments a stream refuses. */
static void check_errors(const vae_model *m) {
    vae_session *s = NULL;
    CHECK(vae_session_create(&s, m, NULL) == VAE_OK, "errors: session");
    vae_tensor lat = random_tensor(16, 3, 2, 3, -2, 2), out = {0};
    vae_tensor one = frames_of(&lat, 0, 1);
    int rc = vae_stream_push(s, &one, NULL, NULL);
    CHECK(rc == VAE_EINVAL && strstr(vae_last_error(), "no stream"), "push before begin: %s",
          vae_last_error());
    rc = vae_stream_end(s, NULL, NULL);
    CHECK(rc == VAE_EINVAL, "end before begin: %s", vae_last_error());
    CHECK(vae_stream_abort(s) == VAE_OK, "abort without a stream");
    int64_t four[4] = {1, 16, 2, 3};
    rc = vae_stream_begin(s, 0, four, 4);
    CHECK(rc == VAE_ESHAPE, "begin with a 4-D shape: %s", vae_last_error());
    rc = vae_stream_begin(s, 0, (int64_t[5]){1, 15, 1, 2, 3}, 5);
    CHECK(rc == VAE_ESHAPE && strstr(vae_last_error(), "channels"), "begin with 15 channels: %s",
          vae_last_error());
    rc = vae_stream_begin(s, 2, lat.shape, 5);
    CHECK(rc == VAE_EINVAL, "begin with encode 2: %s", vae_last_error());
    rc = vae_stream_begin(s, 0, lat.shape, 5);
    CHECK(rc == VAE_OK, "begin %s", rc ? vae_last_error() : "");
    rc = vae_stream_begin(s, 0, lat.shape, 5);
    CHECK(rc == VAE_EINVAL && strstr(vae_last_error(), "already open"), "a second begin: %s",
          vae_last_error());
    rc = vae_decode_tensor(s, &lat, &out);
    CHECK(rc == VAE_EINVAL && strstr(vae_last_error(), "stream is open"),
          "decode during a stream: %s", vae_last_error());
    vae_plan_info plan;
    rc = vae_session_plan(s, 0, lat.shape, 5, &plan);
    CHECK(rc == VAE_EINVAL, "plan during a stream: %s", vae_last_error());
    vae_tensor wide = random_tensor(16, 1, 2, 4, -1, 1);
    rc = vae_stream_push(s, &wide, NULL, NULL);
    CHECK(rc == VAE_ESHAPE && strstr(vae_last_error(), "expected [1,16,T,2,3]"),
          "push of another width: %s", vae_last_error());
    vae_tensor fp8 = one;
    fp8.dtype = VAE_DTYPE_FP8;
    rc = vae_stream_push(s, &fp8, NULL, NULL);
    CHECK(rc == VAE_EDTYPE, "push of dtype fp8: %s", vae_last_error());
    vae_tensor dev = one;
    dev.device = VAE_DEVICE_CUDA;
    rc = vae_stream_push(s, &dev, NULL, NULL);
    CHECK(rc == VAE_EINVAL && strstr(vae_last_error(), "host"), "push of device memory: %s",
          vae_last_error());
    int enc = -1;
    int64_t fin = -1, fout = -1;
    CHECK(vae_stream_status(s, &enc, &fin, &fout) == 1 && enc == 0 && fin == 0 && fout == 0,
          "refused pushes leave the stream open and empty");
    gather g = {calloc(3 * 9 * 16 * 24, sizeof(float)), 3, 16, 24, 9, 0, 0, 2, NULL, 0};
    rc = vae_stream_push(s, &lat, on_frames, &g);
    CHECK(rc == VAE_EINTERRUPTED && vae_stream_status(s, NULL, NULL, NULL) == 0,
          "a callback that stops ends the stream: %s", vae_last_error());
    /* a cancel from the callback (another thread's, as far as the push knows) */
    g = (gather){g.data, 3, 16, 24, 9, 0, 0, 0, s, 0};
    rc = vae_stream_begin(s, 0, lat.shape, 5);
    if (rc == VAE_OK) rc = vae_stream_push(s, &lat, on_frames, &g);
    CHECK(rc == VAE_EINTERRUPTED && g.next < 9 && vae_stream_status(s, NULL, NULL, NULL) == 0,
          "vae_session_cancel stops a push after %d frames: %s", g.next, vae_last_error());
    rc = vae_stream_begin(s, 0, lat.shape, 5);
    if (rc == VAE_OK) rc = vae_stream_end(s, NULL, NULL);
    CHECK(rc == VAE_ESHAPE && strstr(vae_last_error(), "before its first step"),
          "an end before any step: %s", vae_last_error());
    /* the session works after all that, and a stream after an abort gives the whole output */
    vae_tensor ref = {0};
    rc = vae_stream_begin(s, 0, lat.shape, 5);
    if (rc == VAE_OK) rc = vae_stream_push(s, &one, NULL, NULL);
    if (rc == VAE_OK) rc = vae_stream_abort(s);
    if (rc == VAE_OK) rc = vae_decode_tensor(s, &lat, &ref);
    CHECK(rc == VAE_OK, "decode after an abort %s", rc ? vae_last_error() : "");
    if (rc == VAE_OK) check_stream(s, 0, &lat, &ref, 1, "taehv after errors");
    /* freed with a stream open (ASan: nothing leaks) */
    rc = vae_stream_begin(s, 0, lat.shape, 5);
    if (rc == VAE_OK) rc = vae_stream_push(s, &one, NULL, NULL);
    CHECK(rc == VAE_OK, "a stream left open %s", rc ? vae_last_error() : "");
    vae_session_free(s);
    vae_tensor_free(&ref);
    free(g.data);
    vae_tensor_free(&lat);
    vae_tensor_free(&wide);
}

/* A stream of a decode and of an encode: begin, pushes of 1 and 2 frames, end. */
static int run_streams(vae_session *s, const vae_tensor *lat, const vae_tensor *video) {
    int rc = VAE_OK;
    for (int encode = 0; encode < 2 && rc == VAE_OK; encode++) {
        const vae_tensor *x = encode ? video : lat;
        rc = vae_stream_begin(s, encode, x->shape, 5);
        for (int t = 0; rc == VAE_OK && t < x->shape[2]; t += 2) {
            const int n = t + 2 <= x->shape[2] ? 2 : 1;
            vae_tensor part = frames_of(x, t, n);
            rc = vae_stream_push(s, &part, NULL, NULL);
        }
        if (rc == VAE_OK) rc = vae_stream_end(s, NULL, NULL);
    }
    return rc;
}

/* Every host allocation of a new session's first streams (its runner and executors are made
 * then) failing in turn: VAE_ENOMEM with a message, the stream closed, nothing leaked, the
 * session's next streams succeed. */
static void check_alloc_fail(const vae_model *m) {
    vae_tensor lat = random_tensor(16, 3, 2, 3, -2, 2), video = random_tensor(3, 6, 16, 16, 0, 1);
    vae_session_options so;
    vae_session_options_default(&so);
    so.threads = 1;
    /* every allocation, or every N-th (VAE_ALLOC_FAIL_STRIDE=N, as test_alloc_fail.c) */
    const char *env = getenv("VAE_ALLOC_FAIL_STRIDE");
    const long stride = env && atol(env) > 1 ? atol(env) : 1;
    int tries = 0, bad = 0;
    for (long k = 1; k < 100000 && bad < 5; k += stride, tries++) {
        const long live = vae_alloc_live();
        vae_session *s = NULL; /* (the session's own allocations: test_alloc_fail.c) */
        int rc = vae_session_create(&s, m, &so);
        vae_alloc_fail_after(k);
        if (rc == VAE_OK) rc = run_streams(s, &lat, &video);
        const int done = vae_alloc_fail_after(0) > 0;
        if (rc != VAE_OK && (rc != VAE_ENOMEM || !vae_last_error()[0])) {
            printf("  allocation %ld failing: %s (%s)\n", k, vae_strerror(rc), vae_last_error());
            bad++;
        }
        if (s && vae_stream_status(s, NULL, NULL, NULL)) {
            printf("  allocation %ld failing left the stream open\n", k);
            bad++;
        }
        if (s && rc && run_streams(s, &lat, &video) != VAE_OK) {
            printf("  allocation %ld failing: the next streams: %s\n", k, vae_last_error());
            bad++;
        }
        vae_session_free(s);
        if (vae_alloc_live() != live) {
            printf("  allocation %ld failing leaked %ld blocks\n", k, vae_alloc_live() - live);
            bad++;
        }
        if (done) break;
    }
    CHECK(bad == 0 && tries > 10,
          "every allocation of a session's streams failing in turn (%d "
          "tries): VAE_ENOMEM, nothing leaked, the session usable",
          tries);
    vae_tensor_free(&lat);
    vae_tensor_free(&video);
}

/* two dense float32 outputs of one shape, bit for bit */
static int same_frames(const vae_tensor *x, const vae_tensor *y) {
    size_t n = 1;
    for (int k = 0; k < x->ndim; k++) {
        if (x->shape[k] != y->shape[k]) return 0;
        n *= (size_t)x->shape[k];
    }
    return x->ndim == y->ndim && x->data && y->data &&
           memcmp(x->data, y->data, n * sizeof(float)) == 0;
}

/* A session's calls of one input reuse its last plan (session_plan.c's memo) and give the same
 * output as the first call, whatever came between: a stream (steps of its own), a call of
 * another length (other steps), a trim. */
static void check_plan_memo(const vae_model *m) {
    vae_session *s = NULL;
    vae_session_options o;
    vae_session_options_default(&o);
    o.max_memory = (int64_t)1 << 30; /* (the budget the memo is for: not the host's free memory) */
    CHECK(vae_session_create(&s, m, &o) == VAE_OK, "memo: session");
    vae_tensor a = random_tensor(16, 9, 2, 3, -2, 2), b = random_tensor(16, 4, 2, 3, -2, 2);
    vae_tensor ref = {0}, again = {0}, other = {0};
    vae_plan_info p1, p2;
    /* a's plan kept, a stream between (steps of its own), a's again (the memo); then another
     * length replaces the memo and a trim drops it: a's plan made afresh */
    int rc = vae_session_plan(s, 0, a.shape, 5, &p1);
    if (rc == VAE_OK) rc = vae_decode_tensor(s, &a, &ref);
    if (rc == VAE_OK) rc = vae_stream_begin(s, 0, b.shape, 5);
    for (int t = 0; rc == VAE_OK && t < b.shape[2]; t++) {
        vae_tensor one = frames_of(&b, t, 1);
        rc = vae_stream_push(s, &one, NULL, NULL);
    }
    if (rc == VAE_OK) rc = vae_stream_end(s, NULL, NULL);
    if (rc == VAE_OK) rc = vae_decode_tensor(s, &a, &again);
    CHECK(rc == VAE_OK && same_frames(&ref, &again),
          "memo: a decode again after a stream: the same output bit for bit %s",
          rc ? vae_last_error() : "");
    vae_tensor_free(&again);
    if (rc == VAE_OK) rc = vae_decode_tensor(s, &b, &other);
    if (rc == VAE_OK) rc = vae_session_trim(s);
    if (rc == VAE_OK) rc = vae_session_plan(s, 0, a.shape, 5, &p2);
    if (rc == VAE_OK) rc = vae_decode_tensor(s, &a, &again);
    CHECK(rc == VAE_OK && p1.step_frames == p2.step_frames && p1.peak_bytes == p2.peak_bytes &&
              strcmp(p1.text, p2.text) == 0,
          "memo: the plan of an input again after others: %s", rc ? vae_last_error() : "");
    CHECK(rc == VAE_OK && same_frames(&ref, &again),
          "memo: a decode again after another length and a trim: the same output bit for bit");
    vae_tensor_free(&ref);
    vae_tensor_free(&again);
    vae_tensor_free(&other);
    vae_tensor_free(&a);
    vae_tensor_free(&b);
    vae_session_free(s);
}

int main(int argc, char **argv) {
    /* --alloc-fail: the allocation-failure sweep alone (the alloc_fail_stream ctests), else the
     * fixtures and the error paths */
    const char *shared = argc > 1 ? argv[1] : VAE_SHARED_DIR;
    const int alloc_fail = argc > 2 && strcmp(argv[2], "--alloc-fail") == 0;
    const char *q = getenv("VAE_TEST_QUICK");
    quick = q && strcmp(q, "1") == 0;
    static const char *const fixtures[] = {"taehv_w21",  "taehv_w22",  "taehv_w22_super",
                                           "wan21_tiny", "wan22_tiny", "seedvr2_tiny"};
    for (size_t i = 0; !alloc_fail && i < sizeof fixtures / sizeof *fixtures; i++)
        check_fixture(shared, fixtures[i]);
    vae_model *m = NULL;
    int rc = vae_model_synth(&m, "taehv", "{\"patch_size\":1,\"latent_channels\":16}");
    CHECK(rc == VAE_OK, "taehv synth %s", rc ? vae_last_error() : "");
    if (m && alloc_fail) check_alloc_fail(m);
    else if (m)
        check_errors(m), check_plan_memo(m);
    vae_model_free(m);
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
