// allreduce hierarchical: for jobs spanning hosts (ScheduleParams::hostOf). Inside a host
// the ranks talk over shared memory, between hosts over the network; the network sees each
// byte of the vector only once per host, moved by every rank of the host in parallel.
//
// Sliced (every host has L ranks, L > 1, and the vector has at least L elements): H hosts,
// the vector split into L slices (sizes differ by at most one element).
//   1. intra-host reduce_scatter ring: local rank i ends with slice i reduced over its host;
//   2. inter-host allreduce of slice i among the ranks of local index i on every host (one
//      rank per host, in host order), with the default table's algorithm for H ranks and the
//      slice's bytes (recursive_doubling for small slices, ring for large ones); avg divides
//      the slice once here;
//   3. intra-host allgatherv ring of the slices.
//
//   H=2, L=2, after phase   r0 (host 0)     r1 (host 0)     r2 (host 1)     r3 (host 1)
//   1 reduce_scatter        s0: r0+r1       s1: r0+r1       s0: r2+r3       s1: r2+r3
//   2 allreduce (r0,r2) and (r1,r3)
//                           s0: all         s1: all         s0: all         s1: all
//   3 allgatherv            s0 s1           s0 s1           s0 s1           s0 s1
//
// Leader (hosts of different sizes, or fewer elements than ranks on a host):
//   1. intra-host reduce (binomial) to the host's lowest rank, its leader;
//   2. the leaders allreduce the vector (the table's algorithm for H ranks; avg divides);
//   3. intra-host broadcast (the table's algorithm for L_h ranks) from the leader.
// One host, or one rank on every host: the default table's algorithm for P ranks, as is.
//
// Cost (n bytes, H hosts of L ranks; a for shared memory, A for the network, likewise b, B):
// sliced: 2(L-1) a + 2(L-1)/L n b + (L-1)/L n gamma inside the host, then an allreduce of
// n/L among H ranks, with the ring 2(H-1) A + 2(H-1)/H n/L B + (H-1)/H n/L gamma: each rank
// sends 2(H-1)/(H L) n bytes across hosts, a host 2(H-1)/H n over L connections at once.
// A flat ring over P = H L ranks takes 2(P-1) steps, each waiting for a network hop.
// Leader: ceil(log2 L) (a + n b + n gamma), the leaders' allreduce of n among H, then
// ceil(log2 L) (a + n b). Exactly (costAllreduceHierarchical): the sum of the phases' own
// cost formulas for this rank's part in them (hierarchy.h runs the same plan for both).
// Restrictions: commutative ops only (the reductions follow the ring and the host layout,
// not rank order). Results are the same on every rank: each slice (or the vector) is
// reduced by one group and then copied. The phases run one after the other on each rank (no
// pipelining across phases); every rank must pass the same hostOf.
#include "../hierarchy.h"
#include "../patterns.h"

namespace collx::algorithms {

namespace {

hierarchy::Plan plan(const ScheduleParams& p) {
  using hierarchy::Phase;
  const hierarchy::Layout layout = hierarchy::Layout::of(p);
  const int P = p.size, r = p.rank;
  const std::uint64_t es = p.elementSize;
  hierarchy::Plan plan;
  const BufferRef contribution = p.inPlace ? output() : input();
  if (layout.flat()) {
    ScheduleParams whole = p;
    whole.hostOf.clear();
    std::vector<int> all(static_cast<std::size_t>(P));
    for (int i = 0; i < P; ++i) all[static_cast<std::size_t>(i)] = i;
    hierarchy::addGroup(plan, hierarchy::groupChoice(whole), whole,
                        Phase{all, input(), output(), 0, 0});
    return plan;
  }
  const int host = layout.hostOf[static_cast<std::size_t>(r)];
  const int local = layout.localOf[static_cast<std::size_t>(r)];
  const std::vector<int>& mine = layout.members[static_cast<std::size_t>(host)];
  const int L = layout.size(host), H = layout.hosts;
  const bool avg = p.op == ReduceOpKind::kAvg;
  if (layout.even() && p.count >= static_cast<std::uint64_t>(L)) {
    const patterns::Blocks slices{p.count, L};
    std::vector<std::uint64_t> counts(static_cast<std::size_t>(L)), displs(counts.size());
    for (int i = 0; i < L; ++i) {
      counts[static_cast<std::size_t>(i)] = slices.size(i);
      displs[static_cast<std::size_t>(i)] = slices.offset(i);
    }
    const BufferRef slice = output(slices.offset(local) * es);
    const std::uint64_t sliceCount = slices.size(local);
    ScheduleParams rs = hierarchy::groupParams(p, Collective::kReduceScatter, local, L);
    rs.count = sliceCount;
    rs.counts = counts;
    rs.displs = displs;
    rs.inPlace = false;
    hierarchy::addGroup(plan, *findAlgorithm(Collective::kReduceScatter, "ring"), rs,
                        Phase{mine, contribution, slice, 0, 0});
    ScheduleParams ar = hierarchy::groupParams(p, Collective::kAllreduce, host, H);
    ar.count = sliceCount;
    ar.inPlace = true;
    hierarchy::addGroup(plan, hierarchy::groupChoice(ar), ar,
                        Phase{layout.column(local), slice, slice, 0, 1});
    if (avg) hierarchy::addDivide(plan, slice, sliceCount);
    ScheduleParams ag = hierarchy::groupParams(p, Collective::kAllgatherv, local, L);
    ag.count = sliceCount;
    ag.counts = counts;
    ag.displs = displs;
    ag.inPlace = true;
    hierarchy::addGroup(plan, *findAlgorithm(Collective::kAllgatherv, "ring"), ag,
                        Phase{mine, slice, output(), 0, 2});
    return plan;
  }
  // Leaders.
  ScheduleParams red = hierarchy::groupParams(p, Collective::kReduce, local, L);
  red.root = 0;
  hierarchy::addGroup(plan, hierarchy::groupChoice(red), red,
                      Phase{mine, contribution, output(), 0, 0});
  if (local == 0) {
    ScheduleParams ar = hierarchy::groupParams(p, Collective::kAllreduce, host, H);
    ar.inPlace = true;
    hierarchy::addGroup(plan, hierarchy::groupChoice(ar), ar,
                        Phase{layout.column(0), output(), output(), 0, 1});
    if (avg) hierarchy::addDivide(plan, output(), p.count);
  }
  hierarchy::addHostBroadcast(plan, p, mine, local, 0, p.count, 0, 2);
  return plan;
}

}  // namespace

Schedule buildAllreduceHierarchical(const ScheduleParams& p) {
  return hierarchy::build(plan(p), "hierarchical");
}

Cost costAllreduceHierarchical(const ScheduleParams& p) { return hierarchy::cost(plan(p)); }

const AlgorithmInfo kAllreduceHierarchical{
    .coll = Collective::kAllreduce,
    .name = "hierarchical",
    .summary =
        "hosts (hostOf): intra-host reduce-scatter into L slices, an allreduce of each slice "
        "among the ranks holding it on every host, intra-host allgather; uneven hosts: "
        "reduce to a leader, leaders allreduce, broadcast; the default across hosts",
    .build = buildAllreduceHierarchical,
    .cost = costAllreduceHierarchical,
    .acrossHosts = true,
    .doc = {
        .rounds = "sliced: 2(L-1) inside the host + the inner allreduce's among H; leader: 2 "
                  "floor(log2 L) + the inner's",
        .perRank = "sliced: 2(L-1) k messages, 2(L-1)/L n bytes inside the host, then the inner "
                   "allreduce of n/L among H (ring: 2(H-1)/H n/L bytes across hosts); leader: n to "
                   "its parent in the host, the leaders' allreduce of n, n to each child",
        .cost = "sliced: 2(L-1) a + 2(L-1)/L n b + (L-1)/L n gamma inside, + (ring) 2(H-1) A + "
                "2(H-1)/(H L) n B + (H-1)/(H L) n gamma across; leader: 2 ceil(log2 L) (a + n b) + "
                "ceil(log2 L) n gamma + the leaders' allreduce of n",
        .restrictions =
            "jobs over hosts (hostOf); sliced when every host has L > 1 ranks and count >= L, else "
            "through one leader per host; one host or one rank per host: the table's algorithm for "
            "P; commutative ops only; phases not pipelined into each other"}};

}  // namespace collx::algorithms
