/* cpu_eltwise.c -- ACT (y = act(a)), ADD (y = act(a + b2)), SCALE_SHIFT (y = act(a*w[c] + b[c])).
 * op->act is NONE for a plain add or scale-shift. y may equal a (or b2). */
#include "backends/cpu/cpu_internal.h"

enum { ELT_CHUNK = 4096 }; /* values per parallel work item (flat ops) */

int cpu_eltwise(vae_backend *be, const vae_op *op, void *state, const void *a, const void *b2,
                void *y, int64_t n_vox) {
    cpu_backend *cb = cpu_be(be);
    const int c = op->c_in, nt = cb->threads;
    if (op->kind != VAE_OP_ACT && op->kind != VAE_OP_ADD && op->kind != VAE_OP_SCALE_SHIFT)
        return vae_fail(VAE_EINVAL, "%s: op kind %d is not elementwise", op->name, (int)op->kind);
    if (c < 1 || n_vox < 0)
        return vae_fail(VAE_ESHAPE, "%s: elementwise op on %lld voxels of %d channels", op->name,
                        (long long)n_vox, c);
    int rc = vae_op_check(op);
    if (rc) return rc;
    if (n_vox == 0) return VAE_OK;
    if (!a || !y || (op->kind == VAE_OP_ADD && !b2))
        return vae_fail(VAE_EINVAL, "%s: missing elementwise operand", op->name);
    const float *x = a, *x2 = b2;
    float *out = y;
    const vae_act act = op->act;
    const float as = op->act_scale;

    if (op->kind == VAE_OP_SCALE_SHIFT) {
        const float *sc = op->w, *sh = op->b;
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t v = 0; v < n_vox; v++) {
            const float *xv = x + v * c;
            float *yv = out + v * c;
            for (int i = 0; i < c; i++)
                yv[i] = xv[i] * (sc ? sc[i] : 1.0f) + (sh ? sh[i] : 0.0f);
            cpu_act_row(act, as, yv, c);
        }
        return VAE_OK;
    }

    const int64_t n = n_vox * c, n_chunks = (n + ELT_CHUNK - 1) / ELT_CHUNK;
    const int add = op->kind == VAE_OP_ADD;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t ch = 0; ch < n_chunks; ch++) {
        int64_t i0 = ch * ELT_CHUNK, len = n - i0 < ELT_CHUNK ? n - i0 : ELT_CHUNK;
        float *yc = out + i0;
        if (add) {
            const float *p = x + i0, *q = x2 + i0;
            for (int64_t i = 0; i < len; i++)
                yc[i] = p[i] + q[i];
        } else if (yc != x + i0) {
            for (int64_t i = 0; i < len; i++)
                yc[i] = x[i0 + i];
        }
        cpu_act_row(act, as, yc, len);
    }
    return VAE_OK;
}
