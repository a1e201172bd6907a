// File: link_records.h
// -----------------------------------------------------------------------------
// Where the executor publishes its regions on the links
// (onesided/links/peer_links.h: <links' ns>/<scope>/<rank>/<name>, with the
// layout every side of a scope must share), and what rdma_copy names its
// slot links. Each transfer link src -> dst of the plan is one executor
// scope; its receiver publishes the regions the sender writes into, its
// sender the credit words the receiver writes, and each fetches the other's
// after comparing layouts, so two ranks running different plans (another
// graph, other tensor sizes, another depth) or other rdma_copy options stop
// at set-up with both layouts quoted instead of writing into memory laid
// out otherwise. For the runtime and the hostile tests that impersonate a
// peer.
#ifndef RDMAFLOW_RUNTIME_LINK_RECORDS_H_
#define RDMAFLOW_RUNTIME_LINK_RECORDS_H_

#include <cstddef>
#include <string>

#include "graph_analyzer/plan.pb.h"

namespace rdmaflow::runtime {

// The executor's link `link` in plan generation `generation`: the scope,
// and its layout (what of the plan both ends lay out alike). Region names:
// "recv" (host slots) and "recvdev" (device slots) of the receiver,
// "credit" of the sender.
std::string ExecutorLinkScope(int generation, const plan::LinkRegion& link);
std::string ExecutorLinkLayout(const plan::LinkRegion& link);
// A sender's source pool of dynamic tensors (region "pool"), which its
// receivers read.
inline constexpr char kExecutorPoolScope[] = "executor/pool";
inline constexpr char kExecutorPoolLayout[] = "executor pool v1";

// rdma_copy's slot links (onesided/slots/slot_link.h): one per peer, a ring
// of messages, `ring_slots` slots of `slot_bytes`, each way the plan
// sends; the layout is rdma_copy's options the two ends must share.
inline constexpr char kRdmaCopyScope[] = "copy";
std::string RdmaCopyLayout(size_t ring_slots, size_t slot_bytes);

}  // namespace rdmaflow::runtime

#endif  // RDMAFLOW_RUNTIME_LINK_RECORDS_H_
