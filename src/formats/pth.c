/* pth.c -- PyTorch checkpoints (torch.save >= 1.6): a zip archive "<dir>/data.pkl" + "<dir>/data/<key>".
 *
 * data.pkl is run through a small pickle VM that knows only what torch.save writes for tensors and
 * (nested) dicts of tensors; any other opcode or global is refused with VAE_EUNSUPPORTED, so a
 * checkpoint can never make us execute or construct anything else. Tensors are
 *   torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])
 *   torch._utils._rebuild_tensor_v3(..., dtype[, metadata])        (dtypes without a storage class)
 * with storage = BINPERSID(('storage', torch.HalfStorage, key, location, numel)) whose bytes are the
 * zip entry "<dir>/data/<key>". Nested dicts are flattened into '.'-joined names; a bare tensor at
 * the top level becomes one tensor named "". Non-tensor leaves (epoch counters, ...) are skipped. */
#include "formats/store.h"

#include "core/core.h"
#include "formats/limits.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_TUPLE, PK_LIST, PK_DICT, PK_GLOBAL, PK_STORAGE, PK_TENSOR } pk_kind;
static const char *kind_name[] = {"None", "bool", "int", "float", "str", "tuple", "list", "dict", "global", "storage", "tensor"};

/* The globals we accept. */
typedef enum { G_ODICT, G_REBUILD_V2, G_REBUILD_V3, G_REBUILD_PARAM, G_STORAGE_TYPE, G_DTYPE } pk_global;

typedef struct pk_obj {
    pk_kind kind;
    int64_t i;                /* INT, BOOL */
    const char *s;            /* STR: bytes in the pickle, not NUL-terminated */
    size_t slen;
    struct pk_obj **items;    /* TUPLE, LIST; DICT: key, value, key, value, ... */
    size_t n, cap;
    pk_global g;              /* GLOBAL */
    vae_storage_type st;      /* GLOBAL storage type or dtype; TENSOR */
    size_t elsize;            /* GLOBAL storage type or dtype; TENSOR */
    const uint8_t *data;      /* STORAGE, TENSOR */
    uint64_t nbytes;          /* STORAGE, TENSOR */
    const char *key;          /* STORAGE key (for messages), points into the pickle */
    size_t keylen;
    int ndim;                 /* TENSOR */
    int64_t shape[VAE_MAX_DIMS];
} pk_obj;

typedef struct pk_vm {
    vae_store *s;
    vae_zip *z;
    const char *prefix; /* "<dir>/" of data.pkl */
    size_t prefix_len;
    const uint8_t *start, *p, *end;
    pk_obj **objs; /* every object, for freeing */
    size_t nobjs, capobjs;
    pk_obj **stack;
    size_t sp, capstack;
    size_t *marks;
    size_t nmarks, capmarks;
    pk_obj **memo;
    size_t capmemo, nmemo;
    const uint8_t **inflated; /* per zip entry, so that a shared deflated storage inflates once */
    long visited;             /* nodes visited while flattening (bounds DAG blow-up) */
    uint64_t heap;            /* bytes the VM has allocated, against VAE_PICKLE_MAX_HEAP */
    int over_budget;          /* set when an allocation was refused for the heap bound */
    uint64_t storage_bytes;   /* bytes of the distinct storages referenced so far */
    uint64_t gathered;        /* bytes copied out of strided views so far */
} pk_vm;

/* Fails with the file name and the position in data.pkl. */
static int pk_fail(pk_vm *vm, int code, const char *fmt, ...) VAE_PRINTF(3, 4);
static int pk_fail(pk_vm *vm, int code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return vae_fail(code, "%s: data.pkl byte %ld: %s", vm->s->path, (long)(vm->p - vm->start), msg);
}

/* Counts bytes against the VM's heap bound; 0 when they fit. A pickle can create an object per
 * byte, so this (not the pickle size alone) is what keeps its memory in proportion. */
static int charge(pk_vm *vm, uint64_t bytes) {
    if (vm->heap + bytes > VAE_PICKLE_MAX_HEAP) {
        vm->over_budget = 1;
        return -1;
    }
    vm->heap += bytes;
    return 0;
}

/* Grows *arr (of elements of size el) to hold at least want elements. */
static int grow(pk_vm *vm, void **arr, size_t *cap, size_t want, size_t el) {
    if (want <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < want) c *= 2;
    if (charge(vm, (uint64_t)(c - *cap) * el)) return -1;
    void *a = vae_realloc(*arr, c * el);
    if (!a) return -1;
    *arr = a;
    *cap = c;
    return 0;
}

static pk_obj *pk_new(pk_vm *vm, pk_kind kind) {
    if (grow(vm, (void **)&vm->objs, &vm->capobjs, vm->nobjs + 1, sizeof(pk_obj *))) return NULL;
    if (charge(vm, sizeof(pk_obj) + 16)) return NULL; /* + the allocator's own header */
    pk_obj *o = vae_calloc(1, sizeof *o);
    if (!o) return NULL;
    o->kind = kind;
    vm->objs[vm->nobjs++] = o;
    return o;
}

static int pk_append(pk_vm *vm, pk_obj *c, pk_obj *v) {
    if (grow(vm, (void **)&c->items, &c->cap, c->n + 1, sizeof(pk_obj *))) return -1;
    c->items[c->n++] = v;
    return 0;
}

/* An allocation failed: for real, or refused by the heap bound (then the pickle is the problem). */
static int pk_nomem(pk_vm *vm) {
    if (vm->over_budget)
        return pk_fail(vm, VAE_EUNSUPPORTED, "unpickling needs more than %llu MiB (%zu objects so far): not a "
                       "state dict of tensors", (unsigned long long)(VAE_PICKLE_MAX_HEAP >> 20), vm->nobjs);
    return pk_fail(vm, VAE_ENOMEM, "out of memory");
}
#define NOMEM() pk_nomem(vm)

static int push(pk_vm *vm, pk_obj *o) {
    if (!o) return NOMEM();
    if (grow(vm, (void **)&vm->stack, &vm->capstack, vm->sp + 1, sizeof(pk_obj *))) return NOMEM();
    vm->stack[vm->sp++] = o;
    return VAE_OK;
}

static int pop(pk_vm *vm, pk_obj **o) {
    size_t floor = vm->nmarks ? vm->marks[vm->nmarks - 1] : 0;
    if (vm->sp <= floor) return pk_fail(vm, VAE_EFORMAT, "pickle stack underflow");
    *o = vm->stack[--vm->sp];
    return VAE_OK;
}

/* Pops everything above the last MARK into a new TUPLE/LIST object. */
static int pop_mark(pk_vm *vm, pk_kind kind, pk_obj **out) {
    if (!vm->nmarks) return pk_fail(vm, VAE_EFORMAT, "pickle MARK missing");
    size_t m = vm->marks[--vm->nmarks];
    pk_obj *t = pk_new(vm, kind);
    if (!t) return NOMEM();
    for (size_t i = m; i < vm->sp; i++)
        if (pk_append(vm, t, vm->stack[i])) return NOMEM();
    vm->sp = m;
    *out = t;
    return VAE_OK;
}

static int need(pk_vm *vm, uint64_t n) {
    if ((uint64_t)(vm->end - vm->p) < n) return pk_fail(vm, VAE_EFORMAT, "pickle truncated");
    return VAE_OK;
}

static uint64_t rd_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* ---- globals ---- */

static const struct { const char *name; vae_storage_type st; size_t size; } storage_types[] = {
    {"FloatStorage", VAE_ST_F32, 4},   {"HalfStorage", VAE_ST_F16, 2},    {"BFloat16Storage", VAE_ST_BF16, 2},
    {"DoubleStorage", VAE_ST_F64, 8},  {"LongStorage", VAE_ST_I64, 8},    {"IntStorage", VAE_ST_I32, 4},
    {"ShortStorage", VAE_ST_OTHER, 2}, {"CharStorage", VAE_ST_OTHER, 1},  {"ByteStorage", VAE_ST_OTHER, 1},
    {"BoolStorage", VAE_ST_OTHER, 1},  {"ComplexFloatStorage", VAE_ST_OTHER, 8},
    {"ComplexDoubleStorage", VAE_ST_OTHER, 16}, {"UntypedStorage", VAE_ST_OTHER, 1},
};
static const struct { const char *name; vae_storage_type st; size_t size; } dtypes[] = {
    {"float32", VAE_ST_F32, 4},  {"float", VAE_ST_F32, 4},      {"float16", VAE_ST_F16, 2},
    {"half", VAE_ST_F16, 2},     {"bfloat16", VAE_ST_BF16, 2},  {"float64", VAE_ST_F64, 8},
    {"double", VAE_ST_F64, 8},   {"float8_e4m3fn", VAE_ST_F8_E4M3, 1}, {"float8_e5m2", VAE_ST_F8_E5M2, 1},
    {"int64", VAE_ST_I64, 8},    {"long", VAE_ST_I64, 8},       {"int32", VAE_ST_I32, 4},
    {"int", VAE_ST_I32, 4},      {"int16", VAE_ST_OTHER, 2},    {"int8", VAE_ST_OTHER, 1},
    {"uint8", VAE_ST_OTHER, 1},  {"bool", VAE_ST_OTHER, 1},     {"uint16", VAE_ST_OTHER, 2},
    {"uint32", VAE_ST_OTHER, 4}, {"uint64", VAE_ST_OTHER, 8},   {"float8_e4m3fnuz", VAE_ST_OTHER, 1},
    {"float8_e5m2fnuz", VAE_ST_OTHER, 1},
};

static int eq(const char *a, size_t alen, const char *b) { return alen == strlen(b) && !memcmp(a, b, alen); }

static int make_global(pk_vm *vm, const char *mod, size_t ml, const char *name, size_t nl) {
    pk_obj *o = pk_new(vm, PK_GLOBAL);
    if (!o) return NOMEM();
    if (eq(mod, ml, "collections") && eq(name, nl, "OrderedDict")) o->g = G_ODICT;
    else if (eq(mod, ml, "torch._utils") && eq(name, nl, "_rebuild_tensor_v2")) o->g = G_REBUILD_V2;
    else if (eq(mod, ml, "torch._utils") && eq(name, nl, "_rebuild_tensor_v3")) o->g = G_REBUILD_V3;
    else if (eq(mod, ml, "torch._utils") && eq(name, nl, "_rebuild_parameter")) o->g = G_REBUILD_PARAM;
    else {
        int found = 0;
        if (eq(mod, ml, "torch") || eq(mod, ml, "torch.storage"))
            for (size_t i = 0; !found && i < sizeof storage_types / sizeof *storage_types; i++)
                if (eq(name, nl, storage_types[i].name)) {
                    o->g = G_STORAGE_TYPE, o->st = storage_types[i].st, o->elsize = storage_types[i].size;
                    found = 1;
                }
        if (eq(mod, ml, "torch"))
            for (size_t i = 0; !found && i < sizeof dtypes / sizeof *dtypes; i++)
                if (eq(name, nl, dtypes[i].name)) {
                    o->g = G_DTYPE, o->st = dtypes[i].st, o->elsize = dtypes[i].size;
                    found = 1;
                }
        if (!found)
            return pk_fail(vm, VAE_EUNSUPPORTED, "pickle global '%.*s.%.*s' is not supported (only state dicts of tensors)",
                           (int)(ml > 100 ? 100 : ml), mod, (int)(nl > 100 ? 100 : nl), name);
    }
    return push(vm, o);
}

/* ---- persistent ids and tensors ---- */

/* ('storage', <storage type>, key, location, numel) -> the bytes of "<dir>/data/<key>". */
static int persistent_load(pk_vm *vm, pk_obj *pid, pk_obj **out) {
    if (pid->kind != PK_TUPLE || pid->n < 5 || pid->items[0]->kind != PK_STR ||
        !eq(pid->items[0]->s, pid->items[0]->slen, "storage") || pid->items[1]->kind != PK_GLOBAL ||
        pid->items[1]->g != G_STORAGE_TYPE || pid->items[2]->kind != PK_STR || pid->items[4]->kind != PK_INT)
        return pk_fail(vm, VAE_EUNSUPPORTED, "persistent id is not ('storage', type, key, location, numel)");
    pk_obj *key = pid->items[2], *type = pid->items[1];
    char ename[1024];
    if (vm->prefix_len + 5 + key->slen >= sizeof ename) return pk_fail(vm, VAE_EFORMAT, "storage key too long");
    memcpy(ename, vm->prefix, vm->prefix_len);
    memcpy(ename + vm->prefix_len, "data/", 5);
    memcpy(ename + vm->prefix_len + 5, key->s, key->slen);
    size_t elen = vm->prefix_len + 5 + key->slen;
    const vae_zip_entry *e = vae_zip_find(vm->z, ename, elen);
    if (!e) return pk_fail(vm, VAE_EFORMAT, "storage record '%.*s' is missing from the archive", (int)elen, ename);
    size_t ei = (size_t)(e - vm->z->entries);
    if (!vm->inflated[ei]) { /* first reference: the storage's bytes count once toward the view budget */
        int rc = vae_zip_extract(vm->s, e, &vm->inflated[ei]);
        if (rc) return rc;
        vm->storage_bytes += e->usize;
    }
    int64_t numel = pid->items[4]->i;
    if (numel < 0 || (uint64_t)numel > e->usize / type->elsize)
        return pk_fail(vm, VAE_EFORMAT, "storage '%.*s' claims %lld elements of %zu bytes but its record has %llu bytes",
                       (int)key->slen, key->s, (long long)numel, type->elsize, (unsigned long long)e->usize);
    pk_obj *st = pk_new(vm, PK_STORAGE);
    if (!st) return NOMEM();
    st->data = vm->inflated[ei];
    st->nbytes = e->usize;
    st->st = type->st;
    st->elsize = type->elsize;
    st->key = key->s;
    st->keylen = key->slen;
    *out = st;
    return VAE_OK;
}

static int int_tuple(pk_obj *t, int64_t *v, int max) {
    if ((t->kind != PK_TUPLE && t->kind != PK_LIST) || t->n > (size_t)max) return -1;
    for (size_t i = 0; i < t->n; i++) {
        if (t->items[i]->kind != PK_INT || t->items[i]->i < 0) return -1;
        v[i] = t->items[i]->i;
    }
    return (int)t->n;
}

/* _rebuild_tensor_v2/v3: a view (offset, size, stride, in elements) into a storage. Contiguous
 * views point into the storage; others are gathered into an owned contiguous copy. */
static int rebuild_tensor(pk_vm *vm, pk_obj *args, int v3, pk_obj **out) {
    if (args->n < (v3 ? 7u : 4u) || args->items[0]->kind != PK_STORAGE || args->items[1]->kind != PK_INT ||
        (v3 && (args->items[6]->kind != PK_GLOBAL || args->items[6]->g != G_DTYPE)))
        return pk_fail(vm, VAE_EFORMAT, "_rebuild_tensor arguments are not (storage, offset, size, stride, ...)");
    pk_obj *st = args->items[0];
    int64_t shape[VAE_MAX_DIMS], stride[VAE_MAX_DIMS], offset = args->items[1]->i, numel;
    int nd = int_tuple(args->items[2], shape, VAE_MAX_DIMS), ns = int_tuple(args->items[3], stride, VAE_MAX_DIMS);
    if (nd < 0 || ns != nd || offset < 0)
        return pk_fail(vm, VAE_EFORMAT, "tensor in storage '%.*s': bad size/stride/offset (or more than %d dims)",
                       (int)st->keylen, st->key, VAE_MAX_DIMS);
    pk_obj *t = pk_new(vm, PK_TENSOR);
    if (!t) return NOMEM();
    t->st = v3 ? args->items[6]->st : st->st;
    t->elsize = v3 ? args->items[6]->elsize : st->elsize;
    t->ndim = nd;
    memcpy(t->shape, shape, sizeof shape);
    if (vae_shape_checked_numel(shape, nd, &numel) != 0)
        return pk_fail(vm, VAE_EFORMAT, "tensor in storage '%.*s': shape overflows", (int)st->keylen, st->key);
    uint64_t es = t->elsize, cap = st->nbytes / es;
    if (numel == 0) {
        t->data = st->data;
        t->nbytes = 0;
        *out = t;
        return VAE_OK;
    }
    /* The highest element touched, offset + sum (size-1)*stride, must lie inside the storage;
     * each step is checked before it is added so that nothing overflows. */
    uint64_t last = (uint64_t)offset;
    int contiguous = 1, inside = last < cap;
    int64_t expect = 1;
    for (int d = nd - 1; d >= 0 && inside; d--) {
        if (shape[d] != 1 && stride[d] != expect) contiguous = 0;
        expect *= shape[d]; /* <= numel: no overflow */
        uint64_t span = (uint64_t)(shape[d] - 1);
        if (stride[d] && span > (cap - 1 - last) / (uint64_t)stride[d]) inside = 0;
        else last += span * (uint64_t)stride[d];
    }
    if (!inside)
        return pk_fail(vm, VAE_EFORMAT, "tensor view (offset %lld, shape and stride given) reaches past the end of "
                       "storage '%.*s' (%llu elements)", (long long)offset, (int)st->keylen, st->key, (unsigned long long)cap);
    t->nbytes = (uint64_t)numel * es;
    if (contiguous) {
        t->data = st->data + (uint64_t)offset * es;
    } else { /* gather element by element with an n-d counter */
        /* Zero or overlapping strides can name far more elements than the storage holds: the
         * copies are bounded by the storage bytes present (limits.h), numel by cap * stride
         * products otherwise. */
        uint64_t budget = VAE_VIEW_COPY_FACTOR * vm->storage_bytes + VAE_VIEW_COPY_SLACK;
        if ((uint64_t)numel > UINT64_MAX / es || t->nbytes > budget - (vm->gathered < budget ? vm->gathered : budget))
            return pk_fail(vm, VAE_EUNSUPPORTED, "strided view of storage '%.*s' (%llu bytes) would copy %llu bytes, "
                           "%llu already copied: zero or overlapping strides repeat more data than the file holds "
                           "(at most %ux its %llu storage bytes + 1 MiB)", (int)st->keylen, st->key,
                           (unsigned long long)st->nbytes, (unsigned long long)t->nbytes, (unsigned long long)vm->gathered,
                           VAE_VIEW_COPY_FACTOR, (unsigned long long)vm->storage_bytes);
        vm->gathered += t->nbytes;
        uint8_t *dst = vae_store_owned_alloc(vm->s, (size_t)t->nbytes);
        if (!dst) return NOMEM();
        int64_t idx[VAE_MAX_DIMS] = {0};
        uint64_t src = (uint64_t)offset;
        for (int64_t k = 0; k < numel; k++) {
            memcpy(dst + (uint64_t)k * es, st->data + src * es, (size_t)es);
            for (int d = nd - 1; d >= 0; d--) {
                if (++idx[d] < shape[d]) {
                    src += (uint64_t)stride[d];
                    break;
                }
                src -= (uint64_t)stride[d] * (uint64_t)(shape[d] - 1);
                idx[d] = 0;
            }
        }
        t->data = dst;
    }
    *out = t;
    return VAE_OK;
}

static int reduce(pk_vm *vm) {
    pk_obj *args = NULL, *fn = NULL, *r = NULL;
    int rc;
    if ((rc = pop(vm, &args)) || (rc = pop(vm, &fn))) return rc;
    if (fn->kind != PK_GLOBAL || args->kind != PK_TUPLE)
        return pk_fail(vm, VAE_EUNSUPPORTED, "REDUCE of a %s with a %s", kind_name[fn->kind], kind_name[args->kind]);
    switch (fn->g) {
    case G_ODICT:
        if (args->n) return pk_fail(vm, VAE_EUNSUPPORTED, "OrderedDict() with arguments");
        r = pk_new(vm, PK_DICT);
        break;
    case G_REBUILD_V2:
    case G_REBUILD_V3:
        if ((rc = rebuild_tensor(vm, args, fn->g == G_REBUILD_V3, &r))) return rc;
        break;
    case G_REBUILD_PARAM: /* nn.Parameter(data, requires_grad, hooks): keep the data */
        if (!args->n || args->items[0]->kind != PK_TENSOR) return pk_fail(vm, VAE_EFORMAT, "_rebuild_parameter without a tensor");
        r = args->items[0];
        break;
    default:
        return pk_fail(vm, VAE_EUNSUPPORTED, "calling a torch storage type or dtype");
    }
    return push(vm, r);
}

static int memo_put(pk_vm *vm, uint64_t idx) {
    if (!vm->sp) return pk_fail(vm, VAE_EFORMAT, "memo put on an empty stack");
    /* Every memo entry costs at least one opcode byte, so a valid index is below the pickle size. */
    if (idx > (uint64_t)(vm->end - vm->start)) return pk_fail(vm, VAE_EFORMAT, "memo index %llu too large", (unsigned long long)idx);
    size_t old = vm->capmemo;
    if (grow(vm, (void **)&vm->memo, &vm->capmemo, (size_t)idx + 1, sizeof(pk_obj *))) return NOMEM();
    memset(vm->memo + old, 0, (vm->capmemo - old) * sizeof(pk_obj *));
    if (!vm->memo[idx]) vm->nmemo++;
    vm->memo[idx] = vm->stack[vm->sp - 1];
    return VAE_OK;
}

static int memo_get(pk_vm *vm, uint64_t idx) {
    if (idx >= vm->capmemo || !vm->memo[idx]) return pk_fail(vm, VAE_EFORMAT, "memo index %llu not set", (unsigned long long)idx);
    return push(vm, vm->memo[idx]);
}

static int push_str(pk_vm *vm, uint64_t len) {
    int rc = need(vm, len);
    if (rc) return rc;
    pk_obj *o = pk_new(vm, PK_STR);
    if (!o) return NOMEM();
    o->s = (const char *)vm->p;
    o->slen = (size_t)len;
    vm->p += len;
    return push(vm, o);
}

static int push_int(pk_vm *vm, int64_t v) {
    pk_obj *o = pk_new(vm, PK_INT);
    if (o) o->i = v;
    return push(vm, o);
}

/* Runs the pickle VM; *result is the object left by STOP. */
static int run_pickle(pk_vm *vm, pk_obj **result) {
    int rc = VAE_OK;
    pk_obj *a = NULL, *b = NULL, *c = NULL;
    while (rc == VAE_OK) {
        if ((rc = need(vm, 1))) return rc;
        uint8_t op = *vm->p++;
        switch (op) {
        case 0x80: rc = need(vm, 1); vm->p += !rc; break;         /* PROTO n */
        case 0x95: rc = need(vm, 8); if (!rc) vm->p += 8; break;  /* FRAME len: advisory */
        case '.':                                                 /* STOP */
            if ((rc = pop(vm, result))) return rc;
            return VAE_OK;
        case '(':                                                 /* MARK */
            if (grow(vm, (void **)&vm->marks, &vm->capmarks, vm->nmarks + 1, sizeof(size_t))) return NOMEM();
            vm->marks[vm->nmarks++] = vm->sp;
            break;
        case '}': rc = push(vm, pk_new(vm, PK_DICT)); break;      /* EMPTY_DICT */
        case ']': rc = push(vm, pk_new(vm, PK_LIST)); break;      /* EMPTY_LIST */
        case ')': rc = push(vm, pk_new(vm, PK_TUPLE)); break;     /* EMPTY_TUPLE */
        case 'N': rc = push(vm, pk_new(vm, PK_NONE)); break;      /* NONE */
        case 0x88: case 0x89:                                     /* NEWTRUE, NEWFALSE */
            if ((a = pk_new(vm, PK_BOOL))) a->i = op == 0x88;
            rc = push(vm, a);
            break;
        case 'X': if (!(rc = need(vm, 4))) { vm->p += 4; rc = push_str(vm, rd_le(vm->p - 4, 4)); } break; /* BINUNICODE */
        case 0x8c: if (!(rc = need(vm, 1))) { vm->p += 1; rc = push_str(vm, vm->p[-1]); } break;          /* SHORT_BINUNICODE */
        case 0x8d: if (!(rc = need(vm, 8))) { vm->p += 8; rc = push_str(vm, rd_le(vm->p - 8, 8)); } break; /* BINUNICODE8 */
        case 'C': if (!(rc = need(vm, 1))) { vm->p += 1; rc = push_str(vm, vm->p[-1]); } break;           /* SHORT_BINBYTES */
        case 'B': if (!(rc = need(vm, 4))) { vm->p += 4; rc = push_str(vm, rd_le(vm->p - 4, 4)); } break; /* BINBYTES */
        case 'J': if (!(rc = need(vm, 4))) { vm->p += 4; rc = push_int(vm, (int32_t)(uint32_t)rd_le(vm->p - 4, 4)); } break;
        case 'K': if (!(rc = need(vm, 1))) { vm->p += 1; rc = push_int(vm, vm->p[-1]); } break;
        case 'M': if (!(rc = need(vm, 2))) { vm->p += 2; rc = push_int(vm, (int64_t)rd_le(vm->p - 2, 2)); } break;
        case 0x8a: {                                              /* LONG1: n-byte two's complement */
            if ((rc = need(vm, 1))) break;
            int n = *vm->p++;
            if (n > 8) { rc = pk_fail(vm, VAE_EUNSUPPORTED, "integer of %d bytes", n); break; }
            if ((rc = need(vm, (uint64_t)n))) break;
            uint64_t v = n ? rd_le(vm->p, n) : 0;
            if (n && n < 8 && (vm->p[n - 1] & 0x80)) v |= ~UINT64_C(0) << (8 * n); /* sign-extend */
            vm->p += n;
            int64_t sv;
            memcpy(&sv, &v, 8);
            rc = push_int(vm, sv);
            break;
        }
        case 'G':                                                 /* BINFLOAT: never tensor data, value unused */
            if ((rc = need(vm, 8))) break;
            vm->p += 8;
            rc = push(vm, pk_new(vm, PK_FLOAT));
            break;
        case 't': if (!(rc = pop_mark(vm, PK_TUPLE, &a))) rc = push(vm, a); break; /* TUPLE */
        case 0x85: case 0x86: case 0x87: {                        /* TUPLE1/2/3 */
            int n = op - 0x84;
            pk_obj *it[3];
            for (int i = n - 1; i >= 0 && !rc; i--) rc = pop(vm, &it[i]);
            if (rc) break;
            if (!(a = pk_new(vm, PK_TUPLE))) return NOMEM();
            for (int i = 0; i < n; i++)
                if (pk_append(vm, a, it[i])) return NOMEM();
            rc = push(vm, a);
            break;
        }
        case 'c': {                                               /* GLOBAL "module\nname\n" */
            const uint8_t *m = vm->p, *nl1 = memchr(m, '\n', (size_t)(vm->end - m));
            const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(vm->end - nl1 - 1)) : NULL;
            if (!nl2) return pk_fail(vm, VAE_EFORMAT, "GLOBAL truncated");
            vm->p = nl2 + 1;
            rc = make_global(vm, (const char *)m, (size_t)(nl1 - m), (const char *)nl1 + 1, (size_t)(nl2 - nl1 - 1));
            break;
        }
        case 0x93:                                                /* STACK_GLOBAL */
            if ((rc = pop(vm, &b)) || (rc = pop(vm, &a))) break;
            if (a->kind != PK_STR || b->kind != PK_STR) return pk_fail(vm, VAE_EFORMAT, "STACK_GLOBAL needs two strings");
            rc = make_global(vm, a->s, a->slen, b->s, b->slen);
            break;
        case 'R': rc = reduce(vm); break;                         /* REDUCE */
        case 'b': rc = pop(vm, &a); if (!rc && !vm->sp) rc = pk_fail(vm, VAE_EFORMAT, "BUILD on an empty stack"); break;
            /* BUILD: the state is attributes (e.g. a state dict's _metadata), not items: dropped */
        case 'Q':                                                 /* BINPERSID */
            if ((rc = pop(vm, &a)) || (rc = persistent_load(vm, a, &b))) break;
            rc = push(vm, b);
            break;
        case 'q': if (!(rc = need(vm, 1))) { vm->p += 1; rc = memo_put(vm, vm->p[-1]); } break;           /* BINPUT */
        case 'r': if (!(rc = need(vm, 4))) { vm->p += 4; rc = memo_put(vm, rd_le(vm->p - 4, 4)); } break; /* LONG_BINPUT */
        case 0x94: rc = memo_put(vm, vm->nmemo); break;                                                   /* MEMOIZE */
        case 'h': if (!(rc = need(vm, 1))) { vm->p += 1; rc = memo_get(vm, vm->p[-1]); } break;           /* BINGET */
        case 'j': if (!(rc = need(vm, 4))) { vm->p += 4; rc = memo_get(vm, rd_le(vm->p - 4, 4)); } break; /* LONG_BINGET */
        case 's':                                                 /* SETITEM */
            if ((rc = pop(vm, &b)) || (rc = pop(vm, &a))) break;
            if (!vm->sp || (c = vm->stack[vm->sp - 1])->kind != PK_DICT) return pk_fail(vm, VAE_EFORMAT, "SETITEM on a non-dict");
            if (pk_append(vm, c, a) || pk_append(vm, c, b)) return NOMEM();
            break;
        case 'u': case 'e': {                                     /* SETITEMS, APPENDS */
            if ((rc = pop_mark(vm, PK_LIST, &a))) break;
            c = vm->sp ? vm->stack[vm->sp - 1] : NULL;
            if (!c || c->kind != (op == 'u' ? PK_DICT : PK_LIST) || (op == 'u' && a->n % 2))
                return pk_fail(vm, VAE_EFORMAT, "%s on a %s", op == 'u' ? "SETITEMS" : "APPENDS", c ? kind_name[c->kind] : "empty stack");
            for (size_t i = 0; i < a->n; i++)
                if (pk_append(vm, c, a->items[i])) return NOMEM();
            break;
        }
        case 'a':                                                 /* APPEND */
            if ((rc = pop(vm, &a))) break;
            if (!vm->sp || (c = vm->stack[vm->sp - 1])->kind != PK_LIST) return pk_fail(vm, VAE_EFORMAT, "APPEND on a non-list");
            if (pk_append(vm, c, a)) return NOMEM();
            break;
        case '0': rc = pop(vm, &a); break;                        /* POP */
        case '1':                                                 /* POP_MARK */
            if (!vm->nmarks) return pk_fail(vm, VAE_EFORMAT, "POP_MARK without MARK");
            vm->sp = vm->marks[--vm->nmarks];
            break;
        case '2':                                                 /* DUP */
            if (!vm->sp) return pk_fail(vm, VAE_EFORMAT, "DUP on an empty stack");
            rc = push(vm, vm->stack[vm->sp - 1]);
            break;
        default:
            vm->p--;
            /* A byte that no pickle protocol defines means a damaged file; a real opcode that
             * state dicts never use is merely unsupported. */
            if (!strchr("().012BCFGIJKLMNPQRSTUVXabcdeghijlopqrstu}]\x80\x81\x82\x83\x84\x85\x86"
                        "\x87\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f\x90\x91\x92\x93\x94\x95"
                        "\x96\x97\x98", op) || op == 0)
                return pk_fail(vm, VAE_EFORMAT, "pickle byte 0x%02x is not an opcode (corrupt file)", op);
            return pk_fail(vm, VAE_EUNSUPPORTED, "pickle opcode 0x%02x ('%c') is not supported", op, op >= 32 && op < 127 ? op : '?');
        }
    }
    return rc;
}

/* ---- flattening the result into named tensors ---- */

static int flatten(pk_vm *vm, pk_obj *o, char *name, size_t len, int depth) {
    if (++vm->visited > VAE_PICKLE_MAX_VISITS || depth > VAE_PICKLE_MAX_DEPTH)
        return vae_fail(VAE_EFORMAT, "%s: pickle structure too deep or too large (cyclic?)", vm->s->path);
    if (o->kind == PK_TENSOR)
        return vae_store_add(vm->s, name, len, o->st, o->ndim, o->shape, o->data, (size_t)o->nbytes);
    if (o->kind != PK_DICT && o->kind != PK_LIST && o->kind != PK_TUPLE) return VAE_OK; /* non-tensor leaf */
    int dict = o->kind == PK_DICT;
    for (size_t i = 0; i < o->n; i += dict ? 2 : 1) {
        pk_obj *k = dict ? o->items[i] : NULL, *v = o->items[i + dict];
        char part[32];
        const char *ps = part;
        size_t pl;
        if (!dict) pl = (size_t)snprintf(part, sizeof part, "%zu", i);
        else if (k->kind == PK_STR) ps = k->s, pl = k->slen;
        else if (k->kind == PK_INT) pl = (size_t)snprintf(part, sizeof part, "%lld", (long long)k->i);
        else continue; /* keys of other types name no tensor we could look up */
        size_t nl = len + (len ? 1 : 0) + pl;
        if (nl >= 4096) return vae_fail(VAE_EFORMAT, "%s: tensor name longer than 4096 bytes", vm->s->path);
        if (len) name[len] = '.';
        memcpy(name + len + (len ? 1 : 0), ps, pl);
        int rc = flatten(vm, v, name, nl, depth + 1);
        if (rc) return rc;
    }
    return VAE_OK;
}

int vae_pth_parse(vae_store *s) {
    vae_zip z;
    int rc = vae_zip_open(&z, s);
    if (rc) return rc;
    pk_vm vm;
    memset(&vm, 0, sizeof vm);
    vm.s = s;
    vm.z = &z;
    /* The pickle is "<dir>/data.pkl" with a single folder level; storages are "<dir>/data/<key>". */
    const vae_zip_entry *pkl = NULL;
    for (int i = 0; i < z.n && !pkl; i++) {
        const vae_zip_entry *e = &z.entries[i];
        const char *slash = memchr(e->name, '/', e->name_len);
        if (slash && eq(slash + 1, e->name_len - (size_t)(slash + 1 - e->name), "data.pkl")) pkl = e;
    }
    if (!pkl) {
        vae_zip_close(&z);
        return vae_fail(VAE_EFORMAT, "%s: zip archive without '<dir>/data.pkl': not a PyTorch checkpoint", s->path);
    }
    vm.prefix = pkl->name;
    vm.prefix_len = pkl->name_len - strlen("data.pkl");
    char bo[256];
    if (vm.prefix_len + 9 < sizeof bo) { /* "<dir>/byteorder" holds "little" or "big" */
        memcpy(bo, vm.prefix, vm.prefix_len);
        memcpy(bo + vm.prefix_len, "byteorder", 9);
        const vae_zip_entry *e = vae_zip_find(&z, bo, vm.prefix_len + 9);
        const uint8_t *d = NULL;
        if (e && (rc = vae_zip_extract(s, e, &d)) == VAE_OK && !eq((const char *)d, (size_t)e->usize, "little"))
            rc = vae_fail(VAE_EUNSUPPORTED, "%s: PyTorch checkpoint byte order is '%.*s', not little-endian", s->path,
                          (int)(e->usize > 16 ? 16 : e->usize), (const char *)d);
        if (rc) {
            vae_zip_close(&z);
            return rc;
        }
    }
    vm.inflated = vae_calloc((size_t)(z.n ? z.n : 1), sizeof *vm.inflated);
    const uint8_t *pk = NULL;
    if (!vm.inflated) rc = vae_fail(VAE_ENOMEM, "%s: out of memory", s->path);
    /* Its size is known before inflating: a pickle beyond the bound (limits.h) is refused unread. */
    if (!rc && pkl->usize > VAE_PICKLE_MAX_BYTES)
        rc = vae_fail(VAE_EUNSUPPORTED, "%s: '%.*s' is %llu bytes (at most %llu MiB): a state dict's pickle holds only "
                      "names and shapes", s->path, (int)pkl->name_len, pkl->name, (unsigned long long)pkl->usize,
                      (unsigned long long)(VAE_PICKLE_MAX_BYTES >> 20));
    if (!rc) rc = vae_zip_extract(s, pkl, &pk);
    pk_obj *root = NULL;
    if (!rc) {
        vm.start = vm.p = pk;
        vm.end = pk + pkl->usize;
        rc = run_pickle(&vm, &root);
    }
    if (!rc) {
        if (root->kind == PK_TENSOR || root->kind == PK_DICT) {
            char name[4096];
            rc = flatten(&vm, root, name, 0, 0);
        } else {
            rc = vae_fail(VAE_EFORMAT, "%s: the pickle holds a %s, not a tensor or a dict of tensors", s->path,
                          kind_name[root->kind]);
        }
    }
    for (size_t i = 0; i < vm.nobjs; i++) {
        vae_free(vm.objs[i]->items);
        vae_free(vm.objs[i]);
    }
    vae_free(vm.objs);
    vae_free(vm.stack);
    vae_free(vm.marks);
    vae_free(vm.memo);
    vae_free(vm.inflated);
    vae_zip_close(&z);
    return rc;
}
