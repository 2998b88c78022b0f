/* dtype.h -- scalar conversions between storage formats and float32 (internal, header-only). */
#ifndef VAE_DTYPE_H
#define VAE_DTYPE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float vae_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ff;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even, with overflow to Inf and subnormals. */
static inline uint16_t vae_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t man = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = sign | ((uint32_t)exp << 10) | (man >> 13), rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)h;
}

static inline float vae_bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t vae_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* OCP FP8 E4M3 (finite only, 0x7f/0xff = NaN) and E5M2 (IEEE-like). */
static inline float vae_f8e4m3_to_f32(uint8_t v) {
    int sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 7;
    float r;
    if (exp == 0xf && man == 7) return NAN;
    if (exp == 0) r = ldexpf((float)man, -9);
    else r = ldexpf((float)(8 + man), exp - 10);
    return sign ? -r : r;
}

static inline float vae_f8e5m2_to_f32(uint8_t v) { return vae_f16_to_f32((uint16_t)(v << 8)); }

/* x rounded to the nearest E4M3 value (ties to even), saturating at +-448 (what the GPU's
 * satfinite conversion does); NaN stays NaN. Normals have 3 mantissa bits from 2^-6 up,
 * subnormals are multiples of 2^-9. On the float's bits, without branches (a loop of them
 * vectorises: the fp8 weights' rounding makes ~10^7 a model): both the normal and the subnormal
 * result, then selects; the subnormals rounded to an integer by adding and taking away 2^23
 * (ties to even under the default rounding mode). The same value for every float as
 * ldexp(nearbyint(ldexp(|x|, -q)), q), q = max(exponent - 3, -9), saturated (checked on all
 * 2^32 floats). */
static inline float vae_f32_round_e4m3(float x) {
    uint32_t u, sub;
    memcpy(&u, &x, 4);
    const uint32_t m = u & 0x7fffffffu;
    uint32_t r = (m + 0x7ffffu + ((m >> 20) & 1u)) & 0xfff00000u; /* 3 mantissa bits, to even */
    r = (int32_t)r < 0x43e00000 ? r : 0x43e00000u;                /* 464 and up (inf): 448 */
    float a;
    memcpy(&a, &m, 4);
    a = ((a * 512.0f + 8388608.0f) - 8388608.0f) * (1.0f / 512.0f); /* multiples of 2^-9 */
    memcpy(&sub, &a, 4);
    const uint32_t normal = 0u - (uint32_t)((int32_t)m >= 0x3c800000);
    const uint32_t nan = 0u - (uint32_t)((int32_t)m > 0x7f800000);
    const uint32_t y = (u & 0x80000000u) | (r & normal) | (sub & ~normal);
    u = (u & nan) | (y & ~nan);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* What a value is multiplied by before it is rounded to E4M3 at scale s: 1 / s in float32 (0: no
 * scale). The GPU kernels make an activation's code from that product (cuda_common.cuh cu_e4m3:
 * a product, not a division, for speed), and the CPU's emulation rounds the same products, so
 * that both give the same codes. */
static inline float vae_e4m3_inv(float s) {
    return s > 0.0f ? 1.0f / s : 0.0f;
}

/* The E4M3 code of x rounded to its nearest E4M3 value (vae_f32_round_e4m3: ties to even,
 * saturating at +-448; NaN gives 0x7f with x's sign): vae_f8e4m3_to_f32 of it is that value. */
static inline uint8_t vae_f32_to_e4m3(float x) {
    const float r = vae_f32_round_e4m3(x);
    uint32_t u;
    memcpy(&u, &r, 4);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    const uint32_t m = u & 0x7fffffffu;
    if (m > 0x7f800000u) return sign | 0x7f;
    if (m < 0x3c800000u) return sign | (uint8_t)(fabsf(r) * 512.0f);       /* subnormal: k 2^-9 */
    return sign | (uint8_t)((((m >> 23) - 120u) << 3) | ((m >> 20) & 7u)); /* 2^(e-7) (1+k/8) */
}

#endif
