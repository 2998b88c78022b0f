/* igemm_n128.cu -- the implicit-GEMM conv kernels with 128 filters per tile (igemm_conv.cuh). */
#define VAE_IGEMM_INSTANTIATE
#include "igemm_conv.cuh"

VAE_IGEMM_DEFINE(128, 128, 32)
VAE_IGEMM_DEFINE(128, 128, 64)
