/* wan_common.c -- the Wan2.1 and Wan2.2 VAEs as programs: their blocks, encoder and decoder.
 *
 * How the upstream (Wan-Video wan/modules/vae.py, vae2_2.py) chunked execution maps onto the
 * stream semantics of program.h. The reference runs the encoder on frames [0], [1:5], [5:9], ...
 * and the decoder one latent frame at a time, with per-conv caches:
 * - CausalConv3d k=3 with its cache of the last 2 input frames is a causal conv over the whole
 *   sequence with 2 zero frames in front (tpad = 2, zeros).
 * - Resample upsample3d: on the first chunk the cache slot is set to 'Rep' and time_conv is skipped
 *   (frame 0 takes the spatial path alone). Afterwards time_conv sees the frames x1, x2, ... with
 *   2 zero frames in front ('Rep' -> no cache -> zero padding; then the cache [0, x1] ...). So:
 *   TIME_HEAD(1) ++ SHUFFLE_UP(conv_t(TIME_DROP(1))), then nearest x2 and the Conv2d.
 * - Resample downsample3d: on the first chunk the (spatially downsampled) frame is returned as is
 *   (y0 = x0) and cached; later time_conv (k=3, stride 2, no padding) runs over cache[-1:] ++
 * chunk, i.e. over the whole sequence x0, x1, ... without padding: yj = conv(x[2j-2], x[2j-1],
 * x[2j]). So: TIME_HEAD(1) ++ conv(kt 3, st 2, tpad 0).
 * - Wan2.2 AvgDown3D zero-pads each chunk in front to a multiple of ft: with chunks of 1, 4, 4, ...
 *   frames (1, 2, 2, ... at the second temporal level) this is one zero frame at stream start and
 *   windows of ft = 2 frames afterwards (SHUFFLE_DOWN, tpad 1).
 * - Wan2.2 DupUp3D drops the first ft-1 output frames on the first chunk (first_chunk = True only
 *   for latent frame 0): SHUFFLE_UP then TIME_DROP(ft-1).
 * Trailing encoder frames beyond 1+4k: every path is causal and the stride-2 windows only emit
 * when complete, so such frames produce no output (the reference drops them).
 */
#include "models/wan_common.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

/* ---- weights ------------------------------------------------------------------------------- */

/* `<pre>.weight` (5-D [co][ci][kt][kh][kw], or 4-D [co][ci][kh][kw] for Conv2d) and `<pre>.bias`.
 */
static void conv_weights(vae_builder *b, const char *pre, int c_in, int c_out, int kt, int kh,
                         int kw, int dims2d, const float **w, const float **bias) {
    if (dims2d)
        *w = vb_wf(b, 4, (int[]){c_out, c_in, kh, kw}, "%s.weight", pre);
    else
        *w = vb_wf(b, 5, (int[]){c_out, c_in, kt, kh, kw}, "%s.weight", pre);
    *bias = vb_wf(b, 1, (int[]){c_out}, "%s.bias", pre);
}

static vb_conv_args args_conv3(int residual) {
    vb_conv_args a = vb_conv_defaults(3, 3, 3);
    a.pad_h[0] = a.pad_h[1] = 1;
    a.pad_w[0] = a.pad_w[1] = 1;
    a.tpad = 2;
    a.tpad_mode = VAE_TPAD_ZERO;
    a.residual = residual;
    return a;
}

static vb_conv_args args_1x1(int residual) {
    vb_conv_args a = vb_conv_defaults(1, 1, 1);
    a.pad_h[0] = a.pad_h[1] = 0;
    a.pad_w[0] = a.pad_w[1] = 0;
    a.residual = residual;
    return a;
}

int wan_conv3(vae_builder *b, vae_program *p, int x, const char *name, int c_in, int c_out,
              int residual) {
    const float *w, *bias;
    conv_weights(b, name, c_in, c_out, 3, 3, 3, 0, &w, &bias);
    vb_conv_args a = args_conv3(residual);
    return vb_conv_raw(p, x, name, w, bias, c_in, c_out, &a);
}

int wan_conv1(vae_builder *b, vae_program *p, int x, const char *name, int c_in, int c_out) {
    const float *w, *bias;
    conv_weights(b, name, c_in, c_out, 1, 1, 1, 0, &w, &bias);
    vb_conv_args a = args_1x1(-1);
    return vb_conv_raw(p, x, name, w, bias, c_in, c_out, &a);
}

/* ---- blocks -------------------------------------------------------------------------------- */

int wan_residual_block(vae_builder *b, vae_program *p, int x, const char *pre, int c_in,
                       int c_out) {
    char n[256];
    snprintf(n, sizeof n, "%s.residual.0.gamma", pre);
    int h = vb_rms_norm(b, p, x, n, c_in, 4, VAE_ACT_SILU);
    snprintf(n, sizeof n, "%s.residual.2", pre);
    h = wan_conv3(b, p, h, n, c_in, c_out, -1);
    snprintf(n, sizeof n, "%s.residual.3.gamma", pre);
    h = vb_rms_norm(b, p, h, n, c_out, 4, VAE_ACT_SILU);
    /* Dropout (residual.5) is the identity at inference. */
    const float *w6, *b6;
    char n6[256];
    snprintf(n6, sizeof n6, "%s.residual.6", pre);
    conv_weights(b, n6, c_out, c_out, 3, 3, 3, 0, &w6, &b6);
    int sc = x;
    if (c_in != c_out) {
        const float *ws, *bs;
        snprintf(n, sizeof n, "%s.shortcut", pre);
        conv_weights(b, n, c_in, c_out, 1, 1, 1, 0, &ws, &bs);
        vb_conv_args a1 = args_1x1(-1);
        sc = vb_conv_raw(p, x, n, ws, bs, c_in, c_out, &a1);
    }
    vb_conv_args a = args_conv3(sc);
    if (sc < 0) return -1;
    return vb_conv_raw(p, h, n6, w6, b6, c_out, c_out, &a);
}

int wan_attention_block(vae_builder *b, vae_program *p, int x, const char *pre, int c) {
    char n[256];
    snprintf(n, sizeof n, "%s.norm.gamma", pre);
    int h = vb_rms_norm(b, p, x, n, c, 3, VAE_ACT_NONE);
    const float *w, *bias;
    snprintf(n, sizeof n, "%s.to_qkv", pre);
    conv_weights(b, n, c, 3 * c, 1, 1, 1, 1, &w, &bias);
    vb_conv_args a = args_1x1(-1);
    h = vb_conv_raw(p, h, n, w, bias, c, 3 * c, &a);
    h = vb_attention(p, h, c, (float)(1.0 / sqrt((double)c)));
    snprintf(n, sizeof n, "%s.proj", pre);
    conv_weights(b, n, c, c, 1, 1, 1, 1, &w, &bias);
    a = args_1x1(x);
    return vb_conv_raw(p, h, n, w, bias, c, c, &a);
}

int wan_middle(vae_builder *b, vae_program *p, int x, const char *pre, int c) {
    char n[256];
    snprintf(n, sizeof n, "%s.0", pre);
    x = wan_residual_block(b, p, x, n, c, c);
    snprintf(n, sizeof n, "%s.1", pre);
    x = wan_attention_block(b, p, x, n, c);
    snprintf(n, sizeof n, "%s.2", pre);
    return wan_residual_block(b, p, x, n, c, c);
}

int wan_head(vae_builder *b, vae_program *p, int x, const char *pre, int c_in, int c_out) {
    char n[256];
    snprintf(n, sizeof n, "%s.0.gamma", pre);
    x = vb_rms_norm(b, p, x, n, c_in, 4, VAE_ACT_SILU);
    snprintf(n, sizeof n, "%s.2", pre);
    return wan_conv3(b, p, x, n, c_in, c_out, -1);
}

/* ---- Wan2.2 shortcuts, patchify ------------------------------------------------------------ */

/* How many channels of `from` (each times factor) make one of `into`: AvgDown3D averages c_in x
 * factor into c_out, DupUp3D splits c_out x factor from c_in; -1 (recorded) where they do not
 * divide. */
static int shortcut_group(vae_builder *b, const char *what, int from, int into, int factor) {
    if (into <= 0 || (from * factor) % into) {
        vb_error(b, VAE_EUNSUPPORTED, "%s: %d channels x %d do not divide into %d", what, from,
                 factor, into);
        return -1;
    }
    return from * factor / into;
}

int wan_avg_down(vae_builder *b, vae_program *p, const wan_shortcut *s) {
    int factor = s->ft * s->fs * s->fs;
    int group = shortcut_group(b, "AvgDown3D", s->c_in, s->c_out, factor);
    if (group < 0) return -1;
    if (factor == 1 && group == 1) return s->src; /* identity */
    /* f = c*ft*fs*fs + ti*fs*fs + hi*fs + wi; y[o] = mean over f in [o*group, (o+1)*group) */
    return vb_shuffle_down(p, s->src, s->c_in, s->c_out, s->ft, s->fs, factor, s->fs * s->fs, s->fs,
                           1, group, s->ft - 1);
}

int wan_dup_up(vae_builder *b, vae_program *p, const wan_shortcut *s) {
    int factor = s->ft * s->fs * s->fs;
    int repeats = shortcut_group(b, "DupUp3D", s->c_out, s->c_in, factor);
    if (repeats < 0) return -1;
    /* repeat_interleave: channel j of the expanded tensor is input channel j / repeats, with
     * j = o*ft*fs*fs + ti*fs*fs + hi*fs + wi */
    int y = vb_shuffle_up(p, s->src, s->c_in, s->c_out, s->ft, s->fs, factor, s->fs * s->fs, s->fs,
                          1, repeats);
    if (s->ft > 1) y = vb_time_drop(p, y, s->c_out, s->ft - 1);
    return y;
}

/* "b c f (h q) (w r) -> b (c r q) f h w": channel c*4 + r*2 + q, q = row, r = column offset */
int wan_patchify(vae_program *p, int x) {
    return vb_shuffle_down(p, x, 3, 12, 1, 2, 4, 0, 1, 2, 1, 0);
}

int wan_unpatchify(vae_program *p, int x) {
    return vb_shuffle_up(p, x, 12, 3, 1, 2, 4, 0, 1, 2, 1);
}

/* ---- resampling ---------------------------------------------------------------------------- */

/* A Resample's weights, in upstream order: resample.1 (Conv2d 3x3, c -> c_out), then time_conv
 * (3x1x1, c -> t_out) when t_out > 0. */
typedef struct resample_weights {
    char n1[256], nt[256];
    const float *w, *bias, *wt, *bt;
} resample_weights;

static void get_resample_weights(vae_builder *b, const char *pre, int c, int c_out, int t_out,
                                 resample_weights *r) {
    snprintf(r->n1, sizeof r->n1, "%s.resample.1", pre);
    conv_weights(b, r->n1, c, c_out, 1, 3, 3, 1, &r->w, &r->bias);
    r->wt = r->bt = NULL;
    if (t_out > 0) {
        snprintf(r->nt, sizeof r->nt, "%s.time_conv", pre);
        conv_weights(b, r->nt, c, t_out, 3, 1, 1, 0, &r->wt, &r->bt);
    }
}

int wan_resample_down(vae_builder *b, vae_program *p, int x, const char *pre, int c, int temporal,
                      const wan_shortcut *avg) {
    resample_weights r;
    get_resample_weights(b, pre, c, c, temporal ? c : 0, &r);
    /* ZeroPad2d((0, 1, 0, 1)) then Conv2d 3x3 stride 2 */
    vb_conv_args a = vb_conv_defaults(1, 3, 3);
    a.sh = a.sw = 2;
    a.pad_h[0] = 0, a.pad_h[1] = 1;
    a.pad_w[0] = 0, a.pad_w[1] = 1;
    if (!temporal) {
        a.residual = avg ? wan_avg_down(b, p, avg) : -1;
        if (avg && a.residual < 0) return -1;
        return vb_conv_raw(p, x, r.n1, r.w, r.bias, c, c, &a);
    }
    int y = vb_conv_raw(p, x, r.n1, r.w, r.bias, c, c, &a);
    int head = vb_time_head(p, y, c, 1);
    vb_conv_args at = vb_conv_defaults(3, 1, 1);
    at.st = 2;
    at.pad_h[0] = at.pad_h[1] = at.pad_w[0] = at.pad_w[1] = 0;
    at.tpad = 0;
    int t = vb_conv_raw(p, y, r.nt, r.wt, r.bt, c, c, &at);
    y = vb_concat_t(p, head, t, c);
    if (avg) y = vb_add(p, y, wan_avg_down(b, p, avg), c, VAE_ACT_NONE);
    return y;
}

int wan_resample_up(vae_builder *b, vae_program *p, int x, const char *pre, int c, int c_out,
                    int temporal, const wan_shortcut *dup) {
    resample_weights r;
    get_resample_weights(b, pre, c, c_out, temporal ? 2 * c : 0, &r);
    if (temporal) {
        int head = vb_time_head(p, x, c, 1);
        int rest = vb_time_drop(p, x, c, 1);
        vb_conv_args at = vb_conv_defaults(3, 1, 1);
        at.pad_h[0] = at.pad_h[1] = at.pad_w[0] = at.pad_w[1] = 0;
        at.tpad = 2;
        at.tpad_mode = VAE_TPAD_ZERO;
        rest = vb_conv_raw(p, rest, r.nt, r.wt, r.bt, c, 2 * c, &at);
        /* reshape(b, 2, c, t, h, w) + stack on dim 3: channel i*c + o -> frame 2t + i */
        rest = vb_shuffle_up(p, rest, 2 * c, c, 2, 1, 1, c, 0, 0, 1);
        x = vb_concat_t(p, head, rest, c);
    }
    /* nearest-exact x2 (= nearest for an integer factor), Conv2d 3x3 pad 1: one conv op with
     * input upsampling (a backend may compute it as four 2x2 phase convs on the small input) */
    vb_conv_args a = vb_conv_defaults(1, 3, 3);
    a.pad_h[0] = a.pad_h[1] = 1;
    a.pad_w[0] = a.pad_w[1] = 1;
    a.up = 2;
    if (dup) {
        a.residual = wan_dup_up(b, p, dup);
        if (a.residual < 0) return -1;
    }
    return vb_conv_raw(p, x, r.n1, r.w, r.bias, c, c_out, &a);
}

/* ---- latent normalisation, top-level 1x1 convs --------------------------------------------- */

int wan_latent_in(vae_builder *b, vae_program *p, int x, const vae_config *cfg) {
    int z = cfg->u.wan.z_dim;
    float *scale = vb_alloc(b, z), *shift = vb_alloc(b, z);
    if (!scale || !shift) return -1;
    for (int i = 0; i < z; i++) {
        scale[i] = cfg->latent_std[i];
        shift[i] = cfg->latent_mean[i];
    }
    return vb_scale_shift(p, x, z, scale, shift);
}

int wan_latent_out(vae_builder *b, vae_program *p, int x, const vae_config *cfg) {
    int z = cfg->u.wan.z_dim;
    float *scale = vb_alloc(b, z), *shift = vb_alloc(b, z);
    if (!scale || !shift) return -1;
    for (int i = 0; i < z; i++) {
        double inv = 1.0 / (double)cfg->latent_std[i];
        scale[i] = (float)inv;
        shift[i] = (float)(-(double)cfg->latent_mean[i] * inv);
    }
    return vb_scale_shift(p, x, z, scale, shift);
}

int wan_encode_tail(vae_builder *b, vae_program *p, int x, const vae_config *cfg) {
    int z = cfg->u.wan.z_dim;
    const float *w, *bias;
    conv_weights(b, "conv1", 2 * z, 2 * z, 1, 1, 1, 0, &w, &bias);
    /* rows [0, z) of the [2z][2z] weight (contiguous) give mu; log_var is unused */
    vb_conv_args a = args_1x1(-1);
    x = vb_conv_raw(p, x, "conv1", w, bias, 2 * z, z, &a);
    return wan_latent_out(b, p, x, cfg);
}

int wan_decode_head(vae_builder *b, vae_program *p, int x, const vae_config *cfg) {
    int z = cfg->u.wan.z_dim;
    x = wan_latent_in(b, p, x, cfg);
    return wan_conv1(b, p, x, "conv2", z, z);
}

static void wan_stray_top_conv(vae_builder *b, const char *name, int c) {
    char n[64];
    snprintf(n, sizeof n, "%s.weight", name);
    if (!vb_has(b, n)) return;
    const float *w, *bias;
    conv_weights(b, name, c, c, 1, 1, 1, 0, &w, &bias);
}

/* The name of block r of level i of a layer list ("encoder.downsamples"): Wan2.1 numbers the
 * blocks and resamples of every level in one list (per_level of them a level), Wan2.2 groups each
 * level's in a Down_/Up_ResidualBlock ("encoder.downsamples.1.downsamples.2"). */
static void level_block_name(char *pre, size_t len, const char *list, int is22, int i, int r,
                             int per_level) {
    if (is22)
        snprintf(pre, len, "%s.%d.%s.%d", list, i, strchr(list, '.') + 1, r);
    else
        snprintf(pre, len, "%s.%d", list, i * per_level + r);
}

/* Per level num_res_blocks ResidualBlocks, then a Resample (none after the last level); Wan2.2
 * adds the AvgDown3D shortcut of the level's input (the last level: the shortcut alone). */
static int encoder_levels(vae_builder *b, const vae_wan_config *w, vae_program *p, int x,
                          const int *dims, int is22) {
    int n = w->n_levels, nrb = w->num_res_blocks;
    char pre[128];
    for (int i = 0; i < n; i++) {
        int in = dims[i], out = dims[i + 1];
        int down = i != n - 1;
        int tdown = down ? w->temperal_downsample[i] : 0;
        wan_shortcut avg = {x, dims[i], out, tdown ? 2 : 1, down ? 2 : 1};
        for (int r = 0; r < nrb; r++) {
            level_block_name(pre, sizeof pre, "encoder.downsamples", is22, i, r, nrb + 1);
            x = wan_residual_block(b, p, x, pre, in, out);
            in = out;
        }
        level_block_name(pre, sizeof pre, "encoder.downsamples", is22, i, nrb, nrb + 1);
        if (down)
            x = wan_resample_down(b, p, x, pre, out, tdown, is22 ? &avg : NULL);
        else if (is22) /* identity when in == out */
            x = vb_add(p, x, wan_avg_down(b, p, &avg), out, VAE_ACT_NONE);
    }
    return x;
}

/* Per level num_res_blocks+1 ResidualBlocks, then a Resample (none after the last level): Wan2.1's
 * Conv2d halves the width (and the next level's input with it), Wan2.2's keeps it and adds the
 * DupUp3D shortcut of the level's input. */
static int decoder_levels(vae_builder *b, const vae_wan_config *w, vae_program *p, int x,
                          const int *dims, int is22) {
    int n = w->n_levels, nrb = w->num_res_blocks;
    char pre[128];
    for (int i = 0; i < n; i++) {
        int in = dims[i], out = dims[i + 1];
        /* upstream 2.1: `if i == 1 or i == 2 or i == 3: in_dim = in_dim // 2` */
        if (!is22 && i >= 1 && i <= 3) in /= 2;
        int up = i != n - 1;
        int tup = up ? w->temperal_downsample[n - 2 - i] : 0; /* temperal_upsample = reversed */
        wan_shortcut dup = {x, dims[i], out, tup ? 2 : 1, 2};
        for (int r = 0; r < nrb + 1; r++) {
            level_block_name(pre, sizeof pre, "decoder.upsamples", is22, i, r, nrb + 2);
            x = wan_residual_block(b, p, x, pre, in, out);
            in = out;
        }
        level_block_name(pre, sizeof pre, "decoder.upsamples", is22, i, nrb + 1, nrb + 2);
        if (up)
            x = wan_resample_up(b, p, x, pre, out, is22 ? out : out / 2, tup, is22 ? &dup : NULL);
    }
    return x;
}

/* The encoder: (Wan2.2: patchify), conv1, the levels, middle, head to 2*z_dim, the top-level
 * conv1 and the normalisation. Upstream encodes the first frame alone, then chunks of 4 frames
 * (the temporal stride). */
static int build_encoder(vae_builder *b, const vae_config *cfg, vae_program *p, int is22) {
    const vae_wan_config *w = &cfg->u.wan;
    int n = w->n_levels;
    p->first_chunk = 1;
    p->chunk = 4;
    int dims[VAE_MAX_LEVELS + 1];
    dims[0] = w->dim;
    for (int i = 0; i < n; i++)
        dims[i + 1] = w->dim * w->dim_mult[i];
    int x = is22 ? wan_patchify(p, p->input) : p->input;
    x = wan_conv3(b, p, x, "encoder.conv1", is22 ? 12 : 3, dims[0], -1);
    x = encoder_levels(b, w, p, x, dims, is22);
    x = wan_middle(b, p, x, "encoder.middle", dims[n]);
    x = wan_head(b, p, x, "encoder.head", dims[n], 2 * w->z_dim);
    return wan_encode_tail(b, p, x, cfg);
}

/* The decoder: normalisation, the top-level conv2, conv1, middle, the levels, head (Wan2.2: to 12
 * channels, then unpatchify). Upstream decodes latent frame by frame. */
static int build_decoder(vae_builder *b, const vae_config *cfg, vae_program *p, int is22) {
    const vae_wan_config *w = &cfg->u.wan;
    int n = w->n_levels;
    p->first_chunk = 1;
    p->chunk = 1;
    int dims[VAE_MAX_LEVELS + 1];
    dims[0] = w->dec_dim * w->dim_mult[n - 1];
    for (int i = 0; i < n; i++)
        dims[i + 1] = w->dec_dim * w->dim_mult[n - 1 - i];
    int x = wan_decode_head(b, p, p->input, cfg);
    x = wan_conv3(b, p, x, "decoder.conv1", w->z_dim, dims[0], -1);
    x = wan_middle(b, p, x, "decoder.middle", dims[0]);
    x = decoder_levels(b, w, p, x, dims, is22);
    x = wan_head(b, p, x, "decoder.head", dims[n], is22 ? 12 : 3);
    return is22 ? wan_unpatchify(p, x) : x;
}

int wan_build_programs(vae_builder *b, const vae_config *cfg, vae_program *enc, vae_program *dec,
                       int is22) {
    const vae_wan_config *w = &cfg->u.wan;
    /* Wan2.1 halves its decoder widths at fixed levels (4 at most) and always has dim; Wan2.2 may
     * lack either side and its width */
    int max_levels = is22 ? VAE_MAX_LEVELS : 4;
    if (w->n_levels < 2 || w->n_levels > max_levels || w->num_res_blocks < 1 || w->z_dim < 1 ||
        ((w->has_encoder || !is22) && w->dim < 1) || (is22 && w->has_decoder && w->dec_dim < 1))
        return vb_error(b, VAE_EUNSUPPORTED, "%s: unsupported configuration",
                        is22 ? "wan2.2" : "wan2.1");
    if (enc) vae_program_init(enc, 3);
    if (dec) vae_program_init(dec, w->z_dim);
    if (w->has_encoder && enc)
        build_encoder(b, cfg, enc, is22);
    else
        wan_stray_top_conv(b, "conv1", 2 * w->z_dim);
    if (w->has_decoder && dec)
        build_decoder(b, cfg, dec, is22);
    else
        wan_stray_top_conv(b, "conv2", w->z_dim);
    return vb_status(b);
}
