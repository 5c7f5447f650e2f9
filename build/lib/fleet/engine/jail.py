"""The view of the file system a sandboxed process gets when fleet's folders lie under one its user cannot enter
(a checkout under /root, a FLEET_HOME under a 0700 ``mktemp -d``): run as root by fleet/engine/sandbox.py as
``python -I -S jail.py PLAN -- COMMAND...``, it moves into a mount namespace of its own (nothing it mounts is seen
outside it), mounts an empty tmpfs over each folder of PLAN the user cannot enter, puts back in it only the folders
the sandboxed process needs (bind mounts, read-only but for FLEET_HOME), then executes COMMAND (``setpriv``, which
drops to the sandbox's user). The operator's folders keep their modes; the rest of them is hidden from the sandbox.

PLAN is JSON: ``[[BLOCKED, [[PATH, WRITABLE], ...]], ...]``, each PATH under its BLOCKED folder, outer ones first.
A script run by path, standard library only: it must start fast and import nothing of fleet."""
import ctypes
import json
import os
import sys

CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"fleet jail: {what}: {os.strerror(err)}")


def _mount(source, target: str, fstype, flags: int, data=None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {source} on {target}")


def enter(plan: list) -> None:
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing mounted from here on propagates to the host
    os.umask(0o022)
    for blocked, binds in plan:
        # the folders to put back, held open before the tmpfs hides them
        held = [(path, writable, os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)) for path, writable in binds]
        _mount("tmpfs", blocked, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        for path, writable, fd in held:
            os.makedirs(path, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            if not writable:
                _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
            os.close(fd)


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit("usage: python -I -S jail.py PLAN -- COMMAND...")
    enter(json.loads(sys.argv[1]))
    os.execvp(sys.argv[3], sys.argv[3:])
