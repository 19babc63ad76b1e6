"""CE-FL on Flower 1.42: a solution's orchestration runs as a Flower app.

- :class:`CEFLStrategy` (a ``flwr.serverapp.strategy.Strategy``) drives one server-side
  :class:`~cefl_opt.learning.trainer.Trainer`. ``configure_train`` takes the trainer's plan of
  round r (dynamic partition, the round's offloading UE -> BS -> DC, ``gamma`` and mini-batch
  size per DPU) and sends every DPU's instructions to its SuperNode; ``aggregate_train`` hands
  the replies to the trainer's strategy (``eq:11M`` for CE-FL and FedNova, the weighted average
  for FedAvg), evaluates the new global model and records the round's delay and energy
  (``cefl_opt.system.round_costs``). Planning, aggregation, evaluation and costing are the
  trainer's own methods, so ``--engine flower`` and ``--engine local`` write the same history.
- :data:`client_app` (a ``flwr.clientapp.ClientApp``) runs the trainer's ``local_fedprox`` on the
  samples it is told it holds and replies with ``d_i`` (or ``x_i`` for FedAvg) and the counts
  the aggregation needs.
- :func:`run_simulation`: the app in Flower's simulation engine (Ray), one SuperNode per DPU.
- :data:`server_app`: the same ServerApp for Flower's deployment engine (``flwr run``; see the
  app folder ``flower_app/`` and the README), configured by the run config.

DPU -> SuperNode: DPU i (UEs 0..N-1, then DCs N..N+S-1) trains on the SuperNode at position
``i mod K`` of the K connected node ids in increasing order (in the simulation K = N + S: one
SuperNode per DPU, the same one every round).

Messages. Instruction (ServerApp -> SuperNode), a ``RecordDict`` with
``"arrays"``: ``{"x": x_t}`` (flat float32 global model), ``"samples"``: ``{"indices": ...}``
(int64 training-set indices the DPU holds after the round's offloading) and ``"config"``
(round, dpu, gamma, batch-size, lr, mu, seed, model, n-classes, dataset, data-dir, data-seed,
reply, threads). Reply: ``"arrays"``: ``{"d": d_i}`` (eq:normalGrad) or ``{"params": x_i}``, and
``"metrics"``: dpu, num-examples (D_i), gamma, eta, a-l1, train-loss, fit-s (seconds of the
local steps). The SuperNodes load the
training set themselves with the same loader and seed, so only indices travel (the paper's
offloading moves samples; in this simulation of it the samples are already everywhere).

Errors: a SuperNode whose ClientApp fails, that does not reply within the round timeout, or
whose reply does not match its instructions raises :class:`EngineError` (``cefl-opt train``
exits 4 and writes nothing). Flower or Ray missing raises :class:`FlowerUnavailable`
(an ``InstanceError``: exit 2).
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import math
import os
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import (Array, ArrayRecord, ConfigRecord, Context, Message, MessageType,
                      MetricRecord, RecordDict)
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy

from ..instance import InstanceError
from .strategies import FitIns, FitRes
from .trainer import (DEFAULT_LR, TrainResult, Trainer, batch_rng, build_trainer,
                      local_fedprox, targets_table)

DEFAULT_ROUND_TIMEOUT = 600.0   # s a round waits for its replies
DEFAULT_NODE_WAIT = 120.0       # s the ServerApp waits for the SuperNodes to connect
OBJECT_STORE_BYTES = 512 * 2**20  # Ray's shared-memory object store (it spills beyond)
# What each aggregation reads from a reply (strategies.normalized_aggregate reads d_i,
# average_aggregate x_i); a strategy not listed here gets both.
REPLY_KIND = {"cefl": "d", "fednova": "d", "fedavg": "params"}
# Environment of the simulation engine (set unless already set, before Ray is imported): no
# telemetry or usage statistics leave the machine, and Ray runs as a one-machine cluster whose
# node address is 127.0.0.1, so every Ray server listens on loopback only (Ray's switch for
# this is named after Windows/macOS, where it is the default; without it Ray binds its gRPC
# servers to all interfaces).
RAY_ENV = {"FLWR_TELEMETRY_ENABLED": "0", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0"}


class FlowerUnavailable(InstanceError):
    """Flower or its simulation extra (Ray) cannot be imported."""


class EngineError(RuntimeError):
    """A SuperNode failed, timed out or replied inconsistently: the run cannot go on."""


@dataclass(frozen=True)
class DataSpec:
    """Which training set the SuperNodes load: ``learning.data.load_dataset(name, data_dir,
    seed=seed)`` (the seed fixes the train/test split of mnist5k and digits)."""
    name: str
    data_dir: str | None = None
    seed: int = 0

    def load(self):
        from .data import load_dataset
        return load_dataset(self.name, self.data_dir, seed=self.seed)


# ---------------------------------------------------------------- ClientApp (SuperNode side)
@functools.lru_cache(maxsize=2)
def _training_set(name: str, data_dir: str | None, seed: int):
    """The training set as torch tensors, loaded once per SuperNode process."""
    X, y, _, _ = DataSpec(name, data_dir, seed).load()
    return torch.as_tensor(X), torch.as_tensor(y)


@functools.lru_cache(maxsize=4)
def _model(kind: str, shape: tuple, n_classes: int, seed: int):
    from .models import make_model
    return make_model(kind, shape, n_classes, seed=seed)


def local_train(content: RecordDict) -> RecordDict:
    """One DPU's round: ``gamma`` FedProx steps (``trainer.local_fedprox``, the function the
    in-process trainer calls) from the received ``x_t`` on the received sample indices."""
    cfg = content["config"]
    threads = int(cfg["threads"])
    if threads > 0 and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    X, y = _training_set(str(cfg["dataset"]), str(cfg["data-dir"]) or None, int(cfg["data-seed"]))
    model = _model(str(cfg["model"]), tuple(X.shape[1:]), int(cfg["n-classes"]), int(cfg["seed"]))
    x_t = torch.from_numpy(content["arrays"]["x"].numpy().copy())
    n_params = sum(p.numel() for p in model.parameters())
    if x_t.numel() != n_params:
        raise ValueError(f"global model has {x_t.numel()} parameters, the {cfg['model']} model "
                         f"on {cfg['dataset']} has {n_params}")
    idx = content["samples"]["indices"].numpy().astype(np.int64, copy=False)
    dpu, r = int(cfg["dpu"]), int(cfg["round"])
    ins = FitIns(dpu, idx, int(cfg["gamma"]), int(cfg["batch-size"]))
    t0 = time.perf_counter()
    res = local_fedprox(model, x_t, X, y, ins, lr=float(cfg["lr"]), mu=float(cfg["mu"]),
                        rng=batch_rng(int(cfg["seed"]), r, dpu))
    fit_s = time.perf_counter() - t0
    kind = str(cfg["reply"])
    arrays = {}
    if kind in ("d", "both"):
        arrays["d"] = Array(res.d.numpy())
    if kind in ("params", "both"):
        arrays["params"] = Array(res.params.numpy())
    metrics = MetricRecord({"dpu": dpu, "num-examples": res.num_samples, "gamma": res.gamma,
                            "eta": res.eta, "a-l1": res.a_l1, "train-loss": res.train_loss,
                            "fit-s": fit_s})
    return RecordDict({"arrays": ArrayRecord(arrays), "metrics": metrics})


client_app = ClientApp()


@client_app.train()
def _client_train(msg: Message, context: Context) -> Message:
    return Message(local_train(msg.content), reply_to=msg)


# ---------------------------------------------------------------- Strategy (ServerApp side)
def _x_record(x: torch.Tensor) -> ArrayRecord:
    return ArrayRecord({"x": Array(x.detach().numpy().copy())})


class CEFLStrategy(Strategy):
    """Flower strategy of CE-FL, FedNova and FedAvg: ``trainer.strategy`` decides, the
    SuperNodes train, ``trainer.finish_round`` aggregates, evaluates and costs the round."""

    def __init__(self, trainer: Trainer, data: DataSpec, *, threads: int = 1, on_round=None):
        if not isinstance(trainer.model_kind, str):
            raise InstanceError("the Flower engine needs a named model ('mlp' or 'cnn'), not a "
                                "torch module: the SuperNodes build the model themselves")
        if trainer.loss_fn is not torch.nn.functional.cross_entropy:
            raise InstanceError("the Flower engine trains with cross-entropy only (the "
                                "SuperNodes' ClientApp has no custom loss)")
        self.trainer = trainer
        self.data = data
        self.threads = int(threads)
        self.on_round = on_round     # on_round(row, x_{t+1}) after every round
        self.reply = REPLY_KIND.get(trainer.strategy.name, "both")
        self._open = None   # (r, plan, t0, {dpu: node}, [messages]) of the open round
        # per round: seconds the ClientApps spent in local_fedprox, summed over the DPUs (the
        # rest of the round's train_s is planning, aggregation and Flower's messaging)
        self.fit_seconds: list[float] = []

    def summary(self) -> None:
        pass

    def _config(self, r: int, ins: FitIns) -> ConfigRecord:
        tr = self.trainer
        return ConfigRecord({
            "round": r, "dpu": int(ins.dpu), "gamma": int(ins.gamma),
            "batch-size": int(ins.batch_size), "lr": tr.lr, "mu": tr.mu, "seed": tr.seed,
            "model": tr.model_kind, "n-classes": max(tr.n_classes, 2),
            "dataset": self.data.name, "data-dir": self.data.data_dir or "",
            "data-seed": int(self.data.seed), "reply": self.reply, "threads": self.threads})

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        r, plan, t0 = self.trainer.plan_round()
        if r != server_round - 1:
            raise EngineError(f"Flower round {server_round} but the trainer is at round {r}")
        nodes = sorted(grid.get_node_ids())
        if not nodes:
            raise EngineError(f"round {r}: no SuperNode is connected")
        x = _x_record(self.trainer.x)
        msgs, node_of = [], {}
        for ins in plan.fit:
            node_of[ins.dpu] = nodes[ins.dpu % len(nodes)]
            samples = ArrayRecord({"indices": Array(np.asarray(ins.indices, dtype=np.int64))})
            content = RecordDict({"arrays": x, "samples": samples,
                                  "config": self._config(r, ins)})
            msgs.append(Message(content, dst_node_id=node_of[ins.dpu],
                                message_type=MessageType.TRAIN, group_id=str(server_round)))
        self._open = (r, plan, t0, node_of, msgs)
        return msgs

    def aggregate_train(self, server_round: int, replies: Iterable[Message]):
        r, plan, t0, node_of, msgs = self._open
        results = self._results(r, plan, node_of, msgs, list(replies))
        row = self.trainer.finish_round(r, plan, results, t0)
        self.trainer.timings[-1]["fit_s"] = self.fit_seconds[-1]
        self._open = None
        if self.on_round is not None:
            self.on_round(row, self.trainer.x)
        metrics = MetricRecord({k: float(v) for k, v in row.items()
                                if isinstance(v, (int, float, np.integer, np.floating))
                                and math.isfinite(float(v))})
        return _x_record(self.trainer.x), metrics

    def _results(self, r, plan, node_of, msgs, replies) -> list[FitRes]:
        """The replies as FitRes in ``plan.fit`` order (the order the local engine sums in);
        EngineError naming every DPU that failed, did not reply or replied inconsistently."""
        dpu_of_msg = {m.metadata.message_id: ins.dpu for m, ins in zip(msgs, plan.fit)
                      if m.metadata.message_id}
        want = {ins.dpu: ins for ins in plan.fit}
        got: dict[int, FitRes] = {}
        failed: set[int] = set()
        problems = []
        for rep in replies:
            node = rep.metadata.src_node_id
            dpu = dpu_of_msg.get(rep.metadata.reply_to_message_id)
            if rep.has_error():
                failed.add(dpu)
                problems.append(f"{'a DPU' if dpu is None else f'DPU {dpu}'} on SuperNode "
                                f"{node} failed: {rep.error.reason}")
                continue
            try:
                res = self._fit_res(rep.content)
            except (KeyError, TypeError, ValueError) as e:
                failed.add(dpu)
                problems.append(f"SuperNode {node} sent a malformed reply ({e})")
                continue
            ins = want.get(res.dpu)
            if ins is None or res.dpu in got or dpu not in (None, res.dpu):
                problems.append(f"SuperNode {node} replied for DPU {res.dpu}, which it was not "
                                f"asked to train")
            elif res.num_samples != len(ins.indices) or res.gamma != ins.gamma:
                failed.add(res.dpu)
                problems.append(f"DPU {res.dpu} reports D={res.num_samples}, gamma={res.gamma}; "
                                f"it was sent D={len(ins.indices)}, gamma={ins.gamma}")
            else:
                got[res.dpu] = res
        problems += [f"DPU {d} on SuperNode {node_of[d]} did not reply"
                     for d in want if d not in got and d not in failed]
        if problems:
            raise EngineError(f"round {r}: " + "; ".join(problems))
        self.fit_seconds.append(sum(float(rep.content["metrics"].get("fit-s", 0.0))
                                    for rep in replies))
        return [got[ins.dpu] for ins in plan.fit]

    @staticmethod
    def _fit_res(content: RecordDict) -> FitRes:
        m, a = content["metrics"], content["arrays"]
        vec = {k: torch.from_numpy(a[k].numpy().copy()) for k in ("d", "params") if k in a}
        return FitRes(dpu=int(m["dpu"]), num_samples=int(m["num-examples"]),
                      gamma=int(m["gamma"]), eta=float(m["eta"]), a_l1=float(m["a-l1"]),
                      params=vec.get("params"), d=vec.get("d"),
                      train_loss=float(m["train-loss"]))

    def configure_evaluate(self, server_round, arrays, config, grid):
        return []   # the ServerApp evaluates the global model itself (trainer.finish_round)

    def aggregate_evaluate(self, server_round, replies):
        return None


def wait_for_nodes(grid: Grid, n: int, timeout: float = DEFAULT_NODE_WAIT) -> list[int]:
    """Node ids once at least ``n`` SuperNodes are connected; EngineError after ``timeout`` s."""
    end = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= n:
            return nodes
        if time.monotonic() > end:
            raise EngineError(f"{len(nodes)} SuperNode(s) connected after {timeout:g} s, "
                              f"{n} needed")
        time.sleep(0.1)


def serve(grid: Grid, strategy: CEFLStrategy, rounds: int, *, min_nodes: int,
          round_timeout: float = DEFAULT_ROUND_TIMEOUT,
          node_wait: float = DEFAULT_NODE_WAIT) -> None:
    """The ServerApp's main: wait for the SuperNodes, then ``rounds`` rounds."""
    wait_for_nodes(grid, min_nodes, node_wait)
    strategy.start(grid, _x_record(strategy.trainer.x), num_rounds=int(rounds),
                   timeout=float(round_timeout))


def make_server_app(strategy: CEFLStrategy, rounds: int, *, min_nodes: int,
                    round_timeout: float = DEFAULT_ROUND_TIMEOUT) -> ServerApp:
    """A ServerApp that runs ``strategy`` (built in this process: the simulation engine)."""
    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        serve(grid, strategy, rounds, min_nodes=min_nodes, round_timeout=round_timeout)

    return app


# ---------------------------------------------------------------- simulation engine
def require_ray() -> None:
    if importlib.util.find_spec("ray") is None:
        raise FlowerUnavailable("the Flower simulation engine needs Ray, which is not installed "
                                "(pip install 'flwr[simulation]>=1.42,<1.43')")


@contextlib.contextmanager
def _quiet(enabled: bool):
    """Flower's INFO log and Ray's warnings off (``enabled``); restored afterwards."""
    log = logging.getLogger("flwr")
    level = log.level
    with warnings.catch_warnings():
        if enabled:
            log.setLevel(logging.CRITICAL)
            warnings.simplefilter("ignore")
        try:
            yield
        finally:
            log.setLevel(level)


def _shutdown_ray() -> None:
    import ray
    if ray.is_initialized():
        ray.shutdown()


def run_simulation(instance, solution, data: DataSpec, *, rounds: int = 10, method: str = "cefl",
                   model: str = "mlp", lr: float = DEFAULT_LR, mu: float | None = None,
                   seed: int = 0, targets=(0.6, 0.7, 0.8), vartheta=None,
                   aggregator: int = 0, average: bool = True, cost_fn=None,
                   test_max: int | None = None, cpus: int = 2, client_cpus: float = 1.0,
                   threads: int = 1, round_timeout: float = DEFAULT_ROUND_TIMEOUT,
                   progress: bool = False, quiet: bool = True,
                   client: ClientApp | None = None, on_round=None) -> TrainResult:
    """``learning.trainer.run_training`` through Flower's simulation engine: one SuperNode per
    DPU (N + S), Ray limited to ``cpus`` CPUs with ``client_cpus`` per ClientApp (so
    ``cpus / client_cpus`` ClientApps run at a time), ``threads`` torch threads per ClientApp.
    Same arguments and result as ``run_training``; ``client`` replaces :data:`client_app`;
    ``on_round(row, x)`` is called with each round's history row and new global model."""
    require_ray()
    if int(rounds) < 1:
        raise InstanceError(f"rounds must be >= 1, got {rounds}")
    if not (cpus >= 1 and 0 < client_cpus <= cpus):
        raise InstanceError(f"need cpus >= 1 and 0 < client_cpus <= cpus, got cpus={cpus}, "
                            f"client_cpus={client_cpus}")
    trainer = build_trainer(instance, solution, data.load(), method=method, model=model,
                            lr=lr, mu=mu, seed=seed,
                            vartheta=vartheta, aggregator=aggregator, average=average,
                            cost_fn=cost_fn, test_max=test_max)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=int(rounds), desc=f"{trainer.strategy.name} (flower)", unit="round")

    def tick(row, x):
        if bar is not None:
            bar.set_postfix(acc=f"{row['accuracy']:.3f}", agg=row["aggregator"])
            bar.update(1)
        if on_round is not None:
            on_round(row, x)

    strategy = CEFLStrategy(trainer, data, threads=threads, on_round=tick)
    n_nodes = instance.N + instance.S
    app = make_server_app(strategy, rounds, min_nodes=n_nodes, round_timeout=round_timeout)
    backend = {"client_resources": {"num_cpus": float(client_cpus), "num_gpus": 0.0},
               "init_args": {"num_cpus": int(cpus), "num_gpus": 0, "include_dashboard": False,
                             "log_to_driver": not quiet,
                             # a round's messages: N + S copies of x_t plus indices (MBs);
                             # Ray's default reserves 30 % of the machine's memory
                             "object_store_memory": OBJECT_STORE_BYTES}}
    for k, v in RAY_ENV.items():
        os.environ.setdefault(k, v)
    from flwr.simulation import run_simulation as flwr_run_simulation
    try:
        with _quiet(quiet):
            flwr_run_simulation(server_app=app, client_app=client or client_app,
                                num_supernodes=n_nodes, backend_config=backend)
    except (EngineError, InstanceError):
        raise
    except (Exception, SystemExit) as e:   # Ray or Flower crashed (flwr_exit raises SystemExit)
        raise EngineError(f"the Flower simulation failed: {type(e).__name__}: {e}") from e
    finally:
        _shutdown_ray()
        if bar is not None:
            bar.close()
    if len(trainer.rows) != int(rounds):
        raise EngineError(f"the Flower simulation ended after {len(trainer.rows)} of {rounds} "
                          f"rounds")
    hist = trainer.history()
    return TrainResult(hist, targets_table(hist, targets), trainer.x.clone(), trainer)


# ---------------------------------------------------------------- deployment engine
# The run config of `flwr run` (flower_app/pyproject.toml): the fields of
# `learning.options.TrainOptions` as `cefl-opt train`'s flags without their dashes ("" = the
# option's default), plus these two of the deployment.
DEPLOY_KEYS = {"min-nodes": 2, "round-timeout": DEFAULT_ROUND_TIMEOUT}


def train_options_from_run_config(cfg: dict):
    """The :class:`~cefl_opt.learning.options.TrainOptions` of a Flower run config (the
    checks and defaults of ``cefl-opt train``); an ``InstanceError`` naming a bad key or
    value."""
    from ..io import InputError
    from .options import TrainOptions
    try:
        return TrainOptions.from_run_config(cfg, skip=tuple(DEPLOY_KEYS))
    except InputError as e:
        raise InstanceError(f"the Flower run config is not a valid `cefl-opt train` call "
                            f"({e})") from None


server_app = ServerApp()


@server_app.main()
def _deployed_main(grid: Grid, context: Context) -> None:
    """``flwr run``: train as ``cefl-opt train`` would with the run config's options, on the
    connected SuperNodes; write the CSV and targets table to the run config's ``out``."""
    from .options import prepare_train, write_train_outputs
    cfg = dict(context.run_config)
    opts = train_options_from_run_config(cfg)
    inst, sol, kw = prepare_train(opts)
    data = DataSpec(opts.dataset, opts.data_dir, opts.seed)
    rounds, targets = kw.pop("rounds"), kw.pop("targets")
    kw.pop("progress")
    trainer = build_trainer(inst, sol, data.load(), **kw)
    strategy = CEFLStrategy(trainer, data, threads=opts.threads or 1)
    serve(grid, strategy, rounds, min_nodes=int(cfg.get("min-nodes", 2)),
          round_timeout=float(cfg.get("round-timeout", DEFAULT_ROUND_TIMEOUT)))
    hist = trainer.history()
    write_train_outputs(TrainResult(hist, targets_table(hist, targets), trainer.x.clone(),
                                    trainer), opts.out)
