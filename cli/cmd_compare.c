/* cmd_compare.c -- `vae compare` (relative error) and `vae roundtrip` (PSNR of encode+decode). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char help_compare[] =
    "usage: vae compare A[:KEY] B[:KEY] [--tol X] [--min-psnr DB]\n"
    "\n"
    "Prints the relative error ||A-B|| / ||B||, the largest absolute difference, NaN counts and the\n"
    "PSNR of A against B (over B's value range, peak to peak) of two tensors of the same shape.\n"
    "With --tol, exits 1 when the error is above X or any value is NaN/Inf; with --min-psnr, when\n"
    "the PSNR is below DB.\n"
    "\n"
    "example:\n"
    "  vae compare out.safetensors:video ref.safetensors:dec_t3.video --tol 1e-4\n";

static const cli_command compare = {"compare", {help_compare}, 2, "expected two tensors"};

int cmd_compare(int argc, char **argv) {
    const char *tol = NULL, *min_psnr = NULL, *pos[2];
    const cli_opt opts[] = {{"--tol", NULL, 1, &tol},
                            {"--min-psnr", NULL, 1, &min_psnr},
                            {NULL, NULL, 0, NULL}};
    int rc = cli_parse(&compare, argc, argv, opts, pos);
    if (rc != CLI_PARSED) return rc;
    vae_tensor a, b;
    if ((rc = cli_load_input(pos[0], 0, 1, &a))) return cli_report(rc, pos[0]);
    if ((rc = cli_load_input(pos[1], 0, 1, &b))) {
        vae_tensor_free(&a);
        return cli_report(rc, pos[1]);
    }
    int64_t na = 1, nb = 1;
    for (int i = 0; i < a.ndim; i++) na *= a.shape[i];
    for (int i = 0; i < b.ndim; i++) nb *= b.shape[i];
    int same = a.ndim == b.ndim && na == nb;
    for (int i = 0; same && i < a.ndim; i++) same = a.shape[i] == b.shape[i];
    if (!same) {
        fprintf(stderr, "vae compare: shapes differ\n");
        vae_tensor_free(&a);
        vae_tensor_free(&b);
        return CLI_EFAIL;
    }
    const float *x = a.data, *y = b.data;
    double num = 0, den = 0, maxd = 0, lo = INFINITY, hi = -INFINITY;
    int64_t bad = 0;
    for (int64_t i = 0; i < na; i++) {
        if (!isfinite(x[i]) || !isfinite(y[i])) {
            bad++;
            continue;
        }
        double d = (double)x[i] - y[i];
        num += d * d;
        den += (double)y[i] * y[i];
        if (fabs(d) > maxd) maxd = fabs(d);
        lo = fmin(lo, y[i]), hi = fmax(hi, y[i]);
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    const int64_t good = na - bad;
    const double db = num > 0 && good > 0 && hi > lo
                          ? 10 * log10((hi - lo) * (hi - lo) / (num / (double)good))
                          : INFINITY;
    printf("rel_err %.3e max_abs %.3e nonfinite %lld numel %lld psnr %.2f dB\n", rel, maxd,
           (long long)bad, (long long)na, db);
    vae_tensor_free(&a);
    vae_tensor_free(&b);
    if (tol && (bad > 0 || !(rel <= atof(tol)))) return CLI_EFAIL;
    if (min_psnr && (bad > 0 || !(db >= atof(min_psnr)))) return CLI_EFAIL;
    return CLI_OK;
}

static const char help_roundtrip[] =
    "usage: vae roundtrip -e ENCODER -d DECODER -i IMAGE.png [-o OUT.png] [--device D]\n"
    "\n"
    "Encodes and decodes an image and prints the PSNR (dB) of the result against the input, both\n"
    "clamped to the model's pixel range. ENCODER and DECODER may be the same checkpoint.\n"
    "\n"
    "example:\n"
    "  vae roundtrip -e taef2_encoder.pth -d taef2_decoder.pth -i photo.png -o photo_rt.png\n";

static const cli_command roundtrip = {"roundtrip", {help_roundtrip}, 0, NULL};

int cmd_roundtrip(int argc, char **argv) {
    const char *enc = NULL, *dec = NULL, *input = NULL, *output = NULL, *device = "cpu";
    const cli_opt opts[] = {{"--encoder", "-e", 1, &enc}, {"--decoder", "-d", 1, &dec},
                            {"--input", "-i", 1, &input}, {"--output", "-o", 1, &output},
                            {"--device", NULL, 1, &device}, {NULL, NULL, 0, NULL}};
    int rc = cli_parse(&roundtrip, argc, argv, opts, NULL);
    if (rc != CLI_PARSED) return rc;
    if (!enc || !dec || !input) return cli_usage_error("roundtrip", "needs -e, -d and -i");
    vae_session_options so;
    vae_session_options_default(&so);
    if ((rc = cli_session_options("roundtrip", device, NULL, NULL, &so))) return rc;
    vae_model *me = NULL, *md = NULL;
    vae_session *se = NULL, *sd = NULL;
    vae_tensor img = {0}, lat = {0}, rec = {0};
    vae_model_info info;
    const char *stage = enc;
    if ((rc = vae_model_open(&me, enc, NULL))) goto done;
    stage = dec;
    if ((rc = vae_model_open(&md, dec, NULL))) goto done;
    vae_model_get_info(me, &info);
    stage = input;
    if ((rc = cli_load_input(input, info.image_min, info.image_max, &img))) goto done;
    if (info.is_video && img.ndim == 4) {
        memmove(&img.shape[3], &img.shape[2], 2 * sizeof(int64_t));
        img.shape[2] = 1;
        img = vae_tensor_dense(5, img.shape, img.dtype, img.data);
    }
    stage = "encode";
    if ((rc = vae_session_create(&se, me, &so)) || (rc = vae_encode_tensor(se, &img, &lat))) goto done;
    stage = "decode";
    if ((rc = vae_session_create(&sd, md, &so)) || (rc = vae_decode_tensor(sd, &lat, &rec))) goto done;
    int64_t n = 1;
    for (int i = 0; i < img.ndim; i++) n *= img.shape[i];
    double se2 = 0, range = info.image_max - info.image_min;
    for (int64_t i = 0; i < n; i++) {
        double v = ((float *)rec.data)[i];
        v = v < info.image_min ? info.image_min : v > info.image_max ? info.image_max : v;
        double d = (v - ((float *)img.data)[i]) / range;
        se2 += d * d;
    }
    double psnr = 10.0 * log10(1.0 / (se2 / (double)n));
    printf("roundtrip %s: latent [", input);
    for (int i = 0; i < lat.ndim; i++) printf("%s%lld", i ? "," : "", (long long)lat.shape[i]);
    printf("], PSNR %.2f dB\n", psnr);
    stage = output;
    if (output) rc = cli_png_write(output, &rec, 0, info.image_min, info.image_max);
done:
    if (rc) rc = cli_report(rc, stage);
    vae_tensor_free(&img);
    vae_tensor_free(&lat);
    vae_tensor_free(&rec);
    vae_session_free(se);
    vae_session_free(sd);
    vae_model_free(me);
    vae_model_free(md);
    return rc;
}
