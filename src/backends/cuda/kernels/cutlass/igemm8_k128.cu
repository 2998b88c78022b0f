/* igemm8_k128.cu -- FP8 implicit-GEMM conv kernels, 128 channels a k-block (igemm_conv.cuh). */
#define VAE_IGEMM_INSTANTIATE
#include "igemm_conv.cuh"

VAE_IGEMM8_DEFINE(128, 128, 128)
VAE_IGEMM8_DEFINE(128, 192, 128)
