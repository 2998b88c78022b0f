/* cuda_conv.h -- what the CUDA backend's conv floor offers the floors above it (internal): the
 * conv op's entry points (cuda_conv.c, cuda_conv_igemm.c), cuDNN's life cycle and warm-ups
 * (cudnn_conv.c) and the tune cache (cuda_tune_cache.c). What the conv's files share among
 * themselves is in cuda_conv_internal.h.
 */
#ifndef VAE_CUDA_CONV_H
#define VAE_CUDA_CONV_H

#include "backends/cuda/base/cuda_base.h"

/* The E4M3 scale an op writes its output's codes with (op.h fp8_codes_bound; the one
 * cuda_fp8.cu's quantisation takes from that bound), 0: values */
static inline float cu_codes_scale(const vae_op *op) {
    return op->fp8_codes_bound > 0 ? op->fp8_codes_bound / 448.0f : 0.0f;
}
int cuda_conv_prepare(vae_backend *be, const vae_op *op, void **state);
void cuda_conv_unprepare(vae_backend *be, const vae_op *op, void *state);
int cuda_conv(vae_backend *be, const vae_op *op, void *state, const void *const *frames, int n_in,
              int h, int w, const void *residual, void *y, int t_out, int h_out, int w_out);
int cuda_conv_window(vae_backend *be, const vae_op *op, void *state);
/* backend.h fp8_codes: the producer writes E4M3 codes that the reader's kernels take
 * (cuda_conv_igemm.c) */
int cuda_fp8_codes(vae_backend *be, const vae_op *producer, const vae_op *reader);
/* backend.h fp8_conv: the E4M3 kernel (fp8_shapes.h) that would run this conv, VAE_FP8_NONE:
 * none (cuda_conv_igemm.c) */
int cuda_conv_fp8(vae_backend *be, const vae_op *op);
/* puts the conv's parameters as its first uses will upload them into the stage (cu_stage_put) */
void cuda_conv_stage(cuda_backend *cb, const vae_op *op);
/* 1: no own kernel takes this conv (strided, asymmetric padding): cuDNN runs it */
int cuda_conv_wants_dnn(const cuda_backend *cb, const vae_op *op);
/* the modules of the sm_90a kernels p's convs could take, loaded now (cuda_warm) */
void cuda_conv_load_kernels(cuda_backend *cb, const vae_program *p);
/* the conv's part of the vtbl's scratch_need (cuda_ops.c's cuda_scratch_need) */
int64_t cuda_conv_scratch_need(const cuda_backend *cb, const vae_op *op, int t, int h, int w,
                               int minimal);

/* cuda_tune_cache.c: a conv path choice for a shape key (no spaces), from the file or this
 * process (-1: none), and a new one (kept, and appended to the file) */
int cu_tune_lookup(cuda_backend *cb, const char *shape);
void cu_tune_store(cuda_backend *cb, const char *shape, int path);
/* an entry whose replay failed: dropped here and in the file (later processes choose afresh) */
void cu_tune_forget(cuda_backend *cb, const char *shape);
/* the first entry from index `from` on whose key starts with prefix: its index (-1: none), *shape
 * the key after the prefix, *path its number */
int cu_tune_next(cuda_backend *cb, const char *prefix, int from, const char **shape, int *path);
void cu_tune_cache_free(cuda_backend *cb);

/* ---- cuDNN (cudnn_conv.c) ---- */
void cu_dnn_destroy(cuda_backend *cb);
/* cuDNN's first use in the process, paid now (cuda_warm) */
int cu_dnn_warm(cuda_backend *cb);
/* the plans earlier processes' calls of p's convs used (the tune cache), made now (cuda_warm) */
int cu_dnn_warm_seen(cuda_backend *cb, const vae_program *p);
/* the cuDNN plans made so far (refusals included) */
int cu_dnn_plans(const cuda_backend *cb);
/* "cuDNN 9.x.y" or "cuDNN unavailable" */
const char *cu_dnn_describe(cuda_backend *cb, char *buf, size_t len);

#endif
