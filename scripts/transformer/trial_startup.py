#!/usr/bin/env python3
"""Where a trial's start-up goes when several start at once: imports, CUDA's first context,
building ViT-B/16 (timm, weights initialised on the CPU, then moved to the GPU) and its first
bf16 step of 8 images. Prints one JSON line. Run it on one GPU alone, then on every GPU at once:

    CUDA_VISIBLE_DEVICES=0 python3 scripts/transformer/trial_startup.py alone
    for g in 0 1 2 3; do CUDA_VISIBLE_DEVICES=$g python3 scripts/transformer/trial_startup.py four & done; wait
"""
import json, os, sys, time
t0 = time.time()
import torch, timm
t1 = time.time()
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t2 = time.time()
m = timm.create_model("vit_base_patch16_224").cuda()
t3 = time.time()
x = torch.randn(8, 3, 224, 224, device="cuda")
with torch.autocast("cuda", dtype=torch.bfloat16):
    y = m(x)
y.float().sum().backward(); torch.cuda.synchronize()
t4 = time.time()
print(json.dumps({"tag": sys.argv[1], "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
  "import_s": round(t1 - t0, 2), "cuda_init_s": round(t2 - t1, 2), "model_s": round(t3 - t2, 2),
  "first_step_s": round(t4 - t3, 2), "total_s": round(t4 - t0, 2)}), flush=True)
