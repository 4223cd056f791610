"""Build the notebooks that follow a source tutorial cell by cell, in English and French, with their outputs.

Each notebook is written once below: prose as {"en": ..., "fr": ...}, code with its comments and strings in
both languages as «english|français» (the code itself is the same). Running this file writes
docs/notebooks/en/ and fr/ and executes them, so the outputs and pictures are saved in the files; the
tests run them again and compare.

    python docs/notebooks/build.py
"""

from __future__ import annotations

import pathlib
import re

import nbformat
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent
PAIR = re.compile(r"«(.*?)\|(.*?)»", re.S)


def _code(source: str, lang: str) -> str:
    return PAIR.sub(lambda m: m.group(1) if lang == "en" else m.group(2), source).strip("\n")


def build(name: dict, cells: list, execute: bool = True) -> None:
    for lang in ("en", "fr"):
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
        for cell in cells:
            if isinstance(cell, dict):
                nb.cells.append(nbformat.v4.new_markdown_cell(cell[lang].strip("\n")))
            else:
                nb.cells.append(nbformat.v4.new_code_cell(_code(cell, lang)))
        if execute:
            NotebookClient(nb, timeout=120, kernel_name="python3",
                           resources={"metadata": {"path": str(HERE)}}).execute()
        nbformat.write(nb, HERE / lang / name[lang])


# --- notebook 01: tutorial 000, multi-head attention in PyTorch, step by step ------------------------------

TUTORIAL_000 = [
    {"en": """
# 01 · Multi-head attention, step by step (tutorial 000)

This notebook follows tutorial 000 (in `../shared/seeds/`, in French): its formulas, its `Attention`
function, its `MHAttention` module, its shapes and its mask, in its order, with this library in place of
PyTorch. Where the tutorial goes wrong, the cell shows it with numbers, then fixes it. Then it goes on where
the tutorial stops: the backward pass of what it built, derived and checked.""",
     "fr": """
# 01 · L'attention multi-têtes, pas à pas (tutoriel 000)

Ce carnet suit le tutoriel 000 (dans `../shared/seeds/`) : ses formules, sa fonction `Attention`, son module
`MHAttention`, ses formes et son masque, dans son ordre, avec cette bibliothèque à la place de PyTorch. Là
où le tutoriel se trompe, la cellule le montre, chiffres à l'appui, puis corrige. Ensuite il continue là où
le tutoriel s'arrête : la passe arrière de ce qu'il a construit, dérivée et vérifiée."""},
    {"en": """
## Step 1 and 2: projections, then the split into heads

The tutorial's first two formulas: Q = X W_Q (likewise K and V), then, for head i, "Q_i = Q W_Qi". The
second projects twice. A head's query is X W_Qi where W_Qi is **the block of d columns of W_Q** that
belongs to head i: taking columns of Q is the whole split, no second matrix.""",
     "fr": """
## Étapes 1 et 2 : les projections, puis la séparation en têtes

Les deux premières formules du tutoriel : Q = X W_Q (de même K et V), puis, pour la tête i,
« Q_i = Q W_Qi ». La seconde projette deux fois. La requête d'une tête est X W_Qi où W_Qi est **le bloc de d
colonnes de W_Q** qui revient à la tête i : prendre des colonnes de Q, c'est toute la séparation, sans
seconde matrice."""},
    """
import numpy as np
import matplotlib.pyplot as plt
import tinygrad_attn as ta
from tinygrad_attn import functional as F

batch_size, seq_len, d_model, num_heads = 1, 5, 64, 4      # «the tutorial's sizes|les tailles du tutoriel»
dh = d_model // num_heads
ta.manual_seed(0)
embedding = ta.randn(batch_size, seq_len, d_model, dtype=ta.float64)
w_q = ta.randn(d_model, d_model, dtype=ta.float64) / 8
q = embedding @ w_q                                          # Q = X W_Q   (1, 5, 64)
head_1 = q[..., 1 * dh:2 * dh]                               # «head 1: columns 16-31 of Q|tête 1 : colonnes 16-31 de Q»
print("Q", q.shape, "«head 1|tête 1»", head_1.shape)
assert np.allclose(head_1.numpy(), (embedding @ w_q[:, 1 * dh:2 * dh]).numpy())   # = X W_Q1
""",
    {"en": """
## Step 3: the tutorial's `Attention` function

Scores `q k^T / sqrt(dh)`, the mask applied with `masked_fill(mask == 0, -1e9)`, a softmax, **dropout on the
weights, and the dropped weights returned**. In training mode (dropout 0.1), the returned "attention
weights" no longer sum to 1 per row:""",
     "fr": """
## Étape 3 : la fonction `Attention` du tutoriel

Les scores `q k^T / sqrt(dh)`, le masque appliqué par `masked_fill(mask == 0, -1e9)`, une softmax, **le
dropout sur les poids, et les poids abîmés renvoyés**. En mode entraînement (dropout 0,1), les « poids
d'attention » renvoyés n'ont plus une somme de 1 par ligne :"""},
    """
def Attention(q, k, v, dh, mask=None, dropout=None):
    scores = q @ k.transpose(-2, -1) / np.sqrt(dh)
    if mask is not None:
        mask = np.expand_dims(mask, 1)
        scores = scores.masked_fill(mask == 0, -1e9)
    scores = F.softmax(scores, dim=-1)
    if dropout is not None:
        scores = dropout(scores)                     # «the tutorial's mistake: weights after dropout|l'erreur du tutoriel : les poids après le dropout»
    output = scores @ v
    return output, scores

dropout = ta.nn.Dropout(0.1)                         # «training mode, as the tutorial leaves it|mode entraînement, comme le laisse le tutoriel»
x4 = ta.randn(1, 4, 5, dh, dtype=ta.float64)
_, weights = Attention(x4, x4, x4, dh, dropout=dropout)
sums = weights.numpy().sum(-1)
print("«row sums from|sommes des lignes de»", sums.min().round(3), "«to|à»", sums.max().round(3))
""",
    {"en": """
The fix: return P itself and apply dropout only to what multiplies V. This library's
`scaled_dot_product_attention` does so:""",
     "fr": """
La correction : renvoyer P elle-même, et n'appliquer le dropout qu'à ce qui multiplie V. C'est ce que fait
`scaled_dot_product_attention` ici :"""},
    """
_, weights = F.scaled_dot_product_attention(x4, x4, x4, dropout_p=0.1, return_weights=True)
print("«row sums|sommes des lignes»", weights.numpy().sum(-1).round(6).ravel()[:5])
assert np.allclose(weights.numpy().sum(-1), 1.0)
""",
    {"en": """
## Step 4: the `MHAttention` module

The tutorial projects with three `Linear` layers, then writes `q.view(batch, heads, -1, dh)`. That reshape
cuts the (5, 64) block of each sequence in the wrong order: "head 0" gets the first rows whole, mixing
positions into heads. The right split is `view(batch, seq_len, heads, dh).transpose(1, 2)`. Same weights,
two splits, against this library's `MultiHeadAttention`:""",
     "fr": """
## Étape 4 : le module `MHAttention`

Le tutoriel projette avec trois couches `Linear`, puis écrit `q.view(batch, heads, -1, dh)`. Ce reshape
découpe le bloc (5, 64) de chaque séquence dans le mauvais ordre : la « tête 0 » reçoit les premières lignes
entières, les positions se mélangent entre les têtes. La bonne séparation est
`view(batch, seq_len, heads, dh).transpose(1, 2)`. Mêmes poids, deux séparations, face au
`MultiHeadAttention` de la bibliothèque :"""},
    """
class MHAttention(ta.nn.Module):
    def __init__(self, d_model, n_heads, droprate=0.0, right_split=False):
        self.d_model, self.n_heads, self.dh, self.right_split = d_model, n_heads, d_model // n_heads, right_split
        self.q_matrix = ta.nn.Linear(d_model, d_model)
        self.k_matrix = ta.nn.Linear(d_model, d_model)
        self.v_matrix = ta.nn.Linear(d_model, d_model)
        self.dropout = ta.nn.Dropout(droprate)
        self.fc1 = ta.nn.Linear(d_model, d_model)

    def split(self, t):
        if self.right_split:                       # (B, T, E) -> (B, T, H, dh) -> (B, H, T, dh)
            return t.view(t.size(0), -1, self.n_heads, self.dh).transpose(1, 2)
        return t.view(t.size(0), self.n_heads, -1, self.dh)   # «the tutorial's split|la séparation du tutoriel»

    def forward(self, q, k, v, mask=None):
        q, k, v = self.split(self.q_matrix(q)), self.split(self.k_matrix(k)), self.split(self.v_matrix(v))
        out, attention_weights = Attention(q, k, v, self.dh, mask, self.dropout)
        if self.right_split:
            out = out.transpose(1, 2)              # «heads back side by side|les têtes remises côte à côte»
        return self.fc1(out.reshape(q.size(0), -1, self.d_model)), attention_weights

ta.manual_seed(1)
theirs = MHAttention(d_model, num_heads).to(ta.float64)
fixed = MHAttention(d_model, num_heads, right_split=True).to(ta.float64)
fixed.load_state_dict(theirs.state_dict())
reference = ta.nn.MultiHeadAttention(d_model, num_heads).to(ta.float64)
for ours, mine in (("q_proj", "q_matrix"), ("k_proj", "k_matrix"), ("v_proj", "v_matrix"), ("out_proj", "fc1")):
    getattr(reference, ours).load_state_dict(getattr(theirs, mine).state_dict())
want, _ = reference(embedding)
for name, module in (("«tutorial's split|séparation du tutoriel»", theirs), ("«right split|bonne séparation»", fixed)):
    out, attention_weights = module(embedding, embedding, embedding)
    print(f"{name:>28}: «largest difference from MultiHeadAttention|plus grand écart à MultiHeadAttention»",
          f"{np.abs(out.numpy() - want.numpy()).max():.2e}")
""",
    {"en": """
The shapes the tutorial printed, from the fixed module:""",
     "fr": """
Les formes que le tutoriel affichait, avec le module corrigé :"""},
    """
output, attention_weights = fixed(embedding, embedding, embedding)
print("Output:", output.shape)
print("Attentions:", attention_weights.shape)
""",
    {"en": """
## Step 5: residual connection and layer norm

The tutorial states Output = LayerNorm(X + MultiHead(Q, K, V)) but never computes it. Here it is: every
token's 64 features come out with mean 0 and standard deviation 1.""",
     "fr": """
## Étape 5 : connexion résiduelle et normalisation de couche

Le tutoriel écrit Sortie = LayerNorm(X + MultiTête(Q, K, V)) mais ne la calcule jamais. La voici : les 64
composantes de chaque jeton ressortent de moyenne 0 et d'écart type 1."""},
    """
norm = ta.nn.LayerNorm(d_model).to(ta.float64)
out = norm(embedding + output)                     # (1, 5, 64)
print(out.shape, "«mean|moyenne»", out.numpy().mean(-1).round(6).ravel(),
      "«std|écart type»", out.numpy().std(-1).round(4).ravel())
""",
    {"en": """
## Masked multi-head attention

The tutorial's `generate_mask(5)` writes 0 where a position may look and -inf where it may not:""",
     "fr": """
## L'attention multi-têtes masquée

Le `generate_mask(5)` du tutoriel écrit 0 là où une position peut regarder et -inf là où elle ne peut
pas :"""},
    """
def generate_mask(seq_len):
    mask = np.tril(np.ones((seq_len, seq_len))) == 1
    return np.where(mask, 0.0, -np.inf)

mask = generate_mask(seq_len)
print("Mask:")
print(mask)
""",
    {"en": """
The tutorial stops here. Given to its own module, this mask fails twice. Its `Attention` does
`mask.unsqueeze(1)`: a (5, 5) mask becomes (5, 1, 5), which does not broadcast against the scores
(1, 4, 5, 5), 5 against 4 heads. And `masked_fill(mask == 0, -1e9)` hides the entries equal to 0, which are
the **allowed** ones: with a (1, 5, 5) mask it runs, and each row keeps only its future; the last row, where
everything was allowed, becomes uniform, 0.2 everywhere.""",
     "fr": """
Le tutoriel s'arrête là. Donné à son propre module, ce masque échoue deux fois. Son `Attention` fait
`mask.unsqueeze(1)` : un masque (5, 5) devient (5, 1, 5), qui ne se diffuse pas contre les scores
(1, 4, 5, 5), 5 contre 4 têtes. Et `masked_fill(mask == 0, -1e9)` cache les cases égales à 0, qui sont les
cases **permises** : avec un masque (1, 5, 5) cela tourne, et chaque ligne ne garde que son futur ; la
dernière ligne, où tout était permis, devient uniforme, 0,2 partout."""},
    """
try:
    fixed(embedding, embedding, embedding, mask=mask)
except ValueError as err:
    print("«error|erreur»:", str(err)[:90])
_, anti = fixed(embedding, embedding, embedding, mask=mask[None])
print(anti.numpy()[0, 0].round(2))
""",
    {"en": """
The fix: a bool mask that is True where a position may look (this library's convention), or simply
`is_causal=True`. Now each row sees its past, and the first token sees only itself:""",
     "fr": """
La correction : un masque booléen qui vaut True là où une position peut regarder (la convention de la
bibliothèque), ou simplement `is_causal=True`. Chaque ligne voit maintenant son passé, et le premier jeton ne
voit que lui-même :"""},
    """
out, causal = reference(embedding, is_causal=True)
print(causal.numpy()[0, 0].round(2))
keep = mask == 0                                   # «True where a position may look|True là où une position peut regarder»
out2, causal2 = reference(embedding, mask=keep)
assert np.allclose(causal.numpy(), causal2.numpy()) and np.allclose(causal.numpy().sum(-1), 1)
fig, axes = plt.subplots(1, num_heads, figsize=(10, 2.6))
for h, ax in enumerate(axes):
    ax.imshow(causal.numpy()[0, h], vmin=0, vmax=1, cmap="viridis")
    ax.set_title(f"«head|tête» {h}")
    ax.set_xlabel("«key|clé»")
axes[0].set_ylabel("«query|requête»")
fig.suptitle("«causal attention weights, untrained|poids d'attention causaux, sans entraînement»")
plt.show()
""",
    {"en": """
## Beyond the tutorial: the backward pass

With O = P V, P = softmax(S), S = Q K^T / sqrt(dh), and dO = dL/dO coming back from the output projection:

- dV = P^T dO and dP = dO V^T (a product's two gradients);
- dS = P (dP - rowsum(dO * O)): the softmax's backward (rowsum(dP * P) equals rowsum(dO * O));
- dQ = dS K / sqrt(dh) and dK = dS^T Q / sqrt(dh);
- the split into heads is a reshape and a transpose, a reordering: its backward is the inverse reordering,
  so each head's dQ lands in the columns of Q that head came from.

The library's own gradients, caught with `retain_grad()` on the math path, against these formulas:""",
     "fr": """
## Au-delà du tutoriel : la passe arrière

Avec O = P V, P = softmax(S), S = Q K^T / sqrt(dh), et dO = dL/dO qui revient de la projection de sortie :

- dV = P^T dO et dP = dO V^T (les deux gradients d'un produit) ;
- dS = P (dP - somme_ligne(dO * O)) : la passe arrière de la softmax (somme_ligne(dP * P) vaut
  somme_ligne(dO * O)) ;
- dQ = dS K / sqrt(dh) et dK = dS^T Q / sqrt(dh) ;
- la séparation en têtes est un reshape et une transposition, un réordonnancement : sa passe arrière est
  le réordonnancement inverse, si bien que le dQ de chaque tête retombe dans les colonnes de Q d'où elle
  venait.

Les gradients de la bibliothèque, attrapés par `retain_grad()` sur le chemin mathématique, face à ces
formules :"""},
    """
qh, kh, vh = (ta.randn(1, num_heads, seq_len, dh, dtype=ta.float64, requires_grad=True) for _ in range(3))
s = qh @ kh.transpose(-2, -1) / np.sqrt(dh)
p = s.softmax(-1)
o = p @ vh
for t in (s, p, o):
    t.retain_grad()
g = np.random.default_rng(0).normal(size=o.shape)  # «dO, as a loss would send it|dO, tel qu'une perte l'enverrait»
(o * ta.tensor(g)).sum().backward()
P, V, Q, K, O = p.numpy(), vh.numpy(), qh.numpy(), kh.numpy(), o.numpy()
dP = g @ V.swapaxes(-1, -2)
dS = P * (dP - (g * O).sum(-1, keepdims=True))
checks = {"dV": (vh.grad.numpy(), P.swapaxes(-1, -2) @ g), "dP": (p.grad.numpy(), dP), "dS": (s.grad.numpy(), dS),
          "dQ": (qh.grad.numpy(), dS @ K / np.sqrt(dh)), "dK": (kh.grad.numpy(), dS.swapaxes(-1, -2) @ Q / np.sqrt(dh))}
for name, (library, formula) in checks.items():
    print(f"{name}: «largest difference|plus grand écart» {np.abs(library - formula).max():.1e}")
""",
    {"en": """
And `gradcheck` compares every gradient of the whole fixed block (input and all four projections) with
finite differences, on both attention paths:""",
     "fr": """
Et `gradcheck` compare chaque gradient de tout le bloc corrigé (l'entrée et les quatre projections) à des
différences finies, sur les deux chemins de l'attention :"""},
    """
x_small = ta.randn(1, seq_len, 8, dtype=ta.float64, requires_grad=True)
small = ta.nn.MultiHeadAttention(8, 2).to(ta.float64)
for kernel in ("math", "flash"):
    with ta.sdpa_kernel(kernel):
        ok = ta.gradcheck(lambda x_, *ps: small(x_, is_causal=True, need_weights=False)[0], [x_small] + small.parameters())
    print(kernel, "gradcheck:", ok)
""",
]


if __name__ == "__main__":
    build({"en": "01_multi_head_attention_masks.ipynb", "fr": "01_attention_multi_tetes_masques.ipynb"}, TUTORIAL_000)
