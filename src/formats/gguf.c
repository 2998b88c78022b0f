/* gguf.c -- GGUF v2/v3 reader (ggml's container, little-endian).
 *
 * Layout: "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv metadata pairs (string key, u32
 * type, value); n_tensors infos (string name, u32 n_dims, u64 ne[n_dims] innermost first, u32
 * ggml type, u64 offset); padding to general.alignment (default 32); the data region, to which
 * the offsets are relative. Metadata values are skipped (bounds-checked) except the alignment. */
#include "formats/store.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *m;
    uint64_t n, pos;
    const char *path;
} cursor;

static int trunc_err(const cursor *c, const char *what) {
    return vae_fail(VAE_EFORMAT, "%s: GGUF truncated or corrupt while reading %s (at byte %llu of %llu)", c->path,
                    what, (unsigned long long)c->pos, (unsigned long long)c->n);
}

static int rd(cursor *c, int bytes, uint64_t *v, const char *what) {
    *v = 0;
    if (c->n - c->pos < (uint64_t)bytes) return trunc_err(c, what);
    uint64_t x = 0;
    for (int i = bytes - 1; i >= 0; i--) x = (x << 8) | c->m[c->pos + (uint64_t)i];
    c->pos += (uint64_t)bytes;
    *v = x;
    return VAE_OK;
}

static int rd_str(cursor *c, const char **s, uint64_t *len, const char *what) {
    *s = NULL;
    int rc = rd(c, 8, len, what);
    if (rc) return rc;
    if (*len > c->n - c->pos) return trunc_err(c, what);
    *s = (const char *)c->m + c->pos;
    c->pos += *len;
    return VAE_OK;
}

/* Byte size of a fixed-size metadata value type, 0 for string/array, -1 for unknown types. */
static int kv_size(uint32_t t) {
    static const int sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8}; /* u8 i8 u16 i16 u32 i32 f32 bool str arr u64 i64 f64 */
    return t < sizeof sz / sizeof *sz ? sz[t] : -1;
}

static int skip_value(cursor *c, uint32_t type, int depth) {
    int sz = kv_size(type);
    uint64_t v, len;
    const char *s;
    if (sz < 0) return vae_fail(VAE_EFORMAT, "%s: GGUF metadata value of unknown type %u", c->path, type);
    if (sz > 0) return rd(c, sz, &v, "a metadata value");
    if (type == 8) return rd_str(c, &s, &len, "a metadata string");
    /* array: u32 element type, u64 count, elements */
    uint64_t et = 0, count = 0;
    int rc;
    if (depth > 8) return vae_fail(VAE_EFORMAT, "%s: GGUF metadata arrays nested too deeply", c->path);
    if ((rc = rd(c, 4, &et, "an array type")) || (rc = rd(c, 8, &count, "an array length"))) return rc;
    int esz = kv_size((uint32_t)et);
    if (esz < 0) return vae_fail(VAE_EFORMAT, "%s: GGUF metadata array of unknown type %llu", c->path, (unsigned long long)et);
    if (esz > 0) {
        if (count > (c->n - c->pos) / (uint64_t)esz) return trunc_err(c, "a metadata array");
        c->pos += count * (uint64_t)esz;
        return VAE_OK;
    }
    /* strings or arrays take at least 8 bytes each: bounds the loop before it starts */
    if (count > (c->n - c->pos) / 8) return trunc_err(c, "a metadata array");
    for (uint64_t i = 0; i < count; i++)
        if ((rc = skip_value(c, (uint32_t)et, depth + 1))) return rc;
    return VAE_OK;
}

/* ggml types: our storage type, block size (elements) and block bytes. */
static int ggml_type_info(uint32_t t, vae_storage_type *st, uint64_t *blck, uint64_t *bytes) {
    static const struct { uint16_t blck, bytes; } tab[] = {
        [0] = {1, 4},     [1] = {1, 2},     [2] = {32, 18},   [3] = {32, 20},   [6] = {32, 22},
        [7] = {32, 24},   [8] = {32, 34},   [9] = {32, 36},   [10] = {256, 84}, [11] = {256, 110},
        [12] = {256, 144}, [13] = {256, 176}, [14] = {256, 210}, [15] = {256, 292}, [16] = {256, 66},
        [17] = {256, 74}, [18] = {256, 98}, [19] = {256, 50}, [20] = {32, 18},  [21] = {256, 110},
        [22] = {256, 82}, [23] = {256, 136}, [24] = {1, 1},   [25] = {1, 2},    [26] = {1, 4},
        [27] = {1, 8},    [28] = {1, 8},    [29] = {256, 56}, [30] = {1, 2},    [34] = {256, 54},
        [35] = {256, 66}, [39] = {32, 17},
    };
    if (t >= sizeof tab / sizeof *tab || !tab[t].blck) return -1;
    *blck = tab[t].blck;
    *bytes = tab[t].bytes;
    switch (t) {
    case 0: *st = VAE_ST_F32; break;
    case 1: *st = VAE_ST_F16; break;
    case 8: *st = VAE_ST_Q8_0; break;
    case 26: *st = VAE_ST_I32; break;
    case 27: *st = VAE_ST_I64; break;
    case 28: *st = VAE_ST_F64; break;
    case 30: *st = VAE_ST_BF16; break;
    default: *st = VAE_ST_OTHER;
    }
    return 0;
}

int vae_gguf_parse(vae_store *s) {
    cursor c = {s->map, s->map_size, 0, s->path};
    uint64_t magic = 0, version = 0, n_tensors = 0, n_kv = 0, alignment = 32;
    int rc;
    if ((rc = rd(&c, 4, &magic, "the header")) || (rc = rd(&c, 4, &version, "the header"))) return rc;
    if (version != 2 && version != 3)
        return vae_fail(VAE_EUNSUPPORTED, "%s: GGUF version %llu (only versions 2 and 3 are supported)", s->path,
                        (unsigned long long)version);
    if ((rc = rd(&c, 8, &n_tensors, "the header")) || (rc = rd(&c, 8, &n_kv, "the header"))) return rc;
    /* A tensor info is at least 8+4+4+8 bytes and a pair at least 8+4+1: reject counts the file cannot hold. */
    if (n_tensors > (c.n - c.pos) / 24 || n_kv > (c.n - c.pos) / 13)
        return vae_fail(VAE_EFORMAT, "%s: GGUF header claims %llu tensors and %llu metadata pairs, more than the file can hold",
                        s->path, (unsigned long long)n_tensors, (unsigned long long)n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        const char *key = NULL;
        uint64_t klen = 0, type = 0;
        if ((rc = rd_str(&c, &key, &klen, "a metadata key")) || (rc = rd(&c, 4, &type, "a metadata type"))) return rc;
        if (klen == 17 && !memcmp(key, "general.alignment", 17) && type == 4) {
            if ((rc = rd(&c, 4, &alignment, "general.alignment"))) return rc;
            if (alignment == 0 || (alignment & (alignment - 1)))
                return vae_fail(VAE_EFORMAT, "%s: GGUF general.alignment %llu is not a power of two", s->path,
                                (unsigned long long)alignment);
        } else if ((rc = skip_value(&c, (uint32_t)type, 0))) {
            return rc;
        }
    }
    /* Tensor infos first (the data region starts after them), then the tensors. */
    struct info { const char *name; uint64_t nlen, ne[VAE_MAX_DIMS], type, offset; uint32_t nd; } *inf;
    inf = vae_malloc((size_t)(n_tensors ? n_tensors : 1) * sizeof *inf);
    vae_store_span *spans = vae_malloc((size_t)(n_tensors ? n_tensors : 1) * sizeof *spans);
    if (!inf || !spans) {
        vae_free(inf);
        vae_free(spans);
        return vae_fail(VAE_ENOMEM, "%s: out of memory", s->path);
    }
    for (uint64_t i = 0; i < n_tensors && !rc; i++) {
        uint64_t nd = 0;
        if ((rc = rd_str(&c, &inf[i].name, &inf[i].nlen, "a tensor name")) || (rc = rd(&c, 4, &nd, "a tensor rank"))) break;
        if (nd > VAE_MAX_DIMS) {
            rc = vae_fail(VAE_EFORMAT, "%s: GGUF tensor '%.*s' has %llu dimensions (at most %d)", s->path,
                          (int)(inf[i].nlen > 200 ? 200 : inf[i].nlen), inf[i].name, (unsigned long long)nd, VAE_MAX_DIMS);
            break;
        }
        inf[i].nd = (uint32_t)nd;
        for (uint32_t d = 0; d < nd && !rc; d++) rc = rd(&c, 8, &inf[i].ne[d], "tensor dimensions");
        if (!rc) rc = rd(&c, 4, &inf[i].type, "a tensor type");
        if (!rc) rc = rd(&c, 8, &inf[i].offset, "a tensor offset");
    }
    uint64_t data_start = (c.pos + alignment - 1) / alignment * alignment; /* c.pos <= file size: no overflow */
    uint64_t data_size = data_start <= c.n ? c.n - data_start : 0;
    for (uint64_t i = 0; i < n_tensors && !rc; i++) {
        struct info *t = &inf[i];
        int nl = (int)(t->nlen > 200 ? 200 : t->nlen);
        vae_storage_type st;
        uint64_t blck, bbytes;
        int64_t shape[VAE_MAX_DIMS], numel;
        if (ggml_type_info((uint32_t)t->type, &st, &blck, &bbytes) != 0 || t->type > UINT32_MAX) {
            rc = vae_fail(VAE_EUNSUPPORTED, "%s: GGUF tensor '%.*s' has unknown ggml type %llu", s->path, nl, t->name,
                          (unsigned long long)t->type);
            break;
        }
        int bad = 0;
        for (uint32_t d = 0; d < t->nd; d++) {
            if (t->ne[d] > (uint64_t)INT64_MAX) bad = 1;
            shape[t->nd - 1 - d] = (int64_t)t->ne[d]; /* innermost first -> PyTorch order */
        }
        if (bad || vae_shape_checked_numel(shape, (int)t->nd, &numel) != 0 || (t->nd ? t->ne[0] % blck != 0 : blck != 1)) {
            rc = vae_fail(VAE_EFORMAT, "%s: GGUF tensor '%.*s' has an invalid shape (overflowing, or the innermost size "
                          "is not a multiple of the %llu-element block)", s->path, nl, t->name, (unsigned long long)blck);
            break;
        }
        uint64_t nbytes = (uint64_t)numel / blck;
        if (nbytes > UINT64_MAX / bbytes) {
            rc = vae_fail(VAE_EFORMAT, "%s: GGUF tensor '%.*s' is too large", s->path, nl, t->name);
            break;
        }
        nbytes *= bbytes;
        if (t->offset > data_size || nbytes > data_size - t->offset) {
            rc = vae_fail(VAE_EFORMAT, "%s: GGUF tensor '%.*s' (%llu bytes at data offset %llu) extends past the end of "
                          "the file (truncated?)", s->path, nl, t->name, (unsigned long long)nbytes,
                          (unsigned long long)t->offset);
            break;
        }
        rc = vae_store_add(s, t->name, (size_t)t->nlen, st, (int)t->nd, shape, c.m + data_start + t->offset, (size_t)nbytes);
        spans[i] = (vae_store_span){t->offset, t->offset + nbytes, s->n - 1};
    }
    if (!rc) rc = vae_store_check_overlap(s, spans, (size_t)n_tensors, "GGUF data");
    vae_free(inf);
    vae_free(spans);
    return rc;
}
