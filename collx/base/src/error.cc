#include "collx/base/error.h"

#include "collx/base/check.h"

namespace collx {

const char* errorKindName(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::kIo:
      return "IoError";
    case ErrorKind::kTimeout:
      return "TimeoutError";
    case ErrorKind::kInvalidArgument:
      return "InvalidArgument";
    case ErrorKind::kMismatch:
      return "MismatchError";
    case ErrorKind::kUnsupported:
      return "Unsupported";
    case ErrorKind::kAborted:
      return "Aborted";
    case ErrorKind::kRevoked:
      return "RevokedError";
    case ErrorKind::kExcluded:
      return "ExcludedError";
  }
  return "Error";
}

std::string formatError(const Where& where, const std::string& detail) {
  std::string out;
  out.reserve(detail.size() + where.op.size() + 32);
  if (where.rank >= 0) {
    out += "rank " + std::to_string(where.rank);
  } else {
    out += "(no rank)";
  }
  if (!where.op.empty()) out += ": " + where.op;
  if (where.peer >= 0) out += " (peer rank " + std::to_string(where.peer) + ")";
  out += ": ";
  out += detail;
  return out;
}

Error::Error(ErrorKind kind, Where where, const std::string& detail)
    : std::runtime_error(formatError(where, detail)),
      kind_(kind),
      where_(std::move(where)),
      detail_(detail) {}

void throwError(ErrorKind kind, Where where, const std::string& detail) {
  switch (kind) {
    case ErrorKind::kIo:
      throw IoError(std::move(where), detail);
    case ErrorKind::kTimeout:
      throw TimeoutError(std::move(where), detail);
    case ErrorKind::kInvalidArgument:
      throw InvalidArgument(std::move(where), detail);
    case ErrorKind::kMismatch:
      throw MismatchError(std::move(where), detail);
    case ErrorKind::kUnsupported:
      throw Unsupported(std::move(where), detail);
    case ErrorKind::kAborted:
      throw Aborted(std::move(where), detail);
    case ErrorKind::kRevoked:
      throw RevokedError(std::move(where), detail);
    case ErrorKind::kExcluded:
      throw ExcludedError(std::move(where), detail);
  }
  throw Error(kind, std::move(where), detail);
}

namespace detail {
void checkFailed(const char* file, int line, const std::string& what) {
  throw std::logic_error(std::string("collx internal check failed at ") + file + ":" +
                         std::to_string(line) + ": " + what);
}
}  // namespace detail

}  // namespace collx
