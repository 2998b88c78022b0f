/* wan21.c -- the Wan2.1 VAE (Wan-Video wan/modules/vae.py), also used by Wan2.2-A14B, Qwen-Image.
 *
 * Encoder: conv1 3->dim; per level num_res_blocks ResidualBlocks then a Resample (downsample2d or
 * downsample3d, none after the last level); middle (RB, attention, RB); head to 2*z_dim; then the
 * top-level conv1 (mu rows) and the normalisation to diffusion space.
 * Decoder: normalisation to VAE space, top-level conv2, conv1 z_dim->dim*mult[-1], middle, per
 * level num_res_blocks+1 ResidualBlocks then upsample3d/upsample2d (Conv2d halves the width), head
 * to 3.
 */
#include <stdio.h>

#include "models/wan_common.h"

static int build_encoder(vae_builder *b, const vae_config *cfg, vae_program *p) {
    const vae_wan_config *w = &cfg->u.wan;
    int n = w->n_levels, nrb = w->num_res_blocks;
    p->first_chunk = 1;
    p->chunk = 4;
    int dims[VAE_MAX_LEVELS + 1];
    dims[0] = w->dim;
    for (int i = 0; i < n; i++)
        dims[i + 1] = w->dim * w->dim_mult[i];

    int x = wan_conv3(b, p, p->input, "encoder.conv1", 3, dims[0], -1);
    char pre[128];
    int idx = 0;
    for (int i = 0; i < n; i++) {
        int in = dims[i], out = dims[i + 1];
        for (int r = 0; r < nrb; r++) {
            snprintf(pre, sizeof pre, "encoder.downsamples.%d", idx++);
            x = wan_residual_block(b, p, x, pre, in, out);
            in = out;
        }
        if (i != n - 1) {
            snprintf(pre, sizeof pre, "encoder.downsamples.%d", idx++);
            x = wan_resample_down(b, p, x, pre, out, w->temperal_downsample[i], NULL);
        }
    }
    int c = dims[n];
    x = wan_middle(b, p, x, "encoder.middle", c);
    x = wan_head(b, p, x, "encoder.head", c, 2 * w->z_dim);
    x = wan_encode_tail(b, p, x, cfg);
    return x < 0 ? -1 : 0;
}

static int build_decoder(vae_builder *b, const vae_config *cfg, vae_program *p) {
    const vae_wan_config *w = &cfg->u.wan;
    int n = w->n_levels, nrb = w->num_res_blocks, z = w->z_dim;
    p->first_chunk = 1;
    p->chunk = 1;
    int dims[VAE_MAX_LEVELS + 1];
    dims[0] = w->dec_dim * w->dim_mult[n - 1];
    for (int i = 0; i < n; i++)
        dims[i + 1] = w->dec_dim * w->dim_mult[n - 1 - i];

    int x = wan_decode_head(b, p, p->input, cfg);
    x = wan_conv3(b, p, x, "decoder.conv1", z, dims[0], -1);
    x = wan_middle(b, p, x, "decoder.middle", dims[0]);
    char pre[128];
    int idx = 0;
    for (int i = 0; i < n; i++) {
        int in = dims[i], out = dims[i + 1];
        /* upstream: `if i == 1 or i == 2 or i == 3: in_dim = in_dim // 2` (the upsample halves) */
        if (i >= 1 && i <= 3) in /= 2;
        for (int r = 0; r < nrb + 1; r++) {
            snprintf(pre, sizeof pre, "decoder.upsamples.%d", idx++);
            x = wan_residual_block(b, p, x, pre, in, out);
            in = out;
        }
        if (i != n - 1) {
            snprintf(pre, sizeof pre, "decoder.upsamples.%d", idx++);
            int temporal = w->temperal_downsample[n - 2 - i]; /* temperal_upsample = reversed */
            x = wan_resample_up(b, p, x, pre, out, out / 2, temporal, NULL);
        }
    }
    x = wan_head(b, p, x, "decoder.head", dims[n], 3);
    return x < 0 ? -1 : 0;
}

static int wan21_build(vae_builder *b, const vae_config *cfg, vae_program *enc, vae_program *dec) {
    const vae_wan_config *w = &cfg->u.wan;
    if (w->n_levels < 2 || w->n_levels > 4 || w->num_res_blocks < 1 || w->z_dim < 1 || w->dim < 1)
        return vb_error(b, VAE_EUNSUPPORTED, "wan2.1: unsupported configuration");
    return wan_build_programs(b, cfg, enc, dec, build_encoder, build_decoder);
}

static int wan21_detect(const vae_store *s, const char *prefix) {
    return wan_scheme(s, prefix, 0) != 0;
}

static int wan21_from_store(vae_config *cfg, const vae_store *s, const char *prefix,
                            vae_name_map_fn *map) {
    int rc = wan_config_from_store(cfg, s, prefix, map, 0);
    if (!rc) cfg->arch = &vae_arch_wan21;
    return rc;
}

static int wan21_from_json(vae_config *cfg, const struct cJSON *json) {
    int rc = wan_config_from_json(cfg, json, 0);
    if (!rc) cfg->arch = &vae_arch_wan21;
    return rc;
}

static void wan21_describe(const vae_config *cfg, vae_strbuf *json) {
    wan_describe(cfg, json, 0);
}

const vae_arch vae_arch_wan21 = {
    .name = "wan2.1",
    .detect = wan21_detect,
    .config_from_store = wan21_from_store,
    .config_from_json = wan21_from_json,
    .build = wan21_build,
    .describe = wan21_describe,
    .spatial_factor = 8,
    .temporal_factor = 4,
    .is_video = 1,
    .image_min = -1.0f,
    .image_max = 1.0f,
    .fp8_convs = {16, 0}, /* dec 4.42e-2 on the GPU (18: 4.63e-2); enc every one that may */
};
