/* strip.c -- the geometry of column strips that hand their edge columns on (strip.h). */
#include "strip.h"

#include <string.h>

#include "core.h"

static int span_in(vae_span a, vae_span b) {
    return a.hi <= a.lo || (a.lo >= b.lo && a.hi <= b.hi);
}

static int span_eq(vae_span a, vae_span b) {
    return a.lo == b.lo && a.hi == b.hi;
}

void vae_strips_free(vae_strips *s) {
    vae_free(s->carry);
    vae_free(s->carry_of);
    vae_free(s->exact);
    vae_free(s->crop);
    vae_free(s->z);
    vae_free(s->from_slot);
    vae_free(s->slot);
    memset(s, 0, sizeof *s);
}

/* The columns [0, E) of y that op computes exactly from the columns [0, e) of its input. */
static int edge_through(const vae_op *op, int n_in, int e) {
    vae_span oc, ov;
    if (vae_op_map_crop(op, 1, n_in, (vae_span){0, n_in}, (vae_span){0, e}, 0, &oc, &ov)) return -1;
    return ov.hi > ov.lo && ov.lo == 0 ? ov.hi : 0;
}

/* ek[v]: the columns [0, ek[v]) of every value that the input's columns [0, bound) give */
static void edges_from(const vae_program *p, const int *vw, int bound, int *ek) {
    ek[p->input] = bound;
    for (int i = 0; i < p->n_ops; i++) {
        const vae_op *op = &p->ops[i];
        int e = edge_through(op, vw[op->in[0]], ek[op->in[0]]);
        if (op->in[1] >= 0 && ek[op->in[1]] < e) e = ek[op->in[1]];
        ek[op->out] = e < 0 ? 0 : e;
    }
}

int vae_strips_out_edge(const vae_program *p, const int *vw, int bound) {
    int *ek = vae_calloc((size_t)p->n_values, sizeof *ek);
    if (!ek) return -1;
    edges_from(p, vw, bound, ek);
    const int e = ek[p->output];
    vae_free(ek);
    return e;
}

/* The exact ranges: E_k(v) of every value at each inner strip edge k, from the input's bounds
 * forward through the ops; strip k of v is [E_k(v), E_{k+1}(v)). */
static int strip_edges(const vae_program *p, const int *vw, const int *bounds, vae_strips *s) {
    const int n = s->n, nv = p->n_values;
    int *ek = vae_calloc((size_t)nv, sizeof *ek);
    if (!ek) return vae_fail(VAE_ENOMEM, "out of memory planning strips");
    for (int v = 0; v < nv; v++) {
        s->exact[v].lo = 0;
        s->exact[(size_t)(n - 1) * nv + v].hi = vw[v];
    }
    for (int k = 1; k < n; k++) {
        edges_from(p, vw, bounds[k], ek);
        for (int v = 0; v < nv; v++) {
            s->exact[(size_t)(k - 1) * nv + v].hi = ek[v];
            s->exact[(size_t)k * nv + v].lo = ek[v];
        }
    }
    vae_free(ek);
    for (int k = 0; k < n; k++)
        for (int v = 0; v < nv; v++) {
            vae_span e = s->exact[(size_t)k * nv + v];
            if (e.hi <= e.lo)
                return vae_fail(VAE_EUNSUPPORTED,
                                "strips: strip %d of %d has no exact column of value %d (%d..%d)",
                                k, n, v, e.lo, e.hi);
        }
    return VAE_OK;
}

/* Ops whose cost is memory traffic alone and whose output column reads one input column (pointwise,
 * shuffles, upsampling): computing a few more columns of them beats keeping a slot of their
 * output */
static int strip_cheap(const vae_op *op) {
    const vae_span one = vae_op_in_span(op, 1, (vae_span){4, 5}, 64, 0); /* any inner column */
    return vae_op_macs(op, 1, 1, 1) == 0.0 && one.hi - one.lo == 1;
}

/* tg[v]: the columns of each value that strip k computes exactly: its exact ones, and for the
 * cheap ops' outputs also those left of them that their readers need (walked back from the
 * output: a value's readers come after it). */
static void strip_targets(const vae_program *p, const int *vw, const vae_span *ex, vae_span *tg) {
    for (int v = 0; v < p->n_values; v++)
        tg[v] = ex[v]; /* lo: the least column a reader needs so far */
    for (int i = p->n_ops - 1; i >= 0; i--) {
        const vae_op *op = &p->ops[i];
        const int x = op->in[0], x2 = op->in[1], y = op->out;
        if (!strip_cheap(op)) tg[y].lo = ex[y].lo;
        const vae_span need = vae_span_clip(vae_op_in_span(op, 1, tg[y], vw[x], 0), 0, vw[x]);
        if (need.lo < tg[x].lo) tg[x].lo = need.lo;
        if (x2 >= 0 && tg[y].lo < tg[x2].lo) tg[x2].lo = tg[y].lo;
    }
    tg[p->input] = ex[p->input]; /* B's input is what it is */
}

/* An input rebuilt with its columns [lo, hi) exact, the value holding vx exactly: the exact part
 * of the rebuilt input, and in *sk the columns that come from the slot. */
static vae_span strip_rebuild(int lo, int hi, vae_span vx, vae_span *sk) {
    *sk = lo < vx.lo ? (vae_span){lo, vx.lo} : (vae_span){0, 0};
    return (vae_span){lo, hi < vx.hi ? hi : vx.hi};
}

/* Strip k forward: each value's crop and exact part, each input's rebuilt columns zk[i*2+k]
 * (empty: used as it is) and the part of them from its slot sk[i*2+k] */
static int strip_forward(const vae_program *p, const int *vw, vae_strips *s, int k, vae_span *valid,
                         vae_span *tg, vae_span *zk, vae_span *sk) {
    const int nv = p->n_values;
    vae_span *crop = s->crop + (size_t)k * nv;
    const vae_span *ex = s->exact + (size_t)k * nv;
    strip_targets(p, vw, ex, tg);
    crop[p->input] = valid[p->input] = ex[p->input];
    for (int i = 0; i < p->n_ops; i++) {
        const vae_op *op = &p->ops[i];
        const int x = op->in[0], x2 = op->in[1], y = op->out;
        vae_span zc = crop[x], zv = valid[x];
        const vae_span need = vae_span_clip(vae_op_in_span(op, 1, tg[y], vw[x], 0), 0, vw[x]);
        zk[2 * i] = zk[2 * i + 1] = sk[2 * i] = sk[2 * i + 1] = (vae_span){0, 0};
        /* rebuilt (slot ++ own columns) unless the value is exactly what the op needs: also
         * where it holds more, so that inexact margins do not grow from op to op */
        if (!span_eq(need, zc) || !span_in(need, zv)) {
            zk[2 * i] = zc = need;
            zv = strip_rebuild(need.lo, need.hi, valid[x], &sk[2 * i]);
        }
        int rc = vae_op_map_crop(op, 1, vw[x], zc, zv, 0, &crop[y], &valid[y]);
        if (rc) return rc;
        if (x2 >= 0) {
            vae_span v2 = valid[x2];
            if (!span_eq(crop[x2], crop[y]) || !span_in(tg[y], v2)) {
                zk[2 * i + 1] = crop[y]; /* exact over y's target, zeros left of it */
                v2 = strip_rebuild(tg[y].lo, crop[y].hi, valid[x2], &sk[2 * i + 1]);
            }
            valid[y] = vae_span_clip(valid[y], v2.lo, v2.hi);
        }
        if (!span_in(tg[y], valid[y]))
            return vae_fail(VAE_EUNSUPPORTED,
                            "strips: %s in strip %d computes columns %d..%d exactly, not %d..%d",
                            op->name, k, valid[y].lo, valid[y].hi, tg[y].lo, tg[y].hi);
    }
    return VAE_OK;
}

/* The carries (every input rebuilt in some strip) and the slots of the values they read from
 * earlier strips: width, the carry that refills it. */
static int strip_carries(const vae_program *p, vae_strips *s, const vae_span *zall,
                         const vae_span *sall) {
    const int n = s->n, no = p->n_ops, nv = p->n_values;
    for (int i = 0; i < 2 * no; i++)
        s->carry_of[i] = -1;
    for (int j = 0; j < 2 * no; j++)
        for (int k = 0; k < n && s->carry_of[j] < 0; k++)
            if (zall[(size_t)k * 2 * no + j].hi > zall[(size_t)k * 2 * no + j].lo)
                s->carry_of[j] = s->n_carry++;
    s->carry = vae_calloc((size_t)s->n_carry + 1, sizeof *s->carry);
    s->slot = vae_calloc((size_t)s->n_carry + 1, sizeof *s->slot);
    s->z = vae_calloc((size_t)n * s->n_carry + 1, sizeof *s->z);
    s->from_slot = vae_calloc((size_t)n * s->n_carry + 1, sizeof *s->from_slot);
    int *slot_of = vae_calloc((size_t)nv, sizeof *slot_of);
    if (!s->carry || !s->slot || !s->z || !s->from_slot || !slot_of) {
        vae_free(slot_of);
        return vae_fail(VAE_ENOMEM, "out of memory planning strips");
    }
    for (int v = 0; v < nv; v++)
        slot_of[v] = -1;
    for (int j = 0; j < 2 * no; j++) {
        const int c = s->carry_of[j];
        if (c < 0) continue;
        vae_strip_carry *cy = &s->carry[c];
        cy->op = j / 2, cy->k = j % 2, cy->value = p->ops[j / 2].in[j % 2], cy->slot = -1;
        int n_cols = 0;
        for (int k = 0; k < n; k++) {
            const vae_span sk = sall[(size_t)k * 2 * no + j];
            s->z[(size_t)k * s->n_carry + c] = zall[(size_t)k * 2 * no + j];
            s->from_slot[(size_t)k * s->n_carry + c] = sk;
            const int e = s->exact[(size_t)k * nv + cy->value].lo;
            if (k > 0 && sk.hi > sk.lo && e - sk.lo > n_cols) n_cols = e - sk.lo;
        }
        if (n_cols == 0 && slot_of[cy->value] < 0) continue;
        if (slot_of[cy->value] < 0) {
            slot_of[cy->value] = s->n_slot;
            s->slot[s->n_slot++] = (vae_strip_slot){.value = cy->value};
        }
        vae_strip_slot *sl = &s->slot[cy->slot = slot_of[cy->value]];
        sl->fill = c; /* carries come in op order: the last one refills */
        if (n_cols > sl->n) sl->n = n_cols;
    }
    vae_free(slot_of);
    for (int j = 0; j < s->n_slot; j++) { /* the slot comes from the strip's exact columns */
        const vae_strip_slot *sl = &s->slot[j];
        for (int k = 0; k + 1 < n; k++) {
            const vae_span e = s->exact[(size_t)k * nv + sl->value];
            if (e.hi - sl->n < e.lo)
                return vae_fail(VAE_EUNSUPPORTED,
                                "strips: strip %d is %d columns wide at value %d, which the next "
                                "strip needs %d columns of",
                                k, e.hi - e.lo, sl->value, sl->n);
        }
    }
    return VAE_OK;
}

int vae_strips_make(const vae_program *p, const int *vw, const int *bounds, int n, vae_strips *s) {
    memset(s, 0, sizeof *s);
    const int nv = p->n_values, no = p->n_ops;
    if (n < 1 || bounds[0] != 0 || bounds[n] != vw[p->input])
        return vae_fail(VAE_EINVAL, "strips: %d strips over %d columns", n, vw[p->input]);
    for (int k = 0; k < n; k++)
        if (bounds[k + 1] <= bounds[k])
            return vae_fail(VAE_EINVAL, "strips: bounds not increasing at %d", k);
    for (int i = 0; i < no; i++)
        if (vae_op_is_global(&p->ops[i]) || vae_op_align(&p->ops[i], 1) != 1 ||
            (p->ops[i].kind == VAE_OP_CONV && p->ops[i].sw != 1))
            return vae_fail(VAE_EUNSUPPORTED, "strips: op %d (%s) is global per frame or strided",
                            i, p->ops[i].name);
    s->n = n, s->n_values = nv, s->n_ops = no;
    s->exact = vae_calloc((size_t)n * nv, sizeof *s->exact);
    s->crop = vae_calloc((size_t)n * nv, sizeof *s->crop);
    s->carry_of = vae_calloc((size_t)2 * no + 1, sizeof *s->carry_of);
    vae_span *valid = vae_calloc((size_t)nv, sizeof *valid);
    vae_span *tg = vae_calloc((size_t)nv, sizeof *tg);
    vae_span *zall = vae_calloc((size_t)n * 2 * no + 1, sizeof *zall);
    vae_span *sall = vae_calloc((size_t)n * 2 * no + 1, sizeof *sall);
    int rc = s->exact && s->crop && s->carry_of && valid && tg && zall && sall
                 ? VAE_OK
                 : vae_fail(VAE_ENOMEM, "out of memory planning strips");
    if (rc == VAE_OK) rc = strip_edges(p, vw, bounds, s);
    for (int k = 0; rc == VAE_OK && k < n; k++)
        rc = strip_forward(p, vw, s, k, valid, tg, zall + (size_t)k * 2 * no,
                           sall + (size_t)k * 2 * no);
    if (rc == VAE_OK) rc = strip_carries(p, s, zall, sall);
    vae_free(valid);
    vae_free(tg);
    vae_free(zall);
    vae_free(sall);
    if (rc) vae_strips_free(s);
    return rc;
}

void vae_strip_z_parts(const vae_strips *s, int k, int c, int *left, int *c0, int *c1) {
    const vae_span zc = vae_strip_z(s, k, c), sc = vae_strip_from_slot(s, k, c);
    const vae_span cx = vae_strip_crop(s, k, s->carry[c].value);
    const int from_slot = sc.hi > sc.lo;
    int a = from_slot ? sc.hi : zc.lo, b = zc.hi < cx.hi ? zc.hi : cx.hi;
    if (a < cx.lo) a = cx.lo;
    if (a > zc.hi) a = zc.hi;
    if (b < a) b = a; /* nothing from the value */
    *left = from_slot ? sc.lo : a;
    *c0 = a, *c1 = b;
}

int64_t vae_strip_slot_frame_values(const vae_strips *s, const vae_program *p, int j) {
    const vae_strip_slot *sl = &s->slot[j];
    return (int64_t)sl->rows * sl->n * vae_program_value_channels(p, sl->value);
}

int64_t vae_strip_slot_values(const vae_strips *s, const vae_program *p, int j) {
    return s->slot[j].frames * vae_strip_slot_frame_values(s, p, j);
}

int64_t vae_strips_slot_bytes(const vae_strips *s, const vae_program *p, size_t elem,
                              size_t (*round)(size_t)) {
    int64_t b = 0;
    for (int j = 0; j < s->n_slot; j++)
        b += vae_strip_slot_values(s, p, j) * (int64_t)elem;
    return round && b > 0 ? (int64_t)round((size_t)b) : b; /* one block for all */
}
