// The header of a .npy file: a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// read by a small hand-written parser (std::regex recurses per character and can overflow the
// stack on a long adversarial header).
#pragma once

#include <string>
#include <string_view>

#include "tensor/tensor.h"

namespace tessera {

struct NpyHeader {
  std::string descr;  // "<f4", "|u1", ...
  bool fortran_order = false;
  Shape shape;
};

// Parses the dict: exactly the keys 'descr' (a string), 'fortran_order' (True or False) and
// 'shape' (a tuple of at most kMaxNpyRank integers, each at most 2^56), in any order, each once.
// Throws tessera::Error "WHERE: bad .npy header (PROBLEM)".
NpyHeader parse_npy_header(std::string_view dict, const std::string& where);

inline constexpr size_t kMaxNpyRank = 32;  // NumPy's own limit before 2.0

}  // namespace tessera
