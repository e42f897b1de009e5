// tessera: errors reported to users. Every user-facing failure is a tessera::Error with a one-line
// message that names the problem (file, tensor, parameter, value).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace tessera {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws tessera::Error(msg) when cond is false.
void check(bool cond, const std::string& msg);
// The same for a literal: no std::string is built unless it throws (kernels check their inputs on
// every call).
inline void check(bool cond, const char* msg) {
  if (!cond) [[unlikely]]
    throw Error(msg);
}
// The same with a computed message, built by make_msg() only when it throws.
template <class MakeMessage>
requires std::is_invocable_r_v<std::string, MakeMessage&>
inline void check(bool cond, MakeMessage&& make_msg) {
  if (!cond) [[unlikely]]
    throw Error(make_msg());
}

// A bad value of a named parameter: a generation option ("temperature", "top_k", "batch",
// "tokens", "draft", "draft_len", "steps", ...) or a method parameter ("lantern.k",
// tessera/methods.h). The message names parameters as {name} markers so that a front-end can spell
// them its own way (the CLI as flags: "--lantern-k must be >= 1"); what() spells them as the names
// themselves ("lantern.k must be >= 1").
class ParameterError : public Error {
 public:
  // message: text with {name} markers; without any, it follows the parameter's name
  // ("must be >= 1" reads "{lantern.k} must be >= 1").
  ParameterError(const std::string& param, const std::string& message);

  // The parameter whose value is bad.
  const std::string& param() const { return param_; }
  // The message with every {name} marker replaced by spell(name).
  std::string message(const std::function<std::string(const std::string&)>& spell) const;

 private:
  std::string param_, message_;
};

// Throws ParameterError(param, message) when cond is false.
void check_param(bool cond, const std::string& param, const std::string& message);

}  // namespace tessera
