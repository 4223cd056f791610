"""A character-level language model in PyTorch's word-language-model idioms: nn.TransformerEncoder over
nn.TransformerEncoderLayer (sequence-first, post-norm, as PyTorch's defaults), the causal mask from
nn.Transformer.generate_square_subsequent_mask, a sinusoidal positional-encoding buffer, batchify /
get_batch over one long column of text, log_softmax with nll_loss, SGD with gradient clipping and a
StepLR schedule.

Its PyTorch twin, examples/pytorch/char_transformer.py, differs from this file in the import lines only; the
tests run both from the same weights and compare the losses step by step.
"""
# ruff: noqa: I001  (the imports are the only lines the two twins do not share; kept in that order)

import math

import numpy as np

import tinygrad_attn as torch  # the port: PyTorch's names, tinygrad_attn underneath
import tinygrad_attn.nn as nn
import tinygrad_attn.nn.functional as F
# --- end of imports ---

TEXT = ("the keys answer the queries, the values carry what is read. "
        "each head reads its own part of the vector and the output mixes them again. ")


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))  # (max_len, 1, d_model)

    def forward(self, x):  # x: (T, B, d_model)
        return self.dropout(x + self.pe[: x.size(0), :])


class TransformerModel(nn.Module):
    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.0):
        super().__init__()
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        encoder_layers = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(encoder_layers, nlayers)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, src_mask):  # src: (T, B) token ids
        src = self.encoder(src) * math.sqrt(self.ninp)
        output = self.transformer_encoder(self.pos_encoder(src), src_mask)  # (T, B, ninp)
        return F.log_softmax(self.decoder(output), dim=-1)  # (T, B, ntoken)

    @torch.no_grad()
    def generate(self, prompt, max_new_tokens):  # prompt: (T, 1), greedy
        for _ in range(max_new_tokens):
            mask = nn.Transformer.generate_square_subsequent_mask(prompt.size(0))
            next_token = self(prompt, mask)[-1].argmax(dim=-1, keepdim=True)  # (1, 1)
            prompt = torch.cat([prompt, next_token], dim=0)
        return prompt


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data[: nbatch * bsz].view(bsz, -1).t().contiguous()  # (len / bsz, bsz): one column per stream


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].reshape(-1)


def train(model, train_data, ntokens, steps, bptt=16):
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 50, gamma=0.95)
    losses, i = [], 0
    model.train()
    for _ in range(steps):
        if i >= train_data.size(0) - 2:
            i = 0
        data, targets = get_batch(train_data, i, bptt)
        src_mask = nn.Transformer.generate_square_subsequent_mask(data.size(0))
        output = model(data, src_mask)
        loss = F.nll_loss(output.view(-1, ntokens), targets)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        i += bptt
    return losses


def encode(text):
    chars = sorted(set(TEXT))
    return torch.tensor(np.array([chars.index(c) for c in text]), dtype=torch.long), chars


def main(steps=30, weights=None):
    torch.manual_seed(0)
    data, chars = encode(TEXT * 4)
    model = TransformerModel(len(chars), 32, 4, 64, 2)
    if weights is not None:
        model.load_state_dict({name: torch.tensor(value) for name, value in weights.items()})
    losses = train(model, batchify(data, 8), len(chars), steps)
    model.eval()
    prompt = torch.tensor([[chars.index(c)] for c in "the "], dtype=torch.long)  # (T, 1)
    return model, losses, model.generate(prompt, 8)[:, 0]


if __name__ == "__main__":
    model, losses, sample = main(steps=300)
    chars = sorted(set(TEXT))
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    print("greedy continuation of 'the ':", repr("".join(chars[i] for i in sample.tolist())))
