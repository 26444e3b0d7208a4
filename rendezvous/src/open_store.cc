#include <cctype>
#include <charconv>

#include "collx/rendezvous/file_store.h"
#include "collx/rendezvous/hash_store.h"
#include "collx/rendezvous/store.h"
#include "collx/rendezvous/tcp_store.h"
#include "collx/secure/tls.h"
#include "collx_rendezvous_config.h"
#if COLLX_HAVE_REDIS
#include "collx/rendezvous/redis_store.h"
#endif

namespace collx::rendezvous {

namespace {

// Text from the URL as an error shows it: control characters as \xNN, and at most `limit`
// bytes of it.
std::string shown(std::string_view text, std::size_t limit = 200) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > limit) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

[[noreturn]] void badUrl(const std::string& url, const std::string& why) {
  throw InvalidArgument(Where{-1, "store URL", -1},
                        "'" + shown(hidePassword(url)) + "': " + why +
                            " (expected tcp://host:port, file:///path, "
                            "redis[s]://[[user]:password@]host:port[/db])");
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percentDecode(const std::string& url, std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    const int hi = i + 2 < text.size() ? hexValue(text[i + 1]) : -1;
    const int lo = hi >= 0 ? hexValue(text[i + 2]) : -1;
    if (lo < 0) badUrl(url, "a '%' in the user or password is not followed by two hex digits");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

std::string percentEncode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

bool isHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

// A host name or IPv4 address: at most 253 bytes of letters, digits, '.', '-' and '_'. A
// bracketed IPv6 literal: hex digits, ':' and '.' (an embedded IPv4 address), a zone after
// '%'.
void checkHost(const std::string& url, std::string_view host, bool bracketed) {
  if (host.size() > kMaxStoreHostBytes) {
    badUrl(url, "the host has " + std::to_string(host.size()) + " bytes, more than " +
                    std::to_string(kMaxStoreHostBytes));
  }
  if (bracketed) {
    const std::size_t zone = host.find('%');
    for (std::size_t i = 0; i < host.size(); ++i) {
      const char c = host[i];
      const bool ok = i > zone ? isHostChar(c)
                               : (std::isxdigit(static_cast<unsigned char>(c)) != 0 || c == ':' ||
                                  c == '.' || i == zone);
      if (!ok) badUrl(url, "'" + shown(host) + "' in brackets is not an IPv6 address");
    }
    if (host.substr(0, zone).find(':') == std::string_view::npos || zone + 1 == host.size()) {
      badUrl(url, "'" + shown(host) + "' in brackets is not an IPv6 address");
    }
    return;
  }
  for (char c : host) {
    if (!isHostChar(c)) {
      badUrl(url, "the host '" + shown(host) +
                      "' has a character other than letters, digits, '.', '-' and '_'");
    }
  }
}

// "host:port" or "[v6]:port" (port required when `defaultPort` is 0).
void parseHostPort(const std::string& url, std::string_view text, std::uint16_t defaultPort,
                   StoreUrl& out) {
  std::string_view portText;
  if (!text.empty() && text.front() == '[') {
    std::size_t close = text.find(']');
    if (close == std::string_view::npos) badUrl(url, "unterminated '[' in the host");
    out.host = std::string(text.substr(1, close - 1));
    if (!out.host.empty()) checkHost(url, out.host, true);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') badUrl(url, "expected ':' after ']'");
      portText = rest.substr(1);
    }
  } else {
    std::size_t colon = text.rfind(':');
    if (colon != std::string_view::npos && text.find(':') != colon) {
      badUrl(url, "IPv6 addresses need brackets, e.g. tcp://[::1]:29500");
    }
    out.host = std::string(text.substr(0, colon));
    checkHost(url, out.host, false);
    if (colon != std::string_view::npos) portText = text.substr(colon + 1);
  }
  if (out.host.empty()) badUrl(url, "the host is empty");
  if (portText.empty()) {
    if (defaultPort == 0) badUrl(url, "the port is missing");
    out.port = defaultPort;
    return;
  }
  unsigned value = 0;
  auto [ptr, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), value);
  if (ec != std::errc() || ptr != portText.data() + portText.size() || value == 0 ||
      value > 65535) {
    badUrl(url, "the port '" + shown(portText, 20) + "' is not in 1..65535");
  }
  out.port = static_cast<std::uint16_t>(value);
}

}  // namespace

StoreUrl StoreUrl::parse(const std::string& url) {
  StoreUrl out;
  if (url.size() > kMaxStoreUrlBytes) {
    badUrl(url, "the URL has " + std::to_string(url.size()) + " bytes, more than " +
                    std::to_string(kMaxStoreUrlBytes));
  }
  for (char c : url) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      badUrl(url, "a control character in the URL");
    }
  }
  std::size_t sep = url.find("://");
  if (sep == std::string::npos) badUrl(url, "no scheme");
  out.scheme = url.substr(0, sep);
  std::string_view rest = std::string_view(url).substr(sep + 3);
  if (out.scheme == "tcp") {
    if (rest.find('/') != std::string_view::npos) badUrl(url, "a tcp store URL has no path");
    parseHostPort(url, rest, 0, out);
  } else if (out.scheme == "redis" || out.scheme == "rediss") {
    std::size_t slash = rest.find('/');
    std::string_view authority = rest.substr(0, slash);
    if (std::size_t at = authority.rfind('@'); at != std::string_view::npos) {
      std::string_view userinfo = authority.substr(0, at);
      authority = authority.substr(at + 1);
      std::size_t colon = userinfo.find(':');
      if (colon == std::string_view::npos) {
        badUrl(url, "the user information has no password (redis://user:password@host)");
      }
      out.user = percentDecode(url, userinfo.substr(0, colon));
      out.password = percentDecode(url, userinfo.substr(colon + 1));
      if (out.password.empty()) badUrl(url, "the password is empty");
    }
    parseHostPort(url, authority, 6379, out);
    if (slash != std::string_view::npos) {
      std::string_view db = rest.substr(slash + 1);
      auto [ptr, ec] = std::from_chars(db.data(), db.data() + db.size(), out.db);
      if (db.empty() || ec != std::errc() || ptr != db.data() + db.size() || out.db < 0) {
        badUrl(url, "the database '" + shown(db, 20) + "' is not a number");
      }
    }
  } else if (out.scheme == "file") {
    if (rest.empty() || rest.front() != '/') {
      badUrl(url, "a file store needs an absolute path: file:///path/to/dir");
    }
    out.path = std::string(rest);
  } else if (out.scheme == "hash") {
    if (!rest.empty()) badUrl(url, "hash:// takes nothing after the scheme");
  } else {
    badUrl(url, "unknown scheme '" + shown(out.scheme, 20) + "'");
  }
  return out;
}

std::string StoreUrl::str() const {
  if (scheme == "tcp") return tcpUrl(host, port);
  if (scheme == "redis" || scheme == "rediss") {
    std::string base = tcpUrl(host, port).replace(0, 3, scheme);
    if (!password.empty()) {
      base.insert(scheme.size() + 3, percentEncode(user) + ":" + percentEncode(password) + "@");
    }
    return db == 0 ? base : base + "/" + std::to_string(db);
  }
  if (scheme == "file") return "file://" + path;
  return scheme + "://";
}

std::string hidePassword(std::string_view url) {
  std::string out(url);
  const std::size_t start = out.find("://");
  if (start == std::string::npos) return out;
  const std::size_t end = out.find_first_of("/?#", start + 3);
  const std::size_t at = out.rfind('@', end == std::string::npos ? std::string::npos : end);
  if (at == std::string::npos || at < start + 3) return out;
  const std::size_t colon = out.find(':', start + 3);
  if (colon == std::string::npos || colon > at) return out;
  return out.replace(colon + 1, at - colon - 1, "***");
}

std::unique_ptr<Store> openStore(const std::string& url, const StoreOptions& options) {
  StoreUrl parsed = StoreUrl::parse(url);
  if (parsed.scheme == "tcp") return std::make_unique<TcpStore>(parsed.host, parsed.port, options);
  if (parsed.scheme == "file") return std::make_unique<FileStore>(parsed.path, options);
  if (parsed.scheme == "hash") return std::make_unique<HashStore>(options);
#if COLLX_HAVE_REDIS
  // rediss://: TLS to the server, its certificate checked against COLLX_TLS_CA (else the
  // system's CAs) and for its host name.
  std::shared_ptr<const secure::TlsContext> tls;
  if (parsed.scheme == "rediss") {
    try {
      tls = secure::TlsContext::forService(Config::process());
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(Where{options.rank, "store URL", -1},
                            "'" + hidePassword(url) + "': " + e.detail());
    }
  }
  return std::make_unique<RedisStore>(parsed.host, parsed.port, parsed.db, options,
                                      RedisStore::Login{parsed.user, parsed.password}, tls);
#else
  throw Unsupported(Where{options.rank, "store URL", -1},
                    "'" + url +
                        "': this build has no Redis store (configure with "
                        "COLLX_WITH_REDIS=ON and libhiredis-dev installed)");
#endif
}

}  // namespace collx::rendezvous
