// placeholder until the reference lands
#include "cpu/reference.hpp"
namespace flashattn::cpu {
static Status pending() { return Status(StatusCode::kUnsupported, "reference not implemented yet"); }
Status reference_forward(const core::AttentionParams&, ReferencePrecision) { return pending(); }
Status reference_backward(const core::BackwardParams&, ReferencePrecision) { return pending(); }
Status reference_forward_kvcache(const core::KVCacheParams&, ReferencePrecision) { return pending(); }
}
