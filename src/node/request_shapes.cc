// Translating each distinct pending request once (see request_shapes.h).
#include "node/request_shapes.h"

#include <bit>
#include <functional>
#include <string>

namespace gpufrac::node {

Translation TranslateOnGroup(const GpuRequest& request, const placement::GpuGroup& group) {
  Translation t;
  std::optional<placement::Request> p = placement::RequestOnGroup(request, group);
  if (!p) return t;
  t.ok = true;
  t.request = *p;
  t.total_milli = p->TotalGpuMilli();
  return t;
}

std::optional<placement::Request> RequestShape::MixKey() const {
  if (valid == 0) return std::nullopt;
  return on[std::countr_zero(valid)].request;
}

size_t RequestShapes::Hash::operator()(const GpuRequest& r) const {
  size_t h = std::hash<std::string>{}(r.gpu_model) ^ std::hash<std::string>{}(r.mig_profile);
  for (uint64_t v :
       {uint64_t(r.kind), r.memory_bytes, uint64_t{r.fraction_milli}, uint64_t{r.gpus},
        // (A compute share is at least one thousandth: 0 stands for none only in this hash.)
        uint64_t{r.compute_milli.value_or(0)} << 32 | r.compute_limit_milli.value_or(0)}) {
    h = (h ^ v) * 0x100000001b3ULL + (h >> 29);
  }
  return h;
}

RequestShape* RequestShapes::Acquire(const GpuRequest& request) {
  auto [it, added] = shapes_.try_emplace(request);
  RequestShape& s = it->second;
  if (added) {
    s.request = request;
    s.on.reserve(groups_->size());
    for (size_t g = 0; g < groups_->size(); ++g) {
      s.on.push_back(TranslateOnGroup(request, (*groups_)[g]));
      if (s.on.back().ok) s.valid |= uint64_t{1} << g;
    }
  }
  ++s.refs_;
  return &s;
}

void RequestShapes::Release(RequestShape* shape) {
  if (--shape->refs_ == 0) shapes_.erase(shape->request);
}

}  // namespace gpufrac::node
