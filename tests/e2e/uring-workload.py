# SPDX-License-Identifier: MIT
# A workload holding a mapping CRIU cannot save: an io_uring ring, mapped
# as NCCL maps the buffers its ranks share (a file that cannot be opened
# again). It counts into DIR/state every 10 ms.
#   python3 uring-workload.py DIR
import ctypes, mmap, os, sys, time

IO_URING_SETUP = 425
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)  # struct io_uring_params
fd = libc.syscall(IO_URING_SETUP, 4, params)
if fd < 0:
    sys.exit("io_uring_setup: " + os.strerror(ctypes.get_errno()))
ring = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, offset=0)
n = 0
while True:
    n += 1
    with open(os.path.join(sys.argv[1], "state.tmp"), "w") as f:
        f.write("%d\n" % n)
    os.rename(os.path.join(sys.argv[1], "state.tmp"), os.path.join(sys.argv[1], "state"))
    time.sleep(0.01)
