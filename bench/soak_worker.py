"""One rank of bench/soak.py: the item loop, buffers on the comm's device, late events and the
recreation of the comm after a failure.

The schedule is a function of (seed, item): item i draws its calls from its own generator, so
every rank knows every call (and every rank's inputs, soak_ref.Pool) without communicating, and a
rank that skips items after a failure stays in step. An item is one call, an async batch of 2..16
calls checked after all were issued, or (cuda) a CUDA graph of 1..3 calls replayed 2..3 times.

After a failed call a rank aborts its comm and posts the item index in the store; once every rank
has posted, all resume after the largest index on a new comm (same store, new name)."""
from __future__ import annotations

import json
import os
import re
import time
import traceback

import numpy as np

import soak_ops as O
import soak_ref as R

_TORCH = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
          "i8": "int8", "u8": "uint8", "i32": "int32", "i64": "int64", "u32": "uint32",
          "u64": "uint64", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


class Buf:
    __slots__ = ("view", "base", "host0", "off", "n", "dt")


class Ctx:
    def __init__(self, a, rank: int, size: int) -> None:
        self.cuda = a.device == "cuda"
        self.torch = None
        if self.cuda:  # first: cclx then finds the NCCL torch loaded
            import torch

            self.torch = torch
        import cclx

        self.cclx, self.a, self.rank, self.size = cclx, a, rank, size
        self.has_nccl = bool(self.cuda and self.torch.cuda.device_count() >= size)
        self.dtypes = [d for d in R.FLOAT_TYPES + R.INT_TYPES + R.FP8_TYPES
                       if (d not in ("bf16",) + R.FP8_TYPES or R.ml_dtypes is not None)
                       and (not self.cuda or hasattr(self.torch, _TORCH[d]))]
        self.max_bytes = a.max_bytes_n
        self.pool = R.Pool(a.seed, self.max_bytes)
        self.win_elems = max(16, min(self.max_bytes // 4, 1 << 20))
        self._win = None
        self.comm = None
        self.again = self.bufs = None

    # ------------------------------------------------------------------ sizes and buffers
    def count(self, rng, dtype: str, mult: int = 1) -> int:
        """Elements per block: bytes log-uniform in one of three ranges (85%: up to 16 KiB, 13%:
        up to 1 MiB, 2%: up to --max-bytes), the whole buffer (mult blocks) within --max-bytes."""
        es = R.np_dtype(dtype).itemsize
        u = rng.random()
        hi = 16 << 10 if u < 0.85 else (1 << 20 if u < 0.98 else self.max_bytes)
        hi = min(self.max_bytes, hi)
        b = float(np.exp(rng.uniform(np.log(es), np.log(max(hi, es)))))
        return max(1, int(b // (es * mult)))

    def _dev(self, host: np.ndarray, b: Buf, shape):
        if self.cuda:
            t = self.torch.from_numpy(host.view(np.uint8)).to("cuda")
            b.base = t.view(getattr(self.torch, _TORCH[b.dt]))
        else:
            b.base = host
        v = b.base[b.off:b.off + b.n]
        b.view = v.reshape(shape) if shape is not None else v
        return b

    def _new(self, dt: str, n: int, off: int) -> Buf:
        b = Buf()
        b.dt, b.n, b.off = dt, n, off
        b.host0 = R.poison(dt, n + off + 3)
        return b

    def dev_in(self, arr: np.ndarray, off: int, shape=None) -> Buf:
        """A view at element offset `off` of a guarded buffer holding a copy of `arr`."""
        dt = next(k for k in R.FLOAT_TYPES + R.INT_TYPES + R.FP8_TYPES
                  if R.np_dtype(k) == arr.dtype)
        b = self._new(dt, arr.size, off)
        b.host0[off:off + arr.size] = arr.reshape(-1)
        return self._dev(b.host0.copy() if not self.cuda else b.host0, b, shape)

    def dev_out(self, dt: str, n: int, off: int, shape=None) -> Buf:
        b = self._new(dt, n, off)
        return self._dev(b.host0.copy() if not self.cuda else b.host0, b, shape)

    def sub(self, b: Buf, start: int, n: int) -> Buf:
        s = Buf()
        s.dt, s.base, s.host0, s.off, s.n = b.dt, b.base, b.host0, b.off + start, n
        s.view = b.base[s.off:s.off + n]
        return s

    def refill(self, bufs) -> None:
        """Restores the buffers' first contents (inputs, poisoned outputs) before a replay."""
        for b in bufs:
            src = self.torch.from_numpy(b.host0.view(np.uint8)).to("cuda")
            b.base.view(self.torch.uint8).copy_(src)

    def _host_all(self, base, dt: str) -> np.ndarray:
        if not self.cuda:
            return base
        u = self.torch.uint8
        return base.view(u).cpu().numpy().view(R.np_dtype(dt))

    def host(self, b: Buf) -> np.ndarray:
        return self._host_all(b.base, b.dt)[b.off:b.off + b.n]

    def guards(self, *bufs) -> int:
        """Elements outside the views (of the same underlying buffers) that changed."""
        groups: dict = {}
        for b in bufs:
            groups.setdefault(id(b.base), []).append(b)
        bad = 0
        for bs in groups.values():
            h = R.bits(self._host_all(bs[0].base, bs[0].dt))
            mask = np.ones(h.size, bool)
            for b in bs:
                mask[b.off:b.off + b.n] = False
            bad += int(np.count_nonzero(h[mask] != R.bits(R.poison(bs[0].dt, 1))[0]))
        return bad

    # ------------------------------------------------------------------ windows
    def window(self):
        if self._win is None:
            n = self.size * self.win_elems
            if self.cuda:
                buf = self.torch.zeros(n, dtype=self.torch.float32, device="cuda")
            else:
                buf = self.cclx.empty_shared((n,), np.float32)
                buf[...] = 0
            self._win = (self.comm.new_window(buf), buf)
        return self._win

    def host_region(self, buf, start: int, n: int) -> np.ndarray:
        v = buf[start:start + n]
        return v.cpu().numpy() if self.cuda else v.copy()

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    # ------------------------------------------------------------------ comms
    def new_comm(self, store, gen: int) -> None:
        device = "cuda" if self.cuda else "cpu"
        self.comm = self.cclx.new_comm("cclx", device, name=f"soak{gen}", store=store,
                                       timeout=max(60.0, 4 * self.a.timeout),
                                       abort_process_on_timeout_or_error=False)
        self.comm.set_timeout(self.a.timeout)
        self._win = None


def plan(rng, ctx, late: bool) -> dict:
    """Item: {"type": single|batch|graph, "specs": [...], "replays": R}."""
    kinds = list(O.WEIGHTS)
    w = np.array([O.WEIGHTS[k] for k in kinds], float)
    u = rng.random()
    if late:
        return {"type": "single", "specs": [O.draw(O.pick(rng, O.COLL_KINDS), rng, ctx)],
                "async": False}
    if u < 0.04:
        k = int(rng.integers(2, 17))
        return {"type": "batch", "specs": [O.draw(O.pick(rng, O.COLL_KINDS), rng, ctx)
                                           for _ in range(k)]}
    if ctx.cuda and u < 0.05:
        k = int(rng.integers(1, 4))
        return {"type": "graph", "replays": int(rng.integers(2, 4)),
                "specs": [O.draw(O.pick(rng, O.GRAPH_KINDS), rng, ctx) for _ in range(k)]}
    kind = kinds[int(rng.choice(len(kinds), p=w / w.sum()))]
    return {"type": "single", "specs": [O.draw(kind, rng, ctx)],
            "async": bool(rng.random() < 0.1)}


def ncalls(item) -> int:
    n = len(item["specs"])
    return n * (1 + item["replays"]) if item["type"] == "graph" else n


class Stats:
    def __init__(self, size: int) -> None:
        self.size = size
        self.d = dict(calls=0, sched_calls=0, wrong=0, errors=0, error_msgs=[], late_events=0,
                      late_errors=0, late_named=0, late_next=0, late_unseen=0, gens=1, big=0,
                      late_msgs=[], odd=0, bytes=0, kinds={}, time=0.0)

    def kind(self, s, wrong: int, dt: float) -> None:
        h = s.get("hints") or {}
        name = s["kind"] + ("/" + ",".join(f"{v}" for v in h.values()) if h else "")
        e = self.d["kinds"].setdefault(name, [0, 0, 0.0])
        e[0] += 1
        e[1] += wrong
        e[2] += dt
        self.d["calls"] += 1
        self.d["wrong"] += wrong
        n = s.get("count", s.get("tokens", 1) * s.get("hidden", 1))
        nb = n * R.np_dtype(s["dtype"]).itemsize  # the largest buffer of the call
        if s["kind"] in O.BLOCKED:
            nb *= self.size
        self.d["bytes"] += nb
        self.d["big"] += nb >= (1 << 20)
        self.d["odd"] += n % 2


def run_item(ctx, item, st: Stats, late_rank, late_sleep: float) -> None:
    """Runs and checks one item; raises the call's error (after checking its outputs as those of
    a failed call) when one fails."""
    specs = item["specs"]
    t0 = time.time()
    if item["type"] == "graph":
        return run_graph(ctx, item, st)
    if late_rank is not None and ctx.rank == late_rank:
        time.sleep(late_sleep)
    issued = []
    err = None
    try:
        for s in specs:
            a = item["type"] == "batch" or item.get("async", False)
            issued.append(O.issue(ctx, s, a))
        for w, _ in issued:
            if w is not None:
                w.wait()
        ctx.sync()
        for w, _ in issued:  # CUDA: a kernel's failure shows in its Work (or the next call)
            if w is not None and ctx.cuda:
                w.is_completed()
    except Exception as e:  # noqa: BLE001 - checked below, then raised
        err = e
        try:
            ctx.sync()
        except Exception:  # noqa: BLE001
            pass
    dt = (time.time() - t0) / max(1, len(specs))
    for s, (_, check) in zip(specs, issued):
        st.kind(s, check(err is not None), dt)
    if err is not None:
        raise err


def run_graph(ctx, item, st: Stats) -> None:
    """Eager once (the staging a call needs is set up outside capture), then the captured calls
    replayed with their inputs restored and outputs poisoned before each replay."""
    torch = ctx.torch
    calls = []
    t0 = time.time()
    for s in item["specs"]:
        w, check = O.issue(ctx, s, False)
        calls.append((s, check, ctx.again, ctx.bufs))
    ctx.sync()
    for s, check, _, _ in calls:
        st.kind(s, check(False), 0.0)
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        with torch.cuda.graph(g, stream=side):
            for _, _, again, _ in calls:
                again(False)
    for _ in range(item["replays"]):
        for _, _, _, bufs in calls:
            ctx.refill(bufs)
        g.replay()
        ctx.sync()
        for s, check, _, _ in calls:
            st.kind(dict(s, kind=s["kind"] + "@graph"), check(False), 0.0)
    st.d["kinds"].setdefault("graph_items", [0, 0, 0.0])
    e = st.d["kinds"]["graph_items"]
    e[0] += 1
    e[2] += time.time() - t0


def _names(msg: str, rank: int) -> bool:
    return re.search(rf"rank(\(s\))?s? \[?([0-9, ]*\b{rank}\b)", msg) is not None


def worker(a, rank: int, out: str) -> int:
    size = a.ranks
    ctx = Ctx(a, rank, size)
    cclx = ctx.cclx
    store = cclx.TcpStore("127.0.0.1", int(os.environ["MASTER_PORT"]), rank == 0,
                          os.environ.get("CCLX_JOB_ID", "cclx"), 300.0)
    st = Stats(size)
    d = st.d
    gen = 0
    ctx.new_comm(store, gen)
    K = a.late_every
    next_late = K // 2 if K else None
    late_sleep = 1.5 * a.timeout + 0.5
    i = 0
    resume = a.start_item  # the items before it are drawn (the schedule is kept) but not run
    d["start_item"] = a.start_item
    silent = False  # the late call succeeded on this rank; its comm not yet seen failing
    t0 = last = time.time()
    dest = os.path.join(out, f"rank{rank}.json")
    stop_at = a.stop_item  # or, with --max-seconds, the item rank 0 posts once its time is up
    while d["sched_calls"] < a.calls and i != stop_at:
        if a.max_seconds and i % 128 == 0:
            stop_at = _stop_item(store, rank, i, time.time() - t0 > a.max_seconds, stop_at)
            if stop_at is not None and i >= stop_at:
                break
        late = bool(next_late is not None and d["sched_calls"] >= next_late
                    and d["sched_calls"] + 200 < a.calls)
        rng = np.random.default_rng([a.seed, 1, i])
        item = plan(rng, ctx, late)
        late_rank = int(rng.integers(size)) if late else None
        for j, s in enumerate(item["specs"]):
            s["cid"] = (i << 6) | j
        if late:
            next_late += K
        d["sched_calls"] += ncalls(item)
        if i < resume:
            i += 1
            continue
        if late:
            d["late_events"] += 1
            d["late_unseen"] += silent
            silent = False
        try:
            run_item(ctx, item, st, late_rank, late_sleep)
            if late:  # no error on the late call here: the output was exact; the next
                silent = True  # call on the abandoned comm must fail
        except Exception as e:  # noqa: BLE001 - every failure is counted and recovered from
            msg = f"item {i} {item['specs'][0]['kind']}: {type(e).__name__}: {e}"
            if not isinstance(e, cclx.CclxError):
                msg += " " + traceback.format_exc()[-600:]
            if late:
                d["late_errors"] += 1
                d["late_named"] += _names(str(e), late_rank)
                if len(d["late_msgs"]) < 3:
                    d["late_msgs"].append(f"rank {rank}, late rank {late_rank}: {msg[:300]}")
            elif silent:
                d["late_next"] += 1
            else:
                d["errors"] += 1
                if len(d["error_msgs"]) < 10:
                    d["error_msgs"].append(f"rank {rank}: " + msg[:400])
            resume = recover(ctx, store, gen, i, rank, size)
            silent = False
            gen += 1
            d["gens"] += 1
        i += 1
        now = time.time()
        if now - last > a.progress:
            last = now
            d["time"] = now - t0
            if rank == 0:
                print(f"soak rank 0: {d['calls']} calls, {d['calls'] / (now - t0):.0f}/s, wrong "
                      f"{d['wrong']}, errors {d['errors']}, late {d['late_events']}", flush=True)
            _save(dest, d)
    d["time"] = time.time() - t0
    d["late_unseen"] += silent
    d["stopped_early"] = stop_at is not None and i >= stop_at
    d["next_item"] = i  # where a following segment starts (--start-item)
    try:
        ctx.comm.barrier()
        ctx.comm.finalize()
    except Exception as e:  # noqa: BLE001
        d["errors"] += 1
        d["error_msgs"].append(f"rank {rank}: finalize: {type(e).__name__}: {e}"[:400])
    _save(dest, d)
    store.set(f"soak/done/{rank}", "1")
    if rank == 0:  # keep the store up until every rank is done with it
        store.wait([f"soak/done/{r}" for r in range(size)], 600.0)
    return 0


def recover(ctx, store, gen: int, i: int, rank: int, size: int) -> int:
    """Abandons the failed comm, agrees through the store where to resume, makes a new comm."""
    try:
        ctx.comm.abort()
    except Exception:  # noqa: BLE001
        pass
    ctx._win = None
    store.set(f"soak/fail{gen}/{rank}", str(i))
    keys = [f"soak/fail{gen}/{r}" for r in range(size)]
    store.wait(keys, 600.0)
    resume = max(int(store.get(k)) for k in keys) + 1
    ctx.new_comm(store, gen + 1)
    return resume


def _stop_item(store, rank: int, i: int, late: bool, stop_at):
    """Rank 0 posts i + 512 once its time is up; every rank reads it every 128 items (the ranks
    stay within a few items of each other: most items are collectives)."""
    if stop_at is not None:
        return stop_at
    if rank == 0 and late:
        store.set("soak/stop", str(i + 512))
    if store.check("soak/stop"):
        return int(store.get("soak/stop"))
    return None


def _save(dest: str, d: dict) -> None:
    tmp = dest + ".tmp"
    with open(tmp, "w") as f:
        json.dump(d, f)
    os.replace(tmp, dest)
