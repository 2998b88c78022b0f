/* fp8_calibrate_cache.c -- dtype fp8: the error budget's choices kept between sessions and
 * processes (fp8_calibrate.h).
 *
 * A calibration costs seconds of CPU (a run per candidate conv); its result depends only on the
 * weights, the program, the request and the engine's rounding rule, so it is kept in a text file
 * beside the tune cache (formats/linecache.c: whole-line appends under a lock, damaged or foreign
 * lines skipped, nothing an error for the caller), a choice as a few lines:
 *     vae-fp8-1 vae<version> <key>:m<j> <bits 30j .. 30j+29 of the kept set>
 *     vae-fp8-1 vae<version> <key>:pred <predicted error, 1e-6 units>
 *     vae-fp8-1 vae<version> <key>:meas <measured error, 1e-6 units>
 *     vae-fp8-1 vae<version> <key>:kept <how many kept>   (written last: the choice is whole)
 * The scope is the engine's version (its rounding rule and emulation make the errors). The key:
 * a checksum of the program's structure and conv weights, the side, the preview mode, the
 * budget, the calibration's size and frames, and a checksum of the candidate set (which convs:
 * the emulation rounds every kernel's alike). A look-up takes the choice only where every line is
 * there and agrees (the kept set's size is :kept, no bit past the candidates); anything else
 * calibrates again.
 */
#include <stdio.h>
#include <string.h>

#include "api/fp8_calibrate.h"
#include "core/core.h"
#include "formats/linecache.h"
#include "vae.h"

static const char magic[] = "vae-fp8-1";
enum { MASK_BITS = 30, MAX_MASKS = 8, VALUE_MAX = (1 << MASK_BITS) - 1, KEY_MAX = 200 };

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 33);
}

static uint64_t mix_floats(uint64_t h, const float *x, size_t n) {
    /* at most ~4096 values a tensor, evenly spread, and its last: hashing every weight of a
     * Wan2.2 decoder (2.2 GB) would cost a second a session, and any two trained or
     * synthesised checkpoints differ in nearly every weight */
    const size_t step = n > 4096 ? n / 4096 : 1;
    for (size_t i = 0; x && i < n; i += step) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        h = mix(h, u);
    }
    if (x && n) {
        uint32_t u;
        memcpy(&u, &x[n - 1], sizeof u);
        h = mix(h, u);
    }
    return mix(h, n);
}

/* The program's ops (kinds, shapes, names) and its convs' weights and biases */
static uint64_t weights_sum(const vae_program *p) {
    uint64_t h = mix(0, (uint64_t)p->n_ops);
    h = mix(h, (uint64_t)p->in_channels * 131 + (uint64_t)p->out_channels);
    for (int i = 0; i < p->n_ops; i++) {
        const vae_op *op = &p->ops[i];
        h = mix(h, (uint64_t)op->kind);
        const int dims[] = {op->c_in, op->c_out, op->kt, op->kh, op->kw, op->st, op->sh, op->up};
        for (size_t k = 0; k < sizeof dims / sizeof *dims; k++)
            h = mix(h, (uint64_t)(uint32_t)dims[k]);
        for (const char *c = op->name; *c; c++)
            h = mix(h, (uint64_t)(unsigned char)*c);
        if (op->kind != VAE_OP_CONV) continue;
        const size_t nw = (size_t)vae_op_weight_count(op);
        h = mix_floats(h, op->w, nw);
        h = mix_floats(h, op->b, op->b ? (size_t)op->c_out : 0);
    }
    return h;
}

/* The key of a choice (see the top), with no field separator in it */
static void make_key(const vae_program *p, const int *cand, int n, const vae_fp8_request *rq,
                     char *key, size_t len) {
    uint64_t c = mix(0, (uint64_t)n);
    for (int j = 0; j < n; j++)
        c = mix(c, (uint64_t)cand[j]); /* (not their kernels: a dropped one has none after) */
    snprintf(key, len, "%016llx.%s.p%d.b%ld.s%d.t%d+%d.c%016llx.n%d",
             (unsigned long long)weights_sum(p), rq->range ? "enc" : "dec", rq->preview,
             (long)(rq->budget * 1e6 + 0.5), rq->size, p->first_chunk, p->chunk,
             (unsigned long long)c, n);
}

void vae_fp8_cache_file(const vae_settings *set, char *file, size_t len) {
    const char *tc = set ? set->tune_cache : "";
    const char *slash = strrchr(tc, '/'), *back = strrchr(tc, '\\'); /* (Windows: either) */
    if (back && (!slash || back > slash)) slash = back;
    if (len) file[0] = 0;
    if (!tc[0]) return;
    const int dir = slash ? (int)(slash - tc + 1) : 0;
    const int n = snprintf(file, len, "%.*sfp8-choices.txt", dir, tc);
    if (n < 0 || (size_t)n >= len) file[0] = 0; /* too long: no cache rather than another file */
}

static int get_field(const vae_linecache *lc, const char *key, const char *field) {
    char k[VAE_LC_FIELD_MAX];
    snprintf(k, sizeof k, "%.200s:%.16s", key, field);
    return vae_linecache_get(lc, k);
}

static void put_field(vae_linecache *lc, const char *key, const char *field, int value) {
    char k[VAE_LC_FIELD_MAX];
    snprintf(k, sizeof k, "%.200s:%.16s", key, field);
    vae_linecache_put(lc, k, value);
}

static void open_cache(vae_linecache *lc, const vae_fp8_request *rq) {
    vae_linecache_init(lc, rq->cache, "fp8 choice cache", magic, "vae" VAE_VERSION_STRING,
                       VALUE_MAX);
    vae_linecache_load(lc);
}

static int candidates_of(const vae_program *p, int *cand) {
    int n = 0;
    for (int i = 0; i < p->n_ops; i++)
        if (vae_op_fp8(&p->ops[i])) cand[n++] = i;
    return n;
}

/* The cached kept set of n candidates as bits (1: keep); 0 where any line is missing or off */
static int read_choice(const vae_linecache *lc, const char *key, int n, unsigned char *keep,
                       vae_fp8_choice *out) {
    const int kept = get_field(lc, key, "kept"), pred = get_field(lc, key, "pred"),
              meas = get_field(lc, key, "meas");
    if (kept < 0 || kept > n || pred < 0 || meas < 0) return 0;
    int count = 0;
    for (int j = 0; j * MASK_BITS < n; j++) {
        char f[16];
        snprintf(f, sizeof f, "m%d", j);
        const int bits = get_field(lc, key, f);
        if (bits < 0) return 0;
        for (int b = 0; b < MASK_BITS; b++) {
            const int i = j * MASK_BITS + b, on = (bits >> b) & 1;
            if (on && i >= n) return 0; /* a bit past the candidates: not this choice */
            if (i < n) keep[i] = (unsigned char)on, count += on;
        }
    }
    if (count != kept) return 0;
    out->kept = kept, out->candidates = n;
    out->predicted = pred * 1e-6, out->measured = meas * 1e-6;
    return 1;
}

int vae_fp8_cache_get(vae_program *p, const vae_fp8_request *rq, vae_fp8_choice *out) {
    if (!p || !rq || !out || !rq->cache || !rq->cache[0]) return 0;
    const double t0 = vae_seconds();
    int *cand = vae_calloc((size_t)p->n_ops + 1, sizeof *cand);
    unsigned char *keep = vae_calloc((size_t)p->n_ops + 1, 1);
    int hit = 0;
    const int n = cand ? candidates_of(p, cand) : 0;
    if (cand && keep && n > 0 && n <= MAX_MASKS * MASK_BITS) {
        char key[KEY_MAX];
        vae_linecache lc;
        make_key(p, cand, n, rq, key, sizeof key);
        open_cache(&lc, rq);
        vae_fp8_choice c = {0};
        hit = read_choice(&lc, key, n, keep, &c);
        vae_linecache_free(&lc);
        for (int j = 0; hit && j < n; j++)
            if (!keep[j]) {
                p->ops[cand[j]].fp8 = 0;
                p->ops[cand[j]].fp8_kernel = VAE_FP8_NONE;
            }
        if (hit) {
            *out = c;
            out->cached = 1;
            out->seconds = vae_seconds() - t0;
        }
    }
    vae_free(cand);
    vae_free(keep);
    return hit;
}

void vae_fp8_cache_put(const vae_program *p, const int *cand_ops, int n_cand,
                       const vae_fp8_request *rq, const vae_fp8_choice *c) {
    if (!p || !cand_ops || !rq || !c || !rq->cache || !rq->cache[0] || n_cand <= 0 ||
        n_cand > MAX_MASKS * MASK_BITS)
        return;
    char key[KEY_MAX];
    vae_linecache lc;
    make_key(p, cand_ops, n_cand, rq, key, sizeof key);
    open_cache(&lc, rq);
    for (int j = 0; j * MASK_BITS < n_cand; j++) {
        int bits = 0;
        for (int b = 0; b < MASK_BITS && j * MASK_BITS + b < n_cand; b++)
            bits |= vae_op_fp8(&p->ops[cand_ops[j * MASK_BITS + b]]) << b;
        char f[16];
        snprintf(f, sizeof f, "m%d", j);
        put_field(&lc, key, f, bits);
    }
    const double cap = VALUE_MAX * 1e-6;
    put_field(&lc, key, "pred", (int)((c->predicted < cap ? c->predicted : cap) * 1e6 + 0.5));
    put_field(&lc, key, "meas", (int)((c->measured < cap ? c->measured : cap) * 1e6 + 0.5));
    put_field(&lc, key, "kept", c->kept);
    vae_linecache_free(&lc);
}

int vae_fp8_choose(vae_program *p, const vae_fp8_request *rq, vae_fp8_choice *out) {
    if (!p || !rq || !out) return vae_fail(VAE_EINVAL, "vae_fp8_choose: NULL argument");
    int rc = VAE_OK;
    const char *side = rq->range ? "encoder" : "decoder";
    if (!vae_fp8_cache_get(p, rq, out)) {
        int *cand = vae_calloc((size_t)p->n_ops + 1, sizeof *cand);
        if (!cand) return vae_fail(VAE_ENOMEM, "fp8 calibration: out of memory");
        const int n = candidates_of(p, cand);
        rc = vae_fp8_calibrate(p, rq->range, rq->size, rq->budget, rq->set, rq->threads, out);
        if (rc == VAE_OK) vae_fp8_cache_put(p, cand, n, rq, out);
        vae_free(cand);
    }
    if (rc) return rc;
    VAE_INFO("fp8: %d of the %s's %d E4M3 candidate convs in E4M3 (predicted error %.2e, %.2e "
             "measured on the calibration input; budget %.2e), %s %.2f s",
             out->kept, side, out->candidates, out->predicted, out->measured, rq->budget,
             out->cached ? "from the cache in" : "calibrated in", out->seconds);
    return VAE_OK;
}
