/* op.h -- each op's rules in one place: checks, shapes, receptive field, time, cost (internal).
 *
 * The ops (vae_op) and what each computes come first; then what follows from that, for everyone who
 * needs it: the executor (shapes and stream rules per chunk), the planner (receptive fields for
 * exact tiles, bytes for budgets, MACs for costs) and the backends (parameter and call checks,
 * shuffle index tables). Nobody re-derives these rules elsewhere.
 *
 * Spatial rule. Along each spatial axis every op is "nearest upsampling by u, then a window of k
 * taps with stride s and zero padding p0 before / p1 after" (pointwise ops: u = k = s = 1):
 *   conv            u = op->up (or 1), k = kh|kw, s = sh|sw, p = pad_h|pad_w
 *   UPSAMPLE, SHUFFLE_UP    u = fs                SHUFFLE_DOWN    k = s = fs
 * so out_len(n) = (n*u + p0 + p1 - k) / s + 1, and output row j reads upsampled rows
 * [j*s - p0, j*s - p0 + k). GROUP_NORM and ATTENTION are global per frame: every output pixel
 * depends on the whole frame (no spatial tile of them is exact).
 *
 * Crops. An op run on a crop [a, b) of an axis of length n (the executor does not know it is a
 * crop: it pads the crop's edges with zeros as if they were the frame's) computes output rows
 * [a*u/s, ...) of the whole frame (a*u must be a multiple of s), and a row is exact when every
 * row it reads inside the frame lies in the input's exact ("valid") part: rows next to an inner
 * crop edge read zeros where the frame has data. vae_op_map_crop follows this through an op;
 * the planner chains it through programs.
 */
#ifndef VAE_OP_H
#define VAE_OP_H

#include <stddef.h>
#include <stdint.h>

#include "fp8_shapes.h"

/* ---- what each op computes ------------------------------------------------------------------ */
typedef enum {
    VAE_OP_INPUT = 0,
    /* conv: y = conv(x) + bias [+ in[1]] ; in[1] (optional) is a residual of y's shape, added
     * after the bias. Weight w: [c_out][c_in][kt][kh][kw] float32 (PyTorch layout), bias b: [c_out]
     * or NULL. Spatial zero padding pad_h = {top, bottom}, pad_w = {left, right}. up > 1 (kt = 1,
     * not windowed): x is first upsampled by `up` in h and w (nearest), as an UPSAMPLE op would;
     * a backend may compute both at once (vtbl conv_upsample), else the executor materialises
     * the upsampled input. norm_w (optional, set by vae_program_fuse_norms): the RMS norm that
     * read y alone, applied to it: y = norm_act(RMS_NORM(y) with weight norm_w [c_out], then
     * act_scale as that norm's), so that y is written once instead of written, read and written
     * again. act (set by vae_program_fuse_acts, a conv without norm_w): y = act(y) after the bias
     * and the residual, act_scale its scale; NONE otherwise. groups > 1 (vae_op_grouped): a
     * depthwise conv, each input channel c convolved alone into the c_out / c_in outputs
     * [c m, (c + 1) m) (m = c_out / c_in: PyTorch's
     * groups = c_in), weight [c_out][1][kh][kw]; 2-D only (kt = st = 1, no temporal padding, no
     * input upsampling), never E4M3. groups 0 or 1: a dense conv. */
    VAE_OP_CONV,
    /* y = x / max(||x||_2 over c, 1e-12) * sqrt(c) * w[c]  (Wan RMS_norm, per voxel), then act */
    VAE_OP_RMS_NORM,
    /* GroupNorm per frame: stats over (c/groups channels x h x w) of each frame; y = norm*w + b;
     * then act. eps in op->eps. */
    VAE_OP_GROUP_NORM,
    /* y = act(x) */
    VAE_OP_ACT,
    /* y = act(in[0] + in[1]); in[1] is the skip when the add closes a residual block */
    VAE_OP_ADD,
    /* y[c] = x[c] * w[c] + b[c] (latent normalisation) */
    VAE_OP_SCALE_SHIFT,
    /* nearest-neighbour upsampling by fs in h and w */
    VAE_OP_UPSAMPLE,
    /* depth to time/space: y[t*ft+ti][h*fs+hi][w*fs+wi][o] = x[t][h][w][ch] with
     * ch = (o*cs_o + ti*cs_t + hi*cs_h + wi*cs_w) / group   (integer division) */
    VAE_OP_SHUFFLE_UP,
    /* space/time to depth, then average groups: let f = c*cs_o + ti*cs_t + hi*cs_h + wi*cs_w
     * enumerate the c_in*ft*fs*fs sub-positions of each (ft,fs,fs) block; y[o] = mean of the
     * `group` values with f in [o*group, (o+1)*group). Temporal windows of ft frames with stride
     * ft, front-padded with tpad zero frames at stream start. */
    VAE_OP_SHUFFLE_DOWN,
    /* keeps only the first n frames of the stream (drops everything after) */
    VAE_OP_TIME_HEAD,
    /* drops the first n frames of the stream */
    VAE_OP_TIME_DROP,
    /* y = frames of in[0] followed by frames of in[1] (same h, w, c) */
    VAE_OP_CONCAT_T,
    /* single-head attention within each frame over its h*w tokens. in[0] = qkv with 3*c channels
     * (q = [0,c), k = [c,2c), v = [2c,3c)); y = softmax(q k^T * scale) v, c channels. */
    VAE_OP_ATTENTION,
    VAE_OP_COUNT
} vae_op_kind;

/* CLAMP01: y = min(max(x, 0), 1) (the TAEHV decoders' output range) */
typedef enum {
    VAE_ACT_NONE = 0,
    VAE_ACT_SILU,
    VAE_ACT_RELU,
    VAE_ACT_TANH_SCALE,
    VAE_ACT_CLAMP01
} vae_act;
typedef enum { VAE_TPAD_ZERO = 0, VAE_TPAD_REPLICATE } vae_tpad_mode;

typedef struct vae_op {
    vae_op_kind kind;
    int in[2]; /* value ids, -1 = none */
    int out;   /* value id */
    int c_in, c_out;
    /* conv / windows */
    int kt, kh, kw, st, sh, sw;
    int pad_h[2], pad_w[2];
    int tpad;                /* frames of front padding at stream start */
    vae_tpad_mode tpad_mode; /* zeros or copies of the first frame */
    /* norms, activations, attention */
    vae_act act;
    float act_scale; /* TANH_SCALE: y = tanh(x / s) * s */
    float eps;
    int groups; /* GROUP_NORM: its groups; CONV: depthwise when > 1 (= c_in) */
    float scale; /* attention: softmax scale */
    /* weights: host float32, owned by the model */
    const float *w, *b;
    /* shuffles */
    int ft, fs;
    int cs_o, cs_t, cs_h, cs_w, group;
    /* TIME_HEAD / TIME_DROP */
    int n;
    /* CONV: nearest upsampling of the input by `up` before the conv (0 or 1: none) */
    int up;
    /* CONV: VAE_DTYPE_FP8 may run it in E4M3 (set by vae_program_mark_fp8; op.h: vae_op_fp8) */
    int fp8;
    /* CONV marked fp8 in a session's program: the kernel its backend runs it with (fp8_shapes.h,
     * resolved once by vae_program_pick_fp8); VAE_FP8_NONE before (a model's marks) */
    vae_fp8_kernel fp8_kernel;
    /* CONV marked fp8: a bound of its input's magnitudes known from the model (op.h
     * vae_op_rms_bound of the RMS norm that makes the input), then the E4M3 input scale is
     * bound / 448 instead of the call's largest magnitude / 448; 0: none */
    float fp8_bound;
    /* E4M3 codes between a producer (an RMS norm, or a conv with norm_w) and the E4M3 conv that
     * alone reads its output (vae_program_mark_fp8_codes). Producer: fp8_codes_bound > 0, it
     * writes each output value v as the E4M3 code of v / (fp8_codes_bound / 448) (the reader's
     * fp8_bound), the c_out codes of a voxel in the first c_out bytes of that voxel's place (a
     * voxel keeps its size in the activation dtype: the executor's copies of frames, rows and
     * voxels move codes as they move values). Reader: fp8_codes_in = 1. Only a backend that
     * said it can (vtbl fp8_codes) sees them set. */
    float fp8_codes_bound;
    int fp8_codes_in;
    /* CONV: an RMS norm (weight [c_out], float32, owned by the model) and its activation applied
     * to the output (vae_program_fuse_norms); NULL: none */
    const float *norm_w;
    vae_act norm_act;
    char name[96]; /* checkpoint name of the layer, for logs and errors */
} vae_op;

/* Op templates with the fields that every op needs set (in = {x,-1}, out assigned on add). */
vae_op vae_op_make(vae_op_kind kind, int x, int c_in, int c_out);

/* A CONV with groups > 1: depthwise (op.h VAE_OP_CONV), a case of its own for every backend. */
int vae_op_grouped(const vae_op *op);
/* The float32 values of a conv's weight: c_out * (c_in / groups) * kt * kh * kw. */
int64_t vae_op_weight_count(const vae_op *op);

/* ---- checks ---------------------------------------------------------------------------------- */
/* The op's parameters make sense (kernel, strides, padding, channels, groups, weights present,
 * activation); VAE_EINVAL naming the op otherwise. Backends call it from prepare(). */
int vae_op_check(const vae_op *op);
/* The RMS norm a conv applies to its output (vae_op norm_w), as an op of its own: for backends
 * that run it as a pass over y (in place) after the conv. */
vae_op vae_conv_norm_op(const vae_op *conv);
/* The activation a conv applies to its output (vae_op act), as an ACT op of its own: for backends
 * that run it as a pass over y (in place) after the conv. */
vae_op vae_conv_act_op(const vae_op *conv);
/* What every backend's CONV checks of its call (backend.h): enough frames, the output size that
 * kernel, stride, padding and input upsampling (op->up) give, no NULL frame. */
int vae_conv_check_call(const vae_op *op, const void *const *frames, int n_in, int h, int w,
                        const void *y, int t_out, int h_out, int w_out);
/* What every backend's ATTENTION checks of its call (backend.h): an attention op of c_in =
 * 3 c_out, a t x h x w input, the queries [q0, q1) within the frame's h w tokens, and input and
 * output present where there is anything to compute. */
int vae_attention_check_call(const vae_op *op, const void *qkv, const void *y, int t, int h, int w,
                             int q0, int q1);

/* ---- space ----------------------------------------------------------------------------------- */
typedef struct vae_span {
    int lo, hi; /* rows [lo, hi) */
} vae_span;

/* a clipped to [lo, hi) (empty when they do not meet: hi = lo) */
vae_span vae_span_clip(vae_span a, int lo, int hi);

/* 1 for GROUP_NORM and ATTENTION (statistics or tokens over the whole frame). */
int vae_op_is_global(const vae_op *op);
/* 1 for GROUP_NORM: its statistics are sums, which the ranks of a device group can add up from
 * their own row bands (comm.h all-reduce) instead of reading the whole frame. With `reduce` set,
 * vae_op_in_span and vae_op_map_crop take such an op as one per pixel (band plans, plan.h). */
int vae_op_is_reducible(const vae_op *op);
/* Output length along axis (0 = h, 1 = w) for input length n; 0 when the input is too small. */
int vae_op_out_len(const vae_op *op, int axis, int n);
/* Output h x w for input h x w; VAE_ESHAPE naming the op when it gives no output. */
int vae_op_out_size(const vae_op *op, int h, int w, int *h_out, int *w_out);
/* The input rows that output rows `out` read (unclipped: may reach outside [0, n)). Global ops:
 * the whole input [0, n_in) (reducible ones with `reduce`: the rows `out`). */
vae_span vae_op_in_span(const vae_op *op, int axis, vae_span out, int n_in, int reduce);
/* A crop start must be a multiple of this along each axis (s / gcd(u, s)). */
int vae_op_align(const vae_op *op, int axis);
/* Through the op along axis: input of full length n, cropped to `crop` of which `valid` is exact
 * -> the output crop and its exact part (whole-frame coordinates; an empty valid part has
 * lo >= hi). VAE_ESHAPE when the crop start is not aligned. Global ops: exact only when the crop
 * is the whole, valid frame (reducible ones with `reduce`: as exact as their input). */
int vae_op_map_crop(const vae_op *op, int axis, int n, vae_span crop, vae_span valid, int reduce,
                    vae_span *out_crop, vae_span *out_valid);

/* ---- time -------------------------------------------------------------------------------------
 * The stream rule of program.h, one step at a time: an op's state between chunks is how many
 * input frames it keeps (pending), whether the stream has started (front padding applied) and how
 * many frames it has seen (TIME_HEAD / TIME_DROP). */
typedef struct vae_op_clock {
    int pending;  /* windowed ops: frames kept from earlier chunks (at most kt - 1) */
    int started;  /* the front padding has been applied */
    int64_t seen; /* input frames of the stream so far */
} vae_op_clock;

typedef struct vae_op_frames {
    int pad;   /* windowed: front-padding frames added in this step */
    int total; /* windowed: pending + pad + new frames, the window's frame list */
    int t_out; /* output frames of this step */
    int used;  /* windowed: frames consumed from the front of the list (t_out * st) */
    int keep;  /* windowed: frames kept for the next step (the last `keep` of the list) */
    int from;  /* TIME_HEAD / TIME_DROP: first input frame copied */
    int pass;  /* the input whose frames [from, from + t_out) are the whole output (a time head or
                * drop, a concat with one input empty in this step): its buffer can serve as the
                * output's, no copy (executor.c value_take); -1 none */
} vae_op_frames;

/* Does op see the stream through a temporal window (cache ++ chunk)? */
int vae_op_is_windowed(const vae_op *op);
/* One step of t_in new frames (t_in2: CONCAT_T's second input): fills f and advances c. */
void vae_op_step_frames(const vae_op *op, vae_op_clock *c, int t_in, int t_in2, vae_op_frames *f);

/* ---- cost and memory ------------------------------------------------------------------------- */
/* Multiply-accumulates of t frames of output h_out x w_out (attention: scores and values, over
 * h_out*w_out tokens); 0 for the ops whose cost is memory traffic. */
double vae_op_macs(const vae_op *op, int t, int h_out, int w_out);
/* FP8 (VAE_DTYPE_FP8): which convs run in E4M3. One E4M3 conv adds ~3.4% relative noise to its
 * output (3 mantissa bits on both operands), so the rule keeps it where the noise is damped:
 * - vae_op_fp8_shape: wider than 16 channels in and out (the network's ends, next to the pixels
 *   and the latent, are cheap and the most sensitive), and dense (a depthwise conv's few MACs
 *   a value gain nothing from E4M3);
 * - in a residual branch (vae_program_mark_fp8): the conv adds a residual, or its output reaches
 *   the first input of one that does (or of an ADD) through ops that nothing else reads. Its noise
 *   then lands beside the skip's exact signal: on the synthetic-weight Wan2.1 decoder one such conv
 *   costs ~1% at the output, a conv that carries the whole signal (an upsampling conv, a shortcut,
 *   Wan's time_conv) 2-3.6%.
 * The model's programs carry these marks; each session keeps them on a copy only for the
 * VAE_FP8_CONVS convs nearest the output that its backend runs in E4M3 (program.h:
 * vae_program_pick_fp8), by default only among those vae_op_fp8_kernel takes (VAE_FP8_SHAPES),
 * and with the kernel it names (op->fp8_kernel). vae_op_fp8 reads the mark; backends run the
 * marked convs in E4M3 on that kernel, deciding nothing again, with the weights fp8.h makes (its
 * rounding spreads the taps' errors: the weights' share of the noise ~40% smaller).
 * - vae_op_fp8_kernel: a wide conv of a shape the E4M3 GPU kernels take, by the rule rows of
 *   fp8_shapes.h's table (the one place the shapes are written: temporal, plain geometry, the
 *   implicit GEMM's channel multiples or the halo-tile kernel's 3 x 3 with 96 filters), read by
 *   core, so that the CPU emulation picks the very convs a GPU runs in E4M3 and its measured error
 *   is the GPU's, and by the CUDA backend's kernels. vae_op_fp8_rule: the rule row's kernel
 *   (VAE_FP8_NONE where none takes it); vae_op_fp8_conv: op as the rows see it. */
int vae_op_fp8_shape(const vae_op *op);
int vae_op_fp8_kernel(const vae_op *op);
vae_fp8_kernel vae_op_fp8_rule(const vae_op *op);
vae_fp8_conv vae_op_fp8_conv(const vae_op *op);
/* Stride 1, no upsampling, the same spatial padding on both sides: the geometry of the
 * implicit-GEMM GPU kernels (the E4M3 ones among them: vae_op_fp8_kernel). */
int vae_op_plain_geometry(const vae_op *op);
int vae_op_fp8(const vae_op *op);
/* A bound of the magnitudes an RMS norm (+ SiLU) writes: y = x / |x| sqrt(C) g + b has |y_c| <=
 * sqrt(C) |g_c| + |b_c| (|x_c| <= |x|), and with SiLU, which keeps positive values below
 * themselves and negative ones above -0.2785, |SiLU(y_c)| <= max(sqrt(C) |g_c| + b_c, 0.2785);
 * the least such bound of the weights; an E4M3 conv reading such an output takes bound / 448 as
 * its input scale (vae_op fp8_bound): no pass over the input for its largest magnitude, and the
 * same codes on every backend. 0 for any other op (another activation, another kind). */
float vae_op_rms_bound(const vae_op *norm);
/* Frames of input kept between steps (windowed ops: kt - 1; others 0). */
int vae_op_cache_frames(const vae_op *op);

/* ---- shuffles -------------------------------------------------------------------------------- */
/* Index tables of the shuffles, shared by the backends (vae_free them). SHUFFLE_UP:
 * tab[((ti*fs + hi)*fs + wi)*c_out + o] = the input channel that output channel o of sub-position
 * (ti, hi, wi) reads. SHUFFLE_DOWN: for each slot f of the c_out*group output depth, the 4 ints
 * (ti, hi, wi, c) of the input value it takes. VAE_EINVAL when the strides describe no shuffle. */
int vae_shuffle_up_table(const vae_op *op, int **tab, size_t *n);
int vae_shuffle_down_table(const vae_op *op, int **tab, size_t *n);

#endif
