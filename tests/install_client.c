/* install_client.c -- a program built against the *installed* library (pkg-config vae), as a
 * user builds one: only vae.h and libvae.so. Decodes the wan21_tiny fixture latent three ways
 * and checks they agree: vae_decode_tensor (host, dense), vae_decode_into with a bf16 input in a
 * strided (channels-last) layout and a float32 output in a padded layout, and the same call after
 * a cancel request of an earlier call (a new call clears it). Also the model from named tensors,
 * and that the installed developer header (vae_dev.h) builds and its setter is exported.
 * usage: install_client SHARED_DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vae.h>
#include <vae_dev.h>

#define CHECK(x)                                                                                   \
    do {                                                                                           \
        int rc_ = (x);                                                                             \
        if (rc_) {                                                                                 \
            fprintf(stderr, "FAIL %s: %s (%s)\n", #x, vae_strerror(rc_), vae_last_error());       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static uint16_t to_bf16(float f) { /* round to nearest even */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    char path[1024], io[1024];
    snprintf(path, sizeof path, "%s/fixtures/wan21_tiny.safetensors", argv[1]);
    snprintf(io, sizeof io, "%s/fixtures/wan21_tiny.io.safetensors", argv[1]);
    vae_model *m = NULL;
    vae_session *s = NULL;
    vae_tensor lat = {0}, ref = {0};
    CHECK(vae_model_open(&m, path, NULL));
    CHECK(vae_session_create(&s, m, NULL));
    CHECK(vae_tensor_load(io, "dec_t3.latent", &lat)); /* [1,16,3,4,6] */
    /* the latent rounded to bf16, so that every path sees the same values */
    const int64_t C = 16, T = 3, H = 4, W = 6, n = C * T * H * W;
    float *lf = lat.data;
    uint16_t *cl = malloc((size_t)n * 2); /* channels-last storage [T][H][W][C] */
    for (int64_t c = 0; c < C; c++)
        for (int64_t i = 0; i < T * H * W; i++) {
            uint16_t b = to_bf16(lf[c * T * H * W + i]);
            cl[i * C + c] = b;
            uint32_t u = (uint32_t)b << 16;
            memcpy(&lf[c * T * H * W + i], &u, 4);
        }
    CHECK(vae_decode_tensor(s, &lat, &ref)); /* [1,3,9,32,48] float32 */
    vae_tensor in = {.ndim = 5, .shape = {1, C, T, H, W}, .dtype = VAE_DTYPE_BF16, .data = cl,
                     .strides = {n, 1, H * W * C, W * C, C}};
    /* output rows padded to 64 columns */
    const int64_t OT = 9, OH = 32, OW = 48, PW = 64;
    float *buf = malloc((size_t)(3 * OT * OH * PW) * 4);
    for (int64_t i = 0; i < 3 * OT * OH * PW; i++) buf[i] = NAN;
    vae_tensor out = {.ndim = 5, .shape = {1, 3, OT, OH, OW}, .dtype = VAE_DTYPE_F32, .data = buf,
                      .strides = {3 * OT * OH * PW, OT * OH * PW, OH * PW, PW, 1}};
    vae_session_cancel(s); /* a request before the call does not stop it */
    CHECK(vae_decode_into(s, &in, &out, NULL));
    double err = 0, den = 0;
    int pad_ok = 1;
    const float *r = ref.data;
    for (int64_t c = 0; c < 3; c++)
        for (int64_t t = 0; t < OT; t++)
            for (int64_t y = 0; y < OH; y++)
                for (int64_t x = 0; x < PW; x++) {
                    float v = buf[((c * OT + t) * OH + y) * PW + x];
                    if (x >= OW) {
                        pad_ok &= isnan(v);
                        continue;
                    }
                    float w = r[((c * OT + t) * OH + y) * OW + x];
                    err += (v - w) * (double)(v - w), den += (double)w * w;
                }
    double rel = sqrt(err / den);
    printf("decode_into strided bf16 -> padded f32: rel %.3g vs vae_decode_tensor, padding %s\n",
           rel, pad_ok ? "untouched" : "WRITTEN");
    if (!(rel < 1e-6) || !pad_ok) return 1;
    const char *names[1] = {"decoder.conv1.weight"};
    vae_model *bad = NULL;
    if (vae_model_open_tensors(&bad, names, &lat, 1, NULL) == VAE_OK) return 1; /* not a VAE */
    printf("model from tensors: %s\n", vae_last_error());
    vae_session_options so;
    vae_session_options_default(&so);
    CHECK(vae_session_options_set(&so, VAE_PARAM_PLAN_OFFLOAD, -1)); /* 39: the numbers are ABI */
    if (VAE_PARAM_PLAN_OFFLOAD != 39 || !(so.params_set >> 39 & 1)) return 1;
    printf("PASS install client (%s)\n", vae_version_string());
    vae_tensor_free(&ref);
    vae_tensor_free(&lat);
    free(cl);
    free(buf);
    vae_session_free(s);
    vae_model_free(m);
    return 0;
}
