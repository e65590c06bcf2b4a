// The time-sliced compute engines (see engine.h). Every operation locks the device's engine
// table, simulates the engine from where it was left up to now, and then reads or changes it.
#include "simgpu/core/engine.h"

#include <errno.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "proc/process_identity.h"
#include "simgpu/core/memory_ledger.h"
#include "simgpu/core/sim_time.h"

namespace gpufrac::simgpu {
namespace {

constexpr std::uint64_t kRecheckNs = 10000000;   // longest sleep between looks at the engine
constexpr std::uint64_t kLivenessNs = 10000000;  // dead clients are looked for this often

void LockTable(SharedEngineTable& table) {
  // A holder that died mid-advance left every field valid on its own; the next advance carries
  // on from there.
  if (::pthread_mutex_lock(&table.mutex) == EOWNERDEAD) ::pthread_mutex_consistent(&table.mutex);
}

class TableLock {
 public:
  explicit TableLock(SharedEngineTable& table) : table_(table) { LockTable(table_); }
  ~TableLock() { ::pthread_mutex_unlock(&table_.mutex); }
  TableLock(const TableLock&) = delete;
  TableLock& operator=(const TableLock&) = delete;

 private:
  SharedEngineTable& table_;
};

// a * b / c rounded down (`round_up`: up), without overflow for any clock values.
std::uint64_t MulDiv(std::uint64_t a, std::uint64_t b, std::uint64_t c, bool round_up = false) {
  const unsigned __int128 product = static_cast<unsigned __int128>(a) * b;
  return static_cast<std::uint64_t>((product + (round_up ? c - 1 : 0)) / c);
}

bool HasWork(const SharedEngineClient& client) {
  return client.engine >= 0 && client.served_ns < client.pending_ns;
}

// The state the scheduler needs of one engine, copied out of the table so that a projection can
// run it forward without touching the shared state. Clients are in table order.
//
// The scheduler's unit is an entity: a client of its own, or an MPS group (every client with
// the same nonzero `group`). An entity's round-robin key is its smallest table index, so a group
// takes its turn at the place of its first member. `holder` is a position of the holding
// entity's client (any member of a holding group).
struct EngineRun {
  int count = 0;
  int index[kEngineClientsPerDevice];  // table index of each client of the engine
  std::uint64_t served[kEngineClientsPerDevice];
  std::uint64_t pending[kEngineClientsPerDevice];
  std::uint64_t group[kEngineClientsPerDevice];
  std::uint32_t share[kEngineClientsPerDevice];
  int holder = -1;       // position in the arrays, or -1
  int last_holder = -1;  // round-robin key of the last holder, or -1
  std::uint64_t slice_start = 0;
  std::uint64_t t = 0;

  bool Busy(int position) const { return served[position] < pending[position]; }
  bool SameEntity(int a, int b) const { return a == b || (group[a] != 0 && group[a] == group[b]); }

  int EntityKey(int position) const {
    if (group[position] == 0) return index[position];
    for (int p = 0; p < count; ++p) {
      if (group[p] == group[position]) return index[p];  // table order: the first is the least
    }
    return index[position];
  }

  bool EntityBusy(int position) const {
    for (int p = 0; p < count; ++p) {
      if (SameEntity(p, position) && Busy(p)) return true;
    }
    return false;
  }

  // A busy client of the first busy entity after key `after` in round-robin order (`after`
  // itself last); -1 when none is busy.
  int NextBusy(int after) const {
    int next = -1, next_key = 0, first = -1, first_key = 0;
    for (int p = 0; p < count; ++p) {
      if (!Busy(p)) continue;
      const int key = EntityKey(p);
      if (key > after && (next < 0 || key < next_key)) {
        next = p;
        next_key = key;
      }
      if (first < 0 || key < first_key) {
        first = p;
        first_key = key;
      }
    }
    return next >= 0 ? next : first;
  }

  bool OtherBusy(int position) const {
    for (int p = 0; p < count; ++p) {
      if (!SameEntity(p, position) && Busy(p)) return true;
    }
    return false;
  }

  // Simulates the engine up to `until`. `serve(position, start, real, clock, weighted)` is told
  // of every stretch during which a client ran: from real time `start` for `real` ns, its clock
  // advancing by `clock` and its engine time by `weighted`; returning true stops the run after
  // that stretch. `busy(start, real)` is told of each stretch once, whoever ran in it.
  template <typename OnServe, typename OnBusy>
  void Run(std::uint64_t until, std::uint64_t slice, OnServe&& serve, OnBusy&& busy) {
    while (t < until) {
      if (holder < 0 || !EntityBusy(holder)) {
        holder = NextBusy(last_holder);
        if (holder < 0) {
          t = until;  // idle
          return;
        }
        last_holder = EntityKey(holder);
        slice_start = t;
      }
      const int h = holder;
      std::uint64_t limit = until - t;
      const bool contended = OtherBusy(h);
      if (contended) {
        const std::uint64_t slice_end = slice_start + slice;
        if (slice_end <= t) {
          // Preempted at the slice's end: the next context with work gets the engine.
          holder = NextBusy(EntityKey(h));
          last_holder = EntityKey(holder);
          slice_start = t;
          continue;
        }
        limit = std::min(limit, slice_end - t);
      }
      const std::uint64_t start = t;
      bool stop = false;
      std::uint64_t step = 0;
      if (group[h] == 0) {
        step = std::min(limit, pending[h] - served[h]);
        served[h] += step;
        stop = serve(h, start, step, step, step);
      } else {
        // The group's clients with work run at once; oversubscribed SMs slow each of them to
        // kWholeEnginePpm / demand of its speed.
        std::uint64_t demand = 0;
        for (int p = 0; p < count; ++p) {
          if (SameEntity(p, h) && Busy(p)) demand += share[p];
        }
        const std::uint64_t scale = std::max<std::uint64_t>(demand, kWholeEnginePpm);
        step = limit;
        for (int p = 0; p < count; ++p) {
          if (!SameEntity(p, h) || !Busy(p)) continue;
          const std::uint64_t rest = pending[p] - served[p];
          step = std::min(step, MulDiv(rest, scale, kWholeEnginePpm, /*round_up=*/true));
        }
        for (int p = 0; p < count; ++p) {
          if (!SameEntity(p, h) || !Busy(p)) continue;
          const std::uint64_t rest = pending[p] - served[p];
          const bool done = MulDiv(rest, scale, kWholeEnginePpm, /*round_up=*/true) <= step;
          const std::uint64_t advance =
              done ? rest : std::min(rest, MulDiv(step, kWholeEnginePpm, scale));
          served[p] += advance;
          stop = serve(p, start, step, advance, MulDiv(step, share[p], scale)) || stop;
        }
      }
      busy(start, step);
      t += step;
      // Alone on the engine, the slice timer keeps running: a newcomer waits for the end of the
      // current slice, not for a whole new one.
      if (!contended) slice_start += (t - slice_start) / slice * slice;
      if (stop) return;
    }
  }
};

void Load(const SharedEngineTable& table, int engine, EngineRun* run) {
  const SharedEngine& shared = table.engines[engine];
  run->count = 0;
  run->holder = -1;
  for (int i = 0; i < kEngineClientsPerDevice; ++i) {
    const SharedEngineClient& client = table.clients[i];
    if (client.engine != engine) continue;
    const int p = run->count++;
    run->index[p] = i;
    run->served[p] = client.served_ns;
    run->pending[p] = client.pending_ns;
    run->group[p] = client.group;
    run->share[p] = client.share_ppm;
    if (i == shared.holder) run->holder = p;
  }
  run->last_holder = shared.last_holder;
  run->slice_start = shared.slice_start_ns;
  run->t = shared.advanced_ns;
}

// The time counted in the last complete NVML sample period before period `now`, of a count that
// holds period `counted`'s time (`current`) and the time of the period before it (`previous`).
std::uint64_t LastPeriodNs(std::uint64_t now, std::uint64_t counted, std::uint64_t current,
                           std::uint64_t previous) {
  if (now == counted + 1) return current;
  if (now == counted) return previous;
  return 0;
}

// Adds the stretch [start, start + step), during which some client ran, to the engine's NVML
// sample periods.
void CountSample(SharedEngine& engine, std::uint64_t start, std::uint64_t step) {
  while (step > 0) {
    const std::uint64_t period = start / kUtilizationPeriodNs;
    const std::uint64_t chunk = std::min(step, (period + 1) * kUtilizationPeriodNs - start);
    if (period != engine.sample_period) {
      engine.previous_busy_ns = period == engine.sample_period + 1 ? engine.sample_busy_ns : 0;
      engine.sample_period = period;
      engine.sample_busy_ns = 0;
    }
    engine.sample_busy_ns += chunk;
    start += chunk;
    step -= chunk;
  }
}

// Adds `weighted` ns of engine time, received over the real stretch [start, start + real), to
// the process slot's NVML sample periods on `device`, in proportion to the time in each.
void CountProcessSample(ProcessSlot& slot, int device, std::uint64_t start, std::uint64_t real,
                        std::uint64_t weighted) {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  const std::uint64_t end = start + real;
  std::uint64_t t = start;
  std::uint64_t given = 0;
  do {
    const std::uint64_t period = t / kUtilizationPeriodNs;
    const std::uint64_t last = slot.sample_period[device].load(kRelaxed);
    if (period != last) {
      slot.previous_sample_ns[device].store(
          period == last + 1 ? slot.sample_ns[device].load(kRelaxed) : 0, kRelaxed);
      slot.sample_period[device].store(period, kRelaxed);
      slot.sample_ns[device].store(0, kRelaxed);
    }
    const std::uint64_t until = std::min(end, (period + 1) * kUtilizationPeriodNs);
    // What it received by `until`, in proportion to the real time.
    const std::uint64_t by_then = until >= end ? weighted : MulDiv(weighted, until - start, real);
    slot.sample_ns[device].fetch_add(by_then - given, kRelaxed);
    given = by_then;
    t = until;
  } while (t < end);
}

// The client ran from real time `start` for `real` ns, its clock going from `before` by `clock`
// and its engine time growing by `weighted`.
void Serve(SharedMachine& machine, int device, int index, std::uint64_t before, std::uint64_t start,
           std::uint64_t real, std::uint64_t clock, std::uint64_t weighted) {
  SharedEngineTable& table = machine.engines[device];
  SharedEngineClient& client = table.clients[index];
  SharedEngine& engine = table.engines[client.engine];
  client.served_ns = before + clock;
  client.engine_ns += weighted;
  engine.busy_ns += weighted;
  // A dead process's slot may already belong to another process.
  ProcessSlot& slot = machine.slots[client.slot];
  if (slot.owner.load(std::memory_order_relaxed) == client.owner) {
    slot.engine_ns[device].fetch_add(weighted, std::memory_order_relaxed);
    CountProcessSample(slot, device, start, real, weighted);
  }
  if (client.served_ns >= client.pending_ns) --engine.busy_clients;
  if (client.armed_watches == 0 || clock == 0) return;
  for (SharedEventWatch& watch : table.watches) {
    if (watch.client != index || watch.armed == 0 || watch.target_ns > client.served_ns) continue;
    watch.armed = 0;
    const std::uint64_t behind = watch.target_ns > before ? watch.target_ns - before : 0;
    watch.reached_ns = start + MulDiv(behind, real, clock);
    if (--client.armed_watches == 0) return;
  }
}

// Simulates `engine` of `device` up to `now`.
void Advance(SharedMachine& machine, int device, int engine_index, std::uint64_t now) {
  SharedEngineTable& table = machine.engines[device];
  SharedEngine& engine = table.engines[engine_index];
  if (now <= engine.advanced_ns) return;
  const std::uint64_t slice = machine.timeslice_ns;
  if (engine.busy_clients == 0) {
    // Idle all along (the common case between bursts): nothing to simulate.
    engine.holder = -1;
    engine.advanced_ns = now;
    engine.slice_start_ns += (now - engine.slice_start_ns) / slice * slice;
    return;
  }
  if (engine.busy_clients == 1 && engine.holder >= 0 && HasWork(table.clients[engine.holder])) {
    // The one busy context already holds the engine: it runs until its work or `now` ends (at
    // full speed: one MPS client alone cannot oversubscribe the SMs).
    SharedEngineClient& client = table.clients[engine.holder];
    const std::uint64_t start = engine.advanced_ns;
    const std::uint64_t step = std::min(now - start, client.pending_ns - client.served_ns);
    Serve(machine, device, engine.holder, client.served_ns, start, step, step,
          MulDiv(step, client.share_ppm, kWholeEnginePpm));
    CountSample(engine, start, step);
    engine.slice_start_ns += (start + step - engine.slice_start_ns) / slice * slice;
    if (!HasWork(client)) engine.holder = -1;
    engine.advanced_ns = now;
    return;
  }
  EngineRun run;
  Load(table, engine_index, &run);
  run.Run(
      now, slice,
      [&](int position, std::uint64_t start, std::uint64_t real, std::uint64_t clock,
          std::uint64_t weighted) {
        Serve(machine, device, run.index[position], run.served[position] - clock, start, real,
              clock, weighted);
        return false;
      },
      [&](std::uint64_t start, std::uint64_t real) { CountSample(engine, start, real); });
  engine.holder = run.holder >= 0 && run.EntityBusy(run.holder) ? run.index[run.holder] : -1;
  engine.last_holder = run.last_holder;
  engine.slice_start_ns = run.slice_start;
  engine.advanced_ns = now;
}

void AdvanceAll(SharedMachine& machine, int device, std::uint64_t now) {
  for (int e = 0; e < kEnginesPerDevice; ++e) {
    if (machine.engines[device].engines[e].clients != 0) Advance(machine, device, e, now);
  }
}

// When the client's clock will reach `target` if no other work arrives, or 0 if not before
// `horizon`. The engine is simulated up to now.
std::uint64_t Project(const SharedMachine& machine, const EngineSeat& seat, std::uint64_t target,
                      std::uint64_t horizon) {
  const SharedEngineTable& table = machine.engines[seat.device];
  EngineRun run;
  Load(table, table.clients[seat.client].engine, &run);
  std::uint64_t reached = 0;
  run.Run(
      horizon, machine.timeslice_ns,
      [&](int position, std::uint64_t start, std::uint64_t real, std::uint64_t clock,
          std::uint64_t /*weighted*/) {
        if (run.index[position] != seat.client || run.served[position] < target) return false;
        const std::uint64_t before = run.served[position] - clock;
        const std::uint64_t behind = target > before ? target - before : 0;
        reached = start + (clock == 0 ? 0 : MulDiv(behind, real, clock, /*round_up=*/true));
        return true;
      },
      [](std::uint64_t, std::uint64_t) {});
  return reached;
}

void RemoveClientLocked(SharedEngineTable& table, int index) {
  SharedEngineClient& client = table.clients[index];
  if (client.engine < 0) return;
  SharedEngine& engine = table.engines[client.engine];
  if (HasWork(client)) --engine.busy_clients;
  if (engine.holder == index) {
    // A group keeps the engine through another of its clients.
    engine.holder = -1;
    for (int i = 0; client.group != 0 && i < kEngineClientsPerDevice; ++i) {
      const SharedEngineClient& other = table.clients[i];
      if (i != index && other.engine == client.engine && other.group == client.group) {
        engine.holder = i;
        break;
      }
    }
  }
  if (--engine.clients == 0) {
    table.retired_busy_ns += engine.busy_ns;
    engine = SharedEngine{};
  }
  for (SharedEventWatch& watch : table.watches) {
    if (watch.client == index) watch = SharedEventWatch{};
  }
  client = SharedEngineClient{};
}

void SleepUntil(std::uint64_t deadline_ns) {
  const timespec until{.tv_sec = static_cast<time_t>(deadline_ns / 1000000000u),
                       .tv_nsec = static_cast<long>(deadline_ns % 1000000000u)};
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
  }
}

}  // namespace

void InitialiseEngines(SharedMachine& machine) {
  pthread_mutexattr_t attributes;
  ::pthread_mutexattr_init(&attributes);
  ::pthread_mutexattr_setpshared(&attributes, PTHREAD_PROCESS_SHARED);
  ::pthread_mutexattr_setrobust(&attributes, PTHREAD_MUTEX_ROBUST);
  const std::uint64_t now = NowNs();
  for (SharedEngineTable& table : machine.engines) {
    ::pthread_mutex_init(&table.mutex, &attributes);
    for (SharedEngine& engine : table.engines) engine = SharedEngine{};
    for (SharedEngineClient& client : table.clients) client = SharedEngineClient{};
    for (SharedEventWatch& watch : table.watches) watch = SharedEventWatch{};
    table.liveness_checked_ns = now;
  }
  ::pthread_mutexattr_destroy(&attributes);
}

bool JoinEngine(SharedMachine& machine, const EngineKey& key, int slot_index, EngineSeat* seat) {
  SharedEngineTable& table = machine.engines[key.device];
  const std::uint64_t now = NowNs();
  TableLock lock(table);
  int engine_index = -1;
  int free_engine = -1;
  for (int e = 0; e < kEnginesPerDevice; ++e) {
    const SharedEngine& engine = table.engines[e];
    if (engine.clients == 0) {
      if (free_engine < 0) free_engine = e;
    } else if (engine.gpu_instance == key.gpu_instance &&
               engine.compute_instance == key.compute_instance &&
               engine.generation == key.generation) {
      engine_index = e;
      break;
    }
  }
  int client_index = -1;
  for (int i = 0; i < kEngineClientsPerDevice && client_index < 0; ++i) {
    if (table.clients[i].engine < 0) client_index = i;
  }
  if (client_index < 0 || (engine_index < 0 && free_engine < 0)) return false;
  if (engine_index < 0) {
    engine_index = free_engine;
    SharedEngine& engine = table.engines[engine_index];
    engine = SharedEngine{};
    engine.gpu_instance = key.gpu_instance;
    engine.compute_instance = key.compute_instance;
    engine.generation = key.generation;
    engine.slice_start_ns = now;
    engine.advanced_ns = now;
    engine.sample_period = now / kUtilizationPeriodNs;
  } else {
    Advance(machine, key.device, engine_index, now);
  }
  ++table.engines[engine_index].clients;
  SharedEngineClient& client = table.clients[client_index];
  client = SharedEngineClient{};
  client.engine = engine_index;
  client.slot = slot_index;
  client.owner = machine.slots[slot_index].owner.load(std::memory_order_acquire);
  client.origin_ns = client.served_ns = client.pending_ns = now;
  client.group = key.group;
  client.share_ppm = key.share_ppm;
  *seat = EngineSeat{.device = key.device, .client = client_index};
  return true;
}

void LeaveEngine(SharedMachine& machine, const EngineSeat& seat) {
  if (!seat.valid()) return;
  SharedEngineTable& table = machine.engines[seat.device];
  TableLock lock(table);
  const int engine = table.clients[seat.client].engine;
  if (engine < 0) return;
  Advance(machine, seat.device, engine, NowNs());
  RemoveClientLocked(table, seat.client);
}

EngineSession::EngineSession(SharedMachine& machine, const EngineSeat& seat)
    : machine_(machine), seat_(seat), now_(NowNs()) {
  LockTable(machine_.engines[seat_.device]);
  const int engine = machine_.engines[seat_.device].clients[seat_.client].engine;
  if (engine >= 0) Advance(machine_, seat_.device, engine, now_);
}

EngineSession::~EngineSession() { ::pthread_mutex_unlock(&machine_.engines[seat_.device].mutex); }

std::uint64_t EngineSession::Served() const {
  return machine_.engines[seat_.device].clients[seat_.client].served_ns;
}

void EngineSession::AddWork(std::uint64_t until) {
  SharedEngineTable& table = machine_.engines[seat_.device];
  SharedEngineClient& client = table.clients[seat_.client];
  if (client.engine < 0 || until <= client.pending_ns) return;
  if (!HasWork(client)) ++table.engines[client.engine].busy_clients;
  client.pending_ns = until;
}

void EngineSession::ArmWatch(int watch, std::uint64_t target) {
  SharedEngineTable& table = machine_.engines[seat_.device];
  SharedEngineClient& client = table.clients[seat_.client];
  SharedEventWatch& entry = table.watches[watch];
  if (entry.armed != 0) --client.armed_watches;
  entry.target_ns = target;
  if (target <= client.served_ns) {
    entry.armed = 0;
    entry.reached_ns = now_;
  } else {
    entry.armed = 1;
    ++client.armed_watches;
  }
}

bool EngineSession::WatchReached(int watch, std::uint64_t* reached_ns) const {
  const SharedEventWatch& entry = machine_.engines[seat_.device].watches[watch];
  if (entry.armed != 0) return false;
  *reached_ns = entry.reached_ns;
  return true;
}

bool ServiceReached(SharedMachine& machine, const EngineSeat& seat, std::uint64_t target) {
  if (!seat.valid()) return true;
  RemoveDeadClients(machine, seat.device, /*force=*/false);
  EngineSession session(machine, seat);
  const SharedEngineClient& client = machine.engines[seat.device].clients[seat.client];
  return client.engine < 0 || client.failed != 0 || client.served_ns >= target;
}

void WaitForService(SharedMachine& machine, const EngineSeat& seat, std::uint64_t target) {
  if (!seat.valid()) return;
  SharedEngineTable& table = machine.engines[seat.device];
  while (true) {
    RemoveDeadClients(machine, seat.device, /*force=*/false);
    std::uint64_t wake;
    bool exact;
    {
      const std::uint64_t now = NowNs();
      TableLock lock(table);
      const SharedEngineClient& client = table.clients[seat.client];
      if (client.engine < 0 || client.failed != 0) return;
      Advance(machine, seat.device, client.engine, now);
      if (client.served_ns >= target) return;
      wake = Project(machine, seat, target, now + kRecheckNs);
      exact = wake != 0;
      if (!exact) wake = now + kRecheckNs;
    }
    if (exact) {
      WaitUntil(wake);  // as precise as an uncontended GPU's synchronisation
    } else {
      SleepUntil(wake);
    }
  }
}

int AllocateWatch(SharedMachine& machine, const EngineSeat& seat) {
  SharedEngineTable& table = machine.engines[seat.device];
  TableLock lock(table);
  for (int w = 0; w < kEventWatchesPerDevice; ++w) {
    SharedEventWatch& watch = table.watches[w];
    if (watch.client >= 0) continue;
    watch = SharedEventWatch{};
    watch.client = seat.client;
    return w;
  }
  return -1;
}

void FreeWatch(SharedMachine& machine, int device, int watch) {
  SharedEngineTable& table = machine.engines[device];
  TableLock lock(table);
  SharedEventWatch& entry = table.watches[watch];
  if (entry.client >= 0 && entry.armed != 0) --table.clients[entry.client].armed_watches;
  entry = SharedEventWatch{};
}

std::uint64_t ClientEngineNs(SharedMachine& machine, const EngineSeat& seat) {
  if (!seat.valid()) return 0;
  EngineSession session(machine, seat);
  const SharedEngineClient& client = machine.engines[seat.device].clients[seat.client];
  return client.engine < 0 ? 0 : client.engine_ns;
}

std::vector<EngineClientInfo> ListEngineClients(SharedMachine& machine, int device) {
  SharedEngineTable& table = machine.engines[device];
  std::vector<EngineClientInfo> clients;
  TableLock lock(table);
  for (int i = 0; i < kEngineClientsPerDevice; ++i) {
    const SharedEngineClient& client = table.clients[i];
    if (client.engine < 0) continue;
    clients.push_back(
        {.client = i, .slot = client.slot, .owner = client.owner, .group = client.group});
  }
  return clients;
}

void FailEngineClient(SharedMachine& machine, int device, int client_index, std::uint64_t owner) {
  SharedEngineTable& table = machine.engines[device];
  const std::uint64_t now = NowNs();
  TableLock lock(table);
  SharedEngineClient& client = table.clients[client_index];
  if (client.engine < 0 || client.owner != owner) return;
  Advance(machine, device, client.engine, now);
  if (HasWork(client)) --table.engines[client.engine].busy_clients;
  client.pending_ns = client.served_ns;
  client.failed = 1;
}

std::uint64_t ProcessEngineNs(SharedMachine& machine, const ProcessSlot& slot, int device) {
  SharedEngineTable& table = machine.engines[device];
  const std::uint64_t now = NowNs();
  TableLock lock(table);
  AdvanceAll(machine, device, now);
  return slot.engine_ns[device].load(std::memory_order_relaxed);
}

std::uint64_t DeviceBusyNs(SharedMachine& machine, int device) {
  SharedEngineTable& table = machine.engines[device];
  const std::uint64_t now = NowNs();
  TableLock lock(table);
  AdvanceAll(machine, device, now);
  std::uint64_t busy = table.retired_busy_ns;
  for (const SharedEngine& engine : table.engines) busy += engine.busy_ns;
  return busy;
}

unsigned int DeviceUtilizationPercent(SharedMachine& machine, int device) {
  RemoveDeadClients(machine, device, /*force=*/false);
  SharedEngineTable& table = machine.engines[device];
  const std::uint64_t now = NowNs();
  TableLock lock(table);
  AdvanceAll(machine, device, now);
  const std::uint64_t period = now / kUtilizationPeriodNs;
  for (const SharedEngine& engine : table.engines) {
    if (engine.clients == 0 || engine.gpu_instance >= 0) continue;
    const std::uint64_t busy = LastPeriodNs(period, engine.sample_period, engine.sample_busy_ns,
                                            engine.previous_busy_ns);
    return static_cast<unsigned int>((busy * 100 + kUtilizationPeriodNs / 2) /
                                     kUtilizationPeriodNs);
  }
  return 0;  // no context on the GPU: idle
}

std::vector<ProcessSample> ProcessSamples(SharedMachine& machine, int device) {
  constexpr auto kRelaxed = std::memory_order_relaxed;
  RemoveDeadClients(machine, device, /*force=*/false);
  SharedEngineTable& table = machine.engines[device];
  const std::uint64_t now = NowNs();
  std::vector<ProcessSample> samples;
  TableLock lock(table);
  AdvanceAll(machine, device, now);
  const std::uint64_t period = now / kUtilizationPeriodNs;
  for (const ProcessSlot& slot : machine.slots) {
    const std::optional<proc::ProcessId> owner = SlotOwner(slot);
    if (!owner.has_value()) continue;
    const std::uint64_t ns = LastPeriodNs(period, slot.sample_period[device].load(kRelaxed),
                                          slot.sample_ns[device].load(kRelaxed),
                                          slot.previous_sample_ns[device].load(kRelaxed));
    const auto percent = static_cast<unsigned int>(
        std::min<std::uint64_t>(100, (ns * 100 + kUtilizationPeriodNs / 2) / kUtilizationPeriodNs));
    if (percent == 0) continue;
    samples.push_back({.pid = owner->pid, .end_ns = period * kUtilizationPeriodNs,
                       .sm_percent = percent});
  }
  return samples;
}

int RemoveDeadClients(SharedMachine& machine, int device, bool force) {
  SharedEngineTable& table = machine.engines[device];
  struct Candidate {
    int index;
    std::uint64_t owner;
    int slot;
  };
  std::vector<Candidate> candidates;
  {
    const std::uint64_t now = NowNs();
    TableLock lock(table);
    if (!force && now - table.liveness_checked_ns < kLivenessNs) return 0;
    table.liveness_checked_ns = now;
    for (int i = 0; i < kEngineClientsPerDevice; ++i) {
      const SharedEngineClient& client = table.clients[i];
      if (client.engine >= 0) candidates.push_back({i, client.owner, client.slot});
    }
  }
  // /proc is read without the engine lock held.
  std::vector<int> dead;
  for (const Candidate& candidate : candidates) {
    const ProcessSlot& slot = machine.slots[candidate.slot];
    bool alive = slot.owner.load(std::memory_order_acquire) == candidate.owner;
    if (alive) {
      const std::optional<proc::ProcessId> owner = SlotOwner(slot);
      alive = owner.has_value() && proc::MayBeAlive(*owner);
    }
    if (!alive) dead.push_back(candidate.index);
  }
  if (dead.empty()) return 0;
  const std::uint64_t now = NowNs();
  TableLock lock(table);
  int removed = 0;
  for (int index : dead) {
    SharedEngineClient& client = table.clients[index];
    const auto same = std::find_if(candidates.begin(), candidates.end(),
                                   [&](const Candidate& c) { return c.index == index; });
    if (client.engine < 0 || client.owner != same->owner) continue;  // left or reused meanwhile
    Advance(machine, device, client.engine, now);
    RemoveClientLocked(table, index);
    ++removed;
  }
  return removed;
}

}  // namespace gpufrac::simgpu
