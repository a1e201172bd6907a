// File: call_word.h
// -----------------------------------------------------------------------------
// A collective call's kind and arguments packed into one 64-bit word: what
// members publish into each other's memory so that each can check the
// others make the same call (the host all-reduce's control blocks, the
// ring's call descriptors). A peer's word is untrusted: DescribeCall()
// prints what it cannot name as numbers, never casting them to an enum.
//
//   root << 32 | kind << 24 | variant << 16 | DataType << 8 | ReduceOp
//
// A broadcast's type and operator are 0 (its count is in bytes); its
// variant is the caller's (the c10d backend marks a tensor's last piece).
#ifndef RDMAFLOW_COLLECTIVES_CALL_WORD_H_
#define RDMAFLOW_COLLECTIVES_CALL_WORD_H_

#include <cstdint>
#include <string>

#include "collectives/reduce.h"

namespace rdmaflow::collectives::call_word {

constexpr uint64_t kAllReduce = 0;
constexpr uint64_t kReduce = 1;
constexpr uint64_t kBroadcast = 2;
// The word of a call whose range was bad on its member: it differs from
// every real call, so all members end it with an error.
constexpr uint64_t kPoisoned = ~uint64_t{0};

// `root` < 0 packs as 0.
uint64_t Pack(uint64_t kind, int root, DataType type, ReduceOp op, uint8_t variant);

// "AllReduce(offset 0, count 20, float32 sum)", "Reduce(..., root position
// 1)", "Broadcast(offset 0, 64 bytes, root position 0)", or "an unknown
// call (...)" for a word no member packs.
std::string Describe(uint64_t offset, uint64_t count, uint64_t word);

}  // namespace rdmaflow::collectives::call_word

#endif  // RDMAFLOW_COLLECTIVES_CALL_WORD_H_
