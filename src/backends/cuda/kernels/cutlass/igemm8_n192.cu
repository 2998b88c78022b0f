/* igemm8_n192.cu -- the FP8 implicit-GEMM conv kernel with 192 filters per tile
 * (igemm_conv.cuh). */
#define VAE_IGEMM_INSTANTIATE
#include "igemm_conv.cuh"

VAE_IGEMM8_DEFINE(128, 192, 64)
