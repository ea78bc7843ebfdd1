#include "src/rpc/pem_check.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace quilt::rpc {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

// Null for input beyond what a BIO's int length holds (no PEM file is).
Bio ReadOnly(const std::string& pem) {
  if (pem.size() > (size_t{1} << 30)) return nullptr;
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Never asks for a passphrase (a daemon has no terminal): an encrypted key
// fails to load.
int NoPassphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) { return -1; }

// The next certificate of `bio`, or null at the end or on a parse error
// (the error queue cleared either way).
Cert NextCertificate(BIO* bio) {
  Cert cert(PEM_read_bio_X509(bio, nullptr, NoPassphrase, nullptr));
  ERR_clear_error();
  return cert;
}

constexpr char kCertificateBegin[] = "-----BEGIN CERTIFICATE-----";

std::string TimeText(const ASN1_TIME* t) {
  Bio out(BIO_new(BIO_s_mem()));
  if (out == nullptr || ASN1_TIME_print(out.get(), t) != 1) return "an unreadable date";
  char* data = nullptr;
  const long n = BIO_get_mem_data(out.get(), &data);
  return std::string(data, n > 0 ? static_cast<size_t>(n) : 0);
}

}  // namespace

absl::Status CheckCertificateAndKey(const std::string& cert_pem, const std::string& cert_file,
                                    const std::string& key_pem, const std::string& key_file) {
  Bio cert_bio = ReadOnly(cert_pem);
  Cert cert = cert_bio != nullptr ? NextCertificate(cert_bio.get()) : nullptr;
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate ", cert_file, " holds no certificate that parses"));
  }
  // (0: a date that does not parse.)
  if (X509_cmp_current_time(X509_get0_notBefore(cert.get())) == 0 ||
      X509_cmp_current_time(X509_get0_notAfter(cert.get())) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the certificate ", cert_file, " has a validity date that does not parse"));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(cert.get())) > 0) {
    return absl::InvalidArgumentError(absl::StrCat("the certificate ", cert_file,
                                                   " is not valid before ",
                                                   TimeText(X509_get0_notBefore(cert.get()))));
  }
  if (X509_cmp_current_time(X509_get0_notAfter(cert.get())) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("the certificate ", cert_file, " expired on ",
                                                   TimeText(X509_get0_notAfter(cert.get()))));
  }
  if (absl::StrContains(key_pem, "ENCRYPTED")) {
    return absl::InvalidArgumentError(
        absl::StrCat("the key ", key_file,
                     " is protected by a passphrase, which gRPC cannot use: store it unencrypted "
                     "(e.g. openssl pkey -in KEY -out PLAIN) and readable by this user only"));
  }
  Bio key_bio = ReadOnly(key_pem);
  Key key(key_bio != nullptr
              ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr)
              : nullptr);
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the key ", key_file, " holds no private key that parses"));
  }
  const int match = X509_check_private_key(cert.get(), key.get());
  ERR_clear_error();
  if (match != 1) {
    return absl::InvalidArgumentError(absl::StrCat("the key ", key_file,
                                                   " is not the key of the certificate ", cert_file,
                                                   " (another certificate's?)"));
  }
  return absl::OkStatus();
}

absl::Status CheckCaCertificates(const std::string& pem, const std::string& file,
                                 const std::string& what) {
  Bio bio = ReadOnly(pem);
  if (bio == nullptr || NextCertificate(bio.get()) == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " ", file, " holds no certificate that parses"));
  }
  // Each certificate block parses (PEM_read_bio_X509 skips other blocks).
  size_t parsed = 1;
  while (NextCertificate(bio.get()) != nullptr) ++parsed;
  size_t blocks = 0;
  for (size_t at = pem.find(kCertificateBegin); at != std::string::npos;
       at = pem.find(kCertificateBegin, at + 1)) {
    ++blocks;
  }
  if (parsed < blocks) {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " ", file, " holds ", blocks,
                                                   " certificates, of which only the first ",
                                                   parsed, " parse"));
  }
  return absl::OkStatus();
}

}  // namespace quilt::rpc
