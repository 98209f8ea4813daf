/* A Llama-shaped decoder's layers in one call (fused_pass.py): RMSNorm, the joint q/k/v product,
 * rotary positions, the KV cache write, causal attention, the output product, the residual, RMSNorm,
 * the joint gate/up product, SiLU, the down product, the residual; every product on this file's
 * kernel (`linear`). Why: a draft's one-token pass is 24 layers of small products, and in Python
 * each layer's thirty-odd torch calls around them cost about as much as the products themselves
 * (the real pair's draft on an AMD EPYC: 7.6 of 16.5 ms a call outside the kernel).
 *
 * Row-exact, as the kernel is: every row of a call runs the same operations in the same order as
 * it would alone (its own norm, its own attention over the positions up to its own), so a pass over
 * n tokens gives each the bits of its own one-token pass. The bits differ from torch's layers (another
 * order of float sums): a model runs this pass for every call or for none.
 *
 * Included by kquant.c after kq_linear and kq_linear_tiles: portable C (the compiler vectorizes the loops). */

#include <omp.h>

typedef struct {
    int N, K, G, block, bits, tiles_from_rows; /* as KQuantLinear passes them to kq_linear_tiles */
    const uint8_t *codes;
    const int8_t *sc, *mn;
    const float *d, *dmin, *bias; /* bias: NULL for none */
} kq_layer;

typedef struct {
    const float *norm1, *norm2; /* RMSNorm weights: before attention, before the MLP */
    kq_layer qkv, o, gate_up, down;
    float *keys, *values; /* the layer's cache, (kv_heads, capacity, head_dim) each */
    int capacity;
} kq_block;

/* The layer's product as KQuantLinear calls it: kq_linear_tiles where it has a tile threshold, else kq_linear. */
static int layer_call(const kq_layer *w, int M, const float *x, float *out, int threads) {
    if (w->tiles_from_rows)
        return kq_linear_tiles(M, w->N, w->K, w->G, w->block, w->bits, w->codes, w->sc, w->mn, w->d, w->dmin, x,
                               w->bias, out, threads, w->tiles_from_rows);
    return kq_linear(M, w->N, w->K, w->G, w->block, w->bits, w->codes, w->sc, w->mn, w->d, w->dmin, x, w->bias, out,
                     threads);
}

/* Sums of products in 16 lanes, then the lanes in order: a fixed order whatever the pointers'
 * alignment (the compiler vectorizes the lanes, never reorders the sums), so a row's bits depend
 * on its values alone. */
#define LANES 16
static float dot(const float *a, const float *b, int n) {
    float lanes[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            lanes[l] += a[i + l] * b[i + l];
    for (int l = 0; i < n; i++, l++)
        lanes[l] += a[i] * b[i];
    float total = 0.0f;
    for (int l = 0; l < LANES; l++)
        total += lanes[l];
    return total;
}

static void rms_norm(const float *x, const float *weight, int n, float eps, float *out) {
    const float inverse = 1.0f / sqrtf(dot(x, x, n) / (float)n + eps);
    for (int i = 0; i < n; i++)
        out[i] = weight[i] * (x[i] * inverse);
}

/* x (head_dim) rotated in place by its position's cos and sin (transformers' rotate_half form). */
static void rotate(float *x, const float *cos, const float *sin, int dim) {
    const int half = dim / 2;
    float rotated[dim];
    for (int i = 0; i < half; i++) {
        rotated[i] = x[i] * cos[i] - x[i + half] * sin[i];
        rotated[i + half] = x[i + half] * cos[i + half] + x[i] * sin[i + half];
    }
    for (int i = 0; i < dim; i++)
        x[i] = rotated[i];
}

/* One query row of one head against the keys up to `seen` positions: softmax-weighted values in out. */
static void attend(const float *q, const float *keys, const float *values, int seen, int dim, float scaling,
                   float *scores, float *out) {
    float top = -INFINITY;
    for (int j = 0; j < seen; j++) {
        scores[j] = dot(q, keys + (size_t)j * dim, dim) * scaling;
        top = scores[j] > top ? scores[j] : top;
    }
    float total = 0.0f;
    for (int j = 0; j < seen; j++) {
        scores[j] = expf(scores[j] - top);
        total += scores[j];
    }
    for (int i = 0; i < dim; i++)
        out[i] = 0.0f;
    for (int j = 0; j < seen; j++) {
        const float *v = values + (size_t)j * dim;
        const float weight = scores[j] / total;
        for (int i = 0; i < dim; i++)
            out[i] += weight * v[i];
    }
}

/* x (rows x hidden): the residual stream of `rows` new tokens after `start` cached ones, through
 * every block; cos and sin (rows x head_dim) for their positions. Writes each block's cache rows
 * start..start+rows-1 (the caller made room). Returns 0, or 1 where scratch memory could not be had. */
int kq_decoder_pass(int rows, int start, int blocks, const kq_block *block, int hidden, int heads, int kv_heads,
                    int head_dim, int intermediate, float eps, float scaling, const float *cos, const float *sin,
                    float *x, int threads) {
    const int q_width = heads * head_dim, kv_width = kv_heads * head_dim, qkv_width = q_width + 2 * kv_width;
    const int group = heads / kv_heads, end = start + rows;
    float *normed = malloc(sizeof(float) * (size_t)rows * hidden);
    float *qkv = malloc(sizeof(float) * (size_t)rows * qkv_width);
    float *mixed = malloc(sizeof(float) * (size_t)rows * q_width);
    float *added = malloc(sizeof(float) * (size_t)rows * hidden);
    float *gate_up = malloc(sizeof(float) * (size_t)rows * 2 * intermediate);
    float *act = malloc(sizeof(float) * (size_t)rows * intermediate);
    float *scores = malloc(sizeof(float) * (size_t)threads * end); /* one row of scores per thread */
    int failed = !(normed && qkv && mixed && added && gate_up && act && scores);
    for (int b = 0; b < blocks && !failed; b++) {
        const kq_block *w = block + b;
        for (int r = 0; r < rows; r++)
            rms_norm(x + (size_t)r * hidden, w->norm1, hidden, eps, normed + (size_t)r * hidden);
        failed |= layer_call(&w->qkv, rows, normed, qkv, threads);
        for (int r = 0; r < rows && !failed; r++) {
            float *row = qkv + (size_t)r * qkv_width;
            const float *c = cos + (size_t)r * head_dim, *s = sin + (size_t)r * head_dim;
            for (int h = 0; h < heads; h++)
                rotate(row + h * head_dim, c, s, head_dim);
            for (int h = 0; h < kv_heads; h++) {
                rotate(row + q_width + h * head_dim, c, s, head_dim);
                const size_t at = ((size_t)h * w->capacity + start + r) * head_dim;
                for (int i = 0; i < head_dim; i++) {
                    w->keys[at + i] = row[q_width + h * head_dim + i];
                    w->values[at + i] = row[q_width + kv_width + h * head_dim + i];
                }
            }
        }
        if (failed)
            break;
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int task = 0; task < rows * heads; task++) {
            const int r = task / heads, h = task % heads, kv = h / group;
            const size_t cached = (size_t)kv * w->capacity * head_dim;
            attend(qkv + (size_t)r * qkv_width + h * head_dim, w->keys + cached, w->values + cached, start + r + 1,
                   head_dim, scaling, scores + (size_t)omp_get_thread_num() * end,
                   mixed + (size_t)r * q_width + h * head_dim);
        }
        failed |= layer_call(&w->o, rows, mixed, added, threads);
        for (size_t i = 0; i < (size_t)rows * hidden; i++)
            x[i] += added[i];
        for (int r = 0; r < rows; r++)
            rms_norm(x + (size_t)r * hidden, w->norm2, hidden, eps, normed + (size_t)r * hidden);
        failed |= layer_call(&w->gate_up, rows, normed, gate_up, threads);
        for (int r = 0; r < rows; r++) {
            const float *g = gate_up + (size_t)r * 2 * intermediate, *u = g + intermediate;
            float *a = act + (size_t)r * intermediate;
            for (int i = 0; i < intermediate; i++)
                a[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        }
        failed |= layer_call(&w->down, rows, act, added, threads);
        for (size_t i = 0; i < (size_t)rows * hidden; i++)
            x[i] += added[i];
    }
    free(normed);
    free(qkv);
    free(mixed);
    free(added);
    free(gate_up);
    free(act);
    free(scores);
    return failed;
}
