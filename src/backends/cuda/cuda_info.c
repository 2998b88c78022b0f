/* cuda_info.c -- describing the GPUs (for `vae --info`), without creating a backend. */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

int vae_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}

int vae_cuda_device_info(int index, vae_device_info *info) {
    int n = 0;
    cudaError_t count_err = cudaGetDeviceCount(&n);
    if (count_err != cudaSuccess) {
        cudaGetLastError();
        /* why CUDA is off, in the user's terms: no driver at all reads "driver version is
           insufficient" in the runtime's words */
        int driver = 0, runtime = 0;
        cudaDriverGetVersion(&driver);
        cudaRuntimeGetVersion(&runtime);
        if (driver == 0)
            return vae_fail(VAE_EDEVICE, "CUDA device %d: no NVIDIA driver found (no GPU here, "
                            "or its driver is not installed)", index);
        if (driver < runtime)
            return vae_fail(VAE_EDEVICE, "CUDA device %d: the NVIDIA driver supports CUDA %d.%d, "
                            "this build needs %d.%d: update the driver", index, driver / 1000,
                            driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
        return vae_fail(VAE_EDEVICE, "CUDA device %d: no device usable (%s)", index,
                        cudaGetErrorString(count_err));
    }
    if (index < 0 || index >= n)
        return vae_fail(VAE_EDEVICE, "CUDA device %d does not exist (%d found)", index, n);
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, index);
    if (e != cudaSuccess)
        return vae_fail(VAE_EDEVICE, "CUDA device %d: %s", index, cudaGetErrorString(e));
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->compute_major = p.major;
    info->compute_minor = p.minor;
    info->multiprocessors = p.multiProcessorCount;
    info->total_memory = (int64_t)p.totalGlobalMem;
    int prev = -1;
    cudaGetDevice(&prev);
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(index) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        info->free_memory = (int64_t)free_b;
    if (prev >= 0) cudaSetDevice(prev);
    cudaDriverGetVersion(&info->driver_version);
    cudaRuntimeGetVersion(&info->runtime_version);
    info->cudnn_version = (int)cudnnGetVersion();
    info->fp32 = 1;
    info->fp16 = p.major >= 7;
    info->bf16 = p.major >= 8;
    snprintf(info->kernels, sizeof info->kernels,
             "cuDNN convolutions, cuBLAS GEMM, own norm/shuffle/attention kernels");
    return VAE_OK;
}
