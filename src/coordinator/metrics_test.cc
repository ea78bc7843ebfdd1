#include "src/coordinator/metrics.h"

#include <cmath>
#include <map>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace quilt {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Sample lines by "name{labels}" (comments skipped).
std::map<std::string, std::string> Samples(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t cut = line.rfind(' ');
    out[line.substr(0, cut)] = line.substr(cut + 1);
  }
  return out;
}

quilt::v1::NodeStatus Node(const std::string& id, quilt::v1::NodeState state, bool draining) {
  quilt::v1::NodeStatus n;
  n.mutable_info()->set_node_id(id);
  n.set_state(state);
  n.set_draining(draining);
  return n;
}

TEST(Metrics, NodesAndJobsByStateAndTheJobsNotEndedOneByOne) {
  std::vector<quilt::v1::NodeStatus> nodes = {Node("a", quilt::v1::NODE_STATE_READY, false),
                                              Node("b", quilt::v1::NODE_STATE_READY, true),
                                              Node("c", quilt::v1::NODE_STATE_DOWN, false)};
  quilt::v1::JobStatus running;
  running.set_job_id("j1");
  running.set_name("bert \"large\"\\x\nrun");
  running.set_state(quilt::v1::JOB_STATE_RUNNING);
  running.set_step(120);
  running.set_steps(1000);
  running.set_last_loss(2.5);
  running.set_last_loss_step(120);
  running.set_measured_step_time_s(0.25);
  running.set_predicted_step_time_s(0.2);
  running.set_samples_per_s(1024);
  (*running.mutable_predicted_device_memory_bytes())["a/gpu:0"] = 3000;
  (*running.mutable_predicted_device_memory_bytes())["b/gpu:0"] = 5000;
  (*running.mutable_measured_memory_bytes())["a"] = 2500;
  (*running.mutable_measured_memory_bytes())["b"] = 5100;
  quilt::v1::JobStatus pending;
  pending.set_job_id("j2");
  pending.set_name("j2");
  pending.set_state(quilt::v1::JOB_STATE_PENDING);
  running.add_nodes("a");
  running.add_nodes("b");
  pending.add_nodes("a");
  nodes[2].set_heartbeat_age_s(42.5);
  quilt::v1::JobStatus done = running;
  done.set_job_id("j0");
  done.clear_nodes();
  done.add_nodes("c");
  done.set_state(quilt::v1::JOB_STATE_SUCCEEDED);
  const std::string text = RenderMetrics(nodes, {done, running, pending});
  std::map<std::string, std::string> s = Samples(text);
  EXPECT_EQ(s["quilt_nodes{state=\"ready\"}"], "2");
  EXPECT_EQ(s["quilt_nodes{state=\"not_ready\"}"], "0");
  EXPECT_EQ(s["quilt_nodes{state=\"down\"}"], "1");
  EXPECT_EQ(s["quilt_nodes_draining"], "1");
  EXPECT_EQ(s["quilt_jobs{state=\"running\"}"], "1");
  EXPECT_EQ(s["quilt_jobs{state=\"pending\"}"], "1");
  EXPECT_EQ(s["quilt_jobs{state=\"succeeded\"}"], "1");
  EXPECT_EQ(s["quilt_jobs{state=\"failed\"}"], "0");
  const std::string j1 = "{job_id=\"j1\",name=\"bert \\\"large\\\"\\\\x\\nrun\"}";
  EXPECT_EQ(s["quilt_job_step" + j1], "120");
  EXPECT_EQ(s["quilt_job_steps" + j1], "1000");
  EXPECT_EQ(s["quilt_job_loss" + j1], "2.5");
  EXPECT_EQ(s["quilt_job_step_time_seconds" + j1], "0.25");
  EXPECT_EQ(std::stod(s["quilt_job_predicted_step_time_seconds" + j1]), 0.2);
  EXPECT_EQ(s["quilt_job_samples_per_second" + j1], "1024");
  // The fullest device's, planned and held.
  EXPECT_EQ(s["quilt_job_predicted_memory_bytes" + j1], "5000");
  EXPECT_EQ(s["quilt_job_memory_bytes" + j1], "5100");
  EXPECT_EQ(s["quilt_job_memory_bytes{job_id=\"j2\",name=\"j2\"}"], "0");
  // No loss yet: NaN, not a 0 that reads as a perfect model.
  EXPECT_EQ(s["quilt_job_loss{job_id=\"j2\",name=\"j2\"}"], "NaN");
  EXPECT_THAT(text, Not(HasSubstr("job_id=\"j0\"")));  // ended
  EXPECT_EQ(s["quilt_node_ready{node=\"a\"}"], "1");
  EXPECT_EQ(s["quilt_node_ready{node=\"c\"}"], "0");
  EXPECT_EQ(s["quilt_node_draining{node=\"b\"}"], "1");
  EXPECT_EQ(s["quilt_node_draining{node=\"a\"}"], "0");
  EXPECT_EQ(s["quilt_node_heartbeat_age_seconds{node=\"c\"}"], "42.5");
  // j1 runs on a and b, j2 (pending) on a; j0 ended on c.
  EXPECT_EQ(s["quilt_node_jobs{node=\"a\"}"], "2");
  EXPECT_EQ(s["quilt_node_jobs{node=\"b\"}"], "1");
  EXPECT_EQ(s["quilt_node_jobs{node=\"c\"}"], "0");
  // Every family is typed once.
  EXPECT_THAT(text, HasSubstr("# TYPE quilt_job_step gauge\n"));
  EXPECT_EQ(text.find("# TYPE quilt_nodes gauge"), text.rfind("# TYPE quilt_nodes gauge"));
}

}  // namespace
}  // namespace quilt
