/* info_file.c -- `vae info` on a file that is not a checkpoint: a latent or tensor file (names,
 * dtypes, shapes) or a video or image (container, codec, size, fps, frames, pixel format,
 * colour). */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#ifdef VAE_HAVE_MEDIA
#include "media.h"
#endif

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
