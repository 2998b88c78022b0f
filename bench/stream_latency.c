/* stream_latency.c -- how long a stream takes from a latent frame in to its frames out
 * (vae.h vae_stream_*): the live-preview and real-time decoding case.
 *
 * usage: stream_latency ARCH|CHECKPOINT [--latents N] [--size HxW] [--device cpu|cuda]
 *                       [--dtype fp32|bf16|fp16] [--preview none|time|space|both]
 * ARCH (taehv, wan2.1, wan2.2, seedvr2): synthetic weights of the released configuration; else a
 * checkpoint file. HxW is the latent's size (default 60x104: 480x832 video for Wan and taew2_1).
 * Streams N latent frames (default 21) one push each, twice (the first stream warms up: tuned
 * conv paths, graphs), and prints each push's time on the second (median, worst, the first
 * latent's), with the frames each push handed out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vae.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int count_frames(const float *fr, int first, int n, int c, int h, int w, void *user) {
    (void)fr, (void)first, (void)c, (void)h, (void)w;
    *(int *)user += n;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One stream of n latents, one push each: each push's seconds into dt, frames handed out. */
static int stream_once(vae_session *s, const vae_tensor *lat, int n, double *dt, int *frames) {
    *frames = 0;
    int rc = vae_stream_begin(s, 0, lat->shape, 5);
    vae_tensor one = *lat;
    one.shape[2] = 1;
    for (int t = 0; rc == VAE_OK && t < n; t++) {
        one.data = (float *)lat->data + (size_t)t * lat->strides[2];
        const double t0 = now();
        rc = vae_stream_push(s, &one, count_frames, frames);
        dt[t] = now() - t0;
    }
    if (rc == VAE_OK) rc = vae_stream_end(s, count_frames, frames);
    return rc;
}

static int open_model(const char *what, vae_model **m) {
    static const char *const archs[] = {"taehv", "wan2.1", "wan2.2", "seedvr2"};
    for (int i = 0; i < 4; i++)
        if (strcmp(what, archs[i]) == 0) return vae_model_synth(m, what, NULL);
    return vae_model_open(m, what, NULL);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: stream_latency ARCH|CHECKPOINT [--latents N] [--size HxW] "
                "[--device cpu|cuda] [--dtype fp32|bf16|fp16] [--preview none|time|space|both]\n");
        return 2;
    }
    int n = 21, h = 60, w = 104;
    vae_session_options so;
    vae_session_options_default(&so);
    for (int i = 2; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--latents") == 0)
            n = atoi(v);
        else if (strcmp(k, "--size") == 0 && sscanf(v, "%dx%d", &h, &w) == 2)
            continue;
        else if (strcmp(k, "--device") == 0)
            so.device = strcmp(v, "cuda") ? VAE_DEVICE_CPU : VAE_DEVICE_CUDA;
        else if (strcmp(k, "--dtype") == 0)
            so.dtype = strcmp(v, "bf16") == 0   ? VAE_DTYPE_BF16
                       : strcmp(v, "fp16") == 0 ? VAE_DTYPE_F16
                                                : VAE_DTYPE_F32;
        else if (strcmp(k, "--preview") == 0)
            so.preview = strcmp(v, "time") == 0    ? VAE_PREVIEW_TIME
                         : strcmp(v, "space") == 0 ? VAE_PREVIEW_SPACE
                         : strcmp(v, "both") == 0  ? VAE_PREVIEW_BOTH
                                                   : VAE_PREVIEW_NONE;
        else {
            fprintf(stderr, "unknown option %s\n", k);
            return 2;
        }
    }
    if (n < 1 || h < 1 || w < 1) {
        fprintf(stderr, "--latents and --size must be positive\n");
        return 2;
    }
    vae_model *m = NULL;
    vae_session *s = NULL;
    vae_model_info info;
    int rc = open_model(argv[1], &m);
    if (rc == VAE_OK) rc = vae_model_get_info(m, &info);
    if (rc == VAE_OK) rc = vae_session_create(&s, m, &so);
    if (rc) {
        fprintf(stderr, "%s: %s\n", argv[1], vae_last_error());
        vae_model_free(m);
        return 1;
    }
    const int64_t shape[5] = {1, info.latent_channels, n, h, w};
    float *data = malloc(sizeof(float) * (size_t)info.latent_channels * n * h * w);
    for (size_t i = 0; data && i < (size_t)info.latent_channels * n * h * w; i++)
        data[i] = (float)((i * 2654435761u) % 2001) / 1000.0f - 1.0f;
    vae_tensor lat = vae_tensor_dense(5, shape, VAE_DTYPE_F32, data);
    double *dt = malloc(sizeof(double) * (size_t)n), *sorted = malloc(sizeof(double) * (size_t)n);
    int frames = 0;
    rc = data && dt && sorted ? stream_once(s, &lat, n, dt, &frames) : VAE_ENOMEM; /* warm-up */
    if (rc == VAE_OK) rc = stream_once(s, &lat, n, dt, &frames);
    if (rc == VAE_OK) {
        memcpy(sorted, dt, sizeof(double) * (size_t)n);
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
        printf("%s %s %s, %d latents of %dx%d, one push each: %d frames; per push: median %.3f "
               "ms, worst %.3f ms, first latent %.3f ms; peak %.1f MiB\n",
               info.arch, so.device == VAE_DEVICE_CUDA ? "cuda" : "cpu", vae_dtype_name(so.dtype),
               n, h, w, frames, sorted[n / 2] * 1e3, sorted[n - 1] * 1e3, dt[0] * 1e3,
               (double)vae_session_peak_bytes(s) / (1 << 20));
    } else {
        fprintf(stderr, "stream: %s\n", vae_last_error());
    }
    free(dt);
    free(sorted);
    free(data);
    vae_session_free(s);
    vae_model_free(m);
    return rc ? 1 : 0;
}
