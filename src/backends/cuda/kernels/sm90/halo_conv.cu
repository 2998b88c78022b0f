/* halo_conv.cu -- the halo-tile wgmma convolution's host side (sm_90a): the filters' tiling into
 * the kernel's layout, the input window's TMA map, one launch per call, and the C entry points
 * of halo_conv.h. The kernel, and why it is built the way it is: halo_conv_kernel.cuh. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "backends/cuda/kernels/sm90/halo_conv.h"
#include "backends/cuda/kernels/sm90/halo_conv_kernel.cuh"

namespace halo {
/* wt [96][kt][taps][c_in] (KTRSC; taps 9: 3 x 3, 4: 2 x 2) -> [kt][c_in / 96][taps][CHUNKS][96]
 * [EPC] (lay<T>) */
template <typename T>
__global__ void tile_filters_kernel(const T *src, T *dst, int kt, int taps, int c_in) {
    typedef lay<T> L;
    const int64_t n = (int64_t)CB * kt * taps * c_in;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int ci = i % c_in, tap = i / c_in % (kt * taps), co = i / c_in / (kt * taps);
        const int f = tap / taps, s = tap % taps, cb = ci / CB, ch = ci % CB / L::EPC,
                  e = ci % L::EPC;
        const int64_t o =
            ((((int64_t)(f * (c_in / CB) + cb) * taps + s) * L::CHUNKS + ch) * CB + co) * L::EPC +
            e;
        dst[o] = src[i];
    }
}

/* one launch of the kernel for operands T, output TO on s (its shared memory raised past the 48
 * KB default first) */
template <typename T, typename TO>
static cudaError_t launch(cudaStream_t s, int grid, const CUtensorMap &map, const args &a) {
    void (*kernel)(const CUtensorMap, args) = halo_conv_kernel<T, TO, 9>;
    if constexpr (sizeof(T) == 2) /* the phase mode: 16-bit only */
        if (a.up2) kernel = halo_conv_kernel<T, TO, 4>;
    const int smem = lay<T>::SMEM;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    kernel<<<grid, THREADS, smem, s>>>(map, a);
    return cudaGetLastError();
}
} /* namespace halo */

extern "C" {
int halo_conv_fits(int kt, int kh, int kw, int ph, int pw, int c_in, int c_out) {
    return c_out == halo::CB && kh == 3 && kw == 3 && ph == 1 && pw == 1 && kt >= 1 && c_in > 0 &&
           c_in % halo::CB == 0;
}

cudaError_t halo_conv_tile_filters(cudaStream_t s, const void *src, void *dst, int kt, int c_in) {
    /* both 16-bit types move as bf16 */
    halo::tile_filters_kernel<__nv_bfloat16>
        <<<256, 256, 0, s>>>((const __nv_bfloat16 *)src, (__nv_bfloat16 *)dst, kt, 9, c_in);
    return cudaGetLastError();
}

cudaError_t halo_conv_tile_filters8(cudaStream_t s, const void *src, void *dst, int kt, int c_in) {
    halo::tile_filters_kernel<halo::e4m3>
        <<<256, 256, 0, s>>>((const halo::e4m3 *)src, (halo::e4m3 *)dst, kt, 9, c_in);
    return cudaGetLastError();
}

cudaError_t halo_conv_tile_phase_filters(cudaStream_t s, const void *src, void *dst, int c_in) {
    const size_t phase = (size_t)halo::CB * 4 * c_in; /* a phase's values, both layouts */
    for (int p = 0; p < 4; p++)
        halo::tile_filters_kernel<__nv_bfloat16><<<256, 256, 0, s>>>(
            (const __nv_bfloat16 *)src + p * phase, (__nv_bfloat16 *)dst + p * phase, 1, 4, c_in);
    return cudaGetLastError();
}

/* the input window as a 4-D tensor (c_in, w, h, t_in) with boxes of 16 bytes of channels x 18 x
 * 18 pixels of one frame (ty: a CU_TENSOR_MAP_DATA_TYPE_*, eb its bytes; a pixel's place xs
 * times its values' bytes: 2 for E4M3 codes in 16-bit places); cuTensorMapEncodeTiled through
 * the runtime's driver entry point (no libcuda link) */
static cudaError_t halo_map(CUtensorMap *map, CUtensorMapDataType ty, int eb, int xs, const void *x,
                            int t_in, int h, int w, int c_in) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                             cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            fn = nullptr;
        return (PFN_cuTensorMapEncodeTiled_v12000)fn;
    }();
    if (!encode) return cudaErrorNotSupported;
    const cuuint64_t dims[4] = {(cuuint64_t)c_in, (cuuint64_t)w, (cuuint64_t)h, (cuuint64_t)t_in};
    const cuuint64_t px = (cuuint64_t)c_in * eb * xs; /* a pixel's place */
    const cuuint64_t strides[3] = {px, (cuuint64_t)w * px, (cuuint64_t)h * w * px};
    const cuuint32_t box[4] = {(cuuint32_t)(16 / eb), halo::HALO, halo::HALO, 1},
                     one[4] = {1, 1, 1, 1};
    const CUresult r =
        encode(map, ty, 4, (void *)x, dims, strides, box, one, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorNotSupported;
}

/* the launch of either mode (up2: the phases of halo_conv_run_up2); scale non-NULL: e4m3
 * operands (halo_conv_run8) */
static cudaError_t halo_run(cudaStream_t s, int is_half, const void *x, int xs, const void *wt,
                            const float *scale, const float *bias, const void *res,
                            const halo_conv_norm *norm, void *y, int kt, int t_out, int h, int w,
                            int c_in, int up2, int blocks) {
    halo::args a;
    a.x = x, a.wt = wt, a.scale = scale, a.bias = bias, a.res = res, a.y = y;
    a.norm = norm ? *norm : halo_conv_norm{nullptr, 0, 0.0f, 0.0f};
    a.kt = kt, a.h = h, a.w = w, a.c_in = c_in, a.blocks = c_in / halo::CB;
    a.tiles_x = (w + halo::TILE - 1) / halo::TILE, a.tiles_y = (h + halo::TILE - 1) / halo::TILE;
    a.up2 = up2, a.oh = up2 ? 2 * h : h, a.ow = up2 ? 2 * w : w;
    a.tiles = a.tiles_x * a.tiles_y * t_out * (up2 ? 4 : 1);
    a.taps = up2 ? 4 : 9;
    a.units = kt * a.blocks * a.taps;
    if (a.tiles <= 0) return cudaSuccess;
    const int grid = a.tiles < blocks ? a.tiles : blocks;
    CUtensorMap map;
    const CUtensorMapDataType ty = scale     ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                   : is_half ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                             : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    cudaError_t e = halo_map(&map, ty, scale ? 1 : 2, xs, x, t_out + kt - 1, h, w, c_in);
    if (e != cudaSuccess) return e;
    if (scale)
        return is_half ? halo::launch<halo::e4m3, __half>(s, grid, map, a)
                       : halo::launch<halo::e4m3, __nv_bfloat16>(s, grid, map, a);
    return is_half ? halo::launch<__half, __half>(s, grid, map, a)
                   : halo::launch<__nv_bfloat16, __nv_bfloat16>(s, grid, map, a);
}

cudaError_t halo_conv_run(cudaStream_t s, int is_half, const void *x, const void *wt,
                          const float *bias, const void *res, const halo_conv_norm *norm, void *y,
                          int kt, int t_out, int h, int w, int c_in, int blocks) {
    return halo_run(s, is_half, x, 1, wt, NULL, bias, res, norm, y, kt, t_out, h, w, c_in, 0,
                    blocks);
}

cudaError_t halo_conv_run8(cudaStream_t s, int is_half, const void *x8, int xs, const void *wt8,
                           const float *scale, const float *bias, const void *res,
                           const halo_conv_norm *norm, void *y, int kt, int t_out, int h, int w,
                           int c_in, int blocks) {
    if (!scale) return cudaErrorInvalidValue;
    return halo_run(s, is_half, x8, xs, wt8, scale, bias, res, norm, y, kt, t_out, h, w, c_in, 0,
                    blocks);
}

cudaError_t halo_conv_load(int is_half, int e4m3, int up2) {
    cudaFuncAttributes fa; /* under CUDA's lazy loading, asking for its attributes loads it */
    if (e4m3)
        return is_half ? cudaFuncGetAttributes(&fa, halo::halo_conv_kernel<halo::e4m3, __half, 9>)
                       : cudaFuncGetAttributes(
                             &fa, halo::halo_conv_kernel<halo::e4m3, __nv_bfloat16, 9>);
    if (up2)
        return is_half ? cudaFuncGetAttributes(&fa, halo::halo_conv_kernel<__half, __half, 4>)
                       : cudaFuncGetAttributes(
                             &fa, halo::halo_conv_kernel<__nv_bfloat16, __nv_bfloat16, 4>);
    return is_half ? cudaFuncGetAttributes(&fa, halo::halo_conv_kernel<__half, __half, 9>)
                   : cudaFuncGetAttributes(&fa,
                                           halo::halo_conv_kernel<__nv_bfloat16, __nv_bfloat16, 9>);
}

cudaError_t halo_conv_run_up2(cudaStream_t s, int is_half, const void *x, const void *wt,
                              const float *bias, const void *res, void *y, int t, int h, int w,
                              int c_in, int blocks) {
    return halo_run(s, is_half, x, 1, wt, NULL, bias, res, NULL, y, 1, t, h, w, c_in, 1, blocks);
}
}
