/* The K-quant kernel's body on Intel AMX int8 tiles, for calls of several rows (included by kquant.c).
 * Every AMX CPU has AVX512-VNNI, so the real body sits beside the VNNI body, and its float combine is
 * that body's, operation for operation: a row's result is the same bits on either. The reference
 * build also sits beside the AVX2 body, with that body's combine, so the tests hold the tiles'
 * packing and indexing to the bits of whichever body a CPU has.
 *
 * One tile product a group: per tile of 16 output channels, group g of G inputs and up to 16 rows,
 *   C[row][channel] = sum over the group's inputs i of xq[row][i] * code[channel][i]   (int32, exact)
 * with TDPBSUD (signed int8 A times unsigned int8 B): A is the rows' activations as they lie in xq
 * (rows x G bytes, stride K); B is the group's codes in the kernel's step layout (G/4 rows of 64
 * bytes: byte 4*j + t of row s is channel j's code at input 4*s + t), which is the tile B layout
 * itself, so the 8-bit layout loads as it is and 4- and 6-bit codes are unpacked into 64-byte steps
 * as the other bodies unpack them; C's rows are the rows' 16-channel vectors, which the combine reads
 * as the VNNI body reads its dots. (TDPBUSD, codes in A, would leave C transposed: channel by row.)
 *
 * The tile operations go through the layer below: the instructions where compiled for AMX
 * (-mamx-tile -mamx-int8), else, or with -DKQ_TILE_REFERENCE, a portable C version of each that
 * follows the ISA's semantics (rows and bytes per row from the configuration, strides, zeroed rows
 * and bytes beyond them), so that this body's packing, tiling and indexing run in the tests on any
 * CPU and must equal its body bit for bit.
 */
#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__AMX_TILE__) && defined(__AMX_INT8__) && !defined(KQ_TILE_REFERENCE)
#define KQ_TILES_REAL 1
#endif
/* The body is built where it can run for real, or where the tests ask for the reference (beside
 * either body: its float combine is then the AVX2 body's); a build with neither (any CPU without
 * AMX, in use) has only the layer, for kq_tile_product's tests. */
#if defined(KQ_TILES_REAL) || defined(KQ_TILE_REFERENCE)
#define KQ_TILES_BODY 1
#endif

/* The tile registers this body uses: numbers, not an enum (the intrinsics paste them into the
 * instructions' text). */
#define TILE_A 0
#define TILE_B 1
#define TILE_C 2

/* The 64-byte operand of LDTILECFG (palette 1): bytes per row and rows of each of 8 tiles. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

#ifdef KQ_TILES_REAL

/* gcc's intrinsics tell the compiler that LDTILECFG reads 8 bytes of its operand and TILELOADD none
 * of its memory, so stores to a configuration or a buffer a tile then loads could be dropped or
 * moved past them as dead: a compiler barrier before each keeps them. */
#define memory_barrier() __asm__ volatile("" ::: "memory")
#define tile_configure(config) do { memory_barrier(); _tile_loadconfig(config); } while (0)
#define tile_zero(t) _tile_zero(t)
#define tile_load(t, base, stride) do { memory_barrier(); _tile_loadd(t, base, stride); } while (0)
#define tile_dpbsud(c, a, b) _tile_dpbsud(c, a, b)
#define tile_store(t, base, stride) _tile_stored(t, base, stride)
#define tile_release() _tile_release()

#else /* the reference: 8 tiles of 16 rows x 64 bytes per thread, as the registers are */

static _Thread_local tile_config reference_config;
static _Thread_local uint8_t reference_tiles[8][16][64];

static void tile_configure(const tile_config *config) {
    reference_config = *config;
    memset(reference_tiles, 0, sizeof reference_tiles); /* LDTILECFG zeroes every tile */
}

static void tile_zero(int t) { memset(reference_tiles[t], 0, sizeof reference_tiles[t]); }

static void tile_load(int t, const void *base, size_t stride) {
    tile_zero(t); /* rows, and bytes of a row, beyond the configuration's read as zero */
    for (int r = 0; r < reference_config.rows[t]; r++)
        memcpy(reference_tiles[t][r], (const uint8_t *)base + (size_t)r * stride, reference_config.colsb[t]);
}

/* C[m][n] += sum over k of sum over t of A[m][4k+t] (signed) * B[k][4n+t] (unsigned), k < A's bytes / 4 */
static void tile_dpbsud(int c, int a, int b) {
    for (int m = 0; m < reference_config.rows[c]; m++) {
        for (int n = 0; n < reference_config.colsb[c] / 4; n++) {
            int32_t sum;
            memcpy(&sum, &reference_tiles[c][m][4 * n], 4);
            for (int k = 0; k < reference_config.colsb[a] / 4; k++)
                for (int t = 0; t < 4; t++)
                    sum += (int32_t)(int8_t)reference_tiles[a][m][4 * k + t] * (int32_t)reference_tiles[b][k][4 * n + t];
            memcpy(&reference_tiles[c][m][4 * n], &sum, 4);
        }
    }
}

static void tile_store(int t, void *base, size_t stride) {
    for (int r = 0; r < reference_config.rows[t]; r++)
        memcpy((uint8_t *)base + (size_t)r * stride, reference_tiles[t][r], reference_config.colsb[t]);
}

static void tile_release(void) { memset(&reference_config, 0, sizeof reference_config); }

#endif

#define TILE_ROWS 16 /* rows a tile product takes at once: a tile's 16 rows */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

enum { TILES_READY = 0, TILES_NOT_BUILT = 1, TILES_REFUSED = 2 };

/* 0 where this process may use the tiles (asked of Linux once: tile data is a state the kernel
 * hands out per process on request); TILES_REFUSED, with errno's value in *error, where it says no. */
int kq_tiles_ready(int *error) {
    static int verdict = -1, why = 0;
#pragma omp critical(kq_tiles)
    if (verdict < 0) {
#ifndef KQ_TILES_BODY
        verdict = TILES_NOT_BUILT;
#elif defined(KQ_TILES_REAL)
        verdict = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? TILES_READY : TILES_REFUSED;
        why = verdict == TILES_READY ? 0 : errno;
#else
        verdict = TILES_READY;
#endif
    }
    if (error) *error = why;
    return verdict;
}

/* out (rows x n int32) = a (rows x 4k int8) . b (k x 4n uint8, the B layout), one tile product: the
 * layer on its own, for the tests (rows, n <= 16, k <= 16); the caller has asked kq_tiles_ready. */
void kq_tile_product(int rows, int n, int k, const int8_t *a, const uint8_t *b, int32_t *out) {
    tile_config config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    config.rows[TILE_A] = (uint8_t)rows, config.colsb[TILE_A] = (uint16_t)(4 * k);
    config.rows[TILE_B] = (uint8_t)k, config.colsb[TILE_B] = (uint16_t)(4 * n);
    config.rows[TILE_C] = (uint8_t)rows, config.colsb[TILE_C] = (uint16_t)(4 * n);
    tile_configure(&config);
    tile_zero(TILE_C);
    tile_load(TILE_A, a, (size_t)4 * k);
    tile_load(TILE_B, b, (size_t)4 * n);
    tile_dpbsud(TILE_C, TILE_A, TILE_B);
    tile_store(TILE_C, out, (size_t)4 * n);
    tile_release();
}

#ifdef KQ_TILES_BODY

/* The three tiles of a product of `rows` rows over groups of G inputs. */
static void configure_for(int rows, int G) {
    tile_config config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    config.rows[TILE_A] = (uint8_t)rows, config.colsb[TILE_A] = (uint16_t)G; /* activations */
    config.rows[TILE_B] = (uint8_t)(G / 4), config.colsb[TILE_B] = 64;      /* codes, in steps */
    config.rows[TILE_C] = (uint8_t)rows, config.colsb[TILE_C] = 64;         /* 16 int32 dots a row */
    tile_configure(&config);
}

/* A group's 4- or 6-bit codes as 64-byte steps, one code a byte (tile B): the bodies' unpacking,
 * stored, a 32-byte half (8 channels) at a time. */
static inline __attribute__((always_inline)) void unpacked_steps(const int steps, const int bits, const uint8_t *gc,
                                                                 uint8_t *into) {
    const __m256i low = _mm256_set1_epi8(0x0F);
    for (int h = 0; h < 2; h++) {
        if (bits == 4) {
            for (int p = 0; p < steps / 2; p++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(gc + 64 * p + 32 * h));
                _mm256_storeu_si256((__m256i *)(into + 64 * p + 32 * h), _mm256_and_si256(v, low));
                _mm256_storeu_si256((__m256i *)(into + 64 * (p + steps / 2) + 32 * h),
                                    _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
            }
        } else {
            __m256i w[4];
            six_bit_half(gc, h, w);
            for (int s = 0; s < 4; s++) _mm256_storeu_si256((__m256i *)(into + 64 * s + 32 * h), w[s]);
        }
    }
}

/* One group's exact dots for up to 16 rows of one tile: dots[r][j] = row r's G activations (xg, rows
 * K bytes apart) . channel j's G codes (gc), one tile product. */
static inline __attribute__((always_inline)) void group_dots(const int steps, const int bits, const uint8_t *gc,
                                                             const int8_t *xg, int K, int32_t dots[TILE_ROWS][TILE]) {
    uint8_t unpacked[8 * 64];
    const uint8_t *steps_b = gc; /* the 8-bit layout is tile B as it lies */
    if (bits != 8) {
        unpacked_steps(steps, bits, gc, unpacked);
        steps_b = unpacked;
    }
    tile_zero(TILE_C);
    tile_load(TILE_A, xg, (size_t)K);
    tile_load(TILE_B, steps_b, 64);
    tile_dpbsud(TILE_C, TILE_A, TILE_B);
    tile_store(TILE_C, dots, TILE * sizeof(int32_t));
}

#define TILE_ROWS_ARGS                                                                                                  \
    const int steps, const int bits, int block, int tile, int r0, int rows, int K, const uint8_t *codes, const int8_t *sc, \
        const int8_t *mn, const float *d, const float *dmin, const int8_t *xq, const float *scale, const float *bsum,   \
        const float *bias, float *out, int N

#if defined(__AVX512VNNI__)

/* tile_rows (kquant.c's VNNI body) for up to 16 rows, its group dots from tile products; every
 * float operation is that body's, in its order, so each row's result is the same bits. */
static inline __attribute__((always_inline)) void tile_rows_amx(TILE_ROWS_ARGS) {
    const int G = 4 * steps, blocks = K / block, groups = K / G, per_block = block / G;
    const size_t group_bytes = (size_t)steps * 8 * bits;
    const uint8_t *tile_codes = codes + (size_t)tile * groups * group_bytes;
    int32_t dots[TILE_ROWS][TILE];
    __m512 acc[TILE_ROWS], block_acc[TILE_ROWS];
    configure_for(rows, G);
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
            for (size_t line = 0; line < group_bytes; line += 64)
                _mm_prefetch((const char *)(gc + PREFETCH * group_bytes + line), _MM_HINT_T0);
            group_dots(steps, bits, gc, xq + (size_t)r0 * K + (size_t)g * G, K, dots);
            for (int r = 0; r < rows; r++) {
                const __m512 dot = _mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)dots[r]));
                block_acc[r] = group_term(block_acc[r], dot, sv, mv, bsum[(size_t)(r0 + r) * groups + g]);
            }
        }
        block_end(rows, r0, b, blocks, scale, block_acc, acc);
    }
    store_rows(rows, r0, tile, N, bias, out, acc);
}

#else /* AVX2: only the reference reaches here (no AMX CPU lacks AVX-512), for the tests */

/* tile_rows (kquant.c's AVX2 body) for up to 16 rows, its group dots from tile products: per block,
 * sc * dot summed in int32 (exact, as that body's vpmaddwd sums are), its minimum terms after its
 * groups, then that body's float operations in its order. */
static inline __attribute__((always_inline)) void tile_rows_amx(TILE_ROWS_ARGS) {
    const int G = 4 * steps, blocks = K / block, groups = K / G, per_block = block / G;
    const size_t group_bytes = (size_t)steps * 8 * bits;
    const uint8_t *tile_codes = codes + (size_t)tile * groups * group_bytes;
    int32_t dots[TILE_ROWS][TILE];
    __m256 acc[TILE_ROWS][2], mvs[16][2];
    __m256i block_dots[TILE_ROWS][2];
    configure_for(rows, G);
    for (int r = 0; r < rows; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        const size_t at = ((size_t)tile * blocks + b) * TILE;
        for (int r = 0; r < rows; r++) block_dots[r][0] = block_dots[r][1] = _mm256_setzero_si256();
        for (int gb = 0; gb < per_block; gb++) {
            const int g = b * per_block + gb;
            const size_t tg = ((size_t)tile * groups + g) * TILE;
            const __m256i sv[2] = {_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + tg))),
                                   _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + tg + 8)))};
            mvs[gb][0] = lanes_of(mn + tg);
            mvs[gb][1] = lanes_of(mn + tg + 8);
            group_dots(steps, bits, tile_codes + (size_t)g * group_bytes, xq + (size_t)r0 * K + (size_t)g * G, K, dots);
            for (int r = 0; r < rows; r++)
                for (int h = 0; h < 2; h++) {
                    const __m256i dot = _mm256_loadu_si256((const __m256i *)(dots[r] + 8 * h));
                    block_dots[r][h] = _mm256_add_epi32(block_dots[r][h], _mm256_mullo_epi32(dot, sv[h]));
                }
        }
        combine_block(rows, r0, b, blocks, groups, per_block, scale, bsum, mvs, d, dmin, at, block_dots, acc);
    }
    store_rows(rows, r0, tile, N, bias, out, acc);
}

#endif

/* kq_matmul on the tiles: each thread configures its own tiles (their configuration is a thread's
 * state) and gives them back at the end. */
static void matmul_tiles(int M, int N, int K, int G, int block, int bits, const uint8_t *codes, const int8_t *sc,
                         const int8_t *mn, const float *d, const float *dmin, const int8_t *xq, const float *scale,
                         const float *bsum, const float *bias, float *out, int threads) {
    const int tiles = N / TILE;
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static)
        for (int tile = 0; tile < tiles; tile++) {
            for (int r0 = 0; r0 < M; r0 += TILE_ROWS) {
                const int rows = M - r0 < TILE_ROWS ? M - r0 : TILE_ROWS;
                if (bits == 4 && G == 32)
                    tile_rows_amx(8, 4, block, tile, r0, rows, K, codes, sc, mn, d, dmin, xq, scale, bsum, bias, out, N);
                else if (bits == 6)
                    tile_rows_amx(4, 6, block, tile, r0, rows, K, codes, sc, mn, d, dmin, xq, scale, bsum, bias, out, N);
                else
                    tile_rows_amx(4, 8, block, tile, r0, rows, K, codes, sc, mn, d, dmin, xq, scale, bsum, bias, out, N);
            }
        }
        tile_release();
    }
}

#endif
