// File: reduce.cc
#include "collectives/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdmaflow::collectives {
namespace {

template <typename T>
T Apply(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kProduct:
      return a * b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return a;
}

// One loop per operator so the compiler vectorizes each.
template <typename T>
__attribute__((always_inline)) inline void ReduceNative(ReduceOp op, T* __restrict dst, const T* __restrict src,
                  size_t count) {
  switch (op) {
    case ReduceOp::kSum:
      for (size_t i = 0; i < count; ++i) dst[i] += src[i];
      return;
    case ReduceOp::kProduct:
      for (size_t i = 0; i < count; ++i) dst[i] *= src[i];
      return;
    case ReduceOp::kMin:
      for (size_t i = 0; i < count; ++i) dst[i] = std::min(dst[i], src[i]);
      return;
    case ReduceOp::kMax:
      for (size_t i = 0; i < count; ++i) dst[i] = std::max(dst[i], src[i]);
      return;
  }
}

// 16-bit floats: widen, reduce, round back. One loop per operator and a
// branch-free conversion, so the compiler vectorizes each.
template <ReduceOp kOp>
float ApplyFloat(float a, float b) {
  if constexpr (kOp == ReduceOp::kSum) return a + b;
  if constexpr (kOp == ReduceOp::kProduct) return a * b;
  if constexpr (kOp == ReduceOp::kMin) return std::min(a, b);
  if constexpr (kOp == ReduceOp::kMax) return std::max(a, b);
}

struct BFloat16Codec {
  static float Widen(uint16_t value) {
    const uint32_t bits = static_cast<uint32_t>(value) << 16;
    float out;
    std::memcpy(&out, &bits, 4);
    return out;
  }
  // Round to nearest even; any NaN becomes the canonical quiet NaN.
  static uint16_t Narrow(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    return static_cast<uint16_t>(nan ? 0x7fc0u : rounded);
  }
};

struct HalfCodec {
  static float Widen(uint16_t value) {
    _Float16 half;
    std::memcpy(&half, &value, 2);
    return static_cast<float>(half);
  }
  static uint16_t Narrow(float value) {
    const _Float16 half = static_cast<_Float16>(value);
    uint16_t bits;
    std::memcpy(&bits, &half, 2);
    return bits;
  }
};

template <typename Codec, ReduceOp kOp>
void ReduceHalfLoop(uint16_t* __restrict dst, const uint16_t* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    dst[i] = Codec::Narrow(ApplyFloat<kOp>(Codec::Widen(dst[i]), Codec::Widen(src[i])));
  }
}

template <typename Codec>
void ReduceHalf(ReduceOp op, uint16_t* dst, const uint16_t* src, size_t count) {
  switch (op) {
    case ReduceOp::kSum: return ReduceHalfLoop<Codec, ReduceOp::kSum>(dst, src, count);
    case ReduceOp::kProduct: return ReduceHalfLoop<Codec, ReduceOp::kProduct>(dst, src, count);
    case ReduceOp::kMin: return ReduceHalfLoop<Codec, ReduceOp::kMin>(dst, src, count);
    case ReduceOp::kMax: return ReduceHalfLoop<Codec, ReduceOp::kMax>(dst, src, count);
  }
}

#if defined(__x86_64__)
// The 16-bit types eight at a time in AVX2 (and F16C for float16, whose
// scalar conversions GCC leaves to libgcc, element by element); the tail
// goes through the codecs above. Same rounding, same bits.
#define RDMAFLOW_AVX2 __attribute__((target("avx2,f16c")))

RDMAFLOW_AVX2 __m256 ApplyVector(ReduceOp op, __m256 dst, __m256 src) {
  switch (op) {
    case ReduceOp::kSum: return _mm256_add_ps(dst, src);
    case ReduceOp::kProduct: return _mm256_mul_ps(dst, src);
    // std::min(dst, src) is src < dst ? src : dst, as _mm256_min_ps(src, dst).
    case ReduceOp::kMin: return _mm256_min_ps(src, dst);
    case ReduceOp::kMax: return _mm256_max_ps(src, dst);
  }
  return dst;
}

struct Half8 {
  RDMAFLOW_AVX2 static __m256 Widen(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  RDMAFLOW_AVX2 static void Narrow(uint16_t* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

struct BFloat168 {
  RDMAFLOW_AVX2 static __m256 Widen(const uint16_t* p) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  RDMAFLOW_AVX2 static void Narrow(uint16_t* p, __m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
    const __m256i out = _mm256_blendv_epi8(rounded, _mm256_set1_epi32(0x7fc0), nan);
    // 32 -> 16 bits: packus works per 128-bit lane, so put the lanes back.
    const __m256i packed =
        _mm256_permute4x64_epi64(_mm256_packus_epi32(out, out), 0b00001000);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
};

template <typename Vector, typename Codec>
RDMAFLOW_AVX2 void ReduceHalfAvx2(ReduceOp op, uint16_t* dst, const uint16_t* src,
                                  size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    Vector::Narrow(dst + i, ApplyVector(op, Vector::Widen(dst + i), Vector::Widen(src + i)));
  }
  ReduceHalf<Codec>(op, dst + i, src + i, count - i);
}

const bool kHasAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");

// The native types' loops again, for AVX2 and with the vectorizer's full
// cost model (-O2 keeps only its "very cheap" one, which leaves loops of
// unknown length scalar).
template <typename T>
__attribute__((target("avx2"), optimize("tree-vectorize", "vect-cost-model=dynamic")))
void ReduceNativeAvx2(ReduceOp op, T* dst, const T* src, size_t count) {
  ReduceNative(op, dst, src, count);
}
#endif

template <typename T>
void ReduceNativeBest(ReduceOp op, T* dst, const T* src, size_t count) {
#if defined(__x86_64__)
  if (kHasAvx2) return ReduceNativeAvx2(op, dst, src, count);
#endif
  ReduceNative(op, dst, src, count);
}

void ReduceBFloat16(ReduceOp op, uint16_t* dst, const uint16_t* src, size_t count) {
#if defined(__x86_64__)
  if (kHasAvx2) return ReduceHalfAvx2<BFloat168, BFloat16Codec>(op, dst, src, count);
#endif
  ReduceHalf<BFloat16Codec>(op, dst, src, count);
}

void ReduceFloat16(ReduceOp op, uint16_t* dst, const uint16_t* src, size_t count) {
#if defined(__x86_64__)
  if (kHasAvx2) return ReduceHalfAvx2<Half8, HalfCodec>(op, dst, src, count);
#endif
  ReduceHalf<HalfCodec>(op, dst, src, count);
}

}  // namespace

size_t ElementSize(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
  }
  return 1;
}

std::string DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
  }
  return "?";
}

std::string ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProduct: return "product";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

std::vector<std::string> DataTypeNames() {
  return {"float32", "float64", "float16", "bfloat16", "int32", "int64"};
}

absl::StatusOr<DataType> ParseDataType(absl::string_view name) {
  if (name == "float32" || name == "fp32") return DataType::kFloat32;
  if (name == "float64" || name == "fp64") return DataType::kFloat64;
  if (name == "float16" || name == "fp16") return DataType::kFloat16;
  if (name == "bfloat16" || name == "bf16") return DataType::kBFloat16;
  if (name == "int32") return DataType::kInt32;
  if (name == "int64") return DataType::kInt64;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown element type '", name,
                   "'; types: ", absl::StrJoin(DataTypeNames(), ", ")));
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "product" || name == "prod") return ReduceOp::kProduct;
  if (name == "min") return ReduceOp::kMin;
  if (name == "max") return ReduceOp::kMax;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown reduce operator '", name, "'; operators: sum, product, min, max"));
}

uint16_t FloatToBFloat16(float value) { return BFloat16Codec::Narrow(value); }
float BFloat16ToFloat(uint16_t value) { return BFloat16Codec::Widen(value); }
uint16_t FloatToHalf(float value) { return HalfCodec::Narrow(value); }
float HalfToFloat(uint16_t value) { return HalfCodec::Widen(value); }

void Reduce(DataType type, ReduceOp op, void* dst, const void* src,
            size_t count) {
  switch (type) {
    case DataType::kFloat32:
      return ReduceNativeBest(op, static_cast<float*>(dst),
                          static_cast<const float*>(src), count);
    case DataType::kFloat64:
      return ReduceNativeBest(op, static_cast<double*>(dst),
                          static_cast<const double*>(src), count);
    case DataType::kInt32:
      return ReduceNativeBest(op, static_cast<int32_t*>(dst),
                          static_cast<const int32_t*>(src), count);
    case DataType::kInt64:
      return ReduceNativeBest(op, static_cast<int64_t*>(dst),
                          static_cast<const int64_t*>(src), count);
    case DataType::kFloat16:
      return ReduceFloat16(op, static_cast<uint16_t*>(dst),
                           static_cast<const uint16_t*>(src), count);
    case DataType::kBFloat16:
      return ReduceBFloat16(op, static_cast<uint16_t*>(dst),
                            static_cast<const uint16_t*>(src), count);
  }
}

void ReduceMany(DataType type, ReduceOp op, std::byte* dst,
                absl::Span<const std::byte* const> srcs, size_t count) {
  if (srcs.empty() || count == 0) return;
  const size_t element = ElementSize(type);
  // A block every vector width divides (elements of 2 to 8 bytes), small
  // enough to stay in L1 while each source is added to it.
  constexpr size_t kBlockBytes = 4096;
  const size_t per_block = kBlockBytes / element;
  for (size_t first = 0; first < count; first += per_block) {
    const size_t n = std::min(per_block, count - first);
    const size_t at = first * element;
    if (dst != srcs[0]) std::memcpy(dst + at, srcs[0] + at, n * element);
    for (size_t k = 1; k < srcs.size(); ++k) Reduce(type, op, dst + at, srcs[k] + at, n);
  }
}

}  // namespace rdmaflow::collectives
