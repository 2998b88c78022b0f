/* model.c -- opening checkpoints: format, prefix, architecture, configuration, programs. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"

void vae_model_options_default(vae_model_options *opts) { memset(opts, 0, sizeof *opts); }

/* Candidate prefixes: "" and whatever stands before a key that every supported layout has. */
static int prefix_candidates(const vae_store *s, char cands[][128], int max) {
    static const char *const anchors[] = {"decoder.conv1.weight", "encoder.conv1.weight",
                                          "decoder.conv_in.weight", "encoder.conv_in.weight",
                                          "decoder.conv_out.weight", "encoder.conv_out.weight"};
    int n = 0;
    cands[n++][0] = 0;
    for (int i = 0; i < s->n && n < max; i++) {
        const char *name = s->tensors[i].name;
        size_t len = strlen(name);
        for (size_t a = 0; a < sizeof anchors / sizeof *anchors; a++) {
            size_t al = strlen(anchors[a]);
            if (len <= al || strcmp(name + len - al, anchors[a]) != 0) continue;
            size_t pl = len - al;
            if (name[pl - 1] != '.' || pl >= 128) continue;
            int dup = 0;
            for (int k = 0; k < n; k++) dup |= strncmp(cands[k], name, pl) == 0 && !cands[k][pl];
            if (!dup) {
                memcpy(cands[n], name, pl);
                cands[n++][pl] = 0;
            }
        }
    }
    return n;
}

static int detect(const vae_store *s, const vae_model_options *o, const vae_arch **arch,
                  char *prefix) {
    char cands[16][128];
    int n = 1;
    if (o->prefix) {
        snprintf(cands[0], sizeof cands[0], "%s", o->prefix);
    } else {
        n = prefix_candidates(s, cands, 16);
    }
    for (int c = 0; c < n; c++) {
        for (int a = 0; vae_archs[a]; a++) {
            if (o->arch && strcmp(o->arch, vae_archs[a]->name) != 0) continue;
            if (vae_archs[a]->detect(s, cands[c])) {
                *arch = vae_archs[a];
                strcpy(prefix, cands[c]);
                return VAE_OK;
            }
        }
    }
    if (o->arch && !vae_arch_by_name(o->arch))
        return vae_fail(VAE_EINVAL,
                        "unknown architecture '%s' (known: wan2.1, wan2.2, seedvr2, taesd, taehv)",
                        o->arch);
    return vae_fail(VAE_EUNSUPPORTED,
                    "%s: no supported VAE found among its %d tensors (first: '%s'); expected the "
                    "keys of a Wan2.1, Wan2.2, SeedVR2, TAESD or TAEHV checkpoint%s%s",
                    s->path, s->n, s->n ? s->tensors[0].name : "", o->prefix ? " under prefix " : "",
                    o->prefix ? o->prefix : "");
}

static char *describe_dtypes(const vae_store *s) {
    int seen[VAE_ST_OTHER + 1] = {0};
    vae_strbuf b = {0};
    for (int i = 0; i < s->n; i++) seen[s->tensors[i].type] = 1;
    for (int t = 0; t <= VAE_ST_OTHER; t++)
        if (seen[t]) vae_strbuf_printf(&b, "%s%s", b.len ? "," : "", vae_storage_type_name(t));
    return b.s ? b.s : vae_strdup("");
}

/* Builds programs from a builder (file or synth) and fills the descriptive fields. */
static int model_build(vae_model *m, vae_builder *b) {
    const vae_arch *arch = m->cfg.arch;
    int rc = arch->build(b, &m->cfg, &m->enc, &m->dec);
    if (rc == VAE_OK) rc = vb_status(b);
    if (rc == VAE_OK) rc = vb_check_all_used(b, arch->name);
    if (rc) return rc;
    vae_program_mark_fp8(&m->enc);
    vae_program_mark_fp8(&m->dec);
    m->weights = vb_take_arena(b);
    m->params = vb_param_count(b);
    m->tensors = vb_tensor_count(b);
    vae_strbuf js = {0};
    arch->describe(&m->cfg, &js);
    m->config_json = js.s ? js.s : vae_strdup("{}");
    m->normalisation = vae_strdup(m->cfg.norm_desc ? m->cfg.norm_desc : "none");
    if (!m->weights || !m->config_json || !m->normalisation)
        return vae_fail(VAE_ENOMEM, "out of memory");
    return VAE_OK;
}

/* Replaces the keys given in `text` in the detected configuration (the others keep their
 * detected values, not the released ones). */
static int apply_config_json(vae_config *cfg, const char *text, const char *path, const char *what) {
    cJSON *js = cJSON_Parse(text);
    if (!js || !cJSON_IsObject(js)) {
        cJSON_Delete(js);
        return vae_fail(VAE_EINVAL, "%s: %s is not a JSON object: %s", path, what, text);
    }
    vae_strbuf cur = {0};
    cfg->arch->describe(cfg, &cur);
    cJSON *merged = cur.s ? cJSON_Parse(cur.s) : NULL;
    vae_strbuf_free(&cur);
    if (!merged) merged = cJSON_CreateObject();
    for (cJSON *it = js->child; it; it = it->next) {
        cJSON *copy = cJSON_Duplicate(it, 1);
        if (!copy) break;
        if (cJSON_GetObjectItemCaseSensitive(merged, it->string))
            cJSON_ReplaceItemInObjectCaseSensitive(merged, it->string, copy);
        else
            cJSON_AddItemToObject(merged, it->string, copy);
    }
    int rc = cfg->arch->config_from_json(cfg, merged);
    cJSON_Delete(merged);
    cJSON_Delete(js);
    return rc;
}

/* Detects, configures and builds a model from an open store (a file's or the caller's). */
static int model_from_store(vae_model *m, const vae_store *s, const vae_model_options *opts) {
    char prefix[128] = "";
    vae_builder *b = NULL;
    m->path = vae_strdup(s->path);
    m->file_dtypes = describe_dtypes(s);
    int rc = detect(s, opts, &m->cfg.arch, prefix);
    if (rc) return rc;
    vae_name_map_fn map = NULL;
    /* `vae synth` records its configuration: things shapes cannot tell (GroupNorm groups). */
    const char *meta_arch = vae_store_metadata(s, "vae.arch");
    const char *meta_cfg = vae_store_metadata(s, "vae.config");
    if ((rc = m->cfg.arch->config_from_store(&m->cfg, s, prefix, &map))) return rc;
    if (meta_arch && meta_cfg && strcmp(meta_arch, m->cfg.arch->name) == 0 &&
        (rc = apply_config_json(&m->cfg, meta_cfg, s->path, "metadata vae.config")))
        return rc;
    if (opts->config_json &&
        (rc = apply_config_json(&m->cfg, opts->config_json, s->path, "the configuration override")))
        return rc;
    if ((rc = vae_builder_create_file(&b, s, prefix, map)) == VAE_OK) rc = model_build(m, b);
    vae_builder_free(b);
    return rc;
}

/* A model held by its opener alone (vae_model_free lets go; each session holds it too). */
static vae_model *model_new(void) {
    vae_model *m = vae_calloc(1, sizeof(vae_model));
    if (m) atomic_init(&m->holders, 1);
    return m;
}

static int model_finish(vae_model **out, vae_model *m, vae_store *s, const vae_model_options *opts) {
    vae_model_options defaults;
    if (!opts) {
        vae_model_options_default(&defaults);
        opts = &defaults;
    }
    int rc = m ? model_from_store(m, s, opts) : vae_fail(VAE_ENOMEM, "out of memory");
    vae_store_free(s);
    if (rc) {
        vae_model_free(m);
        return rc;
    }
    VAE_INFO("%s: %s, %lld parameters in %d tensors", m->path, m->cfg.arch->name,
             (long long)m->params, m->tensors);
    *out = m;
    return VAE_OK;
}

int vae_model_open(vae_model **out, const char *path, const vae_model_options *opts) {
    vae_error_clear();
    if (!out || !path) return vae_fail(VAE_EINVAL, "vae_model_open: NULL argument");
    *out = NULL;
    vae_store *s = NULL;
    int rc = vae_store_open(&s, path);
    return rc ? rc : model_finish(out, model_new(), s, opts);
}

/* Tensor i of the caller's list into the store: borrowed when dense, else gathered densely. */
static int store_add_user(vae_store *s, const char *name, const vae_tensor *t) {
    static const vae_storage_type st[] = {[VAE_DTYPE_F32] = VAE_ST_F32, [VAE_DTYPE_F16] = VAE_ST_F16,
                                          [VAE_DTYPE_BF16] = VAE_ST_BF16};
    char what[160];
    snprintf(what, sizeof what, "vae_model_open_tensors: tensor '%s'", name ? name : "(null)");
    if (!name) return vae_fail(VAE_EINVAL, "%s: NULL name", what);
    int rc = vae_tensor_check(t, what, 0, NULL);
    if (rc) return rc;
    if (t->device != VAE_DEVICE_CPU)
        return vae_fail(VAE_EINVAL, "%s: in device memory, expected a host tensor", what);
    int64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) numel *= t->shape[i];
    const int dense = vae_tensor_is_dense(t); /* else (broadcasts too) gathered below */
    const size_t es = t->dtype == VAE_DTYPE_F32 ? 4 : 2, bytes = (size_t)numel * es;
    const void *data = t->data;
    if (!dense) { /* gathered into a dense copy owned by the store */
        char *d = vae_store_owned_alloc(s, bytes ? bytes : 1);
        if (!d) return vae_fail(VAE_ENOMEM, "out of memory copying tensor '%s'", name);
        int64_t idx[8] = {0};
        for (int64_t k = 0; k < numel; k++) {
            int64_t off = 0;
            for (int i = 0; i < t->ndim; i++) off += idx[i] * t->strides[i];
            memcpy(d + k * es, (const char *)t->data + off * es, es);
            for (int i = t->ndim - 1; i >= 0 && ++idx[i] == t->shape[i]; i--) idx[i] = 0;
        }
        data = d;
    }
    return vae_store_add(s, name, strlen(name), st[t->dtype], t->ndim, t->shape, data, bytes);
}

int vae_model_open_tensors(vae_model **out, const char *const *names, const vae_tensor *tensors,
                           int n, const vae_model_options *opts) {
    vae_error_clear();
    if (!out || (n > 0 && (!names || !tensors)) || n < 0)
        return vae_fail(VAE_EINVAL, "vae_model_open_tensors: NULL argument or negative count");
    *out = NULL;
    vae_store *s = NULL;
    int rc = vae_store_new(&s, "(tensors)");
    for (int i = 0; rc == VAE_OK && i < n; i++) rc = store_add_user(s, names[i], &tensors[i]);
    if (rc == VAE_OK) rc = vae_store_index(s);
    if (rc) {
        vae_store_free(s);
        return rc;
    }
    return model_finish(out, model_new(), s, opts);
}

void vae_model_release(const vae_model *model) {
    vae_model *m = (vae_model *)model; /* a session's const view of what it co-owns */
    if (!m || atomic_fetch_sub(&m->holders, 1) != 1) return;
    vae_program_free(&m->enc);
    vae_program_free(&m->dec);
    vae_arena_free(m->weights);
    vae_free(m->path);
    vae_free(m->config_json);
    vae_free(m->file_dtypes);
    vae_free(m->normalisation);
    vae_free(m);
}

void vae_model_hold(const vae_model *m) {
    atomic_fetch_add(&((vae_model *)m)->holders, 1);
}

void vae_model_free(vae_model *m) {
    vae_model_release(m);
}

int vae_model_get_info(const vae_model *m, vae_model_info *info) {
    vae_error_clear();
    if (!m || !info) return vae_fail(VAE_EINVAL, "vae_model_get_info: NULL argument");
    const vae_arch *a = m->cfg.arch;
    memset(info, 0, sizeof *info);
    info->arch = a->name;
    info->config_json = m->config_json;
    info->can_encode = m->enc.n_ops > 0;
    info->can_decode = m->dec.n_ops > 0;
    info->image_channels = 3;
    info->latent_channels = m->dec.n_ops ? m->dec.in_channels : m->enc.out_channels;
    info->spatial_factor = vae_config_spatial_factor(&m->cfg);
    info->temporal_factor = vae_config_temporal_factor(&m->cfg);
    info->is_video = a->is_video;
    info->image_min = a->image_min;
    info->image_max = a->image_max;
    info->param_count = m->params;
    info->tensor_count = m->tensors;
    info->file_dtypes = m->file_dtypes ? m->file_dtypes : "";
    info->normalisation = m->normalisation;
    return VAE_OK;
}

/* ---- synthetic weights ---------------------------------------------------------------------- */
/* Builds a model of arch with synthetic weights; the builder (which recorded every tensor) is
 * returned too when keep is not NULL. */
static int synth_build(vae_model **out, const char *arch_name, const char *config_json,
                       vae_builder **keep) {
    *out = NULL;
    if (!arch_name) return vae_fail(VAE_EINVAL, "synth: NULL architecture");
    const vae_arch *arch = vae_arch_by_name(arch_name);
    if (!arch || arch == &vae_arch_taesd)
        return vae_fail(VAE_EINVAL, "synth: unknown architecture '%s' (expected wan2.1, wan2.2, "
                                    "seedvr2 or taehv)", arch_name);
    cJSON *js = NULL;
    if (config_json && *config_json) {
        js = cJSON_Parse(config_json);
        if (!js || !cJSON_IsObject(js)) {
            cJSON_Delete(js);
            return vae_fail(VAE_EINVAL, "synth: the configuration is not a JSON object: %s",
                            config_json);
        }
    }
    vae_model *m = model_new();
    vae_builder *b = NULL;
    int rc = m ? VAE_OK : vae_fail(VAE_ENOMEM, "out of memory");
    if (rc == VAE_OK) {
        m->cfg.arch = arch;
        rc = arch->config_from_json(&m->cfg, js);
    }
    cJSON_Delete(js);
    if (rc == VAE_OK) rc = vae_builder_create_synth(&b);
    if (rc == VAE_OK) {
        m->path = vae_strdup("(synthetic)");
        m->file_dtypes = vae_strdup("F32");
        rc = model_build(m, b);
    }
    if (rc || !keep) vae_builder_free(b);
    if (rc) {
        vae_model_free(m);
        return rc;
    }
    if (keep) *keep = b;
    *out = m;
    return VAE_OK;
}

int vae_model_synth(vae_model **out, const char *arch, const char *config_json) {
    vae_error_clear();
    if (!out) return vae_fail(VAE_EINVAL, "vae_model_synth: NULL argument");
    return synth_build(out, arch, config_json, NULL);
}

int vae_synth_checkpoint(const char *arch_name, const char *config_json, const char *path) {
    vae_error_clear();
    if (!path) return vae_fail(VAE_EINVAL, "vae_synth_checkpoint: NULL path");
    vae_model *m = NULL;
    vae_builder *b = NULL;
    int rc = synth_build(&m, arch_name, config_json, &b);
    if (rc) return rc;
    int n = vb_synth_count(b);
    vae_out_tensor *outs = vae_calloc((size_t)n + 1, sizeof *outs);
    if (!outs) rc = vae_fail(VAE_ENOMEM, "out of memory");
    for (int i = 0; rc == VAE_OK && i < n; i++) {
        const int64_t *shape;
        vb_synth_get(b, i, &outs[i].name, &outs[i].ndim, &shape, &outs[i].data);
        memcpy(outs[i].shape, shape, (size_t)outs[i].ndim * sizeof *shape);
    }
    const char *keys[] = {"vae.arch", "vae.config", "vae.weights"};
    const char *vals[] = {m->cfg.arch->name, m->config_json, "synthetic (fixtures rule)"};
    if (rc == VAE_OK) rc = vae_safetensors_write_meta(path, outs, n, VAE_ST_F32, keys, vals, 3);
    vae_free(outs);
    vae_builder_free(b);
    vae_model_free(m);
    return rc;
}

int vae_model_latent_norm(const vae_model *m, float *mean, float *std, int max) {
    if (!m || !mean || !std || max <= 0) return vae_fail(VAE_EINVAL, "vae_model_latent_norm: bad argument");
    int n = m->dec.n_ops ? m->dec.in_channels : m->enc.out_channels;
    if (n > max) n = max;
    for (int c = 0; c < n; c++) {
        int have = c < m->cfg.n_latent;
        mean[c] = have ? m->cfg.latent_mean[c] : 0.0f;
        std[c] = have ? m->cfg.latent_std[c] : 1.0f;
    }
    return n;
}
