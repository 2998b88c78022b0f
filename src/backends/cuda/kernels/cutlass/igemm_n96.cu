/* igemm_n96.cu -- the implicit-GEMM conv kernels with 96 filters per tile (igemm_conv.cuh). */
#define VAE_IGEMM_INSTANTIATE
#include "igemm_conv.cuh"

VAE_IGEMM_CLUSTER_DEFINE(256, 96, 32, 2, 1)
VAE_IGEMM_DEFINE(256, 96, 64)
