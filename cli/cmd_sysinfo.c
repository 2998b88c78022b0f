/* cmd_sysinfo.c -- `vae --info`: this build and this machine. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "platform/platform.h"
#ifdef VAE_HAVE_MEDIA
#include "media.h"
#endif

static const char help[] =
    "usage: vae --info   (or: vae sysinfo)\n"
    "\n"
    "Prints the vae version, the CPU (threads the engine will use by default), memory, the\n"
    "backends this build can run here, NVIDIA GPUs seen by the driver, and the media (FFmpeg)\n"
    "support with its encoders.\n";

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ' || *c == '\t')
                    c++;
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, n, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

/* NVIDIA GPUs as the kernel driver lists them (no CUDA call: works in any build). */
static int list_nvidia_gpus(void) {
    const char *root = "/proc/driver/nvidia/gpus";
    DIR *d = opendir(root);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[512], line[256], model[256] = "?";
        snprintf(p, sizeof p, "%s/%s/information", root, e->d_name);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "Model:", 6) == 0) {
                char *c = line + 6;
                while (*c == ' ' || *c == '\t')
                    c++;
                c[strcspn(c, "\n")] = 0;
                snprintf(model, sizeof model, "%s", c);
            }
        fclose(f);
        printf("  gpu %d:       %s (bus %s)\n", n++, model, e->d_name);
    }
    closedir(d);
    return n;
}

int cmd_sysinfo(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(help, stdout);
        return CLI_OK;
    }
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    const int online = vae_plat_cpu_count();
    const int64_t memory = vae_plat_mem_total();
    printf("vae %s (library %s)\n", VAE_VERSION_STRING, vae_version_string());
    printf("cpu:           %s\n", cpu);
    printf("cpu threads:   %d online (the default for --threads 0)", online);
    const char *omp = getenv("OMP_NUM_THREADS");
    if (omp) printf(", OMP_NUM_THREADS=%s", omp);
    printf("\n");
    if (memory > 0) printf("memory:        %.1f GiB\n", (double)memory / (1024.0 * 1024 * 1024));
    printf("build:         %s\n", vae_build_info());
    int ncuda = vae_device_count(VAE_DEVICE_CUDA);
    printf("devices:       cpu yes; cuda %s\n",
           !vae_device_compiled(VAE_DEVICE_CUDA) ? "no (this build has no CUDA backend)"
           : ncuda > 0                           ? "yes"
                                                 : "no (no usable GPU or driver)");
    for (int i = 0; i < ncuda; i++) {
        vae_device_info di;
        if (vae_device_get_info(VAE_DEVICE_CUDA, i, &di) != VAE_OK) continue;
        printf("gpu %d:         %s, compute capability %d.%d, %d SMs, %.1f GiB (%.1f free)\n", i,
               di.name, di.compute_major, di.compute_minor, di.multiprocessors,
               di.total_memory / 1073741824.0, di.free_memory / 1073741824.0);
        printf("               driver CUDA %d.%d, runtime %d.%d, cuDNN %d.%d.%d\n",
               di.driver_version / 1000, di.driver_version % 1000 / 10,
               di.runtime_version / 1000, di.runtime_version % 1000 / 10,
               di.cudnn_version / 10000, di.cudnn_version / 100 % 100, di.cudnn_version % 100);
        printf("               precisions: fp32%s%s; kernels: %s\n", di.fp16 ? ", fp16" : "",
               di.bf16 ? ", bf16" : "", di.kernels);
    }
    if (ncuda == 0 && !list_nvidia_gpus()) printf("nvidia gpus:   none seen by a driver\n");
#ifdef VAE_HAVE_MEDIA
    printf("media:         FFmpeg %s\n", vae_media_version());
    printf("encoders:      h264 (libx264) %s, h265 (libx265) %s, ffv1 %s, png %s\n",
           vae_media_encoder_available("h264") ? "yes" : "no",
           vae_media_encoder_available("h265") ? "yes" : "no",
           vae_media_encoder_available("ffv1") ? "yes" : "no",
           vae_media_encoder_available("png") ? "yes" : "no");
#else
    printf("media:         not in this build (needs FFmpeg development files and -DVAE_MEDIA=ON): "
           "PNG and tensor files only\n");
#endif
    return CLI_OK;
}
