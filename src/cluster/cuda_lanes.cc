#include "src/cluster/cuda_devices.h"

namespace quilt {

int Fp32LanesPerSm(int major, int minor) {
  switch (major) {
    case 6:
      return minor == 0 ? 64 : 128;  // P100 : GTX 10xx
    case 7:
      return 64;  // V100, T4
    case 8:
      return minor == 0 ? 64 : 128;  // A100 : RTX 30xx / L4 / L40
    case 9:
    case 10:
    case 12:
      return 128;  // H100/H200, B200, RTX 50xx
    default:
      return 0;
  }
}

}  // namespace quilt
