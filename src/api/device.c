/* device.c -- what this build and this machine offer. */
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "platform/platform.h"

#ifdef VAE_HAVE_CUDA
int vae_cuda_device_count(void);
int vae_cuda_device_info(int index, vae_device_info *info);
#endif

int vae_device_compiled(vae_device d) {
#ifdef VAE_HAVE_CUDA
    if (d == VAE_DEVICE_CUDA) return 1;
#endif
    return d == VAE_DEVICE_CPU;
}

int vae_device_count(vae_device d) {
    if (d == VAE_DEVICE_CPU) return 1;
#ifdef VAE_HAVE_CUDA
    if (d == VAE_DEVICE_CUDA) return vae_cuda_device_count();
#endif
    return 0;
}

int vae_device_get_info(vae_device d, int index, vae_device_info *info) {
    vae_error_clear();
    if (!info) return vae_fail(VAE_EINVAL, "vae_device_get_info: NULL argument");
    memset(info, 0, sizeof *info);
    if (d == VAE_DEVICE_CPU) {
        if (index != 0) return vae_fail(VAE_EINVAL, "cpu device %d does not exist", index);
        snprintf(info->name, sizeof info->name, "CPU, %d threads", vae_plat_cpu_count());
        info->total_memory = vae_plat_mem_total();
        info->free_memory = vae_plat_mem_free();
        info->fp32 = 1;
        snprintf(info->kernels, sizeof info->kernels, "%s",
#ifdef VAE_HAVE_BLAS
                 "OpenBLAS SGEMM convolutions, OpenMP norms and attention"
#else
                 "built-in blocked GEMM convolutions, OpenMP norms and attention"
#endif
        );
        return VAE_OK;
    }
#ifdef VAE_HAVE_CUDA
    if (d == VAE_DEVICE_CUDA) return vae_cuda_device_info(index, info);
#endif
    return vae_fail(VAE_EUNSUPPORTED, "this build of vae has no %s backend",
                    d == VAE_DEVICE_CUDA ? "CUDA" : "such");
}

const char *vae_build_info(void) {
    return "vae " VAE_VERSION_STRING ": cpu"
#ifdef VAE_HAVE_BLAS
           " (OpenBLAS)"
#endif
#ifdef VAE_HAVE_CUDA
           ", cuda (cuDNN, cuBLAS; sm_" VAE_CUDA_ARCHS_STRING ")"
#endif
        ;
}
