/* fp8_shapes.c -- the E4M3 kernels' conv shapes (fp8_shapes.h: what each row means, who reads
 * them). */
#include "fp8_shapes.h"

#include <stddef.h>

/* In the order a backend tries its kernels: CUTLASS's GEMM before the halo-tile kernel (faster
 * where both take a conv: 192 -> 96 at 480x832, 5.58 ms a 16-frame step against 6.36 on the
 * H200). The mma.sync row is its kernel's own limits for E4M3 operands: a K-block row of two
 * 16-byte chunks (32 channels), filters in groups of 8, padding below the taps (checked by the
 * kernel, cuda_mma_conv.cu). */
static const vae_fp8_shape builtin[] = {
    {.kernel = VAE_FP8_GEMM, .rule = 1, .plain = 1, .min_kt = 2, .pad = -1, .c_in_multiple = 64,
     .c_out_multiple = {96, 128}},
    {.kernel = VAE_FP8_HALO, .rule = 1, .plain = 1, .min_kt = 2, .taps = 3, .pad = 1,
     .c_in_multiple = 96, .c_out = 96},
    {.kernel = VAE_FP8_MMA, .rule = 0, .plain = 1, .min_kt = 1, .pad = -1, .c_in_multiple = 32,
     .c_out_multiple = {8, 0}},
};

static const vae_fp8_shape *table = builtin;
static int table_rows = (int)(sizeof builtin / sizeof *builtin);

static int multiple(int v, int of) {
    return of > 0 && v % of == 0;
}

int vae_fp8_shape_takes(const vae_fp8_shape *row, const vae_fp8_conv *c) {
    if (c->c_in < 1 || c->c_out < 1 || (row->plain && !c->plain) || c->kt < row->min_kt)
        return 0;
    if (row->taps && (c->kh != row->taps || c->kw != row->taps)) return 0;
    if (row->pad >= 0 && (c->ph != row->pad || c->pw != row->pad)) return 0;
    if (row->c_in_multiple && !multiple(c->c_in, row->c_in_multiple)) return 0;
    if (row->c_out && c->c_out != row->c_out) return 0;
    const int *m = row->c_out_multiple;
    return (!m[0] && !m[1]) || multiple(c->c_out, m[0]) || multiple(c->c_out, m[1]);
}

vae_fp8_kernel vae_fp8_shapes_rule(const vae_fp8_conv *c) {
    for (int i = 0; i < table_rows; i++)
        if (table[i].rule && vae_fp8_shape_takes(&table[i], c)) return table[i].kernel;
    return VAE_FP8_NONE;
}

int vae_fp8_kernel_takes(vae_fp8_kernel k, const vae_fp8_conv *c) {
    for (int i = 0; i < table_rows; i++)
        if (table[i].kernel == k) return vae_fp8_shape_takes(&table[i], c);
    return 0;
}

void vae_fp8_shapes_swap(const vae_fp8_shape *rows, int n) {
    table = rows ? rows : builtin;
    table_rows = rows ? n : (int)(sizeof builtin / sizeof *builtin);
}

const vae_fp8_shape *vae_fp8_shapes(int *n) {
    *n = table_rows;
    return table;
}
