"""Writing files whole or not at all, as the engine does (include/tessera/file_io.h).

The bytes go to a temporary ".NAME.XXXXXX.tmp" in the target's directory (so the final rename
stays on one filesystem), which is fsynced and moved over the target with os.replace() only once
it is complete. Any failure while writing (disk full, file size limit, an exception while the
content is produced) removes the temporary and leaves the target as it was: nothing new under its
name, or the previous file untouched. A reader, or a tessera process loading a model directory,
never sees a torn file.

    with atomic_write(path, "w") as f:
        json.dump(config, f)

Errors are OSError with .filename set to the target, so "cannot write {e.filename}: {e.strerror}"
names the file the user asked for, not the temporary.
"""
import contextlib
import errno
import os
import secrets
import stat


def _target(path):
    """Where the bytes go: a symlink's destination (the link stays), refused when a directory."""
    target = os.path.realpath(path) if os.path.islink(path) else path
    if os.path.isdir(target) or not os.path.basename(target):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    return target


def _create_temp(path, target):
    """Creates the temporary with O_EXCL and mode 0666 (the umask applies, as for open(); tempfile's
    0600 would hide outputs from the group); returns (fd, name)."""
    directory = os.path.dirname(target)
    base = os.path.basename(target)[:200]  # "." + base + ".XXXXXX.tmp" within NAME_MAX
    for _ in range(100):
        tmp = os.path.join(directory, f".{base}.{secrets.token_hex(3)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue
        except OSError as e:
            raise OSError(e.errno, e.strerror, path) from None
    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)


def _sync_directory(target):
    """Makes the rename durable; best effort (the file is complete and in place either way)."""
    try:
        fd = os.open(os.path.dirname(target) or ".", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path, mode="wb", encoding="utf-8"):
    """A file object ("wb" or "w") on a temporary that replaces `path` when the block ends
    without an exception, and is removed when it does not."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write: mode {mode!r} is not 'w' or 'wb'")
    path = os.fspath(path)
    target = _target(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        # /dev/null, a pipe, a terminal: nothing to rename over, so written in place.
        with open(target, mode, **({} if "b" in mode else {"encoding": encoding})) as f:
            yield f
        return
    fd, tmp = _create_temp(path, target)
    f = None
    try:
        if st is not None:
            os.fchmod(fd, stat.S_IMODE(st.st_mode))  # an overwritten file keeps its permissions
        f = os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": encoding}))
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())  # data before name: a crash after the rename leaves a whole file
        os.replace(tmp, target)
    except BaseException as e:
        if f is None:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:
            raise OSError(e.errno, e.strerror, path) from e
        raise
    _sync_directory(target)


def write_bytes_atomic(path, data):
    with atomic_write(path, "wb") as f:
        f.write(data)


def write_text_atomic(path, text):
    with atomic_write(path, "w") as f:
        f.write(text)
