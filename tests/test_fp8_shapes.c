/* test_fp8_shapes.c -- the E4M3 kernel-shape table (core/fp8_shapes.h) as the one place the rule
 * lives: with the table swapped (the halo-tile kernel's row dropped, the implicit GEMM's c_in
 * multiple raised to 128) core's rule (op.h vae_op_fp8_rule) and a CPU session's E4M3 convs (the
 * emulation's dispatch: session.c fp8_runs, program.h vae_program_pick_fp8, then the op's mark
 * alone) follow; the built-in table gives the rule as it was. The CUDA backend's half (its
 * dispatch and its kernels' E4M3 takes): test_cuda_ops.c test_fp8_table, where a GPU is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "core/fp8_shapes.h"
#include "core/op.h"
#include "platform/platform.h"
#include "test_check.h"
#include "vae.h"
#include "vae_dev.h"

enum { T_BUILTIN, T_NO_HALO, T_GEMM_128, T_N };
static const char *const table_name[T_N] = {"built-in", "no halo-tile row", "GEMM c_in % 128"};
static vae_fp8_shape mutated[T_N][8];
static int mutated_rows[T_N];

/* The mutations, made from the built-in rows (whatever they hold beside the rows changed) */
static void make_tables(void) {
    int n = 0;
    const vae_fp8_shape *rows = vae_fp8_shapes(&n);
    for (int i = 0; i < n && i < 8; i++) {
        if (rows[i].kernel != VAE_FP8_HALO) mutated[T_NO_HALO][mutated_rows[T_NO_HALO]++] = rows[i];
        vae_fp8_shape r = rows[i];
        if (r.kernel == VAE_FP8_GEMM) r.c_in_multiple = 128;
        mutated[T_GEMM_128][mutated_rows[T_GEMM_128]++] = r;
    }
}

static void use_table(int t) {
    vae_fp8_shapes_swap(t == T_BUILTIN ? NULL : mutated[t], mutated_rows[t]);
}

/* A 3 x 3 x 3 conv with padding 1 (kt taps in time) */
static vae_op conv(int c_in, int c_out, int kt) {
    vae_op op = vae_op_make(VAE_OP_CONV, 0, c_in, c_out);
    op.kt = kt, op.kh = op.kw = 3;
    op.pad_h[0] = op.pad_h[1] = op.pad_w[0] = op.pad_w[1] = 1;
    return op;
}

/* Core's rule under each table: which row takes the conv */
static void test_core_rule(void) {
    static const struct {
        int c_in, c_out, kt;
        vae_fp8_kernel want[T_N];
    } cases[] = {
        {128, 128, 3, {VAE_FP8_GEMM, VAE_FP8_GEMM, VAE_FP8_GEMM}},
        {192, 192, 3, {VAE_FP8_GEMM, VAE_FP8_GEMM, VAE_FP8_NONE}},
        {192, 96, 3, {VAE_FP8_GEMM, VAE_FP8_GEMM, VAE_FP8_HALO}},
        {96, 96, 3, {VAE_FP8_HALO, VAE_FP8_NONE, VAE_FP8_HALO}},
        {96, 192, 3, {VAE_FP8_NONE, VAE_FP8_NONE, VAE_FP8_NONE}},
        {128, 128, 1, {VAE_FP8_NONE, VAE_FP8_NONE, VAE_FP8_NONE}},
    };
    for (int t = 0; t < T_N; t++) {
        use_table(t);
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            const vae_op op = conv(cases[i].c_in, cases[i].c_out, cases[i].kt);
            const vae_fp8_kernel got = vae_op_fp8_rule(&op);
            check(got == cases[i].want[t] && vae_op_fp8_kernel(&op) == (got != VAE_FP8_NONE),
                  "core rule, %s table: %d -> %d kt %d: kernel %d, expected %d", table_name[t],
                  cases[i].c_in, cases[i].c_out, cases[i].kt, (int)got, (int)cases[i].want[t]);
        }
    }
    use_table(T_BUILTIN);
}

/* The session's E4M3 convs of a program: the 192 -> 192 ones (the GEMM's row), the 96 -> 96 ones
 * (the halo-tile kernel's), all of them; each with the emulation's kernel */
static void count_marks(const vae_program *p, int *gemm, int *halo, int *all, int *bad_kernel) {
    *gemm = *halo = *all = *bad_kernel = 0;
    for (int i = 0; i < p->n_ops; i++) {
        const vae_op *op = &p->ops[i];
        if (!vae_op_fp8(op)) continue;
        *all += 1;
        *gemm += op->c_in == 192 && op->c_out == 192 && op->kt == 3;
        *halo += op->c_in == 96 && op->c_out == 96 && op->kt == 3 && op->kh == 3;
        *bad_kernel += op->fp8_kernel != VAE_FP8_EMULATED;
    }
}

/* A CPU session's E4M3 convs on a synthetic Wan2.1 of both rows' shapes (96 and 192 channels)
 * under each table, every conv the rule keeps (VAE_FP8_CONVS all); with VAE_FP8_SHAPES=wide the
 * table does not matter (the emulation takes every marked conv). */
static void test_cpu_session(void) {
    static const char cfg[] = "{\"dim\": 96, \"z_dim\": 4, \"dim_mult\": [1, 2], "
                               "\"num_res_blocks\": 1, \"attn_scales\": [], "
                               "\"temperal_downsample\": [true], \"dropout\": 0.0}";
    /* [decoder, encoder][table]: {192 -> 192, 96 -> 96} convs in E4M3 */
    static const int want[2][T_N][2] = {{{8, 4}, {8, 0}, {0, 4}}, {{5, 2}, {5, 0}, {0, 2}}};
    static const int want_wide[2] = {14, 10}; /* every marked conv: + attention's, 96 -> 192 */
    char path[512];
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(path, sizeof path, "%s/vae_test_fp8_shapes_%ld.safetensors", tmp, vae_plat_pid());
    vae_model *m = NULL;
    int rc = vae_synth_checkpoint("wan2.1", cfg, path);
    if (rc == VAE_OK) rc = vae_model_open(&m, path, NULL);
    check(rc == VAE_OK, "synthetic Wan2.1 (96, 192 channels): %s", rc ? vae_last_error() : "ok");
    remove(path);
    if (rc) return;
    for (int t = 0; t <= T_N; t++) {
        const int wide = t == T_N, table = wide ? T_NO_HALO : t;
        use_table(table);
        vae_session_options o;
        vae_session_options_default(&o);
        o.device = VAE_DEVICE_CPU, o.dtype = VAE_DTYPE_FP8, o.threads = 1;
        vae_session_options_set(&o, VAE_PARAM_FP8_CONVS, 0); /* all */
        vae_session_options_set(&o, VAE_PARAM_FP8_SHAPES, wide);
        vae_session *s = NULL;
        rc = vae_session_create(&s, m, &o);
        check(rc == VAE_OK, "CPU fp8 session: %s", rc ? vae_last_error() : "ok");
        for (int d = 0; rc == VAE_OK && d < 2; d++) {
            int gemm, halo, all, bad;
            count_marks(vae_session_program(s, d), &gemm, &halo, &all, &bad);
            const int ok = wide ? all == want_wide[d]
                                : gemm == want[d][t][0] && halo == want[d][t][1] &&
                                      all == gemm + halo;
            check(ok && bad == 0,
                  "CPU session, %s table%s, %s: %d E4M3 convs (%d 192 -> 192, %d 96 -> 96; %d not "
                  "the emulation's kernel), expected %d (%d, %d)",
                  table_name[table], wide ? ", VAE_FP8_SHAPES=wide" : "",
                  d ? "encoder" : "decoder", all, gemm, halo, bad,
                  wide ? want_wide[d] : want[d][t][0] + want[d][t][1], wide ? -1 : want[d][t][0],
                  wide ? -1 : want[d][t][1]);
        }
        vae_session_free(s);
    }
    use_table(T_BUILTIN);
    vae_model_free(m);
}

int main(void) {
    make_tables();
    check(mutated_rows[T_NO_HALO] + 1 == mutated_rows[T_GEMM_128],
          "the built-in table has one halo-tile row (%d rows without it, %d in all)",
          mutated_rows[T_NO_HALO], mutated_rows[T_GEMM_128]);
    test_core_rule();
    test_cpu_session();
    printf("%d passed, %d failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
