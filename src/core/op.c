/* op.c -- each op's rules: checks, shapes, receptive field, time, cost (see op.h). */
#include "op.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "core.h"

vae_op vae_op_make(vae_op_kind kind, int x, int c_in, int c_out) {
    vae_op op;
    memset(&op, 0, sizeof op);
    op.kind = kind;
    op.in[0] = x;
    op.in[1] = -1;
    op.out = -1;
    op.c_in = c_in;
    op.c_out = c_out;
    op.kt = op.kh = op.kw = op.st = op.sh = op.sw = 1;
    op.ft = op.fs = 1;
    op.group = 1;
    return op;
}

/* ---- checks ---------------------------------------------------------------------------------- */
static int check_act(const vae_op *op) {
    switch (op->act) {
    case VAE_ACT_NONE:
    case VAE_ACT_SILU:
    case VAE_ACT_RELU:
    case VAE_ACT_CLAMP01: return VAE_OK;
    case VAE_ACT_TANH_SCALE:
        if (op->act_scale > 0.0f && op->act_scale < 1e30f) return VAE_OK;
        return vae_fail(VAE_EINVAL, "%s: tanh activation scale %g is not positive", op->name,
                        (double)op->act_scale);
    }
    return vae_fail(VAE_EINVAL, "%s: unknown activation %d", op->name, (int)op->act);
}

int vae_op_grouped(const vae_op *op) {
    return op->kind == VAE_OP_CONV && op->groups > 1;
}

int64_t vae_op_weight_count(const vae_op *op) {
    const int per_group = vae_op_grouped(op) ? op->c_in / op->groups : op->c_in;
    return (int64_t)op->c_out * per_group * op->kt * op->kh * op->kw;
}

/* What a depthwise conv is (op.h VAE_OP_CONV): groups = c_in, whole outputs per input channel,
 * spatial only */
static int check_grouped(const vae_op *op) {
    if (op->groups != op->c_in || op->c_out % op->c_in)
        return vae_fail(VAE_EINVAL,
                        "%s: grouped conv of %d groups, %d -> %d channels: only depthwise "
                        "(groups = c_in, c_out a multiple of it)",
                        op->name, op->groups, op->c_in, op->c_out);
    if (op->kt != 1 || op->st != 1 || op->tpad || op->up > 1)
        return vae_fail(VAE_EUNSUPPORTED,
                        "%s: depthwise conv with kt %d, st %d, tpad %d, up %d: only 2-D "
                        "(1, 1, 0, none)",
                        op->name, op->kt, op->st, op->tpad, op->up);
    return VAE_OK;
}

static int check_conv(const vae_op *op) {
    if (op->kt < 1 || op->kh < 1 || op->kw < 1 || op->st < 1 || op->sh < 1 || op->sw < 1 ||
        op->pad_h[0] < 0 || op->pad_h[1] < 0 || op->pad_w[0] < 0 || op->pad_w[1] < 0 ||
        op->tpad < 0 || op->up < 0 || op->groups < 0)
        return vae_fail(VAE_EINVAL,
                        "%s: bad conv parameters (c %d->%d, kernel %dx%dx%d, stride %dx%dx%d, "
                        "pad h %d,%d w %d,%d)",
                        op->name, op->c_in, op->c_out, op->kt, op->kh, op->kw, op->st, op->sh,
                        op->sw, op->pad_h[0], op->pad_h[1], op->pad_w[0], op->pad_w[1]);
    if (!op->w) return vae_fail(VAE_EINVAL, "%s: conv has no weight", op->name);
    if ((int64_t)op->kt * op->kh * op->kw * op->c_in > INT32_MAX / 2)
        return vae_fail(VAE_EUNSUPPORTED, "%s: conv kernel too large", op->name);
    if (op->up > 1 && (op->kt != 1 || op->st != 1 || vae_op_is_windowed(op)))
        return vae_fail(VAE_EUNSUPPORTED, "%s: input upsampling only for non-temporal convs",
                        op->name);
    const int rc = vae_op_grouped(op) ? check_grouped(op) : VAE_OK;
    if (rc) return rc;
    if (op->norm_w && op->act != VAE_ACT_NONE)
        return vae_fail(VAE_EINVAL, "%s: conv with both a folded norm and an activation", op->name);
    if (op->norm_w) {
        const vae_op n = vae_conv_norm_op(op);
        return check_act(&n);
    }
    return VAE_OK;
}

vae_op vae_conv_norm_op(const vae_op *conv) {
    vae_op n = vae_op_make(VAE_OP_RMS_NORM, conv->out, conv->c_out, conv->c_out);
    n.w = conv->norm_w;
    n.act = conv->norm_act;
    n.act_scale = conv->act_scale;
    memcpy(n.name, conv->name, sizeof n.name);
    return n;
}

vae_op vae_conv_act_op(const vae_op *conv) {
    vae_op a = vae_op_make(VAE_OP_ACT, conv->out, conv->c_out, conv->c_out);
    a.act = conv->act;
    a.act_scale = conv->act_scale;
    memcpy(a.name, conv->name, sizeof a.name);
    return a;
}

int vae_op_check(const vae_op *op) {
    if (op->c_in < 1 || op->c_out < 1)
        return vae_fail(VAE_EINVAL, "%s: %d -> %d channels", op->name, op->c_in, op->c_out);
    int rc = check_act(op);
    if (rc) return rc;
    switch (op->kind) {
    case VAE_OP_CONV: return check_conv(op);
    case VAE_OP_GROUP_NORM:
        if (op->groups < 1 || op->c_in % op->groups || op->c_out != op->c_in)
            return vae_fail(VAE_EINVAL, "%s: %d channels cannot form %d groups", op->name, op->c_in,
                            op->groups);
        return VAE_OK;
    case VAE_OP_RMS_NORM:
    case VAE_OP_ACT:
    case VAE_OP_ADD:
    case VAE_OP_SCALE_SHIFT:
    case VAE_OP_TIME_HEAD:
    case VAE_OP_TIME_DROP:
    case VAE_OP_CONCAT_T:
        if (op->c_out != op->c_in)
            return vae_fail(VAE_EINVAL, "%s: %d channels cannot give %d", op->name, op->c_in,
                            op->c_out);
        if ((op->kind == VAE_OP_TIME_HEAD || op->kind == VAE_OP_TIME_DROP) && op->n < 0)
            return vae_fail(VAE_EINVAL, "%s: %d frames", op->name, op->n);
        return VAE_OK;
    case VAE_OP_UPSAMPLE:
    case VAE_OP_SHUFFLE_UP:
    case VAE_OP_SHUFFLE_DOWN:
        if (op->fs < 1 || op->ft < 1 || op->group < 1 || op->tpad < 0)
            return vae_fail(VAE_EINVAL, "%s: resample factors ft %d, fs %d, group %d", op->name,
                            op->ft, op->fs, op->group);
        return VAE_OK;
    case VAE_OP_ATTENTION:
        if (op->c_in != 3 * op->c_out)
            return vae_fail(VAE_EINVAL, "%s: attention wants c_in = 3 * c_out, has %d and %d",
                            op->name, op->c_in, op->c_out);
        return VAE_OK;
    default: return vae_fail(VAE_EINVAL, "%s: unknown op kind %d", op->name, (int)op->kind);
    }
}

/* ---- space ----------------------------------------------------------------------------------- */
typedef struct axis_rule {
    int u, k, s, p0, p1;
} axis_rule;

static axis_rule axis_of(const vae_op *op, int axis) {
    axis_rule r = {1, 1, 1, 0, 0};
    switch (op->kind) {
    case VAE_OP_CONV:
        r.u = op->up > 1 ? op->up : 1;
        r.k = axis ? op->kw : op->kh;
        r.s = axis ? op->sw : op->sh;
        r.p0 = axis ? op->pad_w[0] : op->pad_h[0];
        r.p1 = axis ? op->pad_w[1] : op->pad_h[1];
        break;
    case VAE_OP_UPSAMPLE:
    case VAE_OP_SHUFFLE_UP: r.u = op->fs; break;
    case VAE_OP_SHUFFLE_DOWN: r.k = r.s = op->fs; break;
    default: break;
    }
    return r;
}

vae_span vae_span_clip(vae_span a, int lo, int hi) {
    if (a.lo < lo) a.lo = lo;
    if (a.hi > hi) a.hi = hi;
    if (a.hi < a.lo) a.hi = a.lo;
    return a;
}

int vae_op_is_global(const vae_op *op) {
    return op->kind == VAE_OP_GROUP_NORM || op->kind == VAE_OP_ATTENTION;
}

int vae_op_is_reducible(const vae_op *op) {
    return op->kind == VAE_OP_GROUP_NORM;
}

/* global over the frame along the rows, as the plan runs it */
static int op_is_global_as(const vae_op *op, int reduce) {
    return vae_op_is_global(op) && !(reduce && vae_op_is_reducible(op));
}

int vae_op_out_len(const vae_op *op, int axis, int n) {
    axis_rule r = axis_of(op, axis);
    int64_t span = (int64_t)n * r.u + r.p0 + r.p1;
    if (n < 1 || span < r.k || span > INT_MAX) return 0;
    return (int)((span - r.k) / r.s + 1);
}

int vae_op_out_size(const vae_op *op, int h, int w, int *h_out, int *w_out) {
    if (op->kind == VAE_OP_SHUFFLE_DOWN && (h % op->fs || w % op->fs))
        return vae_fail(VAE_ESHAPE, "op %s: size %dx%d is not a multiple of %d", op->name, h, w,
                        op->fs);
    *h_out = vae_op_out_len(op, 0, h);
    *w_out = vae_op_out_len(op, 1, w);
    if (*h_out < 1 || *w_out < 1)
        return vae_fail(VAE_ESHAPE, "op %s: input %dx%d is too small", op->name, h, w);
    return VAE_OK;
}

static int floor_div(int a, int b) {
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

vae_span vae_op_in_span(const vae_op *op, int axis, vae_span out, int n_in, int reduce) {
    if (op_is_global_as(op, reduce)) return (vae_span){0, n_in};
    if (out.hi <= out.lo) return (vae_span){0, 0};
    axis_rule r = axis_of(op, axis);
    int lo = out.lo * r.s - r.p0, hi = (out.hi - 1) * r.s - r.p0 + r.k; /* upsampled rows */
    return (vae_span){floor_div(lo, r.u), floor_div(hi - 1, r.u) + 1};
}

int vae_op_align(const vae_op *op, int axis) {
    axis_rule r = axis_of(op, axis);
    return r.s / vae_gcd(r.u, r.s);
}

static int64_t floor_div64(int64_t a, int64_t b) {
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

int vae_op_map_crop(const vae_op *op, int axis, int n, vae_span crop, vae_span valid, int reduce,
                    vae_span *out_crop, vae_span *out_valid) {
    axis_rule r = axis_of(op, axis);
    if (((int64_t)crop.lo * r.u) % r.s)
        return vae_fail(VAE_ESHAPE,
                        "op %s: a crop starting at row %d is not aligned to its "
                        "stride %d",
                        op->name, crop.lo, r.s);
    const int o0 = (int)((int64_t)crop.lo * r.u / r.s);
    out_crop->lo = o0;
    out_crop->hi = o0 + vae_op_out_len(op, axis, crop.hi - crop.lo);
    if (op_is_global_as(op, reduce)) {
        int whole = crop.lo == 0 && crop.hi == n && valid.lo <= 0 && valid.hi >= n;
        *out_valid = whole ? *out_crop : (vae_span){o0, o0};
        return VAE_OK;
    }
    /* output row j is exact when the rows it reads inside the frame, in upsampled units
     * [max(j*s - p0, 0), min(j*s - p0 + k, n*u)), lie in the valid part [valid.lo*u, valid.hi*u);
     * both ends grow with j, so the exact rows are one interval, found in closed form (a scan
     * of the rows made planning a large frame's tiles cost time in proportion to its side):
     * the start holds for every j when valid.lo <= 0, else from j*s - p0 >= vlo on; the end
     * for every j when the frame ends inside the valid part, else up to j*s - p0 + k <= vhi */
    const int64_t vlo = (int64_t)valid.lo * r.u, vhi = (int64_t)valid.hi * r.u,
                  nu = (int64_t)n * r.u;
    int64_t lo = out_crop->lo, hi = out_crop->hi;
    if (vlo > 0) {
        const int64_t j0 = -floor_div64(-(vlo + r.p0), r.s); /* ceil((vlo + p0) / s) */
        if (j0 > lo) lo = j0;
    }
    if (nu > vhi) {
        const int64_t j1 = floor_div64(vhi + r.p0 - r.k, r.s) + 1;
        if (j1 < hi) hi = j1;
    }
    *out_valid = lo < hi ? (vae_span){(int)lo, (int)hi} : (vae_span){o0, o0};
    return VAE_OK;
}

/* ---- time ------------------------------------------------------------------------------------ */
int vae_op_is_windowed(const vae_op *op) {
    if (op->kind == VAE_OP_CONV) return op->kt > 1 || op->st > 1 || op->tpad > 0;
    if (op->kind == VAE_OP_SHUFFLE_DOWN) return op->ft > 1;
    return 0;
}

void vae_op_step_frames(const vae_op *op, vae_op_clock *c, int t_in, int t_in2, vae_op_frames *f) {
    memset(f, 0, sizeof *f);
    f->pass = -1;
    if (vae_op_is_windowed(op)) {
        f->pad = !c->started && t_in > 0 ? op->tpad : 0;
        f->total = c->pending + f->pad + t_in;
        f->t_out = f->total >= op->kt ? (f->total - op->kt) / op->st + 1 : 0;
        f->used = f->t_out * op->st;
        f->keep = f->total - f->used;
        if (f->keep > op->kt - 1) f->keep = op->kt - 1, f->used = f->total - f->keep;
        c->pending = f->keep;
        if (t_in > 0) c->started = 1;
        c->seen += t_in;
        return;
    }
    switch (op->kind) {
    case VAE_OP_TIME_HEAD:
    case VAE_OP_TIME_DROP: {
        int64_t left = c->seen >= op->n ? 0 : op->n - c->seen;
        int in_head = (int)(left < t_in ? left : t_in);
        f->from = op->kind == VAE_OP_TIME_HEAD ? 0 : in_head;
        f->t_out = op->kind == VAE_OP_TIME_HEAD ? in_head : t_in - in_head;
        f->pass = f->t_out > 0 ? 0 : -1;
        break;
    }
    case VAE_OP_CONCAT_T:
        f->t_out = t_in + t_in2;
        f->pass = f->t_out == 0 ? -1 : t_in == 0 ? 1 : t_in2 == 0 ? 0 : -1;
        break;
    case VAE_OP_UPSAMPLE:
    case VAE_OP_SHUFFLE_UP: f->t_out = t_in * op->ft; break;
    default: f->t_out = t_in; break;
    }
    c->seen += t_in;
}

/* ---- cost and memory ------------------------------------------------------------------------- */
double vae_op_macs(const vae_op *op, int t, int h_out, int w_out) {
    const double vox = (double)t * h_out * w_out;
    switch (op->kind) {
    case VAE_OP_CONV: return vox * (double)vae_op_weight_count(op);
    case VAE_OP_ATTENTION: return 2.0 * vox * h_out * w_out * op->c_out;
    default: return 0;
    }
}

int vae_op_fp8_shape(const vae_op *op) {
    return op->kind == VAE_OP_CONV && !vae_op_grouped(op) && op->c_in > 16 && op->c_out > 16;
}

int vae_op_plain_geometry(const vae_op *op) {
    return op->st == 1 && op->sh == 1 && op->sw == 1 && op->up <= 1 &&
           op->pad_h[0] == op->pad_h[1] && op->pad_w[0] == op->pad_w[1];
}

vae_fp8_conv vae_op_fp8_conv(const vae_op *op) {
    const vae_fp8_conv c = {.kt = op->kt,
                            .kh = op->kh,
                            .kw = op->kw,
                            .ph = op->pad_h[0],
                            .pw = op->pad_w[0],
                            .c_in = op->c_in,
                            .c_out = op->c_out,
                            .plain = vae_op_plain_geometry(op)};
    return c;
}

vae_fp8_kernel vae_op_fp8_rule(const vae_op *op) {
    if (!vae_op_fp8_shape(op)) return VAE_FP8_NONE;
    const vae_fp8_conv c = vae_op_fp8_conv(op);
    return vae_fp8_shapes_rule(&c);
}

int vae_op_fp8_kernel(const vae_op *op) {
    return vae_op_fp8_rule(op) != VAE_FP8_NONE;
}

float vae_op_rms_bound(const vae_op *norm) {
    if (norm->kind != VAE_OP_RMS_NORM || (norm->act != VAE_ACT_NONE && norm->act != VAE_ACT_SILU))
        return 0.0f;
    const int silu = norm->act == VAE_ACT_SILU;
    float m = silu ? 0.2785f : 0.0f; /* SiLU's least value: -0.27846 at x = -1.2785 */
    for (int c = 0; c < norm->c_in; c++) {
        const float b = norm->b ? norm->b[c] : 0.0f;
        /* SiLU: only the largest value counts (SiLU(v) <= v), i.e. the bias's sign too */
        const float y =
            sqrtf((float)norm->c_in) * (norm->w ? fabsf(norm->w[c]) : 1.0f) + (silu ? b : fabsf(b));
        m = y > m ? y : m;
    }
    return m * (1.0f + 1e-6f); /* the float32 rounding of the norm's products */
}

int vae_op_fp8(const vae_op *op) {
    return op->kind == VAE_OP_CONV && op->fp8;
}

int vae_op_cache_frames(const vae_op *op) {
    return vae_op_is_windowed(op) ? op->kt - 1 : 0;
}

/* ---- shuffles ------------------------------------------------------------------------------- */
int vae_shuffle_up_table(const vae_op *op, int **out, size_t *n_out) {
    const int ft = op->ft, fs = op->fs, ci = op->c_in, co = op->c_out, group = op->group;
    if (ft < 1 || fs < 1 || group < 1 || ci < 1 || co < 1)
        return vae_fail(VAE_EINVAL, "%s: shuffle-up (ft %d, fs %d, group %d, %d->%d ch)", op->name,
                        ft, fs, group, ci, co);
    size_t n = (size_t)ft * fs * fs * co;
    int *tab = vae_malloc(n * sizeof *tab);
    if (!tab) return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
    for (int ti = 0; ti < ft; ti++)
        for (int hi = 0; hi < fs; hi++)
            for (int wi = 0; wi < fs; wi++)
                for (int o = 0; o < co; o++) {
                    int64_t f = (int64_t)o * op->cs_o + (int64_t)ti * op->cs_t +
                                (int64_t)hi * op->cs_h + (int64_t)wi * op->cs_w;
                    int64_t ch = f / group;
                    if (f < 0 || ch >= ci) {
                        vae_free(tab);
                        return vae_fail(VAE_EINVAL,
                                        "%s: shuffle-up strides (%d,%d,%d,%d)/%d read channel "
                                        "%lld of %d",
                                        op->name, op->cs_o, op->cs_t, op->cs_h, op->cs_w, group,
                                        (long long)ch, ci);
                    }
                    tab[((ti * fs + hi) * fs + wi) * co + o] = (int)ch;
                }
    *out = tab;
    *n_out = n;
    return VAE_OK;
}

int vae_shuffle_down_table(const vae_op *op, int **out, size_t *n_out) {
    const int ft = op->ft, fs = op->fs, ci = op->c_in, co = op->c_out, group = op->group;
    const int64_t total = (int64_t)ci * ft * fs * fs;
    if (ft < 1 || fs < 1 || group < 1 || ci < 1 || co < 1 || total != (int64_t)co * group)
        return vae_fail(VAE_EINVAL, "%s: shuffle-down (ft %d, fs %d, group %d, %d->%d ch)",
                        op->name, ft, fs, group, ci, co);
    int *tab = vae_malloc((size_t)total * 4 * sizeof *tab);
    if (!tab) return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
    for (int64_t f = 0; f < total; f++)
        tab[f * 4] = -1;
    for (int c = 0; c < ci; c++)
        for (int ti = 0; ti < ft; ti++)
            for (int hi = 0; hi < fs; hi++)
                for (int wi = 0; wi < fs; wi++) {
                    int64_t f = (int64_t)c * op->cs_o + (int64_t)ti * op->cs_t +
                                (int64_t)hi * op->cs_h + (int64_t)wi * op->cs_w;
                    if (f < 0 || f >= total || tab[f * 4] >= 0) {
                        vae_free(tab);
                        return vae_fail(VAE_EINVAL,
                                        "%s: shuffle-down strides (%d,%d,%d,%d) do not enumerate "
                                        "the %lld sub-positions",
                                        op->name, op->cs_o, op->cs_t, op->cs_h, op->cs_w,
                                        (long long)total);
                    }
                    tab[f * 4 + 0] = ti;
                    tab[f * 4 + 1] = hi;
                    tab[f * 4 + 2] = wi;
                    tab[f * 4 + 3] = c;
                }
    *out = tab;
    *n_out = (size_t)total * 4;
    return VAE_OK;
}

/* ---- conv calls ------------------------------------------------------------------------------ */
int vae_conv_check_call(const vae_op *op, const void *const *frames, int n_in, int h, int w,
                        const void *y, int t_out, int h_out, int w_out) {
    if (!frames || !y || h < 1 || w < 1 || n_in < op->kt)
        return vae_fail(VAE_ESHAPE, "%s: conv input of %d frames of %dx%d (kernel kt = %d)",
                        op->name, n_in, h, w, op->kt);
    const int exp_t = (n_in - op->kt) / op->st + 1;
    const int exp_h = vae_op_out_len(op, 0, h), exp_w = vae_op_out_len(op, 1, w);
    if (exp_h < 1 || exp_w < 1 || t_out != exp_t || h_out != exp_h || w_out != exp_w)
        return vae_fail(VAE_ESHAPE,
                        "%s: conv of %d frames %dx%d gives %dx%dx%d, not the %dx%dx%d asked for",
                        op->name, n_in, h, w, exp_t, exp_h, exp_w, t_out, h_out, w_out);
    for (int i = 0; i < n_in; i++)
        if (!frames[i]) return vae_fail(VAE_EINVAL, "%s: input frame %d is NULL", op->name, i);
    return VAE_OK;
}

/* ---- attention calls ------------------------------------------------------------------------- */
int vae_attention_check_call(const vae_op *op, const void *qkv, const void *y, int t, int h, int w,
                             int q0, int q1) {
    if (op->kind != VAE_OP_ATTENTION)
        return vae_fail(VAE_EINVAL, "%s: op kind %d is not attention", op->name, (int)op->kind);
    if (op->c_out < 1 || op->c_in != 3 * op->c_out)
        return vae_fail(VAE_ESHAPE, "%s: attention wants c_in = 3 * c_out, has %d and %d", op->name,
                        op->c_in, op->c_out);
    if (t < 0 || h < 0 || w < 0 || (int64_t)h * w > INT32_MAX / 2)
        return vae_fail(VAE_ESHAPE, "%s: attention input %dx%dx%d", op->name, t, h, w);
    if (q0 < 0 || q1 < q0 || q1 > h * w)
        return vae_fail(VAE_EINVAL, "%s: attention queries [%d, %d) of %d tokens", op->name, q0, q1,
                        h * w);
    if (t > 0 && q1 > q0 && (!qkv || !y))
        return vae_fail(VAE_EINVAL, "%s: attention without input or output", op->name);
    return VAE_OK;
}
