/* safetensors.c -- reader and writer of the safetensors format.
 *
 * Layout: u64 little-endian N, then N bytes of JSON {"name": {"dtype": "F32", "shape": [..],
 * "data_offsets": [begin, end]}, ..., "__metadata__": {..}}, then the data region; offsets are
 * relative to the start of the data region. */
#include "formats/store.h"

#include "core/core.h"
#include "core/dtype.h"
#include "formats/limits.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rd_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Storage dtype from its safetensors name; *elsize = bytes per element (0 = unknown). */
static vae_storage_type dtype_from_name(const char *d, size_t *elsize) {
    static const struct { const char *name; vae_storage_type t; size_t size; } tab[] = {
        {"F32", VAE_ST_F32, 4},          {"F16", VAE_ST_F16, 2},         {"BF16", VAE_ST_BF16, 2},
        {"F64", VAE_ST_F64, 8},          {"F8_E4M3", VAE_ST_F8_E4M3, 1}, {"F8_E5M2", VAE_ST_F8_E5M2, 1},
        {"I64", VAE_ST_I64, 8},          {"I32", VAE_ST_I32, 4},         {"I16", VAE_ST_OTHER, 2},
        {"U16", VAE_ST_OTHER, 2},        {"I8", VAE_ST_OTHER, 1},        {"U8", VAE_ST_OTHER, 1},
        {"BOOL", VAE_ST_OTHER, 1},       {"U32", VAE_ST_OTHER, 4},       {"U64", VAE_ST_OTHER, 8},
        {"F8_E8M0", VAE_ST_OTHER, 1},    {"C64", VAE_ST_OTHER, 8},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(d, tab[i].name)) {
            *elsize = tab[i].size;
            return tab[i].t;
        }
    *elsize = 0;
    return VAE_ST_OTHER;
}

/* A JSON number that is an exact non-negative integer below 2^53 (what safetensors writes). */
static int json_u64(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return -1;
    *out = (uint64_t)d;
    return 0;
}

int vae_safetensors_parse(vae_store *s) {
    const uint8_t *m = s->map;
    const char *path = s->path;
    if (s->map_size < 8) return vae_fail(VAE_EFORMAT, "%s: safetensors file shorter than 8 bytes", path);
    uint64_t hlen = rd_u64(m);
    if (hlen < 2 || hlen > s->map_size - 8)
        return vae_fail(VAE_EFORMAT, "%s: safetensors header length %llu does not fit in the %zu-byte file",
                        path, (unsigned long long)hlen, s->map_size);
    /* cJSON needs ~30x the header's bytes: a bound like the reference implementation's (limits.h). */
    if (hlen > VAE_SAFETENSORS_MAX_HEADER)
        return vae_fail(VAE_EUNSUPPORTED, "%s: safetensors header of %llu bytes (at most %llu MiB)", path,
                        (unsigned long long)hlen, (unsigned long long)(VAE_SAFETENSORS_MAX_HEADER >> 20));
    const char *hdr = (const char *)m + 8;
    const uint8_t *base = m + 8 + hlen;
    uint64_t data_size = s->map_size - 8 - hlen;

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        size_t at = root ? 0 : (size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - hdr : 0);
        cJSON_Delete(root);
        return vae_fail(VAE_EFORMAT, "%s: safetensors header is not a valid JSON object (error near byte %zu of %llu)",
                        path, at, (unsigned long long)hlen);
    }
    /* The header may be padded with spaces (writers align the data region to 8 bytes). */
    for (const char *q = end; q && q < hdr + hlen; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r' && *q != 0) {
            cJSON_Delete(root);
            return vae_fail(VAE_EFORMAT, "%s: unexpected bytes after the safetensors JSON header", path);
        }

    int rc = VAE_OK, count = cJSON_GetArraySize(root);
    vae_store_span *spans = vae_malloc((size_t)(count ? count : 1) * sizeof *spans);
    int nspans = 0;
    if (!spans) {
        cJSON_Delete(root);
        return vae_fail(VAE_ENOMEM, "%s: out of memory", path);
    }
    for (const cJSON *e = root->child; e && rc == VAE_OK; e = e->next) {
        const char *name = e->string ? e->string : "";
        if (!strcmp(name, "__metadata__")) {
            /* string -> string by the format; other values are ignored rather than refused */
            for (const cJSON *m = cJSON_IsObject(e) ? e->child : NULL; m && rc == VAE_OK; m = m->next)
                if (cJSON_IsString(m) && m->string) rc = vae_store_add_metadata(s, m->string, m->valuestring);
            continue;
        }
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) ||
            cJSON_GetArraySize(off) != 2) {
            rc = vae_fail(VAE_EFORMAT, "%s: tensor '%s': header entry needs \"dtype\" (string), \"shape\" "
                          "(array) and \"data_offsets\" ([begin, end])", path, name);
            break;
        }
        int ndim = cJSON_GetArraySize(sh);
        if (ndim > VAE_MAX_DIMS) {
            rc = vae_fail(VAE_EUNSUPPORTED, "%s: tensor '%s' has %d dimensions (at most %d supported)",
                          path, name, ndim, VAE_MAX_DIMS);
            break;
        }
        int64_t shape[VAE_MAX_DIMS];
        int d = 0;
        for (const cJSON *v = sh->child; v; v = v->next, d++) {
            uint64_t x;
            if (json_u64(v, &x) != 0) {
                rc = vae_fail(VAE_EFORMAT, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, d);
                break;
            }
            shape[d] = (int64_t)x;
        }
        if (rc != VAE_OK) break;
        uint64_t b, en;
        if (json_u64(off->child, &b) != 0 || json_u64(off->child->next, &en) != 0 || b > en || en > data_size) {
            rc = vae_fail(VAE_EFORMAT, "%s: tensor '%s': data_offsets are invalid or beyond the %llu-byte data "
                          "region (file truncated?)", path, name, (unsigned long long)data_size);
            break;
        }
        size_t elsize;
        vae_storage_type t = dtype_from_name(dt->valuestring, &elsize);
        int64_t numel;
        if (t == VAE_ST_OTHER && elsize && vae_shape_checked_numel(shape, ndim, &numel) == 0 &&
            ((uint64_t)numel > UINT64_MAX / elsize || (uint64_t)numel * elsize != en - b)) {
            rc = vae_fail(VAE_EFORMAT, "%s: tensor '%s' (%s) has %llu bytes, shape needs a different size", path,
                          name, dt->valuestring, (unsigned long long)(en - b));
            break;
        }
        /* An unknown dtype has no size to check the shape against, but no element takes less
         * than a bit: without this a 4-byte tensor could claim 2^40 elements. */
        if (!elsize && (vae_shape_checked_numel(shape, ndim, &numel) != 0 || (uint64_t)numel > 8 * (en - b))) {
            rc = vae_fail(VAE_EFORMAT, "%s: tensor '%s' has unknown dtype '%.60s' and a shape of more elements than "
                          "the bits of its %llu bytes", path, name, dt->valuestring, (unsigned long long)(en - b));
            break;
        }
        rc = vae_store_add(s, name, strlen(name), t, ndim, shape, base + b, (size_t)(en - b));
        spans[nspans].begin = b;
        spans[nspans].end = en;
        spans[nspans].idx = s->n - 1;
        nspans++;
    }
    if (rc == VAE_OK) rc = vae_store_check_overlap(s, spans, (size_t)nspans, "data");
    vae_free(spans);
    cJSON_Delete(root);
    return rc;
}

/* ---- writer ---- */

typedef struct {
    const vae_out_tensor *t;
    int n;
    vae_storage_type dtype;
    const char *header;
    size_t header_len; /* padded to a multiple of 8 */
} write_ctx;

static int write_body(void *file, void *user) {
    FILE *f = file;
    write_ctx *c = user;
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)c->header_len >> (8 * i));
    if (fwrite(len, 1, 8, f) != 8) return vae_fail(VAE_EIO, "safetensors: write failed");
    size_t hl = strlen(c->header);
    if (fwrite(c->header, 1, hl, f) != hl) return vae_fail(VAE_EIO, "safetensors: write failed");
    for (size_t i = hl; i < c->header_len; i++) fputc(' ', f);
    /* Convert in chunks so that memory stays small for large tensors. */
    enum { CHUNK = 4096 };
    uint8_t buf[CHUNK * 4];
    for (int k = 0; k < c->n; k++) {
        int64_t numel = vae_shape_numel(c->t[k].shape, c->t[k].ndim);
        const float *src = c->t[k].data;
        for (int64_t i = 0; i < numel; i += CHUNK) {
            size_t m = (size_t)(numel - i < CHUNK ? numel - i : CHUNK), bytes;
            if (c->dtype == VAE_ST_F32) {
                memcpy(buf, src + i, m * 4);
                bytes = m * 4;
            } else {
                for (size_t j = 0; j < m; j++) {
                    uint16_t h = c->dtype == VAE_ST_F16 ? vae_f32_to_f16(src[i + (int64_t)j])
                                                        : vae_f32_to_bf16(src[i + (int64_t)j]);
                    memcpy(buf + 2 * j, &h, 2);
                }
                bytes = m * 2;
            }
            if (fwrite(buf, 1, bytes, f) != bytes) return vae_fail(VAE_EIO, "safetensors: write failed");
        }
    }
    return VAE_OK;
}

int vae_safetensors_write(const char *path, const vae_out_tensor *tensors, int n, vae_storage_type dtype) {
    return vae_safetensors_write_meta(path, tensors, n, dtype, NULL, NULL, 0);
}

int vae_safetensors_write_meta(const char *path, const vae_out_tensor *tensors, int n, vae_storage_type dtype,
                               const char *const *keys, const char *const *values, int n_meta) {
    if (!path || n < 0 || (n > 0 && !tensors) || n_meta < 0 || (n_meta > 0 && (!keys || !values)))
        return vae_fail(VAE_EINVAL, "%s: vae_safetensors_write: invalid arguments", path ? path : "(null)");
    for (int i = 0; i < n_meta; i++)
        if (!keys[i] || !values[i])
            return vae_fail(VAE_EINVAL, "%s: metadata entry %d has a NULL key or value", path, i);
    if (dtype != VAE_ST_F32 && dtype != VAE_ST_F16 && dtype != VAE_ST_BF16)
        return vae_fail(VAE_EINVAL, "%s: safetensors output dtype must be F32, F16 or BF16, not %s", path,
                        vae_storage_type_name(dtype));
    size_t es = vae_storage_type_size(dtype);
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject();
    int rc = VAE_OK;
    /* "format": "pt" as torch's writer puts it (some loaders check it), unless the caller sets it */
    int ok = root && meta;
    for (int i = 0; ok && i < n_meta; i++) {
        cJSON_DeleteItemFromObjectCaseSensitive(meta, keys[i]); /* the last value of a key wins */
        ok = cJSON_AddStringToObject(meta, keys[i], values[i]) != NULL;
    }
    if (ok && !cJSON_GetObjectItemCaseSensitive(meta, "format")) ok = cJSON_AddStringToObject(meta, "format", "pt") != NULL;
    if (!ok) {
        cJSON_Delete(root);
        cJSON_Delete(meta);
        return vae_fail(VAE_ENOMEM, "%s: out of memory", path);
    }
    cJSON_AddItemToObject(root, "__metadata__", meta);
    uint64_t offset = 0;
    for (int k = 0; k < n && rc == VAE_OK; k++) {
        const vae_out_tensor *t = &tensors[k];
        int64_t numel;
        if (!t->name || !strcmp(t->name, "__metadata__") || t->ndim < 0 || t->ndim > VAE_MAX_DIMS ||
            vae_shape_checked_numel(t->shape, t->ndim, &numel) != 0 || (numel > 0 && !t->data)) {
            rc = vae_fail(VAE_EINVAL, "%s: tensor %d ('%s') has an invalid name, shape or data", path, k,
                          t->name ? t->name : "(null)");
            break;
        }
        if (cJSON_GetObjectItemCaseSensitive(root, t->name)) {
            rc = vae_fail(VAE_EINVAL, "%s: duplicate tensor name '%s'", path, t->name);
            break;
        }
        if ((uint64_t)numel > (UINT64_C(1) << 50) / es) {
            rc = vae_fail(VAE_EINVAL, "%s: tensor '%s' is too large", path, t->name);
            break;
        }
        uint64_t nb = (uint64_t)numel * es;
        cJSON *e = cJSON_CreateObject(), *sh = cJSON_CreateArray(), *off = cJSON_CreateArray();
        int good = e && sh && off && cJSON_AddStringToObject(e, "dtype", vae_storage_type_name(dtype));
        for (int d = 0; good && d < t->ndim; d++) good = cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
        good = good && cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset)) &&
             cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(offset + nb)));
        if (!good) {
            cJSON_Delete(e);
            cJSON_Delete(sh);
            cJSON_Delete(off);
            rc = vae_fail(VAE_ENOMEM, "%s: out of memory", path);
            break;
        }
        cJSON_AddItemToObject(e, "shape", sh);
        cJSON_AddItemToObject(e, "data_offsets", off);
        cJSON_AddItemToObject(root, t->name, e);
        offset += nb;
    }
    char *hdr = rc == VAE_OK ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (rc != VAE_OK) return rc;
    if (!hdr) return vae_fail(VAE_ENOMEM, "%s: out of memory", path);
    write_ctx c = {tensors, n, dtype, hdr, (strlen(hdr) + 7) / 8 * 8};
    rc = vae_write_atomic(path, write_body, &c);
    cJSON_free(hdr);
    return rc;
}
