/* RoPE (models.layers.apply_rotary) and its gradient in one pass each, for float32 on a CPU: torch's
 * chunk, four products, a sum, a difference and a cat forward are seven trips to memory, and
 * autograd's backward as many again.
 *
 * The same bits as torch's ops, pairs (i, i + half) of each head's row, cos c and sin s of its
 * position: out1 = x1 c + x2 s, out2 = x2 c - x1 s, each product and the sum rounded on its own (no
 * FMA contraction: built by scaling/cpu_quantize.py's builder with its flags). The gradient, as
 * autograd accumulates it, dx1 = g1 c + (-g2) s, dx2 = g1 s + g2 c (two terms: either order), is
 * the same rotation of g with -s: negating s negates its products exactly. */
#include <stdint.h>

/* x, out: (rows, 2 half) with rows = (batch, position, head) row-major; cos, sin: (positions, half);
 * a row's position is (row / heads) % positions. inverse: rotate by -angle (the gradient). */
void scaling_rope(const float *x, const float *cos, const float *sin, float *out, int64_t rows, int64_t heads,
                  int64_t positions, int64_t half, int inverse, int nthreads) {
    const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *c = cos + ((r / heads) % positions) * half, *s = sin + ((r / heads) % positions) * half;
        const float *x1 = x + r * 2 * half, *x2 = x1 + half;
        float *o1 = out + r * 2 * half, *o2 = o1 + half;
        for (int64_t i = 0; i < half; i++) {
            const float si = sign * s[i];
            o1[i] = x1[i] * c[i] + x2[i] * si;
            o2[i] = x2[i] * c[i] - x1[i] * si;
        }
    }
}
