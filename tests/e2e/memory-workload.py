# SPDX-License-Identifier: MIT
# A CPU workload with memory worth compressing: random bytes, zeros and a
# table of floats, digested at the start. It counts into DIR/state every
# 20 ms; on SIGUSR1 it digests its memory again into DIR/check. With
# CHILDREN, that many children hold memory of their own too (other bytes),
# digested into DIR/digest-K and, on SIGUSR1 to the group, DIR/check-K.
# A digest file appears whole, once its process is ready for SIGUSR1.
# MEMORY_WORKLOAD_MB adds that many MiB of other bytes, in one mapping.
#   python3 memory-workload.py DIR [CHILDREN]
import array, hashlib, os, random, signal, sys, time

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


def digest(name):
    with open(os.path.join(d, name + ".tmp" + suffix), "w") as f:
        f.write(hashlib.sha256(blob).hexdigest())
    os.rename(os.path.join(d, name + ".tmp" + suffix), os.path.join(d, name + suffix))


# The digest is there once the memory is made and SIGUSR1 is handled.
signal.signal(signal.SIGUSR1, lambda *_: digest("check"))
digest("digest")
if suffix:
    while True:
        signal.pause()
i = 0
while True:
    i += 1
    with open(os.path.join(d, "state.tmp"), "w") as f:
        f.write(str(i))
    os.rename(os.path.join(d, "state.tmp"), os.path.join(d, "state"))
    time.sleep(0.02)
