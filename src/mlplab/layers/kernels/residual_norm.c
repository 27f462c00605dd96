/* The seam between two pre-LN residual sublayers of a Mixer, fused (mlplab.layers.fused):
 *
 *   forward   u = x + act(t)                       (the skip connection; without t: u = x)
 *             h = (u - mean(u)) * rstd * gamma + beta,   rstd = 1 / sqrt(var(u) + eps)
 *   backward  given dL/dh (gh) and dL/du from the later layers (gu, may be absent):
 *             gx = gu + rstd * (gh*gamma - mean(gh*gamma) - uhat * mean(gh*gamma*uhat))
 *             gt = gx * act'(t),  dgamma += gh * uhat,  dbeta += gh
 *
 * over R rows of length C (LayerNorm over the last dimension). One pass over the data each way
 * instead of the five to seven that the separate activation, add, LayerNorm and their backward
 * kernels take. act: 0 identity, 1 GELU (exact, Hendrycks & Gimpel 2016: u * Phi(u)).
 *
 * Three instantiations of residual_norm.inc: float64 (exact libm erf/exp; for the tests),
 * float32, and bfloat16 t/h with a float32 residual (CPU autocast). The float32 paths use
 * erf_rational (max abs error 4.5e-7) and exp_poly (rel. error < 2e-7), which vectorise.
 * gamma, beta have the residual's type; mean, rstd and the per-thread dgamma/dbeta partial sums
 * (caller-provided (nthreads, C) arrays) the accumulator's.
 *
 * Every exported function returns 0, or 1 when a thread could not allocate its buffers (then
 * nothing was computed). Their prototypes are generated from the signature table in
 * mlplab/layers/fused.py (SIGNATURES), which also types the Python calls: the build writes them
 * to residual_norm_api.h, so a definition here that disagrees with the table does not compile.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#include "residual_norm_api.h"

/* Called by every thread of a parallel region once it has allocated its buffers (mine: all
 * allocations succeeded): whether every thread's did. Threads that see a failure skip the work
 * (a worksharing loop must be met by all threads of the team, so they run it with no iterations),
 * and the function returns 1. */
static int team_allocated(int mine, int *failed) {
    if (!mine) {
        #pragma omp atomic write
        *failed = 1;
    }
    #pragma omp barrier
    int any;
    #pragma omp atomic read
    any = *failed;
    return !any;
}

static inline float bf16_to_f32(uint16_t v) {
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even. A NaN made by arithmetic is quiet (bit 22 set, x86's default NaN is
 * 0xffc00000) and stays a NaN; only hand-made payloads in the low bits could round away, and
 * checking for them costs a third of the forward pass. */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Two samples' bfloat16 values in one 32-bit word, the first in the low half (the RP seams'
 * paired gathers); a bfloat16 moved to the high 16 bits of a float is its value. Only bfloat16
 * is paired: float pairs in 64-bit words are slower than one gather per sample. */
static inline uint32_t pair_bf16(uint16_t a, uint16_t b) { return (uint32_t)a | (uint32_t)b << 16; }
static inline float bf16_hi_f32(uint32_t w) {
    uint32_t u = w & 0xffff0000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* erf(x) as x P(x^2) / Q(x^2) on [-4, 4] (erf(4) = 1 - 1.5e-8), the rational minimax form used
 * by Eigen's fast float erf; NaN propagates (comparisons with NaN are false). */
static inline float erf_rational(float x) {
    x = x < -4.f ? -4.f : (x > 4.f ? 4.f : x);
    float x2 = x * x;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 - 2.10102402082508e-06f;
    p = p * x2 - 5.69250639462346e-05f;
    p = p * x2 - 7.34990630326855e-04f;
    p = p * x2 - 2.95459980854025e-03f;
    p = p * x2 - 1.60960333262415e-02f;
    float q = -1.45660718464996e-05f;
    q = q * x2 - 2.13374055278905e-04f;
    q = q * x2 - 1.68282697438203e-03f;
    q = q * x2 - 7.37332916720468e-03f;
    q = q * x2 - 1.42647390514189e-02f;
    return x * p / q;
}

/* exp(x) for x <= 0: 2^k exp(r), k = round(x / ln 2), |r| <= ln2 / 2, Taylor to degree 7. */
static inline float exp_poly(float x) {
    x = x < -87.f ? -87.f : x;
    float k = nearbyintf(x * 1.44269504088896341f);
    float r = x - k * 0.693145751953125f - k * 1.42860682030941723e-6f;
    float e = 1.f / 5040.f;
    e = e * r + 1.f / 720.f;
    e = e * r + 1.f / 120.f;
    e = e * r + 1.f / 24.f;
    e = e * r + 1.f / 6.f;
    e = e * r + 0.5f;
    e = e * r + 1.f;
    e = e * r + 1.f;
    int32_t bits = ((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return e * scale;
}

#define INV_SQRT2 0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794

/* ---- float64 ---- */
#define SUFFIX f64
#define PAIR 1
#define XT double
#define TT double
#define ACC double
#define LOAD(v) (v)
#define STORE(v) (v)
#define GELU(u) (0.5 * (u) * (1.0 + erf((u) * INV_SQRT2)))
#define GELU_GRAD(u) (0.5 * (1.0 + erf((u) * INV_SQRT2)) + (u) * exp(-0.5 * (u) * (u)) * INV_SQRT_2PI)
#define RSQRT(v) (1.0 / sqrt(v))
#include "residual_norm.inc"

/* ---- float32 ---- */
#define SUFFIX f32
#define PAIR 1
#define XT float
#define TT float
#define ACC float
#define LOAD(v) (v)
#define STORE(v) (v)
#define GELU(u) (0.5f * (u) * (1.f + erf_rational((u) * (float)INV_SQRT2)))
#define GELU_GRAD(u) (0.5f * (1.f + erf_rational((u) * (float)INV_SQRT2)) + \
                      (u) * exp_poly(-0.5f * (u) * (u)) * (float)INV_SQRT_2PI)
#define RSQRT(v) (1.f / sqrtf(v))
#include "residual_norm.inc"

/* ---- bfloat16 t and h, float32 residual ---- */
#define SUFFIX bf16
#define PAIR 2  /* samples per gather: two bfloat16 entries per 32-bit word */
#define PAIRED
#define WORD uint32_t
#define PAIR_WORD(a, b) pair_bf16(a, b)
#define WORD_LO(w) bf16_to_f32((uint16_t)(w))
#define WORD_HI(w) bf16_hi_f32(w)
#define WORD_LO_T(w) ((uint16_t)(w))
#define WORD_HI_T(w) ((uint16_t)((w) >> 16))
#define XT float
#define TT uint16_t
#define ACC float
#define LOAD(v) bf16_to_f32(v)
#define STORE(v) f32_to_bf16(v)
#define GELU(u) (0.5f * (u) * (1.f + erf_rational((u) * (float)INV_SQRT2)))
#define GELU_GRAD(u) (0.5f * (1.f + erf_rational((u) * (float)INV_SQRT2)) + \
                      (u) * exp_poly(-0.5f * (u) * (u)) * (float)INV_SQRT_2PI)
#define RSQRT(v) (1.f / sqrtf(v))
#include "residual_norm.inc"
