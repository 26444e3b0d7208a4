// Certificates for the TLS tests, made with OpenSSL in a directory of the test's: a CA, and
// certificates it signed (EC P-256, valid for 127.0.0.1, ::1 and localhost), as PEM files
// with the keys at mode 0600.
#pragma once

#include <string>

#include "collx/secure/tls.h"

namespace collx::test {

class TlsCerts {
 public:
  // Makes `dir` (if needed) and a CA in it: <dir>/<ca>.pem and <dir>/<ca>.key.
  explicit TlsCerts(std::string dir, std::string ca = "ca");

  // A certificate the CA signed: <dir>/<name>.pem and <dir>/<name>.key, with the CA file.
  secure::TlsFiles issue(const std::string& name) const;
  // The CA's own files.
  const std::string& caFile() const noexcept { return caPem_; }
  const std::string& dir() const noexcept { return dir_; }

 private:
  std::string dir_;
  std::string caPem_;
  std::string caKey_;
};

}  // namespace collx::test
