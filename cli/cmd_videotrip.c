/* cmd_videotrip.c -- `vae roundtrip-video`: frames of a video -> latents -> frames, with PSNR. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "progress.h"
#include "read_video.h"
#ifdef VAE_HAVE_MEDIA
#include "media.h"
#endif

static const char help[] =
    "usage: vae roundtrip-video -e ENCODER -d DECODER -i VIDEO [options]\n"
    "\n"
    "Reads frames of VIDEO (a video file, an image, a frame pattern or a folder), encodes them,\n"
    "decodes the latents and prints the PSNR of the decoded clip against the frames that went in,\n"
    "over all pixels and frames:\n"
    "  float:  values mapped to [0,1], the decoded ones clamped (the input frames are the 8-bit\n"
    "          (or 16-bit) codes of the source after scaling/fitting);\n"
    "  8-bit:  both rounded to 8-bit codes first, as in an 8-bit video or PNG;\n"
    "and the worst frame's (float) PSNR. ENCODER and DECODER may be the same checkpoint. Image\n"
    "models (TAESD family) work frame by frame.\n"
    "\n"
    "options:\n"
    "  -e, --encoder FILE      checkpoint with an encoder\n"
    "  -d, --decoder FILE      checkpoint with a decoder\n"
    "  -i, --input VIDEO       video, image, pattern (frames/%05d.png) or folder\n"
    "  --start N, --frames N   frame range to read (default: all frames)\n"
    "  --size WxH              scale the frames first (0 for one side keeps the aspect ratio)\n"
    "  --fit error|crop|pad|resize   make size / frame count valid (see 'vae encode --help')\n"
    "  -o, --output OUT        also write the decoded frames (.mp4, .mov, .mkv, frames/%05d.png)\n"
    "  --fps R                 output frame rate (default: the source's, else 24)\n"
    "  --codec C, --crf N, --preset P, --bit-depth 8|10   as for 'vae decode'\n"
    "  --device cpu|cuda, --dtype fp32|bf16|fp16|fp8, --threads N\n"
    "\n"
    "example (the README demo, taef2 on Big Buck Bunny):\n"
    "  vae roundtrip-video -e taef2_encoder.pth -d taef2_decoder.pth \\\n"
    "      -i bigbuckbunny_720p.mp4 --frames 9 --size 320x184 -o bbb_taef2.mp4\n";

#ifdef VAE_HAVE_MEDIA
typedef struct trip {
    /* encode: collect the latent */
    vae_tensor *lat;
    int lat_t;
    /* decode: compare with the input and write */
    const vae_tensor *ref;
    float lo, hi;
    int ref_t;
    double se, se8, worst;
    int64_t count;
    int frames_cmp, mismatch;
    vae_media_writer *writer;
    int writer_rc;
    cli_progress *prog;
    int tf, in_frames, encode;
} trip;

static int on_latent(const float *frames, int first, int n, int c, int h, int w, void *user) {
    trip *k = user;
    if (cli_interrupted()) return 1;
    vae_tensor *o = k->lat;
    if (!o->data) {
        int64_t sh[5] = {1, c, k->lat_t, h, w};
        *o = vae_tensor_dense(5, sh, VAE_DTYPE_F32, calloc((size_t)c * k->lat_t * h * w,
                                                           sizeof(float)));
        if (!o->data) return 1;
    }
    int64_t plane = (int64_t)h * w;
    for (int ch = 0; ch < c; ch++)
        memcpy((float *)o->data + ((int64_t)ch * k->lat_t + first) * plane,
               frames + (int64_t)ch * n * plane, (size_t)(n * plane) * sizeof(float));
    int done = k->tf > 1 ? 1 + (first + n - 1) * k->tf : first + n;
    cli_progress_update(k->prog, done > k->in_frames ? k->in_frames : done);
    return 0;
}

static int on_decoded(const float *frames, int first, int n, int c, int h, int w, void *user) {
    trip *k = user;
    if (cli_interrupted()) return 1;
    const int64_t plane = (int64_t)h * w;
    const int rh = (int)k->ref->shape[3], rw = (int)k->ref->shape[4];
    const float lo = k->lo, inv = 1.0f / (k->hi - k->lo);
    if (rh != h || rw != w || c != 3) {
        k->mismatch = 1;
    } else {
        for (int f = 0; f < n; f++) {
            int t = first + f;
            if (t >= k->ref_t) break;
            double fse = 0;
            for (int ch = 0; ch < 3; ch++) {
                const float *a = (const float *)k->ref->data + ((int64_t)ch * k->ref_t + t) * plane;
                const float *b = frames + ((int64_t)ch * n + f) * plane;
                for (int64_t i = 0; i < plane; i++) {
                    double x = (a[i] - lo) * inv, y = (b[i] - lo) * inv;
                    y = y < 0 ? 0 : y > 1 ? 1 : y;
                    if (!(y == y)) y = 0;
                    double d = x - y, d8 = (double)(lrint(x * 255) - lrint(y * 255)) / 255.0;
                    fse += d * d;
                    k->se8 += d8 * d8;
                }
            }
            k->se += fse;
            k->count += 3 * plane;
            double p = fse > 0 ? 10.0 * log10(3.0 * (double)plane / fse) : INFINITY;
            if (k->frames_cmp == 0 || p < k->worst) k->worst = p;
            k->frames_cmp++;
            if (cli_verbose) fprintf(stderr, "vae: frame %d: PSNR %.2f dB\n", t, p);
        }
    }
    if (k->writer && (k->writer_rc = vae_media_writer_add(k->writer, frames, n))) return 1;
    cli_progress_update(k->prog, first + n);
    return 0;
}

#endif

int cmd_roundtrip_video(int argc, char **argv) {
    const char *enc = NULL, *dec = NULL, *input = NULL, *output = NULL, *device = "cpu",
               *dtype = "fp32", *threads = NULL, *start_s = NULL, *frames_s = NULL,
               *size_s = NULL, *fit_s = NULL;
    cli_mem_args mem = {0};
    cli_write_args wa = {0};
    const cli_opt opts[] = {CLI_MEM_OPTS(mem),
                            {"--encoder", "-e", 1, &enc},     {"--decoder", "-d", 1, &dec},
                            {"--input", "-i", 1, &input},     {"--output", "-o", 1, &output},
                            {"--device", NULL, 1, &device},   {"--dtype", NULL, 1, &dtype},
                            {"--threads", NULL, 1, &threads}, {"--start", NULL, 1, &start_s},
                            {"--frames", NULL, 1, &frames_s}, {"--size", NULL, 1, &size_s},
                            {"--fit", NULL, 1, &fit_s},       CLI_WRITE_OPTS(wa),
                            {NULL, NULL, 0, NULL}};
    const char *cmd = "roundtrip-video";
    const cli_command command = {cmd, {help, cli_mem_help}, 0, NULL};
    int rc = cli_parse(&command, argc, argv, opts, NULL);
    if (rc != CLI_PARSED) return rc;
    if (!enc || !dec || !input)
        return cli_usage_error(cmd, "needs -e ENCODER, -d DECODER and -i VIDEO");
    vae_session_options so;
    vae_session_options_default(&so);
    if ((rc = cli_session_options(cmd, device, dtype, threads, &so))) return rc;
    if ((rc = cli_memory_options(cmd, &mem, &so))) return rc;
    cli_read_args ra;
    if ((rc = cli_read_args_parse(cmd, start_s, frames_s, size_s, fit_s, &ra))) return rc;
    if ((rc = cli_write_args_parse(cmd, &wa))) return rc;
#ifndef VAE_HAVE_MEDIA
    (void)output;
    return cli_report(cli_set_error(VAE_EUNSUPPORTED, "this vae was built without FFmpeg"), cmd);
#else
    if (output && !vae_media_is_output_path(output))
        return cli_usage_error(cmd, "output '%s': expected .mp4, .mov, .mkv or frames/%%05d.png",
                               output);
    vae_model *me = NULL, *md = NULL;
    vae_session *se = NULL, *sd = NULL;
    vae_tensor vid = {0}, lat = {0};
    vae_model_info ie, id;
    vae_media_info mi;
    cli_progress prog;
    trip k;
    memset(&k, 0, sizeof k);
    memset(&prog, 0, sizeof prog);
    int temp_slot = -1; /* the media writer's temporary, for a forced exit to remove */
    const char *stage = enc;
    if ((rc = vae_model_open(&me, enc, NULL))) goto done;
    stage = dec;
    if ((rc = vae_model_open(&md, dec, NULL))) goto done;
    vae_model_get_info(me, &ie);
    vae_model_get_info(md, &id);
    cli_catch_interrupts();

    stage = "read";
    if ((rc = cli_read_video(input, &ie, &ra, &prog, &vid, &mi))) goto done;
    int T = (int)vid.shape[2], H = (int)vid.shape[3], W = (int)vid.shape[4];

    /* encode */
    int64_t lshape[8];
    int lnd;
    stage = "encode";
    if ((rc = vae_model_output_shape(me, 1, vid.shape, vid.ndim, lshape, &lnd))) goto done;
    if ((rc = vae_session_create(&se, me, &so))) goto done;
    cli_watch_session(se); /* a signal cancels it */
    k.lat = &lat;
    k.lat_t = (int)lshape[2];
    k.prog = &prog;
    k.tf = ie.is_video ? ie.temporal_factor : 1;
    k.in_frames = T;
    cli_progress_begin(&prog, "encode", "frames", k.tf > 1 ? 1 + (k.lat_t - 1) * k.tf : T);
    rc = cli_interrupted() ? VAE_EINTERRUPTED : vae_encode(se, &vid, on_latent, &k);
    if (rc == VAE_EINTERRUPTED && !cli_interrupted())
        rc = cli_set_error(VAE_ENOMEM, "out of memory");
    cli_progress_end(&prog, rc == VAE_OK);
    if (rc) goto done;
    cli_watch_session(NULL);
    vae_session_free(se);
    se = NULL;

    /* decode, compare, write */
    int64_t oshape[8];
    int ond;
    stage = "decode";
    if ((rc = vae_model_output_shape(md, 0, lat.shape, lat.ndim, oshape, &ond))) goto done;
    if ((rc = vae_session_create(&sd, md, &so))) goto done;
    cli_watch_session(sd);
    k.ref = &vid;
    k.ref_t = T;
    k.lo = id.image_min;
    k.hi = id.image_max;
    if (id.image_min != ie.image_min || id.image_max != ie.image_max) {
        rc = cli_set_error(VAE_EINVAL, "encoder pixels are [%g,%g] but decoder pixels [%g,%g]",
                           ie.image_min, ie.image_max, id.image_min, id.image_max);
        goto done;
    }
    if (output) {
        vae_media_write_options wo;
        cli_write_options(&wa, id.image_min, id.image_max, mi.fps_num, mi.fps_den, &wo);
        stage = output;
        if ((rc = cli_open_video_writer(output, (int)oshape[ond - 1], (int)oshape[ond - 2], &wo,
                                        &k.writer, &temp_slot)))
            goto done;
        stage = "decode";
    }
    cli_progress_begin(&prog, "decode", "frames", ond == 5 ? (int)oshape[2] : 1);
    rc = cli_interrupted() ? VAE_EINTERRUPTED : vae_decode(sd, &lat, on_decoded, &k);
    if (rc == VAE_OK && cli_interrupted()) rc = VAE_EINTERRUPTED;
    cli_progress_end(&prog, rc == VAE_OK);
    if (rc && k.writer_rc) {
        stage = output;
        rc = cli_set_error(k.writer_rc, "%s", vae_media_last_error());
        goto done;
    }
    if (rc) {
        if (rc == VAE_EINTERRUPTED && cli_interrupted())
            cli_set_error(rc, "stopped by a signal; no output written");
        goto done;
    }
    if (k.mismatch || k.frames_cmp == 0) {
        rc = cli_set_error(VAE_ESHAPE, "decoded frames are %lldx%lld, the input %dx%d: no PSNR",
                           (long long)oshape[ond - 1], (long long)oshape[ond - 2], W, H);
        goto done;
    }
    double psnr = k.se > 0 ? 10.0 * log10((double)k.count / k.se) : INFINITY;
    double psnr8 = k.se8 > 0 ? 10.0 * log10((double)k.count / k.se8) : INFINITY;
    printf("roundtrip-video %s: %d frames %dx%d -> latent [", input, T, W, H);
    for (int i = 0; i < lat.ndim; i++)
        printf("%s%lld", i ? "," : "", (long long)lat.shape[i]);
    printf("] -> %d frames: PSNR %.2f dB (float, [0,1], decoded clamped), %.2f dB (8-bit), worst "
           "frame %.2f dB\n",
           ond == 5 ? (int)oshape[2] : 1, psnr, psnr8, k.worst);
    if (k.frames_cmp != T)
        printf("note: %d decoded frames compared with %d input frames\n", k.frames_cmp, T);
    fflush(stdout);
    if (output) {
        vae_media_writer *w = k.writer;
        k.writer = NULL;
        stage = output;
        cli_temp_hold(); /* a forced exit waits for the rename */
        if ((rc = vae_media_writer_finish(w))) cli_set_error(rc, "%s", vae_media_last_error());
        cli_temp_forget(temp_slot);
        temp_slot = -1;
        cli_temp_release();
    }
done:
    if (rc) rc = cli_report(rc, stage);
    cli_watch_session(NULL);
    vae_media_writer_abort(k.writer);
    cli_temp_forget(temp_slot);
    vae_media_tensor_free(&vid);
    free(lat.data);
    vae_session_free(se);
    vae_session_free(sd);
    vae_model_free(me);
    vae_model_free(md);
    return rc;
#endif
}
