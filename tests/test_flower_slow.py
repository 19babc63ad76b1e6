"""CE-FL on Flower, slow checks: the deployment engine on localhost (a SuperLink, two
SuperNodes and `flwr run`, all on 127.0.0.1, every process killed afterwards) and a SuperNode
failing mid-round under Ray's simulation engine."""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cefl_opt.cli import main
from cefl_opt.learning import flower
from cefl_opt.learning.toy import toy_instance, toy_solution
from test_flower import all_loopback, descendants, failing_client, listening, pids_below

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Until 127.0.0.1:port accepts connections (the SuperLink or SuperNode is up)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert proc.poll() is None, f"{proc.args[0]} exited with {proc.returncode}"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


def stop(procs: list[subprocess.Popen]) -> None:
    pids = [p for proc in procs for p in pids_below(proc.pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        if all(proc.poll() is not None for proc in procs) and not any(
                Path(f"/proc/{p}").exists() and "Z" not in _state(p) for p in pids):
            return


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2]
    except OSError:
        return "Z"


@pytest.fixture()
def net_files(tmp_path):
    inst = toy_instance(N=2, B=1, S=1, T=1, D=60, seed=0)
    sol = toy_solution(inst, offload=0.3, gamma=2, m=0.3, seed=0)
    inst.save(tmp_path / "net.json")
    sol.save(tmp_path / "sol.json")
    return tmp_path


def test_deployment_engine_on_localhost(net_files):
    """`flower-superlink --insecure` and two `flower-supernode`s on 127.0.0.1, `flwr run
    flower_app` for 3 rounds with the app's run config (only paths, dataset, train-rounds and
    nodes set): the ServerApp writes the same CSV and targets table, byte for byte, as `cefl-opt train
    --engine local` with the same options (3 DPUs on 2 SuperNodes). Same thread count on both
    sides (the run config's threads = 1): a different count may change the last bits."""
    tmp = net_files
    link, n1, n2 = free_ports(3)
    home = tmp / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "cefl-local"\n\n[superlink.cefl-local]\n'
        f'address = "127.0.0.1:{link}"\ninsecure = true\n')
    env = dict(os.environ, FLWR_HOME=str(home), FLWR_TELEMETRY_ENABLED="0",
               PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    logs = {k: open(tmp / f"{k}.log", "w") for k in ("superlink", "node1", "node2")}
    procs = []
    try:
        procs.append(subprocess.Popen(
            [str(BIN / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port",
             str(link), "--disable-runtime-dependency-installation"],
            env=env, cwd=tmp, stdout=logs["superlink"], stderr=subprocess.STDOUT,
            start_new_session=True))
        wait_port(link, procs[0])
        for k, port in (("node1", n1), ("node2", n2)):
            procs.append(subprocess.Popen(
                [str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link}",
                 "--host", "127.0.0.1", "--port", str(port), "--max-wait-time", "120"],
                env=env, cwd=tmp, stdout=logs[k], stderr=subprocess.STDOUT,
                start_new_session=True))
        for port, proc in ((n1, procs[1]), (n2, procs[2])):
            wait_port(port, proc)
        ports = listening([p for proc in procs for p in pids_below(proc.pid)])
        assert len(ports) >= 3 and all_loopback(ports), ports
        cfg = (f'net="{tmp / "net.json"}" sol="{tmp / "sol.json"}" out="{tmp / "deploy.csv"}" '
               f'dataset="digits" train-rounds=3 min-nodes=2 round-timeout=240.0')
        run = subprocess.run([str(BIN / "flwr"), "run", str(REPO / "flower_app"), "cefl-local",
                              "--stream", "--run-config", cfg],
                             env=env, cwd=tmp, capture_output=True, text=True, timeout=400)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-3000:]
        assert (tmp / "deploy.csv").exists(), out[-3000:]
    finally:
        stop(procs)
        for f in logs.values():
            f.close()
    assert all(p.poll() is not None for p in procs)
    assert main(["train", str(tmp / "net.json"), str(tmp / "sol.json"), "--dataset", "digits",
                 "--train-rounds", "3", "--threads", "1", "--no-progress",
                 "--out", str(tmp / "local.csv")]) == 0
    assert (tmp / "deploy.csv").read_bytes() == (tmp / "local.csv").read_bytes()
    assert (tmp / "deploy.targets.csv").read_bytes() == (tmp / "local.targets.csv").read_bytes()


def test_supernode_failing_under_ray_is_exit_4(net_files, monkeypatch, capsys):
    """Ray's simulation engine with the ClientApp of DPU 1 raising in round 1: exit 4, one
    line naming the DPU and the cause, no CSV, no Ray process left."""
    monkeypatch.setattr(flower, "client_app", failing_client(1, 1))
    out = net_files / "h.csv"
    rc = main(["train", str(net_files / "net.json"), str(net_files / "sol.json"), "--dataset",
               "digits", "--train-rounds", "3", "--no-progress", "--engine", "flower", "--out",
               str(out)])
    err = capsys.readouterr().err
    assert rc == 4, err
    assert "round 1: DPU 1 on SuperNode" in err and "disk on fire" in err
    assert "Traceback" not in err
    assert not list(net_files.glob("h*"))
    assert not any("ray" in c for c in descendants()), descendants()
