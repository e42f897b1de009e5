// tessera serve in a build configured with -DTESSERA_SERVE=OFF (no cpp-httplib or OpenSSL, as on
// the GPU machine's image): the command exists, takes any arguments, and says in one line how to
// get it instead of a parse error about its flags.
#include "commands.h"
#include "tessera/error.h"

namespace tessera::cli {

Command add_serve(CLI::App& app, const ModelDefaults&) {
  auto* s = app.add_subcommand(
      "serve", "Serve an OpenAI-style images API (absent from this build: -DTESSERA_SERVE=OFF)");
  s->allow_extras();
  return {s, [] {
            throw Error(
                "serve: this tessera was built without its HTTP server (-DTESSERA_SERVE=OFF); "
                "configure with -DTESSERA_SERVE=ON, which needs cpp-httplib and OpenSSL");
            return 1;
          }};
}

}  // namespace tessera::cli
