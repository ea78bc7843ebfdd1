// Test helper: one HTTP exchange over a plain TCP connection to a loopback
// "host:port": sends `request` as given (well-formed or not) and returns
// every byte answered until the server closes (10 s at most).
#ifndef QUILT_SRC_TESTING_RAW_HTTP_H_
#define QUILT_SRC_TESTING_RAW_HTTP_H_

#include <string>

namespace quilt::testing {

std::string RawHttpExchange(const std::string& address, const std::string& request);

}  // namespace quilt::testing

#endif  // QUILT_SRC_TESTING_RAW_HTTP_H_
