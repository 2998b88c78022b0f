/* test_threads.c -- one model, several sessions used from several threads at once (a server).
 *
 * Each thread makes its own session of the shared model (CPU backend, one OpenMP thread, so that
 * ThreadSanitizer sees only the library's own threads) and decodes and encodes the wan21_tiny
 * cases again and again (one of them on a device group of two CPU lanes, each on a thread of its
 * own): every output equals the single-threaded one bit for bit (tiled: within 1e-5), and the
 * thread-local error message of a failing call on one thread is that call's own. The suite also
 * runs it under ThreadSanitizer (scripts/test.sh: build-tsan).
 * usage: test_threads SHARED_DIR */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "vae.h"

enum { THREADS = 4, ROUNDS = 3 };

typedef struct job {
    const vae_model *m;
    const vae_tensor *lat, *vid, *ref_dec, *ref_enc;
    int id, failures;
} job;

/* tol 0: bit for bit; else the relative L2 distance */
static int same(const vae_tensor *a, const vae_tensor *b, double tol) {
    size_t n = 1;
    for (int i = 0; i < a->ndim; i++) n *= (size_t)a->shape[i];
    if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof a->shape) != 0) return 0;
    if (tol == 0) return memcmp(a->data, b->data, n * sizeof(float)) == 0;
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double x = ((const float *)a->data)[i], y = ((const float *)b->data)[i];
        num += (x - y) * (x - y), den += y * y;
    }
    return sqrt(num) <= tol * sqrt(den);
}

static void *worker(void *arg) {
    job *j = arg;
    vae_session_options so;
    vae_session_options_default(&so);
    so.threads = 1;
    const int tiled = j->id % 2; /* exact tiles: the same output up to float rounding */
    if (tiled) so.tile_height = so.tile_width = 16;
    if (j->id == THREADS - 1) { /* a device group of 2 CPU lanes (one thread each) sharing them */
        so.n_devices = 2, so.devices[0] = 0, so.devices[1] = 1;
        so.threads = 2;
    }
    vae_session *s = NULL;
    if (vae_session_create(&s, j->m, &so)) {
        printf("FAIL thread %d: session: %s\n", j->id, vae_last_error());
        j->failures++;
        return NULL;
    }
    for (int r = 0; r < ROUNDS; r++) {
        vae_tensor d = {0}, e = {0};
        int rc = vae_decode_tensor(s, j->lat, &d);
        if (rc == VAE_OK) rc = vae_encode_tensor(s, j->vid, &e);
        const double tol = tiled ? 1e-5 : 0;
        if (rc || !same(&d, j->ref_dec, tol) || !same(&e, j->ref_enc, tol)) {
            printf("FAIL thread %d round %d: %s\n", j->id, r, rc ? vae_last_error() : "output differs");
            j->failures++;
        }
        vae_tensor_free(&d);
        vae_tensor_free(&e);
        /* a failing call's message belongs to this thread */
        vae_tensor bad = *j->lat;
        bad.shape[1] = 15 - j->id;
        char want[32];
        snprintf(want, sizeof want, "has %d channels", 15 - j->id);
        if (vae_decode_tensor(s, &bad, &d) != VAE_ESHAPE || !strstr(vae_last_error(), want)) {
            printf("FAIL thread %d: message '%s' is not its own\n", j->id, vae_last_error());
            j->failures++;
        }
    }
    vae_session_free(s);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    char path[1024], io[1024];
    snprintf(path, sizeof path, "%s/fixtures/wan21_tiny.safetensors", argv[1]);
    snprintf(io, sizeof io, "%s/fixtures/wan21_tiny.io.safetensors", argv[1]);
    vae_model *m = NULL;
    vae_session *s = NULL;
    vae_tensor lat = {0}, vid = {0}, ref_dec = {0}, ref_enc = {0};
    vae_session_options so;
    vae_session_options_default(&so);
    so.threads = 1;
    if (vae_model_open(&m, path, NULL) || vae_tensor_load(io, "dec_t3.latent", &lat) ||
        vae_tensor_load(io, "enc_t9.video", &vid) || vae_session_create(&s, m, &so) ||
        vae_decode_tensor(s, &lat, &ref_dec) || vae_encode_tensor(s, &vid, &ref_enc)) {
        printf("FAIL setup: %s\n", vae_last_error());
        return 1;
    }
    vae_session_free(s);
    pthread_t t[THREADS];
    job jobs[THREADS];
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (job){m, &lat, &vid, &ref_dec, &ref_enc, i, 0};
        pthread_create(&t[i], NULL, worker, &jobs[i]);
    }
    int failures = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        failures += jobs[i].failures;
    }
    printf("%s: %d threads x %d rounds of decode + encode on one model, %d failures\n",
           failures ? "FAIL" : "PASS", THREADS, ROUNDS, failures);
    vae_tensor_free(&lat);
    vae_tensor_free(&vid);
    vae_tensor_free(&ref_dec);
    vae_tensor_free(&ref_enc);
    vae_model_free(m);
    return failures != 0;
}
