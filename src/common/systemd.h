// systemd service notifications (Type=notify units) through libsystemd's
// sd_notify: READY=1 once serving, STATUS= lines, STOPPING=1 on drain and the
// watchdog keep-alive. Every call is a no-op when not started by systemd.
#ifndef QUILT_SRC_COMMON_SYSTEMD_H_
#define QUILT_SRC_COMMON_SYSTEMD_H_

#include <string>

#include "absl/time/time.h"

namespace quilt {

void NotifyReady(const std::string& status);
void NotifyStatus(const std::string& status);
void NotifyStopping();
void NotifyWatchdog();

// Interval at which NotifyWatchdog must be called (half the unit's
// WatchdogSec), or zero when the watchdog is off.
absl::Duration WatchdogInterval();

}  // namespace quilt

#endif  // QUILT_SRC_COMMON_SYSTEMD_H_
