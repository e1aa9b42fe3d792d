"""The evidence benchmark's plan (docs/evidence.md "Table 1", docs/planning.md): the cells of ``evidence_table1`` with
the paper's precision and exact rules, the refusal of ``alti_logit`` on masked LMs before any load, the public
model sizes the plan prices, and ALTI's memory in the peak estimate."""
from dataclasses import replace

import pytest

from palrp_bench.errors import BadInputError
from palrp_bench.attributors.alti import alti_memory
from palrp_bench.planning.cost import (Work, architecture_of, hf_architecture, load_constants,
                                       peak_memory, sample_work)
from palrp_bench.runner.plan import plan_cells
from runner.harness import compose_cfg

#: parameters of the evidence models as their model cards / ``num_parameters()`` give them (BERT with its MLM head)
PUBLISHED = {"google-bert/bert-base-uncased": ("masked_lm", 109_514_298),
             "google-bert/bert-large-uncased": ("masked_lm", 335_174_458),
             "openai-community/gpt2": ("causal", 124_439_808), "openai-community/gpt2-medium": ("causal", 354_823_168),
             "openai-community/gpt2-large": ("causal", 774_030_080), "openai-community/gpt2-xl": ("causal", 1_557_611_200),
             "meta-llama/Llama-3.2-1B": ("causal", 1_235_814_400), "meta-llama/Llama-3.2-3B": ("causal", 3_212_749_824),
             "meta-llama/Llama-3.1-8B": ("causal", 8_030_261_248)}


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    return plan_cells(compose_cfg(tmp_path_factory.mktemp("run"), "experiment=evidence_table1"))


def test_table1_has_the_published_cells_with_the_papers_settings(cells):
    keys = {c.key for c in cells}
    assert len(cells) == len(keys) == 9 * 3 * 5 - 3  # nine models, three tasks, five methods; three "-" cells
    for model in ("gpt2_xl", "llama3_2_3b", "llama3_1_8b"):
        assert f"{model}/qa/alti_logit" not in keys and f"{model}/ra/alti_logit" in keys
    assert not any(k.startswith("bert") and k.endswith("/alti_logit") for k in keys)
    assert {"bert_base_uncased/qa/alti", "gpt2/qa/alti_logit", "llama3_2_1b/sva/gradient_l2"} <= keys
    full = {"llama3_2_3b", "llama3_1_8b"}
    for c in cells:
        default = "bfloat16" if c.model.name.startswith("llama") else "float32"
        expected = "float64" if c.task.name != "qa" and c.model.name not in full else default
        assert c.model.dtype.value == expected, c.key
        assert c.metrics == ("evidence",) and c.task.contrastive and c.stabilizer_choice == "none"


def test_a_single_cell_keeps_its_block_dtype_unless_the_command_line_sets_one(tmp_path):
    base = ("experiment=evidence_table1", "model=gpt2", "task=ra", "method=attnlrp")
    (cell,) = plan_cells(compose_cfg(tmp_path, *base))
    assert cell.model.dtype.value == "float64" and cell.stabilizer_choice == "none"
    (cell,) = plan_cells(compose_cfg(tmp_path, *base, "model.dtype=bfloat16", "stabilizers=official"))
    assert cell.model.dtype.value == "bfloat16" and cell.stabilizer_choice == "official"
    (cell,) = plan_cells(compose_cfg(tmp_path, "model=gpt2", "task=ra", "method=attnlrp"))  # not the experiment's
    assert cell.model.dtype.value == "float32"


def test_alti_logit_on_a_masked_lm_is_refused_before_any_load(tmp_path):
    with pytest.raises(BadInputError, match="cannot explain model bert_base_uncased .masked_lm.") as caught:
        plan_cells(compose_cfg(tmp_path, "model=bert_base_uncased", "task=sva", "method=alti_logit"))
    assert "method=alti" in caught.value.fix and "\n" not in str(caught.value)


def test_the_evidence_models_are_priced_at_their_public_sizes():
    known = load_constants().architectures
    for source, (kind, params) in PUBLISHED.items():
        assert hf_architecture(dict(known[source]), kind).params == params, source


def test_altis_memory_replaces_the_backwards_in_the_peak(cells):
    constants = load_constants()
    cell = next(c for c in cells if c.key == "gpt2_xl/ra/alti_logit")
    lrp = next(c for c in cells if c.key == "gpt2_xl/ra/attnlrp")
    arch = architecture_of(cell.model, constants)
    work = sample_work(cell, arch, constants)
    assert work.attributor == "alti_logit" and sample_work(lrp, arch, constants).attributor == "lrp"

    def peak(tokens):
        w = replace(work, explain_tokens=float(tokens), forward_tokens=float(tokens))
        return peak_memory(cell.model, arch, w, constants, "cuda:0", 8, 64)

    # the formula of docs/baselines.md "ALTI and ALTI-Logit": what a longer input adds is what the formula adds
    # (float64 ra: 8 bytes an element; forward activations of 64 rows stay below the explanation at these lengths)
    for short, long in ((200, 400), (400, 512)):
        assert peak(long) - peak(short) == pytest.approx(alti_memory(arch, long, 8, 8) - alti_memory(arch, short, 8, 8),
                                                         rel=1e-9)
    b, T, L, H, D = 8, 512, 48, 25, 1600
    by_hand = (b * (L * (H * T * T * 8 + 9 * T * D * 8 + 8 * T * T) + H * T * D * 8) + 2 * 2 ** 24 * 8
               + b * H * T * T * 12)
    assert alti_memory(arch, T, b, 8) == pytest.approx(by_hand, rel=1e-12)


def test_qa_pools_are_counted_from_the_split_the_task_reads(tmp_path):
    """qa reads SQuAD v2's train split by default (86,821 answerable questions) capped at the paper's 40k;
    split=validation: its 5,928 answerable questions."""
    from palrp_bench.planning.budget import pool_size

    (train,) = plan_cells(compose_cfg(tmp_path, "model=gpt2", "task=qa", "method=attnlrp"))
    assert train.task.options["split"] == "train" and pool_size(train.task) == 40000
    (validation,) = plan_cells(compose_cfg(tmp_path, "model=gpt2", "task=qa", "method=attnlrp",
                                           "task.options.split=validation"))
    assert pool_size(validation.task) == 5928
    default = replace(train.task, options={}, pool_size=None)        # a task config that names no split
    assert pool_size(default) == 86821
