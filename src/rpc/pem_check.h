// Checks of TLS material before a server or client uses it, so that a
// wrong file is named when the daemon or command starts rather than seen
// later as a failed handshake: a certificate parses and is within its
// validity dates; a private key parses, is not passphrase-protected (gRPC
// cannot use such a key) and belongs to its certificate; a CA file holds
// at least one certificate. With OpenSSL's libcrypto.
#ifndef QUILT_SRC_RPC_PEM_CHECK_H_
#define QUILT_SRC_RPC_PEM_CHECK_H_

#include <string>

#include "absl/status/status.h"

namespace quilt::rpc {

// The first certificate of `cert_pem` (read from `cert_file`) and the key
// `key_pem` (from `key_file`) as a pair one side of TLS presents. Errors:
// INVALID_ARGUMENT naming the file and the problem (no certificate, not
// yet valid or expired with the date, an unreadable or encrypted key, a
// key of another certificate).
absl::Status CheckCertificateAndKey(const std::string& cert_pem, const std::string& cert_file,
                                    const std::string& key_pem, const std::string& key_file);

// `pem` (from `file`, the `what` of the message: "CA file") holds
// certificates that parse, at least one. Errors: INVALID_ARGUMENT naming
// the file.
absl::Status CheckCaCertificates(const std::string& pem, const std::string& file,
                                 const std::string& what);

}  // namespace quilt::rpc

#endif  // QUILT_SRC_RPC_PEM_CHECK_H_
