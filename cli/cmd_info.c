/* cmd_info.c -- `vae info FILE`: what a checkpoint (or tensor file) holds. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char help[] =
    "usage: vae info FILE [--prefix P] [--arch A]\n"
    "\n"
    "Prints the detected architecture, its configuration (upstream argument names), parameter\n"
    "count, file dtypes and latent normalisation. For a file that is not a VAE checkpoint (e.g. a\n"
    "latent), prints its single tensor's shape.\n"
    "\n"
    "example:\n"
    "  vae info wan_2.1_vae.safetensors\n";

static const cli_command command = {"info", {help}, 1, "expected one FILE"};

int cmd_info(int argc, char **argv) {
    const char *prefix = NULL, *arch = NULL, *pos[1];
    const cli_opt opts[] = {{"--prefix", NULL, 1, &prefix},
                            {"--arch", NULL, 1, &arch},
                            {NULL, NULL, 0, NULL}};
    int rc = cli_parse(&command, argc, argv, opts, pos);
    if (rc != CLI_PARSED) return rc;
    vae_model_options mo;
    vae_model_options_default(&mo);
    mo.prefix = prefix;
    mo.arch = arch;
    vae_model *m;
    rc = vae_model_open(&m, pos[0], &mo);
    if (rc != VAE_OK && rc != VAE_ENOMEM && rc != VAE_EINVAL && !arch && !prefix) {
        /* not a checkpoint: a latent/tensor file, a video or an image? (info_file.c) */
        char why[1024];
        snprintf(why, sizeof why, "%s", vae_last_error());
        int r = cli_info_file(pos[0]);
        if (r >= 0) return r;
        cli_set_error(rc, "%s", why);
    }
    if (rc) return cli_report(rc, pos[0]);
    vae_model_info in;
    vae_model_get_info(m, &in);
    printf("file:          %s\n", pos[0]);
    printf("architecture:  %s\n", in.arch);
    printf("config:        %s\n", in.config_json);
    printf("parts:         %s%s%s\n", in.can_encode ? "encoder" : "",
           in.can_encode && in.can_decode ? " + " : "", in.can_decode ? "decoder" : "");
    printf("parameters:    %lld in %d tensors\n", (long long)in.param_count, in.tensor_count);
    printf("file dtypes:   %s\n", in.file_dtypes);
    printf("latent:        %d channels, %dx spatial, %dx temporal\n", in.latent_channels,
           in.spatial_factor, in.temporal_factor);
    printf("pixels:        [%g, %g]%s\n", in.image_min, in.image_max,
           in.is_video ? " (video)" : " (per image/frame)");
    printf("normalisation: %s\n", in.normalisation);
    vae_model_free(m);
    return CLI_OK;
}
