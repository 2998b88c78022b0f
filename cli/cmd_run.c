/* cmd_run.c -- `vae encode` and `vae decode`. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static const char help_decode[] =
    "usage: vae decode -m MODEL -i IN[:KEY] -o OUT [options]\n"
    "\n"
    "Decodes a latent [1,C,T,h,w] (diffusion space; image models also [1,C,h,w]) to the raw\n"
    "decoder output, not clamped: OUT.safetensors gets tensor 'video' [1,3,T,H,W] (image models:\n"
    "'image' [1,3,H,W]) as float32; OUT.png gets a one-frame result as an 8-bit image.\n"
    "\n"
    "options:\n"
    "  -m, --model FILE      checkpoint (.safetensors, .pth, .gguf)\n"
    "  -i, --input IN[:KEY]  tensor file (.safetensors, .pth, .gguf, .npy); KEY names the tensor\n"
    "                        when the file holds several\n"
    "  -o, --output OUT      .safetensors or .png (written to a temporary name, then renamed)\n"
    "  --device cpu|cuda     default cpu\n"
    "  --dtype fp32|bf16|fp16   compute precision (cpu: fp32)\n"
    "  --threads N           CPU threads (default: all cores)\n"
    "  --prefix P            key prefix of the VAE inside the checkpoint (default: detected)\n"
    "  --arch A              wan2.1|wan2.2|seedvr2|taesd (default: detected)\n"
    "\n"
    "example:\n"
    "  vae decode -m wan_2.1_vae.safetensors -i latents.safetensors:latent -o video.safetensors\n";

static const char help_encode[] =
    "usage: vae encode -m MODEL -i IN[:KEY] -o OUT.safetensors [options]\n"
    "\n"
    "Encodes a video [1,3,T,H,W] in [-1,1] (image models: [1,3,H,W] in [0,1]) or a PNG to the\n"
    "posterior mean in diffusion space, tensor 'latent' (float32). Video models use 1+4k frames\n"
    "(the reference drops the rest); H and W must be multiples of the model's spatial factor.\n"
    "\n"
    "options: as for 'vae decode'.\n"
    "\n"
    "example:\n"
    "  vae encode -m taef2_encoder.pth -i photo.png -o latent.safetensors\n";

typedef struct collect {
    vae_tensor *out;
    int t_total;
} collect;

static int on_frames(const float *frames, int first, int n, int c, int h, int w, void *user) {
    collect *k = user;
    if (interrupted) return 1;
    if (!cli_quiet && k->t_total > 1)
        fprintf(stderr, "\rvae: frame %d/%d", first + n, k->t_total);
    int64_t plane = (int64_t)h * w;
    for (int ch = 0; ch < c; ch++)
        memcpy((float *)k->out->data + ((int64_t)ch * k->t_total + first) * plane,
               frames + (int64_t)ch * n * plane, (size_t)(n * plane) * sizeof(float));
    return 0;
}

int cmd_run(int argc, char **argv, int encode) {
    const char *cmd = encode ? "encode" : "decode";
    const char *model = NULL, *input = NULL, *output = NULL, *device = "cpu", *dtype = "fp32",
               *threads = NULL, *prefix = NULL, *arch = NULL, *help = NULL;
    const cli_opt opts[] = {{"--model", "-m", 1, &model},     {"--input", "-i", 1, &input},
                            {"--output", "-o", 1, &output},   {"--device", NULL, 1, &device},
                            {"--dtype", NULL, 1, &dtype},     {"--threads", NULL, 1, &threads},
                            {"--prefix", NULL, 1, &prefix},   {"--arch", NULL, 1, &arch},
                            {"--help", "-h", 0, &help},       {NULL, NULL, 0, NULL}};
    const char *pos[1];
    int npos, rc = cli_parse(cmd, argc, argv, opts, pos, 0, &npos);
    if (rc) return rc;
    if (help) {
        fputs(encode ? help_encode : help_decode, stdout);
        return CLI_OK;
    }
    if (!model) return cli_usage_error(cmd, "missing -m MODEL");
    if (!input) return cli_usage_error(cmd, "missing -i INPUT");
    if (!output) return cli_usage_error(cmd, "missing -o OUTPUT");
    vae_session_options so;
    vae_session_options_default(&so);
    if (strcmp(device, "cpu") == 0) so.device = VAE_DEVICE_CPU;
    else if (strcmp(device, "cuda") == 0) so.device = VAE_DEVICE_CUDA;
    else return cli_usage_error(cmd, "--device must be cpu or cuda, not '%s'", device);
    if (strcmp(dtype, "fp32") == 0) so.dtype = VAE_DTYPE_F32;
    else if (strcmp(dtype, "bf16") == 0) so.dtype = VAE_DTYPE_BF16;
    else if (strcmp(dtype, "fp16") == 0) so.dtype = VAE_DTYPE_F16;
    else return cli_usage_error(cmd, "--dtype must be fp32, bf16 or fp16, not '%s'", dtype);
    if (threads) {
        char *end;
        long t = strtol(threads, &end, 10);
        if (*end || t < 0 || t > 1024) return cli_usage_error(cmd, "--threads: bad number '%s'", threads);
        so.threads = (int)t;
    }
    int to_png = cli_has_ext(output, ".png");
    if (!to_png && !cli_has_ext(output, ".safetensors"))
        return cli_usage_error(cmd, "output '%s': expected .safetensors or .png", output);
    if (to_png && encode) return cli_usage_error(cmd, "encode writes latents: use .safetensors");

    vae_model_options mo;
    vae_model_options_default(&mo);
    mo.prefix = prefix;
    mo.arch = arch;
    vae_model *m = NULL;
    vae_session *s = NULL;
    vae_tensor in = {0}, out = {0};
    vae_model_info info;
    if ((rc = vae_model_open(&m, model, &mo))) return cli_report(rc, model);
    vae_model_get_info(m, &info);
    if ((rc = cli_load_input(input, info.image_min, info.image_max, &in))) {
        rc = cli_report(rc, input);
        goto done;
    }
    /* Video models work on 5-D tensors: a single image or latent frame is T = 1. */
    if (info.is_video && in.ndim == 4) {
        memmove(&in.shape[3], &in.shape[2], 2 * sizeof(int64_t));
        in.shape[2] = 1;
        in.ndim = 5;
    }
    int64_t oshape[8];
    int ond;
    if ((rc = vae_model_output_shape(m, encode, in.shape, in.ndim, oshape, &ond))) {
        rc = cli_report(rc, input);
        goto done;
    }
    if ((rc = vae_session_create(&s, m, &so))) {
        rc = cli_report(rc, device);
        goto done;
    }
    out.ndim = ond;
    memcpy(out.shape, oshape, sizeof oshape);
    out.dtype = VAE_DTYPE_F32;
    size_t n = 1;
    for (int i = 0; i < ond; i++) n *= (size_t)oshape[i];
    out.data = calloc(n, sizeof(float));
    if (!out.data) {
        rc = cli_report(VAE_ENOMEM, "output");
        goto done;
    }
    collect k = {&out, ond == 5 ? (int)oshape[2] : 1};
    signal(SIGINT, on_sigint);
    rc = encode ? vae_encode(s, &in, on_frames, &k) : vae_decode(s, &in, on_frames, &k);
    if (!cli_quiet && k.t_total > 1) fputc('\n', stderr);
    if (rc) {
        rc = cli_report(rc, cmd);
        goto done;
    }
    if (to_png) {
        rc = cli_png_write(output, &out, 0, info.image_min, info.image_max);
        if (rc == VAE_OK && ond == 5 && oshape[2] > 1)
            fprintf(stderr, "vae: warning: %s holds frame 0 of %lld\n", output, (long long)oshape[2]);
    } else {
        const char *name = encode ? "latent" : (ond == 5 ? "video" : "image");
        rc = vae_tensor_save(output, &name, &out, 1);
    }
    rc = cli_report(rc, output);
done:
    free(out.data);
    vae_tensor_free(&in);
    vae_session_free(s);
    vae_model_free(m);
    return rc;
}
