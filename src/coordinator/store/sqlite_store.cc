#include "src/coordinator/store/sqlite_store.h"

#include <sys/statvfs.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "absl/strings/str_cat.h"
#include "src/common/logging.h"
#include "src/common/status.h"
#include "src/common/units.h"

namespace quilt {
namespace {

constexpr int64_t kSchemaVersion = 5;

std::string PackDoubles(const std::vector<double>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
}

// A row's record parsed and appended to `out`. One that does not parse is
// left out (and in the database, untouched) with an error naming it
// (`what`, then `left_out` on what becomes of it): one damaged record does
// not keep the coordinator down.
template <typename Proto>
void AppendParsed(const std::string& bytes, const std::string& what, const char* left_out,
                  std::vector<Proto>* out) {
  Proto record;
  if (record.ParseFromString(bytes)) {
    out->push_back(std::move(record));
    return;
  }
  QLOG_ERROR("{} has a corrupt record: left out{}", what, left_out);
}

// Every job record, oldest first. A record that does not parse is left
// out (and in the database, untouched) with an error naming it: one
// damaged job does not keep the coordinator and every other job down.
absl::StatusOr<std::vector<quilt::v1::JobRecord>> ReadJobRecords(SqliteDb* db) {
  std::vector<quilt::v1::JobRecord> jobs;
  RETURN_IF_ERROR(
      db->Run("SELECT seq, job_id, record FROM jobs ORDER BY seq", {}, [&](const SqlRow& r) {
        AppendParsed(r.Bytes(2),
                     absl::StrCat("job ", r.Text(1), " (row ", r.Int(0), " of table jobs)"),
                     ", and kept in the database as it is", &jobs);
      }));
  return jobs;
}

// A migration that moves a part of every job record to a table of its own:
// `move_out` writes it there and clears it from the record.
absl::Status MoveOutOfJobRecords(
    SqliteDb* db, const std::function<absl::Status(quilt::v1::JobRecord*)>& move_out) {
  ASSIGN_OR_RETURN(std::vector<quilt::v1::JobRecord> records, ReadJobRecords(db));
  for (quilt::v1::JobRecord& j : records) {
    RETURN_IF_ERROR(move_out(&j));
    RETURN_IF_ERROR(db->Run("UPDATE jobs SET record = ? WHERE job_id = ?",
                            {Blob{j.SerializeAsString()}, j.status().job_id()}));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path));
  std::unique_ptr<SqliteStore> store(new SqliteStore(std::move(db)));
  RETURN_IF_ERROR(store->Migrate());
  return store;
}

absl::Status SqliteStore::Migrate() {
  absl::MutexLock lock(&mu_);
  int64_t version = 0;
  RETURN_IF_ERROR(
      db_->Run("PRAGMA user_version", {}, [&](const SqlRow& r) { version = r.Int(0); }));
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("state database ", db_->path(), " has schema version ", version,
                     "; this coordinator understands up to ", kSchemaVersion,
                     " (was it written by a newer Quilt?)"));
  }
  if (version < 1) {
    RETURN_IF_ERROR(db_->Transaction([&]() -> absl::Status {
      RETURN_IF_ERROR(
          db_->Exec("CREATE TABLE IF NOT EXISTS nodes ("
                    "  node_id TEXT PRIMARY KEY,"
                    "  record BLOB NOT NULL);"
                    "CREATE TABLE IF NOT EXISTS events ("
                    "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
                    "  record BLOB NOT NULL);"
                    "PRAGMA user_version = 1;"));
      return absl::OkStatus();
    }));
  }
  if (version < 2) {
    RETURN_IF_ERROR(db_->Transaction([&]() -> absl::Status {
      return db_->Exec(
          "CREATE TABLE IF NOT EXISTS jobs ("
          "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
          "  job_id TEXT UNIQUE NOT NULL,"
          "  record BLOB NOT NULL);"
          "PRAGMA user_version = 2;");
    }));
  }
  if (version < 3) {
    // Models move out of the job records (version 2 kept them inside).
    RETURN_IF_ERROR(db_->Transaction([&]() -> absl::Status {
      RETURN_IF_ERROR(
          db_->Exec("CREATE TABLE IF NOT EXISTS job_models ("
                    "  job_id TEXT PRIMARY KEY,"
                    "  onnx BLOB NOT NULL,"
                    "  program BLOB NOT NULL);"));
      RETURN_IF_ERROR(MoveOutOfJobRecords(db_.get(), [&](quilt::v1::JobRecord* j) {
        std::string onnx = j->spec().onnx();
        std::string program = j->program();
        j->clear_program();
        if (j->spec().has_onnx()) j->mutable_spec()->set_onnx("");
        return db_->Run(
            "INSERT OR REPLACE INTO job_models (job_id, onnx, program) VALUES (?, ?, ?)",
            {j->status().job_id(), Blob{std::move(onnx)}, Blob{std::move(program)}});
      }));
      return db_->Exec("PRAGMA user_version = 3;");
    }));
  }
  if (version < 4) {
    // Losses move out of the job records into chunks appended as they come.
    RETURN_IF_ERROR(db_->Transaction([&]() -> absl::Status {
      RETURN_IF_ERROR(
          db_->Exec("CREATE TABLE IF NOT EXISTS job_losses ("
                    "  job_id TEXT NOT NULL,"
                    "  first_step INTEGER NOT NULL,"
                    "  losses BLOB NOT NULL,"
                    "  PRIMARY KEY (job_id, first_step));"));
      RETURN_IF_ERROR(MoveOutOfJobRecords(db_.get(), [&](quilt::v1::JobRecord* j) {
        if (j->losses_size() == 0) return absl::OkStatus();
        const std::vector<double> losses(j->losses().begin(), j->losses().end());
        j->clear_losses();
        return db_->Run(
            "INSERT OR REPLACE INTO job_losses (job_id, first_step, losses) VALUES (?, 1, ?)",
            {j->status().job_id(), Blob{PackDoubles(losses)}});
      }));
      return db_->Exec("PRAGMA user_version = 4;");
    }));
  }
  if (version < 5) {
    // The weights a job starts from (JobSpec.initial_weights), kept with
    // its model.
    RETURN_IF_ERROR(db_->Transaction([&]() -> absl::Status {
      return db_->Exec(
          "ALTER TABLE job_models ADD COLUMN weights BLOB NOT NULL DEFAULT x'';"
          "PRAGMA user_version = 5;");
    }));
  }
  // Space freed by deleted jobs (their models can be large) is given back
  // to the file system: incremental auto-vacuum, set once (a VACUUM).
  int64_t auto_vacuum = 0;
  RETURN_IF_ERROR(
      db_->Run("PRAGMA auto_vacuum", {}, [&](const SqlRow& r) { auto_vacuum = r.Int(0); }));
  if (auto_vacuum != 2) RETURN_IF_ERROR(db_->Exec("PRAGMA auto_vacuum = INCREMENTAL; VACUUM;"));
  return absl::OkStatus();
}

absl::Status SqliteStore::PutNode(const quilt::v1::NodeStatus& node) {
  absl::MutexLock lock(&mu_);
  return db_->Run("INSERT OR REPLACE INTO nodes (node_id, record) VALUES (?, ?)",
                  {node.info().node_id(), Blob{node.SerializeAsString()}});
}

absl::Status SqliteStore::DeleteNode(const std::string& node_id) {
  absl::MutexLock lock(&mu_);
  return db_->Run("DELETE FROM nodes WHERE node_id = ?", {node_id});
}

// (A node record that does not parse is left out, as a job's is: the
// node's worker registers it again, over the record, when it next
// connects; one damaged record does not keep the coordinator down.)
absl::StatusOr<std::vector<quilt::v1::NodeStatus>> SqliteStore::ListNodes() {
  absl::MutexLock lock(&mu_);
  std::vector<quilt::v1::NodeStatus> nodes;
  RETURN_IF_ERROR(
      db_->Run("SELECT node_id, record FROM nodes ORDER BY node_id", {}, [&](const SqlRow& r) {
        AppendParsed(r.Bytes(1), "node " + r.Text(0),
                     " until its worker registers it again, and kept in the database as it is "
                     "until then",
                     &nodes);
      }));
  return nodes;
}

absl::Status SqliteStore::AppendEvent(const quilt::v1::ClusterEvent& event) {
  absl::MutexLock lock(&mu_);
  return db_->Transaction([&]() -> absl::Status {
    RETURN_IF_ERROR(
        db_->Run("INSERT INTO events (record) VALUES (?)", {Blob{event.SerializeAsString()}}));
    return db_->Run("DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - ?",
                    {static_cast<int64_t>(kMaxEvents)});
  });
}

absl::StatusOr<std::vector<quilt::v1::ClusterEvent>> SqliteStore::RecentEvents(int max) {
  absl::MutexLock lock(&mu_);
  std::vector<quilt::v1::ClusterEvent> events;
  // (An event that does not parse is left out of the history.)
  RETURN_IF_ERROR(db_->Run("SELECT id, record FROM events ORDER BY id DESC LIMIT ?",
                           {static_cast<int64_t>(max)}, [&](const SqlRow& r) {
                             AppendParsed(r.Bytes(1), absl::StrCat("event ", r.Int(0)), "",
                                          &events);
                           }));
  return events;
}

absl::Status SqliteStore::AddJob(const quilt::v1::JobRecord& job, const JobModel& model) {
  absl::MutexLock lock(&mu_);
  // Written to the log, then into the file: refused up front when the
  // disk cannot take both (a failed insert would fill it on the way).
  const int64_t bytes =
      static_cast<int64_t>(model.onnx.size() + model.program.size() + model.weights.size());
  const std::string dir = std::filesystem::path(db_->path()).parent_path().string();
  struct statvfs fs;
  if (statvfs(dir.empty() ? "." : dir.c_str(), &fs) == 0) {
    const int64_t free = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
    const int64_t need = 2 * bytes + (1 << 20);
    if (free < need) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the coordinator's state directory ", dir, " has ", HumanBytes(free),
                       " free; storing this job's model and program (", HumanBytes(bytes),
                       ") needs about ", HumanBytes(need)));
    }
  }
  return db_->Transaction([&]() -> absl::Status {
    RETURN_IF_ERROR(db_->Run("INSERT INTO jobs (job_id, record) VALUES (?, ?)",
                             {job.status().job_id(), Blob{job.SerializeAsString()}}));
    return db_->Run(
        "INSERT INTO job_models (job_id, onnx, program, weights) VALUES (?, ?, ?, ?)",
        {job.status().job_id(), Blob{model.onnx}, Blob{model.program}, Blob{model.weights}});
  });
}

absl::Status SqliteStore::StartJob(const quilt::v1::JobRecord& job, const std::string& program) {
  absl::MutexLock lock(&mu_);
  const std::string& id = job.status().job_id();
  return db_->Transaction([&]() -> absl::Status {
    bool found = false;
    RETURN_IF_ERROR(db_->Run("SELECT 1 FROM job_models WHERE job_id = ?", {id},
                             [&](const SqlRow&) { found = true; }));
    if (!found) return absl::NotFoundError("no job '" + id + "' stored");
    RETURN_IF_ERROR(db_->Run("UPDATE jobs SET record = ? WHERE job_id = ?",
                             {Blob{job.SerializeAsString()}, id}));
    return db_->Run("UPDATE job_models SET program = ? WHERE job_id = ?", {Blob{program}, id});
  });
}

absl::StatusOr<CoordinatorStore::JobModel> SqliteStore::GetJobModel(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  JobModel model;
  bool found = false;
  RETURN_IF_ERROR(db_->Run("SELECT onnx, program, weights FROM job_models WHERE job_id = ?",
                           {job_id}, [&](const SqlRow& r) {
                             model.onnx = r.Bytes(0);
                             model.program = r.Bytes(1);
                             model.weights = r.Bytes(2);
                             found = true;
                           }));
  if (!found) return absl::NotFoundError("no model stored for job '" + job_id + "'");
  return model;
}

absl::Status SqliteStore::DeleteJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(db_->Transaction([&]() -> absl::Status {
    RETURN_IF_ERROR(db_->Run("DELETE FROM jobs WHERE job_id = ?", {job_id}));
    RETURN_IF_ERROR(db_->Run("DELETE FROM job_losses WHERE job_id = ?", {job_id}));
    return db_->Run("DELETE FROM job_models WHERE job_id = ?", {job_id});
  }));
  // The freed pages leave the file, and the log is cut back: the space is
  // free when delete returns. (The delete is committed: a failure here
  // only leaves the space for later checkpoints.)
  for (const char* sql : {"PRAGMA incremental_vacuum;", "PRAGMA wal_checkpoint(TRUNCATE);"}) {
    if (absl::Status s = db_->Exec(sql); !s.ok()) {
      QLOG_WARN("job {} deleted; {}: {}", job_id, sql, s.ToString());
    }
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::PutJob(const quilt::v1::JobRecord& job, const LossChunk& losses) {
  absl::MutexLock lock(&mu_);
  return db_->Transaction([&]() -> absl::Status {
    RETURN_IF_ERROR(
        db_->Run("INSERT INTO jobs (job_id, record) VALUES (?, ?) "
                 "ON CONFLICT(job_id) DO UPDATE SET record = excluded.record",
                 {job.status().job_id(), Blob{job.SerializeAsString()}}));
    if (losses.losses.empty()) return absl::OkStatus();
    return db_->Run(
        "INSERT OR REPLACE INTO job_losses (job_id, first_step, losses) VALUES (?, ?, ?)",
        {job.status().job_id(), losses.first_step, Blob{PackDoubles(losses.losses)}});
  });
}

absl::StatusOr<std::vector<double>> SqliteStore::GetJobLosses(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  std::vector<double> out;
  absl::Status bad = absl::OkStatus();
  RETURN_IF_ERROR(
      db_->Run("SELECT first_step, losses FROM job_losses WHERE job_id = ? ORDER BY first_step",
               {job_id}, [&](const SqlRow& r) {
                 const int64_t first = r.Int(0);
                 const std::string bytes = r.Bytes(1);
                 if (first < 1 || bytes.size() % sizeof(double) != 0) {
                   bad.Update(absl::DataLossError("corrupt losses of job " + job_id));
                   return;
                 }
                 const size_t n = bytes.size() / sizeof(double);
                 if (out.size() < static_cast<size_t>(first - 1) + n) {
                   out.resize(static_cast<size_t>(first - 1) + n, std::nan(""));
                 }
                 std::memcpy(out.data() + (first - 1), bytes.data(), bytes.size());
               }));
  RETURN_IF_ERROR(bad);
  return out;
}

absl::StatusOr<int64_t> SqliteStore::LastLossStep(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  int64_t last = 0;
  RETURN_IF_ERROR(
      db_->Run("SELECT MAX(first_step + length(losses) / 8 - 1) FROM job_losses WHERE job_id = ?",
               {job_id}, [&](const SqlRow& r) { last = r.Int(0); }));
  return last;
}

absl::StatusOr<std::vector<quilt::v1::JobRecord>> SqliteStore::ListJobs() {
  absl::MutexLock lock(&mu_);
  return ReadJobRecords(db_.get());
}

}  // namespace quilt
