/* cmd_synth.c -- `vae synth ARCH -o OUT [--config JSON]`. */
#include <stdio.h>

#include "cli.h"

static const char help[] =
    "usage: vae synth ARCH -o OUT.safetensors [--config JSON]\n"
    "\n"
    "Writes a checkpoint of ARCH (wan2.1, wan2.2, seedvr2, taehv) under the upstream key names,\n"
    "with the synthetic-weight rule of the reference fixtures. JSON holds upstream constructor\n"
    "arguments; keys left out take the released model's values. The configuration is also stored\n"
    "in the file's metadata so that what shapes cannot tell (GroupNorm groups) survives.\n"
    "\n"
    "example:\n"
    "  vae synth wan2.1 -o wan_small.safetensors --config '{\"dim\":16}'\n"
    "  vae synth taehv -o taew2_2.safetensors \\\n"
    "      --config '{\"patch_size\":2,\"latent_channels\":48}'\n";

static const cli_command command = {"synth", {help}, 1, "expected ARCH (wan2.1, wan2.2, seedvr2, taehv)"};

int cmd_synth(int argc, char **argv) {
    const char *out = NULL, *config = NULL, *pos[1];
    const cli_opt opts[] = {{"--output", "-o", 1, &out},
                            {"--config", "-c", 1, &config},
                            {NULL, NULL, 0, NULL}};
    int rc = cli_parse(&command, argc, argv, opts, pos);
    if (rc != CLI_PARSED) return rc;
    if (!out) return cli_usage_error("synth", "missing -o OUT.safetensors");
    return cli_report(vae_synth_checkpoint(pos[0], config, out), out);
}
