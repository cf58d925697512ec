// Helpers of generated hook headers (pasted into each header by
// cubridge.lower.hook_header, so a header is self-contained).
//
// Values: integer floor division and modulo with Python/torch semantics (C
// truncates towards zero), NaN-propagating min/max as torch.minimum/maximum.
// Intervals: the C++ twin of cubridge/transfer/interval.py, used by
// block_kind to classify a tile in closed form. Same rules, same names.
namespace detail {

CUBRIDGE_HD int floordiv(int a, int b) {
  const int q = a / b;
  return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
CUBRIDGE_HD int mod(int a, int b) {
  const int r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
// torch's div_floor for floats (fmod based, exact where floorf(a / b) is not)
CUBRIDGE_HD float floordiv(float a, float b) {
  if (b == 0.0f) return a / b;
  const float m = fmodf(a, b);
  float d = (a - m) / b;
  if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) d -= 1.0f;
  if (d == 0.0f) return copysignf(0.0f, a / b);
  float f = floorf(d);
  if (d - f > 0.5f) f += 1.0f;
  return f;
}
CUBRIDGE_HD float mod(float a, float b) {
  float m = fmodf(a, b);
  if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) m += b;
  return m;
}
CUBRIDGE_HD int min(int a, int b) { return a < b ? a : b; }
CUBRIDGE_HD int max(int a, int b) { return a > b ? a : b; }
CUBRIDGE_HD float min(float a, float b) { return (a != a || a < b) ? a : b; }
CUBRIDGE_HD float max(float a, float b) { return (a != a || a > b) ? a : b; }
CUBRIDGE_HD int abs(int a) { return a < 0 ? -a : a; }
CUBRIDGE_HD float abs(float a) { return fabsf(a); }
CUBRIDGE_HD float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Fast forms for score_mod and activation, which run on every score: on the
// device the SFU approximations kernels use (tanh.approx: 2^-11 relative
// error; ex2/lg2.approx: a few ulps), exact libm on the host. mask_mod never
// uses them: block classification's float slack assumes a few ulps at most.
// Define CUBRIDGE_PRECISE_HOOKS to use libm on the device too.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750 && !defined(CUBRIDGE_PRECISE_HOOKS)
CUBRIDGE_HD float fast_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
CUBRIDGE_HD float fast_exp(float x) { return __expf(x); }
CUBRIDGE_HD float fast_exp2(float x) { return exp2f(x); }
CUBRIDGE_HD float fast_log(float x) { return __logf(x); }
CUBRIDGE_HD float fast_div(float a, float b) { return __fdividef(a, b); }
// 1 / (1 + e^-x): accurate relative to the result down to tiny values, which a
// sigmoid attention row of very negative scores consists of. (1 + tanh.approx(x/2))
// / 2 takes one SFU op instead of two and was 9-17% faster on fa_sm90, but its
// absolute error (4e-6) failed verification on such rows:
// bench/results/fa_sm90-ab-2026-11-24-sigmoid/.
CUBRIDGE_HD float fast_sigmoid(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }
// 2^15 sigmoid(x) = 1 / (2^-15 + 2^(-x log2 e - 15)), as many instructions as
// fast_sigmoid (the - 15 folds into the FFMA of the exponent).
CUBRIDGE_HD float fast_sigmoid_2p15(float x) {
  float e;  // ex2.approx as __expf uses it: one SFU op
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(fmaf(x, -1.4426950408889634f, -15.0f)));
  return __fdividef(1.0f, 3.0517578125e-05f + e);
}
// The same from the exponent, which a kernel may compute with its scale in one
// FFMA: 1 / (1 + 2^t) for t = -x log2(e), and 2^15 sigmoid(x) = 1 / (2^-15 + 2^t)
// for t = -x log2(e) - 15 (the bias folds into the FFMA's addend).
CUBRIDGE_HD float fast_sigmoid_of_exponent(float t) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(t));
  return __fdividef(1.0f, 1.0f + e);
}
CUBRIDGE_HD float fast_sigmoid_2p15_of_exponent(float t) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(t));
  return __fdividef(1.0f, 3.0517578125e-05f + e);
}
#else
CUBRIDGE_HD float fast_tanh(float x) { return tanhf(x); }
CUBRIDGE_HD float fast_exp(float x) { return expf(x); }
CUBRIDGE_HD float fast_exp2(float x) { return exp2f(x); }
CUBRIDGE_HD float fast_log(float x) { return logf(x); }
CUBRIDGE_HD float fast_div(float a, float b) { return a / b; }
CUBRIDGE_HD float fast_sigmoid(float x) { return sigmoid(x); }
CUBRIDGE_HD float fast_sigmoid_2p15(float x) { return 32768.0f * sigmoid(x); }
CUBRIDGE_HD float fast_sigmoid_of_exponent(float t) { return 1.0f / (1.0f + exp2f(t)); }
CUBRIDGE_HD float fast_sigmoid_2p15_of_exponent(float t) {
  return 32768.0f / (1.0f + exp2f(t + 15.0f));
}
#endif

// ---- intervals -----------------------------------------------------------
// Numbers as [lo, hi] in double (exact for integers below 2^53); bools as
// [lo, hi] in {0, 1}: lo = 1 always true, hi = 0 never true.
struct Iv {
  double lo;
  double hi;
};

CUBRIDGE_HD Iv iv_fix(double lo, double hi) {
  return Iv{lo != lo ? -INFINITY : lo, hi != hi ? INFINITY : hi};
}
CUBRIDGE_HD Iv iv_point(double v) { return Iv{v, v}; }
CUBRIDGE_HD Iv iv_span(double lo, double hi) { return Iv{lo, hi}; }
CUBRIDGE_HD Iv iv_unknown() { return Iv{-INFINITY, INFINITY}; }
CUBRIDGE_HD Iv iv_unknown_bool() { return Iv{0.0, 1.0}; }
// Float results widen by 2^-18 relative (64 float32 ulps) so the kernel's
// float32 value of any pair stays inside.
CUBRIDGE_HD Iv iv_fw(Iv a) {
  const double s = 3.814697265625e-06;  // 2^-18
  return Iv{a.lo - fabs(a.lo) * s - 1e-30, a.hi + fabs(a.hi) * s + 1e-30};
}
CUBRIDGE_HD Iv iv_to_int(Iv a) { return Iv{trunc(a.lo), trunc(a.hi)}; }
CUBRIDGE_HD Iv iv_neg(Iv a) { return Iv{-a.hi, -a.lo}; }
CUBRIDGE_HD Iv iv_abs(Iv a) {
  if (a.lo >= 0) return a;
  if (a.hi <= 0) return Iv{-a.hi, -a.lo};
  return Iv{0.0, -a.lo > a.hi ? -a.lo : a.hi};
}
CUBRIDGE_HD Iv iv_not(Iv a) { return Iv{1.0 - a.hi, 1.0 - a.lo}; }
CUBRIDGE_HD Iv iv_tanh(Iv a) { return iv_fix(tanh(a.lo), tanh(a.hi)); }
CUBRIDGE_HD Iv iv_exp(Iv a) { return iv_fix(exp(a.lo), exp(a.hi)); }
CUBRIDGE_HD Iv iv_exp2(Iv a) { return iv_fix(exp2(a.lo), exp2(a.hi)); }
CUBRIDGE_HD Iv iv_log(Iv a) { return iv_fix(log(a.lo), log(a.hi)); }
CUBRIDGE_HD Iv iv_log2(Iv a) { return iv_fix(log2(a.lo), log2(a.hi)); }
CUBRIDGE_HD Iv iv_sigmoid(Iv a) { return iv_fix(1.0 / (1.0 + exp(-a.lo)), 1.0 / (1.0 + exp(-a.hi))); }
CUBRIDGE_HD Iv iv_sqrt(Iv a) { return iv_fix(sqrt(a.lo), sqrt(a.hi)); }
CUBRIDGE_HD Iv iv_floor(Iv a) { return Iv{floor(a.lo), floor(a.hi)}; }
CUBRIDGE_HD Iv iv_ceil(Iv a) { return Iv{ceil(a.lo), ceil(a.hi)}; }
CUBRIDGE_HD Iv iv_add(Iv a, Iv b) { return iv_fix(a.lo + b.lo, a.hi + b.hi); }
CUBRIDGE_HD Iv iv_sub(Iv a, Iv b) { return iv_fix(a.lo - b.hi, a.hi - b.lo); }
CUBRIDGE_HD Iv iv_hull4(double w, double x, double y, double z) {
  if (w != w || x != x || y != y || z != z) return iv_unknown();
  const double lo = fmin(fmin(w, x), fmin(y, z));
  const double hi = fmax(fmax(w, x), fmax(y, z));
  return Iv{lo, hi};
}
CUBRIDGE_HD Iv iv_mul(Iv a, Iv b) {
  return iv_hull4(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi);
}
CUBRIDGE_HD bool iv_has_zero(Iv a) { return a.lo <= 0 && 0 <= a.hi; }
CUBRIDGE_HD Iv iv_truediv(Iv a, Iv b) {
  if (iv_has_zero(b)) return iv_unknown();
  return iv_hull4(a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi);
}
CUBRIDGE_HD Iv iv_floordiv(Iv a, Iv b) {
  const Iv r = iv_truediv(a, b);
  return Iv{floor(r.lo), floor(r.hi)};
}
CUBRIDGE_HD Iv iv_mod(Iv a, Iv b, bool is_int) {
  const double one = is_int ? 1.0 : 0.0;
  if (b.lo == b.hi && b.lo != 0 && isfinite(a.lo) && isfinite(a.hi)) {
    const double c = b.lo;
    const double f_lo = floor(a.lo / c), f_hi = floor(a.hi / c);
    if (f_lo == f_hi) return Iv{a.lo - c * f_lo, a.hi - c * f_lo};
  }
  if (b.lo > 0) return Iv{0.0, b.hi - one};
  if (b.hi < 0) return Iv{b.lo + one, 0.0};
  return iv_unknown();
}
CUBRIDGE_HD Iv iv_min(Iv a, Iv b) { return Iv{fmin(a.lo, b.lo), fmin(a.hi, b.hi)}; }
CUBRIDGE_HD Iv iv_max(Iv a, Iv b) { return Iv{fmax(a.lo, b.lo), fmax(a.hi, b.hi)}; }
CUBRIDGE_HD Iv iv_lt(Iv a, Iv b) { return Iv{a.hi < b.lo ? 1.0 : 0.0, a.lo < b.hi ? 1.0 : 0.0}; }
CUBRIDGE_HD Iv iv_le(Iv a, Iv b) { return Iv{a.hi <= b.lo ? 1.0 : 0.0, a.lo <= b.hi ? 1.0 : 0.0}; }
CUBRIDGE_HD Iv iv_eq(Iv a, Iv b) {
  const bool always = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo;
  const bool overlap = a.lo <= b.hi && b.lo <= a.hi;
  return Iv{always ? 1.0 : 0.0, overlap ? 1.0 : 0.0};
}
CUBRIDGE_HD Iv iv_and(Iv a, Iv b) { return Iv{fmin(a.lo, b.lo), fmin(a.hi, b.hi)}; }
CUBRIDGE_HD Iv iv_or(Iv a, Iv b) { return Iv{fmax(a.lo, b.lo), fmax(a.hi, b.hi)}; }
CUBRIDGE_HD Iv iv_xor(Iv a, Iv b) {
  if (a.lo == a.hi && b.lo == b.hi) return iv_point(a.lo != b.lo ? 1.0 : 0.0);
  return iv_unknown_bool();
}
CUBRIDGE_HD Iv iv_where(Iv c, Iv a, Iv b) {
  if (c.lo == 1.0) return a;
  if (c.hi == 0.0) return b;
  return Iv{fmin(a.lo, b.lo), fmax(a.hi, b.hi)};
}
CUBRIDGE_HD cubridge::BlockKind iv_kind(Iv mask) {
  if (mask.hi == 0.0) return cubridge::BlockKind::Empty;
  if (mask.lo == 1.0) return cubridge::BlockKind::Full;
  return cubridge::BlockKind::Partial;
}

// ---- integer intervals ---------------------------------------------------
// The same rules on int bounds, for masks of integers and bools only (no
// floats; aux reads only of 0-d integer scalars) whose every bound stays below
// 2^30 in magnitude when positions and scalars are below 2^24
// (cubridge.lower.cuda_render checks that when it picks this form; block_kind
// checks positions and scalars at run time). There the double rules above are
// exact, so both classify every tile identically; these take a few integer ops
// instead of double conversions and NaN checks. That matters: the producer
// classifies every block, and in doubles it fell behind the consumers
// (prefix_lm 474 -> 528 TFLOP/s, bench/results/fa_sm90-ab-2026-11-24-ivi/).
struct IvI {
  int lo;
  int hi;
};

// Whether a tile's last positions are in IvI's range (below 2^24).
CUBRIDGE_HD bool ivi_in_range(int q_last, int k_last) {
  return q_last < (1 << 24) && k_last < (1 << 24);
}
// Whether a 0-d aux scalar the mask reads is in IvI's range (|v| below 2^24).
CUBRIDGE_HD bool ivi_scalar_in_range(int64_t v) { return v > -(1 << 24) && v < (1 << 24); }

CUBRIDGE_HD IvI ivi_point(int v) { return IvI{v, v}; }
CUBRIDGE_HD IvI ivi_span(int lo, int hi) { return IvI{lo, hi}; }
CUBRIDGE_HD IvI ivi_neg(IvI a) { return IvI{-a.hi, -a.lo}; }
CUBRIDGE_HD IvI ivi_abs(IvI a) {
  if (a.lo >= 0) return a;
  if (a.hi <= 0) return IvI{-a.hi, -a.lo};
  return IvI{0, -a.lo > a.hi ? -a.lo : a.hi};
}
CUBRIDGE_HD IvI ivi_not(IvI a) { return IvI{1 - a.hi, 1 - a.lo}; }
CUBRIDGE_HD IvI ivi_add(IvI a, IvI b) { return IvI{a.lo + b.lo, a.hi + b.hi}; }
CUBRIDGE_HD IvI ivi_sub(IvI a, IvI b) { return IvI{a.lo - b.hi, a.hi - b.lo}; }
CUBRIDGE_HD IvI ivi_hull4(int w, int x, int y, int z) {
  return IvI{min(min(w, x), min(y, z)), max(max(w, x), max(y, z))};
}
CUBRIDGE_HD IvI ivi_mul(IvI a, IvI b) {
  return ivi_hull4(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi);
}
// b is a nonzero constant here (the renderer's condition): floor is monotone,
// so the corners' floors bound it, as floor(a / b) in double does.
CUBRIDGE_HD IvI ivi_floordiv(IvI a, IvI b) {
  const int x = floordiv(a.lo, b.lo), y = floordiv(a.hi, b.lo);
  return IvI{min(x, y), max(x, y)};
}
CUBRIDGE_HD IvI ivi_mod(IvI a, IvI b, bool /*is_int: always here*/) {
  const int c = b.lo;  // a nonzero constant here
  const int f_lo = floordiv(a.lo, c);
  if (f_lo == floordiv(a.hi, c)) return IvI{a.lo - c * f_lo, a.hi - c * f_lo};
  return c > 0 ? IvI{0, c - 1} : IvI{c + 1, 0};
}
CUBRIDGE_HD IvI ivi_min(IvI a, IvI b) { return IvI{min(a.lo, b.lo), min(a.hi, b.hi)}; }
CUBRIDGE_HD IvI ivi_max(IvI a, IvI b) { return IvI{max(a.lo, b.lo), max(a.hi, b.hi)}; }
CUBRIDGE_HD IvI ivi_lt(IvI a, IvI b) { return IvI{a.hi < b.lo, a.lo < b.hi}; }
CUBRIDGE_HD IvI ivi_le(IvI a, IvI b) { return IvI{a.hi <= b.lo, a.lo <= b.hi}; }
CUBRIDGE_HD IvI ivi_eq(IvI a, IvI b) {
  const bool always = a.lo == a.hi && b.lo == b.hi && a.lo == b.lo;
  const bool overlap = a.lo <= b.hi && b.lo <= a.hi;
  return IvI{always, overlap};
}
CUBRIDGE_HD IvI ivi_and(IvI a, IvI b) { return ivi_min(a, b); }
CUBRIDGE_HD IvI ivi_or(IvI a, IvI b) { return ivi_max(a, b); }
CUBRIDGE_HD IvI ivi_xor(IvI a, IvI b) {
  if (a.lo == a.hi && b.lo == b.hi) return ivi_point(a.lo != b.lo);
  return IvI{0, 1};
}
CUBRIDGE_HD IvI ivi_where(IvI c, IvI a, IvI b) {
  if (c.lo == 1) return a;
  if (c.hi == 0) return b;
  return IvI{min(a.lo, b.lo), max(a.hi, b.hi)};
}
CUBRIDGE_HD cubridge::BlockKind ivi_kind(IvI mask) {
  if (mask.hi == 0) return cubridge::BlockKind::Empty;
  if (mask.lo == 1) return cubridge::BlockKind::Full;
  return cubridge::BlockKind::Partial;
}

}  // namespace detail
