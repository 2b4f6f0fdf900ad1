/*
 * test_half.c — the bf16/f16 storage conversions of src/core/half.h (and the reference
 * backend's double -> half store, src/ref/ref_common.h), against independent oracles.
 *
 *  - half -> f32: all 65536 bit patterns of each format, against a decoding written with
 *    ldexp from the format's definition (and, for f16, the compiler's _Float16 when it has one).
 *  - f32 -> half: every sign / exponent / kept-mantissa combination, each with the dropped
 *    mantissa bits set to 0, 1, half-way - 1, half-way, half-way + 1 and all ones (the cases
 *    where rounding can go wrong), plus 10M random float32 patterns; against a rounding done
 *    in double arithmetic with nearbyint (round to nearest even) and, for f16, _Float16.
 *  - the reference store: double -> float32 "round to odd" -> half must equal rounding the
 *    double once, on random doubles and on doubles just around half-precision ties.
 *  - the row helpers m2_row_to_f32 / m2_row_from_f32 for F32, BF16 and F16.
 * A mismatch prints the first few inputs that differ. Runs in about a second (-O3), a few
 * under the sanitizers.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/half.h"
#include "harness.h"
#include "ref/ref_common.h"

#if defined(__FLT16_MAX__) && !defined(MAMBA2C_NO_FLOAT16)
#define HAVE_FLOAT16 1
#else
#define HAVE_FLOAT16 0
#endif

/* ---- independent oracles --------------------------------------------------------------- */

/* The value of a bf16 (e8m7) or f16 (e5m10) bit pattern from the format's definition. */
static double decode(uint16_t h, int ebits, int mbits) {
    const int bias = (1 << (ebits - 1)) - 1;
    const int e = (h >> mbits) & ((1 << ebits) - 1), m = h & ((1 << mbits) - 1);
    const double sgn = (h >> 15) ? -1.0 : 1.0;
    if (e == (1 << ebits) - 1) return m ? NAN : sgn * INFINITY;
    if (e == 0) return sgn * ldexp((double)m, 1 - bias - mbits);
    return sgn * ldexp((double)((1 << mbits) + m), e - bias - mbits);
}

/* v rounded once to nearest even in the format (finite or inf; NaN handled by the caller). */
static uint16_t encode(double v, int ebits, int mbits) {
    const int bias = (1 << (ebits - 1)) - 1, emax = bias, emin = 1 - bias;
    const uint16_t sign = signbit(v) ? 0x8000 : 0, inf = (uint16_t)(((1 << ebits) - 1) << mbits);
    double a = fabs(v);
    if (isinf(a)) return sign | inf;
    int ex;
    frexp(a, &ex); /* a = f * 2^ex, f in [0.5, 1) */
    int e = ex - 1;
    if (a == 0.0 || e < emin) { /* subnormal range: units of 2^(emin - mbits) */
        double q = nearbyint(ldexp(a, mbits - emin)); /* exact scaling, then RNE */
        return (uint16_t)(sign | (uint16_t)q);        /* q == 2^mbits: the smallest normal */
    }
    double q = nearbyint(ldexp(a, mbits - e)); /* in [2^mbits, 2^(mbits+1)] */
    if (q == ldexp(1.0, mbits + 1)) {
        q = ldexp(1.0, mbits);
        e++;
    }
    if (e > emax) return sign | inf;
    return (uint16_t)(sign | (uint16_t)((e + bias) << mbits) | (uint16_t)(q - ldexp(1.0, mbits)));
}

static int is_nan16(uint16_t h, int mbits) {
    return ((h >> mbits) & ((1 << (15 - mbits)) - 1)) == (1 << (15 - mbits)) - 1 &&
           (h & ((1 << mbits) - 1));
}
static int is_quiet_nan16(uint16_t h, int mbits) {
    return is_nan16(h, mbits) && (h & (1 << (mbits - 1)));
}

/* ---- half -> f32, exhaustive ----------------------------------------------------------- */

static int same_f32(float got, double want) {
    if (isnan(want)) return isnan(got);
    return (double)got == want && !signbit(got) == !signbit(want);
}

static void test_to_f32(void) {
    th_begin("bf16 -> f32: all 65536 patterns");
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float got = m2_bf16_to_f32((uint16_t)h);
        double want = decode((uint16_t)h, 8, 7);
        if (!same_f32(got, want) && bad++ < 5) th_fail("0x%04x -> %a, expected %a", h, got, want);
    }
    th_expect(!bad, "%d mismatches", bad);
    th_end();

    th_begin("f16 -> f32: all 65536 patterns%s", HAVE_FLOAT16 ? " (also vs _Float16)" : "");
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float got = m2_f16_to_f32((uint16_t)h);
        double want = decode((uint16_t)h, 5, 10);
        int ok = same_f32(got, want);
        if (isnan(want) && ok) ok = (m2_f32_bits(got) & 0x00400000u) != 0; /* quiet */
#if HAVE_FLOAT16
        _Float16 hf;
        uint16_t hb = (uint16_t)h;
        memcpy(&hf, &hb, 2);
        ok = ok && same_f32(got, (double)(float)hf);
#endif
        if (!ok && bad++ < 5) th_fail("0x%04x -> %a, expected %a", h, got, want);
    }
    th_expect(!bad, "%d mismatches", bad);
    th_end();
}

/* ---- f32 -> half ------------------------------------------------------------------------ */

typedef struct {
    long long n, bad;
} tally;

static void check_bf16(float f, tally *t) {
    uint16_t got = m2_f32_to_bf16(f);
    int ok;
    if (isnan(f)) ok = is_quiet_nan16(got, 7) && (got >> 15) == (m2_f32_bits(f) >> 31);
    else ok = got == encode((double)f, 8, 7);
    t->n++;
    if (!ok && t->bad++ < 5)
        th_fail("f32 0x%08x (%a) -> bf16 0x%04x, expected 0x%04x", m2_f32_bits(f), f, got,
                isnan(f) ? 0x7FC0 : encode((double)f, 8, 7));
}

static void check_f16(float f, tally *t) {
    uint16_t got = m2_f32_to_f16(f);
    int ok;
    uint16_t want = isnan(f) ? 0x7E00 : encode((double)f, 5, 10);
    if (isnan(f)) {
        ok = is_quiet_nan16(got, 10) && (got >> 15) == (m2_f32_bits(f) >> 31);
    } else {
        ok = got == want;
#if HAVE_FLOAT16
        _Float16 hf = (_Float16)f;
        uint16_t hb;
        memcpy(&hb, &hf, 2);
        ok = ok && got == hb;
#endif
    }
    t->n++;
    if (!ok && t->bad++ < 5)
        th_fail("f32 0x%08x (%a) -> f16 0x%04x, expected 0x%04x", m2_f32_bits(f), f, got, want);
}

static void test_from_f32(void) {
    /* dropped-bit patterns: 0, 1, half-way - 1, half-way, half-way + 1, all ones */
    th_begin("f32 -> bf16: sign x exponent x 7 kept bits x 6 dropped-bit patterns");
    tally t = {0, 0};
    static const uint32_t low16[6] = {0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
    for (uint32_t hi = 0; hi < 65536; hi++) /* sign, exponent, kept mantissa */
        for (int k = 0; k < 6; k++) check_bf16(m2_f32_from_bits(hi << 16 | low16[k]), &t);
    th_note("%lld values", t.n);
    th_expect(!t.bad, "%lld mismatches", t.bad);
    th_end();

    th_begin("f32 -> f16: sign x exponent x 10 kept bits x 6 dropped-bit patterns%s",
             HAVE_FLOAT16 ? " (also vs _Float16)" : "");
    t = (tally){0, 0};
    static const uint32_t low13[6] = {0, 1, 0x0FFF, 0x1000, 0x1001, 0x1FFF};
    for (uint32_t hi = 0; hi < (1u << 19); hi++) /* sign, 8 exponent bits, 10 kept bits */
        for (int k = 0; k < 6; k++) check_f16(m2_f32_from_bits(hi << 13 | low13[k]), &t);
    th_note("%lld values", t.n);
    th_expect(!t.bad, "%lld mismatches", t.bad);
    th_end();

    th_begin("f32 -> bf16 and f16: 10M random patterns");
    th_rng r;
    th_rng_seed(&r, 0x5eed16);
    tally tb = {0, 0}, tf = {0, 0};
    for (int i = 0; i < 5000000; i++) {
        uint64_t v = th_rng_next(&r);
        check_bf16(m2_f32_from_bits((uint32_t)v), &tb);
        check_f16(m2_f32_from_bits((uint32_t)(v >> 32)), &tf);
        /* and a pattern near the f16 range, where most f32 exponents are not */
        uint32_t near = ((uint32_t)(v >> 7) & 0x80000000u) | (0x33000000u + (uint32_t)(v % 0x14800000u));
        check_f16(m2_f32_from_bits(near), &tf);
    }
    th_note("%lld bf16, %lld f16", tb.n, tf.n);
    th_expect(!tb.bad && !tf.bad, "%lld bf16 and %lld f16 mismatches", tb.bad, tf.bad);
    th_end();

    th_begin("f32 -> f16 and bf16: the documented edges");
    th_expect(m2_f32_to_f16(65504.0f) == 0x7BFF, "65504 -> 0x%04x", m2_f32_to_f16(65504.0f));
    th_expect(m2_f32_to_f16(65519.996f) == 0x7BFF, "65519.996 must stay finite");
    th_expect(m2_f32_to_f16(65520.0f) == 0x7C00, "65520 -> 0x%04x (expected inf)", m2_f32_to_f16(65520.0f));
    th_expect(m2_f32_to_f16(-1e9f) == 0xFC00, "-1e9 -> -inf");
    th_expect(m2_f32_to_f16(INFINITY) == 0x7C00 && m2_f32_to_f16(-INFINITY) == 0xFC00, "inf");
    th_expect(m2_f32_to_f16(0x1p-25f) == 0x0000, "2^-25 ties to even (0)");
    th_expect(m2_f32_to_f16(0x1.000002p-25f) == 0x0001, "just above 2^-25 -> 2^-24");
    th_expect(m2_f32_to_f16(0x1.8p-24f) == 0x0002, "1.5 * 2^-24 ties to even (2)");
    th_expect(m2_f32_to_f16(-0.0f) == 0x8000, "-0 keeps its sign");
    th_expect(is_quiet_nan16(m2_f32_to_f16(m2_f32_from_bits(0x7F800001u)), 10),
              "signalling NaN with a low payload must stay a (quiet) NaN in f16");
    th_expect(is_quiet_nan16(m2_f32_to_bf16(m2_f32_from_bits(0x7F800001u)), 7),
              "signalling NaN with a low payload must stay a (quiet) NaN in bf16");
    th_expect(m2_f32_to_bf16(INFINITY) == 0x7F80 && m2_f32_to_bf16(-INFINITY) == 0xFF80, "bf16 inf");
    th_expect(m2_f32_to_bf16(3.4028235e38f) == 0x7F80, "FLT_MAX rounds to bf16 inf");
    th_expect(m2_f32_to_bf16(1.0f + 0x1p-8f) == 0x3F80, "1 + 2^-8 ties to even (1)");
    th_expect(m2_f32_to_bf16(1.0f + 0x3p-8f) == 0x3F82, "1 + 3*2^-8 ties to even (1 + 2^-6)");
    th_end();
}

/* ---- the reference backend's store: double -> half rounded once -------------------------- */

static void test_ref_store(void) {
    th_begin("reference store: double -> bf16/f16 rounded once (via float32 round-to-odd)");
    th_rng r;
    th_rng_seed(&r, 0x0dd);
    long long bad = 0, n = 0;
    for (int i = 0; i < 1000000; i++) {
        /* random doubles over the f16 range, and doubles within a few float32 ulps of a
         * half-precision tie (where rounding through a nearest-even float32 would go wrong) */
        double v;
        if (i % 2) {
            v = ldexp(th_rng_uniform(&r, 1.0, 2.0), (int)(th_rng_next(&r) % 50) - 30);
        } else {
            int fmt16 = (i / 2) % 2; /* 1: an f16 tie, 0: a bf16 tie */
            int mb = fmt16 ? 10 : 7;
            double m = (double)((1 << mb) + (int)(th_rng_next(&r) % (1u << mb))) + 0.5;
            v = ldexp(m, (int)(th_rng_next(&r) % 20) - 10 - mb);
            v += ldexp((double)((int)(th_rng_next(&r) % 7) - 3), -60); /* below float32 ulp */
        }
        if (th_rng_next(&r) & 1) v = -v;
        uint16_t buf[2];
        m2r_store(buf, MAMBA2_DTYPE_BF16, 0, v);
        m2r_store(buf, MAMBA2_DTYPE_F16, 1, v);
        int ok = buf[0] == encode(v, 8, 7) && buf[1] == encode(v, 5, 10) &&
                 m2r_load(buf, MAMBA2_DTYPE_BF16, 0) == decode(buf[0], 8, 7) &&
                 (isnan(decode(buf[1], 5, 10)) || m2r_load(buf, MAMBA2_DTYPE_F16, 1) == decode(buf[1], 5, 10));
        n++;
        if (!ok && bad++ < 5)
            th_fail("%a -> bf16 0x%04x (want 0x%04x), f16 0x%04x (want 0x%04x)", v, buf[0],
                    encode(v, 8, 7), buf[1], encode(v, 5, 10));
    }
    uint16_t h[2];
    m2r_store(h, MAMBA2_DTYPE_F16, 0, 1e300);
    m2r_store(h, MAMBA2_DTYPE_BF16, 1, -1e300);
    th_expect(h[0] == 0x7C00 && h[1] == 0xFF80, "1e300 -> f16 0x%04x, -1e300 -> bf16 0x%04x", h[0], h[1]);
    m2r_store(h, MAMBA2_DTYPE_F16, 0, NAN);
    m2r_store(h, MAMBA2_DTYPE_BF16, 1, NAN);
    th_expect(is_nan16(h[0], 10) && is_nan16(h[1], 7), "NaN must stay NaN");
    th_note("%lld values", n);
    th_expect(!bad, "%lld mismatches", bad);
    th_end();
}

/* ---- row helpers ------------------------------------------------------------------------ */

static void test_rows(void) {
    th_begin("m2_row_to_f32 / m2_row_from_f32 (F32, BF16, F16)");
    enum { n = 37 };
    float src[n], back[n], wide[n];
    uint16_t h[2 * n + 2]; /* room for n floats: the F32 branch is not reachable but visible */
    th_rng r;
    th_rng_seed(&r, 7);
    for (int i = 0; i < n; i++) src[i] = (float)(th_rng_normal(&r) * 100.0);
    static const mamba2_dtype_t dts[2] = {MAMBA2_DTYPE_BF16, MAMBA2_DTYPE_F16};
    for (int k = 0; k < 2; k++) {
        h[n] = h[n + 1] = 0xA5A5;
        m2_row_from_f32(h, dts[k], n, src);
        th_expect(h[n] == 0xA5A5 && h[n + 1] == 0xA5A5, "m2_row_from_f32 wrote past n");
        m2_row_to_f32(h, dts[k], n, wide);
        for (int i = 0; i < n; i++) {
            uint16_t want = dts[k] == MAMBA2_DTYPE_BF16 ? m2_f32_to_bf16(src[i]) : m2_f32_to_f16(src[i]);
            float wantf = dts[k] == MAMBA2_DTYPE_BF16 ? m2_bf16_to_f32(want) : m2_f16_to_f32(want);
            if (!th_expect(h[i] == want && wide[i] == wantf, "%s element %d", dts[k] == MAMBA2_DTYPE_BF16 ? "bf16" : "f16", i))
                break;
        }
    }
    m2_row_from_f32(back, MAMBA2_DTYPE_F32, n, src);
    m2_row_to_f32(back, MAMBA2_DTYPE_F32, n, wide);
    th_expect(!memcmp(wide, src, sizeof src), "F32 rows must copy exactly");
    m2_row_to_f32(h, MAMBA2_DTYPE_F16, 0, wide); /* n == 0: nothing */
    th_end();
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-q")) th_set_verbose(0);
    test_to_f32();
    test_from_f32();
    test_ref_store();
    test_rows();
    return th_finish();
}
