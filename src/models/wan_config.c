/* wan_config.c -- the Wan2.1 and Wan2.2 configurations: from a checkpoint's names and shapes
 * (upstream or diffusers keys), from upstream constructor arguments (JSON), back to JSON, and the
 * released latent statistics.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "models/wan_common.h"

/* ---- latent statistics --------------------------------------------------------------------- */

static const float wan21_mean[16] = {-0.7571, -0.7089, -0.9113, 0.1075,  -0.1745, 0.9653,
                                     -0.1517, 1.5508,  0.4134,  -0.0715, 0.5517,  -0.3632,
                                     -0.1922, -0.9497, 0.2503,  -0.2921};
static const float wan21_std[16] = {2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                                    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160};
static const float wan22_mean[48] = {
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174,  0.1838,  0.1557,  -0.1382, 0.0542,
    0.2813,  0.0891,  0.1570,  -0.0098, 0.0375,  -0.1825, -0.2246, -0.1207, -0.0698, 0.5109,
    0.2665,  -0.2108, -0.2158, 0.2502,  -0.2055, -0.0322, 0.1109,  0.1567,  -0.0729, 0.0899,
    -0.2799, -0.1230, -0.0313, -0.1649, 0.0117,  0.0723,  -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152,  0.1957,  0.1433,  -0.2944, 0.3573,  -0.0548, -0.1681, -0.0667};
static const float wan22_std[48] = {
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013, 0.8158, 1.0344, 0.5894, 1.0901,
    0.6885, 0.6165, 0.8454, 0.4978, 0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093, 0.5709, 0.6065, 0.6415, 0.4944,
    0.5726, 1.2042, 0.5458, 1.6887, 0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744};

void wan_set_latent_norm(vae_config *cfg, int is22) {
    int z = cfg->u.wan.z_dim;
    cfg->n_latent = z;
    const float *mean = NULL, *std = NULL;
    if (!is22 && z == 16) mean = wan21_mean, std = wan21_std;
    if (is22 && z == 48) mean = wan22_mean, std = wan22_std;
    for (int i = 0; i < z && i < 64; i++) {
        cfg->latent_mean[i] = mean ? mean[i] : 0.0f;
        cfg->latent_std[i] = std ? std[i] : 1.0f;
    }
    if (mean)
        cfg->norm_desc =
            is22 ? "diffusion = (mu - mean[c]) / std[c], Wan2.2 statistics (48 channels)"
                 : "diffusion = (mu - mean[c]) / std[c], Wan2.1 statistics (16 channels)";
    else
        cfg->norm_desc = "none (no released statistics for this z_dim: mean 0, std 1)";
}

/* ---- diffusers names ----------------------------------------------------------------------- */

static int starts(const char *s, const char *pfx) {
    return strncmp(s, pfx, strlen(pfx)) == 0;
}

/* ResidualBlock internals: residual.0.gamma -> norm1.gamma, residual.2 -> conv1, residual.3.gamma
 * -> norm2.gamma, residual.6 -> conv2, shortcut -> conv_shortcut; anything else unchanged. */
static void rb_rest(const char *rest, char *out, size_t len) {
    if (strcmp(rest, "residual.0.gamma") == 0)
        snprintf(out, len, "norm1.gamma");
    else if (strcmp(rest, "residual.3.gamma") == 0)
        snprintf(out, len, "norm2.gamma");
    else if (starts(rest, "residual.2."))
        snprintf(out, len, "conv1.%s", rest + 11);
    else if (starts(rest, "residual.6."))
        snprintf(out, len, "conv2.%s", rest + 11);
    else if (starts(rest, "shortcut."))
        snprintf(out, len, "conv_shortcut.%s", rest + 9);
    else
        snprintf(out, len, "%s", rest);
}

/* Parses "<int>.<rest>" at s; returns rest or NULL. */
static const char *parse_idx(const char *s, int *v) {
    if (*s < '0' || *s > '9') return NULL;
    long n = 0;
    while (*s >= '0' && *s <= '9') {
        n = n * 10 + (*s++ - '0');
        if (n > 100000) return NULL;
    }
    if (*s != '.') return NULL;
    *v = (int)n;
    return s + 1;
}

static const char *map_diffusers(const char *u, char *buf, size_t len, int is22, int nrb) {
    char rest[400];
    int i, j;
    const char *r;
    if (starts(u, "conv1.")) return snprintf(buf, len, "quant_conv.%s", u + 6), buf;
    if (starts(u, "conv2.")) return snprintf(buf, len, "post_quant_conv.%s", u + 6), buf;
    const char *side;
    if (starts(u, "encoder."))
        side = "encoder";
    else if (starts(u, "decoder."))
        side = "decoder";
    else
        return u;
    const char *s = u + 8;
    if (starts(s, "conv1.")) return snprintf(buf, len, "%s.conv_in.%s", side, s + 6), buf;
    if (strcmp(s, "head.0.gamma") == 0) return snprintf(buf, len, "%s.norm_out.gamma", side), buf;
    if (starts(s, "head.2.")) return snprintf(buf, len, "%s.conv_out.%s", side, s + 7), buf;
    if (starts(s, "middle.1."))
        return snprintf(buf, len, "%s.mid_block.attentions.0.%s", side, s + 9), buf;
    if (starts(s, "middle.0.") || starts(s, "middle.2.")) {
        rb_rest(s + 9, rest, sizeof rest);
        return snprintf(buf, len, "%s.mid_block.resnets.%d.%s", side, s[7] == '0' ? 0 : 1, rest),
               buf;
    }
    if (side[0] == 'e' && starts(s, "downsamples.") && (r = parse_idx(s + 12, &i))) {
        if (!is22) {
            rb_rest(r, rest, sizeof rest);
            return snprintf(buf, len, "encoder.down_blocks.%d.%s", i, rest), buf;
        }
        if (starts(r, "downsamples.") && (r = parse_idx(r + 12, &j))) {
            if (j < nrb) {
                rb_rest(r, rest, sizeof rest);
                return snprintf(buf, len, "encoder.down_blocks.%d.resnets.%d.%s", i, j, rest), buf;
            }
            return snprintf(buf, len, "encoder.down_blocks.%d.downsampler.%s", i, r), buf;
        }
        return u;
    }
    if (side[0] == 'd' && starts(s, "upsamples.") && (r = parse_idx(s + 10, &i))) {
        if (!is22) {
            int per = nrb + 2, level = i / per, k = i % per;
            if (k <= nrb) {
                rb_rest(r, rest, sizeof rest);
                return snprintf(buf, len, "decoder.up_blocks.%d.resnets.%d.%s", level, k, rest),
                       buf;
            }
            return snprintf(buf, len, "decoder.up_blocks.%d.upsamplers.0.%s", level, r), buf;
        }
        if (starts(r, "upsamples.") && (r = parse_idx(r + 10, &j))) {
            if (j <= nrb) {
                rb_rest(r, rest, sizeof rest);
                return snprintf(buf, len, "decoder.up_blocks.%d.resnets.%d.%s", i, j, rest), buf;
            }
            return snprintf(buf, len, "decoder.up_blocks.%d.upsampler.%s", i, r), buf;
        }
        return u;
    }
    return u;
}

#define WAN_MAPS(N)                                                                                \
    static const char *map21_##N(const char *u, char *buf, size_t len) {                           \
        return map_diffusers(u, buf, len, 0, N);                                                   \
    }                                                                                              \
    static const char *map22_##N(const char *u, char *buf, size_t len) {                           \
        return map_diffusers(u, buf, len, 1, N);                                                   \
    }
WAN_MAPS(1)
WAN_MAPS(2)
WAN_MAPS(3)
WAN_MAPS(4)
WAN_MAPS(5)
WAN_MAPS(6)
WAN_MAPS(7)
WAN_MAPS(8)

vae_name_map_fn wan_diffusers_map(int is22, int nrb) {
    static const vae_name_map_fn m21[] = {map21_1, map21_2, map21_3, map21_4,
                                          map21_5, map21_6, map21_7, map21_8};
    static const vae_name_map_fn m22[] = {map22_1, map22_2, map22_3, map22_4,
                                          map22_5, map22_6, map22_7, map22_8};
    if (nrb < 1 || nrb > 8) return NULL;
    return is22 ? m22[nrb - 1] : m21[nrb - 1];
}

/* ---- detection ----------------------------------------------------------------------------- */

typedef struct wan_keys {
    const vae_store *s;
    const char *prefix;
    vae_name_map_fn map;
} wan_keys;

/* The tensor of a printf-style name after the prefix: an upstream name mapped to the file's scheme
 * (wk) or the file's own name (raw). */
static const vae_store_tensor *find_key(const wan_keys *k, int mapped, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static const vae_store_tensor *find_key(const wan_keys *k, int mapped, const char *fmt, ...) {
    char up[512], buf[512], key[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(up, sizeof up, fmt, ap);
    va_end(ap);
    const char *m = mapped && k->map ? k->map(up, buf, sizeof buf) : up;
    snprintf(key, sizeof key, "%s%s", k->prefix ? k->prefix : "", m);
    return vae_store_find(k->s, key);
}
#define wk(k, ...) find_key(k, 1, __VA_ARGS__)
#define raw(k, ...) find_key(k, 0, __VA_ARGS__)

/* What tells each key scheme apart, and within it Wan2.2 from Wan2.1: the middle attention's
 * to_qkv and norm, and a first block of each version, each in the encoder or (a decoder-only
 * file) the decoder. */
static const struct {
    int scheme;
    const char *qkv[2], *norm[2], *first22[2], *first21[2]; /* encoder, decoder */
} schemes[] = {
    {WAN_SCHEME_UPSTREAM,
     {"encoder.middle.1.to_qkv.weight", "decoder.middle.1.to_qkv.weight"},
     {"encoder.middle.1.norm.gamma", "decoder.middle.1.norm.gamma"},
     {"encoder.downsamples.0.downsamples.0.residual.0.gamma",
      "decoder.upsamples.0.upsamples.0.residual.0.gamma"},
     {"encoder.downsamples.0.residual.0.gamma", "decoder.upsamples.0.residual.0.gamma"}},
    {WAN_SCHEME_DIFFUSERS,
     {"encoder.mid_block.attentions.0.to_qkv.weight",
      "decoder.mid_block.attentions.0.to_qkv.weight"},
     {"encoder.mid_block.attentions.0.norm.gamma", "decoder.mid_block.attentions.0.norm.gamma"},
     {"encoder.down_blocks.0.resnets.0.norm1.gamma",
      "decoder.up_blocks.0.upsampler.resample.1.weight"},
     {"encoder.down_blocks.0.norm1.gamma", "decoder.up_blocks.0.upsamplers.0.resample.1.weight"}},
};

int wan_scheme(const vae_store *s, const char *prefix, int is22) {
    wan_keys k = {s, prefix, NULL};
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        const char *const *qkv = schemes[i].qkv, *const *norm = schemes[i].norm;
        if (!(raw(&k, "%s", qkv[0]) && raw(&k, "%s", norm[0])) &&
            !(raw(&k, "%s", qkv[1]) && raw(&k, "%s", norm[1])))
            continue;
        int n22 = raw(&k, "%s", schemes[i].first22[0]) || raw(&k, "%s", schemes[i].first22[1]);
        int n21 = raw(&k, "%s", schemes[i].first21[0]) || raw(&k, "%s", schemes[i].first21[1]);
        return (is22 ? n22 : (n21 && !n22)) ? schemes[i].scheme : WAN_SCHEME_NONE;
    }
    return WAN_SCHEME_NONE;
}

static int dim_at(const vae_store_tensor *t, int i) {
    if (!t || i >= t->ndim || t->shape[i] <= 0 || t->shape[i] > (1 << 20)) return -1;
    return (int)t->shape[i];
}

/* One side's levels: widths (out channels of each level), temporal flags, resample presence. */
typedef struct side_info {
    int present;
    int n_levels, nrb; /* nrb = residual blocks per level */
    int width[VAE_MAX_LEVELS];
    int has_resample[VAE_MAX_LEVELS], temporal[VAE_MAX_LEVELS];
    int first; /* encoder: conv1 out (dim); decoder: conv1 out (middle width) */
    int io;    /* encoder: conv1 in channels; decoder: head out channels */
    int zc;    /* encoder: head out (2z); decoder: conv1 in (z) */
} side_info;

/* Names of the residual block j of level i and of its resample, for each side and version. */
static void rb_name(char *o, size_t n, int is22, int dec, int nrb, int i, int j) {
    if (is22)
        snprintf(o, n,
                 dec ? "decoder.upsamples.%d.upsamples.%d"
                     : "encoder.downsamples.%d.downsamples.%d",
                 i, j);
    else
        snprintf(o, n, dec ? "decoder.upsamples.%d" : "encoder.downsamples.%d", i * (nrb + 1) + j);
}

static int scan_side(const wan_keys *k, int is22, int dec, side_info *si, const char *path) {
    memset(si, 0, sizeof *si);
    const char *side = dec ? "decoder" : "encoder";
    const vae_store_tensor *c1 = wk(k, "%s.conv1.weight", side);
    if (!c1) return VAE_OK;
    si->present = 1;
    /* blocks per level (the decoder has num_res_blocks + 1) */
    int per = 0;
    char n[256];
    for (;;) {
        if (is22)
            rb_name(n, sizeof n, 1, dec, 0, 0, per);
        else
            snprintf(n, sizeof n, "%s.%s.%d", side, dec ? "upsamples" : "downsamples", per);
        if (!wk(k, "%s.residual.0.gamma", n)) break;
        if (++per > 64) break;
    }
    if (per < 1 + dec || per > 64)
        return vae_fail(VAE_EFORMAT, "%s: %s: cannot find the residual blocks of level 0", path,
                        side);
    si->nrb = per;
    for (int i = 0;; i++) {
        if (i >= VAE_MAX_LEVELS)
            return vae_fail(VAE_EUNSUPPORTED, "%s: %s has more than %d levels", path, side,
                            VAE_MAX_LEVELS);
        /* v2.1 flat index of the level start: i * (per + 1) */
        char r0[256], rs[256];
        if (is22) {
            rb_name(r0, sizeof r0, 1, dec, 0, i, 0);
            rb_name(rs, sizeof rs, 1, dec, 0, i, per);
        } else {
            snprintf(r0, sizeof r0, "%s.%s.%d", side, dec ? "upsamples" : "downsamples",
                     i * (per + 1));
            snprintf(rs, sizeof rs, "%s.%s.%d", side, dec ? "upsamples" : "downsamples",
                     i * (per + 1) + per);
        }
        const vae_store_tensor *w = wk(k, "%s.residual.2.weight", r0);
        if (!w) {
            if (i == 0)
                return vae_fail(VAE_EFORMAT, "%s: %s: missing %s.residual.2.weight", path, side,
                                r0);
            break;
        }
        si->width[i] = dim_at(w, 0);
        if (si->width[i] < 0)
            return vae_fail(VAE_EFORMAT, "%s: %s.residual.2.weight has a bad shape", path, r0);
        si->n_levels = i + 1;
        si->has_resample[i] = wk(k, "%s.resample.1.weight", rs) != NULL;
        si->temporal[i] = wk(k, "%s.time_conv.weight", rs) != NULL;
        if (!si->has_resample[i]) break;
    }
    for (int i = 0; i + 1 < si->n_levels; i++)
        if (!si->has_resample[i])
            return vae_fail(VAE_EFORMAT, "%s: %s level %d has no resample", path, side, i);
    if (si->has_resample[si->n_levels - 1]) /* the last level never resamples */
        return vae_fail(VAE_EFORMAT, "%s: %s: cannot find the last level after level %d", path,
                        side, si->n_levels - 1);
    si->first = dim_at(c1, 0);
    if (dec) {
        si->zc = dim_at(c1, 1);
        si->io = dim_at(wk(k, "decoder.head.2.weight"), 0);
    } else {
        si->io = dim_at(c1, 1);
        si->zc = dim_at(wk(k, "encoder.head.2.weight"), 0);
    }
    if (si->first < 0 || si->zc < 0 || si->io < 0)
        return vae_fail(VAE_EFORMAT, "%s: %s: conv1/head shapes not understood", path, side);
    return VAE_OK;
}

static int count_raw(const wan_keys *k, const char *fmt) {
    int n = 0;
    char name[256];
    for (; n < 64; n++) {
        snprintf(name, sizeof name, fmt, n);
        if (!raw(k, "%s", name)) break;
    }
    return n;
}

int wan_config_from_store(vae_config *cfg, const vae_store *s, const char *prefix,
                          vae_name_map_fn *map, int is22) {
    const char *path = s->path ? s->path : "checkpoint";
    const char *arch = is22 ? "Wan2.2" : "Wan2.1";
    int scheme = wan_scheme(s, prefix, is22);
    if (!scheme) return vae_fail(VAE_EFORMAT, "%s: not a %s VAE checkpoint", path, arch);
    wan_keys k = {s, prefix, NULL};
    if (scheme == WAN_SCHEME_DIFFUSERS) {
        int nrb = 0;
        if (is22) {
            nrb = count_raw(&k, "encoder.down_blocks.0.resnets.%d.norm1.gamma");
            if (!nrb) nrb = count_raw(&k, "decoder.up_blocks.0.resnets.%d.norm1.gamma") - 1;
        } else {
            nrb = count_raw(&k, "decoder.up_blocks.0.resnets.%d.norm1.gamma") - 1;
            if (nrb <= 0) nrb = count_raw(&k, "encoder.down_blocks.%d.norm1.gamma");
        }
        k.map = wan_diffusers_map(is22, nrb);
        if (!k.map)
            return vae_fail(VAE_EUNSUPPORTED,
                            "%s: diffusers %s VAE with %d residual blocks per level", path, arch,
                            nrb);
    }
    side_info e, d;
    int rc = scan_side(&k, is22, 0, &e, path);
    if (!rc) rc = scan_side(&k, is22, 1, &d, path);
    if (rc) return rc;
    if (!e.present && !d.present) return vae_fail(VAE_EFORMAT, "%s: no encoder or decoder", path);

    memset(cfg, 0, sizeof *cfg);
    vae_wan_config *w = &cfg->u.wan;
    w->has_encoder = e.present;
    w->has_decoder = d.present;
    int io = is22 ? 12 : 3;
    if (e.present) {
        if (e.io != io)
            return vae_fail(VAE_EFORMAT, "%s: encoder.conv1 takes %d channels, %s expects %d", path,
                            e.io, arch, io);
        if (e.zc % 2)
            return vae_fail(VAE_EFORMAT, "%s: encoder head has an odd channel count %d", path,
                            e.zc);
        w->dim = e.first;
        w->z_dim = e.zc / 2;
        w->n_levels = e.n_levels;
        w->num_res_blocks = e.nrb;
        for (int i = 0; i < e.n_levels; i++) {
            if (e.width[i] % w->dim)
                return vae_fail(VAE_EUNSUPPORTED,
                                "%s: encoder level %d width %d is not a multiple of dim %d", path,
                                i, e.width[i], w->dim);
            w->dim_mult[i] = e.width[i] / w->dim;
            if (i + 1 < e.n_levels) w->temperal_downsample[i] = e.temporal[i];
        }
    }
    if (d.present) {
        int n = d.n_levels;
        if (d.io != io)
            return vae_fail(VAE_EFORMAT, "%s: decoder head gives %d channels, %s expects %d", path,
                            d.io, arch, io);
        if (e.present) {
            int ok = n == w->n_levels && d.nrb == w->num_res_blocks + 1 && d.zc == w->z_dim;
            for (int i = 0; ok && i + 1 < n; i++)
                ok = d.temporal[i] == w->temperal_downsample[n - 2 - i];
            if (!ok)
                return vae_fail(VAE_EFORMAT, "%s: encoder and decoder configurations disagree",
                                path);
            int D = is22 ? d.width[n - 1] / (w->dim_mult[0] ? w->dim_mult[0] : 1) : w->dim;
            for (int i = 0; ok && i < n; i++)
                ok = d.width[i] == D * w->dim_mult[n - 1 - i];
            if (!ok || d.first != D * w->dim_mult[n - 1])
                return vae_fail(VAE_EFORMAT,
                                "%s: decoder widths do not match the encoder's dim_mult", path);
            w->dec_dim = D;
        } else {
            int D = d.first;
            for (int i = 0; i < n; i++)
                D = vae_gcd(D, d.width[i]);
            w->dec_dim = D;
            w->dim = is22 ? 0 : D;
            w->z_dim = d.zc;
            w->n_levels = n;
            w->num_res_blocks = d.nrb - 1;
            for (int i = 0; i < n; i++)
                w->dim_mult[n - 1 - i] = d.width[i] / D;
            for (int i = 0; i + 1 < n; i++)
                w->temperal_downsample[n - 2 - i] = d.temporal[i];
        }
    } else {
        w->dec_dim = is22 ? 0 : w->dim;
    }
    if (w->z_dim <= 0 || w->z_dim > 64)
        return vae_fail(VAE_EUNSUPPORTED, "%s: z_dim %d not supported", path, w->z_dim);
    if (!is22 && w->n_levels > 4)
        return vae_fail(VAE_EUNSUPPORTED, "%s: Wan2.1 VAE with %d levels", path, w->n_levels);
    if (scheme == WAN_SCHEME_DIFFUSERS) {
        vae_name_map_fn m = wan_diffusers_map(is22, w->num_res_blocks);
        if (!m)
            return vae_fail(VAE_EUNSUPPORTED, "%s: %d residual blocks per level", path,
                            w->num_res_blocks);
        *map = m;
    } else {
        *map = NULL;
    }
    wan_set_latent_norm(cfg, is22);
    cfg->arch = is22 ? &vae_arch_wan22 : &vae_arch_wan21;
    return VAE_OK;
}

/* ---- JSON configuration -------------------------------------------------------------------- */

static int json_int(const cJSON *j, const char *key, int *v, int lo, int hi) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!it) return VAE_OK;
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < lo ||
        it->valuedouble > hi)
        return vae_fail(VAE_EINVAL, "config: '%s' must be an integer in [%d, %d]", key, lo, hi);
    *v = (int)it->valuedouble;
    return VAE_OK;
}

int wan_config_from_json(vae_config *cfg, const struct cJSON *json, int is22) {
    /* When cfg was filled from a checkpoint of this architecture first (a file written by
     * `vae synth` carries its JSON configuration), keep which sides the file has. */
    int from_store = cfg->arch && strcmp(cfg->arch->name, is22 ? "wan2.2" : "wan2.1") == 0 &&
                     (cfg->u.wan.has_encoder || cfg->u.wan.has_decoder);
    int has_enc = from_store ? cfg->u.wan.has_encoder : 1;
    int has_dec = from_store ? cfg->u.wan.has_decoder : 1;
    memset(cfg, 0, sizeof *cfg);
    vae_wan_config *w = &cfg->u.wan;
    w->dim = is22 ? 160 : 96;
    w->dec_dim = is22 ? 256 : 96;
    w->z_dim = is22 ? 48 : 16;
    w->n_levels = 4;
    static const int mult[4] = {1, 2, 4, 4};
    for (int i = 0; i < 4; i++)
        w->dim_mult[i] = mult[i];
    w->num_res_blocks = 2;
    w->temperal_downsample[0] = 0;
    w->temperal_downsample[1] = 1;
    w->temperal_downsample[2] = 1;
    w->has_encoder = has_enc;
    w->has_decoder = has_dec;
    const cJSON *j = json;
    if (j) {
        if (!cJSON_IsObject(j)) return vae_fail(VAE_EINVAL, "config: expected a JSON object");
        static const char *const known[] = {"dim",         "dec_dim",        "z_dim",
                                            "dim_mult",    "num_res_blocks", "attn_scales",
                                            "temperal_downsample", "dropout", NULL};
        int rc = vae_config_check_keys(j, known, is22 ? "wan2.2" : "wan2.1");
        if (rc) return rc;
        if ((rc = json_int(j, "dim", &w->dim, 1, 65536))) return rc;
        if (!is22) w->dec_dim = w->dim;
        if ((rc = json_int(j, "dec_dim", &w->dec_dim, 1, 65536))) return rc;
        if (!is22 && w->dec_dim != w->dim)
            return vae_fail(VAE_EINVAL, "config: Wan2.1 has no separate dec_dim");
        if ((rc = json_int(j, "z_dim", &w->z_dim, 1, 64))) return rc;
        if ((rc = json_int(j, "num_res_blocks", &w->num_res_blocks, 1, 8))) return rc;
        const cJSON *dm = cJSON_GetObjectItemCaseSensitive(j, "dim_mult");
        if (dm) {
            int n = cJSON_IsArray(dm) ? cJSON_GetArraySize(dm) : -1;
            if (n < 1 || n > VAE_MAX_LEVELS)
                return vae_fail(VAE_EINVAL, "config: 'dim_mult' must be an array of 1..%d integers",
                                VAE_MAX_LEVELS);
            w->n_levels = n;
            for (int i = 0; i < n; i++) {
                const cJSON *v = cJSON_GetArrayItem(dm, i);
                if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
                    v->valuedouble < 1 || v->valuedouble > 64)
                    return vae_fail(VAE_EINVAL,
                                    "config: 'dim_mult' entries must be integers in [1, 64]");
                w->dim_mult[i] = (int)v->valuedouble;
            }
        }
        const cJSON *td = cJSON_GetObjectItemCaseSensitive(j, "temperal_downsample");
        if (td) {
            int n = cJSON_IsArray(td) ? cJSON_GetArraySize(td) : -1;
            if (n != w->n_levels - 1)
                return vae_fail(
                    VAE_EINVAL,
                    "config: 'temperal_downsample' must have %d entries (len(dim_mult) - 1)",
                    w->n_levels - 1);
            for (int i = 0; i < n; i++) {
                const cJSON *v = cJSON_GetArrayItem(td, i);
                if (cJSON_IsBool(v))
                    w->temperal_downsample[i] = cJSON_IsTrue(v);
                else if (cJSON_IsNumber(v))
                    w->temperal_downsample[i] = v->valuedouble != 0;
                else
                    return vae_fail(VAE_EINVAL,
                                    "config: 'temperal_downsample' entries must be booleans");
            }
        } else if (w->n_levels != 4) {
            return vae_fail(
                VAE_EINVAL,
                "config: 'temperal_downsample' is required when dim_mult has %d entries",
                w->n_levels);
        }
        const cJSON *as = cJSON_GetObjectItemCaseSensitive(j, "attn_scales");
        if (as && !cJSON_IsNull(as)) {
            if (!cJSON_IsArray(as))
                return vae_fail(VAE_EINVAL, "config: 'attn_scales' must be an array");
            if (cJSON_GetArraySize(as) > 0)
                return vae_fail(
                    VAE_EUNSUPPORTED,
                    "config: attention at non-middle scales (attn_scales) is not supported");
        }
    }
    if (w->n_levels < 2) return vae_fail(VAE_EUNSUPPORTED, "config: at least 2 levels are needed");
    if (!is22 && w->n_levels > 4)
        return vae_fail(VAE_EUNSUPPORTED, "config: Wan2.1 VAE with %d levels", w->n_levels);
    if (!is22) {
        for (int i = 1; i < w->n_levels; i++)
            if ((w->dim * w->dim_mult[w->n_levels - i]) % 2)
                return vae_fail(VAE_EINVAL, "config: decoder widths must be even");
    }
    wan_set_latent_norm(cfg, is22);
    cfg->arch = is22 ? &vae_arch_wan22 : &vae_arch_wan21;
    return VAE_OK;
}

void wan_describe(const vae_config *cfg, vae_strbuf *json, int is22) {
    const vae_wan_config *w = &cfg->u.wan;
    vae_strbuf_printf(json, "{");
    if (w->has_encoder || !is22) vae_strbuf_printf(json, "\"dim\": %d, ", w->dim);
    if (is22 && w->has_decoder) vae_strbuf_printf(json, "\"dec_dim\": %d, ", w->dec_dim);
    vae_strbuf_printf(json, "\"z_dim\": %d, \"dim_mult\": [", w->z_dim);
    for (int i = 0; i < w->n_levels; i++)
        vae_strbuf_printf(json, "%s%d", i ? ", " : "", w->dim_mult[i]);
    vae_strbuf_printf(json,
                      "], \"num_res_blocks\": %d, \"attn_scales\": [], \"temperal_downsample\": [",
                      w->num_res_blocks);
    for (int i = 0; i + 1 < w->n_levels; i++)
        vae_strbuf_printf(json, "%s%s", i ? ", " : "",
                          w->temperal_downsample[i] ? "true" : "false");
    vae_strbuf_printf(json, "], \"dropout\": 0.0}");
}
