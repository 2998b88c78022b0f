/* cuda_conv.c -- CONV on the GPU.
 *
 * Paths, per call:
 *  - 3-D (kt > 1 or st > 1, symmetric spatial padding, frames consecutive in memory -- what the
 *    executor's contiguous windows give): one cuDNN NDHWC convolution over the frame list in
 *    place, weights [c_out][kt][kh][kw][c_in] (VAE_CUDA_CONV3D=0 turns it off);
 *  - otherwise per block of output frames, with weights [c_out][kh][kw][kt*c_in] (the temporal
 *    taps next to the input channels: one KRSC filter of kt*c_in channels), so that a causal 3-D
 *    conv over a scattered frame list is one 2-D convolution over the "temporally gathered" input
 *    x'[j][y][x][dt*c_in + ci] = frame[j*st + dt][y][x][ci]:
 *    - pointwise kernels (1x1, stride 1, no padding) are GEMMs (cuBLAS): directly on the frames
 *      when kt == 1, else on the gathered x';
 *    - other kernels go to cuDNN (NHWC). The input is used in place when kt == 1, the frames are
 *      consecutive in memory and the padding is symmetric; otherwise x' is gathered with explicit
 *      zero padding (asymmetric {0,1} padding included) and cuDNN runs unpadded;
 *    - when cuDNN has no algorithm for a shape (or VAE_CUDA_CONV=gemm), im2col + cuBLAS GEMM.
 *  - padded 3-D (16-bit, c_in a multiple of 8 but not of 64, e.g. 96): the frame list is copied
 *    into a window in the scratch area with c_in zero-padded to a multiple of 64, then one 3-D
 *    cuDNN conv (weights padded likewise): cuDNN's 3-D kernels are slow for 96 input channels,
 *    fast for 128. Where the implicit-GEMM kernels take the padded window, they run it instead
 *    of cuDNN (a tuner candidate for windows that are not contiguous).
 * Which is fastest depends on the shape: the candidates are timed once per (op, frames, size) on
 * the first call (cuda_conv_tune.c; VAE_CUDA_TUNE=0: no timing; 3-D, else padded 3-D, else per
 * block), and the executor is told (conv_window) not to build windows for ops whose steady-state
 * shape prefers another path than plain 3-D. Under a capped scratch area (a plan made with every
 * op's least scratch: scratch_reserve(.., capped = 1)), paths whose one-frame need exceeds the
 * area are left out where the 3-D path can run, and every temporal conv gets its window. Under
 * a memory budget, paths whose weight layout would take the weights past the share the plan
 * counted for them (cuda_mem_info's reserve) are left out where another path fits
 * (cuda_conv_tune.c: fitting_paths).
 * Bias and residual: for 16-bit activations cuDNN adds them in the convolution's epilogue (fused,
 * float32, one rounding; VAE_CUDA_FUSE=0 turns it off); otherwise y is first set to bias +
 * residual and the convolution accumulates on top (beta = 1). Each weight layout is made on first
 * use; once an op's paths are measured (or its phase path has run), the layouts no chosen path
 * reads are freed again. Gathers are bounded by scratch_limit (at least one output frame per
 * block).
 * Input upsampling (op->up = 2, nearest, then a 3x3 conv with padding 1: the Wan upsamplers):
 * four 2x2 convs of the small input, one per output phase (cuda_conv_phase.c; with 96 filters
 * also the halo-tile kernel's phase mode, straight into y). Other cases (or
 * VAE_CUDA_PHASE=0) upsample into a temporary first.
 * Implicit GEMM (cuda_conv_igemm.c; bf16 on sm_90, builds with CUTLASS): a conv (temporal over
 * a contiguous window, or 2-D over consecutive frames), c_in a multiple of 32 and c_out a
 * multiple of 96 or 128, is one CUTLASS kernel (TMA im2col loads, wgmma, bias + residual in its
 * epilogue), strided or unevenly padded ones too (the encoders' downsamplers: the TMA's traversal
 * strides, its padding on each side); a candidate of the tuner beside cuDNN's paths
 * (VAE_CUDA_IGEMM=always: taken wherever it applies, for tests; off: never). On sm_80+ GPUs
 * without the sm_90a kernels (or under VAE_CUDA_MMA=1) the same candidate is the mma.sync kernel
 * of cuda_mma_conv.cu (16-bit, c_in a multiple of 16, c_out of 8; stride 1, even padding). The 3x3
 * convs with 96 filters and c_in a multiple of 96 (bf16 or fp16) also have the halo-tile kernel,
 * another candidate (sm90/halo_conv.cu: each input frame's tile read once for all nine taps;
 * VAE_CUDA_HALO=always: taken wherever it applies; off: never).
 * An RMS norm folded into the conv (op->norm_w, program.h vae_program_fuse_norms): the halo-tile
 * kernel applies it in its epilogue (a tile holds every output pixel's 96 channels); after any
 * other path it is a pass over y in place (conv_norm). The tuner times each candidate with
 * that pass where it needs one, so the fused path is credited with the pass it saves.
 * FP8 (dtype fp8: bf16 activations): the convs vae_op_fp8 names that an E4M3 kernel takes (the
 * implicit-GEMM kind with c_in a multiple of 64, or the halo-tile kind: 96-filter 3x3, which then
 * runs them and applies their norm too; without sm_90a kernels all of them on the mma.sync one)
 * quantise their window per call into the scratch area (cuda_fp8.cu: scale = largest magnitude /
 * 448, or the bound of the RMS norm that made the window / 448: vae_op fp8_bound) and run on E4M3
 * weights quantised per output channel, the two scales applied in the epilogue: the CPU backend's
 * emulation, computed. An input that its producer wrote as those codes (op->fp8_codes_in: the RMS
 * norm's kernel, cuda_norm.cu, or the halo-tile kernels' epilogue) goes to the kernels as it is,
 * each voxel's codes at the start of its 16-bit place; a call they do not take expands it in place
 * for the 16-bit paths and writes the codes back after them (codes_frames). Every other conv runs
 * the bf16 paths. Narrow heads (16-bit, 3x3 with stride and padding 1, at most 8 outputs, c_in a
 * multiple of 16: the RGB heads) run a tensor-core kernel of their own (cuda_narrow_conv.cu;
 * VAE_CUDA_NARROW=0: off), and so do the encoders' stems (a few input channels to 32-128:
 * cuda_stem_conv.cu). Other narrow outputs (16-bit, c_out not a multiple of 8, spatial kernels) run
 * with c_out padded to a multiple of 8 (zero filters) into a temporary, then the real channels (+
 * residual) are copied out: tensor-core kernels instead of cuDNN's slow narrow ones.
 * Depthwise convs (op.h vae_op_grouped) run their own kernel, decided at prepare and taken before
 * every path above (cuda_conv_depthwise.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/base/cuda_host.h"
#include "backends/cuda/conv/cuda_conv_internal.h"

/* The core's checks, and what this backend cannot do: frame lists go to kernels by value. */
static int conv_check_params(const vae_op *op) {
    int rc = vae_op_check(op);
    if (rc == VAE_OK && op->kt > CUK_MAX_FRAMES)
        rc = vae_fail(VAE_EUNSUPPORTED, "%s: temporal kernel of %d frames (at most %d)", op->name,
                      op->kt, CUK_MAX_FRAMES);
    return rc;
}

/* the bias padded to kp with zeros (float32, host; the caller frees it), or NULL without memory */
static float *padded_bias(const vae_op *op, const conv_state *s) {
    float *host = vae_calloc((size_t)s->kp, sizeof(float));
    if (host && op->b) memcpy(host, op->b, (size_t)s->co * sizeof(float));
    return host;
}

/* bias padded to kp (zeros), float32 or the activation dtype; zeros without op->b */
static int upload_bias(cuda_backend *cb, const vae_op *op, const conv_state *s, int as_f32,
                       void **out) {
    int rc = op->b
                 ? cu_upload_staged(cb, op->b, CU_STAGE_BIAS, (size_t)s->kp, as_f32, out, op->name)
                 : VAE_OK;
    if (rc || *out) return rc;
    float *host = padded_bias(op, s);
    if (!host) return vae_fail(VAE_ENOMEM, "%s: out of host memory", op->name);
    rc = cu_upload_param(cb, host, (size_t)s->kp, as_f32, out, op->name);
    vae_free(host);
    return rc;
}

/* The padded 3-D path's input channels (16-bit, c_in a multiple of 8 but not of 64): c_in >= 32
 * padded to a multiple of 64; a narrower c_in (the decoders' first conv, 16 latent channels
 * -> 384 or 512) padded to 32 where CUTLASS's kernels take 32 -> c_out, which cuDNN runs at a
 * fraction of the kernels' rate on so few channels (the mma.sync one takes 16); 0: no padded
 * path. */
static int conv_pad_channels(const cuda_backend *cb, const vae_op *op) {
    if (cb->base.dtype == VAE_DTYPE_F32 || op->c_in % 8 || op->c_in % 64 == 0 || !cb->pad3d)
        return 0;
    if (op->c_in < 32)
        return cb->igemm && !cb->mma && cuk_igemm_supported(cb->base.dtype, 32, op->c_out) ? 32 : 0;
    return (op->c_in + 63) / 64 * 64;
}

/* The sizes and choices of the conv's state that do not depend on its calls' shapes. */
static void conv_state_init(cuda_backend *cb, const vae_op *op, conv_state *s) {
    const vae_backend *be = &cb->base;
    s->k = (int64_t)op->kh * op->kw * op->kt * op->c_in;
    s->use_gemm = cb->conv_mode == CU_CONV_GEMM;
    s->co = s->kp = op->c_out;
    s->cg = op->kt * op->c_in;
    s->cp = conv_pad_channels(cb, op);
    if (be->dtype != VAE_DTYPE_F32 && s->cg % 8 && (op->kh > 1 || op->kw > 1) && cb->cpad)
        s->cg = (s->cg + 7) / 8 * 8;
    const int spatial = op->kh > 1 || op->kw > 1 || op->kt > 1;
    if (be->dtype != VAE_DTYPE_F32 && spatial && op->c_out % 8 && op->c_out < 64 &&
        cb->conv_mode != CU_CONV_GEMM && cb->kpad)
        s->kp = (op->c_out + 7) / 8 * 8;
    s->fp8 = cu_conv_fp8_takes(cb, op);
    s->fp8_halo = s->fp8 && cu_conv_fp8_halo_takes(cb, op);
}

int cuda_conv_prepare(vae_backend *be, const vae_op *op, void **state) {
    cuda_backend *cb = cu_be(be);
    *state = NULL;
    int rc = conv_check_params(op);
    if (rc) return rc;
    conv_state *s = vae_calloc(1, sizeof *s);
    if (!s) return vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
    if (vae_op_grouped(op)) {
        if ((rc = cu_conv_depthwise_prepare(cb, op, s))) {
            cuda_conv_unprepare(be, op, s);
            return rc;
        }
        *state = s;
        return VAE_OK;
    }
    conv_state_init(cb, op, s);
    /* the weight layouts are made on first use: the path chosen for the first shape (timed, or
     * from the tune cache) decides which one, so none is made only to be freed again */
    /* a ReLU conv without a bias gets zeros: cuDNN's epilogue that applies the ReLU adds one */
    const int zero_bias = op->act == VAE_ACT_RELU && cb->fuse;
    if (rc == VAE_OK && (op->b || zero_bias)) {
        rc = upload_bias(cb, op, s, 1, (void **)&s->bias);
        s->b_bytes = (size_t)s->kp * sizeof(float);
        if (rc == VAE_OK && be->dtype != VAE_DTYPE_F32) {
            rc = upload_bias(cb, op, s, 0, &s->bias_dt);
            s->bdt_bytes = (size_t)s->kp * be->elem_size;
        }
    }
    if (rc == VAE_OK && op->norm_w)
        rc = cu_upload_param(cb, op->norm_w, (size_t)op->c_out, 1, (void **)&s->nw, op->name);
    if (rc) {
        cuda_conv_unprepare(be, op, s);
        return rc;
    }
    *state = s;
    return VAE_OK;
}

/* What prepare and the first calls will upload: the filters as they are (for the FP8 kernels
 * their scales and E4M3 codes: fp8.h), the padded biases, the phase filters. */
void cuda_conv_stage(cuda_backend *cb, const vae_op *op) {
    if (op->c_in < 1 || op->c_out < 1 || op->kt < 1 || op->kh < 1 || op->kw < 1)
        return; /* prepare reports it */
    if (vae_op_grouped(op)) {
        cu_conv_depthwise_stage(cb, op);
        return;
    }
    conv_state s;
    memset(&s, 0, sizeof s);
    conv_state_init(cb, op, &s);
    cu_stage *st = &cb->stage;
    const vae_dtype dt = cb->base.dtype;
    const size_t n = (size_t)s.co * op->c_in * op->kt * op->kh * op->kw;
    float *host = NULL;
    if (s.fp8) { /* the passes over the weights, here rather than in the first call */
        uint8_t *codes = NULL;
        if (!cu_stage_counting(st) && !(host = cu_conv_w8_scales_host(op, s.co))) return;
        if (host && !(codes = cu_conv_w8_codes_host(op, s.co, host))) {
            vae_free(host);
            return;
        }
        cu_stage_put(st, op->w, CU_STAGE_FP8, VAE_DTYPE_F32, (size_t)s.co, host);
        cu_stage_put(st, op->w, CU_STAGE_W8, VAE_DTYPE_FP8, n, codes);
        vae_free(host);
        vae_free(codes);
        host = NULL;
    } else {
        cu_stage_put(st, op->w, CU_STAGE_RAW, dt, n, op->w);
    }
    if (op->b && !cu_stage_counting(st) && !(host = padded_bias(op, &s))) return; /* not staged */
    cu_stage_put(st, op->b, CU_STAGE_BIAS, VAE_DTYPE_F32, (size_t)s.kp, host);
    if (dt != VAE_DTYPE_F32) cu_stage_put(st, op->b, CU_STAGE_BIAS, dt, (size_t)s.kp, host);
    vae_free(host);
    if (cu_conv_phase_takes(cb, op, &s)) {
        const size_t np = cu_conv_phase_count(op, &s);
        host = NULL;
        if (!cu_stage_counting(st) && !(host = vae_malloc(np * sizeof(float)))) return;
        if (host) cu_conv_phase_filters(op, &s, host);
        cu_stage_put(st, op->w, CU_STAGE_PHASE, dt, np, host);
        vae_free(host);
    }
}

int cuda_conv_wants_dnn(const cuda_backend *cb, const vae_op *op) {
    const int strided = op->st > 1 || op->sh > 1 || op->sw > 1;
    const int asym = op->pad_h[0] != op->pad_h[1] || op->pad_w[0] != op->pad_w[1];
    return cb->conv_mode != CU_CONV_GEMM && (strided || asym) && (op->kh > 1 || op->kw > 1) &&
           !vae_op_grouped(op);
}

void cuda_conv_unprepare(vae_backend *be, const vae_op *op, void *state) {
    conv_state *s = state;
    if (!s) return;
    cuda_backend *cb = cu_be(be);
    cudaStreamSynchronize(cb->stream);
    cu_free_param(cb, s->w, s->w_bytes);
    cu_free_param(cb, s->w3, s->w3_bytes);
    cu_free_param(cb, s->w2p, s->w2p_bytes);
    cu_free_param(cb, s->w3p, s->w3p_bytes);
    cu_free_param(cb, s->wh, s->wh_bytes);
    cu_free_param(cb, s->wph, s->wph_bytes);
    cu_free_param(cb, s->whp, s->whp_bytes);
    cu_free_param(cb, s->bias, s->b_bytes);
    cu_free_param(cb, s->bias_dt, s->bdt_bytes);
    cu_free_param(cb, s->nw, s->nw ? (size_t)op->c_out * sizeof(float) : 0);
    cu_free_param(cb, s->w8, s->w8_bytes);
    cu_free_param(cb, s->w8_scale, (size_t)s->kp * sizeof(float));
    cu_free_param(cb, s->scale8, (size_t)s->kp * sizeof(float));
    cu_free_param(cb, s->amax, sizeof(float));
    cu_free_param(cb, s->wdw, s->wdw_bytes);
    vae_free(s);
}

/* An input that its producer wrote as E4M3 codes (op->fp8_codes_in) for a call the E4M3 kernels
 * do not run (frames not consecutive, a kernel that refuses them): its frames expanded to 16-bit
 * values in place for the other paths (expand), and turned back into the same codes after them,
 * since later windows copy frames of it. A frame listed twice (replicated padding) once. */
static int codes_frames(cuda_backend *cb, const vae_op *op, const void *const *frames, int n_in,
                        int h, int w, int expand) {
    int rc = VAE_OK;
    for (int i = 0; i < n_in && rc == VAE_OK; i++) {
        int seen = 0;
        for (int j = 0; j < i; j++)
            seen |= frames[j] == frames[i];
        if (!seen)
            rc = cu_check(cuk_fp8_codes_convert(cb->stream, cb->base.dtype, (void *)frames[i],
                                                (int64_t)h * w, op->c_in, op->fp8_bound / 448.0f,
                                                expand),
                          op->name, "fp8 codes of the input");
    }
    return rc;
}

/* The 16-bit (and float32) paths of conv_core's call cc */
static int conv_paths(conv_call *cc, const void *const *frames, int n_in, int t_out, int consec,
                      int sym) {
    cuda_backend *cb = cc->cb;
    const vae_op *op = cc->op;
    const conv_state *s = cc->s;
    /* temporal convs, and 2-D ones the implicit-GEMM kernels take: 3-D (consecutive frames),
     * padded 3-D, per block or implicit GEMM, as measured (uneven padding: per block or implicit
     * GEMM) */
    const int igemm = cu_conv_igemm_ok(cc, consec);
    if ((op->kt > 1 || op->st > 1 || igemm || cu_conv_halo_ok(cc, consec)) && cb->conv3d &&
        !s->use_gemm && (sym || igemm))
        return cu_conv_run_tuned(cc, frames, n_in, t_out, consec);
    return cu_conv_blocks(cc, frames, t_out);
}

/* The convolution with y of op->c_out channels (possibly the padded count); *normed: the path
 * that made y applied the conv's pass after it too (op->norm_w, or op->act). */
static int conv_core(cuda_backend *cb, const vae_op *op, conv_state *s, const void *const *frames,
                     int n_in, int h, int w, const void *residual, void *y, int t_out, int h_out,
                     int w_out, int *normed) {
    vae_backend *be = &cb->base;
    int rc;
    conv_call cc;
    memset(&cc, 0, sizeof cc);
    cc.cb = cb, cc.op = op, cc.s = s, cc.h = h, cc.w = w, cc.ho = h_out, cc.wo = w_out;
    cc.es = be->elem_size;
    cc.fb = (size_t)h * w * op->c_in * cc.es;
    cc.yfb = (size_t)h_out * w_out * op->c_out * cc.es;
    cc.res = residual, cc.y = y;
    const int64_t hwo = (int64_t)h_out * w_out;
    const int sym = cu_conv_pads_even(op);
    /* fused bias (+ residual) in cuDNN's epilogue: 16-bit activations, a bias, residual not y */
    cc.fuse = cb->fuse && s->bias && s->bias_dt && residual != y;
    if ((s->bias || residual) && residual == y) { /* in place: y = bias + y up front */
        int ph = cu_prof_begin(cb, CU_P_BIAS);
        rc = cu_check(cuk_bias_init(cb->stream, be->dtype, y, s->bias, residual, t_out * hwo,
                                    op->c_out),
                      op->name, "bias");
        cu_prof_end(cb, ph);
        if (rc) return rc;
        cc.init_done = 1;
    }

    /* FP8 where its kernels take the conv (else bf16 below, from then on) */
    const int consec = cu_frames_consecutive(frames, n_in, 1, cc.fb);
    if (cu_conv_fp8_ok(&cc, consec)) {
        rc = cu_conv_fp8(&cc, frames[0], t_out);
        *normed = cc.post_done; /* the halo-tile kernel's */
        if (rc != VAE_EUNSUPPORTED) return rc;
        VAE_DEBUG("%s: %s; bf16 from now on", op->name, vae_last_error());
        vae_error_clear();
        s->fp8 = 0;
    }
    if (op->fp8_codes_in && (rc = codes_frames(cb, op, frames, n_in, h, w, 1))) return rc;
    rc = conv_paths(&cc, frames, n_in, t_out, consec, sym);
    *normed = cc.post_done;
    if (op->fp8_codes_in) {
        const int rc2 = codes_frames(cb, op, frames, n_in, h, w, 0);
        if (rc == VAE_OK) rc = rc2;
    }
    return rc;
}

/* ---- input upsampling (op->up) ---- */

static int cuda_conv_checked(cuda_backend *cb, const vae_op *op, conv_state *s,
                             const void *const *frames, int n_in, int h, int w,
                             const void *residual, void *y, int t_out, int h_out, int w_out,
                             int *normed);

/* op->up > 1: the phase path, else upsample into a temporary and convolve that (*normed: as
 * conv_core's). */
static int conv_up(cuda_backend *cb, const vae_op *op, conv_state *s, const void *const *frames,
                   int n_in, int h, int w, const void *residual, void *y, int t_out, int h_out,
                   int w_out, int *normed) {
    vae_backend *be = &cb->base;
    const int up = op->up;
    if (up == 2 && !s->nophase && cu_conv_phase_takes(cb, op, s) && residual != y) {
        int rc = cu_conv_up_phase(cb, op, s, frames, n_in, h, w, residual, y, normed);
        if (rc == VAE_OK && s->w) cu_conv_trim_layouts(cb, s, 0, 0, 0, 0); /* phase filters only */
        if (rc != VAE_EUNSUPPORTED) return rc;
        VAE_DEBUG("%s: %s; upsampling first", op->name, vae_last_error());
        vae_error_clear();
        s->nophase = 1;
    }
    const int hu = h * up, wu = w * up;
    const size_t es = be->elem_size, fb = (size_t)h * w * op->c_in * es, fbu = fb * up * up;
    void *tmp = be->v->alloc(be, fbu * (size_t)n_in);
    if (!tmp) return VAE_ENOMEM;
    int rc = VAE_OK;
    int ph = cu_prof_begin(cb, CU_P_RESAMPLE);
    for (int f = 0; f < n_in && rc == VAE_OK;) { /* runs of consecutive frames */
        int run = 1;
        while (f + run < n_in && (const char *)frames[f + run] == (const char *)frames[f] + run * fb)
            run++;
        rc = cu_check(cuk_upsample(cb->stream, es, frames[f], (char *)tmp + (size_t)f * fbu, run, h,
                                   w, op->c_in, up),
                      op->name, "input upsampling");
        f += run;
    }
    cu_prof_end(cb, ph);
    const void *fr[CUK_MAX_FRAMES];
    const void **list = n_in <= CUK_MAX_FRAMES ? fr : vae_malloc((size_t)n_in * sizeof *list);
    if (!list) rc = rc ? rc : vae_fail(VAE_ENOMEM, "%s: out of memory", op->name);
    if (rc == VAE_OK) {
        for (int f = 0; f < n_in; f++) list[f] = (const char *)tmp + (size_t)f * fbu;
        vae_op o = *op;
        o.up = 0;
        rc = cuda_conv_checked(cb, &o, s, list, n_in, hu, wu, residual, y, t_out, h_out, w_out,
                               normed);
    }
    if (list && list != fr) vae_free(list);
    be->v->release(be, tmp);
    return rc;
}

/* The conv's pass over its output y [n_vox][c_out] in place: its RMS norm (op->norm_w), or its
 * activation (op->act; a conv has one or the other: vae_op_check). */
static int conv_post(cuda_backend *cb, const vae_op *op, const conv_state *s, void *y,
                     int64_t n_vox) {
    if (n_vox == 0 || (!op->norm_w && op->act == VAE_ACT_NONE)) return VAE_OK;
    if (!op->norm_w) {
        int ph = cu_prof_begin(cb, CU_P_ELT);
        int rc = cu_check(cuk_eltwise(cb->stream, cb->base.dtype, 0, (int)op->act, op->act_scale, y,
                                      NULL, NULL, NULL, y, n_vox, op->c_out),
                          op->name, "activation");
        cu_prof_end(cb, ph);
        return rc;
    }
    if (!s->nw) return vae_fail(VAE_EINVAL, "%s: conv was prepared without its norm", op->name);
    int ph = cu_prof_begin(cb, CU_P_RMS);
    int rc =
        cu_check(cuk_rms_norm(cb->stream, cb->base.dtype, y, y, n_vox, op->c_out, s->nw, NULL,
                              (int)op->norm_act, op->act_scale, cu_codes_scale(op), cb->sm_count),
                 op->name, "rms norm");
    cu_prof_end(cb, ph);
    return rc;
}

int cu_conv_post(conv_call *cc, int64_t n_vox) {
    if (cc->post_done) return VAE_OK;
    const int rc = conv_post(cc->cb, cc->op, cc->s, cc->y, n_vox);
    cc->post_done = rc == VAE_OK;
    return rc;
}

int cuda_conv(vae_backend *be, const vae_op *op, void *state, const void *const *frames, int n_in,
              int h, int w, const void *residual, void *y, int t_out, int h_out, int w_out) {
    cuda_backend *cb = cu_be(be);
    conv_state *s = state;
    if (op->kind != VAE_OP_CONV) return vae_fail(VAE_EINVAL, "%s: not a conv op", op->name);
    int rc = conv_check_params(op);
    if (rc) return rc;
    if (!s) return vae_fail(VAE_EINVAL, "%s: conv was not prepared", op->name);
    if ((rc = vae_conv_check_call(op, frames, n_in, h, w, y, t_out, h_out, w_out))) return rc;
    const int up = op->up > 1 ? op->up : 1;
    if ((rc = cu_enter(cb, op->name))) return rc;
    cu_prof_name(cb, op->name);
    int normed = 0; /* the path applied op->norm_w or op->act itself */
    rc = up > 1 ? conv_up(cb, op, s, frames, n_in, h, w, residual, y, t_out, h_out, w_out, &normed)
                : cuda_conv_checked(cb, op, s, frames, n_in, h, w, residual, y, t_out, h_out, w_out,
                                    &normed);
    return rc || normed ? rc : conv_post(cb, op, s, y, (int64_t)t_out * h_out * w_out);
}

/* The geometry the direct kernels take (cuda_narrow_conv.cu, cuda_stem_conv.cu): 3x3 with stride
 * 1 and padding 1 (the causal temporal padding is in the frame list), one frame list for all
 * output frames. */
static int direct_geometry_ok(const vae_op *op, int n_in, int t_out) {
    return op->kh == 3 && op->kw == 3 && op->sh == 1 && op->sw == 1 && op->st == 1 &&
           op->pad_h[0] == 1 && op->pad_h[1] == 1 && op->pad_w[0] == 1 && op->pad_w[1] == 1 &&
           n_in <= CUK_MAX_FRAMES && n_in == t_out + op->kt - 1;
}

/* The narrow heads' own kernel (cuda_narrow_conv.cu): 16-bit, sizes it takes (at most
 * CUK_NARROW_MAX outputs, input channels a multiple of 16, filters within its shared memory),
 * frames 16-byte aligned (vector loads). */
static int narrow_ok(const cuda_backend *cb, const vae_op *op, const void *const *frames, int n_in,
                     int t_out, int h, int w) {
    if (!cb->narrow || cb->base.dtype == VAE_DTYPE_F32 ||
        !cuk_narrow_conv_fits(op->kt, op->c_in, op->c_out, h, w) ||
        !direct_geometry_ok(op, n_in, t_out))
        return 0;
    for (int i = 0; i < n_in; i++)
        if ((uintptr_t)frames[i] % 16) return 0;
    return 1;
}

/* The encoders' first convs (a few channels in, 32-128 out; cuda_stem_conv.cu): 16-bit, 4-byte
 * aligned output and residual; not under VAE_CUDA_NARROW=0. */
static int stem_ok(const cuda_backend *cb, const vae_op *op, int n_in, int t_out, int h, int w,
                   const void *residual, const void *y) {
    return cb->narrow && cb->base.dtype != VAE_DTYPE_F32 &&
           cuk_stem_conv_fits(op->kt, op->c_in, op->c_out, h, w) &&
           direct_geometry_ok(op, n_in, t_out) && (uintptr_t)y % 4 == 0 &&
           (uintptr_t)residual % 4 == 0;
}

/* The stem kernel applies a ReLU after the conv (TAEHV's encoders) in its epilogue. */
static int stem_relu(const vae_op *op) {
    return op->act == VAE_ACT_RELU;
}

/* A narrow head (stem 0) or a stem (stem 1) by its kernel, on the filters [kp][kt][3][3][c_in]
 * (kt = 1: the 2-D layout, the same). */
static int run_direct(cuda_backend *cb, const vae_op *op, conv_state *s, const void *const *frames,
                      int n_in, int h, int w, const void *residual, void *y, int t_out, int stem) {
    int rc = cu_conv_need_w3(cb, op, s);
    if (rc) return rc;
    cuk_frames fr;
    memcpy(fr.p, frames, (size_t)n_in * sizeof *frames);
    const void *wt = op->kt == 1 ? s->w : s->w3;
    int ph = cu_prof_begin(cb, CU_P_NARROW);
    if (stem)
        rc = cu_check(cuk_stem_conv(cb->stream, cb->base.dtype, &fr, op->kt, t_out, h, w, op->c_in,
                                    op->c_out, wt, s->bias, residual, stem_relu(op), y),
                      op->name, "stem conv");
    else
        rc = cu_check(cuk_narrow_conv(cb->stream, cb->base.dtype, &fr, op->kt, t_out, h, w,
                                      op->c_in, op->c_out, wt, s->bias, residual, y),
                      op->name, "narrow conv");
    cu_prof_end(cb, ph);
    if (rc == VAE_OK && stem) cb->n_conv_stem++;
    return rc;
}

/* 1x1x1 convs with few channels (the latent side's conv2 and the encoder's conv1) by their
 * own kernel (cuda_narrow_conv.cu): a few MACs a byte, memory speed on the CUDA cores, and no
 * cuDNN in the process for them. The 2-D weight layout of a 1x1 is [c_out][c_in]. Up to 48 x 48
 * channels (the largest of the models): past that, MACs per byte outgrow the CUDA cores. Not
 * under VAE_CUDA_PW=gemm (every 1x1 on cuBLAS). */
enum { POINTWISE_MACS = 48 * 48 };
static int pointwise_ok(const cuda_backend *cb, const vae_op *op, int n_in, int t_out) {
    return cb->narrow && cb->pw_dnn && op->kt == 1 && op->kh == 1 && op->kw == 1 && op->st == 1 &&
           op->sh == 1 && op->sw == 1 && op->pad_h[0] == 0 && op->pad_h[1] == 0 &&
           op->pad_w[0] == 0 && op->pad_w[1] == 0 && op->c_in <= CUK_POINTWISE_MAX &&
           op->c_out <= CUK_POINTWISE_MAX && op->c_in * op->c_out <= POINTWISE_MACS &&
           n_in == t_out && n_in <= CUK_MAX_FRAMES;
}

static int run_pointwise(cuda_backend *cb, const vae_op *op, conv_state *s,
                         const void *const *frames, int n_in, int h, int w, const void *residual,
                         void *y) {
    int rc = cu_conv_need_w2(cb, op, s);
    if (rc) return rc;
    cuk_frames fr;
    memcpy(fr.p, frames, (size_t)n_in * sizeof *frames);
    int ph = cu_prof_begin(cb, CU_P_NARROW);
    rc = cu_check(cuk_pointwise_conv(cb->stream, cb->base.dtype, &fr, n_in, (int64_t)h * w,
                                     op->c_in, op->c_out, s->w, s->bias, residual, y),
                  op->name, "pointwise conv");
    cu_prof_end(cb, ph);
    return rc;
}

/* After the checks (no input upsampling): narrow heads and stems by their kernels, other narrow
 * outputs padded, else the conv itself. */
static int cuda_conv_checked(cuda_backend *cb, const vae_op *op, conv_state *s,
                             const void *const *frames, int n_in, int h, int w,
                             const void *residual, void *y, int t_out, int h_out, int w_out,
                             int *normed) {
    vae_backend *be = &cb->base;
    int rc;
    *normed = 0;
    if (h * (int64_t)w > INT32_MAX / 2 || (int64_t)h_out * w_out > INT32_MAX / 2)
        return vae_fail(VAE_EUNSUPPORTED, "%s: frame of %dx%d is too large", op->name, h, w);
    if (s->depthwise)
        return cu_conv_depthwise(cb, op, s, frames, h, w, residual, y, t_out, h_out, w_out);
    if (pointwise_ok(cb, op, n_in, t_out))
        return run_pointwise(cb, op, s, frames, n_in, h, w, residual, y);
    if (narrow_ok(cb, op, frames, n_in, t_out, h, w))
        return run_direct(cb, op, s, frames, n_in, h, w, residual, y, t_out, 0);
    if (stem_ok(cb, op, n_in, t_out, h, w, residual, y)) {
        *normed = stem_relu(op);
        return run_direct(cb, op, s, frames, n_in, h, w, residual, y, t_out, 1);
    }
    if (s->kp == op->c_out)
        return conv_core(cb, op, s, frames, n_in, h, w, residual, y, t_out, h_out, w_out, normed);
    /* narrow output: compute kp channels into a temporary, copy out the real ones (+ residual) */
    vae_op opk = *op;
    opk.c_out = s->kp;
    opk.act = VAE_ACT_NONE; /* after the residual, which comes with the copy: the pass on y */
    const int64_t rows = (int64_t)t_out * h_out * w_out;
    void *tmp = be->v->alloc(be, (size_t)rows * s->kp * be->elem_size);
    if (!tmp) return VAE_ENOMEM;
    int tmp_normed; /* never: the kernels that apply a norm make all of c_out */
    rc = conv_core(cb, &opk, s, frames, n_in, h, w, NULL, tmp, t_out, h_out, w_out, &tmp_normed);
    if (rc == VAE_OK) {
        int ph = cu_prof_begin(cb, CU_P_BIAS);
        rc = cu_check(cuk_narrow(cb->stream, be->dtype, tmp, s->kp, residual, y, op->c_out, rows),
                      op->name, "narrow");
        cu_prof_end(cb, ph);
    }
    be->v->release(be, tmp);
    return rc;
}

int cuda_conv_window(vae_backend *be, const vae_op *op, void *state) {
    cuda_backend *cb = cu_be(be);
    const conv_state *s = state;
    if (!s || op->kind != VAE_OP_CONV) return 1;
    if (!cb->conv3d || s->use_gemm || s->no3d || op->pad_h[0] != op->pad_h[1] ||
        op->pad_w[0] != op->pad_w[1])
        return 0;
    /* capped scratch: the 3-D path may be the only one that fits, and it needs the window */
    return s->main_nin > 0 && !cb->scratch_capped
               ? s->main_path == PATH_3D || s->main_path == PATH_IGEMM || s->main_path == PATH_HALO
               : 1;
}

/* The scratch a conv needs at least for t input frames of h x w, from the rules above: the
 * gathered block (at least one output frame's kt frames, else as many as scratch_limit holds),
 * the channel-padded 3-D window (16-bit, likewise) and the four phase planes of an upsampling
 * conv; the largest of the paths tuning may choose. minimal: the least instead, i.e. nothing for
 * a conv the 3-D path can take over its contiguous window (cu_conv_run_tuned then keeps to the
 * paths that fit). */
int64_t cuda_conv_scratch_need(const cuda_backend *cb, const vae_op *op, int t, int h, int w,
                               int minimal) {
    const vae_backend *be = &cb->base;
    const int64_t es = (int64_t)be->elem_size, lim = (int64_t)cb->scratch_limit;
    const int f16 = be->dtype != VAE_DTYPE_F32, frames = t > 1 ? t : 1;
    const int spatial = op->kh > 1 || op->kw > 1 || op->kt > 1;
    if (vae_op_grouped(op)) return 0; /* its kernel reads the frames in place */
    int kp = op->c_out;
    if (f16 && spatial && op->c_out % 8 && op->c_out < 64 && cb->conv_mode != CU_CONV_GEMM &&
        cb->kpad)
        kp = (op->c_out + 7) / 8 * 8;
#define FIT(one, all) ((one) > (lim < (all) ? lim : (all)) ? (one) : (lim < (all) ? lim : (all)))
    if (op->up == 2 && cb->phase && op->kt == 1 && op->kh == 3 && op->kw == 3) {
        const int64_t ph = 4 * (int64_t)(h + 1) * (w + 1) * kp * es;
        return FIT(ph, ph * frames);
    }
    if (op->up > 1 || !spatial) return 0; /* upsampled temporaries come from the pool */
    const int sym = op->pad_h[0] == op->pad_h[1] && op->pad_w[0] == op->pad_w[1];
    /* fp8: the window's E4M3 copy, one byte a value (the same frames as the 3-D path's window) */
    const int64_t q8 =
        cu_conv_fp8_takes(cb, op) ? (int64_t)(frames + op->kt - 1) * h * w * op->c_in : 0;
    if (minimal && q8) return q8;
    if (minimal && (op->kt > 1 || op->st > 1) && sym && cb->conv3d &&
        cb->conv_mode != CU_CONV_GEMM)
        return 0; /* the 3-D path over the executor's contiguous window: no scratch */
    int cg = op->kt * op->c_in;
    if (f16 && cg % 8 && (op->kh > 1 || op->kw > 1) && cb->cpad) cg = (cg + 7) / 8 * 8;
    const int64_t per = (int64_t)cu_conv_gathered_bytes(op, h, w, cg, (size_t)es);
    int64_t need = FIT(per, per * frames);
    const int cp = conv_pad_channels(cb, op);
    if (op->kt > 1 && sym && cp) {
        const int64_t in_frame = (int64_t)h * w * cp * es;
        const int64_t p = FIT(op->kt * in_frame, (frames + op->kt - 1) * in_frame);
        if (p > need) need = p;
    }
#undef FIT
    return need > q8 ? need : q8;
}
