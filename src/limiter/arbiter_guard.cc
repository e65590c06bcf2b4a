// The SIGBUS guard of compute arbiter mappings (arbiter_guard.h). The handler uses only
// async-signal-safe calls (mmap, write, getpid, sigaction) and lock-free atomics.
#include "limiter/arbiter_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "limiter/compute_arbiter.h"

namespace gpufrac::limiter {
namespace {

constexpr int kMaxGuarded = 16;

struct Guarded {
  std::atomic<ArbiterSegment*> segment{nullptr};
  std::atomic<int> slot{-1};         // -1: not joined yet.
  std::atomic<uint64_t> turn_ns{0};  // 0: not read yet (kDefaultTurnNs then).
  // 0: mapped; 1: being replaced; 2: replaced; 3: could not be replaced.
  std::atomic<int> state{0};
  std::atomic<bool> taken{false};  // Claimed by a GuardArbiter (until UnguardArbiter).
};

Guarded g_guarded[kMaxGuarded];
std::atomic<bool> g_installed{false};
struct sigaction g_previous;

constexpr char kMessage[] =
    "gpufrac: another workload cut this GPU's compute arbiter short; this process goes on "
    "without taking turns\n";

// Replaces the lost mapping by a private segment in which this process holds the turn.
bool Replace(Guarded& g) {
  ArbiterSegment* seg = g.segment.load(std::memory_order_acquire);
  void* map = mmap(seg, sizeof(ArbiterSegment), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (map != seg) return false;
  const int slot = g.slot.load(std::memory_order_acquire);
  const uint64_t turn_ns = g.turn_ns.load(std::memory_order_relaxed);
  seg->magic = kArbiterMagic;
  seg->version = kArbiterVersion;
  seg->turn_ns = turn_ns != 0 ? turn_ns : kDefaultTurnNs;
  seg->ready.store(1, std::memory_order_relaxed);
  if (slot < 0) return true;  // Not joined yet: an empty arbiter, which it joins alone.
  seg->slots[slot].weight.store(1000, std::memory_order_relaxed);
  seg->slots[slot].limit.store(1000, std::memory_order_relaxed);
  seg->holder.store((static_cast<uint64_t>(slot) + 1) << 32 | static_cast<uint32_t>(getpid()),
                    std::memory_order_release);
  return true;
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  const auto* at = static_cast<const char*>(info->si_addr);
  for (int i = 0; i < kMaxGuarded; ++i) {
    Guarded& g = g_guarded[i];
    const auto* seg = reinterpret_cast<const char*>(g.segment.load(std::memory_order_acquire));
    if (seg == nullptr || at < seg || at >= seg + sizeof(ArbiterSegment)) continue;
    int expected = 0;
    if (g.state.compare_exchange_strong(expected, 1)) {
      const bool replaced = Replace(g);
      g.state.store(replaced ? 2 : 3, std::memory_order_release);
      if (replaced) {
        ssize_t ignored = write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
        (void)ignored;
        return;  // The access is made again, on the private segment.
      }
    } else {
      while (g.state.load(std::memory_order_acquire) == 1) {
      }
      if (g.state.load(std::memory_order_acquire) == 2) return;
    }
    break;  // Not replaced: as any other SIGBUS.
  }
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN &&
      g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
    return;
  }
  // The default action: the access faults again and the process ends with SIGBUS.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGBUS, &dfl, nullptr);
}

// The entry guarding `segment`, or nullptr.
Guarded* Find(ArbiterSegment* segment) {
  for (Guarded& g : g_guarded) {
    if (g.segment.load(std::memory_order_acquire) == segment) return &g;
  }
  return nullptr;
}

}  // namespace

bool GuardArbiter(ArbiterSegment* segment) {
  if (!g_installed.exchange(true)) {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &g_previous) != 0) {
      g_installed = false;
      return false;
    }
  }
  for (Guarded& g : g_guarded) {
    if (g.taken.exchange(true)) continue;
    g.slot.store(-1, std::memory_order_relaxed);
    g.turn_ns.store(0, std::memory_order_relaxed);
    g.state.store(0, std::memory_order_relaxed);
    g.segment.store(segment, std::memory_order_release);  // Now the handler looks at it.
    return true;
  }
  return false;
}

void SetGuardedSlot(ArbiterSegment* segment, int slot) {
  if (Guarded* g = Find(segment)) {
    g->turn_ns.store(segment->turn_ns, std::memory_order_relaxed);  // Guarded if it faults.
    g->slot.store(slot, std::memory_order_release);
  }
}

void UnguardArbiter(ArbiterSegment* segment) {
  if (Guarded* g = Find(segment)) {
    g->segment.store(nullptr, std::memory_order_release);
    g->taken.store(false, std::memory_order_release);
  }
}

}  // namespace gpufrac::limiter
