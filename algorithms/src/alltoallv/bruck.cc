// alltoallv bruck: Bruck's algorithm (alltoall/bruck.cc) over per-rank counts. A block
// travels through up to log2 P intermediate ranks, which must post receives of the right
// size, but a rank's own arguments give only its row (what it sends) and its column (what
// it receives) of the count matrix C (C[i][j]: what rank i sends rank j). So the API layer
// (collectives.cc) first allgathers every rank's sendcounts into ScheduleParams::countMatrix,
// and the schedule is built from the whole matrix: every size is then known in advance.
//
// Positions: at rank r, position i (0..P-1) starts as the block for rank r+i. Round k (pof =
// 2^k, k = 0..ceil(log2 P)-1): rank r sends every position with bit k set, packed into one
// message, to r + pof, and receives the same positions from r - pof. After the rounds of
// the bits in mask M, rank r's position i holds the block from s = r - (i & M) to s + i, of
// C[s][s + i] elements; after the last round, the block from r - i to r, which goes to its
// place in the output. Unlike alltoall's version, a block in transit does not fit its final
// place in general (the sizes differ), so it stays in the scratch area of the round that
// brought it, until it is sent on or, after the round of i's highest bit, copied home.
//
//   P=4, rank 0: round 0 sends p1 (0->1) and p3 (0->3) to 1, receives 3's p1 (3->0) and p3
//   (3->2) from 3; round 1 sends p2 (0->2) and p3 (3->2, from round 0's area) to 2, receives
//   2's p2 (2->0) and p3 (1->0).
//
// Cost: the allgather of P counts (8 P bytes per rank, the default allgather algorithm),
// then ceil(log2 P) alpha + B beta, B = the bytes of the blocks a rank forwards: with equal
// blocks of b bytes, b * (number of set bits in 1..P-1), about b P/2 log2 P. Exactly (the
// schedule alone, costAlltoallvBruck): one send and one receive per round, of the sizes
// above. Scratch: everything sent and received over the rounds (each round its own areas).
// Any P, any counts (0 included).
#include <algorithm>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

namespace {

constexpr const char* kName = "bruck";

// The matrix every rank needs; InvalidArgument when the API layer did not provide it.
const std::vector<std::uint64_t>& matrixOf(const ScheduleParams& p) {
  const auto P = static_cast<std::uint64_t>(p.size);
  if (p.countMatrix.size() != P * P) {
    throw InvalidArgument(Where{p.rank, "alltoallv", -1},
                          "the bruck algorithm needs every rank's sendcounts (a " +
                              std::to_string(P) + " x " + std::to_string(P) +
                              " count matrix), got " + std::to_string(p.countMatrix.size()) +
                              " entries");
  }
  if (!p.counts.empty()) {
    for (int j = 0; j < p.size; ++j) {
      if (p.countMatrix[static_cast<std::uint64_t>(p.rank) * P + static_cast<std::uint64_t>(j)] !=
          p.counts[j]) {
        throw InvalidArgument(Where{p.rank, "alltoallv", -1},
                              "the count matrix's row " + std::to_string(p.rank) +
                                  " differs from this rank's sendcounts at " + std::to_string(j));
      }
    }
  }
  return p.countMatrix;
}

// Sizes (elements) of the blocks rank `at` holds at `positions` before round k.
struct Round {
  int k;
  std::vector<int> positions;      // bit k set, increasing
  std::vector<std::uint64_t> out;  // what rank r sends at round k, per position
  std::vector<std::uint64_t> in;   // what rank r receives, per position
  std::uint64_t outTotal = 0;
  std::uint64_t inTotal = 0;
};

std::vector<Round> roundsOf(const ScheduleParams& p) {
  const std::vector<std::uint64_t>& C = matrixOf(p);
  const int P = p.size, r = p.rank;
  auto size = [&](int at, int i, int mask) {
    const int s = patterns::mod(at - (i & mask), P);
    const int d = patterns::mod(s + i, P);
    return C[static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>(P) +
             static_cast<std::uint64_t>(d)];
  };
  std::vector<Round> rounds;
  for (int k = 0; (1 << k) < P; ++k) {
    Round round;
    round.k = k;
    const int pof = 1 << k, mask = pof - 1;  // the bits of the rounds before
    for (int i = 1; i < P; ++i) {
      if (((i >> k) & 1) == 0) continue;
      round.positions.push_back(i);
      round.out.push_back(size(r, i, mask));
      round.in.push_back(size(patterns::mod(r - pof, P), i, mask));
      round.outTotal += round.out.back();
      round.inTotal += round.in.back();
    }
    rounds.push_back(std::move(round));
  }
  return rounds;
}

int highestBit(int i) {
  int k = 0;
  while ((i >> (k + 1)) != 0) ++k;
  return k;
}

}  // namespace

Schedule buildAlltoallvBruck(const ScheduleParams& p) {
  Schedule s(kName);
  const int P = p.size, r = p.rank;
  const std::uint64_t es = p.elementSize;
  const std::vector<Round> rounds = roundsOf(p);
  if (p.counts[r] > 0)
    s.copy(output(p.recvDispls[r] * es), input(p.displs[r] * es), p.counts[r] * es);
  if (P == 1) return s;
  // Scratch: per round a send area then a receive area.
  std::vector<std::uint64_t> sendBase, recvBase;
  std::uint64_t scratchBytes = 0;
  for (const Round& round : rounds) {
    sendBase.push_back(scratchBytes);
    scratchBytes += round.outTotal * es;
    recvBase.push_back(scratchBytes);
    scratchBytes += round.inTotal * es;
  }
  s.setScratchBytes(scratchBytes);
  // Where position i lives now: the receive area of the round that brought it (offset into
  // the scratch, the receive that wrote it), or still the input.
  struct Place {
    bool received = false;
    std::uint64_t offset = 0;
    TaskId recv = 0;
  };
  std::vector<Place> place(static_cast<std::size_t>(P));
  for (const Round& round : rounds) {
    const int pof = 1 << round.k;
    const auto step = static_cast<std::uint32_t>(round.k);
    Deps packed;
    std::uint64_t at = sendBase[static_cast<std::size_t>(round.k)];
    for (std::size_t x = 0; x < round.positions.size(); ++x) {
      const int i = round.positions[x];
      const std::uint64_t bytes = round.out[x] * es;
      if (bytes > 0) {
        const Place& from = place[static_cast<std::size_t>(i)];
        if (from.received) {
          packed.push_back(s.copy(scratch(at), scratch(from.offset), bytes, {from.recv}));
        } else {
          packed.push_back(
              s.copy(scratch(at), input(p.displs[patterns::mod(r + i, P)] * es), bytes));
        }
      }
      at += bytes;
    }
    const std::uint64_t inBase = recvBase[static_cast<std::size_t>(round.k)];
    const TaskId got = s.recv(patterns::mod(r - pof, P), step, scratch(inBase), round.inTotal * es);
    s.send(patterns::mod(r + pof, P), step, scratch(sendBase[static_cast<std::size_t>(round.k)]),
           round.outTotal * es, packed);
    std::uint64_t off = inBase;
    for (std::size_t x = 0; x < round.positions.size(); ++x) {
      const int i = round.positions[x];
      const std::uint64_t bytes = round.in[x] * es;
      place[static_cast<std::size_t>(i)] = Place{true, off, got};
      if (highestBit(i) == round.k && bytes > 0) {  // final: the block from r - i to r
        s.copy(output(p.recvDispls[patterns::mod(r - i, P)] * es), scratch(off), bytes, {got});
      }
      off += bytes;
    }
  }
  return s;
}

Cost costAlltoallvBruck(const ScheduleParams& p) {
  Cost c;
  for (const Round& round : roundsOf(p)) {
    c.sends += 1;
    c.recvs += 1;
    c.sendBytes += round.outTotal * p.elementSize;
    c.recvBytes += round.inTotal * p.elementSize;
  }
  return c;
}

const AlgorithmInfo kAlltoallvBruck{
    .coll = Collective::kAlltoallv,
    .name = "bruck",
    .summary =
        "Bruck over per-rank counts: an allgather of every rank's sendcounts first, then "
        "ceil(log2 P) steps forwarding blocks through intermediate ranks; small blocks",
    .build = buildAlltoallvBruck,
    .cost = costAlltoallvBruck,
    .exchangesCounts = true,
    .doc = {.rounds = "ceil(log2 P) after an allgather of the counts",
            .perRank = "an allgather of 2P counts, then ceil(log2 P) messages: round j the blocks "
                       "at positions with bit j set, each of the size the count matrix gives",
            .cost = "the allgather of 16 P bytes + ceil(log2 P) alpha + (the forwarded blocks) "
                    "beta, plus the packing copies",
            .restrictions = "any P, any counts; counts that disagree between a sender and its "
                            "receiver are a MismatchError on every rank; for small blocks"}};

}  // namespace collx::algorithms
