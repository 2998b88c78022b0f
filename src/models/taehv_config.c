/* taehv_config.c -- the TAEHV family's architecture: detection from the checkpoint's keys and
 * shapes alone, the configuration from upstream constructor arguments, its description (the
 * programs: taehv.c).
 *
 * What the weights tell (upstream taehv.py's Sequential indices): the patch size from
 * encoder.0's input channels (3 p^2) or decoder.22's output channels; the latent channels from
 * encoder.17 / decoder.1 (super: decoder.0); each TPool's stride (encoder.2, .7, .12: weight
 * [n][s n]) and TGrow's (decoder.7, .13, .19; super: .7, .14, .21: weight [s n][n]); the decoder
 * kind from decoder.1 (a 3x3 conv to 256: base) or decoder.0 + decoder.1.conv.0 (a 1x1 conv to
 * 512 and a depthwise 7x7: super).
 *
 * Upstream's file names (its taehv.py at madebyollin/taehv 1f14a56 keys its constructor on
 * substrings of the checkpoint path): "taew2_2" -> patch 2, 48 latent channels; "taehv1_5" -> 2,
 * 32; "taeh3" -> 2, 24 and H3's frame rules; "taeltx" (taeltx_2, taeltx2_3) -> 4, 128 and time
 * factors 2 in every stage of both sides; "_super" -> the super decoder; "taecvx" -> an even
 * latent count decodes untrimmed; taew2_1, taehv and taeos1_3 take the defaults (1, 16). All but
 * taecvx's rule are in the weights' shapes (taeh3's is its 24 channels), so the variant is the
 * first of the table whose layout the weights have, or the one the file's base name names among
 * those (as upstream: "taecvx.safetensors"), or the configuration's "variant".
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "models/model.h"

enum { HV_WIDTH = VAE_TAEHV_WIDTH, HV_STAGES = VAE_TAEHV_STAGES };

/* ---- upstream's variants ---------------------------------------------------------------------
 * Longer names first where one holds another (file names are matched as substrings). */
typedef struct hv_variant {
    const char *name;
    int patch_size, latent_channels, enc_tpool[HV_STAGES], dec_tgrow[HV_STAGES], super, frames;
} hv_variant;

static const hv_variant hv_variants[] = {
    {"taew2_1", 1, 16, {2, 2, 1}, {1, 2, 2}, 0, VAE_TAEHV_FRAMES_DEFAULT},
    {"taehv1_5_super", 2, 32, {2, 2, 1}, {1, 2, 2}, 1, VAE_TAEHV_FRAMES_DEFAULT},
    {"taehv1_5", 2, 32, {2, 2, 1}, {1, 2, 2}, 0, VAE_TAEHV_FRAMES_DEFAULT},
    {"taehv", 1, 16, {2, 2, 1}, {1, 2, 2}, 0, VAE_TAEHV_FRAMES_DEFAULT},
    {"taeos1_3", 1, 16, {2, 2, 1}, {1, 2, 2}, 0, VAE_TAEHV_FRAMES_DEFAULT},
    {"taecvx", 1, 16, {2, 2, 1}, {1, 2, 2}, 0, VAE_TAEHV_FRAMES_CVX},
    {"taew2_2_super", 2, 48, {2, 2, 1}, {1, 2, 2}, 1, VAE_TAEHV_FRAMES_DEFAULT},
    {"taew2_2", 2, 48, {2, 2, 1}, {1, 2, 2}, 0, VAE_TAEHV_FRAMES_DEFAULT},
    {"taeh3", 2, 24, {2, 2, 1}, {1, 2, 2}, 0, VAE_TAEHV_FRAMES_H3},
    {"taeltx_2", 4, 128, {2, 2, 2}, {2, 2, 2}, 0, VAE_TAEHV_FRAMES_DEFAULT},
    {"taeltx2_3", 4, 128, {2, 2, 2}, {2, 2, 2}, 0, VAE_TAEHV_FRAMES_DEFAULT},
};
enum { HV_N_VARIANTS = sizeof hv_variants / sizeof *hv_variants };

/* the variant's layout is c's (the sides c has) */
static int layout_fits(const hv_variant *v, const vae_taehv_config *c) {
    if (v->patch_size != c->patch_size || v->latent_channels != c->latent_channels) return 0;
    if (c->has_encoder && memcmp(v->enc_tpool, c->enc_tpool, sizeof v->enc_tpool) != 0) return 0;
    return !c->has_decoder ||
           (memcmp(v->dec_tgrow, c->dec_tgrow, sizeof v->dec_tgrow) == 0 && v->super == c->super);
}

static void set_variant(vae_taehv_config *c, const hv_variant *v) {
    snprintf(c->variant, sizeof c->variant, "%s", v ? v->name : "");
    c->frames = v ? v->frames : VAE_TAEHV_FRAMES_DEFAULT;
}

/* The variant of c's layout: the one path's base name names (NULL: none), else the first. */
static void name_variant(vae_taehv_config *c, const char *path) {
    const char *base = path ? path : "";
    for (const char *q = base; *q; q++)
        if (*q == '/' || *q == '\\') base = q + 1;
    const hv_variant *first = NULL;
    for (int i = 0; i < HV_N_VARIANTS; i++) {
        if (!layout_fits(&hv_variants[i], c)) continue;
        if (strstr(base, hv_variants[i].name)) {
            set_variant(c, &hv_variants[i]);
            return;
        }
        if (!first) first = &hv_variants[i];
    }
    set_variant(c, first);
}

/* upstream's file-name overrides of its constructor: the variant's layout */
static void apply_variant(vae_taehv_config *c, const hv_variant *v) {
    c->patch_size = v->patch_size, c->latent_channels = v->latent_channels, c->super = v->super;
    memcpy(c->enc_tpool, v->enc_tpool, sizeof c->enc_tpool);
    memcpy(c->dec_tgrow, v->dec_tgrow, sizeof c->dec_tgrow);
    set_variant(c, v);
}

/* ---- detection and configuration --------------------------------------------------------------
 */
static const vae_store_tensor *find(const vae_store *s, const char *prefix, const char *fmt,
                                    int idx) {
    char name[64], key[256];
    snprintf(name, sizeof name, fmt, idx);
    snprintf(key, sizeof key, "%s%s", prefix ? prefix : "", name);
    const vae_store_tensor *t = vae_store_find(s, key);
    return t && t->ndim == 4 ? t : NULL;
}

/* encoder: 0 = conv(3p^2, 64), 17 = conv(64, L); base decoder: 1 = conv(L, 256), 22 = conv(64,
 * 3p^2); super decoder: 0 = Conv1x1(L, 512), 1.conv.0 = its first depthwise 7x7 */
static int has_encoder(const vae_store *s, const char *prefix) {
    const vae_store_tensor *a = find(s, prefix, "encoder.%d.weight", 0),
                           *z = find(s, prefix, "encoder.%d.weight", 17);
    return a && z && a->shape[0] == HV_WIDTH && z->shape[1] == HV_WIDTH &&
           find(s, prefix, "encoder.%d.conv.weight", 2);
}

static int decoder_kind(const vae_store *s, const char *prefix) { /* 0 none, 1 base, 2 super */
    const vae_store_tensor *z = find(s, prefix, "decoder.%d.weight", 22);
    if (!z || z->shape[1] != HV_WIDTH) return 0;
    const vae_store_tensor *a1 = find(s, prefix, "decoder.%d.weight", 1),
                           *a0 = find(s, prefix, "decoder.%d.weight", 0),
                           *dw = find(s, prefix, "decoder.%d.conv.0.weight", 1);
    if (a1 && a1->shape[0] == vae_taehv_dec_widths[0][0] &&
        find(s, prefix, "decoder.%d.conv.0.weight", 3))
        return 1;
    if (a0 && a0->shape[0] == vae_taehv_dec_widths[1][0] && dw && dw->shape[1] == 1) return 2;
    return 0;
}

static int hv_detect(const vae_store *s, const char *prefix) {
    return has_encoder(s, prefix) || decoder_kind(s, prefix) != 0;
}

/* The stride of a TPool (weight [n][s n]) or TGrow (weight [s n][n]); 0 when absent or odd. */
static int stride_of(const vae_store *s, const char *prefix, const char *fmt, int idx, int grow) {
    const vae_store_tensor *t = find(s, prefix, fmt, idx);
    if (!t) return 0;
    int64_t a = grow ? t->shape[0] : t->shape[1], b = grow ? t->shape[1] : t->shape[0];
    return b > 0 && a % b == 0 && (a / b == 1 || a / b == 2) ? (int)(a / b) : 0;
}

static int hv_config_from_store(vae_config *cfg, const vae_store *s, const char *prefix,
                                vae_name_map_fn *map) {
    const char *path = s->path ? s->path : "checkpoint";
    vae_taehv_config *c = &cfg->u.taehv;
    memset(c, 0, sizeof *c);
    cfg->arch = &vae_arch_taehv;
    *map = NULL;
    c->has_encoder = has_encoder(s, prefix);
    const int kind = decoder_kind(s, prefix);
    c->has_decoder = kind != 0;
    c->super = kind == 2;
    int p_in = 0, p_out = 0, lat_enc = 0, lat_dec = 0;
    if (c->has_encoder) {
        p_in = (int)find(s, prefix, "encoder.%d.weight", 0)->shape[1];
        lat_enc = (int)find(s, prefix, "encoder.%d.weight", 17)->shape[0];
        for (int st = 0; st < HV_STAGES; st++)
            if (!(c->enc_tpool[st] = stride_of(s, prefix, "encoder.%d.conv.weight", 2 + 5 * st, 0)))
                return vae_fail(VAE_ESHAPE,
                                "%s: taehv encoder.%d (TPool) missing or not of stride "
                                "1 or 2",
                                path, 2 + 5 * st);
    }
    if (c->has_decoder) {
        p_out = (int)find(s, prefix, "decoder.%d.weight", 22)->shape[0];
        lat_dec = (int)find(s, prefix, "decoder.%d.weight", c->super ? 0 : 1)->shape[1];
        for (int st = 0; st < HV_STAGES; st++) {
            const int idx = c->super ? 7 + 7 * st : 7 + 6 * st;
            if (!(c->dec_tgrow[st] = stride_of(s, prefix, "decoder.%d.conv.weight", idx, 1)))
                return vae_fail(VAE_ESHAPE,
                                "%s: taehv decoder.%d (TGrow) missing or not of stride "
                                "1 or 2",
                                path, idx);
        }
    } else {
        memcpy(c->dec_tgrow, (int[]){1, 2, 2}, sizeof c->dec_tgrow);
    }
    if (!c->has_encoder) memcpy(c->enc_tpool, (int[]){2, 2, 1}, sizeof c->enc_tpool);
    const int p3 = p_in ? p_in : p_out;
    if ((p_in && p_out && p_in != p_out) || (lat_enc && lat_dec && lat_enc != lat_dec) ||
        (p3 != 3 && p3 != 12 && p3 != 48))
        return vae_fail(VAE_ESHAPE,
                        "%s: taehv with %d/%d image channels (3 p^2, p = 1, 2 or 4) and "
                        "%d/%d latent channels (encoder/decoder)",
                        path, p_in, p_out, lat_enc, lat_dec);
    c->patch_size = p3 == 3 ? 1 : p3 == 12 ? 2 : 4;
    c->latent_channels = lat_enc ? lat_enc : lat_dec;
    cfg->n_latent = 0;
    cfg->norm_desc = "none (raw latents)";
    name_variant(c, s->path);
    return vae_taehv_check(c);
}

/* A [3]-array of booleans (upstream's stage flags) into strides 1/2; a 2-array names the last two
 * stages (upstream prepends False). */
static int flags(const cJSON *v, const char *key, int *strides) {
    const int n = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v) || n < 2 || n > HV_STAGES)
        return vae_fail(VAE_EINVAL, "taehv config: %s must be an array of 2 or 3 booleans", key);
    for (int s = 0; s < HV_STAGES; s++) {
        const cJSON *f =
            s - (HV_STAGES - n) >= 0 ? cJSON_GetArrayItem(v, s - (HV_STAGES - n)) : NULL;
        if (f && !cJSON_IsBool(f))
            return vae_fail(VAE_EINVAL, "taehv config: %s must be an array of booleans", key);
        strides[s] = f && cJSON_IsTrue(f) ? 2 : 1;
    }
    return VAE_OK;
}

static int json_int(const cJSON *js, const char *key, int *dst) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(js, key);
    if (v && !cJSON_IsNumber(v))
        return vae_fail(VAE_EINVAL, "taehv config: %s must be a number", key);
    if (v) *dst = (int)v->valuedouble;
    return VAE_OK;
}

/* "variant": an upstream file name of the table (its layout, the other keys override it, and its
 * frame rules), or null (the layout's first) */
static int json_variant(vae_taehv_config *c, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return VAE_OK;
    for (int i = 0; cJSON_IsString(v) && i < HV_N_VARIANTS; i++)
        if (strcmp(v->valuestring, hv_variants[i].name) == 0) {
            apply_variant(c, &hv_variants[i]);
            return VAE_OK;
        }
    return vae_fail(VAE_EINVAL,
                    "taehv config: variant must be null or an upstream file name: taew2_1, "
                    "taehv, taeos1_3, taecvx, taew2_2, taew2_2_super, taehv1_5, taehv1_5_super, "
                    "taeh3, taeltx_2, taeltx2_3");
}

static int json_names_variant(const cJSON *js) {
    const cJSON *v = js ? cJSON_GetObjectItemCaseSensitive(js, "variant") : NULL;
    return v && cJSON_IsString(v);
}

static int hv_config_from_json(vae_config *cfg, const cJSON *js) {
    vae_taehv_config *c = &cfg->u.taehv;
    if (!(cfg->arch == &vae_arch_taehv && c->patch_size > 0)) { /* upstream's defaults */
        *c = (vae_taehv_config){1, 16, {2, 2, 1}, {1, 2, 2}, 0, 1, 1, "", 0};
    }
    cfg->arch = &vae_arch_taehv;
    if (js) {
        if (!cJSON_IsObject(js)) return vae_fail(VAE_EINVAL, "taehv config: not a JSON object");
        static const char *const known[] = {
            "patch_size",  "latent_channels", "arch_variant", "encoder_time_downscale",
            "decoder_time_upscale", "has_encoder", "has_decoder", "variant", NULL};
        int rc = vae_config_check_keys(js, known, "taehv");
        if (!rc) rc = json_variant(c, cJSON_GetObjectItemCaseSensitive(js, "variant"));
        if (!rc) rc = json_int(js, "patch_size", &c->patch_size);
        if (!rc) rc = json_int(js, "latent_channels", &c->latent_channels);
        if (!rc) rc = json_int(js, "has_encoder", &c->has_encoder);
        if (!rc) rc = json_int(js, "has_decoder", &c->has_decoder);
        const cJSON *v;
        if (!rc && (v = cJSON_GetObjectItemCaseSensitive(js, "encoder_time_downscale")))
            rc = flags(v, "encoder_time_downscale", c->enc_tpool);
        if (!rc && (v = cJSON_GetObjectItemCaseSensitive(js, "decoder_time_upscale")))
            rc = flags(v, "decoder_time_upscale", c->dec_tgrow);
        if (!rc && (v = cJSON_GetObjectItemCaseSensitive(js, "arch_variant"))) {
            if (!cJSON_IsNull(v) && !(cJSON_IsString(v) && strcmp(v->valuestring, "super") == 0))
                return vae_fail(VAE_EUNSUPPORTED, "taehv config: arch_variant: null (base) or "
                                                  "'super'");
            c->super = !cJSON_IsNull(v);
        }
        if (rc) return rc;
    }
    if (!c->has_encoder && !c->has_decoder)
        return vae_fail(VAE_EINVAL, "taehv config: neither encoder nor decoder");
    if (!c->variant[0] || !json_names_variant(js)) name_variant(c, NULL);
    cfg->n_latent = 0;
    cfg->norm_desc = "none (raw latents)";
    return vae_taehv_check(c);
}

static void put_flags(vae_strbuf *j, const char *key, const int *strides) {
    vae_strbuf_printf(j, ",\"%s\":[%s,%s,%s]", key, strides[0] > 1 ? "true" : "false",
                      strides[1] > 1 ? "true" : "false", strides[2] > 1 ? "true" : "false");
}

static void hv_describe(const vae_config *cfg, vae_strbuf *j) {
    const vae_taehv_config *c = &cfg->u.taehv;
    vae_strbuf_printf(j, "{\"patch_size\":%d,\"latent_channels\":%d,\"arch_variant\":%s",
                      c->patch_size, c->latent_channels, c->super ? "\"super\"" : "null");
    put_flags(j, "encoder_time_downscale", c->enc_tpool);
    put_flags(j, "decoder_time_upscale", c->dec_tgrow);
    vae_strbuf_printf(j, ",\"has_encoder\":%d,\"has_decoder\":%d", c->has_encoder, c->has_decoder);
    if (c->variant[0])
        vae_strbuf_printf(j, ",\"variant\":\"%s\"}", c->variant);
    else
        vae_strbuf_printf(j, ",\"variant\":null}");
}

/* taecvx: an even latent count decodes untrimmed (upstream skips its trim then); taeh3: H3's
 * 17-frame encode segments after 3 zero frames, the last 3 latents dropped, and decodes cut in
 * periods of 5 latents' frames whose first t_upscale - 1 are dropped, the last 3 latents' frames
 * dropped (upstream _encode_h3_video, _decode_h3_video). The decoder programs of both do not
 * trim (taehv.c): the rule does. */
static int hv_frame_rule(const vae_config *cfg, int encode, int preview, vae_frame_rule *r) {
    const vae_taehv_config *c = &cfg->u.taehv;
    memset(r, 0, sizeof *r);
    int t_up = 1;
    for (int s = 0; s < HV_STAGES && !(preview & VAE_PREVIEW_TIME); s++)
        t_up *= c->dec_tgrow[s];
    if (c->frames == VAE_TAEHV_FRAMES_CVX) {
        r->skip_odd = t_up - 1;
        return !encode && t_up > 1;
    }
    if (c->frames != VAE_TAEHV_FRAMES_H3) return 0;
    if (encode) {
        r->seg_frames = 17, r->seg_lead = 3, r->drop_tail = 3;
    } else {
        r->period = 5 * t_up, r->skip = t_up - 1, r->drop_tail = 3 * t_up;
    }
    return 1;
}

static int hv_build(vae_builder *b, const vae_config *cfg, vae_program *enc, vae_program *dec) {
    return vae_taehv_build(b, cfg, enc, dec); /* (taehv.c) */
}

const vae_arch vae_arch_taehv = {
    .name = "taehv",
    VAE_ARCH_HOOKS(hv),
    .preview = vae_taehv_preview,
    .frame_rule = hv_frame_rule,
    .spatial_factor = 8,
    .temporal_factor = 4,
    .is_video = 1,
    .image_min = 0.0f,
    .image_max = 1.0f,
    .fp8_convs = {0, 0}, /* every conv that may: not measured yet */
};
