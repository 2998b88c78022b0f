/* cmd_synth.c -- `vae synth ARCH -o OUT [--config JSON]`. */
#include <stdio.h>

#include "cli.h"

static const char help[] =
    "usage: vae synth ARCH -o OUT.safetensors [--config JSON]\n"
    "\n"
    "Writes a checkpoint of ARCH (wan2.1, wan2.2, seedvr2) under the upstream key names, with the\n"
    "synthetic-weight rule of the reference fixtures. JSON holds upstream constructor arguments;\n"
    "keys left out take the released model's values. The configuration is also stored in the\n"
    "file's metadata so that what shapes cannot tell (GroupNorm groups) survives.\n"
    "\n"
    "example:\n"
    "  vae synth wan2.1 -o wan_small.safetensors --config '{\"dim\":16}'\n";

int cmd_synth(int argc, char **argv) {
    const char *out = NULL, *config = NULL, *hflag = NULL, *pos[1];
    const cli_opt opts[] = {{"--output", "-o", 1, &out},
                            {"--config", "-c", 1, &config},
                            {"--help", "-h", 0, &hflag},
                            {NULL, NULL, 0, NULL}};
    int npos, rc = cli_parse("synth", argc, argv, opts, pos, 1, &npos);
    if (rc) return rc;
    if (hflag) {
        fputs(help, stdout);
        return CLI_OK;
    }
    if (npos != 1) return cli_usage_error("synth", "expected ARCH (wan2.1, wan2.2, seedvr2)");
    if (!out) return cli_usage_error("synth", "missing -o OUT.safetensors");
    return cli_report(vae_synth_checkpoint(pos[0], config, out), out);
}
