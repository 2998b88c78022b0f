/* read_video.c -- reading a video, image or frame pattern for a model (encode, roundtrip-video),
 * and opening the video writer of decode and roundtrip-video. */
#include "read_video.h"

#include <stdio.h>
#include <string.h>

#include "cli.h"

int cli_read_args_parse(const char *cmd, const char *start_s, const char *frames_s,
                        const char *size_s, const char *fit_s, cli_read_args *a) {
    int rc;
    memset(a, 0, sizeof *a);
    if (start_s && (rc = cli_parse_int(cmd, "--start", start_s, 0, 1 << 30, &a->start))) return rc;
    if (frames_s && (rc = cli_parse_int(cmd, "--frames", frames_s, 1, 1 << 30, &a->frames)))
        return rc;
    if (size_s && (rc = cli_parse_size(cmd, size_s, &a->width, &a->height))) return rc;
    if (fit_s && (rc = cli_parse_fit(cmd, fit_s, &a->fit))) return rc;
    return CLI_OK;
}

int cli_write_args_parse(const char *cmd, cli_write_args *a) {
    int rc;
    a->fps_num = 0, a->fps_den = 1, a->crf = -1, a->bit_depth = 8;
    if (a->fps_s && (rc = cli_parse_fps(cmd, a->fps_s, &a->fps_num, &a->fps_den))) return rc;
    if (a->crf_s && (rc = cli_parse_int(cmd, "--crf", a->crf_s, 0, 51, &a->crf))) return rc;
    if (a->depth_s && (rc = cli_parse_int(cmd, "--bit-depth", a->depth_s, 8, 10, &a->bit_depth)))
        return rc;
    if (a->bit_depth != 8 && a->bit_depth != 10)
        return cli_usage_error(cmd, "--bit-depth must be 8 or 10");
    return CLI_OK;
}

int cli_write_args_given(const cli_write_args *a) {
    return a->fps_s || a->codec || a->crf_s || a->preset || a->depth_s;
}

#ifdef VAE_HAVE_MEDIA
void cli_write_options(const cli_write_args *a, float lo, float hi, int fps_num, int fps_den,
                       vae_media_write_options *o) {
    vae_media_write_options_default(o);
    o->codec = a->codec;
    o->crf = a->crf;
    o->preset = a->preset;
    o->bit_depth = a->bit_depth;
    o->lo = lo;
    o->hi = hi;
    if (a->fps_num)
        o->fps_num = a->fps_num, o->fps_den = a->fps_den;
    else if (fps_num > 0)
        o->fps_num = fps_num, o->fps_den = fps_den;
}

static int read_progress(int done, int total, void *user) {
    cli_progress *p = user;
    if (total > 0) p->total = total;
    cli_progress_update(p, done);
    return cli_interrupted();
}

int cli_read_video(const char *input, const vae_model_info *info, const cli_read_args *a,
                   cli_progress *prog, vae_tensor *out, vae_media_info *mi) {
    vae_media_read_options ro;
    vae_media_read_options_default(&ro);
    ro.start = a->start;
    ro.frames = a->frames;
    ro.lo = info->image_min;
    ro.hi = info->image_max;
    ro.width = a->width;
    ro.height = a->height;
    ro.spatial_multiple = info->spatial_factor;
    ro.temporal_factor = info->is_video ? info->temporal_factor : 1;
    ro.fit = (vae_media_fit)a->fit;
    ro.progress = read_progress;
    ro.user = prog;
    cli_progress_begin(prog, "read", "frames", a->frames > 0 ? a->frames : -1);
    int rc = vae_media_read_video(input, &ro, out, mi);
    cli_progress_end(prog, 0);
    if (rc) return cli_set_error(rc, "%s", vae_media_last_error());
    if (!cli_quiet)
        fprintf(stderr, "vae: read %s: %d frame%s of %dx%d (%s%s%s)\n", input, mi->out_frames,
                mi->out_frames == 1 ? "" : "s", mi->out_width, mi->out_height, mi->color_used,
                mi->geometry[0] ? ", " : "", mi->geometry);
    return VAE_OK;
}

int cli_open_video_writer(const char *path, int w, int h, const vae_media_write_options *o,
                          vae_media_writer **writer, int *temp_slot) {
    cli_temp_hold(); /* a forced exit waits until the temporary is registered */
    int rc = vae_media_writer_open(writer, path, w, h, o);
    if (rc == VAE_OK) *temp_slot = cli_temp_register(vae_media_writer_temp_path(*writer));
    cli_temp_release();
    return rc ? cli_set_error(rc, "%s", vae_media_last_error()) : VAE_OK;
}
#endif
