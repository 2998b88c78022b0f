/* taehv.c -- the TAEHV family of tiny video autoencoders (madebyollin/taehv taehv.py): taew2_1
 * (Wan2.1, Wan2.2-A14B, Qwen-Image), taehv (Hunyuan 1), taew2_2 and taew2_2_super (Wan2.2
 * TI2V-5B), taehv1_5 and _super (Hunyuan 1.5), taeltx_2 / taeltx2_3 (LTX-2: patch 4, 128
 * channels, time factor 8), taeh3 (MiniMax H3), taecvx (CogVideoX), taeos1_3 (Open-Sora 1.3). Video
 * in [0,1], raw latents (no mean/std), one file with encoder.* and decoder.* Sequential indices.
 * The variants, and the frame rules upstream keys on the file name: taehv_config.c.
 *
 * Upstream facts (taehv.py):
 * - conv(a, b) = Conv2d 3x3 padding 1, per frame. MemBlock(n, n): conv(cat(x, past)), ReLU, conv,
 *   ReLU, conv, + x, ReLU, where past is the block's input one frame earlier (zeros before the
 *   first): the first conv is a causal temporal conv of two frames, one zero frame in front
 *   (channels [0, n) of its upstream weight read the current frame, [n, 2n) the previous one).
 * - TPool(n, s) folds s consecutive frames into channels (frame k of the group = channels
 *   [k n, (k+1) n)), then Conv1x1 s n -> n: a conv of kt = s, stride s. TGrow(n, s): Conv1x1
 *   n -> s n, then channels [k n, (k+1) n) become frame k of s: conv + temporal shuffle.
 * - Encoder = Sequential(conv(3p^2, 64), ReLU, then per stage TPool(64, s), conv stride 2 (no
 *   bias), MemBlock x3; conv(64, L)) after a pixel unshuffle by p; the frames are padded at the
 *   end to a multiple of the time factor by repeating the last one.
 * - Decoder = Sequential(Clamp = tanh(x/3)*3, conv(L, 256), ReLU, per stage (widths 256, 128, 64)
 *   MemBlock x3, Upsample x2, TGrow, conv to the next width (no bias); ReLU, conv(64, 3p^2)), then
 *   a pixel shuffle by p, a clamp to [0,1], and the first t_upscale - 1 frames trimmed.
 * - Super decoder: Conv1x1(L, 512) (no bias, no clamp), per stage (512, 256, 128) SuperMemBlock x3
 *   (x + [depthwise 7x7 over cat(x, past) (no bias), Conv1x1 2n -> 4n, ReLU, Conv1x1 4n -> n (no
 *   bias)]), conv(n, 4 n') + ReLU + PixelShuffle(2), TGrow(n'); conv(64, 3p^2); then as above.
 * - Previews run the same weights with decoder_time_upscale off (each TGrow keeps the rows of its
 *   last time step: one frame per latent, nothing trimmed) and/or decoder_space_upscale off (no
 *   Upsample; the super decoder's convs would change shape, so it has no space preview).
 */
#include <stdio.h>
#include <string.h>

#include "models/model.h"

enum { HV_WIDTH = VAE_TAEHV_WIDTH, HV_STAGES = VAE_TAEHV_STAGES };
const int vae_taehv_dec_widths[2][VAE_TAEHV_STAGES + 1] = {{256, 128, 64, 64}, {512, 256, 128, 64}};

typedef struct hv_ctx {
    vae_builder *b;          /* full build: weights from the checkpoint (or synthesised) */
    const vae_program *full; /* preview build: the built decoder, whose convs lend their weights */
    vae_program *p;
    const vae_taehv_config *c;
    int time_up, space_up; /* 0: that upscaling off (a preview) */
} hv_ctx;

/* Preview build: the weights of the full decoder's conv `name` (built by this same code, so the
 * op of that name has the layout this build wants). -1 when it has none. */
static int lend(const hv_ctx *x, const char *name, const float **w, const float **bias) {
    for (int i = 0; i < x->full->n_ops; i++) {
        const vae_op *op = &x->full->ops[i];
        if (op->kind == VAE_OP_CONV && strcmp(op->name, name) == 0) {
            *w = op->w, *bias = op->b;
            return 0;
        }
    }
    vae_fail(VAE_EINVAL, "taehv preview: the decoder has no conv '%s'", name);
    return -1;
}

/* Conv2d k x k (padding k/2) at `name`, per frame; up: nearest upsampling of its input first. */
static int conv2d(hv_ctx *x, int v, const char *name, int ci, int co, int k, int stride, int bias,
                  int up) {
    vb_conv_args a = vb_conv_defaults(1, k, k);
    a.sh = a.sw = stride;
    a.has_bias = bias;
    a.up = up > 1 ? up : 0;
    if (!x->full) return vb_conv(x->b, x->p, v, name, ci, co, &a, 1);
    const float *w, *b;
    return lend(x, name, &w, &b) ? -1 : vb_conv_raw(x->p, v, name, w, b, ci, co, &a);
}

/* The causal two-frame conv of a MemBlock: upstream [co][2 ci][k][k] over cat(x, past) becomes
 * [co][ci][2][k][k] with time index 1 = the current frame, 0 = the previous one. */
static const float *pair_weight(hv_ctx *x, const char *name, int ci, int co, int k) {
    const float *up = vb_wf(x->b, 4, (int[]){co, 2 * ci, k, k}, "%s.weight", name);
    float *w = vb_alloc(x->b, (int64_t)co * ci * 2 * k * k);
    if (!up || !w) return NULL;
    const size_t taps = (size_t)k * k;
    for (int o = 0; o < co; o++)
        for (int c = 0; c < ci; c++) {
            float *dst = w + ((size_t)o * ci + c) * 2 * taps;
            memcpy(dst + taps, up + ((size_t)o * 2 * ci + c) * taps, taps * sizeof *w);
            memcpy(dst, up + ((size_t)o * 2 * ci + ci + c) * taps, taps * sizeof *w);
        }
    return w;
}

static int pair_conv(hv_ctx *x, int v, const char *name, int ci, int co, int k) {
    vb_conv_args a = vb_conv_defaults(2, k, k);
    a.tpad = 1;
    a.tpad_mode = VAE_TPAD_ZERO;
    const float *w, *b;
    if (x->full) {
        if (lend(x, name, &w, &b)) return -1;
    } else {
        w = pair_weight(x, name, ci, co, k);
        b = vb_wf(x->b, 1, (int[]){co}, "%s.bias", name);
    }
    return vb_conv_raw(x->p, v, name, w, b, ci, co, &a);
}

/* MemBlock(n, n) at Sequential index idx of `side` ("encoder" / "decoder"). */
static int memblock(hv_ctx *x, int v, const char *side, int idx, int n) {
    char name[64];
    snprintf(name, sizeof name, "%s.%d.conv.0", side, idx);
    int h = vb_act(x->p, pair_conv(x, v, name, n, n, 3), n, VAE_ACT_RELU, 0.0f);
    snprintf(name, sizeof name, "%s.%d.conv.2", side, idx);
    h = vb_act(x->p, conv2d(x, h, name, n, n, 3, 1, 1, 0), n, VAE_ACT_RELU, 0.0f);
    snprintf(name, sizeof name, "%s.%d.conv.4", side, idx);
    vb_conv_args a = vb_conv_defaults(1, 3, 3);
    a.residual = v;
    const float *w, *b;
    if (x->full) {
        if (lend(x, name, &w, &b)) return -1;
    } else {
        w = vb_wf(x->b, 4, (int[]){n, n, 3, 3}, "%s.weight", name);
        b = vb_wf(x->b, 1, (int[]){n}, "%s.bias", name);
    }
    return vb_act(x->p, vb_conv_raw(x->p, h, name, w, b, n, n, &a), n, VAE_ACT_RELU, 0.0f);
}

/* TPool(n, s) at encoder index idx: upstream [n][s n][1][1] -> [n][n][s][1][1] (frame k of the
 * group = time index k). */
static int tpool(hv_ctx *x, int v, int idx, int n, int s) {
    char name[64];
    snprintf(name, sizeof name, "encoder.%d.conv", idx);
    const float *up = vb_wf(x->b, 4, (int[]){n, s * n, 1, 1}, "%s.weight", name);
    float *w = vb_alloc(x->b, (int64_t)n * n * s);
    if (!up || !w) return -1;
    for (int o = 0; o < n; o++)
        for (int k = 0; k < s; k++)
            for (int c = 0; c < n; c++)
                w[((size_t)o * n + c) * s + k] = up[(size_t)o * s * n + (size_t)k * n + c];
    vb_conv_args a = vb_conv_defaults(s, 1, 1);
    a.st = s;
    a.has_bias = 0;
    return vb_conv_raw(x->p, v, name, w, NULL, n, n, &a);
}

/* TGrow(n, s) at decoder index idx of stage `stage`: a 1x1 conv n -> s n, then its channel
 * groups become s frames. With time upscaling off (a preview) only the last time step's rows
 * are kept (upstream patch_tgrow_layers): one frame per input frame. */
static int tgrow(hv_ctx *x, int v, int idx, int n, int stage) {
    const int s = x->c->dec_tgrow[stage];
    char name[64];
    snprintf(name, sizeof name, "decoder.%d.conv", idx);
    vb_conv_args a = vb_conv_defaults(1, 1, 1);
    a.has_bias = 0;
    if (!x->full) {
        const float *w = vb_wf(x->b, 4, (int[]){s * n, n, 1, 1}, "%s.weight", name);
        v = vb_conv_raw(x->p, v, name, w, NULL, n, s * n, &a);
        return s > 1 ? vb_shuffle_up(x->p, v, s * n, n, s, 1, 1, n, 0, 0, 1) : v;
    }
    const float *w, *b;
    if (lend(x, name, &w, &b)) return -1;
    if (x->time_up) {
        v = vb_conv_raw(x->p, v, name, w, NULL, n, s * n, &a);
        return s > 1 ? vb_shuffle_up(x->p, v, s * n, n, s, 1, 1, n, 0, 0, 1) : v;
    }
    return vb_conv_raw(x->p, v, name, w + (size_t)(s - 1) * n * n, NULL, n, n, &a);
}

/* The frames to trim (t_upscale - 1) of a build: none in a time preview, none where the
 * variant's frame rule trims instead (taecvx, taeh3: taehv_config.c hv_frame_rule). */
static int trim_frames(const hv_ctx *x) {
    if (x->c->frames != VAE_TAEHV_FRAMES_DEFAULT) return 0;
    int t = 1;
    for (int s = 0; s < HV_STAGES && x->time_up; s++)
        t *= x->c->dec_tgrow[s];
    return t - 1;
}

/* pixel (un)shuffle by p: channel c p^2 + i p + j <-> pixel (i, j) of channel c's p x p block */
static int unshuffle(vae_program *p, int v, int pt) {
    return pt > 1 ? vb_shuffle_down(p, v, 3, 3 * pt * pt, 1, pt, pt * pt, 0, pt, 1, 1, 0) : v;
}

static int shuffle(vae_program *p, int v, int c_out, int pt) {
    return pt > 1 ? vb_shuffle_up(p, v, c_out * pt * pt, c_out, 1, pt, pt * pt, 0, pt, 1, 1) : v;
}

static int build_encoder(hv_ctx *x) {
    const vae_taehv_config *c = x->c;
    const int n = HV_WIDTH, pt = c->patch_size;
    int v = unshuffle(x->p, x->p->input, pt);
    v = vb_act(x->p, conv2d(x, v, "encoder.0", 3 * pt * pt, n, 3, 1, 1, 0), n, VAE_ACT_RELU, 0.0f);
    int idx = 2;
    for (int s = 0; s < HV_STAGES; s++, idx += 5) {
        char name[32];
        v = tpool(x, v, idx, n, c->enc_tpool[s]);
        snprintf(name, sizeof name, "encoder.%d", idx + 1);
        v = conv2d(x, v, name, n, n, 3, 2, 0, 0);
        for (int k = 0; k < 3; k++)
            v = memblock(x, v, "encoder", idx + 2 + k, n);
    }
    return conv2d(x, v, "encoder.17", n, c->latent_channels, 3, 1, 1, 0);
}

/* The output end of both decoders: conv(64, 3p^2) at index 22, clamp to [0,1], pixel shuffle. */
static int decoder_tail(hv_ctx *x, int v) {
    const int pt = x->c->patch_size, co = 3 * pt * pt;
    v = conv2d(x, v, "decoder.22", HV_WIDTH, co, 3, 1, 1, 0);
    v = vb_act(x->p, v, co, VAE_ACT_CLAMP01, 0.0f);
    return shuffle(x->p, v, 3, pt);
}

/* The per-pixel ops after the last TGrow see each frame alone, so the trimmed frames are dropped
 * right after it: the same output as trimming at the end, without computing them. */
static int trim(hv_ctx *x, int v, int c) {
    const int n = trim_frames(x);
    return n > 0 ? vb_time_drop(x->p, v, c, n) : v;
}

static int build_decoder_base(hv_ctx *x) {
    const int *nf = vae_taehv_dec_widths[0], lat = x->c->latent_channels;
    int v = vb_act(x->p, x->p->input, lat, VAE_ACT_TANH_SCALE, 3.0f);
    v = vb_act(x->p, conv2d(x, v, "decoder.1", lat, nf[0], 3, 1, 1, 0), nf[0], VAE_ACT_RELU, 0.0f);
    int idx = 3;
    for (int s = 0; s < HV_STAGES; s++, idx += 6) {
        for (int k = 0; k < 3; k++)
            v = memblock(x, v, "decoder", idx + k, nf[s]);
        /* Upsample (idx + 3), TGrow (idx + 4), conv (idx + 5): the 1x1 TGrow and the nearest
         * upsampling commute, so the TGrow runs on the small frame and the upsampling inside the
         * conv after it */
        v = tgrow(x, v, idx + 4, nf[s], s);
        if (s == HV_STAGES - 1) v = trim(x, v, nf[s]);
        char name[32];
        snprintf(name, sizeof name, "decoder.%d", idx + 5);
        v = conv2d(x, v, name, nf[s], nf[s + 1], 3, 1, 0, x->space_up ? 2 : 0);
    }
    return decoder_tail(x, vb_act(x->p, v, nf[HV_STAGES], VAE_ACT_RELU, 0.0f));
}

/* SuperMemBlock(n) at decoder index idx: x + pw2(ReLU(pw1(dw(cat(x, past))))). The depthwise 7x7
 * (per frame) runs as a depthwise conv n -> 2n of the current frame alone (op.h groups = n, two
 * outputs per channel): output 2c is upstream's filter c on channel c (the current frame's half),
 * 2c + 1 its filter n + c on channel c, which is the past's half one frame later. pw1 is a
 * two-frame conv reading the even outputs of the current frame and the odd ones of the previous
 * frame (its upstream columns c and n + c moved to 2c and 2c + 1). */
static int super_memblock(hv_ctx *x, int v, int idx, int n) {
    char dw_name[64], pw1_name[64], pw2_name[64];
    snprintf(dw_name, sizeof dw_name, "decoder.%d.conv.0", idx);
    snprintf(pw1_name, sizeof pw1_name, "decoder.%d.conv.1", idx);
    snprintf(pw2_name, sizeof pw2_name, "decoder.%d.conv.3", idx);
    const float *dw, *pw1, *b1, *pw2, *none;
    if (x->full) {
        if (lend(x, dw_name, &dw, &none) || lend(x, pw1_name, &pw1, &b1) ||
            lend(x, pw2_name, &pw2, &none))
            return -1;
    } else {
        const float *up = vb_wf(x->b, 4, (int[]){2 * n, 1, 7, 7}, "%s.weight", dw_name);
        const float *up1 = vb_wf(x->b, 4, (int[]){4 * n, 2 * n, 1, 1}, "%s.weight", pw1_name);
        b1 = vb_wf(x->b, 1, (int[]){4 * n}, "%s.bias", pw1_name);
        pw2 = vb_wf(x->b, 4, (int[]){n, 4 * n, 1, 1}, "%s.weight", pw2_name);
        float *d = vb_alloc(x->b, (int64_t)2 * n * 49),
              *p1 = vb_alloc(x->b, (int64_t)8 * n * n * 2);
        if (!up || !up1 || !d || !p1) return -1;
        for (int j = 0; j < 2 * n; j++) /* output j: upstream filter (j % 2) n + j / 2 */
            memcpy(d + (size_t)j * 49, up + ((size_t)(j % 2) * n + j / 2) * 49, 49 * sizeof *d);
        for (int o = 0; o < 4 * n; o++) /* [4n][2n][2]: time 1 = current, 0 = previous frame */
            for (int j = 0; j < 2 * n; j++) {
                float *dst = p1 + ((size_t)o * 2 * n + j) * 2;
                const float wv = up1[(size_t)o * 2 * n + (size_t)(j % 2) * n + j / 2];
                dst[0] = j % 2 ? wv : 0.0f;
                dst[1] = j % 2 ? 0.0f : wv;
            }
        dw = d, pw1 = p1;
    }
    vb_conv_args a = vb_conv_defaults(1, 7, 7);
    a.has_bias = 0;
    a.groups = n;
    int h = vb_conv_raw(x->p, v, dw_name, dw, NULL, n, 2 * n, &a);
    vb_conv_args a1 = vb_conv_defaults(2, 1, 1);
    a1.tpad = 1;
    a1.tpad_mode = VAE_TPAD_ZERO;
    h = vb_act(x->p, vb_conv_raw(x->p, h, pw1_name, pw1, b1, 2 * n, 4 * n, &a1), 4 * n,
               VAE_ACT_RELU, 0.0f);
    vb_conv_args a2 = vb_conv_defaults(1, 1, 1);
    a2.has_bias = 0;
    a2.residual = v;
    return vb_conv_raw(x->p, h, pw2_name, pw2, NULL, 4 * n, n, &a2);
}

static int build_decoder_super(hv_ctx *x) {
    const int *nf = vae_taehv_dec_widths[1], lat = x->c->latent_channels;
    int v = conv2d(x, x->p->input, "decoder.0", lat, nf[0], 1, 1, 0, 0);
    int idx = 1;
    for (int s = 0; s < HV_STAGES; s++, idx += 7) {
        const int n = nf[s], next = nf[s + 1];
        for (int k = 0; k < 3; k++)
            v = super_memblock(x, v, idx + k, n);
        char name[32];
        snprintf(name, sizeof name, "decoder.%d", idx + 3);
        v = vb_act(x->p, conv2d(x, v, name, n, 4 * next, 3, 1, 1, 0), 4 * next, VAE_ACT_RELU, 0.0f);
        v = vb_shuffle_up(x->p, v, 4 * next, next, 1, 2, 4, 0, 2, 1, 1); /* PixelShuffle(2) */
        v = tgrow(x, v, idx + 6, next, s);
    }
    return decoder_tail(x, trim(x, v, nf[HV_STAGES]));
}

static int time_factor(const int *strides) {
    int f = 1;
    for (int s = 0; s < HV_STAGES; s++)
        f *= strides[s];
    return f;
}

static int build_decoder(hv_ctx *x) {
    x->p->first_chunk = x->p->chunk = 1;
    return x->c->super ? build_decoder_super(x) : build_decoder_base(x);
}

int vae_taehv_check(const vae_taehv_config *c) {
    int ok = (c->patch_size == 1 || c->patch_size == 2 || c->patch_size == 4) &&
             c->latent_channels >= 1 && c->latent_channels <= 1024;
    for (int s = 0; s < HV_STAGES; s++)
        ok = ok && (c->enc_tpool[s] == 1 || c->enc_tpool[s] == 2) &&
             (c->dec_tgrow[s] == 1 || c->dec_tgrow[s] == 2);
    return ok ? VAE_OK
              : vae_fail(VAE_EINVAL,
                         "taehv: bad configuration (patch_size %d, latent_channels "
                         "%d, time strides 1 or 2)",
                         c->patch_size, c->latent_channels);
}

int vae_taehv_build(vae_builder *b, const vae_config *cfg, vae_program *enc, vae_program *dec) {
    const vae_taehv_config *c = &cfg->u.taehv;
    int rc = vae_taehv_check(c);
    if (rc) return vb_error(b, rc, "%s", vae_last_error());
    hv_ctx x = {b, NULL, NULL, c, 1, 1};
    if (c->has_encoder) {
        vae_program_init(enc, 3);
        /* whole groups of t_downscale frames; the end padded by repeating the last frame */
        enc->first_chunk = enc->chunk = time_factor(c->enc_tpool);
        enc->pad_end = 1;
        x.p = enc;
        if (build_encoder(&x) < 0 && vb_status(b) == VAE_OK)
            vb_error(b, VAE_ENOMEM, "taehv: out of memory building the encoder");
    }
    if (c->has_decoder) {
        vae_program_init(dec, c->latent_channels);
        x.p = dec;
        if (build_decoder(&x) < 0 && vb_status(b) == VAE_OK)
            vb_error(b, VAE_ENOMEM, "taehv: out of memory building the decoder");
    }
    return vb_status(b);
}

int vae_taehv_preview(const vae_config *cfg, const vae_program *dec, int preview,
                      vae_program *out) {
    const vae_taehv_config *c = &cfg->u.taehv;
    memset(out, 0, sizeof *out);
    if (dec->n_ops == 0)
        return vae_fail(VAE_EUNSUPPORTED, "preview: this taehv checkpoint has no decoder");
    if ((preview & VAE_PREVIEW_SPACE) && c->super)
        return vae_fail(VAE_EUNSUPPORTED, "preview: the taehv super decoder has no space preview "
                                          "(its pixel-shuffle convs change shape without "
                                          "upsampling); time is supported");
    hv_ctx x = {NULL, dec, out, c, !(preview & VAE_PREVIEW_TIME), !(preview & VAE_PREVIEW_SPACE)};
    vae_program_init(out, c->latent_channels);
    if (build_decoder(&x) >= 0) return VAE_OK;
    vae_program_free(out);
    return vae_last_error()[0] ? VAE_EINVAL : vae_fail(VAE_ENOMEM, "out of memory");
}
