"""Model 2 of cclx-bench accuracy: a small causal character-level decoder (pre-RMSNorm, 8 heads,
ReLU FFN, no biases) trained here in numpy (hand-written backward, Adam, fixed seed) on the
docstrings of Python's standard library, cached under ~/.cache/cclx/ ($XDG_CACHE_HOME/cclx/
when set), and evaluated for perplexity and greedy next-token agreement on held-out text."""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import math
import os
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from . import acc_model as M

MODULES = ("collections", "functools", "itertools", "json", "re", "string", "textwrap",
           "random", "statistics", "os", "pathlib", "argparse", "logging", "subprocess",
           "threading", "datetime", "decimal", "fractions", "heapq", "bisect", "csv",
           "shutil", "tempfile", "unittest", "typing", "dataclasses", "enum", "abc",
           "contextlib", "inspect", "socket", "email", "http.client", "urllib.parse",
           "zipfile", "tarfile", "pickle", "copy", "pprint", "difflib", "calendar", "math")
CHARS = "\n" + "".join(chr(c) for c in range(32, 127))  # 96 symbols; anything else becomes '?'


@dataclasses.dataclass
class Cfg:
    dim: int = 128
    heads: int = 8
    layers: int = 2
    ffn: int = 384
    ctx: int = 64
    steps: int = 1500
    batch: int = 16
    lr: float = 3e-3
    seed: int = 0


def corpus() -> str:
    """The docstrings of MODULES (module, then its public functions and classes, in name order),
    squeezed to CHARS."""
    parts = []
    for name in MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        for obj in [mod] + [getattr(mod, a) for a in sorted(dir(mod)) if not a.startswith("_")]:
            if obj is not mod and getattr(obj, "__module__", None) != mod.__name__:
                continue
            d = inspect.getdoc(obj) if (obj is mod or inspect.isfunction(obj)
                                        or inspect.isclass(obj)) else None
            if d:
                parts.append(d.strip())
    text = "\n\n".join(parts)
    ok = set(CHARS)
    return "".join(c if c in ok else "?" for c in text)


def encode(text: str) -> np.ndarray:
    lut = {c: i for i, c in enumerate(CHARS)}
    return np.array([lut[c] for c in text], np.int64)


def split(tokens: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Train on the first 90%, hold out the rest."""
    k = int(len(tokens) * 0.9)
    return tokens[:k], tokens[k:]


# ----------------------------------------------------------------------------- training
def init(cfg: Cfg, V: int, rng: np.random.Generator) -> Dict[str, np.ndarray]:
    D, F = cfg.dim, cfg.ffn
    n = lambda *s, sc=0.02: (rng.standard_normal(s) * sc).astype(np.float32)  # noqa: E731
    p = {"emb": n(V, D), "pos": n(cfg.ctx, D), "gf": np.ones(D, np.float32), "out": n(D, V)}
    for i in range(cfg.layers):
        o = 0.02 / math.sqrt(2 * cfg.layers)
        p.update({f"{i}.wq": n(D, D), f"{i}.wk": n(D, D), f"{i}.wv": n(D, D),
                  f"{i}.wo": n(D, D, sc=o), f"{i}.w1": n(D, F), f"{i}.w2": n(F, D, sc=o),
                  f"{i}.g1": np.ones(D, np.float32), f"{i}.g2": np.ones(D, np.float32)})
    return p


EPS = 1e-5


def _rms(x, g):
    r = 1.0 / np.sqrt(np.mean(x * x, -1, keepdims=True) + EPS)
    return x * r * g, r


def _rms_back(dy, x, r, g):
    dxh = dy * g
    dg = np.sum(dy * x * r, axis=tuple(range(dy.ndim - 1)))
    dx = r * dxh - r ** 3 * x * np.mean(dxh * x, -1, keepdims=True)
    return dx, dg


def loss_and_grads(p: Dict[str, np.ndarray], cfg: Cfg, tok: np.ndarray
                   ) -> Tuple[float, Dict[str, np.ndarray]]:
    """Mean cross entropy of predicting tok[:, 1:] from tok[:, :-1], and its gradients."""
    x_in, y = tok[:, :-1], tok[:, 1:]
    B, T = x_in.shape
    D, H = cfg.dim, cfg.heads
    dh = D // H
    mask = np.triu(np.ones((T, T), bool), 1)
    x = p["emb"][x_in] + p["pos"][:T]
    caches = []
    for i in range(cfg.layers):
        n1, r1 = _rms(x, p[f"{i}.g1"])
        q, k, v = (n1 @ p[f"{i}.w{c}"] for c in "qkv")
        hs = lambda t: t.reshape(B, T, H, dh).transpose(0, 2, 1, 3)  # noqa: E731
        qh, kh, vh = hs(q), hs(k), hs(v)
        s = qh @ kh.transpose(0, 1, 3, 2) / math.sqrt(dh)
        s = np.where(mask, -1e30, s)
        s = np.exp(s - s.max(-1, keepdims=True))
        pr = s / s.sum(-1, keepdims=True)
        a = (pr @ vh).transpose(0, 2, 1, 3).reshape(B, T, D)
        x1 = x + a @ p[f"{i}.wo"]
        n2, r2 = _rms(x1, p[f"{i}.g2"])
        u = n2 @ p[f"{i}.w1"]
        h = np.maximum(u, 0)
        x2 = x1 + h @ p[f"{i}.w2"]
        caches.append((x, n1, r1, qh, kh, vh, pr, a, x1, n2, r2, u, h))
        x = x2
    nf, rf = _rms(x, p["gf"])
    logits = nf @ p["out"]
    logits -= logits.max(-1, keepdims=True)
    e = np.exp(logits)
    sm = e / e.sum(-1, keepdims=True)
    N = B * T
    loss = float(-np.mean(np.log(np.take_along_axis(sm, y[..., None], -1) + 1e-30)))
    g: Dict[str, np.ndarray] = {}
    dl = sm
    np.put_along_axis(dl, y[..., None], np.take_along_axis(dl, y[..., None], -1) - 1, -1)
    dl /= N
    g["out"] = nf.reshape(N, D).T @ dl.reshape(N, -1)
    dx, g["gf"] = _rms_back(dl @ p["out"].T, x, rf, p["gf"])
    for i in reversed(range(cfg.layers)):
        x0, n1, r1, qh, kh, vh, pr, a, x1, n2, r2, u, h = caches[i]
        g[f"{i}.w2"] = h.reshape(N, -1).T @ dx.reshape(N, D)
        du = (dx @ p[f"{i}.w2"].T) * (u > 0)
        g[f"{i}.w1"] = n2.reshape(N, D).T @ du.reshape(N, -1)
        d, g[f"{i}.g2"] = _rms_back(du @ p[f"{i}.w1"].T, x1, r2, p[f"{i}.g2"])
        dx = dx + d
        g[f"{i}.wo"] = a.reshape(N, D).T @ dx.reshape(N, D)
        da = (dx @ p[f"{i}.wo"].T).reshape(B, T, H, dh).transpose(0, 2, 1, 3)
        dpr = da @ vh.transpose(0, 1, 3, 2)
        dv = pr.transpose(0, 1, 3, 2) @ da
        ds = pr * (dpr - np.sum(dpr * pr, -1, keepdims=True)) / math.sqrt(dh)
        dq, dk = ds @ kh, ds.transpose(0, 1, 3, 2) @ qh
        un = lambda t: t.transpose(0, 2, 1, 3).reshape(B, T, D)  # noqa: E731
        dn1 = 0
        for c, dt in (("q", un(dq)), ("k", un(dk)), ("v", un(dv))):
            g[f"{i}.w{c}"] = n1.reshape(N, D).T @ dt.reshape(N, D)
            dn1 = dn1 + dt @ p[f"{i}.w{c}"].T
        d, g[f"{i}.g1"] = _rms_back(dn1, x0, r1, p[f"{i}.g1"])
        dx = dx + d
    g["emb"] = np.zeros_like(p["emb"])
    np.add.at(g["emb"], x_in.reshape(-1), dx.reshape(N, D))
    g["pos"] = np.zeros_like(p["pos"])
    g["pos"][:T] = dx.sum(0)
    return loss, g


def train(cfg: Cfg, tokens: np.ndarray, log: Callable[[str], None] = print
          ) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(cfg.seed)
    p = init(cfg, len(CHARS), rng)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    s = {k: np.zeros_like(v) for k, v in p.items()}
    b1, b2 = 0.9, 0.99
    t0 = time.time()
    avg = None
    for step in range(1, cfg.steps + 1):
        at = rng.integers(0, len(tokens) - cfg.ctx - 1, cfg.batch)
        tok = np.stack([tokens[a:a + cfg.ctx + 1] for a in at])
        loss, g = loss_and_grads(p, cfg, tok)
        avg = loss if avg is None else 0.95 * avg + 0.05 * loss
        warm = min(1.0, step / 30)
        lr = cfg.lr * warm * 0.5 * (1 + math.cos(math.pi * step / cfg.steps))
        for k in p:
            m[k] = b1 * m[k] + (1 - b1) * g[k]
            s[k] = b2 * s[k] + (1 - b2) * g[k] * g[k]
            mh, sh = m[k] / (1 - b1 ** step), s[k] / (1 - b2 ** step)
            p[k] = (p[k] - lr * mh / (np.sqrt(sh) + 1e-8)).astype(np.float32)
        if step % 50 == 0 or step == cfg.steps:
            log(f"  decoder training: step {step}/{cfg.steps} loss {avg:.3f} "
                f"({time.time() - t0:.0f} s)")
    return p


def cache_path(cfg: Cfg, text: str) -> str:
    h = hashlib.sha256((repr(dataclasses.astuple(cfg)) + text).encode()).hexdigest()[:16]
    root = os.path.join(os.environ.get("XDG_CACHE_HOME") or
                        os.path.join(os.path.expanduser("~"), ".cache"), "cclx")
    return os.path.join(root, f"accuracy-decoder-{h}.npz")


def load_or_train(cfg: Cfg, log: Callable[[str], None] = print
                  ) -> Tuple[Dict[str, np.ndarray], np.ndarray, str]:
    """(weights, held-out tokens, cache file): trained once per configuration and corpus."""
    text = corpus()
    train_tok, held = split(encode(text))
    path = cache_path(cfg, text)
    if os.path.exists(path):
        with np.load(path) as z:
            return {k: z[k] for k in z.files}, held, path
    log(f"  decoder: training on {len(train_tok)} characters of stdlib docstrings "
        f"({cfg.steps} steps, cached in {path})")
    p = train(cfg, train_tok, log)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + f".{os.getpid()}.npz"
    np.savez(tmp, **p)
    os.replace(tmp, path)
    return p, held, path


# ----------------------------------------------------------------------------- inference
def spec(cfg: Cfg) -> M.Spec:
    return M.Spec(heads=cfg.heads, pre_norm=True, causal=True, act="relu", norm="rms", eps=EPS)


def layers(p: Dict[str, np.ndarray], cfg: Cfg) -> List[M.Layer]:
    return [M.Layer(wq=p[f"{i}.wq"], wk=p[f"{i}.wk"], wv=p[f"{i}.wv"], wo=p[f"{i}.wo"],
                    w1=p[f"{i}.w1"], w2=p[f"{i}.w2"], n1=(p[f"{i}.g1"], None),
                    n2=(p[f"{i}.g2"], None)) for i in range(cfg.layers)]


def eval_batch(held: np.ndarray, cfg: Cfg, nseq: int) -> np.ndarray:
    """nseq windows of ctx + 1 tokens spread evenly over the held-out text."""
    starts = np.linspace(0, len(held) - cfg.ctx - 2, nseq).astype(int)
    return np.stack([held[s:s + cfg.ctx + 1] for s in starts])


def run(p: Dict[str, np.ndarray], cfg: Cfg, tok: np.ndarray, colls: M.Colls, layout: str,
        progress=None) -> Tuple[np.ndarray, np.ndarray]:
    """(negative log-likelihood [nseq, ctx], greedy prediction [nseq, ctx]) of tok[:, 1:]."""
    x_in = tok[:, :-1]
    nseq, T = x_in.shape
    fwd = M.Forward(spec(cfg), layers(p, cfg), colls, layout)
    x = (p["emb"][x_in] + p["pos"][:T]).reshape(nseq * T, -1).astype(np.float32)
    x = fwd(fwd.local(x), np.ones((nseq, T), bool), progress)
    if layout != "tp":
        x = colls.all_gather(x)[:nseq * T]
    nf = M.norm(x, (p["gf"], None), spec(cfg))
    lg = (nf @ p["out"]).astype(np.float64)
    lg -= lg.max(-1, keepdims=True)
    lp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    y = tok[:, 1:].reshape(-1)
    nll = -lp[np.arange(y.size), y]
    return nll.reshape(nseq, T), lg.argmax(-1).reshape(nseq, T)


def metrics(nll: np.ndarray, pred: np.ndarray, ref_nll: np.ndarray, ref_pred: np.ndarray,
            tok: np.ndarray) -> Dict[str, float]:
    ppl, ref = float(np.exp(nll.mean())), float(np.exp(ref_nll.mean()))
    return {"ppl": ppl, "ppl_rel": ppl / ref - 1.0,
            "greedy_agree": float(np.mean(pred == ref_pred)),
            "top1_acc": float(np.mean(pred == tok[:, 1:])),
            "max_abs": float(np.abs(nll - ref_nll).max())}
