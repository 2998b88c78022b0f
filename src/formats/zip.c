/* zip.c -- just enough of the zip format for PyTorch archives: the end-of-central-directory record
 * (zip64 included, torch writes it for large files), the central directory, and entries stored
 * (what torch writes) or deflated (what re-zipping tools write). Every field is bounds-checked
 * against the mapping. */
#include "formats/store.h"

#include "core/core.h"
#include "formats/limits.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* True when [off, off + len) lies inside a buffer of size n (no overflow). */
static int in_range(uint64_t off, uint64_t len, uint64_t n) { return off <= n && len <= n - off; }

static int cmp_entry(const void *a, const void *b) {
    const vae_zip_entry *x = a, *y = b;
    size_t l = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, l);
    return c ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

/* The zip64 extra field (id 1) holds, in order, the 64-bit values of the fields that were
 * 0xFFFFFFFF in the fixed record. */
static int zip64_extra(const uint8_t *ex, size_t exlen, uint64_t *usize, uint64_t *csize, uint64_t *off) {
    size_t i = 0;
    while (i + 4 <= exlen) {
        uint16_t id = rd16(ex + i), len = rd16(ex + i + 2);
        if (len > exlen - i - 4) return -1;
        if (id == 1) {
            const uint8_t *d = ex + i + 4;
            size_t k = 0;
            uint64_t *want[3] = {usize, csize, off};
            for (int j = 0; j < 3; j++) {
                if (*want[j] != 0xFFFFFFFFu) continue;
                if (k + 8 > len) return -1;
                *want[j] = rd64(d + k);
                k += 8;
            }
            return 0;
        }
        i += 4 + (size_t)len;
    }
    return 0;
}

/* Each entry's bytes (local header + data) must be its own: central records that share or overlap
 * bytes let a small file claim the same deflate stream many times over, which would defeat the
 * per-entry ratio bound (limits.h). ranges[i] = {start, end, entry index}, sorted here. */
typedef struct { uint64_t start, end; int idx; } zip_range;
static int cmp_range(const void *a, const void *b) {
    const zip_range *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}
static int check_disjoint(const vae_zip *z, zip_range *r, const char *path) {
    qsort(r, (size_t)z->n, sizeof *r, cmp_range);
    for (int i = 1; i < z->n; i++)
        if (r[i].start < r[i - 1].end) {
            const vae_zip_entry *a = &z->entries[r[i - 1].idx], *b = &z->entries[r[i].idx];
            return vae_fail(VAE_EFORMAT, "%s: zip entries '%.*s' and '%.*s' overlap (bytes %llu..%llu shared): "
                            "a corrupt or hostile archive", path, (int)a->name_len, a->name, (int)b->name_len,
                            b->name, (unsigned long long)r[i].start, (unsigned long long)r[i - 1].end);
        }
    return VAE_OK;
}

int vae_zip_open(vae_zip *z, vae_store *s) {
    const uint8_t *m = s->map;
    uint64_t n = s->map_size;
    const char *path = s->path;
    memset(z, 0, sizeof *z);
    /* The end record (22 bytes + comment up to 64 KiB) is found by scanning back from the end. */
    if (n < 22) return vae_fail(VAE_EFORMAT, "%s: zip archive truncated (%llu bytes)", path, (unsigned long long)n);
    uint64_t eocd = UINT64_MAX;
    for (uint64_t i = n - 22 + 1, stop = n > 22 + 65535 ? n - 22 - 65535 : 0; i-- > stop;)
        if (rd32(m + i) == 0x06054b50u && i + 22 + rd16(m + i + 20) <= n) {
            eocd = i;
            break;
        }
    if (eocd == UINT64_MAX)
        return vae_fail(VAE_EFORMAT, "%s: zip end-of-central-directory record not found (file truncated?)", path);
    uint64_t count = rd16(m + eocd + 10), cd_size = rd32(m + eocd + 12), cd_off = rd32(m + eocd + 16);
    /* zip64: a locator sits just before the end record and points to the zip64 end record. */
    if (eocd >= 20 && rd32(m + eocd - 20) == 0x07064b50u) {
        uint64_t e64 = rd64(m + eocd - 20 + 8);
        if (!in_range(e64, 56, n) || rd32(m + e64) != 0x06064b50u)
            return vae_fail(VAE_EFORMAT, "%s: zip64 end record is missing or out of range", path);
        count = rd64(m + e64 + 32);
        cd_size = rd64(m + e64 + 40);
        cd_off = rd64(m + e64 + 48);
    }
    if (!in_range(cd_off, cd_size, n))
        return vae_fail(VAE_EFORMAT, "%s: zip central directory (offset %llu, %llu bytes) lies outside the %llu-byte file",
                        path, (unsigned long long)cd_off, (unsigned long long)cd_size, (unsigned long long)n);
    if (count > cd_size / 46) /* each central record is at least 46 bytes */
        return vae_fail(VAE_EFORMAT, "%s: zip central directory claims %llu entries in %llu bytes", path,
                        (unsigned long long)count, (unsigned long long)cd_size);
    z->entries = vae_calloc((size_t)(count ? count : 1), sizeof *z->entries);
    zip_range *ranges = vae_calloc((size_t)(count ? count : 1), sizeof *ranges);
    if (!z->entries || !ranges) {
        vae_free(ranges);
        vae_zip_close(z);
        return vae_fail(VAE_ENOMEM, "%s: out of memory", path);
    }

    uint64_t p = cd_off, cd_end = cd_off + cd_size;
    for (uint64_t k = 0; k < count; k++) {
        if (!in_range(p, 46, cd_end) || rd32(m + p) != 0x02014b50u) goto bad_cd;
        uint16_t flags = rd16(m + p + 8), method = rd16(m + p + 10);
        uint32_t crc = rd32(m + p + 16);
        uint64_t csize = rd32(m + p + 20), usize = rd32(m + p + 24), lho = rd32(m + p + 42);
        size_t nl = rd16(m + p + 28), xl = rd16(m + p + 30), cl = rd16(m + p + 32);
        if (!in_range(p + 46, (uint64_t)nl + xl + cl, cd_end)) goto bad_cd;
        const char *name = (const char *)m + p + 46;
        if (zip64_extra(m + p + 46 + nl, xl, &usize, &csize, &lho) != 0) goto bad_cd;
        if (flags & 1) {
            vae_free(ranges);
            vae_zip_close(z);
            return vae_fail(VAE_EUNSUPPORTED, "%s: zip entry '%.*s' is encrypted", path, (int)nl, name);
        }
        /* The data follows the local header, whose name and extra lengths may differ from the
         * central ones (torch pads the local extra field to align tensor data). */
        if (!in_range(lho, 30, n) || rd32(m + lho) != 0x04034b50u) {
            vae_free(ranges);
            vae_zip_close(z);
            return vae_fail(VAE_EFORMAT, "%s: zip entry '%.*s': local header missing or out of range", path, (int)nl, name);
        }
        uint64_t data = lho + 30 + rd16(m + lho + 26) + rd16(m + lho + 28);
        if (!in_range(data, csize, n)) {
            vae_free(ranges);
            vae_zip_close(z);
            return vae_fail(VAE_EFORMAT, "%s: zip entry '%.*s' (%llu bytes) extends past the end of the file (truncated?)",
                            path, (int)nl, name, (unsigned long long)csize);
        }
        if ((method == 0 && csize != usize) || (method != 0 && method != 8)) {
            vae_free(ranges);
            vae_zip_close(z);
            if (method != 0 && method != 8)
                return vae_fail(VAE_EUNSUPPORTED, "%s: zip entry '%.*s' uses compression method %u (only stored and deflate)",
                                path, (int)nl, name, method);
            return vae_fail(VAE_EFORMAT, "%s: stored zip entry '%.*s' has different sizes", path, (int)nl, name);
        }
        ranges[z->n] = (zip_range){lho, data + csize, z->n};
        vae_zip_entry *e = &z->entries[z->n++];
        e->name = name;
        e->name_len = nl;
        e->data_offset = data;
        e->csize = csize;
        e->usize = usize;
        e->crc = crc;
        e->method = method;
        p += 46 + nl + xl + cl;
    }
    int rc = check_disjoint(z, ranges, path);
    vae_free(ranges);
    if (rc) {
        vae_zip_close(z);
        return rc;
    }
    qsort(z->entries, (size_t)z->n, sizeof *z->entries, cmp_entry);
    return VAE_OK;
bad_cd:
    vae_free(ranges);
    vae_zip_close(z);
    return vae_fail(VAE_EFORMAT, "%s: zip central directory is corrupt (at byte %llu)", path, (unsigned long long)p);
}

void vae_zip_close(vae_zip *z) {
    vae_free(z->entries);
    z->entries = NULL;
    z->n = 0;
}

const vae_zip_entry *vae_zip_find(const vae_zip *z, const char *name, size_t name_len) {
    vae_zip_entry key = {.name = name, .name_len = name_len};
    return bsearch(&key, z->entries, (size_t)z->n, sizeof key, cmp_entry);
}

int vae_zip_extract(vae_store *s, const vae_zip_entry *e, const uint8_t **data) {
    const uint8_t *src = (const uint8_t *)s->map + e->data_offset;
    if (e->method == 0) {
        *data = src;
        return VAE_OK;
    }
    /* A claim beyond the deflate maximum (limits.h) is a corrupt header and would otherwise make
     * us allocate whatever it says. */
    if (e->usize > e->csize * VAE_ZIP_MAX_RATIO + 1024 || e->usize > SIZE_MAX - 64)
        return vae_fail(VAE_EFORMAT, "%s: zip entry '%.*s' claims an impossible size", s->path, (int)e->name_len, e->name);
    uint8_t *out = vae_store_owned_alloc(s, (size_t)e->usize);
    if (!out) return vae_fail(VAE_ENOMEM, "%s: out of memory inflating '%.*s'", s->path, (int)e->name_len, e->name);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) /* raw deflate, no zlib header */
        return vae_fail(VAE_ENOMEM, "%s: zlib init failed", s->path);
    /* zlib counts in 32-bit uInt: large entries are fed and drained in pieces of 1 GiB. */
    uint64_t in_pos = 0, out_pos = 0;
    int zr;
    zs.next_out = out; /* zlib rejects a NULL output pointer even for empty entries */
    for (;;) {
        if (zs.avail_in == 0 && in_pos < e->csize) {
            uInt k = (uInt)(e->csize - in_pos < (1u << 30) ? e->csize - in_pos : (1u << 30));
            zs.next_in = (Bytef *)(uintptr_t)(src + in_pos);
            zs.avail_in = k;
            in_pos += k;
        }
        if (zs.avail_out == 0 && out_pos < e->usize) {
            uInt k = (uInt)(e->usize - out_pos < (1u << 30) ? e->usize - out_pos : (1u << 30));
            zs.next_out = out + out_pos;
            zs.avail_out = k;
            out_pos += k;
        }
        zr = inflate(&zs, Z_NO_FLUSH); /* Z_BUF_ERROR once no progress is possible: no endless loop */
        if (zr != Z_OK) break;
    }
    int complete = zr == Z_STREAM_END && zs.avail_out == 0 && out_pos == e->usize;
    inflateEnd(&zs);
    if (!complete)
        return vae_fail(VAE_EFORMAT, "%s: zip entry '%.*s' does not inflate to its %llu bytes (corrupt or truncated)",
                        s->path, (int)e->name_len, e->name, (unsigned long long)e->usize);
    /* Verify the CRC of inflated entries (cheap next to inflating; stored tensors are mapped lazily
     * and not checked, which would mean reading the whole checkpoint at open). */
    uLong crc = crc32(0L, Z_NULL, 0);
    for (uint64_t i = 0; i < e->usize;) {
        uInt k = (uInt)(e->usize - i < (1u << 30) ? e->usize - i : (1u << 30));
        crc = crc32(crc, out + i, k);
        i += k;
    }
    if ((uint32_t)crc != e->crc)
        return vae_fail(VAE_EFORMAT, "%s: zip entry '%.*s' fails its CRC check", s->path, (int)e->name_len, e->name);
    *data = out;
    return VAE_OK;
}
