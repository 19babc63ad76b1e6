"""CE-FL on Flower: the Flower app gives the in-process trainer's numbers.

Fast tests drive the real CEFLStrategy and ClientApp through an in-process Grid (every
message pickled both ways, as Ray does); one test runs Flower's simulation engine (Ray, ~15-40 s
of start-up on 2 busy cores). Deployment engine (SuperLink + SuperNodes) and a SuperNode failing
under Ray: tests/test_flower_slow.py (slow).
"""
import ipaddress
import os
import pickle
import re
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from cefl_opt.cli import main
from cefl_opt.instance import InstanceError
from cefl_opt.learning import flower
from cefl_opt.learning.flower import (CEFLStrategy, DataSpec, EngineError, client_app, serve)
from cefl_opt.learning.toy import toy_instance, toy_round_costs, toy_solution
from cefl_opt.learning.trainer import build_trainer
from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

torch.set_num_threads(1)
DIGITS = DataSpec("digits", None, 0)


@pytest.fixture(scope="module")
def digits():
    return DIGITS.load()


@pytest.fixture()
def net():
    """3 UEs, 2 BSs, 2 DCs; every DPU trains (30 % offloading), gamma 3, m 0.2."""
    inst = toy_instance(N=3, B=2, S=2, T=2, D=80, seed=0)
    return inst, toy_solution(inst, offload=0.3, gamma=3, m=0.2, seed=0)


def descendants(pid: int = os.getpid()) -> list[str]:
    """Command lines of the live (not zombie) descendant processes of ``pid``."""
    out = []
    for p in pids_below(pid)[1:]:
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
            if stat[stat.rindex(")") + 2] != "Z":
                out.append(Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return out


def listening(pids) -> list[str]:
    """Addresses ("ip:port") of the TCP sockets the processes ``pids`` listen on."""
    inodes = set()
    for p in pids:
        try:
            for fd in Path(f"/proc/{p}/fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:           # state LISTEN
                host, port = f[1].split(":")
                raw = bytes.fromhex(host)
                # /proc shows each 32-bit word in host (little-endian) order
                raw = b"".join(raw[k:k + 4][::-1] for k in range(0, len(raw), 4))
                ip = ipaddress.ip_address(raw)
                if ip.version == 6 and ip.ipv4_mapped:
                    ip = ip.ipv4_mapped
                out.append(f"{ip}:{int(port, 16)}")
    return out


def pids_below(pid: int = os.getpid()) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def all_loopback(addresses) -> bool:
    return all(ipaddress.ip_address(a.rsplit(":", 1)[0]).is_loopback for a in addresses)


class InProcessGrid(Grid):
    """A Grid that delivers each message to a ClientApp in this thread (test double of the
    simulation engine: messages and replies go through pickle, a raising ClientApp becomes an
    error reply as in Flower's worker; ``drop(msg)`` True loses a message)."""

    def __init__(self, n_nodes: int, client: ClientApp = client_app, drop=None):
        # Message() reads the task's identity, which Flower's runtimes set (as its legacy
        # run_simulation does)
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
        self.nodes = [1000 + 7 * k for k in range(n_nodes)]
        self.client = client
        self.drop = drop or (lambda msg: False)
        self.sent = []

    def set_run(self, run):
        pass

    @property
    def run(self):
        return None

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id, message_type, group_id=group_id)

    def get_node_ids(self):
        return list(reversed(self.nodes))     # order must not matter

    def push_messages(self, messages):
        raise NotImplementedError

    def pull_messages(self, message_ids):
        raise NotImplementedError

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid.uuid4())
            self.sent.append(msg)
            if self.drop(msg):
                continue
            remote = pickle.loads(pickle.dumps(msg))
            ctx = Context(run_id=1, node_id=msg.metadata.dst_node_id, node_config={},
                          state=RecordDict(), run_config={})
            try:
                rep = self.client(remote, ctx)
            except Exception as e:          # Flower's worker: an error reply
                rep = Message(Error(code=0, reason=f"{type(e).__name__}: {e}"), reply_to=remote)
            replies.append(pickle.loads(pickle.dumps(rep)))
        return replies


def local_models(inst, sol, data, rounds, **kw):
    tr = build_trainer(inst, sol, data, cost_fn=toy_round_costs, **kw)
    xs = []
    for _ in range(rounds):
        tr.step()
        xs.append(tr.x.clone())
    return tr, xs


def flower_models(inst, sol, data, rounds, grid, **kw):
    tr = build_trainer(inst, sol, data, cost_fn=toy_round_costs, **kw)
    xs = []
    strat = CEFLStrategy(tr, DIGITS, on_round=lambda row, x: xs.append(x.clone()))
    serve(grid, strat, rounds, min_nodes=1, round_timeout=60, node_wait=1)
    return tr, xs


@pytest.mark.parametrize("method,average,nodes", [("cefl", True, 5), ("cefl", True, 2),
                                                  ("fednova", False, 5), ("fedavg", False, 3)])
def test_flower_app_gives_the_local_trainers_models(net, digits, method, average, nodes):
    """Same seed and orchestration: the global model after every round equals the in-process
    trainer's (1e-6), and so does the history (accuracy, delay, energy ...). With fewer
    SuperNodes than DPUs (2 < 5) DPUs share nodes (i mod K) and nothing changes. FedNova and
    FedAvg with each UE's own gamma (average=False) make the two baselines differ, and the
    methods' final models must differ from each other (a check that can fail)."""
    inst, sol = net
    kw = dict(method=method, average=average, seed=3, lr=0.1)
    sol.rounds[0].gamma_ue = np.array([2.0, 3.0, 5.0])
    tr_l, xs_l = local_models(inst, sol, digits, 3, **kw)
    grid = InProcessGrid(nodes)
    tr_f, xs_f = flower_models(inst, sol, digits, 3, grid, **kw)
    assert len(xs_f) == 3
    for r, (a, b) in enumerate(zip(xs_l, xs_f)):
        assert torch.allclose(a, b, rtol=0, atol=1e-6), (r, float((a - b).abs().max()))
    assert not torch.allclose(xs_f[0], xs_f[1])          # the model moves
    assert tr_l.history().equals(tr_f.history())
    # one message per training DPU per round, each with that DPU's samples after offloading
    n_fit = tr_f.history()["dpus_trained"].sum()
    assert len(grid.sent) == n_fit
    first = grid.sent[0].content
    assert int(first["config"]["dpu"]) == 0 and int(first["config"]["gamma"]) == 2
    assert first["config"]["reply"] == ("params" if method == "fedavg" else "d")
    dst = {int(m.content["config"]["dpu"]): m.metadata.dst_node_id for m in grid.sent}
    assert dst == {d: sorted(grid.nodes)[d % nodes] for d in dst}   # DPU i on node i mod K


def test_methods_differ_through_flower(net, digits):
    """FedAvg and FedNova with unequal gamma give different models (else the method switch
    would not reach the aggregation)."""
    inst, sol = net
    sol.rounds[0].gamma_ue = np.array([2.0, 3.0, 5.0])
    out = {}
    for m in ("fednova", "fedavg"):
        _, xs = flower_models(inst, sol, digits, 1, InProcessGrid(5), method=m, average=False,
                              seed=3, lr=0.1)
        out[m] = xs[0]
    assert float((out["fednova"] - out["fedavg"]).abs().max()) > 1e-4


def failing_client(dpu: int, round_: int) -> ClientApp:
    app = ClientApp()

    @app.train()
    def _train(msg, ctx):
        cfg = msg.content["config"]
        if int(cfg["dpu"]) == dpu and int(cfg["round"]) == round_:
            raise RuntimeError("disk on fire")
        return Message(flower.local_train(msg.content), reply_to=msg)

    return app


def test_supernode_failing_mid_round_is_an_engine_error(net, digits):
    inst, sol = net
    with pytest.raises(EngineError, match=r"round 1: DPU 3 on SuperNode \d+ failed: .*disk on fire"):
        flower_models(inst, sol, digits, 3, InProcessGrid(5, failing_client(3, 1)))


def test_missing_and_inconsistent_replies_are_engine_errors(net, digits):
    inst, sol = net
    lost = lambda msg: int(msg.content["config"]["dpu"]) == 4   # noqa: E731
    with pytest.raises(EngineError, match=r"round 0: DPU 4 on SuperNode \d+ did not reply"):
        flower_models(inst, sol, digits, 2, InProcessGrid(5, drop=lost))

    liar = ClientApp()

    @liar.train()
    def _train(msg, ctx):
        rep = flower.local_train(msg.content)
        rep["metrics"]["gamma"] = int(rep["metrics"]["gamma"]) + 1
        return Message(rep, reply_to=msg)

    with pytest.raises(EngineError, match=r"DPU 0 reports D=\d+, gamma=4; it was sent D=\d+, "
                                          r"gamma=3"):
        flower_models(inst, sol, digits, 1, InProcessGrid(5, liar))


def test_no_supernode_is_an_engine_error(net, digits):
    inst, sol = net
    tr = build_trainer(inst, sol, digits, cost_fn=toy_round_costs)
    with pytest.raises(EngineError, match="0 SuperNode.*connected after 0.2 s, 3 needed"):
        serve(InProcessGrid(0), CEFLStrategy(tr, DIGITS), 1, min_nodes=3, node_wait=0.2)


def test_custom_module_or_loss_is_refused(net, digits):
    inst, sol = net
    from cefl_opt.learning.models import make_model
    from cefl_opt.learning.strategies import make_strategy
    from cefl_opt.learning.trainer import Trainer
    tr = Trainer(inst, make_strategy("cefl", inst, sol), digits,
                 model=make_model("mlp", (1, 8, 8), 10, seed=0))
    with pytest.raises(InstanceError, match="named model"):
        CEFLStrategy(tr, DIGITS)


def test_run_config_is_parsed_like_the_cli(capsys):
    opts = flower.train_options_from_run_config(
        {"net": "n.json", "sol": "s.json", "out": "h.csv", "dataset": "digits",
         "train-rounds": 4, "mu": "", "lr": "0.5", "min-nodes": 2, "round-timeout": 5.0})
    assert (opts.net, opts.train_rounds, opts.mu, opts.lr, opts.dataset) == (
        "n.json", 4, None, 0.5, "digits")
    assert capsys.readouterr().err == ""
    base = {"net": "a", "sol": "b", "out": "c", "dataset": "digits"}
    for bad, needle in (({"dataset": "nope"}, "option '--dataset' value 'nope' is not one of"),
                        ({"train-rounds": 0}, "option '--train-rounds' must be an integer >= 1, "
                                              "got '0'"),
                        ({"lr": "nan"}, "option '--lr' must be a finite number > 0, got 'nan'"),
                        ({"trian-rounds": 3}, "key 'trian-rounds' is not an option"),
                        ({"out": ""}, "needs 'out'")):
        with pytest.raises(InstanceError, match=re.escape(needle)):
            flower.train_options_from_run_config({**base, **bad})


def test_run_config_old_rounds_key_works_with_a_deprecation_warning(capsys):
    opts = flower.train_options_from_run_config({"net": "a", "sol": "b", "out": "c",
                                                 "dataset": "digits", "rounds": 5})
    assert opts.train_rounds == 5
    assert capsys.readouterr().err.strip() == ("cefl-opt: warning: run config key 'rounds' is "
                                               "deprecated; use 'train-rounds'")


def test_flower_app_run_config_defaults_are_the_clis():
    """flower_app/pyproject.toml's run config, read as `flwr run` reads it, gives `cefl-opt
    train`'s defaults for every option but the three it sets on purpose (dataset,
    train-rounds, threads); a value there would silently override the instance (vartheta =
    "tau_eff" made the deployment aggregate with tau_eff where `cefl-opt train` uses the
    instance's vartheta). Both come from the one TrainOptions."""
    import dataclasses

    from cefl_opt.cli import build_parser
    from cefl_opt.learning.options import TrainOptions
    from flwr.common.config import get_fused_config_from_dir
    paths = {"net": "/n.json", "sol": "/s.json", "out": "/h.csv"}
    cfg = get_fused_config_from_dir(Path(__file__).resolve().parents[1] / "flower_app", paths)
    app = dataclasses.asdict(flower.train_options_from_run_config(cfg))
    args = build_parser(["train"]).parse_args(["train", "/n.json", "/s.json", "--out", "/h.csv",
                                               "--dataset", "digits"])
    cli = dataclasses.asdict(TrainOptions.from_namespace(args))
    on_purpose = {"train_rounds": (3, 20), "threads": (1, None)}
    assert app["dataset"] == "digits" and app["vartheta"] is None
    assert {k: (app[k], cli[k]) for k in cli if app[k] != cli[k]} == on_purpose
    keys = {k.replace("-", "_") for k in cfg}
    assert keys - set(app) == {"min_nodes", "round_timeout"}   # the rest are options
    assert set(app) - keys == {"allow_infeasible", "allow_other_instance", "overwrite"}


# ---------------------------------------------------------------- CLI
@pytest.fixture()
def files(tmp_path, net):
    inst, sol = net
    inst.save(tmp_path / "net.json")
    sol.save(tmp_path / "sol.json")
    return tmp_path


def _train(files, *extra):
    return main(["train", str(files / "net.json"), str(files / "sol.json"), "--dataset",
                 "digits", "--train-rounds", "2", "--no-progress", "--out", str(files / "h.csv"),
                 "--overwrite", *extra])             # the runs share h.csv and its targets table


def test_cli_flower_not_installed_is_exit_2(files, monkeypatch, capsys):
    """flwr cannot be imported: exit 2, one line naming the package, nothing written."""
    for name in [m for m in sys.modules if m == "flwr" or m.startswith("flwr.")]:
        monkeypatch.setitem(sys.modules, name, None)   # "import flwr..." raises ImportError
    monkeypatch.delitem(sys.modules, "cefl_opt.learning.flower")
    assert _train(files, "--engine", "flower") == 2
    err = capsys.readouterr().err
    assert "'flwr' is not installed" in err and "Traceback" not in err
    assert not list(files.glob("h*.csv"))


def test_cli_ray_not_installed_is_exit_2(files, monkeypatch, capsys):
    real = flower.importlib.util.find_spec
    monkeypatch.setattr(flower.importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    assert _train(files, "--engine", "flower") == 2
    assert "needs Ray, which is not installed" in capsys.readouterr().err
    assert not list(files.glob("h*.csv"))


def test_cli_supernode_failure_is_exit_4_and_writes_nothing(files, monkeypatch, capsys):
    """The engine is replaced by the in-process grid with DPU 2 failing in round 1 (the real
    strategy raises EngineError): exit 4, a one-line message, no CSV; exit 2 for bad input."""
    def fake_simulation(inst, sol, data, *, rounds, cpus, threads, progress, targets, **kw):
        flower_models(inst, sol, data.load(), rounds, InProcessGrid(5, failing_client(2, 1)),
                      **kw)
        raise AssertionError("unreachable")

    monkeypatch.setattr(flower, "run_simulation", fake_simulation)
    assert _train(files, "--engine", "flower") == 4
    err = capsys.readouterr().err
    assert err.startswith("cefl-opt: error: Flower engine: round 1: DPU 2 on SuperNode")
    assert "disk on fire" in err and "Traceback" not in err
    assert not list(files.glob("h*"))
    assert _train(files, "--engine", "flower", "--flower-cpus", "0") == 2
    assert "--flower-cpus: must be an integer >= 1, got '0'" in capsys.readouterr().err


@pytest.mark.slow
def test_simulation_engine_equals_local_engine(files, net, digits, monkeypatch, capsys):
    """`cefl-opt train --engine flower` in Flower's simulation engine (Ray, one SuperNode per
    DPU, 2 CPUs): after each of 3 rounds the global model equals the in-process trainer's
    (1e-6), the CSV and targets table equal --engine local's byte for byte, and no Ray process
    is left behind."""
    inst, sol = net
    _, xs_l = local_models(inst, sol, digits, 3, seed=0)
    xs_f, ports = [], []
    real = flower.run_simulation

    def on_round(row, x):
        xs_f.append(x.clone())
        ports.extend(listening(pids_below()))       # Ray's servers, while they run

    def spy(*a, **kw):
        return real(*a, on_round=on_round, **kw)

    monkeypatch.setattr(flower, "run_simulation", spy)
    assert _train(files, "--engine", "flower", "--train-rounds", "3") == 0
    assert len(xs_f) == 3
    for a, b in zip(xs_l, xs_f):
        assert torch.allclose(a, b, rtol=0, atol=1e-6), float((a - b).abs().max())
    flw = {p.name: p.read_bytes() for p in files.glob("h*.csv")}
    assert _train(files, "--engine", "local", "--train-rounds", "3") == 0
    loc = {p.name: p.read_bytes() for p in files.glob("h*.csv")}
    assert set(flw) == {"h.csv", "h.targets.csv"} and flw == loc
    assert b"cefl,0," in loc["h.csv"]
    assert len(ports) >= 3 and all_loopback(ports), ports     # gcs, raylet, workers
    assert not any("ray" in c for c in descendants()), descendants()
