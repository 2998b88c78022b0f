/* cuda_conv_depthwise.c -- depthwise CONV (op.h vae_op_grouped: groups = c_in) on the GPU.
 *
 * One path for every dtype: the direct kernel of cuda_depthwise_conv.cu, decided once at prepare
 * (conv_state depthwise), so that none of the dense paths (cuDNN, GEMMs, the implicit-GEMM and
 * E4M3 kernels, the tuner) ever sees such a conv: they would run it as a dense conv with filters
 * zero off the diagonal. Its filters stay float32 in PyTorch's layout [c_out][kh][kw] (a few
 * hundred KB at most; the kernel reads a block's channels into shared memory), its bias float32;
 * both staged as they are (CU_STAGE_RAW), so that prepare copies them from the stage.
 */
#include <string.h>

#include "backends/cuda/base/cuda_host.h"
#include "backends/cuda/conv/cuda_conv_internal.h"

int cu_conv_depthwise_check(const vae_op *op) {
    if (cuk_depthwise_fits(op->kh, op->kw)) return VAE_OK;
    return vae_fail(VAE_EUNSUPPORTED, "%s: depthwise kernel of %dx%d taps (at most %d on CUDA)",
                    op->name, op->kh, op->kw, CUK_DEPTHWISE_MAX_TAPS);
}

void cu_conv_depthwise_stage(cuda_backend *cb, const vae_op *op) {
    cu_stage *st = &cb->stage;
    cu_stage_put(st, op->w, CU_STAGE_RAW, VAE_DTYPE_F32, (size_t)vae_op_weight_count(op), op->w);
    cu_stage_put(st, op->b, CU_STAGE_RAW, VAE_DTYPE_F32, (size_t)op->c_out, op->b);
}

int cu_conv_depthwise_prepare(cuda_backend *cb, const vae_op *op, conv_state *s) {
    int rc = cu_conv_depthwise_check(op);
    s->depthwise = 1;
    s->co = s->kp = op->c_out;
    s->wdw_bytes = (size_t)vae_op_weight_count(op) * sizeof(float);
    if (rc == VAE_OK)
        rc =
            cu_upload_param(cb, op->w, s->wdw_bytes / sizeof(float), 1, (void **)&s->wdw, op->name);
    if (rc == VAE_OK && op->b) {
        s->b_bytes = (size_t)op->c_out * sizeof(float);
        rc = cu_upload_param(cb, op->b, (size_t)op->c_out, 1, (void **)&s->bias, op->name);
    }
    if (rc == VAE_OK && op->norm_w)
        rc = cu_upload_param(cb, op->norm_w, (size_t)op->c_out, 1, (void **)&s->nw, op->name);
    return rc;
}

int cu_conv_depthwise(cuda_backend *cb, const vae_op *op, const conv_state *s,
                      const void *const *frames, int h, int w, const void *residual, void *y,
                      int t_out, int h_out, int w_out) {
    const cuk_depthwise_geom g = {h,      w,      op->c_in,     op->c_out,    op->kh, op->kw,
                                  op->sh, op->sw, op->pad_h[0], op->pad_w[0], h_out,  w_out};
    const size_t out_frame = (size_t)h_out * w_out * op->c_out * cb->base.elem_size;
    int rc = VAE_OK;
    const int ph = cu_prof_begin(cb, CU_P_NARROW);
    /* kt = st = 1 (op.c): output frame j reads frame j; the frame lists go by value, in runs */
    for (int j0 = 0; j0 < t_out && rc == VAE_OK; j0 += CUK_MAX_FRAMES) {
        const int nf = t_out - j0 < CUK_MAX_FRAMES ? t_out - j0 : CUK_MAX_FRAMES;
        cuk_frames fr;
        memcpy(fr.p, frames + j0, (size_t)nf * sizeof *frames);
        const void *res = residual ? (const char *)residual + j0 * out_frame : NULL;
        rc = cu_check(cuk_depthwise_conv(cb->stream, cb->base.dtype, &fr, nf, &g, s->wdw, s->bias,
                                         res, (char *)y + j0 * out_frame),
                      op->name, "depthwise conv");
    }
    cu_prof_end(cb, ph);
    return rc;
}
