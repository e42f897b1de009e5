// clean_caption in a build without text encoders (-DTESSERA_TEXT=OFF, no ICU): it says so.
#include "models/caption_cleaning.h"
#include "tessera/error.h"

namespace tessera {

std::string clean_caption(const std::string&) {
  throw Error(
      "this tessera was built without text encoders (-DTESSERA_TEXT=OFF): rebuild with "
      "libicu-dev and -DTESSERA_TEXT=ON, or use --text-preprocessing lower");
}

std::string clean_caption_twice(const std::string& utf8) {
  return clean_caption(utf8);
}

}  // namespace tessera
