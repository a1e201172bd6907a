// File: shared_word.h
// -----------------------------------------------------------------------------
// The one way rdmaflow reads and writes a 64-bit word of memory that another
// process, a NIC or a peer's one-sided write also touches: a flag, a credit,
// a stamp, a counter. Loads acquire (what the writer placed before the word
// is visible once its value is), stores release (what we placed before it is
// visible to whoever sees the value). The value is untrusted: the caller
// copies it once, checks the copy and uses only the copy.
#ifndef RDMAFLOW_COMMON_SHARED_WORD_H_
#define RDMAFLOW_COMMON_SHARED_WORD_H_

#include <cstdint>

namespace rdmaflow {

// `word` must be 8-byte aligned.
inline uint64_t LoadSharedWord(const void* word) {
  return __atomic_load_n(static_cast<const uint64_t*>(word), __ATOMIC_ACQUIRE);
}

inline void StoreSharedWord(void* word, uint64_t value) {
  __atomic_store_n(static_cast<uint64_t*>(word), value, __ATOMIC_RELEASE);
}

}  // namespace rdmaflow

#endif  // RDMAFLOW_COMMON_SHARED_WORD_H_
