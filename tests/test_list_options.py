"""`cefl-opt solve --list-options` prints every option's actual default (the preset's value
resolved), grouped by phase, wrapped to the terminal; the options reference uses the same
groups and defaults."""
from __future__ import annotations

import dataclasses
import re

import pytest

from cefl_opt import cli
from cefl_opt.solvers.base import options_classes
from cefl_opt.solvers.options import (GROUPS, DecentralizedOptions, default_text,
                                      describe_options, file_fields, option, option_groups)
from cefl_opt.solvers.primal_dual import PAPER, TUNED


def _field(cls, name):
    return next(f for f in dataclasses.fields(cls) if f.name == name)


def test_preset_defaults_are_resolved_to_their_values():
    # hand values: the tuned preset (PDConstants' defaults) and the paper's outer step
    assert TUNED.lambda1 == 0.03 and PAPER.zeta == 0.01 and TUNED.zeta == 1.0
    assert default_text(_field(DecentralizedOptions, "lambda1")) == "0.03"
    assert default_text(_field(DecentralizedOptions, "zeta")) == "1.0 (constants=paper: 0.01)"
    assert default_text(_field(DecentralizedOptions, "constants")) == "'tuned'"
    assert default_text(_field(DecentralizedOptions, "ipopt_options")) == "{}"


@pytest.mark.parametrize("method", sorted(options_classes()))
def test_listing_shows_each_option_once_with_its_default_under_its_group(method, capsys):
    cls = options_classes()[method]
    assert cli.main(["solve", "--method", method, "--list-options"]) == 0
    out = capsys.readouterr().out
    assert "preset's" not in out
    groups = [ln for ln in out.splitlines() if ln in GROUPS]
    assert groups == [g for g, _ in option_groups(cls)]          # in GROUPS' order, each once
    listed = re.findall(r"^  (\w+) \(", out, re.M)
    assert sorted(listed) == sorted(f.name for f in file_fields(cls))
    blocks = re.split(r"^(\S[^\n]*)$", out, flags=re.M)
    for group, fields in option_groups(cls):
        body = blocks[blocks.index(group) + 1]
        for f in fields:
            assert re.search(rf"^  {f.name} \(.*default {re.escape(default_text(f))}[;)]",
                             " ".join(body.split("\n      ")), re.M), (group, f.name)


def test_decentralized_phases_hold_their_options():
    groups = {g: {f.name for f in fs} for g, fs in option_groups(DecentralizedOptions)}
    assert list(groups) == ["problem", "solver", "relaxed phase", "rounding", "search",
                            "finishing", "messaging", "recording"]
    assert {"lambda1", "zeta", "max_outer", "constants"} <= groups["relaxed phase"]
    assert {"candidates", "move_passes"} == groups["rounding"]
    assert {"agg_passes", "agg_screen", "move_screen", "refine_rounds", "trial_cutoff"} == groups["search"]
    assert {"stall_tol", "stall_window", "descent", "live_only"} == groups["finishing"]
    assert {"consensus_rounds", "backend"} == groups["messaging"]


@pytest.mark.parametrize("width", [50, 72, 200])
def test_listing_is_wrapped_to_the_width(width):
    text = describe_options("decentralized", DecentralizedOptions, width=width)
    assert max(len(ln) for ln in text.splitlines()) <= width
    unwrapped = describe_options("decentralized", DecentralizedOptions, width=10_000)
    assert " ".join(text.split()) == " ".join(unwrapped.split())   # the same words


def test_listing_follows_the_terminal_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "64")
    text = describe_options("scip", options_classes()["scip"])
    assert 55 < max(len(ln) for ln in text.splitlines()) <= 64


def test_unknown_group_is_refused():
    with pytest.raises(ValueError, match="option group 'rounding phase'"):
        option(1, "x", group="rounding phase")
