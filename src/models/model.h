/* model.h -- the architectures and their configurations (internal).
 *
 * Each architecture file provides a vae_arch: how to recognise a checkpoint, how to infer the
 * whole configuration from tensor names and shapes (no config file), how to read a configuration
 * from the upstream constructor arguments (JSON, for `vae synth`), and how to build the encode and
 * decode programs. Programs include the latent normalisation: decode programs take diffusion-space
 * latents, encode programs return the posterior mean in diffusion space.
 */
#ifndef VAE_MODEL_H
#define VAE_MODEL_H

#include "core/core.h"
#include "core/program.h"
#include "formats/store.h"
#include "models/builder.h"

struct cJSON;

#define VAE_MAX_LEVELS 8

typedef struct vae_wan_config { /* Wan2.1 and Wan2.2 */
    int dim;     /* encoder base width (96; 2.2: 160) */
    int dec_dim; /* decoder base width (= dim for 2.1; 2.2: 256) */
    int z_dim;   /* 16 or 48 */
    int n_levels;
    int dim_mult[VAE_MAX_LEVELS];           /* [1,2,4,4] */
    int num_res_blocks;                     /* 2 */
    int temperal_downsample[VAE_MAX_LEVELS]; /* n_levels - 1 flags: [F,T,T] */
    int has_encoder, has_decoder;
} vae_wan_config;

typedef struct vae_seedvr2_config {
    int n_levels;
    int block_out_channels[VAE_MAX_LEVELS]; /* [128,256,512,512] */
    int layers_per_block;                   /* 2 */
    int latent_channels;                    /* 16 */
    int norm_num_groups;                    /* 32 */
    int in_channels, out_channels;          /* 3, 3 */
    int temporal_scale_num;                 /* 2: how many levels also scale time */
    int has_encoder, has_decoder;
} vae_seedvr2_config;

typedef struct vae_taesd_config {
    int is_decoder; /* TAESD encoder and decoder are separate files */
    int latent_channels; /* 32 for taef2, 4 for taesd, 16 for taef1 / taesd3 */
    int width;           /* 64 */
} vae_taesd_config;

typedef struct vae_config {
    const struct vae_arch *arch;
    union {
        vae_wan_config wan;
        vae_seedvr2_config seedvr2;
        vae_taesd_config taesd;
    } u;
    /* latent normalisation (diffusion = (raw - mean) / std); n_latent values each */
    int n_latent;
    float latent_mean[64], latent_std[64];
    const char *norm_desc; /* for `vae info` */
} vae_config;

typedef struct vae_arch {
    const char *name; /* "wan2.1" ... */
    /* 1 when the (prefixed, possibly renamed) keys look like this architecture */
    int (*detect)(const vae_store *s, const char *prefix);
    /* fills cfg and the name map from the checkpoint alone */
    int (*config_from_store)(vae_config *cfg, const vae_store *s, const char *prefix,
                             vae_name_map_fn *map);
    /* fills cfg from upstream constructor arguments (NULL json = the released model) */
    int (*config_from_json)(vae_config *cfg, const struct cJSON *json);
    /* builds what cfg has: enc and/or dec (a program left with n_ops == 0 is absent) */
    int (*build)(vae_builder *b, const vae_config *cfg, vae_program *enc, vae_program *dec);
    /* appends the configuration as JSON with upstream argument names */
    void (*describe)(const vae_config *cfg, vae_strbuf *json);
    /* geometry */
    int spatial_factor, temporal_factor, is_video;
    float image_min, image_max;
    /* dtype fp8 by default (VAE_FP8_CONVS unset): E4M3 convs of the decoder [0] and the encoder
     * [1] at most, those nearest its output (0: every one that may). Each adds error in
     * quadrature, amplified the more the nearer the latent, and that differs per network and per
     * side (an encoder's output is the latent: its convs nearest it are its cheapest, its
     * full-resolution ones come last): the most that keeps every full-size fixture of the
     * released configuration within ~4.5e-2 on the GPU. */
    int fp8_convs[2];
} vae_arch;

extern const vae_arch vae_arch_wan21, vae_arch_wan22, vae_arch_seedvr2, vae_arch_taesd;
/* All known architectures, NULL-terminated, in detection order. */
extern const vae_arch *const vae_archs[];
const vae_arch *vae_arch_by_name(const char *name);
/* VAE_EINVAL naming the first key of the JSON object that is not in known (NULL-terminated):
 * a configuration key the engine does not read is an error, not ignored. */
int vae_config_check_keys(const struct cJSON *obj, const char *const *known, const char *arch);

/* The spatial and temporal compression of a configuration (released Wan2.2: 16 and 4). */
int vae_config_spatial_factor(const vae_config *cfg);
int vae_config_temporal_factor(const vae_config *cfg);

#endif
