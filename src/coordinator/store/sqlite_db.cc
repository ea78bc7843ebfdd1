#include "src/coordinator/store/sqlite_db.h"

#include "absl/strings/str_cat.h"
#include "src/common/status.h"

namespace quilt {

std::string SqlRow::Text(int col) const {
  const unsigned char* p = sqlite3_column_text(stmt_, col);
  return p == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(p));
}

std::string SqlRow::Bytes(int col) const {
  const void* p = sqlite3_column_blob(stmt_, col);
  int n = sqlite3_column_bytes(stmt_, col);
  return p == nullptr ? std::string() : std::string(static_cast<const char*>(p), n);
}

absl::Status SqliteDb::Error(int rc, const std::string& what) const {
  std::string msg = absl::StrCat("sqlite (", path_, "): ", what, ": ",
                                 db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc));
  int primary = rc & 0xff;
  if (primary == SQLITE_CORRUPT || primary == SQLITE_NOTADB) return absl::DataLossError(msg);
  // (Not UNAVAILABLE, which callers read as "the coordinator is
  // unreachable", except for a lock that a retry outlasts.)
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) return absl::UnavailableError(msg);
  if (primary == SQLITE_FULL) return absl::ResourceExhaustedError(msg);
  if (primary == SQLITE_READONLY || primary == SQLITE_CANTOPEN) {
    return absl::FailedPreconditionError(msg);
  }
  return absl::InternalError(msg);
}

absl::StatusOr<std::unique_ptr<SqliteDb>> SqliteDb::Open(const std::string& path) {
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  std::unique_ptr<SqliteDb> db(new SqliteDb(raw, path));
  if (rc != SQLITE_OK) return db->Error(rc, "open");
  if (sqlite3_db_readonly(raw, "main") == 1) {
    // (SQLite falls back to reading a file it may not write.)
    return absl::FailedPreconditionError(
        absl::StrCat("sqlite (", path, "): the database file is not writable by this process"));
  }
  sqlite3_busy_timeout(raw, 5000);
  // WAL: readers never block the writer; synchronous=FULL: a committed
  // transaction survives power loss. The log is cut back to 4 MiB at each
  // checkpoint (a large model's insert, refused or deleted, would
  // otherwise hold its size on disk until the coordinator stops).
  RETURN_IF_ERROR(db->Exec(
      "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA journal_size_limit=4194304;"));
  // Fails with DATA_LOSS on a corrupt file rather than at first use.
  RETURN_IF_ERROR(db->Exec("PRAGMA quick_check;"));
  return db;
}

SqliteDb::~SqliteDb() {
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

absl::Status SqliteDb::Exec(const std::string& sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (err != nullptr) sqlite3_free(err);
  if (rc != SQLITE_OK) return Error(rc, sql);
  return absl::OkStatus();
}

absl::Status SqliteDb::Run(const std::string& sql, const std::vector<SqlValue>& params,
                           const std::function<void(const SqlRow&)>& on_row) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "prepare " + sql);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> guard(stmt, sqlite3_finalize);
  for (size_t i = 0; i < params.size(); ++i) {
    int idx = static_cast<int>(i) + 1;
    const SqlValue& v = params[i];
    if (const auto* n = std::get_if<int64_t>(&v)) {
      rc = sqlite3_bind_int64(stmt, idx, *n);
    } else if (const auto* d = std::get_if<double>(&v)) {
      rc = sqlite3_bind_double(stmt, idx, *d);
    } else if (const auto* s = std::get_if<std::string>(&v)) {
      rc = sqlite3_bind_text(stmt, idx, s->data(), static_cast<int>(s->size()), SQLITE_TRANSIENT);
    } else {
      const Blob& b = std::get<Blob>(v);
      rc = sqlite3_bind_blob(stmt, idx, b.bytes.data(), static_cast<int>(b.bytes.size()),
                             SQLITE_TRANSIENT);
    }
    if (rc != SQLITE_OK) return Error(rc, "bind " + sql);
  }
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    if (on_row) on_row(SqlRow(stmt));
  }
  if (rc != SQLITE_DONE) return Error(rc, sql);
  return absl::OkStatus();
}

absl::Status SqliteDb::Transaction(const std::function<absl::Status()>& body) {
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  absl::Status s = body();
  if (s.ok()) s = Exec("COMMIT");
  if (!s.ok()) {
    Exec("ROLLBACK").IgnoreError();
    // What the failed transaction wrote to the log (a large model's pages,
    // on a full disk) is given back at once.
    Exec("PRAGMA wal_checkpoint(TRUNCATE);").IgnoreError();
  }
  return s;
}

}  // namespace quilt
