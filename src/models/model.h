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

typedef struct vae_taehv_config { /* the TAEHV family (madebyollin/taehv) */
    int patch_size;      /* 1, 2 or 4: pixel (un)shuffle of the frames */
    int latent_channels; /* 16 (taew2_1, taehv), 48 (taew2_2), 32, 128 ... */
    int enc_tpool[3];    /* the encoder's TPool strides per stage (1 or 2) */
    int dec_tgrow[3];    /* the decoder's TGrow strides per stage (1 or 2) */
    int super;           /* arch_variant "super": the ConvNeXt-style decoder */
    int has_encoder, has_decoder;
    /* upstream's file name ("taew2_1", "taeh3", ...: taehv_config.c's table; "" none fits): it
     * decides what upstream keys on the name and the weights cannot tell, the frame rules */
    char variant[16];
    int frames; /* VAE_TAEHV_FRAMES_*: upstream's default, taecvx's or taeh3's frame rules */
} vae_taehv_config;
enum {
    VAE_TAEHV_FRAMES_DEFAULT = 0, /* decode trims t_upscale - 1 frames; encode pads the end */
    VAE_TAEHV_FRAMES_CVX = 1,     /* taecvx: an even latent count decodes untrimmed */
    VAE_TAEHV_FRAMES_H3 = 2       /* taeh3: MiniMax H3's 17-frame chunks and 3-token drop */
};
enum { VAE_TAEHV_STAGES = 3, VAE_TAEHV_WIDTH = 64 }; /* stages of each side; encoder width */

/* Frame rules around a program (vae_arch frame_rule), upstream's where they depend on the
 * input's length (TAEHV's taeh3 and taecvx variants). Output frames that no program frame fills
 * are zeros (at the end only). */
typedef struct vae_frame_rule {
    /* encode: the input in segments of seg_frames (the last completed by repeating the last
     * frame), each run alone (fresh temporal state) after seg_lead zero frames; 0: one run */
    int seg_frames, seg_lead;
    /* decode: of each `period` program frames the first `skip` dropped, the last period
     * completed with zeros; 0: none */
    int period, skip;
    /* decode: the first skip_odd program frames dropped when the latent count is odd (kept when
     * it is even) */
    int skip_odd;
    /* the last drop_tail output frames dropped */
    int drop_tail;
} vae_frame_rule;

typedef struct vae_config {
    const struct vae_arch *arch;
    union {
        vae_wan_config wan;
        vae_seedvr2_config seedvr2;
        vae_taesd_config taesd;
        vae_taehv_config taehv;
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
    /* Optional (NULL: the architecture has no previews): the decode program of a preview
     * (VAE_PREVIEW_TIME and/or VAE_PREVIEW_SPACE: that upscaling off) on the weights of the
     * built decoder dec, which it shares; VAE_EUNSUPPORTED naming `preview` for a kind the
     * configuration lacks. */
    int (*preview)(const vae_config *cfg, const vae_program *dec, int preview, vae_program *out);
    /* Optional (NULL: none): frame rules that depend on the input's length, which a program
     * (causal, of fixed ops) cannot hold; 1 with *rule filled when the configuration has one for
     * that direction and preview (session_frames.c applies it), else 0. */
    int (*frame_rule)(const vae_config *cfg, int encode, int preview, struct vae_frame_rule *rule);
    /* geometry */
    int spatial_factor, temporal_factor, is_video;
    float image_min, image_max;
    /* dtype fp8 by default (VAE_FP8_CONVS and VAE_FP8_ERROR unset): E4M3 convs of the decoder
     * [0] and the encoder [1] at most, those nearest its output (0: every one that may; the
     * error budget, VAE_FP8_ERROR, replaces this count once measured on GPUs). Each adds error in
     * quadrature, amplified the more the nearer the latent, and that differs per network and per
     * side (an encoder's output is the latent: its convs nearest it are its cheapest, its
     * full-resolution ones come last): the most that keeps every full-size fixture of the
     * released configuration within ~4.5e-2 on the GPU. */
    int fp8_convs[2];
} vae_arch;

/* The hooks of a vae_arch descriptor whose functions are named by one prefix:
 * prefix_detect, prefix_config_from_store, prefix_config_from_json, prefix_build and
 * prefix_describe, e.g. `const vae_arch vae_arch_x = {.name = "x", VAE_ARCH_HOOKS(x), ...};`. */
#define VAE_ARCH_HOOKS(prefix)                                                                     \
    .detect = prefix##_detect, .config_from_store = prefix##_config_from_store,                    \
    .config_from_json = prefix##_config_from_json, .build = prefix##_build,                        \
    .describe = prefix##_describe

/* taehv.c: the decoders' stage widths [base, super][stage], the configuration's check, the
 * programs (vae_arch build) and the previews (vae_arch preview) */
extern const int vae_taehv_dec_widths[2][VAE_TAEHV_STAGES + 1];
int vae_taehv_check(const vae_taehv_config *c);
int vae_taehv_build(vae_builder *b, const vae_config *cfg, vae_program *enc, vae_program *dec);
int vae_taehv_preview(const vae_config *cfg, const vae_program *dec, int preview,
                      vae_program *out);

extern const vae_arch vae_arch_wan21, vae_arch_wan22, vae_arch_seedvr2, vae_arch_taesd,
    vae_arch_taehv;
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
