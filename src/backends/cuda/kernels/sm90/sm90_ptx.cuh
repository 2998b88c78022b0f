/* sm90_ptx.cuh -- PTX wrappers for the hand-written Hopper kernels of this folder (sm_90a:
 * wgmma descriptors and fences, mbarriers, TMA bulk and tensor copies; nvcc only). The tensor-core
 * instructions themselves stay with their kernel (their shapes are its own). */
#ifndef VAE_SM90_PTX_CUH
#define VAE_SM90_PTX_CUH

#include <cuda.h>
#include <stdint.h>

namespace sm90 {
/* wgmma operand descriptor, K-major, no swizzle: start address, LBO = the byte step between the
 * two 16-byte K halves of a K step (k16 of 16-bit, k32 of 8-bit values), SBO = the byte step
 * between 8-row groups (PTX ISA, matrix descriptor; CuTe's make_gmma_desc for Major::K
 * INTERLEAVE) */
static __device__ __forceinline__ uint64_t desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (uint64_t)((addr & 0x3ffff) >> 4) | (uint64_t)(lbo >> 4) << 16 |
           (uint64_t)(sbo >> 4) << 32;
}

static __device__ __forceinline__ void wg_fence(void) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void wg_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> static __device__ __forceinline__ void wg_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* mbarriers (shared::cta, 64-bit): a full barrier completes with one arrival (the producer's
 * expect_tx) and the bytes of the copies on it, an empty one with an arrival per consumer warp */
static __device__ __forceinline__ void bar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void bar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
static __device__ __forceinline__ void bar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
static __device__ __forceinline__ void bar_wait(unsigned bar, unsigned parity) {
    unsigned ok;
    do {
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(ok)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!ok);
}
/* bytes (a multiple of 16) global -> shared by the TMA engine, completing on bar */
static __device__ __forceinline__ void bulk_load(unsigned dst, const void *src, unsigned bytes,
                                                 unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}
/* one box of the 4-D tensor map at coordinates (c, x, y, t); outside the tensor: zeros */
static __device__ __forceinline__ void tma_load_4d(unsigned dst, const CUtensorMap *map, int c,
                                                   int x, int y, int t, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(c), "r"(x), "r"(y), "r"(t), "r"(bar)
                 : "memory");
}
} /* namespace sm90 */

#endif
