/* read_video.h -- reading a video, image or frame pattern for a model (encode, roundtrip-video),
 * and opening the video writer of decode and roundtrip-video. */
#ifndef VAE_CLI_READ_VIDEO_H
#define VAE_CLI_READ_VIDEO_H

#include "progress.h"
#include "vae.h"

/* What the user asked for: --start, --frames (0: all), --size (0: as is), --fit. */
typedef struct cli_read_args {
    int start, frames, width, height, fit;
} cli_read_args;

/* Parses those options (NULL strings: defaults); a usage error names the bad one. */
int cli_read_args_parse(const char *cmd, const char *start_s, const char *frames_s,
                        const char *size_s, const char *fit_s, cli_read_args *a);

/* The video writer's flags as given (NULL: absent): --fps, --codec, --crf, --preset, --bit-depth;
 * then what cli_write_args_parse makes of them: the frame rate (0: not given), crf (-1: the
 * codec's) and the bit depth (8 or 10). */
typedef struct cli_write_args {
    const char *fps_s, *codec, *crf_s, *preset, *depth_s;
    int fps_num, fps_den, crf, bit_depth;
} cli_write_args;
#define CLI_WRITE_OPTS(a)                                                                          \
    {"--fps", NULL, 1, &(a).fps_s}, {"--codec", NULL, 1, &(a).codec},                              \
        {"--crf", NULL, 1, &(a).crf_s}, {"--preset", NULL, 1, &(a).preset},                        \
        {"--bit-depth", NULL, 1, &(a).depth_s}
/* Parses them; a usage error names the bad one. */
int cli_write_args_parse(const char *cmd, cli_write_args *a);
/* 1 when any of them was given. */
int cli_write_args_given(const cli_write_args *a);

#ifdef VAE_HAVE_MEDIA
#include "media.h"
/* The writer options for pixels in [lo, hi]: a's, with a's frame rate or else fps_num / fps_den
 * (fps_num 0: the writer's default). */
void cli_write_options(const cli_write_args *a, float lo, float hi, int fps_num, int fps_den,
                       vae_media_write_options *o);
/* Reads input as [1,3,T,H,W] in the model's pixel range, sized and cut for the model (its spatial
 * multiple and 1 + k*temporal_factor frames), with a "read" progress line that Ctrl-C stops, then
 * says what was read on stderr (unless -q). Errors: cli_set_error, code returned. */
int cli_read_video(const char *input, const vae_model_info *info, const cli_read_args *a,
                   cli_progress *prog, vae_tensor *out, vae_media_info *mi);
/* Opens the writer of path (w x h frames) with its temporary registered for removal by a forced
 * exit (*temp_slot; progress.h); errors: cli_set_error, code returned. */
int cli_open_video_writer(const char *path, int w, int h, const vae_media_write_options *o,
                          vae_media_writer **writer, int *temp_slot);
#endif

#endif
