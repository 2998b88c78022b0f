/* wan22.c -- the Wan2.2 VAE (Wan-Video wan/modules/vae2_2.py; Wan2.2 TI2V-5B), 16x16x4, z_dim 48.
 *
 * Encoder: patchify (2x2 -> 12 channels), conv1 12->dim, per level a Down_ResidualBlock
 * (num_res_blocks ResidualBlocks then downsample2d/3d, plus the parameter-free AvgDown3D shortcut
 * of the block input), middle, head to 2*z_dim, top-level conv1 (mu rows), normalisation. Decoder:
 * normalisation, conv2, conv1 z_dim->dec_dim*mult[-1], middle, per level an Up_ResidualBlock
 * (num_res_blocks+1 ResidualBlocks then upsample3d/2d with Conv2d dim->dim, plus the DupUp3D
 * shortcut; the last level has neither), head to 12, unpatchify. Neither direction clamps or scales
 * anything beyond the latent normalisation (the reference's clamp to [-1, 1] is in its wrapper and
 * left to the caller).
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

    int x = wan_patchify(p, p->input);
    x = wan_conv3(b, p, x, "encoder.conv1", 12, dims[0], -1);
    char pre[128];
    for (int i = 0; i < n; i++) {
        int in = dims[i], out = dims[i + 1];
        int down = i != n - 1;
        int tdown = down ? w->temperal_downsample[i] : 0;
        wan_shortcut avg = {x, dims[i], out, tdown ? 2 : 1, down ? 2 : 1};
        for (int r = 0; r < nrb; r++) {
            snprintf(pre, sizeof pre, "encoder.downsamples.%d.downsamples.%d", i, r);
            x = wan_residual_block(b, p, x, pre, in, out);
            in = out;
        }
        if (down) {
            snprintf(pre, sizeof pre, "encoder.downsamples.%d.downsamples.%d", i, nrb);
            x = wan_resample_down(b, p, x, pre, out, tdown, &avg);
        } else {
            int s = wan_avg_down(b, p, &avg); /* identity when in == out */
            x = vb_add(p, x, s, out, VAE_ACT_NONE);
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
    for (int i = 0; i < n; i++) {
        int in = dims[i], out = dims[i + 1];
        int up = i != n - 1;
        int tup = up ? w->temperal_downsample[n - 2 - i] : 0; /* temperal_upsample = reversed */
        wan_shortcut dup = {x, dims[i], out, tup ? 2 : 1, 2};
        for (int r = 0; r < nrb + 1; r++) {
            snprintf(pre, sizeof pre, "decoder.upsamples.%d.upsamples.%d", i, r);
            x = wan_residual_block(b, p, x, pre, in, out);
            in = out;
        }
        if (up) {
            snprintf(pre, sizeof pre, "decoder.upsamples.%d.upsamples.%d", i, nrb + 1);
            x = wan_resample_up(b, p, x, pre, out, out, tup, &dup);
        }
    }
    x = wan_head(b, p, x, "decoder.head", dims[n], 12);
    x = wan_unpatchify(p, x);
    return x < 0 ? -1 : 0;
}

static int wan22_build(vae_builder *b, const vae_config *cfg, vae_program *enc, vae_program *dec) {
    const vae_wan_config *w = &cfg->u.wan;
    if (w->n_levels < 2 || w->n_levels > VAE_MAX_LEVELS || w->num_res_blocks < 1 || w->z_dim < 1 ||
        (w->has_encoder && w->dim < 1) || (w->has_decoder && w->dec_dim < 1))
        return vb_error(b, VAE_EUNSUPPORTED, "wan2.2: unsupported configuration");
    return wan_build_programs(b, cfg, enc, dec, build_encoder, build_decoder);
}

static int wan22_detect(const vae_store *s, const char *prefix) {
    return wan_scheme(s, prefix, 1) != 0;
}

static int wan22_from_store(vae_config *cfg, const vae_store *s, const char *prefix,
                            vae_name_map_fn *map) {
    int rc = wan_config_from_store(cfg, s, prefix, map, 1);
    if (!rc) cfg->arch = &vae_arch_wan22;
    return rc;
}

static int wan22_from_json(vae_config *cfg, const struct cJSON *json) {
    int rc = wan_config_from_json(cfg, json, 1);
    if (!rc) cfg->arch = &vae_arch_wan22;
    return rc;
}

static void wan22_describe(const vae_config *cfg, vae_strbuf *json) {
    wan_describe(cfg, json, 1);
}

const vae_arch vae_arch_wan22 = {
    .name = "wan2.2",
    .detect = wan22_detect,
    .config_from_store = wan22_from_store,
    .config_from_json = wan22_from_json,
    .build = wan22_build,
    .describe = wan22_describe,
    .spatial_factor = 16,
    .temporal_factor = 4,
    .is_video = 1,
    .image_min = -1.0f,
    .image_max = 1.0f,
    .fp8_convs = {24, 0}, /* dec 4.02e-2 on the GPU (26: 4.51e-2, no faster); enc all */
};
