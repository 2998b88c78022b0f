/* cpu_conv_taps.c -- spatially stride-1 convs of many channels as one GEMM per spatial tap,
 * without im2col.
 *
 * In a frame padded by the conv's padding (width wp = pad_l + w + pad_r), output pixel (oh, ow)
 * sits at q = oh*wp + ow and reads spatial tap (dh, dw) at padded pixel q + dh*wp + dw. The input
 * of a band of output rows is copied once into a slab [padded row][wp][kt][c_in] (the kt input
 * frames interleaved per pixel), so that for each spatial tap the band's receptive fields form one
 * matrix [M][kt*c_in] with row stride kt*c_in at a fixed offset, M = (rows - 1)*wp + w_out (the
 * wp - w_out pixels between two rows are computed and dropped). The conv is then kh*kw GEMMs of
 * depth kt*c_in accumulated into the band (filters packed by prepare in the order
 * k = ((dh*kw + dw)*kt + dt)*c_in + ci), and the epilogue adds bias and residual while copying
 * the band's valid pixels into y.
 *
 * WHY: the im2col path writes kt*kh*kw copies of the input and reads them again, and OpenBLAS
 * packs the filters in every call; there, blocks of ~400 pixels split over the threads packed all
 * filters for every ~70-200 output pixels, ~20% of a decode. Here each thread runs whole bands
 * (one sgemm thread each, no barrier between bands: a core shared with another process delays one
 * band), of ~800-5000 pixels within half the scratch limit per thread.
 */
#include <omp.h>
#include <string.h>

#include "backends/cpu/cpu_internal.h"
#include "core/dtype.h"

int cpu_conv_taps_fits(const vae_op *op) {
    return op->sh == 1 && op->sw == 1 && op->kh * op->kw > 1 && op->kh * op->kw <= 64 &&
           op->c_in >= 16 && op->c_out >= 16;
}

typedef struct taps_plan {
    int wp, rows, bands; /* padded width, output rows per band, bands per output frame */
    size_t slab, band;   /* floats per thread: the band's padded input, its GEMM output */
} taps_plan;

/* Bands within budget bytes per thread (at least one row), as many as a multiple of the threads
 * where the frame has the rows, so that they share the work evenly. */
static taps_plan plan_bands(const vae_op *op, int h_out, int w_out, int nt, size_t budget) {
    taps_plan g;
    g.wp = w_out + op->kw - 1;
    const size_t in_row = (size_t)g.wp * op->kt * op->c_in, out_row = (size_t)g.wp * op->c_out;
    const size_t fixed = (size_t)(op->kh - 1) * in_row, floats = budget / sizeof(float);
    size_t rows = floats > fixed ? (floats - fixed) / (in_row + out_row) : 1;
    if (rows < 1) rows = 1;
    if (rows > (size_t)h_out) rows = (size_t)h_out;
    int bands = (int)(((size_t)h_out + rows - 1) / rows);
    if (h_out >= nt && bands % nt) bands += nt - bands % nt;
    if (bands > h_out) bands = h_out;
    g.rows = (h_out + bands - 1) / bands;
    g.bands = (h_out + g.rows - 1) / g.rows;
    g.slab = (size_t)(g.rows + op->kh - 1) * in_row + CPU_TAPS_ROW_PAD * (size_t)op->kt * op->c_in;
    g.band = ((size_t)g.rows * g.wp + CPU_TAPS_ROW_PAD) * op->c_out;
    return g;
}

/* Padded input rows [pr0, pr0 + n) of the kt frames fj, interleaved [row][wp][kt][c_in]; under
 * FP8 rounded onto the E4M3 grid of scale xs (zeros stay zero), as the im2col path rounds. */
static void fill_slab(const vae_op *op, const float *const *fj, int h, int w, int wp, int pr0,
                      int n, float xs, float *slab) {
    const int c = op->c_in, kt = op->kt, pl = op->pad_w[0];
    const size_t px = (size_t)kt * c, row = (size_t)wp * px;
    for (int r = 0; r < n; r++) {
        float *s = slab + (size_t)r * row;
        const int ih = pr0 + r - op->pad_h[0];
        if (ih < 0 || ih >= h) {
            memset(s, 0, row * sizeof *s);
            continue;
        }
        memset(s, 0, (size_t)pl * px * sizeof *s);
        memset(s + (size_t)(pl + w) * px, 0, (size_t)(wp - pl - w) * px * sizeof *s);
        for (int dt = 0; dt < kt; dt++) {
            const float *src = fj[dt] + (size_t)ih * w * c;
            float *dst = s + (size_t)pl * px + (size_t)dt * c;
            for (int x = 0; x < w; x++)
                memcpy(dst + (size_t)x * px, src + (size_t)x * c, (size_t)c * sizeof *dst);
        }
    }
    memset(slab + (size_t)n * row, 0, CPU_TAPS_ROW_PAD * px * sizeof *slab);
    if (xs > 0) {
        const float inv = vae_e4m3_inv(xs);
        const size_t total = (size_t)n * row;
        for (size_t i = 0; i < total; i++)
            slab[i] = vae_f32_round_e4m3(slab[i] * inv) * xs;
    }
}

/* Output rows [oh0, oh0 + rows) of one output frame: kh*kw GEMMs into band, then
 * y = band + bias (+ residual) over the valid pixels. */
static int run_band(const vae_op *op, const float *wp_filters, int panels, const taps_plan *g,
                    const float *slab, int rows, int w_out, int oh0, const float *res, float *y,
                    float *band) {
    const int c_out = op->c_out, depth = op->kt * op->c_in, m = (rows - 1) * g->wp + w_out;
    size_t offset[64]; /* kh*kw <= 64: cpu_conv_taps_fits */
    for (int t = 0; t < op->kh * op->kw; t++)
        offset[t] = ((size_t)(t / op->kw) * g->wp + t % op->kw) * depth;
    if (panels) cpu_taps_gemm(op->kh * op->kw, offset, m, c_out, depth, slab, wp_filters, band);
    for (int dh = 0; dh < op->kh && !panels; dh++)
        for (int dw = 0; dw < op->kw; dw++) {
            const int tap = dh * op->kw + dw;
            const float *a = slab + ((size_t)dh * g->wp + dw) * depth;
            const float *b = wp_filters + (size_t)tap * depth * c_out;
            int rc = cpu_sgemm(1, 0, m, c_out, depth, 1.0f, a, depth, b, c_out, tap ? 1.0f : 0.0f,
                               band, c_out);
            if (rc) return rc;
        }
    const float *bias = op->b;
    for (int r = 0; r < rows; r++)
        for (int ow = 0; ow < w_out; ow++) {
            const size_t o = ((size_t)(oh0 + r) * w_out + ow) * c_out;
            const float *src = band + ((size_t)r * g->wp + ow) * c_out;
            const float *rr = res ? res + o : NULL;
            float *dst = y + o;
            for (int co = 0; co < c_out; co++)
                dst[co] = src[co] + (bias ? bias[co] : 0.0f) + (rr ? rr[co] : 0.0f);
        }
    return VAE_OK;
}

int cpu_conv_taps(cpu_backend *cb, const vae_op *op, const float *wp_filters, int panels,
                  const float *const *frames, int h, int w, const float *res, float *y, int t_out,
                  int h_out, int w_out, float xs) {
    const int nt = cb->threads;
    /* the backend's scratch bound shared by the threads (a band needs one row at least) */
    const taps_plan g = plan_bands(op, h_out, w_out, nt, cb->scratch_limit / (size_t)nt);
    const size_t per_thread = (g.slab + g.band + 15) & ~(size_t)15; /* 64-byte aligned parts */
    float *scratch = cpu_scratch(cb, (size_t)nt * per_thread * sizeof(float), op->name);
    if (!scratch) return VAE_ENOMEM;
    const size_t frame_out = (size_t)h_out * w_out * op->c_out;
    const int items = t_out * g.bands;
    int failed = VAE_OK;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int it = 0; it < items; it++) {
        const int j = it / g.bands, oh0 = (it % g.bands) * g.rows;
        const int rows = h_out - oh0 < g.rows ? h_out - oh0 : g.rows;
        float *slab = scratch + (size_t)omp_get_thread_num() * per_thread, *band = slab + g.slab;
        fill_slab(op, frames + (size_t)j * op->st, h, w, g.wp, oh0, rows + op->kh - 1, xs, slab);
        int rc = run_band(op, wp_filters, panels, &g, slab, rows, w_out, oh0,
                          res ? res + j * frame_out : NULL, y + j * frame_out, band);
        if (rc) {
#pragma omp atomic write
            failed = rc;
        }
    }
    /* a worker's own error message stays on its thread: name the op here */
    if (failed)
        return vae_fail(failed, "%s: the conv's GEMM failed (out of memory for its packing)",
                        op->name);
    return VAE_OK;
}
