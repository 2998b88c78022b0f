/* builder.c -- weights for model files: from a checkpoint (checked, converted) or synthesised. */
#include "models/builder.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

/* ---- arena of float32 arrays ----------------------------------------------------------------- */
typedef struct arena_block {
    struct arena_block *next;
    float data[];
} arena_block;

struct vae_arena {
    arena_block *head;
};

static float *arena_alloc(vae_arena *a, int64_t n) {
    arena_block *blk = vae_malloc(sizeof *blk + (size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!blk) return NULL;
    blk->next = a->head;
    a->head = blk;
    return blk->data;
}

void vae_arena_free(vae_arena *a) {
    if (!a) return;
    for (arena_block *b = a->head, *n; b; b = n) {
        n = b->next;
        vae_free(b);
    }
    vae_free(a);
}

/* ---- builder --------------------------------------------------------------------------------- */
typedef struct synth_rec {
    char *name;
    int ndim;
    int64_t shape[VAE_MAX_DIMS];
    const float *data;
} synth_rec;

struct vae_builder {
    const vae_store *store; /* NULL in synth mode */
    const char *prefix;
    vae_name_map_fn map;
    unsigned char *used; /* per store tensor */
    vae_arena *arena;
    int status;
    int64_t params;
    int tensors;
    synth_rec *recs;
    int n_recs, cap_recs;
    float dummy[1];
};

static int builder_alloc(vae_builder **out) {
    vae_builder *b = vae_calloc(1, sizeof *b);
    if (!b) return vae_fail(VAE_ENOMEM, "out of memory creating a model builder");
    b->arena = vae_calloc(1, sizeof *b->arena);
    if (!b->arena) {
        vae_free(b);
        return vae_fail(VAE_ENOMEM, "out of memory creating a model builder");
    }
    *out = b;
    return VAE_OK;
}

int vae_builder_create_file(vae_builder **out, const vae_store *store, const char *prefix,
                            vae_name_map_fn map) {
    vae_builder *b = NULL;
    int rc = builder_alloc(&b);
    if (rc) return rc;
    b->store = store;
    b->prefix = prefix ? prefix : "";
    b->map = map;
    b->used = vae_calloc((size_t)store->n + 1, 1);
    if (!b->used) {
        vae_builder_free(b);
        return vae_fail(VAE_ENOMEM, "out of memory creating a model builder");
    }
    *out = b;
    return VAE_OK;
}

int vae_builder_create_synth(vae_builder **out) { return builder_alloc(out); }

void vae_builder_free(vae_builder *b) {
    if (!b) return;
    vae_arena_free(b->arena);
    vae_free(b->used);
    for (int i = 0; i < b->n_recs; i++) vae_free(b->recs[i].name);
    vae_free(b->recs);
    vae_free(b);
}

vae_arena *vb_take_arena(vae_builder *b) {
    vae_arena *a = b->arena;
    b->arena = vae_calloc(1, sizeof *b->arena);
    return a;
}

int vb_error(vae_builder *b, int code, const char *fmt, ...) {
    if (b->status == VAE_OK) {
        char msg[768];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        b->status = vae_fail(code, "%s", msg);
    }
    return code;
}

int vb_status(const vae_builder *b) { return b->status; }
int64_t vb_param_count(const vae_builder *b) { return b->params; }
int vb_tensor_count(const vae_builder *b) { return b->tensors; }

float *vb_alloc(vae_builder *b, int64_t n) {
    float *p = arena_alloc(b->arena, n);
    if (!p) vb_error(b, VAE_ENOMEM, "out of memory allocating %lld weights", (long long)n);
    return p;
}

static const char *file_name(const vae_builder *b, const char *name, char *buf, size_t len) {
    char mapped[512];
    const char *m = b->map ? b->map(name, mapped, sizeof mapped) : name;
    snprintf(buf, len, "%s%s", b->prefix, m);
    return buf;
}

int vb_has(vae_builder *b, const char *name) {
    if (!b->store) return 0;
    char key[640];
    return vae_store_find(b->store, file_name(b, name, key, sizeof key)) != NULL;
}

/* Shapes match when equal after dropping trailing 1s (gamma [C,1,1,1] vs [C,1,1] vs [C]). */
static int shapes_match(const int64_t *a, int na, const int64_t *b, int nb) {
    while (na > 1 && a[na - 1] == 1) na--;
    while (nb > 1 && b[nb - 1] == 1) nb--;
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* The file's tensor for a weight: present, of the expected shape, of a type convertible to
 * float32; NULL with the builder's error set otherwise. */
static const vae_store_tensor *find_weight(vae_builder *b, const char *name, int ndim,
                                           const int64_t *shape, char *key, size_t keylen) {
    char sbuf[128], got[128];
    file_name(b, name, key, keylen);
    const vae_store_tensor *t = vae_store_find(b->store, key);
    if (!t) {
        vb_error(b, VAE_EKEY, "%s: missing tensor '%s' (expected shape %s)", b->store->path, key,
                 vae_shape_str(shape, ndim, sbuf, sizeof sbuf));
        return NULL;
    }
    if (!shapes_match(t->shape, t->ndim, shape, ndim)) {
        vb_error(b, VAE_ESHAPE, "%s: tensor '%s' has shape %s, expected %s", b->store->path, key,
                 vae_shape_str(t->shape, t->ndim, got, sizeof got),
                 vae_shape_str(shape, ndim, sbuf, sizeof sbuf));
        return NULL;
    }
    if (!vae_storage_type_size(t->type) && t->type != VAE_ST_Q8_0) {
        vb_error(b, VAE_EDTYPE, "%s: tensor '%s' (%s) cannot be used as weights", b->store->path,
                 key, vae_storage_type_name(t->type));
        return NULL;
    }
    return t;
}

/* The tensor `key` with its last `strip` characters replaced by `tail`, if the file has it */
static const vae_store_tensor *find_beside(const vae_builder *b, const char *key, size_t strip,
                                           const char *tail) {
    char name[700];
    const size_t len = strlen(key), tl = strlen(tail);
    if (len < strip || len - strip + tl >= sizeof name) return NULL;
    memcpy(name, key, len - strip);
    memcpy(name + len - strip, tail, tl + 1);
    return vae_store_find(b->store, name);
}

/* A weight stored in fp8 (F8_E4M3 / F8_E5M2): its codes times the scale the file keeps beside
 * it, as the fp8 checkpoints people make do -- '<x>.scale_weight' (ComfyUI's scaled_fp8) or
 * '<x>.weight_scale' for '<x>.weight', one value or one for each output channel ([c_out] or
 * [c_out, 1, ...]). Without one the codes are the values (a plain cast). The activation scales
 * such files may carry ('<x>.scale_input', '<x>.input_scale') are not needed: each call's input
 * scale is computed from the input (op.h). */
static int fp8_scale(vae_builder *b, const vae_store_tensor *t, const char *key, float *w,
                     int64_t n) {
    static const char *unused[] = {"scale_input", "input_scale"};
    const size_t wl = strlen("weight");
    const int is_weight = strlen(key) >= wl && strcmp(key + strlen(key) - wl, "weight") == 0;
    if ((t->type != VAE_ST_F8_E4M3 && t->type != VAE_ST_F8_E5M2) || !is_weight) return VAE_OK;
    for (size_t i = 0; i < sizeof unused / sizeof *unused; i++) {
        const vae_store_tensor *u = find_beside(b, key, wl, unused[i]);
        if (u) b->used[u - b->store->tensors] = 1;
    }
    const vae_store_tensor *st = find_beside(b, key, wl, "scale_weight");
    if (!st) st = find_beside(b, key, 0, "_scale");
    if (!st) return VAE_OK;
    const int64_t c_out = t->ndim > 0 ? t->shape[0] : 1, ns = vae_shape_numel(st->shape, st->ndim);
    const int per_channel = ns == c_out && ns > 1 && st->shape[0] == c_out;
    const int shape_ok = ns == 1 || per_channel;
    float *s = vae_malloc((size_t)(shape_ok ? ns : 1) * sizeof *s);
    if (!s) return vb_error(b, VAE_ENOMEM, "out of memory");
    int rc = VAE_OK;
    if (!shape_ok || !vae_storage_type_size(st->type) ||
        vae_store_to_f32(b->store, st, s) != VAE_OK)
        rc = vb_error(b, VAE_EFORMAT,
                      "%s: fp8 scale '%s' of '%s': expected one float value or one for each of "
                      "its %lld output channels, got %lld of type %s",
                      b->store->path, st->name, key, (long long)c_out, (long long)ns,
                      vae_storage_type_name(st->type));
    for (int64_t i = 0; rc == VAE_OK && i < ns; i++)
        if (!isfinite(s[i]))
            rc =
                vb_error(b, VAE_ENAN, "%s: fp8 scale '%s' is not finite", b->store->path, st->name);
    for (int64_t i = 0; rc == VAE_OK && i < n; i++)
        w[i] *= s[per_channel ? i / (n / c_out) : 0];
    vae_free(s);
    if (rc == VAE_OK) b->used[st - b->store->tensors] = 1;
    return rc;
}

const float *vb_weight(vae_builder *b, const char *name, int ndim, const int64_t *shape) {
    if (b->status != VAE_OK) return NULL;
    int64_t n = vae_shape_numel(shape, ndim);
    char key[640];
    /* From a file: the tensor is found and checked before its buffer exists, so that a shape or
     * dtype the file gets wrong costs nothing. */
    const vae_store_tensor *t = b->store ? find_weight(b, name, ndim, shape, key, sizeof key) : NULL;
    if (b->store && !t) return NULL;
    float *dst = vb_alloc(b, n);
    if (!dst) return NULL;
    if (!b->store) { /* synth mode */
        vae_synth_fill(name, ndim, shape, dst);
        if (b->n_recs == b->cap_recs) {
            int cap = b->cap_recs ? b->cap_recs * 2 : 256;
            synth_rec *r = vae_realloc(b->recs, (size_t)cap * sizeof *r);
            if (!r) {
                vb_error(b, VAE_ENOMEM, "out of memory");
                return NULL;
            }
            b->recs = r;
            b->cap_recs = cap;
        }
        synth_rec *r = &b->recs[b->n_recs];
        r->name = vae_strdup(name);
        if (!r->name) {
            vb_error(b, VAE_ENOMEM, "out of memory");
            return NULL;
        }
        r->ndim = ndim;
        memcpy(r->shape, shape, (size_t)ndim * sizeof *shape);
        r->data = dst;
        b->n_recs++;
    } else {
        int rc = vae_store_to_f32(b->store, t, dst);
        if (rc) {
            vb_error(b, rc, "%s: tensor '%s' (%s) cannot be used as weights", b->store->path, key,
                     vae_storage_type_name(t->type));
            return NULL;
        }
        if (fp8_scale(b, t, key, dst, n)) return NULL;
        for (int64_t i = 0; i < n; i++) {
            if (!isfinite(dst[i])) {
                vb_error(b, VAE_ENAN, "%s: tensor '%s' contains NaN or Inf (element %lld)",
                         b->store->path, key, (long long)i);
                return NULL;
            }
        }
        b->used[t - b->store->tensors] = 1;
    }
    b->params += n;
    b->tensors++;
    return dst;
}

const float *vb_wf(vae_builder *b, int ndim, const int *shape, const char *fmt, ...) {
    char name[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t s[VAE_MAX_DIMS];
    for (int i = 0; i < ndim; i++) s[i] = shape[i];
    return vb_weight(b, name, ndim, s);
}

int vb_check_all_used(vae_builder *b, const char *arch) {
    if (b->status != VAE_OK || !b->store) return b->status;
    size_t plen = strlen(b->prefix);
    for (int i = 0; i < b->store->n; i++) {
        const vae_store_tensor *t = &b->store->tensors[i];
        if (b->used[i] || strncmp(t->name, b->prefix, plen) != 0) continue;
        /* BatchNorm-style counters and similar bookkeeping carry no weights; nor does ComfyUI's
         * mark of a scaled fp8 file (its scales: fp8_scale). */
        if (t->type == VAE_ST_I64 || t->type == VAE_ST_I32) continue;
        if (strcmp(t->name + plen, "scaled_fp8") == 0) continue;
        return vb_error(b, VAE_EKEY,
                        "%s: unexpected tensor '%s' (not part of the detected %s architecture)",
                        b->store->path, t->name, arch);
    }
    return VAE_OK;
}

int vb_synth_count(const vae_builder *b) { return b->n_recs; }

void vb_synth_get(const vae_builder *b, int i, const char **name, int *ndim, const int64_t **shape,
                  const float **data) {
    *name = b->recs[i].name;
    *ndim = b->recs[i].ndim;
    *shape = b->recs[i].shape;
    *data = b->recs[i].data;
}

/* ---- the synthetic-weight rule (../shared/fixtures/README.md) -------------------------------- */
void vae_synth_fill(const char *name, int ndim, const int64_t *shape, float *dst) {
    uint64_t seed = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        seed ^= *p;
        seed *= 0x100000001b3ull;
    }
    const char *last = strrchr(name, '.');
    last = last ? last + 1 : name;
    int is_norm = strcmp(last, "gamma") == 0 || (strcmp(last, "weight") == 0 && strstr(name, "norm"));
    int is_bias = strcmp(last, "bias") == 0;
    int64_t n = vae_shape_numel(shape, ndim);
    double fan_in = ndim > 0 && shape[0] > 0 ? (double)n / (double)shape[0] : 1.0;
    double gain = sqrt(3.0 / fan_in);
    for (int64_t i = 0; i < n; i++) {
        uint64_t z = seed + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        double u = (double)(z >> 11) * (1.0 / 9007199254740992.0);
        double r = 2.0 * u - 1.0;
        double v = is_norm ? 1.0 + 0.25 * r : is_bias ? 0.1 * r : r * gain;
        dst[i] = (float)v;
    }
}

/* ---- program construction -------------------------------------------------------------------- */
vb_conv_args vb_conv_defaults(int kt, int kh, int kw) {
    vb_conv_args a;
    memset(&a, 0, sizeof a);
    a.kt = kt;
    a.kh = kh;
    a.kw = kw;
    a.st = a.sh = a.sw = 1;
    a.pad_h[0] = a.pad_h[1] = kh / 2;
    a.pad_w[0] = a.pad_w[1] = kw / 2;
    a.residual = -1;
    a.has_bias = 1;
    return a;
}

static int add_op(vae_program *p, vae_op *op) {
    for (int i = 0; i < 2; i++)
        if (op->in[i] < -1 || (i == 0 && op->in[i] < 0)) return -1;
    return vae_program_add(p, op);
}

int vb_conv_raw(vae_program *p, int x, const char *name, const float *w, const float *bias,
                int c_in, int c_out, const vb_conv_args *a) {
    if (x < 0 || !w) return -1;
    vae_op op = vae_op_make(VAE_OP_CONV, x, c_in, c_out);
    op.in[1] = a->residual;
    if (a->residual < -1) return -1;
    op.kt = a->kt, op.kh = a->kh, op.kw = a->kw;
    op.st = a->st, op.sh = a->sh, op.sw = a->sw;
    memcpy(op.pad_h, a->pad_h, sizeof op.pad_h);
    memcpy(op.pad_w, a->pad_w, sizeof op.pad_w);
    op.tpad = a->tpad;
    op.tpad_mode = a->tpad_mode;
    op.up = a->up;
    op.groups = a->groups;
    op.w = w;
    op.b = bias;
    snprintf(op.name, sizeof op.name, "%s", name);
    return add_op(p, &op);
}

int vb_conv(vae_builder *b, vae_program *p, int x, const char *prefix, int c_in, int c_out,
            const vb_conv_args *a, int dims2d) {
    int64_t shape[5] = {c_out, c_in, a->kt, a->kh, a->kw};
    char name[512];
    snprintf(name, sizeof name, "%s.weight", prefix);
    const float *w = dims2d ? vb_weight(b, name, 4, (int64_t[]){c_out, c_in, a->kh, a->kw})
                            : vb_weight(b, name, 5, shape);
    const float *bias = NULL;
    if (a->has_bias) {
        snprintf(name, sizeof name, "%s.bias", prefix);
        bias = vb_weight(b, name, 1, (int64_t[]){c_out});
        if (!bias) return -1;
    }
    return vb_conv_raw(p, x, prefix, w, bias, c_in, c_out, a);
}

static int simple(vae_program *p, vae_op_kind kind, int x, int c_in, int c_out, vae_act act) {
    if (x < 0) return -1;
    vae_op op = vae_op_make(kind, x, c_in, c_out);
    op.act = act;
    return add_op(p, &op);
}

int vb_rms_norm(vae_builder *b, vae_program *p, int x, const char *gamma_name, int c, int gamma_ndim,
                vae_act act) {
    int64_t shape[4] = {c, 1, 1, 1};
    const float *g = vb_weight(b, gamma_name, gamma_ndim, shape);
    if (x < 0 || !g) return -1;
    vae_op op = vae_op_make(VAE_OP_RMS_NORM, x, c, c);
    op.act = act;
    op.w = g;
    snprintf(op.name, sizeof op.name, "%s", gamma_name);
    return add_op(p, &op);
}

int vb_group_norm(vae_builder *b, vae_program *p, int x, const char *prefix, int c, int groups,
                  float eps, vae_act act) {
    char name[512];
    snprintf(name, sizeof name, "%s.weight", prefix);
    const float *w = vb_weight(b, name, 1, (int64_t[]){c});
    snprintf(name, sizeof name, "%s.bias", prefix);
    const float *bias = vb_weight(b, name, 1, (int64_t[]){c});
    return vb_group_norm_raw(b, p, x, prefix, w, bias, c, groups, eps, act);
}

int vb_group_norm_raw(vae_builder *b, vae_program *p, int x, const char *name, const float *w,
                      const float *bias, int c, int groups, float eps, vae_act act) {
    if (x < 0 || !w || !bias) return -1;
    if (groups <= 0 || c % groups) {
        vb_error(b, VAE_ESHAPE, "%s: %d channels do not split into %d groups", name, c, groups);
        return -1;
    }
    vae_op op = vae_op_make(VAE_OP_GROUP_NORM, x, c, c);
    op.act = act;
    op.groups = groups;
    op.eps = eps;
    op.w = w;
    op.b = bias;
    snprintf(op.name, sizeof op.name, "%s", name);
    return add_op(p, &op);
}

int vb_act(vae_program *p, int x, int c, vae_act act, float scale) {
    if (x < 0) return -1;
    vae_op op = vae_op_make(VAE_OP_ACT, x, c, c);
    op.act = act;
    op.act_scale = scale;
    return add_op(p, &op);
}

int vb_add(vae_program *p, int a, int x2, int c, vae_act act) {
    if (a < 0 || x2 < 0) return -1;
    vae_op op = vae_op_make(VAE_OP_ADD, a, c, c);
    op.in[1] = x2;
    op.act = act;
    return add_op(p, &op);
}

int vb_scale_shift(vae_program *p, int x, int c, const float *scale, const float *shift) {
    if (x < 0 || !scale || !shift) return -1;
    vae_op op = vae_op_make(VAE_OP_SCALE_SHIFT, x, c, c);
    op.w = scale;
    op.b = shift;
    return add_op(p, &op);
}

int vb_upsample(vae_program *p, int x, int c, int fs) {
    if (x < 0) return -1;
    vae_op op = vae_op_make(VAE_OP_UPSAMPLE, x, c, c);
    op.fs = fs;
    return add_op(p, &op);
}

int vb_shuffle_up(vae_program *p, int x, int c_in, int c_out, int ft, int fs, int cs_o, int cs_t,
                  int cs_h, int cs_w, int group) {
    if (x < 0) return -1;
    vae_op op = vae_op_make(VAE_OP_SHUFFLE_UP, x, c_in, c_out);
    op.ft = ft, op.fs = fs;
    op.cs_o = cs_o, op.cs_t = cs_t, op.cs_h = cs_h, op.cs_w = cs_w, op.group = group;
    return add_op(p, &op);
}

int vb_shuffle_down(vae_program *p, int x, int c_in, int c_out, int ft, int fs, int cs_o, int cs_t,
                    int cs_h, int cs_w, int group, int tpad) {
    if (x < 0) return -1;
    vae_op op = vae_op_make(VAE_OP_SHUFFLE_DOWN, x, c_in, c_out);
    op.ft = ft, op.fs = fs;
    op.cs_o = cs_o, op.cs_t = cs_t, op.cs_h = cs_h, op.cs_w = cs_w, op.group = group;
    op.kt = op.st = ft;
    op.tpad = tpad;
    return add_op(p, &op);
}

int vb_time_head(vae_program *p, int x, int c, int n) {
    int v = simple(p, VAE_OP_TIME_HEAD, x, c, c, VAE_ACT_NONE);
    if (v >= 0) p->ops[p->n_ops - 1].n = n;
    return v;
}

int vb_time_drop(vae_program *p, int x, int c, int n) {
    int v = simple(p, VAE_OP_TIME_DROP, x, c, c, VAE_ACT_NONE);
    if (v >= 0) p->ops[p->n_ops - 1].n = n;
    return v;
}

int vb_concat_t(vae_program *p, int a, int x2, int c) {
    if (a < 0 || x2 < 0) return -1;
    vae_op op = vae_op_make(VAE_OP_CONCAT_T, a, c, c);
    op.in[1] = x2;
    return add_op(p, &op);
}

int vb_attention(vae_program *p, int qkv, int c, float scale) {
    if (qkv < 0) return -1;
    vae_op op = vae_op_make(VAE_OP_ATTENTION, qkv, 3 * c, c);
    op.scale = scale;
    return add_op(p, &op);
}
