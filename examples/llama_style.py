"""A tiny Llama-style language model on characters, in PyTorch's idioms (llama2.c's shape): RMSNorm, SwiGLU,
rotary position embeddings in their interleaved cos/sin form, grouped-query attention (`enable_gqa`), and a
sliding window on every other layer, trained on a few sentences of text.

Its PyTorch twin, examples/pytorch/llama_style.py, differs from this file in the import lines only; the
tests run both from the same weights and compare the losses step by step.
"""
# ruff: noqa: I001  (the imports are the only lines the two twins do not share; kept in that order)

import numpy as np

import tinygrad_attn as torch  # the port: PyTorch's names, tinygrad_attn underneath
import tinygrad_attn.nn as nn
import tinygrad_attn.nn.functional as F
# --- end of imports ---

TEXT = ("attention reads every earlier position and weighs it by how well its key answers the query. "
        "the gradient flows back through the softmax into every score, and from the scores into q and k. ")


def precompute_freqs(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))  # (dim / 2,)
    t = torch.arange(end).float()
    freqs = torch.outer(t, freqs)  # (end, dim / 2): position m times theta_i
    return torch.cos(freqs), torch.sin(freqs)


def apply_rotary_emb(xq, xk, freqs_cos, freqs_sin):
    # each pair (x_2i, x_2i+1) turned by its angle: what llama's complex multiplication computes
    xq_r, xq_i = xq.float().reshape(xq.shape[:-1] + (-1, 2)).unbind(-1)  # (B, T, H, d / 2) each
    xk_r, xk_i = xk.float().reshape(xk.shape[:-1] + (-1, 2)).unbind(-1)
    freqs_cos = freqs_cos.view(1, freqs_cos.shape[0], 1, freqs_cos.shape[1])  # (1, T, 1, d / 2)
    freqs_sin = freqs_sin.view(1, freqs_sin.shape[0], 1, freqs_sin.shape[1])
    xq_out = torch.stack([xq_r * freqs_cos - xq_i * freqs_sin, xq_r * freqs_sin + xq_i * freqs_cos], dim=-1)
    xk_out = torch.stack([xk_r * freqs_cos - xk_i * freqs_sin, xk_r * freqs_sin + xk_i * freqs_cos], dim=-1)
    return xq_out.flatten(3).type_as(xq), xk_out.flatten(3).type_as(xk)  # (B, T, H, d)


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, window):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim, self.window = n_heads, n_kv_heads, dim // n_heads, window
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)  # fewer kv heads: grouped-query
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, freqs_cos, freqs_sin):
        bsz, seqlen, _ = x.shape
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)  # (B, T, H, d)
        xk = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)  # (B, T, Hkv, d)
        xv = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cos, freqs_sin)
        xq, xk, xv = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)  # (B, H, T, d), (B, Hkv, T, d)
        i = torch.arange(seqlen)
        distance = i.view(-1, 1) - i.view(1, -1)  # query position - key position
        allowed = distance >= 0  # causal
        if self.window is not None:
            allowed = allowed & (distance < self.window)  # and no further back than the window
        out = F.scaled_dot_product_attention(xq, xk, xv, attn_mask=allowed, enable_gqa=True)  # (B, H, T, d)
        return self.wo(out.transpose(1, 2).contiguous().view(bsz, seqlen, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))  # SwiGLU


class TransformerBlock(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, hidden_dim, window):
        super().__init__()
        self.attention = Attention(dim, n_heads, n_kv_heads, window)
        self.feed_forward = FeedForward(dim, hidden_dim)
        self.attention_norm = nn.RMSNorm(dim, eps=1e-5)
        self.ffn_norm = nn.RMSNorm(dim, eps=1e-5)

    def forward(self, x, freqs_cos, freqs_sin):
        h = x + self.attention(self.attention_norm(x), freqs_cos, freqs_sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, vocab_size, max_seq_len, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=64,
                 windows=(4, None)):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab_size, dim)
        self.layers = nn.ModuleList(TransformerBlock(dim, n_heads, n_kv_heads, hidden_dim, windows[i % len(windows)])
                                    for i in range(n_layers))
        self.norm = nn.RMSNorm(dim, eps=1e-5)
        self.output = nn.Linear(dim, vocab_size, bias=False)
        freqs_cos, freqs_sin = precompute_freqs(dim // n_heads, max_seq_len)
        self.register_buffer("freqs_cos", freqs_cos, persistent=False)
        self.register_buffer("freqs_sin", freqs_sin, persistent=False)

    def forward(self, tokens, targets=None):
        _, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        freqs_cos, freqs_sin = self.freqs_cos[:seqlen], self.freqs_sin[:seqlen]
        for layer in self.layers:
            h = layer(h, freqs_cos, freqs_sin)
        logits = self.output(self.norm(h))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.freqs_cos.shape[0]:])
            idx_next = torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)  # greedy
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def batches(data, block_size, batch_size, steps):
    rng = np.random.default_rng(0)  # the same windows for both twins
    for _ in range(steps):
        starts = rng.integers(0, len(data) - block_size - 1, batch_size)
        chunk = np.stack([data[s : s + block_size + 1] for s in starts])
        yield torch.tensor(chunk[:, :-1], dtype=torch.long), torch.tensor(chunk[:, 1:], dtype=torch.long)


def train(model, data, steps):
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    losses = []
    model.train()
    for x, y in batches(data, 16, 8, steps):
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def encode(text):
    chars = sorted(set(TEXT))
    return np.array([chars.index(c) for c in text]), chars


def main(steps=30, weights=None):
    torch.manual_seed(0)
    data, chars = encode(TEXT)
    model = Transformer(vocab_size=len(chars), max_seq_len=16)
    if weights is not None:
        model.load_state_dict({name: torch.tensor(value) for name, value in weights.items()})
    losses = train(model, data, steps)
    model.eval()
    prompt = torch.tensor([[chars.index(c) for c in "the "]], dtype=torch.long)
    return model, losses, model.generate(prompt, 8)


if __name__ == "__main__":
    model, losses, sample = main(steps=300)
    chars = sorted(set(TEXT))
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    print("greedy continuation of 'the ':", repr("".join(chars[i] for i in sample[0].tolist())))
