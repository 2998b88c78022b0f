/* store.c -- opening a tensor file (format chosen by magic bytes), the name index, and conversion
 * of stored tensors to float32. The format readers live in safetensors.c, pth.c, gguf.c, npy.c. */
#define _POSIX_C_SOURCE 200809L
#include "formats/store.h"

#include "core/core.h"
#include "core/dtype.h"
#include "formats/limits.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h> /* close */

#include "platform/platform.h"

/* Private state behind vae_store.owned: owned heap blocks, the tensor array capacity and the
 * name index (tensor indices sorted by name, for binary search). */
typedef struct owned_block {
    struct owned_block *next;
    /* 16-byte aligned payload follows */
} owned_block;
#define OWNED_HDR 16

typedef struct store_priv {
    owned_block *blocks;
    int cap;
    int *sorted;
    char **meta; /* key, value, key, value, ... (safetensors __metadata__) */
    int n_meta, cap_meta;
    uint64_t name_bytes; /* of all tensor names, against VAE_STORE_MAX_NAME_BYTES */
} store_priv;

const char *vae_storage_type_name(vae_storage_type t) {
    switch (t) {
    case VAE_ST_F32: return "F32";
    case VAE_ST_F16: return "F16";
    case VAE_ST_BF16: return "BF16";
    case VAE_ST_F64: return "F64";
    case VAE_ST_F8_E4M3: return "F8_E4M3";
    case VAE_ST_F8_E5M2: return "F8_E5M2";
    case VAE_ST_Q8_0: return "Q8_0";
    case VAE_ST_I64: return "I64";
    case VAE_ST_I32: return "I32";
    default: return "OTHER";
    }
}

size_t vae_storage_type_size(vae_storage_type t) {
    switch (t) {
    case VAE_ST_F32: case VAE_ST_I32: return 4;
    case VAE_ST_F16: case VAE_ST_BF16: return 2;
    case VAE_ST_F64: case VAE_ST_I64: return 8;
    case VAE_ST_F8_E4M3: case VAE_ST_F8_E5M2: return 1;
    default: return 0;
    }
}

void *vae_store_owned_alloc(vae_store *s, size_t bytes) {
    store_priv *p = s->owned;
    if (bytes > SIZE_MAX - OWNED_HDR) return NULL;
    owned_block *b = vae_malloc(OWNED_HDR + bytes);
    if (!b) return NULL;
    b->next = p->blocks;
    p->blocks = b;
    return (char *)b + OWNED_HDR;
}

int vae_shape_checked_numel(const int64_t *shape, int ndim, int64_t *numel) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] != 0 && n > INT64_MAX / shape[i]) return -1;
        n *= shape[i];
    }
    *numel = n;
    return 0;
}

int vae_store_add(vae_store *s, const char *name, size_t name_len, vae_storage_type type,
                  int ndim, const int64_t *shape, const void *data, size_t nbytes) {
    store_priv *p = s->owned;
    char sh[160];
    int64_t numel;
    if (ndim < 0 || ndim > VAE_MAX_DIMS)
        return vae_fail(VAE_EFORMAT, "%s: tensor '%.*s' has %d dimensions (at most %d supported)",
                        s->path, (int)(name_len > 200 ? 200 : name_len), name, ndim, VAE_MAX_DIMS);
    if (memchr(name, 0, name_len))
        return vae_fail(VAE_EFORMAT, "%s: tensor name contains a NUL byte", s->path);
    if (vae_shape_checked_numel(shape, ndim, &numel) != 0)
        return vae_fail(VAE_EFORMAT, "%s: tensor '%.*s' has an invalid shape %s (negative or overflowing)",
                        s->path, (int)(name_len > 200 ? 200 : name_len), name,
                        vae_shape_str(shape, ndim, sh, sizeof sh));
    /* Expected byte count for the types whose layout we know. */
    size_t es = vae_storage_type_size(type);
    int known = es != 0 || type == VAE_ST_Q8_0;
    uint64_t expect = 0;
    if (type == VAE_ST_Q8_0) {
        int64_t inner = ndim ? shape[ndim - 1] : 1;
        if (inner % 32 != 0)
            return vae_fail(VAE_EFORMAT, "%s: Q8_0 tensor '%.*s' has innermost size %lld, not a multiple of 32",
                            s->path, (int)(name_len > 200 ? 200 : name_len), name, (long long)inner);
        expect = (uint64_t)(numel / 32) * 34u; /* numel < 2^63, so /32*34 fits in 64 bits */
    } else if (es) {
        if ((uint64_t)numel > UINT64_MAX / es)
            return vae_fail(VAE_EFORMAT, "%s: tensor '%.*s' is too large", s->path,
                            (int)(name_len > 200 ? 200 : name_len), name);
        expect = (uint64_t)numel * es;
    }
    if (known && expect != (uint64_t)nbytes)
        return vae_fail(VAE_EFORMAT, "%s: tensor '%.*s' %s %s needs %llu bytes but the file gives %llu",
                        s->path, (int)(name_len > 200 ? 200 : name_len), name,
                        vae_storage_type_name(type), vae_shape_str(shape, ndim, sh, sizeof sh),
                        (unsigned long long)expect, (unsigned long long)nbytes);
    /* Names are copied, and a pickle can make them repeat far beyond its own size (limits.h). */
    if (s->n >= VAE_STORE_MAX_TENSORS || p->name_bytes + name_len + 1 > VAE_STORE_MAX_NAME_BYTES)
        return vae_fail(VAE_EUNSUPPORTED, "%s: more than %d tensors or %llu MiB of tensor names (at tensor %d, '%.*s')",
                        s->path, VAE_STORE_MAX_TENSORS, (unsigned long long)(VAE_STORE_MAX_NAME_BYTES >> 20), s->n,
                        (int)(name_len > 80 ? 80 : name_len), name);
    p->name_bytes += name_len + 1;
    if (s->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 64;
        vae_store_tensor *t = vae_realloc(s->tensors, (size_t)cap * sizeof *t);
        if (!t) return vae_fail(VAE_ENOMEM, "%s: out of memory listing tensors", s->path);
        s->tensors = t;
        p->cap = cap;
    }
    vae_store_tensor *t = &s->tensors[s->n];
    memset(t, 0, sizeof *t);
    t->name = vae_malloc(name_len + 1);
    if (!t->name) return vae_fail(VAE_ENOMEM, "%s: out of memory listing tensors", s->path);
    memcpy(t->name, name, name_len);
    t->name[name_len] = 0;
    t->type = type;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->data = data;
    t->nbytes = nbytes;
    s->n++;
    return VAE_OK;
}

static int cmp_span(const void *a, const void *b) {
    const vae_store_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

int vae_store_check_overlap(const vae_store *s, vae_store_span *spans, size_t n, const char *what) {
    qsort(spans, n, sizeof *spans, cmp_span);
    uint64_t reach = 0; /* end of the furthest non-empty span so far */
    int last = -1;
    for (size_t i = 0; i < n; i++) {
        if (spans[i].end == spans[i].begin) continue; /* empty tensors share nothing */
        if (last >= 0 && spans[i].begin < reach)
            return vae_fail(VAE_EFORMAT, "%s: %s of tensors '%s' and '%s' overlap", s->path, what,
                            s->tensors[last].name, s->tensors[spans[i].idx].name);
        reach = spans[i].end;
        last = spans[i].idx;
    }
    return VAE_OK;
}

int vae_store_add_metadata(vae_store *s, const char *key, const char *value) {
    store_priv *p = s->owned;
    if (p->n_meta + 2 > p->cap_meta) {
        int cap = p->cap_meta ? p->cap_meta * 2 : 16;
        char **m = vae_realloc(p->meta, (size_t)cap * sizeof *m);
        if (!m) return vae_fail(VAE_ENOMEM, "%s: out of memory reading metadata", s->path);
        p->meta = m;
        p->cap_meta = cap;
    }
    char *k = vae_strdup(key), *v = vae_strdup(value);
    if (!k || !v) {
        vae_free(k);
        vae_free(v);
        return vae_fail(VAE_ENOMEM, "%s: out of memory reading metadata", s->path);
    }
    p->meta[p->n_meta++] = k;
    p->meta[p->n_meta++] = v;
    return VAE_OK;
}

const char *vae_store_metadata(const vae_store *s, const char *key) {
    if (!s || !key) return NULL;
    const store_priv *p = s->owned;
    for (int i = 0; i < p->n_meta; i += 2)
        if (!strcmp(p->meta[i], key)) return p->meta[i + 1];
    return NULL;
}

void vae_store_free(vae_store *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) vae_free(s->tensors[i].name);
    vae_free(s->tensors);
    store_priv *p = s->owned;
    if (p) {
        for (owned_block *b = p->blocks, *next; b; b = next) {
            next = b->next;
            vae_free(b);
        }
        vae_free(p->sorted);
        for (int i = 0; i < p->n_meta; i++) vae_free(p->meta[i]);
        vae_free(p->meta);
        vae_free(p);
    }
    if (s->map) vae_plat_unmap(s->map, s->map_size);
    vae_free(s->path);
    vae_free(s);
}

/* qsort has no user pointer: the array being sorted is a thread-local for the comparator. */
static _Thread_local const vae_store *sort_store;
static int cmp_by_name(const void *a, const void *b) {
    return strcmp(sort_store->tensors[*(const int *)a].name, sort_store->tensors[*(const int *)b].name);
}

static int build_index(vae_store *s) {
    store_priv *p = s->owned;
    p->sorted = vae_malloc((size_t)(s->n ? s->n : 1) * sizeof(int));
    if (!p->sorted) return vae_fail(VAE_ENOMEM, "%s: out of memory building the name index", s->path);
    for (int i = 0; i < s->n; i++) p->sorted[i] = i;
    sort_store = s;
    qsort(p->sorted, (size_t)s->n, sizeof(int), cmp_by_name);
    sort_store = NULL;
    for (int i = 1; i < s->n; i++)
        if (!strcmp(s->tensors[p->sorted[i - 1]].name, s->tensors[p->sorted[i]].name))
            return vae_fail(VAE_EFORMAT, "%s: duplicate tensor name '%s'", s->path,
                            s->tensors[p->sorted[i]].name);
    return VAE_OK;
}

const vae_store_tensor *vae_store_find(const vae_store *s, const char *name) {
    if (!s || !name) return NULL;
    const store_priv *p = s->owned;
    int lo = 0, hi = s->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const vae_store_tensor *t = &s->tensors[p->sorted[mid]];
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

int64_t vae_store_numel(const vae_store_tensor *t) { return vae_shape_numel(t->shape, t->ndim); }

int vae_store_new(vae_store **out, const char *label) {
    *out = NULL;
    vae_store *s = vae_calloc(1, sizeof *s);
    store_priv *p = vae_calloc(1, sizeof *p);
    char *copy = vae_strdup(label);
    if (!s || !p || !copy) {
        vae_free(s);
        vae_free(p);
        vae_free(copy);
        return vae_fail(VAE_ENOMEM, "%s: out of memory", label);
    }
    s->path = copy;
    s->owned = p;
    s->format = "memory";
    *out = s;
    return VAE_OK;
}

int vae_store_index(vae_store *s) { return build_index(s); }

int vae_store_open(vae_store **out, const char *path) {
    if (!out || !path) return vae_fail(VAE_EINVAL, "vae_store_open: NULL argument");
    *out = NULL;
    vae_store *s = NULL;
    int rc = vae_store_new(&s, path);
    if (rc) return rc;
    s->format = NULL; /* from the content, below */
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; it is
     * refused below, and on a regular file the flag changes nothing. */
    int fd = open(path, O_RDONLY | VAE_O_BINARY | VAE_O_CLOEXEC | VAE_O_NONBLOCK);
    struct stat st;
    if (fd < 0) {
        rc = vae_fail(VAE_EIO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        rc = vae_fail(VAE_EIO, "%s: not a regular file (a folder, FIFO or device)", path);
        goto fail;
    }
    if (st.st_size == 0) {
        close(fd);
        rc = vae_fail(VAE_EFORMAT, "%s: file is empty (0 bytes)", path);
        goto fail;
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        rc = vae_fail(VAE_EUNSUPPORTED, "%s: file too large to map", path);
        goto fail;
    }
    s->map = vae_plat_map_read(fd, (size_t)st.st_size);
    close(fd); /* the mapping stays valid */
    if (!s->map) {
        rc = vae_fail(VAE_EIO, "%s: mmap failed: %s", path, strerror(errno));
        goto fail;
    }
    s->map_size = (size_t)st.st_size;

    const uint8_t *m = s->map;
    size_t n = s->map_size;
    if (n >= 4 && !memcmp(m, "PK\x03\x04", 4)) {
        s->format = "pth";
        rc = vae_pth_parse(s);
    } else if (n >= 4 && !memcmp(m, "GGUF", 4)) {
        s->format = "gguf";
        rc = vae_gguf_parse(s);
    } else if (n >= 6 && !memcmp(m, "\x93NUMPY", 6)) {
        s->format = "npy";
        rc = vae_npy_parse(s);
    } else if (n >= 2 && m[0] == 0x80 && m[1] >= 2 && m[1] <= 5) {
        /* A bare pickle: torch.save before 1.6 (or _use_new_zipfile_serialization=False). */
        rc = vae_fail(VAE_EUNSUPPORTED,
                      "%s: legacy (non-zip) PyTorch file; re-save it with a current torch.save",
                      path);
    } else if (n >= 9 && m[8] == '{') {
        s->format = "safetensors";
        rc = vae_safetensors_parse(s);
    } else {
        rc = vae_fail(VAE_EFORMAT,
                      "%s: unrecognised file format (%zu bytes; expected safetensors, PyTorch zip, "
                      "GGUF or .npy)",
                      path, n);
    }
    if (rc == VAE_OK) rc = build_index(s);
    if (rc != VAE_OK) goto fail;
    *out = s;
    return VAE_OK;
fail:
    vae_store_free(s);
    return rc;
}

/* ---- conversion to float32 ---- */

int vae_store_to_f32(const vae_store *s, const vae_store_tensor *t, float *dst) {
    int64_t n = vae_store_numel(t);
    const uint8_t *src = t->data;
    if (n == 0) return VAE_OK;
    switch (t->type) {
    case VAE_ST_F32:
        memcpy(dst, src, (size_t)n * 4);
        return VAE_OK;
    case VAE_ST_F16:
    case VAE_ST_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, 2);
            dst[i] = t->type == VAE_ST_F16 ? vae_f16_to_f32(h) : vae_bf16_to_f32(h);
        }
        return VAE_OK;
    case VAE_ST_F64:
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, 8);
            dst[i] = (float)d;
        }
        return VAE_OK;
    case VAE_ST_F8_E4M3:
        for (int64_t i = 0; i < n; i++) dst[i] = vae_f8e4m3_to_f32(src[i]);
        return VAE_OK;
    case VAE_ST_F8_E5M2:
        for (int64_t i = 0; i < n; i++) dst[i] = vae_f8e5m2_to_f32(src[i]);
        return VAE_OK;
    case VAE_ST_Q8_0: /* blocks of 32: fp16 scale d, then 32 int8 q; value = d * q */
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *blk = src + 34 * b;
            uint16_t h;
            memcpy(&h, blk, 2);
            float d = vae_f16_to_f32(h);
            for (int j = 0; j < 32; j++) dst[32 * b + j] = d * (float)(int8_t)blk[2 + j];
        }
        return VAE_OK;
    default:
        return vae_fail(VAE_EDTYPE, "%s: tensor '%s' has storage type %s, not convertible to float32",
                        s ? s->path : "?", t->name, vae_storage_type_name(t->type));
    }
}
