// Fuzz target: image decoding through stb_image (data::load_image, as ImageFolder uses it:
// PNG, JPEG, BMP) and the bilinear resize of the result. Bad bytes must end in kiln::Error
// naming the file; an image that decodes has the same size as grey and as RGB.
#include "kiln/data/image_folder.h"
#include "fuzz.h"

using namespace kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = kiln_fuzz::write_input("in.img", data, size);
  kiln_fuzz::expect_errors([&] {
    const Tensor rgb = data::load_image(path, 3);
    const Tensor grey = data::load_image(path, 1);
    kiln_fuzz::require(rgb.size(2) == 3 && grey.size(2) == 1 && rgb.size(0) == grey.size(0) &&
                           rgb.size(1) == grey.size(1),
                       "an image decodes to the same size as grey and as RGB");
    const Tensor small = data::resize_bilinear(rgb, 5, 7);
    kiln_fuzz::require(small.shape() == Shape{3, 5, 7}, "resize_bilinear gives (C, out_h, out_w)");
  });
  return 0;
}
