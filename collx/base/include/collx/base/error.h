// collx::Error and its kinds: the only exceptions collx's public API throws.
//
// Every message says who, what and with whom:
//   "rank 3: allreduce(ring, seq 7): timed out after 30000 ms waiting for rank 2"
// The parts are also available separately (rank(), op(), peer(), detail()) so that a
// caller can react to them without parsing text.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace collx {

// Who raised an error and doing what. rank and peer are -1 when there is none
// (a store server has no rank; a store call has no peer).
struct Where {
  int rank = -1;
  std::string op;
  int peer = -1;
};

enum class ErrorKind {
  kIo,               // a socket, file or peer failed (connection reset, peer died, ...)
  kTimeout,          // a deadline passed
  kInvalidArgument,  // the caller passed something wrong (size, rank, dtype, op, URL, ...)
  kMismatch,         // ranks disagree (different collective, count, dtype, job, ...)
  kUnsupported,      // valid, but this build or transport cannot do it
  kAborted,          // abort() was called on the context
  kRevoked,          // a rank revoked the context (Context::revoke): this generation is over
  kExcluded,         // the other ranks agreed without this one (Context::agree): it is out
};
// The last kind: what a kind that came from outside (a frame, a store reply, shared memory)
// may be at most.
inline constexpr ErrorKind kLastErrorKind = ErrorKind::kExcluded;

// A kind that came from outside as a number, or kIo when it names no kind.
inline ErrorKind errorKindFrom(unsigned value) noexcept {
  return value <= static_cast<unsigned>(kLastErrorKind) ? static_cast<ErrorKind>(value)
                                                        : ErrorKind::kIo;
}

const char* errorKindName(ErrorKind kind) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, Where where, const std::string& detail);

  ErrorKind kind() const noexcept { return kind_; }
  int rank() const noexcept { return where_.rank; }
  int peer() const noexcept { return where_.peer; }
  const std::string& op() const noexcept { return where_.op; }
  const std::string& detail() const noexcept { return detail_; }
  const Where& where() const noexcept { return where_; }

 private:
  ErrorKind kind_;
  Where where_;
  std::string detail_;
};

// NOLINTBEGIN(bugprone-macro-parentheses): Name is a class name, Kind an enumerator
#define COLLX_DECLARE_ERROR_KIND(Name, Kind)                  \
  class Name : public Error {                                 \
   public:                                                    \
    Name(Where where, const std::string& detail)              \
        : Error(ErrorKind::Kind, std::move(where), detail) {} \
  }
// NOLINTEND(bugprone-macro-parentheses)

COLLX_DECLARE_ERROR_KIND(IoError, kIo);
COLLX_DECLARE_ERROR_KIND(TimeoutError, kTimeout);
COLLX_DECLARE_ERROR_KIND(InvalidArgument, kInvalidArgument);
COLLX_DECLARE_ERROR_KIND(MismatchError, kMismatch);
COLLX_DECLARE_ERROR_KIND(Unsupported, kUnsupported);
COLLX_DECLARE_ERROR_KIND(Aborted, kAborted);
// Raised by every call of a context that a rank revoked (Context::revoke), on every rank:
// the detail says who revoked it and why; peer() is the rank that revoked (-1 on that rank).
COLLX_DECLARE_ERROR_KIND(RevokedError, kRevoked);
// Raised on a rank that the others agreed without (Context::agree, shrink): they found it
// failed (its connection broke, or it answered nothing for the peer timeout, or it did not
// come before the deadline). Its context is over; the process may join the job again.
COLLX_DECLARE_ERROR_KIND(ExcludedError, kExcluded);

#undef COLLX_DECLARE_ERROR_KIND

// Throws the subclass of Error that matches `kind` (so that `catch (TimeoutError&)` works
// for errors that travelled as a kind, e.g. through the store protocol).
[[noreturn]] void throwError(ErrorKind kind, Where where, const std::string& detail);

// Formats "rank R: op (peer P): detail" the way every collx error reads.
std::string formatError(const Where& where, const std::string& detail);

}  // namespace collx
