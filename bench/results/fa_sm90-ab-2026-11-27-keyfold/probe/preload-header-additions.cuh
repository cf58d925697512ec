// What the probe's header added to the one cubridge generates for graphormer_spatial.py
// (slot 0: spatial_bias, slot 1: distances), before its mask_mod: the score_mod split into
// the pair read, issued before the wait for S (preload-candidate.patch), and its use.
#define CUBRIDGE_HOOKS_PAIR_PRELOAD 1
CUBRIDGE_HD uint32_t pair_preload(int b, int h, int q, int k, const AuxArgs& aux) {
  (void)h;
  return static_cast<uint32_t>(cubridge::aux_load_c<int32_t, 3>(aux, 1, b, q, k));
}
CUBRIDGE_HD float score_mod_preloaded(float s, int b, int h, uint32_t v, const AuxArgs& aux) {
  (void)b;
  return (s + cubridge::aux_load_c<float, 2>(aux, 0, h, static_cast<int>(static_cast<int32_t>(v))));
}
