"""cclx-bench accuracy: what FP8 collectives cost a real model.

Tensor-parallel inference of trained weights on CPU processes, every collective of the parallel
layout through a cclx communicator, against the same model on one process:
  exact      cclx collectives as they are (FP8 off per call);
  fp8        cclx FP8 (hint low_precision=fp8: e4m3 with a float scale per block of
             CCLX_FP8_BLOCK_SIZE values) on one collective kind, or on all of them;
  cast       an unscaled saturating e4m3 cast of the data around an exact collective;
  bf16       bfloat16 rounding of the data around every exact collective (the yardstick: what
             a bf16 model's collectives carry).
Models: all-MiniLM-L6-v2 (sentence embeddings: cosine to the one-process embeddings, nearest-
neighbour agreement, Spearman of pairwise similarities) and a small causal decoder trained here
(perplexity, greedy next-token agreement on held-out text).

    cclx-bench accuracy                         # everything (about 15 minutes on 2 cores)
    cclx-bench accuracy --tp 2 --decoder-tp 2 --blocks 128 --sentences 24
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

import numpy as np

from . import acc_model as M

DEFAULT_BLOCK = 128
# (name, layout, kinds): the kinds the variant runs in FP8 or casts; "all": every kind it uses
KIND_VARIANTS = [("allreduce", "tp", ["allreduce"]),
                 ("reduce-scatter", "sp", ["reduce-scatter"]),
                 ("all-gather", "sp", ["all-gather"]),
                 ("all-to-all", "a2a", ["all-to-all"]),
                 ("all", "a2a", list(M.KINDS))]


def _ints(s: str) -> List[int]:
    return [int(x) for x in str(s).split(",") if x.strip()]


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    if p is None:
        p = argparse.ArgumentParser(prog="cclx-bench accuracy", description=__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="encoder,decoder", help="encoder, decoder or both")
    p.add_argument("--tp", default="2,3,4,6", help="encoder TP degrees (divide 12 heads)")
    p.add_argument("--decoder-tp", default="2,4,8", help="decoder TP degrees (divide 8 heads)")
    p.add_argument("--blocks", default="32,64,128,256",
                   help="CCLX_FP8_BLOCK_SIZE values (powers of two, 32..256)")
    p.add_argument("--sweep", default="allreduce,reduce-scatter,all-gather,all-to-all,all",
                   help="the fp8 variants run at every block size (the others at 128 only)")
    p.add_argument("--sentences", type=int, default=0, help="encoder sentences (0: all 120)")
    p.add_argument("--layers", type=int, default=0, help="encoder layers (0: all 6)")
    p.add_argument("--decoder-seqs", type=int, default=192,
                   help="held-out windows of 64 characters for the decoder")
    p.add_argument("--decoder-steps", type=int, default=0,
                   help="decoder training steps (0: the default configuration's)")
    p.add_argument("--no-cast", action="store_true", help="leave out the unscaled-cast rows")
    p.add_argument("--out", default=None, help="results folder (JSON, table, plot)")
    p.add_argument("--timeout", type=float, default=600, help="seconds per rank group")
    p.add_argument("--from-json", default=None,
                   help="write the table and plot of an earlier run's accuracy.json into --out")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    return p


# ----------------------------------------------------------------------------- plan
def variants(block: int, sweep: List[str], cast: bool) -> List[Dict[str, Any]]:
    """The variants one rank group runs (CCLX_FP8_BLOCK_SIZE = block)."""
    out: List[Dict[str, Any]] = []
    if block == DEFAULT_BLOCK:
        out += [{"name": f"exact {lay}", "mode": "exact", "layout": lay, "kinds": []}
                for lay in ("tp", "sp", "a2a")]
    for name, lay, kinds in KIND_VARIANTS:
        if block == DEFAULT_BLOCK or name in sweep:
            out.append({"name": f"fp8 {name}", "mode": "fp8", "layout": lay, "kinds": kinds})
    if block == DEFAULT_BLOCK and cast:
        out += [{"name": f"cast {name}", "mode": "cast", "layout": lay, "kinds": kinds}
                for name, lay, kinds in KIND_VARIANTS]
    if block == DEFAULT_BLOCK:  # the yardstick: bf16 data on every collective
        out.append({"name": "bf16 all", "mode": "bf16", "layout": "a2a",
                    "kinds": list(M.KINDS)})
    return out


def decoder_cfg(args: argparse.Namespace):
    from . import acc_decoder as D

    cfg = D.Cfg()
    if args.decoder_steps:
        cfg.steps = args.decoder_steps
    return cfg


# ----------------------------------------------------------------------------- one rank
def _inputs(model: str, args: argparse.Namespace):
    """(model object, inputs) the same on every process."""
    if model == "encoder":
        from . import acc_bert as B

        bert = B.Bert(args.layers)
        ids, valid = bert.encode(B.sentences(args.sentences))
        return bert, (ids, valid)
    from . import acc_decoder as D

    cfg = decoder_cfg(args)
    p, held, _ = D.load_or_train(cfg)
    return (p, cfg), D.eval_batch(held, cfg, args.decoder_seqs)


def forward(model: str, obj, inp, colls: M.Colls, layout: str) -> Dict[str, np.ndarray]:
    if model == "encoder":
        from . import acc_bert as B

        return {"emb": B.run(obj, inp[0], inp[1], colls, layout)}
    from . import acc_decoder as D

    nll, pred = D.run(obj[0], obj[1], inp, colls, layout)
    return {"nll": nll, "pred": pred}


def worker(spec_path: str) -> int:
    """One rank of a group: every variant of the spec, outputs written by rank 0."""
    import cclx

    with open(spec_path) as f:
        spec = json.load(f)
    args = argparse.Namespace(**spec["args"])
    obj, inp = _inputs(spec["model"], args)
    comm = cclx.new_comm("cclx", "cpu", name="cclx_bench_accuracy", timeout=args.timeout)
    rank = comm.get_rank()
    outs: Dict[str, np.ndarray] = {}
    facts: Dict[str, Any] = {}
    for v in spec["variants"]:
        t0 = time.time()
        fp8 = v["kinds"] if v["mode"] == "fp8" else []
        cast = v["kinds"] if v["mode"] == "cast" else []
        bf16 = v["kinds"] if v["mode"] == "bf16" else []
        colls = M.Colls(comm, fp8, cast, bf16)
        res = forward(spec["model"], obj, inp, colls, v["layout"])
        for k, a in res.items():
            outs[f"{v['name']}|{k}"] = a
        facts[v["name"]] = {"bytes": colls.bytes, "calls": colls.calls, "s": time.time() - t0}
        if rank == 0:
            print(f"    {spec['label']}: {v['name']:<20} {time.time() - t0:6.1f} s", flush=True)
    comm.finalize()
    if rank == 0:
        np.savez(os.path.join(spec["dir"], "out.npz"), **outs)
        with open(os.path.join(spec["dir"], "facts.json"), "w") as f:
            json.dump(facts, f)
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(model: str, tp: int, block: int, vs: List[Dict[str, Any]], args: argparse.Namespace,
           tmp: str):
    """Runs one group of tp processes; returns (outputs, facts)."""
    d = tempfile.mkdtemp(prefix=f"{model}-tp{tp}-b{block}-", dir=tmp)
    label = f"{model} TP {tp} block {block}"
    a = {k: v for k, v in vars(args).items() if k != "worker"}
    spec = {"model": model, "variants": vs, "args": a, "dir": d, "label": label}
    path = os.path.join(d, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    port = _free_port()
    procs = []
    for r in range(tp):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(tp), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(tp), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   CCLX_FP8_BLOCK_SIZE=str(block), OMP_NUM_THREADS="1",
                   OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        for k in ("CCLX_LOW_PRECISION_ENABLE", "CCLX_LOW_PRECISION_MIN_BYTES"):
            env.pop(k, None)  # the variants choose FP8 per call
        procs.append(subprocess.Popen([sys.executable, "-m", "cclx.bench.accuracy",
                                       "--worker", path], env=env,
                                      stdout=None if r == 0 else subprocess.DEVNULL))
    t_end = time.time() + args.timeout
    rcs = []
    for p in procs:
        try:
            rcs.append(p.wait(timeout=max(1.0, t_end - time.time())))
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    q.kill()
            raise SystemExit(f"cclx-bench accuracy: {label} ran past {args.timeout} s")
    if any(rcs):
        raise SystemExit(f"cclx-bench accuracy: {label} failed (exit codes {rcs})")
    with np.load(os.path.join(d, "out.npz")) as z:
        outs = {k: z[k] for k in z.files}
    with open(os.path.join(d, "facts.json")) as f:
        facts = json.load(f)
    return outs, facts


# ----------------------------------------------------------------------------- the run
def _metrics(model: str, out: Dict[str, np.ndarray], ref: Dict[str, np.ndarray], inp):
    if model == "encoder":
        from . import acc_bert as B

        return B.metrics(out["emb"], ref["emb"])
    from . import acc_decoder as D

    m = D.metrics(out["nll"], out["pred"], ref["nll"], ref["pred"], inp)
    m["top1_change"] = m["top1_acc"] - float(np.mean(ref["pred"] == inp[:, 1:]))
    return m


def run_model(model: str, args: argparse.Namespace, tmp: str, log) -> Dict[str, Any]:
    obj, inp = _inputs(model, args)
    t0 = time.time()
    ref = forward(model, obj, inp, M.Colls(None), "tp")
    info: Dict[str, Any] = {"rows": []}
    if model == "encoder":
        from . import acc_bert as B

        texts = B.sentences(args.sentences)
        plain = B.reference(obj, texts)
        diff = float(np.abs(plain - ref["emb"]).max())
        info.update(sentences=len(texts), tokens=int(inp[1].sum()), padded=list(inp[0].shape),
                    tp1_vs_plain_max_abs=diff, layers=len(obj.layers))
        log(f"  encoder: {len(texts)} sentences, {int(inp[1].sum())} tokens; TP 1 against the "
            f"plain numpy reference: max |diff| {diff:.2e} ({time.time() - t0:.1f} s)")
        if diff > 1e-4:
            raise SystemExit("cclx-bench accuracy: the TP 1 forward differs from the plain "
                             "reference")
        degrees = _ints(args.tp)
    else:
        info.update(seqs=int(inp.shape[0]), ctx=int(inp.shape[1] - 1),
                    config=vars(obj[1]).copy(), ppl_tp1=float(np.exp(ref["nll"].mean())),
                    top1_acc_tp1=float(np.mean(ref["pred"] == inp[:, 1:])))
        log(f"  decoder: TP 1 held-out perplexity {info['ppl_tp1']:.3f}, next-character "
            f"accuracy {info['top1_acc_tp1']:.3f}")
        degrees = _ints(args.decoder_tp)
    sweep = [s.strip() for s in args.sweep.split(",") if s.strip()]
    for tp in degrees:
        for block in _ints(args.blocks):
            vs = variants(block, sweep, not args.no_cast)
            t1 = time.time()
            log(f"  {model} TP {tp} block {block}: {len(vs)} forwards on {tp} processes")
            outs, facts = launch(model, tp, block, vs, args, tmp)
            for v in vs:
                out = {k.split("|")[1]: a for k, a in outs.items()
                       if k.split("|")[0] == v["name"]}
                m = _metrics(model, out, ref, inp)
                row = {"model": model, "tp": tp, "block": block if v["mode"] == "fp8" else None,
                       "variant": v["name"], "mode": v["mode"], "layout": v["layout"],
                       "kinds": v["kinds"], "bytes": facts[v["name"]]["bytes"],
                       "calls": facts[v["name"]]["calls"], "seconds": facts[v["name"]]["s"],
                       **m}
                info["rows"].append(row)
            log(f"  {model} TP {tp} block {block}: done in {time.time() - t1:.0f} s")
    return info


def _commit() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        return subprocess.run(["git", "-C", here, "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def main(argv: Optional[List[str]] = None, args: Optional[argparse.Namespace] = None) -> int:
    if args is None:
        argv = list(sys.argv[1:] if argv is None else argv)
        args = build_parser().parse_args(argv)
    if args.worker:
        return worker(args.worker)
    if argv is not None and not any(k in os.environ for k in BLAS_THREADS):
        # One BLAS thread per process: the matrices are small and the rank groups fill the
        # cores; a threaded BLAS on a busy 2-core host ran the decoder's training step 20x
        # slower (2.0 s against 0.1 s). Set any of BLAS_THREADS to keep your own choice.
        env = dict(os.environ, **{k: "1" for k in BLAS_THREADS})
        sys.stdout.flush()
        os.execve(sys.executable, [sys.executable, "-m", "cclx.bench.accuracy", *argv], env)
    from . import acc_bert as B
    from . import acc_report as R

    if args.from_json:
        with open(args.from_json) as f:
            data = json.load(f)
        results = data.pop("results")
        print(R.write(args.out or os.path.dirname(os.path.abspath(args.from_json)), data,
                      results), flush=True)
        return 0
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for b in _ints(args.blocks):
        if b < 32 or b > 256 or b & (b - 1):
            raise SystemExit(f"cclx-bench accuracy: block {b} is not a power of two in 32..256")
    if "encoder" in models and B.missing():
        raise SystemExit("cclx-bench accuracy: the encoder needs " + ", ".join(B.missing()) +
                         " (pip install 'cclx[accuracy]')")
    if DEFAULT_BLOCK not in _ints(args.blocks):
        raise SystemExit(f"cclx-bench accuracy: --blocks must include {DEFAULT_BLOCK}")
    day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = args.out or (f"bench/results/{day}-fp8-accuracy-cpu" if os.path.isdir("bench/results")
                       else f"cclx-fp8-accuracy-{day}")
    t0 = time.time()
    log = lambda s: print(f"[{time.time() - t0:6.0f} s] {s}", flush=True)  # noqa: E731
    meta = {"tool": "cclx-bench accuracy", "commit": _commit(),
            "machine": f"cpu, {os.cpu_count()} cores", "date": day,
            "args": {k: v for k, v in vars(args).items() if k != "worker"},
            "threshold": R.THRESHOLD}
    results: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cclx-accuracy-") as tmp:
        for m in models:
            log(f"{m}:")
            results[m] = run_model(m, args, tmp, log)
    meta["seconds"] = time.time() - t0
    text = R.write(out, meta, results)
    print(text, flush=True)
    log(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
