// A minimal PTX reader: enough to find the kernels a module defines.
#include "simgpu/cuda/module.h"

namespace gpufrac::simgpu {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool IsIdentifierChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '$' || c == '.';
}

}  // namespace

bool ParsePtxEntries(std::string_view image, std::vector<std::string>* entries) {
  entries->clear();
  if (image.find(".version") == std::string_view::npos) return false;
  constexpr std::string_view kEntry = ".entry";
  std::size_t position = 0;
  while ((position = image.find(kEntry, position)) != std::string_view::npos) {
    const bool starts_token = position == 0 || IsSpace(image[position - 1]);
    position += kEntry.size();
    if (!starts_token || position >= image.size() || !IsSpace(image[position])) continue;
    while (position < image.size() && IsSpace(image[position])) ++position;
    const std::size_t begin = position;
    while (position < image.size() && IsIdentifierChar(image[position])) ++position;
    if (position > begin) entries->emplace_back(image.substr(begin, position - begin));
  }
  return true;
}

}  // namespace gpufrac::simgpu
