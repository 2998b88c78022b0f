/* cmd_bench.c -- `vae bench`: times encode/decode of a released configuration with synthetic
 * weights (warm-up, then the median of several runs), reports TFLOP/s and peak device memory. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>

#include "cli.h"
#include "platform/platform.h"

static const char help[] =
    "usage: vae bench ARCH [--op decode|encode] [--frames N] [--size HxW] [--dtype bf16|fp16|fp32|fp8]\n"
    "                 [--device cuda|cpu] [--runs N] [--warmup N] [--config JSON] [--threads N]\n"
    "                 [--max-memory SIZE] [--tile-mode M] [--tile HxW] [--tile-size PX] ...\n"
    "\n"
    "ARCH: wan2.1, wan2.2, seedvr2, with synthetic weights of the released configuration (or\n"
    "--config). N video frames of HxW pixels (decode: the matching latent). Prints the median wall\n"
    "time of --runs runs after --warmup (and the first run's: the cold start, conv paths timed or\n"
    "taken from the tune cache), the achieved TFLOP/s from the model's FLOP count and the\n"
    "peak backend memory (and the plan's prediction), then one line 'BENCH {json}' for scripts.\n"
    "--plan-only: print the plan for this shape and budget (peak, floor, tiles, why), run nothing.\n"
    "--psnr: also the output's PSNR against an untiled session's (blend mode: its distance).\n"
    "The memory options are those of 'vae decode' (below).\n"
    "\n"
    "example:\n"
    "  vae bench wan2.1 --op decode --frames 81 --size 480x832 --dtype bf16 --device cuda\n";

static double now(void) {
    return vae_plat_monotonic();
}

/* Counts the output frames; with `keep`, also collects them ([c][t][h][w]) for --psnr. */
typedef struct sink {
    int frames, t_total;
    float *keep;
} sink;

static int collect(const float *f, int first, int n, int c, int h, int w, void *user) {
    sink *k = user;
    k->frames += n;
    if (k->keep && first + n <= k->t_total)
        for (int ch = 0; ch < c; ch++)
            memcpy(k->keep + ((size_t)ch * k->t_total + first) * h * w,
                   f + (size_t)ch * n * h * w, (size_t)n * h * w * sizeof *f);
    return 0;
}

/* PSNR of a against the reference b over [-1,1] pixels (peak-to-peak 2), and the relative L2
 * error ||a - b|| / ||b|| (what the exactness checks bound). */
static double psnr(const float *a, const float *b, size_t n, double *rel) {
    double se = 0, sb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        se += d * d;
        sb += (double)b[i] * b[i];
    }
    *rel = sb > 0 ? sqrt(se / sb) : sqrt(se);
    return se > 0 ? 10 * log10(4.0 / (se / (double)n)) : INFINITY;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const cli_command command = {"bench", {help, cli_mem_help, cli_dist_help}, 1,
                                    "expected ARCH (wan2.1, wan2.2, seedvr2)"};

int cmd_bench(int argc, char **argv) {
    const char *op = "decode", *frames_s = "81", *size = "480x832", *dtype = "bf16", *device = NULL,
               *runs_s = "5", *warm_s = "1", *config = NULL, *threads = NULL, *pos[1],
               *psnr_flag = NULL, *plan_only = NULL, *dist = NULL;
    cli_mem_args mem = {0};
    const cli_opt opts[] = {CLI_MEM_OPTS(mem),
                            {"--psnr", NULL, 0, &psnr_flag},
                            {"--plan-only", NULL, 0, &plan_only},
                            {"--dist", NULL, 0, &dist},
                            {"--op", NULL, 1, &op},
                            {"--frames", NULL, 1, &frames_s},
                            {"--size", NULL, 1, &size},
                            {"--dtype", NULL, 1, &dtype},
                            {"--device", NULL, 1, &device},
                            {"--runs", NULL, 1, &runs_s},
                            {"--warmup", NULL, 1, &warm_s},
                            {"--config", NULL, 1, &config},
                            {"--threads", NULL, 1, &threads},
                            {NULL, NULL, 0, NULL}};
    int rc = cli_parse(&command, argc, argv, opts, pos);
    if (rc != CLI_PARSED) return rc;
    int encode = strcmp(op, "encode") == 0;
    if (!encode && strcmp(op, "decode") != 0) return cli_usage_error("bench", "--op decode|encode");
    int frames = atoi(frames_s), runs = atoi(runs_s), warm = atoi(warm_s), H = 0, W = 0;
    if (sscanf(size, "%dx%d", &H, &W) != 2 || H <= 0 || W <= 0 || frames <= 0 || runs <= 0 ||
        warm < 0)
        return cli_usage_error("bench", "bad --size/--frames/--runs/--warmup");
    vae_session_options so;
    vae_session_options_default(&so);
    if (!device) device = vae_device_available(VAE_DEVICE_CUDA) ? "cuda" : "cpu";
    if ((rc = cli_session_options("bench", device, dtype, threads, &so))) return rc;
    if ((rc = cli_memory_options("bench", &mem, &so))) return rc;
    if (dist && (rc = cli_group_from_env("bench", &so))) return rc;
    const int ranks = so.world > 1 ? so.world : 1;

    vae_model *m = NULL;
    vae_session *s = NULL;
    vae_tensor in = {0};
    double *times = NULL;
    sink k = {0, 0, NULL};
    if ((rc = vae_model_synth(&m, pos[0], config))) return cli_report(rc, pos[0]);
    vae_model_info info;
    vae_model_get_info(m, &info);
    int f = info.spatial_factor;
    if (H % f || W % f) {
        rc = cli_usage_error("bench", "--size must be a multiple of %d for %s", f, info.arch);
        goto done;
    }
    int64_t shape[5] = {1, encode ? 3 : info.latent_channels,
                        encode ? frames : 1 + (frames - 1) / info.temporal_factor,
                        encode ? H : H / f, encode ? W : W / f};
    in = vae_tensor_dense(5, shape, VAE_DTYPE_F32, NULL);
    /* the plan needs the shape alone: nothing the size of the video is made before it (a
     * --plan-only call for a size no host could hold answers at once) */
    if ((rc = vae_session_create(&s, m, &so))) {
        rc = cli_report(rc, device);
        goto done;
    }
    vae_plan_info plan;
    if ((rc = vae_session_plan(s, encode, in.shape, 5, &plan))) {
        rc = cli_report(rc, "bench");
        goto done;
    }
    if (!cli_quiet || (plan_only && so.rank == 0))
        fprintf(stderr, "vae bench: plan: %s\n", plan.text);
    if (plan_only) { /* the plan for this shape and budget, nothing run */
        if (so.rank == 0)
            printf("plan: peak %.2f GiB, exact floor %.2f GiB, %d x %d tiles\n",
                   (double)plan.peak_bytes / (1 << 30),
                   plan.floor_bytes > 0 ? (double)plan.floor_bytes / (1 << 30) : 0.0,
                   plan.tiles_y, plan.tiles_x);
        goto done;
    }
    double flops = 0;
    if ((rc = vae_model_flops(m, encode, in.shape, 5, &flops))) {
        rc = cli_report(rc, "bench");
        goto done;
    }
    const size_t n = (size_t)(shape[1] * shape[2] * shape[3] * shape[4]);
    in.data = malloc(n * sizeof(float));
    times = calloc((size_t)runs, sizeof *times);
    if (!in.data || !times) {
        rc = cli_report(VAE_ENOMEM, "bench");
        goto done;
    }
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < n; i++) { /* uniform in [-1,1) */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ((float *)in.data)[i] = (float)((x >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
    }
    int64_t oshape[8];
    int ond = 0;
    if ((rc = vae_model_output_shape(m, encode, in.shape, 5, oshape, &ond))) {
        rc = cli_report(rc, "bench");
        goto done;
    }
    const size_t out_vals = (size_t)(oshape[1] * oshape[2] * oshape[3] * oshape[4]);
    k.t_total = (int)oshape[2];
    if (psnr_flag && !(k.keep = malloc(out_vals * sizeof(float)))) {
        rc = cli_report(VAE_ENOMEM, "bench --psnr");
        goto done;
    }
    int out_frames = 0;
    double cold = 0;
    for (int i = 0; i < warm + runs; i++) {
        k.frames = 0;
        double t0 = now();
        rc = encode ? vae_encode(s, &in, collect, &k) : vae_decode(s, &in, collect, &k);
        out_frames = k.frames;
        double dt = now() - t0;
        if (rc) {
            rc = cli_report(rc, "bench");
            goto done;
        }
        if (i >= warm) times[i - warm] = dt;
        if (i == 0) cold = dt;
        if (!cli_quiet) fprintf(stderr, "vae bench: run %d: %.3f s\n", i + 1, dt);
    }
    /* the plan the timed runs settled on: the first call's may differ (the backend's scratch
     * grows during it, and later calls plan with what it holds) */
    vae_plan_info first = plan;
    if (vae_session_plan(s, encode, in.shape, 5, &plan) != VAE_OK) plan = first;
    if (!cli_quiet && strcmp(plan.text, first.text) != 0)
        fprintf(stderr, "vae bench: plan after the first run: %s\n", plan.text);
    if (so.rank > 0) goto done; /* --dist: rank 0 reports (rc is VAE_OK) */
    double db = NAN, rel = NAN;
    if (psnr_flag) { /* the same input through an untiled session: the exact output */
        vae_session_options ro = so;
        ro.tile_mode = VAE_TILE_NONE, ro.max_memory = 0, ro.tile_height = ro.tile_width = 0;
        ro.n_devices = 0; /* one device */
        ro.world = 0;     /* rank 0 alone (--dist): the one-process output */
        vae_session *ref = NULL;
        sink r = {0, k.t_total, malloc(out_vals * sizeof(float))};
        rc = r.keep ? vae_session_create(&ref, m, &ro) : VAE_ENOMEM;
        if (rc == VAE_OK)
            rc = encode ? vae_encode(ref, &in, collect, &r) : vae_decode(ref, &in, collect, &r);
        if (rc == VAE_OK) db = psnr(k.keep, r.keep, out_vals, &rel);
        vae_session_free(ref);
        free(r.keep);
        if (rc) {
            rc = cli_report(rc, "bench --psnr reference");
            goto done;
        }
        if (!cli_quiet)
            fprintf(stderr,
                    "vae bench: against the untiled output: PSNR %.2f dB, relative error %.3g\n",
                    db, rel);
    }
    const long max_rss_kb = vae_plat_max_rss_kb();
    qsort(times, (size_t)runs, sizeof *times, cmp_double);
    double med = runs % 2 ? times[runs / 2] : 0.5 * (times[runs / 2 - 1] + times[runs / 2]);
    double peak = (double)vae_session_peak_bytes(s);
    int64_t dev_peaks[VAE_MAX_DEVICES];
    const int n_dev = vae_session_device_peaks(s, dev_peaks, VAE_MAX_DEVICES);
    char peaks_json[VAE_MAX_DEVICES * 24] = "";
    for (int d = 0, n = 0; d < n_dev; d++)
        n += snprintf(peaks_json + n, sizeof peaks_json - (size_t)n, "%s%lld", d ? "," : "",
                      (long long)dev_peaks[d]);
    static const char *const order[] = {"whole", "tiled", "blend"};
    /* JSON has no NaN or infinity: null when --psnr was not asked for (or the outputs are equal) */
    char psnr_json[64] = "null,\"rel_err\":null";
    if (!isnan(rel)) {
        char db_s[24] = "null";
        if (!isinf(db)) snprintf(db_s, sizeof db_s, "%.2f", db);
        snprintf(psnr_json, sizeof psnr_json, "%s,\"rel_err\":%.3g", db_s, rel);
    }
    char ranks_s[48] = "";
    if (ranks > 1)
        snprintf(ranks_s, sizeof ranks_s, ", %d ranks (rank 0's times and memory)", ranks);
    printf(
        "%s %s %dx%dx%d (%s%s, %s): median %.3f s (min %.3f, %d runs; first run %.3f s), "
        "%.1f TFLOP/s (%.1f TFLOP), peak memory %.2f GiB%s (predicted %.2f), %s %dx%d, %d frames "
        "out\n",
        info.arch, op, frames, H, W, device, ranks_s, dtype, med, times[0], runs, cold,
        flops / med / 1e12, flops / 1e12, peak / (1 << 30),
        n_dev > 1 ? " on the fullest device" : "", (double)plan.peak_bytes / (1 << 30),
        order[plan.order], plan.tiles_y, plan.tiles_x, out_frames);
    for (int d = 0; n_dev > 1 && d < n_dev; d++)
        printf("  device %d of %d: peak memory %.2f GiB\n", d, n_dev, (double)dev_peaks[d] / (1 << 30));
    printf("BENCH {\"arch\":\"%s\",\"op\":\"%s\",\"frames\":%d,\"height\":%d,\"width\":%d,"
           "\"device\":\"%s\",\"dtype\":\"%s\",\"median_s\":%.4f,\"min_s\":%.4f,\"runs\":%d,"
           "\"cold_s\":%.4f,"
           "\"tflop\":%.2f,\"tflops\":%.2f,\"peak_bytes\":%.0f,\"predicted_bytes\":%lld,"
           "\"budget_bytes\":%lld,\"order\":\"%s\",\"tiles\":\"%dx%d\",\"step_frames\":%d,"
           "\"plan_tflop\":%.2f,"
           "\"max_rss_kib\":%ld,\"input_kib\":%zu,\"psnr_db\":%s,\"devices\":%d,"
           "\"ranks\":%d,\"device_peak_bytes\":[%s]}\n",
           info.arch, op, frames, H, W, device, dtype, med, times[0], runs, cold, flops / 1e12,
           flops / med / 1e12, peak, (long long)plan.peak_bytes, (long long)plan.budget_bytes,
           order[plan.order], plan.tiles_y, plan.tiles_x, plan.step_frames, plan.flops / 1e12,
           max_rss_kb, n * sizeof(float) / 1024, psnr_json, n_dev, ranks, peaks_json);
    rc = CLI_OK;
done:
    free(in.data);
    free(times);
    free(k.keep);
    vae_session_free(s);
    vae_model_free(m);
    return rc;
}
