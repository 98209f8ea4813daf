/* The target's products at its GGUF's own precision: K-quant weights (4-bit Q4_K, 6-bit Q6_K codes)
 * times activations quantized to int8 per row, on AVX512-VNNI, or on AVX2 where a CPU has no AVX-512
 * (kquant.py compiles the body this CPU can run: one source, one layout, two instruction sets).
 *
 * Why this shape (specviz/pair/kquant.py says more):
 * - A one-token pass reads every weight once, so its price is the weights' bytes: 4-bit codes are
 *   a quarter of bf16's.
 * - A verification window must cost about what one row does, so each tile of weights is unpacked
 *   once and multiplied with every row of the call while it sits in registers; the integer dot
 *   product (vpdpbusd, 64 multiply-adds an instruction) keeps the extra rows cheap.
 * - A row's result must be the same bits whatever the number of rows in the call, so every row
 *   runs the very same sequence of operations: its own int8 quantization, exact integer dots, and
 *   float sums in a fixed order. Threads split the output channels, never a sum.
 *
 * Layout (made by kquant.py): output channels in tiles of 16; per tile and group of G inputs
 * (G = 32 for Q4_K, 16 for Q6_K), G/4 "steps" of 64 bytes, byte 4*j + t of step s holding the code of
 * channel j at input 4*s + t of the group (what vpdpbusd multiplies with 4 broadcast activations).
 * 4-bit codes store step s in the low nibbles and step s + G/8 in the high nibbles of one 64-byte
 * vector. 6-bit codes (a cache packed before 2026-12-07 holds Q6_K's codes one to a byte, `bits` 8)
 * take 192 bytes a group: steps 0, 1 and 2 in three 64-byte vectors (bits 0-5), step 3 spread over
 * their top two bits (its bits 0-1 in the first vector's bits 6-7, 2-3 in the second's, 4-5 in the third's).
 * Per tile and group: sc[16], mn[16] (int8); per tile and block of inputs (256 in a GGUF's
 * K-quants, 128 where SpecViz quantizes a draft itself): d[16], dmin[16] (float). The weight of channel j at input i of group g is d*sc*code - dmin*mn, exactly the GGUF's
 * dequantized value.
 *
 * AVX2 reads the same bytes: a 64-byte step is two 32-byte halves (channels 0-7, then 8-15), and
 * vpdpbusd becomes vpmaddubsw (codes times activations, pairs summed in int16) then vpmaddwd with
 * the group's scales (int16 pairs summed in int32 and scaled), as llama.cpp does on AVX2. Several
 * steps' int16 sums are added before vpmaddwd: a code is at most 15 (4-bit) or 63 (6-bit) and an
 * activation at most 127 in size, so 16 or 4 products stay below 2^15 and every sum is exact.
 *
 * AMX (kquant_tiles.h, for calls of several rows: kq_linear_tiles): per tile and group, one int8 tile
 * product gives up to 16 rows' exact group dots at once (the rows' activations as tile A, the
 * group's 64-byte steps, unpacked to a byte a code, as tile B: the layout above is already B's),
 * then the float combine is this file's body's, operation for operation, so a row's bits do not
 * depend on which body ran it.
 */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define TILE 16
#define PREFETCH 8 /* groups ahead whose codes a tile asks for while it works on the current one */
#define ROWS 32 /* rows whose accumulators a tile keeps at once; more rows go in blocks of this many */

/* The 6-bit codes of one half (8 channels: h = 0, 1) of a group's 192 bytes, one byte each, as
 * the 8-bit layout holds them: step s of the group in w[s]. 16-bit shifts, then masks that keep
 * only bits that came from the same byte: 11 operations for 4 steps. */
static inline void six_bit_half(const uint8_t *gc, int h, __m256i w[4]) {
    const __m256i six = _mm256_set1_epi8(0x3F);
    const __m256i v0 = _mm256_loadu_si256((const __m256i *)(gc + 32 * h));
    const __m256i v1 = _mm256_loadu_si256((const __m256i *)(gc + 64 + 32 * h));
    const __m256i v2 = _mm256_loadu_si256((const __m256i *)(gc + 128 + 32 * h));
    w[0] = _mm256_and_si256(v0, six);
    w[1] = _mm256_and_si256(v1, six);
    w[2] = _mm256_and_si256(v2, six);
    w[3] = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v0, 6), _mm256_set1_epi8(0x03)),
                                           _mm256_and_si256(_mm256_srli_epi16(v1, 4), _mm256_set1_epi8(0x0C))),
                           _mm256_and_si256(_mm256_srli_epi16(v2, 2), _mm256_set1_epi8(0x30)));
}

/* x: M rows of K floats -> xq (int8, M x K), scale (M x K/block: x ~= scale * xq within each block),
 * bsum (M x K/G: the sum of xq over each group, as a float). Each row on its own, 8 values at a time
 * (both bodies' CPUs have AVX2); for finite values the largest size, the rounding to nearest and
 * the integer sums are what a scalar loop computes, bit for bit. */
void kq_quantize(const float *x, int M, int K, int G, int block, int8_t *xq, float *scale, float *bsum) {
    const int blocks = K / block, groups = K / G;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int r = 0; r < M; r++) {
        const float *xr = x + (size_t)r * K;
        int8_t *qr = xq + (size_t)r * K;
        for (int b = 0; b < blocks; b++) {
            const float *xb = xr + (size_t)b * block;
            __m256 most = _mm256_setzero_ps();
            for (int i = 0; i < block; i += 8) most = _mm256_max_ps(most, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + i)));
            float lanes[8], amax = 0.0f;
            _mm256_storeu_ps(lanes, most);
            for (int i = 0; i < 8; i++) amax = fmaxf(amax, lanes[i]);
            const float a = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            scale[(size_t)r * blocks + b] = a;
            const __m256 invv = _mm256_set1_ps(inv);
            for (int i = 0; i < block; i += 8) {
                const __m256i q = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + i), invv),
                                                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
                _mm_storel_epi64((__m128i *)(qr + b * block + i), _mm_packs_epi16(q16, q16));
            }
        }
        for (int g = 0; g < groups; g++) {
            int s = 0;
            for (int i = 0; i < G; i++) s += qr[g * G + i];
            bsum[(size_t)r * groups + g] = (float)s;
        }
    }
}

#if defined(__AVX512VNNI__)

static inline __m512 lanes_of(const int8_t *v) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)v)));
}

/* One group's float terms for a row: block_acc + dot * sc*d - mn*dmin * the row's group sum (in that
 * order, each a single rounding: fma, then fnmadd). The AMX body calls this very code. */
static inline __m512 group_term(__m512 block_acc, __m512 dot, __m512 sv, __m512 mv, float bsum) {
    return _mm512_fnmadd_ps(mv, _mm512_set1_ps(bsum), _mm512_fmadd_ps(dot, sv, block_acc));
}

/* A block's end: each row's block sum times its activations' scale, into acc. */
static inline void block_end(int rows, int r0, int b, int blocks, const float *scale, const __m512 *block_acc,
                             __m512 *acc) {
    for (int r = 0; r < rows; r++)
        acc[r] = _mm512_fmadd_ps(block_acc[r], _mm512_set1_ps(scale[(size_t)(r0 + r) * blocks + b]), acc[r]);
}

/* Each row's 16 outputs of this tile (+ bias) into `out`. */
static inline void store_rows(int rows, int r0, int tile, int N, const float *bias, float *out, const __m512 *acc) {
    for (int r = 0; r < rows; r++) {
        __m512 y = acc[r];
        if (bias) y = _mm512_add_ps(y, _mm512_loadu_ps(bias + (size_t)tile * TILE));
        _mm512_storeu_ps(out + (size_t)(r0 + r) * N + (size_t)tile * TILE, y);
    }
}

/* One tile of 16 output channels for rows r0.. r0+rows-1: the loop the kernel runs. Inlined with
 * constant `steps` and `bits`, so that the compiler unrolls the steps and drops the branches. */
static inline __attribute__((always_inline)) void tile_rows(
    const int steps, const int bits, int block, int tile, int r0, int rows, int K, const uint8_t *codes, const int8_t *sc,
    const int8_t *mn, const float *d, const float *dmin, const int8_t *xq, const float *scale, const float *bsum,
    const float *bias, float *out, int N) {
    const int G = 4 * steps, blocks = K / block, groups = K / G, per_block = block / G;
    const size_t group_bytes = (size_t)steps * 8 * bits; /* a step: 16 channels x 4 inputs */
    const uint8_t *tile_codes = codes + (size_t)tile * groups * group_bytes;
    const __m512i low = _mm512_set1_epi8(0x0F);
    __m512 acc[ROWS], block_acc[ROWS];
    for (int r = 0; r < rows; r++) acc[r] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        const size_t at = ((size_t)tile * blocks + b) * TILE;
        const __m512 dv = _mm512_loadu_ps(d + at), dminv = _mm512_loadu_ps(dmin + at);
        for (int r = 0; r < rows; r++) block_acc[r] = _mm512_setzero_ps();
        for (int gb = 0; gb < per_block; gb++) {
            const int g = b * per_block + gb;
            const size_t tg = ((size_t)tile * groups + g) * TILE;
            const __m512 sv = _mm512_mul_ps(lanes_of(sc + tg), dv);
            const __m512 mv = _mm512_mul_ps(lanes_of(mn + tg), dminv);
            const uint8_t *gc = tile_codes + (size_t)g * group_bytes;
            /* ask for the codes a few groups ahead (the next tile's too, which follow in memory):
             * the rows' arithmetic then overlaps with the weights' arrival instead of waiting for it */
            for (size_t line = 0; line < group_bytes; line += 64)
                _mm_prefetch((const char *)(gc + PREFETCH * group_bytes + line), _MM_HINT_T0);
            __m512i w[8];
            if (bits == 4) {
                for (int p = 0; p < steps / 2; p++) {
                    const __m512i v = _mm512_loadu_si512((const void *)(gc + 64 * p));
                    w[p] = _mm512_and_si512(v, low);
                    w[p + steps / 2] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
                }
            } else if (bits == 6) { /* the AVX2 body's unpacking, its two halves side by side */
                __m256i first[4], second[4];
                six_bit_half(gc, 0, first);
                six_bit_half(gc, 1, second);
                for (int s = 0; s < 4; s++) w[s] = _mm512_inserti64x4(_mm512_castsi256_si512(first[s]), second[s], 1);
            } else {
                for (int s = 0; s < steps; s++) w[s] = _mm512_loadu_si512((const void *)(gc + 64 * s));
            }
            for (int r = 0; r < rows; r++) {
                const int32_t *xg = (const int32_t *)(xq + (size_t)(r0 + r) * K + (size_t)g * G);
                /* two chains of integer sums, added at the end: exact, and half as long */
                __m512i even = _mm512_setzero_si512(), odd = _mm512_setzero_si512();
                for (int s = 0; s < steps; s += 2) {
                    even = _mm512_dpbusd_epi32(even, w[s], _mm512_set1_epi32(xg[s]));
                    odd = _mm512_dpbusd_epi32(odd, w[s + 1], _mm512_set1_epi32(xg[s + 1]));
                }
                const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(even, odd));
                block_acc[r] = group_term(block_acc[r], dot, sv, mv, bsum[(size_t)(r0 + r) * groups + g]);
            }
        }
        block_end(rows, r0, b, blocks, scale, block_acc, acc);
    }
    store_rows(rows, r0, tile, N, bias, out, acc);
}

#else /* AVX2 */

static inline __m256 lanes_of(const int8_t *v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)v)));
}

/* 8 int8 scales as int16 pairs (s0, s0, s1, s1, ...): vpmaddwd's other operand, so that it sums a
 * channel's two int16 partial dots and multiplies them by the channel's group scale in one go. */
static inline __m256i scale_pairs(const int8_t *v) {
    const __m256i s = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)v));
    return _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s, 16));
}

/* A block's float combine, row by row, after its groups' integer dots (group scales applied): the
 * minimum terms summed per row (exact: integers below 2^24), then acc += (dots * d - mins * dmin) *
 * the row's scale. The AMX body (kquant_tiles.h) calls this very code, so a row gets the same bits. */
static inline __attribute__((always_inline)) void combine_block(
    int rows, int r0, int b, int blocks, int groups, int per_block, const float *scale, const float *bsum,
    __m256 mvs[16][2], const float *d, const float *dmin, size_t at, __m256i (*dots)[2], __m256 (*acc)[2]) {
    const __m256 dv[2] = {_mm256_loadu_ps(d + at), _mm256_loadu_ps(d + at + 8)};
    const __m256 dminv[2] = {_mm256_loadu_ps(dmin + at), _mm256_loadu_ps(dmin + at + 8)};
    for (int r = 0; r < rows; r++) {
        const __m256 rs = _mm256_set1_ps(scale[(size_t)(r0 + r) * blocks + b]);
        const float *rb = bsum + (size_t)(r0 + r) * groups + (size_t)b * per_block;
        __m256 mins[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int gb = 0; gb < per_block; gb++) {
            const __m256 x = _mm256_broadcast_ss(rb + gb);
            mins[0] = _mm256_fmadd_ps(mvs[gb][0], x, mins[0]);
            mins[1] = _mm256_fmadd_ps(mvs[gb][1], x, mins[1]);
        }
        for (int h = 0; h < 2; h++) {
            const __m256 v = _mm256_fmsub_ps(_mm256_cvtepi32_ps(dots[r][h]), dv[h], _mm256_mul_ps(mins[h], dminv[h]));
            acc[r][h] = _mm256_fmadd_ps(v, rs, acc[r][h]);
        }
    }
}

/* Each row's 16 outputs of this tile (+ bias) into `out`. */
static inline __attribute__((always_inline)) void store_rows(int rows, int r0, int tile, int N, const float *bias,
                                                             float *out, __m256 (*acc)[2]) {
    for (int r = 0; r < rows; r++) {
        for (int h = 0; h < 2; h++) {
            __m256 y = acc[r][h];
            if (bias) y = _mm256_add_ps(y, _mm256_loadu_ps(bias + (size_t)tile * TILE + 8 * h));
            _mm256_storeu_ps(out + (size_t)(r0 + r) * N + (size_t)tile * TILE + 8 * h, y);
        }
    }
}

/* The AVX-512 body's loop with each 16-channel vector as two halves of 8 (h = 0, 1), and the group
 * scales applied in integers: a block's sum of sc * (codes . activations) is exact in int32 (at most
 * 2^28 here), so a group costs each row no float work. A block's minimum terms are summed per row
 * after its groups, in registers, in the same order (exact either way: integers below 2^24): summed
 * beside the dots, in accumulators kept in memory for every row, they took a fifth of a window's time. */
static inline __attribute__((always_inline)) void tile_rows(
    const int steps, const int bits, int block, int tile, int r0, int rows, int K, const uint8_t *codes, const int8_t *sc,
    const int8_t *mn, const float *d, const float *dmin, const int8_t *xq, const float *scale, const float *bsum,
    const float *bias, float *out, int N) {
    const int G = 4 * steps, blocks = K / block, groups = K / G, per_block = block / G;
    const size_t group_bytes = (size_t)steps * 8 * bits; /* a step: 16 channels x 4 inputs */
    const uint8_t *tile_codes = codes + (size_t)tile * groups * group_bytes;
    const __m256i low = _mm256_set1_epi8(0x0F);
    __m256 acc[ROWS][2], mvs[16][2]; /* a block's minimums: at most 256 / 16 groups */
    __m256i dots[ROWS][2];
    for (int r = 0; r < rows; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        const size_t at = ((size_t)tile * blocks + b) * TILE;
        for (int r = 0; r < rows; r++) {
            dots[r][0] = dots[r][1] = _mm256_setzero_si256();
        }
        for (int gb = 0; gb < per_block; gb++) {
            const int g = b * per_block + gb;
            const size_t tg = ((size_t)tile * groups + g) * TILE;
            const __m256i sv[2] = {scale_pairs(sc + tg), scale_pairs(sc + tg + 8)};
            mvs[gb][0] = lanes_of(mn + tg);
            mvs[gb][1] = lanes_of(mn + tg + 8);
            const uint8_t *gc = tile_codes + (size_t)g * group_bytes;
            for (size_t line = 0; line < group_bytes; line += 64)
                _mm_prefetch((const char *)(gc + PREFETCH * group_bytes + line), _MM_HINT_T0);
            for (int h = 0; h < 2; h++) { /* one half's codes in registers at a time: 8 of AVX2's 16 */
                __m256i w[8];
                if (bits == 4) {
                    for (int p = 0; p < steps / 2; p++) {
                        const __m256i v = _mm256_loadu_si256((const __m256i *)(gc + 64 * p + 32 * h));
                        w[p] = _mm256_and_si256(v, low);
                        w[p + steps / 2] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
                    }
                } else if (bits == 6) {
                    six_bit_half(gc, h, w);
                } else {
                    for (int s = 0; s < steps; s++) w[s] = _mm256_loadu_si256((const __m256i *)(gc + 64 * s + 32 * h));
                }
                for (int r = 0; r < rows; r++) {
                    const int32_t *xg = (const int32_t *)(xq + (size_t)(r0 + r) * K + (size_t)g * G);
                    if (bits == 4) { /* 4-bit codes: all 8 steps in int16 (at most 8 * 2 * 15 * 127 < 2^15) */
                        __m256i sum = _mm256_maddubs_epi16(w[0], _mm256_set1_epi32(xg[0]));
                        for (int s = 1; s < steps; s++)
                            sum = _mm256_add_epi16(sum, _mm256_maddubs_epi16(w[s], _mm256_set1_epi32(xg[s])));
                        dots[r][h] = _mm256_add_epi32(dots[r][h], _mm256_madd_epi16(sum, sv[h]));
                    } else { /* 6-bit codes: two steps at a time (at most 2 * 2 * 63 * 127 < 2^15) */
                        for (int s = 0; s < steps; s += 2) {
                            const __m256i pair = _mm256_add_epi16(_mm256_maddubs_epi16(w[s], _mm256_set1_epi32(xg[s])),
                                                                  _mm256_maddubs_epi16(w[s + 1], _mm256_set1_epi32(xg[s + 1])));
                            dots[r][h] = _mm256_add_epi32(dots[r][h], _mm256_madd_epi16(pair, sv[h]));
                        }
                    }
                }
            }
        }
        combine_block(rows, r0, b, blocks, groups, per_block, scale, bsum, mvs, d, dmin, at, dots, acc);
    }
    store_rows(rows, r0, tile, N, bias, out, acc);
}

#endif

#include "kquant_tiles.h" /* the AMX body, where built: calls of several rows (kq_linear_tiles) */

/* out (M x N floats) = rows @ weights.T (+ bias), the rows given as kq_quantize left them.
 * G = 32 with 4-bit codes (Q4_K) or G = 16 with 6-bit codes (Q6_K; 8-bit in an older cache's layout). */
void kq_matmul(int M, int N, int K, int G, int block, int bits, const uint8_t *codes, const int8_t *sc, const int8_t *mn,
               const float *d, const float *dmin, const int8_t *xq, const float *scale, const float *bsum,
               const float *bias, float *out, int threads) {
    const int tiles = N / TILE;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int tile = 0; tile < tiles; tile++) {
        for (int r0 = 0; r0 < M; r0 += ROWS) {
            const int rows = M - r0 < ROWS ? M - r0 : ROWS;
            if (bits == 4 && G == 32)
                tile_rows(8, 4, block, tile, r0, rows, K, codes, sc, mn, d, dmin, xq, scale, bsum, bias, out, N);
            else if (bits == 6)
                tile_rows(4, 6, block, tile, r0, rows, K, codes, sc, mn, d, dmin, xq, scale, bsum, bias, out, N);
            else
                tile_rows(4, 8, block, tile, r0, rows, K, codes, sc, mn, d, dmin, xq, scale, bsum, bias, out, N);
        }
    }
}

/* One Linear layer's call: kq_quantize then kq_matmul, with the quantized rows in scratch memory of
 * its own (one call from Python instead of two, and no tensors made for the rows' codes), on the AMX
 * body where `tiles` says so. Returns 0, or 1 where that memory could not be had. */
static int linear(int M, int N, int K, int G, int block, int bits, const uint8_t *codes, const int8_t *sc,
                  const int8_t *mn, const float *d, const float *dmin, const float *x, const float *bias, float *out,
                  int threads, int tiles) {
    int8_t *xq = malloc((size_t)M * K);
    float *scale = malloc(sizeof(float) * (size_t)M * (K / block)), *bsum = malloc(sizeof(float) * (size_t)M * (K / G));
    const int failed = !(xq && scale && bsum);
    if (!failed) {
        kq_quantize(x, M, K, G, block, xq, scale, bsum);
#ifdef KQ_TILES_BODY
        if (tiles)
            matmul_tiles(M, N, K, G, block, bits, codes, sc, mn, d, dmin, xq, scale, bsum, bias, out, threads);
        else
#else
        (void)tiles;
#endif
            kq_matmul(M, N, K, G, block, bits, codes, sc, mn, d, dmin, xq, scale, bsum, bias, out, threads);
    }
    free(xq);
    free(scale);
    free(bsum);
    return failed;
}

int kq_linear(int M, int N, int K, int G, int block, int bits, const uint8_t *codes, const int8_t *sc, const int8_t *mn,
              const float *d, const float *dmin, const float *x, const float *bias, float *out, int threads) {
    return linear(M, N, K, G, block, bits, codes, sc, mn, d, dmin, x, bias, out, threads, 0);
}

/* kq_linear on the AMX body for calls of at least `tiles_from_rows` rows, where this library has the
 * body and this process may use the tiles (kq_tiles_ready); fewer rows, or no tiles: kq_linear. */
int kq_linear_tiles(int M, int N, int K, int G, int block, int bits, const uint8_t *codes, const int8_t *sc,
                    const int8_t *mn, const float *d, const float *dmin, const float *x, const float *bias, float *out,
                    int threads, int tiles_from_rows) {
    const int tiles = M >= tiles_from_rows && kq_tiles_ready(NULL) == TILES_READY;
    return linear(M, N, K, G, block, bits, codes, sc, mn, d, dmin, x, bias, out, threads, tiles);
}

#include "kquant_pass.h" /* a decoder's layers in one call (fused_pass.py) */
