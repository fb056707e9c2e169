# A Python multiprocessing tree (a Queue and an Event, POSIX semaphores in
# /dev/shm underneath): a child counts into the queue, the parent appends
# each number to OUT and ends with "GAP" when one is missing or repeated.
# usage: mp-workload.py OUT spawn|fork
import multiprocessing as mp
import sys
import time


def worker(q, ev):
    i = 0
    while not ev.is_set():
        q.put(i)
        i += 1
        time.sleep(0.02)


if __name__ == "__main__":
    mp.set_start_method(sys.argv[2])
    q, ev = mp.Queue(), mp.Event()
    mp.Process(target=worker, args=(q, ev)).start()
    expect = 0
    with open(sys.argv[1], "a") as out:
        while True:
            v = q.get()
            if v != expect:
                out.write("GAP %d %d\n" % (expect, v))
                out.flush()
                sys.exit(1)
            out.write("%d\n" % v)
            out.flush()
            expect += 1
