// The atomic writer (files.h).
#include "seqgrad/core/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "seqgrad/core/error.h"

namespace seqgrad {
namespace {

// Writes all of `bytes` to `fd`, retrying short writes and interruptions.
bool write_all(int fd, const std::byte* data, size_t size) {
    while (size > 0) {
        const ssize_t n = ::write(fd, data, size);
        if (n < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        data += n;
        size -= static_cast<size_t>(n);
    }
    return true;
}

}  // namespace

void write_file_atomically(const std::string& path, std::span<const std::byte> bytes) {
    check(!path.empty(), "write", "no path given");
    // The pid keeps concurrent processes apart; the counter, threads of one process.
    static std::atomic<uint64_t> writes{0};
    const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(writes++);
    auto fail = [&](const std::string& step, int error) {
        throw Error("cannot write " + path + ": " + step + ": " + std::strerror(error));
    };
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot create " + tmp, errno);
    // On any later failure: remove the temporary file (`path` is untouched) and report.
    auto abandon = [&](const std::string& step, int error) {
        ::unlink(tmp.c_str());
        fail(step, error);
    };
    if (!write_all(fd, bytes.data(), bytes.size())) {
        const int error = errno;
        ::close(fd);
        abandon("writing " + tmp, error);
    }
    // The data must be on disk before the rename makes it visible, or a crash could leave the new
    // name pointing at an incomplete file.
    if (::fsync(fd) != 0) {
        const int error = errno;
        ::close(fd);
        abandon("fsync of " + tmp, error);
    }
    if (::close(fd) != 0) abandon("closing " + tmp, errno);
    if (::rename(tmp.c_str(), path.c_str()) != 0) abandon("renaming " + tmp + " over it", errno);
    const std::string dir = std::filesystem::path(path).parent_path().string();
    sync_directory(dir.empty() ? "." : dir);
}

void write_file_atomically(const std::string& path, std::string_view text) {
    write_file_atomically(path, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

void sync_directory(const std::string& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

}  // namespace seqgrad
