/* test_taehv.c -- the TAEHV family from weights alone, and the preview decoders' API.
 *
 * Each variant's synthetic checkpoint (vae_synth_checkpoint, the upstream key names) reopened:
 * detected as taehv with the configuration it was written with, its factors and sides; the
 * sessions' output shapes with and without previews; the preview option's errors (a model
 * without previews, the super decoder's space preview, an unknown value), each naming
 * `preview`; an encoder input padded at its end by repeating its last frame equals the padded
 * input; a Wan checkpoint still detected as Wan. The numbers themselves: the taehv_* fixtures.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"
#include "test_check.h"
#include "vae.h"


static void tmp_path(char *buf, size_t n, const char *tag) {
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(buf, n, "%s/vae_test_hv_%s_%ld.safetensors", tmp, tag, vae_plat_pid());
}

typedef struct variant {
    const char *tag, *config;
    int spatial, temporal, can_encode, can_decode;
} variant;

/* written, reopened, detected with the configuration it was written with */
static void check_detect(const variant *v) {
    char path[512];
    tmp_path(path, sizeof path, v->tag);
    vae_model *want = NULL, *m = NULL;
    int rc = vae_model_synth(&want, "taehv", v->config);
    if (rc == VAE_OK) rc = vae_synth_checkpoint("taehv", v->config, path);
    if (rc == VAE_OK) rc = vae_model_open(&m, path, NULL);
    vae_model_info a, b;
    if (rc == VAE_OK) rc = vae_model_get_info(want, &a) || vae_model_get_info(m, &b);
    check(rc == VAE_OK, "%s: synthesised, written and reopened %s", v->tag,
          rc ? vae_last_error() : "");
    if (rc == VAE_OK)
        check(strcmp(b.arch, "taehv") == 0 && strcmp(a.config_json, b.config_json) == 0 &&
                  b.spatial_factor == v->spatial && b.temporal_factor == v->temporal &&
                  b.can_encode == v->can_encode && b.can_decode == v->can_decode &&
                  b.image_min == 0.0f && b.image_max == 1.0f,
              "%s: detected %s %s (factors %d/%d, encode %d decode %d)", v->tag, b.arch,
              b.config_json, b.spatial_factor, b.temporal_factor, b.can_encode, b.can_decode);
    vae_model_free(want);
    vae_model_free(m);
    remove(path);
}

/* a session of `preview` on m: its output shape for in (NULL session: the error's code) */
static int preview_shape(const vae_model *m, int preview, int encode, const int64_t *in,
                         int64_t *out) {
    vae_session_options so;
    vae_session_options_default(&so);
    so.preview = preview;
    vae_session *s = NULL;
    int nd = 0, rc = vae_session_create(&s, m, &so);
    if (rc == VAE_OK) rc = vae_session_output_shape(s, encode, in, 5, out, &nd);
    vae_session_free(s);
    return rc;
}

static int same5(const int64_t *a, const int64_t *b) {
    return memcmp(a, b, 5 * sizeof *a) == 0;
}

static void check_previews(void) {
    vae_model *m = NULL, *sup = NULL, *wan = NULL;
    int rc = vae_model_synth(&m, "taehv", "{}");
    if (rc == VAE_OK)
        rc = vae_model_synth(
            &sup, "taehv", "{\"patch_size\":2,\"latent_channels\":48,\"arch_variant\":\"super\"}");
    if (rc == VAE_OK) rc = vae_model_synth(&wan, "wan2.1", "{\"dim\":8}");
    check(rc == VAE_OK, "preview models %s", rc ? vae_last_error() : "");
    if (rc) return;
    const int64_t lat[5] = {1, 16, 3, 6, 10}, vid[5] = {1, 3, 9, 40, 56};
    const int64_t full[5] = {1, 3, 9, 48, 80}, t[5] = {1, 3, 3, 48, 80}, sp[5] = {1, 3, 9, 6, 10},
                  both[5] = {1, 3, 3, 6, 10}, enc[5] = {1, 16, 3, 5, 7};
    int64_t o[5] = {0};
    check(preview_shape(m, VAE_PREVIEW_NONE, 0, lat, o) == VAE_OK && same5(o, full),
          "decode 3 latents: 9 frames of 48x80");
    check(preview_shape(m, VAE_PREVIEW_TIME, 0, lat, o) == VAE_OK && same5(o, t),
          "time preview: one frame per latent");
    check(preview_shape(m, VAE_PREVIEW_SPACE, 0, lat, o) == VAE_OK && same5(o, sp),
          "space preview: 9 latent-sized frames");
    check(preview_shape(m, VAE_PREVIEW_BOTH, 0, lat, o) == VAE_OK && same5(o, both),
          "both: 3 latent-sized frames");
    check(preview_shape(m, VAE_PREVIEW_BOTH, 1, vid, o) == VAE_OK && same5(o, enc),
          "a preview session encodes as the model does (9 frames padded to 12 -> 3 latents)");
    rc = preview_shape(m, 4, 0, lat, o);
    check(rc == VAE_EINVAL && strstr(vae_last_error(), "preview"), "preview 4: %s",
          vae_last_error());
    rc = preview_shape(wan, VAE_PREVIEW_TIME, 0, lat, o);
    check(rc == VAE_EUNSUPPORTED && strstr(vae_last_error(), "preview"),
          "a model without previews: %s", vae_last_error());
    const int64_t slat[5] = {1, 48, 2, 4, 6}, st[5] = {1, 3, 2, 64, 96};
    check(preview_shape(sup, VAE_PREVIEW_TIME, 0, slat, o) == VAE_OK && same5(o, st),
          "super: time preview");
    rc = preview_shape(sup, VAE_PREVIEW_SPACE, 0, slat, o);
    check(rc == VAE_EUNSUPPORTED && strstr(vae_last_error(), "preview"), "super space: %s",
          vae_last_error());
    vae_model_free(m);
    vae_model_free(sup);
    vae_model_free(wan);
}

/* One 8x8 frame encodes as four copies of it (upstream pads the end with the last frame). */
static void check_padding(void) {
    vae_model *m = NULL;
    vae_session *s = NULL;
    int rc = vae_model_synth(&m, "taehv", "{}");
    if (rc == VAE_OK) rc = vae_session_create(&s, m, NULL);
    float one[3 * 64], four[3 * 4 * 64];
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < 64; i++) {
            one[c * 64 + i] = (float)((c * 64 + i) % 17) / 16.0f;
            for (int f = 0; f < 4; f++)
                four[(c * 4 + f) * 64 + i] = one[c * 64 + i];
        }
    vae_tensor a = vae_tensor_dense(5, (int64_t[]){1, 3, 1, 8, 8}, VAE_DTYPE_F32, one);
    vae_tensor b = vae_tensor_dense(5, (int64_t[]){1, 3, 4, 8, 8}, VAE_DTYPE_F32, four);
    vae_tensor oa = {0}, ob = {0};
    if (rc == VAE_OK) rc = vae_encode_tensor(s, &a, &oa);
    if (rc == VAE_OK) rc = vae_encode_tensor(s, &b, &ob);
    check(rc == VAE_OK && oa.shape[2] == 1 && ob.shape[2] == 1 &&
              memcmp(oa.data, ob.data, 16 * sizeof(float)) == 0,
          "one frame encodes as four copies of it, bit for bit %s", rc ? vae_last_error() : "");
    vae_tensor_free(&oa);
    vae_tensor_free(&ob);
    vae_session_free(s);
    vae_model_free(m);
}

static void check_wan_still_wan(void) {
    char path[512];
    tmp_path(path, sizeof path, "wan");
    vae_model *m = NULL;
    vae_model_info info;
    int rc = vae_synth_checkpoint("wan2.1", "{\"dim\":8}", path);
    if (rc == VAE_OK) rc = vae_model_open(&m, path, NULL);
    if (rc == VAE_OK) rc = vae_model_get_info(m, &info);
    check(rc == VAE_OK && strcmp(info.arch, "wan2.1") == 0, "a Wan2.1 checkpoint: %s %s",
          rc ? "" : info.arch, rc ? vae_last_error() : "");
    vae_model_free(m);
    remove(path);
}

int main(void) {
    static const variant variants[] = {
        {"w21", "{}", 8, 4, 1, 1},
        {"w22", "{\"patch_size\":2,\"latent_channels\":48}", 16, 4, 1, 1},
        {"w22_super", "{\"patch_size\":2,\"latent_channels\":48,\"arch_variant\":\"super\"}", 16, 4,
         1, 1},
        {"ltx_like",
         "{\"patch_size\":4,\"latent_channels\":128,\"encoder_time_downscale\":[true,"
         "true,true],\"decoder_time_upscale\":[true,true,true]}",
         32, 8, 1, 1},
        {"decoder_only", "{\"patch_size\":2,\"latent_channels\":32,\"has_encoder\":0}", 16, 4, 0,
         1},
        {"encoder_only", "{\"has_decoder\":0}", 8, 4, 1, 0},
    };
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++)
        check_detect(&variants[i]);
    check_previews();
    check_padding();
    check_wan_still_wan();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
