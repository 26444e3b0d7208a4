// broadcast hierarchical: for jobs spanning hosts (ScheduleParams::hostOf). The vector
// crosses the network once per host, then spreads inside each host over shared memory.
//
//   1. inter-host: a broadcast among one leader per host (host order), the root being its
//      host's leader and every other host's leader its lowest rank, with the default table's
//      algorithm for H ranks and n bytes (one_to_all for few hosts, binomial for more);
//   2. intra-host: every leader broadcasts to the ranks of its host, with the table's
//      algorithm for L_h ranks.
//
//   H=2 (ranks 0,1 | 2,3), root 1:   1 -> 2 (leaders);   then 1 -> 0 and 2 -> 3
//
// One host, or one rank on every host: the default table's algorithm for P ranks, as is.
//
// Cost (n bytes, H hosts of L ranks; A, B the network's alpha and beta, a, b shared
// memory's): with binomial trees, ceil(log2 H) (A + n B) + ceil(log2 L) (a + n b), where a
// flat binomial tree over P ranks may cross hosts at each of its ceil(log2 P) levels.
// Exactly (costBroadcastHierarchical): the sum of the two phases' own cost formulas for
// this rank's part in them. Any P, any root, any layout; every rank must pass the same
// hostOf. The phases run one after the other (no pipelining across them).
#include "../hierarchy.h"

namespace collx::algorithms {

namespace {

hierarchy::Plan plan(const ScheduleParams& p) {
  using hierarchy::Phase;
  const hierarchy::Layout layout = hierarchy::Layout::of(p);
  const int P = p.size, r = p.rank;
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
  const int H = layout.hosts;
  const int host = layout.hostOf[static_cast<std::size_t>(r)];
  const int rootHost = layout.hostOf[static_cast<std::size_t>(p.root)];
  auto leaderOf = [&](int h) { return h == rootHost ? p.root : layout.members[h][0]; };
  std::vector<int> leaders(static_cast<std::size_t>(H));
  for (int h = 0; h < H; ++h) leaders[static_cast<std::size_t>(h)] = leaderOf(h);
  if (r == leaderOf(host)) {
    ScheduleParams inter = hierarchy::groupParams(p, Collective::kBroadcast, host, H);
    inter.root = rootHost;
    inter.inPlace = true;
    hierarchy::addGroup(plan, hierarchy::groupChoice(inter), inter,
                        Phase{leaders, output(), output(), 0, 0});
  }
  hierarchy::addHostBroadcast(plan, p, layout.members[static_cast<std::size_t>(host)],
                              layout.localOf[static_cast<std::size_t>(r)],
                              layout.localOf[static_cast<std::size_t>(leaderOf(host))], p.count, 0,
                              1);
  return plan;
}

}  // namespace

Schedule buildBroadcastHierarchical(const ScheduleParams& p) {
  return hierarchy::build(plan(p), "hierarchical");
}

Cost costBroadcastHierarchical(const ScheduleParams& p) { return hierarchy::cost(plan(p)); }

const AlgorithmInfo kBroadcastHierarchical{
    .coll = Collective::kBroadcast,
    .name = "hierarchical",
    .summary =
        "hosts (hostOf): root -> one leader per host, then each leader -> its host; the "
        "default across hosts",
    .build = buildBroadcastHierarchical,
    .cost = costBroadcastHierarchical,
    .acrossHosts = true,
    .doc = {
        .rounds = "the leaders' broadcast among H + the host's among L",
        .perRank = "the leaders: the table's broadcast among H (one_to_all: H-1 messages at the "
                   "root's host); then inside each host the table's among L",
        .cost = "(binomial) ceil(log2 H) (A + n B) + ceil(log2 L) (a + n b)",
        .restrictions = "jobs over hosts (hostOf); any P, any root, any layout (the root leads its "
                        "host); one host or one rank per host: the table's algorithm for P"}};

}  // namespace collx::algorithms
