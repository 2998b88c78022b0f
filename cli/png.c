/* png.c -- 8-bit RGB PNG read/write through libpng. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "progress.h"
/* header-only constants: the image bounds are the library's, stated once */

int cli_png_read(const char *path, float lo, float hi, vae_tensor *out) {
    memset(out, 0, sizeof *out);
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    FILE *f;
    int o = cli_open_regular(path, &f);
    if (o == -2) return cli_set_error(VAE_EIO, "%s: not a regular file (a folder, FIFO or device)", path);
    if (o) return cli_set_error(VAE_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (!png_image_begin_read_from_stdio(&img, f)) {
        fclose(f);
        return cli_set_error(VAE_EFORMAT, "%s: not a readable PNG: %s", path, img.message);
    }
    /* The header alone is read: its size is checked before anything is allocated for the pixels
     * (a PNG of a few KiB can declare 20000x20000). */
    if ((int64_t)img.width * img.height > VAE_MAX_IMAGE_PIXELS || img.width > VAE_MAX_IMAGE_SIDE ||
        img.height > VAE_MAX_IMAGE_SIDE) {
        png_image_free(&img);
        fclose(f);
        return cli_set_error(VAE_EUNSUPPORTED, "%s: PNG of %ux%u pixels is larger than supported (at most %lld "
                             "pixels, %d per side)", path, img.width, img.height, (long long)VAE_MAX_IMAGE_PIXELS,
                             VAE_MAX_IMAGE_SIDE);
    }
    img.format = PNG_FORMAT_RGB;
    size_t n = (size_t)img.width * img.height;
    unsigned char *buf = malloc(n * 3);
    float *data = malloc(n * 3 * sizeof(float));
    if (!buf || !data || !png_image_finish_read(&img, NULL, buf, 0, NULL)) {
        int rc = cli_set_error(buf && data ? VAE_EFORMAT : VAE_ENOMEM, "%s: cannot decode PNG: %s",
                               path, buf && data ? img.message : "out of memory");
        png_image_free(&img);
        fclose(f);
        free(buf);
        free(data);
        return rc;
    }
    fclose(f);
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < 3; c++) data[c * n + i] = lo + (hi - lo) * (float)buf[i * 3 + c] / 255.0f;
    free(buf);
    const int64_t shape[4] = {1, 3, img.height, img.width};
    *out = vae_tensor_dense(4, shape, VAE_DTYPE_F32, data);
    return VAE_OK;
}

int cli_png_write(const char *path, const vae_tensor *t, int frame, float lo, float hi) {
    int h = (int)t->shape[t->ndim - 2], w = (int)t->shape[t->ndim - 1];
    int frames = t->ndim == 5 ? (int)t->shape[2] : 1;
    size_t n = (size_t)h * w;
    unsigned char *buf = malloc(n * 3);
    if (!buf) return cli_set_error(VAE_ENOMEM, "%s: out of memory", path);
    const float *d = t->data;
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < n; i++) {
            float v = (d[((size_t)c * frames + frame) * n + i] - lo) / (hi - lo);
            v = v < 0 ? 0 : v > 1 ? 1 : v;
            buf[i * 3 + c] = (unsigned char)lrintf(v * 255.0f);
        }
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = PNG_FORMAT_RGB;
    /* write to a temporary name of its own and rename, so that no partial file is left behind */
    char tmp[4200];
    int slot;
    FILE *f = cli_temp_open(path, tmp, sizeof tmp, &slot);
    if (!f) {
        int e = errno;
        free(buf);
        return cli_set_error(VAE_EIO, "%s: cannot create: %s", path, strerror(e));
    }
    int ok = png_image_write_to_stdio(&img, f, 0, buf, 0, NULL);
    free(buf);
    if (fclose(f) != 0 && ok) {
        ok = 0;
        snprintf(img.message, sizeof img.message, "%s", strerror(errno));
    }
    if (!ok) {
        cli_temp_commit(tmp, NULL, slot);
        return cli_set_error(VAE_EIO, "%s: cannot write PNG: %s", path, img.message);
    }
    if (cli_temp_commit(tmp, path, slot) != 0)
        return cli_set_error(VAE_EIO, "%s: cannot rename into place: %s", path, strerror(errno));
    return VAE_OK;
}
