#include "collx/secure/tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "collx/base/error.h"
#include "collx/base/setting.h"
#include "collx/base/units.h"

namespace collx::secure {

namespace {

const Setting<kind::Bool> kTls(
    {.name = "COLLX_TLS",
     .component = "security",
     .defaultValue = false,
     .help = "TLS on the TCP store and the ranks' tcp connections, authenticated both ways by "
             "certificates (COLLX_TLS_CERT, COLLX_TLS_KEY, COLLX_TLS_CA). Every rank and the "
             "store's host must agree. Off: the connections prove the job's secret but what "
             "follows is not encrypted."});
const AutoSetting<kind::String> kTlsCert(
    {.name = "COLLX_TLS_CERT",
     .component = "security",
     .automatic = "none",
     .help = "This process's certificate (PEM, leaf first), signed by COLLX_TLS_CA; also shown "
             "to a rediss:// server that asks for one."});
const AutoSetting<kind::String> kTlsKey(
    {.name = "COLLX_TLS_KEY",
     .component = "security",
     .automatic = "none",
     .help = "The private key of COLLX_TLS_CERT (PEM): a file that group and others cannot "
             "read (chmod 600)."});
const AutoSetting<kind::String> kTlsCa(
    {.name = "COLLX_TLS_CA",
     .component = "security",
     .automatic = "none (rediss://: the system's CAs)",
     .help = "The CA certificate(s) (PEM) that signed every rank's and the store's "
             "certificate: a peer whose certificate it did not sign is refused."});

constexpr const char* kWhat = "TLS";

[[noreturn]] void bad(const std::string& what) {
  throw InvalidArgument(Where{-1, kWhat, -1}, what);
}

// OpenSSL's reasons in its error queue (emptied), most recent last: "certificate verify
// failed; ...".
std::string takeErrors() {
  std::string out;
  unsigned long code;
  while ((code = ERR_get_error()) != 0) {
    const char* reason = ERR_reason_error_string(code);
    char buffer[256];
    if (reason == nullptr) {
      ERR_error_string_n(code, buffer, sizeof buffer);
      reason = buffer;
    }
    if (out.find(reason) != std::string::npos) continue;
    if (!out.empty()) out += "; ";
    out += reason;
  }
  return out.empty() ? std::string("no reason given") : out;
}

// A file OpenSSL is about to read: named in the error when it cannot be opened.
void checkReadable(const std::string& variable, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    bad(variable + "=" + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) bad(variable + "=" + path + ": not a regular file");
}

// A private key's file: a regular file that only its owner may read or write.
void checkKeyFile(const std::string& variable, const std::string& path) {
  checkReadable(variable, path);
  struct stat st {};
  ::stat(path.c_str(), &st);
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    bad(variable + "=" + path + ": a private key that group or others can read or write (mode " +
        mode + "): chmod 600 " + path);
  }
}

struct CtxHolder {
  SSL_CTX* ctx;
  ~CtxHolder() {
    if (ctx != nullptr) SSL_CTX_free(ctx);
  }
};

// What every collx TLS connection shares: TLS 1.2 at least, no resumption (tickets, cache),
// no renegotiation or compression, the kernel's TLS where it is offered, and an end of
// stream without close_notify read as an end (the pair protocol says goodbye itself).
SSL_CTX* newContext() {
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr) bad("OpenSSL could not make a TLS context: " + takeErrors());
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // AES-128-GCM first: as strong as a job needs, and the cheapest with AES-NI (4.5 GB/s
  // against AES-256-GCM's 3.8 here, `openssl speed`); the kernel's TLS takes both.
  SSL_CTX_set_ciphersuites(ctx,
                           "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                           "TLS_CHACHA20_POLY1305_SHA256");
  SSL_CTX_set_options(ctx, SSL_OP_ENABLE_KTLS | SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION |
                               SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_num_tickets(ctx, 0);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return ctx;
}

void loadIdentity(SSL_CTX* ctx, const std::string& certVar, const std::string& cert,
                  const std::string& keyVar, const std::string& key) {
  checkReadable(certVar, cert);
  checkKeyFile(keyVar, key);
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1) {
    bad(certVar + "=" + cert + ": not a PEM certificate OpenSSL can use (" + takeErrors() + ")");
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
    const std::string why = takeErrors();
    if (why.find("key values mismatch") != std::string::npos) {
      bad(keyVar + "=" + key + " is not the key of " + certVar + "=" + cert + " (" + why + ")");
    }
    bad(keyVar + "=" + key + ": not a PEM private key OpenSSL can use (" + why + ")");
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    bad(keyVar + "=" + key + " is not the key of " + certVar + "=" + cert + " (" + takeErrors() +
        ")");
  }
}

void loadCa(SSL_CTX* ctx, const std::string& caVar, const std::string& ca, bool forClients) {
  checkReadable(caVar, ca);
  ERR_clear_error();
  if (SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) {
    bad(caVar + "=" + ca + ": no PEM certificate OpenSSL can use (" + takeErrors() + ")");
  }
  if (forClients) {
    // The CA names a server sends with its request for the client's certificate.
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(ca.c_str());
    if (names != nullptr) SSL_CTX_set_client_CA_list(ctx, names);
  }
}

bool isIpLiteral(const std::string& host) {
  in6_addr a6{};
  in_addr a4{};
  return ::inet_pton(AF_INET, host.c_str(), &a4) == 1 ||
         ::inet_pton(AF_INET6, host.c_str(), &a6) == 1;
}

int remainingMs(TlsStream::Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - TlsStream::Clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<std::int64_t>(left.count() + 1, 1 << 30));
}

}  // namespace

// ---- TlsContext ---------------------------------------------------------------------------

TlsContext::TlsContext(SSL_CTX* ctx, bool mutual, std::string describe)
    : ctx_(ctx), mutual_(mutual), describe_(std::move(describe)) {}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

std::shared_ptr<const TlsContext> TlsContext::fromConfig(const Config& config) {
  if (!kTls.get(config)) return nullptr;
  TlsFiles files;
  const auto cert = kTlsCert.get(config);
  const auto key = kTlsKey.get(config);
  const auto ca = kTlsCa.get(config);
  std::string missing;
  if (!cert) missing += " COLLX_TLS_CERT";
  if (!key) missing += " COLLX_TLS_KEY";
  if (!ca) missing += " COLLX_TLS_CA";
  if (!missing.empty()) {
    bad("COLLX_TLS=1 takes a certificate, its key and the CA that signed every rank's "
        "(COLLX_TLS_CERT, COLLX_TLS_KEY, COLLX_TLS_CA); not set:" +
        missing);
  }
  files.cert = *cert;
  files.key = *key;
  files.ca = *ca;
  return fromFiles(files);
}

std::shared_ptr<const TlsContext> TlsContext::fromFiles(const TlsFiles& files) {
  CtxHolder holder{newContext()};
  loadIdentity(holder.ctx, "COLLX_TLS_CERT", files.cert, "COLLX_TLS_KEY", files.key);
  loadCa(holder.ctx, "COLLX_TLS_CA", files.ca, /*forClients=*/true);
  // Both sides show a certificate the CA signed, and both check the other's.
  SSL_CTX_set_verify(holder.ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  std::string text = "cert " + files.cert + ", key " + files.key + ", CA " + files.ca;
  auto out = std::shared_ptr<const TlsContext>(new TlsContext(holder.ctx, true, std::move(text)));
  holder.ctx = nullptr;
  return out;
}

std::shared_ptr<const TlsContext> TlsContext::forService(const Config& config) {
  CtxHolder holder{newContext()};
  const auto cert = kTlsCert.get(config);
  const auto key = kTlsKey.get(config);
  const auto ca = kTlsCa.get(config);
  std::string text;
  if (cert || key) {
    if (!cert || !key) bad("COLLX_TLS_CERT and COLLX_TLS_KEY go together: set both or neither");
    loadIdentity(holder.ctx, "COLLX_TLS_CERT", *cert, "COLLX_TLS_KEY", *key);
    text = "cert " + *cert + ", key " + *key + ", ";
  }
  if (ca) {
    loadCa(holder.ctx, "COLLX_TLS_CA", *ca, false);
    text += "CA " + *ca;
  } else {
    if (SSL_CTX_set_default_verify_paths(holder.ctx) != 1) {
      bad("OpenSSL cannot load the system's CA certificates (" + takeErrors() +
          "): set COLLX_TLS_CA");
    }
    text += "the system's CAs";
  }
  SSL_CTX_set_verify(holder.ctx, SSL_VERIFY_PEER, nullptr);
  auto out = std::shared_ptr<const TlsContext>(new TlsContext(holder.ctx, false, std::move(text)));
  holder.ctx = nullptr;
  return out;
}

std::string explainTlsFailure(const std::string& reason) {
  auto has = [&](const char* text) { return reason.find(text) != std::string::npos; };
  if (has("wrong version number") || has("packet length too long") || has("http request") ||
      has("record layer failure")) {
    return "the peer does not speak TLS (" + reason + ")";
  }
  if (has("alert certificate required")) {
    return "the peer refused the connection: it asks for this side's certificate, and none "
           "was shown (COLLX_TLS_CERT, COLLX_TLS_KEY) (" +
           reason + ")";
  }
  if (has("alert")) return "the peer refused the connection (" + reason + ")";
  return reason;
}

bool kernelTlsAvailable(std::string* why) {
  // TCP's "tls" upper layer: on a socket that is not connected, a kernel without it says
  // ENOENT (after trying to load the module), one with it ENOTCONN.
  static const int answer = [] {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    int rc = ::setsockopt(fd, SOL_TCP, TCP_ULP, "tls", 3);
    const int err = rc == 0 ? 0 : errno;
    ::close(fd);
    return err;
  }();
  if (answer == ENOTCONN || answer == 0) return true;
  if (why != nullptr) {
    *why = answer == ENOENT ? "this kernel has no TLS module (CONFIG_TLS)"
                            : std::string("the kernel refused TLS: ") + std::strerror(answer);
  }
  return false;
}

// ---- the stream's own BIO: sealed records gather in TlsStream::out_ -----------------------

struct OutBio {
  static BIO_METHOD* method() {
    static BIO_METHOD* const m = [] {
      BIO_METHOD* made =
          BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "collx sealed output");
      BIO_meth_set_write_ex(made, &OutBio::write);
      BIO_meth_set_ctrl(made, &OutBio::ctrl);
      BIO_meth_set_create(made, [](BIO* b) {
        BIO_set_init(b, 1);
        return 1;
      });
      return made;
    }();
    return m;
  }

  static int write(BIO* bio, const char* data, std::size_t size, std::size_t* written) {
    auto* stream = static_cast<TlsStream*>(BIO_get_data(bio));
    std::vector<std::uint8_t>& out = stream->out_;
    if (stream->outHead_ == out.size()) {
      out.clear();
      stream->outHead_ = 0;
    } else if (stream->outHead_ >= (std::size_t{256} << 10)) {
      out.erase(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(stream->outHead_));
      stream->outHead_ = 0;
    }
    const auto* p = reinterpret_cast<const std::uint8_t*>(data);
    out.insert(out.end(), p, p + size);
    *written = size;
    return 1;
  }

  static long ctrl(BIO*, int cmd, long, void*) {
    // Flushing is the stream's (TlsStream::flush); nothing else applies.
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
  }
};

// ---- TlsStream ----------------------------------------------------------------------------

TlsStream::TlsStream(std::shared_ptr<const TlsContext> context, int fd, Role role, std::string host)
    : context_(std::move(context)), fd_(fd), role_(role), host_(std::move(host)) {
  const int flags = ::fcntl(fd_, F_GETFL, 0);
  if (flags >= 0 && (flags & O_NONBLOCK) == 0) ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
  ERR_clear_error();
  ssl_ = SSL_new(context_->native());
  if (ssl_ == nullptr || SSL_set_fd(ssl_, fd_) != 1) {
    const std::string why = takeErrors();
    if (ssl_ != nullptr) SSL_free(ssl_);
    throw IoError(Where{-1, kWhat, -1}, "OpenSSL could not make a TLS connection: " + why);
  }
  // With read-ahead (after the handshake), one read takes in several records.
  SSL_set_default_read_buffer_len(ssl_, 128 * kKiB);
  if (role_ == Role::kClient) {
    SSL_set_connect_state(ssl_);
    if (!host_.empty()) {
      if (isIpLiteral(host_)) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), host_.c_str());
      } else {
        SSL_set_tlsext_host_name(ssl_, host_.c_str());
        SSL_set1_host(ssl_, host_.c_str());
      }
    }
  } else {
    SSL_set_accept_state(ssl_);
  }
}

TlsStream::~TlsStream() {
  // No close_notify: the protocols above end their streams themselves, and a peer that died
  // is not waited for.
  SSL_free(ssl_);
}

TlsStream::Status TlsStream::fail(int sslError, int result, const char* during) {
  const bool handshaking = std::strcmp(during, "handshake") == 0;
  const char* hint = handshaking
                         ? " during the TLS handshake (the peer may not use TLS, or refused this "
                           "side's certificate)"
                         : "";
  switch (sslError) {
    case SSL_ERROR_ZERO_RETURN:
      error_ = std::string("the peer closed the TLS connection") + hint;
      ERR_clear_error();
      return Status::kClosed;
    case SSL_ERROR_SYSCALL: {
      const int err = errno;
      std::string queued = ERR_peek_error() != 0 ? takeErrors() : "";
      if (result == 0 || err == 0 || err == ECONNRESET || err == EPIPE) {
        errno_ = err;
        error_ = std::string("the peer closed the connection") + hint;
        return Status::kClosed;
      }
      errno_ = err;
      error_ = std::string(during) + ": " + std::strerror(err);
      if (!queued.empty()) error_ += " (" + queued + ")";
      return Status::kFailed;
    }
    default: {
      std::string why = takeErrors();
      const long verify = SSL_get_verify_result(ssl_);
      if (verify != X509_V_OK && why.find("certificate verify failed") != std::string::npos) {
        why += " (" + std::string(X509_verify_cert_error_string(verify)) + ")";
      }
      error_ = std::string("TLS ") + during + " failed: " + explainTlsFailure(why);
      return Status::kFailed;
    }
  }
}

TlsStream::Status TlsStream::handshakeStep() {
  ERR_clear_error();
  const int rc = role_ == Role::kClient ? SSL_connect(ssl_) : SSL_accept(ssl_);
  if (rc == 1) {
    afterHandshake();
    return Status::kOk;
  }
  const int e = SSL_get_error(ssl_, rc);
  if (e == SSL_ERROR_WANT_READ) return Status::kWantRead;
  if (e == SSL_ERROR_WANT_WRITE) return Status::kWantWrite;
  return fail(e, rc, "handshake");
}

void TlsStream::afterHandshake() {
  kernelSend_ = BIO_get_ktls_send(SSL_get_wbio(ssl_)) != 0;
  kernelReceive_ = BIO_get_ktls_recv(SSL_get_rbio(ssl_)) != 0;
  if (!kernelSend_) {
    // OpenSSL seals here: records gather in out_ and leave in large writes (flush()), and a
    // write never has to be repeated with the same arguments.
    BIO* out = BIO_new(OutBio::method());
    if (out == nullptr) throw IoError(Where{-1, kWhat, -1}, "OpenSSL could not make a BIO");
    BIO_set_data(out, this);
    SSL_set0_wbio(ssl_, out);
  }
  if (!kernelReceive_) SSL_set_read_ahead(ssl_, 1);
}

TlsStream::Status TlsStream::handshake(Clock::time_point deadline) {
  while (true) {
    const Status status = handshakeStep();
    if (status != Status::kWantRead && status != Status::kWantWrite) return status;
    if (!waitFor(status == Status::kWantRead ? POLLIN : POLLOUT, deadline)) {
      error_ = "the TLS handshake did not finish within the timeout";
      return Status::kTimeout;
    }
  }
}

std::string TlsStream::describe() const {
  std::string out = std::string(SSL_get_version(ssl_)) + " " + SSL_get_cipher_name(ssl_);
  if (kernelSend_ && kernelReceive_) return out + ", kernel TLS both ways";
  if (kernelSend_) return out + ", kernel TLS sending, OpenSSL receiving";
  if (kernelReceive_) return out + ", OpenSSL sending, kernel TLS receiving";
  return out + ", sealed by OpenSSL in this process";
}

bool TlsStream::waitFor(short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd_, events, 0};
    const int rc = ::poll(&p, 1, remainingMs(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return true;  // the next call reports it
  }
}

std::size_t TlsStream::write(const iovec* iov, int count) {
  if (failed_) return 0;
  if (kernelSend_) {
    // The kernel seals what the socket takes.
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = static_cast<std::size_t>(count);
    while (true) {
      const ssize_t n = ::sendmsg(fd_, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n >= 0) return static_cast<std::size_t>(n);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        errno_ = errno;
        failed_ = true;
        error_ = std::string("sending failed: ") + std::strerror(errno_);
      }
      return 0;
    }
  }
  // Pieces below this size are gathered into one record with their neighbours; larger ones
  // are sealed where they lie, at most kChunk at a time.
  constexpr std::size_t kGather = 4096;
  constexpr std::size_t kRecord = 16384;
  constexpr std::size_t kChunk = std::size_t{256} << 10;
  std::size_t taken = 0;
  bool ok = true;
  auto seal = [&](const void* data, std::size_t size) {
    std::size_t written = 0;
    if (ok && (SSL_write_ex(ssl_, data, size, &written) != 1 || written != size)) {
      ok = false;  // (the BIO never refuses: only OpenSSL itself can fail here)
      error_ = "TLS write failed: " + takeErrors();
      failed_ = true;
    }
  };
  auto sealGathered = [&] {
    if (!coalesce_.empty()) seal(coalesce_.data(), coalesce_.size());
    coalesce_.clear();
  };
  auto full = [&] { return out_.size() - outHead_ >= kOutLimit; };
  for (int i = 0; i < count && ok && !full(); ++i) {
    const auto* p = static_cast<const std::uint8_t*>(iov[i].iov_base);
    std::size_t left = iov[i].iov_len;
    if (left < kGather) {
      if (coalesce_.size() + left > kRecord) sealGathered();
      coalesce_.insert(coalesce_.end(), p, p + left);
      taken += left;
      continue;
    }
    sealGathered();
    while (left > 0 && ok && !full()) {
      const std::size_t n = std::min(left, kChunk);
      seal(p, n);
      taken += n;
      p += n;
      left -= n;
    }
  }
  sealGathered();
  return ok ? taken : 0;
}

std::size_t TlsStream::write(const void* data, std::size_t size) {
  iovec iov{const_cast<void*>(data), size};
  return write(&iov, 1);
}

TlsStream::Status TlsStream::flush() {
  if (failed_) return errno_ == EPIPE || errno_ == ECONNRESET ? Status::kClosed : Status::kFailed;
  while (outHead_ < out_.size()) {
    const ssize_t n =
        ::send(fd_, out_.data() + outHead_, out_.size() - outHead_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      outHead_ += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status::kWantWrite;
    errno_ = n < 0 ? errno : EPIPE;
    failed_ = true;
    if (errno_ == EPIPE || errno_ == ECONNRESET) {
      error_ = "the peer closed the connection";
      return Status::kClosed;
    }
    error_ = std::string("sending failed: ") + std::strerror(errno_);
    return Status::kFailed;
  }
  out_.clear();
  outHead_ = 0;
  return Status::kOk;
}

std::size_t TlsStream::read(void* data, std::size_t size, Status& status) {
  status = Status::kOk;
  if (kernelReceive_) {
    while (true) {
      const ssize_t n = ::recv(fd_, data, size, MSG_DONTWAIT);
      if (n > 0) return static_cast<std::size_t>(n);
      if (n == 0) {
        status = Status::kClosed;
        error_ = "the peer closed the connection";
        return 0;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        status = Status::kWantRead;
        return 0;
      }
      errno_ = errno;
      if (errno_ == ECONNRESET) {
        status = Status::kClosed;
        error_ = "the peer reset the connection";
      } else {
        // EIO: a record that is not data (an alert), or one that does not verify.
        status = Status::kFailed;
        error_ = std::string("TLS read failed: ") + std::strerror(errno_);
      }
      return 0;
    }
  }
  std::size_t got = 0;
  const int rc = SSL_read_ex(ssl_, data, size, &got);
  if (rc == 1) {
    readWanted_ = false;
    return got;
  }
  const int e = SSL_get_error(ssl_, rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    // What OpenSSL holds now is at most part of a record: only the socket can add to it.
    readWanted_ = true;
    status = Status::kWantRead;
    return 0;
  }
  status = fail(e, rc, "read");
  return 0;
}

bool TlsStream::readPending() const noexcept {
  return !kernelReceive_ && !readWanted_ && SSL_has_pending(ssl_) == 1;
}

TlsStream::Status TlsStream::writeAll(const void* data, std::size_t size,
                                      Clock::time_point deadline) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::size_t done = 0;
  while (done < size || outputPending()) {
    if (done < size) {
      done += write(p + done, size - done);
    }
    const Status status = flush();
    const bool blocked = status == Status::kWantWrite || (done < size && kernelSend_);
    if (status == Status::kClosed) return closedWhy();
    if (status != Status::kOk && status != Status::kWantWrite) return status;
    if (blocked && !waitFor(POLLOUT, deadline)) return Status::kTimeout;
  }
  return Status::kOk;
}

TlsStream::Status TlsStream::closedWhy() {
  // In TLS 1.3 a client ends its handshake before the server has judged its certificate: a
  // server that refuses it sends an alert and closes, and the client's next write finds the
  // connection closed. The alert is still in the socket: read it, for the server's reason.
  if (kernelReceive_) return Status::kClosed;
  std::uint8_t scratch[256];
  Status status = Status::kOk;
  read(scratch, sizeof scratch, status);
  return status == Status::kFailed ? Status::kFailed : Status::kClosed;
}

std::size_t TlsStream::readSome(void* data, std::size_t size, Clock::time_point deadline,
                                Status& status) {
  while (true) {
    const std::size_t n = read(data, size, status);
    // A record read may have made OpenSSL answer something (a key update).
    if (outputPending()) flush();
    if (n > 0) return n;
    if (status != Status::kWantRead) return 0;
    if (!waitFor(POLLIN, deadline)) {
      status = Status::kTimeout;
      return 0;
    }
  }
}

TlsStream::Status TlsStream::readAll(void* data, std::size_t size, Clock::time_point deadline) {
  auto* p = static_cast<std::uint8_t*>(data);
  std::size_t done = 0;
  Status status = Status::kOk;
  while (done < size) {
    const std::size_t n = readSome(p + done, size - done, deadline, status);
    if (n == 0) return status;
    done += n;
  }
  return Status::kOk;
}

const char* statusText(TlsStream::Status status) {
  switch (status) {
    case TlsStream::Status::kOk:
      return "ok";
    case TlsStream::Status::kWantRead:
      return "waiting to read";
    case TlsStream::Status::kWantWrite:
      return "waiting to write";
    case TlsStream::Status::kClosed:
      return "closed by the peer";
    case TlsStream::Status::kTimeout:
      return "timed out";
    case TlsStream::Status::kFailed:
      return "failed";
  }
  return "unknown";
}

}  // namespace collx::secure
