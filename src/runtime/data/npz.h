// NumPy .npz archives: named arrays as .npy entries of a ZIP file, what
// numpy.savez writes and numpy.load reads. Writing stores the entries
// uncompressed (f32 and i64 arrays, a name each, ".npy" appended);
// reading takes stored entries (numpy.savez's; numpy.savez_compressed's
// deflated ones are refused, named) and checks each entry's CRC-32.
// No ZIP64: an archive stays under 4 GiB and 65535 entries.
#ifndef QUILT_SRC_RUNTIME_DATA_NPZ_H_
#define QUILT_SRC_RUNTIME_DATA_NPZ_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "src/graph/tensor.h"

namespace quilt {

// The CRC-32 of ZIP (and zlib, PNG): polynomial 0xEDB88320, reflected;
// `crc` continues an earlier call's result.
uint32_t Crc32(const void* data, size_t size, uint32_t crc = 0);

// The archive's bytes. Errors: INVALID_ARGUMENT (an empty or repeated
// name, a type .npy is not written in), RESOURCE_EXHAUSTED (4 GiB or
// 65535 entries and more).
absl::StatusOr<std::string> NpzArchive(const std::vector<std::pair<std::string, Tensor>>& arrays);

// The arrays of an archive by name (".npy" taken off). `name` is used in
// errors. Errors: INVALID_ARGUMENT (not a ZIP file, a compressed or
// encrypted entry, an entry that is not a supported .npy, a CRC mismatch:
// each naming the entry).
absl::StatusOr<std::map<std::string, Tensor>> ParseNpz(const std::string& bytes,
                                                       const std::string& name);

}  // namespace quilt

#endif  // QUILT_SRC_RUNTIME_DATA_NPZ_H_
