/* tensor_io.c -- user tensors from and to files. */
#include <stdio.h>
#include <string.h>

#include "api/api.h"

int vae_tensor_load(const char *path, const char *name, vae_tensor *out) {
    vae_error_clear();
    if (!path || !out) return vae_fail(VAE_EINVAL, "vae_tensor_load: NULL argument");
    memset(out, 0, sizeof *out);
    vae_store *s;
    int rc = vae_store_open(&s, path);
    if (rc) return rc;
    const vae_store_tensor *t = NULL;
    if (name) {
        t = vae_store_find(s, name);
        if (!t) {
            vae_strbuf names = {0};
            for (int i = 0; i < s->n && i < 12; i++)
                vae_strbuf_printf(&names, "%s'%s'", i ? ", " : "", s->tensors[i].name);
            rc = vae_fail(VAE_EKEY, "%s: no tensor named '%s' (it has %d: %s%s)", path, name, s->n,
                          names.s ? names.s : "", s->n > 12 ? ", ..." : "");
            vae_strbuf_free(&names);
        }
    } else if (s->n != 1) {
        rc = vae_fail(VAE_EKEY, "%s: holds %d tensors; name one as %s:KEY", path, s->n, path);
    } else {
        t = &s->tensors[0];
    }
    /* The dtype before the buffer: a tensor we cannot convert must not cost numel * 4 bytes first
     * (an unknown dtype's shape is bounded only loosely by its bytes). */
    if (rc == VAE_OK && !vae_storage_type_size(t->type) && t->type != VAE_ST_Q8_0)
        rc = vae_fail(VAE_EDTYPE, "%s: tensor '%s' has storage type %s, not convertible to float32", path,
                      t->name, vae_storage_type_name(t->type));
    if (rc == VAE_OK) {
        int64_t n = vae_store_numel(t);
        out->data = vae_malloc((size_t)n * sizeof(float));
        if (!out->data) rc = vae_fail(VAE_ENOMEM, "%s: out of memory for tensor '%s'", path, t->name);
    }
    if (rc == VAE_OK) rc = vae_store_to_f32(s, t, out->data);
    if (rc == VAE_OK) {
        if (t->ndim > 8) {
            rc = vae_fail(VAE_ESHAPE, "%s: tensor '%s' has %d dimensions", path, t->name, t->ndim);
        } else {
            *out = vae_tensor_dense(t->ndim, t->shape, VAE_DTYPE_F32, out->data);
        }
    }
    if (rc) vae_tensor_free(out);
    vae_store_free(s);
    return rc;
}

int vae_tensor_save(const char *path, const char *const *names, const vae_tensor *tensors, int n) {
    vae_error_clear();
    if (!path || (n > 0 && (!names || !tensors)) || n < 0)
        return vae_fail(VAE_EINVAL, "vae_tensor_save: bad arguments");
    vae_out_tensor *o = vae_calloc((size_t)n + 1, sizeof *o);
    if (!o) return vae_fail(VAE_ENOMEM, "out of memory");
    int rc = VAE_OK;
    for (int i = 0; i < n && rc == VAE_OK; i++) {
        char what[160];
        snprintf(what, sizeof what, "vae_tensor_save: tensor '%s'", names[i] ? names[i] : "(null)");
        if (!names[i]) rc = vae_fail(VAE_EINVAL, "%s: NULL name", what);
        if (rc == VAE_OK) rc = vae_tensor_check(&tensors[i], what, 0, NULL);
        if (rc == VAE_OK && tensors[i].ndim > VAE_MAX_DIMS)
            rc = vae_fail(VAE_ESHAPE, "%s: %d dimensions, at most %d", what, tensors[i].ndim,
                          VAE_MAX_DIMS);
        if (rc == VAE_OK && (tensors[i].dtype != VAE_DTYPE_F32 ||
                             tensors[i].device != VAE_DEVICE_CPU || !vae_tensor_is_dense(&tensors[i])))
            rc = vae_fail(VAE_EINVAL, "%s: expected a dense float32 host tensor", what);
        if (rc) break;
        o[i].name = names[i];
        o[i].ndim = tensors[i].ndim;
        memcpy(o[i].shape, tensors[i].shape, (size_t)tensors[i].ndim * sizeof(int64_t));
        o[i].data = tensors[i].data;
    }
    if (rc == VAE_OK) rc = vae_safetensors_write(path, o, n, VAE_ST_F32);
    vae_free(o);
    return rc;
}
