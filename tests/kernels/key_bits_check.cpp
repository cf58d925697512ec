// Checks common/key_bits.cuh on the host, every bit against its definition
// (tests/kernels/test_key_bits.py runs it):
//
//   key_bits_check interval BLOCK_N
//   key_bits_check power BLOCK_N PERIOD...   (period_bits, powers of two, widths)
//   key_bits_check odd BLOCK_N PERIOD...     (odd_period_bits, any period, width 1)
//
// A thread's bit 2j + e is key k_first + 8j + e (k_first: a block's first key plus the
// thread's first column, 0, 2, 4 or 6). One line per period (a single one for
// intervals): "PERIOD checked wrong hits", hits the bits that should be set.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "key_bits.cuh"

namespace {

constexpr int kBlocks[] = {0, 1, 2, 7, 33, 1000};  // key blocks (k_base / block_n)
constexpr int kPhaseMin = -700, kPhaseMax = 700;

struct Count {
  long long checked = 0, wrong = 0, hits = 0;
};

int floor_mod(long long x, long long p) { return static_cast<int>(((x % p) + p) % p); }

int key_at(int k_first, int bit) { return k_first + 8 * (bit / 2) + bit % 2; }

// Bits below kBlockN / 4 against `want(key)` (set bits past them are the interval's to
// clear, and interval_bits must not set any: `all_bits`).
template <int kBlockN, class Want>
void check_word(uint32_t got, int k_first, Want&& want, Count& c, bool all_bits,
                const char* what, int period, int phase, int width) {
  for (int bit = 0; bit < (all_bits ? 32 : kBlockN / 4); ++bit) {
    const bool expect = bit < kBlockN / 4 && want(key_at(k_first, bit));
    const bool have = (got >> bit) & 1u;
    ++c.checked;
    c.hits += expect;
    if (expect != have && c.wrong++ == 0) {
      fprintf(stderr, "%s: block_n %d period %d phase %d width %d k_first %d bit %d: %d, want %d\n",
              what, kBlockN, period, phase, width, k_first, bit, have, expect);
    }
  }
}

template <class F>
void each_first_key(int block_n, F&& f) {
  for (int block : kBlocks)
    for (int col0 = 0; col0 < 8; col0 += 2) f(block * block_n + col0);
}

template <int kBlockN>
void intervals() {
  Count c;
  each_first_key(kBlockN, [&](int k_first) {
    std::vector<int> ends;
    for (int x = k_first - 20; x <= k_first + kBlockN + 20; ++x) ends.push_back(x);
    ends.push_back(-(1 << 30));  // (NO_LOWER, NO_UPPER of row_interval.py)
    ends.push_back(1 << 30);
    for (int lo : ends)
      for (int hi : ends) {
        const uint32_t got = cubridge::interval_bits<kBlockN>(lo, hi, k_first);
        check_word<kBlockN>(got, k_first, [&](int k) { return lo <= k && k <= hi; }, c, true,
                            "interval_bits", 0, lo, hi);
      }
  });
  printf("0 %lld %lld %lld\n", c.checked, c.wrong, c.hits);
}

std::vector<int> widths_of(int period) {
  std::vector<int> out;
  if (period <= 256) {
    for (int w = 1; w < period || w == 1; ++w) out.push_back(w);
    return out;
  }
  for (int w : {1, 2, 3, 7, 8, 9, 15, 16, 17, 40, 63, 64, 65, 127, 128, 129, 200})
    if (w < period) out.push_back(w);
  out.push_back(period / 2);
  out.push_back(period - 1);
  return out;
}

template <int kBlockN>
void powers(const std::vector<int>& periods) {
  for (int period : periods) {
    Count c;
    for (int width : widths_of(period))
      each_first_key(kBlockN, [&](int k_first) {
        for (int phase = kPhaseMin; phase <= kPhaseMax; ++phase) {
          const uint32_t got = cubridge::period_bits<kBlockN>(period, phase, width, k_first);
          check_word<kBlockN>(
              got, k_first, [&](int k) { return floor_mod(k - phase, period) < width; }, c,
              false, "period_bits", period, phase, width);
        }
      });
    printf("%d %lld %lld %lld\n", period, c.checked, c.wrong, c.hits);
  }
}

template <int kBlockN>
void odd(const std::vector<int>& periods) {
  for (int period : periods) {
    Count c;
    each_first_key(kBlockN, [&](int k_first) {
      for (int phase = kPhaseMin; phase <= kPhaseMax; ++phase) {
        const uint32_t got = cubridge::odd_period_bits<kBlockN>(period, phase, k_first);
        check_word<kBlockN>(
            got, k_first, [&](int k) { return floor_mod(k - phase, period) == 0; }, c, false,
            "odd_period_bits", period, phase, 1);
      }
    });
    printf("%d %lld %lld %lld\n", period, c.checked, c.wrong, c.hits);
  }
}

template <int kBlockN>
int run(const char* mode, const std::vector<int>& periods) {
  const std::string m = mode;
  if (m == "interval") {
    intervals<kBlockN>();
  } else if (m == "power") {
    powers<kBlockN>(periods);
  } else if (m == "odd") {
    odd<kBlockN>(periods);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: key_bits_check interval|power|odd BLOCK_N [PERIOD...]\n");
    return 2;
  }
  std::vector<int> periods;
  for (int i = 3; i < argc; ++i) periods.push_back(atoi(argv[i]));
  const int block_n = atoi(argv[2]);
  if (block_n == 64) return run<64>(argv[1], periods);
  if (block_n == 128) return run<128>(argv[1], periods);
  fprintf(stderr, "block_n 64 or 128\n");
  return 2;
}
