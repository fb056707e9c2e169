# SPDX-License-Identifier: MIT
# A CPU workload with memory worth compressing: random bytes, zeros and a
# table of floats, digested at the start. It counts into DIR/state every
# 20 ms; on SIGUSR1 it digests its memory again into DIR/check.
#   python3 memory-workload.py DIR
import array, hashlib, os, random, signal, sys, time

d = sys.argv[1]
random.seed(7)
floats = array.array("f", (random.gauss(0, 1) for _ in range(1 << 20)))
blob = bytearray(os.urandom(6 << 20)) + bytearray(9 << 20) + bytearray(floats.tobytes())
with open(os.path.join(d, "digest"), "w") as f:
    f.write(hashlib.sha256(blob).hexdigest())


def check(*_):
    with open(os.path.join(d, "check.tmp"), "w") as f:
        f.write(hashlib.sha256(blob).hexdigest())
    os.rename(os.path.join(d, "check.tmp"), os.path.join(d, "check"))


signal.signal(signal.SIGUSR1, check)
i = 0
while True:
    i += 1
    with open(os.path.join(d, "state.tmp"), "w") as f:
        f.write(str(i))
    os.rename(os.path.join(d, "state.tmp"), os.path.join(d, "state"))
    time.sleep(0.02)
