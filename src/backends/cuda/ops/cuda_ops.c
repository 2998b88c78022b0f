/* cuda_ops.c -- NORM, ELTWISE and RESAMPLE on the GPU: argument checks (the same as the CPU
 * reference's), per-op parameters prepared once, kernel launches; the session's warm-up
 * (backend.h warm) and the scratch each op needs. Attention: cuda_att.c.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backends/cuda/base/cuda_base.h"
#include "backends/cuda/base/cuda_host.h"
#include "backends/cuda/conv/cuda_conv.h"
#include "backends/cuda/kernels/cuda_kernels.h"
#include "backends/cuda/ops/cuda_ops.h"

typedef struct ops_state {
    float *w, *b; /* float32 per-channel parameters (norm gamma/beta, scale/shift) */
    size_t w_bytes, b_bytes;
} ops_state;

static int act_valid(vae_act a) {
    return a == VAE_ACT_NONE || a == VAE_ACT_SILU || a == VAE_ACT_RELU || a == VAE_ACT_TANH_SCALE ||
           a == VAE_ACT_CLAMP01;
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
                                   (int)op->act, op->act_scale, cu_codes_scale(op), cb->sm_count),
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
                                    cu_codes_scale(op), cb->sm_count),
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
    if (rc == VAE_OK) rc = cu_att_warm(cb, p);
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

int64_t cuda_scratch_need(vae_backend *be, const vae_op *op, int t, int h, int w, int minimal) {
    cuda_backend *cb = cu_be(be);
    if (op->kind == VAE_OP_CONV) return cuda_conv_scratch_need(cb, op, t, h, w, minimal);
    if (op->kind == VAE_OP_GROUP_NORM)
        return (int64_t)cuk_group_norm_work(be->dtype, t, (int64_t)h * w, op->c_in, op->groups,
                                            cb->sm_count);
    if (op->kind == VAE_OP_ATTENTION && !minimal) /* minimal: the fused kernel, no scratch */
        return cu_att_scratch_need(cb, op, h * w);
    return 0;
}
