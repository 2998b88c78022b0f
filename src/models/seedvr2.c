/* seedvr2.c -- the SeedVR2 video VAE (ByteDance-Seed/SeedVR models/video_vae_v3, "ema_vae.pth"):
 * a diffusers AutoencoderKL inflated to causal 3-D (VideoAutoencoderKLWrapper).
 *
 * Upstream facts this file relies on (attn_video_vae.py, causal_inflation_lib.py):
 * - InflatedCausalConv3d with temporal padding p: no temporal padding inside the conv; at the
 *   start of a stream the input is extended with 2p copies of its first frame (extend_head), later
 *   slices are prefixed with the last (kt - st) input frames kept from the previous slice (memory).
 *   3x3x3 convs: p = 1 -> 2 replicated frames in front. 1x1x1 convs: nothing. As a whole-sequence
 *   rule: conv over [x0, x0, x0, x1, ...] (CONV tpad 2, REPLICATE).
 * - Encoder slicing (slicing_encode) cuts the video as [0..4], [5..8], [9..12], ...
 *   (slicing_sample_min_size = 4) and carries the conv memories across slices; for a temporal
 *   downsampler (kt 3, st 2) the carried memory is the last padded frame, which is exactly the
 *   frame the next window needs because every slice after the first has an even length (4) at
 *   full rate and 2 at half rate. Decoder slicing (slicing_decode) cuts the latent as [0..1],
 *   [2], [3], ... (slicing_latent_min_size = 4 // 4 = 1) and Upsample3D skips remove_head on the
 *   ACTIVE slices. Hence slicing never changes the result: both directions equal the
 *   whole-sequence computation, which is what the executor's window rule computes.
 * - GroupNorm (eps 1e-6) per frame (causal_norm_wrapper folds t into the batch).
 * - ResnetBlock3D (time_receptive_field "full", the VideoAutoencoderKL default): GN, SiLU, conv1
 *   3x3x3, GN, SiLU, conv2 3x3x3, + input (conv_shortcut 1x1x1 when widths differ).
 * - Mid-block attention (diffusers Attention, from deprecated attn block): per frame, own
 *   GroupNorm, to_q/to_k/to_v Linear C->C, one head of dim C (scale C^-1/2), to_out.0, + input.
 * - Upsample3D: upscale_conv 1x1x1 C -> C*4*rt, rearrange "b (x y z c) f h w -> b c (f z) (h x)
 *   (w y)", then (temporal, first slice only) remove_head: frame 1 = (latent frame 0, z = 1) is
 *   dropped, frame 0 kept; then conv 3x3x3.
 * - Downsample3D (encoder, downsample_padding 0): F.pad (0,1,0,1) zeros (right column, bottom
 *   row), conv kernel (kt,3,3) stride (st,2,2), temporal: kt 3, st 2, padding 1 -> 2 replicated
 *   frames in front; spatial only: kt 1, st 1.
 * - Which levels scale time: encoder level i when i >= n - temporal_scale_num - 1 (the last
 *   levels that have a downsampler), decoder level i when i < temporal_scale_num.
 * - Latents: encode returns mean = conv_out channels [0, latent_channels); diffusion space is
 *   mean * 0.9152 (no shift).
 *
 * GroupNorm groups cannot be read from shapes. Rule (documented for `vae info`): the
 * configuration recorded by `vae synth` (safetensors metadata vae.config) wins; otherwise 32 when
 * every block width is a multiple of 32 (diffusers default and the released model), else the
 * largest of 16, 8, 4, 2, 1 that divides every width.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "models/model.h"

#define SV_LATENT_SCALE 0.9152f
#define SV_EPS 1e-6f

/* ---- weights by name: requested in upstream state_dict order, looked up while building ------- */
typedef struct sv_slot {
    char name[120];
    const float *p;
} sv_slot;

typedef struct sv_ctx {
    vae_builder *b;
    vae_program *p;
    const vae_seedvr2_config *c;
    sv_slot *slots;
    int n, cap;
    int oom;
} sv_ctx;

static void sv_fetch(sv_ctx *x, int ndim, const int *shape, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void sv_fetch(sv_ctx *x, int ndim, const int *shape, const char *fmt, ...) {
    char name[sizeof x->slots[0].name];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const float *w = vb_wf(x->b, ndim, shape, "%s", name);
    if (x->n == x->cap) {
        int cap = x->cap ? 2 * x->cap : 256;
        sv_slot *s = vae_realloc(x->slots, (size_t)cap * sizeof *s);
        if (!s) {
            if (!x->oom) vb_error(x->b, VAE_ENOMEM, "out of memory");
            x->oom = 1;
            return;
        }
        x->slots = s;
        x->cap = cap;
    }
    snprintf(x->slots[x->n].name, sizeof x->slots[x->n].name, "%s", name);
    x->slots[x->n++].p = w;
}

/* The weight fetched under this name; NULL (after recording an error) when absent. */
static const float *sv_get(sv_ctx *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static const float *sv_get(sv_ctx *x, const char *fmt, ...) {
    char name[sizeof x->slots[0].name];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    for (int i = x->n - 1; i >= 0; i--)
        if (strcmp(x->slots[i].name, name) == 0) return x->slots[i].p;
    if (vb_status(x->b) == VAE_OK)
        vb_error(x->b, VAE_EINVAL, "seedvr2: internal error: weight '%s' was not requested", name);
    return NULL;
}

/* ---- phase 1: requests, in the order of the upstream state_dict ------------------------------ */
static void f_conv(sv_ctx *x, const char *pre, int co, int ci, int kt, int k) {
    sv_fetch(x, 5, (int[]){co, ci, kt, k, k}, "%s.weight", pre);
    sv_fetch(x, 1, (int[]){co}, "%s.bias", pre);
}

static void f_norm(sv_ctx *x, const char *pre, int c) {
    sv_fetch(x, 1, (int[]){c}, "%s.weight", pre);
    sv_fetch(x, 1, (int[]){c}, "%s.bias", pre);
}

static void f_linear(sv_ctx *x, const char *pre, int co, int ci) {
    sv_fetch(x, 2, (int[]){co, ci}, "%s.weight", pre);
    sv_fetch(x, 1, (int[]){co}, "%s.bias", pre);
}

static void f_resnet(sv_ctx *x, const char *pre, int ci, int co) {
    char n[320];
    snprintf(n, sizeof n, "%s.norm1", pre), f_norm(x, n, ci);
    snprintf(n, sizeof n, "%s.conv1", pre), f_conv(x, n, co, ci, 3, 3);
    snprintf(n, sizeof n, "%s.norm2", pre), f_norm(x, n, co);
    snprintf(n, sizeof n, "%s.conv2", pre), f_conv(x, n, co, co, 3, 3);
    if (ci != co) snprintf(n, sizeof n, "%s.conv_shortcut", pre), f_conv(x, n, co, ci, 1, 1);
}

static void f_mid(sv_ctx *x, const char *pre, int c) {
    char n[320];
    snprintf(n, sizeof n, "%s.attentions.0.group_norm", pre), f_norm(x, n, c);
    snprintf(n, sizeof n, "%s.attentions.0.to_q", pre), f_linear(x, n, c, c);
    snprintf(n, sizeof n, "%s.attentions.0.to_k", pre), f_linear(x, n, c, c);
    snprintf(n, sizeof n, "%s.attentions.0.to_v", pre), f_linear(x, n, c, c);
    snprintf(n, sizeof n, "%s.attentions.0.to_out.0", pre), f_linear(x, n, c, c);
    snprintf(n, sizeof n, "%s.resnets.0", pre), f_resnet(x, n, c, c);
    snprintf(n, sizeof n, "%s.resnets.1", pre), f_resnet(x, n, c, c);
}

static int enc_temporal(const vae_seedvr2_config *c, int i) {
    return i >= c->n_levels - c->temporal_scale_num - 1 && i < c->n_levels - 1;
}
static int dec_temporal(const vae_seedvr2_config *c, int i) {
    return i < c->temporal_scale_num && i < c->n_levels - 1;
}

static void fetch_encoder(sv_ctx *x) {
    const vae_seedvr2_config *c = x->c;
    const int *bo = c->block_out_channels, n = c->n_levels;
    char pre[128];
    f_conv(x, "encoder.conv_in", bo[0], c->in_channels, 3, 3);
    for (int i = 0; i < n; i++) {
        int ci = i ? bo[i - 1] : bo[0], co = bo[i];
        for (int j = 0; j < c->layers_per_block; j++) {
            snprintf(pre, sizeof pre, "encoder.down_blocks.%d.resnets.%d", i, j);
            f_resnet(x, pre, j ? co : ci, co);
        }
        if (i < n - 1) {
            snprintf(pre, sizeof pre, "encoder.down_blocks.%d.downsamplers.0.conv", i);
            f_conv(x, pre, co, co, enc_temporal(c, i) ? 3 : 1, 3);
        }
    }
    f_mid(x, "encoder.mid_block", bo[n - 1]);
    f_norm(x, "encoder.conv_norm_out", bo[n - 1]);
    f_conv(x, "encoder.conv_out", 2 * c->latent_channels, bo[n - 1], 3, 3);
}

static void fetch_decoder(sv_ctx *x) {
    const vae_seedvr2_config *c = x->c;
    const int *bo = c->block_out_channels, n = c->n_levels;
    char pre[128];
    f_conv(x, "decoder.conv_in", bo[n - 1], c->latent_channels, 3, 3);
    int prev = bo[n - 1];
    for (int i = 0; i < n; i++) {
        int co = bo[n - 1 - i];
        for (int j = 0; j < c->layers_per_block + 1; j++) {
            snprintf(pre, sizeof pre, "decoder.up_blocks.%d.resnets.%d", i, j);
            f_resnet(x, pre, j ? co : prev, co);
        }
        if (i < n - 1) {
            int rt = dec_temporal(c, i) ? 2 : 1;
            snprintf(pre, sizeof pre, "decoder.up_blocks.%d.upsamplers.0.conv", i);
            f_conv(x, pre, co, co, 3, 3);
            snprintf(pre, sizeof pre, "decoder.up_blocks.%d.upsamplers.0.upscale_conv", i);
            f_conv(x, pre, co * 4 * rt, co, 1, 1);
        }
        prev = co;
    }
    f_mid(x, "decoder.mid_block", bo[n - 1]);
    f_norm(x, "decoder.conv_norm_out", bo[0]);
    f_conv(x, "decoder.conv_out", c->out_channels, bo[0], 3, 3);
}

/* ---- phase 2: ops ----------------------------------------------------------------------------- */
static int o_gn(sv_ctx *x, int v, const char *pre, int c, vae_act act) {
    const float *w = sv_get(x, "%s.weight", pre), *b = sv_get(x, "%s.bias", pre);
    return vb_group_norm_raw(x->b, x->p, v, pre, w, b, c, x->c->norm_num_groups, SV_EPS, act);
}

/* InflatedCausalConv3d k x k x k (k = 3: spatial zero pad 1, 2 replicated frames in front). */
static int o_conv(sv_ctx *x, int v, const char *pre, int ci, int co, int k, int residual) {
    const float *w = sv_get(x, "%s.weight", pre), *b = sv_get(x, "%s.bias", pre);
    vb_conv_args a = vb_conv_defaults(k, k, k);
    if (k > 1) {
        a.tpad = k - 1;
        a.tpad_mode = VAE_TPAD_REPLICATE;
    }
    a.residual = residual;
    return vb_conv_raw(x->p, v, pre, w, b, ci, co, &a);
}

static int o_resnet(sv_ctx *x, int v, const char *pre, int ci, int co) {
    char n[256];
    snprintf(n, sizeof n, "%s.norm1", pre);
    int h = o_gn(x, v, n, ci, VAE_ACT_SILU);
    snprintf(n, sizeof n, "%s.conv1", pre);
    h = o_conv(x, h, n, ci, co, 3, -1);
    snprintf(n, sizeof n, "%s.norm2", pre);
    h = o_gn(x, h, n, co, VAE_ACT_SILU);
    int sc = v;
    if (ci != co) {
        snprintf(n, sizeof n, "%s.conv_shortcut", pre);
        sc = o_conv(x, v, n, ci, co, 1, -1);
        if (sc < 0) return -1;
    }
    snprintf(n, sizeof n, "%s.conv2", pre);
    return o_conv(x, h, n, co, co, 3, sc);
}

static int o_attention(sv_ctx *x, int v, const char *pre, int c) {
    char n[320];
    snprintf(n, sizeof n, "%s.group_norm", pre);
    int h = o_gn(x, v, n, c, VAE_ACT_NONE);
    static const char *const qkv[3] = {"to_q", "to_k", "to_v"};
    float *w = vb_alloc(x->b, (int64_t)3 * c * c), *b = vb_alloc(x->b, 3 * (int64_t)c);
    for (int i = 0; i < 3; i++) {
        const float *wi = sv_get(x, "%s.%s.weight", pre, qkv[i]);
        const float *bi = sv_get(x, "%s.%s.bias", pre, qkv[i]);
        if (!w || !b || !wi || !bi) return -1;
        memcpy(w + (size_t)i * c * c, wi, (size_t)c * c * sizeof *w); /* Linear [out][in] */
        memcpy(b + (size_t)i * c, bi, (size_t)c * sizeof *b);
    }
    snprintf(n, sizeof n, "%s.to_qkv", pre);
    vb_conv_args a = vb_conv_defaults(1, 1, 1);
    h = vb_conv_raw(x->p, h, n, w, b, c, 3 * c, &a);
    h = vb_attention(x->p, h, c, (float)(1.0 / sqrt((double)c)));
    snprintf(n, sizeof n, "%s.to_out.0", pre);
    a.residual = v;
    return vb_conv_raw(x->p, h, n, sv_get(x, "%s.weight", n), sv_get(x, "%s.bias", n), c, c, &a);
}

static int o_mid(sv_ctx *x, int v, const char *pre, int c) {
    char n[256];
    snprintf(n, sizeof n, "%s.resnets.0", pre);
    v = o_resnet(x, v, n, c, c);
    snprintf(n, sizeof n, "%s.attentions.0", pre);
    v = o_attention(x, v, n, c);
    snprintf(n, sizeof n, "%s.resnets.1", pre);
    return o_resnet(x, v, n, c, c);
}

/* Upsample3D: upscale_conv, depth-to-space(-time), first-frame rule, conv 3x3x3. */
static int o_upsample(sv_ctx *x, int v, const char *pre, int c, int temporal) {
    char n[320];
    int rt = temporal ? 2 : 1;
    snprintf(n, sizeof n, "%s.upscale_conv", pre);
    const float *uw = sv_get(x, "%s.weight", n), *ub = sv_get(x, "%s.bias", n);
    vb_conv_args a = vb_conv_defaults(1, 1, 1);
    int u = vb_conv_raw(x->p, v, n, uw, ub, c, 4 * rt * c, &a);
    /* channel ((x*2 + y)*rt + z)*c + o -> frame f*rt + z, row 2h + x, column 2w + y */
    int s = vb_shuffle_up(x->p, u, 4 * rt * c, c, rt, 2, 1, c, 2 * rt * c, rt * c, 1);
    if (temporal) {
        /* remove_head: of latent frame 0 only z = 0 survives (frame 1 of the stream is dropped).
         * Stream = [z=0 rows of the first input frame] ++ [the full shuffle minus its first 2
         * frames]; the head branch uses the z = 0 rows of upscale_conv only. */
        float *hw = vb_alloc(x->b, (int64_t)4 * c * c), *hb = vb_alloc(x->b, 4 * (int64_t)c);
        if (!hw || !hb || !uw || !ub) return -1;
        for (int xy = 0; xy < 4; xy++) {
            size_t src = (size_t)(xy * 2 + 0) * c, dst = (size_t)xy * c;
            memcpy(hw + dst * c, uw + src * c, (size_t)c * c * sizeof *hw);
            memcpy(hb + dst, ub + src, (size_t)c * sizeof *hb);
        }
        int head = vb_time_head(x->p, v, c, 1);
        snprintf(n, sizeof n, "%s.upscale_conv[z=0]", pre);
        head = vb_conv_raw(x->p, head, n, hw, hb, c, 4 * c, &a);
        head = vb_shuffle_up(x->p, head, 4 * c, c, 1, 2, 1, 0, 2 * c, c, 1);
        int rest = vb_time_drop(x->p, s, c, 2);
        s = vb_concat_t(x->p, head, rest, c);
    }
    snprintf(n, sizeof n, "%s.conv", pre);
    return o_conv(x, s, n, c, c, 3, -1);
}

static int o_downsample(sv_ctx *x, int v, const char *pre, int c, int temporal) {
    const float *w = sv_get(x, "%s.weight", pre), *b = sv_get(x, "%s.bias", pre);
    vb_conv_args a = vb_conv_defaults(temporal ? 3 : 1, 3, 3);
    a.st = temporal ? 2 : 1;
    a.sh = a.sw = 2;
    a.pad_h[0] = a.pad_w[0] = 0;
    a.pad_h[1] = a.pad_w[1] = 1;
    if (temporal) {
        a.tpad = 2;
        a.tpad_mode = VAE_TPAD_REPLICATE;
    }
    return vb_conv_raw(x->p, v, pre, w, b, c, c, &a);
}

static int build_encoder(sv_ctx *x) {
    const vae_seedvr2_config *c = x->c;
    const int *bo = c->block_out_channels, n = c->n_levels;
    char pre[128];
    int v = o_conv(x, x->p->input, "encoder.conv_in", c->in_channels, bo[0], 3, -1);
    for (int i = 0; i < n; i++) {
        int ci = i ? bo[i - 1] : bo[0], co = bo[i];
        for (int j = 0; j < c->layers_per_block; j++) {
            snprintf(pre, sizeof pre, "encoder.down_blocks.%d.resnets.%d", i, j);
            v = o_resnet(x, v, pre, j ? co : ci, co);
        }
        if (i < n - 1) {
            snprintf(pre, sizeof pre, "encoder.down_blocks.%d.downsamplers.0.conv", i);
            v = o_downsample(x, v, pre, co, enc_temporal(c, i));
        }
    }
    v = o_mid(x, v, "encoder.mid_block", bo[n - 1]);
    v = o_gn(x, v, "encoder.conv_norm_out", bo[n - 1], VAE_ACT_SILU);
    /* posterior mean = the first latent_channels output channels: leading rows of the weight */
    int L = c->latent_channels;
    const float *w = sv_get(x, "encoder.conv_out.weight"), *b = sv_get(x, "encoder.conv_out.bias");
    vb_conv_args a = vb_conv_defaults(3, 3, 3);
    a.tpad = 2;
    a.tpad_mode = VAE_TPAD_REPLICATE;
    v = vb_conv_raw(x->p, v, "encoder.conv_out[mean]", w, b, bo[n - 1], L, &a);
    float *sc = vb_alloc(x->b, L), *sh = vb_alloc(x->b, L);
    if (!sc || !sh) return -1;
    for (int i = 0; i < L; i++) sc[i] = SV_LATENT_SCALE, sh[i] = 0.0f;
    return vb_scale_shift(x->p, v, L, sc, sh);
}

static int build_decoder(sv_ctx *x) {
    const vae_seedvr2_config *c = x->c;
    const int *bo = c->block_out_channels, n = c->n_levels;
    int L = c->latent_channels;
    char pre[128];
    float *sc = vb_alloc(x->b, L), *sh = vb_alloc(x->b, L);
    if (!sc || !sh) return -1;
    for (int i = 0; i < L; i++) sc[i] = 1.0f / SV_LATENT_SCALE, sh[i] = 0.0f;
    int v = vb_scale_shift(x->p, x->p->input, L, sc, sh);
    v = o_conv(x, v, "decoder.conv_in", L, bo[n - 1], 3, -1);
    v = o_mid(x, v, "decoder.mid_block", bo[n - 1]);
    int prev = bo[n - 1];
    for (int i = 0; i < n; i++) {
        int co = bo[n - 1 - i];
        for (int j = 0; j < c->layers_per_block + 1; j++) {
            snprintf(pre, sizeof pre, "decoder.up_blocks.%d.resnets.%d", i, j);
            v = o_resnet(x, v, pre, j ? co : prev, co);
        }
        if (i < n - 1) {
            snprintf(pre, sizeof pre, "decoder.up_blocks.%d.upsamplers.0", i);
            v = o_upsample(x, v, pre, co, dec_temporal(c, i));
        }
        prev = co;
    }
    v = o_gn(x, v, "decoder.conv_norm_out", bo[0], VAE_ACT_SILU);
    return o_conv(x, v, "decoder.conv_out", bo[0], c->out_channels, 3, -1);
}

static int check_config(const vae_seedvr2_config *c) {
    if (c->n_levels < 1 || c->n_levels > VAE_MAX_LEVELS)
        return vae_fail(VAE_EINVAL, "seedvr2: block_out_channels must have 1..%d entries",
                        VAE_MAX_LEVELS);
    for (int i = 0; i < c->n_levels; i++) {
        if (c->block_out_channels[i] <= 0)
            return vae_fail(VAE_EINVAL, "seedvr2: block_out_channels[%d] = %d", i,
                            c->block_out_channels[i]);
        if (c->norm_num_groups <= 0 || c->block_out_channels[i] % c->norm_num_groups)
            return vae_fail(VAE_EINVAL, "seedvr2: norm_num_groups %d does not divide width %d",
                            c->norm_num_groups, c->block_out_channels[i]);
    }
    if (c->layers_per_block < 1 || c->latent_channels < 1 || c->latent_channels > 64 ||
        c->in_channels < 1 || c->out_channels < 1 || c->temporal_scale_num < 0 ||
        c->temporal_scale_num > c->n_levels - 1)
        return vae_fail(VAE_EINVAL,
                        "seedvr2: bad configuration (layers_per_block %d, latent_channels %d, "
                        "in/out channels %d/%d, temporal_scale_num %d for %d levels)",
                        c->layers_per_block, c->latent_channels, c->in_channels, c->out_channels,
                        c->temporal_scale_num, c->n_levels);
    return VAE_OK;
}

/* Builds one side into p: n_in input channels, the first frame alone, then chunks of chunk. */
static void build_side(sv_ctx *x, vae_program *p, int n_in, int chunk, int (*build)(sv_ctx *),
                       const char *side) {
    vae_program_init(p, n_in);
    p->first_chunk = 1;
    p->chunk = chunk;
    x->p = p;
    if (build(x) < 0 && vb_status(x->b) == VAE_OK)
        vb_error(x->b, VAE_ENOMEM, "seedvr2: out of memory building the %s", side);
}

static int sv_build(vae_builder *b, const vae_config *cfg, vae_program *enc, vae_program *dec) {
    const vae_seedvr2_config *c = &cfg->u.seedvr2;
    int rc = check_config(c);
    if (rc) return rc;
    sv_ctx x;
    memset(&x, 0, sizeof x);
    x.b = b;
    x.c = c;
    /* requests first, in upstream order (encoder, then decoder) */
    if (c->has_encoder) fetch_encoder(&x);
    if (c->has_decoder) fetch_decoder(&x);
    if (c->has_encoder && vb_status(b) == VAE_OK)
        build_side(&x, enc, c->in_channels, 4, build_encoder, "encoder");
    /* per-frame norms/attention + windowed convs: any decoder chunking gives the same result */
    if (c->has_decoder && vb_status(b) == VAE_OK)
        build_side(&x, dec, c->latent_channels, 1, build_decoder, "decoder");
    vae_free(x.slots);
    return vb_status(b);
}

/* ---- configuration ---------------------------------------------------------------------------- */
static void set_norm(vae_config *cfg) {
    const vae_seedvr2_config *c = &cfg->u.seedvr2;
    cfg->n_latent = c->latent_channels <= 64 ? c->latent_channels : 64;
    for (int i = 0; i < cfg->n_latent; i++) {
        cfg->latent_mean[i] = 0.0f;
        cfg->latent_std[i] = 1.0f / SV_LATENT_SCALE;
    }
    cfg->norm_desc = "diffusion = mean * 0.9152";
}

static void released(vae_config *cfg) {
    vae_seedvr2_config *c = &cfg->u.seedvr2;
    memset(c, 0, sizeof *c);
    static const int bo[4] = {128, 256, 512, 512};
    c->n_levels = 4;
    memcpy(c->block_out_channels, bo, sizeof bo);
    c->layers_per_block = 2;
    c->latent_channels = 16;
    c->norm_num_groups = 32;
    c->in_channels = c->out_channels = 3;
    c->temporal_scale_num = 2;
    c->has_encoder = c->has_decoder = 1;
}

static int default_groups(const vae_seedvr2_config *c) {
    static const int cand[] = {32, 16, 8, 4, 2, 1};
    for (int k = 0; k < 6; k++) {
        int ok = 1;
        for (int i = 0; i < c->n_levels; i++) ok &= c->block_out_channels[i] % cand[k] == 0;
        if (ok) return cand[k];
    }
    return 1;
}

static const vae_store_tensor *find(const vae_store *s, const char *prefix, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static const vae_store_tensor *find(const vae_store *s, const char *prefix, const char *fmt, ...) {
    char name[256], key[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    snprintf(key, sizeof key, "%s%s", prefix ? prefix : "", name);
    return vae_store_find(s, key);
}

static int sv_detect(const vae_store *s, const char *prefix) {
    const vae_store_tensor *t;
    t = find(s, prefix, "decoder.conv_in.weight");
    if (t && t->ndim == 5 && find(s, prefix, "decoder.up_blocks.0.upsamplers.0.upscale_conv.weight"))
        return 1;
    t = find(s, prefix, "encoder.conv_in.weight");
    if (t && t->ndim == 5 && find(s, prefix, "encoder.down_blocks.0.resnets.0.norm1.weight") &&
        (find(s, prefix, "encoder.mid_block.attentions.0.to_q.weight") ||
         find(s, prefix, "encoder.mid_block.attentions.0.query.weight")))
        return 1;
    return 0;
}

/* Older diffusers checkpoints name the attention projections query/key/value/proj_attn. */
static const char *map_deprecated_attention(const char *name, char *buf, size_t len) {
    static const char *const from[] = {".to_q.", ".to_k.", ".to_v.", ".to_out.0."};
    static const char *const to[] = {".query.", ".key.", ".value.", ".proj_attn."};
    for (int i = 0; i < 4; i++) {
        const char *p = strstr(name, from[i]);
        if (!p) continue;
        snprintf(buf, len, "%.*s%s%s", (int)(p - name), name, to[i], p + strlen(from[i]));
        return buf;
    }
    return name;
}

static int sv_config_from_store(vae_config *cfg, const vae_store *s, const char *prefix,
                                vae_name_map_fn *map) {
    const char *path = s->path ? s->path : "checkpoint";
    cfg->arch = &vae_arch_seedvr2;
    released(cfg);
    vae_seedvr2_config *c = &cfg->u.seedvr2;
    const vae_store_tensor *ein = find(s, prefix, "encoder.conv_in.weight");
    const vae_store_tensor *din = find(s, prefix, "decoder.conv_in.weight");
    c->has_encoder = ein != NULL;
    c->has_decoder = din != NULL;
    if (!ein && !din)
        return vae_fail(VAE_EKEY, "%s: SeedVR2: neither encoder.conv_in nor decoder.conv_in found",
                        path);
    int enc_bo[VAE_MAX_LEVELS] = {0}, dec_bo[VAE_MAX_LEVELS] = {0}, ne = 0, nd = 0;
    int enc_t = 0, dec_t = 0, enc_tmask = 0, dec_tmask = 0;
    const vae_store_tensor *t;
    if (ein) {
        if (ein->ndim != 5)
            return vae_fail(VAE_ESHAPE, "%s: encoder.conv_in.weight is not 5-D", path);
        c->in_channels = (int)ein->shape[1];
        while (ne < VAE_MAX_LEVELS &&
               (t = find(s, prefix, "encoder.down_blocks.%d.resnets.0.conv2.weight", ne)))
            enc_bo[ne++] = (int)t->shape[0];
        int l = 0;
        while (find(s, prefix, "encoder.down_blocks.0.resnets.%d.conv1.weight", l)) l++;
        c->layers_per_block = l;
        for (int i = 0; i + 1 < ne; i++) {
            t = find(s, prefix, "encoder.down_blocks.%d.downsamplers.0.conv.weight", i);
            if (t && t->ndim == 5 && t->shape[2] == 3) enc_t++, enc_tmask |= 1 << i;
        }
        t = find(s, prefix, "encoder.conv_out.weight");
        if (!t) return vae_fail(VAE_EKEY, "%s: SeedVR2 encoder without conv_out", path);
        c->latent_channels = (int)t->shape[0] / 2;
        t = find(s, prefix, "encoder.down_blocks.0.resnets.0.conv1.weight");
        if (t && t->ndim == 5 && t->shape[2] != 3)
            return vae_fail(VAE_EUNSUPPORTED,
                            "%s: SeedVR2 with time_receptive_field 'half' (conv1 kernel %lldx3x3) "
                            "is not supported",
                            path, (long long)t->shape[2]);
    }
    if (din) {
        if (din->ndim != 5)
            return vae_fail(VAE_ESHAPE, "%s: decoder.conv_in.weight is not 5-D", path);
        while (nd < VAE_MAX_LEVELS &&
               (t = find(s, prefix, "decoder.up_blocks.%d.resnets.0.conv2.weight", nd)))
            dec_bo[nd++] = (int)t->shape[0];
        int l = 0;
        while (find(s, prefix, "decoder.up_blocks.0.resnets.%d.conv1.weight", l)) l++;
        if (!ein) c->layers_per_block = l - 1;
        else if (l - 1 != c->layers_per_block)
            return vae_fail(VAE_ESHAPE, "%s: SeedVR2 encoder has %d resnets per block but the "
                                        "decoder %d (expected encoder + 1)",
                            path, c->layers_per_block, l);
        for (int i = 0; i + 1 < nd; i++) {
            t = find(s, prefix, "decoder.up_blocks.%d.upsamplers.0.upscale_conv.weight", i);
            if (t && t->shape[0] == 8 * (int64_t)dec_bo[i]) dec_t++, dec_tmask |= 1 << i;
        }
        int L = (int)din->shape[1];
        if (ein && L != c->latent_channels)
            return vae_fail(VAE_ESHAPE, "%s: SeedVR2 encoder has %d latent channels, decoder %d",
                            path, c->latent_channels, L);
        c->latent_channels = L;
        t = find(s, prefix, "decoder.conv_out.weight");
        if (!t) return vae_fail(VAE_EKEY, "%s: SeedVR2 decoder without conv_out", path);
        c->out_channels = (int)t->shape[0];
        t = find(s, prefix, "decoder.up_blocks.0.resnets.0.conv1.weight");
        if (t && t->ndim == 5 && t->shape[2] != 3)
            return vae_fail(VAE_EUNSUPPORTED,
                            "%s: SeedVR2 with time_receptive_field 'half' is not supported", path);
    }
    if (ein) {
        c->n_levels = ne;
        memcpy(c->block_out_channels, enc_bo, sizeof enc_bo);
        c->temporal_scale_num = enc_t;
    } else {
        c->n_levels = nd;
        for (int i = 0; i < nd; i++) c->block_out_channels[i] = dec_bo[nd - 1 - i];
        c->temporal_scale_num = dec_t;
    }
    if (c->n_levels < 1 || c->layers_per_block < 1)
        return vae_fail(VAE_EKEY, "%s: SeedVR2 checkpoint without resnet blocks", path);
    if (ein && din) {
        int same = ne == nd && enc_t == dec_t;
        for (int i = 0; same && i < ne; i++) same = enc_bo[i] == dec_bo[nd - 1 - i];
        if (!same)
            return vae_fail(VAE_ESHAPE, "%s: SeedVR2 encoder and decoder widths or temporal levels "
                                        "disagree", path);
    }
    /* the temporal levels must be where the upstream rule puts them */
    int want_e = 0, want_d = 0;
    for (int i = 0; i + 1 < c->n_levels; i++) {
        if (enc_temporal(c, i)) want_e |= 1 << i;
        if (dec_temporal(c, i)) want_d |= 1 << i;
    }
    if ((ein && want_e != enc_tmask) || (din && want_d != dec_tmask))
        return vae_fail(VAE_EUNSUPPORTED, "%s: SeedVR2 temporal up/downsampling at unexpected levels",
                        path);
    c->norm_num_groups = default_groups(c);
    /* Said at INFO: `vae synth` files carry their groups in metadata, which overrides this. */
    VAE_INFO("%s: SeedVR2 GroupNorm groups are not stored in checkpoints: assuming %d (override "
             "with the config {\"norm_num_groups\": N})", path, c->norm_num_groups);
    const char *attn = c->has_encoder ? "encoder" : "decoder";
    *map = NULL;
    if (!find(s, prefix, "%s.mid_block.attentions.0.to_q.weight", attn) &&
        find(s, prefix, "%s.mid_block.attentions.0.query.weight", attn))
        *map = map_deprecated_attention;
    set_norm(cfg);
    return check_config(c);
}

static int json_int(const cJSON *js, const char *key, int *dst) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(js, key);
    if (!v || cJSON_IsNull(v)) return VAE_OK;
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble)
        return vae_fail(VAE_EINVAL, "seedvr2 config: '%s' must be an integer", key);
    *dst = (int)v->valuedouble;
    return VAE_OK;
}

/* Every key of the upstream constructor this engine reads or checks; the ones that only select
 * what the architecture already is (block types, factors, inflation, slicing) must say so. */
static int sv_check_keys(const cJSON *js) {
    static const char *const known[] = {
        "block_out_channels", "layers_per_block", "latent_channels", "in_channels",
        "out_channels", "temporal_scale_num", "norm_num_groups", "act_fn", "time_receptive_field",
        "attention", "use_quant_conv", "use_post_quant_conv", "slicing_up_num",
        "slicing_sample_min_size", "down_block_types", "up_block_types", "inflation_mode",
        "spatial_downsample_factor", "temporal_downsample_factor", NULL};
    int rc = vae_config_check_keys(js, known, "seedvr2");
    if (rc) return rc;
    static const char *const types[2][2] = {{"down_block_types", "DownEncoderBlock3D"},
                                            {"up_block_types", "UpDecoderBlock3D"}};
    for (int k = 0; k < 2; k++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(js, types[k][0]), *e;
        if (!a) continue;
        if (!cJSON_IsArray(a))
            return vae_fail(VAE_EINVAL, "seedvr2 config: %s must be an array", types[k][0]);
        cJSON_ArrayForEach(e, a) if (!cJSON_IsString(e) || strcmp(e->valuestring, types[k][1]))
            return vae_fail(VAE_EUNSUPPORTED, "seedvr2 config: %s: only %s is supported",
                            types[k][0], types[k][1]);
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(js, "inflation_mode");
    if (v && !(cJSON_IsString(v) && strcmp(v->valuestring, "pad") == 0))
        return vae_fail(VAE_EUNSUPPORTED, "seedvr2 config: only inflation_mode 'pad' is supported");
    v = cJSON_GetObjectItemCaseSensitive(js, "slicing_sample_min_size"); /* memory only */
    if (v && !cJSON_IsNumber(v))
        return vae_fail(VAE_EINVAL, "seedvr2 config: slicing_sample_min_size must be a number");
    return VAE_OK;
}

/* The factors given must be the ones the blocks make (2^(levels-1) and 2^temporal_scale_num). */
static int sv_check_factors(const cJSON *js, const vae_seedvr2_config *c) {
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(js, "spatial_downsample_factor");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(js, "temporal_downsample_factor");
    const int sf = 1 << (c->n_levels - 1), tf = 1 << c->temporal_scale_num;
    if ((s && !(cJSON_IsNumber(s) && s->valuedouble == sf)) ||
        (t && !(cJSON_IsNumber(t) && t->valuedouble == tf)))
        return vae_fail(VAE_EINVAL, "seedvr2 config: spatial_downsample_factor must be %d and "
                        "temporal_downsample_factor %d for %d levels and temporal_scale_num %d",
                        sf, tf, c->n_levels, c->temporal_scale_num);
    return VAE_OK;
}

static int sv_config_from_json(vae_config *cfg, const cJSON *js) {
    /* applied after config_from_store (metadata) keeps which halves the file has */
    int had = cfg->arch == &vae_arch_seedvr2 &&
              (cfg->u.seedvr2.has_encoder || cfg->u.seedvr2.has_decoder);
    int he = cfg->u.seedvr2.has_encoder, hd = cfg->u.seedvr2.has_decoder;
    cfg->arch = &vae_arch_seedvr2;
    released(cfg);
    vae_seedvr2_config *c = &cfg->u.seedvr2;
    if (had) c->has_encoder = he, c->has_decoder = hd;
    int groups_given = 0, rc;
    if (js) {
        if (!cJSON_IsObject(js)) return vae_fail(VAE_EINVAL, "seedvr2 config: not a JSON object");
        const cJSON *cfgobj = cJSON_GetObjectItemCaseSensitive(js, "config");
        if (cJSON_IsObject(cfgobj)) js = cfgobj;
        if ((rc = sv_check_keys(js))) return rc;
        const cJSON *bo = cJSON_GetObjectItemCaseSensitive(js, "block_out_channels");
        if (bo) {
            int n = cJSON_GetArraySize(bo);
            if (!cJSON_IsArray(bo) || n < 1 || n > VAE_MAX_LEVELS)
                return vae_fail(VAE_EINVAL, "seedvr2 config: block_out_channels must be an array "
                                            "of 1..%d integers", VAE_MAX_LEVELS);
            for (int i = 0; i < n; i++) {
                const cJSON *e = cJSON_GetArrayItem(bo, i);
                if (!cJSON_IsNumber(e))
                    return vae_fail(VAE_EINVAL, "seedvr2 config: block_out_channels[%d] is not a "
                                                "number", i);
                c->block_out_channels[i] = (int)e->valuedouble;
            }
            c->n_levels = n;
        }
        if ((rc = json_int(js, "layers_per_block", &c->layers_per_block)) ||
            (rc = json_int(js, "latent_channels", &c->latent_channels)) ||
            (rc = json_int(js, "in_channels", &c->in_channels)) ||
            (rc = json_int(js, "out_channels", &c->out_channels)) ||
            (rc = json_int(js, "temporal_scale_num", &c->temporal_scale_num)))
            return rc;
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(js, "norm_num_groups");
        if (g && !cJSON_IsNull(g)) {
            if ((rc = json_int(js, "norm_num_groups", &c->norm_num_groups))) return rc;
            groups_given = 1;
        }
        /* arguments that select code paths this engine does not implement */
        const cJSON *v;
        if ((v = cJSON_GetObjectItemCaseSensitive(js, "act_fn")) &&
            !(cJSON_IsString(v) && (!strcmp(v->valuestring, "silu") || !strcmp(v->valuestring, "swish"))))
            return vae_fail(VAE_EUNSUPPORTED, "seedvr2 config: only act_fn 'silu' is supported");
        if ((v = cJSON_GetObjectItemCaseSensitive(js, "time_receptive_field")) &&
            !(cJSON_IsString(v) && !strcmp(v->valuestring, "full")))
            return vae_fail(VAE_EUNSUPPORTED,
                            "seedvr2 config: only time_receptive_field 'full' is supported");
        if ((v = cJSON_GetObjectItemCaseSensitive(js, "attention")) && !cJSON_IsTrue(v))
            return vae_fail(VAE_EUNSUPPORTED, "seedvr2 config: attention must be true");
        if ((v = cJSON_GetObjectItemCaseSensitive(js, "use_quant_conv")) && cJSON_IsTrue(v))
            return vae_fail(VAE_EUNSUPPORTED, "seedvr2 config: use_quant_conv is not supported");
        if ((v = cJSON_GetObjectItemCaseSensitive(js, "use_post_quant_conv")) && cJSON_IsTrue(v))
            return vae_fail(VAE_EUNSUPPORTED, "seedvr2 config: use_post_quant_conv is not supported");
        if ((v = cJSON_GetObjectItemCaseSensitive(js, "slicing_up_num")) &&
            !(cJSON_IsNumber(v) && v->valuedouble == 0))
            return vae_fail(VAE_EUNSUPPORTED, "seedvr2 config: slicing_up_num must be 0");
        if ((rc = sv_check_factors(js, c))) return rc;
    }
    if (!groups_given) c->norm_num_groups = default_groups(c);
    set_norm(cfg);
    return check_config(c);
}

static void sv_describe(const vae_config *cfg, vae_strbuf *j) {
    const vae_seedvr2_config *c = &cfg->u.seedvr2;
    vae_strbuf_printf(j, "{\"block_out_channels\":[");
    for (int i = 0; i < c->n_levels; i++)
        vae_strbuf_printf(j, "%s%d", i ? "," : "", c->block_out_channels[i]);
    vae_strbuf_printf(j,
                      "],\"layers_per_block\":%d,\"latent_channels\":%d,\"norm_num_groups\":%d,"
                      "\"in_channels\":%d,\"out_channels\":%d,\"temporal_scale_num\":%d}",
                      c->layers_per_block, c->latent_channels, c->norm_num_groups, c->in_channels,
                      c->out_channels, c->temporal_scale_num);
}

const vae_arch vae_arch_seedvr2 = {
    .name = "seedvr2",
    VAE_ARCH_HOOKS(sv),
    .spatial_factor = 8,
    .temporal_factor = 4,
    .is_video = 1,
    .image_min = -1.0f,
    .image_max = 1.0f,
    .fp8_convs = {12, 11}, /* dec 4.36e-2, enc 4.01e-2 on the GPU (enc at 12: 4.51e-2) */
};
