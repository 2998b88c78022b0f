/* igemm_n192.cu -- the implicit-GEMM conv kernels with 192 filters per tile (igemm_conv.cuh). */
#define VAE_IGEMM_INSTANTIATE
#include "igemm_conv.cuh"

VAE_IGEMM_DEFINE(128, 192, 32)
VAE_IGEMM_DEFINE(128, 192, 64)
