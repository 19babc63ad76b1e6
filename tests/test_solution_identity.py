"""A solution records the fingerprint of its instance (`Instance.fingerprint`, SHA-256 of its
canonical content); `evaluate` and `train` refuse a solution of another instance (exit 2) unless
--allow-other-instance, old files without the fingerprint still load with a note, and `train`
refuses an infeasible orchestration unless --allow-infeasible."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from cefl_opt import cli
from cefl_opt.generator import make_instance
from cefl_opt.instance import FIELDS, Instance
from cefl_opt.learning.toy import toy_instance, toy_solution
from cefl_opt.solution import InstanceMismatch, Solution
from cefl_opt.solvers.base import solve
from cefl_opt.system import reference_solution


@pytest.fixture(scope="module")
def pair():
    return make_instance("tiny", seed=0), make_instance("tiny", seed=1)


def _tree(root):
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


# ---------------------------------------------------------------------- the fingerprint
def test_fingerprint_is_a_sha256_of_the_canonical_content(pair):
    a, _ = pair
    fp = a.fingerprint()
    assert len(fp) == 64 and int(fp, 16) >= 0
    d = a.to_dict()               # the canonical text, rebuilt here from its definition
    for k in ("format", "name", "preset", "seed", "dc_names", "notes"):
        d.pop(k)
    d["links"] = a.ue_links()
    for k in FIELDS:
        d[k] = np.asarray(d[k], dtype=float).tolist()
    text = json.dumps(d, sort_keys=True, separators=(",", ":"))
    assert fp == hashlib.sha256(text.encode()).hexdigest()


def test_fingerprint_ignores_labels_and_format_but_sees_every_number(pair, tmp_path):
    a, b = pair
    assert a.fingerprint() != b.fingerprint()               # same size, another seed
    assert a.copy(name="renamed", notes={"x": 1}, dc_names=["p", "q"]).fingerprint() \
        == a.fingerprint()
    a.save(tmp_path / "a.json")
    assert Instance.load(tmp_path / "a.json").fingerprint() == a.fingerprint()
    d = a.to_dict()                                         # the same instance in format 1
    d["format"] = "cefl-instance/1"
    d["xi3_total"], d["xi3"] = d.pop("xi3"), d.pop("xi3_parts")
    assert Instance.from_dict(d).fingerprint() == a.fingerprint()
    full = a.copy(links=[list(range(a.B))] * a.N)           # every link, spelt out
    assert full.fingerprint() == a.fingerprint()
    for name in FIELDS:                                     # one ulp anywhere changes it
        arr = np.array(getattr(a, name), dtype=float)
        flat = arr.reshape(-1)
        i = int(np.flatnonzero(flat)[0]) if np.ndim(arr) else 0
        if np.ndim(arr):
            flat[i] = np.nextafter(flat[i], np.inf)
            changed = a.copy(**{name: arr})
        else:
            changed = a.copy(**{name: float(np.nextafter(float(arr), np.inf))})
        assert changed.fingerprint() != a.fingerprint(), name


def test_solvers_and_files_carry_the_fingerprint(pair, tmp_path):
    a, _ = pair
    res = solve(a, "greedy-rate")
    assert res.solution.instance_sha256 == a.fingerprint()
    res.solution.save(tmp_path / "s.json")
    assert json.loads((tmp_path / "s.json").read_text())["instance_sha256"] == a.fingerprint()
    assert Solution.load(tmp_path / "s.json", a).instance_sha256 == a.fingerprint()


def test_check_instance_api(pair):
    """The one check for every command that pairs a solution with an instance."""
    a, b = pair
    sol = reference_solution(a)
    assert sol.check_instance(a) is None
    with pytest.raises(InstanceMismatch, match="another instance.*--allow-other-instance"):
        sol.check_instance(b)
    assert "going on" in sol.check_instance(b, allow_other=True)
    with pytest.raises(InstanceMismatch, match="--other-flag"):
        sol.check_instance(b, option="--other-flag")
    sol.instance_sha256 = None                          # an old file: a note, never a refusal
    assert "no instance fingerprint" in sol.check_instance(b)


@pytest.mark.parametrize("bad", ["abc", 5, "G" * 64, "A" * 64])
def test_malformed_fingerprint_is_refused(pair, tmp_path, bad):
    d = reference_solution(pair[0]).to_dict()
    d["instance_sha256"] = bad
    (tmp_path / "s.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="'instance_sha256'"):
        Solution.load(tmp_path / "s.json")


# ---------------------------------------------------------------------- evaluate
@pytest.fixture
def files(tmp_path, pair):
    a, b = pair
    a.save(tmp_path / "a.json")
    b.save(tmp_path / "b.json")
    reference_solution(a).save(tmp_path / "sol_a.json")
    d = reference_solution(a).to_dict()
    del d["instance_sha256"]
    (tmp_path / "old_a.json").write_text(json.dumps(d))
    return tmp_path


def test_evaluate_refuses_a_solution_of_another_instance(files, capsys):
    before = _tree(files)
    rc = cli.main(["evaluate", str(files / "b.json"), str(files / "sol_a.json"), "--json",
                   str(files / "e.json")])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert err.startswith("cefl-opt: error: the solution was computed for another instance")
    assert "instance_sha256" in err and "--allow-other-instance" in err
    assert len(err.strip().splitlines()) == 1 and out == ""
    assert _tree(files) == before
    rc = cli.main(["evaluate", str(files / "b.json"), str(files / "sol_a.json"),
                   "--allow-other-instance"])
    out, err = capsys.readouterr()
    assert rc in (0, 1) and "note: the solution was computed for another instance" in err
    assert "objective" in out


def test_evaluate_matching_and_old_solutions(files, capsys):
    assert cli.main(["evaluate", str(files / "a.json"), str(files / "sol_a.json")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "feasible" in out
    assert cli.main(["evaluate", str(files / "a.json"), str(files / "old_a.json")]) == 0
    out, err = capsys.readouterr()
    assert "note: the solution records no instance fingerprint" in err and "feasible" in out
    # an old file cannot be checked: it loads on any instance of the right size, with the note
    assert cli.main(["evaluate", str(files / "b.json"), str(files / "old_a.json")]) in (0, 1)
    assert "no instance fingerprint" in capsys.readouterr().err


# ---------------------------------------------------------------------- train
@pytest.fixture
def toy_files(tmp_path):
    inst = toy_instance(N=3, B=2, S=2, T=2, D=80, seed=0)
    inst.save(tmp_path / "net.json")
    toy_instance(N=3, B=2, S=2, T=2, D=80, seed=1).save(tmp_path / "other.json")
    toy_solution(inst, gamma=2, m=0.3).save(tmp_path / "sol.json")
    bad = toy_solution(inst, gamma=2, m=0.3)
    bad.rounds[0].f[0] = -1.0e9                      # f below f_min
    bad.rounds[1].rho_nb[1, 0] = 1.5                 # more than the UE holds
    bad.save(tmp_path / "bad.json")
    return tmp_path


TRAIN = ["--dataset", "digits", "--train-rounds", "1", "--method", "cefl", "--test-max", "50",
         "--no-progress", "--overwrite"]        # the tests share h.csv and its targets table


def test_train_refuses_an_infeasible_orchestration(toy_files, capsys):
    d = toy_files
    before = _tree(d)
    rc = cli.main(["train", str(d / "net.json"), str(d / "bad.json"), *TRAIN, "--out",
                   str(d / "h.csv")])
    out, err = capsys.readouterr()
    assert rc == 2, err
    assert err.startswith("cefl-opt: error: the solution is infeasible")
    assert "--allow-infeasible" in err and "worst" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert _tree(d) == before
    rc = cli.main(["evaluate", str(d / "net.json"), str(d / "bad.json")])
    assert rc == 1                                  # evaluate agrees: infeasible
    capsys.readouterr()


def test_train_allow_infeasible_proceeds_with_a_warning(toy_files, capsys):
    d = toy_files
    bad = Solution.load(d / "bad.json")
    bad.rounds[0].f[0] = 5.0e8                      # only a data split violated: trainable
    bad.save(d / "bad2.json")
    rc = cli.main(["train", str(d / "net.json"), str(d / "bad2.json"), *TRAIN, "--out",
                   str(d / "h.csv"), "--allow-infeasible"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "warning: the solution is infeasible" in err and (d / "h.csv").is_file()


def test_train_refuses_a_solution_of_another_instance(toy_files, capsys):
    d = toy_files
    before = _tree(d)
    rc = cli.main(["train", str(d / "other.json"), str(d / "sol.json"), *TRAIN, "--out",
                   str(d / "h.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and "another instance" in err and "--allow-other-instance" in err, err
    assert _tree(d) == before


def test_train_feasible_matching_pair_runs(toy_files, capsys):
    d = toy_files
    rc = cli.main(["train", str(d / "net.json"), str(d / "sol.json"), *TRAIN, "--out",
                   str(d / "h.csv")])
    out, err = capsys.readouterr()
    assert rc == 0 and err == "", err
