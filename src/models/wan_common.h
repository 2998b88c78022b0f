/* wan_common.h -- building blocks shared by the Wan2.1 and Wan2.2 VAEs (internal).
 *
 * Every helper appends ops to a program and asks the builder for the checkpoint tensors by their
 * upstream (Wan-Video) names, in upstream state_dict order. Value ids are returned; -1 propagates
 * once the builder has recorded an error. Layer prefixes are upstream names without the trailing
 * dot, e.g. "decoder.upsamples.3". See wan_common.c for how each upstream first-frame/chunk rule
 * maps onto the stream semantics of program.h.
 */
#ifndef VAE_WAN_COMMON_H
#define VAE_WAN_COMMON_H

#include "models/model.h"

/* A parameter-free shortcut of Wan2.2's Down_/Up_ResidualBlock: AvgDown3D or DupUp3D applied to
 * the block input `src` (c_in channels) with factors ft (time) and fs (space). */
typedef struct wan_shortcut {
    int src;
    int c_in, c_out;
    int ft, fs;
} wan_shortcut;

/* CausalConv3d 3x3x3, padding 1 (2 zero frames in front, none behind), optional residual. */
int wan_conv3(vae_builder *b, vae_program *p, int x, const char *name, int c_in, int c_out,
              int residual);
/* CausalConv3d 1x1x1 (5-D weight). */
int wan_conv1(vae_builder *b, vae_program *p, int x, const char *name, int c_in, int c_out);
/* ResidualBlock(c_in, c_out): residual.{0,2,3,6} (+ shortcut when c_in != c_out). */
int wan_residual_block(vae_builder *b, vae_program *p, int x, const char *pre, int c_in, int c_out);
/* AttentionBlock(c): norm.gamma [c,1,1], to_qkv / proj Conv2d 1x1. */
int wan_attention_block(vae_builder *b, vae_program *p, int x, const char *pre, int c);
/* Middle: ResidualBlock, AttentionBlock, ResidualBlock at width c (pre = "decoder.middle"). */
int wan_middle(vae_builder *b, vae_program *p, int x, const char *pre, int c);
/* head: RMS_norm(c_in) [c,1,1,1], SiLU, CausalConv3d 3x3x3 c_in -> c_out. */
int wan_head(vae_builder *b, vae_program *p, int x, const char *pre, int c_in, int c_out);
/* Resample downsample2d / downsample3d (temporal) at width c; avg (optional): AvgDown3D shortcut
 * added to the output (Wan2.2). */
int wan_resample_down(vae_builder *b, vae_program *p, int x, const char *pre, int c, int temporal,
                      const wan_shortcut *avg);
/* Resample upsample2d / upsample3d (temporal) c -> c_out (Wan2.1: c/2, Wan2.2: c); dup (optional):
 * DupUp3D shortcut added to the output (Wan2.2). */
int wan_resample_up(vae_builder *b, vae_program *p, int x, const char *pre, int c, int c_out,
                    int temporal, const wan_shortcut *dup);
/* Wan2.2's parameter-free shortcuts as shuffles (first-chunk rules included). */
int wan_avg_down(vae_builder *b, vae_program *p, const wan_shortcut *s);
int wan_dup_up(vae_builder *b, vae_program *p, const wan_shortcut *s);
/* Wan2.2 patchify (p = 2): [3][H][W] -> [12][H/2][W/2] and its inverse. */
int wan_patchify(vae_program *p, int x);
int wan_unpatchify(vae_program *p, int x);

/* Latent normalisation as SCALE_SHIFT ops: diffusion -> VAE space (decode) and back (encode). */
int wan_latent_in(vae_builder *b, vae_program *p, int x, const vae_config *cfg);
int wan_latent_out(vae_builder *b, vae_program *p, int x, const vae_config *cfg);
/* Encode tail: top-level conv1 (full 2z x 2z weight requested, only the mu rows used), then the
 * normalisation to diffusion space. */
int wan_encode_tail(vae_builder *b, vae_program *p, int x, const vae_config *cfg);
/* Decode start: normalisation to VAE space, then top-level conv2. */
int wan_decode_head(vae_builder *b, vae_program *p, int x, const vae_config *cfg);

/* Checks the configuration of Wan2.1 (is22 = 0) or Wan2.2 (is22 = 1), then builds the requested
 * programs (enc / dec may be NULL) in the upstream state_dict order (encoder, conv1, conv2,
 * decoder). A half that the file lacks leaves its top-level conv1/conv2 requested (so it does not
 * count as unused) when present. */
int wan_build_programs(vae_builder *b, const vae_config *cfg, vae_program *enc, vae_program *dec,
                       int is22);

/* ---- configuration ------------------------------------------------------------------------- */
/* Which Wan key scheme a checkpoint uses (after prefix). */
enum { WAN_SCHEME_NONE = 0, WAN_SCHEME_UPSTREAM = 1, WAN_SCHEME_DIFFUSERS = 2 };
/* Returns the scheme when the keys look like Wan2.1 (is22 = 0) or Wan2.2 (is22 = 1), else 0. */
int wan_scheme(const vae_store *s, const char *prefix, int is22);
/* Infers the configuration from names and shapes; sets *map for diffusers files. Both readers
 * set cfg->arch to the version's descriptor. */
int wan_config_from_store(vae_config *cfg, const vae_store *s, const char *prefix,
                          vae_name_map_fn *map, int is22);
int wan_config_from_json(vae_config *cfg, const struct cJSON *json, int is22);
void wan_describe(const vae_config *cfg, vae_strbuf *json, int is22);
/* Defines the vae_arch hooks of one version, for VAE_ARCH_HOOKS(ver): the functions above with
 * is22 bound. */
#define WAN_VERSION_HOOKS(ver, is22)                                                               \
    static int ver##_build(vae_builder *b, const vae_config *cfg, vae_program *enc,                \
                           vae_program *dec) {                                                     \
        return wan_build_programs(b, cfg, enc, dec, is22);                                         \
    }                                                                                              \
    static int ver##_detect(const vae_store *s, const char *prefix) {                              \
        return wan_scheme(s, prefix, is22) != 0;                                                   \
    }                                                                                              \
    static int ver##_config_from_store(vae_config *cfg, const vae_store *s, const char *prefix,    \
                                       vae_name_map_fn *map) {                                     \
        return wan_config_from_store(cfg, s, prefix, map, is22);                                   \
    }                                                                                              \
    static int ver##_config_from_json(vae_config *cfg, const struct cJSON *json) {                 \
        return wan_config_from_json(cfg, json, is22);                                              \
    }                                                                                              \
    static void ver##_describe(const vae_config *cfg, vae_strbuf *json) {                          \
        wan_describe(cfg, json, is22);                                                             \
    }
/* What both versions' descriptors share: time compressed 4x, video in [-1, 1]. */
#define WAN_VIDEO_GEOMETRY(spatial)                                                                \
    .spatial_factor = (spatial), .temporal_factor = 4, .is_video = 1, .image_min = -1.0f,          \
    .image_max = 1.0f
/* Latent mean/std and norm_desc for z_dim (released values for 16 / 48, else identity). */
void wan_set_latent_norm(vae_config *cfg, int is22);
/* The upstream -> diffusers name map for a given num_res_blocks (NULL when unsupported). */
vae_name_map_fn wan_diffusers_map(int is22, int num_res_blocks);

#endif
