"""cclx-bench tp: decode and prefill of a tensor-parallel Llama-shaped model, one rank per GPU
(torchrun), with NCCL, cclx, NCCL through the cclx drop-in, cclx with FP8, NCCL with symmetric
windows and cclx's fused allreduce + residual add + RMSNorm (cclx-fused: attention -> fused
AR+add+norm -> MLP -> fused AR+add+norm) measured in the same process, their timed repetitions
interleaved.

    torchrun --nproc-per-node 8 -m cclx.bench tp --preset llama3-70b
    torchrun --nproc-per-node 2 -m cclx.bench tp --mode decode --batch 1,8 --graph --json r.json
    torchrun --nproc-per-node 8 -m cclx.bench tp --parallel sp   # all-gather + reduce-scatter

Without torchrun's environment it runs as a single rank. Exits non-zero when a communicator's
logits differ from the reference's beyond the tolerance.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

from . import model as M
from . import report as R
from .comms import SKIP, Ranks, Variant

COMMS = ("nccl", "cclx", "dropin", "cclx-fp8", "nccl-sym", "cclx-fused")
DECODE_DEFAULTS = {"batch": "1,8,32,64", "context": "1024,4096"}
PREFILL_DEFAULT = "1024,4096,8192"


def parse_count(s: str) -> int:
    """An integer with an optional K/M/G (binary) suffix: 8, 4K, 16M, 16MiB."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(?:i?[bB])?\s*", s)
    if not m:
        raise argparse.ArgumentTypeError(f"invalid number {s!r} (e.g. 8, 4K, 16M)")
    return int(float(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20,
                                    "g": 1 << 30}[m.group(2).lower()])


def parse_list(s: str) -> List[int]:
    vals = [parse_count(x) for x in s.split(",") if x.strip()]
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"expected a comma list of positive numbers, got {s!r}")
    return vals


def build_parser(p: Optional[argparse.ArgumentParser] = None) -> argparse.ArgumentParser:
    if p is None:
        p = argparse.ArgumentParser(prog="cclx-bench tp")
    p.description = __doc__
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    g = p.add_argument_group("model")
    g.add_argument("--preset", default="llama3-8b", choices=sorted(M.PRESETS),
                   help="model shape (default llama3-8b)")
    for name in ("hidden", "heads", "kv-heads", "ffn", "layers", "vocab"):
        g.add_argument(f"--{name}", type=parse_count, default=None,
                       help=f"override the preset's {name.replace('-', ' ')}"
                       + (" (fewer layers fit less memory; the output says so)"
                          if name == "layers" else ""))
    g.add_argument("--seed", type=int, default=0, help="weights and inputs seed")
    g = p.add_argument_group("what to run")
    g.add_argument("--mode", default="all", choices=("decode", "prefill", "all"),
                   help="default all")
    g.add_argument("--batch", type=parse_list, default=parse_list(DECODE_DEFAULTS["batch"]),
                   help=f"decode batch sizes (default {DECODE_DEFAULTS['batch']})")
    g.add_argument("--context", type=parse_list, default=parse_list(DECODE_DEFAULTS["context"]),
                   help="decode context: KV positions each sequence attends to (default "
                   f"{DECODE_DEFAULTS['context']})")
    g.add_argument("--tokens", type=parse_list, default=parse_list(PREFILL_DEFAULT),
                   help=f"prefill lengths of one sequence (default {PREFILL_DEFAULT})")
    g.add_argument("--parallel", default="tp", choices=("tp", "sp"),
                   help="tp: an allreduce after each block (default); sp: sequence parallelism, "
                   "token rows split over the ranks, an all-gather before and a reduce-scatter "
                   "after each block instead (nccl-sym has no such form and is skipped)")
    g.add_argument("--graph", action="store_true", help="decode under CUDA graphs only")
    g.add_argument("--eager", action="store_true", help="decode eager only")
    g.add_argument("--comms", default=",".join(COMMS),
                   help="comma list of " + ", ".join(COMMS) + " (nccl is always the reference; "
                   "nccl-sym: NCCL with the reduced tensors in symmetric windows; cclx-fused: "
                   "each allreduce, its residual add and the next RMSNorm as one cclx call)")
    g.add_argument("--fp8-min-bytes", type=parse_count, default=16 << 20,
                   help="cclx-fp8: FP8 hint on allreduces of at least this size (default 16M)")
    g.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"),
                   help="cpu: float32 on CPU processes, gloo as the reference (for testing)")
    g = p.add_argument_group("timing and output")
    g.add_argument("--iters", type=int, default=None,
                   help="steps per timed repetition (default 20 decode, 5 prefill)")
    g.add_argument("--warmup", type=int, default=3, help="untimed steps per communicator")
    g.add_argument("--repeats", type=int, default=5,
                   help="timed repetitions per communicator, interleaved; median kept")
    g.add_argument("--tol", type=float, default=None,
                   help="max relative L2 error of the logits against the reference "
                   "(default 5e-2 bf16, 1e-4 float32)")
    g.add_argument("--json", default=None, help="write every number here")
    g.add_argument("--plot", default=None, help="PNG: ms per step by batch (needs matplotlib)")
    g.add_argument("--timeout", type=float, default=600.0, help="communicator timeout (s)")
    return p


@dataclasses.dataclass
class Row:
    mode: str        # decode | prefill
    exec: str        # graph | eager
    batch: int
    positions: int   # decode: context; prefill: tokens

    @property
    def step_tokens(self) -> int:
        return self.batch if self.mode == "decode" else self.positions

    def label(self) -> str:
        if self.mode == "decode":
            return f"decode {self.exec} batch {self.batch} context {self.positions}"
        return f"prefill {self.exec} tokens {self.positions}"


def resolve_shape(args: argparse.Namespace) -> M.Shape:
    base = M.PRESETS[args.preset]
    over = {k: getattr(args, k.replace("-", "_")) for k in
            ("hidden", "heads", "kv-heads", "ffn", "layers", "vocab")}
    fields = {k.replace("-", "_"): v for k, v in over.items() if v is not None}
    return dataclasses.replace(base, **fields)


def plan_rows(args: argparse.Namespace, cuda: bool) -> List[Row]:
    """The rows to run, in order: decode by context, batch and graph/eager (the two share one
    KV cache), then prefill by length."""
    rows: List[Row] = []
    if args.mode in ("decode", "all"):
        for ctx in args.context:
            for b in args.batch:
                rows += [Row("decode", ex, b, ctx) for ex in args.execs]
    if args.mode in ("prefill", "all"):
        rows += [Row("prefill", "eager", 1, t) for t in args.tokens]
    return rows


def resolve(args: argparse.Namespace, cuda_ok: bool) -> None:
    """Checks the arguments and fills in device, shape, execs, comms and defaults."""
    if args.device == "auto":
        args.device = "cuda" if cuda_ok else "cpu"
    if args.device == "cuda" and not cuda_ok:
        raise SystemExit("cclx-bench tp: --device cuda needs torch with a visible GPU")
    args.cuda = args.device == "cuda"
    if args.graph and not args.cuda:
        raise SystemExit("cclx-bench tp: --graph needs CUDA")
    if args.graph == args.eager:
        args.execs = ["graph", "eager"] if args.cuda else ["eager"]
    else:
        args.execs = ["graph"] if args.graph else ["eager"]
    args.shape = resolve_shape(args)
    try:
        M.check_shape(args.shape, 1)
    except ValueError as e:
        raise SystemExit(f"cclx-bench tp: {e}") from None
    names = [c.strip() for c in args.comms.split(",") if c.strip()]
    bad = [c for c in names if c not in COMMS]
    if bad:
        raise SystemExit(f"cclx-bench tp: unknown communicator {bad[0]!r} (choose from "
                         f"{', '.join(COMMS)})")
    args.comm_list = ["nccl"] + [c for c in COMMS[1:] if c in names]
    for k in ("warmup", "repeats"):
        if getattr(args, k) < (0 if k == "warmup" else 1):
            raise SystemExit(f"cclx-bench tp: --{k} too small")
    if args.iters is not None and args.iters < 1:
        raise SystemExit("cclx-bench tp: --iters must be >= 1")
    if args.tol is None:
        args.tol = 5e-2 if args.cuda else 1e-4
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise SystemExit("cclx-bench tp: --plot needs matplotlib (pip install matplotlib)")


# ----------------------------------------------------------------------------- one row
class Step:
    """The step of one row for one variant: eager calls or a captured CUDA graph."""

    def __init__(self, env: Ranks, mdl: M.TPLlama, v: Variant, tokens: Any, pos0: int,
                 cache: M.KVCache, graph: bool, warmup: int) -> None:
        self.env, self.v, self.graph = env, v, None
        torch = env.torch
        if v.sp is not None:
            fwd = (lambda: mdl.forward_sp(tokens, pos0, cache, v.sp[0], v.sp[1]))
        else:
            fwd = (lambda: mdl.forward(tokens, pos0, cache, v.reduce, v.out, v.fused))
        self.fwd = fwd
        v.enter()
        try:
            if not graph:
                for _ in range(warmup):
                    fwd()
                env.sync()
                return
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(max(1, warmup)):
                    fwd()
            torch.cuda.current_stream().wait_stream(side)
            env.barrier()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.out = fwd()
            env.sync()
        finally:
            v.leave()

    def once(self) -> Any:
        """(logits, last hidden) of one step, as float32 copies."""
        self.v.enter()
        try:
            if self.graph is not None:
                self.graph.replay()
                out = self.out
            else:
                out = self.fwd()
            self.env.sync()
        finally:
            self.v.leave()
        return out[0].float().clone(), out[1].float().clone()

    def time_ms(self, iters: int) -> float:
        """Milliseconds per step over `iters` back-to-back steps."""
        env, torch = self.env, self.env.torch
        call = self.graph.replay if self.graph is not None else self.fwd
        self.v.enter()
        try:
            if env.cuda:
                a = torch.cuda.Event(enable_timing=True)
                b = torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(iters):
                    call()
                b.record()
                b.synchronize()
                return a.elapsed_time(b) / iters
            t0 = time.perf_counter()
            for _ in range(iters):
                call()
            return (time.perf_counter() - t0) * 1e3 / iters
        finally:
            self.v.leave()


class Inputs:
    """Token ids, first position and KV cache of a row; the cache of the last decode shape is
    kept for the next row of the same batch and context."""

    def __init__(self, mdl: M.TPLlama) -> None:
        self.mdl = mdl
        self.key: Any = None
        self.val: Any = None

    def get(self, row: Row) -> Any:
        key = (row.mode, row.batch, row.positions)
        if key != self.key:
            self.val = None  # free the previous cache first
            mdl = self.mdl
            if row.mode == "decode":
                self.val = (mdl.tokens(row.batch, 1), row.positions - 1,
                            mdl.new_cache(row.batch, row.positions))
            else:
                self.val = (mdl.tokens(1, row.positions), 0, mdl.new_cache(1, row.positions))
            self.key = key
        return self.val


def run_row(env: Ranks, mdl: M.TPLlama, inputs: Inputs, row: Row,
            variants: Dict[str, Variant], args: argparse.Namespace,
            esize: int) -> Dict[str, Any]:
    torch = env.torch
    ar = M.allreduce_per_step(mdl.shape, row.step_tokens, esize)
    notes: List[str] = []
    names = list(variants)
    if "cclx-fp8" in names and ar["bytes_per_call"] < args.fp8_min_bytes:
        names.remove("cclx-fp8")
        notes.append(f"cclx-fp8: allreduces of {R.fmt_bytes(ar['bytes_per_call'])} < "
                     f"{R.fmt_bytes(args.fp8_min_bytes)} (as cclx)")
    tokens, pos0, cache = inputs.get(row)
    iters = args.iters or (20 if row.mode == "decode" else 5)
    steps = {n: Step(env, mdl, variants[n], tokens, pos0, cache, row.exec == "graph",
                     args.warmup) for n in names}
    outs = {n: steps[n].once() for n in names if n != SKIP}
    times: Dict[str, List[float]] = {n: [] for n in names}
    for rep in range(args.repeats):
        k = rep % len(names)  # each repetition starts with the next variant
        for n in names[k:] + names[:k]:
            env.barrier()
            times[n].append(steps[n].time_ms(iters))
    med = env.reduce([statistics.median(times[n]) for n in names], "max")
    ms = dict(zip(names, med))
    res: Dict[str, Any] = {}
    ref = env.ref_name
    ref_l, ref_h = outs[ref]
    ref_top = env.top1(mdl.masked_logits(ref_l), mdl.sh.vocab_off)
    valid = mdl.sh.vocab_valid
    for n in names:
        d: Dict[str, Any] = {"ms": ms[n], "tok_s": row.step_tokens / (ms[n] * 1e-3),
                             "ms_reps_rank": times[n]}
        if n != SKIP:
            d["vs_ref_pct"] = (ms[ref] / ms[n] - 1.0) * 100.0
            d["ar_share"] = (ms[n] - ms[SKIP]) / ms[n]
            lg, hd = outs[n]
            sq = env.reduce([float(((lg[:, :valid] - ref_l[:, :valid]) ** 2).sum()),
                             float((ref_l[:, :valid] ** 2).sum())], "sum")
            d["logits_rel_err"] = (sq[0] / sq[1]) ** 0.5 if sq[1] > 0 else float("nan")
            d["hidden_rel_err"] = env.reduce(
                [float((hd - ref_h).norm() / ref_h.norm().clamp_min(1e-30))], "max")[0]
            top = ref_top if n == ref else env.top1(mdl.masked_logits(lg), mdl.sh.vocab_off)
            d["top1_agree"] = sum(a == b for a, b in zip(top, ref_top)) / len(ref_top)
            fin = bool(torch.isfinite(lg).all()) and bool(torch.isfinite(hd).all())
            finite = env.reduce([float(fin)], "min")[0] == 1.0
            if n == ref:
                d["check"] = "ref" if finite else "FAIL"
            elif n == "cclx-fp8":
                d["check"] = "fp8" if finite else "FAIL"
            else:
                d["check"] = "ok" if finite and d["logits_rel_err"] <= args.tol else "FAIL"
        res[n] = d
    del steps, cache, tokens
    if env.cuda:
        torch.cuda.empty_cache()
    return {"mode": row.mode, "exec": row.exec, "batch": row.batch,
            "context" if row.mode == "decode" else "tokens": row.positions,
            "step_tokens": row.step_tokens, "allreduce": ar, "ref": ref, "results": res,
            "notes": notes}


# ----------------------------------------------------------------------------- the run
def plan_layers(env: Ranks, args: argparse.Namespace, rows: List[Row], esize: int) -> Dict:
    """Layers to build: the requested depth, reduced when weights, the largest KV cache and
    a step's activations would not fit the free GPU memory (the same on every rank)."""
    shape, preset = args.shape, M.PRESETS[args.preset]
    info: Dict[str, Any] = {"requested": shape.layers, "layers": shape.layers,
                            "reduced_for_memory": False}
    if env.cuda and rows:
        free, total = env.torch.cuda.mem_get_info()
        kv = max(rows, key=lambda r: r.batch * r.positions)
        fit = M.fit_layers(shape, env.size, esize, int(free * 0.95), kv.batch, kv.positions,
                           max(r.step_tokens for r in rows), reserve=3 * M.GiB)
        fit = int(env.reduce([float(fit)], "min")[0])
        info.update(free_bytes=free, total_bytes=total)
        if fit < 1:
            raise SystemExit(f"cclx-bench tp: even one layer of this shape does not fit "
                             f"{R.fmt_bytes(free)} of free GPU memory at {env.size} ranks; "
                             "use fewer/smaller --batch, --context, --tokens or more ranks")
        if fit < shape.layers:
            info.update(layers=fit, reduced_for_memory=True)
    info["preset_layers"] = preset.layers
    info["shape_is_preset"] = dataclasses.replace(shape, layers=preset.layers) == preset
    return info


def describe_model(args: argparse.Namespace, shape: M.Shape, layers: Dict[str, Any]) -> str:
    """E.g. "llama3-70b shape, 8 of 80 layers (--layers 8)"."""
    preset = M.PRESETS[args.preset]
    is_preset = layers["shape_is_preset"]
    name = f"{args.preset} shape" if is_preset else f"custom shape (from {args.preset})"
    full = preset.layers if is_preset else layers["requested"]
    n = shape.layers
    s = f"{name}, {n} of {full} layers" if n < full else f"{name}, {n} layers"
    why = []
    if is_preset and layers["requested"] != preset.layers:
        why.append(f"--layers {layers['requested']}")
    if layers["reduced_for_memory"]:
        why.append(f"reduced from {layers['requested']} to fit "
                   f"{R.fmt_bytes(layers['free_bytes'])} of free GPU memory")
    return s + (f" ({'; '.join(why)})" if why else "")


def _meta(args: argparse.Namespace, env: Ranks, shape: M.Shape, layers: Dict[str, Any],
          names: List[str], notes: List[str], build_s: float, esize: int) -> Dict[str, Any]:
    from ..perf.report import machine_facts

    facts = machine_facts(env.torch, env.cuda) if env.rank == 0 else {}
    where = (f"cuda, {facts.get('gpu_models', ['?'])[0]}" if env.cuda
             else f"cpu, {env.size} process{'es' if env.size > 1 else ''}")
    p = M.params_per_rank(shape, env.size)
    iters = (str(args.iters) if args.iters else
             "20 (decode) / 5 (prefill)")
    return {"model": describe_model(args, shape, layers), "preset": args.preset,
            "shape": dataclasses.asdict(shape), "layers": layers, "world_size": env.size,
            "where": where, "dtype": "bf16" if env.cuda else "f32", "esize": esize,
            "comms": names, "ref": env.ref_name, "dropin_found": env.intercept is not None,
            "nccl_sym": env.sym_facts,
            "notes": notes, "params_per_rank": p, "weight_bytes_per_rank": p["total"] * esize,
            "build_s": build_s, "fp8_min_bytes": args.fp8_min_bytes, "iters": iters,
            "parallel": args.parallel,
            "repeats": args.repeats, "warmup": args.warmup, "tol": args.tol,
            "machine": facts}


def run(args: argparse.Namespace, torch: Any) -> int:
    env = Ranks(args, torch)
    try:
        return _run(env, args, torch)
    finally:
        env.close()


def _run(env: Ranks, args: argparse.Namespace, torch: Any) -> int:
    rank, size = env.rank, env.size
    try:
        M.check_shape(args.shape, size)
    except ValueError as e:
        raise SystemExit(f"cclx-bench tp: {e}") from None
    dtype = torch.bfloat16 if env.cuda else torch.float32
    esize = 2 if env.cuda else 4
    rows = plan_rows(args, env.cuda)
    layers = plan_layers(env, args, rows, esize)
    shape = dataclasses.replace(args.shape, layers=layers["layers"])
    # nccl-sym: one window per row-parallel output, as large as the largest step's
    slot = max([r.step_tokens for r in rows] + [1]) * shape.hidden * esize
    variants = env.variants(args.comm_list, args.fp8_min_bytes, slot, args.parallel)
    max_pos = max([r.positions for r in rows] + [1])
    t0 = time.time()
    mdl = M.TPLlama(shape, size, rank, env.device, dtype, seed=args.seed,
                    max_positions=max_pos)
    env.barrier()
    build_s = time.time() - t0
    notes = []
    if "dropin" in args.comm_list and "dropin" not in variants:
        notes.append("dropin: not measured (no cclx drop-in NCCL in this process: "
                     "run under `cclx-nccl run -- torchrun ...`)" if env.cuda else
                     "dropin: not measured (CUDA only)")
    if "nccl-sym" in args.comm_list and "nccl-sym" not in variants:
        notes.append(f"nccl-sym: not measured ({env.sym_facts.get('skipped', 'unavailable')})")
    if not env.cuda:
        notes.append("CPU run: float32, gloo is the reference, decode eager only")
    meta = _meta(args, env, shape, layers, list(variants), notes, build_s, esize)
    if rank == 0:
        print(R.header(meta), flush=True)
    results = []
    inputs = Inputs(mdl)
    for i, row in enumerate(rows):
        t_row = time.time()
        r = run_row(env, mdl, inputs, row, variants, args, esize)
        results.append(r)
        if rank == 0:
            print(R.row_lines(r, list(variants)), flush=True)
            sys.stderr.write(R.progress(i + 1, len(rows), row.label(), r,
                                        time.time() - t_row, time.time() - t0) + "\n")
            sys.stderr.flush()
    summ = R.summary(results, list(variants), env.ref_name)
    if rank == 0:
        print(R.summary_line(summ), flush=True)
        if args.json:
            R.write_json(args.json, args, meta, results, summ)
        if args.plot and results:
            R.plot(args.plot, results, list(variants), R.title(meta))
    return 0 if summ["passed"] else 1


def main(argv: Optional[List[str]] = None, args: Optional[argparse.Namespace] = None) -> int:
    if args is None:
        args = build_parser().parse_args(argv)
    torch = None
    try:
        import torch  # type: ignore[import-not-found,no-redef]
    except ImportError:
        raise SystemExit("cclx-bench tp: needs torch (pip install torch)") from None
    resolve(args, torch.cuda.is_available() and torch.cuda.device_count() > 0)
    return run(args, torch)
