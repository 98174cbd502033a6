/* ReLU² (nanochat's MLP activation) and its gradient in one pass each, for float32 on a CPU:
 * torch's relu(h).square() is two passes forward and four backward (the power's gradient, its
 * factor 2, the product with the gradient, relu's threshold), each a trip to memory.
 *
 * The same bits as torch's ops: a = r * r with r = relu(h) (NaN stays NaN); the gradient is
 * g * (2 r) where r > 0 and +0 elsewhere (relu's threshold_backward), 2 r being exact. Built by
 * scaling/cpu_quantize.py's builder with its flags (no FMA contraction, no fast math). */
#include <stdint.h>

static inline float relu(float h) { return (h > 0.0f || h != h) ? h : 0.0f; }

void scaling_relu2(const float *h, float *a, int64_t n, int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float r = relu(h[i]);
        a[i] = r * r;
    }
}

void scaling_relu2_backward(const float *g, const float *h, float *dh, int64_t n, int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        const float r = relu(h[i]);
        dh[i] = r <= 0.0f ? 0.0f : g[i] * (2.0f * r);
    }
}
