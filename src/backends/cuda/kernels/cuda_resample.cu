/* cuda_resample.cu -- UPSAMPLE (nearest), SHUFFLE_UP, SHUFFLE_DOWN (program.h formulas), and the
 * conv input gathers (temporal concatenation with explicit zero padding, im2col).
 *
 * Pure data movement is done in "units" of 16, 8, 4 or 2 bytes: the widest that divides a
 * pixel's channel run (c * elem) and the alignment of every pointer involved, so that these
 * kernels are dtype-agnostic and move channels-last rows with vector loads.
 */
#include "backends/cuda/kernels/cuda_common.cuh"

/* widest unit size (bytes) dividing run and the alignment of the pointers */
static size_t unit_for(size_t run, const void *const *ptrs, int n) {
    size_t u = 16;
    while (u > 2 && run % u) u >>= 1;
    for (int i = 0; i < n && u > 2; i++)
        while (u > 2 && ((uintptr_t)ptrs[i] % u)) u >>= 1;
    return u;
}

#define CU_UNIT_DISPATCH(u, F, ...)                                                                \
    do {                                                                                           \
        switch (u) {                                                                               \
        case 16: F<uint4>(__VA_ARGS__); break;                                                     \
        case 8: F<uint2>(__VA_ARGS__); break;                                                      \
        case 4: F<unsigned int>(__VA_ARGS__); break;                                               \
        default: F<unsigned short>(__VA_ARGS__); break;                                            \
        }                                                                                          \
    } while (0)

/* Where flat index i lies in a channels-last [f][h][w][c] tensor: its channel, column, row and
 * outer index. The divisions are most of these kernels' cost: I is 32-bit where the sizes allow. */
template <typename I> struct nhwc_pos {
    int c, x, y;
    I f;
};
template <typename I>
static __device__ __forceinline__ nhwc_pos<I> nhwc_of(I i, int c, I w, I h) {
    nhwc_pos<I> q;
    q.c = (int)(i % c);
    const I pix = i / c;
    q.x = (int)(pix % w);
    const I r = pix / w;
    q.y = (int)(r % h);
    q.f = r / h;
    return q;
}

/* ---- nearest upsample ---- (32-bit index math when the sizes allow: it is the costly part) */
template <typename U, typename I>
static __global__ void upsample_kernel(const U *x, U *y, int h, int w, int cu, int fs, I n) {
    const I ho = (I)h * fs, wo = (I)w * fs;
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        const nhwc_pos<I> o = nhwc_of(i, cu, wo, ho);
        y[i] = x[((o.f * h + o.y / fs) * w + o.x / fs) * cu + o.c];
    }
}

template <typename U>
static void launch_upsample(cudaStream_t s, const void *x, void *y, int n, int h, int w, size_t run,
                            int fs) {
    int cu = (int)(run / sizeof(U));
    int64_t total = (int64_t)n * h * fs * w * fs * cu;
    if (total < INT32_MAX)
        upsample_kernel<U, int><<<cu_grid(total, 256), 256, 0, s>>>((const U *)x, (U *)y, h, w, cu,
                                                                   fs, (int)total);
    else
        upsample_kernel<U, int64_t><<<cu_grid(total, 256), 256, 0, s>>>((const U *)x, (U *)y, h, w,
                                                                       cu, fs, total);
}

extern "C" cudaError_t cuk_upsample(cudaStream_t s, size_t elem, const void *x, void *y, int n,
                                    int h, int w, int c, int fs) {
    if ((int64_t)n * h * w * c == 0) return cudaSuccess;
    size_t run = (size_t)c * elem;
    const void *ptrs[2] = {x, y};
    size_t u = unit_for(run, ptrs, 2);
    CU_UNIT_DISPATCH(u, launch_upsample, s, x, y, n, h, w, run, fs);
    return cudaGetLastError();
}

/* ---- SHUFFLE_UP: y[t*ft+ti][h*fs+hi][w*fs+wi][o] = x[t][h][w][tab[ti,hi,wi,o]] ---- */
template <typename E>
static __global__ void shuffle_up_kernel(const E *x, E *y, int h, int w, int ci, int co, int ft,
                                         int fs, const int *tab, int64_t n) {
    const int ho = h * fs, wo = w * fs;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const nhwc_pos<int64_t> o = nhwc_of(i, co, (int64_t)wo, (int64_t)ho);
        int64_t t = o.f / ft;
        int ti = (int)(o.f % ft);
        int ch = tab[((ti * fs + o.y % fs) * fs + o.x % fs) * co + o.c];
        y[i] = x[((t * h + o.y / fs) * w + o.x / fs) * ci + ch];
    }
}

/* 16 bytes (V elements of E) of output channels per thread; CONTIG: their V source channels are
 * consecutive and 16-byte aligned (one vector load), else V table lookups. */
template <typename E, int V, bool CONTIG, typename I>
static __global__ void shuffle_up_vec_kernel(const E *x, E *y, int h, int w, int ci, int co, int ft,
                                             int fs, const int *tab, I n) {
    const I ho = (I)h * fs, wo = (I)w * fs;
    const int cu = co / V;
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        const nhwc_pos<I> o = nhwc_of(i, cu, wo, ho);
        const I t = o.f / ft;
        const int ti = (int)(o.f % ft);
        const int *tb = tab + ((ti * fs + o.y % fs) * fs + o.x % fs) * co + o.c * V;
        const E *xp = x + ((t * h + o.y / fs) * (I)w + o.x / fs) * ci;
        if (CONTIG) {
            *(uint4 *)(y + i * V) = *(const uint4 *)(xp + tb[0]);
        } else {
            union {
                E e[V];
                uint4 q;
            } v;
#pragma unroll
            for (int k = 0; k < V; k++) v.e[k] = xp[tb[k]];
            *(uint4 *)(y + i * V) = v.q;
        }
    }
}

template <typename E, int V, bool CONTIG>
static void launch_shuffle_up_vec_as(cudaStream_t s, const void *x, void *y, int h, int w, int ci,
                                     int co, int ft, int fs, const int *tab, int64_t units,
                                     bool small) {
    const unsigned grid = cu_grid(units, 256);
    if (small)
        shuffle_up_vec_kernel<E, V, CONTIG, int><<<grid, 256, 0, s>>>(
            (const E *)x, (E *)y, h, w, ci, co, ft, fs, tab, (int)units);
    else
        shuffle_up_vec_kernel<E, V, CONTIG, int64_t><<<grid, 256, 0, s>>>(
            (const E *)x, (E *)y, h, w, ci, co, ft, fs, tab, units);
}

template <typename E, int V>
static void launch_shuffle_up_vec(cudaStream_t s, const void *x, void *y, int n_in, int h, int w,
                                  int ci, int co, int ft, int fs, const int *tab, int contig) {
    const int64_t units = (int64_t)n_in * ft * h * fs * w * fs * (co / V);
    const int64_t xin = (int64_t)n_in * h * w * ci;
    const bool small = units * V < INT32_MAX && xin < INT32_MAX;
    if (contig)
        launch_shuffle_up_vec_as<E, V, true>(s, x, y, h, w, ci, co, ft, fs, tab, units, small);
    else
        launch_shuffle_up_vec_as<E, V, false>(s, x, y, h, w, ci, co, ft, fs, tab, units, small);
}

extern "C" cudaError_t cuk_shuffle_up(cudaStream_t s, size_t elem, const void *x, void *y,
                                      int n_in, int h, int w, int ci, int co, int ft, int fs,
                                      const int *tab, int contig_align) {
    int64_t n = (int64_t)n_in * ft * h * fs * w * fs * co;
    if (n == 0) return cudaSuccess;
    const int V = (int)(16 / elem);
    if ((elem == 2 || elem == 4) && co % V == 0 && cu_aligned16(y, NULL, NULL)) {
        /* contiguous runs: every sub-position reads channels base..base+co-1, base % V == 0 */
        const int contig = contig_align >= V && ci % V == 0 && cu_aligned16(x, NULL, NULL);
        if (elem == 2)
            launch_shuffle_up_vec<unsigned short, 8>(s, x, y, n_in, h, w, ci, co, ft, fs, tab,
                                                     contig);
        else
            launch_shuffle_up_vec<unsigned int, 4>(s, x, y, n_in, h, w, ci, co, ft, fs, tab, contig);
        return cudaGetLastError();
    }
    if (elem == 4)
        shuffle_up_kernel<unsigned int><<<cu_grid(n, 256), 256, 0, s>>>(
            (const unsigned int *)x, (unsigned int *)y, h, w, ci, co, ft, fs, tab, n);
    else
        shuffle_up_kernel<unsigned short><<<cu_grid(n, 256), 256, 0, s>>>(
            (const unsigned short *)x, (unsigned short *)y, h, w, ci, co, ft, fs, tab, n);
    return cudaGetLastError();
}

/* ---- SHUFFLE_DOWN: y[j][oh][ow][o] = mean over g of window frame ti at (oh*fs+hi, ow*fs+wi, c),
 * (ti, hi, wi, c) = tab[o*group + g] ---- */
template <typename T>
static __global__ void shuffle_down_kernel(cuk_frames fr, int h, int w, int ci, int co, int ft,
                                           int fs, int group, const int4 *tab, T *y, int64_t n) {
    const int ho = h / fs, wo = w / fs;
    const float inv = 1.0f / (float)group;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const nhwc_pos<int64_t> o = nhwc_of(i, co, (int64_t)wo, (int64_t)ho);
        float sum = 0.0f;
        for (int g = 0; g < group; g++) {
            int4 e = tab[o.c * group + g];
            const T *src = (const T *)fr.p[(int)o.f * ft + e.x];
            sum += cu_ld(src, ((int64_t)(o.y * fs + e.y) * w + (o.x * fs + e.z)) * ci + e.w);
        }
        cu_st(y, i, sum * inv);
    }
}

template <typename T>
static void launch_shuffle_down(cudaStream_t s, const cuk_frames *fr, int t_out, int h, int w,
                                int ci, int co, int ft, int fs, int group, const int *tab, void *y) {
    int64_t n = (int64_t)t_out * (h / fs) * (w / fs) * co;
    shuffle_down_kernel<T><<<cu_grid(n, 256), 256, 0, s>>>(*fr, h, w, ci, co, ft, fs, group,
                                                           (const int4 *)tab, (T *)y, n);
}

extern "C" cudaError_t cuk_shuffle_down(cudaStream_t s, int dtype, const cuk_frames *frames,
                                        int t_out, int h, int w, int ci, int co, int ft, int fs,
                                        int group, const int *tab, void *y) {
    if ((int64_t)t_out * (h / fs) * (w / fs) * co == 0) return cudaSuccess;
    if (t_out * ft > CUK_MAX_FRAMES) return cudaErrorInvalidValue;
    CU_DISPATCH(dtype, launch_shuffle_down, s, frames, t_out, h, w, ci, co, ft, fs, group, tab, y);
    return cudaGetLastError();
}

/* ---- conv gather: dst[j][yy][xx][dt][ci] = frame[j*st+dt][yy-pt][xx-pl][ci] or 0 ----
 * (32-bit index math when the sizes allow: the divisions are most of the cost) */
template <typename U, typename I>
static __global__ void gather_kernel(cuk_frames fr, int st, int kt, int h, int w, int cu, int hp,
                                     int wp, int pt, int pl, U *dst, I n) {
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        const int k = (int)(i % cu);
        const I rest = i / cu;
        const int dt = (int)(rest % kt);
        const I pix = rest / kt;
        const int xx = (int)(pix % wp);
        const I r = pix / wp;
        const int yy = (int)(r % hp);
        const int j = (int)(r / hp);
        const int iy = yy - pt, ix = xx - pl;
        U v;
        if (iy >= 0 && iy < h && ix >= 0 && ix < w) {
            v = ((const U *)fr.p[j * st + dt])[((I)iy * w + ix) * cu + k];
        } else {
            memset(&v, 0, sizeof v);
        }
        dst[i] = v;
    }
}

template <typename U>
static void launch_gather(cudaStream_t s, const cuk_frames *fr, int tb, int st, int kt, int h,
                          int w, size_t run, int pt, int pb, int pl, int pr, void *dst) {
    int cu = (int)(run / sizeof(U)), hp = h + pt + pb, wp = w + pl + pr;
    int64_t n = (int64_t)tb * hp * wp * kt * cu;
    if (n < INT32_MAX && (int64_t)h * w * cu < INT32_MAX)
        gather_kernel<U, int><<<cu_grid(n, 256), 256, 0, s>>>(*fr, st, kt, h, w, cu, hp, wp, pt, pl,
                                                             (U *)dst, (int)n);
    else
        gather_kernel<U, int64_t><<<cu_grid(n, 256), 256, 0, s>>>(*fr, st, kt, h, w, cu, hp, wp, pt,
                                                                 pl, (U *)dst, n);
}

extern "C" cudaError_t cuk_conv_gather(cudaStream_t s, size_t elem, const cuk_frames *frames,
                                       int tb, int st, int kt, int h, int w, int c, int pt, int pb,
                                       int pl, int pr, void *dst) {
    int nf = (tb - 1) * st + kt;
    if (tb < 1 || nf > CUK_MAX_FRAMES) return cudaErrorInvalidValue;
    size_t run = (size_t)c * elem;
    const void *ptrs[CUK_MAX_FRAMES + 1];
    for (int i = 0; i < nf; i++) ptrs[i] = frames->p[i];
    ptrs[nf] = dst;
    size_t u = unit_for(run, ptrs, nf + 1);
    CU_UNIT_DISPATCH(u, launch_gather, s, frames, tb, st, kt, h, w, run, pt, pb, pl, pr, dst);
    return cudaGetLastError();
}

/* Gather with the channel count padded: dst[j][yy][xx][k] for k < cg, = the gather's
 * [dt*c + ci] for k < kt*c, zero above (narrow inputs: tensor-core friendly channel counts). */
template <typename E>
static __global__ void gather_pad_kernel(cuk_frames fr, int st, int kt, int h, int w, int c, int cg,
                                         int hp, int wp, int pt, int pl, E *dst, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        const nhwc_pos<int64_t> o = nhwc_of(i, cg, (int64_t)wp, (int64_t)hp);
        const int k = o.c, iy = o.y - pt, ix = o.x - pl;
        E v = 0;
        if (k < kt * c && iy >= 0 && iy < h && ix >= 0 && ix < w)
            v = ((const E *)fr.p[(int)o.f * st + k / c])[((int64_t)iy * w + ix) * c + k % c];
        dst[i] = v;
    }
}

extern "C" cudaError_t cuk_conv_gather_pad(cudaStream_t s, size_t elem, const cuk_frames *frames,
                                           int tb, int st, int kt, int h, int w, int c, int cg,
                                           int pt, int pb, int pl, int pr, void *dst) {
    int nf = (tb - 1) * st + kt;
    if (tb < 1 || nf > CUK_MAX_FRAMES || cg < kt * c) return cudaErrorInvalidValue;
    const int hp = h + pt + pb, wp = w + pl + pr;
    const int64_t n = (int64_t)tb * hp * wp * cg;
    if (elem == 4)
        gather_pad_kernel<unsigned int><<<cu_grid(n, 256), 256, 0, s>>>(
            *frames, st, kt, h, w, c, cg, hp, wp, pt, pl, (unsigned int *)dst, n);
    else
        gather_pad_kernel<unsigned short><<<cu_grid(n, 256), 256, 0, s>>>(
            *frames, st, kt, h, w, c, cg, hp, wp, pt, pl, (unsigned short *)dst, n);
    return cudaGetLastError();
}

/* ---- im2col: col[q][dh][dw][dt][ci] for output pixel p = p0 + q ---- */
template <typename U>
static __global__ void im2col_kernel(cuk_frames fr, int j_base, int st, int kt, int h, int w,
                                     int cu, int kh, int kw, int sh, int sw, int pt, int pl, int ho,
                                     int wo, int64_t p0, U *col, int64_t n) {
    const int64_t hwo = (int64_t)ho * wo;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int k = (int)(i % cu);
        int64_t rest = i / cu;
        int dt = (int)(rest % kt);
        rest /= kt;
        int dw = (int)(rest % kw);
        rest /= kw;
        int dh = (int)(rest % kh);
        int64_t p = p0 + rest / kh;
        int j = (int)(p / hwo);
        int64_t pp = p % hwo;
        int oh = (int)(pp / wo), ow = (int)(pp % wo);
        int iy = oh * sh - pt + dh, ix = ow * sw - pl + dw;
        U v;
        if (iy >= 0 && iy < h && ix >= 0 && ix < w) {
            v = ((const U *)fr.p[(j - j_base) * st + dt])[((int64_t)iy * w + ix) * cu + k];
        } else {
            memset(&v, 0, sizeof v);
        }
        col[i] = v;
    }
}

template <typename U>
static void launch_im2col(cudaStream_t s, const cuk_frames *fr, int j_base, int st, int kt, int h,
                          int w, size_t run, int kh, int kw, int sh, int sw, int pt, int pl, int ho,
                          int wo, int64_t p0, int64_t np, void *col) {
    int cu = (int)(run / sizeof(U));
    int64_t n = np * kh * kw * kt * cu;
    im2col_kernel<U><<<cu_grid(n, 256), 256, 0, s>>>(*fr, j_base, st, kt, h, w, cu, kh, kw, sh, sw,
                                                    pt, pl, ho, wo, p0, (U *)col, n);
}

extern "C" cudaError_t cuk_im2col(cudaStream_t s, size_t elem, const cuk_frames *frames,
                                  int j_base, int st, int kt, int h, int w, int c, int kh, int kw,
                                  int sh, int sw, int pt, int pl, int ho, int wo, int64_t p0,
                                  int64_t np, void *col) {
    if (np <= 0) return cudaSuccess;
    const int64_t hwo = (int64_t)ho * wo;
    int nf = (int)((p0 + np - 1) / hwo - j_base) * st + kt;
    if (nf > CUK_MAX_FRAMES || p0 / hwo < j_base) return cudaErrorInvalidValue;
    size_t run = (size_t)c * elem;
    const void *ptrs[CUK_MAX_FRAMES + 1];
    for (int i = 0; i < nf; i++) ptrs[i] = frames->p[i];
    ptrs[nf] = col;
    size_t u = unit_for(run, ptrs, nf + 1);
    CU_UNIT_DISPATCH(u, launch_im2col, s, frames, j_base, st, kt, h, w, run, kh, kw, sh, sw, pt, pl,
                     ho, wo, p0, np, col);
    return cudaGetLastError();
}

/* ---- channel padding: dst[f][p][k] = frame f [p][k] for k < c, 0 for c <= k < cp (16-byte
 * vectors; c * elem and cp * elem multiples of 16) ---- */
template <typename I>
static __global__ void frames_pad_kernel(cuk_frames fr, I hw, int cv, int cpv, uint4 *dst, I n) {
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        const int k = (int)(i % cpv);
        const I r = i / cpv;
        const I p = r % hw;
        const int f = (int)(r / hw);
        uint4 v = make_uint4(0, 0, 0, 0);
        if (k < cv) v = ((const uint4 *)fr.p[f])[p * cv + k];
        dst[i] = v;
    }
}

extern "C" cudaError_t cuk_frames_pad(cudaStream_t s, size_t elem, const cuk_frames *frames, int nf,
                                      int64_t hw, int c, int cp, void *dst) {
    if (nf < 1 || nf > CUK_MAX_FRAMES || (c * elem) % 16 || (cp * elem) % 16 || cp < c)
        return cudaErrorInvalidValue;
    for (int i = 0; i < nf; i++)
        if ((uintptr_t)frames->p[i] % 16) return cudaErrorInvalidValue;
    if ((uintptr_t)dst % 16) return cudaErrorInvalidValue;
    const int cv = (int)(c * elem / 16), cpv = (int)(cp * elem / 16);
    const int64_t n = (int64_t)nf * hw * cpv;
    if (n < INT32_MAX)
        frames_pad_kernel<int><<<cu_grid(n, 256), 256, 0, s>>>(*frames, (int)hw, cv, cpv,
                                                              (uint4 *)dst, (int)n);
    else
        frames_pad_kernel<int64_t><<<cu_grid(n, 256), 256, 0, s>>>(*frames, hw, cv, cpv,
                                                                  (uint4 *)dst, n);
    return cudaGetLastError();
}

/* ---- nearest x2 + 3x3 conv as four 2x2 phase convs: the interleave ----
 * ph: 4 phase outputs (a*2+b) of [tb][h+1][w+1][c]; y[f][2i+a][2j+b][k] = ph_ab[f][i+a][j+b][k]
 * (+ bias[k]) (+ res), then the conv's activation; 16-byte vectors (c % N == 0, aligned). */
template <typename T, typename I>
static __global__ void phase_interleave_kernel(const T *ph, I plane, int h, int w, int c,
                                               const float *bias, const T *res, int act, float as,
                                               T *y, I nvec) {
    const int N = vec16<T>::N;
    const I w2 = (I)2 * w, h2 = (I)2 * h;
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < nvec; i += (I)gridDim.x * blockDim.x) {
        const I e = i * N;
        const nhwc_pos<I> o = nhwc_of(e, c, w2, h2);
        const int k0 = o.c, a = o.y & 1, b = o.x & 1, yi = o.y >> 1, xj = o.x >> 1;
        const T *src = ph + (a * 2 + b) * plane + ((o.f * (h + 1) + (yi + a)) * (I)(w + 1) + (xj + b)) * c + k0;
        float v[N], u[N];
        vec16<T>::load(src, v);
        if (bias) {
#pragma unroll
            for (int q = 0; q < N; q++) v[q] += bias[k0 + q];
        }
        if (res) {
            vec16<T>::load(res + e, u);
#pragma unroll
            for (int q = 0; q < N; q++) v[q] += u[q];
        }
        if (act != CU_ACT_NONE) {
#pragma unroll
            for (int q = 0; q < N; q++)
                v[q] = cu_act_t<T>(act, as, v[q]);
        }
        vec16<T>::store(y + e, v);
    }
}

template <typename T>
static void launch_phase_interleave(cudaStream_t s, const void *ph, int tb, int h, int w, int c,
                                    const float *bias, const void *res, int act, float as,
                                    void *y) {
    const int N = vec16<T>::N;
    const int64_t plane = (int64_t)tb * (h + 1) * (w + 1) * c;
    const int64_t nvec = (int64_t)tb * 2 * h * 2 * w * c / N;
    if (4 * plane < INT32_MAX && nvec * N < INT32_MAX)
        phase_interleave_kernel<T, int><<<cu_grid(nvec, 256), 256, 0, s>>>(
            (const T *)ph, (int)plane, h, w, c, bias, (const T *)res, act, as, (T *)y, (int)nvec);
    else
        phase_interleave_kernel<T, int64_t><<<cu_grid(nvec, 256), 256, 0, s>>>(
            (const T *)ph, plane, h, w, c, bias, (const T *)res, act, as, (T *)y, nvec);
}

extern "C" cudaError_t cuk_phase_interleave(cudaStream_t s, int dtype, const void *ph, int tb,
                                            int h, int w, int c, const float *bias, const void *res,
                                            int act, float act_scale, void *y) {
    const int N = dtype == CU_F32 ? 4 : 8;
    if (c % N || !cu_aligned16(ph, res, y)) return cudaErrorInvalidValue;
    if ((int64_t)tb * h * w * c == 0) return cudaSuccess;
    CU_DISPATCH(dtype, launch_phase_interleave, s, ph, tb, h, w, c, bias, res, act, act_scale, y);
    return cudaGetLastError();
}
