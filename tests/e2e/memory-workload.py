# SPDX-License-Identifier: MIT
# A CPU workload with memory worth compressing: random bytes, zeros and a
# table of floats, digested at the start. It counts into DIR/state every
# 20 ms; on SIGUSR1 it digests its memory again into DIR/check. With
# CHILDREN, that many children hold memory of their own too (other bytes),
# digested into DIR/digest-K and, on SIGUSR1 to the group, DIR/check-K.
# A digest file appears whole, once its process is ready for SIGUSR1. On
# SIGUSR2 a process forks a child that digests the memory it inherited into
# DIR/forked[-K].
# MEMORY_WORKLOAD_MB adds that many MiB of other bytes, in one mapping;
# MEMORY_WORKLOAD_SPARSE_MB a private mapping of that many MiB, every other
# page of it written (the image holds it as a run of one-page pieces).
#   python3 memory-workload.py DIR [CHILDREN]
import array, hashlib, mmap, os, random, signal, sys, time

d = sys.argv[1]
children = int(sys.argv[2]) if len(sys.argv) > 2 else 0
suffix = ""
for k in range(1, children + 1):
    if os.fork() == 0:
        suffix = "-%d" % k
        break
random.seed(7 + int(suffix[1:] or 0))
floats = array.array("f", (random.gauss(0, 1) for _ in range(1 << 20)))
blob = bytearray(os.urandom(6 << 20)) + bytearray(9 << 20) + bytearray(floats.tobytes())
big = int(os.environ.get("MEMORY_WORKLOAD_MB", "0"))
if big:
    # Repeated random blocks: quick to make, and to compress.
    blob += bytearray(os.urandom(1 << 20) * big)
sparse = mmap.mmap(-1, int(os.environ.get("MEMORY_WORKLOAD_SPARSE_MB", "0")) << 20 or mmap.PAGESIZE,
                   flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
try:
    sparse.madvise(mmap.MADV_NOHUGEPAGE)  # or the holes fill with a huge page
except OSError:
    pass  # a kernel without transparent huge pages
page = os.urandom(mmap.PAGESIZE)
for at in range(0, len(sparse), 2 * mmap.PAGESIZE):
    sparse[at:at + mmap.PAGESIZE] = page


def digest(name):
    with open(os.path.join(d, name + ".tmp" + suffix), "w") as f:
        h = hashlib.sha256(blob)
        h.update(sparse)
        f.write(h.hexdigest())
    os.rename(os.path.join(d, name + ".tmp" + suffix), os.path.join(d, name + suffix))


def fork_digest(*_):
    child = os.fork()
    if child == 0:
        digest("forked")
        os._exit(0)
    os.waitpid(child, 0)


# The digest is there once the memory is made and SIGUSR1 is handled.
signal.signal(signal.SIGUSR1, lambda *_: digest("check"))
signal.signal(signal.SIGUSR2, fork_digest)
digest("digest")
if suffix:
    while True:
        signal.pause()
# In place, of one size, through a descriptor open all along: an image
# taken with --leave-running and restored after the process counted on
# finds the file CRIU saved as it was (its path and size). A state.tmp
# renamed over state was gone then whenever the dump caught it open.
state = os.open(os.path.join(d, "state"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
i = 0
while True:
    i += 1
    os.pwrite(state, b"%012d\n" % i, 0)
    time.sleep(0.02)
