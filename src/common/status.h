// Status helpers used everywhere in Quilt: RETURN_IF_ERROR and
// ASSIGN_OR_RETURN (Debian's Abseil 20220623 has neither), plus small
// constructors that prefix context to an error.
//
// Errors are absl::Status values, never exceptions across module or thread
// boundaries. Codes are chosen by what the caller should do (see
// proto/quilt/v1/services.proto).
#ifndef QUILT_SRC_COMMON_STATUS_H_
#define QUILT_SRC_COMMON_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace quilt {

// Returns `status` with "context: " prepended to its message; OK stays OK.
inline absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace quilt

#define QUILT_STATUS_CONCAT_INNER_(a, b) a##b
#define QUILT_STATUS_CONCAT_(a, b) QUILT_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the current function if
// it is not OK.
#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status quilt_status_ = (expr);         \
    if (!quilt_status_.ok()) return quilt_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(T x, F());` or `ASSIGN_OR_RETURN(x, F());`: evaluates the
// absl::StatusOr `rexpr`; on error returns its status, else moves the value
// into `lhs`.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  QUILT_ASSIGN_OR_RETURN_IMPL_(QUILT_STATUS_CONCAT_(quilt_statusor_, __LINE__), lhs, rexpr)

#define QUILT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // QUILT_SRC_COMMON_STATUS_H_
