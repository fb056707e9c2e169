# SPDX-License-Identifier: MIT
# An HTTP inference server on the GPU: a GPT-2-shaped model built from a
# config with seeded weights (no download) answers GET /generate?step=N
# with the greedy tokens for that step's prompt. In the matrix, a client
# child asks once a step over one keep-alive connection and writes each
# answer to OUT; the server ends when the client does.
#   python3 hf_server.py OUT STEPS PAUSE_S
#   python3 hf_server.py --serve PORT [LAYERS EMBD]   (serves until killed)
import os, sys, threading, time
import http.client
from http.server import BaseHTTPRequestHandler, HTTPServer


def client(port, out, steps, pause):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    with open(out, "a", buffering=1) as f:
        for step in range(steps):
            conn.request("GET", f"/generate?step={step}")
            f.write(f"{step} {conn.getresponse().read().decode()}\n")
            time.sleep(pause)


def make_server(port, layers, embd):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(n_layer=layers, n_head=max(1, embd // 64), n_embd=embd, vocab_size=8192)
    model = GPT2LMHeadModel(config).cuda().eval()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            step = int(self.path.rsplit("=", 1)[1])
            prompt = torch.arange(step, step + 16, device="cuda").unsqueeze(0) % 8192
            with torch.no_grad():
                tokens = model.generate(prompt, max_new_tokens=16, do_sample=False, pad_token_id=0,
                                        attention_mask=torch.ones_like(prompt))
            body = " ".join(map(str, tokens[0, 16:].tolist())).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return HTTPServer(("127.0.0.1", port), Handler)


if __name__ == "__main__":
    if sys.argv[1] == "--client":
        client(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    elif sys.argv[1] == "--serve":
        layers, embd = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (4, 512)
        make_server(int(sys.argv[2]), layers, embd).serve_forever()
    else:
        import subprocess
        server = make_server(0, 4, 512)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.server_address[1]
        sys.exit(subprocess.call([sys.executable, __file__, "--client", str(port), *sys.argv[1:4]]))
