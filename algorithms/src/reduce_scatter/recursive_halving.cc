// reduce_scatter recursive_halving: log2 p rounds in which partners split the part of the
// vector they are still responsible for, each sending the half the other keeps and
// reducing the half it keeps (MPICH's recursive halving, with per-rank counts and a
// rank-ordered variant for non-commutative ops).
//
// Blocks: rank i's block is counts[i] elements at displs[i], the prefix sums of counts (as
// collectives.cc passes them: the blocks follow each other in rank order). P not a power of
// two: with p the largest power of two <= P and rem = P - p, the pairs (2i, 2i+1), i < rem,
// fold first: 2i sends its whole vector to 2i+1, which reduces it into its own. The main
// phase then runs over p "new" ranks: new rank i stands for ranks 2i and 2i+1 (i < rem, its
// new block is their two blocks, contiguous) or for rank i + rem (its own block).
//
// Main phase: an accumulator in scratch holds the new blocks at "positions"; a rank owns a
// window of positions, the whole range at first. In round j (distance d = p/2, p/4, ..., 1
// in positions) the rank at position v and the one at v ^ d split their window: each sends
// the half holding the other's position and reduces the half holding its own. After log2 p
// rounds the rank holds its new block, reduced over every rank; the last reduce writes the
// own block straight into the output, and 2i+1 sends 2i its block (step log2 p + 1).
//
//   p=4, commutative (position = new block), P=4 blocks b0..b3, x = partial, R = reduced:
//   round   rank0      rank1      rank2      rank3
//   d=2     b0b1 x     b0b1 x     b2b3 x     b2b3 x      (partners 0-2, 1-3)
//   d=1     b0 R       b1 R       b2 R       b3 R        (partners 0-1, 2-3)
//
// Rank order: with positions equal to new blocks, round j pairs ranks p/2^(j+1) apart, so a
// partial covers ranks {0, 2} before {1, 3}: fine for commutative ops only. For a
// non-commutative op, new block q sits at position reverseBits(q) instead: round j then
// pairs new ranks nr and nr ^ 2^j, every partial covers a contiguous range of ranks, and the
// lower range is always the left operand, so every block is r0 op r1 op ... op r(P-1). The
// price is a copy of the first round's outgoing half into scratch (its blocks are not
// contiguous in the input); the fold is ordered the same way (2i op 2i+1).
//
// Cost (n = sum of counts, c = n/P for equal counts, P = p):
//   log2 p alpha + (n - c) beta + (n - c) gamma per rank;
//   P != p: + 2 alpha + (n + c) beta + n gamma on the folded pairs.
// Exactly, per rank: the fold (2i: one send of n, one receive of its block; 2i+1: one
// receive of n and n reduced elements, one send of 2i's block), then in round j one send of
// the half it gives and one receive (and reduction) of the half it keeps, which the cost
// function adds up from the counts. Any P, any counts (zero-byte messages still go, so both
// sides agree without knowing which blocks are empty); when every count is 0, which every rank
// knows alike, nothing goes. No fallback needed.
#include <algorithm>
#include <utility>

#include "../builders.h"
#include "../patterns.h"

namespace collx::algorithms {

namespace {

constexpr const char* kName = "recursive_halving";

// Where every block sits: in the input (displs) and in the accumulator (positions).
class Layout {
 public:
  explicit Layout(const ScheduleParams& p)
      : p_(p),
        fold_(p.size, -1),
        bits_(patterns::log2Exact(fold_.pow2)),
        reversed_(!p.commutative),
        position_(fold_.pow2 + 1, 0) {
    for (int q = 0; q < fold_.pow2; ++q) {
      position_[q + 1] = position_[q] + newBlockCount(newBlockAt(q));
    }
  }

  const patterns::RootedFold& fold() const { return fold_; }
  int bits() const { return bits_; }
  int pow2() const { return fold_.pow2; }
  // The new block at position q, and the position of new block b (the map is an involution).
  int newBlockAt(int q) const { return reversed_ ? patterns::reverseBits(q, bits_) : q; }
  int positionOf(int b) const { return newBlockAt(b); }
  // The real blocks of new block b, in rank order.
  int firstRealBlock(int b) const { return b < fold_.rem ? 2 * b : b + fold_.rem; }
  int realBlocks(int b) const { return b < fold_.rem ? 2 : 1; }
  std::uint64_t newBlockCount(int b) const {
    std::uint64_t n = 0;
    for (int i = 0; i < realBlocks(b); ++i) n += p_.counts[firstRealBlock(b) + i];
    return n;
  }
  // Positions [lo, hi) in the accumulator, in elements.
  std::uint64_t offset(int q) const { return position_[q]; }
  std::uint64_t size(int lo, int hi) const { return position_[hi] - position_[lo]; }
  // Real block i's offset in the accumulator.
  std::uint64_t accOffset(int i) const {
    const int b = fold_.rem > 0 && i < 2 * fold_.rem ? i / 2 : i - fold_.rem;
    std::uint64_t off = position_[positionOf(b)];
    if (i < 2 * fold_.rem && i % 2 == 1) off += p_.counts[i - 1];
    return off;
  }

  // The positions [lo, hi) as runs that are contiguous both in the accumulator and in the
  // input, empty blocks left out: one run with the identity layout.
  struct Run {
    std::uint64_t acc;
    std::uint64_t in;
    std::uint64_t count;
  };
  std::vector<Run> runs(int lo, int hi) const {
    std::vector<Run> out;
    for (int q = lo; q < hi; ++q) {
      const int b = newBlockAt(q);
      const std::uint64_t count = newBlockCount(b);
      if (count == 0) continue;
      const std::uint64_t in = p_.displs[firstRealBlock(b)];
      if (!out.empty() && out.back().acc + out.back().count == offset(q) &&
          out.back().in + out.back().count == in) {
        out.back().count += count;
      } else {
        out.push_back({offset(q), in, count});
      }
    }
    return out;
  }

 private:
  const ScheduleParams& p_;
  patterns::RootedFold fold_;
  int bits_;
  bool reversed_;
  std::vector<std::uint64_t> position_;
};

std::uint64_t totalCount(const ScheduleParams& p) {
  std::uint64_t n = 0;
  for (std::uint64_t c : p.counts) n += c;
  return n;
}

}  // namespace

Schedule buildReduceScatterRecursiveHalving(const ScheduleParams& p) {
  const int P = p.size, r = p.rank;
  const std::uint64_t es = p.elementSize;
  const std::uint64_t n = totalCount(p);
  Schedule s(kName);
  if (P == 1) {
    if (n > 0) s.copy(output(), input(), n * es);
    return s;
  }
  // Every rank holds the same counts: with nothing to reduce, none has anything to send.
  if (n == 0) return s;
  const Layout L(p);
  const auto& fold = L.fold();
  const int nr = fold.newRank(r);
  const std::uint32_t postStep = static_cast<std::uint32_t>(L.bits() + 1);
  auto divideOwn = [&](Deps deps) {
    if (p.op == ReduceOpKind::kAvg && p.counts[r] > 0)
      s.divide(output(), p.counts[r], std::move(deps));
  };
  if (nr < 0) {  // folds out: hand the vector over, take the own block back at the end
    s.send(r + 1, 0, input(), n * es);
    divideOwn({s.recv(r + 1, postStep, output(), p.counts[r] * es)});
    return s;
  }
  // Scratch: the accumulator (positions) and, after it, what arrives (positions, or the
  // partner's whole vector in input layout for the fold).
  const std::uint64_t recvBase = n * es;
  s.setScratchBytes(2 * n * es);
  auto acc = [&](std::uint64_t elems) { return scratch(elems * es); };
  auto incoming = [&](std::uint64_t elems) { return scratch(recvBase + elems * es); };

  const bool folded = r < 2 * fold.rem;
  bool accReady = false;  // the accumulator holds this rank's data (else it is in the input)
  Deps prev;
  if (folded) {  // (2i) op (2i+1): the partner's vector is the left operand
    TaskId got = s.recv(r - 1, 0, incoming(0), n * es);
    prev = {got};
    for (const auto& run : L.runs(0, L.pow2())) {
      prev.push_back(
          s.reduce(acc(run.acc), incoming(run.in), input(run.in * es), run.count, {got}));
    }
    accReady = true;
  }

  const int v = L.positionOf(nr);
  int lo = 0, hi = L.pow2();
  for (int j = 0; j < L.bits(); ++j) {
    const int d = L.pow2() >> (j + 1);
    const int partner = fold.realRank(L.newBlockAt(v ^ d));
    const bool partnerFirst = partner < r;
    const auto [keepLo, keepHi, giveLo, giveHi] = patterns::halve(v, d, lo, hi);
    const auto step = static_cast<std::uint32_t>(j + 1);
    const bool last = j + 1 == L.bits();

    // Send the half the partner keeps: from the accumulator, or straight from the input
    // when it is one run there, else packed into the accumulator (which it no longer needs).
    const std::uint64_t giveBytes = L.size(giveLo, giveHi) * es;
    if (accReady) {
      s.send(partner, step, acc(L.offset(giveLo)), giveBytes, prev);
    } else {
      const auto giveRuns = L.runs(giveLo, giveHi);
      if (giveRuns.size() <= 1) {
        const std::uint64_t in = giveRuns.empty() ? 0 : giveRuns.front().in;
        s.send(partner, step, input(in * es), giveBytes);
      } else {
        Deps packed;
        for (const auto& run : giveRuns) {
          packed.push_back(s.copy(acc(run.acc), input(run.in * es), run.count * es));
        }
        s.send(partner, step, acc(L.offset(giveLo)), giveBytes, packed);
      }
    }
    // Receive the partner's part of the half this rank keeps, and reduce it in rank order.
    TaskId got =
        s.recv(partner, step, incoming(L.offset(keepLo)), L.size(keepLo, keepHi) * es, prev);
    auto combine = [&](BufferRef dst, BufferRef mine, BufferRef theirs, std::uint64_t count) {
      return partnerFirst ? s.reduce(dst, theirs, mine, count, {got})
                          : s.reduce(dst, mine, theirs, count, {got});
    };
    Deps reduced = {got};
    if (!last) {
      for (const auto& run : L.runs(keepLo, keepHi)) {
        BufferRef mine = accReady ? acc(run.acc) : input(run.in * es);
        reduced.push_back(combine(acc(run.acc), mine, incoming(run.acc), run.count));
      }
      prev = reduced;
      accReady = true;
      lo = keepLo;
      hi = keepHi;
      continue;
    }
    // The last round keeps this rank's new block: its own block goes to the output, the
    // folded partner's (if any) to the accumulator, to be sent on.
    Deps ownDone = {got}, partnerDone = {got};
    for (int i = L.firstRealBlock(nr); i < L.firstRealBlock(nr) + L.realBlocks(nr); ++i) {
      if (p.counts[i] == 0) continue;
      const std::uint64_t a = L.accOffset(i);
      BufferRef mine = accReady ? acc(a) : input(p.displs[i] * es);
      BufferRef dst = i == r ? output() : acc(a);
      (i == r ? ownDone : partnerDone).push_back(combine(dst, mine, incoming(a), p.counts[i]));
    }
    if (folded) {
      s.send(r - 1, postStep, acc(L.accOffset(r - 1)), p.counts[r - 1] * es, partnerDone);
    }
    divideOwn(ownDone);
  }
  return s;
}

Cost costReduceScatterRecursiveHalving(const ScheduleParams& p) {
  Cost c;
  const int P = p.size, r = p.rank;
  const std::uint64_t es = p.elementSize;
  const std::uint64_t n = totalCount(p);
  if (P == 1 || n == 0) return c;
  const Layout L(p);
  const int nr = L.fold().newRank(r);
  if (nr < 0) {
    return Cost{1, n * es, 1, p.counts[r] * es, 0};
  }
  if (r < 2 * L.fold().rem) {  // receives and reduces 2i's vector, sends 2i its block
    c.recvs += 1;
    c.recvBytes += n * es;
    c.reducedElements += n;
    c.sends += 1;
    c.sendBytes += p.counts[r - 1] * es;
  }
  // Round j: the window of 2^(bits-j) positions around v halves; one message each way.
  const int v = L.positionOf(nr);
  for (int j = 0; j < L.bits(); ++j) {
    const int window = L.pow2() >> j, half = window / 2;
    const int lo = v / window * window;
    const bool keepLow = v - lo < half;
    const int keepLo = keepLow ? lo : lo + half, giveLo = keepLow ? lo + half : lo;
    const std::uint64_t keep = L.size(keepLo, keepLo + half);
    c.sends += 1;
    c.sendBytes += L.size(giveLo, giveLo + half) * es;
    c.recvs += 1;
    c.recvBytes += keep * es;
    c.reducedElements += keep;
  }
  return c;
}

const AlgorithmInfo kReduceScatterRecursiveHalving{
    .coll = Collective::kReduceScatter,
    .name = "recursive_halving",
    .summary =
        "log P steps halving the vector between partners, (n - n_r) bytes and reductions; any "
        "counts; keeps rank order",
    .build = buildReduceScatterRecursiveHalving,
    .cost = costReduceScatterRecursiveHalving,
    .keepsOrder = true,
    .doc = {
        .rounds = "log2 p; up to log2 p + 2 when P != p",
        .perRank = "log2 p messages (empty ones too), the halves it gives: N - n_r bytes when P = "
                   "p; a folded pair: 2i sends N once, 2i+1 also sends 2i its block",
        .cost = "log2 p alpha + (N - n_r) beta + (N - n_r) gamma (equal blocks), + 2 alpha + (N + "
                "n_2i) beta + N gamma when P != p",
        .restrictions = "any P, any counts",
        .orderNote = " (non-commutative ops: blocks at bit-reversed positions, one more copy)"}};

}  // namespace collx::algorithms
