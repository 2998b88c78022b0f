/* igemm8_n96_n128.cu -- FP8 implicit-GEMM conv kernels with 96 and 128 filters per tile
 * (igemm_conv.cuh). */
#define VAE_IGEMM_INSTANTIATE
#include "igemm_conv.cuh"

VAE_IGEMM8_DEFINE(256, 96, 64)
VAE_IGEMM8_DEFINE(128, 128, 64)
