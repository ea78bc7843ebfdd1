#include "src/coordinator/store/sqlite_store.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/common/status_matchers.h"
#include "src/coordinator/store/sqlite_db.h"
#include "src/testing/temp_dir.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

quilt::v1::NodeStatus Node(const std::string& id, uint64_t incarnation) {
  quilt::v1::NodeStatus n;
  n.mutable_info()->set_node_id(id);
  n.set_incarnation(incarnation);
  n.set_state(quilt::v1::NODE_STATE_READY);
  return n;
}

TEST(SqliteStore, NodesSurviveReopen) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->PutNode(Node("b", 2)), IsOk());
    ASSERT_THAT((*store)->PutNode(Node("a", 1)), IsOk());
    ASSERT_THAT((*store)->PutNode(Node("a", 3)), IsOk());  // replaces
  }
  auto store = SqliteStore::Open(path);
  ASSERT_THAT(store, IsOk());
  auto nodes = (*store)->ListNodes();
  ASSERT_THAT(nodes, IsOk());
  ASSERT_THAT(*nodes, SizeIs(2));
  EXPECT_EQ((*nodes)[0].info().node_id(), "a");
  EXPECT_EQ((*nodes)[0].incarnation(), 3u);
  EXPECT_EQ((*nodes)[1].info().node_id(), "b");
}

TEST(SqliteStore, EventsNewestFirstAndBounded) {
  testing::TempDir dir;
  auto store = SqliteStore::Open(dir.File("c.db"));
  ASSERT_THAT(store, IsOk());
  for (int i = 0; i < CoordinatorStore::kMaxEvents + 5; ++i) {
    quilt::v1::ClusterEvent e;
    e.set_message(std::to_string(i));
    ASSERT_THAT((*store)->AppendEvent(e), IsOk());
  }
  auto recent = (*store)->RecentEvents(3);
  ASSERT_THAT(recent, IsOk());
  ASSERT_THAT(*recent, SizeIs(3));
  EXPECT_EQ((*recent)[0].message(), std::to_string(CoordinatorStore::kMaxEvents + 4));
  auto all = (*store)->RecentEvents(100000);
  ASSERT_THAT(all, IsOk());
  EXPECT_THAT(*all, SizeIs(CoordinatorStore::kMaxEvents));
}

TEST(SqliteStore, CorruptFile_IsDataLossNotCrash) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  {
    std::ofstream f(path);
    f << std::string(8192, 'x');
  }
  EXPECT_THAT(SqliteStore::Open(path), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));
}

TEST(SqliteStore, UnwritableDirectory_IsAFailedPreconditionNamingThePath) {
  // (Not UNAVAILABLE, which clients take for an unreachable coordinator.)
  EXPECT_THAT(
      SqliteStore::Open("/nonexistent-dir/x/c.db"),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("/nonexistent-dir/x/c.db")));
}

quilt::v1::JobRecord JobRec(const std::string& id, quilt::v1::JobState state) {
  quilt::v1::JobRecord r;
  r.mutable_status()->set_job_id(id);
  r.mutable_status()->set_state(state);
  return r;
}

TEST(SqliteStore, JobsSurviveReopenInSubmissionOrder) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->PutJob(JobRec("job-z", quilt::v1::JOB_STATE_PENDING), {}), IsOk());
    ASSERT_THAT((*store)->PutJob(JobRec("job-a", quilt::v1::JOB_STATE_PENDING), {}), IsOk());
    // An update keeps the job's place.
    ASSERT_THAT((*store)->PutJob(JobRec("job-z", quilt::v1::JOB_STATE_SUCCEEDED), {}), IsOk());
  }
  auto store = SqliteStore::Open(path);
  ASSERT_THAT(store, IsOk());
  auto jobs = (*store)->ListJobs();
  ASSERT_THAT(jobs, IsOk());
  ASSERT_THAT(*jobs, SizeIs(2));
  EXPECT_EQ((*jobs)[0].status().job_id(), "job-z");
  EXPECT_EQ((*jobs)[0].status().state(), quilt::v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ((*jobs)[1].status().job_id(), "job-a");
}

TEST(SqliteStore, ACorruptJobRecordIsLeftOutAndKeptTheOthersLoad) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_THAT(store, IsOk());
    for (const char* id : {"job-1", "job-2", "job-3"}) {
      ASSERT_THAT((*store)->PutJob(JobRec(id, quilt::v1::JOB_STATE_SUCCEEDED), {}), IsOk());
    }
  }
  {
    auto db = SqliteDb::Open(path);
    ASSERT_THAT(db, IsOk());
    ASSERT_THAT((*db)->Exec("UPDATE jobs SET record = x'deadbeef' WHERE job_id = 'job-2';"),
                IsOk());
  }
  auto store = SqliteStore::Open(path);
  ASSERT_THAT(store, IsOk());
  auto jobs = (*store)->ListJobs();
  ASSERT_THAT(jobs, IsOk());
  ASSERT_THAT(*jobs, SizeIs(2));
  EXPECT_EQ((*jobs)[0].status().job_id(), "job-1");
  EXPECT_EQ((*jobs)[1].status().job_id(), "job-3");
  // Untouched in the database.
  auto db = SqliteDb::Open(path);
  ASSERT_THAT(db, IsOk());
  std::string record;
  ASSERT_THAT((*db)->Run("SELECT record FROM jobs WHERE job_id = 'job-2'", {},
                         [&](const SqlRow& r) { record = r.Bytes(0); }),
              IsOk());
  EXPECT_EQ(record, std::string("\xde\xad\xbe\xef", 4));
}

// Likewise a corrupt node record or event: left out, the others load (the
// node's worker registers it again); a node put again replaces it.
TEST(SqliteStore, ACorruptNodeRecordOrEventIsLeftOutAndTheOthersLoad) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_THAT(store, IsOk());
    for (const char* id : {"n1", "n2", "n3"}) {
      quilt::v1::NodeStatus n;
      n.mutable_info()->set_node_id(id);
      ASSERT_THAT((*store)->PutNode(n), IsOk());
      quilt::v1::ClusterEvent e;
      e.set_node_id(id);
      ASSERT_THAT((*store)->AppendEvent(e), IsOk());
    }
  }
  {
    auto db = SqliteDb::Open(path);
    ASSERT_THAT(db, IsOk());
    ASSERT_THAT((*db)->Exec("UPDATE nodes SET record = x'deadbeef' WHERE node_id = 'n2';"), IsOk());
    ASSERT_THAT((*db)->Exec("UPDATE events SET record = x'deadbeef' WHERE id = 2;"), IsOk());
  }
  auto store = SqliteStore::Open(path);
  ASSERT_THAT(store, IsOk());
  auto nodes = (*store)->ListNodes();
  ASSERT_THAT(nodes, IsOk());
  ASSERT_THAT(*nodes, SizeIs(2));
  EXPECT_EQ((*nodes)[0].info().node_id(), "n1");
  EXPECT_EQ((*nodes)[1].info().node_id(), "n3");
  auto events = (*store)->RecentEvents(10);
  ASSERT_THAT(events, IsOk());
  ASSERT_THAT(*events, SizeIs(2));
  EXPECT_EQ((*events)[0].node_id(), "n3");
  EXPECT_EQ((*events)[1].node_id(), "n1");
  quilt::v1::NodeStatus again;
  again.mutable_info()->set_node_id("n2");
  ASSERT_THAT((*store)->PutNode(again), IsOk());
  nodes = (*store)->ListNodes();
  ASSERT_THAT(nodes, IsOk());
  EXPECT_THAT(*nodes, SizeIs(3));
}

TEST(SqliteStore, AVersionOneDatabaseGainsTheJobsTableAndKeepsItsNodes) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  {
    auto db = SqliteDb::Open(path);
    ASSERT_THAT(db, IsOk());
    ASSERT_THAT((*db)->Exec("CREATE TABLE nodes (node_id TEXT PRIMARY KEY, record BLOB NOT NULL);"
                            "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT,"
                            " record BLOB NOT NULL);"
                            "PRAGMA user_version = 1;"),
                IsOk());
  }
  {
    auto store = SqliteStore::Open(path);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->PutNode(Node("a", 1)), IsOk());
    ASSERT_THAT((*store)->PutJob(JobRec("job-1", quilt::v1::JOB_STATE_RUNNING), {}), IsOk());
  }
  auto store = SqliteStore::Open(path);
  ASSERT_THAT(store, IsOk());
  EXPECT_THAT(*(*store)->ListNodes(), SizeIs(1));
  EXPECT_THAT(*(*store)->ListJobs(), SizeIs(1));
}

TEST(SqliteStore, AJobsModelIsStoredOnceApartFromItsRecord) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_THAT(store, IsOk());
    ASSERT_THAT((*store)->AddJob(JobRec("job-1", quilt::v1::JOB_STATE_PENDING),
                                 {std::string(1 << 20, 'm'), "program", "weights"}),
                IsOk());
    // A second job of that id is refused, model and all.
    EXPECT_THAT((*store)->AddJob(JobRec("job-1", quilt::v1::JOB_STATE_PENDING), {"x", "y"}),
                Not(IsOk()));
    ASSERT_THAT((*store)->PutJob(JobRec("job-1", quilt::v1::JOB_STATE_RUNNING), {}), IsOk());
  }
  EXPECT_GT(std::filesystem::file_size(path), 1u << 20);
  auto store = SqliteStore::Open(path);
  ASSERT_THAT(store, IsOk());
  auto jobs = (*store)->ListJobs();
  ASSERT_THAT(jobs, IsOk());
  ASSERT_THAT(*jobs, SizeIs(1));
  EXPECT_EQ((*jobs)[0].status().state(), quilt::v1::JOB_STATE_RUNNING);
  auto model = (*store)->GetJobModel("job-1");
  ASSERT_THAT(model, IsOk());
  EXPECT_EQ(model->onnx, std::string(1 << 20, 'm'));
  EXPECT_EQ(model->program, "program");
  EXPECT_EQ(model->weights, "weights");
  EXPECT_THAT((*store)->GetJobModel("job-2"), StatusIs(absl::StatusCode::kNotFound));
  // Deleted: record and model, and the file and its log give their space
  // back while the store is open (a coordinator runs on for weeks).
  ASSERT_THAT((*store)->PutJob(JobRec("job-1", quilt::v1::JOB_STATE_SUCCEEDED), {}), IsOk());
  ASSERT_THAT((*store)->DeleteJob("job-1"), IsOk());
  EXPECT_LT(std::filesystem::file_size(path), 512u << 10);
  std::error_code ec;
  EXPECT_LT(std::filesystem::file_size(path + "-wal", ec), 64u << 10);
  store->reset();
  store = SqliteStore::Open(path);
  ASSERT_THAT(store, IsOk());
  EXPECT_THAT(*(*store)->ListJobs(), SizeIs(0));
  EXPECT_THAT((*store)->GetJobModel("job-1"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT((*store)->DeleteJob("job-1"), IsOk());  // nothing left to delete
}

TEST(SqliteStore, LossesAreAppendedInChunksAndAGapIsNaN) {
  testing::TempDir dir;
  auto store = SqliteStore::Open(dir.File("c.db"));
  ASSERT_THAT(store, IsOk());
  const quilt::v1::JobRecord r = JobRec("job-1", quilt::v1::JOB_STATE_RUNNING);
  ASSERT_THAT((*store)->PutJob(r, {1, {1.0, 2.0}}), IsOk());
  ASSERT_THAT((*store)->PutJob(r, {}), IsOk());  // progress without new steps
  ASSERT_THAT((*store)->PutJob(r, {5, {5.0}}), IsOk());
  auto losses = (*store)->GetJobLosses("job-1");
  ASSERT_THAT(losses, IsOk());
  ASSERT_EQ(losses->size(), 5u);
  EXPECT_EQ((*losses)[1], 2.0);
  EXPECT_TRUE(std::isnan((*losses)[2]));
  EXPECT_EQ((*losses)[4], 5.0);
  EXPECT_EQ(*(*store)->LastLossStep("job-1"), 5);  // without reading them
  EXPECT_THAT(*(*store)->GetJobLosses("job-2"), SizeIs(0));
  EXPECT_EQ(*(*store)->LastLossStep("job-2"), 0);
  ASSERT_THAT((*store)->DeleteJob("job-1"), IsOk());
  EXPECT_THAT(*(*store)->GetJobLosses("job-1"), SizeIs(0));
  EXPECT_EQ(*(*store)->LastLossStep("job-1"), 0);
}

TEST(SqliteStore, AVersionTwoDatabaseMovesModelsOutOfItsJobRecords) {
  testing::TempDir dir;
  const std::string path = dir.File("c.db");
  {
    auto db = SqliteDb::Open(path);
    ASSERT_THAT(db, IsOk());
    ASSERT_THAT((*db)->Exec("CREATE TABLE nodes (node_id TEXT PRIMARY KEY, record BLOB NOT NULL);"
                            "CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT,"
                            " record BLOB NOT NULL);"
                            "CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                            " job_id TEXT UNIQUE NOT NULL, record BLOB NOT NULL);"
                            "PRAGMA user_version = 2;"),
                IsOk());
    for (const std::string id : {"job-b", "job-a"}) {
      quilt::v1::JobRecord r = JobRec(id, quilt::v1::JOB_STATE_SUCCEEDED);
      r.mutable_spec()->set_onnx("onnx of " + id);
      r.mutable_spec()->set_steps(7);
      r.set_program("program of " + id);
      r.add_losses(0.5);
      r.add_losses(0.25);
      ASSERT_THAT((*db)->Run("INSERT INTO jobs (job_id, record) VALUES (?, ?)",
                             {id, Blob{r.SerializeAsString()}}),
                  IsOk());
    }
  }
  auto store = SqliteStore::Open(path);
  ASSERT_THAT(store, IsOk());
  auto jobs = (*store)->ListJobs();
  ASSERT_THAT(jobs, IsOk());
  ASSERT_THAT(*jobs, SizeIs(2));
  EXPECT_EQ((*jobs)[0].status().job_id(), "job-b");  // the order is kept
  for (const quilt::v1::JobRecord& r : *jobs) {
    EXPECT_EQ(r.spec().onnx(), "");
    EXPECT_TRUE(r.spec().has_onnx());  // the spec still says it is an ONNX model
    EXPECT_EQ(r.spec().steps(), 7);
    EXPECT_EQ(r.program(), "");
    EXPECT_EQ(r.losses_size(), 0);  // moved too
    EXPECT_THAT(*(*store)->GetJobLosses(r.status().job_id()), ::testing::ElementsAre(0.5, 0.25));
    auto model = (*store)->GetJobModel(r.status().job_id());
    ASSERT_THAT(model, IsOk());
    EXPECT_EQ(model->onnx, "onnx of " + r.status().job_id());
    EXPECT_EQ(model->program, "program of " + r.status().job_id());
    EXPECT_EQ(model->weights, "");  // (a column added later: none for old jobs)
  }
}

}  // namespace
}  // namespace quilt
