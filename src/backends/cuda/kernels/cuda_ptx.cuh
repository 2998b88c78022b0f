/* cuda_ptx.cuh -- PTX wrappers for the hand-written tensor-core kernels (sm_80+: cp.async,
 * ldmatrix, mma.sync m16n8k16; sm_89+: mma.sync m16n8k32 on E4M3), shared by cuda_attention.cu,
 * cuda_narrow_conv.cu, cuda_stem_conv.cu and cuda_mma_conv.cu (nvcc only). */
#ifndef VAE_CUDA_PTX_CUH
#define VAE_CUDA_PTX_CUH

#include <cuda_fp8.h>

#include "backends/cuda/kernels/cuda_common.cuh"

static __device__ __forceinline__ unsigned cu_saddr(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
/* 16 bytes global -> shared without passing through registers; bytes = 0 reads nothing and
 * stores zeros (tails past n or c). */
static __device__ __forceinline__ void cu_cp16(void *dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(cu_saddr(dst)), "l"(src),
                 "r"(bytes)
                 : "memory");
}
static __device__ __forceinline__ void cu_cp_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* wait until at most N of this thread's committed groups are still in flight */
template <int N> static __device__ __forceinline__ void cu_cp_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
/* four 8x8 16-bit matrices; lane L gives the row address of row L % 8 of matrix L / 8 */
static __device__ __forceinline__ void cu_ldsm(unsigned r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(cu_saddr(p))
                 : "memory");
}
/* the same, each matrix transposed */
static __device__ __forceinline__ void cu_ldsm_t(unsigned r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(cu_saddr(p))
                 : "memory");
}
/* mma.sync of a 16x8 tile (shape "m16n8k16", "m16n8k32") on PTX type ty: d[4] += a[4] b{b0, b1},
 * float32 accumulation */
#define CU_MMA_SYNC(shape, ty, d, a, b0, b1)                                                       \
    asm volatile("mma.sync.aligned." shape ".row.col.f32." ty "." ty ".f32 {%0,%1,%2,%3}, "        \
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                                        \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                  \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
/* d[16x8] += a[16x16] b[16x8], float32 accumulation; two values per 32-bit register, the lower
 * index in the low half (pack: cu_pair16) */
template <typename T> struct cu_mma;
template <> struct cu_mma<__nv_bfloat16> : cu_pair16<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float d[4], const unsigned a[4], unsigned b0,
                                               unsigned b1) {
        CU_MMA_SYNC("m16n8k16", "bf16", d, a, b0, b1);
    }
};
template <> struct cu_mma<__half> : cu_pair16<__half> {
    static __device__ __forceinline__ void run(float d[4], const unsigned a[4], unsigned b0,
                                               unsigned b1) {
        CU_MMA_SYNC("m16n8k16", "f16", d, a, b0, b1);
    }
};
/* d[16x8] += a[16x32] b[32x8] on E4M3 codes (sm_89+; elsewhere it traps: cuda_mma_conv.cu's
 * host side runs it only where the device and the code have it). The fragments are the 16-bit
 * k16 ones byte for byte: four codes a 32-bit register, the lower index in the lowest byte. */
template <> struct cu_mma<__nv_fp8_e4m3> {
    static __device__ __forceinline__ void run(float d[4], const unsigned a[4], unsigned b0,
                                               unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
        CU_MMA_SYNC("m16n8k32", "e4m3", d, a, b0, b1);
#else
        (void)d, (void)a, (void)b0, (void)b1;
        __trap();
#endif
    }
};
/* the kernel's dynamic shared memory */
static __device__ __forceinline__ unsigned char *cu_dyn_smem(void) {
    extern __shared__ __align__(16) unsigned char cu_dsm[];
    return cu_dsm;
}

#endif
