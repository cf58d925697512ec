// Sine and cosine for score_mod (pasted after hook_helpers.cuh, only into headers
// whose hooks call them: the headers of other specs stay as they were).
//
// On the device the SFU's sin.approx / cos.approx: an FMUL by 1 / (2 pi) and a
// MUFU.SIN / MUFU.COS. Their absolute error is about 2^-21 for |x| <= pi and grows
// with |x| beyond, as the product x / (2 pi) rounds in float32: about |x| 2^-23,
// twice the rounding that a float32 argument carries already (|x| 2^-24). For a
// term of the score that is far inside the verifier's tolerances (bf16 1e-2 and
// fp16 2e-3 relative; the LSE within 1e-4 of the case's largest |LSE|, which grows
// with the scores as this error does); tests/lower/test_trig_accuracy_gpu.py holds
// it to 2^-20 + |x| 2^-21. libm's sinf / cosf would keep their Payne-Hanek
// reduction for |x| > 105615 in every score: trig_terms' fa_sm90 build (D = 128
// bf16) gets a 32-byte stack frame, and __sinf (sin.approx without .ftz: ptxas
// adds subnormal handling) spilled 16 B there; this form builds clean. A term of
// the distance alone never gets here (a distance table, built with torch), and
// mask_mod keeps the exact sinf / cosf (cuda_render).
namespace detail {
#if defined(__CUDA_ARCH__) && !defined(CUBRIDGE_PRECISE_HOOKS)
CUBRIDGE_HD float fast_sin(float x) {
  float y;
  asm("sin.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
CUBRIDGE_HD float fast_cos(float x) {
  float y;
  asm("cos.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
#else
CUBRIDGE_HD float fast_sin(float x) { return sinf(x); }
CUBRIDGE_HD float fast_cos(float x) { return cosf(x); }
#endif
}  // namespace detail
