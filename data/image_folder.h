// ImageFolder: a dataset over root/<class>/<image> files (PNG, JPEG, BMP), decoded with
// stb_image on demand, resized (bilinear) to one size, served as float32 (C, H, W) in
// [0, 1] with int64 labels (class index in sorted class-name order). Also the image
// decoding and resizing helpers it is built from.
#pragma once
#include <string>
#include <vector>
#include "kiln/data/dataset.h"

namespace kiln::data {

/// Options of ImageFolder.
struct ImageFolderOptions {
  int64_t height = 32;
  int64_t width = 32;
  /// 1 (grey) or 3 (RGB); images are converted on decode.
  int channels = 3;
};

class ImageFolder : public Dataset {
 public:
  /// Scans root: each sub-folder (hidden ones, named .*, excepted) is a class, sorted
  /// by name -> index 0, 1, ...; each .png/.jpg/.jpeg/.bmp file directly inside it is an
  /// example (sorted by name; files in its sub-folders are not read, where torchvision's
  /// ImageFolder walks them too). Errors when root is missing, has no class folders, or a class
  /// folder holds no images. Files are decoded on demand, in get() / get_batch().
  ImageFolder(const std::string& root, ImageFolderOptions options = {});

  int64_t size() const override { return int64_t(paths_.size()); }
  /// Decodes and resizes image i: input float32 (C, H, W), target 0-dim int64.
  Example get(int64_t i) const override;
  /// Decodes straight into the batch buffer (B, C, H, W); targets (B).
  Batch get_batch(std::span<const int64_t> indices) const override;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::vector<std::string>& paths() const { return paths_; }
  const std::vector<int64_t>& labels() const { return labels_; }
  const ImageFolderOptions& options() const { return options_; }

 private:
  void load_into(int64_t i, float* dst) const;  // dst: (C, H, W)
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<std::string> paths_;
  std::vector<int64_t> labels_;
};

/// Decodes an image file with stb_image into uint8 (H, W, channels); channels 1 or 3
/// (converted as needed). Errors name the file and stb's reason; images over 2^26 pixels,
/// or whose header declares more pixels than the file's size can hold, are errors too.
Tensor load_image(const std::string& path, int channels = 3);

/// Bilinear resize (half-pixel centres, like PyTorch's align_corners=false without
/// antialiasing) of uint8 (H, W, C) into float32 (C, out_h, out_w) scaled to [0, 1].
Tensor resize_bilinear(const Tensor& image_hwc, int64_t out_h, int64_t out_w);

}  // namespace kiln::data
