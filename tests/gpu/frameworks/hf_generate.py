# SPDX-License-Identifier: MIT
# An inference server's loop: a small GPT-2 built from a config (no
# download), generate() on a fixed prompt per request, the tokens to OUT.
#   python3 hf_generate.py OUT STEPS PAUSE_S
import os, sys, time
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from transformers import GPT2Config, GPT2LMHeadModel

out, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=4, n_head=8, n_embd=512, vocab_size=8192)).cuda().eval()
with open(out, "a", buffering=1) as f:
    for step in range(steps):
        prompt = torch.arange(step, step + 16, device="cuda").unsqueeze(0) % 8192
        with torch.no_grad():
            tokens = model.generate(prompt, max_new_tokens=16, do_sample=False,
                                    pad_token_id=0, attention_mask=torch.ones_like(prompt))
        f.write(f"{step} {' '.join(map(str, tokens[0, 16:].tolist()))}\n")
        time.sleep(pause)
