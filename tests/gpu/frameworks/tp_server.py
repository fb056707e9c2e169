# SPDX-License-Identifier: MIT
# A tensor-parallel inference server over NCCL, one rank per GPU: every layer
# is an MLP whose first weight is split by columns and second by rows across
# the ranks, with an all-reduce of the partial outputs per layer (the
# Megatron layout vLLM and SGLang use). Rank 0 answers GET /generate?step=N
# over HTTP: it broadcasts the request to the other ranks, all of them run
# TOKENS greedy steps, and it answers with each step's token and checksum.
# Requests reach the other ranks on a CPU (gloo) group, as vLLM and SGLang
# pass them on a CPU channel: an idle rank waits on its CPU, not inside a GPU
# collective, which the driver's lock would wait on for ever (measured:
# requests broadcast over NCCL made every checkpoint of an idle server time
# out in its lock).
# In the matrix the launcher (not a CUDA process) asks once a step over one
# keep-alive connection and writes each answer to OUT.
#   python3 tp_server.py OUT STEPS PAUSE_S [WORLD]
#   python3 tp_server.py --bench REQUESTS [WORLD]  (prints ms per token)
# TP_HIDDEN, TP_LAYERS size the model (default 4096, 8: 1 GiB of fp16 a rank).
# TP_REQUESTS=nccl passes requests in an NCCL broadcast instead, as
# Megatron-LM's text-generation server does: an idle rank then waits inside
# a GPU collective that rank 0 starts only with the next request.
import os, socket, sys, time
import http.client

HIDDEN = int(os.environ.get("TP_HIDDEN", "4096"))
LAYERS = int(os.environ.get("TP_LAYERS", "8"))
TOKENS = 16


def build(rank, world):
    import torch

    g = torch.Generator(device="cuda").manual_seed(1000 + rank)
    ff = 4 * HIDDEN // world
    scale = HIDDEN ** -0.5
    w1 = [(torch.randn(HIDDEN, ff, device="cuda", generator=g) * scale).half() for _ in range(LAYERS)]
    w2 = [(torch.randn(ff, HIDDEN, device="cuda", generator=g) * scale).half() for _ in range(LAYERS)]
    emb = (torch.randn(256, HIDDEN, device="cuda", generator=torch.Generator(device="cuda").manual_seed(7))).half()
    return w1, w2, emb


def generate(model, first):
    """TOKENS greedy steps from token `first`: the same on every rank."""
    import torch
    import torch.distributed as dist

    w1, w2, emb = model
    token, out = first, []
    for _ in range(TOKENS):
        x = emb[token].unsqueeze(0)
        for a, b in zip(w1, w2):
            y = torch.relu(x @ a) @ b
            dist.all_reduce(y)
            x = torch.nn.functional.layer_norm(x + y, (HIDDEN,))
        logits = x[0, :256].float()
        token = int(logits.argmax())
        out.append(f"{token}:{logits.sum().item().hex()}")
    return " ".join(out)


def serve(rank, world, port, ready):
    import torch
    import torch.distributed as dist
    from http.server import BaseHTTPRequestHandler, HTTPServer

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    cpu_group = dist.new_group(backend="gloo")
    model = build(rank, world)
    request = torch.zeros(2, dtype=torch.int64)
    if os.environ.get("TP_REQUESTS") == "nccl":
        cpu_group, request = None, request.cuda()
    if rank != 0:
        while True:
            dist.broadcast(request, 0, group=cpu_group)
            if request[1].item():
                break
            generate(model, int(request[0].item()))
        dist.destroy_process_group()
        return

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            quit = self.path == "/quit"
            request.copy_(torch.tensor([0 if quit else int(self.path.rsplit("=", 1)[1]) % 256, int(quit)]))
            dist.broadcast(request, 0, group=cpu_group)
            body = b"bye" if quit else generate(model, int(request[0].item())).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            if quit:
                self.server.done = self.close_connection = True

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", port), Handler)
    server.done = False
    ready.set()
    while not server.done:
        server.handle_request()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ask(conn, path):
    conn.request("GET", path)
    return conn.getresponse().read().decode()


def main():
    import torch
    import torch.multiprocessing as mp

    bench = sys.argv[1] == "--bench"
    args = sys.argv[2:] if bench else sys.argv[4:]
    world = int(args[bench]) if len(args) > bench else torch.cuda.device_count()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    port = free_port()
    ready = mp.get_context("spawn").Event()
    ctx = mp.start_processes(serve, args=(world, port, ready), nprocs=world, join=False, start_method="spawn")
    if not ready.wait(600):
        sys.exit("rank 0 never served")
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    if bench:
        requests = int(args[0])
        ask(conn, "/generate?step=0")  # warm up
        t0 = time.perf_counter()
        for step in range(requests):
            ask(conn, f"/generate?step={step}")
        ms = (time.perf_counter() - t0) * 1000 / (requests * TOKENS)
        print(f"tp_server: {ms:.3f} ms per token ({world} ranks, hidden {HIDDEN}, {LAYERS} layers)")
    else:
        out, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
        with open(out, "a", buffering=1) as f:
            for step in range(steps):
                f.write(f"{step} {ask(conn, f'/generate?step={step}')}\n")
                time.sleep(pause)
    ask(conn, "/quit")
    conn.close()
    while not ctx.join(600):
        pass


if __name__ == "__main__":
    main()
