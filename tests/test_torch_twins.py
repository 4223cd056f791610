"""The causal LM and the seq2seq model trained here load into their PyTorch twins (built from torch.nn's own
Transformer layers) through a .safetensors file, and back: the same logits to 1e-6 both ways."""

import numpy as np
import pytest

import tinygrad_attn as ta
from tinygrad_attn.interop import from_torch, to_torch

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch_parity
CONFIG = dict(d_model=16, nhead=4, dim_feedforward=32, dropout=0.0)


class LearnedPositions(torch.nn.Module):
    def __init__(self, dim, max_len):
        super().__init__()
        self.embedding = torch.nn.Embedding(max_len, dim)

    def forward(self, x):
        return x + self.embedding(torch.arange(x.shape[1]))


def _encoder_layer():
    return torch.nn.TransformerEncoderLayer(CONFIG["d_model"], CONFIG["nhead"], CONFIG["dim_feedforward"], 0.0,
                                            batch_first=True, norm_first=True)


class TorchCausalLM(torch.nn.Module):
    def __init__(self, vocab, max_len, layers=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, CONFIG["d_model"])
        self.position = LearnedPositions(CONFIG["d_model"], max_len)
        self.layers = torch.nn.ModuleList(_encoder_layer() for _ in range(layers))
        self.norm = torch.nn.LayerNorm(CONFIG["d_model"])
        self.head = torch.nn.Linear(CONFIG["d_model"], vocab)

    def forward(self, tokens):
        x = self.position(self.embed(tokens))
        causal = torch.nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        for layer in self.layers:
            x = layer(x, src_mask=causal, is_causal=True)
        return self.head(self.norm(x))


class TorchSeq2Seq(torch.nn.Module):
    def __init__(self, src_vocab, tgt_vocab, max_len, layers=2):
        super().__init__()
        d = CONFIG["d_model"]
        self.src_embed, self.tgt_embed = torch.nn.Embedding(src_vocab, d), torch.nn.Embedding(tgt_vocab, d)
        self.src_position, self.tgt_position = LearnedPositions(d, max_len), LearnedPositions(d, max_len)
        self.encoder = torch.nn.ModuleList(_encoder_layer() for _ in range(layers))
        self.decoder = torch.nn.ModuleList(
            torch.nn.TransformerDecoderLayer(d, CONFIG["nhead"], CONFIG["dim_feedforward"], 0.0, batch_first=True,
                                             norm_first=True) for _ in range(layers))
        self.encoder_norm, self.decoder_norm = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, tgt_vocab)

    def forward(self, src, tgt, src_lengths):
        padding = torch.arange(src.shape[1])[None, :] >= src_lengths[:, None]  # True on padding
        x = self.src_position(self.src_embed(src))
        for layer in self.encoder:
            x = layer(x, src_key_padding_mask=padding)
        memory = self.encoder_norm(x)
        y = self.tgt_position(self.tgt_embed(tgt))
        causal = torch.nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
        for layer in self.decoder:
            y = layer(y, memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=padding)
        return self.head(self.decoder_norm(y))


def _train_a_little(model, batch, loss_of, steps=3):
    """A few Adam steps here, so the weights are trained ones, not an initialisation."""
    opt = ta.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        loss_of(model, batch).backward()
        opt.step()


def _save_from_torch(state, path):
    """Written by the safetensors package when installed (the format's reference writer), else by ta.save."""
    try:
        from safetensors.torch import save_file
    except ImportError:
        ta.save({k: v.detach().numpy() for k, v in state.items()}, path)
    else:
        save_file({k: v.detach().contiguous() for k, v in state.items()}, str(path))


def _load_into_torch(path):
    try:
        from safetensors.torch import load_file
    except ImportError:
        return {k: torch.from_numpy(v) for k, v in ta.load(path).items()}
    return load_file(str(path))


def _round_trip(ours, twin, run_ours, run_twin, tmp_path):
    ta.save(to_torch(ours.state_dict()), tmp_path / "ours.safetensors")
    twin.load_state_dict(_load_into_torch(tmp_path / "ours.safetensors"))  # strict: every name matches
    twin.train()  # dropout is 0; train mode keeps PyTorch off its fused inference path
    np.testing.assert_allclose(run_ours(), run_twin().detach().numpy(), atol=1e-6)
    with torch.no_grad():  # change every weight on the PyTorch side, then bring them back
        for p in twin.parameters():
            p.mul_(0.9).add_(0.01)
    _save_from_torch(twin.state_dict(), tmp_path / "twin.safetensors")
    ours.load_state_dict(from_torch(ta.load(tmp_path / "twin.safetensors")))
    np.testing.assert_allclose(run_ours(), run_twin().detach().numpy(), atol=1e-6)


def test_causal_lm_loads_into_its_pytorch_twin_and_back(tmp_path):
    ta.manual_seed(0)
    ours = ta.nn.CausalLM(11, 12, num_layers=2, **CONFIG)
    tokens = np.random.default_rng(0).integers(0, 11, size=(3, 9))
    _train_a_little(ours, tokens, lambda m, t: ta.nn.functional.cross_entropy(
        m(t[:, :-1]).reshape(-1, 11), ta.tensor(t[:, 1:].reshape(-1))))
    twin = TorchCausalLM(11, 12)
    _round_trip(ours, twin, lambda: ours(tokens).detach().numpy(), lambda: twin(torch.tensor(tokens)), tmp_path)


def test_seq2seq_loads_into_its_pytorch_twin_and_back(tmp_path):
    ta.manual_seed(1)
    ours = ta.nn.Seq2SeqTransformer(9, 10, 12, num_encoder_layers=2, num_decoder_layers=2, **CONFIG)
    rng = np.random.default_rng(1)
    src, tgt, lengths = rng.integers(0, 9, size=(3, 7)), rng.integers(0, 10, size=(3, 6)), np.array([7, 4, 1])
    _train_a_little(ours, (src, tgt), lambda m, b: ta.nn.functional.cross_entropy(
        m(b[0], b[1][:, :-1], lengths).reshape(-1, 10), ta.tensor(b[1][:, 1:].reshape(-1))))
    twin = TorchSeq2Seq(9, 10, 12)
    _round_trip(ours, twin, lambda: ours(src, tgt, lengths).detach().numpy(),
                lambda: twin(torch.tensor(src), torch.tensor(tgt), torch.tensor(lengths)), tmp_path)


def test_names_map_both_ways_without_loss():
    ta.manual_seed(2)
    ours = ta.nn.Seq2SeqTransformer(9, 10, 12, **CONFIG)
    state = {k: v.numpy() for k, v in ours.state_dict().items()}
    back = from_torch(to_torch(state))
    assert set(back) == set(state) and all(np.array_equal(back[k], state[k]) for k in state)
    assert set(to_torch(state)) == set(TorchSeq2Seq(9, 10, 12).state_dict())
