// PNG encoding through stb_image_write (Debian's libstb-dev, the same package as the
// stb_image that decodes kiln's image datasets): 8-bit RGB, written atomically.
#include "kiln/monitor/png.h"
#include <string_view>
#include "kiln/core/error.h"
#include "kiln/core/file_io.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC
#define STBI_WRITE_NO_STDIO
#include "stb_image_write.h"
#pragma GCC diagnostic pop

namespace kiln::monitor {

std::vector<uint8_t> encode_png(const uint8_t* rgb, int width, int height) {
  KILN_CHECK(rgb != nullptr && width > 0 && height > 0 && width <= 32768 && height <= 32768,
             "encode_png: expected an RGB image of 1..32768 x 1..32768 pixels, got ", width, " x ", height,
             rgb ? "" : " (null pixels)");
  std::vector<uint8_t> png;
  auto append = [](void* ctx, void* data, int size) {
    auto* out = static_cast<std::vector<uint8_t>*>(ctx);
    out->insert(out->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
  };
  KILN_CHECK(stbi_write_png_to_func(append, &png, width, height, 3, rgb, width * 3) != 0,
             "encode_png: stb_image_write could not encode a ", width, " x ", height, " image");
  return png;
}

void write_png(const std::string& path, const uint8_t* rgb, int width, int height) {
  const std::vector<uint8_t> png = encode_png(rgb, width, height);
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()));
}

}  // namespace kiln::monitor
