# SPDX-License-Identifier: MIT
# A CUDA tensor shared with a spawned child through torch.multiprocessing
# (CUDA IPC underneath): the child scales the shared weights each step and
# answers through a Queue; the parent writes each step's sum to OUT.
#   python3 pt_ipc.py OUT STEPS PAUSE_S
import sys, time
import torch
import torch.multiprocessing as mp


def child(w, requests, answers):
    while True:
        step = requests.get()
        if step is None:
            break
        w.mul_(1.0001)
        torch.cuda.synchronize()
        answers.put(step)


if __name__ == "__main__":
    mp.set_start_method("spawn")
    out, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    torch.manual_seed(0)
    w = torch.randn(1 << 20, device="cuda")
    requests, answers = mp.Queue(), mp.Queue()
    p = mp.Process(target=child, args=(w, requests, answers))
    p.start()
    with open(out, "a", buffering=1) as f:
        for step in range(steps):
            requests.put(step)
            answers.get()
            f.write(f"{step} {w.sum().item().hex()}\n")
            time.sleep(pause)
    requests.put(None)
    p.join()
