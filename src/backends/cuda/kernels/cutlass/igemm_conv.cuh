/* igemm_conv.cuh -- implicit-GEMM convolutions on Hopper tensor cores through CUTLASS 3 (internal
 * to src/backends/cuda/cutlass/).
 *
 * The GEMM view of a convolution over a contiguous window x [t_in][h][w][ci] (channels-last, the
 * executor's windows: cached frames ++ chunk, so no temporal padding) with filters
 * wt [co][kt][kh][kw][ci] (the backend's 3-D layout, KTRSC):
 *   M = t_out * h * w output pixels, N = co filters, K = kt * kh * kw * ci taps x channels.
 * CUTLASS's sm90 collective loads A tiles with the TMA engine in im2col mode (the spatial zero
 * padding is the TMA's out-of-bounds fill: nothing is gathered in memory), B tiles in tiled mode,
 * and multiplies with wgmma (one producer warp group, one consumer warp group; fp32 accumulators).
 * The epilogue computes y = acc + bias[n] + res in float32 and rounds once (LinCombPerColBias with
 * beta = 1 when there is a residual; res may be y: each tile reads its own part of C before it
 * writes it).
 *
 * One kernel per tile shape: TM output pixels x TN filters x TK channels of one tap. Instances
 * (igemm_n*.cu, one translation unit per filter tile so that they compile in parallel):
 *   TN = 96, 128, 192 (c_out a multiple of it), TK = 64 (c_in % 64 == 0) or 32 (c_in % 32 == 0);
 *   TM = 128, and 256 for TN = 96 (the consumer warp group holds TM x TN float32 accumulators:
 *   at most 192 per thread).
 * Measured on the H100: Wan2.1's 96-channel convs at 480x832 run at 410 TFLOP/s with 128 x 96 x 32
 * tiles, 512 with 256 x 96 x 32; 64-channel blocks with the upper half empty (c_in = 96) run slower
 * (330); TK = 96 does not build (CuTe's shared-memory layouts do not divide it). Operands: bfloat16
 * (the engine's default 16-bit type; no fp16 instances yet), and E4M3 for dtype fp8 with bf16
 * output, whose epilogue multiplies each output channel's accumulator by its factor (input scale x
 * weight scale) before bias and residual (igemm_epi_vector); the E4M3 instances also take TK = 128
 * (c_in % 128 == 0, igemm8_k128.cu; why: VAE_IGEMM8_INSTANCES below).
 */
#ifndef VAE_IGEMM_CONV_CUH
#define VAE_IGEMM_CONV_CUH

#include <cuda_runtime_api.h>

typedef struct igemm_args {
    const void *x;      /* [t_in][h][w][ci] */
    const void *wt;     /* [co][kt][kh][kw][ci] */
    const float *scale; /* FP8: [co], the epilogue's factor per output channel (else unused) */
    const float *bias;  /* [co] or NULL */
    const void *res;    /* [t_out][h][w][co] or NULL (may be y) */
    void *y;            /* [t_out][h][w][co] */
    int t_in, h, w, ci, co, kt, kh, kw, ph, pw;
    cudaStream_t stream;
    int xs; /* x's places per value: 1 packed; 2: E4M3 codes in 16-bit places (fp8_codes_bound) */
    int load; /* 1: no launch, the kernel's module loaded only (cuk_igemm_load) */
    int st, sh, sw; /* strides in t, h, w (the TMA's traversal strides) */
    int ph1, pw1;   /* zero padding after the rows and columns (ph, pw: before them) */
} igemm_args;

#define VAE_IGEMM_INSTANCES(X)                                                                     \
    X(256, 96, 64) X(128, 128, 32) X(128, 128, 64) X(128, 192, 32) X(128, 192, 64)
#define VAE_IGEMM_DECLARE(TM, TN, TK)                                                              \
    cudaError_t igemm_bf16_m##TM##_n##TN##_k##TK(const igemm_args *a);
VAE_IGEMM_INSTANCES(VAE_IGEMM_DECLARE)
/* FP8 (E4M3 operands, bf16 output): TK = 128 where c_in allows (128-byte rows, the widest
 * swizzle; half the pipeline's barriers per MAC): the 128- to 512-channel convs of Wan2.1 and
 * SeedVR2 ran 12-27% faster than with TK = 64 on the H200, else TK = 64 (c_in = 192); not 32:
 * with one wgmma k-step a k-block Wan2.1's 96-channel convs ran 12% slower than in bf16,
 * quantisation included (H100). */
#define VAE_IGEMM8_INSTANCES(X)                                                                    \
    X(256, 96, 64) X(128, 128, 64) X(128, 192, 64) X(128, 128, 128) X(128, 192, 128)
#define VAE_IGEMM8_DECLARE(TM, TN, TK)                                                             \
    cudaError_t igemm_e4m3_m##TM##_n##TN##_k##TK(const igemm_args *a);
VAE_IGEMM8_INSTANCES(VAE_IGEMM8_DECLARE)
/* Thread-block clusters of CM x CN tiles (suffix _cMN), whose TMA loads multicast the operand they
 * share: B (the filters) along M (2 x 1), A (the window) along N (1 x 2; c_out a multiple of 2 TN).
 * The kernels with K = 27 x c_in taps x channels load each tile's operands from L2 at close to its
 * bandwidth (SeedVR2's 512 -> 256 FP8 conv: ~50 GB in 5 ms), so a shared operand is time saved
 * (H200, conv time a step): Wan2.1's 96-channel convs at 480x832 (256 x 96 x 32, 2 x 1) 1.32 / 1.43
 * -> 1.21 / 1.29 ms; SeedVR2's 512-channel bf16 convs (128 x 128 x 64, 1 x 2) 10-11% faster, its
 * 256-channel ones 3-5%, FP8 512-channel ones (128 x 128 x 128, 1 x 2) 6-9%, 256-channel ones
 * unchanged. Elsewhere neither helped (the 192-filter tiles of Wan's 192/384-channel convs: 2 x 1
 * 1-3% slower, 1 x 2 within 1%). Two CTAs a multiprocessor instead (half the stages, 128 registers
 * a thread: one CTA's epilogue beside the other's mainloop) made the bf16 kernels 19-40% slower. */
#define VAE_IGEMM_CLUSTER_DECLARE(TM, TN, TK, CM, CN)                                              \
    cudaError_t igemm_bf16_m##TM##_n##TN##_k##TK##_c##CM##CN(const igemm_args *a);
#define VAE_IGEMM8_CLUSTER_DECLARE(TM, TN, TK, CM, CN)                                             \
    cudaError_t igemm_e4m3_m##TM##_n##TN##_k##TK##_c##CM##CN(const igemm_args *a);
VAE_IGEMM_CLUSTER_DECLARE(256, 96, 32, 2, 1)
VAE_IGEMM_CLUSTER_DECLARE(128, 128, 64, 1, 2)
VAE_IGEMM8_CLUSTER_DECLARE(128, 128, 128, 1, 2)

#ifdef VAE_IGEMM_INSTANTIATE /* the instance files: the CUTLASS kernel itself */
/* in this order: the conv headers use CuTe and KernelHardwareInfo without including them */
/* clang-format off */
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.hpp"
#include "cutlass/conv/convolution.h"
#include "cutlass/conv/convnd_problem_shape.hpp"
#include "cutlass/conv/dispatch_policy.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/conv/device/conv_universal_adapter.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"
/* clang-format on */

struct igemm_epi_scalar_tag {};
struct igemm_epi_vector_tag {};

/* The epilogues, D = beta * C + (alpha * acc + bias[n]) in float32 with one rounding to Out:
 * alpha one scalar (bf16 operands: 1), or one per output channel (FP8: input scale x weight
 * scale). */
template <class Out, class Tile> struct igemm_epi_scalar {
    using Fusion = cutlass::epilogue::fusion::LinCombPerColBias<Out, float, float, Out, float>;
};
template <class Out, class Tile> struct igemm_epi_vector {
    template <class T>
    using Vec =
        cutlass::epilogue::fusion::Sm90RowBroadcast<0, Tile, T, float,
                                                    cute::Stride<cute::_0, cute::_1, int64_t>, 4>;
    using Fusion = cutlass::epilogue::fusion::Sm90EVT<
        cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, Out, float,
                                               cutlass::FloatRoundStyle::round_to_nearest>,
        cutlass::epilogue::fusion::Sm90ScalarBroadcast<float,
                                                       cute::Stride<cute::_0, cute::_0, int64_t>>,
        cutlass::epilogue::fusion::Sm90SrcFetch<Out>,
        cutlass::epilogue::fusion::Sm90EVT<
            cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, float, float,
                                                   cutlass::FloatRoundStyle::round_to_nearest>,
            Vec<float>, cutlass::epilogue::fusion::Sm90AccFetch, Vec<float>>>;
};

template <class Elt, class Out, int TM, int TN, int TK, template <class, class> class Epi,
          int CM = 1, int CN = 1>
struct igemm_kernel {
    using Layout = cutlass::layout::TensorNDHWC;
    static constexpr int align = 16 / sizeof(Elt); /* TMA: 16-byte rows */
    static constexpr int align_out = 16 / sizeof(Out);
    using Tile = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::Shape<cute::Int<TK>>>;
    using Cluster = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
    using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
        cutlass::epilogue::collective::EpilogueTileAuto, float, float, Out, Layout, align_out, Out,
        Layout, align_out, cutlass::epilogue::TmaWarpSpecialized,
        typename Epi<Out, Tile>::Fusion>::CollectiveOp;
    using Mainloop = typename cutlass::conv::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kFprop, Elt,
        Layout, align, Elt, Layout, align, float, Tile, Cluster,
        cutlass::conv::collective::StageCountAutoCarveout<(int)sizeof(
            typename Epilogue::SharedStorage)>,
        cutlass::conv::KernelImplicitTmaWarpSpecializedSm90>::CollectiveOp;
    using Problem = cutlass::conv::ConvProblemShape<cutlass::conv::Operator::kFprop,
                                                    Mainloop::DispatchPolicy::NumSpatialDimensions>;
    using Kernel = cutlass::conv::kernel::ConvUniversal<Problem, Mainloop, Epilogue>;
    using Conv = cutlass::conv::device::ConvUniversalAdapter<Kernel>;
};

/* One launch on a->stream; cudaErrorNotSupported where CUTLASS cannot take the problem (TMA
 * limits, alignment) or would need a workspace. */
/* the epilogue's arguments: alpha 1, beta, bias (bf16 operands) */
template <class Args>
static void igemm_epi_args(Args &t, const igemm_args *a, igemm_epi_scalar_tag) {
    t.alpha = 1.0f;
    t.beta = a->res ? 1.0f : 0.0f;
    t.bias_ptr = a->bias;
}
/* beta, then (scale[n] * acc + bias[n]) (FP8) */
template <class Args>
static void igemm_epi_args(Args &t, const igemm_args *a, igemm_epi_vector_tag) {
    t = Args{{{a->res ? 1.0f : 0.0f}, {nullptr}, {}},
             {},
             {{a->scale, 0.0f, {}}, {}, {a->bias, 0.0f, {}}, {}},
             {}};
}

template <class Elt, class Out, int TM, int TN, int TK, template <class, class> class Epi,
          class Tag, int CM = 1, int CN = 1>
static cudaError_t igemm_run(const igemm_args *a) {
    using K = igemm_kernel<Elt, Out, TM, TN, TK, Epi, CM, CN>;
    if (a->load) { /* under CUDA's lazy loading, asking for its attributes loads it */
        cudaFuncAttributes fa;
        return cudaFuncGetAttributes(&fa, cutlass::device_kernel<typename K::Kernel>);
    }
    const int64_t c = (int64_t)a->ci * (a->xs > 1 ? a->xs : 1); /* a pixel's place in x */
    const int64_t k = a->ci;
    typename K::Problem ps(cutlass::conv::Mode::kCrossCorrelation, {1, a->t_in, a->h, a->w, a->ci},
                           {a->t_in * a->h * a->w * c, a->h * a->w * c, a->w * c, c, 1},
                           {a->co, a->kt, a->kh, a->kw, a->ci},
                           {a->kt * a->kh * a->kw * k, a->kh * a->kw * k, a->kw * k, k, 1},
                           {0, a->ph, a->pw}, {0, a->ph1, a->pw1}, {a->st, a->sh, a->sw}, {1, 1, 1},
                           1);
    typename K::Conv::Arguments args{};
    args.problem_shape = ps;
    args.mainloop.ptr_A = static_cast<const Elt *>(a->x);
    args.mainloop.ptr_B = static_cast<const Elt *>(a->wt);
    /* C and D strides: the output's pixel modes (w, h, t, n) from the problem's packed strides */
    auto &ep = args.epilogue;
    cute::for_each(cute::make_seq<cute::rank<0>(typename K::Kernel::StrideC{})>{}, [&](auto i) {
        cute::get<0, i>(ep.dC) = ps.stride_C[K::Problem::RankT - 2 - i];
        cute::get<0, i>(ep.dD) = ps.stride_C[K::Problem::RankT - 2 - i];
    });
    ep.ptr_C = static_cast<const Out *>(a->res ? a->res : a->y);
    ep.ptr_D = static_cast<Out *>(a->y);
    igemm_epi_args(ep.thread, a, Tag{});
    typename K::Conv op;
    if (op.can_implement(args) != cutlass::Status::kSuccess ||
        K::Conv::get_workspace_size(args) != 0)
        return cudaErrorNotSupported;
    if (op.initialize(args, nullptr, a->stream) != cutlass::Status::kSuccess)
        return cudaErrorLaunchFailure;
    if (op.run(a->stream) != cutlass::Status::kSuccess) {
        const cudaError_t e = cudaGetLastError();
        return e != cudaSuccess ? e : cudaErrorLaunchFailure;
    }
    return cudaGetLastError();
}

#define VAE_IGEMM_DEFINE(TM, TN, TK)                                                               \
    cudaError_t igemm_bf16_m##TM##_n##TN##_k##TK(const igemm_args *a) {                            \
        return igemm_run<cutlass::bfloat16_t, cutlass::bfloat16_t, TM, TN, TK, igemm_epi_scalar,   \
                         igemm_epi_scalar_tag>(a);                                                 \
    }
#define VAE_IGEMM8_DEFINE(TM, TN, TK)                                                              \
    cudaError_t igemm_e4m3_m##TM##_n##TN##_k##TK(const igemm_args *a) {                            \
        return igemm_run<cutlass::float_e4m3_t, cutlass::bfloat16_t, TM, TN, TK, igemm_epi_vector, \
                         igemm_epi_vector_tag>(a);                                                 \
    }
#define VAE_IGEMM_CLUSTER_DEFINE(TM, TN, TK, CM, CN)                                               \
    cudaError_t igemm_bf16_m##TM##_n##TN##_k##TK##_c##CM##CN(const igemm_args *a) {                \
        return igemm_run<cutlass::bfloat16_t, cutlass::bfloat16_t, TM, TN, TK, igemm_epi_scalar,   \
                         igemm_epi_scalar_tag, CM, CN>(a);                                         \
    }
#define VAE_IGEMM8_CLUSTER_DEFINE(TM, TN, TK, CM, CN)                                              \
    cudaError_t igemm_e4m3_m##TM##_n##TN##_k##TK##_c##CM##CN(const igemm_args *a) {                \
        return igemm_run<cutlass::float_e4m3_t, cutlass::bfloat16_t, TM, TN, TK, igemm_epi_vector, \
                         igemm_epi_vector_tag, CM, CN>(a);                                         \
    }
#endif /* VAE_IGEMM_INSTANTIATE */

#endif
