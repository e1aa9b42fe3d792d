"""Evidence metrics (palrp_bench/metrics/evidence.py; docs/evaluation.md "Evidence metrics"): PG, MRR, RMA, PTA and
the tied-token share on hand-computed cases, the official tie rule against the reference code's own recipe
(``numpy.argmax``, ``scipy.stats.rankdata(method="dense")``), the corrected rule against brute-force enumeration
of every order of the tied tokens, the relations that hold between the rules, PG and RMA against Quantus 0.6.0,
the one-line errors, and the per-sample rows through metrics/table.py to ``metrics.csv`` numbers."""
from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.metrics.evidence import (EVALUATION_MASKS, evidence_rows, mrr, per_token_accuracy, pointing_game,
                                          relevance_mass_accuracy, tie_variant, tied_token_share)
from palrp_bench.metrics.registry import higher_is_better, metric_specs
from palrp_bench.metrics.table import metric_samples, table_metrics

T, F_ = True, False
#: float64 sums of at most a few hundred terms in [0, 1]
TOL = 1e-12


def _t(rows, dtype=torch.float64):
    return torch.tensor(rows, dtype=dtype)


def _b(rows):
    return torch.tensor(rows, dtype=torch.bool)


def _all(*metric_args):
    """Every metric of one batch as plain lists (both tie rules)."""
    s, e, v = metric_args
    return {"pg": pointing_game(s, e, v).tolist(), "pg_c": pointing_game(s, e, v, "corrected").tolist(),
            "mrr": mrr(s, e, v).tolist(), "mrr_c": mrr(s, e, v, "corrected").tolist(),
            "rma": relevance_mass_accuracy(s, e, v).tolist(), "pta": per_token_accuracy(s, e, v).tolist(),
            "tied": tied_token_share(s, v).tolist()}


# ----------------------------------------------------------------------------------------------------------------
# hand-computed cases
# ----------------------------------------------------------------------------------------------------------------

def test_no_ties_both_rules_agree_by_hand():
    s = _t([[0.1, 0.7, -0.2, 0.4], [0.5, -1.0, 0.3, 0.2]])
    e = _b([[F_, F_, T, T], [F_, F_, T, F_]])
    v = _b([[T, T, T, T]] * 2)
    got = _all(s, e, v)
    # row 0: order 1, 3, 0, 2 -> best evidence (token 3) at rank 2; row 1: order 0, 2, 3, 1 -> rank 2
    assert got["pg"] == got["pg_c"] == [0.0, 0.0]
    assert got["mrr"] == got["mrr_c"] == [0.5, 0.5]
    assert got["rma"] == pytest.approx([0.4 / 1.2, 0.3 / 1.0], abs=TOL)
    # row 0: signs +, +, -, + vs evidence F, F, T, T -> right: token 3 only; row 1: +, -, +, + vs F, F, T, F
    assert got["pta"] == [0.25, 0.5]
    assert got["tied"] == [0.0, 0.0]


def test_a_tie_at_the_top():
    """[1, 1, 0] with evidence = token 0: the first arg-max is evidence (official PG 1), but the dense rank of the
    evidence is n - 2 + 1 = 2 (official MRR 1/2 < PG); corrected: PG = 1/2, MRR = (1 + 1/2) / 2 = 3/4."""
    s, e, v = _t([[1.0, 1.0, 0.0]]), _b([[T, F_, F_]]), _b([[T, T, T]])
    got = _all(s, e, v)
    assert got["pg"] == [1.0] and got["mrr"] == [0.5]
    assert got["pg_c"] == [0.5] and got["mrr_c"] == [0.75]
    assert got["tied"] == [pytest.approx(2 / 3)]
    # evidence on the second tied token: the first arg-max misses it
    got = _all(s, _b([[F_, T, F_]]), v)
    assert got["pg"] == [0.0] and got["mrr"] == [0.5] and got["pg_c"] == [0.5] and got["mrr_c"] == [0.75]


def test_a_tie_below_the_evidence_lowers_official_mrr_only():
    """[3, 1, 1], evidence = token 0: a unique top, yet dense ranks give it rank 3 - 2 + 1 = 2."""
    got = _all(_t([[3.0, 1.0, 1.0]]), _b([[T, F_, F_]]), _b([[T, T, T]]))
    assert got["pg"] == got["pg_c"] == [1.0]
    assert got["mrr"] == [0.5] and got["mrr_c"] == [1.0]


def test_all_zero_scores():
    """Every token tied at 0: official PG = is token 0 evidence, official rank n; corrected PG = |E| / n and MRR the
    expectation of 1 / (first evidence position) of a random order; no positive relevance: RMA 0."""
    s, v = torch.zeros(2, 4, dtype=torch.float64), _b([[T, T, T, T]] * 2)
    e = _b([[F_, T, F_, F_], [T, F_, T, F_]])
    got = _all(s, e, v)
    assert got["pg"] == [0.0, 1.0] and got["mrr"] == [0.25, 0.25]
    assert got["pg_c"] == [0.25, 0.5]
    # k = 1 of m = 4: (1 + 1/2 + 1/3 + 1/4) / 4; k = 2 of 4: P(J=1) = 1/2, P(J=2) = 1/3, P(J=3) = 1/6
    assert got["mrr_c"] == pytest.approx([(1 + 1 / 2 + 1 / 3 + 1 / 4) / 4, 1 / 2 + 1 / 3 / 2 + 1 / 6 / 3], abs=TOL)
    assert got["rma"] == [0.0, 0.0]  # counted as 0, not NaN
    assert got["pta"] == [0.75, 0.5]  # nothing is > 0: right on the non-evidence tokens
    assert got["tied"] == [1.0, 1.0]


def test_no_positive_relevance_gives_rma_zero_and_negative_scores_still_rank():
    s, e, v = _t([[-0.5, -0.1, -2.0]]), _b([[F_, T, F_]]), _b([[T, T, T]])
    got = _all(s, e, v)
    assert got["rma"] == [0.0]
    assert got["pg"] == [1.0] and got["mrr"] == [1.0]
    assert got["pta"] == [pytest.approx(2 / 3)]  # the evidence token is not > 0


def test_invalid_tokens_are_never_ranked_or_counted():
    """Token 0 (invalid) has the largest score and ties with token 3; tokens 4 and 5 (invalid) tie below."""
    s = _t([[9.0, 2.0, 5.0, 9.0, 1.0, 1.0]])
    e = _b([[F_, F_, T, F_, F_, F_]])
    v = _b([[F_, T, T, T, F_, F_]])
    got = _all(s, e, v)
    # valid: 2.0, 5.0 (evidence), 9.0 -> evidence second, no tie among valid tokens
    assert got["pg"] == got["pg_c"] == [0.0] and got["mrr"] == got["mrr_c"] == [0.5]
    assert got["rma"] == [pytest.approx(5 / 16)]
    assert got["pta"] == [pytest.approx(1 / 3)]  # tokens 1 and 3 are > 0 but not evidence
    assert got["tied"] == [0.0]
    # the same row with the invalid tokens removed gives the same numbers
    assert _all(_t([[2.0, 5.0, 9.0]]), _b([[F_, T, F_]]), _b([[T, T, T]])) == got


def test_a_single_valid_token():
    s = _t([[0.3, 7.0], [-0.3, 7.0], [0.0, 7.0]])
    e, v = _b([[T, F_]] * 3), _b([[T, F_]] * 3)
    got = _all(s, e, v)
    assert got["pg"] == got["pg_c"] == [1.0] * 3 and got["mrr"] == got["mrr_c"] == [1.0] * 3
    assert got["rma"] == [1.0, 0.0, 0.0]
    assert got["pta"] == [1.0, 0.0, 0.0]
    assert got["tied"] == [0.0] * 3


def test_a_row_without_evidence_scores_zero_and_nonfinite_rows_are_nan():
    s = _t([[1.0, 2.0], [1.0, float("nan")], [float("inf"), 1.0], [float("nan"), 1.0]])
    e = _b([[F_, F_], [T, F_], [F_, T], [F_, T]])
    v = _b([[T, T], [T, T], [T, T], [F_, T]])  # row 3: the NaN is on an invalid token
    got = _all(s, e, v)
    for name in ("pg", "pg_c", "mrr", "mrr_c", "rma"):
        assert got[name][0] == 0.0, name
        assert math.isnan(got[name][1]) and math.isnan(got[name][2]), name
        assert got[name][3] == 1.0, name
    assert got["pta"][0] == 0.0 and math.isnan(got["tied"][1])


def test_pta_of_positive_scores_is_the_evidence_share():
    gen = torch.Generator().manual_seed(0)
    s = torch.rand(20, 12, generator=gen, dtype=torch.float64) + 0.01
    v = torch.rand(20, 12, generator=gen) < 0.8
    v[:, 0] = True
    e = v & (torch.rand(20, 12, generator=gen) < 0.3)
    share = e.sum(1).double() / v.sum(1).double()
    assert torch.equal(per_token_accuracy(s, e, v), share)


def test_half_precision_scores_keep_their_ties_and_the_result_is_float64():
    s = torch.tensor([[0.1, 0.1 + 1e-4, 0.0]], dtype=torch.bfloat16)  # equal in bfloat16, not in float64
    e, v = _b([[F_, T, F_]]), _b([[T, T, T]])
    assert s[0, 0] == s[0, 1]
    assert pointing_game(s, e, v).tolist() == [0.0] and pointing_game(s, e, v, "corrected").tolist() == [0.5]
    assert mrr(s, e, v).dtype == torch.float64 and tied_token_share(s, v).tolist() == [pytest.approx(2 / 3)]


# ----------------------------------------------------------------------------------------------------------------
# the official rule against the reference recipe, the corrected rule against brute force
# ----------------------------------------------------------------------------------------------------------------

def _tie_heavy_batch(seed: int, batch: int = 40, tokens: int = 8, levels: int = 3):
    """Integer scores in {0, .., levels - 1} (many ties), random valid masks, evidence a non-empty subset."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, levels, size=(batch, tokens)).astype(np.float64) - 1.0
    v = rng.random((batch, tokens)) < 0.75
    v[np.arange(batch), rng.integers(0, tokens, batch)] = True
    e = v & (rng.random((batch, tokens)) < 0.35)
    for i in range(batch):
        if not e[i].any():
            e[i, rng.choice(np.flatnonzero(v[i]))] = True
    return torch.from_numpy(s), torch.from_numpy(e), torch.from_numpy(v)


def test_official_rule_is_the_reference_codes_argmax_and_dense_rank():
    from scipy.stats import rankdata

    s, e, v = _tie_heavy_batch(1, batch=200)
    pg, rr = pointing_game(s, e, v).tolist(), mrr(s, e, v).tolist()
    for i in range(s.shape[0]):
        scores, evidence = s[i][v[i]].numpy(), e[i][v[i]].numpy()
        assert pg[i] == float(evidence[np.argmax(scores)])  # numpy: the first maximal index
        descending = len(scores) - rankdata(scores, method="dense") + 1  # as Ferrando et al. (2023)
        assert rr[i] == 1 / min(descending[evidence])


def _brute_force(scores, evidence):
    """Exact expectations (fractions) over every order of the tokens: a uniformly random permutation breaks
    the ties of a stable descending sort."""
    n = len(scores)
    pg, rr, count = Fraction(0), Fraction(0), 0
    for order in itertools.permutations(range(n)):
        ranked = sorted(order, key=lambda i: -scores[i])  # stable: tied tokens keep the permutation's order
        pg += int(evidence[ranked[0]])
        rr += Fraction(1, 1 + min(r for r, i in enumerate(ranked) if evidence[i]))
        count += 1
    return pg / count, rr / count


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_corrected_rule_is_the_exact_expectation_over_orders(seed):
    s, e, v = _tie_heavy_batch(seed, batch=25, tokens=7)
    pg, rr = pointing_game(s, e, v, "corrected").tolist(), mrr(s, e, v, "corrected").tolist()
    for i in range(s.shape[0]):
        want_pg, want_rr = _brute_force(s[i][v[i]].tolist(), e[i][v[i]].tolist())
        assert pg[i] == pytest.approx(float(want_pg), abs=TOL)
        assert rr[i] == pytest.approx(float(want_rr), abs=TOL)


def test_corrected_mrr_special_cases_of_the_closed_form():
    # k = m: 1 / (a + 1); k = 1: (H(a + m) - H(a)) / m, here a = 2 tokens above, m = 5 tied
    s = _t([[5.0, 4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]] * 2)
    v = torch.ones_like(s, dtype=torch.bool)
    e = _b([[F_, F_, T, T, T, T, T, F_], [F_, F_, F_, F_, T, F_, F_, T]])
    harmonic = lambda n: sum(1 / i for i in range(1, n + 1))  # noqa: E731
    assert mrr(s, e, v, "corrected").tolist() == pytest.approx([1 / 3, (harmonic(7) - harmonic(2)) / 5], abs=TOL)
    # official: 8 - dense(1.0) + 1 = 8 - 2 + 1 = 7 (the tied group's worst position; nothing ties below)
    assert mrr(s, e, v).tolist() == [1 / 7, 1 / 7]


def test_what_holds_between_the_rules():
    """Per sample: corrected MRR >= corrected PG; official MRR <= corrected MRR, equal exactly when the best evidence
    score is untied and no two valid tokens below it tie; official MRR < official PG happens (ties)."""
    s, e, v = _tie_heavy_batch(7, batch=400, tokens=10, levels=4)
    pg, pg_c = pointing_game(s, e, v), pointing_game(s, e, v, "corrected")
    rr, rr_c = mrr(s, e, v), mrr(s, e, v, "corrected")
    assert bool((rr_c >= pg_c - TOL).all())
    assert bool((rr <= rr_c + TOL).all())
    best = torch.where(e, s, torch.tensor(-math.inf, dtype=s.dtype)).max(1, keepdim=True).values
    untied_best = (v & (s == best)).sum(1) == 1
    below = [s[i][v[i] & (s[i] < best[i])] for i in range(s.shape[0])]
    distinct_below = torch.tensor([len(b) == len(torch.unique(b)) for b in below])
    equal = (rr - rr_c).abs() <= TOL
    assert torch.equal(equal, untied_best & distinct_below)
    assert bool(((rr < pg) & (pg == 1)).any())  # the published LLaMA qa pattern, MRR below PG
    assert bool((pg_c < 1).any() and (pg_c > 0).any())  # the batch has ties at the top


# ----------------------------------------------------------------------------------------------------------------
# Quantus 0.6.0
# ----------------------------------------------------------------------------------------------------------------

def test_pg_and_rma_equal_quantus():
    """Quantus' PointingGame and RelevanceMassAccuracy on non-negative ``[B, 1, T]`` attributions without a tie at
    the maximum, abs and normalise off (Quantus' PG counts any tied maximum on the mask, so ties are kept out)."""
    quantus = pytest.importorskip("quantus", reason="Quantus 0.6.0 is in the dev extra (pip install -e .[dev])")
    import warnings

    rng = np.random.default_rng(5)
    batch, tokens = 64, 9
    a = rng.uniform(0.0, 1.0, size=(batch, tokens))
    a[rng.random((batch, tokens)) < 0.3] = 0.0  # exact zeros below the maximum: ties Quantus sees too
    a[np.arange(batch), rng.integers(0, tokens, batch)] = 1.5  # a unique maximum per row
    s = rng.random((batch, tokens)) < 0.3
    s[np.arange(batch), rng.integers(0, tokens, batch)] = True
    x, y = np.zeros((batch, 1, tokens)), np.zeros(batch, dtype=int)
    kwargs = dict(abs=False, normalise=False, disable_warnings=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q_pg = quantus.PointingGame(**kwargs)(model=None, x_batch=x, y_batch=y, a_batch=a[:, None, :],
                                              s_batch=s[:, None, :].astype(float))
        q_rma = quantus.RelevanceMassAccuracy(**kwargs)(model=None, x_batch=x, y_batch=y, a_batch=a[:, None, :],
                                                        s_batch=s[:, None, :].astype(float))
    scores, evidence, valid = torch.from_numpy(a), torch.from_numpy(s), torch.ones(batch, tokens, dtype=torch.bool)
    for ties in ("official", "corrected"):
        assert pointing_game(scores, evidence, valid, ties).tolist() == [float(h) for h in q_pg]
    assert 0 < sum(float(h) for h in q_pg) < batch
    assert relevance_mass_accuracy(scores, evidence, valid).numpy() == pytest.approx(np.array(q_rma, float), abs=TOL)


# ----------------------------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda: pointing_game(torch.zeros(3), _b([T, F_, F_]), _b([T, T, T])), "expected [B, T]"),
    (lambda: mrr(torch.zeros(1, 3), _b([[T, F_]]), _b([[T, T, T]])), "evidence has shape (1, 2)"),
    (lambda: mrr(torch.zeros(1, 3), torch.tensor([[1, 0, 0]]), _b([[T, T, T]])), "expected a BoolTensor"),
    (lambda: relevance_mass_accuracy(torch.zeros(2, 3), _b([[T, F_, F_], [F_, T, F_]]), _b([[T, T, T], [T, F_, T]])),
     "evidence marks tokens that valid leaves out, in sample rows 1"),
    (lambda: per_token_accuracy(torch.zeros(2, 2), _b([[F_, F_]] * 2), _b([[T, T], [F_, F_]])),
     "valid selects no token in sample rows 1"),
    (lambda: tied_token_share(torch.zeros(1, 2), _b([[F_, F_]])), "valid selects no token"),
    (lambda: pointing_game(torch.zeros(1, 2), _b([[T, F_]]), _b([[T, T]]), ties="random"), "unknown ties"),
    (lambda: evidence_rows(torch.zeros(1, 2), _b([[T, F_]]), _b([[T, T]]), "context"), "unknown evaluation mask"),
])
def test_bad_input_is_one_line(call, message):
    with pytest.raises(BadInputError) as err:
        call()
    text = str(err.value)
    assert message in text and " -- " in text and "\n" not in text


# ----------------------------------------------------------------------------------------------------------------
# rows -> metrics.csv
# ----------------------------------------------------------------------------------------------------------------

CELL = dict(run="r", model="gpt2", quantization="none", dtype="float64", task="ra", paper_task="ra",
            protocol="official", aggregation="official", method="attnlrp", rules="attnlrp")


def _results(rows_per_sample, ids):
    return pd.DataFrame([{**CELL, "sample_id": sid, "metric": m, "variant": var, "step": step, "value": val}
                         for sid, rows in zip(ids, rows_per_sample) for m, var, step, val in rows])


def test_registered_as_percent_higher_is_better_table_metrics():
    specs = metric_specs()
    for name in ("pg", "mrr", "rma", "pta"):
        assert higher_is_better(name) is True and specs[name].unit == "%"
        assert set(EVALUATION_MASKS) <= set(specs[name].variants)
    assert higher_is_better("tied_token_share") is None
    assert tie_variant("default", "official") == "default"
    assert tie_variant("with_question", "corrected") == "with_question_corrected_ties"
    assert "default_corrected_ties" in specs["pg"].variants and "default_corrected_ties" not in specs["rma"].variants


def test_rows_give_the_metrics_csv_numbers():
    # sample a: the [1, 1, 0] tie case; b: no tie, evidence second; c: all zeros, evidence one of three
    s = _t([[1.0, 1.0, 0.0], [0.2, 0.5, -0.1], [0.0, 0.0, 0.0]])
    e = _b([[T, F_, F_], [T, F_, F_], [F_, F_, T]])
    v = _b([[T, T, T]] * 3)
    rows = evidence_rows(s, e, v, "default")
    # with_special: the same samples with a leading special token (left out by default) that takes the top score
    special = torch.cat([torch.full((3, 1), 5.0, dtype=torch.float64), s], 1)
    rows = [r + w for r, w in zip(rows, evidence_rows(special, torch.cat([_b([[F_]] * 3), e], 1),
                                                      _b([[T, T, T, T]] * 3), "with_special"))]
    assert [(m, var) for m, var, _, _ in rows[0][:7]] == [
        ("pg", "default"), ("mrr", "default"), ("pg", "default_corrected_ties"), ("mrr", "default_corrected_ties"),
        ("rma", "default"), ("pta", "default"), ("tied_token_share", "default")]
    got = table_metrics(_results(rows, ["a", "b", "c"]), n_resamples=200).set_index(["metric", "variant"])
    value = lambda m, var: got.loc[(m, var), "value"]  # noqa: E731
    # official PG: 1, 0, 0 (c: the first arg-max is token 0); official MRR: 1/2, 1/2, 1/3
    assert value("pg", "default") == pytest.approx(100 / 3)
    assert value("mrr", "default") == pytest.approx(100 * (1 / 2 + 1 / 2 + 1 / 3) / 3)
    # corrected PG: 1/2, 0, 1/3; corrected MRR: 3/4, 1/2, (1 + 1/2 + 1/3) / 3
    assert value("pg", "default_corrected_ties") == pytest.approx(100 * (1 / 2 + 1 / 3) / 3)
    assert value("mrr", "default_corrected_ties") == pytest.approx(100 * (3 / 4 + 1 / 2 + 11 / 18) / 3)
    # RMA: 1/2, 0.2 / 0.7, 0 (no positive relevance, counted); PTA: 2/3 each (b: token 1 is > 0 but no evidence)
    assert value("rma", "default") == pytest.approx(100 * (1 / 2 + 2 / 7) / 3)
    assert value("pta", "default") == pytest.approx(100 * 2 / 3)
    assert value("tied_token_share", "default") == pytest.approx(100 * (2 / 3 + 0 + 1) / 3)
    assert got.loc[("pg", "default"), "n"] == 3 and got.loc[("pg", "default"), "n_nonfinite"] == 0
    # with_special: the special token is first everywhere; official ranks of the evidence 3, 3 and 4 - 1 + 1
    assert value("pg", "with_special") == 0.0
    assert value("mrr", "with_special") == pytest.approx(100 * (1 / 3 + 1 / 3 + 1 / 4) / 3)
    row = got.loc[("rma", "default")]
    assert row["ci_low"] <= row["value"] <= row["ci_high"]
    # per_sample() of the table path is each sample's own value in percent (what paired comparisons use)
    (pg,) = [m for m in metric_samples(_results(rows, ["a", "b", "c"]))
             if (m.metric, m.variant) == ("mrr", "default_corrected_ties")]
    assert pg.per_sample() == pytest.approx([75.0, 50.0, 100 * 11 / 18])


def test_a_nonfinite_sample_is_counted_not_averaged():
    s = _t([[1.0, 0.0], [float("nan"), 0.0]])
    e, v = _b([[T, F_], [T, F_]]), _b([[T, T]] * 2)
    got = table_metrics(_results(evidence_rows(s, e, v, "default"), ["a", "b"]), n_resamples=200)
    row = got.set_index(["metric", "variant"]).loc[("pg", "default")]
    assert row["value"] == 100.0 and row["n"] == 1 and row["n_nonfinite"] == 1


def _same_numbers_on(device, tokens=12):
    """Every evidence metric and the tie share of a tie-heavy batch on ``device`` against the CPU, within float64
    rounding, not bitwise (CUDA's reductions and scans associate in another order than the CPU's). Each value is
    a count ratio (pointing game, official MRR, PTA, tie share: exact, so equal) or, for the relevance mass and the
    corrected MRR, a sum of at most ``tokens`` non-negative terms, each a cumulative product of at most ``tokens``
    correctly rounded factors divided once: within about ``3 * tokens`` float64 unit roundoffs of the exact value
    on either device, so the two differ by at most ``3 * tokens`` ulps (bound used: ``4 * tokens`` ulps of the
    value, relative)."""
    s, e, v = _tie_heavy_batch(3, batch=100, tokens=tokens)
    bound = dict(rtol=4 * tokens * torch.finfo(torch.float64).eps, atol=0.0)
    for fn in (lambda *a: pointing_game(*a), lambda *a: pointing_game(*a, ties="corrected"), lambda *a: mrr(*a),
               lambda *a: mrr(*a, ties="corrected"), relevance_mass_accuracy, per_token_accuracy):
        cpu, other = fn(s, e, v), fn(s.to(device), e.to(device), v.to(device))
        assert other.device.type == torch.device(device).type
        torch.testing.assert_close(other.cpu(), cpu, **bound)
    torch.testing.assert_close(tied_token_share(s.to(device), v.to(device)).cpu(), tied_token_share(s, v), **bound)


def test_the_cpu_twin_of_the_cuda_comparison():
    """The CPU twin of the CUDA test below: the same code path with the CPU as the other device (trivially equal;
    it keeps the comparison itself running on every machine)."""
    _same_numbers_on("cpu")


@pytest.mark.cuda
def test_cuda_gives_the_cpu_numbers():
    """CUDA against the CPU, within float64 rounding (:func:`_same_numbers_on`)."""
    _same_numbers_on("cuda")
