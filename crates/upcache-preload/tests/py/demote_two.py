"""One shimmed process demotes a file that another shimmed process has cached and written
(not synced): it maps the file and writes through the mapping, which no cache sees. The other
process must then read the mapped bytes, not its cached page, and its later write and close
must not put the stale page back. Usage: demote_two.py FILE holder|mapper"""
import mmap
import os
import sys

path, role = sys.argv[1], sys.argv[2]
if role == "holder":
    fd = os.open(path, os.O_RDWR)
    assert os.pread(fd, 8192, 0) == b"\x01" * 8192  # every page cached
    os.pwrite(fd, b"from the holder", 100)
    print("ready", flush=True)
    sys.stdin.readline()  # the mapper has written
    first = os.pread(fd, 7, 0)
    assert first == b"OUTSIDE", f"read {first!r} where the mapping wrote OUTSIDE"
    assert os.pread(fd, 15, 100) == b"from the holder"
    assert os.fstat(fd).st_size == 8192
    os.pwrite(fd, b"H", 1)
    os.close(fd)
    print("done", flush=True)
else:
    fd = os.open(path, os.O_RDWR)
    assert os.pread(fd, 15, 100) == b"from the holder", "the holder's write is seen"
    with mmap.mmap(fd, 8192) as m:  # the shim demotes the file first
        m[0:7] = b"OUTSIDE"
        m.flush()
    os.close(fd)
