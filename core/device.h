// Device: where a tensor's bytes live, `cpu` or `cuda:N`.
#pragma once
#include <ostream>
#include <string>

namespace kiln {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
constexpr int kNumDeviceTypes = 2;
const char* device_type_name(DeviceType t);

/// A device: type plus index (index is 0 for the CPU).
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  Device() = default;
  Device(DeviceType t, int i = 0) : type(t), index(i) {}
  /// Parses "cpu", "cuda", "cuda:1"; throws kiln::Error on anything else.
  explicit Device(const std::string& s);
  Device(const char* s) : Device(std::string(s)) {}
  static Device cpu() { return {}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  bool operator==(const Device&) const = default;
};
inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace kiln
