/* cuda_depthwise_conv.cu -- depthwise convs (op.h: groups = c_in, m = c_out / c_in outputs per
 * input channel; the TAEHV super decoder's 7x7), directly on the CUDA cores.
 *
 * A depthwise conv has kh*kw MACs an output value, so it runs at memory speed; the tensor-core
 * paths would see it as a dense conv with filters zero off the diagonal (c_in times the work,
 * which is what made taew2_2_super slow). A block takes 32 output channels (one per lane, so that
 * the loads of a pixel's channels coalesce) by 8 pixels at a time, holds its channels' filters in
 * shared memory, and walks its share of one frame's pixels (blockIdx.z); each thread sums bias +
 * residual, then the taps in (dh, dw) order, in float32, and stores once. */
#include "backends/cuda/kernels/cuda_common.cuh"

/* a block: DW_CH channels by DW_ROWS pixels at a time, about DW_STEPS times (its filters' load
 * into shared memory spread over that many pixels) */
enum { DW_CH = 32, DW_ROWS = 8, DW_STEPS = 8 };

template <typename T>
__global__ void depthwise_conv_kernel(cuk_frames frames, cuk_depthwise_geom g,
                                      const float *__restrict__ wt, const float *__restrict__ bias,
                                      const T *res, T *y) {
    extern __shared__ float ws[]; /* [taps][DW_CH] of this block's channels */
    const int taps = g.kh * g.kw, c0 = blockIdx.x * DW_CH;
    for (int i = threadIdx.y * DW_CH + threadIdx.x; i < taps * DW_CH; i += DW_CH * DW_ROWS) {
        const int c = c0 + i % DW_CH, tap = i / DW_CH;
        ws[i] = c < g.c_out ? wt[(int64_t)c * taps + tap] : 0.0f;
    }
    __syncthreads();
    const int co = c0 + threadIdx.x;
    if (co >= g.c_out) return;
    const int ci = co / (g.c_out / g.c_in);
    const T *x = (const T *)frames.p[blockIdx.z];
    const int64_t hw_out = (int64_t)g.ho * g.wo;
    const int64_t out0 = (int64_t)blockIdx.z * hw_out * g.c_out;
    const float b = bias ? bias[co] : 0.0f;
    for (int64_t p = (int64_t)blockIdx.y * DW_ROWS + threadIdx.y; p < hw_out;
         p += (int64_t)gridDim.y * DW_ROWS) {
        const int oh = (int)(p / g.wo), ow = (int)(p % g.wo);
        const int64_t o = out0 + p * g.c_out + co;
        float acc = b + (res ? cu_ld(res, o) : 0.0f);
        for (int dh = 0; dh < g.kh; dh++) {
            const int ih = oh * g.sh - g.ph + dh;
            if (ih < 0 || ih >= g.h) continue;
            const T *xr = x + (int64_t)ih * g.w * g.c_in + ci;
            const float *wr = ws + dh * g.kw * DW_CH + threadIdx.x;
            for (int dw = 0; dw < g.kw; dw++) {
                const int iw = ow * g.sw - g.pw + dw;
                if (iw >= 0 && iw < g.w)
                    acc = fmaf(wr[dw * DW_CH], cu_ld(xr, (int64_t)iw * g.c_in), acc);
            }
        }
        cu_st(y, o, acc);
    }
}

template <typename T>
static void depthwise_launch(cudaStream_t s, const cuk_frames *frames, int nf,
                             const cuk_depthwise_geom *g, const float *wt, const float *bias,
                             const void *res, void *y) {
    const int64_t rows = ((int64_t)g->ho * g->wo + DW_ROWS * DW_STEPS - 1) / (DW_ROWS * DW_STEPS);
    const dim3 grid((unsigned)((g->c_out + DW_CH - 1) / DW_CH),
                    (unsigned)(rows < 65535 ? rows : 65535), (unsigned)nf);
    const size_t shared = (size_t)g->kh * g->kw * DW_CH * sizeof(float);
    depthwise_conv_kernel<T>
        <<<grid, dim3(DW_CH, DW_ROWS), shared, s>>>(*frames, *g, wt, bias, (const T *)res, (T *)y);
}

extern "C" int cuk_depthwise_fits(int kh, int kw) {
    return kh >= 1 && kw >= 1 && kh * kw <= CUK_DEPTHWISE_MAX_TAPS;
}

extern "C" cudaError_t cuk_depthwise_conv(cudaStream_t s, int dtype, const cuk_frames *frames,
                                          int nf, const cuk_depthwise_geom *g, const float *wt,
                                          const float *bias, const void *res, void *y) {
    if (nf < 1 || nf > CUK_MAX_FRAMES || g->c_in < 1 || g->c_out < 1 || g->c_out % g->c_in ||
        !cuk_depthwise_fits(g->kh, g->kw) || g->sh < 1 || g->sw < 1 || g->ho < 1 || g->wo < 1 ||
        g->h < 1 || g->w < 1 || g->c_out / DW_CH >= 65535)
        return cudaErrorInvalidValue;
    CU_DISPATCH(dtype, depthwise_launch, s, frames, nf, g, wt, bias, res, y);
    return cudaGetLastError();
}
