/* main.c -- the `vae` command: global flags, then dispatch to a command (what they print on
 * stderr and their exit codes: report.c). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#ifdef VAE_HAVE_MEDIA
#include "media.h"
#endif

static const char usage[] =
    "vae " VAE_VERSION_STRING " -- video/image VAE encoder and decoder\n"
    "\n"
    "usage: vae COMMAND [options]   (vae COMMAND --help for each)\n"
    "\n"
    "commands:\n"
    "  info FILE                 architecture, configuration, parameters, dtypes of a checkpoint\n"
    "  decode -m MODEL -i IN -o OUT   latent -> video/image\n"
    "  encode -m MODEL -i IN -o OUT   video/image -> latent (diffusion space, posterior mean)\n"
    "  synth ARCH -o OUT [--config JSON]   synthetic-weight checkpoint (fixtures rule)\n"
    "  compare A[:KEY] B[:KEY] [--tol X]   relative error between two tensors\n"
    "  roundtrip -e ENC -d DEC -i IMAGE [-o OUT.png]   encode+decode, prints PSNR\n"
    "  roundtrip-video -e ENC -d DEC -i VIDEO [--frames N --size WxH] [-o OUT.mp4]\n"
    "                            encode+decode frames of a video, prints PSNR\n"
    "  sysinfo                   same as --info\n"
    "  bench ARCH [--op decode|encode] [--frames N] [--size HxW] [--dtype bf16] [--device cuda]\n"
    "\n"
    "global options: -q (quiet), -v (log engine decisions), --version, --help,\n"
    "                --info (version, CPU threads, devices, media support)\n"
    "\n"
    "media: decode writes .mp4/.mov (H.264, H.265), .mkv (FFV1, H.264, H.265) or PNG sequences\n"
    "(out/%05d.png); encode reads videos, images, frame patterns and folders (FFmpeg builds).\n"
    "\n"
    "exit codes: 0 ok, 1 failure, 2 usage, 3 file I/O, 4 invalid input (format, keys, shape,\n"
    "NaN), 5 unsupported, 6 out of memory / device error, 130 interrupted\n";

int main(int argc, char **argv) {
    /* Global flags may come anywhere; strip them first. */
    int n = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-q") == 0 || strcmp(argv[i], "--quiet") == 0) cli_quiet = 1;
        else if (strcmp(argv[i], "-v") == 0 || strcmp(argv[i], "--verbose") == 0) cli_verbose = 1;
        else argv[n++] = argv[i];
    }
    argc = n;
    vae_set_log_callback(cli_log_to_stderr, NULL,
                         cli_verbose ? VAE_LOG_DEBUG : cli_quiet ? VAE_LOG_ERROR : VAE_LOG_WARN);
#ifdef VAE_HAVE_MEDIA
    /* media library and FFmpeg messages (FFmpeg's own only with -v) */
    vae_media_set_log_callback(cli_log_to_stderr, NULL,
                               cli_verbose ? VAE_LOG_DEBUG : cli_quiet ? VAE_LOG_ERROR : VAE_LOG_WARN);
#endif
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EUSAGE : CLI_OK;
    }
    if (strcmp(argv[1], "--info") == 0 || strcmp(argv[1], "sysinfo") == 0)
        return cmd_sysinfo(argc - 1, argv + 1);
    if (strcmp(argv[1], "--version") == 0) {
        printf("vae %s\n", vae_version_string());
        return CLI_OK;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "info") == 0) return cmd_info(argc - 1, argv + 1);
    if (strcmp(cmd, "decode") == 0) return cmd_run(argc - 1, argv + 1, 0);
    if (strcmp(cmd, "encode") == 0) return cmd_run(argc - 1, argv + 1, 1);
    if (strcmp(cmd, "synth") == 0) return cmd_synth(argc - 1, argv + 1);
    if (strcmp(cmd, "compare") == 0) return cmd_compare(argc - 1, argv + 1);
    if (strcmp(cmd, "roundtrip") == 0) return cmd_roundtrip(argc - 1, argv + 1);
    if (strcmp(cmd, "roundtrip-video") == 0) return cmd_roundtrip_video(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 1, argv + 1);
    fprintf(stderr, "vae: unknown command '%s'\n\n%s", cmd, usage);
    return CLI_EUSAGE;
}
