// The per-thread context stack.
#include "simgpu/cuda/context.h"

#include <vector>

namespace gpufrac::simgpu {

thread_local constinit Context* t_current_context = nullptr;

namespace {
// Contexts beneath the current one, bottom first.
thread_local std::vector<Context*> t_contexts_below;
}  // namespace

void PushContext(Context* context) {
  if (t_current_context != nullptr) t_contexts_below.push_back(t_current_context);
  t_current_context = context;
}

Context* PopContext() {
  Context* popped = t_current_context;
  if (t_contexts_below.empty()) {
    t_current_context = nullptr;
  } else {
    t_current_context = t_contexts_below.back();
    t_contexts_below.pop_back();
  }
  return popped;
}

void SetCurrentContext(Context* context) {
  if (context == nullptr) {
    PopContext();
  } else {
    t_current_context = context;
  }
}

void ForgetThreadContexts() {
  t_current_context = nullptr;
  t_contexts_below.clear();
}

}  // namespace gpufrac::simgpu
