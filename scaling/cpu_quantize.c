/* The fused CPU quantizer: quant.gemm_operand in one C call, bit for bit (see cpu_quantize.py).
 *
 * The reference runs ~20 tensor ops per operand, each a pass over memory. Here each piece of the
 * canonical (R, K) view (K = the quantized axis) is rotated, scaled, rounded and written while it
 * sits in cache, in two layouts:
 * - runs: K contiguous (the forward's X, dgrad's dY). A row's run of up to 1024 elements is done at
 *   once, vectorized along K: block maxima, one rounding loop with each block's scale expanded.
 * - stretches: a 2-D (T, d) tensor along dim 0 (wgrad's operands), K strided. A stretch is nk rows
 *   of x (nk: whole blocks and Hadamard groups); butterflies run between its rows and block maxima
 *   down its columns, each a loop along a row of memory, as the reference's strided ops do.
 * Tensor-scaled specs read x twice: the tensor amax (after the rotation) comes first. 4/6 and
 * MS-EDEN (1-row blocks) round each piece, then choose or correct its block scales from its own
 * values (run_refined, stretch_refined) before writing it.
 *
 * The float operations are the reference's, in its order, in IEEE single precision: the build turns
 * off FMA contraction and never uses -ffast-math (the compiler may vectorize, never reassociate).
 * The formulas are the Triton kernels' (scaling/kernels/quantize.py), which match the reference.
 * Every selection is written as a select, not a branch: signs and SR make branches unpredictable.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define L 16        /* rows of a 2-D block, at most */
#define MAXRUN 1024 /* elements of a row done at once along a contiguous K */
#define INLINE static inline __attribute__((always_inline))

enum { E2M1, E1M2, INT4, E4M3, E5M2 };   /* element formats (formats.ELEM_CODES) */
enum { S_E8M0, S_E4M3, S_FP32 };         /* block-scale formats (formats.SCALE_CODES) */

typedef struct {
    const float *x;
    float *out;
    int64_t R, K;
    int k_contiguous;                     /* x's canonical view has strides (K, 1); else (1, R): dim 0 */
    int out_rowmajor;                     /* out is row-major (R, K) though x is not (2-D blocks) */
    int elem, scale, emax, block_rows, block_k, per_tensor, tensor_scale, sr, had, nk;
    uint32_t key;                         /* seeds.seed_key(rounding seed) */
    const float *signs;                   /* the transform's signs (had of them), or NULL */
    float norm, gmax, numer, target, s_enc;
    int four_six, eden;                   /* 4/6; MS-EDEN (1-row blocks: run_refined, stretch_refined) */
    uint32_t scale_key;                   /* MS-EDEN: seeds.seed_key(rounding seed ^ quant.SCALE_STREAM) */
    float amax[64];                       /* per-thread partial tensor amax */
} Job;

typedef union { float f; uint32_t u; int32_t i; } Bits;

INLINE float bits_f(uint32_t b) { Bits x; x.u = b; return x.f; }
INLINE uint32_t f_bits(float f) { Bits x; x.f = f; return x.u; }

/* The larger of two amaxes (non-negative or NaN), NaN if either is: see run_amax. */
INLINE float amax2(float a, float b) { return f_bits(b) > f_bits(a) ? b : a; }

/* --- scaling.seeds -------------------------------------------------------------------------- */

INLINE uint32_t hash32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    return x ^ (x >> 16);
}

/* seeds.pair_bits: the 32 bits of pair p (elements 2p, 2p + 1) under a stream key. */
INLINE uint32_t pair_bits(uint32_t p, uint32_t key) { return hash32(p ^ key); }

/* seeds.paired_uniforms' centred uniform of 16 bits: (2 half + 1) / 2^17, exact. */
INLINE float centred16(uint32_t half) { return (float)(int32_t)(2 * half + 1) * (1.0f / 131072.0f); }

/* --- scaling.formats ------------------------------------------------------------------------ */

INLINE float rint_small(float y) { return (y + 8388608.0f) - 8388608.0f; }  /* |y| < 2^22 */

/* The power of two at or below m, never below 1, as float bits (E2M1's binades). */
INLINE uint32_t binade(float m) { return f_bits(m > 1.0f ? m : 1.0f) & 0x7F800000u; }

/* formats.round_grid_rtne on a magnitude: nearest level, ties to the even index. */
INLINE float grid_rtne(float m, const int elem) {
    float c = elem == E2M1 ? bits_f(binade(m) + (22u << 23)) : (elem == E1M2 ? 2097152.0f : 8388608.0f);
    return (m + c) - c;
}

/* formats.round_grid_sr on a magnitude: the upper neighbour exactly when u < (m - lo) / step. */
INLINE float grid_sr(float m, float u, const int elem) {
    float step = 1.0f, inv = 1.0f;
    if (elem == E2M1) {
        uint32_t sb = binade(m) - (1u << 23);
        step = bits_f(sb);
        inv = bits_f(0x7F000000u - sb);
    } else if (elem == E1M2) {
        step = 0.25f;
        inv = 4.0f;
    }
    float y = m * inv, r = rint_small(y);
    float fl = r > y ? r - 1.0f : r;  /* floor(y) for 0 <= y < 2^22 (floorf is a call, and no vector) */
    return (u < y - fl ? fl + 1.0f : fl) * step;
}

/* formats.round_fp8_rtne on a non-negative float, saturating at fmax (NaN stays NaN). */
INLINE float fp8_rtne(float mag, float sub, float min_normal, int shift, uint32_t half, float fmax) {
    float m = mag > fmax ? fmax : mag;
    float q_sub = rint_small(m * sub) * (1.0f / sub);
    uint32_t b = f_bits(m);
    b = (b + half + ((b >> shift) & 1u)) >> shift << shift;
    return m < min_normal ? q_sub : bits_f(b);
}

INLINE float e4m3_rtne(float m) { return fp8_rtne(m, 512.0f, 0.015625f, 20, 0x7FFFFu, 448.0f); }
INLINE float e5m2_rtne(float m) { return fp8_rtne(m, 65536.0f, 6.103515625e-05f, 21, 0xFFFFFu, 57344.0f); }

/* formats.round_elements of one value: |v| rounded, negative exactly where v < 0; a NaN gives +0 on
 * the small grids and NaN on FP8. */
INLINE float round_element(float v, float u, const int elem, const int sr, float gmax) {
    float mag = fabsf(v), q;
    if (elem == E4M3) {
        q = e4m3_rtne(mag);
    } else if (elem == E5M2) {
        q = e5m2_rtne(mag);
    } else {
        float m = mag < gmax ? mag : gmax;
        m = mag == mag ? m : 0.0f;
        q = sr ? grid_sr(m, u, elem) : grid_rtne(m, elem);
    }
    return bits_f(f_bits(q) | (v < 0.0f ? 0x80000000u : 0u));
}

/* formats.e8m0_floor_scale of a block amax (>= 0, or NaN). */
static float e8m0_scale(float amax_b, int emax) {
    int e;
    frexpf(amax_b, &e);  /* as torch.frexp: floor(log2 amax) = e - 1 */
    int exp = e - 1 - emax;
    exp = exp < -127 ? -127 : (exp > 127 ? 127 : exp);
    return ldexpf(1.0f, amax_b > 0.0f ? exp : 0);
}

/* quant.block_scale_for of nb blocks' amaxes with this target (the spec's; 4/6's second candidate:
 * 4), and each block's factor s_enc / s_b (0 for a zero or NaN scale). The E4M3 and FP32 scales in
 * one loop over the blocks, which vectorizes (a call per block cost more than the block's rounding). */
static void block_scales_for(const Job *job, const float *amax, float *s_b, float *factor, int nb, float target) {
    const float s_enc = job->s_enc;
    if (job->scale == S_E4M3) {
        for (int b = 0; b < nb; b++) {
            float raw = (amax[b] / target) * s_enc;
            s_b[b] = e4m3_rtne(raw > 448.0f ? 448.0f : raw);  /* E4M3's own bound, as quant; NaN stays NaN */
        }
    } else if (job->scale == S_FP32) {
        for (int b = 0; b < nb; b++) s_b[b] = (amax[b] / target) * s_enc;
    } else {
        for (int b = 0; b < nb; b++) s_b[b] = e8m0_scale(amax[b], job->emax);
    }
    for (int b = 0; b < nb; b++) factor[b] = s_b[b] > 0.0f ? s_enc / s_b[b] : 0.0f;
}

static void block_scales(const Job *job, const float *amax, float *s_b, float *factor, int nb) {
    block_scales_for(job, amax, s_b, factor, nb, job->target);
}

/* o <- round(v * factor) * s_b over a run, factor and s_b per element (each block's, expanded). */
INLINE void round_run(const float *restrict v, const float *restrict u, const float *restrict factor,
                      const float *restrict s_b, float *restrict o, int n, const int elem, const int sr, float gmax) {
    for (int j = 0; j < n; j++) o[j] = round_element(v[j] * factor[j], sr ? u[j] : 0.0f, elem, sr, gmax) * s_b[j];
}

static void round_run_any(const Job *job, const float *v, const float *u, const float *f, const float *s, float *o,
                          int n) {
    const float g = job->gmax;
    switch (job->elem * 2 + job->sr) {  /* one specialized loop per element format and rounding */
        case E2M1 * 2: round_run(v, u, f, s, o, n, E2M1, 0, g); break;
        case E2M1 * 2 + 1: round_run(v, u, f, s, o, n, E2M1, 1, g); break;
        case E1M2 * 2: round_run(v, u, f, s, o, n, E1M2, 0, g); break;
        case E1M2 * 2 + 1: round_run(v, u, f, s, o, n, E1M2, 1, g); break;
        case INT4 * 2: round_run(v, u, f, s, o, n, INT4, 0, g); break;
        case INT4 * 2 + 1: round_run(v, u, f, s, o, n, INT4, 1, g); break;
        case E4M3 * 2: round_run(v, u, f, s, o, n, E4M3, 0, g); break;
        default: round_run(v, u, f, s, o, n, E5M2, 0, g); break;
    }
}

/* --- runs: a contiguous K ------------------------------------------------------------------- */
/* Along a contiguous K each row is cut into runs of up to MAXRUN (a multiple of nk), rounded where
 * they lie (or from a rotated copy), vectorized along K, in groups of block_rows rows (a 2-D block's). */

/* One butterfly stage of stride h over a whole run (pairs (i, i + h) in each run of 2h: the groups
 * of the transform are runs of had >= 2h, so one loop serves them all), times `scale` where LAST
 * (the normalising multiply after the last stage, fused: each value is still rounded once per
 * operation, in the reference's order). h is a constant at each call: the compiler then
 * vectorizes even the short strides, with shuffles. */
INLINE void butterflies(float *restrict w, int n, const int h, const int last, float scale) {
    for (int i0 = 0; i0 < n; i0 += 2 * h)
        for (int i = i0; i < i0 + h; i++) {
            float a = w[i], b = w[i + h];
            w[i] = last ? (a + b) * scale : a + b;
            w[i + h] = last ? (a - b) * scale : a - b;
        }
}

/* transforms.rotate of a run of n (a multiple of had, 16 to 128) from src into dst: signs (with the
 * copy), butterflies of stride 1, 2, 4, ..., the norm (with the last stage). */
static void rotate_run(const Job *job, const float *restrict src, float *restrict dst, int n) {
    const int had = job->had;
    const float norm = job->norm;
    if (job->signs) {
        for (int g = 0; g < n; g += had)
            for (int i = 0; i < had; i++) dst[g + i] = src[g + i] * job->signs[i];
    } else {
        memcpy(dst, src, sizeof(float) * n);
    }
/* stage h, the last one (with the norm) where had == 2h: `last` a constant in each call */
#define STAGE(h) if (had > (h)) { if (had == 2 * (h)) butterflies(dst, n, (h), 1, norm); \
                                   else butterflies(dst, n, (h), 0, norm); }
    STAGE(1) STAGE(2) STAGE(4) STAGE(8) STAGE(16) STAGE(32) STAGE(64)
#undef STAGE
}

/* max |v| over n elements, NaN if there is one (as torch.amax), as a max of the magnitudes' bits:
 * for non-negative floats the bits order as the values do, and every NaN lies above +inf. (An
 * integer max vectorizes; a float max with NaN handling does not.) */
static float run_amax(const float *v, int n) {
    uint32_t m = 0;
    for (int j = 0; j < n; j++) {
        uint32_t a = f_bits(v[j]) & 0x7FFFFFFFu;
        m = a > m ? a : m;
    }
    return bits_f(m);
}

/* blocks_amax for a constant block length bk (the loop over a block unrolls and vectorizes). */
INLINE void blocks_amax_of(const float *v, int nb, const int bk, float *amax) {
    for (int b = 0; b < nb; b++) {
        uint32_t m = 0;
        for (int j = 0; j < bk; j++) {
            uint32_t a = f_bits(v[b * bk + j]) & 0x7FFFFFFFu;
            m = a > m ? a : m;
        }
        amax[b] = amax2(amax[b], bits_f(m));
    }
}

/* amax[b] <- max(amax[b], max |v| over block b), for the nb blocks of bk of a run (see run_amax). */
static void blocks_amax(const float *v, int nb, int bk, float *amax) {
    if (bk == 16) blocks_amax_of(v, nb, 16, amax);  /* constant extents: unrolled, vectorized */
    else if (bk == 32) blocks_amax_of(v, nb, 32, amax);
    else
        for (int b = 0; b < nb; b++) amax[b] = amax2(amax[b], run_amax(v + b * bk, bk));
}

/* The SR uniform of the element with canonical index i, alone (where pairs straddle rows or runs). */
INLINE float element_uniform(int64_t i, uint32_t key) {
    uint32_t h = pair_bits((uint32_t)(i >> 1), key);
    return centred16(i & 1 ? h >> 16 : h & 0xFFFFu);
}

/* seeds.uniform of index i under a stream key (MS-EDEN's scale stream: one per block): 24 bits. */
INLINE float uniform24(uint32_t i, uint32_t key) {
    return (float)(hash32(hash32(i) ^ key) >> 8) * (1.0f / 16777216.0f);
}

/* The SR uniforms of row r's elements k0 .. k0 + n - 1 (canonical index i = r * K + k). */
static void run_uniforms(const Job *job, int64_t r, int64_t k0, int n, float *u) {
    const int64_t i0 = r * job->K + k0;
    if (i0 % 2 == 0 && n % 2 == 0) {  /* pairs (i even, i + 1) are neighbours in the run */
        uint32_t h[MAXRUN / 2];
        for (int j = 0; j < n / 2; j++) h[j] = pair_bits((uint32_t)((i0 >> 1) + j), job->key);
        for (int j = 0; j < n / 2; j++) {
            u[2 * j] = centred16(h[j] & 0xFFFFu);
            u[2 * j + 1] = centred16(h[j] >> 16);
        }
    } else {
        for (int j = 0; j < n; j++) u[j] = element_uniform(i0 + j, job->key);
    }
}

/* The run length along a contiguous K: nk doubled while it divides K, up to MAXRUN (long loops
 * amortize each call's setup; nk keeps whole blocks and Hadamard groups). */
static int run_length(const Job *job) {
    int n = job->nk;
    while (2 * n <= MAXRUN && job->K % (2 * n) == 0) n *= 2;
    return n;
}

/* quant.tree_sum over each aligned group of 2^levels in t[0 .. n), in place: neighbours first, then
 * their sums, a level at a time over the whole run (no pair crosses a group), so that group g's sum
 * ends in t[g]. */
static void group_sums(float *t, int n, int levels) {
    for (int l = 0; l < levels; l++, n /= 2)
        for (int i = 0; i < n / 2; i++) t[i] = t[2 * i] + t[2 * i + 1];
}

/* formats.round_fp8_sr(val, "e4m3", u) of one non-negative value (or NaN), in units of the spacing. */
static float e4m3_sr(float val, float u) {
    if (val != val) return val;
    float m = val > 448.0f ? 448.0f : (val > 0.0f ? val : 0.0f);
    float binade = bits_f(f_bits(m) & 0x7F800000u);
    float step = (binade > 0.015625f ? binade : 0.015625f) * 0.125f;
    float pos = m / step, lo = floorf(pos);  /* (exact: step is a power of two) */
    return (lo + ceilf((pos - lo) - u)) * step;
}

/* Each block's value of a per-block array, over the elements of a run. */
static void expand(const float *per_block, int nb, int bk, float *out) {
    for (int b = 0; b < nb; b++)
        for (int j = 0; j < bk; j++) out[b * bk + j] = per_block[b];
}

/* Pass 2 of quant.quantize with 4/6 and/or MS-EDEN, for one row's run v of n (1-row blocks of
 * block_k along a contiguous K; canonical row r, columns k0 ..): the elements rounded under the
 * block scales; with 4/6, each block's candidate with amax -> 4 kept where its squared error (a
 * tree sum over the block) is smaller, ties keeping amax -> 6; with MS-EDEN, per Hadamard group the
 * correction c = sum(x_enc^2) / sum(x_enc * q * s_b) times the group's scales, stochastically
 * rounded onto E4M3 with the scale stream's uniform of each block (seeds.uniform of its flat
 * index). Vectorized loops over the run, as round_run's. */
static void run_refined(const Job *job, const float *v, int64_t r, int64_t k0, int n, float *out) {
    const int bk = job->block_k, nb = n / bk, lbk = __builtin_ctz(bk);
    const float s_enc = job->s_enc;
    float amax[MAXRUN], sb[MAXRUN], f[MAXRUN], u[MAXRUN], q[MAXRUN], one[MAXRUN], e[MAXRUN], x_enc[MAXRUN];
    float fx[MAXRUN], sx[MAXRUN];  /* per element: factor, block scale */
    for (int b = 0; b < nb; b++) amax[b] = 0.0f;
    blocks_amax(v, nb, bk, amax);
    block_scales(job, amax, sb, f, nb);
    if (job->sr) run_uniforms(job, r, k0, n, u);
    for (int j = 0; j < n; j++) one[j] = 1.0f, x_enc[j] = v[j] * s_enc;
    expand(f, nb, bk, fx);
    round_run_any(job, v, u, fx, one, q, n);  /* the grid values (times 1: exact) */
    if (job->four_six) {
        float s4[MAXRUN], f4[MAXRUN], q4[MAXRUN], e4[MAXRUN];
        block_scales_for(job, amax, s4, f4, nb, 4.0f);
        expand(f4, nb, bk, fx);
        round_run_any(job, v, u, fx, one, q4, n);
        expand(sb, nb, bk, sx);
        for (int j = 0; j < n; j++) {
            float d = q[j] * sx[j] - x_enc[j];
            e[j] = d * d;
        }
        expand(s4, nb, bk, sx);
        for (int j = 0; j < n; j++) {
            float d = q4[j] * sx[j] - x_enc[j];
            e4[j] = d * d;
        }
        group_sums(e, n, lbk);
        group_sums(e4, n, lbk);
        for (int b = 0; b < nb; b++)
            if (e4[b] < e[b]) {
                sb[b] = s4[b];
                memcpy(q + b * bk, q4 + b * bk, sizeof(float) * bk);
            }
    }
    if (job->eden) {
        const int had = job->had, per = had / bk;
        float num[MAXRUN];
        expand(sb, nb, bk, sx);
        for (int j = 0; j < n; j++) {
            e[j] = (q[j] * sx[j]) * x_enc[j];
            num[j] = x_enc[j] * x_enc[j];
        }
        group_sums(e, n, __builtin_ctz(had));
        group_sums(num, n, __builtin_ctz(had));
        const int64_t b0 = (r * job->K + k0) / bk;  /* the run's first block's flat index */
        for (int b = 0; b < nb; b++) {
            const float d = e[b / per], c = d > 0.0f ? num[b / per] / d : 1.0f;
            sb[b] = e4m3_sr(sb[b] * c, uniform24((uint32_t)(b0 + b), job->scale_key));
        }
    }
    expand(sb, nb, bk, sx);
    for (int j = 0; j < n; j++) out[j] = q[j] * sx[j];
}

/* Rows r0 .. r0 + block_rows - 1, columns k0 .. k0 + n - 1: pass 1 returns their amax (rotated);
 * pass 2 quantizes them into out. */
static float runs_group(const Job *job, int64_t r0, int64_t k0, int n, int pass) {
    static __thread float buf[L][MAXRUN];  /* the rotated copies */
    const float *v[L];
    const int br = job->block_rows;
    float amax = 0.0f;
    for (int i = 0; i < br; i++) {
        const float *src = job->x + (r0 + i) * job->K + k0;
        if (job->had) {
            rotate_run(job, src, buf[i], n);
            src = buf[i];
        }
        v[i] = src;
        if (pass == 1) amax = amax2(amax, run_amax(src, n));
    }
    if (pass == 1) return amax;
    if (job->four_six || job->eden) {  /* (1-row blocks: `serves`) */
        run_refined(job, v[0], r0, k0, n, job->out + r0 * job->K + k0);
        return 0.0f;
    }
    float u[MAXRUN], factor[MAXRUN], s_b[MAXRUN];
    if (job->per_tensor) {
        for (int j = 0; j < n; j++) factor[j] = job->s_enc, s_b[j] = 1.0f;
    } else {
        const int bk = job->block_k, nb = n / bk;
        float block_amax[MAXRUN], sb[MAXRUN], f[MAXRUN];  /* per block */
        for (int b = 0; b < nb; b++) block_amax[b] = 0.0f;
        for (int i = 0; i < br; i++) blocks_amax(v[i], nb, bk, block_amax);
        block_scales(job, block_amax, sb, f, nb);
        for (int b = 0; b < nb; b++)
            for (int j = 0; j < bk; j++) factor[b * bk + j] = f[b], s_b[b * bk + j] = sb[b];
    }
    for (int i = 0; i < br; i++) {
        if (job->sr) run_uniforms(job, r0 + i, k0, n, u);
        round_run_any(job, v[i], u, factor, s_b, job->out + (r0 + i) * job->K + k0, n);
    }
    return 0.0f;
}

/* --- stretches: a strided K ---------------------------------------------------------------- */
/* A 2-D (T, d) tensor quantized along dim 0: canonical row r is column r of x, and K runs down x's
 * rows. A stretch is nk consecutive rows of x, cut into column chunks of at most CHUNK: one
 * contiguous range per row. Butterflies run between its rows and block maxima down its columns,
 * each a loop along a row of memory (the reference's strided ops, fused). */

#define CHUNK 512

typedef struct {
    float *t, *u, *q, *factor, *s_b;      /* nk x CHUNK (t, u, q), CHUNK */
    uint32_t *colmax;                     /* CHUNK */
    float *q4, *e, *e4, *sb, *s4, *f4, *one;  /* 4/6 and MS-EDEN: nk x CHUNK (q4, e, e4, sb), CHUNK */
} Scratch;

/* Rows k0 .. k0 + nk - 1 of x, columns c0 .. c0 + n - 1, into the (nk, n) stretch t, rotated down
 * each column (transforms.rotate): the signs with the first stage's loads, the norm with the last
 * stage's stores (each value still rounded once per operation, in the reference's order). */
static void load_stretch(const Job *job, int64_t k0, int64_t c0, int n, float *restrict t) {
    const int h0 = job->had, nk = job->nk;
    const float *x = job->x + k0 * job->R + c0;
    if (!h0) {
        for (int k = 0; k < nk; k++) memcpy(t + (int64_t)k * n, x + k * job->R, sizeof(float) * n);
        return;
    }
    const float norm = job->norm;
    for (int g = 0; g < nk; g += h0) {
        float *w = t + (int64_t)g * n;
        for (int h = 1; h < h0; h *= 2) {
            const int last = 2 * h == h0;
            for (int i0 = 0; i0 < h0; i0 += 2 * h)
                for (int i = i0; i < i0 + h; i++) {
                    float *a = w + (int64_t)i * n, *b = w + (int64_t)(i + h) * n;
                    if (h == 1) {  /* from x's rows, times the signs */
                        const float *xa = x + (g + i) * job->R, *xb = x + (g + i + 1) * job->R;
                        const float sa = job->signs ? job->signs[i] : 1.0f, sb = job->signs ? job->signs[i + 1] : 1.0f;
                        if (job->signs)
                            for (int c = 0; c < n; c++) {
                                float p = xa[c] * sa, q = xb[c] * sb;
                                a[c] = last ? (p + q) * norm : p + q;
                                b[c] = last ? (p - q) * norm : p - q;
                            }
                        else
                            for (int c = 0; c < n; c++) {
                                float p = xa[c], q = xb[c];
                                a[c] = last ? (p + q) * norm : p + q;
                                b[c] = last ? (p - q) * norm : p - q;
                            }
                    } else {
                        for (int c = 0; c < n; c++) {
                            float p = a[c], q = b[c];
                            a[c] = last ? (p + q) * norm : p + q;
                            b[c] = last ? (p - q) * norm : p - q;
                        }
                    }
                }
        }
    }
}

/* The SR uniforms of an (nk, n) stretch: element (k, c) is canonical (c0 + c, k0 + k). */
static void stretch_uniforms(const Job *job, int64_t k0, int64_t c0, int n, float *u) {
    const uint32_t key = job->key;
    if (job->K % 2 == 0) {  /* k0, nk even: a pair is rows k, k + 1 of one column */
        for (int k = 0; k < job->nk; k += 2)
            for (int c = 0; c < n; c++) {
                uint32_t h = pair_bits((uint32_t)(((c0 + c) * job->K + k0 + k) >> 1), key);
                u[k * n + c] = centred16(h & 0xFFFFu);
                u[(k + 1) * n + c] = centred16(h >> 16);
            }
    } else {
        for (int k = 0; k < job->nk; k++)
            for (int c = 0; c < n; c++) u[k * n + c] = element_uniform((c0 + c) * job->K + k0 + k, key);
    }
}

/* Column maxima of |t| over rows k0 .. k0 + nrows - 1 of an (., n) stretch, as bits (run_amax), into m. */
static void column_maxima(const float *t, int k0, int nrows, int n, uint32_t *m) {
    for (int c = 0; c < n; c++) m[c] = 0;
    for (int k = k0; k < k0 + nrows; k++)
        for (int c = 0; c < n; c++) {
            uint32_t a = f_bits(t[k * n + c]) & 0x7FFFFFFFu;
            m[c] = a > m[c] ? a : m[c];
        }
}

/* quant.tree_sum down each column of rows k0 .. k0 + 2^levels - 1 of an (., n) stretch, in place
 * (neighbouring rows first): the sums end in row k0. */
static void column_sums(float *t, int k0, int levels, int n) {
    for (int rows = 1 << levels; rows > 1; rows /= 2)
        for (int i = 0; i < rows / 2; i++) {
            float *dst = t + (int64_t)(k0 + i) * n;
            const float *a = t + (int64_t)(k0 + 2 * i) * n, *b = a + n;
            for (int c = 0; c < n; c++) dst[c] = a[c] + b[c];
        }
}

/* Pass 2 of quant.quantize with 4/6 and/or MS-EDEN on the rotated stretch t (nk rows of K, n canonical
 * rows as columns; 1-row blocks of block_k down each column): run_refined, down the columns. */
static void stretch_refined(const Job *job, int64_t k0, int64_t c0, int n, Scratch *w) {
    const int nk = job->nk, bk = job->block_k, lbk = __builtin_ctz(bk);
    const float s_enc = job->s_enc;
    float *t = w->t, *q = w->q, *q4 = w->q4, *e = w->e, *e4 = w->e4, *s4 = w->s4, *f4 = w->f4;
    if (job->sr) stretch_uniforms(job, k0, c0, n, w->u);
    for (int c = 0; c < n; c++) w->one[c] = 1.0f;
    for (int kb = 0; kb < nk; kb += bk) {
        float *sb = w->sb + (int64_t)(kb / bk) * n;  /* this block's scale in each column */
        column_maxima(t, kb, bk, n, w->colmax);
        for (int c = 0; c < n; c++) sb[c] = s4[c] = bits_f(w->colmax[c]);  /* (s4: the amax, for 4/6) */
        block_scales(job, sb, sb, w->factor, n);
        for (int k = kb; k < kb + bk; k++)
            round_run_any(job, t + k * n, w->u + k * n, w->factor, w->one, q + k * n, n);
        if (!job->four_six) continue;
        block_scales_for(job, s4, s4, f4, n, 4.0f);  /* (in place, as above) */
        for (int k = kb; k < kb + bk; k++) {
            round_run_any(job, t + k * n, w->u + k * n, f4, w->one, q4 + k * n, n);
            for (int c = 0; c < n; c++) {
                const float x_enc = t[k * n + c] * s_enc;
                const float d6 = q[k * n + c] * sb[c] - x_enc, d4 = q4[k * n + c] * s4[c] - x_enc;
                e[k * n + c] = d6 * d6;
                e4[k * n + c] = d4 * d4;
            }
        }
        column_sums(e, kb, lbk, n);
        column_sums(e4, kb, lbk, n);
        for (int c = 0; c < n; c++)
            if (e4[kb * n + c] < e[kb * n + c]) {  /* ties keep amax -> 6 */
                sb[c] = s4[c];
                for (int k = kb; k < kb + bk; k++) q[k * n + c] = q4[k * n + c];
            }
    }
    if (job->eden) {  /* one Hadamard group: the stretch's nk rows */
        for (int k = 0; k < nk; k++) {
            const float *sb = w->sb + (int64_t)(k / bk) * n;
            for (int c = 0; c < n; c++) {
                const float x_enc = t[k * n + c] * s_enc;
                e[k * n + c] = (q[k * n + c] * sb[c]) * x_enc;
                e4[k * n + c] = x_enc * x_enc;
            }
        }
        column_sums(e, 0, __builtin_ctz(nk), n);
        column_sums(e4, 0, __builtin_ctz(nk), n);
        const int64_t row_blocks = job->K / bk;
        for (int c = 0; c < n; c++) {
            const float d = e[c], corr = d > 0.0f ? e4[c] / d : 1.0f;
            for (int b = 0; b < nk / bk; b++) {
                const uint32_t index = (uint32_t)((c0 + c) * row_blocks + k0 / bk + b);
                w->sb[(int64_t)b * n + c] = e4m3_sr(w->sb[(int64_t)b * n + c] * corr, uniform24(index, job->scale_key));
            }
        }
    }
    for (int k = 0; k < nk; k++) {
        const float *sb = w->sb + (int64_t)(k / bk) * n;
        float *dst = job->out + (k0 + k) * job->R + c0;
        for (int c = 0; c < n; c++) dst[c] = q[k * n + c] * sb[c];
    }
}

/* Rows k0 .. k0 + nk - 1 of x, columns c0 .. c0 + n - 1: pass 1 returns their amax (rotated); pass 2
 * quantizes them into out. */
static float stretch(const Job *job, int64_t k0, int64_t c0, int n, int pass, Scratch *w) {
    const int nk = job->nk;
    float *t = w->t;
    load_stretch(job, k0, c0, n, t);
    if (pass == 1) return run_amax(t, nk * n);
    if (job->four_six || job->eden) {  /* (1-row blocks: `serves`) */
        stretch_refined(job, k0, c0, n, w);
        return 0.0f;
    }
    if (job->sr) stretch_uniforms(job, k0, c0, n, w->u);
    const int bk = job->per_tensor ? nk : job->block_k;
    for (int kb = 0; kb < nk; kb += bk) {
        if (job->per_tensor) {
            for (int c = 0; c < n; c++) w->factor[c] = job->s_enc, w->s_b[c] = 1.0f;
        } else {
            uint32_t *m = w->colmax;  /* max |t| down each column of the block, as bits (run_amax) */
            for (int c = 0; c < n; c++) m[c] = 0;
            for (int k = kb; k < kb + bk; k++)
                for (int c = 0; c < n; c++) {
                    uint32_t a = f_bits(t[k * n + c]) & 0x7FFFFFFFu;
                    m[c] = a > m[c] ? a : m[c];
                }
            if (job->block_rows > 1)  /* a (block_rows x bk) block spans block_rows columns */
                for (int c = 0; c < n; c += job->block_rows) {
                    uint32_t g = 0;
                    for (int j = 0; j < job->block_rows; j++) g = m[c + j] > g ? m[c + j] : g;
                    for (int j = 0; j < job->block_rows; j++) m[c + j] = g;
                }
            for (int c = 0; c < n; c++) w->s_b[c] = bits_f(m[c]);
            block_scales(job, w->s_b, w->s_b, w->factor, n);  /* (in place: each amax read before its scale is written) */
        }
        for (int k = kb; k < kb + bk; k++) {
            float *dst = job->out_rowmajor ? w->q : job->out + (k0 + k) * job->R + c0;
            round_run_any(job, t + k * n, w->u + k * n, w->factor, w->s_b, dst, n);
            if (job->out_rowmajor)
                for (int c = 0; c < n; c++) job->out[(c0 + c) * job->K + k0 + k] = w->q[c];
        }
    }
    return 0.0f;
}

/* --- passes ---------------------------------------------------------------------------------- */

typedef struct { Job *job; int t, nthreads, pass; } Part;

static void run_part(const Part *p) {
    Job *job = p->job;
    float amax = 0.0f;
    if (job->k_contiguous) {  /* runs, in groups of block_rows rows (out has x's layout) */
        const int64_t groups = job->R / job->block_rows;
        const int64_t ga = groups * p->t / p->nthreads, gb = groups * (p->t + 1) / p->nthreads;
        const int n = run_length(job);
        for (int64_t g = ga; g < gb; g++)
            for (int64_t k0 = 0; k0 < job->K; k0 += n)
                amax = amax2(amax, runs_group(job, g * job->block_rows, k0, n, p->pass));
        job->amax[p->t] = amax;
        return;
    }
    /* A strided K: threads split K (each reads its own rows of x's memory), in stretches of nk rows. */
    const int64_t stretches = job->K / job->nk;
    const int64_t ka = stretches * p->t / p->nthreads * job->nk, kb = stretches * (p->t + 1) / p->nthreads * job->nk;
    const int width = job->R < CHUNK ? (int)job->R : CHUNK;
    const size_t plane = (size_t)job->nk * width, planes = job->four_six || job->eden ? 7 : 3;
    float *mem = malloc(sizeof(float) * (planes * plane + 5 * width));
    uint32_t *colmax = malloc(sizeof(uint32_t) * (size_t)width);
    if (!mem || !colmax) abort();  /* (a few hundred KB; ~2 MB for 4/6 and MS-EDEN) */
    float *rest = mem + planes * plane;  /* the per-column arrays */
    Scratch w = {mem, mem + plane, mem + 2 * plane, rest, rest + width, colmax,
                 mem + 3 * plane, mem + 4 * plane, mem + 5 * plane, mem + 6 * plane,
                 rest + 2 * width, rest + 3 * width, rest + 4 * width};
    for (int64_t k0 = ka; k0 < kb; k0 += job->nk)
        for (int64_t c0 = 0; c0 < job->R; c0 += width) {
            int n = job->R - c0 < width ? (int)(job->R - c0) : width;
            amax = amax2(amax, stretch(job, k0, c0, n, p->pass, &w));
        }
    free(mem);
    free(colmax);
    job->amax[p->t] = amax;
}

#ifdef _OPENMP
/* OpenMP resolves to the process's libgomp, torch's own: its workers, which spin for a while after
 * each torch op, take the parts at once (threads of our own would queue behind them). */
static void run_pass(Job *job, int pass, int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static, 1)
    for (int t = 0; t < nthreads; t++) {
        Part part = {job, t, nthreads, pass};
        run_part(&part);
    }
}
#else
static void *thread_main(void *arg) { run_part((const Part *)arg); return NULL; }

static void run_pass(Job *job, int pass, int nthreads) {
    Part parts[64];
    pthread_t threads[64];
    int started[64] = {0};
    for (int t = 0; t < nthreads; t++) parts[t] = (Part){job, t, nthreads, pass};
    for (int t = 1; t < nthreads; t++) started[t] = pthread_create(&threads[t], NULL, thread_main, &parts[t]) == 0;
    run_part(&parts[0]);
    for (int t = 1; t < nthreads; t++) {
        if (started[t]) pthread_join(threads[t], NULL);
        else run_part(&parts[t]);  /* no thread: run its part here */
    }
}
#endif

/* The entry point. x: the canonical (R, K) view's data, with strides (K, 1) if k_contiguous, else
 * (1, R); out: the same layout, or row-major (R, K) if out_rowmajor (then x is (1, R)). nk: the tile extent along K (a multiple of the block and the Hadamard
 * group, at most 128, dividing K). Returns s_enc (the tensor scale). */
float scaling_quantize(const float *x, float *out, int64_t R, int64_t K, int k_contiguous, int out_rowmajor, int nk, int elem, int scale, int emax, int block_rows, int block_k,
                       int per_tensor, int tensor_scale, int sr, uint32_t key, int had, const float *signs,
                       float norm, float gmax, float numer, float target, int nthreads,
                       int four_six, int eden, uint32_t scale_key) {
    Job job = {x, out, R, K, k_contiguous, out_rowmajor, elem, scale, emax, block_rows, block_k, per_tensor, tensor_scale,
               sr, had, nk, key, signs, norm, gmax, numer, target, 1.0f, four_six, eden, scale_key, {0}};
    nthreads = nthreads < 1 ? 1 : (nthreads > 64 ? 64 : nthreads);
    if (tensor_scale) {
        run_pass(&job, 1, nthreads);
        float amax = 0.0f;
        for (int t = 0; t < nthreads; t++) amax = amax2(amax, job.amax[t]);
        float q = numer / amax;
        job.s_enc = q <= 3.4028234663852886e38f ? q : 1.0f;  /* quant.tensor_encode_scale: 1 unless finite */
    }
    run_pass(&job, 2, nthreads);
    return job.s_enc;
}
