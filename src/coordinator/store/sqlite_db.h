// A thin RAII wrapper over one SQLite connection: open with WAL and full
// durability, run statements with bound parameters, iterate rows. Every
// failing SQLite call becomes a Status carrying the SQL and SQLite's message.
// Not thread-safe: the owner serializes access.
#ifndef QUILT_SRC_COORDINATOR_STORE_SQLITE_DB_H_
#define QUILT_SRC_COORDINATOR_STORE_SQLITE_DB_H_

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace quilt {

// A bound parameter: integer, real, text or blob (std::vector<uint8_t> /
// a string tagged as Blob).
struct Blob {
  std::string bytes;
};
using SqlValue = std::variant<int64_t, double, std::string, Blob>;

// One result row; accessors are valid only inside the row callback.
class SqlRow {
 public:
  explicit SqlRow(sqlite3_stmt* stmt) : stmt_(stmt) {}
  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Real(int col) const { return sqlite3_column_double(stmt_, col); }
  std::string Text(int col) const;
  std::string Bytes(int col) const;

 private:
  sqlite3_stmt* stmt_;
};

class SqliteDb {
 public:
  // Opens (creating if needed) the database file. Errors: UNAVAILABLE when
  // the file cannot be opened or is locked, DATA_LOSS when it is corrupt.
  static absl::StatusOr<std::unique_ptr<SqliteDb>> Open(const std::string& path);
  ~SqliteDb();

  // Runs one or more statements without parameters (schema, pragmas).
  absl::Status Exec(const std::string& sql);
  // Runs one statement with parameters; calls `on_row` for each result row.
  absl::Status Run(const std::string& sql, const std::vector<SqlValue>& params,
                   const std::function<void(const SqlRow&)>& on_row = nullptr);
  // Runs `body` inside BEGIN IMMEDIATE / COMMIT; rolls back on error.
  absl::Status Transaction(const std::function<absl::Status()>& body);

  const std::string& path() const { return path_; }

 private:
  SqliteDb(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  absl::Status Error(int rc, const std::string& what) const;

  sqlite3* db_;
  std::string path_;
};

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_STORE_SQLITE_DB_H_
