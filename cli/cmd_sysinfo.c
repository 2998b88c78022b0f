/* cmd_sysinfo.c -- `vae --info` (this build and this machine) and `vae info` on latent, tensor,
 * video and image files. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
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

/* ---- `vae info` on other files -------------------------------------------------------------- */
static int info_safetensors(const char *path) {
    FILE *f;
    if (cli_open_regular(path, &f)) return -1; /* FIFOs too: they would block */
    unsigned char b8[8];
    uint64_t n = 0;
    char *js = NULL;
    int ok = fread(b8, 1, 8, f) == 8;
    if (ok) {
        for (int i = 7; i >= 0; i--)
            n = n << 8 | b8[i];
        ok = n > 1 && n < (100u << 20);
    }
    if (ok && (js = malloc(n + 1))) ok = fread(js, 1, n, f) == n;
    fclose(f);
    if (!ok || !js) {
        free(js);
        return -1;
    }
    js[n] = 0;
    cJSON *root = cJSON_Parse(js);
    free(js);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return -1;
    }
    int count = 0;
    for (cJSON *e = root->child; e; e = e->next)
        if (strcmp(e->string, "__metadata__") != 0) count++;
    printf("file:     %s\nformat:   safetensors, %d tensor%s\n", path, count,
           count == 1 ? "" : "s");
    int shown = 0, comfy = 0;
    for (cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        if (strcmp(e->string, "latent_tensor") == 0) comfy = 1;
        if (shown++ >= 64) continue;
        cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        printf("  %-24s %-5s [", e->string, cJSON_IsString(dt) ? dt->valuestring : "?");
        int i = 0;
        for (cJSON *d = sh ? sh->child : NULL; d; d = d->next)
            printf("%s%.0f", i++ ? "," : "", cJSON_IsNumber(d) ? d->valuedouble : -1.0);
        printf("]\n");
    }
    if (shown > 64) printf("  ... %d more\n", shown - 64);
    cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    if (meta && cJSON_IsObject(meta))
        for (cJSON *e = meta->child; e; e = e->next)
            if (cJSON_IsString(e))
                printf("metadata: %s = %.200s%s\n", e->string, e->valuestring,
                       strlen(e->valuestring) > 200 ? "..." : "");
    if (comfy)
        printf("note:     a ComfyUI latent file: 'latent_tensor' holds raw VAE latents (vae decode "
               "takes them as --latent-space raw)\n");
    cJSON_Delete(root);
    return CLI_OK;
}

#ifdef VAE_HAVE_MEDIA
static int info_media(const char *path) {
    vae_media_info mi;
    if (vae_media_probe(path, &mi) != VAE_OK) return -1;
    printf("file:      %s\n", path);
    printf("container: %s\n", mi.container);
    printf("codec:     %s\n", mi.codec);
    printf("size:      %dx%d\n", mi.width, mi.height);
    if (mi.fps_num > 0)
        printf("fps:       %.3f (%d/%d)\n", (double)mi.fps_num / mi.fps_den, mi.fps_num,
               mi.fps_den);
    if (mi.is_image)
        printf("frames:    1 (still image)\n");
    else if (mi.frames >= 0)
        printf("frames:    %lld%s\n", (long long)mi.frames, mi.frames_exact ? "" : " (estimated)");
    if (mi.duration > 0 && !mi.is_image) printf("duration:  %.3f s\n", mi.duration);
    printf("pixels:    %s, %d-bit\n", mi.pix_fmt, mi.bit_depth);
    printf("colour:    range %s, matrix %s, primaries %s, transfer %s\n", mi.color_range,
           mi.color_matrix, mi.color_primaries, mi.color_transfer);
    if (strcmp(mi.color_used, "RGB") == 0)
        printf("read as:   RGB (no conversion)\n");
    else if (mi.color_used[0])
        printf("read as:   %s -> RGB\n", mi.color_used);
    if (mi.has_audio) printf("audio:     yes (ignored)\n");
    return CLI_OK;
}
#endif

int cli_info_file(const char *path) {
    if (cli_has_ext(path, ".safetensors")) {
        int r = info_safetensors(path);
        if (r >= 0) return r;
    }
    vae_tensor t;
    int rc = vae_tensor_load(path, NULL, &t);
    if (rc == VAE_OK) {
        printf("file:    %s\ntensor:  [", path);
        for (int i = 0; i < t.ndim; i++)
            printf("%s%lld", i ? "," : "", (long long)t.shape[i]);
        printf("] (read as float32)\n");
        vae_tensor_free(&t);
        return CLI_OK;
    }
    if (rc == VAE_EKEY) {
        /* several tensors: the library's message lists their names */
        printf("file:    %s\ntensors: %s\n", path, vae_last_error());
        return CLI_OK;
    }
#ifdef VAE_HAVE_MEDIA
    if (!cli_is_tensor_file(path)) return info_media(path);
#endif
    return -1;
}
