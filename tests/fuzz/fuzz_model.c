/* fuzz_model.c -- libFuzzer entry: what `vae info FILE` asks of the library. The input is opened
 * by path (format chosen by magic bytes), the architecture and configuration detected and the
 * programs built (vae_model_open); on success the descriptive calls run on it, otherwise the file
 * is read as a single tensor (vae_tensor_load, the fallback of `vae info`). */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_init();
    char path[64];
    int fd = fuzz_memfd(data, size, path, sizeof path);
    if (fd < 0) return 0;
    vae_model *m = NULL;
    int rc = vae_model_open(&m, path, NULL);
    if (rc == VAE_OK) {
        FUZZ_CHECK(m != NULL);
        vae_model_info in;
        FUZZ_CHECK(vae_model_get_info(m, &in) == VAE_OK);
        FUZZ_CHECK(in.arch && in.config_json && in.file_dtypes && in.normalisation);
        FUZZ_CHECK(in.spatial_factor > 0 && in.temporal_factor > 0 && in.latent_channels > 0);
        float mean[64], std[64];
        (void)vae_model_latent_norm(m, mean, std, 64);
        for (int encode = 0; encode <= 1; encode++) {
            int64_t shape[5], out[8];
            int nd = 0, ch = encode ? in.image_channels : in.latent_channels;
            int64_t sp = encode ? in.spatial_factor : 2;
            shape[nd++] = 1;
            shape[nd++] = ch;
            if (in.is_video) shape[nd++] = encode ? 1 + in.temporal_factor : 2;
            shape[nd++] = sp;
            shape[nd++] = sp;
            int ond = 0;
            double flops = 0;
            if ((encode ? in.can_encode : in.can_decode) &&
                vae_model_output_shape(m, encode, shape, nd, out, &ond) == VAE_OK)
                (void)vae_model_flops(m, encode, shape, nd, &flops);
        }
        vae_model_free(m);
    } else {
        FUZZ_CHECK(m == NULL && vae_last_error()[0] != 0);
        vae_tensor t;
        if (vae_tensor_load(path, NULL, &t) == VAE_OK) vae_tensor_free(&t);
    }
    close(fd);
    return 0;
}
