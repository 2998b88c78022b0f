/* cmd_run.c -- `vae encode` and `vae decode`: tensors, images and videos in and out. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "progress.h"
#include "read_video.h"
#ifdef VAE_HAVE_MEDIA
#include "media.h"
#endif

static const char help_decode[] =
    "usage: vae decode -m MODEL -i LATENT[:KEY] -o OUT [options]\n"
    "\n"
    "Decodes a latent [1,C,T,h,w] (image models also [1,C,h,w]) to pixels. The output kind comes\n"
    "from OUT:\n"
    "  OUT.safetensors  tensor 'video' [1,3,T,H,W] (image models and a 4-D latent: 'image'\n"
    "                   [1,3,H,W]), float32, the raw decoder output, not clamped\n"
    "  OUT.npy          the same tensor as a NumPy array\n"
    "  OUT.png          frame 0 as an 8-bit RGB image\n"
    "  OUT.mp4, .mov    H.264 (default) or H.265 video, BT.709 limited range 4:2:0\n"
    "  OUT.mkv          FFV1 lossless RGB (default), or H.264 / H.265\n"
    "  DIR/%05d.png     a PNG sequence, one file per frame, numbered from 0\n"
    "Pixels are clamped to the model's range and rounded to the nearest code. Every output is\n"
    "written to a temporary name and renamed when complete: a failure, Ctrl-C, SIGTERM, SIGHUP\n"
    "or a closed pipe leaves no file (a signal stops within a second: exit 130). Large tiled\n"
    "outputs may go through a temporary file in $TMPDIR (else /tmp), removed at once.\n"
    "Image models (TAESD family) decode a [1,C,T,h,w] latent frame by frame into T frames.\n"
    "\n"
    "options:\n"
    "  -m, --model FILE        checkpoint (.safetensors, .pth, .gguf)\n"
    "  -i, --input FILE[:KEY]  latent file: .safetensors, .pth, .gguf, .npy. KEY names the tensor\n"
    "                          when the file holds several; without KEY a file with one tensor, "
    "or\n"
    "                          a ComfyUI latent ('latent_tensor'), or a tensor named 'latent'\n"
    "  -o, --output OUT        see above\n"
    "  --latent-space S        auto (default), diffusion or raw. diffusion: normalised latents\n"
    "                          (what diffusion models and this tool's encode produce); raw: the\n"
    "                          VAE's own latent space, converted with the model's mean/std\n"
    "                          (diffusion = (raw - mean) / std). auto: diffusion, except ComfyUI\n"
    "                          latent files, which hold raw latents\n"
    "  --latent-frames N       decode only the first N latent frames\n"
    "  --preview time|space|both  a cheaper preview decoder on the same weights (TAEHV): time,\n"
    "                          one frame per latent frame; space, latent-sized frames; or both\n"
    "  --device cpu|cuda       default cpu\n"
    "  --dtype fp32|bf16|fp16|fp8  compute precision (cpu: fp32, or fp8 emulated; cuda: fp8\n"
    "                          on sm_89+ GPUs, E4M3 convs on bf16 activations: those nearest\n"
    "                          each program's output, decoders Wan2.1 16, Wan2.2 24,\n"
    "                          SeedVR2 12, encoders Wan's all, SeedVR2 11;\n"
    "                          VAE_FP8_CONVS=N|all for others)\n"
    "  --threads N             CPU threads (default: all cores)\n"
    "  --prefix P              key prefix of the VAE inside the checkpoint (default: detected)\n"
    "  --arch A                wan2.1|wan2.2|seedvr2|taesd|taehv (default: detected)\n"
    "  --config JSON           override detected configuration values that shapes cannot tell,\n"
    "                          e.g. '{\"norm_num_groups\":8}' for a SeedVR2 checkpoint\n"
    "video output:\n"
    "  --fps R                 frame rate: 16, 24, 23.976, 30000/1001 (default: 16 for Wan2.1\n"
    "                          models, 24 otherwise)\n"
    "  --codec C               h264, h265, ffv1, png (default: h264 for .mp4/.mov, ffv1 for .mkv)\n"
    "  --crf N                 h264/h265 quality 0..51, lower is better (default 18 / 20)\n"
    "  --preset P              x264/x265 speed preset (default medium)\n"
    "  --bit-depth 8|10        8: yuv420p / rgb24; 10: yuv420p10le / 16-bit PNG (default 8)\n"
    "\n"
    "examples:\n"
    "  vae decode -m wan_2.1_vae.safetensors -i latents.safetensors:latent -o video.mp4\n"
    "  vae decode -m wan_2.1_vae.safetensors -i latents.pth -o frames/%05d.png --fps 16\n"
    "  vae decode -m wan_2.1_vae.safetensors -i ComfyUI_00001_.latent.safetensors -o out.mkv\n"
    "  vae decode -m wan_2.1_vae.safetensors -i latents.npy -o video.safetensors\n";

static const char help_encode[] =
    "usage: vae encode -m MODEL -i INPUT -o LATENT [options]\n"
    "\n"
    "Encodes pixels to the posterior mean, written as tensor 'latent' (float32) to\n"
    "LATENT.safetensors, or as a NumPy array to LATENT.npy. INPUT may be:\n"
    "  a tensor file      FILE[:KEY] (.safetensors, .pth, .gguf, .npy): a video [1,3,T,H,W] in\n"
    "                     [-1,1] (image models: [1,3,H,W] in [0,1])\n"
    "  an image           .png (also .jpg, .webp, ... with FFmpeg): [1,3,H,W] (one frame)\n"
    "  a video            .mp4, .mkv, .mov, .webm, ...: [1,3,T,H,W]\n"
    "  frames             a printf pattern (frames/%05d.png) or a folder of images\n"
    "Video is converted to RGB with its own colour matrix and range (BT.709 / BT.601, limited or\n"
    "full), then to the model's range. Sizes must be multiples of the model's spatial factor (8 "
    "or\n"
    "16) and video models take 1 + 4k frames: --fit says what to do otherwise (default: stop and\n"
    "say which option fixes it).\n"
    "\n"
    "options:\n"
    "  -m, --model FILE        checkpoint (.safetensors, .pth, .gguf)\n"
    "  -i, --input INPUT       see above\n"
    "  -o, --output LATENT     .safetensors (tensor 'latent') or .npy\n"
    "  --start N               first frame to read (default 0)\n"
    "  --frames N              number of frames to read (default: to the end)\n"
    "  --size WxH              scale frames to W x H first (W or H 0: keep the aspect ratio)\n"
    "  --fit error|crop|pad|resize\n"
    "                          error (default): stop unless the size and frame count are valid;\n"
    "                          crop: centre-crop to multiples, drop trailing frames to 1 + 4k;\n"
    "                          pad: repeat edge pixels at the bottom/right up to multiples, "
    "repeat\n"
    "                          the last frame up to 1 + 4k; resize: scale to the nearest "
    "multiples\n"
    "                          (frames as crop)\n"
    "  --latent-space diffusion|raw   diffusion (default): normalised with the model's mean/std;\n"
    "                          raw: the VAE's own latent space (raw = diffusion * std + mean)\n"
    "  --device, --dtype, --threads, --prefix, --arch   as for 'vae decode'\n"
    "\n"
    "examples:\n"
    "  vae encode -m taef2_encoder.pth -i photo.png -o latent.safetensors\n"
    "  vae encode -m wan_2.1_vae.safetensors -i clip.mp4 --frames 33 --size 832x480 -o "
    "lat.safetensors\n"
    "  vae encode -m wan_2.1_vae.safetensors -i frames/%05d.png --fit crop -o lat.npy\n";

/* Writes a float32 tensor as .npy (version 1.0), to a temporary name renamed at the end. */
int cli_write_npy(const char *path, const vae_tensor *t) {
    char hdr[256], shape[160] = "";
    size_t n = 0, numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        n += (size_t)snprintf(shape + n, sizeof shape - n, "%lld%s", (long long)t->shape[i],
                              t->ndim == 1 || i + 1 < t->ndim ? ", " : "");
        numel *= (size_t)t->shape[i];
    }
    int len = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }",
                       shape);
    int total = 10 + len + 1, pad = (64 - total % 64) % 64;
    char tmp[4200];
    int slot;
    FILE *f = cli_temp_open(path, tmp, sizeof tmp, &slot);
    if (!f) {
        int e = errno;
        return cli_set_error(VAE_EIO, "%s: cannot create: %s", path, strerror(e));
    }
    unsigned hl = (unsigned)(len + pad + 1);
    unsigned char pre[10] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hl & 255), (unsigned char)(hl >> 8)};
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)len, f) == (size_t)len;
    for (int i = 0; ok && i < pad; i++)
        ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && fwrite(t->data, sizeof(float), numel, f) == numel; /* little-endian hosts */
    if (fclose(f) != 0) ok = 0;
    if (cli_temp_commit(tmp, ok ? path : NULL, slot) != 0)
        return cli_set_error(VAE_EIO, "%s: cannot write: %s", path, strerror(errno));
    return VAE_OK;
}

/* Loads a latent: FILE:KEY, a one-tensor file, or a file with a well-known latent name. */
static int load_latent(const char *arg, vae_tensor *out, const char **found_key) {
    *found_key = NULL;
    if (cli_has_ext(arg, ".png")) return cli_load_input(arg, 0, 1, out);
    char *path, *key;
    cli_split_key(arg, &path, &key);
    int rc = vae_tensor_load(path, key, out);
    if (rc == VAE_EKEY && !key) {
        static const char *const names[] = {"latent_tensor", "latent", "latents", "samples", NULL};
        char first[1024];
        snprintf(first, sizeof first, "%s", vae_last_error());
        for (int i = 0; names[i] && rc; i++)
            if (vae_tensor_load(path, names[i], out) == VAE_OK) {
                rc = VAE_OK;
                *found_key = names[i];
            }
        if (rc) rc = cli_set_error(VAE_EKEY, "%s", first);
    }
    free(path);
    free(key);
    return rc;
}

/* diffusion <-> raw on dim 1 of [1,C,...] */
static int convert_latent_space(const vae_model *m, vae_tensor *t, int to_diffusion) {
    float mean[1024], std[1024];
    int n = vae_model_latent_norm(m, mean, std, 1024);
    if (n < 0) return n;
    int64_t c = t->shape[1], inner = 1;
    for (int i = 2; i < t->ndim; i++)
        inner *= t->shape[i];
    if (n != c)
        return cli_set_error(VAE_ESHAPE, "latent has %lld channels, the model's normalisation %d",
                             (long long)c, n);
    float *d = t->data;
    for (int64_t ch = 0; ch < c; ch++) {
        float mu = mean[ch], sd = std[ch];
        float *p = d + ch * inner;
        if (to_diffusion)
            for (int64_t i = 0; i < inner; i++)
                p[i] = (p[i] - mu) / sd;
        else
            for (int64_t i = 0; i < inner; i++)
                p[i] = p[i] * sd + mu;
    }
    return VAE_OK;
}

typedef struct collect {
    vae_tensor *out;
    int t_total;
    cli_progress *prog;
    int in_frames, tf; /* encode: progress in input frames */
    int encode;
    int discard; /* --dist, ranks above 0: the frames are rank 0's to keep */
#ifdef VAE_HAVE_MEDIA
    vae_media_writer *writer;
    int writer_rc;
#endif
} collect;

static int on_frames(const float *frames, int first, int n, int c, int h, int w, void *user) {
    collect *k = user;
    if (cli_interrupted()) return 1;
    if (k->discard) return 0;
#ifdef VAE_HAVE_MEDIA
    if (k->writer) {
        if ((k->writer_rc = vae_media_writer_add(k->writer, frames, n))) return 1;
    } else
#endif
    {
        int64_t plane = (int64_t)h * w;
        for (int ch = 0; ch < c; ch++)
            memcpy((float *)k->out->data + ((int64_t)ch * k->t_total + first) * plane,
                   frames + (int64_t)ch * n * plane, (size_t)(n * plane) * sizeof(float));
    }
    int done = first + n;
    if (k->encode && k->tf > 1) {
        done = 1 + (first + n - 1) * k->tf;
        if (done > k->in_frames) done = k->in_frames;
    }
    cli_progress_update(k->prog, done);
    return 0;
}

#ifdef VAE_HAVE_MEDIA
static void squeeze_time(vae_tensor *t) {
    /* [1,C,1,H,W] -> [1,C,H,W] */
    const int64_t shape[4] = {t->shape[0], t->shape[1], t->shape[3], t->shape[4]};
    *t = vae_tensor_dense(4, shape, t->dtype, t->data);
}
#endif

int cmd_run(int argc, char **argv, int encode) {
    const char *cmd = encode ? "encode" : "decode";
    const char *model = NULL, *input = NULL, *output = NULL, *device = "cpu", *dtype = "fp32",
               *threads = NULL, *prefix = NULL, *arch = NULL, *space = NULL, *start_s = NULL,
               *frames_s = NULL, *size_s = NULL, *fit_s = NULL, *lframes_s = NULL,
               *config = NULL, *dist = NULL, *preview = NULL;
    cli_mem_args mem = {0};
    cli_write_args wa = {0};
    /* the options both directions take */
#define RUN_SHARED_OPTS                                                                            \
    {"--model", "-m", 1, &model}, {"--input", "-i", 1, &input}, {"--output", "-o", 1, &output},    \
        {"--device", NULL, 1, &device}, {"--dtype", NULL, 1, &dtype},                              \
        {"--threads", NULL, 1, &threads}, {"--prefix", NULL, 1, &prefix},                          \
        {"--arch", NULL, 1, &arch}, {"--config", NULL, 1, &config},                                \
        {"--latent-space", NULL, 1, &space}
    const cli_opt opts_dec[] = {RUN_SHARED_OPTS,
                                {"--latent-frames", NULL, 1, &lframes_s},
                                {"--preview", NULL, 1, &preview},
                                CLI_WRITE_OPTS(wa),
                                CLI_MEM_OPTS(mem),
                                {"--dist", NULL, 0, &dist},
                                {NULL, NULL, 0, NULL}};
    const cli_opt opts_enc[] = {RUN_SHARED_OPTS,
                                {"--start", NULL, 1, &start_s},
                                {"--frames", NULL, 1, &frames_s},
                                {"--size", NULL, 1, &size_s},
                                {"--fit", NULL, 1, &fit_s},
                                CLI_MEM_OPTS(mem),
                                {"--dist", NULL, 0, &dist},
                                {NULL, NULL, 0, NULL}};
#undef RUN_SHARED_OPTS
    const cli_command command = {
        cmd, {encode ? help_encode : help_decode, cli_mem_help, cli_dist_help}, 0, NULL};
    int rc = cli_parse(&command, argc, argv, encode ? opts_enc : opts_dec, NULL);
    if (rc != CLI_PARSED) return rc;
    if (!model) return cli_usage_error(cmd, "missing -m MODEL");
    if (!input) return cli_usage_error(cmd, "missing -i INPUT");
    if (!output) return cli_usage_error(cmd, "missing -o OUTPUT");
    vae_session_options so;
    vae_session_options_default(&so);
    if ((rc = cli_session_options(cmd, device, dtype, threads, &so))) return rc;
    if ((rc = cli_memory_options(cmd, &mem, &so))) return rc;
    if (preview) {
        static const char *const kinds[] = {"none", "time", "space", "both"};
        int k = 0;
        while (k < 4 && strcmp(preview, kinds[k]) != 0) k++;
        if (k == 4)
            return cli_usage_error(cmd, "--preview must be time, space, both or none, not '%s'",
                                   preview);
        so.preview = k; /* VAE_PREVIEW_* in that order */
    }
    int latent_space = 0; /* 0 auto, 1 diffusion, 2 raw */
    if (space) {
        if (strcmp(space, "diffusion") == 0)
            latent_space = 1;
        else if (strcmp(space, "raw") == 0)
            latent_space = 2;
        else if (strcmp(space, "auto") == 0 && !encode)
            latent_space = 0;
        else
            return cli_usage_error(cmd, "--latent-space must be %sdiffusion or raw, not '%s'",
                                   encode ? "" : "auto, ", space);
    }
    int lframes = 0;
    cli_read_args ra;
    if ((rc = cli_read_args_parse(cmd, start_s, frames_s, size_s, fit_s, &ra))) return rc;
    if ((rc = cli_write_args_parse(cmd, &wa))) return rc;
    if (lframes_s && (rc = cli_parse_int(cmd, "--latent-frames", lframes_s, 1, 1 << 30, &lframes)))
        return rc;

    /* what goes in and out */
    int to_png = !encode && cli_has_ext(output, ".png") && !strchr(output, '%');
    int to_npy = cli_has_ext(output, ".npy");
    int to_st = cli_has_ext(output, ".safetensors");
    int to_media = 0;
#ifdef VAE_HAVE_MEDIA
    to_media = !encode && vae_media_is_output_path(output);
    if (!encode && !to_media && strchr(output, '%'))
        return cli_usage_error(cmd,
                               "output '%s': a frame pattern needs one %%d and .png, e.g. "
                               "frames/%%05d.png",
                               output);
#endif
    if (encode && !to_st && !to_npy) {
        if (cli_has_ext(output, ".png") || cli_has_ext(output, ".mp4") ||
            cli_has_ext(output, ".mkv"))
            return cli_usage_error(cmd, "encode writes latents: use .safetensors or .npy");
        return cli_usage_error(cmd, "output '%s': expected .safetensors or .npy", output);
    }
    if (!encode && !to_png && !to_npy && !to_st && !to_media)
        return cli_usage_error(cmd, "output '%s': expected .safetensors, .npy, .png%s", output,
#ifdef VAE_HAVE_MEDIA
                               ", .mp4, .mov, .mkv or a PNG pattern (frames/%05d.png)"
#else
                               " (this vae was built without FFmpeg: no video output)"
#endif
        );
    if (!to_media && cli_write_args_given(&wa))
        return cli_usage_error(cmd, "--fps, --codec, --crf, --preset and --bit-depth apply to "
                                    "video and PNG-sequence outputs");
    int tensor_in = cli_is_tensor_file(input);
    int media_opts = start_s || frames_s || size_s || fit_s;
    /* a plain .png file keeps the libpng path (exactly the old behaviour); patterns, folders,
     * other images and videos go through FFmpeg */
    int media_in =
        encode && !tensor_in && (media_opts || !cli_has_ext(input, ".png") || strchr(input, '%'));
    if (encode && tensor_in && media_opts)
        return cli_usage_error(cmd, "--start, --frames, --size and --fit apply to image and video "
                                    "inputs, not to tensor files");

    /* the group forms once every argument is known good: a rank that stops on a usage error
     * after joining would leave the others waiting for it */
    if (dist && (rc = cli_group_from_env(cmd, &so))) return rc;
    /* --dist: the ranks above 0 make the same calls (each is collective) and drop the output */
    const int discard = so.world > 1 && so.rank > 0;

    vae_model_options mo;
    vae_model_options_default(&mo);
    mo.prefix = prefix;
    mo.arch = arch;
    mo.config_json = config;
    vae_model *m = NULL;
    vae_session *s = NULL;
    vae_tensor in = {0}, out = {0};
    vae_model_info info;
    int media_tensor = 0; /* `in` was allocated by the media library */
    cli_progress prog;
    memset(&prog, 0, sizeof prog);
    collect k;
    memset(&k, 0, sizeof k);
    int temp_slot = -1; /* the media writer's temporary, for a forced exit to remove */
    if ((rc = vae_model_open(&m, model, &mo))) return cli_report(rc, model);
    vae_model_get_info(m, &info);
    cli_catch_interrupts();
    const char *found_key = NULL;
    if (media_in && !media_opts && !strchr(input, '%') &&
        cli_load_input(input, info.image_min, info.image_max, &in) == VAE_OK)
        media_in = 0; /* a tensor file with an unusual extension (files are sniffed by content) */
    else if (!media_in) {
        rc = encode ? cli_load_input(input, info.image_min, info.image_max, &in)
                    : load_latent(input, &in, &found_key);
        if (rc) {
            rc = cli_report(rc, input);
            goto done;
        }
    }
#ifndef VAE_HAVE_MEDIA
    else {
        rc = cli_report(cli_set_error(VAE_EUNSUPPORTED, "this vae was built without FFmpeg: it "
                                                        "reads .png images and tensor files only"),
                        input);
        goto done;
    }
#else
    else {
        vae_media_info mi;
        if ((rc = cli_read_video(input, &info, &ra, &prog, &in, &mi))) {
            rc = cli_report(rc, "read");
            goto done;
        }
        media_tensor = 1;
        if (mi.is_image) squeeze_time(&in);
    }
#endif
    if (!encode) {
        if (latent_space == 0 && found_key && strcmp(found_key, "latent_tensor") == 0) {
            latent_space = 2;
            if (!cli_quiet)
                fprintf(stderr,
                        "vae: %s is a ComfyUI latent: taken as raw VAE latents (pass "
                        "--latent-space diffusion if it is not)\n",
                        input);
        }
        if (lframes > 0 && in.ndim == 5 && in.shape[2] > lframes) {
            int64_t T = in.shape[2], plane = in.shape[3] * in.shape[4];
            float *d = in.data;
            for (int64_t c = 0; c < in.shape[1]; c++)
                memmove(d + c * lframes * plane, d + c * T * plane,
                        (size_t)(lframes * plane) * sizeof(float));
            in.shape[2] = lframes;
            in = vae_tensor_dense(in.ndim, in.shape, in.dtype, in.data); /* strides of the new T */
        }
        if (latent_space == 2 && in.ndim >= 2 && (rc = convert_latent_space(m, &in, 1))) {
            rc = cli_report(rc, input);
            goto done;
        }
    }
    /* Video models work on 5-D tensors: a single image or latent frame is T = 1. */
    if (info.is_video && in.ndim == 4) {
        memmove(&in.shape[3], &in.shape[2], 2 * sizeof(int64_t));
        in.shape[2] = 1;
        in = vae_tensor_dense(5, in.shape, in.dtype, in.data);
    }
    int64_t oshape[8];
    int ond;
    if ((rc = vae_session_create(&s, m, &so))) {
        rc = cli_report(rc, so.preview ? "--preview" : device);
        goto done;
    }
    /* the session's: a preview decoder's output is smaller */
    if ((rc = vae_session_output_shape(s, encode, in.shape, in.ndim, oshape, &ond))) {
        rc = cli_report(rc, input);
        goto done;
    }
    cli_watch_session(s); /* a signal cancels it, in whatever plan it runs */
    out = vae_tensor_dense(ond, oshape, VAE_DTYPE_F32, NULL);
    k.out = &out;
    k.t_total = ond == 5 ? (int)oshape[2] : 1;
    k.prog = &prog;
    k.encode = encode;
    k.in_frames = in.ndim == 5 ? (int)in.shape[2] : 1;
    k.tf = info.is_video ? info.temporal_factor : 1;
    k.discard = discard; /* then no writer and no output buffer */
#ifdef VAE_HAVE_MEDIA
    if (to_media && !discard) {
        vae_media_write_options wo;
        cli_write_options(&wa, info.image_min, info.image_max,
                          strcmp(info.arch, "wan2.1") == 0 ? 16 : 24, 1, &wo);
        if ((rc = cli_open_video_writer(output, (int)oshape[ond - 1], (int)oshape[ond - 2], &wo,
                                        &k.writer, &temp_slot))) {
            rc = cli_report(rc, output);
            goto done;
        }
    } else
#endif
        if (!discard) {
        size_t n = 1;
        for (int i = 0; i < ond; i++)
            n *= (size_t)oshape[i];
        out.data = calloc(n, sizeof(float));
        if (!out.data) {
            rc = cli_report(VAE_ENOMEM, "output");
            goto done;
        }
    }
    int progress_total = encode ? (k.tf > 1 ? 1 + (k.t_total - 1) * k.tf : k.in_frames) : k.t_total;
    cli_progress_begin(&prog, cmd, "frames", progress_total);
    /* (a signal before the call: the call would clear the session's stop flag first) */
    rc = cli_interrupted() ? VAE_EINTERRUPTED
         : encode          ? vae_encode(s, &in, on_frames, &k)
                           : vae_decode(s, &in, on_frames, &k);
    if (rc == VAE_OK && cli_interrupted()) rc = VAE_EINTERRUPTED;
    cli_progress_end(&prog, rc == VAE_OK && (k.t_total > 1 || k.in_frames > 1));
#ifdef VAE_HAVE_MEDIA
    if (rc && k.writer_rc) {
        rc = cli_report(cli_set_error(k.writer_rc, "%s", vae_media_last_error()), output);
        goto done;
    }
#endif
    if (rc) {
        if (rc == VAE_EINTERRUPTED && cli_interrupted())
            rc = cli_report(cli_set_error(rc, "stopped by a signal; no output written"), cmd);
        else
            rc = cli_report(rc, cmd);
        goto done;
    }
    if (discard) goto done; /* rc is VAE_OK: rank 0 writes the output */
    if (encode && space && latent_space == 2 && (rc = convert_latent_space(m, &out, 0))) {
        rc = cli_report(rc, output);
        goto done;
    }
    /* a forced exit waits for the output's temporary to be renamed or removed */
    cli_temp_hold();
#ifdef VAE_HAVE_MEDIA
    if (to_media) {
        vae_media_writer *w = k.writer;
        k.writer = NULL;
        rc = vae_media_writer_finish(w);
        if (rc) cli_set_error(rc, "%s", vae_media_last_error());
        cli_temp_forget(temp_slot);
        temp_slot = -1;
    } else
#endif
        if (to_png) {
        rc = cli_png_write(output, &out, 0, info.image_min, info.image_max);
        if (rc == VAE_OK && ond == 5 && oshape[2] > 1)
            fprintf(stderr, "vae: warning: %s holds frame 0 of %lld\n", output,
                    (long long)oshape[2]);
    } else if (to_npy) {
        rc = cli_write_npy(output, &out);
    } else {
        const char *name = encode ? "latent" : (ond == 5 ? "video" : "image");
        rc = vae_tensor_save(output, &name, &out, 1);
    }
    cli_temp_release();
    rc = cli_report(rc, output);
done:
    cli_watch_session(NULL);
#ifdef VAE_HAVE_MEDIA
    vae_media_writer_abort(k.writer);
    if (media_tensor) vae_media_tensor_free(&in);
#endif
    cli_temp_forget(temp_slot);
    free(out.data);
    if (!media_tensor) vae_tensor_free(&in);
    vae_session_free(s);
    vae_model_free(m);
    return rc;
}
