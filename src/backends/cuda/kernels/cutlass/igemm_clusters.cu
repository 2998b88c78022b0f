/* igemm_clusters.cu -- implicit-GEMM conv kernels in clusters of 1 x 2 tiles (igemm_conv.cuh): the
 * 128-filter tiles of c_out multiples of 256, bf16 and FP8. */
#define VAE_IGEMM_INSTANTIATE
#include "igemm_conv.cuh"

VAE_IGEMM_CLUSTER_DEFINE(128, 128, 64, 1, 2)
VAE_IGEMM8_CLUSTER_DEFINE(128, 128, 128, 1, 2)
