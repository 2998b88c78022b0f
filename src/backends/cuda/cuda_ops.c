/* cuda_ops.c -- NORM, ELTWISE, RESAMPLE and ATTENTION on the GPU: argument checks (the same as
 * the CPU reference's), per-op parameters prepared once, kernel launches.
 *
 * Attention is one fused kernel (cuda_attention.cu) reading Q, K and V as strided views of the
 * qkv buffer (row stride 3c): no copies, no score matrix in device memory.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backends/cuda/cuda_internal.h"

typedef struct ops_state {
    float *w, *b; /* float32 per-channel parameters (norm gamma/beta, scale/shift) */
    size_t w_bytes, b_bytes;
} ops_state;

static int act_valid(vae_act a) {
    return a == VAE_ACT_NONE || a == VAE_ACT_SILU || a == VAE_ACT_RELU || a == VAE_ACT_TANH_SCALE;
}

/* ---- shuffle tables (built by core/program.c) ---- */
/* shuffle-up: the largest a in {1,2,4,8} such that each sub-position's channel map is a run
 * base, base+1, ... with base % a == 0; 0 when some map is not a run */
static int shuffle_up_contig(const int *tab, int subs, int co) {
    int a = 8;
    for (int s = 0; s < subs; s++) {
        const int *t = tab + (size_t)s * co;
        for (int o = 1; o < co; o++)
            if (t[o] != t[0] + o) return 0;
        while (a > 1 && t[0] % a) a >>= 1;
    }
    return a;
}

/* The device table of a shuffle op, made (checked, uploaded) on first use and shared by every
 * op with the same shuffle parameters. (resample() receives no per-op state.) */
static int shuffle_table_ex(cuda_backend *cb, const vae_op *op, const int **out, int *contig);
static int shuffle_table(cuda_backend *cb, const vae_op *op, const int **out) {
    return shuffle_table_ex(cb, op, out, NULL);
}

static int shuffle_table_ex(cuda_backend *cb, const vae_op *op, const int **out, int *contig) {
    int key[10] = {(int)op->kind, op->c_in, op->c_out, op->ft, op->fs,
                   op->cs_o, op->cs_t, op->cs_h, op->cs_w, op->group};
    for (int i = 0; i < cb->n_tables; i++)
        if (memcmp(cb->tables[i].key, key, sizeof key) == 0) {
            *out = cb->tables[i].dev;
            if (contig) *contig = cb->tables[i].contig_align;
            return VAE_OK;
        }
    if (cb->n_tables == cb->cap_tables) {
        int cap = cb->cap_tables ? cb->cap_tables * 2 : 8;
        cu_table *t = vae_realloc(cb->tables, (size_t)cap * sizeof *t);
        if (!t) return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
        cb->tables = t;
        cb->cap_tables = cap;
    }
    if (op->kind == VAE_OP_SHUFFLE_DOWN && op->ft > CUK_MAX_FRAMES)
        return vae_fail(VAE_EINVAL, "%s: shuffle-down over %d frames (at most %d)", op->name,
                        op->ft, CUK_MAX_FRAMES);
    int *tab = NULL;
    size_t n = 0;
    int rc = op->kind == VAE_OP_SHUFFLE_UP ? vae_shuffle_up_table(op, &tab, &n)
                                           : vae_shuffle_down_table(op, &tab, &n);
    if (rc) return rc;
    int ca = op->kind == VAE_OP_SHUFFLE_UP ? shuffle_up_contig(tab, op->ft * op->fs * op->fs, op->c_out)
                                           : 0;
    int *dev = NULL;
    cudaError_t e = cu_dev_malloc(&cb->pool, (void **)&dev, n * sizeof(int));
    rc = e == cudaSuccess ? cu_upload_host(cb, dev, tab, n * sizeof(int), op->name)
                          : cu_check(e, op->name, "allocating the shuffle table");
    vae_free(tab);
    if (rc) {
        if (dev) cu_dev_free(&cb->pool, dev, n * sizeof(int));
        return rc;
    }
    cu_table *t = &cb->tables[cb->n_tables++];
    memcpy(t->key, key, sizeof key);
    t->dev = dev;
    t->bytes = n * sizeof(int);
    t->contig_align = ca;
    cb->weight_bytes += (int64_t)t->bytes;
    *out = dev;
    if (contig) *contig = ca;
    return VAE_OK;
}

void cuda_ops_destroy(cuda_backend *cb) {
    for (int i = 0; i < cb->n_tables; i++)
        cu_dev_free(&cb->pool, cb->tables[i].dev, cb->tables[i].bytes);
    vae_free(cb->tables);
    cb->tables = NULL;
    cb->n_tables = cb->cap_tables = 0;
}

/* ---- prepare ---- */
/* the norms' and scale-shifts' float32 parameters (cuda_ops_prepare uploads them) */
static int ops_has_params(const vae_op *op) {
    const int kind = op->kind == VAE_OP_RMS_NORM || op->kind == VAE_OP_GROUP_NORM ||
                     op->kind == VAE_OP_SCALE_SHIFT;
    return kind && op->c_in >= 1 && (op->w || op->b);
}

int cuda_ops_prepare(vae_backend *be, const vae_op *op, void **state) {
    cuda_backend *cb = cu_be(be);
    *state = NULL;
    if (op->kind == VAE_OP_SHUFFLE_UP || op->kind == VAE_OP_SHUFFLE_DOWN) {
        const int *tab; /* made now: errors surface at session start, no upload mid-stream */
        return shuffle_table(cb, op, &tab);
    }
    if (!ops_has_params(op)) return VAE_OK;
    ops_state *s = vae_calloc(1, sizeof *s);
    if (!s) return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
    int rc = cu_upload_param(cb, op->w, (size_t)op->c_in, 1, (void **)&s->w, op->name);
    if (s->w) s->w_bytes = (size_t)op->c_in * sizeof(float);
    if (rc == VAE_OK) rc = cu_upload_param(cb, op->b, (size_t)op->c_in, 1, (void **)&s->b, op->name);
    if (s->b) s->b_bytes = (size_t)op->c_in * sizeof(float);
    if (rc) {
        cuda_ops_unprepare(be, op, s);
        return rc;
    }
    *state = s;
    return VAE_OK;
}

void cuda_ops_unprepare(vae_backend *be, const vae_op *op, void *state) {
    ops_state *s = state;
    if (!s) return;
    cuda_backend *cb = cu_be(be);
    cudaStreamSynchronize(cb->stream);
    cu_free_param(cb, s->w, s->w_bytes);
    cu_free_param(cb, s->b, s->b_bytes);
    vae_free(s);
}

static int need_params(const vae_op *op, const ops_state *s) {
    if ((op->w || op->b) && !s) return vae_fail(VAE_EINVAL, "%s: op was not prepared", op->name);
    return VAE_OK;
}

/* ---- norm ---- */
static int norm_check(const vae_op *op, const void *x, const void *y, int t, int h, int w) {
    if (op->kind != VAE_OP_RMS_NORM && op->kind != VAE_OP_GROUP_NORM)
        return vae_fail(VAE_EINVAL, "%s: op kind %d is not a norm", op->name, (int)op->kind);
    if (op->c_in < 1 || (op->c_out != op->c_in && op->c_out != 0))
        return vae_fail(VAE_EINVAL, "%s: norm over %d channels cannot give %d", op->name, op->c_in,
                        op->c_out);
    if (!act_valid(op->act))
        return vae_fail(VAE_EINVAL, "%s: unknown activation %d", op->name, (int)op->act);
    if (t < 0 || h < 0 || w < 0 || ((!x || !y) && t * (int64_t)h * w > 0))
        return vae_fail(VAE_ESHAPE, "%s: norm input %dx%dx%d", op->name, t, h, w);
    if (op->kind == VAE_OP_GROUP_NORM && (op->groups < 1 || op->c_in % op->groups))
        return vae_fail(VAE_EINVAL, "%s: %d channels cannot form %d groups", op->name, op->c_in,
                        op->groups);
    return VAE_OK;
}

int cuda_norm(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t, int h,
              int w) {
    cuda_backend *cb = cu_be(be);
    const ops_state *s = state;
    int rc = norm_check(op, x, y, t, h, w);
    if (rc) return rc;
    int64_t hw = (int64_t)h * w;
    if (t == 0 || hw == 0) return VAE_OK;
    rc = need_params(op, s);
    if (rc || (rc = cu_enter(cb, op->name))) return rc;
    cu_prof_name(cb, op->name);
    const float *g = s ? s->w : NULL, *b = s ? s->b : NULL;
    if (op->kind == VAE_OP_RMS_NORM) {
        int ph = cu_prof_begin(cb, CU_P_RMS);
        rc = cu_check(cuk_rms_norm(cb->stream, be->dtype, x, y, t * hw, op->c_in, g, b,
                                   (int)op->act, op->act_scale, cu_codes_scale(op)),
                      op->name, "rms norm");
        cu_prof_end(cb, ph);
        return rc;
    }
    if ((size_t)op->c_in * sizeof(float) > 48 * 1024)
        return vae_fail(VAE_EUNSUPPORTED, "%s: group norm over %d channels", op->name, op->c_in);
    void *work = cu_scratch(
        cb, cuk_group_norm_work(be->dtype, t, hw, op->c_in, op->groups, cb->sm_count), op->name);
    if (!work) return VAE_ENOMEM;
    int ph = cu_prof_begin(cb, CU_P_GN);
    rc = cu_check(cuk_group_norm(cb->stream, be->dtype, x, y, t, hw, op->c_in, op->groups, op->eps,
                                 g, b, (int)op->act, op->act_scale, work, cb->sm_count),
                  op->name, "group norm");
    cu_prof_end(cb, ph);
    return rc;
}

int cuda_norm_rows(vae_backend *be, const vae_op *op, void *state, const void *x, size_t x_pitch,
                   void *y, size_t y_pitch, int64_t rows, int w) {
    cuda_backend *cb = cu_be(be);
    const ops_state *s = state;
    const size_t es = be->elem_size, row = (size_t)w * (size_t)op->c_in * es;
    if (op->kind != VAE_OP_RMS_NORM)
        return vae_fail(VAE_EINVAL, "%s: rows of an RMS norm, not op kind %d", op->name,
                        (int)op->kind);
    int rc = norm_check(op, x, y, rows > 0, 1, w);
    if (rc == VAE_OK &&
        (rows < 0 || x_pitch < row || y_pitch < row || x_pitch % es || y_pitch % es))
        rc = vae_fail(VAE_ESHAPE, "%s: norm rows %lld x %d, pitches %zu and %zu bytes", op->name,
                      (long long)rows, w, x_pitch, y_pitch);
    if (rc || rows == 0 || w == 0) return rc;
    if ((rc = need_params(op, s)) || (rc = cu_enter(cb, op->name))) return rc;
    cu_prof_name(cb, op->name);
    int ph = cu_prof_begin(cb, CU_P_RMS);
    rc = cu_check(cuk_rms_norm_rows(cb->stream, be->dtype, x, (int64_t)(x_pitch / es), y,
                                    (int64_t)(y_pitch / es), rows, w, op->c_in, s ? s->w : NULL,
                                    s ? s->b : NULL, (int)op->act, op->act_scale,
                                    cu_codes_scale(op)),
                  op->name, "rms norm rows");
    cu_prof_end(cb, ph);
    return rc;
}

/* A group norm of a band: the checks of both halves (split_ok: the Welford kernels) */
static int split_check(cuda_backend *cb, const vae_op *op, const void *x, const void *y, int t,
                       int h, int w) {
    int rc = norm_check(op, x, y ? y : x, t, h, w);
    if (rc == VAE_OK && op->kind != VAE_OP_GROUP_NORM)
        rc = vae_fail(VAE_EINVAL, "%s: only a group norm splits into bands", op->name);
    if (rc == VAE_OK && t > 0 && !cuk_group_norm_split_ok(cb->base.dtype, op->c_in, x, y ? y : x))
        rc = vae_fail(VAE_EUNSUPPORTED, "%s: a group norm over %d channels in bands", op->name,
                      op->c_in);
    return rc ? rc : cu_enter(cb, op->name);
}

int cuda_norm_stats(vae_backend *be, const vae_op *op, const void *x, int t, int h, int w, int y0,
                    int rows, double *st, int dev) {
    cuda_backend *cb = cu_be(be);
    int rc = split_check(cb, op, x, NULL, t, h, w);
    if (rc) return rc;
    if (y0 < 0 || rows < 0 || y0 + rows > h)
        return vae_fail(VAE_EINVAL, "%s: rows %d..%d of a frame of %d", op->name, y0, y0 + rows, h);
    const size_t n = (size_t)t * op->groups * 3, bytes = n * sizeof *st;
    if (t == 0) return VAE_OK;
    if (rows == 0 || w == 0) /* a band without rows here: it adds nothing */
        return dev ? cu_check(cudaMemsetAsync(st, 0, bytes, cb->stream), op->name, "zero sums")
                   : (memset(st, 0, bytes), VAE_OK);
    const int64_t np = (int64_t)rows * w;
    const size_t wb =
        cuk_group_norm_sums_work(be->dtype, t, np, op->c_in, op->groups, cb->sm_count);
    char *work = cu_scratch(cb, (wb + 255) / 256 * 256 + (dev ? 0 : bytes), op->name);
    if (!work) return VAE_ENOMEM;
    double *sums = dev ? st : (double *)(work + (wb + 255) / 256 * 256);
    const void *x0 = (const char *)x + (size_t)y0 * w * op->c_in * be->elem_size;
    cu_prof_name(cb, op->name);
    const int ph = cu_prof_begin(cb, CU_P_GN);
    rc = cu_check(cuk_group_norm_sums(cb->stream, be->dtype, x0, t, (int64_t)h * w, np, op->c_in,
                                      op->groups, work, cb->sm_count, sums),
                  op->name, "group norm sums");
    cu_prof_end(cb, ph);
    if (rc || dev) return rc;
    rc = cu_check(cudaMemcpyAsync(st, sums, bytes, cudaMemcpyDeviceToHost, cb->stream), op->name,
                  "group norm sums to the host");
    return rc ? rc : cu_check(cudaStreamSynchronize(cb->stream), op->name, "group norm sums");
}

int cuda_norm_apply(vae_backend *be, const vae_op *op, void *state, const void *x, void *y, int t,
                    int h, int w, const double *st, int dev) {
    cuda_backend *cb = cu_be(be);
    const ops_state *s = state;
    int rc = split_check(cb, op, x, y, t, h, w);
    if (rc || (rc = need_params(op, s))) return rc;
    if (t == 0 || (int64_t)h * w == 0) return VAE_OK;
    const size_t n = (size_t)t * op->groups, bytes = 3 * n * sizeof *st;
    const size_t wb = (n * 2 * sizeof(float) + 255) / 256 * 256;
    char *work = cu_scratch(cb, wb + (dev ? 0 : bytes), op->name);
    if (!work) return VAE_ENOMEM;
    const double *sums = st;
    if (!dev) { /* from pageable memory: the call returns once st is staged */
        sums = (const double *)(work + wb);
        rc = cu_check(cudaMemcpyAsync(work + wb, st, bytes, cudaMemcpyHostToDevice, cb->stream),
                      op->name, "group norm sums to the device");
    }
    if (rc) return rc;
    cu_prof_name(cb, op->name);
    const int ph = cu_prof_begin(cb, CU_P_GN);
    rc = cu_check(cuk_group_norm_apply(cb->stream, be->dtype, x, y, t, (int64_t)h * w, op->c_in,
                                       op->groups, sums, op->eps, s ? s->w : NULL, s ? s->b : NULL,
                                       (int)op->act, op->act_scale, work, cb->sm_count),
                  op->name, "group norm apply");
    cu_prof_end(cb, ph);
    return rc;
}

/* ---- eltwise ---- */
int cuda_eltwise(vae_backend *be, const vae_op *op, void *state, const void *a, const void *b2,
                 void *y, int64_t n_vox) {
    cuda_backend *cb = cu_be(be);
    const ops_state *s = state;
    const int c = op->c_in;
    if (op->kind != VAE_OP_ACT && op->kind != VAE_OP_ADD && op->kind != VAE_OP_SCALE_SHIFT)
        return vae_fail(VAE_EINVAL, "%s: op kind %d is not elementwise", op->name, (int)op->kind);
    if (c < 1 || n_vox < 0)
        return vae_fail(VAE_ESHAPE, "%s: elementwise op on %lld voxels of %d channels", op->name,
                        (long long)n_vox, c);
    if (!act_valid(op->act))
        return vae_fail(VAE_EINVAL, "%s: unknown activation %d", op->name, (int)op->act);
    if (n_vox == 0) return VAE_OK;
    if (!a || !y || (op->kind == VAE_OP_ADD && !b2))
        return vae_fail(VAE_EINVAL, "%s: missing elementwise operand", op->name);
    int kind = op->kind == VAE_OP_ACT ? 0 : op->kind == VAE_OP_ADD ? 1 : 2;
    int rc = kind == 2 ? need_params(op, s) : VAE_OK;
    if (rc || (rc = cu_enter(cb, op->name))) return rc;
    int ph = cu_prof_begin(cb, CU_P_ELT);
    rc = cu_check(cuk_eltwise(cb->stream, be->dtype, kind, (int)op->act, op->act_scale, a, b2,
                              kind == 2 && s ? s->w : NULL, kind == 2 && s ? s->b : NULL, y, n_vox,
                              c),
                  op->name, "elementwise");
    cu_prof_end(cb, ph);
    return rc;
}

/* ---- resample ---- (SHUFFLE_DOWN crops h, w to multiples of fs, like the CPU reference) */
static int resample_run(vae_backend *be, const vae_op *op, const void *const *frames, int n_in,
                        int h, int w, void *y, int t_out);

int cuda_resample(vae_backend *be, const vae_op *op, const void *const *frames, int n_in, int h,
                  int w, void *y, int t_out) {
    cuda_backend *cb = cu_be(be);
    cu_prof_name(cb, op->name);
    int ph = cu_prof_begin(cb, CU_P_RESAMPLE);
    int rc = resample_run(be, op, frames, n_in, h, w, y, t_out);
    cu_prof_end(cb, ph);
    return rc;
}

static int resample_run(vae_backend *be, const vae_op *op, const void *const *frames, int n_in,
                        int h, int w, void *y, int t_out) {
    cuda_backend *cb = cu_be(be);
    if (n_in < 0 || h < 0 || w < 0 || t_out < 0)
        return vae_fail(VAE_ESHAPE, "%s: resample of %d frames %dx%d", op->name, n_in, h, w);
    if (n_in > 0 && (!frames || !frames[0] || !y))
        return vae_fail(VAE_EINVAL, "%s: resample without input or output", op->name);
    if (n_in == 0 && t_out == 0) return VAE_OK;
    int rc = cu_enter(cb, op->name);
    if (rc) return rc;
    const size_t es = be->elem_size;
    const int ft = op->ft, fs = op->fs, ci = op->c_in, co = op->c_out, group = op->group;
    const int *tab = NULL;
    switch (op->kind) {
    case VAE_OP_UPSAMPLE:
        if (fs < 1 || (co != ci && co != 0) || t_out != n_in)
            return vae_fail(VAE_ESHAPE,
                            "%s: upsample x%d of %d frames (%d->%d ch) cannot give %d frames",
                            op->name, fs, n_in, ci, co, t_out);
        return cu_check(cuk_upsample(cb->stream, es, frames[0], y, n_in, h, w, ci, fs), op->name,
                        "upsample");
    case VAE_OP_SHUFFLE_UP:
        if (ft < 1 || fs < 1 || group < 1 || ci < 1 || co < 1 || t_out != n_in * ft)
            return vae_fail(VAE_ESHAPE,
                            "%s: shuffle-up (ft %d, fs %d, group %d, %d->%d ch) of %d frames "
                            "cannot give %d frames",
                            op->name, ft, fs, group, ci, co, n_in, t_out);
        int contig = 0;
        if ((rc = shuffle_table_ex(cb, op, &tab, &contig))) return rc;
        return cu_check(cuk_shuffle_up(cb->stream, es, frames[0], y, n_in, h, w, ci, co, ft, fs, tab,
                                       contig),
                        op->name, "shuffle up");
    case VAE_OP_SHUFFLE_DOWN: {
        if (ft < 1 || fs < 1 || group < 1 || ci < 1 || co < 1 || n_in != ft * t_out ||
            (int64_t)ci * ft * fs * fs != (int64_t)co * group)
            return vae_fail(VAE_ESHAPE,
                            "%s: shuffle-down (ft %d, fs %d, group %d, %d->%d ch) of %d frames "
                            "cannot give %d frames",
                            op->name, ft, fs, group, ci, co, n_in, t_out);
        for (int i = 0; i < n_in; i++)
            if (!frames[i]) return vae_fail(VAE_EINVAL, "%s: input frame %d is NULL", op->name, i);
        if ((rc = shuffle_table(cb, op, &tab))) return rc;
        const int tb_max = CUK_MAX_FRAMES / ft;
        const size_t yfb = (size_t)(h / fs) * (w / fs) * co * es;
        for (int j0 = 0; j0 < t_out; j0 += tb_max) {
            int tb = t_out - j0 < tb_max ? t_out - j0 : tb_max;
            cuk_frames f;
            memset(&f, 0, sizeof f);
            for (int i = 0; i < tb * ft; i++) f.p[i] = frames[(size_t)j0 * ft + i];
            rc = cu_check(cuk_shuffle_down(cb->stream, be->dtype, &f, tb, h, w, ci, co, ft, fs,
                                           group, tab, (char *)y + (size_t)j0 * yfb),
                          op->name, "shuffle down");
            if (rc) return rc;
        }
        return VAE_OK;
    }
    default:
        return vae_fail(VAE_EINVAL, "%s: op kind %d is not a resample", op->name, (int)op->kind);
    }
}

/* ---- attention ---- */
/* The GEMM path: per frame and block of query rows, S = scale q k^T on cuBLAS (float32 scores
 * in scratch), P = softmax(S) in the activation dtype (cuk_softmax_rows), y = P v on cuBLAS.
 * The fused kernel (cuk_attention) keeps its mma.sync tiles near 100 TFLOP/s; this path costs 6
 * bytes of scratch (bf16) per score of a block and took a Wan2.1 720p decode's latent part from
 * 121 to 88 ms (bench/RESULTS.md run 116: 14400 tokens x 384 channels, 1.85 ms a frame). It
 * applies to 16-bit, c % 8 == 0 and >= ATT_GEMM_MIN_TOKENS tokens (smaller frames keep the one
 * fused launch instead of three per block; not timed). */
enum { ATT_GEMM_MIN_TOKENS = 1024, ATT_GEMM_ROWS_ALIGN = 64 };
#define ATT_GEMM_SCRATCH ((size_t)128 << 20) /* the blocks' target; the scratch limit caps it */

/* scratch of `rows` query rows of n keys: float32 scores and P in the activation dtype */
static size_t att_gemm_bytes(const cuda_backend *cb, int rows, int n) {
    return (size_t)rows * n * (sizeof(float) + cb->base.elem_size);
}

/* query rows per block of the GEMM path within `bytes` of scratch (0: the path does not apply) */
static int att_gemm_rows(const cuda_backend *cb, const vae_op *op, int n, size_t bytes) {
    if (!cb->att_gemm || cb->base.dtype == VAE_DTYPE_F32 || n < ATT_GEMM_MIN_TOKENS ||
        op->c_out % 8)
        return 0;
    const size_t rows =
        bytes / att_gemm_bytes(cb, 1, n) / ATT_GEMM_ROWS_ALIGN * ATT_GEMM_ROWS_ALIGN;
    return rows > (size_t)n ? n : (int)rows;
}

/* the scratch the GEMM path's blocks aim at */
static size_t att_gemm_target(const cuda_backend *cb) {
    return cb->scratch_limit < ATT_GEMM_SCRATCH ? cb->scratch_limit : ATT_GEMM_SCRATCH;
}

/* the GEMM path's block: what the scratch allows now (a capped run's area, or room under the
 * budget to grow it; 0: the fused kernel instead, without touching the budget) */
static int att_gemm_block(cuda_backend *cb, const vae_op *op, int n) {
    int rows =
        att_gemm_rows(cb, op, n, cb->scratch_capped ? cb->scratch_bytes : att_gemm_target(cb));
    const size_t need = att_gemm_bytes(cb, rows, n);
    if (rows > 0 && need > cb->scratch_bytes && cb->base.limit > 0 &&
        cu_held(cb) + (int64_t)(need - cb->scratch_bytes) > cb->base.limit)
        rows = att_gemm_rows(cb, op, n, cb->scratch_bytes);
    return rows;
}

/* One block of mb query rows q (rows 3c apart, as k and v) against n keys: the scores sc
 * [mb][n] (float32), P [mb][n] (activation dtype), y [mb][c]. */
static int att_gemm_pair(cuda_backend *cb, const char *who, const char *q, const char *k,
                         const char *v, float *sc, void *p, char *y, int n, int mb, int c,
                         float scale) {
    const cudaDataType_t dt = cu_blas_type(cb->base.dtype);
    const float zero = 0.f, one = 1.f;
    /* column-major: S^T [n x mb] = K [c x n]^T Q_b [c x mb] */
    int rc = cu_blas_check(cublasGemmEx(cb->cublas, CUBLAS_OP_T, CUBLAS_OP_N, n, mb, c, &scale, k,
                                        dt, 3 * c, q, dt, 3 * c, &zero, sc, CUDA_R_32F, n,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                           who, "attention scores");
    if (rc == VAE_OK)
        rc = cu_check(cuk_softmax_rows(cb->stream, cb->base.dtype, sc, p, mb, n), who,
                      "attention softmax");
    /* Y_b^T [c x mb] = V [c x n] P^T [n x mb] */
    if (rc == VAE_OK)
        rc = cu_blas_check(cublasGemmEx(cb->cublas, CUBLAS_OP_N, CUBLAS_OP_N, c, mb, n, &one, v, dt,
                                        3 * c, p, dt, n, &zero, y, dt, c, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT),
                           who, "attention P V");
    return rc;
}

/* The GEMM path's blocks of a shape, kept in the tune cache for the next process's warm-up
 * (att_warm): "att:n<tokens>.c<channels>.r<rows a block>". */
static void att_remember(cuda_backend *cb, int n, int c, int rows) {
    char key[64];
    snprintf(key, sizeof key, "att:n%d.c%d.r%d", n, c, rows);
    if (cu_tune_lookup(cb, key) < 0) cu_tune_store(cb, key, 0);
}

static int attention_gemm(cuda_backend *cb, const vae_op *op, const char *qkv, char *y, int t,
                          int n, int q0, int q1, int rows) {
    const int c = op->c_out;
    att_remember(cb, n, c, rows);
    const size_t es = cb->base.elem_size;
    float *sc = cu_scratch(cb, att_gemm_bytes(cb, rows, n), op->name); /* [rows][n] */
    if (!sc) return VAE_ENOMEM;
    void *p = sc + (size_t)rows * n; /* [rows][n], activation dtype */
    int rc = VAE_OK;
    for (int f = 0; f < t && rc == VAE_OK; f++) {
        const char *q = qkv + (size_t)f * n * 3 * c * es, *k = q + c * es, *v = q + 2 * c * es;
        for (int r0 = q0; r0 < q1 && rc == VAE_OK; r0 += rows) {
            const int mb = q1 - r0 < rows ? q1 - r0 : rows;
            rc = att_gemm_pair(cb, op->name, q + (size_t)r0 * 3 * c * es, k, v, sc, p,
                               y + ((size_t)f * n + r0) * c * es, n, mb, c, op->scale);
        }
    }
    return rc;
}

/* The attention's GEMM path once on zeros at session creation, so that a process's first call
 * does not pay cuBLAS's first use (its heuristics and lazily loaded kernels: 152 ms of a fresh
 * process's first Wan2.1 480p decode on the H100, bench/RESULTS.md runs 155-162) nor the first
 * launches of the kernels its own shapes take (13 ms more there, run 266). The blocks are those
 * earlier processes ran at program p's attention width (the tune cache's "att:" entries: a
 * block of rows and the remainder of a frame), else ATT_WARM_ROWS queries against
 * ATT_WARM_TOKENS keys (8192 x 2048 did better than 2048 x 512 in runs 155-162). Once per width
 * (a decoder and an encoder of the same width share it). Own buffers, not the scratch area or
 * the pool: nothing stays allocated; where the device has no room for them the first call pays
 * instead. */
enum { ATT_WARM_TOKENS = 8192, ATT_WARM_ROWS = 2048, ATT_WARM_BLOCKS = 8 };
#define ATT_WARM_BYTES ((size_t)512 << 20) /* a cached shape needing more: not warmed */

/* qkv [n][3c], the scores and P of mb rows, y [mb][c]: one block's buffer */
static size_t att_warm_bytes(const cuda_backend *cb, int n, int mb, int c) {
    const size_t es = cb->base.elem_size;
    return (size_t)n * 3 * c * es + att_gemm_bytes(cb, mb, n) + (size_t)mb * c * es;
}

/* The blocks to warm at width c (blk[k] = {tokens, rows}), from the tune cache, else the
 * default; their count. */
static int att_warm_blocks(cuda_backend *cb, int c, int blk[ATT_WARM_BLOCKS][2]) {
    const char *text;
    int nb = 0, path;
    for (int i = 0;
         nb + 2 <= ATT_WARM_BLOCKS && (i = cu_tune_next(cb, "att:", i, &text, &path)) >= 0; i++) {
        int n, cc, r, len = 0;
        if (sscanf(text, "n%d.c%d.r%d%n", &n, &cc, &r, &len) != 3 || text[len] || cc != c ||
            n < ATT_GEMM_MIN_TOKENS || n > (1 << 20) || r <= 0 || r > n ||
            att_warm_bytes(cb, n, r, c) > ATT_WARM_BYTES)
            continue;
        blk[nb][0] = n, blk[nb++][1] = r;
        if (n % r) blk[nb][0] = n, blk[nb++][1] = n % r;
    }
    if (nb == 0) blk[nb][0] = ATT_WARM_TOKENS, blk[nb++][1] = ATT_WARM_ROWS;
    return nb;
}

static int att_warm(cuda_backend *cb, const vae_program *p) {
    const vae_op *op = NULL;
    for (int i = 0; i < p->n_ops && !op; i++)
        if (p->ops[i].kind == VAE_OP_ATTENTION) op = &p->ops[i];
    if (!op || op->c_out == cb->warm_att_c || att_gemm_rows(cb, op, ATT_WARM_TOKENS, SIZE_MAX) == 0)
        return VAE_OK;
    const int c = op->c_out;
    const size_t es = cb->base.elem_size;
    int blk[ATT_WARM_BLOCKS][2];
    const int nb = att_warm_blocks(cb, c, blk);
    size_t bytes = 0;
    for (int k = 0; k < nb; k++) {
        const size_t b = att_warm_bytes(cb, blk[k][0], blk[k][1], c);
        if (b > bytes) bytes = b;
    }
    char *buf = NULL;
    if (cudaMalloc((void **)&buf, bytes) != cudaSuccess) {
        cudaGetLastError(); /* (no room: not an error) */
        return VAE_OK;
    }
    int rc = cu_check(cudaMemsetAsync(buf, 0, bytes, cb->stream), op->name, "memset");
    for (int k = 0; k < nb && rc == VAE_OK; k++) {
        const int n = blk[k][0], mb = blk[k][1];
        float *sc = (float *)(buf + (size_t)n * 3 * c * es); /* [mb][n], P [mb][n], y [mb][c] */
        char *pm = (char *)(sc + (size_t)mb * n), *y = pm + (size_t)mb * n * es;
        rc = att_gemm_pair(cb, op->name, buf, buf + c * es, buf + 2 * c * es, sc, pm, y, n, mb, c,
                           op->scale);
    }
    if (rc == VAE_OK) rc = cu_check(cudaStreamSynchronize(cb->stream), op->name, "warm-up");
    cudaFree(buf);
    if (rc == VAE_OK) cb->warm_att_c = c;
    return rc;
}

/* Program p's parameters into the stage (cuda_stage.c), in the forms their first uses take. */
static void stage_program(cuda_backend *cb, const vae_program *p) {
    cu_stage *st = &cb->stage;
    cu_stage_begin(st);
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && !cu_stage_alloc(cb, st)) break;
        for (int i = 0; i < p->n_ops; i++) {
            const vae_op *op = &p->ops[i];
            if (op->kind == VAE_OP_CONV) cuda_conv_stage(cb, op);
            if (!ops_has_params(op)) continue;
            cu_stage_put(st, op->w, CU_STAGE_RAW, VAE_DTYPE_F32, (size_t)op->c_in, op->w);
            cu_stage_put(st, op->b, CU_STAGE_RAW, VAE_DTYPE_F32, (size_t)op->c_in, op->b);
        }
    }
    cu_stage_end(st);
}

/* The program has convs that only cuDNN runs (an encoder's strided ones). */
static int program_wants_dnn(const cuda_backend *cb, const vae_program *p) {
    for (int i = 0; i < p->n_ops; i++)
        if (p->ops[i].kind == VAE_OP_CONV && cuda_conv_wants_dnn(cb, &p->ops[i])) return 1;
    return 0;
}

/* backend.h warm (VAE_CUDA_WARM): 1 the attention's cuBLAS warm-up, cuDNN's first use where the
 * program has convs only cuDNN runs, the cuDNN plans earlier processes' calls used (the tune
 * cache), the modules of the sm_90a conv kernels; 2 also the parameters staged in pinned memory.
 * The time goes to CU_H_WARM, not to the calls' set-up. */
int cuda_warm(vae_backend *be, const vae_program *p) {
    cuda_backend *cb = cu_be(be);
    if (cb->warm == 0) return VAE_OK;
    double set_up[CU_H_N];
    memcpy(set_up, cb->host_s, sizeof set_up);
    const double t0 = cu_now();
    int rc = cu_enter(cb, "cuda warm-up");
    if (rc == VAE_OK) rc = att_warm(cb, p);
    if (rc == VAE_OK && program_wants_dnn(cb, p)) rc = cu_dnn_warm(cb);
    if (rc == VAE_OK) rc = cu_dnn_warm_seen(cb, p);
    if (rc == VAE_OK) cuda_conv_load_kernels(cb, p);
    if (rc == VAE_OK && cb->warm >= 2) stage_program(cb, p);
    memcpy(cb->host_s, set_up, sizeof set_up); /* a call's set-up, not the session's */
    cb->host_s[CU_H_WARM] = set_up[CU_H_WARM] + cu_now() - t0;
    VAE_DEBUG("cuda warm-up: %.0f ms so far, %.1f MiB of parameters staged",
              cb->host_s[CU_H_WARM] * 1e3, (double)cu_stage_bytes(&cb->stage) / 1048576.0);
    return rc;
}

static int attention_run(cuda_backend *cb, const vae_op *op, const void *qkv, void *y, int t, int h,
                         int w, int q0, int q1);

int cuda_attention(vae_backend *be, const vae_op *op, void *state, const void *qkv, void *y, int t,
                   int h, int w, int q0, int q1) {
    cuda_backend *cb = cu_be(be);
    cu_prof_name(cb, op->name);
    int ph = cu_prof_begin(cb, CU_P_ATT);
    int rc = attention_run(cb, op, qkv, y, t, h, w, q0, q1);
    cu_prof_end(cb, ph);
    return rc;
}

/* the GEMM path computes the queries [q0, q1) only; the fused kernel every query of a frame */
static int attention_run(cuda_backend *cb, const vae_op *op, const void *qkv, void *y, int t, int h,
                         int w, int q0, int q1) {
    vae_backend *be = &cb->base;
    int rc = vae_attention_check_call(op, qkv, y, t, h, w, q0, q1);
    if (rc || t == 0 || q1 == q0) return rc;
    const int c = op->c_out, n = h * w; /* (checked against overflow) */
    if ((rc = cu_enter(cb, op->name))) return rc;
    const int rows = att_gemm_block(cb, op, n);
    if (rows > 0) return attention_gemm(cb, op, qkv, y, t, n, q0, q1, rows);
    return cu_check(cuk_attention(cb->stream, be->dtype, qkv, y, t, n, c, op->scale), op->name,
                    "attention kernel");
}

int64_t cuda_scratch_need(vae_backend *be, const vae_op *op, int t, int h, int w, int minimal) {
    cuda_backend *cb = cu_be(be);
    if (op->kind == VAE_OP_CONV) return cuda_conv_scratch_need(cb, op, t, h, w, minimal);
    if (op->kind == VAE_OP_GROUP_NORM)
        return (int64_t)cuk_group_norm_work(be->dtype, t, (int64_t)h * w, op->c_in, op->groups,
                                            cb->sm_count);
    if (op->kind == VAE_OP_ATTENTION && !minimal) { /* minimal: the fused kernel, no scratch */
        const int n = h * w;
        return (int64_t)att_gemm_bytes(cb, att_gemm_rows(cb, op, n, att_gemm_target(cb)), n);
    }
    return 0;
}
