// The coordinator's metrics in Prometheus's text exposition format (0.0.4),
// for the optional metrics endpoint (config key metrics_address): nodes by
// state and draining, and per node whether it is Ready or drained, its
// heartbeat age and its jobs; jobs by state; per job not ended, its step, steps,
// last loss, measured and predicted step time and samples/s, labelled
// job_id (Prometheus keeps `job` for its scrape job) and name. Gauges only: each scrape reads the
// state as it is.
#ifndef QUILT_SRC_COORDINATOR_METRICS_H_
#define QUILT_SRC_COORDINATOR_METRICS_H_

#include <string>
#include <vector>

#include "proto/quilt/v1/cluster.pb.h"
#include "proto/quilt/v1/job.pb.h"

namespace quilt {

std::string RenderMetrics(const std::vector<quilt::v1::NodeStatus>& nodes,
                          const std::vector<quilt::v1::JobStatus>& jobs);

// A label value escaped as the format asks (backslash, quote, newline).
std::string EscapeLabelValue(const std::string& value);

}  // namespace quilt

#endif  // QUILT_SRC_COORDINATOR_METRICS_H_
