/* fuzz_media.c -- libFuzzer entry: the media reader (src/media, FFmpeg) on an arbitrary image file.
 * The input is written to a temporary .png file (the reader chooses image handling by extension;
 * FFmpeg then probes the content, so other image formats are reached too), probed, and read as a
 * tensor scaled to at most 64x64 (the tensor size comes from the options, not the file). Only our
 * code is instrumented; FFmpeg's decoders run uninstrumented. Built when FFmpeg's dev files exist. */
#include "fuzz_common.h"
#include "media.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_init();
    static char path[64];
    if (!path[0]) {
        snprintf(path, sizeof path, "/dev/shm/vae-fuzz-%d.png", (int)getpid());
        vae_media_set_log_callback(fuzz_quiet_log, NULL, 0);
    }
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    size_t w = fwrite(data, 1, size, f);
    fclose(f);
    if (w == size) {
        vae_media_info info;
        if (vae_media_probe(path, &info) == VAE_OK) {
            vae_media_read_options o;
            vae_media_read_options_default(&o);
            o.width = 64; /* height 0: keep the aspect ratio */
            o.frames = 1;
            o.spatial_multiple = 8;
            o.fit = VAE_FIT_PAD;
            vae_tensor t;
            if (vae_media_read_video(path, &o, &t, NULL) == VAE_OK) vae_media_tensor_free(&t);
        }
    }
    unlink(path);
    return 0;
}
