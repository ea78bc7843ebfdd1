#include "src/common/systemd.h"

#include <systemd/sd-daemon.h>

#include <cstdint>

namespace quilt {

void NotifyReady(const std::string& status) { sd_notify(0, ("READY=1\nSTATUS=" + status).c_str()); }

void NotifyStatus(const std::string& status) { sd_notify(0, ("STATUS=" + status).c_str()); }

void NotifyStopping() { sd_notify(0, "STOPPING=1\nSTATUS=draining"); }

void NotifyWatchdog() { sd_notify(0, "WATCHDOG=1"); }

absl::Duration WatchdogInterval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return absl::ZeroDuration();
  return absl::Microseconds(usec) / 2;
}

}  // namespace quilt
