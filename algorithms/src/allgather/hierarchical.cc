// allgather hierarchical: for jobs spanning hosts (ScheduleParams::hostOf). The blocks of a
// host cross the network once, between one leader per host, and spread inside each host
// over shared memory.
//
//   1. intra-host gatherv (the table's algorithm, linear) of the host's blocks to its leader,
//      its lowest rank;
//   2. the leaders allgatherv the hosts' blocks (the table's algorithm for H ranks, ring);
//   3. intra-host broadcast of all P blocks from the leader (the table's algorithm for L_h
//      ranks and P n bytes).
// The leaders work on the blocks host by host. When the hosts' ranks follow one another
// (ranks 0..L_0-1 on host 0, and so on: what launchers do) that is the output itself;
// otherwise a scratch buffer of P n bytes holds them host by host and the leader copies
// them into rank order before phase 3.
//
//   H=2 (ranks 0,1 | 2,3), after phase   r0            r1      r2            r3
//   1 gatherv                            b0 b1         b1      b2 b3         b3
//   2 allgatherv (r0, r2)                b0 b1 b2 b3   b1      b0 b1 b2 b3   b3
//   3 broadcast                          all           all     all           all
//
// One host, or one rank on every host: the default table's algorithm for P ranks, as is.
// Empty blocks: nothing to do.
//
// Cost (n bytes per rank, H hosts of L ranks; A, B the network's alpha and beta, a, b
// shared memory's): (L-1) (a + n b) at the leader, then with the ring (H-1) A + (H-1) L n B
// among the leaders, then the broadcast of P n bytes inside the host, ceil(log2 L)
// (a + P n b) with a binomial tree. Only the leaders use the network: P n bytes reach each
// host once, but over one connection per host, where a flat ring moves (P-1) n bytes over
// every rank's link; the broadcast of the whole buffer inside the host is the price (every
// rank receives its own block back). Exactly (costAllgatherHierarchical): the sum of the
// phases' own cost formulas for this rank's part in them. Any P, any count, any layout;
// every rank must pass the same hostOf. The phases run one after the other.
#include "../hierarchy.h"

namespace collx::algorithms {

namespace {

hierarchy::Plan plan(const ScheduleParams& p) {
  using hierarchy::Phase;
  const hierarchy::Layout layout = hierarchy::Layout::of(p);
  const int P = p.size, r = p.rank;
  const std::uint64_t es = p.elementSize, block = p.bytes();
  const std::uint64_t total = static_cast<std::uint64_t>(P) * block;
  hierarchy::Plan plan;
  if (layout.flat()) {
    ScheduleParams whole = p;
    whole.hostOf.clear();
    std::vector<int> all(static_cast<std::size_t>(P));
    for (int i = 0; i < P; ++i) all[static_cast<std::size_t>(i)] = i;
    hierarchy::addGroup(plan, hierarchy::groupChoice(whole), whole,
                        Phase{all, input(), output(), 0, 0});
    return plan;
  }
  if (block == 0) return plan;
  const int H = layout.hosts;
  const int host = layout.hostOf[static_cast<std::size_t>(r)];
  const int local = layout.localOf[static_cast<std::size_t>(r)];
  const int L = layout.size(host);
  const std::vector<int>& mine = layout.members[static_cast<std::size_t>(host)];
  const bool packed = !layout.contiguous();
  const BufferRef byHost = packed ? scratch() : output();
  const std::uint64_t scratchBase = packed ? total : 0;
  auto at = [](BufferRef ref, std::uint64_t offset) {
    ref.offset += offset;
    return ref;
  };

  ScheduleParams gather = hierarchy::groupParams(p, Collective::kGatherv, local, L);
  gather.root = 0;
  gather.inPlace = p.inPlace && !packed;
  for (int i = 0; i < L; ++i) {
    gather.counts.push_back(p.count);
    gather.displs.push_back(static_cast<std::uint64_t>(layout.hostMajor(mine[i])) * p.count);
  }
  const BufferRef own = p.inPlace ? output(static_cast<std::uint64_t>(r) * block) : input();
  hierarchy::addGroup(plan, hierarchy::groupChoice(gather), gather,
                      Phase{mine, own, byHost, scratchBase, 0});
  if (local == 0) {
    ScheduleParams leaders = hierarchy::groupParams(p, Collective::kAllgatherv, host, H);
    leaders.inPlace = true;
    std::uint64_t first = 0;
    for (int h = 0; h < H; ++h) {
      const auto blocks = static_cast<std::uint64_t>(layout.size(h));
      leaders.counts.push_back(blocks * p.count);
      leaders.displs.push_back(first * p.count);
      first += blocks;
    }
    leaders.count = leaders.counts[static_cast<std::size_t>(host)];
    const std::uint64_t mineAt = leaders.displs[static_cast<std::size_t>(host)] * es;
    hierarchy::addGroup(plan, hierarchy::groupChoice(leaders), leaders,
                        Phase{layout.column(0), at(byHost, mineAt), byHost, scratchBase, 1});
    if (packed) {
      // Into rank order, in runs of ranks that are also neighbours host by host.
      int q = 0;
      while (q < P) {
        int end = q + 1;
        while (end < P && layout.hostMajor(end) == layout.hostMajor(end - 1) + 1) ++end;
        hierarchy::Part copy;
        copy.kind = hierarchy::Part::Kind::kCopy;
        copy.phase.output = output(static_cast<std::uint64_t>(q) * block);
        copy.src = scratch(static_cast<std::uint64_t>(layout.hostMajor(q)) * block);
        copy.size = static_cast<std::uint64_t>(end - q) * block;
        plan.push_back(copy);
        q = end;
      }
    }
  }
  hierarchy::addHostBroadcast(plan, p, mine, local, 0, static_cast<std::uint64_t>(P) * p.count,
                              scratchBase, 2);
  return plan;
}

}  // namespace

Schedule buildAllgatherHierarchical(const ScheduleParams& p) {
  return hierarchy::build(plan(p), "hierarchical");
}

Cost costAllgatherHierarchical(const ScheduleParams& p) { return hierarchy::cost(plan(p)); }

const AlgorithmInfo kAllgatherHierarchical{
    .coll = Collective::kAllgather,
    .name = "hierarchical",
    .summary =
        "hosts (hostOf): gather to a leader per host, leaders allgatherv the host blocks, "
        "intra-host broadcast of all P n bytes; the default across hosts",
    .build = buildAllgatherHierarchical,
    .cost = costAllgatherHierarchical,
    .acrossHosts = true,
    .doc = {.rounds = "1 + the leaders' allgatherv (ring: H-1) + the broadcast's in the host",
            .perRank = "others: n to the leader, then the broadcast of P n; the leader: the ring's "
                       "(H-1) k messages of L n across hosts, then P n to each child in the host",
            .cost = "(L-1) (a + n b) + (H-1) (A + L n B) + ceil(log2 L) (a + P n b)",
            .restrictions = "jobs over hosts (hostOf); any count, any layout (hosts whose ranks "
                            "are not consecutive go through a scratch of P n bytes); one host or "
                            "one rank per host: the table's algorithm for P; only the leaders use "
                            "the network; every rank receives its own block back"}};

}  // namespace collx::algorithms
