#include "util/tls_certs.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>

namespace collx::test {

namespace {

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertFree {
  void operator()(X509* x) const { X509_free(x); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

[[noreturn]] void die(const std::string& what) {
  char buffer[256] = {};
  ERR_error_string_n(ERR_get_error(), buffer, sizeof buffer);
  throw std::runtime_error("tls_certs: " + what + ": " + buffer);
}

void addExtension(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) die(std::string("extension ") + value);
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

// A certificate for `key`, named `cn`, signed by `issuerKey` (issuer nullptr: self-signed).
Cert makeCert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuerKey, bool ca) {
  static std::atomic<long> serial{1};
  Cert cert(X509_new());
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial++);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 30L * 24 * 3600);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert.get(), issuer ? X509_get_subject_name(issuer) : name);
  X509* signer = issuer ? issuer : cert.get();
  if (ca) {
    addExtension(cert.get(), signer, NID_basic_constraints, "critical,CA:TRUE");
    addExtension(cert.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    addExtension(cert.get(), signer, NID_basic_constraints, "CA:FALSE");
    addExtension(cert.get(), signer, NID_subject_alt_name, "IP:127.0.0.1,IP:::1,DNS:localhost");
  }
  if (X509_sign(cert.get(), issuerKey, EVP_sha256()) == 0) die("sign");
  return cert;
}

void writePem(const std::string& path, X509* cert) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) die("open " + path);
  PEM_write_X509(f, cert);
  std::fclose(f);
}

void writeKey(const std::string& path, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) die("open " + path);
  ::chmod(path.c_str(), 0600);
  PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
}

Key readKey(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) die("open " + path);
  Key key(PEM_read_PrivateKey(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  if (!key) die("read " + path);
  return key;
}

Cert readCert(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) die("open " + path);
  Cert cert(PEM_read_X509(f, nullptr, nullptr, nullptr));
  std::fclose(f);
  if (!cert) die("read " + path);
  return cert;
}

}  // namespace

TlsCerts::TlsCerts(std::string dir, std::string ca)
    : dir_(std::move(dir)), caPem_(dir_ + "/" + ca + ".pem"), caKey_(dir_ + "/" + ca + ".key") {
  std::filesystem::create_directories(dir_);
  Key key(EVP_EC_gen("P-256"));
  if (!key) die("EC key");
  Cert cert = makeCert(key.get(), "collx test " + ca, nullptr, key.get(), true);
  writePem(caPem_, cert.get());
  writeKey(caKey_, key.get());
}

secure::TlsFiles TlsCerts::issue(const std::string& name) const {
  Key caKey = readKey(caKey_);
  Cert caCert = readCert(caPem_);
  Key key(EVP_EC_gen("P-256"));
  if (!key) die("EC key");
  Cert cert = makeCert(key.get(), "collx test " + name, caCert.get(), caKey.get(), false);
  secure::TlsFiles files;
  files.cert = dir_ + "/" + name + ".pem";
  files.key = dir_ + "/" + name + ".key";
  files.ca = caPem_;
  writePem(files.cert, cert.get());
  writeKey(files.key, key.get());
  return files;
}

}  // namespace collx::test
