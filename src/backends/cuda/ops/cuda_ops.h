/* cuda_ops.h -- the CUDA backend's ops floor (internal): the vtable's entries for the ops other
 * than the conv (cuda_ops.c, cuda_att.c), the caller's tensors (cuda_io.c), the user's frames
 * staged on a stream of their own (cuda_io_stage.c) and NCCL (cuda_comm_nccl.c).
 */
#ifndef VAE_CUDA_OPS_H
#define VAE_CUDA_OPS_H

#include "backends/cuda/base/cuda_base.h"

/* vtbl scratch_need (its conv part: cuda_conv.h cuda_conv_scratch_need) */
int64_t cuda_scratch_need(vae_backend *be, const vae_op *op, int t, int h, int w, int minimal);
int cuda_ops_prepare(vae_backend *be, const vae_op *op, void **state);
void cuda_ops_destroy(cuda_backend *cb); /* frees the shuffle tables */
void cuda_ops_unprepare(vae_backend *be, const vae_op *op, void *state);
int cuda_norm(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t, int h,
              int w);
/* backend.h comm_create: NCCL among CUDA lanes (cuda_comm_nccl.c) */
struct vae_comm;
int cuda_comm_create(vae_backend *const *lanes, int n, struct vae_comm **ranks);
int cuda_comm_join(vae_backend *be, const unsigned char *id, int rank, int world,
                   struct vae_comm **out);
int cuda_norm_rows(vae_backend *be, const vae_op *op, void *state, const void *x, size_t x_pitch,
                   void *y, size_t y_pitch, int64_t rows, int w);
int cuda_norm_stats(vae_backend *be, const vae_op *op, const void *x, int t, int h, int w, int y0,
                    int rows, double *st, int dev);
int cuda_norm_apply(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t,
                    int h, int w, const double *st, int dev);
int cuda_eltwise(vae_backend *be, const vae_op *op, void *state, const void *a, const void *b2,
                 void *y, int64_t n_vox);
int cuda_resample(vae_backend *be, const vae_op *op, const void *const *frames, int n_in, int h,
                  int w, void *y, int t_out);
int cuda_warm(vae_backend *be, const vae_program *p);
int cuda_attention(vae_backend *be, const vae_op *op, void *state, const void *qkv, void *y, int t,
                   int h, int w, int q0, int q1);
/* cuda_att.c: the scratch an attention of n tokens a frame takes (its GEMM path's blocks), and
 * the GEMM path's first use paid at session creation (cuda_warm) */
int64_t cu_att_scratch_need(cuda_backend *cb, const vae_op *op, int n);
int cu_att_warm(cuda_backend *cb, const vae_program *p);

/* cuda_io.c: the caller's device tensors and stream (vtbl entries) */
int cu_view_finite(vae_backend *be, const vae_io_view *v, int64_t *first_bad);
int cu_view_import(vae_backend *be, void *dst, const vae_io_view *src, int f, int n, int y0,
                   int rows, int x0, int cols);
int cu_view_export(vae_backend *be, const void *src, int t, int h, int w, int sy, int sx, int rows,
                   int cols, const vae_io_view *dst, int f, int y0, int x0);
int cu_stream_join(vae_backend *be, void *stream, int after);
int cu_view_reach(vae_backend *be, const vae_io_view *v);

/* ---- cuda_io_stage.c ---- */
/* dst [n][c] (activation dtype) <- host planar float32 src [c][n], copied into the input stage
 * on the copy stream, converted on the compute stream (b: src's transfer buffer, its event
 * recorded after the copy, or NULL); *done = 0 where there is no stage (nothing queued) */
int cu_io_upload(cuda_backend *cb, void *dst, const float *src, int64_t n, int c, cu_host_buf *b,
                 int *done);
/* vtbl download_stage (backend.h): *pieces = 0 where there is no stage (no error) */
int cu_io_stage_put(vae_backend *be, const void *src, int t, int h, int w, int c, int piece,
                    int *pieces);
/* the copy of staged output piece k into b queued on the copy stream (b->ev recorded after it) */
int cu_io_stage_copy(cuda_backend *cb, int k, cu_host_buf *b);
void cu_io_stage_release(cuda_backend *cb); /* the stages given back (a run's start) */
void cu_io_stage_destroy(cuda_backend *cb);

#endif
