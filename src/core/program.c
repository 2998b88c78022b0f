/* program.c -- building op lists. */
#include "program.h"

#include <stddef.h>
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

int vae_shuffle_up_table(const vae_op *op, int **out, size_t *n_out) {
    const int ft = op->ft, fs = op->fs, ci = op->c_in, co = op->c_out, group = op->group;
    if (ft < 1 || fs < 1 || group < 1 || ci < 1 || co < 1)
        return vae_fail(VAE_EINVAL, "%s: shuffle-up (ft %d, fs %d, group %d, %d->%d ch)",
                        op->name, ft, fs, group, ci, co);
    size_t n = (size_t)ft * fs * fs * co;
    int *tab = vae_malloc(n * sizeof *tab);
    if (!tab) return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
    for (int ti = 0; ti < ft; ti++)
        for (int hi = 0; hi < fs; hi++)
            for (int wi = 0; wi < fs; wi++)
                for (int o = 0; o < co; o++) {
                    int64_t f = (int64_t)o * op->cs_o + (int64_t)ti * op->cs_t +
                                (int64_t)hi * op->cs_h + (int64_t)wi * op->cs_w;
                    int64_t ch = f / group;
                    if (f < 0 || ch >= ci) {
                        vae_free(tab);
                        return vae_fail(VAE_EINVAL,
                                        "%s: shuffle-up strides (%d,%d,%d,%d)/%d read channel "
                                        "%lld of %d",
                                        op->name, op->cs_o, op->cs_t, op->cs_h, op->cs_w, group,
                                        (long long)ch, ci);
                    }
                    tab[((ti * fs + hi) * fs + wi) * co + o] = (int)ch;
                }
    *out = tab;
    *n_out = n;
    return VAE_OK;
}

int vae_shuffle_down_table(const vae_op *op, int **out, size_t *n_out) {
    const int ft = op->ft, fs = op->fs, ci = op->c_in, co = op->c_out, group = op->group;
    const int64_t total = (int64_t)ci * ft * fs * fs;
    if (ft < 1 || fs < 1 || group < 1 || ci < 1 || co < 1 || total != (int64_t)co * group)
        return vae_fail(VAE_EINVAL, "%s: shuffle-down (ft %d, fs %d, group %d, %d->%d ch)",
                        op->name, ft, fs, group, ci, co);
    int *tab = vae_malloc((size_t)total * 4 * sizeof *tab);
    if (!tab) return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
    for (int64_t f = 0; f < total; f++) tab[f * 4] = -1;
    for (int c = 0; c < ci; c++)
        for (int ti = 0; ti < ft; ti++)
            for (int hi = 0; hi < fs; hi++)
                for (int wi = 0; wi < fs; wi++) {
                    int64_t f = (int64_t)c * op->cs_o + (int64_t)ti * op->cs_t +
                                (int64_t)hi * op->cs_h + (int64_t)wi * op->cs_w;
                    if (f < 0 || f >= total || tab[f * 4] >= 0) {
                        vae_free(tab);
                        return vae_fail(VAE_EINVAL,
                                        "%s: shuffle-down strides (%d,%d,%d,%d) do not enumerate "
                                        "the %lld sub-positions",
                                        op->name, op->cs_o, op->cs_t, op->cs_h, op->cs_w,
                                        (long long)total);
                    }
                    tab[f * 4 + 0] = ti;
                    tab[f * 4 + 1] = hi;
                    tab[f * 4 + 2] = wi;
                    tab[f * 4 + 3] = c;
                }
    *out = tab;
    *n_out = (size_t)total * 4;
    return VAE_OK;
}

int vae_conv_check_call(const vae_op *op, const void *const *frames, int n_in, int h, int w,
                        const void *y, int t_out, int h_out, int w_out) {
    if (!frames || !y || h < 1 || w < 1 || n_in < op->kt)
        return vae_fail(VAE_ESHAPE, "%s: conv input of %d frames of %dx%d (kernel kt = %d)",
                        op->name, n_in, h, w, op->kt);
    const int up = op->up > 1 ? op->up : 1;
    if (up > 1 && (op->kt != 1 || op->st != 1))
        return vae_fail(VAE_EINVAL, "%s: input upsampling with a temporal kernel", op->name);
    const int hu = h * up, wu = w * up;
    int exp_t = (n_in - op->kt) / op->st + 1;
    int exp_h = (hu + op->pad_h[0] + op->pad_h[1] - op->kh) / op->sh + 1;
    int exp_w = (wu + op->pad_w[0] + op->pad_w[1] - op->kw) / op->sw + 1;
    if (hu + op->pad_h[0] + op->pad_h[1] < op->kh || wu + op->pad_w[0] + op->pad_w[1] < op->kw ||
        t_out != exp_t || h_out != exp_h || w_out != exp_w)
        return vae_fail(VAE_ESHAPE,
                        "%s: conv of %d frames %dx%d gives %dx%dx%d, not the %dx%dx%d asked for",
                        op->name, n_in, h, w, exp_t, exp_h, exp_w, t_out, h_out, w_out);
    for (int i = 0; i < n_in; i++)
        if (!frames[i]) return vae_fail(VAE_EINVAL, "%s: input frame %d is NULL", op->name, i);
    return VAE_OK;
}
