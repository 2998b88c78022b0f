/* program.c -- building op lists. */
#include "program.h"

#include <string.h>

#include "core.h"

void vae_program_init(vae_program *p, int in_channels) {
    memset(p, 0, sizeof *p);
    p->n_values = 1; /* value 0 is the input */
    p->input = 0;
    p->output = 0;
    p->in_channels = in_channels;
    p->out_channels = in_channels;
    p->first_chunk = 1;
    p->chunk = 1;
}

void vae_program_free(vae_program *p) {
    vae_free(p->ops);
    memset(p, 0, sizeof *p);
}

vae_op vae_op_make(vae_op_kind kind, int x, int c_in, int c_out) {
    vae_op op;
    memset(&op, 0, sizeof op);
    op.kind = kind;
    op.in[0] = x;
    op.in[1] = -1;
    op.out = -1;
    op.c_in = c_in;
    op.c_out = c_out;
    op.kt = op.kh = op.kw = op.st = op.sh = op.sw = 1;
    op.ft = op.fs = 1;
    op.group = 1;
    return op;
}

int vae_program_add(vae_program *p, const vae_op *op) {
    if (p->n_ops == p->cap_ops) {
        int cap = p->cap_ops ? p->cap_ops * 2 : 64;
        vae_op *ops = vae_realloc(p->ops, (size_t)cap * sizeof *ops);
        if (!ops) return -1;
        p->ops = ops;
        p->cap_ops = cap;
    }
    vae_op *o = &p->ops[p->n_ops++];
    *o = *op;
    o->out = p->n_values++;
    p->output = o->out;
    p->out_channels = o->c_out;
    return o->out;
}

int vae_op_is_windowed(const vae_op *op) {
    if (op->kind == VAE_OP_CONV) return op->kt > 1 || op->st > 1 || op->tpad > 0;
    if (op->kind == VAE_OP_SHUFFLE_DOWN) return op->ft > 1;
    return 0;
}

double vae_op_macs_per_output(const vae_op *op) {
    switch (op->kind) {
    case VAE_OP_CONV: return (double)op->c_in * op->kt * op->kh * op->kw;
    case VAE_OP_ATTENTION: return 0; /* counted by the caller: depends on tokens */
    default: return 0;
    }
}
