/* The fused CPU quantizer: quant.gemm_operand in one C call, bit for bit (see cpu_quantize.py).
 *
 * The reference runs ~20 tensor ops per operand, each a pass over memory. Here the canonical (R, K)
 * view (K = the quantized axis) is cut into tiles of NK x 16: 16 canonical rows ("lanes") side by
 * side, NK elements along K (a multiple of the block and the Hadamard group). In the tile every
 * step is elementwise across the 16 lanes, so the compiler vectorizes all of it: butterflies
 * between tile rows, block maxima down the columns, scales per lane, rounding, the SR hash. Along
 * dim 0 of a (T, d) tensor a tile row is 16 neighbouring features: loads and stores are vectors.
 *
 * The float operations are the reference's, in its order, in IEEE single precision: the build turns
 * off FMA contraction and never uses -ffast-math (the compiler may vectorize, never reassociate).
 * The formulas are the Triton kernels' (scaling/kernels/quantize.py), which match the reference.
 * Every selection is written as a select, not a branch: signs and SR make branches unpredictable.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define L 16        /* lanes (canonical rows) per tile */
#define MAXNK 128   /* tile extent along K, at most (the largest Hadamard group) */
#define INLINE static inline __attribute__((always_inline))

enum { E2M1, E1M2, INT4, E4M3, E5M2 };   /* element formats (cpu_quantize.ELEM_CODES) */
enum { S_E8M0, S_E4M3, S_FP32 };         /* block-scale formats */

typedef struct {
    const float *x;
    float *out;
    int64_t R, K;
    int64_t xr, xk, or_, ok;              /* strides of x's and out's canonical views */
    int elem, scale, emax, block_rows, block_k, per_tensor, tensor_scale, sr, had, nk;
    uint32_t key;                         /* seeds.seed_key(rounding seed) */
    const float *signs;                   /* the transform's signs (had of them), or NULL */
    float norm, gmax, bound, numer, target, s_enc;
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

/* quant.block_scale_for, for a block amax (>= 0, or NaN). */
static float block_scale(float amax_b, const Job *job) {
    if (job->scale == S_E8M0) {
        int e;
        frexpf(amax_b, &e);  /* as torch.frexp: floor(log2 amax) = e - 1 */
        int exp = e - 1 - job->emax;
        exp = exp < -127 ? -127 : (exp > 127 ? 127 : exp);
        return ldexpf(1.0f, amax_b > 0.0f ? exp : 0);
    }
    float raw = (amax_b / job->target) * job->s_enc;
    if (job->scale == S_FP32) return raw;
    return e4m3_rtne(raw > job->bound ? job->bound : raw);  /* NaN stays NaN */
}

/* --- tiles ----------------------------------------------------------------------------------- */

typedef float Tile[MAXNK][L];

/* Tile (k, l) = canonical (r0 + l, k0 + k); lanes past R read 0. */
static void load_tile(const Job *job, int64_t r0, int64_t k0, Tile t) {
    const int64_t lanes = job->R - r0 < L ? job->R - r0 : L;
    const float *x = job->x + r0 * job->xr + k0 * job->xk;
    if (lanes < L) memset(t, 0, sizeof(float) * L * job->nk);
    if (job->xr == 1) {
        for (int k = 0; k < job->nk; k++)
            for (int l = 0; l < lanes; l++) t[k][l] = x[k * job->xk + l];
    } else {
        for (int l = 0; l < lanes; l++)
            for (int k = 0; k < job->nk; k++) t[k][l] = x[l * job->xr + k];
    }
}

static void store_tile(const Job *job, int64_t r0, int64_t k0, Tile t) {
    const int64_t lanes = job->R - r0 < L ? job->R - r0 : L;
    float *o = job->out + r0 * job->or_ + k0 * job->ok;
    if (job->or_ == 1) {
        for (int k = 0; k < job->nk; k++)
            for (int l = 0; l < lanes; l++) o[k * job->ok + l] = t[k][l];
    } else {
        for (int l = 0; l < lanes; l++)
            for (int k = 0; k < job->nk; k++) o[l * job->or_ + k] = t[k][l];
    }
}

/* transforms.rotate down each lane: signs, butterflies of stride 1, 2, 4, ..., the norm. */
static void rotate_tile(const Job *job, Tile t) {
    const int n = job->had;
    for (int g = 0; g < job->nk; g += n) {
        if (job->signs)
            for (int i = 0; i < n; i++)
                for (int l = 0; l < L; l++) t[g + i][l] *= job->signs[i];
        for (int h = 1; h < n; h *= 2)
            for (int i0 = g; i0 < g + n; i0 += 2 * h)
                for (int i = i0; i < i0 + h; i++)
                    for (int l = 0; l < L; l++) {
                        float a = t[i][l], b = t[i + h][l];
                        t[i][l] = a + b;
                        t[i + h][l] = a - b;
                    }
        for (int i = g; i < g + n; i++)
            for (int l = 0; l < L; l++) t[i][l] *= job->norm;
    }
}

/* max |t| over tile rows k0 .. k1 - 1 of each lane, NaN where there is one (see run_amax). */
static void lane_amax(Tile t, int k0, int k1, float amax[L]) {
    uint32_t m[L] = {0};
    for (int k = k0; k < k1; k++)
        for (int l = 0; l < L; l++) {
            uint32_t a = f_bits(t[k][l]) & 0x7FFFFFFFu;
            m[l] = a > m[l] ? a : m[l];
        }
    for (int l = 0; l < L; l++) amax[l] = bits_f(m[l]);
}

/* The SR uniforms of a tile: canonical index i = r * K + k, pairs (i even, i + 1) share one hash. */
static void tile_uniforms(const Job *job, int64_t r0, int64_t k0, Tile u) {
    const uint32_t key = job->key;
    if (job->K % 2 == 0) {  /* k0 and nk even: each pair is two tile rows of one lane */
        for (int k = 0; k < job->nk; k += 2)
            for (int l = 0; l < L; l++) {
                uint32_t pair = (uint32_t)(((r0 + l) * job->K + k0 + k) >> 1);
                uint32_t h = hash32(hash32(pair) ^ key);
                u[k][l] = centred16(h & 0xFFFFu);
                u[k + 1][l] = centred16(h >> 16);
            }
    } else {
        for (int k = 0; k < job->nk; k++)
            for (int l = 0; l < L; l++) {
                int64_t i = (r0 + l) * job->K + k0 + k;
                uint32_t h = hash32(hash32((uint32_t)(i >> 1)) ^ key);
                u[k][l] = centred16(i & 1 ? h >> 16 : h & 0xFFFFu);
            }
    }
}

/* t <- round(t * factor) * s_b, rows k0 .. k1 - 1, per-lane factor and scale. */
INLINE void round_rows(Tile t, Tile u, int k0, int k1, const float factor[L], const float s_b[L],
                       const int elem, const int sr, float gmax) {
    for (int k = k0; k < k1; k++)
        for (int l = 0; l < L; l++)
            t[k][l] = round_element(t[k][l] * factor[l], sr ? u[k][l] : 0.0f, elem, sr, gmax) * s_b[l];
}

static void round_rows_any(const Job *job, Tile t, Tile u, int k0, int k1, const float f[L], const float s[L]) {
    const float g = job->gmax;
    switch (job->elem * 2 + job->sr) {  /* one specialized loop per element format and rounding */
        case E2M1 * 2: round_rows(t, u, k0, k1, f, s, E2M1, 0, g); break;
        case E2M1 * 2 + 1: round_rows(t, u, k0, k1, f, s, E2M1, 1, g); break;
        case E1M2 * 2: round_rows(t, u, k0, k1, f, s, E1M2, 0, g); break;
        case E1M2 * 2 + 1: round_rows(t, u, k0, k1, f, s, E1M2, 1, g); break;
        case INT4 * 2: round_rows(t, u, k0, k1, f, s, INT4, 0, g); break;
        case INT4 * 2 + 1: round_rows(t, u, k0, k1, f, s, INT4, 1, g); break;
        case E4M3 * 2: round_rows(t, u, k0, k1, f, s, E4M3, 0, g); break;
        default: round_rows(t, u, k0, k1, f, s, E5M2, 0, g); break;
    }
}

/* quant.quantize's steps 4-5 and QTensor.scaled on a loaded, rotated tile. */
static void quantize_tile(const Job *job, int64_t r0, int64_t k0, Tile t, Tile u) {
    float factor[L], s_b[L];
    if (job->sr) tile_uniforms(job, r0, k0, u);
    if (job->per_tensor) {
        for (int l = 0; l < L; l++) factor[l] = job->s_enc, s_b[l] = 1.0f;
        round_rows_any(job, t, u, 0, job->nk, factor, s_b);
        return;
    }
    for (int kb = 0; kb < job->nk; kb += job->block_k) {
        float amax[L];
        lane_amax(t, kb, kb + job->block_k, amax);
        if (job->block_rows > 1) {  /* one (16 x block_k) block across the lanes */
            float m = 0.0f;
            for (int l = 0; l < L; l++) m = amax2(m, amax[l]);
            for (int l = 0; l < L; l++) amax[l] = m;
        }
        for (int l = 0; l < L; l++) {
            s_b[l] = block_scale(amax[l], job);
            factor[l] = s_b[l] > 0.0f ? job->s_enc / s_b[l] : 0.0f;
        }
        round_rows_any(job, t, u, kb, kb + job->block_k, factor, s_b);
    }
}

/* --- runs: a contiguous K ------------------------------------------------------------------- */
/* Along a contiguous K the data is already in runs of K: each run of nk is rounded where it lies
 * (or in a rotated copy), vectorized along K, in groups of block_rows rows (a 2-D block's). */

/* transforms.rotate on one run in place: signs, butterflies of stride 1, 2, 4, ..., the norm. */
static void rotate_run(const Job *job, float *v) {
    const int n = job->had;
    for (int g = 0; g < job->nk; g += n) {
        float *w = v + g;
        if (job->signs)
            for (int i = 0; i < n; i++) w[i] *= job->signs[i];
        for (int h = 1; h < n; h *= 2)
            for (int i0 = 0; i0 < n; i0 += 2 * h)
                for (int i = i0; i < i0 + h; i++) {
                    float a = w[i], b = w[i + h];
                    w[i] = a + b;
                    w[i + h] = a - b;
                }
        for (int i = 0; i < n; i++) w[i] *= job->norm;
    }
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

/* The SR uniforms of row r's elements k0 .. k0 + n - 1 (canonical index i = r * K + k). */
static void run_uniforms(const Job *job, int64_t r, int64_t k0, int n, float *u) {
    const int64_t i0 = r * job->K + k0;
    if (i0 % 2 == 0 && n % 2 == 0) {  /* pairs (i even, i + 1) are neighbours in the run */
        uint32_t h[MAXNK / 2];
        for (int j = 0; j < n / 2; j++) h[j] = hash32(hash32((uint32_t)((i0 >> 1) + j)) ^ job->key);
        for (int j = 0; j < n / 2; j++) {
            u[2 * j] = centred16(h[j] & 0xFFFFu);
            u[2 * j + 1] = centred16(h[j] >> 16);
        }
    } else {
        for (int j = 0; j < n; j++) {
            int64_t i = i0 + j;
            uint32_t h = hash32(hash32((uint32_t)(i >> 1)) ^ job->key);
            u[j] = centred16(i & 1 ? h >> 16 : h & 0xFFFFu);
        }
    }
}

INLINE void round_run(const float *v, const float *u, float *o, int n, float factor, float s_b,
                      const int elem, const int sr, float gmax) {
    for (int j = 0; j < n; j++) o[j] = round_element(v[j] * factor, sr ? u[j] : 0.0f, elem, sr, gmax) * s_b;
}

static void round_run_any(const Job *job, const float *v, const float *u, float *o, int n, float f, float s) {
    const float g = job->gmax;
    switch (job->elem * 2 + job->sr) {  /* one specialized loop per element format and rounding */
        case E2M1 * 2: round_run(v, u, o, n, f, s, E2M1, 0, g); break;
        case E2M1 * 2 + 1: round_run(v, u, o, n, f, s, E2M1, 1, g); break;
        case E1M2 * 2: round_run(v, u, o, n, f, s, E1M2, 0, g); break;
        case E1M2 * 2 + 1: round_run(v, u, o, n, f, s, E1M2, 1, g); break;
        case INT4 * 2: round_run(v, u, o, n, f, s, INT4, 0, g); break;
        case INT4 * 2 + 1: round_run(v, u, o, n, f, s, INT4, 1, g); break;
        case E4M3 * 2: round_run(v, u, o, n, f, s, E4M3, 0, g); break;
        default: round_run(v, u, o, n, f, s, E5M2, 0, g); break;
    }
}

/* Rows r0 .. r0 + block_rows - 1, columns k0 .. k0 + nk - 1: pass 1 returns their amax (rotated);
 * pass 2 quantizes them into out. */
static float runs_group(const Job *job, int64_t r0, int64_t k0, int pass) {
    static __thread float buf[L][MAXNK];  /* the rotated copy */
    const float *v[L];
    const int br = job->block_rows, nk = job->nk;
    float amax = 0.0f;
    for (int i = 0; i < br; i++) {
        const float *src = job->x + (r0 + i) * job->K + k0;
        if (job->had) {
            memcpy(buf[i], src, sizeof(float) * nk);
            rotate_run(job, buf[i]);
            src = buf[i];
        }
        v[i] = src;
        if (pass == 1) {
            amax = amax2(amax, run_amax(src, nk));
        }
    }
    if (pass == 1) return amax;
    float u[MAXNK];
    const int bk = job->per_tensor ? nk : job->block_k;
    for (int kb = 0; kb < nk; kb += bk) {
        float s_b = 1.0f, factor = job->s_enc;
        if (!job->per_tensor) {
            float amax_b = 0.0f;
            for (int i = 0; i < br; i++) {
                amax_b = amax2(amax_b, run_amax(v[i] + kb, bk));
            }
            s_b = block_scale(amax_b, job);
            factor = s_b > 0.0f ? job->s_enc / s_b : 0.0f;
        }
        for (int i = 0; i < br; i++) {
            if (job->sr) run_uniforms(job, r0 + i, k0 + kb, bk, u);
            round_run_any(job, v[i] + kb, u, job->out + (r0 + i) * job->K + k0 + kb, bk, factor, s_b);
        }
    }
    return 0.0f;
}

/* --- passes ---------------------------------------------------------------------------------- */

typedef struct { Job *job; int t, nthreads, pass; } Part;

static void run_part(const Part *p) {
    Job *job = p->job;
    Tile t, u;
    const int64_t tiles_r = (job->R + L - 1) / L;
    const int64_t a = tiles_r * p->t / p->nthreads * L, b = tiles_r * (p->t + 1) / p->nthreads * L;
    float amax = 0.0f;
    if (job->xk == 1) {  /* K contiguous: runs, in groups of block_rows rows */
        const int64_t groups = job->R / job->block_rows;
        const int64_t ga = groups * p->t / p->nthreads, gb = groups * (p->t + 1) / p->nthreads;
        for (int64_t g = ga; g < gb; g++)
            for (int64_t k0 = 0; k0 < job->K; k0 += job->nk)
                amax = amax2(amax, runs_group(job, g * job->block_rows, k0, p->pass));
        job->amax[p->t] = amax;
        return;
    }
    for (int64_t r0 = a; r0 < b && r0 < job->R; r0 += L)
        for (int64_t k0 = 0; k0 < job->K; k0 += job->nk) {
            load_tile(job, r0, k0, t);
            if (job->had) rotate_tile(job, t);
            if (p->pass == 1) {  /* the tensor amax, after the rotation */
                float m[L];
                lane_amax(t, 0, job->nk, m);
                for (int l = 0; l < L; l++) amax = amax2(amax, m[l]);
            } else {
                quantize_tile(job, r0, k0, t, u);
                store_tile(job, r0, k0, t);
            }
        }
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

/* The entry point. x and out: the canonical (R, K) views' data with strides (xr, xk) and (or_, ok),
 * each (K, 1) or (1, R). nk: the tile extent along K (a multiple of the block and the Hadamard
 * group, at most 128, dividing K). Returns s_enc (the tensor scale). */
float scaling_quantize(const float *x, float *out, int64_t R, int64_t K, int64_t xr, int64_t xk, int64_t or_,
                       int64_t ok, int nk, int elem, int scale, int emax, int block_rows, int block_k,
                       int per_tensor, int tensor_scale, int sr, uint32_t key, int had, const float *signs,
                       float norm, float gmax, float bound, float numer, float target, int nthreads) {
    Job job = {x, out, R, K, xr, xk, or_, ok, elem, scale, emax, block_rows, block_k, per_tensor, tensor_scale,
               sr, had, nk, key, signs, norm, gmax, bound, numer, target, 1.0f, {0}};
    nthreads = nthreads < 1 ? 1 : (nthreads > 64 ? 64 : nthreads);
    if (tensor_scale) {
        run_pass(&job, 1, nthreads);
        float amax = 0.0f;
        for (int t = 0; t < nthreads; t++) amax = amax2(amax, job.amax[t]);
        job.s_enc = amax > 0.0f ? numer / amax : 1.0f;  /* quant.tensor_encode_scale */
    }
    run_pass(&job, 2, nthreads);
    return job.s_enc;
}
