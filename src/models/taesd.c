/* taesd.c -- the TAESD family of tiny autoencoders (madebyollin/taesd taesd.py): taesd, taesdxl,
 * taesd3, taef1 and the FLUX.2 variant taef2. 2-D, per image, images in [0,1], raw latents.
 *
 * Upstream facts (taesd.py):
 * - conv(n_in, n_out) = Conv2d 3x3, padding 1 (bias unless noted). Block(n, n): conv, ReLU, conv,
 *   ReLU, conv, + identity skip, ReLU. With use_midblock_gn ("flux_2", i.e. taef2) the three
 *   middle Blocks first do x = x + pool(x), pool = [Conv1x1 n->4n (no bias), GroupNorm(4, 4n,
 *   eps 1e-5), ReLU, Conv1x1 4n->n (no bias)].
 * - Encoder = Sequential(conv(3,64), Block, conv s2 (no bias), Block x3, conv s2, Block x3, conv s2,
 *   Block x3 (pool), conv(64, L)).
 * - Decoder = Sequential(Clamp = tanh(x/3)*3, conv(L,64), ReLU, Block x3 (pool), Upsample x2,
 *   conv (no bias), Block x3, Upsample, conv, Block x3, Upsample, conv, Block, conv(64, 3)).
 * - Encoder and decoder are separate files with bare Sequential indices as keys.
 * - The pooled blocks exist exactly for the flux_2 variant, which is the one with 32 latent
 *   channels among the variants of this (8x) architecture (taesana, also 32 channels, is the
 *   separate F32 architecture, not supported here). config_from_store checks that the file agrees.
 */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "models/model.h"

#define TS_GN_EPS 1e-5f

static int use_pool(const vae_taesd_config *c) { return c->latent_channels == 32; }

typedef struct ts_ctx {
    vae_builder *b;
    vae_program *p;
    int n; /* width */
} ts_ctx;

static int conv3(ts_ctx *x, int v, const char *name, int ci, int co, int stride, int bias,
                 int residual) {
    vb_conv_args a = vb_conv_defaults(1, 3, 3);
    a.sh = a.sw = stride;
    a.has_bias = bias;
    a.residual = residual;
    return vb_conv(x->b, x->p, v, name, ci, co, &a, 1);
}

/* Block(n, n) at Sequential index idx. Weights are requested in state_dict order: conv.* first. */
static int block(ts_ctx *x, int v, int idx, int pool) {
    int n = x->n;
    char name[64];
    const float *w[3], *bias[3];
    for (int k = 0; k < 3; k++) {
        w[k] = vb_wf(x->b, 4, (int[]){n, n, 3, 3}, "%d.conv.%d.weight", idx, 2 * k);
        bias[k] = vb_wf(x->b, 1, (int[]){n}, "%d.conv.%d.bias", idx, 2 * k);
    }
    if (pool) {
        vb_conv_args a = vb_conv_defaults(1, 1, 1);
        a.has_bias = 0;
        snprintf(name, sizeof name, "%d.pool.0", idx);
        int h = vb_conv(x->b, x->p, v, name, n, 4 * n, &a, 1);
        snprintf(name, sizeof name, "%d.pool.1", idx);
        h = vb_group_norm(x->b, x->p, h, name, 4 * n, 4, TS_GN_EPS, VAE_ACT_RELU);
        snprintf(name, sizeof name, "%d.pool.3", idx);
        a.residual = v;
        v = vb_conv(x->b, x->p, h, name, 4 * n, n, &a, 1);
    }
    vb_conv_args a = vb_conv_defaults(1, 3, 3);
    int h = v;
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "%d.conv.%d", idx, 2 * k);
        a.residual = k == 2 ? v : -1;
        h = vb_conv_raw(x->p, h, name, w[k], bias[k], n, n, &a);
        h = vb_act(x->p, h, n, VAE_ACT_RELU, 0.0f);
    }
    return h;
}

static int build_encoder(ts_ctx *x, const vae_taesd_config *c) {
    int n = x->n, pool = use_pool(c);
    int v = conv3(x, x->p->input, "0", 3, n, 1, 1, -1);
    v = block(x, v, 1, 0);
    int idx = 2;
    for (int level = 0; level < 3; level++) {
        char name[16];
        snprintf(name, sizeof name, "%d", idx++);
        v = conv3(x, v, name, n, n, 2, 0, -1);
        for (int k = 0; k < 3; k++) v = block(x, v, idx++, pool && level == 2);
    }
    return conv3(x, v, "14", n, c->latent_channels, 1, 1, -1);
}

static int build_decoder(ts_ctx *x, const vae_taesd_config *c) {
    int n = x->n, pool = use_pool(c);
    int v = vb_act(x->p, x->p->input, c->latent_channels, VAE_ACT_TANH_SCALE, 3.0f);
    v = conv3(x, v, "1", c->latent_channels, n, 1, 1, -1);
    v = vb_act(x->p, v, n, VAE_ACT_RELU, 0.0f);
    int idx = 3;
    for (int k = 0; k < 3; k++) v = block(x, v, idx++, pool);
    for (int level = 0; level < 3; level++) {
        char name[16];
        v = vb_upsample(x->p, v, n, 2);
        idx++; /* nn.Upsample */
        snprintf(name, sizeof name, "%d", idx++);
        v = conv3(x, v, name, n, n, 1, 0, -1);
        int nb = level == 2 ? 1 : 3;
        for (int k = 0; k < nb; k++) v = block(x, v, idx++, 0);
    }
    char name[16];
    snprintf(name, sizeof name, "%d", idx); /* 19 */
    return conv3(x, v, name, n, 3, 1, 1, -1);
}

static int ts_build(vae_builder *b, const vae_config *cfg, vae_program *enc, vae_program *dec) {
    const vae_taesd_config *c = &cfg->u.taesd;
    if (c->latent_channels < 1 || c->latent_channels > 64 || c->width < 1)
        return vae_fail(VAE_EINVAL, "taesd: bad configuration (latent_channels %d, width %d)",
                        c->latent_channels, c->width);
    ts_ctx x = {b, NULL, c->width};
    vae_program *p = c->is_decoder ? dec : enc;
    vae_program_init(p, c->is_decoder ? c->latent_channels : 3);
    p->first_chunk = p->chunk = 1;
    x.p = p;
    int v = c->is_decoder ? build_decoder(&x, c) : build_encoder(&x, c);
    if (v < 0 && vb_status(b) == VAE_OK)
        vb_error(b, VAE_ENOMEM, "taesd: out of memory building the %s",
                 c->is_decoder ? "decoder" : "encoder");
    return vb_status(b);
}

/* ---- detection and configuration -------------------------------------------------------------- */
static const vae_store_tensor *find(const vae_store *s, const char *prefix, const char *name) {
    char key[256];
    snprintf(key, sizeof key, "%s%s", prefix ? prefix : "", name);
    return vae_store_find(s, key);
}

static int is4(const vae_store_tensor *t) { return t && t->ndim == 4; }

/* encoder: 0 = conv(3, n), 1 = Block, 14 = conv(n, L); decoder: 1 = conv(L, n), 19 = conv(n, 3) */
static int looks_encoder(const vae_store *s, const char *prefix) {
    const vae_store_tensor *a = find(s, prefix, "0.weight"), *z = find(s, prefix, "14.weight");
    return is4(a) && a->shape[1] == 3 && is4(z) && is4(find(s, prefix, "1.conv.0.weight")) &&
           z->shape[1] == a->shape[0];
}

static int looks_decoder(const vae_store *s, const char *prefix) {
    const vae_store_tensor *a = find(s, prefix, "1.weight"), *z = find(s, prefix, "19.weight");
    return is4(a) && is4(z) && z->shape[0] == 3 && z->shape[1] == a->shape[0] &&
           is4(find(s, prefix, "3.conv.0.weight")) && !find(s, prefix, "0.weight");
}

static int ts_detect(const vae_store *s, const char *prefix) {
    return looks_encoder(s, prefix) || looks_decoder(s, prefix);
}

static void set_norm(vae_config *cfg) {
    cfg->n_latent = cfg->u.taesd.latent_channels <= 64 ? cfg->u.taesd.latent_channels : 64;
    for (int i = 0; i < cfg->n_latent; i++) cfg->latent_mean[i] = 0.0f, cfg->latent_std[i] = 1.0f;
    cfg->norm_desc = "none (raw latents)";
}

static int ts_config_from_store(vae_config *cfg, const vae_store *s, const char *prefix,
                                vae_name_map_fn *map) {
    const char *path = s->path ? s->path : "checkpoint";
    vae_taesd_config *c = &cfg->u.taesd;
    cfg->arch = &vae_arch_taesd;
    memset(c, 0, sizeof *c);
    *map = NULL;
    int has_pool;
    if (looks_encoder(s, prefix)) {
        const vae_store_tensor *a = find(s, prefix, "0.weight"), *z = find(s, prefix, "14.weight");
        c->is_decoder = 0;
        c->width = (int)a->shape[0];
        c->latent_channels = (int)z->shape[0];
        has_pool = find(s, prefix, "11.pool.0.weight") != NULL;
    } else if (looks_decoder(s, prefix)) {
        const vae_store_tensor *a = find(s, prefix, "1.weight");
        c->is_decoder = 1;
        c->width = (int)a->shape[0];
        c->latent_channels = (int)a->shape[1];
        has_pool = find(s, prefix, "3.pool.0.weight") != NULL;
    } else {
        return vae_fail(VAE_EKEY, "%s: not a TAESD encoder or decoder", path);
    }
    if (c->latent_channels < 1 || c->latent_channels > 64 || c->width < 1)
        return vae_fail(VAE_ESHAPE, "%s: TAESD with %d latent channels and width %d", path,
                        c->latent_channels, c->width);
    if (has_pool != use_pool(c))
        return vae_fail(VAE_EUNSUPPORTED,
                        "%s: TAESD with %d latent channels %s mid-block GroupNorm pools; supported "
                        "are taef2 (32 channels, pools) and taesd/taesdxl/taesd3/taef1 (no pools)",
                        path, c->latent_channels, has_pool ? "with" : "without");
    set_norm(cfg);
    return VAE_OK;
}

static int ts_config_from_json(vae_config *cfg, const cJSON *js) {
    vae_taesd_config *c = &cfg->u.taesd;
    int keep = cfg->arch == &vae_arch_taesd && c->width > 0;
    cfg->arch = &vae_arch_taesd;
    if (!keep) {
        memset(c, 0, sizeof *c);
        c->latent_channels = 32; /* taef2 */
        c->width = 64;
    }
    if (js) {
        if (!cJSON_IsObject(js)) return vae_fail(VAE_EINVAL, "taesd config: not a JSON object");
        static const char *const known[] = {"latent_channels", "width", "is_decoder",
                                            "arch_variant", NULL};
        int rc = vae_config_check_keys(js, known, "taesd");
        if (rc) return rc;
        const cJSON *v;
        if ((v = cJSON_GetObjectItemCaseSensitive(js, "latent_channels")) && !cJSON_IsNumber(v))
            return vae_fail(VAE_EINVAL, "taesd config: latent_channels must be a number");
        if (v) c->latent_channels = (int)v->valuedouble;
        if ((v = cJSON_GetObjectItemCaseSensitive(js, "width")) && !cJSON_IsNumber(v))
            return vae_fail(VAE_EINVAL, "taesd config: width must be a number");
        if (v) c->width = (int)v->valuedouble;
        if ((v = cJSON_GetObjectItemCaseSensitive(js, "is_decoder")))
            c->is_decoder = cJSON_IsTrue(v) || (cJSON_IsNumber(v) && v->valuedouble != 0);
        if ((v = cJSON_GetObjectItemCaseSensitive(js, "arch_variant")) &&
            !(cJSON_IsString(v) && strcmp(v->valuestring, "flux_2") == 0))
            return vae_fail(VAE_EUNSUPPORTED, "taesd config: arch_variant: only 'flux_2' is known");
        if (v && c->latent_channels != 32)
            return vae_fail(VAE_EUNSUPPORTED, "taesd config: flux_2 has 32 latent channels");
    }
    if (c->latent_channels < 1 || c->latent_channels > 64 || c->width < 1)
        return vae_fail(VAE_EINVAL, "taesd config: latent_channels %d, width %d",
                        c->latent_channels, c->width);
    set_norm(cfg);
    return VAE_OK;
}

static void ts_describe(const vae_config *cfg, vae_strbuf *j) {
    const vae_taesd_config *c = &cfg->u.taesd;
    vae_strbuf_printf(j, "{\"latent_channels\":%d,\"width\":%d,\"is_decoder\":%s%s}",
                      c->latent_channels, c->width, c->is_decoder ? "true" : "false",
                      use_pool(c) ? ",\"arch_variant\":\"flux_2\"" : "");
}

const vae_arch vae_arch_taesd = {
    .name = "taesd",
    VAE_ARCH_HOOKS(ts),
    .spatial_factor = 8,
    .temporal_factor = 1,
    .is_video = 0,
    .image_min = 0.0f,
    .image_max = 1.0f,
    .fp8_convs = {9, 9}, /* no conv of the E4M3 kernels' shapes (2-D): only VAE_FP8_SHAPES=wide */
};
