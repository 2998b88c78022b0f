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
    memset(s, 0, sizeof *s);
}

/* The columns [0, E) of y that op computes exactly from the columns [0, e) of its input. */
static int edge_through(const vae_op *op, int n_in, int e) {
    vae_span oc, ov;
    if (vae_op_map_crop(op, 1, n_in, (vae_span){0, n_in}, (vae_span){0, e}, &oc, &ov)) return -1;
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

/* Strip k forward: each value's crop and exact part, each input's rebuilt columns zk[i*2+k]
 * (empty: used as it is) */
static int strip_forward(const vae_program *p, const int *vw, vae_strips *s, int k, vae_span *valid,
                         vae_span *zk) {
    const int nv = p->n_values;
    vae_span *crop = s->crop + (size_t)k * nv;
    const vae_span *ex = s->exact + (size_t)k * nv;
    crop[p->input] = valid[p->input] = ex[p->input];
    for (int i = 0; i < p->n_ops; i++) {
        const vae_op *op = &p->ops[i];
        const int x = op->in[0], x2 = op->in[1], y = op->out;
        vae_span zc = crop[x], zv = valid[x];
        const vae_span need = vae_span_clip(vae_op_in_span(op, 1, ex[y], vw[x]), 0, vw[x]);
        zk[2 * i] = zk[2 * i + 1] = (vae_span){0, 0};
        /* rebuilt (slot ++ own columns) unless the value is exactly what the op needs: also
         * where it holds more, so that inexact margins do not grow from op to op */
        if (!span_eq(need, zc) || !span_in(need, zv)) {
            zc = need;
            zv = (vae_span){need.lo, need.hi < valid[x].hi ? need.hi : valid[x].hi};
            zk[2 * i] = zc;
        }
        int rc = vae_op_map_crop(op, 1, vw[x], zc, zv, &crop[y], &valid[y]);
        if (rc) return rc;
        if (x2 >= 0) {
            vae_span v2 = valid[x2];
            if (!span_eq(crop[x2], crop[y]) || !span_in(ex[y], v2)) {
                zk[2 * i + 1] = crop[y];
                v2 = (vae_span){crop[y].lo, crop[y].hi < valid[x2].hi ? crop[y].hi : valid[x2].hi};
            }
            valid[y] = vae_span_clip(valid[y], v2.lo, v2.hi);
        }
        if (!span_in(ex[y], valid[y]))
            return vae_fail(VAE_EUNSUPPORTED,
                            "strips: %s in strip %d computes columns %d..%d exactly, not %d..%d",
                            op->name, k, valid[y].lo, valid[y].hi, ex[y].lo, ex[y].hi);
    }
    return VAE_OK;
}

/* The carries: every input rebuilt in some strip; its slot width and the columns per strip. */
static int strip_carries(const vae_program *p, vae_strips *s, const vae_span *zall) {
    const int n = s->n, no = p->n_ops, nv = p->n_values;
    for (int i = 0; i < 2 * no; i++)
        s->carry_of[i] = -1;
    for (int j = 0; j < 2 * no; j++)
        for (int k = 0; k < n && s->carry_of[j] < 0; k++)
            if (zall[(size_t)k * 2 * no + j].hi > zall[(size_t)k * 2 * no + j].lo)
                s->carry_of[j] = s->n_carry++;
    s->carry = vae_calloc((size_t)s->n_carry + 1, sizeof *s->carry);
    s->z = vae_calloc((size_t)n * s->n_carry + 1, sizeof *s->z);
    if (!s->carry || !s->z) return vae_fail(VAE_ENOMEM, "out of memory planning strips");
    for (int j = 0; j < 2 * no; j++) {
        const int c = s->carry_of[j];
        if (c < 0) continue;
        vae_strip_carry *cy = &s->carry[c];
        cy->op = j / 2, cy->k = j % 2, cy->value = p->ops[j / 2].in[j % 2];
        for (int k = 0; k < n; k++) {
            const vae_span z = zall[(size_t)k * 2 * no + j];
            s->z[(size_t)k * s->n_carry + c] = z;
            const int e = s->exact[(size_t)k * nv + cy->value].lo;
            if (k > 0 && z.hi > z.lo && e - z.lo > cy->n) cy->n = e - z.lo;
        }
        for (int k = 0; k + 1 < n; k++) { /* the slot comes from the strip's exact columns */
            const vae_span e = s->exact[(size_t)k * nv + cy->value];
            if (e.hi - cy->n < e.lo)
                return vae_fail(VAE_EUNSUPPORTED,
                                "strips: strip %d is %d columns wide at the input of %s, which "
                                "needs %d of them from it",
                                k, e.hi - e.lo, p->ops[cy->op].name, cy->n);
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
            return vae_fail(VAE_EUNSUPPORTED, "strips: %s is global per frame or strided",
                            p->ops[i].name);
    s->n = n, s->n_values = nv, s->n_ops = no;
    s->exact = vae_calloc((size_t)n * nv, sizeof *s->exact);
    s->crop = vae_calloc((size_t)n * nv, sizeof *s->crop);
    s->carry_of = vae_calloc((size_t)2 * no + 1, sizeof *s->carry_of);
    vae_span *valid = vae_calloc((size_t)nv, sizeof *valid);
    vae_span *zall = vae_calloc((size_t)n * 2 * no + 1, sizeof *zall);
    int rc = s->exact && s->crop && s->carry_of && valid && zall
                 ? VAE_OK
                 : vae_fail(VAE_ENOMEM, "out of memory planning strips");
    if (rc == VAE_OK) rc = strip_edges(p, vw, bounds, s);
    for (int k = 0; rc == VAE_OK && k < n; k++)
        rc = strip_forward(p, vw, s, k, valid, zall + (size_t)k * 2 * no);
    if (rc == VAE_OK) rc = strip_carries(p, s, zall);
    vae_free(valid);
    vae_free(zall);
    if (rc) vae_strips_free(s);
    return rc;
}

int64_t vae_strip_slot_values(const vae_strips *s, const vae_program *p, int c) {
    const vae_strip_carry *cy = &s->carry[c];
    return cy->frames * cy->rows * cy->n * vae_program_value_channels(p, cy->value);
}

int64_t vae_strips_slot_bytes(const vae_strips *s, const vae_program *p, size_t elem,
                              size_t (*round)(size_t)) {
    int64_t b = 0;
    for (int c = 0; c < s->n_carry; c++)
        b += vae_strip_slot_values(s, p, c) * (int64_t)elem;
    return round && b > 0 ? (int64_t)round((size_t)b) : b; /* one block for all */
}
