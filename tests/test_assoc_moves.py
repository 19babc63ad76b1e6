"""Association moves (solvers/assoc_moves.py) against the numpy evaluator of P.

Truth: `system.evaluate` of the orchestration with one UE's uplink or downlink BS changed and
everything else held (it recomputes every max term exactly). A trial's predicted change of J
is exact unless a round's dA or dR would fall (the moves price those by their rise only), and
never below the true change."""
import itertools
import warnings

import numpy as np
import pytest

warnings.filterwarnings("ignore", category=DeprecationWarning)

from cefl_opt import system  # noqa: E402
from cefl_opt.generator import make_instance  # noqa: E402
from cefl_opt.models import clip_to_bounds  # noqa: E402
from cefl_opt.solvers import aggregator_moves as agm  # noqa: E402
from cefl_opt.solvers import assoc_moves as am  # noqa: E402
from cefl_opt.solvers.decentralized import _fix_indicators, solve_decentralized  # noqa: E402
from cefl_opt.solvers.sca import build_structure  # noqa: E402



def _evaluate_moved(inst, sol, field: str, t: int, n: int, b: int):
    """`system.evaluate` of `sol` with UE n's `field` (uplink_bs / downlink_bs) of round t moved
    to BS b; `sol` is left as it was."""
    arr = getattr(sol.rounds[t], field)
    keep = int(arr[n])
    arr[n] = b
    try:
        return system.evaluate(inst, sol)
    finally:
        arr[n] = keep

def _setup(preset, seed, T, scramble=False, **size):
    """The reference orchestration (binary), or with every UE's BSs drawn at random."""
    inst = make_instance(preset, seed=seed, rounds=T, **size)
    st = build_structure(inst, relax_init=False)
    u = st.u0.copy()
    if scramble:
        rng = np.random.default_rng(seed)
        for g in am._groups(st):
            u[g] = 0.0
            v = rng.choice(g)
            u[v] = 1.0 / st.scale[v]
    u = _fix_indicators(st, u)
    free = np.ones(st.n_rows, dtype=bool)
    free[st.force_rows] = False
    views = am.central_views(st)
    u = am.tighten_epigraphs(st, u, st.linearise(u), free, views)
    return inst, st, u, free, views


def _solution(inst, st, u):
    return clip_to_bounds(st.to_solution(u, method="t", status="t"), inst, "corollary")


def _trial_table(inst, st, u, free, views):
    """(kind, t, n, b, predicted dJ) of every trial, from the hosts' parts and the primary."""
    lin = st.linearise(u)
    groups = am._groups(st)
    H = am._Hosts(st, free, views, groups).at(lin, u)
    part, _ = am._trials(H, groups, views.at_nonzeros(u * st.scale))
    tot = views.sum_to_vars(part)
    x = u * st.scale
    where = {}
    for key, field in (("Inb", "uplink_bs"), ("Ibn", "downlink_bs")):
        ix = st.idx[key]
        for t, n, b in zip(*np.nonzero(ix >= 0)):
            where[int(ix[t, n, b])] = (field, int(t), int(n), int(b))
    out = []
    for g in groups:
        j = int(g[np.argmax(x[g])])
        for v in g.tolist():
            if v != j:
                pred = tot[j] + tot[v] + lin.g[v] / st.scale[v] - lin.g[j] / st.scale[j]
                out.append((*where[v], pred))
    return out, lin


@pytest.mark.parametrize("preset,seed,T,scramble", [("small", 3, 2, False),
                                                    ("paper", 5, 2, True)])
def test_trial_predictions_match_the_evaluator(preset, seed, T, scramble):
    inst, st, u, free, views = _setup(preset, seed, T, scramble)
    sol = _solution(inst, st, u)
    ev0 = system.evaluate(inst, sol)
    table, lin = _trial_table(inst, st, u, free, views)
    assert lin.f == pytest.approx(ev0.objective, rel=1e-9)     # tightened: J(u) is P's value
    exact = lower = 0
    for field, t, n, b, pred in table:
        ev = _evaluate_moved(inst, sol, field, t, n, b)
        if not ev.feasible:
            assert pred >= 1e29, (field, t, n, b)
            continue
        true = ev.objective - ev0.objective
        tol = 1e-9 * max(1.0, abs(ev0.objective))
        assert pred >= true - tol, (field, t, n, b, pred, true)    # never optimistic
        d0, d1 = ev0.rounds[t], ev.rounds[t]
        fell = d1["dA"] < d0["dA"] - 1e-12 or d1["dR"] < d0["dR"] - 1e-12
        if not fell:
            assert pred == pytest.approx(true, abs=tol), (field, t, n, b)
            exact += 1
        else:
            lower += 1
    assert exact >= 0.8 * len(table) and exact > 10


@pytest.mark.parametrize("preset,seed,T", [("small", 37, 2), ("small", 11, 2), ("paper", 12, 3)])
def test_a_pass_lowers_P_by_at_least_its_predicted_gain(preset, seed, T):
    """Small seed 37: two UEs swap downlink BSs, one emptying the BS the other joins; without
    the veto the pair's joint fall is 0.35 below the sum of their predictions."""
    inst, st, u, free, views = _setup(preset, seed, T, scramble=True)
    ev0 = system.evaluate(inst, _solution(inst, st, u)).objective
    u2, info = am.association_moves(st, u, free, linearise=st.linearise, views=views, passes=1)
    ev1 = system.evaluate(inst, _solution(inst, st, u2))
    assert ev1.feasible
    assert info["association_moves"] > 0
    assert seed != 37 or info["association_vetoed"] > 0
    assert ev0 - ev1.objective >= info["association_predicted"] - 1e-9 * ev0 > 0


def test_the_method_reports_its_moves_and_move_passes_0_turns_them_off():
    inst = make_instance("small", seed=2, rounds=2)
    _, on = solve_decentralized(inst, constants={})
    _, off = solve_decentralized(inst, constants={"move_passes": 0})
    assert on["association_gain"] >= on["association_predicted"] - 1e-12
    assert on["association_predicted"] >= 0
    assert "association_moves" in on and "association_moves" not in off
    assert on["feasible"] and off["feasible"]


# -------------------------------------------------------------- exact trials at a shared max
def _gmax(v):
    return float(np.max(v, initial=0.0))


@pytest.mark.parametrize("preset,seed,T", [("small", 3, 2), ("paper", 5, 2)])
def test_the_screen_flags_exactly_the_ues_whose_leaving_lowers_dA_or_dR(preset, seed, T):
    """Truth: `system.evaluate` with the UE moved; a trial that lowers a round's dA or dR
    belongs to a flagged UE, and an unflagged UE's trials are priced exactly."""
    inst, st, u, free, views = _setup(preset, seed, T, scramble=True)
    lin = st.linearise(u)
    tops = am._shared_tops(st)
    assert tops.sum() == 2 * T                                  # dA and dR per round
    sol = _solution(inst, st, u)
    ev0 = system.evaluate(inst, sol)
    table, _ = _trial_table(inst, st, u, free, views)
    x = u * st.scale
    flagged = {}
    for key, field in (("Inb", "uplink_bs"), ("Ibn", "downlink_bs")):
        ix = st.idx[key]
        for t in range(ix.shape[0]):
            for n in range(ix.shape[1]):
                g = ix[t, n][ix[t, n] >= 0]
                if len(g) > 1:
                    j = int(g[np.argmax(x[g])])
                    flagged[(field, t, n)] = am._lowers_a_shared_max(st, u, lin, free, views,
                                                                     j, tops)
    fell_seen = 0
    for field, t, n, b, pred in table:
        ev = _evaluate_moved(inst, sol, field, t, n, b)
        d0, d1 = ev0.rounds[t], ev.rounds[t]
        if d1["dA"] < d0["dA"] - 1e-9 or d1["dR"] < d0["dR"] - 1e-9:
            assert flagged[(field, t, n)], (field, t, n, b)
            fell_seen += 1
        elif ev.feasible and not flagged[(field, t, n)]:
            assert pred == pytest.approx(ev.objective - ev0.objective, abs=1e-9), (field, t, n)
    assert 0 < sum(flagged.values()) < len(flagged) and fell_seen > 0


@pytest.mark.parametrize("preset,seed,T", [("small", 3, 2), ("paper", 5, 2)])
def test_the_prefilter_keeps_every_ue_the_screen_flags_and_drops_most(preset, seed, T):
    """Truth: `_lowers_a_shared_max` run for every group (it tightens the moved point). Every
    group it flags has a tight row that reads its UE's BS (`_tight_leavers`), and the prefilter
    drops most groups (the screen's cost then follows the tight rows, not the UEs)."""
    inst, st, u, free, views = _setup(preset, seed, T, scramble=True)
    lin = st.linearise(u)
    u = am.tighten_epigraphs(st, u, lin, free, views)
    lin = st.linearise(u)
    tops, groups, x = am._shared_tops(st), am._groups(st), u * st.scale
    pre = am._tight_leavers(st, u, lin, free, views, groups)
    truth = np.array([am._lowers_a_shared_max(st, u, lin, free, views,
                                              int(g[np.argmax(x[g])]), tops) for g in groups])
    assert truth.any() and not np.any(truth & ~pre)
    assert pre.sum() < 0.5 * len(groups)


def _moved_and_checked(move, key: str, inst, st, u, free, views, ev0: float):
    """`move` (exact_top_moves or exact_group_moves) to its end; checks that the end is feasible,
    that something moved and that P fell by the reported gain (`system.evaluate`)."""
    u2, info = move(st, u, free, linearise=st.linearise, values=st.values, views=views,
                    global_max=_gmax,
                    viol_tol=1e-6, passes=20)
    sol = _solution(inst, st, u2)
    ev1 = system.evaluate(inst, sol)
    assert ev1.feasible and info[f"{key}_moves"] > 0
    assert ev1.objective == pytest.approx(ev0 - info[f"{key}_gain"], rel=1e-9)
    return u2, sol, ev1


@pytest.mark.parametrize("preset,seed,T", [("small", 3, 2),
                                           pytest.param("paper", 5, 2, marks=pytest.mark.slow)])
def test_exact_moves_lower_P_and_end_where_no_flagged_trial_does(preset, seed, T):
    inst, st, u, free, views = _setup(preset, seed, T, scramble=True)
    ev0 = system.evaluate(inst, _solution(inst, st, u)).objective
    u2, sol, ev1 = _moved_and_checked(am.exact_top_moves, "exact", inst, st, u, free, views,
                                      ev0)
    assert ev1.objective < ev0
    lin = st.linearise(u2)                     # the end: no flagged UE's trial lowers P
    tops, x = am._shared_tops(st), u2 * st.scale
    for key, field in (("Inb", "uplink_bs"), ("Ibn", "downlink_bs")):
        ix = st.idx[key]
        for t, n in np.ndindex(*ix.shape[:2]):
            g = ix[t, n][ix[t, n] >= 0]
            j = int(g[np.argmax(x[g])]) if len(g) > 1 else -1
            if j < 0 or not am._lowers_a_shared_max(st, u2, lin, free, views, j, tops):
                continue
            arr = getattr(sol.rounds[t], field)
            keep = int(arr[n])
            for b in inst.ue_links()[n]:
                arr[n] = b
                ev = system.evaluate(inst, sol)
                assert not ev.feasible or ev.objective >= ev1.objective * (1 - 1e-9)
            arr[n] = keep
    # the reject branch: from the end point nothing lowers P, so nothing moves
    u3, again = am.exact_top_moves(st, u2, free, linearise=st.linearise, values=st.values,
                                   views=views, global_max=_gmax, viol_tol=1e-6, passes=20)
    assert again["exact_moves"] == 0 and again["exact_gain"] == 0.0
    ind = np.concatenate(am._groups(st))
    assert np.array_equal(u3[ind], u2[ind])
    _u, none = am.exact_top_moves(st, u, free, linearise=st.linearise, values=st.values,
                                  views=views, global_max=_gmax, viol_tol=1e-6, passes=0)
    assert none["exact_moves"] == 0 and none["exact_trials"] == 0



@pytest.mark.parametrize("preset,seed,T", [("small", 3, 2),
                                           pytest.param("paper", 5, 2, marks=pytest.mark.slow)])
def test_an_exact_trial_from_the_current_rows_equals_one_evaluated_at_the_moved_point(
        preset, seed, T):
    """An exact trial (`_trial_point`, `_exact_value`) takes the rows at the moved point from the current point's linearisation
    (affine in each moved group's indicators) instead of evaluating them there: for every
    single-UE trial and every whole-group trial of the scrambled start, the tightened point,
    J and the violation equal those of the trial whose rows are evaluated at the moved point
    (to rounding), and the non-forcing rows themselves agree."""
    _inst, st, u, free, views = _setup(preset, seed, T, scramble=True)
    lin = st.linearise(u)

    def full(ut):                                       # the rows evaluated at the moved point
        am.fix_indicators_at(st, ut)
        v = st.values(ut)
        v.a = lin.a
        ut = am.tighten_epigraphs(st, ut, v, free, views)
        vt = st.values(ut)
        return ut, vt, _gmax(np.where(free, np.maximum(vt.c, 0.0), 0.0))
    trials = []
    x = u * st.scale
    for g in am._groups(st):
        j = int(g[np.argmax(x[g])])
        for v in g.tolist():
            if v != j:
                ut = u.copy()
                ut[j], ut[v] = 0.0, 1.0 / st.scale[v]
                trials.append(ut)
    for _t, j, _ues, rows, targets in am._bs_groups(st, am._downlinks(st, u, views)):
        for b in targets:
            ut = u.copy()
            ut[rows[:, j]] = 0.0
            ut[rows[:, b]] = 1.0 / st.scale[rows[:, b]]
            trials.append(ut)
    assert len(trials) >= 18
    for ut in trials:
        dc = np.bincount(st.jac_rows, weights=lin.a * (ut - u)[st.jac_cols],
                         minlength=st.n_rows)
        am.fix_indicators_at(st, ut)
        assert np.allclose((lin.c + dc)[free], st.values(ut).c[free], rtol=0, atol=1e-12)
        u1 = am._trial_point(st, ut.copy(), free, lin, views)
        v1, viol1 = am._exact_value(st, u1, free, st.values, _gmax)
        u2, v2, viol2 = full(ut.copy())
        assert np.allclose(u1, u2, rtol=1e-12, atol=1e-12)
        assert v1.f == pytest.approx(v2.f, rel=1e-12) and viol1 == pytest.approx(viol2, abs=1e-12)
    am.fix_indicators_at(st, u)


# ---------------------------------------------------------------- group moves of a whole BS
def _group_trials(inst, sol):
    """Every whole-group move by brute force: (round, field, BS, target, evaluate) for each BS
    serving at least two UEs on the downlink in a round, to each BS every one of them links
    to."""
    links = inst.ue_links()
    out = []
    for t, field in ((t, "downlink_bs") for t in range(inst.T)):
        arr = getattr(sol.rounds[t], field)
        for j in range(inst.B):
            ues = np.flatnonzero(arr == j)
            if len(ues) < 2:
                continue
            for b in set.intersection(*(set(int(x) for x in links[n]) for n in ues)) - {j}:
                arr[ues] = b
                out.append((t, field, j, b, system.evaluate(inst, sol)))
                arr[ues] = j
    return out


@pytest.mark.parametrize("preset,seed,T", [("small", 3, 2),
                                           pytest.param("paper", 6, 2, marks=pytest.mark.slow)])
def test_group_moves_lower_P_and_end_where_no_group_move_does(preset, seed, T):
    """Truth: `system.evaluate` with every UE of a BS's downlink group moved to another BS
    together."""
    inst, st, u, free, views = _setup(preset, seed, T, scramble=True)
    sol0 = _solution(inst, st, u)
    ev0 = system.evaluate(inst, sol0).objective
    better0 = [r for r in _group_trials(inst, sol0) if r[4].feasible
               and r[4].objective < ev0 * (1 - 1e-9)]
    assert better0                                    # the start has an improving group move
    u2, sol, ev1 = _moved_and_checked(am.exact_group_moves, "group", inst, st, u, free, views,
                                      ev0)
    for *_key, ev in _group_trials(inst, sol):        # the end: no group move lowers P
        assert not ev.feasible or ev.objective >= ev1.objective * (1 - 1e-9)
    # the reject branch: from the end point nothing lowers P, so nothing moves
    u3, again = am.exact_group_moves(st, u2, free, linearise=st.linearise, values=st.values,
                                     views=views, global_max=_gmax, viol_tol=1e-6, passes=20)
    assert again["group_moves"] == 0 and again["group_gain"] == 0.0 and again["group_trials"] > 0
    ind = np.concatenate(am._groups(st))
    assert np.array_equal(u3[ind], u2[ind])
    _u, none = am.exact_group_moves(st, u, free, linearise=st.linearise, values=st.values,
                                    views=views, global_max=_gmax, viol_tol=1e-6, passes=0)
    assert none["group_moves"] == 0 and none["group_trials"] == 0


def test_downlinks_are_every_ues_downlink_bs_from_its_own_row_only():
    """Truth: the solution's `downlink_bs`. Each UE's row is written by the process holding
    the UE only: with views that see only the UEs' own primaries and sum the node rows, the
    whole (T, N) table comes back (the values of the other processes' variables never read)."""
    inst, st, u, _free, views = _setup("small", 3, 2, scramble=True)
    sol = _solution(inst, st, u)
    want = np.array([r.downlink_bs for r in sol.rounds])
    assert np.array_equal(am._downlinks(st, u, views), want)
    half = np.zeros(st.n_nodes, dtype=bool)
    half[: st.n_nodes // 2] = True
    seen = []

    def node_sum(rows):
        seen.append(rows.copy())
        return rows.sum(axis=0)
    from dataclasses import replace
    for part in (half, ~half):
        v = replace(views, local_vars=part[st.primary], node_sum=node_sum)
        garbled = np.where(part[st.primary], u, 7.0)      # other processes' values unknown
        got = am._downlinks(st, garbled, v)
        rows = seen[-1]
        assert not rows[~part].any()                      # only its own nodes' rows
        mine = np.flatnonzero(rows.any(axis=0))
        assert np.array_equal(got.ravel()[mine], want.ravel()[mine])
    # the two processes' rows together: every UE's downlink, written once
    assert np.array_equal((seen[-2] + seen[-1]).sum(axis=0), want.ravel() + 1.0)


# ---------------------------------------------------------------- group formation
def _hand_links():
    """2 rounds, 6 UEs, 4 BSs; UE 2 has no link to BS 0, UE 5 none to BS 1."""
    T, N, B = 2, 6, 4
    ix = np.arange(T * N * B).reshape(T, N, B)
    ix[:, 2, 0] = -1
    ix[:, 5, 1] = -1
    return ix


def test_bs_groups_are_every_bs_serving_two_or_more_ues_with_their_common_links():
    """Round 0: BS 0 serves one UE (no group), BS 1 two, BS 2 three, BS 3 none; round 1: BS 3
    serves all six. Each group's targets are the other BSs every one of its UEs links to."""
    from types import SimpleNamespace
    ix = _hand_links()
    down = np.array([[0, 1, 1, 2, 2, 2], [3, 3, 3, 3, 3, 3]])
    got = am._bs_groups(SimpleNamespace(idx={"Ibn": ix}), down)
    want = [(0, 1, [1, 2], [2, 3]),          # UE 2 lacks BS 0
            (0, 2, [3, 4, 5], [0, 3]),       # UE 5 lacks BS 1
            (1, 3, [0, 1, 2, 3, 4, 5], [2])]  # UE 2 lacks BS 0, UE 5 BS 1
    assert [(t, j, ues.tolist(), tgt) for t, j, ues, _rows, tgt in got] == want
    for t, j, ues, rows, _tgt in got:
        assert np.array_equal(rows, ix[t][ues])
    # round 0: all on BS 0 but UE 2 (which cannot reach it), BS 1 excluded by UE 5; round 1:
    # all on BS 1 but UE 5, BS 0 excluded by UE 2
    down2 = np.array([[0, 0, 3, 0, 0, 0], [1, 1, 1, 1, 1, 0]])
    got2 = am._bs_groups(SimpleNamespace(idx={"Ibn": ix}), down2)
    assert [(t, j, ues.tolist(), tgt) for t, j, ues, _r, tgt in got2] == [
        (0, 0, [0, 1, 3, 4, 5], [2, 3]), (1, 1, [0, 1, 2, 3, 4], [2, 3])]


def _with_downlinks(st, u, free, views, down):
    """u with every UE's downlink BS of round t set to down[t][n], the epigraphs tightened."""
    u = u.copy()
    ix = st.idx["Ibn"]
    for t, n in np.ndindex(*ix.shape[:2]):
        g = ix[t, n]
        u[g[g >= 0]] = 0.0
        u[g[down[t][n]]] = 1.0 / st.scale[g[down[t][n]]]
    u = _fix_indicators(st, u)
    return am.tighten_epigraphs(st, u, st.linearise(u), free, views)


def test_a_sweep_tries_every_group_move_once():
    """Truth: the brute-force list of whole-group moves at the start (`_group_trials`); one
    sweep tries each exactly once (the groups of a round are disjoint, so a move in the sweep
    leaves the others' UEs where they were). The start has groups of one, two, three UEs and
    one of all the UEs."""
    inst, st, u, free, views = _setup("small", 3, 2, ues=7, bss=4)
    N = inst.N
    down = [[0, 1, 1] + [2] * (N - 3), [3] * N]
    assert all(b in inst.ue_links()[n] for t in range(2) for n, b in enumerate(down[t]))
    u = _with_downlinks(st, u, free, views, down)
    sol0 = _solution(inst, st, u)
    assert [list(r.downlink_bs) for r in sol0.rounds] == down
    brute = _group_trials(inst, sol0)
    sizes = sorted({int(np.sum(sol0.rounds[t].downlink_bs == j)) for t, _f, j, _b, _e in brute})
    assert sizes == [2, N - 3, N]
    _u, info = am.exact_group_moves(st, u, free, linearise=st.linearise, values=st.values,
                                    views=views, global_max=_gmax, viol_tol=1e-6, passes=1)
    assert info["group_trials"] == len(brute) == (inst.B - 1) * 3


def test_group_moves_take_the_best_of_several_targets():
    """Four BSs (three targets per group) from the hand start: the end is where no whole-group
    move lowers P (`_group_trials`), and the first sweep's first move is the brute-force best
    target of its group."""
    inst, st, u, free, views = _setup("small", 3, 2, ues=7, bss=4)
    N = inst.N
    u = _with_downlinks(st, u, free, views, [[0, 1, 1] + [2] * (N - 3), [3] * N])
    sol0 = _solution(inst, st, u)
    ev0 = system.evaluate(inst, sol0).objective
    u1, one = am.exact_group_moves(st, u, free, linearise=st.linearise, values=st.values,
                                   views=views, global_max=_gmax, viol_tol=1e-6, passes=1)
    assert one["group_moves"] > 0
    first = next(r for r in _group_trials(inst, sol0))          # the first group tried
    t, _f, j, _b, _e = first
    tries = [r for r in _group_trials(inst, sol0) if r[0] == t and r[2] == j]
    best = min((r for r in tries if r[4].feasible), key=lambda r: r[4].objective)
    assert best[4].objective < ev0 * (1 - 1e-9) and len(tries) == 3
    moved = _solution(inst, st, u1).rounds[t].downlink_bs
    assert np.all(moved[sol0.rounds[t].downlink_bs == j] == best[3])
    _moved_and_checked(am.exact_group_moves, "group", inst, st, u, free, views, ev0)
    u2, _info = am.exact_group_moves(st, u, free, linearise=st.linearise, values=st.values,
                                     views=views, global_max=_gmax, viol_tol=1e-6, passes=20)
    ev2 = system.evaluate(inst, _solution(inst, st, u2)).objective
    for *_key, ev in _group_trials(inst, _solution(inst, st, u2)):
        assert not ev.feasible or ev.objective >= ev2 * (1 - 1e-9)


def test_vetoes_keep_the_kind_of_the_best_trial():
    """Two chosen trials meet at one local epigraph variable e: one lowers it, the other raises
    one of its rows. The kind of the trial with the larger predicted gain stays, the other is
    vetoed (on its target's nonzero); trials of one kind are never vetoed."""
    from types import SimpleNamespace
    groups = [np.array([0, 1]), np.array([2, 3])]       # group 0: 0 -> 1, group 1: 2 -> 3
    prop = np.array([-1.0, 1.0, -1.0, 1.0])

    def by_host(g, keep=None):                          # one host reads every variable
        return {0: {int(v): int(v) for v in g if keep is None or keep[v] != 0}}
    H = SimpleNamespace(st=SimpleNamespace(jac_cols=np.arange(4)), by_host=by_host)
    mixed = {(0, 1): {9: (-0.5, False)}, (0, 3): {9: (0.2, True)}}
    for gains, vetoed in (([0, 2.0, 0, 1.0], 3), ([0, 1.0, 0, 2.0], 1)):
        veto = am._vetoes(H, groups, prop, np.array(gains), mixed)
        assert veto.tolist() == [float(i == vetoed) for i in range(4)], gains
    same = {(0, 1): {9: (-0.5, False)}, (0, 3): {9: (-0.2, False)}}
    assert not am._vetoes(H, groups, prop, np.array([0, 1.0, 0, 2.0]), same).any()


def test_exact_moves_take_the_best_of_several_targets():
    """Four BSs (three targets per UE) from the scrambled start: at the end no trial of a
    flagged UE lowers P (`system.evaluate` of each), and a second call moves nothing."""
    inst, st, u, free, views = _setup("small", 3, 2, scramble=True, ues=7, bss=4)
    ev0 = system.evaluate(inst, _solution(inst, st, u)).objective
    u2, sol, ev1 = _moved_and_checked(am.exact_top_moves, "exact", inst, st, u, free, views,
                                      ev0)
    lin, tops, x = st.linearise(u2), am._shared_tops(st), u2 * st.scale
    checked = 0
    for key, field in (("Inb", "uplink_bs"), ("Ibn", "downlink_bs")):
        ix = st.idx[key]
        for t, n in np.ndindex(*ix.shape[:2]):
            g = ix[t, n][ix[t, n] >= 0]
            j = int(g[np.argmax(x[g])])
            if not am._lowers_a_shared_max(st, u2, lin, free, views, j, tops):
                continue
            arr = getattr(sol.rounds[t], field)
            keep = int(arr[n])
            for b in inst.ue_links()[n]:
                arr[n] = b
                ev = system.evaluate(inst, sol)
                assert not ev.feasible or ev.objective >= ev1.objective * (1 - 1e-9), (t, n, b)
                checked += 1
            arr[n] = keep
    assert checked >= 4 * 2


# ---------------------------------------------------------------- a rejected round's batches
def test_moved_groups_and_their_components_do_not_conflict():
    """Truth: the hand downlinks. Round 0: UEs 1 and 2 leave BS 1 for BS 3 (one BS's group:
    one component), UE 5 leaves BS 2 for BS 0 (another); round 1: UE 2 leaves BS 3 for BS 2.
    The components never conflict, and applying them all gives the moved point's BSs."""
    inst, st, u, free, views = _setup("small", 3, 2, ues=7, bss=4)
    N = inst.N
    before = [[0, 1, 1] + [2] * (N - 3), [3] * N]
    after = [[0, 3, 3] + [2] * (N - 3), [3] * N]
    after[0][5], after[1][2] = 0, 2
    links = inst.ue_links()
    assert all(b in links[n] for d in (before, after) for t in range(2)
               for n, b in enumerate(d[t]))
    u0 = _with_downlinks(st, u, free, views, before)
    u1 = _with_downlinks(st, u, free, views, after)
    moved = am.moved_groups(st, u0, u1, views)
    assert [(t, n, a, b) for t, n, a, b, _row in moved] == [
        (0, 1, 1, 3), (0, 2, 1, 3), (0, 5, 2, 0), (1, 2, 3, 2)]
    comps = am.move_components(st, moved)
    assert [m.key for m in comps] == [((0, 1), (0, 2)), ((0, 5),), ((1, 2),)]
    assert all(not agm.conflict(a, b) for a, b in itertools.combinations(comps, 2))
    x = u0
    for m in comps:
        x = m.apply(x)
    got = _solution(inst, st, x)
    assert [list(r.downlink_bs) for r in got.rounds] == after
    assert am.moved_groups(st, u0, u0, views) == []


def test_a_rejected_rounds_halves_are_finished_and_only_a_better_half_is_taken(monkeypatch):
    """`decentralized._refine_subsets` on the moves above, with the finishing phase replaced by
    a table: J = 2 - 0.5 (round 0's BS-1 group moved) + 0.6 (UE 5 moved) + 0.1 (round 1's
    UE 2 moved). All three together (2.2) were rejected; the first half (the group move,
    1.5) is taken, the second (UE 5 and UE 2, back to 2.2) is not: two finishing phases."""
    from types import SimpleNamespace

    from cefl_opt.solvers import decentralized as dz
    inst, st, u, free, views = _setup("small", 3, 2, ues=7, bss=4)
    N = inst.N
    before = [[0, 1, 1] + [2] * (N - 3), [3] * N]
    after = [[0, 3, 3, 2, 2, 0] + [2] * (N - 6), [3, 3, 2] + [3] * (N - 3)]
    u0 = _with_downlinks(st, u, free, views, before)
    u1 = _with_downlinks(st, u, free, views, after)

    def J(x):
        d = am._downlinks(st, x, views)
        return 2.0 - 0.5 * (d[0, 1] == 3) + 0.6 * (d[0, 5] == 0) + 0.1 * (d[1, 2] == 2)
    monkeypatch.setattr(dz, "_finishing_phase",
                        lambda run, x, against=None: (x.copy(), [], "converged"))
    monkeypatch.setattr(dz, "_network_value", lambda run, x: (float(J(x)), 0.0))
    run = SimpleNamespace(st=st, k=SimpleNamespace(viol_tol=1e-6), dec=False, budget=None,
                          finished=[])
    inc = agm.Candidate(u=u0, J=2.0, viol=0.0, start="relaxed")
    assert J(u1) == pytest.approx(2.2)
    cnt = {"refine_subsets": 0, "refine_subset_moves": 0}
    out, kept = dz._refine_subsets(run, inc, u1, views, cnt)
    assert out.J == 1.5 and [m.key for m in kept] == [((0, 1), (0, 2))]
    assert am._downlinks(st, out.u, views).tolist() == [[0, 3, 3] + [2] * (N - 3), [3] * N]
    assert cnt == {"refine_subsets": 2, "refine_subset_moves": 1} and len(run.finished) == 2
    worse = agm.Candidate(u=u0, J=1.0, viol=0.0, start="relaxed")   # nothing beats it
    out, kept = dz._refine_subsets(run, worse, u1, views, cnt)
    assert out is worse and kept == []


# ---------------------------------------------------------------- the screen of exact trials
@pytest.mark.parametrize("keep,per_group", [(0, 3), (1, 1), (2, 2), (3, 3), (4, 3)])
def test_a_screened_sweep_evaluates_at_most_keep_trials_per_group(keep, per_group):
    """Three groups of three targets each (the hand start of the sweep test): `keep` = 0 or at
    least the targets evaluates every trial; fewer evaluates `keep` per group."""
    inst, st, u, free, views = _setup("small", 3, 2, ues=7, bss=4)
    N = inst.N
    u = _with_downlinks(st, u, free, views, [[0, 1, 1] + [2] * (N - 3), [3] * N])
    _u, info = am.exact_group_moves(st, u, free, linearise=st.linearise, values=st.values,
                                    views=views, global_max=_gmax, viol_tol=1e-6, passes=1,
                                    keep=keep)
    assert info["group_trials"] == 3 * per_group


def test_the_screen_keeps_the_trials_of_least_predicted_objective():
    """Truth: the linearisation's prediction f + g . (ut - u) computed here by hand for every
    whole-group trial point of the scrambled start; the screen keeps the `keep` least, in the
    trials' order, and every trial when they are no more than `keep`."""
    _inst, st, u, free, views = _setup("paper", 5, 2, scramble=True)
    lin = st.linearise(u)
    groups = am._bs_groups(st, am._downlinks(st, u, views))
    seen = 0
    for _t, j, _ues, rows, targets in groups:
        pts = []
        for b in targets:
            ut = u.copy()
            ut[rows[:, j]] = 0.0
            ut[rows[:, b]] = 1.0 / st.scale[rows[:, b]]
            pts.append(am._trial_point(st, ut, free, lin, views))
        pred = np.array([float(lin.g @ (p - u)) for p in pts])
        for keep in range(0, len(pts) + 2):
            got = am._screened(lin, pts, views, keep)
            want = (list(range(len(pts))) if keep == 0 or keep >= len(pts)
                    else sorted(np.argsort(pred, kind="stable")[:keep].tolist()))
            assert got == want
        seen += len(pts) >= 2 and len(set(pred.round(12))) > 1
    assert seen >= 2                      # groups where the screen has a choice to make
    am.fix_indicators_at(st, u)


@pytest.mark.parametrize("move,key", [(am.exact_top_moves, "exact"),
                                      (am.exact_group_moves, "group")])
def test_screened_moves_still_lower_P_by_their_reported_gain(move, key):
    """With one exact trial per group (the default screen), the moves end feasible and P
    (`system.evaluate`) falls by the reported gain, with fewer exact trials than unscreened."""
    inst, st, u, free, views = _setup("small", 3, 2, scramble=True, ues=7, bss=4)
    ev0 = system.evaluate(inst, _solution(inst, st, u)).objective
    kw = dict(linearise=st.linearise, values=st.values, views=views, global_max=_gmax,
              viol_tol=1e-6, passes=20)
    u1, one = move(st, u.copy(), free, keep=1, **kw)
    ev1 = system.evaluate(inst, _solution(inst, st, u1))
    assert ev1.feasible and one[f"{key}_moves"] > 0
    assert ev1.objective == pytest.approx(ev0 - one[f"{key}_gain"], rel=1e-9)
    am.fix_indicators_at(st, u)
    _u, every = move(st, u.copy(), free, keep=0, **kw)
    assert one[f"{key}_trials"] < every[f"{key}_trials"]
    am.fix_indicators_at(st, u)


def _full_tightening(st, u, lin, free, views):
    """The tightening over every nonzero of the Jacobian (the form `tighten_epigraphs` reads
    a part of): a level's maxima over all nonzeros, its moves added to all rows."""
    rows, cols = st.jac_rows, st.jac_cols
    c, out = lin.c.copy(), u.copy()
    absa = np.maximum(np.abs(lin.a), 1e-300)
    for lev in range(len(am.EPIGRAPH_LEVELS)):
        on = (st.epi_level == lev) & (st.epi_dir > 0)
        sel = on[cols] & free[rows] & (lin.a < 0)
        top = views.max_to_vars(np.where(sel, c[rows] / absa, -np.inf))
        dv = np.where(on & np.isfinite(top), np.clip(top, st.lo - out, st.hi - out), 0.0)
        dv = np.where(views.local_vars, dv, 0.0)
        out = out + dv
        c = c + np.bincount(rows, weights=lin.a * views.at_nonzeros(dv), minlength=st.n_rows)
    return views.sync(out)


def test_the_tightening_and_moved_rows_read_only_their_nonzeros_bit_for_bit():
    """`tighten_epigraphs` and `_rows_moved` read the nonzeros of the columns that move
    only; on global arrays and by messages they equal the full forms bit for bit, at random
    points (off the epigraphs' maxima, so every level moves) and after random indicator
    changes; the messages are those of the full collectives."""
    from cefl_opt.solvers.dec_comm import LocalComm
    from cefl_opt.solvers.decentralized import DistributedEvaluator
    from cefl_opt.solvers.primal_dual import InnerSolver, resolve_constants
    inst = make_instance("paper", ues=24, bss=6, dcs=3, reach=2, seed=5, rounds=2)
    st = build_structure(inst)
    comm = LocalComm(inst.graph(), st.node_names)
    ev = DistributedEvaluator(st, InnerSolver(st, resolve_constants(None), mode="decentralized",
                                              comm=comm))
    free = np.ones(st.n_rows, dtype=bool)
    free[st.force_rows] = False
    ind = np.concatenate([st.idx[k].ravel() for k in ("Is", "Inb", "Ibn")])
    ind = ind[ind >= 0]
    rng = np.random.default_rng(8)
    moved = 0
    for _ in range(4):
        u = st.project(st.u0 + rng.normal(0, 0.2, st.n))
        lin = st.linearise(u)
        du = np.zeros(st.n)
        j = rng.choice(ind, 3, replace=False)
        du[j] = rng.normal(0, 1, 3)
        for by_msgs, views in ((False, am.central_views(st)), (True, ev.move_views())):
            comm.snapshot()
            got = am.tighten_epigraphs(st, u, lin, free, views)
            part = comm.snapshot()
            full = _full_tightening(st, u, lin, free, views)
            assert np.array_equal(got, full)
            assert np.array_equal(part[0], comm.snapshot()[0])       # the same messages
            moved += int(np.sum(got != u))
            if by_msgs:     # one process: the sync is counted as a broadcast, changes nothing
                comm.snapshot()
                synced = views.sync(got)
                m_sync = comm.snapshot()[0]
                comm.broadcast(ev.inner.plan, got)
                assert np.array_equal(synced, got) and synced is not got
                assert np.array_equal(m_sync, comm.snapshot()[0]) and m_sync.sum() > 0
            rows_full = lin.c + np.bincount(st.jac_rows, weights=lin.a * views.at_nonzeros(du),
                                            minlength=st.n_rows)
            rows = am._rows_moved(st, lin, du, views).c
            assert np.array_equal(rows, rows_full) and not np.array_equal(rows, lin.c)
    assert moved > 100
