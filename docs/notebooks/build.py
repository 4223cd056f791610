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

This notebook follows tutorial 000 (the French notebook "Multi-head Attention", author not named, which builds multi-head attention in PyTorch): its formulas, its `Attention`
function, its `MHAttention` module, its shapes and its mask, in its order, with this library in place of
PyTorch. Where the tutorial goes wrong, the cell shows it with numbers, then fixes it. Then it goes on where
the tutorial stops: the backward pass of what it built, derived and checked.""",
     "fr": """
# 01 · L'attention multi-têtes, pas à pas (tutoriel 000)

Ce carnet suit le tutoriel 000 (le carnet « Multi-head Attention », auteur non nommé, qui construit l'attention multi-têtes en PyTorch) : ses formules, sa fonction `Attention`, son module
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
          f"{np.abs(out.detach().numpy() - want.detach().numpy()).max():.2e}")
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
print(out.shape, "«mean|moyenne»", out.detach().numpy().mean(-1).round(6).ravel(),
      "«std|écart type»", out.detach().numpy().std(-1).round(4).ravel())
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
print(anti.detach().numpy()[0, 0].round(2))
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
print(causal.detach().numpy()[0, 0].round(2))
keep = mask == 0                                   # «True where a position may look|True là où une position peut regarder»
out2, causal2 = reference(embedding, mask=keep)
assert np.allclose(causal.detach().numpy(), causal2.detach().numpy()) and np.allclose(causal.detach().numpy().sum(-1), 1)
fig, axes = plt.subplots(1, num_heads, figsize=(10, 2.6))
for h, ax in enumerate(axes):
    ax.imshow(causal.detach().numpy()[0, h], vmin=0, vmax=1, cmap="viridis")
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
- dS = P * (dP - rowsum(dO * O)): the softmax's backward (rowsum(dP * P) equals rowsum(dO * O));
- dQ = dS K / sqrt(dh) and dK = dS^T Q / sqrt(dh);
- the split into heads is a reshape and a transpose, a reordering: its backward is the inverse reordering,
  so each head's dQ lands in the columns of Q that head came from.

The library's own gradients, caught with `retain_grad()` on the math path, against these formulas:""",
     "fr": """
## Au-delà du tutoriel : la passe arrière

Avec O = P V, P = softmax(S), S = Q K^T / sqrt(dh), et dO = dL/dO qui revient de la projection de sortie :

- dV = P^T dO et dP = dO V^T (les deux gradients d'un produit) ;
- dS = P * (dP - somme_ligne(dO * O)) : la passe arrière de la softmax (somme_ligne(dP * P) vaut
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
P, V, Q, K, O = p.detach().numpy(), vh.detach().numpy(), qh.detach().numpy(), kh.detach().numpy(), o.detach().numpy()
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


# --- notebook 02: tutorial 001, multi-head attention in NumPy, then with the library; the heads experiment -

TUTORIAL_001 = [
    {"en": """
# 02 · Multi-head attention in NumPy, then with the library (tutorial 001)

This notebook follows tutorial 001 (the French teaching notebook "Multi-Head Attention", author not named: NumPy from scratch, then PyTorch, heatmaps and head counts), section by section: the formulas, an
implementation from scratch in NumPy with 3 tokens and 2 heads, the same with a framework (this library in
place of PyTorch), heatmaps of the heads, shape checks, and the exercise with 1, 2, 4 and 8 heads. Two of
its claims do not hold, and the cells show it with numbers: untrained heads do not "specialise", and more
heads do not mean more parameters. Then the heads experiment is done properly, by training, and the
notebook goes on to the backward pass through the heads.""",
     "fr": """
# 02 · L'attention multi-têtes en NumPy, puis avec la bibliothèque (tutoriel 001)

Ce carnet suit le tutoriel 001 (le carnet pédagogique « Multi-Head Attention », auteur non nommé : NumPy à la main, puis PyTorch, cartes de chaleur et nombre de têtes), section par section : les formules, une
implémentation à partir de zéro en NumPy avec 3 jetons et 2 têtes, la même avec un framework (cette
bibliothèque à la place de PyTorch), les cartes des têtes, la vérification des formes, et l'exercice à 1, 2,
4 et 8 têtes. Deux de ses affirmations ne tiennent pas, et les cellules le montrent, chiffres à l'appui : des
têtes non entraînées ne « se spécialisent » pas, et plus de têtes ne veut pas dire plus de paramètres. Puis
l'expérience des têtes est refaite correctement, par un entraînement, et le carnet continue par la passe
arrière à travers les têtes."""},
    {"en": """
## 1. The formulas

MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O with head_i = softmax(Q_i K_i^T / sqrt(d_k)) V_i, where
Q = X W^Q (likewise K, V), d_k = d_model / h, and Q_i is the i-th block of d_k columns of Q: the reshape
(batch, n, d_model) -> (batch, n, h, d_k) -> (batch, h, n, d_k) that the tutorial writes, rightly.""",
     "fr": """
## 1. Les formules

MultiTête(Q, K, V) = Concat(tête_1, ..., tête_h) W^O avec tête_i = softmax(Q_i K_i^T / sqrt(d_k)) V_i, où
Q = X W^Q (de même K, V), d_k = d_model / h, et Q_i est le i-ème bloc de d_k colonnes de Q : le reshape
(lot, n, d_model) -> (lot, n, h, d_k) -> (lot, h, n, d_k) que le tutoriel écrit, à juste titre."""},
    """
import math
import tempfile

import matplotlib.pyplot as plt
import numpy as np
import tinygrad_attn as ta

np.random.seed(42)
ta.manual_seed(42)
print("«imports done; the library runs on the|imports réussis ; la bibliothèque tourne sur le»", ta.device("cpu"))
""",
    {"en": """
## 2. From scratch in NumPy: 3 tokens, 2 heads

The tutorial's example: batch 1, 3 tokens, d_model 8, 2 heads, projection matrices drawn with scale 0.1.""",
     "fr": """
## 2. À partir de zéro en NumPy : 3 jetons, 2 têtes

L'exemple du tutoriel : un lot de 1, 3 jetons, d_model 8, 2 têtes, des matrices de projection tirées à
l'échelle 0,1."""},
    """
batch_size, seq_len, d_model, num_heads = 1, 3, 8, 2
x = np.random.randn(batch_size, seq_len, d_model)
W_q, W_k, W_v, W_o = (np.random.randn(d_model, d_model) * 0.1 for _ in range(4))
print("batch_size:", batch_size, " seq_len:", seq_len, " d_model:", d_model, " num_heads:", num_heads,
      " d_k «per head|par tête»:", d_model // num_heads)
""",
    """
def multi_head_attention_from_scratch(x, W_q, W_k, W_v, W_o, num_heads):
    b, n, d = x.shape
    d_k = d // num_heads
    def split(t):                                            # (b, n, d) -> (b, h, n, d_k)
        return t.reshape(b, n, num_heads, d_k).transpose(0, 2, 1, 3)
    q, k, v = split(x @ W_q), split(x @ W_k), split(x @ W_v)
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d_k)    # (b, h, n, n)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    heads = weights @ v                                      # (b, h, n, d_k)
    concat = heads.transpose(0, 2, 1, 3).reshape(b, n, d)    # «heads side by side|têtes côte à côte»
    return concat @ W_o, weights

output, attention_weights = multi_head_attention_from_scratch(x, W_q, W_k, W_v, W_o, num_heads)
print("Output shape:", output.shape, " «heads|têtes»:", attention_weights.shape[1])
for i in range(num_heads):
    w = attention_weights[0, i]
    print(f"«head|tête» {i + 1}: shape {w.shape}, «row sums|sommes des lignes»", w.sum(-1).round(6))
    print(w.round(3))
""",
    {"en": """
## 3. The same with the library

The tutorial switches to PyTorch here. With `ta.nn.MultiHeadAttention` given the NumPy matrices (a `Linear`
layer computes x W^T, so its weight is the transpose, and the tutorial has no biases), the outputs agree:""",
     "fr": """
## 3. La même chose avec la bibliothèque

Le tutoriel passe ici à PyTorch. Avec `ta.nn.MultiHeadAttention` chargé des matrices NumPy (une couche
`Linear` calcule x W^T, son poids est donc la transposée, et le tutoriel n'a pas de biais), les sorties
concordent :"""},
    """
mha = ta.nn.MultiHeadAttention(d_model, num_heads, bias=False).to(ta.float64)
mha.load_state_dict({"q_proj.weight": W_q.T, "k_proj.weight": W_k.T, "v_proj.weight": W_v.T, "out_proj.weight": W_o.T})
out, weights = mha(ta.tensor(x))
print("«parameters|paramètres»:", mha.num_parameters(), " output shape:", out.shape,
      " «dimension kept|dimension préservée»:", out.shape == x.shape)
print("«largest difference from NumPy|plus grand écart à NumPy»:", f"{np.abs(out.detach().numpy() - output).max():.1e}",
      f"{np.abs(weights.detach().numpy() - attention_weights).max():.1e}")
""",
    {"en": """
## 4. The heads' maps, and what they do not show

The tutorial draws each head's weights and concludes that the heads "specialise in different kinds of
relations". But these weights are random: nothing has been trained. Two heads differ because their random
matrices differ; another seed gives other maps, differing from these as much as the heads differ from each
other. Specialisation comes from training on a task (section 6).""",
     "fr": """
## 4. Les cartes des têtes, et ce qu'elles ne montrent pas

Le tutoriel dessine les poids de chaque tête et conclut que les têtes « se spécialisent dans différents
types de relations ». Mais ces poids sont aléatoires : rien n'a été entraîné. Deux têtes diffèrent parce que
leurs matrices aléatoires diffèrent ; une autre graine donne d'autres cartes, aussi différentes de
celles-ci que les têtes le sont entre elles. La spécialisation vient de l'entraînement sur une tâche
(section 6)."""},
    """
tokens = ["«Token|Jeton» 0", "«Token|Jeton» 1", "«Token|Jeton» 2"]
fig, axes = plt.subplots(1, num_heads, figsize=(8, 3.2))
for i, ax in enumerate(axes):
    w = weights.detach().numpy()[0, i]
    ax.imshow(w, vmin=0, vmax=1, cmap="YlOrRd")
    for r in range(seq_len):
        for c in range(seq_len):
            ax.text(c, r, f"{w[r, c]:.3f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(seq_len), tokens)
    ax.set_yticks(range(seq_len), tokens)
    ax.set_title(f"«head|tête» {i + 1} («untrained|sans entraînement»)")
    ax.set_xlabel("«keys|clés»")
axes[0].set_ylabel("«queries|requêtes»")
plt.tight_layout()
plt.show()

x16 = ta.tensor(np.random.default_rng(5).normal(size=(1, 6, 16)))
maps = []
for seed in (0, 1):
    ta.manual_seed(seed)
    maps.append(ta.nn.MultiHeadAttention(16, 4).to(ta.float64)(x16)[1].detach().numpy()[0])
print("«mean difference between two heads|écart moyen entre deux têtes»:", np.abs(maps[0][0] - maps[0][1]).mean().round(3))
print("«mean difference between two seeds|écart moyen entre deux graines»:", np.abs(maps[0][0] - maps[1][0]).mean().round(3))
""",
    {"en": """
## 5. Shape checks

The tutorial's three configurations: the output keeps the input's shape, and the weights are
(batch, heads, seq, seq).""",
     "fr": """
## 5. Vérification des formes

Les trois configurations du tutoriel : la sortie garde la forme de l'entrée, et les poids sont
(lot, têtes, séq, séq)."""},
    """
for batch, seq, d, heads in [(2, 4, 16, 2), (1, 8, 32, 4), (4, 10, 64, 8)]:
    x_test = ta.randn(batch, seq, d)
    out_test, weights_test = ta.nn.MultiHeadAttention(d, heads)(x_test)
    assert out_test.shape == x_test.shape and weights_test.shape == (batch, heads, seq, seq)
    print(f"batch={batch}, seq={seq}, d_model={d}, heads={heads}: input {x_test.shape}, output {out_test.shape},",
          f"weights {weights_test.shape}")
""",
    {"en": """
## 6. The exercise: 1, 2, 4 and 8 heads

The tutorial counts parameters for each head count and concludes "more heads = more parameters = more
capacity". The count does not change: the projections are d_model x d_model whatever the number of heads,
which only decides how the d_model features are grouped.""",
     "fr": """
## 6. L'exercice : 1, 2, 4 et 8 têtes

Le tutoriel compte les paramètres pour chaque nombre de têtes et conclut « plus de têtes = plus de
paramètres = plus de capacité ». Le compte ne change pas : les projections sont d_model x d_model quel que
soit le nombre de têtes, qui décide seulement du regroupement des d_model composantes."""},
    """
d_model_ex, seq_len_ex = 16, 5
x_ex = ta.randn(1, seq_len_ex, d_model_ex)
for h in (1, 2, 4, 8):
    mha_ex = ta.nn.MultiHeadAttention(d_model_ex, h)
    print(f"«heads|têtes» {h}: d_k {d_model_ex // h}, «parameters|paramètres» {mha_ex.num_parameters()},",
          f"output {mha_ex(x_ex)[0].shape}")
""",
    {"en": """
To compare head counts, train: the reverse task (reverse 8 digits), one layer of width 16, 200 steps each,
the same seed. Two baselines for the loss: a uniform guess over the vocabulary's 11 tokens (10 digits and
the separator) gives ln 11 = 2.398, near where an untrained model starts (its random weights do a little
worse: about 2.55 at the first logged step, step 5); a model that has learned only that an answer is a digit gives
ln 10 = 2.303. Every model ends far below both, and
the head counts now differ in something real: with d_model fixed, 8 heads of 2 features each learn this task
more slowly than 1 head of 16.""",
     "fr": """
Pour comparer les nombres de têtes, il faut entraîner : la tâche reverse (retourner 8 chiffres), une couche
de largeur 16, 200 pas chacun, la même graine. Deux repères pour la perte : un tirage uniforme parmi les
11 jetons du vocabulaire (10 chiffres et le séparateur) donne ln 11 = 2,398, près de là où commence un
modèle non entraîné (ses poids aléatoires font un peu moins bien : environ 2,55 au premier pas noté, le pas 5) ; un modèle
qui a seulement appris qu'une réponse est un chiffre donne ln 10 = 2,303. Chaque modèle finit bien en
dessous des deux, et les nombres de têtes diffèrent maintenant par quelque
chose de réel : à d_model fixé, 8 têtes de 2 composantes apprennent cette tâche plus lentement qu'une tête
de 16."""},
    """
from tinygrad_attn.runs import TrainConfig
from tinygrad_attn.train import train

print(f"«uniform over 11 tokens|uniforme sur 11 jetons»: ln 11 = {math.log(11):.3f}; "
      f"«uniform over 10 digits|uniforme sur 10 chiffres»: ln 10 = {math.log(10):.3f}")
for h in (1, 2, 4, 8):
    metrics = train(TrainConfig(task="reverse", steps=200, d_model=16, nhead=h, num_layers=1, dim_feedforward=32,
                                seed=0, target=1.01, progress=False, out=tempfile.mkdtemp()))
    first = metrics["history"][0]
    print(f"«heads|têtes» {h}: «loss at step|perte au pas» {first['step']} {first['loss']:.3f},",
          f"«final loss|perte finale» {metrics['final_loss']:.3f},",
          f"«held-out accuracy|exactitude sur les données de test» {metrics['accuracy']:.2f}")
""",
    {"en": """
## Beyond the tutorial: the backward pass through the heads

Splitting into heads and concatenating them are reshapes and transposes: reorderings of the same entries,
whose backward is the inverse reordering. So each head's gradient flows back into its own d_k columns of Q,
K and V, and into its own rows of the projection weights; W^O's gradient is Concat(heads)^T dOut. The
library's gradients against finite differences, on both attention paths:""",
     "fr": """
## Au-delà du tutoriel : la passe arrière à travers les têtes

La séparation en têtes et leur concaténation sont des reshapes et des transpositions : des
réordonnancements des mêmes cases, dont la passe arrière est le réordonnancement inverse. Le gradient de
chaque tête remonte donc dans ses propres d_k colonnes de Q, K et V, et dans ses propres lignes des poids de
projection ; le gradient de W^O est Concat(têtes)^T dSortie. Les gradients de la bibliothèque face aux
différences finies, sur les deux chemins de l'attention :"""},
    """
xg = ta.tensor(x, requires_grad=True)
for kernel in ("math", "flash"):
    with ta.sdpa_kernel(kernel):
        ok = ta.gradcheck(lambda x_, *ps: mha(x_, need_weights=False)[0], [xg] + mha.parameters())
    print(kernel, "gradcheck:", ok)
mha.zero_grad()
out, _ = mha(ta.tensor(x), need_weights=False)
g = np.random.default_rng(0).normal(size=out.shape)
(out * ta.tensor(g)).sum().backward()
q = (x @ W_q).reshape(1, 3, 2, 4).transpose(0, 2, 1, 3)
k = (x @ W_k).reshape(1, 3, 2, 4).transpose(0, 2, 1, 3)
v = (x @ W_v).reshape(1, 3, 2, 4).transpose(0, 2, 1, 3)
s = q @ k.transpose(0, 1, 3, 2) / 2.0
p = np.exp(s - s.max(-1, keepdims=True))
p /= p.sum(-1, keepdims=True)
concat = (p @ v).transpose(0, 2, 1, 3).reshape(1, 3, 8)
dW_o = concat[0].T @ g[0]                               # dW^O = Concat(heads)^T dOut
print("dW^O «formula against the library|formule face à la bibliothèque»:",
      f"{np.abs(dW_o.T - mha.out_proj.weight.grad.numpy()).max():.1e}")
""",
    {"en": """
## 7. Summary, corrected

The five steps hold: projections, split into heads (reshape then transpose), attention per head, concat,
final projection; the output keeps the input's shape. What changes: heads specialise only through
training, and the number of heads changes how the features are grouped, not the number of parameters.""",
     "fr": """
## 7. Résumé, corrigé

Les cinq étapes tiennent : projections, séparation en têtes (reshape puis transposition), attention par
tête, concaténation, projection finale ; la sortie garde la forme de l'entrée. Ce qui change : les têtes ne
se spécialisent que par l'entraînement, et le nombre de têtes change le regroupement des composantes, pas le
nombre de paramètres."""},
]


# --- notebook 05: tutorial 004, cross-attention on "J'aime l'IA" -> "I love AI", every shape ----------------

TUTORIAL_004 = [
    {"en": """
# 05 · Cross-attention, "J'aime l'IA" -> "I love AI" (tutorial 004)

This notebook follows tutorial 004 (the French Keras/TensorFlow notebook "Comprendre les mécanismes d'attention", author not named), cell by cell, with this library in
place of Keras: two small vocabularies, 256-dimensional embeddings, the queries from the target sentence and
the keys and values from the source sentence, one attention, then 8 heads of 32, the heads put back
together and a last projection. It keeps the tutorial's sizes and prints every shape it printed. Then it
goes on: the maps as a picture, and the backward pass of cross-attention, which carries the loss back
into the **source** sentence through K and V.""",
     "fr": """
# 05 · L'attention croisée, « J'aime l'IA » -> « I love AI » (tutoriel 004)

Ce carnet suit le tutoriel 004 (le carnet Keras/TensorFlow « Comprendre les mécanismes d'attention », auteur non nommé), cellule par cellule, avec cette bibliothèque à la
place de Keras : deux petits vocabulaires, des plongements de dimension 256, les requêtes tirées de la
phrase cible, les clés et les valeurs de la phrase source, une attention, puis 8 têtes de 32, les têtes
rassemblées et une dernière projection. Il garde les tailles du tutoriel et affiche chaque forme qu'il
affichait. Ensuite il continue : les cartes en image, et la passe arrière de l'attention croisée, qui ramène
la perte jusque dans la phrase **source** par K et V."""},
    """
import math

import matplotlib.pyplot as plt
import numpy as np
import tinygrad_attn as ta

ta.manual_seed(0)
source_vocab = {"<pad>": 0, "J'": 1, "aime": 2, "l'IA": 3}
target_vocab = {"<pad>": 0, "I": 1, "love": 2, "AI": 3}
source_sentence = ["J'", "aime", "l'IA"]
target_sentence = ["I", "love", "AI"]
""",
    {"en": """
Embeddings of size 256 for both vocabularies (the tutorial prints the whole (1, 3, 256) tensor; here its
shape and first values):""",
     "fr": """
Des plongements de taille 256 pour les deux vocabulaires (le tutoriel affiche tout le tenseur (1, 3, 256) ;
ici sa forme et ses premières valeurs) :"""},
    """
embedding_dim = 256
source_embedding_layer = ta.nn.Embedding(len(source_vocab), embedding_dim)
target_embedding_layer = ta.nn.Embedding(len(target_vocab), embedding_dim)
encoder_input = ta.tensor([[source_vocab[w] for w in source_sentence]])
decoder_input = ta.tensor([[target_vocab[w] for w in target_sentence]])
encoder_embedded = source_embedding_layer(encoder_input)
decoder_embedded = target_embedding_layer(decoder_input)
print(encoder_embedded.shape, encoder_embedded.detach().numpy()[0, 0, :4].round(4))
""",
    {"en": """
Queries from the decoder's side (the target sentence), keys and values from the encoder's (the source):
this is what makes it **cross**-attention.""",
     "fr": """
Les requêtes du côté du décodeur (la phrase cible), les clés et les valeurs du côté de l'encodeur (la
source) : c'est ce qui en fait une attention **croisée**."""},
    """
query_layer, key_layer, value_layer = (ta.nn.Linear(embedding_dim, 256) for _ in range(3))
Q = query_layer(decoder_embedded)
K = key_layer(encoder_embedded)
V = value_layer(encoder_embedded)
print("«Shape of|Dimensions de» Q:", Q.shape)
print("«Shape of|Dimensions de» K:", K.shape)
print("«Shape of|Dimensions de» V:", V.shape)
""",
    """
QK = Q @ K.transpose(-2, -1)
QK_normalized = QK / math.sqrt(256)
softmax = QK_normalized.softmax(-1)
attention_output = softmax @ V
print("«Shape of the attention|Dimension de l'attention»:", attention_output.shape)
""",
    {"en": """
## Multi-head attention

8 heads of depth 256 / 8 = 32: reshape to (1, 3, 8, 32), then move the heads before the positions.""",
     "fr": """
## L'attention multi-têtes

8 têtes de profondeur 256 / 8 = 32 : reshape en (1, 3, 8, 32), puis les têtes passent devant les
positions."""},
    """
num_heads = 8
depth = 256 // num_heads

def split_heads(x):
    return x.reshape(1, -1, num_heads, depth).transpose(1, 2)

Qh, Kh, Vh = split_heads(Q), split_heads(K), split_heads(V)
print("«Shape of multi-head|Dimensions de multi-head» Q:", Qh.shape)
print("«Shape of multi-head|Dimensions de multi-head» K:", Kh.shape)
print("«Shape of multi-head|Dimensions de multi-head» V:", Vh.shape)
""",
    """
QK = Qh @ Kh.transpose(-2, -1)
print("«Shape of|Dimensions de» QK:", QK.shape)
weights = (QK / math.sqrt(depth)).softmax(-1)
attention_heads = weights @ Vh
print("«Shape of|Dimensions de» attention_heads:", attention_heads.shape)
""",
    """
concat_attention = attention_heads.transpose(1, 2).reshape(1, -1, 256)   # «heads back side by side|têtes remises côte à côte»
print("«Shape of|Dimensions de» concat_attention:", concat_attention.shape)
output_layer = ta.nn.Linear(256, 256)
multihead_attention_output = output_layer(concat_attention)
print("«Shape of|Dimensions de» multihead_attention_output:", multihead_attention_output.shape)
""",
    {"en": """
## Beyond the tutorial: the same block as one module, and the maps

These steps are exactly `ta.nn.MultiHeadAttention(256, 8)` called with the target as the query and the
source as key and value. Given the same weights, the two agree to rounding. Each row of a map is a target
word, each column a source word; the weights are untrained, so the maps are near uniform (1/3 per source
word): `examples/cross_attention_translation.py` trains them.""",
     "fr": """
## Au-delà du tutoriel : le même bloc en un module, et les cartes

Ces étapes sont exactement `ta.nn.MultiHeadAttention(256, 8)` appelé avec la cible comme requête et la
source comme clé et valeur. Avec les mêmes poids, les deux concordent aux arrondis près. Chaque ligne d'une
carte est un mot cible, chaque colonne un mot source ; les poids ne sont pas entraînés, les cartes sont donc
presque uniformes (1/3 par mot source) : `examples/cross_attention_translation.py` les entraîne."""},
    """
mha = ta.nn.MultiHeadAttention(256, 8)
for ours, theirs in (("q_proj", query_layer), ("k_proj", key_layer), ("v_proj", value_layer), ("out_proj", output_layer)):
    getattr(mha, ours).load_state_dict(theirs.state_dict())
out, maps = mha(decoder_embedded, encoder_embedded)
print("«largest difference|plus grand écart»:", f"{np.abs(out.detach().numpy() - multihead_attention_output.detach().numpy()).max():.1e}",
      " maps", maps.shape)
fig, axes = plt.subplots(1, 4, figsize=(11, 2.8))
for h, ax in enumerate(axes):
    ax.imshow(maps.detach().numpy()[0, h], vmin=0, vmax=1, cmap="viridis")
    ax.set_xticks(range(3), source_sentence)
    ax.set_yticks(range(3), target_sentence)
    ax.set_title(f"«head|tête» {h}")
fig.suptitle("«cross-attention, untrained: target words (rows) over source words|attention croisée, sans entraînement : mots cibles (lignes) sur mots sources»")
plt.tight_layout()
plt.show()
""",
    {"en": """
## Beyond the tutorial: the backward pass of cross-attention

The loss is computed on the decoder's side, yet the gradient reaches the **source** embeddings: through K
(dK = dS^T Q / sqrt(d)) it tells each source word how to be found, and through V (dV = P^T dO) what to carry.
The target embeddings get theirs through Q (dQ = dS K / sqrt(d)). Checked by finite differences, on both
attention paths, at a smaller width so that it runs in a second:""",
     "fr": """
## Au-delà du tutoriel : la passe arrière de l'attention croisée

La perte se calcule du côté du décodeur, et pourtant le gradient atteint les plongements **sources** : par K
(dK = dS^T Q / sqrt(d)) il dit à chaque mot source comment être trouvé, et par V (dV = P^T dO) quoi
transmettre. Les plongements cibles reçoivent le leur par Q (dQ = dS K / sqrt(d)). Vérifié par différences
finies, sur les deux chemins de l'attention, à une largeur réduite pour que cela tourne en une seconde :"""},
    """
small = ta.nn.MultiHeadAttention(16, 8).to(ta.float64)
target_x = ta.randn(1, 3, 16, dtype=ta.float64, requires_grad=True)
source_x = ta.randn(1, 3, 16, dtype=ta.float64, requires_grad=True)
for kernel in ("math", "flash"):
    with ta.sdpa_kernel(kernel):
        ok = ta.gradcheck(lambda t, s: small(t, s, need_weights=False)[0], [target_x, source_x])
    print(kernel, "gradcheck:", ok)
small(target_x, source_x, need_weights=False)[0].sum().backward()
print("|dL/d«source|source»| «per word|par mot»:", np.linalg.norm(source_x.grad.numpy()[0], axis=-1).round(3))
""",
]


# --- notebook 03: tutorial 002, the Annotated Transformer's attention and multi-head class ----------------

TUTORIAL_002 = [
    {"en": """
# 03 · The Transformer's attention function and multi-head class (tutorial 002)

This notebook follows tutorial 002 (a French notebook, author not named, on sequence models and the Transformer, built on the Annotated Transformer's code): why sequence models moved from
recurrence to attention, the `attention` function and the multi-head class it takes from the Annotated
Transformer, then self-attention. The class as printed cannot run, and one of its lines projects the query
with the key's layer; the cells show each problem, then fix it. Then the backward pass of masked attention.""",
     "fr": """
# 03 · La fonction d'attention et la classe multi-têtes du Transformer (tutoriel 002)

Ce carnet suit le tutoriel 002 (un carnet, auteur non nommé, sur les modèles de séquences et le Transformer, construit sur le code de l'Annotated Transformer) : pourquoi les modèles de séquences sont passés de
la récurrence à l'attention, la fonction `attention` et la classe multi-têtes qu'il reprend de l'Annotated
Transformer, puis l'auto-attention. La classe telle qu'imprimée ne peut pas tourner, et l'une de ses lignes
projette la requête avec la couche des clés ; les cellules montrent chaque problème, puis le corrigent.
Ensuite, la passe arrière de l'attention masquée."""},
    {"en": """
## The attention mechanism

The tutorial says attention takes a query and key-value pairs and "outputs a score", "a weighted sum of the
values". Two things are being called by one name. The **scores** are q . k / sqrt(d_k), one per (query, key)
pair; softmax turns each row of them into **weights**; the **output** is the weighted sum of the values,
one vector per query. The function, with this library:""",
     "fr": """
## Le mécanisme d'attention

Le tutoriel dit que l'attention prend une requête et des paires clé-valeur et « fournit en sortie un
score », « une somme pondérée des valeurs ». Deux choses portent là un seul nom. Les **scores** sont
q . k / sqrt(d_k), un par couple (requête, clé) ; la softmax fait de chaque ligne de scores des **poids** ;
la **sortie** est la somme des valeurs pondérée par ces poids, un vecteur par requête. La fonction, avec
cette bibliothèque :"""},
    """
import math                                         # «the tutorial forgets this import|le tutoriel oublie cet import»

import matplotlib.pyplot as plt
import numpy as np
import tinygrad_attn as ta
from tinygrad_attn import functional as F

def attention(query, key, value, mask=None, dropout=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(np.expand_dims(mask, 1) == 0, -1e9)
    p_attn = F.softmax(scores, dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return p_attn @ value, p_attn

ta.manual_seed(0)
q, k, v = (ta.randn(1, 2, 4, 8, dtype=ta.float64) for _ in range(3))   # (B, H, T, d_k)
output, p_attn = attention(q, k, v)
print("«output|sortie» (B, H, T, d_k):", output.shape, " «weights|poids» (B, H, T, T):", p_attn.shape)
""",
    {"en": """
## The multi-head class, as printed

Four lines stop it or make it wrong: `selt.attn = None` (a NameError as soon as it is built),
`self.linear_view(values)` (neither the layer nor `values` exists), `math` used without `import math`,
and `query = self.linear_key(query)`: the query projected with the **key**'s layer. Here is the class with
the first three kept as printed, each failure caught:""",
     "fr": """
## La classe multi-têtes, telle qu'imprimée

Quatre lignes l'arrêtent ou la faussent : `selt.attn = None` (une NameError dès la construction),
`self.linear_view(values)` (ni la couche ni `values` n'existent), `math` utilisé sans `import math`, et
`query = self.linear_key(query)` : la requête projetée par la couche des **clés**. Voici la classe avec les
trois premières gardées telles quelles, chaque échec attrapé :"""},
    """
class MultiHeadAttention(ta.nn.Module):
    def __init__(self, heads, d_model, dropout=0.1, as_printed=True, query_layer="linear_key"):
        self.d_model, self.d_k, self.h = d_model, d_model // heads, heads
        self.linear_query = ta.nn.Linear(d_model, d_model)
        self.linear_value = ta.nn.Linear(d_model, d_model)
        self.linear_key = ta.nn.Linear(d_model, d_model)
        self.dropout = ta.nn.Dropout(dropout)
        self.output = ta.nn.Linear(d_model, d_model)
        self.as_printed, self.query_layer = as_printed, query_layer
        if as_printed:
            selt.attn = None                           # noqa: F821  «as printed|tel qu'imprimé»
        self.attn = None

    def forward(self, query, key, value, mask=None):
        bs = query.size(0)
        key = self.linear_key(key).view(bs, -1, self.h, self.d_k)
        query = getattr(self, self.query_layer)(query).view(bs, -1, self.h, self.d_k)
        if self.as_printed:
            value = self.linear_view(values).view(bs, -1, self.h, self.d_k)   # noqa: F821
        else:
            value = self.linear_value(value).view(bs, -1, self.h, self.d_k)
        key, query, value = key.transpose(1, 2), query.transpose(1, 2), value.transpose(1, 2)
        scores, self.attn = attention(query, key, value, mask, self.dropout)
        concat = scores.transpose(1, 2).contiguous().view(bs, -1, self.d_model)
        return self.output(concat)

try:
    MultiHeadAttention(4, 16)
except NameError as err:
    print("«building it|la construire»:", type(err).__name__, err)
half_fixed = MultiHeadAttention(4, 16, dropout=0.0, as_printed=False)
half_fixed.as_printed = True
x = ta.randn(2, 5, 16, dtype=ta.float64)
half_fixed.to(ta.float64)
try:
    half_fixed(x, x, x)
except AttributeError as err:
    print("«calling it|l'appeler»:", type(err).__name__, err)
""",
    {"en": """
With those three fixed, the class runs, but the query still goes through `linear_key`. The scores become
k_i . k_j: symmetric, so token i attends to token j exactly as much as j to i (before the softmax), and the
query layer never gets a gradient, since it is not in the graph at all:""",
     "fr": """
Ces trois-là corrigées, la classe tourne, mais la requête passe toujours par `linear_key`. Les scores
deviennent k_i . k_j : symétriques, le jeton i regarde donc le jeton j exactement autant que j regarde i
(avant la softmax), et la couche des requêtes ne reçoit jamais de gradient, puisqu'elle n'est pas du tout
dans le graphe :"""},
    """
runs = MultiHeadAttention(4, 16, dropout=0.0, as_printed=False).to(ta.float64)
runs(x, x, x).sum().backward()
scores = (runs.linear_key(x).view(2, -1, 4, 4).transpose(1, 2) @ runs.linear_key(x).view(2, -1, 4, 4).transpose(1, 2).transpose(-2, -1)).detach().numpy()
print("«scores symmetric|scores symétriques»:", np.allclose(scores, scores.swapaxes(-1, -2)),
      " «gradient of linear_query|gradient de linear_query»:", runs.linear_query.weight.grad)
""",
    {"en": """
The fix, `query = self.linear_query(query)`: the class then computes exactly this library's
`MultiHeadAttention` (given the same weights):""",
     "fr": """
La correction, `query = self.linear_query(query)` : la classe calcule alors exactement le
`MultiHeadAttention` de cette bibliothèque (avec les mêmes poids) :"""},
    """
fixed = MultiHeadAttention(4, 16, dropout=0.0, as_printed=False, query_layer="linear_query").to(ta.float64)
fixed.load_state_dict(runs.state_dict())
reference = ta.nn.MultiHeadAttention(16, 4).to(ta.float64)
for ours, theirs in (("q_proj", "linear_query"), ("k_proj", "linear_key"), ("v_proj", "linear_value"), ("out_proj", "output")):
    getattr(reference, ours).load_state_dict(getattr(fixed, theirs).state_dict())
print("«largest difference|plus grand écart»:", f"{np.abs(fixed(x, x, x).detach().numpy() - reference(x)[0].detach().numpy()).max():.1e}")
""",
    {"en": """
## Self-attention

Self-attention is attention of a sequence over itself: queries, keys and values all come from the same
tokens, so each token can gather what it needs from the others. The tutorial's example (which "it" the
animal or the street is) needs a trained model. Here is one trained in a few seconds on the reverse task:
each answer digit learns to attend to the prompt digit it mirrors, a relation between tokens found by
training, not given.""",
     "fr": """
## L'auto-attention

L'auto-attention est l'attention d'une séquence sur elle-même : requêtes, clés et valeurs viennent des mêmes
jetons, chaque jeton peut donc aller chercher chez les autres ce dont il a besoin. L'exemple du tutoriel (à
quoi renvoie « it », l'animal ou la rue) demande un modèle entraîné. En voici un, entraîné en quelques
secondes sur la tâche reverse : chaque chiffre de la réponse apprend à regarder le chiffre de l'invite dont il
est le miroir, une relation entre jetons trouvée par l'entraînement, pas donnée."""},
    """
import tempfile
from tinygrad_attn.runs import TrainConfig, load_run
from tinygrad_attn.train import train
from tinygrad_attn.viz import attention_maps

run = tempfile.mkdtemp()
metrics = train(TrainConfig(task="reverse", steps=300, out=run, progress=False, seed=0))
task, model, _ = load_run(run)
answer, batch = task.answer(model, "3 1 4 1 5 9 2 6")
maps = attention_maps(task, model, batch)["self-attention"]
print("«accuracy|exactitude»:", metrics["accuracy"], " «answer|réponse»:", answer)
queries, keys = task.labels(batch)["self-attention"]
fig, ax = plt.subplots(figsize=(6, 5.5), layout="constrained")
image = ax.imshow(maps[-1][0], vmin=0, vmax=1, cmap="viridis")
ax.set_xticks(range(len(keys)), keys)
ax.set_yticks(range(len(queries)), [f"→ {t}" for t in queries])
ax.set_xlabel("«keys: the tokens read|clés : les jetons lus»")
ax.set_ylabel("«queries: → the token each position predicts|requêtes : → le jeton que prédit chaque position»")
ax.set_title("«reverse, last layer, head 0|reverse, dernière couche, tête 0»\\n"
             "«a weight of 1 is yellow, 0 dark|un poids de 1 est jaune, 0 sombre»", fontsize=10)
fig.colorbar(image, ax=ax, shrink=0.8, label="«attention weight|poids d'attention»")
plt.show()
""",
    {"en": """
## Beyond the tutorial: the backward pass of masked attention

`masked_fill(mask == 0, -1e9)` puts a constant where the mask hides: a constant does not depend on the score,
so the hidden scores get no gradient, and their probabilities are 0. Checked with the fixed class, a padding
mask, and finite differences on both attention paths:""",
     "fr": """
## Au-delà du tutoriel : la passe arrière de l'attention masquée

`masked_fill(mask == 0, -1e9)` met une constante là où le masque cache : une constante ne dépend pas du
score, les scores cachés ne reçoivent donc aucun gradient, et leurs probabilités valent 0. Vérifié avec la
classe corrigée, un masque de remplissage, et des différences finies sur les deux chemins de l'attention :"""},
    """
mask = np.ones((2, 1, 5), dtype=int)
mask[1, :, 3:] = 0                                  # «the second sequence has 3 real tokens|la seconde séquence a 3 vrais jetons»
xg = ta.randn(2, 5, 16, dtype=ta.float64, requires_grad=True)
ok = ta.gradcheck(lambda t: fixed(t, t, t, mask), [xg])
print("gradcheck «with the mask|avec le masque»:", ok, " «padding weights|poids du remplissage»:",
      float(np.abs(fixed.attn.numpy()[1, :, :, 3:]).max()))
for kernel in ("math", "flash"):
    with ta.sdpa_kernel(kernel):
        ok = ta.gradcheck(lambda t: reference(t, mask=mask[:, None].astype(bool), need_weights=False)[0], [xg])
    print(kernel, "gradcheck:", ok)
""",
]


# --- notebook 04: tutorial 003, attention as a soft dictionary lookup ---------------------------------------

TUTORIAL_003 = [
    {"en": """
# 04 · Attention as a soft dictionary lookup (tutorial 003)

This notebook follows tutorial 003 (the French article "Comprendre le mécanisme d'attention : la clé du succès en Deep Learning" by Auguste Hoang): keys, values and a query; scores
c_i = <q, k_i>; weights s = softmax(c); the result. Its formula weights the values by the raw scores c_i
instead of s_i, and it calls attention an "activation": the cells show both with numbers. Then its NumPy
code, beside this library, and the backward pass of the lookup.""",
     "fr": """
# 04 · L'attention comme un dictionnaire souple (tutoriel 003)

Ce carnet suit le tutoriel 003 (l'article « Comprendre le mécanisme d'attention : la clé du succès en Deep Learning » d'Auguste Hoang) : des clés, des valeurs et une requête ; les scores
c_i = <q, k_i> ; les poids s = softmax(c) ; le résultat. Sa formule pondère les valeurs par les scores bruts
c_i au lieu des s_i, et il appelle l'attention une « activation » : les cellules montrent les deux, chiffres à
l'appui. Puis son code NumPy, à côté de cette bibliothèque, et la passe arrière de la recherche."""},
    {"en": """
## A dictionary, hard and soft

A Python dictionary returns the value whose key matches exactly. Attention returns a blend of all the
values, each weighted by how well its key matches the query: keys close to the query get most of the
weight.""",
     "fr": """
## Un dictionnaire, strict et souple

Un dictionnaire Python renvoie la valeur dont la clé correspond exactement. L'attention renvoie un mélange de
toutes les valeurs, chacune pondérée par l'accord de sa clé avec la requête : les clés proches de la requête
reçoivent l'essentiel du poids."""},
    """
import numpy as np
import tinygrad_attn as ta
from tinygrad_attn import functional as F

keys = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])       # t = 3 «keys|clés», d_key = 2
values = np.array([[10.0, 0.0], [0.0, 10.0], [5.0, 5.0]])   # d_val = 2
query = np.array([2.0, 0.5])
c = keys @ query                                             # «scores|scores» c_i = <q, k_i>
s = np.exp(c - c.max()) / np.exp(c - c.max()).sum()          # «weights|poids» s = softmax(c)
print("c =", c, " s =", s.round(3), " «result|résultat» s V =", (s @ values).round(3))
""",
    {"en": """
## The tutorial's result: weighted by c instead of s

The tutorial defines the result as sum_i c_i v_i. The raw scores are no distribution: they need not be
positive nor sum to 1, so that "result" is no blend of the values, and it leaves the values' range:""",
     "fr": """
## Le résultat du tutoriel : pondéré par c au lieu de s

Le tutoriel définit le résultat comme somme_i c_i v_i. Les scores bruts ne sont pas une distribution : rien
ne les oblige à être positifs ni à sommer à 1, ce « résultat » n'est donc pas un mélange des valeurs, et il
sort de leur plage :"""},
    """
wrong = c @ values
print("«with c|avec c»:", wrong, " «with s|avec s»:", (s @ values).round(3),
      " «values range|plage des valeurs»:", values.min(0), values.max(0))
""",
    {"en": """
## Why divide by sqrt(d_key)

For random queries and keys with unit-variance entries, <q, k> has variance d_key: the longer the vectors,
the larger the scores, and the softmax saturates (one weight near 1, the others near 0, and gradients near
0). Dividing by sqrt(d_key) brings the variance back to 1:""",
     "fr": """
## Pourquoi diviser par sqrt(d_key)

Pour des requêtes et des clés aléatoires de composantes de variance 1, <q, k> a pour variance d_key : plus
les vecteurs sont longs, plus les scores sont grands, et la softmax sature (un poids proche de 1, les autres
proches de 0, et des gradients proches de 0). Diviser par sqrt(d_key) ramène la variance à 1 :"""},
    """
rng = np.random.default_rng(0)
for d in (4, 64, 256):
    qs, ks = rng.normal(size=(20000, d)), rng.normal(size=(20000, d))
    dots = (qs * ks).sum(-1)
    print(f"d_key {d:>3}: «variance of|variance de» <q, k> {dots.var():7.1f},",
          f"«after|après» / sqrt(d) {(dots / np.sqrt(d)).var():.2f}")
""",
    {"en": """
## "A kind of activation"?

The tutorial files attention with sigmoid, ReLU, Softmax, Dropout and BatchNorm as "activations". An
activation acts on each entry alone; attention mixes positions: output i depends on every key and value.""",
     "fr": """
## « Une sorte d'activation » ?

Le tutoriel range l'attention avec sigmoïde, ReLU, Softmax, Dropout et BatchNorm parmi les « activations ».
Une activation agit sur chaque case séparément ; l'attention mélange les positions : la sortie i dépend de
toutes les clés et de toutes les valeurs."""},
    """
x = ta.tensor(rng.normal(size=(4, 2)), requires_grad=True)
F.scaled_dot_product_attention(x, x, x)[0].sum().backward()
print("«attention: row 0 depends on the other rows|attention : la ligne 0 dépend des autres lignes»:",
      bool(np.abs(x.grad.numpy()[1:]).sum() > 0))
y = ta.tensor(rng.normal(size=(4, 2)), requires_grad=True)
y.relu()[0].sum().backward()
print("«ReLU: row 0 depends on the other rows|ReLU : la ligne 0 dépend des autres lignes»:",
      bool(np.abs(y.grad.numpy()[1:]).sum() > 0))
""",
    {"en": """
## The tutorial's NumPy code, with several queries and a batch

Its code is right (the result is weighted by the softmax weights). Beside this library's
`scaled_dot_product_attention`, on the same arrays:""",
     "fr": """
## Le code NumPy du tutoriel, avec plusieurs requêtes et un lot

Son code est juste (le résultat est pondéré par les poids de la softmax). À côté de la
`scaled_dot_product_attention` de la bibliothèque, sur les mêmes tableaux :"""},
    """
def softmax(x):
    exp_x = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return exp_x / np.sum(exp_x, axis=-1, keepdims=True)

def scaled_dot_product_attention(Q, K, V):
    dk = K.shape[-1]
    scores = np.matmul(Q, K.transpose((0, 2, 1))) / np.sqrt(dk)
    return np.matmul(softmax(scores), V)

Q, K, V = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 6))
ours = F.scaled_dot_product_attention(ta.tensor(Q), ta.tensor(K), ta.tensor(V)).numpy()
print("«shape|forme»", ours.shape, " «largest difference|plus grand écart»:",
      f"{np.abs(ours - scaled_dot_product_attention(Q, K, V)).max():.1e}")
""",
    {"en": """
## Beyond the tutorial: the backward pass of the lookup

From here the scores are scaled as scaled dot-product attention scales them: c_i = <q, k_i> / sqrt(d) (the
first cells' c_i divided by sqrt(d); the code below says so again). For one query with weights
s = softmax(c), result r = sum_i s_i v_i and a gradient g = dL/dr coming back: dv_i = s_i g (each value gets
its weight's share); ds_i = <g, v_i>; through the softmax, dc_i = s_i (ds_i - <g, r>), the gradient of the
scaled score; and because c_i = <q, k_i> / sqrt(d), dq = sum_i dc_i k_i / sqrt(d) and dk_i = dc_i q / sqrt(d)
(with the unscaled scores of the first cells there would be no 1 / sqrt(d)). The formulas against the
library's gradients:""",
     "fr": """
## Au-delà du tutoriel : la passe arrière de la recherche

À partir d'ici, les scores sont mis à l'échelle comme le fait l'attention à produit scalaire normalisé :
c_i = <q, k_i> / sqrt(d) (les c_i des premières cellules divisés par sqrt(d) ; le code ci-dessous le redit).
Pour une requête de poids s = softmax(c), de résultat r = somme_i s_i v_i et un gradient g = dL/dr qui
revient : dv_i = s_i g (chaque valeur reçoit la part de son poids) ; ds_i = <g, v_i> ; à travers la
softmax, dc_i = s_i (ds_i - <g, r>), le gradient du score mis à l'échelle ; et comme c_i = <q, k_i> / sqrt(d),
dq = somme_i dc_i k_i / sqrt(d) et dk_i = dc_i q / sqrt(d) (avec les scores non divisés des premières
cellules, il n'y aurait pas de 1 / sqrt(d)). Les formules face aux gradients de la bibliothèque :"""},
    """
d = 2
qt, kt, vt = (ta.tensor(a, requires_grad=True) for a in (query[None], keys, values))
r = F.scaled_dot_product_attention(qt, kt, vt)            # (1, d_val)
g = np.array([[1.0, -2.0]])
(r * ta.tensor(g)).sum().backward()
c = keys @ query / np.sqrt(d)                            # «the scaled scores|les scores mis à l'échelle» c_i = <q, k_i> / sqrt(d)
s = np.exp(c - c.max()) / np.exp(c - c.max()).sum()
result = s @ values
dc = s * (values @ g[0] - g[0] @ result)
print("dv:", np.abs(vt.grad.numpy() - np.outer(s, g[0])).max().round(12),
      " dq:", np.abs(qt.grad.numpy()[0] - dc @ keys / np.sqrt(d)).max().round(12),
      " dk:", np.abs(kt.grad.numpy() - np.outer(dc, query) / np.sqrt(d)).max().round(12))
print("gradcheck:", ta.gradcheck(lambda a, b, c_: F.scaled_dot_product_attention(a, b, c_), [qt, kt, vt]))
""",
]


# --- notebook 06: a backward pass to step through, one head with T = 2 and d = 2 ---------------------------

STEP_THROUGH = [
    {"en": """
# 06 · Step through a backward pass: one head, T = 2, d = 2

No tutorial goes here: this notebook walks one attention head backward, number by number, and shows how
to stop inside every step. It is docs/step-through.md as cells to run and change.

To enter the compiled kernels with a debugger, start Jupyter (or your script) with `NUMBA_DISABLE_JIT=1`:
the same code then runs as Python. Breakpoints: `run_backward` in `tinygrad_attn/engine.py` (the walk),
the `backward` of each rule in `tinygrad_attn/ops.py`, `_softmax_backward_rows` in
`tinygrad_attn/kernels/softmax.py`.""",
     "fr": """
# 06 · Suivre une passe arrière pas à pas : une tête, T = 2, d = 2

Aucun tutoriel ne va jusqu'ici : ce carnet parcourt une tête d'attention à l'envers, nombre par nombre, et
montre comment s'arrêter dans chaque étape. C'est docs/fr/pas-a-pas.md, en cellules à exécuter et à
modifier.

Pour entrer dans les noyaux compilés avec un débogueur, lancez Jupyter (ou votre script) avec
`NUMBA_DISABLE_JIT=1` : le même code s'exécute alors en Python. Points d'arrêt : `run_backward` dans
`tinygrad_attn/engine.py` (le parcours), le `backward` de chaque règle dans `tinygrad_attn/ops.py`,
`_softmax_backward_rows` dans `tinygrad_attn/kernels/softmax.py`."""},
    """
import numpy as np
import tinygrad_attn as ta

q = ta.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True, dtype=ta.float64)   # (T, d) = (2, 2)
k = ta.tensor([[1.0, 0.0], [1.0, 1.0]], requires_grad=True, dtype=ta.float64)
v = ta.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True, dtype=ta.float64)
s = q @ k.T / np.sqrt(2)          # «the scores S|les scores S»
p = s.softmax(-1)                 # P
o = p @ v                         # O
for t in (s, p, o):
    t.retain_grad()               # «keep dS, dP, dO|garder dS, dP, dO»
seen = []
p.register_hook(lambda g: seen.append(g.numpy().copy()))   # «a hook sees dP as it flows|un crochet voit passer dP»
o.sum().backward()                # L = «sum of O, so dO is all ones|somme de O, donc dO ne contient que des 1»
print("S =", s.detach().numpy().round(4).tolist())
print("P =", p.detach().numpy().round(4).tolist())
print("O =", o.detach().numpy().round(4).tolist())
""",
    {"en": """
**Forward.** Row 0 compares q_0 = (1, 0) with k_0 = (1, 0) and k_1 = (1, 1): both scores are
1/sqrt(2) = 0.7071, so P's row 0 is (0.5, 0.5). Row 1, q_1 = (0, 1): scores (0, 0.7071), so
(1, e^0.7071) / (1 + e^0.7071) = (0.3302, 0.6698). O = P V.

**Backward**, with dO all ones: dV = P^T dO, dP = dO V^T = [[3, 7], [3, 7]], D = rowsum(dO * O) = (5, 5.679),
dS = P * (dP - D) = [[-1, 1], [-0.8847, 0.8847]] (each row sums to 0), dQ = dS K / sqrt(2) (its first column
is 0: both keys share their first coordinate, a shift of the whole row the softmax ignores), and
dK = dS^T Q / sqrt(2). The library's numbers:""",
     "fr": """
**Passe avant.** La ligne 0 compare q_0 = (1, 0) à k_0 = (1, 0) et k_1 = (1, 1) : les deux scores valent
1/sqrt(2) = 0,7071, la ligne 0 de P est donc (0,5 ; 0,5). Ligne 1, q_1 = (0, 1) : scores (0 ; 0,7071), d'où
(1, e^0,7071) / (1 + e^0,7071) = (0,3302 ; 0,6698). O = P V.

**Passe arrière**, avec dO rempli de 1 : dV = P^T dO, dP = dO V^T = [[3, 7], [3, 7]],
D = somme_ligne(dO * O) = (5 ; 5,679), dS = P * (dP - D) = [[-1, 1], [-0,8847 ; 0,8847]] (chaque ligne a pour
somme 0), dQ = dS K / sqrt(2) (sa première colonne est nulle : les deux clés partagent leur première
coordonnée, un décalage de toute la ligne que la softmax ignore), et dK = dS^T Q / sqrt(2). Les nombres de la
bibliothèque :"""},
    """
print("dV =", v.grad.numpy().round(4).tolist())
print("dP =", p.grad.numpy().tolist(), " («the hook saw|le crochet a vu»", seen[0].tolist(), ")")
print("dS =", s.grad.numpy().round(4).tolist())
print("dQ =", q.grad.numpy().round(4).tolist())
print("dK =", k.grad.numpy().round(4).tolist())
P, dP, O = p.detach().numpy(), p.grad.numpy(), o.detach().numpy()
assert np.allclose(s.grad.numpy(), P * (dP - O.sum(-1, keepdims=True)))   # «dS = P * (dP - rowsum(dO * O)), dO = 1|dS = P * (dP - somme_ligne(dO * O)), dO = 1»
""",
    {"en": """
The same numbers on both paths of `scaled_dot_product_attention`, and the trace of the backward, one row per
node, named after the layer that made it:""",
     "fr": """
Les mêmes nombres sur les deux chemins de `scaled_dot_product_attention`, et la trace de la passe arrière,
une ligne par nœud, nommée d'après la couche qui l'a produit :"""},
    """
F = ta.nn.functional
for kernel in ("math", "flash"):
    qq, kk, vv = (ta.tensor(t.detach().numpy(), requires_grad=True) for t in (q, k, v))
    with ta.sdpa_kernel(kernel):
        F.scaled_dot_product_attention(qq, kk, vv).sum().backward()
    print(kernel, "«same dQ, dK, dV|mêmes dQ, dK, dV»:", np.allclose(qq.grad.numpy(), q.grad.numpy())
          and np.allclose(kk.grad.numpy(), k.grad.numpy()) and np.allclose(vv.grad.numpy(), v.grad.numpy()))

ta.manual_seed(0)
mha = ta.nn.MultiHeadAttention(4, 2).to(ta.float64)
x = ta.randn(1, 2, 4, dtype=ta.float64)
with ta.sdpa_kernel("math"):
    out, _ = mha(x, need_weights=False)
with ta.trace_backward(names=mha):
    out.sum().backward()
""",
]


if __name__ == "__main__":
    build({"en": "01_multi_head_attention_masks.ipynb", "fr": "01_attention_multi_tetes_masques.ipynb"}, TUTORIAL_000)
    build({"en": "02_numpy_beside_the_framework.ipynb", "fr": "02_numpy_et_framework.ipynb"}, TUTORIAL_001)
    build({"en": "03_attention_function_and_class.ipynb", "fr": "03_fonction_et_classe_attention.ipynb"}, TUTORIAL_002)
    build({"en": "04_soft_dictionary_lookup.ipynb", "fr": "04_dictionnaire_souple.ipynb"}, TUTORIAL_003)
    build({"en": "05_cross_attention.ipynb", "fr": "05_attention_croisee.ipynb"}, TUTORIAL_004)
    build({"en": "06_step_through_a_backward.ipynb", "fr": "06_passe_arriere_pas_a_pas.ipynb"}, STEP_THROUGH)
