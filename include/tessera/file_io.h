// Writing output files whole or not at all. Every file tessera writes (PNG, .npy, JSON,
// safetensors) goes through write_file_atomic: the bytes go to a temporary next to the target,
// which is renamed over the target only once all of it is on disk. A failed write (disk full, file
// size limit, I/O error) leaves no torn file: nothing new under the target name, a file that was
// there before untouched, and no temporary behind.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tessera {

// Writes `bytes` to `path` atomically (see above). Throws tessera::Error naming the target and the
// OS reason, e.g. "cannot write out.png: No space left on device". A target that exists and is
// not a regular file (/dev/null, a pipe, a terminal) is written in place, as there is nothing to
// rename over.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Checks, before any work, that write_file_atomic(path, ...) could create its file: the directory
// exists and is writable, and path is neither a directory nor a read-only file. Leaves nothing
// behind. Throws the Error that write would ("cannot write x/out.png: directory x: No such file
// or directory"). It cannot promise free space: that failure is write_file_atomic's to report.
void check_writable(const std::string& path);

// The bytes of a regular file of at most max_bytes (a FIFO, device or directory is refused without
// blocking). Throws tessera::Error naming the file and the problem.
std::string read_file(const std::string& path, size_t max_bytes);

}  // namespace tessera
