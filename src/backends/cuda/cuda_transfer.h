/* cuda_transfer.h -- the CUDA backend's copies, vtbl entries (cuda_transfer.c; backend.h says what
 * each one does), for the vtable in cuda_backend.c. */
#ifndef VAE_CUDA_TRANSFER_H
#define VAE_CUDA_TRANSFER_H

#include "core/backend.h"

int cuda_upload(vae_backend *be, void *dst, const float *src, size_t n);
int cuda_download(vae_backend *be, float *dst, const void *src, size_t n);
/* planar frames: pinned host buffers used in turn, or the io stage (cuda_io_stage.c) */
void *cuda_stage_in(vae_backend *be, size_t bytes);
int cuda_upload_planar(vae_backend *be, void *dst, const float *src, int t, int h, int w, int c);
int cuda_download_planar(vae_backend *be, const void *src, int t, int h, int w, int c,
                         float **host);
int cuda_download_staged(vae_backend *be, int k, float **host);
int cuda_download_wait(vae_backend *be, const float *host);
int cuda_copy(vae_backend *be, void *dst, const void *src, size_t bytes);
int cuda_copy2d(vae_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                size_t row_bytes, size_t rows);
int cuda_zero(vae_backend *be, void *dst, size_t bytes);
int cuda_zero2d(vae_backend *be, void *dst, size_t dst_pitch, size_t row_bytes, size_t rows);

#endif
