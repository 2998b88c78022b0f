/* strip.h -- column strips that hand their edge columns on: exact tiles without halos (internal).
 *
 * Exact tiles (plan.h) recompute the halo their receptive field needs; over a deep decoder that
 * is 10-25% more work. Column strips instead run one after the other, left to right, each
 * through every frame, and every op that reads columns left of what its input has in this strip
 * takes them from what the previous strip left behind for it (a "carry"):
 *
 *   strip k of value v holds the exact columns [E_k(v), E_{k+1}(v)) (E_0 = 0, E_n = width).
 *   E of an op's output is the number of columns that the op computes exactly from the input
 *   columns [0, E(x)) (op.h vae_op_map_crop), the least over its inputs: a 3x3 conv moves the
 *   edge one column left, an upsampling by 2 doubles it.
 *   carry: before op i reads input k, its input is rebuilt as z = the columns the op's exact
 *   output needs: those left of what the value has exactly in this strip from its slot (the
 *   previous strip's last n exact columns [E_k(x) - n, E_k(x)) of every frame), the rest from the
 *   value itself. A value has one slot, however many ops read it: its last reader (in op order)
 *   refills it for the next strip once every reader took what it needed.
 *
 * Ops run unchanged on z (their own zero padding): their outputs carry a few inexact columns at
 * the strip's inner edges, which nothing exact reads. A binary op (residual, add) whose inputs
 * cover different columns gets a carry on its second input that rebuilds it over the first's
 * columns (exact where the output is, zeros in its inexact margin). Ops whose cost is memory
 * traffic alone (norms, shuffles, upsampling) compute, besides their own exact columns, those
 * left of them that a reader needs (the strip's "target"): a few more columns of such an op cost
 * less than a slot of its output (Wan2.2's DupUp shortcut would carry 14 columns at twice the
 * resolution; a norm's output would take a slot beside its input's). Everything here is static:
 * the executor (executor.c) runs it, the planner (plan.c) prices it. Strips need ops without
 * strides (decoders after their last global op).
 */
#ifndef VAE_STRIP_H
#define VAE_STRIP_H

#include <stdint.h>

#include "op.h"
#include "program.h"

typedef struct vae_strip_carry {
    int op, k; /* the op and its input (0 or 1) */
    int value; /* the value it rebuilds (op->in[k]) */
    int slot;  /* the value's slot, or -1 (nothing of it crosses a strip edge) */
} vae_strip_carry;

typedef struct vae_strip_slot {
    int value;      /* the value whose columns it keeps */
    int n;          /* columns kept from one strip for the next (its width) */
    int fill;       /* the carry that refills it: the value's last one, after the others read */
    int64_t frames; /* frames of the value over the whole stream (the slot's length) and */
    int rows;       /* its rows (the planner sets both) */
} vae_strip_slot;

typedef struct vae_strips {
    int n;                  /* strips */
    int n_values, n_ops;    /* of the program */
    int n_carry, n_slot;    /* carries, slots */
    vae_strip_carry *carry; /* [n_carry] */
    vae_strip_slot *slot;   /* [n_slot] */
    int *carry_of;          /* [n_ops][2]: the carry of op i's input k, or -1 */
    vae_span *exact;        /* [n][n_values]: each value's exact columns in strip k */
    vae_span *crop;         /* [n][n_values]: the columns its buffer holds in strip k */
    vae_span *z;            /* [n][n_carry]: the columns a carry rebuilds in strip k (empty:
                             * the value is used as it is) */
    vae_span *from_slot;    /* [n][n_carry]: of those, the ones its slot supplies (empty: none;
                             * z's columns left of them are an inexact margin: zeros) */
    int slots_host;         /* the slots live in host memory (backend host_alloc) */
} vae_strips;

/* Strips of program p (value widths vw) split at input columns bounds[0..n] (0 = bounds[0] <
 * ... < bounds[n] = vw[input]). VAE_EUNSUPPORTED when the program cannot run in strips (a global
 * or strided op) or a strip is too narrow for the columns its neighbour needs. */
int vae_strips_make(const vae_program *p, const int *vw, const int *bounds, int n, vae_strips *s);
void vae_strips_free(vae_strips *s);
/* The output columns [0, E) that the input columns [0, bound) give exactly (-1: out of memory):
 * where to put input bounds so that the strips' outputs come out even. */
int vae_strips_out_edge(const vae_program *p, const int *vw, int bound);
/* How carry c rebuilds its input in strip k: zeros over [z.lo, *left), the slot's columns
 * (from_slot), the value's own columns [*c0, *c1), zeros over [*c1, z.hi). */
void vae_strip_z_parts(const vae_strips *s, int k, int c, int *left, int *c0, int *c1);
/* activation values in slot j (frames x rows x n columns x channels), and in one of its frames */
int64_t vae_strip_slot_values(const vae_strips *s, const vae_program *p, int j);
int64_t vae_strip_slot_frame_values(const vae_strips *s, const vae_program *p, int j);
/* bytes of all slots (one block) at elem bytes per activation value, the allocation as round
 * (NULL: exact) takes it */
int64_t vae_strips_slot_bytes(const vae_strips *s, const vae_program *p, size_t elem,
                              size_t (*round)(size_t));

static inline vae_span vae_strip_exact(const vae_strips *s, int k, int v) {
    return s->exact[(size_t)k * s->n_values + v];
}
static inline vae_span vae_strip_crop(const vae_strips *s, int k, int v) {
    return s->crop[(size_t)k * s->n_values + v];
}
static inline vae_span vae_strip_z(const vae_strips *s, int k, int c) {
    return s->z[(size_t)k * s->n_carry + c];
}
static inline vae_span vae_strip_from_slot(const vae_strips *s, int k, int c) {
    return s->from_slot[(size_t)k * s->n_carry + c];
}

#endif
