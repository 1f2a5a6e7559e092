"""The communicators of cclx-bench tp (torch.distributed as the reference, cclx, NCCL through
the cclx drop-in, cclx with FP8, NCCL with symmetric windows, cclx's fused allreduce + residual
add + RMSNorm) as interchangeable allreduces, or (sequence parallelism) as interchangeable
all-gather / reduce-scatter pairs, and the rank environment."""
from __future__ import annotations

import argparse
import ctypes
import dataclasses
import os
import socket
from typing import Any, Callable, Dict, List, Optional, Tuple

from .model import NORM_EPS

SKIP = "skip"  # the same step with the allreduces left out: the compute-only bound


@dataclasses.dataclass
class Variant:
    """One way of running the step: its allreduce, and what to switch on around it."""

    name: str
    reduce: Optional[Callable[[Any], Any]]
    enter: Callable[[], None] = lambda: None
    leave: Callable[[], None] = lambda: None
    out: Optional[Callable[[int, int, int], Any]] = None  # where the model writes what it reduces
    sp: Optional[Tuple[Callable[[Any], Any], Callable[[Any], Any]]] = None  # (gather, scatter)
    fused: Optional[Callable[[Any, Any, Any], Any]] = None  # allreduce + residual add + norm


def single_process_env() -> None:
    """Without torchrun's variables: this process is rank 0 of 1, on a free local port."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def find_intercept() -> Optional[Callable[[int], int]]:
    """cclxDropinSetIntercept from the preloaded cclx drop-in libnccl.so.2, if any."""
    try:
        lib = ctypes.CDLL(None)
    except OSError:
        return None
    if not hasattr(lib, "cclxDropinSetIntercept"):
        return None
    fn = lib.cclxDropinSetIntercept
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int]
    return fn


class Ranks:
    """torch.distributed (the reference communicator, plus a gloo group for control values
    that stays out of every measurement) and the cclx communicator."""

    def __init__(self, args: argparse.Namespace, torch: Any) -> None:
        import datetime

        import torch.distributed as dist

        import cclx

        self.torch, self.dist, self.cclx, self.cuda = torch, dist, cclx, args.cuda
        single_process_env()
        # Every NCCL call goes to the real NCCL unless a dropin step switches the drop-in on.
        self.intercept = find_intercept() if self.cuda else None
        if self.intercept is not None:
            self.intercept(0)
        tmo = datetime.timedelta(seconds=args.timeout)
        if self.cuda:
            local = int(os.environ.get("LOCAL_RANK", os.environ["RANK"]))
            per_host = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
            if per_host > torch.cuda.device_count():
                raise SystemExit(f"cclx-bench tp: {per_host} ranks on this host but only "
                                 f"{torch.cuda.device_count()} GPUs")
            self.device = torch.device("cuda", local % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
            dist.init_process_group("nccl", timeout=tmo, device_id=self.device)
        else:
            self.device = torch.device("cpu")
            dist.init_process_group("gloo", timeout=tmo)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.ctl = dist.new_group(backend="gloo")
        store = None
        if self.size == 1:  # nothing to meet; a private store avoids the launcher's port
            store = cclx.TcpStore("127.0.0.1", 0, True, "cclx-bench", args.timeout)
        self.comm = cclx.new_comm("cclx", self.device if self.cuda else "cpu",
                                  name="cclx_bench_tp", timeout=args.timeout, store=store)
        self.ref_name = "nccl" if self.cuda else "gloo"
        self.sym: Any = None
        self.sym_facts: Dict[str, Any] = {}

    def variants(self, names: List[str], fp8_min: int, slot_bytes: int = 0,
                 parallel: str = "tp") -> Dict[str, Variant]:
        """The communicators of `names` that this process can run (nccl-sym: windows of
        slot_bytes for each of the model's two row-parallel outputs). parallel "sp": all-gather
        and reduce-scatter pairs (Variant.sp) instead of allreduces."""
        if parallel == "sp":
            return self._sp_variants(names, fp8_min)
        dist, comm, SUM = self.dist, self.comm, self.cclx.ReduceOp.SUM
        fp8 = {"low_precision": "fp8"}
        out: Dict[str, Variant] = {}
        for n in names:
            if n == "nccl":
                out[self.ref_name] = Variant(self.ref_name, lambda t: dist.all_reduce(t))
            elif n == "cclx":
                out[n] = Variant(n, lambda t: comm.all_reduce(t, SUM, False))
            elif n == "cclx-fused":
                out[n] = Variant(n, None, fused=lambda t, res, w: comm.all_reduce_rmsnorm(
                    t, res, w, NORM_EPS))
            elif n == "cclx-fp8":
                out[n] = Variant(n, lambda t: comm.all_reduce(
                    t, SUM, False, fp8 if t.numel() * t.element_size() >= fp8_min else None))
            elif n == "dropin" and self.intercept is not None:
                on, off = (lambda: self.intercept(1)), (lambda: self.intercept(0))
                out[n] = Variant(n, lambda t: dist.all_reduce(t), on, off)
            elif n == "nccl-sym":
                v = self._nccl_sym(slot_bytes)
                if v is not None:
                    out[n] = v
        out[SKIP] = Variant(SKIP, None)
        return out

    def _sp_variants(self, names: List[str], fp8_min: int) -> Dict[str, Variant]:
        """Sequence parallelism: gather(rows) -> every rank's rows, scatter(partial sums of all
        rows) -> the sums of this rank's rows, through each communicator. nccl-sym has no such
        pair here (its windows hold the allreduce's buffers)."""
        torch, dist, comm, n = self.torch, self.dist, self.comm, self.size
        SUM = self.cclx.ReduceOp.SUM
        fp8 = {"low_precision": "fp8"}

        def rows(t: Any, k: int) -> Any:
            return t.new_empty((t.shape[0] * k,) + tuple(t.shape[1:]))

        def part(t: Any) -> Any:
            return t.new_empty((t.shape[0] // n,) + tuple(t.shape[1:]))

        def nccl_gather(t: Any) -> Any:
            out = rows(t, n)
            if self.cuda:
                dist.all_gather_into_tensor(out, t)
            else:  # gloo: the list form
                dist.all_gather(list(out.chunk(n)), t)
            return out

        def nccl_scatter(t: Any) -> Any:
            if self.cuda:
                out = part(t)
                dist.reduce_scatter_tensor(out, t)
                return out
            full = t.clone()  # gloo has no reduce-scatter of one tensor: allreduce, then slice
            dist.all_reduce(full)
            return full.chunk(n)[self.rank].clone()

        def cclx_gather(t: Any, hints: Any = None) -> Any:
            out = rows(t, n)
            comm.all_gather_single(out, t, False, hints)
            return out

        def cclx_scatter(t: Any, hints: Any = None) -> Any:
            out = part(t)
            comm.reduce_scatter_single(out, t, SUM, False, hints)
            return out

        def big(t: Any, k: int) -> Any:  # FP8 hint from fp8_min bytes of the larger buffer
            return fp8 if t.numel() * t.element_size() * k >= fp8_min else None

        out: Dict[str, Variant] = {}
        for name in names:
            if name == "nccl":
                out[self.ref_name] = Variant(self.ref_name, None, sp=(nccl_gather, nccl_scatter))
            elif name == "cclx":
                out[name] = Variant(name, None, sp=(cclx_gather, cclx_scatter))
            elif name == "cclx-fp8":
                out[name] = Variant(name, None, sp=(lambda t: cclx_gather(t, big(t, n)),
                                                    lambda t: cclx_scatter(t, big(t, 1))))
            elif name == "dropin" and self.intercept is not None:
                on, off = (lambda: self.intercept(1)), (lambda: self.intercept(0))
                out[name] = Variant(name, None, on, off, sp=(nccl_gather, nccl_scatter))
            elif name == "nccl-sym":
                self.sym_facts = {"skipped": "no sequence-parallel form (windows hold the "
                                  "allreduce's buffers)"}

        def skip_gather(t: Any) -> Any:  # the same shapes, no communication
            return t.repeat((n,) + (1,) * (t.dim() - 1))

        out[SKIP] = Variant(SKIP, None, sp=(skip_gather, lambda t: t.chunk(n)[self.rank]))
        return out

    def _nccl_sym(self, slot_bytes: int) -> Optional[Variant]:
        """NCCL (the library cclx loaded, which is torch's) with the model's row-parallel
        outputs in two symmetric windows from ncclMemAlloc: the allreduce runs in place there,
        with no copy. None (self.sym_facts['skipped'] says why, alike on every rank) when it
        cannot run."""
        import ctypes

        from ..perf import baselines as BL
        from ..perf import nccl_api as NA

        torch, dist = self.torch, self.dist
        if not self.cuda:
            self.sym_facts = {"skipped": "CUDA only"}
            return None
        from .._rendezvous import set_nccl_pip_dir

        set_nccl_pip_dir()
        lib, path, why = BL.nccl_library()
        version = 0
        if lib is not None:
            NA._prepare(lib)
            v = ctypes.c_int(0)
            if lib.ncclGetVersion(ctypes.byref(v)) == 0:
                version = v.value
            why = BL.nccl_sym_missing(lib, path, version) or ""
        self.sym_facts = {"library": path, "version": BL.version_str(version)}
        err = self._agree(why or None)
        sym = None
        if err is None:
            try:
                box = [None]
                if self.rank == 0:
                    uid = NA._UniqueId()
                    NA._check(lib, lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
                    box = [bytes(uid)]
                dist.broadcast_object_list(box, src=0, group=self.ctl)
                api = NA.NcclApiComm(lib, torch, self.rank, self.size, box[0],
                                     self.device.index)
                sym = BL.NcclSymComm(api, lib, torch, slot_bytes)
                sym.register()
            except Exception as e:  # noqa: BLE001 - the reason, on every rank
                err = f"{type(e).__name__}: {e}"
            err = self._agree(err)
        if err is not None:
            if sym is not None:
                sym.abort()
            self.sym_facts["skipped"] = err
            return None
        self.sym = sym
        self.sym_facts["window_bytes"] = sym.bytes
        dt = {torch.bfloat16: 9, torch.float16: 6, torch.float32: 7}

        def reduce(t: Any) -> None:  # in place, in the window the model wrote
            sym._run("ncclAllReduce", t.data_ptr(), t.data_ptr(), t.numel(), dt[t.dtype], 0)

        def out(slot: int, rows: int, cols: int) -> Any:
            return sym.alloc(slot, rows * cols, torch.bfloat16).view(rows, cols)

        return Variant("nccl-sym", reduce, out=out)

    def _agree(self, err: Optional[str]) -> Optional[str]:
        """The first error of any rank ('rank R: ...'), or None: the same on every rank."""
        errs: List[Optional[str]] = [None] * self.size
        self.dist.all_gather_object(errs, err, group=self.ctl)
        for r, e in enumerate(errs):
            if e is not None:
                return e if r == self.rank else f"rank {r}: {e}"
        return None

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def barrier(self) -> None:
        self.sync()
        self.dist.barrier(group=self.ctl)

    def reduce(self, vals: List[float], op: str) -> List[float]:
        """Element-wise max, min or sum over ranks, through the control group."""
        t = self.torch.tensor(vals, dtype=self.torch.float64)
        rop = {"max": self.dist.ReduceOp.MAX, "min": self.dist.ReduceOp.MIN,
               "sum": self.dist.ReduceOp.SUM}[op]
        self.dist.all_reduce(t, op=rop, group=self.ctl)
        return t.tolist()

    def top1(self, lm: Any, vocab_off: int) -> List[int]:
        """Global argmax per sequence of vocabulary-sharded logits."""
        torch = self.torch
        mx, am = lm.float().max(dim=-1)
        mine = torch.stack([mx.cpu().double(), (am.cpu() + vocab_off).double()], dim=1)
        parts = [torch.empty_like(mine) for _ in range(self.size)]
        self.dist.all_gather(parts, mine, group=self.ctl)
        allv = torch.stack(parts)                      # (ranks, batch, 2)
        best = allv[:, :, 0].argmax(dim=0)             # first rank with the maximum
        return [int(allv[best[i], i, 1]) for i in range(allv.shape[1])]

    def close(self) -> None:
        try:
            if self.sym is not None:
                self.sym.finalize()  # collective: deregisters the windows
            self.comm.finalize()
        finally:
            self.dist.destroy_process_group()
