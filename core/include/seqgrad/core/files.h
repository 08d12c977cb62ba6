// Files written whole or not at all. Every file seqgrad writes (weights, checkpoints, pictures)
// goes through write_file_atomically: the bytes go to a temporary file beside the target, which is
// flushed to disk and then renamed over the target, so that a reader (or a run resumed after a
// crash) sees either the old file or the new one, never a part.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace seqgrad {

// Writes `bytes` to "<path>.tmp.<pid>.<n>" (n counts this process's writes, so threads and
// processes never share a temporary), fsyncs it, renames it over `path`, and makes the rename
// durable (sync_directory). On failure the temporary is removed, `path` is left as it was, and an
// Error says "cannot write <path>" with the step that failed and the system's reason.
void write_file_atomically(const std::string& path, std::span<const std::byte> bytes);
void write_file_atomically(const std::string& path, std::string_view text);

// fsync of a directory, so that the renames in it survive a crash. Best effort: some file
// systems refuse it, and the data itself is already on disk.
void sync_directory(const std::string& dir);

}  // namespace seqgrad
