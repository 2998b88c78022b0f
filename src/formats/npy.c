/* npy.c -- NumPy .npy reader (format versions 1, 2 and 3), one tensor named "".
 *
 * Layout: "\x93NUMPY", major, minor, header length (u16 for v1, u32 for v2/v3), a Python dict
 * literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (1, 16, 40), }, then the raw
 * C-order data. */
#include "formats/store.h"

#include "core/core.h"

#include <string.h>

typedef struct {
    const char *p, *end;
} lex;

static void ws(lex *l) {
    while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r')) l->p++;
}

static int lit(lex *l, char c) {
    ws(l);
    if (l->p < l->end && *l->p == c) {
        l->p++;
        return 1;
    }
    return 0;
}

/* A quoted string ('...' or "..."), without escapes (numpy never writes any in these keys). */
static int str(lex *l, const char **s, size_t *len) {
    ws(l);
    if (l->p >= l->end || (*l->p != '\'' && *l->p != '"')) return -1;
    char q = *l->p++;
    const char *b = l->p;
    while (l->p < l->end && *l->p != q) l->p++;
    if (l->p >= l->end) return -1;
    *s = b;
    *len = (size_t)(l->p - b);
    l->p++;
    return 0;
}

static int word(lex *l, const char *w) {
    ws(l);
    size_t n = strlen(w);
    if ((size_t)(l->end - l->p) >= n && !memcmp(l->p, w, n)) {
        l->p += n;
        return 1;
    }
    return 0;
}

/* (d0, d1, ...) with an optional trailing comma; Python 2 files may write 3L. */
static int shape_tuple(lex *l, int64_t *shape, int *ndim) {
    if (!lit(l, '(')) return -1;
    *ndim = 0;
    for (;;) {
        if (lit(l, ')')) return 0;
        if (*ndim == VAE_MAX_DIMS) return -1;
        ws(l);
        int64_t v = 0;
        const char *b = l->p;
        while (l->p < l->end && *l->p >= '0' && *l->p <= '9') {
            if (v > (INT64_MAX - 9) / 10) return -1;
            v = v * 10 + (*l->p++ - '0');
        }
        if (l->p == b) return -1;
        if (l->p < l->end && *l->p == 'L') l->p++;
        shape[(*ndim)++] = v;
        if (!lit(l, ',')) return lit(l, ')') ? 0 : -1;
    }
}

int vae_npy_parse(vae_store *s) {
    const uint8_t *m = s->map;
    size_t n = s->map_size;
    if (n < 10) return vae_fail(VAE_EFORMAT, "%s: .npy file truncated (%zu bytes)", s->path, n);
    int major = m[6];
    size_t hlen, hstart;
    if (major == 1) {
        hlen = (size_t)m[8] | (size_t)m[9] << 8;
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (n < 12) return vae_fail(VAE_EFORMAT, "%s: .npy file truncated (%zu bytes)", s->path, n);
        hlen = (size_t)m[8] | (size_t)m[9] << 8 | (size_t)m[10] << 16 | (size_t)m[11] << 24;
        hstart = 12;
    } else {
        return vae_fail(VAE_EUNSUPPORTED, "%s: .npy format version %d (only 1, 2 and 3)", s->path, major);
    }
    if (hlen > n - hstart)
        return vae_fail(VAE_EFORMAT, "%s: .npy header length %zu exceeds the %zu-byte file", s->path, hlen, n);

    lex l = {(const char *)m + hstart, (const char *)m + hstart + hlen};
    const char *descr = NULL;
    size_t dlen = 0;
    int fortran = -1, ndim = -1;
    int64_t shape[VAE_MAX_DIMS];
    if (!lit(&l, '{')) goto bad;
    while (!lit(&l, '}')) {
        const char *k;
        size_t kl;
        if (str(&l, &k, &kl) || !lit(&l, ':')) goto bad;
        if (kl == 5 && !memcmp(k, "descr", 5)) {
            if (str(&l, &descr, &dlen)) goto bad;
        } else if (kl == 13 && !memcmp(k, "fortran_order", 13)) {
            if (word(&l, "True")) fortran = 1;
            else if (word(&l, "False")) fortran = 0;
            else goto bad;
        } else if (kl == 5 && !memcmp(k, "shape", 5)) {
            if (shape_tuple(&l, shape, &ndim)) goto bad;
        } else {
            goto bad; /* numpy writes exactly these three keys */
        }
        if (!lit(&l, ',')) {
            if (!lit(&l, '}')) goto bad;
            break;
        }
    }
    if (!descr || fortran < 0 || ndim < 0) goto bad;
    if (fortran)
        return vae_fail(VAE_EUNSUPPORTED, "%s: .npy array is in Fortran order (save it with C order)", s->path);

    static const struct { const char *d; vae_storage_type t; } types[] = {
        {"<f4", VAE_ST_F32}, {"<f2", VAE_ST_F16}, {"<f8", VAE_ST_F64}, {"<i8", VAE_ST_I64}, {"<i4", VAE_ST_I32},
    };
    int ti = -1;
    for (int i = 0; i < (int)(sizeof types / sizeof *types); i++)
        if (dlen == 3 && !memcmp(descr, types[i].d, 3)) ti = i;
    if (ti < 0)
        return vae_fail(VAE_EUNSUPPORTED, "%s: .npy dtype '%.*s' is not supported (expected '<f4', '<f2' or '<f8')",
                        s->path, (int)(dlen > 32 ? 32 : dlen), descr);
    vae_storage_type t = types[ti].t;
    int64_t numel;
    size_t es = vae_storage_type_size(t), data = hstart + hlen;
    if (vae_shape_checked_numel(shape, ndim, &numel) != 0 || (uint64_t)numel > SIZE_MAX / es)
        return vae_fail(VAE_EFORMAT, "%s: .npy shape overflows", s->path);
    size_t nbytes = (size_t)numel * es;
    if (nbytes != n - data)
        return vae_fail(VAE_EFORMAT, "%s: .npy data has %zu bytes but dtype %.*s and the shape need %zu (truncated?)",
                        s->path, n - data, (int)dlen, descr, nbytes);
    return vae_store_add(s, "", 0, t, ndim, shape, m + data, nbytes);
bad:
    return vae_fail(VAE_EFORMAT, "%s: .npy header is not a dict with 'descr', 'fortran_order' and 'shape'", s->path);
}
