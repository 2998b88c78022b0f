/* registry.c -- the architectures this build knows, in detection order; what they share. */
#include <cjson/cJSON.h>
#include <string.h>

#include "core/core.h"
#include "models/model.h"

/* TAESD's bare Sequential indices, TAEHV's encoder.N / decoder.N indices and SeedVR2's
 * diffusers-like names are the most specific keys, so they are tried before the Wan schemes (whose
 * keys are encoder.conv1 ...; TAEHV's decoder.22 / encoder.17 convs are in no other layout). Wan2.2 before 2.1 (2.2 keys nest one level deeper). */
const vae_arch *const vae_archs[] = {&vae_arch_taesd, &vae_arch_taehv, &vae_arch_seedvr2,
                                     &vae_arch_wan22, &vae_arch_wan21, NULL};

const vae_arch *vae_arch_by_name(const char *name) {
    for (int i = 0; vae_archs[i]; i++)
        if (strcmp(vae_archs[i]->name, name) == 0) return vae_archs[i];
    return NULL;
}

/* The factors follow the configuration: every level but the last halves the size (Wan2.2 also
 * patchifies by 2), and each temporal flag halves time. The arch's fields give the released ones. */
int vae_config_spatial_factor(const vae_config *cfg) {
    const vae_arch *a = cfg->arch;
    if (a == &vae_arch_wan21 || a == &vae_arch_wan22)
        return (a == &vae_arch_wan22 ? 2 : 1) << (cfg->u.wan.n_levels - 1);
    if (a == &vae_arch_seedvr2) return 1 << (cfg->u.seedvr2.n_levels - 1);
    if (a == &vae_arch_taehv) return a->spatial_factor * cfg->u.taehv.patch_size;
    return a->spatial_factor;
}

int vae_config_temporal_factor(const vae_config *cfg) {
    const vae_arch *a = cfg->arch;
    int f = 1;
    if (a == &vae_arch_wan21 || a == &vae_arch_wan22) {
        for (int i = 0; i < cfg->u.wan.n_levels - 1; i++) f <<= cfg->u.wan.temperal_downsample[i] ? 1 : 0;
        return f;
    }
    if (a == &vae_arch_seedvr2) {
        int n = cfg->u.seedvr2.temporal_scale_num, levels = cfg->u.seedvr2.n_levels - 1;
        return 1 << (n < levels ? n : levels);
    }
    if (a == &vae_arch_taehv) { /* the decoder's when there is one: T latents -> 1 + f (T - 1) */
        const vae_taehv_config *c = &cfg->u.taehv;
        const int *s = c->has_decoder ? c->dec_tgrow : c->enc_tpool;
        return s[0] * s[1] * s[2];
    }
    return a->temporal_factor;
}

int vae_config_check_keys(const cJSON *obj, const char *const *known, const char *arch) {
    for (const cJSON *it = obj ? obj->child : NULL; it; it = it->next) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++) ok = it->string && strcmp(it->string, known[i]) == 0;
        if (ok) continue;
        vae_strbuf list = {0};
        for (int i = 0; known[i]; i++) vae_strbuf_printf(&list, "%s%s", i ? ", " : "", known[i]);
        int rc = vae_fail(VAE_EINVAL, "%s config: unknown key '%s' (known: %s)", arch,
                          it->string ? it->string : "?", list.s ? list.s : "");
        vae_strbuf_free(&list);
        return rc;
    }
    return VAE_OK;
}
