// Device placement: the reference and CPU backends read host memory; the CUDA backend
// reads memory of one GPU. The declared Tensor::device is checked against the target, and,
// when the CUDA runtime is usable, against where the runtime says the pointer lives, so a
// mislabelled pointer is an error instead of a crash.
#include "api/validate_parts.hpp"
#include "cuda/backend.hpp"

namespace flashattn::api {
namespace {

bool same_device(Device a, Device b) {
  if (a.type != b.type) return false;
  return a.type == DeviceType::kCPU || a.index == b.index;
}

Status check_declared(const char* name, const Tensor& t, const Target& target) {
  if (same_device(t.device, target.device)) return Status::Ok();
  const std::string backend = to_string(target.backend);
  if (target.device.type == DeviceType::kCPU) {
    return invalid(name, "host memory (cpu) for backend " + backend, to_text(t.device));
  }
  if (t.device.type != DeviceType::kCUDA) {
    return invalid(name, "CUDA memory for backend " + backend, to_text(t.device));
  }
  return invalid(name, "memory on " + to_text(target.device) + ", the device of q",
                 to_text(t.device));
}

Status check_actual(const char* name, const Tensor& t) {
  if (t.data == nullptr) return Status::Ok();
  Device actual{};
  FA_RETURN_IF_ERROR(cuda::pointer_device(t.data, &actual));
  if (same_device(actual, t.device)) return Status::Ok();
  return invalid(name, "a pointer on " + to_text(t.device) + " as declared by its Tensor::device",
                 "a pointer on " + to_text(actual));
}

}  // namespace

Status check_pointer_placement(const char* name, const void* ptr, const Target& target) {
  if (ptr == nullptr || !target.verify_pointers) return Status::Ok();
  Device actual{};
  FA_RETURN_IF_ERROR(cuda::pointer_device(ptr, &actual));
  if (same_device(actual, target.device)) return Status::Ok();
  const std::string expected = target.device.type == DeviceType::kCPU
                                   ? "host memory (cpu) for backend " +
                                         std::string(to_string(target.backend))
                                   : "memory on " + to_text(target.device) + ", the device of q";
  return invalid(name, "a pointer to " + expected, "a pointer on " + to_text(actual));
}

Status check_placement(const std::vector<NamedTensor>& tensors, const Target& target) {
  for (const NamedTensor& named : tensors) {
    if (!named.tensor->present()) continue;
    FA_RETURN_IF_ERROR(check_declared(named.name, *named.tensor, target));
    if (target.verify_pointers) FA_RETURN_IF_ERROR(check_actual(named.name, *named.tensor));
  }
  return Status::Ok();
}

}  // namespace flashattn::api
