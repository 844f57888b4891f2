"""A causal language model training program that the tuner does not ship as an example: a
Llama-style decoder from Hugging Face Transformers built from its config (random weights, nothing
downloaded), AdamW, optional bf16 autocast, on seeded random token ids. A sample is one sequence
of `--seq-len` tokens (512 by default), its own labels (the model shifts them). It speaks the
tuner's report protocol written out by hand (train_loop.py beside it), as a user's own program
would.

    python3 scripts/transformer/train_lm.py --batch-size 16 --amp on --steps 20 --warmup 2
    python3 scripts/transformer/train_lm.py --model tiny --device cpu --steps 2 --workers 0

The loop and what it reports are train_loop.py's: per step the samples (sequences), the step
time, its forward/backward/optimizer parts and the peak memory reserved and allocated; after the first step
the bytes of the parameters, their gradients and AdamW's state. `--model` names a shape:
llama-134m (12 layers of width 768, an MLP of 2048, 12 heads, a vocabulary of 32,000 and an
untied output layer: GPT-2 small's size in Llama's form), or tiny (to check the program on a
CPU).
"""

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import sys  # noqa: E402

from train_loop import add_training_args, fork_here, positive, setup, train  # noqa: E402

SHAPES = {
    "llama-134m": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
                       num_attention_heads=12, vocab_size=32000),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, vocab_size=1000),
}


def add_model_args(p):
    """The model's flags (the Lightning and Hugging Face finders beside this take them too)."""
    p.add_argument("--model", choices=sorted(SHAPES), default="llama-134m")
    p.add_argument("--seq-len", type=positive, default=512, help="tokens per sequence")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_training_args(p, batch_size=16)
    add_model_args(p)
    return p.parse_args(argv)


def model(name, seq_len):
    """The decoder of shape `name`, randomly initialized (seeded) in fp32 on the CPU (autocast
    casts its matmuls), with PyTorch's fused attention and no key/value cache (training has no
    use for one)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)

    config = LlamaConfig(**SHAPES[name], max_position_embeddings=seq_len, use_cache=False,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config)


def tokens(length, seq_len, vocab_size, seed=0):
    """`length` seeded random sequences of token ids, one made per sample."""
    import torch
    from torch.utils.data import Dataset

    class Tokens(Dataset):
        def __len__(self):
            return length

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(seed * 1_000_003 + i)
            return torch.randint(vocab_size, (seq_len,), generator=g)

    return Tokens()


def loss_of(net, ids):
    """The next-token loss of a batch of sequences (the model shifts the labels)."""
    return net(input_ids=ids, labels=ids).loss


def main(argv=None):
    args = parse_args(argv)
    net = model(args.model, args.seq_len)
    # Under the tuner each trial starts here, forked (the script must call fork_here itself):
    # the model above is built once.
    started = time.perf_counter() if fork_here() else STARTED
    args = parse_args(argv)  # the trial's own
    torch, report = setup("train_lm.py", args)
    vocab_size = SHAPES[args.model]["vocab_size"]
    return train(args, torch, report, net,
                 lambda length: tokens(length, args.seq_len, vocab_size), loss_of,
                 "%s seq %d" % (args.model, args.seq_len), started)


if __name__ == "__main__":
    sys.exit(main())
